#!/usr/bin/env bash
# The GPU reader's proof on a lent GPU, in one call (under 10 minutes on an H100/H200). First
# issue 39's comparisons with PyTorch on the same card: every attention pattern (causal at 8K,
# 32K and 128K; Zebra, SCCA_fixed, SelfExtend against flex_attention and CAPE's cross-attention
# against SDPA at 32K), a Llama-3-8B-shaped model's prefill (against PyTorch eager with SDPA)
# and decoding (against PyTorch under a CUDA graph; 16 sequences together against one; its
# decoding attention alone on both kernels), a GGUF model's decoding and CAPE against full
# context at 32K and 128K; then, while the budget lasts,
# issue 10's rows: CUDA parity (reader fixtures in f32 and bf16, every kernel against its CPU
# reference with outputs filled with NaN first; these run first), the encoder against the CPU
# path and sentence-transformers, the Llama-2-7B shape's decoding against transformers.
# Writes results.json and results.md (and every step's raw JSON and log) to --out.
#
#   scripts/gpu-check.sh --bundle gpu-bundle --out "$OUT"          # on the GPU machine
#   scripts/gpu-check.sh --cpu --out /tmp/gpu-check-cpu            # here: every step, tiny shapes
#   scripts/gpu-check.sh --cpu --parts gpu-bundle/parts --out /tmp/x  # here, with a bundle's data
#   scripts/gpu-check.sh --bundle B --out "$OUT" --steps kernels_cudnn,attention  # a rerun
#
# --bundle: the folder scripts/gpu-bundle.sh made (or --parts DIR: its parts, carried over
# several calls, reassembled and checked here). --cpu runs the same steps on the CPU with
# tiny shapes and this checkout's own release build (proof that the script runs; no figures).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

BUNDLE="" PARTS="" OUT="" CPU=0 PY=${PYTHON:-python3} ONLY=
# The whole check must end inside the device tool's 10 minutes a call: steps get what is left
# of this budget (seconds), and the report is rewritten after each, so a cut-off run still
# leaves results.json.
BUDGET=${CAPSTAN_GPU_CHECK_SECONDS:-540}
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE=$2; shift 2 ;;
    --parts) PARTS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --cpu) CPU=1; shift ;;
    --python) PY=$2; shift 2 ;;
    --steps) ONLY=",$2,"; shift 2 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || { echo "gpu-check: --out DIR is required" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu-check.log"
: >"$LOG"
say() { echo "gpu-check: $*" | tee -a "$LOG" >&2; }

if [ -n "$PARTS" ]; then
  BUNDLE="${TMPDIR:-/tmp}/capstan-gpu-bundle"
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE"
  say "reassembling $(ls "$PARTS"/part-* | wc -l) parts from $PARTS"
  (cd "$PARTS" && sha256sum -c SHA256SUMS --quiet) || { say "a part is missing or damaged"; exit 1; }
  cat "$PARTS"/part-* | tar -xz -C "$BUNDLE" --strip-components=1 || exit 1
fi

if [ "$CPU" = 1 ]; then
  source scripts/env.sh
  BENCH="$CARGO_TARGET_DIR/release/capstan-bench"
  # Built every time (a no-op when fresh): a stale binary would check an older bench.
  cargo build --release -p capstan-bench >>"$LOG" 2>&1 || { say "building capstan-bench failed"; exit 1; }
  KTEST=""
  ENCODER="$CAPSTAN_ENCODER"
  PASSAGES="$OUT/passages.jsonl"
  GGUF="$CAPSTAN_LLM"
  if [ -n "$BUNDLE" ]; then
    # A bundle's data (its f16 encoder, passages, GGUF) with this checkout's CPU binaries:
    # checks what will travel without a GPU.
    BUNDLE=$(cd "$BUNDLE" && pwd)
    ENCODER="$BUNDLE/encoder-f16"
    [ -f "$BUNDLE/passages.jsonl" ] && head -200 "$BUNDLE/passages.jsonl" >"$PASSAGES"
    GGUF=$(ls "$BUNDLE"/*.gguf 2>/dev/null | head -1)
  else
    python3 scripts/gpu-passages.py --n 200 >"$PASSAGES"
  fi
  DEV=cpu DT=f32 ENC_DT=f32
  DECODE_SHAPES="llama2-tiny llama3-tiny" CONTEXTS=64,1024 STEPS=16
  PREFILL="--contexts 256,1024 --heads 4 --kv-heads 2 --dim 32"
  PREFILL_MODEL="--shape llama3-tiny" PREFILL_MODEL_CONTEXTS="1024 2048"
  SDPA="--contexts 256,1024 --heads 4 --kv-heads 2 --dim 32"
  CAPE="--shape cepe-tiny --decoder-tokens 1024 --chunk 64"
  PASSAGE_CACHE="--shape cepe-tiny --requests 12"
  CAPE_TOTALS="4096 8192"
  CAPE_FULL_MAX=4096
  ATTN="--cases causal:256,causal:1024,zebra:1024,scca:1024,selfextend:1024,cross:1024 --heads 4"
  ATTN="$ATTN --kv-heads 2 --dim 32 --window 64 --chunk 256 --neighbor 64 --cross-queries 128"
  ATTN_LONG="--cases causal:2048 --heads 4 --kv-heads 2 --dim 32"
  SHAPE=llama3-tiny BATCH_CONTEXTS=64,1024 GGUF_BATCH="--contexts 1024 --steps 2"
  DECODE_ATTN="--cases 1x1024,4x300 --heads 8 --kv-heads 2 --dim 64"
  ENC_N=200 TIMEOUT=900 BUDGET=${CAPSTAN_GPU_CHECK_SECONDS:-1800}
  [ -x "${PYTHON:-}" ] || PY="$CAPSTAN_HOME/bench-venv/bin/python3"
else
  [ -n "$BUNDLE" ] && [ -d "$BUNDLE" ] || { say "--bundle DIR (or --parts DIR) is required"; exit 2; }
  BUNDLE=$(cd "$BUNDLE" && pwd)
  BENCH="$BUNDLE/bin/capstan-bench"
  KTEST="$BUNDLE/bin/kernels-gpu-test"
  ENCODER="$BUNDLE/encoder-f16"
  PASSAGES="$BUNDLE/passages.jsonl"
  GGUF=$(ls "$BUNDLE"/*.gguf 2>/dev/null | head -1)
  DEV=cuda DT=bf16 ENC_DT=f16
  DECODE_SHAPES="llama2-7b llama3-8b" CONTEXTS=1024,32768 STEPS=64
  PREFILL="--contexts 8192,32768 --heads 32 --kv-heads 8 --dim 128"
  PREFILL_MODEL="--shape llama3-8b" PREFILL_MODEL_CONTEXTS="8192 32768"
  SDPA="--contexts 8192,32768 --heads 32 --kv-heads 8 --dim 128"
  CAPE="--shape cepe-7b --decoder-tokens 4096 --chunk 256"
  PASSAGE_CACHE="--shape cepe-7b --requests 48"
  CAPE_TOTALS="32768 131072"
  # Full context at 128K on an H200 (141 GB): 13.5 GB of weights and 64 GB of KV cache fit.
  CAPE_FULL_MAX=131072
  # Issue 39's cases: the defaults of both sides (causal at 8K, 32K and 128K; Zebra window 512,
  # SCCA_fixed chunks 2,048, SelfExtend neighbours 512 and cross-attention of 4,096 queries,
  # at 32K; 32 query heads, 8 KV heads, head dim 128).
  ATTN="--cases causal:8192,causal:32768,zebra:32768,scca:32768,selfextend:32768,cross:32768"
  ATTN_LONG="--cases causal:131072"
  SHAPE=llama3-8b BATCH_CONTEXTS=1024 GGUF_BATCH="--contexts 1024 --steps 64"
  # Decoding attention alone, Llama 3's heads: one sequence at 32K and 128K, 16 at 8K.
  DECODE_ATTN="--cases 1x32768,1x131072,16x8192"
  ENC_N=5000 TIMEOUT=180
  # The CUDA 13 libraries (cuBLAS, cuRAND, NVRTC, runtime) of the machine's PyTorch wheels and
  # toolkit; the driver's libcuda is on the loader's path already.
  site=$("$PY" -c 'import nvidia, os; print(" ".join(nvidia.__path__))' 2>/dev/null || true)
  for d in $site; do
    for lib in "$d"/*/lib; do [ -d "$lib" ] && LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"; done
  done
  for lib in /usr/local/cuda/lib64 /usr/local/nvidia/lib64; do
    [ -d "$lib" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$lib"
  done
  export LD_LIBRARY_PATH
  nvidia-smi -L >"$OUT/device.txt" 2>/dev/null || echo "unknown GPU (no nvidia-smi)" >"$OUT/device.txt"
fi
# Outputs filled with NaN first (an element a kernel fails to write shows) in the parity steps
# alone: a benchmark times the kernels, not the fill.
POISON="CAPSTAN_KERNELS_POISON=1"
# The CPU dry run runs the profiles' commands without a profiler (scripts/gpu-profile.sh).
[ "$CPU" = 1 ] && export CAPSTAN_PROFILE_DRY=1
W="$OUT/raw"
mkdir -p "$W"
say "device ${DEV}; bundle ${BUNDLE:-(this checkout)}; raw results in $W"

report() {
  "$PY" bench/gpu_report.py --raw "$W" --device-file "$OUT/device.txt" --cpu "$CPU" --out "$OUT" \
    2>>"$LOG" || say "the report failed (see $LOG)"
}

# step NAME COMMAND...: runs under a time limit (its own, or what is left of the budget),
# stdout to raw/NAME.json, stderr to raw/NAME.log; a failed step is recorded and the others
# still run; a step with under 20 s of budget left is skipped and recorded as such.
step() {
  local name=$1; shift
  # --steps a,b,...: only those (a second call re-running what failed or was cut).
  if [ -n "$ONLY" ] && [[ "$ONLY" != *",$name,"* ]]; then
    return
  fi
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 20 ]; then
    say "step $name skipped: the time budget is spent"
    echo '{"rc": "skipped: time budget spent", "seconds": 0}' >"$W/$name.status"
    return
  fi
  local limit=$((left < TIMEOUT ? left : TIMEOUT))
  say "step $name (limit ${limit} s)"
  local start=$SECONDS
  timeout "$limit" "$@" >"$W/$name.json" 2>>"$W/$name.log"
  local rc=$?
  echo "{\"rc\": $rc, \"seconds\": $((SECONDS - start))}" >"$W/$name.status"
  [ $rc = 0 ] || say "step $name failed (exit $rc; log $W/$name.log)"
  report
}

# Issue 39's steps first (the GPU reader against PyTorch on the same card), then issue 10's
# remaining rows while the budget lasts. On the GPU, Capstan's attention runs on cuDNN's fused
# attention and the tensor-core kernel (the default since 2026-11-30; CAPSTAN_ATTENTION_KERNEL=
# cudnn says so) once their parity steps have run; the baselines of the CUDA-core kernel and
# the cuBLAS products say CAPSTAN_ATTENTION_KERNEL=cuda-cores (CORES).
KERNEL=""
CORES="CAPSTAN_ATTENTION_KERNEL=cuda-cores"
if [ -n "$KTEST" ]; then
  # One test at a time, each one's seconds in the step's log (scripts/gpu-tests.sh).
  step kernels env $POISON CAPSTAN_REQUIRE_GPU=1 scripts/gpu-tests.sh "$KTEST" --skip tensor_core \
    --skip cudnn
  step kernels_mma env $POISON CAPSTAN_REQUIRE_GPU=1 scripts/gpu-tests.sh "$KTEST" tensor_core
  # cuDNN's fused attention (loaded from the PyTorch wheel's nvidia/cudnn/lib or the system's),
  # with its API log kept for the first failing case.
  step kernels_cudnn env $POISON CAPSTAN_REQUIRE_GPU=1 CAPSTAN_REQUIRE_CUDNN=1 scripts/gpu-tests.sh \
    "$KTEST" cudnn
  if [ -f "$W/kernels_cudnn.status" ] && ! grep -q '"rc": 0' "$W/kernels_cudnn.status"; then
    step cudnn_log env $POISON CAPSTAN_REQUIRE_GPU=1 CAPSTAN_REQUIRE_CUDNN=1 CUDNN_LOGLEVEL_DBG=3 \
      CUDNN_LOGDEST_DBG="$W/cudnn-api.log" "$KTEST" cudnn --nocapture --test-threads 1
    "$PY" bench/gpu_peers.py cudnn-log --out "$W/torch-cudnn-api.log" >>"$LOG" 2>&1 || true
  fi
  # The attention kernel of the steps below: cuDNN where its graph expresses the call, the
  # tensor-core kernel for the rest (its own fallback for shapes cuDNN refuses).
  KERNEL="CAPSTAN_ATTENTION_KERNEL=cudnn"
else
  # No GPU: the kernels' CPU-reference suite stands in (the GPU suite needs a device).
  step kernels env $POISON cargo test --release -p capstan-kernels --quiet
fi
step parity env $POISON "$BENCH" gpu parity --fixtures reader/tests/fixtures --device "$DEV"
# shellcheck disable=SC2086
step attention env $KERNEL "$BENCH" gpu attention $ATTN --device "$DEV" --dtype "$DT"
# shellcheck disable=SC2086
step attention_peer "$PY" bench/gpu_peers.py attention $ATTN --device "$DEV" --dtype "$DT"
# Causal attention at 128K, a step of its own: a slow kernel there must not cost the others.
# shellcheck disable=SC2086
step attention_long env $KERNEL "$BENCH" gpu attention $ATTN_LONG --device "$DEV" --dtype "$DT"
# shellcheck disable=SC2086
step attention_long_peer "$PY" bench/gpu_peers.py attention $ATTN_LONG --device "$DEV" --dtype "$DT"
step "decode_$SHAPE" env $CORES "$BENCH" gpu decode --shape "$SHAPE" --contexts "$CONTEXTS" --steps "$STEPS" \
  --full-attention matmul --device "$DEV" --dtype "$DT"
# The decoding kernel (attention_decode.cu, keys split into ranges) in place of cuBLAS products,
# and 16 sequences packed (their rows in one launch): both come with the new kernels' choice.
step "kernel_decode_$SHAPE" env $KERNEL "$BENCH" gpu decode --shape "$SHAPE" --contexts "$CONTEXTS" \
  --steps "$STEPS" --full-attention kernel --device "$DEV" --dtype "$DT"
step "graph_peer_$SHAPE" "$PY" bench/gpu_peers.py decode-graph --shape "$SHAPE" --contexts "$CONTEXTS" \
  --steps "$STEPS" --device "$DEV" --dtype "$DT"
# The fused decoding step (decode_step.cu over static buffers), replayed as a CUDA graph and
# launched eagerly, each first checked against the layers on the same cache.
step "fused_decode_$SHAPE" env $KERNEL "$BENCH" gpu decode --shape "$SHAPE" --contexts "$CONTEXTS" \
  --steps "$STEPS" --full-attention step,step-eager --device "$DEV" --dtype "$DT"
# The same with decoding attention's key ranges of 64 or more (CAPSTAN_DECODE_SPLIT_KEYS; the
# default 256): more blocks at short contexts, where the 2026-11-29 run found attention taking
# 15% of a 1K token on 64 blocks. The default follows this measurement.
step "fused_decode_split64_$SHAPE" env $KERNEL CAPSTAN_DECODE_SPLIT_KEYS=64 "$BENCH" gpu decode \
  --shape "$SHAPE" --contexts "$CONTEXTS" --steps "$STEPS" --full-attention step --device "$DEV" \
  --dtype "$DT"
# ... and with 4 keys a slot in the grouped decoding kernel (CAPSTAN_DECODE_GQA_KEYS; default 2):
# more loads in flight an iteration, where the 2026-11-29 run found the kernel bound by its loop.
step "fused_decode_keys4_$SHAPE" env $KERNEL CAPSTAN_DECODE_GQA_KEYS=4 "$BENCH" gpu decode \
  --shape "$SHAPE" --contexts "$CONTEXTS" --steps "$STEPS" --full-attention step --device "$DEV" \
  --dtype "$DT"
# ... and one sequence's paired products walked one row after the other (CAPSTAN_STEP_PAIRED=0,
# as on the 2026-11-30 run: the pairing reads the input once for both rows, with fewer warps).
step "fused_decode_unpaired_$SHAPE" env $KERNEL CAPSTAN_STEP_PAIRED=0 "$BENCH" gpu decode \
  --shape "$SHAPE" --contexts "$CONTEXTS" --steps "$STEPS" --full-attention step --device "$DEV" \
  --dtype "$DT"
# ... and decoding attention on tensor cores (CAPSTAN_DECODE_ATTENTION=mma: attention_decode_mma,
# 16 keys a warp's tile as mma.sync): the grouped kernel issued ~190 instructions a key row at
# 0.94 TB/s on the 2026-11-30 run. Opt-in until this measures it.
step "fused_decode_mma_$SHAPE" env $KERNEL CAPSTAN_DECODE_ATTENTION=mma "$BENCH" gpu decode \
  --shape "$SHAPE" --contexts "$CONTEXTS" --steps "$STEPS" --full-attention step --device "$DEV" \
  --dtype "$DT"
step "batch16_$SHAPE" env $KERNEL "$BENCH" gpu decode --shape "$SHAPE" --contexts "$BATCH_CONTEXTS" --batch 16 \
  --steps "$STEPS" --device "$DEV" --dtype "$DT"
# The same 16 sequences through the fused step (one launch sequence, each weight row read once
# for all of them), checked against each sequence alone through the layers.
step "fused_batch16_$SHAPE" env $KERNEL "$BENCH" gpu decode --shape "$SHAPE" --contexts "$BATCH_CONTEXTS" \
  --batch 16 --full-attention step --steps "$STEPS" --device "$DEV" --dtype "$DT"
# ... with decoding attention on tensor cores.
step "fused_batch16_mma_$SHAPE" env $KERNEL CAPSTAN_DECODE_ATTENTION=mma "$BENCH" gpu decode \
  --shape "$SHAPE" --contexts "$BATCH_CONTEXTS" --batch 16 --full-attention step --steps "$STEPS" \
  --device "$DEV" --dtype "$DT"
# Decoding attention alone on both kernels (per query head; grouped, the default): the choice
# by measurement.
# shellcheck disable=SC2086
step decoding_attention "$BENCH" gpu decode-attention $DECODE_ATTN --device "$DEV" --dtype "$DT"
# shellcheck disable=SC2086
step decoding_attention_keys4 env CAPSTAN_DECODE_GQA_KEYS=4 "$BENCH" gpu decode-attention $DECODE_ATTN \
  --device "$DEV" --dtype "$DT"
if [ -n "$GGUF" ] && [ -f "$GGUF" ]; then
  step gguf "$BENCH" gpu gguf --model "$GGUF" --new-tokens 128 --ways layers,step,step-eager \
    --device "$DEV"
  # The same step with decoding attention's ranges of 32 keys or more: SmolLM2's 3 key heads
  # give the grouped kernel 3 blocks a range, one range below 256 keys (the default's least):
  # ~9 us a layer on the 2026-11-30 run, a fifth of the token.
  step gguf_split32 env CAPSTAN_DECODE_SPLIT_KEYS=32 "$BENCH" gpu gguf --model "$GGUF" \
    --new-tokens 128 --ways step --device "$DEV"
else
  say "no GGUF model in the bundle: step gguf not run"
fi
# shellcheck disable=SC2086
step prefill_model_peer "$PY" bench/gpu_peers.py prefill-model --shape "$SHAPE" \
  --contexts "$(echo $PREFILL_MODEL_CONTEXTS | tr ' ' ,)" --device "$DEV" --dtype "$DT"
for n in $PREFILL_MODEL_CONTEXTS; do
  # shellcheck disable=SC2086
  step "${KERNEL:+tc_}prefill_model_$n" env $KERNEL "$BENCH" gpu prefill --model-only $PREFILL_MODEL \
    --model-contexts "$n" --device "$DEV" --dtype "$DT"
done
# CAPE against full context, the largest last.
for total in $CAPE_TOTALS; do
  # shellcheck disable=SC2086
  step "cape_$total" env $KERNEL "$BENCH" gpu cape $CAPE --totals "$total" --full-max "$CAPE_FULL_MAX" \
    --device "$DEV" --dtype "$DT"
done
# Where the time goes, for the goals a run may miss (issue 39: "missed with the profile"): each
# kernel's duration under Nsight Compute over what the benchmark times (scripts/gpu-profile.sh;
# reported as not run where ncu is not): decoding tokens of the fused step at 1K and at the
# longest context (32K: where the keys and values weigh a quarter of a step's bytes), the first
# layers' kernels of the model's 8K prefill, SmolLM2's fused step.
step "profile_decode_$SHAPE" env $KERNEL scripts/gpu-profile.sh "$W/profile_decode.csv" 600 -- \
  "$BENCH" gpu decode --shape "$SHAPE" --contexts "$BATCH_CONTEXTS" --steps 2 --full-attention step \
  --device "$DEV" --dtype "$DT"
step "profile_decode_long_$SHAPE" env $KERNEL scripts/gpu-profile.sh "$W/profile_decode_long.csv" 400 -- \
  "$BENCH" gpu decode --shape "$SHAPE" --contexts "${CONTEXTS##*,}" --steps 1 --full-attention step \
  --device "$DEV" --dtype "$DT"
# Decoding attention at the longest context, every section of Nsight Compute for two launches
# (its occupancy, stalls and memory throughput): the 2026-11-29 run timed the grouped kernel at
# ~150 us a layer at 32K, under a third of the bandwidth its bytes need, and ~33 us at 1K.
step "profile_decode_attention_$SHAPE" env $KERNEL \
  CAPSTAN_PROFILE_NCU_ARGS="--set full -k regex:attention_decode" \
  scripts/gpu-profile.sh "$W/profile_decode_attention.csv" 2 -- \
  "$BENCH" gpu decode --shape "$SHAPE" --contexts "${CONTEXTS##*,}" --steps 1 --full-attention step \
  --device "$DEV" --dtype "$DT"
# The same with decoding attention on tensor cores.
step "profile_decode_long_mma_$SHAPE" env $KERNEL CAPSTAN_DECODE_ATTENTION=mma \
  scripts/gpu-profile.sh "$W/profile_decode_long_mma.csv" 400 -- \
  "$BENCH" gpu decode --shape "$SHAPE" --contexts "${CONTEXTS##*,}" --steps 1 --full-attention step \
  --device "$DEV" --dtype "$DT"
# 16 sequences through the fused step (3.56x one sequence on the 2026-11-29 run, PyTorch 13.3x):
# each kernel's time for two steps.
step "profile_decode_batch16_$SHAPE" env $KERNEL scripts/gpu-profile.sh \
  "$W/profile_decode_batch16.csv" 600 -- "$BENCH" gpu decode --shape "$SHAPE" \
  --contexts "$BATCH_CONTEXTS" --batch 16 --steps 2 --full-attention step --device "$DEV" --dtype "$DT"
# Every section for two of the batch's tensor-core products (split over a block's warps since
# the 2026-11-30 run).
step "profile_decode_batch16_products_$SHAPE" env $KERNEL \
  CAPSTAN_PROFILE_NCU_ARGS="--set full -k regex:capstan_step_gemv_mma" \
  scripts/gpu-profile.sh "$W/profile_decode_batch16_products.csv" 2 -- "$BENCH" gpu decode \
  --shape "$SHAPE" --contexts "$BATCH_CONTEXTS" --batch 16 --steps 1 --full-attention step \
  --device "$DEV" --dtype "$DT"
# shellcheck disable=SC2086
step profile_prefill env $KERNEL scripts/gpu-profile.sh "$W/profile_prefill.csv" 400 -- \
  "$BENCH" gpu prefill --model-only $PREFILL_MODEL --model-contexts "${PREFILL_MODEL_CONTEXTS%% *}" \
  --device "$DEV" --dtype "$DT"
if [ -n "$GGUF" ] && [ -f "$GGUF" ]; then
  # The step's own kernels: the prompt's layers spent all 600 launches on the 2026-11-29 run.
  step profile_gguf env CAPSTAN_PROFILE_NCU_ARGS="--metrics gpu__time_duration.sum -k regex:capstan_step|capstan_attention_decode" \
    scripts/gpu-profile.sh "$W/profile_gguf.csv" 600 -- \
    "$BENCH" gpu gguf --model "$GGUF" --new-tokens 4 --ways step --device "$DEV"
  # Every section of Nsight Compute for two of SmolLM2's normalising products: ~96 MB a token
  # took ~1.2 ms of kernels on the 2026-11-30 run, 5.6-8.8 us a launch for 0.4-1.1 MB.
  step profile_gguf_products env \
    CAPSTAN_PROFILE_NCU_ARGS="--set full -k regex:capstan_step_gemv_norm_q4_1" \
    scripts/gpu-profile.sh "$W/profile_gguf_products.csv" 2 -- \
    "$BENCH" gpu gguf --model "$GGUF" --new-tokens 2 --ways step --device "$DEV"
fi
# The GGUF model with 16 sequences decoding together (no goal of its own: after the goals'
# steps): the packed layers, and the fused step whose batched GGML products run on TF32
# tensor cores, each checked against the sequences alone.
if [ -n "$GGUF" ] && [ -f "$GGUF" ]; then
  # shellcheck disable=SC2086
  step gguf_batch16 "$BENCH" gpu gguf --model "$GGUF" --batch 16 $GGUF_BATCH --ways layers,step \
    --device "$DEV"
fi
# Issue 10's rows, re-measured while the budget lasts: the peer's own batch of 16, the CUDA-core
# kernel's prefill beside flash SDPA, CAPE's passage cache, the encoder, the Llama-2 shape.
step "graph_peer_batch16_$SHAPE" "$PY" bench/gpu_peers.py decode-graph --shape "$SHAPE" \
  --contexts "$BATCH_CONTEXTS" --batch 16 --steps "$STEPS" --device "$DEV" --dtype "$DT"
# shellcheck disable=SC2086
step prefill env $CORES "$BENCH" gpu prefill $PREFILL --device "$DEV" --dtype "$DT"
# shellcheck disable=SC2086
step prefill_peer "$PY" bench/gpu_peers.py sdpa $SDPA --device "$DEV" --dtype "$DT"
# shellcheck disable=SC2086
step passage_cache "$BENCH" gpu passage-cache $PASSAGE_CACHE --device "$DEV" --dtype "$DT"
if [ -f "$ENCODER/model.safetensors" ] && [ -f "$PASSAGES" ]; then
  step encode "$BENCH" gpu encode --passages "$PASSAGES" --encoder "$ENCODER" --n "$ENC_N" \
    --device "$DEV" --dtype "$ENC_DT" --out "$W/encoder-vectors.f32"
  step encode_peer "$PY" bench/gpu_peers.py encode --passages "$PASSAGES" --encoder "$ENCODER" \
    --n "$ENC_N" --device "$DEV" --dtype "$ENC_DT" --vectors "$W/encoder-vectors.f32"
  rm -f "$W/encoder-vectors.f32"
else
  say "no encoder in the bundle (gpu-bundle.sh --no-encoder): steps encode and encode_peer not run"
fi
for shape in $DECODE_SHAPES; do
  [ "$shape" = "$SHAPE" ] && continue
  step "decode_$shape" env $CORES "$BENCH" gpu decode --shape "$shape" --contexts "$CONTEXTS" --steps "$STEPS" \
    --device "$DEV" --dtype "$DT"
  step "decode_peer_$shape" "$PY" bench/gpu_peers.py decode --shape "$shape" --contexts "$CONTEXTS" \
    --steps "$STEPS" --device "$DEV" --dtype "$DT"
done

report
# The device tool brings back at most 8 files: every step's raw JSON and log travel as one.
tar -czf "$OUT/raw.tgz" -C "$OUT" raw && rm -rf "$W"
say "results: $OUT/results.json, $OUT/results.md, raw steps in $OUT/raw.tgz (${SECONDS} s)"
