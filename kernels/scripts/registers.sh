#!/usr/bin/env bash
# Registers and spills of every kernel entry point for sm_90, without a GPU: the sources
# compiled by NVRTC as the Rust side compiles them (nvrtc-check.sh --ptx-dir), then ptxas -v
# from the CUDA wheels scripts/setup-cuda.sh installs. A register count sets how many warps a
# multiprocessor holds (65,536 registers), which the decoding kernels' speed depends on.
#   kernels/scripts/registers.sh [REGEX]    # entry points matching REGEX (default: all)
set -euo pipefail
cd "$(dirname "$0")/../.."
export CAPSTAN_HOME="${CAPSTAN_HOME:-$HOME/.cache/capstan}"
ptxas="$CAPSTAN_HOME/cuda/nvidia/cu13/bin/ptxas"
[ -x "$ptxas" ] || { echo "registers: no $ptxas (run scripts/setup-cuda.sh)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
kernels/scripts/nvrtc-check.sh --ptx-dir "$dir" >/dev/null
for ptx in "$dir"/*.ptx; do
  "$ptxas" -arch=sm_90 -v "$ptx" -o /dev/null 2>&1 | python3 -c '
import re, sys
module, pattern = sys.argv[1], re.compile(sys.argv[2])
entry = None
for line in sys.stdin:
    m = re.search(r"Compiling entry function .(\w+). for", line)
    if m:
        entry, spill = m.group(1), ""
        continue
    s = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if s and entry:
        spill = "" if s.group(1) == s.group(2) == "0" else f", spills {s.group(1)}/{s.group(2)} bytes"
    r = re.search(r"Used (\d+) registers", line)
    if r and entry and pattern.search(entry):
        print(f"{module}: {entry}: {r.group(1)} registers{spill}")
        entry = None
' "$(basename "$ptx" .ptx)" "${1:-.}"
done
