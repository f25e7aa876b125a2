# Sourced by the other scripts: where Capstan keeps its caches.
# Cargo's target dir lives outside the clone so that builds are reused.
export CAPSTAN_HOME="${CAPSTAN_HOME:-$HOME/.cache/capstan}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CAPSTAN_HOME/target}"
export CAPSTAN_ENCODER="${CAPSTAN_ENCODER:-$CAPSTAN_HOME/models/all-MiniLM-L6-v2}"
export CAPSTAN_BIN="${CAPSTAN_BIN:-$CARGO_TARGET_DIR/release/capstan}"
export CAPSTAN_LLM="${CAPSTAN_LLM:-$CAPSTAN_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
# Real PDF, DOCX and EPUB files from Debian packages (scripts/fetch-documents.sh).
export CAPSTAN_DOCUMENTS="${CAPSTAN_DOCUMENTS:-$CAPSTAN_HOME/documents}"
