/* ir/scalar.h — the scalar meaning of every elementwise op (the scalar
 * column of ops.def: ir_s_<op>(a, b) in double, b unused by unary ops),
 * inline so that kernels can run them over vectors of elements. The gelu
 * family is written so the compiler vectorizes a loop of it: no calls, no
 * branches, only IEEE +, -, *, /, compares and bit moves. ir_eval_unary /
 * ir_eval_binary (dtype.c) call these functions, so constant folding, the
 * unfused kernels and the fused kernels agree bit for bit; compiled without
 * FP contraction (C11 mode), the results do not depend on the vector width
 * or the machine.
 */
#ifndef TGC_IR_SCALAR_H
#define TGC_IR_SCALAR_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* e^x for x in [-707, 709.78] within about 2 ulp: x = k ln2 + r with
 * |r| <= ln2 / 2 (Cody-Waite, ln2 split so k ln2hi is exact), e^r by its
 * Taylor series to r^13 (the next term is below 2^-57), times 2^(k-1) built
 * in the exponent bits, times 2. Above 709.78 +inf; below -707 it returns
 * e^-707 (~1e-307, which 1 + e cannot tell from 0: the only use here); NaN
 * stays NaN. */
static inline double ir_exp_smooth(double x) {
  const double log2e = 1.4426950408889634, ln2hi = 6.93147180369123816490e-01, ln2lo = 1.90821492927058770002e-10;
  const double shifter = 6755399441055744.0; /* 1.5 * 2^52: adding it rounds to an integer in the low bits */
  double xc = x < -707.0 ? -707.0 : x > 709.78 ? 709.78 : x;
  double t = xc * log2e + shifter;
  double kd = t - shifter;
  double r = (xc - kd * ln2hi) - kd * ln2lo;
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  uint64_t tb, sb; /* unsigned: wraps (defined) for the NaN and inf patterns */
  memcpy(&tb, &t, sizeof tb);
  memcpy(&sb, &shifter, sizeof sb);
  uint64_t bits = (tb - sb + 1022) << 52; /* k is in the low bits of t: 2^(k-1) */
  double scale;
  memcpy(&scale, &bits, sizeof scale);
  double y = p * scale * 2.0;
  return x > 709.782712893384 ? INFINITY : y;
}

/* gelu, tanh form: 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3),
 * as x / (1 + e^-2u) (1 + tanh u = 2 / (1 + e^-2u)): no cancellation in
 * 1 + tanh u for negative x. gelu(+inf) = +inf, gelu(-inf) = 0. */
static inline double ir_gelu(double x) {
  double u = 0.7978845608028654 /* sqrt(2/pi) */ * (x + 0.044715 * x * x * x);
  double y = x / (1.0 + ir_exp_smooth(-2.0 * u));
  return isinf(x) ? (x > 0 ? x : 0.0) : y;
}

/* d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2), t = tanh u;
 * with s = (1 + t) / 2 = 1 / (1 + e), e = e^-2u, and 1 - s = e s:
 * s + 2 x s (1 - s) c (1 + 3 a x^2). 1 at +inf, 0 at -inf. */
static inline double ir_gelu_grad(double x) {
  const double c = 0.7978845608028654, a = 0.044715;
  double e = ir_exp_smooth(-2.0 * (c * (x + a * x * x * x)));
  double s = 1.0 / (1.0 + e), oms = isinf(e) ? 1.0 : e * s;
  double y = s + 2.0 * x * s * oms * c * (1.0 + 3.0 * a * x * x);
  return isinf(x) ? (x > 0 ? 1.0 : 0.0) : y;
}

/* ---- the scalar column of ops.def ---- */
static inline double ir_s_sigmoid(double x, double b) {
  (void)b;
  /* never evaluates exp of a large positive number */
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x); /* also NaN -> NaN */
  return e / (1.0 + e);
}
static inline double ir_s_neg(double x, double b) { return (void)b, -x; }
static inline double ir_s_abs(double x, double b) { return (void)b, fabs(x); }
static inline double ir_s_exp(double x, double b) { return (void)b, exp(x); }
static inline double ir_s_log(double x, double b) { return (void)b, log(x); }
static inline double ir_s_sqrt(double x, double b) { return (void)b, sqrt(x); }
static inline double ir_s_rsqrt(double x, double b) { return (void)b, 1.0 / sqrt(x); }
static inline double ir_s_sin(double x, double b) { return (void)b, sin(x); }
static inline double ir_s_cos(double x, double b) { return (void)b, cos(x); }
static inline double ir_s_tanh(double x, double b) { return (void)b, tanh(x); }
static inline double ir_s_relu(double x, double b) { return (void)b, (x > 0 || isnan(x)) ? x : 0.0; }
static inline double ir_s_gelu(double x, double b) { return (void)b, ir_gelu(x); }
static inline double ir_s_silu(double x, double b) { return isinf(x) ? (x > 0 ? x : 0.0) : x * ir_s_sigmoid(x, b); }
static inline double ir_s_erf(double x, double b) { return (void)b, erf(x); }
static inline double ir_s_square(double x, double b) { return (void)b, x * x; }
static inline double ir_s_not(double x, double b) { return (void)b, x == 0 ? 1.0 : 0.0; }
static inline double ir_s_cast(double x, double b) { return (void)b, x; } /* the rounding is the store's */
static inline double ir_s_sign(double x, double b) { return (void)b, x > 0 ? 1.0 : x < 0 ? -1.0 : x; } /* keeps 0, -0, NaN */
static inline double ir_s_gelu_grad(double x, double b) { return (void)b, ir_gelu_grad(x); }
static inline double ir_s_add(double a, double b) { return a + b; }
static inline double ir_s_sub(double a, double b) { return a - b; }
static inline double ir_s_mul(double a, double b) { return a * b; }
static inline double ir_s_div(double a, double b) { return a / b; }
/* pow; an integral base to a power 0..64 whose exact value is below 2^63
 * is computed in integers and rounded once to double: the correctly
 * rounded result (libm's pow may miss it on an exact tie above 2^53), the
 * same on every machine, and what the device computes (tgc_ops.h, where
 * CUDA's pow is within 2 ulp and 2^11 can come out as 2047.9999999999998). */
static inline double ir_s_pow(double a, double b) {
  if (a != 0.0 && b >= 0.0 && b <= 64.0 && b == (double)(long long)b && a > -9.0e18 && a < 9.0e18 &&
      a == (double)(long long)a) {
    unsigned long long m = (unsigned long long)(a < 0.0 ? -(long long)a : (long long)a), r = 1;
    const unsigned long long limit = 0x7fffffffffffffffULL;
    long long e = (long long)b;
    int odd = (e & 1) != 0, exact = 1;
    while (e > 0 && exact) {
      if (e & 1) {
        if (r > limit / m) exact = 0;
        else r *= m;
      }
      e >>= 1;
      if (e > 0 && exact) {
        if (m > limit / m) exact = 0;
        else m *= m;
      }
    }
    if (exact) return (a < 0.0 && odd) ? -(double)r : (double)r;
  }
  return pow(a, b);
}
static inline double ir_s_maximum(double a, double b) { return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b); }
static inline double ir_s_minimum(double a, double b) { return (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b); }
static inline double ir_s_eq(double a, double b) { return a == b; }
static inline double ir_s_ne(double a, double b) { return a != b; }
static inline double ir_s_lt(double a, double b) { return a < b; }
static inline double ir_s_le(double a, double b) { return a <= b; }
static inline double ir_s_gt(double a, double b) { return a > b; }
static inline double ir_s_ge(double a, double b) { return a >= b; }
static inline double ir_s_and(double a, double b) { return (a != 0 && b != 0) ? 1.0 : 0.0; }
static inline double ir_s_or(double a, double b) { return (a != 0 || b != 0) ? 1.0 : 0.0; }

/* ir_round_to_dtype(IR_DT_F32, x) without a call or a branch: finite
 * values past FLT_MAX become FLT_MAX or, from FLT_MAX + half an ulp on, inf
 * (with their sign); everything else converts round-to-nearest-even. */
static inline float ir_round_f32(double x) {
  double big = copysign(fabs(x) >= 0x1.ffffffp127 ? INFINITY : FLT_MAX, x);
  return (float)(fabs(x) > FLT_MAX && !isinf(x) ? big : x);
}

/* dropout's mask (ops.def): SplitMix64's finalizer, a counter-based
 * generator: the dropout's key (the trainer's mix of seed, step and
 * micro-batch, rt_dropout_key) with its stream (which dropout of the model)
 * mixed in, plus g * golden (g the element's index in the unsharded value),
 * mixed again; the high 32 bits are compared with the threshold p 2^32.
 * The CUDA emitter prints IR_DROPOUT_MIX_TEXT, the same statements as text,
 * so every backend draws the same bits. */
#define IR_DROPOUT_GOLDEN 0x9E3779B97F4A7C15ULL
#define IR_DROPOUT_STREAM 0xD6E8FEB86659FD93ULL
#define IR_DROPOUT_MIX(z) \
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL; z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL; z ^= z >> 31;
#define IR_DROPOUT_STR_(x) #x
#define IR_DROPOUT_STR(x) IR_DROPOUT_STR_(x)
#define IR_DROPOUT_MIX_TEXT IR_DROPOUT_STR(IR_DROPOUT_MIX(z))

/* The per-dropout part, hoisted out of element loops. */
static inline uint64_t ir_dropout_stream_key(uint64_t key, uint64_t stream) {
  uint64_t z = key ^ (stream * IR_DROPOUT_STREAM);
  IR_DROPOUT_MIX(z)
  return z;
}

static inline uint32_t ir_dropout_bits(uint64_t stream_key, uint64_t g) {
  uint64_t z = stream_key + g * IR_DROPOUT_GOLDEN;
  IR_DROPOUT_MIX(z)
  return (uint32_t)(z >> 32);
}

/* Elements whose bits are below this are dropped: round(p 2^32), at most
 * 2^32 - 1 (p < 1). */
static inline uint32_t ir_dropout_threshold(double p) {
  double t = nearbyint(p * 4294967296.0);
  return t <= 0 ? 0 : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

#endif
