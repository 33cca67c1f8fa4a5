/* tests/unit/testgpu.h — what the tests of the cuda-emu backend share:
 * compiling a model (or a graph given as .tg text), running it on two
 * backends from the same host tensors, and comparing every output with a
 * stated tolerance, printing the first mismatches and the largest error.
 * Include after check.h. */
#ifndef TGC_TESTGPU_H
#define TGC_TESTGPU_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"
#include "pass.h"
#include "runtime.h"

typedef struct {
  ir_diag *d;
  char *text;
  ir_graph *g;
  rt_tensor **in, **par;
} gmodel;

static inline void gmodel_free(gmodel *m) {
  for (int i = 0; m->g && m->in && i < m->g->n_inputs; i++) rt_tensor_free(m->in[i]);
  for (int i = 0; m->g && m->par && i < m->g->n_params; i++) rt_tensor_free(m->par[i]);
  free(m->in);
  free(m->par);
  ir_graph_free(m->g);
  free(m->text);
  ir_diag_free(m->d);
  memset(m, 0, sizeof *m);
}

/* Random inputs (integers below int_high) and initialized params from seed. */
static inline int gmodel_bind(gmodel *m, uint64_t seed, int64_t int_high) {
  ir_graph *g = m->g;
  m->in = calloc((size_t)g->n_inputs + 1, sizeof *m->in);
  m->par = calloc((size_t)g->n_params + 1, sizeof *m->par);
  if (!m->in || !m->par) return -1;
  for (int i = 0; i < g->n_inputs; i++) {
    if (!(m->in[i] = rt_tensor_new(&g->inputs[i]->type))) return -1;
    rt_fill_random(m->in[i], seed, g->inputs[i]->name, int_high);
  }
  for (int i = 0; i < g->n_params; i++) {
    if (!(m->par[i] = rt_tensor_new(&g->params[i]->type))) return -1;
    rt_init_param(m->par[i], g->params[i], seed);
  }
  return 0;
}

/* Compiles source text (name is its file name for messages) with the
 * default pipeline; training: the bare training graph (loss and every
 * parameter's gradient as outputs). */
static inline int gmodel_compile(gmodel *m, const char *name, const char *text, const char *config, bool training,
                                 uint64_t seed, int64_t int_high) {
  memset(m, 0, sizeof *m);
  m->d = ir_diag_new(stderr);
  size_t len = strlen(text);
  m->text = malloc(len + 1);
  if (!m->text) return -1;
  memcpy(m->text, text, len + 1);
  fe_options fo = {.config = config};
  if (!(m->g = fe_compile(name, m->text, len, &fo, m->d))) return -1;
  pass_options po = {.diag = m->d};
  int rc = training ? pass_build_training(m->g, &po)
                    : pass_run_pipeline(m->g, pass_default_pipeline, pass_default_pipeline_len, &po);
  if (rc != 0) return -1;
  return gmodel_bind(m, seed, int_high);
}

static inline int gmodel_load(gmodel *m, const char *path, const char *config, bool training, uint64_t seed,
                              int64_t int_high) {
  memset(m, 0, sizeof *m);
  ir_diag *d = ir_diag_new(stderr);
  size_t len;
  char *text = ir_read_file(path, 1 << 22, &len, d);
  ir_diag_free(d);
  if (!text) return -1;
  int rc = gmodel_compile(m, path, text, config, training, seed, int_high);
  free(text);
  return rc;
}

/* Runs m on b into outs (new host tensors). */
static inline int gmodel_run(gmodel *m, const rt_backend *b, rt_tensor **outs, const rt_device_options *dev) {
  char err[2048] = "";
  rt_stats st = {.device = dev};
  int rc = rt_run(b, m->g, m->in, m->par, outs, &st, err, sizeof err);
  if (rc != 0) fprintf(stderr, "%s on %s: %s\n", m->g->source_file ? m->g->source_file : "?", b->name, err);
  return rc;
}

/* Compares got with want elementwise, relative to the tensor's scale:
 * |got - want| <= tol * max(|want|, the largest finite |want| of the
 * tensor). Elements that cancel to near zero carry the float noise of the
 * terms that cancelled, which is relative to those terms, not to the small
 * result: a sum's order changes them by about an ulp of the tensor's large
 * values. NaN matches NaN, inf the same inf. Prints the first 5 mismatches
 * and the largest relative error; returns the number of mismatches. */
static inline int64_t compare_tensors(const char *what, const rt_tensor *got, const rt_tensor *want, double tol,
                                      double *worst_out) {
  if (!ir_type_equal(&got->type, &want->type)) {
    fprintf(stderr, "  %s: types differ\n", what);
    return 1;
  }
  int64_t n = ir_type_numel(&want->type), bad = 0;
  double big = 0, worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double w = rt_tensor_get(want, i);
    if (isfinite(w) && fabs(w) > big) big = fabs(w);
  }
  double floor_ = big > 1e-300 ? big : 1e-300;
  for (int64_t i = 0; i < n; i++) {
    double g = rt_tensor_get(got, i), w = rt_tensor_get(want, i);
    double e;
    if (isnan(w) || isinf(w)) e = (isnan(w) && isnan(g)) || g == w ? 0 : INFINITY;
    else e = fabs(g - w) / (fabs(w) > floor_ ? fabs(w) : floor_);
    if (e != e) e = INFINITY; /* NaN where a number is wanted */
    if (!(e <= tol)) {
      if (bad < 5) fprintf(stderr, "  %s[%lld] = %.9g, want %.9g (error %.3g)\n", what, (long long)i, g, w, e);
      bad++;
    }
    if (!(e <= worst)) worst = e;
  }
  if (bad) fprintf(stderr, "  %s: %lld of %lld elements differ (tolerance %g), largest error %.3g\n", what,
                   (long long)bad, (long long)n, tol, worst);
  if (worst_out && worst > *worst_out) *worst_out = worst;
  return bad;
}

/* Runs m on both backends and compares every output; the largest error in *worst. */
static inline int64_t compare_backends(gmodel *m, const rt_backend *a, const rt_backend *b, double tol, double *worst,
                                       const rt_device_options *dev) {
  int no = m->g->n_outputs;
  rt_tensor **oa = calloc((size_t)no + 1, sizeof *oa), **ob = calloc((size_t)no + 1, sizeof *ob);
  int64_t bad = 0;
  if (gmodel_run(m, a, oa, NULL) != 0 || gmodel_run(m, b, ob, dev) != 0) bad = -1;
  for (int i = 0; bad >= 0 && i < no; i++) bad += compare_tensors(m->g->outputs[i].name, ob[i], oa[i], tol, worst);
  for (int i = 0; i < no; i++) rt_tensor_free(oa[i]), rt_tensor_free(ob[i]);
  free(oa);
  free(ob);
  return bad;
}

#endif
