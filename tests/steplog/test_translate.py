"""Record -> reference event translation (engine_bridge/steplog/translate.py)."""

from __future__ import annotations

from typing import Any

import pytest
from spectally.engine_bridge.steplog.translate import (
    Untranslatable,
    delivered_mismatch,
    lifecycle_event,
    parse_version,
    profile_for,
    translate_block,
)
from spectally.reference.events import (
    Abort,
    Accept,
    AddRequest,
    AVSkip,
    Finish,
    GrammarReject,
    Pad,
    Preempt,
    Propose,
    Truncate,
    Verify,
)
from spectally.reference.step import Mode


def rec(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "record": "request_step",
        "step": 5,
        "request": "r",
        "proposed": 4,
        "padding": 0,
        "grammar_valid": None,
        "scheduled": 4,
        "invalid": None,
        "verified": None,
        "sampled": 3,
        "accepted": 2,
        "outcome": "applied",
    }
    base.update(kw)
    return base


def test_sync_plain_block() -> None:
    plan = translate_block(Mode.SYNC, False, rec())
    assert plan.events == (Propose("r", 5, 4), Verify("r", 5, 4))
    assert plan.accept == Accept("r", 5, 2)


def test_sync_grammar_then_truncate_then_av() -> None:
    plan = translate_block(
        Mode.SYNC, True, rec(grammar_valid=3, scheduled=2, verified=1, sampled=2, accepted=1)
    )
    assert plan.events == (
        Propose("r", 5, 4),
        GrammarReject("r", 5, 1),
        Truncate("r", 5, 1),  # offered = grammar_valid (3), scheduled 2
        AVSkip("r", 5, 1),
        Verify("r", 5, 1),
    )


def test_sync_structured_padding_is_not_offered() -> None:
    # validate_tokens strips -1 placeholders: a structured request offers only its valid drafts
    plan = translate_block(
        Mode.SYNC, True, rec(proposed=2, padding=2, grammar_valid=2, scheduled=2)
    )
    assert plan.events == (Propose("r", 5, 2), Pad("r", 5, 2), Verify("r", 5, 2))


def test_sync_unstructured_padding_is_scheduled() -> None:
    plan = translate_block(Mode.SYNC, False, rec(proposed=0, padding=4, sampled=1, accepted=0))
    assert plan.events == (Propose("r", 5, 0), Pad("r", 5, 4), Verify("r", 5, 0))


def test_async_grammar_after_verify() -> None:
    plan = translate_block(
        Mode.ASYNC, True, rec(grammar_valid=2, invalid=2, verified=3, sampled=2, accepted=1)
    )
    assert plan.events == (
        Propose("r", 5, 4),
        AVSkip("r", 5, 1),
        Verify("r", 5, 3),
        GrammarReject("r", 5, 2),
    )


def test_async_grammar_valid_from_invalid_when_missing() -> None:
    plan = translate_block(Mode.ASYNC, True, rec(grammar_valid=None, invalid=3))
    assert plan.events[-1] == GrammarReject("r", 5, 3)


def test_discarded_unscheduled_block_never_verifies() -> None:
    unscheduled = rec(scheduled=0, sampled=0, accepted=0, outcome="discarded_aborted")
    plan = translate_block(Mode.SYNC, False, unscheduled)
    assert plan.events == (Propose("r", 5, 4), Truncate("r", 5, 4))
    assert plan.accept is None
    assert not plan.in_forward_pass


def test_discarded_block_that_ran_without_drafts_verifies_none() -> None:
    """Sync, structured: the grammar cut every draft, the request still ran (sampled 1) and was
    aborted before its output was processed: the block was in the forward pass (E3)."""
    ran = rec(grammar_valid=0, scheduled=0, sampled=1, accepted=0, outcome="discarded_aborted")
    plan = translate_block(Mode.SYNC, True, ran)
    assert plan.events == (Propose("r", 5, 4), GrammarReject("r", 5, 4), Verify("r", 5, 0))
    assert plan.in_forward_pass and plan.accept is None


def test_in_flight_discarded_block_verifies_without_accept() -> None:
    plan = translate_block(Mode.ASYNC, False, rec(outcome="discarded_finished"))
    assert plan.events == (Propose("r", 5, 4), Verify("r", 5, 4))
    assert plan.accept is None


def test_stale_block_gets_an_accept_to_hold() -> None:
    plan = translate_block(Mode.ASYNC, False, rec(outcome="discarded_stale"))
    assert plan.accept == Accept("r", 5, 2)


@pytest.mark.parametrize(
    ("mode", "structured", "kw", "field"),
    [
        (Mode.SYNC, False, {"scheduled": 5}, "scheduled"),
        (Mode.SYNC, True, {"grammar_valid": 1, "scheduled": 2}, "scheduled"),
        (Mode.SYNC, True, {"grammar_valid": 5}, "grammar_valid"),
        (Mode.ASYNC, False, {"verified": 5}, "verified"),
        (Mode.SYNC, False, {"grammar_valid": 4}, "grammar_valid"),
    ],
)
def test_untranslatable(mode: Mode, structured: bool, kw: dict[str, Any], field: str) -> None:
    with pytest.raises(Untranslatable) as info:
        translate_block(mode, structured, rec(**kw))
    assert info.value.field == field


def test_lifecycle_events() -> None:
    base = {"record": "request", "step": 3, "request": "r"}
    assert lifecycle_event({**base, "event": "add", "structured": True}) == AddRequest("r", 3, True)
    assert lifecycle_event({**base, "event": "finish", "reason": "length"}) == Finish(
        "r", 3, "length"
    )
    assert lifecycle_event({**base, "event": "abort"}) == Abort("r", 3)
    assert lifecycle_event({**base, "event": "preempt"}) == Preempt("r", 3)


@pytest.mark.parametrize(
    ("version", "profile"),
    [
        ("0.32.0", "vllm-legacy"),
        ("0.32.1+cpu", "vllm-legacy"),
        ("0.11.2", "vllm-legacy"),
        ("0.33.0", "vllm-legacy"),  # counting source identical (tests/vllm/test_counting_source.py)
        ("0.34.0", "vllm-0.34"),
        ("0.35.0", None),
        ("1.0.0", None),
        ("dev", None),
    ],
)
def test_profile_for(version: str, profile: str | None) -> None:
    assert profile_for("vllm", version) == profile


def test_parse_version() -> None:
    assert parse_version("0.32.0rc1+cpu") == (0, 32, 0)
    assert profile_for("sglang", "0.1") is None


def _delivered_record(outcome: str, delivered: object, sampled: int = 3) -> dict[str, object]:
    return {"outcome": outcome, "sampled": sampled, "delivered": delivered}


@pytest.mark.parametrize(
    ("outcome", "delivered", "ok"),
    [
        ("applied", None, True),  # not recorded: nothing to check
        ("applied", 1, True),  # the bonus token alone
        ("applied", 3, True),  # everything sampled
        ("applied", 0, False),  # applied, yet nothing reached the request
        ("applied", 4, False),  # more than was sampled
        ("discarded_stale", 0, True),  # dropped stale output
        ("discarded_stale", 2, False),  # delivered, so it was not dropped
        ("discarded_finished", 1, False),
        ("discarded_aborted", 0, True),
        ("discarded_preempted", 0, True),
    ],
)
def test_delivered_against_the_outcome(outcome: str, delivered: object, ok: bool) -> None:
    bad = delivered_mismatch(_delivered_record(outcome, delivered))
    assert (bad is None) is ok
    if bad is not None:
        assert bad.actual == delivered
        assert bad.expected == ("1..3" if outcome == "applied" else "0")


def test_delivered_absent_is_not_checked() -> None:
    assert delivered_mismatch({"outcome": "discarded_stale", "sampled": 2}) is None
