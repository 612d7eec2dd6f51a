"""``spectally conform CMD...``: run an implementation of spec/CORE.md, in any language,
against the core vectors through the line protocol (spec/conformance/PROTOCOL.md)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click
from spectally.exit_codes import ExitCode
from spectally.spec.conform import LEVELS, KitFormatError, load_vectors, run

from . import exits

EXIT_HELP = exits.epilog(
    "0 every check up to the claimed level passes; 1 a check fails or is"
    " unsupported at a claimed level; 2 usage, a malformed vectors file, or a run that broke"
    " (a response that breaks the protocol, an implementation that cannot start, crashes, or"
    " sends nothing within --timeout)"
)


# A day: a wait the clocks that time it can represent (inf and 1e308 overflow them).
MAX_TIMEOUT = 86400.0


def _finite(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """--timeout is a number: nan passes every range comparison, and would wait for ever."""
    if math.isnan(value):
        raise click.BadParameter("nan is not a number of seconds")
    return value


@click.command(
    "conform",
    epilog=EXIT_HELP,
    context_settings={"allow_interspersed_args": False},
)
@click.argument("command", nargs=-1, required=True)
@click.option(
    "--level",
    type=click.Choice(LEVELS),
    default="L3",
    show_default=True,
    help="the conformance level claimed: every check of this level and below must pass",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True, max=MAX_TIMEOUT),
    callback=_finite,
    default=30.0,
    show_default=True,
    help="seconds to wait for each response (and for the exit after the last one; at most"
    f" {MAX_TIMEOUT:g}, a day)",
)
@click.option(
    "--vectors",
    "path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="core vectors file (default: the kit's spec/conformance/vectors.json)",
)
@click.option("--vector", "only", multiple=True, help="run only this vector (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
def conform(
    command: tuple[str, ...],
    level: str,
    timeout: float,
    path: Path | None,
    only: tuple[str, ...],
    as_json: bool,
) -> None:
    """Run COMMAND (an implementation speaking the line protocol) against every core vector
    and report per conformance level. The Python reference runs the same way:
    `spectally conform python -m spectally.spec.conform_adapter`."""
    try:
        doc = load_vectors(path)
    except KitFormatError as exc:
        click.echo(f"spectally conform: malformed vectors file: {exc}", err=True)
        sys.exit(ExitCode.BAD_INPUT)
    names = {v["name"] for v in doc["vectors"]}
    unknown = sorted(set(only) - names)
    if unknown:
        click.echo(f"spectally conform: no such vector: {', '.join(unknown)}", err=True)
        sys.exit(ExitCode.BAD_INPUT)
    report = run(list(command), doc, timeout, set(only) if only else None)
    if as_json:
        click.echo(json.dumps(report.to_dict(level), indent=2))
    else:
        click.echo(report.render(level))
    sys.exit(report.exit_code(level))
