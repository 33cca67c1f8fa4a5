/* runtime/tensor.c — dense row-major tensors and the small helpers the
 * kernels share (element counts, broadcast strides, error messages).
 *
 * Sizes are checked before anything is allocated: the element count must
 * not exceed IR_MAX_ELEMENTS and the byte count must stay below
 * RT_MAX_TENSOR_BYTES, otherwise rt_tensor_new reports out of memory (NULL)
 * instead of attempting an absurd allocation. rt_tensor_new zero-fills;
 * rt_tensor_new_uninit (for the executor, when the kernel about to run
 * writes every element) does not: calloc must memset reused heap memory,
 * and that memset was pure waste for such results. Element access converts
 * through ir_round_to_dtype and ir's bf16/f16 conversions (see kernels.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

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

/* ---- the buffer cache ----
 * Large buffers (glibc maps each one fresh from the kernel, so every use
 * pays a page fault and a zeroing per 4 KiB) are kept when freed, up to a
 * byte limit, and handed to the next allocation of exactly the same size:
 * a training loop allocates the same sizes every step. Off (limit 0) unless
 * a program turns it on (`tgc train` does). Oldest entries go first when
 * the limit is reached. Guarded for calls from several threads. */
enum { CACHE_SLOTS = 2048 };
#define CACHE_MIN_BYTES ((size_t)1 << 16)
static struct {
  void *p;
  size_t n;
} cache[CACHE_SLOTS];
static int cache_n;
static size_t cache_bytes, cache_limit;

static void cache_drop_oldest(void) {
  free(cache[0].p);
  cache_bytes -= cache[0].n;
  memmove(cache, cache + 1, (size_t)(cache_n - 1) * sizeof cache[0]);
  cache_n--;
}

void rt_tensor_cache_limit(size_t bytes) {
#pragma omp critical(rt_tensor_cache)
  {
    cache_limit = bytes;
    while (cache_n > 0 && cache_bytes > cache_limit) cache_drop_oldest();
  }
}

static void *cache_take(size_t n) {
  void *p = NULL;
  if (n < CACHE_MIN_BYTES) return NULL;
#pragma omp critical(rt_tensor_cache)
  for (int i = cache_n - 1; i >= 0; i--) /* the most recently freed first */
    if (cache[i].n == n) {
      p = cache[i].p;
      cache_bytes -= n;
      memmove(cache + i, cache + i + 1, (size_t)(cache_n - i - 1) * sizeof cache[0]);
      cache_n--;
      break;
    }
  return p;
}

/* Keeps p (n bytes) in the cache, or frees it. */
static void cache_put(void *p, size_t n) {
  bool kept = false;
  if (n >= CACHE_MIN_BYTES) {
#pragma omp critical(rt_tensor_cache)
    if (n <= cache_limit) {
      while (cache_n > 0 && (cache_n == CACHE_SLOTS || cache_bytes + n > cache_limit)) cache_drop_oldest();
      cache[cache_n].p = p;
      cache[cache_n].n = n;
      cache_n++;
      cache_bytes += n;
      kept = true;
    }
  }
  if (!kept) free(p);
}

static rt_tensor *tensor_alloc(const ir_type *type, bool zeroed) {
  size_t nbytes;
  if (tensor_size(type, &nbytes) != 0) return NULL;
  rt_tensor *t = malloc(sizeof *t);
  if (!t) return NULL;
  t->type = *type;
  t->nbytes = nbytes;
  t->data = cache_take(nbytes);
  if (t->data && zeroed) memset(t->data, 0, nbytes);
  if (!t->data) t->data = zeroed ? calloc(nbytes ? nbytes : 1, 1) : malloc(nbytes ? nbytes : 1);
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
  cache_put(t->data, t->nbytes);
  free(t);
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

void rt_kerr(const rt_kctx *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(k->err, k->errlen, fmt, ap);
  va_end(ap);
}
