#!/bin/bash
# tests/scripts/stats_graph_launches.sh NP [MESH MPIRUN] — `tgc stats` predicts the
# host's calls per training step under CUDA graphs exactly as the cuda
# backend makes them: gpt tiny trained on cuda-emu (copy data) for 6 and for
# 8 steps with TGC_CUDA_STATS=1, on NP ranks under MPIRUN (NP > 1, --mesh
# MESH); the graph launches of the 2 extra steps (every run after a
# program's first launches its graphs) over 2 must equal `tgc stats
# --json`'s graph_launches (the step's and the update's segments, cut by
# analysis's pass_graph_pieces), and the calls rank 0's comm layer counts
# per step (its "communication of rank 0 per step" table) its collectives
# less its mesh slices (host-run pieces that communicate nothing). tgc
# train runs with --clip 0: `tgc stats` counts the update without clipping.
# Prints both; exit status 1 on a difference. `tgc` from PATH.
set -o pipefail
np="$1"; mesh="${2:+--mesh $2}"; mpirun="${3:-mpirun}"
model="examples/gpt.tg --config tiny"
json=$(tgc stats $model $mesh --json) || exit 1
field() { echo "$json" | sed -n "s/^  \"$1\": \([0-9]*\),*$/\1/p"; }
predicted_graphs=$(field graph_launches); predicted_coll=$(( $(field collectives) - $(field mesh_slices) ))
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
train() {
  if [ "$np" -gt 1 ]; then
    TGC_CUDA_STATS=1 timeout 300 "$mpirun" --oversubscribe -np "$np" -x TGC_CUDA_STATS ${TGC_CACHE_DIR:+-x TGC_CACHE_DIR} \
      tgc train $model --data copy --clip 0 --steps "$1" --backend cuda-emu $mesh --comm-timeout 60
  else
    TGC_CUDA_STATS=1 timeout 300 tgc train $model --data copy --clip 0 --steps "$1" --backend cuda-emu
  fi > "$dir/out$1" 2>&1 || { cat "$dir/out$1"; echo "FAIL: tgc train --steps $1"; exit 1; }
}
train 6 && train 8 || exit 1
launches() { sed -n 's/^cuda stats: .* \([0-9][0-9]*\) graph launches.*/\1/p' "$dir/out$1" | head -1; }
l6=$(launches 6); l8=$(launches 8)
[ -n "$l6" ] && [ -n "$l8" ] || { cat "$dir/out8"; echo "FAIL: no cuda stats line"; exit 1; }
measured_graphs=$(( (l8 - l6) / 2 ))
# the table's rows ("  all_reduce      over dp      30 calls ..."), wherever the other rank's lines fall
measured_coll=$(sed -n 's/^  *[a-z_]*  *over [a-z]*  *\([0-9][0-9]*\) calls .*/\1/p' "$dir/out8" | awk '{s += $1} END {print s + 0}')
echo "graph launches a step: tgc stats $predicted_graphs, cuda-emu $measured_graphs"
echo "collectives that communicate a step: tgc stats $predicted_coll, cuda-emu $measured_coll"
[ "$predicted_graphs" = "$measured_graphs" ] && [ "$predicted_coll" = "$measured_coll" ] || { echo "FAIL: they differ"; exit 1; }
