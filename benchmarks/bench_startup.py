"""Start-up: what a fresh ``spectally`` process costs before and around its first record.

    python benchmarks/bench_startup.py                 # a 200,000-record log, 5 rounds
    python benchmarks/bench_startup.py --records 20000 --rounds 3

Every figure is a fresh process (``sys.executable``), its CPU time (user + system, from
``resource.getrusage(RUSAGE_CHILDREN)``: less sensitive than wall time to a shared machine's
other load), best of ``--rounds``:

* ``python -c pass``: the interpreter alone;
* ``spectally --help``, ``spectally step ...``: the command line without the replay's imports;
* ``json.loads`` over every line of a small real log (tests/fixtures/vllm, 110 records) and
  ``spectally replay`` of the same log;
* the same two over a synthetic log of ``--records`` records (spectally.engine_bridge.synth):
  users replay many small logs, one per engine restart, so start-up counts.

The ratios are the figures (no timed assertion): each command against ``python -c pass``, and
``json.loads`` over a log against ``spectally replay`` of it (above 1: the replay, start-up
included, is faster than merely parsing the log with the standard library).
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

SMALL = Path(__file__).parent.parent / "tests" / "fixtures" / "vllm" / "ngram-k3-greedy.ndjson.gz"
JSON_LOADS = (
    "import gzip, json, sys\n"
    "path = sys.argv[1]\n"
    "with (gzip.open if path.endswith('.gz') else open)(path, 'rb') as f:\n"
    "    for line in f:\n"
    "        json.loads(line)\n"
)


def cpu_seconds(args: list[str]) -> float:
    """The CPU time of one fresh process running ``args`` (its output discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    py = sys.executable
    fd, big = tempfile.mkstemp(prefix="spectally-bench-startup-", suffix=".ndjson")
    with os.fdopen(fd, "wb") as out:
        out.writelines(synth.lines(args.records, seed=1))
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "spectally --help": [py, "-m", "spectally", "--help"],
        "spectally step": [
            py,
            "-m",
            "spectally",
            "step",
            "--mode",
            "sync",
            "--proposed",
            "3",
            "--accepted",
            "1",
        ],
        "json.loads small log": [py, "-c", JSON_LOADS, str(SMALL)],
        "spectally replay small log": [py, "-m", "spectally", "replay", str(SMALL)],
        f"json.loads {args.records} records": [py, "-c", JSON_LOADS, big],
        f"spectally replay {args.records} records": [py, "-m", "spectally", "replay", big],
    }
    try:
        best = {name: float("inf") for name in cases}
        for _ in range(args.rounds):  # interleaved: a slow spell touches every case alike
            for name, command in cases.items():
                best[name] = min(best[name], cpu_seconds(command))
    finally:
        os.unlink(big)
    base = best["python -c pass"]
    print(f"{'process':<40} {'CPU s':>7} {'x python -c pass':>17}")
    for name, seconds in best.items():
        print(f"{name:<40} {seconds:>7.3f} {seconds / base:>17.1f}")
    for size in ("small log", f"{args.records} records"):
        ratio = best[f"json.loads {size}"] / best[f"spectally replay {size}"]
        print(f"replay {size}: {ratio:.2f}x the speed of json.loads (start-up included)")


if __name__ == "__main__":
    main()
