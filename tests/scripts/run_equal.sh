#!/bin/sh
# tests/scripts/run_equal.sh MPIRUN TGC NPY_CMP NP MODEL MESH TOL [FLAGS]
# A sharded `tgc run` equals one device: runs MODEL (FLAGS: e.g. --config
# tiny, --zero 1) on one process and under mpirun on NP ranks with --mesh
# MESH, each writing its outputs with --out-dir, and requires
#  - every output within TOL relative (tests/tools/npy_cmp.c, relative to
#    max(|a|, |b|, 1e-3)): 0, bit for bit, where the sums keep one
#    device's order (dp and pp on mlp and gpt), else 1e-10 for the f64
#    models, 1e-4 for gpt tiny in f32 (tp's row-parallel partial sums,
#    added in another order, move its logits by up to 2.4e-5);
#  - the same printout: rank 0 prints what one device prints, line for line,
#    numbers aside (they are compared above), and the other ranks print
#    nothing: stderr equal (the notes on inputs not given, once); with
#    --json the same JSON object, keys and layout (numbers aside).
mpirun="$1"; tgc="$2"; cmp="$3"; np="$4"; model="$5"; mesh="$6"; tol="$7"; flags="${8:-}"
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
# shellcheck disable=SC2086
"$tgc" run "$model" $flags --out-dir "$dir/one" > "$dir/one.out" 2> "$dir/one.err" || { cat "$dir/one.out" "$dir/one.err"; exit 1; }
# shellcheck disable=SC2086
timeout 120 "$mpirun" --oversubscribe -np "$np" "$tgc" run "$model" $flags --mesh "$mesh" --out-dir "$dir/many" \
  > "$dir/many.out" 2> "$dir/many.err" || { cat "$dir/many.out" "$dir/many.err"; exit 1; }
"$cmp" "$dir/one" "$dir/many" "$tol" || { echo "FAIL: the outputs differ"; exit 1; }
numbers='s/-\{0,1\}[0-9][0-9.e+-]*/N/g'
sed "$numbers" "$dir/one.out" > "$dir/one.shape"; sed "$numbers" "$dir/many.out" > "$dir/many.shape"
diff "$dir/one.shape" "$dir/many.shape" || { echo "FAIL: rank 0 printed otherwise than one device"; cat "$dir/many.out"; exit 1; }
diff "$dir/one.err" "$dir/many.err" || { echo "FAIL: stderr differs (the other ranks must print nothing)"; exit 1; }
echo "ok: $model on $mesh ($np ranks) = one device within $tol"
