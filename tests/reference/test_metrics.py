"""reference/metrics.py: exact formulas, the rule for every zero denominator, and the bounds."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given
from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters, PositionCounts, RfcTotals
from spectally.reference.metrics import (
    Ratio,
    acceptance_rate,
    derived_metrics,
    draft_quality,
    legacy_metrics,
    mean_acceptance_length,
    metric_bounds,
    position_acceptance_given_verified,
    position_acceptance_per_step,
    verification_rate,
)
from spectally.reference.step import Mode, StepQuery
from strategies import reachable_counters


def totals(**values: int) -> RfcTotals[int]:
    t = Counters.zero(1).rfc
    return replace(t, **values)


# -- Ratio ---------------------------------------------------------------------------------


def test_ratio_value() -> None:
    assert Ratio(1, 4).value() == 0.25
    assert Ratio(1, 4, offset=1).value() == 1.25
    assert Ratio(3, 0).value() is None
    assert Ratio(0, 0, offset=1, if_zero=1.0).value() == 1.0


# -- every zero denominator ------------------------------------------------------------------


def test_acceptance_rate() -> None:
    assert acceptance_rate(totals(drafted=4, accepted=1)).value() == 0.25
    assert acceptance_rate(totals()).value() is None  # nothing drafted: undefined, not 0


def test_draft_quality() -> None:
    assert draft_quality(totals(drafted=4, verified=3, accepted=1)).value() == 1 / 3
    # drafted but AV sent nothing to the target: undefined, not 0.
    assert draft_quality(totals(drafted=4, verified=0)).value() is None


def test_verification_rate() -> None:
    assert verification_rate(totals(drafted=4, verified=3)).value() == 0.75
    assert verification_rate(totals()).value() is None


def test_mean_acceptance_length() -> None:
    assert mean_acceptance_length(totals(accepted=3, spec_steps=2)).value() == 2.5
    # No spec step: 1.0 (no speculative gain), as vLLM's per-request metric reports.
    assert mean_acceptance_length(totals()).value() == 1.0


def test_per_position_metrics() -> None:
    pc = PositionCounts(drafted=4, verified=2, accepted=1, legacy_accepted=1)
    assert position_acceptance_given_verified(pc).value() == 0.5
    assert position_acceptance_given_verified(PositionCounts(4, 0, 0, 0)).value() is None
    assert position_acceptance_per_step(pc, totals(spec_steps=4)).value() == 0.25
    assert position_acceptance_per_step(pc, totals()).value() is None


def test_derived_metrics_of_the_zero_state() -> None:
    z = Counters.zero(2)
    assert derived_metrics(z) == {
        "acceptance_rate": None,
        "draft_quality": None,
        "verification_rate": None,
        "mean_acceptance_length": 1.0,
        "per_position_acceptance_given_verified": [None, None],
        "per_position_acceptance_per_step": [None, None],
    }
    assert legacy_metrics(z) == {
        "acceptance_rate": None,
        "mean_acceptance_length": 1.0,
        "per_position_acceptance_per_step": [None, None],
    }


def test_metrics_of_the_rfc_row() -> None:
    q = StepQuery(Mode.ASYNC, proposed=4, grammar_valid=2, av_verify=3, accepted=1)
    c = Counters.zero(4).add_step(Mode.ASYNC, q.inputs())
    m = derived_metrics(c)
    assert m["acceptance_rate"] == 0.25
    assert m["draft_quality"] == 1 / 3
    assert m["verification_rate"] == 0.75
    assert m["mean_acceptance_length"] == 2.0
    assert m["per_position_acceptance_given_verified"] == [1.0, 0.0, 0.0, None]
    assert m["per_position_acceptance_per_step"] == [1.0, 0.0, 0.0, 0.0]
    lg = legacy_metrics(c)
    assert lg["acceptance_rate"] == 0.5  # 1 of legacy drafted 2: the semantic change
    assert lg["mean_acceptance_length"] == 2.0
    assert lg["per_position_acceptance_per_step"] == [1.0, 0.0, 0.0, 0.0]


def test_padding_only_legacy_step_has_a_zero_draft_rate_denominator_only_in_rfc() -> None:
    c = Counters.zero(4).add_step(Mode.SYNC, StepQuery(Mode.SYNC, 0, 0, padding=4).inputs())
    assert derived_metrics(c)["acceptance_rate"] is None
    assert legacy_metrics(c)["acceptance_rate"] == 0.0  # vLLM #34734: "0 % acceptance"


# -- bounds on reachable states --------------------------------------------------------------


def _in(lo: float, value: object, hi: float) -> bool:
    return value is None or (isinstance(value, float) and lo <= value <= hi)


@given(reachable_counters())
def test_bounds_hold_on_reachable_states(c: Counters) -> None:
    assert all(ok for _, ok in metric_bounds(c.rfc, c.k, INT_ARITH))
    m = derived_metrics(c)
    for name in ("acceptance_rate", "draft_quality", "verification_rate"):
        assert _in(0.0, m[name], 1.0), (name, m[name])
    mean = m["mean_acceptance_length"]
    assert isinstance(mean, float) and 1.0 <= mean <= 1.0 + c.k
    for key in ("per_position_acceptance_given_verified", "per_position_acceptance_per_step"):
        values = m[key]
        assert isinstance(values, list) and len(values) == c.k
        assert all(_in(0.0, v, 1.0) for v in values)
    lg = legacy_metrics(c)
    assert _in(0.0, lg["acceptance_rate"], 1.0)
    lg_mean = lg["mean_acceptance_length"]
    assert isinstance(lg_mean, float) and 1.0 <= lg_mean <= 1.0 + c.k
    for v in lg["per_position_acceptance_per_step"]:  # type: ignore[attr-defined]
        assert _in(0.0, v, 1.0)
    for v in m.values():
        assert not (isinstance(v, float) and math.isnan(v))  # None, never NaN


def test_bounds_fail_outside_reachable_states() -> None:
    names = [name for name, _ in metric_bounds(totals(), 1, INT_ARITH)]
    bad = totals(drafted=1, verified=1, accepted=2, spec_steps=1)
    failing = [name for name, ok in metric_bounds(bad, 1, INT_ARITH) if not ok]
    assert failing == names
    assert [ok for _, ok in metric_bounds(totals(accepted=-1), 1, INT_ARITH)] == [False] * 3
