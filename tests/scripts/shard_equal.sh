#!/bin/sh
# tests/scripts/shard_equal.sh MPIRUN TGC NP MODEL CONFIG MESH [ZERO [MICRO]]
# Sharded training equals one device: trains MODEL (--config CONFIG, data
# reverse, 10 steps, AdamW) on one process and on NP ranks with --mesh
# MESH --zero ZERO --micro-batches MICRO, and requires the loss of every
# step within 1e-5 relative (f32). Prints both columns on failure.
mpirun="$1"; tgc="$2"; np="$3"; model="$4"; config="$5"; mesh="$6"; zero="${7:-0}"; micro="${8:-1}"
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
common="train $model --config $config --data reverse --steps 10 --optimizer adamw --lr 1e-2 --micro-batches $micro"
# shellcheck disable=SC2086
"$tgc" $common --log "$dir/one.jsonl" > "$dir/one.out" 2>&1 || { cat "$dir/one.out"; exit 1; }
# shellcheck disable=SC2086
timeout 150 "$mpirun" --oversubscribe -np "$np" "$tgc" $common --mesh "$mesh" --zero "$zero" --comm-timeout 60 \
  --log "$dir/many.jsonl" > "$dir/many.out" 2>&1 || { cat "$dir/many.out"; exit 1; }
sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/one.jsonl" > "$dir/one.txt"
sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/many.jsonl" > "$dir/many.txt"
if [ "$(wc -l < "$dir/one.txt")" -ne 10 ] || [ "$(wc -l < "$dir/many.txt")" -ne 10 ]; then
  echo "FAIL: expected 10 logged steps"; cat "$dir/many.out"; exit 1
fi
paste "$dir/one.txt" "$dir/many.txt" | awk -v m="$mesh z$zero k$micro" '
  { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r; if (r > 1e-5) bad = 1
    printf "  step %2d  one %.9g  %s %.9g  rel %.2g\n", NR, $1, m, $2, r }
  END { printf "%s: worst relative difference %.3g (tolerance 1e-5)\n", m, worst; exit bad }'
