// codegen/prelude/tgc_ops.h — the device meaning of every elementwise op:
// ops.def's scalar column (ir/scalar.h: ir_s_<op>(a, b) in double) written
// once more for the GPU, as tgc_s_<op>(a, b) in float and in double, plus
// the conversions every generated kernel stores its results with.
//
// How generated code computes an op of dtype D (what the CPU's kernels do
// in double and round to D, kernel by kernel):
//   f64          in double, the functions below;
//   f32          in float: + - * / sqrt are IEEE's correctly rounded float
//                operations, which is what rounding the CPU's double result
//                to float gives; exp, log, tanh, pow, ... are CUDA's float
//                functions (within 2 ulp), so those may differ from the
//                CPU in the last bit or two;
//   bf16, f16    in float, rounded to D after every op (tgc_round<D>);
//   i32, i64     in double, truncated toward zero and saturated (NaN -> 0)
//                as ir_round_to_dtype does; bool: nonzero -> 1.
// gelu and its derivative use the CPU's formula x / (1 + e^-2u) (no
// cancellation in 1 + tanh u for negative x), not tanhf. Maximum and minimum
// propagate NaN; relu, sign and the comparisons follow ir/scalar.h.
// Needs tgc_cuda.h first.
#ifndef TGC_OPS_H
#define TGC_OPS_H

// ---- constants and classification without <math.h> (NVRTC has none) ----
__device__ __forceinline__ float tgc_inf_f() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double tgc_inf_d() { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ float tgc_nan_f() { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double tgc_nan_d() { return __longlong_as_double(0x7ff8000000000000LL); }
__device__ __forceinline__ bool tgc_isnan(float x) { return x != x; }
__device__ __forceinline__ bool tgc_isnan(double x) { return x != x; }
__device__ __forceinline__ bool tgc_isinf(float x) { return fabsf(x) == tgc_inf_f(); }
__device__ __forceinline__ bool tgc_isinf(double x) { return fabs(x) == tgc_inf_d(); }
// Exponent bits all ones: Inf or NaN (count_nonfinite's test, on the stored bits).
__device__ __forceinline__ bool tgc_nonfinite_bits(float x) { return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u; }
__device__ __forceinline__ bool tgc_nonfinite_bits(double x) {
  return ((unsigned long long)__double_as_longlong(x) & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL;
}
__device__ __forceinline__ bool tgc_nonfinite_bits(__nv_bfloat16 x) { return (x.__x & 0x7f80u) == 0x7f80u; }
__device__ __forceinline__ bool tgc_nonfinite_bits(__half x) { return (x.__x & 0x7c00u) == 0x7c00u; }

// ---- the scalar column of ops.def, in float and in double ----
// (the body is the variadic part: it may hold commas)
#define TGC_UNARY(name, ...)                                                              \
  __device__ __forceinline__ float tgc_s_##name(float x) { typedef float R; __VA_ARGS__ }   \
  __device__ __forceinline__ double tgc_s_##name(double x) { typedef double R; __VA_ARGS__ }
#define TGC_BINARY(name, ...)                                                                      \
  __device__ __forceinline__ float tgc_s_##name(float a, float b) { typedef float R; __VA_ARGS__ }   \
  __device__ __forceinline__ double tgc_s_##name(double a, double b) { typedef double R; __VA_ARGS__ }

__device__ __forceinline__ float tgc_exp(float x) { return expf(x); }
__device__ __forceinline__ double tgc_exp(double x) { return exp(x); }
__device__ __forceinline__ float tgc_log(float x) { return logf(x); }
__device__ __forceinline__ double tgc_log(double x) { return log(x); }
__device__ __forceinline__ float tgc_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double tgc_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float tgc_fabs(float x) { return fabsf(x); }
__device__ __forceinline__ double tgc_fabs(double x) { return fabs(x); }

// sigmoid never takes exp of a large positive number
TGC_UNARY(sigmoid, {
  if (x >= (R)0) return (R)1 / ((R)1 + tgc_exp(-x));
  R e = tgc_exp(x); /* also NaN -> NaN */
  return e / ((R)1 + e);
})
TGC_UNARY(neg, { return -x; })
TGC_UNARY(abs, { return tgc_fabs(x); })
TGC_UNARY(exp, { return tgc_exp(x); })
TGC_UNARY(log, { return tgc_log(x); })
TGC_UNARY(sqrt, { return tgc_sqrt(x); })
TGC_UNARY(rsqrt, { return (R)1 / tgc_sqrt(x); })
__device__ __forceinline__ float tgc_s_sin(float x) { return sinf(x); }
__device__ __forceinline__ double tgc_s_sin(double x) { return sin(x); }
__device__ __forceinline__ float tgc_s_cos(float x) { return cosf(x); }
__device__ __forceinline__ double tgc_s_cos(double x) { return cos(x); }
__device__ __forceinline__ float tgc_s_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double tgc_s_tanh(double x) { return tanh(x); }
TGC_UNARY(relu, { return (x > (R)0 || tgc_isnan(x)) ? x : (R)0; })
// gelu, tanh form, as x / (1 + e^-2u), u = sqrt(2/pi) (x + 0.044715 x^3);
// gelu(+inf) = +inf, gelu(-inf) = 0
TGC_UNARY(gelu, {
  R u = (R)0.7978845608028654 * (x + (R)0.044715 * x * x * x);
  R y = x / ((R)1 + tgc_exp((R)-2 * u));
  return tgc_isinf(x) ? (x > (R)0 ? x : (R)0) : y;
})
// s + 2 x s (1 - s) c (1 + 3 a x^2), s = 1 / (1 + e), e = e^-2u, 1 - s = e s
TGC_UNARY(gelu_grad, {
  const R c = (R)0.7978845608028654, a = (R)0.044715;
  R e = tgc_exp((R)-2 * (c * (x + a * x * x * x)));
  R s = (R)1 / ((R)1 + e), oms = tgc_isinf(e) ? (R)1 : e * s;
  R y = s + (R)2 * x * s * oms * c * ((R)1 + (R)3 * a * x * x);
  return tgc_isinf(x) ? (x > (R)0 ? (R)1 : (R)0) : y;
})
TGC_UNARY(silu, { return tgc_isinf(x) ? (x > (R)0 ? x : (R)0) : x * tgc_s_sigmoid(x); })
__device__ __forceinline__ float tgc_s_erf(float x) { return erff(x); }
__device__ __forceinline__ double tgc_s_erf(double x) { return erf(x); }
TGC_UNARY(square, { return x * x; })
// (not, and, or are C++ operator names: no token pasting for them)
__device__ __forceinline__ float tgc_s_not(float x) { return x == 0.0f ? 1.0f : 0.0f; }
__device__ __forceinline__ double tgc_s_not(double x) { return x == 0.0 ? 1.0 : 0.0; }
TGC_UNARY(cast, { return x; })  // the rounding is the store's
TGC_UNARY(sign, { return x > (R)0 ? (R)1 : x < (R)0 ? (R)-1 : x; })  // keeps 0, -0, NaN
TGC_BINARY(add, { return a + b; })
TGC_BINARY(sub, { return a - b; })
TGC_BINARY(mul, { return a * b; })
TGC_BINARY(div, { return a / b; })
__device__ __forceinline__ float tgc_s_pow(float a, float b) { return powf(a, b); }
// An integral base to a power 0..64 whose exact value is below 2^63: in
// integers, rounded once to double (what a correctly rounded pow gives, as
// the CPU's does; CUDA's pow is within 2 ulp, and an integer dtype then
// truncates 2047.9999999999998 to 2047). Else pow.
__device__ __forceinline__ double tgc_s_pow(double a, double b) {
  if (a != 0.0 && b >= 0.0 && b <= 64.0 && b == (double)(long long)b && a > -9.0e18 && a < 9.0e18 &&
      a == (double)(long long)a) {
    unsigned long long m = (unsigned long long)(a < 0.0 ? -(long long)a : (long long)a), r = 1;
    const unsigned long long limit = 0x7fffffffffffffffULL;
    long long e = (long long)b;
    bool odd = (e & 1) != 0, exact = true;
    while (e > 0 && exact) {
      if (e & 1) {
        if (r > limit / m) exact = false;
        else r *= m;
      }
      e >>= 1;
      if (e > 0 && exact) {
        if (m > limit / m) exact = false;
        else m *= m;
      }
    }
    if (exact) return (a < 0.0 && odd) ? -(double)r : (double)r;
  }
  return pow(a, b);
}
TGC_BINARY(maximum, { return (tgc_isnan(a) || tgc_isnan(b)) ? a + b : (a > b ? a : b); })
TGC_BINARY(minimum, { return (tgc_isnan(a) || tgc_isnan(b)) ? a + b : (a < b ? a : b); })
TGC_BINARY(eq, { return a == b ? (R)1 : (R)0; })
TGC_BINARY(ne, { return a != b ? (R)1 : (R)0; })
TGC_BINARY(lt, { return a < b ? (R)1 : (R)0; })
TGC_BINARY(le, { return a <= b ? (R)1 : (R)0; })
TGC_BINARY(gt, { return a > b ? (R)1 : (R)0; })
TGC_BINARY(ge, { return a >= b ? (R)1 : (R)0; })
__device__ __forceinline__ float tgc_s_and(float a, float b) { return (a != 0.0f && b != 0.0f) ? 1.0f : 0.0f; }
__device__ __forceinline__ double tgc_s_and(double a, double b) { return (a != 0.0 && b != 0.0) ? 1.0 : 0.0; }
__device__ __forceinline__ float tgc_s_or(float a, float b) { return (a != 0.0f || b != 0.0f) ? 1.0f : 0.0f; }
__device__ __forceinline__ double tgc_s_or(double a, double b) { return (a != 0.0 || b != 0.0) ? 1.0 : 0.0; }
#undef TGC_UNARY
#undef TGC_BINARY

// NaN-propagating max for reductions (ir/scalar.h's reduce step: x > acc || x != x)
// (in acc's type: x is converted first, so float elements into a double accumulator resolve)
template <class A, class X> __device__ __forceinline__ A tgc_max_nan(A acc, X x) {
  A v = (A)x;
  return (v > acc || v != v) ? v : acc;
}

// ---- rounding a computed value to a stored dtype ----
// double -> float with round-to-odd, then to a 16-bit float: one correct
// rounding of the double (ir_round_to_dtype rounds doubles directly).
__device__ __forceinline__ float tgc_f64_to_f32_odd(double x) {
  float f = (float)x;
  if ((double)f == x || f != f) return f;
  unsigned int bits = __float_as_uint(f);
  if (fabs((double)f) > fabs(x)) bits -= 1;  // the truncation toward zero (also inf -> FLT_MAX)
  return __uint_as_float(bits | 1u);
}
template <class T> struct tgc_round_t;
template <> struct tgc_round_t<double> {
  __device__ static __forceinline__ double from(float x) { return (double)x; }
  __device__ static __forceinline__ double from(double x) { return x; }
};
template <> struct tgc_round_t<float> {
  __device__ static __forceinline__ float from(float x) { return x; }
  __device__ static __forceinline__ float from(double x) { return (float)x; }
};
template <> struct tgc_round_t<__nv_bfloat16> {
  __device__ static __forceinline__ __nv_bfloat16 from(float x) { return __nv_bfloat16(x); }
  __device__ static __forceinline__ __nv_bfloat16 from(double x) { return __nv_bfloat16(tgc_f64_to_f32_odd(x)); }
};
template <> struct tgc_round_t<__half> {
  __device__ static __forceinline__ __half from(float x) { return __half(x); }
  __device__ static __forceinline__ __half from(double x) { return __half(tgc_f64_to_f32_odd(x)); }
};
// integers: toward zero, saturating, NaN -> 0 (ir_round_to_dtype)
template <> struct tgc_round_t<int> {
  __device__ static __forceinline__ int from(double x) {
    if (x != x) return 0;
    if (x >= 2147483647.0) return 2147483647;
    if (x <= -2147483648.0) return (int)0x80000000u;
    return (int)x;
  }
  __device__ static __forceinline__ int from(float x) { return from((double)x); }
};
template <> struct tgc_round_t<long long> {
  // the bounds ir_round_to_dtype saturates to: -2^63 and the largest double below 2^63
  __device__ static __forceinline__ long long from(double x) {
    if (x != x) return 0;
    if (x >= 9223372036854774784.0) return 9223372036854774784LL;
    if (x <= -9223372036854775808.0) return (long long)0x8000000000000000ULL;
    return (long long)x;
  }
  __device__ static __forceinline__ long long from(float x) { return from((double)x); }
};
template <> struct tgc_round_t<unsigned char> {  // bool
  __device__ static __forceinline__ unsigned char from(double x) { return x != 0.0 ? 1 : 0; }
  __device__ static __forceinline__ unsigned char from(float x) { return x != 0.0f ? 1 : 0; }
};
template <class T, class V> __device__ __forceinline__ T tgc_round(V x) { return tgc_round_t<T>::from(x); }

// Any stored element as float / double.
__device__ __forceinline__ float tgc_f(float v) { return v; }
__device__ __forceinline__ float tgc_f(double v) { return (float)v; }
__device__ __forceinline__ float tgc_f(__nv_bfloat16 v) { return (float)v; }
__device__ __forceinline__ float tgc_f(__half v) { return (float)v; }
__device__ __forceinline__ float tgc_f(int v) { return (float)v; }
__device__ __forceinline__ float tgc_f(long long v) { return (float)v; }
__device__ __forceinline__ float tgc_f(unsigned char v) { return v ? 1.0f : 0.0f; }
__device__ __forceinline__ double tgc_d(float v) { return (double)v; }
__device__ __forceinline__ double tgc_d(double v) { return v; }
__device__ __forceinline__ double tgc_d(__nv_bfloat16 v) { return (double)(float)v; }
__device__ __forceinline__ double tgc_d(__half v) { return (double)(float)v; }
__device__ __forceinline__ double tgc_d(int v) { return (double)v; }
__device__ __forceinline__ double tgc_d(long long v) { return (double)v; }
__device__ __forceinline__ double tgc_d(unsigned char v) { return v ? 1.0 : 0.0; }

// The type arithmetic of a stored dtype runs in (float for float dtypes
// narrower than f64, double otherwise) and the conversion to it.
template <class T> struct tgc_acc_t { typedef float type; };
template <> struct tgc_acc_t<double> { typedef double type; };
template <> struct tgc_acc_t<int> { typedef double type; };
template <> struct tgc_acc_t<long long> { typedef double type; };
template <> struct tgc_acc_t<unsigned char> { typedef double type; };
__device__ __forceinline__ float tgc_acc(float v) { return v; }
__device__ __forceinline__ float tgc_acc(__nv_bfloat16 v) { return (float)v; }
__device__ __forceinline__ float tgc_acc(__half v) { return (float)v; }
__device__ __forceinline__ double tgc_acc(double v) { return v; }
__device__ __forceinline__ double tgc_acc(int v) { return (double)v; }
__device__ __forceinline__ double tgc_acc(long long v) { return (double)v; }
__device__ __forceinline__ double tgc_acc(unsigned char v) { return v ? 1.0 : 0.0; }

// Integer element (ids, targets).
__device__ __forceinline__ long long tgc_index(int v) { return v; }
__device__ __forceinline__ long long tgc_index(long long v) { return v; }

// ---- vector accesses of W elements (W * sizeof(T) of 1 to 16 bytes; the
// address aligned to that, else CUDA_ERROR_MISALIGNED_ADDRESS) ----
template <int BYTES> struct tgc_vec_bits;
template <> struct tgc_vec_bits<16> { typedef uint4 type; };
template <> struct tgc_vec_bits<8> { typedef uint2 type; };
template <> struct tgc_vec_bits<4> { typedef unsigned int type; };
template <> struct tgc_vec_bits<2> { typedef unsigned short type; };
template <> struct tgc_vec_bits<1> { typedef unsigned char type; };
template <int W, class T> __device__ __forceinline__ void tgc_vload(const T *p, T out[W]) {
  typedef typename tgc_vec_bits<W * sizeof(T)>::type V;
  TGC_CHECK_ALIGNED(p, sizeof(V), "tgc_vload");
  V v = *reinterpret_cast<const V *>(p);
  memcpy(out, &v, sizeof v);
}
template <int W, class T> __device__ __forceinline__ void tgc_vstore(T *p, const T in[W]) {
  typedef typename tgc_vec_bits<W * sizeof(T)>::type V;
  TGC_CHECK_ALIGNED(p, sizeof(V), "tgc_vstore");
  V v;
  memcpy(&v, in, sizeof v);
  *reinterpret_cast<V *>(p) = v;
}

// A kernel that finds its input bad (an id out of range) ends the launch as
// a fault, like an assertion, with the CPU's words ("embedding id 70 out of
// range [0, 64) in %tokens (element 3)"): the emulator reports the message
// with the kernel's name; a GPU prints it (device printf) and traps, which
// is the sticky CUDA_ERROR_LAUNCH_FAILED the backend names the kernel by.
#ifdef TGC_ON_GPU
__device__ __forceinline__ void tgc_fail_index(const char *what, long long id, long long high, const char *value,
                                               long long element) {
  printf("tgc: %s %lld out of range [0, %lld) in %s (element %lld)\n", what, id, high, value, element);
  __trap();
}
#else
static inline void tgc_fail_index(const char *what, long long id, long long high, const char *value,
                                  long long element) {
  static thread_local char msg[512];
  snprintf(msg, sizeof msg, "%s %lld out of range [0, %lld) in %s (element %lld)", what, id, high, value, element);
  tgc_emu::fault(719, msg);  // CUDA_ERROR_LAUNCH_FAILED, what a trap gives
}
#endif

#endif
