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
  `transitions.discard_deadline` (SPEC.md ATTR-2, DEC-19): the claimed outcome does not choose
  it.
* ``delivered`` (optional): the tokens the engine appended from the block's result, checked
  against the outcome by `delivered_mismatch` (STEP_LOG.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from spectally.reference.arith import INT_ARITH
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
from spectally.reference.profile import VLLM_LEGACY, CountingProfile, GrammarKeep
from spectally.reference.step import Mode, StepInputs, grammar_keeps

# Re-exported: these names were first defined here, and code outside imports them from here.
from .delivered import DeliveredMismatch as DeliveredMismatch
from .delivered import delivered_consistent as delivered_consistent
from .delivered import delivered_mismatch as delivered_mismatch
from .delivered import vllm_accepted as vllm_accepted
from .header import LEGACY_PROFILE as LEGACY_PROFILE
from .header import Header as Header
from .header import counting_profile as counting_profile
from .header import parse_version as parse_version
from .header import profile_for as profile_for
from .schema import DISCARDED_OUTCOMES as DISCARDED_OUTCOMES
from .schema import HELD_ACCEPT_OUTCOMES as HELD_ACCEPT_OUTCOMES
from .schema import LIFECYCLE_OUTCOME as LIFECYCLE_OUTCOME
from .schema import RequestRecord, RequestStepRecord


class Untranslatable(SpectallyError):
    """A record no reference event sequence can express (e.g. scheduled above what was offered).

    ``field`` names the record field at fault, for the column of the report.
    """

    def __init__(self, reason: str, field: str) -> None:
        self.reason = reason
        self.field = field
        super().__init__(reason)


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
