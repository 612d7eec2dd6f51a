"""CORE.md, the engine annexes and the OpenTelemetry proposal agree with one another: every
metric name CORE.md proposes is in the OpenTelemetry model, every annex maps onto names that
exist, and spec/otel/README.md is what the model generates."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from spectally.spec import otel_docs

ROOT = Path(__file__).parents[2]
SPEC = ROOT / "spec"
ANNEXES = ("vllm", "llamacpp", "sglang", "lmdeploy", "tensorrt-llm")


def otel_metrics() -> dict[str, dict[str, object]]:
    doc = yaml.safe_load((SPEC / "otel" / "metrics.yaml").read_text())
    return {g["metric_name"]: g for g in doc["groups"] if g["type"] == "metric"}


def otel_attributes() -> set[str]:
    doc = yaml.safe_load((SPEC / "otel" / "registry.yaml").read_text())
    return {a["id"] for g in doc["groups"] for a in g["attributes"]}


def test_the_otel_page_is_what_the_model_generates() -> None:
    assert (SPEC / "otel" / "README.md").read_text() == otel_docs.render(), (
        "spec/otel/README.md is stale: run python -m spectally.spec.otel_docs"
    )


def test_every_otel_metric_is_a_counter_of_a_core_quantity() -> None:
    metrics = otel_metrics()
    assert set(metrics) == set(otel_docs.ALIGNED)
    for name, m in metrics.items():
        assert m["instrument"] == "counter", name
        assert m["unit"] in ("{token}", "{step}"), name
        assert not name.endswith("total"), name


def test_core_names_only_metrics_and_attributes_the_model_defines() -> None:
    core = (SPEC / "CORE.md").read_text()
    named = set(re.findall(r"`(gen_ai\.server\.speculative_decoding\.[a-z_]+)`", core))
    assert named and named <= set(otel_metrics())
    attrs = set(re.findall(r"`(gen_ai\.speculative_decoding\.[a-z_.]+)", core))
    assert attrs and attrs <= otel_attributes()


def test_each_annex_maps_onto_names_that_exist() -> None:
    metrics = otel_metrics()
    core = (SPEC / "CORE.md").read_text()
    for engine in ANNEXES:
        text = (SPEC / "annexes" / f"{engine}.md").read_text()
        assert "## Names" in text and "## Level today and what it takes" in text, engine
        for level in ("**L1**", "**L2**", "**L3**"):
            assert level in text, (engine, level)
        for full in re.findall(r"`(gen_ai\.server\.speculative_decoding\.[a-z_]+)`", text):
            assert full in metrics, (engine, full)
        for rule in re.findall(r"\bC-[A-Z]+[0-9]+\b", text):
            assert f"**[{rule}]" in core, (engine, rule)


def test_core_stays_short() -> None:
    lines = [ln for ln in (SPEC / "CORE.md").read_text().splitlines() if ln.strip()]
    assert len(lines) <= 160, len(lines)
