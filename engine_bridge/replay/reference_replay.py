"""The plain replay: every record through the reference machine, one event at a time.

This is the authority. A cursor walks the log one line at a time; each record is translated
into reference events (translate.py) and folded into the reference `Engine`; the engine's own
numbers are asserted against the reference's profile for that engine version:

* ``request_step``: ``scheduled`` and ``invalid`` against ``step.pipeline`` /
  ``step.legacy_scheduled_invalid`` of the block the reference built, ``accepted`` against
  ``max(sampled - 1, 0)``; a discarded ``outcome`` against how the reference closes the
  block, and by which step (SPEC.md ATTR-2: the discarding event names the block's step, in
  async at most the next; checked when the block closes and when a later step begins);
* ``step_stats``: num_drafts / num_draft_tokens / num_accepted_tokens / per-position accepted
  against the sum of ``step.legacy_step`` over that step's blocks, compared when the step
  closes (a step without a ``step_stats`` record is compared with zeros: the engine counted
  nothing; the last step of a log cut before its totals record is not compared);
* at the end: every record consumed, open blocks reported, the ``totals`` record and an optional
  final Prometheus scrape against the reference totals.

The columnar checker (columnar.py) hands every log it cannot vouch for to this class, which
then produces the report. Memory: the open requests, the current step and the last
`ENDED_MEMORY` ended ids (so that a late record says "request already finished").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from operator import add
from typing import Any, cast

from spectally.reference.arith import INT_ARITH
from spectally.reference.errors import IllegalEvent, InvariantViolation
from spectally.reference.events import Accept, Event, StepBegin
from spectally.reference.invariants import check_invariants
from spectally.reference.machine import Engine, EngineConfig, RequestState
from spectally.reference.profile import VLLM_LEGACY
from spectally.reference.step import (
    LegacyStepCounts,
    Mode,
    StepInputs,
    legacy_scheduled_invalid,
    legacy_step,
    pipeline,
    shift_terms,
)
from spectally.reference.transitions import discard_deadline

from ..steplog.profiles import check_profile, no_profile_reason, resolve
from ..steplog.records import BadInput, Record, exported_counters, parse_line
from ..steplog.schema import (
    APPLIED,
    PER_POS,
    RequestRecord,
    RequestStepRecord,
    StepStatsRecord,
)
from ..steplog.translate import (
    DISCARDED_OUTCOMES,
    BlockPlan,
    Header,
    Untranslatable,
    counting_profile,
    delivered_mismatch,
    lifecycle_event,
    translate_block,
    vllm_accepted,
)
from .accounts import (
    Claim,
    Held,
    StepAccount,
    StopReplay,
    block_mismatch,
    event_text,
    metrics_divergence,
    totals_divergence,
)
from .report import Divergence, RequestView, Tally, column, rows, stats_not_compared

ENDED_MEMORY = 100_000  # recently ended request ids kept for precise messages

# How a block closed: the reference's inputs and the engine's own counts of it.
Closing = tuple[StepInputs[int, bool], LegacyStepCounts[int]]

__all__ = ["ENDED_MEMORY", "Replayer", "StopReplay", "metrics_divergence"]


class Replayer:
    """Folds one step log through the reference; `feed` records (or `feed_lines`), then
    `finish`."""

    def __init__(
        self,
        path: str,
        *,
        max_divergences: int = 1,
        check_invariants: bool = False,
        metrics: str | None = None,
        force_profile: str | None = None,
    ) -> None:
        self.path = path
        self.force_profile = None if force_profile is None else check_profile(force_profile)
        self.max_divergences = max(1, max_divergences)
        self.check = check_invariants
        self.metrics_path = metrics
        self.header: Header | None = None
        self.engine: Engine | None = None
        self.mode = Mode.SYNC
        self.profile = VLLM_LEGACY
        self.k = 1
        self.step: int | None = None
        self.account: StepAccount | None = None
        self.held: dict[str, Held] = {}
        self.held_accepts: dict[str, list[tuple[Accept, Claim]]] = {}
        self.claims: dict[tuple[str, int], Claim] = {}
        self.ended: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self.quarantined: dict[str, int] = {}
        self.divergences: list[Divergence] = []
        self.notes: list[str] = []
        self.tally = Tally()
        self.legacy_sum = [0, 0, 0]
        self.legacy_pos: list[int] = []
        self.reported_sum = [0, 0, 0]
        self.reported_pos: list[int] = []
        self.totals_record: tuple[int, Record] | None = None
        # Totals records after the first, each from another source (spec/STEP_LOG.md): a
        # driver of the earlier recorder appended its own `get_metrics` totals after the
        # recorder's. Each is checked against the log like the first.
        self.more_totals: list[tuple[int, Record]] = []
        self.line = 0

    # -- driver ----------------------------------------------------------------------------------

    def feed_lines(self, lines: Iterable[tuple[int, bytes, bool]]) -> None:
        """`feed` every line of a log, each decoded and validated by `records.parse_line`."""
        for lineno, raw, has_newline in lines:
            self.line = lineno
            self.feed(lineno, parse_line(self.path, lineno, raw, has_newline))

    def feed(self, line: int, rec: Record) -> None:
        self.line = line
        kind = rec["record"]
        self.tally.counts[kind] += 1
        if self.totals_record is not None:
            self._another_totals(line, rec)
            return
        if kind == "header":
            self._header(line, rec)
            return
        if self.engine is None:
            raise BadInput(self.path, line, 1, "the first record must be the header")
        if kind == "totals":
            self._per_pos_length(line, rec)
            self.totals_record = (line, rec)
            return
        self._advance(line, rec["step"])
        # parse_line checked the record against the schema: read it by the schema's names
        if kind == "request_step":
            self._request_step(line, cast(RequestStepRecord, rec))
        elif kind == "request":
            self._request(line, cast(RequestRecord, rec))
        else:
            self._step_stats(line, cast(StepStatsRecord, rec))

    def _another_totals(self, line: int, rec: Record) -> None:
        """A record after the first totals record: only another source's totals may follow."""
        if rec["record"] != "totals":
            raise BadInput(self.path, line, 1, "record after the totals record (totals is last)")
        assert self.totals_record is not None
        sources = [r["source"] for _, r in (self.totals_record, *self.more_totals)]
        if rec["source"] in sources:
            raise BadInput(
                self.path,
                line,
                column(rec, "source"),
                f"a second totals record from the source {rec['source']!r}: each source"
                " closes a log once",
            )
        self._per_pos_length(line, rec)
        self.more_totals.append((line, rec))

    def finish(self) -> None:
        if self.engine is None:
            raise BadInput(self.path, max(self.line, 1), 1, "empty log: no header record")
        complete = self.totals_record is not None
        self._close_account(last=not complete)
        for rid in list(self.held):
            self._release(rid)
        for rid, state in self.engine.requests.items():
            for block in state.blocks:
                claim = self.claims.pop((rid, block.step), None)
                where = f"request {rid!r} {block.describe()}"
                self.tally.open_blocks.append(where)
                if complete and claim is not None and rid not in self.quarantined:
                    self._diverge(
                        claim.line,
                        "end",
                        block.step,
                        f"the record claims {claim.outcome}, but no later record closes the"
                        f" block: still open at the end of the log ({where})",
                        claim.record,
                        [("outcome", "open", claim.outcome)],
                        self._view(rid),
                        rule="E6",
                    )
        if not complete:
            self.tally.open_requests = len(self.engine.requests)
        self._final_checks()

    # -- records ---------------------------------------------------------------------------------

    def _header(self, line: int, rec: Record) -> None:
        if self.header is not None:
            raise BadInput(self.path, line, 1, "a second header record")
        if sum(self.tally.counts.values()) > 1:
            raise BadInput(self.path, line, 1, "the header must be the first record")
        header = resolve(Header.from_record(rec), self.force_profile)
        if header.profile is None:
            raise BadInput(self.path, line, 1, no_profile_reason(header))
        self.header = header
        self.mode = header.mode
        self.profile = counting_profile(header.profile)
        self.k = header.k
        self.engine = Engine(
            EngineConfig(
                header.mode,
                header.k,
                header.drop_stale_output,
                counting_profile(header.profile),
            ),
            check=self.check,
        )
        self.legacy_pos = [0] * self.k
        self.reported_pos = [0] * self.k

    def _advance(self, line: int, step: int) -> None:
        current = self.step
        if current is not None and step <= current:
            if step < current:
                raise BadInput(
                    self.path, line, 1, f"step went backwards: step {step} after step {current}"
                )
            return
        self._close_account()
        for rid, held in list(self.held.items()):
            if held.step + 1 < step:
                self._release(rid)
        self._overdue_claims(step)
        assert self.engine is not None
        self.engine.apply(StepBegin(step))
        self.step = step
        self.tally.steps += 1
        self.account = StepAccount(step, self.k)

    def _overdue_claims(self, step: int) -> None:
        """Step ``step`` begins: every lifecycle event of a step before ``step - 1`` is applied
        (held ones were released just now), so a discarded claim whose block none of them
        closed was not discarded when the engine discarded it."""
        for (rid, at), claim in list(self.claims.items()):
            deadline = discard_deadline(self.mode, at)
            # [ATTR-2] no event of a step <= the deadline discarded the block: a false claim
            if deadline + 1 < step and rid not in self.quarantined:
                del self.claims[rid, at]
                self._late_discard(claim, rid, at, None, f"nothing discarded it by step {deadline}")

    def _late_discard(self, claim: Claim, rid: str, at: int, when: int | None, what: str) -> None:
        """A divergence at the claim's own line: the block was not discarded when the engine
        must have discarded it (ATTR-2)."""
        deadline = discard_deadline(self.mode, at)
        self._diverge(
            claim.line,
            "request_step",
            at,
            f"the record claims {claim.outcome}, but {what}: the event that discards a block of"
            f" step {at} names step {deadline} at the latest ({self.mode.value}; SPEC.md ATTR-2)",
            claim.record,
            [("discarded at step", f"<= {deadline}", "none" if when is None else when)],
            self._view(rid),
            at="outcome",
            rule="ATTR-2",
        )

    def _lookup(self, line: int, rec: RequestRecord | RequestStepRecord) -> RequestState | None:
        """The request's state; None when it ended (a divergence is recorded) or is
        quarantined after an earlier divergence (counted as skipped)."""
        assert self.engine is not None
        rid = rec["request"]
        if rid in self.quarantined:
            self.tally.skipped += 1
            return None
        state = self.engine.requests.get(rid)
        if state is not None:
            return state
        ended = self.ended.get(rid)
        if ended is None:
            raise BadInput(
                self.path,
                line,
                column(rec, "request"),
                f"record for unknown request {rid!r} (no add record before it)",
            )
        status, at = ended
        self._diverge(
            line,
            rec["record"],
            rec.get("step"),
            f"request already {status} (line {at})",
            rec,
            [],
            RequestView(rid, ended=(status, at)),
            at="request",
            rule="E2",
        )
        self.quarantined[rid] = line
        return None

    def _request(self, line: int, rec: RequestRecord) -> None:
        assert self.engine is not None
        rid = rec["request"]
        if rec["event"] == "add":
            if rid in self.engine.requests or rid in self.ended or rid in self.quarantined:
                raise BadInput(
                    self.path, line, column(rec, "request"), f"request {rid!r} added twice"
                )
            self._apply(lifecycle_event(rec), line, rec)
            self.tally.requests += 1
            return
        if rid in self.held:
            self._release(rid)
        if self._lookup(line, rec) is None:
            return
        self.held[rid] = Held(lifecycle_event(rec), line, rec, rec["step"])

    def _request_step(self, line: int, rec: RequestStepRecord) -> None:
        """One draft block: applied to the reference, its counts compared with the record's,
        then folded into the step's account and the log's sums."""
        assert self.account is not None
        rid, step = rec["request"], rec["step"]
        if self.account.stats is not None:
            raise BadInput(
                self.path, line, 1, f"request_step for step {step} after that step's step_stats"
            )
        self._check_delivered(line, rec)
        held = self.held.get(rid)
        if held is not None and not (
            rec["outcome"] in DISCARDED_OUTCOMES and step <= held.step + 1
        ):
            self._release(rid)
        state = self._lookup(line, rec)
        if state is None:
            self.account.tainted = self.account.tainted or f"request {rid!r} is quarantined"
            return
        self.tally.checked += 1
        plan = self._plan(line, rec, state.structured)
        if plan is None:
            return
        if rec["outcome"] == APPLIED:
            closing = self._close_applied(line, rec, plan)
        else:
            closing = self._claim_discarded(line, rec, plan)
        if closing is None:
            return
        inputs, lg = closing
        if self._block_agrees(line, rec, plan, inputs):
            self._fold(line, rid, inputs, lg)

    def _plan(self, line: int, rec: RequestStepRecord, structured: bool) -> BlockPlan | None:
        """The block's reference events, applied up to its closing Accept; None (the step's
        account tainted) when the record cannot be translated or the reference rejects it."""
        assert self.account is not None
        try:
            plan = translate_block(self.mode, structured, rec, self.profile)
        except Untranslatable as exc:
            self.account.tainted = f"line {line} could not be translated"
            view = self._view(rec["request"])
            self._diverge(
                line, "request_step", rec["step"], exc.reason, rec, [], view, at=exc.field
            )
            return None
        for event in plan.events:
            if not self._apply(event, line, rec):
                self.account.tainted = f"line {line} was rejected by the reference"
                return None
        return plan

    def _close_applied(self, line: int, rec: RequestStepRecord, plan: BlockPlan) -> Closing | None:
        """An applied block closed now by its Accept (opened just now, it cannot have gone
        stale: the machine closes it applied): the reference's inputs and the engine's counts
        of it; None (the account tainted) when the reference rejects it."""
        assert self.account is not None and plan.accept is not None
        closed = self._apply_closing(plan.accept, line, rec)
        if closed is None:
            self.account.tainted = f"line {line} was rejected by the reference"
            return None
        return closed.inputs, closed.legacy

    def _claim_discarded(self, line: int, rec: RequestStepRecord, plan: BlockPlan) -> Closing:
        """A discarded block: its claimed outcome kept until the reference closes the block,
        its stale Accept held for the preemption; counted by neither profile."""
        assert self.engine is not None
        rid, step = rec["request"], rec["step"]
        block = self.engine.requests[rid].block_at(step)
        assert block is not None
        # A discarded block is counted by neither profile: stale output is discarded only
        # when vLLM dropped it, and then vLLM 0.32 skips it too (SPEC.md R6, L5, DEC-7).
        # Whether the preemption really dropped it is checked when its Accept is applied.
        inputs = block.inputs(rec["accepted"], False, False)
        lg = legacy_step(self.mode, inputs, INT_ARITH, self.profile)
        claim = Claim(line, rec["outcome"], rec)
        self.claims[(rid, step)] = claim
        if plan.accept is not None:
            self.held_accepts.setdefault(rid, []).append((plan.accept, claim))
            held = self.held.get(rid)
            if held is not None and held.record["event"] == "preempt":
                self._release(rid)
        return inputs, lg

    def _block_agrees(
        self, line: int, rec: RequestStepRecord, plan: BlockPlan, inputs: StepInputs[int, bool]
    ) -> bool:
        """The record's scheduled, invalid and accepted against the reference's; a divergence
        (the account tainted) at the first that differs. No outcome is compared here: an
        applied record's Accept closes a block opened by the same record, which cannot have
        gone stale, so the reference always applies it; a discarded one is checked where the
        reference closes the block (`_apply`) or has not by its deadline (`_overdue_claims`)."""
        assert self.account is not None
        mode, profile = self.mode, self.profile
        if plan.in_forward_pass:
            exp_invalid = legacy_scheduled_invalid(mode, inputs, INT_ARITH, profile)
        else:
            exp_invalid = rec["invalid"] or 0
        table = [
            (
                "scheduled",
                pipeline(mode, inputs, INT_ARITH, profile).scheduled_slots,
                rec["scheduled"],
            ),
            ("invalid", exp_invalid, rec["invalid"] or 0),
            ("accepted", vllm_accepted(rec["sampled"], INT_ARITH), rec["accepted"]),
        ]
        mismatch = block_mismatch(table)
        if mismatch is None:
            return True
        bad, reason, rule = mismatch
        self.account.tainted = f"line {line} diverged"
        view = self._view(rec["request"])
        self._diverge(
            line, "request_step", rec["step"], reason, rec, table, view, at=bad, rule=rule
        )
        return False

    def _fold(
        self, line: int, rid: str, inputs: StepInputs[int, bool], lg: LegacyStepCounts[int]
    ) -> None:
        """An agreeing block into the step's account, the log's legacy sums and the shift."""
        assert self.account is not None
        self.account.add(line, rid, lg)
        self.legacy_sum[0] += lg.num_drafts
        self.legacy_sum[1] += lg.num_draft_tokens
        self.legacy_sum[2] += lg.num_accepted_tokens
        for i in range(lg.num_accepted_tokens):
            self.legacy_pos[i] += 1
        shift = self.tally.shift
        terms = shift_terms(self.mode, inputs, lg, INT_ARITH, self.profile)
        for name, value in zip(shift, terms, strict=True):
            shift[name] += value

    def _step_stats(self, line: int, rec: StepStatsRecord) -> None:
        account = self.account
        assert account is not None
        if account.stats is not None:
            raise BadInput(self.path, line, 1, f"a second step_stats record for step {rec['step']}")
        self._per_pos_length(line, rec)
        account.stats = (line, rec)
        reported = self.reported_sum
        reported[0] += rec["num_drafts"]
        reported[1] += rec["num_draft_tokens"]
        reported[2] += rec["num_accepted_tokens"]
        per_pos = rec["num_accepted_tokens_per_pos"]
        self.reported_pos = list(map(add, self.reported_pos, per_pos))

    def _close_account(self, last: bool = False) -> None:
        """Compare the closing step's account with its step_stats record (zeros if none; not
        at all for the last step of a log that ends before its totals record)."""
        account = self.account
        if account is None:
            return
        self.account = None
        if account.stats is not None:
            line, rec = account.stats
            actual = exported_counters(rec)
            self._compare_account(account, line, rec, actual)
            return
        if account.empty() and account.tainted is None:
            return
        if last:
            self.notes.append(stats_not_compared(account.step))
            return
        self._compare_account(account, None, None, (0, 0, 0, [0] * self.k))

    def _compare_account(
        self,
        account: StepAccount,
        line: int | None,
        rec: Mapping[str, Any] | None,
        actual: tuple[int, int, int, list[int]],
    ) -> None:
        if account.tainted is not None:
            self.notes.append(f"step {account.step}: step_stats not compared ({account.tainted})")
            return
        self.tally.checked += 1
        divergence = account.divergence(self.path, line, rec, actual, self.line, self._view)
        if divergence is not None:
            self._add(divergence)

    # -- engine ----------------------------------------------------------------------------------

    def _apply(
        self, event: Event, line: int, rec: Mapping[str, Any], by: Held | None = None
    ) -> bool:
        """Apply one event; on an illegal event record a divergence and quarantine the request.
        ``by``: the lifecycle event that discards the blocks this event closes, when it is not
        the event itself (a stale block's Accept: the Preempt that made it stale)."""
        assert self.engine is not None
        try:
            closed = self.engine.apply(event)
        except IllegalEvent as exc:
            rid = getattr(event, "request", None)
            self._diverge(
                line,
                rec["record"],
                rec.get("step"),
                f"the reference rejects {event_text(event)}: {exc.reason}",
                rec,
                [],
                self._rejected(rid, exc.state),
            )
            if rid is not None:
                self.quarantined[rid] = line
            return False
        except InvariantViolation as exc:  # the reference itself is wrong: say so loudly
            self._diverge(
                line, "invariant", rec.get("step"), str(exc), rec, rule=exc.name.split()[0]
            )
            return False
        for c in closed:
            claim = self.claims.pop((c.request, c.step), None)
            if claim is None:
                continue
            if claim.outcome == c.outcome.value:
                cause, at = (event, line) if by is None else (by.event, by.line)
                # [ATTR-2] the discarding event names a step past the block's deadline
                if cause.step > discard_deadline(self.mode, c.step):
                    what = f"it was discarded at step {cause.step} (line {at}: {event_text(cause)})"
                    self._late_discard(claim, c.request, c.step, cause.step, what)
                continue
            self._diverge(
                claim.line,
                "request_step",
                c.step,
                f"the record claims {claim.outcome}; the reference closes the block as"
                f" {c.outcome.value} (at line {line}: {event_text(event)})",
                claim.record,
                [("outcome", c.outcome.value, claim.outcome)],
                self._view(c.request),
                at="outcome",
                rule="E6",
            )
        return True

    def _apply_closing(self, accept: Accept, line: int, rec: RequestStepRecord) -> Any:
        """Apply an applied block's Accept: the `ClosedBlock`, or None when it is illegal."""
        assert self.engine is not None
        try:
            closed = self.engine.apply(accept)
        except IllegalEvent as exc:
            self._diverge(
                line,
                "request_step",
                rec["step"],
                f"the reference rejects {event_text(accept)}: {exc.reason}",
                rec,
                [],
                self._rejected(accept.request, exc.state),
                at="accepted",
            )
            self.quarantined[accept.request] = line
            return None
        return closed[0]

    def _release(self, rid: str) -> None:
        """Apply a held lifecycle event (and, after a preemption, the held stale accepts)."""
        held = self.held.pop(rid)
        assert self.engine is not None
        if not self._apply(held.event, held.line, held.record):
            self.held_accepts.pop(rid, None)
            return
        event = held.record["event"]
        accepts = self.held_accepts.pop(rid, [])
        if event == "preempt":
            for accept, claim in accepts:
                if self.claims.get((rid, accept.step)) is claim:  # still open, now stale
                    self._apply(accept, claim.line, claim.record, by=held)
            return
        state = self.engine.requests.pop(rid)
        self.ended[rid] = (state.status.value, held.line)
        self.ended.move_to_end(rid)
        if len(self.ended) > ENDED_MEMORY:
            self.ended.popitem(last=False)

    # -- reporting -------------------------------------------------------------------------------

    def _check_delivered(self, line: int, rec: RequestStepRecord) -> None:
        """A divergence when the record's observed ``delivered`` contradicts its outcome
        (`translate.delivered_mismatch`); the record is then read as usual (its counts are
        still checked and folded, so one bad field does not cascade)."""
        bad = delivered_mismatch(rec)
        if bad is not None:
            self._diverge(
                line,
                "request_step",
                rec["step"],
                bad.reason,
                rec,
                [("delivered", bad.expected, bad.actual)],
                self._view(rec["request"]),
                at="delivered",
                rule="E6",
            )

    def _diverge(
        self,
        line: int,
        kind: str,
        step: int | None,
        reason: str,
        rec: Mapping[str, Any] | None,
        table: list[tuple[str, Any, Any]] | None = None,
        state: RequestView | None = None,
        *,
        at: str | None = None,
        rule: str | None = None,
    ) -> None:
        """Record a divergence as data (`Divergence`); the report renders it at the end."""
        self._add(
            Divergence(
                self.path, line, kind, step, reason, rec, table or [], state, at=at, rule=rule
            )
        )

    def _add(self, divergence: Divergence) -> None:
        self.tally.failed += 1
        self.divergences.append(divergence)
        if len(self.divergences) >= self.max_divergences:
            raise StopReplay

    def _view(self, rid: str) -> RequestView:
        """The reference's state of ``rid`` now: open, ended (how, where) or unknown."""
        assert self.engine is not None
        return RequestView(rid, self.engine.requests.get(rid), self.ended.get(rid))

    def _rejected(self, rid: str | None, words: str) -> RequestView:
        """``rid`` as the reference saw it when it rejected an event (`IllegalEvent.state`)."""
        assert self.engine is not None
        state = self.engine.requests.get(rid) if rid is not None else None
        return RequestView(rid, state, rejected=words)

    def _per_pos_length(self, line: int, rec: Mapping[str, Any]) -> None:
        """A step_stats or totals record's per-position counts: k of them."""
        n = len(rec[PER_POS])
        if n != self.k:
            raise BadInput(
                self.path,
                line,
                column(rec, PER_POS),
                f"{PER_POS} has {n} entries; the header says k = {self.k}",
            )

    def _final_checks(self) -> None:
        assert self.engine is not None
        totals = self.engine.totals
        try:
            check_invariants(totals)
        except InvariantViolation as exc:
            self._diverge(
                self.line, "invariant", self.step, str(exc), None, rule=exc.name.split()[0]
            )
        ref = (*self.legacy_sum, self.legacy_pos)
        machine = (
            totals.legacy.num_drafts,
            totals.legacy.num_draft_tokens,
            totals.legacy.num_accepted_tokens,
            list(totals.per_position("legacy_accepted")),
        )
        # Blocks still open in a cut log were counted at read time: compare only a whole log.
        if self.totals_record is not None and not self.divergences and tuple(ref) != machine:
            self._diverge(
                self.line,
                "internal",
                self.step,
                "the engine totals of the reference differ from the replay's per-block sums",
                None,
                rows(ref, machine),
            )
        if self.totals_record is not None:
            reported = (*self.reported_sum, self.reported_pos)
            for line, rec in (self.totals_record, *self.more_totals):
                self.tally.checked += 1
                divergence = totals_divergence(self.path, line, rec, ref, reported)
                if divergence is not None:
                    self._add(divergence)
        if self.metrics_path is not None:
            self._check_metrics(ref)

    def _check_metrics(self, ref: tuple[Any, ...]) -> None:
        assert self.header is not None
        divergence = metrics_divergence(self.metrics_path or "", self.header, ref, self.path)
        self.tally.checked += 1
        if divergence is not None:
            self.tally.failed += 1
            self.divergences.append(divergence)
