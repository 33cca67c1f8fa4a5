#!/bin/sh
# tests/scripts/pipe_in_flight.sh MPIRUN TGC NP MESH MICRO SCHEDULE NL [FLAGS...]
# The pipeline keeps in flight what the planner simulates (issue 17): trains
# examples/gpt.tg --config tiny -D nL=NL for 2 steps on NP ranks with
# --mesh MESH --micro-batches MICRO --pipeline-schedule SCHEDULE, where
# every rank compares the most (micro-batch, chunk) activations, and their
# bytes, it kept at once with pass_pipe_in_flight's (plan/plan_sim.c) and
# fails on a difference; rank 0's --json "pipeline" must say they are equal
# and name the schedule. And the memory reserved for them (one arena shared
# by a rank's chunks, runtime/train.c) is the plan's peak: rank 0's
# "reserved_bytes" equals its "planned_in_flight_bytes", and no rank notes
# that it reserved more.
mpirun="$1"; tgc="$2"; np="$3"; mesh="$4"; micro="$5"; schedule="$6"; nl="$7"; shift 7
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
timeout 120 "$mpirun" --oversubscribe -np "$np" "$tgc" train examples/gpt.tg --config tiny -D "nL=$nl" --data reverse \
  --steps 2 --micro-batches "$micro" --mesh "$mesh" --pipeline-schedule "$schedule" --comm-timeout 60 --json "$@" \
  > "$dir/out" 2>&1 || { cat "$dir/out"; exit 1; }
grep -q '"planned_equals_measured": true' "$dir/out" || { cat "$dir/out"; echo "FAIL: planned != measured"; exit 1; }
name=${schedule%%:*}
grep -q "\"schedule\": \"$name\"" "$dir/out" || { cat "$dir/out"; echo "FAIL: not the $name schedule"; exit 1; }
planned=$(sed -n 's/.*"planned_in_flight_bytes": \([0-9]*\).*/\1/p' "$dir/out")
reserved=$(sed -n 's/.*"reserved_bytes": \([0-9]*\).*/\1/p' "$dir/out")
[ -n "$reserved" ] && [ "$reserved" = "$planned" ] && grep -q '"reserved_equals_planned": true' "$dir/out" ||
  { cat "$dir/out"; echo "FAIL: reserved $reserved bytes, the plan's peak is $planned"; exit 1; }
! grep 'note: pipeline stage' "$dir/out" || { echo "FAIL: a rank reserved more than the plan's peak"; exit 1; }
sed -n '/"pipeline"/,/}/p' "$dir/out"
