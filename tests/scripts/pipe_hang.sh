#!/bin/sh
# tests/scripts/pipe_hang.sh MPIRUN TGC — a pipeline rank hangs (gpt tiny,
# 4 layers, --mesh pp=4, rank 1 hangs in its 31st operation, a send/recv
# between stages, --comm-timeout 3). The live ranks wait at different
# moments, so the first to time out tells the others (docs/comm.md, "Waits,
# timeouts, faults"): every live rank (0, 2 and 3) prints one line naming
# rank 1, the job ends non-zero within 30 s. Each rank's output is read from
# its own file (mpirun --output-filename), as mpi_error.sh does.
mpirun="$1"; tgc="$2"
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
start=$(date +%s)
timeout 120 "$mpirun" --oversubscribe -np 4 -x TGC_TEST_COMM_HANG=1:31 --output-filename "$dir/out" "$tgc" train \
  examples/gpt.tg --config tiny -DnL=4 --data reverse --steps 40 --micro-batches 4 --mesh pp=4 --comm-timeout 3 \
  > "$dir/all" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
echo "---- exit status $rc after $took s; the ranks' lines:"
grep -h "^tgc: rank" "$dir"/out/*/rank.*/stderr
echo "----"
status=0
[ "$rc" -ne 0 ] || { echo "FAIL: status 0"; status=1; }
[ "$took" -le 30 ] || { echo "FAIL: $took s, more than 30"; status=1; }
for r in 0 2 3; do
  f=$(ls -d "$dir"/out/*/rank.$r)/stderr
  n=$(grep -c "^tgc: rank $r: .*\(no message from rank 1 for\|rank 1 does not answer\|waits for rank 1, which does not answer\)" "$f")
  [ "$n" -eq 1 ] || { echo "FAIL: rank $r printed $n lines naming rank 1:"; cat "$f"; status=1; }
done
[ $status -eq 0 ] && echo "ok (every live rank named rank 1)"
exit $status
