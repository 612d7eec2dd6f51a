"""reference/profile.py: the counting profiles as declarations, and what each field does to the
step rules (reference/step.py). vLLM 0.34.0's facts, each from its source:

* sync: ``StructuredOutputManager.trim_spec_tokens`` (v1/structured_output/__init__.py) keeps
  ``spec_tokens[: len_validated + 1]``: the valid prefix and the first invalid draft, which is
  scheduled, verified and refused under the grammar bitmask;
* async: ``Scheduler.update_draft_token_ids_in_output`` (v1/core/sched/scheduler.py) no longer
  validates ("Preserve draft slots"): ``num_invalid_spec_tokens`` counts only slots the drafter
  left short, so ``make_spec_decoding_stats`` (unchanged) counts every scheduled slot.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from spectally.reference.arith import INT_ARITH
from spectally.reference.profile import (
    FIXED,
    PROFILES,
    RELEASES,
    VLLM_034,
    VLLM_LEGACY,
    EngineCounts,
    GrammarKeep,
    releases_of,
)
from spectally.reference.step import (
    Mode,
    StepInputs,
    StepQuery,
    admissible,
    fates,
    grammar_keeps,
    legacy_scheduled_invalid,
    legacy_step,
    pipeline,
    rfc_step,
    token_fates,
)

AR = INT_ARITH
SYNC, ASYNC = Mode.SYNC, Mode.ASYNC

# k = 4: the grammar accepts the first 2 drafts; the target accepts 1.
CUT = StepQuery(SYNC, proposed=4, grammar_valid=2, accepted=1).inputs()


def test_declarations_are_named_and_every_release_line_names_one() -> None:
    assert set(PROFILES) == {
        "vllm-legacy",
        "vllm-0.34",
        "llama.cpp",
        "vllm-legacy-rfc",
        "vllm-0.34-rfc",
    }
    for engine, _, name in RELEASES:
        assert PROFILES[name].engine == engine
    assert releases_of("vllm-0.34") == releases_of("vllm-0.34-rfc") == ["0.34"]
    assert releases_of("vllm-legacy") == releases_of("vllm-legacy-rfc") == ["0.32", "0.33"]
    for release, fixed in FIXED.items():
        assert PROFILES[fixed] == replace(
            PROFILES[release],
            name=fixed,
            engine_counts=EngineCounts.RFC,
            source=PROFILES[fixed].source,
        )


@pytest.mark.parametrize("mode", [SYNC, ASYNC])
def test_a_fixed_engine_reports_the_rfc_counters_as_its_own(mode: Mode) -> None:
    """An engine with the counting fix: its own counters are the rfc counters, whatever the
    release's pipeline cut (here the grammar's: 4 proposed, 2 valid)."""
    x = StepQuery(mode, proposed=4, grammar_valid=2, accepted=1).inputs()
    for fixed in FIXED.values():
        c = rfc_step(mode, x, AR, PROFILES[fixed])
        own = legacy_step(mode, x, AR, PROFILES[fixed])
        assert (
            (own.num_drafts, own.num_draft_tokens, own.num_accepted_tokens)
            == (
                c.spec_steps,
                c.drafted,
                c.accepted,
            )
            == (1, 4, 1)
        )
    # the release's own counting drops the grammar's cut (0.34 async counts every slot)
    assert any(legacy_step(mode, x, AR, PROFILES[r]).num_draft_tokens < 4 for r in FIXED)


def test_grammar_keeps_each_answer() -> None:
    assert grammar_keeps(GrammarKeep.VALID_PREFIX, CUT, AR) == 2
    assert grammar_keeps(GrammarKeep.PREFIX_AND_FIRST_INVALID, CUT, AR) == 3
    assert grammar_keeps(GrammarKeep.EVERYTHING, CUT, AR) == 4
    whole = StepQuery(SYNC, proposed=4, grammar_valid=4, accepted=1).inputs()
    assert grammar_keeps(GrammarKeep.PREFIX_AND_FIRST_INVALID, whole, AR) == 4  # nothing to add


def test_0_34_sync_verifies_the_first_invalid_draft() -> None:
    legacy = pipeline(SYNC, CUT, AR, VLLM_LEGACY)
    new = pipeline(SYNC, CUT, AR, VLLM_034)
    assert (legacy.scheduled_slots, legacy.verified, legacy.eligible) == (2, 2, 2)
    assert (new.scheduled_slots, new.verified, new.eligible) == (3, 3, 2)
    f = fates(SYNC, CUT, AR, VLLM_034).as_dict()
    assert f == {
        "accepted": 1,
        "rejected": 1,
        "grammar_invalid_verified": 1,
        "grammar_invalid_unverified": 1,
        "av_skipped": 0,
        "truncated": 0,
    }
    assert token_fates(SYNC, CUT, VLLM_034) == [
        "accepted",
        "rejected",
        "grammar_invalid_verified",
        "grammar_invalid_unverified",
    ]
    # vLLM's own drafted counts the verified invalid draft; the rfc's drafted does not move
    assert legacy_step(SYNC, CUT, AR, VLLM_LEGACY).num_draft_tokens == 2
    assert legacy_step(SYNC, CUT, AR, VLLM_034).num_draft_tokens == 3
    assert rfc_step(SYNC, CUT, AR, VLLM_034).drafted == rfc_step(SYNC, CUT, AR).drafted == 4
    assert rfc_step(SYNC, CUT, AR, VLLM_034).verified == 3
    assert admissible(SYNC, CUT, AR, 4, VLLM_034)


def test_0_34_async_subtracts_no_grammar_invalid_slot() -> None:
    x = StepQuery(ASYNC, proposed=3, padding=1, grammar_valid=1, accepted=1).inputs()
    assert legacy_scheduled_invalid(ASYNC, x, AR, VLLM_LEGACY) == 3  # 4 slots - 1 valid
    assert legacy_scheduled_invalid(ASYNC, x, AR, VLLM_034) == 0
    assert legacy_step(ASYNC, x, AR, VLLM_LEGACY).num_draft_tokens == 1
    assert legacy_step(ASYNC, x, AR, VLLM_034).num_draft_tokens == 4  # every slot
    # the rfc side is the same in both releases: the grammar acts after the forward pass
    assert rfc_step(ASYNC, x, AR, VLLM_034) == rfc_step(ASYNC, x, AR, VLLM_LEGACY)
    # a release whose async update kept the first invalid draft would subtract the rest
    keeps_one = replace(VLLM_LEGACY, async_counted_keeps=GrammarKeep.PREFIX_AND_FIRST_INVALID)
    assert legacy_scheduled_invalid(ASYNC, x, AR, keeps_one) == 2


def test_unstructured_blocks_count_alike_in_both_releases() -> None:
    x = StepQuery(SYNC, proposed=3, padding=1, accepted=2).inputs()
    for mode in (SYNC, ASYNC):
        assert legacy_step(mode, x, AR, VLLM_034) == legacy_step(mode, x, AR, VLLM_LEGACY)


def test_padding_av_and_stale_fields_each_change_drafted() -> None:
    x = StepQuery(ASYNC, proposed=2, padding=2, av_verify=1, accepted=1).inputs()
    assert legacy_step(ASYNC, x, AR, VLLM_LEGACY).num_draft_tokens == 4
    no_pad = replace(VLLM_LEGACY, padding_counted=False)
    assert legacy_step(ASYNC, x, AR, no_pad).num_draft_tokens == 2
    av_seen = replace(VLLM_LEGACY, av_counted=True)
    assert legacy_step(ASYNC, x, AR, av_seen).num_draft_tokens == 3
    stale = StepInputs(2, 0, False, 2, 2, 2, 1, False, True)  # delivered stale output
    assert legacy_step(ASYNC, stale, AR, VLLM_LEGACY).num_drafts == 1
    applied_only = replace(VLLM_LEGACY, stale_output_counted=False)
    assert legacy_step(ASYNC, stale, AR, applied_only).num_drafts == 0


@pytest.mark.parametrize("mode", [SYNC, ASYNC])
def test_fates_partition_under_every_profile(mode: Mode) -> None:
    for profile in PROFILES.values():
        for g in range(5):
            x = StepQuery(mode, proposed=4, grammar_valid=g, accepted=0).inputs()
            f = fates(mode, x, AR, profile).as_dict()
            assert sum(f.values()) == 4
            tf = token_fates(mode, x, profile)
            assert all(tf.count(n) == v for n, v in f.items())


def test_fate_counts_names_the_fates() -> None:
    from spectally.reference.step import fate_counts

    assert fate_counts(SYNC, CUT, VLLM_034) == fates(SYNC, CUT, AR, VLLM_034).as_dict()
    assert fate_counts(SYNC, CUT)["grammar_invalid_verified"] == 0  # vllm-legacy
