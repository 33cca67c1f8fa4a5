#!/bin/sh
# tests/scripts/layering.sh — the floors of ARCHITECTURE.md, checked on every
# #include "..." of the source tree: a file may include headers of its own
# folder and of the folders below it, nothing above. CMake enforces the same
# with include paths (each folder's library hands its path to the folders
# above only); this test names the file and line that breaks the rule, and
# --graph prints who includes whom by folder (the figures in the notes).
#   sh tests/scripts/layering.sh [--graph] [ROOT]
set -eu
GRAPH=0
[ "${1:-}" = --graph ] && { GRAPH=1; shift; }
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$ROOT"
# folder -> the folders it may include (besides itself)
allowed() {
  case $1 in
  ir) echo "" ;;
  frontend) echo "ir" ;;
  analysis) echo "ir" ;;
  passes) echo "ir analysis" ;;
  plan) echo "ir analysis passes" ;;
  runtime/cudaapi) echo "ir" ;;
  codegen) echo "ir analysis runtime/cudaapi" ;;
  runtime) echo "ir analysis codegen runtime/cudaapi" ;;
  tools) echo "ir frontend analysis passes plan codegen runtime runtime/cudaapi" ;;
  esac
}
folder() {
  case $1 in
  runtime/cudaapi/*) echo runtime/cudaapi ;;
  */*) echo "${1%%/*}" ;;
  *) echo . ;;
  esac
}
# every header and .def of the layers, by base name (base names are unique)
HEADERS=$(mktemp)
trap 'rm -f "$HEADERS"' EXIT
find ir frontend analysis passes plan codegen runtime tools \( -name '*.h' -o -name '*.def' -o -name '*.inc' \) |
  awk -F/ '{ print $NF, $0 }' | sort > "$HEADERS"
dups=$(awk '{ print $1 }' "$HEADERS" | uniq -d)
if [ -n "$dups" ]; then echo "layering: header names not unique: $dups"; exit 1; fi
EDGES=$(find ir frontend analysis passes plan codegen runtime tools \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.l' -o -name '*.y' \) |
  sort | while read -r f; do
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | sed 's/:.*"\(.*\)".*/ \1/' | while read -r line inc; do
      path=$(awk -v b="${inc##*/}" '$1 == b { print $2; exit }' "$HEADERS")
      [ -n "$path" ] || continue # generated (parser.h) or a system header in quotes
      echo "$(folder "$f") $(folder "$path") $f:$line $inc"
    done
  done)
BAD=$(printf '%s\n' "$EDGES" | while read -r from to where inc; do
  [ -n "$from" ] && [ "$from" != "$to" ] || continue
  ok=0
  for a in $(allowed "$from"); do [ "$a" = "$to" ] && ok=1; done
  [ $ok = 1 ] || echo "layering: $where: $from/ includes \"$inc\" of $to/"
done)
if [ $GRAPH = 1 ]; then
  echo "includes by folder (from -> to: #include lines):"
  printf '%s\n' "$EDGES" | awk 'NF && $1 != $2 { n[$1 " -> " $2]++ } END { for (k in n) print "  " k ": " n[k] }' | sort
fi
if [ -n "$BAD" ]; then
  printf '%s\n' "$BAD"
  echo "layering: $(printf '%s\n' "$BAD" | wc -l) includes break the floors"
  exit 1
fi
echo "layering: every #include keeps to the floors"
