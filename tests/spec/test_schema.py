"""spec/step_log.schema.json: valid draft 2020-12, in sync with STEP_LOG.md, and the replay's
fast validation paths accept exactly what the schema accepts (stricter only on 1.0 for 1)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from spectally.engine_bridge.steplog import records
from spectally.engine_bridge.steplog.records import load_schema, schema_validator, validate
from spectally.engine_bridge.synth import generate

ROOT = Path(__file__).parents[2]
TRACES = sorted((ROOT / "tests" / "traces").glob("*/*.ndjson"))


def test_schema_is_valid_draft_2020_12() -> None:
    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$defs"]["header"]["properties"]["schema_version"]["const"] == 1


def test_step_log_md_documents_every_field() -> None:
    prose = (ROOT / "spec" / "STEP_LOG.md").read_text()
    defs = load_schema()["$defs"]
    for kind in ("header", "request", "request_step", "step_stats", "totals"):
        assert f"`{kind}`" in prose
        for name in defs[kind]["properties"]:
            assert f"`{name}`" in prose, f"STEP_LOG.md does not document {kind}.{name}"
    for outcome in defs["request_step"]["properties"]["outcome"]["enum"]:
        assert f"`{outcome}`" in prose


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_traces_are_schema_valid(path: Path) -> None:
    validator = schema_validator()
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        assert validator.is_valid(obj), line
        assert validate(obj, line) is None


def _samples() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for rec in generate(400, mode="async", av=True, seed=3):
        key = rec["record"] + str(rec.get("event", ""))
        if key not in seen:
            seen.add(key)
            out.append(rec)
    return out


def _mutations(rec: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name in list(rec):
        dropped = copy.deepcopy(rec)
        del dropped[name]
        out.append(dropped)
        for value in (-1, "1", None, True, [], {}, 10**20, "x"):
            changed = copy.deepcopy(rec)
            changed[name] = value
            out.append(changed)
    extra = copy.deepcopy(rec)
    extra["extra_field"] = 1
    out.append(extra)
    meta = copy.deepcopy(rec)
    meta["meta"] = {"free": "form"}
    out.append(meta)
    return out


def test_fast_path_agrees_with_the_schema() -> None:
    validator = schema_validator()
    checked = 0
    for rec in _samples():
        for obj in [rec, *_mutations(rec)]:
            raw = json.dumps(obj)
            fast_ok = validate(obj, raw) is None
            assert fast_ok == validator.is_valid(obj), raw
            checked += 1
    assert checked > 300


def test_float_counts_are_rejected_although_json_schema_admits_them() -> None:
    rec = next(r for r in _samples() if r["record"] == "request_step")
    rec = {**rec, "proposed": float(rec["proposed"])}
    assert schema_validator().is_valid(rec)  # JSON Schema: 4.0 is an integer
    error = validate(rec, json.dumps(rec))
    assert error is not None and "is not an integer" in error[1]


def test_the_header_and_totals_checks_accept_nothing_the_schema_refuses() -> None:
    """The header's and the totals' checks compiled from the schema (`records._plain_checks`:
    what spares a valid log the validator's import) compile from the schema as it is, accept
    the generated records, and accept no mutation of them that the schema refuses, values of
    the wrong type, sign or length included (the fast path may only be stricter)."""
    checks = records._plain_checks()
    assert set(checks) == {"header", "totals"}
    validator = schema_validator()
    values = (-1, 0, 1, 1.0, 2.5, "", "1", "x", None, True, False, [], [1], [1.0], [-1], {})
    seen = accepted = 0
    for rec in _samples():
        kind = rec["record"]
        if kind not in checks:
            continue
        seen += 1
        assert records._plain_ok(kind, rec), rec
        for obj in _mutations(rec):
            for name in [n for n in obj if n != "record"]:
                for value in values:
                    changed = {**obj, name: value}
                    if records._plain_ok(kind, changed):
                        accepted += 1
                        assert validator.is_valid(changed), changed
                        assert validate(changed, json.dumps(changed)) is None, changed
    assert seen == 2 and accepted > 100
