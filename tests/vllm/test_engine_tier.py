"""Live-engine tier (`pytest -m engine`): record fresh logs from a real vLLM 0.32 engine on
this CPU and replay them through the reference.

Build the environment first, as its own step (`.ci/run` does):
`python3 engine_bridge/vllm/capture/env.py` (minutes on a fresh machine, outside the repository; no
arctic-inference: no quick run uses suffix decoding). `scripts/capture_vllm.sh --quick` then builds
the tiny local models and records the quick configurations: ngram, a noisy draft model at
temperature > 0 with the CPU kernel fix, JSON-schema structured outputs, the sync/async pair of one
SO + draft_model workload with the real `AsyncScheduler` (cpu_async.py), aborts between steps (issue
12's reproductions) under both schedulers, and stop strings (aborts from the output processor) under
async. Each log must replay with 100 % agreement, and its totals must equal the engine's own
`get_metrics()` snapshot taken in the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

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
    assert {
        "ngram-k3-greedy",
        "draft-noise05-k3-so-json-xgrammar",
        "sync-draft-noise05-k3-so-json-xgrammar",
        "async-draft-noise05-k3-so-json-xgrammar",
        "sync-draft-noise05-k3-interleave",
        "async-draft-noise05-k3-interleave",
        "async-draft-noise05-k3-stop",
    } <= names
    assert len(list(recorded.glob("*.ndjson.gz"))) == len(manifest["runs"]) >= 8


def _records(path: Path) -> list[dict[str, object]]:
    import gzip

    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh]


def test_async_runs_are_real_and_aborts_land_between_steps(recorded: Path) -> None:
    """The async logs come from vLLM's AsyncScheduler on the CPU engine; the interleave and stop
    runs contain aborts, and every block states what the engine delivered."""
    logs = {p.name.removesuffix(".ndjson.gz"): _records(p) for p in recorded.glob("*.ndjson.gz")}
    for name in ("async-draft-noise05-k3-so-json-xgrammar", "async-draft-noise05-k3-interleave"):
        header = logs[name][0]
        assert header["scheduling"] == "async", name
        config = header["config"]
        assert isinstance(config, dict)
        assert config["scheduler_cls"].endswith("RecordingAsyncScheduler"), name
    for name in ("sync-draft-noise05-k3-interleave", "async-draft-noise05-k3-interleave"):
        events = [r.get("event") for r in logs[name]]
        assert events.count("abort") >= 3, name
    stop = logs["async-draft-noise05-k3-stop"]
    assert [r.get("event") for r in stop].count("abort") >= 1  # matched stop strings
    for name, records in logs.items():
        blocks = [r for r in records if r["record"] == "request_step"]
        assert blocks and all(isinstance(b.get("delivered"), int) for b in blocks), name


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
