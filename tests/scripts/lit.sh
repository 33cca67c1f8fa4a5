#!/bin/bash
# tests/scripts/lit.sh TGC FILECHECK FILE — a tiny lit: runs every
# "# RUN: ..." line of FILE from the repo root under pipefail, with %s
# replaced by FILE, %t by a path in a temporary folder (removed after), and `tgc`, `FileCheck` and `not` (inverts one command's
# exit status) found first on PATH. A file with no RUN line gets the
# pass-test default:  tgc dump %s --after canonicalize | FileCheck %s
tgc="$1"; fc="$2"; file="$3"
cd "$(dirname "$0")/../.." || exit 2
bin=$(mktemp -d); trap 'rm -rf "$bin"' EXIT
tmp="$bin/t"
ln -s "$tgc" "$bin/tgc"
ln -s "$fc" "$bin/FileCheck"
printf '#!/bin/sh\n"$@"\n[ $? -ne 0 ]\n' > "$bin/not"; chmod +x "$bin/not"
runs=$(sed -n 's/^[#/]*[[:space:]]*RUN:[[:space:]]*//p' "$file")
[ -z "$runs" ] && runs="tgc dump %s --after canonicalize | FileCheck %s"
status=0; n=0
while IFS= read -r cmd; do
  cmd=${cmd//%s/$file}
  cmd=${cmd//%t/$tmp}
  n=$((n + 1))
  if ! PATH="$bin:$PATH" bash -c "set -o pipefail; $cmd" < /dev/null; then echo "FAIL: $cmd"; status=1; fi
done <<< "$runs"
[ $status -eq 0 ] && echo "ok $file ($n RUN lines)"
exit $status
