#!/bin/sh
# tests/scripts/mpi_error.sh MPIRUN TGC NP EXPECTED ARGS... — a command that
# must fail on every one of NP ranks (exit status non-zero, no hang) with
# EXPECTED in its output (the ranks print it each; their lines may interleave).
mpirun="$1"; tgc="$2"; np="$3"; want="$4"; shift 4
cd "$(dirname "$0")/../.." || exit 2
out=$(mktemp); trap 'rm -f "$out"' EXIT
timeout 120 "$mpirun" --oversubscribe -np "$np" "$tgc" "$@" > "$out" 2>&1
rc=$?
if [ "$rc" -eq 0 ]; then cat "$out"; echo "FAIL: exit status 0"; exit 1; fi
if ! grep -qF -- "$want" "$out"; then cat "$out"; echo "FAIL: no line: $want"; exit 1; fi
echo "ok (exit status $rc)"
