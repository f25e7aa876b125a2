#!/usr/bin/env python3
"""Capstan's retrieval beside the peer pipeline on the real-text sets, in one run.

For each set and query kind of bench/real_sets.py, on one split: runs
`capstan eval retrieval` (bm25, dense, hybrid) on Capstan's index of the set
and bench/retrieval_peer.py (bm25s + sentence-transformers exact + RRF over
documents) on the same BEIR folder, and prints one table per set and kind
with both sides and the differences the goal is stated in (hybrid recall@10
and nDCG@10 vs the peer's; BM25 vs bm25s; dense vs exact MiniLM).

  --sweep   instead: hybrid only, Capstan alone, every fusion setting of
            SWEEP on the split (use dev: defaults are chosen there and
            reported on test), with the mean over sets and kinds.

Usage:
  python3 bench/retrieval_vs_peer.py --data ~/.cache/capstan/bench/real \\
      --indexes ~/.cache/capstan/bench/real-idx --split test [--sets rustdoc,manpages]
      [--capstan-args "--rrf-k 20"] [--peer-python ~/.cache/capstan/bench-venv/bin/python]
      [--out results.json]
  python3 bench/retrieval_vs_peer.py ... --split dev --sweep
The indexes are `capstan index SET/corpus.jsonl --out INDEXES/SET --no-sentence-vectors`.
"""
import argparse
import itertools
import json
import os
import shlex
import subprocess
import sys
import tempfile

KINDS = ("known-item", "inverse-cloze")
METRICS = ("recall@1", "recall@10", "recall@100", "mrr@10", "ndcg@10")

# The fusion settings --sweep tries: RRF over passages and documents with
# BM25 weights and rank constants, and convex combinations of normalised scores.
SWEEP = (
    [["--unit", u, "--rrf-k", str(k), "--bm25-weight", str(w)]
     for u in ("passages", "documents") for k in (10, 20, 40, 60) for w in (0.4, 0.5, 0.6, 0.7)]
    + [["--unit", u, "--fusion", "weighted", "--bm25-weight", str(w)]
       for u in ("passages", "documents") for w in (0.3, 0.4, 0.5, 0.6, 0.7)]
)


def capstan_eval(binary, index, dataset, split, modes, extra):
    with tempfile.TemporaryDirectory() as out:
        cmd = [binary, "eval", "retrieval", index, "--dataset", dataset, "--split", split,
               "--modes", ",".join(modes), "--out", out, "--quiet"] + extra
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "results.json")) as f:
            return json.load(f)["modes"]


def peer_eval(python, dataset, split, cache):
    # The peer caches its passage embeddings beside --out: keep them across runs.
    os.makedirs(cache, exist_ok=True)
    name = "-".join(dataset.rstrip("/").split(os.sep)[-2:]) + f"-{split}.json"
    path = os.path.join(cache, name)
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([python, os.path.join(here, "retrieval_peer.py"), "--data", dataset,
                    "--split", split, "--out", path], check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)["modes"]


def row(name, m):
    return f"| {name} | " + " | ".join(f"{m[k]:.4f}" for k in METRICS) + " |"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--indexes", required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--sets", default="rustdoc,manpages")
    ap.add_argument("--capstan", default=os.environ.get("CAPSTAN_BIN", "capstan"))
    ap.add_argument("--capstan-args", default="", help="extra flags of `capstan eval retrieval`")
    ap.add_argument("--peer-python", default=os.path.expanduser("~/.cache/capstan/bench-venv/bin/python"))
    ap.add_argument("--peer-cache", default=os.path.expanduser("~/.cache/capstan/bench/peer"),
                    help="where the peer keeps its results and passage embeddings")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    data, indexes = os.path.expanduser(args.data), os.path.expanduser(args.indexes)
    extra = shlex.split(args.capstan_args)
    report = {"split": args.split, "capstan_args": extra, "sets": {}}
    cells = [(s, k) for s in args.sets.split(",") for k in KINDS]

    if args.sweep:
        print(f"| fusion | " + " | ".join(f"{s}/{k} nDCG@10 / R@10" for s, k in cells) + " | mean nDCG@10 | mean R@10 |")
        print("|---|" + "---|" * (len(cells) + 2))
        for setting in SWEEP:
            scores = []
            for s, k in cells:
                m = capstan_eval(args.capstan, os.path.join(indexes, s), os.path.join(data, s, k),
                                 args.split, ["hybrid"], setting + extra)["hybrid"]
                scores.append((m["ndcg@10"], m["recall@10"]))
            mean_n = sum(n for n, _ in scores) / len(scores)
            mean_r = sum(r for _, r in scores) / len(scores)
            report["sets"][" ".join(setting)] = scores
            print(f"| {' '.join(setting)} | " + " | ".join(f"{n:.4f} / {r:.4f}" for n, r in scores)
                  + f" | {mean_n:.4f} | {mean_r:.4f} |", flush=True)
    else:
        for s, k in cells:
            dataset = os.path.join(data, s, k)
            mine = capstan_eval(args.capstan, os.path.join(indexes, s), dataset, args.split,
                                ["bm25", "dense", "hybrid"], extra)
            peer = peer_eval(args.peer_python, dataset, args.split, args.peer_cache)
            report["sets"][f"{s}/{k}"] = {"capstan": mine, "peer": peer}
            print(f"\n### {s}, {k}, {args.split} split\n")
            print("| | " + " | ".join(METRICS) + " |")
            print("|---|" + "---|" * len(METRICS))
            for name, m in [("bm25s", peer["bm25"]), ("Capstan BM25", mine["bm25"]),
                            ("sentence-transformers exact", peer["dense"]), ("Capstan dense", mine["dense"]),
                            ("peer hybrid (RRF 60 over documents)", peer["hybrid"]),
                            ("Capstan hybrid", mine["hybrid"])]:
                print(row(name, m))
            d = lambda mode, pm, metric: mine[mode][metric] - peer[pm][metric]
            print(f"\nhybrid vs peer: recall@10 {d('hybrid', 'hybrid', 'recall@10'):+.4f}, "
                  f"nDCG@10 {d('hybrid', 'hybrid', 'ndcg@10'):+.4f}; BM25 vs bm25s: recall@10 "
                  f"{d('bm25', 'bm25', 'recall@10'):+.4f}, nDCG@10 {d('bm25', 'bm25', 'ndcg@10'):+.4f}; "
                  f"dense vs exact MiniLM: recall@10 {d('dense', 'dense', 'recall@10'):+.4f}, "
                  f"nDCG@10 {d('dense', 'dense', 'ndcg@10'):+.4f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
