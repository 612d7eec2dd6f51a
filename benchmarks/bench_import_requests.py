"""``spectally import requests``: time per request as the file grows (flat = linear).

    python benchmarks/bench_import_requests.py               # 1,600 .. 25,600 requests
    python benchmarks/bench_import_requests.py --sizes 1600 3200

Each size is a file of the committed real responses (tests/fixtures/vllm/
serve-ngram-k3.requests.jsonl, a vLLM server's per-request metrics) repeated with fresh ids
until it holds that many requests, written to a temporary file and checked in process by
`importers.requests.check_files` with `replay.detailed.replay_requests` (what the command
runs), best of ``--rounds`` CPU times (``time.process_time``). The table gives each size's
time per request and its ratio to the smallest size's: a reader that counted each value's line
from the start of the file grew as the square of the size (1,600 -> 25,600 requests: a ratio
near 16); a linear one stays near 1. The detailed steps are replayed as columns (about 14 a
request here); through the reference one event at a time they cost about 1.5 ms a request.
No timed assertion: the ratios are the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from spectally.engine_bridge.importers.requests import check_files
from spectally.engine_bridge.replay.detailed import replay_requests

FIXTURE = (
    Path(__file__).parent.parent / "tests" / "fixtures" / "vllm" / "serve-ngram-k3.requests.jsonl"
)


def write_requests(n: int) -> str:
    """A JSONL file of ``n`` real responses (the fixture's, repeated with fresh ids)."""
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    fd, path = tempfile.mkstemp(prefix="spectally-bench-requests-", suffix=".jsonl")
    with os.fdopen(fd, "w") as out:
        for i in range(n):
            rec = records[i % len(records)]
            out.write(json.dumps({**rec, "id": f"cmpl-bench-{i}"}) + "\n")
    return path


def best_time(path: str, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        findings = check_files([path], None, replay_requests)
        best = min(best, time.process_time() - start)
        assert findings, "nothing checked"
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1600, 3200, 6400, 12800, 25600])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    base: float | None = None
    print(f"{'requests':>9} {'MB':>6} {'CPU s':>7} {'us/request':>11} {'ratio':>6}")
    for n in args.sizes:
        path = write_requests(n)
        try:
            size = os.path.getsize(path) / 1e6
            seconds = best_time(path, args.rounds)
        finally:
            os.unlink(path)
        per = seconds / n
        base = per if base is None else base
        print(f"{n:>9} {size:>6.1f} {seconds:>7.2f} {per * 1e6:>11.1f} {per / base:>6.2f}")


if __name__ == "__main__":
    main()
