"""reference/machine.py: explicit illegal sequences, one per rule (E1-E6), each refused with
the engine unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from machine_support import (
    ASYNC,
    SYNC,
    assert_illegal,
    engine_at,
    snapshot,
)
from spectally.reference.events import (
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
from spectally.reference.machine import (
    Engine,
    EngineConfig,
    Outcome,
)
from spectally.reference.step import Mode

# -- explicit illegal sequences ----------------------------------------------------------------


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
