#!/bin/sh
# tests/scripts/plan_run.sh MPIRUN TGC — a plan runs as printed: `tgc plan`
# for gpt tiny on 4 CPU ranks (cpu-host) saves its plan, and the command its
# last line prints runs under mpirun -np 4 (SOURCE: the reverse task, for 3
# steps, --json); rank 0's summary must show the plan's mesh, ZeRO stage,
# pipeline schedule, checkpoint policy and micro-batches. The same without
# --save-plan: the command of explicit flags runs too, with the same settings.
# An interleaved plan (2 chunks per rank, the planner's stage boundaries)
# runs as printed, and a plan file with uneven stages (layers 0-5 and 6-15)
# runs as written: the trainer's schedule, chunks and activations in flight
# are the plan's.
mpirun="$1"; tgc="$2"
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
planargs="examples/gpt.tg --config tiny --cluster cpu-host --gpus 4 --global-batch 8 --dtype fp32"

# the value of "key" in a JSON file (the first one; jansson's indented form: one member a line)
field() { sed -n "s/^ *\"$2\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}\$/\1/p" "$1" | head -1; }

# run_printed OUT: runs the last line of OUT (the command) with 3 steps; its JSON into $dir/run.json
run_printed() {
  cmd=$(tail -1 "$1" | sed 's/^ *//')
  case "$cmd" in "mpirun -np 4 tgc train examples/gpt.tg --config tiny "*" --data SOURCE") ;;
    *) echo "FAIL: the plan's last line is not its command: $cmd"; exit 1 ;; esac
  cmd=$(echo "$cmd" | sed "s|^mpirun -np 4 tgc |$mpirun --oversubscribe -np 4 $tgc |; s| --data SOURCE\$| --data reverse|")
  echo "$cmd"
  # shellcheck disable=SC2086
  timeout 150 $cmd --steps 3 --comm-timeout 60 --json > "$dir/run.json" 2> "$dir/run.err" ||
    { echo "FAIL: the printed command failed"; cat "$dir/run.err"; exit 1; }
}

# same KEY PLANVALUE RUNVALUE
same() { [ -n "$2" ] && [ "$2" = "$3" ] || { echo "FAIL: $1: the plan says '$2', the run '$3'"; cat "$dir/run.json"; exit 1; }; }

# shellcheck disable=SC2086
"$tgc" plan $planargs --save-plan "$dir/plan.json" > "$dir/plan.out" || { echo "FAIL: tgc plan"; exit 1; }
grep '^plan: ' "$dir/plan.out"
run_printed "$dir/plan.out"
# the run's settings (rank 0's "parallel") against the plan file's
sed -n '/"parallel"/,/"micro_batches"/p' "$dir/run.json" > "$dir/par.json"
for k in dp tp pp sp zero checkpoint micro_batches; do
  same "$k" "$(field "$dir/plan.json" "$k")" "$(field "$dir/par.json" "$k")"
done
same "pipeline schedule" "$(sed -n '/"pipeline_schedule"/,/}/p' "$dir/plan.json" | sed -n 's/.*"name": "\(.*\)",/\1/p')" \
  "$(field "$dir/par.json" pipeline_schedule)"
same "plan file" "$dir/plan.json" "$(field "$dir/par.json" plan)"
same "ranks" 4 "$(field "$dir/run.json" ranks)"
same "batch" "$(($(field "$dir/plan.json" micro_batch) * $(field "$dir/plan.json" dp)))" "$(field "$dir/par.json" batch)"
same "steps" 3 "$(field "$dir/run.json" steps_run)"
echo "plan file: $(grep -c . "$dir/plan.json") lines; the run: $(sed -n 's/^ *//p' "$dir/par.json" | tr -d '\n')"

# without --save-plan: the plan as flags (pp 2 with 1f1b, ZeRO 1 and selective recompute fixed, so every flag shows)
# shellcheck disable=SC2086
"$tgc" plan $planargs --mesh dp=2,pp=2 --pipeline-schedule 1f1b --zero 1 --checkpoint selective > "$dir/flags.out" ||
  { echo "FAIL: tgc plan (flags)"; exit 1; }
run_printed "$dir/flags.out"
sed -n '/"parallel"/,/"micro_batches"/p' "$dir/run.json" > "$dir/par.json"
same dp 2 "$(field "$dir/par.json" dp)"
same pp 2 "$(field "$dir/par.json" pp)"
same zero 1 "$(field "$dir/par.json" zero)"
same "pipeline schedule" 1f1b "$(field "$dir/par.json" pipeline_schedule)"
same checkpoint selective "$(field "$dir/par.json" checkpoint)"

# layouts by search (--tp-layout search, the default): the plan file and the command carry it, the run searches as
# the planner did
# shellcheck disable=SC2086
"$tgc" plan $planargs --mesh dp=2,tp=2 --save-plan "$dir/search.json" > "$dir/search.out" ||
  { echo "FAIL: tgc plan (search)"; exit 1; }
same "plan file tp_layout" search "$(field "$dir/search.json" tp_layout)"
run_printed "$dir/search.out"
sed -n '/"parallel"/,/"micro_batches"/p' "$dir/run.json" > "$dir/par.json"
same "tp layout" search "$(field "$dir/par.json" tp_layout)"
same tp 2 "$(field "$dir/par.json" tp)"
# shellcheck disable=SC2086
"$tgc" plan $planargs --mesh dp=2,tp=2 --tp-layout megatron > "$dir/rule_flags.out" || { echo "FAIL: tgc plan (megatron, flags)"; exit 1; }
tail -1 "$dir/rule_flags.out" | grep -q -- "--tp-layout megatron" || { echo "FAIL: the command lacks --tp-layout megatron"; exit 1; }
run_printed "$dir/rule_flags.out"
sed -n '/"parallel"/,/"micro_batches"/p' "$dir/run.json" > "$dir/par.json"
same "tp layout" megatron "$(field "$dir/par.json" tp_layout)"
# a plan file that says another layout than the flag beside it is refused
sed 's/"tp_layout": "search"/"tp_layout": "megatron"/' "$dir/search.json" > "$dir/meg.json"
if "$tgc" train examples/gpt.tg --config tiny --plan "$dir/meg.json" --tp-layout search --data reverse --steps 1 > /dev/null 2> "$dir/err.txt"; then
  echo "FAIL: a plan's tp_layout against --tp-layout was accepted"; exit 1
fi
grep -q "tp-layout search: the plan .* says --tp-layout megatron" "$dir/err.txt" || { echo "FAIL: message"; cat "$dir/err.txt"; exit 1; }
sed 's/"tp_layout": "search"/"tp_layout": "rules"/' "$dir/search.json" > "$dir/bad.json"
if "$tgc" train examples/gpt.tg --config tiny --plan "$dir/bad.json" --data reverse --steps 1 > /dev/null 2> "$dir/err.txt"; then
  echo "FAIL: a damaged tp_layout was accepted"; exit 1
fi
grep -q "tp_layout" "$dir/err.txt" || { echo "FAIL: message"; cat "$dir/err.txt"; exit 1; }
cat "$dir/err.txt"

# an interleaved plan: 2 chunks per rank, the planner's boundaries
# shellcheck disable=SC2086
"$tgc" plan examples/gpt.tg --config tiny -D nL=4 --cluster cpu-host --gpus 4 --global-batch 8 --dtype fp32 \
  --mesh dp=2,pp=2 --pipeline-schedule interleaved:2 --save-plan "$dir/il.json" > "$dir/il.out" ||
  { echo "FAIL: tgc plan (interleaved)"; exit 1; }
run_printed "$dir/il.out"
sed -n '/"pipeline"/,/}/p' "$dir/run.json" > "$dir/pipe.json"
same "pipeline schedule" interleaved "$(field "$dir/pipe.json" schedule)"
same chunks 2 "$(field "$dir/pipe.json" chunks)"
same "activations in flight" true "$(field "$dir/pipe.json" planned_equals_measured)"
# a plan file with uneven stages (its boundary: layer 6 of 16)
timeout 150 "$mpirun" --oversubscribe -np 4 "$tgc" train tests/data/plan_model.tg --config deep \
  --plan tests/data/plans/uneven.json --data xor --steps 2 --comm-timeout 60 --json > "$dir/run.json" 2> "$dir/run.err" ||
  { echo "FAIL: the uneven plan did not run"; cat "$dir/run.err"; exit 1; }
sed -n '/"pipeline"/,/}/p' "$dir/run.json" > "$dir/pipe.json"
same "pipeline schedule" 1f1b "$(field "$dir/pipe.json" schedule)"
same "activations in flight" true "$(field "$dir/pipe.json" planned_equals_measured)"
echo PASS
