/* runtime/tensor.c — dense row-major tensors and the small helpers the
 * kernels share (element counts, broadcast strides, error messages).
 *
 * Sizes are checked before anything is allocated: the element count must
 * not exceed IR_MAX_ELEMENTS and the byte count must stay below
 * RT_MAX_TENSOR_BYTES, otherwise rt_tensor_new reports out of memory (NULL)
 * instead of attempting an absurd allocation. rt_tensor_new zero-fills;
 * rt_tensor_new_uninit (a scratch tensor a kernel writes entirely) does not. Element access converts
 * through ir_round_to_dtype and ir's bf16/f16 conversions (see kernels.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* 1 TiB: anything larger is treated as an allocation failure outright. */
#define RT_MAX_TENSOR_BYTES ((size_t)1 << 40)

int64_t rt_numel(const ir_type *t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= t->dims[d];
  return n;
}

/* Element count and byte size of t, or -1 if the type is malformed or too big. */
static int tensor_size(const ir_type *t, size_t *nbytes) {
  if (!t || (int)t->dtype < 0 || t->dtype >= IR_NUM_DTYPES || t->rank < 0 || t->rank > IR_MAX_RANK)
    return -1;
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) {
    int64_t dim = t->dims[d];
    if (dim < 0 || dim > IR_MAX_ELEMENTS) return -1;
    if (dim != 0 && n > IR_MAX_ELEMENTS / dim) return -1;
    n *= dim;
  }
  size_t es = ir_dtype_size(t->dtype);
  if ((uint64_t)n > RT_MAX_TENSOR_BYTES / es) return -1;
  *nbytes = (size_t)n * es;
  return 0;
}

static rt_tensor *tensor_alloc(const ir_type *type, bool zeroed) {
  size_t nbytes;
  if (tensor_size(type, &nbytes) != 0) return NULL;
  rt_tensor *t = malloc(sizeof *t);
  if (!t) return NULL;
  t->type = *type;
  t->nbytes = nbytes;
  t->buf = NULL;
  t->offset = 0;
  t->data = zeroed ? calloc(nbytes ? nbytes : 1, 1) : malloc(nbytes ? nbytes : 1);
  if (!t->data) {
    free(t);
    return NULL;
  }
  return t;
}

rt_tensor *rt_tensor_new(const ir_type *type) { return tensor_alloc(type, true); }

rt_tensor *rt_tensor_new_uninit(const ir_type *type) { return tensor_alloc(type, false); }

void rt_tensor_free(rt_tensor *t) {
  if (!t) return;
  if (!t->buf) free(t->data);
  free(t);
}

rt_tensor rt_tensor_view(rt_buffer *b, size_t off, const ir_type *t) {
  rt_tensor v = {.type = *t, .buf = b, .offset = off};
  size_t n = 0;
  if (tensor_size(t, &n) != 0) n = 0;
  v.nbytes = n;
  v.data = b && b->ptr ? (char *)b->ptr + off : NULL;
  return v;
}

double rt_tensor_get(const rt_tensor *t, int64_t i) { return rt_load(t->type.dtype, t->data, i); }

void rt_tensor_set(rt_tensor *t, int64_t i, double v) { rt_store(t->type.dtype, t->data, i, v); }

void rt_tensor_fill(rt_tensor *t, double v) {
  int64_t n = rt_numel(&t->type);
  /* Store once, then copy the bit pattern: same result as storing each. */
  if (n == 0) return;
  rt_store(t->type.dtype, t->data, 0, v);
  size_t es = ir_dtype_size(t->type.dtype);
  char *p = t->data;
  for (int64_t i = 1; i < n; i++) memcpy(p + (size_t)i * es, p, es);
}

void rt_broadcast_strides(const ir_type *t, int out_rank, const int64_t *out_dims,
                          int64_t *strides) {
  int64_t s = 1;
  int off = out_rank - t->rank;
  for (int d = out_rank - 1; d >= 0; d--) {
    int td = d - off;
    if (td < 0) {
      strides[d] = 0;
      continue;
    }
    strides[d] = t->dims[td] == 1 ? 0 : s; /* size-1 dims repeat */
    s *= t->dims[td];
  }
}

const char *rt_value_name(const ir_value *v) { return v && v->name ? v->name : "?"; }

void rt_errf(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

void rt_path_errf(char *err, size_t errlen, const char *path, const char *fmt, ...) {
  if (!err || !errlen) return;
  int n = snprintf(err, errlen, "%s: ", path);
  if (n < 0 || (size_t)n >= errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
  va_end(ap);
}

