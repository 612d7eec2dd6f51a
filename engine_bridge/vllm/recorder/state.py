"""One scheduler's recording: the log file, the step-order buffer, the header, and failure.

`RecorderMixin` (recording.py) keeps one `_RecorderState` per scheduler, off the scheduler's own
namespace; the hooks hand it what they observe and it writes whole records in step order. The
environment variables that configure a recording (``ENV_*``) and `RecorderFailure`, which stops
a run loudly rather than leaving a log that silently ends, are declared here. No vLLM import.
"""

from __future__ import annotations

import json
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any

from spectally.engine_bridge.steplog import schema
from spectally.engine_bridge.steplog.writer import Block, Record, StepLogWriter, StepOrderBuffer

SCHEMA_VERSION = schema.SCHEMA_VERSION


class RecorderFailure(RuntimeError):
    """The recorder cannot record this engine faithfully: raised so the run fails loudly rather
    than leaving a log that silently stops (a header-only log reads like an idle engine)."""


ENV_PATH = "SPECTALLY_STEP_LOG"
ENV_CONFIG = "SPECTALLY_STEP_LOG_CONFIG"
ENV_SO_BACKEND = "SPECTALLY_SO_BACKEND"
ENV_BACKPORT = "SPECTALLY_BACKPORT"
# "0": the driver appends its own totals record (capture.py: LLM.get_metrics; the sims: the
# scheduler_stats they summed). Otherwise the recorder closes the log with one.
ENV_TOTALS = "SPECTALLY_STEP_LOG_TOTALS"

logger = logging.getLogger("vllm.spectally.recorder")


def _spec_counts(stats: Any, k: int) -> tuple[int, int, int, list[int]]:
    if stats is None:
        return 0, 0, 0, [0] * k
    per_pos = list(stats.num_accepted_tokens_per_pos) or [0] * k
    return stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens, per_pos


def counting_fix() -> bool:
    """Whether the vLLM this runs carries the counting fix (patches/): its ``SpecDecodingStats``
    counts the verified draft tokens, and its counters are the rfc counters. Read from the code,
    never from a setting: the header's ``counting`` says what the engine really counts."""
    try:
        from vllm.v1.spec_decode.metrics import SpecDecodingStats
    except ImportError:  # no vLLM: the hooks are driven by tests
        return False
    return "num_verified_draft_tokens" in getattr(SpecDecodingStats, "__dataclass_fields__", {})


class _RecorderState:
    """Per-scheduler recording state; kept off the scheduler's own namespace."""

    def __init__(self, sched: Any) -> None:
        spec = sched.vllm_config.speculative_config
        self.k = int(sched.num_spec_tokens or 0)
        self.enabled_spec = spec is not None and self.k > 0
        # Weak: `weakref.finalize` below closes the log when the scheduler is collected, which
        # a strong reference from this state (held by the finalizer) would prevent.
        self._sched = weakref.ref(sched)
        self.is_async = bool(getattr(type(sched), "spectally_async", False))
        self.step = 0  # last scheduled engine step (Scheduler.schedule calls)
        self.in_schedule = False  # inside Scheduler.schedule (preemptions there)
        self.pending: dict[str, Block] = {}  # sync: proposals waiting to be scheduled
        self.inflight: dict[int, tuple[int, Any, dict[str, Block]]] = {}
        self.done: set[str] = set()  # requests with a finish / abort record
        self.aborted: set[str] = set()
        self.preempted_at: dict[str, int] = {}  # last preempt record's step, while it matters
        self.added_at: dict[str, int] = {}  # add record's step, until the request ends
        # Sync: the step of the proposal a preemption between two steps dropped (the next one),
        # so that an end in the same gap comes after that discarded_preempted block.
        self.gap_dropped_at: dict[str, int] = {}
        self.step_delta: list[int] | None = None  # [drafts, draft_tokens, accepted, *per_pos]
        self.fixed = counting_fix()
        self.step_verified = 0  # with the fix: the step's verified draft tokens (step_delta's)
        self.buffer = StepOrderBuffer(self._write)
        self._late_reported = 0
        self._header_written = False
        self._closed = False
        self.sinks: list[Callable[[Record], None]] = []  # the log: records in step order
        # Live consumers (the backport): each record as soon as it is final, so live counters do
        # not wait for the step-order buffer (which holds the last step until the next one).
        self.live_sinks: list[Callable[[Record], None]] = []
        self._closers: list[Callable[[], None]] = []
        path = os.environ.get(ENV_PATH)
        self.writes_log = bool(path and self.enabled_spec)
        # The scheduler's own SpecDecodingStats, summed from what update_from_output returned
        # (EngineCoreOutputs.scheduler_stats): the totals record written at close.
        self.exported: list[int] = [0, 0, 0] + [0] * self.k
        self.writes_totals = self.writes_log and os.environ.get(ENV_TOTALS, "") != "0"
        # vLLM 0.34: trim_spec_tokens keeps the first invalid draft, the async draft update no
        # longer validates, and the V2 runner (the only one) hands back placeholder widths.
        self.trims = hasattr(getattr(sched, "structured_output_manager", None), "trim_spec_tokens")
        if path and self.enabled_spec:
            writer = StepLogWriter(path)
            self.sinks.append(writer.write)
            self._closers.append(writer.close)
        if os.environ.get(ENV_BACKPORT, "") not in ("", "0") and self.enabled_spec:
            try:
                from spectally.engine_bridge.vllm.recorder.backport import BackportPublisher

                pub = BackportPublisher.from_scheduler(sched, self.k)
            except Exception:  # a metrics add-on must never stop the engine
                logger.exception("spectally backport disabled")
            else:
                self.live_sinks.append(pub.observe)
                self._closers.append(pub.close)
        self.active = bool(self.sinks or self.live_sinks)
        if self.active:
            # on collection (`del llm`, GC) or at interpreter exit, whichever comes first
            weakref.finalize(sched, self.close)

    @property
    def sched(self) -> Any:
        sched = self._sched()
        if sched is None:
            raise RecorderFailure("the scheduler is gone before the log's header was written")
        return sched

    # -- safety -----------------------------------------------------------------------------
    def guard(self, where: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a recording step. On error: when a step log is being written, close it and raise
        `RecorderFailure` (the run fails loudly: a log that stops silently would read as a
        complete, idle engine); with only the live backport, log once, stop it, return None
        (a metrics add-on never stops the engine)."""
        if not self.active:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            if self.writes_log:
                self.fail()
                raise RecorderFailure(
                    f"spectally recorder failed in {where}: {exc!r}; the step log"
                    f" {os.environ.get(ENV_PATH)} is incomplete (no totals record)"
                ) from exc
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
            "use_v2_model_runner": self.trims or bool(getattr(sched, "use_v2_model_runner", False)),
            "scheduler_cls": f"{type(sched).__module__}.{type(sched).__qualname__}",
        }
        extra = os.environ.get(ENV_CONFIG)
        if extra:
            config.update(json.loads(extra))
        return schema.header(
            engine="vllm",
            engine_version=getattr(sched, "spectally_engine_version", None) or _vllm_version(),
            num_speculative_tokens=self.k,
            scheduling="async" if self.is_async else "sync",
            spec_method=str(getattr(spec, "method", None)),
            structured_outputs_backend=self._so_backend(),
            adaptive_verification=bool(getattr(spec, "enable_adaptive_verification", False)),
            drop_stale_output=bool(getattr(sched, "requires_kv_delivery", False)),
            engine_index=int(getattr(vc.parallel_config, "data_parallel_index", 0) or 0),
            counting="rfc" if self.fixed else None,
            config=config,
        )

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
            for live in self.live_sinks:
                live(record)
            if not self.sinks:
                return
            self.buffer.push(step, record)
            if self.buffer.late > self._late_reported:  # a stamping bug; say so, keep the data
                self._late_reported = self.buffer.late
                logger.warning(
                    "spectally recorder: record for step %d after step %d was written: %s",
                    step,
                    self.buffer.written_step,
                    record,
                )

    def floor(self) -> int:
        """The smallest step a record still to come can carry: the current step (an abort or
        finish between two steps is stamped with the step just processed, a preemption with
        the step being scheduled) or the oldest step still in flight (async)."""
        low = min((s for s, _, _ in self.inflight.values()), default=self.step)
        return min(low, self.step)

    def flush(self, everything: bool = False) -> None:
        if not self.active or self._closed:
            return
        if not self._header_written:
            if not everything and self.step == 0:
                return  # wait for the first schedule: the request pool tells the SO backend
            header = self.header()
            self._write(header)
            for live in self.live_sinks:
                live(header)
            self._header_written = True
        if everything:
            self.buffer.drain()
        else:
            self.buffer.release(self.floor())

    def _write(self, record: Record) -> None:
        for sink in self.sinks:
            sink(record)

    def close(self) -> None:
        """Flush and close; on shutdown, at interpreter exit (atexit) or when the scheduler is
        collected (weakref.finalize), whichever comes first: a plain script that never shuts
        the engine down still gets a complete log, ending with the totals record."""
        if self._closed or not self.active:
            return
        if self._header_written or len(self.buffer):
            self.flush(everything=True)
        if self.writes_totals and self._header_written:
            e = self.exported
            self._write(schema.totals("scheduler_stats", e[:3], e[3:]))
        self._closed = True
        for closer in self._closers:
            closer()

    # -- events -----------------------------------------------------------------------------
    def request_event(
        self,
        step: int,
        req_id: str,
        event: schema.Event,
        reason: str | None,
        structured: bool | None = None,
        meta: dict[str, Any] | None = None,
        drop_stale_output: bool | None = None,
    ) -> None:
        rec = schema.request_event(
            step,
            req_id,
            event,
            reason=reason,
            structured=structured,
            drop_stale_output=drop_stale_output,
            meta=meta,
        )
        self.emit(step, rec)

    def drop_pending(self, req_id: str, outcome: str, step: int) -> None:
        block = self.pending.pop(req_id, None)
        if block is not None and not block.empty():
            block.step = step
            block.scheduled = 0
            block.outcome = outcome
            block.delivered = 0  # never scheduled: nothing reached the request
            self.emit(step, block.record())

    def exported_from(self, outputs: Any) -> None:
        """Add the SpecDecodingStats of the EngineCoreOutputs update_from_output returned."""
        if not isinstance(outputs, dict):  # a test double's update_from_output
            return
        for eco in outputs.values():
            sched_stats = getattr(eco, "scheduler_stats", None)
            stats = getattr(sched_stats, "spec_decoding_stats", None)
            if stats is None:
                continue
            e = self.exported
            e[0] += stats.num_drafts
            e[1] += stats.num_draft_tokens
            e[2] += stats.num_accepted_tokens
            for i, v in enumerate(list(stats.num_accepted_tokens_per_pos)[: self.k]):
                e[3 + i] += v

    def stats_observed(self, before: Any, after: Any) -> None:
        b = _spec_counts(before, self.k)
        a = _spec_counts(after, self.k)
        delta = [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
        delta += [x - y for x, y in zip(a[3], b[3], strict=False)]
        if self.step_delta is None:
            self.step_delta = [0] * (3 + self.k)
            self.step_verified = 0
        self.step_verified += _verified(after) - _verified(before)
        for i, v in enumerate(delta):
            self.step_delta[i] += v


def _verified(stats: Any) -> int:
    return int(getattr(stats, "num_verified_draft_tokens", 0) or 0) if stats is not None else 0


def _draft_model(vc: Any) -> str | None:
    draft = getattr(getattr(vc.speculative_config, "draft_model_config", None), "model", None)
    return None if draft in (None, vc.model_config.model) else str(draft)


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)
