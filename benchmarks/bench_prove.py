"""Time every `spectally prove` property and the whole suite.

    python benchmarks/bench_prove.py [--repeat N] [--crosshair]

Prints one line per property (best of N runs) and the total; exits 1 when the suite takes 60 s
or more (the budget for `spectally prove` on a 2-core CI machine). ``--crosshair`` also times
the default-tier CrossHair checks of tests/proofs/test_crosshair.py (budget: about 2 minutes).
"""

from __future__ import annotations

import argparse
import sys
import time

BUDGET_S = 60.0
CROSSHAIR_BUDGET_S = 120.0


def bench_prove(repeat: int) -> float:
    from spectally.proofs.runner import run_all

    best: dict[tuple[str, str], float] = {}
    verdicts: dict[tuple[str, str], str] = {}
    totals: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        results = run_all()
        totals.append(time.perf_counter() - start)
        for r in results:
            key = (r.name, r.mode)
            best[key] = min(best.get(key, float("inf")), r.seconds)
            verdicts[key] = r.verdict + ("" if r.ok else " (NOT as expected)")
    for (name, mode), seconds in best.items():
        print(f"{name:<30} {mode:<5} {verdicts[(name, mode)]:<10} {seconds:8.3f}s")
    total = min(totals)
    print(f"{'total (best of ' + str(repeat) + ')':<47} {total:8.3f}s  budget {BUDGET_S:.0f}s")
    return total


def bench_crosshair() -> float:
    from spectally.proofs import crosshair_run as ch

    start = time.perf_counter()
    for example in ch.examples():
        t = time.perf_counter()
        ch.check_example(example)
        print(f"crosshair {example.parent.name}/{example.name:<28} {time.perf_counter() - t:7.2f}s")
    t = time.perf_counter()
    ch.run_check(
        "spectally.proofs.contracts.rfc_counts",
        10.0,
        extra=("spectally.proofs.contracts.sync_async_agree",),
    )
    print(f"crosshair contracts (rfc_counts, sync_async_agree)   {time.perf_counter() - t:7.2f}s")
    total = time.perf_counter() - start
    print(f"crosshair total {total:8.2f}s  budget {CROSSHAIR_BUDGET_S:.0f}s")
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--crosshair", action="store_true")
    args = parser.parse_args()
    ok = bench_prove(max(1, args.repeat)) < BUDGET_S
    if args.crosshair:
        ok = bench_crosshair() < CROSSHAIR_BUDGET_S and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
