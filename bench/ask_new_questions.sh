#!/usr/bin/env bash
# One-shot `capstan ask` of questions never asked before, wall clock: each line FIRST..LAST of a
# questions file ({"question": ...} per line) asked once, end to end (start-up, retrieval,
# reading, exit), so the prompt cache holds none of its passages. Given two binaries, they take
# turns (even lines to the first, odd to the second): compare builds in the same hour, as
# this host's speed swings (docs/benchmarks/answers.md). Prints a line per question and a
# summary per binary.
# Usage: bench/ask_new_questions.sh FIRST LAST BIN [BIN_ODD]
#        (INDEX=~/.cache/capstan/demo/index, QUESTIONS=the demo's encyclopedia/questions.jsonl)
set -euo pipefail
first=${1:?usage: bench/ask_new_questions.sh FIRST LAST BIN [BIN_ODD]}
last=${2:?}
even=${3:?}
odd=${4:-$3}
home=${CAPSTAN_HOME:-$HOME/.cache/capstan}
index=${INDEX:-$home/demo/index}
questions=${QUESTIONS:-$home/demo/encyclopedia/questions.jsonl}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for n in $(seq "$first" "$last"); do
  q=$(sed -n "${n}p" "$questions" | python3 -c 'import json, sys; print(json.load(sys.stdin)["question"])')
  if ((n % 2 == 0)); then bin=$even; else bin=$odd; fi
  out=$({ /usr/bin/time -f "WALL %e" "$bin" ask "$index" "$q" 2>&1; } || true)
  wall=$(grep -o 'WALL [0-9.]*' <<<"$out" | cut -d' ' -f2)
  read_ms=$(grep -o 'read [0-9.]* ms' <<<"$out" | cut -d' ' -f2 || true)
  answer=$(grep -m1 '^answer:' <<<"$out" || echo "answer: (none)")
  echo "$n $bin $wall $read_ms" >>"$log"
  echo "line $n  $(basename "$bin")  ${wall} s  read ${read_ms} ms  $answer"
done
awk '{ w[$2] += $3; r[$2] += $4; n[$2]++; if ($3 <= 1.5) ok[$2]++
       if (!($2 in lo) || $3 < lo[$2]) lo[$2] = $3; if ($3 > hi[$2]) hi[$2] = $3 }
     END { for (b in w) printf "%s: %d questions, %.2f-%.2f s, mean %.3f s, %d within 1.5 s, read mean %.0f ms\n",
                               b, n[b], lo[b], hi[b], w[b] / n[b], ok[b], r[b] / n[b] }' "$log"
