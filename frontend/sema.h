/* frontend/sema.h — private interface between the elaboration files:
 *   sema.c      — fe_compile: items, lets, params, statements, `repeat`
 *                 unrolling, user-function inlining, returns and outputs
 *   configs.c   — choosing a config, binding it with -D; fe_configs
 *   sema_expr.c — expressions: compile-time constants, names, operators,
 *                 weak scalars, broadcasting checks, node building, dims/types
 *   builtins.c  — the builtin function table and its handlers
 *   symtab.c    — the hash table used for every scope
 *
 * Elaboration evaluates the syntax tree directly into the graph: every
 * expression yields an `sv` (a compile-time constant, a tensor value of the
 * graph, a list, ...). A POISON sv stands for "an error was already
 * reported here": every operation on it quietly yields POISON again, so one
 * mistake produces one message.
 */
#ifndef TGC_FE_SEMA_H
#define TGC_FE_SEMA_H

#include "ast.h"
#include "frontend.h"

#define FE_MAX_NODES 1000000L     /* graph nodes built (about 0.5 GB) */
#define FE_MAX_REPEAT 1000000     /* iterations of one `repeat` */
#define FE_MAX_CALL_DEPTH 100     /* nested user-function calls */
#define FE_MAX_SPLIT 65536        /* results of one split */
#define FE_MAX_SUGGESTIONS 100    /* did-you-mean searches stop after this many errors */

typedef enum {
  SV_POISON, /* an error was reported; propagate silently */
  SV_NONE,   /* no value (a function without return) */
  SV_INT,    /* compile-time integer: i */
  SV_FLOAT,  /* compile-time real: f */
  SV_BOOL,   /* compile-time bool: i (0/1) */
  SV_STR,    /* string literal: s */
  SV_DTYPE,  /* a dtype name: i (an ir_dtype) */
  SV_TENSOR, /* a graph value: t */
  SV_LIST,   /* [a, b, ...]: items[0..n) */
  SV_TUPLE   /* several results: items[0..n) */
} sv_kind;

typedef struct sv sv;
struct sv {
  sv_kind kind;
  int n;
  int64_t i;
  double f;
  const char *s;
  ir_value *t;
  sv *items;
};

static inline bool sv_is_const(sv v) {
  return v.kind == SV_INT || v.kind == SV_FLOAT || v.kind == SV_BOOL;
}
static inline double sv_num(sv v) { return v.kind == SV_FLOAT ? v.f : (double)v.i; }
static inline sv sv_poison(void) { return (sv){.kind = SV_POISON}; }
static inline sv sv_tensor(ir_value *t) { return (sv){.kind = SV_TENSOR, .t = t}; }
static inline sv sv_int(int64_t i) { return (sv){.kind = SV_INT, .i = i}; }
static inline sv sv_float(double f) { return (sv){.kind = SV_FLOAT, .f = f}; }
static inline sv sv_bool(bool b) { return (sv){.kind = SV_BOOL, .i = b}; }

/* ---- symtab.c ---- */
typedef enum {
  SYM_FREE,    /* an empty or removed slot */
  SYM_CONST,   /* config constant */
  SYM_LET,     /* let constant */
  SYM_PARAM,   /* parameter (global or local) */
  SYM_ARG,     /* function argument */
  SYM_LOCAL,   /* a name bound by `x = ...` */
  SYM_LOOPVAR, /* repeat variable */
  SYM_FN,      /* function (in the functions table) */
  SYM_CONFIG   /* config set (in the configs table) */
} sym_kind;

typedef struct {
  const char *name;
  sym_kind kind;
  const ast *decl; /* where it was defined (for "previous definition" notes) */
  sv val;
  int active;      /* SYM_FN: calls in progress (recursion check) */
} fe_sym;

typedef struct {
  fe_sym *slots;
  size_t cap, count;
} fe_symtab;

/* The live symbol named name, or NULL. */
fe_sym *fe_sym_find(const fe_symtab *t, const char *name);
/* The slot for name, inserted (kind SYM_FREE) when absent. The pointer is
 * valid until the next fe_sym_put on the same table. */
fe_sym *fe_sym_put(fe_symtab *t, const char *name);
void fe_symtab_free(fe_symtab *t);
const char *fe_sym_kind_name(sym_kind k); /* "param", "argument", ... */
/* Edit distance for did-you-mean hints, capped at limit + 1. */
int fe_edit_distance(const char *a, const char *b, int limit);

/* ---- the elaboration state ---- */
typedef struct fe_sema {
  ir_diag *d;
  ir_graph *g;
  ir_arena *arena;        /* scratch (lists, tuples, names), freed at the end */
  const char *file;       /* path for locations (lives as long as the graph) */
  const char *text;       /* source, for quoting expressions in messages */
  fe_symtab globals;      /* config constants, lets, global params */
  fe_symtab fns;          /* functions */
  fe_symtab *locals;      /* the current function instance, NULL at top level */
  char *path;             /* param name prefix: "l.0.block." (malloc'd) */
  size_t path_len, path_cap;
  int layer;              /* iteration index of the outermost repeat, -1 outside */
  int max_layers;         /* fe_options.max_layers */
  int call_depth;
  long n_stmts, n_nodes;
  bool aborted;           /* a size limit was hit: stop elaborating */
  bool const_only;        /* evaluating config/let values: no tensor ops */
  int errors;             /* every error, printed or deduplicated */
  int64_t *reported;      /* hash set of (line << 32 | col) already reported */
  size_t rep_cap, rep_count;
  /* Calls, dispatched by the layer above the expressions, which sets them
   * (sema.c; configs.c, whose constants call builtins alone): a user
   * function's instance (fe_call_user) and the builtins (fe_builtins). */
  sv (*call_user)(struct fe_sema *S, fe_sym *fn, const ast *call, const char *const *hints, int n_hints);
  const struct fe_builtin_table *builtins;
} fe_sema;

/* ---- diag.c ----
 * Reports at at's position unless an error was already reported there (the
 * same line is elaborated once per `repeat` iteration and per call).
 * Returns whether it printed. */
bool fe_error(fe_sema *S, const ast *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void fe_note(fe_sema *S, const ast *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
ir_loc fe_loc(const fe_sema *S, const ast *at);
/* Stops elaboration after a size limit, reporting once. */
void fe_abort(fe_sema *S, const ast *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- sema_expr.c ---- */
/* Evaluates e. hints[0..n_hints) name the results if new nodes produce them. */
sv fe_eval(fe_sema *S, const ast *e, const char *const *hints, int n_hints);
/* The source text of e, shortened, in the scratch arena. */
const char *fe_src(fe_sema *S, const ast *e);
/* "f32[2, 3]", "integer 3", "list", ... in the scratch arena. */
const char *fe_describe(fe_sema *S, sv v);
/* A constant as text ("3", "0.5", "true"). */
const char *fe_const_str(fe_sema *S, sv v);
/* Builds a node (ir_infer + ir_graph_add_node); type errors are reported at
 * at. Returns the tensor, a TUPLE for several results, or POISON. */
sv fe_build(fe_sema *S, const ast *at, ir_op op, ir_value *const *in, int n_in, const ir_attr *attrs,
            int n_attrs, const ir_type *out_type, const char *const *hints, int n_hints);
/* A constant as a rank-0 tensor of dtype dt (weak typing); POISON if it
 * does not fit (reported at at). */
sv fe_materialize(fe_sema *S, const ast *at, sv c, ir_dtype dt, const char *hint);
/* Whether constant c can be stored in dt: a float that rounds to Inf in
 * f32/bf16/f16, or an integer outside i32, is reported at `at`. */
bool fe_const_fits(fe_sema *S, const ast *at, sv c, ir_dtype dt);
/* Binary operation: constants fold, weak scalars adopt the tensor's dtype,
 * tensors must agree in dtype and broadcast. what names the operator in
 * messages ("'+'", "'maximum'"). */
sv fe_binary(fe_sema *S, const ast *at, ir_op op, const char *what, sv a, sv b, const char *hint);
/* Elementwise unary op; constants fold. */
sv fe_unary(fe_sema *S, const ast *at, ir_op op, const char *what, sv x, const char *hint);
sv fe_matmul(fe_sema *S, const ast *at, sv a, sv b, const char *hint);
/* A compile-time dimension (non-negative integer) from e. */
bool fe_eval_dim(fe_sema *S, const ast *e, int64_t *out);
/* The type an AST_TYPE denotes; false after reporting. */
bool fe_eval_type(fe_sema *S, const ast *type, ir_type *out);
/* The number of elements of dims, or -1 past IR_MAX_ELEMENTS. */
int64_t fe_numel(const int64_t *dims, int rank);
/* Looks a name up in the current function instance, then globals. */
fe_sym *fe_lookup(fe_sema *S, const char *name);

/* ---- builtins.c ----
 * The builtin functions, for the expressions to call through
 * fe_sema.builtins (builtins.c evaluates their arguments with
 * sema_expr.c: the table keeps the files from calling each other). */
typedef struct fe_builtin_table {
  bool (*is_builtin)(const char *name);
  sv (*call)(fe_sema *S, const ast *call, const char *const *hints, int n_hints);
  const char *(*suggest)(fe_sema *S, const char *name); /* closest builtin or user function name, or NULL */
} fe_builtin_table;
extern const fe_builtin_table fe_builtins;
bool fe_is_builtin(const char *name);

/* ---- sema.c ---- */
sv fe_call_user(fe_sema *S, fe_sym *fn, const ast *call, const char *const *hints, int n_hints);

/* ---- configs.c ---- */
/* The config named want ('-', '.' and '_' alike), or without want the one
 * named "default", else the first; NULL when the file has none, and, when
 * want names none, after reporting (with the names there are). */
const ast *fe_pick_config(fe_sema *S, const ast *items, const char *want, const char *path);
/* Checks opt's -D overrides (numbers naming constants of cfg: else each is
 * reported and false returned, binding nothing) and binds cfg's constants
 * into S->globals. */
bool fe_bind_config(fe_sema *S, const ast *cfg, const fe_options *opt);

#endif
