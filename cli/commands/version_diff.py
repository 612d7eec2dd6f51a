"""``spectally version-diff LOG``: a log's engine counters under each release's counting
(the work is in `spectally.engine_bridge.compare.version_diff`)."""

from __future__ import annotations

import json

import click
from spectally.engine_bridge.compare.version_diff import diff, render, resolve_targets
from spectally.engine_bridge.steplog.records import BadInput
from spectally.exit_codes import ExitCode

from . import exits, options


@click.command(
    "version-diff",
    epilog=exits.epilog(
        "0 the counts are printed; 2 bad input or usage (an unreadable log, a log that does not"
        " replay AGREE under its own profile, a --to release without a counting profile)"
    ),
)
@click.argument("log", type=click.Path(dir_okay=False, allow_dash=False))
@click.option(
    "--to",
    "to",
    multiple=True,
    metavar="VERSION",
    help="a release to compare with (e.g. 0.34.0; repeatable); default: every profile",
)
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@options.force_profile
def version_diff(log: str, to: tuple[str, ...], as_json: bool, force_profile: str | None) -> None:
    """Show what a log's engine counters (vLLM, llama.cpp) would read under another release's
    counting (what a dashboard does on upgrade), beside the RFC's counters."""
    try:
        d = diff(log, resolve_targets(log, to) or None, force_profile)
    except BadInput as exc:
        click.echo(str(exc), err=True)
        raise SystemExit(int(ExitCode.BAD_INPUT)) from None
    click.echo(json.dumps(d, indent=1) if as_json else render(d))
