"""Translate step-log records (spec/STEP_LOG.md) into reference events (reference/events.py).

A ``request_step`` record states one (request, scheduled step) draft block as the engine saw
it. Its events follow the mode's pipeline (reference/step.py):

    sync : Propose, Pad, GrammarReject, Truncate, AVSkip, Verify, Accept
    async: Propose, Pad, Truncate, AVSkip, Verify, GrammarReject, Accept

* ``Propose(proposed)`` always opens the block; ``Pad(padding)`` when padding > 0.
* sync: ``GrammarReject(proposed - grammar_valid)`` when grammar_valid is known and smaller;
  ``Truncate(offered - scheduled)`` where offered is what the profile's grammar keeps for a
  structured request (vLLM <= 0.33 ``validate_tokens``: the valid prefix; 0.34
  ``trim_spec_tokens``: the valid prefix and the first invalid draft; placeholders stripped) and
  proposed + padding otherwise. Under a profile that keeps the first invalid draft, a grammar-cut
  block scheduled below what the grammar kept is refused: the log cannot tell a schedule cut
  there from the older grammar cut, and a log of the older cut must not pass as the newer one.
* The profile (reference/profile.py) decides what each count means; `profile_for` picks it
  from the header's engine and version (`RELEASES`).
* async: ``Truncate(proposed + padding - scheduled)``; after ``Verify`` the grammar rejects the
  scheduled drafts past the grammar-valid prefix (``grammar_valid``, or ``scheduled - invalid``
  when only ``invalid`` is known and the profile's ``invalid`` is the grammar's count).
* ``AVSkip(scheduled drafts - verified)`` when the record knows ``verified`` and it is smaller.
* ``Verify`` names the drafts in the forward pass. A block that never reached the forward pass
  (a discarded proposal with ``scheduled == 0`` and ``sampled == 0``) gets no ``Verify``.
* ``Accept(accepted)`` only for ``outcome == "applied"`` and, after the ``Preempt`` that made it
  stale, for ``discarded_stale``. Other discarded blocks are closed by the lifecycle event. A
  stale block whose output vLLM delivered is an ordinary ``applied`` record (SPEC.md E6,
  DEC-7); ``discarded_stale`` means vLLM dropped it, and the reference agrees only when the
  ``Preempt`` drops stale output. The event that discards a block names a step no later than
  `discard_deadline` (SPEC.md ATTR-2, DEC-19): the claimed outcome does not choose it.
* ``delivered`` (optional): the tokens the engine appended from the block's result, checked
  against the outcome by `delivered_mismatch` (STEP_LOG.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spectally.reference.arith import INT_ARITH, Arith, B, N
from spectally.reference.errors import SpectallyError
from spectally.reference.events import (
    Abort,
    Accept,
    AddRequest,
    AVSkip,
    Event,
    Finish,
    GrammarReject,
    Pad,
    Preempt,
    Propose,
    Truncate,
    Verify,
)
from spectally.reference.machine import Outcome
from spectally.reference.profile import (
    FIXED,
    OLDEST_COUNTS_AS,
    PROFILES,
    RELEASES,
    VLLM_LEGACY,
    CountingProfile,
    GrammarKeep,
)
from spectally.reference.step import Mode, StepInputs, grammar_keeps

from .schema import Record, RequestRecord, RequestStepRecord

LEGACY_PROFILE = VLLM_LEGACY.name

# The outcome a lifecycle event gives to the blocks it discards (machine.Outcome values).
LIFECYCLE_OUTCOME = {
    "finish": Outcome.DISCARDED_FINISHED.value,
    "abort": Outcome.DISCARDED_ABORTED.value,
    "preempt": Outcome.DISCARDED_PREEMPTED.value,
}
HELD_ACCEPT_OUTCOMES = frozenset((Outcome.DISCARDED_STALE.value,))
DISCARDED_OUTCOMES = frozenset(o.value for o in Outcome if o is not Outcome.APPLIED)


class Untranslatable(SpectallyError):
    """A record no reference event sequence can express (e.g. scheduled above what was offered).

    ``field`` names the record field at fault, for the column of the report.
    """

    def __init__(self, reason: str, field: str) -> None:
        self.reason = reason
        self.field = field
        super().__init__(reason)


def parse_version(version: str) -> tuple[int, ...]:
    """Leading numeric components of a version string: "0.32.0rc1+cpu" -> (0, 32, 0)."""
    parts: list[int] = []
    for piece in version.split("."):
        m = re.match(r"\d+", piece)
        if m is None:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):
            break
    return tuple(parts)


def profile_for(engine: str, engine_version: str, counting: str | None = None) -> str | None:
    """The counting profile an engine version reports under (reference/profile.py `RELEASES`:
    a release prefix matches the version's leading numbers); None when none is declared. A
    version older than every release an engine declares counts like its oldest when the engine
    is in `OLDEST_COUNTS_AS` (vLLM's counting is unchanged back to the V1 engine's spec-decode
    stats; llama.cpp's older servers counted differently, so they get no profile). With
    ``counting`` "rfc" (the header of an engine with the counting fix), the profile of that
    release with the fix (`FIXED`), None when the release has none."""
    if counting == "rfc":
        base = profile_for(engine, engine_version)
        return FIXED.get(base) if base is not None else None
    version = parse_version(engine_version)
    if not version:
        return None
    declared = [(parse_version(p), name) for e, p, name in RELEASES if e == engine]
    for prefix, name in declared:
        if version[: len(prefix)] == prefix:
            return name
    if declared and engine in OLDEST_COUNTS_AS and version < min(declared)[0]:
        return min(declared)[1]
    return None


def counting_profile(name: str | None) -> CountingProfile:
    """The declaration of a profile name (a header's ``profile``); vllm-legacy when None."""
    return VLLM_LEGACY if name is None else PROFILES[name]


@dataclass(frozen=True)
class Header:
    """What the replay needs from the header record."""

    engine: str
    engine_version: str
    k: int
    mode: Mode
    drop_stale_output: bool
    adaptive_verification: bool
    structured_outputs_backend: str | None
    spec_method: str
    engine_index: int | None
    profile: str | None

    @classmethod
    def from_record(cls, rec: Record) -> Header:
        return cls(
            engine=rec["engine"],
            engine_version=rec["engine_version"],
            k=rec["num_speculative_tokens"],
            mode=Mode(rec["scheduling"]),
            drop_stale_output=rec["drop_stale_output"],
            adaptive_verification=rec["adaptive_verification"],
            structured_outputs_backend=rec["structured_outputs_backend"],
            spec_method=rec["spec_method"],
            engine_index=rec.get("engine_index"),
            profile=profile_for(rec["engine"], rec["engine_version"], rec.get("counting")),
        )


@dataclass(frozen=True)
class BlockPlan:
    """The events of one request_step record.

    ``events`` run when the record is read; ``accept`` (if any) right after them, or, for a
    ``discarded_stale`` block, after the request's ``Preempt``.
    """

    events: tuple[Event, ...]
    accept: Accept | None
    scheduled_drafts: int
    verified: int
    in_forward_pass: bool


def discard_deadline(mode: Mode, step: int) -> int:
    """The last step a lifecycle event that discards the block of ``step`` may name (SPEC.md
    ATTR-2): the step whose output processing finds the block discarded. Sync processes block
    s's output in step s; async in step s + 1 (an abort handled after step s + 1 was
    scheduled, a preemption in that step's schedule)."""
    # [ATTR-2] the event that discards a block of step s names step <= s (sync), s + 1 (async)
    return step + 1 if mode is Mode.ASYNC else step


def lifecycle_event(rec: RequestRecord) -> Event:
    """The reference event of a ``request`` record."""
    rid, step, event = rec["request"], rec["step"], rec["event"]
    if event == "add":
        return AddRequest(rid, step, structured=rec["structured"])
    if event == "finish":
        return Finish(rid, step, reason=rec.get("reason", "stop"))
    if event == "abort":
        return Abort(rid, step)
    return Preempt(rid, step, drop_stale_output=rec.get("drop_stale_output"))


def translate_block(
    mode: Mode, structured: bool, rec: RequestStepRecord, profile: CountingProfile = VLLM_LEGACY
) -> BlockPlan:
    """The reference events of a ``request_step`` record (see the module docstring)."""
    rid: str = rec["request"]
    step: int = rec["step"]
    n: int = rec["proposed"]
    pad: int = rec["padding"]
    g: int | None = rec["grammar_valid"]
    s: int = rec["scheduled"]
    invalid: int | None = rec["invalid"]
    v: int | None = rec["verified"]
    outcome: str = rec["outcome"]
    if g is not None and not structured:
        raise Untranslatable(
            "grammar_valid is set but the request was added without structured output",
            "grammar_valid",
        )
    if g is not None and g > n and mode is Mode.SYNC:
        raise Untranslatable(f"grammar_valid {g} exceeds the {n} proposed drafts", "grammar_valid")

    events: list[Event] = [Propose(rid, step, n)]
    if pad:
        events.append(Pad(rid, step, pad))
    if mode is Mode.SYNC:
        valid = n if g is None else g
        if valid < n:
            events.append(GrammarReject(rid, step, n - valid))
        kept = _sync_kept(profile, structured, n, valid)
        offered = kept if structured else n + pad
        cut_first = profile.sync_grammar_keeps is not GrammarKeep.VALID_PREFIX
        reached = s > 0 or rec["sampled"] > 0 or outcome in ("applied", "discarded_stale")
        if cut_first and structured and valid < n and s < kept and reached:
            raise Untranslatable(
                f"scheduled {s} of a block the grammar cut to {valid} valid drafts: profile"
                f" {profile.name} keeps {kept} ({profile.sync_grammar_keeps.value}), so the"
                " grammar cut this block as an older release does",
                "scheduled",
            )
    else:
        kept = n
        offered = n + pad
    if s > offered:
        what = "grammar-valid drafts" if mode is Mode.SYNC and structured else "slots"
        raise Untranslatable(
            f"scheduled {s} exceeds the {offered} {what} offered to the scheduler", "scheduled"
        )
    if s < offered:
        events.append(Truncate(rid, step, offered - s))
    scheduled_drafts = min(kept, s)
    verified = scheduled_drafts
    if v is not None:
        if v > scheduled_drafts:
            raise Untranslatable(
                f"verified {v} exceeds the {scheduled_drafts} scheduled drafts", "verified"
            )
        if v < scheduled_drafts:
            events.append(AVSkip(rid, step, scheduled_drafts - v))
        verified = v
    # The block was in the target forward pass when it had scheduled slots, sampled tokens
    # (a sync structured block whose every draft the grammar cut still runs, with 0 drafts),
    # or was closed by an Accept.
    in_forward = s > 0 or rec["sampled"] > 0 or outcome in ("applied", "discarded_stale")
    if in_forward:
        events.append(Verify(rid, step, verified))
        if mode is Mode.ASYNC and structured:
            async_valid = g
            grammar_count = profile.async_counted_keeps is not GrammarKeep.EVERYTHING
            if async_valid is None and invalid is not None and grammar_count:
                async_valid = max(s - invalid, 0)
            if async_valid is not None and async_valid < scheduled_drafts:
                events.append(GrammarReject(rid, step, scheduled_drafts - async_valid))
    accept = None
    if outcome == "applied" or outcome in HELD_ACCEPT_OUTCOMES:
        accept = Accept(rid, step, rec["accepted"])
    return BlockPlan(tuple(events), accept, scheduled_drafts, verified, in_forward)


def _sync_kept(profile: CountingProfile, structured: bool, n: int, valid: int) -> int:
    """Drafts a sync grammar keeps before scheduling under ``profile`` (`step.grammar_keeps`)."""
    if not structured:
        return n
    x = StepInputs(n, 0, True, valid, n, n, 0, True, True)
    return grammar_keeps(profile.sync_grammar_keeps, x, INT_ARITH)


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
