"""`import prometheus` on vLLM served through Ray Serve, on gauges versus counters, and the
counts in its messages.

Ray's names come from vLLM's own wrapper: vllm/v1/metrics/ray_wrappers.py replaces every
character outside [a-zA-Z0-9_] (``_get_sanitized_opentelemetry_name``) and Ray's exporter
prefixes ``ray_``, so the scrape says ``ray_vllm_spec_decode_num_drafts_total`` with a
``ReplicaId`` label; older Ray releases keep the colon (``ray_vllm:spec_decode_...``). The
scrapes here are written by prometheus_client itself under those names and labels.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from prom_exporters import SpecDecodeExporter
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from spectally.engine_bridge.cli import import_group
from spectally.engine_bridge.importers import prometheus
from spectally.engine_bridge.importers.findings import NOTE, OK, VIOLATION


def ray_sanitized(name: str) -> str:
    """vLLM's RayPrometheusMetric._get_sanitized_opentelemetry_name, then Ray's prefix."""
    return "ray_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)


class RayEngine(SpecDecodeExporter):
    """vLLM's spec-decode counters as a Ray Serve deployment exports them, one replica each."""

    def __init__(self, k: int, prefix: str = "ray_vllm_spec_decode_") -> None:
        super().__init__(k, prefix, verified=False, extra_labels=("ReplicaId",))

    def observe(self, drafted: int, accepted: int, replica: str) -> None:
        self.count(drafted, 0, accepted, ReplicaId=replica)


def test_the_ray_spelling_is_what_vllms_wrapper_writes() -> None:
    assert ray_sanitized("vllm:spec_decode_num_drafts") == "ray_vllm_spec_decode_num_drafts"
    assert prometheus.canonical("ray_vllm_spec_decode_num_drafts_total") == (
        "vllm:spec_decode_num_drafts_total"
    )
    assert prometheus.canonical("ray_vllm:spec_decode_num_drafts") == (
        "vllm:spec_decode_num_drafts"
    )


@pytest.mark.parametrize("prefix", ["ray_vllm_spec_decode_", "ray_vllm:spec_decode_"])
def test_ray_serve_scrapes_are_read_per_replica(tmp_path: Path, prefix: str) -> None:
    eng = RayEngine(3, prefix)
    text = ""
    for drafted, accepted in [(3, 2), (3, 0), (2, 2)]:
        eng.observe(drafted, accepted, "replica-a")
        eng.observe(3, 1, "replica-b")
        text += eng.scrape()
    path = tmp_path / "ray.prom"
    path.write_text(text)
    scrapes = prometheus.read_scrapes([str(path)])
    assert len(scrapes) == 3
    assert prometheus.spec_totals(scrapes[-1], 3) == (6, 17, 7, [5, 2, 0])
    findings = prometheus.check_scrapes(scrapes)
    assert not [f for f in findings if f.verdict == VIOLATION]
    per_set = [f for f in findings if f.check != "counter totals"]
    replicas = {re.search(r'ReplicaId="([^"]+)"', f.message)[1] for f in per_set}  # type: ignore[index]
    assert replicas == {"replica-a", "replica-b"}
    # a tampered replica is caught and named
    tampered = text.replace(
        f'{prefix}num_accepted_tokens_total{{ReplicaId="replica-b",engine="0",model_name="m"}} 3.0',
        f'{prefix}num_accepted_tokens_total{{ReplicaId="replica-b",engine="0",model_name="m"}} 4.0',
    )
    assert tampered != text
    path.write_text(tampered)
    bad = [f for f in prometheus.check_files([str(path)]) if f.verdict == VIOLATION]
    assert bad and all('ReplicaId="replica-b"' in f.message for f in bad)
    assert "sum(per_pos)==accepted" in {f.check for f in bad}


def test_counts_print_as_exact_integers(tmp_path: Path) -> None:
    eng = RayEngine(1, "vllm:spec_decode_")
    lab = {"model_name": "m", "engine": "0", "ReplicaId": ""}
    eng.c["num_drafts"].labels(**lab).inc(6310245)
    eng.c["num_draft_tokens"].labels(**lab).inc(6310245)
    eng.c["num_accepted_tokens"].labels(**lab).inc(7268640)
    eng.c["num_accepted_tokens_per_pos"].labels(**lab, position="0").inc(7268640)
    path = tmp_path / "m.prom"
    path.write_text(eng.scrape())
    assert "7.26864e+06" in path.read_text()  # how prometheus_client writes it
    bad = [f for f in prometheus.check_files([str(path)]) if f.verdict == VIOLATION]
    messages = " ".join(f.message for f in bad)
    assert "accepted 7268640 > drafted 6310245" in messages
    assert "e+06" not in messages


def test_a_counter_going_back_without_created_is_a_reset(tmp_path: Path) -> None:
    """Ray's exporter writes no _created sample: a decrease reads as a restart (a note that
    says why); with _created unchanged it is a violation (see test_importers)."""
    first, second = RayEngine(2), RayEngine(2)
    first.observe(2, 1, "r")
    first.observe(2, 2, "r")
    second.observe(2, 0, "r")
    text = "".join(
        line + "\n"
        for line in (first.scrape() + second.scrape()).splitlines()
        if "_created" not in line
    )
    path = tmp_path / "m.prom"
    path.write_text(text)
    findings = prometheus.check_files([str(path)])
    assert not [f for f in findings if f.verdict == VIOLATION]
    reset = [f for f in findings if f.check == "counter reset"]
    assert len(reset) == 1 and reset[0].verdict == NOTE
    assert "no _created sample to confirm it" in reset[0].message
    assert "num_drafts 2 → 1" in reset[0].message


def test_a_gauge_is_neither_monotone_nor_differenced(tmp_path: Path) -> None:
    """A series its # TYPE declares a gauge (an interval level, as some exporters and recording
    rules write) may go down: no monotonicity violation, and the message says it is a gauge."""
    text = ""
    for drafts, tokens, accepted in [(4, 12, 6), (2, 6, 2)]:
        registry = CollectorRegistry()
        for name, value in (
            ("vllm:spec_decode_num_drafts", drafts),
            ("vllm:spec_decode_num_draft_tokens", tokens),
            ("vllm:spec_decode_num_accepted_tokens", accepted),
        ):
            Gauge(name, name, ["engine"], registry=registry).labels(engine="0").set(value)
        text += generate_latest(registry).decode()
    path = tmp_path / "g.prom"
    path.write_text(
        text.replace("vllm:spec_decode_num_drafts ", "vllm:spec_decode_num_drafts_total ")
    )
    findings = prometheus.check_files([str(path)])
    assert not [f for f in findings if f.verdict == VIOLATION], [f.render() for f in findings]
    gauge = [f for f in findings if f.check == "gauge, not a counter"]
    assert len(gauge) == 1 and "declared gauge (# TYPE)" in gauge[0].message
    assert [f.verdict for f in findings if f.check == "counter invariants"] == [OK, OK]


def test_ray_scrape_through_the_command(tmp_path: Path) -> None:
    eng = RayEngine(2)
    eng.observe(2, 1, "x")
    scrape, unrelated = tmp_path / "ray.prom", tmp_path / "serve.prom"
    scrape.write_text(eng.scrape())
    unrelated.write_text("ray_serve_deployment_request_counter_total 3\n")
    runner = CliRunner()
    rows = json.loads(runner.invoke(import_group, ["prometheus", "--json", str(scrape)]).stdout)
    assert [(row["verdict"], row["check"]) for row in rows] == [
        (OK, "counter invariants"),
        (OK, "counter totals"),
    ]
    assert rows[1]["totals"]["drafted"] == 2 and rows[1]["totals"]["verified"] is None
    assert 'ReplicaId="x"' in rows[0]["message"] and "drafted 2, accepted 1" in rows[0]["message"]
    refused = runner.invoke(import_group, ["prometheus", str(unrelated)])
    assert refused.exit_code == 2
    assert "Served through Ray: ray_vllm_spec_decode_*" in refused.stderr
