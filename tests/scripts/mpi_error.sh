#!/bin/sh
# tests/scripts/mpi_error.sh MPIRUN TGC NP EXPECTED ARGS... — a command that
# must fail under mpirun with NP ranks (exit status non-zero, no hang) with
# EXPECTED as a whole line of a rank's stderr. Each rank's output is read
# from its own file (mpirun --output-filename): on the shared terminal the
# ranks' lines interleave, even inside a line; and once one rank exits
# non-zero mpirun may end the others before they print.
# NP written as N:rank0 (e.g. 3:rank0) asks for more: the line is rank 0's,
# and the other ranks print nothing at all (an error every rank has, which
# one prints: tgc run --mesh).
mpirun="$1"; tgc="$2"; np="${3%%:*}"; want="$4"
only0=false; [ "$3" != "$np" ] && only0=true
shift 4
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
timeout 120 "$mpirun" --oversubscribe -np "$np" --output-filename "$dir/out" "$tgc" "$@" > "$dir/all" 2>&1
rc=$?
if [ "$rc" -eq 0 ]; then cat "$dir/all"; echo "FAIL: exit status 0"; exit 1; fi
if $only0; then
  r0=$(ls -d "$dir"/out/*/rank.0)
  grep -qxF -- "$want" "$r0/stderr" || { cat "$dir/all"; echo "FAIL: rank 0 did not print the line: $want"; exit 1; }
  for r in "$dir"/out/*/rank.*; do
    [ "$r" = "$r0" ] && continue
    for f in "$r"/stdout "$r"/stderr; do
      [ -s "$f" ] && { echo "FAIL: $f is not empty:"; cat "$f"; exit 1; }
    done
  done
  echo "ok (exit status $rc; rank 0 printed the line, the other $((np - 1)) nothing)"
  exit 0
fi
found=0
for f in "$dir"/out/*/rank.*/stderr; do
  [ -f "$f" ] && grep -qxF -- "$want" "$f" && found=$((found + 1))
done
if [ "$found" -eq 0 ]; then cat "$dir/all"; echo "FAIL: no rank printed the line: $want"; exit 1; fi
echo "ok (exit status $rc; $found of $np ranks printed the line)"
