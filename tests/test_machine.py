"""reference/machine.py: the engine state machine, rules E1-E7.

- A Hypothesis RuleBasedStateMachine drives many requests through random legal and illegal
  event sequences in both modes. After every event: all invariants hold (engine-wide and per
  request), engine totals == merge of per-request counters (INV-10), no counter decreased
  (INV-9). Every illegal event raises IllegalEvent naming request, step, state and event, and
  leaves the engine exactly as it was (deep snapshot before/after).
- A sync-vs-async differential property over the same stage inputs.
- Explicit illegal sequences, one per rule, and atomicity under any exception.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from spectally.reference import machine as machine_module
from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters
from spectally.reference.errors import IllegalEvent, InvariantViolation
from spectally.reference.events import (
    EVENT_TYPES,
    Abort,
    Accept,
    AddRequest,
    AVSkip,
    Event,
    Finish,
    GrammarReject,
    Pad,
    Preempt,
    Propose,
    StepBegin,
    Truncate,
    Verify,
)
from spectally.reference.invariants import check_invariants, check_monotone, check_totals_are_sums
from spectally.reference.machine import (
    STAGE_ORDER,
    STAGE_REQUIRES,
    Block,
    ClosedBlock,
    Engine,
    EngineConfig,
    Outcome,
    RequestState,
    RequestStatus,
    Stage,
    step_counts,
)
from spectally.reference.step import Mode, StepQuery, legacy_step, pipeline, rfc_step
from strategies import StagePlan, event_traces, modes, plan_events, plan_inputs, stage_plans

SYNC, ASYNC = Mode.SYNC, Mode.ASYNC

# What the state machine saw across all runs of one test (to show no rule is vacuous).
SEEN: Counter[str] = Counter()


def snapshot(engine: Engine) -> Any:
    return copy.deepcopy(
        (engine.config, engine.check, engine.current_step, engine.requests, engine.totals)
    )


def assert_illegal_reported(error: IllegalEvent, event: object, engine: Engine) -> None:
    """The error names the request, the step, the state and the event."""
    assert error.event is event
    step = getattr(event, "step", None)
    assert error.step == step
    request = getattr(event, "request", None)
    assert error.request == (request if isinstance(request, str) else None)
    assert error.state
    text = str(error)
    assert error.reason in text
    assert repr(event) in text
    assert f"step {step}" in text
    assert f"state {error.state}" in text
    assert (repr(error.request) if error.request is not None else "engine") in text


def attempt(engine: Engine, event: Event, legal: bool | None) -> list[ClosedBlock] | None:
    """Apply ``event``; ``legal`` True/False asserts the outcome, None accepts either.
    An illegal event must change nothing."""
    before = snapshot(engine)
    try:
        closed = engine.apply(event)
    except IllegalEvent as error:
        assert legal is not True, f"legal event refused: {error}"
        assert snapshot(engine) == before, "an illegal event changed the engine"
        assert_illegal_reported(error, event, engine)
        SEEN[f"illegal {type(event).__name__}"] += 1
        return None
    assert legal is not False, f"illegal event accepted: {event!r}"
    SEEN[f"legal {type(event).__name__}"] += 1
    for c in closed:
        SEEN[f"closed {c.outcome.value}"] += 1
    return closed


def open_blocks(engine: Engine) -> list[tuple[RequestState, Block]]:
    return [
        (state, block)
        for _, state in sorted(engine.requests.items())
        if state.status is RequestStatus.ACTIVE
        for block in state.blocks
    ]


def can_take(mode: Mode, state: RequestState, block: Block, stage: Stage) -> bool:
    order = STAGE_ORDER[mode]
    if order.index(stage) <= order.index(block.last_stage):
        return False
    needed = STAGE_REQUIRES[mode].get(stage)
    if needed is not None and needed not in block.stages:
        return False
    return stage is not Stage.GRAMMAR or state.structured


def so_far(mode: Mode, state: RequestState, block: Block) -> Any:
    return pipeline(mode, block.so_far, INT_ARITH)


class EngineMachine(RuleBasedStateMachine):
    """Many requests, random legal and illegal events, both modes."""

    def __init__(self) -> None:
        super().__init__()
        self.engine: Engine | None = None
        self.next_id = 0
        self.prev_totals: Counters | None = None
        self.prev_requests: dict[str, Counters] = {}

    def attempt(self, event: Event, legal: bool | None) -> None:
        """Apply one event and check every invariant right after it (not only per rule)."""
        attempt(self.e, event, legal)
        self.consistent()

    def attempt_closing(self, event: Event) -> list[ClosedBlock]:
        closed = attempt(self.e, event, True)
        self.consistent()
        assert closed is not None
        return closed

    @property
    def e(self) -> Engine:
        assert self.engine is not None
        return self.engine

    @property
    def mode(self) -> Mode:
        return self.e.config.mode

    @property
    def k(self) -> int:
        return self.e.config.k

    def active(self) -> list[RequestState]:
        return [s for _, s in sorted(self.e.requests.items()) if s.status is RequestStatus.ACTIVE]

    @initialize(
        mode=modes,
        k=st.integers(1, 5),
        drop=st.booleans(),
        structured_flags=st.lists(st.booleans(), min_size=1, max_size=4),
    )
    def start(self, mode: Mode, k: int, drop: bool, structured_flags: list[bool]) -> None:
        self.engine = Engine(EngineConfig(mode=mode, k=k, drop_stale_output=drop))
        self.prev_totals = self.engine.totals
        # Start inside a step with a few requests so that short runs already reach the blocks.
        self.attempt(StepBegin(0), legal=True)
        for structured in structured_flags:
            self.attempt(AddRequest(f"r{self.next_id}", 0, structured), legal=True)
            self.next_id += 1
        note(f"EngineConfig({mode}, k={k}, drop_stale_output={drop})")

    # -- steps and requests -----------------------------------------------------------------

    @rule(delta=st.integers(1, 2))
    def step_begin(self, delta: int) -> None:
        cur = self.e.current_step
        self.attempt(StepBegin(0 if cur is None else cur + delta), legal=True)

    @rule(delta=st.integers(-2, 0))
    def step_not_increasing(self, delta: int) -> None:
        cur = self.e.current_step
        if cur is not None:
            self.attempt(StepBegin(cur + delta), legal=False)

    @rule(structured=st.booleans())
    def add_request(self, structured: bool) -> None:
        cur = self.e.current_step
        rid = f"r{self.next_id}"
        if cur is None:
            self.attempt(AddRequest(rid, 0, structured), legal=False)
            return
        while rid in self.e.requests:  # random_event may have added it already
            self.next_id += 1
            rid = f"r{self.next_id}"
        self.next_id += 1
        self.attempt(AddRequest(rid, cur, structured), legal=True)

    @rule(data=st.data(), kind=st.sampled_from([Finish, Abort, Preempt]))
    def lifecycle(self, data: st.DataObject, kind: type) -> None:
        active = self.active()
        if not active:
            return
        busy = [s for s in active if s.blocks]
        # Prefer requests with open blocks: that is where discarding and staleness happen.
        state = data.draw(st.sampled_from(busy if busy and data.draw(st.booleans()) else active))
        self.attempt(kind(state.request, self.e.current_step), legal=True)

    def in_flight(self) -> list[RequestState]:
        return [s for s in self.active() if any(Stage.VERIFY in b.stages for b in s.blocks)]

    @precondition(lambda self: self.engine is not None and bool(self.in_flight()))
    @rule(data=st.data())
    def preempt_in_flight(self, data: st.DataObject) -> None:
        """Preempt a request whose block is in the forward pass (async: it goes stale)."""
        state = data.draw(st.sampled_from(self.in_flight()))
        drop = data.draw(st.sampled_from([None, False, True]))
        self.attempt(Preempt(state.request, self.e.current_step, drop), legal=True)

    def stale_blocks(self) -> list[tuple[RequestState, Block]]:
        return [(s, b) for s, b in open_blocks(self.e) if b.stale]

    @precondition(lambda self: self.engine is not None and bool(self.stale_blocks()))
    @rule(data=st.data())
    def stale_result_arrives(self, data: st.DataObject) -> None:
        """The result of a block that went stale comes back: delivered and applied, unless the
        preemption dropped it (then discarded as stale)."""
        state, block = data.draw(st.sampled_from(self.stale_blocks()))
        eligible = so_far(self.mode, state, block).eligible
        closed = self.attempt_closing(
            Accept(state.request, block.step, data.draw(st.integers(0, eligible)))
        )
        expected = Outcome.DISCARDED_STALE if block.stale_dropped else Outcome.APPLIED
        assert [c.outcome for c in closed] == [expected]

    @precondition(lambda self: self.engine is not None and self.e.current_step is not None)
    @rule(data=st.data())
    def preempted_in_flight_scenario(self, data: st.DataObject) -> None:
        """A fresh request's block reaches the forward pass, the request is preempted, then the
        result arrives (async: applied unless the stale output is dropped; sync: the preemption
        discarded it). A deep path the single-event rules reach too rarely on their own."""
        self.add_request(structured=False)
        rid, step = f"r{self.next_id - 1}", self.e.current_step
        assert step is not None
        n = data.draw(st.integers(0, self.k))
        self.attempt(Propose(rid, step, n), legal=True)
        self.attempt(Verify(rid, step, n), legal=True)
        drop = data.draw(st.sampled_from([None, False, True]))
        self.attempt(Preempt(rid, step, drop), legal=True)
        if self.mode is ASYNC:
            dropped = self.e.config.drop_stale_output if drop is None else drop
            closed = self.attempt_closing(Accept(rid, step, data.draw(st.integers(0, n))))
            expected = Outcome.DISCARDED_STALE if dropped else Outcome.APPLIED
            assert [c.outcome for c in closed] == [expected]

    @precondition(lambda self: self.engine is not None and self.e.current_step is not None)
    @rule(data=st.data(), end=st.sampled_from([Finish, Abort]))
    def ended_with_open_block_scenario(self, data: st.DataObject, end: type) -> None:
        """A fresh request opens a block, which may reach the forward pass, and ends: the block
        is discarded as finished or aborted. The single-event rules reach this only by chance,
        and the derandomized exploration shifts with unrelated source edits and with which test
        files are collected alongside (it once left discarded_finished unexplored)."""
        self.add_request(structured=False)
        rid, step = f"r{self.next_id - 1}", self.e.current_step
        assert step is not None
        n = data.draw(st.integers(0, self.k))
        self.attempt(Propose(rid, step, n), legal=True)
        if data.draw(st.booleans()):
            self.attempt(Verify(rid, step, n), legal=True)
        closed = self.attempt_closing(end(rid, step))
        expected = Outcome.DISCARDED_FINISHED if end is Finish else Outcome.DISCARDED_ABORTED
        assert [c.outcome for c in closed] == [expected]

    # -- block stages, legal counts ---------------------------------------------------------
    # Preconditions keep Hypothesis from spending steps on rules that have nothing to do.

    def ready_to_open(self) -> list[RequestState]:
        cur = self.e.current_step
        return [
            s
            for s in self.active()
            if s.block_at(cur) is None  # type: ignore[arg-type]
            and s.last_block_step != cur  # E3: one block per request and step
            and not (self.mode is SYNC and s.blocks)
            and all(Stage.VERIFY in b.stages for b in s.blocks)
        ]

    def advanceable(self) -> list[tuple[RequestState, Block, Stage]]:
        return [
            (s, b, stage)
            for s, b in open_blocks(self.e)
            for stage in STAGE_ORDER[self.mode]
            if can_take(self.mode, s, b, stage)
        ]

    @precondition(lambda self: self.engine is not None and bool(self.ready_to_open()))
    @rule(data=st.data(), opener=st.sampled_from([Propose, Propose, Pad]))
    def open_block(self, data: st.DataObject, opener: type) -> None:
        state = data.draw(st.sampled_from(self.ready_to_open()))
        count = data.draw(st.integers(0, self.k))
        self.attempt(opener(state.request, self.e.current_step, count), legal=True)

    def _advance(self, data: st.DataObject) -> None:
        """Move an open block through one of the stages it may take next, with a legal count."""
        state, block, stage = data.draw(st.sampled_from(self.advanceable()))
        p = so_far(self.mode, state, block)
        rid, step = state.request, block.step
        event: Event
        if stage is Stage.PAD:
            event = Pad(rid, step, data.draw(st.integers(0, self.k - block.so_far.proposed)))
        elif stage is Stage.GRAMMAR:
            base = block.so_far.proposed if self.mode is SYNC else p.scheduled_drafts
            event = GrammarReject(rid, step, data.draw(st.integers(0, base)))
        elif stage is Stage.TRUNCATE:
            event = Truncate(rid, step, data.draw(st.integers(0, p.scheduled_slots)))
        elif stage is Stage.AV:
            event = AVSkip(rid, step, data.draw(st.integers(0, p.scheduled_drafts)))
        elif stage is Stage.VERIFY:
            event = Verify(rid, step, p.verified)
        else:
            event = Accept(rid, step, data.draw(st.integers(0, p.eligible)))
        self.attempt(event, legal=True)

    # Two rules with the same body: blocks advance twice as often as any other single rule.
    @precondition(lambda self: self.engine is not None and bool(self.advanceable()))
    @rule(data=st.data(), stages=st.integers(1, 6))
    def advance(self, data: st.DataObject, stages: int) -> None:
        """Several stages in a row, possibly of different blocks."""
        for _ in range(stages):
            if not self.advanceable():
                break
            self._advance(data)

    @precondition(lambda self: self.engine is not None and bool(self.advanceable()))
    @rule(data=st.data())
    def advance_again(self, data: st.DataObject) -> None:
        self._advance(data)

    # -- illegal events ---------------------------------------------------------------------

    @rule(data=st.data())
    def over_count(self, data: st.DataObject) -> None:
        """A stage count one or more above what reaches the stage (or a wrong Verify)."""
        stage = data.draw(st.sampled_from([Stage.GRAMMAR, Stage.TRUNCATE, Stage.AV, Stage.VERIFY]))
        candidates = [(s, b) for s, b in open_blocks(self.e) if can_take(self.mode, s, b, stage)]
        over = data.draw(st.integers(1, 3))
        if not candidates:
            return
        state, block = data.draw(st.sampled_from(candidates))
        p = so_far(self.mode, state, block)
        rid, step = state.request, block.step
        event: Event
        if stage is Stage.GRAMMAR:
            base = block.so_far.proposed if self.mode is SYNC else p.scheduled_drafts
            event = GrammarReject(rid, step, base + over)
        elif stage is Stage.TRUNCATE:
            event = Truncate(rid, step, p.scheduled_slots + over)
        elif stage is Stage.AV:
            event = AVSkip(rid, step, p.scheduled_drafts + over)
        else:
            event = Verify(rid, step, data.draw(st.sampled_from([p.verified + over, -over])))
        self.attempt(event, legal=False)

    @rule(data=st.data())
    def accept_too_many(self, data: st.DataObject) -> None:
        candidates = [
            (s, b) for s, b in open_blocks(self.e) if can_take(self.mode, s, b, Stage.ACCEPT)
        ]
        if candidates:
            state, block = data.draw(st.sampled_from(candidates))
            p = so_far(self.mode, state, block)
            over = data.draw(st.integers(1, 3))
            self.attempt(Accept(state.request, block.step, p.eligible + over), legal=False)

    @rule(data=st.data())
    def out_of_order(self, data: st.DataObject) -> None:
        """A stage its block has already passed (or a second proposal)."""
        candidates = [(s, b) for s, b in open_blocks(self.e)]
        if not candidates:
            return
        state, block = data.draw(st.sampled_from(candidates))
        order = STAGE_ORDER[self.mode]
        passed = [st_ for st_ in order if order.index(st_) <= order.index(block.last_stage)]
        stage = data.draw(st.sampled_from(passed))
        cls = {v: k for k, v in machine_module.BLOCK_EVENT_STAGE.items()}[stage]
        self.attempt(cls(state.request, block.step, 0), legal=False)

    @rule(data=st.data())
    def ended_request(self, data: st.DataObject) -> None:
        ended = [s for s in self.e.requests.values() if s.status is not RequestStatus.ACTIVE]
        cur = self.e.current_step
        if ended and cur is not None:
            state = data.draw(st.sampled_from(ended))
            kind = data.draw(st.sampled_from(list(EVENT_TYPES[2:])))
            event = kind(state.request, cur) if kind in (Finish, Abort, Preempt) else None
            if event is None:
                event = kind(state.request, cur, 0)
            self.attempt(event, legal=False)

    @rule(
        kind=st.sampled_from(EVENT_TYPES),
        request=st.sampled_from(["r0", "r1", "r2", "r3", "ghost"]),
        step_delta=st.integers(-2, 1),
        count=st.integers(-1, 6),
    )
    def random_event(self, kind: type, request: str, step_delta: int, count: int) -> None:
        """Anything at all: legal or illegal, it must keep the engine consistent."""
        cur = self.e.current_step
        step = (0 if cur is None else cur) + step_delta
        event: Event
        if kind is StepBegin:
            event = StepBegin(step)
        elif kind is AddRequest:
            event = AddRequest(request, step, count % 2 == 0)
        elif kind in (Finish, Abort, Preempt):
            event = kind(request, step)
        else:
            event = kind(request, step, count)
        self.attempt(event, legal=None)

    # -- after every rule -------------------------------------------------------------------

    @invariant()
    def consistent(self) -> None:
        if self.engine is None:
            return
        e = self.engine
        assert self.prev_totals is not None
        if e.totals is not self.prev_totals:  # states are immutable: same object, same state
            check_invariants(e.totals)
            check_monotone(self.prev_totals, e.totals)
        for rid, state in e.requests.items():
            before = self.prev_requests.get(rid)
            if state.counters is not before:
                check_invariants(state.counters)
                if before is not None:
                    check_monotone(before, state.counters)
            assert state.counters.k == e.config.k
            if state.status is not RequestStatus.ACTIVE:
                assert state.blocks == ()
            assert [b.step for b in state.blocks] == sorted({b.step for b in state.blocks})
            if e.config.mode is SYNC:
                assert len(state.blocks) <= 1
                assert not any(b.stale for b in state.blocks)
        assert set(self.prev_requests) <= set(e.requests)  # requests are never forgotten
        check_totals_are_sums(e.totals, [s.counters for s in e.requests.values()])
        self.prev_totals = e.totals
        self.prev_requests = {rid: s.counters for rid, s in e.requests.items()}


def test_state_machine() -> None:
    SEEN.clear()
    profile = settings.default
    run_state_machine_as_test(
        EngineMachine,
        # At least 120 runs even in the ci profile (the deep paths need them); the slower
        # profiles already ask for more.
        settings=settings(profile, max_examples=max(120, profile.max_examples)),
    )
    # Non-vacuity: both legal and illegal events of every kind happened, blocks closed every way.
    for name in ("Propose", "Pad", "Truncate", "AVSkip", "Verify", "Accept", "GrammarReject"):
        assert SEEN[f"legal {name}"] > 0, (name, SEEN)
        assert SEEN[f"illegal {name}"] > 0, (name, SEEN)
    for name in ("StepBegin", "AddRequest", "Finish", "Abort", "Preempt"):
        assert SEEN[f"legal {name}"] > 0, (name, SEEN)
        assert SEEN[f"illegal {name}"] > 0, (name, SEEN)
    for outcome in Outcome:
        assert SEEN[f"closed {outcome.value}"] > 0, (outcome, SEEN)


# -- legal traces --------------------------------------------------------------------------


@given(event_traces())
def test_generated_traces_are_legal_and_consistent(case: tuple[EngineConfig, list[Event]]) -> None:
    config, events = case
    engine = Engine(config)
    closed = engine.run(events)
    check_totals_are_sums(engine.totals, [s.counters for s in engine.requests.values()])
    # Every closed block is folded exactly once, engine-wide and into its request.
    again = Counters.zero(config.k)
    for c in closed:
        again = again.add_step(config.mode, c.inputs)
        # The counts a closed block carries are its rules' counts (evaluated once, folded twice).
        assert c.rfc == rfc_step(config.mode, c.inputs, INT_ARITH)
        assert c.legacy == legacy_step(config.mode, c.inputs, INT_ARITH)
    assert again == engine.totals
    # Replaying without runtime checks gives the same state.
    unchecked = Engine(config, check=False)
    assert unchecked.run(events) == closed
    assert unchecked.totals == engine.totals


# -- sync vs async differential --------------------------------------------------------------


def run_plans(mode: Mode, k: int, plans: list[StagePlan]) -> Engine:
    engine = Engine(EngineConfig(mode=mode, k=k))
    engine.apply(StepBegin(0))
    for i, plan in enumerate(plans):
        engine.apply(AddRequest(f"r{i}", 0, plan.structured))
    for i, plan in enumerate(plans):
        engine.run(plan_events(mode, plan, f"r{i}", 0))
    return engine


@st.composite
def plan_lists(draw: st.DrawFn, all_rejected: bool = False) -> tuple[int, list[StagePlan]]:
    k = draw(st.integers(1, 6))
    plans = draw(st.lists(stage_plans(k, structured=True if all_rejected else None), max_size=5))
    if all_rejected:
        plans = [StagePlan(**{**p.__dict__, "grammar_valid": 0}) for p in plans]
    return k, plans


def assert_sync_async_agree(k: int, plans: list[StagePlan]) -> None:
    s, a = run_plans(SYNC, k, plans), run_plans(ASYNC, k, plans)
    assert s.totals.rfc.drafted == a.totals.rfc.drafted
    assert s.totals.rfc.accepted == a.totals.rfc.accepted
    assert s.totals.rfc.spec_steps == a.totals.rfc.spec_steps
    gap = a.totals.rfc.verified - s.totals.rfc.verified
    assert gap == a.totals.rfc.grammar_invalid_verified >= 0
    assert s.totals.rfc.grammar_invalid_verified == 0
    assert a.totals.rfc.grammar_invalid_unverified == 0
    for rid in s.requests:
        rs, ra = s.request_counters(rid).rfc, a.request_counters(rid).rfc
        assert (rs.drafted, rs.accepted, rs.spec_steps) == (ra.drafted, ra.accepted, ra.spec_steps)
        assert ra.verified - rs.verified == ra.grammar_invalid_verified


@given(plan_lists())
def test_sync_and_async_agree(case: tuple[int, list[StagePlan]]) -> None:
    assert_sync_async_agree(*case)


@given(plan_lists(all_rejected=True))
def test_sync_and_async_agree_when_grammar_rejects_every_draft(
    case: tuple[int, list[StagePlan]],
) -> None:
    k, plans = case
    assert_sync_async_agree(k, plans)
    s, a = run_plans(SYNC, k, plans), run_plans(ASYNC, k, plans)
    assert s.totals.rfc.accepted == a.totals.rfc.accepted == 0
    # vLLM 0.32 (issue #56977): async counts a step sync does not record.
    assert s.totals.legacy.num_drafts <= a.totals.legacy.num_drafts


def test_all_rejected_example_spec_steps() -> None:
    plan = StagePlan(3, 0, True, 0, 3, 3, 0.0)
    s, a = run_plans(SYNC, 4, [plan]), run_plans(ASYNC, 4, [plan])
    assert s.totals.rfc.spec_steps == a.totals.rfc.spec_steps == 1
    assert (s.totals.rfc.verified, a.totals.rfc.verified) == (0, 3)
    assert (s.totals.legacy.num_drafts, a.totals.legacy.num_drafts) == (0, 1)


@given(st.integers(1, 6).flatmap(lambda k: st.tuples(st.just(k), stage_plans(k))), modes)
def test_closed_block_is_the_plan(case: tuple[int, StagePlan], mode: Mode) -> None:
    """The events realise the plan: the closed block's counts equal the plan's step counts."""
    k, plan = case
    engine = run_plans(mode, k, [plan])
    expected = Counters.zero(k).add_step(mode, plan_inputs(mode, plan))
    assert engine.totals == expected


# -- explicit illegal sequences ----------------------------------------------------------------


def engine_at(mode: Mode = SYNC, k: int = 4, structured: bool = True, **kw: Any) -> Engine:
    e = Engine(EngineConfig(mode=mode, k=k, **kw))
    e.run([StepBegin(0), AddRequest("a", 0, structured)])
    return e


def assert_illegal(e: Engine, event: Any, match: str | None) -> IllegalEvent:
    before = snapshot(e)
    with pytest.raises(IllegalEvent, match=match) as info:
        e.apply(event)
    assert snapshot(e) == before
    assert_illegal_reported(info.value, event, e)
    return info.value


@pytest.mark.parametrize("mode", list(Mode))
def test_accept_before_verify(mode: Mode) -> None:
    e = engine_at(mode)
    e.apply(Propose("a", 0, 2))
    assert_illegal(e, Accept("a", 0, 0), "ACCEPT requires VERIFY first")


def test_async_grammar_before_verify() -> None:
    e = engine_at(ASYNC)
    e.apply(Propose("a", 0, 2))
    assert_illegal(e, GrammarReject("a", 0, 1), "GRAMMAR requires VERIFY first")


def test_sync_grammar_after_verify() -> None:
    e = engine_at(SYNC)
    e.run([Propose("a", 0, 2), Verify("a", 0, 2)])
    assert_illegal(e, GrammarReject("a", 0, 1), "GRAMMAR cannot follow VERIFY in sync mode")


@pytest.mark.parametrize("mode", list(Mode))
def test_accepting_more_than_eligible(mode: Mode) -> None:
    e = engine_at(mode)
    e.run([Propose("a", 0, 3), AVSkip("a", 0, 1), Verify("a", 0, 2)])
    err = assert_illegal(e, Accept("a", 0, 3), "accepted cannot exceed the drafts eligible")
    assert err.state == "active; block@0 after VERIFY"


def test_accepting_grammar_invalid_drafts_async() -> None:
    e = engine_at(ASYNC)
    e.run([Propose("a", 0, 3), Verify("a", 0, 3), GrammarReject("a", 0, 2)])
    assert_illegal(e, Accept("a", 0, 2), "accepted cannot exceed")
    assert e.apply(Accept("a", 0, 1))[0].outcome is Outcome.APPLIED


@pytest.mark.parametrize("mode", list(Mode))
def test_proposing_twice_in_a_step(mode: Mode) -> None:
    e = engine_at(mode)
    e.apply(Propose("a", 0, 2))
    assert_illegal(e, Propose("a", 0, 1), "at most one proposal per step")
    e.run([Verify("a", 0, 2), Accept("a", 0, 1)])
    # Closed, but the step already had its block: E3 refuses a second one in the same step,
    # whatever opens it, and the next step may open one again.
    assert_illegal(e, Propose("a", 0, 1), "at most one draft block per step")
    assert_illegal(e, Pad("a", 0, 1), "at most one draft block per step")
    e.apply(StepBegin(1))
    e.apply(Propose("a", 1, 1))


def test_pad_then_propose_is_out_of_order() -> None:
    e = engine_at(SYNC)
    e.apply(Pad("a", 0, 2))
    assert_illegal(e, Propose("a", 0, 1), "PROPOSE cannot follow PAD")


@pytest.mark.parametrize(
    "event",
    [
        Propose("ghost", 0, 1),
        Accept("ghost", 0, 0),
        Finish("ghost", 0),
        Abort("ghost", 0),
        Preempt("ghost", 0),
    ],
)
def test_event_for_unknown_request(event: Event) -> None:
    err = assert_illegal(engine_at(), event, "unknown request")
    assert err.state == "unknown"


@pytest.mark.parametrize("end", [Finish, Abort])
@pytest.mark.parametrize(
    "event",
    [Propose("a", 0, 1), Pad("a", 0, 1), Finish("a", 0), Abort("a", 0), Preempt("a", 0)],
)
def test_event_for_ended_request(end: type, event: Event) -> None:
    e = engine_at()
    e.apply(end("a", 0))
    status = "finished" if end is Finish else "aborted"
    err = assert_illegal(e, event, f"request already {status}")
    assert err.state == f"{status}; no open block"


def test_adding_a_request_twice() -> None:
    assert_illegal(engine_at(), AddRequest("a", 0), "request id already added")


@pytest.mark.parametrize(
    "event",
    [
        Propose("a", 0, -1),
        Pad("a", 0, -2),
        Propose("a", 0, True),
        Propose("a", 0, 1.0),
    ],
)
def test_bad_count(event: Event) -> None:
    assert_illegal(engine_at(), event, "count must be an int >= 0")


@pytest.mark.parametrize("mode", list(Mode))
def test_negative_count_at_every_stage(mode: Mode) -> None:
    e = engine_at(mode)
    e.apply(Propose("a", 0, 2))
    for cls in (Pad, GrammarReject, Truncate, AVSkip, Verify, Accept):
        assert_illegal(e, cls("a", 0, -1), "count must be an int >= 0")


def test_step_going_backwards() -> None:
    e = engine_at()
    e.apply(StepBegin(3))
    err = assert_illegal(e, StepBegin(3), r"steps must increase \(current step is 3\)")
    assert err.request is None and err.state == "engine at step 3"
    assert_illegal(e, StepBegin(1), "steps must increase")


@pytest.mark.parametrize("bad", [-1, True, 1.5, "2"])
def test_bad_step_number(bad: Any) -> None:
    assert_illegal(engine_at(), StepBegin(bad), "step must be an int >= 0")
    assert_illegal(engine_at(), Propose("a", bad, 1), "step must be an int >= 0")


def test_step_that_has_not_begun() -> None:
    e = Engine(EngineConfig(SYNC, 4))
    assert_illegal(e, AddRequest("a", 0), r"step 0 has not begun \(current step: None\)")
    e = engine_at()
    assert_illegal(e, Propose("a", 1, 1), "step 1 has not begun")
    assert_illegal(e, Finish("a", 1), "step 1 has not begun")


def test_add_request_in_a_past_step() -> None:
    e = engine_at()
    e.apply(StepBegin(1))
    assert_illegal(e, AddRequest("b", 0), "a request is added in the current step")


def test_block_opened_in_a_past_step() -> None:
    e = engine_at(ASYNC)
    e.apply(StepBegin(1))
    assert_illegal(e, Propose("a", 0, 1), "a block can only be opened in the current step")


def test_block_event_without_an_open_block() -> None:
    e = engine_at()
    assert_illegal(e, Verify("a", 0, 0), "no open block at step 0")


def test_grammar_event_for_an_unstructured_request() -> None:
    for mode in Mode:
        e = engine_at(mode, structured=False)
        e.run([Propose("a", 0, 2), Verify("a", 0, 2)] if mode is ASYNC else [Propose("a", 0, 2)])
        assert_illegal(e, GrammarReject("a", 0, 0), "without structured output")


@pytest.mark.parametrize("mode", list(Mode))
def test_verify_count_mismatch(mode: Mode) -> None:
    e = engine_at(mode)
    e.run([Propose("a", 0, 3), AVSkip("a", 0, 1)])
    assert_illegal(e, Verify("a", 0, 3), "verify names 3 drafts but 2 reached the target")
    assert_illegal(e, Verify("a", 0, 1), "verify names 1 drafts but 2 reached the target")


def test_sync_next_block_needs_the_previous_in_the_forward_pass() -> None:
    e = engine_at(SYNC)
    e.run([Propose("a", 0, 2), StepBegin(1)])
    assert_illegal(e, Propose("a", 1, 1), "the previous block has not reached the target yet")
    assert_illegal(e, Pad("a", 1, 1), "the previous block has not reached the target yet")


def test_sync_next_block_reaches_the_target_after_the_previous_output() -> None:
    """E3: the drafter's proposal from a forward pass may open while that pass's output is
    unprocessed, but sync runs one forward pass at a time: it is verified only after the
    previous block closed."""
    e = engine_at(SYNC, structured=False)
    e.run([Propose("a", 0, 2), Verify("a", 0, 2), StepBegin(1), Propose("a", 1, 1)])
    assert [b.step for b in e.requests["a"].blocks] == [0, 1]
    assert_illegal(e, Verify("a", 1, 1), "the previous block's output is not processed yet")
    e.run([Accept("a", 0, 1), Verify("a", 1, 1), Accept("a", 1, 0)])
    r = e.totals.rfc
    assert (r.spec_steps, r.drafted, r.verified, r.accepted) == (2, 3, 3, 1)


@pytest.mark.parametrize("mode", list(Mode))
def test_abort_after_the_forward_pass_before_the_output_is_processed(mode: Mode) -> None:
    """The serving soak's case (vLLM EngineCoreProc processes aborts between a step's forward
    pass and update_from_output): the verified block and the proposal made from it are
    discarded by the Abort, in both modes alike (R6): nothing drafted, verified, accepted or
    stepped; discarded diagnostics 2 steps, 3 drafted, 2 verified."""
    e = engine_at(mode, structured=False)
    e.run([Propose("a", 0, 2), Verify("a", 0, 2), StepBegin(1), Propose("a", 1, 1)])
    closed = e.apply(Abort("a", 1))
    assert [(c.step, c.outcome) for c in closed] == [
        (0, Outcome.DISCARDED_ABORTED),
        (1, Outcome.DISCARDED_ABORTED),
    ]
    r, lg = e.totals.rfc, e.totals.legacy
    assert (r.spec_steps, r.drafted, r.verified, r.accepted) == (0, 0, 0, 0)
    assert (r.discarded_steps, r.discarded_drafted, r.discarded_verified) == (2, 3, 2)
    assert (lg.num_drafts, lg.num_draft_tokens, lg.num_accepted_tokens) == (0, 0, 0)
    assert_illegal(e, Propose("a", 1, 1), "request already aborted")


def test_async_next_block_needs_the_previous_in_the_forward_pass() -> None:
    e = engine_at(ASYNC)
    e.run([Propose("a", 0, 2), StepBegin(1)])
    assert_illegal(e, Propose("a", 1, 1), "the previous block has not reached the target yet")
    e.run([Verify("a", 0, 2), Propose("a", 1, 1)])  # now legal: block 0 is in flight
    assert [b.step for b in e.requests["a"].blocks] == [0, 1]


@pytest.mark.parametrize(
    ("events", "bad", "match"),
    [
        ([Propose("a", 0, 2)], Propose("a", 0, 5), "PROPOSE cannot follow"),
        ([], Propose("a", 0, 5), "cannot propose 5 drafts with k=4"),
        ([Propose("a", 0, 3)], Pad("a", 0, 2), "block of 3 drafts \\+ 2 padding exceeds k=4"),
        ([Propose("a", 0, 2)], GrammarReject("a", 0, 3), "grammar rejects 3 of only 2 drafts"),
        ([Propose("a", 0, 2), Pad("a", 0, 1)], Truncate("a", 0, 4), "cannot cut 4 of 3 slots"),
        ([Propose("a", 0, 2)], AVSkip("a", 0, 3), "AV cannot skip 3 of 2 drafts"),
    ],
)
def test_counts_bounded_by_the_stage(events: list[Event], bad: Event, match: str) -> None:
    # Unstructured for Truncate: a structured sync request has its padding stripped (below).
    e = engine_at(SYNC, structured=not isinstance(bad, Truncate))
    e.run(events)
    assert_illegal(e, bad, match)


def test_sync_structured_padding_is_stripped_before_scheduling() -> None:
    """validate_tokens strips -1 placeholders for structured requests (sync)."""
    e = engine_at(SYNC)
    e.run([Propose("a", 0, 2), Pad("a", 0, 2)])
    assert_illegal(e, Truncate("a", 0, 3), "cannot cut 3 of 2 slots")


def test_bad_request_id() -> None:
    err = assert_illegal(engine_at(), Propose(7, 0, 1), "request id must be a string")  # type: ignore[arg-type]
    assert err.state == "n/a"


def test_non_bool_structured() -> None:
    assert_illegal(engine_at(), AddRequest("b", 0, "no"), "structured must be a bool")  # type: ignore[arg-type]


def test_not_an_event() -> None:
    e = engine_at()
    before = snapshot(e)
    with pytest.raises(TypeError, match="not a spectally event"):
        e.apply("StepBegin(1)")  # type: ignore[arg-type]
    assert snapshot(e) == before


# -- closing blocks: outcomes and counts ----------------------------------------------------


def test_applied_block() -> None:
    e = engine_at(ASYNC)
    closed = e.run(
        [
            Propose("a", 0, 4),
            AVSkip("a", 0, 1),
            Verify("a", 0, 3),
            GrammarReject("a", 0, 2),
            Accept("a", 0, 1),
        ]
    )
    assert [(c.request, c.step, c.outcome) for c in closed] == [("a", 0, Outcome.APPLIED)]
    r = e.totals.rfc
    assert (r.drafted, r.verified, r.accepted) == (4, 3, 1)
    assert e.totals.legacy.num_draft_tokens == 2  # the RFC row, through events
    assert e.request_counters("a") == e.totals
    assert e.requests["a"].blocks == ()


@pytest.mark.parametrize(
    ("end", "outcome"),
    [(Finish, Outcome.DISCARDED_FINISHED), (Abort, Outcome.DISCARDED_ABORTED)],
)
def test_finish_and_abort_discard_open_blocks(end: type, outcome: Outcome) -> None:
    e = engine_at(ASYNC)
    e.run([Propose("a", 0, 3), AVSkip("a", 0, 1), Verify("a", 0, 2), StepBegin(1)])
    e.apply(Propose("a", 1, 4))
    closed = e.apply(end("a", 1))
    assert [(c.step, c.outcome) for c in closed] == [(0, outcome), (1, outcome)]
    r = e.totals.rfc
    assert (r.drafted, r.verified, r.spec_steps) == (0, 0, 0)
    # Block 0 was in the forward pass (2 verified); block 1 never reached the target.
    assert (r.discarded_steps, r.discarded_drafted, r.discarded_verified) == (2, 7, 2)
    assert e.totals.legacy.num_drafts == 0
    status = RequestStatus.FINISHED if end is Finish else RequestStatus.ABORTED
    assert e.requests["a"].status is status


def test_preempt_sync_discards_everything() -> None:
    e = engine_at(SYNC)
    e.run([Propose("a", 0, 2), Verify("a", 0, 2)])
    closed = e.apply(Preempt("a", 0))
    assert [c.outcome for c in closed] == [Outcome.DISCARDED_PREEMPTED]
    assert e.totals.rfc.discarded_verified == 2
    assert e.requests["a"].status is RequestStatus.ACTIVE
    e.run([StepBegin(1), Propose("a", 1, 1)])  # a preempted request resumes later


@pytest.mark.parametrize("drop", [False, True])
def test_preempt_async_makes_in_flight_blocks_stale(drop: bool) -> None:
    e = engine_at(ASYNC, drop_stale_output=drop)
    e.run([Propose("a", 0, 3), Verify("a", 0, 3), StepBegin(1), Propose("a", 1, 2)])
    closed = e.apply(Preempt("a", 1))
    assert [(c.step, c.outcome) for c in closed] == [(1, Outcome.DISCARDED_PREEMPTED)]
    assert e.describe("a") == "active; block@0 after VERIFY, stale"
    closed = e.apply(Accept("a", 0, 2))
    # vLLM delivers stale output to the request unless it drops it; both profiles count what
    # is delivered.
    assert [c.outcome for c in closed] == [Outcome.DISCARDED_STALE if drop else Outcome.APPLIED]
    r, lg = e.totals.rfc, e.totals.legacy
    expected = (0, 0, 2, 3) if drop else (3, 2, 1, 0)
    assert (r.drafted, r.accepted, r.discarded_steps, r.discarded_verified) == expected
    assert (lg.num_drafts, lg.num_accepted_tokens) == ((0, 0) if drop else (1, 2))


@pytest.mark.parametrize("default", [False, True])
@pytest.mark.parametrize("drop", [False, True])
def test_preempt_decides_drop_stale_output_per_preemption(default: bool, drop: bool) -> None:
    """vLLM decides per preemption whether stale output is dropped: the Preempt's own flag
    overrides the engine default, for both profiles."""
    e = engine_at(ASYNC, drop_stale_output=default)
    e.run([Propose("a", 0, 3), Verify("a", 0, 3), Preempt("a", 0, drop_stale_output=drop)])
    e.apply(Accept("a", 0, 2))
    r, lg = e.totals.rfc, e.totals.legacy
    assert (r.drafted, r.spec_steps, r.discarded_steps) == ((0, 0, 1) if drop else (3, 1, 0))
    assert (lg.num_drafts, lg.num_accepted_tokens) == ((0, 0) if drop else (1, 2))


@pytest.mark.parametrize("drop", [None, False, True])
def test_preempt_without_flag_uses_the_engine_default(drop: bool | None) -> None:
    e = engine_at(ASYNC, drop_stale_output=True)
    e.run([Propose("a", 0, 3), Verify("a", 0, 3), Preempt("a", 0, drop_stale_output=drop)])
    (closed,) = e.apply(Accept("a", 0, 2))
    dropped = True if drop is None else drop
    assert closed.outcome is (Outcome.DISCARDED_STALE if dropped else Outcome.APPLIED)


def test_preempt_drop_flag_must_be_bool() -> None:
    e = engine_at(ASYNC)
    e.run([Propose("a", 0, 3), Verify("a", 0, 3)])
    assert_illegal(e, Preempt("a", 0, drop_stale_output=1), "must be a bool or None")  # type: ignore[arg-type]


def test_step_counts_json_shape() -> None:
    q = StepQuery(ASYNC, proposed=4, grammar_valid=2, av_verify=3, accepted=1)
    out = step_counts(ASYNC, q.inputs())
    rfc, legacy = out["rfc"], out["vllm-legacy"]
    assert isinstance(rfc, dict) and isinstance(legacy, dict)
    assert (rfc["drafted"], rfc["verified"], rfc["accepted"], rfc["spec_steps"]) == (4, 3, 1, 1)
    assert rfc["discarded"] == {"steps": 0, "drafted": 0, "verified": 0}
    assert legacy == {"drafted": 2, "accepted": 1, "spec_steps": 1}


def test_describe() -> None:
    e = Engine(EngineConfig(SYNC, 2))
    assert e.describe(None) == "engine at step None"
    e.run([StepBegin(5), AddRequest("a", 5)])
    assert e.describe("ghost") == "engine at step 5"
    assert e.describe("a") == "active; no open block"


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "sync", "k": 4}, TypeError, "mode must be a Mode"),
        ({"mode": SYNC, "k": 0}, ValueError, "k .* must be an int >= 1"),
        ({"mode": SYNC, "k": True}, ValueError, "k .* must be an int >= 1"),
        ({"mode": SYNC, "k": 2.0}, ValueError, "k .* must be an int >= 1"),
        ({"mode": SYNC, "k": 2, "drop_stale_output": 1}, TypeError, "must be a bool"),
    ],
)
def test_engine_config_validation(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        EngineConfig(**kwargs)


# -- atomicity under any exception (E7) ------------------------------------------------------


class Boom(Exception):
    pass


@pytest.mark.parametrize("target", ["check_invariants", "check_monotone"])
@pytest.mark.parametrize(
    "event",
    [Accept("a", 0, 1), Finish("a", 0), Preempt("a", 0), AddRequest("b", 0), Propose("b", 0, 1)],
)
def test_invariant_failure_leaves_the_state_unchanged(
    monkeypatch: pytest.MonkeyPatch, target: str, event: Event
) -> None:
    e = engine_at(ASYNC)
    e.run([AddRequest("b", 0), Propose("a", 0, 2), Verify("a", 0, 2)])
    if isinstance(event, AddRequest):
        e = engine_at(ASYNC)
        e.run([Propose("a", 0, 2), Verify("a", 0, 2)])
    before = snapshot(e)

    def fail(*args: object) -> None:
        raise InvariantViolation("INV-X test", "injected")

    monkeypatch.setattr(machine_module, target, fail)
    with pytest.raises(InvariantViolation, match="injected"):
        e.apply(event)
    assert snapshot(e) == before
    monkeypatch.undo()
    e.apply(event)  # the same event is legal once the checks pass
    assert snapshot(e) != before


def test_unexpected_exception_leaves_the_state_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    e = engine_at(SYNC)
    e.run([Propose("a", 0, 2), Verify("a", 0, 2)])
    before = snapshot(e)

    def boom(*args: object, **kwargs: object) -> None:
        raise Boom

    monkeypatch.setattr(Counters, "add_counts", boom)
    with pytest.raises(Boom):
        e.apply(Accept("a", 0, 1))
    assert snapshot(e) == before


def test_unchecked_engine_skips_the_invariant_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object) -> None:
        raise InvariantViolation("INV-X test", "injected")

    monkeypatch.setattr(machine_module, "check_invariants", fail)
    e = Engine(EngineConfig(SYNC, 2), check=False)
    e.run([StepBegin(0), AddRequest("a", 0), Propose("a", 0, 1), Verify("a", 0, 1)])
    assert e.apply(Accept("a", 0, 1))[0].outcome is Outcome.APPLIED


@settings(max_examples=30)
@given(event_traces(max_steps=5))
def test_illegal_probe_after_any_legal_prefix(case: tuple[EngineConfig, list[Event]]) -> None:
    """After any legal prefix, a batch of surely illegal events changes nothing."""
    config, events = case
    e = Engine(config)
    e.run(events)
    cur = e.current_step
    assert cur is not None
    probes: list[tuple[Any, str | None]] = [
        (StepBegin(cur), "steps must increase"),
        (Propose("ghost", cur, 0), "unknown request"),
        (Propose("r0", cur + 1, 0), "has not begun"),
        (Accept("r0", cur + 5, 0), "has not begun"),
        (Verify("r0", cur, -1), None),  # unknown, ended, or a negative count
    ]
    for probe, match in probes:
        assert_illegal(e, probe, match)


def test_run_stops_at_the_first_illegal_event() -> None:
    e = engine_at(SYNC)
    prefix: list[Event] = [Propose("a", 0, 2), Verify("a", 0, 2)]
    expected = engine_at(SYNC)
    expected.run(prefix)
    with pytest.raises(IllegalEvent, match="accepted cannot exceed"):
        e.run([*prefix, Accept("a", 0, 3), Accept("a", 0, 1)])
    assert snapshot(e) == snapshot(expected)


@pytest.mark.parametrize("mode", [SYNC, ASYNC])
def test_transitions_from_a_fresh_block_match_the_engine(mode: Mode) -> None:
    """transitions.fresh_block + stage_rule (what the proofs start from) give the stage inputs
    the engine's own block has after the same events."""
    from spectally.reference import transitions as tr
    from spectally.reference.arith import INT_ARITH

    e = engine_at(mode)
    e.run([Propose("a", 0, 2), Pad("a", 0, 1)])
    block = e.requests["a"].block_at(0)
    assert block is not None
    x = tr.fresh_block(True, INT_ARITH)
    for stage, count in ((tr.PROPOSE, 2), (tr.PAD, 1)):
        conditions, x, _ = tr.stage_rule(mode, stage, x, count, 4, INT_ARITH)
        assert all(ok for _, ok in conditions)
    assert x == block.so_far
