#!/usr/bin/env bash
# The reader figures of docs/BENCHMARKS.md ("Generative reader: SmolLM2"), one after another on
# the demo's index (scripts/demo.sh builds it): eval qa (extractive and SmolLM2, k = 5 and 10),
# eval position (SmolLM2, k = 10 and 20), eval passkey (2K-8K, and 16K with and without
# SelfExtend). QA_N / QA10_N / POS_N / POS20_N / PK_SAMPLES bound the generative runs on a
# 2-core machine (SmolLM2 reads a 5-passage prompt in ~5-10 s there).
# Usage: bench/reader_evals.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out="${1:?usage: bench/reader_evals.sh OUT_DIR}"
data="$CAPSTAN_HOME/demo"
index="$data/index"
questions="$data/encyclopedia/questions.jsonl"
QA_N="${QA_N:-100}"
QA10_N="${QA10_N:-50}"
POS_N="${POS_N:-8}"
POS20_N="${POS20_N:-4}"
PK_SAMPLES="${PK_SAMPLES:-1}"
mkdir -p "$out"
head -n "$QA_N" "$questions" > "$out/questions-$QA_N.jsonl"
for n in "$QA10_N" "$POS_N" "$POS20_N"; do head -n "$n" "$questions" > "$out/questions-$n.jsonl"; done
run() { echo "== $*"; /usr/bin/time -f "wall %e s, peak RSS %M KiB" "$@"; }
for k in 5 10; do
  run "$CAPSTAN_BIN" eval qa "$index" --questions "$questions" --reader extractive -k "$k" --out "$out/qa-extractive-k$k" --quiet
done
run "$CAPSTAN_BIN" eval qa "$index" --questions "$out/questions-$QA_N.jsonl" --reader llama -k 5 --out "$out/qa-smollm2-k5" --concurrency 1 --quiet
run "$CAPSTAN_BIN" eval qa "$index" --questions "$out/questions-$QA10_N.jsonl" --reader llama -k 10 --out "$out/qa-smollm2-k10" --concurrency 1 --quiet
run "$CAPSTAN_BIN" eval position "$index" --questions "$out/questions-$POS_N.jsonl" --reader llama -k 10 --positions 0,4,9 --out "$out/position-k10" --concurrency 1 --quiet
run "$CAPSTAN_BIN" eval passkey --lengths 2000,4000,8000 --depths 0,0.5,1 --samples "$PK_SAMPLES" --out "$out/passkey" --concurrency 1 --quiet
run "$CAPSTAN_BIN" eval passkey --lengths 16000 --depths 0.5 --samples "$PK_SAMPLES" --beyond-context --out "$out/passkey-16k" --concurrency 1 --quiet
run "$CAPSTAN_BIN" eval passkey --lengths 16000 --depths 0.5 --samples "$PK_SAMPLES" --beyond-context --attention selfextend:group=4,window=2048 --out "$out/passkey-16k-selfextend" --concurrency 1 --quiet
run "$CAPSTAN_BIN" eval position "$index" --questions "$out/questions-$POS20_N.jsonl" --reader llama -k 20 --positions 0,9,19 --out "$out/position-k20" --concurrency 1 --quiet
for d in "$out"/*/; do echo "== $d"; cat "$d/results.md" 2>/dev/null || true; done
