/* runtime/cpu/kern_layout.c — data movement: transpose, reshape, broadcast,
 * slice, concat, split.
 *
 * Transpose and broadcast are one strided gather: the result is walked row by
 * row (rows in parallel) and each element copied from the operand offset
 * given by per-dim strides (permuted for transpose, 0 along broadcast dims).
 * Slice, concat and split view the tensor as [outer, dim, inner] around
 * their axis and copy contiguous inner blocks with memcpy. Values are copied
 * bit for bit, never converted.
 */
#include "kernels.h"

static inline void copy_elem(char *dst, const char *src, size_t es) {
  switch (es) {
  case 1: *dst = *src; break;
  case 2: memcpy(dst, src, 2); break;
  case 4: memcpy(dst, src, 4); break;
  case 8: memcpy(dst, src, 8); break;
  default: memcpy(dst, src, es); break;
  }
}

/* Fast path of strided_gather for 4-byte elements when the last two result
 * dims (after merging dims that stay adjacent) are the input's innermost dim
 * and another one: a batch of 2-D transposes, copied in TILE x TILE tiles
 * so that both sides stay in cache (the plain loop strides through memory
 * on one side). Copies the same bits to the same places. */
enum { TILE = 32 };

static bool transpose_tiled(rt_tensor *out, const void *in, const int64_t *strides) {
  if (ir_dtype_size(out->type.dtype) != 4) return false;
  int64_t dims[IR_MAX_RANK], st[IR_MAX_RANK];
  int r = 0;
  for (int d = 0; d < out->type.rank; d++) {
    if (out->type.dims[d] == 1) continue;
    if (r > 0 && st[r - 1] == strides[d] * out->type.dims[d]) { /* adjacent in the input too */
      dims[r - 1] *= out->type.dims[d];
      st[r - 1] = strides[d];
      continue;
    }
    dims[r] = out->type.dims[d];
    st[r++] = strides[d];
  }
  if (r < 2 || st[r - 2] != 1 || st[r - 1] == 1) return false;
  int64_t M = dims[r - 2], N = dims[r - 1], sN = st[r - 1]; /* out[b][i][j] = in[off(b) + i + j*sN] */
  int64_t batches = 1;
  for (int d = 0; d < r - 2; d++) batches *= dims[d];
  int64_t ti = (M + TILE - 1) / TILE, tj = (N + TILE - 1) / TILE, units = batches * ti;
  const uint32_t *src = in;
  uint32_t *dst = out->data;
#pragma omp parallel for schedule(static) if (batches * M * N > RT_PAR_MIN && units > 1)
  for (int64_t u = 0; u < units; u++) {
    int64_t b = u / ti, i0 = (u % ti) * TILE, off = 0, rem = b;
    for (int d = r - 3; d >= 0; d--) {
      off += (rem % dims[d]) * st[d];
      rem /= dims[d];
    }
    int64_t i1 = i0 + TILE < M ? i0 + TILE : M;
    uint32_t *o = dst + b * M * N;
    for (int64_t t = 0; t < tj; t++) {
      int64_t j0 = t * TILE, j1 = j0 + TILE < N ? j0 + TILE : N;
      for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) o[i * N + j] = src[off + i + j * sN];
    }
  }
  return true;
}

/* out[idx] = in[sum_d idx[d] * strides[d]] over out's shape. */
static void strided_gather(rt_tensor *out, const void *in, const int64_t *strides) {
  if (transpose_tiled(out, in, strides)) return;
  int rank = out->type.rank;
  const int64_t *dims = out->type.dims;
  size_t es = ir_dtype_size(out->type.dtype);
  int64_t inner = rank ? dims[rank - 1] : 1;
  int64_t rows = inner ? rt_numel(&out->type) / inner : 0;
  int64_t istride = rank ? strides[rank - 1] : 0;
  const char *src = in;
  char *dst = out->data;
#pragma omp parallel for schedule(static) if (rows * inner > RT_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t off = 0, rr = r;
    for (int d = rank - 2; d >= 0; d--) {
      off += (rr % dims[d]) * strides[d];
      rr /= dims[d];
    }
    char *row = dst + (size_t)(r * inner) * es;
    if (istride == 1) { /* the row is contiguous in the operand too (e.g. a head split) */
      memcpy(row, src + (size_t)off * es, (size_t)inner * es);
      continue;
    }
    for (int64_t j = 0; j < inner; j++, off += istride)
      copy_elem(row + (size_t)j * es, src + (size_t)off * es, es);
  }
}

static void row_major_strides(const ir_type *t, int64_t *s) {
  int64_t acc = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    s[d] = acc;
    acc *= t->dims[d];
  }
}

int rt_kern_transpose(const rt_kctx *k) {
  const rt_tensor *a = k->in[0];
  const ir_attr *perm = ir_node_attr(k->node, "perm");
  int rank = a->type.rank;
  if (!perm || perm->kind != IR_ATTR_INTS || perm->n != rank) {
    rt_kerr(k, "transpose %%%s: missing or bad 'perm'", rt_value_name(k->node->out[0]));
    return -1;
  }
  int64_t in_strides[IR_MAX_RANK], strides[IR_MAX_RANK];
  row_major_strides(&a->type, in_strides);
  for (int d = 0; d < rank; d++) {
    int64_t p = perm->ints[d];
    if (p < 0 || p >= rank) {
      rt_kerr(k, "transpose %%%s: bad perm", rt_value_name(k->node->out[0]));
      return -1;
    }
    strides[d] = in_strides[p];
  }
  strided_gather(k->out[0], a->data, strides);
  return 0;
}

int rt_kern_reshape(const rt_kctx *k) {
  rt_tensor *out = k->out[0];
  if (out->nbytes != k->in[0]->nbytes) {
    rt_kerr(k, "reshape %%%s: element counts differ", rt_value_name(k->node->out[0]));
    return -1;
  }
  /* the executor may hand the operand's own buffer over (runtime/cpu/cpu.c) */
  if (out->nbytes && out->data != k->in[0]->data) memcpy(out->data, k->in[0]->data, out->nbytes);
  return 0;
}

int rt_kern_broadcast(const rt_kctx *k) {
  rt_tensor *out = k->out[0];
  const ir_type *in = &k->in[0]->type;
  int off = out->type.rank - in->rank;
  bool ok = off >= 0;
  for (int d = 0; ok && d < in->rank; d++) ok = in->dims[d] == 1 || in->dims[d] == out->type.dims[d + off];
  if (!ok) {
    rt_kerr(k, "broadcast %%%s: operand does not broadcast to the result", rt_value_name(k->node->out[0]));
    return -1;
  }
  int64_t strides[IR_MAX_RANK];
  rt_broadcast_strides(in, out->type.rank, out->type.dims, strides);
  strided_gather(out, k->in[0]->data, strides);
  return 0;
}

/* Sizes around axis: outer = prod dims[<axis], inner = prod dims[>axis]. */
static void around_axis(const ir_type *t, int axis, int64_t *outer, int64_t *inner) {
  *outer = 1, *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= t->dims[d];
  for (int d = axis + 1; d < t->rank; d++) *inner *= t->dims[d];
}

static int get_axis(const rt_kctx *k, const ir_type *t, int *axis) {
  int64_t a = ir_node_attr_int(k->node, "axis", -1);
  if (a < 0 || a >= t->rank) {
    rt_kerr(k, "%s %%%s: bad axis %lld", ir_op_name(k->node->op), rt_value_name(k->node->out[0]),
            (long long)a);
    return -1;
  }
  *axis = (int)a;
  return 0;
}

int rt_kern_slice(const rt_kctx *k) {
  const rt_tensor *a = k->in[0];
  rt_tensor *out = k->out[0];
  int axis;
  if (get_axis(k, &a->type, &axis) != 0) return -1;
  int64_t start = ir_node_attr_int(k->node, "start", 0);
  int64_t step = ir_node_attr_int(k->node, "step", 1);
  int64_t outer, inner;
  around_axis(&a->type, axis, &outer, &inner);
  int64_t in_dim = a->type.dims[axis], out_dim = out->type.dims[axis];
  if (step < 1 || start < 0 || (out_dim > 0 && start + (out_dim - 1) * step >= in_dim)) {
    rt_kerr(k, "slice %%%s: bad start/step", rt_value_name(k->node->out[0]));
    return -1;
  }
  size_t block = (size_t)inner * ir_dtype_size(a->type.dtype);
  const char *src = a->data;
  char *dst = out->data;
#pragma omp parallel for schedule(static) if (outer * out_dim * inner > RT_PAR_MIN)
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < out_dim; j++)
      memcpy(dst + (size_t)(o * out_dim + j) * block, src + (size_t)(o * in_dim + start + j * step) * block,
             block);
  return 0;
}

int rt_kern_concat(const rt_kctx *k) {
  rt_tensor *out = k->out[0];
  int axis;
  if (get_axis(k, &out->type, &axis) != 0) return -1;
  int64_t outer, inner;
  around_axis(&out->type, axis, &outer, &inner);
  size_t es = ir_dtype_size(out->type.dtype);
  size_t out_row = (size_t)(out->type.dims[axis] * inner) * es;
  int64_t sum = 0;
  for (int i = 0; i < k->node->n_in; i++) sum += k->in[i]->type.dims[axis];
  if (sum != out->type.dims[axis]) {
    rt_kerr(k, "concat %%%s: operand sizes do not add up", rt_value_name(k->node->out[0]));
    return -1;
  }
  size_t pos = 0; /* byte offset of this operand's block within an outer row */
  for (int i = 0; i < k->node->n_in; i++) {
    const rt_tensor *a = k->in[i];
    size_t row = (size_t)(a->type.dims[axis] * inner) * es;
    const char *src = a->data;
    char *dst = (char *)out->data + pos;
    for (int64_t o = 0; o < outer; o++) memcpy(dst + (size_t)o * out_row, src + (size_t)o * row, row);
    pos += row;
  }
  return 0;
}

int rt_kern_split(const rt_kctx *k) {
  const rt_tensor *a = k->in[0];
  int axis;
  if (get_axis(k, &a->type, &axis) != 0) return -1;
  int64_t outer, inner;
  around_axis(&a->type, axis, &outer, &inner);
  size_t es = ir_dtype_size(a->type.dtype);
  size_t in_row = (size_t)(a->type.dims[axis] * inner) * es;
  int64_t sum = 0;
  for (int i = 0; i < k->node->n_out; i++) sum += k->out[i]->type.dims[axis];
  if (sum != a->type.dims[axis]) {
    rt_kerr(k, "split %%%s: result sizes do not add up", rt_value_name(k->node->in[0]));
    return -1;
  }
  size_t pos = 0;
  for (int i = 0; i < k->node->n_out; i++) {
    rt_tensor *out = k->out[i];
    size_t row = (size_t)(out->type.dims[axis] * inner) * es;
    const char *src = (const char *)a->data + pos;
    char *dst = out->data;
    for (int64_t o = 0; o < outer; o++) memcpy(dst + (size_t)o * row, src + (size_t)o * in_row, row);
    pos += row;
  }
  return 0;
}
