#!/bin/sh
# tests/cuda_stub/graph_dp.sh MPIRUN TGC — CUDA graphs with collectives:
# data-parallel training (--mesh dp=2, 2 ranks under mpirun) of gpt tiny on
# cuda-emu, the gradient all-reduces through the emulated NCCL, once with
# TGC_CUDA_GRAPH=0 and once with graphs (each program cut at its
# collectives, the segments between them captured and launched). Requires
# every step's loss bit for bit equal, each rank's saved shard byte for
# byte equal, and (TGC_CUDA_STATS=1) that the graph run captured and
# launched graphs while the other captured none. (With the stub's other
# tests because it is about the same backend code; it runs cuda-emu.)
mpirun="$1"; tgc="$2"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
for g in 0 1; do
  TGC_CUDA_GRAPH=$g TGC_CUDA_STATS=1 timeout 200 "$mpirun" --oversubscribe -np 2 -x TGC_CUDA_GRAPH -x TGC_CUDA_STATS \
    -x TGC_CACHE_DIR "$tgc" train examples/gpt.tg --config tiny --data copy --steps 6 --backend cuda-emu \
    --mesh dp=2 --comm-timeout 60 --log "$dir/g$g.jsonl" --save "$dir/g$g.st" > "$dir/g$g.out" 2>&1 ||
    { cat "$dir/g$g.out"; echo "FAIL: the run with TGC_CUDA_GRAPH=$g"; exit 1; }
  grep -q 'through NCCL' "$dir/g$g.out" || { cat "$dir/g$g.out"; echo "FAIL: no collectives through NCCL"; exit 1; }
  sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/g$g.jsonl" > "$dir/loss$g.txt"
done
cat "$dir/g1.out"
[ "$(wc -l < "$dir/loss1.txt")" -eq 6 ] || { echo "FAIL: expected 6 logged steps"; exit 1; }
cmp "$dir/loss0.txt" "$dir/loss1.txt" || { paste "$dir/loss0.txt" "$dir/loss1.txt"; echo "FAIL: losses differ"; exit 1; }
for r in 0 1; do
  cmp "$dir/g0.st.step6.rank$r-of-2" "$dir/g1.st.step6.rank$r-of-2" || { echo "FAIL: rank $r's state differs"; exit 1; }
done
field() { sed -n "s/^cuda stats: .* \([0-9]*\) $2.*/\1/p" "$1" | head -1; }
c0=$(field "$dir/g0.out" "graph captures"); c1=$(field "$dir/g1.out" "graph captures")
l1=$(field "$dir/g1.out" "graph launches")
if [ "$c0" != 0 ] || [ -z "$c1" ] || [ "$c1" -eq 0 ] || [ -z "$l1" ] || [ "$l1" -eq 0 ]; then
  echo "FAIL: graphs: $c0 captures without, $c1 captures and $l1 launches with"; exit 1
fi
echo "ok: dp=2 on cuda-emu, losses and shards bit for bit with and without graphs ($c1 captures, $l1 graph launches on rank 0's device)"
