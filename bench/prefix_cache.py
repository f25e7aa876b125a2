#!/usr/bin/env python3
"""Automatic prefix caching (issue 25): time to first token of a request sent
again, and of a conversation's second turn, with the prefix cache on and off,
behind `capstan serve` with SmolLM2 (Llama reader, free answers, streamed).

For each of the first N questions of a BEIR folder: the question (cold), the
same question again (repeated), then a second turn whose history is the first
question and its answer. Each server is started fresh (cache on, then
`--no-prefix-cache`), one request at a time.

    python3 bench/prefix_cache.py DATASET_DIR INDEX_DIR [--n 8] [--context passages]
"""

import argparse
import json
import os
import statistics
import time
import urllib.request

from capstan_serve import serve


def ttft(port, body):
    """Seconds to the first streamed token, the final answer, and the server's metrics."""
    body = dict(body, stream=True)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/qa", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first, answer, event = None, None, None
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode().rstrip("\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                if event == "token" and first is None:
                    first = time.perf_counter() - start
                if event == "answer":
                    answer = json.loads(line[5:])
    return first if first is not None else time.perf_counter() - start, answer


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(name + "{"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("index")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--context", default=None, help="the Llama reader's context: passages or sentences:N")
    args = ap.parse_args()
    with open(os.path.join(args.dataset, "queries.jsonl")) as f:
        questions = [json.loads(l)["text"] for l in f][: args.n]
    rows = {}
    for label, extra in (("on", []), ("off", ["--no-prefix-cache"])):
        with serve(args.index, extra) as port:
            cold, again, second, answers = [], [], [], []
            for q in questions:
                body = {"question": q, "reader": "llama", "answer": "free", "max_tokens": 24}
                if args.context:
                    body["context"] = args.context
                t1, a1 = ttft(port, body)
                t2, a2 = ttft(port, body)
                follow = dict(body, question="And when did that happen?",
                              history=[{"role": "user", "content": q},
                                       {"role": "assistant", "content": a1["answer"]}])
                t3, _ = ttft(port, follow)
                cold.append(t1)
                again.append(t2)
                second.append(t3)
                answers.append(a1["answer"] == a2["answer"])
            hit = metric(port, "capstan_scheduler_prefix_hit_tokens_total")
            prompt = metric(port, "capstan_scheduler_prompt_tokens_total")
        rows[label] = (statistics.median(cold), statistics.median(again), statistics.median(second),
                       hit / max(prompt, 1), sum(answers))
    print("| prefix cache | TTFT first ask (median s) | same question again | second turn | prompt tokens from the cache | repeated answer identical |")
    print("|---|---|---|---|---|---|")
    for label, (c, a, s, share, same) in rows.items():
        print(f"| {label} | {c:.2f} | {a:.2f} ({a / c:.2f}x) | {s:.2f} ({s / c:.2f}x) | {share:.1%} | {same}/{len(questions)} |")


if __name__ == "__main__":
    main()
