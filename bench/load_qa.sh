#!/usr/bin/env bash
# Load test of POST /v1/qa (extractive reader) with wrk: CONNECTIONS concurrent
# clients for DURATION, questions rotating from QUESTIONS (a JSONL of
# {"question": ...} or BEIR queries {"text": ...}). Prints wrk's summary, the
# server's peak RSS and the non-2xx count.
# Usage: [READER=extractive] bench/load_qa.sh INDEX QUESTIONS [CONNECTIONS=64] [DURATION=60s]
#   (READER unset: the server's default reader, the Llama reader where a model is at hand)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
index=$1; questions=$2; conns=${3:-64}; duration=${4:-60s}
port=${PORT:-18080}
qfile=$(mktemp)
python3 - "$questions" > "$qfile" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.strip():
        d = json.loads(line)
        print(d.get("question") or d.get("text"))
PY
"$CAPSTAN_BIN" serve --index "$index" --addr "127.0.0.1:$port" --queue 1024 > /tmp/capstan-load-server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; rm -f "$qfile"' EXIT
healthy=
for _ in $(seq 1 1200); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then healthy=1; break; fi
  sleep 0.1
done
[ -n "$healthy" ] || { echo "server not healthy after 120 s:"; cat /tmp/capstan-load-server.log; exit 1; }
QUESTIONS_FILE="$qfile" wrk -t2 -c"$conns" -d"$duration" --latency -s bench/wrk_qa.lua "http://127.0.0.1:$port" | tee /tmp/capstan-load-wrk.txt
echo "server peak RSS: $(grep VmHWM /proc/$server/status)"
echo "non-2xx responses counted by the server:"
curl -s "http://127.0.0.1:$port/metrics" | grep 'capstan_http_requests_total{route="/v1/qa"' || true
