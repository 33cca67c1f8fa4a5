#!/bin/sh
# bench/peers.sh — tgc's gpt2-124m CPU training step beside PyTorch (eager, torch.compile, CPU bf16 autocast)
# and JAX, interleaved in one run, so the ratios hold even though these machines' speed differs by 2x from one
# to the next. A measurement, not a test.
#   sh bench/peers.sh TGC [ROUNDS] [STEPS]      (from the project root; TGC = a Release tgc binary)
# Same step everywhere: examples/gpt.tg --config gpt2-124m, B=4, T=64, AdamW lr 3e-4 (wd 0, eps 1e-8),
# 2 threads, the same uint16 token windows. f32: tgc, torch eager, torch.compile, JAX jit. bf16 (BF16=1, the
# default): tgc --dtype bf16 beside torch eager and torch.compile under torch.autocast('cpu', bfloat16).
# Prints per system the median steady step (steps 3..), the first step, the peak RSS and the system's time
# over tgc's (f32 rows: over tgc f32; bf16 rows: over tgc bf16; > 1: tgc is faster).
# Environment: PEERS_VENV (default ~/.cache/tgc-peers-venv, made with pip on first use: numpy, torch, jax),
# SYSTEMS (default "tgc eager compile jax", plus "tgc-bf16 eager-bf16 compile-bf16" when BF16=1),
# TGC_OLD (another tgc binary, run as the row "tgc-old" in each round, and "tgc-old-bf16" with BF16=1: old against
# new in one run).
set -eu
TGC=${1:?usage: peers.sh TGC [ROUNDS] [STEPS]}; ROUNDS=${2:-2}; STEPS=${3:-8}
HERE=$(cd "$(dirname "$0")" && pwd); VENV=${PEERS_VENV:-$HOME/.cache/tgc-peers-venv}
BF16=${BF16:-1}
DEF="tgc eager compile jax"; [ "$BF16" = 1 ] && DEF="$DEF tgc-bf16 eager-bf16 compile-bf16"
[ -n "${TGC_OLD:-}" ] && DEF="tgc tgc-old ${DEF#tgc }"
[ -n "${TGC_OLD:-}" ] && [ "$BF16" = 1 ] && DEF="$DEF tgc-old-bf16"
SYSTEMS=${SYSTEMS:-$DEF}
[ -x "$VENV/bin/python" ] || { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q numpy torch jax; }
P=$VENV/bin/python; W=$(mktemp -d); export TOKENS=$W/tokens.u16
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=2
$P -c "import numpy as np; np.random.default_rng(0).integers(0, 50257, 200000).astype('<u2').tofile('$TOKENS')"
# run OUT CMD...: CMD's stdout+stderr into OUT, its peak RSS (MiB) on stdout.
run() { $P -c "import resource, subprocess, sys
with open(sys.argv[1], 'w') as f: rc = subprocess.run(sys.argv[2:], stdout=f, stderr=subprocess.STDOUT).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024); sys.exit(rc)" "$@"; }
# med FILE KEY: median steady step (steps 3..) and first step, seconds.
med() { $P -c "import json,sys,statistics as s; d=[json.loads(l)[sys.argv[2]] for l in open(sys.argv[1]) if l.startswith('{') and sys.argv[2] in l]
d=[b-a for a,b in zip([0]+d,d)] if sys.argv[2]=='elapsed_s' else d; print(f'{s.median(d[2:]):.4f} {d[0]:.4f}')" "$1" "$2"; }
tgc_run() { # BIN OUT LOG [tgc options]
  b=$1 o=$2 l=$3; shift 3
  run "$o" "$b" train examples/gpt.tg --config gpt2-124m -D B=4 -D T=64 --data "tokens:$TOKENS" --steps "$STEPS" \
    --optimizer adamw --lr 3e-4 --weight-decay 0 --warmup 0 --clip 0 --schedule constant --json --log "$l" "$@"; }
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r (loadavg $(cut -d' ' -f1-3 /proc/loadavg))"
  t32=; t16=
  for s in $SYSTEMS; do
    o=$W/$s$r.out; l=$W/$s$r.jsonl; key=step_s
    case $s in
      tgc) rss=$(tgc_run "$TGC" "$o" "$l"); key=elapsed_s; o=$l ;;
      tgc-old) rss=$(tgc_run "$TGC_OLD" "$o" "$l"); key=elapsed_s; o=$l ;;
      tgc-bf16) rss=$(tgc_run "$TGC" "$o" "$l" --dtype bf16); key=elapsed_s; o=$l ;;
      tgc-old-bf16) rss=$(tgc_run "$TGC_OLD" "$o" "$l" --dtype bf16); key=elapsed_s; o=$l ;;
      jax) rss=$(run "$o" "$P" "$HERE/peers/jax_gpt2.py" "$STEPS") ;;
      *) rss=$(run "$o" "$P" "$HERE/peers/torch_gpt2.py" "$s" "$STEPS") ;;
    esac
    set -- $(med "$o" $key)
    case $s in tgc) t32=$1 ;; tgc-bf16) t16=$1 ;; esac
    case $s in *bf16) ref=$t16 ;; *) ref=$t32 ;; esac
    ratio=$(awk -v a="$1" -v b="$ref" 'BEGIN { if (b == "") print "-"; else printf "%.3f", a / b }')
    printf '  %-14s median %s s  first %s s  peak RSS %5s MiB  this/tgc %s\n' "$s" "$1" "$2" "$rss" "$ratio"
  done
done
