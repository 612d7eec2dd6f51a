"""The recorder driven through stories of engine events, without vLLM: a stand-in engine whose
scheduler records a step log (fake_scheduler.py), random stories of arrivals, aborts and
preemptions, and the shutdown that closes the log as capture.py does. Shared by the recorder's
tests (tests/vllm/test_recorder.py) and the columnar checker's lifecycle tests."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from fake_scheduler import FakeEngine, RecordingAsyncFake, RecordingFake
from spectally.engine_bridge.steplog.writer import append_record, totals_record
from spectally.engine_bridge.vllm.recorder import state

K = 3


def recording_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, seed: int = 0
) -> FakeEngine:
    log = tmp_path / f"{mode}-{seed}.ndjson"
    monkeypatch.setenv(state.ENV_PATH, str(log))
    monkeypatch.delenv(state.ENV_BACKPORT, raising=False)
    monkeypatch.setenv(state.ENV_SO_BACKEND, "")
    monkeypatch.setenv(state.ENV_TOTALS, "0")  # finish_recording appends the fake's own totals
    cls = RecordingAsyncFake if mode == "async" else RecordingFake
    engine = FakeEngine(cls(K), random.Random(seed))
    engine.min_draft = 1  # the reproductions need a proposal for the request that finishes
    engine.log = log  # type: ignore[attr-defined]
    return engine


def finish_recording(engine: FakeEngine) -> list[dict[str, Any]]:
    """Shut down like capture.py: close the recorder, append the engine's own totals."""
    engine.drain()
    sched = engine.sched
    assert sched._sx.active, "the recorder stopped on an error (see the log output)"
    sched.shutdown()
    drafts, tokens, accepted, per_pos = sched.totals
    totals = totals_record("get_metrics", [drafts, tokens, accepted], per_pos)
    append_record(str(engine.log), totals)  # type: ignore[attr-defined]
    return [json.loads(line) for line in engine.log.read_text().splitlines()]  # type: ignore[attr-defined]


def run_until_idle(engine: FakeEngine, limit: int = 400) -> None:
    while engine.busy():
        engine.step()
        assert engine.steps < limit


def random_story(
    engine: FakeEngine, rng: random.Random, kv: bool, reset: bool, in_flight: float = 0.1
) -> None:
    """Random arrivals, aborts (what a client disconnect or a matched stop string becomes) and
    preemptions between steps, and aborts after a forward pass before its output is processed
    (share ``in_flight`` of the steps); requests also finish by length."""
    n = 0
    for _ in range(rng.randint(2, 4)):
        # some structured requests, whose grammar may cut every draft (scheduled 0, sampled 1)
        engine.add(f"r{n}", rng.randint(1, 30), rng.choice((None, None, 0, 2)))
        n += 1
    for _ in range(rng.randint(5, 40)):
        running = sorted(engine.sched.requests)
        if running and rng.random() < in_flight:
            engine.step(abort_in_flight=(rng.choice(running),))
        else:
            engine.step()
        live = sorted(engine.sched.requests)
        roll = rng.random()
        if roll < 0.2:
            engine.add(f"r{n}", rng.randint(1, 30))
            n += 1
        if live and rng.random() < 0.15:
            engine.abort(rng.choice(live))
        if live and kv and rng.random() < 0.15:
            engine.preempt(rng.choice(live))  # drop_stale_output as the header says
        if live and reset and rng.random() < 0.1:
            # May be aborted in the same gap below (a preemption between two steps).
            engine.reset_preempt(rng.choice(live))
        if roll > 0.9:  # several things in one gap, an arrival aborted at once among them
            engine.add(f"r{n}", rng.randint(1, 30))
            live.append(f"r{n}")
            n += 1
            if live:
                engine.abort(*live[: rng.randint(1, len(live))])
    run_until_idle(engine)
