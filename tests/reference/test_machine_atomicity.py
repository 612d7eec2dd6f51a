"""reference/machine.py: atomicity under any exception (E7), and the transitions the proofs
start from matching the engine."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from machine_support import (
    ASYNC,
    SYNC,
    assert_illegal,
    engine_at,
    snapshot,
)
from spectally.reference import machine as machine_module
from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters
from spectally.reference.errors import IllegalEvent, InvariantViolation
from spectally.reference.events import (
    Accept,
    AddRequest,
    Event,
    Finish,
    Pad,
    Preempt,
    Propose,
    StepBegin,
    Verify,
)
from spectally.reference.machine import (
    Engine,
    EngineConfig,
    Outcome,
)
from spectally.reference.step import Mode
from strategies import event_traces

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

    e = engine_at(mode)
    e.run([Propose("a", 0, 2), Pad("a", 0, 1)])
    block = e.requests["a"].block_at(0)
    assert block is not None
    x = tr.fresh_block(True, INT_ARITH)
    for stage, count in ((tr.PROPOSE, 2), (tr.PAD, 1)):
        conditions, x, _ = tr.stage_rule(mode, stage, x, count, 4, INT_ARITH)
        assert all(ok for _, ok in conditions)
    assert x == block.so_far
