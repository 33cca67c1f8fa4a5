#!/bin/sh
# tests/scripts/shard_state.sh MPIRUN TGC STATE_CMP
# Sharded training state (gpt tiny, reverse, SGD with momentum, ZeRO 1 on
# dp=2,tp=2; momentum, not Adam: Adam divides by the root of each gradient's
# square, so a gradient that is rounding noise (the bias of k, which softmax
# cancels exactly) moves by the learning rate whatever its size, and two
# summation orders then give different parameters though the same loss):
#  1. 10 steps saved, then resumed on the same mesh to step 20: the loss of
#     every step equals a straight 20-step run bit for bit, and so does the
#     state (the index and its rank files, assembled by resuming on one
#     device with nothing left to train and saving a plain file);
#  2. the step-10 state resumed on one device, on dp=4, on tp=2,sp and on
#     pp=2 (a
#     different mesh: resharded on load) and trained to step 20: within
#     1e-5 of the straight run, losses and parameters;
#  3. the files of a replaced save are gone; a missing rank file is an error
#     naming it.
mpirun="$1"; tgc="$2"; cmp="$3"
cd "$(dirname "$0")/../.." || exit 2
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
M="train examples/gpt.tg --config tiny --data reverse --optimizer momentum --lr 0.05 --zero 1"
run() { np=$1; shift; timeout 150 "$mpirun" --oversubscribe -np "$np" "$tgc" "$@" --comm-timeout 60 > "$d/out" 2>&1 || { cat "$d/out"; exit 1; }; }
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }
# shellcheck disable=SC2086
run 4 $M --mesh dp=2,tp=2 --steps 20 --log "$d/straight.jsonl" --save "$d/straight.st"
# shellcheck disable=SC2086
run 4 $M --mesh dp=2,tp=2 --steps 20 --stop-at 10 --log "$d/resumed.jsonl" --save "$d/s10.st"
mkdir "$d/keep" && cp "$d"/s10.st "$d"/s10.st.step10.* "$d/keep/" # the index names its files: keep them together
# shellcheck disable=SC2086
run 4 $M --mesh dp=2,tp=2 --steps 20 --resume "$d/s10.st" --log "$d/resumed.jsonl" --save "$d/s10.st"
if [ "$(losses "$d/straight.jsonl")" != "$(losses "$d/resumed.jsonl")" ]; then
  echo "FAIL: the resumed run's losses differ"; paste "$d/straight.jsonl" "$d/resumed.jsonl"; exit 1
fi
if ls "$d"/s10.st.step10.* > /dev/null 2>&1; then echo "FAIL: the replaced save's files are still there"; exit 1; fi
# assemble both states into plain files (resume on one device, nothing to train)
"$tgc" $M --steps 20 --resume "$d/straight.st" --save "$d/straight.plain" > "$d/out" 2>&1 || { cat "$d/out"; exit 1; }
"$tgc" $M --steps 20 --resume "$d/s10.st" --save "$d/resumed.plain" > "$d/out" 2>&1 || { cat "$d/out"; exit 1; }
"$cmp" "$d/straight.plain" "$d/resumed.plain" 0 || { echo "FAIL: the resumed state differs"; exit 1; }
# other meshes from the step-10 state
for mesh in one dp=4 tp=2,sp pp=2; do
  case $mesh in
  one) "$tgc" $M --steps 20 --resume "$d/keep/s10.st" --log "$d/$mesh.jsonl" --save "$d/$mesh.st" > "$d/out" 2>&1 ||
         { cat "$d/out"; exit 1; } ;;
  dp=4) run 4 $M --mesh "$mesh" --steps 20 --resume "$d/keep/s10.st" --log "$d/$mesh.jsonl" --save "$d/$mesh.st" ;;
  *) run 2 $M --mesh "$mesh" --steps 20 --resume "$d/keep/s10.st" --log "$d/$mesh.jsonl" --save "$d/$mesh.st" ;;
  esac
  if [ "$mesh" != one ]; then
    "$tgc" $M --steps 20 --resume "$d/$mesh.st" --save "$d/$mesh.plain" > "$d/out" 2>&1 || { cat "$d/out"; exit 1; }
  else
    cp "$d/one.st" "$d/one.plain"
  fi
  losses "$d/straight.jsonl" | sed -n '11,20p' > "$d/a.txt"
  losses "$d/$mesh.jsonl" > "$d/b.txt"
  paste "$d/a.txt" "$d/b.txt" | awk -v m="$mesh" '{ r = ($2 - $4) / $2; if (r < 0) r = -r; if (r > w) w = r }
    END { printf "resumed on %s: losses of steps 11-20 within %.3g of the straight run\n", m, w; exit w > 1e-5 }' ||
    { echo "FAIL: losses on $mesh"; exit 1; }
  "$cmp" "$d/straight.plain" "$d/$mesh.plain" 1e-5 || { echo "FAIL: parameters on $mesh"; exit 1; }
done
# a missing rank file: an error naming it
rm "$d/keep/s10.st.step10.rank2-of-4"
if "$tgc" $M --steps 20 --resume "$d/keep/s10.st" > "$d/out" 2>&1; then echo "FAIL: resumed without a rank file"; exit 1; fi
grep -q "keep/s10.st: shard 2 of 4: .*keep/s10.st.step10.rank2-of-4: cannot open" "$d/out" || { cat "$d/out"; exit 1; }
echo "ok"
