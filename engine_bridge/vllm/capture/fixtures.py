"""Check the committed vLLM step logs against their MANIFEST (no vLLM needed).

For every entry of ``tests/fixtures/vllm/MANIFEST.json``:

* ``runs``: the log re-summarises to the MANIFEST's numbers, its recorded ``step_stats`` sum to
  the engine's ``totals`` record, and the project's replay (reference ``vllm-legacy`` profile)
  agrees with every record;
* ``known_divergences`` (files under ``known_divergences/``, so that every top-level log
  replays clean): the replay still diverges, for the recorded reason (a contract gap pinned as
  a scenario; once the contract can express it, the entry moves to ``runs``).

::

    python -m spectally.engine_bridge.vllm.capture.fixtures [DIR]      # exit 1 on any problem

A test can call `check_fixtures` and assert it returns no problems.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

from spectally.engine_bridge.vllm.capture.manifest import summarize

DEFAULT_DIR = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "vllm"
COMPARED = ("proposed", "padding", "scheduled", "steps", "blocks", "outcomes", "events")


def _records(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh]


def check_fixtures(directory: Path = DEFAULT_DIR) -> list[str]:
    """Problems found (empty = every fixture is what its MANIFEST says)."""
    from spectally.engine_bridge.replay.dispatch import replay_file

    manifest = json.loads((directory / "MANIFEST.json").read_text())
    problems: list[str] = []
    for entry in manifest.get("runs", []):
        path = directory / entry["file"]
        summary = summarize(_records(path))
        for key in COMPARED:
            if summary[key] != entry[key]:
                problems.append(f"{entry['file']}: {key} {summary[key]!r} != {entry[key]!r}")
        if summary["totals"] != entry["engine_totals"]:
            problems.append(f"{entry['file']}: totals record differs from MANIFEST")
        if not summary["step_stats_equal_totals"]:
            problems.append(f"{entry['file']}: step_stats do not sum to the totals record")
        for artifact in entry.get("artifacts", {}).values():
            if not (directory / artifact).exists():
                problems.append(f"{entry['file']}: artifact {artifact} missing")
        result = replay_file(str(path), max_divergences=1, progress=False)
        if result.status != "agree":
            reason = result.divergences[0].reason if result.divergences else result.bad_input
            problems.append(f"{entry['file']}: replay {result.status}: {reason}")
    for entry in manifest.get("known_divergences", []):
        path = directory / entry["file"]
        result = replay_file(str(path), max_divergences=1, progress=False)
        reason = result.divergences[0].reason if result.divergences else None
        if result.status != "diverge" or reason != entry.get("replay_divergence"):
            problems.append(
                f"{entry['file']}: expected the pinned divergence, got {result.status}: {reason}"
            )
    listed = {e["file"] for e in manifest.get("runs", []) + manifest.get("known_divergences", [])}
    for path in sorted(directory.rglob("*.ndjson.gz")):
        name = str(path.relative_to(directory))
        if name not in listed:
            problems.append(f"{name}: not in MANIFEST.json")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0]) if args else DEFAULT_DIR
    problems = check_fixtures(directory)
    for problem in problems:
        print(problem)
    manifest = json.loads((directory / "MANIFEST.json").read_text())
    n = len(manifest.get("runs", [])) + len(manifest.get("known_divergences", []))
    print(f"{n - len(problems)}/{n} fixtures as their MANIFEST says" if problems else f"{n} ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
