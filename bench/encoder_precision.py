#!/usr/bin/env python3
"""The int8 encoder against f32 and against sentence-transformers, on real text, in one run.

For each set of bench/real_sets.py (rustdoc, manpages):

1. Indexing speed. The passages `capstan index` cuts the corpus into
   (`capstan-bench passages`: the same chunking) are encoded by
   sentence-transformers (fp32, batch 32, 2 threads, `title. text`, 256 tokens):
   the peer's encoder alone. Then `capstan index SET/corpus.jsonl
   --no-sentence-vectors` runs whole (reading, chunking, BM25, encoding, HNSW,
   store, publish) at `--encoder-dtype f32` and at `int8`, 2 threads.
   Reported: documents/s and passages/s of each, and each index build against
   the peer's encoding alone (the issue's ratio).
2. Retrieval quality. `capstan eval retrieval` on the test split of both query
   kinds, bm25/dense/hybrid, for the f32 index (questions in f32), the int8
   index (questions in int8, its default), and both crossings (f32 index with
   int8 questions, int8 index with f32 questions): recall@10 and nDCG@10.

Writes OUT/results.json and prints a markdown table.

    python3 bench/real_sets.py --out ~/.cache/capstan/bench/real
    python3 bench/encoder_precision.py --data ~/.cache/capstan/bench/real --out /tmp/precision
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THREADS = 2


def target_dir():
    return Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/capstan/target"))


def default_encoder():
    home = os.environ.get("CAPSTAN_HOME", os.path.expanduser("~/.cache/capstan"))
    return os.environ.get("CAPSTAN_ENCODER", os.path.join(home, "models/all-MiniLM-L6-v2"))


def env():
    return dict(os.environ, RAYON_NUM_THREADS=str(THREADS))


def run(cmd):
    subprocess.run([str(c) for c in cmd], check=True, env=env(), stdout=subprocess.DEVNULL)


def timed(cmd):
    start = time.perf_counter()
    run(cmd)
    return time.perf_counter() - start


def st_encode(model, passages_file):
    texts = []
    with open(passages_file) as f:
        for line in f:
            p = json.loads(line)
            texts.append(p["title"] + ". " + p["text"] if p["title"] else p["text"])
    model.encode(texts[:64], batch_size=32)  # warm-up
    start = time.perf_counter()
    model.encode(texts, batch_size=32, convert_to_numpy=True)
    return len(texts), time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="the folder of bench/real_sets.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sets", default="rustdoc,manpages")
    ap.add_argument("--encoder", default=default_encoder())
    ap.add_argument("--capstan", default=str(target_dir() / "release/capstan"))
    ap.add_argument("--bench", default=str(target_dir() / "release/capstan-bench"))
    ap.add_argument("--split", default="test")
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(THREADS)
    model = SentenceTransformer(args.encoder, device="cpu")
    model.max_seq_length = 256

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"threads": THREADS, "torch": torch.__version__, "sets": {}}
    for name in args.sets.split(","):
        data = Path(args.data) / name
        corpus = data / "corpus.jsonl"
        documents = sum(1 for _ in open(corpus))
        passages_file = out / f"{name}-passages.jsonl"
        run([args.bench, "passages", "--corpus", corpus, "--out", passages_file, "--encoder", args.encoder])
        passages, st_seconds = st_encode(model, passages_file)
        entry = {
            "documents": documents,
            "passages": passages,
            "sentence_transformers": {"seconds": st_seconds, "passages_per_second": passages / st_seconds},
            "index": {},
            "quality": {},
        }
        print(f"{name}: sentence-transformers {passages / st_seconds:.1f} passages/s", file=sys.stderr)
        for dtype in ("f32", "int8"):
            index = out / f"{name}-{dtype}"
            subprocess.run(["rm", "-rf", str(index)], check=True)
            seconds = timed([args.capstan, "index", corpus, "--out", index, "--encoder", args.encoder,
                             "--encoder-dtype", dtype, "--no-sentence-vectors", "-q"])
            entry["index"][dtype] = {
                "seconds": seconds,
                "documents_per_second": documents / seconds,
                "passages_per_second": passages / seconds,
                "vs_sentence_transformers_encoding": st_seconds / seconds,
            }
            print(f"{name}: capstan index {dtype} {seconds:.1f} s "
                  f"({st_seconds / seconds:.2f}x the peer's encoding alone)", file=sys.stderr)
        for index_dtype in ("f32", "int8"):
            for question_dtype in ("f32", "int8"):
                for kind in ("known-item", "inverse-cloze"):
                    eval_out = out / f"eval-{name}-{kind}-{index_dtype}-q{question_dtype}"
                    run([args.capstan, "eval", "retrieval", out / f"{name}-{index_dtype}",
                         "--dataset", data / kind, "--split", args.split, "--out", eval_out,
                         "--encoder-dtype", question_dtype, "--quiet"])
                    metrics = json.load(open(eval_out / "results.json"))
                    entry["quality"][f"{kind}/{index_dtype}/q{question_dtype}"] = metrics
        results["sets"][name] = entry
        json.dump(results, open(out / "results.json", "w"), indent=1)

    print("| set | docs | passages | peer encoding (passages/s) | capstan index f32 (docs/s, ×peer) "
          "| capstan index int8 (docs/s, ×peer) |")
    print("|---|---|---|---|---|---|")
    for name, e in results["sets"].items():
        f, i = e["index"]["f32"], e["index"]["int8"]
        print(f"| {name} | {e['documents']} | {e['passages']} | "
              f"{e['sentence_transformers']['passages_per_second']:.1f} | "
              f"{f['documents_per_second']:.1f} ({f['vs_sentence_transformers_encoding']:.2f}×) | "
              f"{i['documents_per_second']:.1f} ({i['vs_sentence_transformers_encoding']:.2f}×) |")
    print()
    print("| set, kind | mode | f32 index R@10 / nDCG@10 | int8 index R@10 / nDCG@10 | "
          "f32 index, int8 questions | int8 index, f32 questions |")
    print("|---|---|---|---|---|---|")
    for name, e in results["sets"].items():
        for kind in ("known-item", "inverse-cloze"):
            q = e["quality"]
            for mode in ("bm25", "dense", "hybrid"):
                cells = []
                for key in ("f32/qf32", "int8/qint8", "f32/qint8", "int8/qf32"):
                    m = metric(q[f"{kind}/{key}"], mode)
                    cells.append(f"{m['recall@10']:.4f} / {m['ndcg@10']:.4f}")
                print(f"| {name}, {kind} | {mode} | " + " | ".join(cells) + " |")


def metric(results, mode):
    """The metrics of `mode` in an eval retrieval results.json."""
    return results["modes"][mode]


if __name__ == "__main__":
    main()
