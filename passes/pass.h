/* passes/pass.h — the pass manager and every graph transformation.
 * Passes are declared once in passes.def; each lives in one file with one
 * entry point `int pass_<name>(ir_graph *g, const pass_options *o)` returning
 * 0 on success or -1 after reporting through o->diag.
 */
#ifndef TGC_PASS_H
#define TGC_PASS_H

#include "ir.h"

typedef struct {
  ir_diag *diag;          /* where passes report problems */
  bool verify_each;       /* run ir_verify after every pass; abort the pipeline on failure */
  bool time_passes;       /* print a timing table to time_out at the end */
  FILE *time_out;         /* default stderr */
  const char *dump_after; /* pass name, "all", or NULL: print the IR after it */
  FILE *dump_out;         /* where dumps go (default stdout) */
  int dump_format;        /* 0 text, 1 dot, 2 json */
} pass_options;

typedef enum {
#define PASS(id, name, fn, help) PASS_##id,
#include "passes.def"
#undef PASS
  PASS_COUNT
} pass_id;

typedef int (*pass_fn)(ir_graph *g, const pass_options *o);

const char *pass_name(pass_id p);
const char *pass_help(pass_id p);
int pass_lookup(const char *name);       /* -1 if unknown */

/* The pipeline `tgc run` and `tgc dump --after` use, in order. */
extern const pass_id pass_default_pipeline[];
extern const int pass_default_pipeline_len;

/* Runs the passes in order with o's dumping, verifying and timing.
 * Returns 0 or -1 (a pass failed or verification failed). */
int pass_run_pipeline(ir_graph *g, const pass_id *passes, int n, const pass_options *o);

#define PASS(id, name, fn, help) int fn(ir_graph *g, const pass_options *o);
#include "passes.def"
#undef PASS

#endif
