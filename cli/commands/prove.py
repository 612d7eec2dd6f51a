"""``spectally prove``: run the Z3 property suite and report one line per property.

Loaded lazily by ``spectally.commands``, so z3 is needed only here.
Whether an obligation is proved, refuted or unknown is decided by Z3's resource budget
(``--rlimit``, deterministic), never by the clock; ``--timeout`` is a far-away safety net.
Exit status: 0 when every expected-proved property is proved and every expected-refuted one is
refuted with a witness that replays through the reference; 1 otherwise.
"""

from __future__ import annotations

import json
import sys
import time

import click
from spectally.exit_codes import ExitCode
from spectally.proofs.obligations import DEFAULT_RLIMIT, SAFETY_TIMEOUT_MS, Budget
from spectally.proofs.runner import run_all, select

from . import exits


@click.command(
    epilog=exits.epilog(
        "0 every property as expected (proved, or refuted where a refutation is expected);"
        " 1 a property is not as expected (the counterexample is printed); 2 usage"
    )
)
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option(
    "--only",
    multiple=True,
    metavar="PREFIX",
    help="run only properties whose name starts with PREFIX (repeatable), e.g. trace:INV-5",
)
@click.option("--verbose", "-v", is_flag=True, help="list every obligation of every property")
@click.option(
    "--rlimit",
    type=click.IntRange(min=1),
    default=DEFAULT_RLIMIT,
    show_default=True,
    help="Z3 resource budget per solver check (deterministic: decides unknown, not the clock)",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=SAFETY_TIMEOUT_MS / 1000,
    show_default=True,
    help="wall-clock safety net per solver check, seconds (only stops a hang)",
)
def prove(
    as_json: bool, only: tuple[str, ...], verbose: bool, rlimit: int, timeout_s: float
) -> None:
    """Prove the counting invariants with Z3 (symbolic k, every admissible stage input, both
    modes) and refute vLLM 0.32/0.33's counting with replayable witnesses."""
    props = select(only)
    if not props:
        raise click.UsageError(f"no property matches {', '.join(only)}")
    start = time.perf_counter()
    results = run_all(props, Budget(rlimit, max(1, int(timeout_s * 1000))))
    total = time.perf_counter() - start
    ok = all(r.ok for r in results)
    if as_json:
        payload = {
            "properties": [r.to_json() for r in results],
            "ok": ok,
            "total_seconds": round(total, 4),
            "counts": {
                verdict: sum(1 for r in results if r.verdict == verdict)
                for verdict in ("proved", "refuted", "unknown")
            },
        }
        click.echo(json.dumps(payload, indent=2))
    else:
        for r in results:
            for line in r.lines(verbose=verbose):
                click.echo(line)
        proved = sum(1 for r in results if r.verdict == "proved")
        refuted = sum(1 for r in results if r.verdict == "refuted")
        unknown = len(results) - proved - refuted
        bad = [f"{r.name} ({r.mode})" for r in results if not r.ok]
        click.echo(
            f"{len(results)} properties: {proved} proved, {refuted} refuted, {unknown} unknown"
            f" in {total:.2f}s; "
            + ("all as expected" if ok else "NOT as expected: " + ", ".join(bad))
        )
    if not ok:
        sys.exit(ExitCode.DIVERGENCE)
