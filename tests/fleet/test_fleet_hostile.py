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
from processes import not_ended
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


def _bytes_read(pid: int) -> int:
    """The bytes ``pid`` has read so far (``rchar``: every read, from files and pipes alike);
    0 once it is gone. A worker process starts at 0: the counter is not inherited."""
    try:
        text = Path(f"/proc/{pid}/io").read_text()
    except OSError:
        return 0
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("rchar:"))


def _ctrl_c_as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # (see tests/fleet/test_fleet.py)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_ctrl_c_ends_workers_busy_in_long_logs(tmp_path: Path) -> None:
    """Two logs each a worker replays for tens of seconds (the reference machine, every
    invariant after every event): SIGINT once both workers run. The command exits 130 and, by
    the time it has, no worker is running, and neither ever read its log to the end: they were
    ended mid-log, not left to finish (which would also leave none running by the exit)."""
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
    read: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 120  # how long the workers may take to start
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = {w for server in _children(proc.pid) for w in _children(server)}
            time.sleep(0.2)
        assert len(workers) >= 2, f"workers never started: {workers}"
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            for pid in workers:  # what each has read so far (it reads its log as it goes)
                read[pid] = max(read.get(pid, 0), _bytes_read(pid))
            time.sleep(0.05)
        out, err = proc.communicate(timeout=5)
    finally:
        if proc.poll() is None:
            for pid in (*workers, proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.communicate()
    left = not_ended(workers)
    for pid in left:  # a failed run leaves nothing running behind it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert not left, f"workers still replaying after the command ended: {left}"
    size = min(Path(log).stat().st_size for log in logs)
    assert all(n < size for n in read.values()), f"a worker read its whole log: {read}"
    assert "agree" not in out.lower(), out  # no report that looks complete


def test_jobs_from_a_folder_holding_spectally(tmp_path: Path) -> None:
    """The workers import the installed package, never the working directory's folder."""
    (tmp_path / "spectally").mkdir()
    (tmp_path / "spectally" / "README").write_text("a user's own folder\n")
    shutil.copy(LOG, tmp_path / "a.ndjson")
    shutil.copy(
        EXAMPLE / "vllm-0.32-cpu-sync-draft-model-so-json.ndjson.gz", tmp_path / "b.ndjson.gz"
    )
    script = shutil.which("spectally", path=os.path.dirname(sys.executable))
    command = [script] if script else [sys.executable, "-m", "spectally"]
    proc = subprocess.run(
        [*command, "replay", "--jobs", "2", "a.ndjson", "b.ndjson.gz"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    assert "2 of 2 logs agree" in proc.stdout, proc.stdout
