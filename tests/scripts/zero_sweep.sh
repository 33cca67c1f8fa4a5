#!/bin/sh
# tests/scripts/zero_sweep.sh TGC EXAMPLE — the example with every constant of its
# config (its `tiny` one if it has one, else the default) set to 0 and to 1
# (-D NAME=0, -D NAME=1), through check,
# stats (the training graph: autodiff, optimizer, memory plan), gradcheck
# (both autodiff modes, executed) and one training step: each must end with
# exit status 0 or 1 and no "internal error" (nor a sanitizer report in
# the sanitizer build) — a clear message or a result,
# never an abort. Prints every failing command; exit 1 if there is one.
tgc="$1"; ex="$2"
cd "$(dirname "$0")/../.." || exit 2
err=$(mktemp); trap 'rm -f "$err"' EXIT
status=0; n=0
data_for() {
  case "$1" in mlp) echo xor ;; reverse) echo reverse ;; *) echo copy ;; esac
}
name=$(basename "$ex" .tg)
# the config's constants: names before '=' in its line
line=$(grep -m1 '^config tiny ' "$ex")
cfg="--config tiny"
[ -z "$line" ] && line=$(grep -m1 '^config ' "$ex") && cfg=""
consts=$(printf '%s\n' "$line" | sed 's/.*{//; s/}.*//' | tr ',' '\n' | sed -n 's/^ *\([A-Za-z_][A-Za-z0-9_]*\) *=.*/\1/p')
for c in $consts; do
  for v in 0 1; do
    for cmd in "check" "stats" "gradcheck" "train --data $(data_for "$name") --steps 1"; do
      n=$((n + 1))
      # shellcheck disable=SC2086
      timeout 120 "$tgc" $cmd "$ex" $cfg -D "$c=$v" > /dev/null 2> "$err" < /dev/null
      rc=$?
      if [ $rc -gt 1 ] || grep -q -e "internal error" -e "Sanitizer" -e "runtime error" "$err"; then
        echo "FAIL (exit $rc): tgc $cmd $ex $cfg -D $c=$v"
        head -3 "$err"
        status=1
      fi
    done
  done
done
echo "$n runs"
[ $status -eq 0 ] && echo "ok: no abort and no internal error"
exit $status
