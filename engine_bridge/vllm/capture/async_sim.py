"""Drive the real ``AsyncScheduler`` (recording) with a simulated model runner, on CPU.

Real async runs on the CPU engine exist now (cpu_async.py; the `async-*` fixtures); this tool
stays for what a fake runner controls (and `FakeRunner` serves sim_scheduler.py, which drives a
vLLM release that has no CPU build). It exercises the parts of async recording that live in the
scheduler, with vLLM's own code: a tiny CPU engine is
built only to obtain a genuine ``VllmConfig`` / ``KVCacheConfig`` / ``StructuredOutputManager``;
a second, recording ``RecordingAsyncScheduler`` is built from them and driven the way
``EngineCore.step_with_batch_queue`` drives it (batch queue of 2: step s+1 is scheduled before
the output of step s is processed). The "model runner" is a seeded function that accepts a
random prefix of each block's placeholders; nothing is computed.

Covered: placeholders (``[-1] * k``) scheduled and counted, outputs keyed back to their
scheduled step, an abort while a step is in flight (``discarded_aborted``), and with
``--drop-preempt`` ``reset_prefix_cache(reset_running_requests=True)`` preempting every running
request in drop mode (``discarded_stale`` blocks vLLM does not count: schema v1 cannot say so,
see the preempt records' ``meta``). Not covered: deferred
structured outputs (needs grammar-valid sampled tokens), adaptive verification.

The ``totals`` record sums ``scheduler_stats.spec_decoding_stats`` of the ``EngineCoreOutputs``
the scheduler returned (``source: "scheduler_stats"``), an export path independent of the
recorder's ``make_spec_decoding_stats`` hook::

    python -m spectally.engine_bridge.vllm.capture.async_sim --out DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import sys
from collections import deque
from pathlib import Path
from typing import Any

from spectally.engine_bridge.steplog import writer

EOS = 2  # tiny_models: eos_token_id
CHOICES = ["import os; import sys; import json", "from typing import Any, Optional"]


def open_log(out: Path, name: str, runner: str, seed: int, so_backend: str) -> Path:
    """Point the recording scheduler of a simulated run (no engine) at a fresh raw step log
    ``out/name.ndjson``, which `close_log` ends: the driver writes the totals record itself,
    the backport stays off; ``runner`` and ``seed`` go into the log's header config."""
    from spectally.engine_bridge.vllm.recorder import state

    raw = out / f"{name}.ndjson"
    raw.unlink(missing_ok=True)
    os.environ[state.ENV_PATH] = str(raw)
    os.environ[state.ENV_TOTALS] = "0"  # this driver appends its own totals record
    os.environ[state.ENV_SO_BACKEND] = so_backend
    os.environ[state.ENV_BACKPORT] = "0"
    os.environ[state.ENV_CONFIG] = json.dumps({"run": name, "runner": runner, "seed": seed})
    return raw


def close_log(raw: Path, gz: Path, totals: list[int]) -> None:
    """End a simulated run's step log: append the totals record of the scheduler's own stats
    (``totals``: num_drafts, num_draft_tokens, num_accepted_tokens, then accepted per position;
    the drivers sum them from ``SchedulerStats``), gzip it reproducibly (mtime 0, so a rerun
    gives the committed bytes) and remove the raw file."""
    writer.append_record(str(raw), writer.totals_record("scheduler_stats", totals[:3], totals[3:]))
    with raw.open("rb") as src, gzip.GzipFile(gz, "wb", mtime=0) as dst:
        dst.write(src.read())
    raw.unlink()


class FakeRunner:
    """Seeded stand-in for the model runner and drafter (nothing is computed).

    Unstructured requests: each block accepts a random prefix of its drafts; tokens are random.
    Structured requests (a regex of two alternatives) follow a true sequence, one alternative
    tokenised, then EOS;
    so every sampled token is grammar-valid; drafts are the true continuation corrupted at a
    random position, and a draft is accepted while it equals the true continuation.
    """

    def __init__(self, sched: Any, rng: random.Random, k: int) -> None:
        self.sched = sched
        self.rng = rng
        self.k = k
        self.truth: dict[str, list[int]] = {}  # structured requests only

    def _pos(self, rid: str) -> int:
        request = self.sched.requests.get(rid)
        return len(request.output_token_ids) if request is not None else 0

    def drafts(self, so: Any) -> Any:
        """Real drafts for a deferred step (what take_draft_token_ids returns)."""
        from vllm.v1.outputs import DraftTokenIds

        req_ids: list[str] = []
        drafts: list[list[int]] = []
        for rid, spec in so.scheduled_spec_decode_tokens.items():
            n = len(spec)
            if rid in self.truth:
                pos = self._pos(rid)
                true = self.truth[rid][pos : pos + n]
                proposal = true + [self.rng.randint(10, 900) for _ in range(n - len(true))]
                cut = self.rng.randint(0, n)
                for i in range(cut, n):
                    proposal[i] = self.rng.randint(10, 900)
            else:
                proposal = [self.rng.randint(10, 900) for _ in range(n)]
            req_ids.append(rid)
            drafts.append(proposal)
        return DraftTokenIds(req_ids, drafts)

    def output(self, so: Any) -> Any:
        from vllm.v1.outputs import ModelRunnerOutput

        req_ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            spec = list(so.scheduled_spec_decode_tokens.get(rid) or [])
            request = self.sched.requests.get(rid)
            prefill = request is not None and (
                request.num_computed_tokens < request.num_prompt_tokens
            )
            if rid in self.truth:
                pos = self._pos(rid)
                true = self.truth[rid]
                accepted = 0
                if not prefill:
                    while (
                        accepted < len(spec)
                        and pos + accepted < len(true) - 1
                        and spec[accepted] == true[pos + accepted]
                    ):
                        accepted += 1
                sampled.append(true[pos : pos + accepted + 1] or [EOS])
            else:
                accepted = self.rng.randint(0, len(spec)) if spec else 0
                sampled.append([self.rng.randint(10, 900) for _ in range(accepted + 1)])
        # The fields the release's runner fills: the sampled tokens, and the index map up to
        # 0.33 (0.34 removed it); never a count the scheduler computes.
        fields: dict[str, Any] = {"req_ids": req_ids, "sampled_token_ids": sampled}
        if "req_id_to_index" in ModelRunnerOutput.__dataclass_fields__:
            fields["req_id_to_index"] = {rid: i for i, rid in enumerate(req_ids)}
        return ModelRunnerOutput(**fields)


def simulate(
    out: Path, seed: int = 0, k: int = 3, drop_preempt: bool = False, so: bool = False
) -> dict[str, Any]:
    """One simulated run; ``drop_preempt`` adds the reset_prefix_cache preemption (drop mode),
    ``so`` makes requests 0 and 2 structured (regex, xgrammar, deferred path)."""
    from spectally.engine_bridge.vllm.capture import tiny_models
    from spectally.engine_bridge.vllm.recorder import recorder

    models = tiny_models.build()
    name = (
        "sim-async-ngram-k3"
        + ("-so-regex" if so else "")
        + ("-drop-preempt" if drop_preempt else "")
    )
    raw = out / f"{name}.ndjson"
    raw.unlink(missing_ok=True)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request, RequestStatus

    llm = LLM(
        model=str(models["target"]),
        speculative_config={"method": "ngram", "num_speculative_tokens": k},
        gpu_memory_utilization=0.5,
        enforce_eager=True,
        max_model_len=512,
        disable_log_stats=False,
        structured_outputs_config={"backend": "xgrammar"},
    )
    core = llm.llm_engine.engine_core.engine_core
    base = core.scheduler
    os.environ[recorder.ENV_PATH] = str(raw)
    os.environ[recorder.ENV_TOTALS] = "0"  # this driver appends its own totals record
    os.environ[recorder.ENV_SO_BACKEND] = "xgrammar" if so else ""
    os.environ[recorder.ENV_BACKPORT] = "1"  # the RFC counters, live, as in capture runs
    os.environ.setdefault("SPECTALLY_BACKPORT_LOG_INTERVAL", "0")
    os.environ[recorder.ENV_CONFIG] = json.dumps(
        {"run": name, "runner": "simulated (async_sim.py)", "seed": seed}
    )
    sched = recorder.RecordingAsyncScheduler(
        vllm_config=base.vllm_config,
        kv_cache_config=base.kv_cache_config,
        structured_output_manager=core.structured_output_manager,
        block_size=base.block_size,
        hash_block_size=base.hash_block_size,
        log_stats=True,
    )
    rng = random.Random(seed)
    runner = FakeRunner(sched, rng, k)
    tokenizer = llm.get_tokenizer()
    max_tokens = [40, 33, 50, 27, 45]

    def add(i: int) -> None:
        rid = f"sim{i}"
        structured = so and i in (0, 2)
        params = SamplingParams(
            max_tokens=max_tokens[i % len(max_tokens)],
            ignore_eos=not structured,
            structured_outputs=(
                StructuredOutputsParams(regex="|".join(re.escape(c) for c in CHOICES))
                if structured
                else None
            ),
        )
        params._eos_token_id = EOS  # the input processor sets it from the tokenizer
        if structured:
            assert params.structured_outputs is not None
            params.structured_outputs._backend = "xgrammar"  # the input processor's job
            text = CHOICES[i % len(CHOICES)]
            runner.truth[rid] = [*tokenizer.encode(text, add_special_tokens=False), EOS]
        request = Request(
            request_id=rid,
            prompt_token_ids=[rng.randint(10, 900) for _ in range(6 + i)],
            sampling_params=params,
            pooling_params=None,
            arrival_time=0.0,
        )
        core.structured_output_manager.grammar_init(request)
        sched.add_request(request)

    for i in range(4):
        add(i)
    queue: deque[Any] = deque()
    totals = [0, 0, 0] + [0] * k
    steps = 0
    while sched.has_requests() or queue:
        steps += 1
        if steps == 6:
            sched.finish_requests(["sim1"], RequestStatus.FINISHED_ABORTED)
        if steps == 9:
            add(4)
        if steps == 14 and drop_preempt:
            sched.reset_prefix_cache(reset_running_requests=True)
        # EngineCore.step_with_batch_queue with a queue of 2 (vllm/v1/engine/core.py:698).
        deferred = None
        if sched.has_requests():
            step_out = sched.schedule()
            executed = step_out.total_num_scheduled_tokens > 0
            if executed and step_out.pending_structured_output_tokens:
                deferred = step_out  # sampling waits for the previous step's tokens
            else:
                queue.appendleft(step_out)
                if len(queue) < 2 and executed:
                    continue
        elif not queue:
            break
        if not queue:
            break
        done = queue.pop()
        outputs = sched.update_from_output(done, runner.output(done))
        if deferred is not None:
            sched.update_draft_token_ids_in_output(runner.drafts(deferred), deferred)
            queue.appendleft(deferred)
        for eco in outputs.values():
            stats = eco.scheduler_stats.spec_decoding_stats if eco.scheduler_stats else None
            if stats is not None:
                totals[0] += stats.num_drafts
                totals[1] += stats.num_draft_tokens
                totals[2] += stats.num_accepted_tokens
                for i, v in enumerate(stats.num_accepted_tokens_per_pos):
                    totals[3 + i] += v
        if steps > 2000:
            raise RuntimeError("simulation did not finish")
    sched.shutdown()
    llm.llm_engine.engine_core.shutdown()
    gz = out / f"{name}.ndjson.gz"
    close_log(raw, gz, totals)
    with gzip.open(gz, "rt") as fh:
        records = [json.loads(line) for line in fh]
    from spectally.engine_bridge.vllm.capture.manifest import backport_totals, check_log, summarize

    summary = summarize(records)
    summary.update(check_log(gz))
    summary["backport"] = backport_totals()
    summary["file"] = gz.name
    return summary


def add_to_manifest(out: Path, s: dict[str, Any], argv: list[str]) -> None:
    """Agreeing runs join ``runs``; a diverging one goes to ``known_divergences`` with why."""
    from spectally.engine_bridge.vllm.capture.manifest import manifest_numbers, merge_run

    entry = {
        "file": s["file"],
        "runner": "simulated: real RecordingAsyncScheduler, fake model runner (async_sim.py)",
        "command": "python -m spectally.engine_bridge.vllm.capture.async_sim"
        " --out tests/fixtures/vllm "
        + " ".join(a for a in argv if a not in ("--out", str(out)) and not a.startswith("/")),
        **manifest_numbers(s),
    }
    key = "runs" if s["replay"] == "agree" else "known_divergences"
    if key == "known_divergences":
        # Kept out of the top folder: every top-level log there must replay clean.
        sub = out / "known_divergences"
        sub.mkdir(exist_ok=True)
        (out / s["file"]).replace(sub / s["file"])
        entry["file"] = f"known_divergences/{s['file']}"
        entry["replay_divergence"] = s.get("replay_divergence")
        entry["why"] = (
            "vLLM 0.32 decides per preemption whether stale in-flight output is dropped "
            "(Request.drop_stale_output: requires_kv_delivery or reset_prefix_cache); schema v1 "
            "only has the header's global drop_stale_output (false here), so replay counts the "
            "3 discarded_stale blocks the engine dropped. The per-preemption value is in the "
            "preempt records' meta.drop_stale_output."
        )
    merge_run(out, entry, key)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="drive the real AsyncScheduler with a fake runner")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--drop-preempt",
        action="store_true",
        help="preempt everything with reset_prefix_cache (stale outputs dropped per request)",
    )
    ap.add_argument("--so", action="store_true", help="structured requests (regex, deferred)")
    ap.add_argument("--manifest", action="store_true", help="merge into OUT/MANIFEST.json")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    s = simulate(args.out, args.seed, drop_preempt=args.drop_preempt, so=args.so)
    if args.manifest:
        add_to_manifest(args.out, s, argv if argv is not None else sys.argv[1:])
    keys = (
        "file",
        "proposed",
        "scheduled",
        "outcomes",
        "events",
        "legacy_from_step_stats",
        "totals",
        "step_stats_equal_totals",
        "blocks_equal_step_stats",
        "schema_errors",
        "replay",
        "replay_divergence",
    )
    print(json.dumps({key: s.get(key) for key in keys}, indent=1))
    ok = s["step_stats_equal_totals"] and s["blocks_equal_step_stats"] and s["replay"] == "agree"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
