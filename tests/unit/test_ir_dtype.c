/* tests/unit/test_ir_dtype.c — dtype tables, bf16/f16 conversion bit patterns
 * (ties, subnormals, overflow, NaN), ir_round_to_dtype (including the cases
 * where rounding through f32 first would be wrong), the op tables and the
 * scalar semantics of every elementwise op against libm.
 * Tolerances: conversions are exact (bit patterns); op values 1e-14 relative. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "ir.h"

static float f_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}
static uint32_t bits_f(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

static void test_dtype_tables(void) {
  for (int t = 0; t < IR_NUM_DTYPES; t++) CHECK_EQ_INT(ir_dtype_from_name(ir_dtype_name((ir_dtype)t)), t);
  CHECK_STR(ir_dtype_name(IR_DT_BF16), "bf16");
  CHECK_EQ_INT(ir_dtype_size(IR_DT_F64), 8);
  CHECK_EQ_INT(ir_dtype_size(IR_DT_F16), 2);
  CHECK_EQ_INT(ir_dtype_size(IR_DT_BOOL), 1);
  CHECK(ir_dtype_is_float(IR_DT_BF16));
  CHECK(!ir_dtype_is_float(IR_DT_I64));
  CHECK(!ir_dtype_is_float(IR_DT_BOOL));
  CHECK_EQ_INT(ir_dtype_from_name("f8"), -1);
  CHECK_EQ_INT(ir_dtype_from_name(""), -1);
  CHECK_EQ_INT(ir_dtype_from_name(NULL), -1);
}

static void test_bf16(void) {
  CHECK_EQ_INT(ir_f32_to_bf16(1.0f), 0x3F80);
  CHECK_EQ_INT(ir_f32_to_bf16(-2.0f), 0xC000);
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x3F808000u)), 0x3F80); /* tie, even stays */
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x3F818000u)), 0x3F82); /* tie, odd rounds up */
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x3F808001u)), 0x3F81); /* above the tie */
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x3F807FFFu)), 0x3F80); /* below the tie */
  CHECK_EQ_INT(ir_f32_to_bf16(FLT_MAX), 0x7F80);              /* overflow to inf */
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x7F7F7FFFu)), 0x7F7F);  /* largest that stays finite */
  CHECK_EQ_INT(ir_f32_to_bf16(INFINITY), 0x7F80);
  CHECK_EQ_INT(ir_f32_to_bf16(-INFINITY), 0xFF80);
  CHECK_EQ_INT(ir_f32_to_bf16(-0.0f), 0x8000);
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x7FC00000u)), 0x7FC0);
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x7F800001u)), 0x7FC0); /* signalling -> quiet, not inf */
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0xFFA00000u)), 0xFFE0); /* sign and payload kept */
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x00008000u)), 0x0000); /* subnormal tie to even 0 */
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x00018000u)), 0x0002); /* subnormal tie to even 2 */
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x00008001u)), 0x0001);
  CHECK_EQ_INT(ir_f32_to_bf16(f_bits(0x007FFFFFu)), 0x0080); /* subnormal rounds up to min normal */
  CHECK_EQ_INT(bits_f(ir_bf16_to_f32(0x3F80)), 0x3F800000u);
  CHECK_EQ_INT(bits_f(ir_bf16_to_f32(0x0001)), 0x00010000u);
  CHECK_EQ_INT(bits_f(ir_bf16_to_f32(0xFF80)), 0xFF800000u);
  CHECK(isnan(ir_bf16_to_f32(0x7FC1)));
}

static void test_f16(void) {
  CHECK_EQ_INT(ir_f32_to_f16(1.0f), 0x3C00);
  CHECK_EQ_INT(ir_f32_to_f16(-2.0f), 0xC000);
  CHECK_EQ_INT(ir_f32_to_f16(65504.0f), 0x7BFF);       /* max finite */
  CHECK_EQ_INT(ir_f32_to_f16(65519.99f), 0x7BFF);      /* below half an ulp past max */
  CHECK_EQ_INT(ir_f32_to_f16(65520.0f), 0x7C00);       /* the tie rounds to inf (max is odd) */
  CHECK_EQ_INT(ir_f32_to_f16(1e10f), 0x7C00);
  CHECK_EQ_INT(ir_f32_to_f16(-1e10f), 0xFC00);
  CHECK_EQ_INT(ir_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);        /* tie, even stays */
  CHECK_EQ_INT(ir_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);    /* tie, odd rounds up */
  CHECK_EQ_INT(ir_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
  CHECK_EQ_INT(ir_f32_to_f16(0x1p-14f), 0x0400);               /* min normal */
  CHECK_EQ_INT(ir_f32_to_f16(0x1p-24f), 0x0001);               /* min subnormal */
  CHECK_EQ_INT(ir_f32_to_f16(0x1p-25f), 0x0000);               /* tie to even 0 */
  CHECK_EQ_INT(ir_f32_to_f16(f_bits(0x33000001u)), 0x0001);    /* just above 2^-25 */
  CHECK_EQ_INT(ir_f32_to_f16(3 * 0x1p-25f), 0x0002);           /* tie 1.5 ulp -> 2 */
  CHECK_EQ_INT(ir_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);    /* tie rounds up into normals */
  CHECK_EQ_INT(ir_f32_to_f16(-0x1p-26f), 0x8000);              /* underflow keeps the sign */
  CHECK_EQ_INT(ir_f32_to_f16(1e-10f), 0x0000);
  CHECK_EQ_INT(ir_f32_to_f16(0.1f), 0x2E66);
  CHECK_EQ_INT(ir_f32_to_f16(INFINITY), 0x7C00);
  CHECK_EQ_INT(ir_f32_to_f16(-0.0f), 0x8000);
  CHECK_EQ_INT(ir_f32_to_f16(f_bits(0x7FC00000u)), 0x7E00);
  CHECK_EQ_INT(ir_f32_to_f16(f_bits(0xFFC00000u)), 0xFE00);
  CHECK_EQ_INT(ir_f32_to_f16(f_bits(0x7F800001u)), 0x7E00); /* signalling -> quiet NaN */
  CHECK_EQ_INT(bits_f(ir_f16_to_f32(0x0001)), bits_f(0x1p-24f));
  CHECK_EQ_INT(bits_f(ir_f16_to_f32(0x03FF)), bits_f(0x3FFp-24f));
  CHECK_EQ_INT(bits_f(ir_f16_to_f32(0x7BFF)), bits_f(65504.0f));
  CHECK_EQ_INT(bits_f(ir_f16_to_f32(0x7C00)), 0x7F800000u);
  CHECK_EQ_INT(bits_f(ir_f16_to_f32(0x8000)), 0x80000000u);
  CHECK_EQ_INT(bits_f(ir_f16_to_f32(0x3555)), bits_f(0x1.554p-2f));
  CHECK(isnan(ir_f16_to_f32(0x7E00)));
  CHECK(isnan(ir_f16_to_f32(0x7C01)));
  /* every f16 pattern that is not NaN round-trips exactly */
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;
    if (ir_f32_to_f16(ir_f16_to_f32((uint16_t)h)) != h) bad++;
  }
  CHECK_EQ_INT(bad, 0);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void test_round_to_dtype(void) {
  CHECK(ir_round_to_dtype(IR_DT_F64, 0.1) == 0.1);
  CHECK(ir_round_to_dtype(IR_DT_F32, 0.1) == (double)0.1f);
  CHECK(ir_round_to_dtype(IR_DT_F32, 1 + 0x1p-24) == 1.0);                 /* tie, even */
  CHECK(ir_round_to_dtype(IR_DT_F32, 1 + 0x1p-24 + 0x1p-50) == 1 + 0x1p-23);
  CHECK(ir_round_to_dtype(IR_DT_F32, (double)FLT_MAX + 0x1p102) == (double)FLT_MAX);
  CHECK(isinf(ir_round_to_dtype(IR_DT_F32, (double)FLT_MAX + 0x1p103)));    /* tie -> inf */
  CHECK(isinf(ir_round_to_dtype(IR_DT_F32, 1e300)));
  CHECK(ir_round_to_dtype(IR_DT_F32, -1e300) == -INFINITY);
  CHECK(ir_round_to_dtype(IR_DT_F32, -(double)FLT_MAX - 0x1p102) == -(double)FLT_MAX);
  CHECK(ir_round_to_dtype(IR_DT_F32, INFINITY) == INFINITY);
  CHECK(ir_round_to_dtype(IR_DT_F32, 0x1p-150) == 0.0);                     /* tie to even 0 */
  CHECK(ir_round_to_dtype(IR_DT_F32, 0x1.8p-150) == 0x1p-149);
  CHECK(ir_round_to_dtype(IR_DT_F32, 1e-300) == 0.0);

  /* bf16 ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 */
  CHECK(ir_round_to_dtype(IR_DT_BF16, 1 + 0x1p-8) == 1.0);
  CHECK(ir_round_to_dtype(IR_DT_BF16, 1 + 3 * 0x1p-8) == 1 + 0x1p-6);
  /* just above a tie: the direct rounding goes up; rounding through f32 first
   * would land exactly on the tie and go to even (1.0) — the double-rounding bug */
  CHECK(ir_round_to_dtype(IR_DT_BF16, 1 + 0x1p-8 + 0x1p-30) == 1 + 0x1p-7);
  CHECK(ir_bf16_to_f32(ir_f32_to_bf16((float)(1 + 0x1p-8 + 0x1p-30))) == 1.0f);
  CHECK(ir_round_to_dtype(IR_DT_F16, 1 + 0x1p-11 + 0x1p-40) == 1 + 0x1p-10);
  CHECK(ir_round_to_dtype(IR_DT_F16, 1 + 0x1p-11) == 1.0);
  CHECK(ir_round_to_dtype(IR_DT_F16, 65520.0) == INFINITY);
  CHECK(ir_round_to_dtype(IR_DT_F16, 65519.999) == 65504.0);
  CHECK(ir_round_to_dtype(IR_DT_F16, -1e300) == -INFINITY);
  CHECK(ir_round_to_dtype(IR_DT_F16, 0x1p-25) == 0.0);
  CHECK(ir_round_to_dtype(IR_DT_F16, 0x1p-25 + 0x1p-60) == 0x1p-24);
  CHECK(signbit(ir_round_to_dtype(IR_DT_F16, -0x1p-25)));
  CHECK(ir_round_to_dtype(IR_DT_BF16, 1e-300) == 0.0);
  CHECK(ir_round_to_dtype(IR_DT_BF16, 0x1p-133) == 0x1p-133); /* min bf16 subnormal */
  CHECK(isnan(ir_round_to_dtype(IR_DT_BF16, NAN)));
  CHECK(isnan(ir_round_to_dtype(IR_DT_F16, -NAN)));
  CHECK(isnan(ir_round_to_dtype(IR_DT_F32, NAN)));
  CHECK(ir_round_to_dtype(IR_DT_BF16, -INFINITY) == -INFINITY);

  /* random sweeps: f32 inputs round like the bit conversions; doubles like (float) */
  int bad_bf = 0, bad_h = 0, bad_f = 0;
  for (int i = 0; i < 200000; i++) {
    uint32_t b = (uint32_t)rng();
    float f = f_bits(b);
    if (isnan(f)) continue;
    if (ir_round_to_dtype(IR_DT_BF16, f) != (double)ir_bf16_to_f32(ir_f32_to_bf16(f))) bad_bf++;
    if (ir_round_to_dtype(IR_DT_F16, f) != (double)ir_f16_to_f32(ir_f32_to_f16(f))) bad_h++;
    uint64_t db = rng();
    double x;
    memcpy(&x, &db, sizeof x);
    if (isnan(x) || fabs(x) > 3e38) continue;
    if (ir_round_to_dtype(IR_DT_F32, x) != (double)(float)x) bad_f++;
  }
  CHECK_EQ_INT(bad_bf, 0);
  CHECK_EQ_INT(bad_h, 0);
  CHECK_EQ_INT(bad_f, 0);

  CHECK(ir_round_to_dtype(IR_DT_I32, 2.7) == 2);
  CHECK(ir_round_to_dtype(IR_DT_I32, -2.7) == -2);
  CHECK(ir_round_to_dtype(IR_DT_I32, NAN) == 0);
  CHECK(ir_round_to_dtype(IR_DT_I32, 1e10) == 2147483647.0);
  CHECK(ir_round_to_dtype(IR_DT_I32, -1e10) == -2147483648.0);
  CHECK(ir_round_to_dtype(IR_DT_I32, INFINITY) == 2147483647.0);
  CHECK(ir_round_to_dtype(IR_DT_I64, -7.9) == -7);
  CHECK(ir_round_to_dtype(IR_DT_I64, NAN) == 0);
  CHECK(ir_round_to_dtype(IR_DT_I64, 1e30) == 9223372036854774784.0);
  CHECK(ir_round_to_dtype(IR_DT_I64, -1e30) == -9223372036854775808.0);
  CHECK((int64_t)ir_round_to_dtype(IR_DT_I64, INFINITY) > 0); /* convertible without UB */
  CHECK(ir_round_to_dtype(IR_DT_BOOL, 0.5) == 1.0);
  CHECK(ir_round_to_dtype(IR_DT_BOOL, -0.0) == 0.0);
  CHECK(ir_round_to_dtype(IR_DT_BOOL, 0.0) == 0.0);
  CHECK(ir_round_to_dtype(IR_DT_BOOL, -3) == 1.0);
}

static void test_op_tables(void) {
  for (int op = 0; op < IR_NUM_OPS; op++) {
    const char *name = ir_op_name((ir_op)op);
    CHECK(name && name[0]);
    CHECK_EQ_INT(ir_op_from_name(name), op);
    ir_op_kind k = ir_op_kind_of((ir_op)op);
    if (k == IR_OPK_NULLARY) CHECK_EQ_INT(ir_op_num_inputs((ir_op)op), 0);
    if (k == IR_OPK_UNARY) CHECK_EQ_INT(ir_op_num_inputs((ir_op)op), 1);
    if (k == IR_OPK_BINARY) CHECK_EQ_INT(ir_op_num_inputs((ir_op)op), 2);
    /* only an effect (send) may have no result: a pure op without one computes nothing */
    CHECK(ir_op_num_outputs((ir_op)op) != 0 || ir_op_has((ir_op)op, IR_OPF_EFFECT));
    CHECK_EQ_INT(ir_op_is_elementwise((ir_op)op), k == IR_OPK_UNARY || k == IR_OPK_BINARY || op == IR_OP_WHERE);
    if (ir_op_is_comparison((ir_op)op)) CHECK(k == IR_OPK_BINARY);
  }
  CHECK_EQ_INT(ir_op_from_name("nope"), -1);
  CHECK_EQ_INT(ir_op_from_name(NULL), -1);
  CHECK_STR(ir_op_name(IR_OP_REDUCE_SUM), "reduce_sum");
  CHECK_EQ_INT(ir_op_num_inputs(IR_OP_CONCAT), -1);
  CHECK_EQ_INT(ir_op_num_outputs(IR_OP_SPLIT), -1);
  CHECK_EQ_INT(ir_op_num_inputs(IR_OP_LAYERNORM), 3);
  CHECK_STR(ir_op_name(IR_OP_LAYERNORM_GRAD), "layernorm_grad");
  CHECK(ir_op_num_inputs(IR_OP_LAYERNORM_GRAD) == 3 && ir_op_num_outputs(IR_OP_LAYERNORM_GRAD) == 3);
  CHECK(ir_op_num_inputs(IR_OP_RMSNORM_GRAD) == 3 && ir_op_num_outputs(IR_OP_RMSNORM_GRAD) == 2);
  CHECK(ir_op_is_comparison(IR_OP_EQ) && ir_op_is_comparison(IR_OP_GE));
  CHECK(!ir_op_is_comparison(IR_OP_AND) && !ir_op_is_comparison(IR_OP_OR));
  CHECK(ir_op_is_elementwise(IR_OP_CAST) && !ir_op_is_elementwise(IR_OP_MATMUL));
}

/* The reference for each unary op, written from its definition; NAN marks "no reference". */
static double ref_unary(ir_op op, double x, int *known) {
  *known = 1;
  switch (op) {
  case IR_OP_NEG: return -x;
  case IR_OP_ABS: return fabs(x);
  case IR_OP_EXP: return exp(x);
  case IR_OP_LOG: return log(x);
  case IR_OP_SQRT: return sqrt(x);
  case IR_OP_RSQRT: return 1 / sqrt(x);
  case IR_OP_SIN: return sin(x);
  case IR_OP_COS: return cos(x);
  case IR_OP_TANH: return tanh(x);
  case IR_OP_SIGMOID: return 1 / (1 + exp(-x));
  case IR_OP_RELU: return x > 0 ? x : 0;
  case IR_OP_GELU: return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * pow(x, 3))));
  case IR_OP_SILU: return x / (1 + exp(-x));
  case IR_OP_SQUARE: return x * x;
  case IR_OP_ERF: return erf(x);
  case IR_OP_NOT: return x == 0;
  case IR_OP_CAST: return x;
  case IR_OP_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
  case IR_OP_GELU_GRAD: { /* derivative of the GELU line above, by the product and chain rules */
    double c = sqrt(2 / 3.14159265358979323846), u = c * (x + 0.044715 * pow(x, 3)), t = tanh(u);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
  }
  default: *known = 0; return 0;
  }
}

static double ref_binary(ir_op op, double a, double b, int *known) {
  *known = 1;
  switch (op) {
  case IR_OP_ADD: return a + b;
  case IR_OP_SUB: return a - b;
  case IR_OP_MUL: return a * b;
  case IR_OP_DIV: return a / b;
  case IR_OP_POW: return pow(a, b);
  case IR_OP_MAXIMUM: return fmax(a, b);
  case IR_OP_MINIMUM: return fmin(a, b);
  case IR_OP_EQ: return a == b;
  case IR_OP_NE: return a != b;
  case IR_OP_LT: return a < b;
  case IR_OP_LE: return a <= b;
  case IR_OP_GT: return a > b;
  case IR_OP_GE: return a >= b;
  case IR_OP_AND: return a != 0 && b != 0;
  case IR_OP_OR: return a != 0 || b != 0;
  default: *known = 0; return 0;
  }
}

static void test_eval(void) {
  static const double xs[] = {-2.5, -1.0, -0.3, 0.0, 0.7, 1.0, 3.0};
  const int nx = (int)(sizeof xs / sizeof xs[0]);
  for (int op = 0; op < IR_NUM_OPS; op++) {
    ir_op_kind k = ir_op_kind_of((ir_op)op);
    int known;
    if (k == IR_OPK_UNARY) {
      ref_unary((ir_op)op, 1, &known);
      if (!known) fprintf(stderr, "no reference for unary op %s\n", ir_op_name((ir_op)op));
      CHECK(known);
      for (int i = 0; i < nx; i++) {
        double x = (op == IR_OP_LOG || op == IR_OP_SQRT || op == IR_OP_RSQRT) ? fabs(xs[i]) + 0.25 : xs[i];
        CHECK_NEAR(ir_eval_unary((ir_op)op, x), ref_unary((ir_op)op, x, &known), 1e-14);
      }
    } else if (k == IR_OPK_BINARY) {
      ref_binary((ir_op)op, 1, 1, &known);
      if (!known) fprintf(stderr, "no reference for binary op %s\n", ir_op_name((ir_op)op));
      CHECK(known);
      for (int i = 0; i < nx; i++)
        for (int j = 0; j < nx; j++) {
          double a = op == IR_OP_POW ? fabs(xs[i]) : xs[i], b = xs[j];
          if (op == IR_OP_DIV && b == 0) continue;
          if (op == IR_OP_POW && a == 0 && b < 0) continue;
          CHECK_NEAR(ir_eval_binary((ir_op)op, a, b), ref_binary((ir_op)op, a, b, &known), 1e-14);
        }
    }
  }
  /* edge cases */
  CHECK(ir_eval_unary(IR_OP_SIGMOID, -1000) == 0.0);
  CHECK(ir_eval_unary(IR_OP_SIGMOID, 1000) == 1.0);
  CHECK_NEAR(ir_eval_unary(IR_OP_SIGMOID, -40), exp(-40) / (1 + exp(-40)), 1e-15);
  CHECK(isnan(ir_eval_unary(IR_OP_SIGMOID, NAN)));
  CHECK(isnan(ir_eval_unary(IR_OP_RELU, NAN)));
  CHECK(ir_eval_unary(IR_OP_RELU, -0.0) == 0.0 && !signbit(ir_eval_unary(IR_OP_RELU, -0.0)));
  CHECK(ir_eval_unary(IR_OP_GELU, -INFINITY) == 0.0);
  CHECK(ir_eval_unary(IR_OP_GELU, INFINITY) == INFINITY);
  CHECK(ir_eval_unary(IR_OP_GELU, -1e200) == 0.0);
  CHECK(ir_eval_unary(IR_OP_SILU, -INFINITY) == 0.0);
  CHECK(ir_eval_unary(IR_OP_SILU, -1000) == 0.0 || fabs(ir_eval_unary(IR_OP_SILU, -1000)) < 1e-300);
  CHECK(ir_eval_unary(IR_OP_RSQRT, 4) == 0.5);
  CHECK(ir_eval_unary(IR_OP_RSQRT, 0) == INFINITY);
  CHECK(ir_eval_unary(IR_OP_NOT, 0) == 1.0 && ir_eval_unary(IR_OP_NOT, 1) == 0.0);
  CHECK(ir_eval_unary(IR_OP_CAST, 2.75) == 2.75);
  CHECK(isnan(ir_eval_binary(IR_OP_MAXIMUM, NAN, 1)));
  CHECK(isnan(ir_eval_binary(IR_OP_MAXIMUM, 1, NAN)));
  CHECK(isnan(ir_eval_binary(IR_OP_MINIMUM, NAN, 1)));
  CHECK(isnan(ir_eval_binary(IR_OP_MINIMUM, 1, NAN)));
  CHECK(ir_eval_binary(IR_OP_EQ, NAN, NAN) == 0.0);
  CHECK(ir_eval_binary(IR_OP_NE, NAN, NAN) == 1.0);
  CHECK(ir_eval_binary(IR_OP_LT, 1, 2) == 1.0);
  CHECK(ir_eval_binary(IR_OP_AND, 1, 0) == 0.0);
  CHECK(ir_eval_binary(IR_OP_OR, 1, 0) == 1.0);
  CHECK(ir_eval_binary(IR_OP_DIV, 1, 0) == INFINITY);
}

int main(void) {
  test_dtype_tables();
  test_bf16();
  test_f16();
  test_round_to_dtype();
  test_op_tables();
  test_eval();
  return check_done();
}
