#!/usr/bin/env python3
"""`capstan index` against sentence-transformers' encoding alone, alternating, several rounds.

bench/encoder_precision.py measures each side once. On a VM whose speed drifts, one pair can
mislead, so this runs ROUNDS pairs in turn, each pair back to back: the peer encodes the
passages `capstan index` cuts the set into (fp32, batch 32, 2 threads, 256 tokens), then
`capstan index SET/corpus.jsonl --encoder-dtype DTYPE --no-sentence-vectors` builds the whole
index (reading, chunking, BM25, encoding, HNSW, store, publish) on 2 threads. Each line reports
the index build's speed against the peer run just before it (the issue's ratio).

It reuses bench/encoder_precision.py's functions and the passages file that script wrote
(OUT/SET-passages.jsonl), so run that once first:

    python3 bench/encoder_precision.py --data ~/.cache/capstan/bench/real --out OUT --sets rustdoc
    python3 bench/index_vs_st.py --data ~/.cache/capstan/bench/real --out OUT --set rustdoc --rounds 3
"""

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_precision as ep  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="the folder of bench/real_sets.py")
    ap.add_argument("--out", required=True, help="bench/encoder_precision.py's --out")
    ap.add_argument("--set", default="rustdoc")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--encoder-dtype", default="int8")
    ap.add_argument("--encoder", default=ep.default_encoder())
    ap.add_argument("--capstan", default=str(ep.target_dir() / "release/capstan"))
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(ep.THREADS)
    model = SentenceTransformer(args.encoder, device="cpu")
    model.max_seq_length = 256
    out = Path(args.out).expanduser()
    passages = out / f"{args.set}-passages.jsonl"
    if not passages.exists():
        sys.exit(f"{passages} is missing: run bench/encoder_precision.py --out {out} first")
    corpus = Path(args.data).expanduser() / args.set / "corpus.jsonl"
    index = out / f"alternating-{args.encoder_dtype}"
    ratios = []
    for r in range(args.rounds):
        n, peer_s = ep.st_encode(model, passages)
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} round {r + 1}: peer {n} passages in {peer_s:.1f} s ({n / peer_s:.1f}/s)", flush=True)
        shutil.rmtree(index, ignore_errors=True)
        index_s = ep.timed([
            args.capstan, "index", corpus, "--out", index, "--encoder", args.encoder,
            "--encoder-dtype", args.encoder_dtype, "--no-sentence-vectors", "-q",
        ])
        ratios.append(peer_s / index_s)
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} round {r + 1}: capstan index ({args.encoder_dtype}) {index_s:.1f} s: "
              f"{ratios[-1]:.2f}x the peer just before", flush=True)
    ratios.sort()
    print(f"median {ratios[len(ratios) // 2]:.2f}x over {len(ratios)} rounds")


if __name__ == "__main__":
    main()
