#!/bin/bash
# tests/scripts/lit.sh TGC FILECHECK FILE — a tiny lit: runs every
# "# RUN: ..." line of FILE from the repo root with `tgc` and `FileCheck`
# replaced by the built binaries and %s by FILE, under pipefail. A file with
# no RUN line gets the pass-test default:
#   tgc dump %s --after canonicalize | FileCheck %s
tgc="$1"; fc="$2"; file="$3"
cd "$(dirname "$0")/../.." || exit 2
set -o pipefail
runs=$(sed -n 's/^[#/]*[[:space:]]*RUN:[[:space:]]*//p' "$file")
[ -z "$runs" ] && runs="tgc dump %s --after canonicalize | FileCheck %s"
status=0
while IFS= read -r cmd; do
  cmd=$(printf '%s' "$cmd" | sed -e "s|%s|$file|g" -e "s|^tgc |$tgc |" -e "s/| *tgc /| $tgc /g" \
                                   -e "s/| *FileCheck /| $fc /g" -e "s|^not tgc |! $tgc |")
  if ! bash -c "set -o pipefail; $cmd"; then echo "FAIL: $cmd"; status=1; fi
done <<< "$runs"
exit $status
