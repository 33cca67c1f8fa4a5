/* ir/dtype.c — element types and the scalar meaning of every elementwise op.
 *
 * Tables of dtype names/sizes come from dtypes.def and the op tables (name,
 * arity, kind) from ops.def, both through their X-macros, so a new entry
 * cannot be forgotten.
 *
 * Narrow floats: every rounding to bf16/f16 (and f32 -> f16) goes through one
 * routine, round_to_binary(), which rounds a double *directly* to a format of
 * E exponent bits and M fraction bits with round-to-nearest-even, producing
 * its bit pattern: subnormals, overflow to inf (values >= max + half an ulp),
 * signed zeros and infinities are exact IEEE behaviour. Rounding a double
 * first to f32 and then to bf16/f16 would round twice and can be wrong at
 * ties (a double just above a bf16 tie becomes the tie in f32, which then
 * rounds to even), so ir_round_to_dtype never does that. NaN becomes a quiet
 * NaN of the same sign (f32 -> 16-bit conversions keep the top payload bits).
 *
 * ir_eval_unary / ir_eval_binary are the single scalar definition of every
 * elementwise op, in double; constant folding and the reference kernels use
 * them and round the result with ir_round_to_dtype.
 */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "ir.h"
#include "scalar.h"

/* ---- dtype tables ---- */
static const char *const dtype_names[IR_NUM_DTYPES] = {
#define DTYPE(id, name, bytes, is_float) [IR_DT_##id] = name,
#include "dtypes.def"
#undef DTYPE
};
static const unsigned char dtype_sizes[IR_NUM_DTYPES] = {
#define DTYPE(id, name, bytes, is_float) [IR_DT_##id] = bytes,
#include "dtypes.def"
#undef DTYPE
};
static const bool dtype_float[IR_NUM_DTYPES] = {
#define DTYPE(id, name, bytes, is_float) [IR_DT_##id] = is_float,
#include "dtypes.def"
#undef DTYPE
};

const char *ir_dtype_name(ir_dtype t) { return (unsigned)t < IR_NUM_DTYPES ? dtype_names[t] : "?"; }
size_t ir_dtype_size(ir_dtype t) { return (unsigned)t < IR_NUM_DTYPES ? dtype_sizes[t] : 0; }
bool ir_dtype_is_float(ir_dtype t) { return (unsigned)t < IR_NUM_DTYPES && dtype_float[t]; }

int ir_dtype_from_name(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < IR_NUM_DTYPES; i++)
    if (strcmp(dtype_names[i], name) == 0) return i;
  return -1;
}

/* ---- binary floating formats ---- */
/* Rounds x to the binary format with E exponent bits and M fraction bits
 * (E <= 11, M <= 52) with round-to-nearest-even; returns its bit pattern
 * (sign at bit E+M). NaN gives the quiet NaN of x's sign. */
static uint64_t round_to_binary(double x, int E, int M) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  const uint64_t sign = (bits >> 63) << (E + M);
  const uint64_t exp_all = ((UINT64_C(1) << E) - 1) << M; /* inf pattern */
  const int dexp = (int)((bits >> 52) & 0x7FF);
  const uint64_t dfrac = bits & ((UINT64_C(1) << 52) - 1);
  if (dexp == 0x7FF) return sign | exp_all | (dfrac ? UINT64_C(1) << (M - 1) : 0);
  if (dexp == 0) return sign; /* zero or double subnormal: below half of any target's tiniest */
  const int bias = (1 << (E - 1)) - 1;
  const int emin = 1 - bias;
  const int ue = dexp - 1023; /* x = sig * 2^(ue - 52) */
  if (ue > bias) return sign | exp_all;
  const uint64_t sig = (UINT64_C(1) << 52) | dfrac;
  int shift = 52 - M + (ue < emin ? emin - ue : 0);
  uint64_t q;
  if (shift >= 64) {
    q = 0; /* sig < 2^53 <= 2^(shift-1): below half the tiniest subnormal */
  } else {
    q = sig >> shift;
    const uint64_t rem = sig & ((UINT64_C(1) << shift) - 1);
    const uint64_t half = UINT64_C(1) << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
  }
  uint64_t mag;
  if (ue < emin) {
    mag = q; /* subnormal; q == 2^M is exactly the smallest normal's pattern */
  } else {
    /* q in [2^M, 2^(M+1)]: a carry out of the fraction bumps the exponent */
    mag = ((uint64_t)(ue + bias) << M) + (q - (UINT64_C(1) << M));
  }
  if (mag >= exp_all) mag = exp_all; /* rounded past the largest finite value */
  return sign | mag;
}

/* The value of the bit pattern h of the (E, M) format (exact in double). */
static double from_binary(uint64_t h, int E, int M) {
  const int bias = (1 << (E - 1)) - 1;
  const bool neg = (h >> (E + M)) & 1;
  const int e = (int)((h >> M) & ((UINT64_C(1) << E) - 1));
  const uint64_t frac = h & ((UINT64_C(1) << M) - 1);
  double v;
  if (e == (1 << E) - 1) v = frac ? NAN : INFINITY;
  else if (e == 0) v = ldexp((double)frac, 1 - bias - M);
  else v = ldexp((double)(frac | (UINT64_C(1) << M)), e - bias - M);
  return neg ? -v : v;
}

uint16_t ir_f32_to_bf16(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((b >> 16) | 0x0040u); /* quiet NaN */
  b += 0x7FFFu + ((b >> 16) & 1u); /* RNE; a carry into the exponent is correct, max -> inf */
  return (uint16_t)(b >> 16);
}

float ir_bf16_to_f32(uint16_t x) {
  uint32_t b = (uint32_t)x << 16;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

uint16_t ir_f32_to_f16(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep sign and the top payload bits, quiet */
    return (uint16_t)(((b >> 16) & 0x8000u) | 0x7E00u | ((b >> 13) & 0x03FFu));
  return (uint16_t)round_to_binary((double)x, 5, 10);
}

float ir_f16_to_f32(uint16_t x) { return (float)from_binary(x, 5, 10); }

/* Largest double below 2^63: converting it to int64_t is defined. */
#define I64_SAT_MAX 9223372036854774784.0

double ir_round_to_dtype(ir_dtype t, double x) {
  switch (t) {
  case IR_DT_F64: return x;
  case IR_DT_F32:
    /* (float)x is RNE and fast (kernels call this per element); finite values
     * past FLT_MAX are handled here, since converting them is undefined in C:
     * from FLT_MAX + half an ulp on (a tie, FLT_MAX is odd) they become inf */
    if (!(fabs(x) > FLT_MAX) || isinf(x)) return (float)x;
    return copysign(fabs(x) >= 0x1.ffffffp127 ? INFINITY : FLT_MAX, x);
  case IR_DT_BF16: return from_binary(round_to_binary(x, 8, 7), 8, 7);
  case IR_DT_F16: return from_binary(round_to_binary(x, 5, 10), 5, 10);
  case IR_DT_I32:
    if (isnan(x)) return 0;
    if (x >= 2147483647.0) return 2147483647.0;
    if (x <= -2147483648.0) return -2147483648.0;
    return trunc(x);
  case IR_DT_I64:
    /* saturates to the int64 range as far as a double can say it: the bounds
     * are -2^63 and the largest double below 2^63, both safe to convert */
    if (isnan(x)) return 0;
    if (x >= I64_SAT_MAX) return I64_SAT_MAX;
    if (x <= -9223372036854775808.0) return -9223372036854775808.0;
    return trunc(x);
  case IR_DT_BOOL: return x != 0 ? 1.0 : 0.0;
  case IR_NUM_DTYPES: break;
  }
  assert(!"ir_round_to_dtype: bad dtype");
  return x;
}

/* ---- the op table (ops.def) ---- */
typedef struct {
  const char *name;
  signed char nin, nout;
  ir_op_kind kind;
  unsigned flags;
  int flops;
  ir_scalar_fn scalar;
} op_info;
static const op_info ops[IR_NUM_OPS] = {
#define OP(id, mnemonic, n_in, n_out, k, f, fl, sc) \
  [IR_OP_##id] = {.name = mnemonic, .nin = n_in, .nout = n_out, .kind = IR_OPK_##k, .flags = (f), .flops = fl, .scalar = sc},
#include "ops.def"
#undef OP
};

const char *ir_op_name(ir_op op) { return (unsigned)op < IR_NUM_OPS ? ops[op].name : "?"; }

int ir_op_from_name(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < IR_NUM_OPS; i++)
    if (strcmp(ops[i].name, name) == 0) return i;
  return -1;
}

int ir_op_num_inputs(ir_op op) { return (unsigned)op < IR_NUM_OPS ? ops[op].nin : 0; }
int ir_op_num_outputs(ir_op op) { return (unsigned)op < IR_NUM_OPS ? ops[op].nout : 0; }
ir_op_kind ir_op_kind_of(ir_op op) { return (unsigned)op < IR_NUM_OPS ? ops[op].kind : IR_OPK_OTHER; }
unsigned ir_op_flags(ir_op op) { return (unsigned)op < IR_NUM_OPS ? ops[op].flags : 0; }
int ir_op_flops_per_element(ir_op op) { return (unsigned)op < IR_NUM_OPS ? ops[op].flops : -1; }

bool ir_op_is_elementwise(ir_op op) {
  ir_op_kind k = ir_op_kind_of(op);
  return (unsigned)op < IR_NUM_OPS && (k == IR_OPK_UNARY || k == IR_OPK_BINARY || op == IR_OP_WHERE);
}

bool ir_op_is_comparison(ir_op op) { return ir_op_has(op, IR_OPF_CMP); }

/* ---- scalar semantics: the scalar column of ops.def (ir/scalar.h) ---- */
double ir_eval_unary(ir_op op, double x) {
  bool ok = ir_op_kind_of(op) == IR_OPK_UNARY && ops[op].scalar;
  assert(ok && "ir_eval_unary: not a unary elementwise op");
  return ok ? ops[op].scalar(x, 0) : NAN;
}

double ir_eval_binary(ir_op op, double a, double b) {
  bool ok = ir_op_kind_of(op) == IR_OPK_BINARY && ops[op].scalar;
  assert(ok && "ir_eval_binary: not a binary elementwise op");
  return ok ? ops[op].scalar(a, b) : NAN;
}
