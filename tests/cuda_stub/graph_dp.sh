#!/bin/sh
# tests/cuda_stub/graph_dp.sh MPIRUN TGC — CUDA graphs and overlapped
# collectives: data-parallel training (--mesh dp=2, 2 ranks under mpirun)
# of gpt tiny on cuda-emu, the gradient collectives through the emulated
# NCCL in buckets of 0.01 MiB (--bucket-mb: 8 buckets a step instead of
# one), 6 steps each:
#   g0   TGC_CUDA_GRAPH=0: every action issued
#   g1   graphs (each program cut at its collectives, the segments between
#        captured and launched), the buckets in flight on the collectives'
#        own stream while the next segments run (the default)
#   s1   graphs, TGC_COMM_OVERLAP=0: every collective waited for in its call
#   z0/z1  --zero 1 (reduce-scatters in flight), overlap off and on
#   j1   as g1 with --json: "bucket_mb" and the "overlap" object
# Requires every step's loss bit for bit equal and each rank's saved shard
# byte for byte equal between g0, g1 and s1, and between z0 and z1; that
# the graph runs captured and launched graphs while g0 captured none
# (TGC_CUDA_STATS=1); that the overlap runs say how many batches flew
# (the buckets, and the update's loss sums; under ZeRO 1 its all-gathers
# too, which the update reads at once) and, without ZeRO, that none was
# waited for before its program's end; and a planted race
# (TGC_TEST_COMM_NO_JOIN=1: nothing waits for the buckets) fails, named by
# the emulation (cuda-emu defers NCCL work on a non-blocking stream until
# an event orders it, and refuses work that touches its bytes before).
mpirun="$1"; tgc="$2"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
run() { # NAME GRAPH OVERLAP [tgc options]
  name=$1; g=$2; ov=$3; shift 3
  TGC_CUDA_GRAPH=$g TGC_COMM_OVERLAP=$ov TGC_CUDA_STATS=1 timeout 200 "$mpirun" --oversubscribe -np 2 -x TGC_CUDA_GRAPH \
    -x TGC_COMM_OVERLAP -x TGC_CUDA_STATS -x TGC_CACHE_DIR ${TGC_TEST_COMM_NO_JOIN:+-x TGC_TEST_COMM_NO_JOIN} "$tgc" train examples/gpt.tg \
    --config tiny --data copy --steps 6 --backend cuda-emu --mesh dp=2 --bucket-mb 0.01 --comm-timeout 60 \
    --log "$dir/$name.jsonl" --save "$dir/$name.st" "$@" > "$dir/$name.out" 2>&1
}
for c in "g0 0 1" "g1 1 1" "s1 1 0" "z0 1 0 --zero 1" "z1 1 1 --zero 1"; do
  set -- $c
  run "$@" || { cat "$dir/$1.out"; echo "FAIL: the run $c"; exit 1; }
  grep -q 'through NCCL' "$dir/$1.out" || { cat "$dir/$1.out"; echo "FAIL: $1: no collectives through NCCL"; exit 1; }
  sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$dir/$1.jsonl" > "$dir/$1.loss"
  [ "$(wc -l < "$dir/$1.loss")" -eq 6 ] || { cat "$dir/$1.out"; echo "FAIL: $1: expected 6 logged steps"; exit 1; }
done
cat "$dir/g1.out"
same() { # A B
  cmp "$dir/$1.loss" "$dir/$2.loss" || { paste "$dir/$1.loss" "$dir/$2.loss"; echo "FAIL: losses differ ($1, $2)"; exit 1; }
  for r in 0 1; do
    cmp "$dir/$1.st.step6.rank$r-of-2" "$dir/$2.st.step6.rank$r-of-2" || { echo "FAIL: rank $r's state differs ($1, $2)"; exit 1; }
  done
}
same g0 g1; same g0 s1; same z0 z1
field() { sed -n "s/^cuda stats: .* \([0-9]*\) $2.*/\1/p" "$1" | head -1; }
c0=$(field "$dir/g0.out" "graph captures"); c1=$(field "$dir/g1.out" "graph captures")
l1=$(field "$dir/g1.out" "graph launches")
if [ "$c0" != 0 ] || [ -z "$c1" ] || [ "$c1" -eq 0 ] || [ -z "$l1" ] || [ "$l1" -eq 0 ]; then
  echo "FAIL: graphs: $c0 captures without, $c1 captures and $l1 launches with"; exit 1
fi
for n in g0 g1; do # the step's buckets and the update's loss sums: nothing waited for early
  grep -q "overlap: [0-9]* batches a step on the collectives' stream .*; 0 waited for before their program's end" \
    "$dir/$n.out" || { grep overlap "$dir/$n.out"; echo "FAIL: $n: no overlap line, or a batch waited for early"; exit 1; }
done
b1=$(sed -n "s/.*overlap: \([0-9]*\) batches.*/\1/p" "$dir/g1.out")
z1=$(sed -n "s/.*overlap: \([0-9]*\) batches.*/\1/p" "$dir/z1.out")
[ "$b1" -ge 4 ] && [ "$z1" -ge 4 ] || { echo "FAIL: $b1 and $z1 batches a step (0.01 MiB buckets of gpt tiny: 8)"; exit 1; }
if grep -q "overlap:" "$dir/s1.out"; then echo "FAIL: TGC_COMM_OVERLAP=0 still overlaps"; exit 1; fi
# the --json summary: the bucket size and what flew
run j1 1 1 --json || { cat "$dir/j1.out"; echo "FAIL: the run with --json"; exit 1; }
tr -d ' \n' < "$dir/j1.out" | grep -q '"bucket_mb":0.01[,}]' || { cat "$dir/j1.out"; echo "FAIL: no bucket_mb in --json"; exit 1; }
tr -d ' \n' < "$dir/j1.out" | grep -q '"overlap":{"batches":8,"collectives":30,"early_joins":0}' ||
  { cat "$dir/j1.out"; echo "FAIL: no overlap in --json"; exit 1; }
# the planted race: the update reads the gradients while their all-reduces are in flight
if TGC_TEST_COMM_NO_JOIN=1 run planted 1 1; then cat "$dir/planted.out"; echo "FAIL: the planted race ran"; exit 1; fi
grep -q "while ncclAllReduce on stream .* may still write" "$dir/planted.out" ||
  { cat "$dir/planted.out"; echo "FAIL: the planted race was not named"; exit 1; }
echo "ok: dp=2 on cuda-emu, $b1 batches a step in flight on the collectives' stream; losses and shards bit for bit" \
  "with and without graphs and overlap, ZeRO 1 too ($c1 captures, $l1 graph launches on rank 0's device); the" \
  "planted race named"
