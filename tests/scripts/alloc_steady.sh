#!/bin/sh
# tests/scripts/alloc_steady.sh TGC SHIM — a steady training step allocates
# nothing on the heap: the process's heap allocations (counted by the
# LD_PRELOAD shim bench/malloc_count.c) are the same for 2 and 4 steps, for
# K = 1 and K = 2 micro-batches, on a sequence task (with token accuracy) and
# a vector task.
tgc="$1"; shim="$2"
cd "$(dirname "$0")/../.." || exit 2
status=0
count() { OMP_WAIT_POLICY=passive LD_PRELOAD="$shim" "$tgc" "$@" 2>&1 >/dev/null | sed -n 's/^malloc_count: //p' | tail -1; }
for model in "examples/reverse.tg --data reverse" "examples/gpt.tg --config tiny --data reverse --micro-batches 2" \
             "examples/mlp.tg --data xor --optimizer momentum"; do
  # shellcheck disable=SC2086
  a=$(count train $model --steps 2); b=$(count train $model --steps 4)
  if [ -z "$a" ] || [ "$a" != "$b" ]; then
    echo "FAIL train $model: 2 steps: $a; 4 steps: $b"; status=1
  else
    echo "ok train $model: $a for 2 steps and for 4"
  fi
done
exit $status
