"""reference/machine.py, rules E1-E7, under a Hypothesis RuleBasedStateMachine: many requests
through random legal and illegal event sequences in both modes. After every event: all
invariants hold (engine-wide and per request), engine totals == merge of per-request counters
(INV-10), no counter decreased (INV-9). Every illegal event raises IllegalEvent naming request,
step, state and event, and leaves the engine exactly as it was (deep snapshot before/after)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from machine_support import (
    ASYNC,
    SYNC,
    assert_illegal_reported,
    snapshot,
)
from spectally.reference import machine as machine_module
from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters
from spectally.reference.errors import IllegalEvent
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
)
from spectally.reference.step import Mode, pipeline
from strategies import modes

# What the state machine saw across all runs of one test (to show no rule is vacuous).
SEEN: Counter[str] = Counter()


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
