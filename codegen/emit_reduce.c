/* codegen/emit_reduce.c — reductions and row operations: reduce_sum,
 * reduce_mean, reduce_max, softmax / log_softmax, layernorm, rmsnorm,
 * add_layernorm, layernorm_grad, rmsnorm_grad, argmax, count_nonfinite.
 *
 * Reductions. The input's dims (size-1 dims dropped) are kept (K) or
 * reduced (R); adjacent dims of one kind merge. Two kernels:
 *   rows     the reduced dims are the innermost ([K, R]): a warp per
 *            output when R is short, else a block (tgc::reduce_row:
 *            16-byte loads, butterfly sums);
 *   strided  anything else (a bias gradient [R, K], a middle axis): a
 *            thread per output, consecutive threads on consecutive
 *            outputs (coalesced), a loop per reduced dim in row-major
 *            order (the CPU's order).
 * Few outputs over a long reduction split the reduction: each of G blocks
 * (rows) or G chunks of the outermost reduced dim (strided) leaves a
 * partial in the workspace, and a second kernel adds the G partials in
 * order. No atomics: the result does not depend on timing. Partials and
 * sums are in double for every dtype, as the CPU's reference kernels sum
 * (memory-bound kernels: the wider adds cost nothing measurable), so the
 * results differ from the CPU's only by the order of the additions.
 *
 * Row operations over the last axis (softmax, norms, argmax) run a warp
 * per row up to 2048 elements, else a block per row; softmax over another
 * axis runs a thread per line. Their statistics (max, sums, mean,
 * variance) are in double too; each element's result is computed in double
 * from them and rounded once to its dtype, as on the CPU.
 */
#include <stdlib.h>
#include <string.h>

#include "emit.h"

enum { THREADS = 256, WARP_ROW_MAX = 2048 };

/* The accumulation type of every reduction and row statistic. */
static const char *const ACC = "double";

/* Widest W (elements per 16-byte access) dividing len for elements of the given sizes. */
static int row_width(int64_t len, const ir_dtype *dts, int n) {
  size_t widest = 1;
  for (int i = 0; i < n; i++)
    if (ir_dtype_size(dts[i]) > widest) widest = ir_dtype_size(dts[i]);
  int w = (int)(16 / widest);
  while (w > 1 && len % w != 0) w /= 2;
  return w;
}

/* Launch of a row kernel over `rows` rows: warp or block per row. */
static void row_launch(cg_ctx *c, int k, int64_t rows, bool warp) {
  cg_launch(c, k, warp ? (rows + THREADS / 32 - 1) / (THREADS / 32) : rows, 1, THREADS, 0);
}

/* "row" of this thread and the guard, for warp- or block-per-row kernels. */
static void row_prologue(cg_ctx *c, int64_t rows, bool warp) {
  if (warp) cg_src(c, "  const long long row = (long long)blockIdx.x * %d + tgc_warp_id();\n  if (row >= %lldLL) return;\n",
                   THREADS / 32, (long long)rows);
  else cg_src(c, "  const long long row = blockIdx.x;\n");
}

/* ---- reductions ---- */

typedef struct {
  int n;              /* merged dims */
  int64_t ext[IR_MAX_RANK], stride[IR_MAX_RANK];
  bool red[IR_MAX_RANK];
} rdims;

static void reduce_dims(const ir_type *t, const bool *reduced, rdims *m) {
  int64_t s[IR_MAX_RANK], acc = 1;
  for (int d = t->rank - 1; d >= 0; d--) s[d] = acc, acc *= t->dims[d];
  m->n = 0;
  for (int d = 0; d < t->rank; d++) {
    if (t->dims[d] == 1) continue;
    if (m->n > 0 && m->red[m->n - 1] == reduced[d] && m->stride[m->n - 1] == s[d] * t->dims[d]) {
      m->ext[m->n - 1] *= t->dims[d];
      m->stride[m->n - 1] = s[d];
    } else {
      m->ext[m->n] = t->dims[d], m->stride[m->n] = s[d], m->red[m->n] = reduced[d];
      m->n++;
    }
  }
}

static const char *reduce_step(int op, const char *acc, const char *x, char *buf, size_t len) {
  if (op == 2) snprintf(buf, len, "%s = tgc_max_nan(%s, %s);", acc, acc, x);
  else snprintf(buf, len, "%s += %s;", acc, x);
  return buf;
}

/* The strided reduction: a thread per output; split G ways over the
 * outermost reduced dim when G > 1 (partials into the workspace). */
static int emit_strided(cg_ctx *c, const ir_node *n, const rdims *m, int op, int64_t O, int64_t R) {
  const ir_type *ot = &n->out[0]->type;
  const char *A = ACC, *OT = cg_ctype(ot->dtype);
  int outer_red = -1;
  for (int d = 0; d < m->n && outer_red < 0; d++)
    if (m->red[d]) outer_red = d;
  int64_t G = 1;
  if (O < 16384 && R >= 4096) {
    G = R / 256;
    if (G > 256) G = 256;
    if (G > m->ext[outer_red]) G = m->ext[outer_red];
  }
  int64_t chunk = (m->ext[outer_red] + G - 1) / G;
  G = (m->ext[outer_red] + chunk - 1) / chunk;
  size_t asize = 8;
  if (G > 1) cg_need_workspace(c, (size_t)(G * O) * asize);
  char init[64];
  cg_literal(init, sizeof init, op == 2 ? -1.0 / 0.0 : 0.0, IR_DT_F64);
  int k = cg_kernel_begin(c, G > 1 ? "partial" : NULL);
  cg_kernel_signature(c, k, THREADS, G > 1);
  cg_src(c, "  TGC_GRID_STRIDE_LOOP(o, %lldLL) {\n", (long long)O);
  /* the base offset of output o: its kept coordinates */
  cg_src(c, "    long long q = o, base = 0;\n");
  for (int d = m->n - 1; d >= 0; d--)
    if (!m->red[d]) cg_src(c, "    base += q %% %lldLL * %lldLL; q /= %lldLL;\n", (long long)m->ext[d], (long long)m->stride[d], (long long)m->ext[d]);
  cg_src(c, "    %s acc = %s;\n", A, init);
  for (int d = 0; d < m->n; d++) {
    if (!m->red[d]) continue;
    if (d == outer_red && G > 1)
      cg_src(c, "    for (long long r%d = blockIdx.y * %lldLL; r%d < %lldLL && r%d < (blockIdx.y + 1) * %lldLL; r%d++)\n", d,
             (long long)chunk, d, (long long)m->ext[d], d, (long long)chunk, d);
    else cg_src(c, "    for (long long r%d = 0; r%d < %lldLL; r%d++)\n", d, d, (long long)m->ext[d], d);
  }
  cg_src(c, "    {\n      const %s x = tgc_acc(in0[base", A);
  for (int d = 0; d < m->n; d++)
    if (m->red[d]) cg_src(c, " + r%d * %lldLL", d, (long long)m->stride[d]);
  char step[128];
  cg_src(c, "]);\n      %s\n    }\n", reduce_step(op, "acc", "x", step, sizeof step));
  if (G > 1) cg_src(c, "    ((%s *)ws)[blockIdx.y * %lldLL + o] = acc;\n", A, (long long)O);
  else if (op == 1) cg_src(c, "    out0[o] = tgc_round<%s>(acc / (%s)%lldLL);\n", OT, A, (long long)R);
  else cg_src(c, "    out0[o] = tgc_round<%s>(acc);\n", OT);
  cg_src(c, "  }\n");
  cg_kernel_end(c, k);
  cg_launch(c, k, cg_blocks(O, THREADS), G, THREADS, 0);
  if (G == 1) return 0;
  k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, THREADS, true);
  cg_src(c, "  TGC_GRID_STRIDE_LOOP(o, %lldLL) {\n    %s acc = %s;\n", (long long)O, A, init);
  cg_src(c, "    for (int g = 0; g < %lld; g++) { const %s x = ((const %s *)ws)[g * %lldLL + o]; %s }\n", (long long)G, A, A,
         (long long)O, reduce_step(op, "acc", "x", step, sizeof step));
  cg_src(c, "    out0[o] = tgc_round<%s>(acc", OT);
  if (op == 1) cg_src(c, " / (%s)%lldLL", A, (long long)R);
  cg_src(c, ");\n  }\n");
  cg_kernel_end(c, k);
  cg_launch(c, k, cg_blocks(O, THREADS), 1, THREADS, 0);
  return 0;
}

/* The row reduction [O, R]: a warp or a block per output; G blocks per
 * output with partials when there are few outputs and long rows. */
static int emit_rows(cg_ctx *c, const ir_node *n, int op, int64_t O, int64_t R) {
  const ir_type *it = &n->in[0]->type, *ot = &n->out[0]->type;
  const char *A = ACC, *OT = cg_ctype(ot->dtype);
  size_t asize = 8;
  int64_t G = 1;
  if (O < 64 && R >= 65536) {
    G = R / 16384;
    if (G > 256) G = 256;
  }
  int W = row_width(R, &it->dtype, 1);
  int64_t chunk = (R + G - 1) / G;
  chunk = (chunk + W - 1) / W * W; /* every chunk a whole number of W-wide loads */
  G = (R + chunk - 1) / chunk;
  bool warp = G == 1 && R <= WARP_ROW_MAX;
  char init[64];
  cg_literal(init, sizeof init, op == 2 ? -1.0 / 0.0 : 0.0, IR_DT_F64);
  int k = cg_kernel_begin(c, G > 1 ? "partial" : NULL);
  cg_kernel_signature(c, k, THREADS, G > 1);
  cg_src(c, "  TGC_SHARED(%s, scratch, 32);\n", A);
  if (G > 1) {
    cg_need_workspace(c, (size_t)(G * O) * asize);
    cg_src(c, "  const long long row = blockIdx.x, g = blockIdx.y, start = g * %lldLL;\n", (long long)chunk);
    cg_src(c, "  const long long len = %lldLL - start < %lldLL ? %lldLL - start : %lldLL;\n", (long long)R, (long long)chunk,
           (long long)R, (long long)chunk);
    cg_src(c, "  const %s acc = tgc::reduce_row<%s, %d, %d, false>(in0 + row * %lldLL + start, len, scratch);\n", A, A,
           op == 1 ? 0 : op, W, (long long)R);
    cg_src(c, "  if (tgc_thread_rank() == 0) ((%s *)ws)[row * %lldLL + g] = acc;\n", A, (long long)G);
    cg_kernel_end(c, k);
    cg_launch(c, k, O, G, THREADS, 0);
    /* the partials: a warp per output */
    k = cg_kernel_begin(c, NULL);
    cg_kernel_signature(c, k, THREADS, true);
    cg_src(c, "  TGC_SHARED(%s, scratch, 32);\n", A);
    row_prologue(c, O, true);
    cg_src(c, "  const %s acc = tgc::reduce_row<%s, %d, 1, true>((const %s *)ws + row * %lldLL, %lldLL, scratch);\n", A, A,
           op == 1 ? 0 : op, A, (long long)G, (long long)G);
    if (op == 1) cg_src(c, "  if (tgc_lane_id() == 0) out0[row] = tgc_round<%s>(acc / (%s)%lldLL);\n", OT, A, (long long)R);
    else cg_src(c, "  if (tgc_lane_id() == 0) out0[row] = tgc_round<%s>(acc);\n", OT);
    cg_kernel_end(c, k);
    row_launch(c, k, O, true);
    return 0;
  }
  row_prologue(c, O, warp);
  cg_src(c, "  const %s acc = tgc::reduce_row<%s, %d, %d, %s>(in0 + row * %lldLL, %lldLL, scratch);\n", A, A, op, W,
         warp ? "true" : "false", (long long)R, (long long)R);
  cg_src(c, "  if (%s == 0) out0[row] = tgc_round<%s>(acc);\n", warp ? "tgc_lane_id()" : "tgc_thread_rank()", OT);
  cg_kernel_end(c, k);
  row_launch(c, k, O, warp);
  return 0;
}

int cg_emit_reduce(cg_ctx *c, const ir_node *n) {
  if (ir_node_attr_int(n, "in_product", 0)) { /* a bias gradient: the weight-gradient product's epilogue computes it */
    if (pass_bias_grad_product(c->g, c->plan->steps[c->step].node) < 0)
      return cg_fail(c, "marked in_product, but no weight-gradient product reads its operand after it");
    c->p->steps[c->step].deferred = true; /* the product's step writes the result at the address kept here */
    return 0;
  }
  const ir_type *it = &n->in[0]->type, *ot = &n->out[0]->type;
  int op = n->op == IR_OP_REDUCE_SUM ? 0 : n->op == IR_OP_REDUCE_MEAN ? 1 : 2;
  bool reduced[IR_MAX_RANK] = {0};
  const ir_attr *axes = ir_node_attr(n, "axes");
  if (!axes)
    for (int d = 0; d < it->rank; d++) reduced[d] = true;
  else
    for (int i = 0; i < axes->n; i++) {
      if (axes->ints[i] < 0 || axes->ints[i] >= it->rank) return cg_fail(c, "axis out of range");
      reduced[axes->ints[i]] = true;
    }
  int64_t O = cg_numel(ot), R = 1;
  for (int d = 0; d < it->rank; d++)
    if (reduced[d]) R *= it->dims[d];
  if (O == 0) return 0;
  if (R == 0) { /* empty reductions: 0 (sum), NaN (mean: 0 / 0), -inf (max) */
    ir_expr_inst ins = {.kind = IR_EXPR_CONST, .dtype = ot->dtype, .value = op == 0 ? 0.0 : op == 1 ? 0.0 / 0.0 : -1.0 / 0.0,
                        .arg = {-1, -1, -1}};
    int root = 0;
    ir_expr e = {.n_ins = 1, .n_results = 1, .ins = &ins, .results = &root};
    ir_dtype res = ot->dtype;
    return cg_emit_map(c, NULL, ot, &res, 1, &e, NULL, 0);
  }
  rdims m;
  reduce_dims(it, reduced, &m);
  bool any_red = false;
  for (int d = 0; d < m.n; d++) any_red |= m.red[d];
  if (!any_red) { /* every reduced dim has size 1: each output is its one element */
    cg_operand_map map = {.param = "in0", .dt = it->dtype};
    cg_broadcast_map(ot, ot->rank, ot->dims, &map);
    ir_dtype res = ot->dtype;
    return cg_emit_map(c, NULL, ot, &res, 1, NULL, &map, 1);
  }
  bool trailing = m.red[m.n - 1] && (m.n == 1 || !m.red[m.n - 2]);
  for (int d = 0; trailing && d < m.n - 1; d++) trailing = !m.red[d];
  if (trailing) return emit_rows(c, n, op, O, R);
  return emit_strided(c, n, &m, op, O, R);
}

/* ---- row operations ---- */

int cg_emit_softmax(cg_ctx *c, const ir_node *n) {
  const ir_type *it = &n->in[0]->type, *ot = &n->out[0]->type;
  int64_t axis = ir_node_attr_int(n, "axis", it->rank - 1);
  if (axis < 0 || axis >= it->rank) return cg_fail(c, "bad axis");
  bool log_form = n->op == IR_OP_LOG_SOFTMAX;
  const char *A = ACC;
  int64_t dim = it->dims[axis], outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= it->dims[d];
  for (int d = (int)axis + 1; d < it->rank; d++) inner *= it->dims[d];
  if (outer * inner * dim == 0) return 0;
  int k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, THREADS, false);
  if (inner > 1) { /* a thread per line */
    cg_src(c, "  TGC_GRID_STRIDE_LOOP(l, %lldLL) {\n", (long long)(outer * inner));
    cg_src(c, "    const long long base = l / %lldLL * %lldLL + l %% %lldLL;\n", (long long)inner, (long long)(dim * inner),
           (long long)inner);
    cg_src(c, "    tgc::softmax_strided<%s, %s>(in0 + base, out0 + base, %lldLL, %lldLL);\n  }\n", A,
           log_form ? "true" : "false", (long long)dim, (long long)inner);
    cg_kernel_end(c, k);
    cg_launch(c, k, cg_blocks(outer * inner, THREADS), 1, THREADS, 0);
    return 0;
  }
  ir_dtype dts[2] = {it->dtype, ot->dtype};
  int W = row_width(dim, dts, 2);
  bool warp = dim <= WARP_ROW_MAX;
  cg_src(c, "  TGC_SHARED(%s, scratch, 32);\n", A);
  row_prologue(c, outer, warp);
  cg_src(c, "  tgc::softmax_row<%s, %d, %s, %s>(in0 + row * %lldLL, out0 + row * %lldLL, %lldLL, scratch);\n", A, W,
         warp ? "true" : "false", log_form ? "true" : "false", (long long)dim, (long long)dim, (long long)dim);
  cg_kernel_end(c, k);
  row_launch(c, k, outer, warp);
  return 0;
}

/* A norm's kernel (with the workspace or not) up to its block scratch; its
 * eps attribute as a double literal in lit. */
static int norm_kernel_begin(cg_ctx *c, const ir_node *n, bool workspace, char *lit, size_t len) {
  cg_literal(lit, len, ir_node_attr_float(n, "eps", 1e-5), IR_DT_F64);
  int k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, THREADS, workspace);
  cg_src(c, "  TGC_SHARED(%s, scratch, 32);\n", ACC);
  return k;
}

/* layernorm (x, gamma, beta), rmsnorm (x, gamma), add_layernorm (x, r, gamma, beta). */
static int emit_norm(cg_ctx *c, const ir_node *n, int kind /* 0 layernorm, 1 rmsnorm, 2 add_layernorm */) {
  const ir_type *xt = &n->in[0]->type;
  int64_t D = xt->rank ? xt->dims[xt->rank - 1] : 1, rows = D ? cg_numel(xt) / D : 0;
  if (rows == 0 || D == 0) return 0;
  const char *A = ACC;
  ir_dtype dts[8];
  int nd = 0;
  for (int i = 0; i < n->n_in; i++) dts[nd++] = n->in[i]->type.dtype;
  for (int i = 0; i < n->n_out; i++) dts[nd++] = n->out[i]->type.dtype;
  int W = row_width(D, dts, nd);
  bool warp = D <= WARP_ROW_MAX;
  char lit[64];
  int k = norm_kernel_begin(c, n, false, lit, sizeof lit);
  row_prologue(c, rows, warp);
  cg_src(c, "  const long long at = row * %lldLL;\n", (long long)D);
  const char *wt = warp ? "true" : "false";
  if (kind == 0)
    cg_src(c, "  tgc::layernorm_row<%s, %d, %s>(in0 + at, in1, in2, out0 + at, %lldLL, (%s)%s, scratch);\n", A, W, wt,
           (long long)D, A, lit);
  else if (kind == 1)
    cg_src(c, "  tgc::rmsnorm_row<%s, %d, %s>(in0 + at, in1, out0 + at, %lldLL, (%s)%s, scratch);\n", A, W, wt,
           (long long)D, A, lit);
  else
    cg_src(c, "  tgc::add_layernorm_row<%s, %d, %s>(in0 + at, in1 + at, in2, in3, out0 + at, out1 + at, %lldLL, (%s)%s, scratch);\n",
           A, W, wt, (long long)D, A, lit);
  cg_kernel_end(c, k);
  row_launch(c, k, rows, warp);
  return 0;
}

int cg_emit_layernorm(cg_ctx *c, const ir_node *n) { return emit_norm(c, n, 0); }
int cg_emit_rmsnorm(cg_ctx *c, const ir_node *n) { return emit_norm(c, n, 1); }
int cg_emit_add_layernorm(cg_ctx *c, const ir_node *n) { return emit_norm(c, n, 2); }

/* layernorm_grad / rmsnorm_grad (x, gamma, dy) -> (dx, dgamma[, dbeta]).
 * Two kernels. The first gives each of G blocks a run of rows, a warp per
 * row (a block per row past what a warp's registers hold): dx, and the
 * block's column sums of dy * xhat and dy in its row of partials in the
 * workspace (each thread's in registers, fp32 for 16-bit x, added across
 * the warps in double through shared memory in warp order). The second adds the G rows of partials in
 * order per column (a thread per column): dgamma, dbeta. No atomics: the
 * result does not depend on timing. */
static int emit_norm_grad(cg_ctx *c, const ir_node *n) {
  const ir_type *xt = &n->in[0]->type;
  int64_t D = xt->rank ? xt->dims[xt->rank - 1] : 1, rows = D ? cg_numel(xt) / D : 0;
  bool ln = n->op == IR_OP_LAYERNORM_GRAD;
  if (D == 0) return 0;
  if (rows == 0) { /* sums over no rows */
    for (int i = 1; i < n->n_out; i++)
      cg_memset(c, (cg_ref){.kind = CG_REF_OUT, .index = i}, (size_t)D * ir_dtype_size(n->out[i]->type.dtype));
    return 0;
  }
  enum { MAX_SLOTS = 24 }; /* column sums a thread keeps in registers, per gradient */
  const char *A = ACC;
  ir_dtype dts[3] = {n->in[0]->type.dtype, n->in[1]->type.dtype, n->out[1]->type.dtype};
  int W = row_width(D, dts, 3);
  int64_t nt_warp = (D + 32 * W - 1) / (32 * W), nt_block = (D + (int64_t)THREADS * W - 1) / ((int64_t)THREADS * W);
  bool warp = nt_warp * W <= MAX_SLOTS;
  int64_t NT = warp ? nt_warp : nt_block * W <= MAX_SLOTS ? nt_block : 0;
  int64_t per_block = warp ? THREADS / 32 : 1, G = (rows + per_block - 1) / per_block;
  if (G > 256) G = 256;
  int64_t chunk = (rows + G - 1) / G;
  G = (rows + chunk - 1) / chunk;
  cg_need_workspace(c, (size_t)(G * 2 * D) * 8);
  char lit[64];
  int k = norm_kernel_begin(c, n, true, lit, sizeof lit);
  if (warp) cg_src(c, "  TGC_SHARED(%s, cols, %lld);\n", A, (long long)(2 * D));
  ir_dtype xdt = n->in[0]->type.dtype;
  const char *C = xdt == IR_DT_BF16 || xdt == IR_DT_F16 ? "float" : A; /* the column sums in registers */
  cg_src(c, "  %s sg[%lld], sb[%lld];\n", C, (long long)(NT ? NT * W : 1), (long long)(NT ? NT * W : 1));
  cg_src(c, "  const long long start = (long long)blockIdx.x * %lldLL, end = start + %lldLL < %lldLL ? start + %lldLL : %lldLL;\n",
         (long long)chunk, (long long)chunk, (long long)rows, (long long)chunk, (long long)rows);
  cg_src(c, "  %s *colws = (%s *)ws + (long long)blockIdx.x * %lldLL;\n", A, A, (long long)(2 * D));
  cg_src(c, "  tgc::norm_grad_rows<%s, %d, %s, %lld, %s>(in0, in1, in2, out0, %lldLL, (%s)%s, start + %s, end, %lldLL, sg, sb, colws, scratch);\n",
         A, W, warp ? "true" : "false", (long long)NT, ln ? "true" : "false", (long long)D, A, lit,
         warp ? "tgc_warp_id()" : "0", (long long)per_block);
  if (NT) cg_src(c, "  tgc::norm_grad_block_sums<%s, %d, %s, %lld>(sg, sb, %lldLL, %s, colws);\n", A, W,
                 warp ? "true" : "false", (long long)NT, (long long)D, warp ? "cols" : "scratch");
  cg_kernel_end(c, k);
  cg_launch(c, k, G, 1, THREADS, 0);
  k = cg_kernel_begin(c, "sums");
  cg_kernel_signature(c, k, THREADS, true);
  const char *P = cg_ctype(n->out[1]->type.dtype);
  cg_src(c, "  TGC_GRID_STRIDE_LOOP(j, %lldLL) {\n    %s a = 0, b = 0;\n", (long long)D, A);
  cg_src(c, "    for (int g = 0; g < %lld; g++) a += ((const %s *)ws)[g * %lldLL + j], b += ((const %s *)ws)[g * %lldLL + %lldLL + j];\n",
         (long long)G, A, (long long)(2 * D), A, (long long)(2 * D), (long long)D);
  cg_src(c, "    out1[j] = tgc_round<%s>(a);\n", P);
  if (ln) cg_src(c, "    out2[j] = tgc_round<%s>(b);\n", P);
  else cg_src(c, "    (void)b;\n");
  cg_src(c, "  }\n");
  cg_kernel_end(c, k);
  cg_launch(c, k, cg_blocks(D, THREADS), 1, THREADS, 0);
  return 0;
}

int cg_emit_layernorm_grad(cg_ctx *c, const ir_node *n) { return emit_norm_grad(c, n); }

int cg_emit_argmax(cg_ctx *c, const ir_node *n) {
  const ir_type *it = &n->in[0]->type;
  int64_t axis = ir_node_attr_int(n, "axis", 0);
  if (axis < 0 || axis >= it->rank) return cg_fail(c, "bad axis");
  int64_t dim = it->dims[axis], outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= it->dims[d];
  for (int d = (int)axis + 1; d < it->rank; d++) inner *= it->dims[d];
  int64_t rows = outer * inner;
  if (rows == 0) return 0;
  int k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, THREADS, false);
  if (dim == 0) { /* the CPU's best = 0 */
    cg_src(c, "  TGC_GRID_STRIDE_LOOP(r, %lldLL) out0[r] = 0;\n", (long long)rows);
    cg_kernel_end(c, k);
    cg_launch(c, k, cg_blocks(rows, THREADS), 1, THREADS, 0);
    return 0;
  }
  if (inner > 1) { /* a thread per line, the CPU's loop */
    const char *A = ACC;
    cg_src(c, "  TGC_GRID_STRIDE_LOOP(r, %lldLL) {\n", (long long)rows);
    cg_src(c, "    const long long base = r / %lldLL * %lldLL + r %% %lldLL;\n", (long long)inner, (long long)(dim * inner),
           (long long)inner);
    cg_src(c, "    %s bv = tgc_acc(in0[base]);\n    int best = 0;\n", A);
    cg_src(c, "    for (int v = 1; v < %lld; v++) { const %s x = tgc_acc(in0[base + v * %lldLL]); if (x > bv) bv = x, best = v; }\n",
           (long long)dim, A, (long long)inner);
    cg_src(c, "    out0[r] = best;\n  }\n");
    cg_kernel_end(c, k);
    cg_launch(c, k, cg_blocks(rows, THREADS), 1, THREADS, 0);
    return 0;
  }
  bool warp = dim <= 4 * WARP_ROW_MAX;
  cg_src(c, "  TGC_SHARED(double, scratch, 32);\n");
  row_prologue(c, rows, warp);
  cg_src(c, "  const int best = tgc::argmax_row<%s>(in0 + row * %lldLL, %lldLL, scratch);\n", warp ? "true" : "false",
         (long long)dim, (long long)dim);
  cg_src(c, "  if (%s == 0) out0[row] = best;\n", warp ? "tgc_lane_id()" : "tgc_thread_rank()");
  cg_kernel_end(c, k);
  row_launch(c, k, rows, warp);
  return 0;
}

/* Elements of x with an all-ones exponent: each thread counts its share,
 * the block adds (butterflies, exact in integers), one atomicAdd per block
 * into the result (zeroed by a memset first): integer sums, so the count
 * does not depend on the order. */
int cg_emit_count_nonfinite(cg_ctx *c, const ir_node *n) {
  if (n->n_in > 1) return cg_emit_multi_reduce(c, n); /* over many tensors: no memset, no atomics */
  const ir_type *it = &n->in[0]->type;
  int64_t N = cg_numel(it);
  if (it->dtype == IR_DT_I64) { /* a count its producer took (fused {nonfinite}): the count is that */
    cg_copy(c, (cg_ref){.kind = CG_REF_OUT, .index = 0}, (cg_ref){.kind = CG_REF_IN, .index = 0}, 8);
    return 0;
  }
  cg_memset(c, (cg_ref){.kind = CG_REF_OUT, .index = 0}, 8);
  if (N == 0 || !ir_dtype_is_float(it->dtype)) return 0;
  int W = row_width(N, &it->dtype, 1);
  int64_t blocks = cg_blocks(N / W, THREADS);
  if (blocks > 1024) blocks = 1024;
  int k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, THREADS, false);
  cg_src(c, "  TGC_SHARED(unsigned long long, scratch, 32);\n  unsigned long long bad = 0;\n");
  cg_src(c, "  TGC_GRID_STRIDE_LOOP(g, %lldLL) {\n    %s v[%d];\n    tgc_vload<%d>(in0 + g * %d, v);\n", (long long)(N / W),
         cg_ctype(it->dtype), W, W, W);
  cg_src(c, "#pragma unroll\n    for (int l = 0; l < %d; l++) bad += tgc_nonfinite_bits(v[l]);\n  }\n", W);
  cg_src(c, "  bad = tgc::group<false>::sum(bad, scratch);\n");
  cg_src(c, "  if (tgc_thread_rank() == 0 && bad) atomicAdd((unsigned long long *)out0, bad);\n");
  cg_kernel_end(c, k);
  cg_launch(c, k, blocks, 1, THREADS, 0);
  return 0;
}
