"""reference/invariants.py: every predicate fires on a hand-built violating state (so no check is
vacuous), and every predicate holds on reachable states."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given
from spectally.reference.counters import Counters, LegacyTotals, PositionCounts
from spectally.reference.errors import InvariantViolation
from spectally.reference.invariants import (
    INVARIANTS,
    check_invariants,
    check_monotone,
    check_totals_are_sums,
    violations,
)
from spectally.reference.step import Mode, StepQuery
from strategies import reachable_counters

# A valid base state: two applied blocks of the RFC row (k = 4).
RFC_ROW = StepQuery(Mode.ASYNC, proposed=4, grammar_valid=2, av_verify=3, accepted=1)
BASE = Counters.zero(4).add_step(Mode.ASYNC, RFC_ROW.inputs())
BASE = BASE.add_step(Mode.ASYNC, RFC_ROW.inputs())


def rfc(**values: int) -> Callable[[Counters], Counters]:
    return lambda c: replace(c, rfc=replace(c.rfc, **values))


def legacy(**values: int) -> Callable[[Counters], Counters]:
    return lambda c: replace(c, legacy=replace(c.legacy, **values))


def position(i: int, **values: int) -> Callable[[Counters], Counters]:
    def change(c: Counters) -> Counters:
        ps = list(c.positions)
        ps[i] = replace(ps[i], **values)
        return replace(c, positions=tuple(ps))

    return change


def chain(*changes: Callable[[Counters], Counters]) -> Callable[[Counters], Counters]:
    def change(c: Counters) -> Counters:
        for f in changes:
            c = f(c)
        return c

    return change


# BASE: drafted 8, verified 6, accepted 2, spec_steps 2; fates accepted 2, rejected 2,
# grammar_invalid_verified 2, av_skipped 2; per position drafted [2,2,2,2], verified [2,2,2,0],
# accepted [2,0,0,0]; legacy num_drafts 2, drafted 4, accepted 2, per position [2,0,0,0].
CASES: list[tuple[str, str, Callable[[Counters], Counters]]] = [
    ("INV-1 ordering", "verified above drafted", rfc(verified=9)),
    ("INV-1 ordering", "accepted above verified", rfc(accepted=7)),
    ("INV-1 ordering", "negative accepted", rfc(accepted=-1)),
    ("INV-2 fates-partition", "fates do not sum to drafted", rfc(truncated=1)),
    ("INV-2 fates-partition", "a negative fate", rfc(truncated=-1, av_skipped=3)),
    ("INV-3 verified-decomposition", "accepted fate != accepted", rfc(accepted_fate=1, rejected=3)),
    (
        "INV-3 verified-decomposition",
        "verified != accepted + rejected + grammar_invalid_verified",
        rfc(rejected=1, truncated=1),
    ),
    ("INV-4 positions-non-increasing", "drafted grows", position(3, drafted=3)),
    ("INV-4 positions-non-increasing", "verified grows", position(3, verified=3)),
    ("INV-4 positions-non-increasing", "accepted grows", position(2, accepted=1)),
    ("INV-4 positions-non-increasing", "legacy accepted grows", position(2, legacy_accepted=1)),
    ("INV-5 positions-sum-to-totals", "drafted vector", rfc(drafted=9, truncated=1)),
    (
        "INV-5 positions-sum-to-totals",
        "legacy accepted vector",
        chain(legacy(num_accepted_tokens=3)),
    ),
    (
        "INV-6 positions-ordered",
        "verified above drafted at a position",
        chain(position(0, verified=3), position(1, verified=1)),
    ),
    (
        "INV-6 positions-ordered",
        "accepted above verified at a position",
        chain(position(0, accepted=3), position(1, accepted=0)),
    ),
    ("INV-7 spec-steps", "drafted[0] != spec_steps", rfc(spec_steps=3)),
    (
        "INV-7 spec-steps",
        "accepted[0] above spec_steps",
        chain(
            position(0, accepted=2),
            rfc(spec_steps=1),
            position(0, drafted=1),
            position(1, drafted=1),
            position(2, drafted=1),
            position(3, drafted=5),
        ),
    ),
    (
        "INV-7 spec-steps",
        "drafted above k * spec_steps",
        chain(
            rfc(spec_steps=1, drafted=5, truncated=-1),
            position(0, drafted=1),
            position(1, drafted=1),
            position(2, drafted=1),
            position(3, drafted=1),
        ),
    ),
    ("INV-8 legacy-steps", "legacy accepted[0] above num_drafts", legacy(num_drafts=1)),
    (
        "INV-8 legacy-steps",
        "legacy accepted above k * num_drafts",
        chain(legacy(num_drafts=1, num_accepted_tokens=5), position(0, legacy_accepted=1)),
    ),
]


def test_base_state_is_valid() -> None:
    assert violations(BASE) == {}
    check_invariants(BASE)


@pytest.mark.parametrize(("name", "why", "change"), CASES, ids=[f"{n}: {w}" for n, w, _ in CASES])
def test_each_predicate_fires(name: str, why: str, change: Callable[[Counters], Counters]) -> None:
    bad = change(BASE)
    found = violations(bad)
    assert name in found, (why, found)
    detail = INVARIANTS[name](bad)
    assert detail
    assert "\n" not in detail  # a one-line explanation


def test_the_cases_cover_every_invariant() -> None:
    assert {name for name, _, _ in CASES} == set(INVARIANTS)


def test_check_invariants_raises_the_first_failing() -> None:
    bad = rfc(verified=9)(BASE)
    with pytest.raises(InvariantViolation) as info:
        check_invariants(bad)
    assert info.value.name == "INV-1 ordering"
    assert "drafted=8 verified=9" in info.value.detail
    assert str(info.value).startswith("invariant INV-1 ordering violated: ")


@given(reachable_counters())
def test_invariants_hold_on_reachable_states(c: Counters) -> None:
    assert violations(c) == {}
    check_invariants(c)


# -- INV-9 monotone --------------------------------------------------------------------------


@given(reachable_counters(k=4, mode=Mode.SYNC))
def test_monotone_holds_when_folding(c: Counters) -> None:
    check_monotone(c, c.add_step(Mode.SYNC, StepQuery(Mode.SYNC, 2, 1).inputs()))
    check_monotone(c, c)


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (rfc(drafted=7), "rfc.drafted"),
        (rfc(rejected=1), "rfc.fates.rejected"),
        (rfc(discarded_steps=-1), "rfc.discarded.steps"),
        (position(1, verified=1), "rfc.per_position.verified[1]"),
        (legacy(num_drafts=1), "vllm-legacy.spec_steps"),
        (position(0, legacy_accepted=1), "vllm-legacy.per_position.accepted[0]"),
    ],
)
def test_monotone_fires(change: Callable[[Counters], Counters], path: str) -> None:
    with pytest.raises(InvariantViolation) as info:
        check_monotone(BASE, change(BASE))
    assert info.value.name == "INV-9 monotone"
    assert info.value.detail.startswith(f"{path} went from ")


# -- INV-10 totals are sums ------------------------------------------------------------------


def test_totals_are_sums() -> None:
    one = Counters.zero(4).add_step(Mode.ASYNC, RFC_ROW.inputs())
    check_totals_are_sums(BASE, [one, one])
    check_totals_are_sums(Counters.zero(4), [])
    with pytest.raises(InvariantViolation) as info:
        check_totals_are_sums(BASE, [one])
    assert info.value.name == "INV-10 totals-are-sums"
    assert "rfc.drafted: requests 4 != total 8" in info.value.detail
    with pytest.raises(ValueError, match="cannot merge"):
        check_totals_are_sums(BASE, [Counters.zero(2)])


def test_legacy_totals_field_names() -> None:
    # The hand-built cases above rely on these names; fail loudly if they change.
    assert set(LegacyTotals.__dataclass_fields__) == {
        "num_drafts",
        "num_draft_tokens",
        "num_accepted_tokens",
    }
    assert set(PositionCounts.__dataclass_fields__) == {
        "drafted",
        "verified",
        "accepted",
        "legacy_accepted",
    }
