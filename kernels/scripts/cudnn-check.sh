#!/usr/bin/env bash
# cuDNN's fused attention checked without a GPU: every graph Capstan builds (kernels/src/
# sdpa_graph.rs) is finalized on a real cuDNN, and compiled for an H100 described by its
# properties (device-less planning, cuDNN >= 9.8), up to loading the kernel into the driver,
# which here is scripts/setup-cuda.sh's stub. Needs the `cuda` feature's toolchain
# (scripts/setup-cuda.sh; a first build of candle's kernels takes ~30 min on 2 cores) and a
# cuDNN 9 library: $CAPSTAN_CUDNN_LIB, else the nvidia-cudnn wheel of this Python (PyTorch's).
#
#   kernels/scripts/cudnn-check.sh                     # this Python's cuDNN (or $CAPSTAN_CUDNN_LIB)
#   kernels/scripts/cudnn-check.sh --version 9.19.0.56 # the GPU machines' cuDNN, fetched from PyPI
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
if [ "${1:-}" = "--version" ]; then
  # The nvidia-cudnn-cu13 wheel of that version, unpacked once under $CAPSTAN_HOME (~360 MB).
  dir="$CAPSTAN_HOME/cudnn-$2"
  if [ ! -f "$dir/x/nvidia/cudnn/lib/libcudnn.so.9" ]; then
    mkdir -p "$dir"
    python3 -m pip download --quiet --no-deps "nvidia-cudnn-cu13==$2" -d "$dir"
    python3 -m zipfile -e "$dir"/nvidia_cudnn_cu13-"$2"-*.whl "$dir/x"
  fi
  export CAPSTAN_CUDNN_LIB="$dir/x/nvidia/cudnn/lib/libcudnn.so.9"
  export CAPSTAN_CUDNN_INCLUDE="$dir/x/nvidia/cudnn/include"
fi
# shellcheck disable=SC1090
source <(scripts/setup-cuda.sh --env)
export CARGO_TARGET_DIR="$CAPSTAN_HOME/target-cuda"
if [ -z "${CAPSTAN_CUDNN_LIB:-}" ]; then
  dir=$(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cudnn", "lib"))' 2>/dev/null) ||
    { echo "cudnn-check: no cuDNN: set CAPSTAN_CUDNN_LIB or pip install nvidia-cudnn-cu13" >&2; exit 1; }
  export CAPSTAN_CUDNN_LIB="$dir/libcudnn.so.9"
fi
python3 kernels/scripts/cudnn_constants_check.py
CAPSTAN_REQUIRE_CUDNN=1 exec cargo test --release -p capstan-kernels --features cuda --lib \
  cudnn -- --nocapture
