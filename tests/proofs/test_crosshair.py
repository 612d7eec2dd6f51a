"""CrossHair: bug examples are flagged, correct examples confirmed (against golden outputs),
the contracts on the reference hold, and diffbehavior tells the two profiles apart.

No verdict here depends on the clock: every default-tier run is bounded by explored
paths (``--max_uninteresting_iterations``), never by seconds. The runs below end because
CrossHair exhausts every path (that is what "confirmed over all paths" means) or finds the
counterexample; the iteration bound only stops a run that makes no progress, and the CPU-second
cap passed alongside is a safety net far above any run (about 1 s per example, ~20 s for the two
contract functions, ~5 s per diffbehavior on 2 cores), so load changes how long they take, not
what they say. The whole contracts module and the reference docstring contracts run in the slow
tier (``pytest -m slow``, ~3 min: 10 CPU-seconds per condition)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("crosshair")

from spectally.proofs import crosshair_run as ch

EXAMPLES = ch.examples()

# Consecutive paths without progress before CrossHair stops. 20 is not enough for the two
# contract functions (most paths fail their preconditions, which counts as no progress: the run
# ends with "Unable to meet precondition"); 200 exhausts them. CAP_S is CPU seconds per
# condition, a safety net only: with it the iteration bound, not the clock, decides.
ITERATIONS = ("--max_uninteresting_iterations=200",)
CAP_S = 3600.0


def _slow_requested(request: pytest.FixtureRequest) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow tier: run with -m slow")


def test_examples_exist_with_goldens() -> None:
    dirs = {p.parent.name for p in EXAMPLES}
    assert dirs == {"bugs_detected", "correct_code"}
    for example in EXAMPLES:
        assert ch.golden_path(example).exists(), example


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_example_matches_golden(example: Path) -> None:
    rc, out = ch.run_check(str(example), CAP_S, extra=ITERATIONS)
    assert out == ch.golden_path(example).read_text()
    findings = ch.findings(out, example)
    assert findings
    if example.parent.name == "bugs_detected":
        assert rc == 1
        assert any(f.verdict == "counterexample" for f in findings)
    else:
        assert rc == 0
        assert all(f.verdict == "confirmed over all paths" for f in findings)


def test_contracts_confirmed_over_all_paths() -> None:
    target = "spectally.proofs.contracts"
    rc, out = ch.run_check(
        f"{target}.rfc_counts", CAP_S, extra=(f"{target}.sync_async_agree", *ITERATIONS)
    )
    assert rc == 0, out
    findings = ch.findings(out, ch.PROOFS_DIR / "contracts.py")
    assert {f.function for f in findings} == {"rfc_counts", "sync_async_agree"}
    assert all(f.verdict == "confirmed over all paths" for f in findings), findings


def _diffbehavior(f1: str, f2: str) -> str:
    exe = shutil.which("crosshair", path=str(Path(sys.executable).parent))
    assert exe
    proc = subprocess.run(
        [exe, "diffbehavior", f1, f2, f"--per_condition_timeout={CAP_S}", *ITERATIONS],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout


def test_diffbehavior_finds_where_legacy_drafted_differs() -> None:
    out = _diffbehavior(
        "spectally.proofs.contracts.rfc_drafted", "spectally.proofs.contracts.legacy_drafted"
    )
    assert "Given:" in out and "structured=True" in out, out


def test_diffbehavior_finds_the_spec_step_mismatch() -> None:
    out = _diffbehavior(
        "spectally.proofs.contracts.rfc_spec_steps",
        "spectally.proofs.contracts.legacy_spec_steps",
    )
    assert "Given:" in out and "grammar_valid=0" in out, out


@pytest.mark.slow
def test_all_contracts_have_no_counterexample(request: pytest.FixtureRequest) -> None:
    _slow_requested(request)
    for target, source in (
        ("spectally.proofs.contracts", ch.PROOFS_DIR / "contracts.py"),
        ("spectally.reference.step", ch.REPO / "reference" / "step.py"),
    ):
        rc, out = ch.run_check(target, 10.0)
        assert rc == 0, out
        findings = ch.findings(out, source)
        assert findings
        assert not [f for f in findings if f.verdict == "counterexample"], findings


@pytest.mark.slow
def test_diffbehavior_profiles_agree_on_accepted(request: pytest.FixtureRequest) -> None:
    _slow_requested(request)
    out = _diffbehavior(
        "spectally.proofs.contracts.rfc_accepted", "spectally.proofs.contracts.legacy_accepted"
    )
    assert "No differences found" in out, out
