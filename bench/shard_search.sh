#!/bin/sh
# bench/shard_search.sh — how long the shard pass's layout search takes
# (--tp-layout search, docs/sharding.md): the training graph of each model
# compiled and sharded by `tgc stats --dump-after shard`, once with the
# search and once with Megatron-LM's rule; the difference is the search
# (each of its evaluations shards the whole training program). Prints the
# evaluations the search made and both commands' wall and CPU time, the
# fastest of REPEAT runs (the machine is shared: quote the ratio, with the
# load). Nothing is asserted.
#   - the textbook chain (tests/models/textbook_chain.tg) on tp = 2
#   - gpt2-124m (B = 4, T = 64) on tp = 8
#   - GPT-3 175B (bf16) on tp = 8
# Environment: TGC (build/tgc), REPEAT (3), BIG (1: include GPT-3 175B).
set -eu
cd "$(dirname "$0")/.."
TGC=${TGC:-build/tgc}
REPEAT=${REPEAT:-3}
BIG=${BIG:-1}
if [ -r /proc/loadavg ]; then echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"; fi
best() { # label layout args...: the fastest wall time of REPEAT runs, its CPU time, the evaluations
  label=$1; layout=$2; shift 2
  i=0; bw=""; bc=""; ev="-"
  while [ $i -lt "$REPEAT" ]; do
    out=$( { /usr/bin/time -f "TIME %e %U %S" "$TGC" stats "$@" --tp-layout "$layout" --dump-after shard | grep '^# tp layouts'; } 2>&1 || true)
    w=$(printf '%s\n' "$out" | awk '/^TIME/ { print $2 }')
    c=$(printf '%s\n' "$out" | awk '/^TIME/ { printf "%.2f", $3 + $4 }')
    e=$(printf '%s\n' "$out" | sed -n 's/.*tp = [0-9]*, \([0-9]*\) evaluations.*/\1/p')
    [ -n "$e" ] && ev=$e
    if [ -z "$bw" ] || awk -v a="$w" -v b="$bw" 'BEGIN { exit !(a < b) }'; then bw=$w; bc=$c; fi
    i=$((i + 1))
  done
  printf '%-34s %-9s %6s evaluations  %8s s wall  %8s s CPU\n' "$label" "$layout" "$ev" "$bw" "$bc"
}
for layout in megatron search; do
  best "textbook chain, tp=2" $layout tests/models/textbook_chain.tg --mesh tp=2
  best "gpt2-124m B=4 T=64, tp=8" $layout examples/gpt.tg --config gpt2_124m -D B=4 -D T=64 --mesh tp=8
  [ "$BIG" = 1 ] && best "gpt3-175b bf16, tp=8" $layout examples/gpt.tg --config gpt3_175b --dtype bf16 --mesh tp=8
done
# tgc plan with each layout: the planner searches once per (t, sp) it considers, on the same 3-layer graph
# tgc train searches (docs/sharding.md, "One search for tgc plan and tgc train")
plan_best() { # label layout args...
  label=$1; layout=$2; shift 2
  i=0; bw=""; bc=""
  while [ $i -lt "$REPEAT" ]; do
    out=$( { /usr/bin/time -f "TIME %e %U %S" "$TGC" plan "$@" --tp-layout "$layout" > /dev/null; } 2>&1 || true)
    w=$(printf '%s\n' "$out" | awk '/^TIME/ { print $2 }')
    c=$(printf '%s\n' "$out" | awk '/^TIME/ { printf "%.2f", $3 + $4 }')
    if [ -z "$bw" ] || awk -v a="$w" -v b="$bw" 'BEGIN { exit !(a < b) }'; then bw=$w; bc=$c; fi
    i=$((i + 1))
  done
  printf '  %-44s %-9s plan %6s s wall %6s s CPU\n' "$label" "$layout" "$bw" "$bc"
}
echo "tgc plan (the fastest of $REPEAT):"
for layout in megatron search; do
  plan_best "gpt2-124m on 8 GPUs (dgx-h100)" $layout examples/gpt.tg --config gpt2_124m --cluster dgx-h100 --gpus 8 --global-batch 64
  [ "$BIG" = 1 ] && plan_best "gpt3-175b on 1,024 A100s" $layout examples/gpt.tg --config gpt3_175b --cluster dgx-a100 --gpus 1024 --global-batch 1536
done
