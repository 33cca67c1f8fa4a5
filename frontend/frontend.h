/* frontend/frontend.h — the .tg language: lexer (lexer.l), parser (parser.y),
 * AST (ast.c), and sema (sema.c: names, config constants, `repeat` unrolling,
 * inlining of user functions, shape checks) producing an ir_graph.
 * See docs/language.md for the language.
 */
#ifndef TGC_FRONTEND_H
#define TGC_FRONTEND_H

#include "ir.h"

typedef struct {
  const char *name;   /* config constant name */
  const char *value;  /* text as given on the command line ("512", "1e-5") */
} fe_define;

typedef struct {
  const char *config;        /* --config NAME, or NULL for the default */
  const fe_define *defines;  /* -D NAME=VALUE overrides */
  int n_defines;
  const char *entry;         /* --entry NAME, or NULL for the default */
} fe_options;

/* Compiles .tg source text into a graph. Every problem is reported through d
 * as "path:line:col: error: ..." with the source line and a caret (d gets the
 * source registered by this call); returns NULL if there was any error.
 * text must stay alive as long as d is used. */
ir_graph *fe_compile(const char *path, const char *text, size_t len, const fe_options *opt,
                     ir_diag *d);

/* Lists the config sets of a file (for `tgc check --list-configs` and help). */
int fe_list_configs(const char *path, const char *text, size_t len, ir_diag *d, FILE *out);

#endif
