"""SPEC.md's "what changes for users" table, measured on the project's committed runs.

Each run (a step log under tests/fixtures/vllm/ or engine_bridge/examples/, recorded from a real
vLLM engine or from vLLM's real scheduler driven by the simulation) is replayed through the
reference, which counts it under both profiles: what that vLLM version exported (vllm-legacy) and
what this specification exports (rfc). The table prints both and the shift, naming the run.
Deployment shapes no committed run has (schedule truncation under budget pressure, P/D padding,
adaptive verification) are given per block from the conformance vector that pins them, and
marked as such. `render.py` writes the table into SPEC.md.

The spec sits beside the replay in the import layers, never above it, so the replayed totals
are data: `user_changes.json`, written by ``python scripts/measure_user_changes.py`` (which
replays every run of RUNS). The tests replay the runs again and fail when the file is stale;
a new fixture is one line in RUNS and a rerun of that script.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MEASURED_PATH = Path(__file__).with_name("user_changes.json")
# The totals each run's row prints: (profile, counter) pairs, in the file's order.
MEASURED_FIELDS: dict[str, tuple[str, ...]] = {
    "legacy": ("num_drafts", "num_draft_tokens", "num_accepted_tokens"),
    "rfc": ("drafted", "verified", "accepted", "spec_steps", "truncated", "padding"),
}


@dataclass(frozen=True)
class MeasuredRun:
    shape: str  # the deployment shape, as a user would name it
    path: str  # relative to the repository root


RUNS: tuple[MeasuredRun, ...] = (
    MeasuredRun("plain, sync", "tests/fixtures/vllm/draft-noise05-k3-greedy.ndjson.gz"),
    MeasuredRun("plain, async", "tests/fixtures/vllm/async-draft-noise05-k3-stop.ndjson.gz"),
    MeasuredRun("plain, ngram, sync", "tests/fixtures/vllm/ngram-k3-greedy.ndjson.gz"),
    MeasuredRun(
        "structured output, sync",
        "tests/fixtures/vllm/sync-draft-noise05-k3-so-json-xgrammar.ndjson.gz",
    ),
    MeasuredRun(
        "structured output, async",
        "tests/fixtures/vllm/async-draft-noise05-k3-so-json-xgrammar.ndjson.gz",
    ),
    MeasuredRun(
        "structured output, ngram, sync",
        "tests/fixtures/vllm/ngram-k3-so-json-xgrammar.ndjson.gz",
    ),
    MeasuredRun(
        "preemption, async", "tests/fixtures/vllm/async-draft-noise05-k3-preempt.ndjson.gz"
    ),
    MeasuredRun(
        "preemption with drop, async",
        "tests/fixtures/vllm/async-draft-noise05-k3-reset-drop.ndjson.gz",
    ),
    MeasuredRun(
        "vLLM 0.33.0 scheduler (simulated model), async",
        "tests/fixtures/vllm/sim-vllm-0.33.0-async-draft-k3.ndjson.gz",
    ),
    MeasuredRun(
        "structured output, sync, 0.33.0 scheduler (simulated model)",
        "tests/fixtures/vllm/sim-vllm-0.33.0-sync-so-json-k4.ndjson.gz",
    ),
    MeasuredRun(
        "structured output, async, 0.33.0 scheduler (simulated model)",
        "tests/fixtures/vllm/sim-vllm-0.33.0-async-so-json-k4.ndjson.gz",
    ),
    MeasuredRun(
        "structured output, sync, 0.34.0 scheduler (simulated model)",
        "tests/fixtures/vllm/sim-vllm-0.34.0-sync-so-json-k4.ndjson.gz",
    ),
    MeasuredRun(
        "structured output, async, 0.34.0 scheduler (simulated model)",
        "tests/fixtures/vllm/sim-vllm-0.34.0-async-so-json-k4.ndjson.gz",
    ),
)

# Shapes no committed run has: the vector that pins each, one block (simulated, not a run).
VECTOR_SHAPES: tuple[tuple[str, str], ...] = (
    ("schedule truncation (token budget / max_model_len)", "schedule-cut-sync"),
    ("schedule cut to zero drafts", "schedule-cut-to-zero"),
    ("uniform padding of a new decode request (P/D, prefix-cache hit)", "padding-only-pd"),
    ("adaptive verification + async SO (the RFC's row)", "rfc-row-async-av-grammar"),
    ("adaptive verification budget 0", "av-budget-zero"),
)


def _ratio(num: int, den: int, offset: float = 0.0) -> str:
    return "n/a" if den == 0 else f"{offset + num / den:.3f}"


@cache
def measured() -> dict[str, Any]:
    """Each run's version and totals, by path, as `user_changes.json` holds them."""
    data: dict[str, Any] = json.loads(MEASURED_PATH.read_text(encoding="utf-8"))
    return data


def run_rows() -> list[str]:
    rows = [
        "| shape | run (fixture) | vLLM | drafted (num_draft_tokens) | spec steps (num_drafts)"
        " | accepted | acceptance rate | mean acceptance length | verified (new) | truncated"
        " / padding |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in RUNS:
        m = measured()[run.path]
        r, lg = m["rfc"], m["legacy"]
        name = Path(run.path).name.removesuffix(".ndjson.gz")
        rows.append(
            f"| {run.shape} | `{name}` | {m['version']}"
            f" | {lg['num_draft_tokens']} → {r['drafted']}"
            f" | {lg['num_drafts']} → {r['spec_steps']}"
            f" | {lg['num_accepted_tokens']} → {r['accepted']}"
            f" | {_ratio(lg['num_accepted_tokens'], lg['num_draft_tokens'])}"
            f" → {_ratio(r['accepted'], r['drafted'])}"
            f" | {_ratio(lg['num_accepted_tokens'], lg['num_drafts'], 1.0)}"
            f" → {_ratio(r['accepted'], r['spec_steps'], 1.0)}"
            f" | {r['verified']} | {r['truncated']} / {r['padding']} |"
        )
    return rows


def vector_rows(doc: dict[str, Any]) -> list[str]:
    rows = [
        "| shape (one block, simulated) | vector | drafted | spec steps | accepted |"
        " verified (new) | padding |",
        "|---|---|---|---|---|---|---|",
    ]
    by_name = {v["name"]: v for v in doc["vectors"]}
    for shape, name in VECTOR_SHAPES:
        exp = by_name[name]["expect"]
        r, lg = exp["rfc"], exp["vllm-legacy"]
        rows.append(
            f"| {shape} | `{name}` | {lg['drafted']} → {r['drafted']}"
            f" | {lg['spec_steps']} → {r['spec_steps']} | {lg['accepted']} → {r['accepted']}"
            f" | {r['verified']} | {r.get('padding', 0)} |"
        )
    return rows


def render_changes(doc: dict[str, Any]) -> str:
    """The generated body: measured runs, then the shapes only vectors cover."""
    lines = [
        "Measured: each committed run replayed under both profiles (old → new; vLLM's"
        " exported value, then this specification's). Acceptance rate = accepted / drafted;"
        " mean acceptance length = 1 + accepted / spec steps (old: / num_drafts).",
        "",
        *run_rows(),
        "",
        "No committed run has a truncated draft or a padding slot (last column). Those shapes,"
        " and adaptive verification (CUDA graphs only), are given per block by the vector that"
        " pins them, not by a run:",
        "",
        *vector_rows(doc),
    ]
    return "\n".join(lines)
