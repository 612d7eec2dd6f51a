"""``spectally step``: one request-step through the reference, with the reference alone."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from spectally.exit_codes import ExitCode
from spectally.reference.profile import PROFILES as _DECLARED

from . import exits


def _bounded(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """A draft count of `spectally step`, at most limits.MAX_K (checked before anything is
    sized by it: the reference builds per-draft lists). Negative counts are the reference's
    to reject (`StepQuery.violations`)."""
    from spectally.engine_bridge.steplog.limits import MAX_K

    if value is not None and value > MAX_K:
        raise click.BadParameter(f"{value} exceeds the limit {MAX_K} (k at most {MAX_K})")
    return value


# The reference's reason for each option's negative count (reference/step.py, admissibility).
_NEGATIVE = {
    "proposed": "proposed must be >= 0",
    "grammar_valid": "grammar-valid prefix must be >= 0",
    "scheduled": "schedule cap must be >= 0",
    "av_verify": "AV cap must be >= 0",
    "accepted": "accepted must be >= 0",
}


def _given(
    reasons: list[str],
    proposed: int,
    grammar_valid: int | None,
    scheduled: int | None,
    av_verify: int | None,
    accepted: int,
) -> list[str]:
    """The reasons that are the caller's: where a count given is negative, only the negative
    counts given. An omitted cap defaults to the proposal, so `--proposed -1` alone also
    failed the grammar-valid prefix, the schedule cap and the AV cap (and the bound on
    accepted they set): options the caller never wrote."""
    given = {
        "proposed": proposed,
        "grammar_valid": grammar_valid,
        "scheduled": scheduled,
        "av_verify": av_verify,
        "accepted": accepted,
    }
    negative = {_NEGATIVE[name] for name, value in given.items() if value is not None and value < 0}
    return [reason for reason in reasons if reason in negative] or reasons


@click.command(
    epilog=exits.epilog(
        "0 the counters are printed; 2 inadmissible input or usage (a count beyond the limit"
        " 1024 included)"
    )
)
@click.option(
    "--mode",
    type=click.Choice(["sync", "async"]),
    required=True,
    help="scheduling mode (where the grammar stage sits)",
)
@click.option(
    "--proposed",
    type=int,
    callback=_bounded,
    required=True,
    metavar="N",
    help="drafts the drafter proposed",
)
@click.option(
    "--grammar-valid",
    type=int,
    callback=_bounded,
    default=None,
    metavar="G",
    help="longest grammar-valid prefix of the proposal (omit: no structured output)",
)
@click.option(
    "--scheduled",
    type=int,
    callback=_bounded,
    default=None,
    metavar="S",
    help="drafts the schedule allows (omit: no cut)",
)
@click.option(
    "--av-verify",
    type=int,
    callback=_bounded,
    default=None,
    metavar="V",
    help="scheduled drafts AV sends to the target (omit: AV off)",
)
@click.option(
    "--accepted",
    type=int,
    callback=_bounded,
    required=True,
    metavar="A",
    help="drafts the target accepted (bonus token excluded)",
)
@click.option(
    "--profile",
    "profile_name",
    type=click.Choice(sorted(_DECLARED)),
    default="vllm-legacy",
    show_default=True,
    help="the engine release's counting profile (reference/profile.py): its pipeline and its"
    " own counters, printed and keyed under the profile's name",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="print JSON: \"rfc\" (the RFC's counters), the profile's name (the engine's own"
    ' counters under that profile, e.g. "vllm-legacy") and "token_fates"',
)
def step(
    mode: str,
    proposed: int,
    grammar_valid: int | None,
    scheduled: int | None,
    av_verify: int | None,
    accepted: int,
    profile_name: str,
    as_json: bool,
) -> None:
    """Evaluate one request-step: each draft's fate, the rfc counters and the engine's own
    counters under the chosen profile (labelled with the profile's name)."""
    from spectally.reference.machine import step_counts
    from spectally.reference.profile import PROFILES
    from spectally.reference.step import Mode, StepQuery, token_fates

    profile = PROFILES[profile_name]

    query = StepQuery(
        mode=Mode(mode),
        proposed=proposed,
        accepted=accepted,
        grammar_valid=grammar_valid,
        scheduled=scheduled,
        av_verify=av_verify,
    )
    reasons = _given(query.violations(), proposed, grammar_valid, scheduled, av_verify, accepted)
    if reasons:
        # One line, non-zero exit: no engine can produce these stage inputs.
        click.echo(f"spectally step: inadmissible input: {'; '.join(reasons)}", err=True)
        sys.exit(ExitCode.BAD_INPUT)
    inputs = query.inputs()
    counts = step_counts(query.mode, inputs, profile)
    # step_counts names the engine's own counters "vllm-legacy" whatever the profile; they
    # are the chosen profile's, so they carry its name.
    result: dict[str, Any] = {"rfc": counts["rfc"], profile_name: counts["vllm-legacy"]}
    fates = token_fates(query.mode, inputs, profile)
    result["token_fates"] = fates
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"mode {mode}: {proposed} drafted")
    if profile_name != "vllm-legacy":
        click.echo(f"profile {profile_name}: the release's pipeline and its own counters")
    for i, fate in enumerate(fates):
        click.echo(f"  draft {i}: {fate}")
    rfc, own = result["rfc"], result[profile_name]
    width = max(len("vllm-legacy"), len(profile_name))
    click.echo(
        f"{'rfc':<{width}} drafted {rfc['drafted']}  verified {rfc['verified']}  "
        f"accepted {rfc['accepted']}  spec_steps {rfc['spec_steps']}"
    )
    click.echo(
        f"{profile_name:<{width}} drafted {own['drafted']}  accepted {own['accepted']}  "
        f"spec_steps {own['spec_steps']}"
    )
