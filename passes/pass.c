/* passes/pass.c — the pass manager: the pass table from passes.def, the
 * default pipeline, and pass_run_pipeline, which runs passes in order and
 * around each one optionally dumps the IR (--dump-after NAME|all), verifies
 * it (verify_each) and times it (time_passes).
 *
 * Text dumps start with the comment line "# IR after <pass>" so that a dump
 * is still a valid textual IR module (the reader skips '#' comments); DOT
 * dumps get the same line as a '//' comment; JSON dumps get none.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir_clock.h"
#include "pass.h"

typedef struct {
  const char *name;
  const char *help;
  pass_fn fn;
} pass_entry;

static const pass_entry pass_table[PASS_COUNT] = {
#define PASS(id, nm, f, hl) [PASS_##id] = {nm, hl, f},
#include "passes.def"
#undef PASS
};

/* fuse-attention runs first, so autodiff differentiates the fused op (its VJP
 * is the fused backward) instead of the T x S primitives. fuse-transpose runs
 * after fuse-elementwise, so fused_matmul operands fold too and the
 * elementwise fusion never meets transpose_a / transpose_b. */
const pass_id pass_default_pipeline[] = {PASS_FUSE_ATTENTION, PASS_AUTODIFF,         PASS_CANONICALIZE, PASS_CHECKPOINT,
                                       PASS_SHARD,          PASS_FUSE_ELEMENTWISE, PASS_FUSE_TRANSPOSE, PASS_FUSE_LM_HEAD};
const int pass_default_pipeline_len = (int)(sizeof pass_default_pipeline / sizeof pass_default_pipeline[0]);

const char *pass_name(pass_id p) { return (unsigned)p < PASS_COUNT ? pass_table[p].name : "?"; }
const char *pass_help(pass_id p) { return (unsigned)p < PASS_COUNT ? pass_table[p].help : ""; }

int pass_lookup(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < PASS_COUNT; i++)
    if (strcmp(pass_table[i].name, name) == 0) return i;
  return -1;
}

void pass_dump_graph(const ir_graph *g, const char *pass, const pass_options *o) {
  FILE *out = o->dump_out ? o->dump_out : stdout;
  switch (o->dump_format) {
  case 1:
    fprintf(out, "// IR after %s\n", pass);
    ir_print_dot(out, g);
    break;
  case 2:
    ir_print_json(out, g);
    break;
  default:
    fprintf(out, "# IR after %s\n", pass);
    ir_print(out, g);
    break;
  }
  fflush(out);
}

typedef struct {
  pass_id pass;
  double ms;
  int nodes_before, nodes_after;
} pass_timing;

static void print_timings(FILE *out, const pass_timing *t, int n) {
  double total = 0;
  fprintf(out, "%-20s %12s %14s %13s\n", "pass", "wall ms", "nodes before", "nodes after");
  for (int i = 0; i < n; i++) {
    fprintf(out, "%-20s %12.3f %14d %13d\n", pass_name(t[i].pass), t[i].ms, t[i].nodes_before,
            t[i].nodes_after);
    total += t[i].ms;
  }
  fprintf(out, "%-20s %12.3f %14d %13d\n", "total", total, n ? t[0].nodes_before : 0,
          n ? t[n - 1].nodes_after : 0);
  fflush(out);
}

int pass_run_pipeline(ir_graph *g, const pass_id *passes, int n, const pass_options *o) {
  static const pass_options no_options;
  if (!o) o = &no_options;
  /* ir_verify and the passes report through a diag; make one if the caller gave none */
  ir_diag *own_diag = NULL;
  pass_options opts = *o;
  if (!opts.diag) opts.diag = own_diag = ir_diag_new(stderr);
  pass_timing *timings = n > 0 ? calloc((size_t)n, sizeof *timings) : NULL;
  if (n > 0 && !timings) {
    ir_error_plain(opts.diag, "out of memory in the pass manager");
    ir_diag_free(own_diag);
    return -1;
  }
  int rc = 0, ran = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    pass_id p = passes[i];
    if ((unsigned)p >= PASS_COUNT) {
      ir_error_plain(opts.diag, "unknown pass id %d in pipeline", (int)p);
      rc = -1;
      break;
    }
    if (opts.disabled && opts.disabled[p]) continue;
    timings[ran].pass = p;
    timings[ran].nodes_before = g->n_nodes;
    double t0 = (1e3 * ir_clock_s());
    int errors_before = ir_diag_errors(opts.diag);
    int prc = pass_table[p].fn(g, &opts);
    timings[ran].ms = (1e3 * ir_clock_s()) - t0;
    timings[ran].nodes_after = g->n_nodes;
    ran++;
    if (prc != 0) { /* the pass said why; a generic line only when it did not */
      if (ir_diag_errors(opts.diag) == errors_before) ir_error_plain(opts.diag, "pass '%s' failed", pass_name(p));
      rc = -1;
      break;
    }
    if (opts.dump_after && (strcmp(opts.dump_after, "all") == 0 || strcmp(opts.dump_after, pass_name(p)) == 0))
      pass_dump_graph(g, pass_name(p), &opts);
    if (opts.verify_each) {
      int problems = ir_verify(g, opts.diag);
      if (problems) {
        ir_error_plain(opts.diag, "IR verification failed after pass '%s' (%d problem%s)", pass_name(p),
                       problems, problems == 1 ? "" : "s");
        rc = -1;
      }
    }
  }
  if (opts.time_passes) print_timings(opts.time_out ? opts.time_out : stderr, timings, ran);
  free(timings);
  ir_diag_free(own_diag);
  return rc;
}
