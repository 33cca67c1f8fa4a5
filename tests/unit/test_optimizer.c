/* tests/unit/test_optimizer.c — the optimizer update graphs
 * (pass_build_update) against plain-C reference updates.
 *
 * A model graph with three f64 parameters (a matrix, a vector, a scalar) is
 * given random gradients for 5 steps; each step runs the update graph on
 * rt_cpu_backend and the same formulas in C (the ones written at the top of
 * passes/optimizer.c, operation for operation). Tolerances: bit-exact without
 * clipping (every op is one correctly rounded f64 operation or the same libm
 * call); with clipping |diff| <= 1e-12 * max(1, |ref|) since the reduction
 * order of the global norm may differ from the C loop's.
 * Also: the graph's names and layout, and an f32 model (within 1e-5 of the
 * f64 reference: f32 rounding).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir.h"
#include "pass.h"
#include "runtime.h"

#define NP 3
#define STEPS 5

static ir_graph *make_model(ir_dtype dt) {
  ir_graph *g = ir_graph_new("main", NULL);
  ir_loc loc = {0};
  ir_init init = {IR_INIT_NORMAL, 0.5, 0};
  ir_type w = {.dtype = dt, .rank = 2, .dims = {3, 4}};
  ir_type b = {.dtype = dt, .rank = 1, .dims = {4}};
  ir_type s = {.dtype = dt, .rank = 0};
  ir_graph_add_param(g, "W", w, init, loc);
  ir_graph_add_param(g, "b", b, init, loc);
  ir_graph_add_param(g, "s", s, init, loc);
  return g;
}

/* Reference state: per parameter, p, m, v (m doubles as the momentum buffer). */
typedef struct {
  int64_t n;
  double *p, *m, *v;
} ref_param;

static double grad_value(int step, int param, int64_t i) {
  return rt_random_normal(7, (uint64_t)(step * 16 + param), (uint64_t)i) * (param == 2 ? 3.0 : 1.0);
}

static void ref_step(const pass_optimizer *o, ref_param *rp, int step, double lr) {
  double *g[NP];
  for (int k = 0; k < NP; k++) {
    g[k] = malloc(sizeof(double) * (size_t)rp[k].n);
    for (int64_t i = 0; i < rp[k].n; i++) g[k][i] = grad_value(step, k, i);
  }
  if (o->clip_norm > 0) {
    double total = 0;
    for (int k = 0; k < NP; k++) {
      double s = 0;
      for (int64_t i = 0; i < rp[k].n; i++) s += g[k][i] * g[k][i];
      total = k == 0 ? s : total + s;
    }
    double norm = sqrt(total);
    double scale = fmin(1.0, o->clip_norm / (norm + 1e-6));
    for (int k = 0; k < NP; k++)
      for (int64_t i = 0; i < rp[k].n; i++) g[k][i] = g[k][i] * scale;
  }
  double t = step + 1;
  double bc1 = 1.0 - pow(o->beta1, t), bc2 = 1.0 - pow(o->beta2, t);
  double lr_wd = lr * o->weight_decay;
  for (int k = 0; k < NP; k++)
    for (int64_t i = 0; i < rp[k].n; i++) {
      double gv = g[k][i], *p = &rp[k].p[i], *m = &rp[k].m[i], *v = &rp[k].v[i];
      if (o->weight_decay > 0 && o->kind != PASS_OPT_ADAMW) gv = gv + o->weight_decay * *p;
      switch (o->kind) {
      case PASS_OPT_SGD: *p = *p - lr * gv; break;
      case PASS_OPT_MOMENTUM:
        *m = o->momentum * *m + gv;
        *p = *p - lr * *m;
        break;
      default: {
        *m = o->beta1 * *m + (1.0 - o->beta1) * gv;
        *v = o->beta2 * *v + (1.0 - o->beta2) * (gv * gv);
        double upd = (lr / bc1) * (*m / (sqrt(*v) / sqrt(bc2) + o->eps));
        double base = *p;
        if (o->kind == PASS_OPT_ADAMW && o->weight_decay > 0) base = *p - lr_wd * *p;
        *p = base - upd;
      }
      }
    }
  for (int k = 0; k < NP; k++) free(g[k]);
}

/* Runs STEPS updates through the graph and the reference; returns the max
 * scaled difference of parameters and states. */
static double run_case(const pass_optimizer *o, ir_dtype dt) {
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *model = make_model(dt);
  ir_graph *u = pass_build_update(model, o, d);
  CHECK(u != NULL);
  if (!u) {
    ir_graph_free(model);
    ir_diag_free(d);
    return INFINITY;
  }
  int ns = pass_optimizer_state_count(o->kind);
  CHECK_EQ_INT(u->n_params, NP);
  CHECK_EQ_INT(u->n_inputs, NP + NP * ns + 2);
  CHECK_EQ_INT(u->n_outputs, NP + NP * ns);
  rt_tensor *params[NP], *states[NP * 2], *grads[NP];
  ref_param rp[NP];
  for (int k = 0; k < NP; k++) {
    params[k] = rt_tensor_new(&model->params[k]->type);
    rt_init_param(params[k], model->params[k], 3);
    rp[k].n = ir_type_numel(&model->params[k]->type);
    rp[k].p = malloc(sizeof(double) * (size_t)rp[k].n);
    rp[k].m = calloc((size_t)rp[k].n, sizeof(double));
    rp[k].v = calloc((size_t)rp[k].n, sizeof(double));
    for (int64_t i = 0; i < rp[k].n; i++) rp[k].p[i] = rt_tensor_get(params[k], i);
    grads[k] = rt_tensor_new(&model->params[k]->type);
  }
  for (int s = 0; s < NP * ns; s++) states[s] = rt_tensor_new(&u->inputs[NP + s]->type);
  ir_type sc = {.dtype = IR_DT_F64, .rank = 0};
  rt_tensor *lr = rt_tensor_new(&sc), *stp = rt_tensor_new(&sc);
  double maxdiff = 0;
  for (int step = 0; step < STEPS; step++) {
    double lrv = 0.05 / (step + 1);
    for (int k = 0; k < NP; k++)
      for (int64_t i = 0; i < rp[k].n; i++) rt_tensor_set(grads[k], i, grad_value(step, k, i));
    rt_tensor_set(lr, 0, lrv);
    rt_tensor_set(stp, 0, step + 1);
    rt_tensor *in[NP + 2 * NP + 2], *out[NP + 2 * NP];
    for (int k = 0; k < NP; k++) in[k] = grads[k];
    for (int s = 0; s < NP * ns; s++) in[NP + s] = states[s];
    in[NP + NP * ns] = lr;
    in[NP + NP * ns + 1] = stp;
    char err[512];
    int rc = rt_run(&rt_cpu_backend, u, in, params, out, NULL, err, sizeof err);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
      fprintf(stderr, "update failed: %s\n", err);
      break;
    }
    for (int k = 0; k < NP; k++) {
      rt_tensor_free(params[k]);
      params[k] = out[k];
    }
    for (int s = 0; s < NP * ns; s++) {
      rt_tensor_free(states[s]);
      states[s] = out[NP + s];
    }
    ref_step(o, rp, step, lrv);
    for (int k = 0; k < NP; k++)
      for (int64_t i = 0; i < rp[k].n; i++) {
        double want[3] = {rp[k].p[i], rp[k].m[i], rp[k].v[i]};
        double got[3] = {rt_tensor_get(params[k], i), ns >= 1 ? rt_tensor_get(states[k * ns], i) : want[1],
                         ns >= 2 ? rt_tensor_get(states[k * ns + 1], i) : want[2]};
        for (int j = 0; j < 3; j++) {
          double diff = fabs(got[j] - want[j]) / fmax(1.0, fabs(want[j]));
          if (diff > maxdiff) maxdiff = diff;
        }
      }
  }
  for (int k = 0; k < NP; k++) {
    rt_tensor_free(params[k]);
    rt_tensor_free(grads[k]);
    free(rp[k].p);
    free(rp[k].m);
    free(rp[k].v);
  }
  for (int s = 0; s < NP * ns; s++) rt_tensor_free(states[s]);
  rt_tensor_free(lr);
  rt_tensor_free(stp);
  ir_graph_free(u);
  ir_graph_free(model);
  ir_diag_free(d);
  return maxdiff;
}

static void test_against_reference(void) {
  struct {
    pass_optimizer_kind kind;
    double wd, clip;
  } cases[] = {
      {PASS_OPT_SGD, 0, 0},      {PASS_OPT_SGD, 0.01, 0},      {PASS_OPT_MOMENTUM, 0, 0},
      {PASS_OPT_MOMENTUM, 0.01, 1.0}, {PASS_OPT_ADAM, 0, 0},   {PASS_OPT_ADAM, 0.01, 0},
      {PASS_OPT_ADAMW, 0.1, 0},  {PASS_OPT_ADAMW, 0.1, 1.5},   {PASS_OPT_ADAM, 0, 0.5},
      {PASS_OPT_SGD, 0, 2.0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    pass_optimizer o = pass_optimizer_defaults(cases[c].kind);
    o.weight_decay = cases[c].wd;
    o.clip_norm = cases[c].clip;
    double diff = run_case(&o, IR_DT_F64);
    double tol = o.clip_norm > 0 ? 1e-12 : 0.0;
    if (!(diff <= tol))
      fprintf(stderr, "optimizer %s wd %g clip %g: max scaled diff %.3g (tol %g)\n", pass_optimizer_name(o.kind),
              o.weight_decay, o.clip_norm, diff, tol);
    CHECK(diff <= tol);
  }
  /* f32 parameters: the same math rounded to f32 at each op */
  pass_optimizer o = pass_optimizer_defaults(PASS_OPT_ADAMW);
  o.weight_decay = 0.1;
  o.clip_norm = 1.0;
  double diff = run_case(&o, IR_DT_F32);
  if (!(diff <= 1e-5)) fprintf(stderr, "adamw f32: max scaled diff %.3g (tol 1e-5)\n", diff);
  CHECK(diff <= 1e-5);
}

static void test_layout_and_names(void) {
  CHECK_EQ_INT(pass_optimizer_from_name("adamw"), PASS_OPT_ADAMW);
  CHECK_EQ_INT(pass_optimizer_from_name("rmsprop"), -1);
  CHECK_STR(pass_optimizer_name(PASS_OPT_MOMENTUM), "momentum");
  CHECK_EQ_INT(pass_optimizer_state_count(PASS_OPT_SGD), 0);
  CHECK_EQ_INT(pass_optimizer_state_count(PASS_OPT_MOMENTUM), 1);
  CHECK_EQ_INT(pass_optimizer_state_count(PASS_OPT_ADAM), 2);
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *model = make_model(IR_DT_F64);
  pass_optimizer o = pass_optimizer_defaults(PASS_OPT_ADAM);
  ir_graph *u = pass_build_update(model, &o, d);
  CHECK(u != NULL);
  if (u) {
    CHECK_STR(u->params[0]->name, "W");
    CHECK_STR(u->inputs[0]->name, "d_W");
    CHECK_STR(u->inputs[3]->name, "m.W");
    CHECK_STR(u->inputs[4]->name, "v.W");
    CHECK_STR(u->inputs[9]->name, "lr");
    CHECK_STR(u->inputs[10]->name, "step");
    CHECK_STR(u->outputs[0].name, "new.W");
    CHECK_STR(u->outputs[3].name, "new.m.W");
    CHECK_EQ_INT(u->outputs[3].value->role, IR_ROLE_OPT_STATE);
    /* the textual IR of the update graph round-trips */
    char *text = ir_print_to_string(u);
    ir_graph *back = ir_parse("update.ir", text, strlen(text), d);
    CHECK(back != NULL);
    if (back) {
      char *text2 = ir_print_to_string(back);
      CHECK(strcmp(text, text2) == 0);
      free(text2);
      ir_graph_free(back);
    }
    free(text);
    ir_graph_free(u);
  }
  /* an integer parameter cannot be trained */
  ir_type it = {.dtype = IR_DT_I32, .rank = 1, .dims = {2}};
  ir_loc loc = {0};
  ir_graph_add_param(model, "n", it, (ir_init){0}, loc);
  FILE *sink = tmpfile();
  ir_diag *d2 = ir_diag_new(sink);
  CHECK(pass_build_update(model, &o, d2) == NULL);
  CHECK_EQ_INT(ir_diag_errors(d2), 1);
  ir_diag_free(d2);
  fclose(sink);
  ir_graph_free(model);
  ir_diag_free(d);
}

int main(void) {
  test_layout_and_names();
  test_against_reference();
  return check_done();
}
