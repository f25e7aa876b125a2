#!/usr/bin/env bash
# The kernels' GPU test binary one test at a time, with each test's seconds on stderr: the
# 2026-11-29 H200 run spent 126 s of the check's 540 in one call of six tests, and libtest's
# stable output does not say which took them. FILTERS (libtest's: a name to match, --skip NAME)
# choose the tests; each then runs alone (--exact, --nocapture). Exits non-zero if any failed.
#
#   scripts/gpu-tests.sh TEST_BINARY [FILTERS...]
set -uo pipefail
bin=$1
shift
names=$("$bin" --list --format terse "$@" 2>/dev/null | sed -n 's/: test$//p')
if [ -z "$names" ]; then
  echo "gpu-tests: no test of $bin matches: $*" >&2
  exit 1
fi
failed=0
pid=
# gpu-check's time limit stops this script: the test running then stops with it.
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; exit 143' TERM INT
for name in $names; do
  start=$(date +%s%N)
  "$bin" --exact "$name" --nocapture --test-threads 1 &
  pid=$!
  wait "$pid"
  rc=$?
  pid=
  ms=$((($(date +%s%N) - start) / 1000000))
  echo "gpu-tests: $name: rc $rc, $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s" >&2
  [ $rc = 0 ] || failed=1
done
exit $failed
