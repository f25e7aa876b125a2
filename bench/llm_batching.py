#!/usr/bin/env python3
"""Continuous batching vs one sequence at a time, behind `capstan serve`.

Starts the server twice on the same index and model — `--max-batch 64` (continuous batching)
and `--max-batch 1` (one sequence at a time; the other requests wait in the scheduler's queue)
— and at each client count runs that many concurrent clients, each asking its share of the
questions through `POST /v1/qa` with `"stream": true` (reader llama, k = 5 or --k, at most 64 new
tokens, greedy). Per level it reports aggregate generated tokens/s (tokens counted by the
server's `usage.generated_tokens`, over the level's wall time), p50/p99 time to first token
(request sent -> first `token` event, or the answer itself for ranked span answers, which
arrive whole) and p50/p99 inter-token latency (gaps between a
request's consecutive `token` events), and the batched/one-at-a-time ratios.

Usage:
  python3 bench/llm_batching.py --index DIR --questions questions.jsonl \
      [--clients 1,4,16,64] [--requests 64] [--answer span|copy|free] [--out results.json]
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    i = min(len(values) - 1, max(0, int(round(q / 100 * len(values) + 0.5)) - 1))
    return values[i]


def ask(port, question, max_tokens, k=5, answer="span"):
    """One streamed QA request: (ttft_s, [gaps_s], generated_tokens, ok)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps(
        {"question": question, "reader": "llama", "k": k, "stream": True, "max_tokens": max_tokens,
         "answer": answer}
    )
    t0 = time.perf_counter()
    conn.request("POST", "/v1/qa", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        resp.read()
        conn.close()
        return None, [], 0, False
    ttft, last, gaps, generated, event = None, None, [], 0, None
    for raw in resp:
        line = raw.decode().rstrip("\n")
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            now = time.perf_counter()
            if event == "token":
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
            elif event == "answer":
                generated = json.loads(line[5:])["usage"]["generated_tokens"]
                break
            elif event == "error":
                conn.close()
                return ttft, gaps, 0, False
    conn.close()
    return ttft, gaps, generated, True


def level(port, questions, clients, requests, max_tokens, k, answer):
    per_client = max(1, requests // clients)
    results, lock = [], threading.Lock()

    def client(c):
        for r in range(per_client):
            q = questions[(c * per_client + r) % len(questions)]
            out = ask(port, q, max_tokens, k, answer)
            with lock:
                results.append(out)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in results if r[3]]
    tokens = sum(r[2] for r in ok)
    ttfts = [r[0] for r in ok if r[0] is not None]
    gaps = [g for r in ok for g in r[1]]
    return {
        "clients": clients,
        "requests": len(results),
        "failed": len(results) - len(ok),
        "generated_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 2),
        "requests_per_s": round(len(ok) / wall, 2),
        "ttft_p50_ms": round(1000 * pct(ttfts, 50), 1),
        "ttft_p99_ms": round(1000 * pct(ttfts, 99), 1),
        "itl_p50_ms": round(1000 * pct(gaps, 50), 1),
        "itl_p99_ms": round(1000 * pct(gaps, 99), 1),
    }


def serve(binary, index, port, max_batch, model, step_tokens):
    cmd = [
        binary, "serve", "--index", index, "--addr", f"127.0.0.1:{port}",
        "--reader", "llama", "--max-new-tokens", "64", "--max-batch", str(max_batch),
        "--max-generations", "64", "--queue", "1024", "--step-tokens", str(step_tokens),
    ]
    if model:
        cmd += ["--llama-model", model]
    log = open(f"/tmp/capstan-batching-{max_batch}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(1200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            sys.exit(f"server exited: see /tmp/capstan-batching-{max_batch}.log")
        time.sleep(0.1)
    proc.kill()
    sys.exit("server not healthy after 120 s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--model")
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--requests", type=int, default=64, help="requests per level (at least one per client)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=5, help="passages per question")
    ap.add_argument("--answer", default="span",
                    help="answer mode: span (ranked, the default), copy (generated, constrained "
                         "to the passages), free")
    ap.add_argument("--step-tokens", type=int, default=512, help="the servers' --step-tokens")
    ap.add_argument("--port", type=int, default=18090)
    ap.add_argument("--out")
    a = ap.parse_args()
    binary = os.environ.get("CAPSTAN_BIN", "capstan")
    questions = [json.loads(l)["question"] for l in open(a.questions) if l.strip()]
    clients = [int(c) for c in a.clients.split(",")]
    report = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "k": a.k, "step_tokens": a.step_tokens, "levels": {}}
    for name, max_batch in [("batched", 64), ("one_at_a_time", 1)]:
        proc = serve(binary, a.index, a.port, max_batch, a.model, a.step_tokens)
        try:
            ask(a.port, questions[0], 4)  # warm-up
            rows = []
            for c in clients:
                row = level(a.port, questions, c, max(a.requests, c), a.max_tokens, a.k, a.answer)
                print(name, json.dumps(row), flush=True)
                rows.append(row)
            report["levels"][name] = rows
        finally:
            proc.terminate()
            proc.wait()
    # Ranked span answers (the default) generate no tokens: the answer arrives whole, so
    # requests/s is the throughput and "TTFT" the time to the answer.
    print("\n| clients | batched req/s | one-at-a-time req/s | ratio | batched tok/s | one tok/s | "
          "TTFT p50/p99 ms (batched) | TTFT p50/p99 ms (one) | ITL p50/p99 ms (batched) | "
          "ITL p50/p99 ms (one) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b, o in zip(report["levels"]["batched"], report["levels"]["one_at_a_time"]):
        ratio = b["requests_per_s"] / o["requests_per_s"] if o["requests_per_s"] else float("nan")
        print(f"| {b['clients']} | {b['requests_per_s']} | {o['requests_per_s']} | **{ratio:.2f}x** | "
              f"{b['tokens_per_s']} | {o['tokens_per_s']} | "
              f"{b['ttft_p50_ms']}/{b['ttft_p99_ms']} | {o['ttft_p50_ms']}/{o['ttft_p99_ms']} | "
              f"{b['itl_p50_ms']}/{b['itl_p99_ms']} | {o['itl_p50_ms']}/{o['itl_p99_ms']} |")
    if a.out:
        json.dump(report, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
