#!/bin/sh
# bench/steady.sh [TGC] — the steady state of a gpt2-124m training step
# (B = 4, T = 64, AdamW, CPU): heap bytes allocated per step after the
# first (the malloc-counting shim bench/malloc_count.c, runs of 3 and 6
# steps: the difference / 3), and the first step's time against a steady
# step's (from --log's elapsed_s). Prints figures; asserts nothing.
set -eu
cd "$(dirname "$0")/.."
TGC=${1:-build/tgc}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/tgc_steady.XXXXXX")
cc -O2 -shared -fPIC bench/malloc_count.c -o "$OUT/malloc_count.so" -ldl
python_free_tokens() { # uint16 tokens, deterministic, without Python
  awk 'BEGIN { srand(1); for (i = 0; i < 262144; i++) { v = int(rand() * 50257); printf "%c%c", v % 256, int(v / 256) } }' \
    > "$1"
}
LC_ALL=C python_free_tokens "$OUT/tokens.u16"
MODEL="examples/gpt.tg --config gpt2-124m -D B=4 -D T=64"
TRAIN="train $MODEL --data tokens:$OUT/tokens.u16 --optimizer adamw --lr 3e-4 --weight-decay 0 --warmup 0 --clip 0 --lr-schedule constant"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
for n in 3 6; do
  # shellcheck disable=SC2086
  OMP_WAIT_POLICY=passive LD_PRELOAD="$OUT/malloc_count.so" "$TGC" $TRAIN --steps $n --log "$OUT/log$n.jsonl" \
    > /dev/null 2> "$OUT/err$n.txt"
  sed -n 's/^malloc_count: calls \([0-9]*\) bytes \([0-9]*\)/\1 \2/p' "$OUT/err$n.txt" > "$OUT/count$n.txt"
done
read -r c3 b3 < "$OUT/count3.txt"
read -r c6 b6 < "$OUT/count6.txt"
echo "heap allocations per steady step: $(( (c6 - c3) / 3 )) calls, $(( (b6 - b3) / 3 )) bytes (runs of 3 and 6 steps: $c3 / $c6 calls)"
awk -F'"elapsed_s":' '{ split($2, a, "[,}]"); d = a[1] - p; p = a[1]; if (NR == 1) f = d; else if (m == 0 || d < m) m = d }
  END { printf "first step %.3f s, best steady step %.3f s: first / steady = %.2f\n", f, m, f / m }' "$OUT/log6.jsonl"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$OUT"
