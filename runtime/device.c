/* runtime/device.c — devices (opened backends) and their memory: every
 * allocation, transfer and fill goes through here, so a device counts what
 * it holds and moves (rt_device_stats) whatever the backend; the tests and
 * `--profile` read the counts (a steady training step uploads the batch and
 * downloads the logged scalars, nothing else).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

rt_device *rt_device_open(const rt_backend *b, char *err, size_t errlen) { return rt_device_open_with(b, NULL, err, errlen); }

rt_device *rt_device_open_with(const rt_backend *b, const rt_device_options *o, char *err, size_t errlen) {
  rt_device *d = calloc(1, sizeof *d);
  if (!d) {
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  d->backend = b;
  if (o) d->opts = *o;
  if (b->open && b->open(d, err, errlen) != 0) {
    free(d);
    return NULL;
  }
  return d;
}

void rt_device_close(rt_device *d) {
  if (!d) return;
  if (d->backend->close) d->backend->close(d);
  free(d);
}

rt_buffer *rt_buffer_alloc(rt_device *d, size_t bytes, char *err, size_t errlen) {
  rt_buffer *b = calloc(1, sizeof *b);
  if (!b) {
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  if (d->backend->alloc(d, bytes, &b->ptr, err, errlen) != 0) {
    free(b);
    return NULL;
  }
  b->dev = d;
  b->bytes = bytes;
  b->owned = true;
  d->stats.allocs++;
  d->stats.bytes_in_use += bytes;
  if (d->stats.bytes_in_use > d->stats.peak_bytes) d->stats.peak_bytes = d->stats.bytes_in_use;
  return b;
}

rt_buffer rt_buffer_wrap(rt_device *d, void *host, size_t bytes) {
  return (rt_buffer){.dev = d, .ptr = host, .bytes = bytes, .owned = false};
}

void rt_buffer_free(rt_buffer *b) {
  if (!b) return;
  if (b->owned) {
    b->dev->backend->free(b->dev, b->ptr);
    b->dev->stats.frees++;
    b->dev->stats.bytes_in_use -= b->bytes;
  }
  free(b);
}

int rt_upload(const rt_tensor *dst, const void *src, char *err, size_t errlen) {
  rt_device *d = dst->buf->dev;
  if (dst->data == src || dst->nbytes == 0) return 0;
  d->stats.uploads++;
  d->stats.bytes_uploaded += dst->nbytes;
  return d->backend->upload(d, dst->data, src, dst->nbytes, err, errlen);
}

rt_tensor *rt_pinned_tensor_new(rt_device *d, const ir_type *type, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!d->backend->host_alloc) return NULL;
  rt_tensor *t = malloc(sizeof *t);
  if (!t) {
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  ir_type probe = *type;
  *t = rt_tensor_view(NULL, 0, &probe);
  void *p = NULL;
  if (d->backend->host_alloc(d, t->nbytes ? t->nbytes : 1, &p, err, errlen) != 0 || !p) {
    free(t);
    return NULL;
  }
  memset(p, 0, t->nbytes); /* as rt_tensor_new's */
  t->data = p;
  return t;
}

void rt_pinned_tensor_free(rt_device *d, rt_tensor *t) {
  if (!t) return;
  d->backend->host_free(d, t->data);
  free(t);
}

int rt_upload_async(const rt_tensor *dst, const rt_tensor *src, char *err, size_t errlen) {
  rt_device *d = dst->buf->dev;
  if (dst->nbytes == 0) return 0;
  d->stats.uploads++;
  d->stats.async_uploads++;
  d->stats.bytes_uploaded += dst->nbytes;
  return d->backend->upload_async(d, dst->data, src->data, dst->nbytes, err, errlen);
}

int rt_host_wait(rt_device *d, char *err, size_t errlen) {
  return d->backend->host_wait ? d->backend->host_wait(d, err, errlen) : 0;
}

int rt_download(void *dst, const rt_tensor *src, char *err, size_t errlen) {
  rt_device *d = src->buf->dev;
  if (dst == src->data || src->nbytes == 0) return 0;
  d->stats.downloads++;
  d->stats.bytes_downloaded += src->nbytes;
  return d->backend->download(d, dst, src->data, src->nbytes, err, errlen);
}

int rt_copy(const rt_tensor *dst, const rt_tensor *src, char *err, size_t errlen) {
  rt_device *d = dst->buf->dev;
  if (dst->nbytes != src->nbytes) {
    rt_errf(err, errlen, "copy of %zu bytes into %zu", src->nbytes, dst->nbytes);
    return -1;
  }
  if (dst->data == src->data || dst->nbytes == 0) return 0;
  d->stats.copies++;
  d->stats.bytes_copied += dst->nbytes;
  return d->backend->copy(d, dst->data, src->data, dst->nbytes, err, errlen);
}

int rt_fill_bytes(rt_device *d, void *dst, size_t n, const void *pattern, size_t pattern_bytes, char *err,
                  size_t errlen) {
  if (n == 0) return 0;
  d->stats.fills++;
  d->stats.bytes_filled += n;
  return d->backend->fill(d, dst, n, pattern, pattern_bytes, err, errlen);
}

int rt_fill_value(const rt_tensor *t, double v, char *err, size_t errlen) {
  unsigned char pattern[8];
  rt_store(t->type.dtype, pattern, 0, v);
  return rt_fill_bytes(t->buf->dev, t->data, t->nbytes, pattern, ir_dtype_size(t->type.dtype), err, errlen);
}

rt_tensor *rt_device_tensor_new(rt_device *d, const ir_type *type, char *err, size_t errlen) {
  rt_tensor *t = malloc(sizeof *t);
  ir_type probe = *type;
  rt_tensor shape = rt_tensor_view(NULL, 0, &probe);
  rt_buffer *b = t ? rt_buffer_alloc(d, shape.nbytes, err, errlen) : NULL;
  if (!b) {
    if (!t) rt_errf(err, errlen, "out of memory");
    free(t);
    return NULL;
  }
  *t = rt_tensor_view(b, 0, type);
  if (rt_fill_value(t, 0, err, errlen) != 0) {
    rt_device_tensor_free(t);
    return NULL;
  }
  return t;
}

void rt_device_tensor_free(rt_tensor *t) {
  if (!t) return;
  rt_buffer_free(t->buf);
  free(t);
}
