#!/usr/bin/env python3
"""The question-answering pipeline a user would put together from common parts,
for comparison with `capstan eval` on the same questions (bench/real_qa.py's
sets, or any NQ-open file with "question" and "answers").

  retrieval  bm25s 0.3 over the corpus (title + text of each document), its
             default tokenizer with English stopwords and no stemmer, its
             default BM25 parameters; top 5 documents per question.
  reader     the GGUF model Capstan serves, loaded by transformers
             (AutoModelForCausalLM / AutoTokenizer .from_pretrained(folder,
             gguf_file=name), which dequantises it to float32; needs the gguf
             package), its chat template, greedy decoding, at most 32 new
             tokens, torch with 2 threads. User message:
               Write a short answer to the question, using the documents.

               Document [1] (Title: t) text
               ...

               Question: q
             each document's text cut to its first --doc-chars characters (1,500)
             so that five fit SmolLM2's context. The first line of the reply is
             the prediction.

Metrics (SQuAD normalisation: lower case, punctuation and a/an/the dropped,
spaces collapsed; the best over the gold answers):
  em, f1            exact match and token F1 of the prediction
  contains          the normalised prediction contains a normalised gold answer
                    as whole words (normalising drops the dashes of options, so
                    a reply that echoes "output ips" counts for gold "--ips");
                    contains_verbatim: the prediction contains a gold answer as
                    it is (case-sensitive, as a whole word or option)
  answer_recall@5   a retrieved document (title + whole text) contains a gold
                    answer, normalised, as whole words (a plain substring test
                    would find "-r", normalised to "r", in every document);
                    answer_in_prompt@5: the same on the document lines the
                    model saw; answer_verbatim_in_prompt@5: a gold answer as it
                    is (case-sensitive, not part of a longer word or option)
                    in those lines
  doc_recall@5      the question's own document (doc_id) is retrieved
  latency           per question, retrieval + generation (mean, p50), and
                    questions per minute over the run; indexing and model
                    loading are timed apart.

Usage: python3 bench/qa_peer.py --corpus DIR/corpus.jsonl --questions DIR/test.jsonl
       --model ~/.cache/capstan/models/SmolLM2-135M-Instruct.Q4_1.gguf --out results.json
       [--limit N] [--k 5] [--doc-chars 1500] [--max-new-tokens 32] [--threads 2]
"""
import argparse
import collections
import json
import os
import re
import statistics
import string
import sys
import time

INSTRUCTION = "Write a short answer to the question, using the documents."


def normalize(s):
    """SQuAD's answer normalisation."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1(pred, gold):
    p, g = normalize(pred).split(), normalize(gold).split()
    common = collections.Counter(p) & collections.Counter(g)
    same = sum(common.values())
    if not p or not g:
        return float(p == g)
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def contains(text, golds):
    """A normalised gold answer occurs in the normalised text as whole words."""
    t = " " + normalize(text) + " "
    return any(g and f" {g} " in t for g in (normalize(a) for a in golds))


def verbatim(text, golds):
    """A gold answer occurs in the text as it is (case-sensitive), not inside
    a longer word or option: the stricter test for answers such as "-r",
    which normalise to one letter."""
    return any(re.search(r"(?<![\w-])" + re.escape(a) + r"(?![\w-])", text) for a in golds if a)


def load_model(path, threads):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(threads)
    folder, name = os.path.split(os.path.abspath(os.path.expanduser(path)))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if not config.tie_word_embeddings:
        # transformers 4.46.3 does not tie the output layer to the token
        # embedding when the GGUF has no output.weight (SmolLM2's has none),
        # and leaves it random; bench/requirements.txt pins 4.57.6, which
        # does. Tie it here too so that an older install still reads right.
        from gguf import GGUFReader
        if all(t.name != "output.weight" for t in GGUFReader(os.path.join(folder, name)).tensors):
            config.tie_word_embeddings = True
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, config=config).eval()
    return tok, model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--doc-chars", type=int, default=1500)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import bm25s
    import torch
    import transformers

    docs = [json.loads(l) for l in open(os.path.expanduser(args.corpus))]
    questions = [json.loads(l) for l in open(os.path.expanduser(args.questions))]
    if args.limit:
        questions = questions[:args.limit]
    full = [(d.get("title") or "") + "\n" + d["text"] for d in docs]

    t0 = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(full, stopwords="en", show_progress=False), show_progress=False)
    index_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    tok, model = load_model(args.model, args.threads)
    load_s = time.perf_counter() - t0

    rows, latencies = [], []
    run_start = time.perf_counter()
    for n, q in enumerate(questions, 1):
        t0 = time.perf_counter()
        ids, _ = retriever.retrieve(bm25s.tokenize([q["question"]], stopwords="en", show_progress=False),
                                    k=args.k, show_progress=False, n_threads=1)
        top = [int(i) for i in ids[0]]
        shown = [docs[i]["text"][:args.doc_chars] for i in top]
        lines = [f"Document [{j}] (Title: {docs[i].get('title') or ''}) {text}"
                 for j, (i, text) in enumerate(zip(top, shown), 1)]
        user = INSTRUCTION + "\n\n" + "\n".join(lines) + "\n\nQuestion: " + q["question"]
        prompt = tok.apply_chat_template([{"role": "user", "content": user}],
                                         add_generation_prompt=True, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                 max_new_tokens=args.max_new_tokens,
                                 pad_token_id=tok.eos_token_id)
        raw = tok.decode(out[0][prompt.shape[1]:], skip_special_tokens=True)
        pred = next((l.strip() for l in raw.strip().splitlines() if l.strip()), "")
        lat = time.perf_counter() - t0
        latencies.append(lat)
        golds = q["answers"]
        row = {
            "question": q["question"], "answers": golds, "doc_id": q.get("doc_id"),
            "template": q.get("template"), "prediction": pred, "raw": raw,
            "retrieved": [docs[i]["_id"] for i in top], "prompt_tokens": int(prompt.shape[1]),
            "em": float(max(normalize(pred) == normalize(g) for g in golds)),
            "f1": max(f1(pred, g) for g in golds),
            "contains": float(contains(pred, golds)),
            "contains_verbatim": float(verbatim(pred, golds)),
            "answer_in_top": float(any(contains(full[i], golds) for i in top)),
            "answer_in_prompt": float(any(contains(l, golds) for l in lines)),
            "answer_verbatim_in_prompt": float(any(verbatim(l, golds) for l in lines)),
            "doc_in_top": float(q.get("doc_id") in {docs[i]["_id"] for i in top}),
            "latency_s": round(lat, 4),
        }
        rows.append(row)
        print(f"[{n}/{len(questions)}] {lat:.1f}s em={row['em']:.0f} contains={row['contains']:.0f} "
              f"{q['question']!r} -> {pred!r} (gold {golds})", file=sys.stderr, flush=True)
    run_s = time.perf_counter() - run_start

    def mean(key):
        return round(sum(r[key] for r in rows) / len(rows), 4) if rows else 0.0

    k = args.k
    metrics = {
        "questions": len(rows), "em": mean("em"), "f1": mean("f1"), "contains": mean("contains"),
        "contains_verbatim": mean("contains_verbatim"),
        f"answer_recall@{k}": mean("answer_in_top"), f"answer_in_prompt@{k}": mean("answer_in_prompt"),
        f"answer_verbatim_in_prompt@{k}": mean("answer_verbatim_in_prompt"),
        f"doc_recall@{k}": mean("doc_in_top"),
        "latency_mean_s": round(statistics.mean(latencies), 3) if latencies else 0.0,
        "latency_p50_s": round(statistics.median(latencies), 3) if latencies else 0.0,
        "questions_per_minute": round(len(rows) / run_s * 60, 2) if run_s else 0.0,
        "mean_prompt_tokens": round(statistics.mean(r["prompt_tokens"] for r in rows), 1) if rows else 0,
        "index_s": round(index_s, 2), "model_load_s": round(load_s, 2),
    }
    result = {
        "pipeline": "bm25s top-k -> transformers GGUF reader",
        "config": {"corpus": args.corpus, "questions": args.questions, "limit": args.limit,
                   "documents": len(docs), "model": os.path.basename(args.model), "k": k,
                   "doc_chars": args.doc_chars, "max_new_tokens": args.max_new_tokens,
                   "threads": args.threads, "decoding": "greedy", "instruction": INSTRUCTION},
        "versions": {"bm25s": bm25s.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "python": sys.version.split()[0]},
        "metrics": metrics,
        "predictions": rows,
    }
    with open(os.path.expanduser(args.out), "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
    print(f"qa_peer: {len(rows)} questions, EM {metrics['em']:.3f}, F1 {metrics['f1']:.3f}, "
          f"contains {metrics['contains']:.3f} (verbatim {metrics['contains_verbatim']:.3f}), answer recall@{k} {metrics[f'answer_recall@{k}']:.3f} "
          f"(in prompt {metrics[f'answer_in_prompt@{k}']:.3f}, verbatim "
          f"{metrics[f'answer_verbatim_in_prompt@{k}']:.3f}), doc recall@{k} "
          f"{metrics[f'doc_recall@{k}']:.3f}, latency mean {metrics['latency_mean_s']:.2f}s "
          f"p50 {metrics['latency_p50_s']:.2f}s, {metrics['questions_per_minute']:.1f} questions/min")


if __name__ == "__main__":
    main()
