"""Run vLLM's own tests of the spec-decode counting code on a CPU machine with no network.

    cd PATCHED_VLLM_TREE && PYTHONPATH=.:PYTEST_DIR VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 \\
        VLLM_PYTHON scripts/run_vllm_tests.py [--model DIR] PYTEST_ARGS...

vLLM's `tests/v1/core/utils.create_scheduler` builds a config for facebook/opt-125m, which it
downloads; here it gets the project's tiny local target model instead (``--model``, default
``$SPECTALLY_TINY_MODELS/target``, ``~/.cache/spectally/tiny-models/target``, written by
engine_bridge/vllm/capture/tiny_models.py). vLLM 0.34's CPU platform refuses x86 without triton-cpu
at config validation; the scheduler under test runs no kernel, so Triton is reported present for
that check only. Nothing in vLLM's tree is edited. Used by tests/vllm/test_vllm_patch.py (-m
engine).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    model = str(
        Path(os.environ.get("SPECTALLY_TINY_MODELS", Path.home() / ".cache/spectally/tiny-models"))
        / "target"
    )
    if argv[:1] == ["--model"]:
        model, argv = argv[1], argv[2:]
    import pytest
    import vllm.triton_utils as triton_utils

    triton_utils.HAS_TRITON = True
    import tests.v1.core.utils as utils

    utils.create_scheduler = functools.partial(utils.create_scheduler, model=model)
    return int(pytest.main(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
