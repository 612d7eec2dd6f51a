"""The Ray tier: a real local Ray cluster on loopback replays the fixtures (`--ray ADDRESS`) and
must print and exit exactly like the local `--jobs` run.

    .venv/bin/pip install -e '.[dev,ray]' && .venv/bin/python -m pytest -m ray

The module starts ``ray start --head --block --num-cpus 2`` bound to 127.0.0.1 in its own
session (`fleet.ray.local_head`) and ends that whole session at the end, pass or fail; the
drivers the tests start get the same loopback environment (`fleet.ray.LOOPBACK_ENV`).
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_dp import build as build_dp
from spectally.engine_bridge.fleet.ray import LOOPBACK_ENV, local_head

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]
VLLM = ROOT / "tests" / "fixtures" / "vllm"
TRACES = ROOT / "tests" / "traces"
RAY = Path(sys.executable).parent / "ray"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The address of a fresh 2-CPU Ray head on 127.0.0.1, ended at the end of the module."""
    if not RAY.exists():
        pytest.fail(f"{RAY} is missing: install the extra, pip install -e '.[dev,ray]'")
    with local_head(num_cpus=2) as address:
        yield address


def spectally(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spectally", "replay", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **LOOPBACK_ENV},
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Every recorded fixture, every golden trace (agreeing and diverging) and a bad input."""
    bad = tmp_path_factory.mktemp("bad") / "bad.ndjson"
    with gzip.open(VLLM / "ngram-k3-greedy.ndjson.gz", "rt") as f:
        bad.write_text(f.readline() + '{"record": "request_step", "step": \n')
    files = sorted(VLLM.glob("*.ndjson.gz")) + sorted(TRACES.glob("*/*.ndjson"))
    return [*map(str, files), str(bad)]


def test_the_servers_listen_on_loopback_only(cluster: str) -> None:
    """The head's listening sockets (this session's) are all on 127.0.0.1."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=False).stdout
    ray_lines = [line for line in out.splitlines() if "gcs_server" in line or "raylet" in line]
    assert ray_lines, out
    for line in ray_lines:
        local = line.split()[3]
        assert "127.0.0.1" in local, line


def test_ray_replays_every_fixture_like_the_local_run(cluster: str, logs: list[str]) -> None:
    local = spectally(*logs, "--jobs", "2")
    remote = spectally(*logs, f"--ray={cluster}")
    assert local.returncode == 2  # the bad input outranks the diverging traces
    assert remote.returncode == local.returncode, remote.stderr[-3000:]
    assert remote.stdout == local.stdout
    assert remote.stderr == local.stderr
    assert f"of {len(logs)} logs agree with the reference" in remote.stdout


def test_ray_json_equals_local_json(cluster: str, logs: list[str]) -> None:
    local = spectally(*logs, "--jobs", "2", "--json")
    remote = spectally(*logs, f"--ray={cluster}", "--json")
    assert remote.returncode == local.returncode == 2, remote.stderr[-3000:]
    assert json.loads(remote.stdout) == json.loads(local.stdout)


def test_ray_data_parallel_fleet_against_the_scrape(cluster: str, tmp_path: Path) -> None:
    e0, e1, scrape = build_dp(tmp_path)
    remote = spectally(str(e0), str(e1), "--metrics", str(scrape), f"--ray={cluster}")
    assert remote.returncode == 0, remote.stdout + remote.stderr
    assert "fleet metrics: AGREE" in remote.stdout
    assert remote.stdout == spectally(str(e0), str(e1), "--metrics", str(scrape)).stdout


def test_stdin_is_replayed_by_the_driver(cluster: str) -> None:
    text = (TRACES / "agree" / "sync_basic.ndjson").read_text()
    files = [str(VLLM / "ngram-k3-greedy.ndjson.gz"), "-"]
    remote = subprocess.run(
        [sys.executable, "-m", "spectally", "replay", *files, f"--ray={cluster}"],
        input=text,
        capture_output=True,
        text=True,
        env={**os.environ, **LOOPBACK_ENV},
        timeout=600,
        check=False,
    )
    assert remote.returncode == 0, remote.stderr[-3000:]
    assert "2 of 2 logs agree" in remote.stdout


def test_a_driver_that_cannot_reach_the_head_gives_up_with_a_hint(cluster: str) -> None:
    """Without the loopback variable the driver looks for the head on the machine's routable
    address, where nothing listens; Ray would retry for minutes. The deadline turns that into
    exit 2 with the fix in the message."""
    env = {k: v for k, v in os.environ.items() if k not in LOOPBACK_ENV}
    env["SPECTALLY_RAY_CONNECT_TIMEOUT"] = "20"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spectally",
            "replay",
            str(TRACES / "agree" / "sync_basic.ndjson"),
            str(VLLM / "ngram-k3-greedy.ndjson.gz"),
            f"--ray={cluster}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    if done.returncode == 0 and "2 of 2 logs agree" in done.stdout:
        pytest.skip("this machine has no routable address besides loopback: nothing to miss")
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0" in done.stderr


def test_a_refused_address_fails_at_once(cluster: str) -> None:
    """Ray installed: a port nothing listens on is refused by the probe before ray.init, which
    would retry it for the whole connect timeout (raised here far past the process limit)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    env = {**os.environ, **LOOPBACK_ENV, "SPECTALLY_RAY_CONNECT_TIMEOUT": "600"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spectally",
            "replay",
            str(VLLM / "ngram-k3-greedy.ndjson.gz"),
            f"--ray=127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "connection refused" in done.stderr
