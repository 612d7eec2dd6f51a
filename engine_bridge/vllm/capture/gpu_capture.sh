#!/usr/bin/env bash
# Record step logs from CUDA vLLM (default 0.34.0, the release users install; 0.32.0 and 0.33.0
# also work): async scheduling, structured outputs (xgrammar) and adaptive verification, with the
# worker hook that reports the verified count (gpu_worker.py). For a user's own GPU machine; not
# runnable on CPU-only machines. Each release's logs replay under its own counting profile
# (vllm-legacy for 0.32/0.33, vllm-0.34; engine_bridge/steplog/release_pin.json pins their counting
# source), and GPUModelRunner.prepare_inputs / InputBatch.cu_num_logits, which the hook wraps,
# exist in all three (0.34: AV's reallocate_drafts still runs inside prepare_inputs).
#
#   engine_bridge/vllm/capture/gpu_capture.sh [OUT_DIR] [--quick]
#
# Needs: an NVIDIA GPU with >= 8 GiB free, a CUDA 12.x driver, Python 3.11-3.13, network access
# to PyPI (or VLLM_WHEELHOUSE), ~10 GB of disk for the venv (vllm 0.34.0 pulls torch 2.14.0).
# Environment:
#   SPECTALLY_VLLM_GPU_VERSION  vLLM version to install (default 0.34.0)
#   SPECTALLY_VLLM_GPU_VENV  venv with CUDA vllm (created if missing;
#                            default $HOME/.cache/spectally/vllm-cuda-<version>)
#   VLLM_WHEELHOUSE          install offline from this wheel folder (pip --no-index)
#   SPECTALLY_TINY_MODELS    model cache (built on the machine in seconds; no hub needed)
# Send back: the whole OUT_DIR (one <config>.ndjson.gz per run + MANIFEST.json, a few hundred KB)
# and the console output; `spectally replay OUT_DIR/*.ndjson.gz` should agree on every log.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="${1:-$REPO/out/vllm-gpu}"
shift || true
VERSION="${SPECTALLY_VLLM_GPU_VERSION:-0.34.0}"
VENV="${SPECTALLY_VLLM_GPU_VENV:-$HOME/.cache/spectally/vllm-cuda-$VERSION}"
PY="$VENV/bin/python"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

if ! "$PY" -c "import vllm, torch; assert vllm.__version__ == '$VERSION'; assert torch.cuda.is_available()" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --upgrade pip >/dev/null
    if [[ -n "${VLLM_WHEELHOUSE:-}" ]]; then
        "$VENV/bin/pip" install --no-index --find-links "$VLLM_WHEELHOUSE" "vllm==$VERSION"
    else
        "$VENV/bin/pip" install "vllm==$VERSION"
    fi
fi
# spectally.* importable in that interpreter (editable install, or a .pth finder).
python3 "$REPO/engine_bridge/vllm/capture/env.py" --install-repo "$PY"
"$PY" - <<'PY'
import torch, vllm
print("vllm", vllm.__version__, "torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0))
import spectally.engine_bridge.vllm.recorder.recorder  # noqa: F401  (imports vLLM)
PY

mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
# A private empty folder, and safe-path semantics (Python >= 3.11; inherited by the engine's
# children): no stray module in the checkout or /tmp is importable.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
export PYTHONSAFEPATH=1
# One engine per configuration (fresh process: Prometheus counters are process-global).
# Every run: V2 model runner, CUDA graphs, worker_extension_cls=gpu_worker.VerifiedCountHook.
"$PY" -m spectally.engine_bridge.vllm.capture matrix --gpu --out "$OUT" --timeout 420 "$@"
ls -la "$OUT"
