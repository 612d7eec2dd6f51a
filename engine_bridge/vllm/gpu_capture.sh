#!/usr/bin/env bash
# Record step logs from CUDA vLLM 0.32.0: async scheduling, structured outputs and adaptive
# verification, with the worker hook that reports the verified count (gpu_worker.py).
# Not runnable on the CPU-only machines; prepared against the vLLM 0.32.0 source.
#
#   engine_bridge/vllm/gpu_capture.sh [OUT_DIR] [--quick]
#
# Environment:
#   SPECTALLY_VLLM_GPU_VENV  venv with CUDA vllm==0.32.0 (created if missing;
#                            default $HOME/.cache/spectally/vllm-cuda-0.32.0)
#   VLLM_WHEELHOUSE          install offline from this wheel folder (pip --no-index)
#   SPECTALLY_TINY_MODELS    model cache (built on the machine in seconds; no hub needed)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-$REPO/out/vllm-gpu}"
shift || true
VENV="${SPECTALLY_VLLM_GPU_VENV:-$HOME/.cache/spectally/vllm-cuda-0.32.0}"
PY="$VENV/bin/python"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

if ! "$PY" -c "import vllm, torch; assert vllm.__version__ == '0.32.0'; assert torch.cuda.is_available()" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --upgrade pip >/dev/null
    if [[ -n "${VLLM_WHEELHOUSE:-}" ]]; then
        "$VENV/bin/pip" install --no-index --find-links "$VLLM_WHEELHOUSE" "vllm==0.32.0"
    else
        "$VENV/bin/pip" install "vllm==0.32.0"
    fi
fi
# spectally.* importable in that interpreter (editable install, or a .pth finder).
python3 "$REPO/engine_bridge/vllm/env.py" --install-repo "$PY"
"$PY" - <<'PY'
import torch, vllm
print("vllm", vllm.__version__, "torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0))
import spectally.engine_bridge.vllm.recorder  # noqa: F401  (imports vLLM)
PY

mkdir -p "$OUT"
cd /tmp  # never import the repository folders as top-level modules
# One engine per configuration (fresh process: Prometheus counters are process-global).
# Every run: V2 model runner, CUDA graphs, worker_extension_cls=gpu_worker.VerifiedCountHook.
"$PY" -m spectally.engine_bridge.vllm.capture --gpu --out "$OUT" --timeout 420 "$@"
ls -la "$OUT"
