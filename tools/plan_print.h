/* tools/plan_print.h — what `tgc plan` prints (plan_print.c): private to
 * cmd_plan.c and plan_print.c. */
#ifndef TGC_PLAN_PRINT_H
#define TGC_PLAN_PRINT_H

#include "stats.h"

typedef struct {
  const char *file, *config;
  const pass_cluster *cluster;
  pass_plan_model *model;
  const pass_plan_job *job;
  const pass_plan_found *found;
  ir_dtype dtype;
  pass_optimizer_kind optimizer;
  double compile_s, compile_cpu_s, total_s;
  bool explain;
} plan_report;

void plan_print_text(FILE *f, const plan_report *r);
void plan_print_json(FILE *f, const plan_report *r);
/* "tgc: error: no plan fits ..." with the smallest plan and where it misses. */
void plan_print_no_fit(ir_diag *d, const pass_plan_found *found, const pass_cluster *c, const pass_plan_model *m);
/* The Chrome trace of the best plan into path: 0, or -1 after reporting. */
int plan_write_trace_file(const char *path, const plan_report *r, ir_diag *d);

#endif
