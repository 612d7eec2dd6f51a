"""Restart logs: a directory of logs, one per engine restart, against one long log of as many
records, each replayed by one fresh ``spectally replay`` process.

    python benchmarks/bench_restarts.py                     # 10 logs of 200,000 records
    python benchmarks/bench_restarts.py --logs 4 --records 50000 --rounds 2

The logs are the realistic async log of `bench_startup.py` (``synth.varied`` with preemptions,
a different seed each); the long one is ``--logs`` x ``--records`` records of seed 1. Each
figure is a fresh process's CPU time (user + system of the process and its workers), best of
``--rounds``:

* ``spectally replay --jobs 1 LOG...``: every restart log in one process, one after another;
* ``spectally replay LONG``: the long log;
* ``json.loads`` over every line of the restart logs, in one process: the baseline.

The figures are the per-record cost of the two replays and their ratio (1.0: a directory of
restart logs costs per record what one long log does), and each replay against ``json.loads``
(no timed assertion). Whether numba's compiled scanner loads follows the run's bytes
(``ReplayOptions.run_bytes``, against ``reader.JIT_MIN_LOG_BYTES``) for the restart logs and
the log's own for the long one, as for users. ``--jobs`` scaling with cores is
`bench_fleet.py`'s.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from spectally.engine_bridge import synth

JSON_LOADS = (
    "import json, sys\n"
    "for path in sys.argv[1:]:\n"
    "    with open(path, 'rb') as f:\n"
    "        for line in f:\n"
    "            json.loads(line)\n"
)
# The baseline runs as the command line does: one OpenBLAS thread (numpy is not imported there).
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}


def cpu_seconds(args: list[str]) -> float:
    """The CPU time of one fresh process running ``args`` and its children (output discarded);
    a failing replay is an error, not a figure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:4])} ...: exit {done.returncode}\n{done.stderr!r}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def write(path: Path, records: int, seed: int) -> None:
    with path.open("wb") as out:
        out.writelines(synth.varied.lines(records, seed=seed, preempt_share=0.05))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", type=int, default=10)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="spectally-bench-restarts-") as tmp:
        folder = Path(tmp)
        logs = [folder / f"restart-{i:03d}.ndjson" for i in range(args.logs)]
        for i, log in enumerate(logs):
            print(f"writing {log.name}", file=sys.stderr, flush=True)
            write(log, args.records, seed=i + 1)
        long = folder / "long.ndjson"
        print(f"writing {long.name}", file=sys.stderr, flush=True)
        write(long, args.logs * args.records, seed=1)
        cases = {
            "json.loads, the restart logs": [py, "-c", JSON_LOADS, *map(str, logs)],
            "spectally replay --jobs 1, the restart logs": [
                *(py, "-m", "spectally", "replay", "--jobs", "1"),
                *map(str, logs),
            ],
            "spectally replay, the long log": [py, "-m", "spectally", "replay", str(long)],
        }
        best = dict.fromkeys(cases, float("inf"))
        for r in range(args.rounds):  # interleaved: a slow spell touches every case alike
            print(f"round {r + 1} of {args.rounds}", file=sys.stderr, flush=True)
            for name, command in cases.items():
                best[name] = min(best[name], cpu_seconds(command))
    records = args.logs * args.records
    print(f"{args.logs} restart logs of {args.records} records, one log of {records}")
    for name, seconds in best.items():
        print(f"{name:<46} {seconds:8.3f} s  {1e9 * seconds / records:7.0f} ns/record")
    base, restarts, one = best.values()
    print(f"restart logs per record / long log per record: {restarts / one:.2f}")
    print(f"restart logs: {base / restarts:.2f}x json.loads; long log: {base / one:.2f}x")


if __name__ == "__main__":
    main()
