#!/usr/bin/env python3
"""Opening an index as it grows: a one-shot `capstan search --mode bm25` end to end, on a
synthetic index of N passages (issue 28's "1M-passage synthetic one").

The index is real: `capstan index` over N generated documents (each ~40 words drawn with a
Zipf law from 50,000 made-up words, so postings look like text's), embedded by a tiny
random BERT (hidden size 32, one layer, MiniLM's tokenizer) so that embedding a million
passages takes minutes on two cores instead of hours, and its HNSW graph is built with
`--hnsw-m 4 --hnsw-ef-construction 8` (the random model's vectors are near-duplicates, and
the default graph of a million of them had not finished after 27 minutes). Its vectors and
graph are therefore generated, not meaningful: this measures opening and reading, not
retrieval quality (a BM25 search reads neither).

For each binary given (--bin, and --baseline-bin to compare with an older build), the
same query runs --runs times one-shot; the script prints the median and range of the wall
time and the peak RSS (`/usr/bin/time`), and `capstan index verify`'s time once.

Usage: python3 bench/open_at_scale.py [--passages 1000000] [--out DIR] [--bin PATH]
       [--baseline-bin PATH] [--runs 7] [--index EXISTING_INDEX ...]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

home = os.environ.get("CAPSTAN_HOME", os.path.expanduser("~/.cache/capstan"))
target = os.environ.get("CARGO_TARGET_DIR", os.path.join(home, "target"))
ap = argparse.ArgumentParser()
ap.add_argument("--passages", type=int, default=1_000_000)
ap.add_argument("--out", default=os.path.join(home, "bench", "scale"))
ap.add_argument("--bin", default=os.path.join(target, "release", "capstan"))
ap.add_argument("--baseline-bin")
ap.add_argument("--runs", type=int, default=7)
ap.add_argument("--index", action="append", default=[],
                help="also time these existing indexes (e.g. the man pages one)")
ap.add_argument("--minilm", default=os.path.join(home, "models", "all-MiniLM-L6-v2"))
args = ap.parse_args()

os.makedirs(args.out, exist_ok=True)
n = args.passages
corpus = os.path.join(args.out, f"corpus-{n}.jsonl")
encoder = os.path.join(args.out, "tiny-bert")
index = os.path.join(args.out, f"index-{n}")


def words(rng, count):
    """`count` made-up words from syllables."""
    syl = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "qu", "el", "an", "or", "is", "ub",
           "ten", "dar", "mol", "fen", "gri", "hul", "jor", "pex", "wyn", "zal"]
    out = set()
    while len(out) < count:
        k = rng.integers(2, 5)
        out.add("".join(rng.choice(syl, k)))
    return sorted(out)


if not os.path.exists(corpus):
    rng = np.random.default_rng(28)
    vocab = np.array(words(rng, 50_000))
    t0 = time.time()
    with open(corpus + ".tmp", "w") as f:
        for start in range(0, n, 10_000):
            m = min(10_000, n - start)
            ids = rng.zipf(1.2, size=(m, 40)) % len(vocab)
            for i in range(m):
                doc = start + i
                f.write(json.dumps({"id": f"d{doc}", "title": f"Record {doc}",
                                    "text": " ".join(vocab[ids[i]])}) + "\n")
    os.rename(corpus + ".tmp", corpus)
    print(f"corpus: {n} documents in {time.time() - t0:.1f} s", file=sys.stderr)

if not os.path.exists(os.path.join(encoder, "model.safetensors")):
    import torch
    from transformers import BertConfig, BertModel
    os.makedirs(encoder, exist_ok=True)
    for name in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "vocab.txt", "sentence_bert_config.json", "modules.json"]:
        shutil.copy(os.path.join(args.minilm, name), encoder)
    shutil.copytree(os.path.join(args.minilm, "1_Pooling"), os.path.join(encoder, "1_Pooling"),
                    dirs_exist_ok=True)
    pooling = os.path.join(encoder, "1_Pooling", "config.json")
    cfg = json.load(open(pooling))
    cfg["word_embedding_dimension"] = 32
    json.dump(cfg, open(pooling, "w"))
    torch.manual_seed(28)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=512)
    BertModel(config, add_pooling_layer=False).save_pretrained(encoder, safe_serialization=True)

if not os.path.exists(os.path.join(index, "CURRENT")):
    t0 = time.time()
    subprocess.run([args.bin, "index", corpus, "--out", index, "--encoder", encoder,
                    "--encoder-dtype", "f32", "--no-sentence-vectors",
                    "--hnsw-m", "4", "--hnsw-ef-construction", "8"], check=True)
    print(f"index: {n} documents in {time.time() - t0:.1f} s", file=sys.stderr)


def du(path):
    return int(subprocess.run(["du", "-sb", path], capture_output=True, text=True).stdout.split()[0])


def one_shot(binary, idx, query):
    out = subprocess.run(["/usr/bin/time", "-f", "%e %M", binary, "search", idx, query,
                          "--mode", "bm25", "-k", "3"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{binary} search {idx}: {out.stderr}")
    wall, rss = out.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss)


def verify(binary, idx):
    t0 = time.time()
    out = subprocess.run([binary, "index", "verify", idx], capture_output=True, text=True)
    return time.time() - t0, out.returncode


query = "kalo mine rusa"
rows = []
for idx in [index] + args.index:
    for label, binary in [("capstan", args.bin), ("baseline", args.baseline_bin)]:
        if not binary:
            continue
        one_shot(binary, idx, query)  # the page cache warm, as for every later search
        runs = [one_shot(binary, idx, query) for _ in range(args.runs)]
        walls = sorted(w for w, _ in runs)
        v, rc = verify(binary, idx)
        row = {"index": idx, "bytes": du(idx), "binary": label,
               "bm25_one_shot_s_median": statistics.median(walls),
               "bm25_one_shot_s_min": walls[0], "bm25_one_shot_s_max": walls[-1],
               "peak_rss_kb_median": statistics.median(r for _, r in runs),
               "verify_s": round(v, 2), "verify_rc": rc}
        rows.append(row)
        print(json.dumps(row))
print(json.dumps({"passages": n, "runs": args.runs, "rows": rows}, indent=1))
