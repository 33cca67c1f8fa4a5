#!/bin/sh
# tools/demo.sh — the README's first command: install what is missing, build
# tgc, and run the main demo: the straight-line program, a transformer block,
# and a 2-layer transformer learning to reverse sequences (about 10 s).
# It links /usr/local/bin/tgc to build/tgc, so that `tgc` works as the
# README types it; where /usr/local/bin is not writable (not root) it says
# which PATH to set instead.
set -e
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)"
if [ -w /usr/local/bin ] && ln -sf "$PWD/build/tgc" /usr/local/bin/tgc; then
  echo "tgc: /usr/local/bin/tgc -> $PWD/build/tgc"
else
  echo "tgc: /usr/local/bin is not writable; for the README's examples run: export PATH=$PWD/build:\$PATH"
fi
PATH="$PWD/build:$PATH" # the demo runs this build's tgc, typed as the README types it
set -x
tgc run examples/straight_line.tg --input w1=1.5 --input w2=0.5
tgc run examples/transformer_block.tg --seed 1
tgc train examples/reverse.tg --data reverse
