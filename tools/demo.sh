#!/bin/sh
# tools/demo.sh — the README's first command: install what is missing, build
# tgc, and run the main demo: the straight-line program, a transformer block,
# and a 2-layer transformer learning to reverse sequences (about 10 s).
set -e
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)"
set -x
./build/tgc run examples/straight_line.tg --input w1=1.5 --input w2=0.5
./build/tgc run examples/transformer_block.tg --seed 1
./build/tgc train examples/reverse.tg --data reverse
