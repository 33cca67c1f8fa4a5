#!/bin/sh
# bench/plan_validate.sh — `tgc plan`'s predicted step time against published
# Megatron-LM iteration times, one row per published configuration, with the
# error per row. Nothing is asserted: it prints a table (docs/plan.md quotes it).
#
#   sh bench/plan_validate.sh            every row
#   sh bench/plan_validate.sh calib      only the calibration rows (bench/plan_calibrate.sh)
#
# Environment: TGC (build/tgc), CONSTANTS (extra `--constant NAME=VALUE` flags).
#
# The rows. Every run fixes what the paper fixed: the mesh (dp = GPUs / (tp pp)),
# the global batch, sequence length 2048, vocabulary 51,200, bf16/fp16 mixed
# precision with Adam, no ZeRO, attention without fusion (neither paper had
# FlashAttention: the planner compiles with --disable-pass fuse-attention), and
# the recompute policy; the micro-batch size and the pipeline schedule, which
# the tables do not give, are searched within that.
#
# N: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
#    GPU Clusters Using Megatron-LM" (SC21), Table 1 (weak scaling, A100-80GB
#    DGX nodes, full activation recomputation, no sequence parallelism). The
#    table gives teraFLOP/s per GPU; the iteration time is their FLOP count
#    (their equation 3, recomputation included)
#      F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h))
#    divided by (teraFLOP/s x GPUs).
# K: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
#    Transformer Models", Table 3 (configurations) and Table 5 (iteration
#    time in seconds: "full recompute", and "present work" = sequence
#    parallelism + selective recomputation).
#
# Calibration: bench/plan_calibrate.sh fits the GEMM efficiency constants
# (gemm_eff, gemm_half) to the rows marked "calib" (N 1.7B: one GPU per
# replica, data parallel only; N 18.4B: tensor parallel 8, no pipeline) and to
# nothing else; every other row is validation only.
set -eu
cd "$(dirname "$0")/.."
TGC=${TGC:-build/tgc}
CONSTANTS=${CONSTANTS:-}
ONLY=${1:-all}

# label role heads hidden layers tp pp gpus batch recompute sp published(s or tflops:X)
rows='
N-1.7B   calib 24  2304  24  1  1   32   512 full off tflops:137
N-3.6B   valid 32  3072  30  2  1   64   512 full off tflops:138
N-7.5B   valid 32  4096  36  4  1  128   512 full off tflops:142
N-18.4B  calib 48  6144  40  8  1  256  1024 full off tflops:135
N-39.1B  valid 64  8192  48  8  2  512  1536 full off tflops:138
N-76.1B  valid 80  10240 60  8  4 1024  1792 full off tflops:140
N-145.6B valid 96  12288 80  8  8 1536  2304 full off tflops:148
N-310.1B valid 128 16384 96  8 16 1920  2160 full off tflops:155
N-529.6B valid 128 20480 105 8 35 2520  2520 full off tflops:163
N-1008B  valid 160 25600 128 8 64 3072  3072 full off tflops:163
K-22B-full     valid 64  6144  48  8  1   8     4 full off 1.42
K-22B-present  valid 64  6144  48  8  1   8     4 selective on 1.10
K-175B-full    valid 96  12288 96  8  8  64    64 full off 18.13
K-175B-present valid 96  12288 96  8  8  64    64 selective on 13.75
K-530B-full    valid 128 20480 105 8 35 280   280 full off 49.05
K-530B-present valid 128 20480 105 8 35 280   280 selective on 37.83
K-1T-full      valid 160 25600 128 8 64 512   512 full off 94.42
K-1T-present   valid 160 25600 128 8 64 512   512 selective on 71.49
'

printf '%-16s %-6s %-30s %10s %10s %8s\n' row role "plan (searched: micro-batch, schedule)" published predicted error
echo "$rows" | while read -r label role heads hidden layers tp pp gpus batch ck sp pub; do
  [ -z "$label" ] && continue
  [ "$ONLY" = calib ] && [ "$role" != calib ] && continue
  dp=$((gpus / (tp * pp)))
  case $pub in
  tflops:*)
    x=${pub#tflops:}
    pub=$(awk -v B="$batch" -v l="$layers" -v h="$hidden" -v x="$x" -v g="$gpus" 'BEGIN {
      s = 2048; V = 51200; F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
      printf "%.3f", F / (x * 1e12 * g) }')
    ;;
  esac
  # shellcheck disable=SC2086
  out=$("$TGC" plan examples/gpt.tg --config gpt3_175b -D V=51200 -D nL="$layers" -D D="$hidden" -D nH="$heads" \
    --seq 2048 --gpus "$gpus" --global-batch "$batch" --mesh "dp=$dp,tp=$tp,pp=$pp" --zero 0 --sp "$sp" \
    --checkpoint "$ck" --disable-pass fuse-attention --json $CONSTANTS)
  pred=$(printf '%s\n' "$out" | awk '/"time_s"/ { t = 1 } t && /"total"/ { gsub(/[",]/, ""); print $2; exit }')
  plan=$(printf '%s\n' "$out" | awk '
    /"micro_batch":/ { gsub(/[",]/, ""); mb = $2 }
    /"schedule":/ { gsub(/[",]/, ""); sc = $2 }
    /"chunks":/ { gsub(/[",]/, ""); v = $2 }
    /"checkpoint":/ { gsub(/[",]/, ""); printf "b %s, %s%s", mb, sc, (sc == "interleaved" ? " v " v : ""); exit }')
  awk -v l="$label" -v r="$role" -v p="$plan" -v pub="$pub" -v pred="$pred" 'BEGIN {
    printf "%-16s %-6s %-30s %9.3fs %9.3fs %+7.1f%%\n", l, r, p, pub, pred, 100 * (pred - pub) / pub }'
done | tee /tmp/tgc_plan_validate.$$
awk '$NF ~ /%$/ { e = $NF; sub(/%/, "", e); e = e + 0; e = e < 0 ? -e : e; k = $2 " rows, " substr($1, 1, 1);
                  n[k]++; s[k] += e; if (e > m[k]) m[k] = e }
     END { for (k in n) printf "%s: %d, mean |error| %.1f%%, largest %.1f%%\n", k, n[k], s[k] / n[k], m[k] }' \
  /tmp/tgc_plan_validate.$$ | sort
rm -f /tmp/tgc_plan_validate.$$
