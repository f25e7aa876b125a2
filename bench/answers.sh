#!/usr/bin/env bash
# The figures of docs/BENCHMARKS.md "Answers", in one run: Capstan's readers and the peer on
# the same test questions, per set.
#
# Sets (each split by document into dev and test; bench/real_qa.py and
# bench/real_answer_sets.py say how each is made):
#   manpages      the manual pages of this machine (real_qa.py): names, options, files, defaults
#   records       records of fields as "Key: value" lines: Rust crates' manifests, Python
#                 packages' metadata, Debian's AppStream components (real_answer_sets.py)
#   prose         prose documentation: the Rust books, the Python standard library's pydoc
#                 text, READMEs under /usr/share/doc (real_answer_sets.py)
#   glossary      FOLDOC, the Free On-line Dictionary of Computing: who made a language, machine
#                 or company, where, and in what year (glossary_set.py)
#   people        biographies: WordNet's glosses of 3,815 real people (what they did, in what
#                 capacity they served, nationality, birthplace, years of birth and death;
#                 people_set.py)
#   packages      records of fields: 3,000 of Debian's binary package records (the release's
#                 Packages index with Translation-en's long descriptions) as "Key: value" lines:
#                 who looks after a package, its web site, archive section, version, and which
#                 package a reworded synopsis names (packages_set.py)
#   history       narrative real text: Debian's project history and release dedications, 52
#                 hand-written questions (history_set.py); a dev set only (the test step passes it over)
#   handbook      narrative real text as a user's folder of HTML: the English pages of "The
#                 Debian Administrator's Handbook", hand-written questions (handbook_set.py):
#                 52 test questions never fitted on, 40 dev questions on other pages (Capstan
#                 indexes the pages themselves)
#   encyclopedia  the demo's generated encyclopedia (1,000 documents, seed 42): a test set
#                 only (its first 500 questions); nothing is fitted on it
#
# Steps (STEPS, default "dev test"; "fit" between them refits the ranker):
#   dev   each real set's dev split through `eval qa --reader llama` with
#         CAPSTAN_DUMP_CANDIDATES, the data bench/fit_answer_ranker.py fits the ranker on;
#   fit   refits engine/data/answer_ranker.json on those dumps and rebuilds capstan;
#   test  each set's test split: the Llama reader's ranked span (the default), the extractive
#         reader's ranked span, the Llama reader copying by constrained greedy decoding (the
#         earlier default), the extractive sentence; then the peer (bench/qa_peer.py: bm25s
#         top-5 documents -> the same GGUF in transformers, its chat template, greedy) and
#         Capstan's default on the same first PEER_N test questions.
# Each eval writes OUT/<name>/results.{json,md}; OUT/summary.txt has one line per run.
# Usage: bench/answers.sh OUT_DIR   (SETS="manpages records packages prose glossary people history handbook encyclopedia",
#        PEER_N=40,
#        SKIP_PEER=1, DATA=~/.cache/capstan/bench/answer-sets)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out="${1:?usage: bench/answers.sh OUT_DIR}"
PEER_N="${PEER_N:-40}"
SETS="${SETS:-manpages records packages prose glossary people history handbook encyclopedia}"
STEPS="${STEPS:-dev test}"
DATA="${DATA:-$CAPSTAN_HOME/bench/answer-sets}"
mkdir -p "$out" "$DATA"
summary="$out/summary.txt"

# prepare SET: its corpus, questions and index under $DATA/SET.
prepare() {
  local set=$1 dir="$DATA/$1"
  case $set in
    manpages) [ -f "$dir/test.jsonl" ] || python3 bench/real_qa.py --out "$dir" ;;
    records | prose)
      [ -f "$dir/test.jsonl" ] || python3 bench/real_answer_sets.py --out "$DATA" --sets "$set" ;;
    glossary) [ -f "$dir/test.jsonl" ] || python3 bench/glossary_set.py --out "$DATA" ;;
    people) [ -f "$dir/test.jsonl" ] || python3 bench/people_set.py --out "$DATA" ;;
    packages) [ -f "$dir/test.jsonl" ] || python3 bench/packages_set.py --out "$DATA" ;;
    history) [ -f "$dir/dev.jsonl" ] || python3 bench/history_set.py --out "$DATA" ;;
    handbook) [ -f "$dir/dev.jsonl" ] || python3 bench/handbook_set.py --out "$DATA" ;;
    encyclopedia)
      if [ ! -f "$dir/test.jsonl" ]; then
        "$CAPSTAN_BIN" corpus generate --out "$dir/gen" --seed 42 --documents 1000 --questions 600
        cp "$dir/gen/corpus.jsonl" "$dir/corpus.jsonl"
        head -n 500 "$dir/gen/questions.jsonl" > "$dir/test.jsonl"
      fi ;;
  esac
  local source="$dir/corpus.jsonl"
  [ -d "$dir/pages" ] && source="$dir/pages" # a folder of the user's files, read by Capstan
  [ -f "$dir/index/CURRENT" ] ||
    "$CAPSTAN_BIN" index "$source" --out "$dir/index" --no-sentence-vectors
}

# run NAME SET QUESTIONS FLAGS...
run() {
  local name=$1 set=$2 questions=$3
  shift 3
  "$CAPSTAN_BIN" eval qa "$DATA/$set/index" --questions "$questions" --out "$out/$name" --quiet "$@"
  python3 - "$out/$name/results.json" "$name" "$*" >> "$summary" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<34} EM {r['em']:.3f} F1 {r['f1']:.3f} contains {r['contains_gold']:.3f} "
      f"no-answer {r['no_answer']} q/min {r['questions_per_minute']:.1f}  [{sys.argv[3]}]")
PY
}

for set in $SETS; do
  prepare "$set"
  if [[ " $STEPS " == *" dev "* && -f "$DATA/$set/dev.jsonl" ]]; then
    mkdir -p "$out/dumps"
    rm -f "$out/dumps/$set-dev.jsonl"
    CAPSTAN_DUMP_CANDIDATES="$out/dumps/$set-dev.jsonl" \
      run "$set-dev-span" "$set" "$DATA/$set/dev.jsonl" --reader llama --restart
  fi
done
if [[ " $STEPS " == *" fit "* ]]; then
  pairs=()
  for set in $SETS; do
    [ ! -f "$DATA/$set/dev.jsonl" ] || pairs+=(--pair "$out/dumps/$set-dev.jsonl" "$DATA/$set/dev.jsonl")
  done
  python3 bench/fit_answer_ranker.py "${pairs[@]}"
  cargo build --release -p capstan
fi
if [[ " $STEPS " == *" test "* ]]; then
  for set in $SETS; do
    dir="$DATA/$set"
    [ -f "$dir/test.jsonl" ] || continue # a dev set only
    run "$set-test-span" "$set" "$dir/test.jsonl" --reader llama
    run "$set-test-extractive-span" "$set" "$dir/test.jsonl" --reader extractive
    run "$set-test-copy" "$set" "$dir/test.jsonl" --reader llama --answer copy
    run "$set-test-sentence" "$set" "$dir/test.jsonl" --reader extractive --answer sentence
    if [ -z "${SKIP_PEER:-}" ]; then
      head -n "$PEER_N" "$dir/test.jsonl" > "$dir/test-$PEER_N.jsonl"
      python3 bench/qa_peer.py --corpus "$dir/corpus.jsonl" --questions "$dir/test-$PEER_N.jsonl" \
        --model "$CAPSTAN_LLM" --out "$out/$set-test-peer.json" | tee -a "$summary"
      run "$set-test-span-first$PEER_N" "$set" "$dir/test-$PEER_N.jsonl" --reader llama
    fi
  done
fi
cat "$summary"
