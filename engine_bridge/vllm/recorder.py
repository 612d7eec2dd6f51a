"""Record step logs (spec/STEP_LOG.md, schema version 1) from a stock vLLM 0.32 engine.

Use one of the scheduler subclasses as ``scheduler_cls``; no vLLM file is edited::

    LLM(..., scheduler_cls="spectally.engine_bridge.vllm.recorder.RecordingScheduler")
    LLM(..., scheduler_cls="spectally.engine_bridge.vllm.recorder.RecordingAsyncScheduler",
        async_scheduling=True)

Configuration is read from the environment when the scheduler is built, so it works in a spawned
engine-core process as well as in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``):

``SPECTALLY_STEP_LOG``         output path (NDJSON, opened ``O_APPEND``); unset = do not write
``SPECTALLY_STEP_LOG_CONFIG``  JSON object copied into the header's free-form ``config``
``SPECTALLY_SO_BACKEND``       header ``structured_outputs_backend`` (else inferred)
``SPECTALLY_BACKPORT=1``       also publish RFC counters (see ``backport.py``)

What is hooked (all in the engine-core process, where the scheduler lives):

* ``update_draft_token_ids`` (sync): the raw proposal per request, before ``validate_tokens``;
  ``proposed`` / ``padding`` from the raw list, ``grammar_valid`` from what the scheduler kept.
  A proposal for a request that is already finished / aborted is a ``discarded_*`` block of the
  step it was meant for (the next one).
* ``schedule``: the engine step counter; each scheduled request's block (``scheduled``).
* ``update_draft_token_ids_in_output`` (async + structured outputs, deferred path): the real
  drafts and ``num_invalid_spec_tokens``.
* ``update_from_output``: ``sampled`` / ``accepted`` / ``outcome`` per block, request finishes,
  and ``step_stats`` = the ``SpecDecodingStats`` delta that ``make_spec_decoding_stats`` (also
  wrapped) produced for this very call: exactly what the engine exported for the step.
* ``finish_requests`` (aborts), ``_preempt_request`` (preemptions), ``add_request``.

Records are emitted in step order through a small reorder buffer (async scheduling processes
the output of step s after step s+1 was scheduled). Every record is one complete line written
with a single ``os.write`` on an ``O_APPEND`` descriptor: a kill can lose buffered records but
never leaves a torn line. ``shutdown`` flushes and closes.
"""

from __future__ import annotations

import atexit
import heapq
import itertools
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

SCHEMA_VERSION = 1
ENV_PATH = "SPECTALLY_STEP_LOG"
ENV_CONFIG = "SPECTALLY_STEP_LOG_CONFIG"
ENV_SO_BACKEND = "SPECTALLY_SO_BACKEND"
ENV_BACKPORT = "SPECTALLY_BACKPORT"

Record = dict[str, Any]
logger = logging.getLogger("vllm.spectally.recorder")

# Worker-side observations (GPU adaptive verification), filled by gpu_worker.py when the worker
# runs in the engine-core process (UniProcExecutor): id(scheduler_output) -> {req_id: verified}.
# Values are {req_id: verified} or a zero-argument callable returning it (read lazily, after the
# step finished, so the worker never waits for the device).
WORKER_VERIFIED: dict[int, Any] = {}


class StepLogWriter:
    """Whole-line NDJSON appender: one ``os.write`` per record on an ``O_APPEND`` fd."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record: Record) -> None:
        if self._fd is None:
            return
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        written = os.write(self._fd, data)
        if written != len(data):  # regular files do not short-write; fail loudly if one does
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class Block:
    """One (step, request) draft block; becomes a ``request_step`` record."""

    request: str
    proposed: int
    padding: int = 0
    grammar_valid: int | None = None
    step: int = -1
    scheduled: int = 0
    invalid: int | None = None
    verified: int | None = None
    sampled: int = 0
    accepted: int = 0
    outcome: str = "applied"

    def record(self) -> Record:
        return {
            "record": "request_step",
            "step": self.step,
            "request": self.request,
            "proposed": self.proposed,
            "padding": self.padding,
            "grammar_valid": self.grammar_valid,
            "scheduled": self.scheduled,
            "invalid": self.invalid,
            "verified": self.verified,
            "sampled": self.sampled,
            "accepted": self.accepted,
            "outcome": self.outcome,
        }

    def empty(self) -> bool:
        return self.proposed == 0 and self.padding == 0 and self.scheduled == 0


_FINISH_REASON = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_IGNORED: "ignored",
    RequestStatus.FINISHED_ERROR: "error",
}


def _finish_reason(status: Any) -> str:
    reason = _FINISH_REASON.get(status)
    if reason is not None:
        return reason
    name = getattr(status, "name", str(status))
    return name.lower().removeprefix("finished_")


def _spec_counts(stats: Any, k: int) -> tuple[int, int, int, list[int]]:
    if stats is None:
        return 0, 0, 0, [0] * k
    per_pos = list(stats.num_accepted_tokens_per_pos) or [0] * k
    return stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens, per_pos


class _RecorderState:
    """Per-scheduler recording state; kept off the scheduler's own namespace."""

    def __init__(self, sched: Scheduler) -> None:
        spec = sched.vllm_config.speculative_config
        self.k = int(sched.num_spec_tokens or 0)
        self.enabled_spec = spec is not None and self.k > 0
        self.sched = sched
        self.is_async = isinstance(sched, AsyncScheduler)
        self.step = 0  # last scheduled engine step (Scheduler.schedule calls)
        self.pending: dict[str, Block] = {}  # sync: proposals waiting to be scheduled
        self.inflight: dict[int, tuple[int, Any, dict[str, Block]]] = {}
        self.done: set[str] = set()  # requests with a finish / abort record
        self.aborted: set[str] = set()
        self.step_delta: list[int] | None = None  # [drafts, draft_tokens, accepted, *per_pos]
        self._heap: list[tuple[int, int, Record]] = []
        self._seq = itertools.count()
        self._header_written = False
        self._closed = False
        self.sinks: list[Callable[[Record], None]] = []
        self._closers: list[Callable[[], None]] = []
        path = os.environ.get(ENV_PATH)
        if path and self.enabled_spec:
            writer = StepLogWriter(path)
            self.sinks.append(writer.write)
            self._closers.append(writer.close)
        if os.environ.get(ENV_BACKPORT, "") not in ("", "0") and self.enabled_spec:
            try:
                from spectally.engine_bridge.vllm.backport import BackportPublisher

                pub = BackportPublisher.from_scheduler(sched, self.k)
            except Exception:  # a metrics add-on must never stop the engine
                logger.exception("spectally backport disabled")
            else:
                self.sinks.append(pub.observe)
                self._closers.append(pub.close)
        self.active = bool(self.sinks)
        if self.active:
            atexit.register(self.close)

    # -- safety -----------------------------------------------------------------------------
    def guard(self, where: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a recording step; on error log once, stop recording, return None."""
        if not self.active:
            return None
        try:
            return fn(*args)
        except Exception:
            logger.exception(
                "spectally recorder failed in %s; recording stops, the engine goes on", where
            )
            self.fail()
            return None

    def fail(self) -> None:
        self.active = False
        self._closed = True
        for closer in self._closers:
            try:
                closer()
            except Exception:
                logger.exception("spectally recorder: closing a sink failed")

    def next_step(self) -> int:
        self.step += 1
        return self.step

    # -- output -----------------------------------------------------------------------------
    def header(self) -> Record:
        sched = self.sched
        vc = sched.vllm_config
        spec = vc.speculative_config
        config: dict[str, Any] = {
            "model": vc.model_config.model,
            "draft_model": _draft_model(vc),
            "max_model_len": vc.model_config.max_model_len,
            "use_v2_model_runner": bool(getattr(sched, "use_v2_model_runner", False)),
            "scheduler_cls": f"{type(sched).__module__}.{type(sched).__qualname__}",
        }
        extra = os.environ.get(ENV_CONFIG)
        if extra:
            config.update(json.loads(extra))
        return {
            "record": "header",
            "schema_version": SCHEMA_VERSION,
            "engine": "vllm",
            "engine_version": _vllm_version(),
            "num_speculative_tokens": self.k,
            "scheduling": "async" if self.is_async else "sync",
            "spec_method": str(getattr(spec, "method", None)),
            "structured_outputs_backend": self._so_backend(),
            "adaptive_verification": bool(getattr(spec, "enable_adaptive_verification", False)),
            "drop_stale_output": bool(getattr(sched, "requires_kv_delivery", False)),
            "engine_index": int(getattr(vc.parallel_config, "data_parallel_index", 0) or 0),
            "config": config,
        }

    def _so_backend(self) -> str | None:
        env = os.environ.get(ENV_SO_BACKEND)
        if env is not None:
            return env or None
        sched = self.sched
        uses_so = any(r.use_structured_output for r in sched.requests.values())
        if not uses_so:
            return None
        backend = getattr(sched.structured_output_manager, "backend", None)
        name = type(backend).__name__.lower() if backend is not None else ""
        for known in ("xgrammar", "guidance", "outlines", "lm_format_enforcer"):
            if known.replace("_", "") in name.replace("_", ""):
                return known.replace("_", "-")
        return str(sched.vllm_config.structured_outputs_config.backend)

    def emit(self, step: int, record: Record) -> None:
        if self.active and not self._closed:
            heapq.heappush(self._heap, (step, next(self._seq), record))

    def flush(self, everything: bool = False) -> None:
        if not self.active or self._closed:
            return
        if not self._header_written:
            if not everything and self.step == 0:
                return  # wait for the first schedule: the request pool tells the SO backend
            self._write(self.header())
            self._header_written = True
        low = min((s for s, _, _ in self.inflight.values()), default=None)
        while self._heap and (everything or low is None or self._heap[0][0] < low):
            _, _, record = heapq.heappop(self._heap)
            self._write(record)

    def _write(self, record: Record) -> None:
        for sink in self.sinks:
            sink(record)

    def close(self) -> None:
        if self._closed or not self.active:
            return
        if self._header_written or self._heap:
            self.flush(everything=True)
        self._closed = True
        for closer in self._closers:
            closer()

    # -- events -----------------------------------------------------------------------------
    def request_event(
        self,
        step: int,
        req_id: str,
        event: str,
        reason: str | None,
        structured: bool | None = None,
        meta: dict[str, Any] | None = None,
        drop_stale_output: bool | None = None,
    ) -> None:
        rec: Record = {"record": "request", "step": step, "request": req_id, "event": event}
        if reason is not None:
            rec["reason"] = reason
        if structured is not None:
            rec["structured"] = structured
        if drop_stale_output is not None:
            rec["drop_stale_output"] = drop_stale_output
        if meta:
            rec["meta"] = meta
        self.emit(step, rec)

    def drop_pending(self, req_id: str, outcome: str, step: int) -> None:
        block = self.pending.pop(req_id, None)
        if block is not None and not block.empty():
            block.step = step
            block.scheduled = 0
            block.outcome = outcome
            self.emit(step, block.record())

    def stats_observed(self, before: Any, after: Any) -> None:
        b = _spec_counts(before, self.k)
        a = _spec_counts(after, self.k)
        delta = [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
        delta += [x - y for x, y in zip(a[3], b[3], strict=False)]
        if self.step_delta is None:
            self.step_delta = [0] * (3 + self.k)
        for i, v in enumerate(delta):
            self.step_delta[i] += v


def _draft_model(vc: Any) -> str | None:
    draft = getattr(getattr(vc.speculative_config, "draft_model_config", None), "model", None)
    return None if draft in (None, vc.model_config.model) else str(draft)


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


def _count_proposal(drafts: list[int], placeholders_are_drafts: bool) -> tuple[int, int]:
    """(proposed, padding) of a raw draft list; ``-1`` entries are placeholders."""
    n_pad = sum(1 for t in drafts if t == -1)
    if placeholders_are_drafts:
        return len(drafts), 0
    return len(drafts) - n_pad, n_pad


class RecorderMixin:
    """Hooks shared by the sync and async recording schedulers (put first in the MRO).

    Every hook is ``pre`` (recording, guarded) -> the stock method, called exactly once ->
    ``post`` (recording, guarded). A recording error is logged once and stops the recording;
    it never changes what the scheduler does.
    """

    _sx: _RecorderState

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sx = _RecorderState(self)  # type: ignore[arg-type]

    # lifecycle ----------------------------------------------------------------------------
    def add_request(self, request: Any) -> None:
        sx = self._sx
        requests = self.requests  # type: ignore[attr-defined]
        is_new = sx.guard("add_request", lambda: request.request_id not in requests)
        super().add_request(request)  # type: ignore[misc]
        if is_new:
            sx.guard("add_request", self._rec_add, request)

    def _rec_add(self, request: Any) -> None:
        sx = self._sx
        structured = bool(getattr(request, "use_structured_output", False))
        sx.request_event(sx.step + 1, request.request_id, "add", None, structured)
        sx.flush()

    def finish_requests(self, request_ids: Any, finished_status: Any) -> list[Any]:
        finished = super().finish_requests(request_ids, finished_status)  # type: ignore[misc]
        self._sx.guard("finish_requests", self._rec_finish, finished, finished_status)
        return finished

    def _rec_finish(self, finished: list[Any], finished_status: Any) -> None:
        sx = self._sx
        for request in finished:
            rid = request.request_id
            if rid in sx.done:
                continue
            sx.done.add(rid)
            if finished_status == RequestStatus.FINISHED_ABORTED:
                sx.aborted.add(rid)
                sx.request_event(sx.step, rid, "abort", None)
                sx.drop_pending(rid, "discarded_aborted", sx.step + 1)
            else:
                sx.request_event(sx.step, rid, "finish", _finish_reason(finished_status))
                sx.drop_pending(rid, "discarded_finished", sx.step + 1)
        sx.flush()

    def _preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super()._preempt_request(request, *args, **kwargs)  # type: ignore[misc]
        self._sx.guard("_preempt_request", self._rec_preempt, request)

    def _rec_preempt(self, request: Any) -> None:
        sx = self._sx
        # vLLM 0.32 decides per preemption whether in-flight (stale) output is dropped
        # (requires_kv_delivery, reset_prefix_cache): the preempt record carries the decision.
        drop = bool(getattr(request, "drop_stale_output", False))
        in_flight = int(getattr(request, "num_stale_output_tokens", 0))
        meta = {"stale_tokens_in_flight": in_flight}
        sx.request_event(
            sx.step, request.request_id, "preempt", None, meta=meta, drop_stale_output=drop
        )
        # Sync: the proposal waiting for this request is dropped with spec_token_ids.
        sx.drop_pending(request.request_id, "discarded_preempted", sx.step)

    # drafts -------------------------------------------------------------------------------
    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        sx = self._sx
        raw = sx.guard("update_draft_token_ids", self._rec_proposals, draft_token_ids)
        super().update_draft_token_ids(draft_token_ids)  # type: ignore[misc]
        if raw is not None:
            sx.guard("update_draft_token_ids", self._rec_pending, raw)

    def _rec_proposals(self, draft_token_ids: Any) -> list[tuple[str, Any, int, int]]:
        """Raw proposals before validate_tokens; proposals for ended requests are discarded."""
        sx = self._sx
        requests = self.requests  # type: ignore[attr-defined]
        placeholders_are_drafts = bool(getattr(self, "use_v2_model_runner", False))
        raw: list[tuple[str, Any, int, int]] = []
        target_step = sx.step + 1
        for req_id, drafts in zip(
            draft_token_ids.req_ids, draft_token_ids.draft_token_ids, strict=False
        ):
            drafts = list(drafts)
            request = requests.get(req_id)
            all_pad = bool(drafts) and all(t == -1 for t in drafts)
            proposed, padding = _count_proposal(
                drafts,
                placeholders_are_drafts
                and all_pad
                and not (request is not None and request.use_structured_output),
            )
            if request is None or request.is_finished():
                outcome = "discarded_aborted" if req_id in sx.aborted else "discarded_finished"
                block = Block(req_id, proposed, padding, step=target_step, outcome=outcome)
                if not block.empty():
                    sx.emit(target_step, block.record())
                continue
            if request.is_prefill_chunk:
                continue  # vLLM ignores drafts for partial prefills: no block
            raw.append((req_id, request, proposed, padding))
        return raw

    def _rec_pending(self, raw: list[tuple[str, Any, int, int]]) -> None:
        sx = self._sx
        for req_id, request, proposed, padding in raw:
            valid = len(request.spec_token_ids) if request.use_structured_output else None
            sx.pending[req_id] = Block(req_id, proposed, padding, grammar_valid=valid)
        sx.flush()

    def update_draft_token_ids_in_output(self, draft_token_ids: Any, scheduler_output: Any) -> None:
        sx = self._sx
        # Copy the lengths first: the stock method trims the lists in place.
        raw = sx.guard(
            "update_draft_token_ids_in_output",
            lambda: {
                req_id: _count_proposal(list(drafts), False)
                for req_id, drafts in zip(
                    draft_token_ids.req_ids, draft_token_ids.draft_token_ids, strict=False
                )
            },
        )
        super().update_draft_token_ids_in_output(  # type: ignore[misc]
            draft_token_ids, scheduler_output
        )
        if raw is not None:
            sx.guard("update_draft_token_ids_in_output", self._rec_validated, raw, scheduler_output)

    def _rec_validated(self, raw: dict[str, tuple[int, int]], scheduler_output: Any) -> None:
        entry = self._sx.inflight.get(id(scheduler_output))
        if entry is None:
            return
        invalid = scheduler_output.num_invalid_spec_tokens or {}
        requests = self.requests  # type: ignore[attr-defined]
        for req_id, block in entry[2].items():
            if req_id in raw:
                block.proposed, block.padding = raw[req_id]
            if req_id in invalid:
                block.invalid = int(invalid[req_id])
            request = requests.get(req_id)
            if request is not None and request.use_structured_output:
                block.grammar_valid = block.scheduled - int(invalid.get(req_id, 0))

    # steps --------------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        sx = self._sx
        step = sx.guard("schedule", sx.next_step)
        out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        if step is not None:
            sx.guard("schedule", self._rec_scheduled, step, out)
        return out

    def _rec_scheduled(self, step: int, out: Any) -> None:
        sx = self._sx
        spec_tokens = out.scheduled_spec_decode_tokens
        blocks: dict[str, Block] = {}
        for req_id in out.num_scheduled_tokens:
            spec = spec_tokens.get(req_id) or ()
            block = sx.pending.pop(req_id, None)
            if block is None:
                if not spec:
                    continue
                # Async: placeholders for drafts the worker proposes on the device; assume the
                # drafter fills each slot (corrected by the deferred SO path when it runs).
                if sx.is_async:
                    block = Block(req_id, proposed=len(spec))
                else:
                    proposed, padding = _count_proposal(list(spec), False)
                    block = Block(req_id, proposed, padding)
            block.step = step
            block.scheduled = len(spec)
            if not block.empty():
                blocks[req_id] = block
        sx.inflight[id(out)] = (step, out, blocks)
        sx.flush()

    def make_spec_decoding_stats(self, *args: Any, **kwargs: Any) -> Any:
        sx = self._sx
        before = kwargs.get("spec_decoding_stats", args[0] if args else None)
        snapshot = sx.guard("make_spec_decoding_stats", _Snapshot.of, before)
        after = super().make_spec_decoding_stats(*args, **kwargs)  # type: ignore[misc]
        if after is not None:
            sx.guard("make_spec_decoding_stats", sx.stats_observed, snapshot, after)
        return after

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        sx = self._sx
        ctx = sx.guard(
            "update_from_output", self._rec_outputs, scheduler_output, model_runner_output
        )
        sx.step_delta = None
        result = super().update_from_output(  # type: ignore[misc]
            scheduler_output, model_runner_output
        )
        if ctx is not None:
            sx.guard("update_from_output", self._rec_processed, scheduler_output, *ctx)
        sx.step_delta = None
        return result

    def _rec_outputs(
        self, scheduler_output: Any, model_runner_output: Any
    ) -> tuple[int, dict[str, Block], dict[str, Any]]:
        """Before the stock method: sampled / accepted / outcome of each block of the step."""
        sx = self._sx
        entry = sx.inflight.get(id(scheduler_output))
        step = entry[0] if entry is not None else sx.step
        blocks = entry[2] if entry is not None else {}
        requests = self.requests  # type: ignore[attr-defined]
        sampled_ids = model_runner_output.sampled_token_ids
        index = model_runner_output.req_id_to_index
        observed = WORKER_VERIFIED.pop(id(scheduler_output), None)
        verified: dict[str, int] = (observed() if callable(observed) else observed) or {}
        seen: dict[str, Any] = {}
        for req_id in scheduler_output.num_scheduled_tokens:
            request = requests.get(req_id)
            seen[req_id] = request
            block = blocks.get(req_id)
            if block is None:
                continue
            idx = index.get(req_id)
            block.sampled = len(sampled_ids[idx]) if sampled_ids and idx is not None else 0
            block.accepted = max(block.sampled - 1, 0)
            block.verified = verified.get(req_id)
            if request is None or request.is_finished():
                aborted = req_id in sx.aborted
                block.outcome = "discarded_aborted" if aborted else "discarded_finished"
            elif request.num_stale_output_tokens > 0:
                # Async, in flight when the request was preempted. vLLM 0.32 still counts it
                # unless request.drop_stale_output (header drop_stale_output says which).
                block.outcome = "discarded_stale"
            else:
                block.outcome = "applied"
        return step, blocks, seen

    def _rec_processed(
        self,
        scheduler_output: Any,
        step: int,
        blocks: dict[str, Block],
        seen: dict[str, Any],
    ) -> None:
        """After the stock method: the step's blocks, finishes, and the engine's own stats."""
        sx = self._sx
        sx.inflight.pop(id(scheduler_output), None)
        for block in blocks.values():
            sx.emit(step, block.record())
        for req_id, request in seen.items():
            if request is None or req_id in sx.done or not request.is_finished():
                continue
            sx.done.add(req_id)
            if request.status == RequestStatus.FINISHED_ABORTED:
                sx.aborted.add(req_id)
                sx.request_event(step, req_id, "abort", None)
            else:
                sx.request_event(step, req_id, "finish", _finish_reason(request.status))
        if sx.step_delta is not None and sx.step_delta[0] > 0:
            d = sx.step_delta
            sx.emit(
                step,
                {
                    "record": "step_stats",
                    "step": step,
                    "num_drafts": d[0],
                    "num_draft_tokens": d[1],
                    "num_accepted_tokens": d[2],
                    "num_accepted_tokens_per_pos": d[3:],
                },
            )
        sx.flush()

    def shutdown(self) -> None:
        try:
            super().shutdown()  # type: ignore[misc]
        finally:
            self._sx.guard("shutdown", self._sx.close)


class _Snapshot:
    """Frozen copy of a SpecDecodingStats' exported counters."""

    def __init__(self, stats: Any) -> None:
        self.num_drafts = stats.num_drafts
        self.num_draft_tokens = stats.num_draft_tokens
        self.num_accepted_tokens = stats.num_accepted_tokens
        self.num_accepted_tokens_per_pos = list(stats.num_accepted_tokens_per_pos)

    @classmethod
    def of(cls, stats: Any) -> _Snapshot | None:
        return None if stats is None else cls(stats)


class RecordingScheduler(RecorderMixin, Scheduler):
    """Stock vLLM 0.32 ``Scheduler`` that also writes a step log."""


class RecordingAsyncScheduler(RecorderMixin, AsyncScheduler):
    """Stock vLLM 0.32 ``AsyncScheduler`` that also writes a step log."""


# -- driver-side helpers (no engine needed) ---------------------------------------------------
SPEC_METRICS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}


def totals_from_metrics(metrics: Iterable[Any], k: int) -> Record:
    """The ``totals`` record from ``LLM.get_metrics()`` (summed over engines / labels)."""
    rec: Record = {
        "record": "totals",
        "source": "get_metrics",
        "num_drafts": 0,
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
        "num_accepted_tokens_per_pos": [0] * k,
    }
    for m in metrics:
        field = SPEC_METRICS.get(m.name)
        if field is not None:
            rec[field] += int(m.value)
        elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            for i, v in enumerate(m.values[:k]):
                rec["num_accepted_tokens_per_pos"][i] += int(v)
    return rec


def subtract_totals(after: Record, before: Record) -> Record:
    out = dict(after)
    for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        out[key] = after[key] - before[key]
    out["num_accepted_tokens_per_pos"] = [
        a - b
        for a, b in zip(
            after["num_accepted_tokens_per_pos"], before["num_accepted_tokens_per_pos"], strict=True
        )
    ]
    return out


def append_record(path: str, record: Record) -> None:
    """Append one whole record (e.g. ``totals`` after the engine has shut down)."""
    writer = StepLogWriter(path)
    try:
        writer.write(record)
    finally:
        writer.close()
