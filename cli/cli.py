"""The one `spectally` command. Subcommands that need optional dependencies (z3, the bridge)
are imported only when invoked, so `spectally step` works with the reference alone."""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import click
from spectally import __version__

# name -> ("module:attribute" of a click command loaded on first use, help, extra it needs).
LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "vectors": (
        "spectally.spec.vectors_cli:vectors",
        "check the reference against every vector",
        "",
    ),
    "prove": ("spectally.proofs.cli:prove", "prove the invariants with Z3", "proofs"),
    "replay": (
        "spectally.engine_bridge.cli:replay",
        "replay engine logs through the reference",
        "bridge",
    ),
    "import": (
        "spectally.engine_bridge.cli:import_group",
        "check what engines already emit",
        "bridge",
    ),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS:
            target, _, extra = LAZY_COMMANDS[cmd_name]
            module_name, attr = target.split(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:  # a missing optional dependency: say which (exit 2)
                raise click.UsageError(
                    f"'{cmd_name}' is unavailable ({exc}); install spectally[{extra or 'dev'}]"
                ) from exc
            command: click.Command = getattr(module, attr)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, LAZY_COMMANDS[name][1]) for name in sorted(LAZY_COMMANDS)]
        for name in super().list_commands(ctx):
            cmd = super().get_command(ctx, name)
            rows.append((name, cmd.get_short_help_str() if cmd else ""))
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="spectally")
def main() -> None:
    """spectally: the specification and executable reference of speculative-decoding
    counters (drafted >= verified >= accepted)."""


@main.command()
@click.option(
    "--mode",
    type=click.Choice(["sync", "async"]),
    required=True,
    help="scheduling mode (where the grammar stage sits)",
)
@click.option(
    "--proposed", type=int, required=True, metavar="N", help="drafts the drafter proposed"
)
@click.option(
    "--grammar-valid",
    type=int,
    default=None,
    metavar="G",
    help="longest grammar-valid prefix of the proposal (omit: no structured output)",
)
@click.option(
    "--scheduled",
    type=int,
    default=None,
    metavar="S",
    help="drafts the schedule allows (omit: no cut)",
)
@click.option(
    "--av-verify",
    type=int,
    default=None,
    metavar="V",
    help="scheduled drafts AV sends to the target (omit: AV off)",
)
@click.option(
    "--accepted",
    type=int,
    required=True,
    metavar="A",
    help="drafts the target accepted (bonus token excluded)",
)
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def step(
    mode: str,
    proposed: int,
    grammar_valid: int | None,
    scheduled: int | None,
    av_verify: int | None,
    accepted: int,
    as_json: bool,
) -> None:
    """Evaluate one request-step: each draft's fate and the counters under both profiles."""
    from spectally.reference.machine import step_counts
    from spectally.reference.step import Mode, StepQuery, token_fates

    query = StepQuery(
        mode=Mode(mode),
        proposed=proposed,
        accepted=accepted,
        grammar_valid=grammar_valid,
        scheduled=scheduled,
        av_verify=av_verify,
    )
    reasons = query.violations()
    if reasons:
        # One line, non-zero exit: no engine can produce these stage inputs.
        click.echo(f"spectally step: inadmissible input: {'; '.join(reasons)}", err=True)
        sys.exit(2)
    inputs = query.inputs()
    result: dict[str, Any] = step_counts(query.mode, inputs)
    fates = token_fates(query.mode, inputs)
    result["token_fates"] = fates
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"mode {mode}: {proposed} drafted")
    for i, fate in enumerate(fates):
        click.echo(f"  draft {i}: {fate}")
    rfc, legacy = result["rfc"], result["vllm-legacy"]
    click.echo(
        f"rfc         drafted {rfc['drafted']}  verified {rfc['verified']}  "
        f"accepted {rfc['accepted']}  spec_steps {rfc['spec_steps']}"
    )
    click.echo(
        f"vllm-legacy drafted {legacy['drafted']}  accepted {legacy['accepted']}  "
        f"spec_steps {legacy['spec_steps']}"
    )


if __name__ == "__main__":  # pragma: no cover
    main()
