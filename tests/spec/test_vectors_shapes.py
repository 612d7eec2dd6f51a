"""The drafter-shape vectors (spec/vectors-shapes.json): each passes through the reference, each
carries a conformance level that matches what it states, and malformed or wrong vectors are
caught with a path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from spectally.spec.vectors import (
    LEVELS,
    SHAPES_PATH,
    VectorFormatError,
    level_counters,
    load_shapes,
    run_vector,
    validate,
)
from spectally.spec.vectors_cli import vectors as vectors_cmd

DOC = load_shapes()
VECTORS = DOC["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["name"])
def test_shape_vector(vector: dict[str, Any]) -> None:
    result = run_vector(vector, DOC["float_tolerance"])
    assert result.ok, result.mismatches


def test_every_shape_and_level_is_covered() -> None:
    names = " ".join(v["name"] for v in VECTORS)
    for shape in ("tree", "variable-k", "zero-draft", "filler", "parallel-sampling", "fates"):
        assert shape in names, shape
    assert {v["level"] for v in VECTORS} == set(LEVELS)
    assert any("error" in v["expect"] for v in VECTORS)


def test_levels_nest() -> None:
    assert level_counters("L1") < level_counters("L2") < level_counters("L3")
    assert "verified" not in level_counters("L1") and "filler" not in level_counters("L2")
    assert "zero_draft_steps" in LEVELS["L3"]  # with the filler and the vectors (CORE C-L3)


def _first(kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = copy.deepcopy(DOC)
    vec = next(v for v in doc["vectors"] if v["level"] == kind and "totals" in v["expect"])
    return doc, vec


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda v: v.update(level="L0"), "level"),
        (lambda v: v["expect"]["totals"].update(verified=1), "need a higher level than L1"),
        (lambda v: v["expect"].update(totals={"padding": 1}), "unknown key"),
        (lambda v: v["streams"][0]["steps"].append({"chain": {"proposed": 1}}), "missing key"),
        (lambda v: v["streams"][0]["steps"].append({}), "exactly one of"),
        (lambda v: v["streams"][0]["steps"].append({"tree": {}}), "list of depths"),
        (
            lambda v: v["streams"][0]["steps"].append(
                {"tree": [{"proposed": 1, "verified": 1, "reached": 1}]}
            ),
            "expected a boolean",
        ),
        (lambda v: v.update(streams=[]), "non-empty list of streams"),
        (lambda v: v["streams"][0].update(request=1), "request id"),
        (lambda v: v["streams"][0].update(steps={}), "list of steps"),
        (lambda v: v["expect"].pop("totals"), "must state its totals"),
        (lambda v: v["expect"].update(requests={}), "non-empty object or list"),
    ],
)
def test_malformed_shape_vectors_are_rejected(mutate: Any, message: str) -> None:
    doc, vec = _first("L1")
    mutate(vec)
    with pytest.raises(VectorFormatError, match=message):
        validate(doc)


def test_a_level_tag_above_what_is_stated_is_rejected() -> None:
    doc, vec = _first("L3")
    vec["expect"] = {"totals": {"drafted": vec["expect"]["totals"].get("drafted", 0)}}
    with pytest.raises(VectorFormatError, match="states no counter of level L3"):
        validate(doc)


def test_wrong_expectations_are_reported() -> None:
    vec = copy.deepcopy(next(v for v in VECTORS if v["name"] == "tree-per-depth-and-fates"))
    vec["expect"]["totals"]["per_depth"]["accepted"] = [1, 1, 1]
    assert run_vector(vec).mismatches == [".totals.per_depth.accepted[2]: expected 1, got 0"]
    err = copy.deepcopy(next(v for v in VECTORS if v["name"] == "draft-length-above-k-max"))
    err["expect"]["error"]["violates"] = ["VK-4"]
    assert run_vector(err).mismatches
    ok = copy.deepcopy(next(v for v in VECTORS if v["name"] == "three-fates-ignored"))
    ok["streams"][0]["steps"][0]["chain"]["accepted"] = 3  # now inadmissible: VK-4
    assert "inadmissible at stream 0 step 0: ['VK-4']" in run_vector(ok).mismatches


def test_the_cli_checks_the_shape_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(vectors_cmd, ["--file", str(SHAPES_PATH)])
    assert result.exit_code == 0 and f"{len(VECTORS)} of {len(VECTORS)}" in result.output
    doc = copy.deepcopy(DOC)
    doc["vectors"][0]["expect"]["totals"]["drafted"] += 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    assert CliRunner().invoke(vectors_cmd, ["--file", str(bad)]).exit_code == 1
