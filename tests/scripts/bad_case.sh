#!/bin/sh
# tests/scripts/bad_case.sh TGC NAME — one case of the bad-input corpus.
# Runs `tgc check tests/bad/NAME.tg|.ir` (or the command line in
# tests/bad/NAME.args, where FILE stands for the model file) from the repo
# root and requires exit status 1, no crash, and stderr equal, byte for byte,
# to tests/bad/NAME.expected. tests/bad/NAME.stdout, when present, names
# where stdout goes instead of a temporary file (e.g. /dev/full). STATES in
# the .args and .expected files stands for the folder of generated state
# files (the third argument; see make_states.sh). tests/bad/NAME.env, when
# present, holds VAR=VALUE words set in the command's environment (e.g.
# TGC_MEMORY_BYTES: the memory check's budget, whatever the machine has).
tgc="$1"; name="$2"; states="$3"
cd "$(dirname "$0")/../.." || exit 2
file=""
for ext in tg ir; do [ -f "tests/bad/$name.$ext" ] && file="tests/bad/$name.$ext"; done
if [ -f "tests/bad/$name.args" ]; then
  args=$(sed "s|FILE|$file|g; s|STATES|$states|g" "tests/bad/$name.args")
else
  args="check $file"
fi
out=$(mktemp); err=$(mktemp)
sink="$out"
[ -f "tests/bad/$name.stdout" ] && sink=$(cat "tests/bad/$name.stdout")
envs=""
[ -f "tests/bad/$name.env" ] && envs=$(cat "tests/bad/$name.env")
# shellcheck disable=SC2086
timeout 60 env $envs "$tgc" $args </dev/null >"$sink" 2>"$err"
rc=$?
status=0
if [ "$rc" -ne 1 ]; then echo "FAIL $name: exit status $rc, expected 1"; status=1; fi
want=$(mktemp)
sed "s|STATES|$states|g" "tests/bad/$name.expected" > "$want"
if ! cmp -s "$err" "$want"; then
  echo "FAIL $name: stderr differs from tests/bad/$name.expected:"
  diff "$want" "$err" | head -40
  status=1
fi
rm -f "$out" "$err" "$want"
[ $status -eq 0 ] && echo "ok $name"
exit $status
