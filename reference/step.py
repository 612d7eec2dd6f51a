"""The step rules: what one (request, engine step) draft block adds to every counter.

This module is the single text of the counting rules. It is written over an `Arith`, so the
engine state machine evaluates it over ``int`` and the proofs evaluate the very same functions
over Z3 terms (see ``arith.py``). SPEC.md section 3 is its prose.

A draft block is N proposed draft tokens followed by P padding slots (placeholders that stand
for no proposal). Each stage keeps a prefix of what reaches it:

    sync : propose -> grammar -> schedule -> AV -> target forward (verified) -> accept
    async: propose -> schedule -> AV -> target forward (verified) -> grammar -> accept

A draft token's *fate* is the first stage that cuts it. Stage inputs are caps: the grammar keeps
at most G (the longest grammar-valid prefix of the proposal), the schedule at most S slots, AV at
most V of the scheduled drafts, and the target accepts A of the drafts still eligible.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Generic

from .arith import INT_ARITH, Arith, B, N
from .errors import InadmissibleStep
from .profile import VLLM_LEGACY, CountingProfile, EngineCounts, GrammarKeep


class Mode(str, enum.Enum):
    """Scheduling mode: where the grammar stage sits in the pipeline."""

    SYNC = "sync"
    ASYNC = "async"


def _is_sync(mode: Mode) -> bool:
    """True for sync. ``Mode(mode)`` also accepts the plain strings "sync"/"async" (a Mode *is* a
    str) and rejects anything else, so a bare "sync" can never silently select async."""
    return Mode(mode) is Mode.SYNC


@dataclass(frozen=True)
class StepInputs(Generic[N, B]):
    """Everything the counters of one draft block depend on (see SPEC.md, "Stage inputs").

    Caps that are "off" are normalised by `StepQuery.inputs`: no structured output means
    ``grammar_valid == proposed``; no schedule cut or AV means a cap of ``proposed + padding``.
    """

    proposed: N  # N: real draft tokens the drafter proposed
    padding: N  # P: placeholder slots after them that stand for no proposal
    structured: B  # the request has a structured-output grammar
    grammar_valid: N  # G: longest grammar-valid prefix of the proposal (== N when unstructured)
    schedule_cap: N  # S: slots the schedule allows (token budget, max_model_len)
    av_cap: N  # V: scheduled drafts adaptive verification sends to the target
    accepted: N  # A: drafts the target accepted (bonus token excluded)
    applied: B  # the block's result was applied to the request
    legacy_reported: B  # vLLM <= 0.32 would count it (applied, or stale output it did not drop)


@dataclass(frozen=True)
class Fates(Generic[N]):
    """How many of the block's proposed drafts each stage cut. They partition ``proposed``."""

    accepted: N
    rejected: N  # verified and refused by the target
    grammar_invalid_verified: N  # async only: in the forward pass, then refused by the grammar
    grammar_invalid_unverified: N  # sync only: cut by the grammar before scheduling
    av_skipped: N  # scheduled but not sent to the target by adaptive verification
    truncated: N  # cut by the schedule (token budget, max_model_len)

    def as_dict(self) -> dict[str, N]:
        return {
            "accepted": self.accepted,
            "rejected": self.rejected,
            "grammar_invalid_verified": self.grammar_invalid_verified,
            "grammar_invalid_unverified": self.grammar_invalid_unverified,
            "av_skipped": self.av_skipped,
            "truncated": self.truncated,
        }


FATE_NAMES: tuple[str, ...] = (
    "accepted",
    "rejected",
    "grammar_invalid_verified",
    "grammar_invalid_unverified",
    "av_skipped",
    "truncated",
)


@dataclass(frozen=True)
class Pipeline(Generic[N]):
    """The prefix lengths the block keeps after each stage (drafts only, padding excluded)."""

    after_grammar_sync: N  # sync: drafts left by the grammar (== proposed in async)
    scheduled_drafts: N  # drafts the schedule kept
    verified: N  # drafts in the target forward pass
    eligible: N  # drafts the target may accept (grammar-valid and verified)
    scheduled_slots: N  # slots the schedule kept, padding included (what vLLM 0.32 sees)


def grammar_keeps(keep: GrammarKeep, x: StepInputs[N, B], ar: Arith[N, B]) -> N:
    """Drafts a grammar stage keeps of a structured proposal, per the profile's answer."""
    valid = ar.min(x.grammar_valid, x.proposed)
    if keep is GrammarKeep.VALID_PREFIX:
        return valid
    if keep is GrammarKeep.PREFIX_AND_FIRST_INVALID:
        # vLLM 0.34 trim_spec_tokens: spec_tokens[: len_validated + 1]
        return ar.min(ar.add(valid, ar.lit(1)), x.proposed)
    return x.proposed


def pipeline(
    mode: Mode, x: StepInputs[N, B], ar: Arith[N, B], profile: CountingProfile = VLLM_LEGACY
) -> Pipeline[N]:
    """Run the stage caps over the block, in ``mode``'s order, as ``profile``'s release does."""
    # [CAP-1] each stage caps a prefix; a stage that is off keeps everything
    real_after_grammar = ar.ite(x.structured, ar.min(x.grammar_valid, x.proposed), x.proposed)
    if _is_sync(mode):
        # [PIPE-1] sync: grammar, schedule, AV, then the target's verdict
        kept_by_grammar = ar.ite(
            x.structured, grammar_keeps(profile.sync_grammar_keeps, x, ar), x.proposed
        )
        # vLLM strips a -1 placeholder and all after it for structured requests.
        slots_offered = ar.ite(x.structured, kept_by_grammar, ar.add(x.proposed, x.padding))
    else:
        # [PIPE-2] async: schedule, AV, the target's verdict, then the grammar check
        kept_by_grammar = x.proposed
        slots_offered = ar.add(x.proposed, x.padding)
    scheduled_drafts = ar.min(kept_by_grammar, x.schedule_cap)
    verified = ar.min(scheduled_drafts, x.av_cap)
    return Pipeline(
        after_grammar_sync=kept_by_grammar,
        scheduled_drafts=scheduled_drafts,
        verified=verified,
        eligible=ar.min(verified, real_after_grammar),
        scheduled_slots=ar.min(slots_offered, x.schedule_cap),
    )


def fates(
    mode: Mode, x: StepInputs[N, B], ar: Arith[N, B], profile: CountingProfile = VLLM_LEGACY
) -> Fates[N]:
    """Each proposed draft's fate: the first stage that cut it. A grammar-invalid draft in the
    forward pass is ``grammar_invalid_verified`` in either mode (async; sync when the profile's
    grammar keeps the first invalid draft)."""
    # [F1] every proposed draft gets one fate: the first stage that cut it
    p = pipeline(mode, x, ar, profile)
    return Fates(
        accepted=x.accepted,
        rejected=ar.sub(p.eligible, x.accepted),
        grammar_invalid_verified=ar.sub(p.verified, p.eligible),
        grammar_invalid_unverified=ar.sub(x.proposed, p.after_grammar_sync),
        av_skipped=ar.sub(p.scheduled_drafts, p.verified),
        truncated=ar.sub(p.after_grammar_sync, p.scheduled_drafts),
    )


@dataclass(frozen=True)
class RfcStepCounts(Generic[N]):
    """What one block adds to the rfc counters. Per-position vectors are prefix indicators:
    position i gains 1 when i < the matching ``*_len`` (see `position_increment`)."""

    drafted: N
    verified: N
    accepted: N
    spec_steps: N
    padding: N
    fates: Fates[N]
    discarded_steps: N
    discarded_drafted: N
    discarded_verified: N


@dataclass(frozen=True)
class LegacyStepCounts(Generic[N]):
    """What one block adds to vLLM <= 0.32's SpecDecodingStats (observe_draft)."""

    num_drafts: N
    num_draft_tokens: N
    num_accepted_tokens: N


def _scale(ar: Arith[N, B], cond: B, value: N) -> N:
    return ar.ite(cond, value, ar.lit(0))


def rfc_step(
    mode: Mode, x: StepInputs[N, B], ar: Arith[N, B], profile: CountingProfile = VLLM_LEGACY
) -> RfcStepCounts[N]:
    """The rfc profile: a block counts only when its result is applied (SPEC.md R1-R6)."""
    p = pipeline(mode, x, ar, profile)
    f = fates(mode, x, ar, profile)
    applied = x.applied
    discarded = ar.negate(x.applied)
    has_drafts = ar.lt(ar.lit(0), x.proposed)
    return RfcStepCounts(
        # [R1] an applied block adds every proposed draft
        drafted=_scale(ar, applied, x.proposed),
        # [R3] the drafts that entered the target forward pass
        verified=_scale(ar, applied, p.verified),
        # [R4] the accepted drafts; the bonus token is not one
        accepted=_scale(ar, applied, x.accepted),
        # [R5] one spec step per applied block with a draft
        spec_steps=_scale(ar, ar.both(applied, has_drafts), ar.lit(1)),
        # [R2] padding is counted apart: never drafted, verified or accepted
        padding=_scale(ar, applied, x.padding),
        fates=Fates(
            accepted=_scale(ar, applied, f.accepted),
            rejected=_scale(ar, applied, f.rejected),
            grammar_invalid_verified=_scale(ar, applied, f.grammar_invalid_verified),
            grammar_invalid_unverified=_scale(ar, applied, f.grammar_invalid_unverified),
            av_skipped=_scale(ar, applied, f.av_skipped),
            truncated=_scale(ar, applied, f.truncated),
        ),
        # [R6] a discarded block adds to the discarded counters only
        discarded_steps=_scale(ar, ar.both(discarded, has_drafts), ar.lit(1)),
        discarded_drafted=_scale(ar, discarded, x.proposed),
        discarded_verified=_scale(ar, discarded, p.verified),
    )


def legacy_scheduled_invalid(
    mode: Mode, x: StepInputs[N, B], ar: Arith[N, B], profile: CountingProfile = VLLM_LEGACY
) -> N:
    """The engine's ``num_invalid_spec_tokens``: in async, the scheduled slots of a structured
    block past what ``profile.async_counted_keeps`` keeps (vLLM 0.32: the valid prefix; 0.34:
    everything, so none). Sync never subtracts: the grammar cut comes before scheduling."""
    # [L2] num_invalid_spec_tokens: async + structured, scheduled slots past what the grammar keeps
    if _is_sync(mode):
        return ar.lit(0)
    p = pipeline(mode, x, ar, profile)
    counted = p.scheduled_slots  # EVERYTHING: padding slots count too (0.34 subtracts none)
    if profile.async_counted_keeps is not GrammarKeep.EVERYTHING:
        counted = ar.min(p.scheduled_drafts, grammar_keeps(profile.async_counted_keeps, x, ar))
    return ar.ite(x.structured, ar.sub(p.scheduled_slots, counted), ar.lit(0))


def legacy_step(
    mode: Mode, x: StepInputs[N, B], ar: Arith[N, B], profile: CountingProfile = VLLM_LEGACY
) -> LegacyStepCounts[N]:
    """The engine's own counters (vLLM: scheduler.py make_spec_decoding_stats), as ``profile``
    declares them.

    A step counts when scheduled slots > 0 and the engine processed its output (stale output it
    delivered included, when the profile counts it); drafted is the scheduled slots minus
    `legacy_scheduled_invalid`, minus the unscheduled padding when padding is not counted and
    the drafts AV kept from the target when AV is visible.
    """
    if profile.engine_counts is EngineCounts.RFC:
        # an engine with the counting fix reports the rfc counters as its own
        c = rfc_step(mode, x, ar, profile)
        return LegacyStepCounts(c.spec_steps, c.drafted, c.accepted)
    p = pipeline(mode, x, ar, profile)
    # [L1] one observe_draft per (request, step) whose output the engine processed
    # [L4] a step only with a scheduled slot
    # [L5] discarded work is never reported
    reported = x.legacy_reported if profile.stale_output_counted else x.applied
    counted = ar.both(reported, ar.lt(ar.lit(0), p.scheduled_slots))
    # [L2] drafted = scheduled slots - num_invalid_spec_tokens, as the profile declares
    drafted = ar.sub(p.scheduled_slots, legacy_scheduled_invalid(mode, x, ar, profile))
    if not profile.padding_counted:
        drafted = ar.min(drafted, p.scheduled_drafts)
    if profile.av_counted:
        drafted = ar.sub(drafted, ar.sub(p.scheduled_drafts, p.verified))
    return LegacyStepCounts(
        num_drafts=_scale(ar, counted, ar.lit(1)),
        num_draft_tokens=_scale(ar, counted, drafted),
        # [L3] max(len(sampled) - 1, 0): the accepted drafts, bonus token excluded
        num_accepted_tokens=_scale(ar, counted, x.accepted),
    )


SHIFT_TERMS = (
    "grammar_invalid",  # grammar-invalid drafts: excluded by legacy, drafted under rfc
    "truncated",  # drafts cut by the schedule: not counted by legacy, drafted under rfc
    "padding",  # placeholder slots legacy counts as drafted; rfc does not
    "stale_drafted",  # stale outputs legacy counts; rfc discards them
    "stale_accepted",
    "stale_steps",
    "steps_without_slots",  # applied, drafts proposed, none scheduled: rfc step only
    "padding_only_steps",  # only placeholders scheduled: legacy step only
)


def shift_terms(
    mode: Mode,
    x: StepInputs[N, B],
    lg: LegacyStepCounts[N],
    ar: Arith[N, B],
    profile: CountingProfile = VLLM_LEGACY,
) -> tuple[N, ...]:
    """What one block adds to each shift term (`SHIFT_TERMS`): why the legacy counters
    (`legacy_step`, ``lg``) differ from the rfc ones for this block, over any arithmetic: ints
    for the reference replay, whole arrays for the columnar one, Z3 terms for the proofs.
    ``profile``: the release's counting facts (in vLLM 0.34 async drafted keeps
    grammar-invalid slots)."""
    zero, one = ar.lit(0), ar.lit(1)
    if profile.engine_counts is EngineCounts.RFC:  # an engine with the fix: nothing shifts
        return tuple(zero for _ in SHIFT_TERMS)
    p = pipeline(mode, x, ar, profile)
    subtracts = profile.async_counted_keeps is not GrammarKeep.EVERYTHING
    d = p.scheduled_drafts
    if Mode(mode) is Mode.SYNC:
        grammar = ar.sub(x.proposed, p.after_grammar_sync)
        truncated = ar.sub(p.after_grammar_sync, d)
        padding = ar.sub(p.scheduled_slots, d)
    else:
        kept = grammar_keeps(profile.async_counted_keeps, x, ar)
        grammar = ar.ite(x.structured, ar.sub(d, ar.min(d, kept)), zero)
        truncated = ar.sub(x.proposed, d)
        # async + structured: vLLM <= 0.33 counts padding as invalid, so legacy never drafted it
        padding = ar.sub(p.scheduled_slots, d)
        if subtracts:
            padding = ar.ite(x.structured, zero, padding)
    applied = x.applied
    stale = ar.both(ar.negate(applied), x.legacy_reported)
    no_slots = ar.both(ar.lt(zero, x.proposed), ar.eq(p.scheduled_slots, zero))
    pad_only = ar.both(ar.eq(x.proposed, zero), ar.lt(zero, p.scheduled_slots))
    return (
        ar.ite(applied, grammar, zero),
        ar.ite(applied, truncated, zero),
        ar.ite(applied, padding, zero),
        ar.ite(stale, lg.num_draft_tokens, zero),
        ar.ite(stale, lg.num_accepted_tokens, zero),
        ar.ite(stale, lg.num_drafts, zero),
        ar.ite(ar.both(applied, no_slots), one, zero),
        ar.ite(ar.both(applied, pad_only), one, zero),
    )


def legacy_accepted_len(
    mode: Mode, x: StepInputs[N, B], ar: Arith[N, B], profile: CountingProfile = VLLM_LEGACY
) -> N:
    """Positions vLLM 0.32 credits in ``num_accepted_tokens_per_pos`` for this block."""
    # [L6] only accepted_per_pos is exported, a prefix of the accepted drafts
    return legacy_step(mode, x, ar, profile).num_accepted_tokens


def rfc_position_lengths(
    mode: Mode, x: StepInputs[N, B], ar: Arith[N, B], profile: CountingProfile = VLLM_LEGACY
) -> tuple[N, N, N]:
    """(drafted, verified, accepted) prefix lengths this block adds to the per-position vectors."""
    c = rfc_step(mode, x, ar, profile)
    return c.drafted, c.verified, c.accepted


def position_increment(length: N, position: N, ar: Arith[N, B]) -> N:
    """A block of ``length`` tokens adds 1 at every position ``< length``: prefix counting."""
    # [R8] a block of n tokens adds 1 at positions 0 .. n-1
    return ar.ite(ar.lt(position, length), ar.lit(1), ar.lit(0))


def admissibility(
    mode: Mode,
    x: StepInputs[N, B],
    ar: Arith[N, B],
    k: N | None = None,
    profile: CountingProfile = VLLM_LEGACY,
) -> list[tuple[str, B]]:
    """The named conditions a block must meet to be producible by an engine (SPEC.md A1-A8).

    Each entry is (reason shown when it fails, condition). The CLI reports the failing reasons;
    the proofs assume the conjunction.
    """
    zero = ar.lit(0)
    p = pipeline(mode, x, ar, profile)
    conditions: list[tuple[str, B]] = [
        # [A1] N >= 0 and P >= 0
        ("proposed must be >= 0", ar.le(zero, x.proposed)),
        ("padding must be >= 0", ar.le(zero, x.padding)),
        # [A2] 0 <= G <= N
        ("grammar-valid prefix must be >= 0", ar.le(zero, x.grammar_valid)),
        (
            "grammar-valid prefix cannot exceed the proposal (G <= N)",
            ar.le(x.grammar_valid, x.proposed),
        ),
        # [A3] without structured output, G = N
        (
            "without structured output every draft is grammar-valid (G == N)",
            ar.either(x.structured, ar.eq(x.grammar_valid, x.proposed)),
        ),
        # [A4] S >= 0
        ("schedule cap must be >= 0", ar.le(zero, x.schedule_cap)),
        # [A5] V >= 0
        ("AV cap must be >= 0", ar.le(zero, x.av_cap)),
        # [A6] 0 <= A <= eligible
        ("accepted must be >= 0", ar.le(zero, x.accepted)),
        (
            "accepted cannot exceed the drafts eligible for acceptance",
            ar.le(x.accepted, p.eligible),
        ),
        # [A7] an applied block went through output processing, where the engine counts
        (
            "an applied block is always reported by vLLM <= 0.32",
            ar.either(ar.negate(x.applied), x.legacy_reported),
        ),
    ]
    # [A8] N + P <= k
    if k is not None:
        conditions.append(
            (
                "the block (proposed + padding) cannot exceed k",
                ar.le(ar.add(x.proposed, x.padding), k),
            )
        )
    return conditions


def admissible(
    mode: Mode,
    x: StepInputs[N, B],
    ar: Arith[N, B],
    k: N | None = None,
    profile: CountingProfile = VLLM_LEGACY,
) -> B:
    """Conjunction of `admissibility`."""
    result = ar.truth(True)
    for _, cond in admissibility(mode, x, ar, k, profile):
        result = ar.both(result, cond)
    return result


def fate_counts(
    mode: Mode, x: StepInputs[int, bool], profile: CountingProfile = VLLM_LEGACY
) -> dict[str, int]:
    """`fates` over ints, by name (the contract of `token_fates`)."""
    return fates(mode, x, INT_ARITH, profile).as_dict()


def token_fates(
    mode: Mode, x: StepInputs[int, bool], profile: CountingProfile = VLLM_LEGACY
) -> list[str]:
    """The fate of each proposed draft, position by position (integers only).

    Contracts (checked by CrossHair, tests/proofs/test_crosshair.py):
    pre: admissible(mode, x, INT_ARITH, None, profile)
    post: len(__return__) == x.proposed
    post: all(__return__.count(n) == v for n, v in fate_counts(mode, x, profile).items())
    """
    p = pipeline(mode, x, INT_ARITH, profile)
    cuts = [
        (p.after_grammar_sync, "grammar_invalid_unverified"),
        (p.scheduled_drafts, "truncated"),
        (p.verified, "av_skipped"),
        (p.eligible, "grammar_invalid_verified"),
        (x.accepted, "rejected"),
    ]
    out: list[str] = []
    for i in range(x.proposed):
        fate = "accepted"
        for kept, name in cuts:  # the first stage whose kept prefix ends before i cuts it
            if i >= kept:
                fate = name
                break
        out.append(fate)
    return out


@dataclass(frozen=True)
class StepQuery:
    """One request-step as a user states it (the ``spectally step`` flags); None = stage off."""

    mode: Mode
    proposed: int
    accepted: int
    grammar_valid: int | None = None
    scheduled: int | None = None
    av_verify: int | None = None
    padding: int = 0
    applied: bool = True
    legacy_reported: bool | None = None  # default: same as applied

    def type_errors(self) -> list[str]:
        """Fields of the wrong type; a bool is not a count. Empty when every field is well typed."""
        errors: list[str] = []
        if not isinstance(self.mode, Mode):
            errors.append(f"mode must be a Mode, got {self.mode!r}")
        for name in ("proposed", "accepted", "padding", "grammar_valid", "scheduled", "av_verify"):
            value = getattr(self, name)
            optional = name not in ("proposed", "accepted", "padding")
            if not (_is_int(value) or (optional and value is None)):
                kind = "an int or None" if optional else "an int"
                errors.append(f"{name} must be {kind}, got {value!r}")
        if not isinstance(self.applied, bool):
            errors.append(f"applied must be a bool, got {self.applied!r}")
        if not (self.legacy_reported is None or isinstance(self.legacy_reported, bool)):
            errors.append(f"legacy_reported must be a bool or None, got {self.legacy_reported!r}")
        return errors

    def inputs(self) -> StepInputs[int, bool]:
        """The stage inputs, every "off" cap normalised. Raises TypeError on a mistyped field."""
        errors = self.type_errors()
        if errors:
            raise TypeError("; ".join(errors))
        uncut = self.proposed + self.padding
        return StepInputs(
            proposed=self.proposed,
            padding=self.padding,
            structured=self.grammar_valid is not None,
            grammar_valid=self.proposed if self.grammar_valid is None else self.grammar_valid,
            schedule_cap=uncut if self.scheduled is None else self.scheduled,
            av_cap=uncut if self.av_verify is None else self.av_verify,
            accepted=self.accepted,
            applied=self.applied,
            legacy_reported=(
                self.applied if self.legacy_reported is None else self.legacy_reported
            ),
        )

    def violations(self, k: int | None = None) -> list[str]:
        """Reasons no engine could produce this block; empty when admissible.

        Mistyped fields (e.g. a bool or float count) are reported instead of the admissibility
        conditions, which are only meaningful over ints.

        Contracts (checked by CrossHair, tests/proofs/test_crosshair.py):
        post: all(isinstance(reason, str) for reason in __return__)
        post: __return__ or 0 <= self.accepted <= self.proposed
        """
        errors = self.type_errors()
        if k is not None and not _is_int(k):
            errors.append(f"k must be an int or None, got {k!r}")
        if errors:
            return errors
        return [
            reason for reason, ok in admissibility(self.mode, self.inputs(), INT_ARITH, k) if not ok
        ]

    def checked_inputs(self, k: int | None = None) -> StepInputs[int, bool]:
        """`inputs`, or `InadmissibleStep` listing every reason no engine could produce them."""
        reasons = self.violations(k)
        if reasons:
            raise InadmissibleStep(reasons)
        return self.inputs()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
