"""Counter state and how blocks fold into it.

Totals are plain sums of per-block counts, so they form a commutative monoid (`merge`, `ZERO`):
sharded replays and per-engine states combine exactly. Like ``step.py`` the folding is written
over an `Arith`, so the proofs reason about this code and not about a copy of it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Generic

from .arith import INT_ARITH, Arith, B, N
from .profile import VLLM_LEGACY, CountingProfile
from .step import (
    Fates,
    LegacyStepCounts,
    Mode,
    RfcStepCounts,
    StepInputs,
    legacy_step,
    position_increment,
    rfc_step,
)


@dataclass(frozen=True)
class RfcTotals(Generic[N]):
    """The rfc scalar counters (SPEC.md section 4)."""

    drafted: N
    verified: N
    accepted: N
    spec_steps: N
    padding: N
    accepted_fate: N
    rejected: N
    grammar_invalid_verified: N
    grammar_invalid_unverified: N
    av_skipped: N
    truncated: N
    discarded_steps: N
    discarded_drafted: N
    discarded_verified: N

    def fates(self) -> Fates[N]:
        return Fates(
            accepted=self.accepted_fate,
            rejected=self.rejected,
            grammar_invalid_verified=self.grammar_invalid_verified,
            grammar_invalid_unverified=self.grammar_invalid_unverified,
            av_skipped=self.av_skipped,
            truncated=self.truncated,
        )


@dataclass(frozen=True)
class LegacyTotals(Generic[N]):
    """The vllm-legacy scalar counters: SpecDecodingStats' num_drafts / draft / accepted tokens."""

    num_drafts: N
    num_draft_tokens: N
    num_accepted_tokens: N


@dataclass(frozen=True)
class PositionCounts(Generic[N]):
    """Counters at one draft position i (0-based): blocks whose prefix reached position i."""

    drafted: N
    verified: N
    accepted: N
    legacy_accepted: N


def rfc_zero(ar: Arith[N, B]) -> RfcTotals[N]:
    zero = ar.lit(0)
    return RfcTotals(*(zero for _ in fields(RfcTotals)))


def legacy_zero(ar: Arith[N, B]) -> LegacyTotals[N]:
    zero = ar.lit(0)
    return LegacyTotals(zero, zero, zero)


def position_zero(ar: Arith[N, B]) -> PositionCounts[N]:
    zero = ar.lit(0)
    return PositionCounts(zero, zero, zero, zero)


def rfc_add_step(t: RfcTotals[N], c: RfcStepCounts[N], ar: Arith[N, B]) -> RfcTotals[N]:
    """Fold one block's rfc counts into the totals."""
    return rfc_merge(
        t,
        RfcTotals(
            drafted=c.drafted,
            verified=c.verified,
            accepted=c.accepted,
            spec_steps=c.spec_steps,
            padding=c.padding,
            accepted_fate=c.fates.accepted,
            rejected=c.fates.rejected,
            grammar_invalid_verified=c.fates.grammar_invalid_verified,
            grammar_invalid_unverified=c.fates.grammar_invalid_unverified,
            av_skipped=c.fates.av_skipped,
            truncated=c.fates.truncated,
            discarded_steps=c.discarded_steps,
            discarded_drafted=c.discarded_drafted,
            discarded_verified=c.discarded_verified,
        ),
        ar,
    )


def rfc_merge(a: RfcTotals[N], b: RfcTotals[N], ar: Arith[N, B]) -> RfcTotals[N]:
    """Combine two counter states (engines, shards): field-wise sum."""
    return RfcTotals(*(ar.add(getattr(a, f.name), getattr(b, f.name)) for f in fields(RfcTotals)))


def legacy_add_step(t: LegacyTotals[N], c: LegacyStepCounts[N], ar: Arith[N, B]) -> LegacyTotals[N]:
    return legacy_merge(
        t, LegacyTotals(c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens), ar
    )


def legacy_merge(a: LegacyTotals[N], b: LegacyTotals[N], ar: Arith[N, B]) -> LegacyTotals[N]:
    return LegacyTotals(
        ar.add(a.num_drafts, b.num_drafts),
        ar.add(a.num_draft_tokens, b.num_draft_tokens),
        ar.add(a.num_accepted_tokens, b.num_accepted_tokens),
    )


def position_add_step(
    pc: PositionCounts[N],
    position: N,
    c: RfcStepCounts[N],
    legacy: LegacyStepCounts[N],
    ar: Arith[N, B],
) -> PositionCounts[N]:
    """Fold one block into the counters at ``position``, from the block's step counts
    (``rfc_step`` and ``legacy_step``, evaluated once per block, not once per position)."""
    return position_merge(
        pc,
        PositionCounts(
            drafted=position_increment(c.drafted, position, ar),
            verified=position_increment(c.verified, position, ar),
            accepted=position_increment(c.accepted, position, ar),
            legacy_accepted=position_increment(legacy.num_accepted_tokens, position, ar),
        ),
        ar,
    )


def position_merge(
    a: PositionCounts[N], b: PositionCounts[N], ar: Arith[N, B]
) -> PositionCounts[N]:
    return PositionCounts(
        ar.add(a.drafted, b.drafted),
        ar.add(a.verified, b.verified),
        ar.add(a.accepted, b.accepted),
        ar.add(a.legacy_accepted, b.legacy_accepted),
    )


@dataclass(frozen=True)
class Counters:
    """A complete integer counter state: rfc and legacy totals plus per-position vectors (length k).

    Immutable: every fold returns a new state, so an illegal event can never leave a
    half-updated state behind.
    """

    k: int
    rfc: RfcTotals[int]
    legacy: LegacyTotals[int]
    positions: tuple[PositionCounts[int], ...]

    def __post_init__(self) -> None:
        # Every invariant reads positions[0] and k * spec_steps: a malformed state would fail
        # far from where it was built.
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be an int >= 1, got {self.k!r}")
        if len(self.positions) != self.k:
            raise ValueError(f"{len(self.positions)} per-position counters for k={self.k}")

    @classmethod
    def zero(cls, k: int) -> Counters:
        """The all-zero state."""
        return cls(
            k=k,
            rfc=rfc_zero(INT_ARITH),
            legacy=legacy_zero(INT_ARITH),
            positions=tuple(position_zero(INT_ARITH) for _ in range(k)),
        )

    def add_step(
        self, mode: Mode, x: StepInputs[int, bool], profile: CountingProfile = VLLM_LEGACY
    ) -> Counters:
        """Fold one block: its step counts under ``profile``, then `add_counts`."""
        return self.add_counts(
            rfc_step(mode, x, INT_ARITH, profile), legacy_step(mode, x, INT_ARITH, profile)
        )

    def add_counts(self, c: RfcStepCounts[int], legacy: LegacyStepCounts[int]) -> Counters:
        """Fold one block's step counts (``rfc_step``, ``legacy_step``) into every counter."""
        ar = INT_ARITH
        return Counters(
            k=self.k,
            rfc=rfc_add_step(self.rfc, c, ar),
            legacy=legacy_add_step(self.legacy, legacy, ar),
            positions=tuple(
                position_add_step(pc, i, c, legacy, ar) for i, pc in enumerate(self.positions)
            ),
        )

    def merge(self, other: Counters) -> Counters:
        if other.k != self.k:
            raise ValueError(f"cannot merge counters of k={self.k} and k={other.k}")
        ar = INT_ARITH
        return Counters(
            k=self.k,
            rfc=rfc_merge(self.rfc, other.rfc, ar),
            legacy=legacy_merge(self.legacy, other.legacy, ar),
            positions=tuple(
                position_merge(a, b, ar)
                for a, b in zip(self.positions, other.positions, strict=True)
            ),
        )

    def per_position(self, name: str) -> tuple[int, ...]:
        """One per-position vector by name: drafted, verified, accepted or legacy_accepted."""
        return tuple(getattr(pc, name) for pc in self.positions)

    def fates_dict(self) -> dict[str, int]:
        return self.rfc.fates().as_dict()

    def to_dict(self) -> dict[str, dict[str, object]]:
        """JSON-ready view (names as in SPEC.md section 4): `counts_dict` plus per position."""
        d = counts_dict(self.rfc, self.rfc.fates(), self.legacy)
        d["rfc"]["per_position"] = {
            "drafted": list(self.per_position("drafted")),
            "verified": list(self.per_position("verified")),
            "accepted": list(self.per_position("accepted")),
        }
        d["vllm-legacy"]["per_position"] = {"accepted": list(self.per_position("legacy_accepted"))}
        return d


def counts_dict(
    r: RfcTotals[int] | RfcStepCounts[int],
    fates: Fates[int],
    lg: LegacyTotals[int] | LegacyStepCounts[int],
) -> dict[str, dict[str, object]]:
    """Both profiles' scalar counters, of a state or of one block, JSON-ready under their
    SPEC.md section 4 names (what ``spectally step --json`` prints, and `Counters.to_dict`)."""
    return {
        "rfc": {
            "drafted": r.drafted,
            "verified": r.verified,
            "accepted": r.accepted,
            "spec_steps": r.spec_steps,
            "padding": r.padding,
            "fates": fates.as_dict(),
            "discarded": {
                "steps": r.discarded_steps,
                "drafted": r.discarded_drafted,
                "verified": r.discarded_verified,
            },
        },
        "vllm-legacy": {
            "drafted": lg.num_draft_tokens,
            "accepted": lg.num_accepted_tokens,
            "spec_steps": lg.num_drafts,
        },
    }
