# Sourced by tests/run_*.sh: builds a small generated index and starts
# `capstan serve` on a free port; the EXIT trap stops the server and removes
# the files. Sets CAPSTAN_URL, CAPSTAN_QUESTIONS, SERVE_LOG.
# Arguments to `capstan serve` go in SERVE_ARGS (an array).

source scripts/env.sh
if [ ! -x "$CAPSTAN_BIN" ]; then
  cargo build --release -p capstan
fi
FIXTURE_DIR=$(mktemp -d)
SERVER_PID=""

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap 'stop_server; rm -rf "$FIXTURE_DIR"' EXIT

"$CAPSTAN_BIN" corpus generate --out "$FIXTURE_DIR/data" --documents 40 --questions 10 --seed 11 >/dev/null
"$CAPSTAN_BIN" index "$FIXTURE_DIR/data/corpus.jsonl" --out "$FIXTURE_DIR/index" --encoder "$CAPSTAN_ENCODER" -q
CAPSTAN_QUESTIONS="$FIXTURE_DIR/data/queries.jsonl"
SERVE_LOG="$FIXTURE_DIR/serve.log"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Starts the server (retrying on another port if the chosen one was taken).
start_server() {
  local attempt port
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    "$CAPSTAN_BIN" serve --index "$FIXTURE_DIR/index" --addr "127.0.0.1:$port" "${SERVE_ARGS[@]}" >"$SERVE_LOG" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 600); do
      if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
      if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
          "http://127.0.0.1:$port/health" 2>/dev/null; then
        CAPSTAN_URL="http://127.0.0.1:$port"
        return 0
      fi
      sleep 0.2
    done
    echo "capstan serve did not start (attempt $attempt):" >&2
    cat "$SERVE_LOG" >&2
    stop_server
  done
  return 1
}
