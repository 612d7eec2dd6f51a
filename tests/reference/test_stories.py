"""The same token-level story through a sync and an async engine: equal rfc counts (THM-1).

A story says, per request, which blocks' outputs reached the request: delivered; delivered as
stale output after a preemption; dropped by a preemption; and when the request was preempted,
finished or aborted. `StoryMachine` tells it to two real `Engine`s at once, each in its own
mode's event pattern: sync runs each block to completion before anything else happens to the
request, except an abort processed after the forward pass and before its output (vLLM
EngineCoreProc, SPEC E3: the verified block and the next proposal are then open); async
pipelines (the next block is scheduled before the previous result arrives), so a preemption,
finish or abort meets a block in the forward pass. Hypothesis picks the story;
after every rule every request with no result still in flight has equal spec steps, drafted and
accepted in both engines, and verified differing by exactly the async grammar-invalid-verified
drafts (DEC-2). The proof of the same claim, per story block, is `story:sync-async`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from spectally.reference.counters import Counters
from spectally.reference.events import (
    Abort,
    AddRequest,
    Event,
    Finish,
    Preempt,
    Propose,
    StepBegin,
    Verify,
)
from spectally.reference.machine import Engine, EngineConfig, Outcome
from spectally.reference.step import Mode
from strategies import MAX_K, StagePlan, plan_events, stage_plans

SYNC, ASYNC = Mode.SYNC, Mode.ASYNC
FATES = ("delivered", "stale, delivered", "stale, dropped")


def phases(mode: Mode, plan: StagePlan, rid: str, step: int) -> tuple[list[Event], list[Event]]:
    """A block's events split at the forward pass: up to and including ``Verify`` (what runs
    when it is scheduled), and the rest (async deferred grammar check, ``Accept``)."""
    events = plan_events(mode, plan, rid, step)
    cut = next(i for i, e in enumerate(events) if isinstance(e, Verify)) + 1
    return events[:cut], events[cut:]


@dataclass
class Request:
    rid: str
    structured: bool
    # async: the delivered block in the forward pass, its result not back yet (step, rest)
    pending: tuple[int, list[Event]] | None = None
    closed: dict[Mode, list[Outcome]] = field(default_factory=lambda: {SYNC: [], ASYNC: []})


class StoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.k = 0
        self.engines: dict[Mode, Engine] = {}
        self.step = 0
        self.active: dict[str, Request] = {}
        self.ended: list[str] = []
        self.mismatches = 0

    # -- plumbing ---------------------------------------------------------------------------

    def emit(self, mode: Mode, events: list[Event], req: Request | None = None) -> None:
        for event in events:
            note(f"{mode.value}: {event}")
            closed = self.engines[mode].apply(event)
            if req is not None:
                req.closed[mode] += [c.outcome for c in closed]

    def begin(self) -> int:
        self.step += 1
        for mode in (SYNC, ASYNC):
            self.emit(mode, [StepBegin(self.step)])
        return self.step

    def land(self, req: Request) -> None:
        """Async: the pending block's result arrives (deferred grammar check, Accept)."""
        if req.pending is not None:
            self.emit(ASYNC, req.pending[1], req)
            req.pending = None

    # -- rules ------------------------------------------------------------------------------

    @precondition(lambda self: not self.engines)
    @rule(k=st.integers(1, MAX_K), drop_default=st.booleans())
    def start(self, k: int, drop_default: bool) -> None:
        self.k = k
        self.engines = {m: Engine(EngineConfig(m, k, drop_default)) for m in (SYNC, ASYNC)}
        note(f"k={k}, drop_stale_output default {drop_default}")

    @precondition(lambda self: bool(self.engines))
    @rule(structured=st.booleans())
    def add(self, structured: bool) -> None:
        step = self.begin()
        rid = f"r{len(self.active) + len(self.ended)}"
        self.active[rid] = Request(rid, structured)
        for mode in (SYNC, ASYNC):
            self.emit(mode, [AddRequest(rid, step, structured=structured)])

    def pick(self, data: st.DataObject) -> Request:
        return self.active[data.draw(st.sampled_from(sorted(self.active)))]

    @precondition(lambda self: bool(self.active))
    @rule(data=st.data(), fate=st.sampled_from(FATES))
    def block(self, data: st.DataObject, fate: str) -> None:
        """One more block of the story, and what became of its output."""
        req = self.pick(data)
        plan = data.draw(stage_plans(self.k, req.structured))
        step = self.begin()
        sync_head, sync_rest = phases(SYNC, plan, req.rid, step)
        async_head, async_rest = phases(ASYNC, plan, req.rid, step)
        # async: scheduled while the previous block is in flight, whose result then arrives
        self.emit(ASYNC, async_head, req)
        self.land(req)
        if fate == "delivered":
            self.emit(SYNC, sync_head + sync_rest, req)
            req.pending = (step, async_rest)
            return
        drop = fate == "stale, dropped"
        if drop:  # sync: preempted before the proposal reached the forward pass
            self.emit(SYNC, sync_head[:-1], req)
        else:  # sync: the block completed before the preemption
            self.emit(SYNC, sync_head + sync_rest, req)
        later = self.begin()  # the scheduler preempts the request in the next step
        self.emit(SYNC, [Preempt(req.rid, later, drop)], req)
        self.emit(ASYNC, [Preempt(req.rid, later, drop), *async_rest], req)
        expected = Outcome.DISCARDED_STALE if drop else Outcome.APPLIED
        assert req.closed[ASYNC][-1] is expected

    @precondition(lambda self: bool(self.active))
    @rule(data=st.data(), kind=st.sampled_from(["finish", "abort", "preempt"]))
    def end(self, data: st.DataObject, kind: str) -> None:
        """The request finishes, is aborted or preempted. Async may have scheduled its next
        block already: it is in the forward pass (finish, abort: discarded; preempt: its stale
        output comes back); sync has at most a proposal not yet run (abort, preempt), or, for an
        abort processed after the forward pass and before its output (vLLM EngineCoreProc,
        SPEC E3), the block verified and the drafter's proposal for the next step."""
        req = self.pick(data)
        step = self.begin()
        in_flight = data.draw(st.booleans())
        after_forward = kind == "abort" and in_flight and data.draw(st.booleans())
        plan = data.draw(stage_plans(self.k, req.structured))
        if in_flight and kind != "preempt":
            head, _ = phases(ASYNC, plan, req.rid, step)
            self.emit(ASYNC, head, req)
        self.land(req)
        if after_forward:
            head, _ = phases(SYNC, plan, req.rid, step)
            self.emit(SYNC, head, req)  # the forward pass ran; its output is never processed
            nxt = self.begin()  # the abort is read after the proposal made in that pass
            self.emit(SYNC, [Propose(req.rid, nxt, data.draw(st.integers(0, self.k)))], req)
        elif kind == "abort" and in_flight:
            head, _ = phases(SYNC, plan, req.rid, step)
            self.emit(SYNC, head[:-1], req)  # proposed, never run
        event = {"finish": Finish, "abort": Abort, "preempt": Preempt}[kind](req.rid, step)
        for mode in (SYNC, ASYNC):
            self.emit(mode, [event], req)
        if kind != "preempt":
            del self.active[req.rid]
            self.ended.append(req.rid)

    # -- the claim ----------------------------------------------------------------------------

    def compare(self, rid: str) -> None:
        sync = self.engines[SYNC].request_counters(rid)
        asyn = self.engines[ASYNC].request_counters(rid)
        if not related(sync, asyn):
            self.mismatches += 1
            raise AssertionError(f"{rid}: sync {sync.rfc} != async {asyn.rfc}")

    @invariant()
    def same_counts(self) -> None:
        for rid in self.ended:
            self.compare(rid)
        for rid, req in self.active.items():
            if req.pending is None:
                self.compare(rid)

    def teardown(self) -> None:
        if self.engines:
            self.begin()
            for req in self.active.values():
                self.land(req)
            for rid in [*self.active, *self.ended]:
                self.compare(rid)
            assert related(self.engines[SYNC].totals, self.engines[ASYNC].totals)
        assert self.mismatches == 0


def related(sync: Counters, asyn: Counters) -> bool:
    s, a = sync.rfc, asyn.rfc
    return (
        s.spec_steps == a.spec_steps
        and s.drafted == a.drafted
        and s.accepted == a.accepted
        and a.verified - s.verified == a.grammar_invalid_verified - s.grammar_invalid_verified
    )


TestStories = StoryMachine.TestCase
TestStories.settings = settings(
    settings.default, max_examples=max(100, settings.default.max_examples), stateful_step_count=30
)


def test_the_issue_example_counts_the_same_in_both_modes() -> None:
    """Propose 2, verify 2, accept 2, preempt, finish: 2/2/2/1 in both modes."""
    totals = {}
    for mode in (SYNC, ASYNC):
        e = Engine(EngineConfig(mode, 2))
        e.run([StepBegin(0), AddRequest("a", 0)])
        if mode is SYNC:
            e.run(plan_events(SYNC, StagePlan(2, 0, False, 2, 2, 2, 1.0), "a", 0))
            e.run([StepBegin(1), Preempt("a", 1), Finish("a", 1)])
        else:
            head, rest = phases(ASYNC, StagePlan(2, 0, False, 2, 2, 2, 1.0), "a", 0)
            e.run([*head, StepBegin(1), Preempt("a", 1), *rest, Finish("a", 1)])
        r = e.totals.rfc
        totals[mode] = (r.drafted, r.verified, r.accepted, r.spec_steps)
    assert totals[SYNC] == totals[ASYNC] == (2, 2, 2, 1)


PLAN = StagePlan(2, 0, False, 2, 2, 2, 1.0)  # propose 2, verify 2, accept 2


def _scripted(kind: str) -> dict[Mode, Counters]:
    """One short story per kind, told to both engines as `StoryMachine` tells it."""
    out = {}
    for mode in (SYNC, ASYNC):
        e = Engine(EngineConfig(mode, 2))
        e.run([StepBegin(0), AddRequest("a", 0)])
        head, rest = phases(mode, PLAN, "a", 0)
        if kind == "stale":  # delivered as stale output, then finished
            sync_events: list[Event] = [*head, *rest, StepBegin(1), Preempt("a", 1), Finish("a", 1)]
            async_events: list[Event] = [
                *head,
                StepBegin(1),
                Preempt("a", 1),
                *rest,
                Finish("a", 1),
            ]
        elif kind == "dropped":
            sync_events = [*head[:-1], StepBegin(1), Preempt("a", 1, True)]
            async_events = [*head, StepBegin(1), Preempt("a", 1, True), *rest]
        elif kind == "aborted":  # after the forward pass, before its output (both modes)
            sync_events = [*head, StepBegin(1), Propose("a", 1, 2), Abort("a", 0)]
            async_events = [*head, StepBegin(1), Abort("a", 0)]
        else:  # finished with the next block in flight (async)
            nxt, _ = phases(ASYNC, PLAN, "a", 1)
            sync_events = [*head, *rest, StepBegin(1), Finish("a", 1)]
            async_events = [*head, StepBegin(1), *nxt, *rest, Finish("a", 1)]
        e.run(sync_events if mode is SYNC else async_events)
        out[mode] = e.request_counters("a")
    return out


@pytest.mark.parametrize(
    ("kind", "mutant"),
    [
        ("stale", "stale-always-discarded"),
        ("dropped", "stale-applied-when-dropped"),
        ("finished", "finish-applies-in-flight"),
        ("aborted", "sync-abort-applies-in-flight"),
    ],
)
def test_the_comparison_fails_under_an_event_mutant(kind: str, mutant: str) -> None:
    """The claim this file checks is not vacuous: the event-rule mutants break it."""
    pytest.importorskip("z3")
    from spectally.proofs.mutants import MUTANTS, patched

    counters = _scripted(kind)
    assert related(counters[SYNC], counters[ASYNC])
    with patched(next(m for m in MUTANTS if m.name == mutant)):
        counters = _scripted(kind)
    assert not related(counters[SYNC], counters[ASYNC])
