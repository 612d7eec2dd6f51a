"""Measure how much of Z3's resource budget (rlimit) every obligation uses.

    python -m spectally.proofs.calibrate [--no-mutants] [--rlimit N]

Runs every property on the reference, then (unless ``--no-mutants``) every property under
every mutant of `mutants.py`, each solver check with the default budget (or ``--rlimit``).
Prints the largest per-check use among the obligations the solver settled (holds, fails,
vacuous), those that ran out of the budget (unknown), the margin ``budget / largest use``, and
the mutants' catch table (the same runs as ``python -m spectally.proofs.mutants``). The figures
go into docs/proofs.md ("Solver budget"); rerun after changing a property, a mutant or Z3.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

from .mutants import MUTANTS, decisive, markdown_table, patched
from .obligations import DEFAULT_RLIMIT, Budget
from .runner import PropertyResult, every_property, run_all


@dataclass
class Usage:
    # "run: property (mode) label #check" -> resource units, of every check that answered
    # sat/unsat; and every check that answered unknown (out of budget, or the solver gave up).
    settled: dict[str, int] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    unknown_outcomes: int = 0

    def add(self, run: str, results: list[PropertyResult]) -> None:
        for r in results:
            for o in r.outcomes:
                self.unknown_outcomes += o.status == "unknown"
                for n, (result, use) in enumerate(o.checks):
                    key = f"{run}: {r.name} ({r.mode}) {o.label} #{n}"
                    if result == "unknown":
                        self.unknown.append(f"{key}: {use} ({o.status}: {o.reason})")
                    else:
                        self.settled[key] = use

    def largest(self, run: str = "") -> tuple[str, int]:
        keys = [k for k in self.settled if k.startswith(run)]
        key = max(keys, key=lambda k: self.settled[k])
        return key, self.settled[key]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Z3 resource use of every proof obligation")
    ap.add_argument("--no-mutants", action="store_true", help="only the unmutated reference")
    ap.add_argument("--rlimit", type=int, default=DEFAULT_RLIMIT, help="budget per check")
    args = ap.parse_args(argv)
    budget = Budget(rlimit=args.rlimit)
    usage = Usage()
    start = time.perf_counter()
    reference = run_all(budget=budget)
    usage.add("reference", reference)
    key, most = usage.largest()
    print(f"reference: {len(usage.settled)} settled, largest {most} ({key})", flush=True)
    table: dict[str, list[str]] = {}
    for m in [] if args.no_mutants else MUTANTS:
        t = time.perf_counter()
        with patched(m):
            results = run_all(every_property(), budget)
        usage.add(m.name, results)
        table[m.name] = [f"{r.name} ({r.mode})" for r in results if decisive(r)]
        _, mine = usage.largest(m.name)
        out = sum(res == "unknown" for r in results for o in r.outcomes for res, _ in o.checks)
        print(
            f"{m.name:<34} largest settled {mine:>9}, unknown checks {out:>2},"
            f" {time.perf_counter() - t:6.1f}s",
            flush=True,
        )
    key, most = usage.largest()
    print(f"checks that answered: {len(usage.settled)}; largest use {most} ({key})")
    print(f"budget {budget.rlimit} = {budget.rlimit / most:.0f} x the largest use")
    print(
        f"checks that answered unknown: {len(usage.unknown)}; unknown obligations:"
        f" {usage.unknown_outcomes}"
    )
    for line in usage.unknown:
        print("  " + line)
    if table:
        print(markdown_table(table))
    print(f"{time.perf_counter() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
