#!/bin/sh
# bench/shard.sh [TGC] — sharded training on CPU ranks (mpirun) next to one
# process: the step time and the bytes each rank moves per step, for dp, tp,
# tp+sp, pp (1F1B, 4 micro-batches), dp x tp and dp x pp on 2 and 4 ranks. A GPT (examples/gpt.tg with D 256,
# 4 layers, 8 heads, T 64, B 8: 3.4 M parameters), 8 steps, AdamW; the step
# time is the median of steps 3-8 from --log. Prints figures; asserts
# nothing. On a 2-core machine 4 ranks share 2 cores (--oversubscribe), and
# every rank runs its kernels on 1 thread: the figures say what the
# communication costs here, not what 4 machines would do.
set -eu
cd "$(dirname "$0")/.."
TGC=${1:-build/tgc}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=$(mktemp -d "${TMPDIR:-/tmp}/tgc_shard.XXXXXX")
M="train examples/gpt.tg --config tiny -D D=256 -D nL=4 -D nH=8 -D Hd=32 -D ctx=64 -D T=64 -D B=8 --data reverse --steps 8 --optimizer adamw"
median() { sed -n 's/.*"elapsed_s":\([0-9.eE+-]*\).*/\1/p' "$1" |
  awk '{ d[NR] = $1 - p; p = $1 } END { n = 0; for (i = 3; i <= NR; i++) v[n++] = d[i]
       for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
       printf "%.3f", n ? v[int(n / 2)] : 0 }'; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
printf '%-16s %5s %10s %14s  %s\n' mesh ranks "s/step" "bytes/step" "by kind (rank 0: sent bytes per step)"
# shellcheck disable=SC2086
"$TGC" $M --log "$OUT/one.jsonl" > /dev/null
printf '%-16s %5d %10s %14s\n' "(one process)" 1 "$(median "$OUT/one.jsonl")" 0
PP="--micro-batches 4 --pipeline-schedule 1f1b"
# shellcheck disable=SC2086
"$TGC" $M $PP --log "$OUT/one.jsonl" > /dev/null
printf '%-16s %5d %10s %14s\n' "(one, 4 micro)" 1 "$(median "$OUT/one.jsonl")" 0
for spec in "2 dp=2" "2 tp=2" "2 tp=2,sp" "2 pp=2 $PP" "4 dp=4" "4 tp=4" "4 pp=4 $PP" "4 dp=2,tp=2" "4 dp=2,tp=2,sp" "4 dp=2,pp=2 $PP"; do
  np=${spec%% *}; rest=${spec#* }; mesh=${rest%% *}; extra=""
  [ "$mesh" = "$rest" ] || extra=${rest#* }
  # shellcheck disable=SC2086
  mpirun --oversubscribe -np "$np" "$TGC" $M $extra --mesh "$mesh" --log "$OUT/m.jsonl" --json > "$OUT/m.json"
  total=$(sed -n 's/.*"bytes_sent": \([0-9]*\).*/\1/p' "$OUT/m.json" | awk '{ s += $1 } END { print s + 0 }')
  kinds=$(awk '/"per_step"/ { on = 1 } on && /^      "[a-z_]*": {/ { k = $1 } on && /^        "[a-z]*": {/ { a = $1 }
    on && /"bytes_sent"/ { gsub(/[",:{]/, "", k); gsub(/[",:{]/, "", a); v = $2; gsub(/,/, "", v); printf "%s/%s %s  ", k, a, v }' "$OUT/m.json")
  printf '%-16s %5d %10s %14s  %s\n' "$mesh" "$np" "$(median "$OUT/m.jsonl")" "$total" "$kinds"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$OUT"
