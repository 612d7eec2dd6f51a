"""``spectally vectors``: check the reference against every conformance vector."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from spectally.exit_codes import ExitCode
from spectally.spec.vectors import VectorFormatError, load, load_defaults, run_vector

from . import exits


@click.command(
    epilog=exits.epilog(
        "0 every vector agrees with the reference; 1 a vector disagrees; 2 a malformed vectors"
        " file or usage"
    )
)
@click.option(
    "--file",
    "path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="vectors file (default: the spec's vectors.json and vectors-shapes.json)",
)
@click.option("--json", "as_json", is_flag=True, help="print per-vector results as JSON")
@click.option("-v", "--verbose", is_flag=True, help="also list the rules each vector pins")
def vectors(path: Path | None, as_json: bool, verbose: bool) -> None:
    """Check the reference against every conformance vector; exit 1 on any mismatch."""
    try:
        docs = [load(path)] if path is not None else load_defaults()
    except VectorFormatError as exc:
        click.echo(f"spectally vectors: malformed vectors file: {exc}", err=True)
        sys.exit(ExitCode.BAD_INPUT)
    results = [
        run_vector(vec, float(doc["float_tolerance"])) for doc in docs for vec in doc["vectors"]
    ]
    failed = [r for r in results if not r.ok]
    if as_json:
        payload = {
            "total": len(results),
            "passed": len(results) - len(failed),
            "failed": len(failed),
            "vectors": [r.to_dict() for r in results],
        }
        click.echo(json.dumps(payload, indent=2))
    else:
        width = max(len(r.name) for r in results)
        for r in results:
            status = "ok  " if r.ok else "FAIL"
            line = f"{status} {r.kind:<5} {r.name:<{width}}  {r.title}"
            if verbose:
                line += f"  [{', '.join(r.rules)}]"
            click.echo(line)
            for m in r.mismatches:
                click.echo(f"       {m}")
        click.echo(f"{len(results) - len(failed)} of {len(results)} vectors passed")
    if failed:
        sys.exit(ExitCode.DIVERGENCE)
