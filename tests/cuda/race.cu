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

// Lanes of one warp exchanging through shared memory: ordered by __syncwarp
// when synced is 1, a race when it is 0.
extern "C" __global__ void warp_exchange(float *out, int synced) {
  TGC_SHARED(float, s, 32);
  unsigned int lane = threadIdx.x;
  s[lane] = (float)lane;
  if (synced) __syncwarp();
  out[lane] = s[31 - lane];
}
TGC_REGISTER(warp_exchange)

// A histogram in shared memory: atomics do not race with each other.
extern "C" __global__ void shared_histogram(const int *keys, int n, int *hist) {
  TGC_SHARED(int, bins, 16);
  int t = (int)threadIdx.x;
  if (t < 16) bins[t] = 0;
  __syncthreads();
  for (int i = t; i < n; i += (int)blockDim.x) atomicAdd(&bins[keys[i] & 15], 1);
  __syncthreads();
  if (t < 16) atomicAdd(&hist[t], (int)bins[t]);
}
TGC_REGISTER(shared_histogram)

// The same without the second barrier: a bin is read while others still add.
extern "C" __global__ void histogram_racy(const int *keys, int n, int *hist) {
  TGC_SHARED(int, bins, 16);
  int t = (int)threadIdx.x;
  if (t < 16) bins[t] = 0;
  __syncthreads();
  for (int i = t; i < n; i += (int)blockDim.x) atomicAdd(&bins[keys[i] & 15], 1);
  if (t < 16) atomicAdd(&hist[t], (int)bins[t]);
}
TGC_REGISTER(histogram_racy)
