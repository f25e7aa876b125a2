#!/usr/bin/env bash
# The main job on the embedded default: set up, generate the encyclopedia,
# index it, search it, evaluate retrieval, then serve it and ask the HTTP API
# a few questions, printing the answers of the extractive reader and of the
# generative one (SmolLM2-135M-Instruct) with their sources.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
data="$CAPSTAN_HOME/demo"
docs="${CAPSTAN_DEMO_DOCUMENTS:-1000}"
"$CAPSTAN_BIN" corpus generate --out "$data/encyclopedia" --seed 42 --documents "$docs"
"$CAPSTAN_BIN" index "$data/encyclopedia/corpus.jsonl" --out "$data/index"
question=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["question"])' "$data/encyclopedia/questions.jsonl")
echo; echo "== capstan search (hybrid): $question"
"$CAPSTAN_BIN" search "$data/index" "$question" -k 3
echo; echo "== capstan eval retrieval"
"$CAPSTAN_BIN" eval retrieval "$data/index" --dataset "$data/encyclopedia" --out "$data/eval-retrieval" --quiet

port="${CAPSTAN_DEMO_PORT:-8080}"
echo; echo "== capstan serve on 127.0.0.1:$port"
"$CAPSTAN_BIN" serve --index "$data/index" --addr "127.0.0.1:$port" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.2
done
python3 - "$data/encyclopedia/questions.jsonl" "$port" <<'PY'
import json, sys, urllib.request
questions = [json.loads(l) for l in open(sys.argv[1])][:3]
def ask(question, reader):
    req = urllib.request.Request(
        f"http://127.0.0.1:{sys.argv[2]}/v1/qa",
        data=json.dumps({"question": question, "k": 5, "reader": reader, "max_tokens": 48}).encode(),
        headers={"Content-Type": "application/json"},
    )
    return json.load(urllib.request.urlopen(req))
for q in questions:
    print(f"\nQ: {q['question']}   (gold: {', '.join(q['answers'])})")
    answers = [(r, ask(q["question"], r)) for r in ("extractive", "llama")]
    for reader, a in answers:
        rank = {p["passage_id"]: i for i, p in enumerate(a["passages"], 1)}
        if a.get("spans"):
            cited = ", ".join(f"[{rank[s['passage_id']]}] characters {s['start']}-{s['end']}" for s in a["spans"])
        else:
            cited = ", ".join(f"[{rank[c]}]" for c in a["citations"])
        said = a["answer"].lower().strip(" .")
        golds = [g.lower() for g in q["answers"]]
        right = "exact" if said in golds else "holds the gold answer" if any(g in said for g in golds) else "wrong"
        print(f"  {reader:>10}: {a['answer'] or '(no answer)'}   ({a['kind']}; {right})")
        print(f"  {'':>10}  cites {cited or 'nothing'} · {a['timings']['total_ms']:.0f} ms")
    for i, p in enumerate(answers[0][1]["passages"], 1):
        print(f"    [{i}] {p['title']} ({p['passage_id']})")
PY
echo; echo "open http://127.0.0.1:$port/ for the web page; stopping the demo server now"
