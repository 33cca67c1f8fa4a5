#!/bin/sh
# tests/scripts/mesh_auto.sh MPIRUN TGC NP [CLUSTER_FLAGS NAME] — `tgc train --mesh auto` under
# mpirun with NP ranks: exit status 0, rank 0 prints exactly one
# "mesh auto: dp=D,tp=T,pp=P..." line whose degrees multiply to NP, the
# run trains all its 20 steps with a finite loss, and
# the same command without a launcher runs on one rank (dp=1,tp=1,pp=1).
# With CLUSTER_FLAGS (e.g. "--cluster dgx-a100") the planner plans on that
# cluster, and the line names it ("NP ranks of NAME").
mpirun="$1"; tgc="$2"; np="$3"; cflags="${4:-}"; cname="${5:-cpu-host}"
cd "$(dirname "$0")/../.." || exit 2
out=$(mktemp); err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
args="train examples/gpt.tg --config tiny --data reverse --steps 20 --print-every 10 --micro-batches 2 --mesh auto $cflags"
# shellcheck disable=SC2086
"$mpirun" -np "$np" --oversubscribe "$tgc" $args >"$out" 2>"$err"
rc=$?
if [ "$rc" -ne 0 ]; then echo "FAIL: exit status $rc"; cat "$err"; exit 1; fi
n=$(grep -c '^mesh auto: ' "$out")
if [ "$n" -ne 1 ]; then echo "FAIL: $n 'mesh auto:' lines (want 1, rank 0's)"; cat "$out"; exit 1; fi
line=$(grep '^mesh auto: ' "$out")
echo "$line"
case "$line" in *" $np ranks of $cname;"*) ;; *) echo "FAIL: the plan is not for $np ranks of $cname"; exit 1 ;; esac
d=$(echo "$line" | sed -n 's/^mesh auto: dp=\([0-9]*\),tp=\([0-9]*\),pp=\([0-9]*\).*/\1 \2 \3/p')
set -- $d
if [ $# -ne 3 ] || [ $(($1 * $2 * $3)) -ne "$np" ]; then echo "FAIL: degrees '$d' do not multiply to $np"; exit 1; fi
# the loss of the first and the last printed step (rank 0's lines)
first=$(grep -o 'loss [0-9.]*' "$out" | head -1 | cut -d' ' -f2)
last=$(grep -o 'loss [0-9.]*' "$out" | tail -1 | cut -d' ' -f2)
if [ -z "$first" ] || [ -z "$last" ]; then echo "FAIL: no loss printed"; cat "$out"; exit 1; fi
# 20 steps are too few for the loss to fall reliably: every step ran, with a finite loss
if ! awk -v a="$first" -v b="$last" 'BEGIN { exit !(a + 0 > 0 && b + 0 > 0 && b < 100) }'; then echo "FAIL: loss $first -> $last"; exit 1; fi
grep -q 'step 20' "$out" || { echo "FAIL: step 20 not reached"; cat "$out"; exit 1; }
echo "loss $first -> $last"
# no launcher: one rank
env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_RANK "$tgc" $args >"$out" 2>"$err" || { echo "FAIL: one rank"; cat "$err"; exit 1; }
grep -q '^mesh auto: dp=1,tp=1,pp=1 ' "$out" || { echo "FAIL: without a launcher:"; head -2 "$out"; exit 1; }
echo PASS
