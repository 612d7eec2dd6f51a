"""What each event does to one block's counts: the machine's event rules, over an `Arith`.

``machine.py`` keeps the bookkeeping (which requests and blocks exist, stage order, step
numbers) and calls these functions for everything an event does to *counts*: the conditions a
count must meet, the stage inputs the block has afterwards, and what a closing block folds into
the counters. Like ``step.py`` they are written over an `Arith`, so the proofs evaluate these
very functions over Z3 terms (``spectally.proofs.events``) for a symbolic block, count and k:
the event rules E5 and E6 are proved, not a copy of them.

A block's counts so far are a `StepInputs` whose caps are normalised (a stage that has not run
keeps everything: ``grammar_valid == proposed``, ``schedule_cap == av_cap == proposed +
padding``), with ``accepted`` 0 until it closes.
"""

from __future__ import annotations

import enum
from dataclasses import replace

from .arith import Arith, B, N
from .profile import VLLM_LEGACY, CountingProfile
from .step import Mode, StepInputs, admissibility, pipeline

Conditions = list[tuple[str, B]]

# The stages whose event names a count and changes the block's stage inputs (rule E5).
PROPOSE = "propose"
PAD = "pad"
GRAMMAR = "grammar"
TRUNCATE = "truncate"
AV = "av"
VERIFY = "verify"
COUNT_STAGES: tuple[str, ...] = (PROPOSE, PAD, GRAMMAR, TRUNCATE, AV, VERIFY)


def fresh_block(structured: B, ar: Arith[N, B]) -> StepInputs[N, B]:
    """A block no stage has run on yet: nothing proposed, nothing cut."""
    zero = ar.lit(0)
    return StepInputs(
        proposed=zero,
        padding=zero,
        structured=structured,
        grammar_valid=zero,
        schedule_cap=zero,
        av_cap=zero,
        accepted=zero,
        applied=ar.truth(True),
        legacy_reported=ar.truth(True),
    )


def stage_rule(
    mode: Mode,
    stage: str,
    x: StepInputs[N, B],
    count: N,
    k: N,
    ar: Arith[N, B],
    profile: CountingProfile = VLLM_LEGACY,
) -> tuple[Conditions[B], StepInputs[N, B], dict[str, N]]:
    """E5: the conditions on ``count`` at ``stage``, the block's stage inputs after it, and the
    quantities the conditions' messages name (``{count}``, ``{base}``, ``{k}``, ``{proposed}``).

    Each stage cuts the tail of what reaches it (``base``), so its cap is base minus the cut:
    sync grammar cuts the proposal, async grammar the scheduled drafts; the schedule cuts slots
    (padding first), AV the scheduled drafts. ``Verify`` changes nothing but must name exactly
    the drafts that reached the target.
    """
    so_far = pipeline(mode, x, ar, profile)
    base = {
        PROPOSE: k,
        PAD: ar.sub(k, x.proposed),
        GRAMMAR: x.proposed if mode is Mode.SYNC else so_far.scheduled_drafts,
        TRUNCATE: so_far.scheduled_slots,
        AV: so_far.scheduled_drafts,
        VERIFY: so_far.verified,
    }[stage]
    # [E5] a count is an int >= 0, at most what reaches its stage
    conditions: Conditions[B] = [("count must be an int >= 0", ar.le(ar.lit(0), count))]
    kept = ar.sub(base, count)
    if stage == PROPOSE:
        conditions.append(("cannot propose {count} drafts with k={k}", ar.le(count, base)))
        slots = ar.add(count, x.padding)
        new = replace(x, proposed=count, grammar_valid=count, schedule_cap=slots, av_cap=slots)
    elif stage == PAD:
        conditions.append(
            ("block of {proposed} drafts + {count} padding exceeds k={k}", ar.le(count, base))
        )
        slots = ar.add(x.proposed, count)
        new = replace(x, padding=count, schedule_cap=slots, av_cap=slots)
    elif stage == GRAMMAR:
        conditions.append(
            ("grammar rejection for a request without structured output", x.structured)
        )
        conditions.append(("grammar rejects {count} of only {base} drafts", ar.le(count, base)))
        new = replace(x, grammar_valid=kept)
    elif stage == TRUNCATE:
        conditions.append(("cannot cut {count} of {base} slots", ar.le(count, base)))
        new = replace(x, schedule_cap=kept)
    elif stage == AV:
        conditions.append(("AV cannot skip {count} of {base} drafts", ar.le(count, base)))
        new = replace(x, av_cap=kept)
    else:  # VERIFY
        conditions.append(
            ("verify names {count} drafts but {base} reached the target", ar.eq(count, base))
        )
        new = x
    return conditions, new, {"count": count, "base": base, "k": k, "proposed": x.proposed}


def is_applied(stale: B, stale_dropped: B, ar: Arith[N, B]) -> B:
    """E6: a block's result reaches the request unless it went stale *and* the engine dropped
    it. vLLM's ``_preempt_request`` marks in-flight output stale but still delivers it;
    ``update_from_output`` skips it only when ``request.drop_stale_output`` is set."""
    # [E6] a stale output reaches the request unless the engine dropped it
    return ar.negate(ar.both(stale, stale_dropped))


def accept_rule(
    mode: Mode,
    x: StepInputs[N, B],
    accepted: N,
    stale: B,
    stale_dropped: B,
    k: N,
    ar: Arith[N, B],
    profile: CountingProfile = VLLM_LEGACY,
) -> tuple[Conditions[B], StepInputs[N, B]]:
    """E6 for ``Accept``: the closed block, applied unless its stale output was dropped. vLLM
    <= 0.32 counts exactly the outputs it processes, so it reports what is applied. The
    conditions are the block's admissibility (A1-A8) with this many accepted."""
    applied = is_applied(stale, stale_dropped, ar)
    closed = replace(x, accepted=accepted, applied=applied, legacy_reported=applied)
    return admissibility(mode, closed, ar, k, profile), closed


def discard_rule(x: StepInputs[N, B], verified: B, ar: Arith[N, B]) -> StepInputs[N, B]:
    """E6 for a block closed without a result (finish, abort, preemption before the forward
    pass): nothing applied, nothing reported, nothing accepted. A block that never reached
    ``Verify`` had no draft in the target forward pass, so its AV cap is 0: without it the caps
    alone would count its drafts in discarded_verified."""
    # [E6] a discarded block: nothing applied, reported or accepted
    return replace(
        x,
        av_cap=ar.ite(verified, x.av_cap, ar.lit(0)),
        accepted=ar.lit(0),
        applied=ar.truth(False),
        legacy_reported=ar.truth(False),
    )


class Outcome(str, enum.Enum):
    """How a block closed (SPEC.md "discarded"): applied, or discarded by what closed it."""

    APPLIED = "applied"
    DISCARDED_FINISHED = "discarded_finished"
    DISCARDED_ABORTED = "discarded_aborted"
    DISCARDED_PREEMPTED = "discarded_preempted"
    DISCARDED_STALE = "discarded_stale"


FINISH = "finish"
ABORT = "abort"
PREEMPT = "preempt"


def lifecycle_rule(
    mode: Mode, kind: str, x: StepInputs[N, B], verified: B, ar: Arith[N, B]
) -> tuple[B, StepInputs[N, B]]:
    """E6 for ``Finish``, ``Abort`` and ``Preempt`` on one open block: whether the block stays
    open as stale output (only a preemption, async, of a block already in the forward pass:
    its result still comes back), and the block as discarded when it does not."""
    stays = ar.truth(False)
    if kind == PREEMPT:
        stays = ar.both(ar.truth(mode is Mode.ASYNC), verified)
    return stays, discard_rule(x, verified, ar)


def discard_deadline(mode: Mode, step: int) -> int:
    """The last step a ``Finish``, ``Abort`` or ``Preempt`` that discards the block of ``step``
    may name (SPEC.md ATTR-2): the step during which the engine processes the block's output,
    the block's own in sync, the next in async. The machine takes events as given; the step-log
    judges (engine_bridge/replay) hold a discarded record's claim to it."""
    # [ATTR-2] the event that discards a block of step s names step <= s (sync), s + 1 (async)
    return step + 1 if mode is Mode.ASYNC else step
