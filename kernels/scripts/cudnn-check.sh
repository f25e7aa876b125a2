#!/usr/bin/env bash
# cuDNN's fused attention checked without a GPU: every graph Capstan builds (kernels/src/
# sdpa_graph.rs) is finalized on a real cuDNN, and compiled for an H100 described by its
# properties (device-less planning, cuDNN >= 9.8), up to loading the kernel into the driver,
# which here is scripts/setup-cuda.sh's stub. Needs the `cuda` feature's toolchain
# (scripts/setup-cuda.sh; a first build of candle's kernels takes ~30 min on 2 cores) and a
# cuDNN 9 library: $CAPSTAN_CUDNN_LIB, else the nvidia-cudnn wheel of this Python (PyTorch's).
#
#   kernels/scripts/cudnn-check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
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
