"""The shift terms (`step.shift_terms`) explain, block by block, every count that moves from
vLLM's legacy counters to the RFC's: drafted, accepted and spec steps."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from spectally.reference.arith import INT_ARITH
from spectally.reference.profile import PROFILES, CountingProfile
from spectally.reference.step import (
    SHIFT_TERMS,
    Mode,
    StepInputs,
    legacy_step,
    rfc_step,
    shift_terms,
)
from strategies import admissible_inputs

VLLM = [p for p in PROFILES.values() if p.engine == "vllm"]  # the releases legacy_step counts


@given(admissible_inputs(), st.sampled_from(VLLM))
def test_the_terms_add_up_to_the_shift(
    case: tuple[Mode, StepInputs[int, bool], int], profile: CountingProfile
) -> None:
    mode, x, _ = case
    lg = legacy_step(mode, x, INT_ARITH, profile)
    rc = rfc_step(mode, x, INT_ARITH, profile)
    t = dict(zip(SHIFT_TERMS, shift_terms(mode, x, lg, INT_ARITH, profile), strict=True))
    assert rc.drafted - lg.num_draft_tokens == (
        t["grammar_invalid"] + t["truncated"] - t["padding"] - t["stale_drafted"]
    )
    assert rc.accepted - lg.num_accepted_tokens == -t["stale_accepted"]
    assert rc.spec_steps - lg.num_drafts == (
        t["steps_without_slots"] - t["padding_only_steps"] - t["stale_steps"]
    )
