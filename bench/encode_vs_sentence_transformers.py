#!/usr/bin/env python3
"""Dense encoding throughput: Capstan's encoder vs sentence-transformers, same run.

Both encode the same first N passages of a `capstan-bench prepare` folder
(`title + ". " + text`, max 256 tokens, all-MiniLM-L6-v2, 2 CPU threads);
sentence-transformers with `model.encode(batch_size=32)`. Each side is warmed
up, then they run alternately `--repeats` times and the best of each counts
(the machine is shared). The embeddings of both are compared (max abs diff).

    export CARGO_TARGET_DIR=$HOME/.cache/capstan/target
    cargo build --release -p capstan-bench
    $CARGO_TARGET_DIR/release/capstan-bench prepare \
        --html $(rustc --print sysroot)/share/doc/rust/html --out /tmp/encbench/data \
        --encoder $CAPSTAN_ENCODER --max-passages 5000 --queries 10
    python3 bench/encode_vs_sentence_transformers.py --data /tmp/encbench/data --n 1000

The Capstan embeddings for the comparison come from the ignored test
`encoder::tests::dump_embeddings` (`cargo test --release -p capstan-encoder`).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
THREADS = 2


def default_encoder():
    if os.environ.get("CAPSTAN_ENCODER"):
        return os.environ["CAPSTAN_ENCODER"]
    home = os.environ.get("CAPSTAN_HOME", os.path.expanduser("~/.cache/capstan"))
    return os.path.join(home, "models/all-MiniLM-L6-v2")


def target_dir():
    return Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/capstan/target"))


def load_texts(data, n):
    texts = []
    with open(Path(data) / "passages.jsonl") as f:
        for line in f:
            if len(texts) == n:
                break
            p = json.loads(line)
            texts.append(p["title"] + ". " + p["text"])
    return texts


def run_capstan(binary, data, encoder, n):
    env = dict(os.environ, RAYON_NUM_THREADS=str(THREADS))
    out = subprocess.run(
        [binary, "encode", "--data", data, "--encoder", encoder, "--n", str(n)],
        check=True, capture_output=True, text=True, env=env,
    ).stdout
    return json.loads(out)["passages_per_second"]


def run_st(model, texts):
    start = time.perf_counter()
    vectors = model.encode(texts, batch_size=32, convert_to_numpy=True)
    return len(texts) / (time.perf_counter() - start), vectors


def capstan_vectors(data, encoder, n):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "vectors.f32"
        env = dict(
            os.environ,
            CAPSTAN_ENCODER=encoder,
            CAPSTAN_EMBED_IN=str(Path(data) / "passages.jsonl"),
            CAPSTAN_EMBED_N=str(n),
            CAPSTAN_EMBED_OUT=str(out),
            RAYON_NUM_THREADS=str(THREADS),
        )
        subprocess.run(
            ["cargo", "test", "--release", "-q", "-p", "capstan-encoder", "--lib",
             "encoder::tests::dump_embeddings", "--", "--ignored", "--exact"],
            check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        )
        return np.fromfile(out, dtype="<f4")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="folder written by `capstan-bench prepare`")
    ap.add_argument("--encoder", default=default_encoder())
    ap.add_argument("--bench", default=str(target_dir() / "release/capstan-bench"))
    ap.add_argument("--before", help="an older capstan-bench binary to measure once as well")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    if not (Path(args.data) / "passages.jsonl").is_file():
        sys.exit(f"{args.data}/passages.jsonl is missing: run `capstan-bench prepare` first (see --help)")

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(THREADS)
    texts = load_texts(args.data, args.n)
    model = SentenceTransformer(args.encoder, device="cpu")
    model.max_seq_length = 256
    model.encode(texts[:64], batch_size=32)  # warm-up (capstan-bench warms up itself)

    capstan, st, st_vectors = [], [], None
    for r in range(args.repeats):
        capstan.append(run_capstan(args.bench, args.data, args.encoder, args.n))
        speed, st_vectors = run_st(model, texts)
        st.append(speed)
        print(f"repeat {r + 1}: capstan {capstan[-1]:.2f}/s, sentence-transformers {st[-1]:.2f}/s", file=sys.stderr)
    before = run_capstan(args.before, args.data, args.encoder, args.n) if args.before else None

    ours = capstan_vectors(args.data, args.encoder, args.n).reshape(len(texts), -1)
    diff = float(np.abs(ours - st_vectors).max())
    cos = float((ours * st_vectors).sum(1).min())
    result = {
        "passages": len(texts),
        "threads": THREADS,
        "capstan_passages_per_second": max(capstan),
        "sentence_transformers_passages_per_second": max(st),
        "ratio": max(capstan) / max(st),
        "capstan_runs": capstan,
        "sentence_transformers_runs": st,
        "max_abs_diff": diff,
        "min_cosine": cos,
        "torch": torch.__version__,
    }
    if before is not None:
        result["capstan_before_passages_per_second"] = before
    print(json.dumps(result))
    print(
        f"| {len(texts)} passages | Capstan {max(capstan):.2f}/s | sentence-transformers {max(st):.2f}/s "
        f"| ratio {max(capstan) / max(st):.2f} | max abs diff {diff:.2e} |"
    )


if __name__ == "__main__":
    main()
