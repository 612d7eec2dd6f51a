"""The project's vocabulary is spelled once: block outcomes come from the reference's `Outcome`,
verdicts and exit codes from `spectally.exit_codes`, errors from `SpectallyError`."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from spectally.engine_bridge.fleet.job import BackendUnavailable
from spectally.engine_bridge.fleet.ray import RayUnavailable
from spectally.engine_bridge.replay.columnar import reader, scanner
from spectally.engine_bridge.steplog import schema, translate, typed
from spectally.engine_bridge.steplog.records import BadInput
from spectally.exit_codes import EXIT_SEVERAL, SEVERITY, ExitCode, Verdict
from spectally.reference.errors import SpectallyError
from spectally.reference.machine import Outcome
from spectally.spec import vectors

ROOT = Path(__file__).resolve().parents[2]
OUTCOMES = tuple(o.value for o in Outcome)


def test_every_spelling_of_the_block_outcomes_is_the_reference_s() -> None:
    assert scanner.OUTCOMES == OUTCOMES
    assert reader.OUTCOMES == OUTCOMES
    assert get_args(typed.Outcome) == OUTCOMES  # msgspec's typed decoder needs a Literal
    assert schema.OUTCOMES == OUTCOMES
    assert vectors.OUTCOMES == OUTCOMES
    assert set(translate.DISCARDED_OUTCOMES) == set(OUTCOMES) - {"applied"}
    assert set(translate.LIFECYCLE_OUTCOME.values()) | set(translate.HELD_ACCEPT_OUTCOMES) == (
        set(translate.DISCARDED_OUTCOMES)
    )


def test_each_verdict_has_its_exit_code_and_label() -> None:
    assert {v: v.exit_code for v in Verdict} == {
        Verdict.AGREE: ExitCode.OK,
        Verdict.DIVERGE: ExitCode.DIVERGENCE,
        Verdict.BAD_INPUT: ExitCode.BAD_INPUT,
        Verdict.INCOMPLETE: ExitCode.INCOMPLETE,
        Verdict.INTERNAL_ERROR: ExitCode.INTERNAL_ERROR,
    }
    assert [v.label for v in Verdict] == [
        "AGREE",
        "DIVERGE",
        "BAD INPUT",
        "INCOMPLETE",
        "INTERNAL ERROR",
    ]
    assert f"{Verdict.BAD_INPUT}" == "bad_input" == Verdict.BAD_INPUT  # the JSON status
    assert EXIT_SEVERAL.endswith(f"({' > '.join(str(int(c)) for c in SEVERITY)}).")


def test_every_error_raised_on_purpose_is_a_spectally_error() -> None:
    for error in (
        BadInput,
        translate.Untranslatable,
        vectors.VectorFormatError,
        BackendUnavailable,
        RayUnavailable,
    ):
        assert issubclass(error, SpectallyError), error


def test_sys_exit_only_with_an_exit_code() -> None:
    """No ``sys.exit(<int literal>)`` in the packages: a code is named by `ExitCode`."""
    bad = []
    for folder in ("cli", "engine_bridge", "spec", "proofs", "reference"):
        for path in (ROOT / folder).rglob("*.py"):
            if "bugs_detected" in path.parts or "correct_code" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Call)
                    and ast.unparse(node.func) == "sys.exit"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                ):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert bad == []
