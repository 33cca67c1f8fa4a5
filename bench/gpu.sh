#!/bin/sh
# bench/gpu.sh — GPT-2 124M training on a GPU (--backend cuda): the measured
# step time, tokens/s and MFU beside `tgc stats`'s prediction for the same
# step on the same target. Run it on a machine with an NVIDIA GPU, its
# driver, and the CUDA toolkit's libnvrtc and libcublasLt (see docs/cuda.md,
# "Running on a GPU"); nothing here has a GPU to run on in this project's CI.
#
#   sh bench/gpu.sh                 B=16, T=1024, bf16, 30 steps on device 0, against h100-sxm
#   TARGET=a100-80g sh bench/gpu.sh the prediction for another target of `tgc stats --target`
#   B=8 T=1024 DTYPE=f32 STEPS=50 DEVICE=1 sh bench/gpu.sh
#   BACKEND=cuda-emu CONFIG=tiny B=4 T=16 STEPS=5 sh bench/gpu.sh   the same script with no GPU (slow, small)
#
# Measured step time: the median of the steps after the first WARMUP (5)
# from `tgc train --log` (elapsed_s per step: wall time, the device
# synchronized by the loss download each step). MFU = 6 N tokens / (step
# time x peak), N the parameter count and peak the target's dense bf16
# (or fp32) FLOP/s, as `tgc stats` computes it. The predicted MFU is the
# roofline's (tgc stats: the sum over ops of max(FLOPs/peak, bytes/bandwidth)).
# Environment: TGC (default build-bench/release/tgc, built here when missing),
# CONFIG (gpt2_124m), B, T, DTYPE (bf16; f16 or f32), STEPS, WARMUP, DEVICE,
# TARGET (h100-sxm), BACKEND (cuda), DATA (copy: random tokens, the timing does
# not depend on them).
set -eu
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-gpt2_124m}
B=${B:-16}
T=${T:-1024}
DTYPE=${DTYPE:-bf16}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
DEVICE=${DEVICE:-0}
TARGET=${TARGET:-h100-sxm}
BACKEND=${BACKEND:-cuda}
DATA=${DATA:-copy}
TGC=${TGC:-build-bench/release/tgc}

if [ ! -x "$TGC" ]; then
  echo "building $TGC (Release)"
  cmake -S . -B build-bench/release -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build-bench/release -j "$(nproc)" --target tgc > /dev/null
fi
MODEL="examples/gpt.tg --config $CONFIG -D B=$B -D T=$T"
dtype_flag=""
[ "$DTYPE" = f32 ] || dtype_flag="--dtype $DTYPE"
stats_dtype=$DTYPE
[ "$DTYPE" = f16 ] && stats_dtype=fp16
[ "$DTYPE" = f32 ] && stats_dtype=fp32

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086
"$TGC" stats $MODEL --dtype "$stats_dtype" --target "$TARGET" > "$work/stats.txt"
params=$(sed -n 's/^parameters: *\([0-9,]*\).*/\1/p' "$work/stats.txt" | tr -d ,)
peak=$(sed -n 's/.*peak for [a-z0-9]*: \([0-9.e+]*\) TFLOP\/s.*/\1/p' "$work/stats.txt" | head -1)
pred_ms=$(awk '/^predicted step time/ {p = 1} p && $1 == "total" {print $2; exit}' "$work/stats.txt")
pred_mfu=$(sed -n 's/^MFU = .* = \([0-9.]*\)%.*/\1/p' "$work/stats.txt")
tokens=$((B * T))

echo "tgc train $MODEL --data $DATA --steps $STEPS $dtype_flag --backend $BACKEND --device $DEVICE"
# shellcheck disable=SC2086
# (into a file first: a pipe into grep would hide tgc's exit status under set -e)
if ! "$TGC" train $MODEL --data "$DATA" --steps "$STEPS" $dtype_flag --backend "$BACKEND" --device "$DEVICE" \
  --log "$work/log.jsonl" --print-every 10 > "$work/train.txt" 2>&1; then
  cat "$work/train.txt" >&2
  echo "gpu.sh: tgc train failed" >&2
  exit 1
fi
grep -v '^peak' "$work/train.txt" || true
# steady-state step times: differences of elapsed_s after the warmup, their median
sed -n 's/.*"elapsed_s":\([0-9.e+-]*\).*/\1/p' "$work/log.jsonl" |
  awk -v w="$WARMUP" 'NR > 1 { d = $1 - prev; if (NR > w + 1) print d } { prev = $1 }' | sort -g > "$work/steps.txt"
n=$(wc -l < "$work/steps.txt")
if [ "$n" -lt 1 ]; then
  echo "not enough steps after the warmup (STEPS=$STEPS, WARMUP=$WARMUP)" >&2
  exit 1
fi
step_s=$(awk -v n="$n" 'NR == int((n + 1) / 2) {print; exit}' "$work/steps.txt")
awk -v s="$step_s" -v tok="$tokens" -v np="$params" -v peak="$peak" -v pms="$pred_ms" -v pmfu="$pred_mfu" \
  -v tgt="$TARGET" -v n="$n" 'BEGIN {
  mfu = 6 * np * tok / (s * peak * 1e12) * 100
  printf "\n%-28s %14s %14s\n", "", "measured", "predicted (" tgt ")"
  printf "%-28s %11.2f ms %11.2f ms\n", "step time (median of " n ")", s * 1e3, pms
  printf "%-28s %14.0f %14.0f\n", "tokens/s", tok / s, tok / (pms / 1e3)
  printf "%-28s %13.1f%% %13.1f%%\n", "MFU", mfu, pmfu
  printf "(MFU = 6 N tokens / (step time x peak), N = %d parameters, %d tokens per step, peak %s TFLOP/s)\n", np, tok, peak
}'
