"""Fleet replay: `spectally replay --jobs 2` against `--jobs 1` on many large logs, and the
per-file overhead of the Ray path against the local one.

    python -u benchmarks/bench_fleet.py              # 20 logs of 200,000 records; Ray if installed
    python benchmarks/bench_fleet.py --quick         # 6 logs of 20,000 records
    python benchmarks/bench_fleet.py --no-ray

Speed-up: ``--files`` synthetic async logs (spectally.engine_bridge.synth, a different seed each,
engine_index alternating 0/1 as two data-parallel engine cores would write them, gzip) are
replayed by the real command in a fresh process, ``spectally replay --jobs 1 FILES`` and then
``--jobs 2 FILES``; the wall time includes interpreter start-up and, for --jobs 2, starting the
workers. Both runs must print the same bytes and agree; the figure is the ratio of the two wall
times (target >= 1.8 on 2 cores). Each is run ``--repeat`` times, alternating, and the best of
each is kept (other load on the machine only ever slows a run down).

Ray: a throwaway 2-CPU head on 127.0.0.1 (`fleet.ray.local_head`), then ``--ray`` and
``--jobs 2`` each replay N tiny logs and 1 tiny log in one driver process; the per-file
overhead of a backend is (T(N) - T(1)) / (N - 1), the fixed cost of a run T(1).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from spectally.engine_bridge import synth
from spectally.engine_bridge.fleet import ReplayOptions, replay_one, run_fleet, usable_cores
from spectally.engine_bridge.fleet.local import mp_context

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "traces" / "agree" / "sync_basic.ndjson"


def write_logs(out: Path, files: int, records: int) -> list[str]:
    paths = []
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    for i in range(files):
        path = out / f"engine{i % 2}-part{i:02d}.ndjson.gz"
        with gzip.open(path, "wb", compresslevel=1) as f:
            for rec in synth.generate(records, seed=100 + i):
                if rec["record"] == "header":
                    rec["engine_index"] = i % 2
                f.write((dumps(rec) + "\n").encode())
        paths.append(str(path))
    return paths


def cli_run(paths: list[str], jobs: int) -> tuple[float, str, int]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "spectally", "replay", "--jobs", str(jobs), *paths],
        capture_output=True,
        text=True,
        check=False,
    )
    return time.perf_counter() - t0, done.stdout, done.returncode


def _cpu_timed(path: str) -> tuple[int, float]:
    """Runs in a worker: (pid, CPU seconds of replaying ``path``)."""
    c0 = time.process_time()
    outcome = replay_one(path, ReplayOptions())
    assert outcome.status == "agree", outcome.status
    return os.getpid(), time.process_time() - c0


def cpu_split(paths: list[str]) -> dict[str, float]:
    """CPU seconds of the same work in this process and in a pool of 2 (the fork server
    `fleet` uses): what two idle cores would do with it, independent of the machine's load.
    The estimate is the busier worker's CPU total (plus no start-up: measured separately)."""
    sequential = sum(_cpu_timed(p)[1] for p in paths)
    per_worker: dict[int, float] = {}
    with ProcessPoolExecutor(2, mp_context=mp_context()) as pool:
        for pid, cpu in pool.map(_cpu_timed, _largest_first_paths(paths)):
            per_worker[pid] = per_worker.get(pid, 0.0) + cpu
    busiest = max(per_worker.values())
    return {
        "sequential_cpu_s": sequential,
        "pool_cpu_s": sum(per_worker.values()),
        "busiest_worker_cpu_s": busiest,
        "idle_estimate": sequential / busiest,
    }


def _largest_first_paths(paths: list[str]) -> list[str]:
    return sorted(paths, key=lambda p: -os.path.getsize(p))


def speedup(paths: list[str], repeat: int) -> dict[str, float]:
    best = {1: float("inf"), 2: float("inf")}
    outputs: dict[int, str] = {}
    for _ in range(repeat):
        for jobs in (1, 2):
            seconds, stdout, code = cli_run(paths, jobs)
            assert code == 0, f"--jobs {jobs} exited {code}"
            outputs.setdefault(jobs, stdout)
            assert stdout == outputs[jobs], "a rerun printed something else"
            best[jobs] = min(best[jobs], seconds)
    assert outputs[1] == outputs[2], "--jobs 2 printed something else than --jobs 1"
    return {"jobs1_s": best[1], "jobs2_s": best[2], "speedup": best[1] / best[2]}


def scheduler_note() -> str:
    """Linux autogroup shares the CPU between sessions, not processes: with other sessions
    busy, both workers share this session's slice and no speed-up can show."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled", encoding="ascii") as f:
            on = f.read().strip() == "1"
    except OSError:
        return "autogroup: unknown"
    return "autogroup: on (CPU is shared per session)" if on else "autogroup: off"


def per_file(tiny: list[str], backend: dict[str, object]) -> dict[str, float]:
    """(T(N) - T(1)) / (N - 1) and T(1) of one backend, in this process."""
    opts = ReplayOptions()

    def timed(paths: list[str]) -> float:
        t0 = time.perf_counter()
        out = run_fleet(paths, opts, **backend)  # type: ignore[arg-type]
        assert all(o.status == "agree" for o in out)
        return time.perf_counter() - t0

    timed(tiny[:2])  # warm: imports, the fork server / the cluster's worker processes
    one = min(timed(tiny[:1]) for _ in range(3))
    many = min(timed(tiny) for _ in range(3))
    return {"fixed_s": one, "per_file_ms": 1000 * (many - one) / (len(tiny) - 1)}


def ray_overhead(tmp: Path, n: int) -> dict[str, dict[str, float]] | None:
    from spectally.engine_bridge.fleet.ray import LOOPBACK_ENV, local_head

    os.environ.update(LOOPBACK_ENV)  # before Ray is imported: it reads them at import
    try:
        import ray  # noqa: F401
    except ImportError:
        print("ray: not installed (pip install -e '.[ray]'); skipped")
        return None

    tiny = []
    for i in range(n):
        path = tmp / f"tiny{i:03d}.ndjson"
        shutil.copy(TINY, path)
        tiny.append(str(path))
    with local_head(num_cpus=2) as address:
        return {
            "local --jobs 2": per_file(tiny, {"jobs": 2}),
            "ray": per_file(tiny, {"jobs": 1, "ray_address": address}),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="6 logs of 20,000 records")
    parser.add_argument("--files", type=int, default=None)
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--tiny", type=int, default=200, help="tiny logs for the Ray overhead")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    files = args.files or (6 if args.quick else 20)
    records = args.records or (20_000 if args.quick else 200_000)
    load = os.getloadavg()
    print(
        f"usable cores {usable_cores()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f};"
        f" {scheduler_note()}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        paths = write_logs(tmp, files, records)
        size = sum(os.path.getsize(p) for p in paths) / 1e6
        print(
            f"{files} logs of {records:,} records ({size:.0f} MB gzip) written in"
            f" {time.perf_counter() - t0:.0f} s"
        )
        s = speedup(paths, args.repeat)
        print(
            f"spectally replay, best of {args.repeat} (wall, fresh process each):\n"
            f"  --jobs 1  {s['jobs1_s']:8.1f} s\n"
            f"  --jobs 2  {s['jobs2_s']:8.1f} s\n"
            f"  speed-up  {s['speedup']:8.2f} x   (target >= 1.8 on 2 idle cores)"
        )
        c = cpu_split(paths)
        print(
            f"CPU time of the same work: in one process {c['sequential_cpu_s']:.1f} s; in a pool"
            f" of 2 {c['pool_cpu_s']:.1f} s ({c['pool_cpu_s'] / c['sequential_cpu_s'] - 1:+.1%}),"
            f" the busier worker {c['busiest_worker_cpu_s']:.1f} s\n"
            f"  => on 2 idle cores: ~{c['idle_estimate']:.2f} x (estimate from CPU time,"
            " load-independent; start-up excluded)"
        )
        if not args.no_ray:
            r = ray_overhead(tmp, args.tiny)
            if r is not None:
                print(f"per-file overhead ({args.tiny} tiny logs; fixed = one log's run):")
                for name, v in r.items():
                    print(
                        f"  {name:<15} {v['per_file_ms']:8.1f} ms per file,"
                        f" fixed {v['fixed_s']:.2f} s"
                    )
    load = os.getloadavg()
    print(f"load average after {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
