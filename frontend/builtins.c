/* frontend/builtins.c — the builtin functions of .tg (docs/language.md,
 * "Calls") as one table: name, handler, IR op, positional arity and the
 * keyword attributes each accepts.
 *
 * fe_builtins.call checks a call against the table (positional count,
 * keyword names, duplicates) and evaluates the arguments; each handler
 * then turns frontend conventions into the IR's: negative axes normalized,
 * default axes filled in, reshape's -1 resolved, 1-D matmul operands
 * reshaped (in fe_matmul), einsum's implicit output made explicit, weak
 * scalars materialized. Shape rules themselves are ir_infer's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sema.h"

#define MAX_KWS 4

typedef struct bi_spec bi_spec;
typedef struct {
  int n;                 /* positional arguments */
  sv *pos;
  const ast **pos_at;
  sv kw[MAX_KWS];        /* by index in spec->kws; kind SV_NONE when absent */
  const ast *kw_at[MAX_KWS];
  const char *hint;
  const char *const *hints;
  int n_hints;
  const char *what;      /* "'softmax'" */
} bi_args;

typedef sv (*bi_handler)(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A);

struct bi_spec {
  const char *name;
  bi_handler fn;
  ir_op op;
  int min_pos, max_pos; /* max_pos -1: no limit; 0 and 0 with fn NULL: not a builtin (ops.def rows without LANG) */
  const char *kws[MAX_KWS];
};

/* ---------------------------------------------------------------------- */
/* argument helpers                                                        */
/* ---------------------------------------------------------------------- */

static const sv *kw(const bi_spec *b, const bi_args *A, const char *name, const ast **at) {
  for (int i = 0; i < MAX_KWS && b->kws[i]; i++)
    if (strcmp(b->kws[i], name) == 0 && A->kw[i].kind != SV_NONE) {
      if (at) *at = A->kw_at[i];
      return &A->kw[i];
    }
  return NULL;
}

static ir_value *tensor_arg(fe_sema *S, bi_args *A, int i) {
  if (A->pos[i].kind == SV_TENSOR) return A->pos[i].t;
  fe_error(S, A->pos_at[i], "argument %d of %s must be a tensor, got %s", i + 1, A->what,
           fe_describe(S, A->pos[i]));
  return NULL;
}

/* An integer attribute or positional value. */
static bool int_value(fe_sema *S, const ast *at, sv v, const char *what, int64_t *out) {
  if (v.kind == SV_INT || v.kind == SV_BOOL) {
    *out = v.i;
    return true;
  }
  fe_error(S, at, "%s must be an integer, got %s", what, fe_describe(S, v));
  return false;
}

static bool kw_int(fe_sema *S, const bi_spec *b, const bi_args *A, const char *name, int64_t dflt,
                   int64_t *out) {
  const ast *at;
  const sv *v = kw(b, A, name, &at);
  if (!v) {
    *out = dflt;
    return true;
  }
  char what[96];
  snprintf(what, sizeof what, "attribute '%s' of %s", name, A->what);
  return int_value(S, at, *v, what, out);
}

/* axis in [-rank, rank) -> [0, rank) */
static bool norm_axis(fe_sema *S, const ast *at, int64_t axis, const ir_type *t, int64_t *out) {
  if (axis < -t->rank || axis >= t->rank) {
    char buf[300];
    ir_type_str(t, buf, sizeof buf);
    fe_error(S, at, "axis %lld is out of range for %s", (long long)axis, buf);
    return false;
  }
  *out = axis < 0 ? axis + t->rank : axis;
  return true;
}

static bool kw_axis(fe_sema *S, const bi_spec *b, const bi_args *A, int64_t dflt, const ir_type *t,
                    int64_t *out) {
  int64_t axis;
  if (!kw_int(S, b, A, "axis", dflt, &axis)) return false;
  const ast *at = NULL;
  if (!kw(b, A, "axis", &at)) at = NULL;
  return norm_axis(S, at ? at : A->pos_at[0], axis, t, out);
}

/* A list of integers (or one integer) into out[0..max). */
static bool int_list(fe_sema *S, const ast *at, sv v, const char *what, int64_t *out, int max, int *n) {
  if (v.kind == SV_INT) {
    out[0] = v.i;
    *n = 1;
    return true;
  }
  if (v.kind != SV_LIST) {
    fe_error(S, at, "%s must be a list of integers, got %s", what, fe_describe(S, v));
    return false;
  }
  if (v.n > max) {
    fe_error(S, at, "%s has %d entries (the maximum is %d)", what, v.n, max);
    return false;
  }
  for (int i = 0; i < v.n; i++) {
    if (v.items[i].kind != SV_INT) {
      /* a list written out: point at the entry and show its text (nH / nKV
       * where nKV does not divide nH names the division) */
      const ast *e = at && at->kind == AST_LISTLIT && at->n == v.n ? at->kid[i] : NULL;
      if (e && e->kind != AST_INT && e->kind != AST_FLOAT)
        fe_error(S, e, "%s must be a list of integers, but entry %d, %s, is %s", what, i + 1, fe_src(S, e),
                 fe_describe(S, v.items[i]));
      else
        fe_error(S, at, "%s must be a list of integers, but entry %d is %s", what, i + 1,
                 fe_describe(S, v.items[i]));
      return false;
    }
    out[i] = v.items[i].i;
  }
  *n = v.n;
  return true;
}

static sv build(fe_sema *S, const ast *call, bi_args *A, ir_op op, ir_value **in, int n_in,
                const ir_attr *attrs, int n_attrs, const ir_type *out_type) {
  return fe_build(S, call, op, in, n_in, attrs, n_attrs, out_type, A->hints, A->n_hints);
}

/* ---------------------------------------------------------------------- */
/* handlers                                                                */
/* ---------------------------------------------------------------------- */

static sv h_unary(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  return fe_unary(S, call, b->op, A->what, A->pos[0], A->hint);
}

static sv h_binary(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  return fe_binary(S, call, b->op, A->what, A->pos[0], A->pos[1], A->hint);
}

static sv h_matmul(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  return fe_matmul(S, call, A->pos[0], A->pos[1], A->hint);
}

static sv h_where(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  sv c = A->pos[0], x = A->pos[1], y = A->pos[2];
  for (int i = 0; i < 3; i++)
    if (A->pos[i].kind != SV_TENSOR && !sv_is_const(A->pos[i])) {
      fe_error(S, A->pos_at[i], "argument %d of 'where' must be a tensor or a number, got %s", i + 1,
               fe_describe(S, A->pos[i]));
      return sv_poison();
    }
  if (sv_is_const(c)) c = fe_materialize(S, A->pos_at[0], c, IR_DT_BOOL, NULL);
  ir_dtype dt = IR_DT_F32;
  if (x.kind == SV_TENSOR) dt = x.t->type.dtype;
  else if (y.kind == SV_TENSOR) dt = y.t->type.dtype;
  else if (x.kind == SV_BOOL && y.kind == SV_BOOL) dt = IR_DT_BOOL;
  else if (x.kind == SV_INT && y.kind == SV_INT) dt = IR_DT_I32;
  if (sv_is_const(x)) x = fe_materialize(S, A->pos_at[1], x, dt, NULL);
  if (sv_is_const(y)) y = fe_materialize(S, A->pos_at[2], y, dt, NULL);
  if (c.kind != SV_TENSOR || x.kind != SV_TENSOR || y.kind != SV_TENSOR) return sv_poison();
  if (x.t->type.dtype != y.t->type.dtype) {
    fe_error(S, call, "dtype mismatch: %s and %s in 'where'; use cast(x, %s)",
             ir_dtype_name(x.t->type.dtype), ir_dtype_name(y.t->type.dtype), ir_dtype_name(y.t->type.dtype));
    return sv_poison();
  }
  ir_value *in[3] = {c.t, x.t, y.t};
  return build(S, call, A, IR_OP_WHERE, in, 3, NULL, 0, NULL);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The axes (sorted, normalized; default all) and keepdims of a reduction
 * call of x (sum, mean, max, var). */
static bool reduce_axes(fe_sema *S, const bi_spec *b, bi_args *A, const ir_value *x, int64_t *axes, int *n_out,
                        int64_t *keep) {
  int rank = x->type.rank, n = 0;
  const ast *at;
  const sv *ax = kw(b, A, "axis", &at);
  if (ax && ax->kind == SV_TENSOR && b->op == IR_OP_REDUCE_MAX) {
    fe_error(S, at, "the second argument of %s is the axis to reduce, got %s; for the elementwise maximum of "
             "two tensors write maximum(x, y)", A->what, fe_describe(S, *ax));
    return false;
  }
  if (!ax) {
    for (int i = 0; i < rank; i++) axes[n++] = i;
  } else {
    int64_t raw[IR_MAX_RANK];
    char what[96];
    snprintf(what, sizeof what, "attribute 'axis' of %s", A->what);
    if (!int_list(S, at, *ax, what, raw, IR_MAX_RANK, &n)) return false;
    for (int i = 0; i < n; i++)
      if (!norm_axis(S, at, raw[i], &x->type, &axes[i])) return false;
    qsort(axes, (size_t)n, sizeof axes[0], cmp_i64);
    for (int i = 1; i < n; i++)
      if (axes[i] == axes[i - 1]) {
        fe_error(S, at, "axis %lld is repeated in %s", (long long)axes[i], A->what);
        return false;
      }
  }
  *n_out = n;
  return kw_int(S, b, A, "keepdims", 0, keep);
}

static sv h_reduce(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *x = tensor_arg(S, A, 0);
  int64_t axes[IR_MAX_RANK], keep;
  int n = 0;
  if (!x || !reduce_axes(S, b, A, x, axes, &n, &keep)) return sv_poison();
  ir_attr attrs[2] = {ir_attr_ints("axes", axes, n), ir_attr_int("keepdims", keep != 0)};
  return build(S, call, A, b->op, &x, 1, attrs, 2, NULL);
}

/* var(x, axis=A, keepdims=false, correction=0): the variance over the axes,
 * sum((x - mean(x))^2) / (N - correction), N the number of elements reduced
 * (correction=1: the sample variance, torch.var's default; 0: numpy's and
 * torch.var(unbiased=False)). Written in primitives (mean, sub, square, sum,
 * mul), so every backend and both autodiff modes have it. */
static sv h_var(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *x = tensor_arg(S, A, 0);
  int64_t axes[IR_MAX_RANK], keep, correction;
  int n = 0;
  if (!x || !reduce_axes(S, b, A, x, axes, &n, &keep) || !kw_int(S, b, A, "correction", 0, &correction))
    return sv_poison();
  if (!ir_dtype_is_float(x->type.dtype)) {
    fe_error(S, A->pos_at[0], "%s needs a floating-point tensor, got %s", A->what, ir_dtype_name(x->type.dtype));
    return sv_poison();
  }
  int64_t count = 1;
  for (int i = 0; i < n; i++) count *= x->type.dims[axes[i]];
  if (correction < 0 || (count > 0 && correction >= count)) {
    const ast *at = NULL;
    kw(b, A, "correction", &at);
    fe_error(S, at ? at : call, "correction=%lld of %s must be >= 0 and below the %lld elements reduced",
             (long long)correction, A->what, (long long)count);
    return sv_poison();
  }
  ir_attr keep_attrs[2] = {ir_attr_ints("axes", axes, n), ir_attr_int("keepdims", 1)};
  sv mean = build(S, call, A, IR_OP_REDUCE_MEAN, &x, 1, keep_attrs, 2, NULL);
  if (mean.kind != SV_TENSOR) return sv_poison();
  sv dev = fe_binary(S, call, IR_OP_SUB, A->what, sv_tensor(x), mean, NULL);
  sv sq = fe_unary(S, call, IR_OP_SQUARE, A->what, dev, NULL);
  if (sq.kind != SV_TENSOR) return sv_poison();
  ir_attr attrs[2] = {ir_attr_ints("axes", axes, n), ir_attr_int("keepdims", keep != 0)};
  sv total = build(S, call, A, IR_OP_REDUCE_SUM, &sq.t, 1, attrs, 2, NULL);
  return fe_binary(S, call, IR_OP_MUL, A->what, total, sv_float(1.0 / (double)(count - correction)), A->hint);
}

/* tril(x, k=0) and triu(x, k=0): x (rank >= 2) with the elements above
 * (tril) or below (triu) the k-th diagonal of its last two axes set to 0, as
 * numpy and torch: tril keeps j - i <= k, triu keeps j - i >= k. Written as
 * where(cond, x, 0) with cond from two iotas, so it differentiates (the
 * gradient is masked alike) and runs on every backend. */
static sv h_tri(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *x = tensor_arg(S, A, 0);
  if (!x) return sv_poison();
  int64_t k;
  if (!kw_int(S, b, A, "k", 0, &k)) return sv_poison();
  if (x->type.rank < 2) {
    fe_error(S, A->pos_at[0], "%s needs a tensor of rank >= 2 (a matrix or a batch of them), got rank %d", A->what,
             x->type.rank);
    return sv_poison();
  }
  int r = x->type.rank;
  ir_type t = {.dtype = IR_DT_I32, .rank = 2, .dims = {x->type.dims[r - 2], x->type.dims[r - 1]}};
  ir_attr row_axis = ir_attr_int("axis", 0), col_axis = ir_attr_int("axis", 1);
  sv row = build(S, call, A, IR_OP_IOTA, NULL, 0, &row_axis, 1, &t);
  sv col = build(S, call, A, IR_OP_IOTA, NULL, 0, &col_axis, 1, &t);
  sv diag = fe_binary(S, call, IR_OP_SUB, A->what, col, row, NULL);
  bool lower = strcmp(b->name, "tril") == 0;
  sv keep = fe_binary(S, call, lower ? IR_OP_LE : IR_OP_GE, A->what, diag, sv_int(k), NULL);
  sv zero = fe_materialize(S, call, sv_int(0), x->type.dtype, NULL);
  if (keep.kind != SV_TENSOR || zero.kind != SV_TENSOR) return sv_poison();
  ir_value *in[3] = {keep.t, x, zero.t};
  return build(S, call, A, IR_OP_WHERE, in, 3, NULL, 0, NULL);
}

/* floordiv(a, b) and a % b (the parser's call "%"): integer constants only
 * (config values, dimensions), rounding toward -inf as Python does, so that
 * a == floordiv(a, b) * b + a % b. */
static sv h_intdiv(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  bool mod = strcmp(b->name, "%") == 0;
  for (int i = 0; i < 2; i++)
    if (A->pos[i].kind != SV_INT) {
      fe_error(S, A->pos_at[i], "operand %d of %s must be an integer constant (a config value or a dimension), got %s",
               i + 1, A->what, fe_describe(S, A->pos[i]));
      return sv_poison();
    }
  int64_t x = A->pos[0].i, y = A->pos[1].i;
  if (y == 0) {
    fe_error(S, A->pos_at[1], "division by zero in %s", A->what);
    return sv_poison();
  }
  if (x == INT64_MIN && y == -1) return mod ? sv_int(0) : (fe_error(S, call, "integer overflow in %s", A->what), sv_poison());
  int64_t q = x / y, r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) {
    q--;
    r += y;
  }
  return sv_int(mod ? r : q);
}

/* softmax, log_softmax, argmax: one axis (default the last) */
static sv h_softmax(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *x = tensor_arg(S, A, 0);
  int64_t axis;
  if (!x || !kw_axis(S, b, A, -1, &x->type, &axis)) return sv_poison();
  ir_attr a = ir_attr_int("axis", axis);
  return build(S, call, A, b->op, &x, 1, &a, 1, NULL);
}

static sv h_norm(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *in[3];
  for (int i = 0; i < A->n; i++)
    if (!(in[i] = tensor_arg(S, A, i))) return sv_poison();
  double eps = b->op == IR_OP_LAYERNORM ? 1e-5 : 1e-6;
  const ast *at;
  const sv *e = kw(b, A, "eps", &at);
  if (e) {
    if (!sv_is_const(*e) || e->kind == SV_BOOL) {
      fe_error(S, at, "attribute 'eps' of %s must be a number, got %s", A->what, fe_describe(S, *e));
      return sv_poison();
    }
    eps = sv_num(*e);
  }
  ir_attr a = ir_attr_float("eps", eps);
  return build(S, call, A, b->op, in, A->n, &a, 1, NULL);
}

/* dropout(x, p): training's inverted dropout (ops.def). p = 0 is x itself
 * (no node: a model with p from a config of 0 compiles to the graph it had
 * before dropout existed); 0 < p < 1 a dropout node in its inference form,
 * which the training builders key (pass_key_dropout) and every other
 * compile removes (canonicalize). */
static sv h_dropout(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *x = tensor_arg(S, A, 0);
  if (!x) return sv_poison();
  if (!ir_dtype_is_float(x->type.dtype)) {
    fe_error(S, A->pos_at[0], "argument 1 of %s must be a float tensor, got %s", A->what, fe_describe(S, A->pos[0]));
    return sv_poison();
  }
  if (!sv_is_const(A->pos[1]) || A->pos[1].kind == SV_BOOL) {
    fe_error(S, A->pos_at[1], "argument 2 of %s (the drop probability) must be a number, got %s", A->what,
             fe_describe(S, A->pos[1]));
    return sv_poison();
  }
  double p = sv_num(A->pos[1]);
  if (!(p >= 0 && p < 1)) {
    fe_error(S, A->pos_at[1], "the drop probability of %s must be in [0, 1), got %g", A->what, p);
    return sv_poison();
  }
  if (p == 0) return A->pos[0];
  ir_attr a = ir_attr_float("p", p);
  return build(S, call, A, b->op, &x, 1, &a, 1, NULL);
}

static bool perm_arg(fe_sema *S, bi_args *A, int i, const ir_type *t, int64_t *perm) {
  int n;
  char what[96];
  snprintf(what, sizeof what, "the permutation of %s", A->what);
  if (!int_list(S, A->pos_at[i], A->pos[i], what, perm, IR_MAX_RANK, &n)) return false;
  if (n != t->rank) {
    char buf[300];
    ir_type_str(t, buf, sizeof buf);
    fe_error(S, A->pos_at[i], "%s has %d entries but %s has rank %d", what, n, buf, t->rank);
    return false;
  }
  for (int k = 0; k < n; k++)
    if (perm[k] < 0 && perm[k] >= -n) perm[k] += n;
  return true;
}

static sv h_transpose(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *x = tensor_arg(S, A, 0);
  if (!x) return sv_poison();
  int64_t perm[IR_MAX_RANK];
  int r = x->type.rank;
  if (A->n == 2) {
    if (!perm_arg(S, A, 1, &x->type, perm)) return sv_poison();
  } else {
    if (r < 2) {
      fe_error(S, call, "%s of %s needs rank >= 2 (or give a permutation)", A->what, fe_describe(S, A->pos[0]));
      return sv_poison();
    }
    for (int i = 0; i < r; i++) perm[i] = i;
    perm[r - 2] = r - 1;
    perm[r - 1] = r - 2;
  }
  ir_attr a = ir_attr_ints("perm", perm, r);
  return build(S, call, A, IR_OP_TRANSPOSE, &x, 1, &a, 1, NULL);
}

static sv h_reshape(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *x = tensor_arg(S, A, 0);
  if (!x) return sv_poison();
  int64_t dims[IR_MAX_RANK];
  int n, unknown = -1;
  if (!int_list(S, A->pos_at[1], A->pos[1], "the shape of 'reshape'", dims, IR_MAX_RANK, &n))
    return sv_poison();
  int64_t known = 1;
  for (int i = 0; i < n; i++) {
    if (dims[i] == -1 && unknown < 0) {
      unknown = i;
      continue;
    }
    if (dims[i] == -1) {
      fe_error(S, A->pos_at[1], "only one dimension of 'reshape' can be -1");
      return sv_poison();
    }
    if (dims[i] < 0) {
      fe_error(S, A->pos_at[1], "dimension %lld of 'reshape' is negative", (long long)dims[i]);
      return sv_poison();
    }
  }
  if (unknown >= 0) {
    int64_t others[IR_MAX_RANK];
    int k = 0;
    for (int i = 0; i < n; i++)
      if (i != unknown) others[k++] = dims[i];
    known = fe_numel(others, k);
    int64_t total = fe_numel(x->type.dims, x->type.rank);
    if (known <= 0 || total % known != 0) {
      fe_error(S, A->pos_at[1], "cannot reshape %s (%lld elements) to '%s'", fe_describe(S, A->pos[0]),
               (long long)total, fe_src(S, A->pos_at[1]));
      return sv_poison();
    }
    dims[unknown] = total / known;
  }
  ir_attr a = ir_attr_ints("shape", dims, n);
  return build(S, call, A, IR_OP_RESHAPE, &x, 1, &a, 1, NULL);
}

static sv h_slice(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *x = tensor_arg(S, A, 0);
  int64_t axis, start, end, step;
  if (!x || !kw_axis(S, b, A, 0, &x->type, &axis)) return sv_poison();
  int64_t dim = x->type.dims[axis];
  if (!kw_int(S, b, A, "start", 0, &start) || !kw_int(S, b, A, "end", dim, &end) ||
      !kw_int(S, b, A, "step", 1, &step))
    return sv_poison();
  if (start < 0 && start >= -dim) start += dim;
  if (end < 0 && end >= -dim) end += dim;
  ir_attr attrs[4] = {ir_attr_int("axis", axis), ir_attr_int("start", start), ir_attr_int("end", end),
                      ir_attr_int("step", step)};
  return build(S, call, A, IR_OP_SLICE, &x, 1, attrs, 4, NULL);
}

static sv h_concat(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  sv l = A->pos[0];
  if (l.kind != SV_LIST || l.n == 0) {
    fe_error(S, A->pos_at[0], "argument 1 of 'concat' must be a non-empty list of tensors, got %s",
             fe_describe(S, l));
    return sv_poison();
  }
  ir_value **in = ir_arena_alloc(S->arena, (size_t)l.n * sizeof *in);
  for (int i = 0; i < l.n; i++) {
    if (l.items[i].kind != SV_TENSOR) {
      fe_error(S, A->pos_at[0], "entry %d of the 'concat' list must be a tensor, got %s", i + 1,
               fe_describe(S, l.items[i]));
      return sv_poison();
    }
    in[i] = l.items[i].t;
  }
  int64_t axis;
  if (!kw_axis(S, b, A, 0, &in[0]->type, &axis)) return sv_poison();
  ir_attr a = ir_attr_int("axis", axis);
  return build(S, call, A, IR_OP_CONCAT, in, l.n, &a, 1, NULL);
}

static sv h_split(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *x = tensor_arg(S, A, 0);
  int64_t axis;
  if (!x || !kw_axis(S, b, A, 0, &x->type, &axis)) return sv_poison();
  int64_t dim = x->type.dims[axis];
  int64_t *sizes;
  int n;
  sv p = A->pos[1];
  if (p.kind == SV_INT) {
    if (p.i < 1 || p.i > FE_MAX_SPLIT) {
      fe_error(S, A->pos_at[1], "cannot split into %lld parts (1 to %d allowed)", (long long)p.i, FE_MAX_SPLIT);
      return sv_poison();
    }
    if (dim % p.i != 0) {
      fe_error(S, A->pos_at[1], "cannot split axis %lld of %s (size %lld) into %lld equal parts", (long long)axis,
               fe_describe(S, A->pos[0]), (long long)dim, (long long)p.i);
      return sv_poison();
    }
    n = (int)p.i;
    sizes = ir_arena_alloc(S->arena, (size_t)n * sizeof *sizes);
    for (int i = 0; i < n; i++) sizes[i] = dim / p.i;
  } else {
    int cap = p.kind == SV_LIST && p.n > 0 ? p.n : 1;
    sizes = ir_arena_alloc(S->arena, (size_t)cap * sizeof *sizes);
    if (!int_list(S, A->pos_at[1], p, "the sizes of 'split'", sizes, FE_MAX_SPLIT, &n)) return sv_poison();
  }
  ir_attr attrs[2] = {ir_attr_int("axis", axis), ir_attr_ints("sizes", sizes, n)};
  return build(S, call, A, IR_OP_SPLIT, &x, 1, attrs, 2, NULL);
}

/* grad(loss, w) or grad(loss, [w1, w2, ...]): a GRAD request node that the
 * autodiff pass expands into the backward graph. A list gives one result per
 * entry, a single tensor one result. */
static sv h_grad(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *loss = tensor_arg(S, A, 0);
  if (!loss) return sv_poison();
  sv w = A->pos[1];
  int n = w.kind == SV_LIST ? w.n : 1;
  if (w.kind == SV_LIST && n == 0) {
    fe_error(S, A->pos_at[1], "argument 2 of 'grad' must be a tensor or a non-empty list of tensors");
    return sv_poison();
  }
  ir_value **in = ir_arena_alloc(S->arena, (size_t)(n + 1) * sizeof *in);
  in[0] = loss;
  for (int i = 0; i < n; i++) {
    sv item = w.kind == SV_LIST ? w.items[i] : w;
    if (item.kind != SV_TENSOR) {
      if (item.kind != SV_POISON)
        fe_error(S, A->pos_at[1], "argument 2 of 'grad' must be a tensor or a list of tensors, got %s",
                 fe_describe(S, item));
      return sv_poison();
    }
    in[i + 1] = item.t;
  }
  sv r = build(S, call, A, IR_OP_GRAD, in, n + 1, NULL, 0, NULL);
  if (r.kind == SV_TENSOR && w.kind == SV_LIST) { /* keep a one-entry list a tuple */
    sv t = {.kind = SV_TUPLE, .n = 1};
    t.items = ir_arena_alloc(S->arena, sizeof *t.items);
    t.items[0] = r;
    return t;
  }
  return r;
}

static sv h_tensor_op(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  ir_value *in[3];
  for (int i = 0; i < A->n; i++)
    if (!(in[i] = tensor_arg(S, A, i))) return sv_poison();
  return build(S, call, A, b->op, in, A->n, NULL, 0, NULL);
}

/* einsum: without "->", the output is every index that appears exactly
 * once, in ASCII order (numpy's implicit mode). */
static sv h_einsum(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  if (A->pos[0].kind != SV_STR) {
    fe_error(S, A->pos_at[0], "argument 1 of 'einsum' must be an equation string like \"ij,jk->ik\", got %s",
             fe_describe(S, A->pos[0]));
    return sv_poison();
  }
  const char *eq = A->pos[0].s;
  if (strstr(eq, "...")) {
    fe_error(S, A->pos_at[0], "einsum ellipsis '...' is not supported; name every index");
    return sv_poison();
  }
  int n = A->n - 1;
  ir_value **in = ir_arena_alloc(S->arena, (size_t)n * sizeof *in);
  for (int i = 0; i < n; i++)
    if (!(in[i] = tensor_arg(S, A, i + 1))) return sv_poison();
  const char *full = eq;
  if (!strstr(eq, "->")) {
    int count[256] = {0};
    for (const unsigned char *p = (const unsigned char *)eq; *p; p++)
      if (*p != ',' && *p != ' ') count[*p]++;
    size_t len = strlen(eq);
    char *s = ir_arena_alloc(S->arena, len + 2 + 257);
    memcpy(s, eq, len);
    memcpy(s + len, "->", 2);
    size_t k = len + 2;
    for (int c = 0; c < 256; c++)
      if (count[c] == 1) s[k++] = (char)c;
    s[k] = 0;
    full = s;
  }
  for (int i = 0; i < n; i++)
    if (in[i]->type.dtype != in[0]->type.dtype) {
      fe_error(S, call, "dtype mismatch: %s and %s in 'einsum'; use cast(x, %s)",
               ir_dtype_name(in[0]->type.dtype), ir_dtype_name(in[i]->type.dtype),
               ir_dtype_name(in[0]->type.dtype));
      return sv_poison();
    }
  ir_attr a = ir_attr_str("eq", full);
  return build(S, call, A, IR_OP_EINSUM, in, n, &a, 1, NULL);
}

static sv h_cast(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  sv x = A->pos[0];
  if (A->pos[1].kind != SV_DTYPE) {
    fe_error(S, A->pos_at[1], "argument 2 of 'cast' must be a dtype (f64, f32, bf16, f16, i32, i64, bool), got %s",
             fe_describe(S, A->pos[1]));
    return sv_poison();
  }
  ir_dtype dt = (ir_dtype)A->pos[1].i;
  if (sv_is_const(x)) {
    ir_type t = {.dtype = dt, .rank = 0};
    double v = dt == IR_DT_BOOL ? (sv_num(x) != 0) : ir_round_to_dtype(dt, sv_num(x));
    ir_attr a = ir_attr_float("value", v);
    return build(S, call, A, IR_OP_CONST, NULL, 0, &a, 1, &t);
  }
  ir_value *t = tensor_arg(S, A, 0);
  if (!t) return sv_poison();
  if (t->type.dtype == dt) return x;
  ir_attr a = ir_attr_dtype("to", dt);
  return build(S, call, A, IR_OP_CAST, &t, 1, &a, 1, NULL);
}

/* zeros(dims, dtype) ones(dims, dtype) full(dims, value, dtype) */
static sv h_fill(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  bool is_full = strcmp(b->name, "full") == 0;
  int dt_index = is_full ? 2 : 1;
  ir_type t = {.dtype = IR_DT_F32};
  if (A->n > dt_index) {
    if (A->pos[dt_index].kind != SV_DTYPE) {
      fe_error(S, A->pos_at[dt_index], "argument %d of %s must be a dtype, got %s", dt_index + 1, A->what,
               fe_describe(S, A->pos[dt_index]));
      return sv_poison();
    }
    t.dtype = (ir_dtype)A->pos[dt_index].i;
  }
  char what[64];
  snprintf(what, sizeof what, "the shape of %s", A->what);
  if (!int_list(S, A->pos_at[0], A->pos[0], what, t.dims, IR_MAX_RANK, &t.rank)) return sv_poison();
  for (int i = 0; i < t.rank; i++)
    if (t.dims[i] < 0) {
      fe_error(S, A->pos_at[0], "dimension %lld of %s is negative", (long long)t.dims[i], what);
      return sv_poison();
    }
  if (fe_numel(t.dims, t.rank) < 0) {
    fe_error(S, A->pos_at[0], "'%s' has too many elements (more than 2^48)", fe_src(S, A->pos_at[0]));
    return sv_poison();
  }
  double v = strcmp(b->name, "ones") == 0 ? 1.0 : 0.0;
  if (is_full) {
    sv c = A->pos[1];
    if (!sv_is_const(c)) {
      fe_error(S, A->pos_at[1], "the value of 'full' must be a number, got %s", fe_describe(S, c));
      return sv_poison();
    }
    if ((c.kind == SV_FLOAT && !ir_dtype_is_float(t.dtype)) || (t.dtype == IR_DT_BOOL && c.kind != SV_BOOL)) {
      fe_error(S, A->pos_at[1], "cannot fill a %s tensor with %s", ir_dtype_name(t.dtype), fe_describe(S, c));
      return sv_poison();
    }
    if (!fe_const_fits(S, A->pos_at[1], c, t.dtype)) return sv_poison();
    v = sv_num(c);
  }
  ir_attr a = ir_attr_float("value", v);
  return build(S, call, A, IR_OP_CONST, NULL, 0, &a, 1, &t);
}

static sv h_arange(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  int64_t n;
  if (!int_value(S, A->pos_at[0], A->pos[0], "the length of 'arange'", &n)) return sv_poison();
  if (n < 0 || n > INT32_MAX) {
    fe_error(S, A->pos_at[0], "the length of 'arange' must be in 0..%d, got %lld", INT32_MAX, (long long)n);
    return sv_poison();
  }
  ir_type t = {.dtype = IR_DT_I32, .rank = 1, .dims = {n}};
  ir_attr a = ir_attr_int("axis", 0);
  return build(S, call, A, IR_OP_IOTA, NULL, 0, &a, 1, &t);
}

/* shard(x, [dp, _, tp]): a sharding constraint (docs/sharding.md), as JAX's
 * with_sharding_constraint: one entry per dim of x, the mesh axis (dp or
 * tp) that splits it or _ (replicated); the list is names as written, not
 * values. The IR's shard_hint {spec = "dp, -, tp"}. */
static sv h_shard(fe_sema *S, const ast *call, const bi_spec *b, bi_args *A) {
  (void)b;
  ir_value *x = tensor_arg(S, A, 0);
  if (!x) return sv_poison();
  const ast *l = A->pos_at[1];
  if (l->kind != AST_LISTLIT) {
    fe_error(S, l, "argument 2 of %s must be a list of mesh axes, one per dim: dp, tp or _ (e.g. [dp, _, tp])", A->what);
    return sv_poison();
  }
  if (l->n != x->type.rank) {
    char buf[300];
    fe_error(S, l, "%s: the list has %d entr%s but %s has rank %d", A->what, l->n, l->n == 1 ? "y" : "ies",
             ir_type_str(&x->type, buf, sizeof buf), x->type.rank);
    return sv_poison();
  }
  char spec[IR_MAX_RANK * 4 + 1] = "";
  unsigned used = 0;
  for (int i = 0; i < l->n; i++) {
    const ast *e = l->kid[i];
    int a = e->kind == AST_NAME ? ir_axis_from_name(e->name, strlen(e->name)) : -1;
    bool rep = e->kind == AST_NAME && strcmp(e->name, "_") == 0;
    if (!rep && (a < 0 || a == IR_AXIS_PP)) {
      fe_error(S, e, "entry %d of the list of %s must be a mesh axis that splits a value (dp or tp) or _ (replicated)%s", i + 1,
               A->what, a == IR_AXIS_PP ? ": pp splits the layers, not values" : "");
      return sv_poison();
    }
    if (!rep && ((used >> a) & 1)) {
      fe_error(S, e, "%s splits two dims in the list of %s (an axis splits at most one)", e->name, A->what);
      return sv_poison();
    }
    if (!rep) used |= 1u << a;
    snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "%s%s", i ? ", " : "", rep ? "-" : ir_axis_name((ir_axis)a));
  }
  ir_attr at = ir_attr_str("spec", spec);
  return build(S, call, A, IR_OP_SHARD_HINT, &x, 1, &at, 1, NULL);
}

/* ---------------------------------------------------------------------- */
/* the table                                                               */
/* ---------------------------------------------------------------------- */

/* Elementwise ops flagged LANG in ops.def are builtins of their own name
 * (unary and binary: exp(x), maximum(a, b)); the rows of other ops are
 * skipped. Then the builtins with their own handlers. */
#define LANG_OP(id, nm, nin, kind, flags)                                                                  \
  {((flags) & IR_OPF_LANG) ? nm : NULL, ((flags) & IR_OPF_LANG) ? (IR_OPK_##kind == IR_OPK_BINARY ? h_binary : h_unary) : NULL, \
   IR_OP_##id, nin, nin, {NULL}},
static const bi_spec builtins[] = {
#define OP(id, nm, nin, nout, kind, flags, flops, scalar) LANG_OP(id, nm, nin, kind, flags)
#include "ops.def"
#undef OP
    {"where", h_where, IR_OP_WHERE, 3, 3, {NULL}},
    {"sum", h_reduce, IR_OP_REDUCE_SUM, 1, 1, {"axis", "keepdims", NULL}},
    {"mean", h_reduce, IR_OP_REDUCE_MEAN, 1, 1, {"axis", "keepdims", NULL}},
    {"max", h_reduce, IR_OP_REDUCE_MAX, 1, 1, {"axis", "keepdims", NULL}},
    {"var", h_var, IR_OP_REDUCE_SUM, 1, 1, {"axis", "keepdims", "correction", NULL}},
    {"tril", h_tri, IR_OP_WHERE, 1, 1, {"k", NULL}},
    {"triu", h_tri, IR_OP_WHERE, 1, 1, {"k", NULL}},
    {"softmax", h_softmax, IR_OP_SOFTMAX, 1, 1, {"axis", NULL}},
    {"log_softmax", h_softmax, IR_OP_LOG_SOFTMAX, 1, 1, {"axis", NULL}},
    {"argmax", h_softmax, IR_OP_ARGMAX, 1, 1, {"axis", NULL}},
    {"layernorm", h_norm, IR_OP_LAYERNORM, 3, 3, {"eps", NULL}},
    {"rmsnorm", h_norm, IR_OP_RMSNORM, 2, 2, {"eps", NULL}},
    {"matmul", h_matmul, IR_OP_MATMUL, 2, 2, {NULL}},
    {"transpose", h_transpose, IR_OP_TRANSPOSE, 1, 2, {NULL}},
    {"permute", h_transpose, IR_OP_TRANSPOSE, 2, 2, {NULL}},
    {"reshape", h_reshape, IR_OP_RESHAPE, 2, 2, {NULL}},
    {"slice", h_slice, IR_OP_SLICE, 1, 1, {"axis", "start", "end", "step"}},
    {"concat", h_concat, IR_OP_CONCAT, 1, 1, {"axis", NULL}},
    {"split", h_split, IR_OP_SPLIT, 2, 2, {"axis", NULL}},
    {"embedding", h_tensor_op, IR_OP_EMBEDDING, 2, 2, {NULL}},
    {"cross_entropy", h_tensor_op, IR_OP_CROSS_ENTROPY, 2, 2, {NULL}},
    {"causal_mask", h_tensor_op, IR_OP_CAUSAL_MASK, 1, 1, {NULL}},
    {"dropout", h_dropout, IR_OP_DROPOUT, 2, 2, {NULL}},
    {"einsum", h_einsum, IR_OP_EINSUM, 2, -1, {NULL}},
    {"cast", h_cast, IR_OP_CAST, 2, 2, {NULL}},
    {"zeros", h_fill, IR_OP_CONST, 1, 2, {NULL}},
    {"ones", h_fill, IR_OP_CONST, 1, 2, {NULL}},
    {"full", h_fill, IR_OP_CONST, 2, 3, {NULL}},
    {"arange", h_arange, IR_OP_IOTA, 1, 1, {NULL}},
    {"grad", h_grad, IR_OP_GRAD, 2, 2, {NULL}},
    {"shard", h_shard, IR_OP_SHARD_HINT, 2, 2, {NULL}},
    {"floordiv", h_intdiv, IR_OP_DIV, 2, 2, {NULL}},
    {"%", h_intdiv, IR_OP_DIV, 2, 2, {NULL}}, /* a % b */
};
#define N_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

static const bi_spec *find_builtin(const char *name) {
  for (int i = 0; i < N_BUILTINS; i++)
    if (builtins[i].name && strcmp(builtins[i].name, name) == 0) return &builtins[i];
  return NULL;
}

bool fe_is_builtin(const char *name) { return find_builtin(name) != NULL; }

const char *fe_builtin_name(int i) {
  for (int k = 0; k < N_BUILTINS; k++)
    if (builtins[k].name && builtins[k].name[0] != '%' && i-- == 0) return builtins[k].name;
  return NULL;
}

static const char *suggest_function(fe_sema *S, const char *name) {
  const char *best = NULL;
  int best_d = strlen(name) <= 3 ? 2 : 3;
  for (int i = 0; i < N_BUILTINS; i++) {
    if (!builtins[i].name || builtins[i].name[0] == '%') continue;
    int d = fe_edit_distance(name, builtins[i].name, best_d - 1);
    if (d < best_d) {
      best_d = d;
      best = builtins[i].name;
    }
  }
  for (size_t i = 0; i < S->fns.cap; i++) {
    const fe_sym *s = &S->fns.slots[i];
    if (!s->name || s->kind == SYM_FREE) continue;
    int d = fe_edit_distance(name, s->name, best_d - 1);
    if (d < best_d) {
      best_d = d;
      best = s->name;
    }
  }
  return best;
}

/* The name other libraries use for an attribute (torch's dim, keepdim):
 * suggested when b has the attribute under this language's name. */
static const char *attr_synonym(const bi_spec *b, const char *name) {
  static const char *const syn[][2] = {{"dim", "axis"}, {"dims", "axis"}, {"axes", "axis"},
                                       {"keepdim", "keepdims"}, {"keep_dims", "keepdims"},
                                       {"epsilon", "eps"}, {"begin", "start"}, {"stop", "end"},
                                       {"stride", "step"}};
  for (size_t i = 0; i < sizeof syn / sizeof syn[0]; i++)
    if (strcmp(syn[i][0], name) == 0)
      for (int j = 0; j < MAX_KWS && b->kws[j]; j++)
        if (strcmp(b->kws[j], syn[i][1]) == 0) return b->kws[j];
  return NULL;
}

static void expected_str(int least, int most, char *buf, size_t n) {
  if (most < 0) snprintf(buf, n, "at least %d", least);
  else if (most == least) snprintf(buf, n, "%d", least);
  else if (most == least + 1) snprintf(buf, n, "%d or %d", least, most);
  else snprintf(buf, n, "%d to %d", least, most);
}

static sv call_builtin(fe_sema *S, const ast *call, const char *const *hints, int n_hints) {
  const bi_spec *b = find_builtin(call->name);
  bi_args A = {.hints = hints, .n_hints = n_hints, .hint = n_hints > 0 ? hints[0] : NULL};
  /* per-call scratch on the stack (the arena would keep it for the whole
   * compile: ~100 bytes per call of a 10^6-op model) */
  char what_small[64];
  size_t wl = strlen(call->name) + 3;
  char *what = wl <= sizeof what_small ? what_small : ir_arena_alloc(S->arena, wl);
  snprintf(what, wl, "'%s'", call->name);
  A.what = what;
  int n_pos = 0;
  bool seen_kw = false, bad = false;
  for (int i = 0; i < call->n; i++) {
    if (call->kid[i]->kind == AST_KWARG) {
      seen_kw = true;
    } else {
      if (seen_kw) {
        fe_error(S, call->kid[i], "positional argument after keyword arguments in call of %s", what);
        return sv_poison();
      }
      n_pos++;
    }
  }
  /* the keywords may also be given by position, in their order, after the
   * positional arguments: softmax(x, 1) is softmax(x, axis=1) */
  int n_kws = 0;
  while (n_kws < MAX_KWS && b->kws[n_kws]) n_kws++;
  int most = b->max_pos < 0 ? -1 : b->max_pos + n_kws;
  if (n_pos < b->min_pos || (most >= 0 && n_pos > most)) {
    char exp[48], names[96] = "";
    expected_str(b->min_pos, most, exp, sizeof exp);
    for (int j = 0; j < n_kws; j++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s%s", j ? ", " : " (then: ", b->kws[j],
               j == n_kws - 1 ? ")" : "");
    fe_error(S, call, "wrong number of arguments to %s: expected %s%s, got %d", what, exp, names, n_pos);
    return sv_poison();
  }
  int n_by_pos = b->max_pos >= 0 && n_pos > b->max_pos ? n_pos - b->max_pos : 0; /* keywords given by position */
  n_pos -= n_by_pos;
  A.n = n_pos;
  enum { SMALL_ARGS = 8 };
  sv pos_small[SMALL_ARGS];
  const ast *pos_at_small[SMALL_ARGS];
  A.pos = n_pos <= SMALL_ARGS ? pos_small : ir_arena_alloc(S->arena, (size_t)n_pos * sizeof *A.pos);
  A.pos_at = n_pos <= SMALL_ARGS ? pos_at_small : ir_arena_alloc(S->arena, (size_t)n_pos * sizeof *A.pos_at);
  for (int i = 0; i < MAX_KWS; i++) A.kw[i].kind = SV_NONE;
  /* dropout(e, 0) is e itself, named as e would be (x = dropout(e, 0) names
   * e's value x): its p is evaluated first (a number: no nodes) */
  sv drop_p = {.kind = SV_NONE};
  bool drop_zero = false;
  if (b->fn == h_dropout && n_pos == 2) {
    drop_p = fe_eval(S, call->kid[1], NULL, 0);
    drop_zero = sv_is_const(drop_p) && drop_p.kind != SV_BOOL && sv_num(drop_p) == 0;
  }
  for (int i = 0, p = 0; i < call->n; i++) {
    const ast *k = call->kid[i];
    if (k->kind != AST_KWARG && p == n_pos) { /* a keyword by position */
      int slot = i - n_pos;
      A.kw_at[slot] = k;
      A.kw[slot] = fe_eval(S, k, NULL, 0);
      if (A.kw[slot].kind == SV_POISON) bad = true;
      else if (A.kw[slot].kind == SV_NONE || A.kw[slot].kind == SV_TUPLE) {
        fe_error(S, k, "argument %d of %s (%s) cannot be %s", i + 1, what, b->kws[slot], fe_describe(S, A.kw[slot]));
        bad = true;
      }
      continue;
    }
    if (k->kind != AST_KWARG && b->fn == h_shard && p == 1) { /* a list of axes as written: h_shard reads the AST */
      A.pos_at[p] = k;
      A.pos[p] = sv_poison();
      p++;
      continue;
    }
    if (k->kind != AST_KWARG) {
      A.pos_at[p] = k;
      A.pos[p] = drop_p.kind != SV_NONE && p == 1 ? drop_p
                 : drop_zero && p == 0            ? fe_eval(S, k, hints, n_hints)
                                                  : fe_eval(S, k, NULL, 0);
      if (A.pos[p].kind == SV_POISON) bad = true;
      else if (A.pos[p].kind == SV_TUPLE || A.pos[p].kind == SV_NONE) {
        fe_error(S, k, "argument %d of %s cannot be %s", p + 1, what, fe_describe(S, A.pos[p]));
        bad = true;
      }
      p++;
      continue;
    }
    int slot = -1;
    for (int j = 0; j < MAX_KWS && b->kws[j]; j++)
      if (strcmp(b->kws[j], k->name) == 0) slot = j;
    if (slot < 0) {
      const char *best = attr_synonym(b, k->name);
      int best_d = best ? 0 : 3;
      for (int j = 0; j < MAX_KWS && b->kws[j]; j++) {
        int d = fe_edit_distance(k->name, b->kws[j], best_d - 1);
        if (d < best_d) {
          best_d = d;
          best = b->kws[j];
        }
      }
      if (best) fe_error(S, k, "unknown attribute '%s' for %s (did you mean '%s'?)", k->name, what, best);
      else fe_error(S, k, "unknown attribute '%s' for %s", k->name, what);
      bad = true;
      continue;
    }
    if (A.kw[slot].kind != SV_NONE) {
      fe_error(S, k, "attribute '%s' given twice in call of %s", k->name, what);
      bad = true;
      continue;
    }
    A.kw_at[slot] = k;
    A.kw[slot] = fe_eval(S, k->kid[0], NULL, 0);
    if (A.kw[slot].kind == SV_POISON) bad = true;
    else if (A.kw[slot].kind == SV_NONE || A.kw[slot].kind == SV_TUPLE) {
      fe_error(S, k, "attribute '%s' of %s cannot be %s", k->name, what, fe_describe(S, A.kw[slot]));
      bad = true;
    }
  }
  if (bad || S->aborted) return sv_poison();
  return b->fn(S, call, b, &A);
}

const fe_builtin_table fe_builtins = {fe_is_builtin, call_builtin, suggest_function};
