#!/bin/sh
# tests/scripts/shard_equal.sh MPIRUN TGC STATE_CMP NP MODEL CONFIG MESH [ZERO [MICRO [SCHEDULE [BACKEND]]]]
# Sharded training equals one device: trains MODEL (--config CONFIG, data
# reverse, 10 steps, SGD with momentum: see shard_state.sh for why not Adam)
# on one process and on NP ranks with --mesh MESH --zero ZERO
# --micro-batches MICRO (--schedule SCHEDULE: gpipe or 1f1b with pp; --backend
# BACKEND, default cpu, for the ranks: the one process runs on the cpu), and requires the loss of every step and every
# parameter after the 10 steps within 1e-5 relative (f32; the optimizer
# state within 1e-4: tests/tools/state_cmp.c). Prints both on failure.
mpirun="$1"; tgc="$2"; cmp="$3"; np="$4"; model="$5"; config="$6"; mesh="$7"; zero="${8:-0}"; micro="${9:-1}"
schedule="${10:-gpipe}"; backend="${11:-cpu}"
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
common="train $model --config $config --data reverse --steps 10 --optimizer momentum --lr 0.05 --micro-batches $micro"
# shellcheck disable=SC2086
"$tgc" $common --log "$dir/one.jsonl" --save "$dir/one.st" > "$dir/one.out" 2>&1 || { cat "$dir/one.out"; exit 1; }
# shellcheck disable=SC2086
timeout 150 "$mpirun" --oversubscribe -np "$np" "$tgc" $common --mesh "$mesh" --zero "$zero" --schedule "$schedule" \
  --backend "$backend" --comm-timeout 60 \
  --log "$dir/many.jsonl" --save "$dir/many.st" > "$dir/many.out" 2>&1 || { cat "$dir/many.out"; exit 1; }
# the sharded state as one file: resumed on one device with nothing left to train, saved
# shellcheck disable=SC2086
"$tgc" $common --resume "$dir/many.st" --save "$dir/many.plain" > "$dir/plain.out" 2>&1 || { cat "$dir/plain.out"; exit 1; }
sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/one.jsonl" > "$dir/one.txt"
sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/many.jsonl" > "$dir/many.txt"
if [ "$(wc -l < "$dir/one.txt")" -ne 10 ] || [ "$(wc -l < "$dir/many.txt")" -ne 10 ]; then
  echo "FAIL: expected 10 logged steps"; cat "$dir/many.out"; exit 1
fi
paste "$dir/one.txt" "$dir/many.txt" | awk -v m="$mesh z$zero k$micro $schedule $backend" '
  { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r; if (r > 1e-5) bad = 1
    printf "  step %2d  one %.9g  %s %.9g  rel %.2g\n", NR, $1, m, $2, r }
  END { printf "%s: losses within %.3g (tolerance 1e-5)\n", m, worst; exit bad }' || exit 1
"$cmp" "$dir/one.st" "$dir/many.plain" 1e-5
