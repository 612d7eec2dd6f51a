"""The vLLM 0.33.0 profile decision rests on evidence pinned in the repository: the source of
every counting function of vLLM 0.32.0 and 0.33.0, hashed (engine_bridge/vllm/counting_source.py,
counting_source.json). The replay's profile table must follow it: a release whose counting source
equals 0.32.0's gets the vllm-legacy profile, anything else none. The next release is compared
with `python -m spectally.engine_bridge.vllm.counting_source WHEEL`."""

from __future__ import annotations

import ast

import pytest
from spectally.engine_bridge.translate import LEGACY_PROFILE, profile_for
from spectally.engine_bridge.vllm import counting_source as cs


def test_pinned_text_is_what_the_baseline_hashes_say() -> None:
    pin = cs.load_pin()
    baseline = pin["releases"][cs.BASELINE]
    assert set(baseline) == set(cs.TARGETS)
    for name, text in pin["text"].items():
        assert cs.digest(text) == baseline[name], name
    assert set(pin["text"]) == set(cs.TARGETS)  # every baseline target has its text


def test_every_pinned_release_has_every_target() -> None:
    pin = cs.load_pin()
    assert {"0.32.0", "0.33.0"} <= set(pin["releases"])
    for version, hashes in pin["releases"].items():
        assert set(hashes) == set(cs.TARGETS), version
        for name in cs.COUNTING:
            assert hashes[name] != cs.ABSENT, (version, name)


@pytest.mark.parametrize("version", sorted(cs.load_pin()["releases"]))
def test_profile_table_follows_the_source_evidence(version: str) -> None:
    pin = cs.load_pin()
    hashes = pin["releases"][version]
    changed = [n for n in cs.TARGETS if hashes[n] != pin["releases"][cs.BASELINE][n]]
    expected = LEGACY_PROFILE if cs.same_counting(changed) else None
    assert profile_for("vllm", version) == expected


def test_0_33_counting_is_unchanged_and_only_delivery_moved() -> None:
    pin = cs.load_pin()
    base, new = pin["releases"][cs.BASELINE], pin["releases"]["0.33.0"]
    changed = sorted(n for n in cs.TARGETS if base[n] != new[n])
    assert changed == sorted(cs.DELIVERY)  # the async override was folded into Scheduler
    assert profile_for("vllm", "0.33.0") == LEGACY_PROFILE
    assert profile_for("vllm", "0.34.0") is None  # no evidence yet: refused


SCHED = """
class Scheduler:
    def update_from_output(self, so, out):
        for req_id in so:
            if output_is_stale and request.drop_stale_output:
                continue
            if scheduled_spec_token_ids and generated_token_ids:
                stats = self.make_spec_decoding_stats(stats, num_draft_tokens=len(x))
        return stats

    def _preempt_request(self, request):
        request.status = PREEMPTED
        request.drop_stale_output = drop
        request.num_stale_output_tokens = request.num_in_flight_tokens
"""


def test_extraction_locates_statements_and_sees_a_one_character_change() -> None:
    tree = ast.parse(SCHED)
    func = cs._find_function(cs._find_class(tree, "Scheduler"), "update_from_output")
    spec = ast.get_source_segment(SCHED, cs._innermost_if(func, SCHED, "make_spec_decoding_stats"))
    assert spec is not None and spec.startswith("if scheduled_spec_token_ids")
    stale = ast.get_source_segment(SCHED, cs._innermost_if(func, SCHED, "drop_stale_output"))
    assert stale is not None and stale.startswith("if output_is_stale")
    preempt = cs._find_function(cs._find_class(tree, "Scheduler"), "_preempt_request")
    picked = cs._statements(preempt, SCHED, ["stale"])
    assert "status" not in picked and picked.count("stale") == 2
    mutated = SCHED.replace("len(x)", "len(x) - 1")
    tree2 = ast.parse(mutated)
    func2 = cs._find_function(cs._find_class(tree2, "Scheduler"), "update_from_output")
    spec2 = ast.get_source_segment(
        mutated, cs._innermost_if(func2, mutated, "make_spec_decoding_stats")
    )
    assert cs.digest(spec2) != cs.digest(spec)
