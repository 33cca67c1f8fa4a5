#!/bin/sh
# tests/scripts/ops_doc.sh [--write] — the list of IR ops in docs/ir.md,
# generated from ir/ops.def: one table row per OP(...) line (mnemonic,
# operands, results, and the line's comment), under a heading per
# "/* --- group --- */" line of ops.def. docs/ir.md holds it between the
# lines "<!-- ops.def: begin -->" and "<!-- ops.def: end -->".
# Without --write: exit 1, with a diff, when docs/ir.md's list is not what
# ops.def gives (run with --write to regenerate it); with --write: replace it.
cd "$(dirname "$0")/../.." || exit 2
gen=$(mktemp); cur=$(mktemp); out=$(mktemp)
trap 'rm -f "$gen" "$cur" "$out"' EXIT
awk '
function count(n) { return n == "-1" ? "any" : n }
/^\/\* --- / {
  g = $0; sub(/^\/\* --- /, "", g); sub(/ ---.*$/, "", g)
  printf "%s**%s**\n\n| op | operands | results | meaning |\n|---|---|---|---|\n", (n++ ? "\n" : ""), g
  next
}
/^OP\(/ {
  line = $0
  split(line, q, "\""); name = q[2]
  rest = q[3]; sub(/^, */, "", rest); split(rest, f, ","); nin = f[1]; nout = f[2]
  gsub(/ /, "", nin); gsub(/ /, "", nout)
  c = ""
  if (index(line, "/*")) { c = substr(line, index(line, "/*") + 2); sub(/\*\/ *$/, "", c); sub(/^ +/, "", c); sub(/ +$/, "", c) }
  gsub(/\|/, "\\|", c)
  printf "| `%s` | %s | %s | %s |\n", name, count(nin), count(nout), c
}' ir/ops.def > "$gen"
awk '/^<!-- ops.def: end -->$/ { on = 0 } on { print } /^<!-- ops.def: begin -->$/ { on = 1 }' docs/ir.md > "$cur"
if [ "$1" = "--write" ]; then
  awk -v gen="$gen" '
    /^<!-- ops.def: end -->$/ { while ((getline l < gen) > 0) print l; on = 0 }
    !on { print }
    /^<!-- ops.def: begin -->$/ { on = 1 }' docs/ir.md > "$out" && cat "$out" > docs/ir.md
  exit 0
fi
if ! grep -qx '<!-- ops.def: begin -->' docs/ir.md; then echo "FAIL: docs/ir.md has no '<!-- ops.def: begin -->' line"; exit 1; fi
if ! cmp -s "$gen" "$cur"; then
  echo "FAIL: docs/ir.md's list of ops is not ir/ops.def's (regenerate: sh tests/scripts/ops_doc.sh --write):"
  diff "$cur" "$gen" | head -40
  exit 1
fi
echo "ok: docs/ir.md lists the $(grep -c '^OP(' ir/ops.def) ops of ir/ops.def"
