/* tests/unit/test_examples.c — the example models, end to end: each .tg file
 * goes through fe_compile (no passes) and ir_verify, and runs on
 * rt_cpu_backend; the outputs are compared with the same math written in C.
 *
 *   straight_line.tg at w1 = 1.5, w2 = 0.5: z6 = 39.459983186667834, compared
 *     bit for bit. Why exact: every node is one IEEE-754 operation (/ * + -,
 *     correctly rounded) or a libm call (sin, exp) that the kernel and this
 *     test make through the same libm in the same process on the same double
 *     argument; the only folded constant, 2*pi, is an exact doubling. So any
 *     difference at all means a wrong operand, order or rounding.
 *   hw1_q4.tg at x1 = 2, x2 = 4: y1 = 36, y2 = 4 exactly (small integers,
 *     every intermediate exactly representable).
 *   mlp.tg (default and deep configs, and -D L=1): the loss equals a plain C
 *     loop over the same parameter and input values within 1e-12 relative
 *     (summation order may differ: a few ulps of 1e-16 each), and the
 *     prediction vector within 1e-12.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"
#include "ir.h"
#include "runtime.h"

#ifndef M_PI /* not in strict C11 */
#define M_PI 3.14159265358979323846
#endif

/* A compiled model with its tensors: one per input, param and output. */
typedef struct {
  ir_diag *diag;
  char *text;
  ir_graph *g;
  rt_tensor **inputs, **params, **outputs;
} model;

static void model_free(model *m) {
  if (m->g) {
    for (int i = 0; m->inputs && i < m->g->n_inputs; i++) rt_tensor_free(m->inputs[i]);
    for (int i = 0; m->params && i < m->g->n_params; i++) rt_tensor_free(m->params[i]);
    for (int i = 0; m->outputs && i < m->g->n_outputs; i++) rt_tensor_free(m->outputs[i]);
  }
  free(m->inputs);
  free(m->params);
  free(m->outputs);
  ir_graph_free(m->g);
  ir_diag_free(m->diag);
  free(m->text);
  memset(m, 0, sizeof *m);
}

/* Compiles path with the given options, verifies the graph and allocates
 * inputs (random with `seed`, by name) and params (rt_init_param with
 * `seed`). Returns 0 or -1 (the diagnostics are on stderr). */
static int model_load(model *m, const char *path, const fe_options *opt, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->diag = ir_diag_new(stderr);
  size_t len = 0;
  m->text = ir_read_file(path, 1u << 20, &len, m->diag);
  if (!m->text) return -1;
  fe_options none = {0};
  m->g = fe_compile(path, m->text, len, opt ? opt : &none, m->diag);
  if (!m->g) {
    fprintf(stderr, "fe_compile(%s) failed\n", path);
    return -1;
  }
  if (ir_verify(m->g, m->diag) != 0) {
    fprintf(stderr, "ir_verify(%s) failed\n", path);
    return -1;
  }
  ir_graph *g = m->g;
  m->inputs = calloc((size_t)g->n_inputs + 1, sizeof *m->inputs);
  m->params = calloc((size_t)g->n_params + 1, sizeof *m->params);
  m->outputs = calloc((size_t)g->n_outputs + 1, sizeof *m->outputs);
  if (!m->inputs || !m->params || !m->outputs) return -1;
  for (int i = 0; i < g->n_inputs; i++) {
    if (!(m->inputs[i] = rt_tensor_new(&g->inputs[i]->type))) return -1;
    rt_fill_random(m->inputs[i], seed, g->inputs[i]->name, 10);
  }
  for (int i = 0; i < g->n_params; i++) {
    if (!(m->params[i] = rt_tensor_new(&g->params[i]->type))) return -1;
    rt_init_param(m->params[i], g->params[i], seed);
  }
  return 0;
}

static int model_run(model *m) {
  char err[512] = "";
  int rc = rt_run(&rt_cpu_backend, m->g, m->inputs, m->params, m->outputs, NULL, err,
                                        sizeof err);
  if (rc != 0) fprintf(stderr, "run(%s) failed: %s\n", m->g->source_file, err);
  return rc;
}

static rt_tensor *find_tensor(const ir_value *const *vals, rt_tensor *const *ts, int n,
                              const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(vals[i]->name, name) == 0) return ts[i];
  fprintf(stderr, "no value named '%s'\n", name);
  return NULL;
}
static rt_tensor *model_input(model *m, const char *name) {
  return find_tensor((const ir_value *const *)m->g->inputs, m->inputs, m->g->n_inputs, name);
}
static rt_tensor *model_param(model *m, const char *name) {
  return find_tensor((const ir_value *const *)m->g->params, m->params, m->g->n_params, name);
}
static rt_tensor *model_output(model *m, const char *name) {
  for (int i = 0; i < m->g->n_outputs; i++)
    if (strcmp(m->g->outputs[i].name, name) == 0) return m->outputs[i];
  fprintf(stderr, "no output named '%s'\n", name);
  return NULL;
}

/* ---------------------------------------------------------------------- */

static void test_straight_line(void) {
  /* The reference, through volatile so the compiler cannot fold it at
   * compile time (with MPFR) instead of calling the run-time libm. */
  volatile double w1 = 1.5, w2 = 0.5;
  double z1 = w1 / w2;
  double z2 = sin(2 * M_PI * z1);
  double z3 = exp(2 * w2);
  double z4 = 3 * z1 - z3;
  double z5 = z2 + z4;
  double z6 = z4 * z5;
  CHECK(z6 == 39.459983186667834);

  model m;
  if (model_load(&m, "examples/straight_line.tg", NULL, 1) != 0) {
    CHECK(!"straight_line.tg loads");
    model_free(&m);
    return;
  }
  rt_tensor *t1 = model_input(&m, "w1"), *t2 = model_input(&m, "w2");
  CHECK(t1 && t2);
  if (t1 && t2) {
    CHECK_EQ_INT(t1->type.dtype, IR_DT_F64);
    CHECK_EQ_INT(ir_type_numel(&t1->type), 1);
    rt_tensor_set(t1, 0, 1.5);
    rt_tensor_set(t2, 0, 0.5);
    if (model_run(&m) == 0) {
      rt_tensor *out = model_output(&m, "z6");
      CHECK(out != NULL);
      if (out) {
        CHECK_EQ_INT(out->type.dtype, IR_DT_F64);
        double got = rt_tensor_get(out, 0);
        uint64_t gb, wb;
        memcpy(&gb, &got, 8);
        memcpy(&wb, &z6, 8);
        if (gb != wb)
          fprintf(stderr, "straight_line z6: got %.17g (%a), want %.17g (%a)\n", got, got, z6, z6);
        CHECK(gb == wb);
      }
    } else {
      CHECK(!"straight_line.tg runs");
    }
  }
  model_free(&m);
}

static void test_hw1_q4(void) {
  model m;
  if (model_load(&m, "examples/hw1_q4.tg", NULL, 1) != 0) {
    CHECK(!"hw1_q4.tg loads");
    model_free(&m);
    return;
  }
  rt_tensor *t1 = model_input(&m, "x1"), *t2 = model_input(&m, "x2");
  CHECK(t1 && t2);
  if (t1 && t2) {
    rt_tensor_fill(t1, 2);
    rt_tensor_fill(t2, 4);
    if (model_run(&m) == 0) {
      rt_tensor *y1 = model_output(&m, "y1"), *y2 = model_output(&m, "y2");
      CHECK(y1 && y2);
      if (y1 && y2) {
        CHECK_EQ_INT(ir_type_numel(&y1->type), 1);
        CHECK_EQ_INT(ir_type_numel(&y2->type), 1);
        CHECK(rt_tensor_get(y1, 0) == 36.0);
        CHECK(rt_tensor_get(y2, 0) == 4.0);
        if (rt_tensor_get(y1, 0) != 36.0 || rt_tensor_get(y2, 0) != 4.0)
          fprintf(stderr, "hw1_q4: y1 = %.17g (want 36), y2 = %.17g (want 4)\n",
                  rt_tensor_get(y1, 0), rt_tensor_get(y2, 0));
      }
    } else {
      CHECK(!"hw1_q4.tg runs");
    }
  }
  model_free(&m);
}

/* mlp.tg in plain C: X <- sigmoid(W_l X) for each layer, pred = X^T w,
 * loss = (1/M) ||Y - pred||^2. Sizes come from the compiled graph. */
static void test_mlp(const char *config, const char *define_l, int64_t want_layers) {
  fe_define def = {"L", define_l};
  fe_options opt = {.config = config, .defines = define_l ? &def : NULL, .n_defines = define_l ? 1 : 0};
  model m;
  if (model_load(&m, "examples/mlp.tg", &opt, 1) != 0) {
    CHECK(!"mlp.tg loads");
    model_free(&m);
    return;
  }
  rt_tensor *X = model_input(&m, "X"), *Y = model_input(&m, "Y"), *w = model_param(&m, "w");
  CHECK(X && Y && w);
  CHECK_EQ_INT(m.g->n_params, want_layers + 1);
  if (!X || !Y || !w || X->type.rank != 2 || m.g->n_params != want_layers + 1) {
    model_free(&m);
    return;
  }
  int64_t D = X->type.dims[0], M = X->type.dims[1];
  CHECK_EQ_INT(X->type.dtype, IR_DT_F64);
  CHECK_EQ_INT(ir_type_numel(&Y->type), M);
  CHECK_EQ_INT(ir_type_numel(&w->type), D);

  double *x = malloc((size_t)(D * M) * sizeof *x), *nx = malloc((size_t)(D * M) * sizeof *nx);
  for (int64_t i = 0; i < D * M; i++) x[i] = rt_tensor_get(X, i);
  bool params_ok = true;
  for (int64_t l = 0; l < want_layers; l++) {
    char name[32];
    snprintf(name, sizeof name, "l.%" PRId64 ".W", l);
    rt_tensor *W = model_param(&m, name);
    if (!W || ir_type_numel(&W->type) != D * D) {
      CHECK(!"per-layer parameter l.<l>.W of shape [D, D]");
      params_ok = false;
      break;
    }
    for (int64_t i = 0; i < D; i++)
      for (int64_t c = 0; c < M; c++) {
        double s = 0;
        for (int64_t k = 0; k < D; k++) s += rt_tensor_get(W, i * D + k) * x[k * M + c];
        nx[i * M + c] = 1.0 / (1.0 + exp(-s));
      }
    memcpy(x, nx, (size_t)(D * M) * sizeof *x);
  }
  double loss = 0;
  double *pred = malloc((size_t)M * sizeof *pred);
  for (int64_t c = 0; c < M; c++) {
    double p = 0;
    for (int64_t k = 0; k < D; k++) p += x[k * M + c] * rt_tensor_get(w, k);
    pred[c] = p;
    double r = rt_tensor_get(Y, c) - p;
    loss += r * r;
  }
  loss /= (double)M;

  if (params_ok && model_run(&m) == 0) {
    rt_tensor *lt = model_output(&m, "loss"), *pt = model_output(&m, "pred");
    CHECK(lt != NULL);
    if (lt) {
      CHECK_EQ_INT(ir_type_numel(&lt->type), 1);
      double got = rt_tensor_get(lt, 0);
      /* relative 1e-12 (loss is O(1) here, never near 0) */
      CHECK(fabs(got - loss) <= 1e-12 * fabs(loss));
      if (!(fabs(got - loss) <= 1e-12 * fabs(loss)))
        fprintf(stderr, "mlp (%s, L=%" PRId64 ") loss: got %.17g, want %.17g, rel diff %.3g\n",
                config ? config : "default", want_layers, got, loss, fabs(got - loss) / fabs(loss));
    }
    if (pt && ir_type_numel(&pt->type) == M)
      for (int64_t c = 0; c < M; c++) CHECK_NEAR(rt_tensor_get(pt, c), pred[c], 1e-12);
  } else if (params_ok) {
    CHECK(!"mlp.tg runs");
  }
  free(pred);
  free(x);
  free(nx);
  model_free(&m);
}

int main(void) {
  test_straight_line();
  test_hw1_q4();
  test_mlp(NULL, NULL, 3);
  test_mlp("deep", NULL, 16);
  test_mlp(NULL, "1", 1);
  return check_done();
}
