/* passes/shard_vocab.c — Megatron-LM's vocabulary-parallel ops: the
 * sub-graphs (of existing ops: every backend runs them as it runs any
 * graph) that replace embedding, embedding_grad, cross_entropy,
 * cross_entropy_grad and argmax when an axis splits the vocabulary. The
 * rules (shard_rules.c) choose them through the hook sh_dec.expand; the
 * engine (shard.c) calls them on the operands as one rank holds them.
 *
 * A rank's block of the vocabulary is data the SPMD program computes:
 * ids = mesh_slice(iota(V)) over the axis (sh_x_block_ids), [V / n], its
 * first element the block's offset.
 *
 *   embedding(table[V/n, D], ids): local = ids - offset; in = 0 <= local <
 *     V/n; row = embedding(table, where(in, local, 0)); the result
 *     where(in[..., None], row, 0) is a partial sum over the axis (each id's
 *     row comes from the one rank whose block holds it).
 *   embedding_grad(ids, g) {vocab V}: the same mask on g's rows, scattered
 *     into this block's V/n rows: the gradient of the rank's block of the
 *     table, no communication.
 *   cross_entropy(l[..., V/n], targets): with l in f32 (f64 logits stay
 *     f64; bf16 / f16 are cast, as the kernels compute in wider floats),
 *     m = all_reduce_max(max_j l), s = all_reduce(sum_j exp(l - m)),
 *     t = all_reduce(sum_j where(ids_j == target, l, 0)); the loss per
 *     position log(s) + m - t, averaged over the positions the rank sees
 *     (positions split on another axis: the engine's 1 / size scaling, as
 *     for the plain op). Three all-reduces of one float per position.
 *   cross_entropy_grad(l, targets, g): (exp(l - m) / s - onehot) * g / P on
 *     the rank's block of the classes, split as l is. m and s are the
 *     forward's when the cross_entropy of the same logits was expanded
 *     before (kept: [..., 1] each, no communication in the backward, as
 *     Megatron-LM keeps its softmax); else (a recomputed logits value, a
 *     graph without the forward) they are recomputed, two all-reduces.
 *   argmax(x) along the split dim: each rank's first maximum and its value;
 *     the global max by all_reduce(max); among the ranks that hold it the
 *     smallest global index (all_reduce(max) of minus the index, V where
 *     the rank does not hold the max): the first maximum, as the op.
 *
 * A vocabulary V that the axis does not divide is padded to Vp, the next
 * multiple of n (the table's and the logits' layouts carry the padding,
 * shard.c): every block above is Vp / n, ids and targets (< V) never fall
 * in the padding, and the logits of the padding's classes are -inf before
 * the max, the sum of exponentials and argmax (mask_padding: a where on
 * block ids >= V), so their probabilities, and gradients, are exactly 0.
 *
 * Out-of-range ids and targets: the plain kernels report them; here an id
 * in no rank's block gives zeros, a target in none a loss of log(s) + m.
 * (The data sources give ids in range; docs/sharding.md says so.)
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "shard_impl.h"

/* layout helpers: s with dim k's split over the axis removed */
static ir_shard without(ir_shard s, int k) {
  s.split[k] = 0;
  s.pieces[k] = 0;
  s.pad[k] = 0;
  return s;
}

/* s (of rank r) with a trailing unsplit dim: the same layout, rank r + 1 */
static ir_shard extended(ir_shard s, int r) {
  s.split[r] = 0;
  s.pieces[r] = 0;
  s.pad[r] = 0;
  return s;
}

static ir_value *op2(const sh_x *x, ir_op op, ir_value *a, ir_value *b, ir_shard s) {
  ir_value *in[2] = {a, b};
  return sh_x_op(x, op, in, 2, NULL, 0, NULL, s);
}

static ir_value *op1(const sh_x *x, ir_op op, ir_value *a, ir_shard s) { return sh_x_op(x, op, &a, 1, NULL, 0, NULL, s); }

static ir_value *where(const sh_x *x, ir_value *c, ir_value *a, ir_value *b, ir_shard s, const char *name) {
  ir_value *in[3] = {c, a, b};
  return sh_x_op(x, IR_OP_WHERE, in, 3, NULL, 0, name, s);
}

static ir_value *cast_to(const sh_x *x, ir_value *v, ir_dtype dt, ir_shard s, const char *name) {
  if (v->type.dtype == dt && !name) return v;
  ir_attr to = ir_attr_dtype("to", dt);
  return sh_x_op(x, IR_OP_CAST, &v, 1, &to, 1, name, s);
}

/* v with a trailing dim of 1 */
static ir_value *unsqueeze(const sh_x *x, ir_value *v, ir_shard s) {
  int64_t dims[IR_MAX_RANK];
  for (int k = 0; k < v->type.rank; k++) dims[k] = v->type.dims[k];
  dims[v->type.rank] = 1;
  ir_attr a = ir_attr_ints("shape", dims, v->type.rank + 1);
  return sh_x_op(x, IR_OP_RESHAPE, &v, 1, &a, 1, NULL, s);
}

/* reduce (sum or max) of v along dim k, keepdims */
static ir_value *reduce(const sh_x *x, ir_op op, ir_value *v, int k, bool keep, ir_shard s, const char *name) {
  int64_t axes[1] = {k};
  ir_attr a[2] = {ir_attr_ints("axes", axes, 1), ir_attr_int("keepdims", keep)};
  return sh_x_op(x, op, &v, 1, a, 2, name, s);
}

/* The offset of the rank's block: [1], the first of its ids. */
static ir_value *block_offset(const sh_x *x, ir_value *blk) {
  ir_attr a[4] = {ir_attr_int("axis", 0), ir_attr_int("start", 0), ir_attr_int("end", 1), ir_attr_int("step", 1)};
  return sh_x_op(x, IR_OP_SLICE, &blk, 1, a, 4, ".offset", (ir_shard){{0}, 0, {0}, {0}});
}

/* ids relative to the rank's block of V / n rows: *in_block (bool, ids'
 * shape) and the row in the block (0 outside it). */
static ir_value *block_rows(const sh_x *x, ir_value *ids, int64_t vocab, ir_value **in_block) {
  ir_dtype dt = ids->type.dtype;
  ir_shard s = ids->shard;
  ir_value *off = block_offset(x, sh_x_block_ids(x, vocab, dt));
  ir_value *local = op2(x, IR_OP_SUB, ids, off, s);
  ir_value *zero = sh_x_const(x, dt, 0);
  ir_value *lo = op2(x, IR_OP_GE, local, zero, s);
  ir_value *hi = op2(x, IR_OP_LT, local, sh_x_const(x, dt, (double)(vocab / x->size)), s);
  ir_value *pair[2] = {lo, hi};
  *in_block = sh_x_op(x, IR_OP_AND, pair, 2, NULL, 0, ".in_block", s);
  return where(x, *in_block, local, zero, s, ".rows");
}

void sh_vocab_embedding(const sh_x *x, ir_value **res) {
  ir_value *table = x->in[0], *ids = x->in[1], *in_block;
  int64_t vocab = table->type.dims[0] * x->size;
  ir_value *rows = block_rows(x, ids, vocab, &in_block);
  ir_value *pair[2] = {table, rows};
  ir_value *row = sh_x_op(x, IR_OP_EMBEDDING, pair, 2, NULL, 0, ".lookup", x->layout[0]);
  ir_value *mask = unsqueeze(x, in_block, extended(ids->shard, ids->type.rank));
  res[0] = where(x, mask, row, sh_x_const(x, row->type.dtype, 0), x->layout[0], x->names[0]);
}

void sh_vocab_embedding_grad(const sh_x *x, ir_value **res) {
  ir_value *ids = x->in[0], *g = x->in[1], *in_block;
  int64_t vocab = x->out[0].dims[0] * x->size; /* padded: a multiple of the axis */
  ir_value *rows = block_rows(x, ids, vocab, &in_block);
  ir_value *mask = unsqueeze(x, in_block, extended(ids->shard, ids->type.rank));
  ir_value *gm = where(x, mask, g, sh_x_const(x, g->type.dtype, 0), g->shard, NULL);
  ir_attr v = ir_attr_int("vocab", vocab / x->size);
  ir_value *pair[2] = {rows, gm};
  res[0] = sh_x_op(x, IR_OP_EMBEDDING_GRAD, pair, 2, &v, 1, x->names[0], x->layout[0]);
}

/* The float type the loss is computed in: f64 logits stay, others f32. */
static ir_dtype wide(ir_dtype dt) { return dt == IR_DT_F64 ? IR_DT_F64 : IR_DT_F32; }

/* The row statistics of the local logits l (wide): the max over the
 * classes of every rank (*m) and the sum of exp(l - m) (*s), [..., 1];
 * the rank's exp(l - m) in *e. */
static void row_stats(const sh_x *x, ir_value *l, ir_shard row, ir_value **m, ir_value **s, ir_value **e) {
  int c = l->type.rank - 1;
  *m = sh_x_all_reduce(x, reduce(x, IR_OP_REDUCE_MAX, l, c, true, row, ".max"), "max", row);
  *e = op1(x, IR_OP_EXP, op2(x, IR_OP_SUB, l, *m, l->shard), l->shard);
  *s = sh_x_all_reduce(x, reduce(x, IR_OP_REDUCE_SUM, *e, c, true, row, ".sumexp"), NULL, row);
}

/* onehot(targets) on the rank's block of the classes: bool [..., V/n] */
static ir_value *target_hits(const sh_x *x, ir_value *l, ir_value *targets, ir_shard row) {
  int64_t vocab = l->type.dims[l->type.rank - 1] * x->size;
  ir_value *ids = sh_x_block_ids(x, vocab, targets->type.dtype);
  return op2(x, IR_OP_EQ, ids, unsqueeze(x, targets, row), l->shard);
}

/* v [..., Vp / n] (float) with the classes of the padding, Vp - V of them at
 * the end of the last ranks' blocks, -inf: no max, exp or argmax sees them.
 * v as it is when the vocabulary V divides. */
static ir_value *mask_padding(const sh_x *x, ir_value *v, int64_t vocab) {
  int c = v->type.rank - 1;
  int64_t padded = v->type.dims[c] * x->size;
  if (padded == vocab) return v;
  ir_dtype it = padded <= INT32_MAX ? IR_DT_I32 : IR_DT_I64;
  ir_value *ids = sh_x_block_ids(x, padded, it);
  ir_value *real = op2(x, IR_OP_LT, ids, sh_x_const(x, it, (double)vocab), ids->shard);
  return where(x, real, v, sh_x_const(x, v->type.dtype, -INFINITY), v->shard, ".unpadded");
}

/* the local logits in the wide type, the padding's classes -inf, and the
 * layout of their rows */
static ir_value *wide_logits(const sh_x *x, ir_shard *row) {
  ir_value *l = x->in[0];
  const ir_type *whole = &x->node->in[0]->type;
  *row = without(l->shard, l->type.rank - 1);
  return mask_padding(x, cast_to(x, l, wide(l->type.dtype), l->shard, NULL), whole->dims[whole->rank - 1]);
}

void sh_vocab_cross_entropy(const sh_x *x, ir_value **res) {
  ir_shard row;
  ir_value *l = wide_logits(x, &row), *targets = x->in[1], *m, *s, *e;
  int c = l->type.rank - 1;
  row_stats(x, l, row, &m, &s, &e);
  sh_x_keep(x, x->node->in[0], 0, m);
  sh_x_keep(x, x->node->in[0], 1, s);
  ir_value *hit = target_hits(x, l, targets, row);
  ir_value *tl = where(x, hit, l, sh_x_const(x, l->type.dtype, 0), l->shard, NULL);
  ir_value *t = sh_x_all_reduce(x, reduce(x, IR_OP_REDUCE_SUM, tl, c, true, row, ".target"), NULL, row);
  ir_value *per = op2(x, IR_OP_SUB, op2(x, IR_OP_ADD, op1(x, IR_OP_LOG, s, row), m, row), t, row);
  int64_t axes[IR_MAX_RANK];
  for (int k = 0; k < per->type.rank; k++) axes[k] = k;
  ir_attr a[2] = {ir_attr_ints("axes", axes, per->type.rank), ir_attr_int("keepdims", 0)};
  bool same = x->out[0].dtype == l->type.dtype;
  ir_value *mean = sh_x_op(x, IR_OP_REDUCE_MEAN, &per, 1, a, 2, same ? x->names[0] : NULL, x->layout[0]);
  res[0] = same ? mean : cast_to(x, mean, x->out[0].dtype, x->layout[0], x->names[0]);
}

void sh_vocab_cross_entropy_grad(const sh_x *x, ir_value **res) {
  ir_shard row;
  ir_value *l = wide_logits(x, &row), *targets = x->in[1], *g = x->in[2];
  ir_value *m = sh_x_kept(x, x->node->in[0], 0), *s = sh_x_kept(x, x->node->in[0], 1), *e;
  if (m && s && m->type.dtype == l->type.dtype) e = op1(x, IR_OP_EXP, op2(x, IR_OP_SUB, l, m, l->shard), l->shard);
  else row_stats(x, l, row, &m, &s, &e);
  ir_value *p = op2(x, IR_OP_DIV, e, s, l->shard);
  ir_value *onehot = cast_to(x, target_hits(x, l, targets, row), l->type.dtype, l->shard, NULL);
  int64_t positions = ir_type_numel(&targets->type);
  ir_value *scale = op2(x, IR_OP_DIV, cast_to(x, g, l->type.dtype, g->shard, NULL),
                        sh_x_const(x, l->type.dtype, (double)(positions ? positions : 1)), g->shard);
  ir_value *d = op2(x, IR_OP_SUB, p, onehot, l->shard);
  bool same = x->out[0].dtype == l->type.dtype;
  ir_value *in2[2] = {d, scale};
  ir_value *r = sh_x_op(x, IR_OP_MUL, in2, 2, NULL, 0, same ? x->names[0] : NULL, x->layout[0]);
  res[0] = same ? r : cast_to(x, r, x->out[0].dtype, x->layout[0], x->names[0]);
}

void sh_vocab_argmax(const sh_x *x, ir_value **res) {
  ir_value *v = x->in[0];
  int axis = (int)ir_node_attr_int(x->node, "axis", v->type.rank - 1);
  int64_t whole = x->node->in[0]->type.dims[axis];
  if (axis == v->type.rank - 1 && ir_dtype_is_float(v->type.dtype)) v = mask_padding(x, v, whole);
  ir_shard lay = x->layout[0];
  ir_attr ax = ir_attr_int("axis", axis);
  ir_value *first = sh_x_op(x, IR_OP_ARGMAX, &v, 1, &ax, 1, NULL, lay); /* within the block */
  ir_value *mx = reduce(x, IR_OP_REDUCE_MAX, v, axis, false, lay, ".max");
  ir_value *gmx = sh_x_all_reduce(x, mx, "max", lay);
  whole = v->type.dims[axis] * x->size; /* padded: the classes of the padding come last and are never the max */
  ir_dtype it = first->type.dtype;
  ir_value *index = op2(x, IR_OP_ADD, first, block_offset(x, sh_x_block_ids(x, whole, it)), lay);
  ir_value *held = op2(x, IR_OP_EQ, mx, gmx, lay);
  ir_value *cand = op1(x, IR_OP_NEG, where(x, held, index, sh_x_const(x, it, (double)whole), lay, NULL), lay);
  ir_value *best = sh_x_all_reduce(x, cand, "max", lay);
  res[0] = sh_x_op(x, IR_OP_NEG, &best, 1, NULL, 0, x->names[0], lay);
}
