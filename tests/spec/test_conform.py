"""The conformance kit (`spectally conform`, spec/conform.py): the Python reference and the
JavaScript implementation pass the core vectors through the same line protocol, and the kit
catches wrong counts per level, broken protocol lines, crashes and hangs."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator
from spectally.cli import main
from spectally.spec.conform import (
    LEVELS,
    PROTOCOL_SCHEMA,
    VECTORS,
    VECTORS_SCHEMA,
    KitFormatError,
    judge,
    load_vectors,
    run,
)

ROOT = Path(__file__).parents[2]
JS = ROOT / "conformance" / "js"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(
    NODE is None, reason="node is not installed: the JS implementation cannot run"
)
REFERENCE = [sys.executable, "-m", "spectally.spec.conform_adapter"]
TIMEOUT = 120.0  # generous: a healthy implementation answers in milliseconds


def conform(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["conform", *args])
    return result.exit_code, result.output


def test_schemas_are_valid_and_the_vectors_meet_theirs() -> None:
    for path in (VECTORS_SCHEMA, PROTOCOL_SCHEMA):
        Draft202012Validator.check_schema(json.loads(path.read_text()))
    doc = load_vectors()
    assert doc["format"] == "spectally-core-vectors"
    assert doc["version"].startswith("1.")
    levels = {v["level"] for v in doc["vectors"]}
    assert levels == set(LEVELS)


def test_core_md_defines_every_rule_and_name_the_vectors_use() -> None:
    core = (ROOT / "spec" / "CORE.md").read_text()
    doc = load_vectors()
    for v in doc["vectors"]:
        for rule in v["rules"]:
            assert f"**[{rule}]" in core, f"{v['name']}: {rule} is not defined in CORE.md"
        expect = v["expect"]
        groups = [expect.get("totals", {}), *expect.get("requests", {}).values()]
        for g in groups:
            for fields in g.values():
                for name in fields:
                    assert f"`{name}`" in core, f"CORE.md does not name `{name}`"
    assert doc["version"] in core


@needs_node
def test_the_javascript_implementation_passes_every_core_vector() -> None:
    report = run([str(NODE), str(JS / "conform.mjs")], load_vectors(), TIMEOUT)
    assert report.problem is None
    assert report.conformant_level() == "L3"
    assert all(c.status == "pass" for c in report.checks)
    assert report.exit_code("L3") == 0


def test_the_reference_passes_l1_and_l2_and_names_what_it_does_not_model() -> None:
    report = run(REFERENCE, load_vectors(), TIMEOUT)
    assert report.problem is None
    assert [c for c in report.checks if c.status == "fail"] == []
    assert report.conformant_level() == "L2"
    unsupported = {
        (c.path.rsplit(".", 1)[-1] if c.path != "error" else str(c.expected))
        for c in report.checks
        if c.status == "unsupported"
    }
    # The shape sub-counts and tree rules the reference does not model yet, and only those.
    assert unsupported == {"zero_draft_steps", "filler", "per_depth", "C-A3", "C-A4"}
    assert report.exit_code("L2") == 0
    assert report.exit_code("L3") == 1


def test_the_command_runs_the_reference_through_the_protocol() -> None:
    code, out = conform("--level", "L2", *REFERENCE)
    assert code == 0, out
    assert "conformant at: L2" in out
    code, out = conform("--json", *REFERENCE)
    assert code == 1
    assert json.loads(out)["conformant_level"] == "L2"


# Hand mutants of the JS implementation: each breaks one rule, and the kit must fail the level
# that rule belongs to (and no level below it).
MUTANTS = [
    (
        "accepted counted with the bonus token",
        "c.accepted += step.accepted;",
        "c.accepted += step.accepted + 1;",
        "L1",
    ),
    (
        "a K = 0 step counted as a spec step",
        "c.zero_draft_steps += 1; // C-S1: not a spec step, but visible\n    return;",
        "c.zero_draft_steps += 1; c.spec_steps += 1;\n    return;",
        "L1",
    ),
    ("a discarded step counted", "if (step.applied === false) return;", "", "L1"),
    ("verified taken as proposed", "c.verified += step.verified;", "c.verified += drafted;", "L2"),
    (
        "per-position accepted off by one",
        "if (step.accepted > d) c.per_position.accepted[d] += 1;",
        "if (step.accepted >= d) c.per_position.accepted[d] += 1;",
        "L3",
    ),
    ("undefined ratio reported as 0", "(d === 0 ? null : n / d)", "(d === 0 ? 0 : n / d)", "L1"),
    (
        "accepted above verified let through",
        "if (!(step.accepted <= step.verified && step.verified <= drafted))",
        "if (!(step.accepted <= drafted && step.verified <= drafted))",
        "L2",
    ),
]


@needs_node
@pytest.mark.parametrize(("what", "old", "new", "level"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_the_kit_catches_each_mutant_at_its_level(
    tmp_path: Path, what: str, old: str, new: str, level: str
) -> None:
    src = (JS / "core.mjs").read_text()
    assert src.count(old) == 1, what
    (tmp_path / "core.mjs").write_text(src.replace(old, new))
    shutil.copy(JS / "conform.mjs", tmp_path / "conform.mjs")
    report = run([str(NODE), str(tmp_path / "conform.mjs")], load_vectors(), TIMEOUT)
    assert report.problem is None
    failed = {c.level for c in report.checks if c.status == "fail"}
    assert level in failed, what
    assert all(LEVELS.index(lv) >= LEVELS.index(level) for lv in failed), (what, failed)
    assert report.exit_code("L3") == 1
    below = LEVELS[LEVELS.index(level) - 1] if level != "L1" else None
    assert report.conformant_level() == below


def script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "impl.py"
    path.write_text(body)
    return [sys.executable, str(path)]


ECHO = "import sys, json\nfor line in sys.stdin:\n    i = json.loads(line)['id']\n"
BROKEN = {
    "not JSON": ECHO + "    print('hello', flush=True)\n",
    "wrong id": ECHO + "    print(json.dumps({'id': 'other', 'totals': {}}), flush=True)\n",
    "no id": ECHO + "    print(json.dumps({'totals': {}}), flush=True)\n",
    "error and totals": ECHO
    + "    print(json.dumps({'id': i, 'error': 'C-A1', 'totals': {}}), flush=True)\n",
    "crash": "import sys\nsys.stdin.readline()\nsys.exit('boom: division by zero')\n",
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_implementation_is_reported_with_exit_2(tmp_path: Path, kind: str) -> None:
    code, out = conform("--timeout", str(TIMEOUT), *script(tmp_path, BROKEN[kind]))
    assert code == 2, out
    assert "run broken:" in out
    if kind == "crash":
        assert "(crash)" in out and "boom: division by zero" in out


def test_a_hanging_implementation_is_ended_after_the_timeout(tmp_path: Path) -> None:
    # It never answers, whatever the load: the verdict does not depend on the timeout's size.
    cmd = script(tmp_path, "import sys, time\nsys.stdin.readline()\ntime.sleep(600)\n")
    code, out = conform("--timeout", "0.5", *cmd)
    assert code == 2, out
    assert "(hang)" in out


def test_an_implementation_that_cannot_start_is_bad_usage(tmp_path: Path) -> None:
    code, out = conform(str(tmp_path / "no-such-program"))
    assert code == 2
    assert "cannot start" in out


def test_usage_errors(tmp_path: Path) -> None:
    assert conform()[0] == 2  # no command
    assert conform("--level", "L4", "true")[0] == 2
    assert conform("--vector", "no-such-vector", "true")[0] == 2
    bad = tmp_path / "v.json"
    bad.write_text(
        json.dumps({"format": "spectally-core-vectors", "version": "1.0.0", "vectors": []})
    )
    code, out = conform("--vectors", str(bad), "true")
    assert code == 2 and "malformed vectors file" in out
    with pytest.raises(KitFormatError):
        load_vectors(bad)


def test_repeated_vector_names_are_refused(tmp_path: Path) -> None:
    doc = json.loads(VECTORS.read_text())
    doc["vectors"].append(doc["vectors"][0])
    path = tmp_path / "v.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(KitFormatError, match="repeated"):
        load_vectors(path)


@needs_node
def test_one_vector_by_name(tmp_path: Path) -> None:
    code, out = conform("--vector", "tree-two-steps", str(NODE), str(JS / "conform.mjs"))
    assert code == 0, out
    assert "L1: pass (5 passed" in out


def vector(name: str) -> dict[str, object]:
    return next(v for v in load_vectors()["vectors"] if v["name"] == name)


def statuses(name: str, response: dict[str, object]) -> dict[str, str]:
    return {c.path: c.status for c in judge(vector(name), {"id": name, **response}, 1e-9)}


def test_the_judge_tells_undefined_from_zero_and_checks_floats_closely() -> None:
    good = {
        "drafted": 0, "accepted": 0, "spec_steps": 0, "acceptance_rate": None,
        "mean_acceptance_length": 1.0, "verified": 0, "draft_quality": None,
        "verification_rate": None,
    }  # fmt: skip
    assert set(statuses("nothing-drafted", {"totals": good}).values()) >= {"pass"}
    zero = {**good, "acceptance_rate": 0.0}
    assert statuses("nothing-drafted", {"totals": zero})["totals.L1.acceptance_rate"] == "fail"
    near = {"acceptance_rate": 0.6666, "drafted": True}
    got = statuses("chain-one-step", {"totals": near})
    assert got["totals.L1.acceptance_rate"] == "fail"  # off by 7e-5, beyond the tolerance
    assert got["totals.L1.drafted"] == "fail"  # a bool is not a count


def test_the_judge_checks_each_request_apart_from_the_totals() -> None:
    r = {"drafted": 3, "accepted": 2, "spec_steps": 1}
    swapped = {"r1": r, "r2": {**r, "accepted": 1}}
    got = statuses("chain-is-a-tree", {"totals": {}, "requests": swapped})
    assert got["requests.r1.L1.accepted"] == "pass"
    assert got["requests.r2.L1.accepted"] == "fail"
    assert statuses("chain-is-a-tree", {"totals": {}})["requests.r1.L1.drafted"] == "fail"


def random_input(rng: random.Random) -> dict[str, object]:
    """A random core input: chain or tree steps, some inadmissible (C-A1, C-A2), some discarded,
    several sequences per request. Trees keep C-A3 and filler C-A4, which the reference does
    not model."""
    k_max = rng.randint(1, 5)
    chain_only = rng.random() < 0.6

    def step() -> dict[str, object]:
        if chain_only or rng.random() < 0.5:
            k = rng.randint(0, k_max + (1 if rng.random() < 0.05 else 0))
            v = rng.randint(0, k + (1 if rng.random() < 0.05 else 0))
            s: dict[str, object] = {"proposed": k, "verified": v, "accepted": rng.randint(0, v)}
            if rng.random() < 0.05:
                s["accepted"] = v + 1
        else:
            tree = [rng.randint(1, 3) for _ in range(rng.randint(0, k_max))]
            v = rng.randint(0, sum(tree))
            s = {"tree": tree, "verified": v, "accepted": rng.randint(0, min(v, len(tree)))}
        if rng.random() < 0.03:
            s["verified"] = -1
        if rng.random() < 0.1:
            s["applied"] = False
        return s

    requests = [
        {
            "id": f"r{i}",
            "sequences": [
                [step() for _ in range(rng.randint(0, 4))] for _ in range(rng.randint(1, 3))
            ],
        }
        for i in range(rng.randint(1, 3))
    ]
    return {"k_max": k_max, "requests": requests}


def answers(command: list[str], inputs: list[dict[str, object]]) -> list[dict[str, object]]:
    lines = "".join(
        json.dumps({"protocol": "spectally-conform/1", "id": str(i), "level": "L3", "input": x})
        + "\n"
        for i, x in enumerate(inputs)
    )
    out = subprocess.run(
        command, input=lines, capture_output=True, text=True, check=True, timeout=600
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


def comparable(answer: dict[str, object], skip: set[str]) -> object:
    """What both implementations must agree on: the error rule, or every counter and metric
    but those in ``skip`` (what the reference declares unsupported), floats rounded."""
    if "error" in answer:
        return answer["error"]

    def clean(x: object) -> object:
        if isinstance(x, float):
            return round(x, 9)
        if isinstance(x, list):
            return [clean(e) for e in x]
        if isinstance(x, dict):
            return {k: clean(v) for k, v in sorted(x.items()) if k not in skip}
        return x

    return clean({"totals": answer["totals"], "requests": answer["requests"]})


@needs_node
def test_the_two_implementations_agree_on_random_inputs() -> None:
    """Differential check: the JS implementation and the reference, both through the protocol,
    give the same error rule or the same counters on every input."""
    rng = random.Random(20261203)
    inputs = [random_input(rng) for _ in range(300)]
    ref = answers(REFERENCE, inputs)
    js = answers([str(NODE), str(JS / "conform.mjs")], inputs)
    assert len(ref) == len(js) == len(inputs)
    errors = sum("error" in a for a in ref)
    assert 10 < errors < 200  # both branches exercised
    for x, a, b in zip(inputs, ref, js, strict=True):
        skip = set(a.get("unsupported", []))  # type: ignore[arg-type]
        assert comparable(a, skip) == comparable(b, skip), x
