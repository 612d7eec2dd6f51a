"""What the backport (engine_bridge/vllm/recorder/backport.py) costs the engine (< 2 %).

Two measurements, both figures in docs/vllm-runs.md::

    .venv/bin/python benchmarks/bench_backport.py --micro
        # no vLLM: µs per block, every request_step of the committed fixtures fed through
        # (a) the reference per block (what the backport did before: rfc_block_counts, merge,
        # publish) and (b) BackportPublisher.observe (one reference evaluation per block shape)
    $(python3 engine_bridge/vllm/capture/env.py) benchmarks/bench_backport.py --engine [--runs 3]
        # the same engine configuration (recorder writing a log, draft_model k=3, SO json,
        # 8 requests) with and without the backport, each run in a fresh process, alternating;
        # CPU time of the engine-core thread (in-process engine: the driver thread) around
        # generate(), and the CPU time spent inside BackportPublisher.observe in the same run.

CPU time, not wall time: the machine is shared; ratios are taken within the same invocation.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "vllm"


def _records() -> list[tuple[str, int, list[dict[str, Any]]]]:
    out = []
    for path in sorted(FIXTURES.glob("*.ndjson.gz")):
        with gzip.open(path, "rt") as fh:
            recs = [json.loads(line) for line in fh]
        out.append((recs[0]["scheduling"], recs[0]["num_speculative_tokens"], recs))
    return out


def micro() -> dict[str, float]:
    from spectally.engine_bridge.vllm.recorder.backport import BackportPublisher, rfc_block_counts
    from spectally.reference.counters import Counters
    from spectally.reference.step import Mode

    logs = _records()
    blocks = sum(1 for _, _, recs in logs for r in recs if r["record"] == "request_step")

    def per_block_reference() -> None:  # the backport before the cache
        for mode, k, recs in logs:
            pub = BackportPublisher(k, "bench-ref", log_interval=0)
            total = Counters.zero(k)
            for r in recs:
                if r["record"] == "request_step":
                    block = rfc_block_counts(Mode(mode), k, r)
                    total = total.merge(block)
                    rfc = block.rfc
                    for name, value in (
                        ("drafted", rfc.drafted),
                        ("verified", rfc.verified),
                        ("accepted", rfc.accepted),
                        ("spec_steps", rfc.spec_steps),
                    ):
                        if value:
                            pub._scalar[name].inc(value)
                    for name in ("drafted", "verified", "accepted"):
                        for i, v in enumerate(block.per_position(name)):
                            if v:
                                pub._pos[name][i].inc(v)

    def cached() -> None:
        for _, k, recs in logs:
            pub = BackportPublisher(k, "bench-cached", log_interval=0)
            for r in recs:
                pub.observe(r)
            pub.totals  # noqa: B018  (the sum is part of the cost)

    result: dict[str, float] = {"blocks": blocks}
    for name, fn in (("reference_per_block", per_block_reference), ("cached", cached)):
        times = []
        for _ in range(3):
            t0 = time.thread_time()
            fn()
            times.append(time.thread_time() - t0)
        result[f"{name}_us_per_block"] = round(1e6 * min(times) / blocks, 2)
    return result


CHILD = r"""
import json, os, sys, time
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
from spectally.engine_bridge.vllm.recorder import backport
from spectally.engine_bridge.vllm.capture import capture, tiny_models
spent = [0.0]
orig = backport.BackportPublisher.observe
def timed(self, record):
    t0 = time.thread_time()
    orig(self, record)
    spent[0] += time.thread_time() - t0
backport.BackportPublisher.observe = timed
cfg = capture.RunConfig("bench", "draft_model", 3, "draft-noise05", so="json",
                        so_backend="xgrammar", num_requests=8)
models = tiny_models.build()
from vllm import LLM
llm = LLM(**capture._llm_kwargs(cfg, models))
params = [capture._sampling_params(cfg, i) for i in range(cfg.num_requests)]
prompts = [capture.PROMPTS[i % len(capture.PROMPTS)] for i in range(cfg.num_requests)]
llm.generate(prompts[:2], params[:2], use_tqdm=False)  # warm-up (grammar compile, caches)
spent[0] = 0.0
t0 = time.thread_time()
llm.generate(prompts, params, use_tqdm=False)
cpu = time.thread_time() - t0
print(json.dumps({"cpu_s": cpu, "observe_s": spent[0]}))
"""


def engine(runs: int) -> dict[str, Any]:
    samples: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    for i in range(runs):
        for variant in ("without", "with") if i % 2 == 0 else ("with", "without"):
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ)
                env["SPECTALLY_STEP_LOG"] = str(Path(tmp) / "log.ndjson")
                env["SPECTALLY_BACKPORT"] = "1" if variant == "with" else "0"
                env["SPECTALLY_BACKPORT_LOG_INTERVAL"] = "0"
                proc = subprocess.run(
                    [sys.executable, "-c", CHILD],
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=tmp,
                    timeout=900,
                )
                if proc.returncode != 0:
                    raise RuntimeError(proc.stderr[-3000:])
                samples[variant].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    without = statistics.median(s["cpu_s"] for s in samples["without"])
    with_ = statistics.median(s["cpu_s"] for s in samples["with"])
    observe = statistics.median(s["observe_s"] / s["cpu_s"] for s in samples["with"])
    return {
        "runs": runs,
        "cpu_s_without": round(without, 3),
        "cpu_s_with": round(with_, 3),
        "overhead_percent_median_difference": round(100 * (with_ - without) / without, 2),
        "observe_percent_of_engine_thread": round(100 * observe, 3),
        "samples": samples,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--micro", action="store_true")
    ap.add_argument("--engine", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if args.micro or not args.engine:
        print(json.dumps({"micro": micro()}))
    if args.engine:
        print(json.dumps({"engine": engine(args.runs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
