"""The fleet as users meet it: Ctrl-C while workers are deep in long logs, and `--jobs` run
from a folder that holds a folder named ``spectally`` (the parent of a clone of this
repository, for one)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from spectally.engine_bridge import synth
from spectally.exit_codes import ExitCode

EXAMPLE = Path(__file__).parents[2] / "engine_bridge" / "examples"
LOG = EXAMPLE / "step-log-async-eagle-xgrammar.ndjson"


def _children(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry.name))
    return out


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _ctrl_c_as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # (see tests/fleet/test_fleet.py)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_ctrl_c_ends_workers_busy_in_long_logs(tmp_path: Path) -> None:
    """Two logs each a worker replays for minutes (the reference machine, every invariant
    after every event): SIGINT once both workers run. The command exits 130 and, by the time
    it has, no worker is running: they are ended, not left to finish their logs."""
    logs = []
    for seed in (1, 2):
        path = tmp_path / f"long-{seed}.ndjson"
        with path.open("wb") as f:
            f.writelines(synth.varied.lines(40_000, seed=seed))
        logs.append(str(path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "spectally", "replay", "--jobs", "2", "--check-invariants", *logs],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_from_a_terminal,
    )
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 120  # how long the workers may take to start
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = {w for server in _children(proc.pid) for w in _children(server)}
            time.sleep(0.2)
        assert len(workers) >= 2, f"workers never started: {workers}"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            for pid in (*workers, proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.communicate()
    left = [w for w in workers if _running(w)]
    for pid in left:  # a failed run leaves nothing running behind it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert not left, f"workers still replaying after the command ended: {left}"
    assert "agree" not in out.lower(), out  # no report that looks complete


def test_jobs_from_a_folder_holding_spectally(tmp_path: Path) -> None:
    """The workers import the installed package, never the working directory's folder."""
    (tmp_path / "spectally").mkdir()
    (tmp_path / "spectally" / "README").write_text("a user's own folder\n")
    for name in ("a.ndjson", "b.ndjson"):
        shutil.copy(LOG, tmp_path / name)
    script = shutil.which("spectally", path=os.path.dirname(sys.executable))
    command = [script] if script else [sys.executable, "-m", "spectally"]
    proc = subprocess.run(
        [*command, "replay", "--jobs", "2", "a.ndjson", "b.ndjson"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    assert "2 of 2 logs agree" in proc.stdout, proc.stdout
