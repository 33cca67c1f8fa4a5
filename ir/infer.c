/* ir/infer.c — shape and dtype inference: the typing rules of every op.
 *
 * ir_infer is the one place the rules live; sema (for .tg), the .ir reader,
 * ir_graph_build and the verifier all call it. Its input may be untrusted,
 * so it checks everything it reads: operand types (dtype, rank, dims, element
 * count), arity, attributes (present, right kind, values in range, no
 * duplicates), then the op's own rule. Every result is checked against
 * IR_MAX_RANK and IR_MAX_ELEMENTS with overflow-safe products.
 *
 * Elementwise ops are typed by their kind and their ops.def flags (the
 * operand dtypes they take); every other op has its rule in a switch whose
 * default is an internal error, which test_ir_infer's loop over every op
 * of ops.def would hit.
 *
 * Attribute conventions (ops.def gives the keys):
 *   - axes are normalized: 0 <= axis < rank; "axes" lists are strictly
 *     increasing (sorted, unique); may be empty (reduce nothing).
 *   - optional: reduce_* "keepdims" (0 or 1, default 0), slice "step"
 *     (default 1), matmul "transpose_a" / "transpose_b" (see below). Every
 *     other listed attribute is required.
 *   - float attributes (const "value", norm "eps") must be FLOAT; eps must be
 *     finite and >= 0. Attributes not used by an op are ignored (passes may
 *     annotate nodes), but a key given twice is an error.
 *   - matmul needs rank >= 2 on both sides (the frontend lowers 1-D operands);
 *     matmul and fused_matmul take optional "transpose_a" / "transpose_b"
 *     (0 or 1, default 0): 1 reads that operand with its last two axes swapped.
 *   - split: out must have room for one type per entry of "sizes" (a caller
 *     sizes its buffer by that attribute); fused: room for
 *     IR_FUSED_MAX_RESULTS; other ops write one result.
 *
 * Messages are one line, user-facing, printing full types ("f32[2, 3]").
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

typedef struct {
  ir_op op;
  const char *name; /* ir_op_name(op) */
  const ir_attr *attrs;
  int n_attrs;
  char *err;
  size_t errlen;
} ctx;

static int fail(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ctx *c, const char *fmt, ...) {
  if (c->err && c->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* A type as text, usable inside one printf call: ts(&t).s */
typedef struct {
  char s[256];
} tstr;
static tstr ts(const ir_type *t) {
  tstr r;
  ir_type_str(t, r.s, sizeof r.s);
  return r;
}
/* An int list as text, "[1, 2]" (elided past 16 entries). */
static tstr ints_str(const int64_t *v, int n) {
  tstr r;
  size_t k = 0;
  r.s[k++] = '[';
  for (int i = 0; i < n && k < sizeof r.s - 32; i++) {
    if (i == 16) {
      k += (size_t)snprintf(r.s + k, sizeof r.s - k, ", ...");
      break;
    }
    k += (size_t)snprintf(r.s + k, sizeof r.s - k, i ? ", %lld" : "%lld", (long long)v[i]);
  }
  snprintf(r.s + k, sizeof r.s - k, "]");
  return r;
}

/* Element count of dims[0..rank) or -1 if it (or any dim) exceeds
 * IR_MAX_ELEMENTS. Dims must be non-negative. */
static int64_t checked_numel(const int64_t *dims, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    if (dims[i] > IR_MAX_ELEMENTS) return -1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] == 0) return 0;
    if (n > IR_MAX_ELEMENTS / dims[i]) return -1;
    n *= dims[i];
  }
  return n;
}

/* Checks a type from outside (operand, or given result of a nullary op). */
static int check_type(ctx *c, const ir_type *t, const char *what, int index) {
  if ((unsigned)t->dtype >= IR_NUM_DTYPES)
    return fail(c, "%s %d of %s has an invalid dtype", what, index, c->name);
  if (t->rank < 0 || t->rank > IR_MAX_RANK)
    return fail(c, "%s %d of %s has rank %d (the maximum is %d)", what, index, c->name, t->rank,
                IR_MAX_RANK);
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0)
      return fail(c, "%s %d of %s has a negative dimension: %s", what, index, c->name, ts(t).s);
  if (checked_numel(t->dims, t->rank) < 0) return fail(c, "tensor %s has too many elements", ts(t).s);
  return 0;
}

/* Checks a computed result (rank already known to be <= IR_MAX_RANK). */
static int check_result(ctx *c, const ir_type *t) {
  if (checked_numel(t->dims, t->rank) < 0) return fail(c, "tensor %s has too many elements", ts(t).s);
  return 0;
}

/* ---- attributes ---- */
static const char *attr_kind_name(ir_attr_kind k) {
  switch (k) {
  case IR_ATTR_INT: return "an int";
  case IR_ATTR_FLOAT: return "a float";
  case IR_ATTR_INTS: return "a list of ints";
  case IR_ATTR_STR: return "a string";
  case IR_ATTR_DTYPE: return "a dtype";
  case IR_ATTR_MESH_AXIS: return "a mesh axis";
  }
  return "?";
}

static int check_attrs(ctx *c) {
  if (c->n_attrs < 0 || (c->n_attrs > 0 && !c->attrs)) return fail(c, "malformed attributes in %s", c->name);
  for (int i = 0; i < c->n_attrs; i++) {
    const ir_attr *a = &c->attrs[i];
    if (!a->key || !a->key[0]) return fail(c, "attribute with no name in %s", c->name);
    if (a->kind == IR_ATTR_INTS && (a->n < 0 || (a->n > 0 && !a->ints)))
      return fail(c, "malformed attribute '%s' in %s", a->key, c->name);
    if (a->kind == IR_ATTR_STR && !a->s) return fail(c, "malformed attribute '%s' in %s", a->key, c->name);
    for (int j = 0; j < i; j++)
      if (strcmp(c->attrs[j].key, a->key) == 0)
        return fail(c, "duplicate attribute '%s' in %s", a->key, c->name);
  }
  return 0;
}

/* The attribute key of the wanted kind: 0 found, 1 absent and optional, -1 error. */
static int get_attr(ctx *c, const char *key, ir_attr_kind kind, bool required, const ir_attr **out) {
  *out = NULL;
  for (int i = 0; i < c->n_attrs; i++)
    if (strcmp(c->attrs[i].key, key) == 0) *out = &c->attrs[i];
  if (!*out) return required ? fail(c, "missing attribute '%s' in %s", key, c->name) : 1;
  if ((*out)->kind != kind)
    return fail(c, "attribute '%s' of %s must be %s", key, c->name, attr_kind_name(kind));
  return 0;
}

static int get_int(ctx *c, const char *key, bool required, int64_t dflt, int64_t *v) {
  const ir_attr *a;
  int r = get_attr(c, key, IR_ATTR_INT, required, &a);
  if (r < 0) return -1;
  *v = r == 0 ? a->i : dflt;
  return 0;
}

static int get_ints(ctx *c, const char *key, const int64_t **v, int *n) {
  const ir_attr *a;
  if (get_attr(c, key, IR_ATTR_INTS, true, &a) < 0) return -1;
  *v = a->ints;
  *n = a->n;
  return 0;
}

/* A single normalized axis of t. */
static int get_axis(ctx *c, const char *key, const ir_type *t, int *axis) {
  int64_t v;
  if (get_int(c, key, true, 0, &v) < 0) return -1;
  if (v < 0 || v >= t->rank) return fail(c, "axis %lld out of range for %s in %s", (long long)v, ts(t).s, c->name);
  *axis = (int)v;
  return 0;
}

static int get_eps(ctx *c) {
  const ir_attr *a;
  if (get_attr(c, "eps", IR_ATTR_FLOAT, true, &a) < 0) return -1;
  if (!isfinite(a->f) || a->f < 0)
    return fail(c, "attribute 'eps' of %s must be a finite float >= 0, got %g", c->name, a->f);
  return 0;
}

/* ---- dtype classes ---- */
static bool is_int_dtype(ir_dtype t) { return t == IR_DT_I32 || t == IR_DT_I64; }

static int need_float(ctx *c, const ir_type *t, bool plural) {
  if (ir_dtype_is_float(t->dtype)) return 0;
  return fail(c, "%s needs %s, got %s", c->name, plural ? "floating-point operands" : "a floating-point operand",
              ir_dtype_name(t->dtype));
}
static int need_numeric(ctx *c, const ir_type *t, bool plural) {
  if (t->dtype != IR_DT_BOOL) return 0;
  return fail(c, "%s needs %s, got bool", c->name, plural ? "numeric operands" : "a numeric operand");
}
static int need_bool(ctx *c, const ir_type *t, bool plural) {
  if (t->dtype == IR_DT_BOOL) return 0;
  return fail(c, "%s needs %s, got %s", c->name, plural ? "bool operands" : "a bool operand", ir_dtype_name(t->dtype));
}
static int same_dtype(ctx *c, const ir_type *a, const ir_type *b) {
  if (a->dtype == b->dtype) return 0;
  return fail(c, "dtype mismatch in %s: %s and %s", c->name, ir_dtype_name(a->dtype), ir_dtype_name(b->dtype));
}

/* ---- broadcasting ---- */
/* Numpy broadcast of the shapes of a and b (dtype of a); 0 or 1 if they do not broadcast. */
static int broadcast(const ir_type *a, const ir_type *b, ir_type *out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  ir_type t = {.dtype = a->dtype, .rank = r};
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) return 1;
    t.dims[i] = da == 1 ? db : da;
  }
  *out = t;
  return 0;
}

int ir_broadcast_shapes(const ir_type *a, const ir_type *b, ir_type *out, char *err, size_t errlen) {
  ctx c = {.err = err, .errlen = errlen};
  if (broadcast(a, b, out)) return fail(&c, "cannot broadcast %s with %s", ts(a).s, ts(b).s);
  return 0;
}

static int broadcast_in(ctx *c, const ir_type *a, const ir_type *b, ir_type *out) {
  if (broadcast(a, b, out)) return fail(c, "cannot broadcast %s with %s in %s", ts(a).s, ts(b).s, c->name);
  return 0;
}

/* ---- per-op rules ---- */
static int infer_nullary(ctx *c, ir_type *out) {
  if (check_type(c, out, "result", 0) < 0) return -1;
  if (c->op == IR_OP_CONST) {
    const ir_attr *a;
    return get_attr(c, "value", IR_ATTR_FLOAT, true, &a) < 0 ? -1 : 0;
  }
  /* iota */
  if (out->dtype == IR_DT_BOOL) return fail(c, "iota needs a numeric type, got %s", ts(out).s);
  int axis;
  return get_axis(c, "axis", out, &axis);
}

/* The operand dtypes an elementwise op takes (its ops.def flags). */
static int need_domain(ctx *c, const ir_type *t, bool plural) {
  unsigned f = ir_op_flags(c->op);
  if (f & IR_OPF_FLOAT) return need_float(c, t, plural);
  if (f & IR_OPF_NUMERIC) return need_numeric(c, t, plural);
  if (f & IR_OPF_BOOL) return need_bool(c, t, plural);
  return 0;
}

static int infer_unary(ctx *c, const ir_type *x, ir_type *out) {
  *out = *x;
  if (c->op == IR_OP_CAST) {
    const ir_attr *a;
    if (get_attr(c, "to", IR_ATTR_DTYPE, true, &a) < 0) return -1;
    if (a->i < 0 || a->i >= IR_NUM_DTYPES) return fail(c, "attribute 'to' of cast is not a valid dtype");
    out->dtype = (ir_dtype)a->i;
    return 0;
  }
  return need_domain(c, x, false);
}

static int infer_binary(ctx *c, const ir_type *a, const ir_type *b, ir_type *out) {
  if (same_dtype(c, a, b) < 0) return -1;
  if (need_domain(c, a, true) < 0) return -1;
  if (broadcast_in(c, a, b, out) < 0) return -1;
  if (ir_op_is_comparison(c->op)) out->dtype = IR_DT_BOOL;
  return check_result(c, out);
}

static int infer_where(ctx *c, const ir_type *in, ir_type *out) {
  if (in[0].dtype != IR_DT_BOOL) return fail(c, "where needs a bool condition, got %s", ir_dtype_name(in[0].dtype));
  if (same_dtype(c, &in[1], &in[2]) < 0) return -1;
  ir_type ab;
  if (broadcast_in(c, &in[1], &in[2], &ab) < 0 || broadcast_in(c, &in[0], &ab, out) < 0) return -1;
  out->dtype = in[1].dtype;
  return check_result(c, out);
}

/* transpose_a / transpose_b: optional, 0 or 1 (absent = 0); 1 reads that
 * operand as the transpose of its last two axes. */
static int get_transpose_flag(ctx *c, const char *key, bool *set) {
  int64_t v;
  if (get_int(c, key, false, 0, &v) < 0) return -1;
  if (v != 0 && v != 1) return fail(c, "attribute '%s' of %s must be 0 or 1, got %lld", key, c->name, (long long)v);
  *set = v == 1;
  return 0;
}

static int infer_matmul(ctx *c, const ir_type *a, const ir_type *b, ir_type *out) {
  bool ta = false, tb = false;
  if (get_transpose_flag(c, "transpose_a", &ta) < 0 || get_transpose_flag(c, "transpose_b", &tb) < 0) return -1;
  if (same_dtype(c, a, b) < 0 || need_float(c, a, true) < 0) return -1;
  if (a->rank < 2 || b->rank < 2)
    return fail(c, "matmul needs operands of rank >= 2, got %s @ %s", ts(a).s, ts(b).s);
  /* a[..., M, K] (transposed: [..., K, M]) @ b[..., K, N] (transposed: [..., N, K]) */
  int64_t m = a->dims[a->rank - (ta ? 1 : 2)], k1 = a->dims[a->rank - (ta ? 2 : 1)];
  int64_t k2 = b->dims[b->rank - (tb ? 1 : 2)], n = b->dims[b->rank - (tb ? 2 : 1)];
  if (k1 != k2)
    return fail(c, "shape mismatch in matmul: %s%s @ %s%s: inner dimensions %lld and %lld differ", ts(a).s,
                ta ? " (transposed)" : "", ts(b).s, tb ? " (transposed)" : "", (long long)k1, (long long)k2);
  ir_type ba = {.dtype = a->dtype, .rank = a->rank - 2}, bb = {.dtype = b->dtype, .rank = b->rank - 2};
  memcpy(ba.dims, a->dims, sizeof(int64_t) * (size_t)ba.rank);
  memcpy(bb.dims, b->dims, sizeof(int64_t) * (size_t)bb.rank);
  if (broadcast(&ba, &bb, out))
    return fail(c, "shape mismatch in matmul: %s @ %s: batch dimensions do not broadcast", ts(a).s, ts(b).s);
  out->dims[out->rank++] = m;
  out->dims[out->rank++] = n;
  return check_result(c, out);
}

static int infer_transpose(ctx *c, const ir_type *x, ir_type *out) {
  const int64_t *perm;
  int n;
  if (get_ints(c, "perm", &perm, &n) < 0) return -1;
  bool ok = n == x->rank, seen[IR_MAX_RANK] = {false};
  for (int i = 0; ok && i < n; i++) {
    ok = perm[i] >= 0 && perm[i] < n && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok)
    return fail(c, "perm %s of transpose is not a permutation of the %d axes of %s", ints_str(perm, n).s, x->rank,
                ts(x).s);
  *out = *x;
  for (int i = 0; i < n; i++) out->dims[i] = x->dims[perm[i]];
  return 0;
}

/* A shape attribute as a type of dtype dt; checks rank, signs, element count. */
static int shape_attr(ctx *c, ir_dtype dt, ir_type *out) {
  const int64_t *s;
  int n;
  if (get_ints(c, "shape", &s, &n) < 0) return -1;
  if (n > IR_MAX_RANK) return fail(c, "shape %s of %s has rank %d (the maximum is %d)", ints_str(s, n).s, c->name, n, IR_MAX_RANK);
  out->dtype = dt;
  out->rank = n;
  for (int i = 0; i < n; i++) {
    if (s[i] < 0) return fail(c, "shape %s of %s has a negative dimension", ints_str(s, n).s, c->name);
    out->dims[i] = s[i];
  }
  return check_result(c, out);
}

static int infer_reshape(ctx *c, const ir_type *x, ir_type *out) {
  if (shape_attr(c, x->dtype, out) < 0) return -1;
  int64_t nx = checked_numel(x->dims, x->rank), no = checked_numel(out->dims, out->rank);
  if (nx != no)
    return fail(c, "reshape cannot change the element count: %s (%lld elements) to %s (%lld elements)", ts(x).s,
                (long long)nx, ts(out).s, (long long)no);
  return 0;
}

static int infer_broadcast(ctx *c, const ir_type *x, ir_type *out) {
  if (shape_attr(c, x->dtype, out) < 0) return -1;
  ir_type b;
  bool ok = out->rank >= x->rank && !broadcast(x, out, &b) && ir_type_equal(&b, out);
  if (!ok) return fail(c, "cannot broadcast %s to %s", ts(x).s, ts(out).s);
  return 0;
}

static int infer_slice(ctx *c, const ir_type *x, ir_type *out) {
  int axis;
  int64_t start, end, step;
  if (get_axis(c, "axis", x, &axis) < 0 || get_int(c, "start", true, 0, &start) < 0 ||
      get_int(c, "end", true, 0, &end) < 0 || get_int(c, "step", false, 1, &step) < 0)
    return -1;
  int64_t d = x->dims[axis];
  if (step < 1) return fail(c, "slice step must be >= 1, got %lld", (long long)step);
  if (start < 0 || start > end || end > d)
    return fail(c, "slice of %s on axis %d needs 0 <= start <= end <= %lld, got start %lld, end %lld", ts(x).s, axis,
                (long long)d, (long long)start, (long long)end);
  *out = *x;
  out->dims[axis] = (end - start) / step + ((end - start) % step != 0);
  return 0;
}

static int infer_concat(ctx *c, const ir_type *in, int n, ir_type *out) {
  int axis;
  if (get_axis(c, "axis", &in[0], &axis) < 0) return -1;
  *out = in[0];
  for (int i = 1; i < n; i++) {
    if (same_dtype(c, &in[0], &in[i]) < 0) return -1;
    if (in[i].rank != in[0].rank)
      return fail(c, "concat needs operands of equal rank: %s and %s", ts(&in[0]).s, ts(&in[i]).s);
    for (int d = 0; d < in[0].rank; d++)
      if (d != axis && in[i].dims[d] != in[0].dims[d])
        return fail(c, "shape mismatch in concat on axis %d: %s and %s", axis, ts(&in[0]).s, ts(&in[i]).s);
    out->dims[axis] += in[i].dims[axis];
    if (out->dims[axis] > IR_MAX_ELEMENTS) return fail(c, "concat result has too many elements");
  }
  return check_result(c, out);
}

static int infer_split(ctx *c, const ir_type *x, ir_type *out, int *n_out) {
  int axis, n;
  const int64_t *sizes;
  if (get_axis(c, "axis", x, &axis) < 0 || get_ints(c, "sizes", &sizes, &n) < 0) return -1;
  if (n < 1) return fail(c, "split needs at least one size");
  int64_t sum = 0;
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 0 || sizes[i] > x->dims[axis])
      return fail(c, "split sizes %s do not add up to %lld, dimension %d of %s", ints_str(sizes, n).s,
                  (long long)x->dims[axis], axis, ts(x).s);
    sum += sizes[i]; /* each <= dim <= 2^48: no overflow before the check below */
    if (sum > x->dims[axis]) break;
  }
  if (sum != x->dims[axis])
    return fail(c, "split sizes %s do not add up to %lld, dimension %d of %s", ints_str(sizes, n).s,
                (long long)x->dims[axis], axis, ts(x).s);
  for (int i = 0; i < n; i++) {
    out[i] = *x;
    out[i].dims[axis] = sizes[i];
  }
  *n_out = n;
  return 0;
}

static int infer_reduce(ctx *c, const ir_type *x, ir_type *out) {
  if (c->op == IR_OP_REDUCE_MEAN ? need_float(c, x, false) < 0 : need_numeric(c, x, false) < 0) return -1;
  const int64_t *axes;
  int n;
  int64_t keep;
  if (get_ints(c, "axes", &axes, &n) < 0 || get_int(c, "keepdims", false, 0, &keep) < 0) return -1;
  if (keep != 0 && keep != 1) return fail(c, "attribute 'keepdims' of %s must be 0 or 1, got %lld", c->name, (long long)keep);
  bool ok = n <= x->rank;
  for (int i = 0; ok && i < n; i++) ok = axes[i] >= 0 && axes[i] < x->rank && (i == 0 || axes[i] > axes[i - 1]);
  if (!ok)
    return fail(c, "invalid axes %s in %s of %s: need sorted, unique axes in [0, %d)", ints_str(axes, n).s, c->name,
                ts(x).s, x->rank);
  out->dtype = x->dtype;
  out->rank = 0;
  int64_t count = 1; /* elements per result */
  for (int d = 0, j = 0; d < x->rank; d++) {
    bool reduced = j < n && axes[j] == d;
    if (reduced) j++, count *= x->dims[d];
    if (!reduced) out->dims[out->rank++] = x->dims[d];
    else if (keep) out->dims[out->rank++] = 1;
  }
  /* a sum of nothing is 0; a max or mean of nothing has no value */
  if (count == 0 && ir_type_numel(out) > 0 && c->op != IR_OP_REDUCE_SUM)
    return fail(c, "%s over axes %s of %s: the %s of no elements is undefined", c->name, ints_str(axes, n).s, ts(x).s,
                c->op == IR_OP_REDUCE_MAX ? "max" : "mean");
  return 0;
}

static int infer_softmax(ctx *c, const ir_type *x, ir_type *out) {
  int axis;
  if (need_float(c, x, false) < 0 || get_axis(c, "axis", x, &axis) < 0) return -1;
  *out = *x;
  return 0;
}

/* argmax(x) {axis} -> i32 with the axis removed */
static int infer_argmax(ctx *c, const ir_type *x, ir_type *out) {
  int axis;
  if (need_numeric(c, x, false) < 0 || get_axis(c, "axis", x, &axis) < 0) return -1;
  if (x->dims[axis] == 0) return fail(c, "argmax over an empty axis of %s has no value", ts(x).s);
  if (x->dims[axis] > INT32_MAX) return fail(c, "argmax over an axis of %lld elements: indices are i32", (long long)x->dims[axis]);
  out->dtype = IR_DT_I32;
  out->rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (d != axis) out->dims[out->rank++] = x->dims[d];
  return check_result(c, out);
}

/* count_nonfinite(x...) -> i64[]; sum_squares(x...) -> f64[]: every operand float */
static int infer_multi_reduce(ctx *c, const ir_type *in, int n, ir_dtype result, ir_type *out) {
  for (int i = 0; i < n; i++) {
    if (c->op == IR_OP_COUNT_NONFINITE && in[i].dtype == IR_DT_I64 && in[i].rank == 0) continue; /* a count taken */
    if (need_float(c, &in[i], false) < 0) return -1;
  }
  *out = (ir_type){.dtype = result, .rank = 0};
  return 0;
}

/* layernorm(x, gamma, beta) / rmsnorm(x, gamma): params are [D], D = last dim of x */
static int infer_norm(ctx *c, const ir_type *in, int n, ir_type *out) {
  const ir_type *x = &in[0];
  if (need_float(c, x, false) < 0) return -1;
  for (int i = 1; i < n; i++)
    if (same_dtype(c, x, &in[i]) < 0) return -1;
  if (x->rank < 1) return fail(c, "%s needs an operand of rank >= 1, got %s", c->name, ts(x).s);
  for (int i = 1; i < n; i++)
    if (in[i].rank != 1 || in[i].dims[0] != x->dims[x->rank - 1])
      return fail(c, "shape mismatch in %s: %s %s must be [%lld], the last dimension of %s", c->name,
                  i == 1 ? "gamma" : "beta", ts(&in[i]).s, (long long)x->dims[x->rank - 1], ts(x).s);
  if (get_eps(c) < 0) return -1;
  *out = *x;
  return 0;
}

/* layernorm_grad / rmsnorm_grad (x, gamma, dy) {eps} -> (dx, dgamma[, dbeta]):
 * x and gamma as the forward's, dy of x's type. */
static int infer_norm_grad(ctx *c, const ir_type *in, ir_type *out, int *n_out) {
  if (infer_norm(c, in, 2, &out[0]) < 0) return -1;
  if (!ir_type_equal(&in[2], &in[0])) return fail(c, "%s: dy must be %s (x's type), got %s", c->name, ts(&in[0]).s, ts(&in[2]).s);
  *n_out = c->op == IR_OP_LAYERNORM_GRAD ? 3 : 2;
  for (int i = 1; i < *n_out; i++) out[i] = in[1];
  return 0;
}

static int infer_embedding(ctx *c, const ir_type *table, const ir_type *ids, ir_type *out) {
  if (table->rank != 2) return fail(c, "embedding table must have rank 2, got %s", ts(table).s);
  if (!is_int_dtype(ids->dtype)) return fail(c, "embedding ids must be i32 or i64, got %s", ir_dtype_name(ids->dtype));
  if (ids->rank + 1 > IR_MAX_RANK)
    return fail(c, "embedding of ids %s would have rank %d (the maximum is %d)", ts(ids).s, ids->rank + 1, IR_MAX_RANK);
  if (table->dims[0] == 0 && ir_type_numel(ids) > 0) /* an empty table with no ids is fine: an empty result */
    return fail(c, "embedding table %s has no rows: none of the %lld ids can be valid", ts(table).s,
                (long long)ir_type_numel(ids));
  *out = *ids;
  out->dtype = table->dtype;
  out->dims[out->rank++] = table->dims[1];
  return check_result(c, out);
}

static int infer_cross_entropy(ctx *c, const ir_type *logits, const ir_type *tgt, ir_type *out) {
  if (need_float(c, logits, false) < 0) return -1;
  if (!is_int_dtype(tgt->dtype)) return fail(c, "cross_entropy targets must be i32 or i64, got %s", ir_dtype_name(tgt->dtype));
  if (logits->rank < 1) return fail(c, "cross_entropy needs logits of rank >= 1, got %s", ts(logits).s);
  bool ok = tgt->rank == logits->rank - 1;
  for (int i = 0; ok && i < tgt->rank; i++) ok = tgt->dims[i] == logits->dims[i];
  if (!ok)
    return fail(c, "shape mismatch in cross_entropy: targets %s must have the shape of logits %s without the last dimension",
                ts(tgt).s, ts(logits).s);
  /* known at compile time: a mean over no positions, or targets with no class to name */
  if (ir_type_numel(tgt) == 0) return fail(c, "cross_entropy over 0 positions (logits %s): the mean is undefined", ts(logits).s);
  if (logits->dims[logits->rank - 1] == 0)
    return fail(c, "cross_entropy logits %s have no classes: no target can be valid", ts(logits).s);
  *out = (ir_type){.dtype = logits->dtype, .rank = 0};
  return 0;
}

static int infer_causal_mask(ctx *c, const ir_type *x, ir_type *out) {
  if (need_float(c, x, false) < 0) return -1;
  if (x->rank < 2) return fail(c, "causal_mask needs an operand of rank >= 2, got %s", ts(x).s);
  *out = *x;
  return 0;
}

/* dropout (x) {p}, or (x, key i64[], pos_0 .. pos_{r-1}) with pos_d an i64
 * of x's rank whose dims are 1 but d, which is x's (ops.def). */
static int infer_dropout(ctx *c, const ir_type *in, int n, ir_type *out) {
  const ir_attr *a;
  if (get_attr(c, "p", IR_ATTR_FLOAT, true, &a) < 0) return -1;
  if (!(a->f > 0 && a->f < 1)) return fail(c, "attribute 'p' of dropout must be in (0, 1), got %g", a->f);
  const ir_type *x = &in[0];
  if (need_float(c, x, false) < 0) return -1;
  if (n != 1 && n != x->rank + 2)
    return fail(c, "dropout takes x alone or x, a key and %d positions (one per dim of %s), got %d operands", x->rank,
                ts(x).s, n);
  if (n > 1 && (in[1].dtype != IR_DT_I64 || in[1].rank != 0))
    return fail(c, "the key of dropout must be i64[], got %s", ts(&in[1]).s);
  const int64_t *strides;
  int ns;
  int64_t stream;
  if (n > 1 && (get_int(c, "stream", true, 0, &stream) < 0 || get_ints(c, "strides", &strides, &ns) < 0)) return -1;
  if (n > 1 && ns != x->rank)
    return fail(c, "dropout's strides must have one entry per dim of %s, got %d", ts(x).s, ns);
  for (int d = 0; n > 1 && d < x->rank; d++) {
    const ir_type *p = &in[2 + d];
    bool ok = p->dtype == IR_DT_I64 && p->rank == x->rank;
    for (int k = 0; ok && k < x->rank; k++) ok = p->dims[k] == (k == d ? x->dims[d] : 1);
    if (!ok) return fail(c, "position %d of dropout must be i64 of %s's dim %d alone (1 elsewhere), got %s", d, ts(x).s, d,
                         ts(p).s);
  }
  *out = *x;
  return 0;
}

/* einsum {eq: "ij,jk->ik"}: explicit form only; letters a-z A-Z. */
/* The structure of attribute `eq` (ir/expr.c), or parsed now into *tmp
 * (the caller frees it) when the attribute came without one. */
static const ir_einsum *get_einsum(ctx *c, ir_einsum **tmp, const char **text) {
  const ir_attr *a;
  if (get_attr(c, "eq", IR_ATTR_STR, true, &a) < 0) return NULL;
  *text = a->s;
  if (a->einsum) return a->einsum;
  char msg[200];
  if (!(*tmp = ir_einsum_parse(a->s, msg, sizeof msg))) fail(c, "%s", msg);
  return *tmp;
}

static int infer_einsum(ctx *c, const ir_type *in, int n, ir_type *out) {
  for (int i = 1; i < n; i++)
    if (same_dtype(c, &in[0], &in[i]) < 0) return -1;
  if (need_float(c, &in[0], n > 1) < 0) return -1;
  ir_einsum *tmp = NULL;
  const char *eq = "";
  const ir_einsum *e = get_einsum(c, &tmp, &eq);
  if (!e) return -1;
  int64_t dim[52];
  int where[52] = {0}; /* operand that first fixed the letter's dim */
  for (int i = 0; i < 52; i++) dim[i] = -1;
  int r = 0;
  for (int t = 0; t < e->n_terms && t < n && r == 0; t++) {
    int len = e->start[t + 1] - e->start[t];
    for (int k = 0; k < len && k < in[t].rank; k++) {
      int li = e->labels[e->start[t] + k];
      int64_t d = in[t].dims[k];
      if (dim[li] < 0) {
        dim[li] = d;
        where[li] = t;
      } else if (dim[li] != d) {
        r = fail(c, "shape mismatch in einsum \"%.64s\": '%c' is %lld in %s and %lld in %s", eq, ir_einsum_letter(li),
                 (long long)dim[li], ts(&in[where[li]]).s, (long long)d, ts(&in[t]).s);
        break;
      }
    }
    if (r == 0 && len != in[t].rank) {
      char term[17];
      int shown = len > 16 ? 16 : len;
      for (int k = 0; k < shown; k++) term[k] = ir_einsum_letter(e->labels[e->start[t] + k]);
      term[shown] = 0;
      r = fail(c, "einsum term \"%s\" has %d letters but operand %d is %s", term, len, t, ts(&in[t]).s);
    }
  }
  if (r == 0 && e->n_terms < n) r = fail(c, "einsum equation \"%.64s\" has %d input terms but %d operands", eq, e->n_terms, n);
  if (r == 0 && e->n_terms > n) r = fail(c, "einsum equation \"%.64s\" has more input terms than the %d operands", eq, n);
  if (r == 0) {
    out->dtype = in[0].dtype;
    out->rank = e->out_len;
    for (int k = 0; k < e->out_len; k++) out->dims[k] = dim[e->out[k]];
    r = check_result(c, out);
  }
  ir_einsum_free(tmp);
  return r;
}


/* ---- autodiff helper ops ---- */
static int infer_grad(ctx *c, const ir_type *in, int n, ir_type *out, int *n_out) {
  if (n < 2) return fail(c, "grad takes a loss and at least one value to differentiate by, got %d operand%s", n, n == 1 ? "" : "s");
  if (in[0].rank != 0 || !ir_dtype_is_float(in[0].dtype))
    return fail(c, "grad needs a scalar floating-point loss, got %s", ts(&in[0]).s);
  for (int i = 1; i < n; i++) {
    if (!ir_dtype_is_float(in[i].dtype))
      return fail(c, "grad with respect to a %s value: only floating-point values have gradients", ts(&in[i]).s);
    out[i - 1] = in[i];
  }
  *n_out = n - 1;
  return 0;
}

static int infer_unslice(ctx *c, const ir_type *x, ir_type *out) {
  int axis;
  int64_t start, end, step, size;
  if (get_axis(c, "axis", x, &axis) < 0 || get_int(c, "start", true, 0, &start) < 0 ||
      get_int(c, "end", true, 0, &end) < 0 || get_int(c, "step", false, 1, &step) < 0 ||
      get_int(c, "size", true, 0, &size) < 0)
    return -1;
  if (step < 1) return fail(c, "unslice step must be >= 1, got %lld", (long long)step);
  if (start < 0 || start > end || end > size)
    return fail(c, "unslice needs 0 <= start <= end <= size, got start %lld, end %lld, size %lld", (long long)start,
                (long long)end, (long long)size);
  int64_t n = (end - start) / step + ((end - start) % step != 0);
  if (x->dims[axis] != n)
    return fail(c, "unslice of %s: axis %d has %lld elements but start:end:step selects %lld", ts(x).s, axis,
                (long long)x->dims[axis], (long long)n);
  *out = *x;
  out->dims[axis] = size;
  return check_result(c, out);
}

static int infer_embedding_grad(ctx *c, const ir_type *ids, const ir_type *g, ir_type *out) {
  int64_t vocab;
  if (get_int(c, "vocab", true, 0, &vocab) < 0) return -1;
  if (vocab < 0 || (vocab == 0 && ir_type_numel(ids) > 0))
    return fail(c, "embedding_grad vocab must be >= %d, got %lld", ir_type_numel(ids) > 0, (long long)vocab);
  if (!is_int_dtype(ids->dtype)) return fail(c, "embedding_grad ids must be i32 or i64, got %s", ir_dtype_name(ids->dtype));
  if (need_float(c, g, false) < 0) return -1;
  bool ok = g->rank == ids->rank + 1;
  for (int i = 0; ok && i < ids->rank; i++) ok = g->dims[i] == ids->dims[i];
  if (!ok) return fail(c, "shape mismatch in embedding_grad: ids %s, gradient %s", ts(ids).s, ts(g).s);
  *out = (ir_type){.dtype = g->dtype, .rank = 2, .dims = {vocab, g->dims[g->rank - 1]}};
  return check_result(c, out);
}

static int infer_cross_entropy_grad(ctx *c, const ir_type *in, ir_type *out) {
  ir_type loss;
  if (infer_cross_entropy(c, &in[0], &in[1], &loss) < 0) return -1;
  if (in[2].rank != 0 || in[2].dtype != in[0].dtype)
    return fail(c, "cross_entropy_grad needs a scalar %s gradient, got %s", ir_dtype_name(in[0].dtype), ts(&in[2]).s);
  *out = in[0];
  return 0;
}

/* ---- fused attention ----
 * attention (q[...,T,E], k[...,S,E], v[...,S,F]) {scale: float, causal: int}
 *   -> (o[...,T,F], lse[...,T]): q, k, v share one float dtype and the same
 *   batch dims (no broadcasting); o has q's dtype; lse (the row log-sum-exp
 *   the backward reads) is f64 for f64 operands and f32 otherwise (f32, bf16,
 *   f16: the kernels work in f32 there). scale is finite; causal is 0 or 1.
 * attention_grad (q, k, v, o, lse, do) {scale, causal} -> (dq, dk, dv): o, lse
 *   and do must have exactly the types attention gives (do: o's type).
 * Grouped-query attention: attention's k and v may have Hkv heads on the
 *   dim before T (q[..., Hq, T, E], k[..., Hkv, S, E]) where Hkv divides Hq:
 *   query head h reads kv head h / (Hq / Hkv) (fuse-attention folds the
 *   repeat of the kv heads into it). attention_grad takes the same shared
 *   kv heads and gives dk, dv of their shapes: each kv head's gradient is
 *   the sum over its Hq / Hkv query heads.
 * Optional {heads: int H >= 1} (made by passes/fuse_transpose.c, which folds
 *   the head split / merge transposes): the heads axis sits between T and E,
 *   q[...,T,H,E], k[...,S,H,E], v[...,S,H,F] -> o[...,T,H,F], lse[...,H,T];
 *   the same attention per head as without it on q[...,H,T,E]. */
static int infer_attention_core(ctx *c, const ir_type *in, ir_type *o, ir_type *lse) {
  const ir_type *q = &in[0], *k = &in[1], *v = &in[2];
  const ir_attr *a;
  if (get_attr(c, "scale", IR_ATTR_FLOAT, true, &a) < 0) return -1;
  if (!isfinite(a->f)) return fail(c, "attribute 'scale' of %s must be finite, got %g", c->name, a->f);
  if (get_attr(c, "causal", IR_ATTR_INT, true, &a) < 0) return -1;
  if (a->i != 0 && a->i != 1) return fail(c, "attribute 'causal' of %s must be 0 or 1, got %lld", c->name, (long long)a->i);
  if (get_attr(c, "heads", IR_ATTR_INT, false, &a) < 0) return -1;
  if (a && a->i < 1) return fail(c, "attribute 'heads' of %s must be >= 1, got %lld", c->name, (long long)a->i);
  int x = a ? 1 : 0; /* the heads axis between T and E */
  if (need_float(c, q, true) < 0 || same_dtype(c, q, k) < 0 || same_dtype(c, q, v) < 0) return -1;
  if (q->rank < 2 + x || k->rank != q->rank || v->rank != q->rank)
    return fail(c, "%s needs q, k, v of one rank >= %d, got %s, %s, %s", c->name, 2 + x, ts(q).s, ts(k).s, ts(v).s);
  int r = q->rank;
  bool ok = q->dims[r - 1] == k->dims[r - 1] && k->dims[r - 2 - x] == v->dims[r - 2 - x];
  /* grouped-query attention (no heads layout): k and v have Hkv heads on
   * the dim before T, dividing q's Hq; query head h reads kv head
   * h / (Hq / Hkv); attention_grad's dk, dv have k's and v's shapes */
  bool gqa = !x && r >= 3 && k->dims[r - 3] != q->dims[r - 3] && k->dims[r - 3] > 0 &&
             q->dims[r - 3] % k->dims[r - 3] == 0 && v->dims[r - 3] == k->dims[r - 3];
  for (int i = 0; ok && i < r - 2 - x; i++)
    ok = (gqa && i == r - 3) || (q->dims[i] == k->dims[i] && q->dims[i] == v->dims[i]);
  if (x) ok = ok && q->dims[r - 2] == a->i && k->dims[r - 2] == a->i && v->dims[r - 2] == a->i;
  if (!ok)
    return fail(c, "shape mismatch in %s: q %s, k %s, v %s (want %s)", c->name, ts(q).s, ts(k).s, ts(v).s,
                x ? "q[...,T,H,E], k[...,S,H,E], v[...,S,H,F], H = heads" : "q[...,T,E], k[...,S,E], v[...,S,F]");
  *o = *q;
  o->dims[r - 1] = v->dims[r - 1];
  *lse = *q;
  lse->rank = r - 1;
  lse->dtype = q->dtype == IR_DT_F64 ? IR_DT_F64 : IR_DT_F32;
  if (x) lse->dims[r - 3] = q->dims[r - 2], lse->dims[r - 2] = q->dims[r - 3]; /* [..., H, T] */
  return check_result(c, o);
}

static int infer_attention(ctx *c, const ir_type *in, int n_in, ir_type *out, int *n_out) {
  ir_type o, lse;
  if (c->op == IR_OP_ATTENTION && n_in != 3 && n_in != 4)
    return fail(c, "%s takes 3 or 4 operands (q, k, v [, qpos]), got %d", c->name, n_in);
  if (infer_attention_core(c, in, &o, &lse) < 0) return -1;
  if (c->op == IR_OP_ATTENTION && n_in == 4) {
    const ir_type *p = &in[3];
    if (p->dtype != IR_DT_I32 || ir_type_numel(p) != 1 || p->rank > 1)
      return fail(c, "%s: qpos must be i32[1], got %s", c->name, ts(p).s);
    int64_t heads = 0;
    if (get_int(c, "heads", false, 0, &heads) < 0) return -1;
    if (heads > 0) return fail(c, "%s: qpos with the heads layout is not supported", c->name);
  }
  if (c->op == IR_OP_ATTENTION) {
    out[0] = o;
    out[1] = lse;
    *n_out = 2;
    return 0;
  }
  static const char *const names[3] = {"o", "lse", "do"};
  const ir_type *want[3] = {&o, &lse, &o};
  for (int i = 0; i < 3 && 3 + i < n_in; i++)
    if (!ir_type_equal(&in[3 + i], want[i]))
      return fail(c, "%s: %s must be %s, got %s", c->name, names[i], ts(want[i]).s, ts(&in[3 + i]).s);
  for (int i = 0; i < 3; i++) out[i] = in[i];
  *n_out = 3;
  return 0;
}

/* ---- fused elementwise ops (made by passes/fuse_elementwise.c, run by runtime/cpu/kern_fused.c) ----
 * The expr attribute is an s-expression over the operands $0, $1, ...:
 *   e := $N | (const DTYPE NUMBER) | (cast DTYPE e) | (OP e) | (OP e e) | (where e e e)
 * OP is the mnemonic of an elementwise unary or binary op of ops.def. Every
 * subexpression is typed by its op's own rule here (so dtypes and numpy
 * broadcasting are exactly those of the unfused ops); const is a scalar of
 * DTYPE holding NUMBER rounded to it. Every operand must appear.
 *   fused (operands...) {expr}        -> the type of expr
 *   fused_matmul (a, b, extra...)     -> matmul(a, b)'s type P; in expr $0 is the
 *                                       product and $1, $2, ... are extra 0, 1, ...;
 *                                       expr must have type P (computed in place)
 *   add_layernorm (x, r, gamma, beta) {eps} -> (s, y): x and r of one float type
 *                                       (no broadcasting), gamma/beta as layernorm */
enum { FEXPR_MAX_OPERANDS = 64 };

/* Calls the op's own typing rule; prefixes its message. */
static int fexpr_rule(ctx *c, ir_op op, const ir_type *in, int n, const ir_attr *a, int na, ir_type *out) {
  char msg[256];
  int n_out = 0;
  if (ir_infer(op, in, n, a, na, out, &n_out, msg, sizeof msg) != 0) return fail(c, "%s: in expr: %s", c->name, msg);
  return 0;
}

/* dropout (x, key, g) inside an expr: x a float, key an operand of type
 * i64[], g an i64 of x's shape or broadcast to it; p in (0, 1). The result
 * has x's dtype and the broadcast shape. */
static int fexpr_dropout(ctx *c, const ir_expr *e, const ir_expr_inst *in, const ir_type *t, ir_type *out) {
  const ir_type *x = &t[in->arg[0]], *key = &t[in->arg[1]], *g = &t[in->arg[2]];
  if (!(in->value > 0 && in->value < 1)) return fail(c, "%s: in expr: dropout's p must be in (0, 1), got %g", c->name, in->value);
  if (!ir_dtype_is_float(x->dtype)) return fail(c, "%s: in expr: dropout of %s (a float expected)", c->name, ts(x).s);
  if (e->ins[in->arg[1]].kind != IR_EXPR_OPERAND || key->dtype != IR_DT_I64 || key->rank != 0)
    return fail(c, "%s: in expr: dropout's key must be an operand of type i64[], got %s", c->name, ts(key).s);
  if (g->dtype != IR_DT_I64) return fail(c, "%s: in expr: dropout's index must be i64, got %s", c->name, ts(g).s);
  char msg[256];
  if (ir_broadcast_shapes(x, g, out, msg, sizeof msg) != 0) return fail(c, "%s: in expr: dropout: %s", c->name, msg);
  out->dtype = x->dtype;
  return 0;
}

/* Types expr (the structure of ir/expr.c) over ops[0..n_ops): every operand
 * must be used. multi (fused): one result per expression, each over the
 * same elements (equal shapes); #k reads result k. *n_res: the result count. */
static int fexpr_type(ctx *c, const ir_type *ops, int n_ops, bool multi, ir_type *out, int *n_res) {
  const ir_attr *a;
  if (get_attr(c, "expr", IR_ATTR_STR, true, &a) < 0) return -1;
  if (n_ops > FEXPR_MAX_OPERANDS)
    return fail(c, "%s has %d operands (at most %d)", c->name, n_ops, FEXPR_MAX_OPERANDS);
  ir_expr *tmp = NULL;
  const ir_expr *e = a->expr;
  if (!e) {
    char msg[200];
    if (!(e = tmp = ir_expr_parse(a->s, multi, msg, sizeof msg))) return fail(c, "%s: %s", c->name, msg);
  }
  bool used[FEXPR_MAX_OPERANDS] = {false};
  ir_type *t = malloc((size_t)(e->n_ins > 0 ? e->n_ins : 1) * sizeof *t);
  int r = t ? 0 : fail(c, "out of memory");
  int next = 0; /* the next result */
  for (int i = 0; i < e->n_ins && r == 0; i++) {
    const ir_expr_inst *in = &e->ins[i];
    switch (in->kind) {
    case IR_EXPR_OPERAND:
      if (in->index >= n_ops) {
        r = fail(c, "%s: expr names $%d but there are %d operands", c->name, in->index, n_ops);
        break;
      }
      used[in->index] = true;
      t[i] = ops[in->index];
      break;
    case IR_EXPR_RESULT:
      if (in->index >= next) { /* only for structures not made by the parser */
        r = fail(c, "%s: expr %d names #%d, which is not an earlier result", c->name, next, in->index);
        break;
      }
      t[i] = out[in->index];
      break;
    case IR_EXPR_CONST: {
      ir_attr v = ir_attr_float("value", in->value);
      t[i] = (ir_type){.dtype = in->dtype, .rank = 0};
      r = fexpr_rule(c, IR_OP_CONST, NULL, 0, &v, 1, &t[i]);
      break;
    }
    case IR_EXPR_OP: {
      ir_type x[3];
      int na = ir_expr_arity(in);
      if (in->op == IR_OP_DROPOUT) {
        r = fexpr_dropout(c, e, in, t, &t[i]);
        break;
      }
      for (int k = 0; k < na; k++) x[k] = t[in->arg[k]];
      ir_attr to = ir_attr_dtype("to", in->dtype);
      r = fexpr_rule(c, in->op, x, na, in->op == IR_OP_CAST ? &to : NULL, in->op == IR_OP_CAST, &t[i]);
      break;
    }
    }
    while (r == 0 && next < e->n_results && e->results[next] == i) {
      if (next > 0 && (t[i].rank != out[0].rank || memcmp(t[i].dims, out[0].dims, sizeof(int64_t) * (size_t)t[i].rank)))
        r = fail(c, "%s: result %d has type %s, not the shape of result 0 (%s)", c->name, next, ts(&t[i]).s,
                 ts(&out[0]).s);
      else out[next++] = t[i];
    }
  }
  if (r == 0 && !multi && e->n_results != 1) r = fail(c, "%s: expr has %d results (one expected)", c->name, e->n_results);
  for (int i = 0; i < n_ops && r == 0; i++)
    if (!used[i]) r = fail(c, "%s: operand $%d is not used by expr", c->name, i);
  *n_res = next;
  for (int i = 0; i < next && r == 0; i++) r = check_result(c, &out[i]);
  free(t);
  ir_expr_free(tmp);
  return r;
}

/* fused's optional {nonfinite = [r...]}: one more result, i64[], the
 * number of Inf / NaN elements of the float results r (distinct, in
 * order), counted as they are stored. */
static int fused_count(ctx *c, ir_type *out, int *n_out) {
  const ir_attr *a;
  int r = get_attr(c, "nonfinite", IR_ATTR_INTS, false, &a);
  if (r != 0) return r < 0 ? -1 : 0;
  if (a->n < 1) return fail(c, "fused: 'nonfinite' names no result");
  if (*n_out >= IR_FUSED_MAX_RESULTS)
    return fail(c, "fused: %d results and the count of 'nonfinite' (at most %d in all)", *n_out, IR_FUSED_MAX_RESULTS);
  for (int i = 0; i < a->n; i++) {
    int64_t k = a->ints[i];
    if (k < 0 || k >= *n_out || (i > 0 && k <= a->ints[i - 1]))
      return fail(c, "fused: 'nonfinite' entry %d is %lld: results are numbered 0 to %d, in increasing order", i,
                  (long long)k, *n_out - 1);
    if (!ir_dtype_is_float(out[k].dtype))
      return fail(c, "fused: 'nonfinite' counts result %lld, of type %s (a float expected)", (long long)k, ts(&out[k]).s);
  }
  out[(*n_out)++] = (ir_type){.dtype = IR_DT_I64, .rank = 0};
  return 0;
}

static int infer_fused(ctx *c, const ir_type *in, int n_in, ir_type *out, int *n_out) {
  *n_out = 1;
  if (c->op == IR_OP_FUSED) return fexpr_type(c, in, n_in, true, out, n_out) < 0 ? -1 : fused_count(c, out, n_out);
  /* fused_matmul: $0 = matmul(a, b), $i = in[i + 1] */
  if (n_in < 2) return fail(c, "fused_matmul takes at least 2 operands (a, b), got %d", n_in);
  ir_type ops[FEXPR_MAX_OPERANDS];
  if (n_in - 1 > FEXPR_MAX_OPERANDS)
    return fail(c, "%s has %d operands (at most %d)", c->name, n_in, FEXPR_MAX_OPERANDS + 1);
  ctx mc = *c;
  mc.op = IR_OP_MATMUL;
  mc.name = "fused_matmul";
  if (infer_matmul(&mc, &in[0], &in[1], &ops[0]) < 0) return -1;
  for (int i = 2; i < n_in; i++) ops[i - 1] = in[i];
  if (fexpr_type(c, ops, n_in - 1, false, out, n_out) < 0) return -1;
  if (!ir_type_equal(out, &ops[0]))
    return fail(c, "fused_matmul: the epilogue's type %s differs from the product's %s", ts(out).s, ts(&ops[0]).s);
  return 0;
}

/* ---- the LM head fused with its loss ----
 * linear_cross_entropy (h[...,D], w, targets int[...], g[]) {chunk: int >= 1,
 *   transpose_b: int, optional, 0 or 1} -> (loss[], dh, dw, predicted i32[...],
 *   buffer[C, V]): w is [V, D] with transpose_b = 1 (logits = h w^T), else
 *   [D, V]; h and w share one float dtype; g has it too, or is f32 with bf16
 *   / f16 h (mixed precision: the loss over the logits widened to f32, its
 *   gradient rounded to f32 before h's dtype); targets are h's dims without
 *   the last; loss has g's dtype, dh h's type, dw w's; C = min(chunk, rows)
 *   rows of logits of h's dtype (the op's chunk buffer: its place in the plan). */
static int infer_linear_cross_entropy(ctx *c, const ir_type *in, ir_type *out, int *n_out) {
  const ir_type *h = &in[0], *w = &in[1], *tgt = &in[2], *g = &in[3];
  int64_t chunk, tb;
  if (get_int(c, "chunk", true, 0, &chunk) < 0 || get_int(c, "transpose_b", false, 0, &tb) < 0) return -1;
  if (chunk < 1) return fail(c, "%s needs chunk >= 1, got %lld", c->name, (long long)chunk);
  if (tb != 0 && tb != 1) return fail(c, "%s: transpose_b must be 0 or 1, got %lld", c->name, (long long)tb);
  if (need_float(c, h, true) < 0) return -1;
  bool mixed = g->dtype == IR_DT_F32 && (h->dtype == IR_DT_BF16 || h->dtype == IR_DT_F16);
  if (h->rank < 1 || w->rank != 2 || w->dtype != h->dtype || g->rank != 0 || (g->dtype != h->dtype && !mixed))
    return fail(c, "%s needs h[..., D], a matrix w and a scalar g of one float dtype (g f32 with bf16 / f16 h), got %s, %s, %s",
                c->name, ts(h).s, ts(w).s, ts(g).s);
  int64_t D = h->dims[h->rank - 1], V = w->dims[tb ? 0 : 1];
  if (w->dims[tb ? 1 : 0] != D)
    return fail(c, "shape mismatch in %s: h %s and w %s (transpose_b = %lld)", c->name, ts(h).s, ts(w).s, (long long)tb);
  if (!is_int_dtype(tgt->dtype)) return fail(c, "%s targets must be i32 or i64, got %s", c->name, ir_dtype_name(tgt->dtype));
  bool ok = tgt->rank == h->rank - 1;
  for (int i = 0; ok && i < tgt->rank; i++) ok = tgt->dims[i] == h->dims[i];
  if (!ok) return fail(c, "shape mismatch in %s: targets %s must have the shape of h %s without the last dimension", c->name,
                       ts(tgt).s, ts(h).s);
  int64_t rows = ir_type_numel(tgt);
  if (rows == 0 || V == 0) return fail(c, "%s over %s: no positions or no classes", c->name, ts(h).s);
  out[0] = (ir_type){.dtype = g->dtype, .rank = 0};
  out[1] = *h;
  out[2] = *w;
  out[3] = *tgt;
  out[3].dtype = IR_DT_I32;
  out[4] = (ir_type){.dtype = h->dtype, .rank = 2, .dims = {chunk < rows ? chunk : rows, V}};
  *n_out = 5;
  return 0;
}

static int infer_add_layernorm(ctx *c, const ir_type *in, ir_type *out, int *n_out) {
  if (!ir_type_equal(&in[0], &in[1]))
    return fail(c, "add_layernorm needs x and r of the same type, got %s and %s", ts(&in[0]).s, ts(&in[1]).s);
  ir_type norm_in[3] = {in[0], in[2], in[3]};
  if (infer_norm(c, norm_in, 3, &out[1]) < 0) return -1;
  out[0] = in[0];
  *n_out = 2;
  return 0;
}

/* shard_hint(x) {spec}: x's type; the spec names one entry per dim */
static int infer_shard_hint(ctx *c, const ir_type *in, ir_type *out) {
  const ir_attr *a;
  if (get_attr(c, "spec", IR_ATTR_STR, true, &a) < 0) return -1;
  ir_shard s;
  char err[200];
  if (ir_shard_spec_parse(a->s, in[0].rank, &s, err, sizeof err) != 0) return fail(c, "%s: %s", c->name, err);
  *out = in[0];
  return 0;
}

/* ---- communication: {axis, n, ...} (ops.def) ---- */
static int comm_attrs(ctx *c, int64_t *n) {
  const ir_attr *a;
  if (get_attr(c, "axis", IR_ATTR_MESH_AXIS, true, &a) < 0) return -1;
  if (a->i < 0 || a->i >= IR_NUM_AXES)
    return fail(c, "mesh axis %lld of %s out of range (%d axes)", (long long)a->i, c->name, IR_NUM_AXES);
  if (get_int(c, "n", true, 1, n) < 0) return -1;
  if (*n < 1 || *n > 4096) return fail(c, "%s: axis size n = %lld must be between 1 and 4096", c->name, (long long)*n);
  if (get_attr(c, "reduce", IR_ATTR_STR, false, &a) < 0) return -1;
  if (a && strcmp(a->s, "sum") != 0 && strcmp(a->s, "max") != 0)
    return fail(c, "%s: reduce must be \"sum\" or \"max\", got \"%.20s\"", c->name, a->s);
  if (a && c->op != IR_OP_ALL_REDUCE && c->op != IR_OP_REDUCE_SCATTER)
    return fail(c, "%s takes no reduce attribute", c->name);
  return 0;
}

/* dims[key] of x divided (div) or multiplied by n */
static int comm_dim(ctx *c, const char *key, const ir_type *x, int64_t n, bool div, ir_type *out) {
  int d;
  if (get_axis(c, key, x, &d) < 0) return -1;
  if (div && x->dims[d] % n != 0)
    return fail(c, "%s: dim %d of %s does not divide by the axis size %lld", c->name, d, ts(x).s, (long long)n);
  if (!div && x->dims[d] > 0 && n > IR_MAX_ELEMENTS / x->dims[d])
    return fail(c, "%s: dim %d of %s times %lld overflows", c->name, d, ts(x).s, (long long)n);
  out->dims[d] = div ? x->dims[d] / n : x->dims[d] * n;
  return 0;
}

static int infer_comm(ctx *c, const ir_type *in, ir_type *out, int *n_out) {
  int64_t n = 1, k;
  if (comm_attrs(c, &n) < 0) return -1;
  if (c->op == IR_OP_SEND || c->op == IR_OP_RECV || c->op == IR_OP_COMM_BROADCAST) {
    const char *key = c->op == IR_OP_COMM_BROADCAST ? "root" : "peer";
    if (get_int(c, key, true, 0, &k) < 0) return -1;
    if (k < 0 || k >= n) return fail(c, "%s: %s = %lld is not a coordinate of an axis of size %lld", c->name, key, (long long)k, (long long)n);
  }
  if (c->op == IR_OP_RECV) {
    if (check_type(c, out, "result", 0) < 0) return -1;
    *n_out = 1;
    return 0;
  }
  if (c->op == IR_OP_SEND) {
    *n_out = 0;
    return 0;
  }
  if ((c->op == IR_OP_ALL_REDUCE || c->op == IR_OP_REDUCE_SCATTER) && in->dtype == IR_DT_BOOL)
    return fail(c, "%s needs a numeric operand, got %s", c->name, ts(in).s);
  out[0] = in[0];
  int r = 0;
  switch (c->op) {
  case IR_OP_ALL_GATHER: r = comm_dim(c, "dim", in, n, false, out); break;
  case IR_OP_REDUCE_SCATTER: case IR_OP_MESH_SLICE: r = comm_dim(c, "dim", in, n, true, out); break;
  case IR_OP_ALL_TO_ALL: {
    int sd, cd;
    if (get_axis(c, "split_dim", in, &sd) < 0 || get_axis(c, "concat_dim", in, &cd) < 0) return -1;
    r = comm_dim(c, "split_dim", in, n, true, out);
    if (r == 0) {
      ir_type mid = *out;
      r = comm_dim(c, "concat_dim", &mid, n, false, out);
    }
    break;
  }
  default: break;
  }
  if (r == 0) *n_out = 1;
  return r;
}

int ir_infer(ir_op op, const ir_type *in, int n_in, const ir_attr *attrs, int n_attrs, ir_type *out, int *n_out,
             char *err, size_t errlen) {
  ctx c = {.op = op, .name = ir_op_name(op), .attrs = attrs, .n_attrs = n_attrs, .err = err, .errlen = errlen};
  if (err && errlen) err[0] = '\0';
  *n_out = 0;
  if ((unsigned)op >= IR_NUM_OPS) return fail(&c, "invalid op %d", (int)op);
  int want = ir_op_num_inputs(op);
  if (want >= 0 && n_in != want)
    return fail(&c, "%s takes %d operand%s, got %d", c.name, want, want == 1 ? "" : "s", n_in);
  if (want < 0 && n_in < 1) return fail(&c, "%s takes at least 1 operand, got %d", c.name, n_in);
  for (int i = 0; i < n_in; i++)
    if (check_type(&c, &in[i], "operand", i) < 0) return -1;
  if (check_attrs(&c) < 0) return -1;

  int r = -1;
  if (ir_op_kind_of(op) == IR_OPK_UNARY || ir_op_kind_of(op) == IR_OPK_BINARY) {
    r = ir_op_kind_of(op) == IR_OPK_UNARY ? infer_unary(&c, &in[0], &out[0]) : infer_binary(&c, &in[0], &in[1], &out[0]);
    if (r == 0) *n_out = 1;
    return r;
  }
  switch (op) {
  case IR_OP_CONST: case IR_OP_IOTA:
    r = infer_nullary(&c, &out[0]);
    break;
  case IR_OP_WHERE: r = infer_where(&c, in, &out[0]); break;
  case IR_OP_MATMUL: r = infer_matmul(&c, &in[0], &in[1], &out[0]); break;
  case IR_OP_TRANSPOSE: r = infer_transpose(&c, &in[0], &out[0]); break;
  case IR_OP_RESHAPE: r = infer_reshape(&c, &in[0], &out[0]); break;
  case IR_OP_BROADCAST: r = infer_broadcast(&c, &in[0], &out[0]); break;
  case IR_OP_SLICE: r = infer_slice(&c, &in[0], &out[0]); break;
  case IR_OP_CONCAT: r = infer_concat(&c, in, n_in, &out[0]); break;
  case IR_OP_SPLIT: {
    int n = 0;
    r = infer_split(&c, &in[0], out, &n);
    if (r == 0) *n_out = n;
    return r;
  }
  case IR_OP_REDUCE_SUM: case IR_OP_REDUCE_MEAN: case IR_OP_REDUCE_MAX:
    r = infer_reduce(&c, &in[0], &out[0]);
    break;
  case IR_OP_SOFTMAX: case IR_OP_LOG_SOFTMAX: r = infer_softmax(&c, &in[0], &out[0]); break;
  case IR_OP_LAYERNORM: case IR_OP_RMSNORM: r = infer_norm(&c, in, n_in, &out[0]); break;
  case IR_OP_ARGMAX: r = infer_argmax(&c, &in[0], &out[0]); break;
  case IR_OP_COUNT_NONFINITE: r = infer_multi_reduce(&c, in, n_in, IR_DT_I64, &out[0]); break;
  case IR_OP_SUM_SQUARES: r = infer_multi_reduce(&c, in, n_in, IR_DT_F64, &out[0]); break;
  case IR_OP_EMBEDDING: r = infer_embedding(&c, &in[0], &in[1], &out[0]); break;
  case IR_OP_CROSS_ENTROPY: r = infer_cross_entropy(&c, &in[0], &in[1], &out[0]); break;
  case IR_OP_CAUSAL_MASK: r = infer_causal_mask(&c, &in[0], &out[0]); break;
  case IR_OP_DROPOUT: r = infer_dropout(&c, in, n_in, &out[0]); break;
  case IR_OP_EINSUM: r = infer_einsum(&c, in, n_in, &out[0]); break;
  case IR_OP_GRAD: return infer_grad(&c, in, n_in, out, n_out);
  case IR_OP_UNSLICE: r = infer_unslice(&c, &in[0], &out[0]); break;
  case IR_OP_EMBEDDING_GRAD: r = infer_embedding_grad(&c, &in[0], &in[1], &out[0]); break;
  case IR_OP_CROSS_ENTROPY_GRAD: r = infer_cross_entropy_grad(&c, in, &out[0]); break;
  case IR_OP_LAYERNORM_GRAD: case IR_OP_RMSNORM_GRAD: return infer_norm_grad(&c, in, out, n_out);
  /* fused ops: rules land with the fusion passes */
  case IR_OP_ATTENTION: case IR_OP_ATTENTION_GRAD: return infer_attention(&c, in, n_in, out, n_out);
  case IR_OP_FUSED: case IR_OP_FUSED_MATMUL: return infer_fused(&c, in, n_in, out, n_out);
  case IR_OP_ADD_LAYERNORM: return infer_add_layernorm(&c, in, out, n_out);
  case IR_OP_LINEAR_CROSS_ENTROPY: return infer_linear_cross_entropy(&c, in, out, n_out);
  case IR_OP_SHARD_HINT: r = infer_shard_hint(&c, in, out); break;
  case IR_OP_ALL_REDUCE: case IR_OP_ALL_GATHER: case IR_OP_REDUCE_SCATTER: case IR_OP_ALL_TO_ALL:
  case IR_OP_COMM_BROADCAST: case IR_OP_SEND: case IR_OP_RECV: case IR_OP_MESH_SLICE:
    return infer_comm(&c, in, out, n_out);
  default: /* elementwise ops are typed above by kind; test_ir_infer loops over every op */
    return fail(&c, "internal error: no typing rule for %s", c.name);
  }
  if (r == 0) *n_out = 1;
  return r;
}
