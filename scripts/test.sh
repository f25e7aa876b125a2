#!/usr/bin/env bash
# Runs every test: sets up what the tests need (the default encoder, a
# release build), checks formatting and lints, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo test --release --workspace
