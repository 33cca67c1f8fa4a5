/* passes/checkpoint.c — the `checkpoint` pass: activation checkpointing
 * (rematerialization). Trades the memory of forward activations held for the
 * backward pass against recomputing them.
 *
 * Requires: a graph after autodiff (forward nodes produce role act, backward
 * nodes role grad; node->layer is the `repeat` iteration, -1 outside), and no
 * CSE afterwards (canonicalize would merge the clones back into the
 * originals). A graph with no backward node, or with unexpanded grad nodes,
 * is left alone. Invalidates: node order and ids.
 *
 * Terms. Forward nodes are the nodes of phase forward before the first
 * backward node. A forward value is *saved* when a node at or after the first
 * backward node reads it (and it is not a graph output). A policy marks each
 * forward value kept or not; every saved value that is not kept is
 * recomputed: the forward nodes needed to compute it from kept values,
 * inputs and params are cloned (results of role `recompute`, named
 * <name>.rc), the clones of one group are placed together in forward order
 * just before the first backward node that reads any value of the group, and
 * the backward uses read the clones. The originals then die after their last
 * forward use, and the executor frees them early. Clones run the same ops on
 * the same bits, so gradients are bit-identical under every policy.
 *
 * Policies (o->checkpoint):
 *   none       nothing changes.
 *   block      every block (layer) is a group: kept are the values a block
 *              hands to another block or to code outside blocks (a block's
 *              input is such a value of the block before), and everything
 *              outside blocks; the rest of each block is recomputed.
 *   sqrt       blocks are grouped in segments of k = round(sqrt(n)) blocks
 *              (Chen et al. 2016): only values crossing segment boundaries
 *              are kept, so about n/k + k blocks' worth of activations live.
 *   selective  only the attention scores (the T x T part) are recomputed,
 *              grouped by layer. A *score root* is a matmul (or two-operand
 *              einsum) of two non-parameter, non-constant values, none of them
 *              a score value, whose result has rank >= 2 and its last two
 *              dims equal (T x T, T >= 2); score values are the roots' results
 *              and, in forward order, results of elementwise ops, causal_mask,
 *              softmax and log_softmax reading a score value whose result
 *              keeps those last two dims (scale, mask, softmax, dropout).
 *              The product with V is a matmul reading a score value, so it is
 *              never a root: the chain ends there. Operands of the clones
 *              that the backward does not read and that a layout op (no
 *              FLOPs) made are cloned as well, so nothing stays alive only
 *              for the recomputation.
 *   budget=B   the cheapest (least recompute FLOPs) choice, per block, of
 *              storing its activations or recomputing it in a segment that
 *              starts at a kept block input, whose modelled activation
 *              memory fits in B bytes (B: an integer, optionally with K, M,
 *              G or T = 2^10..2^40, or KiB..TiB). Solved exactly for a chain
 *              of blocks by pass_checkpoint_solve_chain (dynamic programming
 *              over Pareto sets of (kept bytes, FLOPs), one run per candidate
 *              largest-segment size); the model is described in pass.h.
 *              When no plan fits the pass fails with the smallest need.
 * Blocks/segments apply to values of layer >= 0; values outside blocks are
 * always kept.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"

/* ===================================================================== */
/* the chain solver                                                       */
/* ===================================================================== */

/* Bytes kept at the cut before block i (1 <= i <= n; i == n: the chain's end)
 * when block i-1 was stored (prev_stored) or recomputed, and block i has
 * kind `next` (-1 at the end). Inner cuts of a segment are not kept. */
static double cut_bytes(const pass_ck_block *b, int i, bool prev_stored, int next) {
  if (i == 0) return 0;
  if (!prev_stored) return next == PASS_CK_CONT ? 0 : b[i - 1].out;
  return next == PASS_CK_START ? b[i - 1].out : b[i - 1].out_saved;
}

void pass_checkpoint_plan_cost(int n, const pass_ck_block *b, double base, const int *plan, double *mem,
                               double *cost) {
  double kept = 0, seg = 0, max_seg = 0, c = 0;
  *mem = -1;
  *cost = 0;
  for (int i = 0; i < n; i++) {
    bool prev_stored = i == 0 || plan[i - 1] == PASS_CK_STORE;
    if (plan[i] != PASS_CK_STORE && plan[i] != PASS_CK_START && plan[i] != PASS_CK_CONT) return;
    if (plan[i] == PASS_CK_CONT && prev_stored) return;
    kept += cut_bytes(b, i, prev_stored, plan[i]);
    if (plan[i] == PASS_CK_STORE) {
      kept += b[i].act;
      continue;
    }
    seg = plan[i] == PASS_CK_START ? b[i].act : seg + b[i - 1].out_saved + b[i].act;
    c += b[i].flops;
    if (seg > max_seg) max_seg = seg;
  }
  if (n > 0) kept += cut_bytes(b, n, plan[n - 1] == PASS_CK_STORE, -1);
  *mem = base + kept + max_seg;
  *cost = c;
}

typedef struct {
  double kept, cost;
  int pi, ps, pk; /* parent: position, state, index in its list (-1: root) */
  int seg_end;    /* the step from the parent: 0 = store block pi, else a segment [pi, seg_end) */
} dp_point;

typedef struct {
  dp_point *p;
  int n, cap;
} dp_list;

static int dp_push(dp_list *l, dp_point pt) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 8;
    dp_point *np = realloc(l->p, (size_t)cap * sizeof *np);
    if (!np) return -1;
    l->p = np;
    l->cap = cap;
  }
  l->p[l->n++] = pt;
  return 0;
}

static int cmp_point(const void *a, const void *b) {
  const dp_point *x = a, *y = b;
  if (x->kept != y->kept) return x->kept < y->kept ? -1 : 1;
  if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
  return 0;
}

/* Keeps the Pareto-optimal points (no other point has <= kept and <= cost). */
static void dp_prune(dp_list *l) {
  if (l->n < 2) return;
  qsort(l->p, (size_t)l->n, sizeof *l->p, cmp_point);
  int k = 0;
  for (int i = 0; i < l->n; i++)
    if (k == 0 || l->p[i].cost < l->p[k - 1].cost) l->p[k++] = l->p[i];
  l->n = k;
}

/* One DP run with every recomputed segment's size (act + inner out_saved)
 * <= cap. lists[2*i + s]: points after deciding blocks 0..i-1, s = 1 if block
 * i-1 was stored (or i == 0). Points whose kept bytes exceed kept_limit are
 * dropped (they cannot fit); with lexi only the least-kept point (then least
 * cost) of a list survives. Returns 0 or -1 (out of memory). */
static int dp_run(int n, const pass_ck_block *b, double cap, double kept_limit, bool lexi, dp_list *lists) {
  for (int i = 0; i <= 2 * n + 1; i++) lists[i].n = 0;
  if (dp_push(&lists[1], (dp_point){0, 0, -1, -1, -1, 0}) != 0) return -1;
  for (int i = 0; i < n; i++)
    for (int s = 0; s < 2; s++) {
      dp_list *l = &lists[2 * i + s];
      dp_prune(l);
      if (lexi && l->n > 1) l->n = 1;
      for (int k = 0; k < l->n; k++) {
        dp_point p = l->p[k];
        double store = p.kept + cut_bytes(b, i, s == 1, PASS_CK_STORE) + b[i].act;
        if (store <= kept_limit && dp_push(&lists[2 * (i + 1) + 1], (dp_point){store, p.cost, i, s, k, 0}) != 0)
          return -1;
        double enter = p.kept + cut_bytes(b, i, s == 1, PASS_CK_START), seg = 0, f = 0;
        if (enter > kept_limit) continue;
        for (int j = i + 1; j <= n; j++) {
          seg += b[j - 1].act + (j - 1 > i ? b[j - 2].out_saved : 0);
          f += b[j - 1].flops;
          if (seg > cap) break;
          if (dp_push(&lists[2 * j], (dp_point){enter, p.cost + f, i, s, k, j}) != 0) return -1;
        }
      }
    }
  for (int s = 0; s < 2; s++) {
    dp_prune(&lists[2 * n + s]);
    if (lexi && lists[2 * n + s].n > 1) lists[2 * n + s].n = 1;
  }
  return 0;
}

static void dp_plan(const dp_list *lists, int s, int k, int n, int *plan) {
  int i = n;
  while (i > 0) {
    const dp_point *p = &lists[2 * i + s].p[k];
    if (p->seg_end == 0) plan[p->pi] = PASS_CK_STORE;
    else
      for (int b = p->pi; b < p->seg_end; b++) plan[b] = b == p->pi ? PASS_CK_START : PASS_CK_CONT;
    i = p->pi;
    s = p->ps;
    k = p->pk;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int pass_checkpoint_solve_chain(int n, const pass_ck_block *b, double base, double budget, int *plan, double *mem,
                                double *cost) {
  *mem = base;
  *cost = 0;
  if (n <= 0) return base <= budget ? 0 : 1;
  /* candidate caps: 0 (nothing recomputed) and every segment sum */
  size_t n_caps = 1 + (size_t)n * (size_t)(n + 1) / 2;
  double *caps = malloc(n_caps * sizeof *caps);
  dp_list *lists = calloc((size_t)(2 * n + 2), sizeof *lists);
  int *tmp = malloc((size_t)n * sizeof *tmp);
  int rc = -1;
  if (!caps || !lists || !tmp) goto out;
  size_t m = 0;
  caps[m++] = 0;
  for (int i = 0; i < n; i++) {
    double s = 0;
    for (int j = i; j < n; j++) caps[m++] = s += b[j].act + (j > i ? b[j - 1].out_saved : 0);
  }
  qsort(caps, m, sizeof *caps, cmp_double);
  size_t u = 0;
  for (size_t i = 0; i < m; i++)
    if (u == 0 || caps[i] != caps[u - 1]) caps[u++] = caps[i];
  bool found_fit = false;
  double best_cost = 0, best_mem = 0, least_mem = 0, least_cost = 0;
  bool have_least = false;
  /* storing everything costs nothing: optimal whenever it fits */
  for (int i = 0; i < n; i++) tmp[i] = PASS_CK_STORE;
  double pm, pc;
  pass_checkpoint_plan_cost(n, b, base, tmp, &pm, &pc);
  if (pm <= budget) {
    memcpy(plan, tmp, (size_t)n * sizeof *plan);
    found_fit = true;
    best_mem = pm;
    best_cost = pc;
  }
  /* pass 0: the cheapest plan that fits (caps that leave room); pass 1, when
   * nothing fits: the plan of least memory */
  for (int pass = 0; pass < 2 && !found_fit; pass++)
    for (size_t ci = 0; ci < u; ci++) {
      if (pass == 0 && base + caps[ci] > budget) break;
      double limit = pass == 0 ? budget - base - caps[ci] : INFINITY;
      if (dp_run(n, b, caps[ci], limit, pass == 1, lists) != 0) goto out;
      for (int s = 0; s < 2; s++) {
        const dp_list *l = &lists[2 * n + s];
        for (int k = 0; k < l->n; k++) {
          dp_plan(lists, s, k, n, tmp);
          pass_checkpoint_plan_cost(n, b, base, tmp, &pm, &pc);
          if (pm < 0) continue;
          if (pass == 0 && pm <= budget && (!found_fit || pc < best_cost || (pc == best_cost && pm < best_mem))) {
            found_fit = true;
            best_cost = pc;
            best_mem = pm;
            memcpy(plan, tmp, (size_t)n * sizeof *plan);
          }
          if (pass == 1 && (!have_least || pm < least_mem || (pm == least_mem && pc < least_cost))) {
            have_least = true;
            least_mem = pm;
            least_cost = pc;
            memcpy(plan, tmp, (size_t)n * sizeof *plan);
          }
        }
      }
    }
  if (found_fit) {
    *mem = best_mem;
    *cost = best_cost;
    rc = 0;
  } else {
    *mem = least_mem;
    *cost = least_cost;
    rc = 1;
  }
out:
  if (lists)
    for (int i = 0; i < 2 * n + 2; i++) free(lists[i].p);
  free(lists);
  free(caps);
  free(tmp);
  return rc;
}

/* ===================================================================== */
/* the pass                                                               */
/* ===================================================================== */

typedef enum { POL_NONE, POL_BLOCK, POL_SELECTIVE, POL_SQRT, POL_BUDGET } policy;

typedef struct {
  ir_graph *g;
  const pass_options *o;
  int nv, nn;          /* value ids / original node count */
  int first_bwd;       /* index of the first backward node */
  bool *fwd;           /* by value id: defined by a forward node */
  bool *saved;         /* by value id: a forward value read at or after first_bwd */
  bool *keep;          /* by value id: the policy keeps it */
  int *group;          /* by value id: recompute group of a value that is not kept, else -1 */
  int n_groups;
  int *blocks;         /* distinct layers >= 0 of forward nodes, ascending */
  int n_blocks;
} ck;

static bool is_fwd_node(const ck *c, int ni) {
  return ni < c->first_bwd && pass_node_phase(c->g->nodes[ni]) == PASS_PHASE_FORWARD;
}

static int block_index(const ck *c, int layer) {
  int lo = 0, hi = c->n_blocks - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (c->blocks[mid] == layer) return mid;
    if (c->blocks[mid] < layer) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

static int parse_bytes(const char *s, double *out) {
  if (!s || *s < '0' || *s > '9') return -1;
  char *end;
  double v = strtod(s, &end);
  for (const char *p = s; p < end; p++)
    if (*p < '0' || *p > '9') return -1; /* digits only: no exponent, no fraction */
  static const char *const suffixes[] = {"", "K", "M", "G", "T", NULL, "KiB", "MiB", "GiB", "TiB"};
  for (int i = 0; i < 10; i++) {
    if (!suffixes[i] || strcmp(end, suffixes[i]) != 0) continue;
    *out = v * pow(1024.0, i % 5);
    return 0;
  }
  return -1;
}

/* ---- analysis ---- */
static int analyze(ck *c) {
  ir_graph *g = c->g;
  c->nn = g->n_nodes;
  c->first_bwd = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    g->nodes[i]->id = i;
    pass_phase p = pass_node_phase(g->nodes[i]);
    if (c->first_bwd < 0 && (p == PASS_PHASE_BACKWARD || p == PASS_PHASE_OPTIMIZER)) c->first_bwd = i;
  }
  c->nv = g->n_values;
  c->fwd = calloc((size_t)c->nv + 1, sizeof *c->fwd);
  c->saved = calloc((size_t)c->nv + 1, sizeof *c->saved);
  c->keep = calloc((size_t)c->nv + 1, sizeof *c->keep);
  c->group = malloc(((size_t)c->nv + 1) * sizeof *c->group);
  c->blocks = malloc(((size_t)c->nn + 1) * sizeof *c->blocks);
  if (!c->fwd || !c->saved || !c->keep || !c->group || !c->blocks) return -1;
  for (int i = 0; i < c->nv; i++) c->group[i] = -1;
  if (c->first_bwd < 0) return 0;
  for (int i = 0; i < c->first_bwd; i++)
    if (is_fwd_node(c, i))
      for (int j = 0; j < g->nodes[i]->n_out; j++) c->fwd[g->nodes[i]->out[j]->id] = true;
  for (int i = c->first_bwd; i < c->nn; i++) {
    const ir_node *n = g->nodes[i];
    for (int j = 0; j < n->n_in; j++)
      if (c->fwd[n->in[j]->id]) c->saved[n->in[j]->id] = true;
  }
  for (int i = 0; i < g->n_outputs; i++) c->saved[g->outputs[i].value->id] = false;
  /* blocks: distinct layers of forward nodes */
  c->n_blocks = 0;
  for (int i = 0; i < c->first_bwd; i++) {
    int l = g->nodes[i]->layer;
    if (l < 0 || !is_fwd_node(c, i) || block_index(c, l) >= 0) continue;
    int k = c->n_blocks++;
    while (k > 0 && c->blocks[k - 1] > l) {
      c->blocks[k] = c->blocks[k - 1];
      k--;
    }
    c->blocks[k] = l;
  }
  return 0;
}

static int value_block(const ck *c, const ir_value *v) {
  return v->def ? block_index(c, v->def->layer) : -1;
}

/* block, sqrt, budget: seg[b] >= 0 groups blocks into recomputed segments;
 * stored blocks have seg[b] = -1. A value is kept unless it belongs to a
 * recomputed segment and no forward node of another segment (or outside
 * blocks) reads it. */
static void mark_segments(ck *c, const int *seg) {
  ir_graph *g = c->g;
  for (int i = 0; i < c->nv; i++) c->keep[i] = true;
  for (int i = 0; i < c->first_bwd; i++) {
    if (!is_fwd_node(c, i)) continue;
    const ir_node *n = g->nodes[i];
    int b = block_index(c, n->layer);
    for (int j = 0; j < n->n_out; j++) {
      int id = n->out[j]->id;
      if (b >= 0 && seg[b] >= 0) {
        c->keep[id] = false;
        c->group[id] = seg[b];
      }
    }
  }
  /* crossing values: read by a forward node of another segment / outside blocks */
  for (int i = 0; i < c->first_bwd; i++) {
    if (!is_fwd_node(c, i)) continue;
    const ir_node *n = g->nodes[i];
    int b = block_index(c, n->layer);
    int s = b >= 0 ? (seg[b] >= 0 ? seg[b] : -2 - b) : -1;
    for (int j = 0; j < n->n_in; j++) {
      const ir_value *v = n->in[j];
      if (!c->fwd[v->id] || c->keep[v->id]) continue;
      if (c->group[v->id] != s) c->keep[v->id] = true;
    }
  }
  for (int i = 0; i < g->n_outputs; i++) c->keep[g->outputs[i].value->id] = true;
}

static bool last_two_square(const ir_type *t) {
  return t->rank >= 2 && t->dims[t->rank - 1] == t->dims[t->rank - 2] && t->dims[t->rank - 1] >= 2;
}

static bool non_param(const ck *c, const ir_value *v) {
  (void)c;
  if (v->role == IR_ROLE_PARAM || v->role == IR_ROLE_CONST) return false;
  return !(v->def && (v->def->op == IR_OP_CONST || v->def->op == IR_OP_IOTA));
}

/* selective: keep everything but the score values; group = layer. */
static void mark_selective(ck *c) {
  ir_graph *g = c->g;
  bool *score = calloc((size_t)c->nv + 1, sizeof *score);
  if (!score) return;
  for (int i = 0; i < c->first_bwd; i++) {
    if (!is_fwd_node(c, i)) continue;
    const ir_node *n = g->nodes[i];
    if (n->n_out != 1) continue;
    const ir_value *r = n->out[0];
    bool reads_score = false;
    for (int j = 0; j < n->n_in; j++) reads_score |= score[n->in[j]->id];
    if ((n->op == IR_OP_MATMUL || (n->op == IR_OP_EINSUM && n->n_in == 2)) && !reads_score) {
      if (last_two_square(&r->type) && non_param(c, n->in[0]) && non_param(c, n->in[1])) score[r->id] = true;
    } else if (reads_score && (ir_op_is_elementwise(n->op) || n->op == IR_OP_CAUSAL_MASK || n->op == IR_OP_SOFTMAX ||
                               n->op == IR_OP_LOG_SOFTMAX)) {
      for (int j = 0; j < n->n_in; j++) {
        const ir_type *t = &n->in[j]->type;
        if (score[n->in[j]->id] && last_two_square(&r->type) && r->type.dims[r->type.rank - 1] == t->dims[t->rank - 1])
          score[r->id] = true;
      }
    }
  }
  /* groups: layer -1 -> 0, block b -> b + 1 */
  for (int i = 0; i < c->nv; i++) {
    /* a forward value the backward does not read, made by a layout op (no
     * FLOPs: the transposes before Q K^T), is cloned too rather than kept
     * alive for the clones */
    const ir_value *v = g->values[i];
    bool free_layout = c->fwd[i] && !c->saved[i] && v->def && pass_node_cost(v->def).flops == 0;
    c->keep[i] = !score[i] && !free_layout;
    if (score[i]) c->group[i] = value_block(c, v) + 1;
  }
  for (int i = 0; i < g->n_outputs; i++) c->keep[g->outputs[i].value->id] = true;
  c->n_groups = c->n_blocks + 1;
  free(score);
}

/* ---- the budget policy: the chain model of the graph ---- */
static double vbytes(const ir_value *v) {
  double b = (double)ir_dtype_size(v->type.dtype);
  for (int d = 0; d < v->type.rank; d++) b *= (double)v->type.dims[d];
  return b;
}

static void describe_plan(const ck *c, const int *plan, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = 0;
  if (c->n_blocks == 0) {
    snprintf(buf, len, "the graph has no repeat blocks: its activations are all kept");
    return;
  }
  const char *heads[2] = {"storing the activations of blocks", "keeping the inputs of blocks"};
  int kinds[2] = {PASS_CK_STORE, PASS_CK_START};
  for (int h = 0; h < 2; h++) {
    int count = 0;
    for (int b = 0; b < c->n_blocks; b++)
      if (plan[b] == kinds[h]) count++;
    if (!count) continue;
    if (k >= len) break;
    k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? " and " : "", heads[h]);
    int shown = 0;
    for (int b = 0; b < c->n_blocks && k < len; b++) {
      if (plan[b] != kinds[h]) continue;
      if (shown == 16) {
        k += (size_t)snprintf(buf + k, len - k, ", ...");
        break;
      }
      k += (size_t)snprintf(buf + k, len - k, "%s %d", shown ? "," : "", c->blocks[b]);
      shown++;
    }
  }
  if (k < len) {
    int rec = 0;
    for (int b = 0; b < c->n_blocks; b++) rec += plan[b] != PASS_CK_STORE;
    snprintf(buf + k, len - k, rec ? ", recomputing the rest" : "");
  }
}

static int plan_budget(ck *c, double budget, int *seg) {
  ir_graph *g = c->g;
  int nb = c->n_blocks;
  pass_ck_block *blk = calloc((size_t)nb + 1, sizeof *blk);
  int *plan = calloc((size_t)nb + 1, sizeof *plan);
  bool *crossing = calloc((size_t)c->nv + 1, sizeof *crossing);
  double base = 0;
  int rc = -1;
  if (!blk || !plan || !crossing) goto out;
  /* crossing values: read by a forward node outside their block */
  for (int i = 0; i < c->first_bwd; i++) {
    if (!is_fwd_node(c, i)) continue;
    const ir_node *n = g->nodes[i];
    int b = block_index(c, n->layer);
    for (int j = 0; j < n->n_in; j++) {
      const ir_value *v = n->in[j];
      if (c->fwd[v->id] && value_block(c, v) != b) crossing[v->id] = true;
    }
  }
  for (int i = 0; i < c->first_bwd; i++) {
    if (!is_fwd_node(c, i)) continue;
    const ir_node *n = g->nodes[i];
    int b = block_index(c, n->layer);
    if (b >= 0) blk[b].flops += pass_node_cost(n).flops;
    for (int j = 0; j < n->n_out; j++) {
      int id = n->out[j]->id;
      double by = vbytes(n->out[j]);
      if (b < 0) base += c->saved[id] || crossing[id] ? by : 0;
      else if (crossing[id]) {
        blk[b].out += by;
        blk[b].out_saved += c->saved[id] ? by : 0;
      } else if (c->saved[id]) blk[b].act += by;
    }
  }
  double mem, cost;
  int r = pass_checkpoint_solve_chain(nb, blk, base, budget, plan, &mem, &cost);
  if (r < 0) goto out;
  if (r == 1) {
    char desc[512];
    describe_plan(c, plan, desc, sizeof desc);
    ir_error_plain(c->o->diag, "no checkpoint plan fits in %.0f bytes: the smallest needs %.0f bytes (%s)", budget,
                   mem, desc);
    rc = 1;
    goto out;
  }
  int s = -1;
  for (int b = 0; b < nb; b++) {
    if (plan[b] == PASS_CK_START) s++;
    seg[b] = plan[b] == PASS_CK_STORE ? -1 : s;
  }
  if (c->o->time_passes) {
    char desc[512];
    describe_plan(c, plan, desc, sizeof desc);
    fprintf(c->o->time_out ? c->o->time_out : stderr,
            "checkpoint: budget %.0f bytes: %s: modelled activations %.0f bytes, modelled recompute %.0f FLOPs (whole blocks)\n", budget,
            desc, mem, cost);
  }
  rc = 0;
out:
  free(blk);
  free(plan);
  free(crossing);
  return rc;
}

/* ---- rewriting ---- */
typedef struct {
  int pos;           /* original index of the first backward node reading the group; -1: unused */
  int first, count;  /* its clones in g->nodes (appended) */
} group_info;

static const char *rc_name(ir_graph *g, const ir_value *v) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s.rc", v->name ? v->name : "v");
  return ir_arena_strdup(g->arena, buf);
}

static int rewrite(ck *c, int *n_recomputed) {
  ir_graph *g = c->g;
  int nn = c->nn, ng = c->n_groups;
  group_info *gi = calloc((size_t)ng + 1, sizeof *gi);
  int *mark = calloc((size_t)nn + 1, sizeof *mark);           /* group + 1 that clones node i */
  ir_node **clone_of = calloc((size_t)nn + 1, sizeof *clone_of);
  ir_value **rc_of = calloc((size_t)c->nv + 1, sizeof *rc_of);
  int *stack = malloc(((size_t)nn + 1) * sizeof *stack);
  int rc = -1;
  if (!gi || !mark || !clone_of || !rc_of || !stack) goto out;
  *n_recomputed = 0;
  for (int k = 0; k < ng; k++) gi[k].pos = -1;
  for (int i = c->first_bwd; i < nn; i++) {
    const ir_node *n = g->nodes[i];
    for (int j = 0; j < n->n_in; j++) {
      int id = n->in[j]->id;
      if (c->saved[id] && !c->keep[id] && c->group[id] >= 0 && gi[c->group[id]].pos < 0) gi[c->group[id]].pos = i;
    }
  }
  for (int k = 0; k < ng; k++) {
    if (gi[k].pos < 0) continue;
    /* the nodes to clone: everything not kept that the group's saved values need */
    int sp = 0;
    for (int i = 0; i < c->first_bwd; i++) {
      const ir_node *n = g->nodes[i];
      for (int j = 0; j < n->n_out; j++) {
        int id = n->out[j]->id;
        if (c->saved[id] && !c->keep[id] && c->group[id] == k && mark[i] != k + 1) {
          mark[i] = k + 1;
          stack[sp++] = i;
        }
      }
    }
    while (sp > 0) {
      const ir_node *n = g->nodes[stack[--sp]];
      for (int j = 0; j < n->n_in; j++) {
        const ir_value *u = n->in[j];
        if (!u->def || !c->fwd[u->id] || c->keep[u->id] || mark[u->def->id] == k + 1) continue;
        mark[u->def->id] = k + 1;
        stack[sp++] = u->def->id;
      }
    }
    gi[k].first = g->n_nodes;
    for (int i = 0; i < c->first_bwd; i++) {
      if (mark[i] != k + 1) continue;
      const ir_node *n = g->nodes[i];
      ir_value *ins_small[8], **ins = n->n_in <= 8 ? ins_small : malloc((size_t)n->n_in * sizeof *ins);
      ir_type *types = malloc((size_t)(n->n_out > 0 ? n->n_out : 1) * sizeof *types);
      const char **names = malloc((size_t)(n->n_out > 0 ? n->n_out : 1) * sizeof *names);
      if (!ins || !types || !names) {
        if (ins != ins_small) free(ins);
        free(types);
        free(names);
        goto out;
      }
      for (int j = 0; j < n->n_in; j++) {
        ir_value *u = n->in[j];
        ins[j] = u->def && mark[u->def->id] == k + 1 ? clone_of[u->def->id]->out[u->def_result] : u;
      }
      for (int j = 0; j < n->n_out; j++) {
        types[j] = n->out[j]->type;
        names[j] = rc_name(g, n->out[j]);
      }
      ir_node *cl = ir_graph_add_node(g, n->op, ins, n->n_in, types, n->n_out, n->attrs, n->n_attrs, names, n->loc);
      if (ins != ins_small) free(ins);
      free(types);
      free(names);
      cl->layer = n->layer;
      for (int j = 0; j < n->n_out; j++) {
        cl->out[j]->role = IR_ROLE_RECOMPUTE;
        cl->out[j]->shard = n->out[j]->shard;
        cl->out[j]->loc = n->out[j]->loc;
        int id = n->out[j]->id;
        if (c->saved[id] && !c->keep[id] && c->group[id] == k) {
          rc_of[id] = cl->out[j];
          (*n_recomputed)++;
        }
      }
      clone_of[i] = cl;
    }
    gi[k].count = g->n_nodes - gi[k].first;
  }
  /* backward uses read the clones */
  for (int i = c->first_bwd; i < nn; i++) {
    ir_node *n = g->nodes[i];
    for (int j = 0; j < n->n_in; j++)
      if (rc_of[n->in[j]->id]) n->in[j] = rc_of[n->in[j]->id];
  }
  /* place each group's clones just before its first backward reader */
  ir_node **order = malloc((size_t)g->n_nodes * sizeof *order);
  if (!order) goto out;
  int k = 0;
  for (int i = 0; i < nn; i++) {
    for (int q = 0; q < ng; q++)
      if (gi[q].pos == i)
        for (int t = 0; t < gi[q].count; t++) order[k++] = g->nodes[gi[q].first + t];
    order[k++] = g->nodes[i];
  }
  memcpy(g->nodes, order, (size_t)k * sizeof *order);
  for (int i = 0; i < g->n_nodes; i++) g->nodes[i]->id = i;
  free(order);
  rc = 0;
out:
  free(gi);
  free(mark);
  free(clone_of);
  free(rc_of);
  free(stack);
  return rc;
}

int pass_checkpoint(ir_graph *g, const pass_options *o) {
  const char *spec = o ? o->checkpoint : NULL;
  if (!spec || strcmp(spec, "none") == 0) return 0;
  policy pol;
  double budget = 0;
  if (strcmp(spec, "block") == 0) pol = POL_BLOCK;
  else if (strcmp(spec, "selective") == 0) pol = POL_SELECTIVE;
  else if (strcmp(spec, "sqrt") == 0) pol = POL_SQRT;
  else if (strncmp(spec, "budget=", 7) == 0) {
    pol = POL_BUDGET;
    if (parse_bytes(spec + 7, &budget) != 0) {
      ir_error_plain(o->diag, "--checkpoint %s: expected a byte count such as budget=1048576, budget=512M or budget=2G",
                     spec);
      return -1;
    }
  } else {
    ir_error_plain(o->diag, "--checkpoint %s: expected none, block, selective, sqrt or budget=BYTES", spec);
    return -1;
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == IR_OP_GRAD) return 0; /* not differentiated yet: nothing to trade */
  bool any_dead = false;
  for (int i = 0; i < g->n_nodes; i++) any_dead |= g->nodes[i]->dead;
  if (any_dead) ir_graph_compact(g);

  ck c = {.g = g, .o = o};
  int rc = -1, n_recomputed = 0;
  int *seg = NULL;
  pass_graph_cost before;
  if (analyze(&c) != 0) {
    ir_error_plain(o->diag, "out of memory in the checkpoint pass");
    goto out;
  }
  if (c.first_bwd < 0) {
    rc = 0;
    goto out;
  }
  seg = malloc(((size_t)c.n_blocks + 1) * sizeof *seg);
  if (!seg) goto out;
  switch (pol) {
  case POL_NONE: break;
  case POL_BLOCK:
  case POL_SQRT: {
    int k = pol == POL_BLOCK ? 1 : (int)lround(sqrt((double)c.n_blocks));
    for (int b = 0; b < c.n_blocks; b++) seg[b] = b / (k > 0 ? k : 1);
    c.n_groups = c.n_blocks;
    mark_segments(&c, seg);
    break;
  }
  case POL_BUDGET: {
    int r = plan_budget(&c, budget, seg);
    if (r != 0) goto out;
    c.n_groups = c.n_blocks;
    mark_segments(&c, seg);
    break;
  }
  case POL_SELECTIVE: mark_selective(&c); break;
  }
  pass_graph_cost_of(g, &before);
  if (rewrite(&c, &n_recomputed) != 0) {
    ir_error_plain(o->diag, "out of memory in the checkpoint pass");
    goto out;
  }
  if (o->time_passes) {
    pass_graph_cost after;
    pass_graph_cost_of(g, &after);
    double rf = after.flops[PASS_PHASE_RECOMPUTE] - before.flops[PASS_PHASE_RECOMPUTE];
    double ff = after.flops[PASS_PHASE_FORWARD];
    fprintf(o->time_out ? o->time_out : stderr,
            "checkpoint: policy %s: %d blocks, %d values recomputed by %d cloned nodes, recompute %.0f FLOPs "
            "(%.1f%% of forward)\n",
            spec, c.n_blocks, n_recomputed, g->n_nodes - c.nn, rf, ff > 0 ? 100.0 * rf / ff : 0.0);
  }
  rc = 0;
out:
  free(seg);
  free(c.fwd);
  free(c.saved);
  free(c.keep);
  free(c.group);
  free(c.blocks);
  return rc;
}
