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
  bool dtype_given;           /* --dtype was given (else bf16, tgc plan's default, not tgc train's f32) */
  pass_optimizer_kind optimizer;
  double compile_s, compile_cpu_s, total_s;
  bool explain;
  /* what the command that runs the plan and the plan file need */
  const char *config_flag;    /* --config as given (NULL: the file's default config) */
  const fe_define *defines;   /* -D overrides (--seq's T among them) */
  int n_defines;
  uint64_t model_hash;        /* FNV-1a 64 of the model file's bytes */
  const char *save_plan;      /* --save-plan FILE, or NULL */
  double train_tokens;        /* --train-tokens N, or 0 */
} plan_report;

/* The plan file of the best plan (docs/plan.md, "Plan files") into
 * r->save_plan: 0, or -1 after reporting. */
int plan_save(const plan_report *r, ir_diag *d);

void plan_print_text(FILE *f, const plan_report *r);
void plan_print_json(FILE *f, const plan_report *r);
/* "tgc: error: no plan fits ..." with the smallest plan and where it misses. */
void plan_print_no_fit(ir_diag *d, const pass_plan_found *found, const pass_cluster *c, const pass_plan_model *m);
/* The Chrome trace of the best plan into path: 0, or -1 after reporting. */
int plan_write_trace_file(const char *path, const plan_report *r, ir_diag *d);

#endif
