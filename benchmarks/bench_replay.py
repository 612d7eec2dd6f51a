"""Replay throughput against JSON parse-only, the vector part alone, and peak memory.

    python benchmarks/bench_replay.py                  # 1M records per log; memory at 1M, 10M
    python benchmarks/bench_replay.py --quick          # 100k records; memory at 100k, 1M
    python benchmarks/bench_replay.py --memory-sizes 0 # throughput only
    python benchmarks/bench_replay.py --logs varied    # one log (uniform, varied, preempted)

Two synthetic async logs are written to temporary files: ``uniform``
(spectally.engine_bridge.synth: k = 4, batch 32, few distinct block shapes) and ``varied``
(spectally.engine_bridge.synth.varied: k = 8, AV, 35 % structured with grammar cuts,
padding, budget cuts, 64-256 drifting requests, uuid ids, finishes and aborts), and
``preempted`` (varied with preemptions: a burst of 1-3 every ~20 steps, stale output
delivered or dropped). For each, in
the same process and run, CPU time (``time.process_time``), best of 3 rounds (each round
measures everything below once, so that a slow spell of the machine touches the baselines
and the replay alike):

* parse-only baselines over the same file: ``json.loads`` per line, ``orjson.loads`` per line,
  msgspec ``decode_lines`` (untyped) per 4 MiB;
* ``replay_file`` end to end (the columnar checker; the result must be "agree"), and again
  with the compiled scanner off (``reader.SCAN = False``: every line through msgspec's typed
  decoder, as before the scanner);
* the decoding alone over the same chunks (``reader.byte_chunks``): the compiled scanner
  (``scanner.scan``, with the share of lines it takes) and msgspec's typed ``decode_lines``
  (what the scanner replaces for the lines it takes);
* the vector part alone: the time spent inside the whole-array checks (blocks.check_blocks,
  sequence.check_step_stats and the end-of-log fold `blocks.ShapeTable.totals`) during that
  replay;
* the plain reference replay (``--reference``) on the first ``--reference-records`` records.

Once per process, before the first scan, a replay imports numba and loads the compiled
kernel (a replay before the rounds pays it): measured apart, in fresh processes. The memory
runs' CPU time includes it.

Memory: each size runs in a fresh subprocess that replays a ``varied`` log written beforehand
and reports its peak RSS (VmHWM: interpreter, imports and the run). Flat = the peak does not
grow with the log. Figures go to stdout as a table; docs/replay.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import orjson
from spectally.engine_bridge import synth
from spectally.engine_bridge.replay.columnar import blocks, judge, reader, scanner
from spectally.engine_bridge.replay.dispatch import replay_file

GENERATORS: dict[str, Callable[..., Iterator[bytes]]] = {
    "uniform": lambda n, seed: synth.lines(n, seed=seed),
    "varied": lambda n, seed: synth.varied.lines(n, seed=seed),
    # varied with preemptions under memory pressure: a burst of 1-3 every ~20 steps, the
    # stale output in flight delivered (header default) or dropped (30 % of the records
    # set drop_stale_output themselves)
    "preempted": lambda n, seed: synth.varied.lines(n, seed=seed, preempt_share=0.05),
}


def write_log(kind: str, n: int, path: str) -> dict[str, Any]:
    """Write the log; count its records, request-steps and distinct request_step shapes."""
    shapes: set[bytes] = set()
    records = steps = preempts = 0
    with open(path, "wb") as f:
        for line in GENERATORS[kind](n, 1):
            f.write(line)
            records += 1
            if line.startswith(b'{"record":"request_step"'):
                steps += 1
                # the shape: everything but the step and the request id
                rest = line[line.index(b'"proposed"') :]
                shapes.add(rest)
            elif b'"event":"preempt"' in line:
                preempts += 1
    return {"records": records, "request_steps": steps, "shapes": len(shapes), "preempts": preempts}


ROUNDS = 3


def best_of(fn: Callable[[], Any], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def parse_json(path: str) -> None:
    loads = json.loads
    with open(path, "rb") as f:
        for line in f:
            loads(line)


def parse_orjson(path: str) -> None:
    loads = orjson.loads
    with open(path, "rb") as f:
        for line in f:
            loads(line)


def parse_msgspec(path: str) -> None:
    decode = msgspec.json.Decoder().decode_lines
    rest = b""
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            cut = block.rfind(b"\n") + 1
            decode(rest + block[:cut])
            rest = block[cut:]
    if rest:
        decode(rest)


def scan_only(path: str) -> float:
    """The byte scanner over the log's chunks; returns the share of lines it takes."""
    taken = lines = 0
    for chunk in reader.byte_chunks(path, None):
        found = scanner.scan(chunk)
        taken += int(found.taken.sum())
        lines += len(found.taken)
    return taken / max(lines, 1)


def typed_decode_only(path: str) -> None:
    """msgspec's typed decoder (reader's struct types) over the log's chunks."""
    decode = reader._DECODER.decode_lines
    for chunk in reader.byte_chunks(path, None):
        decode(chunk)


def replay_timed(path: str) -> tuple[float, float]:
    """One columnar replay: (its CPU time, the CPU time inside the whole-array checks)."""
    spent = [0.0]

    def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.process_time() - t0

        return run

    check, stats = blocks.check_blocks, judge.check_step_stats
    totals = blocks.ShapeTable.totals  # the end-of-log fold over the log's shapes
    judge.check_blocks = timed(check)  # type: ignore[assignment]
    judge.check_step_stats = timed(stats)  # type: ignore[assignment]
    blocks.ShapeTable.totals = timed(totals)  # type: ignore[method-assign]
    try:
        t0 = time.process_time()
        result = replay_file(path, progress=False)
        total = time.process_time() - t0
    finally:
        judge.check_blocks = check  # type: ignore[assignment]
        judge.check_step_stats = stats  # type: ignore[assignment]
        blocks.ShapeTable.totals = totals  # type: ignore[method-assign]
    if (result.status, result.checker) != ("agree", "columnar"):
        raise SystemExit(f"replay of {path}: {result.status} by the {result.checker} path")
    return total, spent[0]


def throughput(kind: str, n: int, reference_records: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{kind}.ndjson")
        info = write_log(kind, n, path)
        size_mb = os.path.getsize(path) / 1e6
        row: dict[str, Any] = {"log": kind, **info, "MB": round(size_mb, 1)}
        replay_timed(path)  # the first replay of a process loads the kernels (`startup`)
        # In rounds, each measurement once a round, the best of the rounds kept: a slow
        # spell of the machine then touches the baselines and the replay alike.
        times: dict[str, list[float]] = {}
        for _ in range(ROUNDS):
            for name, fn in (
                ("json.loads s", lambda: parse_json(path)),
                ("orjson s", lambda: parse_orjson(path)),
                ("msgspec s", lambda: parse_msgspec(path)),
                ("scan s", lambda: scan_only(path)),
                ("typed decode s", lambda: typed_decode_only(path)),
            ):
                times.setdefault(name, []).append(best_of(fn, 1))
            total, vector = replay_timed(path)
            times.setdefault("replay s", []).append(total)
            times.setdefault("vector s", []).append(vector)
            reader.SCAN = False
            try:
                times.setdefault("replay without scanner s", []).append(replay_timed(path)[0])
            finally:
                reader.SCAN = True
        row.update((name, min(values)) for name, values in times.items())
        row["scan share"] = scan_only(path)
        if reference_records:
            small = os.path.join(tmp, "small.ndjson")
            head = write_log(kind, reference_records, small)
            t0 = time.process_time()
            status = replay_file(small, progress=False, reference=True).status
            row["reference rs/s"] = round(head["request_steps"] / (time.process_time() - t0))
            assert status == "agree", status
    return row


def memory(n: int) -> dict[str, Any]:
    """Peak RSS of a fresh process replaying an n-record varied log (written beforehand)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "varied.ndjson")
        write_log("varied", n, path)
        code = (
            "import sys, time\n"
            "from spectally.engine_bridge.replay.dispatch import replay_file\n"
            "from benchmarks_rss import peak\n"
            "t0 = time.process_time()\n"
            "r = replay_file(sys.argv[1], progress=False)\n"
            "print(r.status, round(time.process_time() - t0, 1), peak())\n"
        )
        env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.abspath(__file__))}
        out = subprocess.run(
            [sys.executable, "-c", code, path], capture_output=True, text=True, env=env, check=True
        ).stdout.split()
    return {"records": n, "status": out[0], "cpu s": float(out[1]), "peak RSS MB": float(out[2])}


def startup() -> float:
    """CPU seconds a fresh process spends once before its first scan: importing numba and
    loading the compiled kernel from numba's cache (the cache filled beforehand)."""
    code = (
        "import time\n"
        "t0 = time.process_time()\n"
        "from spectally.engine_bridge.replay.columnar import scanner\n"
        "assert scanner.compiled()\n"
        "scanner.scan(b'{}\\n')\n"
        "print(time.process_time() - t0)\n"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        for _ in range(4)
    ]
    return min(float(run.stdout) for run in runs[1:])  # the first may fill the cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100k records; memory 100k, 1M")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--reference-records", type=int, default=20_000)
    parser.add_argument("--memory-sizes", type=int, nargs="*", default=None)
    parser.add_argument("--logs", nargs="*", choices=list(GENERATORS), default=list(GENERATORS))
    args = parser.parse_args()
    # The compiled path at every size (a replay loads it only from reader.JIT_MIN_LOG_BYTES):
    # these figures are the scanner's; bench_startup.py measures what a small log costs.
    reader.JIT_MIN_LOG_BYTES = 0
    n = args.records or (100_000 if args.quick else 1_000_000)
    sizes = args.memory_sizes
    if sizes is None:
        sizes = [100_000, 1_000_000] if args.quick else [1_000_000, 10_000_000]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    print(f"once per process: numba import + compiled kernel load {startup():.2f} s CPU")
    for kind in args.logs:
        row = throughput(kind, n, args.reference_records)
        steps = row["request_steps"]
        replay = row["replay s"]
        print(
            f"{kind}: {row['records']:,} records, {steps:,} request-steps, {row['MB']} MB,"
            f" distinct shapes {row['shapes']:,} ({row['shapes'] / steps:.2%}),"
            f" preemptions {row['preempts']:,}"
        )
        print(
            f"  replay {replay:.2f} s: {row['records'] / replay:,.0f} records/s,"
            f" {steps / replay:,.0f} request-steps/s, {row['MB'] / replay:.1f} MB/s"
        )
        for name in ("json.loads", "orjson", "msgspec"):
            base = row[f"{name} s"]
            print(f"  {name} parse-only {base:.2f} s: replay is {base / replay:.2f}x its speed")
        print(
            f"  vector part {row['vector s']:.3f} s: {steps / row['vector s']:,.0f} request-steps/s"
        )
        off = row["replay without scanner s"]
        print(
            f"  without the compiled scanner {off:.2f} s: {steps / off:,.0f} request-steps/s"
            f" (the scanner: {off / replay:.2f}x)"
        )
        print(
            f"  decoding alone: compiled scanner {row['scan s']:.3f} s"
            f" ({row['scan share']:.2%} of the lines taken), msgspec typed decode_lines"
            f" {row['typed decode s']:.3f} s"
        )
        if "reference rs/s" in row:
            print(f"  plain reference replay: {row['reference rs/s']:,} request-steps/s")
    for size in sizes:
        if size:
            m = memory(size)
            print(
                f"memory: {m['records']:,} records: {m['status']}, {m['cpu s']} s CPU,"
                f" peak RSS {m['peak RSS MB']:.1f} MB"
            )


if __name__ == "__main__":
    main()
