"""Counting profiles: an engine release's pipeline facts, declared as data.

A counting profile states, for one engine release (or a run of releases that count alike), the
facts of its pipeline that decide the counts. ``step.py`` reads them: the stage caps of the rfc
counters (which drafts reach the forward pass) and the engine's own counters (what it reports as
drafted, accepted, steps). Nothing else about a release matters to the counts; a release that
counts like a known one is one line of `RELEASES`, one that does not is one `CountingProfile`
plus the vectors that pin where it differs (spec/vectors.py).

The form is engine-neutral. Each field names one fact and its possible answers:

* ``sync_grammar_keeps`` (`GrammarKeep`): in sync scheduling the grammar cuts a structured
  request's drafts *before scheduling*; what it keeps of the proposal: the valid prefix, the
  valid prefix plus the first invalid draft (which then enters the forward pass and is refused
  there), or everything (no cut before scheduling). Placeholders of a structured proposal are
  stripped first in every vLLM release.
* ``async_counted_keeps`` (`GrammarKeep`): in async scheduling drafts are scheduled as
  placeholders and the grammar acts after the forward pass; what the engine's own ``drafted``
  keeps of a structured block's scheduled slots. The rest is subtracted (vLLM:
  ``num_invalid_spec_tokens``). ``VALID_PREFIX``: slots past the grammar-valid prefix, padding
  included, are subtracted; ``EVERYTHING``: nothing is.
* ``padding_counted``: placeholder slots (padding) of an unstructured block count as drafted.
* ``av_counted``: adaptive verification's cut is visible to the engine's counters (drafted is
  what AV sent to the target) rather than invisible (drafted is what was scheduled).
* ``stale_output_counted``: the engine counts a block whose output arrived after a preemption
  when it delivers that output (the step input ``legacy_reported``); False: it counts only
  applied blocks.
* ``step_counts`` (`StepCounts`): when a block adds one to ``num_drafts``.
* ``skip_drafts`` (`SkipDrafts`): when the engine skips drafting for a step. It changes no
  rule (a skipped proposal is a block of padding, or none); it is declared so that the
  recorder, the docs and a version diff know what the release does.
* ``source``: where each fact was read, file:function, for the docs' profile table.

The reference keeps the engine-neutral form and the declarations for the releases it models;
the replay picks one by the log header's engine and version
(``engine_bridge/steplog/translate.profile_for`` reads `RELEASES`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class GrammarKeep(str, enum.Enum):
    """What a grammar stage keeps of a structured request's drafts (G = grammar-valid prefix)."""

    VALID_PREFIX = "valid prefix"  # G drafts
    PREFIX_AND_FIRST_INVALID = "valid prefix + first invalid"  # min(G + 1, N)
    EVERYTHING = "everything"  # N: no cut at this place


class StepCounts(str, enum.Enum):
    """When a block adds one to the engine's ``num_drafts``."""

    SCHEDULED_SLOTS = "scheduled slots > 0 and the output was processed"


class SkipDrafts(str, enum.Enum):
    """When the engine skips drafting for a step (a proposal no step would verify)."""

    NEVER = "never"
    # 0.33.0 adds skipping (`Scheduler.__init__`'s `can_skip_drafts`); 0.32.0, which counts the
    # same way and so shares the vllm-legacy profile, never skips.
    V2_RUNNER_LOOKAHEAD = "V2 runner with a lookahead drafter (0.33; never in 0.32)"
    LOOKAHEAD = "any lookahead drafter"


@dataclass(frozen=True)
class CountingProfile:
    """One release's counting facts; see the module docstring for each field."""

    name: str
    engine: str
    sync_grammar_keeps: GrammarKeep
    async_counted_keeps: GrammarKeep
    padding_counted: bool
    av_counted: bool
    stale_output_counted: bool
    step_counts: StepCounts
    skip_drafts: SkipDrafts
    source: tuple[tuple[str, str], ...]  # (fact, file:function it was read from)


_VLLM_COUNTING = (
    ("drafted", "v1/core/sched/scheduler.py:Scheduler.make_spec_decoding_stats"),
    ("step counts", "v1/core/sched/scheduler.py:Scheduler.update_from_output"),
    ("stale output", "v1/core/sched/scheduler.py:Scheduler.update_from_output"),
    ("AV", "v1/worker/gpu/spec_decode/adaptive_verification.py:reallocate_drafts"),
)

VLLM_LEGACY = CountingProfile(
    name="vllm-legacy",
    engine="vllm",
    sync_grammar_keeps=GrammarKeep.VALID_PREFIX,
    async_counted_keeps=GrammarKeep.VALID_PREFIX,
    padding_counted=True,
    av_counted=False,
    stale_output_counted=True,
    step_counts=StepCounts.SCHEDULED_SLOTS,
    skip_drafts=SkipDrafts.V2_RUNNER_LOOKAHEAD,
    source=(
        (
            "sync grammar",
            "v1/structured_output/__init__.py:StructuredOutputManager.validate_tokens",
        ),
        ("async grammar", "v1/core/sched/scheduler.py:Scheduler.update_draft_token_ids_in_output"),
        ("skip drafts", "v1/core/sched/scheduler.py:Scheduler.__init__ (can_skip_drafts, 0.33)"),
        *_VLLM_COUNTING,
    ),
)

VLLM_034 = CountingProfile(
    name="vllm-0.34",
    engine="vllm",
    sync_grammar_keeps=GrammarKeep.PREFIX_AND_FIRST_INVALID,
    async_counted_keeps=GrammarKeep.EVERYTHING,
    padding_counted=True,
    av_counted=False,
    stale_output_counted=True,
    step_counts=StepCounts.SCHEDULED_SLOTS,
    skip_drafts=SkipDrafts.LOOKAHEAD,
    source=(
        (
            "sync grammar",
            "v1/structured_output/__init__.py:StructuredOutputManager.trim_spec_tokens",
        ),
        ("async grammar", "v1/core/sched/scheduler.py:Scheduler.update_draft_token_ids_in_output"),
        ("skip drafts", "v1/core/sched/scheduler.py:Scheduler.__init__ (can_skip_drafts)"),
        *_VLLM_COUNTING,
    ),
)

# llama.cpp's server (tools/server/server-context.cpp at 0c1e57098, llama.cpp 0.5.0-dev) is
# synchronous: it drafts, verifies and accepts in one update_slots call, so there is no async
# path, no stale output, no padding and no adaptive verification. The draft model never sees
# the request's grammar and every draft enters the target batch; budget and probability cuts
# happen before the draft is returned, so they are not drafted (the proposal is shorter).
LLAMACPP = CountingProfile(
    name="llama.cpp",
    engine="llama.cpp",
    sync_grammar_keeps=GrammarKeep.EVERYTHING,
    async_counted_keeps=GrammarKeep.EVERYTHING,
    padding_counted=False,
    av_counted=False,
    stale_output_counted=False,
    step_counts=StepCounts.SCHEDULED_SLOTS,
    skip_drafts=SkipDrafts.NEVER,
    source=(
        ("sync grammar", "common/speculative.cpp:draft-simple draft (no grammar in its sampler)"),
        ("drafted", "tools/server/server-context.cpp:update_slots (n_draft_tokens)"),
        ("verified", "tools/server/server-context.cpp:server_slot::handle_last_sampled_token"),
        ("accepted", "common/sampling.cpp:common_sampler_sample_and_accept_n"),
        ("step counts", "tools/server/server-context.cpp:update_slots (n_draft_verif_steps)"),
        ("budget", "tools/server/server-context.cpp:server_slot::get_n_draft_max"),
    ),
)

PROFILES: dict[str, CountingProfile] = {p.name: p for p in (VLLM_LEGACY, VLLM_034, LLAMACPP)}

# (engine, release prefix, profile). A release counts like its profile: the counting source of
# each vLLM release is compared and pinned (engine_bridge/steplog/release_pin.json,
# tests/vllm/test_counting_source.py). The prefix matches the release's leading numbers: "0.33"
# matches 0.33.0, 0.33.1rc2, 0.33.0+cpu.
RELEASES: tuple[tuple[str, str, str], ...] = (
    ("vllm", "0.32", "vllm-legacy"),
    ("vllm", "0.33", "vllm-legacy"),
    ("vllm", "0.34", "vllm-0.34"),
    ("llama.cpp", "0.5", "llama.cpp"),
)
# Releases before the oldest one listed count like it (vLLM's counting is unchanged back to the
# V1 engine's spec-decode stats).
OLDEST_COUNTS_AS: dict[str, tuple[str, str]] = {"vllm": ("0.32", "vllm-legacy")}


def releases_of(profile: str) -> list[str]:
    """The release prefixes declared to count as ``profile``."""
    return [prefix for _, prefix, name in RELEASES if name == profile]
