"""``spectally replay`` and the ``spectally import`` group: the commands that read engines' logs."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click
from spectally.engine_bridge.steplog.records import BadInput
from spectally.exit_codes import ExitCode

from . import exits, options
from .import_engines import sglang_cmd, trtllm_cmd
from .import_llamacpp import llamacpp_cmd

if TYPE_CHECKING:
    from spectally.engine_bridge.fleet import FileOutcome
    from spectally.engine_bridge.importers.findings import Finding

EXIT_HELP = exits.epilog(
    "0 every log agrees with the reference; 1 a divergence (the first divergent"
    " line is printed as file:line:column with the record, expected and actual counters and"
    " the reference state of the request); 2 bad input or usage (a malformed, oversized or"
    " misplaced record, an unreadable or corrupt file, a header whose engine version has no"
    " counting profile (the message names --force-profile), printed as file:line:column:"
    " reason; an unknown --force-profile);"
    " 3 incomplete (the log ends before its totals record: what was present agreed)",
    several=True,
)
IMPORT_EXIT_HELP = exits.epilog(
    "0 every check holds (notes explain what is tolerated); 1 a violation;"
    " 2 bad input or usage (unreadable, malformed or oversized input, or nothing to check,"
    " printed as file:line:column: reason)",
    several=True,
)


@click.command(epilog=EXIT_HELP)
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--metrics",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="a Prometheus text scrape taken after the run; its last scrape must equal the"
    " reference's vllm-legacy totals (per log: the series of the header's engine_index; several"
    " logs: also their merged totals against the sum over every engine label)",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per run")
@click.option(
    "--keep-going",
    type=click.IntRange(min=1),
    default=1,
    metavar="N",
    help="report up to N divergences per log instead of stopping at the first",
)
@click.option(
    "--reference",
    is_flag=True,
    help="replay every record through the reference machine, one event at a time (the"
    " columnar checker is skipped; same verdicts, slower)",
)
@options.force_profile
@click.option(
    "--check-invariants",
    is_flag=True,
    help="also assert every reference invariant after every event (slow; always at the end)",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="replay up to N logs at once in worker processes (default: the usable cores);"
    " 1 replays them one after another in this process. Same reports in the same order.",
)
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="auto",
    default=None,
    metavar="[ADDRESS]",
    help="replay each log as a task on an existing Ray cluster (ADDRESS as ray.init takes it:"
    " auto (default: RAY_ADDRESS or the cluster this machine joined), ray://HOST:10001, ...);"
    " needs spectally[ray] here and on the workers (docs/fleet.md). Write --ray=ADDRESS, or"
    " --ray after the files.",
)
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="OUT",
    help="also write one self-contained HTML report (verdict, totals, plots; several logs:"
    " the fleet too) to OUT (docs/observe.md); needs spectally[observe]",
)
def replay(
    files: tuple[str, ...],
    metrics: str | None,
    as_json: bool,
    keep_going: int,
    reference: bool,
    check_invariants: bool,
    force_profile: str | None,
    jobs: int | None,
    ray_address: str | None,
    html_out: str | None = None,
) -> None:
    """Replay step logs (NDJSON, gzip or - for stdin) through the reference.

    Every record is translated into reference events; after each one the engine's own
    numbers (scheduled, invalid, accepted, step_stats, totals) are asserted against the
    reference's profile for that engine version (vllm-legacy for vLLM <= 0.33, vllm-0.34 for
    0.34; reference/profile.py declares them; a newer version is refused unless
    --force-profile names the profile to assume), while the rfc
    counters are computed alongside. The report ends with totals under both profiles,
    derived metrics and the shift from legacy to rfc, explained. A columnar checker (the same
    rules over whole arrays) judges agreeing logs fast; anything else is replayed through the
    reference machine, which writes the report (--reference: always).

    Several logs (one per engine core, data-parallel rank, replica, day) are replayed in
    parallel (--jobs, --ray); each log's report is the one a sequential run prints, in the
    order given, followed by the fleet report: every log's verdict, their totals merged with
    the reference's merge (both profiles), per engine (header engine_index and config), and
    the legacy -> rfc shift of the fleet.
    """
    from spectally.engine_bridge.fleet import (
        BackendUnavailable,
        ReplayOptions,
        copy_notes,
        fleet_summary,
        render_fleet,
        run_fleet,
        usable_cores,
    )

    if ray_address is not None and jobs is not None:
        raise click.UsageError("--jobs and --ray exclude each other (Ray schedules the tasks)")
    if ray_address is not None and (ray_address == "-" or os.path.exists(ray_address)):
        raise click.UsageError(
            f"--ray took {ray_address!r} as the cluster address; write --ray=ADDRESS (or"
            " --ray=auto), or put --ray after the files"
        )
    if html_out is not None:
        _check_html_out(html_out, files, metrics)
    options = ReplayOptions(
        max_divergences=keep_going,
        metrics=metrics,
        check_invariants=check_invariants,
        reference=reference,
        force_profile=force_profile,
    )

    for note in copy_notes(files) if len(files) > 1 else []:
        click.echo(f"spectally replay: {note}", err=True)

    def show(outcome: FileOutcome) -> None:
        if not as_json:
            click.echo(outcome.report, file=sys.stderr if outcome.report_to_stderr else sys.stdout)

    try:
        outcomes = run_fleet(
            list(files),
            options,
            jobs=usable_cores() if jobs is None else jobs,
            ray_address=ray_address,
            progress=None if not as_json else False,
            on_outcome=show,
        )
    except KeyboardInterrupt:
        click.echo("spectally replay: interrupted (workers stopped)", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except BadInput as exc:  # a log given twice (checked before any replay)
        _bad(exc)
    except BackendUnavailable as exc:
        click.echo(f"spectally replay: {exc}", err=True)
        if exc.stuck:  # Ray's connect is still retrying in a thread that exit would wait for
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(int(ExitCode.BAD_INPUT))
        sys.exit(ExitCode.BAD_INPUT)
    if html_out is not None:
        from spectally.engine_bridge.observe.html import write_html

        try:
            write_html(html_out, outcomes, metrics)
        except BadInput as exc:
            _bad(exc)
    if len(outcomes) == 1:
        if as_json:
            click.echo(json.dumps(outcomes[0].result, indent=2))
        sys.exit(ExitCode(outcomes[0].exit_code))
    summary = fleet_summary(outcomes, metrics)
    if as_json:
        click.echo(json.dumps({"files": [o.result for o in outcomes], "fleet": summary}, indent=2))
    else:
        click.echo(render_fleet(summary))
    sys.exit(ExitCode(summary["exit_code"]))


def _check_html_out(html_out: str, files: tuple[str, ...], metrics: str | None) -> None:
    """--html is none of the logs and not the --metrics scrape (exit 2 before any replay)."""
    from spectally.engine_bridge.steplog.outputs import check_outputs

    try:
        check_outputs(
            [("--html", html_out)], [*(("LOG", f) for f in files), ("--metrics", metrics)]
        )
    except BadInput as exc:
        _bad(exc)


@click.group("import", epilog=IMPORT_EXIT_HELP)
def import_group() -> None:
    """Check what a stock engine already emits: vLLM's Prometheus scrapes, 'SpecDecoding
    metrics:' log lines and per-request spec-decode metrics; llama-server's traced log, turned
    into a step log (plain, gzip or - for stdin).

    Each check prints file:line: VERDICT check: message.
    """


def _finish(findings: list[Finding], as_json: bool, verbose: bool) -> None:
    from spectally.engine_bridge.importers.findings import exit_code, render_findings

    if as_json:
        click.echo(json.dumps([f.to_dict() for f in findings], indent=2))
    else:
        click.echo(render_findings(findings, verbose=verbose))
    sys.exit(exit_code(findings))


def _bad(exc: BadInput) -> None:
    click.echo(str(exc), err=True)
    sys.exit(ExitCode.BAD_INPUT)


def _run_import(
    check: Callable[[], list[Finding]],
    as_json: bool,
    quiet: bool,
    inputs: list[tuple[str, str | None]],
) -> None:
    """Run one importer's check on ``inputs`` (``(what, path)``, none of them one file twice):
    its findings printed by `_finish`, bad input as `_bad`."""
    from spectally.engine_bridge.importers.inputs import refuse_repeats

    try:
        refuse_repeats(inputs)
        findings = check()
    except BadInput as exc:
        _bad(exc)
        return
    _finish(findings, as_json, not quiet)


def _named(what: str, files: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """``("LOG 2", path)`` for each of several arguments, ``("LOG", path)`` for one."""
    if len(files) == 1:
        return [(what, files[0])]
    return [(f"{what} {i}", path) for i, path in enumerate(files, start=1)]


_json = click.option("--json", "as_json", is_flag=True, help="print findings as JSON")
_quiet = click.option("--quiet", "-q", is_flag=True, help="print only notes and violations")


@import_group.command("prometheus", epilog=IMPORT_EXIT_HELP)
@click.argument("files", nargs=-1, required=True, metavar="SCRAPE...")
@_json
@_quiet
def prometheus_cmd(files: tuple[str, ...], as_json: bool, quiet: bool) -> None:
    """Check Prometheus text scrapes (one or many, in time order) of vllm:spec_decode_* (through
    Ray Serve: ray_vllm_spec_decode_*): counter invariants per label set, monotonicity across
    scrapes."""
    from spectally.engine_bridge.importers import prometheus

    _run_import(
        lambda: prometheus.check_files(list(files)), as_json, quiet, _named("SCRAPE", files)
    )


@import_group.command("logs", epilog=IMPORT_EXIT_HELP)
@click.argument("files", nargs=-1, required=True, metavar="LOG...")
@click.option(
    "--metrics",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="a final Prometheus scrape to reconcile Σ Accepted / Σ Drafted with",
)
@_json
@_quiet
def logs_cmd(files: tuple[str, ...], metrics: str | None, as_json: bool, quiet: bool) -> None:
    """Check vLLM's periodic spec-decode log lines, every layout from V0 to 0.34
    (docs/log-layouts.md), for internal consistency, rounding tolerated and explained; each line
    names its layout."""
    from spectally.engine_bridge.importers import logs

    inputs = [*_named("LOG", files), ("--metrics", metrics)]
    _run_import(lambda: logs.check_files(list(files), metrics), as_json, quiet, inputs)


@import_group.command("requests", epilog=IMPORT_EXIT_HELP)
@click.argument("files", nargs=-1, required=True, metavar="JSON...")
@click.option(
    "--metrics",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="a final Prometheus scrape to reconcile the per-request sums with",
)
@_json
@_quiet
def requests_cmd(files: tuple[str, ...], metrics: str | None, as_json: bool, quiet: bool) -> None:
    """Check per-request spec-decode metrics (RequestOutput dumps or OpenAI-API responses);
    'detailed' per-step lists are replayed through the reference's step rules."""
    from spectally.engine_bridge.importers import requests
    from spectally.engine_bridge.replay.detailed import replay_requests

    inputs = [*_named("JSON", files), ("--metrics", metrics)]
    _run_import(
        lambda: requests.check_files(list(files), metrics, replay_requests), as_json, quiet, inputs
    )


for _sub in (llamacpp_cmd, sglang_cmd, trtllm_cmd):
    import_group.add_command(_sub)
