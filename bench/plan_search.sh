#!/bin/sh
# bench/plan_search.sh — how long `tgc plan` takes to search: GPT-3 175B on
# 1,024 GPUs (128 dgx-a100 nodes, global batch 1,536) and the 1T-parameter
# model of Narayanan et al. 2021 on 3,072 GPUs (384 nodes, global batch
# 3,072), with --top 3. Prints, per run, the search's own wall time (what
# `tgc plan` reports: enumeration, memory check, pruning, simulation), the
# time to compile the training graph six times (three checkpoint policies
# at two micro-batch sizes) and the whole command's wall and CPU time; the
# fastest of REPEAT runs is the figure to quote (the machine is shared).
# Nothing is asserted.
#
# Environment: TGC (build/tgc), REPEAT (5).
set -eu
cd "$(dirname "$0")/.."
TGC=${TGC:-build/tgc}
REPEAT=${REPEAT:-5}
if [ -r /proc/loadavg ]; then echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"; fi
run() { # label config cluster batch
  i=0
  while [ $i -lt "$REPEAT" ]; do
    out=$( { /usr/bin/time -f "TIME %e %U %S" "$TGC" plan examples/gpt.tg --config "$2" --cluster "$3" \
      --global-batch "$4" --top 3 | sed -n 4p; } 2>&1)
    printf '%s\n' "$out" | awk -v l="$1" '
      /^search:/ { for (i = 1; i <= NF; i++) {
                     if ($i == "plans" && $(i + 1) == "in") { n = $(i - 1); s = $(i + 2); sc = $(i + 4) }
                     if ($i == "times" && $(i + 1) == "in") { c = $(i + 2); cc = $(i + 4) } } }
      /^TIME/ { w = $2; cpu = $3 + $4 }
      END { printf "%-36s %s plans: search %s s (%s s CPU), compile %s s (%s s CPU); command %s s wall, %.2f s CPU\n",
                   l, n, s, sc, c, cc, w, cpu }'
    i=$((i + 1))
  done
}
run "gpt3-175b, 1,024 GPUs, batch 1,536" gpt3-175b dgx-a100:128 1536
run "megatron-1t, 3,072 GPUs, batch 3,072" megatron-1t dgx-a100:384 3072
