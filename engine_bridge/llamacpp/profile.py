"""What each engine's reported acceptance figures mean, with llama.cpp's facts from its source.

The replay counts a llama.cpp log under the ``llama.cpp`` counting profile declared with the
others in ``reference/profile.py`` (``LLAMACPP``: the pipeline facts the step rules read: no
grammar cut before the forward pass, no padding, no async path, a step per verification). This
module holds what that form does not: what the *reported* figures mean (the bonus token,
drafts accepted past a stop string, when the counters are exported), one
`CountingDeclaration` per profile, each fact with the source behind it, for `spectally
compare` and docs/engines.md. llama.cpp's facts cite its tree at commit 0c1e57098, vendored by
the ``llama-cpp-python==0.3.36`` source package (``scripts/build_llamacpp.py``).

How replay judges a llama.cpp step log: the importer (`importer.py`) writes every verification
as a sync ``request_step`` with nothing cut between proposal and forward pass (``padding`` 0,
``grammar_valid`` null, ``scheduled`` = ``verified`` = ``proposed``, ``applied``); under the
``llama.cpp`` profile the replay's engine-side rule (`reference.step.legacy_step`) then gives
exactly llama.cpp's increments (``stats.n_draft_verif_steps += 1``, ``n_draft_tokens +=
draft.size()``, ``n_draft_accepted += n_accepted``). `tests/llamacpp/test_llamacpp_profile.py` pins
that with the log-level vectors of ``spec/vectors-llamacpp.json``; the step-level vectors of
``spec/vectors.json`` with ``"profile": "llama.cpp"`` pin the declaration itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

PROFILE = "llama.cpp"
ENGINE = "llama.cpp"
SOURCE_COMMIT = "0c1e57098"


@dataclass(frozen=True)
class CountingDeclaration:
    """What an engine's speculative counters mean, in engine-neutral terms.

    Each field is one answer (a short word the compare command matches on) and ``why`` maps a
    field name to where the engine's source makes it so.
    """

    profile: str
    engine: str
    # Where a structured-output grammar cuts drafts: "before_forward" (sync vLLM: not
    # verified, not counted), "after_forward" (async vLLM: verified, subtracted), "never"
    # (the grammar only constrains the target's sample, so forbidden drafts are rejected).
    grammar_cut: str
    # Which grammar-forbidden drafts the drafted counter includes: "none", "first_per_block"
    # (the first invalid draft of each cut block), "all".
    grammar_forbidden_drafted: str
    drafted_includes_padding: bool  # placeholder slots count as drafted
    drafted_includes_truncated: bool  # drafts the schedule cut count as drafted
    verified_equals_drafted: bool  # every counted draft enters the target forward pass
    accepted_includes_bonus: bool  # the bonus / correction token counts as accepted
    accepted_past_stop: bool  # accepted drafts a stop string later drops still count
    step_counts: str  # when num_drafts grows: "per_verification", "per_scheduled_block"
    per_position: bool  # a per-position accepted counter exists (prefix counting)
    reported_when: str  # when the exported counters move
    exported_as: str  # the metric family prefix
    why: dict[str, str]


LLAMACPP = CountingDeclaration(
    profile=PROFILE,
    engine=ENGINE,
    grammar_cut="never",
    grammar_forbidden_drafted="all",
    drafted_includes_padding=False,
    drafted_includes_truncated=False,
    verified_equals_drafted=True,
    accepted_includes_bonus=False,
    accepted_past_stop=True,
    step_counts="per_verification",
    per_position=True,
    reported_when="request_release",
    exported_as="llamacpp:spec_decode_*",
    why={
        "grammar_cut": "common/speculative.cpp (the draft-simple drafter samples the draft model"
        " greedily with its own sampler, which has no grammar); tools/server/server-context.cpp"
        " update_slots: the target samples with the request's grammar through"
        " common_sampler_sample_and_accept_n, which stops at the first draft unequal to the"
        " sampled token",
        "grammar_forbidden_drafted": "tools/server/server-context.cpp update_slots:"
        " slot.stats.n_draft_tokens += draft.size() right after common_speculative_draft,"
        " before any sampler sees the draft",
        "drafted_includes_padding": "server_slot::handle_last_sampled_token adds exactly the"
        " draft tokens to the batch; there are no placeholder slots",
        "drafted_includes_truncated": "server_slot::get_n_draft_max caps the draft at"
        " min(n_ctx - n_tokens - 2, n_remaining - 1) before drafting (n_max of the draft"
        " params); the drafter's p_min / n_min cuts happen inside common_speculative_draft:"
        " nothing is cut after counting",
        "verified_equals_drafted": "server_slot::handle_last_sampled_token: the sampled token and"
        " every draft token enter one target batch (spec_i_batch has n_draft + 1 entries)",
        "accepted_includes_bonus": "update_slots: n_accepted = ids.size() - 1 (ids are the"
        " accepted drafts plus the target's own next token)",
        "accepted_past_stop": "update_slots counts n_draft_accepted before process_token walks"
        " the ids and stops at a stop string or the limit",
        "step_counts": "update_slots: n_draft_verif_steps += 1 once per verification that keeps"
        " its result; a recurrent target's partial acceptance first logs 'accepted A/N draft"
        " tokens (restore checkpoint)', restores the checkpoint and returns without counting,"
        " then replays the A accepted tokens plus the correction as a draft of A+1 the next"
        " iteration (spec_is_replay), which counts one step with n_accepted - 1 accepted",
        "per_position": "update_slots: n_accepted_per_pos[i]++ for i < n_accepted, sized"
        " common_speculative_n_max; exported by server_task_result_metrics::to_metrics as"
        " llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position}",
        "reported_when": "server_context metrics_on_prediction, called from the slot's"
        " callback_on_reset in server_slot::release: /metrics moves when a request stops, the"
        " response's timings.draft_n / draft_n_accepted (server_slot_stats::to_json) are the"
        " same per-request sums",
        "exported_as": "tools/server/server-task.cpp server_task_result_metrics::to_metrics",
    },
)

VLLM_LEGACY = CountingDeclaration(
    profile="vllm-legacy",
    engine="vllm",
    grammar_cut="before_forward",
    grammar_forbidden_drafted="none",
    drafted_includes_padding=True,
    drafted_includes_truncated=False,
    verified_equals_drafted=False,
    accepted_includes_bonus=False,
    accepted_past_stop=True,
    step_counts="per_scheduled_block",
    per_position=True,
    reported_when="engine_step",
    exported_as="vllm:spec_decode_*",
    why={
        "grammar_cut": "vllm/v1/core/sched/scheduler.py update_draft_token_ids: sync"
        " validate_tokens keeps the grammar-valid prefix before scheduling (async: the"
        " scheduled invalid drafts are subtracted, num_invalid_spec_tokens)",
        "grammar_forbidden_drafted": "make_spec_decoding_stats counts scheduled slots minus"
        " invalid ones",
        "drafted_includes_padding": "-1 placeholder slots are scheduled and counted",
        "drafted_includes_truncated": "only scheduled slots count",
        "verified_equals_drafted": "adaptive verification drops drafts invisibly",
        "accepted_includes_bonus": "num_accepted = len(sampled) - 1",
        "accepted_past_stop": "counted from sampled_token_ids before stop trimming",
        "step_counts": "one draft per scheduled block with slots > 0 whose output is processed",
        "per_position": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "reported_when": "every engine step (SpecDecodingStats deltas)",
        "exported_as": "vllm/v1/metrics/loggers.py",
    },
)

# vLLM 0.34.0 as its source reads (the replay counts it with reference/profile.py's VLLM_034):
# vllm-legacy but for the grammar.
VLLM_034 = replace(
    VLLM_LEGACY,
    profile="vllm-0.34",
    grammar_cut="keeps_first_invalid",
    grammar_forbidden_drafted="first_per_block",
    why={
        **VLLM_LEGACY.why,
        "grammar_cut": "vllm/v1/structured_output/__init__.py"
        " StructuredOutputManager.trim_spec_tokens keeps the valid prefix plus the first invalid"
        " draft (sync); async Scheduler.update_draft_token_ids_in_output no longer validates"
        " (rejection sampling under the grammar bitmask rejects the invalid drafts)",
        "grammar_forbidden_drafted": "sync: the first invalid draft of each cut block is"
        " scheduled and counted; async: every grammar-invalid draft is counted"
        " (num_invalid_spec_tokens counts only slots the drafter left short)",
    },
)

DECLARATIONS: dict[str, CountingDeclaration] = {
    d.profile: d for d in (LLAMACPP, VLLM_LEGACY, VLLM_034)
}


def llamacpp_step(drafted: int, accepted: int) -> tuple[int, int, int]:
    """llama.cpp's (num_drafts, num_draft_tokens, num_accepted_tokens) increments for one
    counted verification of ``drafted`` tokens with ``accepted`` accepted (update_slots)."""
    if not 0 <= accepted <= drafted:
        raise ValueError(f"accepted {accepted} outside 0..{drafted}")
    return (1 if drafted > 0 else 0), drafted, accepted
