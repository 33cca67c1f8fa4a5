// codegen/prelude/tgc_kernels.h — the bodies generated kernels call for
// the ops that are more than an expression: row operations (softmax,
// layernorm, rmsnorm, add + layernorm and the norms' backward, argmax,
// cross-entropy and its gradient), reductions and the embedding gradient. Each is a template over its
// element types and how many threads share a row; the generated kernel
// (codegen/emit_*.c) fixes the sizes as constants, declares the shared
// memory (TGC_SHARED, in the kernel body, so the emulator can size and
// race-check it) and hands it in.
//
// Rows are handled by a group of threads: a warp (WARP = true: several
// rows per block, one per warp) or the whole block. Group reductions are
// butterflies (__shfl_xor_sync) and, for a block, one partial per warp in
// shared memory reduced by every warp in the same order: every thread gets
// the same bits, and the result does not depend on timing. Accumulation is
// in the type A the generated kernel names: double for the reductions and
// row statistics (as the CPU's reference kernels, which add in index order:
// sums differ only by the order, in the last bits); cross-entropy's row
// statistics in float, its per-position losses in double.
// Vector width W: a row is read W elements at a time (tgc_vload) when its
// length is a multiple of W (rows then start aligned).
// Needs tgc_cuda.h and tgc_ops.h first.
#ifndef TGC_KERNELS_H
#define TGC_KERNELS_H

namespace tgc {

// ---------------------------------------------------------------------------
// Group reductions
// ---------------------------------------------------------------------------
template <class A> __device__ __forceinline__ A warp_sum(A v) { return tgc_warp_sum(v); }
template <class A> __device__ __forceinline__ A warp_max(A v) {  // NaN wins
  for (int o = 16; o > 0; o >>= 1) v = tgc_max_nan(v, __shfl_xor_sync(TGC_FULL_MASK, v, o));
  return v;
}

template <bool WARP> struct group;
template <> struct group<true> {
  __device__ static __forceinline__ int rank() { return (int)tgc_lane_id(); }
  __device__ static __forceinline__ int size() { return 32; }
  template <class A, class S> __device__ static __forceinline__ A sum(A v, S &) { return warp_sum(v); }
  template <class A, class S> __device__ static __forceinline__ A max(A v, S &) { return warp_max(v); }
  __device__ static __forceinline__ void sync() { __syncwarp(); }
};
template <> struct group<false> {
  __device__ static __forceinline__ int rank() { return (int)tgc_thread_rank(); }
  __device__ static __forceinline__ int size() { return (int)tgc_block_threads(); }
  template <class A, class S> __device__ static __forceinline__ A sum(A v, S &scratch) {
    return tgc_block_sum(v, scratch);
  }
  template <class A, class S> __device__ static __forceinline__ A max(A v, S &scratch) {
    v = warp_max(v);
    if (tgc_lane_id() == 0) scratch[tgc_warp_id()] = v;
    __syncthreads();
    v = tgc_lane_id() < tgc_num_warps() ? (A)scratch[tgc_lane_id()] : -(A)tgc_inf_d();
    v = warp_max(v);
    __syncthreads();
    return v;
  }
  __device__ static __forceinline__ void sync() { __syncthreads(); }
};

// ---------------------------------------------------------------------------
// Reductions: one group per output over R contiguous elements (op 0 sum,
// 1 mean, 2 max); the result, in A, in every thread of the group.
// ---------------------------------------------------------------------------
template <class A, int OP, int W, bool WARP, class T, class S>
__device__ __forceinline__ A reduce_row(const T *x, long long R, S &scratch) {
  typedef group<WARP> G;
  A acc = OP == 2 ? -(A)tgc_inf_d() : (A)0;
  const long long RW = R / W * W;  // R need not be a multiple of W: the last R % W elements one by one
  for (long long j = (long long)G::rank() * W; j < RW; j += (long long)G::size() * W) {
    T v[W];
    tgc_vload<W>(x + j, v);
#pragma unroll
    for (int k = 0; k < W; k++) acc = OP == 2 ? tgc_max_nan(acc, tgc_acc(v[k])) : acc + tgc_acc(v[k]);
  }
  for (long long j = RW + G::rank(); j < R; j += G::size()) acc = OP == 2 ? tgc_max_nan(acc, tgc_acc(x[j])) : acc + tgc_acc(x[j]);
  acc = OP == 2 ? G::max(acc, scratch) : G::sum(acc, scratch);
  return OP == 1 ? acc / (A)R : acc;
}

// ---------------------------------------------------------------------------
// softmax / log_softmax of one row of C elements
// ---------------------------------------------------------------------------
template <class A, int W, bool WARP, bool LOG, class T, class O, class S>
__device__ __forceinline__ void softmax_row(const T *x, O *y, long long C, S &scratch) {
  typedef group<WARP> G;
  A mx = reduce_row<A, 2, W, WARP>(x, C, scratch);
  if (mx == -(A)tgc_inf_d()) mx = (A)0;  // all -inf: avoid inf - inf
  A sum = 0;
  for (long long j = (long long)G::rank() * W; j < C; j += (long long)G::size() * W) {
    T v[W];
    tgc_vload<W>(x + j, v);
#pragma unroll
    for (int k = 0; k < W; k++) sum += tgc_exp(tgc_acc(v[k]) - mx);
  }
  sum = G::sum(sum, scratch);
  A lse = tgc_log(sum);
  for (long long j = (long long)G::rank() * W; j < C; j += (long long)G::size() * W) {
    T v[W];
    O o[W];
    tgc_vload<W>(x + j, v);
#pragma unroll
    for (int k = 0; k < W; k++) {
      A d = tgc_acc(v[k]) - mx;
      o[k] = tgc_round<O>(LOG ? d - lse : tgc_exp(d) / sum);
    }
    tgc_vstore<W>(y + j, o);
  }
}

// softmax along an axis that is not the last: the line at x with stride
// `inner`, C elements, one thread.
template <class A, bool LOG, class T, class O>
__device__ __forceinline__ void softmax_strided(const T *x, O *y, long long C, long long inner) {
  A mx = -(A)tgc_inf_d();
  for (long long j = 0; j < C; j++) mx = tgc_max_nan(mx, tgc_acc(x[j * inner]));
  if (mx == -(A)tgc_inf_d()) mx = (A)0;
  A sum = 0;
  for (long long j = 0; j < C; j++) sum += tgc_exp(tgc_acc(x[j * inner]) - mx);
  A lse = tgc_log(sum);
  for (long long j = 0; j < C; j++) {
    A d = tgc_acc(x[j * inner]) - mx;
    y[j * inner] = tgc_round<O>(LOG ? d - lse : tgc_exp(d) / sum);
  }
}

// ---------------------------------------------------------------------------
// layernorm / rmsnorm / add + layernorm of one row of D elements
// ---------------------------------------------------------------------------
// mean, then the variance of (x - mean) (two passes, as the CPU); y = (x -
// mean) / sqrt(var + eps) * gamma + beta. layernorm_tail: from the mean on.
template <class A, int W, bool WARP, class T, class Gm, class Bt, class O, class S>
__device__ __forceinline__ void layernorm_tail(const T *x, const Gm *gamma, const Bt *beta, O *y, long long D, A eps,
                                               A mean, S &scratch) {
  typedef group<WARP> G;
  A var = 0;
  for (long long j = (long long)G::rank() * W; j < D; j += (long long)G::size() * W) {
    T v[W];
    tgc_vload<W>(x + j, v);
#pragma unroll
    for (int k = 0; k < W; k++) {
      A c = tgc_acc(v[k]) - mean;
      var += c * c;
    }
  }
  var = G::sum(var, scratch) / (A)D;
  A inv = (A)1 / tgc_sqrt(var + eps);
  for (long long j = (long long)G::rank() * W; j < D; j += (long long)G::size() * W) {
    T v[W];
    Gm g[W];
    Bt b[W];
    O o[W];
    tgc_vload<W>(x + j, v);
    tgc_vload<W>(gamma + j, g);
    tgc_vload<W>(beta + j, b);
#pragma unroll
    for (int k = 0; k < W; k++) o[k] = tgc_round<O>((tgc_acc(v[k]) - mean) * inv * tgc_acc(g[k]) + tgc_acc(b[k]));
    tgc_vstore<W>(y + j, o);
  }
}

template <class A, int W, bool WARP, class T, class Gm, class Bt, class O, class S>
__device__ __forceinline__ void layernorm_row(const T *x, const Gm *gamma, const Bt *beta, O *y, long long D, A eps,
                                              S &scratch) {
  A mean = reduce_row<A, 1, W, WARP>(x, D, scratch);
  layernorm_tail<A, W, WARP>(x, gamma, beta, y, D, eps, mean, scratch);
}

// s = x + r (stored: the residual stream), y = layernorm(s). Each thread
// reads back only the elements of s it wrote itself.
template <class A, int W, bool WARP, class T, class Gm, class Bt, class O, class S>
__device__ __forceinline__ void add_layernorm_row(const T *x, const T *r, const Gm *gamma, const Bt *beta, T *s, O *y,
                                                  long long D, A eps, S &scratch) {
  typedef group<WARP> G;
  A sum = 0;
  for (long long j = (long long)G::rank() * W; j < D; j += (long long)G::size() * W) {
    T a[W], b[W], c[W];
    tgc_vload<W>(x + j, a);
    tgc_vload<W>(r + j, b);
#pragma unroll
    for (int k = 0; k < W; k++) {
      c[k] = tgc_round<T>(tgc_acc(a[k]) + tgc_acc(b[k]));
      sum += tgc_acc(c[k]);
    }
    tgc_vstore<W>(s + j, c);
  }
  layernorm_tail<A, W, WARP>(s, gamma, beta, y, D, eps, G::sum(sum, scratch) / (A)D, scratch);
}

// x / sqrt(mean(x^2) + eps) * gamma
template <class A, int W, bool WARP, class T, class Gm, class O, class S>
__device__ __forceinline__ void rmsnorm_row(const T *x, const Gm *gamma, O *y, long long D, A eps, S &scratch) {
  typedef group<WARP> G;
  A ms = 0;
  for (long long j = (long long)G::rank() * W; j < D; j += (long long)G::size() * W) {
    T v[W];
    tgc_vload<W>(x + j, v);
#pragma unroll
    for (int k = 0; k < W; k++) ms += tgc_acc(v[k]) * tgc_acc(v[k]);
  }
  ms = G::sum(ms, scratch) / (A)D;
  A inv = (A)1 / tgc_sqrt(ms + eps);
  for (long long j = (long long)G::rank() * W; j < D; j += (long long)G::size() * W) {
    T v[W];
    Gm g[W];
    O o[W];
    tgc_vload<W>(x + j, v);
    tgc_vload<W>(gamma + j, g);
#pragma unroll
    for (int k = 0; k < W; k++) o[k] = tgc_round<O>(tgc_acc(v[k]) * inv * tgc_acc(g[k]));
    tgc_vstore<W>(y + j, o);
  }
}

// ---------------------------------------------------------------------------
// layernorm / rmsnorm backward: rows r0, r0 + step, ... < r1 of x, dy [.., D]
// -> dx, and this group's column sums of dy * xhat (sg) and dy (sb) for
// dgamma and dbeta, the statistics recomputed from x (the CPU's
// rt_kern_norm_grad):
//   dx = (dy gamma - xhat mean(dy gamma xhat) - mean(dy gamma)) rstd
// (no mean(dy gamma) for rmsnorm, whose mean is 0). Each thread owns the
// same columns in every row: (rank + t * size) * W + k for t < NT, so its
// column sums stay in registers, slot t * W + k, in C (float for 16-bit
// x: fp32 accumulation over a warp's rows, half the registers; else A).
// NT = 0: too many columns for registers (block groups only): the sums go
// straight to colws[0..D) and colws[D..2D), the block's own row of
// partials, zeroed here.
// ---------------------------------------------------------------------------
// The W elements at j of a row of x, of dy and of gamma.
template <int W, class T, class Gm>
__device__ __forceinline__ void load_xdg(const T *xr, const T *dr, const Gm *gamma, long long j, T *v, T *d, Gm *g) {
  tgc_vload<W>(xr + j, v);
  tgc_vload<W>(dr + j, d);
  tgc_vload<W>(gamma + j, g);
}

template <class A, int W, bool WARP, int NT, bool LN, class T, class Gm, class C, class S>
__device__ __forceinline__ void norm_grad_rows(const T *x, const Gm *gamma, const T *dy, T *dx, long long D, A eps,
                                               long long r0, long long r1, long long step, C *sg, C *sb, A *colws,
                                               S &scratch) {
  typedef group<WARP> G;
  if (NT == 0)
    for (long long j = (long long)G::rank() * W; j < D; j += (long long)G::size() * W)
#pragma unroll
      for (int k = 0; k < W; k++) colws[j + k] = colws[D + j + k] = (A)0;
#pragma unroll
  for (int s = 0; s < NT * W; s++) sg[s] = sb[s] = (C)0;
  for (long long row = r0; row < r1; row += step) {
    const T *xr = x + row * D, *dr = dy + row * D;
    T *yr = dx + row * D;
    const A mean = LN ? reduce_row<A, 1, W, WARP>(xr, D, scratch) : (A)0;
    A var = 0, m1 = 0, m2 = 0;
    for (long long j = (long long)G::rank() * W; j < D; j += (long long)G::size() * W) {
      T v[W];
      tgc_vload<W>(xr + j, v);
#pragma unroll
      for (int k = 0; k < W; k++) var += (tgc_acc(v[k]) - mean) * (tgc_acc(v[k]) - mean);
    }
    const A rstd = (A)1 / tgc_sqrt(G::sum(var, scratch) / (A)D + eps);
    for (long long j = (long long)G::rank() * W; j < D; j += (long long)G::size() * W) {
      T v[W], d[W];
      Gm g[W];
      load_xdg<W>(xr, dr, gamma, j, v, d, g);
#pragma unroll
      for (int k = 0; k < W; k++) {
        const A gh = (A)tgc_acc(d[k]) * (A)tgc_acc(g[k]);
        m1 += gh;
        m2 += gh * (tgc_acc(v[k]) - mean) * rstd;
      }
    }
    m1 = LN ? G::sum(m1, scratch) / (A)D : (A)0;
    m2 = G::sum(m2, scratch) / (A)D;
#pragma unroll
    for (int t = 0; t < (NT > 0 ? NT : 1); t++)
      for (long long j = ((long long)G::rank() + (long long)t * G::size()) * W; j < D;
           j += NT > 0 ? D : (long long)G::size() * W) {
        T v[W], d[W], o[W];
        Gm g[W];
        load_xdg<W>(xr, dr, gamma, j, v, d, g);
#pragma unroll
        for (int k = 0; k < W; k++) {
          const A dk = tgc_acc(d[k]), xhat = (tgc_acc(v[k]) - mean) * rstd;
          o[k] = tgc_round<T>((dk * tgc_acc(g[k]) - xhat * m2 - m1) * rstd);
          if (NT > 0) {
            sg[t * W + k] += (C)(dk * xhat);
            sb[t * W + k] += (C)dk;
          } else {
            colws[j + k] += dk * xhat;
            colws[D + j + k] += dk;
          }
        }
        tgc_vstore<W>(yr + j, o);
      }
  }
}

// The block's column sums into colws[0..2D) (dgamma's, then dbeta's) from
// each thread's registers (norm_grad_rows with NT > 0). Warp groups: the
// warps add theirs into cols (shared, 2D) one warp at a time, in order.
template <class A, int W, bool WARP, int NT, class C, class Sh>
__device__ __forceinline__ void norm_grad_block_sums(const C *sg, const C *sb, long long D, Sh &cols, A *colws) {
  typedef group<WARP> G;
  if (!WARP) {
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
      for (int k = 0; k < W; k++) {
        const long long j = ((long long)G::rank() + (long long)t * G::size()) * W + k;
        if (j < D) colws[j] = (A)sg[t * W + k], colws[D + j] = (A)sb[t * W + k];
      }
    return;
  }
  for (int w = 0; w < (int)tgc_num_warps(); w++) {
    if ((int)tgc_warp_id() == w)
#pragma unroll
      for (int t = 0; t < NT; t++)
#pragma unroll
        for (int k = 0; k < W; k++) {
          const long long j = ((long long)G::rank() + (long long)t * G::size()) * W + k;
          if (j < D) {
            cols[j] = w ? (A)cols[j] + (A)sg[t * W + k] : (A)sg[t * W + k];
            cols[D + j] = w ? (A)cols[D + j] + (A)sb[t * W + k] : (A)sb[t * W + k];
          }
        }
    __syncthreads();
  }
  for (long long j = tgc_thread_rank(); j < 2 * D; j += tgc_block_threads()) colws[j] = (A)cols[j];
}

// ---------------------------------------------------------------------------
// argmax along the last axis: the first index of the maximum, NaN never
// winning after index 0 (a NaN at index 0 wins): ir/scalar.h's rule.
// ---------------------------------------------------------------------------
template <bool WARP, class T, class S>
__device__ __forceinline__ int argmax_row(const T *x, long long C, S &scratch) {
  typedef group<WARP> G;
  typedef typename tgc_acc_t<T>::type A;
  A x0 = tgc_acc(x[0]);
  if (x0 != x0) return 0;
  A best = x0;
  long long bi = 0;  // index 0 is every thread's first candidate
  for (long long j = G::rank(); j < C; j += G::size()) {
    A v = tgc_acc(x[j]);
    if (v > best) best = v, bi = j;  // j ascending: the first maximum of this thread's elements
  }
  // the pair with the larger value, then the smaller index
  for (int o = 16; o > 0; o >>= 1) {
    A ov = __shfl_xor_sync(TGC_FULL_MASK, best, o);
    long long oi = __shfl_xor_sync(TGC_FULL_MASK, bi, o);
    if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
  }
  if (!WARP) {
    if (tgc_lane_id() == 0) scratch[tgc_warp_id()] = (double)bi;
    __syncthreads();
    long long w = 0;
    A wv = x0;
    for (int k = 0; k < (int)tgc_num_warps(); k++) {
      long long i = (long long)(double)scratch[k];
      A v = tgc_acc(x[i]);
      if (v > wv || (v == wv && i < w)) wv = v, w = i;
    }
    __syncthreads();
    bi = w;
  }
  return (int)bi;
}

// ---------------------------------------------------------------------------
// Cross-entropy: the loss of one row of V logits against its target
// (logsumexp - the target's logit), and the row of its gradient
// (softmax - onehot(target)) * scale. Targets out of range fail the launch.
// ---------------------------------------------------------------------------
template <int W, bool WARP, class T, class S>
__device__ __forceinline__ float ce_row_stats(const T *x, long long V, float *sum_out, S &scratch) {
  typedef group<WARP> G;
  float mx = reduce_row<float, 2, W, WARP>(x, V, scratch);
  if (mx == -tgc_inf_f()) mx = 0.0f;
  float sum = 0;
  const long long VW = V / W * W;  // a tail of V % W columns one by one
  for (long long j = (long long)G::rank() * W; j < VW; j += (long long)G::size() * W) {
    T v[W];
    tgc_vload<W>(x + j, v);
#pragma unroll
    for (int k = 0; k < W; k++) sum += tgc_exp(tgc_acc(v[k]) - mx);
  }
  for (long long j = VW + G::rank(); j < V; j += G::size()) sum += tgc_exp(tgc_acc(x[j]) - mx);
  *sum_out = G::sum(sum, scratch);
  return mx;
}

template <int W, bool WARP, class T, class I, class S>
__device__ __forceinline__ double ce_row_loss(const T *x, const I *targets, long long p, long long V, const char *name,
                                              S &scratch) {
  long long t = tgc_index(targets[p]);
  if (t < 0 || t >= V) tgc_fail_index("cross_entropy target", t, V, name, p);
  float sum, mx = ce_row_stats<W, WARP>(x, V, &sum, scratch);
  return (double)mx + (double)tgc_log(sum) - (double)tgc_acc(x[t]);
}

// The gradient row; returns the row's loss (what ce_row_loss gives: the
// same statistics), so one pass over the logits serves the loss too. y may
// be x (linear_cross_entropy's buffer): a thread writes only the columns it
// reads, and the target's logit, which every thread reads, is read before
// the barrier that precedes the first write.
template <int W, bool WARP, class T, class I, class O, class S>
__device__ __forceinline__ double ce_grad_row(const T *x, const I *targets, long long p, long long V, float scale, O *y,
                                              const char *name, S &scratch) {
  typedef group<WARP> G;
  long long t = tgc_index(targets[p]);
  if (t < 0 || t >= V) tgc_fail_index("cross_entropy_grad target", t, V, name, p);
  const double xt = (double)tgc_acc(x[t]);
  float sum, mx = ce_row_stats<W, WARP>(x, V, &sum, scratch);
  G::sync();
  const double loss = (double)mx + (double)tgc_log(sum) - xt;
  const long long VW = V / W * W;  // a tail of V % W columns one by one
  for (long long j = (long long)G::rank() * W; j < VW; j += (long long)G::size() * W) {
    T v[W];
    O o[W];
    tgc_vload<W>(x + j, v);
#pragma unroll
    for (int k = 0; k < W; k++) o[k] = tgc_round<O>((tgc_exp(tgc_acc(v[k]) - mx) / sum - (j + k == t ? 1.0f : 0.0f)) * scale);
    tgc_vstore<W>(y + j, o);
  }
  for (long long j = VW + G::rank(); j < V; j += G::size())
    y[j] = tgc_round<O>((tgc_exp(tgc_acc(x[j]) - mx) / sum - (j == t ? 1.0f : 0.0f)) * scale);
  return loss;
}

// ---------------------------------------------------------------------------
// The embedding gradient, deterministic: out[ids[p]] += g[p] in position
// order, as the CPU sums (the same bits), in four kernels over a bucketing
// of the positions by id computed once (codegen/emit_nn.c; the workspace
// holds cnt[V], start[V + 1], nrows, rows[R], bucket[P] as ints):
//   count  cnt[id] += 1 per position (integer atomics: counts do not depend
//          on the order); an id out of range fails the launch
//   scan   one block: start = the exclusive prefix sum of cnt, cnt[v] =
//          start[v] (a cursor), the rows that have positions in order into
//          rows[0..nrows)
//   place  bucket[cursor[id]++] = p: each row's positions, in any order
//   rows   a block per row that has positions (and 256 columns): it sorts
//          its bucket by position in shared memory (a rank sort: positions
//          are distinct, so the order is the same every run), then every
//          thread adds those rows of g to its column in that order. A row
//          with more than BUCKET_MAX positions walks all the ids in order
//          instead (at most P / BUCKET_MAX rows can).
// Every id is read twice and every row of g once (where every block once
// rescanned all the ids); rows without positions are not touched (the
// result starts zeroed). No float atomics: each output element has one writer.
// ---------------------------------------------------------------------------
enum { EMB_BUCKET_MAX = 1024 };

template <class I>
__device__ __forceinline__ void embedding_grad_count(const I *ids, int *cnt, long long P, long long V, const char *name) {
  TGC_GRID_STRIDE_LOOP(p, P) {
    long long id = tgc_index(ids[p]);
    if (id < 0 || id >= V) tgc_fail_index("embedding_grad id", id, V, name, p);
    else atomicAdd(cnt + id, 1);
  }
}

// The inclusive prefix sum of v over the block (warp_totals: TGC_SHARED(int, _, 32)).
template <class S> __device__ __forceinline__ int block_scan_inclusive(int v, S &warp_totals) {
  const int lane = (int)tgc_lane_id(), w = (int)tgc_warp_id();
  for (int o = 1; o < 32; o <<= 1) {
    int u = __shfl_up_sync(TGC_FULL_MASK, v, o);
    if (lane >= o) v += u;
  }
  if (lane == 31) warp_totals[w] = v;
  __syncthreads();
  int before = 0;
  for (int i = 0; i < w; i++) before += warp_totals[i];
  __syncthreads();
  return v + before;
}

template <class S1, class S2>
__device__ __forceinline__ void embedding_grad_scan(int *cnt, int *start, int *nrows, int *rows, int V, S1 &tot_s,
                                                    S2 &tot_r) {
  const int T = (int)tgc_block_threads(), t = (int)tgc_thread_rank(), per = (V + T - 1) / T;
  const int lo = min(t * per, V), hi = min(lo + per, V);
  int s = 0, r = 0;
  for (int v = lo; v < hi; v++) {
    int c = cnt[v];
    s += c;
    r += c != 0;
  }
  int so = block_scan_inclusive(s, tot_s) - s, ro = block_scan_inclusive(r, tot_r) - r;
  for (int v = lo; v < hi; v++) {
    int c = cnt[v];
    start[v] = so;
    cnt[v] = so;
    if (c) rows[ro++] = v;
    so += c;
  }
  if (t == T - 1) {
    start[V] = so;
    *nrows = ro;
  }
}

template <class I> __device__ __forceinline__ void embedding_grad_place(const I *ids, int *cursor, int *bucket, long long P) {
  TGC_GRID_STRIDE_LOOP(p, P) bucket[atomicAdd(cursor + tgc_index(ids[p]), 1)] = (int)p;
}

template <class I, class T, class O, class S1, class S2>
__device__ __forceinline__ void embedding_grad_rows(const I *ids, const T *g, O *out, const int *start, const int *nrows,
                                                    const int *rows, const int *bucket, long long P, long long D,
                                                    S1 &keys, S2 &order) {
  if ((int)blockIdx.x >= *nrows) return;  // the whole block: fewer rows have positions than the grid's blocks
  typedef typename tgc_acc_t<O>::type A;
  const int v = rows[blockIdx.x], s = start[v], n = start[v + 1] - s, nt = (int)tgc_block_threads();
  const int rank = (int)tgc_thread_rank();
  const long long col = (long long)blockIdx.y * nt + rank;
  A acc = (A)0;
  if (n <= EMB_BUCKET_MAX) {
    for (int i = rank; i < n; i += nt) keys[i] = bucket[s + i];
    __syncthreads();
    for (int i = rank; i < n; i += nt) {
      int k = keys[i], r = 0;
      for (int j = 0; j < n; j++) r += keys[j] < k;
      order[r] = k;
    }
    __syncthreads();
    if (col < D)
      for (int m = 0; m < n; m++) acc = tgc_acc(tgc_round<O>(acc + tgc_acc(g[(long long)order[m] * D + col])));
  } else if (col < D) {
    for (long long p = 0; p < P; p++)
      if (tgc_index(ids[p]) == v) acc = tgc_acc(tgc_round<O>(acc + tgc_acc(g[p * D + col])));  // each add rounded to O
  }
  if (col < D) out[(long long)v * D + col] = tgc_round<O>(acc);
}

// ---------------------------------------------------------------------------
// Multi-tensor reductions (count_nonfinite / sum_squares over many tensors,
// codegen/emit_multi.c). A tensor of n elements is cut into chunks of `per`
// elements, one block each: the block's threads stride through the chunk
// and the block adds their shares (a fixed order: deterministic), leaving
// one partial per chunk. chunk_total then adds a tensor's partials, a warp
// in a fixed order. The same code runs for every element type.
// ---------------------------------------------------------------------------
template <class T> __device__ __forceinline__ double chunk_squares(const T *x, long long n, long long chunk, long long per) {
  long long hi = (chunk + 1) * per < n ? (chunk + 1) * per : n;
  double s = 0;
  for (long long i = chunk * per + tgc_thread_rank(); i < hi; i += tgc_block_threads()) {
    double d = (double)tgc_acc(x[i]);
    s += d * d;
  }
  return s;
}
template <class T>
__device__ __forceinline__ unsigned long long chunk_nonfinite(const T *x, long long n, long long chunk, long long per) {
  long long hi = (chunk + 1) * per < n ? (chunk + 1) * per : n;
  unsigned long long bad = 0;
  for (long long i = chunk * per + tgc_thread_rank(); i < hi; i += tgc_block_threads()) bad += tgc_nonfinite_bits(x[i]);
  return bad;
}
// The sum of part[0..n), to every lane of the calling warp.
template <class A> __device__ __forceinline__ A chunk_total(const A *part, long long n) {
  A s = 0;
  for (long long j = tgc_lane_id(); j < n; j += 32) s += part[j];
  return warp_sum(s);
}

}  // namespace tgc

#endif
