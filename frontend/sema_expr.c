/* frontend/sema_expr.c — elaboration of expressions.
 *
 * fe_eval walks an expression tree and returns an sv. Numbers stay
 * compile-time constants (int64 exact with overflow checks, `/` exact when
 * it divides, else double) until they meet a tensor; then fe_materialize
 * turns them into a rank-0 `const` node of that tensor's dtype ("weak"
 * scalars, as in JAX). Tensor operands of an operator must agree in dtype
 * (no implicit promotion) and broadcast numpy-style; both are checked here
 * first so messages name the operator as written ('+', '@'); everything
 * else about an op's typing is ir_infer's job, whose message is reported at
 * the expression. Every node built gets the expression's line:col and the
 * current `repeat` layer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "sema.h"

#define FE_PI 3.14159265358979323846
#define FE_E 2.71828182845904523536

/* ---------------------------------------------------------------------- */
/* text helpers                                                            */
/* ---------------------------------------------------------------------- */

const char *fe_src(fe_sema *S, const ast *e) {
  int n = e->end - e->start;
  if (n < 0) n = 0;
  bool cut = n > 60;
  if (cut) n = 57;
  char *s = ir_arena_alloc(S->arena, (size_t)n + 4);
  for (int i = 0; i < n; i++) {
    char c = S->text[e->start + i];
    s[i] = c == '\n' || c == '\t' || c == '\r' ? ' ' : c;
  }
  if (cut) memcpy(s + n, "...", 3);
  return s;
}

const char *fe_const_str(fe_sema *S, sv v) {
  char buf[64];
  if (v.kind == SV_INT) snprintf(buf, sizeof buf, "%lld", (long long)v.i);
  else if (v.kind == SV_FLOAT) snprintf(buf, sizeof buf, "%.10g", v.f);
  else if (v.kind == SV_BOOL) snprintf(buf, sizeof buf, "%s", v.i ? "true" : "false");
  else snprintf(buf, sizeof buf, "?");
  return ir_arena_strdup(S->arena, buf);
}

const char *fe_describe(fe_sema *S, sv v) {
  char buf[300];
  switch (v.kind) {
  case SV_TENSOR: ir_type_str(&v.t->type, buf, sizeof buf); break;
  case SV_INT: snprintf(buf, sizeof buf, "integer %s", fe_const_str(S, v)); break;
  case SV_FLOAT: snprintf(buf, sizeof buf, "number %s", fe_const_str(S, v)); break;
  case SV_BOOL: snprintf(buf, sizeof buf, "bool %s", fe_const_str(S, v)); break;
  case SV_STR: snprintf(buf, sizeof buf, "a string"); break;
  case SV_DTYPE: snprintf(buf, sizeof buf, "dtype %s", ir_dtype_name((ir_dtype)v.i)); break;
  case SV_LIST: snprintf(buf, sizeof buf, "a list"); break;
  case SV_TUPLE: snprintf(buf, sizeof buf, "%d values", v.n); break;
  case SV_NONE: snprintf(buf, sizeof buf, "no value"); break;
  case SV_POISON: snprintf(buf, sizeof buf, "an invalid value"); break;
  }
  return ir_arena_strdup(S->arena, buf);
}

static const char *type_str(fe_sema *S, const ir_type *t) {
  char buf[300];
  ir_type_str(t, buf, sizeof buf);
  return ir_arena_strdup(S->arena, buf);
}

int64_t fe_numel(const int64_t *dims, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    if (dims[i] > IR_MAX_ELEMENTS || dims[i] < 0) return -1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] == 0) return 0;
    if (n > IR_MAX_ELEMENTS / dims[i]) return -1;
    n *= dims[i];
  }
  return n;
}

/* ---------------------------------------------------------------------- */
/* node building                                                           */
/* ---------------------------------------------------------------------- */

sv fe_build(fe_sema *S, const ast *at, ir_op op, ir_value *const *in, int n_in, const ir_attr *attrs,
            int n_attrs, const ir_type *out_type, const char *const *hints, int n_hints) {
  if (S->aborted) return sv_poison();
  if (S->const_only || !S->g) {
    fe_error(S, at, "'%s' is not a compile-time constant expression", fe_src(S, at));
    return sv_poison();
  }
  int max_out = op == IR_OP_GRAD ? n_in : op == IR_OP_FUSED ? IR_FUSED_MAX_RESULTS : 1;
  if (op == IR_OP_SPLIT)
    for (int i = 0; i < n_attrs; i++)
      if (strcmp(attrs[i].key, "sizes") == 0 && attrs[i].n > max_out) max_out = attrs[i].n;
  ir_type out_small[2], in_small[4];
  ir_type *out = max_out <= 2 ? out_small : ir_arena_alloc(S->arena, (size_t)max_out * sizeof *out);
  ir_type *in_t = n_in <= 4 ? in_small : ir_arena_alloc(S->arena, (size_t)n_in * sizeof *in_t);
  for (int i = 0; i < n_in; i++) in_t[i] = in[i]->type;
  if (out_type) out[0] = *out_type;
  char err[512];
  int n_out = 0;
  if (ir_infer(op, in_t, n_in, attrs, n_attrs, out, &n_out, err, sizeof err) < 0) {
    fe_error(S, at, "%s", err);
    return sv_poison();
  }
  if (++S->n_nodes > FE_MAX_NODES) {
    fe_abort(S, at, "program too large: more than %ld operations after unrolling and inlining",
             FE_MAX_NODES);
    return sv_poison();
  }
  const char **names = NULL, *names_small[2] = {NULL, NULL};
  if (n_hints > 0) {
    names = n_out <= 2 ? names_small : ir_arena_alloc(S->arena, (size_t)n_out * sizeof *names);
    for (int i = 0; i < n_out && i < n_hints; i++) names[i] = hints[i];
  }
  ir_node *nd = ir_graph_add_node(S->g, op, in, n_in, out, n_out, attrs, n_attrs,
                                  (const char *const *)names, fe_loc(S, at));
  nd->layer = S->layer;
  if (n_out == 1) return sv_tensor(nd->out[0]);
  sv r = {.kind = SV_TUPLE, .n = n_out};
  r.items = ir_arena_alloc(S->arena, (size_t)n_out * sizeof *r.items);
  for (int i = 0; i < n_out; i++) r.items[i] = sv_tensor(nd->out[i]);
  return r;
}

static sv build1(fe_sema *S, const ast *at, ir_op op, ir_value *x, const char *hint) {
  return fe_build(S, at, op, &x, 1, NULL, 0, NULL, &hint, 1);
}

bool fe_const_fits(fe_sema *S, const ast *at, sv c, ir_dtype dt) {
  double v = sv_num(c);
  if (ir_dtype_is_float(dt) && isinf(ir_round_to_dtype(dt, v))) {
    fe_error(S, at, "the constant %s is out of range for %s (it would be %s)", fe_const_str(S, c), ir_dtype_name(dt),
             v > 0 ? "inf" : "-inf");
    return false;
  }
  if (dt == IR_DT_I32 && c.kind == SV_INT && (c.i < INT32_MIN || c.i > INT32_MAX)) {
    fe_error(S, at, "the integer %lld does not fit in i32", (long long)c.i);
    return false;
  }
  return true;
}

sv fe_materialize(fe_sema *S, const ast *at, sv c, ir_dtype dt, const char *hint) {
  double v;
  if (!fe_const_fits(S, at, c, dt)) return sv_poison();
  if (ir_dtype_is_float(dt)) {
    v = sv_num(c);
  } else if (dt == IR_DT_BOOL) {
    if (c.kind != SV_BOOL) {
      fe_error(S, at, "cannot use %s as a bool value (use true or false)", fe_describe(S, c));
      return sv_poison();
    }
    v = (double)c.i;
  } else {
    if (c.kind == SV_FLOAT) {
      fe_error(S, at, "cannot use the number %s with an %s tensor (no implicit conversion; cast the tensor "
               "to a float dtype)", fe_const_str(S, c), ir_dtype_name(dt));
      return sv_poison();
    }
    v = (double)c.i;
  }
  ir_type t = {.dtype = dt, .rank = 0};
  ir_attr a = ir_attr_float("value", v);
  return fe_build(S, at, IR_OP_CONST, NULL, 0, &a, 1, &t, &hint, 1);
}

/* ---------------------------------------------------------------------- */
/* operators                                                               */
/* ---------------------------------------------------------------------- */

/* Reports a value that cannot be an operand of an arithmetic operator. */
static bool operand_ok(fe_sema *S, const ast *at, const char *what, sv v) {
  if (v.kind == SV_TENSOR || sv_is_const(v)) return true;
  if (v.kind == SV_TUPLE)
    fe_error(S, at, "a call returning %d values cannot be an operand of %s; bind them first "
             "(a, b = ...)", v.n, what);
  else if (v.kind == SV_NONE)
    fe_error(S, at, "operand of %s has no value (the function returns nothing)", what);
  else
    fe_error(S, at, "invalid operand of %s: %s", what, fe_describe(S, v));
  return false;
}

static sv fold_overflow(fe_sema *S, const ast *at, const char *what, sv a, sv b) {
  fe_error(S, at, "integer overflow in %s: %lld and %lld", what, (long long)a.i, (long long)b.i);
  return sv_poison();
}

static sv fold_binary(fe_sema *S, const ast *at, ir_op op, const char *what, sv a, sv b) {
  bool ints = a.kind != SV_FLOAT && b.kind != SV_FLOAT;
  double x = sv_num(a), y = sv_num(b);
  int64_t r;
  switch (op) {
  case IR_OP_AND: case IR_OP_OR:
    if (a.kind != SV_BOOL || b.kind != SV_BOOL) {
      fe_error(S, at, "%s needs bool operands, got %s and %s", what, fe_describe(S, a), fe_describe(S, b));
      return sv_poison();
    }
    return sv_bool(op == IR_OP_AND ? (a.i && b.i) : (a.i || b.i));
  case IR_OP_EQ: return sv_bool(ints ? a.i == b.i : x == y);
  case IR_OP_NE: return sv_bool(ints ? a.i != b.i : x != y);
  case IR_OP_LT: return sv_bool(ints ? a.i < b.i : x < y);
  case IR_OP_LE: return sv_bool(ints ? a.i <= b.i : x <= y);
  case IR_OP_GT: return sv_bool(ints ? a.i > b.i : x > y);
  case IR_OP_GE: return sv_bool(ints ? a.i >= b.i : x >= y);
  case IR_OP_ADD:
    if (!ints) return sv_float(x + y);
    if (__builtin_add_overflow(a.i, b.i, &r)) return fold_overflow(S, at, what, a, b);
    return sv_int(r);
  case IR_OP_SUB:
    if (!ints) return sv_float(x - y);
    if (__builtin_sub_overflow(a.i, b.i, &r)) return fold_overflow(S, at, what, a, b);
    return sv_int(r);
  case IR_OP_MUL:
    if (!ints) return sv_float(x * y);
    if (__builtin_mul_overflow(a.i, b.i, &r)) return fold_overflow(S, at, what, a, b);
    return sv_int(r);
  case IR_OP_DIV:
    if (y == 0) {
      fe_error(S, at, "division by zero in a constant expression");
      return sv_poison();
    }
    if (ints && !(a.i == INT64_MIN && b.i == -1) && a.i % b.i == 0) return sv_int(a.i / b.i);
    return sv_float(x / y);
  case IR_OP_POW:
    if (ints && b.i >= 0) {
      if (a.i == 0) return sv_int(b.i == 0 ? 1 : 0);
      if (a.i == 1) return sv_int(1);
      if (a.i == -1) return sv_int(b.i % 2 ? -1 : 1);
      int64_t acc = 1; /* |a| >= 2: overflows within 63 steps */
      for (int64_t k = 0; k < b.i; k++)
        if (__builtin_mul_overflow(acc, a.i, &acc)) return fold_overflow(S, at, what, a, b);
      return sv_int(acc);
    }
    return sv_float(pow(x, y));
  case IR_OP_MAXIMUM:
    if (ints) return sv_int(a.i > b.i ? a.i : b.i);
    return sv_float(x > y ? x : y);
  case IR_OP_MINIMUM:
    if (ints) return sv_int(a.i < b.i ? a.i : b.i);
    return sv_float(x < y ? x : y);
  default: break;
  }
  fe_error(S, at, "%s cannot be applied to constants", what);
  return sv_poison();
}

/* "use cast(x, f64)": names the left operand when it is a plain name. */
static const char *lhs_name(const ast *at) {
  const ast *l = NULL;
  if (at->kind == AST_BINARY) l = at->kid[0];
  else if (at->kind == AST_CALL && at->n > 0) l = at->kid[0];
  return l && l->kind == AST_NAME ? l->name : "x";
}

static bool same_dtype(fe_sema *S, const ast *at, const char *what, ir_value *x, ir_value *y) {
  if (x->type.dtype == y->type.dtype) return true;
  fe_error(S, at, "dtype mismatch: %s and %s in %s; use cast(%s, %s)", ir_dtype_name(x->type.dtype),
           ir_dtype_name(y->type.dtype), what, lhs_name(at), ir_dtype_name(y->type.dtype));
  return false;
}

/* A folded constant must be finite: 1e308 * 10, sqrt(-1) or log(0) would
 * otherwise become an Inf or NaN constant without a word. */
static sv finite_fold(fe_sema *S, const ast *at, sv r) {
  if (r.kind != SV_FLOAT || isfinite(r.f)) return r;
  fe_error(S, at, "the constant expression '%s' is %s; constants must be finite", fe_src(S, at),
           isnan(r.f) ? "nan" : r.f > 0 ? "inf" : "-inf");
  return sv_poison();
}

/* Integer tensor division by a known zero: refused (at run time it would
 * saturate; docs/language.md, Edge cases). */
static bool divides_by_zero(const sv *b) {
  if (sv_is_const(*b)) return b->kind != SV_FLOAT && b->i == 0;
  if (b->kind != SV_TENSOR || !b->t->def || b->t->def->op != IR_OP_CONST || ir_dtype_is_float(b->t->type.dtype))
    return false;
  const ir_attr *v = ir_node_attr(b->t->def, "value");
  return v && v->kind == IR_ATTR_FLOAT && v->f == 0;
}

sv fe_binary(fe_sema *S, const ast *at, ir_op op, const char *what, sv a, sv b, const char *hint) {
  if (a.kind == SV_POISON || b.kind == SV_POISON) return sv_poison();
  if (!operand_ok(S, at, what, a) || !operand_ok(S, at, what, b)) return sv_poison();
  if (sv_is_const(a) && sv_is_const(b)) return finite_fold(S, at, fold_binary(S, at, op, what, a, b));
  if (op == IR_OP_DIV && a.kind == SV_TENSOR && !ir_dtype_is_float(a.t->type.dtype) && divides_by_zero(&b)) {
    const ast *divisor = at->kind == AST_BINARY ? at->kid[1] : at->kind == AST_CALL && at->n == 2 ? at->kid[1] : at;
    fe_error(S, divisor, "integer division by zero: the divisor is a constant 0");
    return sv_poison();
  }
  if (op == IR_OP_POW && a.kind == SV_TENSOR && sv_is_const(b) && b.kind != SV_BOOL && sv_num(b) == 2)
    return build1(S, at, IR_OP_SQUARE, a.t, hint);
  /* a constant that does not fit the tensor's dtype is reported at itself */
  const ast *a_at = at->kind == AST_BINARY ? at->kid[0] : at, *b_at = at->kind == AST_BINARY ? at->kid[1] : at;
  if (sv_is_const(a) && !fe_const_fits(S, a_at, a, b.t->type.dtype)) return sv_poison();
  if (sv_is_const(b) && !fe_const_fits(S, b_at, b, a.t->type.dtype)) return sv_poison();
  if (sv_is_const(a)) a = fe_materialize(S, at, a, b.t->type.dtype, NULL);
  if (sv_is_const(b)) b = fe_materialize(S, at, b, a.t->type.dtype, NULL);
  if (a.kind == SV_POISON || b.kind == SV_POISON) return sv_poison();
  if (!same_dtype(S, at, what, a.t, b.t)) return sv_poison();
  ir_type bt;
  char err[256];
  if (ir_broadcast_shapes(&a.t->type, &b.t->type, &bt, err, sizeof err) < 0) {
    fe_error(S, at, "shape mismatch in %s: %s and %s do not broadcast", what, type_str(S, &a.t->type),
             type_str(S, &b.t->type));
    return sv_poison();
  }
  ir_value *in[2] = {a.t, b.t};
  return fe_build(S, at, op, in, 2, NULL, 0, NULL, &hint, 1);
}

sv fe_unary(fe_sema *S, const ast *at, ir_op op, const char *what, sv x, const char *hint) {
  if (x.kind == SV_POISON) return sv_poison();
  if (!operand_ok(S, at, what, x)) return sv_poison();
  if (x.kind == SV_TENSOR) return build1(S, at, op, x.t, hint);
  int64_t r;
  switch (op) {
  case IR_OP_NOT:
    if (x.kind != SV_BOOL) {
      fe_error(S, at, "%s needs a bool operand, got %s", what, fe_describe(S, x));
      return sv_poison();
    }
    return sv_bool(!x.i);
  case IR_OP_NEG:
    if (x.kind == SV_FLOAT) return sv_float(-x.f);
    if (x.i == INT64_MIN) break;
    return sv_int(-x.i);
  case IR_OP_ABS:
    if (x.kind == SV_FLOAT) return sv_float(fabs(x.f));
    if (x.i == INT64_MIN) break;
    return sv_int(x.i < 0 ? -x.i : x.i);
  case IR_OP_RELU:
    if (x.kind == SV_FLOAT) return sv_float(x.f > 0 ? x.f : 0);
    return sv_int(x.i > 0 ? x.i : 0);
  case IR_OP_SQUARE:
    if (x.kind == SV_FLOAT) return sv_float(x.f * x.f);
    if (__builtin_mul_overflow(x.i, x.i, &r)) break;
    return sv_int(r);
  default:
    return finite_fold(S, at, sv_float(ir_eval_unary(op, sv_num(x))));
  }
  fe_error(S, at, "integer overflow in %s of %lld", what, (long long)x.i);
  return sv_poison();
}

static sv reshape_to(fe_sema *S, const ast *at, ir_value *x, const int64_t *dims, int rank,
                     const char *hint) {
  ir_attr a = ir_attr_ints("shape", dims, rank);
  return fe_build(S, at, IR_OP_RESHAPE, &x, 1, &a, 1, NULL, &hint, 1);
}

sv fe_matmul(fe_sema *S, const ast *at, sv a, sv b, const char *hint) {
  const char *what = at->kind == AST_BINARY ? "'@'" : "'matmul'";
  if (a.kind == SV_POISON || b.kind == SV_POISON) return sv_poison();
  if (!operand_ok(S, at, what, a) || !operand_ok(S, at, what, b)) return sv_poison();
  if (a.kind != SV_TENSOR || b.kind != SV_TENSOR) {
    fe_error(S, at, "%s needs tensor operands, got %s and %s", what, fe_describe(S, a), fe_describe(S, b));
    return sv_poison();
  }
  if (!same_dtype(S, at, what, a.t, b.t)) return sv_poison();
  int ra = a.t->type.rank, rb = b.t->type.rank;
  if (ra == 0 || rb == 0) {
    fe_error(S, at, "%s needs operands of rank >= 1, got %s and %s", what, type_str(S, &a.t->type),
             type_str(S, &b.t->type));
    return sv_poison();
  }
  int64_t ka = a.t->type.dims[ra - 1], kb = b.t->type.dims[rb == 1 ? 0 : rb - 2];
  if (ka != kb) {
    fe_error(S, at, "shape mismatch in %s: %s and %s (inner dimensions %lld and %lld differ)", what,
             type_str(S, &a.t->type), type_str(S, &b.t->type), (long long)ka, (long long)kb);
    return sv_poison();
  }
  ir_value *x = a.t, *y = b.t;
  if (ra == 1) {
    int64_t d[2] = {1, x->type.dims[0]};
    sv r = reshape_to(S, at, x, d, 2, NULL);
    if (r.kind != SV_TENSOR) return sv_poison();
    x = r.t;
  }
  if (rb == 1) {
    int64_t d[2] = {y->type.dims[0], 1};
    sv r = reshape_to(S, at, y, d, 2, NULL);
    if (r.kind != SV_TENSOR) return sv_poison();
    y = r.t;
  }
  bool squeeze = ra == 1 || rb == 1;
  ir_value *in[2] = {x, y};
  sv mm = fe_build(S, at, IR_OP_MATMUL, in, 2, NULL, 0, NULL, squeeze ? NULL : &hint, squeeze ? 0 : 1);
  if (!squeeze || mm.kind != SV_TENSOR) return mm;
  const ir_type *t = &mm.t->type;
  int64_t dims[IR_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < t->rank; i++) {
    if (ra == 1 && i == t->rank - 2) continue;
    if (rb == 1 && i == t->rank - 1) continue;
    dims[rank++] = t->dims[i];
  }
  return reshape_to(S, at, mm.t, dims, rank, hint);
}

/* ---------------------------------------------------------------------- */
/* names                                                                   */
/* ---------------------------------------------------------------------- */

fe_sym *fe_lookup(fe_sema *S, const char *name) {
  fe_sym *s = S->locals ? fe_sym_find(S->locals, name) : NULL;
  return s ? s : fe_sym_find(&S->globals, name);
}

static void closest_in(const fe_symtab *t, const char *name, const char **best, int *best_d) {
  if (!t) return;
  for (size_t i = 0; i < t->cap; i++) {
    const fe_sym *s = &t->slots[i];
    if (!s->name || s->kind == SYM_FREE || s->val.kind == SV_POISON) continue;
    int d = fe_edit_distance(name, s->name, *best_d - 1);
    if (d < *best_d) {
      *best_d = d;
      *best = s->name;
    }
  }
}

static sv eval_name(fe_sema *S, const ast *e) {
  const char *n = e->name;
  fe_sym *s = fe_lookup(S, n);
  if (s) return s->val;
  if (strcmp(n, "pi") == 0) return sv_float(FE_PI);
  if (strcmp(n, "e") == 0) return sv_float(FE_E);
  if (strcmp(n, "true") == 0) return sv_bool(true);
  if (strcmp(n, "false") == 0) return sv_bool(false);
  int dt = ir_dtype_from_name(n);
  if (dt >= 0) return (sv){.kind = SV_DTYPE, .i = dt};
  if (fe_sym_find(&S->fns, n) || S->builtins->is_builtin(n)) {
    fe_error(S, e, "'%s' is a function; call it as %s(...)", n, n);
  } else {
    const char *best = NULL;
    int best_d = strlen(n) <= 2 ? 2 : 3; /* accept distance < best_d */
    if (S->errors < FE_MAX_SUGGESTIONS) { /* the search is linear: not for floods of errors */
      closest_in(S->locals, n, &best, &best_d);
      closest_in(&S->globals, n, &best, &best_d);
    }
    if (best) fe_error(S, e, "unknown name '%s' (did you mean '%s'?)", n, best);
    else fe_error(S, e, "unknown name '%s'", n);
  }
  if (S->locals) { /* later uses of the name stay quiet */
    fe_sym *p = fe_sym_put(S->locals, n);
    p->kind = SYM_LOCAL;
    p->decl = e;
    p->val = sv_poison();
  }
  return sv_poison();
}

/* ---------------------------------------------------------------------- */
/* fe_eval                                                                 */
/* ---------------------------------------------------------------------- */

static const char *op_symbol(int op) {
  switch (op) {
  case IR_OP_ADD: return "'+'";
  case IR_OP_SUB: return "'-'";
  case IR_OP_MUL: return "'*'";
  case IR_OP_DIV: return "'/'";
  case IR_OP_POW: return "'**'";
  case IR_OP_MATMUL: return "'@'";
  case IR_OP_EQ: return "'=='";
  case IR_OP_NE: return "'!='";
  case IR_OP_LT: return "'<'";
  case IR_OP_LE: return "'<='";
  case IR_OP_GT: return "'>'";
  case IR_OP_GE: return "'>='";
  case IR_OP_AND: return "'&&'";
  case IR_OP_OR: return "'||'";
  case IR_OP_NEG: return "'-'";
  case IR_OP_NOT: return "'!'";
  default: return "operator";
  }
}

/* e and the binary operators down its left spine ((a + b) + c) + d, in a
 * loop from the innermost: a chain of any length takes no C stack (the
 * nesting limit counts right operands only; ast.c). */
static sv eval_binary_chain(fe_sema *S, const ast *e, const char *hint) {
  int n = 0;
  for (const ast *k = e; k->kind == AST_BINARY; k = k->kid[0]) n++;
  const ast **spine = malloc((size_t)n * sizeof *spine);
  if (!spine) IR_DIE("out of memory (spine)");
  int i = n;
  for (const ast *k = e; k->kind == AST_BINARY; k = k->kid[0]) spine[--i] = k;
  sv acc = fe_eval(S, spine[0]->kid[0], NULL, 0);
  for (i = 0; i < n && !S->aborted; i++) {
    const ast *k = spine[i];
    const char *h = i == n - 1 ? hint : NULL;
    sv b = fe_eval(S, k->kid[1], NULL, 0);
    if (k->op == IR_OP_MATMUL) acc = fe_matmul(S, k, acc, b, h);
    else acc = fe_binary(S, k, (ir_op)k->op, op_symbol(k->op), acc, b, h);
  }
  free(spine);
  return S->aborted ? sv_poison() : acc;
}

sv fe_eval(fe_sema *S, const ast *e, const char *const *hints, int n_hints) {
  if (S->aborted) return sv_poison();
  const char *hint = n_hints > 0 ? hints[0] : NULL;
  switch (e->kind) {
  case AST_INT: return sv_int(e->ival);
  case AST_FLOAT: return sv_float(e->fval);
  case AST_STR: return (sv){.kind = SV_STR, .s = e->name};
  case AST_NAME: return eval_name(S, e);
  case AST_LISTLIT: {
    sv r = {.kind = SV_LIST, .n = e->n};
    r.items = ir_arena_alloc(S->arena, (size_t)(e->n ? e->n : 1) * sizeof *r.items);
    bool bad = false;
    for (int i = 0; i < e->n; i++) {
      r.items[i] = fe_eval(S, e->kid[i], NULL, 0);
      if (r.items[i].kind == SV_POISON) bad = true;
      else if (r.items[i].kind == SV_TUPLE || r.items[i].kind == SV_NONE || r.items[i].kind == SV_LIST) {
        fe_error(S, e->kid[i], "a list element cannot be %s", fe_describe(S, r.items[i]));
        bad = true;
      }
    }
    return bad ? sv_poison() : r;
  }
  case AST_UNARY: {
    sv x = fe_eval(S, e->kid[0], NULL, 0);
    return fe_unary(S, e, (ir_op)e->op, op_symbol(e->op), x, hint);
  }
  case AST_BINARY: return eval_binary_chain(S, e, hint);
  case AST_CALL: {
    fe_sym *fn = fe_sym_find(&S->fns, e->name);
    if (fn) return S->call_user(S, fn, e, hints, n_hints);
    if (S->builtins->is_builtin(e->name)) return S->builtins->call(S, e, hints, n_hints);
    const char *best = S->errors < FE_MAX_SUGGESTIONS ? S->builtins->suggest(S, e->name) : NULL;
    if (best) fe_error(S, e, "unknown function '%s' (did you mean '%s'?)", e->name, best);
    else fe_error(S, e, "unknown function '%s'", e->name);
    for (int i = 0; i < e->n; i++) /* still report mistakes in the arguments */
      fe_eval(S, e->kid[i]->kind == AST_KWARG ? e->kid[i]->kid[0] : e->kid[i], NULL, 0);
    return sv_poison();
  }
  default: break;
  }
  fe_error(S, e, "expected an expression");
  return sv_poison();
}

/* ---------------------------------------------------------------------- */
/* dims and types                                                          */
/* ---------------------------------------------------------------------- */

bool fe_eval_dim(fe_sema *S, const ast *e, int64_t *out) {
  sv v = fe_eval(S, e, NULL, 0);
  switch (v.kind) {
  case SV_POISON: return false;
  case SV_INT:
    if (v.i < 0) {
      fe_error(S, e, "dimension '%s' is negative: %lld", fe_src(S, e), (long long)v.i);
      return false;
    }
    *out = v.i;
    return true;
  case SV_FLOAT:
    if (v.f == floor(v.f) && v.f >= 0 && v.f <= (double)IR_MAX_ELEMENTS) {
      *out = (int64_t)v.f;
      return true;
    }
    if (v.f == floor(v.f) && v.f < 0)
      fe_error(S, e, "dimension '%s' is negative: %s", fe_src(S, e), fe_const_str(S, v));
    else
      fe_error(S, e, "dimension '%s' is not an integer: %s", fe_src(S, e), fe_const_str(S, v));
    return false;
  case SV_TENSOR:
    fe_error(S, e, "dimension '%s' is not a compile-time constant (it is a tensor %s)", fe_src(S, e),
             fe_describe(S, v));
    return false;
  default:
    fe_error(S, e, "dimension '%s' must be an integer, got %s", fe_src(S, e), fe_describe(S, v));
    return false;
  }
}

bool fe_eval_type(fe_sema *S, const ast *type, ir_type *out) {
  memset(out, 0, sizeof *out);
  bool ok = true;
  int dt = ir_dtype_from_name(type->name);
  if (dt < 0) {
    fe_error(S, type, "unknown dtype '%s' (expected f64, f32, bf16, f16, i32, i64 or bool)", type->name);
    ok = false;
  }
  out->dtype = dt < 0 ? IR_DT_F32 : (ir_dtype)dt;
  const ast *dims = type->kid[0];
  if (!dims) return ok;
  if (dims->n > IR_MAX_RANK) {
    fe_error(S, type, "'%s' has rank %d (the maximum is %d)", fe_src(S, type), dims->n, IR_MAX_RANK);
    return false;
  }
  out->rank = dims->n;
  for (int i = 0; i < dims->n; i++)
    if (!fe_eval_dim(S, dims->kid[i], &out->dims[i])) ok = false;
  if (ok && fe_numel(out->dims, out->rank) < 0) {
    char buf[300];
    size_t k = 0;
    for (int i = 0; i < out->rank && k < sizeof buf - 32; i++)
      k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%lld", i ? ", " : "", (long long)out->dims[i]);
    fe_error(S, type, "'%s' has too many elements: [%s] is more than 2^48", fe_src(S, type), buf);
    ok = false;
  }
  return ok;
}
