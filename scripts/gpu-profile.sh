#!/usr/bin/env bash
# Where the time of a GPU benchmark goes: the kernels of what it measures (capstan-bench's
# timed regions: CAPSTAN_PROFILE_TIMED with Nsight Compute's --profile-from-start off), each
# kernel's duration (one metric; clocks left as they are), summarized by kernel
# (bench/ncu_summary.py) as JSON on stdout; ncu's CSV is kept. scripts/gpu-check.sh runs it for
# the fused decoding step, the model's prefill and SmolLM2's step, so that a goal the check
# misses comes with where its time went. Without ncu (this machine; a gVisor GPU machine, where
# ncu cannot read the counters) it says so and succeeds.
#
#   scripts/gpu-profile.sh CSV LAUNCHES -- COMMAND...
set -uo pipefail
csv=$1 launches=$2; shift 2
[ "${1:-}" = "--" ] && shift
PY=${PYTHON:-python3}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -z "$ncu" ]; then
  # The CPU dry run (CAPSTAN_PROFILE_DRY) still runs the command, so its arguments are checked.
  if [ -n "${CAPSTAN_PROFILE_DRY:-}" ]; then
    CAPSTAN_PROFILE_TIMED=1 "$@" >/dev/null || exit $?
  fi
  echo '{"skipped": "no ncu on this machine"}'
  exit 0
fi
# CAPSTAN_PROFILE_NCU_ARGS: what ncu reads instead of each kernel's duration alone (a kernel's
# whole section set, say: `--set full -k regex:NAME`), for the kernel a goal waits on.
# shellcheck disable=SC2086
CAPSTAN_PROFILE_TIMED=1 "$ncu" --clock-control none --profile-from-start off \
  ${CAPSTAN_PROFILE_NCU_ARGS:---metrics gpu__time_duration.sum} --csv --print-units base \
  --launch-count "$launches" --log-file "$csv" "$@" >/dev/null
rc=$?
"$PY" "$(dirname "$0")/../bench/ncu_summary.py" "$csv" || exit 1
exit $rc
