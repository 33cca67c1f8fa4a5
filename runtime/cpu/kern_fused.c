/* runtime/cpu/kern_fused.c — kernels of the ops the fuse-elementwise pass makes:
 * fused (an elementwise expression over broadcast operands), fused_matmul
 * (matmul with an elementwise epilogue) and add_layernorm (residual add and
 * layernorm in one pass over each row).
 *
 * The expr attribute comes parsed (ir/expr.c; made by
 * passes/fuse_elementwise.c, typed by ir/infer.c): each call turns its
 * structure into a program — a postfix list of instructions (load an
 * operand, a constant, one op), each with its result dtype. The program then runs over chunks of CHUNK output
 * elements: every instruction fills a register of CHUNK values, so one
 * instruction is one tight loop over a vector of elements (no per-element
 * dispatch), and threads split the chunks (OpenMP, static schedule).
 *
 * Bit-exact with the unfused kernels (kern_elementwise.c), which compute
 * every op in double and round to the result dtype (ir_round_to_dtype):
 *  - f32 values live in float registers. add, sub, mul, div, sqrt and square
 *    of f32 operands are computed in float: for these IEEE operations,
 *    rounding the exact double result to float gives the correctly rounded
 *    float result (double has more than 2*24+2 bits: double rounding is
 *    innocuous), which is what float arithmetic gives. neg, abs, relu, sign,
 *    maximum, minimum only select or flip signs: exact in float too.
 *  - every other op (exp, tanh, gelu, pow, rsqrt, ...) and every dtype other
 *    than f32 goes through ir_eval_unary / ir_eval_binary in double, then
 *    ir_round_to_dtype, exactly as the unfused kernels do; non-f32 values
 *    live in double registers (exact for every dtype as loaded by rt_load);
 *    f64 results of cast, square, neg and sqrt skip the calls (rounding to
 *    f64 is the identity; the arithmetic is ir_eval_unary's).
 * NaN payloads are not guaranteed to match bit for bit (neither are they
 * between two compilations of the unfused kernels); every NaN stays a NaN.
 *
 * Iteration: operand strides are broadcast against the output; adjacent
 * dims that every operand walks contiguously are merged, so a contiguous
 * elementwise chain is one flat loop and a bias add is rows x row-length.
 * An f32 operand read with unit stride is used in place (no copy); a
 * broadcast one (stride 0) is splatted once per chunk.
 */
#include <float.h>
#include <stdlib.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels.h"
#include "scalar.h"

enum {
  FUSED_MAX_OPERANDS = 64, /* as ir/infer.c types them */
  CHUNK = 512,           /* elements per register */
  MAX_INSTRUCTIONS = 4096,
  FI_LOAD = IR_NUM_OPS,  /* instruction kinds beyond the ops */
  FI_CONST,
};

typedef struct {
  int kind;      /* an elementwise ir_op, FI_LOAD or FI_CONST */
  ir_dtype dt;   /* result dtype */
  bool f32;      /* result held in a float register */
  bool uniform;  /* the same value for every element (scalar operands and constants only) */
  int arg[3];    /* argument instructions */
  int operand;   /* FI_LOAD: operand index */
  bool widen;    /* FI_LOAD of a bf16 operand read by one cast to f32 (that cast): loaded as f32 */
  bool narrow;   /* cast of an f32 value to bf16 read by no instruction (a result: the optimizer's bf16
                  * copy): not evaluated, its argument's floats rounded as they are stored */
  const float *lut; /* a unary op of a bf16 value to bf16: its result for each of the 65536 inputs (bf16_lut) */
  double value;  /* FI_CONST: rounded to dt; dropout: its scale 1/(1-p) rounded to dt */
  uint64_t skey; /* dropout: ir_dropout_stream_key of the key operand and the stream */
  uint32_t threshold; /* dropout: ir_dropout_threshold(p) */
} finst;

typedef struct {
  finst *ins;
  int n, cap;
  int roots[IR_FUSED_MAX_RESULTS]; /* the instruction of each result */
  unsigned direct;                 /* bit k: result k is written straight into its output */
  int n_roots;
  int n_ops;
  const rt_tensor *const *ops;
  char *err;
  size_t errlen;
} fprog;

static int prog_fail(fprog *p, const char *what) {
  snprintf(p->err, p->errlen, "bad expr: %s", what);
  return -1;
}

/* Scratch memory of n bytes, zero-filled (scratch.c: freed by the caller's pop). */
static void *scratch_zero(size_t n) {
  void *p = rt_scratch_push(n);
  if (p) memset(p, 0, n);
  return p;
}

static int prog_add(fprog *p, finst in) {
  if (p->n == MAX_INSTRUCTIONS || p->n == p->cap) return prog_fail(p, "too many nodes");
  in.f32 = in.dt == IR_DT_F32;
  p->ins[p->n] = in;
  return p->n++;
}

/* The register program of expression e (ir/expr.c's structure): one
 * instruction per load, constant and op; #k reads result k's instruction.
 * The dtypes are derived again by the typing rules of ir/infer.c, because a
 * kernel must not trust an unverified graph. 0, or -1 with p->err. */
static int prog_build(fprog *p, const ir_expr *e) {
  int *map = rt_scratch_push((size_t)(e->n_ins > 0 ? e->n_ins : 1) * sizeof *map);
  p->cap = e->n_ins > 0 ? e->n_ins : 1; /* at most one instruction per expr instruction */
  p->ins = rt_scratch_push((size_t)p->cap * sizeof *p->ins);
  int *refs = scratch_zero((size_t)(e->n_ins > 0 ? e->n_ins : 1) * sizeof *refs); /* readers of each expr instruction */
  int *oprefs = scratch_zero((size_t)(e->n_ins > 0 ? e->n_ins : 1) * sizeof *oprefs); /* ... that are instructions */
  if (!map || !p->ins || !refs || !oprefs) return prog_fail(p, "out of memory");
  for (int i = 0; i < e->n_ins; i++)
    for (int k = 0; e->ins[i].kind == IR_EXPR_OP && k < ir_expr_arity(&e->ins[i]); k++)
      if (e->ins[i].arg[k] >= 0 && e->ins[i].arg[k] < e->n_ins) refs[e->ins[i].arg[k]]++, oprefs[e->ins[i].arg[k]]++;
  for (int r = 0; r < e->n_results; r++)
    if (e->results[r] >= 0 && e->results[r] < e->n_ins) refs[e->results[r]]++;
  for (int i = 0; i < e->n_ins; i++) /* #k read as an operand: the result's instruction is read */
    if (e->ins[i].kind == IR_EXPR_RESULT && e->ins[i].index >= 0 && e->ins[i].index < e->n_results &&
        e->results[e->ins[i].index] >= 0 && e->results[e->ins[i].index] < e->n_ins)
      oprefs[e->results[e->ins[i].index]]++;
  int rc = 0;
  for (int i = 0; i < e->n_ins && rc == 0; i++) {
    const ir_expr_inst *x = &e->ins[i];
    finst in = {.kind = FI_LOAD};
    switch (x->kind) {
    case IR_EXPR_OPERAND:
      if (x->index >= p->n_ops) {
        rc = prog_fail(p, "bad operand number");
        break;
      }
      in.operand = x->index;
      in.dt = p->ops[x->index]->type.dtype;
      rc = (map[i] = prog_add(p, in)) < 0 ? -1 : 0;
      break;
    case IR_EXPR_RESULT:
      if (x->index >= p->n_roots) rc = prog_fail(p, "bad result number");
      else map[i] = p->roots[x->index];
      break;
    case IR_EXPR_CONST:
      in.kind = FI_CONST;
      in.dt = x->dtype;
      in.value = ir_round_to_dtype(x->dtype, x->value);
      rc = (map[i] = prog_add(p, in)) < 0 ? -1 : 0;
      break;
    case IR_EXPR_OP: {
      ir_op op = x->op;
      int n = ir_expr_arity(x);
      in.kind = op;
      for (int k = 0; k < n; k++) in.arg[k] = map[x->arg[k]];
      const finst *a = &p->ins[in.arg[0]];
      if (op == IR_OP_CAST && x->dtype == IR_DT_F32 && a->kind == FI_LOAD && a->dt == IR_DT_BF16 &&
          e->ins[x->arg[0]].kind == IR_EXPR_OPERAND && refs[x->arg[0]] == 1) {
        /* f32(bf16 operand) read nowhere else (mixed precision's gradients in the update): the load
         * widens (exact: a bf16 is the high half of its f32), no double register in between */
        p->ins[in.arg[0]].dt = IR_DT_F32;
        p->ins[in.arg[0]].f32 = p->ins[in.arg[0]].widen = true;
        map[i] = in.arg[0];
        break;
      } else if (op == IR_OP_CAST) {
        in.dt = x->dtype;
        in.narrow = x->dtype == IR_DT_BF16 && a->f32 && oprefs[i] == 0;
      } else if (op == IR_OP_DROPOUT) { /* (x, key, g): the key's 64 bits read here, g exact below 2^53 */
        const ir_expr_inst *key = &e->ins[x->arg[1]];
        if (key->kind != IR_EXPR_OPERAND || p->ops[key->index]->type.dtype != IR_DT_I64 ||
            rt_numel(&p->ops[key->index]->type) != 1 || p->ins[in.arg[2]].dt != IR_DT_I64 || !ir_dtype_is_float(a->dt) ||
            !(x->value > 0 && x->value < 1)) {
          rc = prog_fail(p, "bad dropout");
          break;
        }
        int64_t k64;
        memcpy(&k64, p->ops[key->index]->data, sizeof k64);
        in.dt = a->dt;
        in.skey = ir_dropout_stream_key((uint64_t)k64, (uint64_t)x->index);
        in.threshold = ir_dropout_threshold(x->value);
        in.value = ir_round_to_dtype(a->dt, 1.0 / (1.0 - x->value));
      } else if (op == IR_OP_WHERE) {
        if (a->dt != IR_DT_BOOL || p->ins[in.arg[1]].dt != p->ins[in.arg[2]].dt) rc = prog_fail(p, "bad where dtypes");
        in.dt = p->ins[in.arg[1]].dt;
      } else {
        if (n == 2 && p->ins[in.arg[1]].dt != a->dt) rc = prog_fail(p, "dtype mismatch");
        in.dt = ir_op_is_comparison(op) ? IR_DT_BOOL : a->dt;
      }
      if (rc == 0) rc = (map[i] = prog_add(p, in)) < 0 ? -1 : 0;
      break;
    }
    }
    while (rc == 0 && p->n_roots < e->n_results && e->results[p->n_roots] == i) p->roots[p->n_roots++] = map[i];
  }
  return rc;
}

/* ---- evaluation of one chunk ---- */

/* Where each operand's chunk starts and how it steps (elements). */
typedef struct {
  int64_t off;
  int64_t step;
} leaf_pos;

typedef struct {
  const float **fv;   /* per instruction: float values (f32 results) */
  const double **dv;  /* per instruction: double values (others) */
  float *fs;          /* scratch: w floats per instruction */
  double *ds;         /* scratch: w doubles per instruction */
  int w;              /* register width: CHUNK, or fewer for a smaller result */
  float *root_out;    /* where the root (an f32 result) writes this chunk, or NULL */
} regs;

/* sqrt of n floats: correctly rounded (IEEE), as sqrt in double then
 * rounded to float; SSE2 does four at a time (libm's sqrtf does one, with
 * an errno check that keeps the compiler from vectorizing). */
static void sqrt_f32(float *z, const float *x, int n) {
  int j = 0;
#if defined(__SSE2__)
  for (; j + 4 <= n; j += 4) _mm_storeu_ps(z + j, _mm_sqrt_ps(_mm_loadu_ps(x + j)));
#endif
  for (; j < n; j++) z[j] = sqrtf(x[j]);
}

static inline double reg_val(const regs *r, const finst *in, int i, int j) {
  return in[i].f32 ? (double)r->fv[i][j] : r->dv[i][j];
}

static void eval_load(const fprog *p, const finst *in, int i, regs *r, const leaf_pos *lp, int n) {
  const rt_tensor *t = p->ops[in[i].operand];
  int64_t off = lp[in[i].operand].off, step = lp[in[i].operand].step;
  ir_dtype dt = t->type.dtype;
  if (in[i].widen) { /* as kern_cast.c: a signalling NaN comes out quiet */
    const uint16_t *h = (const uint16_t *)t->data + off;
    float *z = r->fs + (size_t)i * r->w;
    if (step == 1)
      for (int j = 0; j < n; j++) z[j] = rt_bf16_widen(h[j]);
    else
      for (int j = 0; j < n; j++) z[j] = rt_bf16_widen(h[j * step]);
    r->fv[i] = z;
    return;
  }
  if (in[i].f32) {
    const float *src = (const float *)t->data + off;
    if (step == 1) {
      r->fv[i] = src;
      return;
    }
    float *z = r->fs + (size_t)i * r->w;
    if (step == 0) {
      float v = src[0];
      for (int j = 0; j < n; j++) z[j] = v;
    } else {
      for (int j = 0; j < n; j++) z[j] = src[j * step];
    }
    r->fv[i] = z;
    return;
  }
  if (dt == IR_DT_F64 && step == 1) {
    r->dv[i] = (const double *)t->data + off;
    return;
  }
  double *z = r->ds + (size_t)i * r->w;
  if (dt == IR_DT_BF16 && step != 0) { /* rt_load's value, inline */
    const uint16_t *h = (const uint16_t *)t->data + off;
    for (int j = 0; j < n; j++) z[j] = rt_bf16_value(h[j * step]);
    r->dv[i] = z;
    return;
  }
  if (step == 0) {
    double v = rt_load(dt, t->data, off);
    for (int j = 0; j < n; j++) z[j] = v;
  } else {
    for (int j = 0; j < n; j++) z[j] = rt_load(dt, t->data, off + j * step);
  }
  r->dv[i] = z;
}

/* An instruction with an f32 result. Its loops vectorize; GCC builds an
 * AVX2 version beside the baseline one, picked at load time (the same IEEE
 * operations per element in both: no FP contraction in C11 mode). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default")))
#endif
static void eval_f32(const finst *in, int i, regs *r, int n) {
  const finst *I = &in[i];
  float *z = r->root_out ? r->root_out : r->fs + (size_t)i * r->w;
  const float *x = in[I->arg[0]].f32 ? r->fv[I->arg[0]] : NULL;
  const float *y = I->kind != IR_OP_CAST && ir_op_kind_of((ir_op)I->kind) == IR_OPK_BINARY ? r->fv[I->arg[1]] : NULL;
  r->fv[i] = z;
  switch (I->kind) {
  case FI_CONST: {
    float v = (float)I->value;
    for (int j = 0; j < n; j++) z[j] = v;
    return;
  }
  case IR_OP_ADD: for (int j = 0; j < n; j++) z[j] = x[j] + y[j]; return;
  case IR_OP_SUB: for (int j = 0; j < n; j++) z[j] = x[j] - y[j]; return;
  case IR_OP_MUL: for (int j = 0; j < n; j++) z[j] = x[j] * y[j]; return;
  case IR_OP_DIV: for (int j = 0; j < n; j++) z[j] = x[j] / y[j]; return;
  case IR_OP_SQUARE: for (int j = 0; j < n; j++) z[j] = x[j] * x[j]; return;
  case IR_OP_NEG: for (int j = 0; j < n; j++) z[j] = -x[j]; return;
  case IR_OP_ABS: for (int j = 0; j < n; j++) z[j] = fabsf(x[j]); return;
  case IR_OP_SQRT: sqrt_f32(z, x, n); return;
  case IR_OP_RELU:
    for (int j = 0; j < n; j++) z[j] = (x[j] > 0 || isnan(x[j])) ? x[j] : 0.0f;
    return;
  case IR_OP_SIGN:
    for (int j = 0; j < n; j++) z[j] = x[j] > 0 ? 1.0f : x[j] < 0 ? -1.0f : x[j];
    return;
  case IR_OP_MAXIMUM:
    for (int j = 0; j < n; j++) z[j] = (isnan(x[j]) || isnan(y[j])) ? NAN : (x[j] > y[j] ? x[j] : y[j]);
    return;
  case IR_OP_MINIMUM:
    for (int j = 0; j < n; j++) z[j] = (isnan(x[j]) || isnan(y[j])) ? NAN : (x[j] < y[j] ? x[j] : y[j]);
    return;
  case IR_OP_WHERE: {
    const double *c = r->dv[I->arg[0]];
    const float *a = r->fv[I->arg[1]], *b = r->fv[I->arg[2]];
    for (int j = 0; j < n; j++) z[j] = c[j] != 0 ? a[j] : b[j];
    return;
  }
  case IR_OP_CAST:
    if (x) { /* f32 -> f32 */
      if (z != x) memmove(z, x, (size_t)n * sizeof *z);
      return;
    }
    for (int j = 0; j < n; j++) z[j] = rt_round_f32(r->dv[I->arg[0]][j]);
    return;
  case IR_OP_DROPOUT: { /* as rt_kern_dropout: x * scale is exact in double, so its f32 rounding is the float product */
    const double *g = r->dv[I->arg[2]];
    float scale = (float)I->value;
    for (int j = 0; j < n; j++) z[j] = ir_dropout_bits(I->skey, (uint64_t)(int64_t)g[j]) >= I->threshold ? x[j] * scale : 0.0f;
    return;
  }
  case IR_OP_GELU: rt_gelu_f32(z, x, n, false); return; /* vectorized: vec_math.c */
  case IR_OP_GELU_GRAD: rt_gelu_f32(z, x, n, true); return;
  default: break;
  }
  /* exp, log, tanh, pow, rsqrt, ...: in double, as the unfused kernels */
  ir_op op = (ir_op)I->kind;
  if (y) {
    for (int j = 0; j < n; j++) z[j] = rt_round_f32(ir_eval_binary(op, x[j], y[j]));
  } else {
    for (int j = 0; j < n; j++) z[j] = rt_round_f32(ir_eval_unary(op, x[j]));
  }
}

/* An instruction with a result in a double register (any dtype but f32). */
static void eval_double(const finst *in, int i, regs *r, int n) {
  const finst *I = &in[i];
  double *z = r->ds + (size_t)i * r->w;
  r->dv[i] = z;
  ir_dtype dt = I->dt;
  if (I->kind == FI_CONST) {
    for (int j = 0; j < n; j++) z[j] = I->value;
    return;
  }
  ir_op op = (ir_op)I->kind;
  int a = I->arg[0], b = I->arg[1];
  if (dt == IR_DT_F64 && (op == IR_OP_ADD || op == IR_OP_SUB || op == IR_OP_MUL || op == IR_OP_DIV)) {
    const double *x = r->dv[a], *y = r->dv[b];
    switch (op) {
    case IR_OP_ADD: for (int j = 0; j < n; j++) z[j] = x[j] + y[j]; break;
    case IR_OP_SUB: for (int j = 0; j < n; j++) z[j] = x[j] - y[j]; break;
    case IR_OP_MUL: for (int j = 0; j < n; j++) z[j] = x[j] * y[j]; break;
    default: for (int j = 0; j < n; j++) z[j] = x[j] / y[j]; break;
    }
    return;
  }
  if (dt == IR_DT_F64 && (op == IR_OP_CAST || op == IR_OP_SQUARE || op == IR_OP_NEG || op == IR_OP_SQRT)) {
    /* rounding to f64 is the identity: the same double arithmetic as
     * ir_eval_unary, without a call per element (the f64 squares of the
     * global gradient norm) */
    double *t = z;
    if (in[a].f32) {
      const float *x = r->fv[a];
      for (int j = 0; j < n; j++) t[j] = (double)x[j];
    } else if (t != r->dv[a]) {
      memcpy(t, r->dv[a], (size_t)n * sizeof *t);
    }
    switch (op) {
    case IR_OP_SQUARE: for (int j = 0; j < n; j++) t[j] = t[j] * t[j]; break;
    case IR_OP_NEG: for (int j = 0; j < n; j++) t[j] = -t[j]; break;
    case IR_OP_SQRT: for (int j = 0; j < n; j++) t[j] = sqrt(t[j]); break;
    default: break;
    }
    return;
  }
  if (dt == IR_DT_BF16 && in[a].dt == IR_DT_BF16 && in[b].dt == IR_DT_BF16 && !in[a].f32 && !in[b].f32 &&
      (op == IR_OP_ADD || op == IR_OP_SUB || op == IR_OP_MUL || op == IR_OP_DIV)) {
    /* bf16 operands: the double result rounded to f32, then to bf16, is the
     * exact result rounded to bf16 (each rounding keeps more than twice the
     * next one's bits plus 2: the double rounding is innocuous), as
     * ir_round_to_dtype rounds it, without its generic rounding per element */
    const double *x = r->dv[a], *y = r->dv[b];
    switch (op) {
    case IR_OP_ADD: for (int j = 0; j < n; j++) z[j] = rt_bf16_value(rt_bf16_bits(rt_round_f32(x[j] + y[j]))); break;
    case IR_OP_SUB: for (int j = 0; j < n; j++) z[j] = rt_bf16_value(rt_bf16_bits(rt_round_f32(x[j] - y[j]))); break;
    case IR_OP_MUL: for (int j = 0; j < n; j++) z[j] = rt_bf16_value(rt_bf16_bits(rt_round_f32(x[j] * y[j]))); break;
    default: for (int j = 0; j < n; j++) z[j] = rt_bf16_value(rt_bf16_bits(rt_round_f32(x[j] / y[j]))); break;
    }
    return;
  }
  if (op == IR_OP_WHERE) {
    for (int j = 0; j < n; j++)
      z[j] = ir_round_to_dtype(dt, reg_val(r, in, a, j) != 0 ? reg_val(r, in, b, j) : reg_val(r, in, I->arg[2], j));
    return;
  }
  if (op == IR_OP_CAST && dt == IR_DT_BF16 && in[a].f32) { /* f32 -> bf16 (mixed precision's weights) */
    const float *x = r->fv[a];
    for (int j = 0; j < n; j++) z[j] = rt_bf16_value(rt_bf16_bits(x[j]));
    return;
  }
  if (op == IR_OP_CAST) {
    for (int j = 0; j < n; j++) z[j] = ir_round_to_dtype(dt, reg_val(r, in, a, j));
    return;
  }
  if (op == IR_OP_DROPOUT) {
    const double *g = r->dv[I->arg[2]];
    for (int j = 0; j < n; j++)
      z[j] = ir_round_to_dtype(
          dt, ir_dropout_bits(I->skey, (uint64_t)(int64_t)g[j]) >= I->threshold ? reg_val(r, in, a, j) * I->value : 0.0);
    return;
  }
  if (ir_op_kind_of(op) == IR_OPK_BINARY && dt == IR_DT_BF16) {
    for (int j = 0; j < n; j++) z[j] = rt_round_bf16(ir_eval_binary(op, reg_val(r, in, a, j), reg_val(r, in, b, j)));
  } else if (ir_op_kind_of(op) == IR_OPK_BINARY) {
    for (int j = 0; j < n; j++) z[j] = ir_round_to_dtype(dt, ir_eval_binary(op, reg_val(r, in, a, j), reg_val(r, in, b, j)));
  } else if (dt == IR_DT_BF16 && I->lut) { /* a bf16 value's bits index its result */
    const double *x = r->dv[a];
    for (int j = 0; j < n; j++) z[j] = I->lut[rt_bf16_bits((float)x[j])];
  } else if (dt == IR_DT_BF16) {
    for (int j = 0; j < n; j++) z[j] = rt_round_bf16(ir_eval_unary(op, reg_val(r, in, a, j)));
  } else {
    for (int j = 0; j < n; j++) z[j] = ir_round_to_dtype(dt, ir_eval_unary(op, reg_val(r, in, a, j)));
  }
}

/* A unary elementwise op from bf16 to bf16 has 65536 inputs: its results,
 * ir_eval_unary's rounded as the generic loop rounds them (so the same
 * bits), computed once per op and process (held to the end), make it a
 * lookup per element instead of a call in double (gelu, tanh, exp: the
 * bf16 step's activations). Built before the kernel's threads start. */
static const float *bf16_lut(ir_op op) {
  static float *table[IR_NUM_OPS];
  float *t;
#pragma omp critical(tgc_bf16_lut)
  {
    if (!(t = table[op]) && (t = malloc(65536 * sizeof *t))) {
      for (uint32_t h = 0; h < 65536; h++) t[h] = (float)rt_round_bf16(ir_eval_unary(op, rt_bf16_value((uint16_t)h)));
      table[op] = t;
    }
  }
  return t;
}

/* Stores the register of instruction root (n elements) at out[base..). */
static void store_root(const finst *in, const regs *r, int root, int n, rt_tensor *out, int64_t base) {
  ir_dtype odt = out->type.dtype;
  if (odt == IR_DT_F32 && in[root].f32) {
    float *o = (float *)out->data + base;
    if (o != r->fv[root]) memmove(o, r->fv[root], (size_t)n * sizeof *o);
  } else if (odt == IR_DT_F64 && !in[root].f32) {
    double *o = (double *)out->data + base;
    if (o != r->dv[root]) memmove(o, r->dv[root], (size_t)n * sizeof *o);
  } else if (odt == IR_DT_BF16 && in[root].narrow) { /* rt_bf16_bits(x) is the f32 -> bf16 cast of x */
    uint16_t *o = (uint16_t *)out->data + base;
    const float *x = r->fv[in[root].arg[0]];
    for (int j = 0; j < n; j++) o[j] = rt_bf16_bits(x[j]);
  } else if (odt == IR_DT_BF16 && in[root].f32) {
    uint16_t *o = (uint16_t *)out->data + base;
    const float *x = r->fv[root];
    for (int j = 0; j < n; j++) o[j] = rt_bf16_bits(x[j]);
  } else if (odt == IR_DT_BF16 && (in[root].dt == IR_DT_BF16 || in[root].dt == IR_DT_F16)) { /* floats exactly */
    uint16_t *o = (uint16_t *)out->data + base;
    const double *x = r->dv[root];
    for (int j = 0; j < n; j++) o[j] = rt_bf16_bits((float)x[j]);
  } else {
    for (int j = 0; j < n; j++) rt_store(odt, out->data, base + j, reg_val(r, in, root, j));
  }
}

/* Runs the program over n elements and stores result k at outs[k][base..).
 * One result: the root instruction writes straight into the output. More:
 * a result whose output no later instruction loads from (p->direct, see
 * fused_run) is written straight into it too; the others are computed
 * before any of them is stored, so a result may be stored over an
 * operand's buffer (the executor's in-place reuse) that another result
 * still reads; a result that is an operand as loaded is copied to scratch
 * first for the same reason. */
static void eval_chunk(const fprog *p, regs *r, const leaf_pos *lp, int n, rt_tensor *const *outs, int64_t base) {
  const finst *in = p->ins;
  bool single = p->n_roots == 1;
  int root = p->roots[0];
  ir_dtype odt = outs[0]->type.dtype;
  for (int i = 0; i < p->n; i++) {
    if (in[i].uniform || in[i].narrow) continue; /* filled once per thread; rounded as stored */
    r->root_out = NULL;
    if (in[i].kind == FI_LOAD) {
      eval_load(p, in, i, r, lp, n);
    } else if (in[i].f32) {
      if (single && i == root && odt == IR_DT_F32) r->root_out = (float *)outs[0]->data + base; /* no copy */
      for (int k = 0; !single && k < p->n_roots; k++)
        if ((p->direct >> k & 1) && p->roots[k] == i) r->root_out = (float *)outs[k]->data + base;
      eval_f32(in, i, r, n);
    } else {
      eval_double(in, i, r, n);
    }
  }
  r->root_out = NULL;
  if (!single)
    for (int k = 0; k < p->n_roots; k++) {
      int i = p->roots[k];
      if (in[i].kind != FI_LOAD) continue;
      if (in[i].f32 && r->fv[i] != r->fs + (size_t)i * r->w) {
        memcpy(r->fs + (size_t)i * r->w, r->fv[i], (size_t)n * sizeof(float));
        r->fv[i] = r->fs + (size_t)i * r->w;
      } else if (!in[i].f32 && r->dv[i] != r->ds + (size_t)i * r->w) {
        memcpy(r->ds + (size_t)i * r->w, r->dv[i], (size_t)n * sizeof(double));
        r->dv[i] = r->ds + (size_t)i * r->w;
      }
    }
  for (int k = 0; k < p->n_roots; k++)
    if (single || !(p->direct >> k & 1)) store_root(in, r, p->roots[k], n, outs[k], base);
}

/* Evaluates expr over ops[0..n_ops) (the $i) into outs[0..n_outs), every
 * operand broadcast to the shape of the results (which share one shape):
 * one expression per result, separated by ';' (only when multi). */
static int fused_run_in_scratch(const rt_kctx *k, const ir_expr *expr, const rt_tensor *const *ops, int n_ops,
                     rt_tensor *const *outs, int n_outs, unsigned count_mask, int64_t *count) {
  char msg[256] = "";
  fprog p = {.n_ops = n_ops, .ops = ops, .err = msg, .errlen = sizeof msg};
  rt_tensor *out = outs[0];
  int root = prog_build(&p, expr);
  if (root == 0 && p.n_roots != n_outs) root = prog_fail(&p, "the expressions do not match the results");
  for (int r = 0; root == 0 && r < p.n_roots; r++) {
    const rt_tensor *o = outs[r];
    if (p.ins[p.roots[r]].dt != o->type.dtype) root = prog_fail(&p, "result dtype differs from the node's");
    else if (o->type.rank != out->type.rank ||
             memcmp(o->type.dims, out->type.dims, sizeof(int64_t) * (size_t)o->type.rank) != 0)
      root = prog_fail(&p, "results differ in shape");
  }
  if (root < 0) {
    rt_kerr(k, "%s %%%s: %s", ir_op_name(k->node->op), rt_value_name(k->node->out[0]), msg);
    return -1;
  }
  /* broadcast strides, checked (the graph may be unverified) */
  int rank = out->type.rank;
  int64_t dims[IR_MAX_RANK];
  for (int d = 0; d < rank; d++) dims[d] = out->type.dims[d];
  int64_t(*st)[IR_MAX_RANK] = scratch_zero((size_t)(n_ops) * sizeof *st);
  if (!st) {
    rt_kerr(k, "out of memory");
    return -1;
  }
  for (int o = 0; o < n_ops; o++) {
    const ir_type *t = &ops[o]->type;
    bool ok = t->rank <= rank;
    for (int d = 0; ok && d < t->rank; d++) {
      int64_t od = dims[rank - t->rank + d];
      ok = t->dims[d] == od || t->dims[d] == 1;
    }
    if (!ok) {
      rt_kerr(k, "%s %%%s: operand %d does not broadcast to the result", ir_op_name(k->node->op),
              rt_value_name(k->node->out[0]), o);
      return -1;
    }
    rt_broadcast_strides(t, rank, dims, st[o]);
  }
  /* merge dim d-1 into d where every operand steps contiguously across them */
  int r2 = 0;
  int64_t cd[IR_MAX_RANK];
  int64_t(*cs)[IR_MAX_RANK] = scratch_zero((size_t)(n_ops) * sizeof *cs);
  if (!cs) {
    rt_kerr(k, "out of memory");
    return -1;
  }
  for (int d = 0; d < rank; d++) {
    if (dims[d] == 1) continue; /* size-1 dims never move */
    bool merge = r2 > 0;
    for (int o = 0; merge && o < n_ops; o++) merge = cs[o][r2 - 1] == st[o][d] * dims[d];
    if (merge) {
      cd[r2 - 1] *= dims[d];
      for (int o = 0; o < n_ops; o++) cs[o][r2 - 1] = st[o][d];
    } else {
      cd[r2] = dims[d];
      for (int o = 0; o < n_ops; o++) cs[o][r2] = st[o][d];
      r2++;
    }
  }
  /* uniform instructions: computed once here, on one element */
  finst *in = p.ins;
  for (int i = 0; i < p.n; i++) { /* bf16 -> bf16 unary ops of the generic loop: tables (eval_double) */
    finst *I = &in[i];
    if (I->kind < IR_NUM_OPS && I->dt == IR_DT_BF16 && !I->f32 && ir_op_kind_of((ir_op)I->kind) == IR_OPK_UNARY &&
        I->kind != IR_OP_CAST && I->kind != IR_OP_DROPOUT && in[I->arg[0]].dt == IR_DT_BF16 && !in[I->arg[0]].f32)
      I->lut = bf16_lut((ir_op)I->kind);
  }
  bool any_uniform = false;
  for (int i = 0; i < p.n; i++) {
    finst *I = &in[i];
    if (I->kind == FI_LOAD) I->uniform = rt_numel(&ops[I->operand]->type) == 1;
    else if (I->kind == FI_CONST) I->uniform = true;
    else {
      int na = I->kind == IR_OP_WHERE || I->kind == IR_OP_DROPOUT ? 3 : ir_op_kind_of((ir_op)I->kind) == IR_OPK_BINARY ? 2 : 1;
      I->uniform = true;
      for (int a = 0; a < na; a++) I->uniform &= in[I->arg[a]].uniform;
    }
    any_uniform |= I->uniform;
  }
  bool uniform_root = false, load_root = false;
  for (int r = 0; r < p.n_roots; r++) uniform_root |= in[p.roots[r]].uniform, load_root |= in[p.roots[r]].kind == FI_LOAD;
  if (uniform_root) { /* a result computed from scalars alone: keep the plain loop */
    for (int i = 0; i < p.n; i++) in[i].uniform = false;
    any_uniform = false;
  }
  /* Results written straight into their outputs (several results): an f32
   * result computed by an f32 instruction, the same root for no other
   * result, with no instruction after it loading from the output's buffer
   * (the executor may have given it an operand's buffer) and no result that
   * is a plain load (whose register may point into such a buffer). */
  p.direct = 0;
  for (int r = 0; p.n_roots > 1 && !load_root && r < p.n_roots; r++) {
    int ri = p.roots[r];
    bool ok = in[ri].f32 && !in[ri].uniform && outs[r]->type.dtype == IR_DT_F32;
    for (int q = 0; ok && q < p.n_roots; q++) ok = q == r || p.roots[q] != ri;
    for (int i = ri + 1; ok && i < p.n; i++) ok = !(in[i].kind == FI_LOAD && ops[in[i].operand]->data == outs[r]->data);
    if (ok) p.direct |= 1u << r;
  }
  float *ufs = NULL;
  double *uds = NULL;
  if (any_uniform) {
    ufs = scratch_zero((size_t)(p.n) * sizeof *ufs);
    uds = scratch_zero((size_t)(p.n) * sizeof *uds);
    regs u = {.fv = scratch_zero((size_t)(p.n) * sizeof *u.fv), .dv = scratch_zero((size_t)(p.n) * sizeof *u.dv),
              .fs = rt_scratch_push((size_t)p.n * sizeof(float)), .ds = rt_scratch_push((size_t)p.n * sizeof(double)), .w = 1};
    leaf_pos *lp0 = scratch_zero((size_t)(n_ops) * sizeof *lp0); /* offset 0, step 0 */
    bool ok = ufs && uds && u.fv && u.dv && u.fs && u.ds && lp0;
    for (int i = 0; ok && i < p.n; i++) {
      if (!in[i].uniform) continue;
      if (in[i].kind == FI_LOAD) eval_load(&p, in, i, &u, lp0, 1);
      else if (in[i].f32) eval_f32(in, i, &u, 1);
      else eval_double(in, i, &u, 1);
      if (in[i].f32) ufs[i] = u.fv[i][0];
      else uds[i] = u.dv[i][0];
    }
    if (!ok) {
      rt_kerr(k, "out of memory");
      return -1;
    }
  }
  int64_t inner = r2 ? cd[r2 - 1] : 1;
  int64_t total = rt_numel(&out->type);
  int64_t rows = inner ? total / inner : 0;
  int64_t nch = (inner + CHUNK - 1) / CHUNK;
  int rw = (int)(inner < CHUNK ? (inner > 0 ? inner : 1) : CHUNK); /* registers no wider than a row */
  int64_t units = rows * nch;
  int ni = p.n;
  bool oom = false;
  if (count) *count = 0; /* {nonfinite}: the results of count_mask counted as stored */
#pragma omp parallel if (total > RT_PAR_MIN && units > 1)
  {
    int64_t counted = 0;
    size_t thread_mark = rt_scratch_mark();
    regs r = {.fv = scratch_zero((size_t)(ni) * sizeof *r.fv), .dv = scratch_zero((size_t)(ni) * sizeof *r.dv),
              .fs = rt_scratch_push((size_t)ni * (size_t)rw * sizeof(float)), .ds = rt_scratch_push((size_t)ni * (size_t)rw * sizeof(double)),
              .w = rw};
    leaf_pos *lp = rt_scratch_push((size_t)n_ops * sizeof *lp);
    bool ok = r.fv && r.dv && r.fs && r.ds && lp;
    if (!ok) {
#pragma omp atomic write
      oom = true;
    }
    for (int i = 0; ok && i < ni; i++) { /* uniform values, splatted once */
      if (!in[i].uniform) continue;
      if (in[i].f32) {
        float *z = r.fs + (size_t)i * (size_t)rw;
        for (int j = 0; j < rw; j++) z[j] = ufs[i];
        r.fv[i] = z;
      } else {
        double *z = r.ds + (size_t)i * (size_t)rw;
        for (int j = 0; j < rw; j++) z[j] = uds[i];
        r.dv[i] = z;
      }
    }
#pragma omp for schedule(static)
    for (int64_t u = 0; u < units; u++) {
      if (!ok) continue;
      int64_t row = u / nch, j0 = (u % nch) * CHUNK;
      int n = (int)(inner - j0 < CHUNK ? inner - j0 : CHUNK);
      for (int o = 0; o < n_ops; o++) lp[o].off = 0;
      int64_t rem = row;
      for (int d = r2 - 2; d >= 0; d--) {
        int64_t i = rem % cd[d];
        rem /= cd[d];
        for (int o = 0; o < n_ops; o++) lp[o].off += i * cs[o][d];
      }
      for (int o = 0; o < n_ops; o++) {
        lp[o].step = r2 ? cs[o][r2 - 1] : 0;
        lp[o].off += j0 * lp[o].step;
      }
      eval_chunk(&p, &r, lp, n, outs, row * inner + j0);
      for (int q = 0; count_mask && q < n_outs; q++) /* the chunk just stored, still in cache */
        if (count_mask >> q & 1) counted += rt_count_nonfinite_range(outs[q], row * inner + j0, n);
    }
    if (count) {
#pragma omp atomic
      *count += counted;
    }
    rt_scratch_pop(thread_mark);
  }
  if (oom) {
    rt_kerr(k, "out of memory evaluating %s %%%s", ir_op_name(k->node->op), rt_value_name(k->node->out[0]));
    return -1;
  }
  return 0;
}

/* fused_run_in_scratch with everything it asks for from the scratch stack,
 * given back when it returns. */
static int fused_run(const rt_kctx *k, const ir_expr *expr, const rt_tensor *const *ops, int n_ops,
                     rt_tensor *const *outs, int n_outs, unsigned count_mask, int64_t *count) {
  size_t mark = rt_scratch_mark();
  int rc = fused_run_in_scratch(k, expr, ops, n_ops, outs, n_outs, count_mask, count);
  rt_scratch_pop(mark);
  return rc;
}

static const ir_expr *expr_of(const rt_kctx *k) {
  const ir_attr *a = ir_node_attr(k->node, "expr");
  if (!a || a->kind != IR_ATTR_STR || !a->expr) {
    rt_kerr(k, "%s %%%s: missing or malformed 'expr'", ir_op_name(k->node->op), rt_value_name(k->node->out[0]));
    return NULL;
  }
  return a->expr;
}

int rt_kern_fused(const rt_kctx *k) {
  const ir_expr *expr = expr_of(k);
  if (!expr) return -1;
  /* {nonfinite = [r...]}: the last result counts those results' Inf / NaN
   * elements, chunk by chunk as they are stored (fuse-elementwise folds
   * the trainer's count into the pass that writes the new parameters) */
  const ir_attr *nf = ir_node_attr(k->node, "nonfinite");
  int n_res = ir_fused_results(k->node);
  if (n_res < 1 || k->node->n_out > IR_FUSED_MAX_RESULTS) {
    rt_kerr(k, "fused: %d results (1 to %d)", k->node->n_out, IR_FUSED_MAX_RESULTS);
    return -1;
  }
  unsigned mask = 0;
  for (int i = 0; nf && nf->kind == IR_ATTR_INTS && i < nf->n; i++)
    if (nf->ints[i] >= 0 && nf->ints[i] < n_res) mask |= 1u << nf->ints[i];
  if (!nf && rt_kern_fused_cast(k, expr)) return 0; /* counting: the chunked loop counts */
  return fused_run(k, expr, k->in, k->node->n_in, k->out, n_res, mask, nf ? (int64_t *)k->out[n_res]->data : NULL);
}

/* matmul into the result (the plain matmul kernel: same product bit for
 * bit), then the epilogue in place: $0 is the product, $1... the extras. */
int rt_kern_fused_matmul(const rt_kctx *k) {
  const ir_expr *expr = expr_of(k);
  if (!expr) return -1;
  int n = k->node->n_in;
  if (n < 2) {
    rt_kerr(k, "fused_matmul %%%s: needs at least 2 operands", rt_value_name(k->node->out[0]));
    return -1;
  }
  rt_kctx mk = *k; /* in[0], in[1] -> out[0] */
  if (rt_kern_matmul(&mk) != 0) return -1;
  const rt_tensor *ops[FUSED_MAX_OPERANDS + 1];
  if (n - 1 > FUSED_MAX_OPERANDS) {
    rt_kerr(k, "fused_matmul %%%s: more than %d operands", rt_value_name(k->node->out[0]), FUSED_MAX_OPERANDS);
    return -1;
  }
  ops[0] = k->out[0];
  for (int i = 2; i < n; i++) ops[i - 1] = k->in[i];
  return fused_run(k, expr, ops, n - 1, k->out, 1, 0, NULL);
}

/* s = x + r, y = layernorm(s) row by row; the arithmetic and its order are
 * those of rt_kern_binary followed by rt_kern_layernorm (kern_reduce.c). */
int rt_kern_add_layernorm(const rt_kctx *k) {
  const rt_tensor *x = k->in[0], *res = k->in[1], *gamma = k->in[2], *beta = k->in[3];
  rt_tensor *s = k->out[0], *y = k->out[1];
  double eps = ir_node_attr_float(k->node, "eps", 1e-5);
  int64_t D = x->type.rank ? x->type.dims[x->type.rank - 1] : 1;
  int64_t rows = D ? rt_numel(&x->type) / D : 0;
  if (!ir_type_equal(&x->type, &res->type) || !ir_type_equal(&x->type, &s->type) ||
      rt_numel(&gamma->type) != D || rt_numel(&beta->type) != D) {
    rt_kerr(k, "add_layernorm %%%s: operand shapes do not match", rt_value_name(k->node->out[0]));
    return -1;
  }
  ir_dtype xdt = x->type.dtype;
  bool f32 = xdt == IR_DT_F32;
#pragma omp parallel for schedule(static) if (rows * D > RT_PAR_MIN && rows > 1)
  for (int64_t r = 0; r < rows; r++) {
    int64_t base = r * D;
    if (f32) {
      const float *a = (const float *)x->data + base, *b = (const float *)res->data + base;
      float *sr = (float *)s->data + base;
      for (int64_t j = 0; j < D; j++) sr[j] = a[j] + b[j];
    } else {
      for (int64_t j = 0; j < D; j++)
        rt_store(xdt, s->data, base + j,
                 ir_eval_binary(IR_OP_ADD, rt_load(xdt, x->data, base + j), rt_load(xdt, res->data, base + j)));
    }
    rt_layernorm_row(xdt, s->data, base, D, eps, gamma, beta, y);
  }
  return 0;
}
