"""What a captured step log says, and what MANIFEST.json records of it.

Every driver that records a log (``capture``, ``serve_capture``, the simulated runners) checks it
the same way: the schema and the project's replay (`check_log`), the counts and the recorder's
own consistency, step_stats against the engine's totals and the blocks against step_stats
(`summarize`), the RFC counters the backport published (`backport_totals`); `manifest_numbers`
is what MANIFEST.json keeps of a run, `write_manifest` writes the capture matrix's manifest and
`markdown_table` renders it for docs/vllm-runs.md.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def backport_totals() -> dict[str, float] | None:
    """The spectally:* counters the backport published in this (engine-core) process."""
    from prometheus_client import REGISTRY
    from spectally.engine_bridge.vllm.recorder.backport import summary_key

    out: dict[str, float] = {}
    for metric in REGISTRY.collect():
        key = summary_key(metric.name)
        if key is not None:
            out[key] = sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return out or None


def check_log(path: Path) -> dict[str, Any]:
    """Schema validation (spec/step_log.schema.json) and the project's replay, when available."""
    result: dict[str, Any] = {"schema_errors": None, "replay": None}
    schema_path = Path(__file__).resolve().parents[3] / "spec" / "step_log.schema.json"
    try:
        import jsonschema

        validator = jsonschema.Draft202012Validator(json.loads(schema_path.read_text()))
        with gzip.open(path, "rt") as fh:
            result["schema_errors"] = sum(
                1 for line in fh if any(True for _ in validator.iter_errors(json.loads(line)))
            )
    except Exception as exc:  # the schema is another module's; report, do not fail the run
        result["schema_errors"] = f"not checked: {exc!r}"[:300]
    try:
        from spectally.engine_bridge.replay.dispatch import replay_file

        replay = replay_file(str(path), max_divergences=1, progress=False)
        result["replay"] = replay.status
        if replay.divergences:
            result["replay_divergence"] = replay.divergences[0].reason
        if replay.bad_input is not None:
            result["replay_divergence"] = str(replay.bad_input)[:500]
    except Exception as exc:
        result["replay"] = f"not run: {exc!r}"[:300]
    return result


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts from one step log and its consistency checks."""
    header = records[0]
    k = header["num_speculative_tokens"]
    blocks = [r for r in records if r["record"] == "request_step"]
    stats = [r for r in records if r["record"] == "step_stats"]
    totals = next((r for r in records if r["record"] == "totals"), None)
    legacy = {
        "num_drafts": sum(r["num_drafts"] for r in stats),
        "num_draft_tokens": sum(r["num_draft_tokens"] for r in stats),
        "num_accepted_tokens": sum(r["num_accepted_tokens"] for r in stats),
        "num_accepted_tokens_per_pos": [
            sum(r["num_accepted_tokens_per_pos"][i] for r in stats) for i in range(k)
        ],
    }
    # What vLLM 0.32 should have counted, re-derived from the blocks (recorder self-check); an
    # engine with the counting fix (header ``counting``) counts every applied block's proposal.
    if header.get("counting") == "rfc":
        counted = [b for b in blocks if b["outcome"] == "applied" and b["proposed"] > 0]
        drafted = sum(b["proposed"] for b in counted)
    else:
        counted = [
            b
            for b in blocks
            if b["outcome"] == "applied" and b["scheduled"] > 0 and b["sampled"] > 0
        ]
        drafted = sum(b["scheduled"] - (b["invalid"] or 0) for b in counted)
    derived = {
        "num_drafts": len(counted),
        "num_draft_tokens": drafted,
        "num_accepted_tokens": sum(b["accepted"] for b in counted),
    }
    outcomes: dict[str, int] = {}
    for b in blocks:
        outcomes[b["outcome"]] = outcomes.get(b["outcome"], 0) + 1
    events: dict[str, int] = {}
    for r in records:
        if r["record"] == "request":
            events[r["event"]] = events.get(r["event"], 0) + 1
    totals_match = totals is not None and all(totals[key] == legacy[key] for key in legacy)
    derived_match = all(derived[key] == legacy[key] for key in derived)
    return {
        "header": {key: header[key] for key in header if key != "config"},
        "records": len(records),
        "steps": max((r.get("step", 0) for r in records), default=0),
        "blocks": len(blocks),
        "proposed": sum(b["proposed"] for b in blocks),
        "padding": sum(b["padding"] for b in blocks),
        "grammar_valid": sum(b["grammar_valid"] or 0 for b in blocks),
        "scheduled": sum(b["scheduled"] for b in blocks),
        "accepted_all_blocks": sum(b["accepted"] for b in blocks),
        "grammar_cut_to_zero": sum(
            1 for b in blocks if b["grammar_valid"] == 0 and b["proposed"] > 0
        ),
        "outcomes": outcomes,
        "events": events,
        "legacy_from_step_stats": legacy,
        "legacy_from_blocks": derived,
        "totals": totals,
        "step_stats_equal_totals": totals_match,
        "blocks_equal_step_stats": derived_match,
    }


def manifest_numbers(s: dict[str, Any]) -> dict[str, Any]:
    """What MANIFEST.json records of one run's summary (shared by every driver that writes it)."""
    return {
        "header": s["header"],
        "engine_totals": s["totals"],
        "legacy_from_step_stats": s["legacy_from_step_stats"],
        "proposed": s["proposed"],
        "padding": s["padding"],
        "grammar_valid": s["grammar_valid"],
        "scheduled": s["scheduled"],
        "steps": s["steps"],
        "blocks": s["blocks"],
        "grammar_cut_to_zero": s["grammar_cut_to_zero"],
        "outcomes": s["outcomes"],
        "events": s["events"],
        "step_stats_equal_totals": s["step_stats_equal_totals"],
        "blocks_equal_step_stats": s["blocks_equal_step_stats"],
        "schema_errors": s.get("schema_errors"),
        "replay": s.get("replay"),
        "backport_rfc": s.get("backport"),
    }


def merge_run(out: Path, entry: dict[str, Any], section: str = "runs") -> None:
    """Merge one driver's run into ``OUT/MANIFEST.json``: ``entry`` joins ``section``, sorted by
    file, in place of any earlier entry for a file of the same name in either section (a rerun
    whose verdict changed moves between ``runs`` and ``known_divergences``)."""
    path = out / "MANIFEST.json"
    manifest: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"runs": []}
    name = entry["file"].split("/")[-1]
    for other in ("runs", "known_divergences"):
        if other in manifest or other == section:
            kept = manifest.get(other, [])
            manifest[other] = [e for e in kept if e["file"].split("/")[-1] != name]
    manifest[section].append(entry)
    manifest[section].sort(key=lambda e: e["file"])
    path.write_text(json.dumps(manifest, indent=1) + "\n")


def write_manifest(out_dir: Path, summaries: list[dict[str, Any]], argv: list[str]) -> Path:
    import platform

    entries = []
    for s in summaries:
        if "error" in s:
            continue
        entries.append({"file": s["file"], "config": s["config"], **manifest_numbers(s)})
    repo = Path(__file__).resolve().parents[3]
    shown: list[str] = []
    skip = False
    for i, arg in enumerate(argv):  # the command that records the whole set (no --only)
        if skip:
            skip = False
            continue
        if arg == "--only":
            skip = True
            continue
        if arg.startswith("--only="):
            continue
        if i > 0 and argv[i - 1] == "--out":
            path = Path(arg).resolve()
            arg = str(path.relative_to(repo)) if path.is_relative_to(repo) else arg
        shown.append(arg)
    manifest: dict[str, Any] = {
        "description": "Step logs recorded from a real vLLM engine by "
        "spectally.engine_bridge.vllm.capture.capture (tiny random-weight local models); "
        "see docs/vllm-runs.md",
        "command": "python -m spectally.engine_bridge.vllm.capture.capture " + " ".join(shown),
        "machine": platform.machine(),
        "runs": sorted(entries, key=lambda e: e["file"]),
    }
    path = out_dir / "MANIFEST.json"
    old = json.loads(path.read_text()) if path.exists() else None
    if old is not None:  # keep runs recorded earlier that this invocation did not redo
        have = {e["file"] for e in entries}
        kept = [e for e in old.get("runs", []) if e["file"] not in have]
        manifest["runs"] = sorted(kept + entries, key=lambda e: e["file"])
        if old.get("known_divergences"):  # pinned by async_sim.py
            manifest["known_divergences"] = old["known_divergences"]
    manifest["engine_version"] = _engine_version(manifest["runs"])
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return path


def _engine_version(entries: list[dict[str, Any]]) -> str | None:
    versions = {e["header"].get("engine_version") for e in entries}
    return versions.pop() if len(versions) == 1 else None


def markdown_table(manifest: dict[str, Any]) -> str:
    """Per configuration: proposed, the engine's legacy counters, and the RFC counters."""
    rows = [
        "| run | k | proposed | scheduled | legacy drafts | legacy drafted | legacy accepted "
        "| legacy rate | RFC drafted | RFC verified | RFC accepted | RFC steps | engine steps "
        "| outcomes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in manifest["runs"]:
        t = e["engine_totals"]
        rfc = e.get("backport_rfc") or {}
        rate = t["num_accepted_tokens"] / t["num_draft_tokens"] if t["num_draft_tokens"] else 0.0

        def n(key: str, rfc: dict[str, Any] = rfc) -> str:
            return str(int(rfc[key])) if key in rfc else "-"

        outcomes = ", ".join(
            f"{key.removeprefix('discarded_')} {value}" for key, value in e["outcomes"].items()
        )
        rows.append(
            f"| {e['file'].removesuffix('.ndjson.gz')} | {e['header']['num_speculative_tokens']} "
            f"| {e['proposed']} | {e['scheduled']} | {t['num_drafts']} "
            f"| {t['num_draft_tokens']} | {t['num_accepted_tokens']} | {rate:.3f} "
            f"| {n('drafted_tokens')} | {n('verified_tokens')} | {n('accepted_tokens')} "
            f"| {n('spec_steps')} | {e['steps']} | {outcomes} |"
        )
    return "\n".join(rows)
