// codegen/prelude/tgc_attention.h — fused attention, FlashAttention-2
// style: the T x S scores never leave shared memory or registers.
//
//   attention(q[BH,T,E], k[BH,S,E], v[BH,S,F]) {scale, causal} -> o[BH,T,F], lse[BH,T]
//     s_ij = scale q_i . k_j, masked where j > i + (S - T) when causal
//     (j > i + qpos[0] with attention's optional 4th operand, a decode step;
//     the scalar kernel only);
//     o_i = softmax(s_i) v, lse_i = log sum_j e^(s_ij)
//   backward (FlashAttention-2's): p_ij = e^(s_ij - lse_i), D_i = do_i . o_i,
//     dv_j = sum_i p_ij do_i, ds_ij = p_ij (do_i . v_j - D_i),
//     dk_j = scale sum_i ds_ij q_i, dq_i = scale sum_j ds_ij k_j
//
// Two forward kernels:
//   attention_fwd        any float dtype: a block of 128 threads owns BR
//                        query rows, walks the key tiles (BC keys) through
//                        shared memory in the accumulation type A (float,
//                        double for f64): scores by dot products from shared
//                        memory, the online softmax one thread per row
//                        (running max m, sum l; the output rescaled by
//                        e^(m_old - m_new)), then o += p v in registers;
//   attention_fwd_mma    bf16 / f16 on tensor cores (sm_80+): 4 warps, 16
//                        query rows each, 64 keys per tile; q stays in
//                        registers as MMA fragments, s = q k^T and o += p v
//                        are mma.sync m16n8k16 with fp32 accumulation, the
//                        probabilities going from the score accumulators to
//                        the A fragments of p v without leaving registers
//                        (FlashAttention-2's register reuse); the softmax
//                        statistics are reduced over the 4 lanes that hold
//                        a row. E a multiple of 16, F of 8. K and V tiles
//                        come by cp.async into padded shared rows, two
//                        stages (att_pipeline), their B fragments by
//                        ldmatrix; exponentials are ex2 of scores in log2
//                        units (docs/cuda.md: the kernels' tiles).
// The backward is deterministic (no atomics): attention_bwd_dkdv (a block
// per key tile, looping over the query tiles) and attention_bwd_dq (a block
// per query tile, looping over key tiles) recompute the probabilities from
// lse; D_i comes from attention_bwd_rowdot, in the workspace. bf16 / f16
// with E and F multiples of 16 run them on tensor cores
// (attention_bwd_dkdv_mma, attention_bwd_dq_mma), otherwise operands are
// widened to float in shared memory.
// Grouped-query attention (the kernels' group argument, H = 1): k, v hold
// BH / group heads, query head bh reads kv head bh / group (no copy). In
// the backward the dq kernel reads them so; the dk/dv kernel runs a block
// per kv head's key tile (grid y = BH / group) that walks the group's query
// heads in order, summing their parts in its accumulators: dk, dv have k's
// and v's shapes, written once, no atomics, a fixed order.
// Layouts: H = 1, q[BH,T,E] and the rest as above; H > 1 (the op's `heads`
// attribute), q[B,T,H,E], k[B,S,H,E], v[B,S,H,F], o and do [B,T,H,F], dq,
// dk, dv as q, k, v, lse[B,H,T]: head bh = b*H + h is rows t*H*E + h*E of
// batch element b, so the head split / merge transposes around attention
// are never written (att_head: where a head starts; rows H*C apart).
// Rows that see no key at all (causal with T > S) give NaN outputs and lse
// -inf, as softmax of an all -inf row does in the unfused graph and the CPU.
// Needs tgc_cuda.h, tgc_ops.h.
#ifndef TGC_ATTENTION_H
#define TGC_ATTENTION_H

namespace tgc {

enum { ATT_THREADS = 128 };

// Element 0 of head bh of an [n, C] per-head matrix stored as above
// (its rows are H * C elements apart).
template <int H>
__device__ __forceinline__ long long att_head_at(long long bh, long long n, int C) {
  return (bh / H) * n * H * C + (bh % H) * C;
}
template <int H, class T>
__device__ __forceinline__ T *att_head(T *x, long long bh, long long n, int C) {
  return x + att_head_at<H>(bh, n, C);
}

// Loads rows [r0, r0 + R) of a [n, C] matrix with rows LD elements apart
// into tile[R][C] (type A), zeros for rows >= n.
template <int R, int C, int LD, class A, class T, class S>
__device__ __forceinline__ void att_load_tile(S &tile, const T *x, long long r0, long long n) {
  for (int idx = (int)threadIdx.x; idx < R * C; idx += ATT_THREADS) {
    long long r = r0 + idx / C;
    tile[idx] = r < n ? (A)tgc_acc(x[r * LD + idx % C]) : (A)0;
  }
}

// The block's share of an I x J product accumulated into registers:
// acc[u] (element tid + u * ATT_THREADS of the I x J result, row-major) +=
// sum_k X(i, k) Y(k, j), X stored [I][K] (or [K][I] when X_T), Y [K][J].
template <int I, int J, int K, bool X_T, class A, class SX, class SY>
__device__ __forceinline__ void att_mac(A *acc, SX &X, SY &Y) {
  enum { N = (I * J + ATT_THREADS - 1) / ATT_THREADS };
#pragma unroll
  for (int u = 0; u < N; u++) {
    int idx = (int)threadIdx.x + u * ATT_THREADS;
    if (idx >= I * J) break;
    int i = idx / J, j = idx % J;
    A a = acc[u];
    for (int k = 0; k < K; k++) a += (A)X[X_T ? k * I + i : i * K + k] * (A)Y[k * J + j];
    acc[u] = a;
  }
}

// rows[at + r] = lse, rows[at + BR + r] = D of query rows i0 + r (0 past the end).
template <int BR, class A, class L, class SR>
__device__ __forceinline__ void att_load_rows(SR &rows, const L *lse, const A *dsum, long long i0, long long Tq,
                                              int at = 0) {
  for (int r = (int)threadIdx.x; r < BR; r += ATT_THREADS) {
    long long i = i0 + r;
    rows[at + r] = i < Tq ? (A)tgc_acc(lse[i]) : (A)0;
    rows[at + BR + r] = i < Tq ? dsum[i] : (A)0;
  }
}

// ---------------------------------------------------------------------------
// Forward, any float dtype. Qs[BR*E], Ks[BC*E], Vs[BC*F], Ss[BR*BC] and
// rows[3*BR] (m, l, correction) are the kernel's TGC_SHARED arrays of A.
// ---------------------------------------------------------------------------
template <class A, int BR, int BC, int E, int F, bool CAUSAL, int H, class T, class L, class SQ, class SK, class SV,
          class SS, class SR>
__device__ __forceinline__ void attention_fwd(const T *q, const T *k, const T *v, T *o, L *lse, long long Tq, long long S,
                                              A scale, SQ &Qs, SK &Ks, SV &Vs, SS &Ss, SR &rows,
                                              const int *qpos = nullptr, long long group = 1) {
  // qpos (attention's 4th operand, a decode step over a KV cache): row i
  // sees keys j <= i + qpos[0]; without it j <= i + S - Tq. group: query
  // heads per kv head (grouped-query), kv head bh / group read in place
  const long long bh = blockIdx.y, i0 = (long long)blockIdx.x * BR, off = qpos ? (long long)qpos[0] : S - Tq;
  const T *qb = att_head<H>(q, bh, Tq, E), *kb = att_head<H>(k, bh / group, S, E), *vb = att_head<H>(v, bh / group, S, F);
  const int tid = (int)threadIdx.x;
  enum { NO = (BR * F + ATT_THREADS - 1) / ATT_THREADS };
  A acc[NO];
#pragma unroll
  for (int u = 0; u < NO; u++) acc[u] = (A)0;
  att_load_tile<BR, E, H * E, A>(Qs, qb, i0, Tq);
  for (int r = tid; r < BR; r += ATT_THREADS) rows[r] = -(A)tgc_inf_d(), rows[BR + r] = (A)0;
  long long ilast = i0 + BR < Tq ? i0 + BR : Tq;  // rows [i0, ilast) exist
  long long jend = CAUSAL ? (ilast + off < S ? ilast + off : S) : S;  // keys any of them sees
  for (long long j0 = 0; j0 < jend; j0 += BC) {
    __syncthreads();
    att_load_tile<BC, E, H * E, A>(Ks, kb, j0, S);
    att_load_tile<BC, F, H * F, A>(Vs, vb, j0, S);
    __syncthreads();
    for (int idx = tid; idx < BR * BC; idx += ATT_THREADS) {
      int r = idx / BC, c = idx % BC;
      long long i = i0 + r, j = j0 + c;
      A s = 0;
#pragma unroll 8
      for (int e = 0; e < E; e++) s += Qs[r * E + e] * Ks[c * E + e];
      s *= scale;
      bool masked = j >= S || (CAUSAL && j > i + off);
      Ss[idx] = masked ? -(A)tgc_inf_d() : s;
    }
    __syncthreads();
    for (int r = tid; r < BR; r += ATT_THREADS) {  // the online softmax, a thread per row
      A mx = -(A)tgc_inf_d();
      bool nan = false;
      for (int c = 0; c < BC; c++) {
        A s = Ss[r * BC + c];
        if (s > mx) mx = s;  // NaN scores reach l through e^
        nan |= s != s;
      }
      A m = rows[r], mnew = (m > mx || m != m) ? m : mx;
      if (mnew == -(A)tgc_inf_d()) {  // nothing visible yet
        if (nan) rows[BR + r] = (A)tgc_nan_d();
        for (int c = 0; c < BC; c++) Ss[r * BC + c] = (A)0;
        rows[2 * BR + r] = (A)1;
        continue;
      }
      A corr = tgc_exp(m - mnew), sum = 0;
      for (int c = 0; c < BC; c++) {
        A p = tgc_exp((A)Ss[r * BC + c] - mnew);
        Ss[r * BC + c] = p;
        sum += p;
      }
      rows[BR + r] = (A)rows[BR + r] * corr + sum;
      rows[r] = mnew;
      rows[2 * BR + r] = corr;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < NO; u++) {
      int idx = tid + u * ATT_THREADS;
      if (idx < BR * F) acc[u] *= (A)rows[2 * BR + idx / F];
    }
    att_mac<BR, F, BC, false>(acc, Ss, Vs);
  }
  __syncthreads();
  T *ob = att_head<H>(o, bh, Tq, F);
#pragma unroll
  for (int u = 0; u < NO; u++) {
    int idx = tid + u * ATT_THREADS;
    if (idx >= BR * F) break;
    int r = idx / F, f = idx % F;
    if (i0 + r >= Tq) continue;
    A l = rows[BR + r];
    ob[(i0 + r) * (H * F) + f] = tgc_round<T>(l > (A)0 ? acc[u] / l : (A)tgc_nan_d());
  }
  for (int r = tid; r < BR; r += ATT_THREADS) {
    if (i0 + r >= Tq) continue;
    A l = rows[BR + r], m = rows[r];
    lse[bh * Tq + i0 + r] = tgc_round<L>(l > (A)0 ? m + tgc_log(l) : (l == l && m == -(A)tgc_inf_d()) ? -(A)tgc_inf_d()
                                                                                                    : (A)tgc_nan_d());
  }
}

// ---------------------------------------------------------------------------
// Forward on tensor cores (bf16 / f16). Ks[STAGES * 64 * (E / 8 + 1)],
// Vs[STAGES * 64 * (F / 8 + 1)] of uint4.
// ---------------------------------------------------------------------------
__device__ __forceinline__ unsigned int att_pack(__nv_bfloat16 lo, __nv_bfloat16 hi) { return tgc_pack_bf16x2(lo, hi); }
__device__ __forceinline__ unsigned int att_pack(__half lo, __half hi) { return tgc_pack_f16x2(lo, hi); }
__device__ __forceinline__ void att_mma(__nv_bfloat16, float d[4], const unsigned a[4], const unsigned b[2]) {
  tgc_mma_bf16_16x8x16(d, a, b, d);
}
__device__ __forceinline__ void att_mma(__half, float d[4], const unsigned a[4], const unsigned b[2]) {
  tgc_mma_f16_16x8x16(d, a, b, d);
}

// Fragments (mma.sync m16n8k16; g = lane / 4, t = lane % 4): an A
// fragment holds rows g, g + 8 and columns 2t, 2t + 1 (+ 8) of a 16 x 16
// tile, a B fragment rows (the k index) 2t, 2t + 1 (+ 8) of column g of a
// 16 x 8 tile, an accumulator rows g, g + 8 and columns 2t, 2t + 1.

// A fragments of rows r0..r0+15 of a [n, C] matrix in global memory, rows
// LD elements apart (zeros past n).
template <int C, int LD, class T>
__device__ __forceinline__ void att_frag_a(unsigned (*a)[4], const T *x, long long r0, long long n, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < C / 16; kk++)
#pragma unroll
    for (int u = 0; u < 4; u++) {
      long long r = r0 + g + (u & 1) * 8;
      int c = kk * 16 + 2 * t + (u >> 1) * 8;
      a[kk][u] = r < n ? att_pack(x[r * LD + c], x[r * LD + c + 1]) : 0u;
    }
}

// Shared tiles of the tensor-core kernels are TGC_SHARED arrays of uint4
// (8 elements of T each), rows of C elements padded by one uint4 to C / 8 + 1
// uint4s: a row is 16 bytes further round the 32 banks than the one before,
// so the 8 rows an ldmatrix reads fall in distinct banks (unpadded, rows of
// 64 bf16 are 128 bytes: all 8 in the same 4 banks, 8-way conflicts).

// s[16 x N] = a[16 x K] X^T, X [N][LX] uint4 rows in shared memory from
// X[x0] (its first K columns): the B fragments of two 8-row groups of X per
// ldmatrix.x4.
template <int N, int K, int LX, class T, class SX>
__device__ __forceinline__ void att_mma_abt(float (*s)[4], const unsigned (*a)[4], SX &X, int x0, int lane) {
  const int m = lane >> 3, i = lane & 7;
  const int x4 = x0 + ((m >> 1) * 8 + i) * LX + (m & 1), x2 = x0 + i * LX + (m & 1);  // the lane's row
#pragma unroll
  for (int n = 0; n < N / 8; n += 2) {
    s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    if (n + 1 < N / 8) s[n + 1][0] = s[n + 1][1] = s[n + 1][2] = s[n + 1][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++) {
      unsigned b[4];
      if (n + 1 < N / 8) {
        tgc_ldmatrix<4, false>(b, X, x4, n * 8 * LX + kk * 2);
        att_mma(T(0.0f), s[n + 1], a[kk], b + 2);
      } else {
        tgc_ldmatrix<2, false>(b, X, x2, n * 8 * LX + kk * 2);
      }
      att_mma(T(0.0f), s[n], a[kk], b);
    }
  }
}

// The A fragments of a 16 x K product x from its accumulators, rounded to
// T (FlashAttention-2's register reuse: p and dS never leave registers);
// half the registers of the floats, so the next product's loads have room.
template <int K, class T>
__device__ __forceinline__ void att_frag_acc(unsigned (*a)[4], const float (*x)[4]) {
#pragma unroll
  for (int kc = 0; kc < K / 16; kc++) {
    a[kc][0] = att_pack(T(x[2 * kc][0]), T(x[2 * kc][1]));
    a[kc][1] = att_pack(T(x[2 * kc][2]), T(x[2 * kc][3]));
    a[kc][2] = att_pack(T(x[2 * kc + 1][0]), T(x[2 * kc + 1][1]));
    a[kc][3] = att_pack(T(x[2 * kc + 1][2]), T(x[2 * kc + 1][3]));
  }
}

// acc[16 x N] += a[16 x K] X, X [K][LX] uint4 rows in shared memory from
// X[x0], its B fragments by ldmatrix.trans, two 8-column groups per x4.
template <int N, int K, int LX, class T, class SX>
__device__ __forceinline__ void att_mma_ab(float (*acc)[4], const unsigned (*a)[4], SX &X, int x0, int lane) {
  const int m = lane >> 3, i = lane & 7;
  const int x4 = x0 + ((m & 1) * 8 + i) * LX + (m >> 1), x2 = x0 + ((m & 1) * 8 + i) * LX;  // the lane's row
#pragma unroll
  for (int kc = 0; kc < K / 16; kc++) {
#pragma unroll
    for (int n = 0; n < N / 8; n += 2) {
      unsigned b[4];
      if (n + 1 < N / 8) {
        tgc_ldmatrix<4, true>(b, X, x4, kc * 16 * LX + n);
        att_mma(T(0.0f), acc[n + 1], a[kc], b + 2);
      } else {
        tgc_ldmatrix<2, true>(b, X, x2, kc * 16 * LX + n);
      }
      att_mma(T(0.0f), acc[n], a[kc], b);
    }
  }
}

// Rows [r0, r0 + R) of a [n, C] matrix of T (rows LD elements apart; C a
// multiple of 8) into tile[at..][R][C / 8 + 1] of uint4, zeros past n: a 16-byte
// cp.async per 8 elements where x is 16-byte aligned and LD a multiple of
// 8 (coalesced 128-byte rows at C = 64 bf16; no registers hold the data:
// the loads of a whole tile cost none), else 8 element loads packed and
// stored. The caller waits (tgc_cp_async_wait_all) before its barrier.
template <int R, int C, int LD, class T, class S>
__device__ __forceinline__ void att_fill(S &tile, int at, const T *x, long long r0, long long n) {
  enum { CU = C / 8, LX = C / 8 + 1, N = R * CU, U = (N + ATT_THREADS - 1) / ATT_THREADS };
  const T *xr = x + r0 * LD;
  const bool vec = LD % 8 == 0 && ((unsigned long long)(const void *)xr & 15u) == 0;
  const int rows = n - r0 < R ? (int)(n - r0) : R, tid = (int)threadIdx.x;  // rows of the tile that exist
  // unrolled, offsets in int: a runtime loop kept 64-bit offsets of its
  // first iterations in registers across the kernel's main loop
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int idx = tid + u * ATT_THREADS;
    if (N % ATT_THREADS != 0 && idx >= N) break;
    const int rr = idx / CU, cu = idx % CU;
    const T *p = xr + rr * LD + cu * 8;
    if (vec && rr < rows) {
      tgc_cp_async_16(tile, at + rr * LX + cu, p);
      continue;
    }
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (rr < rows) v = make_uint4(att_pack(p[0], p[1]), att_pack(p[2], p[3]), att_pack(p[4], p[5]), att_pack(p[6], p[7]));
    tile[at + rr * LX + cu] = v;
  }
}

// The software pipeline of the loops over 64-row tiles (key tiles of k, v
// in the forward and dq; query tiles of q, do, lse, D in dk/dv): with
// STAGES = 2 (where two tiles fit the static shared memory) tile it + 1's
// copies are issued into the other stage as soon as tile it is ready, so
// they land while tile it is used; one barrier per tile. With 1 stage the
// block waits for each tile (two barriers). Block-wide; returns the stage
// of tile it. load(stage, it) issues tile it's copies into a stage.
template <int STAGES, class LOAD>
__device__ __forceinline__ int att_pipeline(int it, bool has_next, LOAD load) {
  const int cur = STAGES == 2 ? (it & 1) : 0;
  if (STAGES == 1 || it == 0) {
    if (STAGES == 1) __syncthreads();  // every warp is done with tile it - 1
    load(cur, it);
  }
  tgc_cp_async_wait_all();
  __syncthreads();  // tile it is there for all; (2 stages) every warp is done with tile it - 1's stage
  if (STAGES == 2 && has_next) load(cur ^ 1, it + 1);
  return cur;
}

template <int N>
__device__ __forceinline__ void att_zero(float (*acc)[4]) {
#pragma unroll
  for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// The first query row of the block's BR: causal, the last tile first (it
// sees the most keys, so the longest blocks start first and the grid's
// tail is short ones).
template <int BR, bool CAUSAL>
__device__ __forceinline__ long long att_block_rows() {
  return (long long)(CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BR;
}

// One past the last key the query rows [ib, ib + BR) see.
template <int BR, bool CAUSAL>
__device__ __forceinline__ long long att_key_end(long long ib, long long Tq, long long S) {
  long long ilast = ib + BR < Tq ? ib + BR : Tq;
  return CAUSAL ? (ilast + S - Tq < S ? ilast + S - Tq : S) : S;
}

// log2(e) and ln(2): the tensor-core kernels' exponentials are exp2f of
// scores in log2 units (the scale and log2(e) folded into one multiply, or
// one fma with the row's lse): an ex2 and no range reduction, where expf
// costs a multiply, its reduction and the ex2, per score.
__device__ __forceinline__ float att_log2e() { return 1.44269504088896341f; }
__device__ __forceinline__ float att_ln2() { return 0.693147180559945309f; }
// 2^x: on the GPU ex2.approx.ftz (one MUFU op, relative error about 2^-22;
// results below 2^-126 flush to 0, probabilities that vanish in the sums
// and in bf16 / f16 P anyway); exp2f in the emulator.
__device__ __forceinline__ float att_exp2(float x) {
#ifdef TGC_ON_GPU
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

template <int E, int F, bool CAUSAL, int H, int STAGES, class T, class SK, class SV>
__device__ __forceinline__ void attention_fwd_mma(const T *q, const T *k, const T *v, T *o, float *lse, long long Tq,
                                                  long long S, float scale, SK &Ks, SV &Vs, long long group = 1) {
  enum { BR = 64, BC = 64, LE = E / 8 + 1, LF = F / 8 + 1 };
  const int warp = (int)tgc_warp_id(), lane = (int)tgc_lane_id(), g = lane >> 2, t = lane & 3;
  const long long bh = blockIdx.y, ib = att_block_rows<BR, CAUSAL>(), i0 = ib + warp * 16, off = S - Tq;
  // grouped-query (group query heads per kv head): kv head bh / group, read in place
  const T *qb = att_head<H>(q, bh, Tq, E), *kb = att_head<H>(k, bh / group, S, E), *vb = att_head<H>(v, bh / group, S, F);
  const float NEG_INF = -tgc_inf_f(), sl2 = scale * att_log2e();  // m and the scores in log2 units
  unsigned qa[E / 16][4];  // this warp's 16 rows of q
  att_frag_a<E, H * E>(qa, qb, i0, Tq, g, t);
  float oacc[F / 8][4];
  att_zero<F / 8>(oacc);
  float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
  const long long jend = att_key_end<BR, CAUSAL>(ib, Tq, S);
  auto load = [&](int stage, int it) {
    att_fill<BC, E, H * E>(Ks, stage * BC * LE, kb, (long long)it * BC, S);
    att_fill<BC, F, H * F>(Vs, stage * BC * LF, vb, (long long)it * BC, S);
  };
  for (long long j0 = 0; j0 < jend; j0 += BC) {
    const int cur = att_pipeline<STAGES>((int)(j0 / BC), j0 + BC < jend, load);
    float s[BC / 8][4];  // q k^T
    att_mma_abt<BC, E, LE, T>(s, qa, Ks, cur * BC * LE, lane);
    // scale, mask (only a tile that reaches past S or, causal, past the
    // diagonal of the warp's first row), the rows' maxima (rows g and g+8
    // of the warp's 16)
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
      for (int x = 0; x < 4; x++) s[n][x] *= sl2;
    if (j0 + BC > S || (CAUSAL && j0 + BC - 1 > i0 + off)) {
      // in the tile's coordinates (small ints): key c exists while c < lim,
      // row r sees it while c - r <= -d (d = j0 - i0 - off is in (-BC, BR))
      const int lim = (int)(S - j0 < BC ? S - j0 : BC), d = CAUSAL ? (int)(j0 - i0 - off) : 0;
#pragma unroll
      for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int x = 0; x < 4; x++) {
          const int r = g + (x >> 1) * 8, c = n * 8 + 2 * t + (x & 1);
          if (c >= lim || (CAUSAL && d + c > r)) s[n][x] = NEG_INF;
        }
    }
    // maxima that propagate NaN: a NaN score makes the row's m, l and so
    // its output and lse NaN, as e^(NaN) reaching the sum does on the CPU
    float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
      for (int x = 0; x < 4; x++) {
        const int h = x >> 1;
        const float val = s[n][x];
        if (val > mx[h] || val != val) mx[h] = val;
      }
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {  // over the 4 lanes of the row
#pragma unroll
      for (int x = 1; x <= 2; x <<= 1) {
        float om = __shfl_xor_sync(TGC_FULL_MASK, mx[h], x);
        if (om > mx[h] || om != om) mx[h] = om;
      }
      float mnew = (m[h] > mx[h] || m[h] != m[h]) ? m[h] : mx[h];
      corr[h] = mnew == NEG_INF ? 1.0f : att_exp2(m[h] - mnew);
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int x = 2 * h; x < 2 * h + 2; x++) {
          float p = mnew == NEG_INF ? 0.0f : att_exp2(s[n][x] - mnew);
          s[n][x] = p;
          sum += p;
        }
      sum += __shfl_xor_sync(TGC_FULL_MASK, sum, 1);
      sum += __shfl_xor_sync(TGC_FULL_MASK, sum, 2);
      if (mnew != NEG_INF) {  // else nothing visible yet
        l[h] = l[h] * corr[h] + sum;
        m[h] = mnew;
      }
    }
#pragma unroll
    for (int n = 0; n < F / 8; n++) oacc[n][0] *= corr[0], oacc[n][1] *= corr[0], oacc[n][2] *= corr[1], oacc[n][3] *= corr[1];
    unsigned pa[BC / 16][4];
    att_frag_acc<BC, T>(pa, s);
    att_mma_ab<F, BC, LF, T>(oacc, pa, Vs, cur * BC * LF, lane);  // o += p v
  }
  T *ob = att_head<H>(o, bh, Tq, F);
#pragma unroll
  for (int n = 0; n < F / 8; n++)
#pragma unroll
    for (int x = 0; x < 4; x++) {
      int h = x >> 1;
      long long i = i0 + g + h * 8;
      if (i < Tq) ob[i * (H * F) + n * 8 + 2 * t + (x & 1)] = T(l[h] > 0.0f ? oacc[n][x] / l[h] : tgc_nan_f());
    }
  if (t == 0)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      long long i = i0 + g + h * 8;
      if (i < Tq)
        lse[bh * Tq + i] = l[h] > 0.0f                             ? (m[h] + log2f(l[h])) * att_ln2()
                           : (l[h] == l[h] && m[h] == NEG_INF) ? NEG_INF
                                                               : tgc_nan_f();
    }
}

// ---------------------------------------------------------------------------
// Backward. attention_bwd_rowdot: D_i = do_i . o_i into dsum (A), a warp
// per row (row i = bh * Tq + t of dsum, the layout of lse): the lanes read
// the row's consecutive elements (coalesced; a thread per row read rows
// H * F elements apart, a cache line per lane per load) and add by a warp
// butterfly; warps stride over the rows.
// ---------------------------------------------------------------------------
template <class A, int F, int H, class T>
__device__ __forceinline__ void attention_bwd_rowdot(const T *o, const T *dout, A *dsum, long long rows, long long Tq) {
  const long long per_block = (long long)(blockDim.x >> 5), stride = (long long)gridDim.x * per_block;
  const int lane = (int)tgc_lane_id();
  for (long long i = (long long)blockIdx.x * per_block + tgc_warp_id(); i < rows; i += stride) {
    const long long at = att_head_at<H>(i / Tq, Tq, F) + (i % Tq) * (H * F);
    A s = 0;
    for (int f = lane; f < F; f += 32) s += tgc_acc(dout[at + f]) * tgc_acc(o[at + f]);
    s = tgc_warp_sum(s);
    if (lane == 0) dsum[i] = s;
  }
}

// The probabilities and scaled score gradients of a BR x BC tile into
// Ps and dSs: p = e^(s - lse_i) where visible (else 0), dS = scale p (dp - D_i).
template <class A, int BR, int BC, int E, int F, bool CAUSAL, class SQ, class SK, class SV, class SD, class SS, class SR>
__device__ __forceinline__ void att_bwd_tile(long long i0, long long j0, long long Tq, long long S, A scale, SQ &Qs,
                                             SK &Ks, SV &Vs, SD &dOs, SS &Ps, SS &dSs, SR &rows) {
  const long long off = S - Tq;
  for (int idx = (int)threadIdx.x; idx < BR * BC; idx += ATT_THREADS) {
    int r = idx / BC, c = idx % BC;
    long long i = i0 + r, j = j0 + c;
    bool visible = i < Tq && j < S && !(CAUSAL && j > i + off);
    A s = 0, dp = 0;
#pragma unroll 8
    for (int e = 0; e < E; e++) s += Qs[r * E + e] * Ks[c * E + e];
#pragma unroll 8
    for (int f = 0; f < F; f++) dp += dOs[r * F + f] * Vs[c * F + f];
    A p = visible ? tgc_exp(s * scale - (A)rows[r]) : (A)0;
    Ps[idx] = p;
    dSs[idx] = visible ? scale * (p * (dp - (A)rows[BR + r])) : (A)0;  // D is NaN in a row that sees no key
  }
}

// dk, dv of BC keys: Ks[BC*E], Vs[BC*F], Qs[BR*E], dOs[BR*F], Ps, dSs
// [BR*BC], rows[2*BR] (lse, D).
template <class A, int BR, int BC, int E, int F, bool CAUSAL, int H, class T, class L, class SQ, class SK, class SV,
          class SD, class SS, class SR>
__device__ __forceinline__ void attention_bwd_dkdv(const T *q, const T *k, const T *v, const L *lse, const T *dout,
                                                   const A *dsum, T *dk, T *dv, long long Tq, long long S, A scale,
                                                   SQ &Qs, SK &Ks, SV &Vs, SD &dOs, SS &Ps, SS &dSs, SR &rows,
                                                   long long group = 1) {
  const long long kvh = blockIdx.y, j0 = (long long)blockIdx.x * BC, off = S - Tq;
  const int tid = (int)threadIdx.x;
  enum { NK = (BC * E + ATT_THREADS - 1) / ATT_THREADS, NV = (BC * F + ATT_THREADS - 1) / ATT_THREADS };
  A dka[NK], dva[NV];
#pragma unroll
  for (int u = 0; u < NK; u++) dka[u] = (A)0;
#pragma unroll
  for (int u = 0; u < NV; u++) dva[u] = (A)0;
  att_load_tile<BC, E, H * E, A>(Ks, att_head<H>(k, kvh, S, E), j0, S);
  att_load_tile<BC, F, H * F, A>(Vs, att_head<H>(v, kvh, S, F), j0, S);
  long long istart = CAUSAL && j0 - off > 0 ? (j0 - off) / BR * BR : 0;  // the first row that sees key j0
  for (long long bh = kvh * group; bh < (kvh + 1) * group; bh++) {  // the kv head's query heads, in order
    for (long long i0 = istart; i0 < Tq; i0 += BR) {
      __syncthreads();
      att_load_tile<BR, E, H * E, A>(Qs, att_head<H>(q, bh, Tq, E), i0, Tq);
      att_load_tile<BR, F, H * F, A>(dOs, att_head<H>(dout, bh, Tq, F), i0, Tq);
      att_load_rows<BR>(rows, lse + bh * Tq, dsum + bh * Tq, i0, Tq);
      __syncthreads();
      att_bwd_tile<A, BR, BC, E, F, CAUSAL>(i0, j0, Tq, S, scale, Qs, Ks, Vs, dOs, Ps, dSs, rows);
      __syncthreads();
      att_mac<BC, F, BR, true>(dva, Ps, dOs);  // dv_j += sum_i p_ij do_i
      att_mac<BC, E, BR, true>(dka, dSs, Qs);  // dk_j += sum_i ds_ij q_i (ds already scaled)
    }
  }
  T *dkb = att_head<H>(dk, kvh, S, E), *dvb = att_head<H>(dv, kvh, S, F);
#pragma unroll
  for (int u = 0; u < NK; u++) {
    int idx = tid + u * ATT_THREADS;
    if (idx < BC * E && j0 + idx / E < S) dkb[(j0 + idx / E) * (H * E) + idx % E] = tgc_round<T>(dka[u]);
  }
#pragma unroll
  for (int u = 0; u < NV; u++) {
    int idx = tid + u * ATT_THREADS;
    if (idx < BC * F && j0 + idx / F < S) dvb[(j0 + idx / F) * (H * F) + idx % F] = tgc_round<T>(dva[u]);
  }
}

// dq of BR query rows (same shared arrays as attention_bwd_dkdv).
template <class A, int BR, int BC, int E, int F, bool CAUSAL, int H, class T, class L, class SQ, class SK, class SV,
          class SD, class SS, class SR>
__device__ __forceinline__ void attention_bwd_dq(const T *q, const T *k, const T *v, const L *lse, const T *dout,
                                                 const A *dsum, T *dq, long long Tq, long long S, A scale, SQ &Qs,
                                                 SK &Ks, SV &Vs, SD &dOs, SS &Ps, SS &dSs, SR &rows,
                                                 long long group = 1) {
  const long long bh = blockIdx.y, i0 = (long long)blockIdx.x * BR, off = S - Tq;
  const int tid = (int)threadIdx.x;
  enum { NQ = (BR * E + ATT_THREADS - 1) / ATT_THREADS };
  A dqa[NQ];
#pragma unroll
  for (int u = 0; u < NQ; u++) dqa[u] = (A)0;
  att_load_tile<BR, E, H * E, A>(Qs, att_head<H>(q, bh, Tq, E), i0, Tq);
  att_load_tile<BR, F, H * F, A>(dOs, att_head<H>(dout, bh, Tq, F), i0, Tq);
  att_load_rows<BR>(rows, lse + bh * Tq, dsum + bh * Tq, i0, Tq);
  long long ilast = i0 + BR < Tq ? i0 + BR : Tq;
  long long jend = CAUSAL ? (ilast + off < S ? ilast + off : S) : S;
  for (long long j0 = 0; j0 < jend; j0 += BC) {
    __syncthreads();
    att_load_tile<BC, E, H * E, A>(Ks, att_head<H>(k, bh / group, S, E), j0, S);
    att_load_tile<BC, F, H * F, A>(Vs, att_head<H>(v, bh / group, S, F), j0, S);
    __syncthreads();
    att_bwd_tile<A, BR, BC, E, F, CAUSAL>(i0, j0, Tq, S, scale, Qs, Ks, Vs, dOs, Ps, dSs, rows);
    __syncthreads();
    att_mac<BR, E, BC, false>(dqa, dSs, Ks);  // dq_i += sum_j ds_ij k_j
  }
  T *dqb = att_head<H>(dq, bh, Tq, E);
#pragma unroll
  for (int u = 0; u < NQ; u++) {
    int idx = tid + u * ATT_THREADS;
    if (idx < BR * E && i0 + idx / E < Tq) dqb[(i0 + idx / E) * (H * E) + idx % E] = tgc_round<T>(dqa[u]);
  }
}

// ---------------------------------------------------------------------------
// Backward on tensor cores (bf16 / f16; E and F multiples of 16), the same
// two kernels as above with every product an mma.sync m16n8k16 in fp32:
// each warp owns 16 rows of the block's tile (keys in dkdv, queries in dq)
// as A fragments in registers, the other side's tile of 64 rows comes
// through shared memory (padded uint4 rows, fragments by ldmatrix). P and dS go
// from the accumulators to A fragments rounded to T (round to nearest
// even), as the forward's P does; scale is applied to dk and dq in fp32.
// ---------------------------------------------------------------------------
// p = e^(s scale - lse) = 2^(s sl2 - lse2) (sl2 = scale log2(e), lse2 =
// lse log2(e)) where visible, and dS / scale = p (dp - D) (0 where not
// visible: D is NaN in a row that sees no key).
__device__ __forceinline__ void att_mma_ds(float &s, float &dp, bool visible, float sl2, float lse2, float d) {
  float p = visible ? att_exp2(fmaf(s, sl2, -lse2)) : 0.0f;
  s = p;
  dp = visible ? p * (dp - d) : 0.0f;
}

// Rows r0 + g, r0 + g + 8 (below n) of a warp's 16 x C accumulators times
// mul into x (rows LD elements apart), rounded to T.
template <int C, int LD, class T>
__device__ __forceinline__ void att_store(T *x, const float (*acc)[4], float mul, long long r0, long long n, int g,
                                          int t) {
#pragma unroll
  for (int u = 0; u < 4; u++) {
    long long r = r0 + g + (u >> 1) * 8;
    if (r >= n) continue;
#pragma unroll
    for (int c = 0; c < C / 8; c++) x[r * LD + c * 8 + 2 * t + (u & 1)] = T(mul * acc[c][u]);
  }
}

template <bool CAUSAL>
__device__ __forceinline__ bool att_visible(long long i, long long j, long long Tq, long long S) {
  return i < Tq && j < S && !(CAUSAL && j > i + S - Tq);
}

// dk, dv of 64 keys: the block's warps own 16 keys each and walk the query
// tiles (BR rows): s^T = k q^T, dp^T = v do^T, dv += p^T do, dk += ds^T q.
// Qs[STAGES * BR * (E / 8 + 1)], dOs[STAGES * BR * (F / 8 + 1)] of uint4,
// rows[STAGES * 2 * BR] of float (lse, D).
template <int BR, int E, int F, bool CAUSAL, int H, int STAGES, class T, class SQ, class SD, class SR>
__device__ __forceinline__ void attention_bwd_dkdv_mma(const T *q, const T *k, const T *v, const float *lse,
                                                       const T *dout, const float *dsum, T *dk, T *dv, long long Tq,
                                                       long long S, float scale, SQ &Qs, SD &dOs, SR &rows,
                                                       long long group = 1) {
  enum { BC = 64, LE = E / 8 + 1, LF = F / 8 + 1 };
  const int warp = (int)tgc_warp_id(), lane = (int)tgc_lane_id(), g = lane >> 2, t = lane & 3;
  const long long kvh = blockIdx.y, jb = (long long)blockIdx.x * BC, j0 = jb + warp * 16, off = S - Tq;
  const float sl2 = scale * att_log2e();
  unsigned ka[E / 16][4], va[F / 16][4];
  att_frag_a<E, H * E>(ka, att_head<H>(k, kvh, S, E), j0, S, g, t);
  att_frag_a<F, H * F>(va, att_head<H>(v, kvh, S, F), j0, S, g, t);
  float dka[E / 8][4], dva[F / 8][4];
  att_zero<E / 8>(dka);
  att_zero<F / 8>(dva);
  long long istart = CAUSAL && jb - off > 0 ? (jb - off) / BR * BR : 0;  // the first row that sees key jb
  // one pipeline over the query tiles of the kv head's group of query heads
  // (head kvh * group + it / tiles, in order), so the copies of a head's
  // first tile overlap the previous head's last one
  const int tiles = istart < Tq ? (int)((Tq - istart + BR - 1) / BR) : 0, total = tiles * (int)group;
  auto load = [&](int stage, int it) {
    const long long bh = kvh * group + it / tiles, i = istart + (long long)(it % tiles) * BR;
    att_fill<BR, E, H * E>(Qs, stage * BR * LE, att_head<H>(q, bh, Tq, E), i, Tq);
    att_fill<BR, F, H * F>(dOs, stage * BR * LF, att_head<H>(dout, bh, Tq, F), i, Tq);
    att_load_rows<BR>(rows, lse + bh * Tq, dsum + bh * Tq, i, Tq, stage * 2 * BR);
  };
  for (int it = 0; it < total; it++) {
    const long long i0 = istart + (long long)(it % tiles) * BR;
    const int cur = att_pipeline<STAGES>(it, it + 1 < total, load), rw = cur * 2 * BR;
    float st[BR / 8][4], dpt[BR / 8][4];  // keys x queries
    att_mma_abt<BR, E, LE, T>(st, ka, Qs, cur * BR * LE, lane);
    att_mma_abt<BR, F, LF, T>(dpt, va, dOs, cur * BR * LF, lane);
#pragma unroll
    for (int n = 0; n < BR / 8; n++)
#pragma unroll
      for (int x = 0; x < 4; x++) {
        int c = n * 8 + 2 * t + (x & 1);
        bool visible = att_visible<CAUSAL>(i0 + c, j0 + g + (x >> 1) * 8, Tq, S);
        att_mma_ds(st[n][x], dpt[n][x], visible, sl2, rows[rw + c] * att_log2e(), rows[rw + BR + c]);
      }
    unsigned pa[BR / 16][4], dsa[BR / 16][4];
    att_frag_acc<BR, T>(pa, st);
    att_frag_acc<BR, T>(dsa, dpt);
    att_mma_ab<F, BR, LF, T>(dva, pa, dOs, cur * BR * LF, lane);   // dv_j += sum_i p_ij do_i
    att_mma_ab<E, BR, LE, T>(dka, dsa, Qs, cur * BR * LE, lane);   // dk_j += sum_i ds_ij q_i
  }
  att_store<E, H * E>(att_head<H>(dk, kvh, S, E), dka, scale, j0, S, g, t);
  att_store<F, H * F>(att_head<H>(dv, kvh, S, F), dva, 1.0f, j0, S, g, t);
}

// dq of 64 query rows: the warps own 16 rows each and walk the key tiles:
// s = q k^T, dp = do v^T, dq += ds k. Ks[STAGES * 64 * (E / 8 + 1)],
// Vs[STAGES * 64 * (F / 8 + 1)] of uint4.
template <int E, int F, bool CAUSAL, int H, int STAGES, class T, class SK, class SV>
__device__ __forceinline__ void attention_bwd_dq_mma(const T *q, const T *k, const T *v, const float *lse,
                                                     const T *dout, const float *dsum, T *dq, long long Tq, long long S,
                                                     float scale, SK &Ks, SV &Vs, long long group = 1) {
  enum { BR = 64, BC = 64, LE = E / 8 + 1, LF = F / 8 + 1 };
  const int warp = (int)tgc_warp_id(), lane = (int)tgc_lane_id(), g = lane >> 2, t = lane & 3;
  const long long bh = blockIdx.y, ib = att_block_rows<BR, CAUSAL>(), i0 = ib + warp * 16;
  const T *kb = att_head<H>(k, bh / group, S, E), *vb = att_head<H>(v, bh / group, S, F);
  unsigned qa[E / 16][4], da[F / 16][4];
  att_frag_a<E, H * E>(qa, att_head<H>(q, bh, Tq, E), i0, Tq, g, t);
  att_frag_a<F, H * F>(da, att_head<H>(dout, bh, Tq, F), i0, Tq, g, t);
  const float sl2 = scale * att_log2e();
  float rl[2], rd[2];  // lse and D of rows g and g + 8
#pragma unroll
  for (int h = 0; h < 2; h++) {
    long long i = i0 + g + h * 8;
    rl[h] = i < Tq ? lse[bh * Tq + i] * att_log2e() : 0.0f;  // in log2 units
    rd[h] = i < Tq ? dsum[bh * Tq + i] : 0.0f;
  }
  float dqa[E / 8][4];
  att_zero<E / 8>(dqa);
  const long long jend = att_key_end<BR, CAUSAL>(ib, Tq, S);
  auto load = [&](int stage, int it) {
    att_fill<BC, E, H * E>(Ks, stage * BC * LE, kb, (long long)it * BC, S);
    att_fill<BC, F, H * F>(Vs, stage * BC * LF, vb, (long long)it * BC, S);
  };
  for (long long j0 = 0; j0 < jend; j0 += BC) {
    const int cur = att_pipeline<STAGES>((int)(j0 / BC), j0 + BC < jend, load);
    float s[BC / 8][4], dp[BC / 8][4];
    att_mma_abt<BC, E, LE, T>(s, qa, Ks, cur * BC * LE, lane);
    att_mma_abt<BC, F, LF, T>(dp, da, Vs, cur * BC * LF, lane);
#pragma unroll
    for (int n = 0; n < BC / 8; n++)
#pragma unroll
      for (int x = 0; x < 4; x++) {
        int h = x >> 1;
        bool visible = att_visible<CAUSAL>(i0 + g + h * 8, j0 + n * 8 + 2 * t + (x & 1), Tq, S);
        att_mma_ds(s[n][x], dp[n][x], visible, sl2, rl[h], rd[h]);
      }
    unsigned dsa[BC / 16][4];
    att_frag_acc<BC, T>(dsa, dp);
    att_mma_ab<E, BC, LE, T>(dqa, dsa, Ks, cur * BC * LE, lane);  // dq_i += sum_j ds_ij k_j
  }
  att_store<E, H * E>(att_head<H>(dq, bh, Tq, E), dqa, scale, i0, Tq, g, t);
}

}  // namespace tgc

#endif
