"""The import layering of pyproject.toml's [tool.importlinter] contracts holds.

import-linter reads the imports statically, so it must see the installed names (`spectally.*`):
it runs with typecheck/ (the symlink tree with the installed layout) first on sys.path, in a
process of its own, where the editable install's import hook cannot point it at cli/ alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "typecheck"


def lint(cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(TREE)}
    code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", "--no-logo"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def modules_in_tree() -> int:
    """The Python files of every package (a folder with __init__.py) under typecheck/spectally."""
    n = 0
    for _, _, files in os.walk(TREE / "spectally", followlinks=True):
        if "__init__.py" in files:
            n += sum(f.endswith(".py") for f in files)
    return n


def external_packages() -> int:
    """The third-party packages spectally imports, which the tool counts among what it analysed
    (pyproject's include_external_packages: the click contract names one)."""
    code = (
        "import grimp\n"
        "g = grimp.build_graph('spectally', include_external_packages=True, cache_dir=None)\n"
        "print(sum(m.split('.')[0] != 'spectally' for m in g.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(TREE)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_every_contract_is_kept_over_the_whole_package() -> None:
    result = lint()
    assert result.returncode == 0, result.stdout + result.stderr
    analyzed = re.search(r"Analyzed (\d+) files", result.stdout)
    assert analyzed, result.stdout
    # The tool saw every module, not cli/ only.
    assert int(analyzed.group(1)) == modules_in_tree() + external_packages()
    assert re.search(r"Contracts: (\d+) kept, 0 broken", result.stdout), result.stdout
