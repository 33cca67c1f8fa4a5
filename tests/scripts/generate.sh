#!/bin/bash
# tests/scripts/generate.sh TGC — `tgc generate` (issue 18, item 4): a tiny
# GPT (examples/gpt.tg) trained on a text file of one repeated sentence,
# bytes as tokens (--data text:PATH --vocab 256), then
#  - greedy generation from its state continues the sentence, the same on
#    cpu and cuda-emu, with the KV cache (the default) and with
#    --no-kv-cache, token for token, also past the context (the window
#    slides); examples/llama.tg with grouped-query attention (nKV 2 < nH 4)
#    the same with and without the cache on cpu and cuda-emu;
#  - --json prints {"ids": [...], "text": "..."} with the ids of the text;
#  - --weights (a plain safetensors file, tgc's names or HF GPT-2's through
#    examples/maps/hf_gpt2.map) gives what --resume gives;
#  - sampling (--temperature, --top-k, --top-p) is the same for the same
#    --seed, and stays inside the top-k;
#  - --tokenizer encodes the prompt with a tokenizer.json (a random model of
#    the tokenizer's vocabulary) and decodes the output;
#  - the refusals: a prompt longer than the context, a byte beyond a model's
#    vocabulary, a model without tokens/logits, missing flags; exit status 1.
tgc="$1"
cd "$(dirname "$0")/../.." || exit 2
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# refused WANT CMD...: CMD is refused with exit status 1 and exactly the message WANT
refused() {
  local want="$1" msg rc
  shift
  msg=$("$@" 2>&1)
  rc=$?
  [ $rc -eq 1 ] || fail "exit status $rc, not 1: $*: $msg"
  [ "$msg" = "$want" ] || fail "$*: '$msg', not '$want'"
}
for i in $(seq 200); do printf 'the quick brown fox jumps over the lazy dog. '; done > "$d/t.txt"
gpt="examples/gpt.tg --config tiny"
"$tgc" train $gpt --data "text:$d/t.txt" --vocab 256 --steps 300 --lr 0.01 --optimizer adamw --save "$d/s.st" \
  > "$d/train.log" 2>&1 || { cat "$d/train.log"; fail "train"; }
gen() { "$tgc" generate $gpt --resume "$d/s.st" "$@"; }
out=$(gen --prompt "the quick" --max-new-tokens 30) || fail "generate"
[ "$out" = " brown fox jumps over the lazy" ] || fail "greedy continuation: '$out'"
for b in cpu cuda-emu; do
  o2=$(gen --prompt "the quick" --max-new-tokens 30 --backend $b --no-kv-cache) || fail "generate --backend $b"
  [ "$o2" = "$out" ] || fail "$b --no-kv-cache: '$o2' != '$out'"
  o2=$(gen --prompt "the quick" --max-new-tokens 30 --backend $b) || fail "generate --backend $b (KV cache)"
  [ "$o2" = "$out" ] || fail "$b KV cache: '$o2' != '$out'"
  # past the context of 16: the window slides (each step a prefill of the last 16)
  c1=$(gen --prompt "over" --max-new-tokens 24 --backend $b --json) || fail "$b 24 tokens (cache)"
  c2=$(gen --prompt "over" --max-new-tokens 24 --backend $b --json --no-kv-cache) || fail "$b 24 tokens"
  [ "$c1" = "$c2" ] || fail "$b past the context, cache / no cache: $c1 / $c2"
  # llama-style, grouped-query (2 kv heads for 4 query heads), random weights
  # and a context of 24 (so 20 of the 30 steps are decode steps)
  ll="examples/llama.tg --config tiny -D V=256 -D ctx=24 -D nKV=2 --prompt abcd --max-new-tokens 30 --json --backend $b"
  l1=$("$tgc" generate $ll) || fail "$b llama GQA (cache)"
  l2=$("$tgc" generate $ll --no-kv-cache) || fail "$b llama GQA"
  [ "$l1" = "$l2" ] || fail "$b llama GQA cache / no cache: $l1 / $l2"
done
# --weights: the state exported as plain safetensors (tgc's names, and HF
# GPT-2's through the shipped map) gives the same continuation
"$tgc" export-weights $gpt -D V=256 --resume "$d/s.st" -o "$d/w.safetensors" >/dev/null || fail "export-weights"
"$tgc" export-weights $gpt -D V=256 --resume "$d/s.st" --map examples/maps/hf_gpt2.map -o "$d/hf.safetensors" >/dev/null ||
  fail "export-weights --map"
w1=$("$tgc" generate $gpt -D V=256 --weights "$d/w.safetensors" --prompt "the quick" --max-new-tokens 30) ||
  fail "generate --weights"
[ "$w1" = "$out" ] || fail "--weights: '$w1' != '$out'"
w2=$("$tgc" generate $gpt -D V=256 --weights "$d/hf.safetensors" --map examples/maps/hf_gpt2.map --prompt "the quick" \
  --max-new-tokens 30) || fail "generate --weights --map"
[ "$w2" = "$out" ] || fail "--weights --map hf_gpt2: '$w2' != '$out'"
refused "tgc: error: generate: give the parameters by --resume STATE or by --weights PATH, not both" \
  gen --weights "$d/w.safetensors" --prompt a --max-new-tokens 1
# past the context (16): the window slides, the sentence goes on
refused "tgc: error: --prompt: the prompt is 17 tokens, longer than the model's context of 16" \
  gen --prompt "the lazy dog. the" --max-new-tokens 2
refused "tgc: error: --prompt: the prompt is 17 tokens, longer than the model's context of 16" \
  gen --prompt "the lazy dog. the" --max-new-tokens 2 --no-kv-cache
o3=$(gen --prompt "over the lazy" --max-new-tokens 40) || fail "generate 40"
case "$o3" in " dog. the quick brown fox jumps over"*) ;; *) fail "past the context: '$o3'" ;; esac
j=$(gen --prompt "the quick" --max-new-tokens 6 --json) || fail "--json"
[ "$j" = '{"ids": [32, 98, 114, 111, 119, 110], "text": " brown"}' ] || fail "--json: $j"
s1=$(gen --prompt "the" --max-new-tokens 30 --temperature 1.5 --top-k 3 --top-p 0.95 --seed 7 --json) || fail "sample"
s2=$(gen --prompt "the" --max-new-tokens 30 --temperature 1.5 --top-k 3 --top-p 0.95 --seed 7 --json) || fail "sample"
[ "$s1" = "$s2" ] || fail "same seed, different samples: $s1 / $s2"
s3=$(gen --prompt "the" --max-new-tokens 30 --temperature 100 --seed 1) || fail "sample T=100"
s4=$(gen --prompt "the" --max-new-tokens 30 --temperature 100 --seed 2) || fail "sample T=100"
[ "$s3" != "$s4" ] || fail "seeds 1 and 2 drew the same 30 tokens at temperature 100"
# top-k 1 is greedy whatever the temperature
k1=$(gen --prompt "the quick" --max-new-tokens 30 --temperature 5 --top-k 1 --seed 3) || fail "top-k 1"
[ "$k1" = "$out" ] || fail "top-k 1: '$k1'"
# a tokenizer.json: ids through it, a random model of its vocabulary
tok=tests/data/tokenizers/bpe_gpt2.json
V=$("$tgc" tokenize --tokenizer $tok --json "x" >/dev/null && python3 -c "import json;m=json.load(open('$tok'));print(max(list(m['model']['vocab'].values())+[t['id'] for t in m.get('added_tokens',[])])+1)")
tj=$("$tgc" generate $gpt -D V=$V --tokenizer $tok --prompt "the quick" --max-new-tokens 5 --json) || fail "--tokenizer"
ids=$(echo "$tj" | python3 -c "import json,sys;print(' '.join(map(str,json.load(sys.stdin)['ids'])))")
text=$(echo "$tj" | python3 -c "import json,sys;print(json.load(sys.stdin)['text'])")
[ "$("$tgc" tokenize --tokenizer $tok --decode "$ids")" = "$text" ] || fail "--tokenizer text is not the ids' decoding: $tj"
p17="$(printf 'the quick %.0s' $(seq 9))"
n=$("$tgc" tokenize --tokenizer $tok --no-special "$p17" | wc -w)
refused "tgc: error: --prompt: the prompt is $n tokens, longer than the model's context of 16" \
  "$tgc" generate $gpt -D V=$V --tokenizer $tok --prompt "$p17" --max-new-tokens 1
# examples/llama.tg (random, bytes): greedy the same on cpu and cuda-emu; the
# bytes of the output that are not UTF-8 become U+FFFD in --json's text
l1=$("$tgc" generate examples/llama.tg --config tiny -D V=256 --prompt "ab" --max-new-tokens 12 --json) || fail "llama"
l2=$("$tgc" generate examples/llama.tg --config tiny -D V=256 --prompt "ab" --max-new-tokens 12 --json --backend cuda-emu) ||
  fail "llama cuda-emu"
[ "$l1" = "$l2" ] || fail "llama cpu / cuda-emu: $l1 / $l2"
for seed in 1 2 3; do # random bytes: many ill-formed sequences, each replaced as Python does
  l3=$("$tgc" generate examples/llama.tg --config tiny -D V=256 --prompt "ab" --max-new-tokens 40 --temperature 1 \
    --seed $seed --json) || fail "llama sampled"
  echo "$l3" | python3 -c "
import json, sys
j = json.load(sys.stdin)
assert j['text'] == bytes(j['ids']).decode('utf-8', 'replace'), j" || fail "llama --json text: $l3"
done
# refusals
refused "tgc: error: --prompt: token 195 (position 0) is outside the model's vocabulary of 64 (text is bytes: give --vocab 256 to train)" \
  "$tgc" generate $gpt --prompt "é" --max-new-tokens 1
refused "tgc: error: generate: --prompt TEXT is required" "$tgc" generate $gpt --max-new-tokens 1
refused 'tgc: error: examples/mlp.tg: generate needs an input "tokens" and an output "logits" (as examples/gpt.tg)' \
  "$tgc" generate examples/mlp.tg --prompt a --max-new-tokens 1
# --mesh tp=2 runs under mpirun (tests/cli/generate_tp.tg); one process is refused
refused "tgc: error: --mesh tp=2 needs 2 ranks, but tgc runs as 1 process (start it with mpirun -np 2)" \
  "$tgc" generate $gpt --prompt a --max-new-tokens 1 --mesh tp=2
refused "tgc: error: --max-new-tokens needs an integer in [1, 1000000], not '0'" gen --prompt a --max-new-tokens 0
refused "tgc: error: --top-p needs a number in [1e-09, 1], not '1.5'" gen --prompt a --max-new-tokens 1 --top-p 1.5
# a tokenizer file that is not one
refused "tgc: error: --tokenizer: tests/data/tokenizers/bad/not_json.json:3:20: not valid JSON: string or '}' expected near ','" \
  gen --tokenizer tests/data/tokenizers/bad/not_json.json --prompt a --max-new-tokens 1
echo "generate: ok"
