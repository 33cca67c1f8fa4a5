/* plan/plan_profile.c — the planner's model of a training step, read off
 * its training graph: what every layer computes, keeps and sends, per
 * micro-batch and per device of a tensor-parallel group (pass.h, section
 * "planner", pass_plan_model).
 *
 * Batch. The training graph is compiled at micro-batch b0 and at 2 b0 (b0 =
 * 2, or 3 or 5 when a per-sample dim happens to equal another dim at 2 and
 * the passes build a different graph); the two must match node for node. A
 * value whose dims differ (exactly one dim, doubled) is per-sample: its
 * bytes at micro-batch b are those at b0 times b / b0. A node's FLOPs are a
 * sum of products of dims, each product holding at most one per-sample dim
 * (a weight gradient's 2*M*N*K with K = b*T, plus an epilogue over the
 * weight's elements): a line through the figures at b0 and 2 b0, exact at
 * every b; a node with no per-sample operand must cost the same at both.
 * GEMM shapes follow the same line.
 *
 * Groups. A node of layer l (the `repeat` index the frontend records) is in
 * group l + 1. Nodes outside the layers: forward ones before the first layer
 * node are group 0 (embeddings), after it group L + 1 (head, loss);
 * backward and recompute ones the other way round (the head's backward runs
 * first).
 *
 * Per group, for one micro-batch on one device (plan_tp.c: the shard
 * pass's engine run on the graph at tp = t gives each value's layout, each
 * node's work on one device and the collectives, each at the node it was
 * made for):
 *   flops, seconds  by phase; seconds = sum over nodes of the roofline
 *                   max(FLOPs / (peak * efficiency), bytes / (bandwidth *
 *                   memory efficiency)); the efficiencies are default_k below
 *                   (or the model's own, pass_plan_model_set_constants); a
 *                   node takes at least its device calls (pass_node_launches)
 *                   x the target's launch time, as in tgc stats
 *   saved           forward values its backward (or recompute) nodes read,
 *                   each counted once in every group reading it
 *   working         its recomputed values (live through its backward) + the
 *                   largest backward node's results and gradient operands
 *   params          parameter elements its nodes read
 *   collectives     tensor-axis payloads by phase and kind
 * Per cut after group g: the bytes of values made at or before g and read
 * after it (forward), and of gradients made after g and read at or before
 * it (backward): the pipeline's send/recv when a stage ends at g.
 * Per-device bytes divide by t where the value is split.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "plan_impl.h"


typedef struct {
  int op, group, phase;
  int norm_group; /* add_layernorm: the group of its layernorm half (see assign_groups) */
  bool causal, batch; /* batch: any operand or result is per-sample */
  double flops2, flops4;
  double mnk2[4], mnk4[4]; /* M, N, K, batch count of a GEMM at micro-batch b0 and 2 b0 */
  /* bytes it reads and writes, and of those its working set (results and
   * gradient operands), at micro-batch b0 on one device: [0] not
   * per-sample, [1] per-sample */
  double bytes_c[2], work_c[2];
  double launches; /* device calls of its lowered step (pass_node_launches): its time's floor */
} plan_node;

typedef struct {
  int value, group;
} vg_entry;

typedef struct {
  int value, lo, hi; /* crosses the cuts lo .. hi-1 */
  bool fwd;
} cut_entry;

typedef struct {
  int b, t;
  bool sp;
  pass_plan_profile prof;
} memo_entry;

/* One policy's training graph sharded at (t, sp) by the shard pass's
 * engine and fused as the runtime fuses a rank's step (plan_tp.c): every
 * value is what one device holds, every collective a node. */
typedef struct {
  int t;
  bool sp;
  int rc;              /* 0; -1: the shard pass refused this t (nothing below is set) */
  ir_graph *g;         /* at micro-batch b0 */
  int n_nodes, n_values;
  plan_node *nodes;
  double *vbytes;      /* per value id, at micro-batch b0 */
  int b0;
  uint8_t *batch;      /* per value id: per-sample */
  int *def_node;       /* per value id: index of its defining node, -1 for declarations */
  const ir_value **value; /* per value id */
  int *grad_of;        /* per value id: a parameter's gradient output (value id), -1 for others */
  vg_entry *saved, *recomp, *params, *tied; /* tied: group = lo * 65536 + hi */
  vg_entry *gathers; /* parameters read per group and pass: group = 2 * group + (0 forward, 1 backward or recompute) */
  int n_saved, n_recomp, n_params, n_tied, n_gathers;
  cut_entry *cuts;
  int n_cuts;
  memo_entry *memo;
  int n_memo, cap_memo;
  bool *again;         /* per value id, made at the first profile: what a pipelined stage's bwd makes again */
} plan_view;

/* One checkpoint policy: its training graph as the shard pass sees it (the
 * passes after it not run) at micro-batch b0 and 2 b0, and its sharded
 * views, one per (t, sp) asked for (t = 1 first: it checks the graphs). */
typedef struct {
  bool present;
  ir_graph *g2, *g4;
  int b0;
  plan_view *views;
  int n_views, cap_views;
} plan_ck;

struct pass_plan_model {
  pass_target device;
  pass_plan_constants k;
  int layers;
  double n_params;
  size_t elem_bytes;
  double opt_flops_per_param;
  int opt_states;
  bool accuracy; /* a policy's graph has a cross-entropy (plan_model_accuracy) */
  plan_ck ck[PASS_PLAN_CK_COUNT];
  bool disabled[PASS_COUNT]; /* the passes after the shard pass that are not run */
  bool tp_search;            /* the parameters' tp layouts by search (pass_plan_model_set_tp_search) */
  ir_graph *search_graph;    /* what the search runs on (pass_plan_model_set_search_graph), or NULL */
  int search_layers;         /* the model's layers, for search_graph */
  struct {
    int t;
    bool sp;
    pass_tp_layouts *lay; /* NULL: the search found none (the view fails as the shard pass would) */
  } layouts[16];             /* the search's choice per (t, sp), made once for every policy and batch */
  int n_layouts;
};

static const char *const ck_names[PASS_PLAN_CK_COUNT] = {"none", "selective", "full"};
static const char *const ck_policies[PASS_PLAN_CK_COUNT] = {NULL, "selective", "block"};

const char *pass_plan_ckpt_name(pass_plan_ckpt c) { return (unsigned)c < PASS_PLAN_CK_COUNT ? ck_names[c] : "?"; }
const char *pass_plan_ckpt_policy(pass_plan_ckpt c) { return (unsigned)c < PASS_PLAN_CK_COUNT ? ck_policies[c] : NULL; }
int pass_plan_ckpt_from_name(const char *name) {
  if (!name) return -1;
  if (strcmp(name, "block") == 0) return PASS_PLAN_CK_FULL;
  for (int i = 0; i < PASS_PLAN_CK_COUNT; i++)
    if (strcmp(name, ck_names[i]) == 0) return i;
  return -1;
}

pass_plan_model *pass_plan_model_new(const pass_target *device) {
  pass_plan_model *m = calloc(1, sizeof *m);
  if (!m) IR_DIE("out of memory (m)");
  m->device = *device;
  m->k = pass_plan_default_constants();
  m->layers = -1;
  m->opt_states = 2;
  m->disabled[PASS_FUSE_LM_HEAD] = true; /* a sharded step does not fuse the head (fuse-lm-head: one device only) */
  return m;
}

void pass_plan_model_set_tp_search(pass_plan_model *m, bool on) { m->tp_search = on; }
bool pass_plan_model_tp_search(const pass_plan_model *m) { return m->tp_search; }

void pass_plan_model_set_search_graph(pass_plan_model *m, ir_graph *g, int layers) {
  ir_graph_free(m->search_graph);
  m->search_graph = g;
  m->search_layers = layers;
}

const pass_tp_layouts *pass_plan_model_tp_layouts(const pass_plan_model *m, int t, bool sp) {
  for (int i = 0; i < m->n_layouts; i++)
    if (m->layouts[i].t == t && m->layouts[i].sp == sp) return m->layouts[i].lay;
  return NULL;
}

/* The search's layouts at (t, sp): searched once (pass_tp_search), on the
 * search graph tgc train searches too, else on the first policy's graph at
 * micro-batch b0: the layouts of one model are the same for every policy
 * and batch, as the runtime's are for its run. */
static const pass_tp_layouts *layouts_at(pass_plan_model *m, int t, bool sp, bool *failed) {
  *failed = false;
  for (int i = 0; i < m->n_layouts; i++)
    if (m->layouts[i].t == t && m->layouts[i].sp == sp) return *failed = !m->layouts[i].lay, m->layouts[i].lay;
  ir_graph *g = m->search_graph;
  int layers = m->search_layers;
  for (int c = 0; c < PASS_PLAN_CK_COUNT && !g; c++)
    if (m->ck[c].present) g = m->ck[c].g2, layers = 0;
  ir_diag *quiet = ir_diag_new(stderr);
  ir_diag_set_max_errors(quiet, 0);
  pass_tp_layouts *l = g ? pass_tp_search(g, t, sp, layers, NULL, quiet) : NULL;
  ir_diag_free(quiet);
  if (m->n_layouts < (int)(sizeof m->layouts / sizeof m->layouts[0])) {
    m->layouts[m->n_layouts].t = t, m->layouts[m->n_layouts].sp = sp, m->layouts[m->n_layouts].lay = l;
    m->n_layouts++;
  } else {
    fprintf(stderr, "tgc: internal error: the planner searched more than 16 tensor-parallel layouts\n");
    abort();
  }
  *failed = !l;
  return l;
}

void pass_plan_model_disable(pass_plan_model *m, const bool *disabled) {
  for (int p = 0; p < PASS_COUNT; p++) m->disabled[p] = disabled[p] || p == PASS_FUSE_LM_HEAD;
}

/* The memoized profiles of c freed (their arrays; the memo table stays). */
static void memo_clear(plan_view *c) {
  for (int i = 0; i < c->n_memo; i++) {
    const pass_plan_profile *p = &c->memo[i].prof;
    free((void *)p->groups);
    free((void *)p->act);
    free((void *)p->tied);
    free((void *)p->shared);
    free((void *)p->shared_saved);
  }
  c->n_memo = 0;
}

static void view_free(plan_view *c) {
  ir_graph_free(c->g);
  free(c->nodes);
  free(c->vbytes);
  free(c->batch);
  free(c->def_node);
  free(c->value);
  free(c->grad_of);
  free(c->saved);
  free(c->recomp);
  free(c->params);
  free(c->tied);
  free(c->gathers);
  free(c->cuts);
  free(c->again);
  memo_clear(c);
  free(c->memo);
  memset(c, 0, sizeof *c);
}

static void ck_free(plan_ck *k) {
  ir_graph_free(k->g2);
  ir_graph_free(k->g4);
  for (int i = 0; i < k->n_views; i++) view_free(&k->views[i]);
  free(k->views);
  memset(k, 0, sizeof *k);
}

void pass_plan_model_free(pass_plan_model *m) {
  if (!m) return;
  for (int i = 0; i < PASS_PLAN_CK_COUNT; i++) ck_free(&m->ck[i]);
  for (int i = 0; i < m->n_layouts; i++) pass_tp_layouts_free(m->layouts[i].lay);
  ir_graph_free(m->search_graph);
  free(m);
}

void pass_plan_model_set_optimizer(pass_plan_model *m, double flops_per_param, int states) {
  m->opt_flops_per_param = flops_per_param;
  m->opt_states = states;
}

bool pass_plan_model_has(const pass_plan_model *m, pass_plan_ckpt ck) {
  return (unsigned)ck < PASS_PLAN_CK_COUNT && m->ck[ck].present;
}

bool pass_plan_model_recomputes(const pass_plan_model *m, pass_plan_ckpt ck) {
  if (!pass_plan_model_has(m, ck)) return false;
  const ir_graph *g = m->ck[ck].g2;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i]->dead && pass_node_phase(g->nodes[i]) == PASS_PHASE_RECOMPUTE) return true;
  return false;
}
int pass_plan_model_layers(const pass_plan_model *m) { return m->layers; }
double pass_plan_model_params(const pass_plan_model *m) { return m->n_params; }
size_t pass_plan_model_elem_bytes(const pass_plan_model *m) { return m->elem_bytes; }
const ir_graph *pass_plan_model_graph(const pass_plan_model *m, pass_plan_ckpt ck) {
  return pass_plan_model_has(m, ck) && m->ck[ck].views[0].rc == 0 ? m->ck[ck].views[0].g : NULL;
}
const pass_target *plan_model_device(const pass_plan_model *m) { return &m->device; }
const pass_plan_constants *pass_plan_model_constants(const pass_plan_model *m) { return &m->k; }
void pass_plan_model_set_constants(pass_plan_model *m, const pass_plan_constants *k) {
  m->k = *k;
  for (int ck = 0; ck < PASS_PLAN_CK_COUNT; ck++) { /* the profiles hold times: computed again */
    for (int i = 0; i < m->ck[ck].n_views; i++) memo_clear(&m->ck[ck].views[i]);
  }
}
double plan_model_opt_flops(const pass_plan_model *m) { return m->opt_flops_per_param; }
int plan_model_opt_states(const pass_plan_model *m) { return m->opt_states; }

bool plan_model_accuracy(const pass_plan_model *m) { return m->accuracy; }

/* ---- building ---- */
static double numel(const ir_type *t) {
  double n = 1;
  for (int i = 0; i < t->rank; i++) n *= (double)t->dims[i];
  return n;
}


static int add_vg(vg_entry **v, int *n, int *cap, int value, int group) {
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 256;
    *v = realloc(*v, (size_t)*cap * sizeof **v);
    if (!*v) IR_DIE("out of memory (*v)");
  }
  (*v)[(*n)++] = (vg_entry){value, group};
  return 0;
}

static int vg_cmp(const void *a, const void *b) {
  const vg_entry *x = a, *y = b;
  if (x->value != y->value) return x->value < y->value ? -1 : 1;
  return (x->group > y->group) - (x->group < y->group);
}

/* Sorted by value, then group; duplicates dropped. */
static void vg_unique(vg_entry *v, int *n) {
  if (*n < 2) return;
  qsort(v, (size_t)*n, sizeof *v, vg_cmp);
  int k = 0;
  for (int i = 0; i < *n; i++)
    if (k == 0 || v[i].value != v[k - 1].value || v[i].group != v[k - 1].group) v[k++] = v[i];
  *n = k;
}

/* Node groups (see the top of the file). A backward node outside the
 * layers that reads a per-sample value of the head or of the embeddings
 * goes with it: fusion may merge the head's weight gradient of a tied
 * embedding into the node that adds the embedding's own (placed after the
 * layers' backward), and that product belongs to the last stage. */
/* Node phases: by the roles of the results (pass_node_phase), but a
 * conversion the shard pass made (a mesh_slice or a collective; its result
 * is an activation when its operand is an input's) is made per phase for
 * its readers: it is in its first reader's phase. */
static int *node_phases(const plan_view *c) {
  const ir_graph *g = c->g;
  int *phase = malloc(((size_t)g->n_nodes + 1) * sizeof *phase), *first = malloc(((size_t)c->n_values + 1) * sizeof *first);
  if (!phase || !first) IR_DIE("out of memory (phase || !first)");
  for (int v = 0; v < c->n_values; v++) first[v] = -1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i]->n_in; k++)
      if (first[g->nodes[i]->in[k]->id] < 0) first[g->nodes[i]->in[k]->id] = i;
  for (int i = g->n_nodes - 1; i >= 0; i--) { /* readers first */
    const ir_node *n = g->nodes[i];
    phase[i] = pass_node_phase(n);
    int r = n->n_out == 1 ? first[n->out[0]->id] : -1;
    if ((n->op == IR_OP_MESH_SLICE || ir_op_has(n->op, IR_OPF_COMM)) && r > i) phase[i] = phase[r];
  }
  free(first);
  return phase;
}

static void assign_groups(plan_view *c, int layers) {
  const ir_graph *g = c->g;
  int first_layered[PASS_NUM_PHASES];
  int *phase = node_phases(c);
  for (int p = 0; p < PASS_NUM_PHASES; p++) first_layered[p] = g->n_nodes;
  for (int i = 0; i < g->n_nodes; i++) {
    int p = phase[i];
    if (g->nodes[i]->layer >= 0 && first_layered[p] == g->n_nodes) first_layered[p] = i;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    int p = phase[i], grp;
    if (n->layer >= 0) grp = n->layer + 1;
    else if (p == PASS_PHASE_FORWARD || p == PASS_PHASE_OPTIMIZER) grp = i < first_layered[p] ? 0 : layers + 1;
    else {
      grp = i < first_layered[p] ? layers + 1 : 0;
      bool head = false, embed = false;
      for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k]->id, dn = c->def_node[v];
        if (!c->batch[v] || dn < 0) continue;
        head |= c->nodes[dn].group == layers + 1;
        embed |= c->nodes[dn].group == 0;
      }
      if (head) grp = layers + 1;
      else if (embed) grp = 0;
    }
    c->nodes[i].group = grp;
    c->nodes[i].phase = p;
    c->nodes[i].norm_group = grp;
  }
  /* fuse-elementwise makes a residual add and the next layer's layernorm
   * one add_layernorm (x, r, gamma, beta) -> (s, y) placed in the add's
   * layer; the shard pass cuts pipeline stages before that fusion, so at a
   * stage boundary the add stays on the earlier stage, the layernorm (and
   * its gamma, beta) goes to the later one, and only s crosses. The
   * layernorm half belongs to the first group reading y when every reader
   * is in a later group. */
  int *first_reader = malloc((size_t)c->n_values * sizeof *first_reader);
  if (!first_reader) IR_DIE("out of memory (first_reader)");
  for (int v = 0; v < c->n_values; v++) first_reader[v] = INT32_MAX;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i]->n_in; k++) {
      int v = g->nodes[i]->in[k]->id;
      if (c->nodes[i].group < first_reader[v]) first_reader[v] = c->nodes[i].group;
    }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->op != IR_OP_ADD_LAYERNORM || n->n_out != 2) continue;
    int r = first_reader[n->out[1]->id];
    if (r != INT32_MAX && r > c->nodes[i].group) c->nodes[i].norm_group = r;
  }
  free(first_reader);
  free(phase);
}

/* Saved activations, recomputed values, parameters read, and the values
 * crossing cuts, as (value, group) entries. */
static void collect_entries(plan_view *c, int layers) {
  const ir_graph *g = c->g;
  int nv = c->n_values, cap_s = 0, cap_r = 0, cap_p = 0, cap_c = 0, cap_t = 0, cap_g = 0;
  int *def_group = malloc((size_t)nv * sizeof *def_group);
  int *def_phase = malloc((size_t)nv * sizeof *def_phase);
  int *seen = malloc((size_t)nv * sizeof *seen); /* last group an entry was added for, per value */
  int *seen_p = malloc((size_t)nv * sizeof *seen_p);
  int *hi_fwd = malloc((size_t)nv * sizeof *hi_fwd), *lo_bwd = malloc((size_t)nv * sizeof *lo_bwd);
  int *hi_any = malloc((size_t)nv * sizeof *hi_any); /* a gradient read by a later group (not per-sample: tied) */
  if (!def_group || !def_phase || !seen || !seen_p || !hi_fwd || !lo_bwd || !hi_any) IR_DIE("out of memory (def_group || !def_phase || !seen || !seen_p || !hi_fwd || !lo_bwd || !hi_any)");
  for (int v = 0; v < nv; v++) def_group[v] = -1, def_phase[v] = -1, seen[v] = -1, seen_p[v] = -1, hi_fwd[v] = -1,
                                lo_bwd[v] = layers + 2, hi_any[v] = -1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i]->n_out; k++) {
      int v = g->nodes[i]->out[k]->id;
      def_group[v] = k == 1 ? c->nodes[i].norm_group : c->nodes[i].group; /* y of a boundary add_layernorm */
      def_phase[v] = c->nodes[i].phase;
      if (c->nodes[i].phase == PASS_PHASE_RECOMPUTE) add_vg(&c->recomp, &c->n_recomp, &cap_r, v, c->nodes[i].group);
    }
  /* readers in node order: entries stay unique per (value, group) when a
   * group's readers are contiguous, and a second pass would not add more */
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    int grp = c->nodes[i].group, ph = c->nodes[i].phase, ng = c->nodes[i].norm_group;
    if (ng != grp) { /* a boundary add_layernorm: its layernorm half reads s in group ng */
      int s = n->out[0]->id;
      if (ng > hi_fwd[s]) hi_fwd[s] = ng;
    }
    for (int k = 0; k < n->n_in; k++) {
      const ir_value *x = n->in[k];
      int v = x->id;
      if (x->role == IR_ROLE_PARAM) {
        int pg = k >= 2 ? ng : grp; /* gamma and beta go with the layernorm half */
        if (seen_p[v] != pg) add_vg(&c->params, &c->n_params, &cap_p, v, pg), seen_p[v] = pg;
        if (ph != PASS_PHASE_OPTIMIZER)
          add_vg(&c->gathers, &c->n_gathers, &cap_g, v, 2 * pg + (ph == PASS_PHASE_FORWARD ? 0 : 1));
        continue;
      }
      if (def_group[v] < 0) continue; /* inputs: every stage loads its own */
      /* (a constant is made where it is read: the trainer's step makes a
       * backward's constants in the backward, whatever order this graph has) */
      if ((ph == PASS_PHASE_BACKWARD || ph == PASS_PHASE_RECOMPUTE) && def_phase[v] == PASS_PHASE_FORWARD &&
          !(x->def && x->def->op == IR_OP_CONST) && seen[v] != grp)
        add_vg(&c->saved, &c->n_saved, &cap_s, v, grp), seen[v] = grp;
      if (def_phase[v] == PASS_PHASE_FORWARD && grp > def_group[v] && grp > hi_fwd[v]) hi_fwd[v] = grp;
      if (def_phase[v] != PASS_PHASE_FORWARD && grp < def_group[v] && grp < lo_bwd[v]) lo_bwd[v] = grp;
      if (def_phase[v] != PASS_PHASE_FORWARD && grp > def_group[v] && grp > hi_any[v]) hi_any[v] = grp;
    }
  }
  for (int v = 0; v < nv; v++) {
    /* a value made from constants alone (a rotary table) crosses no cut:
     * every stage reading it makes it (shard_stage.c) */
    if (!c->batch[v]) { /* a tied weight's gradient: summed across stages once a step (pass_plan_profile.tied) */
      if (def_group[v] >= 0 && lo_bwd[v] < def_group[v]) add_vg(&c->tied, &c->n_tied, &cap_t, v, lo_bwd[v] * 65536 + def_group[v]);
      if (def_group[v] >= 0 && hi_any[v] > def_group[v]) add_vg(&c->tied, &c->n_tied, &cap_t, v, def_group[v] * 65536 + hi_any[v]);
      continue;
    }
    cut_entry e = {v, 0, 0, true};
    bool add = false;
    if (hi_fwd[v] > def_group[v] && def_group[v] >= 0) e = (cut_entry){v, def_group[v], hi_fwd[v], true}, add = true;
    if (add || (lo_bwd[v] < def_group[v] && def_group[v] >= 0)) {
      if (c->n_cuts + 2 > cap_c) {
        cap_c = cap_c ? 2 * cap_c : 256;
        c->cuts = realloc(c->cuts, (size_t)cap_c * sizeof *c->cuts);
        if (!c->cuts) IR_DIE("out of memory (c->cuts)");
      }
      if (add) c->cuts[c->n_cuts++] = e;
      if (lo_bwd[v] < def_group[v]) c->cuts[c->n_cuts++] = (cut_entry){v, lo_bwd[v], def_group[v], false};

    }
  }
  vg_unique(c->params, &c->n_params);
  vg_unique(c->gathers, &c->n_gathers);
  vg_unique(c->saved, &c->n_saved);
  free(def_group);
  free(def_phase);
  free(seen);
  free(seen_p);
  free(hi_fwd);
  free(lo_bwd);
  free(hi_any);
}

/* The two graphs agree but for per-sample dims (exactly one dim, doubled). */
static int match_batch(plan_view *c, const ir_graph *g4, ir_diag *d) {
  const ir_graph *g = c->g;
  if (g->n_nodes != g4->n_nodes || ir_graph_id_bound(g) != ir_graph_id_bound(g4)) {
    ir_error_plain(d, "the training graph at micro-batch %d and at %d differ (%d and %d nodes): the planner needs one "
                      "graph whose shapes scale with the batch", c->b0, 2 * c->b0, g->n_nodes, g4->n_nodes);
    return -1;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *a = g->nodes[i], *b = g4->nodes[i];
    if (a->op != b->op || a->n_out != b->n_out || a->n_in != b->n_in) {
      ir_error(d, a->loc, "the training graph differs at micro-batch %d and %d (node %d: %s and %s)", c->b0, 2 * c->b0,
               i, ir_op_name(a->op), ir_op_name(b->op));
      return -1;
    }
    for (int k = 0; k < a->n_out + a->n_in; k++) {
      const ir_value *x = k < a->n_out ? a->out[k] : a->in[k - a->n_out];
      const ir_value *y = k < a->n_out ? b->out[k] : b->in[k - a->n_out];
      if (x->id != y->id || x->type.rank != y->type.rank) {
        ir_error(d, a->loc, "the training graph differs at micro-batch %d and %d (node %d, %%%s)", c->b0, 2 * c->b0, i,
                 x->name);
        return -1;
      }
      int scaled = 0;
      for (int j = 0; j < x->type.rank; j++) {
        if (x->type.dims[j] == y->type.dims[j]) continue;
        if (y->type.dims[j] != 2 * x->type.dims[j] || ++scaled > 1) {
          char t2[128], t4[128];
          ir_error(d, x->loc, "%%%s is %s at micro-batch %d and %s at %d: the planner needs shapes with one dim "
                              "proportional to the batch",
                   x->name, ir_type_str(&x->type, t2, sizeof t2), c->b0, ir_type_str(&y->type, t4, sizeof t4), 2 * c->b0);
          return -1;
        }
      }
      c->batch[x->id] = scaled > 0;
    }
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    plan_node *pn = &c->nodes[i];
    pass_cost c2 = pass_node_cost(n), c4 = pass_node_cost(g4->nodes[i]);
    pn->op = n->op;
    pn->causal = ir_node_attr_int(n, "causal", 0) != 0;
    pn->flops2 = c2.flops, pn->flops4 = c4.flops;
    pn->launches = c2.launches;
    for (int k = 0; k < n->n_out; k++) pn->batch |= c->batch[n->out[k]->id];
    for (int k = 0; k < n->n_in; k++) pn->batch |= c->batch[n->in[k]->id];
    if (pn->batch ? c4.flops < c2.flops : c4.flops != c2.flops) {
      ir_error(d, n->loc, "the FLOPs of %s (%s) do not grow with the batch (%.17g at %d, %.17g at %d)",
               n->n_out ? n->out[0]->name : "?", ir_op_name(n->op), c2.flops, c->b0, c4.flops, 2 * c->b0);
      return -1;
    }
    pass_gemm_dims(n, pn->mnk2);
    pass_gemm_dims(g4->nodes[i], pn->mnk4);
  }
  return 0;
}

/* c (t, sp set) built from the policy's graphs k: sharded at (t, sp) and
 * fused (plan_tp.c), then read. 0, or -1 after reporting through d. */
static int view_build(pass_plan_model *m, const plan_ck *k, plan_view *c, ir_diag *d) {
  ir_graph *g4 = NULL;
  c->b0 = k->b0;
  const pass_tp_layouts *lay = NULL;
  if (m->tp_search && c->t > 1) {
    bool failed;
    lay = layouts_at(m, c->t, c->sp, &failed);
    if (failed) /* as the runtime's search: every candidate refused; Megatron-LM's rule then says why */
      lay = NULL;
  }
  c->g = plan_tp_shard(k->g2, c->t, c->sp, lay, m->disabled, d);
  if (c->g) g4 = plan_tp_shard(k->g4, c->t, c->sp, lay, m->disabled, d);
  if (!c->g || !g4) {
    ir_graph_free(g4);
    return -1;
  }
  ir_graph *g2 = c->g;
  c->n_nodes = g2->n_nodes;
  c->n_values = ir_graph_id_bound(g2);
  c->nodes = calloc((size_t)c->n_nodes + 1, sizeof *c->nodes);
  c->vbytes = calloc((size_t)c->n_values + 1, sizeof *c->vbytes);
  c->batch = calloc((size_t)c->n_values + 1, 1);
  if (!c->nodes || !c->vbytes || !c->batch) IR_DIE("out of memory (c->nodes || !c->vbytes || !c->batch)");
  int rc = match_batch(c, g4, d);
  ir_graph_free(g4);
  if (rc != 0) return -1;
  int layers = 0;
  for (int i = 0; i < g2->n_nodes; i++)
    if (g2->nodes[i]->layer + 1 > layers) layers = g2->nodes[i]->layer + 1;
  if (layers == 0) {
    ir_error_plain(d, "the model has no layers (no `repeat` block): the planner splits a model into pipeline stages "
                      "by its layers");
    return -1;
  }
  if (m->layers >= 0 && m->layers != layers) {
    ir_error_plain(d, "the checkpoint policies give %d and %d layers", m->layers, layers);
    return -1;
  }
  m->layers = layers;
  c->def_node = malloc(((size_t)c->n_values + 1) * sizeof *c->def_node);
  c->value = calloc((size_t)c->n_values + 1, sizeof *c->value);
  if (!c->def_node || !c->value) IR_DIE("out of memory (c->def_node || !c->value)");
  for (int v = 0; v < c->n_values; v++) c->def_node[v] = -1;
  for (int v = 0; v < g2->n_values; v++) c->value[g2->values[v]->id] = g2->values[v];
  for (int i = 0; i < g2->n_nodes; i++)
    for (int j = 0; j < g2->nodes[i]->n_out; j++) {
      c->value[g2->nodes[i]->out[j]->id] = g2->nodes[i]->out[j];
      c->def_node[g2->nodes[i]->out[j]->id] = i;
    }
  for (int v = 0; v < c->n_values; v++)
    if (c->value[v]) c->vbytes[v] = numel(&c->value[v]->type) * (double)ir_dtype_size(c->value[v]->type.dtype);
  c->grad_of = malloc(((size_t)c->n_values + 1) * sizeof *c->grad_of);
  if (!c->grad_of) IR_DIE("out of memory (c->grad_of)");
  for (int v = 0; v < c->n_values; v++) c->grad_of[v] = -1;
  for (int i = 0, p = 0; i < g2->n_outputs && p < g2->n_params; i++) /* d_<param> in the parameters' order */
    if (g2->outputs[i].value->role == IR_ROLE_GRAD) c->grad_of[g2->params[p++]->id] = g2->outputs[i].value->id;
  assign_groups(c, layers);
  collect_entries(c, layers);
  for (int i = 0; i < g2->n_nodes; i++) { /* bytes read and written, and the working set, per-sample or not */
    const ir_node *n = g2->nodes[i];
    plan_node *pn = &c->nodes[i];
    for (int j = 0; j < n->n_in + n->n_out; j++) {
      const ir_value *x = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
      int part = c->batch[x->id];
      pn->bytes_c[part] += c->vbytes[x->id];
      if (j >= n->n_in || x->role == IR_ROLE_GRAD || (x->def && pass_node_phase(x->def) != PASS_PHASE_FORWARD))
        pn->work_c[part] += c->vbytes[x->id];
    }
  }
  return 0;
}

/* The view of policy k at (t, sp) (t == 1: sp off), built at the first
 * ask (errors through d; NULL: quietly); its rc says whether the shard pass
 * could shard it. */
static plan_view *view_of(pass_plan_model *m, plan_ck *k, int t, bool sp, ir_diag *d) {
  if (t <= 1) t = 1, sp = false;
  for (int i = 0; i < k->n_views; i++)
    if (k->views[i].t == t && k->views[i].sp == sp) return &k->views[i];
  if (k->n_views == k->cap_views) {
    k->cap_views = k->cap_views ? 2 * k->cap_views : 8;
    k->views = realloc(k->views, (size_t)k->cap_views * sizeof *k->views);
    if (!k->views) IR_DIE("out of memory (k->views)");
  }
  plan_view *c = &k->views[k->n_views++];
  memset(c, 0, sizeof *c);
  c->t = t, c->sp = sp;
  ir_diag *quiet = NULL;
  if (!d) {
    quiet = ir_diag_new(stderr);
    ir_diag_set_max_errors(quiet, 0);
  }
  c->rc = view_build(m, k, c, d ? d : quiet);
  ir_diag_free(quiet);
  return c;
}

/* The trainer's count of correct predictions beside g's first
 * cross-entropy (pass_accuracy, as the training program builds it), an
 * output of g: the planner shards and costs what the trainer runs (over
 * vocabulary-split logits, its argmax's collectives). */
static bool add_accuracy(ir_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_CROSS_ENTROPY) continue;
    ir_value *c = pass_accuracy(g, n->in[0], n->in[1]);
    if (c) ir_graph_add_output(g, "correct", c);
    return true;
  }
  return false;
}

int pass_plan_model_add(pass_plan_model *m, pass_plan_ckpt ck, int b0, ir_graph *g2, ir_graph *g4, ir_diag *d) {
  plan_ck *k = &m->ck[ck];
  ck_free(k);
  k->b0 = b0, k->g2 = g2, k->g4 = g4;
  m->accuracy |= add_accuracy(g2);
  add_accuracy(g4);
  if (view_of(m, k, 1, false, d)->rc != 0) { /* one device: checks the graphs */
    ck_free(k);
    return -1;
  }
  m->n_params = 0;
  for (int i = 0; i < g2->n_params; i++) m->n_params += numel(&g2->params[i]->type);
  m->elem_bytes = g2->n_params > 0 ? ir_dtype_size(g2->params[0]->type.dtype) : 4;
  k->present = true;
  return 0;
}

/* ---- the profile at (b, t, sp) ---- */

/* Bytes of value v (of the sharded graph: one device's) at micro-batch b. */
static double dev_bytes(const plan_view *c, int v, int b) {
  return c->vbytes[v] * (c->batch[v] ? (double)b / c->b0 : 1.0);
}

/* A parameter ZeRO cannot split: one whose only dim tp splits (the shard
 * pass's ZeRO dim is a dim tp does not split; a dim that does not divide
 * by dp is not modelled). p: the sharded graph's. */
static bool zero_whole(const ir_value *p) { return p->type.rank == 1 && (p->shard.split[0] >> IR_AXIS_TP) & 1; }

/* The dim tp splits v along (the sharded graph's value), or -1. */
static int tp_dim(const ir_value *v) {
  for (int k = 0; k < v->type.rank; k++)
    if ((v->shard.split[k] >> IR_AXIS_TP) & 1) return k;
  return -1;
}

/* The tensor-axis collective node n is (IR_COLL_*), or -1. */
static int tp_coll(const ir_node *n) {
  if (n->dead || !ir_op_has(n->op, IR_OPF_COMM) || ir_node_mesh_axis(n) != IR_AXIS_TP) return -1;
  return ir_coll_of_op(n->op);
}

/* A value (parameter or activation) the n entries e (its groups, ascending) read. */
static void shared_entry(pass_plan_shared *s, double x, const vg_entry *e, int n) {
  s->elems = x;
  s->span = n > 4;
  for (int k = 0; k < n && s->n < 4; k++) s->groups[s->n++] = e[k].group;
  if (n > 4) s->groups[3] = e[n - 1].group;
}

static bool shared_in(const pass_plan_shared *s, int lo, int hi) {
  if (s->span) return s->groups[0] <= hi && s->groups[3] >= lo;
  for (int k = 0; k < s->n; k++)
    if (s->groups[k] >= lo && s->groups[k] <= hi) return true;
  return false;
}

/* The kept values a pipelined stage's bwd makes again rather than being
 * handed per micro-batch (pass_pipe_remade, the shard pass's rule): the
 * same at every micro-batch, so made once per view. */
static const bool *remade(plan_view *c) {
  if (c->again) return c->again;
  const ir_graph *g = c->g;
  int nv = c->n_values + 1;
  bool *forward = calloc((size_t)g->n_nodes + 1, sizeof *forward), *saved = calloc((size_t)nv, sizeof *saved);
  bool *again = calloc((size_t)nv, sizeof *again);
  if (!forward || !saved || !again) IR_DIE("out of memory (forward || !saved || !again)");
  for (int i = 0; i < c->n_saved; i++) saved[c->saved[i].value] = true;
  for (int i = 0; i < g->n_nodes; i++) forward[i] = c->nodes[i].phase == PASS_PHASE_FORWARD;
  pass_pipe_remade(g, forward, saved, again);
  free(forward), free(saved);
  return c->again = again;
}

static void build_profile(pass_plan_model *m, const plan_ck *k, plan_view *c, int b, pass_plan_profile *out) {
  const ir_graph *g = c->g;
  int ng = m->layers + 2;
  pass_plan_group *gr = calloc((size_t)ng, sizeof *gr);
  double *cut = calloc((size_t)4 * ng, sizeof *cut);
  if (!gr || !cut) IR_DIE("out of memory (gr || !cut)");
  /* per node: FLOPs, bytes, time */
  double *max_work = calloc((size_t)ng, sizeof *max_work);
  if (!max_work) IR_DIE("out of memory (max_work)");
  for (int i = 0; i < c->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    const plan_node *pn = &c->nodes[i];
    if (n->dead) continue;
    pass_plan_group *G = &gr[pn->group];
    int kind = tp_coll(n);
    if (kind >= 0) { /* a collective on the tensor axis: its buffer (all_gather: the result; else the operand) */
      const ir_value *buf = n->op == IR_OP_ALL_GATHER ? n->out[0] : n->in[0];
      G->coll_bytes[pn->phase][kind] += dev_bytes(c, buf->id, b);
      G->coll_count[pn->phase][kind]++;
      continue;
    }
    if (ir_op_has(n->op, IR_OPF_COMM)) continue; /* (the dp and pp axes are not in a tp view) */
    double rel = (double)(b - c->b0) / c->b0, scale = (double)b / c->b0;
    double flops = pn->flops2 + (pn->flops4 - pn->flops2) * rel;
    double bytes = pn->bytes_c[0] + pn->bytes_c[1] * scale;
    double work = pn->work_c[0] + pn->work_c[1] * scale;
    double mnk[4];
    for (int j = 0; j < 4; j++) mnk[j] = pn->mnk2[j] + (pn->mnk4[j] - pn->mnk2[j]) * rel;
    G->flops[pn->phase] += flops;
    if (pn->op == IR_OP_MATMUL || pn->op == IR_OP_FUSED_MATMUL) G->gemm_flops[pn->phase] += 2 * mnk[0] * mnk[1] * mnk[2] * mnk[3];
    /* as tgc stats times a node (step_report.c): its roofline, at least its device calls x the launch time */
    double s = pass_node_roofline_seconds(&m->k, &m->device, m->elem_bytes, pn->op, pn->causal, flops, bytes, mnk);
    G->seconds[pn->phase] += fmax(s, pn->launches * m->device.launch);
    if (pn->phase == PASS_PHASE_BACKWARD && work > max_work[pn->group]) max_work[pn->group] = work;
  }
  pass_plan_shared *shared_saved = calloc((size_t)c->n_saved + 1, sizeof *shared_saved);
  int n_shared_saved = 0;
  const bool *again = remade(c);
  if (!shared_saved) IR_DIE("out of memory (shared_saved)");
  for (int i = 0; i < c->n_saved;) { /* (value, group) sorted: a value read by several groups is kept once per stage */
    int v = c->saved[i].value, j = i;
    while (j < c->n_saved && c->saved[j].value == v) j++;
    double x = dev_bytes(c, v, b);
    if (j - i == 1) gr[c->saved[i].group].saved += x, gr[c->saved[i].group].again += again[v] ? x : 0;
    else shared_saved[n_shared_saved].again = again[v], shared_entry(&shared_saved[n_shared_saved++], x, c->saved + i, j - i);
    i = j;
  }
  /* what else the trainer keeps across the backward (the memory plan of the
   * step graph has it): the loss (its sum over micro-batches is the
   * trainer's), the count of correct predictions (f64) beside a
   * cross-entropy, and with vocabulary-split logits on tp the loss's
   * per-token max and sum of exponentials (fp32), which its backward reads */
  int loss_group = m->layers + 1, n_ce = 0;
  for (int i = 0; i < g->n_outputs; i++) {
    const ir_value *o = g->outputs[i].value;
    if (o->type.rank != 0 || o->role == IR_ROLE_GRAD || c->def_node[o->id] < 0) continue;
    loss_group = c->nodes[c->def_node[o->id]].group;
    gr[loss_group].saved += c->vbytes[o->id];
    gr[loss_group].again += c->vbytes[o->id];
    break;
  }
  for (int i = 0; i < k->g2->n_nodes; i++) /* (a vocabulary-split loss is a sub-graph in the sharded one) */
    n_ce += !k->g2->nodes[i]->dead && k->g2->nodes[i]->op == IR_OP_CROSS_ENTROPY;
  gr[loss_group].saved += 8.0 * n_ce, gr[loss_group].again += 8.0 * n_ce;
  for (int i = 0; i < c->n_recomp; i++) {
    int v = c->recomp[i].value;
    gr[c->recomp[i].group].working += dev_bytes(c, v, b);
  }
  for (int i = 0; i < ng; i++) gr[i].working += max_work[i];
  /* parameters: those read by one group counted there, the others listed */
  pass_plan_shared *shared = calloc((size_t)c->n_params + 1, sizeof *shared);
  int n_shared = 0;
  if (!shared) IR_DIE("out of memory (shared)");
  for (int i = 0; i < c->n_params;) {
    int v = c->params[i].value, j = i;
    while (j < c->n_params && c->params[j].value == v) j++;
    const ir_value *p = c->value[v];
    const ir_value *gr_v = c->grad_of[v] >= 0 ? c->value[c->grad_of[v]] : p;
    double elems = numel(&p->type), grads = numel(&gr_v->type);
    double grads_dp = tp_dim(gr_v) >= 0 && tp_dim(gr_v) != tp_dim(p) ? grads * c->t : grads; /* gathered on tp first */
    bool whole = zero_whole(p);
    if (j - i == 1) {
      pass_plan_group *G = &gr[c->params[i].group];
      G->params += elems, G->tensors++, G->grads += grads, G->grads_dp += grads_dp;
      if (whole) G->whole += elems, G->whole_tensors++, G->grads_whole += grads, G->grads_dp_whole += grads_dp;
    } else {
      shared[n_shared].whole = whole;
      shared[n_shared].grads = grads;
      shared[n_shared].grads_dp = grads_dp;
      shared_entry(&shared[n_shared++], elems, c->params + i, j - i);
    }
    i = j;
  }
  for (int i = 0; i < c->n_gathers; i++) { /* ZeRO 3 gathers what it splits */
    int v = c->gathers[i].value;
    if (zero_whole(c->value[v])) continue;
    pass_plan_group *G = &gr[c->gathers[i].group / 2];
    G->gather[c->gathers[i].group % 2] += numel(&c->value[v]->type);
    G->gather_n[c->gathers[i].group % 2]++;
  }
  for (int i = 0; i < g->n_params; i++) { /* the gradients the update brings to their parameters' layouts on tp */
    int gv = c->grad_of[g->params[i]->id];
    const ir_value *o = gv >= 0 ? c->value[gv] : NULL;
    if (!o || c->def_node[o->id] < 0) continue;
    int gd = tp_dim(o);
    if (gd >= 0 && gd != tp_dim(g->params[i])) { /* split where the parameter is not: gathered (then sliced) */
      pass_plan_group *G = &gr[c->nodes[c->def_node[o->id]].group];
      G->grad_sync[IR_COLL_ALL_GATHER] += c->vbytes[o->id] * c->t, G->grad_sync_n[IR_COLL_ALL_GATHER]++;
      continue;
    }
    if (!((o->shard.partial >> IR_AXIS_TP) & 1)) continue;
    pass_plan_group *G = &gr[c->nodes[c->def_node[o->id]].group];
    int kind = tp_dim(g->params[i]) >= 0 ? IR_COLL_REDUCE_SCATTER : IR_COLL_ALL_REDUCE;
    G->grad_sync[kind] += c->vbytes[o->id], G->grad_sync_n[kind]++;
  }
  /* cuts */
  double *act = cut, *grad = cut + ng, *act_n = cut + 2 * ng, *grad_n = cut + 3 * ng;
  for (int i = 0; i < c->n_cuts; i++) {
    const cut_entry *e = &c->cuts[i];
    double x = dev_bytes(c, e->value, b);
    for (int k = e->lo; k < e->hi; k++) (e->fwd ? act : grad)[k] += x, (e->fwd ? act_n : grad_n)[k]++;
  }
  free(max_work);
  pass_plan_tied *tied = calloc((size_t)c->n_tied + 1, sizeof *tied);
  if (!tied) IR_DIE("out of memory (tied)");
  for (int i = 0; i < c->n_tied; i++) {
    int v = c->tied[i].value;
    tied[i] = (pass_plan_tied){c->tied[i].group / 65536, c->tied[i].group % 65536,
                               dev_bytes(c, v, b)};
  }
  int tp_sums = 0;
  for (int i = 0; i < g->n_outputs; i++) {
    const ir_value *o = g->outputs[i].value;
    tp_sums += o->type.rank == 0 && o->role != IR_ROLE_GRAD && ((o->shard.partial >> IR_AXIS_TP) & 1);
  }
  bool grads_shared = false; /* two parameters' gradients one value (canonicalize merged them) */
  for (int i = 0; i < g->n_params && !grads_shared; i++)
    for (int j = 0; j < i && !grads_shared; j++)
      grads_shared = c->grad_of[g->params[i]->id] >= 0 && c->grad_of[g->params[i]->id] == c->grad_of[g->params[j]->id];
  *out = (pass_plan_profile){gr, act, grad, act_n, grad_n, ng, tied, c->n_tied, shared, shared_saved, n_shared, n_shared_saved,
                             tp_sums, grads_shared};
}

const pass_plan_profile *pass_plan_model_profile(pass_plan_model *m, pass_plan_ckpt ck, int b, int t, bool sp) {
  if (!pass_plan_model_has(m, ck) || b < 1 || t < 1) return NULL;
  plan_ck *k = &m->ck[ck];
  plan_view *c = view_of(m, k, t, sp, NULL);
  if (c->rc != 0) return NULL;
  for (int i = 0; i < c->n_memo; i++)
    if (c->memo[i].b == b) return &c->memo[i].prof;
  if (c->n_memo == c->cap_memo) {
    c->cap_memo = c->cap_memo ? 2 * c->cap_memo : 64;
    c->memo = realloc(c->memo, (size_t)c->cap_memo * sizeof *c->memo);
    if (!c->memo) IR_DIE("out of memory (c->memo)");
  }
  memo_entry *e = &c->memo[c->n_memo++];
  e->b = b, e->t = c->t, e->sp = c->sp;
  build_profile(m, k, c, b, &e->prof);
  return &e->prof;
}

double pass_plan_params_in(const pass_plan_profile *p, int lo, int hi) {
  double n = 0;
  for (int g = lo; g <= hi && g < p->n_groups; g++) n += p->groups[g].params;
  for (int i = 0; i < p->n_shared; i++)
    if (shared_in(&p->shared[i], lo, hi)) n += p->shared[i].elems;
  return n;
}

pass_plan_params pass_plan_params_of(const pass_plan_profile *p, int lo, int hi) {
  pass_plan_params r = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int g = lo; g <= hi && g < p->n_groups; g++) {
    const pass_plan_group *G = &p->groups[g];
    r.elems += G->params, r.tensors += G->tensors, r.whole += G->whole, r.whole_tensors += G->whole_tensors;
    r.grads += G->grads, r.grads_whole += G->grads_whole, r.grads_dp += G->grads_dp, r.grads_dp_whole += G->grads_dp_whole;
  }
  for (int i = 0; i < p->n_shared; i++) {
    const pass_plan_shared *s = &p->shared[i];
    if (!shared_in(s, lo, hi)) continue;
    r.elems += s->elems, r.tensors++, r.grads += s->grads, r.grads_dp += s->grads_dp;
    if (s->whole) r.whole += s->elems, r.whole_tensors++, r.grads_whole += s->grads, r.grads_dp_whole += s->grads_dp;
  }
  return r;
}

static double saved_in(const pass_plan_profile *p, int lo, int hi, bool piped) {
  double n = 0;
  for (int g = lo; g <= hi && g < p->n_groups; g++) n += p->groups[g].saved - (piped ? p->groups[g].again : 0);
  for (int i = 0; i < p->n_shared_saved; i++)
    if (shared_in(&p->shared_saved[i], lo, hi) && !(piped && p->shared_saved[i].again)) n += p->shared_saved[i].elems;
  return n;
}

double pass_plan_saved_in(const pass_plan_profile *p, int lo, int hi) { return saved_in(p, lo, hi, false); }

double pass_plan_handed_in(const pass_plan_profile *p, int lo, int hi) { return saved_in(p, lo, hi, true); }

double pass_plan_param_in(const pass_plan_model *m, pass_plan_ckpt ck, int i, int t, bool sp, int lo, int hi,
                          bool *whole, double *grads) {
  if (whole) *whole = false;
  if (grads) *grads = 0;
  if (!pass_plan_model_has(m, ck) || i < 0 || i >= m->ck[ck].g2->n_params || t < 1) return 0;
  /* the views are built at the first ask (the model is const to its readers) */
  plan_view *c = view_of((pass_plan_model *)m, (plan_ck *)&m->ck[ck], t, sp, NULL);
  if (c->rc != 0) return 0;
  int v = c->g->params[i]->id;
  for (int j = 0; j < c->n_params; j++) /* (value, group) entries */
    if (c->params[j].value == v && c->params[j].group >= lo && c->params[j].group <= hi) {
      if (whole) *whole = zero_whole(c->value[v]);
      if (grads) *grads = numel(&c->value[c->grad_of[v] >= 0 ? c->grad_of[v] : v]->type);
      return numel(&c->value[v]->type);
    }
  return 0;
}

int pass_plan_model_tp_check(const pass_plan_model *m, int t, int64_t *size, const ir_value **value, int *dim,
                             bool *heads) {
  for (int ck = 0; ck < PASS_PLAN_CK_COUNT; ck++) {
    plan_ck *k = (plan_ck *)&m->ck[ck]; /* the views are built at the first ask */
    if (!k->present) continue;
    *heads = true;
    if (plan_tp_heads(k->g2, t, size, value, dim)) return 0;
    *heads = false, *size = t, *value = NULL, *dim = -1;
    pass_plan_model *mm = (pass_plan_model *)m;
    if (view_of(mm, k, t, false, NULL)->rc != 0 || view_of(mm, k, t, true, NULL)->rc != 0) return 0; /* refused */
  }
  return 1;
}

