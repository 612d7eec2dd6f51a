"""Backport: publish the RFC counters (drafted >= verified >= accepted) from a legacy vLLM 0.32.

Enable with one flag while the recording scheduler is in use (it feeds this module the same
request_step stream it writes to the step log; writing a log file is optional)::

    SPECTALLY_BACKPORT=1 vllm serve MODEL --speculative-config ... \
        --scheduler-cls spectally.engine_bridge.vllm.recorder.recorder.RecordingScheduler
    # async scheduling: ...recorder.RecordingAsyncScheduler

Prometheus counters, next to vLLM's own ``vllm:spec_decode_*`` (labels ``model_name``,
``engine``; per-position counters add ``position`` = 0..k-1; exposed with ``_total``):

==========================================================  ===================================
``spectally:spec_decode_num_drafted_tokens``                drafted (RFC: proposed by the
                                                            drafter, grammar-invalid and
                                                            AV-skipped included)
``spectally:spec_decode_num_verified_draft_tokens``         verified (in the target forward
                                                            pass)
``spectally:spec_decode_num_accepted_tokens``               accepted (bonus token excluded)
``spectally:spec_decode_num_spec_steps``                    spec steps (same under sync and
                                                            async)
``spectally:spec_decode_num_drafted_tokens_per_pos``        per position (prefix counts)
``spectally:spec_decode_num_verified_draft_tokens_per_pos``
``spectally:spec_decode_num_accepted_tokens_per_pos``
==========================================================  ===================================

The verified counters carry the specification's name (SPEC.md REP-1, DEC-17: vllm#58340's
``vllm:spec_decode_num_verified_draft_tokens``) under the ``spectally:`` prefix. Scrapes written
before they took it name them ``spectally:spec_decode_num_verified_tokens`` (and ``_per_pos``);
readers accept both (`FORMER_NAMES`, `summary_key`).

and a periodic log line (every ``SPECTALLY_BACKPORT_LOG_INTERVAL`` seconds, default 10; 0 = off)
with the fields of vLLM's ``SpecDecoding metrics:`` line plus the verified count and spec steps
(prefixed ``spectally RFC spec-decode counters:``, so parsers of vLLM's line never match it).

Where the counters live: the scheduler runs in the engine-core process. In-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, offline ``LLM``) they sit in the default registry next to
vLLM's. With a separate engine process they are visible to the API server's ``/metrics`` when
``PROMETHEUS_MULTIPROC_DIR`` is set for both processes (prometheus_client multiprocess mode),
or on their own port with ``SPECTALLY_BACKPORT_PORT=N`` (``start_http_server`` in the engine
process).

Counting: every request_step record goes through ONE function, `rfc_block_counts`, which calls
the executable reference (``spectally.reference``: ``StepQuery`` -> ``Counters.add_step``). The
mapping record -> reference inputs is `step_query`; nothing else here knows a counting rule.

Cost: a run has few distinct block shapes (k + 1 accept lengths times a few
proposal / grammar / scheduled cuts), so `BackportPublisher` evaluates the reference once per
distinct shape (`block_key`: exactly the record fields `step_query` reads, plus the mode) and
keeps the resulting counts and the Prometheus increments they imply (a bounded cache, here in the
bridge, not in the reference). The running totals count how often each shape was seen and are
summed with `Counters.merge` only when read (`totals`, the periodic log line). Figure and
benchmark: docs/vllm-runs.md, benchmarks/bench_backport.py.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from spectally.engine_bridge.steplog.translate import profile_for
from spectally.reference.counters import Counters
from spectally.reference.profile import PROFILES, VLLM_LEGACY, CountingProfile
from spectally.reference.step import Mode, StepQuery

# A child of vLLM's logger: its handler and format apply (vLLM configures "vllm" at INFO).
logger = logging.getLogger("vllm.spectally.backport")

ENV_LOG_INTERVAL = "SPECTALLY_BACKPORT_LOG_INTERVAL"
ENV_PORT = "SPECTALLY_BACKPORT_PORT"
PREFIX = "spectally:spec_decode_"
# Former name -> current name of a backport counter (as prometheus_client names a family: no
# ``_total``). The committed scrapes of real servers (tests/fixtures/vllm/*.prom) carry the former.
FORMER_NAMES = {
    PREFIX + "num_verified_tokens": PREFIX + "num_verified_draft_tokens",
    PREFIX + "num_verified_tokens_per_pos": PREFIX + "num_verified_draft_tokens_per_pos",
}


def summary_key(family: str) -> str | None:
    """The key a run summary or manifest gives a backport counter family (``verified_tokens``
    for either verified name, as the committed manifests have it); None for a per-position or
    foreign family."""
    family = FORMER_NAMES.get(family, family)
    if not family.startswith(PREFIX + "num_") or family.endswith("_per_pos"):
        return None
    key = family.removeprefix(PREFIX + "num_")
    return "verified_tokens" if key == "verified_draft_tokens" else key


def step_query(mode: Mode, record: dict[str, Any]) -> StepQuery:
    """A recorded request_step as the reference's inputs (SPEC.md stage caps)."""
    applied = record["outcome"] == "applied"
    return StepQuery(
        mode=mode,
        proposed=record["proposed"],
        accepted=record["accepted"],
        grammar_valid=record["grammar_valid"],
        scheduled=record["scheduled"],
        av_verify=record["verified"],  # null = no AV observed: the target saw every slot
        padding=record["padding"],
        applied=applied,
        legacy_reported=applied and record["sampled"] > 0,
    )


def rfc_block_counts(
    mode: Mode, k: int, record: dict[str, Any], profile: CountingProfile = VLLM_LEGACY
) -> Counters:
    """THE counting call: what one block adds to every counter, per the reference, through
    the pipeline of the engine release's ``profile`` (0.34 verifies the first invalid draft)."""
    return Counters.zero(k).add_step(mode, step_query(mode, record).inputs(), profile)


BlockKey = tuple[Any, ...]


def block_key(record: dict[str, Any]) -> BlockKey:
    """Everything `step_query` reads from a record (with the mode, the reference's whole input):
    two records with the same key count the same."""
    return (
        record["proposed"],
        record["accepted"],
        record["grammar_valid"],
        record["scheduled"],
        record["verified"],
        record["padding"],
        record["outcome"] == "applied",
        record["sampled"] > 0,
    )


def times(c: Counters, n: int) -> Counters:
    """n copies of ``c`` combined with `Counters.merge` (n >= 1; by doubling: merge is a
    commutative monoid)."""
    result: Counters | None = None
    power = c
    while n:
        if n & 1:
            result = power if result is None else result.merge(power)
        n >>= 1
        if n:
            power = power.merge(power)
    assert result is not None
    return result


@dataclass(eq=False)
class _Plan:
    """One distinct block shape: its counts and the counter increments they imply."""

    block: Counters
    incs: tuple[tuple[Any, int], ...]


@dataclass
class _Metrics:
    drafted: Any
    verified: Any
    accepted: Any
    spec_steps: Any
    drafted_pos: Any
    verified_pos: Any
    accepted_pos: Any
    errors: Any


_METRICS: _Metrics | None = None
_METRICS_LOCK = threading.Lock()
_HTTP_STARTED = False


def _metrics() -> _Metrics:
    """Create the counters once per process (prometheus_client refuses duplicate names)."""
    global _METRICS
    with _METRICS_LOCK:
        if _METRICS is None:
            from prometheus_client import Counter

            labels = ["model_name", "engine"]
            pos = [*labels, "position"]

            def c(name: str, doc: str, names: list[str]) -> Any:
                return Counter(PREFIX + name, doc, names)

            _METRICS = _Metrics(
                drafted=c("num_drafted_tokens", "Draft tokens proposed (RFC drafted).", labels),
                verified=c(
                    "num_verified_draft_tokens", "Draft tokens the target verified.", labels
                ),
                accepted=c("num_accepted_tokens", "Draft tokens accepted (RFC).", labels),
                spec_steps=c("num_spec_steps", "Speculative steps (RFC).", labels),
                drafted_pos=c("num_drafted_tokens_per_pos", "Drafted per position.", pos),
                verified_pos=c("num_verified_draft_tokens_per_pos", "Verified per position.", pos),
                accepted_pos=c("num_accepted_tokens_per_pos", "Accepted per position.", pos),
                errors=c("backport_errors", "Blocks the backport could not count.", labels),
            )
        return _METRICS


def _maybe_start_http() -> None:
    global _HTTP_STARTED
    port = os.environ.get(ENV_PORT)
    if port and not _HTTP_STARTED:
        from prometheus_client import start_http_server

        start_http_server(int(port))
        _HTTP_STARTED = True


class BackportPublisher:
    """Consumes step-log records (recorder sinks) and publishes RFC counters."""

    def __init__(
        self,
        k: int,
        model_name: str,
        engine: str = "0",
        mode: Mode = Mode.SYNC,
        log_interval: float | None = None,
    ) -> None:
        self.k = k
        self.mode = mode
        self.profile: CountingProfile = VLLM_LEGACY  # the header's release sets it
        self.labels = {"model_name": model_name, "engine": engine}
        self._base = Counters.zero(k)
        self._seen: dict[_Plan, int] = {}  # blocks not yet summed into _base, by shape
        self._plans: dict[BlockKey, _Plan] = {}
        self._logged = Counters.zero(k)
        if log_interval is None:
            log_interval = float(os.environ.get(ENV_LOG_INTERVAL, "10"))
        self.log_interval = log_interval
        self._last_log = time.monotonic()
        self._adaptive_verification = False
        self._warned_av = False
        m = _metrics()
        self._m = m
        self._scalar = {
            "drafted": m.drafted.labels(**self.labels),
            "verified": m.verified.labels(**self.labels),
            "accepted": m.accepted.labels(**self.labels),
            "spec_steps": m.spec_steps.labels(**self.labels),
        }
        self._pos = {
            name: [
                getattr(m, f"{name}_pos").labels(**self.labels, position=str(i)) for i in range(k)
            ]
            for name in ("drafted", "verified", "accepted")
        }
        _maybe_start_http()

    @classmethod
    def from_scheduler(cls, sched: Any, k: int) -> BackportPublisher:
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler

        vc = sched.vllm_config
        model_name = vc.model_config.served_model_name or vc.model_config.model
        if isinstance(model_name, list):
            model_name = model_name[0]
        engine = str(getattr(vc.parallel_config, "data_parallel_index", 0) or 0)
        mode = Mode.ASYNC if isinstance(sched, AsyncScheduler) else Mode.SYNC
        return cls(k, str(model_name), engine, mode)

    MAX_PLANS = 4096  # distinct block shapes kept (k <= 1024 bounds them anyway; cleared when full)

    @property
    def totals(self) -> Counters:
        """Every block observed so far, summed (the reference's `Counters`)."""
        if self._seen:
            total = self._base
            for plan, n in self._seen.items():
                total = total.merge(times(plan.block, n))
            self._base = total
            self._seen.clear()
        return self._base

    def _plan(self, record: dict[str, Any]) -> _Plan:
        key = block_key(record)
        plan = self._plans.get(key)
        if plan is None:
            block = rfc_block_counts(self.mode, self.k, record, self.profile)
            incs: list[tuple[Any, int]] = []
            r = block.rfc
            for name, value in (
                ("drafted", r.drafted),
                ("verified", r.verified),
                ("accepted", r.accepted),
                ("spec_steps", r.spec_steps),
            ):
                if value:
                    incs.append((self._scalar[name], value))
            for name in ("drafted", "verified", "accepted"):
                for i, value in enumerate(block.per_position(name)):
                    if value:
                        incs.append((self._pos[name][i], value))
            plan = _Plan(block, tuple(incs))
            if len(self._plans) >= self.MAX_PLANS:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def observe(self, record: dict[str, Any]) -> None:
        kind = record.get("record")
        if kind == "header":
            self.mode = Mode(record["scheduling"])
            own = profile_for(record["engine"], record["engine_version"])
            self.profile = PROFILES.get(own or "", VLLM_LEGACY)
            self._adaptive_verification = bool(record.get("adaptive_verification"))
            self._plans.clear()  # the mode is part of every cached shape
            return
        if kind != "request_step":
            return
        if self._adaptive_verification and record["verified"] is None and not self._warned_av:
            logger.warning(
                "adaptive verification is on but no worker hook reports verified counts; "
                "verified is overestimated (every scheduled draft is taken as verified)"
            )
            self._warned_av = True
        try:
            plan = self._plan(record)
        except Exception:  # never take the engine down for a metric
            logger.exception("spectally backport could not count block %s", record)
            self._m.errors.labels(**self.labels).inc()
            return
        self._seen[plan] = self._seen.get(plan, 0) + 1
        for child, value in plan.incs:
            child.inc(value)
        if self.log_interval > 0 and time.monotonic() - self._last_log >= self.log_interval:
            self.log()

    def log(self) -> None:
        """One line over the interval since the last one (same fields as vLLM's, plus verified)."""
        now = time.monotonic()
        totals = self.totals
        cur, last = totals.rfc, self._logged.rfc
        drafted = cur.drafted - last.drafted
        verified = cur.verified - last.verified
        accepted = cur.accepted - last.accepted
        steps = cur.spec_steps - last.spec_steps
        elapsed = max(now - self._last_log, 1e-9)
        pos_acc = [
            a - b
            for a, b in zip(
                totals.per_position("accepted"),
                self._logged.per_position("accepted"),
                strict=True,
            )
        ]
        pos_ver = [
            a - b
            for a, b in zip(
                totals.per_position("verified"),
                self._logged.per_position("verified"),
                strict=True,
            )
        ]
        per_pos = ", ".join(
            f"{a / v:.3f}" if v else "n/a" for a, v in zip(pos_acc, pos_ver, strict=True)
        )
        logger.info(
            "spectally RFC spec-decode counters: Mean acceptance length: %.2f, "
            "Accepted throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s, "
            "Accepted: %d tokens, Verified: %d tokens, Drafted: %d tokens, Spec steps: %d, "
            "Per-position acceptance rate (accepted/verified): %s, "
            "Avg Draft acceptance rate: %s",
            1.0 + accepted / steps if steps else 1.0,
            accepted / elapsed,
            drafted / elapsed,
            accepted,
            verified,
            drafted,
            steps,
            per_pos,
            f"{100.0 * accepted / drafted:.1f}%" if drafted else "n/a",
        )
        self._logged = totals
        self._last_log = now

    def close(self) -> None:
        if self.log_interval > 0 and self.totals != self._logged:
            self.log()
