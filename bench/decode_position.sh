#!/bin/bash
# bench/decode_position.sh [TGC] [BACKEND] [REPEATS] — does a decode step's
# time grow with the position? tokens/s of tgc generate's decode steps (the
# KV cache) at positions 64..79 and at 1000..1015 of GPT-2 124M
# (examples/gpt.tg --config gpt2_124m: 12 layers, D 768, V 50257, a
# 1024-token context, random parameters, byte prompts of 64 and 1000 'a's,
# 17 new tokens: one prefill, then 16 decode steps), read from
# `tgc generate --timing` (the decode steps' wall time alone, logits read
# back to the host each step, as generation does). Each position is run
# REPEATS times (default 3), interleaved, and the best run kept (the machine
# is shared: the least disturbed). Prints both figures and their ratio
# (position 64 over position 1000; 1.00: no growth). Printed, not asserted.
# A step reads the 124M parameters once (about 500 MB in f32) and the cache
# rows up to its position (at 1000: 12 layers x 2 x 1000 x 768 floats, about
# 74 MB), so at this size the position should cost a few percent at most.
tgc="${1:-build/tgc}"; backend="${2:-cpu}"; repeats="${3:-3}"
cd "$(dirname "$0")/.." || exit 2
best64=0; best1000=0
for r in $(seq "$repeats"); do
  for pos in 64 1000; do
    prompt=$(head -c "$pos" /dev/zero | tr '\0' 'a')
    line=$("$tgc" generate examples/gpt.tg --config gpt2_124m --backend "$backend" --prompt "$prompt" \
      --max-new-tokens 17 --timing 2>&1 >/dev/null | grep '^timing:') || { echo "tgc generate failed" >&2; exit 1; }
    tps=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) tokens\/s$/\1/p')
    echo "run $r, position $pos: $line"
    if [ "$pos" = 64 ]; then
      best64=$(awk -v a="$best64" -v b="$tps" 'BEGIN { print (b > a ? b : a) }')
    else
      best1000=$(awk -v a="$best1000" -v b="$tps" 'BEGIN { print (b > a ? b : a) }')
    fi
  done
done
fmt="gpt2_124m decode (%s, best of the runs): %.2f tokens/s at positions 64..79, %.2f at 1000..1015: ratio %.3f (load average %s)\n"
awk -v f="$fmt" -v a="$best64" -v b="$best1000" -v be="$backend" -v l="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" \
  'BEGIN { printf f, be, a, b, (b > 0 ? a / b : 0), l }'
