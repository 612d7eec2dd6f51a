"""The recording hooks (`RecorderMixin`) behind ``recorder.RecordingScheduler``; no vLLM import.

``recorder.py`` binds the mixin to vLLM's ``Scheduler`` / ``AsyncScheduler``; keeping the hooks
free of vLLM imports lets tests drive them through any interleaving of engine events without an
engine (tests/vllm/test_recorder.py). What is hooked and why: see ``recorder.py``.
"""

from __future__ import annotations

from typing import Any

from spectally.engine_bridge.steplog import schema
from spectally.engine_bridge.steplog.writer import (
    Block,
    count_proposal,
    finish_reason,
    status_name,
)
from spectally.engine_bridge.vllm.recorder.state import RecorderFailure, _RecorderState

# The scheduler methods the mixin wraps: each must exist on the vLLM class it is bound to, or
# the recorder refuses to start (`check_attachable`) instead of writing a partial log.
HOOKED = (
    "add_request",
    "finish_requests",
    "_preempt_request",
    "update_draft_token_ids",
    "update_draft_token_ids_in_output",
    "schedule",
    "make_spec_decoding_stats",
    "update_from_output",
    "shutdown",
)


def check_attachable(base: type) -> None:
    """Raise `RecorderFailure` naming every hook that cannot attach to ``base`` (a vLLM
    scheduler class) and every output field the hooks read that the release lacks."""
    missing = [name for name in HOOKED if not callable(getattr(base, name, None))]
    try:
        from vllm.v1.outputs import ModelRunnerOutput

        fields = set(getattr(ModelRunnerOutput, "__dataclass_fields__", {}))
        if fields and not ({"req_id_to_index", "req_ids"} & fields):
            missing.append("ModelRunnerOutput.req_ids / req_id_to_index")
    except ImportError:  # no vLLM: the hooks are driven by tests
        pass
    if missing:
        raise RecorderFailure(
            f"spectally recorder cannot attach to {base.__module__}.{base.__name__}: missing "
            f"{', '.join(missing)}; this vLLM release is not supported by the recorder"
        )


ABORTED = "FINISHED_ABORTED"

# Worker-side observations (GPU adaptive verification), filled by gpu_worker.py when the worker
# runs in the engine-core process (UniProcExecutor): id(scheduler_output) -> {req_id: verified}.
# Values are {req_id: verified} or a zero-argument callable returning it (read lazily, after the
# step finished, so the worker never waits for the device).
WORKER_VERIFIED: dict[int, Any] = {}


class RecorderMixin:
    """Hooks shared by the sync and async recording schedulers (put first in the MRO).

    Every hook is ``pre`` (recording, guarded) -> the stock method, called exactly once ->
    ``post`` (recording, guarded). A recording error is logged once and stops the recording;
    it never changes what the scheduler does.
    """

    _sx: _RecorderState

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        base = next(c for c in type(self).__mro__[1:] if not issubclass(c, RecorderMixin))
        check_attachable(base)
        super().__init__(*args, **kwargs)
        self._sx = _RecorderState(self)

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
        sx.added_at[request.request_id] = sx.step + 1
        sx.flush()

    def finish_requests(self, request_ids: Any, finished_status: Any) -> list[Any]:
        finished: list[Any] = super().finish_requests(  # type: ignore[misc]
            request_ids, finished_status
        )
        self._sx.guard("finish_requests", self._rec_finish, finished, finished_status)
        return finished

    def _rec_finish(self, finished: list[Any], finished_status: Any) -> None:
        sx = self._sx
        for request in finished:
            rid = request.request_id
            if rid in sx.done:
                continue
            sx.done.add(rid)
            # A request added in this same gap has its add stamped with the next step; so is
            # the proposal a preemption in this gap dropped (reset_prefix_cache), which the
            # preempt, not this end, closes.
            at = max(sx.step, sx.added_at.pop(rid, 0), sx.gap_dropped_at.pop(rid, 0))
            if status_name(finished_status) == ABORTED:
                sx.aborted.add(rid)
                sx.request_event(at, rid, "abort", None)
                sx.drop_pending(rid, "discarded_aborted", sx.step + 1)
            else:
                sx.request_event(at, rid, "finish", finish_reason(finished_status))
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
        sx.preempted_at[request.request_id] = sx.step
        # Sync: the proposal waiting for this request is dropped with spec_token_ids. It was
        # meant for the step being scheduled, or (a preemption between two steps, e.g.
        # reset_prefix_cache) for the next one.
        target = sx.step if sx.in_schedule else sx.step + 1
        if not sx.in_schedule and request.request_id in sx.pending:
            sx.gap_dropped_at[request.request_id] = target
        sx.drop_pending(request.request_id, "discarded_preempted", target)

    # drafts -------------------------------------------------------------------------------
    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        sx = self._sx
        raw = sx.guard("update_draft_token_ids", self._rec_proposals, draft_token_ids)
        super().update_draft_token_ids(draft_token_ids)  # type: ignore[misc]
        if raw is not None:
            sx.guard("update_draft_token_ids", self._rec_pending, raw)

    def _rec_proposals(self, draft_token_ids: Any) -> list[tuple[str, Any, int, int, int | None]]:
        """Raw proposals before validate_tokens; proposals for ended requests are discarded."""
        sx = self._sx
        requests = self.requests  # type: ignore[attr-defined]
        placeholders_are_drafts = sx.trims or bool(getattr(self, "use_v2_model_runner", False))
        raw: list[tuple[str, Any, int, int, int | None]] = []
        target_step = sx.step + 1
        for req_id, drafts in zip(
            draft_token_ids.req_ids, draft_token_ids.draft_token_ids, strict=False
        ):
            drafts = list(drafts)
            request = requests.get(req_id)
            all_pad = bool(drafts) and all(t == -1 for t in drafts)
            proposed, padding = count_proposal(
                drafts,
                placeholders_are_drafts
                and all_pad
                and not (request is not None and request.use_structured_output),
            )
            if request is None or request.is_finished():
                outcome = "discarded_aborted" if req_id in sx.aborted else "discarded_finished"
                block = Block(
                    req_id, proposed, padding, step=target_step, outcome=outcome, delivered=0
                )
                if not block.empty():
                    sx.emit(target_step, block.record())
                continue
            if request.is_prefill_chunk:
                continue  # vLLM ignores drafts for partial prefills: no block
            valid = self._grammar_valid(request, drafts) if sx.trims else None
            raw.append((req_id, request, proposed, padding, valid))
        return raw

    def _grammar_valid(self, request: Any, drafts: list[int]) -> int | None:
        """vLLM 0.34: the grammar-valid prefix of a structured proposal, read from the
        request's grammar before ``trim_spec_tokens`` runs (which keeps one draft more and no
        longer says how many were valid); None for an unstructured request. The backend's
        ``validate_tokens`` checks without advancing the grammar."""
        if not getattr(request, "use_structured_output", False):
            return None
        tokens: list[int] = []
        for t in drafts:  # strip_speculative_padding: placeholders and all after them
            if t == -1:
                break
            tokens.append(t)
        grammar = request.structured_output_request.grammar
        if grammar is None or not tokens:
            return 0
        if grammar.is_terminated():
            raise RecorderFailure(
                f"request {request.request_id}: drafts for a terminated grammar; the step log"
                " cannot state trim_spec_tokens' cut at the grammar start"
            )
        return len(grammar.validate_tokens(tokens))

    def _rec_pending(self, raw: list[tuple[str, Any, int, int, int | None]]) -> None:
        sx = self._sx
        for req_id, request, proposed, padding, valid in raw:
            if valid is None and request.use_structured_output:
                valid = len(request.spec_token_ids)  # <= 0.33: validate_tokens kept them
            sx.pending[req_id] = Block(req_id, proposed, padding, grammar_valid=valid)
        sx.flush()

    def update_draft_token_ids_in_output(self, draft_token_ids: Any, scheduler_output: Any) -> None:
        sx = self._sx
        # Copy the lengths first: the stock method trims the lists in place.
        raw = sx.guard("update_draft_token_ids_in_output", self._rec_deferred, draft_token_ids)
        super().update_draft_token_ids_in_output(  # type: ignore[misc]
            draft_token_ids, scheduler_output
        )
        if raw is not None:
            sx.guard("update_draft_token_ids_in_output", self._rec_validated, raw, scheduler_output)

    def _rec_deferred(self, draft_token_ids: Any) -> dict[str, tuple[int, int, int | None]]:
        """(proposed, padding, grammar-valid prefix or None) of each deferred proposal; the
        prefix is read here only for vLLM 0.34, whose update no longer validates."""
        requests = self.requests  # type: ignore[attr-defined]
        out: dict[str, tuple[int, int, int | None]] = {}
        for req_id, drafts in zip(
            draft_token_ids.req_ids, draft_token_ids.draft_token_ids, strict=False
        ):
            drafts = list(drafts)
            proposed, padding = count_proposal(drafts, False)
            request = requests.get(req_id)
            valid = None
            if self._sx.trims and request is not None and not request.is_finished():
                valid = self._grammar_valid(request, drafts)
            out[req_id] = (proposed, padding, valid)
        return out

    def _rec_validated(
        self, raw: dict[str, tuple[int, int, int | None]], scheduler_output: Any
    ) -> None:
        entry = self._sx.inflight.get(id(scheduler_output))
        if entry is None:
            return
        invalid = scheduler_output.num_invalid_spec_tokens or {}
        requests = self.requests  # type: ignore[attr-defined]
        for req_id, block in entry[2].items():
            valid = None
            if req_id in raw:
                block.proposed, block.padding, valid = raw[req_id]
            if req_id in invalid:
                block.invalid = int(invalid[req_id])
            request = requests.get(req_id)
            if request is not None and request.use_structured_output:
                if valid is None:  # <= 0.33: validate_tokens set the invalid count
                    valid = block.scheduled - int(invalid.get(req_id, 0))
                block.grammar_valid = min(valid, block.proposed)

    # steps --------------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        sx = self._sx
        step = sx.guard("schedule", sx.next_step)
        sx.in_schedule = True
        try:
            out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            sx.in_schedule = False
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
                    proposed, padding = count_proposal(list(spec), False)
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
        sx.guard("update_from_output", sx.exported_from, result)
        sx.step_delta = None
        return result

    def _rec_outputs(
        self, scheduler_output: Any, model_runner_output: Any
    ) -> tuple[int, dict[str, Block], dict[str, Any], dict[str, int]]:
        """Before the stock method: sampled / accepted / outcome of each block of the step."""
        sx = self._sx
        entry = sx.inflight.get(id(scheduler_output))
        step = entry[0] if entry is not None else sx.step
        blocks = entry[2] if entry is not None else {}
        requests = self.requests  # type: ignore[attr-defined]
        sampled_ids = model_runner_output.sampled_token_ids
        index = getattr(model_runner_output, "req_id_to_index", None)
        if index is None:  # vLLM 0.34 maps outputs by position in req_ids
            index = {rid: i for i, rid in enumerate(model_runner_output.req_ids)}
        observed = WORKER_VERIFIED.pop(id(scheduler_output), None)
        verified: dict[str, int] = (observed() if callable(observed) else observed) or {}
        seen: dict[str, Any] = {}
        lengths: dict[str, int] = {}  # output length before the update (for `delivered`)
        for req_id in scheduler_output.num_scheduled_tokens:
            request = requests.get(req_id)
            seen[req_id] = request
            block = blocks.get(req_id)
            if block is None:
                continue
            if request is not None:
                lengths[req_id] = len(request.output_token_ids)
            idx = index.get(req_id)
            block.sampled = len(sampled_ids[idx]) if sampled_ids and idx is not None else 0
            block.accepted = max(block.sampled - 1, 0)
            block.verified = verified.get(req_id)
            if request is None or request.is_finished():
                aborted = req_id in sx.aborted
                block.outcome = "discarded_aborted" if aborted else "discarded_finished"
            elif request.num_stale_output_tokens > 0 and request.drop_stale_output:
                # Async, in flight when the request was preempted in drop mode: vLLM skips it
                # (update_from_output: `output_is_stale and request.drop_stale_output`).
                block.outcome = "discarded_stale"
            else:
                # Stale but delivered (preempted without drop) is an ordinary applied block:
                # its tokens reach the request and vLLM counts it.
                block.outcome = "applied"
        return step, blocks, seen, lengths

    def _rec_processed(
        self,
        scheduler_output: Any,
        step: int,
        blocks: dict[str, Block],
        seen: dict[str, Any],
        lengths: dict[str, int],
    ) -> None:
        """After the stock method: the step's blocks, finishes, and the engine's own stats."""
        sx = self._sx
        sx.inflight.pop(id(scheduler_output), None)
        for req_id, block in blocks.items():
            request = seen.get(req_id)
            before = lengths.get(req_id)
            # Observed, not inferred: what the engine appended to the request from this block.
            if request is None:
                block.delivered = 0  # unknown to the scheduler: nothing to append to
            elif before is not None:
                block.delivered = len(request.output_token_ids) - before
            sx.emit(step, block.record())
        for req_id, request in seen.items():
            if request is None or req_id in sx.done or not request.is_finished():
                continue
            sx.done.add(req_id)
            # Async: stale output delivered after a preemption (scheduled in a later step) can
            # finish the request; the finish comes after that preempt record.
            at = max(step, sx.preempted_at.pop(req_id, step))
            sx.added_at.pop(req_id, None)
            sx.gap_dropped_at.pop(req_id, None)
            if status_name(request.status) == ABORTED:
                sx.aborted.add(req_id)
                sx.request_event(at, req_id, "abort", None)
            else:
                sx.request_event(at, req_id, "finish", finish_reason(request.status))
        if sx.step_delta is not None and sx.step_delta[0] > 0:
            d = sx.step_delta
            verified = sx.step_verified if sx.fixed else None  # the fixed engine's own count
            sx.emit(step, schema.step_stats(step, d[:3], d[3:], verified=verified))
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
        # an engine with the counting fix (state.counting_fix) also counts verified
        self.num_verified_draft_tokens = int(getattr(stats, "num_verified_draft_tokens", 0) or 0)

    @classmethod
    def of(cls, stats: Any) -> _Snapshot | None:
        return None if stats is None else cls(stats)
