"""Endless inputs end at the line limit (docs/limits.md) with exit 2 for `import logs` and
`import prometheus`: /dev/zero (NUL bytes, valid UTF-8, no newline), /dev/urandom, and a real
pipe whose writer never ends a line and never stops. Each reader holds one line at most, so
memory stays bounded too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import pytest
from click.testing import CliRunner
from spectally.engine_bridge.cli import import_group
from spectally.engine_bridge.steplog.limits import MAX_LINE_BYTES
from spectally.exit_codes import ExitCode

COMMANDS = ["logs", "prometheus"]
LIMIT = f"line longer than the limit of {MAX_LINE_BYTES} bytes (docs/limits.md)"


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
@pytest.mark.parametrize("command", COMMANDS)
def test_dev_zero(command: str) -> None:
    result = CliRunner().invoke(import_group, [command, "/dev/zero"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert result.stderr.strip() == f"/dev/zero:1:{MAX_LINE_BYTES + 1}: {LIMIT}"


@pytest.mark.skipif(not Path("/dev/urandom").exists(), reason="no /dev/urandom")
@pytest.mark.parametrize("command", COMMANDS)
def test_dev_urandom(command: str) -> None:
    result = CliRunner().invoke(import_group, [command, "/dev/urandom"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in result.output
    # the first line random bytes break: not UTF-8 (a bad byte, an encoded surrogate, a stray
    # byte-order mark), or, most unlikely, the line limit
    assert re.match(
        r"^/dev/urandom:\d+:\d+: (line is not valid UTF-8|stray UTF-8 byte-order"
        r" mark|line longer than the limit)",
        message,
    ), message


def _feed_forever(pipe: IO[bytes]) -> None:
    """Write one never-ending line until the reader closes its end."""
    chunk = b"SpecDecoding metrics: " + b"9" * 65536
    try:
        while True:
            pipe.write(chunk)
    except (BrokenPipeError, ValueError, OSError):
        pass


@pytest.mark.parametrize("command", COMMANDS)
def test_a_pipe_that_never_ends_a_line(command: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "spectally.cli", "import", command, "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdin is not None
    writer = threading.Thread(target=_feed_forever, args=(proc.stdin,), daemon=True)
    writer.start()
    assert proc.stderr is not None
    try:
        err = proc.stderr.read()  # until the reader exits: it stops at MAX_LINE_BYTES + 1 bytes
        proc.wait(timeout=300)  # a hang guard only, never a verdict
    finally:
        if proc.poll() is None:
            proc.kill()
        writer.join(timeout=60)
    assert proc.returncode == ExitCode.BAD_INPUT, err
    assert err.decode().strip().endswith(f"-:1:{MAX_LINE_BYTES + 1}: {LIMIT}")
