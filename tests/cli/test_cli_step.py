"""`spectally step`: one request-step on the command line (click's CliRunner, plus one real
subprocess call of the installed entry point)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hypothesis import given
from spectally.commands import main
from spectally.reference.machine import step_counts
from spectally.reference.profile import PROFILES
from spectally.reference.step import Mode, StepQuery, token_fates
from strategies import step_queries

RFC_ROW = [
    "step",
    "--mode",
    "async",
    "--proposed",
    "4",
    "--grammar-valid",
    "2",
    "--av-verify",
    "3",
    "--accepted",
    "1",
]


def invoke(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


def test_rfc_row_json() -> None:
    code, out, _ = invoke([*RFC_ROW, "--json"])
    assert code == 0
    data = json.loads(out)
    rfc = data["rfc"]
    assert (rfc["drafted"], rfc["verified"], rfc["accepted"], rfc["spec_steps"]) == (4, 3, 1, 1)
    assert data["vllm-legacy"] == {"drafted": 2, "accepted": 1, "spec_steps": 1}
    assert data["token_fates"] == [
        "accepted",
        "rejected",
        "grammar_invalid_verified",
        "av_skipped",
    ]
    assert rfc["fates"]["grammar_invalid_verified"] == 1


def test_rfc_row_human_output_lists_each_fate() -> None:
    code, out, _ = invoke(RFC_ROW)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "mode async: 4 drafted"
    assert lines[1:5] == [
        "  draft 0: accepted",
        "  draft 1: rejected",
        "  draft 2: grammar_invalid_verified",
        "  draft 3: av_skipped",
    ]
    assert lines[5:] == [
        "rfc         drafted 4  verified 3  accepted 1  spec_steps 1",
        "vllm-legacy drafted 2  accepted 1  spec_steps 1",
    ]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--mode", "async", "--proposed", "4", "--accepted", "5"], "accepted cannot exceed"),
        (["--mode", "sync", "--proposed", "-1", "--accepted", "0"], "proposed must be >= 0"),
        (
            ["--mode", "sync", "--proposed", "2", "--grammar-valid", "3", "--accepted", "0"],
            "cannot exceed the proposal",
        ),
        (
            ["--mode", "sync", "--proposed", "2", "--scheduled", "-1", "--accepted", "0"],
            "schedule cap must be >= 0",
        ),
    ],
)
def test_inadmissible_input_exits_nonzero_with_one_line(args: list[str], reason: str) -> None:
    code, out, err = invoke(["step", *args])
    assert code != 0
    assert out == ""
    assert err.count("\n") == 1 and err.endswith("\n")
    assert err.startswith("spectally step: inadmissible input: ")
    assert reason in err


def test_bad_mode_is_a_usage_error() -> None:
    code, _, err = invoke(["step", "--mode", "fast", "--proposed", "1", "--accepted", "0"])
    assert code == 2
    assert "Invalid value for '--mode'" in err


@given(step_queries())
def test_cli_json_agrees_with_the_reference(q: StepQuery) -> None:
    """Whatever the flags, the JSON is step_counts + token_fates of the same query.
    (The CLI has no --padding/--applied flags: those fields are left at their defaults.)"""
    args = ["step", "--mode", q.mode.value, "--proposed", str(q.proposed)]
    args += ["--accepted", str(q.accepted), "--json"]
    for flag, value in [
        ("--grammar-valid", q.grammar_valid),
        ("--scheduled", q.scheduled),
        ("--av-verify", q.av_verify),
    ]:
        if value is not None:
            args += [flag, str(value)]
    plain = StepQuery(
        q.mode, q.proposed, q.accepted, q.grammar_valid, q.scheduled, q.av_verify
    )  # padding 0, applied
    code, out, err = invoke(args)
    if plain.violations():
        assert code != 0 and err.startswith("spectally step: inadmissible input: ")
        return
    assert code == 0, err
    expected = step_counts(q.mode, plain.inputs())
    expected["token_fates"] = token_fates(q.mode, plain.inputs())
    assert json.loads(out) == expected


def test_real_subprocess() -> None:
    exe = shutil.which("spectally")
    cmd = [exe] if exe else [sys.executable, "-m", "spectally"]
    done = subprocess.run(
        [*cmd, *RFC_ROW, "--json"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [data["rfc"][n] for n in ("drafted", "verified", "accepted")] == [4, 3, 1]
    assert data["vllm-legacy"]["drafted"] == 2
    bad = subprocess.run(
        [*cmd, "step", "--mode", "sync", "--proposed", "1", "--accepted", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode != 0
    assert bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1


def test_step_profile_selects_the_release_pipeline() -> None:
    """--profile vllm-0.34: trim_spec_tokens keeps the first invalid draft, so vLLM's own
    drafted and the rfc's verified count it; the default profile does not."""
    args = ["step", "--mode", "sync", "--proposed", "4", "--grammar-valid", "2", "--accepted", "1"]
    runner = CliRunner()
    new = json.loads(runner.invoke(main, [*args, "--profile", "vllm-0.34", "--json"]).output)
    old = json.loads(runner.invoke(main, [*args, "--json"]).output)
    assert (new["vllm-0.34"]["drafted"], new["rfc"]["verified"]) == (3, 3)
    assert (old["vllm-legacy"]["drafted"], old["rfc"]["verified"]) == (2, 2)
    assert new["token_fates"][2] == "grammar_invalid_verified"
    bad = runner.invoke(main, [*args, "--profile", "vllm-9"])
    assert bad.exit_code == 2


@pytest.mark.parametrize("profile", ["vllm-0.34", "vllm-0.34-rfc", "llama.cpp"])
def test_step_labels_the_engine_counters_by_the_profile_used(profile: str) -> None:
    """The engine's own counters are the chosen profile's: the JSON key and the printed row
    carry its name, never the default's, and the figures are step_counts' under it."""
    args = ["step", "--mode", "sync", "--proposed", "4", "--grammar-valid", "2", "--accepted", "1"]
    data = json.loads(invoke([*args, "--profile", profile, "--json"])[1])
    assert list(data) == ["rfc", profile, "token_fates"]
    q = StepQuery(Mode.SYNC, 4, 1, grammar_valid=2)
    assert data[profile] == step_counts(q.mode, q.inputs(), PROFILES[profile])["vllm-legacy"]
    code, out, _ = invoke([*args, "--profile", profile])
    assert code == 0
    rows = out.splitlines()[-2:]
    assert rows[0].split()[0] == "rfc" and rows[1].split()[0] == profile
    assert rows[0].index("drafted") == rows[1].index("drafted")  # the columns line up
    assert "vllm-legacy" not in out
