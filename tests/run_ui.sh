#!/usr/bin/env bash
# The web page in headless Chromium (tests/ui, node --test + playwright-core
# with Debian's /usr/bin/chromium) against `capstan serve` with an API key
# over a small generated index. Screenshots go to $SCREENSHOT_DIR
# (default: $CARGO_TARGET_DIR/ui-screenshots).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d tests/ui/node_modules/playwright-core ]; then
  (cd tests/ui && npm ci --no-audit --no-fund)
fi
SERVE_ARGS=(--api-key ui-test-key)
source tests/serve_fixture.sh
start_server
export CAPSTAN_URL CAPSTAN_QUESTIONS
export CAPSTAN_KEY=ui-test-key
export SCREENSHOT_DIR="${SCREENSHOT_DIR:-$CARGO_TARGET_DIR/ui-screenshots}"
(cd tests/ui && node --test --test-reporter=spec)
echo "screenshots: $SCREENSHOT_DIR"
