#!/bin/sh
# bench/train_reverse.sh — the long training run (kept out of the unit test
# suite): examples/reverse.tg, a 2-layer transformer, learns the `reverse`
# task (length 16, vocabulary 32) with `tgc train`'s defaults (adam, lr 0.003,
# warmup 20, cosine, clip 1, 200 steps of 32 sequences). Prints the summary
# and fails unless the token accuracy (mean over the last 10 steps, each on
# a fresh batch scored before the update) is at least 99%.
#
#   sh bench/train_reverse.sh [path/to/tgc] [extra tgc train flags]
#   (outputs go to $OUT, default a new /tmp/tgc_reverse.* directory)
#
# On a 2-core machine under load, OMP_WAIT_POLICY=passive can help a lot:
# libgomp's spinning threads otherwise compete with other processes.
set -e
TGC=$(realpath "${1:-build/tgc}")
[ $# -gt 0 ] && shift
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d /tmp/tgc_reverse.XXXXXX)}
start=$(date +%s)
"$TGC" train examples/reverse.tg --data reverse --log "$OUT/run.jsonl" --json "$@" > "$OUT/summary.json"
end=$(date +%s)
cat "$OUT/summary.json"
echo "wall time: $((end - start)) s; per-step log in $OUT/run.jsonl"
acc=$(sed -n 's/^ *"accuracy": *\([0-9.eE+-]*\).*/\1/p' "$OUT/summary.json")
awk -v a="$acc" 'BEGIN { if (a + 0 < 0.99) { print "FAIL: token accuracy " a " < 0.99"; exit 1 } print "OK: token accuracy " a }'
