"""spectally prove: every property as expected, the JSON shape, and witnesses that replay.

How long the proofs take is a benchmark figure (benchmarks/bench_prove.py, budget 60 s on 2
cores), not a test: a verdict here must not depend on the machine's load. Every solver
check is bounded by Z3's resource budget (rlimit, a count of solver work), not by the clock; the
wall-clock limit is a safety net far above any run (docs/proofs.md, "Solver budget")."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("z3")

from click.testing import CliRunner
from spectally.cli import main
from spectally.proofs.mutants import MUTANTS, patched
from spectally.proofs.obligations import DEFAULT_RLIMIT
from spectally.proofs.properties import all_properties
from spectally.proofs.runner import PropertyResult
from spectally.proofs.witness import engine_counts, query_from, reference_counts
from spectally.reference.step import Mode, StepQuery

NAMES = {
    *(f"step:INV-{n}" for n in range(1, 9)),
    *(f"trace:INV-{n}" for n in range(1, 11)),
    "step:discarded",
    "event:block",
    "event:close",
    "event:discard",
    "story:sync-async",
    "theorem:sync-async",
    "metrics:bounds",
    "metrics:identities",
    "merge:monoid",
    "legacy:drafted>=verified",
    "vllm-0.34:drafted>=verified",
    "legacy:sync-async-spec-steps",
}


@pytest.fixture(scope="module")
def results(proof_results: list[PropertyResult]) -> list[PropertyResult]:
    return proof_results  # conftest: one run_all() for this file and test_mutants


@pytest.fixture(scope="module")
def prove_json() -> dict[str, Any]:
    result = CliRunner().invoke(main, ["prove", "--json"])
    assert result.exit_code == 0, result.output
    payload: dict[str, Any] = json.loads(result.output)
    return payload


def test_every_property_is_as_expected(results: list[PropertyResult]) -> None:
    bad = {f"{r.name} ({r.mode})": [o.label for o in r.failing] for r in results if not r.ok}
    assert not bad


# The budget is at least this many times any obligation's use on the reference (measured:
# docs/proofs.md, "Solver budget"). Z3's resource count is the same under any load but may vary a
# little between runs and machines (hash orders); the margin keeps every verdict far from it.
MARGIN = 50


def test_every_check_stays_far_below_the_resource_budget(results: list[PropertyResult]) -> None:
    uses = {f"{r.name} ({r.mode}) {o.label}": o.rlimit for r in results for o in r.outcomes}
    assert len(uses) > 250
    assert all(use > 0 for use in uses.values())  # the count is read, not a default 0
    near = {label: use for label, use in uses.items() if use * MARGIN > DEFAULT_RLIMIT}
    assert not near, f"recalibrate (python -m spectally.proofs.calibrate): {near}"


def test_an_exhausted_budget_is_unknown_never_proved() -> None:
    """With a budget of 1 resource unit nothing can be settled: every obligation is unknown,
    says why, and `spectally prove` fails (a budget that is not applied would prove them)."""
    result = CliRunner().invoke(main, ["prove", "--only", "step:INV-1", "--rlimit", "1", "--json"])
    assert result.exit_code == 1, result.output
    payload = json.loads(result.output)
    assert payload["counts"] == {"proved": 0, "refuted": 0, "unknown": 2}
    obligations = [o for p in payload["properties"] for o in p["obligations"]]
    assert obligations
    for o in obligations:
        assert o["status"] == "unknown"
        assert o["reason"] == "resource budget exhausted (rlimit 1)"


def test_registry_names_and_modes() -> None:
    props = all_properties()
    assert {p.name for p in props} == NAMES
    for p in props:
        if p.name.startswith(("step:", "trace:", "event:")):
            assert {q.mode for q in props if q.name == p.name} == {"sync", "async"}
    keys = [(p.name, p.mode) for p in props]
    assert len(keys) == len(set(keys))


def test_expected_verdicts(results: list[PropertyResult]) -> None:
    verdicts = {(r.name, r.mode): r.verdict for r in results}
    assert verdicts[("legacy:drafted>=verified", "async")] == "refuted"
    assert verdicts[("legacy:drafted>=verified", "sync")] == "proved"  # sync validates first
    assert verdicts[("legacy:sync-async-spec-steps", "both")] == "refuted"
    assert sum(v == "proved" for v in verdicts.values()) == len(verdicts) - 2


def test_json_shape(prove_json: dict[str, Any]) -> None:
    assert prove_json["ok"] is True
    assert set(prove_json["counts"]) == {"proved", "refuted", "unknown"}
    assert prove_json["counts"]["unknown"] == 0
    for p in prove_json["properties"]:
        assert {"name", "profile", "verdict", "seconds"} <= set(p)
        assert p["verdict"] in ("proved", "refuted", "unknown")
        assert p["profile"] in ("rfc", "vllm-legacy", "vllm-0.34", "all")
        assert isinstance(p["seconds"], float)
        if p["verdict"] == "refuted":
            assert isinstance(p["witness"], dict)
        else:
            assert "witness" not in p


def _witness_entries(prove_json: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for p in prove_json["properties"]:
        for w in p.get("witnesses", []):
            for key, entry in w.items():
                if isinstance(entry, dict) and "command" in entry:
                    assert key in ("sync", "async")
                    out.append((w, entry))
    return out


def test_witnesses_replay_through_cli_reference_and_engine(prove_json: dict[str, Any]) -> None:
    entries = _witness_entries(prove_json)
    assert len(entries) == 5  # 3 drafted>=verified scenarios, 2 modes of the spec-steps one
    runner = CliRunner()
    for w, entry in entries:
        assert entry["replay"] == "ok"
        args = shlex.split(entry["command"])
        assert args[:2] == ["spectally", "step"]
        result = runner.invoke(main, [*args[1:], "--json"])
        assert result.exit_code == 0, result.output
        cli = json.loads(result.output)
        for profile, counts in entry["counts"].items():
            for name, value in counts.items():
                assert cli[profile][name] == value, (entry["command"], profile, name)
        q = _query(args)
        assert reference_counts(q) == entry["counts"]
        assert engine_counts(q, w["k"]) == entry["counts"]


def _query(args: list[str]) -> StepQuery:
    opts = dict(zip(args[2::2], args[3::2], strict=True))

    def num(flag: str) -> int | None:
        return int(opts[flag]) if flag in opts else None

    return StepQuery(
        mode=Mode(opts["--mode"]),
        proposed=int(opts["--proposed"]),
        accepted=int(opts["--accepted"]),
        grammar_valid=num("--grammar-valid"),
        scheduled=num("--scheduled"),
        av_verify=num("--av-verify"),
    )


def test_legacy_witness_shapes(results: list[PropertyResult]) -> None:
    dv = next(r for r in results if r.name == "legacy:drafted>=verified" and r.mode == "async")
    for w in dv.witnesses():
        counts = w["async"]["counts"]
        assert counts["vllm-legacy"]["drafted"] < counts["rfc"]["verified"]
        assert counts["rfc"]["drafted"] >= counts["rfc"]["verified"]  # the fix holds there
        assert "--grammar-valid" in w["async"]["command"]  # only structured output breaks it
    row = next(w for w in dv.witnesses() if "RFC row" in w["scenario"])
    assert row["async"]["counts"]["rfc"]["verified"] == 3
    assert row["async"]["counts"]["vllm-legacy"]["drafted"] == 2
    steps = next(r for r in results if r.name == "legacy:sync-async-spec-steps")
    w = steps.witnesses()[0]
    assert "--grammar-valid 0" in w["sync"]["command"]  # every draft grammar-rejected
    assert w["sync"]["counts"]["vllm-legacy"]["spec_steps"] == 0
    assert w["async"]["counts"]["vllm-legacy"]["spec_steps"] == 1
    assert w["sync"]["counts"]["rfc"]["spec_steps"] == w["async"]["counts"]["rfc"]["spec_steps"]


def test_query_from_maps_off_caps_to_none() -> None:
    values: dict[str, int | bool] = {
        "proposed": 3,
        "padding": 0,
        "structured": False,
        "grammar_valid": 3,
        "schedule_cap": 7,
        "av_cap": 2,
        "accepted": 1,
        "applied": True,
        "legacy_reported": True,
    }
    q = query_from(Mode.SYNC, values)
    assert (q.grammar_valid, q.scheduled, q.av_verify) == (None, None, 2)


def test_prove_exits_non_zero_and_prints_a_counterexample_when_a_proof_fails() -> None:
    mutant = next(m for m in MUTANTS if m.name == "spec-step-without-drafts")
    with patched(mutant):
        result = CliRunner().invoke(main, ["prove", "--only", "trace:INV-7"])
    assert result.exit_code == 1
    assert "FAIL" in result.output
    assert "consecution" in result.output  # the counterexample to induction, readable:
    assert "state:" in result.output and "block: spectally step" in result.output


def test_prove_exits_non_zero_when_an_expected_refutation_is_proved() -> None:
    mutant = next(m for m in MUTANTS if m.name == "legacy-counts-empty-steps")
    with patched(mutant):
        result = CliRunner().invoke(main, ["prove", "--only", "legacy:sync-async"])
    assert result.exit_code == 1
    assert "NOT as expected" in result.output


def test_prove_only_unknown_name_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["prove", "--only", "no-such-property"])
    assert result.exit_code == 2


def test_an_obligation_is_the_same_whatever_was_built_before(tmp_path: Path) -> None:
    """Each property is built in its own name scope and Z3 context, so the SMT-LIB the solver
    gets for an obligation (names, term order, recursive functions) is byte-identical whether
    the property is built first or after others, under a mutant or not: its solver work, and
    so its run time, does not depend on the test order."""
    from spectally.proofs.runner import every_property, select
    from spectally.proofs.smt import property_smtlib, write

    wanted = ("step:INV-5", "trace:INV-8", "shape:chain-step", "story:sync-async")
    first = {f"{p.name}.{p.mode}": property_smtlib(p) for p in select(wanted)}
    mutant = next(m for m in MUTANTS if m.name == "position-increment-le")
    with patched(mutant):  # a mutant defines other recursive functions under the same names
        write(tmp_path, select(["step:INV-5", "trace:INV-5"]))
    for p in every_property():
        p.obligations()
    again = {f"{p.name}.{p.mode}": property_smtlib(p) for p in select(wanted)}
    assert len(first) == 6 and all(first.values())
    assert again == first


def test_smt_dump_writes_one_file_per_obligation(tmp_path: Path) -> None:
    from spectally.proofs.smt import main as smt_main

    assert smt_main([str(tmp_path), "--only", "merge:monoid"]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files and files[0] == "merge-monoid.both.00.smt2"
    text = (tmp_path / files[0]).read_text(encoding="utf-8")
    assert "(check-sat)" in text and "merge#0." in text
    with pytest.raises(SystemExit) as exc:
        smt_main([str(tmp_path), "--only", "no-such-property"])
    assert exc.value.code == 2
