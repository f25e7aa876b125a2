#!/usr/bin/env bash
# The PDF crate comparison behind the choice of pdf_oxide (docs/BENCHMARKS.md,
# issue 26): lopdf, pdf-extract and pdf_oxide extract every page of the PDFs of
# scripts/fetch-documents.sh (dot.1.pdf aside: 16 files, 1,362 pages), one
# child process per file with a 20 s bound, one thread; score.py compares each
# page with pdftotext (token F1, word-pair F1, glued/split words, ligatures).
#   bench/pdf_crates/run.sh
set -euo pipefail
cd "$(dirname "$0")"
source ../../scripts/env.sh
export CARGO_TARGET_DIR="$CAPSTAN_HOME/pdf-crates-target" RAYON_NUM_THREADS=1
export PDFCMP_PDFS="$CAPSTAN_HOME/pdf-crates-pdfs" PDFCMP_OUT="$CAPSTAN_HOME/pdf-crates-out"
mkdir -p "$PDFCMP_PDFS"
find "$CAPSTAN_DOCUMENTS/pdf" -name '*.pdf' ! -name 'dot.1.pdf' -exec cp {} "$PDFCMP_PDFS/" \;
cargo build --release -q
for e in lopdf pdfextract pdfextract_pp oxide oxide_plain; do
  "$CARGO_TARGET_DIR/release/pdfcmp" run "$e" "$PDFCMP_OUT" 20 "$PDFCMP_PDFS"/*.pdf >/dev/null
done
python3 score.py lopdf pdfextract pdfextract_pp oxide oxide_plain
