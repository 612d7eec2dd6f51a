"""Integer wrappers around the reference, with PEP 316 contracts for CrossHair.

The Z3 proofs evaluate the reference over symbolic terms; CrossHair is a second, independent
check: it executes the *integer* code paths (``StepQuery``, ``INT_ARITH``, ``token_fates``,
``Counters``) symbolically and searches for inputs that break the ``post:`` conditions. Each
wrapper takes plain ints/bools (what CrossHair explores best) and calls the reference; no rule
is restated. ``crosshair check spectally.proofs.contracts`` is run by
tests/proofs/test_crosshair.py.

The ``rfc_*``/``legacy_*`` pairs share a signature so ``crosshair diffbehavior`` can report
inputs on which the two profiles differ (docs/proofs.md).
"""

from __future__ import annotations

from spectally.reference.arith import INT_ARITH
from spectally.reference.counters import Counters
from spectally.reference.step import (
    Mode,
    StepInputs,
    admissible,
    fates,
    legacy_step,
    rfc_step,
    token_fates,
)

K = 4  # block bound the contracts explore (the RFC row's k)


def block(
    sync: bool,
    proposed: int,
    grammar_valid: int,
    structured: bool,
    scheduled: int,
    av_verify: int,
    accepted: int,
) -> tuple[Mode, StepInputs[int, bool]]:
    """An applied block without padding, caps stated explicitly."""
    mode = Mode.SYNC if sync else Mode.ASYNC
    x = StepInputs(
        proposed=proposed,
        padding=0,
        structured=structured,
        grammar_valid=grammar_valid,
        schedule_cap=scheduled,
        av_cap=av_verify,
        accepted=accepted,
        applied=True,
        legacy_reported=True,
    )
    return mode, x


def ok(
    sync: bool,
    proposed: int,
    grammar_valid: int,
    structured: bool,
    scheduled: int,
    av_verify: int,
    accepted: int,
) -> bool:
    """The block is admissible (``step.admissible`` over ints) and no longer than K."""
    mode, x = block(sync, proposed, grammar_valid, structured, scheduled, av_verify, accepted)
    result: bool = admissible(mode, x, INT_ARITH, K)
    return result


def rfc_counts(
    sync: bool,
    proposed: int,
    grammar_valid: int,
    structured: bool,
    scheduled: int,
    av_verify: int,
    accepted: int,
) -> tuple[int, int, int, int]:
    """(drafted, verified, accepted, spec_steps) of one applied block, rfc profile.

    pre: ok(sync, proposed, grammar_valid, structured, scheduled, av_verify, accepted)
    post: __return__[0] >= __return__[1] >= __return__[2] >= 0
    post: __return__[0] == proposed
    post: __return__[3] == (1 if proposed > 0 else 0)
    """
    mode, x = block(sync, proposed, grammar_valid, structured, scheduled, av_verify, accepted)
    c = rfc_step(mode, x, INT_ARITH)
    return c.drafted, c.verified, c.accepted, c.spec_steps


def fates_match_tokens(
    sync: bool,
    proposed: int,
    grammar_valid: int,
    structured: bool,
    scheduled: int,
    av_verify: int,
    accepted: int,
) -> bool:
    """``token_fates`` (position by position) agrees with ``fates`` (counts), and the fates of
    the positions partition the proposal.

    pre: ok(sync, proposed, grammar_valid, structured, scheduled, av_verify, accepted)
    post: __return__
    """
    mode, x = block(sync, proposed, grammar_valid, structured, scheduled, av_verify, accepted)
    per_token = token_fates(mode, x)
    counts = fates(mode, x, INT_ARITH).as_dict()
    return len(per_token) == proposed and all(
        per_token.count(name) == value for name, value in counts.items()
    )


def sync_async_agree(
    proposed: int,
    grammar_valid: int,
    structured: bool,
    scheduled: int,
    av_verify: int,
    accepted: int,
) -> bool:
    """The sync/async theorem over ints: same drafted, accepted and spec_steps; verified
    differs by the async grammar-invalid-verified drafts.

    pre: ok(True, proposed, grammar_valid, structured, scheduled, av_verify, accepted)
    pre: ok(False, proposed, grammar_valid, structured, scheduled, av_verify, accepted)
    post: __return__
    """
    _, x = block(True, proposed, grammar_valid, structured, scheduled, av_verify, accepted)
    s, a = rfc_step(Mode.SYNC, x, INT_ARITH), rfc_step(Mode.ASYNC, x, INT_ARITH)
    return (
        s.drafted == a.drafted
        and s.accepted == a.accepted
        and s.spec_steps == a.spec_steps
        and a.verified - s.verified == a.fates.grammar_invalid_verified
    )


def counters_after(
    sync: bool,
    proposed: int,
    grammar_valid: int,
    structured: bool,
    scheduled: int,
    av_verify: int,
    accepted: int,
) -> Counters:
    """The integer counter state after one block (``Counters.add_step``, vectors of length K).

    pre: ok(sync, proposed, grammar_valid, structured, scheduled, av_verify, accepted)
    post: sum(__return__.per_position("drafted")) == __return__.rfc.drafted
    post: sum(__return__.per_position("accepted")) == __return__.rfc.accepted
    post: __return__.positions[0].drafted == __return__.rfc.spec_steps
    """
    mode, x = block(sync, proposed, grammar_valid, structured, scheduled, av_verify, accepted)
    return Counters.zero(K).add_step(mode, x)


# -- diffbehavior pairs: same signature, one per profile -------------------------------------


def rfc_drafted(
    sync: bool, proposed: int, grammar_valid: int, structured: bool, av_verify: int
) -> int:
    """rfc drafted of an admissible applied block (-1 when inadmissible)."""
    if not ok(sync, proposed, grammar_valid, structured, proposed, av_verify, 0):
        return -1
    mode, x = block(sync, proposed, grammar_valid, structured, proposed, av_verify, 0)
    return rfc_step(mode, x, INT_ARITH).drafted


def legacy_drafted(
    sync: bool, proposed: int, grammar_valid: int, structured: bool, av_verify: int
) -> int:
    """vllm-legacy num_draft_tokens of the same block (-1 when inadmissible)."""
    if not ok(sync, proposed, grammar_valid, structured, proposed, av_verify, 0):
        return -1
    mode, x = block(sync, proposed, grammar_valid, structured, proposed, av_verify, 0)
    return legacy_step(mode, x, INT_ARITH).num_draft_tokens


def rfc_spec_steps(proposed: int, grammar_valid: int, structured: bool) -> tuple[int, int]:
    """(sync, async) rfc spec steps of one applied block ((-1, -1) when inadmissible)."""
    if not ok(True, proposed, grammar_valid, structured, proposed, proposed, 0):
        return (-1, -1)
    _, x = block(True, proposed, grammar_valid, structured, proposed, proposed, 0)
    return (
        rfc_step(Mode.SYNC, x, INT_ARITH).spec_steps,
        rfc_step(Mode.ASYNC, x, INT_ARITH).spec_steps,
    )


def legacy_spec_steps(proposed: int, grammar_valid: int, structured: bool) -> tuple[int, int]:
    """(sync, async) vllm-legacy num_drafts of the same block."""
    if not ok(True, proposed, grammar_valid, structured, proposed, proposed, 0):
        return (-1, -1)
    _, x = block(True, proposed, grammar_valid, structured, proposed, proposed, 0)
    return (
        legacy_step(Mode.SYNC, x, INT_ARITH).num_drafts,
        legacy_step(Mode.ASYNC, x, INT_ARITH).num_drafts,
    )


def rfc_accepted(
    sync: bool, proposed: int, grammar_valid: int, structured: bool, av_verify: int, accepted: int
) -> int:
    """rfc accepted of an admissible applied block (-1 when inadmissible)."""
    if not ok(sync, proposed, grammar_valid, structured, proposed, av_verify, accepted):
        return -1
    mode, x = block(sync, proposed, grammar_valid, structured, proposed, av_verify, accepted)
    return rfc_step(mode, x, INT_ARITH).accepted


def legacy_accepted(
    sync: bool, proposed: int, grammar_valid: int, structured: bool, av_verify: int, accepted: int
) -> int:
    """vllm-legacy num_accepted_tokens of the same block: the profiles agree on accepted."""
    if not ok(sync, proposed, grammar_valid, structured, proposed, av_verify, accepted):
        return -1
    mode, x = block(sync, proposed, grammar_valid, structured, proposed, av_verify, accepted)
    return legacy_step(mode, x, INT_ARITH).num_accepted_tokens
