#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz, libFuzzer, address sanitizer) of the PDF, DOCX and EPUB
# readers and the follow-up rewriting, for SECONDS each (default 300), seeded with the real
# documents of scripts/fetch-documents.sh. Needs a nightly toolchain and cargo-fuzz
# (`cargo install cargo-fuzz`); not part of CI (a bounded mutation run is, see
# docs/RELIABILITY.md). Crashes are written under fuzz/artifacts/TARGET/.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
seconds=${1:-300}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(documents conversation)
export CARGO_TARGET_DIR="$CAPSTAN_HOME/target-fuzz"
corpus="$CAPSTAN_HOME/fuzz-corpus"
mkdir -p "$corpus/documents" "$corpus/conversation"
docs="$CAPSTAN_HOME/documents"
if [ -d "$docs" ]; then
  # The first byte picks the format (fuzz/fuzz_targets/documents.rs): 0 PDF, 1 DOCX, 2 EPUB.
  # Files of at most 400 KB: the sanitizers make a parse 10-20 times slower, and a 1 MB manual
  # then passes libFuzzer's 20 s per input.
  for f in "$docs"/pdf/*.pdf "$docs"/books/*.docx "$docs"/books/*.epub; do
    [ -f "$f" ] && [ "$(stat -c %s "$f")" -le 409600 ] || continue
    case "$f" in
      *.pdf) pick='\x00' ;; *.docx) pick='\x01' ;; *) pick='\x02' ;;
    esac
    out="$corpus/documents/$(basename "$f")"
    [ -f "$out" ] || { printf "$pick"; cat "$f"; } >"$out"
  done
fi
printf 'Who is Ekmarud Brekes?\0Where was İ her— born? ẞ' >"$corpus/conversation/seed-1"
printf 'Tell me about Kivrun.\0It is a town.\0What is its population?' >"$corpus/conversation/seed-2"
cargo +nightly fuzz build -O --fuzz-dir fuzz
bin="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release"
mkdir -p fuzz/artifacts
for t in "${targets[@]}"; do
  echo "fuzz: $t for ${seconds} s" >&2
  mkdir -p "fuzz/artifacts/$t"
  "$bin/$t" "$corpus/$t" -artifact_prefix="fuzz/artifacts/$t/" -max_total_time="$seconds" \
    -timeout=20 -rss_limit_mb=4096 -max_len=4194304 -print_final_stats=1
done
