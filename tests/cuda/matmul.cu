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

// The same tile with every fragment from shared memory by ldmatrix: A
// (copied in by cp.async) row-major through x4 (A fragments), B [K][N] through x2 .trans and B
// transposed ([N][K]) through x2 (B fragments), and B's two k halves through
// x1 .trans. Rows padded to 3 uint4 (24 elements) as tgc's attention pads
// them. D1, D2 and D3 must all equal A B + C.
extern "C" __global__ void ldmatrix_tile(const __nv_bfloat16 *A, const __nv_bfloat16 *B, const float *C, float *D1,
                                         float *D2, float *D3) {
  TGC_SHARED(uint4, As, 16 * 3);
  TGC_SHARED(uint4, Bs, 16 * 3);
  TGC_SHARED(uint4, Bts, 8 * 3);
  unsigned int lane = threadIdx.x, g = lane >> 2, t = lane & 3, m = lane >> 3, i = lane & 7;
  for (int r = 0; r < 16; r++)  // A's rows are 32 bytes: two 16-byte copies each
    if (lane < 2) tgc_cp_async_16(As, r * 3 + lane, A + r * 16 + lane * 8);
  for (int r = 0; r < 16; r++)
    if (lane == 0) {
      unsigned int w[4];
      for (int x = 0; x < 4; x++) w[x] = tgc_pack_bf16x2(B[r * 8 + 2 * x], B[r * 8 + 2 * x + 1]);
      Bs[r * 3] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  if (lane < 16) {  // Bt[n][k] = B[k][n]: row n = lane / 2, half lane % 2
    unsigned int n = lane >> 1, h = lane & 1, w[4];
    for (int x = 0; x < 4; x++) w[x] = tgc_pack_bf16x2(B[(h * 8 + 2 * x) * 8 + n], B[(h * 8 + 2 * x + 1) * 8 + n]);
    Bts[n * 3 + h] = make_uint4(w[0], w[1], w[2], w[3]);
  }
  tgc_cp_async_wait_all();
  __syncthreads();
  unsigned int a[4], b[2], bt[2], b1[2];
  tgc_ldmatrix<4, false>(a, As, (int)(((m & 1) * 8 + i) * 3 + (m >> 1)), 0);
  tgc_ldmatrix<2, true>(b, Bs, (int)(((m & 1) * 8 + i) * 3), 0);
  tgc_ldmatrix<2, false>(bt, Bts, (int)(i * 3 + (m & 1)), 0);
  tgc_ldmatrix<1, true>(b1, Bs, (int)(i * 3), 0);
  tgc_ldmatrix<1, true>(b1 + 1, Bs, (int)(i * 3), 8 * 3);
  float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
  float *out[3] = {D1, D2, D3};
  const unsigned int *bs[3] = {b, bt, b1};
  for (int v = 0; v < 3; v++) {
    float d[4];
    tgc_mma_bf16_16x8x16(d, a, bs[v], c);
    out[v][g * 8 + 2 * t] = d[0];
    out[v][g * 8 + 2 * t + 1] = d[1];
    out[v][(g + 8) * 8 + 2 * t] = d[2];
    out[v][(g + 8) * 8 + 2 * t + 1] = d[3];
  }
}
TGC_REGISTER(ldmatrix_tile)
