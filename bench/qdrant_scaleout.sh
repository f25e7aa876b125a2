#!/usr/bin/env bash
# The index in Qdrant against the embedded index folder, in one run, on one
# real-text set of bench/real_sets.py (default: rustdoc):
#   1. indexing passages/s: the embedded build; one writer into a 3-node
#      cluster; two `--part` writers at once into another collection;
#   2. recall@10 (test split, both query kinds) and single-client queries/s
#      (capstan-bench latency, hybrid, k 10) of the embedded index, of a
#      1-node cluster and of the 3-node cluster (3 shards, replication 2).
# Clusters are started with ../shared/bin/qdrant-cluster on loopback (free
# base ports 17330 / 17430) and stopped at the end, also on failure.
#
# Usage: bench/qdrant_scaleout.sh [SET] [OUT_DIR]
#   (needs: scripts/setup.sh done, python3 bench/real_sets.py --out ~/.cache/capstan/bench/real)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
set_name=${1:-rustdoc}
out=${2:-$CAPSTAN_HOME/bench/scaleout-$set_name}
data=$CAPSTAN_HOME/bench/real/$set_name
cluster_bin=../shared/bin/qdrant-cluster
bench_bin=$CARGO_TARGET_DIR/release/capstan-bench
cargo build --release -p capstan -p capstan-bench -q
mkdir -p "$out"
c1=$out/cluster1 c3=$out/cluster3
stop() { "$cluster_bin" stop "$c1" >/dev/null 2>&1 || true; "$cluster_bin" stop "$c3" >/dev/null 2>&1 || true; }
trap stop EXIT
rm -rf "$c1" "$c3" "$out/embedded"

timed() { # timed NAME CMD...: runs CMD, prints NAME and its wall seconds
  local name=$1; shift
  local start end
  start=$(date +%s.%N)
  "$@" >"$out/$name.log" 2>&1
  end=$(date +%s.%N)
  python3 -c "print(f'$name: {$end - $start:.1f} s')" | tee -a "$out/times.txt"
}

"$cluster_bin" start "$c3" 3 17330 >/dev/null
"$cluster_bin" start "$c1" 1 17430 >/dev/null
q3="qdrant://127.0.0.1:17331,127.0.0.1:17341,127.0.0.1:17351"
q1="qdrant://127.0.0.1:17431"
layout3=(--shards 3 --replication-factor 2)
: >"$out/times.txt"

timed embedded "$CAPSTAN_BIN" index "$data/corpus.jsonl" --out "$out/embedded" --no-sentence-vectors -q
timed one-writer-3-nodes "$CAPSTAN_BIN" index "$data/corpus.jsonl" --out "$q3/one" "${layout3[@]}" -q
timed one-writer-1-node "$CAPSTAN_BIN" index "$data/corpus.jsonl" --out "$q1/single" -q
start=$(date +%s.%N)
"$CAPSTAN_BIN" index "$data/corpus.jsonl" --out "$q3/two" --part 1/2 "${layout3[@]}" -q >"$out/part1.log" 2>&1 &
p1=$!
"$CAPSTAN_BIN" index "$data/corpus.jsonl" --out "$q3/two" --part 2/2 "${layout3[@]}" -q >"$out/part2.log" 2>&1 &
p2=$!
wait $p1 $p2
end=$(date +%s.%N)
python3 -c "print(f'two-writers-3-nodes: {$end - $start:.1f} s')" | tee -a "$out/times.txt"
cat "$out"/one-writer-3-nodes.log "$out"/part1.log "$out"/part2.log

for kind in known-item inverse-cloze; do
  for target in "embedded=$out/embedded" "1-node=$q1/single" "3-nodes=$q3/one"; do
    name=${target%%=*} index=${target#*=}
    "$CAPSTAN_BIN" eval retrieval "$index" --dataset "$data/$kind" --split test --out "$out/eval-$name-$kind" --quiet >/dev/null
    "$bench_bin" latency --index "$index" --queries "$data/$kind/queries.jsonl" --mode hybrid --k 10 >"$out/latency-$name-$kind.json"
  done
done
python3 - "$out" <<'PY'
import json, os, sys
import re
out = sys.argv[1]
log = open(os.path.join(out, "embedded.log")).read()
passages = int(re.search(r"(\d+) passages", log).group(1))
print(f"{passages} passages")
print("| indexing | seconds | passages/s |\n|---|---|---|")
for line in open(os.path.join(out, "times.txt")):
    name, secs = line.split(": ")
    secs = float(secs.split()[0])
    print(f"| {name} | {secs:.1f} | {passages / secs:.1f} |")
print()
print("| index | kind | BM25 R@10 | dense R@10 | hybrid R@10 | hybrid nDCG@10 | hybrid p50 ms | p99 ms | queries/s (1 client) |")
print("|---|---|---|---|---|---|---|---|---|")
for kind in ("known-item", "inverse-cloze"):
    for name in ("embedded", "1-node", "3-nodes"):
        m = json.load(open(os.path.join(out, f"eval-{name}-{kind}", "results.json")))["modes"]
        lat = json.load(open(os.path.join(out, f"latency-{name}-{kind}.json")))
        print(f"| {name} | {kind} | {m['bm25']['recall@10']:.4f} | {m['dense']['recall@10']:.4f} | "
              f"{m['hybrid']['recall@10']:.4f} | {m['hybrid']['ndcg@10']:.4f} | {lat['p50_ms']:.2f} | "
              f"{lat['p99_ms']:.2f} | {1000.0 / lat['mean_ms']:.0f} |")
PY
