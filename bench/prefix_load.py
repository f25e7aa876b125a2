#!/usr/bin/env python3
"""Prefix caching under a RAG load (issue 25): questions that share their
passages, behind `capstan serve` with SmolLM2, the cache on and off, at 1 and
4 concurrent clients.

Workload: for each of the first E documents' entities, three questions about
it ("Tell me about NAME.", "What is NAME known for?", and the encyclopedia's
own question), shuffled with a fixed seed: requests about one entity retrieve
the same passages, in the same order, so their prompts share the instruction,
the worked example and the documents. Llama reader, whole passages, free
answers of at most 24 tokens, streamed; reported: aggregate generated tokens/s,
median time to first token, and the share of prompt tokens read from the cache.

    python3 bench/prefix_load.py DATASET_DIR INDEX_DIR [--entities 6]
"""

import argparse
import concurrent.futures
import json
import os
import random
import statistics
import time
import urllib.request

from capstan_serve import serve
from prefix_cache import metric, ttft


def workload(dataset, entities):
    titles = {}
    with open(os.path.join(dataset, "corpus.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            titles[d["_id"]] = d["title"]
    queries = {}
    with open(os.path.join(dataset, "queries.jsonl")) as f:
        for line in f:
            q = json.loads(line)
            queries[q["_id"]] = q["text"]
    requests = []
    with open(os.path.join(dataset, "qrels/test.tsv")) as f:
        next(f)
        for line in f:
            qid, doc, _ = line.rstrip("\n").split("\t")
            name = titles.get(doc, "")
            if name and name in queries[qid]:
                requests += [f"Tell me about {name}.", f"What is {name} known for?", queries[qid]]
            if len(requests) >= 3 * entities:
                break
    random.Random(7).shuffle(requests)
    return requests


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("index")
    ap.add_argument("--entities", type=int, default=6)
    args = ap.parse_args()
    questions = workload(args.dataset, args.entities)
    print("| prefix cache | clients | generated tokens/s | median TTFT (s) | prompt tokens from the cache |")
    print("|---|---|---|---|---|")
    for label, extra in (("on", []), ("off", ["--no-prefix-cache"])):
        for clients in (1, 4):
            with serve(args.index, extra) as port:
                body = lambda q: {"question": q, "reader": "llama", "context": "passages",
                                  "answer": "free", "max_tokens": 24}
                start = time.perf_counter()
                with concurrent.futures.ThreadPoolExecutor(clients) as pool:
                    results = list(pool.map(lambda q: ttft(port, body(q)), questions))
                wall = time.perf_counter() - start
                tokens = sum(a["usage"]["generated_tokens"] for _, a in results)
                hit = metric(port, "capstan_scheduler_prefix_hit_tokens_total")
                prompt = metric(port, "capstan_scheduler_prompt_tokens_total")
            print(f"| {label} | {clients} | {tokens / wall:.1f} | {statistics.median(t for t, _ in results):.2f} "
                  f"| {hit / max(prompt, 1):.1%} |", flush=True)


if __name__ == "__main__":
    main()
