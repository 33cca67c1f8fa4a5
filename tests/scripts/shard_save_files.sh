#!/bin/sh
# tests/scripts/shard_save_files.sh MPIRUN TGC — which files a sharded save
# deletes, and which indexes a resume refuses (gpt tiny on dp=2,tp=2, 4
# ranks; docs/sharding.md, "Saved state"):
#  1. an index edited to list victim.txt 4 times: a save over it exits 0
#     and victim.txt survives; resuming from it is refused as damaged;
#  2. an index naming 5 files for 4 shards, or a name with '/': refused
#     with their messages; a rank file without "data_crc32" refused;
#  3. a one-process --resume st --save st removes the old rank files;
#  4. a save that fails on rank 1 (its file's name taken by a folder)
#     leaves no new file of rank 0 and the previous save whole;
#  5. rank files left in the index's "replaced" (a save killed while
#     removing them) are removed by the next save; anything else listed
#     there is left alone;
#  6. states of format version 1 (before "header_crc32"), sharded and
#     plain, still resume.
mpirun="$1"; tgc="$2"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$(dirname "$0")/../.." || exit 2
edit="sh tests/scripts/state_edit.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
M="train examples/gpt.tg --config tiny --data reverse --optimizer sgd"
fail() { echo "FAIL: $*"; exit 1; }
train4() { timeout 120 "$mpirun" --oversubscribe -np 4 "$tgc" $M --mesh dp=2,tp=2 --comm-timeout 60 "$@" > "$d/out" 2>&1; }
# expect WANT ARGS...: one-process tgc exits 1 with stderr exactly WANT
expect() {
  want="$1"; shift
  "$tgc" "$@" > /dev/null 2> "$d/err"; rc=$?
  [ "$rc" -eq 1 ] || { cat "$d/err"; fail "exit status $rc, expected 1: $*"; }
  printf '%s\n' "$want" > "$d/want"
  cmp -s "$d/err" "$d/want" || { echo "got:"; cat "$d/err"; echo "want:"; cat "$d/want"; fail "message: $*"; }
}
S="$d/st"
# shellcheck disable=SC2086
train4 --steps 2 --save "$S" || { cat "$d/out"; fail "first save"; }
cp "$S" "$d/good.index"

# 1. the data-loss case
echo "not a shard" > "$d/victim.txt"
$edit "$S" shards 'victim.txt\nvictim.txt\nvictim.txt\nvictim.txt'
cp "$S" "$d/victim.index"
# shellcheck disable=SC2086
expect "tgc: error: --resume: $S: damaged index: shard 0's name \"victim.txt\" is not of the form st.step<S>.rank<R>-of-<N>" \
  $M --steps 3 --resume "$S"
# shellcheck disable=SC2086
train4 --steps 3 --save "$S" || { cat "$d/out"; fail "save over the edited index"; }
[ -f "$d/victim.txt" ] || fail "victim.txt was deleted by a save over an index that listed it"
rm "$d"/st.step2.* # no index lists them since the edit: the save left them, as it must
echo "1: victim.txt survives a save over an index listing it"

# 2. damaged indexes
cp "$d/good.index" "$d/five"
for r in 0 1 2 3; do cp "$d/st.step3.rank$r-of-4" "$d/five.step2.rank$r-of-4"; done
$edit "$d/five" shards 'five.step2.rank0-of-4\nfive.step2.rank1-of-4\nfive.step2.rank2-of-4\nfive.step2.rank3-of-4\nfive.step2.rank3-of-4'
# shellcheck disable=SC2086
expect "tgc: error: --resume: $d/five: damaged index: metadata \"shards\" names 5 files, but \"sharded\" says 4" \
  $M --steps 3 --resume "$d/five"
cp "$d/good.index" "$d/slash"
$edit "$d/slash" shards 'x/slash.step2.rank0-of-4\nslash.step2.rank1-of-4\nslash.step2.rank2-of-4\nslash.step2.rank3-of-4'
# shellcheck disable=SC2086
expect "tgc: error: --resume: $d/slash: damaged index: shard 0's name \"x/slash.step2.rank0-of-4\" contains '/' (a shard name may not: the rank files lie next to the index)" \
  $M --steps 3 --resume "$d/slash"
cp "$S" "$d/nocrc"
for r in 0 1 2 3; do cp "$d/st.step3.rank$r-of-4" "$d/nocrc.step3.rank$r-of-4"; done
$edit "$d/nocrc" shards 'nocrc.step3.rank0-of-4\nnocrc.step3.rank1-of-4\nnocrc.step3.rank2-of-4\nnocrc.step3.rank3-of-4'
$edit "$d/nocrc.step3.rank2-of-4" data_crc32
# shellcheck disable=SC2086
expect "tgc: error: --resume: $d/nocrc.step3.rank2-of-4: no metadata \"data_crc32\" (the checksum of the tensor bytes every tgc state carries)" \
  $M --steps 4 --resume "$d/nocrc"
echo "2: 5 names, '/', no data_crc32: refused"

# 3. one process over a sharded index
mkdir "$d/one"
cp "$S" "$d"/st.step3.* "$d/one/"
# shellcheck disable=SC2086
"$tgc" $M --steps 4 --resume "$d/one/st" --save "$d/one/st" > "$d/out" 2>&1 || { cat "$d/out"; fail "one-process resume"; }
[ "$(ls "$d/one")" = st ] || { ls "$d/one"; fail "files left beside the one-process save"; }
echo "3: a one-process save removes the sharded save's files"

# 4. rank 1 cannot write: nothing new is left, the old save resumes
mkdir "$d/st.step5.rank1-of-4"
# shellcheck disable=SC2086
if train4 --steps 5 --resume "$S" --save "$S"; then fail "a save rank 1 could not write succeeded"; fi
grep -q "exists and is not a regular file (a directory)" "$d/out" || { cat "$d/out"; fail "rank 1's reason"; }
for r in 0 2 3; do [ ! -e "$d/st.step5.rank$r-of-4" ] || fail "st.step5.rank$r-of-4 left by a failed save"; done
rmdir "$d/st.step5.rank1-of-4"
# shellcheck disable=SC2086
"$tgc" $M --steps 3 --resume "$S" > "$d/out" 2>&1 || { cat "$d/out"; fail "the previous save does not resume"; }
echo "4: a save failing on rank 1 leaves no new file"

# 5. "replaced": left by a save killed while removing the old files
for r in 0 1 2 3; do cp "$d/st.step3.rank$r-of-4" "$d/st.step1.rank$r-of-4"; done
$edit "$S" replaced 'st.step1.rank0-of-4\nst.step1.rank1-of-4\nst.step1.rank2-of-4\nst.step1.rank3-of-4\nvictim.txt'
# shellcheck disable=SC2086
train4 --steps 4 --resume "$S" --save "$S" || { cat "$d/out"; fail "save over an index with replaced files"; }
ls "$d"/st.step1.* > /dev/null 2>&1 && fail "the files in \"replaced\" are still there"
ls "$d"/st.step3.* > /dev/null 2>&1 && fail "the replaced save's files are still there"
[ -f "$d/victim.txt" ] || fail "victim.txt (listed in \"replaced\") was deleted"
[ "$(ls "$d" | grep -c '^st\.')" -eq 4 ] || { ls "$d"; fail "not exactly the 4 new rank files"; }
echo "5: the next save removes the rank files in \"replaced\", nothing else"
# 6. states written before "header_crc32" (format version 1) still resume
mkdir "$d/v1"
cp "$S" "$d"/st.step4.* "$d/v1/"
$edit "$d/v1/st" format tgc-train-1 && $edit "$d/v1/st" header_crc32
for r in 0 1 2 3; do
  $edit "$d/v1/st.step4.rank$r-of-4" format tgc-train-shard-1 && $edit "$d/v1/st.step4.rank$r-of-4" header_crc32
done
grep -q header_crc32 "$d/v1/st" "$d"/v1/st.step4.* && fail "header_crc32 still there"
# shellcheck disable=SC2086
"$tgc" $M --steps 5 --resume "$d/v1/st" --save "$d/v1/plain" > "$d/out" 2>&1 || { cat "$d/out"; fail "a version 1 sharded state"; }
$edit "$d/v1/plain" format tgc-train-1 && $edit "$d/v1/plain" header_crc32
# shellcheck disable=SC2086
"$tgc" $M --steps 6 --resume "$d/v1/plain" > "$d/out" 2>&1 || { cat "$d/out"; fail "a version 1 plain state"; }
echo "6: version 1 states (no header_crc32) resume"
echo ok
