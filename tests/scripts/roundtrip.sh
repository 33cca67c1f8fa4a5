#!/bin/sh
# tests/scripts/roundtrip.sh TGC MODEL — the textual IR round-trips after
# elaboration and after every pass: print -> parse -> print is byte-identical,
# and running the .ir gives the same outputs as running the .tg.
tgc="$1"; model="$2"
cd "$(dirname "$0")/../.." || exit 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$tgc" dump "$model" -o "$dir/a.ir" || exit 1
"$tgc" dump "$dir/a.ir" -o "$dir/b.ir" || exit 1
cmp "$dir/a.ir" "$dir/b.ir" || { echo "FAIL: elaborated IR does not round-trip"; diff "$dir/a.ir" "$dir/b.ir" | head; exit 1; }
for pass in fuse-attention autodiff canonicalize fuse-elementwise checkpoint fuse-transpose; do
  "$tgc" dump "$model" --after "$pass" -o "$dir/p.ir" || exit 1
  "$tgc" dump "$dir/p.ir" -o "$dir/q.ir" || exit 1
  grep -v '^#' "$dir/p.ir" > "$dir/p2.ir"
  cmp "$dir/p2.ir" "$dir/q.ir" || { echo "FAIL: IR after $pass does not round-trip"; diff "$dir/p2.ir" "$dir/q.ir" | head; exit 1; }
done
"$tgc" run "$model" --json --seed 7 > "$dir/r1.json" 2>/dev/null || exit 1
"$tgc" run "$dir/a.ir" --json --seed 7 > "$dir/r2.json" 2>/dev/null || exit 1
cmp "$dir/r1.json" "$dir/r2.json" || { echo "FAIL: .tg and .ir runs differ"; exit 1; }
echo "ok $model"
