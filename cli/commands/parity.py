"""`spectally parity SYNC_LOG ASYNC_LOG`: the RFC's promise, request by request, on a user's
own pair of runs (engine_bridge/compare/parity.py does the work)."""

from __future__ import annotations

import json
import sys

import click
from spectally.exit_codes import ExitCode

from . import exits, options

EPILOG = exits.epilog(
    "0 every request whose token story is the same in both runs has the same rfc"
    " counters; 1 a request with the same story and different counters (the request and block"
    " are named), or a log that does not replay against the reference; 2 bad input or usage"
    " (a malformed log, not a sync and an async log, different k, no request in common);"
    " 3 a log without its totals record (everything present agreed)"
)


@click.command(epilog=EPILOG)
@click.argument("sync_log", type=click.Path(dir_okay=False, allow_dash=False))
@click.argument("async_log", type=click.Path(dir_okay=False, allow_dash=False))
@click.option("--json", "as_json", is_flag=True, help="machine-readable report on stdout")
@click.option("-v", "--verbose", is_flag=True, help="one line per request, equal ones included")
@options.force_profile
def parity(
    sync_log: str, async_log: str, as_json: bool, verbose: bool, force_profile: str | None
) -> None:
    """Compare each request of a sync run with the same request of an async run of the same
    workload: where the token story (applied blocks, preemptions, how the request ended) is the
    same, every rfc counter must be the same; where it is not, show the first place the
    stories part and what differs."""
    from spectally.engine_bridge.compare.parity import (
        BadInput,
        LogDiverges,
        compare_runs,
        read_run,
        render,
        report_json,
    )

    try:
        runs = [read_run(path, force_profile=force_profile) for path in (sync_log, async_log)]
        report = compare_runs(runs[0], runs[1])
    except BadInput as exc:
        click.echo(f"spectally parity: {exc}", err=True)
        sys.exit(int(ExitCode.BAD_INPUT))
    except LogDiverges as exc:
        click.echo(f"spectally parity: {exc}", err=True)
        sys.exit(int(ExitCode.DIVERGENCE))
    except ValueError as exc:
        click.echo(f"spectally parity: {exc}", err=True)
        sys.exit(int(ExitCode.BAD_INPUT))
    if force_profile is not None:
        click.echo(f"spectally parity: both logs replayed under {force_profile} FORCED", err=True)
    if as_json:
        click.echo(json.dumps(report_json(report), indent=2))
    else:
        click.echo(render(report, verbose=verbose))
    sys.exit(int(report.exit_code))
