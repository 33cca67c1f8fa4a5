// tests/cuda/warp.cu — reductions, votes, shuffles, atomics and bf16/half
// conversions: the warp- and block-level pieces of the prelude, run by
// tests/unit/test_cuda_emu.c against host references and compiled for sm_80
// and sm_90 by tests/unit/test_cuda_nvrtc.c.
#include "tgc_cuda.h"

// out[b] = the sum of x over block b's blockDim.x elements (0 past n).
extern "C" __global__ void block_sum(const float *x, float *out, int n) {
  TGC_SHARED(float, scratch, 32);
  long long i = tgc_global_id();
  float v = i < n ? x[i] : 0.0f;
  float s = tgc_block_sum(v, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}
TGC_REGISTER(block_sum)

// Per warp w: the ballot, any and all of x[i] > 0 (false past n).
extern "C" __global__ void warp_vote(const float *x, unsigned int *ballot, int *any, int *all, int n) {
  long long i = tgc_global_id();
  int pred = i < n && x[i] > 0.0f;
  unsigned int b = __ballot_sync(TGC_FULL_MASK, pred);
  int a = __any_sync(TGC_FULL_MASK, pred), l = __all_sync(TGC_FULL_MASK, pred);
  if (tgc_lane_id() == 0) {
    long long w = i / 32;
    ballot[w] = b, any[w] = a, all[w] = l;
  }
}
TGC_REGISTER(warp_vote)

// One warp; per lane 8 results: idx, up, down and xor shuffles with width
// 8, the same at width 32, a half-warp shuffle (mask 0x0000ffff, lanes
// 0..15 only) reading a lane of the other half (not taking part: undefined),
// and __reduce_add_sync / __match_any_sync.
extern "C" __global__ void shuffles(float *out) {
  unsigned int lane = threadIdx.x;
  float v = 100.0f + (float)lane;
  float *o = out + lane * 10;
  o[0] = __shfl_sync(TGC_FULL_MASK, v, (int)(lane + 3), 8);
  o[1] = __shfl_up_sync(TGC_FULL_MASK, v, 3, 8);
  o[2] = __shfl_down_sync(TGC_FULL_MASK, v, 3, 8);
  o[3] = __shfl_xor_sync(TGC_FULL_MASK, v, 5, 8);
  o[4] = __shfl_up_sync(TGC_FULL_MASK, v, 3);
  o[5] = __shfl_down_sync(TGC_FULL_MASK, v, 3);
  o[6] = __shfl_xor_sync(TGC_FULL_MASK, v, 17);
  if (lane < 16) o[7] = __shfl_sync(0x0000ffffu, v, (int)(lane + 16));
  else o[7] = 0.0f;
  o[8] = (float)__reduce_add_sync(TGC_FULL_MASK, lane);
  o[9] = (float)__match_any_sync(TGC_FULL_MASK, lane % 3);
}
TGC_REGISTER(shuffles)

// A histogram of keys into 16 bins, a float sum, the max key and a counter
// bumped by compare-and-swap, from every thread of a grid-stride loop.
extern "C" __global__ void atomics(const int *keys, int n, int *hist, float *sum, int *max_key,
                                   unsigned int *counter) {
  TGC_GRID_STRIDE_LOOP(i, n) {
    int k = keys[i];
    atomicAdd(&hist[k & 15], 1);
    atomicAdd(sum, 0.5f);
    atomicMax(max_key, k);
    unsigned int old = atomicAdd(counter, 0u), assumed;
    do {
      assumed = old;
      old = atomicCAS(counter, assumed, assumed + 1u);
    } while (old != assumed);
  }
}
TGC_REGISTER(atomics)

// float -> bf16 / half bits, back to float, and low-precision arithmetic
// (h + h * h: two roundings in each format).
extern "C" __global__ void low_precision(const float *x, unsigned short *bf16_bits, float *bf16_back,
                                         unsigned short *bf16_arith, unsigned short *f16_bits, float *f16_back,
                                         unsigned short *f16_arith, int n) {
  TGC_GRID_STRIDE_LOOP(i, n) {
    __nv_bfloat16 b = __float2bfloat16(x[i]);
    bf16_bits[i] = __bfloat16_as_ushort(b);
    bf16_back[i] = __bfloat162float(b);
    bf16_arith[i] = __bfloat16_as_ushort(b + b * b);
    __half h = __float2half(x[i]);
    f16_bits[i] = __half_as_ushort(h);
    f16_back[i] = __half2float(h);
    f16_arith[i] = __half_as_ushort(h + h * h);
  }
}
TGC_REGISTER(low_precision)
