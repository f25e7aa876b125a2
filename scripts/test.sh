#!/usr/bin/env bash
# Runs every test: sets up what the tests need (the default encoder, a
# release build), checks formatting and lints, runs the whole Rust suite,
# then real clients (openai Python package, headless Chromium) against the server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Real PDF, DOCX and EPUB files (Debian packages) for the document tests.
scripts/fetch-documents.sh
source scripts/env.sh
cargo fmt --all -- --check
# No circles among the modules of any crate (issue 42).
python3 scripts/module-cycles.py
cargo clippy --release --workspace --all-targets -- -D warnings
cargo test --release --workspace
# The CUDA kernel sources compile with NVRTC for sm_90 (no GPU needed).
kernels/scripts/nvrtc-check.sh
# The GPU proof's scripts (issue 10): they parse, and the report of a recorded run holds every field.
bash -n scripts/gpu-check.sh scripts/gpu-bundle.sh scripts/gpu-profile.sh scripts/gpu-tests.sh
python3 bench/test_gpu_report.py
python3 bench/test_ncu_summary.py

# Real clients against `capstan serve`: the official openai Python client and
# the web page in headless Chromium (Debian's chromium, driven by
# playwright-core). Installs only what is missing.
OPENAI_VERSION=3.52.0
if [ ! -x /usr/bin/chromium ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium
fi
if ! python3 -c "import openai, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION')" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check "openai==$OPENAI_VERSION"
fi
(cd tests/ui && npm ci --no-audit --no-fund --loglevel=error)
tests/run_openai_client.sh
tests/run_ui.sh
