#!/bin/sh
# bench/gpu/bundle.sh — makes the bundle bench/gpu/run.sh runs on a bare GPU machine, from a Release build
# here: the tgc binary, the cuda kernel and example tests (they take the backend from TGC_TEST_BACKEND),
# the shared libraries tgc needs beyond glibc and the CUDA libraries (jansson; libgomp), and the NVRTC
# cache prebuilt for sm_90 for gpt2-124m B=16 T=1024 bf16 training (a cache miss there only costs the
# compile). The CUDA driver, NVRTC and cuBLASLt come from the GPU machine.
#   sh bench/gpu/bundle.sh [OUTDIR]       (default .gpu, ignored by git; about 45 MB)
# Then, on the GPU machine, from the project root: bash bench/gpu/run.sh OUTDIR
set -eu
cd "$(dirname "$0")/../.."
OUTDIR=${1:-.gpu}
BUILD=${BUILD:-build-gpu}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD" -j "$(nproc)" --target tgc test_cuda_kernels test_cuda_examples > /dev/null
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR/lib" "$OUTDIR/cache"
cp "$BUILD/tgc" "$BUILD/tests/test_cuda_kernels" "$BUILD/tests/test_cuda_examples" "$OUTDIR/"
for bin in "$OUTDIR/tgc" "$OUTDIR/test_cuda_kernels" "$OUTDIR/test_cuda_examples"; do
  ldd "$bin" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | while read -r lib; do
  cp -L "$lib" "$OUTDIR/lib/"
done
# CACHE=0 leaves the cache out: its key holds the NVRTC version, so it only hits where that version matches.
[ "${CACHE:-1}" = 0 ] || TGC_CACHE_DIR="$OUTDIR/cache" "$OUTDIR/tgc" compile examples/gpt.tg --config gpt2_124m -D B=16 -D T=1024 --train \
  --dtype bf16 --arch sm_90 -o "$OUTDIR/compile" > /dev/null
rm -rf "$OUTDIR/compile"
du -sh "$OUTDIR"
