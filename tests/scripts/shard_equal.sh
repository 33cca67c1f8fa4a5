#!/bin/sh
# tests/scripts/shard_equal.sh MPIRUN TGC STATE_CMP NP MODEL CONFIG MESH [ZERO [MICRO [SCHEDULE [DATA [TOL [FLAGS [MANY]]]]]]]
# Sharded training equals one device: trains MODEL (--config CONFIG, --data
# DATA (default reverse), 10 steps, SGD with momentum: see shard_state.sh for
# why not Adam) on one process and on NP ranks with --mesh MESH --zero ZERO
# --micro-batches MICRO (--schedule SCHEDULE: gpipe, 1f1b or interleaved:V with pp), and
# requires the loss of every step and every parameter after the 10 steps
# within TOL relative (default 1e-5, for f32 models; 1e-10 for f64 ones; the
# optimizer state within 10 TOL: tests/tools/state_cmp.c). FLAGS go to
# both runs (e.g. "--backend cuda-emu": then the sharded run's collectives
# go through NCCL on device memory, and the run must say so; with "--comm
# mpi" through MPI and host memory); MANY to the sharded run only (e.g.
# "--stage-boundaries 1"). Prints both
# on failure.
mpirun="$1"; tgc="$2"; cmp="$3"; np="$4"; model="$5"; config="$6"; mesh="$7"; zero="${8:-0}"; micro="${9:-1}"
schedule="${10:-gpipe}"; data="${11:-reverse}"; tol="${12:-1e-5}"; flags="${13:-}"; many="${14:-}"
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
common="train $model --config $config --data $data --steps 10 --optimizer momentum --lr 0.05 --micro-batches $micro $flags"
# shellcheck disable=SC2086
"$tgc" $common --log "$dir/one.jsonl" --save "$dir/one.st" > "$dir/one.out" 2>&1 || { cat "$dir/one.out"; exit 1; }
# shellcheck disable=SC2086
timeout 150 "$mpirun" --oversubscribe -np "$np" "$tgc" $common --mesh "$mesh" --zero "$zero" --schedule "$schedule" $many \
  --comm-timeout 60 \
  --log "$dir/many.jsonl" --save "$dir/many.st" > "$dir/many.out" 2>&1 || { cat "$dir/many.out"; exit 1; }
# the sharded state as one file: resumed on one device with nothing left to train, saved
# shellcheck disable=SC2086
"$tgc" $common --resume "$dir/many.st" --save "$dir/many.plain" > "$dir/plain.out" 2>&1 || { cat "$dir/plain.out"; exit 1; }
case "$flags" in *"--comm mpi"*) ;; *cuda*)
  grep -q 'through NCCL' "$dir/many.out" || { echo "FAIL: the collectives did not go through NCCL"; cat "$dir/many.out"; exit 1; } ;;
esac
sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/one.jsonl" > "$dir/one.txt"
sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/many.jsonl" > "$dir/many.txt"
if [ "$(wc -l < "$dir/one.txt")" -ne 10 ] || [ "$(wc -l < "$dir/many.txt")" -ne 10 ]; then
  echo "FAIL: expected 10 logged steps"; cat "$dir/many.out"; exit 1
fi
paste "$dir/one.txt" "$dir/many.txt" | awk -v m="$mesh z$zero k$micro $schedule" -v tol="$tol" '
  { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r; if (r > tol + 0) bad = 1
    printf "  step %2d  one %.17g  %s %.17g  rel %.2g\n", NR, $1, m, $2, r }
  END { printf "%s: losses within %.3g (tolerance %s)\n", m, worst, tol; exit bad }' || exit 1
"$cmp" "$dir/one.st" "$dir/many.plain" "$tol"
