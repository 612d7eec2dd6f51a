"""`spectally export aiperf` (docs/observe.md): per-request records from real `vllm serve` step
logs. The vllm-legacy export equals the per-request payload vLLM itself returned in that run
(the fixtures' .requests.jsonl), field for field; every record passes AIPerf's schema and the
cross-field rules of its model; with spectally[aiperf] installed, AIPerf's own model validates
them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from spectally.cli import main
from spectally.engine_bridge.observe import aiperf

FIX = Path(__file__).parents[1] / "fixtures"
SERVE = sorted(str(p) for p in (FIX / "vllm").glob("serve-*.ndjson.gz"))
# aiperf 0.13.0's SpecDecodeAcceptanceRecord.model_json_schema() (its $comment says so).
SCHEMA = json.loads((FIX / "observe" / "aiperf-0.13.0-spec-decode-record.schema.json").read_text())
LOGS = [*SERVE, str(FIX / "vllm" / "async-draft-noise05-k3-so-json-xgrammar.ndjson.gz")]


def _payloads(log: str) -> list[dict[str, Any]]:
    path = Path(log.replace(".ndjson.gz", ".requests.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("log", SERVE, ids=lambda p: Path(p).name)
def test_legacy_records_equal_vllms_own_payload(log: str) -> None:
    records = {r["request_id"]: r for r in aiperf.export(log, "vllm-legacy").records}
    payloads = _payloads(log)
    assert len(records) == len(payloads) == 8
    for p in payloads:
        sd = p["metrics"]["speculative_decoding"]
        # The log's request id is the API's id plus vLLM's per-choice suffix.
        (rec,) = [r for rid, r in records.items() if rid.startswith(p["id"] + "-")]
        assert rec["acceptance_histogram"] == {
            j: n for j, n in enumerate(sd["acceptance_histogram"]) if n
        }
        for name in ("num_draft_tokens", "num_accepted_draft_tokens", "num_spec_steps"):
            assert rec[name] == sd[name], name
        assert rec["num_spec_tokens"] == sd["num_spec_tokens"]
        assert rec["mean_acceptance_length"] == pytest.approx(sd["mean_acceptance_length"])
        assert rec["draft_acceptance_rate"] == pytest.approx(sd["draft_acceptance_rate"])


def _model_rules(rec: dict[str, Any]) -> None:
    """The cross-field rules of SpecDecodeAcceptanceRecord's model_validator, as its source
    states them (aiperf 0.13.0)."""
    hist = {int(j): n for j, n in rec["acceptance_histogram"].items()}
    assert sum(hist.values()) == rec["num_spec_steps"]
    assert sum(j * n for j, n in hist.items()) == rec["num_accepted_draft_tokens"]
    assert rec["num_accepted_draft_tokens"] <= rec["num_draft_tokens"]


@pytest.mark.parametrize("log", LOGS, ids=lambda p: Path(p).name)
@pytest.mark.parametrize("profile", aiperf.PROFILES)
def test_records_pass_aiperfs_schema_and_rules(log: str, profile: str) -> None:
    result = aiperf.export(log, profile)
    assert result.records
    for rec in result.records:
        as_json = json.loads(json.dumps(rec))  # what a reader of the JSON Lines sees
        jsonschema.validate(as_json, SCHEMA)
        _model_rules(as_json)
        assert 0 <= rec["draft_acceptance_rate"] <= 1
        assert 1 <= rec["mean_acceptance_length"] <= 1 + rec["num_spec_tokens"]


def test_rfc_differs_from_legacy_where_the_grammar_cuts_drafts() -> None:
    """Structured output: the RFC counts every proposed draft; vLLM drops the cut ones."""
    log = SERVE[0]
    assert "so-json" in log
    rfc = {r["request_id"]: r for r in aiperf.export(log, "rfc").records}
    legacy = {r["request_id"]: r for r in aiperf.export(log, "vllm-legacy").records}
    assert sum(r["num_draft_tokens"] for r in rfc.values()) > sum(
        r["num_draft_tokens"] for r in legacy.values()
    )
    assert all(r["num_verified_draft_tokens"] <= r["num_draft_tokens"] for r in rfc.values())


def test_histogram_from_prefix_counts() -> None:
    # 10 steps; 7 accepted >= 1, 4 >= 2, 1 >= 3 (k = 3).
    assert aiperf.histogram(10, [7, 4, 1]) == {0: 3, 1: 3, 2: 3, 3: 1}
    assert aiperf.histogram(0, [0, 0]) == {}


def test_cli_writes_json_lines(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    res = CliRunner().invoke(main, ["export", "aiperf", SERVE[1], "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = out.read_text().splitlines()
    assert len(lines) == 8 and all(json.loads(x)["profile"] == "rfc" for x in lines)
    bad = tmp_path / "bad.ndjson"
    bad.write_text('{"record":"request"}\n')
    assert CliRunner().invoke(main, ["export", "aiperf", str(bad)]).exit_code == 2


@pytest.mark.parametrize("profile", aiperf.PROFILES)
def test_aiperfs_own_model_validates(profile: str) -> None:
    pytest.importorskip(
        "aiperf.common.models.spec_decode_models",
        reason="AIPerf not installed: pip install 'spectally[aiperf]'",
    )
    from pydantic import ValidationError

    for log in LOGS:
        records = aiperf.export(log, profile).records
        aiperf.validate(records)
        # The model does reject: a histogram that contradicts the step count.
        broken = {**records[0], "num_spec_steps": records[0]["num_spec_steps"] + 1}
        with pytest.raises(ValidationError):
            aiperf.validate([broken])
