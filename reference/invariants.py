"""The invariants of SPEC.md section 5 as named predicates over a counter state.

Each predicate returns None when it holds, or a one-line explanation. `check_invariants` runs
them all and raises `InvariantViolation` naming the first that fails; the engine calls it after
every event. The proofs (spectally.proofs) prove the same properties for every input; these
runtime checks guard the integer code paths and anything built on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .counters import Counters
from .errors import InvariantViolation

Predicate = Callable[[Counters], "str | None"]


# [INV-1] ordering
def inv_ordering(c: Counters) -> str | None:
    """INV-1 ordering: drafted >= verified >= accepted >= 0."""
    r = c.rfc
    if not r.drafted >= r.verified >= r.accepted >= 0:
        return f"drafted={r.drafted} verified={r.verified} accepted={r.accepted}"
    return None


# [INV-2] fates-partition
def inv_fates_partition(c: Counters) -> str | None:
    """INV-2 fates partition drafted, and each fate is >= 0."""
    fates = c.fates_dict()
    if any(v < 0 for v in fates.values()) or sum(fates.values()) != c.rfc.drafted:
        return f"fates={fates} sum={sum(fates.values())} drafted={c.rfc.drafted}"
    return None


# [INV-3] verified-decomposition
def inv_verified_decomposition(c: Counters) -> str | None:
    """INV-3 verified = accepted + rejected + grammar-invalid-verified; accepted fate = accepted."""
    r = c.rfc
    if r.accepted_fate != r.accepted:
        return f"accepted fate {r.accepted_fate} != accepted {r.accepted}"
    if r.verified != r.accepted + r.rejected + r.grammar_invalid_verified:
        return (
            f"verified={r.verified} != accepted {r.accepted} + rejected {r.rejected}"
            f" + grammar_invalid_verified {r.grammar_invalid_verified}"
        )
    return None


# [INV-4] positions-non-increasing
def inv_positions_non_increasing(c: Counters) -> str | None:
    """INV-4 every per-position vector is non-increasing in the position."""
    for name in ("drafted", "verified", "accepted", "legacy_accepted"):
        vec = c.per_position(name)
        for i in range(1, len(vec)):
            if vec[i] > vec[i - 1]:
                return f"{name}[{i}]={vec[i]} > {name}[{i - 1}]={vec[i - 1]}"
    return None


# [INV-5] positions-sum-to-totals
def inv_positions_sum(c: Counters) -> str | None:
    """INV-5 per-position vectors sum to their totals."""
    totals = {
        "drafted": c.rfc.drafted,
        "verified": c.rfc.verified,
        "accepted": c.rfc.accepted,
        "legacy_accepted": c.legacy.num_accepted_tokens,
    }
    for name, total in totals.items():
        if sum(c.per_position(name)) != total:
            return f"sum({name} per position)={sum(c.per_position(name))} != {total}"
    return None


# [INV-6] positions-ordered
def inv_positions_ordered(c: Counters) -> str | None:
    """INV-6 at every position: accepted_i <= verified_i <= drafted_i."""
    for i, pc in enumerate(c.positions):
        if not pc.accepted <= pc.verified <= pc.drafted:
            return (
                f"position {i}: drafted={pc.drafted} verified={pc.verified} accepted={pc.accepted}"
            )
    return None


# [INV-7] spec-steps
def inv_steps(c: Counters) -> str | None:
    """INV-7 drafted at position 0 == spec_steps (every spec step drafts >= 1) and
    accepted at position 0 <= spec_steps; drafted <= k * spec_steps."""
    r = c.rfc
    first = c.positions[0]
    if first.drafted != r.spec_steps:
        return f"drafted[0]={first.drafted} != spec_steps={r.spec_steps}"
    if first.accepted > r.spec_steps:
        return f"accepted[0]={first.accepted} > spec_steps={r.spec_steps}"
    if r.drafted > c.k * r.spec_steps:
        return f"drafted={r.drafted} > k*spec_steps={c.k * r.spec_steps}"
    return None


# [INV-8] legacy-steps
def inv_legacy_accepted(c: Counters) -> str | None:
    """INV-8 legacy: accepted[0] <= num_drafts, accepted <= k * num_drafts."""
    lg = c.legacy
    first = c.positions[0].legacy_accepted
    if first > lg.num_drafts or lg.num_accepted_tokens > c.k * lg.num_drafts:
        return (
            f"legacy accepted={lg.num_accepted_tokens} accepted[0]={first} drafts={lg.num_drafts}"
        )
    return None


INVARIANTS: dict[str, Predicate] = {
    "INV-1 ordering": inv_ordering,
    "INV-2 fates-partition": inv_fates_partition,
    "INV-3 verified-decomposition": inv_verified_decomposition,
    "INV-4 positions-non-increasing": inv_positions_non_increasing,
    "INV-5 positions-sum-to-totals": inv_positions_sum,
    "INV-6 positions-ordered": inv_positions_ordered,
    "INV-7 spec-steps": inv_steps,
    "INV-8 legacy-steps": inv_legacy_accepted,
}


def violations(c: Counters) -> dict[str, str]:
    """Every failing invariant with its explanation (empty when all hold)."""
    out: dict[str, str] = {}
    for name, pred in INVARIANTS.items():
        detail = pred(c)
        if detail is not None:
            out[name] = detail
    return out


def check_invariants(c: Counters) -> None:
    for name, pred in INVARIANTS.items():
        detail = pred(c)
        if detail is not None:
            raise InvariantViolation(name, detail)


# [INV-9] monotone
def check_monotone(before: Counters, after: Counters) -> None:
    """INV-9 monotone: no counter ever decreases."""
    b, a = before.to_dict(), after.to_dict()
    for path, old, new in _leaves(b, a, ""):
        if new < old:
            raise InvariantViolation("INV-9 monotone", f"{path} went from {old} to {new}")


# [INV-10] totals-are-sums
def check_totals_are_sums(total: Counters, parts: Iterable[Counters]) -> None:
    """INV-10 totals are sums: the engine totals equal the merge of the per-request counters."""
    summed = Counters.zero(total.k)
    for part in parts:
        summed = summed.merge(part)
    if summed != total:
        b, a = summed.to_dict(), total.to_dict()
        diff = [f"{path}: requests {x} != total {y}" for path, x, y in _leaves(b, a, "") if x != y]
        raise InvariantViolation("INV-10 totals-are-sums", "; ".join(diff))


def _leaves(a: object, b: object, path: str) -> list[tuple[str, int, int]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[tuple[str, int, int]] = []
        for key in a:
            out.extend(_leaves(a[key], b[key], f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out.extend(_leaves(x, y, f"{path}[{i}]"))
        return out
    assert isinstance(a, int) and isinstance(b, int)
    return [(path, a, b)]
