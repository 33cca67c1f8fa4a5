/* runtime/cpu/kernels.h — private to the CPU backend: the kernel interface
 * shared by cpu.c (the backend, which owns the kernel table) and the
 * kern_*.c files.
 *
 * A kernel runs one whole node: the executor hands it the operand tensors and
 * result tensors, placed by the memory plan (zero-filled first for the ops
 * flagged IR_OPF_ZEROED; possibly the buffer of an operand for IR_OPF_INPLACE
 * ops: such kernels read an element before writing it).
 * A kernel returns 0, or -1 with a one-line message in k->err that names the
 * offending value (the executor prefixes the node's location).
 *
 * Element access goes through rt_load / rt_store so every kernel computes in
 * double and stores with ir_round_to_dtype: a kernel and constant folding
 * (which uses the same ir_eval_* functions) agree bit for bit.
 *
 * Threading: loops over independent output elements or rows use
 * `#pragma omp parallel for schedule(static)`; no kernel ever reduces across
 * threads, so results do not depend on OMP_NUM_THREADS.
 */
#ifndef TGC_RT_KERNELS_H
#define TGC_RT_KERNELS_H

#include "internal.h"

typedef struct {
  const ir_node *node;
  const rt_tensor *const *in; /* node->n_in operands */
  rt_tensor *const *out;      /* node->n_out results, allocated and zeroed */
  char *err;                  /* message buffer for failures */
  size_t errlen;
} rt_kctx;

typedef int (*kernel_fn)(const rt_kctx *k);
void rt_kerr(const rt_kctx *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* scratch.c: a kernel's scratch memory, from a per-thread stack kept across
 * calls (no heap allocation in the steady state): mark, push what it needs
 * (64-byte aligned; NULL when out of memory), pop back to the mark before
 * returning — in each thread of a parallel region for what that thread
 * pushes. */
size_t rt_scratch_mark(void);
void *rt_scratch_push(size_t bytes);
void rt_scratch_pop(size_t mark);
/* The threads whose scratch is held now (a thread's is freed when it exits). */
int rt_scratch_threads(void);

/* bf16 <-> f32 inline, so that loops over them vectorize: the bits of
 * ir_f32_to_bf16 / ir_bf16_to_f32 (ir/dtype.c). For a value x that is a
 * float, rt_bf16_bits(x) is also ir_round_to_dtype(IR_DT_BF16, x) stored
 * (rounding the float's bits to nearest even is rounding its value: bf16
 * has f32's exponent range); tests/unit/test_runtime_kernels.c checks both. */
static inline uint16_t rt_bf16_bits(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((b >> 16) | 0x0040u); /* quiet NaN */
  return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}
static inline float rt_bf16_value(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}
/* The f32 cast of bf16 bits h: rt_bf16_value with a signalling NaN made
 * quiet (its payload kept), as the cast through a double makes it. */
static inline uint32_t rt_bf16_widen_bits(uint16_t h) {
  uint32_t b = h;
  return (b | ((b & 0x7FFFu) > 0x7F80u ? 0x0040u : 0u)) << 16;
}
static inline float rt_bf16_widen(uint16_t h) {
  uint32_t b = rt_bf16_widen_bits(h);
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* The kernels of kernels.def (kern_*.c). */
#define KERNEL(op, fn) int fn(const rt_kctx *k);
#include "kernels.def"
#undef KERNEL
/* kern_elementwise.c */
int rt_kern_unary(const rt_kctx *k);
int rt_kern_binary(const rt_kctx *k);
/* kern_matmul.c */
#include "gemm.h" /* rt_sgemm, rt_dgemm */
/* kern_layout.c */
/* kern_reduce.c */
/* The index of the first maximum of data[base + v * inner], v < n (n >= 1;
 * a NaN after index 0 never wins): argmax's line. */
int64_t rt_argmax_line(ir_dtype dt, const void *data, int64_t base, int64_t n, int64_t inner);
/* Elements of x[i0, i0 + n) that are Inf or NaN (0 for non-float dtypes), on
 * the calling thread. */
int64_t rt_count_nonfinite_range(const rt_tensor *x, int64_t i0, int64_t n);
/* kern_nn.c */
/* The rows of cross_entropy (loss != NULL: loss[p] = logsumexp(row p) -
 * row p's target logit) and of its gradient (grad != NULL: (softmax(row p)
 * - onehot(target p)) * scale; grad may be logits itself: each row is read
 * before it is written). Targets must be in range. -1 when out of memory. */
int rt_ce_rows(const rt_tensor *logits, const rt_tensor *targets, double *loss, rt_tensor *grad, double scale);
/* kern_einsum.c */
/* kern_grad.c */
/* kern_attention.c */
/* kern_linear_ce.c */
/* kern_fused.c */
/* kern_cast.c: a fused node that is one f32 <-> bf16 conversion, run as one
 * pass (1), or not one (0: the interpreter runs it). */
int rt_kern_fused_cast(const rt_kctx *k, const ir_expr *e);
/* kern_cast.c: dst[i] = rt_bf16_bits(src[i]) for i < n, over the threads
 * when n is large (and not already inside a parallel region). */
void rt_round_to_bf16(uint16_t *dst, const float *src, int64_t n);

/* The max and the sum of exp(x - max) of one row of V logits at base: the
 * one definition cross_entropy and its gradient share, so that the
 * probabilities the backward uses are those the forward's loss came from. */
/* layernorm of one row of D elements at x[base..): mean and variance in
 * double (summed in index order), then (x - mean) / sqrt(var + eps) * gamma
 * + beta in double, rounded to out's dtype. f32 rows read and write floats
 * directly: the same arithmetic without a dtype switch per element. Shared
 * by layernorm (kern_reduce.c) and add_layernorm (kern_fused.c). */
static inline void rt_layernorm_row(ir_dtype xdt, const void *x, int64_t base, int64_t D, double eps,
                                    const rt_tensor *gamma, const rt_tensor *beta, rt_tensor *out) {
  ir_dtype gdt = gamma->type.dtype, bdt = beta->type.dtype, odt = out->type.dtype;
  double mean = 0, var = 0;
  if (xdt == IR_DT_F32 && gdt == IR_DT_F32 && bdt == IR_DT_F32 && odt == IR_DT_F32) {
    const float *xr = (const float *)x + base, *g = gamma->data, *b = beta->data;
    float *o = (float *)out->data + base;
    for (int64_t j = 0; j < D; j++) mean += xr[j];
    mean /= (double)D;
    for (int64_t j = 0; j < D; j++) {
      double c = xr[j] - mean;
      var += c * c;
    }
    var /= (double)D;
    double inv = 1.0 / sqrt(var + eps);
    for (int64_t j = 0; j < D; j++) o[j] = rt_round_f32((xr[j] - mean) * inv * g[j] + b[j]);
    return;
  }
  for (int64_t j = 0; j < D; j++) mean += rt_load(xdt, x, base + j);
  mean /= (double)D;
  for (int64_t j = 0; j < D; j++) {
    double c = rt_load(xdt, x, base + j) - mean;
    var += c * c;
  }
  var /= (double)D;
  double inv = 1.0 / sqrt(var + eps);
  for (int64_t j = 0; j < D; j++) {
    double c = rt_load(xdt, x, base + j) - mean;
    rt_store(odt, out->data, base + j, c * inv * rt_load(gdt, gamma->data, j) + rt_load(bdt, beta->data, j));
  }
}

float rt_max_f32(const float *x, int64_t n); /* vec_math.c: NaN if any is NaN */
float rt_max_bf16(const uint16_t *x, int64_t n); /* the same over bf16 values (widened 512 at a time) */

/* The max of a row (NaN if any; 0 for a row of -inf or an empty row): the
 * shift of rt_row_logsumexp. */
static inline void rt_row_max(ir_dtype dt, const void *logits, int64_t base, int64_t V, double *max) {
  double mx = -INFINITY;
  if (dt == IR_DT_F32) {
    mx = rt_max_f32((const float *)logits + base, V);
  } else if (dt == IR_DT_BF16) {
    mx = rt_max_bf16((const uint16_t *)logits + base, V);
  } else {
    for (int64_t j = 0; j < V; j++) {
      double x = rt_load(dt, logits, base + j);
      if (x > mx || x != x) mx = x;
    }
  }
  *max = mx == -INFINITY ? 0 : mx;
}

/* kern_nn.c: index of the first id of ids outside [0, high) (its value in
 * *bad), or -1 if all are inside. */
int64_t rt_first_out_of_range(const rt_tensor *ids, int64_t high, int64_t *bad);

/* vec_math.c: vectorized loops over ir/scalar.h's functions. */
void rt_gelu_f32(float *z, const float *x, int n, bool grad);
/* e[j] = ir_exp_smooth(x[base + j] - shift), j < n: the terms of a
 * cross-entropy row (within 1 ulp of libm's exp on [-707, 0]). */
void rt_exp_shifted(ir_dtype dt, const void *x, int64_t base, int64_t n, double shift, double *e);
/* o[j] = f32((e[j] / sum) * scale), j < n. */
void rt_softmax_scaled_f32(float *o, const double *e, double sum, double scale, int64_t n);

/* vec_math.c: elements of b[0..n) with every bit of mask set (mask: the
 * exponent bits of a float type, the Inf / NaN elements). */
int64_t rt_count_ones_u16(const uint16_t *b, int64_t n, uint16_t mask);
int64_t rt_count_ones_u32(const uint32_t *b, int64_t n, uint32_t mask);
int64_t rt_count_ones_u64(const uint64_t *b, int64_t n, uint64_t mask);
/* sum of e[0..n) in 16 interleaved lanes, then the lanes in order (vec_math.c) */
double rt_sum_lanes(const double *e, int64_t n);

/* The row's max and sum of e^(x - max) (e[0..V) gets the terms, summed by
 * rt_sum_lanes): log-sum-exp = max + log(sum). */
static inline void rt_row_logsumexp(ir_dtype dt, const void *logits, int64_t base, int64_t V, double *max,
                                    double *sum, double *e) {
  double mx;
  rt_row_max(dt, logits, base, V, &mx);
  rt_exp_shifted(dt, logits, base, V, mx, e);
  *max = mx;
  *sum = rt_sum_lanes(e, V);
}

#endif
