#!/bin/bash
# bench/gpu/run.sh — the one-call check of the cuda backend on a GPU machine that starts bare (no flex,
# bison, jansson or MPI there): it runs what bench/gpu/bundle.sh put in the bundle, each step under its own
# timeout, skips the later steps when the time budget runs short, and prints a summary at the end.
#   bash bench/gpu/run.sh [BUNDLE]        BUNDLE: the folder bundle.sh made (default .gpu)
# Environment: BUDGET (seconds for all steps, default 480), LOGS (folder for the logs: default a temporary
# one; the tar of them goes to $OUT when OUT is set, as on the device tool's machines).
# Steps: the GPU and driver; every kernel of test_cuda_kernels and every example of test_cuda_examples
# on the real backend against the cpu (TGC_TEST_BACKEND=cuda); 20 training steps of gpt tiny, cuda vs
# cpu, f32 and bf16 (the largest loss difference); bench/gpu.sh (gpt2-124m B=16 T=1024 bf16: measured
# vs tgc stats) and the same step's profile by class (TGC_CUDA_PROFILE=1); PyTorch eager and
# torch.compile on the same step; compute-sanitizer memcheck and racecheck on gpt tiny.
set -u
cd "$(dirname "$0")/../.."
BUNDLE=$(cd "${1:-.gpu}" && pwd)
BUDGET=${BUDGET:-480}
LOGS=${LOGS:-$(mktemp -d)}
mkdir -p "$LOGS"
TGC=$BUNDLE/tgc
export LD_LIBRARY_PATH=$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TGC_CACHE_DIR=$BUNDLE/cache
SUMMARY=$LOGS/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME SECONDS CMD...: runs CMD under a timeout into $LOGS/NAME.log unless the budget is spent.
step() {
  local name=$1 t=$2 left start rc
  shift 2
  left=$((BUDGET - SECONDS))
  if [ "$left" -lt 20 ]; then say "[$name] skipped: ${left} s of the budget left"; return 1; fi
  [ "$t" -gt "$left" ] && t=$left
  echo "== $name (timeout $t s)"
  start=$SECONDS
  timeout -k 5 "$t" "$@" > "$LOGS/$name.log" 2>&1
  rc=$?
  say "[$name] exit $rc in $((SECONDS - start)) s$([ $rc = 124 ] && echo ' (TIMED OUT)')"
  return $rc
}

losses() { sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$1"; }
# the largest |a - b| / |b| over the steps of two --log files
loss_diff() { paste <(losses "$1") <(losses "$2") | awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2);
  if (r > m) m = r; n++ } END { printf "%d steps, largest relative loss difference %.3g, last %s vs %s\n", n, m, $1, $2 }'; }

# 1. the machine
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  uname -r
  for l in libcuda.so.1 libnvrtc.so.13 libcublasLt.so.13; do
    printf '%s: %s\n' "$l" "$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')"
  done
  ls /usr/local/cuda/lib64/libnvrtc.so* /usr/local/cuda/lib64/libcublasLt.so* 2>&1 | head -4
} > "$LOGS/machine.log" 2>&1
say "== machine"; sed 's/^/  /' "$LOGS/machine.log" | tee -a "$SUMMARY"

# 2. gpt tiny forward on the cuda backend vs the cpu: every number tgc run prints, the largest relative difference
step run_tiny 60 bash -c "'$TGC' run examples/gpt.tg --config tiny --backend cuda > '$LOGS/run_cuda.txt' && '$TGC' run examples/gpt.tg --config tiny > '$LOGS/run_cpu.txt'"
paste -d'\n' "$LOGS/run_cpu.txt" "$LOGS/run_cuda.txt" 2>/dev/null | awk 'NR % 2 { split($0, a, /[ ,:\[\]]+/); next }
  { n = split($0, b, /[ ,:\[\]]+/); for (i = 1; i <= n; i++) if (b[i] ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/ && a[i] != "") {
      d = b[i] - a[i]; d = d < 0 ? -d : d; s = a[i] < 0 ? -a[i] : a[i]; if (s > 1e-3 && d / s > m) m = d / s; k++ } }
  END { printf "  tgc run gpt tiny, cuda vs cpu: %d numbers, largest relative difference %.3g\n", k, m }' | tee -a "$SUMMARY"

# 3. every kernel and every example against the cpu
TGC_TEST_BACKEND=cuda TGC_CUDA_SYNC=1 step kernels 150 "$BUNDLE/test_cuda_kernels"
{ grep -E 'cases|passed' "$LOGS/kernels.log"; grep -E 'differ|failed:|error:' "$LOGS/kernels.log" | head -12; } | sed 's/^/  /' | tee -a "$SUMMARY"
TGC_TEST_BACKEND=cuda step examples 90 "$BUNDLE/test_cuda_examples"
{ grep -E 'vs cpu|passed' "$LOGS/examples.log"; grep -E 'failed:|error:' "$LOGS/examples.log" | head -8; } | sed 's/^/  /' | tee -a "$SUMMARY"

# 4. 20 training steps of gpt tiny, cuda vs cpu
for dt in f32 bf16; do
  flag=""; [ $dt = bf16 ] && flag="--dtype bf16"
  for be in cpu cuda; do
    # shellcheck disable=SC2086
    step "train_${dt}_$be" 60 "$TGC" train examples/gpt.tg --config tiny --data copy --steps 20 $flag --backend $be \
      --log "$LOGS/train_${dt}_$be.jsonl" || tail -4 "$LOGS/train_${dt}_$be.log" | sed 's/^/  /' | tee -a "$SUMMARY"
  done
  say "  $dt: $(loss_diff "$LOGS/train_${dt}_cuda.jsonl" "$LOGS/train_${dt}_cpu.jsonl" 2>&1)"
done

# 5. gpt2-124m B=16 T=1024 bf16: measured vs predicted
TGC=$TGC STEPS=20 WARMUP=5 step gpt2_step 200 sh bench/gpu.sh
tail -8 "$LOGS/gpt2_step.log" | sed 's/^/  /' | tee -a "$SUMMARY"

# 5b. where the step's time goes: every action timed by class (TGC_CUDA_PROFILE=1; the kernels are cached by now)
TGC_CUDA_PROFILE=1 step gpt2_profile 120 "$TGC" train examples/gpt.tg --config gpt2_124m -D B=16 -D T=1024 --data copy \
  --steps 6 --dtype bf16 --backend cuda
grep -A25 '^cuda profile' "$LOGS/gpt2_profile.log" | head -26 | sed 's/^/  /' | tee -a "$SUMMARY"

# 6. PyTorch on the same step
for m in eager compile; do
  step "torch_$m" 150 python3 bench/gpu/torch_gpt2.py $m 25 16 1024
  tail -2 "$LOGS/torch_$m.log" | sed 's/^/  /' | tee -a "$SUMMARY"
done

# 7. compute-sanitizer on gpt tiny (forward and a training step)
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  step "sanitizer_$tool" 90 "$CS" --tool $tool --error-exitcode 3 "$TGC" train examples/gpt.tg --config tiny --data copy --steps 2 --backend cuda
  grep -E 'ERROR SUMMARY|Error|error' "$LOGS/sanitizer_$tool.log" | head -6 | sed 's/^/  /' | tee -a "$SUMMARY"
done

say "== done in $SECONDS s; logs in $LOGS"
if [ -n "${OUT:-}" ]; then
  cp "$SUMMARY" "$OUT/summary.txt"
  tar -czf "$OUT/logs.tar.gz" -C "$LOGS" .
fi
