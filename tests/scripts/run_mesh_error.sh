#!/bin/sh
# tests/scripts/run_mesh_error.sh MPIRUN TGC NP EXPECTED ARGS... — `tgc run
# --mesh` under mpirun with NP ranks that must fail (exit status non-zero, no
# hang) with EXPECTED as a whole line of exactly one rank's stderr, rank 0's,
# while the other ranks print nothing at all (the error is every rank's: one
# prints it). Each rank's output is read from its own file (mpirun
# --output-filename), as tests/scripts/mpi_error.sh does.
mpirun="$1"; tgc="$2"; np="$3"; want="$4"; shift 4
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
timeout 120 "$mpirun" --oversubscribe -np "$np" --output-filename "$dir/out" "$tgc" "$@" > "$dir/all" 2>&1
rc=$?
if [ "$rc" -eq 0 ]; then cat "$dir/all"; echo "FAIL: exit status 0"; exit 1; fi
r0=$(ls -d "$dir"/out/*/rank.0)
grep -qxF -- "$want" "$r0/stderr" || { cat "$dir/all"; echo "FAIL: rank 0 did not print the line: $want"; exit 1; }
for r in "$dir"/out/*/rank.*; do
  [ "$r" = "$r0" ] && continue
  for f in "$r"/stdout "$r"/stderr; do
    [ -s "$f" ] && { echo "FAIL: $f is not empty:"; cat "$f"; exit 1; }
  done
done
echo "ok (exit status $rc; rank 0 printed the line, the other $((np - 1)) nothing)"
