"""ruff, as configured in pyproject.toml ([tool.ruff]), passes over the whole repository: the
lint rules and the formatting."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ruff() -> str:
    """The ruff installed beside this Python (spectally[dev]), else the one on PATH."""
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed (pip install -e '.[dev]')")
    return found


@pytest.mark.parametrize("check", [["check"], ["format", "--check"]], ids=" ".join)
def test_ruff_passes(check: list[str]) -> None:
    proc = subprocess.run(
        [ruff(), *check, "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
