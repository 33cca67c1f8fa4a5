/* tools/tool.h — shared between the files of the tgc command (not a layer:
 * the command may use every layer). */
#ifndef TGC_TOOL_H
#define TGC_TOOL_H

#include "frontend.h"
#include "ir.h"
#include "pass.h"
#include "runtime.h"

#define TOOL_MAX_FILE_BYTES (64u << 20) /* model files larger than this are refused */

/* Options common to every subcommand that compiles a model. */
typedef struct {
  const char *file;
  fe_options fe;
  fe_define defines[64];
  const char *after;       /* --after / --dump-after: pass name or "all" */
  int format;              /* 0 text, 1 dot, 2 json */
  bool verify_each, time_passes;
} tool_compile_opts;

/* Loads FILE (.tg through the frontend, .ir through the reader), verifies it.
 * *text_out keeps the source alive for diagnostics (free after the graph). */
ir_graph *tool_load(const tool_compile_opts *o, ir_diag *d, char **text_out);
/* Runs the default pipeline with o's dump/verify/time settings. */
int tool_run_passes(ir_graph *g, const tool_compile_opts *o, ir_diag *d, FILE *dump_out);

/* Parses one common option at argv[*i] (advancing *i past its value).
 * Returns 1 if consumed, 0 if not a common option, -1 on error (reported). */
int tool_parse_common(tool_compile_opts *o, int argc, char **argv, int *i, ir_diag *d);
/* "tgc: error: ..." and exit status 1 semantics are in the callers. */
int tool_cmd_run(int argc, char **argv);

#endif
