/* passes/plan_rules.c — how each op of a training graph divides over a
 * tensor-parallel group, and what it must communicate: the per-op rule table
 * of the planner (plan_impl.h describes the states R, S, Q, P).
 *
 * plan_tp_propagate walks the graph once in order. For each node the rule of
 * its op (rule_of: rule_pointwise for every unary and binary kind, else
 * rules[], indexed by the op enum; test_plan_model loops over every op of
 * ops.def so a missing rule fails) reads the states of its operands,
 * converts those it cannot take (an all-reduce of a partial value; an
 * all-gather of a split one), and sets the states of its results, whether
 * its work divides by t and which GEMM dimension does. A conversion is made
 * once per value and phase: the forward pass's readers share one all-gather,
 * the backward pass does its own (as Megatron-LM's sequence parallelism
 * gathers its inputs again for the weight gradients). A reduction is made
 * once: the backward reads the reduced copy the forward keeps, and it is
 * counted in the group that made the partial value (Megatron-LM all-reduces
 * the vocabulary-parallel embedding inside the embedding).
 *
 * The rules, by op:
 *   elementwise, fused, where, cast, layernorm, rmsnorm, add_layernorm,
 *   softmax, log_softmax, causal_mask, cross_entropy(_grad)
 *           follow their split operand (S over Q: a Q operand beside an S one
 *           is gathered); an unset parameter (a bias, a norm's gain) takes the
 *           split when its aligned dim is the split one, else R; add, sub, neg,
 *           cast and a fused sum of them (the q, k and v projections' input
 *           gradients) keep P when every non-constant operand is P; a
 *           normalizing op whose axis is split is gathered, except
 *           cross-entropy over split logits (Megatron's vocabulary-parallel
 *           loss: three all-reduces of one fp32 per token, the max, the sum of
 *           exponentials and the target's logit; and two for the trainer's
 *           accuracy over the same logits, the max and its first index)
 *   matmul, fused_matmul
 *           by the roles of the split dims (M, N, K, batch): K x K, K x R and
 *           R x K give P (row parallel); M x R, R x N, batch x batch keep the
 *           split; R x R is replicated; a P operand is reduced first; an
 *           epilogue (fused_matmul's extra operands) reduces a P product first
 *           unless it only adds partial operands to it (a SwiGLU's two input
 *           gradients)
 *   layernorm_grad, rmsnorm_grad  as the norms (dy reduced first, rows
 *           follow x and dy); dgamma and dbeta of split rows are P (the sums
 *           over the rows they stand for)
 *   attention, attention_grad   split heads (a batch dim) stay split
 *   reshape  maps the split dim when it is the outermost of its group of dims
 *   transpose, broadcast, slice, unslice, concat, split   follow the dim
 *   reduce_sum, reduce_mean  over the split dim give P; reduce_max gathers
 *   embedding  a vocabulary-split table gives P; embedding_grad of token
 *           ids from a graph input is split along the vocabulary
 *   const, iota, grad, einsum with any non-R operand: replicated (einsum
 *           gathers its operands)
 */
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

typedef struct {
  const ir_graph *g;
  const uint8_t *batch;
  tp_result *r;
  tp_state *conv[PASS_NUM_PHASES]; /* per value: its converted state in this phase (UNSET: none) */
  tp_state *reduced;               /* per partial value: the state it was reduced to (UNSET: not yet) */
  int *def_node;                   /* per value: the index of the node that makes it, -1 for declarations */
  int phase;
  int node;
  int64_t padded[4]; /* sizes of vocabulary-split embedding tables */
  int n_padded;
} tp_ctx;

typedef void (*tp_rule)(tp_ctx *c, const ir_node *n);

static tp_state ST(int kind, int dim) { return (tp_state){(int8_t)kind, (int8_t)dim}; }
static bool is_split(tp_state s) { return s.kind == TP_S || s.kind == TP_Q; }

/* The state a reader sees. A partial value reduced in an earlier phase is
 * kept reduced (what plan_tp_stored says it is stored as): the backward
 * reads the copy the forward reduced, as Megatron-LM saves the all-reduced
 * embedding output, not the partial one. */
static tp_state eff(tp_ctx *c, const ir_value *v) {
  tp_state s = c->conv[c->phase][v->id];
  if (s.kind != TP_UNSET) return s;
  s = c->r->st[v->id];
  return s.kind == TP_P && c->reduced[v->id].kind != TP_UNSET ? c->reduced[v->id] : s;
}

/* v, partial, is made state s in this phase (a reduction). */
static void set_reduced(tp_ctx *c, const ir_value *v, tp_state s) {
  c->conv[c->phase][v->id] = s;
  if (c->r->st[v->id].kind == TP_P && c->reduced[v->id].kind == TP_UNSET) c->reduced[v->id] = s;
}

static void set_state(tp_ctx *c, const ir_value *v, tp_state s) { c->r->st[v->id] = s; }

/* A collective of v before the current node. A reduction of a partial
 * value made earlier in the same phase is done where it was made (its
 * group): Megatron-LM all-reduces the vocabulary-parallel embedding inside
 * the embedding, and a pipeline stage sends the reduced value (the cuts
 * count it so), whoever reads it first. */
static void add_comm(tp_ctx *c, const ir_value *v, int kind, double scale) {
  tp_result *r = c->r;
  if (r->n_comm == r->cap_comm) {
    r->cap_comm = r->cap_comm ? 2 * r->cap_comm : 256;
    r->comm = realloc(r->comm, (size_t)r->cap_comm * sizeof *r->comm);
    if (!r->comm) abort();
  }
  int node = c->node, made = c->def_node[v->id];
  if (kind != IR_COLL_ALL_GATHER && made >= 0 && (int)pass_node_phase(c->g->nodes[made]) == c->phase) node = made;
  r->comm[r->n_comm++] = (tp_comm){node, v->id, kind, scale};
}

static void add_req(tp_ctx *c, const ir_value *v, int dim, int what) {
  tp_result *r = c->r;
  if (dim < 0 || dim >= v->type.rank) return;
  for (int i = 0; i < c->n_padded; i++) /* the vocabulary: padded to a multiple of t */
    if (c->padded[i] == v->type.dims[dim]) return;
  for (int i = 0; i < r->n_req; i++)
    if (r->req[i].size == v->type.dims[dim] && r->req[i].what == what) return; /* one per size */
  if (r->n_req == r->cap_req) {
    r->cap_req = r->cap_req ? 2 * r->cap_req : 16;
    r->req = realloc(r->req, (size_t)r->cap_req * sizeof *r->req);
    if (!r->req) abort();
  }
  r->req[r->n_req++] = (tp_req){v->type.dims[dim], v->id, dim, what};
}

static bool is_param(const ir_value *v) { return v->role == IR_ROLE_PARAM; }
static bool unset(tp_ctx *c, const ir_value *v) { return eff(c, v).kind == TP_UNSET; }

/* The first batch-scaled dim of v: where its tokens are split under Q. */
static int token_dim(tp_ctx *c, const ir_value *v) {
  (void)c;
  for (int d = 0; d < v->type.rank; d++)
    if (v->type.dims[d] > 1) return d;
  return 0;
}

/* Operand v made fully available (R) to this phase's readers. A reshape
 * is a view: the value it reshapes (and a reshape of that) is the same
 * data, gathered once (conv_views). */
static void conv_views(tp_ctx *c, const ir_value *v, tp_state s) {
  for (const ir_value *x = v; x->def && x->def->op == IR_OP_RESHAPE; x = x->def->in[0])
    if (c->conv[c->phase][x->def->in[0]->id].kind == TP_UNSET) c->conv[c->phase][x->def->in[0]->id] = s;
}

static void to_full(tp_ctx *c, const ir_value *v) {
  tp_state s = eff(c, v);
  if (s.kind == TP_P) add_comm(c, v, IR_COLL_ALL_REDUCE, 1);
  else if (is_split(s)) add_comm(c, v, IR_COLL_ALL_GATHER, 1);
  else if (s.kind == TP_UNSET) {
    set_state(c, v, ST(TP_R, 0));
    return;
  } else return;
  set_reduced(c, v, ST(TP_R, 0));
  conv_views(c, v, ST(TP_R, 0));
}

/* A partial operand reduced for an op of the replicated region: to Q under
 * sequence parallelism when it is per-token (a reduce-scatter), else to R. */
static void reduce_partial(tp_ctx *c, const ir_value *v) {
  if (eff(c, v).kind != TP_P) return;
  if (c->r->sp && c->batch[v->id]) {
    add_comm(c, v, IR_COLL_REDUCE_SCATTER, 1);
    set_reduced(c, v, ST(TP_Q, token_dim(c, v)));
  } else {
    to_full(c, v);
  }
}

static void set_outputs(tp_ctx *c, const ir_node *n, tp_state s) {
  for (int i = 0; i < n->n_out; i++) set_state(c, n->out[i], s);
}

/* Replicated fallback: every operand gathered, every result R. */
static void rule_replicated(tp_ctx *c, const ir_node *n) {
  for (int i = 0; i < n->n_in; i++) to_full(c, n->in[i]);
  set_outputs(c, n, ST(TP_R, 0));
}

/* ---- elementwise-like ops ---- */

/* The dim of operand v aligned (numpy broadcasting, from the right) with
 * result dim d of rank ro, or -1 when v has none there or it is 1. */
static int aligned(const ir_value *v, int ro, int d) {
  int k = d - (ro - v->type.rank);
  return k >= 0 && k < v->type.rank && v->type.dims[k] > 1 ? k : -1;
}

static int out_dim(const ir_value *v, int ro, int k) { return k + (ro - v->type.rank); }

/* The axis a normalizing op reduces over, or -1. */
static int norm_axis(const ir_node *n, int ro) {
  switch (n->op) {
  case IR_OP_SOFTMAX: case IR_OP_LOG_SOFTMAX: return (int)ir_node_attr_int(n, "axis", ro - 1);
  case IR_OP_LAYERNORM: case IR_OP_RMSNORM: case IR_OP_ADD_LAYERNORM: case IR_OP_LAYERNORM_GRAD: case IR_OP_RMSNORM_GRAD:
  case IR_OP_CROSS_ENTROPY: case IR_OP_CROSS_ENTROPY_GRAD: return ro - 1;
  default: return -1;
  }
}

/* Degree of a fused expression's results in its operands, every operand
 * but those marked constant counting 1: 1 when each result is a sum of them
 * (signed, cast, scaled by constants), -1 otherwise. */
static int sum_degree(const ir_expr *e, const bool *constant, int n_in) {
  int deg[256];
  if (!e || e->n_ins > 256) return -1;
  for (int k = 0; k < e->n_ins; k++) {
    const ir_expr_inst *in = &e->ins[k];
    int a0 = in->arg[0] >= 0 ? deg[in->arg[0]] : 0, a1 = in->arg[1] >= 0 ? deg[in->arg[1]] : 0;
    switch (in->kind) {
    case IR_EXPR_OPERAND: deg[k] = in->index < n_in && !constant[in->index]; break;
    case IR_EXPR_CONST: deg[k] = 0; break;
    case IR_EXPR_RESULT: deg[k] = in->index < e->n_results ? deg[e->results[in->index]] : -1; break;
    case IR_EXPR_OP:
      switch (in->op) {
      case IR_OP_NEG: deg[k] = a0; break;
      case IR_OP_CAST: deg[k] = ir_dtype_is_float(in->dtype) ? a0 : -1; break;
      case IR_OP_ADD: case IR_OP_SUB: deg[k] = a0 == a1 ? a0 : -1; break;
      case IR_OP_MUL: deg[k] = a0 >= 0 && a1 >= 0 && a0 + a1 <= 1 ? a0 + a1 : -1; break;
      case IR_OP_DIV: deg[k] = a1 == 0 ? a0 : -1; break;
      default: deg[k] = a0 == 0 && a1 == 0 && (in->arg[2] < 0 || deg[in->arg[2]] == 0) ? 0 : -1; break;
      }
      break;
    }
  }
  for (int r = 0; r < e->n_results; r++)
    if (deg[e->results[r]] != 1) return -1;
  return 1;
}

static bool is_constant(const ir_value *v) { return v->role == IR_ROLE_CONST || (v->def && v->def->op == IR_OP_CONST); }

/* Whether n, all of whose non-constant operands are partial sums (and, for
 * fused_matmul, its product), computes a sum of them: the result stays a
 * partial sum (Megatron-LM adds the partial input gradients of the q, k and
 * v projections, or of a SwiGLU's two, and all-reduces once). */
static bool linear_in_partials(const ir_node *n) {
  if (n->op == IR_OP_ADD || n->op == IR_OP_SUB || n->op == IR_OP_NEG || n->op == IR_OP_CAST) return true;
  if (n->op != IR_OP_FUSED && n->op != IR_OP_FUSED_MATMUL) return false;
  const ir_attr *a = ir_node_attr(n, "expr");
  /* fused: $k is operand k; fused_matmul: $0 is the product, $k operand k + 1 */
  int skip = n->op == IR_OP_FUSED_MATMUL ? 1 : 0, n_args = n->n_in - skip;
  bool constant[64] = {false};
  if (!a || n_args > 64) return false;
  for (int k = skip; k < n_args; k++) constant[k] = is_constant(n->in[k + skip]);
  return sum_degree(a->expr, constant, n_args) == 1;
}

static void rule_pointwise(tp_ctx *c, const ir_node *n) {
  /* the shape the node works over: its first operand for the losses (their
   * result is a scalar), else its first result */
  const ir_value *ref = (n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD) ? n->in[0] : n->out[0];
  int ro = ref->type.rank;
  /* partial operands: kept by linear ops when all are partial, else reduced */
  int n_p = 0, n_act = 0;
  for (int i = 0; i < n->n_in; i++) {
    const ir_value *v = n->in[i];
    if (is_constant(v)) continue;
    n_act++;
    n_p += eff(c, v).kind == TP_P;
  }
  if (n_p > 0 && n_p == n_act && linear_in_partials(n)) {
    set_outputs(c, n, ST(TP_P, 0));
    return;
  }
  for (int i = 0; i < n->n_in; i++) reduce_partial(c, n->in[i]);
  /* the split: an S operand's (in result dims) wins over a Q operand's */
  tp_state target = ST(TP_R, 0);
  for (int i = 0; i < n->n_in; i++) {
    tp_state s = eff(c, n->in[i]);
    if (!is_split(s) || n->in[i]->type.rank > ro) continue;
    tp_state t = ST(s.kind, out_dim(n->in[i], ro, s.dim));
    if (target.kind == TP_R || (target.kind == TP_Q && t.kind == TP_S)) target = t;
  }
  int axis = norm_axis(n, ro);
  bool vocab_loss = n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD;
  if (is_split(target) && target.dim == axis && !(vocab_loss && target.kind == TP_S)) target = ST(TP_R, 0);
  for (int i = 0; i < n->n_in; i++) {
    const ir_value *v = n->in[i];
    tp_state s = eff(c, v);
    if (s.kind == TP_UNSET) { /* a bias or gain: split with the others when aligned */
      int k = is_split(target) ? aligned(v, ro, target.dim) : -1;
      if (k >= 0 && target.kind == TP_S && is_param(v)) {
        set_state(c, v, ST(TP_S, k));
        add_req(c, v, k, 0);
      } else {
        set_state(c, v, ST(TP_R, 0));
      }
      continue;
    }
    if (!is_split(s)) continue;
    /* a split operand that does not match the result's split is gathered */
    if (!is_split(target) || s.kind != target.kind || out_dim(v, ro, s.dim) != target.dim) to_full(c, v);
  }
  if (n->op == IR_OP_CROSS_ENTROPY && target.kind == TP_S) {
    /* max, sum of exponentials and the target's logit per token, fp32; and
     * the trainer's token accuracy (argmax of the same logits, not in this
     * graph): the max, in the logits' dtype, and the first index (i32)
     * holding it (docs/sharding.md) */
    double tok = (double)ir_dtype_size(n->in[1]->type.dtype);
    for (int k = 0; k < 3; k++) add_comm(c, n->in[1], IR_COLL_ALL_REDUCE, 4.0 / tok);
    add_comm(c, n->in[1], IR_COLL_ALL_REDUCE, (double)ir_dtype_size(n->in[0]->type.dtype) / tok);
    add_comm(c, n->in[1], IR_COLL_ALL_REDUCE, 4.0 / tok);
    set_outputs(c, n, ST(TP_R, 0));
  } else {
    set_outputs(c, n, target);
  }
  c->r->split[c->node] = is_split(target);
}

/* ---- matmul ---- */
typedef struct {
  int role; /* GEMM_M, _N, _K, _BATCH or GEMM_NONE */
  int out;  /* the result dim for M, N, batch */
} mm_role;

/* The role of dim k of matmul operand v (is_b: the second operand). */
static mm_role mm_dim_role(const ir_value *v, bool is_b, bool tr, int ro, int k) {
  int r = v->type.rank;
  if (k == r - 1) {
    if (!is_b) return tr ? (mm_role){GEMM_M, ro - 2} : (mm_role){GEMM_K, -1};
    return tr ? (mm_role){GEMM_K, -1} : (mm_role){GEMM_N, ro - 1};
  }
  if (k == r - 2) {
    if (!is_b) return tr ? (mm_role){GEMM_K, -1} : (mm_role){GEMM_M, ro - 2};
    return tr ? (mm_role){GEMM_N, ro - 1} : (mm_role){GEMM_K, -1};
  }
  return (mm_role){GEMM_BATCH, k + (ro - r)};
}

/* The dim of operand v with the given role (the last two dims only). */
static int mm_role_dim(const ir_value *v, bool is_b, bool tr, int role) {
  int r = v->type.rank;
  for (int k = r - 2; k < r; k++)
    if (mm_dim_role(v, is_b, tr, r, k).role == role) return k;
  return -1;
}

/* An unset weight w (rank 2) beside the other operand o: column parallel
 * when o is replicated, row parallel when o is split along K. */
static void assign_weight(tp_ctx *c, const ir_value *w, bool w_is_b, bool tw, const ir_value *o, bool o_is_b, bool to,
                          int ro) {
  tp_state os = eff(c, o);
  if (!is_param(w) || w->type.rank != 2) {
    set_state(c, w, ST(TP_R, 0));
    return;
  }
  if (os.kind == TP_Q) { /* gathered first, then column parallel */
    to_full(c, o);
    os = ST(TP_R, 0);
  }
  int dim = -1;
  if (os.kind == TP_R || os.kind == TP_UNSET) dim = mm_role_dim(w, w_is_b, tw, w_is_b ? GEMM_N : GEMM_M);
  else if (os.kind == TP_S && mm_dim_role(o, o_is_b, to, ro, os.dim).role == GEMM_K)
    dim = mm_role_dim(w, w_is_b, tw, GEMM_K);
  if (dim < 0) {
    set_state(c, w, ST(TP_R, 0));
    return;
  }
  set_state(c, w, ST(TP_S, dim));
  add_req(c, w, dim, 0);
}

static void rule_matmul(tp_ctx *c, const ir_node *n) {
  if (n->n_in < 2 || n->in[0]->type.rank < 2 || n->in[1]->type.rank < 2) {
    rule_replicated(c, n);
    return;
  }
  const ir_value *a = n->in[0], *b = n->in[1];
  bool ta = ir_node_attr_int(n, "transpose_a", 0) != 0, tb = ir_node_attr_int(n, "transpose_b", 0) != 0;
  int ro = n->out[0]->type.rank;
  for (int i = 0; i < 2; i++)
    if (eff(c, n->in[i]).kind == TP_P) to_full(c, n->in[i]);
  if (unset(c, b)) assign_weight(c, b, true, tb, a, false, ta, ro);
  if (unset(c, a)) assign_weight(c, a, false, ta, b, true, tb, ro);
  tp_state sa = eff(c, a), sb = eff(c, b);
  /* a Q operand beside an S one is gathered (sequence-parallel inputs of the
   * tensor-parallel region) */
  if (sa.kind == TP_Q && sb.kind == TP_S) to_full(c, a), sa = ST(TP_R, 0);
  if (sb.kind == TP_Q && sa.kind == TP_S) to_full(c, b), sb = ST(TP_R, 0);
  mm_role ra = is_split(sa) ? mm_dim_role(a, false, ta, ro, sa.dim) : (mm_role){GEMM_NONE, -1};
  mm_role rb = is_split(sb) ? mm_dim_role(b, true, tb, ro, sb.dim) : (mm_role){GEMM_NONE, -1};
  tp_state out = ST(TP_R, 0);
  int gemm = GEMM_NONE;
  if (ra.role == GEMM_NONE && rb.role == GEMM_NONE) {
    /* replicated */
  } else if ((ra.role == GEMM_K || ra.role == GEMM_NONE) && (rb.role == GEMM_K || rb.role == GEMM_NONE) &&
             (ra.role == GEMM_K || rb.role == GEMM_K) && (ra.role == GEMM_NONE || rb.role == GEMM_NONE || sa.kind == sb.kind)) {
    out = ST(TP_P, 0), gemm = GEMM_K;
  } else if (ra.role == GEMM_M && rb.role == GEMM_NONE) {
    out = ST(sa.kind, ra.out), gemm = GEMM_M;
  } else if (ra.role == GEMM_NONE && rb.role == GEMM_N) {
    out = ST(sb.kind, rb.out), gemm = GEMM_N;
  } else if (ra.role == GEMM_BATCH && (rb.role == GEMM_NONE || (rb.role == GEMM_BATCH && rb.out == ra.out))) {
    out = ST(sa.kind, ra.out), gemm = GEMM_BATCH;
  } else if (rb.role == GEMM_BATCH && ra.role == GEMM_NONE) {
    out = ST(sb.kind, rb.out), gemm = GEMM_BATCH;
  } else {
    to_full(c, a), to_full(c, b);
  }
  /* fused_matmul's epilogue operands: a sum of the partial product and
   * partial operands stays partial; anything else (a bias) is added after
   * the reduction */
  bool has_epilogue = n->op == IR_OP_FUSED_MATMUL && n->n_in > 2;
  if (has_epilogue && out.kind == TP_P) {
    bool all_p = true;
    for (int i = 2; i < n->n_in; i++) all_p &= is_constant(n->in[i]) || eff(c, n->in[i]).kind == TP_P;
    if (all_p && linear_in_partials(n)) has_epilogue = false;
  }
  if (has_epilogue && out.kind == TP_P) { /* the bias is added after the reduction */
    add_comm(c, n->out[0], c->r->sp && c->batch[n->out[0]->id] ? IR_COLL_REDUCE_SCATTER : IR_COLL_ALL_REDUCE, 1);
    out = c->r->sp && c->batch[n->out[0]->id] ? ST(TP_Q, token_dim(c, n->out[0])) : ST(TP_R, 0);
  }
  for (int i = 2; i < n->n_in && has_epilogue; i++) {
    const ir_value *v = n->in[i];
    if (unset(c, v)) {
      int k = out.kind == TP_S ? aligned(v, ro, out.dim) : -1;
      set_state(c, v, k >= 0 && is_param(v) ? ST(TP_S, k) : ST(TP_R, 0));
      if (k >= 0 && is_param(v)) add_req(c, v, k, 0);
      continue;
    }
    reduce_partial(c, v);
    tp_state s = eff(c, v);
    if (is_split(s) && !(s.kind == out.kind && out_dim(v, ro, s.dim) == out.dim)) to_full(c, v);
  }
  if (gemm == GEMM_BATCH) add_req(c, n->out[0], out.dim, 1); /* the heads of attention's products */
  set_outputs(c, n, out);
  c->r->split[c->node] = gemm != GEMM_NONE;
  c->r->gemm[c->node] = (int8_t)gemm;
}

/* ---- attention: heads (a batch dim of q, k, v) split ---- */
static void rule_attention(tp_ctx *c, const ir_node *n) {
  tp_state q = eff(c, n->in[0]);
  int rq = n->in[0]->type.rank;
  /* batch or head dims; with `heads` (fuse-transpose: q[..., T, H, E]) the head dim is rq - 2, T rq - 3 */
  bool heads = ir_node_attr_int(n, "heads", 0) > 0;
  bool ok = q.kind == TP_S && (heads ? q.dim < rq - 3 || q.dim == rq - 2 : q.dim < rq - 2);
  for (int i = 0; ok && i < n->n_in; i++) {
    tp_state s = eff(c, n->in[i]);
    ok = s.kind == TP_S && s.dim == q.dim;
  }
  if (!ok) {
    rule_replicated(c, n);
    return;
  }
  add_req(c, n->in[0], q.dim, 1);
  set_outputs(c, n, ST(TP_S, q.dim));
  c->r->split[c->node] = 1;
  c->r->gemm[c->node] = GEMM_BATCH;
}

/* ---- layout ---- */

/* The result dim the split of input dim d maps to through a reshape, or -1:
 * d must be the outermost dim (of size > 1) of a group of input dims whose
 * product equals a group of result dims; it maps to the outermost of those. */
static int reshape_map(const ir_type *in, const ir_type *out, int d) {
  int i = 0, j = 0;
  while (i < in->rank && j < out->rank) {
    int gi = i, gj = j;
    int64_t pi = in->dims[i++], pj = out->dims[j++];
    while (pi != pj) {
      if (pi < pj) {
        if (i >= in->rank) return -1;
        pi *= in->dims[i++];
      } else {
        if (j >= out->rank) return -1;
        pj *= out->dims[j++];
      }
    }
    if (d >= gi && d < i) {
      int k = gi, o = gj;
      while (k < i && in->dims[k] == 1) k++;
      while (o < j && out->dims[o] == 1) o++;
      return k == d && o < j ? o : -1;
    }
  }
  return -1;
}

static void rule_layout(tp_ctx *c, const ir_node *n) {
  const ir_value *x = n->in[0];
  tp_state s = eff(c, x);
  if (n->op == IR_OP_RESHAPE && c->conv[c->phase][x->id].kind == TP_R && c->r->st[x->id].kind != TP_R) {
    /* a view of a value this phase already gathered: the result is stored as
     * the value is, and its readers see the gathered copy */
    tp_state st = c->r->st[x->id];
    int d = is_split(st) ? reshape_map(&x->type, &n->out[0]->type, st.dim) : 0;
    set_outputs(c, n, st.kind == TP_P ? ST(TP_P, 0) : d >= 0 ? ST(st.kind, d) : ST(TP_R, 0));
    c->conv[c->phase][n->out[0]->id] = ST(TP_R, 0);
    return;
  }
  if (s.kind == TP_UNSET) set_state(c, x, s = ST(TP_R, 0));
  if (!is_split(s)) { /* R and P pass through every layout op (they are linear) */
    set_outputs(c, n, s.kind == TP_P ? ST(TP_P, 0) : ST(TP_R, 0));
    return;
  }
  int d = -1, ro = n->out[0]->type.rank;
  switch (n->op) {
  case IR_OP_RESHAPE:
    d = reshape_map(&x->type, &n->out[0]->type, s.dim);
    if (d >= 0 && s.kind == TP_S) add_req(c, n->out[0], d, 0);
    break;
  case IR_OP_TRANSPOSE: {
    const ir_attr *p = ir_node_attr(n, "perm");
    for (int i = 0; p && i < p->n; i++)
      if (p->ints[i] == s.dim) d = i;
    break;
  }
  case IR_OP_BROADCAST: d = x->type.dims[s.dim] > 1 ? out_dim(x, ro, s.dim) : -1; break;
  case IR_OP_SLICE: case IR_OP_UNSLICE: d = ir_node_attr_int(n, "axis", -1) == s.dim ? -1 : s.dim; break;
  case IR_OP_SPLIT: /* along the split dim: Megatron's interleaved q, k, v layout keeps every piece split */
    d = s.dim;
    if (ir_node_attr_int(n, "axis", -1) == s.dim && s.kind == TP_S)
      for (int i = 0; i < n->n_out; i++) add_req(c, n->out[i], s.dim, 0);
    break;
  case IR_OP_CONCAT:
    d = s.dim;
    for (int i = 1; i < n->n_in; i++) {
      tp_state t = eff(c, n->in[i]);
      if (t.kind != s.kind || t.dim != s.dim) d = -1;
    }
    break;
  default: break;
  }
  if (d < 0) {
    rule_replicated(c, n);
    return;
  }
  set_outputs(c, n, ST(s.kind, d));
  c->r->split[c->node] = 1;
}

/* ---- reductions ---- */
static void rule_reduce(tp_ctx *c, const ir_node *n) {
  const ir_value *x = n->in[0];
  tp_state s = eff(c, x);
  if (s.kind == TP_UNSET) set_state(c, x, s = ST(TP_R, 0));
  if (s.kind == TP_P && n->op != IR_OP_REDUCE_MAX) {
    set_outputs(c, n, ST(TP_P, 0));
    return;
  }
  if (!is_split(s) || (n->op == IR_OP_REDUCE_MAX && s.kind == TP_P)) {
    if (s.kind == TP_P) to_full(c, x);
    set_outputs(c, n, ST(TP_R, 0));
    return;
  }
  const ir_attr *ax = ir_node_attr(n, "axes");
  bool keep = ir_node_attr_int(n, "keepdims", 0) != 0, reduced = false;
  int below = 0;
  for (int i = 0; ax && i < ax->n; i++) {
    if (ax->ints[i] == s.dim) reduced = true;
    if (ax->ints[i] < s.dim) below++;
  }
  if (reduced && n->op == IR_OP_REDUCE_MAX) {
    rule_replicated(c, n);
    return;
  }
  set_outputs(c, n, reduced ? ST(TP_P, 0) : ST(s.kind, keep ? s.dim : s.dim - below));
  c->r->split[c->node] = 1;
}

/* argmax: split on a kept dim, the result stays split there; split on the
 * searched axis, every rank finds its local maximum and the ranks combine
 * (value, index) pairs, which moves what an all-reduce of the result moves:
 * modelled as a partial result. */
static void rule_argmax(tp_ctx *c, const ir_node *n) {
  const ir_value *x = n->in[0];
  tp_state s = eff(c, x);
  if (s.kind == TP_P) to_full(c, x), s = ST(TP_R, 0);
  if (!is_split(s)) {
    set_outputs(c, n, ST(TP_R, 0));
    return;
  }
  int axis = (int)ir_node_attr_int(n, "axis", x->type.rank - 1);
  if (axis < 0) axis += x->type.rank;
  set_outputs(c, n, s.dim == axis ? ST(TP_P, 0) : ST(s.kind, s.dim > axis ? s.dim - 1 : s.dim));
  c->r->split[c->node] = 1;
}

/* count_nonfinite: a count over a split tensor is a partial sum. */
static void rule_count(tp_ctx *c, const ir_node *n) {
  tp_state s = eff(c, n->in[0]);
  if (s.kind == TP_P) to_full(c, n->in[0]);
  set_outputs(c, n, is_split(s) ? ST(TP_P, 0) : ST(TP_R, 0));
  if (is_split(s)) c->r->split[c->node] = 1;
}

/* ---- embeddings ---- */
static bool ids_from_input(const ir_value *ids) { return ids->role == IR_ROLE_INPUT && !ids->def; }

static void rule_embedding(tp_ctx *c, const ir_node *n) {
  const ir_value *table = n->in[0], *ids = n->in[1];
  if (unset(c, table)) {
    bool vocab = is_param(table) && ids_from_input(ids);
    set_state(c, table, vocab ? ST(TP_S, 0) : ST(TP_R, 0));
    if (vocab && c->n_padded < 4) c->padded[c->n_padded++] = table->type.dims[0];
  }
  tp_state t = eff(c, table), i = eff(c, ids);
  if (i.kind != TP_R && i.kind != TP_UNSET) to_full(c, ids);
  if (t.kind == TP_S && t.dim == 0) { /* vocabulary parallel: rows outside the shard give zeros */
    set_outputs(c, n, ST(TP_P, 0));
    c->r->split[c->node] = 1;
  } else {
    to_full(c, table);
    set_outputs(c, n, ST(TP_R, 0));
  }
}

static void rule_embedding_grad(tp_ctx *c, const ir_node *n) {
  const ir_value *ids = n->in[0], *g = n->in[1];
  to_full(c, ids);
  to_full(c, g); /* a Q or S gradient is gathered; a P one reduced */
  if (ids_from_input(ids)) {
    set_outputs(c, n, ST(TP_S, 0));
    c->r->split[c->node] = 1;
  } else {
    set_outputs(c, n, ST(TP_R, 0));
  }
}

/* layernorm_grad / rmsnorm_grad: dx as a norm's result; dgamma and dbeta
 * sum over the rows, partial where the rows are split. */
static void rule_norm_grad(tp_ctx *c, const ir_node *n) {
  rule_pointwise(c, n);
  tp_state s = c->r->st[n->out[0]->id];
  for (int i = 1; i < n->n_out; i++) set_state(c, n->out[i], is_split(s) ? ST(TP_P, 0) : ST(TP_R, 0));
}

static void rule_source(tp_ctx *c, const ir_node *n) { set_outputs(c, n, ST(TP_R, 0)); }

static void rule_einsum(tp_ctx *c, const ir_node *n) { rule_replicated(c, n); }

/* Unary and binary kinds (ir_op_kind_of: every elementwise op of ops.def)
 * are rule_pointwise at the lookup (rule_of), as sh_rule_of does for the
 * shard pass: adding an elementwise op needs no row here. */
static const tp_rule rules[IR_NUM_OPS] = {
    [IR_OP_CONST] = rule_source, [IR_OP_IOTA] = rule_source, [IR_OP_WHERE] = rule_pointwise,
    [IR_OP_MATMUL] = rule_matmul, [IR_OP_TRANSPOSE] = rule_layout, [IR_OP_RESHAPE] = rule_layout,
    [IR_OP_BROADCAST] = rule_layout, [IR_OP_SLICE] = rule_layout, [IR_OP_CONCAT] = rule_layout,
    [IR_OP_SPLIT] = rule_layout,
    [IR_OP_REDUCE_SUM] = rule_reduce, [IR_OP_REDUCE_MEAN] = rule_reduce, [IR_OP_REDUCE_MAX] = rule_reduce,
    [IR_OP_SOFTMAX] = rule_pointwise, [IR_OP_LOG_SOFTMAX] = rule_pointwise, [IR_OP_LAYERNORM] = rule_pointwise,
    [IR_OP_RMSNORM] = rule_pointwise,
    [IR_OP_EMBEDDING] = rule_embedding, [IR_OP_CROSS_ENTROPY] = rule_pointwise,
    [IR_OP_CAUSAL_MASK] = rule_pointwise, [IR_OP_EINSUM] = rule_einsum,
    [IR_OP_GRAD] = rule_replicated,
    [IR_OP_UNSLICE] = rule_layout, [IR_OP_EMBEDDING_GRAD] = rule_embedding_grad,
    [IR_OP_CROSS_ENTROPY_GRAD] = rule_pointwise,
    [IR_OP_ATTENTION] = rule_attention, [IR_OP_ATTENTION_GRAD] = rule_attention,
    [IR_OP_ARGMAX] = rule_argmax, [IR_OP_COUNT_NONFINITE] = rule_count,
    /* communication ops are what the shard pass inserts: the unsharded
     * graphs the planner reads never hold them (replicated, if they did) */
    [IR_OP_ALL_REDUCE] = rule_replicated, [IR_OP_ALL_GATHER] = rule_replicated,
    [IR_OP_REDUCE_SCATTER] = rule_replicated, [IR_OP_ALL_TO_ALL] = rule_replicated,
    [IR_OP_COMM_BROADCAST] = rule_replicated, [IR_OP_SEND] = rule_replicated, [IR_OP_RECV] = rule_replicated,
    [IR_OP_MESH_SLICE] = rule_replicated,
    [IR_OP_SHARD_HINT] = rule_pointwise, /* the planner chooses layouts itself: a constraint passes through */
    [IR_OP_FUSED] = rule_pointwise, [IR_OP_FUSED_MATMUL] = rule_matmul, [IR_OP_ADD_LAYERNORM] = rule_pointwise,
    [IR_OP_LAYERNORM_GRAD] = rule_norm_grad, [IR_OP_RMSNORM_GRAD] = rule_norm_grad,
    /* made on one device only (fuse-lm-head declines on a mesh; tgc plan profiles without it): replicated */
    [IR_OP_LINEAR_CROSS_ENTROPY] = rule_replicated,
};

static tp_rule rule_of(ir_op op) {
  if ((unsigned)op >= IR_NUM_OPS) return NULL;
  if (ir_op_kind_of(op) == IR_OPK_UNARY || ir_op_kind_of(op) == IR_OPK_BINARY) return rule_pointwise;
  return rules[op];
}

bool plan_tp_has_rule(int op) { return op >= 0 && op < IR_NUM_OPS && rule_of((ir_op)op) != NULL; }

int plan_tp_propagate(const ir_graph *g, const uint8_t *batch, bool sp, tp_result *r) {
  memset(r, 0, sizeof *r);
  r->sp = sp;
  int nv = ir_graph_id_bound(g);
  r->st = calloc((size_t)nv + 1, sizeof *r->st);
  r->split = calloc((size_t)g->n_nodes + 1, 1);
  r->gemm = calloc((size_t)g->n_nodes + 1, 1);
  tp_ctx c = {g, batch, r, {NULL}, NULL, NULL, 0, 0, {0}, 0};
  for (int p = 0; p < PASS_NUM_PHASES; p++) c.conv[p] = calloc((size_t)nv + 1, sizeof *c.conv[p]);
  c.reduced = calloc((size_t)nv + 1, sizeof *c.reduced);
  c.def_node = malloc(((size_t)nv + 1) * sizeof *c.def_node);
  if (!r->st || !r->split || !r->gemm || !c.reduced || !c.def_node) abort();
  for (int v = 0; v <= nv; v++) c.def_node[v] = -1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; !g->nodes[i]->dead && k < g->nodes[i]->n_out; k++) c.def_node[g->nodes[i]->out[k]->id] = i;
  for (int p = 0; p < PASS_NUM_PHASES; p++)
    if (!c.conv[p]) abort();
  for (int i = 0; i < g->n_inputs; i++) r->st[g->inputs[i]->id] = ST(TP_R, 0);
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    c.node = i;
    c.phase = pass_node_phase(n);
    rule_of(n->op)(&c, n);
  }
  for (int p = 0; p < PASS_NUM_PHASES; p++) free(c.conv[p]);
  free(c.reduced);
  free(c.def_node);
  return 0;
}

void plan_tp_free(tp_result *r) {
  free(r->st);
  free(r->split);
  free(r->gemm);
  free(r->comm);
  free(r->req);
  memset(r, 0, sizeof *r);
}

tp_state plan_tp_stored(const tp_result *r, int value, bool batch) {
  tp_state s = r->st[value];
  if (s.kind == TP_P) return r->sp && batch ? ST(TP_Q, 0) : ST(TP_R, 0);
  if (s.kind == TP_UNSET) return ST(TP_R, 0);
  return s;
}
