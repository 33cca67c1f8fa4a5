#!/bin/sh
# bench/run.sh — the CPU performance figures of bench/ (see bench/README.md).
# Nothing here asserts a timing; it builds, runs and prints.
#
#   sh bench/run.sh baseline [baseline_gpt2 args]   plain-C GPT-2 124M step, B=4 T=64
#   sh bench/run.sh check                           baseline --check, fp32 and fp64 builds
#   sh bench/run.sh tgc                             tgc: compile time + training step, fusion on/off
#   sh bench/run.sh all                             check, baseline, tgc
#
# Environment:
#   CC (gcc), BASELINE_CFLAGS ("-O3 -march=native -fopenmp"), STEPS (baseline: 5; tgc: 6, the first
#   two of which warm up the buffer cache),
#   OMP_NUM_THREADS (default: every core), BUILD (build-bench, relative to the repo root),
#   TGC_FUSION_ON_FLAGS / TGC_FUSION_OFF_FLAGS: extra `tgc train` flags for the two runs
#   (the fusion-off switch is looked up in `tgc train --help` when not given).
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${BUILD:-build-bench}
CC=${CC:-gcc}
BASELINE_CFLAGS=${BASELINE_CFLAGS:--O3 -march=native -fopenmp}
BL_DIR="$BUILD/baseline"
BL="$BL_DIR/baseline_gpt2"

load() {
  if [ -r /proc/loadavg ]; then echo "load average ($1): $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"; fi
}

build_baseline() {
  mkdir -p "$BL_DIR"
  echo "building $BL: $CC -std=c11 $BASELINE_CFLAGS bench/baseline_gpt2.c -lm"
  # shellcheck disable=SC2086
  $CC -std=c11 -Wall -Wextra $BASELINE_CFLAGS bench/baseline_gpt2.c -lm -o "$BL"
  # shellcheck disable=SC2086
  $CC -std=c11 -Wall -Wextra $BASELINE_CFLAGS -DBASELINE_DOUBLE bench/baseline_gpt2.c -lm -o "${BL}_f64"
}

cmd_baseline() {
  build_baseline
  load before
  "$BL" --steps "${STEPS:-5}" "$@"
  load after
}

cmd_check() {
  build_baseline
  echo "== fp64 build =="
  "${BL}_f64" --check
  echo "== fp32 build =="
  "$BL" --check
}

# Min over steps of the per-step wall time, from a `tgc train --log` file
# (one JSON object per step with a cumulative elapsed_s).
min_step_s() {
  sed -n 's/.*"elapsed_s": *\([0-9.eE+-]*\).*/\1/p' "$1" |
    awk 'BEGIN { prev = 0; best = -1 } { d = $1 - prev; prev = $1; if (best < 0 || d < best) best = d }
         END { if (best < 0) print "nan"; else printf "%.4f\n", best }'
}

cmd_tgc() {
  echo "configuring tgc (Release) in $BUILD"
  if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release && cmake --build "$BUILD" --target tgc -j2; } \
    > "$BUILD.log" 2>&1; then
    tail -20 "$BUILD.log"
    echo "bench: tgc does not build yet (full log: $BUILD.log); nothing measured"
    return 1
  fi
  TGC="$ROOT/$BUILD/tgc"
  [ -x "$TGC" ] || TGC=$(find "$ROOT/$BUILD" -name tgc -type f -perm -u+x | head -1)
  if [ -z "$TGC" ] || [ ! -x "$TGC" ]; then
    echo "bench: built, but no tgc executable found under $BUILD"
    return 1
  fi
  if [ ! -f examples/gpt.tg ]; then
    echo "bench: examples/gpt.tg is not written yet; nothing measured"
    return 2
  fi
  MODEL="examples/gpt.tg --config gpt2-124m -D B=4 -D T=64"
  # shellcheck disable=SC2086
  if ! "$TGC" check $MODEL; then
    echo "bench: 'tgc check $MODEL' fails (the gpt2-124m config may not exist yet); nothing measured"
    return 2
  fi
  if ! "$TGC" train --help 2>&1 | grep -q -- '--data'; then
    echo "bench: 'tgc train' is not available yet; nothing measured"
    return 2
  fi
  build_baseline > /dev/null
  TOK="$ROOT/$BUILD/tokens-gpt2.u16"
  "$BL" --write-tokens "$TOK" 1048576 --seed 0
  OUTDIR=$(mktemp -d "${TMPDIR:-/tmp}/tgc_bench.XXXXXX")
  STEPS_TGC=${STEPS:-6}
  # the same optimizer as the baseline: AdamW, lr 3e-4, no decay, no warmup, no clipping
  TRAIN="train $MODEL --data tokens:$TOK --steps $STEPS_TGC --optimizer adamw --lr 3e-4 --weight-decay 0"
  TRAIN="$TRAIN --warmup 0 --clip 0 --lr-schedule constant --json"

  # Compile time of the training graph (forward, backward, Adam, all passes):
  # `tgc stats` compiles the model, builds the training graph and the Adam
  # update graph and runs every pass, allocating nothing; it reports the time.
  load before
  echo "== compile: tgc stats $MODEL --time-passes =="
  # shellcheck disable=SC2086
  "$TGC" stats $MODEL --time-passes > "$OUTDIR/compile.txt" 2> "$OUTDIR/compile.err" || echo "bench: the compile run failed"
  cat "$OUTDIR/compile.err"
  grep -E "analysed in" "$OUTDIR/compile.txt"
  sed -n 's/^(analysed in \([0-9.]*\) s.*/RESULT tgc compile_s=\1/p' "$OUTDIR/compile.txt"

  # The training step with fusion on and off.
  OFF_FLAGS=${TGC_FUSION_OFF_FLAGS-}
  if [ -z "$OFF_FLAGS" ]; then
    OFF_FLAGS=--no-fuse
  fi
  for mode in on off; do
    if [ "$mode" = on ]; then flags=${TGC_FUSION_ON_FLAGS-}; else flags=$OFF_FLAGS; fi
    if [ "$mode" = off ] && [ -z "$flags" ]; then
      echo "== fusion off: no switch known (set TGC_FUSION_OFF_FLAGS); skipped =="
      continue
    fi
    echo "== training step, fusion $mode: tgc $TRAIN $flags =="
    # shellcheck disable=SC2086
    if "$TGC" $TRAIN $flags --log "$OUTDIR/fusion-$mode.jsonl" > "$OUTDIR/fusion-$mode.json"; then
      best=$(min_step_s "$OUTDIR/fusion-$mode.jsonl")
      echo "$best" | awk -v m="$mode" '$1 + 0 > 0 { printf "RESULT tgc fusion=%s ms_per_step=%.1f tokens_per_s=%.0f\n", m, 1e3 * $1, 256 / $1 }'
      cat "$OUTDIR/fusion-$mode.json"
    else
      echo "bench: the fusion-$mode run failed"
    fi
  done
  load after
  echo "outputs in $OUTDIR"
}

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
  baseline) cmd_baseline "$@" ;;
  check) cmd_check ;;
  tgc) cmd_tgc ;;
  all) cmd_check && cmd_baseline && cmd_tgc ;;
  *)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    [ "$cmd" = help ] || exit 2
    ;;
esac
