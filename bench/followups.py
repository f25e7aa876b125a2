#!/usr/bin/env python3
"""Follow-up questions (issue 25): retrieval of a conversation's second turn.

From the generated encyclopedia's questions, every document asked about at
least twice gives a pair: the first question, then the second with the
document's name replaced by "this person" / "it" (a follow-up as users ask
it). `capstan eval retrieval` (hybrid) then scores recall@5 of the gold
document for:
  alone     the follow-up by itself (what chat retrieved before issue 25),
  previous  the previous user turn + the follow-up (QaRequest::search_query),
  named     the original question with the name (an upper bound).

    python3 bench/followups.py DATASET_DIR INDEX_DIR
"""

import collections
import json
import os
import re
import subprocess
import sys
import tempfile

HOME = os.environ.get("CAPSTAN_HOME", os.path.expanduser("~/.cache/capstan"))
BIN = os.environ.get("CAPSTAN_BIN", os.path.join(HOME, "target/release/capstan"))

PERSON = re.compile(r"\b(born|living|die|died|marr|stud|work|train)", re.I)


def main():
    data, index = sys.argv[1], sys.argv[2]
    titles = {}
    with open(os.path.join(data, "corpus.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            titles[d["_id"]] = d["title"]
    queries = {}
    with open(os.path.join(data, "queries.jsonl")) as f:
        for line in f:
            q = json.loads(line)
            queries[q["_id"]] = q["text"]
    gold = {}
    with open(os.path.join(data, "qrels/test.tsv")) as f:
        next(f)
        for line in f:
            qid, doc, _ = line.rstrip("\n").split("\t")
            gold[qid] = doc
    by_doc = collections.defaultdict(list)
    for qid, doc in sorted(gold.items()):
        if titles.get(doc) and titles[doc] in queries[qid]:
            by_doc[doc].append(qid)
    pairs = []
    for doc, qids in sorted(by_doc.items()):
        if len(qids) < 2:
            continue
        first, second = queries[qids[0]], queries[qids[1]]
        phrase = "this person" if PERSON.search(second) else "it"
        follow = second.replace(titles[doc], phrase)
        pairs.append((qids[1], doc, first, follow, second))
    print(f"{len(pairs)} follow-up pairs", file=sys.stderr)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in ("alone", "previous", "named"):
            ds = os.path.join(tmp, variant)
            os.makedirs(os.path.join(ds, "qrels"))
            os.symlink(os.path.join(os.path.abspath(data), "corpus.jsonl"), os.path.join(ds, "corpus.jsonl"))
            with open(os.path.join(ds, "queries.jsonl"), "w") as q, open(os.path.join(ds, "qrels/test.tsv"), "w") as r:
                r.write("query-id\tcorpus-id\tscore\n")
                for qid, doc, first, follow, named in pairs:
                    text = {"alone": follow, "previous": f"{first} {follow}", "named": named}[variant]
                    q.write(json.dumps({"_id": qid, "text": text}) + "\n")
                    r.write(f"{qid}\t{doc}\t1\n")
            out = os.path.join(tmp, variant + "-out")
            subprocess.run([BIN, "eval", "retrieval", index, "--dataset", ds, "--modes", "hybrid",
                            "--out", out, "-q"], check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(out, "results.json")) as f:
                results[variant] = json.load(f)
    print(json.dumps({v: r for v, r in results.items()}, indent=1)[:3000])
    if pairs:
        print("example:", pairs[0][2], "->", pairs[0][3], file=sys.stderr)


if __name__ == "__main__":
    main()
