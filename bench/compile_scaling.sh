#!/bin/sh
# bench/compile_scaling.sh — does compile time grow linearly with the model?
# Prints wall seconds and peak RSS (/usr/bin/time -v's "Maximum resident
# set size") of `tgc check` (parse, elaborate, verify, the default pass
# pipeline) and of `tgc stats` (also the training graph: autodiff, the
# optimizer update, the memory plan, the cost model, and the variants it
# compares) at 10^4, 10^5 and 10^6 nodes and parameters, for three models:
#   params  N parameters       repeat i in 0..N { param W: f32[1] = zeros }
#   chain   N elementwise ops  repeat i in 0..N { x = tanh(x) }
#   gpt     examples/gpt.tg (tiny) with nL = N / 29 layers: 29 ops per
#           layer, about N ops of a real model's mix
# Columns: "x time" is the time over the previous size's (10 for linear
# growth at a tenfold size); "B/node" is the added peak memory per added
# node or parameter from the previous size. COUNT=1 adds "instr": the
# instructions executed (valgrind --tool=callgrind, slow: ~40x), which
# unlike seconds do not depend on the machine's load or caches. These are
# measurements, not a test: nothing is asserted.
#
#   sh bench/compile_scaling.sh [path/to/tgc] [sizes]  (default build/tgc, "10000 100000 1000000")
#   COMMANDS="check" MODELS="chain gpt" COUNT=1 sh bench/compile_scaling.sh build/tgc "10000 100000"
set -e
TGC=$(realpath "${1:-build/tgc}")
SIZES=${2:-"10000 100000 1000000"}
COMMANDS=${COMMANDS:-"check stats"}
MODELS=${MODELS:-"params chain gpt"}
cd "$(dirname "$0")/.."
dir=$(mktemp -d /tmp/tgc_scaling.XXXXXX)
trap 'rm -rf "$dir"' EXIT

gen() { # MODEL N: writes the model file, prints its path
  f="$dir/$1_$2.tg"
  case "$1" in
    params) printf 'fn f(x: f32[1]) -> f32[1] {\n  repeat i in 0..%d { param W: f32[1] = zeros }\n  return x\n}\n' "$2" > "$f" ;;
    chain) printf 'fn f(x: f32[1]) -> f32[1] {\n  repeat i in 0..%d { x = tanh(x) }\n  return x\n}\n' "$2" > "$f" ;;
    gpt) cp examples/gpt.tg "$f" ;;
  esac
  echo "$f"
}

printf '%-7s %-6s %8s %9s %7s %12s %7s' model cmd N seconds "x time" "peak RSS KB" B/node
[ "${COUNT:-0}" = 1 ] && printf ' %15s' instr
printf '\n'
for fam in $MODELS; do
  for cmd in $COMMANDS; do
    prev_n=""; prev_s=""; prev_kb=""
    for n in $SIZES; do
      f=$(gen "$fam" "$n")
      extra=""
      [ "$fam" = gpt ] && extra="-D nL=$((n / 29))"
      # shellcheck disable=SC2086
      if /usr/bin/time -v "$TGC" "$cmd" "$f" $extra > /dev/null 2> "$dir/time"; then status=""; else status=" (exit $?)"; fi
      s=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$dir/time" |
          awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }')
      kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/time")
      growth="-"; per="-"
      if [ -n "$prev_n" ]; then
        growth=$(awk -v a="$s" -v b="$prev_s" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "-" }')
        per=$(awk -v a="$kb" -v b="$prev_kb" -v n="$n" -v m="$prev_n" 'BEGIN { printf "%d", (a - b) * 1024 / (n - m) }')
      fi
      printf '%-7s %-6s %8d %9.2f %7s %12d %7s' "$fam" "$cmd" "$n" "$s" "$growth" "$kb" "$per"
      if [ "${COUNT:-0}" = 1 ]; then
        # shellcheck disable=SC2086
        ir=$(OMP_WAIT_POLICY=passive valgrind --tool=callgrind --callgrind-out-file="$dir/cg" "$TGC" "$cmd" "$f" $extra 2>&1 > /dev/null |
             sed -n 's/.*I *refs: *//p' | tr -d ,)
        printf ' %15s' "$ir"
      fi
      printf '%s\n' "$status"
      prev_n=$n; prev_s=$s; prev_kb=$kb
    done
  done
done
