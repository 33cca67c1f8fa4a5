#!/bin/bash
# bench/generate.sh [TGC] [BACKEND] — tgc generate's decode speed: tokens/s
# at position 64 and at position 1000 of a GPT with a 1024-token context
# (examples/gpt.tg --config tiny -D ctx=1024 -D V=256: 2 layers, D 32,
# random parameters, byte prompts). Printed, not asserted.
# Without the KV cache (not built yet: issue 18, item 4) every step is a full
# forward over the whole T = 1024 window (the positions after the prompt are
# padding the causal mask hides), so both positions cost the same; with a
# cache the step at 64 should read 16x less attention state than at 1000.
tgc="${1:-build/tgc}"; backend="${2:-cpu}"; n=16
cd "$(dirname "$0")/.." || exit 2
for pos in 64 1000; do
  prompt=$(head -c "$pos" /dev/zero | tr '\0' 'a')
  t0=$(date +%s.%N)
  "$tgc" generate examples/gpt.tg --config tiny -D ctx=1024 -D V=256 --backend "$backend" \
    --prompt "$prompt" --max-new-tokens $n >/dev/null || exit 1
  t1=$(date +%s.%N)
  awk -v p="$pos" -v n=$n -v s="$(echo "$t1 - $t0" | bc)" -v b="$backend" \
    'BEGIN { printf "decode at position %4d (%s, no KV cache): %.1f tokens/s (%d tokens in %.2f s, compile included)\n", p, b, n / s, n, s }'
done
