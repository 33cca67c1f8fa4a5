/* tests/unit/test_plan.c — the cost of a plan and the search (plan/plan.c)
 * on examples/gpt.tg gpt3-small (12 layers) in bf16, over every strategy of
 * a 16-GPU cluster (2 dgx-a100 nodes; a reserve that leaves 3 GB per GPU, so
 * memory decides between plans):
 *  - the rows of every plan's step time add up to the step (to 1e-9
 *    relative: they are sums of the same doubles in another order), none is
 *    negative, and the lower bound the search prunes with is below the step;
 *  - memory by kind: parameters 2 bytes per element / dp under ZeRO-3,
 *    gradients 2 / dp under ZeRO-2 and 3, Adam's 12 bytes (2 fp32 states +
 *    the fp32 master copy) / dp under ZeRO 1 to 3; the data-parallel
 *    collectives move the stage's parameters' bytes (ZeRO-0: one
 *    all-reduce; ZeRO-1: a reduce-scatter of the gradients and an
 *    all-gather of the parameters, each that size, once a step);
 *  - the pipeline's send/recv payload per step is m x (activations +
 *    gradients) at the stage boundaries the profile gives;
 *  - the search returns the same best plan as timing every valid strategy
 *    (so pruning by memory and by the lower bound loses nothing), and every
 *    kept runner-up is no faster than it;
 *  - invalid strategies are refused with the reason;
 *  - the trace of a plan is JSON with one forward and one backward slice
 *    per micro-batch and stage.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"
#include "plan.h"

static ir_graph *train(int B, pass_plan_ckpt ck, ir_diag *d, char **text) {
  size_t len;
  *text = ir_read_file("examples/gpt.tg", 1 << 20, &len, d);
  if (!*text) return NULL;
  char bs[16];
  snprintf(bs, sizeof bs, "%d", B);
  fe_define defs[1] = {{"B", bs}};
  fe_options fo = {.config = "gpt3_small", .defines = defs, .n_defines = 1};
  ir_graph *g = fe_compile("examples/gpt.tg", *text, len, &fo, d);
  bool off[PASS_COUNT] = {[PASS_FUSE_ELEMENTWISE] = true, [PASS_FUSE_TRANSPOSE] = true, [PASS_FUSE_LM_HEAD] = true}; /* as tgc plan compiles (cmd_plan.c) */
  pass_options po = {.diag = d, .checkpoint = pass_plan_ckpt_policy(ck), .disabled = off};
  if (!g || pass_build_training(g, &po) != 0) {
    ir_graph_free(g);
    return NULL;
  }
  pass_retype_floats(g, IR_DT_BF16);
  return g;
}

static pass_plan_model *model(const pass_target *dev) {
  ir_diag *d = ir_diag_new(stderr);
  pass_plan_model *m = pass_plan_model_new(dev);
  for (int ck = 0; ck < PASS_PLAN_CK_COUNT; ck++) {
    char *t2, *t4;
    ir_graph *g2 = train(2, ck, d, &t2), *g4 = train(4, ck, d, &t4);
    CHECK(g2 && g4 && pass_plan_model_add(m, ck, 2, g2, g4, d) == 0); /* takes both */
    free(t2), free(t4);
  }
  pass_plan_model_set_optimizer(m, 13, 2);
  ir_diag_free(d);
  return m;
}

static pass_cluster cluster(void) {
  pass_cluster c = *pass_cluster_lookup("dgx-a100");
  c.nodes = 2, c.gpus = 16;
  c.reserve = 77e9; /* 3 GB left per GPU */
  return c;
}

typedef struct {
  int n, fits, bad_rows, bad_lower, bad_mem, bad_dp;
  double best;
  pass_plan_strategy best_s;
} sweep;

static void check_plan(const pass_plan_result *r, sweep *w) {
  double sum = 0;
  for (int k = 0; k < PASS_ROWS; k++) {
    sum += r->rows[k];
    if (r->rows[k] < -1e-12 * r->step) w->bad_rows++;
  }
  if (fabs(sum - r->step) > 1e-9 * r->step) {
    if (w->bad_rows++ < 3)
      printf("  rows add up to %.17g, step %.17g (dp %d tp %d pp %d zero %d)\n", sum, r->step, r->s.dp, r->s.tp, r->s.pp,
             r->s.zero);
  }
  if (r->lower > r->step * (1 + 1e-12)) w->bad_lower++;
  /* memory by kind: the elements on the fullest stage from its gradients
   * (2 B, / dp under ZeRO 2+, and ZeRO 1 when the step's buckets
   * reduce-scatter them: one micro-batch, no pipeline; with tp > 1 the 1-D
   * tensors tp splits stay whole over dp, checked by test_plan_consistency) */
  bool split = r->s.zero >= 2 || (r->s.zero == 1 && r->m == 1 && r->s.pp == 1 && r->s.dp > 1);
  double d = r->s.dp, e = r->mem[PASS_MEM_GRADS] / 2 * (split ? d : 1);
  double want_p = e * 2 / (r->s.zero >= 3 ? d : 1), want_o = e * 12 / (r->s.zero >= 1 ? d : 1);
  if (r->s.tp == 1 &&
      (fabs(r->mem[PASS_MEM_PARAMS] - want_p) > 1e-6 * want_p || fabs(r->mem[PASS_MEM_OPTIMIZER] - want_o) > 1e-6 * want_o))
    w->bad_mem++;
  /* the data axis moves the stage's parameter bytes (stage 0 is the critical
   * one when pp = 1), and the trainer's sums */
  if (r->s.pp == 1 && r->s.dp > 1 && r->s.zero <= 1 && r->s.tp == 1) {
    double bytes = e * 2;
    int kinds = 0;
    for (int i = 0; i < r->n_comm; i++) {
      const pass_plan_comm *c = &r->comm[i];
      if (c->axis != IR_AXIS_DP || strncmp(c->what, "sums", 4) == 0) continue;
      kinds++;
      if (fabs(c->payload - bytes) > 1e-6 * bytes) w->bad_dp++;
      if (r->s.zero == 0 && c->kind != IR_COLL_ALL_REDUCE) w->bad_dp++;
    }
    if (kinds != (r->s.zero == 0 ? 1 : 2)) w->bad_dp++;
  }
}

static void test_every_plan(pass_plan_model *m, const pass_cluster *c, const pass_plan_job *j) {
  sweep w = {0};
  w.best = INFINITY;
  char why[256];
  int refused = 0;
  for (int tp = 1; tp <= 8; tp *= 2)
    for (int pp = 1; pp <= 16; pp *= 2)
      for (int sp = 0; sp <= (tp > 1); sp++)
        for (int ck = 0; ck < PASS_PLAN_CK_COUNT; ck++)
          for (int b = 1; b <= 64; b *= 2)
            for (int sc = 0; sc < PASS_SCHED_COUNT; sc++)
              for (int v = sc == PASS_SCHED_INTERLEAVED ? 2 : 1; v <= (sc == PASS_SCHED_INTERLEAVED ? 6 : 1); v++)
                for (int z = 0; z <= 3; z++) {
                  if (16 % (tp * pp)) continue;
                  int dp = 16 / (tp * pp);
                  if ((pp == 1 && sc != PASS_SCHED_1F1B) || (dp == 1 && z > 0)) continue;
                  pass_plan_strategy s = {dp, tp, pp, v, sp != 0, z, b, (pass_schedule)sc, (pass_plan_ckpt)ck};
                  pass_plan_result r;
                  if (pass_plan_evaluate(m, c, j, &s, &r, NULL, why, sizeof why) != 0) {
                    refused++;
                    continue;
                  }
                  w.n++;
                  check_plan(&r, &w);
                  if (r.fits) {
                    w.fits++;
                    if (r.step < w.best) w.best = r.step, w.best_s = r.s;
                  }
                }
  printf("%d plans timed (%d refused), %d fit; best %.6f s (dp %d tp %d pp %d)\n", w.n, refused, w.fits, w.best,
         w.best_s.dp, w.best_s.tp, w.best_s.pp);
  CHECK(w.n > 1000 && w.fits > 10 && w.fits < w.n);
  CHECK_EQ_INT(w.bad_rows, 0);
  CHECK_EQ_INT(w.bad_lower, 0);
  CHECK_EQ_INT(w.bad_mem, 0);
  CHECK_EQ_INT(w.bad_dp, 0);
  /* the search finds the same best, with or without runners-up */
  for (int top = 1; top <= 4; top += 3) {
    pass_plan_query q = {-1, -1, -1, -1, -1, -1, -1, -1, -1, top};
    pass_plan_found f;
    ir_diag *d = ir_diag_new(stderr);
    int rc = pass_plan_search(m, c, j, &q, &f, d);
    ir_diag_free(d);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
      printf("search (top %d): best %.6f s of %ld plans (%ld over memory, %ld pruned, %ld simulated)\n", top,
             f.plans[0].step, f.considered, f.over_memory, f.pruned, f.simulated);
      CHECK(f.plans[0].step == w.best);
      CHECK(f.plans[0].fits);
      for (int i = 1; i < f.n_plans; i++) CHECK(f.plans[i].step >= f.plans[0].step && f.plans[i].fits);
      for (int i = 0; i < f.n_unfit; i++) CHECK(f.unfit[i].step < f.plans[0].step && !f.unfit[i].fits);
      CHECK(f.over_memory > 0);
    }
    pass_plan_found_free(&f);
  }
}

static void test_pipeline_bytes(pass_plan_model *m, const pass_cluster *c, const pass_plan_job *j) {
  pass_plan_strategy s = {4, 2, 2, 1, true, 1, 2, PASS_SCHED_1F1B, PASS_PLAN_CK_SELECTIVE};
  pass_plan_result r;
  pass_plan_detail dt;
  char why[256];
  CHECK(pass_plan_evaluate(m, c, j, &s, &r, &dt, why, sizeof why) == 0);
  const pass_plan_profile *P = pass_plan_model_profile(m, PASS_PLAN_CK_SELECTIVE, 2, 2, true);
  int cut = dt.last[0];
  double want = r.m * (P->act[cut] + P->grad[cut]);
  bool found = false;
  for (int i = 0; i < r.n_comm; i++)
    if (r.comm[i].kind == IR_COLL_SEND && strcmp(r.comm[i].what, "activations, gradients") == 0) {
      found = true;
      printf("send/recv per step: %.0f bytes = %d x (%.0f + %.0f), %.0f calls\n", r.comm[i].payload, r.m, P->act[cut],
             P->grad[cut], r.comm[i].calls);
      CHECK(r.comm[i].payload == want);
      CHECK(r.comm[i].calls == r.m * (P->act_n[cut] + P->grad_n[cut]) && P->act_n[cut] >= 1 && P->grad_n[cut] >= 1);
    }
  CHECK(found);
  /* the trace: one F and one B slice per micro-batch and stage */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK(pass_plan_write_trace(f, m, &r, &dt) == 0);
  fclose(f);
  json_error_t err;
  json_t *root = json_loads(buf, 0, &err);
  CHECK(root != NULL);
  int fwd = 0, bwd = 0, lanes = 0;
  json_t *ev = root ? json_object_get(root, "traceEvents") : NULL;
  for (size_t i = 0; ev && i < json_array_size(ev); i++) {
    json_t *e = json_array_get(ev, i);
    const char *cat = json_string_value(json_object_get(e, "cat"));
    const char *name = json_string_value(json_object_get(e, "name"));
    if (cat && strcmp(cat, "forward") == 0) fwd++;
    if (cat && strcmp(cat, "backward") == 0) bwd++;
    if (name && strcmp(name, "thread_name") == 0) lanes++;
  }
  printf("trace: %d forward, %d backward slices, %d lanes\n", fwd, bwd, lanes);
  CHECK_EQ_INT(fwd, r.m * 2);
  CHECK_EQ_INT(bwd, r.m * 2);
  CHECK_EQ_INT(lanes, 6);
  json_decref(root);
  free(buf);
  pass_plan_detail_free(&dt);
}

static void test_refused(pass_plan_model *m, const pass_cluster *c, const pass_plan_job *j) {
  struct {
    pass_plan_strategy s;
    const char *why;
  } cases[] = {
      {{4, 2, 4, 1, false, 0, 1, PASS_SCHED_1F1B, 0}, "dp 4 x tp 2 x pp 4 = 32 devices, but the cluster has 16 GPUs"},
      {{1, 16, 1, 1, false, 0, 1, PASS_SCHED_1F1B, 0}, "tensor parallelism runs inside a node: tp 16 does not divide"},
      {{16, 1, 1, 1, false, 0, 3, PASS_SCHED_1F1B, 0}, "micro-batch 3 does not divide the 4 sequences of a data-parallel"},
      {{4, 1, 4, 2, false, 0, 8, PASS_SCHED_INTERLEAVED, 0}, "needs the 2 micro-batches to be a multiple of pp 4"},
      {{1, 1, 16, 1, false, 0, 1, PASS_SCHED_1F1B, 0}, "16 pipeline stages need 16 layers, the model has 12"},
      {{16, 1, 1, 1, true, 0, 1, PASS_SCHED_1F1B, 0}, "sequence parallelism splits over the tensor axis"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pass_plan_result r;
    char why[256] = "";
    CHECK(pass_plan_evaluate(m, c, j, &cases[i].s, &r, NULL, why, sizeof why) == -1);
    if (!strstr(why, cases[i].why)) printf("  case %zu: got '%s'\n", i, why);
    CHECK(strstr(why, cases[i].why) != NULL);
  }
}

int main(void) {
  pass_cluster c = cluster();
  pass_plan_model *m = model(&c.device);
  pass_plan_job j = {64, 2048};
  test_every_plan(m, &c, &j);
  test_pipeline_bytes(m, &c, &j);
  test_refused(m, &c, &j);
  pass_plan_model_free(m);
  return check_done();
}
