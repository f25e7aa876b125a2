#!/usr/bin/env python3
"""The peer retrieval pipeline for one BEIR folder: bm25s top-100 + MiniLM
exact top-100 + RRF (k = 60) over documents.

It is what Capstan's retrieval is measured against on the sets of
bench/real_sets.py: the same passages, the same kind of lexical and dense
retrievers built from widely used packages, fused the same way, so that a gap
in the metrics is a gap in Capstan rather than in the set-up.

  passages  each document's words (whitespace split) packed greedily into
            passages of at most 256 MiniLM tokens for `title + ". " + passage`
            including [CLS]/[SEP] (the encoder's limit, so nothing is
            truncated), with about 32 tokens of overlap; words over 64
            characters are cut, titles to 64 tokens
  bm25      bm25s (k1 1.2, b 0.75, Lucene IDF), English stop words, Snowball
            English stemmer; text = title + " " + passage; top 100 passages
  dense     sentence-transformers, normalised embeddings of
            title + ". " + passage, exact inner product; top 100 passages
  documents a document scores its best passage's score; ranked by that
  hybrid    reciprocal rank fusion (k = 60) of the two document rankings

Metrics at document level, binary relevance, averaged over the queries of
the split: recall@1/10/100, MRR@10, nDCG@10; and the p50/p99 latency of one
query at a time (models loaded and warmed up beforehand).

Passage embeddings are cached next to --out (or in --data) as
passages-<hash>.npy, the hash covering the encoder folder and the passages.

Usage: python3 bench/retrieval_peer.py --data BEIR_DIR --split test
       [--encoder DIR] [--out results.json]
(packages: bench/requirements.txt)
"""
import argparse
import hashlib
import json
import math
import os
import time

# On a shared machine, OpenMP threads that spin while waiting for a busy core
# turn a 20 ms query embedding into 500 ms; set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import bm25s
import numpy as np
import sentence_transformers
import Stemmer
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

MAX_TOKENS = 256
OVERLAP_TOKENS = 32
TOP_K = 100
RRF_K = 60
K1, B = 1.2, 0.75
# A "word" longer than this many characters (a URL, an option list without
# spaces) is cut into pieces of that length: a character is at most one token,
# so a piece always fits in a passage.
MAX_WORD_CHARS = 64
# Titles (openssl's lists every subcommand) are cut to this many tokens to
# leave room for text.
MAX_TITLE_TOKENS = 64


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def read_qrels(path):
    qrels = {}
    with open(path, encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, did, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                qrels.setdefault(qid, set()).add(did)
    return qrels


class Chunker:
    """Packs words into passages by token count. The MiniLM (BERT WordPiece)
    tokenizer splits on whitespace first, so the tokens of `title + ". " +
    words` are those of `title + "."` and of each word, plus [CLS] and [SEP];
    each distinct word is tokenised once."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.specials = len(tokenizer("")["input_ids"])
        self.counts = {}

    def count_words(self, words):
        new = list({w for w in words if w not in self.counts})
        for i in range(0, len(new), 10000):
            batch = new[i:i + 10000]
            ids = self.tok(batch, add_special_tokens=False)["input_ids"]
            self.counts.update(zip(batch, map(len, ids)))

    def words(self, text):
        out = []
        for w in text.split():
            if len(w) > MAX_WORD_CHARS:
                out += [w[i:i + MAX_WORD_CHARS] for i in range(0, len(w), MAX_WORD_CHARS)]
            else:
                out.append(w)
        return out

    def passages(self, title, text):
        """(title, passages), the title cut to MAX_TITLE_TOKENS."""
        title_words = self.words(title)
        self.count_words(title_words)
        used = len(self.tok(".", add_special_tokens=False)["input_ids"])
        for i, w in enumerate(title_words):
            if used + self.counts[w] > MAX_TITLE_TOKENS:
                title_words = title_words[:i]
                break
            used += self.counts[w]
        budget = MAX_TOKENS - self.specials - used
        words = self.words(text)
        self.count_words(words)
        out, start = [], 0
        while start < len(words):
            end, used = start, 0
            while end < len(words) and used + self.counts[words[end]] <= budget:
                used += self.counts[words[end]]
                end += 1
            out.append(" ".join(words[start:end]))
            if end == len(words):
                break
            # Step back over about OVERLAP_TOKENS tokens, always moving forward.
            back, overlap = end, 0
            while back - 1 > start and overlap + self.counts[words[back - 1]] <= OVERLAP_TOKENS:
                back -= 1
                overlap += self.counts[words[back]]
            start = back
        return " ".join(title_words), out


def doc_ranking(passage_ids, passage_scores, passage_doc):
    """Documents of the top passages, best passage score first."""
    best = {}
    for pid, s in zip(passage_ids, passage_scores):
        d = passage_doc[pid]
        if d not in best:
            best[d] = s
    return list(best)


def rrf(*rankings):
    scores = {}
    for ranking in rankings:
        for rank, d in enumerate(ranking, 1):
            scores[d] = scores.get(d, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores, key=lambda d: (-scores[d], d))


def metrics(ranking, relevant):
    hits = [d in relevant for d in ranking]
    first = next((i for i, h in enumerate(hits[:10]) if h), None)
    dcg = sum(1 / math.log2(i + 2) for i, h in enumerate(hits[:10]) if h)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), 10)))
    return {
        "recall@1": sum(hits[:1]) / len(relevant),
        "recall@10": sum(hits[:10]) / len(relevant),
        "recall@100": sum(hits[:100]) / len(relevant),
        "mrr@10": 0.0 if first is None else 1 / (first + 1),
        "ndcg@10": dcg / idcg,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv")
    ap.add_argument("--split", default="test")
    ap.add_argument("--encoder", default=os.environ.get("CAPSTAN_ENCODER")
                    or os.path.expanduser("~/.cache/capstan/models/all-MiniLM-L6-v2"))
    ap.add_argument("--out", help="results JSON")
    ap.add_argument("--batch-size", type=int, default=64, help="passages per embedding batch")
    args = ap.parse_args()
    data = os.path.abspath(os.path.expanduser(args.data))
    t_start = time.perf_counter()

    corpus = read_jsonl(os.path.join(data, "corpus.jsonl"))
    all_queries = {q["_id"]: q["text"] for q in read_jsonl(os.path.join(data, "queries.jsonl"))}
    qrels = read_qrels(os.path.join(data, "qrels", f"{args.split}.tsv"))
    qids = sorted(q for q in qrels if q in all_queries)

    chunker = Chunker(AutoTokenizer.from_pretrained(args.encoder))
    passage_doc, titles, bodies = [], [], []
    for d in corpus:
        title, passages = chunker.passages(d.get("title") or "", d["text"])
        for p in passages:
            passage_doc.append(d["_id"])
            titles.append(title)
            bodies.append(p)
    dense_texts = [f"{t}. {p}" for t, p in zip(titles, bodies)]
    bm25_texts = [f"{t} {p}" for t, p in zip(titles, bodies)]
    print(f"{len(corpus)} documents -> {len(bodies)} passages "
          f"({time.perf_counter() - t_start:.0f} s)", flush=True)

    stemmer = Stemmer.Stemmer("english")
    t = time.perf_counter()
    bm25 = bm25s.BM25(k1=K1, b=B, method="lucene")
    bm25.index(bm25s.tokenize(bm25_texts, stopwords="en", stemmer=stemmer, show_progress=False),
               show_progress=False)
    print(f"bm25s index {time.perf_counter() - t:.0f} s", flush=True)

    model = SentenceTransformer(args.encoder, device="cpu")
    h = hashlib.sha256(os.path.realpath(args.encoder).encode())
    for text in dense_texts:
        h.update(text.encode())
        h.update(b"\0")
    cache_dir = os.path.dirname(os.path.abspath(args.out)) if args.out else data
    cache = os.path.join(cache_dir, f"passages-{h.hexdigest()[:16]}.npy")
    if os.path.exists(cache):
        emb = np.load(cache)
        print(f"embeddings from {cache}", flush=True)
    else:
        t = time.perf_counter()
        emb = model.encode(dense_texts, batch_size=args.batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False).astype(np.float32)
        os.makedirs(cache_dir, exist_ok=True)
        np.save(cache, emb)
        print(f"embedded {len(dense_texts)} passages in {time.perf_counter() - t:.0f} s -> {cache}",
              flush=True)

    def search_bm25(q):
        ids, scores = bm25.retrieve(bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False),
                                    k=min(TOP_K, len(bm25_texts)), n_threads=1, show_progress=False)
        return doc_ranking(ids[0].tolist(), scores[0].tolist(), passage_doc)

    def search_dense(q):
        qv = model.encode([q], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)[0]
        scores = emb @ qv.astype(np.float32)
        k = min(TOP_K, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return doc_ranking(top.tolist(), scores[top].tolist(), passage_doc)

    modes = {
        "bm25": search_bm25,
        "dense": search_dense,
        "hybrid": lambda q: rrf(search_bm25(q), search_dense(q)),
    }
    for search in modes.values():  # warm-up: first-call allocations, lazy init
        search(all_queries[qids[0]])

    results = {}
    for mode, search in modes.items():
        per_query, latency = [], []
        for qid in qids:
            t = time.perf_counter()
            ranking = search(all_queries[qid])
            latency.append(time.perf_counter() - t)
            per_query.append(metrics(ranking, qrels[qid]))
        results[mode] = {m: sum(r[m] for r in per_query) / len(per_query) for m in per_query[0]}
        results[mode]["latency_ms"] = {"p50": float(np.percentile(latency, 50) * 1000),
                                       "p99": float(np.percentile(latency, 99) * 1000)}

    report = {
        "set": "/".join(data.split(os.sep)[-2:]),
        "split": args.split,
        "modes": results,
        "passages": len(bodies),
        "documents": len(corpus),
        "queries": len(qids),
        "encoder": os.path.basename(os.path.realpath(args.encoder)),
        "seconds": time.perf_counter() - t_start,
        "versions": {"bm25s": bm25s.__version__, "numpy": np.__version__,
                     "sentence-transformers": sentence_transformers.__version__},
    }
    names = ["recall@1", "recall@10", "recall@100", "mrr@10", "ndcg@10"]
    print(f"{report['set']} ({args.split}): {len(qids)} queries, {len(corpus)} documents, "
          f"{len(bodies)} passages")
    print(f"| mode   | {' | '.join(names)} | p50 ms | p99 ms |")
    print(f"|--------|{'|'.join('-' * (len(n) + 2) for n in names)}|--------|--------|")
    for mode, r in results.items():
        print(f"| {mode:<6} | " + " | ".join(f"{r[n]:{len(n)}.3f}" for n in names)
              + f" | {r['latency_ms']['p50']:6.1f} | {r['latency_ms']['p99']:6.1f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
