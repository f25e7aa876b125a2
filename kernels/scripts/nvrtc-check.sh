#!/usr/bin/env bash
# Cheap CI check (no GPU, no CUDA cargo build): every CUDA kernel source of capstan-kernels
# compiles with NVRTC 13.0 for sm_90. Installs only the nvrtc wheel (cached) when
# scripts/setup-cuda.sh has not installed the full toolchain.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CAPSTAN_HOME="${CAPSTAN_HOME:-$HOME/.cache/capstan}"
lib="$CAPSTAN_HOME/cuda/nvidia/cu13/lib/libnvrtc.so.13"
if [ ! -f "$lib" ]; then
  lib="$CAPSTAN_HOME/nvrtc/nvidia/cu13/lib/libnvrtc.so.13"
  if [ ! -f "$lib" ]; then
    python3 -m pip install --quiet --no-deps --target "$CAPSTAN_HOME/nvrtc" nvidia-cuda-nvrtc==13.0.88
  fi
fi
CAPSTAN_NVRTC="$lib" exec python3 kernels/scripts/nvrtc_check.py "$@"
