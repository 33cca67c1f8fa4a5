// tests/cuda/race.cu — reversing each block's slice through shared memory,
// once with a planted race (no barrier between the writes and the reads:
// thread t reads the element thread blockDim.x-1-t writes) and once with its
// __syncthreads. Racecheck must report the first and not the second.
#include "tgc_cuda.h"

extern "C" __global__ void reverse_racy(const float *x, float *out) {
  TGC_SHARED(float, buf, 256);
  unsigned int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  buf[t] = x[base + t];
  out[base + t] = buf[blockDim.x - 1 - t];
}
TGC_REGISTER(reverse_racy)

extern "C" __global__ void reverse_synced(const float *x, float *out) {
  TGC_SHARED(float, buf, 256);
  unsigned int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  buf[t] = x[base + t];
  __syncthreads();
  out[base + t] = buf[blockDim.x - 1 - t];
}
TGC_REGISTER(reverse_synced)
