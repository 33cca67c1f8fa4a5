/* plan/plan.c — the cost of a parallel plan for a training step, and the
 * search for the best one (pass.h, section "plan.c"; docs/plan.md has the
 * model with every formula and constant).
 *
 * Evaluating a plan:
 *  1. the profile of the model at (micro-batch b, tensor degree t, sequence
 *     parallelism) from plan_profile.c: per group (layer) compute seconds,
 *     tensor-axis collectives, kept activations, parameters;
 *  2. the groups split into pp * v virtual stages by a dynamic program that
 *     minimizes the slowest stage (compute plus its tensor collectives);
 *  3. collectives by the alpha-beta model of NCCL's ring (and tree, for an
 *     all-reduce across nodes): n ranks, payload S bytes,
 *       all-reduce     base + 2(n-1) steps * alpha + 2(n-1)/n * S / beta
 *       all-gather,
 *       reduce-scatter base + (n-1) steps * alpha + (n-1)/n * S / beta
 *       tree           base + 2((n/nodes - 1) alpha_intra + log2(nodes) alpha_inter) + 2 S / beta
 *     alpha, beta: the links the axis crosses (inside a node: NVLink; a data
 *     group wider than a node, or a pipeline boundary between nodes: the
 *     network, one NIC per GPU);
 *  4. the pipeline simulated (plan_sim.c) with per-micro-batch forward and
 *     backward times of every virtual stage and the send/recv between them;
 *  5. the data-parallel gradient reduction (ZeRO 0: all-reduce, 1 and 2:
 *     reduce-scatter, then an all-gather of the updated parameters) runs on
 *     its own stream per layer bucket as the last micro-batch's backward
 *     finishes each layer (what the runtime does): only what outlasts the
 *     backward is exposed; ZeRO 2 reduce-scatters every micro-batch's
 *     gradients (hidden but the last); ZeRO 3 also all-gathers each layer's
 *     parameters its forward reads, and again those its backward reads,
 *     overlapped with that micro-batch's compute (an operation lasts the
 *     longer of the two);
 *  6. the optimizer: one fused pass over the device's (ZeRO-sharded)
 *     parameters, gradients and state, memory-bound;
 *  7. memory per stage: parameters, gradients and optimizer state (sharded
 *     by ZeRO), the activations of the micro-batches in flight (the
 *     simulation's peak), the working set of one layer's backward, and the
 *     send/recv and ZeRO-3 gather buffers.
 * The step is the latest stage's pipeline end + exposed reduction +
 * optimizer; its rows are that stage's.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir_die.h"
#include "plan_impl.h"
#include "ir_clock.h"

static const char *const mem_names[PASS_MEM_KINDS] = {"parameters", "gradients", "optimizer state",
                                                      "activations", "working", "comm buffers"};
static const char *const row_names[PASS_ROWS] = {
    "forward",           "backward",         "recompute",     "tensor all-reduce", "tensor all-gather",
    "tensor reduce-scatter", "pipeline send/recv", "pipeline bubble", "gradient sync", "optimizer"};

const char *pass_coll_name(pass_coll_kind k) { return ir_coll_label(k); }
const char *pass_axis_name(pass_mesh_axis a) { return ir_axis_word(a); }
const char *pass_mem_kind_name(int k) { return (unsigned)k < PASS_MEM_KINDS ? mem_names[k] : "?"; }
const char *pass_plan_row_name(int r) { return (unsigned)r < PASS_ROWS ? row_names[r] : "?"; }

/* ---- collectives ---- */

/* Seconds of `calls` collectives of one kind moving `bytes` in all over n
 * ranks spanning `nodes` nodes (1: inside one node). */
static double coll_seconds(const pass_plan_constants *k, const pass_cluster *c, int kind, int n, double bytes,
                           double calls, int nodes) {
  if (n <= 1 || calls <= 0) return 0;
  bool inter = nodes > 1;
  double bw = inter ? c->inter_bw : c->intra_bw;
  if (kind == IR_COLL_SEND) return calls * (inter ? c->inter_lat : c->intra_lat) + bytes / bw;
  bool ar = kind == IR_COLL_ALL_REDUCE;
  int steps = ar ? 2 * (n - 1) : n - 1, isteps = inter ? (ar ? 2 * (nodes - 1) : nodes - 1) : 0;
  double lat = k->nccl_base_lat + (steps - isteps) * c->intra_lat + isteps * c->inter_lat;
  double ring = calls * lat + (ar ? 2.0 * (n - 1) / n : (double)(n - 1) / n) * bytes / bw;
  if (!ar || !inter) return ring;
  double per_node = (double)n / nodes;
  double tree = calls * (k->nccl_base_lat + 2 * ((per_node - 1) * c->intra_lat + log2((double)nodes) * c->inter_lat)) +
                2 * bytes / bw;
  return tree < ring ? tree : ring;
}

/* Nodes a data-parallel group spans (its dp ranks are tp apart). */
static int dp_nodes(const pass_cluster *c, int tp, int dp) {
  int span = tp * dp;
  if (span <= c->gpus_per_node && c->gpus_per_node % span == 0) return 1;
  return (span + c->gpus_per_node - 1) / c->gpus_per_node;
}

/* Whether the send from pipeline stage a to stage b crosses nodes. */
static bool pp_crosses(const pass_cluster *c, int tp, int dp, int a, int b) {
  long ra = (long)a * tp * dp, rb = (long)b * tp * dp;
  return ra / c->gpus_per_node != rb / c->gpus_per_node;
}

double pass_plan_coll_seconds(const pass_plan_model *m, const pass_cluster *c, pass_coll_kind k, int n, double bytes,
                              double calls, int nodes) {
  return coll_seconds(pass_plan_model_constants(m), c, k, n, bytes, calls, nodes);
}
int pass_plan_dp_nodes(const pass_cluster *c, int tp, int dp) { return dp_nodes(c, tp, dp); }
bool pass_plan_pp_crosses(const pass_cluster *c, int tp, int dp, int a, int b) { return pp_crosses(c, tp, dp, a, b); }

/* ---- the stage split: a dynamic program over layers ---- */
/* w[0..n): the layers' times (the first holds the embeddings, the last the
 * head); into k contiguous non-empty parts minimizing the largest sum;
 * starts[0..k] the first layer of each part (starts[k] = n). */
static void split_layers(const double *w, int n, int k, int *starts) {
  double *pre = malloc(sizeof *pre * (size_t)(n + 1));
  double *f = malloc(sizeof *f * (size_t)(k + 1) * (size_t)(n + 1));
  int *arg = malloc(sizeof *arg * (size_t)(k + 1) * (size_t)(n + 1));
  if (!pre || !f || !arg) IR_DIE("out of memory (pre || !f || !arg)");
  pre[0] = 0;
  for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + w[i];
#define F(a, b) f[(size_t)(a) * (size_t)(n + 1) + (size_t)(b)]
#define ARG(a, b) arg[(size_t)(a) * (size_t)(n + 1) + (size_t)(b)]
  for (int j = 0; j <= n; j++) F(1, j) = pre[j], ARG(1, j) = 0;
  for (int p = 2; p <= k; p++)
    for (int j = p; j <= n; j++) {
      /* the last part is [i, j); f(p-1, i) grows with i, the part's sum
       * shrinks: scan i downwards and stop once the part alone is worse */
      double best = INFINITY;
      int bi = j - 1;
      for (int i = j - 1; i >= p - 1; i--) {
        double part = pre[j] - pre[i];
        if (part >= best) break;
        double v = F(p - 1, i) > part ? F(p - 1, i) : part;
        if (v < best) best = v, bi = i;
      }
      F(p, j) = best, ARG(p, j) = bi;
    }
  starts[k] = n;
  for (int p = k, j = n; p >= 1; p--) {
    int i = p == 1 ? 0 : ARG(p, j);
    starts[p - 1] = i;
    j = i;
  }
#undef F
#undef ARG
  free(pre);
  free(f);
  free(arg);
}

/* ---- evaluation ---- */

/* What a search computes again and again, kept per profile: the groups'
 * tensor-collective seconds, and the stage splits per stage count. */
typedef struct {
  const pass_plan_profile *P;
  int nv;                                   /* 0: the group figures; > 0: a split into nv stages */
  double (*ph)[PASS_NUM_PHASES], (*ks)[3], (*kb)[3], (*kn)[3], *gt;
  int *starts;
} plan_memo;

typedef struct {
  pass_plan_model *m;
  const pass_cluster *c;
  const pass_plan_job *j;
  plan_memo *memo; /* open addressing on (P, nv) */
  int memo_cap, memo_n;
  /* the last plan's stages, bytes in flight and simulation: the search
   * varies the ZeRO stage innermost, and ZeRO 0-2 change neither */
  struct last_eval *last;
} plan_ctx;

static size_t memo_slot(const plan_ctx *x, const pass_plan_profile *P, int nv) {
  size_t h = ((size_t)(uintptr_t)P >> 4) * 1000003u + (size_t)nv * 2654435761u;
  size_t i = h & (size_t)(x->memo_cap - 1);
  while (x->memo[i].P && !(x->memo[i].P == P && x->memo[i].nv == nv)) i = (i + 1) & (size_t)(x->memo_cap - 1);
  return i;
}

static plan_memo *memo_get(plan_ctx *x, const pass_plan_profile *P, int nv, bool *fresh) {
  if (2 * (x->memo_n + 1) > x->memo_cap) { /* grow */
    plan_memo *old = x->memo;
    int old_cap = x->memo_cap;
    x->memo_cap = old_cap ? 2 * old_cap : 1024;
    x->memo = calloc((size_t)x->memo_cap, sizeof *x->memo);
    if (!x->memo) IR_DIE("out of memory (x->memo)");
    for (int i = 0; i < old_cap; i++)
      if (old[i].P) x->memo[memo_slot(x, old[i].P, old[i].nv)] = old[i];
    free(old);
  }
  plan_memo *e = &x->memo[memo_slot(x, P, nv)];
  *fresh = !e->P;
  if (*fresh) e->P = P, e->nv = nv, x->memo_n++;
  return e;
}

static void last_free(plan_ctx *x);

static void ctx_free(plan_ctx *x) {
  last_free(x);
  for (int i = 0; i < x->memo_cap; i++) {
    plan_memo *e = &x->memo[i];
    free(e->ph), free(e->ks), free(e->kb), free(e->kn), free(e->gt), free(e->starts);
  }
  free(x->memo);
  x->memo = NULL, x->memo_cap = x->memo_n = 0;
}

typedef struct {
  int nv;                    /* virtual stages */
  int *first, *last;         /* groups of each */
  double *f_comp, *b_comp, *rc_comp; /* compute seconds per micro-batch */
  double *f_comm, *b_comm;   /* tensor-axis collectives, seconds per micro-batch */
  double (*kind_s)[3];       /* per virtual stage: seconds per micro-batch per collective kind (all phases) */
  double (*kind_b)[3], (*kind_n)[3]; /* payload bytes and calls per micro-batch */
  double *z_f, *z_b;         /* ZeRO 2 and 3: data-parallel collectives per micro-batch, overlapped with the operation */
  double (*gather)[2], (*gather_n)[2]; /* ZeRO 3: parameter elements gathered per micro-batch forward and backward, calls */
  double *fwd, *bwd;         /* operation durations */
  double *act;               /* kept bytes per micro-batch */
  double *work;              /* working bytes */
  double *params;            /* parameter elements */
  pass_plan_params *pr;      /* the same with tensors and what ZeRO cannot split */
  double *flops;             /* FLOPs per micro-batch (all phases) */
  double *send, *send_back, *send_bytes, *back_bytes;
  double *send_n, *back_n;   /* values crossing each boundary (one send each) */
} stages;

static void stages_free(stages *s) {
  free(s->first), free(s->last), free(s->f_comp), free(s->b_comp), free(s->rc_comp), free(s->f_comm);
  free(s->b_comm), free(s->gather), free(s->gather_n), free(s->kind_s), free(s->kind_b), free(s->kind_n), free(s->z_f), free(s->z_b), free(s->fwd);
  free(s->bwd), free(s->act), free(s->work), free(s->params), free(s->flops), free(s->send), free(s->send_back);
  free(s->send_bytes), free(s->back_bytes), free(s->pr), free(s->send_n), free(s->back_n);
  memset(s, 0, sizeof *s);
}

static void *zalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) IR_DIE("out of memory (p)");
  return p;
}

/* A plan's validity: 0, or -1 with why. */
static int check_strategy(plan_ctx *x, const pass_plan_strategy *s, char *why, size_t n) {
  const pass_cluster *c = x->c;
  int L = pass_plan_model_layers(x->m), G = x->j->global_batch;
  if (s->dp < 1 || s->tp < 1 || s->pp < 1 || (long)s->dp * s->tp * s->pp != c->gpus) {
    snprintf(why, n, "dp %d x tp %d x pp %d = %ld devices, but the cluster has %d GPUs", s->dp, s->tp,
             s->pp, (long)s->dp * s->tp * s->pp, c->gpus);
    return -1;
  }
  if (s->tp > c->gpus_per_node || c->gpus_per_node % s->tp != 0) {
    snprintf(why, n, "tensor parallelism runs inside a node: tp %d does not divide the %d GPUs of a %s node", s->tp,
             c->gpus_per_node, c->name);
    return -1;
  }
  int64_t size;
  const ir_value *v;
  int dim;
  bool heads;
  if (s->tp > 1 && pass_plan_model_tp_check(x->m, s->tp, &size, &v, &dim, &heads) == 0) {
    char at[256] = "";
    if (v && v->loc.file) snprintf(at, sizeof at, " at %s:%d:%d", v->loc.file, v->loc.line, v->loc.col);
    if (heads)
      snprintf(why, n, "tp %d does not divide the %lld attention heads (dim %d of %%%s%s)", s->tp, (long long)size, dim,
               v ? v->name : "?", at);
    else
      snprintf(why, n, "the shard pass cannot shard the training graph at tp %d", s->tp);
    return -1;
  }
  int v_ = s->schedule == PASS_SCHED_INTERLEAVED ? s->v : 1;
  if ((long)s->pp * v_ > L) {
    snprintf(why, n, "%d pipeline stages%s need %d layers, the model has %d", s->pp * v_,
             v_ > 1 ? " (pp x v)" : "", s->pp * v_, L);
    return -1;
  }
  if (G % s->dp != 0) {
    snprintf(why, n, "dp %d does not divide the global batch %d", s->dp, G);
    return -1;
  }
  if (s->micro_batch < 1 || (G / s->dp) % s->micro_batch != 0) {
    snprintf(why, n, "micro-batch %d does not divide the %d sequences of a data-parallel replica (global batch %d / dp %d)",
             s->micro_batch, G / s->dp, G, s->dp);
    return -1;
  }
  int m = G / (s->dp * s->micro_batch);
  if (s->schedule == PASS_SCHED_INTERLEAVED && (v_ < 2 || m % s->pp != 0)) {
    if (v_ < 2) snprintf(why, n, "the interleaved schedule needs at least 2 chunks per device, got %d", v_);
    else snprintf(why, n, "the interleaved schedule needs the %d micro-batches to be a multiple of pp %d", m, s->pp);
    return -1;
  }
  if (s->sp && s->tp < 2) {
    snprintf(why, n, "sequence parallelism splits over the tensor axis: it needs tp > 1");
    return -1;
  }
  if (s->zero < 0 || s->zero > 3) {
    snprintf(why, n, "ZeRO stage %d: expected 0, 1, 2 or 3", s->zero);
    return -1;
  }
  if (!pass_plan_model_has(x->m, s->ckpt)) {
    snprintf(why, n, "checkpoint policy %s was not compiled", pass_plan_ckpt_name(s->ckpt));
    return -1;
  }
  return 0;
}

/* Per-micro-batch tensor-collective seconds of group g, by phase, and by kind. */
static void group_comm(const plan_ctx *x, const pass_plan_group *G, int t, double ph_s[PASS_NUM_PHASES],
                       double kind_s[3], double kind_b[3], double kind_n[3]) {
  for (int p = 0; p < PASS_NUM_PHASES; p++) {
    ph_s[p] = 0;
    for (int k = 0; k < 3; k++) {
      double sec = coll_seconds(pass_plan_model_constants(x->m), x->c, k, t, G->coll_bytes[p][k], G->coll_count[p][k], 1);
      ph_s[p] += sec;
      kind_s[k] += sec, kind_b[k] += G->coll_bytes[p][k], kind_n[k] += G->coll_count[p][k];
    }
  }
}

/* The virtual stages of s. */
static void build_stages(plan_ctx *x, const pass_plan_strategy *s, const pass_plan_profile *P, stages *st) {
  int L = pass_plan_model_layers(x->m), t = s->tp, d = s->dp;
  int v = s->schedule == PASS_SCHED_INTERLEAVED ? s->v : 1, nv = s->pp * v;
  size_t ng = (size_t)P->n_groups;
  bool fresh;
  plan_memo *gm = memo_get(x, P, 0, &fresh);
  if (fresh) {
    gm->ph = zalloc(ng, sizeof *gm->ph);
    gm->ks = zalloc(ng, sizeof *gm->ks), gm->kb = zalloc(ng, sizeof *gm->kb), gm->kn = zalloc(ng, sizeof *gm->kn);
    gm->gt = zalloc(ng, sizeof *gm->gt);
    for (size_t g = 0; g < ng; g++) {
      const pass_plan_group *G = &P->groups[g];
      group_comm(x, G, t, gm->ph[g], gm->ks[g], gm->kb[g], gm->kn[g]);
      gm->gt[g] = G->seconds[0] + G->seconds[1] + G->seconds[2] + gm->ph[g][0] + gm->ph[g][1] + gm->ph[g][2];
    }
  }
  double(*ph)[PASS_NUM_PHASES] = gm->ph, (*ks)[3] = gm->ks, (*kb)[3] = gm->kb, (*kn)[3] = gm->kn, *gt = gm->gt;
  plan_memo *sm = memo_get(x, P, nv, &fresh);
  if (fresh) {
    double *w = zalloc((size_t)L, sizeof *w);
    for (int l = 0; l < L; l++) w[l] = gt[l + 1];
    w[0] += gt[0];
    w[L - 1] += gt[L + 1];
    sm->starts = zalloc((size_t)nv + 1, sizeof *sm->starts);
    split_layers(w, L, nv, sm->starts);
    free(w);
  }
  const int *starts = sm->starts;
  memset(st, 0, sizeof *st);
  st->nv = nv;
#define A(f) st->f = zalloc((size_t)nv, sizeof *st->f)
  A(first), A(last), A(f_comp), A(b_comp), A(rc_comp), A(f_comm), A(b_comm), A(kind_s), A(kind_b), A(kind_n);
  A(z_f), A(z_b), A(gather), A(gather_n), A(fwd), A(bwd), A(act), A(work), A(params), A(flops), A(send), A(send_back), A(send_bytes);
  A(back_bytes), A(pr), A(send_n), A(back_n);
#undef A
  double eb = (double)pass_plan_model_elem_bytes(x->m);
  int z3nodes = dp_nodes(x->c, t, d);
  for (int k = 0; k < nv; k++) {
    st->first[k] = k == 0 ? 0 : starts[k] + 1;
    st->last[k] = k == nv - 1 ? L + 1 : starts[k + 1];
    for (int g = st->first[k]; g <= st->last[k]; g++) {
      const pass_plan_group *G = &P->groups[g];
      st->f_comp[k] += G->seconds[PASS_PHASE_FORWARD];
      st->b_comp[k] += G->seconds[PASS_PHASE_BACKWARD];
      st->rc_comp[k] += G->seconds[PASS_PHASE_RECOMPUTE];
      st->f_comm[k] += ph[g][PASS_PHASE_FORWARD];
      st->b_comm[k] += ph[g][PASS_PHASE_BACKWARD] + ph[g][PASS_PHASE_RECOMPUTE];
      for (int q = 0; q < 3; q++) st->kind_s[k][q] += ks[g][q], st->kind_b[k][q] += kb[g][q], st->kind_n[k][q] += kn[g][q];
      if (G->working > st->work[k]) st->work[k] = G->working;
      st->flops[k] += G->flops[0] + G->flops[1] + G->flops[2];
      for (int q = 0; q < 2; q++) st->gather[k][q] += G->gather[q], st->gather_n[k][q] += G->gather_n[q];
    }
    st->pr[k] = pass_plan_params_of(P, st->first[k], st->last[k]);
    st->params[k] = st->pr[k].elems;
    st->act[k] = (s->pp > 1 ? pass_plan_handed_in : pass_plan_saved_in)(P, st->first[k], st->last[k]);
    if (s->zero >= 2 && d > 1) {
      /* ZeRO 2: every micro-batch's gradients reduce-scattered in its
       * backward; ZeRO 3 also gathers, per layer, the parameters its
       * forward reads, and again those its backward reads (a tied table
       * read by the embedding and the head: in both); overlapped with the
       * operation */
      const pass_plan_constants *kk = pass_plan_model_constants(x->m);
      const pass_plan_params *pr = &st->pr[k];
      bool z3 = s->zero == 3;
      st->z_f[k] = z3 ? coll_seconds(kk, x->c, IR_COLL_ALL_GATHER, d, st->gather[k][0] * eb, st->gather_n[k][0], z3nodes) : 0;
      st->z_b[k] = (z3 ? coll_seconds(kk, x->c, IR_COLL_ALL_GATHER, d, st->gather[k][1] * eb, st->gather_n[k][1], z3nodes) : 0) +
                   coll_seconds(kk, x->c, IR_COLL_REDUCE_SCATTER, d, (pr->grads - pr->grads_whole) * eb,
                                pr->tensors - pr->whole_tensors, z3nodes) +
                   coll_seconds(kk, x->c, IR_COLL_ALL_REDUCE, d, pr->grads_whole * eb, pr->whole_tensors, z3nodes);
    }
    double fc = st->f_comp[k] + st->f_comm[k], bc = st->b_comp[k] + st->rc_comp[k] + st->b_comm[k];
    st->fwd[k] = fc > st->z_f[k] ? fc : st->z_f[k];
    st->bwd[k] = bc > st->z_b[k] ? bc : st->z_b[k];
  }
  for (int k = 0; k + 1 < nv; k++) {
    int g = st->last[k];
    int a = k % s->pp, b = (k + 1) % s->pp;
    int nodes = pp_crosses(x->c, t, d, a, b) ? 2 : 1;
    st->send_bytes[k] = P->act[g];
    st->back_bytes[k] = P->grad[g];
    st->send_n[k] = P->act_n[g];
    st->back_n[k] = P->grad_n[g];
    st->send[k] = coll_seconds(pass_plan_model_constants(x->m), x->c, IR_COLL_SEND, 2, P->act[g], P->act_n[g], nodes);
    st->send_back[k] = coll_seconds(pass_plan_model_constants(x->m), x->c, IR_COLL_SEND, 2, P->grad[g], P->grad_n[g], nodes);
  }
}

/* Seconds of the optimizer over n parameter elements on one device. */
static double optimizer_seconds(const plan_ctx *x, double n) {
  const pass_target *dev = plan_model_device(x->m);
  size_t eb = pass_plan_model_elem_bytes(x->m);
  pass_train_memory per = pass_training_memory(1, eb, plan_model_opt_states(x->m), 0, true);
  double bytes = 2 * per.params + per.grads + 2 * per.optimizer; /* read all, write parameters and state */
  return pass_roofline_seconds(plan_model_opt_flops(x->m) * n, bytes * n, pass_target_peak(dev, eb),
                               dev->bandwidth * pass_plan_model_constants(x->m)->mem_eff);
}

/* Whether the step reduces the gradients over dp, in the layouts it hands
 * them over in (no gather on tp first), rather than the update: ZeRO 2 and
 * 3 per micro-batch; ZeRO 0 and 1 in buckets with one micro-batch, no
 * pipeline and a gradient value per parameter (the shard pass's rule,
 * passes/shard_train.c). Under ZeRO 1 it then hands over its block. */
static bool step_reduces(const pass_plan_strategy *s, const pass_plan_profile *P, int m) {
  return s->zero >= 2 || (s->dp > 1 && m == 1 && s->pp == 1 && !P->grads_shared);
}

/* Memory of every stage (mem[stage * KINDS + kind]); returns the fullest. */
static int stage_memory(const plan_ctx *x, const pass_plan_strategy *s, const pass_plan_profile *P, const stages *st,
                        int m, const double *peak_act, double *mem) {
  int p = s->pp, v = st->nv / s->pp, d = s->dp, fullest = 0;
  size_t eb = pass_plan_model_elem_bytes(x->m);
  pass_train_memory per = pass_training_memory(1, eb, plan_model_opt_states(x->m), 0, true);
  double best = -1;
  for (int dev = 0; dev < p; dev++) {
    double *M = mem + (size_t)dev * PASS_MEM_KINDS;
    double params = 0, whole = 0, grads = 0, grads_whole = 0, work = 0, biggest = 0, buf = 0, act = 0;
    for (int c = 0; c < v; c++) {
      int k = c * p + dev;
      params += st->params[k], whole += st->pr[k].whole;
      grads += st->pr[k].grads, grads_whole += st->pr[k].grads_whole;
      if (st->work[k] > work) work = st->work[k];
      if (st->params[k] > biggest) biggest = st->params[k];
      if (k > 0 && st->send_bytes[k - 1] + st->back_bytes[k - 1] > buf) buf = st->send_bytes[k - 1] + st->back_bytes[k - 1];
      if (k + 1 < st->nv && st->send_bytes[k] + st->back_bytes[k] > buf) buf = st->send_bytes[k] + st->back_bytes[k];
      act += st->act[k];
    }
    if (peak_act) act = peak_act[dev];
    else if (s->schedule == PASS_SCHED_GPIPE) act *= m;
    else act *= (p - dev < m ? p - dev : m); /* 1f1b: min(p - s, m) in flight */
    /* ZeRO splits all but the parameters it cannot (pass_plan_group.whole) */
    M[PASS_MEM_PARAMS] = ((params - whole) / (s->zero >= 3 ? d : 1) + whole) * per.params;
    M[PASS_MEM_GRADS] = ((grads - grads_whole) / (s->zero >= 1 && step_reduces(s, P, m) ? d : 1) + grads_whole) *
                        per.grads; /* as handed over */
    M[PASS_MEM_OPTIMIZER] = ((params - whole) / (s->zero >= 1 ? d : 1) + whole) * per.optimizer;
    M[PASS_MEM_ACTIVATIONS] = act;
    M[PASS_MEM_WORKING] = work;
    M[PASS_MEM_COMM] = buf + (s->zero >= 3 && d > 1 ? 2 * biggest * per.params : 0);
    double total = 0;
    for (int k = 0; k < PASS_MEM_KINDS; k++) total += M[k];
    if (total > best) best = total, fullest = dev;
  }
  return fullest;
}

/* What a stage waits for after its pipeline: its gradient reduction (ZeRO 0
 * and 1: layer buckets reduced one after another as the last backward of
 * each chunk passes them; what outlasts the backward is exposed), the
 * gather of the updated parameters (ZeRO 1 and 2), the tied weights'
 * gradients summed across stages, and the gradients left partial over the
 * tensor axis. Returns the exposed seconds; with out, appends the
 * collectives of one step (ZeRO 2 and 3's per-micro-batch ones included,
 * their exposure being the operations' extension over their compute). */
static double step_sync(plan_ctx *x, const pass_plan_strategy *s, const stages *st, const pass_plan_profile *P,
                        const pass_pipe_result *sim, int m, int dev, pass_plan_comm *out, int *n_out) {
  const pass_plan_constants *kk = pass_plan_model_constants(x->m);
  const pass_cluster *c = x->c;
  int p = s->pp, v = st->nv / s->pp, d = s->dp, t = s->tp, nodes = dp_nodes(c, t, d);
  double eb = (double)pass_plan_model_elem_bytes(x->m), busy_until = 0, end = sim->end[dev], exposed = 0;
  /* the stage's parameters: ZeRO reduce-scatters and gathers those it
   * splits, tensor by tensor, and all-reduces the others (the runtime's
   * calls: one per tensor) */
  pass_plan_params all = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int ch = 0; ch < v; ch++) {
    const pass_plan_params *q = &st->pr[ch * p + dev];
    all.elems += q->elems, all.tensors += q->tensors, all.whole += q->whole, all.whole_tensors += q->whole_tensors;
    all.grads += q->grads, all.grads_whole += q->grads_whole;
    all.grads_dp += q->grads_dp, all.grads_dp_whole += q->grads_dp_whole;
  }
  bool in_step = step_reduces(s, P, m); /* else by the update, gathered on tp first */
  if (in_step) all.grads_dp = all.grads, all.grads_dp_whole = all.grads_whole;
  /* the gradients move in the layouts the shard pass gives them (not
   * always their parameters'; ZeRO 0 and 1 reduce them in the update,
   * gathered on tp first where tp splits them and not their parameter);
   * the parameters gathered after the optimizer in theirs */
  double bytes_all = all.grads_dp * eb, split_bytes = (all.grads_dp - all.grads_dp_whole) * eb;
  double split_n = all.tensors - all.whole_tensors;
  double param_split_bytes = (all.elems - all.whole) * eb;
  if (d > 1 && s->zero <= 1) {
    int kind = s->zero == 0 ? IR_COLL_ALL_REDUCE : IR_COLL_REDUCE_SCATTER;
    double secs = 0, whole_secs = 0;
    for (int ch = v - 1; ch >= 0; ch--) { /* chunks in the order their last backward ends: the last chunk first */
      int k = ch * p + dev;
      pass_plan_params left = st->pr[k];
      if (in_step) left.grads_dp = left.grads, left.grads_dp_whole = left.grads_whole;
      double t0 = sim->last_b_start[k], t1 = sim->last_b_end[k], total = 0, done = 0;
      for (int g = st->first[k]; g <= st->last[k]; g++) total += P->groups[g].seconds[1] + P->groups[g].seconds[2];
      for (int g = st->last[k]; g >= st->first[k]; g--) { /* backward runs the layers last to first */
        const pass_plan_group *G = &P->groups[g];
        done += G->seconds[1] + G->seconds[2];
        double ready = total > 0 ? t0 + (t1 - t0) * done / total : t1;
        /* a layer's own parameters; the first bucket also takes the shared ones */
        pass_plan_params b = g == st->first[k] ? left
                                                : (pass_plan_params){G->params, G->tensors, G->whole, G->whole_tensors,
                                                                     G->grads, G->grads_whole,
                                                                     in_step ? G->grads : G->grads_dp,
                                                                     in_step ? G->grads_whole : G->grads_dp_whole};
        left.elems -= b.elems, left.tensors -= b.tensors, left.whole -= b.whole, left.whole_tensors -= b.whole_tensors;
        left.grads_dp -= b.grads_dp, left.grads_dp_whole -= b.grads_dp_whole;
        if (b.elems <= 0) continue;
        double whole = s->zero == 1 ? b.grads_dp_whole : 0, whole_n = s->zero == 1 ? b.whole_tensors : 0;
        double sec = coll_seconds(kk, c, kind, d, (b.grads_dp - whole) * eb, b.tensors - whole_n, nodes);
        double wsec = coll_seconds(kk, c, IR_COLL_ALL_REDUCE, d, whole * eb, whole_n, nodes);
        double start = ready > busy_until ? ready : busy_until;
        busy_until = start + sec + wsec;
        secs += sec, whole_secs += wsec;
      }
    }
    exposed = busy_until > end ? busy_until - end : 0;
    if (out && s->zero == 0)
      out[(*n_out)++] = (pass_plan_comm){kind, IR_AXIS_DP, "gradients", bytes_all, all.tensors, secs, exposed};
    if (out && s->zero == 1) {
      double share = secs + whole_secs > 0 ? secs / (secs + whole_secs) : 1;
      out[(*n_out)++] = (pass_plan_comm){kind, IR_AXIS_DP, "gradients", split_bytes, split_n, secs, exposed * share};
      if (all.whole_tensors > 0)
        out[(*n_out)++] = (pass_plan_comm){IR_COLL_ALL_REDUCE, IR_AXIS_DP, "gradients (no ZeRO dim)", all.grads_dp_whole * eb,
                                           all.whole_tensors, whole_secs, exposed * (1 - share)};
    }
  }
  if (d > 1 && s->zero >= 2) { /* per micro-batch, in the operations */
    double ext_f = 0, ext_b = 0, zf = 0, zb = 0, gathered = 0, gathers = 0;
    for (int ch = 0; ch < v; ch++) {
      int k = ch * p + dev;
      gathered += m * (st->gather[k][0] + st->gather[k][1]) * eb, gathers += m * (st->gather_n[k][0] + st->gather_n[k][1]);
      double ef = st->fwd[k] - st->f_comp[k] - st->f_comm[k], eb2 = st->bwd[k] - st->b_comp[k] - st->rc_comp[k] - st->b_comm[k];
      ext_f += m * (ef > 1e-12 * st->fwd[k] ? ef : 0); /* what is left of a difference of equal sums is rounding */
      ext_b += m * (eb2 > 1e-12 * st->bwd[k] ? eb2 : 0);
      zf += m * st->z_f[k], zb += m * st->z_b[k];
    }
    double rs = coll_seconds(kk, c, IR_COLL_REDUCE_SCATTER, d, split_bytes, split_n, nodes) * m;
    double ar = coll_seconds(kk, c, IR_COLL_ALL_REDUCE, d, all.grads_dp_whole * eb, all.whole_tensors, nodes) * m;
    if (out) {
      out[(*n_out)++] = (pass_plan_comm){IR_COLL_REDUCE_SCATTER, IR_AXIS_DP, "gradients", m * split_bytes, m * split_n, rs,
                                         s->zero == 2 ? ext_b : 0};
      if (all.whole_tensors > 0)
        out[(*n_out)++] = (pass_plan_comm){IR_COLL_ALL_REDUCE, IR_AXIS_DP, "gradients (no ZeRO dim)", m * all.grads_dp_whole * eb,
                                           m * all.whole_tensors, ar, 0};
      if (s->zero == 3)
        out[(*n_out)++] = (pass_plan_comm){IR_COLL_ALL_GATHER, IR_AXIS_DP, "parameters", gathered, gathers,
                                           zf + zb - rs - ar, ext_f + ext_b};
    }
  }
  if (d > 1 && (s->zero == 1 || s->zero == 2)) { /* the updated parameters gathered after the optimizer */
    double sec = coll_seconds(kk, c, IR_COLL_ALL_GATHER, d, param_split_bytes, split_n, nodes);
    exposed += sec;
    if (out) out[(*n_out)++] = (pass_plan_comm){IR_COLL_ALL_GATHER, IR_AXIS_DP, "parameters", param_split_bytes, split_n, sec, sec};
  }
  for (int i = 0; i < P->n_tied; i++) { /* tied weights on two stages: their gradients summed once a step */
    int a = -1, b = -1;
    for (int k = 0; k < st->nv; k++) {
      if (P->tied[i].lo >= st->first[k] && P->tied[i].lo <= st->last[k]) a = k % p;
      if (P->tied[i].hi >= st->first[k] && P->tied[i].hi <= st->last[k]) b = k % p;
    }
    if (a == b || (dev != a && dev != b)) continue;
    /* the two stages exchange their parts (a send and a receive each, at
     * once); ZeRO 2 and 3: each replica's 1/dp block */
    double bytes = P->tied[i].bytes / (s->zero >= 2 ? d : 1);
    double sec = coll_seconds(kk, c, IR_COLL_SEND, 2, bytes, 1, pp_crosses(c, t, d, a, b) ? 2 : 1);
    exposed += sec;
    if (out && *n_out < PASS_PLAN_MAX_COMM - 4)
      out[(*n_out)++] = (pass_plan_comm){IR_COLL_SEND, IR_AXIS_PP, "tied weights' gradients", 2 * bytes, 2, sec, sec};
  }
  /* gradients the update brings to their parameters' layouts on the tensor
   * axis (pass_plan_group.grad_sync: partial ones reduced, split ones
   * gathered) */
  double sync[IR_NUM_COLLS] = {0}, sync_n[IR_NUM_COLLS] = {0};
  for (int ch = 0; ch < v; ch++)
    for (int g = st->first[ch * p + dev]; g <= st->last[ch * p + dev]; g++)
      for (int q = 0; q < IR_NUM_COLLS; q++) sync[q] += P->groups[g].grad_sync[q], sync_n[q] += P->groups[g].grad_sync_n[q];
  for (int q = 0; q < IR_NUM_COLLS && t > 1; q++) {
    if (sync_n[q] == 0) continue;
    double sec = coll_seconds(kk, c, q, t, sync[q], sync_n[q], 1);
    exposed += sec;
    if (out && *n_out < PASS_PLAN_MAX_COMM - 4)
      out[(*n_out)++] = (pass_plan_comm){q, IR_AXIS_TP, "gradients", sync[q], sync_n[q], sec, sec};
  }
  /* the trainer's sums, one value of 8 bytes each: the loss and the
   * correct predictions over dp and pp (and over tp where the step makes
   * them partial: pass_plan_profile.tp_sums), the Inf/NaN count of the new
   * parameters over tp, pp, and dp under ZeRO (docs/sharding.md) */
  int sums = plan_model_accuracy(x->m) ? 2 : 1;
  int n_sums[IR_NUM_AXES] = {[IR_AXIS_DP] = d > 1 ? sums + (s->zero >= 1) : 0, [IR_AXIS_TP] = t > 1 ? 1 + P->tp_sums : 0,
                             [IR_AXIS_PP] = p > 1 ? sums + 1 : 0};
  int ranks[IR_NUM_AXES] = {[IR_AXIS_DP] = d, [IR_AXIS_TP] = t, [IR_AXIS_PP] = p};
  int spans[IR_NUM_AXES] = {[IR_AXIS_DP] = nodes, [IR_AXIS_TP] = 1,
                            [IR_AXIS_PP] = p > 1 && pp_crosses(c, t, d, 0, p - 1) ? 2 : 1};
  static const ir_axis listed[IR_NUM_AXES] = {IR_AXIS_DP, IR_AXIS_TP, IR_AXIS_PP}; /* the order the plan lists them */
  for (int i = 0; i < IR_NUM_AXES; i++) {
    ir_axis a = listed[i];
    if (!n_sums[a]) continue;
    double sec = coll_seconds(kk, c, IR_COLL_ALL_REDUCE, ranks[a], 8.0 * n_sums[a], n_sums[a], spans[a]);
    exposed += sec;
    if (out && *n_out < PASS_PLAN_MAX_COMM)
      out[(*n_out)++] = (pass_plan_comm){IR_COLL_ALL_REDUCE, (pass_mesh_axis)a, "sums (loss, ...)", 8.0 * n_sums[a], n_sums[a], sec, sec};
  }
  return exposed;
}

/* The collectives of stage dev in one step (tensor axis by kind, the data
 * axis and tied weights by step_sync, the pipeline's send/recv), appended to
 * out: the figures a rank of that stage must move (test_plan_consistency). */
static void stage_comms(plan_ctx *x, const pass_plan_strategy *s, const stages *st, const pass_plan_profile *P,
                        const pass_pipe_result *sim, int m, int dev, double pp_exposed, pass_plan_comm *out,
                        int *n_out) {
  int p = s->pp, v = st->nv / s->pp, t = s->tp, nv = st->nv;
  for (int q = 0; q < 3 && t > 1; q++) {
    pass_plan_comm e = {q, IR_AXIS_TP, "activations", 0, 0, 0, 0};
    for (int ch = 0; ch < v; ch++) {
      int k = ch * p + dev;
      e.payload += m * st->kind_b[k][q], e.calls += m * st->kind_n[k][q], e.seconds += m * st->kind_s[k][q];
    }
    e.exposed = e.seconds;
    if (e.calls > 0) out[(*n_out)++] = e;
  }
  step_sync(x, s, st, P, sim, m, dev, out, n_out);
  if (p > 1) {
    pass_plan_comm e = {IR_COLL_SEND, IR_AXIS_PP, "activations, gradients", 0, 0, 0, pp_exposed};
    for (int ch = 0; ch < v; ch++) {
      int k = ch * p + dev;
      if (k > 0) e.payload += m * (st->send_bytes[k - 1] + st->back_bytes[k - 1]), e.calls += m * (st->send_n[k - 1] + st->back_n[k - 1]),
                 e.seconds += m * (st->send[k - 1] + st->send_back[k - 1]);
      if (k + 1 < nv) e.payload += m * (st->send_bytes[k] + st->back_bytes[k]), e.calls += m * (st->send_n[k] + st->back_n[k]),
                      e.seconds += m * (st->send[k] + st->send_back[k]);
    }
    out[(*n_out)++] = e;
  }
}

typedef enum { EV_SEARCH, EV_FULL } ev_mode;

struct last_eval {
  pass_plan_strategy key; /* zero: 0 (for 0 and 1), 2 or 3 */
  stages st;
  double *peak;           /* interleaved: bytes in flight per device */
  bool have_sim;
  pass_pipe_result sim;
};

static void last_free(plan_ctx *x) {
  if (!x->last) return;
  stages_free(&x->last->st);
  free(x->last->peak);
  pass_pipe_result_free(&x->last->sim);
  free(x->last);
  x->last = NULL;
}

static bool same_key(const pass_plan_strategy *a, const pass_plan_strategy *b) {
  return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->v == b->v && a->sp == b->sp &&
         a->zero == b->zero && a->micro_batch == b->micro_batch && a->schedule == b->schedule && a->ckpt == b->ckpt;
}

/* Evaluates s. EV_SEARCH: returns 1 (and r->fits false, the memory set)
 * when it is over memory, 2 when its lower bound is at least `bound`, else
 * 0 with r->step. EV_FULL: every field of r (and detail when given). */
static int evaluate(plan_ctx *x, const pass_plan_strategy *s_in, ev_mode mode, double bound,
                    pass_plan_result *r, pass_plan_detail *detail) {
  pass_plan_strategy s = *s_in;
  if (s.schedule != PASS_SCHED_INTERLEAVED) s.v = 1;
  if (s.dp == 1) s.zero = 0;
  memset(r, 0, sizeof *r);
  r->s = s;
  const pass_cluster *c = x->c;
  int m = x->j->global_batch / (s.dp * s.micro_batch), p = s.pp, d = s.dp, t = s.tp;
  r->m = m;
  const pass_plan_profile *P = pass_plan_model_profile(x->m, s.ckpt, s.micro_batch, t, s.sp);
  pass_plan_strategy key = s;
  key.zero = s.zero >= 2 ? s.zero : 0; /* ZeRO 2 and 3 change the operations' durations */
  if (!x->last || !same_key(&x->last->key, &key) || detail) {
    last_free(x);
    x->last = zalloc(1, sizeof *x->last);
    x->last->key = key;
    build_stages(x, &s, P, &x->last->st);
    if (s.schedule == PASS_SCHED_INTERLEAVED) { /* chunks of different sizes: the bytes in flight follow the order */
      const stages *q = &x->last->st;
      pass_pipe in = {s.schedule, p, q->nv / p, m, q->fwd, q->bwd, NULL, NULL, q->act};
      int *peak_mb = zalloc((size_t)p, sizeof *peak_mb);
      x->last->peak = zalloc((size_t)p, sizeof *x->last->peak);
      pass_pipe_in_flight(&in, x->last->peak, peak_mb);
      free(peak_mb);
    }
  }
  stages st = x->last->st;
  int nv = st.nv, v = nv / p;
  double *mem = zalloc((size_t)p * PASS_MEM_KINDS, sizeof *mem);
  r->capacity = c->device.memory - c->reserve;
  pass_pipe pipe = {s.schedule, p, v, m, st.fwd, st.bwd, st.send, st.send_back, st.act};
  pass_pipe_result sim = {0}, sim0 = {0};
  int fullest = stage_memory(x, &s, P, &st, m, x->last->peak, mem);
  r->fullest = fullest;
  for (int k = 0; k < PASS_MEM_KINDS; k++) r->mem[k] = mem[(size_t)fullest * PASS_MEM_KINDS + k], r->mem_total += r->mem[k];
  r->fits = r->mem_total <= r->capacity;
  int rc = 0;
  /* the optimizer of every stage, and the lower bound of the step */
  double *opt = zalloc((size_t)p, sizeof *opt), lower = 0;
  for (int dev = 0; dev < p; dev++) {
    double n = 0, busy = 0;
    for (int ch = 0; ch < v; ch++) n += st.params[ch * p + dev], busy += m * (st.fwd[ch * p + dev] + st.bwd[ch * p + dev]);
    opt[dev] = optimizer_seconds(x, s.zero >= 1 ? n / d : n);
    if (busy + opt[dev] > lower) lower = busy + opt[dev];
  }
  r->lower = lower;
  if (mode == EV_SEARCH && !r->fits) rc = 1;
  else if (mode == EV_SEARCH && lower >= bound) rc = 2;
  if (rc != 0) goto done;
  if (!x->last->have_sim) {
    if (pass_pipe_simulate(&pipe, &x->last->sim, detail != NULL) != 0) abort();
    x->last->have_sim = true;
  }
  sim = x->last->sim; /* borrowed: the cache keeps it */
  /* the step: every stage's pipeline end + exposed reduction + optimizer */
  double *dpx = zalloc((size_t)p, sizeof *dpx);
  r->step = -1;
  for (int dev = 0; dev < p; dev++) {
    dpx[dev] = step_sync(x, &s, &st, P, &sim, m, dev, NULL, NULL);
    double total = sim.end[dev] + dpx[dev] + opt[dev];
    if (total > r->step) r->step = total, r->critical = dev;
  }
  if (mode == EV_FULL) {
    int cd = r->critical;
    pass_pipe nosend = pipe;
    nosend.send = nosend.send_back = NULL;
    if (pass_pipe_simulate(&nosend, &sim0, false) != 0) abort();
    double ext = 0; /* ZeRO 2 and 3: what the operations waited for beyond their compute */
    for (int ch = 0; ch < v; ch++) {
      int k = ch * p + cd;
      r->rows[PASS_ROW_FORWARD] += m * st.f_comp[k];
      r->rows[PASS_ROW_BACKWARD] += m * st.b_comp[k];
      r->rows[PASS_ROW_RECOMPUTE] += m * st.rc_comp[k];
      for (int q = 0; q < 3; q++) r->rows[PASS_ROW_TP_ALL_REDUCE + q] += m * st.kind_s[k][q];
      double ef = st.fwd[k] - st.f_comp[k] - st.f_comm[k], eb = st.bwd[k] - st.b_comp[k] - st.rc_comp[k] - st.b_comm[k];
      ext += m * ((ef > 1e-12 * st.fwd[k] ? ef : 0) + (eb > 1e-12 * st.bwd[k] ? eb : 0));
    }
    r->rows[PASS_ROW_BUBBLE] = sim0.end[cd] - sim0.busy[cd];
    r->rows[PASS_ROW_PP_SEND_RECV] = sim.end[cd] - sim0.end[cd];
    r->rows[PASS_ROW_DP] = dpx[cd] + ext;
    r->rows[PASS_ROW_OPTIMIZER] = opt[cd];
    const pass_target *dev = plan_model_device(x->m);
    double peak = pass_target_peak(dev, pass_plan_model_elem_bytes(x->m));
    double tokens = (double)x->j->global_batch * x->j->seq;
    r->tokens_per_s = tokens / r->step;
    r->mfu = pass_mfu(pass_plan_model_params(x->m), tokens, r->step, peak * c->gpus);
    double work = 0;
    for (int k = 0; k < nv; k++) work += st.flops[k] * m;
    r->hw_flops = work * d * t / (r->step * c->gpus);
    /* the collectives of the critical stage, per step */
    stage_comms(x, &s, &st, P, &sim, m, cd, r->rows[PASS_ROW_PP_SEND_RECV], r->comm, &r->n_comm);
  }
  if (detail) {
    memset(detail, 0, sizeof *detail);
    detail->n_stages = p, detail->n_virtual = nv;
    detail->comm = zalloc((size_t)p * PASS_PLAN_MAX_COMM, sizeof *detail->comm);
    detail->n_comm = zalloc((size_t)p, sizeof *detail->n_comm);
    for (int dev = 0; dev < p; dev++)
      stage_comms(x, &s, &st, P, &sim, m, dev, sim.end[dev] - sim0.end[dev], detail->comm + (size_t)dev * PASS_PLAN_MAX_COMM,
                  &detail->n_comm[dev]);
#define TAKE(f) detail->f = x->last->st.f, x->last->st.f = NULL
    TAKE(first), TAKE(last), TAKE(fwd), TAKE(bwd), TAKE(send), TAKE(send_back), TAKE(send_bytes), TAKE(back_bytes), TAKE(act);
#undef TAKE
    detail->fwd_comm = zalloc((size_t)nv, sizeof(double));
    detail->bwd_comm = zalloc((size_t)nv, sizeof(double));
    memcpy(detail->fwd_comm, st.f_comm, sizeof(double) * (size_t)nv);
    memcpy(detail->bwd_comm, st.b_comm, sizeof(double) * (size_t)nv);
    detail->mem = mem, mem = NULL;
    detail->end = zalloc((size_t)p, sizeof(double));
    for (int dev = 0; dev < p; dev++) detail->end[dev] = sim.end[dev];
    detail->dp_exposed = dpx, dpx = NULL;
    detail->opt = opt, opt = NULL;
    detail->sim = x->last->sim;
    memset(&x->last->sim, 0, sizeof x->last->sim);
    last_free(x); /* its arrays were handed over */
  }
  free(dpx);
done:
  pass_pipe_result_free(&sim0);
  free(mem);
  free(opt);
  return rc;
}

void pass_plan_detail_free(pass_plan_detail *d) {
  if (!d) return;
  free(d->first), free(d->last), free(d->fwd), free(d->bwd), free(d->fwd_comm), free(d->bwd_comm), free(d->send), free(d->send_back);
  free(d->send_bytes), free(d->back_bytes), free(d->act);
  free(d->mem), free(d->end), free(d->dp_exposed), free(d->opt), free(d->comm), free(d->n_comm);
  pass_pipe_result_free(&d->sim);
  memset(d, 0, sizeof *d);
}

int pass_plan_evaluate(pass_plan_model *m, const pass_cluster *c, const pass_plan_job *j, const pass_plan_strategy *s,
                       pass_plan_result *r, pass_plan_detail *detail, char *why, size_t why_len) {
  plan_ctx x = {m, c, j, NULL, 0, 0, NULL};
  if (check_strategy(&x, s, why, why_len) != 0) return -1;
  evaluate(&x, s, EV_FULL, INFINITY, r, detail);
  ctx_free(&x);
  return 0;
}

/* ---- the search ---- */
/* The same family: all but the micro-batch size and the chunk count. */
static bool same_family(const pass_plan_strategy *a, const pass_plan_strategy *b) {
  return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->sp == b->sp && a->zero == b->zero &&
         a->schedule == b->schedule && a->ckpt == b->ckpt;
}

/* Keeps the best n of at most cap results, ordered by step, one per family
 * (a runner-up that differs from a better plan only in micro-batch size or
 * chunk count says nothing new). Plans as fast as a kept one (to 1e-9) are
 * one plan: the one needing less memory stays (ZeRO-1 and ZeRO-2 can tie;
 * selective recompute is no recompute with fused attention). */
static void keep_best(pass_plan_result *list, int *n, int cap, const pass_plan_result *r) {
  int i = 0;
  for (; i < *n; i++) {
    if (fabs(list[i].step - r->step) <= 1e-9 * r->step) {
      if (r->mem_total < list[i].mem_total) list[i] = *r;
      return;
    }
    if (same_family(&list[i].s, &r->s)) break;
  }
  if (i < *n) { /* its family is kept: replace it if this one is faster, then move it up */
    if (list[i].step <= r->step) return;
    list[i] = *r;
  } else {
    if (*n == cap && list[cap - 1].step <= r->step) return;
    i = *n < cap ? (*n)++ : cap - 1;
    list[i] = *r;
  }
  for (; i > 0 && list[i - 1].step > list[i].step; i--) {
    pass_plan_result tmp = list[i - 1];
    list[i - 1] = list[i], list[i] = tmp;
  }
}

static double kth_best(const pass_plan_result *list, int n, int cap) { return n < cap ? INFINITY : list[n - 1].step; }

static int divisors(int n, int *out, int cap) {
  int k = 0;
  for (int i = 1; i <= n && k < cap; i++)
    if (n % i == 0) out[k++] = i;
  return k;
}

enum { MAX_MICRO_BATCH = 64, MAX_CHUNKS = 16 };

int pass_plan_search(pass_plan_model *m, const pass_cluster *c, const pass_plan_job *j, const pass_plan_query *q,
                     pass_plan_found *f, ir_diag *d) {
  memset(f, 0, sizeof *f);
  double t0 = ir_clock_s(), c0 = ir_cpu_clock_s();
  plan_ctx x = {m, c, j, NULL, 0, 0, NULL};
  int N = c->gpus, L = pass_plan_model_layers(m), G = j->global_batch, top = q->top > 0 ? q->top : 1;
  f->plans = zalloc((size_t)top, sizeof *f->plans);
  f->unfit = zalloc((size_t)top, sizeof *f->unfit);
  char why[512];
  if (q->dp >= 0) { /* a given mesh: say exactly what is wrong with it */
    pass_plan_strategy s = {q->dp, q->tp, q->pp, 2, q->sp > 0, 0, 1, PASS_SCHED_1F1B, PASS_PLAN_CK_NONE};
    for (int ck = 0; ck < PASS_PLAN_CK_COUNT; ck++)
      if (pass_plan_model_has(m, ck)) s.ckpt = ck;
    s.micro_batch = q->micro_batch > 0 ? q->micro_batch : 1;
    s.schedule = q->schedule >= 0 ? q->schedule : PASS_SCHED_1F1B;
    s.v = q->v > 0 ? q->v : 2;
    s.sp = s.tp > 1 && q->sp != 0;
    if (check_strategy(&x, &s, why, sizeof why) != 0 && (q->schedule >= 0 || !strstr(why, "interleaved"))) {
      ir_error_plain(d, "--mesh dp=%d,tp=%d,pp=%d: %s", q->dp, q->tp, q->pp, why);
      ctx_free(&x);
      return -1;
    }
  }
  int tps[64], n_tp = divisors(c->gpus_per_node, tps, 64);
  bool any_dp = false;
  long batch_misses = 0;
  for (int it = 0; it < n_tp; it++) {
    int tp = tps[it];
    if (N % tp != 0 || (q->tp >= 0 && tp != q->tp)) continue;
    int64_t size;
    const ir_value *v;
    int dim;
    bool heads;
    if (tp > 1 && pass_plan_model_tp_check(m, tp, &size, &v, &dim, &heads) == 0) continue;
    int pps[256], n_pp = divisors(N / tp, pps, 256);
    for (int ip = 0; ip < n_pp; ip++) {
      int pp = pps[ip], dp = N / (tp * pp);
      if (pp > L || (q->pp >= 0 && pp != q->pp)) continue;
      if (G % dp != 0) {
        batch_misses++;
        continue;
      }
      any_dp = true;
      int bs[256], n_b = divisors(G / dp, bs, 256);
      for (int sp = tp > 1 ? 1 : 0; sp >= 0; sp--) {
        if (q->sp >= 0 && sp != (tp > 1 && q->sp)) continue;
        for (int ck = 0; ck < PASS_PLAN_CK_COUNT; ck++) {
          if (!pass_plan_model_has(m, ck) || (q->ckpt >= 0 && ck != q->ckpt)) continue;
          if (q->ckpt < 0 && ck != PASS_PLAN_CK_NONE && pass_plan_model_has(m, PASS_PLAN_CK_NONE) &&
              !pass_plan_model_recomputes(m, ck))
            continue; /* the same graph as no recompute */
          for (int ib = 0; ib < n_b; ib++) {
            int b = bs[ib], mb = G / (dp * b);
            if (q->micro_batch > 0 ? b != q->micro_batch : b > MAX_MICRO_BATCH) continue;
            for (int sc = 0; sc < PASS_SCHED_COUNT; sc++) {
              if (q->schedule >= 0 && sc != q->schedule) continue;
              if (pp == 1 && sc != PASS_SCHED_1F1B && q->schedule < 0) continue; /* one stage: all schedules agree */
              for (int v = sc == PASS_SCHED_INTERLEAVED ? 2 : 1; v <= (sc == PASS_SCHED_INTERLEAVED ? MAX_CHUNKS : 1); v++) {
                if (q->v > 0 && sc == PASS_SCHED_INTERLEAVED && v != q->v) continue;
                if (sc == PASS_SCHED_INTERLEAVED && (pp * v > L || mb % pp != 0)) continue;
                for (int z = 0; z <= (dp > 1 ? 3 : 0); z++) {
                  if (q->zero >= 0 && z != q->zero && dp > 1) continue;
                  pass_plan_strategy s = {dp, tp, pp, v, sp != 0, z, b, (pass_schedule)sc, (pass_plan_ckpt)ck};
                  pass_plan_result r;
                  f->considered++;
                  int rc = evaluate(&x, &s, EV_SEARCH, kth_best(f->plans, f->n_plans, top), &r, NULL);
                  if (rc == 1) {
                    f->over_memory++;
                    if (!f->have_smallest || r.mem_total - r.capacity < f->smallest.mem_total - f->smallest.capacity)
                      f->smallest = r, f->have_smallest = true;
                    if (top > 1 && r.mem_total < 1.5 * r.capacity &&
                        r.lower < (f->n_plans ? f->plans[0].step : INFINITY)) { /* would it have won? */
                      pass_plan_result full;
                      evaluate(&x, &s, EV_FULL, INFINITY, &full, NULL);
                      f->simulated++;
                      if (full.step < (f->n_plans ? f->plans[0].step : INFINITY)) keep_best(f->unfit, &f->n_unfit, top, &full);
                    }
                    continue;
                  }
                  if (rc == 2) {
                    f->pruned++;
                    continue;
                  }
                  f->simulated++;
                  keep_best(f->plans, &f->n_plans, top, &r);
                }
              }
            }
          }
        }
      }
    }
  }
  if (!any_dp && batch_misses > 0) {
    /* the degrees N / (tp * pp) the cluster allows */
    char list[512] = "";
    int dps[256], n_dps = divisors(N, dps, 256), shown = 0;
    for (int i = 0; i < n_dps; i++) {
      bool ok = false;
      for (int it = 0; it < n_tp && !ok; it++) {
        int tp = tps[it];
        if (q->tp >= 0 && tp != q->tp) continue;
        if ((long)dps[i] * tp > N || N % (dps[i] * tp) != 0) continue;
        int pp = N / (dps[i] * tp);
        ok = pp <= L && (q->pp < 0 || pp == q->pp);
      }
      if (!ok) continue;
      size_t len = strlen(list);
      if (len < sizeof list - 16) snprintf(list + len, sizeof list - len, "%s%d", shown++ ? ", " : "", dps[i]);
    }
    ir_error_plain(d, "--global-batch %d is not divisible by any data-parallel degree of %d %s GPUs "
                      "(dp = %d / (tp x pp), tp <= %d, pp <= %d layers: %s)",
                   G, N, c->name, N, c->gpus_per_node, L, list);
    ctx_free(&x);
    return -1;
  }
  /* the kept plans in full (rows, collectives) */
  for (int i = 0; i < f->n_plans; i++) evaluate(&x, &f->plans[i].s, EV_FULL, INFINITY, &f->plans[i], NULL);
  for (int i = 0; i < f->n_unfit; i++)
    if (f->n_plans && f->unfit[i].step >= f->plans[0].step) f->n_unfit = i;
  ctx_free(&x);
  f->seconds = ir_clock_s() - t0;
  f->cpu_seconds = ir_cpu_clock_s() - c0;
  return f->n_plans > 0 ? 0 : 1;
}

void pass_plan_found_free(pass_plan_found *f) {
  free(f->plans);
  free(f->unfit);
  memset(f, 0, sizeof *f);
}
