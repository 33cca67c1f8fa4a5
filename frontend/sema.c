/* frontend/sema.c — elaboration of a parsed .tg file into an ir_graph:
 * fe_compile (configs.c binds the chosen config's constants).
 *
 * Order of work (fe_compile):
 *   1. parse (ast.c); stop on any syntax error
 *   2. collect functions and configs (redefinitions reported with a note
 *      at the first definition); pick the entry function and the config
 *   3. bind the chosen config's constants (with -D overrides), then `let`s
 *   4. static checks of every function (duplicate arguments/params,
 *      `return` placement), so they are reported once, not per instance
 *   5. entry arguments become graph inputs, global params graph params
 *   6. run the entry body: statements execute in order, `repeat` unrolls,
 *      user-function calls are inlined in a fresh scope (lexical: callee
 *      sees globals, not the caller's locals); returned values become
 *      outputs
 * Errors are reported and poisoned; elaboration goes on, and the graph is
 * dropped at the end if anything was reported.
 *
 * Param naming: an instance path is kept while elaborating — "<var>.<i>."
 * per enclosing repeat iteration and "<fn>." per enclosing user call — and
 * prefixed to each `param` declared inside.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "sema.h"

static const char *article(const char *noun) { return strchr("aeiou", noun[0]) ? "an" : "a"; }

static void redefinition(fe_sema *S, const ast *at, sym_kind kind, const char *name, const fe_sym *prev) {
  bool printed;
  if (prev->kind == kind)
    printed = fe_error(S, at, "redefinition of %s '%s'", fe_sym_kind_name(kind), name);
  else
    printed = fe_error(S, at, "redefinition of '%s' as %s %s (it is already %s %s)", name,
                       article(fe_sym_kind_name(kind)), fe_sym_kind_name(kind), article(fe_sym_kind_name(prev->kind)),
                       fe_sym_kind_name(prev->kind));
  if (printed && prev->decl) fe_note(S, prev->decl, "previous definition of '%s' is here", name);
}

/* ---------------------------------------------------------------------- */
/* instance path (param names)                                             */
/* ---------------------------------------------------------------------- */

static void path_push(fe_sema *S, const char *s) {
  size_t n = strlen(s);
  if (S->path_len + n + 1 > S->path_cap) {
    S->path_cap = (S->path_len + n + 1) * 2;
    S->path = realloc(S->path, S->path_cap);
    if (!S->path) IR_DIE("out of memory (S->path)");
  }
  memcpy(S->path + S->path_len, s, n + 1);
  S->path_len += n;
}

static void path_pop(fe_sema *S, size_t len) {
  S->path_len = len;
  if (S->path) S->path[len] = 0;
}

/* ---------------------------------------------------------------------- */
/* params                                                                  */
/* ---------------------------------------------------------------------- */

static bool init_number(fe_sema *S, const ast *e, double *out) {
  sv v = fe_eval(S, e, NULL, 0);
  if (v.kind == SV_POISON) return false;
  if (v.kind != SV_INT && v.kind != SV_FLOAT) {
    fe_error(S, e, "initializer argument must be a number, got %s", fe_describe(S, v));
    return false;
  }
  *out = sv_num(v);
  return true;
}

/* xavier_uniform | xavier_normal | kaiming_uniform | kaiming_normal, each
 * with an optional gain (positional or gain=G): resolved here, from the
 * parameter's shape t, to uniform(-b, b) or normal(std) as PyTorch's
 * torch.nn.init does (Glorot 2010, He 2015):
 *   xavier_uniform  b = gain sqrt(6 / (fan_in + fan_out))      gain 1
 *   xavier_normal   std = gain sqrt(2 / (fan_in + fan_out))    gain 1
 *   kaiming_uniform b = gain sqrt(3 / fan_in)                  gain sqrt(2) (ReLU)
 *   kaiming_normal  std = gain / sqrt(fan_in)                  gain sqrt(2)
 * The fans: a weight [K, N] multiplies as x @ W (x [..., K]), so fan_in = K
 * and fan_out = N — PyTorch's numbers for the same layer, whose nn.Linear
 * stores the transpose [N, K]; for rank > 2 the leading dims are a batch of
 * such matrices (per-head weights) and do not count. Returns 0 when e is
 * none of these, 1 when resolved, -1 after an error (t NULL: the type was
 * wrong, and reported). */
static int parse_fan_init(fe_sema *S, const ast *e, const ir_type *t, ir_init *out) {
  static const char *const names[] = {"xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal"};
  int which = -1;
  for (int i = 0; i < 4; i++)
    if ((e->kind == AST_NAME || e->kind == AST_CALL) && strcmp(e->name, names[i]) == 0) which = i;
  if (which < 0) return 0;
  bool kaiming = which >= 2, uniform = which % 2 == 0;
  double gain = kaiming ? sqrt(2.0) : 1.0;
  int n_args = e->kind == AST_CALL ? e->n : 0;
  if (n_args > 1) {
    fe_error(S, e, "%s takes one optional argument, the gain (as %s(gain=1.0)), got %d", names[which], names[which], n_args);
    return -1;
  }
  if (n_args == 1) {
    const ast *g = e->kid[0];
    if (g->kind == AST_KWARG) {
      if (strcmp(g->name, "gain") != 0) {
        fe_error(S, g, "unknown attribute '%s' of %s (it takes gain=G)", g->name, names[which]);
        return -1;
      }
      g = g->kid[0];
    }
    if (!init_number(S, g, &gain)) return -1;
    if (!(gain >= 0)) {
      fe_error(S, g, "the gain of %s must be >= 0, got %g", names[which], gain);
      return -1;
    }
  }
  if (!t) return -1; /* the type is wrong, and was reported */
  if (t->rank < 2) {
    fe_error(S, e, "%s needs a parameter of rank >= 2 (its fans are those of a matrix [fan_in, fan_out]), "
             "got rank %d", names[which], t->rank);
    return -1;
  }
  double fan_in = (double)t->dims[t->rank - 2], fan_out = (double)t->dims[t->rank - 1];
  double denom = kaiming ? fan_in : (fan_in + fan_out) / 2;
  if (!(denom > 0)) {
    fe_error(S, e, "%s of a parameter with no elements in its fans (fan_in %g, fan_out %g)", names[which], fan_in, fan_out);
    return -1;
  }
  double std = gain / sqrt(denom);
  if (uniform) *out = (ir_init){.kind = IR_INIT_UNIFORM, .a = -sqrt(3.0) * std, .b = sqrt(3.0) * std};
  else *out = (ir_init){.kind = IR_INIT_NORMAL, .a = std};
  return 1;
}

/* zeros | ones | normal(std) | uniform(lo, hi) | the fan initializers above */
static bool parse_init(fe_sema *S, const ast *e, const ir_type *t, ir_init *out) {
  *out = (ir_init){.kind = IR_INIT_ZEROS};
  if (!e) return true;
  const char *n = e->name;
  int fan = parse_fan_init(S, e, t, out);
  if (fan != 0) return fan > 0;
  if (e->kind == AST_NAME && strcmp(n, "zeros") == 0) return true;
  if (e->kind == AST_NAME && strcmp(n, "ones") == 0) {
    out->kind = IR_INIT_ONES;
    return true;
  }
  bool kwargs = false;
  for (int i = 0; e->kind == AST_CALL && i < e->n; i++)
    if (e->kid[i]->kind == AST_KWARG) kwargs = true;
  if (e->kind == AST_CALL && !kwargs) {
    if ((strcmp(n, "zeros") == 0 || strcmp(n, "ones") == 0) && e->n == 0) {
      out->kind = n[0] == 'z' ? IR_INIT_ZEROS : IR_INIT_ONES;
      return true;
    }
    if (strcmp(n, "normal") == 0 && e->n == 1) {
      out->kind = IR_INIT_NORMAL;
      if (!init_number(S, e->kid[0], &out->a)) return false;
      if (!(out->a >= 0)) {
        fe_error(S, e->kid[0], "the std of normal() must be >= 0, got %g", out->a);
        return false;
      }
      return true;
    }
    if (strcmp(n, "uniform") == 0 && e->n == 2) {
      out->kind = IR_INIT_UNIFORM;
      if (!init_number(S, e->kid[0], &out->a) || !init_number(S, e->kid[1], &out->b)) return false;
      if (!(out->a <= out->b)) {
        fe_error(S, e, "uniform(lo, hi) needs lo <= hi, got %g and %g", out->a, out->b);
        return false;
      }
      return true;
    }
  }
  fe_error(S, e, "invalid initializer '%s': expected zeros, ones, normal(std), uniform(lo, hi), xavier_uniform, "
           "xavier_normal, kaiming_uniform or kaiming_normal", fe_src(S, e));
  return false;
}

static void declare_param(fe_sema *S, const ast *st, bool global) {
  ir_type t;
  ir_init init;
  bool ok = fe_eval_type(S, st->kid[0], &t);
  ok = parse_init(S, st->kid[1], ok ? &t : NULL, &init) && ok;
  sv v = sv_poison();
  if (ok) {
    size_t saved = S->path_len;
    path_push(S, st->name);
    v = sv_tensor(ir_graph_add_param(S->g, S->path, t, init, fe_loc(S, st)));
    path_pop(S, saved);
  }
  fe_symtab *tab = global ? &S->globals : S->locals;
  if (global) {
    fe_sym *prev = fe_sym_find(tab, st->name);
    if (prev) {
      redefinition(S, st, SYM_PARAM, st->name, prev);
      return;
    }
  }
  fe_sym *s = fe_sym_put(tab, st->name);
  s->kind = SYM_PARAM;
  s->decl = st;
  s->val = v;
}

/* ---------------------------------------------------------------------- */
/* statements                                                              */
/* ---------------------------------------------------------------------- */

static void exec_stmts(fe_sema *S, const ast *list);

static void bind_local(fe_sema *S, const ast *at, const char *name, sv v) {
  fe_sym *s = fe_sym_put(S->locals, name);
  s->kind = SYM_LOCAL;
  s->decl = at;
  s->val = v;
}

static void exec_assign(fe_sema *S, const ast *st) {
  const ast *targets = st->kid[0];
  int n = targets->n;
  const char *names_small[8] = {0}; /* the stack for the usual few names: the arena lives as long as the compile */
  const char **names = n <= 8 ? names_small : ir_arena_alloc(S->arena, (size_t)n * sizeof *names);
  bool bad = false;
  for (int i = 0; i < n; i++) {
    names[i] = targets->kid[i]->name;
    fe_sym *s = fe_sym_find(S->locals, names[i]);
    if (s && s->kind == SYM_LOOPVAR) {
      fe_error(S, targets->kid[i], "cannot assign to loop variable '%s'", names[i]);
      bad = true;
    }
  }
  sv v = fe_eval(S, st->kid[1], names, n);
  if (bad) return;
  if (v.kind == SV_NONE) {
    fe_error(S, st->kid[1], "'%s' gives no value (the function has no return)", fe_src(S, st->kid[1]));
    v = sv_poison();
  }
  if (n == 1) {
    if (v.kind == SV_TUPLE) {
      fe_error(S, st->kid[1], "'%s' gives %d values but 1 name is bound; write 'a, b = ...'",
               fe_src(S, st->kid[1]), v.n);
      v = sv_poison();
    }
    bind_local(S, targets->kid[0], names[0], v);
    return;
  }
  if (v.kind != SV_POISON && (v.kind != SV_TUPLE || v.n != n)) {
    fe_error(S, st->kid[1], "'%s' gives %d value%s but %d names are bound", fe_src(S, st->kid[1]),
             v.kind == SV_TUPLE ? v.n : 1, v.kind == SV_TUPLE && v.n != 1 ? "s" : "", n);
    v = sv_poison();
  }
  for (int i = 0; i < n; i++)
    bind_local(S, targets->kid[i], names[i], v.kind == SV_TUPLE ? v.items[i] : sv_poison());
}

static bool const_int(fe_sema *S, const ast *e, const char *what, int64_t *out) {
  sv v = fe_eval(S, e, NULL, 0);
  if (v.kind == SV_POISON) return false;
  if (v.kind != SV_INT) {
    fe_error(S, e, "%s must be a compile-time integer, got %s", what, fe_describe(S, v));
    return false;
  }
  *out = v.i;
  return true;
}

static void exec_repeat(fe_sema *S, const ast *st) {
  int64_t lo = 0, hi, count;
  if (st->name) {
    bool ok = const_int(S, st->kid[0], "the start of the repeat range", &lo);
    if (!const_int(S, st->kid[1], "the end of the repeat range", &hi) || !ok) return;
    if (hi < lo) {
      fe_error(S, st->kid[0], "repeat range %lld..%lld is reversed", (long long)lo, (long long)hi);
      return;
    }
  } else {
    if (!const_int(S, st->kid[1], "the repeat count", &hi)) return;
    if (hi < 0) {
      fe_error(S, st->kid[1], "the repeat count is negative: %lld", (long long)hi);
      return;
    }
  }
  if (__builtin_sub_overflow(hi, lo, &count) || count > FE_MAX_REPEAT) {
    fe_error(S, st->kid[1], "repeat count %s is too large (the limit is %d)",
             __builtin_sub_overflow(hi, lo, &count) ? "(overflow)" : fe_const_str(S, sv_int(count)),
             FE_MAX_REPEAT);
    return;
  }
  const char *var = st->name;
  fe_sym saved_sym = {0};
  bool had = false;
  if (var) {
    fe_sym *old = fe_sym_find(S->locals, var);
    if (old) {
      saved_sym = *old;
      had = true;
    }
  }
  bool outermost = S->layer < 0;
  if (outermost && S->max_layers > 0 && count > S->max_layers) hi = lo + S->max_layers; /* fe_options.max_layers */
  size_t saved_path = S->path_len;
  char seg[96];
  for (int64_t i = lo; i < hi && !S->aborted; i++) {
    if (++S->n_stmts > FE_MAX_STMTS) { /* empty bodies must not loop forever */
      fe_abort(S, st, "program too large: more than %ld statements after unrolling and inlining", FE_MAX_STMTS);
      break;
    }
    if (var) {
      fe_sym *s = fe_sym_put(S->locals, var);
      s->kind = SYM_LOOPVAR;
      s->decl = st;
      s->val = sv_int(i);
      snprintf(seg, sizeof seg, "%.60s.%lld.", var, (long long)i);
    } else {
      snprintf(seg, sizeof seg, "%lld.", (long long)i);
    }
    path_push(S, seg);
    if (outermost) S->layer = (int)(i - lo);
    exec_stmts(S, st->kid[2]);
    path_pop(S, saved_path);
  }
  if (outermost) S->layer = -1;
  if (var) {
    fe_sym *s = fe_sym_put(S->locals, var);
    if (had) *s = saved_sym;
    else s->kind = SYM_FREE;
  }
}

static void exec_stmt(fe_sema *S, const ast *st) {
  if (S->aborted) return;
  if (++S->n_stmts > FE_MAX_STMTS) {
    fe_abort(S, st, "program too large: more than %ld statements after unrolling and inlining", FE_MAX_STMTS);
    return;
  }
  switch (st->kind) {
  case AST_ASSIGN: exec_assign(S, st); break;
  case AST_PARAM: declare_param(S, st, false); break;
  case AST_REPEAT: exec_repeat(S, st); break;
  default: break; /* a misplaced return was reported by the static check */
  }
}

static void exec_stmts(fe_sema *S, const ast *list) {
  for (int i = 0; i < list->n && !S->aborted; i++) exec_stmt(S, list->kid[i]);
}

/* ---------------------------------------------------------------------- */
/* functions                                                               */
/* ---------------------------------------------------------------------- */

/* Checks results against the declared types; constants become tensors of
 * the declared dtype. */
static void check_results(fe_sema *S, const ast *fn, const ast *ret, sv *vals, int n, const char *const *hints) {
  const ast *r = fn->kid[1];
  if (!r) return;
  int nr = r->kind == AST_TYPE ? 1 : r->n;
  if (nr != n) {
    fe_error(S, ret, "'%s' returns %d value%s but its declared result has %d", fn->name, n, n == 1 ? "" : "s", nr);
    for (int i = 0; i < n; i++) vals[i] = sv_poison();
    return;
  }
  for (int i = 0; i < n; i++) {
    const ast *t_ast = r->kind == AST_TYPE ? r : (r->kid[i]->kind == AST_ARG ? r->kid[i]->kid[0] : r->kid[i]);
    ir_type t;
    if (vals[i].kind == SV_POISON || !fe_eval_type(S, t_ast, &t)) continue;
    const ast *at = ret->kid[0]->kid[i];
    char want[300];
    ir_type_str(&t, want, sizeof want);
    if (sv_is_const(vals[i]) && t.rank == 0) {
      vals[i] = fe_materialize(S, at, vals[i], t.dtype, hints ? hints[i] : NULL);
    } else if (vals[i].kind != SV_TENSOR || !ir_type_equal(&vals[i].t->type, &t)) {
      fe_error(S, at, "result %d of '%s' is %s, but the declared type is %s", i + 1, fn->name,
               fe_describe(S, vals[i]), want);
      vals[i] = sv_poison();
    }
  }
}

/* Runs fn's body in the current scope; returns its result(s). */
static sv run_body(fe_sema *S, const ast *fn, const char *const *hints, int n_hints, sv **vals_out, int *n_out) {
  const ast *body = fn->kid[2];
  int n = body->n;
  const ast *ret = n > 0 && body->kid[n - 1]->kind == AST_RETURN ? body->kid[n - 1] : NULL;
  for (int i = 0; i < n - (ret != NULL) && !S->aborted; i++) exec_stmt(S, body->kid[i]);
  *n_out = 0;
  if (!ret || S->aborted) return ret ? sv_poison() : (sv){.kind = SV_NONE};
  const ast *exprs = ret->kid[0];
  int m = exprs->n;
  sv *vals = ir_arena_alloc(S->arena, (size_t)m * sizeof *vals);
  for (int i = 0; i < m; i++) {
    const char *h = i < n_hints ? hints[i] : NULL;
    vals[i] = fe_eval(S, exprs->kid[i], &h, h ? 1 : 0);
    if (vals[i].kind == SV_TUPLE || vals[i].kind == SV_NONE) {
      fe_error(S, exprs->kid[i], "cannot return %s as one result", fe_describe(S, vals[i]));
      vals[i] = sv_poison();
    }
  }
  check_results(S, fn, ret, vals, m, n_hints >= m ? hints : NULL);
  *vals_out = vals;
  *n_out = m;
  if (m == 1) return vals[0];
  return (sv){.kind = SV_TUPLE, .n = m, .items = vals};
}

/* Whether name means something in the current scope (a symbol, a
 * predefined name, a dtype, a function): else it may be a symbolic dim. */
static bool names_something(fe_sema *S, const char *n) {
  return fe_lookup(S, n) || strcmp(n, "pi") == 0 || strcmp(n, "e") == 0 || strcmp(n, "true") == 0 ||
         strcmp(n, "false") == 0 || ir_dtype_from_name(n) >= 0 || fe_sym_find(&S->fns, n) || fe_is_builtin(n);
}

/* Symbolic dims (fn rope(x: f32[B, H, T, E])): a dim of an argument's type
 * that is a bare name meaning nothing in the callee's scope (no config
 * constant, let or predefined name) is bound, at this call, to the size the
 * argument has there, as a compile-time integer of the callee's scope (in
 * its body and result type too); the first argument that has it binds it.
 * The declared types are then checked as usual with the bound values, so
 * another argument with another size there is a type mismatch. An argument
 * whose rank differs from its declared type's is reported here (its
 * symbolic dims cannot be bound): *bad_rank[i]. `bound` receives "B = 2,
 * T = 16" for the messages. */
static void bind_symbolic_dims(fe_sema *S, const ast *fn, const ast *call, const sv *vals, bool *bad_rank,
                               char *bound, size_t cap) {
  const ast *args = fn->kid[0];
  size_t len = 0;
  bound[0] = 0;
  for (int i = 0; i < args->n; i++) {
    const ast *type = args->kid[i]->kid[0], *dims = type->kid[0];
    bad_rank[i] = false;
    if (!dims) continue;
    bool symbolic = false;
    for (int j = 0; j < dims->n; j++)
      symbolic |= dims->kid[j]->kind == AST_NAME && !names_something(S, dims->kid[j]->name);
    if (!symbolic) continue;
    if (vals[i].kind != SV_TENSOR || vals[i].t->type.rank != dims->n) {
      fe_error(S, call->kid[i], "argument '%s' of '%s' is %s, but its declared type %s has rank %d", args->kid[i]->name,
               fn->name, fe_describe(S, vals[i]), fe_src(S, type), dims->n);
      bad_rank[i] = true;
      continue;
    }
    for (int j = 0; j < dims->n; j++) {
      const ast *d = dims->kid[j];
      if (d->kind != AST_NAME || names_something(S, d->name)) continue;
      fe_sym *s = fe_sym_put(S->locals, d->name);
      s->kind = SYM_LET;
      s->decl = d;
      s->val = sv_int(vals[i].t->type.dims[j]);
      if (len < cap)
        len += (size_t)snprintf(bound + len, cap - len, "%s%s = %lld", len ? ", " : "", d->name,
                                (long long)vals[i].t->type.dims[j]);
    }
  }
}

sv fe_call_user(fe_sema *S, fe_sym *fn_sym, const ast *call, const char *const *hints, int n_hints) {
  const ast *fn = fn_sym->decl, *args = fn->kid[0];
  int n = 0;
  for (int i = 0; i < call->n; i++) {
    if (call->kid[i]->kind == AST_KWARG) {
      fe_error(S, call->kid[i], "keyword argument '%s' in a call of '%s' (user functions take positional "
               "arguments only)", call->kid[i]->name, fn->name);
      return sv_poison();
    }
    n++;
  }
  if (n != args->n) {
    fe_error(S, call, "wrong number of arguments to '%s': expected %d, got %d", fn->name, args->n, n);
    return sv_poison();
  }
  if (fn_sym->active) {
    if (fe_error(S, call, "recursive call of '%s' (functions are inlined, so recursion is not allowed)",
                 fn->name))
      fe_note(S, fn, "'%s' is defined here", fn->name);
    return sv_poison();
  }
  if (++S->n_stmts > FE_MAX_STMTS) { /* a call counts as a statement: bodies may be empty */
    fe_abort(S, call, "program too large: more than %ld statements after unrolling and inlining", FE_MAX_STMTS);
    return sv_poison();
  }
  if (S->call_depth >= FE_MAX_CALL_DEPTH) {
    fe_error(S, call, "calls nested too deeply (more than %d levels)", FE_MAX_CALL_DEPTH);
    return sv_poison();
  }
  sv *vals = ir_arena_alloc(S->arena, (size_t)(n ? n : 1) * sizeof *vals);
  bool bad = false;
  for (int i = 0; i < n; i++) {
    vals[i] = fe_eval(S, call->kid[i], NULL, 0);
    if (vals[i].kind == SV_POISON) bad = true;
  }
  if (bad || S->aborted) return sv_poison();

  fe_symtab locals = {0}, *saved_locals = S->locals;
  size_t saved_path = S->path_len;
  S->locals = &locals;
  path_push(S, fn->name);
  path_push(S, ".");
  fn_sym->active++;
  S->call_depth++;
  bool *bad_rank = ir_arena_alloc(S->arena, (size_t)(n ? n : 1) * sizeof *bad_rank);
  char bound[256];
  bind_symbolic_dims(S, fn, call, vals, bad_rank, bound, sizeof bound);
  for (int i = 0; i < n; i++) {
    const ast *arg = args->kid[i], *at = call->kid[i];
    ir_type t;
    sv v = vals[i];
    if (bad_rank[i] || !fe_eval_type(S, arg->kid[0], &t)) {
      v = sv_poison();
    } else if (sv_is_const(v) && t.rank == 0) {
      v = fe_materialize(S, at, v, t.dtype, arg->name);
    } else if (v.kind != SV_TENSOR || !ir_type_equal(&v.t->type, &t)) {
      char want[300];
      ir_type_str(&t, want, sizeof want);
      fe_error(S, at, "argument '%s' of '%s' is %s, but its declared type is %s%s%s%s", arg->name, fn->name,
               fe_describe(S, v), want, bound[0] ? " (" : "", bound, bound[0] ? " bound at this call)" : "");
      v = sv_poison();
    }
    fe_sym *s = fe_sym_put(&locals, arg->name);
    s->kind = SYM_ARG;
    s->decl = arg;
    s->val = v;
  }
  sv *rv;
  int rn;
  sv r = run_body(S, fn, hints, n_hints, &rv, &rn);
  S->call_depth--;
  fn_sym->active--;
  path_pop(S, saved_path);
  S->locals = saved_locals;
  fe_symtab_free(&locals);
  return r;
}

/* ---------------------------------------------------------------------- */
/* static checks (once per function, not per instance)                    */
/* ---------------------------------------------------------------------- */

static void check_block(fe_sema *S, fe_symtab *names, const ast *list, bool top) {
  for (int i = 0; i < list->n; i++) {
    const ast *st = list->kid[i];
    if (st->kind == AST_PARAM) {
      fe_sym *s = fe_sym_put(names, st->name);
      if (s->kind != SYM_FREE) {
        redefinition(S, st, SYM_PARAM, st->name, s);
      } else {
        s->kind = SYM_PARAM;
        s->decl = st;
      }
    } else if (st->kind == AST_REPEAT) {
      check_block(S, names, st->kid[2], false);
    } else if (st->kind == AST_RETURN) {
      if (!top) fe_error(S, st, "'return' cannot be inside 'repeat'");
      else if (i != list->n - 1) fe_error(S, st, "'return' must be the last statement of a function");
    }
  }
}

static void check_fn(fe_sema *S, const ast *fn) {
  fe_symtab names = {0};
  const ast *args = fn->kid[0], *ret = fn->kid[1], *body = fn->kid[2];
  for (int i = 0; i < args->n; i++) {
    fe_sym *s = fe_sym_put(&names, args->kid[i]->name);
    if (s->kind != SYM_FREE) {
      redefinition(S, args->kid[i], SYM_ARG, args->kid[i]->name, s);
    } else {
      s->kind = SYM_ARG;
      s->decl = args->kid[i];
    }
  }
  check_block(S, &names, body, true);
  fe_symtab_free(&names);
  if (ret && ret->kind == AST_LIST) {
    fe_symtab rn = {0};
    for (int i = 0; i < ret->n; i++) {
      if (ret->kid[i]->kind != AST_ARG) continue;
      fe_sym *s = fe_sym_put(&rn, ret->kid[i]->name);
      if (s->kind != SYM_FREE) {
        if (fe_error(S, ret->kid[i], "duplicate result name '%s'", ret->kid[i]->name))
          fe_note(S, s->decl, "previous definition of '%s' is here", ret->kid[i]->name);
      } else {
        s->kind = SYM_LOCAL;
        s->decl = ret->kid[i];
      }
    }
    fe_symtab_free(&rn);
  }
  if (ret && (body->n == 0 || body->kid[body->n - 1]->kind != AST_RETURN))
    fe_error(S, fn, "function '%s' declares a result but does not end with 'return'", fn->name);
}

/* ---------------------------------------------------------------------- */
/* configs, lets                                                          */
/* ---------------------------------------------------------------------- */

/* Duplicate configs and duplicate constants inside one config. */
static void check_configs(fe_sema *S, const ast *items) {
  fe_symtab cfgs = {0};
  for (int i = 0; i < items->n; i++) {
    const ast *it = items->kid[i];
    if (it->kind != AST_CONFIG) continue;
    fe_sym *s = fe_sym_put(&cfgs, it->name);
    if (s->kind != SYM_FREE) {
      redefinition(S, it, SYM_CONFIG, it->name, s);
    } else {
      s->kind = SYM_CONFIG;
      s->decl = it;
    }
    fe_symtab keys = {0};
    for (int k = 0; k < it->kid[0]->n; k++) {
      const ast *e = it->kid[0]->kid[k];
      fe_sym *ks = fe_sym_put(&keys, e->name);
      if (ks->kind != SYM_FREE) {
        redefinition(S, e, SYM_CONST, e->name, ks);
      } else {
        ks->kind = SYM_CONST;
        ks->decl = e;
      }
    }
    fe_symtab_free(&keys);
  }
  fe_symtab_free(&cfgs);
}

static void bind_let(fe_sema *S, const ast *it) {
  sv v = fe_eval(S, it->kid[0], NULL, 0);
  if (v.kind != SV_POISON && !sv_is_const(v)) {
    fe_error(S, it->kid[0], "'let %s' must be a compile-time number, got %s", it->name, fe_describe(S, v));
    v = sv_poison();
  }
  fe_sym *prev = fe_sym_find(&S->globals, it->name);
  if (prev) {
    redefinition(S, it, SYM_LET, it->name, prev);
    return;
  }
  fe_sym *s = fe_sym_put(&S->globals, it->name);
  s->kind = SYM_LET;
  s->decl = it;
  s->val = v;
}

/* ---------------------------------------------------------------------- */
/* fe_compile                                                              */
/* ---------------------------------------------------------------------- */

static void elaborate(fe_sema *S, const ast *items, const fe_options *opt, const char *path) {
  S->max_layers = opt->max_layers;
  /* functions */
  const ast *last_fn = NULL;
  for (int i = 0; i < items->n; i++) {
    const ast *it = items->kid[i];
    if (it->kind != AST_FN) continue;
    last_fn = it;
    fe_sym *s = fe_sym_put(&S->fns, it->name);
    if (s->kind != SYM_FREE) {
      redefinition(S, it, SYM_FN, it->name, s);
      continue;
    }
    s->kind = SYM_FN;
    s->decl = it;
  }
  check_configs(S, items);
  const ast *cfg = NULL;
  bool have_cfg = false;
  for (int i = 0; i < items->n; i++) have_cfg |= items->kid[i]->kind == AST_CONFIG;
  if (have_cfg || opt->config) {
    cfg = fe_pick_config(S, items, opt->config, path);
    if (!cfg) return;
  }
  fe_sym *entry_sym = NULL;
  const char *entry_name = opt->entry ? opt->entry : fe_sym_find(&S->fns, "main") ? "main" : NULL;
  if (entry_name) entry_sym = fe_sym_find(&S->fns, entry_name);
  else if (last_fn) entry_sym = fe_sym_find(&S->fns, last_fn->name);
  if (!entry_sym) {
    if (opt->entry) ir_error_plain(S->d, "--entry %s: %s has no function named '%s'", opt->entry, path, opt->entry);
    else ir_error(S->d, (ir_loc){path, 0, 0}, "no function to compile (the file defines none)");
    S->errors++;
    return;
  }
  const ast *entry = entry_sym->decl;
  S->g = ir_graph_new(entry->name, path);
  S->file = S->g->source_file;

  S->const_only = true;
  if (!fe_bind_config(S, cfg, opt)) return;
  for (int i = 0; i < items->n; i++)
    if (items->kid[i]->kind == AST_LET) bind_let(S, items->kid[i]);
  S->const_only = false;
  for (int i = 0; i < items->n; i++)
    if (items->kid[i]->kind == AST_FN) check_fn(S, items->kid[i]);

  /* entry arguments -> inputs */
  fe_symtab locals = {0};
  S->locals = &locals;
  const ast *args = entry->kid[0];
  for (int i = 0; i < args->n; i++) {
    const ast *a = args->kid[i];
    ir_type t;
    sv v = sv_poison();
    if (fe_eval_type(S, a->kid[0], &t)) v = sv_tensor(ir_graph_add_input(S->g, a->name, t, fe_loc(S, a)));
    if (fe_sym_find(&locals, a->name)) continue; /* duplicate: reported by check_fn */
    fe_sym *s = fe_sym_put(&locals, a->name);
    s->kind = SYM_ARG;
    s->decl = a;
    s->val = v;
  }
  /* global params */
  S->locals = NULL;
  for (int i = 0; i < items->n; i++)
    if (items->kid[i]->kind == AST_PARAM) declare_param(S, items->kid[i], true);
  S->locals = &locals;

  /* output names: declared result names, else returned bare names, else out<i> */
  const ast *body = entry->kid[2], *ret = entry->kid[1];
  const ast *rs = body->n > 0 && body->kid[body->n - 1]->kind == AST_RETURN ? body->kid[body->n - 1] : NULL;
  int m = rs ? rs->kid[0]->n : 0;
  const char **names = ir_arena_alloc(S->arena, (size_t)(m ? m : 1) * sizeof *names);
  for (int i = 0; i < m; i++) {
    const ast *e = rs->kid[0]->kid[i];
    if (ret && ret->kind == AST_LIST && i < ret->n && ret->kid[i]->kind == AST_ARG) {
      names[i] = ret->kid[i]->name;
    } else if (e->kind == AST_NAME) {
      names[i] = e->name;
    } else {
      char buf[32];
      snprintf(buf, sizeof buf, "out%d", i);
      names[i] = ir_arena_strdup(S->arena, buf);
    }
  }
  entry_sym->active++;
  sv *vals = NULL;
  int n_vals = 0;
  run_body(S, entry, names, m, &vals, &n_vals);
  entry_sym->active--;
  fe_symtab outs = {0};
  for (int i = 0; i < n_vals && !S->aborted; i++) {
    const ast *at = rs->kid[0]->kid[i];
    sv v = vals[i];
    if (sv_is_const(v)) {
      ir_dtype dt = v.kind == SV_FLOAT ? IR_DT_F32 : v.kind == SV_BOOL ? IR_DT_BOOL : IR_DT_I32;
      v = fe_materialize(S, at, v, dt, names[i]);
    }
    if (v.kind == SV_POISON) continue;
    if (v.kind != SV_TENSOR) {
      fe_error(S, at, "cannot return %s from the entry function", fe_describe(S, v));
      continue;
    }
    fe_sym *s = fe_sym_put(&outs, names[i]);
    if (s->kind != SYM_FREE) {
      fe_error(S, at, "output '%s' is returned twice", names[i]);
      continue;
    }
    s->kind = SYM_LOCAL;
    ir_graph_add_output(S->g, names[i], v.t);
  }
  fe_symtab_free(&outs);
  S->locals = NULL;
  fe_symtab_free(&locals);
}

static void sema_free(fe_sema *S) {
  fe_symtab_free(&S->globals);
  fe_symtab_free(&S->fns);
  free(S->path);
  free(S->reported);
  ir_arena_free(S->arena);
}

ir_graph *fe_compile(const char *path, const char *text, size_t len, const fe_options *opt, ir_diag *d) {
  static const fe_options no_options;
  if (!opt) opt = &no_options;
  if (!path) path = "<input>";
  if (!text) text = "";
  int errors_before = ir_diag_errors(d);
  ir_diag_add_source(d, path, text, len);
  fe_sema S = {.d = d, .arena = ir_arena_new(), .file = path, .text = text, .layer = -1, .call_user = fe_call_user,
               .builtins = &fe_builtins};
  fe_parser P = {.arena = S.arena, .d = d, .path = path, .text = text, .len = len};
  const ast *items = fe_parse(&P);
  if (items) elaborate(&S, items, opt, path);
  ir_graph *g = S.g;
  if (!items || S.errors || ir_diag_errors(d) > errors_before) {
    ir_graph_free(g);
    g = NULL;
  }
  sema_free(&S);
  return g;
}
