#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh needs on a GPU machine that has no Rust and no network
# (issue 10), here, without a GPU: `capstan` and `capstan-bench` built with --features cuda
# (the CUDA 13 toolchain of scripts/setup-cuda.sh), stripped; the kernels' GPU test binary; an
# f16 copy of the encoder (with its sentence-transformers files, for the peer); 5,000 real
# passages; the SmolLM2 Q4_1 GGUF file. No CUDA library travels: the GPU machine's PyTorch
# wheels have cuBLAS, cuRAND, NVRTC and the runtime (gpu-check.sh puts them on the loader's path).
#
#   scripts/gpu-bundle.sh [--out gpu-bundle] [--no-gguf] [--no-capstan] [--no-encoder]
#
# --no-capstan and --no-encoder leave out what gpu-check.sh's goals do not use (the `capstan`
# binary; the f16 encoder and passages of issue 10's encoder rows): three parts instead of five,
# two fewer calls of a 15-minute lease.
#
# The bundle is one .tar.gz cut into parts of at most 48 MiB (the device tool carries 64 MiB a
# call, this repo's ~12 MB included), in OUT/parts with their SHA256SUMS. Carry them over
# consecutive calls while the machine stays warm (it goes back after ~30 s idle), each call
# copying its part into .gpu-received/ (ignored, kept between calls); the call carrying the last
# part runs the check:
#   call i:    carry [OUT/parts/part-0i, OUT/parts/SHA256SUMS]
#              command: mkdir -p .gpu-received && cp OUT/parts/* .gpu-received/
#   last call: the same, then && scripts/gpu-check.sh --parts .gpu-received --out "$OUT"
# The script prints the exact calls at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

OUT=gpu-bundle GGUF=1 CAPSTAN=1 ENCODER=1 PART_MB=48
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --no-gguf) GGUF=0; shift ;;
    --no-capstan) CAPSTAN=0; shift ;;
    --no-encoder) ENCODER=0; shift ;;
    *) echo "gpu-bundle: unknown argument $1" >&2; exit 2 ;;
  esac
done

# shellcheck disable=SC1090
source <(scripts/setup-cuda.sh --env)
export CARGO_TARGET_DIR="$CAPSTAN_HOME/target-cuda"
echo "gpu-bundle: building with --features cuda in $CARGO_TARGET_DIR (a clean build takes ~30 min on 2 cores)" >&2
cargo build --release -p capstan -p capstan-bench --features capstan/cuda,capstan-bench/cuda
ktest=$(cargo test --release -p capstan-kernels --features cuda --test gpu --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("executable") and m.get("target", {}).get("name") == "gpu": print(m["executable"])')
[ -x "$ktest" ] || { echo "gpu-bundle: the kernels GPU test binary was not built" >&2; exit 1; }

stage="$OUT/stage/capstan-gpu"
rm -rf "$OUT/stage" "$OUT/parts"
mkdir -p "$stage/bin" "$OUT/parts"
strip -o "$stage/bin/capstan-bench" "$CARGO_TARGET_DIR/release/capstan-bench"
strip -o "$stage/bin/kernels-gpu-test" "$ktest"
[ "$CAPSTAN" = 1 ] && strip -o "$stage/bin/capstan" "$CARGO_TARGET_DIR/release/capstan"

if [ "$ENCODER" = 1 ]; then
  # The encoder in f16: every file as it is, the weights halved.
  [ -f "$CAPSTAN_ENCODER/model.safetensors" ] || { echo "gpu-bundle: no encoder at $CAPSTAN_ENCODER (scripts/setup.sh)" >&2; exit 1; }
  cp -r "$CAPSTAN_ENCODER" "$stage/encoder-f16"
  PY=python3
  [ -x "$CAPSTAN_HOME/bench-venv/bin/python3" ] && PY="$CAPSTAN_HOME/bench-venv/bin/python3"
  # A fresh machine has neither: the two packages the conversion needs, installed once into the
  # cache (numpy pinned as bench/requirements.txt pins it).
  if ! "$PY" -c "import safetensors, numpy" 2>/dev/null; then
    deps="$CAPSTAN_HOME/bundle-py"
    [ -d "$deps/safetensors" ] || python3 -m pip install --quiet --disable-pip-version-check \
      --target "$deps" safetensors==0.7.0 "$(grep '^numpy==' bench/requirements.txt)"
    export PYTHONPATH="$deps${PYTHONPATH:+:$PYTHONPATH}"
    PY=python3
  fi
  "$PY" - "$CAPSTAN_ENCODER/model.safetensors" "$stage/encoder-f16/model.safetensors" <<'PYEOF'
import sys
from safetensors.numpy import load_file, save_file
import numpy as np
t = load_file(sys.argv[1])
# transformers (the sentence-transformers peer) refuses a file without the "format" metadata.
save_file({k: (v.astype(np.float16) if v.dtype == np.float32 else v) for k, v in t.items()}, sys.argv[2],
          metadata={"format": "pt"})
PYEOF

  # Real passages for the encoder's rows.
  [ -f "$CAPSTAN_HOME/bench/real/rustdoc/corpus.jsonl" ] || python3 bench/real_sets.py --out "$CAPSTAN_HOME/bench/real" --sets rustdoc
  python3 scripts/gpu-passages.py --n 5000 >"$stage/passages.jsonl"
fi
if [ "$GGUF" = 1 ]; then
  [ -f "$CAPSTAN_LLM" ] || { echo "gpu-bundle: no GGUF at $CAPSTAN_LLM (scripts/setup.sh), or pass --no-gguf" >&2; exit 1; }
  cp "$CAPSTAN_LLM" "$stage/"
fi
git rev-parse HEAD >"$stage/COMMIT"
(cd "$stage" && find . -type f -printf '%s %p\n' | sort -k2) >"$stage/MANIFEST"

tar -C "$OUT/stage" -cf - capstan-gpu | gzip -6 | split -b "${PART_MB}M" -d -a 2 - "$OUT/parts/part-"
(cd "$OUT/parts" && sha256sum part-* >SHA256SUMS)
rm -rf "$OUT/stage"

echo "gpu-bundle: contents (bytes):" >&2
sed 's/^/  /' <(tar -xzOf <(cat "$OUT"/parts/part-*) capstan-gpu/MANIFEST) >&2
total=$(cat "$OUT"/parts/part-* | wc -c)
echo "gpu-bundle: $(ls "$OUT"/parts/part-* | wc -l) parts, $((total / 1048576)) MiB compressed in $OUT/parts:" >&2
ls -l "$OUT"/parts >&2
n=$(ls "$OUT"/parts/part-* | wc -l)
i=0
echo "gpu-bundle: device tool calls, one after the other while the machine is warm:" >&2
for p in "$OUT"/parts/part-*; do
  i=$((i + 1))
  cmd="mkdir -p .gpu-received && cp $OUT/parts/* .gpu-received/"
  [ $i = "$n" ] && cmd="$cmd && scripts/gpu-check.sh --parts .gpu-received --out \$OUT"
  echo "  $i. carry [\"$p\", \"$OUT/parts/SHA256SUMS\"]  command: $cmd" >&2
done
