"""Every engine's counting declaration, in one vocabulary: what its reported figures mean.

One `CountingDeclaration` per engine (and per release whose counting differs), each fact with
the source that makes it so. The replay counts step logs under the profiles of
``reference/profile.py`` (vLLM, llama.cpp); this module says what each engine *reports*, for
`spectally compare`, `spectally explain`, the importers of SGLang and TensorRT-LLM output, and
docs/engines.md. Each is named for what it is, ``<ENGINE>_REPORTS`` (``VLLM_LEGACY_REPORTS``: what
vLLM before 0.34 reports), apart from the counting profiles of the same engines
(``reference.profile.VLLM_LEGACY``: how the replay counts). ``evidence`` says how each
declaration is known:

* ``replayed``: real engine runs recorded here are replayed and agree (vLLM 0.32, llama.cpp);
* ``source-pinned``: read in the engine's released source, the counting functions' text hashed
  in ``SOURCE_PINS`` and checked against the released package when it is present;
* ``read in source, not run``: read in the engine's source only (no package here runs it).

Citations: llama.cpp at commit 0c1e57098 (vendored by ``llama-cpp-python==0.3.36``) and
ggml-org/llama.cpp#24536 (the mean acceptance length and per-position rates); SGLang 0.5.23
(the ``sglang`` wheel, paths below its ``sglang/`` package, line numbers of that release);
LMDeploy 0.18 by its metric names only; TensorRT-LLM's ``tensorrt_llm/_torch/pyexecutor/
py_executor.py`` ``PyExecutor._update_iter_stats`` and ``cpp/include/tensorrt_llm/executor/
types.h`` ``SpecDecodingStats``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


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
    # The acceptance rate's denominator: "drafted" (counted draft tokens) or "configured"
    # (verification steps x the configured draft length, whatever was proposed).
    rate_denominator: str = "drafted"
    # The mean acceptance length's numerator: "accepted+1" per step (drafts plus the bonus).
    accept_length: str = "1 + accepted / steps"
    # "counter" (monotone totals), "interval_gauge" (the last logging interval's ratio),
    # "iteration_stats" (one record per engine iteration).
    exported_kind: str = "counter"
    evidence: str = "replayed"
    tree_drafts: str = "none"  # how tree drafting is counted, where the engine has it
    notes: tuple[str, ...] = field(default_factory=tuple)


LLAMACPP_REPORTS = CountingDeclaration(
    profile="llama.cpp",
    engine="llama.cpp",
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
        "accept_length": "server_slot::print_timings (ggml-org/llama.cpp#24536): mean acceptance"
        " length = 1 + n_draft_accepted / n_draft_verif_steps, per-position rate i ="
        " n_accepted_per_pos[i] / n_draft_verif_steps; common/speculative.cpp"
        " common_speculative_print_stats: the same over n_call_accept for each implementation",
    },
)

VLLM_LEGACY_REPORTS = CountingDeclaration(
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
VLLM_034_REPORTS = replace(
    VLLM_LEGACY_REPORTS,
    profile="vllm-0.34",
    grammar_cut="keeps_first_invalid",
    grammar_forbidden_drafted="first_per_block",
    why={
        **VLLM_LEGACY_REPORTS.why,
        "grammar_cut": "vllm/v1/structured_output/__init__.py"
        " StructuredOutputManager.trim_spec_tokens keeps the valid prefix plus the first invalid"
        " draft (sync); async Scheduler.update_draft_token_ids_in_output no longer validates"
        " (rejection sampling under the grammar bitmask rejects the invalid drafts)",
        "grammar_forbidden_drafted": "sync: the first invalid draft of each cut block is"
        " scheduled and counted; async: every grammar-invalid draft is counted"
        " (num_invalid_spec_tokens counts only slots the drafter left short)",
    },
)

_SGL = "srt/managers/scheduler_components/"
SGLANG_REPORTS = CountingDeclaration(
    profile="sglang-0.5",
    engine="sglang",
    grammar_cut="never",
    grammar_forbidden_drafted="all",
    drafted_includes_padding=True,
    drafted_includes_truncated=True,
    verified_equals_drafted=True,
    accepted_includes_bonus=False,
    accepted_past_stop=True,
    step_counts="per_request_verification",
    per_position=False,
    reported_when="decode_log_interval",
    exported_as="sglang:spec_*",
    rate_denominator="configured",
    accept_length="(accepted + bonus) / (requests x verify steps)",
    exported_kind="interval_gauge",
    evidence="source-pinned",
    tree_drafts="configured_nodes",
    why={
        "grammar_cut": "srt/speculative/spec_utils.py:584-649 traverse_tree: the grammar"
        " builds the target's vocab mask at each draft-tree node; a grammar-invalid draft is"
        " verified under that mask and rejected, never cut before the forward pass",
        "grammar_forbidden_drafted": f"{_SGL}metrics_reporter.py:975-981: the rate's"
        " denominator is forward count x (speculative_num_draft_tokens - 1), the configured"
        " draft length, so every slot counts whatever the drafter or the grammar did",
        "drafted_includes_padding": f"{_SGL}metrics_reporter.py:975-979: configured draft"
        " slots, proposed or not",
        "drafted_includes_truncated": f"{_SGL}metrics_reporter.py:979 total_draft_tokens ="
        " spec_num_forward_ct * draft_per_round",
        "verified_equals_drafted": "the whole draft tree enters the target verify pass"
        " (srt/speculative/eagle_info.py EagleVerifyInput)",
        "accepted_includes_bonus": f"{_SGL}batch_result_processor.py:785-788:"
        " num_correct_drafts = accept_lens - num_non_draft_tokens (no bonus) for the rate;"
        f" {_SGL}batch_result_processor.py:983-990 and srt/managers/utils.py:164-165: the"
        " accept length's numerator num_generated_tokens = correct drafts + batch size"
        " (bonus included)",
        "accepted_past_stop": f"{_SGL}batch_result_processor.py:832-835: counted per verify"
        " before stop handling",
        "step_counts": f"{_SGL}metrics_reporter.py:551-553 update_spec_metrics:"
        " spec_num_forward_ct += bs, one per request per verify pass;"
        f" {_SGL}batch_result_processor.py:832 req.spec_verify_ct += 1",
        "per_position": "no per-position series in 0.5.23 (srt/observability/"
        "metrics_collector.py:511-522 has only the two gauges)",
        "reported_when": f"{_SGL}metrics_reporter.py:999-1005: the interval's sums are reset"
        " after each decode log line",
        "exported_as": "srt/observability/metrics_collector.py:511-522 Gauge"
        " sglang:spec_accept_length, sglang:spec_accept_rate (multiprocess_mode mostrecent);"
        " set at metrics_collector.py:1674-1675",
        "rate_denominator": f"{_SGL}metrics_reporter.py:975-982 spec_accept_rate ="
        " num_correct_drafts / (spec_num_forward_ct x draft_per_round), draft_per_round ="
        " speculative_num_draft_tokens - 1 (else speculative_num_steps);"
        " srt/managers/tokenizer_manager.py:3156-3164 per request: spec_verify_ct x"
        " (speculative_num_draft_tokens - 1)",
        "accept_length": f"{_SGL}metrics_reporter.py:973 spec_accept_length ="
        " spec_num_accept_tokens / spec_num_forward_ct; srt/managers/tokenizer_manager.py:"
        "3166-3168 per request: completion_tokens / spec_verify_ct",
        "exported_kind": "Gauge, reset per interval: not summable, not re-windowable",
        "tree_drafts": "speculative_num_draft_tokens counts the tree's nodes (root included):"
        " the denominator is every non-root node, the accepted count one root-to-leaf path",
    },
)

LMDEPLOY_REPORTS = replace(
    SGLANG_REPORTS,
    profile="lmdeploy-0.18",
    engine="lmdeploy",
    exported_as="lmdeploy:spec_decode_*",
    exported_kind="counter",
    evidence="names only: its source is not read here",
    tree_drafts="none",
    why={
        "rate_denominator": "lmdeploy:spec_decode_num_draft_tokens_total counts the configured"
        " draft length per request per step (the SGLang reading of drafted), not proposed"
        " drafts; not confirmed against LMDeploy's source here",
        "exported_as": "vLLM-shaped counter names under the lmdeploy: prefix"
        " (lmdeploy:spec_decode_num_drafts_total, ..._num_draft_tokens_total,"
        " ..._num_accepted_tokens_total)",
    },
)

TRTLLM_REPORTS = CountingDeclaration(
    profile="trtllm",
    engine="tensorrt-llm",
    grammar_cut="unknown",
    grammar_forbidden_drafted="unknown",
    drafted_includes_padding=False,
    drafted_includes_truncated=False,
    verified_equals_drafted=True,
    accepted_includes_bonus=False,
    accepted_past_stop=True,
    step_counts="per_request_with_drafts",
    per_position=False,
    reported_when="iteration",
    exported_as="specDecodingStats",
    accept_length="(accepted + requests) / requests",
    exported_kind="iteration_stats",
    evidence="read in source, not run",
    tree_drafts="path_length",
    why={
        "drafted_includes_padding": "tensorrt_llm/_torch/pyexecutor/py_executor.py"
        " PyExecutor._update_iter_stats: draft_len = request.num_draft_tokens, or when that is"
        " 0 the count of non-zero py_draft_tokens (token id 0 is taken for padding)",
        "step_counts": "PyExecutor._update_iter_stats: num_requests_with_draft += 1 per"
        " generation request whose draft_len > 0, once per iteration",
        "accepted_includes_bonus": "numAcceptedTokens sums py_num_accepted_draft_tokens (drafts"
        " only)",
        "accept_length": "PyExecutor._update_iter_stats: acceptance_length = (accepted +"
        " requests) / requests, 0.0 with no request (the ngram drafter's own stats write 1.0);"
        " cpp/include/tensorrt_llm/executor/types.h SpecDecodingStats: 'average number of"
        " tokens produced per step for all requests with at least one draft token'",
        "exported_as": "IterationStats.specDecodingStats (numDraftTokens, numAcceptedTokens,"
        " numRequestsWithDraftTokens, acceptanceLength, iterLatencyMS, draftOverhead), served"
        " by trtllm-serve's /metrics JSON and LLM.get_stats()",
    },
)

# The profiles a step log is replayed under (`spectally compare` names these).
DECLARATIONS: dict[str, CountingDeclaration] = {
    d.profile: d for d in (LLAMACPP_REPORTS, VLLM_LEGACY_REPORTS, VLLM_034_REPORTS)
}
# Every engine declared, replayable or not.
ENGINES: dict[str, CountingDeclaration] = {
    d.profile: d
    for d in (
        LLAMACPP_REPORTS,
        VLLM_LEGACY_REPORTS,
        VLLM_034_REPORTS,
        SGLANG_REPORTS,
        LMDEPLOY_REPORTS,
        TRTLLM_REPORTS,
    )
}

# The names these declarations had before they were told apart from the counting profiles of
# reference/profile.py; docs named them, so they keep importing.
EARLIER_NAMES: dict[str, str] = {
    name: f"{name}_REPORTS"
    for name in ("LLAMACPP", "VLLM_LEGACY", "VLLM_034", "SGLANG", "LMDEPLOY", "TRTLLM")
}


def __getattr__(name: str) -> CountingDeclaration:
    """An earlier name (`EARLIER_NAMES`) gives its declaration."""
    current = EARLIER_NAMES.get(name)
    if current is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    declaration: CountingDeclaration = globals()[current]
    return declaration
