#!/usr/bin/env python3
"""Follow-up questions (issue 25): what a conversation's second turn retrieves
and answers, through `capstan serve` (`POST /v1/qa`, extractive reader, k 5).

Every question of the generated encyclopedia that names its document gives a
conversation: first "Tell me about NAME.", then the question with the name
replaced by "this person" / "it", as users ask follow-ups.
Three ways to ask the second:
  alone     the follow-up by itself (what chat did before: only the last
            user message was read),
  history   the follow-up with the first question and an answer as
            `history` (Capstan resolves the follow-up from the conversation),
  named     the original question, name included (the upper bound);
  model     (with --model GGUF) as `history`, the follow-up rewritten for
            retrieval by that model (`"rewrite": "model"`), the extractive
            reader still answering.
Reported: recall@1 and @5 of the gold document among the passages, and how
often the answer contains a gold answer.

Caveat: the follow-ups are made by replacing the name, and the first turn
names its subject the way the resolver looks for one (a capitalised name),
so `history` measures the resolver on the pattern it was built for.

    python3 bench/followups.py DATASET_DIR INDEX_DIR [--model GGUF] [--n N]
"""

import argparse
import collections
import json
import os
import re
import sys
import time
import urllib.request

from capstan_serve import serve

PERSON = re.compile(r"\b(born|living|die|died|marr|stud|work|train)", re.I)


def load(data):
    titles = {}
    with open(os.path.join(data, "corpus.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            titles[d["_id"]] = d["title"]
    queries, answers = {}, {}
    with open(os.path.join(data, "queries.jsonl")) as q, open(os.path.join(data, "questions.jsonl")) as a:
        for ql, al in zip(q, a):
            qj, aj = json.loads(ql), json.loads(al)
            assert qj["text"] == aj["question"]
            queries[qj["_id"]] = qj["text"]
            answers[qj["_id"]] = aj["answers"]
    gold = {}
    with open(os.path.join(data, "qrels/test.tsv")) as f:
        next(f)
        for line in f:
            qid, doc, _ = line.rstrip("\n").split("\t")
            gold[qid] = doc
    return titles, queries, answers, gold


def pairs_of(titles, queries, gold):
    pairs = []
    for qid, doc in sorted(gold.items()):
        title = titles.get(doc)
        if not title or title not in queries[qid]:
            continue
        question = queries[qid]
        phrase = "this person" if PERSON.search(question) else "it"
        pairs.append((qid, doc, f"Tell me about {title}.", question.replace(title, phrase), question))
    return pairs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("index")
    ap.add_argument("--model", help="a GGUF file: also rewrite follow-ups with it")
    ap.add_argument("--n", type=int, help="only the first N pairs")
    args = ap.parse_args()
    titles, queries, answers, gold = load(args.data)
    pairs = pairs_of(titles, queries, gold)[:args.n]
    print(f"{len(pairs)} follow-up pairs; e.g. {pairs[0][2]!r} -> {pairs[0][3]!r}", file=sys.stderr)
    flags = ["--llama-model", args.model] if args.model else ["--no-default-model"]
    with serve(args.index, flags) as port:
        def qa(body):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/qa", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            return json.load(urllib.request.urlopen(req, timeout=120))

        variants = ("alone", "history", "named") + (("model",) if args.model else ())
        stats = {v: collections.Counter() for v in variants}
        ms = {v: [] for v in variants}
        rq = {}
        own = 0
        for qid, doc, first, follow, named in pairs:
            previous = qa({"question": first, "k": 5, "reader": "extractive"})["answer"]
            history = [{"role": "user", "content": first}, {"role": "assistant", "content": previous}]
            for variant, body in (
                ("alone", {"question": follow}),
                ("history", {"question": follow, "history": history}),
                ("named", {"question": named}),
                ("model", {"question": follow, "history": history, "rewrite": "model"}),
            ):
                if variant not in stats:
                    continue
                body["k"] = 5
                body["reader"] = "extractive"
                t = time.perf_counter()
                a = qa(body)
                ms[variant].append((time.perf_counter() - t) * 1000)
                rq[variant] = a.get("retrieval_question")
                docs = [p["doc_id"] for p in a["passages"]]
                s = stats[variant]
                s["r@1"] += docs[:1] == [doc]
                s["r@5"] += doc in docs
                s["answer"] += any(g.lower() in a["answer"].lower() for g in answers[qid])
            if args.model:
                # The model's own rewrite (not the rules' fallback) was read.
                own += rq["model"] != rq["history"]
                if len(ms["model"]) <= 5:
                    print(f"{follow!r} -> model {rq['model']!r}, rules {rq['history']!r}", file=sys.stderr)
    n = len(pairs)
    print("| second turn | recall@1 | recall@5 | answer holds a gold answer | median request |")
    print("|---|---|---|---|---|")
    for variant, s in stats.items():
        median = sorted(ms[variant])[len(ms[variant]) // 2]
        print(f"| {variant} | {s['r@1'] / n:.3f} | {s['r@5'] / n:.3f} | {s['answer'] / n:.3f} | {median:.0f} ms |")
    print(f"\n{n} pairs")
    if args.model:
        print(f"the model's own rewrite read for {own} of {n}; the rules' for the rest")


if __name__ == "__main__":
    main()
