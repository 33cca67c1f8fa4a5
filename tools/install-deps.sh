#!/bin/sh
# tools/install-deps.sh — installs, with apt-get, whatever of tgc's build and
# test dependencies this Debian 12 machine lacks (run as root). Idempotent:
# does nothing when all are present. (g++: the cuda-emu emulator compiles
# kernels with the host C++ compiler.)
set -e
pkgs="cmake gcc g++ make flex bison pkg-config libjansson-dev zlib1g-dev libopenmpi-dev openmpi-bin llvm-14-tools graphviz clang-14 libclang-rt-14-dev valgrind"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "tgc: installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq $missing
fi
