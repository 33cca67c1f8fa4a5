#!/bin/sh
# tests/scripts/comm_no_mpi.sh TGC TEST_COMM [MPIRUN] — a plain tgc start
# loads no MPI: tgc links no MPI library (ldd), and the dynamic loader's own
# record of every object a run maps (LD_DEBUG=files, one file per process)
# names no libmpi, for `tgc run` and for test_comm's local run. With
# MPIRUN, the same record of test_comm under mpirun does name libmpi (the
# check can fail).
tgc="$1"; test_comm="$2"; mpirun="$3"
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
status=0
if ldd "$tgc" | grep -i "mpi\|open-pal\|open-rte"; then echo "FAIL: tgc links MPI"; status=1; fi
LD_DEBUG=files LD_DEBUG_OUTPUT="$dir/tgc" "$tgc" run examples/straight_line.tg --input w1=1.5 --input w2=0.5 >"$dir/out" || status=1
grep -q "z6 = 39.459983186667834" "$dir/out" || { echo "FAIL: tgc run did not run"; status=1; }
LD_DEBUG=files LD_DEBUG_OUTPUT="$dir/local" "$test_comm" >/dev/null || { echo "FAIL: test_comm (local) failed"; status=1; }
ls "$dir"/tgc.* "$dir"/local.* >/dev/null 2>&1 || { echo "FAIL: LD_DEBUG wrote nothing"; status=1; }
if grep -l "file=libmpi\|file=libopen-pal" "$dir"/tgc.* "$dir"/local.*; then
  echo "FAIL: MPI was loaded by a plain start"; status=1
fi
echo "objects a plain tgc run maps: $(grep -ho 'file=[^ ]*' "$dir"/tgc.* | sort -u | tr '\n' ' ')"
if [ -n "$mpirun" ]; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LD_DEBUG=files LD_DEBUG_OUTPUT="$dir/mpi" \
    "$mpirun" --oversubscribe -np 2 "$test_comm" >/dev/null 2>&1 || { echo "FAIL: test_comm under mpirun failed"; status=1; }
  n=$(grep -l "file=libmpi.so" "$dir"/mpi.* 2>/dev/null | wc -l)
  echo "processes that loaded libmpi under mpirun -np 2: $n"
  [ "$n" -eq 2 ] || { echo "FAIL: the check does not see libmpi under mpirun"; status=1; }
fi
[ $status -eq 0 ] && echo "ok: no MPI in a plain start"
exit $status
