/* tests/unit/testcomm.h — what the comm tests share: inputs every rank can
 * compute for any rank (a hash of rank, index and call), plain references
 * of every collective written from comm.h's documentation (the ring order
 * of the reductions, chunk sizes, byte formulas), and a sweep that runs
 * every collective on every axis of a mesh, every dtype and several counts
 * (divisible by the group size and not, 0), on host or device memory, and
 * checks results bit for bit, bit-identity across members, and the
 * counters against the closed forms. Include after check.h. */
#ifndef TGC_TESTCOMM_H
#define TGC_TESTCOMM_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

static char C_err[1024];

/* Where buffers live: host memory, or a device through a table. */
typedef struct {
  void *(*alloc)(size_t bytes);
  void (*free)(void *p);
  void (*put)(void *dst, const void *host, size_t bytes);
  void (*get)(void *host, const void *src, size_t bytes);
} t_mem;

static void *t_host_alloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }
static void t_host_put(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static const t_mem t_host_mem = {t_host_alloc, free, t_host_put, t_host_put};

static const ir_dtype t_all_dtypes[] = {IR_DT_F64, IR_DT_F32, IR_DT_BF16, IR_DT_F16, IR_DT_I32, IR_DT_I64, IR_DT_BOOL};
#define T_NDTYPES ((int)(sizeof t_all_dtypes / sizeof t_all_dtypes[0]))

static uint64_t t_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* Element i of world rank r's input in call `salt`, stored in dt. Floats
 * are multiples of 1/64 times a power of two in [2^-4, 2^3] (so sums round
 * differently in different orders); integers span the whole type (so sums
 * wrap); bool is 0 or 1. */
static void t_input(ir_dtype dt, int r, int64_t i, uint64_t salt, void *buf, int64_t at) {
  uint64_t h = t_mix(t_mix(salt * 1000003u + (uint64_t)r) + (uint64_t)i);
  double v = ldexp((double)((int64_t)(h % 2001) - 1000) / 64.0, (int)((h >> 20) % 8) - 4);
  switch (dt) {
  case IR_DT_F64: ((double *)buf)[at] = v * (1.0 + 1e-9 * (double)(h >> 40)); break;
  case IR_DT_F32: ((float *)buf)[at] = (float)(v * (1.0 + 1e-5 * (double)((h >> 40) % 1000))); break;
  case IR_DT_BF16: ((uint16_t *)buf)[at] = ir_f32_to_bf16((float)v); break;
  case IR_DT_F16: ((uint16_t *)buf)[at] = ir_f32_to_f16((float)v); break;
  case IR_DT_I32: ((int32_t *)buf)[at] = (int32_t)(uint32_t)h; break;
  case IR_DT_I64: ((int64_t *)buf)[at] = (int64_t)h; break;
  case IR_DT_BOOL: ((uint8_t *)buf)[at] = (uint8_t)((h >> 7) & 1); break;
  default: break;
  }
}

/* One element of `in OP local`, as comm.h documents it, in raw storage. */
static void t_ref_op(ir_dtype dt, rt_reduce_op op, void *acc, const void *local) {
  bool sum = op == RT_REDUCE_SUM;
  switch (dt) {
  case IR_DT_F64: {
    double a = *(double *)acc, b = *(const double *)local;
    *(double *)acc = sum ? a + b : (a > b || a != a) ? a : b;
    break;
  }
  case IR_DT_F32: {
    float a = *(float *)acc, b = *(const float *)local;
    *(float *)acc = sum ? a + b : (a > b || a != a) ? a : b;
    break;
  }
  case IR_DT_BF16:
  case IR_DT_F16: {
    uint16_t a = *(uint16_t *)acc, b = *(const uint16_t *)local;
    float x = dt == IR_DT_BF16 ? ir_bf16_to_f32(a) : ir_f16_to_f32(a);
    float y = dt == IR_DT_BF16 ? ir_bf16_to_f32(b) : ir_f16_to_f32(b);
    float s = x + y;
    *(uint16_t *)acc = sum ? (dt == IR_DT_BF16 ? ir_f32_to_bf16(s) : ir_f32_to_f16(s)) : (x > y || x != x) ? a : b;
    break;
  }
  case IR_DT_I32: {
    int32_t a = *(int32_t *)acc, b = *(const int32_t *)local;
    *(int32_t *)acc = sum ? (int32_t)((uint32_t)a + (uint32_t)b) : a > b ? a : b;
    break;
  }
  case IR_DT_I64: {
    int64_t a = *(int64_t *)acc, b = *(const int64_t *)local;
    *(int64_t *)acc = sum ? (int64_t)((uint64_t)a + (uint64_t)b) : a > b ? a : b;
    break;
  }
  case IR_DT_BOOL: *(uint8_t *)acc = *(uint8_t *)acc || *(const uint8_t *)local; break;
  default: break;
  }
}

/* The world rank of the member at coordinate k on axis (-1: k itself):
 * this rank's row-major digits with digit `axis` replaced. */
static int t_member(const int *sizes, int n_axes, int rank, int axis, int k) {
  if (axis < 0) return k;
  int stride = 1;
  for (int j = n_axes - 1; j > axis; j--) stride *= sizes[j];
  int coord = rank / stride % sizes[axis];
  return rank + (k - coord) * stride;
}

static int64_t t_chunk(int64_t count, int n, int j) {
  j = ((j % n) + n) % n;
  return count / n + (j < count % n);
}

/* The reduction of element e of block `block` (elements of count) over the
 * n members: acc = x_{c+1}, acc = acc OP x_{c+2}, ..., ending with x_c,
 * where c is the chunk holding e (all_reduce: chunks of the buffer;
 * reduce_scatter: c = block). */
static void t_ref_reduce(ir_dtype dt, rt_reduce_op op, const int *members, int n, int c, int64_t at, uint64_t salt,
                         void *out, int64_t out_at) {
  size_t es = ir_dtype_size(dt);
  unsigned char acc[8], x[8];
  t_input(dt, members[(c + 1) % n], at, salt, acc, 0);
  for (int t = 2; t <= n; t++) {
    t_input(dt, members[(c + t) % n], at, salt, x, 0);
    t_ref_op(dt, op, acc, x);
  }
  memcpy((char *)out + (size_t)out_at * es, acc, es);
}

static inline uint64_t t_hash(const void *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
  return h;
}

/* Reports the first mismatches of got against want (elements of es bytes). */
static int t_compare(const char *what, ir_dtype dt, const void *got, const void *want, int64_t n) {
  size_t es = ir_dtype_size(dt);
  int bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (memcmp((const char *)got + (size_t)i * es, (const char *)want + (size_t)i * es, es) != 0) {
      if (bad < 3) {
        uint64_t g = 0, w = 0;
        memcpy(&g, (const char *)got + (size_t)i * es, es);
        memcpy(&w, (const char *)want + (size_t)i * es, es);
        fprintf(stderr, "  %s %s: element %lld is 0x%llx, expected 0x%llx (bits)\n", what, ir_dtype_name(dt),
                (long long)i, (unsigned long long)g, (unsigned long long)w);
      }
      bad++;
    }
  if (bad) fprintf(stderr, "  %s %s: %d of %lld elements differ (exact comparison)\n", what, ir_dtype_name(dt), bad,
                   (long long)n);
  return bad;
}

/* The closed forms of comm.h, written out here. */
static rt_comm_counter t_expected_bytes(rt_coll_kind k, int n, int i, int root, int64_t count, size_t es) {
  rt_comm_counter r = {1, 0, 0};
  if (n == 1) return r;
  int64_t b = (int64_t)es;
  switch (k) {
  case IR_COLL_ALL_REDUCE:
    if (count % n == 0) { /* 2 (n-1)/n of the buffer */
      r.bytes_sent = r.bytes_received = 2 * (n - 1) * (count / n) * b;
    } else {
      r.bytes_sent = (2 * count - t_chunk(count, n, i) - t_chunk(count, n, i + 1)) * b;
      r.bytes_received = (2 * count - t_chunk(count, n, i - 1) - t_chunk(count, n, i)) * b;
    }
    break;
  case IR_COLL_ALL_GATHER:
  case IR_COLL_REDUCE_SCATTER:
  case IR_COLL_ALL_TO_ALL: r.bytes_sent = r.bytes_received = (n - 1) * count * b; break;
  case IR_COLL_BROADCAST:
    r.bytes_sent = (i - root + n) % n == n - 1 ? 0 : count * b;
    r.bytes_received = i == root ? 0 : count * b;
    break;
  default: break;
  }
  return r;
}

typedef struct {
  rt_comm *c;
  const t_mem *mem;
  int n_axes;
  int sizes[RT_COMM_MAX_AXES];
  uint64_t salt;                 /* advances with every call, the same on every rank */
  int64_t calls, mismatches;
  /* optional: what a backend says it moved, compared with the counters
   * (the NCCL emulation's actual bytes) */
  void (*moved)(int64_t *sent, int64_t *received);
} t_sweep;

/* One collective of kind k on axis, checked. */
static void t_check_one(t_sweep *s, int axis, rt_coll_kind k, ir_dtype dt, rt_reduce_op op, int64_t count,
                        int root) {
  rt_comm *c = s->c;
  int rank = rt_comm_rank(c), n = rt_comm_axis_size(c, axis), me = rt_comm_coord(c, axis);
  size_t es = ir_dtype_size(dt);
  int64_t ns = count, nr = count;
  if (k == IR_COLL_ALL_GATHER) nr = n * count;
  if (k == IR_COLL_REDUCE_SCATTER) ns = n * count;
  if (k == IR_COLL_ALL_TO_ALL) ns = nr = n * count;
  int members[64];
  for (int j = 0; j < n; j++) members[j] = t_member(s->sizes, s->n_axes, rank, axis, j);
  uint64_t salt = ++s->salt;
  char *in = calloc((size_t)(ns ? ns : 1), es), *want = calloc((size_t)(nr ? nr : 1), es),
       *got = calloc((size_t)(nr ? nr : 1), es);
  /* inputs: element i of this rank's send buffer; for all_to_all, block j
   * element e is input index j*count+e */
  for (int64_t i = 0; i < ns; i++) t_input(dt, rank, i, salt, in, i);
  switch (k) {
  case IR_COLL_ALL_REDUCE:
    for (int j = 0, e = 0; j < n; j++)
      for (int64_t q = 0; q < t_chunk(count, n, j); q++, e++) t_ref_reduce(dt, op, members, n, j, e, salt, want, e);
    break;
  case IR_COLL_REDUCE_SCATTER:
    for (int64_t e = 0; e < count; e++) t_ref_reduce(dt, op, members, n, me, me * count + e, salt, want, e);
    break;
  case IR_COLL_ALL_GATHER:
    for (int j = 0; j < n; j++)
      for (int64_t e = 0; e < count; e++) t_input(dt, members[j], e, salt, want, j * count + e);
    break;
  case IR_COLL_ALL_TO_ALL:
    for (int j = 0; j < n; j++)
      for (int64_t e = 0; e < count; e++) t_input(dt, members[j], me * count + e, salt, want, j * count + e);
    break;
  case IR_COLL_BROADCAST:
    for (int64_t e = 0; e < count; e++) t_input(dt, members[root], e, salt, want, e);
    if (me == root) memcpy(in, want, (size_t)count * es);
    break;
  default: break;
  }
  void *dsend = s->mem->alloc((size_t)ns * es + 1), *drecv = s->mem->alloc((size_t)nr * es + 1);
  s->mem->put(k == IR_COLL_BROADCAST ? drecv : dsend, in, (size_t)ns * es);
  rt_comm_counter before = rt_comm_count(c, k, axis);
  int64_t moved_s0 = 0, moved_r0 = 0, moved_s1 = 0, moved_r1 = 0;
  if (s->moved) s->moved(&moved_s0, &moved_r0);
  int rc = -1;
  switch (k) {
  case IR_COLL_ALL_REDUCE: rc = rt_comm_all_reduce(c, axis, op, dt, dsend, drecv, count, C_err, sizeof C_err); break;
  case IR_COLL_ALL_GATHER: rc = rt_comm_all_gather(c, axis, dt, dsend, drecv, count, C_err, sizeof C_err); break;
  case IR_COLL_REDUCE_SCATTER:
    rc = rt_comm_reduce_scatter(c, axis, op, dt, dsend, drecv, count, C_err, sizeof C_err);
    break;
  case IR_COLL_ALL_TO_ALL: rc = rt_comm_all_to_all(c, axis, dt, dsend, drecv, count, C_err, sizeof C_err); break;
  case IR_COLL_BROADCAST: rc = rt_comm_broadcast(c, axis, root, dt, drecv, count, C_err, sizeof C_err); break;
  default: break;
  }
  if (rc) fprintf(stderr, "rank %d: %s\n", rank, C_err);
  CHECK_EQ_INT(rc, 0);
  s->mem->get(got, drecv, (size_t)nr * es);
  char what[96];
  snprintf(what, sizeof what, "rank %d: %s over %s, count %lld%s", rank, rt_coll_name(k), rt_comm_axis_name(c, axis),
           (long long)count, op == RT_REDUCE_MAX && (k == IR_COLL_ALL_REDUCE || k == IR_COLL_REDUCE_SCATTER) ? ", max" : "");
  int bad = t_compare(what, dt, got, want, nr);
  s->mismatches += bad;
  CHECK_EQ_INT(bad, 0);
  /* counters: one call, the closed forms, and rt_comm_ring_bytes */
  rt_comm_counter after = rt_comm_count(c, k, axis);
  rt_comm_counter want_b = t_expected_bytes(k, n, me, root, count, es);
  rt_comm_counter formula = rt_comm_ring_bytes(k, n, me, root, count, es);
  CHECK_EQ_INT(after.calls - before.calls, 1);
  if (after.bytes_sent - before.bytes_sent != want_b.bytes_sent ||
      after.bytes_received - before.bytes_received != want_b.bytes_received)
    fprintf(stderr, "  %s %s: counted %lld sent, %lld received; expected %lld, %lld\n", what, ir_dtype_name(dt),
            (long long)(after.bytes_sent - before.bytes_sent), (long long)(after.bytes_received - before.bytes_received),
            (long long)want_b.bytes_sent, (long long)want_b.bytes_received);
  CHECK_EQ_INT(after.bytes_sent - before.bytes_sent, want_b.bytes_sent);
  CHECK_EQ_INT(after.bytes_received - before.bytes_received, want_b.bytes_received);
  CHECK_EQ_INT(formula.bytes_sent, want_b.bytes_sent);
  CHECK_EQ_INT(formula.bytes_received, want_b.bytes_received);
  if (s->moved && n > 1) {
    s->moved(&moved_s1, &moved_r1);
    CHECK_EQ_INT(moved_s1 - moved_s0, want_b.bytes_sent);
    CHECK_EQ_INT(moved_r1 - moved_r0, want_b.bytes_received);
  }
  s->calls++;
  s->mem->free(dsend);
  s->mem->free(drecv);
  free(in);
  free(want);
  free(got);
}

/* Every collective on axis: every dtype at one count that n does not divide
 * (reductions with sum and max), then f32 at counts 0, 1, n, 3n+1 and a
 * large one; broadcast from every root. */
static void t_sweep_axis(t_sweep *s, int axis, int64_t large) {
  int n = rt_comm_axis_size(s->c, axis);
  static const rt_coll_kind kinds[] = {IR_COLL_ALL_REDUCE, IR_COLL_ALL_GATHER, IR_COLL_REDUCE_SCATTER,
                                       IR_COLL_ALL_TO_ALL, IR_COLL_BROADCAST};
  for (int d = 0; d < T_NDTYPES; d++)
    for (int ki = 0; ki < 5; ki++) {
      rt_coll_kind k = kinds[ki];
      int64_t count = 2 * n + 3;
      t_check_one(s, axis, k, t_all_dtypes[d], RT_REDUCE_SUM, count, n - 1);
      if (k == IR_COLL_ALL_REDUCE || k == IR_COLL_REDUCE_SCATTER)
        t_check_one(s, axis, k, t_all_dtypes[d], RT_REDUCE_MAX, count, 0);
    }
  const int64_t counts[] = {0, 1, n, 3 * n + 1, large};
  for (int ci = 0; ci < 5; ci++)
    for (int ki = 0; ki < 5; ki++) t_check_one(s, axis, kinds[ki], IR_DT_F32, RT_REDUCE_SUM, counts[ci], ci % n);
  for (int root = 0; root < n; root++) t_check_one(s, axis, IR_COLL_BROADCAST, IR_DT_BF16, RT_REDUCE_SUM, 33, root);
  /* in place: all_reduce with send == recv */
  {
    rt_comm *c = s->c;
    int rank = rt_comm_rank(c);
    int64_t count = 5 * n + 2;
    uint64_t salt = ++s->salt;
    int members[64];
    for (int j = 0; j < n; j++) members[j] = t_member(s->sizes, s->n_axes, rank, axis, j);
    double *host = calloc((size_t)count, sizeof *host), *want = calloc((size_t)count, sizeof *want);
    for (int64_t i = 0; i < count; i++) t_input(IR_DT_F64, rank, i, salt, host, i);
    for (int j = 0, e = 0; j < n; j++)
      for (int64_t q = 0; q < t_chunk(count, n, j); q++, e++)
        t_ref_reduce(IR_DT_F64, RT_REDUCE_SUM, members, n, j, e, salt, want, e);
    void *d = s->mem->alloc((size_t)count * 8);
    s->mem->put(d, host, (size_t)count * 8);
    CHECK_EQ_INT(rt_comm_all_reduce(c, axis, RT_REDUCE_SUM, IR_DT_F64, d, d, count, C_err, sizeof C_err), 0);
    s->mem->get(host, d, (size_t)count * 8);
    CHECK_EQ_INT(t_compare("in-place all_reduce", IR_DT_F64, host, want, count), 0);
    s->mem->free(d);
    free(host);
    free(want);
  }
}

/* A mesh of n_axes axes named a0, a1, ... (the names do not matter). */
static int t_set_mesh(t_sweep *s, int n_axes, const int *sizes) {
  static const char *const names[] = {"pp", "dp", "tp", "a3", "a4", "a5", "a6", "a7"};
  s->n_axes = n_axes;
  if (n_axes) memcpy(s->sizes, sizes, (size_t)n_axes * sizeof *sizes);
  int rc = rt_comm_set_mesh(s->c, n_axes, names, sizes, C_err, sizeof C_err);
  if (rc) fprintf(stderr, "rank %d: %s\n", rt_comm_rank(s->c), C_err);
  CHECK_EQ_INT(rc, 0);
  return rc;
}

#endif
