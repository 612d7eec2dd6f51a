"""Replay every run of SPEC.md's "what changes for users" table and write its totals.

    .venv/bin/python scripts/measure_user_changes.py          # rewrite spec/user_changes.json
    .venv/bin/python scripts/measure_user_changes.py --check  # exit 1 if the file is stale

The spec package may not import the replay (the import layers keep spec and engine_bridge
apart), so the replayed totals are committed as data (`spectally.spec.user_changes`) and this
script, which may use both, measures them: the plain reference replay of each run, which must
agree, counted under the run's own profile (vLLM's exported counters) and the rfc profile.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from typing import Any

from spectally.engine_bridge.replay.dispatch import replay_reference
from spectally.exit_codes import ExitCode, Verdict
from spectally.spec.user_changes import MEASURED_FIELDS, MEASURED_PATH, REPO, RUNS


def _version(path: str) -> str:
    with gzip.open(REPO / path, "rt", encoding="utf-8") as f:
        return str(json.loads(f.readline())["engine_version"])


def measure(path: str) -> dict[str, Any]:
    """One run's version and the totals its table row prints."""
    result = replay_reference(str(REPO / path), progress=False)
    if result.status != Verdict.AGREE or result.totals is None:
        raise ValueError(f"{path}: replay says {result.status}; fix the fixture first")
    profiles = {"legacy": result.totals.legacy, "rfc": result.totals.rfc}
    out: dict[str, Any] = {"version": _version(path)}
    for profile, fields in MEASURED_FIELDS.items():
        out[profile] = {f: getattr(profiles[profile], f) for f in fields}
    return out


def measure_all() -> dict[str, Any]:
    return {run.path: measure(run.path) for run in RUNS}


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    fresh = json.dumps(measure_all(), indent=1, sort_keys=True) + "\n"
    old = MEASURED_PATH.read_text(encoding="utf-8") if MEASURED_PATH.exists() else ""
    if fresh == old:
        return ExitCode.OK
    if args.check:
        print(f"{MEASURED_PATH}: stale; run python scripts/measure_user_changes.py")
        return ExitCode.DIVERGENCE
    MEASURED_PATH.write_text(fresh, encoding="utf-8")
    print(f"{MEASURED_PATH}: rewritten")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
