#!/usr/bin/env bash
# The official openai Python client against `capstan serve` over a small
# generated index (tests/openai_client.py); stops the server whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
SERVE_ARGS=(--api-key openai-client-test-key)
source tests/serve_fixture.sh
start_server
python3 tests/openai_client.py "$CAPSTAN_URL/v1" "$CAPSTAN_QUESTIONS" openai-client-test-key
