"""mypy --strict over every package, in CI (the README's test command runs this file).

The packages live in folders that setuptools' package-dir maps to `spectally.*`; static tools
see that layout through typecheck/spectally/, a committed tree of symlinks (pyproject.toml,
[tool.mypy]). The first test keeps that tree in step with pyproject's mapping, so a new module
is never silently left out of type checking.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "typecheck" / "spectally"


def test_typecheck_tree_mirrors_the_package_dir_mapping() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools["package-dir"]
    root = REPO / mapping["spectally"]
    for module in sorted(root.glob("*.py")):  # the `spectally` package's own modules
        link = TREE / module.name
        assert link.is_symlink() and link.resolve() == module.resolve(), link
    for package, folder in mapping.items():
        if package == "spectally":
            continue
        link = TREE / package.removeprefix("spectally.")
        assert link.is_symlink() and link.resolve() == (REPO / folder).resolve(), link
    for entry in TREE.iterdir():  # nothing stale
        assert entry.exists(), f"dangling link {entry}"


def test_mypy_strict_over_every_package() -> None:
    pytest.importorskip("mypy")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout
