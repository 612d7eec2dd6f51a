"""``spectally compare LOG_A LOG_B``: two engines' (or releases') acceptance figures.

Both step logs are replayed first; the comparison is in `spectally.engine_bridge.compare.engines`.
"""

from __future__ import annotations

import json
import sys

import click
from spectally.exit_codes import ExitCode, combine

from . import exits, options

EXIT_HELP = exits.epilog(
    "0 both logs replay AGREE and the comparison is printed (comparable or not);"
    " 1 a log diverges from its profile (its figures cannot be trusted; the divergence is"
    " printed); 2 bad input or usage; 3 a log is incomplete",
    several=True,
)


@click.command("compare", epilog=EXIT_HELP)
@click.argument("log_a", type=click.Path(dir_okay=False))
@click.argument("log_b", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", is_flag=True, help="print JSON")
@options.force_profile
def compare(log_a: str, log_b: str, json_out: bool, force_profile: str | None) -> None:
    """Say whether two step logs' acceptance figures are comparable as their engines report
    them, and give both in the RFC's terms side by side with every difference explained."""
    from spectally.engine_bridge.compare.engines import Side, as_json, render
    from spectally.engine_bridge.replay.dispatch import render_summary, replay_file

    if log_a == log_b == "-":  # the second read of stdin finds it empty: "empty log"
        raise click.UsageError("stdin is read once: give - for at most one of LOG_A and LOG_B")

    results = [
        replay_file(p, reference=True, progress=False, force_profile=force_profile)
        for p in (log_a, log_b)
    ]
    codes = [ExitCode(r.exit_code) for r in results]
    if any(c is not ExitCode.OK for c in codes):
        for r in results:
            if r.exit_code:
                click.echo(render_summary(r), err=True)
        sys.exit(combine(codes))
    a, b = Side.of("A", results[0]), Side.of("B", results[1])
    if json_out:
        click.echo(json.dumps(as_json(a, b), indent=2))
    else:
        click.echo(render(a, b))
    sys.exit(ExitCode.OK)
