/* analysis/cost.c — the cost model: FLOPs and bytes moved of every op, and the
 * totals of a graph split by phase (forward, backward, recompute, optimizer)
 * and by op kind. `tgc stats` (its roofline table and step-time prediction,
 * with the targets of target.c) and the checkpoint pass read it.
 *
 * Most ops cost a constant number of FLOPs per result element: the flops
 * column of ops.def. The others (-1 there) have their formula in
 * pass_node_cost's switch; test_cost loops over every op.
 *
 * FLOP formulas (n = elements of the result unless said otherwise; a
 * multiply-add counts 2):
 *   const, iota                         0
 *   elementwise unary/binary, where     1 per result element; transcendental ops
 *                                       (exp, log, sin, tanh, gelu, ...) count 1 too,
 *                                       comparisons and logical ops count 1
 *   cast                                0 (a conversion, no arithmetic)
 *   causal_mask                         1 per element (a select)
 *   matmul [...,M,K]@[...,K,N]          2*M*N*K per batch element (batch dims of the result);
 *                                       K is a's dim -2 under transpose_a
 *   einsum                              (number of operands) per term of the full index
 *                                       space (n-1 multiplies + 1 add): 2*M*N*K for a matmul;
 *                                       a one-operand einsum counts 1 per term
 *   transpose reshape broadcast slice
 *   concat split unslice embedding      0 (data movement)
 *   reduce_sum, reduce_max, argmax,
 *   count_nonfinite                     1 per input element (of every operand)
 *   sum_squares                         2 per input element (of every operand)
 *   reduce_mean                         1 per input element + 1 per result element
 *   softmax, log_softmax                5 per element (max, subtract, exp, sum, divide/log)
 *   layernorm                           8 per element (mean, subtract, square, sum,
 *                                       scale by rsqrt, *gamma, +beta, ~1 for the row stats)
 *   rmsnorm                             4 per element (square, sum, scale, *gamma)
 *   cross_entropy                       5 per logit (a log-sum-exp per row and a pick)
 *   cross_entropy_grad                  7 per logit (softmax 5, - one-hot, * g/positions)
 *   layernorm_grad                      16 per element of x (the statistics 5, dx 8, the
 *                                       dgamma and dbeta sums 3: what vjp_norm's expansion
 *                                       into primitives counted)
 *   rmsnorm_grad                        11 per element of x (statistics 3, dx 6, dgamma 2)
 *   embedding_grad                      1 per element of g (a scatter-add)
 *   grad                                0 (a request, expanded by the autodiff pass)
 * Fused ops count what the unfused ops they replace count, so a graph costs
 * the same FLOPs before and after fusion and only its bytes drop:
 *   attention (q[..,T,E], k[..,S,E], v[..,S,F]) per batch element:
 *                                       2TSE (q k^T) + TS (scale) + TS if causal (mask)
 *                                       + 5TS (softmax) + 2TSF (p v); the full T x S
 *                                       (causal blocks are not skipped in the count)
 *   attention_grad                      the FlashAttention backward per batch element:
 *                                       recompute 2TSE + TS scale (+ TS mask) + 2TS
 *                                       (exp(s - lse)); 2TF (rowsum(do o)); 2TSF (dv)
 *                                       + 2TSF (dp); 2TS (ds = p (dp - rowsum));
 *                                       2TSE (dq) + 2TSE (dk); grouped-query (k, v
 *                                       with Hkv < Hq heads): per query head, the
 *                                       same (the group's dk, dv sums are the dk,
 *                                       dv accumulations); bytes: k, v, dk, dv at
 *                                       their Hkv heads
 *   fused {expr}                        1 per result element for every elementwise op
 *                                       mnemonic of ops.def (cast excepted) named in expr,
 *                                       + 1 per element of each result {nonfinite} counts
 *                                       (the count_nonfinite it folds: 0 for its i64[])
 *   fused_matmul {expr}                 matmul's 2*M*N*K + fused's count for its epilogue
 *   add_layernorm                       1 + 8 per element (the add, then layernorm)
 * Bytes: what the lowered program (codegen's cg_lower) moves for the node:
 * every operand read once plus every result written once, in its dtype's
 * size — except
 *   - a view (IR_OPF_VIEW: reshape): 0 bytes and 0 time: the memory plan
 *     gives the result its operand's bytes and the program has no action;
 *   - embedding, which reads only the gathered rows (the result's size) and
 *     the ids, not the whole table;
 *   - embedding_grad, which reads its ids twice (a kernel counts the
 *     positions of each id, another places them in their rows' buckets;
 *     the rows' kernel then reads the buckets, in the workspace, not
 *     counted: 2 reads per id while no id has more than 1,024 positions,
 *     codegen/emit_nn.c: 32,768 id reads in a gpt2 step of B = 16,
 *     T = 1024, where every block used to rescan all B T ids, ~309M);
 *   - a reduce_sum marked {in_product} (a bias gradient fuse-transpose folds
 *     into its weight-gradient product, pass_bias_grad_product): its result
 *     written by the product's epilogue, which reads the operand anyway;
 *   - a cross_entropy marked {with_grad} (pass_cross_entropy_grad_of): its
 *     loss written by its gradient's kernel, which reads the logits anyway;
 * and an op flagged IR_OPF_ZEROED (kernels that accumulate: embedding_grad,
 * attention, ...) adds every result's bytes once more: the executor
 * zero-fills its results before the kernel (runtime/exec.c), a write of
 * each, whether a later node reads the result or not.
 * test_cost_lowering holds this to cg_step.bytes, node by node, on the
 * training step of examples/gpt.tg, so the two cannot drift apart.
 *
 * Phases come from the roles of a node's results: act -> forward, grad ->
 * backward, recompute -> recompute (checkpoint pass), opt_state/param ->
 * optimizer; a node with no results, or only input/const ones, is forward.
 */
#include <string.h>

#include "analysis.h"

static double numel_d(const ir_type *t) {
  double n = 1;
  for (int i = 0; i < t->rank; i++) n *= (double)t->dims[i];
  return n;
}

static double bytes_of(const ir_value *v) {
  if (!v || (int)v->type.dtype < 0 || v->type.dtype >= IR_NUM_DTYPES) return 0;
  return numel_d(&v->type) * (double)ir_dtype_size(v->type.dtype);
}

/* linear_cross_entropy (fuse_lm_head.c) as its lowering runs it
 * (codegen/emit_nn.c), chunk by chunk of pass_linear_ce_chunk_rows rows (n chunks), with the
 * chunk buffer in device memory (no cache assumed):
 *   logits product   reads h_c and w, writes the buffer;
 *   rows             read g, targets_c and the buffer, write predicted_c
 *                    and the buffer (the gradient in place; the row losses
 *                    go to the workspace);
 *   dh product       reads the buffer and w, writes dh_c;
 *   dw product       reads the buffer and h_c, writes dw (and reads it from
 *                    the second chunk on: dw += ...);
 * then the loss. FLOPs: the three products (2 N V D each), 5 per logit for
 * the loss, 7 for its gradient, 1 for the argmax. */
static void linear_ce_cost(const ir_node *n, pass_cost *c) {
  if (n->n_in != 4 || n->n_out != 5) return;
  int64_t N = ir_type_numel(&n->in[2]->type), C = n->out[4]->type.dims[0];
  double rows = (double)N, D = (double)n->in[0]->type.dims[n->in[0]->type.rank - 1];
  int64_t ld, CR = pass_linear_ce_chunk_rows(C, n->out[4]->type.dims[1], &ld); /* the lowering's chunks */
  double V = (double)n->out[4]->type.dims[1], chunks = (double)((N + CR - 1) / CR);
  double es = ir_dtype_size(n->in[0]->type.dtype), w = bytes_of(n->in[1]);
  c->flops = 6 * rows * V * D + 13 * rows * V;
  /* the vocabulary's last 1 to 7 columns in second products (pass_linear_ce_main_cols): h_c read again by
   * the logits' and dw's, dh_c read and written again by dh's */
  double split = pass_linear_ce_main_cols(n->out[4]->type.dims[1]) < n->out[4]->type.dims[1] ? 4 * bytes_of(n->in[0]) : 0;
  c->bytes = split + 2 * bytes_of(n->in[0]) + 2 * chunks * w + 5 * rows * V * es + bytes_of(n->in[2]) +
             chunks * bytes_of(n->in[3]) + bytes_of(n->out[3]) + bytes_of(n->out[1]) + (2 * chunks - 1) * w +
             bytes_of(n->out[0]);
}

/* Size of the full index space of an einsum ("ij,jk->ik": I*J*K), or 0 if the
 * equation does not match the operands (an unverified node). */
static double einsum_terms(const ir_node *n) {
  const ir_attr *a = ir_node_attr(n, "eq");
  const ir_einsum *e = a ? a->einsum : NULL;
  if (!e) return 0;
  double dim[52];
  for (int i = 0; i < 52; i++) dim[i] = -1;
  for (int t = 0; t < n->n_in && t < e->n_terms; t++)
    for (int k = 0; k < e->start[t + 1] - e->start[t] && k < n->in[t]->type.rank; k++)
      dim[e->labels[e->start[t] + k]] = (double)n->in[t]->type.dims[k];
  double terms = 1;
  for (int i = 0; i < 52; i++)
    if (dim[i] >= 0) terms *= dim[i];
  return terms;
}

/* The elementwise ops (cast excepted) of a fused node's expression: what
 * its kernel applies per element. */
static double fused_ops(const ir_node *n) {
  const ir_attr *a = ir_node_attr(n, "expr");
  const ir_expr *e = a ? a->expr : NULL;
  double count = 0;
  for (int i = 0; e && i < e->n_ins; i++) count += e->ins[i].kind == IR_EXPR_OP && e->ins[i].op != IR_OP_CAST;
  return count;
}

/* Attention dims: batch elements (times the heads with the `heads`
 * layout), T, S, E (q k^T width) and F (v width); false when the operands
 * do not have the shapes of ops.def. */
static bool attention_dims(const ir_node *n, double *batch, double *t, double *s, double *e, double *f) {
  if (n->n_in < 3) return false;
  const ir_type *q = &n->in[0]->type, *k = &n->in[1]->type, *v = &n->in[2]->type;
  int x = ir_node_attr_int(n, "heads", 0) > 0 ? 1 : 0; /* q[..., T, H, E]: H counts as a batch dim */
  if (q->rank < 2 + x || k->rank < 2 + x || v->rank < 2 + x) return false;
  *t = (double)q->dims[q->rank - 2 - x];
  *e = (double)q->dims[q->rank - 1];
  *s = (double)k->dims[k->rank - 2 - x];
  *f = (double)v->dims[v->rank - 1];
  *batch = 1;
  for (int i = 0; i < q->rank - 2 - x; i++) *batch *= (double)q->dims[i];
  if (x) *batch *= (double)q->dims[q->rank - 2];
  return true;
}

/* 2*M*N*K of a matmul or fused_matmul's product with result [..., M, N] of
 * out_n elements: K, the contracted dim, is the first operand's last dim, or
 * its dim -2 when transpose_a reads it transposed (a vector operand has rank 1). */
static double matmul_flops(const ir_node *n, double out_n) {
  if (n->n_in < 2 || n->in[0]->type.rank < 1) return 0;
  const ir_type *a = &n->in[0]->type;
  bool ta = ir_node_attr_int(n, "transpose_a", 0) != 0 && a->rank >= 2;
  return 2.0 * out_n * (double)a->dims[a->rank - (ta ? 2 : 1)];
}

double pass_comm_bytes(ir_op op, int64_t n, double bytes) {
  int k = ir_coll_of_op(op);
  return k < 0 ? 0 : ir_coll_ring_factor((ir_coll)k, n) * bytes; /* collectives.def's RING column */
}

/* elements of chunk j of c over n */
static int64_t chunk(int64_t c, int64_t n, int64_t j) { return c / n + ((j % n + n) % n < c % n ? 1 : 0); }

void pass_comm_tally_of(const ir_graph *g, const int *coord, pass_comm_tally tally[IR_NUM_OPS][IR_NUM_AXES]) {
  memset(tally, 0, sizeof(pass_comm_tally) * IR_NUM_OPS * IR_NUM_AXES);
  for (int k = 0; k < g->n_nodes; k++) {
    const ir_node *n = g->nodes[k];
    int a = ir_node_mesh_axis(n);
    if (n->dead || !ir_op_has(n->op, IR_OPF_COMM)) continue;
    int64_t r = ir_node_attr_int(n, "n", 1);
    if (a < 0 || r <= 1) continue;
    int64_t i = coord[a];
    const ir_type *t = n->n_in ? &n->in[0]->type : &n->out[0]->type;
    int64_t c = ir_type_numel(t), es = (int64_t)ir_dtype_size(t->dtype), sent = 0, recv = 0;
    switch (n->op) {
    case IR_OP_ALL_REDUCE:
      sent = 2 * c - chunk(c, r, i) - chunk(c, r, i + 1);
      recv = 2 * c - chunk(c, r, i - 1) - chunk(c, r, i);
      break;
    case IR_OP_REDUCE_SCATTER: case IR_OP_ALL_TO_ALL: sent = recv = (r - 1) * (c / r); break;
    case IR_OP_ALL_GATHER: sent = recv = (r - 1) * c; break;
    case IR_OP_COMM_BROADCAST: {
      int64_t root = ir_node_attr_int(n, "root", 0), last = (root + r - 1) % r;
      sent = i != last ? c : 0;
      recv = i != root ? c : 0;
      break;
    }
    case IR_OP_SEND: sent = c; break;
    case IR_OP_RECV: recv = c; break;
    default: break;
    }
    pass_comm_tally *x = &tally[n->op][a];
    x->calls++;
    x->sent += sent * es;
    x->received += recv * es;
  }
}

pass_cost pass_node_cost(const ir_node *n) {
  pass_cost c = {0};
  if (!n || (int)n->op < 0 || n->op >= IR_NUM_OPS) return c;
  for (int i = 0; i < n->n_in; i++) c.bytes += bytes_of(n->in[i]);
  for (int i = 0; i < n->n_out; i++) c.bytes += bytes_of(n->out[i]);
  double out_n = n->n_out > 0 && n->out[0] ? numel_d(&n->out[0]->type) : 0;
  double in_n = n->n_in > 0 && n->in[0] ? numel_d(&n->in[0]->type) : 0;
  int per_element = ir_op_flops_per_element(n->op); /* the flops column of ops.def */
  if (per_element >= 0) c.flops = per_element * out_n;
  switch (n->op) {
  case IR_OP_MATMUL: c.flops = matmul_flops(n, out_n); break;
  case IR_OP_EINSUM:
    c.flops = einsum_terms(n) * (n->n_in >= 2 ? (double)n->n_in : 1.0);
    break;
  case IR_OP_EMBEDDING:
    /* a gather: the ids and the rows it reads (the result's size), not the whole table */
    c.bytes = 2 * bytes_of(n->n_out > 0 ? n->out[0] : NULL) + (n->n_in == 2 ? bytes_of(n->in[1]) : 0);
    break;
  case IR_OP_REDUCE_SUM: case IR_OP_REDUCE_MAX: case IR_OP_ARGMAX: c.flops = in_n; break;
  case IR_OP_COUNT_NONFINITE: case IR_OP_SUM_SQUARES: /* every operand's elements: 1 (a test) or 2 (a multiply-add) */
    c.flops = 0;
    for (int i = 0; i < n->n_in; i++) /* an i64[] count: taken by its producer (fused {nonfinite}), which counts it */
      if (n->op == IR_OP_SUM_SQUARES || n->in[i]->type.dtype != IR_DT_I64) c.flops += numel_d(&n->in[i]->type);
    if (n->op == IR_OP_SUM_SQUARES) c.flops *= 2;
    break;
  case IR_OP_REDUCE_MEAN: c.flops = in_n + out_n; break;
  case IR_OP_CROSS_ENTROPY: c.flops = 5 * in_n; break;
  case IR_OP_CROSS_ENTROPY_GRAD: c.flops = 7 * in_n; break;
  case IR_OP_EMBEDDING_GRAD: /* the ids read twice: counted, then placed in their rows' buckets */
    c.flops = n->n_in == 2 ? numel_d(&n->in[1]->type) : 0;
    if (n->n_in == 2 && ir_type_numel(&n->in[1]->type) > 0 && n->n_out == 1 && ir_type_numel(&n->out[0]->type) > 0)
      c.bytes += bytes_of(n->in[0]);
    break;
  case IR_OP_GRAD: c.bytes = 0; break;
  case IR_OP_ATTENTION: case IR_OP_ATTENTION_GRAD: {
    double b, t, s, e, f, causal = ir_node_attr_int(n, "causal", 0) ? 1 : 0;
    if (!attention_dims(n, &b, &t, &s, &e, &f)) break;
    if (n->op == IR_OP_ATTENTION) c.flops = b * (2 * t * s * e + t * s * (1 + causal + 5) + 2 * t * s * f);
    else c.flops = b * (2 * t * s * e + t * s * (1 + causal + 2) + 2 * t * f + 4 * t * s * f + 2 * t * s + 4 * t * s * e);
    break;
  }
  case IR_OP_ALL_REDUCE: case IR_OP_REDUCE_SCATTER: { /* the reduction's additions: (n-1)/n of the operand per rank */
    int64_t g = ir_node_attr_int(n, "n", 1);
    c.flops = g > 1 ? in_n * (double)(g - 1) / (double)g : 0;
    break;
  }
  case IR_OP_LINEAR_CROSS_ENTROPY: linear_ce_cost(n, &c); break;
  case IR_OP_FUSED: { /* and {nonfinite}: the count's test of each element it counts */
    const ir_attr *nf = ir_node_attr(n, "nonfinite");
    c.flops = (fused_ops(n) + (nf && nf->kind == IR_ATTR_INTS ? nf->n : 0)) * out_n;
    break;
  }
  case IR_OP_FUSED_MATMUL:
    c.flops = matmul_flops(n, out_n) + fused_ops(n) * out_n;
    break;
  default: break; /* the ops.def column; test_cost checks every op with -1 has a formula */
  }
  if (ir_op_has(n->op, IR_OPF_VIEW)) c.bytes = 0; /* the operand's bytes: nothing moves (memplan.c) */
  if ((n->op == IR_OP_REDUCE_SUM && ir_node_attr_int(n, "in_product", 0)) ||
      (n->op == IR_OP_CROSS_ENTROPY && ir_node_attr_int(n, "with_grad", 0)))
    c.bytes = n->n_out == 1 ? bytes_of(n->out[0]) : 0; /* computed by a later node's kernels (fuse_transpose.c) */
  if (ir_op_has(n->op, IR_OPF_ZEROED)) /* the executor's fill actions before the kernel: each result written once more */
    for (int i = 0; i < n->n_out; i++) c.fill += bytes_of(n->out[i]), c.fills++;
  c.bytes += c.fill;
  c.launches = pass_launch_total(pass_node_launches(n));
  if (ir_op_has(n->op, IR_OPF_COMM)) c.comm = pass_comm_bytes(n->op, ir_node_attr_int(n, "n", 1), n->n_in ? bytes_of(n->in[0]) : 0);
  return c;
}

pass_phase pass_node_phase(const ir_node *n) {
  if (!n) return PASS_PHASE_FORWARD;
  for (int i = 0; i < n->n_out; i++) {
    switch (n->out[i]->role) {
    case IR_ROLE_GRAD: return PASS_PHASE_BACKWARD;
    case IR_ROLE_RECOMPUTE: return PASS_PHASE_RECOMPUTE;
    case IR_ROLE_OPT_STATE: case IR_ROLE_PARAM: return PASS_PHASE_OPTIMIZER;
    case IR_ROLE_ACT: case IR_ROLE_INPUT: case IR_ROLE_CONST: case IR_NUM_ROLES: break;
    }
  }
  return PASS_PHASE_FORWARD;
}

double pass_node_phase_share(const ir_node *n, pass_phase p) {
  if (n && n->op == IR_OP_LINEAR_CROSS_ENTROPY && n->n_in == 4 && n->in[0]->type.rank > 0 &&
      pass_node_phase(n) == PASS_PHASE_BACKWARD) {
    double D = (double)n->in[0]->type.dims[n->in[0]->type.rank - 1], fwd = (2 * D + 6) / (6 * D + 13);
    return p == PASS_PHASE_FORWARD ? fwd : p == PASS_PHASE_BACKWARD ? 1 - fwd : 0;
  }
  return pass_node_phase(n) == p ? 1 : 0;
}

const char *pass_phase_name(pass_phase p) {
  static const char *const names[PASS_NUM_PHASES] = {"forward", "backward", "recompute", "optimizer"};
  return (unsigned)p < PASS_NUM_PHASES ? names[p] : "?";
}

void pass_graph_cost_of(const ir_graph *g, pass_graph_cost *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    pass_cost k = pass_node_cost(n);
    for (int p = 0; p < PASS_NUM_PHASES; p++) {
      double s = pass_node_phase_share(n, (pass_phase)p);
      c->flops[p] += s * k.flops;
      c->bytes[p] += s * k.bytes;
    }
    c->op_flops[n->op] += k.flops;
    c->op_bytes[n->op] += k.bytes;
    c->op_count[n->op]++;
    c->fill_bytes += k.fill;
    c->fills += k.fills;
    int a = ir_op_has(n->op, IR_OPF_COMM) ? ir_node_mesh_axis(n) : -1;
    if (k.comm > 0 && a >= 0) c->comm[n->op][a] += k.comm;
  }
}

/* linear_cross_entropy's chunk layout (analysis.h): what the lowering lays
 * out and this model counts. */
int64_t pass_linear_ce_chunk_rows(int64_t C, int64_t V, int64_t *ld) {
  int64_t LD = (V + 63) / 64 * 64, rows = LD > 0 ? C * V / LD : C;
  if (rows >= 8) rows = rows / 8 * 8;
  if (rows < 1 || LD == V) LD = V, rows = C;
  *ld = LD;
  return rows;
}

int64_t pass_linear_ce_main_cols(int64_t V) { return V > 8 ? V / 8 * 8 : V; }
