#!/bin/sh
# tests/scripts/shard_fault.sh MPIRUN TGC CASE — a rank of a sharded
# training run fails (gpt tiny, dp=2, saving every 4 steps):
#   kill  rank 1 dies of SIGKILL in its 300th collective (a few steps in):
#         the job ends non-zero with mpirun naming the rank;
#   hang  rank 1 hangs in its 300th collective, --comm-timeout 3: every
#         rank stops within seconds, the message naming rank 1 (rank 0
#         waiting for its message, or for it to take one).
# Either way the state file is whole: the last save before the fault,
# which resumes on one device (tgc train --resume) and carries its step.
mpirun="$1"; tgc="$2"; case="$3"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$(dirname "$0")/../.." || exit 2
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
M="train examples/gpt.tg --config tiny --data reverse --steps 40"
case "$case" in
  kill) env="TGC_TEST_COMM_KILL=1:300"; want="mpirun noticed that process rank 1"; limit=60 ;;
  hang) env="TGC_TEST_COMM_HANG=1:300"; want="no message from rank 1|rank 1 took no message"; limit=30 ;; # (receiving or sending)
  *) echo "unknown case $case"; exit 2 ;;
esac
start=$(date +%s)
# shellcheck disable=SC2086
timeout 120 "$mpirun" --oversubscribe -np 2 -x "$env" "$tgc" $M --mesh dp=2 --save "$d/s.st" --save-every 4 \
  --comm-timeout 3 > "$d/out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
echo "---- exit status $rc after $took s; the job printed (last lines):"
tail -8 "$d/out"
echo "----"
[ "$rc" -ne 0 ] || { echo "FAIL: status 0"; exit 1; }
[ "$took" -le "$limit" ] || { echo "FAIL: $took s, more than $limit"; exit 1; }
grep -qE "$want" "$d/out" || { echo "FAIL: no line with: $want"; exit 1; }
grep -q "step 40/40" "$d/out" && { echo "FAIL: the run finished before the fault"; exit 1; }
# the state on disk is a whole earlier save
# shellcheck disable=SC2086
"$tgc" $M --resume "$d/s.st" --stop-at 1 --json > "$d/resume.out" 2>&1 || { cat "$d/resume.out"; echo "FAIL: the state does not resume"; exit 1; }
step=$(sed -n 's/.*"steps": \([0-9]*\),.*/\1/p' "$d/resume.out" | head -1)
echo "resumed the saved state at step $step"
case "$step" in 4|8|12|16|20|24|28|32|36) ;; *) echo "FAIL: resumed at step '$step'"; exit 1 ;; esac
echo ok
