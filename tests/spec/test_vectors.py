"""The conformance vectors: each one against the reference, the generated SPEC.md table, and
traceability between vectors, SPEC.md rules and DECISIONS.md entries."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from spectally.commands.vectors import vectors as vectors_cmd
from spectally.spec import render
from spectally.spec.vectors import (
    VectorFormatError,
    load,
    load_shapes,
    rules_pinned,
    run_all,
    run_vector,
    validate,
)

SPEC_DIR = Path(render.__file__).parent
DOC = load()
VECTORS = DOC["vectors"]
TOL = DOC["float_tolerance"]
SHAPES = load_shapes()  # the drafter-shape vectors pin the rules of SPEC.md section 12


def pinned_anywhere() -> dict[str, list[str]]:
    """Rule -> the vectors of either shipped file that pin it."""
    out = rules_pinned(DOC)
    for rule, names in rules_pinned(SHAPES).items():
        out.setdefault(rule, []).extend(names)
    return out


RULE_DEF = re.compile(r"\*\*\[([A-Z][A-Z0-9-]*)\]")  # a definition: **[ID] ...**
DECISION_DEF = re.compile(r"^## (DEC-\d+) ", re.MULTILINE)


def spec_rules() -> set[str]:
    return set(RULE_DEF.findall((SPEC_DIR / "SPEC.md").read_text(encoding="utf-8")))


def decisions() -> dict[str, str]:
    """DEC-n -> the text of its entry."""
    text = (SPEC_DIR / "DECISIONS.md").read_text(encoding="utf-8")
    parts = DECISION_DEF.split(text)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vector: dict) -> None:
    result = run_vector(vector, TOL)
    assert result.ok, "\n".join(result.mismatches)


def test_enough_vectors_of_both_kinds() -> None:
    kinds = [v["kind"] for v in VECTORS]
    assert len(VECTORS) >= 30
    assert kinds.count("step") >= 10 and kinds.count("trace") >= 10


def test_rfc_row_is_present_verbatim() -> None:
    row = next(v for v in VECTORS if v["name"] == "rfc-row-async-av-grammar")
    assert row["input"] == {
        "mode": "async",
        "proposed": 4,
        "padding": 0,
        "grammar_valid": 2,
        "scheduled": None,
        "av_verify": 3,
        "accepted": 1,
    }
    rfc, legacy = row["expect"]["rfc"], row["expect"]["vllm-legacy"]
    assert (rfc["drafted"], rfc["verified"], rfc["accepted"]) == (4, 3, 1)
    assert legacy["drafted"] == 2


def test_scenario_table_is_not_stale() -> None:
    text = (SPEC_DIR / "SPEC.md").read_text(encoding="utf-8")
    assert render.render_spec(text, DOC) == text, "run: python -m spectally.spec.render"
    assert render.main(["--check"]) == 0


def test_every_rule_named_by_a_vector_is_defined() -> None:
    defined = spec_rules() | set(decisions())
    unknown = sorted(set(pinned_anywhere()) - defined)
    assert not unknown, f"vectors name rules that SPEC.md/DECISIONS.md do not define: {unknown}"


def test_every_normative_rule_is_pinned_by_a_vector() -> None:
    unpinned = sorted(spec_rules() - set(pinned_anywhere()))
    assert not unpinned, f"SPEC.md rules no vector pins: {unpinned}"


def test_decisions_list_exactly_the_vectors_that_pin_them() -> None:
    pinned = pinned_anywhere()
    names = {v["name"] for v in VECTORS + SHAPES["vectors"]}
    for dec, text in decisions().items():
        match = re.search(r"\*\*Vectors\.\*\*(.*?)(?:\n\n|\Z)", text, re.DOTALL)
        assert match, f"{dec} has no **Vectors.** paragraph"
        listed = set(re.findall(r"`([a-z0-9-]+)`", match.group(1)))
        assert listed <= names, f"{dec} lists unknown vectors {sorted(listed - names)}"
        assert listed == set(pinned.get(dec, [])), f"{dec}: DECISIONS.md and vectors disagree"


def test_errors_are_detected() -> None:
    """The runner is not vacuous: a wrong expectation fails, and says where."""
    vec = copy.deepcopy(next(v for v in VECTORS if v["name"] == "trace-rfc-row"))
    vec["expect"]["totals"]["rfc"]["verified"] = 4
    result = run_vector(vec, TOL)
    assert not result.ok and any("totals.rfc.verified" in m for m in result.mismatches)

    step = copy.deepcopy(next(v for v in VECTORS if v["name"] == "plain-sync"))
    step["expect"] = {"error": {"kind": "inadmissible", "violates": ["A6"]}}
    assert not run_vector(step, TOL).ok

    illegal = copy.deepcopy(next(v for v in VECTORS if v["name"] == "illegal-verify-count"))
    illegal["expect"]["error"]["violates"] = "E4"
    assert not run_vector(illegal, TOL).ok


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d.update(format="other"), "$.format"),
        (lambda d: d["vectors"][0].pop("rule"), "missing key(s) rule"),
        (lambda d: d["vectors"][0]["input"].update(mode="eager"), "input.mode"),
        (lambda d: d["vectors"][0]["expect"]["rfc"].update(drafted="4"), "rfc.drafted"),
        (lambda d: d["vectors"][1].update(name=d["vectors"][0]["name"]), "duplicate"),
        (lambda d: d["vectors"][0]["rule"].append("not a rule"), "not a rule ID"),
        (lambda d: d["vectors"][0]["expect"]["rfc"].update(drafed=4), "unknown key(s) drafed"),
    ],
)
def test_malformed_files_are_rejected_with_a_path(mutate, where: str) -> None:
    doc = copy.deepcopy(DOC)
    mutate(doc)
    with pytest.raises(VectorFormatError, match=re.escape(where)):
        validate(doc)


def test_malformed_trace_events_are_rejected() -> None:
    doc = copy.deepcopy(DOC)
    trace = next(v for v in doc["vectors"] if v["kind"] == "trace")
    trace["events"][0] = {"event": "Launch", "step": 1}
    with pytest.raises(VectorFormatError, match="unknown event 'Launch'"):
        validate(doc)
    trace["events"][0] = {"event": "StepBegin", "step": True}
    with pytest.raises(VectorFormatError, match="expected int"):
        validate(doc)


def test_cli_passes_and_prints_json() -> None:
    runner = CliRunner()
    plain = runner.invoke(vectors_cmd, [])
    assert plain.exit_code == 0, plain.output
    total = len(VECTORS) + len(load_shapes()["vectors"])  # the default runs both shipped files
    assert f"{total} of {total} vectors passed" in plain.output
    as_json = runner.invoke(vectors_cmd, ["--json"])
    payload = json.loads(as_json.output)
    assert payload["failed"] == 0 and payload["total"] == total


def test_cli_fails_on_mismatch_and_on_malformed_files(tmp_path: Path) -> None:
    doc = copy.deepcopy(DOC)
    doc["vectors"][0]["expect"]["rfc"]["drafted"] = 5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    result = CliRunner().invoke(vectors_cmd, ["--file", str(bad)])
    assert result.exit_code == 1 and "FAIL" in result.output
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    broken = CliRunner().invoke(vectors_cmd, ["--file", str(tmp_path / "broken.json")])
    assert broken.exit_code == 2


def test_run_all_agrees_with_the_parametrized_cases() -> None:
    assert all(r.ok for r in run_all())
