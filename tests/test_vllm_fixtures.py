"""The committed real vLLM logs (tests/fixtures/vllm/, recorded by scripts/capture_vllm.sh)
are what their MANIFEST says: re-summarised numbers, step_stats summing to the engine's own
get_metrics() totals, and a replay that agrees with every record (known contract gaps stay
pinned as divergences). No vLLM needed."""

from __future__ import annotations

import gzip
import json

from spectally.engine_bridge.vllm.fixtures import DEFAULT_DIR, check_fixtures


def test_every_fixture_matches_its_manifest_and_replays_as_recorded() -> None:
    assert check_fixtures() == []


def test_manifest_totals_are_the_engines_own() -> None:
    """Each log's closing `totals` record is the get_metrics() snapshot stored in MANIFEST."""
    manifest = json.loads((DEFAULT_DIR / "MANIFEST.json").read_text())
    assert len(manifest["runs"]) >= 20
    for run in manifest["runs"]:
        with gzip.open(DEFAULT_DIR / run["file"], "rt") as fh:
            last = json.loads(fh.read().splitlines()[-1])
        assert last["record"] == "totals", run["file"]
        assert last == run["engine_totals"], run["file"]
