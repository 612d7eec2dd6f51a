"""`manifest.merge_run`: how every capture driver merges its run into MANIFEST.json."""

from __future__ import annotations

import json
from pathlib import Path

from spectally.engine_bridge.vllm.capture.manifest import merge_run


def _read(out: Path) -> dict[str, list[dict[str, str]]]:
    data: dict[str, list[dict[str, str]]] = json.loads((out / "MANIFEST.json").read_text())
    return data


def test_a_new_manifest_holds_the_run(tmp_path: Path) -> None:
    merge_run(tmp_path, {"file": "b.ndjson.gz", "n": "1"})
    assert _read(tmp_path) == {"runs": [{"file": "b.ndjson.gz", "n": "1"}]}


def test_a_rerun_replaces_its_entry_and_the_runs_stay_sorted(tmp_path: Path) -> None:
    for name in ("c", "a", "b"):
        merge_run(tmp_path, {"file": f"{name}.ndjson.gz", "n": "old"})
    merge_run(tmp_path, {"file": "b.ndjson.gz", "n": "new"})
    runs = _read(tmp_path)["runs"]
    assert [(e["file"], e["n"]) for e in runs] == [
        ("a.ndjson.gz", "old"),
        ("b.ndjson.gz", "new"),
        ("c.ndjson.gz", "old"),
    ]


def test_a_run_whose_verdict_changed_moves_between_sections(tmp_path: Path) -> None:
    merge_run(tmp_path, {"file": "x.ndjson.gz"})
    merge_run(tmp_path, {"file": "known_divergences/x.ndjson.gz"}, "known_divergences")
    assert _read(tmp_path) == {
        "runs": [],
        "known_divergences": [{"file": "known_divergences/x.ndjson.gz"}],
    }
    merge_run(tmp_path, {"file": "x.ndjson.gz"})
    assert _read(tmp_path) == {"runs": [{"file": "x.ndjson.gz"}], "known_divergences": []}
