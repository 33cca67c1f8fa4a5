// tests/cuda/matmul.cu — a shared-memory tiled matmul, the same kernel with
// its first __syncthreads removed (threads then read tiles the others have
// not written: a wrong answer in the emulator as on a GPU), and one warp's
// tensor-core tile through tgc_mma_bf16_16x8x16.
#include "tgc_cuda.h"

#define TILE 16

// C[M, N] = A[M, K] @ B[K, N], row-major; blocks of TILE x TILE threads.
extern "C" __global__ void __launch_bounds__(256)
    matmul_tiled(const float *A, const float *B, float *C, int M, int N, int K) {
  TGC_SHARED(float, As, TILE * TILE);
  TGC_SHARED(float, Bs, TILE * TILE);
  int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
  int row = (int)blockIdx.y * TILE + ty, col = (int)blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    As[ty * TILE + tx] = row < M && k0 + tx < K ? A[row * K + k0 + tx] : 0.0f;
    Bs[ty * TILE + tx] = k0 + ty < K && col < N ? B[(k0 + ty) * N + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < TILE; k++) acc += As[ty * TILE + k] * Bs[k * TILE + tx];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
TGC_REGISTER(matmul_tiled)

extern "C" __global__ void __launch_bounds__(256)
    matmul_missing_barrier(const float *A, const float *B, float *C, int M, int N, int K) {
  TGC_SHARED(float, As, TILE * TILE);
  TGC_SHARED(float, Bs, TILE * TILE);
  int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
  int row = (int)blockIdx.y * TILE + ty, col = (int)blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    As[ty * TILE + tx] = row < M && k0 + tx < K ? A[row * K + k0 + tx] : 0.0f;
    Bs[ty * TILE + tx] = k0 + ty < K && col < N ? B[(k0 + ty) * N + col] : 0.0f;
    // (the __syncthreads() that belongs here is missing)
    for (int k = 0; k < TILE; k++) acc += As[ty * TILE + k] * Bs[k * TILE + tx];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
TGC_REGISTER(matmul_missing_barrier)

// One warp: D[16, 8] = A[16, 16] @ B[16, 8] + C[16, 8] (A, B bf16 row-major,
// C, D f32 row-major), fragments built per the layout in tgc_cuda.h.
extern "C" __global__ void mma_tile(const __nv_bfloat16 *A, const __nv_bfloat16 *B, const float *C, float *D) {
  unsigned int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  unsigned int a[4] = {tgc_pack_bf16x2(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]),
                       tgc_pack_bf16x2(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]),
                       tgc_pack_bf16x2(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]),
                       tgc_pack_bf16x2(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9])};
  unsigned int b[2] = {tgc_pack_bf16x2(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]),
                       tgc_pack_bf16x2(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g])};
  float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
  float d[4];
  tgc_mma_bf16_16x8x16(d, a, b, c);
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}
TGC_REGISTER(mma_tile)
