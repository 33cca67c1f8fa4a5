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
  int max_layers;            /* > 0: the outermost `repeat` unrolls at most this many iterations (the
                              * layers' parameters and nodes of the first ones only: what the shard
                              * pass's search costs a model on, pass_tp_search); 0: all */
} fe_options;

/* Compiles .tg source text into a graph. Every problem is reported through d
 * as "path:line:col: error: ..." with the source line and a caret (d gets the
 * source registered by this call); returns NULL if there was any error.
 * text must stay alive as long as d is used. */
ir_graph *fe_compile(const char *path, const char *text, size_t len, const fe_options *opt,
                     ir_diag *d);

/* ---- configs as data (configs.c) ----
 * The config sets of a .tg file with their constants evaluated as
 * fe_compile binds them: in file order, each entry seeing the entries before
 * it, o's -D overrides applied to the chosen config. Nothing else of the file
 * is elaborated. What the tools ask a model's config (does it define B? what
 * is T?) is answered here, never by reading the source text themselves. */
typedef enum {
  FE_CONST_UNKNOWN, /* no number: an error fe_compile reports, or a -D value that is none */
  FE_CONST_INT,     /* i */
  FE_CONST_REAL,    /* f */
  FE_CONST_BOOL,    /* i: 0 or 1 */
} fe_const_kind;
typedef struct {
  const char *name;
  const char *text;    /* its expression as written in the file ("D / nH") */
  ir_loc loc;          /* where the entry is written */
  fe_const_kind kind;
  int64_t i;           /* INT and BOOL */
  double f;            /* the value as a real (every kind but UNKNOWN) */
  bool overridden;     /* the value is a -D's */
} fe_const;
typedef struct {
  const char *name;
  ir_loc loc;
  bool is_default;     /* chosen when no --config is given */
  const fe_const *consts; /* in file order */
  int n_consts;
} fe_config;
typedef struct {
  const fe_config *configs; /* in file order */
  int n_configs;
  const fe_config *chosen;  /* o->config ('-', '.' and '_' alike), else the default; NULL when the file has
                             * no config or none of that name */
  ir_arena *arena;          /* everything above lives in it */
} fe_config_set;
/* NULL when the file does not parse: the syntax errors are reported through
 * d, or, with d NULL, left for fe_compile to report. Problems of the values
 * (an unknown --config or -D name, a constant that is no number) are
 * fe_compile's to report; here they only make a constant UNKNOWN or chosen
 * NULL. The set holds copies of what it names; with d, text must live as long
 * as d is used (as for fe_compile). */
fe_config_set *fe_configs(const char *path, const char *text, size_t len, const fe_options *o, ir_diag *d);
void fe_config_set_free(fe_config_set *s);
/* Constant name of c; NULL when c is NULL or does not define it. */
const fe_const *fe_config_const(const fe_config *c, const char *name);

/* The .tg builtin functions by name, i = 0, 1, ... (NULL past the last; the
 * operator '%' is not among them): docs/language.md, "Every builtin and
 * operator", lists exactly these (unit.test_docs_lists). */
const char *fe_builtin_name(int i);

#endif
