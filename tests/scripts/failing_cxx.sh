#!/bin/sh
# tests/scripts/failing_cxx.sh — a host C++ compiler that always fails, as
# TGC_EMU_CXX: how the tests make cuda-emu's "NVRTC" refuse a program (the
# path a real NVRTC takes for a code generator bug).
echo "kernels.cu(1): error: this compiler always fails (tests/scripts/failing_cxx.sh)" >&2
exit 1
