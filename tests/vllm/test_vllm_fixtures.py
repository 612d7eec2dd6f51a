"""The committed real vLLM logs (tests/fixtures/vllm/, recorded by scripts/capture_vllm.sh)
are what their MANIFEST says: re-summarised numbers, step_stats summing to the engine's own
get_metrics() totals, and a replay that agrees with every record (known contract gaps stay
pinned as divergences). No vLLM needed."""

from __future__ import annotations

import gzip
import json

from spectally.engine_bridge.vllm.capture.fixtures import DEFAULT_DIR, check_fixtures


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


EXAMPLES = DEFAULT_DIR.parents[2] / "engine_bridge" / "examples"
PAIR = {
    "vllm-0.32-cpu-sync-draft-model-so-json.ndjson.gz": "sync-draft-noise05-k3-so-json-xgrammar",
    "vllm-0.32-cpu-async-draft-model-so-json.ndjson.gz": "async-draft-noise05-k3-so-json-xgrammar",
}


def test_readme_pair_is_one_workload_under_both_schedulers() -> None:
    """The README's sync/async example pair: copies of committed fixtures; same requests and
    accepted tokens; vLLM's spec steps differ between the modes, the rfc profile's do not."""
    from spectally.engine_bridge.replay.dispatch import replay_file

    totals = {}
    for example, fixture in PAIR.items():
        data = (EXAMPLES / example).read_bytes()
        assert data == (DEFAULT_DIR / f"{fixture}.ndjson.gz").read_bytes(), example
        result = replay_file(str(EXAMPLES / example), max_divergences=1, progress=False)
        assert result.status == "agree", example
        assert result.summary is not None
        totals[example.split("-")[3]] = result.summary["totals"]
    sync, async_ = totals["sync"], totals["async"]
    assert sync["vllm-legacy"]["accepted"] == async_["vllm-legacy"]["accepted"]
    assert sync["vllm-legacy"]["spec_steps"] < async_["vllm-legacy"]["spec_steps"]
    assert sync["rfc"]["spec_steps"] == async_["rfc"]["spec_steps"]
    assert sync["rfc"]["accepted"] == async_["rfc"]["accepted"]
