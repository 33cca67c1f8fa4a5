/* codegen/emit_elementwise.c — the map kernels: every result element is a
 * function of operand elements at affine positions. Elementwise ops
 * (unary, binary, where, cast, fused expressions: operands broadcast
 * numpy-style) and the pure data movers (broadcast, transpose, slice) are
 * all cg_emit_map: one thread per group of W consecutive result elements
 * (grid-stride), each operand read at base + sum_d c_d stride_d of the
 * result's coordinates c.
 *
 * Dims of size 1 are dropped and adjacent dims every operand walks
 * contiguously are merged (a contiguous elementwise chain is one flat
 * loop, a bias add is rows x row length), so the index arithmetic is a few
 * divisions by constants. Accesses are 16 bytes wide (W elements: 4 floats,
 * 8 bf16, 2 doubles) when the innermost merged dim is a multiple of W and
 * every operand is read there contiguously (stride 1, a vector load) or
 * uniformly (stride 0, one load for the group); buffers are 256-byte
 * aligned (the plan's), so such groups are aligned.
 *
 * The expression (ir/expr.c's structure; for unary / binary / where ops one
 * instruction) becomes one temporary per instruction, of the instruction's
 * dtype, computed by tgc_ops.h's tgc_s_<op> in the dtype's arithmetic type
 * and rounded to the dtype (tgc_round) — so every intermediate is rounded
 * as the unfused op stores it, as the CPU's fused kernels do. All operands
 * of a group are loaded before any result is stored: a result may be
 * computed in place of an operand (the plan's IR_OPF_INPLACE decision).
 *
 * Also here: const (a memset when the value is +0), iota, causal_mask,
 * unslice, concat and split (a kernel choosing its operand or result by the
 * coordinate along the axis), and reshape (a copy; the plan makes it a
 * view, so it only runs when a backend is handed one outside a plan).
 */
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "scalar.h"

enum { MAP_THREADS = 256 };

void cg_broadcast_map(const ir_type *t, int r, const int64_t *dims, cg_operand_map *m) {
  int64_t acc = 1;
  m->base = 0;
  for (int d = r - 1; d >= 0; d--) {
    int td = d - (r - t->rank);
    if (td < 0 || t->dims[td] == 1 || dims[d] == 1) m->stride[d] = 0;
    else m->stride[d] = acc;
    if (td >= 0) acc *= t->dims[td];
  }
}

/* Row-major strides of t. */
static void row_strides(const ir_type *t, int64_t *s) {
  int64_t acc = 1;
  for (int d = t->rank - 1; d >= 0; d--) s[d] = acc, acc *= t->dims[d];
}

/* ---- the expression ---- */

void cg_expr_dtypes(const ir_expr *e, const cg_operand_map *maps, int n_maps, ir_dtype *dt) {
  for (int i = 0; i < e->n_ins; i++) {
    const ir_expr_inst *x = &e->ins[i];
    switch (x->kind) {
    case IR_EXPR_OPERAND: dt[i] = x->index < n_maps ? maps[x->index].dt : IR_DT_F32; break;
    case IR_EXPR_RESULT: dt[i] = dt[e->results[x->index]]; break;
    case IR_EXPR_CONST: dt[i] = x->dtype; break;
    case IR_EXPR_OP:
      if (x->op == IR_OP_CAST) dt[i] = x->dtype;
      else if (x->op == IR_OP_WHERE) dt[i] = dt[x->arg[1]];
      else if (ir_op_is_comparison(x->op)) dt[i] = IR_DT_BOOL;
      else dt[i] = dt[x->arg[0]];
      break;
    }
  }
}

/* The source of instruction i's value inside the lane loop. */
static void emit_instruction(cg_ctx *c, const ir_expr *e, int i, const ir_dtype *dt, const char *const *operand_val) {
  const ir_expr_inst *x = &e->ins[i];
  const char *ct = cg_ctype(dt[i]);
  switch (x->kind) {
  case IR_EXPR_OPERAND: cg_src(c, "      const %s v%d = %s;\n", ct, i, operand_val[x->index]); break;
  case IR_EXPR_RESULT: cg_src(c, "      const %s v%d = v%d;\n", ct, i, e->results[x->index]); break;
  case IR_EXPR_CONST: {
    char lit[64];
    cg_literal(lit, sizeof lit, x->value, IR_DT_F64);
    cg_src(c, "      const %s v%d = tgc_round<%s>(%s);\n", ct, i, ct, lit);
    break;
  }
  case IR_EXPR_OP:
    if (x->op == IR_OP_DROPOUT) { /* ir/scalar.h's generator, as cg_emit_dropout prints it */
      char lit[64];
      cg_literal(lit, sizeof lit, ir_round_to_dtype(dt[i], 1.0 / (1.0 - x->value)), dt[i]);
      cg_src(c,
             "      %s v%d;\n      {\n        unsigned long long z = (unsigned long long)v%d ^ %lluULL;\n        %s\n"
             "        z += (unsigned long long)v%d * %lluULL;\n        %s\n"
             "        v%d = (unsigned)(z >> 32) >= %uU ? tgc_round<%s>(tgc_acc(v%d) * %s) : tgc_round<%s>(0.0);\n      }\n",
             ct, i, x->arg[1], (unsigned long long)((uint64_t)x->index * IR_DROPOUT_STREAM), IR_DROPOUT_MIX_TEXT, x->arg[2],
             (unsigned long long)IR_DROPOUT_GOLDEN, IR_DROPOUT_MIX_TEXT, i, ir_dropout_threshold(x->value), ct, x->arg[0],
             lit, ct);
    } else if (x->op == IR_OP_WHERE) {
      cg_src(c, "      const %s v%d = v%d ? v%d : v%d;\n", ct, i, x->arg[0], x->arg[1], x->arg[2]);
    } else if (x->op == IR_OP_CAST) {
      cg_src(c, "      const %s v%d = tgc_round<%s>(tgc_acc(v%d));\n", ct, i, ct, x->arg[0]);
    } else if (ir_op_num_inputs(x->op) == 2) {
      cg_src(c, "      const %s v%d = tgc_round<%s>(tgc_s_%s(tgc_acc(v%d), tgc_acc(v%d)));\n", ct, i, ct,
             ir_op_name(x->op), x->arg[0], x->arg[1]);
    } else {
      cg_src(c, "      const %s v%d = tgc_round<%s>(tgc_s_%s(tgc_acc(v%d)));\n", ct, i, ct, ir_op_name(x->op),
             x->arg[0]);
    }
    break;
  }
}

void cg_emit_expr_lanes(cg_ctx *c, const ir_expr *e, const ir_dtype *dt, const char *const *operand_val, int n_res) {
  /* instructions reachable from the results only */
  bool *live = calloc((size_t)(e->n_ins > 0 ? e->n_ins : 1), sizeof *live);
  if (!live) {
    c->src.oom = true;
    return;
  }
  for (int r = 0; r < n_res; r++) live[e->results[r]] = true;
  for (int i = e->n_ins - 1; i >= 0; i--) {
    if (!live[i]) continue;
    const ir_expr_inst *x = &e->ins[i];
    if (x->kind == IR_EXPR_RESULT) live[e->results[x->index]] = true;
    for (int a = 0; x->kind == IR_EXPR_OP && a < 3; a++)
      if (x->arg[a] >= 0) live[x->arg[a]] = true;
  }
  for (int i = 0; i < e->n_ins; i++)
    if (live[i]) emit_instruction(c, e, i, dt, operand_val);
  free(live);
}

bool cg_expr_f64_calls(const ir_expr *e, const ir_dtype *dt) {
  for (int i = 0; i < e->n_ins; i++) {
    const ir_expr_inst *x = &e->ins[i];
    if (x->kind == IR_EXPR_OP && dt[i] == IR_DT_F64 && x->op != IR_OP_ADD && x->op != IR_OP_SUB && x->op != IR_OP_MUL &&
        x->op != IR_OP_NEG && x->op != IR_OP_CAST && x->op != IR_OP_SQUARE && x->op != IR_OP_ABS)
      return true;
  }
  return false;
}

/* ---- the map kernel ---- */

typedef struct {
  int nd;
  int64_t ext[IR_MAX_RANK];
  int64_t stride[64][IR_MAX_RANK]; /* per map */
} merged_dims;

enum { MAX_MAPS = 64 };

/* Drops size-1 dims, merges dims every map walks contiguously. */
static void merge_dims(const ir_type *out, const cg_operand_map *maps, int n_maps, merged_dims *m) {
  m->nd = 0;
  for (int d = 0; d < out->rank; d++) {
    if (out->dims[d] == 1) continue;
    int k = m->nd;
    bool merge = k > 0;
    for (int j = 0; merge && j < n_maps; j++) merge = m->stride[j][k - 1] == maps[j].stride[d] * out->dims[d];
    if (merge) {
      m->ext[k - 1] *= out->dims[d];
      for (int j = 0; j < n_maps; j++) m->stride[j][k - 1] = maps[j].stride[d];
    } else {
      m->ext[k] = out->dims[d];
      for (int j = 0; j < n_maps; j++) m->stride[j][k] = maps[j].stride[d];
      m->nd++;
    }
  }
  if (m->nd == 0) { /* a scalar, or all dims 1 */
    m->nd = 1;
    m->ext[0] = 1;
    for (int j = 0; j < n_maps; j++) m->stride[j][0] = 0;
  }
}

static bool map_identity(const merged_dims *m, const cg_operand_map *map, int j) {
  return m->nd == 1 && map->base == 0 && m->stride[j][0] == 1;
}
static bool map_uniform(const merged_dims *m, int j) {
  for (int d = 0; d < m->nd; d++)
    if (m->stride[j][d] != 0) return false;
  return true;
}

/* The widest W (elements per thread) the accesses allow: 1 if not vectorizable. */
static int vector_width(const merged_dims *m, const cg_operand_map *maps, int n_maps, const bool *used,
                        const ir_dtype *res_dt, int n_res) {
  size_t widest = 0;
  for (int r = 0; r < n_res; r++)
    if (ir_dtype_size(res_dt[r]) > widest) widest = ir_dtype_size(res_dt[r]);
  int last = m->nd - 1;
  for (int j = 0; j < n_maps; j++) {
    if (!used[j]) continue;
    int64_t s = m->stride[j][last];
    if (s != 0 && s != 1) return 1;
    if (s == 1 && ir_dtype_size(maps[j].dt) > widest) widest = ir_dtype_size(maps[j].dt);
  }
  if (!widest) return 1;
  int w = (int)(16 / widest);
  while (w > 1) {
    bool ok = m->ext[last] % w == 0;
    for (int j = 0; ok && j < n_maps; j++) {
      if (!used[j] || m->stride[j][last] != 1) continue;
      ok = maps[j].base % w == 0;
      for (int d = 0; ok && d < last; d++) ok = m->stride[j][d] % w == 0;
    }
    if (ok) return w;
    w /= 2;
  }
  return 1;
}

int cg_emit_map(cg_ctx *c, const char *suffix, const ir_type *out, const ir_dtype *res_dt, int n_res, const ir_expr *e,
                const cg_operand_map *maps, int n_maps) {
  int k;
  int64_t grid;
  if (cg_emit_map_kernel(c, suffix, out, res_dt, n_res, e, maps, n_maps, &k, &grid) != 0) return -1;
  if (k >= 0) cg_launch(c, k, grid, 1, MAP_THREADS, 0);
  return 0;
}

int cg_emit_map_kernel(cg_ctx *c, const char *suffix, const ir_type *out, const ir_dtype *res_dt, int n_res,
                       const ir_expr *e, const cg_operand_map *maps, int n_maps, int *kernel, int64_t *grid) {
  int64_t n = cg_numel(out);
  *kernel = -1;
  *grid = 0;
  if (n == 0) return 0;
  if (n_maps > MAX_MAPS) return cg_fail(c, "more than %d operands in one elementwise kernel", MAX_MAPS);
  /* the expression: e, or "$0" */
  ir_expr_inst copy_ins[1] = {{.kind = IR_EXPR_OPERAND, .index = 0, .arg = {-1, -1, -1}}};
  int copy_root[1] = {0};
  ir_expr identity = {.n_ins = 1, .n_results = 1, .ins = copy_ins, .results = copy_root};
  if (!e) e = &identity;
  if (e->n_results < n_res) return cg_fail(c, "the expression has %d results for %d outputs", e->n_results, n_res);
  ir_dtype *dt = malloc((size_t)(e->n_ins > 0 ? e->n_ins : 1) * sizeof *dt);
  char **val = calloc((size_t)n_maps + 1, sizeof *val);
  if (!dt || !val) {
    free(dt), free(val);
    return cg_fail(c, "out of memory");
  }
  cg_expr_dtypes(e, maps, n_maps, dt);
  bool used[MAX_MAPS] = {0};
  for (int i = 0; i < e->n_ins; i++)
    if (e->ins[i].kind == IR_EXPR_OPERAND && e->ins[i].index < n_maps) used[e->ins[i].index] = true;
  merged_dims m;
  merge_dims(out, maps, n_maps, &m);
  int W = cg_expr_f64_calls(e, dt) ? 1 : vector_width(&m, maps, n_maps, used, res_dt, n_res);
  int k = cg_kernel_begin(c, suffix);
  cg_kernel_signature(c, k, MAP_THREADS, false);
  cg_src(c, "  TGC_GRID_STRIDE_LOOP(g, %lldLL) {\n", (long long)(n / W));
  cg_src(c, "    const long long i = g * %d;\n", W);
  bool coords = false;
  for (int j = 0; j < n_maps; j++) coords |= used[j] && !map_identity(&m, &maps[j], j) && !map_uniform(&m, j);
  if (coords) {
    if (m.nd == 1) cg_src(c, "    const long long c0 = i;\n");
    else {
      cg_src(c, "    long long q = i;\n");
      for (int d = m.nd - 1; d > 0; d--) cg_src(c, "    const long long c%d = q %% %lldLL; q /= %lldLL;\n", d, (long long)m.ext[d], (long long)m.ext[d]);
      cg_src(c, "    const long long c0 = q;\n");
    }
  }
  for (int j = 0; j < n_maps; j++) {
    if (!used[j]) continue;
    const char *ct = cg_ctype(maps[j].dt);
    char offset[512];
    if (map_identity(&m, &maps[j], j)) snprintf(offset, sizeof offset, "i");
    else {
      size_t o = (size_t)snprintf(offset, sizeof offset, "%lldLL", (long long)maps[j].base);
      for (int d = 0; d < m.nd && o < sizeof offset; d++)
        if (m.stride[j][d]) o += (size_t)snprintf(offset + o, sizeof offset - o, " + c%d * %lldLL", d, (long long)m.stride[j][d]);
    }
    bool vec = W > 1 && m.stride[j][m.nd - 1] == 1;
    if (vec) {
      cg_src(c, "    %s a%d[%d];\n    tgc_vload<%d>(%s + (%s), a%d);\n", ct, j, W, W, maps[j].param, offset, j);
    } else {
      cg_src(c, "    const %s a%d = %s[%s];\n", ct, j, maps[j].param, offset);
    }
    char buf[32];
    snprintf(buf, sizeof buf, vec ? "a%d[l]" : "a%d", j);
    val[j] = strdup(buf);
  }
  for (int r = 0; r < n_res; r++) cg_src(c, "    %s r%d[%d];\n", cg_ctype(res_dt[r]), r, W);
  if (W > 1) cg_src(c, "#pragma unroll\n");
  cg_src(c, "    for (int l = 0; l < %d; l++) {\n", W);
  cg_emit_expr_lanes(c, e, dt, (const char *const *)val, n_res);
  for (int r = 0; r < n_res; r++) {
    int root = e->results[r];
    if (dt[root] == res_dt[r]) cg_src(c, "      r%d[l] = v%d;\n", r, root);
    else cg_src(c, "      r%d[l] = tgc_round<%s>(tgc_acc(v%d));\n", r, cg_ctype(res_dt[r]), root);
  }
  cg_src(c, "    }\n");
  for (int r = 0; r < n_res; r++) {
    if (r < c->node->n_out && !cg_value_live(c, c->node->out[r])) continue; /* nothing reads it: not stored */
    if (W > 1) cg_src(c, "    tgc_vstore<%d>(out%d + i, r%d);\n", W, r, r);
    else cg_src(c, "    out%d[i] = r%d[0];\n", r, r);
  }
  cg_src(c, "  }\n");
  cg_kernel_end(c, k);
  *kernel = k;
  *grid = cg_blocks(n / W, MAP_THREADS);
  for (int j = 0; j < n_maps; j++) free(val[j]);
  free(val);
  free(dt);
  return 0;
}

/* ---- the ops ---- */

/* Operands broadcast against the node's first result (names: room for "inN" per operand). */
static int broadcast_maps(cg_ctx *c, const ir_node *n, cg_operand_map *maps, char (*names)[16]) {
  if (n->n_in > MAX_MAPS) return cg_fail(c, "more than %d operands", MAX_MAPS);
  const ir_type *o = &n->out[0]->type;
  for (int i = 0; i < n->n_in; i++) {
    snprintf(names[i], sizeof names[i], "in%d", i);
    maps[i].param = names[i];
    maps[i].dt = n->in[i]->type.dtype;
    cg_broadcast_map(&n->in[i]->type, o->rank, o->dims, &maps[i]);
  }
  return 0;
}

static int emit_expr_node(cg_ctx *c, const ir_node *n, const ir_expr *e) {
  cg_operand_map maps[MAX_MAPS];
  char names[MAX_MAPS][16];
  if (broadcast_maps(c, n, maps, names) != 0) return -1;
  ir_dtype res[IR_FUSED_MAX_RESULTS];
  if (n->n_out > IR_FUSED_MAX_RESULTS) return cg_fail(c, "too many results");
  for (int r = 0; r < n->n_out; r++) {
    res[r] = n->out[r]->type.dtype;
    if (!ir_type_equal(&n->out[r]->type, &n->out[0]->type) &&
        cg_numel(&n->out[r]->type) != cg_numel(&n->out[0]->type))
      return cg_fail(c, "results of different shapes");
  }
  return cg_emit_map(c, NULL, &n->out[0]->type, res, n->n_out, e, maps, n->n_in);
}

/* A one-instruction expression of op over operands $0..$arity-1. */
static int emit_single_op(cg_ctx *c, const ir_node *n, int arity) {
  ir_expr_inst ins[4];
  for (int i = 0; i < arity; i++) ins[i] = (ir_expr_inst){.kind = IR_EXPR_OPERAND, .index = i, .arg = {-1, -1, -1}};
  ir_expr_inst op = {.kind = IR_EXPR_OP, .op = n->op, .arg = {-1, -1, -1}};
  for (int i = 0; i < arity; i++) op.arg[i] = i;
  if (n->op == IR_OP_CAST) op.dtype = n->out[0]->type.dtype;
  ins[arity] = op;
  int root = arity;
  ir_expr e = {.n_ins = arity + 1, .n_results = 1, .ins = ins, .results = &root};
  return emit_expr_node(c, n, &e);
}

int cg_emit_elementwise(cg_ctx *c, const ir_node *n) { return emit_single_op(c, n, ir_op_num_inputs(n->op)); }
int cg_emit_where(cg_ctx *c, const ir_node *n) { return emit_single_op(c, n, 3); }

int cg_emit_fused(cg_ctx *c, const ir_node *n) {
  const ir_attr *a = ir_node_attr(n, "expr");
  if (!a || !a->expr) return cg_fail(c, "no parsed expr attribute");
  return emit_expr_node(c, n, a->expr);
}

int cg_emit_broadcast(cg_ctx *c, const ir_node *n) {
  cg_operand_map maps[1];
  char names[1][16];
  if (broadcast_maps(c, n, maps, names) != 0) return -1;
  ir_dtype res = n->out[0]->type.dtype;
  return cg_emit_map(c, NULL, &n->out[0]->type, &res, 1, NULL, maps, 1);
}

int cg_emit_transpose(cg_ctx *c, const ir_node *n) {
  const ir_attr *perm = ir_node_attr(n, "perm");
  const ir_type *it = &n->in[0]->type, *ot = &n->out[0]->type;
  if (!perm || perm->kind != IR_ATTR_INTS || perm->n != it->rank) return cg_fail(c, "bad perm");
  int64_t s[IR_MAX_RANK];
  row_strides(it, s);
  cg_operand_map m = {.param = "in0", .dt = it->dtype};
  for (int d = 0; d < ot->rank; d++) m.stride[d] = ot->dims[d] == 1 ? 0 : s[perm->ints[d]];
  ir_dtype res = ot->dtype;
  return cg_emit_map(c, NULL, ot, &res, 1, NULL, &m, 1);
}

int cg_emit_slice(cg_ctx *c, const ir_node *n) {
  const ir_type *it = &n->in[0]->type, *ot = &n->out[0]->type;
  int64_t axis = ir_node_attr_int(n, "axis", 0), start = ir_node_attr_int(n, "start", 0),
          step = ir_node_attr_int(n, "step", 1);
  if (axis < 0 || axis >= it->rank) return cg_fail(c, "bad axis");
  int64_t s[IR_MAX_RANK];
  row_strides(it, s);
  cg_operand_map m = {.param = "in0", .dt = it->dtype, .base = start * s[axis]};
  for (int d = 0; d < ot->rank; d++) m.stride[d] = ot->dims[d] == 1 ? 0 : (d == axis ? s[d] * step : s[d]);
  ir_dtype res = ot->dtype;
  return cg_emit_map(c, NULL, ot, &res, 1, NULL, &m, 1);
}

int cg_emit_reshape(cg_ctx *c, const ir_node *n) {
  cg_copy(c, (cg_ref){.kind = CG_REF_OUT, .index = 0}, (cg_ref){.kind = CG_REF_IN, .index = 0},
          (size_t)cg_numel(&n->out[0]->type) * ir_dtype_size(n->out[0]->type.dtype));
  return 0;
}

int cg_emit_const(cg_ctx *c, const ir_node *n) {
  const ir_type *t = &n->out[0]->type;
  double v = ir_node_attr_float(n, "value", 0.0);
  double r = ir_round_to_dtype(t->dtype, v);
  if (r == 0 && !(1.0 / r < 0)) { /* +0 in every dtype is all zero bits */
    cg_memset(c, (cg_ref){.kind = CG_REF_OUT, .index = 0}, (size_t)cg_numel(t) * ir_dtype_size(t->dtype));
    return 0;
  }
  ir_expr_inst ins = {.kind = IR_EXPR_CONST, .dtype = t->dtype, .value = v, .arg = {-1, -1, -1}};
  int root = 0;
  ir_expr e = {.n_ins = 1, .n_results = 1, .ins = &ins, .results = &root};
  ir_dtype res = t->dtype;
  return cg_emit_map(c, NULL, t, &res, 1, &e, NULL, 0);
}

/* A grid-stride kernel over n elements with the given loop body (i is the element). */
static int simple_kernel(cg_ctx *c, int64_t n, const char *body) {
  if (n == 0) return 0;
  int k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, MAP_THREADS, false);
  cg_src(c, "  TGC_GRID_STRIDE_LOOP(i, %lldLL) {\n%s  }\n", (long long)n, body);
  cg_kernel_end(c, k);
  cg_launch(c, k, cg_blocks(n, MAP_THREADS), 1, MAP_THREADS, 0);
  return 0;
}

int cg_emit_iota(cg_ctx *c, const ir_node *n) {
  const ir_type *t = &n->out[0]->type;
  int64_t axis = ir_node_attr_int(n, "axis", 0), inner = 1, dim = 1;
  if (t->rank > 0) {
    if (axis < 0 || axis >= t->rank) return cg_fail(c, "bad axis");
    dim = t->dims[axis];
    for (int d = (int)axis + 1; d < t->rank; d++) inner *= t->dims[d];
  }
  char body[256];
  snprintf(body, sizeof body, "    out0[i] = tgc_round<%s>((double)(i / %lldLL %% %lldLL));\n", cg_ctype(t->dtype),
           (long long)inner, (long long)dim);
  return simple_kernel(c, cg_numel(t), body);
}

int cg_emit_causal_mask(cg_ctx *c, const ir_node *n) {
  const ir_type *t = &n->out[0]->type;
  if (t->rank < 2) return cg_fail(c, "operand needs rank >= 2");
  int64_t T = t->dims[t->rank - 2], S = t->dims[t->rank - 1];
  double fill = ir_node_attr_float(n, "fill", -1.0 / 0.0);
  char lit[64], body[512];
  cg_literal(lit, sizeof lit, fill, IR_DT_F64);
  const char *ot = cg_ctype(t->dtype);
  snprintf(body, sizeof body,
           "    const long long col = i %% %lldLL, row = i / %lldLL %% %lldLL;\n"
           "    out0[i] = col > row + %lldLL ? tgc_round<%s>(%s) : tgc_round<%s>(tgc_acc(in0[i]));\n",
           (long long)S, (long long)S, (long long)T, (long long)(S - T), ot, lit, ot);
  return simple_kernel(c, cg_numel(t), body);
}

/* dropout (ops.def): the inference form a copy; the training form keeps
 * element i (x * scale) unless the bits at its global index g (from the
 * positions in2.. and the unsharded strides) fall under the threshold:
 * ir/scalar.h's generator, printed from the same macro. */
int cg_emit_dropout(cg_ctx *c, const ir_node *n) {
  const ir_type *t = &n->out[0]->type;
  const char *ot = cg_ctype(t->dtype);
  char body[4096];
  if (n->n_in == 1) {
    snprintf(body, sizeof body, "    out0[i] = in0[i];\n");
    return simple_kernel(c, cg_numel(t), body);
  }
  double p = ir_node_attr_float(n, "p", 0);
  const ir_attr *sa = ir_node_attr(n, "strides");
  if (!sa || sa->n != t->rank) return cg_fail(c, "dropout without its strides");
  uint64_t stream_mul = (uint64_t)ir_node_attr_int(n, "stream", 0) * IR_DROPOUT_STREAM;
  char lit[64];
  cg_literal(lit, sizeof lit, ir_round_to_dtype(t->dtype, 1.0 / (1.0 - p)), t->dtype);
  size_t k = (size_t)snprintf(body, sizeof body,
                              "    unsigned long long z = (unsigned long long)in1[0] ^ %lluULL;\n    %s\n"
                              "    const unsigned long long sk = z;\n    unsigned long long g = 0;\n    long long r = i;\n",
                              (unsigned long long)stream_mul, IR_DROPOUT_MIX_TEXT);
  for (int d = t->rank - 1; d >= 0 && k < sizeof body; d--)
    k += (size_t)snprintf(body + k, sizeof body - k,
                          "    g += (unsigned long long)in%d[r %% %lldLL] * %lluULL;\n    r /= %lldLL;\n", 2 + d,
                          (long long)t->dims[d], (unsigned long long)sa->ints[d], (long long)t->dims[d]);
  if (k < sizeof body)
    snprintf(body + k, sizeof body - k,
             "    z = sk + g * %lluULL;\n    %s\n"
             "    out0[i] = (unsigned)(z >> 32) >= %uU ? tgc_round<%s>(tgc_acc(in0[i]) * %s) : tgc_round<%s>(0.0);\n",
             (unsigned long long)IR_DROPOUT_GOLDEN, IR_DROPOUT_MIX_TEXT, ir_dropout_threshold(p), ot, lit, ot);
  return simple_kernel(c, cg_numel(t), body);
}

/* (outer, dim, inner) around axis of t. */
static void split_axis(const ir_type *t, int axis, int64_t *outer, int64_t *inner) {
  *outer = 1, *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= t->dims[d];
  for (int d = axis + 1; d < t->rank; d++) *inner *= t->dims[d];
}

int cg_emit_unslice(cg_ctx *c, const ir_node *n) {
  const ir_type *it = &n->in[0]->type, *ot = &n->out[0]->type;
  int64_t axis = ir_node_attr_int(n, "axis", -1), start = ir_node_attr_int(n, "start", 0),
          step = ir_node_attr_int(n, "step", 1);
  if (axis < 0 || axis >= it->rank || ot->rank != it->rank) return cg_fail(c, "bad axis");
  int64_t outer, inner, in_dim = it->dims[axis], out_dim = ot->dims[axis];
  split_axis(it, (int)axis, &outer, &inner);
  char body[512];
  snprintf(body, sizeof body,
           "    const long long r = i %% %lldLL, j = i / %lldLL %% %lldLL, o = i / (%lldLL * %lldLL);\n"
           "    out0[(o * %lldLL + %lldLL + j * %lldLL) * %lldLL + r] = in0[i];\n",
           (long long)inner, (long long)inner, (long long)in_dim, (long long)inner, (long long)in_dim,
           (long long)out_dim, (long long)start, (long long)step, (long long)inner);
  return simple_kernel(c, cg_numel(it), body);
}

/* concat (results: 1, operands: many) or split (operands: 1, results: many)
 * along axis: one kernel over the whole tensor, each group of W elements
 * finding its piece by the coordinate along the axis. */
static int emit_pieces(cg_ctx *c, const ir_node *n, bool concat) {
  const ir_type *whole = concat ? &n->out[0]->type : &n->in[0]->type;
  int np = concat ? n->n_in : n->n_out;
  int64_t axis = ir_node_attr_int(n, "axis", 0);
  if (axis < 0 || axis >= whole->rank) return cg_fail(c, "bad axis");
  int64_t outer, inner, total = whole->dims[axis];
  split_axis(whole, (int)axis, &outer, &inner);
  int64_t n_el = cg_numel(whole);
  if (n_el == 0) return 0;
  size_t es = ir_dtype_size(whole->dtype);
  int W = (int)(16 / es);
  while (W > 1) { /* every piece's rows are whole groups */
    bool ok = (total * inner) % W == 0;
    for (int p = 0; ok && p < np; p++) ok = ((concat ? n->in[p] : n->out[p])->type.dims[axis] * inner) % W == 0;
    if (ok) break;
    W /= 2;
  }
  int k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, MAP_THREADS, false);
  const char *ct = cg_ctype(whole->dtype);
  cg_src(c, "  TGC_GRID_STRIDE_LOOP(g, %lldLL) {\n", (long long)(n_el / W));
  cg_src(c, "    const long long i = g * %d, r = i %% %lldLL, a = i / %lldLL %% %lldLL, o = i / (%lldLL * %lldLL);\n", W,
         (long long)inner, (long long)inner, (long long)total, (long long)inner, (long long)total);
  cg_src(c, "    %s v[%d];\n", ct, W);
  int64_t at = 0;
  for (int p = 0; p < np; p++) {
    int64_t size = (concat ? n->in[p] : n->out[p])->type.dims[axis];
    if (size == 0) continue;
    cg_src(c, "    %sif (a < %lldLL) {\n", at ? "else " : "", (long long)(at + size));
    char piece[200];
    snprintf(piece, sizeof piece, "(o * %lldLL + (a - %lldLL)) * %lldLL + r", (long long)size, (long long)at, (long long)inner);
    if (concat) cg_src(c, "      tgc_vload<%d>(in%d + %s, v);\n      tgc_vstore<%d>(out0 + i, v);\n", W, p, piece, W);
    else cg_src(c, "      tgc_vload<%d>(in0 + i, v);\n      tgc_vstore<%d>(out%d + %s, v);\n", W, W, p, piece);
    cg_src(c, "    }\n");
    at += size;
  }
  cg_src(c, "  }\n");
  cg_kernel_end(c, k);
  cg_launch(c, k, cg_blocks(n_el / W, MAP_THREADS), 1, MAP_THREADS, 0);
  return 0;
}

int cg_emit_concat(cg_ctx *c, const ir_node *n) { return emit_pieces(c, n, true); }
int cg_emit_split(cg_ctx *c, const ir_node *n) { return emit_pieces(c, n, false); }
