"""Worker-side hook: the number of draft tokens the target verified (adaptive verification).

Only the V2 GPU model runner knows how many scheduled drafts adaptive verification (AV) sent to
the target: ``AdaptiveVerificationManager.reallocate_drafts`` rewrites ``cu_num_logits`` on the
device inside ``GPUModelRunner.prepare_inputs`` (``v1/worker/gpu/model_runner.py``, 0.32.0
around line 1436; 0.34.0 lines 1458-1663, ``reallocate_drafts`` at 1541-1548, now driven by a
Triton budget kernel); per request, ``num_logits - num_new_sampled_tokens_per_step`` draft slots get
a target logit row. The scheduler never sees it (it is not in ``ModelRunnerOutput``).

Use as ``worker_extension_cls``::

    LLM(...,
        worker_extension_cls="spectally.engine_bridge.vllm.recorder.gpu_worker.VerifiedCountHook")

Importing this module (the worker resolves ``worker_extension_cls`` while it is built) wraps
``GPUModelRunner.prepare_inputs`` once: after it returns, the request order and a device copy of
``cu_num_logits`` are stored in ``recorder.WORKER_VERIFIED`` under ``id(scheduler_output)``; the
recording scheduler pops that entry in ``update_from_output`` of the same step (by then the step
finished, so reading the copy does not stall the pipeline) and fills ``verified``.

Limits (by construction, checked at run time):
* the worker must run in the engine-core process, i.e. ``UniProcExecutor``
  (tensor/pipeline parallel size 1), so that scheduler and worker share ``WORKER_VERIFIED``
  and the very ``SchedulerOutput`` object; with a multiprocess executor ``verified`` stays null;
* only the V2 model runner is patched (AV exists only there); with the V1 runner nothing changes
  and ``verified`` stays null (no AV: every scheduled slot is verified);
* when AV is off the hook records nothing (``verified`` null means "the target saw every
  scheduled draft", which is exact without AV).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

logger = logging.getLogger("vllm.spectally.gpu_worker")

_PATCHED = False


class _LazyVerified:
    """Per-request verified counts read from a device copy of ``cu_num_logits`` on demand."""

    def __init__(self, req_ids: list[str], cu_num_logits: Any, num_bonus: int) -> None:
        self.req_ids = list(req_ids)
        self.cu = cu_num_logits
        self.num_bonus = num_bonus

    def __call__(self) -> dict[str, int]:
        cu = self.cu.tolist()
        out: dict[str, int] = {}
        for i, req_id in enumerate(self.req_ids):
            if i + 1 < len(cu):
                out[req_id] = max(int(cu[i + 1]) - int(cu[i]) - self.num_bonus, 0)
        return out


def _install() -> bool:
    global _PATCHED
    if _PATCHED:
        return True
    try:
        from vllm.v1.worker.gpu import model_runner as v2
    except Exception:  # no V2 runner in this build (e.g. CPU): nothing to observe
        return False
    from spectally.engine_bridge.vllm.recorder import recorder

    original = v2.GPUModelRunner.prepare_inputs

    @functools.wraps(original)
    def prepare_inputs(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        input_batch = original(self, scheduler_output, *args, **kwargs)
        try:
            if getattr(self, "adaptive_verification", None) is not None and (
                scheduler_output.scheduled_spec_decode_tokens
            ):
                num_bonus = int(getattr(self.model_state, "num_new_sampled_tokens_per_step", 1))
                cu = input_batch.cu_num_logits[: input_batch.num_reqs + 1].clone()
                recorder.WORKER_VERIFIED[id(scheduler_output)] = _LazyVerified(
                    input_batch.req_ids[: input_batch.num_reqs], cu, num_bonus
                )
        except Exception:  # observation only: never break the forward pass
            logger.exception("spectally verified-count hook failed")
        return input_batch

    v2.GPUModelRunner.prepare_inputs = prepare_inputs
    _PATCHED = True
    return True


INSTALLED = _install()


class VerifiedCountHook:
    """``worker_extension_cls`` carrier: importing this module installs the hook."""

    def spectally_verified_hook_installed(self) -> bool:
        return INSTALLED
