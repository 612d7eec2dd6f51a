"""The recorder never leaves a log that silently stops: it refuses to start on a scheduler it
cannot hook (a vLLM release that renamed a method), and a hook that breaks while a step log is
written raises `RecorderFailure` instead of letting the engine run on unrecorded."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from fake_scheduler import FakeEngine, FakeScheduler, RecordingFake
from spectally.engine_bridge.vllm.recorder import state
from spectally.engine_bridge.vllm.recorder.recording import RecorderMixin
from spectally.engine_bridge.vllm.recorder.state import RecorderFailure


class _Renamed(FakeScheduler):
    """A release that renamed update_draft_token_ids (as 0.34 renamed validate_tokens)."""

    update_draft_token_ids = None  # type: ignore[assignment]


class _RecordingRenamed(RecorderMixin, _Renamed):
    pass


def test_a_hook_that_cannot_attach_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(state.ENV_PATH, str(tmp_path / "log.ndjson"))
    with pytest.raises(RecorderFailure, match="missing update_draft_token_ids"):
        _RecordingRenamed(3)
    assert not (tmp_path / "log.ndjson").exists()  # no header-only log


def test_a_hook_that_breaks_while_logging_fails_loudly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "log.ndjson"
    monkeypatch.setenv(state.ENV_PATH, str(log))
    monkeypatch.setenv(state.ENV_TOTALS, "0")
    monkeypatch.delenv(state.ENV_BACKPORT, raising=False)
    engine = FakeEngine(RecordingFake(3), random.Random(0))
    engine.add("r0", 8)
    engine.step()

    def broken(*args: Any) -> Any:
        raise KeyError("req_id_to_index")  # what 0.34's ModelRunnerOutput did to 0.33's hook

    monkeypatch.setattr(RecordingFake, "_rec_outputs", broken)
    with pytest.raises(RecorderFailure, match="incomplete"):
        engine.step()


def test_with_only_the_backport_an_error_never_stops_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(state.ENV_PATH, raising=False)
    sched = RecordingFake(3)
    sched._sx.active = True  # as with a live backport sink and no log
    assert not sched._sx.writes_log
    assert sched._sx.guard("test", lambda: 1 / 0) is None
    assert not sched._sx.active
