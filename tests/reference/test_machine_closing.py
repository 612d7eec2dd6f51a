"""reference/machine.py: how blocks close (applied, finished, aborted, preempted, stale) and
what they count; the engine's configuration."""

from __future__ import annotations

from typing import Any

import pytest
from machine_support import (
    ASYNC,
    SYNC,
    assert_illegal,
    engine_at,
)
from spectally.reference.events import (
    Abort,
    Accept,
    AddRequest,
    AVSkip,
    Finish,
    GrammarReject,
    Preempt,
    Propose,
    StepBegin,
    Verify,
)
from spectally.reference.machine import (
    Engine,
    EngineConfig,
    Outcome,
    RequestStatus,
    step_counts,
)
from spectally.reference.step import StepQuery

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
