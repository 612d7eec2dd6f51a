"""reference/step.py and reference/arith.py: the step rules per mode, on examples and properties."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectally.reference.arith import INT_ARITH, IntArith
from spectally.reference.errors import InadmissibleStep, SpectallyError
from spectally.reference.step import (
    FATE_NAMES,
    Mode,
    StepInputs,
    StepQuery,
    admissibility,
    admissible,
    fates,
    legacy_accepted_len,
    legacy_scheduled_invalid,
    legacy_step,
    pipeline,
    position_increment,
    rfc_position_lengths,
    rfc_step,
    token_fates,
)
from strategies import BREAKER_REASONS, admissible_inputs, inadmissible_inputs, step_queries

AR = INT_ARITH
SYNC, ASYNC = Mode.SYNC, Mode.ASYNC

# The RFC's one scenario row: async + AV, grammar rejects the last 2 of k = 4 drafts, the target
# verifies the first 3 (the 3rd is grammar-invalid) and accepts 1.
RFC_ROW = StepQuery(ASYNC, proposed=4, grammar_valid=2, av_verify=3, accepted=1)


def test_rfc_row() -> None:
    x = RFC_ROW.inputs()
    r = rfc_step(ASYNC, x, AR)
    assert (r.drafted, r.verified, r.accepted, r.spec_steps) == (4, 3, 1, 1)
    lg = legacy_step(ASYNC, x, AR)
    assert (lg.num_draft_tokens, lg.num_accepted_tokens, lg.num_drafts) == (2, 1, 1)
    assert lg.num_draft_tokens < r.verified  # the RFC's complaint: legacy drafted < verified
    assert r.fates.as_dict() == {
        "accepted": 1,
        "rejected": 1,
        "grammar_invalid_verified": 1,
        "grammar_invalid_unverified": 0,
        "av_skipped": 1,
        "truncated": 0,
    }
    assert token_fates(ASYNC, x) == [
        "accepted",
        "rejected",
        "grammar_invalid_verified",
        "av_skipped",
    ]
    assert RFC_ROW.violations(k=4) == []


def test_rfc_row_in_sync() -> None:
    """Same stage inputs in sync: the grammar cuts before scheduling, nothing invalid verified."""
    x = replace(RFC_ROW, mode=SYNC).inputs()
    r = rfc_step(SYNC, x, AR)
    assert (r.drafted, r.verified, r.accepted, r.spec_steps) == (4, 2, 1, 1)
    assert r.fates.grammar_invalid_unverified == 2
    assert legacy_step(SYNC, x, AR).num_draft_tokens == 2
    assert token_fates(SYNC, x) == [
        "accepted",
        "rejected",
        "grammar_invalid_unverified",
        "grammar_invalid_unverified",
    ]


# -- pipeline, per mode ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "query", "expected"),
    [
        # (after_grammar_sync, scheduled_drafts, verified, eligible, scheduled_slots)
        (SYNC, StepQuery(SYNC, 3, 0), (3, 3, 3, 3, 3)),
        (ASYNC, StepQuery(ASYNC, 3, 0), (3, 3, 3, 3, 3)),
        (SYNC, StepQuery(SYNC, 3, 0, padding=2), (3, 3, 3, 3, 5)),
        (SYNC, StepQuery(SYNC, 3, 0, grammar_valid=1, padding=2), (1, 1, 1, 1, 1)),
        (ASYNC, StepQuery(ASYNC, 3, 0, grammar_valid=1, padding=2), (3, 3, 3, 1, 5)),
        (SYNC, StepQuery(SYNC, 4, 0, scheduled=2, av_verify=1), (4, 2, 1, 1, 2)),
        (ASYNC, StepQuery(ASYNC, 4, 0, grammar_valid=3, scheduled=2, av_verify=1), (4, 2, 1, 1, 2)),
        (SYNC, StepQuery(SYNC, 0, 0, padding=4), (0, 0, 0, 0, 4)),
        (ASYNC, StepQuery(ASYNC, 4, 0, grammar_valid=0), (4, 4, 4, 0, 4)),
    ],
)
def test_pipeline_examples(mode: Mode, query: StepQuery, expected: tuple[int, ...]) -> None:
    p = pipeline(mode, query.inputs(), AR)
    got = (p.after_grammar_sync, p.scheduled_drafts, p.verified, p.eligible, p.scheduled_slots)
    assert got == expected


@given(admissible_inputs())
def test_pipeline_prefixes_shrink(case: tuple[Mode, StepInputs[int, bool], int]) -> None:
    mode, x, _ = case
    p = pipeline(mode, x, AR)
    assert x.proposed >= p.after_grammar_sync >= p.scheduled_drafts >= p.verified >= p.eligible
    assert p.eligible >= x.accepted >= 0
    assert 0 <= p.scheduled_slots <= x.proposed + x.padding
    assert p.scheduled_drafts <= p.scheduled_slots
    if mode is ASYNC:
        assert p.after_grammar_sync == x.proposed


# -- fates ---------------------------------------------------------------------------------


@given(admissible_inputs())
def test_fates_partition_proposed_and_match_token_fates(
    case: tuple[Mode, StepInputs[int, bool], int],
) -> None:
    mode, x, _ = case
    f = fates(mode, x, AR).as_dict()
    assert set(f) == set(FATE_NAMES)
    assert all(v >= 0 for v in f.values())
    assert sum(f.values()) == x.proposed
    per_token = token_fates(mode, x)
    assert len(per_token) == x.proposed
    assert Counter(per_token) == Counter({n: v for n, v in f.items() if v})
    # Position by position a token's fate walks the pipeline backwards: the later a stage cut
    # the prefix, the earlier the tokens it cut.
    order = (
        ["accepted", "rejected", "av_skipped", "truncated", "grammar_invalid_unverified"]
        if mode is SYNC
        else ["accepted", "rejected", "grammar_invalid_verified", "av_skipped", "truncated"]
    )
    ranks = [order.index(fate) for fate in per_token]
    assert ranks == sorted(ranks)


@given(admissible_inputs())
def test_grammar_fate_belongs_to_its_mode(case: tuple[Mode, StepInputs[int, bool], int]) -> None:
    mode, x, _ = case
    f = fates(mode, x, AR)
    if mode is SYNC:
        assert f.grammar_invalid_verified == 0
    else:
        assert f.grammar_invalid_unverified == 0
    if not x.structured:
        assert f.grammar_invalid_verified == f.grammar_invalid_unverified == 0


# -- rfc profile -------------------------------------------------------------------------------


@given(admissible_inputs())
def test_rfc_step_counts(case: tuple[Mode, StepInputs[int, bool], int]) -> None:
    mode, x, k = case
    r = rfc_step(mode, x, AR)
    p = pipeline(mode, x, AR)
    f = fates(mode, x, AR)
    if x.applied:
        assert (r.drafted, r.verified, r.accepted, r.padding) == (
            x.proposed,
            p.verified,
            x.accepted,
            x.padding,
        )
        assert r.spec_steps == (1 if x.proposed > 0 else 0)
        assert r.fates == f
        assert (r.discarded_steps, r.discarded_drafted, r.discarded_verified) == (0, 0, 0)
    else:
        assert (r.drafted, r.verified, r.accepted, r.padding, r.spec_steps) == (0, 0, 0, 0, 0)
        assert sum(r.fates.as_dict().values()) == 0
        assert r.discarded_steps == (1 if x.proposed > 0 else 0)
        assert (r.discarded_drafted, r.discarded_verified) == (x.proposed, p.verified)
    # The RFC's invariant, at every step.
    assert r.drafted >= r.verified >= r.accepted >= 0
    assert r.drafted <= k * r.spec_steps
    assert rfc_position_lengths(mode, x, AR) == (r.drafted, r.verified, r.accepted)


def test_padding_only_block_is_no_rfc_step_but_a_legacy_step() -> None:
    """P/D uniform padding: k placeholders, nothing proposed (vLLM PR #50518)."""
    x = StepQuery(SYNC, proposed=0, accepted=0, padding=4).inputs()
    r = rfc_step(SYNC, x, AR)
    assert (r.drafted, r.spec_steps, r.padding) == (0, 0, 4)
    lg = legacy_step(SYNC, x, AR)
    assert (lg.num_drafts, lg.num_draft_tokens, lg.num_accepted_tokens) == (1, 4, 0)
    assert token_fates(SYNC, x) == []


def test_discarded_block() -> None:
    x = StepQuery(ASYNC, proposed=3, accepted=0, av_verify=2, applied=False).inputs()
    r = rfc_step(ASYNC, x, AR)
    assert (r.drafted, r.verified, r.spec_steps) == (0, 0, 0)
    assert (r.discarded_steps, r.discarded_drafted, r.discarded_verified) == (1, 3, 2)
    assert legacy_step(ASYNC, x, AR).num_drafts == 0  # legacy_reported defaults to applied
    stale = replace(StepQuery(ASYNC, 3, 1, applied=False, legacy_reported=True)).inputs()
    lg = legacy_step(ASYNC, stale, AR)
    assert (lg.num_drafts, lg.num_draft_tokens, lg.num_accepted_tokens) == (1, 3, 1)


# -- legacy profile (vLLM <= 0.32) -------------------------------------------------------------


@pytest.mark.parametrize("mode", list(Mode))
def test_legacy_all_drafts_grammar_rejected(mode: Mode) -> None:
    """Issue #56977: async still counts the step (drafted 0), sync records none."""
    x = StepQuery(mode, proposed=3, accepted=0, grammar_valid=0).inputs()
    lg = legacy_step(mode, x, AR)
    if mode is SYNC:
        assert (lg.num_drafts, lg.num_draft_tokens) == (0, 0)
        assert legacy_scheduled_invalid(mode, x, AR) == 0
    else:
        assert (lg.num_drafts, lg.num_draft_tokens) == (1, 0)
        assert legacy_scheduled_invalid(mode, x, AR) == 3
    # The rfc profile counts one spec step in both modes.
    assert rfc_step(mode, x, AR).spec_steps == 1


def test_legacy_async_padding_counts_as_invalid_for_structured() -> None:
    x = StepQuery(ASYNC, proposed=2, accepted=0, grammar_valid=2, padding=2).inputs()
    assert legacy_scheduled_invalid(ASYNC, x, AR) == 2
    assert legacy_step(ASYNC, x, AR).num_draft_tokens == 2
    unstructured = StepQuery(ASYNC, proposed=2, accepted=0, padding=2).inputs()
    assert legacy_scheduled_invalid(ASYNC, unstructured, AR) == 0
    assert legacy_step(ASYNC, unstructured, AR).num_draft_tokens == 4


def test_legacy_av_is_invisible() -> None:
    """AV-trimmed slots look drafted-and-rejected to vLLM 0.32; B = 0 still counts a step."""
    x = StepQuery(SYNC, proposed=4, accepted=0, av_verify=0).inputs()
    lg = legacy_step(SYNC, x, AR)
    assert (lg.num_drafts, lg.num_draft_tokens) == (1, 4)
    assert rfc_step(SYNC, x, AR).verified == 0


@given(admissible_inputs())
def test_legacy_step_counts(case: tuple[Mode, StepInputs[int, bool], int]) -> None:
    mode, x, k = case
    lg = legacy_step(mode, x, AR)
    p = pipeline(mode, x, AR)
    counted = x.legacy_reported and p.scheduled_slots > 0
    assert lg.num_drafts == (1 if counted else 0)
    if counted:
        assert lg.num_draft_tokens == p.scheduled_slots - legacy_scheduled_invalid(mode, x, AR)
        assert lg.num_accepted_tokens == x.accepted
    else:
        assert lg.num_draft_tokens == lg.num_accepted_tokens == 0
    assert 0 <= lg.num_draft_tokens <= k * lg.num_drafts
    assert legacy_accepted_len(mode, x, AR) == lg.num_accepted_tokens
    if mode is SYNC:
        assert legacy_scheduled_invalid(mode, x, AR) == 0


def test_position_increment_is_a_prefix_indicator() -> None:
    assert [position_increment(3, i, AR) for i in range(5)] == [1, 1, 1, 0, 0]
    assert [position_increment(0, i, AR) for i in range(2)] == [0, 0]


# -- admissibility ---------------------------------------------------------------------------


@given(admissible_inputs())
def test_admissible_inputs_pass_every_condition(
    case: tuple[Mode, StepInputs[int, bool], int],
) -> None:
    mode, x, k = case
    assert all(ok for _, ok in admissibility(mode, x, AR, k))
    assert admissible(mode, x, AR, k) is True
    assert admissible(mode, x, AR) is True


@given(inadmissible_inputs())
def test_each_condition_fires(case: tuple[Mode, StepInputs[int, bool], int, str]) -> None:
    mode, x, k, reason = case
    failing = [r for r, ok in admissibility(mode, x, AR, k) if not ok]
    assert reason in failing
    assert admissible(mode, x, AR, k) is False


def test_every_condition_has_a_breaker() -> None:
    x = StepQuery(SYNC, 1, 0).inputs()
    names = [r for r, _ in admissibility(SYNC, x, AR, 4)]
    assert sorted(names) == sorted(BREAKER_REASONS)
    assert len(admissibility(SYNC, x, AR)) == len(names) - 1  # no k: no block-size condition


@pytest.mark.parametrize(
    ("query", "k", "reason"),
    [
        (StepQuery(SYNC, -1, 0), None, "proposed must be >= 0"),
        (StepQuery(SYNC, 1, 0, padding=-1), None, "padding must be >= 0"),
        (StepQuery(SYNC, 1, 0, grammar_valid=-1), None, "grammar-valid prefix must be >= 0"),
        (StepQuery(SYNC, 1, 0, grammar_valid=2), None, "cannot exceed the proposal (G <= N)"),
        (StepQuery(SYNC, 1, 0, scheduled=-1), None, "schedule cap must be >= 0"),
        (StepQuery(ASYNC, 1, 0, av_verify=-1), None, "AV cap must be >= 0"),
        (StepQuery(SYNC, 1, -1), None, "accepted must be >= 0"),
        (StepQuery(SYNC, 2, 2, av_verify=1), None, "accepted cannot exceed the drafts eligible"),
        (StepQuery(ASYNC, 4, 2, grammar_valid=1), None, "accepted cannot exceed the drafts"),
        (StepQuery(SYNC, 1, 0, legacy_reported=False), None, "always reported by vLLM <= 0.32"),
        (StepQuery(SYNC, 3, 0, padding=2), 4, "(proposed + padding) cannot exceed k"),
    ],
)
def test_violations_name_the_reason(query: StepQuery, k: int | None, reason: str) -> None:
    reasons = query.violations(k)
    assert reasons
    assert any(reason in r for r in reasons), reasons


def test_unstructured_grammar_condition() -> None:
    """Only reachable through StepInputs: StepQuery normalises G to N when unstructured."""
    x = replace(StepQuery(SYNC, 3, 0).inputs(), grammar_valid=1)
    failing = [r for r, ok in admissibility(SYNC, x, AR) if not ok]
    assert failing == ["without structured output every draft is grammar-valid (G == N)"]


@given(step_queries())
def test_query_inputs_normalise_caps(q: StepQuery) -> None:
    x = q.inputs()
    uncut = q.proposed + q.padding
    assert x.structured is (q.grammar_valid is not None)
    assert x.grammar_valid == (q.proposed if q.grammar_valid is None else q.grammar_valid)
    assert x.schedule_cap == (uncut if q.scheduled is None else q.scheduled)
    assert x.av_cap == (uncut if q.av_verify is None else q.av_verify)
    assert x.legacy_reported is (q.applied if q.legacy_reported is None else q.legacy_reported)
    assert q.violations() == []
    assert q.type_errors() == []


@pytest.mark.parametrize(
    ("query", "k", "message"),
    [
        (StepQuery(SYNC, True, 0), None, "proposed must be an int, got True"),  # type: ignore[arg-type]
        (StepQuery(SYNC, 1, 1.0), None, "accepted must be an int, got 1.0"),  # type: ignore[arg-type]
        (StepQuery(SYNC, 1, 0, padding=None), None, "padding must be an int"),  # type: ignore[arg-type]
        (StepQuery(SYNC, 1, 0, scheduled="1"), None, "scheduled must be an int or None"),  # type: ignore[arg-type]
        (StepQuery(SYNC, 1, 0, grammar_valid=False), None, "grammar_valid must be an int"),  # type: ignore[arg-type]
        (StepQuery("sync", 1, 0), None, "mode must be a Mode"),  # type: ignore[arg-type]
        (StepQuery(SYNC, 1, 0, applied=1), None, "applied must be a bool"),  # type: ignore[arg-type]
        (StepQuery(SYNC, 1, 0, legacy_reported=0), None, "legacy_reported must be a bool"),  # type: ignore[arg-type]
        (StepQuery(SYNC, 1, 0), 2.0, "k must be an int or None"),
        (StepQuery(SYNC, 1, 0), True, "k must be an int or None"),
    ],
)
def test_mistyped_query(query: StepQuery, k: object, message: str) -> None:
    reasons = query.violations(k)  # type: ignore[arg-type]
    assert any(message in r for r in reasons), reasons
    if query.type_errors():
        with pytest.raises(TypeError, match=message.split(",")[0]):
            query.inputs()


# -- mode selection ----------------------------------------------------------------------------


@given(admissible_inputs())
def test_plain_mode_strings_select_the_same_branch(
    case: tuple[Mode, StepInputs[int, bool], int],
) -> None:
    mode, x, _ = case
    assert pipeline(mode.value, x, AR) == pipeline(mode, x, AR)  # type: ignore[arg-type]
    assert rfc_step(mode.value, x, AR) == rfc_step(mode, x, AR)  # type: ignore[arg-type]
    assert legacy_step(mode.value, x, AR) == legacy_step(mode, x, AR)  # type: ignore[arg-type]


def test_unknown_mode_is_rejected() -> None:
    x = StepQuery(SYNC, 1, 0).inputs()
    for fn in (pipeline, fates, rfc_step, legacy_step):
        with pytest.raises(ValueError, match="not a valid Mode"):
            fn("bogus", x, AR)  # type: ignore[operator]
    with pytest.raises(ValueError, match="not a valid Mode"):
        token_fates("bogus", x)  # type: ignore[arg-type]


# -- arith -----------------------------------------------------------------------------------


@given(st.integers(-50, 50), st.integers(-50, 50), st.booleans(), st.booleans())
def test_int_arith_is_exact(a: int, b: int, p: bool, q: bool) -> None:
    ar = IntArith()
    assert ar.lit(a) == a
    assert (ar.add(a, b), ar.sub(a, b), ar.mul(a, b)) == (a + b, a - b, a * b)
    assert (ar.le(a, b), ar.lt(a, b), ar.eq(a, b)) == (a <= b, a < b, a == b)
    assert (ar.min(a, b), ar.max(a, b)) == (min(a, b), max(a, b))
    assert ar.ite(p, a, b) == (a if p else b)
    assert (ar.both(p, q), ar.either(p, q), ar.negate(p), ar.truth(p)) == (
        p and q,
        p or q,
        not p,
        p,
    )


def test_checked_inputs() -> None:
    assert RFC_ROW.checked_inputs(k=4) == RFC_ROW.inputs()
    bad = StepQuery(SYNC, proposed=3, accepted=4, padding=2)
    with pytest.raises(InadmissibleStep) as info:
        bad.checked_inputs(k=4)
    assert info.value.reasons == bad.violations(k=4)
    assert len(info.value.reasons) == 2
    assert str(info.value) == "; ".join(info.value.reasons)
    assert isinstance(info.value, SpectallyError)


@given(admissible_inputs())
def test_sync_async_differential(case: tuple[Mode, StepInputs[int, bool], int]) -> None:
    """Same stage inputs under both modes: equal drafted, accepted and spec_steps; verified
    differs exactly by the drafts async verified before the grammar refused them."""
    _, x, k = case
    assert admissible(SYNC, x, AR, k) and admissible(ASYNC, x, AR, k)  # same eligible prefix
    s, a = rfc_step(SYNC, x, AR), rfc_step(ASYNC, x, AR)
    assert (s.drafted, s.accepted, s.spec_steps) == (a.drafted, a.accepted, a.spec_steps)
    assert a.verified - s.verified == a.fates.grammar_invalid_verified
    assert pipeline(SYNC, x, AR).eligible == pipeline(ASYNC, x, AR).eligible
    if x.structured and x.grammar_valid == 0 and x.proposed > 0 and x.applied:
        assert s.spec_steps == a.spec_steps == 1  # even when the grammar rejects every draft
