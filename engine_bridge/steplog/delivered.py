"""The ``delivered`` rule (spec/STEP_LOG.md) and vLLM's accepted count of a block, over an
`Arith`, so the reference replay (ints) and the columnar checker (arrays) share them; plain
Python, no event of the reference machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from spectally.reference.arith import INT_ARITH, Arith, B, N

from .schema import RequestStepRecord


@dataclass(frozen=True)
class DeliveredMismatch:
    """A ``request_step`` whose observed ``delivered`` contradicts its applied / discarded
    classification (STEP_LOG.md, "delivered"): the engine appended tokens from a block the spec
    says was discarded, or none (or more than it sampled) from one the spec says was applied."""

    reason: str
    expected: str  # what the classification allows, e.g. "1..3" or "0"
    actual: int


def vllm_accepted(sampled: N, ar: Arith[N, B]) -> N:
    """What vLLM reports as accepted for a block that sampled ``sampled`` tokens: all but the
    one bonus / correction token, ``max(sampled - 1, 0)`` (SPEC.md section 8). Written over
    `Arith` so the reference replay (ints) and the columnar checker (arrays) share it."""
    return ar.max(ar.sub(sampled, ar.lit(1)), ar.lit(0))


def delivered_consistent(applied: B, delivered: N, sampled: N, ar: Arith[N, B]) -> B:
    """The ``delivered`` rule (STEP_LOG.md): an applied block delivers between 1 (the bonus
    token) and ``sampled`` tokens (stop trimming may cut the rest); a discarded one delivers
    none. Over `Arith`, shared by `delivered_mismatch` and the columnar checker."""
    one = ar.lit(1)
    in_range = ar.both(ar.le(one, delivered), ar.le(delivered, sampled))
    return ar.either(
        ar.both(applied, in_range), ar.both(ar.negate(applied), ar.eq(delivered, ar.lit(0)))
    )


def delivered_mismatch(rec: RequestStepRecord) -> DeliveredMismatch | None:
    """Check a record's observed ``delivered`` (absent or null: not recorded, nothing to check)
    against its ``outcome``: ``applied`` needs ``1 <= delivered <= sampled`` (at least the
    bonus token, at most what was sampled: stop trimming may cut the rest); every
    ``discarded_*`` outcome needs ``delivered == 0``. Replay checks the outcome itself against
    the reference's classification of the block, so a ``delivered`` that contradicts the
    reference always surfaces: here, or as an outcome divergence."""
    delivered = rec.get("delivered")
    if delivered is None:
        return None
    outcome: str = rec["outcome"]
    sampled: int = rec["sampled"]
    if delivered_consistent(outcome == "applied", delivered, sampled, INT_ARITH):
        return None
    if outcome == "applied":
        return DeliveredMismatch(
            f"an applied block delivers between 1 and sampled ({sampled}) tokens; the engine"
            f" appended {delivered}",
            f"1..{sampled}",
            delivered,
        )
    return DeliveredMismatch(
        f"the block is {outcome}, yet the engine appended {delivered} of its tokens to the"
        " request (delivered output is applied; only dropped stale output is discarded)",
        "0",
        delivered,
    )
