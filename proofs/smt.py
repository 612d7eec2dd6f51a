"""``python -m spectally.proofs.smt DIR [--only PREFIX ...]``: write every obligation's goal
check as SMT-LIB 2, one file per obligation, to rerun or compare outside `spectally prove`
(e.g. ``z3 DIR/step-INV-5.sync.02.smt2``).

Each property is built in its own name scope, so a file's bytes do not depend on which
properties were built before it (tests/proofs/test_proofs.py checks that).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from pathlib import Path

from .obligations import smtlib
from .properties import Property
from .runner import select


def property_smtlib(p: Property) -> list[str]:
    """SMT-LIB 2 of each obligation of ``p``, in order."""
    return [smtlib(ob) for ob in p.obligations()]


def file_stem(p: Property) -> str:
    return re.sub(r"[^A-Za-z0-9.=_-]+", "-", f"{p.name}.{p.mode}")


def write(out: Path, props: Iterable[Property]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for p in props:
        for index, text in enumerate(property_smtlib(p)):
            path = out / f"{file_stem(p)}.{index:02d}.smt2"
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spectally.proofs.smt", description=__doc__)
    parser.add_argument("out", type=Path, help="folder to write the .smt2 files to")
    parser.add_argument(
        "--only", action="append", default=[], help="property name prefix (repeatable)"
    )
    args = parser.parse_args(argv)
    props = select(args.only)
    if not props:
        parser.error(f"no property starts with {' or '.join(args.only)}")
    written = write(args.out, props)
    print(f"{len(written)} obligations of {len(props)} properties written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
