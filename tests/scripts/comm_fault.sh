#!/bin/sh
# tests/scripts/comm_fault.sh MPIRUN TEST_COMM CASE — one fault of the
# communication layer on 4 ranks (2 for mismatch), under `timeout 120` so a
# regression fails instead of hanging. It prints everything the job printed,
# then requires: a non-zero exit status that is not the timeout's, the job
# over within LIMIT seconds, and every line of the case's expectations in
# the output.
#   hang      rank 2 hangs at its 3rd call (TGC_TEST_COMM_HANG=2:3), comm
#             timeout 3 s: every rank stops, and every rank that says why
#             names rank 2 (directly, or at the end of the chain of ranks
#             waiting for each other), e.g.
#   tgc: rank 3: all_reduce over world: no message from rank 2 for 3 s (--comm-timeout); stopping every rank
#   tgc: rank 0: all_reduce over world: no message from rank 3 for 3 s; rank 3 waits for rank 2, which does not answer (--comm-timeout); stopping every rank
#   kill      rank 1 dies of SIGKILL at its 3rd call: mpirun names it
#   exit      rank 1 exits with status 0 at its 3rd call, without closing
#             the communicator: mpirun names it
#   mismatch  rank 0 all_reduces 8 elements, rank 1 16: both say so
mpirun="$1"; prog="$2"; case="$3"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
np=4; limit=30; args="--fault 3"; env=""; blame=""
case "$case" in
  hang) env="TGC_TEST_COMM_HANG=2:3"; limit=20; blame=2
        # (Open MPI's own "MPI_ABORT was invoked" note is lost at times
        # when several ranks abort at once: not required)
        want="(--comm-timeout); stopping every rank" ;;
  kill) env="TGC_TEST_COMM_KILL=1:3"
        want="mpirun noticed that process rank 1 with PID"
        want="$want
exited on signal 9 (Killed)" ;;
  exit) env="TGC_TEST_COMM_EXIT=1:3"
        want="mpirun has exited due to process rank 1 with PID"
        want="$want
exiting improperly" ;;
  mismatch) np=2; args="--mismatch"
        want="tgc: rank 0: all_reduce over world: a message from rank 1 larger than the 16 bytes expected (do all ranks call it with the same count and dtype?)
tgc: rank 1: all_reduce over world: a message of 16 bytes from rank 0, where 32 were expected (do all ranks call it with the same count and dtype?)" ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
out=$(mktemp)
start=$(date +%s)
# shellcheck disable=SC2086
if [ -n "$env" ]; then
  timeout 120 "$mpirun" --oversubscribe -np $np -x "$env" "$prog" $args >"$out" 2>&1
else
  timeout 120 "$mpirun" --oversubscribe -np $np "$prog" $args >"$out" 2>&1
fi
rc=$?
took=$(( $(date +%s) - start ))
echo "---- mpirun -np $np $env $prog $args: exit status $rc after $took s; it printed:"
cat "$out"
echo "----"
status=0
if [ "$rc" -eq 0 ]; then echo "FAIL $case: the job ended with status 0"; status=1; fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && [ "$took" -ge 119 ]; then echo "FAIL $case: the job hung"; status=1; fi
if [ "$took" -gt "$limit" ]; then echo "FAIL $case: $took s, more than $limit"; status=1; fi
printf '%s\n' "$want" | while IFS= read -r line; do
  grep -qF -- "$line" "$out" || { echo "FAIL $case: no line with: $line"; exit 1; }
done || status=1
if [ -n "$blame" ]; then
  # every tgc line names rank $blame as the one that stopped
  bad=$(grep "^tgc: rank" "$out" | grep -v -e "no message from rank $blame for" -e ": rank $blame took no message" \
        -e "waits for rank $blame, which does not answer" -e "stopped by rank [0-9]*: rank $blame does not answer")
  if [ -n "$bad" ]; then echo "FAIL $case: a line that does not blame rank $blame: $bad"; status=1; fi
  grep -q "^tgc: rank" "$out" || { echo "FAIL $case: no rank said why it stopped"; status=1; }
fi
rm -f "$out"
[ $status -eq 0 ] && echo "ok $case"
exit $status
