// codegen/prelude/tgc_cuda.h — the prelude every kernel tgc generates
// includes. The same text compiles two ways:
//   on the GPU  NVRTC (or nvcc): __CUDACC__ / __CUDACC_RTC__ is defined, and
//               the few pieces the CUDA toolkit headers would give (bf16 and
//               half types) are defined here from PTX, so NVRTC needs no
//               toolkit header at all;
//   on the CPU  the host C++ compiler (cuda-emu): emu.h supplies the CUDA
//               surface (threadIdx, __syncthreads, shuffles, atomics, ...)
//               on fibers, and the bf16/half bit conversions.
// Below that split everything is common: index helpers, warp and block
// reductions, aligned vector loads (misalignment faults like a GPU's),
// __nv_bfloat16 / __half with CUDA's rounding (to nearest even) and
// operators, a tensor-core MMA (m16n8k16, bf16/f16 in, f32 accumulate),
// and the two macros generated code declares memory and kernels with:
//   TGC_SHARED(T, name, N)        a __shared__ array of N T's (the emulator
//                                 sizes, places and race-checks it)
//   TGC_DYNAMIC_SHARED(T, name)   T *name = the dynamic shared memory
//   TGC_REGISTER(kernel)          after each extern "C" __global__ kernel:
//                                 makes it launchable in the emulator
// Kernels are extern "C", not templates; no #line directives (the emulator
// assigns TGC_SHARED arrays to the kernel whose TGC_REGISTER follows them).
#ifndef TGC_CUDA_H
#define TGC_CUDA_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TGC_ON_GPU 1
#else
#include "emu.h"
#endif

#define TGC_FULL_MASK 0xffffffffu

// ---------------------------------------------------------------------------
// The GPU side of what emu.h gives the CPU
// ---------------------------------------------------------------------------
#ifdef TGC_ON_GPU
#define TGC_SHARED(T, name, N) __shared__ __align__(16) T name[N]
#define TGC_DYNAMIC_SHARED(T, name)                                \
  extern __shared__ __align__(16) unsigned char tgc_dynamic_smem[]; \
  T *name = reinterpret_cast<T *>(tgc_dynamic_smem)
#define TGC_REGISTER(kernel) static_assert(sizeof(&kernel) != 0, #kernel " is a kernel");
// The hardware faults on a misaligned vector access by itself.
#define TGC_CHECK_ALIGNED(p, bytes, what) ((void)0)

__device__ __forceinline__ unsigned short tgc_f32_to_bf16_bits(float f) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float tgc_bf16_bits_to_f32(unsigned short h) {
  return __uint_as_float((unsigned int)h << 16);
}
__device__ __forceinline__ unsigned short tgc_f32_to_f16_bits(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float tgc_f16_bits_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
#endif

// ---------------------------------------------------------------------------
// bf16 and half: storage is the bit pattern; arithmetic is done in float and
// rounded once to nearest even, which is correctly rounded for + - * /
// (float has more than 2p+2 bits for both formats) — what sm_80 computes.
// NaN converts to the canonical 0x7fff, overflow to infinity.
// ---------------------------------------------------------------------------
#if !defined(__CUDA_BF16_TYPES_EXIST__)
struct __align__(2) __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __device__ __forceinline__ __nv_bfloat16(float f) : __x(tgc_f32_to_bf16_bits(f)) {}
  __device__ __forceinline__ __nv_bfloat16(double f) : __x(tgc_f32_to_bf16_bits((float)f)) {}
  __device__ __forceinline__ __nv_bfloat16(int i) : __x(tgc_f32_to_bf16_bits((float)i)) {}
  __device__ __forceinline__ operator float() const { return tgc_bf16_bits_to_f32(__x); }
};
struct __align__(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
#endif
#if !defined(__CUDA_FP16_TYPES_EXIST__)
struct __align__(2) __half {
  unsigned short __x;
  __half() = default;
  __device__ __forceinline__ __half(float f) : __x(tgc_f32_to_f16_bits(f)) {}
  __device__ __forceinline__ __half(double f) : __x(tgc_f32_to_f16_bits((float)f)) {}
  __device__ __forceinline__ __half(int i) : __x(tgc_f32_to_f16_bits((float)i)) {}
  __device__ __forceinline__ operator float() const { return tgc_f16_bits_to_f32(__x); }
};
struct __align__(4) __half2 {
  __half x, y;
};
#endif

__device__ __forceinline__ __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
__device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
__device__ __forceinline__ __half __float2half(float f) { return __half(f); }
__device__ __forceinline__ __half __float2half_rn(float f) { return __half(f); }
__device__ __forceinline__ float __half2float(__half h) { return (float)h; }
__device__ __forceinline__ unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
__device__ __forceinline__ __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 h;
  h.__x = u;
  return h;
}
__device__ __forceinline__ unsigned short __half_as_ushort(__half h) { return h.__x; }
__device__ __forceinline__ __half __ushort_as_half(unsigned short u) {
  __half h;
  h.__x = u;
  return h;
}
__device__ __forceinline__ __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  __nv_bfloat162 r;
  r.x = __nv_bfloat16(a), r.y = __nv_bfloat16(b);
  return r;
}
__device__ __forceinline__ __half2 __floats2half2_rn(float a, float b) {
  __half2 r;
  r.x = __half(a), r.y = __half(b);
  return r;
}

#define TGC_LOWP_OPS(T)                                                                                   \
  __device__ __forceinline__ T operator+(T a, T b) { return T((float)a + (float)b); }                     \
  __device__ __forceinline__ T operator-(T a, T b) { return T((float)a - (float)b); }                     \
  __device__ __forceinline__ T operator*(T a, T b) { return T((float)a * (float)b); }                     \
  __device__ __forceinline__ T operator/(T a, T b) { return T((float)a / (float)b); }                     \
  __device__ __forceinline__ T operator-(T a) { T r = a; r.__x ^= 0x8000u; return r; }                    \
  __device__ __forceinline__ T &operator+=(T &a, T b) { return a = a + b; }                               \
  __device__ __forceinline__ T &operator-=(T &a, T b) { return a = a - b; }                               \
  __device__ __forceinline__ T &operator*=(T &a, T b) { return a = a * b; }                               \
  __device__ __forceinline__ T &operator/=(T &a, T b) { return a = a / b; }                               \
  __device__ __forceinline__ bool operator==(T a, T b) { return (float)a == (float)b; }                   \
  __device__ __forceinline__ bool operator!=(T a, T b) { return (float)a != (float)b; }                   \
  __device__ __forceinline__ bool operator<(T a, T b) { return (float)a < (float)b; }                     \
  __device__ __forceinline__ bool operator>(T a, T b) { return (float)a > (float)b; }                     \
  __device__ __forceinline__ bool operator<=(T a, T b) { return (float)a <= (float)b; }                   \
  __device__ __forceinline__ bool operator>=(T a, T b) { return (float)a >= (float)b; }                   \
  __device__ __forceinline__ T __hadd(T a, T b) { return a + b; }                                         \
  __device__ __forceinline__ T __hsub(T a, T b) { return a - b; }                                         \
  __device__ __forceinline__ T __hmul(T a, T b) { return a * b; }                                         \
  __device__ __forceinline__ T __hdiv(T a, T b) { return a / b; }                                         \
  __device__ __forceinline__ T __hfma(T a, T b, T c) { return T(fmaf((float)a, (float)b, (float)c)); }
TGC_LOWP_OPS(__nv_bfloat16)
TGC_LOWP_OPS(__half)
#undef TGC_LOWP_OPS

// Loads and stores of any element type through float (generated code is
// written once for f32, bf16 and f16).
__device__ __forceinline__ float tgc_to_float(float v) { return v; }
__device__ __forceinline__ float tgc_to_float(__nv_bfloat16 v) { return (float)v; }
__device__ __forceinline__ float tgc_to_float(__half v) { return (float)v; }
template <class T> __device__ __forceinline__ T tgc_from_float(float v) { return T(v); }

// ---------------------------------------------------------------------------
// Index helpers
// ---------------------------------------------------------------------------
// The thread's rank in its block, its lane and warp (warps are 32
// consecutive ranks, x fastest).
__device__ __forceinline__ unsigned int tgc_thread_rank() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
__device__ __forceinline__ unsigned int tgc_block_threads() { return blockDim.x * blockDim.y * blockDim.z; }
__device__ __forceinline__ unsigned int tgc_lane_id() { return tgc_thread_rank() & 31u; }
__device__ __forceinline__ unsigned int tgc_warp_id() { return tgc_thread_rank() >> 5; }
__device__ __forceinline__ unsigned int tgc_num_warps() { return (tgc_block_threads() + 31u) >> 5; }
// The 1-D global index and grid stride (64-bit: tensors may pass 2^31 elements).
__device__ __forceinline__ long long tgc_global_id() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ long long tgc_grid_stride() { return (long long)gridDim.x * blockDim.x; }
#define TGC_GRID_STRIDE_LOOP(i, n) for (long long i = tgc_global_id(); i < (long long)(n); i += tgc_grid_stride())
__device__ __forceinline__ long long tgc_ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------
// Warp and block reductions. All lanes of every warp must take part: blocks
// are whole warps (a lane that does not exist would read an undefined value,
// and the emulator makes that value NaN).
// ---------------------------------------------------------------------------
template <class T> __device__ __forceinline__ T tgc_warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(TGC_FULL_MASK, v, offset);
  return v;
}
template <class T> __device__ __forceinline__ T tgc_warp_max(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    T o = __shfl_xor_sync(TGC_FULL_MASK, v, offset);
    v = o > v ? o : v;
  }
  return v;
}
template <class T> __device__ __forceinline__ T tgc_warp_min(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    T o = __shfl_xor_sync(TGC_FULL_MASK, v, offset);
    v = o < v ? o : v;
  }
  return v;
}
// Block-wide sum / max, returned to every thread. scratch is a
// TGC_SHARED(T, scratch, 32): each warp leaves its partial in scratch[warp],
// then every warp reduces the partials itself (no broadcast step). Two
// barriers: the second lets the caller reuse scratch at once.
template <class T, class S> __device__ __forceinline__ T tgc_block_sum(T v, S &scratch) {
  v = tgc_warp_sum(v);
  if (tgc_lane_id() == 0) scratch[tgc_warp_id()] = v;
  __syncthreads();
  v = tgc_lane_id() < tgc_num_warps() ? (T)scratch[tgc_lane_id()] : (T)0;
  v = tgc_warp_sum(v);
  __syncthreads();
  return v;
}
template <class T, class S> __device__ __forceinline__ T tgc_block_max(T v, S &scratch, T lowest) {
  v = tgc_warp_max(v);
  if (tgc_lane_id() == 0) scratch[tgc_warp_id()] = v;
  __syncthreads();
  v = tgc_lane_id() < tgc_num_warps() ? (T)scratch[tgc_lane_id()] : lowest;
  v = tgc_warp_max(v);
  __syncthreads();
  return v;
}

// ---------------------------------------------------------------------------
// Vector loads and stores: 128-bit (float4, 8 x bf16 in a uint4) and 64-bit.
// The address must be aligned to the access size; a GPU faults with
// CUDA_ERROR_MISALIGNED_ADDRESS otherwise, and so does the emulator.
// ---------------------------------------------------------------------------
__device__ __forceinline__ float4 tgc_load_float4(const float *p) {
  TGC_CHECK_ALIGNED(p, 16, "tgc_load_float4");
  return *reinterpret_cast<const float4 *>(p);
}
__device__ __forceinline__ void tgc_store_float4(float *p, float4 v) {
  TGC_CHECK_ALIGNED(p, 16, "tgc_store_float4");
  *reinterpret_cast<float4 *>(p) = v;
}
__device__ __forceinline__ float2 tgc_load_float2(const float *p) {
  TGC_CHECK_ALIGNED(p, 8, "tgc_load_float2");
  return *reinterpret_cast<const float2 *>(p);
}
__device__ __forceinline__ void tgc_store_float2(float *p, float2 v) {
  TGC_CHECK_ALIGNED(p, 8, "tgc_store_float2");
  *reinterpret_cast<float2 *>(p) = v;
}
__device__ __forceinline__ uint4 tgc_load_128(const void *p) {
  TGC_CHECK_ALIGNED(p, 16, "tgc_load_128");
  return *reinterpret_cast<const uint4 *>(p);
}
__device__ __forceinline__ void tgc_store_128(void *p, uint4 v) {
  TGC_CHECK_ALIGNED(p, 16, "tgc_store_128");
  *reinterpret_cast<uint4 *>(p) = v;
}
// 8 bf16 (one 128-bit load) to float and back.
__device__ __forceinline__ void tgc_load_bf16x8(const __nv_bfloat16 *p, float out[8]) {
  uint4 v = tgc_load_128(p);
  const unsigned int w[4] = {v.x, v.y, v.z, v.w};
  for (int i = 0; i < 4; i++) {
    out[2 * i] = tgc_bf16_bits_to_f32((unsigned short)(w[i] & 0xffffu));
    out[2 * i + 1] = tgc_bf16_bits_to_f32((unsigned short)(w[i] >> 16));
  }
}
__device__ __forceinline__ void tgc_store_bf16x8(__nv_bfloat16 *p, const float in[8]) {
  unsigned int w[4];
  for (int i = 0; i < 4; i++)
    w[i] = (unsigned int)tgc_f32_to_bf16_bits(in[2 * i]) | ((unsigned int)tgc_f32_to_bf16_bits(in[2 * i + 1]) << 16);
  tgc_store_128(p, make_uint4(w[0], w[1], w[2], w[3]));
}

// ---------------------------------------------------------------------------
// Tensor cores: D = A * B + C for a 16x8x16 tile per warp (mma.sync
// m16n8k16 row.col, f32 accumulate), A and B in bf16 or f16 packed two per
// 32-bit word. Fragments, with g = lane / 4 and t = lane % 4:
//   a[4]: A[g][2t..2t+1], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]
//   b[2]: B[2t..2t+1][g], B[2t+8..2t+9][g]        (B is K x N)
//   c[4], d[4]: C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]
// (low half of a word = the lower column / row index). Every lane of the
// warp must call it. The emulator gathers the fragments of all 32 lanes
// and computes every product exactly and each sum in float, in k order.
// ---------------------------------------------------------------------------
// Two 16-bit values in one 32-bit fragment word, lo in the low half.
__device__ __forceinline__ unsigned int tgc_pack_bf16x2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return (unsigned int)lo.__x | ((unsigned int)hi.__x << 16);
}
__device__ __forceinline__ unsigned int tgc_pack_f16x2(__half lo, __half hi) {
  return (unsigned int)lo.__x | ((unsigned int)hi.__x << 16);
}
#ifdef TGC_ON_GPU
__device__ __forceinline__ void tgc_mma_bf16_16x8x16(float d[4], const unsigned int a[4], const unsigned int b[2],
                                                      const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}
__device__ __forceinline__ void tgc_mma_f16_16x8x16(float d[4], const unsigned int a[4], const unsigned int b[2],
                                                     const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}
#else
__device__ __forceinline__ void tgc_mma_bf16_16x8x16(float d[4], const unsigned int a[4], const unsigned int b[2],
                                                      const float c[4]) {
  tgc_emu::mma_16x8x16(d, a, b, c, tgc_bf16_bits_to_f32);
}
__device__ __forceinline__ void tgc_mma_f16_16x8x16(float d[4], const unsigned int a[4], const unsigned int b[2],
                                                     const float c[4]) {
  tgc_emu::mma_16x8x16(d, a, b, c, tgc_f16_bits_to_f32);
}
#endif

// ---------------------------------------------------------------------------
// ldmatrix: NM (1, 2 or 4) 8x8 matrices of 16-bit elements from shared
// memory, straight into mma.sync fragments. Lane 8m + i names row i of
// matrix m: tile[lane_idx + c], a uint4 (8 elements) of a TGC_SHARED array
// of uint4 (indices from lanes >= 8 NM are ignored); lane_idx is the
// lane's part, c the same for all lanes (a constant once unrolled). Lane
// L receives in r[m]
//   row L/4, elements 2(L%4) and 2(L%4)+1 of matrix m (low half first):
//     the A fragment of a row-major tile, the B fragment of an [N][K] one;
//   with TRANS, column L/4, rows 2(L%4) and 2(L%4)+1: the B fragment of a
//     [K][N] tile (ldmatrix .trans).
// Every lane of the warp must call it. The emulator gathers the 32 lanes'
// indices and reads the rows each lane's registers come from (racecheck sees
// those reads). On the GPU the address of tile[lane_idx] is computed once
// (loop-invariant) and c is added after an empty asm: otherwise the
// compiler hoists every call's address out of the loops, one register each
// (an inline asm operand cannot fold into an addressing mode as a plain
// shared load's offset does), and the attention kernels spilled.
// ---------------------------------------------------------------------------
#ifdef TGC_ON_GPU
template <int NM, bool TRANS, class S>
__device__ __forceinline__ void tgc_ldmatrix(unsigned int *r, S &tile, int lane_idx, int c) {
  static_assert(NM == 1 || NM == 2 || NM == 4, "ldmatrix loads 1, 2 or 4 matrices");
  unsigned int a;
  asm("{ .reg .u64 p; cvta.to.shared.u64 p, %1; cvt.u32.u64 %0, p; }"
      : "=r"(a)
      : "l"((unsigned long long)(const void *)&tile[lane_idx]));
  asm volatile("" : "+r"(a));
  a += (unsigned int)c * 16u;
  if (NM == 4 && TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  else if (NM == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  else if (NM == 2 && TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  else if (NM == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  else if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a));
}
#else
namespace tgc_emu {
// Element c (0..7) of a row of 8 16-bit values.
static inline unsigned int row_half(const uint4 &v, int c) {
  const unsigned int w[4] = {v.x, v.y, v.z, v.w};
  return (w[c >> 1] >> ((c & 1) * 16)) & 0xffffu;
}
}  // namespace tgc_emu
template <int NM, bool TRANS, class S>
static inline void tgc_ldmatrix(unsigned int *r, S &tile, int lane_idx, int c) {
  static_assert(NM == 1 || NM == 2 || NM == 4, "ldmatrix loads 1, 2 or 4 matrices");
  tgc_emu_thread *t = tgc_emu::self();
  int all[32], idx = lane_idx + c;
  t->host->warp_gather(t, 0xffffffffu, &idx, all, sizeof all[0]);
  const int lane = (int)t->lane, g = lane >> 2, q = lane & 3;
  for (int m = 0; m < NM; m++) {
    if (!TRANS) {
      const uint4 row = tile[all[8 * m + g]];
      r[m] = tgc_emu::row_half(row, 2 * q) | tgc_emu::row_half(row, 2 * q + 1) << 16;
    } else {
      const uint4 lo = tile[all[8 * m + 2 * q]], hi = tile[all[8 * m + 2 * q + 1]];
      r[m] = tgc_emu::row_half(lo, g) | tgc_emu::row_half(hi, g) << 16;
    }
  }
}
#endif

// ---------------------------------------------------------------------------
// cp.async (sm_80+): 16 bytes from global memory (16-byte aligned) straight
// into tile[idx] of a TGC_SHARED array of uint4, without passing through
// registers; tgc_cp_async_wait_all() waits for the thread's copies (then a
// barrier makes them visible to the block, as for plain stores). The
// emulator copies at once (the write is the issuing thread's, which
// racecheck sees); it cannot tell a missing wait, which the helpers that
// use it pair with their barrier.
// ---------------------------------------------------------------------------
#ifdef TGC_ON_GPU
template <class S>
__device__ __forceinline__ void tgc_cp_async_16(S &tile, int idx, const void *src) {
  unsigned int a;
  asm("{ .reg .u64 p; cvta.to.shared.u64 p, %1; cvt.u32.u64 %0, p; }"
      : "=r"(a)
      : "l"((unsigned long long)(const void *)&tile[idx]));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(src) : "memory");
}
__device__ __forceinline__ void tgc_cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
#else
template <class S>
static inline void tgc_cp_async_16(S &tile, int idx, const void *src) {
  TGC_CHECK_ALIGNED(src, 16, "tgc_cp_async_16");
  uint4 v;
  memcpy(&v, src, sizeof v);
  tile[idx] = v;
}
static inline void tgc_cp_async_wait_all() {}
#endif

#endif
