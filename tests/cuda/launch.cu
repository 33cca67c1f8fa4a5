// tests/cuda/launch.cu — kernels for the launch checks and faults of
// tests/unit/test_cuda_launch.c: dynamic shared memory (with and without
// the opt-in), 40 KiB of static shared memory, a vector load at a given
// offset (misaligned unless offset % 4 == 0), and a deadlock (one thread in
// a warp shuffle while the rest of its warp waits at __syncthreads).
#include "tgc_cuda.h"

// out[i] = n - 1 - i, through dynamic shared memory of n floats.
extern "C" __global__ void dynamic_reverse(float *out, int n) {
  TGC_DYNAMIC_SHARED(float, buf);
  for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) buf[i] = (float)i;
  __syncthreads();
  for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) out[i] = buf[n - 1 - i];
}
TGC_REGISTER(dynamic_reverse)

// 40 KiB static: launches only with at most 8 KiB dynamic without the opt-in.
extern "C" __global__ void static_40k(float *out) {
  TGC_SHARED(float, big, 10240);
  unsigned int t = threadIdx.x;
  for (unsigned int i = t; i < 10240; i += blockDim.x) big[i] = (float)i;
  __syncthreads();
  out[t] = big[10239 - t];
}
TGC_REGISTER(static_40k)

extern "C" __global__ void load4(const float *x, float *out, int offset) {
  float4 v = tgc_load_float4(x + offset);
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
TGC_REGISTER(load4)

extern "C" __global__ void deadlock(float *out) {
  float v = (float)threadIdx.x;
  if (threadIdx.x == 0) v = __shfl_sync(TGC_FULL_MASK, v, 1);
  else __syncthreads();
  out[threadIdx.x] = v;
}
TGC_REGISTER(deadlock)
