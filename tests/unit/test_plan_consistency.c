/* tests/unit/test_plan_consistency.c — the planner agrees with the sharded
 * runtime (issue 11, "Consistency"). For small models (examples/gpt.tg and
 * examples/llama.tg, config tiny, fp32, Adam) and meshes (dp=2, tp=2,
 * tp=2 sp, dp=2 x tp=2 (sp), pp=2, dp=2 x pp=2; ZeRO 0-3; 1 and 2
 * micro-batches: with one, no pipeline, the step's gradient buckets)
 * it builds both sides:
 *  - the shard pass's per-rank training program (pass_build_train with the
 *    mesh, as `tgc train --mesh` does; one program per pipeline stage), and
 *    what one rank moves per step: pass_comm_tally_of over step (or fwd and
 *    bwd) x micro-batches + update, the figure every rank of a real run
 *    checks its counters against (rt_trainer_comm_predicted);
 *  - the planner's evaluation of the same plan (pass_plan_evaluate on a
 *    cpu-host cluster of as many devices), per stage (detail.comm).
 * and checks, all exactly:
 *  - the runtime's tally equals the sum over the program's communication
 *    nodes of their buffers by the ring formulas (so the walk below, which
 *    sorts them by what they move, is the runtime's figure);
 *  - every collective kind on every mesh axis, the whole step: calls and
 *    bytes equal the planner's (detail.comm): Megatron-LM's tensor
 *    collectives with the vocabulary-parallel loss and the trainer's
 *    accuracy, data-parallel reductions one call per tensor (ZeRO: reduce-
 *    scatters and gathers; a 1-D tensor tp splits, whole over dp, all-
 *    reduced), the trainer's sums (loss, correct predictions, Inf/NaN
 *    count), the pipeline's sends and receives (one per value) and the tied
 *    embedding's exchange;
 *  - tensor axis, layers 1..L: calls and bytes of every layer equal the
 *    planner's profile of that group (2 all-reduces forward and 2 backward;
 *    with sp 2 all-gathers + 2 reduce-scatters forward, 4 + 2 backward);
 *  - pipeline axis, per stage and direction: the activations sent and
 *    received by the fwd graph and the gradients by the bwd graph equal the
 *    planner's per-boundary bytes (detail.send_bytes, back_bytes) x K;
 *  - memory per rank, parameter by parameter (check_memory), and the
 *    activations kept per micro-batch (check_activations): without a
 *    pipeline, the rank's memory plan's; with one, what the rank's fwd
 *    graph hands its bwd graph per micro-batch in flight (values made from
 *    parameters and constants alone, and layouts of values bwd reads
 *    anyway, are made again by bwd; the loss and count are summed once a
 *    step).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "plan.h"
#include "testtrain.h"

typedef struct {
  const char *path, *mesh;
  int zero, K;
  pass_schedule sched;
  bool collectives_only; /* a random graph: no memory checks (docs/plan.md, "Consistency") */
  bool search;           /* --tp-layout search: the runtime's and the planner's searches choose the layouts */
} kase;

typedef struct {
  int dp, tp, pp;
  bool sp;
} mesh_of;

static mesh_of parse(const char *mesh) {
  ir_mesh m;
  char err[256];
  CHECK_EQ_INT(ir_mesh_parse(mesh, &m, err, sizeof err), 0);
  mesh_of r = {(int)m.size[IR_AXIS_DP], (int)m.size[IR_AXIS_TP], (int)m.size[IR_AXIS_PP], m.sp};
  return r;
}

/* ---- the shard pass's side ---- */

/* The training program of path (config tiny, fp32, Adam) on mesh for
 * pipeline stage `stage` (-1: no pipeline). */
static pass_training *shard(const kase *k, int stage, const pass_tp_layouts *lay) {
  sharded_setup c = {.path = k->path, .config = "tiny", .mesh = k->mesh, .stage = stage, .zero = k->zero,
                     .micro = k->K, .schedule = k->sched, .opt = PASS_OPT_ADAM,
                     .tp_search = k->search, .tp_layouts = lay};
  pass_training *t = sharded_program(&c);
  CHECK(t != NULL);
  return t;
}

/* a layer's (step); the embedding's or the head's (step); the update's
 * (gradients, parameters); a scalar sum (loss, correct predictions, Inf/NaN
 * counts) */
enum { C_LAYER, C_OUTSIDE, C_UPDATE, C_SCALAR, C_KINDS };
static const char *const class_name[C_KINDS] = {"layers", "embedding and head", "update", "scalars"};

/* What one rank's program moves: per op, axis and class, calls and buffer
 * bytes (all_reduce and reduce_scatter: the operand; all_gather and recv:
 * the result; send: the operand), per micro-batch step graphs scaled by K;
 * per_layer[layer][op]: the tp collectives of each layer in one micro-batch. */
typedef struct {
  double calls[IR_NUM_OPS][IR_NUM_AXES][C_KINDS], bytes[IR_NUM_OPS][IR_NUM_AXES][C_KINDS];
  double layer_calls[8][IR_NUM_OPS], layer_bytes[8][IR_NUM_OPS];
  double pp_send[2], pp_recv[2]; /* pipeline: bytes sent and received by fwd [0] and bwd [1] per step */
  double sent[IR_NUM_OPS][IR_NUM_AXES]; /* bytes one rank sends, by the ring formulas call by call (ring_sent) */
} walk;

static double ring_sent(ir_op op, int n, double buffer);

static void walk_graph(const ir_graph *g, double times, bool step, int part, walk *w) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || !ir_op_has(n->op, IR_OPF_COMM)) continue;
    int ax = ir_node_mesh_axis(n);
    CHECK(ax >= 0);
    if (ax < 0) continue;
    const ir_type *buf = n->op == IR_OP_ALL_GATHER || n->op == IR_OP_RECV ? &n->out[0]->type : &n->in[0]->type;
    double bytes = (double)ir_type_numel(buf) * (double)ir_dtype_size(buf->dtype);
    int c = ir_type_numel(buf) == 1 ? C_SCALAR : !step ? C_UPDATE : n->layer >= 0 ? C_LAYER : C_OUTSIDE;
    w->calls[n->op][ax][c] += times, w->bytes[n->op][ax][c] += times * bytes;
    w->sent[n->op][ax] += times * ring_sent(n->op, g->mesh.size[ax], bytes);
    if (step && ax == IR_AXIS_PP && n->op == IR_OP_SEND) w->pp_send[part] += times * bytes;
    if (step && ax == IR_AXIS_PP && n->op == IR_OP_RECV) w->pp_recv[part] += times * bytes;
    if (step && ax == IR_AXIS_TP && n->layer >= 0 && n->layer < 8)
      w->layer_calls[n->layer][n->op]++, w->layer_bytes[n->layer][n->op] += bytes;
  }
}

static void walk_program(const pass_training *t, int K, walk *w) {
  memset(w, 0, sizeof *w);
  if (t->fwd) walk_graph(t->fwd, K, true, 0, w), walk_graph(t->bwd, K, true, 1, w);
  else walk_graph(t->step, K, true, 0, w);
  walk_graph(t->update, 1, false, 0, w);
}

/* rt_trainer_comm_predicted's figure for the rank at coord. */
static void tally_program(const pass_training *t, int K, const int *coord, pass_comm_tally out[IR_NUM_OPS][IR_NUM_AXES]) {
  const ir_graph *gs[3] = {t->fwd ? t->fwd : t->step, t->bwd, t->update};
  memset(out, 0, sizeof(pass_comm_tally) * IR_NUM_OPS * IR_NUM_AXES);
  for (int k = 0; k < 3; k++) {
    if (!gs[k]) continue;
    pass_comm_tally one[IR_NUM_OPS][IR_NUM_AXES];
    pass_comm_tally_of(gs[k], coord, one);
    int64_t times = k < 2 ? K : 1;
    for (int o = 0; o < IR_NUM_OPS; o++)
      for (int a = 0; a < IR_NUM_AXES; a++)
        out[o][a].calls += times * one[o][a].calls, out[o][a].sent += times * one[o][a].sent,
            out[o][a].received += times * one[o][a].received;
  }
}

/* The ring formulas (pass_comm_bytes) from buffer bytes: what one rank sends. */
static double ring_sent(ir_op op, int n, double buffer) {
  if (op == IR_OP_ALL_GATHER) return pass_comm_bytes(op, n, buffer / n); /* its operand is a part */
  if (op == IR_OP_RECV) return 0;
  return pass_comm_bytes(op, n, buffer);
}

/* ---- the planner's side ---- */

static ir_graph *train_graph(const char *path, int B, int max_layers, ir_diag *d, char **text) {
  size_t len;
  *text = ir_read_file(path, 1 << 20, &len, d);
  if (!*text) return NULL;
  char bs[16];
  snprintf(bs, sizeof bs, "%d", B);
  fe_define defs[1] = {{"B", bs}};
  fe_options fo = {.config = "tiny", .defines = defs, .n_defines = 1, .max_layers = max_layers};
  ir_graph *g = fe_compile(path, *text, len, &fo, d);
  bool off[PASS_COUNT] = {[PASS_FUSE_ELEMENTWISE] = true, [PASS_FUSE_TRANSPOSE] = true, [PASS_FUSE_LM_HEAD] = true}; /* as tgc plan compiles (cmd_plan.c) */
  pass_options po = {.diag = d, .disabled = off};
  pass_train_graph_options to = {.passes = &po, .dtype = IR_DT_F32};
  pass_train_graph_info info;
  if (!g || pass_build_training_graph(g, &to, &info) != 0) {
    ir_graph_free(g);
    return NULL;
  }
  pass_train_graph_info_free(&info);
  return g;
}

/* The planner's model of path at micro-batch b0 and 2 b0: b0 = 2, else 3,
 * else 5, as tgc plan does (at b0 = 2 the tiny configs' B T equals D and
 * the passes build another graph). */
static pass_plan_model *planner(const char *path, const pass_cluster *c, bool search) {
  pass_plan_model *m = pass_plan_model_new(&c->device);
  pass_plan_model_set_tp_search(m, search);
  static const int b0s[] = {2, 3, 5};
  int rc = -1;
  double flops = 0;
  for (int i = 0; i < 3 && rc != 0; i++) {
    FILE *sink = tmpfile();
    ir_diag *d = ir_diag_new(sink);
    char *t2 = NULL, *t4 = NULL;
    ir_graph *g2 = train_graph(path, b0s[i], 0, d, &t2), *g4 = train_graph(path, 2 * b0s[i], 0, d, &t4);
    if (g2) CHECK_EQ_INT(pass_update_flops(g2, PASS_OPT_ADAM, &flops, d), 0);
    rc = g2 && g4 ? pass_plan_model_add(m, PASS_PLAN_CK_NONE, b0s[i], g2, g4, d) : -1; /* takes g2 and g4 */
    if (!g4) ir_graph_free(g2);
    if (!g2) ir_graph_free(g4); /* else the model took both */
    free(t2), free(t4);
    ir_diag_free(d);
    fclose(sink);
  }
  CHECK_EQ_INT(rc, 0);
  pass_plan_model_set_optimizer(m, flops / pass_plan_model_params(m), 2);
  if (search) { /* the graph tgc plan and tgc train search (tool_tp_search_graph): B = 2, at most 3 layers */
    ir_diag *d = ir_diag_new(stderr);
    char *ts = NULL, *tf = NULL;
    ir_graph *sg = train_graph(path, 2, 3, d, &ts), *full = train_graph(path, 2, 0, d, &tf);
    CHECK(sg != NULL && full != NULL);
    int layers = 0;
    for (int i = 0; full && i < full->n_nodes; i++)
      if (full->nodes[i]->layer + 1 > layers) layers = full->nodes[i]->layer + 1;
    pass_plan_model_set_search_graph(m, sg, layers);
    ir_graph_free(full);
    free(ts), free(tf);
    ir_diag_free(d);
  }
  return m;
}

/* The planner's payload and calls of one stage for kind and axis. */
static double plan_bytes(const pass_plan_detail *det, int stage, int kind, int axis, double *calls) {
  const pass_plan_comm *pc = det->comm + (size_t)stage * PASS_PLAN_MAX_COMM;
  double b = 0;
  *calls = 0;
  for (int i = 0; i < det->n_comm[stage]; i++)
    if ((int)pc[i].kind == kind && (int)pc[i].axis == axis) b += pc[i].payload, *calls += pc[i].calls;
  return b;
}

static double shard_bytes(const walk *w, ir_op op, ir_axis a, int c0, int c1) {
  double b = 0;
  for (int c = c0; c <= c1; c++) b += w->bytes[op][a][c];
  return b;
}

static double local_bytes(const ir_value *v) { return (double)ir_type_numel(&v->type) * (double)ir_dtype_size(v->type.dtype); }

/* The activations one micro-batch leaves for the backward on the rank: the
 * planner's kept bytes of the stage (detail.act) against the memory plan of
 * the rank's step graph (pass_memplan_analyze: the act bytes live when its
 * first backward node runs, in the arena the trainer allocates): equal,
 * the trainer's loss (f32) and correct-prediction count (f64) and, on tp,
 * the vocabulary-parallel loss's per-token max and sum of exponentials
 * included. With pp, what the rank's fwd graph hands its bwd graph per
 * micro-batch is printed too: the same but for the loss and the count
 * (fwd's outputs, not handed) and for the transposes the fused step folds
 * into the matmuls reading them, which cross the split as copies
 * (docs/plan.md section 6). */
/* v depends on the micro-batch: on a data input or a value received from
 * another stage (memo: 0 unknown, 1 no, 2 yes) */
static bool per_micro_batch(const ir_value *v, char *memo) {
  if (memo[v->id]) return memo[v->id] == 2;
  bool yes = v->role == IR_ROLE_INPUT || (v->def && v->def->op == IR_OP_RECV);
  for (int k = 0; v->def && k < v->def->n_in && !yes; k++) yes = per_micro_batch(v->def->in[k], memo);
  memo[v->id] = yes ? 2 : 1;
  return yes;
}

static void check_activations(const pass_plan_detail *det, int stage, const pass_training *t) {
  double handed = 0;
  if (t->fwd) {
    char *memo = calloc((size_t)ir_graph_id_bound(t->fwd) + 1, 1);
    CHECK(memo != NULL);
    for (int i = 0; memo && i < t->n_saved; i++) {
      const ir_value *v = t->fwd->outputs[t->fwd_saved0 + i].value;
      handed += local_bytes(v);
      if (!per_micro_batch(v, memo)) printf("  %%%s is handed per micro-batch but made of parameters and constants\n", v->name);
      CHECK(per_micro_batch(v, memo));
    }
    free(memo);
  }
  pass_mem_report r;
  CHECK_EQ_INT(pass_memplan_analyze(t->step, &r), 0);
  printf("  activations per micro-batch: plan %.0f B, memory plan %zu B; fwd hands bwd %.0f B; arena %zu B\n", det->act[stage],
         r.saved_bytes, handed, r.arena_bytes);
  if (t->fwd) { /* what the trainer keeps per micro-batch in flight */
    CHECK(handed == det->act[stage]);
    CHECK((double)r.saved_bytes >= handed); /* the step's plan keeps as well what bwd makes again, and the loss */
  } else {
    CHECK((double)r.saved_bytes == det->act[stage]);
  }
  CHECK(r.arena_bytes >= r.saved_bytes);
}

/* Memory per rank, parameter by parameter: the planner's elements on the
 * stage's devices (pass_plan_param_in) against the local types of the shard
 * pass's step (parameters), update inputs (the gradients handed over, then
 * the optimizer state: Adam's 2 values per parameter). fp32 throughout.
 * Equal, each (a parameter ZeRO cannot split, a 1-D tensor tp splits: the
 * column biases, is whole over dp on both sides), and their sums are the
 * planner's memory rows. Then the activations: the planner's kept bytes per
 * micro-batch of the stage (detail.act) against what the rank's program
 * keeps for the backward (see check_activations). */
static void check_memory(const kase *k, const mesh_of *ms, pass_plan_model *m, const pass_plan_strategy *s,
                         const pass_plan_detail *det, int stage, const pass_training *t) {
  const ir_graph *pg = pass_plan_model_graph(m, PASS_PLAN_CK_NONE);
  int lo = det->first[stage], hi = det->last[stage], dp = ms->dp, z = k->zero;
  double params = 0, grads = 0, states = 0;
  int held = 0;
  for (int i = 0; i < pg->n_params; i++) {
    bool whole;
    double gelems;
    double elems = pass_plan_param_in(m, PASS_PLAN_CK_NONE, i, ms->tp, ms->sp, lo, hi, &whole, &gelems);
    if (elems == 0) continue;
    held++;
    const char *name = pg->params[i]->name;
    int j = 0;
    while (j < t->n_params && strcmp(t->step->params[j]->name, name) != 0) j++;
    CHECK(j < t->n_params);
    if (j == t->n_params) {
      printf("  %s: held by the planner's stage %d, not by the shard pass's\n", name, stage);
      continue;
    }
    int zd = whole ? 1 : dp;
    /* ZeRO 2; ZeRO 1 when the step's buckets reduce-scatter (one micro-batch, no pipeline): handed over split */
    bool split_grads = z >= 2 || (z == 1 && k->K == 1 && ms->pp == 1 && dp > 1);
    double pp = elems * 4 / (z >= 3 ? zd : 1), pgr = gelems * 4 / (split_grads ? zd : 1), pst = 2 * elems * 4 / (z >= 1 ? zd : 1);
    double sp_ = local_bytes(t->step->params[j]), sgr = local_bytes(t->update->inputs[j]);
    double sst = local_bytes(t->update->inputs[t->n_params + 2 * j]) + local_bytes(t->update->inputs[t->n_params + 2 * j + 1]);
    params += sp_, grads += sgr, states += sst;
    if (pp != sp_ || pgr != sgr || pst != sst)
      printf("  %s: planner %.0f / %.0f / %.0f B, shard pass %.0f / %.0f / %.0f B (parameter / gradient / optimizer state)\n",
             name, pp, pgr, pst, sp_, sgr, sst);
    CHECK(pp == sp_ && pgr == sgr && pst == sst);
  }
  CHECK_EQ_INT(held, t->n_params); /* the same parameters on the stage */
  const double *M = det->mem + (size_t)stage * PASS_MEM_KINDS;
  CHECK(M[PASS_MEM_PARAMS] == params && M[PASS_MEM_GRADS] == grads && M[PASS_MEM_OPTIMIZER] == states);
  printf("  memory: parameters plan %.0f shard %.0f, gradients %.0f %.0f, optimizer %.0f %.0f\n", M[PASS_MEM_PARAMS], params,
         M[PASS_MEM_GRADS], grads, M[PASS_MEM_OPTIMIZER], states);
  check_activations(det, stage, t);
}

/* Both sides' figures of one stage, printed and asserted equal. */
static void compare(const kase *k, const mesh_of *ms, pass_plan_model *m, const pass_plan_strategy *s,
                    const pass_plan_detail *det, int stage, const pass_training *t, const walk *w) {
  bool gpt = strstr(k->path, "gpt") != NULL;
  /* tensor axis, layer by layer: the planner's groups 1..L per micro-batch */
  if (ms->tp > 1) {
    const pass_plan_profile *P = pass_plan_model_profile(m, PASS_PLAN_CK_NONE, s->micro_batch, ms->tp, ms->sp);
    int L = P ? P->n_groups - 2 : 0;
    for (int l = 0; P && l < L && l < 8; l++) {
      if (ms->pp > 1 && l * ms->pp / L != stage) continue; /* another stage's layer (the even split) */
      const pass_plan_group *G = &P->groups[l + 1];
      for (int q = 0; q < 3; q++) {
        double pc = 0, pb = 0;
        for (int ph = 0; ph < PASS_NUM_PHASES; ph++) pc += G->coll_count[ph][q], pb += G->coll_bytes[ph][q];
        double sc = w->layer_calls[l][ir_coll_op((ir_coll)q)], sb = w->layer_bytes[l][ir_coll_op((ir_coll)q)];
        if (pc != sc || pb != sb)
          printf("  layer %d %s on tp: plan %.0f calls %.0f B, shard %.0f calls %.0f B\n", l, pass_coll_name((pass_coll_kind)q), pc,
                 pb, sc, sb);
        /* Megatron-LM's block on both sides: 2 all-reduces forward and 2
         * backward; with sp 2 all-gathers + 2 reduce-scatters forward, 4 + 2
         * backward (llama: the q, k, v projections' and the SwiGLU's input
         * gradients added before the one reduction) */
        CHECK(pc == sc && pb == sb);
      }
    }
  }
  /* every kind on every axis, the whole step: calls and bytes (send/recv:
   * both directions) */
  for (int q = 0; q < IR_NUM_COLLS; q++)
    for (int a = 0; a < IR_NUM_AXES; a++) {
      if (q == IR_COLL_RECV) continue; /* the planner's send/recv is IR_COLL_SEND */
      double pc, pb = plan_bytes(det, stage, q, a, &pc), sc = 0, sb = 0;
      for (int c = 0; c < C_KINDS; c++) {
        ir_axis x = (ir_axis)a;
        if (q == IR_COLL_SEND)
          sc += w->calls[IR_OP_SEND][x][c] + w->calls[IR_OP_RECV][x][c], sb += w->bytes[IR_OP_SEND][x][c] + w->bytes[IR_OP_RECV][x][c];
        else
          sc += w->calls[ir_coll_op((ir_coll)q)][x][c], sb += w->bytes[ir_coll_op((ir_coll)q)][x][c];
      }
      if (pc == 0 && sc == 0) continue;
      printf("  %s on %s: plan %.0f calls %.0f B, shard %.0f calls %.0f B%s\n", pass_coll_name((pass_coll_kind)q),
             pass_axis_name((pass_mesh_axis)a), pc, pb, sc, sb, pc == sc && pb == sb ? "" : "  <- differs");
      CHECK(pc == sc && pb == sb);
    }
  /* pipeline axis: what crosses each boundary, by direction (one micro-batch
   * per boundary in the planner: detail.send_bytes / back_bytes) */
  if (ms->pp > 1) {
    int p = ms->pp;
    double K = k->K;
    double fwd_send = stage + 1 < p ? K * det->send_bytes[stage] : 0, fwd_recv = stage > 0 ? K * det->send_bytes[stage - 1] : 0;
    double bwd_send = stage > 0 ? K * det->back_bytes[stage - 1] : 0, bwd_recv = stage + 1 < p ? K * det->back_bytes[stage] : 0;
    printf("  stage %d on pp: activations sent plan %.0f shard %.0f, received %.0f %.0f; gradients sent %.0f %.0f, "
           "received %.0f %.0f\n", stage, fwd_send, w->pp_send[0], fwd_recv, w->pp_recv[0], bwd_send, w->pp_send[1], bwd_recv,
           w->pp_recv[1]);
    CHECK(fwd_send == w->pp_send[0] && fwd_recv == w->pp_recv[0] && bwd_send == w->pp_send[1] && bwd_recv == w->pp_recv[1]);
    /* a cut carries the residual stream: one [b, T, D] fp32 value each way
     * (llama's rotary cos and sin tables, made from constants, are made by
     * each stage, not sent) */
    double resid = (double)s->micro_batch * 16 * 32 * 4;
    CHECK(det->send_bytes[0] == resid && det->back_bytes[0] == resid);
    /* the tied embedding's gradient: the two stages exchange their parts
     * (Megatron-LM's embedding group; on 2 ranks an all-reduce moves the
     * same): a send and a receive each, in the update, of the replica's
     * block under ZeRO 2 and 3 */
    double tied = 0, tc = 0;
    const pass_plan_comm *pc = det->comm + (size_t)stage * PASS_PLAN_MAX_COMM;
    for (int i = 0; i < det->n_comm[stage]; i++)
      if (strcmp(pc[i].what, "tied weights' gradients") == 0) tied += pc[i].payload, tc += pc[i].calls;
    double ts = shard_bytes(w, IR_OP_SEND, IR_AXIS_PP, C_UPDATE, C_UPDATE), tr = shard_bytes(w, IR_OP_RECV, IR_AXIS_PP, C_UPDATE, C_UPDATE);
    printf("  stage %d tied gradient on pp: plan %.0f B, shard sends %.0f B and receives %.0f B\n", stage, tied, ts, tr);
    double part = gpt ? 64.0 * 32 * 4 / (k->zero >= 2 ? ms->dp : 1) / ms->tp : 0; /* the table: V / tp rows */
    CHECK(tied == ts + tr && ts == part && tr == part && tc == (gpt ? 2 : 0));
  }
  if (!k->collectives_only) check_memory(k, ms, m, s, det, stage, t);
}

/* Runs case k; returns the bytes one rank sends per step on tp (every stage's sum) and the planner's step
 * time in *step. */
static double run_case_step(const kase *k, double *step) {
  double tp_sent = 0;
  mesh_of ms = parse(k->mesh);
  int ranks = ms.dp * ms.tp * ms.pp;
  pass_cluster c;
  char nb[16];
  snprintf(nb, sizeof nb, "%d", ranks);
  ir_diag *d = ir_diag_new(stderr);
  CHECK_EQ_INT(pass_cluster_from_spec("cpu-host", &c, d), 0);
  CHECK_EQ_INT(pass_cluster_set_gpus(&c, nb, d), 0);
  ir_diag_free(d);
  pass_plan_model *m = planner(k->path, &c, k->search);
  pass_plan_strategy s = {ms.dp, ms.tp, ms.pp, 1, ms.sp, k->zero, 4 / ms.dp, k->sched, PASS_PLAN_CK_NONE};
  pass_plan_job job = {4 * k->K, 16};
  pass_plan_result r;
  pass_plan_detail det;
  char why[256] = "";
  int rc = pass_plan_evaluate(m, &c, &job, &s, &r, &det, why, sizeof why);
  if (rc != 0) printf("  planner refuses: %s\n", why);
  CHECK_EQ_INT(rc, 0);
  if (step) *step = rc == 0 ? r.step : 0;
  printf("%s --mesh %s --zero %d --micro-batches %d%s%s%s\n", k->path, k->mesh, k->zero, k->K,
         ms.pp > 1 ? " --schedule " : "", ms.pp > 1 ? pass_schedule_name(k->sched) : "",
         k->search ? " --tp-layout search" : "");
  for (int stage = 0; rc == 0 && stage < ms.pp; stage++) {
    /* --tp-layout search: the layouts the planner's search chose, as tgc train takes them (tool_tp_layouts) */
    const pass_tp_layouts *lay = k->search && ms.tp > 1 ? pass_plan_model_tp_layouts(m, ms.tp, ms.sp) : NULL;
    CHECK(!k->search || ms.tp == 1 || lay != NULL);
    pass_training *t = shard(k, ms.pp > 1 ? stage : -1, lay);
    if (!t) continue;
    walk w;
    walk_program(t, k->K, &w);
    int coord[IR_NUM_AXES] = {0};
    coord[IR_AXIS_PP] = ms.pp > 1 ? stage : 0;
    pass_comm_tally tal[IR_NUM_OPS][IR_NUM_AXES];
    tally_program(t, k->K, coord, tal);
    /* the walk is the runtime's prediction */
    for (int o = 0; o < IR_NUM_OPS; o++)
      for (int a = 0; a < IR_NUM_AXES; a++) {
        if (!ir_op_has((ir_op)o, IR_OPF_COMM)) continue;
        double calls = 0, sent = w.sent[o][a];
        for (int cl = 0; cl < C_KINDS; cl++) calls += w.calls[o][a][cl];
        if (calls != (double)tal[o][a].calls || sent != (double)tal[o][a].sent)
          printf("  %s on %s: the program's nodes %.0f calls %.0f B sent, the runtime's tally %.0f calls %.0f B\n",
                 ir_op_name((ir_op)o), ir_axis_name((ir_axis)a), calls, sent, (double)tal[o][a].calls, (double)tal[o][a].sent);
        CHECK(calls == (double)tal[o][a].calls && sent == (double)tal[o][a].sent);
      }
    const pass_plan_comm *pc = det.comm + (size_t)stage * PASS_PLAN_MAX_COMM;
    for (int i = 0; i < det.n_comm[stage]; i++)
      printf("  stage %d plan %-14s %-8s %-22s %6.0f calls %10.0f B\n", stage, pass_coll_name(pc[i].kind),
             pass_axis_name(pc[i].axis), pc[i].what, pc[i].calls, pc[i].payload);
    for (int o = 0; o < IR_NUM_OPS; o++)
      for (int a = 0; a < IR_NUM_AXES; a++)
        for (int cl = 0; cl < C_KINDS; cl++)
          if (w.calls[o][a][cl] > 0)
            printf("  stage %d shard %-14s %-8s %-22s %6.0f calls %10.0f B\n", stage, ir_op_name((ir_op)o),
                   ir_axis_name((ir_axis)a), class_name[cl], w.calls[o][a][cl], w.bytes[o][a][cl]);
    compare(k, &ms, m, &s, &det, stage, t, &w);
    for (int o = 0; o < IR_NUM_OPS; o++) tp_sent += w.sent[o][IR_AXIS_TP];
    pass_training_free(t);
  }
  if (rc == 0) pass_plan_detail_free(&det);
  pass_plan_model_free(m);
  return tp_sent;
}

static void run_case(const kase *k) { run_case_step(k, NULL); }

/* ---- random graphs ----
 * A seeded generator of straight-line models the same harness compares:
 * token ids through an embedding [V, D], nL layers of a random block (a
 * sequence of matmuls by parameters changing the width, biases, elementwise
 * activations, softmax, layernorm and rmsnorm, a mean taken out along the
 * last axis (a reduction), residual adds and gates of earlier values of the
 * same width), then a head (the embedding tied, or its own weight, after an
 * optional layernorm) and the cross-entropy. Every dim is a multiple of 4,
 * so every mesh below divides what the rules split. */
typedef struct {
  uint64_t s;
} rng;

static int pick(rng *r, int n) {
  r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
  return (int)((r->s >> 33) % (uint64_t)n);
}

/* The model of seed `seed` written to path. */
static void random_model(uint64_t seed, const char *path) {
  rng r = {seed * 0x9e3779b97f4a7c15ull + 1};
  static const int widths[] = {8, 16, 32};
  static const char *const acts[] = {"relu", "gelu", "tanh", "silu", "sigmoid", "square"};
  int D = widths[pick(&r, 3)], V = pick(&r, 2) ? 32 : 64, nL = 1 + pick(&r, 2);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f, "# random model, seed %llu\nconfig tiny { B = 4, T = 16, D = %d, V = %d, nL = %d }\n", (unsigned long long)seed,
          D, V, nL);
  fprintf(f, "param wte: f32[V, D] = normal(0.02)\n");
  fprintf(f, "fn block(x: f32[B, T, D]) -> f32[B, T, D] {\n  h0 = x\n");
  int w = D, k = 0, width_of[64] = {D}, n_ops = 2 + pick(&r, 7);
  for (int i = 0; i < n_ops && k < 60; i++) {
    int op = pick(&r, 9);
    const char *h = "h";
    switch (op) {
    case 0: case 1: { /* a matmul by a parameter, to a new width */
      int w2 = widths[pick(&r, 3)];
      fprintf(f, "  param w%d: f32[%d, %d] = normal(0.02)\n  %s%d = %s%d @ w%d\n", i, w, w2, h, k + 1, h, k, i);
      w = w2;
      break;
    }
    case 2:
      fprintf(f, "  param b%d: f32[%d] = zeros\n  %s%d = %s%d + b%d\n", i, w, h, k + 1, h, k, i);
      break;
    case 3: fprintf(f, "  %s%d = %s(%s%d)\n", h, k + 1, acts[pick(&r, 6)], h, k); break;
    case 4: fprintf(f, "  %s%d = softmax(%s%d, axis=-1)\n", h, k + 1, h, k); break;
    case 5:
      if (pick(&r, 2))
        fprintf(f, "  param g%d: f32[%d] = ones\n  param c%d: f32[%d] = zeros\n  %s%d = layernorm(%s%d, g%d, c%d)\n", i, w, i, w,
                h, k + 1, h, k, i, i);
      else
        fprintf(f, "  param g%d: f32[%d] = ones\n  %s%d = rmsnorm(%s%d, g%d)\n", i, w, h, k + 1, h, k, i);
      break;
    case 6: fprintf(f, "  %s%d = %s%d - mean(%s%d, axis=-1, keepdims=true)\n", h, k + 1, h, k, h, k); break;
    default: { /* a residual add or a gate: an earlier value of the same width */
      int j = -1;
      for (int q = 0; q < k; q++)
        if (width_of[q] == w && pick(&r, 2)) j = q;
      if (j < 0) {
        fprintf(f, "  %s%d = %s%d * 0.5\n", h, k + 1, h, k);
        break;
      }
      fprintf(f, "  %s%d = %s%d %s %s%d\n", h, k + 1, h, k, op == 7 ? "+" : "*", h, j);
      break;
    }
    }
    width_of[++k] = w;
  }
  if (w != D) {
    fprintf(f, "  param wo: f32[%d, D] = normal(0.02)\n  h%d = h%d @ wo\n", w, k + 1, k);
    k++;
  }
  fprintf(f, "  return h%d\n}\n", k);
  fprintf(f, "fn main(tokens: i32[B, T], targets: i32[B, T]) -> (loss: f32, logits: f32[B, T, V]) {\n");
  fprintf(f, "  x = embedding(wte, tokens)\n  repeat l in 0..nL {\n    x = block(x)\n  }\n");
  if (pick(&r, 2)) fprintf(f, "  param lf_g: f32[D] = ones\n  param lf_b: f32[D] = zeros\n  x = layernorm(x, lf_g, lf_b)\n");
  if (pick(&r, 2)) fprintf(f, "  logits = x @ transpose(wte)\n");
  else fprintf(f, "  param head: f32[D, V] = normal(0.02)\n  logits = x @ head\n");
  fprintf(f, "  loss = cross_entropy(logits, targets)\n  return loss, logits\n}\n");
  fclose(f);
}

int main(int argc, char **argv) {
  static const kase cases[] = {
      {"examples/gpt.tg", "dp=2", 0, 1, PASS_SCHED_GPIPE, false, false},
      {"examples/gpt.tg", "tp=2", 0, 1, PASS_SCHED_GPIPE, false, false},
      {"examples/gpt.tg", "tp=2,sp", 0, 1, PASS_SCHED_GPIPE, false, false},
      {"examples/gpt.tg", "dp=2,tp=2", 1, 2, PASS_SCHED_GPIPE, false, false},
      {"examples/gpt.tg", "pp=2", 0, 2, PASS_SCHED_1F1B, false, false},
      {"examples/gpt.tg", "dp=2,pp=2", 2, 2, PASS_SCHED_GPIPE, false, false},
      {"examples/gpt.tg", "dp=2", 3, 2, PASS_SCHED_GPIPE, false, false},
      {"examples/llama.tg", "tp=2", 0, 1, PASS_SCHED_GPIPE, false, false},
      {"examples/llama.tg", "pp=2", 0, 2, PASS_SCHED_1F1B, false, false},
      {"examples/gpt.tg", "dp=2,tp=2", 3, 1, PASS_SCHED_GPIPE, false, false},
      /* one micro-batch with tp: the step's buckets reduce the gradients over dp in the layouts tp leaves them */
      {"examples/gpt.tg", "dp=2", 1, 1, PASS_SCHED_GPIPE, false, false},
      {"examples/gpt.tg", "dp=2,tp=2", 0, 1, PASS_SCHED_GPIPE, false, false},
      {"examples/gpt.tg", "dp=2,tp=2", 1, 1, PASS_SCHED_GPIPE, false, true},
      {"examples/llama.tg", "dp=2,tp=2,sp", 0, 1, PASS_SCHED_GPIPE, false, false},
      /* the layouts by search: the planner searches as the runtime does */
      {"examples/gpt.tg", "tp=2", 0, 1, PASS_SCHED_GPIPE, false, true},
      /* the search's layout here splits the table along D, not the vocabulary */
      {"examples/gpt.tg", "tp=2,sp", 0, 1, PASS_SCHED_GPIPE, false, true},
      {"examples/gpt.tg", "dp=2,tp=2", 1, 2, PASS_SCHED_GPIPE, false, true},
      {"examples/llama.tg", "tp=2", 0, 1, PASS_SCHED_GPIPE, false, true},
      {"examples/gpt.tg", "tp=2,pp=2", 0, 2, PASS_SCHED_1F1B, false, false},
      {"examples/gpt.tg", "tp=2,pp=2", 0, 2, PASS_SCHED_1F1B, false, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    double step, rule_step;
    double sent = run_case_step(&cases[i], &step);
    if (cases[i].search) {
      /* the search's layouts against Megatron-LM's rule's: no more bytes sent on tp; with sp, where
       * the search may trade bytes for fewer calls (each costs a ring's latency: on these tiny models
       * the latency is most of it), a step no slower by the planner's own model */
      kase rule = cases[i];
      rule.search = false;
      double before = run_case_step(&rule, &rule_step);
      printf("  tp bytes sent per step: search %.0f, Megatron-LM's rule %.0f; the planner's step %.6g s vs %.6g s\n",
             sent, before, step, rule_step);
      if (!parse(cases[i].mesh).sp) CHECK(sent <= before);
      CHECK(step <= rule_step * (1 + 1e-9));
    }
  }
  /* random graphs (argv[1]: how many; 0 skips), each on dp, tp and dp x tp,
   * and in turn tp and dp x tp with sp; ZeRO 0 and 1 on dp x tp (axes of 2:
   * the ring formulas this harness checks the runtime's tally against hold
   * for buffers that divide by the ranks, and a scalar's over 4 does not).
   * Collectives only: what the planner predicts each rank moves, call by
   * call and byte by byte, against the sharded program's nodes */
  int n = argc > 1 ? atoi(argv[1]) : 200;
  char path[64];
  snprintf(path, sizeof path, "/tmp/tgc_plan_random_%d.tg", (int)getpid());
  static const char *const meshes[] = {"dp=2", "tp=2", "dp=2,tp=2"};
  static const char *const extra[] = {"tp=2,sp", "dp=2,tp=2,sp"};
  int before = check_fail_count;
  for (int i = 0; i < n; i++) {
    random_model((uint64_t)i, path);
    for (int j = 0; j < 4; j++) {
      kase k = {path, j < 3 ? meshes[j] : extra[i % 2], j == 2 ? i % 2 : 0, 1 + i % 2, PASS_SCHED_GPIPE, true, false};
      run_case(&k);
    }
    /* the layouts by search (tgc plan's and tgc train's, pass_tp_search) on tp=2, tp=2 with sp and
     * dp=2 x tp=2 */
    for (int j = 0; j < 3 && check_fail_count == before; j++) {
      static const char *const smesh[] = {"tp=2", "tp=2,sp", "dp=2,tp=2"};
      kase k = {path, smesh[j], j == 2 ? i % 2 : 0, 1 + i % 2, PASS_SCHED_GPIPE, true, true};
      run_case(&k);
    }
    if (check_fail_count > before) { /* the model that failed, to reproduce it */
      printf("random model %d failed:\n", i);
      FILE *f = fopen(path, "r");
      for (int ch; f && (ch = fgetc(f)) != EOF;) putchar(ch);
      if (f) fclose(f);
      break;
    }
  }
  remove(path);
  return check_done();
}
