/* tests/unit/test_checkpoint.c — the checkpoint pass and its budget solver.
 *
 *  - Gradients are bit-identical (memcmp of every output) under every policy:
 *    on hand-built forward+backward chains, on an L-layer MLP, on
 *    examples/transformer_block.tg and on the 2-layer transformer
 *    examples/reverse.tg, differentiated by the autodiff pass.
 *  - For every policy the memory planner's prediction equals the executor's
 *    measured peak (exactly: the planner replays the executor's schedule).
 *  - On an L-layer MLP (width 64, batch 32, tanh, L = 4, 16, 64) the
 *    activation peak under `sqrt` grows like sqrt(L) and under `none` like L:
 *    predicted activation peak (act + recompute bytes live) and measured peak
 *    of the same training graph with each gradient reduced to a scalar (so
 *    that the parameter gradients, which grow like L under any policy, are
 *    not held): peak(64)/peak(16) must lie in [1.5, 2.6] for sqrt (sqrt(4) = 2;
 *    far below 4) and in [3.0, 4.5] for none (4 minus the constant part).
 *  - selective recomputes exactly the T x T values of attention.
 *  - budget: the dynamic program is optimal (brute force over all plans of
 *    random chains of up to 7 blocks), and the no-fit error names the least
 *    memory that would do.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "testgraph.h"
#include "frontend.h"
#include "pass.h"
#include "runtime.h"

/* ---- helpers ---- */
static ir_graph *compile_tg(const char *src, ir_diag *d) {
  return fe_compile("test.tg", src, strlen(src), &(fe_options){0}, d);
}

static ir_graph *load_tg_file(const char *path, ir_diag *d, char **text) {
  size_t len;
  *text = ir_read_file(path, 1 << 20, &len, d);
  if (!*text) return NULL;
  return fe_compile(path, *text, len, &(fe_options){0}, d);
}

/* grad of the output `loss` (else the first) w.r.t. every param, as outputs
 * d_<p>; with sum_grads the outputs are s_<p> = sum(d_<p>) instead. */
static void add_training(ir_graph *g, bool sum_grads) {
  ir_value *loss = g->outputs[0].value;
  for (int i = 0; i < g->n_outputs; i++)
    if (strcmp(g->outputs[i].name, "loss") == 0) loss = g->outputs[i].value;
  loss = test_sum_all(g, loss);
  int n = g->n_params;
  ir_value *wrt[256];
  ir_type types[256];
  const char *names[256];
  wrt[0] = loss;
  for (int i = 0; i < n; i++) {
    char buf[128];
    wrt[1 + i] = g->params[i];
    types[i] = g->params[i]->type;
    snprintf(buf, sizeof buf, "d_%s", g->params[i]->name);
    names[i] = ir_arena_strdup(g->arena, buf);
  }
  ir_node *gn = ir_graph_add_node(g, IR_OP_GRAD, wrt, n + 1, types, n, NULL, 0, names, loss->loc);
  g->n_outputs = 0; /* keep only the loss and the gradients */
  ir_graph_add_output(g, "loss", loss);
  for (int i = 0; i < n; i++) {
    gn->out[i]->role = IR_ROLE_GRAD;
    ir_value *v = gn->out[i];
    if (sum_grads) {
      int64_t axes[IR_MAX_RANK];
      for (int k = 0; k < v->type.rank; k++) axes[k] = k;
      ir_attr at[2] = {ir_attr_ints("axes", axes, v->type.rank), ir_attr_int("keepdims", 0)};
      v = ir_graph_build1(g, IR_OP_REDUCE_SUM, &v, 1, at, 2, "s", loss->loc);
      v->role = IR_ROLE_GRAD;
    }
    ir_graph_add_output(g, v->name, v);
  }
}

static int run_pipeline(ir_graph *g, const char *policy, ir_diag *d) {
  pass_options o = {0};
  o.diag = d;
  o.verify_each = true;
  o.checkpoint = policy;
  return pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &o);
}

/* Without fuse-attention: `selective` is about the T x T score tensors that
 * only unfused attention materializes. */
static int run_pipeline_unfused(ir_graph *g, const char *policy, ir_diag *d) {
  pass_options o = {0};
  o.diag = d;
  o.verify_each = true;
  o.checkpoint = policy;
  static const pass_id unfused[] = {PASS_AUTODIFF, PASS_CANONICALIZE, PASS_CHECKPOINT};
  return pass_run_pipeline(g, unfused, 3, &o);
}

/* Runs g on the CPU with seeded inputs/params; outputs[] receive tensors. */
static int execute(const ir_graph *g, rt_tensor **outputs, rt_stats *st) { return test_execute(g, 1, 2, 2, outputs, st); }

static void free_outputs(rt_tensor **t, int n) {
  for (int i = 0; i < n; i++) rt_tensor_free(t[i]);
}

static bool same_bits(const rt_tensor *a, const rt_tensor *b) {
  return a && b && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

static int count_role(const ir_graph *g, ir_role r) {
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int j = 0; j < g->nodes[i]->n_out; j++) k += g->nodes[i]->out[j]->role == r;
  return k;
}

/* ---- a hand-built chain: h_{l+1} = tanh(h_l @ W_l), loss = sum(h_L), and its
 * backward written out (role grad), as autodiff would append it ---- */
static ir_value *node(ir_graph *g, ir_op op, ir_value *a, ir_value *b, const ir_attr *at, int nat, const char *name,
                      int layer, ir_role role) {
  ir_value *in[2] = {a, b};
  ir_value *v = ir_graph_build1(g, op, in, b ? 2 : 1, at, nat, name, (ir_loc){0});
  v->def->layer = layer;
  v->role = role;
  return v;
}

static ir_graph *build_chain(int L, int width, int batch) {
  ir_graph *g = ir_graph_new("chain", NULL);
  ir_type tx = {IR_DT_F32, 2, {batch, width}}, tw = {IR_DT_F32, 2, {width, width}};
  ir_value *x = ir_graph_add_input(g, "x", tx, (ir_loc){0});
  ir_value *w[128], *h[129];
  h[0] = x;
  for (int l = 0; l < L; l++) {
    char nm[32];
    snprintf(nm, sizeof nm, "w%d", l);
    w[l] = ir_graph_add_param(g, nm, tw, (ir_init){IR_INIT_NORMAL, 0.3, 0}, (ir_loc){0});
    ir_value *z = node(g, IR_OP_MATMUL, h[l], w[l], NULL, 0, "z", l, IR_ROLE_ACT);
    h[l + 1] = node(g, IR_OP_TANH, z, NULL, NULL, 0, "h", l, IR_ROLE_ACT);
  }
  int64_t axes[2] = {0, 1}, perm[2] = {1, 0};
  ir_attr sum_at[2] = {ir_attr_ints("axes", axes, 2), ir_attr_int("keepdims", 0)}, tr_at = ir_attr_ints("perm", perm, 2);
  ir_value *loss = node(g, IR_OP_REDUCE_SUM, h[L], NULL, sum_at, 2, "loss", -1, IR_ROLE_ACT);
  ir_graph_add_output(g, "loss", loss);
  ir_type one_t = tx;
  ir_attr one_at = ir_attr_float("value", 1.0);
  ir_node *one_n = ir_graph_add_node(g, IR_OP_CONST, NULL, 0, &one_t, 1, &one_at, 1, (const char *const[]){"one"},
                                     (ir_loc){0});
  ir_value *one = one_n->out[0], *gh = one;
  one->role = IR_ROLE_GRAD;
  ir_value *dw[128];
  for (int l = L - 1; l >= 0; l--) {
    ir_value *sq = node(g, IR_OP_SQUARE, h[l + 1], NULL, NULL, 0, "sq", l, IR_ROLE_GRAD);
    ir_value *t = node(g, IR_OP_SUB, one, sq, NULL, 0, "t", l, IR_ROLE_GRAD);
    ir_value *gz = node(g, IR_OP_MUL, gh, t, NULL, 0, "gz", l, IR_ROLE_GRAD);
    ir_value *ht = node(g, IR_OP_TRANSPOSE, h[l], NULL, &tr_at, 1, "ht", l, IR_ROLE_GRAD);
    dw[l] = node(g, IR_OP_MATMUL, ht, gz, NULL, 0, "dw", l, IR_ROLE_GRAD);
    if (l > 0) {
      ir_value *wt = node(g, IR_OP_TRANSPOSE, w[l], NULL, &tr_at, 1, "wt", l, IR_ROLE_GRAD);
      gh = node(g, IR_OP_MATMUL, gz, wt, NULL, 0, "gh", l, IR_ROLE_GRAD);
    }
  }
  for (int l = 0; l < L; l++) {
    char nm[32];
    snprintf(nm, sizeof nm, "d_w%d", l);
    ir_graph_add_output(g, nm, dw[l]);
  }
  return g;
}

/* the last entry is replaced by the caller's tight budget */
static const char *policies[] = {"none", "block", "selective", "sqrt", "budget=1G", "budget=tight"};
enum { N_POLICIES = sizeof policies / sizeof policies[0] };

/* Compiles `make()` once per policy, runs it, and checks: outputs bit-identical
 * to policy none, prediction == measurement. Returns recompute counts. */
typedef ir_graph *(*graph_maker)(void *ctx);

static void check_policies(const char *what, graph_maker make, void *ctx, const char *tight_budget) {
  policies[N_POLICIES - 1] = tight_budget;
  rt_tensor *ref[256] = {0};
  int n_ref = 0;
  for (int p = 0; p < N_POLICIES; p++) {
    ir_diag *d = ir_diag_new(stderr);
    ir_graph *g = make(ctx);
    CHECK(g != NULL);
    if (!g) {
      ir_diag_free(d);
      continue;
    }
    int rc = run_pipeline(g, policies[p], d);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
      rt_tensor *out[256] = {0};
      rt_stats st = {0};
      CHECK_EQ_INT(execute(g, out, &st), 0);
      size_t pred = pass_predict_peak_bytes(g);
      if (pred != st.peak_bytes)
        fprintf(stderr, "%s %s: predicted %zu, measured %zu\n", what, policies[p], pred, st.peak_bytes);
      CHECK_EQ_INT(pred, st.peak_bytes);
      pass_graph_cost c;
      pass_graph_cost_of(g, &c);
      printf("%-18s %-12s peak %8zu bytes (predicted %8zu), recompute %9.0f FLOPs, %3d recomputed values\n", what,
             policies[p], st.peak_bytes, pred, c.flops[PASS_PHASE_RECOMPUTE], count_role(g, IR_ROLE_RECOMPUTE));
      if (p == 0) {
        n_ref = g->n_outputs;
        memcpy(ref, out, sizeof out);
      } else {
        CHECK_EQ_INT(g->n_outputs, n_ref);
        for (int i = 0; i < g->n_outputs && i < n_ref; i++) {
          bool same = same_bits(out[i], ref[i]);
          if (!same) fprintf(stderr, "%s %s: output %s differs\n", what, policies[p], g->outputs[i].name);
          CHECK(same);
        }
        free_outputs(out, g->n_outputs);
      }
    }
    ir_graph_free(g);
    ir_diag_free(d);
  }
  free_outputs(ref, n_ref);
}

static ir_graph *make_chain(void *ctx) { return build_chain(*(int *)ctx, 16, 8); }

/* ---- the .tg models ---- */
static char mlp_src[2048];
static void set_mlp_src(int L, int width, int batch) {
  snprintf(mlp_src, sizeof mlp_src,
           "config default { L = %d, W = %d, B = %d }\n"
           "fn main(x: f32[B, W], y: f32[B, W]) -> (loss: f32) {\n"
           "  h = x\n"
           "  repeat l in 0..L {\n"
           "    param w: f32[W, W] = normal(0.125)\n"
           "    h = tanh(h @ w)\n"
           "  }\n"
           "  loss = sum(square(h - y))\n"
           "  return loss\n"
           "}\n",
           L, width, batch);
}

static bool autodiff_ok = true;

static ir_graph *make_mlp(void *ctx) {
  (void)ctx;
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *g = compile_tg(mlp_src, d);
  ir_diag_free(d);
  if (g) add_training(g, false);
  return g;
}

static ir_graph *make_reverse(void *ctx) {
  (void)ctx;
  ir_diag *d = ir_diag_new(stderr);
  char *text = NULL;
  ir_graph *g = load_tg_file("examples/reverse.tg", d, &text);
  ir_diag_free(d);
  free(text);
  if (g) {
    g->source_file = NULL;
    add_training(g, false);
  }
  return g;
}

static ir_graph *make_transformer(void *ctx) {
  (void)ctx;
  ir_diag *d = ir_diag_new(stderr);
  char *text = NULL;
  ir_graph *g = load_tg_file("examples/transformer_block.tg", d, &text);
  ir_diag_free(d);
  free(text);
  if (g) {
    g->source_file = NULL; /* the text is freed: no quoting */
    add_training(g, false);
  }
  return g;
}

/* Moves every output reduce_sum of a gradient to just after the node that
 * computes the gradient, so that each gradient dies as soon as it is summed. */
static void hoist_sums(ir_graph *g) {
  int n = g->n_nodes, k = 0;
  ir_node **order = malloc((size_t)n * sizeof *order);
  bool *moved = calloc((size_t)n, sizeof *moved);
  for (int i = 0; i < n; i++) {
    const ir_node *s = g->nodes[i];
    moved[i] = s->op == IR_OP_REDUCE_SUM && s->in[0]->def && s->in[0]->role == IR_ROLE_GRAD &&
               s->out[0]->role == IR_ROLE_GRAD;
  }
  for (int i = 0; i < n; i++) {
    if (moved[i]) continue;
    order[k++] = g->nodes[i];
    for (int j = 0; j < n; j++)
      if (moved[j] && g->nodes[j]->in[0]->def == g->nodes[i]) order[k++] = g->nodes[j];
  }
  memcpy(g->nodes, order, (size_t)n * sizeof *order);
  for (int i = 0; i < n; i++) g->nodes[i]->id = i;
  free(order);
  free(moved);
}

/* Predicted activation peak and measured peak (gradients summed) of the MLP. */
static void mlp_peaks(int L, const char *policy, double *predicted, double *measured) {
  set_mlp_src(L, 64, 32);
  ir_diag *d = ir_diag_new(stderr);
  *predicted = *measured = -1;
  for (int variant = 0; variant < 2; variant++) {
    ir_graph *g = compile_tg(mlp_src, d);
    if (!g) break;
    add_training(g, variant == 1);
    if (run_pipeline(g, policy, d) != 0) {
      ir_graph_free(g);
      break;
    }
    if (variant == 1) hoist_sums(g);
    if (variant == 0) {
      pass_mem_report r;
      pass_memplan_analyze(g, &r);
      *predicted = (double)r.activation_peak_bytes;
    } else {
      rt_tensor *out[256] = {0};
      rt_stats st = {0};
      if (execute(g, out, &st) == 0) *measured = (double)st.peak_bytes;
      CHECK_EQ_INT(pass_predict_peak_bytes(g), st.peak_bytes);
      free_outputs(out, g->n_outputs);
    }
    ir_graph_free(g);
  }
  ir_diag_free(d);
}

static void test_sqrt_scaling(void) {
  const int Ls[3] = {4, 16, 64};
  const char *pols[2] = {"none", "sqrt"};
  double pred[2][3], meas[2][3];
  for (int p = 0; p < 2; p++)
    for (int i = 0; i < 3; i++) {
      mlp_peaks(Ls[i], pols[p], &pred[p][i], &meas[p][i]);
      printf("MLP L=%-3d %-5s activation peak predicted %9.0f bytes, measured peak (grads summed) %9.0f bytes\n",
             Ls[i], pols[p], pred[p][i], meas[p][i]);
    }
  double r_sqrt_pred = pred[1][2] / pred[1][1], r_sqrt_meas = meas[1][2] / meas[1][1];
  double r_none_pred = pred[0][2] / pred[0][1], r_none_meas = meas[0][2] / meas[0][1];
  printf("peak(64)/peak(16): sqrt predicted %.3f measured %.3f; none predicted %.3f measured %.3f\n", r_sqrt_pred,
         r_sqrt_meas, r_none_pred, r_none_meas);
  CHECK(r_sqrt_pred >= 1.5 && r_sqrt_pred <= 2.6);
  CHECK(r_sqrt_meas >= 1.5 && r_sqrt_meas <= 2.6);
  CHECK(r_none_pred >= 3.0 && r_none_pred <= 4.5);
  CHECK(r_none_meas >= 3.0 && r_none_meas <= 4.5);
  CHECK(pred[1][0] <= pred[0][0]);
}

/* ---- selective: which values are recomputed ---- */
static void test_selective(void) {
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *g = make_transformer(NULL);
  CHECK(g != NULL);
  if (g && run_pipeline_unfused(g, "selective", d) == 0) {
    int rc = 0, tt = 0, layout = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const ir_node *n = g->nodes[i];
      if (n->out[0]->role != IR_ROLE_RECOMPUTE) continue;
      if (pass_node_cost(n).flops == 0) { /* a layout op feeding the scores (K^T) */
        layout++;
        continue;
      }
      rc++;
      const ir_type *t = &n->out[0]->type;
      /* every computing clone is a T x T value: [B, nH, L, L] = [2, 4, 16, 16] */
      tt += t->rank == 4 && t->dims[2] == 16 && t->dims[3] == 16;
    }
    printf("selective on transformer_block: %d recomputed score nodes (%d T x T), %d layout clones\n", rc, tt,
           layout);
    CHECK(rc >= 3); /* the scores matmul, the scaling and the softmax */
    CHECK_EQ_INT(tt, rc);
  } else {
    CHECK(0);
  }
  ir_graph_free(g);
  ir_diag_free(d);
}

/* ---- the budget solver ---- */
static double brute_force(int n, const pass_ck_block *b, double base, double budget, double *best_mem, bool *fits) {
  int plan[8];
  double best = INFINITY, bm = INFINITY, least = INFINITY;
  int total = 1;
  for (int i = 0; i < n; i++) total *= 3;
  for (int code = 0; code < total; code++) {
    int c = code;
    for (int i = 0; i < n; i++, c /= 3) plan[i] = c % 3;
    /* the model, written out independently of the solver */
    bool ok = plan[0] != PASS_CK_CONT;
    for (int i = 1; i < n; i++) ok &= !(plan[i] == PASS_CK_CONT && plan[i - 1] == PASS_CK_STORE);
    if (!ok) continue;
    double kept = base, seg = 0, maxseg = 0, cost = 0;
    for (int i = 0; i < n; i++) {
      if (i > 0) {
        bool prev_rec = plan[i - 1] != PASS_CK_STORE;
        if (prev_rec && plan[i] != PASS_CK_CONT) kept += b[i - 1].out;
        if (!prev_rec && plan[i] == PASS_CK_START) kept += b[i - 1].out;
        if (!prev_rec && plan[i] == PASS_CK_STORE) kept += b[i - 1].out_saved;
      }
      if (plan[i] == PASS_CK_STORE) kept += b[i].act;
      else {
        seg = plan[i] == PASS_CK_START ? b[i].act : seg + b[i - 1].out_saved + b[i].act;
        if (seg > maxseg) maxseg = seg;
        cost += b[i].flops;
      }
    }
    kept += plan[n - 1] == PASS_CK_STORE ? b[n - 1].out_saved : b[n - 1].out;
    double mem = kept + maxseg;
    if (mem < least) least = mem;
    if (mem <= budget && (cost < best || (cost == best && mem < bm))) {
      best = cost;
      bm = mem;
    }
  }
  *fits = best < INFINITY;
  *best_mem = *fits ? bm : least;
  return best;
}

static void test_solver(void) {
  unsigned seed = 12345;
  int mismatches = 0, cases = 0;
  for (int t = 0; t < 400; t++) {
    int n = 1 + t % 7;
    pass_ck_block b[8];
    for (int i = 0; i < n; i++) {
      seed = seed * 1103515245u + 12345u;
      b[i].act = (double)(seed >> 16 & 63);
      seed = seed * 1103515245u + 12345u;
      b[i].out = (double)(1 + (seed >> 16 & 15));
      b[i].out_saved = (seed >> 20 & 1) ? b[i].out : 0;
      seed = seed * 1103515245u + 12345u;
      b[i].flops = (double)(1 + (seed >> 16 & 255));
    }
    double base = t % 3;
    double all_stored = base;
    for (int i = 0; i < n; i++) all_stored += b[i].act + b[i].out_saved;
    double budget = all_stored * (double)(t % 10) / 9.0;
    double bf_mem;
    bool bf_fits;
    double bf_cost = brute_force(n, b, base, budget, &bf_mem, &bf_fits);
    int plan[8];
    double mem, cost;
    int rc = pass_checkpoint_solve_chain(n, b, base, budget, plan, &mem, &cost);
    cases++;
    bool ok = rc == (bf_fits ? 0 : 1) && (bf_fits ? cost == bf_cost && mem == bf_mem : mem == bf_mem);
    double pm, pc;
    pass_checkpoint_plan_cost(n, b, base, plan, &pm, &pc);
    ok &= pm == mem && pc == cost && (rc != 0 || pm <= budget);
    if (!ok && mismatches++ < 5)
      fprintf(stderr, "solver case %d (n=%d budget %g): rc %d mem %g cost %g; brute force fits %d mem %g cost %g\n", t,
              n, budget, rc, mem, cost, bf_fits, bf_mem, bf_cost);
  }
  printf("budget solver: %d random chains agree with brute force (%d mismatches)\n", cases, mismatches);
  CHECK_EQ_INT(mismatches, 0);
  /* a malformed plan */
  pass_ck_block b1[2] = {{1, 1, 1, 1}, {1, 1, 1, 1}};
  int bad[2] = {PASS_CK_STORE, PASS_CK_CONT};
  double pm, pc;
  pass_checkpoint_plan_cost(2, b1, 0, bad, &pm, &pc);
  CHECK(pm < 0);
}

static void test_no_fit_message(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ir_diag *d = ir_diag_new(f);
  ir_graph *g = build_chain(8, 16, 8);
  pass_options o = {.diag = d, .checkpoint = "budget=1000"};
  int rc = pass_checkpoint(g, &o);
  fclose(f);
  CHECK_EQ_INT(rc, -1);
  /* activations: h_1..h_8 are f32[8, 16] = 512 bytes; the least plan keeps 2 of them */
  printf("no-fit message: %s", buf);
  CHECK(buf && strstr(buf, "no checkpoint plan fits in 1000 bytes: the smallest needs ") != NULL);
  CHECK(buf && strstr(buf, " bytes (") != NULL);
  free(buf);
  ir_diag_free(d);
  ir_graph_free(g);
  /* bad budgets */
  const char *bad[] = {"budget=", "budget=-5", "budget=1e9", "budget=12X", "budget=1.5G", "sideways"};
  for (int i = 0; i < 6; i++) {
    FILE *null = fopen("/dev/null", "w");
    ir_diag *d2 = ir_diag_new(null);
    ir_graph *g2 = build_chain(2, 4, 2);
    pass_options o2 = {.diag = d2, .checkpoint = bad[i]};
    CHECK_EQ_INT(pass_checkpoint(g2, &o2), -1);
    ir_graph_free(g2);
    ir_diag_free(d2);
    fclose(null);
  }
}

/* The chosen budget plan never exceeds the budget in the model and recomputes
 * less as the budget grows; a budget that fits everything recomputes nothing. */
static void test_budget_monotone(void) {
  double last = INFINITY;
  const char *budgets[] = {"budget=3000", "budget=4K", "budget=6K", "budget=1M"};
  for (int i = 0; i < 4; i++) {
    ir_diag *d = ir_diag_new(stderr);
    ir_graph *g = build_chain(8, 16, 8);
    pass_options o = {.diag = d, .checkpoint = budgets[i]};
    CHECK_EQ_INT(pass_checkpoint(g, &o), 0);
    pass_graph_cost c;
    pass_graph_cost_of(g, &c);
    pass_mem_report r;
    pass_memplan_analyze(g, &r);
    printf("chain of 8, %s: recompute %.0f FLOPs, activation peak %zu bytes\n", budgets[i],
           c.flops[PASS_PHASE_RECOMPUTE], r.activation_peak_bytes);
    CHECK(c.flops[PASS_PHASE_RECOMPUTE] <= last);
    last = c.flops[PASS_PHASE_RECOMPUTE];
    if (i == 3) CHECK_EQ_INT(count_role(g, IR_ROLE_RECOMPUTE), 0);
    ir_graph_free(g);
    ir_diag_free(d);
  }
}

int main(void) {
  /* hand-built chains: no autodiff needed */
  for (int L = 1; L <= 9; L += 4) check_policies("chain", make_chain, &L, "budget=3000");
  {
    ir_diag *d = ir_diag_new(stderr);
    ir_graph *g = build_chain(16, 16, 8);
    run_pipeline(g, "sqrt", d);
    int rc = count_role(g, IR_ROLE_RECOMPUTE);
    printf("chain of 16 under sqrt: %d recomputed values\n", rc);
    CHECK(rc > 0);
    ir_graph_free(g);
    ir_diag_free(d);
  }
  test_solver();
  test_no_fit_message();
  test_budget_monotone();

  /* models differentiated by the autodiff pass */
  {
    set_mlp_src(2, 4, 2);
    ir_diag *d = ir_diag_new(stderr);
    ir_graph *g = make_mlp(NULL);
    autodiff_ok = g && run_pipeline(g, "none", d) == 0;
    ir_graph_free(g);
    ir_diag_free(d);
  }
  CHECK(autodiff_ok);
  if (autodiff_ok) {
    for (int L = 4; L <= 16; L *= 4) {
      set_mlp_src(L, 16, 8);
      check_policies("mlp", make_mlp, NULL, L == 4 ? "budget=2K" : "budget=5K");
    }
    check_policies("transformer_block", make_transformer, NULL, "budget=100M");
    check_policies("reverse.tg", make_reverse, NULL, "budget=4M");
    test_selective();
    test_sqrt_scaling();
  }
  return check_done();
}
