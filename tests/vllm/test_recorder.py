"""The recorder's hooks (engine_bridge/vllm/recorder/recording.py) driven through interleavings of
engine events without vLLM (tests/fake_scheduler.py stands in for the scheduler): the log reaches
the file in step order whatever arrives between two steps, every block states what the engine
delivered, and the log replays with full agreement."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from fake_scheduler import FakeEngine
from recorder_stories import finish_recording, random_story, recording_engine, run_until_idle
from spectally.engine_bridge.replay.dispatch import replay_file
from spectally.engine_bridge.steplog.writer import StepOrderBuffer
from spectally.engine_bridge.vllm.recorder import state


def _check(engine: FakeEngine, records: list[dict[str, Any]]) -> None:
    steps = [r["step"] for r in records if "step" in r]
    assert steps == sorted(steps), "records out of step order"
    for r in records:
        if r["record"] != "request_step":
            continue
        if r["outcome"] == "applied":
            assert 1 <= r["delivered"] <= r["sampled"], r
        else:
            assert r["delivered"] == 0, r
    result = replay_file(str(engine.log), max_divergences=1, progress=False)  # type: ignore[attr-defined]
    detail = result.divergences[0].reason if result.divergences else result.bad_input
    assert result.status == "agree", detail
    assert result.exit_code == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_finish_by_length_then_abort_between_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """One request finishes by length in step s (sync: its next
    proposal becomes a discarded block of step s+1), another is aborted right after step s."""
    engine = recording_engine(tmp_path, monkeypatch, mode)
    engine.add("short", 4)
    engine.add("long", 200)
    while "short" in engine.sched.requests:
        engine.step()
    engine.abort("long")
    run_until_idle(engine)
    records = finish_recording(engine)
    assert any(r.get("event") == "abort" for r in records)
    _check(engine, records)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_add_then_abort_between_two_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """A request is added and another aborted between two
    steps (the add is stamped with the next step, the abort with the current one)."""
    engine = recording_engine(tmp_path, monkeypatch, mode)
    engine.add("a", 200)
    engine.add("b", 40)
    for _ in range(3):
        engine.step()
    engine.add("c", 10)
    engine.abort("a")
    engine.add("d", 10)  # added and aborted in the same gap: never scheduled
    engine.abort("d")
    run_until_idle(engine)
    _check(engine, finish_recording(engine))


def test_the_reproduction_fails_without_the_order_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old flush rule (write whatever no in-flight step holds back) gives the log the issue
    reported: replay refuses it with `step went backwards`."""
    monkeypatch.setattr(state._RecorderState, "floor", lambda self: 1 << 62)
    engine = recording_engine(tmp_path, monkeypatch, "sync")
    engine.add("short", 4)
    engine.add("long", 200)
    while "short" in engine.sched.requests:
        engine.step()
    engine.abort("long")
    run_until_idle(engine)
    finish_recording(engine)
    result = replay_file(str(engine.log), max_divergences=1, progress=False)  # type: ignore[attr-defined]
    assert result.status == "bad_input"
    assert "step went backwards" in str(result.bad_input)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_random_interleavings_replay_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, seed: int
) -> None:
    rng = random.Random(seed)
    engine = recording_engine(tmp_path, monkeypatch, mode, seed)
    engine.min_draft = seed % 2  # odd seeds: ngram-like misses too
    # Async preemption in schedule() without drop_stale_output delivers the stale output: left to
    # the stale-output test below (its replay needs the delivered rule); here async gets
    # preemptions in drop mode (reset_prefix_cache between steps, or requires_kv_delivery).
    if mode == "async" and seed % 3 == 0:
        engine.sched.requires_kv_delivery = True  # KV-pressure preemptions drop stale output
    random_story(engine, rng, kv=mode == "sync" or seed % 3 == 0, reset=True)
    _check(engine, finish_recording(engine))


@pytest.mark.parametrize("seed", range(10))
def test_async_stale_output_is_delivered_and_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Async preemption without drop_stale_output: the block in flight is stale, vLLM delivers
    its tokens and counts it, so the recorder writes `applied` with `delivered` > 0 (BRIEF
    interface 2)."""
    rng = random.Random(seed)
    engine = recording_engine(tmp_path, monkeypatch, "async", seed)
    engine.add("x", 60)
    engine.add("y", 60)
    engine.step()
    engine.step()
    engine.preempt("x")
    random_story(engine, rng, kv=True, reset=False)
    records = finish_recording(engine)
    preempts = [r for r in records if r.get("event") == "preempt"]
    assert preempts and not preempts[0]["drop_stale_output"]
    stale_steps = {
        r["step"] for r in records if r["record"] == "request_step" and r["request"] == "x"
    }
    assert all(
        r["outcome"] == "applied" and r["delivered"] >= 1
        for r in records
        if r["record"] == "request_step" and r["request"] == "x" and r["step"] == min(stale_steps)
    )
    # The engine's own counters include the delivered stale block, and replay agrees: the block
    # is closed (applied) before the preempt record of the next step is read.
    stats = sum(r["num_drafts"] for r in records if r["record"] == "step_stats")
    assert stats == engine.sched.totals[0]
    _check(engine, records)


def test_order_buffer_writes_by_step_then_arrival() -> None:
    out: list[dict[str, Any]] = []
    buf = StepOrderBuffer(out.append)
    buf.push(2, {"i": "a"})
    buf.push(1, {"i": "b"})
    buf.push(2, {"i": "c"})
    buf.push(1, {"i": "d"})
    buf.release(2)
    assert [r["i"] for r in out] == ["b", "d"]
    buf.release(2)
    assert len(buf) == 2
    buf.drain()
    assert [r["i"] for r in out] == ["b", "d", "a", "c"]
    assert buf.late == 0
    buf.push(1, {"i": "late"})  # below a step already written: kept, and counted
    buf.drain()
    assert out[-1] == {"i": "late"} and buf.late == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_live_sinks_see_every_block_without_waiting_for_the_order_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The backport is a live sink: each block reaches it once, when it is final, so the live
    counters (and a /metrics scrape) do not lag behind the engine by the step the log holds."""
    engine = recording_engine(tmp_path, monkeypatch, mode)
    live: list[dict[str, Any]] = []
    engine.sched._sx.live_sinks.append(live.append)
    engine.add("a", 20)
    engine.add("b", 9)
    run_until_idle(engine)
    engine.drain()
    seen_live = [r for r in live if r["record"] == "request_step"]
    records = finish_recording(engine)
    logged = [r for r in records if r["record"] == "request_step"]
    key = [(r["step"], r["request"]) for r in logged]
    assert sorted((r["step"], r["request"]) for r in seen_live) == sorted(key)
    assert len(set(key)) == len(key)
    _check(engine, records)


def _abort_in_flight_at_step_4(engine: Any, rid: str) -> tuple[list[Any], list[Any]]:
    """Three steps, then ``rid`` aborted between step 4's forward pass and its output; run
    to the end. Returns the log's records and ``rid``'s request_step records."""
    for _ in range(3):
        engine.step()
    engine.step(abort_in_flight=(rid,))
    run_until_idle(engine)
    records = finish_recording(engine)
    blocks = [r for r in records if r["record"] == "request_step" and r["request"] == rid]
    return records, blocks


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_abort_after_the_forward_pass_before_its_output_is_processed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The serving soak's sync divergence: with the engine core in its own process,
    vLLM 0.32 processes aborts between a step's forward pass and ``update_from_output``. The
    step's block ran on the target (sampled > 0), the engine skips its output (the request is
    finished) and the drafter's proposal for the next step is dropped. The recorder writes the
    abort, the block ``discarded_aborted`` with ``sampled`` > 0 and (sync) the proposal
    ``discarded_aborted``; the log replays with agreement (SPEC E3, E6)."""
    engine = recording_engine(tmp_path, monkeypatch, mode)
    engine.add("a", 200)
    engine.add("b", 200)
    records, blocks = _abort_in_flight_at_step_4(engine, "a")
    in_flight = [b for b in blocks if b["outcome"] == "discarded_aborted" and b["scheduled"] > 0]
    assert in_flight and in_flight[0]["sampled"] > 0 and in_flight[0]["delivered"] == 0
    if mode == "sync":  # the drafter's proposal made in that forward pass, never scheduled
        after = [b for b in blocks if b["step"] == in_flight[0]["step"] + 1]
        assert after and after[0]["outcome"] == "discarded_aborted" and after[0]["scheduled"] == 0
    _check(engine, records)


def test_abort_after_a_forward_pass_without_drafts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the live sync serving soak showed next: a structured request whose grammar cut
    every draft (scheduled 0) still runs in the forward pass (sampled 1); aborted before its
    output is processed, its block is discarded_aborted with scheduled 0 and sampled 1, and
    the proposal made in that pass follows. The block was in the forward pass (translate:
    sampled > 0 means Verify), so the proposal may open (E3) and the log replays."""
    engine = recording_engine(tmp_path, monkeypatch, "sync")
    engine.add("s", 200, grammar_keep=0)
    engine.add("p", 200)
    records, blocks = _abort_in_flight_at_step_4(engine, "s")
    hit = [b for b in blocks if b["outcome"] == "discarded_aborted" and b["sampled"] > 0]
    assert hit and hit[0]["scheduled"] == 0 and hit[0]["grammar_valid"] == 0
    assert any(b["step"] == hit[0]["step"] + 1 for b in blocks)
    _check(engine, records)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_reset_prefix_cache_preemption_then_abort_in_the_same_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """A request preempted between two steps (reset_prefix_cache, drop
    mode) and aborted in the same gap. Sync: the preemption drops the proposal meant for the
    next step (a discarded_preempted block of that step); the abort is stamped with that step
    too, so the preempt closes the block before the abort is read."""
    engine = recording_engine(tmp_path, monkeypatch, mode)
    engine.add("a", 200)
    engine.add("b", 200)
    for _ in range(3):
        engine.step()
    engine.reset_preempt("a")
    engine.abort("a")
    run_until_idle(engine)
    records = finish_recording(engine)
    mine = [r for r in records if r.get("request") == "a"]
    assert [r.get("event") for r in mine if r["record"] == "request"][-2:] == ["preempt", "abort"]
    if mode == "sync":
        assert any(r.get("outcome") == "discarded_preempted" for r in mine)
    _check(engine, records)
