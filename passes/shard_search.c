/* passes/shard_search.c — the tensor-parallel layout of every parameter,
 * chosen by search (shard_impl.h, "search").
 *
 * What is chosen. On the tp axis every parameter is replicated (R), split
 * along one of its dims that divides (S d), or split along a dim in k equal
 * parts (S d in k parts: a fused q, k, v projection's columns), k one of the
 * part counts the graph splits a product's last dim into (sh_part_counts).
 * Everything else follows from the rules (shard_rules.c) by the engine:
 * given the parameters' layouts, the layout of every value, every
 * conversion and every collective is determined. Megatron-LM's column /
 * row pairing is not written anywhere: it is what the search finds on a
 * transformer (tests/unit/test_shard_search.c checks that it does).
 *
 * The cost of a choice is the sharded program itself: the caller's
 * evaluation (sh_search_eval) runs the engine with the parameters placed so
 * and measures what one rank would run (sh_graph_cost):
 *   1. heavy FLOPs: the FLOPs per device of the GEMM-like ops (matmul,
 *      fused_matmul, attention and its gradient, einsum, the fused LM head),
 *      which tensor parallelism exists to divide: as Alpa's intra-operator
 *      pass, a layout that leaves such work replicated where a division
 *      exists loses to any that divides it, whatever the communication;
 *   2. then the modelled seconds of the rank's program: every collective by
 *      the ring model on the links of one NVLink node (clusters.def
 *      dgx-h100: 450 GB/s per GPU per direction, 3.4 us per ring step) and
 *      every other node by the roofline of its FLOPs and bytes on the node's
 *      GPU (targets.def h100-sxm). Fixed figures, so that the layouts, and
 *      so every rank's program, are the same on every machine that runs the
 *      search; the planner (plan*.c) costs plans with its own cluster.
 * Costs compare by (1), then (2) (a relative tolerance of 1e-9 makes ties
 * exact: a tie keeps the current choice, so the result does not depend on
 * rounding).
 *
 * Classes. Parameters whose names differ only in their numeric parts
 * (l.3.block.attn.c_attn_w and l.7.block.attn.c_attn_w: the layers of a
 * `repeat`) and whose types are equal share one layout: the layers of a
 * model are searched once, not once per layer.
 *
 * The search: coordinate descent from every parameter replicated. A sweep
 * visits the classes in the order of their parameters' declaration and,
 * for each, evaluates every other candidate layout with the rest fixed,
 * keeping the best if it is strictly better; sweeps repeat until one
 * changes nothing (at most SWEEPS). The last sweep has evaluated every
 * class's every alternative against the final choice: the report gives
 * each class's layout, its cost and the best alternative's (the runner-up).
 * Evaluations: sum over classes of (candidates - 1), per sweep; a sweep is
 * C x K engine runs for C classes of K candidates (gpt tiny: 16 classes,
 * 2-4 candidates, 3 sweeps; each run is linear in the graph's nodes).
 * Coordinate descent finds a local optimum: a pairing two parameters must
 * change together to reach is found when the first change alone already
 * pays (on a transformer it does: a column-parallel weight makes the next
 * product's input split along its contracted dim, which divides that
 * product by slicing a replicated weight; the row-parallel weight then
 * saves the slice and its gradient's gather).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "shard_impl.h"

enum { SWEEPS = 4, MAX_CANDS = 16 };

/* ---- the cost of one rank's program ---- */

static bool heavy_op(ir_op op) {
  return op == IR_OP_MATMUL || op == IR_OP_FUSED_MATMUL || op == IR_OP_ATTENTION || op == IR_OP_ATTENTION_GRAD ||
         op == IR_OP_EINSUM || op == IR_OP_LINEAR_CROSS_ENTROPY;
}

/* Ring steps of a collective over n ranks (docs/comm.md). */
static int ring_steps(ir_op op, int64_t n) {
  switch (op) {
  case IR_OP_ALL_REDUCE: return (int)(2 * (n - 1));
  case IR_OP_ALL_GATHER: case IR_OP_REDUCE_SCATTER: case IR_OP_ALL_TO_ALL: return (int)(n - 1);
  default: return 1;
  }
}

sh_cost sh_graph_cost(const ir_graph *g) { return sh_graph_cost_weighted(g, NULL, 0); }

sh_cost sh_graph_cost_weighted(const ir_graph *g, const double *lw, int nw) {
  static const pass_target *dev;
  static const pass_cluster *node;
  if (!dev) dev = pass_target_lookup("h100-sxm");
  if (!node) node = pass_cluster_lookup("dgx-h100");
  if (!dev || !node) {
    fprintf(stderr, "tgc: internal error: shard search: no h100-sxm target or dgx-h100 cluster\n");
    abort();
  }
  sh_cost c = {0, 0, 0, 0};
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    double w = lw && n->layer >= 0 && n->layer < nw ? lw[n->layer] : 1;
    if (ir_op_has(n->op, IR_OPF_COMM)) {
      int64_t size = ir_node_attr_int(n, "n", 1);
      if (size <= 1 || n->n_in == 0) continue;
      const ir_type *t = &n->in[0]->type;
      double sent = pass_comm_bytes(n->op, size, (double)ir_type_numel(t) * (double)ir_dtype_size(t->dtype));
      c.comm += w * sent;
      c.seconds += w * (ring_steps(n->op, size) * node->intra_lat + sent / node->intra_bw);
      continue;
    }
    pass_cost k = pass_node_cost(n);
    c.seconds += w * pass_plan_node_seconds(n, dev, k.flops, k.bytes);
    if (heavy_op(n->op)) c.heavy += w * k.flops;
  }
  return c;
}

/* a better than b, within a relative tolerance */
static int cmp_tol(double a, double b, double tol) {
  double th = tol * fmax(fabs(a), fabs(b));
  return a < b - th ? -1 : a > b + th ? 1 : 0;
}
static int cmp(double a, double b) { return cmp_tol(a, b, 1e-9); }

static bool better(sh_cost a, sh_cost b) {
  if (isinf(b.heavy)) return !isinf(a.heavy);
  if (isinf(a.heavy)) return false;
  /* FLOPs and weight bytes within 0.1% are alike: the few rows a padded vocabulary adds are no reason to
   * prefer another split (GPT-3's 50,257-token table over tp = 8: +0.01%) */
  int c = cmp_tol(a.heavy, b.heavy, 1e-3);
  if (c == 0) c = cmp_tol(a.weights, b.weights, 1e-3);
  if (c == 0) c = cmp(a.seconds, b.seconds);
  if (c == 0) c = cmp(a.comm, b.comm); /* at equal time, fewer bytes sent */
  return c < 0;
}

static const sh_cost INFEASIBLE = {INFINITY, INFINITY, INFINITY, INFINITY};

/* ---- classes and candidates ---- */

typedef struct {
  int first;                 /* index of its first parameter */
  int n_cands;
  sh_st cands[MAX_CANDS];
  int pick;                  /* index into cands */
  sh_cost cost;              /* of the final choice */
  int runner_up;             /* -1: none evaluated */
  sh_cost runner_cost;
} klass;

/* name with every run of digits between dots (or at an end) replaced by '#' */
static void class_key(const char *name, char *out, size_t cap) {
  size_t o = 0;
  for (const char *p = name; *p && o + 2 < cap;) {
    bool start = p == name || p[-1] == '.';
    if (start && *p >= '0' && *p <= '9') {
      const char *q = p;
      while (*q >= '0' && *q <= '9') q++;
      if (*q == '.' || *q == 0) {
        out[o++] = '#';
        p = q;
        continue;
      }
    }
    out[o++] = *p++;
  }
  out[o] = 0;
}

static void add_cand(klass *k, sh_st s) {
  for (int i = 0; i < k->n_cands; i++)
    if (sh_eq(k->cands[i], s)) return;
  if (k->n_cands < MAX_CANDS) k->cands[k->n_cands++] = s;
}

static void candidates(const ir_graph *g, const ir_value *p, int size, const int *parts, int n_parts, klass *k) {
  k->n_cands = 0;
  add_cand(k, sh_R());
  for (int d = 0; d < p->type.rank; d++) {
    int64_t len = p->type.dims[d];
    if (len >= size && (len % size == 0 || sh_vocab_dim(g, p, size) == d)) add_cand(k, sh_S(d)); /* a vocabulary: padded */
    for (int j = 0; j < n_parts; j++)
      if (len % ((int64_t)size * parts[j]) == 0) add_cand(k, sh_Sk(d, parts[j]));
  }
}

static void layout_str(sh_st s, char *buf, size_t cap) {
  if (s.kind == SH_R) snprintf(buf, cap, "replicated");
  else if (s.kind == SH_P) snprintf(buf, cap, "partial");
  else if (sh_parts(s) > 1) snprintf(buf, cap, "split dim %d in %d parts", s.dim, sh_parts(s));
  else snprintf(buf, cap, "split dim %d", s.dim);
}

/* ---- the search ---- */

struct sh_search_report {
  int n_classes;
  klass *classes;
  char **keys;
  int evaluations;
  int tp;
};

/* Whether v is read, directly or through views and casts, by a GEMM-like
 * op: a weight. */
static bool read_heavy(const ir_graph *g, const ir_value *v, int depth) {
  for (int i = 0; i < g->n_nodes && depth < 6; i++) {
    const ir_node *u = g->nodes[i];
    if (u->dead) continue;
    for (int k = 0; k < u->n_in; k++) {
      if (u->in[k] != v) continue;
      if (heavy_op(u->op)) return true;
      if ((u->op == IR_OP_CAST || u->op == IR_OP_TRANSPOSE || u->op == IR_OP_RESHAPE) && read_heavy(g, u->out[0], depth + 1))
        return true;
    }
  }
  return false;
}

/* The costs of the assignments evaluated (the picks of every class), so a
 * descent that comes back to one, or a sweep that re-tries it, does not
 * shard the program again. Open addressing on a hash of the picks. */
typedef struct {
  int nc, cap, n;
  int *picks;     /* cap x nc */
  sh_cost *cost;
  bool *used;
  int runs;       /* evaluations made (misses) */
} memo;

static uint64_t picks_hash(const klass *cls, int nc) {
  uint64_t h = 1469598103934665603ull;
  for (int c = 0; c < nc; c++) h = (h ^ (uint64_t)(cls[c].pick + 1)) * 1099511628211ull;
  return h;
}

static void memo_grow(memo *m);

static sh_cost *memo_slot(memo *m, const klass *cls, bool *found) {
  if (2 * (m->n + 1) > m->cap) memo_grow(m);
  size_t i = (size_t)(picks_hash(cls, m->nc) % (uint64_t)m->cap);
  for (;; i = (i + 1) % (size_t)m->cap) {
    int *p = &m->picks[i * (size_t)m->nc];
    if (!m->used[i]) {
      m->used[i] = true;
      m->n++;
      for (int c = 0; c < m->nc; c++) p[c] = cls[c].pick;
      *found = false;
      return &m->cost[i];
    }
    bool eq = true;
    for (int c = 0; c < m->nc && eq; c++) eq = p[c] == cls[c].pick;
    if (eq) {
      *found = true;
      return &m->cost[i];
    }
  }
}

static void memo_grow(memo *m) {
  memo old = *m;
  m->cap = old.cap ? 2 * old.cap : 256;
  m->n = 0;
  m->picks = calloc((size_t)m->cap * (size_t)(m->nc ? m->nc : 1), sizeof *m->picks);
  m->cost = calloc((size_t)m->cap, sizeof *m->cost);
  m->used = calloc((size_t)m->cap, sizeof *m->used);
  if (!m->picks || !m->cost || !m->used) IR_DIE("out of memory (m->picks || !m->cost || !m->used)");
  for (int i = 0; i < old.cap; i++) {
    if (!old.used[i]) continue;
    const int *p = &old.picks[(size_t)i * (size_t)old.nc];
    uint64_t h = 1469598103934665603ull;
    for (int c = 0; c < old.nc; c++) h = (h ^ (uint64_t)(p[c] + 1)) * 1099511628211ull;
    size_t j = (size_t)(h % (uint64_t)m->cap);
    while (m->used[j]) j = (j + 1) % (size_t)m->cap;
    m->used[j] = true;
    m->n++;
    memcpy(&m->picks[j * (size_t)m->nc], p, (size_t)m->nc * sizeof *p);
    m->cost[j] = old.cost[i];
  }
  free(old.picks);
  free(old.cost);
  free(old.used);
}

static sh_cost eval_assign(const ir_graph *g, int n_params, const int *class_of, const klass *cls, const bool *weight,
                           sh_st *tp, sh_search_eval eval, void *ctx, memo *m) {
  bool found;
  sh_cost *slot = memo_slot(m, cls, &found);
  if (found) return *slot;
  m->runs++;
  double wbytes = 0;
  for (int i = 0; i < n_params; i++) {
    tp[i] = cls[class_of[i]].cands[cls[class_of[i]].pick];
    const ir_type *t = &g->params[i]->type;
    if (weight[i])
      wbytes += (double)ir_type_numel(t) * (double)ir_dtype_size(t->dtype) / (tp[i].kind == SH_S ? g->mesh.size[IR_AXIS_TP] : 1);
  }
  sh_cost c;
  if (eval(ctx, tp, &c) != 0) c = INFEASIBLE;
  else c.weights = wbytes;
  *slot = c;
  return c;
}

/* Coordinate descent from the classes' current picks (cost best): sweeps
 * until one changes nothing; each class's runner-up is its best
 * alternative in the last sweep. The final cost. */
static sh_cost descend(const ir_graph *g, int np, const int *class_of, klass *cls, int nc, const bool *weight, sh_st *tp,
                       sh_search_eval eval, void *ctx, sh_cost best, memo *m) {
  for (int sweep = 0; sweep < SWEEPS; sweep++) {
    bool changed = false;
    for (int c = 0; c < nc; c++) {
      klass *k = &cls[c];
      int keep = k->pick;
      k->runner_up = -1;
      for (int j = 0; j < k->n_cands; j++) {
        if (j == keep) continue;
        k->pick = j;
        sh_cost cost = eval_assign(g, np, class_of, cls, weight, tp, eval, ctx, m);
        if (k->runner_up < 0 || better(cost, k->runner_cost)) k->runner_up = j, k->runner_cost = cost;
      }
      k->pick = keep;
      if (k->runner_up >= 0 && better(k->runner_cost, best)) {
        /* the alternative wins: the old choice becomes the runner-up */
        int won = k->runner_up;
        sh_cost won_cost = k->runner_cost;
        k->runner_up = keep, k->runner_cost = best;
        k->pick = won, best = won_cost;
        changed = true;
      }
    }
    if (!changed) break;
  }
  return best;
}

int sh_search_tp(const ir_graph *g, sh_search_eval eval, void *ctx, const sh_st *start, sh_st *tp,
                 sh_search_report **report, ir_diag *d) {
  int np = g->n_params, size = g->mesh.size[IR_AXIS_TP];
  if (report) *report = NULL;
  if (size <= 1 || np == 0) {
    for (int i = 0; i < np; i++) tp[i] = sh_R();
    return 0;
  }
  int parts[8];
  int n_parts = sh_part_counts(g, parts, 8);
  bool *weight = calloc((size_t)np, sizeof *weight);
  if (!weight) IR_DIE("out of memory (weight)");
  for (int i = 0; i < np; i++) weight[i] = read_heavy(g, g->params[i], 0);
  int *class_of = calloc((size_t)np, sizeof *class_of);
  klass *cls = calloc((size_t)np, sizeof *cls);
  char **keys = calloc((size_t)np, sizeof *keys);
  if (!class_of || !cls || !keys) IR_DIE("out of memory (class_of || !cls || !keys)");
  int nc = 0;
  for (int i = 0; i < np; i++) {
    const ir_value *p = g->params[i];
    char key[512];
    class_key(p->name, key, sizeof key);
    int c = 0;
    while (c < nc && !(strcmp(keys[c], key) == 0 && ir_type_equal(&g->params[cls[c].first]->type, &p->type))) c++;
    if (c == nc) {
      keys[nc] = strdup(key);
      if (!keys[nc]) IR_DIE("out of memory (keys[nc])");
      cls[nc].first = i;
      candidates(g, p, size, parts, n_parts, &cls[nc]);
      cls[nc].runner_up = -1;
      nc++;
    }
    class_of[i] = c;
  }
  memo m = {.nc = nc};
  sh_cost best = eval_assign(g, np, class_of, cls, weight, tp, eval, ctx, &m);
  int rc = 0, evals = 0;
  if (isinf(best.heavy)) {
    /* every parameter replicated must shard: report the engine's error */
    for (int i = 0; i < np; i++) tp[i] = sh_R();
    sh_cost c;
    if (eval(ctx, tp, &c) == 0) {
      fprintf(stderr, "tgc: internal error: shard search: the replicated layout failed once and not twice\n");
      abort();
    }
    (void)d;
    rc = -1;
    goto done;
  }
  /* from every parameter replicated, then from every weight split along
   * its last dim; the better optimum wins (its descent run once more to
   * give each class's runner-up against it) */
  best = descend(g, np, class_of, cls, nc, weight, tp, eval, ctx, best, &m);
  int *picks = calloc((size_t)nc, sizeof *picks);
  if (!picks) IR_DIE("out of memory (picks)");
  for (int c = 0; c < nc; c++) {
    picks[c] = cls[c].pick;
    const ir_value *p = g->params[cls[c].first];
    cls[c].pick = 0;
    for (int j = 0; p->type.rank > 0 && j < cls[c].n_cands; j++)
      if (sh_eq(cls[c].cands[j], sh_S(p->type.rank - 1))) cls[c].pick = j;
  }
  sh_cost second = eval_assign(g, np, class_of, cls, weight, tp, eval, ctx, &m);
  second = descend(g, np, class_of, cls, nc, weight, tp, eval, ctx, second, &m);
  if (better(second, best)) {
    best = second;
    for (int c = 0; c < nc; c++) picks[c] = cls[c].pick;
  }
  if (start) { /* a third start: the caller's (Megatron-LM's placement, found by the rules) */
    bool all = true;
    for (int c = 0; c < nc; c++) {
      int j = 0;
      while (j < cls[c].n_cands && !sh_eq(cls[c].cands[j], start[cls[c].first])) j++;
      all &= j < cls[c].n_cands;
      cls[c].pick = j < cls[c].n_cands ? j : picks[c];
    }
    sh_cost third = all ? eval_assign(g, np, class_of, cls, weight, tp, eval, ctx, &m) : INFEASIBLE;
    if (all) third = descend(g, np, class_of, cls, nc, weight, tp, eval, ctx, third, &m);
    if (all && better(third, best)) {
      best = third;
      for (int c = 0; c < nc; c++) picks[c] = cls[c].pick;
    }
  }
  /* the best optimum's descent once more: each class's runner-up against it */
  for (int c = 0; c < nc; c++) cls[c].pick = picks[c];
  best = descend(g, np, class_of, cls, nc, weight, tp, eval, ctx, best, &m);
  free(picks);
  for (int c = 0; c < nc; c++) cls[c].cost = best;
  evals = m.runs;
  for (int i = 0; i < np; i++) tp[i] = cls[class_of[i]].cands[cls[class_of[i]].pick];
done:
  free(m.picks);
  free(m.cost);
  free(m.used);
  free(class_of);
  free(weight);
  if (rc == 0 && report) {
    sh_search_report *r = calloc(1, sizeof *r);
    if (!r) IR_DIE("out of memory (r)");
    *r = (sh_search_report){nc, cls, keys, evals, size};
    *report = r;
    return 0;
  }
  for (int c = 0; c < nc; c++) free(keys[c]);
  free(keys);
  free(cls);
  return rc;
}

void sh_search_print(FILE *out, const sh_search_report *r) {
  if (!r) return;
  const klass *k0 = r->n_classes ? &r->classes[0] : NULL;
  fprintf(out, "# tp layouts chosen by search (tp = %d, %d evaluations; docs/sharding.md): heavy %.6g FLOPs per "
               "device, step %.6g s modelled\n", r->tp, r->evaluations, k0 ? k0->cost.heavy : 0.0,
          k0 ? k0->cost.seconds : 0.0);
  for (int c = 0; c < r->n_classes; c++) {
    const klass *k = &r->classes[c];
    char a[64], b[64], name[512];
    snprintf(name, sizeof name, "%s", r->keys[c]);
    for (char *q = name; *q; q++)
      if (*q == '#') *q = '*';
    layout_str(k->cands[k->pick], a, sizeof a);
    fprintf(out, "#   %-34s %-24s", name, a);
    if (k->runner_up < 0) {
      fprintf(out, " (no alternative)\n");
      continue;
    }
    layout_str(k->cands[k->runner_up], b, sizeof b);
    const sh_cost *w = &k->runner_cost;
    if (isinf(w->heavy)) fprintf(out, " runner-up %s: does not shard\n", b);
    else if (w->heavy > k->cost.heavy * (1 + 1e-9))
      fprintf(out, " runner-up %s: +%.6g heavy FLOPs per device\n", b, w->heavy - k->cost.heavy);
    else fprintf(out, " runner-up %s: +%.4g us\n", b, (w->seconds - k->cost.seconds) * 1e6);
  }
}

void sh_search_report_free(sh_search_report *r) {
  if (!r) return;
  for (int c = 0; c < r->n_classes; c++) free(r->keys[c]);
  free(r->keys);
  free(r->classes);
  free(r);
}

/* ---- the layouts tgc plan and tgc train share (pass.h, pass_tp_search) ---- */

static ir_graph *shard_tp(ir_graph *g, int t, bool sp, const sh_st *lay, bool grads_placed, sh_st *found, ir_diag *d);

ir_graph *sh_shard_tp(ir_graph *g, int t, bool sp, const sh_st *lay, bool grads_placed, ir_diag *d) {
  return shard_tp(g, t, sp, lay, grads_placed, NULL, d);
}

ir_graph *sh_shard_tp_found(ir_graph *g, int t, bool sp, sh_st *found, ir_diag *d) {
  return shard_tp(g, t, sp, NULL, false, found, d);
}

static ir_graph *shard_tp(ir_graph *g, int t, bool sp, const sh_st *lay, bool grads_placed, sh_st *found, ir_diag *d) {
  ir_mesh saved = g->mesh;
  for (int a = 0; a < IR_NUM_AXES; a++) g->mesh.size[a] = 1;
  g->mesh.size[IR_AXIS_TP] = t;
  g->mesh.sp = sp && t > 1;
  g->mesh.stage = -1;
  sh_engine *e = sh_engine_new(g, d, true);
  ir_graph *s = NULL;
  int rc = lay ? sh_place_data(e, g, d) : sh_place_megatron(e, g, d);
  for (int i = 0; lay && rc == 0 && i < g->n_params; i++) sh_engine_place(e, g->params[i], IR_AXIS_TP, lay[i]);
  if (rc == 0 && sh_engine_run(e) == 0) {
    for (int i = 0; found && i < g->n_params; i++) found[i] = sh_engine_layout(e, g->params[i], IR_AXIS_TP);
    for (int i = 0, p = 0; i < g->n_outputs; i++) {
      sh_st want[IR_NUM_AXES];
      for (int a = 0; a < IR_NUM_AXES; a++) want[a] = (sh_st){SH_UNSET, 0, 1};
      bool grad = g->outputs[i].value->role == IR_ROLE_GRAD && p < g->n_params; /* d_<param> in the parameters' order */
      bool convert = grad && lay && grads_placed;
      if (convert) want[IR_AXIS_TP] = lay[p];
      p += grad;
      sh_engine_output(e, i, convert ? want : NULL); /* else as the step hands it over */
    }
    s = sh_engine_finish(e);
  }
  sh_engine_free(e);
  g->mesh = saved;
  return s;
}

struct pass_tp_layouts {
  int n, tp;
  bool sp;
  char **keys;
  ir_type *types;
  sh_st *st;
};

typedef struct {
  ir_graph *g;
  int t;
  bool sp;
  const double *w;
  int nw;
  ir_diag *quiet;
} canon_ctx;

static int eval_canon(void *ctx, const sh_st *tp, sh_cost *cost) {
  const canon_ctx *x = ctx;
  ir_graph *s = sh_shard_tp(x->g, x->t, x->sp, tp, true, x->quiet);
  if (!s) return -1;
  *cost = sh_graph_cost_weighted(s, x->w, x->nw);
  ir_graph_free(s);
  return 0;
}

pass_tp_layouts *pass_tp_search(ir_graph *g, int tp, bool sp, int layers, FILE *report, ir_diag *d) {
  /* g's layers 0 .. K-1; with K >= 3 and a model of more, the middle ones stand for the model's middle ones */
  int K = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->layer + 1 > K) K = g->nodes[i]->layer + 1;
  double *w = calloc((size_t)K + 1, sizeof *w);
  if (!w) IR_DIE("out of memory (w)");
  for (int l = 0; l < K; l++) w[l] = 1;
  if (K >= 3 && layers > K)
    for (int l = 1; l < K - 1; l++) w[l] = (double)(layers - 2) / (K - 2);
  canon_ctx x = {g, tp, sp, w, K, ir_diag_new(stderr)};
  ir_diag_set_max_errors(x.quiet, 0);
  sh_st *st = calloc((size_t)g->n_params + 1, sizeof *st);
  if (!st) IR_DIE("out of memory (st)");
  ir_mesh saved = g->mesh; /* the search reads the tp size off the graph's mesh */
  for (int a = 0; a < IR_NUM_AXES; a++) g->mesh.size[a] = 1;
  g->mesh.size[IR_AXIS_TP] = tp;
  g->mesh.sp = sp && tp > 1;
  sh_search_report *rep = NULL;
  /* three starts: every parameter replicated, every weight split along its last dim, and the layouts
   * Megatron-LM's rule gives (found by the rules on the same graph), the best local optimum kept */
  sh_st *meg = calloc((size_t)g->n_params + 1, sizeof *meg);
  if (!meg) IR_DIE("out of memory (meg)");
  ir_graph *ms = sh_shard_tp_found(g, tp, sp, meg, x.quiet);
  ir_graph_free(ms);
  int rc = sh_search_tp(g, eval_canon, &x, ms ? meg : NULL, st, report ? &rep : NULL, x.quiet);
  free(meg);
  g->mesh = saved;
  ir_diag_free(x.quiet);
  free(w);
  if (rc != 0) { /* every parameter replicated does not shard: the engine says why */
    for (int i = 0; i < g->n_params; i++) st[i] = sh_R();
    ir_graph *s = sh_shard_tp(g, tp, sp, st, true, d);
    ir_graph_free(s);
    free(st);
    return NULL;
  }
  if (rep) sh_search_print(report, rep);
  sh_search_report_free(rep);
  pass_tp_layouts *l = calloc(1, sizeof *l);
  if (!l) IR_DIE("out of memory (l)");
  l->tp = tp, l->sp = sp;
  l->keys = calloc((size_t)g->n_params + 1, sizeof *l->keys);
  l->types = calloc((size_t)g->n_params + 1, sizeof *l->types);
  l->st = calloc((size_t)g->n_params + 1, sizeof *l->st);
  if (!l->keys || !l->types || !l->st) IR_DIE("out of memory (l->keys || !l->types || !l->st)");
  for (int i = 0; i < g->n_params; i++) {
    sh_st found;
    if (sh_tp_layouts_find(l, g->params[i], &found) == 0) continue; /* its class has it */
    char key[512];
    class_key(g->params[i]->name, key, sizeof key);
    if (!(l->keys[l->n] = strdup(key))) IR_DIE("out of memory ((l->keys[l->n] = strdup(key)))");
    l->types[l->n] = g->params[i]->type;
    l->st[l->n++] = st[i];
  }
  free(st);
  return l;
}

int sh_tp_layouts_find(const pass_tp_layouts *l, const ir_value *p, sh_st *out) {
  char key[512];
  class_key(p->name, key, sizeof key);
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->keys[i], key) == 0 && ir_type_equal(&l->types[i], &p->type)) {
      *out = l->st[i];
      return 0;
    }
  return -1;
}

void pass_tp_layouts_free(pass_tp_layouts *l) {
  if (!l) return;
  for (int i = 0; i < l->n; i++) free(l->keys[i]);
  free(l->keys);
  free(l->types);
  free(l->st);
  free(l);
}

ir_graph *pass_shard_tp_graph(ir_graph *g, int t, bool sp, const pass_tp_layouts *lay, ir_diag *d) {
  sh_st *tp = NULL;
  if (lay) {
    tp = calloc((size_t)g->n_params + 1, sizeof *tp);
    if (!tp) IR_DIE("out of memory (tp)");
    for (int i = 0; i < g->n_params; i++)
      if (sh_tp_layouts_find(lay, g->params[i], &tp[i]) != 0) {
        ir_error_plain(d, "internal error: the tp layouts have none for parameter %%%s", g->params[i]->name);
        free(tp);
        return NULL;
      }
  }
  ir_graph *s = sh_shard_tp(g, t, sp, tp, false, d);
  free(tp);
  return s;
}

const ir_node *pass_tp_heads_conflict(const ir_graph *g, int t) { return sh_heads_conflict(g, t); }

int pass_tp_layouts_tp(const pass_tp_layouts *l) { return l->tp; }
bool pass_tp_layouts_sp(const pass_tp_layouts *l) { return l->sp; }
