#!/bin/sh
# tests/scripts/shard_vocab_pad.sh MPIRUN TGC STATE_CMP NP MESH
# A vocabulary tp does not divide, padded (docs/sharding.md, "A vocabulary
# tp does not divide"): examples/gpt.tg --config tiny with V = 63 (-D V=63),
# reverse, SGD with momentum (shard_state.sh says why not Adam), on NP ranks
# with --mesh MESH (tp = 2: V padded to 64, 32 rows per rank):
#  1. 20 steps on the mesh: the loss of every step within 1e-5 of one device
#     (relative);
#  2. saved at step 10 on the mesh: the rank files hold the rows of the
#     whole [63, 32] table and no padding (the rank with the last block, 31
#     rows), and the layout metadata names the padding ("4:0:1": split over
#     tp, 1 row of padding);
#  3. that state resumed on one device and trained to step 20: steps 11-20
#     within 1e-5 of the straight run on the mesh, and the final state
#     within 1e-5 of it (assembled into a plain file);
#  4. a one-device state saved at step 10 resumed on the mesh: steps 11-20
#     within 1e-5 of the straight one-device run.
mpirun="$1"; tgc="$2"; cmp="$3"; np="$4"; mesh="$5"
cd "$(dirname "$0")/../.." || exit 2
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
M="train examples/gpt.tg --config tiny -D V=63 --data reverse --optimizer momentum --lr 0.05 --steps 20"
one() { "$tgc" $M "$@" > "$d/out" 2>&1 || { cat "$d/out"; exit 1; }; }
many() { timeout 150 "$mpirun" --oversubscribe -np "$np" "$tgc" $M --mesh "$mesh" "$@" --comm-timeout 60 > "$d/out" 2>&1 ||
  { cat "$d/out"; exit 1; }; }
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }
# within A B FIRST WHAT: the losses of steps FIRST.. of log B within 1e-5 of log A's
within() {
  losses "$1" | awk -v f="$3" '$1 >= f' > "$d/a.txt"
  losses "$2" | awk -v f="$3" '$1 >= f' > "$d/b.txt"
  [ "$(wc -l < "$d/a.txt")" -eq $((21 - $3)) ] && [ "$(wc -l < "$d/b.txt")" -eq $((21 - $3)) ] ||
    { echo "FAIL: $4: expected $((21 - $3)) logged steps"; cat "$d/a.txt" "$d/b.txt"; exit 1; }
  paste "$d/a.txt" "$d/b.txt" | awk -v m="$4" '$1 != $3 { bad = 1 }
    { r = ($2 - $4) / $2; if (r < 0) r = -r; if (r > w) w = r }
    END { printf "%s: losses within %.3g\n", m, w; exit bad || w > 1e-5 }' || { echo "FAIL: $4"; exit 1; }
}
one --log "$d/one.jsonl"
many --log "$d/many.jsonl" --save "$d/many.st"
within "$d/one.jsonl" "$d/many.jsonl" 1 "$mesh = one device (V 63 padded)"
# 2. the rank files at step 10: the whole table's rows, no padding
many --stop-at 10 --save "$d/m10.st" --log "$d/m10.jsonl"
rows=0
for f in "$d"/m10.st.step10.rank*; do
  lay=$(head -c 8192 "$f" | grep -a -o '"layout.wte":"[^"]*"')
  case "$lay" in *'"4:0:'[1-9]*',0:0"') ;; *) echo "FAIL: $f: wte's layout $lay names no padding over tp"; exit 1 ;; esac
  for t in wte opt/mom.wte; do
    r=$(head -c 8192 "$f" | grep -a -o "\"$t\":{\"dtype\":\"F32\",\"shape\":\[[0-9]*,32\]" | sed 's/.*\[\([0-9]*\),32\]/\1/')
    [ -n "$r" ] || { echo "FAIL: $f: no [N, 32] tensor $t"; exit 1; }
    [ "$t" = wte ] && rows=$((rows + r))
  done
done
# every tp block of the table once per dp coordinate: the rows add up to 63 times the ranks holding each block
[ $((rows % 63)) -eq 0 ] || { echo "FAIL: the rank files hold $rows rows of wte, not a multiple of 63 (padding saved?)"; exit 1; }
echo "rank files: wte's blocks hold $rows rows in all (63 per copy: no padding)"
# 3. resumed on one device
one --resume "$d/m10.st" --log "$d/r1.jsonl" --save "$d/r1.st"
within "$d/many.jsonl" "$d/r1.jsonl" 11 "saved on $mesh at step 10, resumed on one device"
one --resume "$d/many.st" --save "$d/many.plain" --log "$d/none.jsonl"
"$cmp" "$d/many.plain" "$d/r1.st" 1e-5 || { echo "FAIL: the state resumed on one device differs"; exit 1; }
# 4. a one-device state resumed on the mesh
one --stop-at 10 --save "$d/o10.st" --log "$d/o10.jsonl"
many --resume "$d/o10.st" --log "$d/r2.jsonl"
within "$d/one.jsonl" "$d/r2.jsonl" 11 "saved on one device at step 10, resumed on $mesh"
echo "ok: a padded vocabulary on $mesh trains, saves and resumes as one device"
