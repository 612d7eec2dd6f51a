"""Render spec/otel/README.md from the OpenTelemetry semantic-conventions model beside it
(`registry.yaml`, `metrics.yaml`), in the tables the conventions' own generator writes
(`<!-- semconv ... -->` blocks: a metric table, then its attribute table).

    python -m spectally.spec.otel_docs          # rewrite spec/otel/README.md
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent / "otel"
OUT = HERE / "README.md"
STABILITY = {"development": "![Development](https://img.shields.io/badge/-development-blue)"}
LEVELS = {"recommended": "`Recommended`", "required": "`Required`", "opt_in": "`Opt-In`"}

# The core counter and vLLM's Prometheus series each metric carries (CORE.md section 7).
ALIGNED = {
    "gen_ai.server.speculative_decoding.draft_tokens": (
        "drafted",
        "vllm:spec_decode_num_draft_tokens_total",
    ),
    "gen_ai.server.speculative_decoding.verified_tokens": (
        "verified",
        "vllm:spec_decode_num_verified_draft_tokens_total",
    ),
    "gen_ai.server.speculative_decoding.accepted_tokens": (
        "accepted",
        "vllm:spec_decode_num_accepted_tokens_total",
    ),
    "gen_ai.server.speculative_decoding.steps": ("spec_steps", "vllm:spec_decode_num_drafts_total"),
    "gen_ai.server.speculative_decoding.zero_draft_steps": (
        "zero_draft_steps",
        "vllm:spec_decode_num_zero_draft_steps_total",
    ),
}

INTRO = """\
# Semantic conventions for GenAI speculative-decoding metrics (proposal)

**Status**: proposal, every item `development`. The model is `registry.yaml` (attributes) and
`metrics.yaml` (metrics) in the semantic-conventions YAML format (`groups`, `type: metric`,
`metric_name`, `instrument: counter`, `unit`, attribute `ref`s with requirement levels); this page
is generated from them by `python -m spectally.spec.otel_docs` in the layout of the conventions'
own tables, and the tests fail when it is stale.

The GenAI conventions have no speculative-decoding metric; the only mention is
open-telemetry/semantic-conventions-genai#231, which lists "50 accepted + 200 drafted" among the
cases where token counts are double-counted. These metrics keep draft tokens out of token usage:
accepted draft tokens are output tokens already, and draft, verified and accepted tokens are
three nested counts, not a partition, so each is its own counter. Each metric carries one counter
of [CORE.md](../CORE.md) (section 7) with exactly its meaning, under names aligned with vLLM's
Prometheus series; the engine annexes ([../annexes/](../annexes/)) map every engine's names onto
them. Counters, not gauges: every ratio is derived from them over any window
(acceptance rate = `accepted_tokens / draft_tokens`; mean acceptance length =
`1 + accepted_tokens / steps`; draft quality = `accepted_tokens / verified_tokens`). Names follow
the naming guidance for counters (no `total` suffix; a counter of a non-unit such as `{token}`
is pluralized).

| metric | CORE.md counter | vLLM series | level |
|---|---|---|---|
"""


def _load(name: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load((HERE / name).read_text(encoding="utf-8"))
    groups: list[dict[str, Any]] = doc["groups"]
    return groups


def _flat(text: str) -> str:
    return " ".join(str(text).split())


def _attr_row(attr: dict[str, Any], ref: dict[str, Any]) -> str:
    kind = attr["type"]
    if isinstance(kind, dict):
        values = "; ".join(f"`{m['value']}`" for m in kind["members"])
        kind, examples = "string", values
    else:
        examples = "; ".join(f"`{e}`" for e in attr.get("examples", []))
    level = LEVELS[ref.get("requirement_level", "recommended")]
    return (
        f"| `{attr['id']}` | {kind} | {_flat(attr['brief'])} | {examples} | {level} |"
        f" {STABILITY.get(attr.get('stability', ''), '')} |"
    )


def render() -> str:
    registry = {a["id"]: a for g in _load("registry.yaml") for a in g["attributes"]}
    groups = _load("metrics.yaml")
    by_id = {g["id"]: g for g in groups}
    metrics = [g for g in groups if g["type"] == "metric"]
    levels = {"verified_tokens": "L2", "zero_draft_steps": "L3"}
    out = [INTRO]
    for m in metrics:
        core, vllm = ALIGNED[m["metric_name"]]
        level = levels.get(m["metric_name"].rsplit(".", 1)[-1], "L1")
        out.append(f"| `{m['metric_name']}` | `{core}` | `{vllm}` | {level} |\n")
    for m in metrics:
        name = m["metric_name"]
        out.append(f"\n## Metric: `{name}`\n\n{_flat(m['note'])}\n\n")
        out.append(f"<!-- semconv {m['id']}(metric_table) -->\n")
        out.append("| Name | Instrument Type | Unit (UCUM) | Description | Stability |\n")
        out.append("| --- | --- | --- | --- | --- |\n")
        out.append(
            f"| `{name}` | {m['instrument'].capitalize()} | `{m['unit']}` |"
            f" {_flat(m['brief'])} | {STABILITY[m['stability']]} |\n"
        )
        out.append("<!-- endsemconv -->\n\n")
        refs = list(by_id[m["extends"]]["attributes"]) + list(m.get("attributes", []))
        out.append(f"<!-- semconv {m['id']}(full) -->\n")
        out.append(
            "| Attribute | Type | Description | Examples | Requirement Level | Stability |\n"
        )
        out.append("| --- | --- | --- | --- | --- | --- |\n")
        for ref in refs:
            attr = registry.get(ref["ref"])
            if attr is None:  # an existing GenAI attribute, defined by the conventions
                level = LEVELS[ref["requirement_level"]]
                out.append(f"| `{ref['ref']}` | | (GenAI registry) | | {level} | |\n")
            else:
                out.append(_attr_row(attr, ref) + "\n")
        out.append("<!-- endsemconv -->\n")
    return "".join(out)


def main() -> int:
    OUT.write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
