"""Shared helpers of the reference machine's tests (tests/reference/test_machine_*.py): an engine
with one request, the deep snapshot that proves an illegal event changed nothing, and the check that
an `IllegalEvent` names the request, step, state and event (E7)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from spectally.reference.errors import IllegalEvent
from spectally.reference.events import (
    AddRequest,
    StepBegin,
)
from spectally.reference.machine import (
    Engine,
    EngineConfig,
)
from spectally.reference.step import Mode

SYNC, ASYNC = Mode.SYNC, Mode.ASYNC


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
