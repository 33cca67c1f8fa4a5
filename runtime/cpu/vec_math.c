/* runtime/cpu/vec_math.c — loops over ir/scalar.h's branch-free functions,
 * compiled to be vectorized: GCC builds AVX-512, AVX2 and baseline versions
 * of each (target_clones) and picks one at load time for the machine. Each
 * element is the same IEEE arithmetic in every version (C11 mode: no FP
 * contraction), so results equal the scalar definitions bit for bit; the
 * file is compiled with -fno-trapping-math, which lets GCC if-convert the
 * selects (see CMakeLists.txt) and changes no value.
 */
#include "kernels.h"
#include "scalar.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define RT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RT_CLONES
#endif

/* The results fit a float: |gelu(x)| <= |x| and gelu_grad lies in [-0.13, 1.13]. */
RT_CLONES void rt_gelu_f32(float *z, const float *x, int n, bool grad) {
  if (grad)
    for (int j = 0; j < n; j++) z[j] = (float)ir_gelu_grad((double)x[j]);
  else
    for (int j = 0; j < n; j++) z[j] = (float)ir_gelu((double)x[j]);
}

RT_CLONES static void exp_shifted_f32(double *e, const float *x, double shift, int64_t n) {
  for (int64_t j = 0; j < n; j++) e[j] = ir_exp_smooth((double)x[j] - shift);
}

/* bf16: each value widened exactly (a signalling NaN is a NaN all the same in the double) */
RT_CLONES static void exp_shifted_bf16(double *e, const uint16_t *x, double shift, int64_t n) {
  for (int64_t j = 0; j < n; j++) e[j] = ir_exp_smooth((double)rt_bf16_value(x[j]) - shift);
}

void rt_exp_shifted(ir_dtype dt, const void *x, int64_t base, int64_t n, double shift, double *e) {
  if (dt == IR_DT_F32) {
    exp_shifted_f32(e, (const float *)x + base, shift, n);
    return;
  }
  if (dt == IR_DT_BF16) {
    exp_shifted_bf16(e, (const uint16_t *)x + base, shift, n);
    return;
  }
  for (int64_t j = 0; j < n; j++) e[j] = ir_exp_smooth(rt_load(dt, x, base + j) - shift);
}

/* o[j] = (e[j] / sum) * scale rounded to f32, j < n: a cross-entropy
 * gradient row before the target's -1 (the caller writes o[target]). */
RT_CLONES void rt_softmax_scaled_f32(float *o, const double *e, double sum, double scale, int64_t n) {
  for (int64_t j = 0; j < n; j++) o[j] = ir_round_f32(e[j] / sum * scale);
}

/* The largest of x[0..n) (NaN if any is NaN; -inf for n = 0), in 16
 * independent lanes that vectorize: max is exact and order-free (ties of
 * -0 and +0 may pick either zero, which no caller can tell apart: x - 0
 * and x + 0 agree for both). */
RT_CLONES float rt_max_f32(const float *x, int64_t n) {
  enum { L = 16 };
  float m[L];
  int nan = 0;
  for (int l = 0; l < L; l++) m[l] = -INFINITY;
  int64_t j = 0;
  for (; j + L <= n; j += L)
    for (int l = 0; l < L; l++) {
      float v = x[j + l];
      m[l] = v > m[l] ? v : m[l];
      nan |= v != v;
    }
  for (; j < n; j++) {
    m[0] = x[j] > m[0] ? x[j] : m[0];
    nan |= x[j] != x[j];
  }
  float r = m[0];
  for (int l = 1; l < L; l++) r = m[l] > r ? m[l] : r;
  return nan ? NAN : r;
}

float rt_max_bf16(const uint16_t *x, int64_t n) {
  enum { B = 512 };
  float w[B], r = -INFINITY;
  bool nan = false;
  for (int64_t j = 0; j < n; j += B) {
    int64_t m = n - j < B ? n - j : B;
    for (int64_t i = 0; i < m; i++) w[i] = rt_bf16_value(x[j + i]);
    float v = rt_max_f32(w, m);
    nan |= v != v;
    r = v > r ? v : r;
  }
  return nan ? NAN : r;
}

/* The sum of e[0..n) in 16 interleaved partial sums (lane l adds e[l],
 * e[l + 16], ... in order), then the lanes in order: a fixed order, the same
 * on every machine and vector width, without the latency of one chain. */
RT_CLONES double rt_sum_lanes(const double *e, int64_t n) {
  enum { L = 16 };
  double acc[L] = {0};
  int64_t j = 0;
  for (; j + L <= n; j += L)
    for (int l = 0; l < L; l++) acc[l] += e[j + l];
  for (int l = 0; j < n; j++, l++) acc[l] += e[j];
  double s = 0;
  for (int l = 0; l < L; l++) s += acc[l];
  return s;
}

/* The elements of b[0..n) whose bits under mask are all ones (exponent all
 * ones: Inf or NaN), per width of element. Blocks of at most 2^16 elements
 * count in 16 lanes of the element's own width (no widening in the loop:
 * vector compares and subtracts), then add into the 64-bit total. */
#define COUNT_ONES(name, T)                                                     \
  RT_CLONES int64_t name(const T *b, int64_t n, T mask) {                      \
    enum { L = 16, BLOCK = 1 << 15 };                                           \
    int64_t total = 0;                                                          \
    for (int64_t j0 = 0; j0 < n; j0 += BLOCK) {                                 \
      int64_t e = n - j0 < BLOCK ? n : j0 + BLOCK, j = j0;                      \
      T acc[L] = {0};                                                           \
      for (; j + L <= e; j += L)                                                \
        for (int l = 0; l < L; l++) acc[l] += (T)((b[j + l] & mask) == mask);   \
      for (; j < e; j++) total += (b[j] & mask) == mask;                        \
      for (int l = 0; l < L; l++) total += acc[l];                              \
    }                                                                           \
    return total;                                                               \
  }
COUNT_ONES(rt_count_ones_u16, uint16_t)
COUNT_ONES(rt_count_ones_u32, uint32_t)
COUNT_ONES(rt_count_ones_u64, uint64_t)
