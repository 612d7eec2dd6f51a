"""The record defined once (`steplog.schema`, `steplog.typed`): every constructor writes a record
the JSON Schema accepts, in the declared key order; the field names, outcome names and events
agree with spec/step_log.schema.json, the reference's `Outcome` and the typed structs."""

from __future__ import annotations

import json
from typing import Any, get_args

import msgspec
import pytest
from jsonschema import Draft202012Validator
from spectally.engine_bridge.steplog import schema, typed
from spectally.engine_bridge.steplog.records import load_schema, parse_line
from spectally.engine_bridge.steplog.schema import Record
from spectally.engine_bridge.steplog.writer import Block, totals_record
from spectally.reference.machine import Outcome


def _header(**extra: Any) -> Record:
    return schema.header(
        engine="vllm",
        engine_version="0.32.0",
        num_speculative_tokens=3,
        scheduling="async",
        spec_method="eagle",
        structured_outputs_backend=None,
        adaptive_verification=False,
        drop_stale_output=False,
        config={"model": "m"},
        **extra,
    )


def _step(**extra: Any) -> Record:
    fields: dict[str, Any] = {
        "step": 4,
        "request": "r",
        "proposed": 3,
        "padding": 0,
        "grammar_valid": None,
        "scheduled": 3,
        "invalid": None,
        "verified": None,
        "sampled": 2,
        "accepted": 1,
    }
    fields.update(extra)
    return schema.request_step(**fields)


EVERY_KIND: list[Record] = [
    _header(),
    _header(engine_index=2, meta={"note": "x"}),
    schema.request_event(1, "r", "add", structured=True),
    schema.request_event(1, "r", "add", structured=False, meta={"slot": 0}),
    schema.request_event(5, "r", "finish", reason="stop"),
    schema.request_event(5, "r", "abort"),
    schema.request_event(2, "r", "preempt"),
    schema.request_event(2, "r", "preempt", drop_stale_output=True),
    _step(),
    _step(outcome="discarded_stale", sampled=0, accepted=0, delivered=0),
    _step(grammar_valid=2, invalid=1, verified=2, meta={"line": 7}),
    schema.step_stats(4, [1, 3, 1], [1, 0, 0]),
    schema.totals("synthetic", [1, 3, 1], [1, 0, 0]),
]
FIELDS = {
    "request_step": schema.REQUEST_STEP_FIELDS,
    "request": schema.REQUEST_FIELDS,
    "step_stats": schema.STEP_STATS_FIELDS,
    "totals": schema.TOTALS_FIELDS,
}


@pytest.mark.parametrize("rec", EVERY_KIND, ids=lambda r: str(r["record"]))
def test_every_constructor_writes_a_record_the_schema_and_the_reader_accept(rec: Record) -> None:
    kind = rec["record"]
    errors = list(Draft202012Validator(load_schema()).iter_errors(rec))
    assert errors == []
    line = json.dumps(rec, separators=(",", ":")).encode()
    assert parse_line("t.ndjson", 1, line, True) == rec  # the reference's reader, fast paths
    if kind in FIELDS:  # keys in the declared order (a log's bytes do not depend on the caller)
        order = [f for f in FIELDS[kind] if f in rec]
        assert list(rec) == order


@pytest.mark.parametrize("rec", EVERY_KIND, ids=lambda r: str(r["record"]))
def test_the_typed_decoder_reads_what_the_constructors_write(rec: Record) -> None:
    bare = {k: v for k, v in rec.items() if k != "meta"}  # meta: never typed
    decoded = msgspec.json.decode(
        json.dumps(bare),
        type=typed.RequestStep
        | typed.Request
        | (typed.StepStats | typed.HeaderLine | typed.TotalsLine),
    )
    assert typed.KIND[type(decoded)] == typed.LineKind[str(rec["record"]).upper()]
    if rec["record"] in ("header", "totals"):
        return
    for name, value in bare.items():
        if name != "record":
            assert getattr(decoded, name) == value


def test_field_names_are_the_json_schema_s_and_the_structs_() -> None:
    defs = load_schema()["$defs"]
    for kind, fields in FIELDS.items():
        assert set(fields) == set(defs[kind]["properties"]), kind
        assert set(defs[kind]["required"]) <= set(fields)
    structs = {"request_step": typed.RequestStep, "request": typed.Request}
    structs |= {"step_stats": typed.StepStats}
    for kind, struct in structs.items():
        assert set(struct.__struct_fields__) | {"record", "meta"} >= set(FIELDS[kind])
        assert set(struct.__struct_fields__) <= set(FIELDS[kind])
    assert set(schema.RECORD_KINDS) == set(defs) & set(schema.RECORD_KINDS)
    assert [d for d in ("header", "totals") if d in defs] == ["header", "totals"]


def test_outcomes_and_events_are_spelled_once() -> None:
    defs = load_schema()["$defs"]
    assert tuple(o.value for o in Outcome) == schema.OUTCOMES
    assert set(defs["request_step"]["properties"]["outcome"]["enum"]) == set(schema.OUTCOMES)
    assert get_args(typed.Outcome) == schema.OUTCOMES
    assert tuple(defs["request"]["properties"]["event"]["enum"]) == schema.EVENTS
    assert get_args(schema.Event) == schema.EVENTS
    assert schema.APPLIED == Outcome.APPLIED.value == _step()["outcome"]
    assert load_schema()["$defs"]["header"]["properties"]["schema_version"]["const"] == (
        schema.SCHEMA_VERSION
    )


def test_absent_optionals_stay_absent_and_nullable_counts_stay_null() -> None:
    assert "delivered" not in _step() and "meta" not in _step(meta={})
    assert _step()["grammar_valid"] is None and "grammar_valid" in _step()
    assert _step(delivered=0)["delivered"] == 0  # zero is a value, not an absence
    assert (
        schema.request_event(2, "r", "preempt", drop_stale_output=False)["drop_stale_output"]
        is False
    )
    assert "engine_index" not in _header()
    assert list(_header(engine_index=0))[-2:] == ["engine_index", "config"]


def test_the_writer_builds_its_records_here() -> None:
    block = Block(request="r", proposed=3, step=4, scheduled=3, sampled=2, accepted=1)
    assert block.record() == _step(grammar_valid=None, verified=None)
    block.delivered = 2
    assert block.record() == _step(delivered=2)
    assert totals_record("x", [1, 2, 3], [3]) == schema.totals("x", [1, 2, 3], [3])


def test_line_kinds_are_distinct_and_cover_every_struct() -> None:
    assert sorted(typed.KIND.values()) == list(range(len(typed.LineKind) - 1))
    assert len(typed.LineKind) - 1 == typed.LineKind.OTHER


def test_replay_file_takes_the_replay_options() -> None:
    from spectally.engine_bridge.fleet import ReplayOptions as FleetOptions
    from spectally.engine_bridge.replay.options import ReplayOptions

    assert FleetOptions is ReplayOptions
    options = ReplayOptions(max_divergences=3, reference=True)
    assert ReplayOptions.of(options, {}) is options
    assert ReplayOptions.of(None, {}) == ReplayOptions()
    assert ReplayOptions.of(options, {"force_profile": "vllm-0.34"}) == ReplayOptions(
        max_divergences=3, reference=True, force_profile="vllm-0.34"
    )
    with pytest.raises(TypeError, match="plain"):
        ReplayOptions.of(None, {"plain": True})
