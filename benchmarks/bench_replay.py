"""Replay throughput against JSON parse-only, and replay peak memory on large generated logs.

    python benchmarks/bench_replay.py            # rate on 200k records; memory at 1M and 10M
    python benchmarks/bench_replay.py --quick    # rate on 10k records; memory at 10k and 100k

Throughput: one synthetic async log (spectally.engine_bridge.synth) is written to a temporary
file; the same file is read (1) parse-only: every line through ``json.loads`` and (2) replayed
(``replay_file``: validation, translation, the reference engine, every check). Both are
reported as request-steps per second; the ratio replay / parse is the figure of merit (target
>= 0.5).

Memory: each size runs in a fresh subprocess that replays a log generated on the fly (never
written, never held) and reports its peak RSS (VmHWM on Linux, else ``resource.getrusage``;
the whole process: interpreter, imports and the run, not the parent's size). Flat = the peak
does not grow with the log.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from spectally.engine_bridge import synth
from spectally.engine_bridge.records import iter_lines
from spectally.engine_bridge.replay import replay_file


def _peak_rss_mb() -> float:
    """This process's peak RSS. On Linux, VmHWM: the high-water mark of the process's own
    memory since its exec. (``ru_maxrss`` keeps the RSS of the parent at fork/exec, so a child
    started after the throughput run would report at least the parent's size.)"""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return peak / 1024.0


def rate(n_records: int) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("wb", suffix=".ndjson", delete=False) as f:
        path = f.name
        for line in synth.lines(n_records, seed=1):
            f.write(line)
    try:
        request_steps = 0
        t0 = time.perf_counter()
        for _, raw, _ in iter_lines(path):
            if json.loads(raw)["record"] == "request_step":
                request_steps += 1
        parse_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = replay_file(path, progress=False)
        replay_s = time.perf_counter() - t0
        assert result.status == "agree", result.status
    finally:
        os.unlink(path)
    return {
        "records": n_records,
        "request_steps": request_steps,
        "parse_request_steps_per_s": request_steps / parse_s,
        "replay_request_steps_per_s": request_steps / replay_s,
        "ratio": parse_s / replay_s,
    }


def _generated(n: int) -> Iterator[tuple[int, bytes, bool]]:
    for lineno, line in enumerate(synth.lines(n, seed=2), start=1):
        yield lineno, line[:-1], True


def memory_child(n_records: int) -> None:
    """Replay a log of ``n_records`` generated on the fly; print JSON with the peak RSS."""
    before = _peak_rss_mb()
    t0 = time.perf_counter()
    result = replay_file(f"<generated {n_records}>", progress=False, lines=_generated(n_records))
    print(
        json.dumps(
            {
                "records": result.summary.get("records"),
                "status": result.status,
                "peak_rss_mb_before": round(before, 1),
                "peak_rss_mb": round(_peak_rss_mb(), 1),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )


def memory(n_records: int) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", str(n_records)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI)")
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rate-records", type=int, default=None)
    parser.add_argument("--memory-sizes", type=str, default=None, help="e.g. 1000000,10000000")
    args = parser.parse_args()
    if args.memory_child is not None:
        memory_child(args.memory_child)
        return
    n_rate = args.rate_records or (10_000 if args.quick else 200_000)
    sizes = (
        [int(s) for s in args.memory_sizes.split(",")]
        if args.memory_sizes
        else ([10_000, 100_000] if args.quick else [1_000_000, 10_000_000])
    )
    r = rate(n_rate)
    print(
        f"throughput ({r['records']:,} records, {r['request_steps']:,} request-steps):\n"
        f"  parse-only  {r['parse_request_steps_per_s']:>12,.0f} request-steps/s\n"
        f"  replay      {r['replay_request_steps_per_s']:>12,.0f} request-steps/s\n"
        f"  ratio       {r['ratio']:>12.3f}   (target >= 0.5)"
    )
    if n_rate < 100_000:
        print(
            "  (a short log: one-off costs, the first sighting of each record shape and the"
            " final totals,\n   weigh here; the target is for the steady state, the default"
            " 200,000 records: docs/replay.md)"
        )
    print("peak memory (fresh process per size, log generated on the fly):")
    for n in sizes:
        m = memory(n)
        print(
            f"  {n:>11,} records: peak RSS {m['peak_rss_mb']} MB (after imports"
            f" {m['peak_rss_mb_before']} MB), {m['seconds']} s, {m['status']}"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
