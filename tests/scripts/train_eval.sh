#!/bin/bash
# tests/scripts/train_eval.sh TGC [MPIRUN] — the data sources and evaluation
# from the command line (issue 23):
#  - llm.c token files written here (a 1 KiB header: magic 20240520, version
#    1, the token count; then uint16 tokens: the bytes of README.md): tgc
#    train --data tokens:train.bin --eval-data tokens:val.bin --eval-every 10
#    prints "eval at step S: ..." at steps 10 and 20 and logs eval_loss;
#  - tgc eval on the saved state prints the numbers of the step-20 line, on
#    the cpu and (within 1e-5) on cuda-emu;
#  - a classifier on .npy arrays with integer labels (tests/data/blobs.tg)
#    learns: its eval accuracy after 300 steps is above 80%;
#  - with MPIRUN: tgc eval on --mesh dp=2 (2 ranks, each its block of every
#    batch) gives one device's loss within 1e-5, tgc train --mesh dp=2
#    --eval-data prints its eval lines, and training on arrays on dp=2 (each
#    rank its block of every shuffled batch) ends at one device's loss;
#    tgc eval on --mesh pp=2 (bit for bit) and tp=2,pp=2 (1e-5), and tgc
#    train --eval-data on pp=2 printing one device's eval lines.
tgc="$1"; mpirun="${2:-}"
cd "$(dirname "$0")/../.." || exit 2
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# llm.c's format: int32 little-endian header [magic, version, count, 0...], uint16 tokens
le32() { printf "\\\\x%02x\\\\x%02x\\\\x%02x\\\\x%02x" $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }
llmc() { # llmc OUT SKIP COUNT: COUNT bytes of README.md from SKIP as tokens
  local hex
  hex=$(tail -c +$(($2 + 1)) README.md | head -c "$3" | od -An -v -tx1 | tr -s ' \n' '\n\n' | sed '/^$/d; s/.*/\\x&\\x00/' | tr -d '\n')
  { printf "$(le32 20240520)$(le32 1)$(le32 "$3")"; head -c 1012 /dev/zero; printf "$hex"; } > "$1"
}
llmc "$d/train.bin" 0 6000
llmc "$d/val.bin" 6000 1500
[ "$(stat -c %s "$d/train.bin")" = $((1024 + 12000)) ] || fail "train.bin has the wrong size"
gpt="examples/gpt.tg --config tiny --vocab 256"
# shellcheck disable=SC2086
"$tgc" train $gpt --data "tokens:$d/train.bin" --eval-data "tokens:$d/val.bin" --eval-every 10 --eval-batches 4 \
  --steps 20 --save "$d/s.safetensors" --log "$d/log.jsonl" > "$d/train.out" 2>&1 || { cat "$d/train.out"; fail "train"; }
grep -q '^eval at step 10: loss [0-9.]*  accuracy [0-9.]*%  perplexity [0-9.]*  (4 batches)$' "$d/train.out" || { cat "$d/train.out"; fail "no eval line at step 10"; }
line20=$(sed -n 's/^eval at step 20: //p' "$d/train.out")
[ -n "$line20" ] || fail "no eval line at step 20"
[ "$(grep -c '"eval_loss"' "$d/log.jsonl")" = 2 ] || fail "the log holds no 2 eval lines"
# shellcheck disable=SC2086
one=$("$tgc" eval $gpt --resume "$d/s.safetensors" --data "tokens:$d/val.bin" --eval-batches 4) || fail "tgc eval"
[ "$one" = "eval $d/s.safetensors (step 20) on tokens:$d/val.bin: $line20" ] || fail "tgc eval printed '$one', train '$line20'"
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; exit !(d <= t * m) }'; }
loss() { sed -n 's/.*"loss": \([-0-9.e+]*\),*$/\1/p'; }
# shellcheck disable=SC2086
l1=$("$tgc" eval $gpt --resume "$d/s.safetensors" --data "tokens:$d/val.bin" --eval-batches 4 --json | loss)
# shellcheck disable=SC2086
l2=$("$tgc" eval $gpt --resume "$d/s.safetensors" --data "tokens:$d/val.bin" --eval-batches 4 --json --backend cuda-emu | loss)
near "$l1" "$l2" 1e-5 || fail "cuda-emu eval loss $l2, cpu $l1"
# a classifier on arrays with integer labels
"$tgc" run tests/data/blobs.tg --seed 1 --out-dir "$d/npy" > /dev/null 2>&1 || fail "blobs"
n="$d/npy"
"$tgc" train examples/classifier.tg --data "npy:x=$n/x.npy,y=$n/y.npy" --eval-data "npy:x=$n/x_eval.npy,y=$n/y_eval.npy" \
  --steps 300 --lr 0.01 > "$d/cls.out" 2>&1 || { cat "$d/cls.out"; fail "classifier"; }
acc=$(sed -n 's/^eval at step 300: loss [0-9.e-]*  accuracy \([0-9.]*\)%  (4 batches)$/\1/p' "$d/cls.out")
[ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a > 80) }' || { cat "$d/cls.out"; fail "classifier eval accuracy '$acc'"; }
if [ -n "$mpirun" ]; then
  # shellcheck disable=SC2086
  l3=$(timeout 120 "$mpirun" --oversubscribe -np 2 "$tgc" eval $gpt --resume "$d/s.safetensors" --data "tokens:$d/val.bin" \
         --eval-batches 4 --json --mesh dp=2 | loss)
  near "$l1" "$l3" 1e-5 || fail "dp=2 eval loss '$l3', one device $l1"
  # shellcheck disable=SC2086
  timeout 120 "$mpirun" --oversubscribe -np 2 "$tgc" train $gpt --data "tokens:$d/train.bin" --eval-data "tokens:$d/val.bin" \
    --eval-every 5 --eval-batches 2 --steps 10 --mesh dp=2 > "$d/dp.out" 2>&1 || { cat "$d/dp.out"; fail "dp=2 train"; }
  [ "$(grep -c '^eval at step' "$d/dp.out")" = 2 ] || { cat "$d/dp.out"; fail "dp=2: not 2 eval lines"; }
  "$mpirun" --oversubscribe -np 2 "$tgc" train examples/classifier.tg --data "npy:x=$n/x.npy,y=$n/y.npy" \
    --eval-data "npy:x=$n/x_eval.npy,y=$n/y_eval.npy" --steps 300 --lr 0.01 --mesh dp=2 > "$d/cls2.out" 2>&1 || { cat "$d/cls2.out"; fail "dp=2 classifier"; }
  grep -q '^eval at step 300:' "$d/cls2.out" || { cat "$d/cls2.out"; fail "dp=2 classifier: no eval line"; }
  # pipeline parallelism: the eval graph cut into the step's stages, the loss all-reduced over pp:
  # tgc eval on pp=2 is one device's loss bit for bit (the same sums in the same order), on
  # tp=2,pp=2 within 1e-5; tgc train --eval-data on pp=2 (1f1b, 2 micro-batches) prints one
  # device's eval lines, and its --resume reads a whole state (each stage its own tensors)
  # shellcheck disable=SC2086
  l4=$(timeout 120 "$mpirun" --oversubscribe -np 2 "$tgc" eval $gpt --resume "$d/s.safetensors" --data "tokens:$d/val.bin" \
         --eval-batches 4 --json --mesh pp=2 | loss)
  [ "$l4" = "$l1" ] || fail "pp=2 eval loss '$l4', one device $l1"
  # shellcheck disable=SC2086
  l5=$(timeout 120 "$mpirun" --oversubscribe -np 4 "$tgc" eval $gpt --resume "$d/s.safetensors" --data "tokens:$d/val.bin" \
         --eval-batches 4 --json --mesh tp=2,pp=2 | loss)
  near "$l1" "$l5" 1e-5 || fail "tp=2,pp=2 eval loss '$l5', one device $l1"
  pipe="--data tokens:$d/train.bin --eval-data tokens:$d/val.bin --eval-every 5 --eval-batches 2 --steps 10 --micro-batches 2"
  # shellcheck disable=SC2086
  "$tgc" train $gpt $pipe | grep '^eval at step' > "$d/pp1.ev" || fail "one-device train with eval"
  # shellcheck disable=SC2086
  timeout 120 "$mpirun" --oversubscribe -np 2 "$tgc" train $gpt $pipe --mesh pp=2 --schedule 1f1b > "$d/pp.out" 2>&1 ||
    { cat "$d/pp.out"; fail "pp=2 train"; }
  grep '^eval at step' "$d/pp.out" | diff "$d/pp1.ev" - || fail "pp=2: the eval lines differ from one device's"
  [ "$(wc -l < "$d/pp1.ev")" = 2 ] || fail "not 2 eval lines"
  # the interleaved schedule (chunks of stages per rank): refused, saying what to do
  # shellcheck disable=SC2086
  if timeout 120 "$mpirun" --oversubscribe -np 2 "$tgc" train examples/gpt.tg --config tiny -D nL=4 --data copy --steps 2 \
       --micro-batches 2 --schedule interleaved:2 --eval-data copy --mesh pp=2 > "$d/il.out" 2>&1; then
    fail "interleaved eval was not refused"
  fi
  grep -q '^tgc: error: evaluation under the interleaved schedule (chunks of stages per rank) is not built: evaluate with --schedule gpipe or 1f1b, or on a mesh without pp (a saved state loads on any mesh)$' "$d/il.out" ||
    { cat "$d/il.out"; fail "interleaved eval: not the expected message"; }
  # each dp rank reads its own block of every shuffled batch: the run is one device's (1e-5)
  last() { sed -n 's/.*"last_loss": \([-0-9.e+]*\),*$/\1/p'; }
  c1=$("$tgc" train examples/classifier.tg --data "npy:x=$n/x.npy,y=$n/y.npy" --steps 50 --lr 0.01 --json | last)
  c2=$("$mpirun" --oversubscribe -np 2 "$tgc" train examples/classifier.tg --data "npy:x=$n/x.npy,y=$n/y.npy" --steps 50 \
         --lr 0.01 --json --mesh dp=2 | last)
  near "$c1" "$c2" 1e-5 || fail "dp=2 npy training's last loss '$c2', one device '$c1'"
fi
echo "ok: data sources and evaluation${mpirun:+ (and dp=2, pp=2, tp=2 x pp=2 under mpirun)}"
