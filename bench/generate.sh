#!/bin/bash
# bench/generate.sh [TGC] [BACKEND] — tgc generate's decode speed: tokens/s
# from position 64 and from position 1000 of a GPT with a 1280-token context
# (examples/gpt.tg --config tiny -D ctx=1280 -D V=256: 2 layers, D 32,
# random parameters, byte prompts), with the KV cache (the default) and
# with --no-kv-cache. Printed, not asserted.
# A decode step's time is measured as the difference of two runs, one that
# makes 1 token (compile + prefill) and one that makes 1 + n: n decode steps
# (n = 200 with the cache, 8 without: the positions stay inside the context).
# Without the cache every step is a full forward over the T = 1280 window
# (the positions after the prompt are padding the causal mask hides), so
# both positions cost the same; with the cache a step is a forward of one
# token plus the attention read of pos + 1 cached rows (and the cache row
# write), so it should barely depend on the position at this size.
tgc="${1:-build/tgc}"; backend="${2:-cpu}"
cd "$(dirname "$0")/.." || exit 2
now() { date +%s.%N; }
run() { # prompt tokens mode
  "$tgc" generate examples/gpt.tg --config tiny -D ctx=1280 -D V=256 --backend "$backend" \
    --prompt "$1" --max-new-tokens "$2" $3 >/dev/null || exit 1
}
for mode in "" --no-kv-cache; do
  n=200; [ -n "$mode" ] && n=8
  for pos in 64 1000; do
    prompt=$(head -c "$pos" /dev/zero | tr '\0' 'a')
    t0=$(now); run "$prompt" 1 "$mode"; t1=$(now); run "$prompt" $((n + 1)) "$mode"; t2=$(now)
    awk -v p="$pos" -v n=$n -v a="$(echo "$t1 - $t0" | bc)" -v b="$(echo "$t2 - $t1" | bc)" -v be="$backend" \
      -v m="${mode:-KV cache}" \
      'BEGIN { d = b - a; if (d <= 0) d = 1e-9; printf "decode at position %4d (%s, %s): %8.1f tokens/s (%d steps in %.3f s)\n", p, be, m, n / d, n, d }'
  done
done
