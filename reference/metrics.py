"""Derived metrics (SPEC.md section 6): exact formulas and the rule for every zero denominator.

Each metric is a `Ratio` of counters plus an offset, built by the same code for ints and for
Z3 terms; `value` turns an integer ratio into a float, or None where SPEC.md says the metric is
undefined. None is reported as JSON null / "n/a", never as 0, so "no drafts" cannot be mistaken
for "nothing accepted".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic

from .arith import Arith, B, N
from .counters import Counters, PositionCounts, RfcTotals


@dataclass(frozen=True)
class Ratio(Generic[N]):
    """offset + numerator / denominator; ``if_zero`` is the value when denominator == 0."""

    numerator: N
    denominator: N
    offset: int = 0
    if_zero: float | None = None

    def value(self: Ratio[int]) -> float | None:
        if self.denominator == 0:
            return self.if_zero
        return self.offset + self.numerator / self.denominator


# [M1] acceptance rate
def acceptance_rate(t: RfcTotals[N]) -> Ratio[N]:
    """M1: accepted / drafted. Undefined (None) when nothing was drafted."""
    return Ratio(t.accepted, t.drafted)


# [M2] draft quality
def draft_quality(t: RfcTotals[N]) -> Ratio[N]:
    """M2: accepted / verified. Undefined (None) when nothing was verified."""
    return Ratio(t.accepted, t.verified)


# [M3] verification rate
def verification_rate(t: RfcTotals[N]) -> Ratio[N]:
    """M3: verified / drafted, the share of drafts the target looked at. None when none drafted."""
    return Ratio(t.verified, t.drafted)


# [M4] mean acceptance length
def mean_acceptance_length(t: RfcTotals[N]) -> Ratio[N]:
    """M4: 1 + accepted / spec_steps. 1.0 with no spec step (no speculative gain, as vLLM's
    per-request metric reports)."""
    return Ratio(t.accepted, t.spec_steps, offset=1, if_zero=1.0)


# [M5] per-position acceptance, conditional
def position_acceptance_given_verified(pc: PositionCounts[N]) -> Ratio[N]:
    """M5: at position i, accepted_i / verified_i: how often a draft the target saw was right."""
    return Ratio(pc.accepted, pc.verified)


# [M6] per-position acceptance, per step
def position_acceptance_per_step(pc: PositionCounts[N], t: RfcTotals[N]) -> Ratio[N]:
    """M6: accepted_i / spec_steps, vLLM's per-position rate. None with no spec step."""
    return Ratio(pc.accepted, t.spec_steps)


def metric_bounds(t: RfcTotals[N], k: N, ar: Arith[N, B]) -> list[tuple[str, B]]:
    """Bounds on the metrics, stated on numerators and denominators (for the proofs):
    0 <= rate <= 1, 0 <= quality <= 1, 1 <= mean length <= 1 + k."""
    zero = ar.lit(0)
    return [
        (
            "acceptance_rate in [0,1]",
            ar.both(ar.le(zero, t.accepted), ar.le(t.accepted, t.drafted)),
        ),
        ("draft_quality in [0,1]", ar.both(ar.le(zero, t.accepted), ar.le(t.accepted, t.verified))),
        (
            "mean_acceptance_length in [1, 1+k]",
            ar.both(ar.le(zero, t.accepted), ar.le(t.accepted, ar.mul(k, t.spec_steps))),
        ),
    ]


def derived_metrics(c: Counters) -> dict[str, object]:
    """Every derived metric of a counter state, JSON-ready (None = undefined)."""
    t = c.rfc
    return {
        "acceptance_rate": acceptance_rate(t).value(),
        "draft_quality": draft_quality(t).value(),
        "verification_rate": verification_rate(t).value(),
        "mean_acceptance_length": mean_acceptance_length(t).value(),
        "per_position_acceptance_given_verified": [
            position_acceptance_given_verified(pc).value() for pc in c.positions
        ],
        "per_position_acceptance_per_step": [
            position_acceptance_per_step(pc, t).value() for pc in c.positions
        ],
    }


def legacy_metrics(c: Counters) -> dict[str, object]:
    """What vLLM <= 0.32 derives from its own counters (metrics.py:82-137)."""
    lg = c.legacy
    return {
        "acceptance_rate": Ratio(lg.num_accepted_tokens, lg.num_draft_tokens).value(),
        "mean_acceptance_length": Ratio(
            lg.num_accepted_tokens, lg.num_drafts, offset=1, if_zero=1.0
        ).value(),
        "per_position_acceptance_per_step": [
            Ratio(pc.legacy_accepted, lg.num_drafts).value() for pc in c.positions
        ],
    }
