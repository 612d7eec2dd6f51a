"""Real llama-server runs, replayed: tests/fixtures/llamacpp/ (written by
scripts/capture_llamacpp.py from a llama-server built from the llama-cpp-python 0.3.36 sdist).

For each captured scenario: the server log, imported with its /metrics scrapes and responses,
gives exactly the committed step log, every check of the import agrees, and the replay AGREEs
with totals equal to the /metrics delta (the replay compares them). The recurrent (Mamba)
target's log has restore-and-replay pairs, counted once.

The live tier (``pytest -m llamacpp``, README) builds the server and captures afresh.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from spectally.engine_bridge.llamacpp import promtext
from spectally.engine_bridge.llamacpp.importer import Imported, import_log
from spectally.engine_bridge.replay.dispatch import replay_file

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "llamacpp"
SCENARIOS = sorted(p.name.removesuffix(".server.log") for p in FIXTURES.glob("*.server.log"))


def steps(base: Path) -> list[str]:
    return gzip.decompress(Path(f"{base}.steps.ndjson.gz").read_bytes()).decode().splitlines()


def imported(base: Path) -> Imported:
    return import_log(
        f"{base}.server.log",
        metrics_before=f"{base}.metrics.before",
        metrics_after=f"{base}.metrics.after",
        responses=f"{base}.responses.json",
    )  # k: the length of /metrics' per-position counter, the server's --spec-draft-n-max


@pytest.mark.parametrize("name", SCENARIOS)
def test_import_is_the_committed_step_log(name: str) -> None:
    base = FIXTURES / name
    result = imported(base)
    assert result.exit_code == 0, (result.divergences, result.incomplete)
    committed = [json.loads(line) for line in steps(base)]
    assert result.records == committed


@pytest.mark.parametrize("name", SCENARIOS)
def test_replay_agrees_with_metrics(name: str) -> None:
    base = FIXTURES / name
    result = replay_file(f"{base}.steps.ndjson.gz", reference=True, progress=False)
    assert result.status == "agree", [d.render() for d in result.divergences]
    delta = promtext.read(f"{base}.metrics.after").minus(promtext.read(f"{base}.metrics.before"))
    reported = result.summary["totals"]["vllm-legacy"]
    assert (reported["spec_steps"], reported["drafted"], reported["accepted"]) == (
        delta.num_drafts,
        delta.num_draft_tokens,
        delta.num_accepted_tokens,
    )
    assert delta.num_drafts > 0


def test_the_capture_covers_the_matrix() -> None:
    assert {"same", "noise05", "unrelated", "mamba", "vllm-workload"} <= set(SCENARIOS)
    responses = json.loads((FIXTURES / "same.responses.json").read_text())
    kinds = {k for r in responses for k in ("grammar", "json_schema", "stop") if k in r["request"]}
    assert kinds == {"grammar", "json_schema", "stop"}
    assert {r["request"]["temperature"] for r in responses} == {0.0, 0.8}


@pytest.mark.skipif("mamba" not in SCENARIOS, reason="no recurrent capture")
def test_recurrent_pairs_are_counted_once() -> None:
    base = FIXTURES / "mamba"
    lines = steps(base)
    assert json.loads(lines[0])["meta"]["recurrent_replays"] > 0
    log = Path(f"{base}.server.log").read_text()
    restores = log.count("(restore checkpoint)")
    verifications = log.count(" draft tokens")
    assert restores > 0
    assert sum('"record":"request_step"' in s for s in lines) == verifications - restores


@pytest.mark.llamacpp
def test_live_capture_replays_agree(tmp_path: Path) -> None:
    """Build llama-server (cached), capture every scenario afresh, import and replay."""
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "capture_llamacpp.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert "all AGREE" in res.stdout
