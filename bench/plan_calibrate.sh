#!/bin/sh
# bench/plan_calibrate.sh — fits the planner's two GEMM constants (gemm_eff,
# gemm_half: analysis/target.c, default_k) to the calibration rows of
# bench/plan_validate.sh, and to nothing else, by a grid search that
# minimizes the sum over those rows of (log(predicted / published))^2.
# Prints every grid point's error and the best one; it changes no file (the
# chosen values are written into default_k by hand, with this script's
# output quoted in docs/plan.md).
#
# Environment: TGC (build/tgc), EFFS (the gemm_eff grid), HALVES (the gemm_half grid).
set -eu
cd "$(dirname "$0")/.."
EFFS=${EFFS:-"0.62 0.64 0.66 0.68 0.70 0.72 0.74 0.76 0.78 0.80 0.82 0.84 0.86 0.88 0.90"}
HALVES=${HALVES:-"0 32 64 128 256"}
best=""
for e in $EFFS; do
  for h in $HALVES; do
    err=$(CONSTANTS="--constant gemm_eff=$e --constant gemm_half=$h" sh bench/plan_validate.sh calib |
      awk '$2 == "calib" { p = $(NF - 1); q = $(NF - 2); sub(/s$/, "", p); sub(/s$/, "", q); l = log(p / q); s += l * l }
           END { printf "%.6f", s }')
    echo "gemm_eff $e gemm_half $h: sum of squared log errors $err"
    best=$(printf '%s\n%s %s %s\n' "$best" "$err" "$e" "$h" | awk 'NF == 3' | sort -g | head -1)
  done
done
echo "best: gemm_eff $(echo "$best" | cut -d' ' -f2) gemm_half $(echo "$best" | cut -d' ' -f3) (sum of squared log errors $(echo "$best" | cut -d' ' -f1))"
