"""reference/counters.py: counter states form a commutative monoid; add_step folds one block."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import (
    Counters,
    LegacyTotals,
    PositionCounts,
    RfcTotals,
    legacy_zero,
    position_zero,
    rfc_zero,
)
from spectally.reference.step import Mode, StepQuery, legacy_step, rfc_step
from strategies import reachable_counters, step_queries

K = 4
states = reachable_counters(k=K)


@given(states, states, states)
def test_merge_is_associative(a: Counters, b: Counters, c: Counters) -> None:
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@given(states, states)
def test_merge_is_commutative(a: Counters, b: Counters) -> None:
    assert a.merge(b) == b.merge(a)


@given(states)
def test_zero_is_the_identity(a: Counters) -> None:
    zero = Counters.zero(K)
    assert a.merge(zero) == a == zero.merge(a)


@given(st.lists(step_queries(mode=Mode.ASYNC, k=K), max_size=6), st.randoms())
def test_folding_order_does_not_matter(qs: list[StepQuery], rnd: object) -> None:
    """Sharded replays combine exactly: fold in any order or split and merge."""
    forward = Counters.zero(K)
    for q in qs:
        forward = forward.add_step(Mode.ASYNC, q.inputs())
    shuffled = list(qs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    half = len(shuffled) // 2
    left, right = Counters.zero(K), Counters.zero(K)
    for q in shuffled[:half]:
        left = left.add_step(Mode.ASYNC, q.inputs())
    for q in shuffled[half:]:
        right = right.add_step(Mode.ASYNC, q.inputs())
    assert left.merge(right) == forward


@given(step_queries(k=K))
def test_add_step_adds_the_step_counts(q: StepQuery) -> None:
    x = q.inputs()
    c = Counters.zero(K).add_step(q.mode, x)
    r = rfc_step(q.mode, x, INT_ARITH)
    lg = legacy_step(q.mode, x, INT_ARITH)
    assert (c.rfc.drafted, c.rfc.verified, c.rfc.accepted) == (r.drafted, r.verified, r.accepted)
    assert (c.rfc.spec_steps, c.rfc.padding) == (r.spec_steps, r.padding)
    assert c.rfc.fates() == r.fates
    assert c.fates_dict() == r.fates.as_dict()
    assert (c.rfc.discarded_steps, c.rfc.discarded_drafted, c.rfc.discarded_verified) == (
        r.discarded_steps,
        r.discarded_drafted,
        r.discarded_verified,
    )
    assert c.legacy == LegacyTotals(lg.num_drafts, lg.num_draft_tokens, lg.num_accepted_tokens)
    # Per-position vectors are prefix indicators of the block's lengths.
    for name, length in [
        ("drafted", r.drafted),
        ("verified", r.verified),
        ("accepted", r.accepted),
        ("legacy_accepted", lg.num_accepted_tokens),
    ]:
        assert c.per_position(name) == tuple(1 if i < length else 0 for i in range(K))


def test_add_step_example_rfc_row() -> None:
    q = StepQuery(Mode.ASYNC, proposed=4, grammar_valid=2, av_verify=3, accepted=1)
    c = Counters.zero(4).add_step(Mode.ASYNC, q.inputs()).add_step(Mode.ASYNC, q.inputs())
    d = c.to_dict()
    assert d["rfc"] == {
        "drafted": 8,
        "verified": 6,
        "accepted": 2,
        "spec_steps": 2,
        "padding": 0,
        "fates": {
            "accepted": 2,
            "rejected": 2,
            "grammar_invalid_verified": 2,
            "grammar_invalid_unverified": 0,
            "av_skipped": 2,
            "truncated": 0,
        },
        "discarded": {"steps": 0, "drafted": 0, "verified": 0},
        "per_position": {
            "drafted": [2, 2, 2, 2],
            "verified": [2, 2, 2, 0],
            "accepted": [2, 0, 0, 0],
        },
    }
    assert d["vllm-legacy"] == {
        "drafted": 4,
        "accepted": 2,
        "spec_steps": 2,
        "per_position": {"accepted": [2, 0, 0, 0]},
    }


def test_zero_state() -> None:
    z = Counters.zero(3)
    assert z.k == 3
    assert z.rfc == rfc_zero(INT_ARITH)
    assert all(getattr(z.rfc, f.name) == 0 for f in fields(RfcTotals))
    assert z.legacy == legacy_zero(INT_ARITH) == LegacyTotals(0, 0, 0)
    assert z.positions == (position_zero(INT_ARITH),) * 3 == (PositionCounts(0, 0, 0, 0),) * 3


def test_merge_rejects_different_k() -> None:
    with pytest.raises(ValueError, match="k=2 and k=3"):
        Counters.zero(2).merge(Counters.zero(3))


@pytest.mark.parametrize("k", [0, -1, True, 2.0, "4"])
def test_malformed_k_is_rejected(k: object) -> None:
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        Counters(k, rfc_zero(INT_ARITH), legacy_zero(INT_ARITH), ())  # type: ignore[arg-type]
    if k in (0, -1):
        with pytest.raises(ValueError, match="k must be an int >= 1"):
            Counters.zero(k)  # type: ignore[arg-type]


def test_positions_must_have_length_k() -> None:
    z = Counters.zero(3)
    with pytest.raises(ValueError, match="2 per-position counters for k=3"):
        replace(z, positions=z.positions[:2])


def test_counters_are_immutable() -> None:
    z = Counters.zero(2)
    with pytest.raises(AttributeError):
        z.k = 3  # type: ignore[misc]
