/* tests/unit/test_cuda_kernels.c — every generated kernel against the CPU
 * reference, one op at a time, at the shapes where kernels go wrong: sizes
 * that are not multiples of the vector width, the warp or the tile, rows
 * longer than a block, reductions long enough to split, broadcasts, every
 * dtype an op takes.
 *
 * Each case is one op (built with ir_graph_build) over inputs of its own;
 * the cases are gathered into a few graphs (a program each: one compile)
 * run on the cpu and on cuda-emu from the same seeded random inputs; every
 * case's outputs are compared elementwise relative to the tensor's scale
 * (testgpu.h), within
 *   f64 1e-12, f32 1e-5, f16 2e-3, bf16 1e-2, integers and bool exactly
 * (16-bit floats: a float computed in another order may round to the
 * neighbouring 16-bit value). Cases:
 *   elementwise  every unary and binary op of ops.def on each dtype it
 *                takes, broadcast ([33, 1] x [37]), 1001 elements (no
 *                vector width divides it), casts between every pair of
 *                kinds, where;
 *   reductions   sum / mean / max over the last axis (warp per row, block
 *                per row, split over 256 blocks), the first axis (a thread
 *                per column, split), a middle axis, every axis, keepdims;
 *                f64, bf16 and (sum, max) i32 inputs;
 *   row ops      softmax and log_softmax (last axis: warp, block; axis 0),
 *                layernorm, rmsnorm, add_layernorm (37, 64 and 3000 wide),
 *                layernorm_grad and rmsnorm_grad (a warp per row, a block
 *                per row, column sums in registers or in the workspace),
 *                argmax (with ties and NaNs), count_nonfinite (with Inf and
 *                NaN planted); count_nonfinite and sum_squares of many
 *                tensors (5 of every float type, 300: two partials kernels);
 *   model ops    embedding and its gradient (repeated ids, 300 columns;
 *                buckets larger than 1024; rows without positions),
 *                cross_entropy and its gradient (37 and 3000 classes), and
 *                the two in one pass over the logits ({with_grad}; f32, bf16);
 *                linear_cross_entropy (the LM head with its loss, 18 rows in
 *                chunks of 8, the last one short: 3000 classes f32, w [V, D];
 *                37 classes bf16, w [D, V]; mixed precision, g f32);
 *   attention    forward and backward, causal and not, T = 37, 100 and
 *                250 (not multiples of the tiles; 250: 4 tiles, both
 *                stages of the cp.async pipelines reused), S != T, head dims 16, 24/40, f64,
 *                bf16 and f16 on tensor cores (E = 16 to 128; the backward
 *                where F is a multiple of 16 too) and not (E = 24), rows
 *                that see no key (largest errors of the tensor-core
 *                backward: bf16 0.0067, f16 0.00077, from P and dS rounded
 *                to 16 bits as FlashAttention-2 does), which kernel the
 *                lowering picks for which dtype and head dims; and the
 *                same in the `heads` layout (q[B,T,H,E], heads read and
 *                written in place: fuse-transpose's fold), each dtype path;
 *                grouped-query forward and backward (Hq / Hkv of 2, 3, 4:
 *                dk, dv of the kv heads summed over each group in the
 *                kernel; f32, f64, bf16 and f16 on tensor cores);
 *   products     batched and broadcast, transposed operands, f64, bf16,
 *                f16, fused_matmul with each cuBLASLt epilogue and with
 *                another epilogue, a bias gradient in the weight-gradient
 *                product's epilogue (f32, bf16), and again with TGC_CUDA_NO_EPILOGUES=1
 *                (the plain product + epilogue kernel path);
 *   layout       transpose, slice with a step, unslice, concat and split
 *                (axes 0, 1, last; odd sizes), broadcast, const, iota,
 *                causal_mask, dropout (both forms, every float dtype; and
 *                inside a fused expression and a product's epilogue), einsum;
 *   groups       consecutive fused nodes of one expression as one
 *                multi-tensor launch (odd sizes, and vectorized), and the
 *                lowering's deferred steps for them.
 * Then the same kernels with racecheck on: no shared-memory hazard in any
 * of them (the emulator would fail the launch). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen.h"
#include "testgpu.h"
#include "testgraph.h"

static int cases, failed_cases;
static bool racecheck;
/* The backend checked against the cpu: cuda-emu, or the real cuda backend
 * when TGC_TEST_BACKEND=cuda (on a GPU; the racecheck pass is the
 * emulator's and is skipped there). */
static const rt_backend *device_backend = &rt_cuda_emu_backend;

static double tol_of(ir_dtype t) {
  switch (t) {
  case IR_DT_F64: return 1e-12;
  case IR_DT_F32: return 1e-5;
  case IR_DT_F16: return 2e-3;
  case IR_DT_BF16: return 1e-2;
  default: return 0;
  }
}

/* Inputs: seeded random (integers below int_high), then fix (if any) edits them. */
typedef void (*fix_fn)(rt_tensor **in, int n);

/* The cases are gathered into one graph (one program: one compile) and run
 * together by flush(); each case owns a range of the inputs and outputs. */
enum { MAX_CASES = 512 };
static struct {
  char name[128];
  int first_in, n_in, first_out, n_out;
  int64_t int_high;
  fix_fn fix;
} pending[MAX_CASES];
static int n_pending;
static ir_graph *batch;

static ir_graph *new_graph(void) {
  if (!batch) batch = ir_graph_new("kernels", "kernels.tg");
  return batch;
}
static ir_loc here(void) { return (ir_loc){.file = "kernels.tg", .line = 1, .col = 1}; }

static ir_value *input(ir_graph *g, ir_type t) {
  char nm[16];
  snprintf(nm, sizeof nm, "in%d", g->n_inputs);
  return ir_graph_add_input(g, nm, t, here());
}

static int case_first_in, case_first_out;
/* Starts a case: its inputs and outputs are the ones added until run_case. */
static void begin_case(void) {
  ir_graph *g = new_graph();
  case_first_in = g->n_inputs;
  case_first_out = g->n_outputs;
}

static void run_case(const char *name, ir_graph *g, int64_t int_high, fix_fn fix) {
  if (n_pending == MAX_CASES) abort();
  cases++;
  pending[n_pending].first_in = case_first_in, pending[n_pending].n_in = g->n_inputs - case_first_in;
  pending[n_pending].first_out = case_first_out, pending[n_pending].n_out = g->n_outputs - case_first_out;
  pending[n_pending].int_high = int_high, pending[n_pending].fix = fix;
  snprintf(pending[n_pending].name, sizeof pending[n_pending].name, "%s", name);
  n_pending++;
}

/* Runs the gathered cases on both backends and compares them, case by case. */
static void flush(void) {
  if (!batch) return;
  gmodel m = {.g = batch, .d = ir_diag_new(stderr)};
  batch = NULL;
  bool ok = ir_verify(m.g, m.d) == 0;
  m.in = calloc((size_t)m.g->n_inputs + 1, sizeof *m.in);
  for (int c = 0; ok && c < n_pending; c++)
    for (int i = pending[c].first_in; i < pending[c].first_in + pending[c].n_in; i++) {
      m.in[i] = rt_tensor_new(&m.g->inputs[i]->type);
      rt_fill_random(m.in[i], 3, m.g->inputs[i]->name, pending[c].int_high);
    }
  for (int c = 0; ok && c < n_pending; c++)
    if (pending[c].fix) pending[c].fix(m.in + pending[c].first_in, pending[c].n_in);
  int no = m.g->n_outputs;
  rt_tensor **oa = calloc((size_t)no + 1, sizeof *oa), **ob = calloc((size_t)no + 1, sizeof *ob);
  rt_device_options dev = {.racecheck = racecheck};
  ok = ok && gmodel_run(&m, &rt_cpu_backend, oa, NULL) == 0 && gmodel_run(&m, device_backend, ob, &dev) == 0;
  CHECK(ok);
  for (int c = 0; c < n_pending; c++) {
    int64_t bad = ok ? 0 : 1;
    for (int i = pending[c].first_out; ok && i < pending[c].first_out + pending[c].n_out; i++) {
      char what[200];
      snprintf(what, sizeof what, "%.150s: output %d", pending[c].name, i - pending[c].first_out);
      bad += compare_tensors(what, ob[i], oa[i], tol_of(oa[i]->type.dtype), NULL);
    }
    CHECK_EQ_INT(bad, 0);
    if (bad) failed_cases++;
  }
  for (int i = 0; i < no; i++) rt_tensor_free(oa[i]), rt_tensor_free(ob[i]);
  free(oa);
  free(ob);
  gmodel_free(&m);
  n_pending = 0;
}

/* A node of op over ins; every result an output. NULL (and a failed check) on a type error. */
static ir_node *node(ir_graph *g, ir_op op, ir_value **ins, int n, const ir_attr *attrs, int na, const ir_type *out) {
  char err[512];
  ir_node *nd = ir_graph_build(g, op, ins, n, attrs, na, out, "r", here(), err, sizeof err);
  if (!nd) {
    fprintf(stderr, "building %s: %s\n", ir_op_name(op), err);
    CHECK(0);
    return NULL;
  }
  for (int i = 0; i < nd->n_out; i++) ir_graph_add_output(g, nd->out[i]->name, nd->out[i]);
  return nd;
}

/* One op over inputs of the given types. */
static void one_op(const char *name, ir_op op, const ir_type *ts, int n, const ir_attr *attrs, int na, int64_t int_high,
                   fix_fn fix) {
  ir_graph *g = new_graph();
  begin_case();
  ir_value *ins[8];
  for (int i = 0; i < n; i++) ins[i] = input(g, ts[i]);
  if (node(g, op, ins, n, attrs, na, NULL)) run_case(name, g, int_high, fix);
}

/* ---- elementwise ---- */

static const ir_dtype FLOATS[] = {IR_DT_F32, IR_DT_F64, IR_DT_BF16, IR_DT_F16};

static void test_elementwise(void) {
  for (int op = 0; op < IR_NUM_OPS; op++) {
    ir_op_kind k = ir_op_kind_of((ir_op)op);
    if ((k != IR_OPK_UNARY && k != IR_OPK_BINARY) || op == IR_OP_CAST) continue;
    unsigned f = ir_op_flags((ir_op)op);
    ir_dtype dts[6];
    int nd = 0;
    if (f & IR_OPF_BOOL) dts[nd++] = IR_DT_BOOL;
    else {
      for (int i = 0; i < 4; i++) dts[nd++] = FLOATS[i];
      if (f & (IR_OPF_NUMERIC | IR_OPF_CMP)) dts[nd++] = IR_DT_I32, dts[nd++] = IR_DT_I64;
    }
    for (int i = 0; i < nd; i++) {
      char name[128];
      snprintf(name, sizeof name, "%s %s", ir_op_name((ir_op)op), ir_dtype_name(dts[i]));
      if (k == IR_OPK_UNARY) {
        ir_type t = T(dts[i], 1, D(1001));
        one_op(name, (ir_op)op, &t, 1, NULL, 0, 20, NULL);
      } else {
        ir_type t[2] = {T(dts[i], 2, D(33), D(1)), T(dts[i], 1, D(37))}; /* broadcast both ways */
        one_op(name, (ir_op)op, t, 2, NULL, 0, 20, NULL);
        ir_type s[2] = {T(dts[i], 2, D(16), D(64)), T(dts[i], 2, D(16), D(64))}; /* contiguous: vectorized */
        one_op(name, (ir_op)op, s, 2, NULL, 0, 20, NULL);
      }
    }
  }
  /* casts between every pair of kinds */
  static const ir_dtype all[] = {IR_DT_F64, IR_DT_F32, IR_DT_BF16, IR_DT_F16, IR_DT_I32, IR_DT_I64, IR_DT_BOOL};
  for (size_t a = 0; a < 7; a++)
    for (size_t b = 0; b < 7; b++) {
      char name[64];
      snprintf(name, sizeof name, "cast %s -> %s", ir_dtype_name(all[a]), ir_dtype_name(all[b]));
      ir_type t = T(all[a], 2, D(3), D(333));
      ir_attr to = ir_attr_dtype("to", all[b]);
      one_op(name, IR_OP_CAST, &t, 1, &to, 1, 1000, NULL);
    }
  ir_type w[3] = {T(IR_DT_BOOL, 2, D(5), D(1)), T(IR_DT_F32, 1, D(7)), T(IR_DT_F32, 2, D(5), D(7))};
  one_op("where", IR_OP_WHERE, w, 3, NULL, 0, 2, NULL);
}

/* ---- reductions and row ops ---- */

static void reduce_case(const char *name, ir_op op, ir_type t, const int64_t *axes, int n_axes, bool keep) {
  ir_attr a[2] = {ir_attr_ints("axes", axes, n_axes), ir_attr_int("keepdims", keep)};
  one_op(name, op, &t, 1, a, 2, 1000, NULL);
}

static void test_reductions(void) {
  static const ir_op ops[3] = {IR_OP_REDUCE_SUM, IR_OP_REDUCE_MEAN, IR_OP_REDUCE_MAX};
  int64_t last[1] = {1}, first[1] = {0}, mid[1] = {1}, all3[3] = {0, 1, 2}, one[1] = {0};
  for (int o = 0; o < 3; o++) {
    char nm[96];
    const char *on = ir_op_name(ops[o]);
    snprintf(nm, sizeof nm, "%s rows [37, 1000] warp per row", on);
    reduce_case(nm, ops[o], T(IR_DT_F32, 2, D(37), D(1000)), last, 1, false);
    snprintf(nm, sizeof nm, "%s rows [3, 5001] block per row", on);
    reduce_case(nm, ops[o], T(IR_DT_F32, 2, D(3), D(5001)), last, 1, true);
    snprintf(nm, sizeof nm, "%s rows [2, 70000] split", on);
    reduce_case(nm, ops[o], T(IR_DT_F32, 2, D(2), D(70000)), last, 1, false);
    snprintf(nm, sizeof nm, "%s columns [5000, 37]", on);
    reduce_case(nm, ops[o], T(IR_DT_F32, 2, D(5000), D(37)), first, 1, false);
    snprintf(nm, sizeof nm, "%s columns [300, 5] split", on);
    reduce_case(nm, ops[o], T(IR_DT_F32, 2, D(30000), D(5)), first, 1, false);
    snprintf(nm, sizeof nm, "%s middle axis [7, 300, 5]", on);
    reduce_case(nm, ops[o], T(IR_DT_F32, 3, D(7), D(300), D(5)), mid, 1, true);
    snprintf(nm, sizeof nm, "%s every axis [3, 4, 1001]", on);
    reduce_case(nm, ops[o], T(IR_DT_F32, 3, D(3), D(4), D(1001)), all3, 3, false);
    snprintf(nm, sizeof nm, "%s f64 [1001]", on);
    reduce_case(nm, ops[o], T(IR_DT_F64, 1, D(1001)), one, 1, false);
    snprintf(nm, sizeof nm, "%s bf16 [9, 130]", on);
    reduce_case(nm, ops[o], T(IR_DT_BF16, 2, D(9), D(130)), last, 1, false);
    snprintf(nm, sizeof nm, "%s i32 [40, 9]", on);
    if (ops[o] != IR_OP_REDUCE_MEAN) reduce_case(nm, ops[o], T(IR_DT_I32, 2, D(40), D(9)), first, 1, false);
  }
}

static void plant_specials(rt_tensor **in, int n) {
  (void)n;
  rt_tensor *x = in[0];
  int64_t N = ir_type_numel(&x->type);
  for (int64_t i = 0; i < N; i += 7) rt_tensor_set(x, i, i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY);
}

static void plant_argmax(rt_tensor **in, int n) {
  (void)n;
  rt_tensor *x = in[0]; /* rows of 37: ties, NaN at index 0 of row 1, NaN later in row 2 */
  for (int64_t j = 0; j < 37; j++) rt_tensor_set(x, j, j % 5 == 2 ? 3.0 : 1.0);
  rt_tensor_set(x, 37, NAN);
  rt_tensor_set(x, 2 * 37 + 4, NAN);
}

/* Inf / NaN in every operand (multi-tensor count_nonfinite), at different places. */
static void plant_specials_all(rt_tensor **in, int n) {
  for (int k = 0; k < n; k++) {
    int64_t N = ir_type_numel(&in[k]->type);
    for (int64_t i = k % 5; i < N; i += 5 + k) rt_tensor_set(in[k], i, (i + k) % 3 == 0 ? NAN : INFINITY);
  }
}

/* Multi-tensor reductions (codegen/emit_multi.c): count_nonfinite and
 * sum_squares over n tensors of the given types, one node. */
static void multi_case(const char *name, ir_op op, const ir_type *ts, int n, fix_fn fix) {
  ir_graph *g = new_graph();
  begin_case();
  ir_value **ins = calloc((size_t)n, sizeof *ins);
  for (int i = 0; i < n; i++) ins[i] = input(g, ts[i]);
  if (node(g, op, ins, n, NULL, 0, NULL)) run_case(name, g, 0, fix);
  free(ins);
}

static void test_multi_reductions(void) {
  /* a tensor of several chunks (8192 elements each) with a short last one, every float type, a scalar */
  ir_type ts[5] = {T(IR_DT_F32, 2, D(33), D(101)), T(IR_DT_BF16, 1, D(20000)), T(IR_DT_F64, 1, D(7)),
                   T(IR_DT_F16, 2, D(3), D(3)), T(IR_DT_F32, 0)};
  multi_case("count_nonfinite of 5 tensors", IR_OP_COUNT_NONFINITE, ts, 5, plant_specials_all);
  multi_case("sum_squares of 5 tensors", IR_OP_SUM_SQUARES, ts, 5, NULL);
  /* more tensors than one kernel's parameters take (256): two partials kernels */
  enum { MANY = 300 };
  ir_type many[MANY];
  for (int i = 0; i < MANY; i++) many[i] = T(i % 2 ? IR_DT_F32 : IR_DT_BF16, 1, D(1 + 37 * i));
  multi_case("sum_squares of 300 tensors", IR_OP_SUM_SQUARES, many, MANY, NULL);
  multi_case("count_nonfinite of 300 tensors", IR_OP_COUNT_NONFINITE, many, MANY, plant_specials_all);
}

static void test_row_ops(void) {
  static const ir_op sm[2] = {IR_OP_SOFTMAX, IR_OP_LOG_SOFTMAX};
  for (int s = 0; s < 2; s++) {
    ir_attr last = ir_attr_int("axis", 1), first = ir_attr_int("axis", 0);
    ir_type a = T(IR_DT_F32, 2, D(13), D(37)), b = T(IR_DT_F32, 2, D(3), D(3000)), c = T(IR_DT_F32, 2, D(100), D(7));
    ir_type h = T(IR_DT_BF16, 2, D(5), D(64));
    char nm[64];
    snprintf(nm, sizeof nm, "%s [13, 37]", ir_op_name(sm[s]));
    one_op(nm, sm[s], &a, 1, &last, 1, 0, NULL);
    snprintf(nm, sizeof nm, "%s [3, 3000] block", ir_op_name(sm[s]));
    one_op(nm, sm[s], &b, 1, &last, 1, 0, NULL);
    snprintf(nm, sizeof nm, "%s axis 0", ir_op_name(sm[s]));
    one_op(nm, sm[s], &c, 1, &first, 1, 0, NULL);
    snprintf(nm, sizeof nm, "%s bf16", ir_op_name(sm[s]));
    one_op(nm, sm[s], &h, 1, &last, 1, 0, NULL);
  }
  static const int64_t widths[] = {37, 64, 3000};
  for (int w = 0; w < 3; w++) {
    int64_t d = widths[w];
    ir_attr eps = ir_attr_float("eps", 1e-5);
    ir_type ln[3] = {T(IR_DT_F32, 3, D(2), D(5), d), T(IR_DT_F32, 1, d), T(IR_DT_F32, 1, d)};
    ir_type al[4] = {ln[0], ln[0], ln[1], ln[2]};
    char nm[64];
    snprintf(nm, sizeof nm, "layernorm %lld", (long long)d);
    one_op(nm, IR_OP_LAYERNORM, ln, 3, &eps, 1, 0, NULL);
    snprintf(nm, sizeof nm, "rmsnorm %lld", (long long)d);
    one_op(nm, IR_OP_RMSNORM, ln, 2, &eps, 1, 0, NULL);
    snprintf(nm, sizeof nm, "add_layernorm %lld", (long long)d);
    one_op(nm, IR_OP_ADD_LAYERNORM, al, 4, &eps, 1, 0, NULL);
  }
  ir_type lb[3] = {T(IR_DT_BF16, 2, D(6), D(48)), T(IR_DT_BF16, 1, D(48)), T(IR_DT_BF16, 1, D(48))};
  ir_attr eps = ir_attr_float("eps", 1e-5);
  one_op("layernorm bf16", IR_OP_LAYERNORM, lb, 3, &eps, 1, 0, NULL);
  /* the norms' backward (x, gamma, dy): a warp per row with the column sums
   * in registers (37, 64, 768 wide; 1001 rows: 126 blocks, the last short),
   * a block per row (3000), the sums in the workspace (7000), f64, bf16,
   * no rows (zero sums) */
  static const struct { ir_dtype dt; int64_t rows, d; } ng[] = {
      {IR_DT_F32, 10, 37}, {IR_DT_F32, 10, 64}, {IR_DT_F32, 1001, 96}, {IR_DT_F32, 3, 3000}, {IR_DT_F32, 3, 7000},
      {IR_DT_F64, 5, 37}, {IR_DT_BF16, 37, 768}, {IR_DT_BF16, 6, 48}, {IR_DT_F32, 0, 37}};
  for (int i = 0; i < (int)(sizeof ng / sizeof ng[0]); i++)
    for (int rms = 0; rms < 2; rms++) {
      ir_type x = T(ng[i].dt, 2, D(ng[i].rows), D(ng[i].d)), ngt[3] = {x, T(ng[i].dt, 1, D(ng[i].d)), x};
      char nm[64];
      snprintf(nm, sizeof nm, "%s %s [%lld, %lld]", rms ? "rmsnorm_grad" : "layernorm_grad", ir_dtype_name(ng[i].dt),
               (long long)ng[i].rows, (long long)ng[i].d);
      one_op(nm, rms ? IR_OP_RMSNORM_GRAD : IR_OP_LAYERNORM_GRAD, ngt, 3, &eps, 1, 0, NULL);
    }
  ir_type am = T(IR_DT_F32, 2, D(4), D(37)), am2 = T(IR_DT_F32, 2, D(3), D(9000)), am3 = T(IR_DT_F32, 3, D(4), D(37), D(3));
  ir_attr ax1 = ir_attr_int("axis", 1);
  one_op("argmax ties and NaN", IR_OP_ARGMAX, &am, 1, &ax1, 1, 0, plant_argmax);
  one_op("argmax block per row", IR_OP_ARGMAX, &am2, 1, &ax1, 1, 0, NULL);
  one_op("argmax middle axis", IR_OP_ARGMAX, &am3, 1, &ax1, 1, 0, NULL);
  for (int i = 0; i < 4; i++) {
    ir_type cn = T(FLOATS[i], 2, D(33), D(101));
    char nm[64];
    snprintf(nm, sizeof nm, "count_nonfinite %s", ir_dtype_name(FLOATS[i]));
    one_op(nm, IR_OP_COUNT_NONFINITE, &cn, 1, NULL, 0, 0, plant_specials);
  }
  test_multi_reductions();
}

/* ---- model ops ---- */

static void test_model_ops(void) {
  ir_type e[2] = {T(IR_DT_F32, 2, D(50), D(37)), T(IR_DT_I32, 2, D(3), D(29))};
  one_op("embedding", IR_OP_EMBEDDING, e, 2, NULL, 0, 50, NULL);
  ir_type e2[2] = {T(IR_DT_BF16, 2, D(20), D(64)), T(IR_DT_I64, 1, D(100))};
  one_op("embedding bf16 i64", IR_OP_EMBEDDING, e2, 2, NULL, 0, 20, NULL);
  /* the gradient: ids repeat (100 positions into 11 rows), 300 columns = 2 column blocks */
  ir_type g[2] = {T(IR_DT_I32, 2, D(4), D(25)), T(IR_DT_F32, 3, D(4), D(25), D(300))};
  ir_attr vocab = ir_attr_int("vocab", 11);
  one_op("embedding_grad", IR_OP_EMBEDDING_GRAD, g, 2, &vocab, 1, 11, NULL);
  ir_type g2[2] = {T(IR_DT_I64, 1, D(700)), T(IR_DT_F64, 2, D(700), D(5))};
  ir_attr vocab2 = ir_attr_int("vocab", 3);
  one_op("embedding_grad f64, 700 positions", IR_OP_EMBEDDING_GRAD, g2, 2, &vocab2, 1, 3, NULL);
  /* buckets of ~1500 positions (more than a block sorts in shared memory:
   * those rows walk every id), bf16 with each add rounded as the cpu; and
   * 40 rows of 4000 of which most have no position (the result stays zero) */
  ir_type g3[2] = {T(IR_DT_I32, 1, D(3000)), T(IR_DT_BF16, 2, D(3000), D(70))};
  ir_attr vocab3 = ir_attr_int("vocab", 2);
  one_op("embedding_grad bf16, buckets over 1024", IR_OP_EMBEDDING_GRAD, g3, 2, &vocab3, 1, 2, NULL);
  ir_type g4[2] = {T(IR_DT_I32, 1, D(40)), T(IR_DT_F32, 2, D(40), D(33))};
  ir_attr vocab4 = ir_attr_int("vocab", 4000);
  one_op("embedding_grad, rows without positions", IR_OP_EMBEDDING_GRAD, g4, 2, &vocab4, 1, 4000, NULL);
  static const int64_t classes[] = {37, 3000};
  for (int c = 0; c < 2; c++) {
    int64_t V = classes[c];
    char nm[64];
    ir_type ce[2] = {T(IR_DT_F32, 3, D(2), D(9), V), T(IR_DT_I32, 2, D(2), D(9))};
    snprintf(nm, sizeof nm, "cross_entropy %lld classes", (long long)V);
    one_op(nm, IR_OP_CROSS_ENTROPY, ce, 2, NULL, 0, V, NULL);
    ir_type cg[3] = {ce[0], ce[1], T(IR_DT_F32, 0)};
    snprintf(nm, sizeof nm, "cross_entropy_grad %lld classes", (long long)V);
    one_op(nm, IR_OP_CROSS_ENTROPY_GRAD, cg, 3, NULL, 0, V, NULL);
    /* the loss computed by its gradient's kernel (fuse-transpose's {with_grad}): one pass over the logits */
    static const ir_dtype dts[2] = {IR_DT_F32, IR_DT_BF16};
    ir_graph *gr = new_graph();
    begin_case();
    ir_value *ins[3] = {input(gr, T(dts[c], 3, D(2), D(9), V)), input(gr, ce[1]), input(gr, T(dts[c], 0))};
    ir_attr wg = ir_attr_int("with_grad", 1);
    ir_node *loss = node(gr, IR_OP_CROSS_ENTROPY, ins, 2, &wg, 1, NULL);
    if (loss && node(gr, IR_OP_CROSS_ENTROPY_GRAD, ins, 3, NULL, 0, NULL)) {
      CHECK(pass_cross_entropy_grad_of(gr, loss->id) == gr->n_nodes - 1);
      snprintf(nm, sizeof nm, "cross_entropy with its gradient %s %lld classes", ir_dtype_name(dts[c]), (long long)V);
      run_case(nm, gr, V, NULL);
    }
  }
  static const struct {
    int64_t V;
    ir_dtype dt, gdt;
    int tb;
  } lce[3] = {{3000, IR_DT_F32, IR_DT_F32, 1}, {37, IR_DT_BF16, IR_DT_BF16, 0}, {37, IR_DT_BF16, IR_DT_F32, 1}};
  for (int c = 0; c < 3; c++) {
    int64_t V = lce[c].V;
    ir_dtype dt = lce[c].dt;
    ir_type ts[4] = {T(dt, 3, D(2), D(9), D(40)), lce[c].tb ? T(dt, 2, V, D(40)) : T(dt, 2, D(40), V),
                     T(IR_DT_I32, 2, D(2), D(9)), T(lce[c].gdt, 0)};
    ir_attr at[2] = {ir_attr_int("chunk", 8), ir_attr_int("transpose_b", lce[c].tb)};
    char nm[96];
    snprintf(nm, sizeof nm, "linear_cross_entropy %s (g %s) %lld classes", ir_dtype_name(dt), ir_dtype_name(lce[c].gdt),
             (long long)V);
    one_op(nm, IR_OP_LINEAR_CROSS_ENTROPY, ts, 4, at, 2, V, NULL);
    /* result 4, the chunk buffer, is the op's scratch: the device's rows are
     * 64-element aligned in smaller chunks (emit_nn.c), what it holds after
     * the op is not the cpu's */
    if (n_pending > 0 && strcmp(pending[n_pending - 1].name, nm) == 0) pending[n_pending - 1].n_out = 4;
  }
}

/* The inputs q, k, v of an attention case. */
static void att_inputs(ir_graph *g, ir_value **in, ir_type q, ir_type k, ir_type v) {
  in[0] = input(g, q);
  in[1] = input(g, k);
  in[2] = input(g, v);
}

/* attention and its gradient in one graph: (o, lse) = attention(q, k, v);
 * (dq, dk, dv) = attention_grad(q, k, v, o, lse, do). */
static void attention_case(const char *name, ir_dtype dt, int64_t bh, int64_t t, int64_t s, int64_t e, int64_t f,
                           bool causal) {
  ir_graph *g = new_graph();
  begin_case();
  ir_value *qkv[6];
  att_inputs(g, qkv, T(dt, 3, bh, t, e), T(dt, 3, bh, s, e), T(dt, 3, bh, s, f));
  ir_attr a[2] = {ir_attr_float("scale", 1.0 / sqrt((double)e)), ir_attr_int("causal", causal)};
  ir_node *fw = node(g, IR_OP_ATTENTION, qkv, 3, a, 2, NULL);
  if (!fw) return;
  qkv[3] = fw->out[0];
  qkv[4] = fw->out[1];
  qkv[5] = input(g, T(dt, 3, bh, t, f));
  if (node(g, IR_OP_ATTENTION_GRAD, qkv, 6, a, 2, NULL)) run_case(name, g, 0, NULL);
}

/* The forward alone on q[B, Hq, T, E], k[B, Hkv, S, E], v[B, Hkv, S, F]:
 * grouped-query when Hkv < Hq (query head h reads kv head h / (Hq / Hkv),
 * in place), and with qpos (a decode step over a KV cache: row i sees keys
 * j <= i + qpos[0]; qpos random in [0, S), the int inputs' range). */
static void attention_fwd_case(const char *name, ir_dtype dt, int64_t b, int64_t hq, int64_t hkv, int64_t t, int64_t s,
                               int64_t e, int64_t f, bool causal, bool qpos) {
  ir_graph *g = new_graph();
  begin_case();
  ir_value *in[4];
  att_inputs(g, in, T(dt, 4, b, hq, t, e), T(dt, 4, b, hkv, s, e), T(dt, 4, b, hkv, s, f));
  if (qpos) in[3] = input(g, T(IR_DT_I32, 1, D(1)));
  ir_attr a[2] = {ir_attr_float("scale", 1.0 / sqrt((double)e)), ir_attr_int("causal", causal)};
  if (node(g, IR_OP_ATTENTION, in, qpos ? 4 : 3, a, 2, NULL)) run_case(name, g, qpos ? s - t + 1 : 0, NULL);
}

/* Grouped-query forward and backward: attention_grad reads the Hkv shared
 * heads and gives dk [B, Hkv, S, E], dv [B, Hkv, S, F] (the dk/dv kernel's
 * block per kv head walks its Hq / Hkv query heads in order). */
static void attention_gqa_case(const char *name, ir_dtype dt, int64_t b, int64_t hq, int64_t hkv, int64_t t, int64_t s,
                               int64_t e, int64_t f, bool causal) {
  ir_graph *g = new_graph();
  begin_case();
  ir_value *qkv[6];
  att_inputs(g, qkv, T(dt, 4, b, hq, t, e), T(dt, 4, b, hkv, s, e), T(dt, 4, b, hkv, s, f));
  ir_attr a[2] = {ir_attr_float("scale", 1.0 / sqrt((double)e)), ir_attr_int("causal", causal)};
  ir_node *fw = node(g, IR_OP_ATTENTION, qkv, 3, a, 2, NULL);
  if (!fw) return;
  qkv[3] = fw->out[0];
  qkv[4] = fw->out[1];
  qkv[5] = input(g, T(dt, 4, b, hq, t, f));
  ir_node *bw = node(g, IR_OP_ATTENTION_GRAD, qkv, 6, a, 2, NULL);
  if (!bw) return;
  CHECK(bw->out[1]->type.dims[1] == hkv && bw->out[2]->type.dims[1] == hkv);
  run_case(name, g, 0, NULL);
}

/* The same in the `heads` layout fuse-transpose makes: q[B,T,H,E],
 * k[B,S,H,E], v[B,S,H,F], o and do [B,T,H,F], lse [B,H,T] (heads addressed
 * in place, rows H*E apart). */
static void attention_heads_case(const char *name, ir_dtype dt, int64_t b, int64_t h, int64_t t, int64_t s, int64_t e,
                                 int64_t f, bool causal) {
  ir_graph *g = new_graph();
  begin_case();
  ir_value *qkv[6];
  att_inputs(g, qkv, T(dt, 4, b, t, h, e), T(dt, 4, b, s, h, e), T(dt, 4, b, s, h, f));
  ir_attr a[3] = {ir_attr_float("scale", 1.0 / sqrt((double)e)), ir_attr_int("causal", causal), ir_attr_int("heads", h)};
  ir_node *fw = node(g, IR_OP_ATTENTION, qkv, 3, a, 3, NULL);
  if (!fw) return;
  qkv[3] = fw->out[0];
  qkv[4] = fw->out[1];
  qkv[5] = input(g, T(dt, 4, b, t, h, f));
  if (node(g, IR_OP_ATTENTION_GRAD, qkv, 6, a, 3, NULL)) run_case(name, g, 0, NULL);
}

static void test_attention(void) {
  attention_heads_case("attention heads f32 B 2 H 3 T 37 causal", IR_DT_F32, 2, 3, 37, 37, 16, 16, true);
  attention_heads_case("attention heads f32 H 2 T 37 S 45 not causal", IR_DT_F32, 1, 2, 37, 45, 24, 40, false);
  attention_heads_case("attention heads bf16 mma B 2 H 3 T 100 causal", IR_DT_BF16, 2, 3, 100, 100, 32, 32, true);
  attention_heads_case("attention heads f16 mma H 4 T 65 S 70", IR_DT_F16, 1, 4, 65, 70, 16, 24, false);
  attention_heads_case("attention heads bf16 E 24 (no mma) H 2", IR_DT_BF16, 1, 2, 30, 30, 24, 24, true);
  attention_heads_case("attention heads f64 H 2", IR_DT_F64, 1, 2, 20, 20, 8, 8, true);
  attention_case("attention f32 T 37 causal", IR_DT_F32, 3, 37, 37, 16, 16, true);
  attention_case("attention f32 T 37 not causal", IR_DT_F32, 3, 37, 37, 16, 16, false);
  attention_case("attention f32 T 37 S 45 causal", IR_DT_F32, 2, 37, 45, 24, 40, true);
  attention_case("attention f32 T 45 S 37 causal (rows that see no key)", IR_DT_F32, 2, 45, 37, 8, 8, true);
  attention_case("attention f32 T 100 E 64", IR_DT_F32, 1, 100, 100, 64, 64, true);
  attention_case("attention f64", IR_DT_F64, 2, 20, 20, 8, 8, true);
  attention_case("attention bf16 mma T 100 causal", IR_DT_BF16, 2, 100, 100, 32, 32, true);
  attention_case("attention bf16 mma T 37 S 70 not causal", IR_DT_BF16, 2, 37, 70, 16, 24, false);
  attention_case("attention f16 mma T 65", IR_DT_F16, 1, 65, 65, 16, 16, true);
  attention_case("attention bf16 E 24 (no mma)", IR_DT_BF16, 2, 30, 30, 24, 24, true);
  /* the backward on tensor cores (F a multiple of 16; F = 24 above is the
   * backward's scalar fallback under the forward's mma) */
  attention_case("attention bf16 mma T 37 causal", IR_DT_BF16, 2, 37, 37, 32, 16, true);
  attention_case("attention bf16 mma T 100 S 70 not causal", IR_DT_BF16, 2, 100, 70, 16, 32, false);
  attention_case("attention f16 mma T 37 not causal", IR_DT_F16, 2, 37, 37, 16, 16, false);
  attention_case("attention f16 mma T 100 S 130 causal", IR_DT_F16, 1, 100, 130, 32, 32, true);
  attention_case("attention bf16 mma T 45 S 37 causal (rows that see no key)", IR_DT_BF16, 2, 45, 37, 16, 16, true);
  attention_heads_case("attention heads f16 mma H 2 T 37 causal", IR_DT_F16, 2, 2, 37, 37, 32, 32, true);
  attention_heads_case("attention heads bf16 mma H 2 T 100 S 37 not causal", IR_DT_BF16, 1, 2, 100, 37, 64, 64, false);
  /* gpt2's head dims, 4 tiles each way: both stages of the tile pipelines
   * (tgc::att_pipeline) used twice; E = 128 above takes one stage */
  attention_heads_case("attention heads bf16 mma H 2 T 250 causal (4 tiles)", IR_DT_BF16, 1, 2, 250, 250, 64, 64, true);
  /* wide heads: the dk/dv kernel's query tiles of 32 and 16 rows */
  attention_case("attention f16 mma E 80 T 37 causal", IR_DT_F16, 1, 37, 37, 80, 80, true);
  attention_case("attention bf16 mma E 128 T 37 S 45 causal", IR_DT_BF16, 1, 37, 45, 128, 128, true);
  /* grouped-query (the kv heads read in place) and decode steps (qpos) */
  attention_fwd_case("attention GQA f32 Hq 4 Hkv 2 T 37 causal", IR_DT_F32, 2, 4, 2, 37, 37, 16, 16, true, false);
  attention_fwd_case("attention GQA f32 Hq 6 Hkv 2 T 20 S 45 not causal", IR_DT_F32, 1, 6, 2, 20, 45, 8, 24, false, false);
  attention_fwd_case("attention GQA bf16 mma Hq 4 Hkv 1 T 100 causal", IR_DT_BF16, 1, 4, 1, 100, 100, 32, 32, true, false);
  attention_gqa_case("attention_grad GQA f32 Hq 4 Hkv 2 T 37 causal", IR_DT_F32, 2, 4, 2, 37, 37, 16, 16, true);
  attention_gqa_case("attention_grad GQA f64 Hq 6 Hkv 2 T 20 S 45", IR_DT_F64, 1, 6, 2, 20, 45, 8, 24, false);
  attention_gqa_case("attention_grad GQA bf16 mma Hq 4 Hkv 1 T 100 causal", IR_DT_BF16, 1, 4, 1, 100, 100, 32, 32, true);
  attention_gqa_case("attention_grad GQA f16 mma Hq 6 Hkv 3 T 37 S 70", IR_DT_F16, 2, 6, 3, 37, 70, 16, 16, false);
  attention_gqa_case("attention_grad GQA bf16 mma Hq 4 Hkv 2 T 250 causal (4 tiles)", IR_DT_BF16, 1, 4, 2, 250, 250, 64, 64, true);
  attention_fwd_case("attention qpos f32 T 1 S 150", IR_DT_F32, 1, 4, 4, 1, 150, 16, 16, true, true);
  attention_fwd_case("attention qpos GQA f32 Hq 4 Hkv 2 T 1 S 150", IR_DT_F32, 2, 4, 2, 1, 150, 8, 8, true, true);
  attention_fwd_case("attention qpos bf16 (scalar) T 3 S 80", IR_DT_BF16, 1, 2, 2, 3, 80, 32, 32, true, true);
}

/* Which attention kernels the lowering picks: the tensor cores for bf16 /
 * f16 where the MMA shapes fit (the backward needs F a multiple of 16, the
 * forward 8), the scalar kernels otherwise. */
static void attention_choice(ir_dtype dt, int64_t e, int64_t f, bool fwd_mma, bool bwd_mma) {
  ir_graph *g = ir_graph_new("att", "att.tg");
  ir_value *in[6] = {ir_graph_add_input(g, "q", T(dt, 3, 2, 37, e), here()),
                     ir_graph_add_input(g, "k", T(dt, 3, 2, 37, e), here()),
                     ir_graph_add_input(g, "v", T(dt, 3, 2, 37, f), here())};
  ir_attr a[2] = {ir_attr_float("scale", 0.25), ir_attr_int("causal", 1)};
  ir_node *fw = ir_graph_build(g, IR_OP_ATTENTION, in, 3, a, 2, NULL, "o", here(), NULL, 0);
  in[3] = fw->out[0], in[4] = fw->out[1];
  in[5] = ir_graph_add_input(g, "do", T(dt, 3, 2, 37, f), here());
  ir_node *bw = ir_graph_build(g, IR_OP_ATTENTION_GRAD, in, 6, a, 2, NULL, "d", here(), NULL, 0);
  for (int r = 0; r < bw->n_out; r++) ir_graph_add_output(g, bw->out[r]->name, bw->out[r]);
  pass_plan *plan = pass_memplan(g, NULL);
  char err[512];
  cg_program *p = cg_lower(g, plan, NULL, err, sizeof err);
  CHECK(p != NULL);
  if (p) {
    CHECK_EQ_INT(strstr(p->source, "tgc::attention_fwd_mma<") != NULL, fwd_mma);
    CHECK_EQ_INT(strstr(p->source, "tgc::attention_bwd_dkdv_mma<") != NULL, bwd_mma);
    CHECK_EQ_INT(strstr(p->source, "tgc::attention_bwd_dq_mma<") != NULL, bwd_mma);
    CHECK_EQ_INT(strstr(p->source, "tgc::attention_bwd_dkdv<") != NULL, !bwd_mma);
  }
  cg_program_free(p);
  pass_plan_free(plan);
  ir_graph_free(g);
}

static void test_attention_choice(void) {
  attention_choice(IR_DT_BF16, 64, 64, true, true);
  attention_choice(IR_DT_F16, 16, 32, true, true);
  attention_choice(IR_DT_BF16, 16, 24, true, false);
  attention_choice(IR_DT_BF16, 24, 32, false, false);
  attention_choice(IR_DT_BF16, 144, 128, true, false); /* E + F > 256: the dk/dv kernel would spill */
  attention_choice(IR_DT_F32, 64, 64, false, false);
}

/* ---- products ---- */

static void matmul_case(const char *name, ir_type a, ir_type b, bool ta, bool tb) {
  ir_attr at[2] = {ir_attr_int("transpose_a", ta), ir_attr_int("transpose_b", tb)};
  ir_type ts[2] = {a, b};
  one_op(name, IR_OP_MATMUL, ts, 2, at, 2, 7, NULL);
}

static void fused_case(const char *name, const char *expr, ir_type a, ir_type b, ir_type x) {
  ir_type ts[3] = {a, b, x};
  ir_attr e = ir_attr_str("expr", expr);
  one_op(name, IR_OP_FUSED_MATMUL, ts, 3, &e, 1, 0, NULL);
}

/* A bias gradient folded into its weight-gradient product (fuse-transpose's
 * {in_product}): db = reduce_sum(X over its rows), dW = A^T reshape(X); the
 * lowering defers db to dW's step, whose epilogue (or fallback kernel)
 * writes it. */
static void bgrad_case(const char *name, ir_dtype dt, int64_t b, int64_t t, int64_t n, int64_t k) {
  ir_graph *g = new_graph();
  begin_case();
  ir_value *x = input(g, T(dt, 3, b, t, n)), *a = input(g, T(dt, 2, b * t, k));
  int64_t axes[2] = {0, 1}, shape[2] = {b * t, n};
  ir_attr ra[3] = {ir_attr_ints("axes", axes, 2), ir_attr_int("keepdims", 0), ir_attr_int("in_product", 1)};
  ir_attr sh = ir_attr_ints("shape", shape, 2), ta = ir_attr_int("transpose_a", 1);
  ir_node *db = node(g, IR_OP_REDUCE_SUM, &x, 1, ra, 3, NULL);
  ir_node *x2 = db ? node(g, IR_OP_RESHAPE, &x, 1, &sh, 1, NULL) : NULL;
  ir_value *ops[2] = {a, x2 ? x2->out[0] : NULL};
  if (x2 && node(g, IR_OP_MATMUL, ops, 2, &ta, 1, NULL)) {
    CHECK(pass_bias_grad_product(g, db->id) == g->n_nodes - 1);
    run_case(name, g, 0, NULL);
  }
}

static void test_products(void) {
  matmul_case("matmul [37, 29] @ [29, 41]", T(IR_DT_F32, 2, D(37), D(29)), T(IR_DT_F32, 2, D(29), D(41)), false, false);
  matmul_case("matmul x @ W batched", T(IR_DT_F32, 3, D(3), D(5), D(7)), T(IR_DT_F32, 2, D(7), D(9)), false, false);
  matmul_case("matmul batched both", T(IR_DT_F32, 3, D(4), D(5), D(7)), T(IR_DT_F32, 3, D(4), D(7), D(6)), false, false);
  matmul_case("matmul broadcast a", T(IR_DT_F32, 2, D(5), D(7)), T(IR_DT_F32, 3, D(4), D(7), D(6)), false, false);
  matmul_case("matmul broadcast mixed", T(IR_DT_F32, 4, D(2), D(1), D(5), D(7)), T(IR_DT_F32, 4, D(1), D(3), D(7), D(6)),
              false, false);
  matmul_case("matmul transpose_a", T(IR_DT_F32, 3, D(2), D(7), D(5)), T(IR_DT_F32, 3, D(2), D(7), D(6)), true, false);
  matmul_case("matmul transpose_b", T(IR_DT_F32, 3, D(2), D(5), D(7)), T(IR_DT_F32, 2, D(6), D(7)), false, true);
  matmul_case("matmul transpose both", T(IR_DT_F32, 2, D(7), D(5)), T(IR_DT_F32, 2, D(6), D(7)), true, true);
  matmul_case("matmul x^T @ W", T(IR_DT_F32, 3, D(3), D(7), D(5)), T(IR_DT_F32, 2, D(7), D(9)), true, false);
  matmul_case("matmul f64", T(IR_DT_F64, 2, D(9), D(13)), T(IR_DT_F64, 2, D(13), D(11)), false, false);
  matmul_case("matmul bf16", T(IR_DT_BF16, 2, D(16), D(32)), T(IR_DT_BF16, 2, D(24), D(32)), false, true);
  matmul_case("matmul f16 batched", T(IR_DT_F16, 3, D(2), D(8), D(16)), T(IR_DT_F16, 3, D(2), D(16), D(8)), false, false);
  ir_type a = T(IR_DT_F32, 3, D(2), D(9), D(16)), w = T(IR_DT_F32, 2, D(16), D(24)), bias = T(IR_DT_F32, 1, D(24));
  ir_type full = T(IR_DT_F32, 3, D(2), D(9), D(24));
  for (int pass = 0; pass < 2; pass++) { /* with cuBLASLt's epilogues, then plain products + the epilogue kernels */
    flush();
    if (pass) setenv("TGC_CUDA_NO_EPILOGUES", "1", 1);
    fused_case("fused_matmul bias", "(add $0 $1)", a, w, bias);
    fused_case("fused_matmul gelu bias", "(gelu (add $0 $1))", a, w, bias);
    fused_case("fused_matmul relu bias", "(relu (add $1 $0))", a, w, bias);
    fused_case("fused_matmul dgelu", "(mul $0 (gelu_grad $1))", a, w, full);
    fused_case("fused_matmul another epilogue", "(mul (tanh $0) $1)", a, w, bias);
    { /* dropout of the product (a matmul's dropout epilogue): key $1, positions $2 $3 $4 */
      ir_type ts[6] = {a, w, T(IR_DT_I64, 0), T(IR_DT_I64, 3, D(2), D(1), D(1)), T(IR_DT_I64, 3, D(1), D(9), D(1)),
                       T(IR_DT_I64, 3, D(1), D(1), D(24))};
      ir_attr e = ir_attr_str(
          "expr", "(dropout 0.25 3 $0 $1 (add (add (mul $2 (const i64 216)) (mul $3 (const i64 24))) (mul $4 (const i64 1))))");
      one_op("fused_matmul dropout epilogue", IR_OP_FUSED_MATMUL, ts, 6, &e, 1, 1000000, NULL);
    }
    bgrad_case("bias gradient in the weight-gradient product f32", IR_DT_F32, 2, 9, 24, 16);
    bgrad_case("bias gradient in the weight-gradient product bf16, 300 columns", IR_DT_BF16, 3, 37, 300, 24);
    flush();
    if (pass) unsetenv("TGC_CUDA_NO_EPILOGUES");
  }
}

/* ---- layout ---- */

static void test_layout(void) {
  int64_t p1[3] = {2, 0, 1}, p2[4] = {0, 2, 1, 3};
  ir_type t3 = T(IR_DT_F32, 3, D(5), D(7), D(9)), t4 = T(IR_DT_F32, 4, D(2), D(16), D(4), D(8));
  ir_attr perm1 = ir_attr_ints("perm", p1, 3), perm2 = ir_attr_ints("perm", p2, 4);
  one_op("transpose [2, 0, 1]", IR_OP_TRANSPOSE, &t3, 1, &perm1, 1, 0, NULL);
  one_op("transpose heads [0, 2, 1, 3]", IR_OP_TRANSPOSE, &t4, 1, &perm2, 1, 0, NULL);
  ir_attr sl[4] = {ir_attr_int("axis", 1), ir_attr_int("start", 1), ir_attr_int("end", 7), ir_attr_int("step", 2)};
  one_op("slice with a step", IR_OP_SLICE, &t3, 1, sl, 4, 0, NULL);
  ir_attr us[5] = {ir_attr_int("axis", 1), ir_attr_int("start", 2), ir_attr_int("end", 16), ir_attr_int("step", 2),
                   ir_attr_int("size", 17)};
  one_op("unslice", IR_OP_UNSLICE, &t3, 1, us, 5, 0, NULL);
  for (int axis = 0; axis < 3; axis++) {
    ir_type parts[3] = {T(IR_DT_F32, 3, D(3), D(4), D(5)), T(IR_DT_F32, 3, D(3), D(4), D(5)),
                        T(IR_DT_F32, 3, D(3), D(4), D(5))};
    parts[1].dims[axis] = 2, parts[2].dims[axis] = 7;
    ir_attr ax = ir_attr_int("axis", axis);
    char nm[64];
    snprintf(nm, sizeof nm, "concat axis %d", axis);
    one_op(nm, IR_OP_CONCAT, parts, 3, &ax, 1, 0, NULL);
    int64_t sizes[3] = {1, 2, 2};
    ir_type whole = T(IR_DT_F32, 3, D(5), D(5), D(5));
    ir_attr sp[2] = {ir_attr_int("axis", axis), ir_attr_ints("sizes", sizes, 3)};
    snprintf(nm, sizeof nm, "split axis %d", axis);
    one_op(nm, IR_OP_SPLIT, &whole, 1, sp, 2, 0, NULL);
  }
  ir_type q[3] = {T(IR_DT_F32, 3, D(4), D(16), D(32)), T(IR_DT_F32, 3, D(4), D(16), D(32)), T(IR_DT_F32, 3, D(4), D(16), D(32))};
  int64_t s96[3] = {32, 32, 32};
  ir_attr qa = ir_attr_int("axis", 2);
  one_op("concat qkv (vectorized)", IR_OP_CONCAT, q, 3, &qa, 1, 0, NULL);
  ir_type qkv = T(IR_DT_F32, 3, D(4), D(16), D(96));
  ir_attr qs[2] = {ir_attr_int("axis", 2), ir_attr_ints("sizes", s96, 3)};
  one_op("split qkv (vectorized)", IR_OP_SPLIT, &qkv, 1, qs, 2, 0, NULL);
  int64_t shape[3] = {4, 5, 6};
  ir_type bt = T(IR_DT_F32, 2, D(5), D(1));
  ir_attr bs = ir_attr_ints("shape", shape, 3);
  one_op("broadcast", IR_OP_BROADCAST, &bt, 1, &bs, 1, 0, NULL);
  ir_graph *g = new_graph();
  begin_case();
  ir_type ct = T(IR_DT_BF16, 2, D(3), D(7));
  ir_attr cv = ir_attr_float("value", 2.5);
  if (node(g, IR_OP_CONST, NULL, 0, &cv, 1, &ct)) run_case("const bf16", g, 0, NULL);
  begin_case();
  ir_type it = T(IR_DT_I64, 3, D(3), D(4), D(5));
  ir_attr ia = ir_attr_int("axis", 1);
  if (node(g, IR_OP_IOTA, NULL, 0, &ia, 1, &it)) run_case("iota", g, 0, NULL);
  ir_type cm = T(IR_DT_F32, 3, D(2), D(5), D(8));
  one_op("causal_mask", IR_OP_CAUSAL_MASK, &cm, 1, NULL, 0, 0, NULL);
  ir_attr fill = ir_attr_float("fill", -1e4);
  one_op("causal_mask fill", IR_OP_CAUSAL_MASK, &cm, 1, &fill, 1, 0, NULL);
  /* dropout, training form: the same mask (key and positions random inputs) in every float dtype */
  static const int64_t dstr[3] = {70, 7, 1};
  ir_attr da[3] = {ir_attr_float("p", 0.3), ir_attr_int("stream", 5), ir_attr_ints("strides", dstr, 3)};
  for (int i = 0; i < 4; i++) {
    ir_type dt[5] = {T(FLOATS[i], 3, D(3), D(5), D(7)), T(IR_DT_I64, 0), T(IR_DT_I64, 3, D(3), D(1), D(1)),
                     T(IR_DT_I64, 3, D(1), D(5), D(1)), T(IR_DT_I64, 3, D(1), D(1), D(7))};
    char name[64];
    snprintf(name, sizeof name, "dropout %s", ir_dtype_name(FLOATS[i]));
    one_op(name, IR_OP_DROPOUT, dt, 5, da, 3, 1000000, NULL);
  }
  /* dropout inside a fused expression (fuse-elementwise's form): x + b, dropped, times b */
  static const char *const dexpr =
      "(mul (dropout 0.3 5 (add $0 $1) $2 (add (add (mul $3 (const i64 70)) (mul $4 (const i64 7))) (mul $5 (const i64 1)))) "
      "$1)";
  ir_attr fe = ir_attr_str("expr", dexpr);
  for (int i = 0; i < 4; i++) {
    ir_type ft[6] = {T(FLOATS[i], 3, D(3), D(5), D(7)), T(FLOATS[i], 1, D(7)), T(IR_DT_I64, 0),
                     T(IR_DT_I64, 3, D(3), D(1), D(1)), T(IR_DT_I64, 3, D(1), D(5), D(1)), T(IR_DT_I64, 3, D(1), D(1), D(7))};
    char name[64];
    snprintf(name, sizeof name, "fused dropout %s", ir_dtype_name(FLOATS[i]));
    one_op(name, IR_OP_FUSED, ft, 6, &fe, 1, 1000000, NULL);
  }
  ir_type dx = T(IR_DT_BF16, 2, D(3), D(5));
  one_op("dropout, inference form", IR_OP_DROPOUT, &dx, 1, da, 1, 0, NULL);
  ir_type mm[2] = {T(IR_DT_F32, 3, D(2), D(5), D(7)), T(IR_DT_F32, 3, D(2), D(7), D(3))};
  ir_attr eq = ir_attr_str("eq", "bij,bjk->bik");
  one_op("einsum bij,bjk->bik", IR_OP_EINSUM, mm, 2, &eq, 1, 0, NULL);
  ir_type sq = T(IR_DT_F32, 2, D(6), D(6));
  ir_attr tr = ir_attr_str("eq", "ii->");
  one_op("einsum trace", IR_OP_EINSUM, &sq, 1, &tr, 1, 0, NULL);
}

/* Multi-tensor launches (codegen/emit_group.c): consecutive fused nodes of
 * one expression over tensors of 37, 1000 and 3 elements (no common vector
 * width but 1) and of 64 and 128 (width 4), with a scalar operand and an
 * f32 or bf16 one, become one kernel each (the other steps deferred);
 * computed as the cpu does. */
static void group_case(const char *name, const int64_t *sizes, int n, ir_dtype third) {
  ir_graph *g = new_graph();
  begin_case();
  ir_value *scale = input(g, T(IR_DT_F64, 0));
  ir_attr e = ir_attr_str("expr", third == IR_DT_F32 ? "(mul (add $0 (cast f32 $1)) $2); (sqrt (abs #0))"
                                                     : "(mul (add $0 (cast f32 $1)) (cast f32 $2)); (sqrt (abs #0))");
  int first_node = g->n_nodes;
  for (int k = 0; k < n; k++) {
    ir_value *ins[3] = {input(g, T(IR_DT_F32, 1, sizes[k])), scale, input(g, T(third, 1, sizes[k]))};
    node(g, IR_OP_FUSED, ins, 3, &e, 1, NULL);
  }
  pass_plan *plan = pass_memplan(g, NULL); /* the n nodes are one group (analysis's rule) */
  int first = 0;
  while (plan && first < plan->n_steps && plan->steps[first].node != first_node) first++;
  CHECK(plan && first < plan->n_steps && pass_group_size(g, plan, NULL, 0, first) == n);
  pass_plan_free(plan);
  run_case(name, g, 0, NULL);
}

/* ... with {nonfinite} (fuse-elementwise's fold of the trainer's count):
 * each member counts the NaNs of log(#0) (about half its elements) as it
 * stores them, over 1 to 1024 blocks (the partials and the last block's
 * ticket), the count equal to the cpu's chunked count; members whose bit
 * of counting is 0 count nothing (one group all the same). */
static void group_count_case(const char *name, const int64_t *sizes, int n, unsigned counting) {
  ir_graph *g = new_graph();
  begin_case();
  ir_value *scale = input(g, T(IR_DT_F64, 0));
  static const int64_t which[1] = {1};
  ir_attr e[2] = {ir_attr_str("expr", "(mul (add $0 (cast f32 $1)) $2); (log #0)"), ir_attr_ints("nonfinite", which, 1)};
  for (int k = 0; k < n; k++) {
    ir_value *ins[3] = {input(g, T(IR_DT_F32, 1, sizes[k])), scale, input(g, T(IR_DT_F32, 1, sizes[k]))};
    node(g, IR_OP_FUSED, ins, 3, e, counting >> k & 1 ? 2 : 1, NULL);
  }
  run_case(name, g, 0, NULL);
}

static void test_groups(void) {
  static const int64_t odd[3] = {37, 1000, 3}, even[2] = {64, 128}, big[3] = {300000, 37, 5000};
  group_case("multi-tensor group, odd sizes", odd, 3, IR_DT_F32);
  group_case("multi-tensor group, vectorized", even, 2, IR_DT_F32);
  /* operands of the results' shape in another dtype (mixed precision's bf16 gradients beside f32 state) */
  group_case("multi-tensor group, a bf16 operand", even, 2, IR_DT_BF16);
  group_case("multi-tensor group, a bf16 operand, odd sizes", odd, 3, IR_DT_BF16);
  group_count_case("multi-tensor group counting, odd sizes", odd, 3, 7);
  group_count_case("multi-tensor group counting, many blocks", big, 3, 7);
  group_count_case("multi-tensor group counting, one member", big + 2, 1, 1);
  /* members with and without a count in one group (tp: some counts read a mesh slice) */
  group_count_case("multi-tensor group, the middle member counting", big, 3, 2);
  group_count_case("multi-tensor group, the first and last counting", odd, 3, 5);
  /* the lowering: one kernel for the three nodes, the first two steps deferred */
  ir_graph *g = ir_graph_new("group", "group.tg");
  ir_value *scale = ir_graph_add_input(g, "s", T(IR_DT_F64, 0), here());
  ir_attr e = ir_attr_str("expr", "(mul (add $0 (cast f32 $1)) $2); (sqrt (abs #0))");
  for (int k = 0; k < 3; k++) {
    char a[8], b[8];
    snprintf(a, sizeof a, "a%d", k), snprintf(b, sizeof b, "b%d", k);
    ir_value *ins[3] = {ir_graph_add_input(g, a, T(IR_DT_F32, 1, odd[k]), here()), scale,
                        ir_graph_add_input(g, b, T(IR_DT_F32, 1, odd[k]), here())};
    ir_node *nd = ir_graph_build(g, IR_OP_FUSED, ins, 3, &e, 1, NULL, "r", here(), NULL, 0);
    for (int r = 0; r < nd->n_out; r++) ir_graph_add_output(g, nd->out[r]->name, nd->out[r]);
  }
  pass_plan *plan = pass_memplan(g, NULL);
  char err[512];
  cg_program *p = cg_lower(g, plan, NULL, err, sizeof err);
  CHECK(p != NULL);
  if (p) {
    CHECK_EQ_INT(p->n_kernels, 1);
    CHECK_EQ_INT(p->n_launches, 1);
    CHECK(p->steps[0].deferred && p->steps[1].deferred && !p->steps[2].deferred);
    CHECK_EQ_INT(p->steps[2].n_actions, 1);
    CHECK_EQ_INT(p->kernels[0].n_args, 3 * 5);
    CHECK_EQ_INT(p->args[0].back, 2);
    size_t ln = strlen(p->kernels[0].name); /* named after the first member's first result */
    CHECK(ln > 6 && strcmp(p->kernels[0].name + ln - 6, "_group") == 0 && strncmp(p->kernels[0].name, "k_r", 3) == 0);
  }
  cg_program_free(p);
  pass_plan_free(plan);
  ir_graph_free(g);
}

/* g planned and lowered as the backend does (*plan to free with the program: lowered_free). */
static cg_program *lowered(const ir_graph *g, pass_plan **plan) {
  *plan = pass_memplan(g, NULL);
  char err[512] = "no plan";
  cg_program *p = *plan ? cg_lower(g, *plan, NULL, err, sizeof err) : NULL;
  if (!p) fprintf(stderr, "lowering %s: %s\n", g->name, err);
  CHECK(p != NULL);
  return p;
}

static void lowered_free(cg_program *p, pass_plan *plan, ir_graph *g) {
  cg_program_free(p);
  pass_plan_free(plan);
  ir_graph_free(g);
}

/* The embedding gradient's lowering (codegen/emit_nn.c): the positions
 * bucketed once (a memset of the counts, then count, scan and place
 * kernels), then one block per row that can have positions, min(P, V) of
 * them: every id is read twice, not once per block of rows. */
static void test_embedding_grad_lowering(void) {
  ir_graph *g = ir_graph_new("embgrad", "embgrad.tg");
  ir_value *ins[2] = {ir_graph_add_input(g, "ids", T(IR_DT_I32, 2, D(4), D(25)), here()),
                      ir_graph_add_input(g, "g", T(IR_DT_F32, 3, D(4), D(25), D(300)), here())};
  ir_attr vocab = ir_attr_int("vocab", 5000);
  ir_node *nd = ir_graph_build(g, IR_OP_EMBEDDING_GRAD, ins, 2, &vocab, 1, NULL, "dw", here(), NULL, 0);
  ir_graph_add_output(g, "dw", nd->out[0]);
  pass_plan *plan;
  cg_program *p = lowered(g, &plan);
  if (p) {
    static const char *const suffix[4] = {"_count", "_scan", "_place", "k_dw"};
    CHECK_EQ_INT(p->n_kernels, 4);
    CHECK_EQ_INT(p->n_launches, 4);
    CHECK_EQ_INT(p->n_memsets, 1);
    for (int k = 0; k < p->n_kernels && k < 4; k++) {
      size_t ln = strlen(p->kernels[k].name), ls = strlen(suffix[k]);
      CHECK(k == 3 ? strcmp(p->kernels[k].name, suffix[k]) == 0 : ln > ls && strcmp(p->kernels[k].name + ln - ls, suffix[k]) == 0);
    }
    for (int a = 0; a < p->n_actions; a++)
      if (p->actions[a].kind == CG_ACT_KERNEL && p->actions[a].kernel == 3) {
        CHECK_EQ_INT(p->actions[a].grid[0], 100); /* min(P = 100, V = 5000) blocks */
        CHECK_EQ_INT(p->actions[a].grid[1], 2);   /* 300 columns */
      }
  }
  lowered_free(p, plan, g);
}

/* The LM head's rows kernel takes its vector width from the chunk buffer's
 * row stride (V rounded up to 64), not from V: 37 bf16 classes read 8 at a
 * time with a tail of 5 (an odd V made it 1: 2-byte loads, 1.6x the time
 * of GPT-2's rows kernel on an H200 at V = 50,257 against 50,264). The
 * values are checked against the cpu by the linear_cross_entropy cases. */
static void test_lm_head_rows_width(void) {
  ir_graph *g = ir_graph_new("lce", "lce.tg");
  ir_value *ins[4] = {ir_graph_add_input(g, "h", T(IR_DT_BF16, 2, D(9), D(40)), here()),
                      ir_graph_add_input(g, "w", T(IR_DT_BF16, 2, D(37), D(40)), here()),
                      ir_graph_add_input(g, "t", T(IR_DT_I32, 1, D(9)), here()),
                      ir_graph_add_input(g, "gl", T(IR_DT_BF16, 0), here())};
  ir_attr at[2] = {ir_attr_int("chunk", 8), ir_attr_int("transpose_b", 1)};
  ir_node *nd = ir_graph_build(g, IR_OP_LINEAR_CROSS_ENTROPY, ins, 4, at, 2, NULL, "r", here(), NULL, 0);
  for (int r = 0; r < nd->n_out; r++) ir_graph_add_output(g, nd->out[r]->name, nd->out[r]);
  pass_plan *plan;
  cg_program *p = lowered(g, &plan);
  if (p) CHECK(strstr(p->source, "tgc::ce_grad_row<8, true>(x, in2 + 0LL, row, 37LL") != NULL);
  lowered_free(p, plan, g);
}

int main(void) {
  const char *which = getenv("TGC_TEST_BACKEND");
  bool real = which && strcmp(which, "cuda") == 0;
  if (real) device_backend = &rt_cuda_backend;
  for (int pass = 0; pass < (real ? 1 : 2); pass++) {
    racecheck = pass == 1;
    cases = failed_cases = 0;
    if (!racecheck) {
      test_elementwise();
      flush();
      test_layout();
      test_products();
      flush();
      test_groups();
      flush();
      test_embedding_grad_lowering();
      test_lm_head_rows_width();
      test_attention_choice();
    }
    test_reductions();
    test_row_ops();
    test_model_ops();
    test_attention();
    flush();
    printf("%s: %d cases, %d failed\n", racecheck ? "with racecheck (kernels with shared memory)" : "every kernel", cases,
           failed_cases);
  }
  return check_done();
}
