/* tests/unit/test_train.c — the training loop end to end through the
 * library APIs (fe_compile -> pass_build_training -> pass_build_update ->
 * rt_trainer), the same path `tgc train` takes:
 *   - examples/mlp.tg on xor reaches loss < 1e-3 with the command's
 *     defaults (adam, lr 0.05) within 300 steps (it needs ~60-200);
 *   - the learning-rate schedules (constant, warmup, cosine to the floor);
 *   - gradient accumulation: on xor every batch of 4 holds the 4 points, so
 *     K = 2 micro-batches must give the K = 1 parameters up to summation
 *     order (relative 1e-12 after 20 SGD steps), and a rerun is bit-identical;
 *   - regression (adamw, clipping, warmup + cosine): the loss falls by 10x in 600 steps;
 *   - the training graph's layout (loss first, d_<param> outputs) and the
 *     error for a model without a scalar loss;
 *   - a step that makes a parameter non-finite stops the trainer, whose
 *     saves are then refused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "testtrain.h"
#include "frontend.h"
#include "ir.h"
#include "pass.h"
#include "runtime.h"

/* a session of testtrain.h, verifying the IR after every pass */
static int open_run(session *s, const char *path, const char *data, const pass_optimizer *opt, rt_schedule sched,
                    int micro, uint64_t seed) {
  setup c = {.path = path, .data = data, .opt = *opt, .sched = sched, .micro = micro, .seed = seed, .verify_each = true};
  return session_open(s, &c);
}

static void test_xor_converges(void) {
  session s;
  pass_optimizer opt = pass_optimizer_defaults(PASS_OPT_ADAM);
  rt_schedule sched = {.kind = RT_SCHEDULE_CONSTANT, .lr = 0.05};
  int rc = open_run(&s, "examples/mlp.tg", "xor", &opt, sched, 1, 0);
  CHECK_EQ_INT(rc, 0);
  if (rc == 0) {
    /* the layout the runtime relies on: bound by index, not name */
    CHECK_EQ_INT(s.g->n_outputs, s.g->n_params + 1); /* the gradients, loss_sum (no logits: no accuracy) */
    CHECK_EQ_INT(s.prog->grad_output[0], 0);
    CHECK_STR(s.g->outputs[0].name, "d_l.0.W");
    CHECK_EQ_INT(s.prog->loss_sum_output, s.g->n_params);
    CHECK(!s.prog->accuracy);
    rt_step_result r = {0};
    char err[1024];
    int step = 0;
    double best = INFINITY;
    for (; step < 300; step++) {
      if (rt_trainer_step(s.tr, &r, err, sizeof err) != 0) {
        fprintf(stderr, "step: %s\n", err);
        CHECK(!"training step runs");
        break;
      }
      best = fmin(best, r.loss);
      if (r.loss < 1e-3) break;
    }
    if (!(r.loss < 1e-3)) fprintf(stderr, "xor: loss %g after %d steps (best %g)\n", r.loss, step, best);
    CHECK(r.loss < 1e-3);
    CHECK(r.accuracy == -1); /* no logits output */
    CHECK(r.peak_bytes > 0);
    CHECK_EQ_INT(rt_trainer_steps_done(s.tr), step + 1);
  }
  session_close(&s);
}

static void test_schedules(void) {
  rt_schedule c = {.kind = RT_SCHEDULE_CONSTANT, .lr = 0.1, .warmup = 4};
  CHECK_NEAR(rt_schedule_lr(&c, 0), 0.025, 1e-15);
  CHECK_NEAR(rt_schedule_lr(&c, 3), 0.1, 1e-15);
  CHECK_NEAR(rt_schedule_lr(&c, 100), 0.1, 1e-15);
  rt_schedule k = {.kind = RT_SCHEDULE_COSINE, .lr = 1.0, .warmup = 10, .total = 110, .floor = 0.1};
  CHECK_NEAR(rt_schedule_lr(&k, 4), 0.5, 1e-15);
  CHECK_NEAR(rt_schedule_lr(&k, 10), 1.0, 1e-15);             /* peak right after warmup */
  CHECK_NEAR(rt_schedule_lr(&k, 60), 0.55, 1e-12);            /* halfway: floor + (1 - floor) / 2 */
  CHECK_NEAR(rt_schedule_lr(&k, 110), 0.1, 1e-12);            /* the floor at the end */
  CHECK_NEAR(rt_schedule_lr(&k, 500), 0.1, 1e-12);            /* and after */
  for (int64_t s = 10; s < 110; s++) CHECK(rt_schedule_lr(&k, s + 1) <= rt_schedule_lr(&k, s));
}

/* Runs `steps` SGD steps on xor with K micro-batches; copies the params out. */
static int run_sgd(int micro, int steps, double **out, int *n_out) {
  session s;
  pass_optimizer opt = pass_optimizer_defaults(PASS_OPT_SGD);
  rt_schedule sched = {.kind = RT_SCHEDULE_CONSTANT, .lr = 0.5};
  int rc = open_run(&s, "examples/mlp.tg", "xor", &opt, sched, micro, 3);
  char err[1024];
  for (int i = 0; rc == 0 && i < steps; i++)
    if (rt_trainer_step(s.tr, NULL, err, sizeof err) != 0) {
      fprintf(stderr, "%s\n", err);
      rc = -1;
    }
  int total = 0;
  for (int p = 0; rc == 0 && p < rt_trainer_num_params(s.tr); p++) total += (int)ir_type_numel(&rt_trainer_param(s.tr, p)->type);
  *out = calloc((size_t)total + 1, sizeof **out);
  *n_out = total;
  for (int p = 0, k = 0; rc == 0 && p < rt_trainer_num_params(s.tr); p++) {
    const rt_tensor *t = rt_trainer_param(s.tr, p);
    for (int64_t i = 0; i < ir_type_numel(&t->type); i++) (*out)[k++] = rt_tensor_get(t, i);
  }
  session_close(&s);
  return rc;
}

static void test_accumulation(void) {
  double *a = NULL, *b = NULL, *c = NULL;
  int na = 0, nb = 0, nc = 0;
  CHECK_EQ_INT(run_sgd(1, 20, &a, &na), 0);
  CHECK_EQ_INT(run_sgd(2, 20, &b, &nb), 0);
  CHECK_EQ_INT(run_sgd(2, 20, &c, &nc), 0);
  CHECK(na == nb && na == nc && na > 0);
  double maxd = 0;
  for (int i = 0; i < na && na == nb; i++) maxd = fmax(maxd, fabs(a[i] - b[i]) / fmax(1.0, fabs(a[i])));
  if (!(maxd <= 1e-12)) fprintf(stderr, "accumulation: K=1 vs K=2 max rel diff %.3g (tol 1e-12)\n", maxd);
  CHECK(maxd <= 1e-12);
  CHECK(nb == nc && memcmp(b, c, sizeof(double) * (size_t)nb) == 0); /* deterministic */
  bool moved = false; /* and training did change something */
  double *init = NULL;
  int ni = 0;
  run_sgd(1, 0, &init, &ni);
  for (int i = 0; i < na && i < ni; i++) moved |= init[i] != a[i];
  CHECK(moved);
  free(a);
  free(b);
  free(c);
  free(init);
}

static void test_regression(void) {
  session s;
  pass_optimizer opt = pass_optimizer_defaults(PASS_OPT_ADAMW);
  opt.weight_decay = 1e-4;
  opt.clip_norm = 5;
  rt_schedule sched = {.kind = RT_SCHEDULE_COSINE, .lr = 0.01, .warmup = 10, .total = 600, .floor = 0.1};
  int rc = open_run(&s, "examples/mlp.tg", "regression", &opt, sched, 1, 1);
  CHECK_EQ_INT(rc, 0);
  double first = 0, last = 0;
  char err[1024];
  rt_step_result r;
  for (int i = 0; rc == 0 && i < 600; i++) {
    if (rt_trainer_step(s.tr, &r, err, sizeof err) != 0) {
      fprintf(stderr, "%s\n", err);
      CHECK(!"regression step runs");
      break;
    }
    if (i < 10) first += r.loss / 10;
    if (i >= 590) last += r.loss / 10;
  }
  if (!(last < first / 10)) fprintf(stderr, "regression: loss %g -> %g\n", first, last);
  CHECK(last < first / 10);
  session_close(&s);
}

static void test_bad_models(void) {
  FILE *sink = tmpfile();
  ir_diag *d = ir_diag_new(sink);
  pass_options po = {.diag = d};
  /* no parameters */
  ir_graph *g = ir_graph_new("main", NULL);
  ir_type sc = {.dtype = IR_DT_F32, .rank = 0};
  ir_loc loc = {0};
  ir_value *x = ir_graph_add_input(g, "x", sc, loc);
  ir_graph_add_output(g, "loss", x);
  CHECK_EQ_INT(pass_build_training(g, &po), -1);
  ir_graph_free(g);
  /* a loss that is not a scalar */
  g = ir_graph_new("main", NULL);
  ir_type vt = {.dtype = IR_DT_F32, .rank = 1, .dims = {3}};
  ir_value *w = ir_graph_add_param(g, "w", vt, (ir_init){0}, loc);
  ir_value *in[2] = {w, w};
  ir_graph_add_output(g, "out", ir_graph_build1(g, IR_OP_MUL, in, 2, NULL, 0, "y", loc));
  CHECK_EQ_INT(pass_build_training(g, &po), -1);
  ir_graph_free(g);
  CHECK_EQ_INT(ir_diag_errors(d), 2);
  rewind(sink);
  char buf[2048] = "";
  size_t n = fread(buf, 1, sizeof buf - 1, sink);
  buf[n] = 0;
  CHECK(strstr(buf, "the model has no parameters: there is nothing to train") != NULL);
  CHECK(strstr(buf, "the loss (output 'out') must be a floating-point scalar, got f32[3]") != NULL);
  ir_diag_free(d);
  fclose(sink);
}

/* A step that makes a parameter Inf or NaN fails with the parameter's name,
 * the count and the loss; the trainer then refuses further steps and every
 * save (nothing is written). The model: w = ones(3), loss 12 at step 1 on
 * xor; sgd with lr 3e38 (finite in f32) overflows all 3 elements. */
static void test_nonfinite_stops(void) {
  session s;
  pass_optimizer opt = pass_optimizer_defaults(PASS_OPT_SGD);
  rt_schedule sched = {.kind = RT_SCHEDULE_CONSTANT, .lr = 3e38};
  int rc = open_run(&s, "tests/cli/train_nonfinite.tg", "xor", &opt, sched, 1, 0);
  CHECK_EQ_INT(rc, 0);
  if (rc != 0) return;
  char err[1024], path[] = "/tmp/tgc_nonfinite_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  remove(path);
  CHECK_EQ_INT(rt_trainer_step(s.tr, NULL, err, sizeof err), -1);
  CHECK_STR(err, "parameters became non-finite ('w': 3 of 3 elements are Inf or NaN; the loss was 12)");
  CHECK_EQ_INT(rt_trainer_steps_done(s.tr), 0);
  CHECK_EQ_INT(rt_trainer_step(s.tr, NULL, err, sizeof err), -1);
  CHECK_STR(err, "the parameters became non-finite in an earlier step");
  CHECK_EQ_INT(rt_trainer_save(s.tr, path, NULL, 0, err, sizeof err), -1);
  char want[200];
  snprintf(want, sizeof want, "%s: not saved: parameter 'w': 3 of 3 elements are Inf or NaN", path);
  CHECK_STR(err, want);
  CHECK(access(path, F_OK) != 0);
  session_close(&s);
}

int main(void) {
  test_nonfinite_stops();
  test_schedules();
  test_xor_converges();
  test_accumulation();
  test_regression();
  test_bad_models();
  return check_done();
}
