"""`spectally parity`: the RFC's sync/async promise, request by request, on the project's real
sync/async pairs (vLLM 0.32 CPU engine runs and the 0.33.0 scheduler simulation), plus a
counting mutant that must be caught (exit 1, naming the request and block)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import spectally.reference.machine as machine
from click.testing import CliRunner
from spectally.commands import main
from spectally.engine_bridge.compare.parity import compare_runs, read_run, render
from spectally.exit_codes import ExitCode
from spectally.reference.step import Mode

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "vllm"
EXAMPLES = ROOT / "engine_bridge" / "examples"

# Every committed sync/async pair of the same workload.
PAIRS = {
    "interleave": (
        FIX / "sync-draft-noise05-k3-interleave.ndjson.gz",
        FIX / "async-draft-noise05-k3-interleave.ndjson.gz",
    ),
    "preempt": (
        FIX / "sync-draft-noise05-k3-preempt.ndjson.gz",
        FIX / "async-draft-noise05-k3-preempt.ndjson.gz",
    ),
    "so-json": (
        FIX / "sync-draft-noise05-k3-so-json-xgrammar.ndjson.gz",
        FIX / "async-draft-noise05-k3-so-json-xgrammar.ndjson.gz",
    ),
    "stop": (
        FIX / "sync-draft-noise05-k3-stop.ndjson.gz",
        FIX / "async-draft-noise05-k3-stop.ndjson.gz",
    ),
    "example-so-json": (
        EXAMPLES / "vllm-0.32-cpu-sync-draft-model-so-json.ndjson.gz",
        EXAMPLES / "vllm-0.32-cpu-async-draft-model-so-json.ndjson.gz",
    ),
    "sim-0.33-so": (
        FIX / "sim-vllm-0.33.0-sync-so-json-k4.ndjson.gz",
        FIX / "sim-vllm-0.33.0-async-so-json-k4.ndjson.gz",
    ),
    "sim-0.34-so": (
        FIX / "sim-vllm-0.34.0-sync-so-json-k4.ndjson.gz",
        FIX / "sim-vllm-0.34.0-async-so-json-k4.ndjson.gz",
    ),
    "sim-0.33": (
        FIX / "sim-vllm-0.33.0-sync-draft-k3.ndjson.gz",
        FIX / "sim-vllm-0.33.0-async-draft-k3.ndjson.gz",
    ),
}


def invoke(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_real_pairs_keep_the_promise(name: str) -> None:
    sync, asy = PAIRS[name]
    code, out, _ = invoke(["parity", "--json", str(sync), str(asy)])
    report = json.loads(out)
    assert code == ExitCode.OK, out
    assert report["summary"]["violations"] == 0
    assert report["summary"]["stories_equal"] == report["summary"]["counters_equal"]
    for r in report["requests"]:
        if r["story_equal"]:
            assert r["counters_equal"] and not r["differing"], r
        else:  # a parted story names where and why
            assert r["parted_at"] >= 1 and r["what"] and r["sync_entry"] and r["async_entry"]


def test_structured_output_pair_shows_what_the_rfc_fixes() -> None:
    """Same stories, equal rfc counters, and vllm-legacy counters that differ: the RFC's case."""
    report = compare_runs(*(read_run(str(p)) for p in PAIRS["so-json"]))
    s = report.summary()
    assert s["requests_compared"] == s["stories_equal"] == s["counters_equal"] > 0
    assert s["legacy_num_drafts_differ"] > 0


def test_preemption_parts_the_stories() -> None:
    report = compare_runs(*(read_run(str(p)) for p in PAIRS["preempt"]))
    parted = [r for r in report.requests if not r.story_equal]
    assert parted
    assert all(r.what.startswith("preemption:") for r in parted)
    assert any(r.differing for r in parted)  # different stories do change the counters


def test_abort_timing_parts_the_stories() -> None:
    """The interleave pair aborts two requests: sync applied one more block before the abort,
    async still had that block in flight and discarded it."""
    report = compare_runs(*(read_run(str(p)) for p in PAIRS["interleave"]))
    parted = [r for r in report.requests if not r.story_equal]
    assert parted and all(r.what.startswith("abort timing:") for r in parted)
    assert all("abort" in (r.sync_entry + r.async_entry) for r in parted)


def test_broken_counter_is_a_violation() -> None:
    """Break one counter of one block of the async run (drafted + 1, as a counting path that
    counted a placeholder would): the request and the block must be named, exit 1."""
    sync, asy = (read_run(str(p)) for p in PAIRS["stop"])
    rid = asy.order[1]
    step = next(e.step for e in asy.stories[rid] if e.kind == "block")
    block = asy.blocks[(rid, step)]
    asy.blocks[(rid, step)] = dataclasses.replace(block, drafted=block.drafted + 1)
    c = asy.counters[rid]
    asy.counters[rid] = dataclasses.replace(
        c, rfc=dataclasses.replace(c.rfc, drafted=c.rfc.drafted + 1)
    )
    report = compare_runs(sync, asy)
    assert report.exit_code == ExitCode.DIVERGENCE
    (bad,) = [r for r in report.requests if r.violation]
    assert bad.async_id == rid and bad.parted_at == 1
    assert bad.differing == [("drafted", c.rfc.drafted, c.rfc.drafted + 1)]
    text = render(report)
    assert f"VIOLATION request {bad.key!r}" in text and "block 1" in text


def test_counting_mutant_in_the_reference_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A counting bug in the reference (async drafted + 1) breaks an invariant the replay checks,
    so parity refuses the log (exit 1) rather than compare counters it cannot trust."""
    real = machine.rfc_step

    def mutant(mode: Mode, inputs: Any, ar: Any, *profile: Any) -> Any:
        counts = real(mode, inputs, ar, *profile)
        if mode is Mode.ASYNC and inputs.applied:
            return dataclasses.replace(counts, drafted=counts.drafted + 1)
        return counts

    monkeypatch.setattr(machine, "rfc_step", mutant)
    sync, asy = PAIRS["stop"]
    code, out, err = invoke(["parity", str(sync), str(asy)])
    assert code == ExitCode.DIVERGENCE, out + err
    assert "diverges from the reference" in err and "INV-2" in err


def test_usage_errors() -> None:
    sync, asy = PAIRS["stop"]
    code, _, err = invoke(["parity", str(asy), str(sync)])
    assert code == ExitCode.BAD_INPUT and "expected a sync log then an async log" in err
    code, _, err = invoke(["parity", str(sync), str(FIX / "no-such.ndjson.gz")])
    assert code == ExitCode.BAD_INPUT and "cannot read" in err
    k5 = FIX / "draft-noise05-k5-greedy.ndjson.gz"
    code, _, err = invoke(["parity", str(sync), str(k5)])
    assert code == ExitCode.BAD_INPUT
    # Each k with its log: the line named neither, so the user could not tell which is which.
    k3, k4 = (
        ROOT / "tests" / "traces" / "agree" / n
        for n in ("sync_basic.ndjson", "async_structured_outputs.ndjson")
    )
    code, _, err = invoke(["parity", str(k3), str(k4)])
    assert code == ExitCode.BAD_INPUT
    assert f"num_speculative_tokens differs: 3 ({k3}) against 4 ({k4})" in err
