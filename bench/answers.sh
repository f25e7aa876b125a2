#!/usr/bin/env bash
# The figures of docs/BENCHMARKS.md "Short, grounded answers" (issue 27), in one run:
#   1. the encyclopedia of the demo (1,000 documents, seed 42) with 600 questions: the first
#      500 are the test split (the demo's questions), the last 100 the dev split;
#   2. the real-text QA set (bench/real_qa.py: man pages, short answers, dev/test by document);
#   3. on each dev split, the prompt choices (context, order, example, end bias, lexical weight);
#   4. on each test split, the chosen defaults with span and free answers, the extractive
#      reader, and the peer (bench/qa_peer.py: bm25s top-5 documents -> the same GGUF in
#      transformers) on the first PEER_N test questions (it reads ~1,500-token prompts in
#      PyTorch at 2 threads, about a minute a question on this machine).
# Each eval writes OUT/<name>/results.{json,md}; OUT/summary.txt has one line per run.
# Usage: bench/answers.sh OUT_DIR    (PEER_N=60 by default; SKIP_PEER=1 skips it)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out="${1:?usage: bench/answers.sh OUT_DIR}"
PEER_N="${PEER_N:-60}"
mkdir -p "$out"
summary="$out/summary.txt"

enc="$out/encyclopedia"
if [ ! -f "$enc/index/CURRENT" ]; then
  "$CAPSTAN_BIN" corpus generate --out "$enc/data" --seed 42 --documents 1000 --questions 600
  "$CAPSTAN_BIN" index "$enc/data/corpus.jsonl" --out "$enc/index"
fi
head -n 500 "$enc/data/questions.jsonl" > "$enc/test.jsonl"
tail -n 100 "$enc/data/questions.jsonl" > "$enc/dev.jsonl"

real="$out/real"
if [ ! -f "$real/index/CURRENT" ]; then
  python3 bench/real_qa.py --out "$real/data"
  "$CAPSTAN_BIN" index "$real/data/corpus.jsonl" --out "$real/index" --no-sentence-vectors
fi

# run NAME INDEX QUESTIONS READER-FLAGS...
run() {
  local name=$1 index=$2 questions=$3
  shift 3
  "$CAPSTAN_BIN" eval qa "$index" --questions "$questions" --out "$out/$name" --quiet "$@"
  python3 - "$out/$name/results.json" "$name" "$*" >> "$summary" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<28} EM {r['em']:.3f} F1 {r['f1']:.3f} contains {r['contains_gold']:.3f} "
      f"no-answer {r['no_answer']} q/min {r['questions_per_minute']:.1f}  [{sys.argv[3]}]")
PY
}

for set in encyclopedia real; do
  if [ "$set" = encyclopedia ]; then index="$enc/index"; dir="$enc"; else index="$real/index"; dir="$real/data"; fi
  dev="$dir/dev.jsonl"
  test="$dir/test.jsonl"
  # Dev: the prompt choices, one change at a time from the default.
  run "$set-dev-default" "$index" "$dev" --reader llama
  run "$set-dev-sentences8" "$index" "$dev" --reader llama --context sentences:8
  run "$set-dev-sentences2" "$index" "$dev" --reader llama --context sentences:2
  run "$set-dev-passages-k2" "$index" "$dev" --reader llama --context passages -k 2
  run "$set-dev-best-first" "$index" "$dev" --reader llama --best-last false
  run "$set-dev-no-example" "$index" "$dev" --reader llama --example false
  run "$set-dev-end-bias0" "$index" "$dev" --reader llama --span-end-bias 0
  run "$set-dev-lexical0.3" "$index" "$dev" --reader llama --sentence-lexical-weight 0.3
  run "$set-dev-free" "$index" "$dev" --reader llama --answer free
  # Test: the defaults.
  run "$set-test-span" "$index" "$test" --reader llama
  run "$set-test-free" "$index" "$test" --reader llama --answer free
  run "$set-test-extractive" "$index" "$test" --reader extractive
  if [ -z "${SKIP_PEER:-}" ]; then
    head -n "$PEER_N" "$test" > "$dir/test-$PEER_N.jsonl"
    corpus="$dir/corpus.jsonl"
    [ "$set" = encyclopedia ] && corpus="$enc/data/corpus.jsonl"
    python3 bench/qa_peer.py --corpus "$corpus" --questions "$dir/test-$PEER_N.jsonl" \
      --model "$CAPSTAN_LLM" --out "$out/$set-test-peer.json" | tee -a "$summary"
    run "$set-test-span-first$PEER_N" "$index" "$dir/test-$PEER_N.jsonl" --reader llama
  fi
done
cat "$summary"
