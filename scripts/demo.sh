#!/usr/bin/env bash
# The main job on the embedded default: set up, generate the encyclopedia,
# index it, search it and evaluate retrieval.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
data="$CAPSTAN_HOME/demo"
"$CAPSTAN_BIN" corpus generate --out "$data/encyclopedia" --seed 42
"$CAPSTAN_BIN" index "$data/encyclopedia/corpus.jsonl" --out "$data/index"
question=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["question"])' "$data/encyclopedia/questions.jsonl")
echo; echo "search (hybrid): $question"
"$CAPSTAN_BIN" search "$data/index" "$question" -k 3
echo
"$CAPSTAN_BIN" eval retrieval "$data/index" --dataset "$data/encyclopedia" --out "$data/eval-retrieval"
