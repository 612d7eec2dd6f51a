"""SPEC.md and DECISIONS.md against the reference: names, IDs and examples must not drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from spectally.reference import invariants, machine
from spectally.reference.arith import INT_ARITH
from spectally.reference.step import Mode, StepInputs, admissibility
from spectally.spec import vectors as vec_mod

SPEC_DIR = Path(vec_mod.__file__).parent
SPEC = (SPEC_DIR / "SPEC.md").read_text(encoding="utf-8")
DECISIONS = (SPEC_DIR / "DECISIONS.md").read_text(encoding="utf-8")


def spec_table_row(rule: str) -> str:
    match = re.search(rf"^\| \*\*\[{re.escape(rule)}\]\*\* \|.*$", SPEC, re.MULTILINE)
    assert match, f"SPEC.md has no table row defining {rule}"
    return match.group(0)


def test_reference_invariants_are_specified_with_their_names_and_proofs() -> None:
    for full_name in invariants.INVARIANTS:
        rule, name = full_name.split(" ", 1)
        row = spec_table_row(rule)
        assert f"| {name} |" in row, f"{rule}: SPEC.md names it differently from invariants.py"
        assert f"`step:{rule}`" in row and f"`trace:{rule}`" in row
    for rule in ("INV-9", "INV-10"):
        assert f"`trace:{rule}`" in spec_table_row(rule)
    expected = {
        "THM-1": "theorem:sync-async",
        "M-BOUNDS": "metrics:bounds",
        "MERGE": "merge:monoid",
        "LX-1": "legacy:drafted>=verified",
        "LX-2": "legacy:sync-async-spec-steps",
    }
    for rule, prop in expected.items():
        assert f"`{prop}`" in spec_table_row(rule)


def test_proved_by_names_follow_the_convention() -> None:
    kinds = "step|trace|theorem|metrics|merge|legacy|event|story"
    names = set(re.findall(rf"`((?:{kinds}):[^`]+)`", SPEC))
    pattern = re.compile(
        r"^(?:(?:step|trace):INV-\d+|step:discarded|theorem:sync-async|metrics:bounds|merge:monoid"
        r"|legacy:drafted>=verified|legacy:sync-async-spec-steps"
        r"|event:block|event:close|event:discard|story:sync-async|metrics:identities)$"
    )
    assert names and all(pattern.match(n) for n in names), sorted(names)


def test_every_admissibility_reason_maps_to_a_specified_a_rule() -> None:
    x = StepInputs(1, 0, True, 1, 1, 1, 0, True, True)
    reasons = [reason for reason, _ in admissibility(Mode.ASYNC, x, INT_ARITH, k=4)]
    assert set(reasons) == set(vec_mod.ADMISSIBILITY_RULES)
    for rule in set(vec_mod.ADMISSIBILITY_RULES.values()):
        assert f"**[{rule}]**" in SPEC


def test_event_rules_of_the_machine_are_specified() -> None:
    doc = machine.__doc__ or ""
    for rule in sorted(set(re.findall(r"^(E\d+)\s", doc, re.MULTILINE))):
        assert f"**[{rule}]" in SPEC, rule


def test_prometheus_names_match_the_reporting_table() -> None:
    table = SPEC[SPEC.index("**[REP-1]") : SPEC.index("**[REP-2]")]
    documented = set(re.findall(r"`(vllm:spec_decode_[a-z_]+_total)", table))
    rendered = set(vec_mod.PROMETHEUS_COUNTERS) | set(vec_mod.PROMETHEUS_LABELLED)
    assert documented == rendered


def test_request_payload_fields_match_the_table() -> None:
    table = SPEC[SPEC.index("**[REP-3]") : SPEC.index("**[DP-1]")]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE))
    doc = vec_mod.load()
    trace = next(v for v in doc["vectors"] if v["name"] == "trace-rfc-row")
    payload = vec_mod.run_vector(trace).actual["surfaces"]["request_payload"]["r1"]
    assert documented == set(payload)


def test_log_line_example_is_what_the_reference_prints() -> None:
    example = re.search(r"```\n(Engine 0: SpecDecoding metrics: .*)\n```", SPEC)
    assert example
    doc = vec_mod.load()
    trace = next(v for v in doc["vectors"] if v["name"] == "trace-rfc-row")
    assert vec_mod.run_vector(trace).actual["surfaces"]["log_line"] == example.group(1)


def test_decisions_answer_every_question_of_the_counting_notes() -> None:
    table = DECISIONS[: DECISIONS.index("## DEC-1 ")]
    answered = {int(n) for n in re.findall(r"^\| (\d)\. ", table, re.MULTILINE)}
    assert answered == set(range(1, 10))
    for dec in set(re.findall(r"DEC-\d+", table)):
        assert f"## {dec} " in DECISIONS


def test_decisions_cited_in_spec_exist() -> None:
    for dec in set(re.findall(r"DEC-\d+", SPEC)):
        assert f"## {dec} " in DECISIONS, dec


def test_plain_rule_references_point_to_defined_rules() -> None:
    defined = set(re.findall(r"\*\*\[([A-Z][A-Z0-9-]*)\]", SPEC))
    body = SPEC[: SPEC.index("<!-- BEGIN GENERATED")]
    cited = set(re.findall(r"\b((?:INV|THM|REP|ATTR|PIPE|CAP|LX|DP)-\d+|[ARELMF]\d+)\b", body))
    assert cited <= defined, sorted(cited - defined)


def test_proved_by_names_exist_in_the_proofs_registry() -> None:
    pytest.importorskip("z3")
    from spectally.proofs.properties import all_properties

    registry = {p.name for p in all_properties()}
    named = set(re.findall(r"`((?:step|trace|theorem|metrics|merge|legacy):[^`]+)`", SPEC))
    assert named, "SPEC.md names no proof"
    assert named <= registry, f"SPEC.md names unknown proofs: {sorted(named - registry)}"
