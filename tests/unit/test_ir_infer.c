/* tests/unit/test_ir_infer.c — shape/dtype inference.
 * First a loop over EVERY op in ops.def: each must have a valid case here
 * (valid_case's switch has no default, so a new op fails the build, and the
 * loop fails if a case is left empty) and ir_infer must give the expected
 * result types. Then error cases, checked against their exact messages. */
#include <stdarg.h>
#include <string.h>

#include "check.h"
#include "testgraph.h"
#include "ir.h"

/* T(dtype, rank, dims...) */
#define F32(...) T(IR_DT_F32, __VA_ARGS__)

typedef struct {
  ir_type in[8];
  int n_in;
  ir_attr attrs[6];
  int n_attrs;
  ir_type out[5]; /* nullary: out[0] is the given type */
  ir_type want[5];
  int n_want;
} tcase;

static const int64_t perm10[] = {1, 0}, shape32[] = {3, 2}, shape423[] = {4, 2, 3}, sizes13[] = {1, 3},
                     axes1[] = {1};

/* Fills a valid case for op; returns 0 if there is none. */
static int valid_case(ir_op op, tcase *c) {
  memset(c, 0, sizeof *c);
  ir_type x23 = F32(2, D(2), D(3));
  c->n_want = 1;
  switch (op) {
  case IR_OP_CONST:
    c->attrs[c->n_attrs++] = ir_attr_float("value", 2.0);
    c->out[0] = c->want[0] = T(IR_DT_F64, 0);
    return 1;
  case IR_OP_IOTA:
    c->attrs[c->n_attrs++] = ir_attr_int("axis", 1);
    c->out[0] = c->want[0] = T(IR_DT_I32, 2, D(2), D(5));
    return 1;
  case IR_OP_NOT:
    c->in[c->n_in++] = T(IR_DT_BOOL, 1, D(4));
    c->want[0] = T(IR_DT_BOOL, 1, D(4));
    return 1;
  case IR_OP_CAST:
    c->in[c->n_in++] = x23;
    c->attrs[c->n_attrs++] = ir_attr_dtype("to", IR_DT_BF16);
    c->want[0] = T(IR_DT_BF16, 2, D(2), D(3));
    return 1;
  case IR_OP_EQ: case IR_OP_NE: case IR_OP_LT: case IR_OP_LE: case IR_OP_GT: case IR_OP_GE:
    c->in[c->n_in++] = T(IR_DT_I32, 1, D(3));
    c->in[c->n_in++] = T(IR_DT_I32, 2, D(2), D(1));
    c->want[0] = T(IR_DT_BOOL, 2, D(2), D(3));
    return 1;
  case IR_OP_AND: case IR_OP_OR:
    c->in[c->n_in++] = T(IR_DT_BOOL, 0);
    c->in[c->n_in++] = T(IR_DT_BOOL, 1, D(5));
    c->want[0] = T(IR_DT_BOOL, 1, D(5));
    return 1;
  case IR_OP_WHERE:
    c->in[c->n_in++] = T(IR_DT_BOOL, 2, D(2), D(1));
    c->in[c->n_in++] = F32(1, D(3));
    c->in[c->n_in++] = F32(0);
    c->want[0] = x23;
    return 1;
  case IR_OP_MATMUL:
    c->in[c->n_in++] = F32(3, D(5), D(2), D(3));
    c->in[c->n_in++] = F32(2, D(3), D(4));
    c->want[0] = F32(3, D(5), D(2), D(4));
    return 1;
  case IR_OP_TRANSPOSE:
    c->in[c->n_in++] = x23;
    c->attrs[c->n_attrs++] = ir_attr_ints("perm", perm10, 2);
    c->want[0] = F32(2, D(3), D(2));
    return 1;
  case IR_OP_RESHAPE:
    c->in[c->n_in++] = x23;
    c->attrs[c->n_attrs++] = ir_attr_ints("shape", shape32, 2);
    c->want[0] = F32(2, D(3), D(2));
    return 1;
  case IR_OP_BROADCAST:
    c->in[c->n_in++] = F32(2, D(2), D(1));
    c->attrs[c->n_attrs++] = ir_attr_ints("shape", shape423, 3);
    c->want[0] = F32(3, D(4), D(2), D(3));
    return 1;
  case IR_OP_SLICE:
    c->in[c->n_in++] = F32(2, D(2), D(10));
    c->attrs[c->n_attrs++] = ir_attr_int("axis", 1);
    c->attrs[c->n_attrs++] = ir_attr_int("start", 1);
    c->attrs[c->n_attrs++] = ir_attr_int("end", 9);
    c->attrs[c->n_attrs++] = ir_attr_int("step", 3);
    c->want[0] = F32(2, D(2), D(3)); /* ceil(8 / 3) */
    return 1;
  case IR_OP_CONCAT:
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = F32(2, D(5), D(3));
    c->in[c->n_in++] = F32(2, D(1), D(3));
    c->attrs[c->n_attrs++] = ir_attr_int("axis", 0);
    c->want[0] = F32(2, D(8), D(3));
    return 1;
  case IR_OP_SPLIT:
    c->in[c->n_in++] = F32(2, D(2), D(4));
    c->attrs[c->n_attrs++] = ir_attr_int("axis", 1);
    c->attrs[c->n_attrs++] = ir_attr_ints("sizes", sizes13, 2);
    c->want[0] = F32(2, D(2), D(1));
    c->want[1] = F32(2, D(2), D(3));
    c->n_want = 2;
    return 1;
  case IR_OP_REDUCE_SUM: case IR_OP_REDUCE_MEAN: case IR_OP_REDUCE_MAX:
    c->in[c->n_in++] = F32(3, D(2), D(3), D(4));
    c->attrs[c->n_attrs++] = ir_attr_ints("axes", axes1, 1);
    c->attrs[c->n_attrs++] = ir_attr_int("keepdims", 0);
    c->want[0] = F32(2, D(2), D(4));
    return 1;
  case IR_OP_SOFTMAX: case IR_OP_LOG_SOFTMAX:
    c->in[c->n_in++] = x23;
    c->attrs[c->n_attrs++] = ir_attr_int("axis", 1);
    c->want[0] = x23;
    return 1;
  case IR_OP_LAYERNORM:
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = F32(1, D(3));
    c->in[c->n_in++] = F32(1, D(3));
    c->attrs[c->n_attrs++] = ir_attr_float("eps", 1e-5);
    c->want[0] = x23;
    return 1;
  case IR_OP_RMSNORM:
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = F32(1, D(3));
    c->attrs[c->n_attrs++] = ir_attr_float("eps", 1e-6);
    c->want[0] = x23;
    return 1;
  case IR_OP_ARGMAX:
    c->in[c->n_in++] = F32(3, D(2), D(7), D(5));
    c->attrs[c->n_attrs++] = ir_attr_int("axis", 1);
    c->want[0] = T(IR_DT_I32, 2, D(2), D(5));
    return 1;
  case IR_OP_COUNT_NONFINITE:
    c->in[c->n_in++] = x23;
    c->want[0] = T(IR_DT_I64, 0);
    return 1;
  case IR_OP_SUM_SQUARES: /* several tensors of any float types and shapes */
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = T(IR_DT_BF16, 1, D(5));
    c->in[c->n_in++] = T(IR_DT_F64, 0);
    c->want[0] = T(IR_DT_F64, 0);
    return 1;
  case IR_OP_EMBEDDING:
    c->in[c->n_in++] = F32(2, D(100), D(16));
    c->in[c->n_in++] = T(IR_DT_I32, 2, D(2), D(7));
    c->want[0] = F32(3, D(2), D(7), D(16));
    return 1;
  case IR_OP_CROSS_ENTROPY:
    c->in[c->n_in++] = F32(3, D(2), D(7), D(100));
    c->in[c->n_in++] = T(IR_DT_I64, 2, D(2), D(7));
    c->want[0] = F32(0);
    return 1;
  case IR_OP_CAUSAL_MASK:
    c->in[c->n_in++] = F32(3, D(4), D(5), D(5));
    c->want[0] = F32(3, D(4), D(5), D(5));
    return 1;
  case IR_OP_DROPOUT: { /* the training form: x, key, one position per dim */
    static const int64_t strides[2] = {3, 1};
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = T(IR_DT_I64, 0);
    c->in[c->n_in++] = T(IR_DT_I64, 2, D(2), D(1));
    c->in[c->n_in++] = T(IR_DT_I64, 2, D(1), D(3));
    c->attrs[c->n_attrs++] = ir_attr_float("p", 0.1);
    c->attrs[c->n_attrs++] = ir_attr_int("stream", 0);
    c->attrs[c->n_attrs++] = ir_attr_ints("strides", strides, 2);
    c->want[0] = x23;
    return 1;
  }
  case IR_OP_EINSUM:
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = F32(2, D(3), D(4));
    c->attrs[c->n_attrs++] = ir_attr_str("eq", "ij,jk->ik");
    c->want[0] = F32(2, D(2), D(4));
    return 1;
  case IR_OP_GRAD:
    c->in[c->n_in++] = F32(0);
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = F32(1, D(4));
    c->want[0] = x23;
    c->want[1] = F32(1, D(4));
    c->n_want = 2;
    return 1;
  case IR_OP_SIGN:
    c->in[c->n_in++] = T(IR_DT_I32, 1, D(4));
    c->want[0] = T(IR_DT_I32, 1, D(4));
    return 1;
  case IR_OP_UNSLICE:
    c->in[c->n_in++] = F32(2, D(2), D(3));
    c->attrs[c->n_attrs++] = ir_attr_int("axis", 1);
    c->attrs[c->n_attrs++] = ir_attr_int("start", 1);
    c->attrs[c->n_attrs++] = ir_attr_int("end", 9);
    c->attrs[c->n_attrs++] = ir_attr_int("step", 3);
    c->attrs[c->n_attrs++] = ir_attr_int("size", 10);
    c->want[0] = F32(2, D(2), D(10));
    return 1;
  case IR_OP_EMBEDDING_GRAD:
    c->in[c->n_in++] = T(IR_DT_I32, 2, D(2), D(7));
    c->in[c->n_in++] = F32(3, D(2), D(7), D(16));
    c->attrs[c->n_attrs++] = ir_attr_int("vocab", 100);
    c->want[0] = F32(2, D(100), D(16));
    return 1;
  case IR_OP_CROSS_ENTROPY_GRAD:
    c->in[c->n_in++] = F32(3, D(2), D(7), D(100));
    c->in[c->n_in++] = T(IR_DT_I64, 2, D(2), D(7));
    c->in[c->n_in++] = F32(0);
    c->want[0] = F32(3, D(2), D(7), D(100));
    return 1;
  case IR_OP_ATTENTION: case IR_OP_ATTENTION_GRAD: {
    /* q[2,3,5,4], k[2,3,7,4], v[2,3,7,6] -> o[2,3,5,6], lse f32[2,3,5] */
    ir_type q = F32(4, D(2), D(3), D(5), D(4)), k = F32(4, D(2), D(3), D(7), D(4)), v = F32(4, D(2), D(3), D(7), D(6));
    ir_type o = F32(4, D(2), D(3), D(5), D(6)), lse = F32(3, D(2), D(3), D(5));
    c->in[c->n_in++] = q;
    c->in[c->n_in++] = k;
    c->in[c->n_in++] = v;
    c->attrs[c->n_attrs++] = ir_attr_float("scale", 0.5);
    c->attrs[c->n_attrs++] = ir_attr_int("causal", 1);
    if (op == IR_OP_ATTENTION) {
      c->want[0] = o;
      c->want[1] = lse;
      c->n_want = 2;
    } else {
      c->in[c->n_in++] = o;
      c->in[c->n_in++] = lse;
      c->in[c->n_in++] = o;
      c->want[0] = q;
      c->want[1] = k;
      c->want[2] = v;
      c->n_want = 3;
    }
    return 1;
  }
  case IR_OP_FUSED: /* gelu(a + bias) with a broadcast bias, cast to f64 */
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = F32(1, D(3));
    c->attrs[c->n_attrs++] = ir_attr_str("expr", "(cast f64 (gelu (add $0 $1)))");
    c->want[0] = T(IR_DT_F64, 2, D(2), D(3));
    return 1;
  case IR_OP_FUSED_MATMUL: /* [2,3] @ [3,4] + bias[4], relu */
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = F32(2, D(3), D(4));
    c->in[c->n_in++] = F32(1, D(4));
    c->attrs[c->n_attrs++] = ir_attr_str("expr", "(relu (add $0 $1))");
    c->want[0] = F32(2, D(2), D(4));
    return 1;
  case IR_OP_ADD_LAYERNORM:
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = F32(1, D(3));
    c->in[c->n_in++] = F32(1, D(3));
    c->attrs[c->n_attrs++] = ir_attr_float("eps", 1e-5);
    c->want[0] = x23;
    c->want[1] = x23;
    c->n_want = 2;
    return 1;
  case IR_OP_LAYERNORM_GRAD: case IR_OP_RMSNORM_GRAD: /* (x, gamma, dy) -> (dx, dgamma[, dbeta]) */
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = F32(1, D(3));
    c->in[c->n_in++] = x23;
    c->attrs[c->n_attrs++] = ir_attr_float("eps", 1e-5);
    c->want[0] = x23;
    c->want[1] = c->want[2] = F32(1, D(3));
    c->n_want = op == IR_OP_LAYERNORM_GRAD ? 3 : 2;
    return 1;
  case IR_OP_LINEAR_CROSS_ENTROPY: /* h[2, 3] w[5, 3] read transposed, chunk 4 > 2 rows */
    c->in[c->n_in++] = x23;
    c->in[c->n_in++] = F32(2, D(5), D(3));
    c->in[c->n_in++] = T(IR_DT_I32, 1, D(2));
    c->in[c->n_in++] = F32(0);
    c->attrs[c->n_attrs++] = ir_attr_int("chunk", 4);
    c->attrs[c->n_attrs++] = ir_attr_int("transpose_b", 1);
    c->want[0] = F32(0);
    c->want[1] = x23;
    c->want[2] = F32(2, D(5), D(3));
    c->want[3] = T(IR_DT_I32, 1, D(2));
    c->want[4] = F32(2, D(2), D(5));
    c->n_want = 5;
    return 1;
  case IR_OP_ALL_REDUCE:
    c->in[c->n_in++] = x23;
    c->attrs[c->n_attrs++] = ir_attr_mesh_axis("axis", IR_AXIS_DP);
    c->attrs[c->n_attrs++] = ir_attr_int("n", 2);
    c->want[0] = x23;
    return 1;
  case IR_OP_ALL_GATHER: case IR_OP_REDUCE_SCATTER: case IR_OP_MESH_SLICE:
    c->in[c->n_in++] = F32(2, D(2), D(6));
    c->attrs[c->n_attrs++] = ir_attr_mesh_axis("axis", IR_AXIS_TP);
    c->attrs[c->n_attrs++] = ir_attr_int("n", 2);
    c->attrs[c->n_attrs++] = ir_attr_int("dim", 1);
    c->want[0] = op == IR_OP_ALL_GATHER ? F32(2, D(2), D(12)) : F32(2, D(2), D(3));
    return 1;
  case IR_OP_ALL_TO_ALL:
    c->in[c->n_in++] = F32(2, D(2), D(6));
    c->attrs[c->n_attrs++] = ir_attr_mesh_axis("axis", IR_AXIS_TP);
    c->attrs[c->n_attrs++] = ir_attr_int("n", 3);
    c->attrs[c->n_attrs++] = ir_attr_int("split_dim", 1);
    c->attrs[c->n_attrs++] = ir_attr_int("concat_dim", 0);
    c->want[0] = F32(2, D(6), D(2));
    return 1;
  case IR_OP_COMM_BROADCAST:
    c->in[c->n_in++] = x23;
    c->attrs[c->n_attrs++] = ir_attr_mesh_axis("axis", IR_AXIS_DP);
    c->attrs[c->n_attrs++] = ir_attr_int("n", 4);
    c->attrs[c->n_attrs++] = ir_attr_int("root", 3);
    c->want[0] = x23;
    return 1;
  case IR_OP_SHARD_HINT:
    c->in[c->n_in++] = x23;
    c->attrs[c->n_attrs++] = ir_attr_str("spec", "dp, tp");
    c->want[0] = x23;
    return 1;
  case IR_OP_SEND: case IR_OP_RECV:
    if (op == IR_OP_SEND) c->in[c->n_in++] = x23;
    else c->out[0] = c->want[0] = x23;
    c->attrs[c->n_attrs++] = ir_attr_mesh_axis("axis", IR_AXIS_PP);
    c->attrs[c->n_attrs++] = ir_attr_int("n", 2);
    c->attrs[c->n_attrs++] = ir_attr_int("peer", 1);
    c->n_want = op == IR_OP_SEND ? 0 : 1;
    return 1;
  default: /* an arithmetic elementwise op (its kind and operand facts say so): no case of its own */
    if (ir_op_kind_of(op) == IR_OPK_UNARY && (ir_op_flags(op) & (IR_OPF_FLOAT | IR_OPF_NUMERIC))) {
      c->in[c->n_in++] = x23;
      c->want[0] = x23;
      return 1;
    }
    if (ir_op_kind_of(op) == IR_OPK_BINARY && (ir_op_flags(op) & (IR_OPF_FLOAT | IR_OPF_NUMERIC))) {
      c->in[c->n_in++] = F32(3, D(4), D(1), D(3));
      c->in[c->n_in++] = x23;
      c->want[0] = F32(3, D(4), D(2), D(3));
      return 1;
    }
    break;
  }
  return 0;
}

static void test_every_op(void) {
  for (int op = 0; op < IR_NUM_OPS; op++) {
    tcase c;
    if (!valid_case((ir_op)op, &c)) {
      fprintf(stderr, "no valid inference case for op %s\n", ir_op_name((ir_op)op));
      CHECK(0);
      continue;
    }
    char err[256] = "";
    int n_out = -1;
    int r = ir_infer((ir_op)op, c.in, c.n_in, c.attrs, c.n_attrs, c.out, &n_out, err, sizeof err);
    if (r != 0) fprintf(stderr, "op %s: %s\n", ir_op_name((ir_op)op), err);
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(n_out, c.n_want);
    for (int i = 0; i < c.n_want && i < n_out; i++) {
      char a[128], b[128];
      CHECK_STR(ir_type_str(&c.out[i], a, sizeof a), ir_type_str(&c.want[i], b, sizeof b));
    }
    /* the arity is checked for every fixed-arity op */
    int want_in = ir_op_num_inputs((ir_op)op);
    if (want_in >= 0) {
      CHECK_EQ_INT(ir_infer((ir_op)op, c.in, want_in + 1 > 8 ? 8 : want_in + 1, c.attrs, c.n_attrs, c.out, &n_out,
                            err, sizeof err),
                   -1);
    }
  }
}

/* Runs ir_infer and expects the error msg (NULL: expects success and returns the type in *res). */
static char last_err[512];
static int infer(ir_op op, const ir_type *in, int n_in, const ir_attr *attrs, int n_attrs, ir_type *res) {
  ir_type out[8] = {{0}};
  if (res) out[0] = *res;
  int n_out = 0;
  last_err[0] = 0;
  int r = ir_infer(op, in, n_in, attrs, n_attrs, out, &n_out, last_err, sizeof last_err);
  if (r == 0 && res) *res = out[0];
  return r;
}
#define EXPECT_ERR(msg, op, in, n_in, attrs, n_attrs)                 \
  do {                                                                \
    CHECK_EQ_INT(infer(op, in, n_in, attrs, n_attrs, NULL), -1);      \
    CHECK_STR(last_err, msg);                                         \
  } while (0)
#define TYPE_STR(t) ir_type_str(&(t), tbuf, sizeof tbuf)
static char tbuf[256];

static void test_elementwise_errors(void) {
  ir_type in[3];
  in[0] = F32(2, D(2), D(3));
  in[1] = T(IR_DT_F64, 2, D(2), D(3));
  EXPECT_ERR("dtype mismatch in add: f32 and f64", IR_OP_ADD, in, 2, NULL, 0);
  in[1] = F32(1, D(4));
  EXPECT_ERR("cannot broadcast f32[2, 3] with f32[4] in add", IR_OP_ADD, in, 2, NULL, 0);
  ir_type bo;
  CHECK_EQ_INT(ir_broadcast_shapes(&in[0], &in[1], &bo, last_err, sizeof last_err), -1);
  CHECK_STR(last_err, "cannot broadcast f32[2, 3] with f32[4]");
  in[1] = F32(3, D(7), D(1), D(1));
  CHECK_EQ_INT(ir_broadcast_shapes(&in[0], &in[1], &bo, last_err, sizeof last_err), 0);
  CHECK_STR(TYPE_STR(bo), "f32[7, 2, 3]");
  EXPECT_ERR("add takes 2 operands, got 1", IR_OP_ADD, in, 1, NULL, 0);
  EXPECT_ERR("exp takes 1 operand, got 2", IR_OP_EXP, in, 2, NULL, 0);

  in[0] = T(IR_DT_I32, 1, D(3));
  EXPECT_ERR("exp needs a floating-point operand, got i32", IR_OP_EXP, in, 1, NULL, 0);
  EXPECT_ERR("gelu needs a floating-point operand, got i32", IR_OP_GELU, in, 1, NULL, 0);
  ir_type r = {0};
  CHECK_EQ_INT(infer(IR_OP_NEG, in, 1, NULL, 0, &r), 0); /* neg works on ints */
  CHECK_STR(TYPE_STR(r), "i32[3]");
  in[0] = T(IR_DT_BOOL, 1, D(3));
  EXPECT_ERR("neg needs a numeric operand, got bool", IR_OP_NEG, in, 1, NULL, 0);
  in[1] = T(IR_DT_BOOL, 1, D(3));
  EXPECT_ERR("add needs numeric operands, got bool", IR_OP_ADD, in, 2, NULL, 0);
  CHECK_EQ_INT(infer(IR_OP_EQ, in, 2, NULL, 0, &r), 0); /* bool == bool is fine */
  in[0] = F32(1, D(3));
  in[1] = F32(1, D(3));
  EXPECT_ERR("and needs bool operands, got f32", IR_OP_AND, in, 2, NULL, 0);
  EXPECT_ERR("not needs a bool operand, got f32", IR_OP_NOT, in, 1, NULL, 0);
  CHECK_EQ_INT(infer(IR_OP_LT, in, 2, NULL, 0, &r), 0);
  CHECK_STR(TYPE_STR(r), "bool[3]");

  /* where */
  in[0] = F32(1, D(3));
  in[1] = F32(1, D(3));
  in[2] = F32(1, D(3));
  EXPECT_ERR("where needs a bool condition, got f32", IR_OP_WHERE, in, 3, NULL, 0);
  in[0] = T(IR_DT_BOOL, 1, D(3));
  in[2] = T(IR_DT_F16, 1, D(3));
  EXPECT_ERR("dtype mismatch in where: f32 and f16", IR_OP_WHERE, in, 3, NULL, 0);
  in[2] = F32(1, D(3));
  in[0] = T(IR_DT_BOOL, 1, D(2));
  EXPECT_ERR("cannot broadcast bool[2] with f32[3] in where", IR_OP_WHERE, in, 3, NULL, 0);

  /* cast */
  in[0] = F32(1, D(3));
  EXPECT_ERR("missing attribute 'to' in cast", IR_OP_CAST, in, 1, NULL, 0);
  ir_attr a = ir_attr_int("to", 1);
  EXPECT_ERR("attribute 'to' of cast must be a dtype", IR_OP_CAST, in, 1, &a, 1);
  a = ir_attr_dtype("to", (ir_dtype)99);
  EXPECT_ERR("attribute 'to' of cast is not a valid dtype", IR_OP_CAST, in, 1, &a, 1);
  a = ir_attr_dtype("to", IR_DT_BOOL);
  CHECK_EQ_INT(infer(IR_OP_CAST, in, 1, &a, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "bool[3]");
}

static void test_sources(void) {
  ir_type r = F32(2, D(2), D(3));
  EXPECT_ERR("missing attribute 'value' in const", IR_OP_CONST, NULL, 0, NULL, 0);
  ir_attr a = ir_attr_int("value", 1);
  CHECK_EQ_INT(infer(IR_OP_CONST, NULL, 0, &a, 1, &r), -1);
  CHECK_STR(last_err, "attribute 'value' of const must be a float");
  a = ir_attr_float("value", -INFINITY);
  CHECK_EQ_INT(infer(IR_OP_CONST, NULL, 0, &a, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[2, 3]");
  r = F32(2, D(-1), D(3));
  CHECK_EQ_INT(infer(IR_OP_CONST, NULL, 0, &a, 1, &r), -1);
  CHECK_STR(last_err, "result 0 of const has a negative dimension: f32[-1, 3]");
  r = F32(3, D(1) << 20, D(1) << 20, D(1) << 20);
  CHECK_EQ_INT(infer(IR_OP_CONST, NULL, 0, &a, 1, &r), -1);
  CHECK_STR(last_err, "tensor f32[1048576, 1048576, 1048576] has too many elements");
  r = F32(0);
  r.rank = 9;
  CHECK_EQ_INT(infer(IR_OP_CONST, NULL, 0, &a, 1, &r), -1);
  CHECK_STR(last_err, "result 0 of const has rank 9 (the maximum is 8)");
  a = ir_attr_int("axis", 2);
  r = T(IR_DT_I64, 2, D(2), D(3));
  CHECK_EQ_INT(infer(IR_OP_IOTA, NULL, 0, &a, 1, &r), -1);
  CHECK_STR(last_err, "axis 2 out of range for i64[2, 3] in iota");
  r = T(IR_DT_BOOL, 1, D(3));
  a = ir_attr_int("axis", 0);
  CHECK_EQ_INT(infer(IR_OP_IOTA, NULL, 0, &a, 1, &r), -1);
  CHECK_STR(last_err, "iota needs a numeric type, got bool[3]");
  ir_type x = F32(0);
  EXPECT_ERR("const takes 0 operands, got 1", IR_OP_CONST, &x, 1, NULL, 0);
}

static void test_matmul(void) {
  ir_type in[2] = {F32(2, D(2), D(3)), F32(2, D(4), D(5))};
  EXPECT_ERR("shape mismatch in matmul: f32[2, 3] @ f32[4, 5]: inner dimensions 3 and 4 differ", IR_OP_MATMUL, in,
             2, NULL, 0);
  in[1] = F32(1, D(3));
  EXPECT_ERR("matmul needs operands of rank >= 2, got f32[2, 3] @ f32[3]", IR_OP_MATMUL, in, 2, NULL, 0);
  in[0] = F32(3, D(2), D(3), D(4));
  in[1] = F32(3, D(5), D(4), D(2));
  EXPECT_ERR("shape mismatch in matmul: f32[2, 3, 4] @ f32[5, 4, 2]: batch dimensions do not broadcast",
             IR_OP_MATMUL, in, 2, NULL, 0);
  in[0] = T(IR_DT_I32, 2, D(2), D(3));
  in[1] = T(IR_DT_I32, 2, D(3), D(2));
  EXPECT_ERR("matmul needs floating-point operands, got i32", IR_OP_MATMUL, in, 2, NULL, 0);
  in[1] = F32(2, D(3), D(2));
  EXPECT_ERR("dtype mismatch in matmul: i32 and f32", IR_OP_MATMUL, in, 2, NULL, 0);
  in[0] = F32(2, D(1) << 24, D(1));
  in[1] = F32(2, D(1), D(1) << 25);
  EXPECT_ERR("tensor f32[16777216, 33554432] has too many elements", IR_OP_MATMUL, in, 2, NULL, 0);
  ir_type r;
  in[0] = F32(4, D(5), D(1), D(2), D(3));
  in[1] = F32(3, D(7), D(3), D(4));
  CHECK_EQ_INT(infer(IR_OP_MATMUL, in, 2, NULL, 0, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[5, 7, 2, 4]");
}

/* transpose_a / transpose_b: a[..., K, M] and b[..., N, K] read transposed */
static void test_matmul_transposed(void) {
  ir_type in[3], r;
  ir_attr ta = ir_attr_int("transpose_a", 1), tb = ir_attr_int("transpose_b", 1), both[2] = {ta, tb};
  in[0] = F32(2, D(3), D(2)); /* read as [2, 3] */
  in[1] = F32(2, D(3), D(4));
  CHECK_EQ_INT(infer(IR_OP_MATMUL, in, 2, &ta, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[2, 4]");
  in[0] = F32(2, D(2), D(3));
  in[1] = F32(2, D(4), D(3)); /* read as [3, 4] */
  CHECK_EQ_INT(infer(IR_OP_MATMUL, in, 2, &tb, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[2, 4]");
  in[0] = F32(4, D(5), D(1), D(3), D(2)); /* [5, 1, 2, 3] */
  in[1] = F32(3, D(7), D(4), D(3));       /* [7, 3, 4] */
  CHECK_EQ_INT(infer(IR_OP_MATMUL, in, 2, both, 2, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[5, 7, 2, 4]");
  /* absent and 0 read as they are */
  ir_attr zero[2] = {ir_attr_int("transpose_a", 0), ir_attr_int("transpose_b", 0)};
  in[0] = F32(2, D(2), D(3));
  in[1] = F32(2, D(3), D(4));
  CHECK_EQ_INT(infer(IR_OP_MATMUL, in, 2, zero, 2, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[2, 4]");
  /* the inner dims are the ones read */
  EXPECT_ERR("shape mismatch in matmul: f32[2, 3] (transposed) @ f32[3, 4]: inner dimensions 2 and 3 differ",
             IR_OP_MATMUL, in, 2, &ta, 1);
  EXPECT_ERR("shape mismatch in matmul: f32[2, 3] @ f32[3, 4] (transposed): inner dimensions 3 and 4 differ",
             IR_OP_MATMUL, in, 2, &tb, 1);
  ir_attr bad = ir_attr_int("transpose_b", 2);
  EXPECT_ERR("attribute 'transpose_b' of matmul must be 0 or 1, got 2", IR_OP_MATMUL, in, 2, &bad, 1);
  bad = ir_attr_int("transpose_a", -1);
  EXPECT_ERR("attribute 'transpose_a' of matmul must be 0 or 1, got -1", IR_OP_MATMUL, in, 2, &bad, 1);
  bad = ir_attr_float("transpose_a", 1.0);
  EXPECT_ERR("attribute 'transpose_a' of matmul must be an int", IR_OP_MATMUL, in, 2, &bad, 1);
  in[1] = F32(1, D(3));
  EXPECT_ERR("matmul needs operands of rank >= 2, got f32[2, 3] @ f32[3]", IR_OP_MATMUL, in, 2, &tb, 1);
  /* fused_matmul types its product the same way: [3, 2]^T @ [3, 4] + bias[4] */
  ir_attr fm[2] = {ir_attr_str("expr", "(add $0 $1)"), ta};
  in[0] = F32(2, D(3), D(2));
  in[1] = F32(2, D(3), D(4));
  in[2] = F32(1, D(4));
  CHECK_EQ_INT(infer(IR_OP_FUSED_MATMUL, in, 3, fm, 2, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[2, 4]");
  fm[1] = ir_attr_int("transpose_a", 3);
  EXPECT_ERR("attribute 'transpose_a' of fused_matmul must be 0 or 1, got 3", IR_OP_FUSED_MATMUL, in, 3, fm, 2);
}

static void test_layout(void) {
  ir_type x = F32(2, D(2), D(3)), r;
  /* transpose */
  const int64_t p00[] = {0, 0}, p012[] = {0, 1, 2};
  ir_attr a = ir_attr_ints("perm", p00, 2);
  EXPECT_ERR("perm [0, 0] of transpose is not a permutation of the 2 axes of f32[2, 3]", IR_OP_TRANSPOSE, &x, 1, &a, 1);
  a = ir_attr_ints("perm", p012, 3);
  EXPECT_ERR("perm [0, 1, 2] of transpose is not a permutation of the 2 axes of f32[2, 3]", IR_OP_TRANSPOSE, &x, 1,
             &a, 1);
  a = ir_attr_int("perm", 0);
  EXPECT_ERR("attribute 'perm' of transpose must be a list of ints", IR_OP_TRANSPOSE, &x, 1, &a, 1);

  /* reshape */
  const int64_t s42[] = {4, 2}, sneg[] = {-1, 6}, s_huge[] = {D(1) << 30, D(1) << 30}, s9[] = {1, 1, 1, 1, 1, 1, 1, 1, 6};
  a = ir_attr_ints("shape", s42, 2);
  EXPECT_ERR("reshape cannot change the element count: f32[2, 3] (6 elements) to f32[4, 2] (8 elements)",
             IR_OP_RESHAPE, &x, 1, &a, 1);
  a = ir_attr_ints("shape", sneg, 2);
  EXPECT_ERR("shape [-1, 6] of reshape has a negative dimension", IR_OP_RESHAPE, &x, 1, &a, 1);
  a = ir_attr_ints("shape", s_huge, 2);
  EXPECT_ERR("tensor f32[1073741824, 1073741824] has too many elements", IR_OP_RESHAPE, &x, 1, &a, 1);
  a = ir_attr_ints("shape", s9, 9);
  EXPECT_ERR("shape [1, 1, 1, 1, 1, 1, 1, 1, 6] of reshape has rank 9 (the maximum is 8)", IR_OP_RESHAPE, &x, 1, &a, 1);
  a = ir_attr_ints("shape", NULL, 0);
  ir_type one = F32(2, D(1), D(1));
  CHECK_EQ_INT(infer(IR_OP_RESHAPE, &one, 1, &a, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[]");

  /* broadcast */
  const int64_t s3[] = {3}, s43[] = {4, 2, 3};
  a = ir_attr_ints("shape", s3, 1);
  EXPECT_ERR("cannot broadcast f32[2, 3] to f32[3]", IR_OP_BROADCAST, &x, 1, &a, 1);
  a = ir_attr_ints("shape", s43, 3);
  CHECK_EQ_INT(infer(IR_OP_BROADCAST, &x, 1, &a, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[4, 2, 3]");

  /* slice */
  ir_type y = F32(2, D(2), D(10));
  ir_attr sl[4] = {ir_attr_int("axis", 1), ir_attr_int("start", 3), ir_attr_int("end", 12), ir_attr_int("step", 1)};
  EXPECT_ERR("slice of f32[2, 10] on axis 1 needs 0 <= start <= end <= 10, got start 3, end 12", IR_OP_SLICE, &y, 1,
             sl, 4);
  sl[2] = ir_attr_int("end", 2);
  EXPECT_ERR("slice of f32[2, 10] on axis 1 needs 0 <= start <= end <= 10, got start 3, end 2", IR_OP_SLICE, &y, 1,
             sl, 4);
  sl[2] = ir_attr_int("end", 10);
  sl[3] = ir_attr_int("step", 0);
  EXPECT_ERR("slice step must be >= 1, got 0", IR_OP_SLICE, &y, 1, sl, 4);
  CHECK_EQ_INT(infer(IR_OP_SLICE, &y, 1, sl, 3, &r), 0); /* step defaults to 1 */
  CHECK_STR(TYPE_STR(r), "f32[2, 7]");
  sl[3] = ir_attr_int("step", 3);
  CHECK_EQ_INT(infer(IR_OP_SLICE, &y, 1, sl, 4, &r), 0); /* 3, 6, 9 */
  CHECK_STR(TYPE_STR(r), "f32[2, 3]");
  sl[1] = ir_attr_int("start", 10);
  CHECK_EQ_INT(infer(IR_OP_SLICE, &y, 1, sl, 4, &r), 0); /* empty */
  CHECK_STR(TYPE_STR(r), "f32[2, 0]");
  sl[0] = ir_attr_int("axis", -1);
  EXPECT_ERR("axis -1 out of range for f32[2, 10] in slice", IR_OP_SLICE, &y, 1, sl, 4);
  sl[0] = ir_attr_int("axis", 1);
  EXPECT_ERR("missing attribute 'start' in slice", IR_OP_SLICE, &y, 1, sl, 1);

  /* concat */
  ir_type cin[3] = {F32(2, D(2), D(3)), F32(2, D(2), D(4)), F32(1, D(3))};
  ir_attr ax0 = ir_attr_int("axis", 0), ax1 = ir_attr_int("axis", 1);
  EXPECT_ERR("shape mismatch in concat on axis 0: f32[2, 3] and f32[2, 4]", IR_OP_CONCAT, cin, 2, &ax0, 1);
  CHECK_EQ_INT(infer(IR_OP_CONCAT, cin, 2, &ax1, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[2, 7]");
  EXPECT_ERR("concat needs operands of equal rank: f32[2, 4] and f32[3]", IR_OP_CONCAT, cin + 1, 2, &ax0, 1);
  EXPECT_ERR("concat takes at least 1 operand, got 0", IR_OP_CONCAT, cin, 0, &ax0, 1);
  cin[1].dtype = IR_DT_F64;
  EXPECT_ERR("dtype mismatch in concat: f32 and f64", IR_OP_CONCAT, cin, 2, &ax1, 1);

  /* split */
  const int64_t s121[] = {1, 2, 1}, s22[] = {2, 2}, sn[] = {5, -1};
  ir_attr sp[2] = {ir_attr_int("axis", 1), ir_attr_ints("sizes", s121, 3)};
  ir_type z = F32(2, D(3), D(4)), outs[3];
  int n_out = 0;
  CHECK_EQ_INT(ir_infer(IR_OP_SPLIT, &z, 1, sp, 2, outs, &n_out, last_err, sizeof last_err), 0);
  CHECK_EQ_INT(n_out, 3);
  CHECK_STR(TYPE_STR(outs[1]), "f32[3, 2]");
  CHECK_STR(TYPE_STR(outs[2]), "f32[3, 1]");
  sp[1] = ir_attr_ints("sizes", s22, 1);
  EXPECT_ERR("split sizes [2] do not add up to 4, dimension 1 of f32[3, 4]", IR_OP_SPLIT, &z, 1, sp, 2);
  sp[1] = ir_attr_ints("sizes", sn, 2);
  EXPECT_ERR("split sizes [5, -1] do not add up to 4, dimension 1 of f32[3, 4]", IR_OP_SPLIT, &z, 1, sp, 2);
  sp[1] = ir_attr_ints("sizes", NULL, 0);
  EXPECT_ERR("split needs at least one size", IR_OP_SPLIT, &z, 1, sp, 2);
}

static void test_reductions_and_norms(void) {
  ir_type x = F32(3, D(2), D(3), D(4)), r;
  const int64_t a10[] = {1, 0}, a11[] = {1, 1}, a3[] = {3}, a02[] = {0, 2};
  ir_attr at[2] = {ir_attr_ints("axes", a10, 2), ir_attr_int("keepdims", 1)};
  EXPECT_ERR("invalid axes [1, 0] in reduce_sum of f32[2, 3, 4]: need sorted, unique axes in [0, 3)",
             IR_OP_REDUCE_SUM, &x, 1, at, 2);
  at[0] = ir_attr_ints("axes", a11, 2);
  EXPECT_ERR("invalid axes [1, 1] in reduce_max of f32[2, 3, 4]: need sorted, unique axes in [0, 3)",
             IR_OP_REDUCE_MAX, &x, 1, at, 2);
  at[0] = ir_attr_ints("axes", a3, 1);
  EXPECT_ERR("invalid axes [3] in reduce_sum of f32[2, 3, 4]: need sorted, unique axes in [0, 3)", IR_OP_REDUCE_SUM,
             &x, 1, at, 2);
  at[0] = ir_attr_ints("axes", a02, 2);
  CHECK_EQ_INT(infer(IR_OP_REDUCE_MEAN, &x, 1, at, 2, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[1, 3, 1]");
  CHECK_EQ_INT(infer(IR_OP_REDUCE_MEAN, &x, 1, at, 1, &r), 0); /* keepdims defaults to 0 */
  CHECK_STR(TYPE_STR(r), "f32[3]");
  at[1] = ir_attr_int("keepdims", 2);
  EXPECT_ERR("attribute 'keepdims' of reduce_sum must be 0 or 1, got 2", IR_OP_REDUCE_SUM, &x, 1, at, 2);
  EXPECT_ERR("missing attribute 'axes' in reduce_sum", IR_OP_REDUCE_SUM, &x, 1, NULL, 0);
  ir_type xi = T(IR_DT_I32, 1, D(3));
  ir_attr all = ir_attr_ints("axes", a10 + 1, 1);
  CHECK_EQ_INT(infer(IR_OP_REDUCE_SUM, &xi, 1, &all, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "i32[]");
  EXPECT_ERR("reduce_mean needs a floating-point operand, got i32", IR_OP_REDUCE_MEAN, &xi, 1, &all, 1);

  ir_attr ax = ir_attr_int("axis", 3);
  EXPECT_ERR("axis 3 out of range for f32[2, 3, 4] in softmax", IR_OP_SOFTMAX, &x, 1, &ax, 1);
  ax = ir_attr_float("axis", 1);
  EXPECT_ERR("attribute 'axis' of log_softmax must be an int", IR_OP_LOG_SOFTMAX, &x, 1, &ax, 1);
  ir_attr dup[2] = {ir_attr_int("axis", 1), ir_attr_int("axis", 2)};
  EXPECT_ERR("duplicate attribute 'axis' in softmax", IR_OP_SOFTMAX, &x, 1, dup, 2);

  ir_type ln[3] = {x, F32(1, D(4)), F32(1, D(3))};
  ir_attr eps = ir_attr_float("eps", 1e-5);
  EXPECT_ERR("shape mismatch in layernorm: beta f32[3] must be [4], the last dimension of f32[2, 3, 4]",
             IR_OP_LAYERNORM, ln, 3, &eps, 1);
  ln[2] = F32(1, D(4));
  CHECK_EQ_INT(infer(IR_OP_LAYERNORM, ln, 3, &eps, 1, &r), 0);
  EXPECT_ERR("missing attribute 'eps' in layernorm", IR_OP_LAYERNORM, ln, 3, NULL, 0);
  eps = ir_attr_float("eps", -1);
  EXPECT_ERR("attribute 'eps' of rmsnorm must be a finite float >= 0, got -1", IR_OP_RMSNORM, ln, 2, &eps, 1);
  eps = ir_attr_float("eps", 1e-6);
  ln[1] = T(IR_DT_BF16, 1, D(4));
  EXPECT_ERR("dtype mismatch in rmsnorm: f32 and bf16", IR_OP_RMSNORM, ln, 2, &eps, 1);
  ln[1] = F32(2, D(1), D(4));
  EXPECT_ERR("shape mismatch in rmsnorm: gamma f32[1, 4] must be [4], the last dimension of f32[2, 3, 4]",
             IR_OP_RMSNORM, ln, 2, &eps, 1);
  /* the backward ops: x and gamma as the forward's, dy of x's type */
  ir_type lg[3] = {x, F32(1, D(4)), F32(2, D(3), D(4))};
  EXPECT_ERR("layernorm_grad: dy must be f32[2, 3, 4] (x's type), got f32[3, 4]", IR_OP_LAYERNORM_GRAD, lg, 3, &eps, 1);
  lg[2] = x;
  lg[1] = F32(1, D(3));
  EXPECT_ERR("shape mismatch in rmsnorm_grad: gamma f32[3] must be [4], the last dimension of f32[2, 3, 4]",
             IR_OP_RMSNORM_GRAD, lg, 3, &eps, 1);
  lg[1] = F32(1, D(4));
  EXPECT_ERR("missing attribute 'eps' in layernorm_grad", IR_OP_LAYERNORM_GRAD, lg, 3, NULL, 0);
}

static void test_model_ops(void) {
  ir_type in[2] = {F32(2, D(100), D(16)), F32(1, D(3))}, r;
  EXPECT_ERR("embedding ids must be i32 or i64, got f32", IR_OP_EMBEDDING, in, 2, NULL, 0);
  in[0] = F32(1, D(100));
  in[1] = T(IR_DT_I32, 1, D(3));
  EXPECT_ERR("embedding table must have rank 2, got f32[100]", IR_OP_EMBEDDING, in, 2, NULL, 0);
  in[0] = F32(2, D(100), D(16));
  in[1] = T(IR_DT_I64, 8, D(1), D(1), D(1), D(1), D(1), D(1), D(1), D(2));
  EXPECT_ERR("embedding of ids i64[1, 1, 1, 1, 1, 1, 1, 2] would have rank 9 (the maximum is 8)", IR_OP_EMBEDDING, in,
             2, NULL, 0);
  in[1] = T(IR_DT_I64, 0);
  CHECK_EQ_INT(infer(IR_OP_EMBEDDING, in, 2, NULL, 0, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[16]");

  in[0] = F32(3, D(2), D(7), D(100));
  in[1] = T(IR_DT_I32, 1, D(2));
  EXPECT_ERR("shape mismatch in cross_entropy: targets i32[2] must have the shape of logits f32[2, 7, 100] without "
             "the last dimension",
             IR_OP_CROSS_ENTROPY, in, 2, NULL, 0);
  in[1] = F32(2, D(2), D(7));
  EXPECT_ERR("cross_entropy targets must be i32 or i64, got f32", IR_OP_CROSS_ENTROPY, in, 2, NULL, 0);
  in[0] = T(IR_DT_BF16, 1, D(10));
  in[1] = T(IR_DT_I32, 0);
  CHECK_EQ_INT(infer(IR_OP_CROSS_ENTROPY, in, 2, NULL, 0, &r), 0);
  CHECK_STR(TYPE_STR(r), "bf16[]");
  in[0] = T(IR_DT_I32, 2, D(2), D(10));
  in[1] = T(IR_DT_I32, 1, D(2));
  EXPECT_ERR("cross_entropy needs a floating-point operand, got i32", IR_OP_CROSS_ENTROPY, in, 2, NULL, 0);

  in[0] = F32(1, D(5));
  EXPECT_ERR("causal_mask needs an operand of rank >= 2, got f32[5]", IR_OP_CAUSAL_MASK, in, 1, NULL, 0);

  /* dropout: p in (0, 1); the training form's key and positions */
  ir_type dr[3] = {F32(1, D(5)), T(IR_DT_I32, 0), T(IR_DT_I64, 1, D(5))};
  ir_attr p0 = ir_attr_float("p", 0), p1[3] = {ir_attr_float("p", 0.5), ir_attr_int("stream", 0),
                                               ir_attr_ints("strides", (const int64_t[]){1}, 1)};
  EXPECT_ERR("attribute 'p' of dropout must be in (0, 1), got 0", IR_OP_DROPOUT, dr, 1, &p0, 1);
  CHECK_EQ_INT(infer(IR_OP_DROPOUT, dr, 1, p1, 1, &r), 0); /* the inference form */
  CHECK_STR(TYPE_STR(r), "f32[5]");
  EXPECT_ERR("the key of dropout must be i64[], got i32[]", IR_OP_DROPOUT, dr, 3, p1, 3);
  dr[1] = T(IR_DT_I64, 0);
  CHECK_EQ_INT(infer(IR_OP_DROPOUT, dr, 3, p1, 3, &r), 0);
  dr[2] = T(IR_DT_I64, 1, D(4));
  EXPECT_ERR("position 0 of dropout must be i64 of f32[5]'s dim 0 alone (1 elsewhere), got i64[4]", IR_OP_DROPOUT, dr,
             3, p1, 3);
  EXPECT_ERR("dropout takes x alone or x, a key and 1 positions (one per dim of f32[5]), got 2 operands", IR_OP_DROPOUT,
             dr, 2, p1, 3);
}

static void test_einsum(void) {
  ir_type in[3] = {F32(2, D(2), D(3)), F32(2, D(3), D(4)), F32(1, D(5))}, r;
  ir_attr eq = ir_attr_str("eq", "ij,jk->ki");
  CHECK_EQ_INT(infer(IR_OP_EINSUM, in, 2, &eq, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[4, 2]");
  eq = ir_attr_str("eq", "ij,jk->");
  CHECK_EQ_INT(infer(IR_OP_EINSUM, in, 2, &eq, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[]");
  eq = ir_attr_str("eq", "ij,jk,l->ilk");
  CHECK_EQ_INT(infer(IR_OP_EINSUM, in, 3, &eq, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[2, 5, 4]");
  ir_type sq = F32(2, D(3), D(3));
  eq = ir_attr_str("eq", "ii->i");
  CHECK_EQ_INT(infer(IR_OP_EINSUM, &sq, 1, &eq, 1, &r), 0);
  CHECK_STR(TYPE_STR(r), "f32[3]");
  EXPECT_ERR("shape mismatch in einsum \"ii->i\": 'i' is 2 in f32[2, 3] and 3 in f32[2, 3]", IR_OP_EINSUM, in, 1, &eq,
             1);

  eq = ir_attr_str("eq", "ij,jk");
  EXPECT_ERR("einsum equation \"ij,jk\" must have the explicit form \"ij,jk->ik\"", IR_OP_EINSUM, in, 2, &eq, 1);
  eq = ir_attr_str("eq", "ij,ik->jk");
  EXPECT_ERR("shape mismatch in einsum \"ij,ik->jk\": 'i' is 2 in f32[2, 3] and 3 in f32[3, 4]", IR_OP_EINSUM, in, 2,
             &eq, 1);
  eq = ir_attr_str("eq", "ij,j1->i");
  EXPECT_ERR("einsum equation \"ij,j1->i\" has an invalid character '1'", IR_OP_EINSUM, in, 2, &eq, 1);
  eq = ir_attr_str("eq", "ij, jk->ik");
  EXPECT_ERR("einsum equation \"ij, jk->ik\" has an invalid character ' '", IR_OP_EINSUM, in, 2, &eq, 1);
  eq = ir_attr_str("eq", "ijk,jk->i");
  EXPECT_ERR("einsum term \"ijk\" has 3 letters but operand 0 is f32[2, 3]", IR_OP_EINSUM, in, 2, &eq, 1);
  eq = ir_attr_str("eq", "ij->ij");
  EXPECT_ERR("einsum equation \"ij->ij\" has 1 input terms but 2 operands", IR_OP_EINSUM, in, 2, &eq, 1);
  eq = ir_attr_str("eq", "ij,jk,k->ik");
  EXPECT_ERR("einsum equation \"ij,jk,k->ik\" has more input terms than the 2 operands", IR_OP_EINSUM, in, 2, &eq, 1);
  eq = ir_attr_str("eq", "ij,jk->iz");
  EXPECT_ERR("einsum output letter 'z' appears in no input of \"ij,jk->iz\"", IR_OP_EINSUM, in, 2, &eq, 1);
  eq = ir_attr_str("eq", "ij,jk->ii");
  EXPECT_ERR("einsum output letter 'i' repeated in \"ij,jk->ii\"", IR_OP_EINSUM, in, 2, &eq, 1);
  eq = ir_attr_str("eq", "ij,jk->i->k");
  EXPECT_ERR("einsum equation \"ij,jk->i->k\" must have the explicit form \"ij,jk->ik\"", IR_OP_EINSUM, in, 2, &eq, 1);
  ir_attr bad = ir_attr_int("eq", 3);
  EXPECT_ERR("attribute 'eq' of einsum must be a string", IR_OP_EINSUM, in, 2, &bad, 1);
  in[1].dtype = IR_DT_F64;
  eq = ir_attr_str("eq", "ij,jk->ik");
  EXPECT_ERR("dtype mismatch in einsum: f32 and f64", IR_OP_EINSUM, in, 2, &eq, 1);
  ir_type ii[2] = {T(IR_DT_I32, 1, D(2)), T(IR_DT_I32, 1, D(2))};
  eq = ir_attr_str("eq", "i,i->");
  EXPECT_ERR("einsum needs floating-point operands, got i32", IR_OP_EINSUM, ii, 2, &eq, 1);
}

static void test_bad_operands(void) {
  ir_type x = F32(1, D(3));
  x.rank = 9;
  EXPECT_ERR("operand 0 of exp has rank 9 (the maximum is 8)", IR_OP_EXP, &x, 1, NULL, 0);
  x = F32(1, D(-2));
  EXPECT_ERR("operand 0 of exp has a negative dimension: f32[-2]", IR_OP_EXP, &x, 1, NULL, 0);
  x = F32(1, D(3));
  x.dtype = (ir_dtype)42;
  EXPECT_ERR("operand 0 of exp has an invalid dtype", IR_OP_EXP, &x, 1, NULL, 0);
  x = F32(4, D(1) << 20, D(1) << 20, D(1) << 20, D(0)); /* 0 elements, but a dim past the limit */
  x.dims[0] = INT64_MAX;
  EXPECT_ERR("tensor f32[9223372036854775807, 1048576, 1048576, 0] has too many elements", IR_OP_EXP, &x, 1, NULL, 0);
  x = F32(2, D(0), D(5));
  ir_type r;
  CHECK_EQ_INT(infer(IR_OP_EXP, &x, 1, NULL, 0, &r), 0); /* empty tensors are fine */
  CHECK_EQ_INT(ir_infer((ir_op)999, NULL, 0, NULL, 0, &r, &(int){0}, last_err, sizeof last_err), -1);
  CHECK_STR(last_err, "invalid op 999");
  ir_attr noname = ir_attr_int(NULL, 1);
  EXPECT_ERR("attribute with no name in exp", IR_OP_EXP, &x, 1, &noname, 1);
  ir_attr unused = ir_attr_int("group", 3); /* unknown keys are ignored */
  CHECK_EQ_INT(infer(IR_OP_EXP, &x, 1, &unused, 1, &r), 0);
  /* a tiny buffer truncates, never overflows; NULL err is allowed */
  char small[8];
  x = F32(1, D(3));
  ir_type two[2] = {x, T(IR_DT_F64, 1, D(3))};
  int n_out;
  CHECK_EQ_INT(ir_infer(IR_OP_ADD, two, 2, NULL, 0, &r, &n_out, small, sizeof small), -1);
  CHECK_STR(small, "dtype m");
  CHECK_EQ_INT(ir_infer(IR_OP_ADD, two, 2, NULL, 0, &r, &n_out, NULL, 0), -1);
}

/* attention / attention_grad: dtypes of lse, shape rules, attributes. */
static void test_attention(void) {
  ir_attr at[2] = {ir_attr_float("scale", 0.125), ir_attr_int("causal", 0)};
  ir_type in[6] = {T(IR_DT_F64, 3, D(2), D(5), D(4)), T(IR_DT_F64, 3, D(2), D(7), D(4)), T(IR_DT_F64, 3, D(2), D(7), D(3))};
  ir_type out[4];
  int n_out = 0;
  char err[256];
  /* f64 keeps lse in f64; bf16 and f16 (and f32) give an f32 lse */
  CHECK_EQ_INT(ir_infer(IR_OP_ATTENTION, in, 3, at, 2, out, &n_out, err, sizeof err), 0);
  CHECK_EQ_INT(n_out, 2);
  char b[128];
  CHECK_STR(ir_type_str(&out[0], b, sizeof b), "f64[2, 5, 3]");
  CHECK_STR(ir_type_str(&out[1], b, sizeof b), "f64[2, 5]");
  ir_type h[3] = {T(IR_DT_BF16, 2, D(5), D(4)), T(IR_DT_BF16, 2, D(7), D(4)), T(IR_DT_BF16, 2, D(7), D(3))};
  CHECK_EQ_INT(ir_infer(IR_OP_ATTENTION, h, 3, at, 2, out, &n_out, err, sizeof err), 0);
  CHECK_STR(ir_type_str(&out[0], b, sizeof b), "bf16[5, 3]");
  CHECK_STR(ir_type_str(&out[1], b, sizeof b), "f32[5]");
  /* shapes */
  ir_type bad[3] = {in[0], T(IR_DT_F64, 3, D(2), D(7), D(5)), in[2]};
  EXPECT_ERR("shape mismatch in attention: q f64[2, 5, 4], k f64[2, 7, 5], v f64[2, 7, 3] (want q[...,T,E], "
             "k[...,S,E], v[...,S,F])",
             IR_OP_ATTENTION, bad, 3, at, 2);
  ir_type bcast[3] = {in[0], T(IR_DT_F64, 3, D(1), D(7), D(4)), in[2]};
  EXPECT_ERR("shape mismatch in attention: q f64[2, 5, 4], k f64[1, 7, 4], v f64[2, 7, 3] (want q[...,T,E], "
             "k[...,S,E], v[...,S,F])",
             IR_OP_ATTENTION, bcast, 3, at, 2);
  ir_type rank[3] = {in[0], T(IR_DT_F64, 2, D(7), D(4)), in[2]};
  EXPECT_ERR("attention needs q, k, v of one rank >= 2, got f64[2, 5, 4], f64[7, 4], f64[2, 7, 3]", IR_OP_ATTENTION,
             rank, 3, at, 2);
  ir_type mixed[3] = {in[0], in[1], T(IR_DT_F32, 3, D(2), D(7), D(3))};
  EXPECT_ERR("dtype mismatch in attention: f64 and f32", IR_OP_ATTENTION, mixed, 3, at, 2);
  ir_type ints[3] = {T(IR_DT_I32, 2, D(5), D(4)), T(IR_DT_I32, 2, D(7), D(4)), T(IR_DT_I32, 2, D(7), D(3))};
  EXPECT_ERR("attention needs floating-point operands, got i32", IR_OP_ATTENTION, ints, 3, at, 2);
  /* attributes */
  EXPECT_ERR("missing attribute 'causal' in attention", IR_OP_ATTENTION, in, 3, at, 1);
  ir_attr c2[2] = {at[0], ir_attr_int("causal", 2)};
  EXPECT_ERR("attribute 'causal' of attention must be 0 or 1, got 2", IR_OP_ATTENTION, in, 3, c2, 2);
  ir_attr inf[2] = {ir_attr_float("scale", INFINITY), at[1]};
  EXPECT_ERR("attribute 'scale' of attention must be finite, got inf", IR_OP_ATTENTION, in, 3, inf, 2);
  ir_attr si[2] = {ir_attr_int("scale", 1), at[1]};
  EXPECT_ERR("attribute 'scale' of attention must be a float", IR_OP_ATTENTION, in, 3, si, 2);
  /* attention_grad: o, lse and do must be what attention gives */
  in[3] = T(IR_DT_F64, 3, D(2), D(5), D(3));
  in[4] = T(IR_DT_F64, 2, D(2), D(5));
  in[5] = in[3];
  CHECK_EQ_INT(ir_infer(IR_OP_ATTENTION_GRAD, in, 6, at, 2, out, &n_out, err, sizeof err), 0);
  CHECK_EQ_INT(n_out, 3);
  CHECK_STR(ir_type_str(&out[1], b, sizeof b), "f64[2, 7, 4]");
  in[4] = T(IR_DT_F32, 2, D(2), D(5));
  EXPECT_ERR("attention_grad: lse must be f64[2, 5], got f32[2, 5]", IR_OP_ATTENTION_GRAD, in, 6, at, 2);
  in[4] = T(IR_DT_F64, 2, D(2), D(5));
  in[5] = T(IR_DT_F64, 3, D(2), D(5), D(4));
  EXPECT_ERR("attention_grad: do must be f64[2, 5, 3], got f64[2, 5, 4]", IR_OP_ATTENTION_GRAD, in, 6, at, 2);
}

static void test_comm_ops(void) {
  ir_type in[1] = {F32(2, D(2), D(6))}, res;
  /* the axis is an index (the .ir reader maps names; test_ir_roundtrip) */
  ir_attr a[4] = {ir_attr_str("axis", "tp"), ir_attr_int("n", 4), ir_attr_int("dim", 1)};
  EXPECT_ERR("attribute 'axis' of all_gather must be a mesh axis", IR_OP_ALL_GATHER, in, 1, a, 3);
  a[0] = ir_attr_mesh_axis("axis", (ir_axis)IR_NUM_AXES);
  EXPECT_ERR("mesh axis 3 of all_gather out of range (3 axes)", IR_OP_ALL_GATHER, in, 1, a, 3);
  a[0] = ir_attr_mesh_axis("axis", IR_AXIS_TP);
  EXPECT_ERR("reduce_scatter: dim 1 of f32[2, 6] does not divide by the axis size 4", IR_OP_REDUCE_SCATTER, in, 1, a, 3);
  ir_attr no_n[2] = {a[0], a[2]};
  EXPECT_ERR("missing attribute 'n' in all_gather", IR_OP_ALL_GATHER, in, 1, no_n, 2);
  a[1] = ir_attr_int("n", 0);
  EXPECT_ERR("all_gather: axis size n = 0 must be between 1 and 4096", IR_OP_ALL_GATHER, in, 1, a, 3);
  a[1] = ir_attr_int("n", 2);
  a[2] = ir_attr_int("dim", 2);
  EXPECT_ERR("axis 2 out of range for f32[2, 6] in mesh_slice", IR_OP_MESH_SLICE, in, 1, a, 3);
  a[2] = ir_attr_str("reduce", "min");
  EXPECT_ERR("all_reduce: reduce must be \"sum\" or \"max\", got \"min\"", IR_OP_ALL_REDUCE, in, 1, a, 3);
  a[2] = ir_attr_str("reduce", "max");
  res = in[0];
  CHECK_EQ_INT(infer(IR_OP_ALL_REDUCE, in, 1, a, 3, &res), 0);
  a[3] = ir_attr_int("dim", 0);
  EXPECT_ERR("all_gather takes no reduce attribute", IR_OP_ALL_GATHER, in, 1, a, 4);
  ir_attr s[3] = {ir_attr_mesh_axis("axis", IR_AXIS_PP), ir_attr_int("n", 2), ir_attr_int("peer", 2)};
  EXPECT_ERR("send: peer = 2 is not a coordinate of an axis of size 2", IR_OP_SEND, in, 1, s, 3);
  in[0] = T(IR_DT_BOOL, 1, D(4));
  EXPECT_ERR("all_reduce needs a numeric operand, got bool[4]", IR_OP_ALL_REDUCE, in, 1, a, 2);
}

int main(void) {
  test_every_op();
  test_elementwise_errors();
  test_sources();
  test_matmul();
  test_matmul_transposed();
  test_layout();
  test_reductions_and_norms();
  test_model_ops();
  test_einsum();
  test_bad_operands();
  test_attention();
  test_comm_ops();
  return check_done();
}
