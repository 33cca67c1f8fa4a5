/* tests/unit/testgraph.h — helpers the unit tests share for building and
 * running graphs (static inline: a test that does not use one pays nothing).
 *   T(dt, rank, dims...)  an ir_type; dims as int64_t (wrap literals in D())
 *   test_sum_all(g, v)    v summed over every axis (as "sumloss"): a scalar loss
 *   test_execute(...)     runs g on the CPU with seeded random inputs
 *                         (integers in [0, int_high)) and params initialized
 *                         from their initializers with param_seed */
#ifndef TGC_TESTGRAPH_H
#define TGC_TESTGRAPH_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "ir.h"
#include "runtime.h"

static inline ir_type T(ir_dtype dt, int rank, ...) {
  ir_type t = {.dtype = dt, .rank = rank};
  va_list ap;
  va_start(ap, rank);
  for (int d = 0; d < rank; d++) t.dims[d] = va_arg(ap, int64_t);
  va_end(ap);
  return t;
}
#define D(x) ((int64_t)(x))

static inline ir_value *test_sum_all(ir_graph *g, ir_value *v) {
  if (v->type.rank == 0) return v;
  int64_t axes[IR_MAX_RANK];
  for (int i = 0; i < v->type.rank; i++) axes[i] = i;
  ir_attr at[2] = {ir_attr_ints("axes", axes, v->type.rank), ir_attr_int("keepdims", 0)};
  return ir_graph_build1(g, IR_OP_REDUCE_SUM, &v, 1, at, 2, "sumloss", v->loc);
}

static inline int test_execute(const ir_graph *g, uint64_t in_seed, int64_t int_high, uint64_t param_seed,
                               rt_tensor **outputs, rt_stats *st) {
  rt_tensor **in = calloc((size_t)g->n_inputs + 1, sizeof *in), **pa = calloc((size_t)g->n_params + 1, sizeof *pa);
  for (int i = 0; i < g->n_inputs; i++) {
    in[i] = rt_tensor_new(&g->inputs[i]->type);
    rt_fill_random(in[i], in_seed, g->inputs[i]->name, int_high);
  }
  for (int i = 0; i < g->n_params; i++) {
    pa[i] = rt_tensor_new(&g->params[i]->type);
    rt_init_param(pa[i], g->params[i], param_seed);
  }
  char err[512];
  int rc = rt_run(&rt_cpu_backend, g, in, pa, outputs, st, err, sizeof err);
  if (rc) fprintf(stderr, "execute: %s\n", err);
  for (int i = 0; i < g->n_inputs; i++) rt_tensor_free(in[i]);
  for (int i = 0; i < g->n_params; i++) rt_tensor_free(pa[i]);
  free(in);
  free(pa);
  return rc;
}
#endif
