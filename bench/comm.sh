#!/bin/sh
# bench/comm.sh — throughput of tgc's collectives (all_reduce, all_gather,
# send/recv) on 2 and 4 CPU ranks under mpirun, for buffers of 4 KiB to
# 64 MiB (bench/comm_bench.c: time per call, MB/s per rank, the
# algorithm's MB/s). Run by hand; figures and the machine's load go in
# bench/README.md. Builds a Release tree in build-bench/ (-DTGC_BENCH=ON).
#   sh bench/comm.sh [SECONDS_PER_ROW]      (default 0.5)
set -e
cd "$(dirname "$0")/.."
secs="${1:-0.5}"
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DTGC_BENCH=ON >/dev/null
cmake --build build-bench -j2 --target comm_bench >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for np in 2 4; do
  mpirun --oversubscribe -np "$np" build-bench/bench/comm_bench "$secs"
  echo
done
