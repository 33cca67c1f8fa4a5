/* passes/shard_rules.c — how each op divides over one mesh axis: the rule
 * table of the shard pass (shard_impl.h describes the states R, S d, P and
 * what a rule answers; test_shard loops over ops.def so an op without a
 * rule fails).
 *
 * The rules, by op:
 *   elementwise (unary, binary, where, cast, fused), softmax, log_softmax,
 *   layernorm, rmsnorm, add_layernorm, causal_mask, cross_entropy_grad (by
 *   positions)
 *           the result is split where an operand is split (the first one,
 *           aligned numpy-style); every operand then takes that split (a
 *           replicated one is sliced, free) or stays whole when it is
 *           broadcast along that dim. Dims an op normalizes or masks along
 *           (softmax's axis, the norms' last dim, the mask's last two, the
 *           classes of cross_entropy_grad) are never split: an operand
 *           split there is gathered. Partial sums pass through an op that
 *           is linear in them (add and sub of partials, a partial times or
 *           divided by a replicated value, neg, a float cast, a fused
 *           expression that is linear in them); otherwise they are reduced
 *           — except a sum that only a further sum reads, whose other terms
 *           are replicated activations: those become partial sums too (the
 *           engine keeps each whole on the axis' first rank), so the terms
 *           are added locally and the total reduced once (a gradient
 *           accumulated over the residual and the q, k, v projections).
 *           cross_entropy_grad divides by the positions it sees: split
 *           positions make its g 1 / size as large.
 *   matmul, fused_matmul
 *           by the roles of the split dims: M x R and R x N keep the split,
 *           batch x batch (or a broadcast operand) too, K x K is a partial
 *           sum (a replicated operand is sliced along K to meet a split
 *           one); a partial operand times a replicated one stays partial.
 *           Two splits that disagree: the parameter (or else the second
 *           operand) is gathered. On tp, an unplaced weight follows
 *           Megatron-LM: split along N (column parallel) when the other
 *           operand is replicated, along K (row parallel, a partial result)
 *           when the other operand is split along K. fused_matmul reduces a
 *           partial product before a non-linear epilogue (by gathering K).
 *   reduce_sum, reduce_mean, reduce_max
 *           over a split dim: a partial sum (a mean also scaled by 1 /
 *           size), or a local max then a max over the axis; else the split
 *           follows its dim; partials pass through sum and mean.
 *   count_nonfinite of a split value: a partial count; where the engine
 *           asks (sh_engine_slice_counts), of a replicated one too.
 *   padded dims (a vocabulary tp does not divide, padded to a multiple of
 *           it; no rule splits such a dim itself, it follows a split the
 *           pass placed): a sum over one is partial when the padding is
 *           zeros (sh_dec.in_pad_value), a contraction when one side's is,
 *           a count when it is finite; a mean, a max, those sums and counts
 *           of a padding not known to be so, and
 *           a reshape that merges the dim with others, gather it (the
 *           gather drops the padding).
 *   transpose, reshape, broadcast, slice, unslice, concat, split
 *           the split follows its dim; reshape maps it when the split dim is
 *           the outermost of its group of merged or split dims and divides;
 *           slicing, concatenating or splitting along a split dim gathers.
 *   embedding  on tp, a table split along its rows (a parameter table
 *           read at data ids, the tokens: placed so by shard_train.c, its
 *           rows padded to a multiple of tp when they do not divide) stays
 *           so (Megatron-LM's vocabulary-parallel embedding: expanded by
 *           shard_vocab.c into a masked lookup, a partial sum reduced at
 *           once); else split ids give split rows,
 *           a table split along its columns gives split columns, any other
 *           table split is gathered.
 *   embedding_grad  on tp, at data ids: the rank's (padded) block of the
 *           rows (expanded: g's rows masked to the block); else split ids
 *           and g give a partial sum; g split along its last dim gives split
 *           columns.
 *   cross_entropy, cross_entropy_grad  logits split along the classes stay
 *           so (vocabulary parallel, expanded: the loss replicated, the
 *           gradient split as the logits); split positions give a partial
 *           mean (scaled by 1 / size).
 *   argmax  along a split dim: expanded (each rank's first maximum, then
 *           the first of those); else as below.
 *   layernorm_grad, rmsnorm_grad  rows (x and dy split alike along a dim
 *           before the last) stay split: dx is split so, dgamma and dbeta are
 *           partial sums (as the reduce_sum over the rows they replace); else
 *           replicated: a partial dy (the column-parallel input gradient)
 *           is reduced first, as Megatron-LM does, so that every rank has
 *           the whole norm gradient and the update reduces none (carrying
 *           the partial sum through, linear in dy, would reduce dx all the
 *           same and add the gain's and bias's gradients in the update).
 *   attention, attention_grad  split batch or head dims (those before the
 *           last two) stay split when every operand has them; else gathered.
 *   shard_hint  the user's constraint: split along the dim its spec names
 *           for this axis, else replicated (the operand converted to it).
 *   const, iota: replicated. einsum: every operand gathered, replicated.
 *   grad, and the communication ops and mesh_slice the pass itself makes,
 *   are refused by the engine before any rule runs.
 */
#include <math.h>
#include <string.h>

#include "shard_impl.h"

/* ---- helpers ---- */

static int rank_in(const sh_dec *d, int i) { return d->node->in[i]->type.rank; }
static int rank_out(const sh_dec *d) { return d->node->n_out ? d->node->out[0]->type.rank : 0; }

/* The dim of operand i aligned (numpy broadcasting, from the right) with
 * result dim od of rank ro, or -1 when it has none there or it is 1. */
static int aligned(const sh_dec *d, int i, int od, int ro) {
  int k = od - (ro - rank_in(d, i));
  return k >= 0 && k < rank_in(d, i) && d->node->in[i]->type.dims[k] > 1 ? k : -1;
}

/* The result dim operand i's dim k is aligned with. */
static int out_dim(const sh_dec *d, int i, int k, int ro) { return k + (ro - rank_in(d, i)); }

bool sh_can_split_parts(const sh_dec *d, int i, int dim, int k) {
  if (i < 0 || i >= d->n_in || dim < 0 || dim >= rank_in(d, i) || k < 1) return false;
  int64_t local = d->in_local[i][dim]; /* within the block of the outer axes' splits */
  return local >= (int64_t)d->size * k && local % ((int64_t)d->size * k) == 0;
}

bool sh_can_split(const sh_dec *d, int i, int dim) { return sh_can_split_parts(d, i, dim, 1); }

bool sh_padded(const sh_dec *d, int i) {
  sh_st s = d->in[i];
  return i >= 0 && i < d->n_in && s.kind == SH_S && s.dim < rank_in(d, i) && d->in_local[i][s.dim] % d->size != 0;
}

/* operand i already is, or can be made, S(dim) in k parts */
static bool fits(const sh_dec *d, int i, int dim, int k) {
  return sh_eq(d->in[i], sh_Sk(dim, k)) || sh_can_split_parts(d, i, dim, k);
}

static void all_out(sh_dec *d, sh_st s) {
  for (int j = 0; j < d->n_out; j++) d->out[j] = s;
}

/* Every operand gathered (partials reduced), every result replicated. */
static void rule_replicate(sh_dec *d) {
  for (int i = 0; i < d->n_in; i++) d->in[i] = sh_R();
  all_out(d, sh_R());
}

static bool any_kind(const sh_dec *d, int kind) {
  for (int i = 0; i < d->n_in; i++)
    if (d->in[i].kind == kind) return true;
  return false;
}

/* ---- linearity in the partial operands ---- */

/* Degree of an elementwise op in its arguments' degrees (0: no partial
 * operand reaches it, 1: linear in them, -1: neither). */
static int op_degree(ir_op op, ir_dtype cast_to, const int *a, int n) {
  switch (op) {
  case IR_OP_NEG: return a[0];
  case IR_OP_CAST: return ir_dtype_is_float(cast_to) ? a[0] : (a[0] == 0 ? 0 : -1);
  case IR_OP_ADD: case IR_OP_SUB: return a[0] == a[1] ? a[0] : -1;
  case IR_OP_MUL: return a[0] >= 0 && a[1] >= 0 && a[0] + a[1] <= 1 ? a[0] + a[1] : -1;
  case IR_OP_DIV: return a[1] == 0 ? a[0] : -1;
  case IR_OP_WHERE: return a[0] == 0 && a[1] == a[2] ? a[1] : -1;
  default:
    for (int i = 0; i < n; i++)
      if (a[i] != 0) return -1;
    return 0;
  }
}

static int expr_degree(const ir_expr *e, const bool *partial, int n_in, int *res_deg) {
  int deg[256];
  if (e->n_ins > 256) return -1;
  for (int k = 0; k < e->n_ins; k++) {
    const ir_expr_inst *in = &e->ins[k];
    switch (in->kind) {
    case IR_EXPR_OPERAND: deg[k] = in->index < n_in && partial[in->index] ? 1 : 0; break;
    case IR_EXPR_RESULT: deg[k] = res_deg[in->index]; break;
    case IR_EXPR_CONST: deg[k] = 0; break;
    case IR_EXPR_OP: {
      int a[3] = {0, 0, 0}, n = 0;
      for (int j = 0; j < 3 && in->arg[j] >= 0; j++) a[n++] = deg[in->arg[j]];
      deg[k] = op_degree(in->op, in->dtype, a, n);
      break;
    }
    }
  }
  int worst = 0;
  for (int r = 0; r < e->n_results; r++) {
    res_deg[r] = deg[e->results[r]];
    if (res_deg[r] != 1) worst = -1;
  }
  return worst == 0 ? 1 : -1;
}

/* Whether every result is linear (degree 1) in the operands marked partial. */
static bool linear_in(const sh_dec *d, const bool *partial) {
  const ir_node *n = d->node;
  if (n->op == IR_OP_FUSED) {
    const ir_attr *a = ir_node_attr(n, "expr");
    int res_deg[IR_FUSED_MAX_RESULTS];
    return a && a->expr && a->expr->n_results <= IR_FUSED_MAX_RESULTS &&
           expr_degree(a->expr, partial, n->n_in, res_deg) == 1;
  }
  if (!ir_op_is_elementwise(n->op)) return false;
  int a[3] = {0, 0, 0};
  for (int i = 0; i < n->n_in && i < 3; i++) a[i] = partial[i] ? 1 : 0;
  ir_dtype to = n->op == IR_OP_CAST ? (ir_dtype)ir_node_attr_int(n, "to", IR_DT_F32) : IR_DT_F32;
  return op_degree(n->op, to, a, n->n_in) == 1;
}

/* ---- pointwise ops ---- */

/* forbid: result dims that must not be split (bit od). */
static void pointwise(sh_dec *d, unsigned forbid) {
  int ro = rank_out(d);
  int od = -1, k = 1;
  for (int i = 0; i < d->n_in && od < 0; i++) {
    if (d->in[i].kind != SH_S) continue;
    int o = out_dim(d, i, d->in[i].dim, ro), parts = sh_parts(d->in[i]);
    if (o < 0 || o >= ro || ((forbid >> o) & 1)) continue;
    bool ok = true; /* every operand that has the dim can be split there */
    for (int j = 0; j < d->n_in && ok; j++) {
      int a = aligned(d, j, o, ro);
      if (a >= 0 && !fits(d, j, a, parts)) ok = false;
    }
    if (ok) od = o, k = parts;
  }
  if (od >= 0) {
    for (int i = 0; i < d->n_in; i++) {
      int a = aligned(d, i, od, ro);
      d->in[i] = a >= 0 ? sh_Sk(a, k) : sh_R();
    }
    all_out(d, sh_Sk(od, k));
    return;
  }
  if (any_kind(d, SH_P)) {
    /* unplaced operands try to be partial too (add-like), then replicated (mul-like) */
    bool partial[SH_MAX_ARGS];
    for (int pass = 0; pass < 2; pass++) {
      /* (a parameter is never a partial sum: each rank holds all of it) */
      for (int i = 0; i < d->n_in; i++)
        partial[i] = d->in[i].kind == SH_P || (pass == 0 && d->in[i].kind == SH_UNSET && !d->in_param[i]);
      if (!linear_in(d, partial)) continue;
      for (int i = 0; i < d->n_in; i++) d->in[i] = partial[i] ? sh_P() : sh_R();
      all_out(d, sh_P());
      return;
    }
    /* a sum of partial and replicated terms that a further sum reads and
     * nothing else (the backward's accumulation of a value's gradient: the
     * residual's, then the q, k and v projections' partial input
     * gradients): the replicated activations become partial sums too (kept
     * whole on the axis' first rank, no communication), so the partial
     * terms are added locally and the total is reduced once where it is
     * needed, not each term on its own */
    if (d->sum_continues) {
      for (int i = 0; i < d->n_in; i++)
        partial[i] = d->in[i].kind == SH_P || (d->in[i].kind == SH_R && !d->in_param[i] && rank_in(d, i) > 0);
      if (linear_in(d, partial)) {
        for (int i = 0; i < d->n_in; i++) d->in[i] = partial[i] ? sh_P() : sh_R();
        all_out(d, sh_P());
        return;
      }
    }
    /* sequence parallelism: reduce-scatter the partials along the sequence */
    if (d->sp && ro >= 3 && !((forbid >> 1) & 1)) {
      bool ok = true;
      for (int i = 0; i < d->n_in && ok; i++) {
        int a = aligned(d, i, 1, ro);
        ok = a < 0 || fits(d, i, a, 1);
      }
      if (ok) {
        for (int i = 0; i < d->n_in; i++) {
          int a = aligned(d, i, 1, ro);
          d->in[i] = a >= 0 ? sh_S(a) : sh_R();
        }
        all_out(d, sh_S(1));
        return;
      }
    }
  }
  rule_replicate(d);
}

static void rule_pointwise(sh_dec *d) { pointwise(d, 0); }

/* softmax / log_softmax: not along their axis */
static void rule_softmax(sh_dec *d) { pointwise(d, 1u << ir_node_attr_int(d->node, "axis", rank_out(d) - 1)); }

/* layernorm, rmsnorm, add_layernorm: not along the last dim */
static void rule_norm(sh_dec *d) { pointwise(d, 1u << (rank_out(d) - 1)); }

/* layernorm_grad / rmsnorm_grad (x, gamma, dy): rows split, else replicated */
static void rule_norm_grad(sh_dec *d) {
  int r = rank_in(d, 0);
  for (int i = 0; i < 3; i += 2) {
    sh_st s = d->in[i];
    if (s.kind == SH_S && s.dim < r - 1 && fits(d, 0, s.dim, sh_parts(s)) && fits(d, 2, s.dim, sh_parts(s))) {
      d->in[0] = d->in[2] = s;
      d->in[1] = sh_R();
      d->out[0] = s;
      for (int j = 1; j < d->n_out; j++) d->out[j] = sh_P();
      return;
    }
  }
  rule_replicate(d);
}

static void rule_causal_mask(sh_dec *d) {
  int r = rank_out(d);
  pointwise(d, r >= 2 ? 3u << (r - 2) : 1u);
}

/* cross_entropy(_grad) with logits split along their classes (the last
 * dim, the LM head's column-parallel product): vocabulary parallel. */
static bool split_classes(const sh_dec *d) {
  int rl = rank_in(d, 0);
  sh_st l = d->in[0];
  return rl >= 1 && l.kind == SH_S && l.dim == rl - 1 && sh_parts(l) == 1 && rank_in(d, 1) == rl - 1;
}

/* cross_entropy_grad(logits[..., V], targets[...], g[]): per position (the
 * targets share the leading dims), never along the classes */
static void rule_cross_entropy_grad(sh_dec *d) {
  sh_st l = d->in[0], t = d->in[1];
  int rl = rank_in(d, 0);
  if (split_classes(d)) { /* vocabulary parallel: the gradient of the rank's classes */
    d->in[1] = d->in[2] = sh_R();
    d->out[0] = l;
    d->expand = sh_vocab_cross_entropy_grad;
    return;
  }
  int pos = l.kind == SH_S && l.dim < rl - 1 ? l.dim : t.kind == SH_S ? t.dim : -1;
  d->in[2] = sh_R();
  if (pos >= 0 && fits(d, 0, pos, 1) && fits(d, 1, pos, 1)) {
    d->in[0] = d->in[1] = sh_S(pos);
    d->out[0] = sh_S(pos);
    d->scale_operand = 2; /* the mean divides by the positions it sees */
    return;
  }
  d->in[0] = d->in[1] = sh_R();
  d->out[0] = sh_R();
}

/* ---- matmul ---- */

typedef struct {
  int ra, rb, ro;
  int am, ak, bk, bn; /* dims of a and b; -1 when absent */
  int om, on;         /* result dims of M and N; -1 when absent */
} mm_dims;

static mm_dims matmul_dims(const sh_dec *d) {
  const ir_node *n = d->node;
  mm_dims m;
  m.ra = rank_in(d, 0), m.rb = rank_in(d, 1), m.ro = rank_out(d);
  bool ta = ir_node_attr_int(n, "transpose_a", 0) && m.ra >= 2, tb = ir_node_attr_int(n, "transpose_b", 0) && m.rb >= 2;
  if (m.ra == 1) m.am = -1, m.ak = 0;
  else m.am = ta ? m.ra - 1 : m.ra - 2, m.ak = ta ? m.ra - 2 : m.ra - 1;
  if (m.rb == 1) m.bk = 0, m.bn = -1;
  else m.bk = tb ? m.rb - 1 : m.rb - 2, m.bn = tb ? m.rb - 2 : m.rb - 1;
  m.on = m.bn >= 0 ? m.ro - 1 : -1;
  m.om = m.am >= 0 ? (m.bn >= 0 ? m.ro - 2 : m.ro - 1) : -1;
  return m;
}

/* The result dim of operand i's batch dim k (aligned from the right of the
 * batch dims), or -1. */
static int batch_out(const mm_dims *m, int i, int k) {
  int rk = i == 0 ? m->ra : m->rb, nb = rk >= 2 ? rk - 2 : 0;
  int ob = m->ro - (m->om >= 0) - (m->on >= 0);
  if (k >= nb) return -1;
  int o = k + (ob - nb);
  return o >= 0 ? o : -1;
}

/* The batch dim of operand i aligned with result dim o, or -1. */
static int batch_in(const sh_dec *d, const mm_dims *m, int i, int o) {
  int rk = i == 0 ? m->ra : m->rb, nb = rk >= 2 ? rk - 2 : 0;
  int ob = m->ro - (m->om >= 0) - (m->on >= 0);
  int k = o - (ob - nb);
  return k >= 0 && k < nb && d->node->in[i]->type.dims[k] > 1 ? k : -1;
}

typedef enum { ROLE_NONE, ROLE_M, ROLE_K, ROLE_N, ROLE_BATCH } mm_role;

static mm_role role_of(const mm_dims *m, int i, sh_st s) {
  if (s.kind != SH_S) return ROLE_NONE;
  if (i == 0) return s.dim == m->am ? ROLE_M : s.dim == m->ak ? ROLE_K : ROLE_BATCH;
  return s.dim == m->bn ? ROLE_N : s.dim == m->bk ? ROLE_K : ROLE_BATCH;
}

/* The matmul's answer with operand i's split kept; false when it cannot be. */
static bool matmul_keep(sh_dec *d, const mm_dims *m, int i, sh_st *res) {
  int o = 1 - i, k = sh_parts(d->in[i]);
  mm_role r = role_of(m, i, d->in[i]);
  switch (r) {
  case ROLE_M: case ROLE_N:
    d->in[o] = sh_R();
    *res = sh_Sk(r == ROLE_M ? m->om : m->on, k);
    return true;
  case ROLE_K: {
    int ok = o == 0 ? m->ak : m->bk;
    if (!fits(d, o, ok, k)) return false;
    /* a padded K: the padding's products must be zeros */
    if (sh_padded(d, i) && d->in_pad_value[i] != 0 && !(d->in[o].kind == SH_S && d->in_pad_value[o] == 0)) return false;
    d->in[o] = sh_Sk(ok, k); /* both sides hold the same elements of K */
    *res = sh_P();
    return true;
  }
  case ROLE_BATCH: {
    int ob = batch_out(m, i, d->in[i].dim);
    if (ob < 0) return false;
    int kd = batch_in(d, m, o, ob);
    if (kd >= 0 && !fits(d, o, kd, k)) return false;
    d->in[o] = kd >= 0 ? sh_Sk(kd, k) : sh_R();
    *res = sh_Sk(ob, k);
    return true;
  }
  case ROLE_NONE: break;
  }
  return false;
}

static void matmul_core(sh_dec *d, sh_st *res) {
  mm_dims m = matmul_dims(d);
  sh_st a = d->in[0], b = d->in[1];
  /* Megatron on tp: an unplaced weight beside a placed activation */
  for (int w = 0; w < 2 && d->megatron; w++) {
    int x = 1 - w;
    if (d->in[w].kind != SH_UNSET || !d->in_param[w] || d->in[x].kind == SH_UNSET) continue;
    int wk = w == 0 ? m.ak : m.bk, wn = w == 0 ? m.am : m.bn;
    int xk = sh_parts(d->in[x]), parts = d->parts_hint > 1 && w == 1 ? d->parts_hint : 1;
    mm_role xr = role_of(&m, x, d->in[x]);
    /* sequence parallelism: an activation split along its tokens is gathered
     * for a column-parallel weight (Megatron-LM's all-gather before it) */
    if ((xr == ROLE_M || xr == ROLE_BATCH) && wn >= 0 && sh_can_split(d, w, wn)) d->in[x] = sh_R(), xr = ROLE_NONE;
    if (xr == ROLE_K && sh_can_split_parts(d, w, wk, xk)) d->in[w] = sh_Sk(wk, xk); /* row */
    else if (d->in[x].kind == SH_R && wn >= 0 && sh_can_split_parts(d, w, wn, parts)) d->in[w] = sh_Sk(wn, parts); /* column */
    else if (d->in[x].kind == SH_R && wn >= 0 && sh_can_split(d, w, wn)) d->in[w] = sh_S(wn);
    else d->in[w] = sh_R();
    a = d->in[0], b = d->in[1];
  }
  for (int i = 0; i < 2; i++)
    if (d->in[i].kind == SH_UNSET) d->in[i] = sh_R();
  a = d->in[0], b = d->in[1];
  if (a.kind == SH_P || b.kind == SH_P) {
    if (a.kind == SH_P && b.kind == SH_P) d->in[1] = sh_R(); /* linear in one operand at a time */
    else if (d->in[a.kind == SH_P ? 1 : 0].kind == SH_S) d->in[a.kind == SH_P ? 0 : 1] = sh_R();
    else {
      d->in[a.kind == SH_P ? 1 : 0] = sh_R();
      *res = sh_P();
      return;
    }
    a = d->in[0], b = d->in[1];
  }
  if (a.kind == SH_S || b.kind == SH_S) {
    /* which split to keep when both are split and disagree: on dp (ZeRO 3)
     * the activation's (the parameter is gathered); on tp the weight's
     * (Megatron-LM: sequence parallelism gathers the activation) */
    bool want_param = d->megatron;
    int first;
    if (a.kind == SH_S && b.kind == SH_S && d->in_param[0] != d->in_param[1])
      first = d->in_param[0] == want_param ? 0 : 1;
    else if (a.kind == SH_S && b.kind == SH_S) /* two activations: gather the smaller */
      first = ir_type_numel(&d->node->in[0]->type) >= ir_type_numel(&d->node->in[1]->type) ? 0 : 1;
    else
      first = a.kind == SH_S ? 0 : 1;
    sh_st save[2] = {d->in[0], d->in[1]};
    if (d->in[first].kind == SH_S && matmul_keep(d, &m, first, res)) return;
    d->in[0] = save[0], d->in[1] = save[1];
    if (d->in[1 - first].kind == SH_S && matmul_keep(d, &m, 1 - first, res)) return;
    d->in[0] = save[0], d->in[1] = save[1];
  }
  d->in[0] = d->in[1] = sh_R();
  *res = sh_R();
}

/* Whether operand i is the gradient of logits (cross_entropy_grad's result). */
static bool logits_grad(const sh_dec *d, int i) {
  const ir_value *v = d->node->in[i];
  return v->def && v->def->op == IR_OP_CROSS_ENTROPY_GRAD;
}

static void rule_matmul(sh_dec *d) {
  sh_st res;
  matmul_core(d, &res);
  d->out[0] = res;
  /* the LM head's input gradient, partial over the vocabulary: reduced at once */
  if (d->megatron && res.kind == SH_P && (logits_grad(d, 0) || logits_grad(d, 1))) d->reduce_results = true;
}

/* fused_matmul(a, b, extra...): the product, then the epilogue pointwise */
static void rule_fused_matmul(sh_dec *d) {
  sh_st res;
  matmul_core(d, &res);
  const ir_node *n = d->node;
  int ro = rank_out(d);
  if (res.kind == SH_P) {
    /* a partial product survives only an epilogue linear in it, with replicated extras */
    const ir_attr *e = ir_node_attr(n, "expr");
    bool partial[SH_MAX_ARGS] = {false};
    partial[0] = true; /* $0 of the epilogue is the product */
    int res_deg[IR_FUSED_MAX_RESULTS];
    bool lin = e && e->expr && e->expr->n_results == 1 && expr_degree(e->expr, partial, n->n_in - 1, res_deg) == 1;
    for (int i = 2; i < d->n_in; i++) d->in[i] = sh_R();
    if (lin) {
      d->out[0] = sh_P();
      return;
    }
    /* gather the K split of both operands: a replicated product */
    d->in[0] = d->in[1] = sh_R();
    res = sh_R();
  }
  for (int i = 2; i < d->n_in; i++) {
    int a = res.kind == SH_S ? aligned(d, i, res.dim, ro) : -1;
    if (a >= 0 && !fits(d, i, a, sh_parts(res))) {
      d->in[0] = d->in[1] = sh_R(); /* an extra that cannot follow: nothing split */
      for (int k = 2; k < d->n_in; k++) d->in[k] = sh_R();
      d->out[0] = sh_R();
      return;
    }
    d->in[i] = a >= 0 ? sh_Sk(a, sh_parts(res)) : sh_R();
  }
  d->out[0] = res;
}

/* ---- reductions ---- */

static bool reduces(const ir_node *n, int dim, int *below) {
  const ir_attr *ax = ir_node_attr(n, "axes");
  bool r = false;
  *below = 0;
  for (int i = 0; ax && i < ax->n; i++) {
    if (ax->ints[i] == dim) r = true;
    if (ax->ints[i] < dim) (*below)++;
  }
  return r;
}

static void rule_reduce(sh_dec *d) {
  const ir_node *n = d->node;
  sh_st s = d->in[0];
  if (s.kind == SH_UNSET) s = d->in[0] = sh_R();
  if (s.kind == SH_P) {
    if (n->op != IR_OP_REDUCE_MAX) {
      d->out[0] = sh_P();
      return;
    }
    s = d->in[0] = sh_R();
  }
  if (s.kind != SH_S) {
    d->out[0] = sh_R();
    return;
  }
  int below;
  bool keep = ir_node_attr_int(n, "keepdims", 0) != 0;
  /* over a padded dim: a sum of zero padding is exact; a mean's count and a
   * max would see the padding: gathered (the padding dropped) */
  if (reduces(n, s.dim, &below) && sh_padded(d, 0) && !(n->op == IR_OP_REDUCE_SUM && d->in_pad_value[0] == 0)) {
    d->in[0] = sh_R();
    d->out[0] = sh_R();
    return;
  }
  if (reduces(n, s.dim, &below)) {
    if (n->op == IR_OP_REDUCE_MAX) {
      d->max_results = true;
      d->out[0] = sh_R();
    } else {
      d->scale_results = n->op == IR_OP_REDUCE_MEAN;
      d->out[0] = sh_P();
    }
    return;
  }
  d->out[0] = sh_Sk(keep ? s.dim : s.dim - below, sh_parts(s));
}

static void rule_argmax(sh_dec *d) {
  sh_st s = d->in[0];
  int axis = (int)ir_node_attr_int(d->node, "axis", rank_in(d, 0) - 1);
  bool masks = axis == rank_in(d, 0) - 1 && ir_dtype_is_float(d->node->in[0]->type.dtype); /* its padding, if any */
  if (s.kind == SH_S && s.dim == axis && sh_parts(s) == 1 && (masks || !sh_padded(d, 0))) {
    /* each rank's first maximum, then the first of those */
    d->out[0] = sh_R();
    d->expand = sh_vocab_argmax;
    return;
  }
  if (s.kind != SH_S || s.dim == axis) {
    rule_replicate(d);
    return;
  }
  d->out[0] = sh_Sk(s.dim > axis ? s.dim - 1 : s.dim, sh_parts(s));
}

/* fused: pointwise; with {nonfinite} (made after the shard pass, by
 * fuse-elementwise, like the multi-tensor count it feeds) replicated. */
static void rule_fused(sh_dec *d) {
  if (ir_node_attr(d->node, "nonfinite")) rule_replicate(d);
  else rule_pointwise(d);
}

static void rule_count(sh_dec *d) {
  if (d->n_in > 1) { /* the multi-tensor form: made after the shard pass (fuse-elementwise), like sum_squares */
    rule_replicate(d);
    return;
  }
  if (d->in[0].kind == SH_S && sh_padded(d, 0) && !isfinite(d->in_pad_value[0])) { /* padding not known finite */
    rule_replicate(d);
    return;
  }
  if (d->in[0].kind == SH_S) {
    d->out[0] = sh_P();
    return;
  }
  if (d->slice_counts && d->in[0].kind != SH_P) {
    /* partial: the count of the rank's block (a slice no other axis splits:
     * free), else the whole count on the first rank */
    int k = 0;
    while (k < rank_in(d, 0) && ((d->in_other[0] >> k & 1) || !sh_can_split(d, 0, k))) k++;
    d->in[0] = k < rank_in(d, 0) ? sh_S(k) : sh_R();
    d->out[0] = sh_P();
    d->first_only = k == rank_in(d, 0);
    return;
  }
  rule_replicate(d);
}

/* ---- layout ---- */

static void rule_transpose(sh_dec *d) {
  sh_st s = d->in[0];
  if (s.kind == SH_UNSET) s = d->in[0] = sh_R();
  if (s.kind != SH_S) {
    d->out[0] = s;
    return;
  }
  const ir_attr *p = ir_node_attr(d->node, "perm");
  for (int i = 0; p && i < p->n; i++)
    if (p->ints[i] == s.dim) {
      d->out[0] = sh_Sk(i, sh_parts(s));
      return;
    }
  rule_replicate(d);
}

/* reshape: dims of in and out grouped into runs of equal products; a split
 * in-dim maps to the first out-dim of its run when it is the first in-dim of
 * the run (ignoring 1s) and that out-dim divides. */
static void rule_reshape(sh_dec *d) {
  sh_st s = d->in[0];
  if (s.kind == SH_UNSET) s = d->in[0] = sh_R();
  if (s.kind != SH_S) {
    d->out[0] = s;
    return;
  }
  const ir_type *x = &d->node->in[0]->type, *y = &d->node->out[0]->type;
  if (sh_padded(d, 0)) { /* a padded dim keeps its split only as a dim of its own, the same size */
    int o = -1, before = 0; /* o: the out dim after the elements of the in dims before s.dim */
    int64_t pin = 1, pout = 1;
    for (int k = 0; k < s.dim; k++) pin *= x->dims[k];
    for (int k = 0; k < y->rank && pout < pin; k++) pout *= y->dims[k], before = k + 1;
    if (pout == pin) o = before;
    while (o >= 0 && o < y->rank && y->dims[o] == 1 && x->dims[s.dim] != 1) o++;
    if (o >= 0 && o < y->rank && y->dims[o] == x->dims[s.dim] && sh_parts(s) == 1) {
      d->out[0] = sh_S(o);
      return;
    }
    rule_replicate(d);
    return;
  }
  int i = 0, j = 0;
  while (i < x->rank || j < y->rank) {
    int i0 = i, j0 = j;
    int64_t pi = i < x->rank ? x->dims[i++] : 1, pj = j < y->rank ? y->dims[j++] : 1;
    while (pi != pj) {
      if (pi < pj && i < x->rank) pi *= x->dims[i++];
      else if (pj < pi && j < y->rank) pj *= y->dims[j++];
      else break;
    }
    if (s.dim < i0 || s.dim >= i) continue;
    /* the non-1 dims of the run on each side */
    int xs[IR_MAX_RANK], ys[IR_MAX_RANK], nx = 0, ny = 0;
    for (int k = i0; k < i; k++)
      if (x->dims[k] != 1 || k == s.dim) xs[nx++] = k;
    for (int k = j0; k < j; k++)
      if (y->dims[k] != 1) ys[ny++] = k;
    bool alone = d->in_local[0][s.dim] == x->dims[s.dim]; /* this axis is the dim's only split */
    if (sh_parts(s) > 1) {
      /* a dim in parts: unchanged, or cut into [parts, rest...] with the split on the rest */
      if (nx == 1 && ny == 1) {
        d->out[0] = sh_Sk(ys[0], sh_parts(s));
        return;
      }
      if (nx == 1 && ny >= 2 && alone && y->dims[ys[0]] == sh_parts(s) && y->dims[ys[1]] % d->size == 0) {
        int64_t inner = 1;
        for (int k = 2; k < ny; k++) inner *= y->dims[ys[k]];
        (void)inner; /* block c of each part is the rows [c L/n, (c+1) L/n) of the dim after it */
        d->out[0] = sh_S(ys[1]);
        return;
      }
      break;
    }
    /* dims merged into one: the split dim's block, in every index of the dims
     * before it, is that many parts of the merged dim (a [B, T] split on T
     * flattened to [B T]: B parts), a contraction over it still pairs the
     * same elements */
    if (ny == 1 && nx >= 2 && alone && xs[0] != s.dim) {
      int64_t outer = 1;
      for (int k = 0; k < nx && xs[k] != s.dim; k++) outer *= d->in_local[0][xs[k]]; /* within the outer axes' block */
      if (outer <= 127) {
        d->out[0] = sh_Sk(ys[0], (int)outer);
        return;
      }
      break;
    }
    /* the run [i0, i) -> [j0, j): the split dim must be its first non-1 dim */
    int first = i0;
    while (first < i && x->dims[first] == 1) first++;
    int out_first = j0;
    while (out_first < j && y->dims[out_first] == 1) out_first++;
    /* the out dim takes the split only when its size divides the same way */
    int64_t local_in = d->in_local[0][s.dim], split_in = x->dims[s.dim] / (local_in ? local_in : 1);
    if (first == s.dim && out_first < j && (y->dims[out_first] / split_in) % d->size == 0 &&
        y->dims[out_first] % split_in == 0) {
      d->out[0] = sh_S(out_first);
      return;
    }
    break;
  }
  rule_replicate(d);
}

static void rule_broadcast(sh_dec *d) {
  sh_st s = d->in[0];
  if (s.kind == SH_UNSET) s = d->in[0] = sh_R();
  if (s.kind == SH_S) {
    int o = out_dim(d, 0, s.dim, rank_out(d));
    if (d->node->in[0]->type.dims[s.dim] == d->node->out[0]->type.dims[o]) {
      d->out[0] = sh_Sk(o, sh_parts(s));
      return;
    }
    rule_replicate(d);
    return;
  }
  d->out[0] = s; /* R or P: a broadcast of a partial sum is a partial sum */
}

/* The parts split and concat make along their axis: m equal sizes, else 1. */
static int equal_parts(const sh_dec *d, int axis) {
  const ir_node *n = d->node;
  if (n->op == IR_OP_SPLIT) {
    const ir_attr *sz = ir_node_attr(n, "sizes");
    if (!sz || sz->n < 2) return 1;
    for (int i = 1; i < sz->n; i++)
      if (sz->ints[i] != sz->ints[0]) return 1;
    return sz->n;
  }
  if (n->op == IR_OP_CONCAT && n->n_in >= 2) {
    for (int i = 1; i < n->n_in; i++)
      if (n->in[i]->type.dims[axis] != n->in[0]->type.dims[axis]) return 1;
    return n->n_in;
  }
  return 1;
}

/* slice, unslice, split, concat along `axis`: a split elsewhere follows;
 * along the axis only split (of a value in as many parts as it makes) and
 * concat (of equal split values, giving parts) keep it. */
static void rule_along_axis(sh_dec *d) {
  int axis = (int)ir_node_attr_int(d->node, "axis", 0);
  int m = equal_parts(d, axis);
  if (d->node->op == IR_OP_SPLIT && m > 1 && sh_eq(d->in[0], sh_Sk(axis, m))) {
    all_out(d, sh_S(axis));
    return;
  }
  if (d->node->op == IR_OP_CONCAT && m > 1 && m <= 127) {
    bool all = true;
    for (int i = 0; i < d->n_in && all; i++) all = sh_eq(d->in[i], sh_S(axis));
    if (all) {
      d->out[0] = sh_Sk(axis, m);
      return;
    }
  }
  sh_st s = d->in[0];
  for (int i = 1; i < d->n_in; i++)
    if (s.kind == SH_UNSET || (s.kind == SH_R && d->in[i].kind != SH_UNSET)) s = d->in[i];
  if (s.kind == SH_UNSET) s = sh_R();
  if (s.kind == SH_S && (s.dim == axis || sh_parts(s) > 1)) s = sh_R();
  if (s.kind == SH_S)
    for (int i = 0; i < d->n_in; i++)
      if (!fits(d, i, s.dim, 1)) s = sh_R();
  for (int i = 0; i < d->n_in; i++) d->in[i] = s;
  all_out(d, s); /* P stays P: each of these is linear */
}

/* ---- model ops ---- */

/* Megatron-LM's vocabulary-parallel table (on tp): a table split along its
 * rows stays so (the pass places a parameter table read at the data ids
 * that way before the rules run: shard_train.c; a vocabulary that does not
 * divide is padded to a multiple of tp). */
static bool vocab_table(const sh_dec *d) {
  return d->megatron && rank_in(d, 0) == 2 && d->in[0].kind == SH_S && d->in[0].dim == 0 && sh_parts(d->in[0]) == 1;
}

/* embedding_grad's side of it: the gradient of a table read at data ids:
 * the rank's block of the rows (padded to a multiple of the axis when V
 * does not divide, as the table). */
static bool vocab_grad(const sh_dec *d) {
  const ir_value *ids = d->node->in[0];
  int64_t v = ir_node_attr_int(d->node, "vocab", 0);
  return d->megatron && !ids->def && ids->role == IR_ROLE_INPUT && v >= d->size &&
         rank_in(d, 1) == ids->type.rank + 1;
}

static void rule_embedding(sh_dec *d) {
  sh_st t = d->in[0], ids = d->in[1];
  int ro = rank_out(d);
  if (vocab_table(d)) { /* each id's row from the rank that holds it: a partial sum */
    d->in[0] = sh_S(0);
    d->in[1] = sh_R();
    d->out[0] = sh_P();
    d->expand = sh_vocab_embedding;
    d->reduce_results = true;
    return;
  }
  if (ids.kind == SH_S) {
    d->in[0] = sh_R();
    d->out[0] = sh_S(ids.dim);
    return;
  }
  d->in[1] = sh_R();
  if (t.kind == SH_S && t.dim == 1) { /* split columns */
    d->out[0] = sh_S(ro - 1);
    return;
  }
  d->in[0] = sh_R();
  d->out[0] = sh_R();
}

static void rule_embedding_grad(sh_dec *d) {
  sh_st ids = d->in[0], g = d->in[1];
  int rg = rank_in(d, 1);
  if (vocab_grad(d)) { /* g's rows whose ids fall in the rank's block: no communication */
    d->in[0] = d->in[1] = sh_R();
    d->out[0] = sh_S(0);
    d->expand = sh_vocab_embedding_grad;
    return;
  }
  if (ids.kind == SH_S && sh_can_split(d, 1, ids.dim)) {
    d->in[1] = sh_S(ids.dim);
    d->out[0] = sh_P();
    return;
  }
  if (g.kind == SH_S && g.dim < rg - 1 && (ids.kind == SH_S ? ids.dim == g.dim : sh_can_split(d, 0, g.dim))) {
    d->in[0] = sh_S(g.dim);
    d->out[0] = sh_P();
    return;
  }
  d->in[0] = sh_R();
  if (g.kind == SH_S && g.dim == rg - 1) {
    d->out[0] = sh_S(1);
    return;
  }
  if (g.kind == SH_P) {
    d->out[0] = sh_P(); /* linear in g */
    return;
  }
  d->in[1] = sh_R();
  d->out[0] = sh_R();
}

static void rule_cross_entropy(sh_dec *d) {
  sh_st l = d->in[0], t = d->in[1];
  int rl = rank_in(d, 0);
  if (split_classes(d)) { /* vocabulary parallel: three all-reduces of one float per position */
    d->in[1] = sh_R();
    d->out[0] = sh_R();
    d->expand = sh_vocab_cross_entropy;
    return;
  }
  int pos = l.kind == SH_S && l.dim < rl - 1 ? l.dim : t.kind == SH_S ? t.dim : -1;
  if (pos >= 0 && (sh_can_split(d, 0, pos) || (l.kind == SH_S && l.dim == pos)) &&
      (sh_can_split(d, 1, pos) || (t.kind == SH_S && t.dim == pos))) {
    d->in[0] = d->in[1] = sh_S(pos);
    d->out[0] = sh_P();
    d->scale_results = true; /* the mean over a 1 / size share of the positions */
    return;
  }
  rule_replicate(d);
}

/* shard_hint(x) {spec}: the user's constraint (.tg shard(x, [dp, _, tp])):
 * on this axis x is split along the dim the spec names, else replicated;
 * the engine converts the operand (a partial sum is reduced or
 * reduce-scattered, a split gathered or sliced). The shard pass checked
 * that the named dims divide (shard_train.c check_hints). */
static void rule_shard_hint(sh_dec *d) {
  const ir_attr *a = ir_node_attr(d->node, "spec");
  ir_shard s;
  char err[200];
  sh_st st = sh_R();
  if (a && a->kind == IR_ATTR_STR && ir_shard_spec_parse(a->s, rank_out(d), &s, err, sizeof err) == 0)
    for (int k = 0; k < rank_out(d); k++)
      if (((s.split[k] >> d->axis) & 1) && sh_can_split(d, 0, k)) st = sh_S(k);
  d->in[0] = st;
  d->out[0] = st;
}

/* attention(q, k, v) -> (o, lse), attention_grad(q, k, v, o, lse, do):
 * every operand and result shares the leading batch (and head) dims: those
 * before the last two of q (lse has one dim less: T). */
static void rule_attention(sh_dec *d) {
  /* with {heads} (fuse-transpose, after the shard pass in the pipeline:
   * only a graph read back from .ir gets here so) q is [..., T, H, E] and
   * lse [..., H, T]: only the leading batch dims are shared */
  int nb = rank_in(d, 0) - (ir_node_attr(d->node, "heads") ? 3 : 2);
  /* a decode step's qpos (attention's 4th operand) is one number: replicated */
  int n = d->node->op == IR_OP_ATTENTION && d->n_in == 4 ? 3 : d->n_in;
  int dim = -1;
  for (int i = 0; i < n && dim < 0; i++)
    if (d->in[i].kind == SH_S && d->in[i].dim < nb) dim = d->in[i].dim;
  for (int i = 0; i < n && dim >= 0; i++)
    if (!(d->in[i].kind == SH_S && d->in[i].dim == dim) && !sh_can_split(d, i, dim)) dim = -1;
  if (dim < 0) {
    rule_replicate(d);
    return;
  }
  for (int i = 0; i < d->n_in; i++) d->in[i] = i < n ? sh_S(dim) : sh_R();
  all_out(d, sh_S(dim));
}

static const sh_rule rules[IR_NUM_OPS] = {
    [IR_OP_CONST] = rule_replicate,
    [IR_OP_IOTA] = rule_replicate,
    [IR_OP_WHERE] = rule_pointwise,
    [IR_OP_MATMUL] = rule_matmul,
    [IR_OP_TRANSPOSE] = rule_transpose,
    [IR_OP_RESHAPE] = rule_reshape,
    [IR_OP_BROADCAST] = rule_broadcast,
    [IR_OP_SLICE] = rule_along_axis,
    [IR_OP_CONCAT] = rule_along_axis,
    [IR_OP_SPLIT] = rule_along_axis,
    [IR_OP_REDUCE_SUM] = rule_reduce,
    [IR_OP_REDUCE_MEAN] = rule_reduce,
    [IR_OP_REDUCE_MAX] = rule_reduce,
    [IR_OP_SOFTMAX] = rule_softmax,
    [IR_OP_LOG_SOFTMAX] = rule_softmax,
    [IR_OP_LAYERNORM] = rule_norm,
    [IR_OP_RMSNORM] = rule_norm,
    [IR_OP_ARGMAX] = rule_argmax,
    [IR_OP_COUNT_NONFINITE] = rule_count,
    [IR_OP_SUM_SQUARES] = rule_replicate, /* made after the shard pass (fuse-elementwise), on per-rank graphs */
    [IR_OP_EMBEDDING] = rule_embedding,
    [IR_OP_CROSS_ENTROPY] = rule_cross_entropy,
    [IR_OP_CAUSAL_MASK] = rule_causal_mask,
    [IR_OP_DROPOUT] = rule_pointwise, /* x, its positions split alike (global indices); the key replicated */
    [IR_OP_EINSUM] = rule_replicate,
    [IR_OP_UNSLICE] = rule_along_axis,
    [IR_OP_EMBEDDING_GRAD] = rule_embedding_grad,
    [IR_OP_CROSS_ENTROPY_GRAD] = rule_cross_entropy_grad,
    [IR_OP_ATTENTION] = rule_attention,
    [IR_OP_ATTENTION_GRAD] = rule_attention,
    [IR_OP_FUSED] = rule_fused,
    [IR_OP_FUSED_MATMUL] = rule_fused_matmul,
    [IR_OP_ADD_LAYERNORM] = rule_norm,
    [IR_OP_LAYERNORM_GRAD] = rule_norm_grad,
    [IR_OP_RMSNORM_GRAD] = rule_norm_grad,
    [IR_OP_LINEAR_CROSS_ENTROPY] = rule_replicate, /* made after the shard pass, on graphs without a mesh */
    [IR_OP_SHARD_HINT] = rule_shard_hint,
};

sh_rule sh_rule_of(ir_op op) {
  if ((unsigned)op >= IR_NUM_OPS || op == IR_OP_GRAD || op == IR_OP_MESH_SLICE || ir_op_has(op, IR_OPF_COMM)) return NULL;
  if (ir_op_kind_of(op) == IR_OPK_UNARY || ir_op_kind_of(op) == IR_OPK_BINARY) return rule_pointwise;
  return rules[op];
}
