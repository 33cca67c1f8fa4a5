/* analysis/launches.c — what the lowered program issues to the device for
 * a node: kernel launches, cuBLASLt products and stream operations (a
 * memset or copy of the program, the executor's zero-fill of a result),
 * read off the graph. `tgc stats` charges each at least the target's launch
 * time (target.c); test_cost_lowering holds the count to cg_lower's actions
 * for every step of the gpt training step, so the two cannot drift apart.
 *
 * The shape decisions codegen/emit_gemm.c lowers a product by (the merged
 * batch dims and which of them get a call each; the epilogue cuBLASLt
 * computes) live here, and the emitter reads them: one copy. The other
 * counts follow the emitters (codegen/emit_*.c, whose top comments say
 * how many kernels each op runs):
 *   elementwise, fused, where, broadcast, transpose, slice, unslice,
 *   concat, split, iota, causal_mask, dropout, const, embedding,
 *   softmax, layernorm, rmsnorm, add_layernorm, argmax, einsum      1 kernel (none when empty)
 *   reduce_*            1 kernel, 2 when split over blocks with partials (long rows and few
 *                       outputs: a trailing row reduction of >= 65,536 elements into < 64
 *                       outputs, or a strided one of >= 4,096 into < 16,384); 0 when marked
 *                       {in_product} (its product's epilogue computes it)
 *   count_nonfinite     a memset + 1 kernel of one tensor; of many: sum_squares's
 *   sum_squares         a kernel per 256 tensors (with elements) + the total's
 *   embedding_grad      a memset of the counts + 4 kernels (count, scan, place, rows)
 *   cross_entropy       2 kernels (rows, loss); marked {with_grad}: 1, the loss kernel its
 *                       gradient's step launches (it writes this node's result)
 *   cross_entropy_grad  1 kernel
 *   layernorm_grad,
 *   rmsnorm_grad        2 kernels (rows with partial sums, the sums)
 *   attention           1 kernel; attention_grad 3 (rowsum(do o), dk/dv, dq)
 *   matmul              a product per index of the batch dims outside the strided one (one
 *                       for x @ W over every row); + the epilogue's kernel when cuBLASLt has
 *                       no epilogue for it; K = 0: a memset, and the epilogue's kernel
 *   linear_cross_entropy per chunk of rows 3 products per vocabulary piece + the rows' kernel;
 *                       then the loss kernel
 *   reshape (a view), communication ops, grad: 0 (collectives are the comm layer's)
 * and every result of an IR_OPF_ZEROED node (numel > 0) one zero-fill more
 * (runtime/exec.c fills it before the kernel).
 * Not counted: the products linear_cross_entropy's epilogue fallbacks
 * would run on a cuBLASLt with no algorithm for an epilogue (a run-time
 * choice).
 *
 * A whole program (pass_program_calls_of) reads its memory plan too:
 *  - the multi-tensor launch: a run of consecutive plan steps whose fused
 *    nodes share one expression runs as one kernel (pass_group_size, the
 *    rule codegen/emit_group.c lowers by; the optimizer's update is such
 *    runs, up to 32 parameters each);
 *  - the pieces a CUDA graph run cuts the program into (pass_graph_pieces,
 *    the rule runtime/cuda/backend.c captures by): a collective is a piece
 *    of its own, run by the host between graph launches; each maximal run
 *    of other steps between two collectives is one captured graph, one
 *    cuGraphLaunch a run. View steps have no action and cut nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

/* ---- products (codegen/emit_gemm.c lowers by these) ---- */

void pass_matmul_shape(const ir_type *a, const ir_type *b, bool ta, bool tb, pass_mm_shape *s) {
  s->ta = ta, s->tb = tb;
  s->m = a->dims[a->rank - (ta ? 1 : 2)]; /* both operands have rank >= 2 (the typing rule) */
  s->k = a->dims[a->rank - (ta ? 2 : 1)];
  s->n = b->dims[b->rank - (tb ? 2 : 1)];
  int ra = a->rank > 2 ? a->rank - 2 : 0, rb = b->rank > 2 ? b->rank - 2 : 0, r = ra > rb ? ra : rb;
  int64_t dims[IR_MAX_RANK], sa[IR_MAX_RANK], sb[IR_MAX_RANK], sc[IR_MAX_RANK];
  int64_t acc_a = 1, acc_b = 1, acc_c = 1;
  for (int d = r - 1; d >= 0; d--) {
    int da = d - (r - ra), db = d - (r - rb);
    int64_t x = da >= 0 ? a->dims[da] : 1, y = db >= 0 ? b->dims[db] : 1;
    dims[d] = x == 1 ? y : x;
    sa[d] = x == 1 ? 0 : acc_a;
    sb[d] = y == 1 ? 0 : acc_b;
    sc[d] = acc_c;
    acc_a *= x, acc_b *= y, acc_c *= dims[d];
  }
  s->nb = 0;
  s->batches = 1;
  for (int d = 0; d < r; d++) {
    s->batches *= dims[d];
    if (dims[d] == 1) continue;
    int j = s->nb;
    if (j > 0 && s->sa[j - 1] == sa[d] * dims[d] && s->sb[j - 1] == sb[d] * dims[d] && s->sc[j - 1] == sc[d] * dims[d]) {
      s->ext[j - 1] *= dims[d];
      s->sa[j - 1] = sa[d], s->sb[j - 1] = sb[d], s->sc[j - 1] = sc[d];
    } else {
      s->ext[j] = dims[d], s->sa[j] = sa[d], s->sb[j] = sb[d], s->sc[j] = sc[d];
      s->nb++;
    }
  }
  /* x @ W with W shared by every batch and x read as stored: one product
   * of [batches * M, K] rows */
  s->rows_merged = s->nb == 1 && s->sb[0] == 0 && s->sa[0] == 1 && !ta;
  s->inner = s->rows_merged ? -1 : s->nb - 1;
  s->calls = 1;
  for (int d = 0; d < s->inner; d++) s->calls *= s->ext[d];
}

static const ir_expr_inst *inst(const ir_expr *e, int i) { return i >= 0 && i < e->n_ins ? &e->ins[i] : NULL; }
static bool is_operand(const ir_expr *e, int i, int index) {
  const ir_expr_inst *x = inst(e, i);
  return x && x->kind == IR_EXPR_OPERAND && x->index == index;
}
static bool is_op(const ir_expr *e, int i, ir_op op) {
  const ir_expr_inst *x = inst(e, i);
  return x && x->kind == IR_EXPR_OP && x->op == op;
}
/* (add $0 $1) or (add $1 $0) at instruction i */
static bool is_bias_add(const ir_expr *e, int i) {
  if (!is_op(e, i, IR_OP_ADD)) return false;
  const ir_expr_inst *x = inst(e, i);
  return (is_operand(e, x->arg[0], 0) && is_operand(e, x->arg[1], 1)) ||
         (is_operand(e, x->arg[0], 1) && is_operand(e, x->arg[1], 0));
}

/* A bias: numel N and broadcast along the last dim only. */
static bool is_bias_vector(const ir_type *bias, const ir_type *out) {
  if (bias->dtype != out->dtype || ir_type_numel(bias) != out->dims[out->rank - 1] || bias->rank > out->rank) return false;
  for (int d = 0; d + 1 < bias->rank; d++)
    if (bias->dims[d] != 1) return false;
  return true;
}

pass_epilogue pass_matmul_epilogue(const ir_node *n) {
  const ir_attr *a = n->op == IR_OP_FUSED_MATMUL ? ir_node_attr(n, "expr") : NULL;
  const ir_expr *e = a ? a->expr : NULL;
  if (!e || e->n_results != 1 || n->n_in != 3 || n->out[0]->type.rank < 1) return PASS_EPI_NONE;
  const ir_type *out = &n->out[0]->type, *x = &n->in[2]->type;
  int root = e->results[0];
  bool bias = is_bias_vector(x, out);
  if (bias && is_bias_add(e, root)) return PASS_EPI_BIAS;
  if (bias && (is_op(e, root, IR_OP_GELU) || is_op(e, root, IR_OP_RELU)) && is_bias_add(e, inst(e, root)->arg[0]))
    return is_op(e, root, IR_OP_GELU) ? PASS_EPI_GELU_BIAS : PASS_EPI_RELU_BIAS;
  if (ir_type_equal(x, out) && is_op(e, root, IR_OP_MUL)) {
    const ir_expr_inst *m = inst(e, root);
    for (int s = 0; s < 2; s++)
      if (is_operand(e, m->arg[s], 0) && is_op(e, m->arg[1 - s], IR_OP_GELU_GRAD) &&
          is_operand(e, inst(e, m->arg[1 - s])->arg[0], 1))
        return PASS_EPI_DGELU;
  }
  return PASS_EPI_NONE;
}

/* ---- counts ---- */

static int64_t numel_of(const ir_value *v) { return v ? ir_type_numel(&v->type) : 0; }

static void matmul_launches(const ir_node *n, pass_launches *l) {
  if (n->n_in < 2 || numel_of(n->out[0]) == 0) return;
  pass_mm_shape s;
  pass_matmul_shape(&n->in[0]->type, &n->in[1]->type, ir_node_attr_int(n, "transpose_a", 0) != 0,
                    ir_node_attr_int(n, "transpose_b", 0) != 0, &s);
  bool fused = n->op == IR_OP_FUSED_MATMUL;
  if (s.k == 0) { /* zeros, then the epilogue */
    l->stream_ops++;
    l->kernels += fused;
    return;
  }
  l->products += (double)s.calls;
  l->kernels += fused && pass_matmul_epilogue(n) == PASS_EPI_NONE; /* the epilogue kernel reads the product in place */
}

/* The reduction's launches: 2 where it is split over blocks with partials
 * (codegen/emit_reduce.c: emit_rows, emit_strided), else 1. */
static double reduce_launches(const ir_node *n) {
  const ir_type *it = &n->in[0]->type;
  bool reduced[IR_MAX_RANK] = {0};
  const ir_attr *axes = ir_node_attr(n, "axes");
  for (int d = 0; d < it->rank; d++) reduced[d] = !axes;
  for (int i = 0; axes && i < axes->n; i++)
    if (axes->ints[i] >= 0 && axes->ints[i] < it->rank) reduced[axes->ints[i]] = true;
  int64_t O = numel_of(n->out[0]), R = 1;
  for (int d = 0; d < it->rank; d++) R *= reduced[d] ? it->dims[d] : 1;
  if (O == 0) return 0;
  if (R == 0) return 1;
  /* merged dims (size-1 dims dropped, neighbours of one kind merged) */
  int m = 0;
  bool red[IR_MAX_RANK];
  int64_t ext[IR_MAX_RANK];
  for (int d = 0; d < it->rank; d++) {
    if (it->dims[d] == 1) continue;
    if (m > 0 && red[m - 1] == reduced[d]) ext[m - 1] *= it->dims[d];
    else red[m] = reduced[d], ext[m] = it->dims[d], m++;
  }
  int n_red = 0, outer_red = -1;
  for (int d = 0; d < m; d++)
    if (red[d]) n_red++, outer_red = outer_red < 0 ? d : outer_red;
  if (n_red == 0) return 1;
  if (n_red == 1 && red[m - 1]) return O < 64 && R >= 65536 ? 2 : 1; /* rows: G = R / 16384 >= 4 */
  if (!(O < 16384 && R >= 4096)) return 1;
  int64_t G = R / 256;
  if (G > 256) G = 256;
  if (G > ext[outer_red]) G = ext[outer_red];
  return G > 1 ? 2 : 1;
}

static void linear_ce_launches(const ir_node *n, pass_launches *l) {
  if (n->n_in != 4 || n->n_out != 5) return;
  int64_t N = numel_of(n->in[2]), C = n->out[4]->type.dims[0], V = n->out[4]->type.dims[1], ld;
  int64_t rows = pass_linear_ce_chunk_rows(C, V, &ld), chunks = rows > 0 ? (N + rows - 1) / rows : 0;
  double pieces = pass_linear_ce_main_cols(V) < V ? 2 : 1;
  l->products += (double)chunks * 3 * pieces;
  l->kernels += (double)chunks + 1;
}

pass_launches pass_node_launches(const ir_node *n) {
  pass_launches l = {0, 0, 0};
  if (!n || n->dead || (int)n->op < 0 || n->op >= IR_NUM_OPS || ir_op_has(n->op, IR_OPF_VIEW) ||
      ir_op_on_mesh_axis(n->op) || n->op == IR_OP_GRAD)
    return l;
  int64_t out_n = n->n_out ? numel_of(n->out[0]) : 0, in_n = n->n_in ? numel_of(n->in[0]) : 0;
  switch (n->op) {
  case IR_OP_MATMUL: case IR_OP_FUSED_MATMUL: matmul_launches(n, &l); break;
  case IR_OP_REDUCE_SUM: case IR_OP_REDUCE_MEAN: case IR_OP_REDUCE_MAX:
    if (!ir_node_attr_int(n, "in_product", 0)) l.kernels = reduce_launches(n);
    break;
  case IR_OP_SHARD_HINT: l.stream_ops = out_n > 0; break; /* a copy where it is no view */
  case IR_OP_CONST: l.stream_ops = out_n > 0; break;     /* a memset of zeros, else a kernel: one either way */
  case IR_OP_CONCAT: l.kernels = out_n > 0; break;
  case IR_OP_SPLIT: case IR_OP_UNSLICE: l.kernels = in_n > 0; break;
  case IR_OP_COUNT_NONFINITE: case IR_OP_SUM_SQUARES:
    if (n->op == IR_OP_COUNT_NONFINITE && n->n_in == 1) { /* a memset of the count, a kernel */
      l.stream_ops = 1;
      l.kernels = in_n > 0 && ir_dtype_is_float(n->in[0]->type.dtype);
      break;
    }
    l.kernels = 1; /* over many tensors: a kernel per 256 of them with elements, the total's */
    for (int first = 0; first < n->n_in; first += 256) {
      bool any = false;
      for (int i = first; i < n->n_in && i < first + 256; i++) any |= numel_of(n->in[i]) > 0;
      l.kernels += any;
    }
    break;
  case IR_OP_EMBEDDING_GRAD:
    if (out_n > 0 && in_n > 0) l.stream_ops = 1, l.kernels = 4;
    break;
  case IR_OP_CROSS_ENTROPY: /* {with_grad}: the loss kernel its gradient's step launches */
    if (numel_of(n->in[1]) > 0) l.kernels = ir_node_attr_int(n, "with_grad", 0) ? 1 : 2;
    break;
  case IR_OP_CROSS_ENTROPY_GRAD: l.kernels = numel_of(n->in[1]) > 0; break;
  case IR_OP_LAYERNORM_GRAD: case IR_OP_RMSNORM_GRAD: {
    const ir_type *x = &n->in[0]->type;
    int64_t D = x->rank ? x->dims[x->rank - 1] : 1;
    if (D > 0 && in_n == 0) l.stream_ops = n->n_out - 1; /* sums over no rows: memsets */
    else if (D > 0) l.kernels = 2;
    break;
  }
  case IR_OP_ATTENTION: l.kernels = out_n > 0; break;
  case IR_OP_ATTENTION_GRAD: l.kernels = in_n > 0 ? 3 : 0; break;
  case IR_OP_LINEAR_CROSS_ENTROPY: linear_ce_launches(n, &l); break;
  default: l.kernels = out_n > 0; break; /* one kernel over the result */
  }
  if (ir_op_has(n->op, IR_OPF_ZEROED))
    for (int i = 0; i < n->n_out; i++) l.stream_ops += numel_of(n->out[i]) > 0;
  return l;
}

double pass_launch_total(pass_launches l) { return l.kernels + l.products + l.stream_ops; }

/* ---- the multi-tensor launch (codegen/emit_group.c lowers by it) ---- */

enum { GROUP_MAX_MEMBERS = 32, GROUP_MAX_PTRS = 480 }; /* the pointers stay under 4 KiB of kernel parameters */

static const ir_attr *group_expr(const ir_node *n) {
  const ir_attr *a = n->op == IR_OP_FUSED ? ir_node_attr(n, "expr") : NULL;
  return a && a->expr && a->s ? a : NULL;
}

/* A result the lowering stores: some node reads it or it is an output
 * (codegen's cg_value_live; no counts: every result). */
static bool stored(const int *uses, int n_uses, const ir_value *v) {
  return !uses || v->id < 0 || v->id >= n_uses || uses[v->id] > 0;
}

static bool same_shape(const ir_type *a, const ir_type *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* A fused node the group kernel can run: results contiguous of one shape,
 * operands of that shape (in any dtype: mixed precision's update reads a
 * bf16 gradient beside f32 state) or single elements. */
bool pass_group_eligible(const ir_node *n) {
  int results = ir_fused_results(n); /* a {nonfinite} count is one more, i64[] */
  if (!group_expr(n) || results < 1 || n->n_in + n->n_out > 24) return false;
  const ir_type *o = &n->out[0]->type;
  if (ir_type_numel(o) < 1) return false;
  for (int r = 1; r < results; r++)
    if (ir_type_numel(&n->out[r]->type) != ir_type_numel(o)) return false;
  for (int i = 0; i < n->n_in; i++) {
    int64_t k = ir_type_numel(&n->in[i]->type);
    if (k != 1 && (k != ir_type_numel(o) || !same_shape(&n->in[i]->type, o))) return false;
  }
  return true;
}

static bool group_same_kind(const int *uses, int n_uses, const ir_node *a, const ir_node *b) {
  /* a {nonfinite} count is one more result: members with and without one
   * mix (tp: the count reads some parameters through a mesh slice), those
   * with one counting the same results */
  const ir_attr *ca = ir_node_attr(a, "nonfinite"), *cb = ir_node_attr(b, "nonfinite");
  int ra = a->n_out - (ca != NULL), rb = b->n_out - (cb != NULL);
  if (!pass_group_eligible(b) || a->n_in != b->n_in || ra != rb || strcmp(group_expr(a)->s, group_expr(b)->s) != 0)
    return false;
  if (ca && cb && (ca->kind != cb->kind || ca->n != cb->n || memcmp(ca->ints, cb->ints, sizeof(int64_t) * (size_t)ca->n)))
    return false;
  for (int i = 0; i < a->n_in; i++)
    if (a->in[i]->type.dtype != b->in[i]->type.dtype ||
        (ir_type_numel(&a->in[i]->type) == 1) != (ir_type_numel(&b->in[i]->type) == 1))
      return false;
  for (int r = 0; r < ra; r++) /* and one store pattern: the same results stored */
    if (a->out[r]->type.dtype != b->out[r]->type.dtype ||
        stored(uses, n_uses, a->out[r]) != stored(uses, n_uses, b->out[r]))
      return false;
  return true;
}

/* Byte ranges of two values' places overlap. */
static bool places_overlap(const pass_plan *p, const ir_value *x, const ir_value *y) {
  const pass_loc *a = &p->loc[x->id], *b = &p->loc[y->id];
  if (a->space != b->space || a->space == PASS_SPACE_NONE) return false;
  if (a->space != PASS_SPACE_ARENA && a->index != b->index) return false;
  return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* Member b may run together with member a: neither writes what the other touches. */
static bool group_independent(const pass_plan *p, const int *uses, int n_uses, const ir_node *a, const ir_node *b) {
  for (int k = 0; k < 2; k++) {
    const ir_node *w = k ? b : a, *o = k ? a : b;
    for (int r = 0; r < w->n_out; r++) {
      if (!stored(uses, n_uses, w->out[r])) continue; /* results nothing reads are not stored */
      for (int i = 0; i < o->n_in; i++)
        if (o->in[i] == w->out[r] || places_overlap(p, w->out[r], o->in[i])) return false;
      for (int s = 0; s < o->n_out; s++)
        if (stored(uses, n_uses, o->out[s]) && places_overlap(p, w->out[r], o->out[s])) return false;
    }
  }
  return true;
}

int pass_group_size(const ir_graph *g, const pass_plan *p, const int *uses, int n_uses, int step) {
  const ir_node *first = g->nodes[p->steps[step].node];
  if (p->steps[step].view || !pass_group_eligible(first)) return 1;
  int n = 1, ptrs = first->n_in + first->n_out + 1; /* (+1: a member may count) */
  while (step + n < p->n_steps && n < GROUP_MAX_MEMBERS && (n + 1) * ptrs <= GROUP_MAX_PTRS) {
    const ir_node *m = g->nodes[p->steps[step + n].node];
    if (p->steps[step + n].view || !group_same_kind(uses, n_uses, first, m)) break;
    bool ok = true;
    for (int k = 0; ok && k < n; k++) ok = group_independent(p, uses, n_uses, g->nodes[p->steps[step + k].node], m);
    if (!ok) break;
    n++;
  }
  return n;
}

/* ---- a program's pieces under CUDA graphs (runtime/cuda/backend.c cuts by it) ---- */

int pass_graph_pieces(const ir_graph *g, const pass_plan *p, pass_piece *pieces) {
  int n = 0;
  bool last_collective = true; /* the first step with an action starts a piece */
  for (int s = 0; s < p->n_steps; s++) {
    if (p->steps[s].view) continue; /* no action */
    bool coll = ir_op_on_mesh_axis(g->nodes[p->steps[s].node]->op);
    if (coll || last_collective) {
      if (pieces) pieces[n] = (pass_piece){s, s + 1, coll};
      n++;
    } else if (pieces) pieces[n - 1].end = s + 1;
    last_collective = coll;
  }
  return n;
}

/* ---- a whole program ---- */

int pass_program_calls_of(const ir_graph *g, const pass_plan *p, pass_program_calls *c) {
  memset(c, 0, sizeof *c);
  int n_uses = 0;
  int *uses = ir_use_counts(g, &n_uses);
  if (!uses) return -1;
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *n = g->nodes[p->steps[s].node];
    if (p->steps[s].view) continue;
    if (ir_op_on_mesh_axis(n->op)) {
      c->collectives++;
      c->mesh_slices += n->op == IR_OP_MESH_SLICE;
      continue;
    }
    int group = pass_group_size(g, p, uses, n_uses, s);
    if (group > 1) { /* one kernel for the run */
      c->launches.kernels += 1;
      c->groups++;
      c->grouped_nodes += group;
      s += group - 1;
      continue;
    }
    pass_launches l = pass_node_launches(n);
    c->launches.kernels += l.kernels, c->launches.products += l.products, c->launches.stream_ops += l.stream_ops;
  }
  free(uses);
  int pieces = pass_graph_pieces(g, p, NULL);
  c->segments = pieces - c->collectives;
  return 0;
}
