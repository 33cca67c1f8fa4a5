/* runtime/comm/ring.c — the collective algorithms, written once over a
 * point-to-point transport (comm_backend's isend / irecv / test), and the
 * reductions they apply.
 *
 * Every algorithm is a sequence of steps; in a step a member posts at most
 * one send and one receive and waits for both, so a step's buffers are free
 * again when it ends. Members are indexed by their coordinate (0..n-1,
 * ring order), `me` is this rank's; the ring sends to me+1 and receives
 * from me-1. Zero-byte messages are not sent (both sides know the sizes).
 * The bytes each member moves are in comm.h; they are counted here, as
 * they are posted, so the counters are what moved.
 *
 * The waits, their timeouts and the diagnosis of a timeout are wait.c's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm_internal.h"

/* broadcast's pipeline segment, and how many segment sends may be in flight */
#define SEGMENT_BYTES (256u << 10)
#define SEGMENTS_IN_FLIGHT 8

/* ---- reductions: out[i] = in[i] OP local[i] ---- */

static inline float max_f(float a, float b) { return (a > b || isnan(a)) ? a : b; }
static inline double max_d(double a, double b) { return (a > b || isnan(a)) ? a : b; }

void rt_comm_reduce(ir_dtype dt, rt_reduce_op op, void *out, const void *in, const void *local, int64_t n) {
  bool sum = op == RT_REDUCE_SUM;
  switch (dt) {
  case IR_DT_F64: {
    double *o = out;
    const double *a = in, *b = local;
    if (sum)
      for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i];
    else
      for (int64_t i = 0; i < n; i++) o[i] = max_d(a[i], b[i]);
    break;
  }
  case IR_DT_F32: {
    float *o = out;
    const float *a = in, *b = local;
    if (sum)
      for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i];
    else
      for (int64_t i = 0; i < n; i++) o[i] = max_f(a[i], b[i]);
    break;
  }
  case IR_DT_BF16:
  case IR_DT_F16: {
    uint16_t *o = out;
    const uint16_t *a = in, *b = local;
    bool bf = dt == IR_DT_BF16;
    for (int64_t i = 0; i < n; i++) {
      float x = bf ? ir_bf16_to_f32(a[i]) : ir_f16_to_f32(a[i]);
      float y = bf ? ir_bf16_to_f32(b[i]) : ir_f16_to_f32(b[i]);
      if (sum) {
        float s = x + y;
        o[i] = bf ? ir_f32_to_bf16(s) : ir_f32_to_f16(s);
      } else {
        o[i] = (x > y || isnan(x)) ? a[i] : b[i];
      }
    }
    break;
  }
  case IR_DT_I32: {
    int32_t *o = out;
    const int32_t *a = in, *b = local;
    if (sum)
      for (int64_t i = 0; i < n; i++) o[i] = (int32_t)((uint32_t)a[i] + (uint32_t)b[i]);
    else
      for (int64_t i = 0; i < n; i++) o[i] = a[i] > b[i] ? a[i] : b[i];
    break;
  }
  case IR_DT_I64: {
    int64_t *o = out;
    const int64_t *a = in, *b = local;
    if (sum)
      for (int64_t i = 0; i < n; i++) o[i] = (int64_t)((uint64_t)a[i] + (uint64_t)b[i]);
    else
      for (int64_t i = 0; i < n; i++) o[i] = a[i] > b[i] ? a[i] : b[i];
    break;
  }
  case IR_DT_BOOL: {
    uint8_t *o = out;
    const uint8_t *a = in, *b = local;
    for (int64_t i = 0; i < n; i++) o[i] = (a[i] | b[i]) != 0;
    break;
  }
  default: break;
  }
}

/* ---- steps ---- */

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* One step: send sbytes of sbuf to member `to` and receive rbytes into rbuf
 * from member `from` (either may be 0 bytes: not posted), on tag. */
static int exchange(comm_group *g, int tag, int to, const void *sbuf, size_t sbytes, int from, void *rbuf,
                    size_t rbytes, char *err, size_t errlen) {
  rt_comm *c = g->c;
  comm_req *reqs[2] = {NULL, NULL};
  int peers[2] = {group_world_rank(g, to), group_world_rank(g, from)};
  bool recv[2] = {false, true};
  char why[512];
  if (rbytes && c->be->irecv(c, peers[1], tag, rbuf, rbytes, &reqs[1], why, sizeof why)) goto failed;
  if (sbytes && c->be->isend(c, peers[0], tag, sbuf, sbytes, &reqs[0], why, sizeof why)) goto failed;
  if (g->ctr) g->ctr->bytes_sent += (int64_t)sbytes, g->ctr->bytes_received += (int64_t)rbytes;
  return rt_comm_wait(c, g->desc, reqs, peers, recv, 2, NULL, err, errlen);
failed:
  c->broken = true;
  rt_comm_errf(err, errlen, "%s: %s", g->desc, why);
  return -1;
}

/* Chunk j of count elements cut in n: c_j = count/n + (j < count%n). */
static int64_t chunk_len(int64_t count, int n, int j) { return count / n + (j < count % n); }
static int64_t chunk_off(int64_t count, int n, int j) {
  int64_t r = count % n;
  return (int64_t)j * (count / n) + (j < r ? j : r);
}

/* In place on buf: reduce-scatter leaves the full chunk `me` here, then the
 * all-gather passes every full chunk around. */
static int all_reduce(comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
  int n = g->n, me = g->me;
  size_t es = ir_dtype_size(a->dt);
  int64_t count = a->count;
  char *buf = a->recv;
  void *tmp = rt_comm_scratch(g->c, 0, (size_t)chunk_len(count, n, 0) * es);
  if (!tmp && count) {
    rt_comm_errf(err, errlen, "out of memory");
    return -1;
  }
  int right = mod(me + 1, n), left = mod(me - 1, n);
  for (int s = 0; s < n - 1; s++) {
    int sc = mod(me - s - 1, n), rc = mod(me - s - 2, n);
    int64_t rlen = chunk_len(count, n, rc);
    if (exchange(g, g->tag, right, buf + chunk_off(count, n, sc) * es, (size_t)chunk_len(count, n, sc) * es, left,
                 tmp, (size_t)rlen * es, err, errlen))
      return -1;
    char *dst = buf + chunk_off(count, n, rc) * es;
    rt_comm_reduce(a->dt, a->op, dst, tmp, dst, rlen);
  }
  for (int s = 0; s < n - 1; s++) {
    int sc = mod(me - s, n), rc = mod(me - s - 1, n);
    if (exchange(g, g->tag, right, buf + chunk_off(count, n, sc) * es, (size_t)chunk_len(count, n, sc) * es, left,
                 buf + chunk_off(count, n, rc) * es, (size_t)chunk_len(count, n, rc) * es, err, errlen))
      return -1;
  }
  return 0;
}

/* The reduce-scatter half on n blocks of count; partial sums alternate
 * between two scratch blocks, the last step writes recv. recv may be
 * send + me*count (each element read before it is written). */
static int reduce_scatter(comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
  int n = g->n, me = g->me;
  size_t es = ir_dtype_size(a->dt), bytes = (size_t)a->count * es;
  const char *send = a->send;
  char *tmp[2] = {rt_comm_scratch(g->c, 0, bytes), rt_comm_scratch(g->c, 1, bytes)};
  if ((!tmp[0] || !tmp[1]) && bytes) {
    rt_comm_errf(err, errlen, "out of memory");
    return -1;
  }
  int right = mod(me + 1, n), left = mod(me - 1, n);
  const char *partial = NULL;
  for (int s = 0; s < n - 1; s++) {
    int sc = mod(me - s - 1, n), rc = mod(me - s - 2, n);
    const char *out = s == 0 ? send + (size_t)sc * bytes : partial;
    char *in = tmp[s & 1];
    if (exchange(g, g->tag, right, out, bytes, left, in, bytes, err, errlen)) return -1;
    char *dst = s == n - 2 ? (char *)a->recv : in;
    rt_comm_reduce(a->dt, a->op, dst, in, send + (size_t)rc * bytes, a->count);
    partial = in;
  }
  return 0;
}

/* recv's block me already holds this rank's (comm.c copies it there). */
static int all_gather(comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
  int n = g->n, me = g->me;
  size_t bytes = (size_t)a->count * ir_dtype_size(a->dt);
  char *recv = a->recv;
  for (int s = 0; s < n - 1; s++) {
    int sc = mod(me - s, n), rc = mod(me - s - 1, n);
    if (exchange(g, g->tag, mod(me + 1, n), recv + (size_t)sc * bytes, bytes, mod(me - 1, n),
                 recv + (size_t)rc * bytes, bytes, err, errlen))
      return -1;
  }
  return 0;
}

/* Pairwise: step s sends block me+s to member me+s and receives member
 * me-s's block for me. recv's block me is copied by comm.c. */
static int all_to_all(comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
  int n = g->n, me = g->me;
  size_t bytes = (size_t)a->count * ir_dtype_size(a->dt);
  const char *send = a->send;
  char *recv = a->recv;
  for (int s = 1; s < n; s++) {
    int to = mod(me + s, n), from = mod(me - s, n);
    if (exchange(g, g->tag, to, send + (size_t)to * bytes, bytes, from, recv + (size_t)from * bytes, bytes, err,
                 errlen))
      return -1;
  }
  return 0;
}

/* A chain from the root in ring order, pipelined by segments: a member
 * receives segment k, then forwards it while receiving k+1. */
static int broadcast(comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
  rt_comm *c = g->c;
  int n = g->n, pos = mod(g->me - a->peer, n);
  size_t total = (size_t)a->count * ir_dtype_size(a->dt);
  char *buf = a->recv;
  int next = group_world_rank(g, mod(g->me + 1, n)), prev = group_world_rank(g, mod(g->me - 1, n));
  const char *what = g->desc;
  char why[512];
  comm_req *sends[SEGMENTS_IN_FLIGHT] = {NULL};
  int peers[SEGMENTS_IN_FLIGHT];
  bool recv[SEGMENTS_IN_FLIGHT] = {false};
  for (int i = 0; i < SEGMENTS_IN_FLIGHT; i++) peers[i] = next;
  int k = 0;
  for (size_t off = 0; off < total; off += SEGMENT_BYTES, k++) {
    size_t len = total - off < SEGMENT_BYTES ? total - off : SEGMENT_BYTES;
    if (pos > 0) {
      comm_req *r = NULL;
      bool is_recv = true;
      if (c->be->irecv(c, prev, g->tag, buf + off, len, &r, why, sizeof why)) goto failed;
      if (g->ctr) g->ctr->bytes_received += (int64_t)len;
      if (rt_comm_wait(c, what, &r, &prev, &is_recv, 1, NULL, err, errlen)) return -1;
    }
    if (pos < n - 1) {
      int slot = k % SEGMENTS_IN_FLIGHT;
      if (sends[slot] && rt_comm_wait(c, what, &sends[slot], &next, &recv[slot], 1, NULL, err, errlen)) return -1;
      if (c->be->isend(c, next, g->tag, buf + off, len, &sends[slot], why, sizeof why)) goto failed;
      if (g->ctr) g->ctr->bytes_sent += (int64_t)len;
    }
  }
  return rt_comm_wait(c, what, sends, peers, recv, SEGMENTS_IN_FLIGHT, NULL, err, errlen);
failed:
  c->broken = true;
  rt_comm_errf(err, errlen, "%s: %s", what, why);
  return -1;
}

static int p2p_recv(comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
  rt_comm *c = g->c;
  size_t bytes = (size_t)a->count * ir_dtype_size(a->dt);
  int from = group_world_rank(g, a->peer);
  comm_req *r = NULL;
  bool is_recv = true;
  char why[512];
  if (c->be->irecv(c, from, g->tag + 1, a->recv, bytes, &r, why, sizeof why)) {
    c->broken = true;
    rt_comm_errf(err, errlen, "%s: %s", g->desc, why);
    return -1;
  }
  if (g->ctr) g->ctr->bytes_received += (int64_t)bytes;
  return rt_comm_wait(c, g->desc, &r, &from, &is_recv, 1, NULL, err, errlen);
}

int rt_comm_ring_run(comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
  switch (a->kind) {
  case IR_COLL_ALL_REDUCE: return all_reduce(g, a, err, errlen);
  case IR_COLL_REDUCE_SCATTER: return reduce_scatter(g, a, err, errlen);
  case IR_COLL_ALL_GATHER: return all_gather(g, a, err, errlen);
  case IR_COLL_ALL_TO_ALL: return all_to_all(g, a, err, errlen);
  case IR_COLL_BROADCAST: return broadcast(g, a, err, errlen);
  case IR_COLL_SEND: {
    size_t bytes = (size_t)a->count * ir_dtype_size(a->dt);
    if (rt_comm_stage_send(g->c, group_world_rank(g, a->peer), g->tag + 1, a->send, bytes, err, errlen)) return -1;
    if (g->ctr) g->ctr->bytes_sent += (int64_t)bytes;
    return 0;
  }
  case IR_COLL_RECV: return p2p_recv(g, a, err, errlen);
  case IR_NUM_COLLS: break;
  }
  rt_comm_errf(err, errlen, "unknown collective %d", (int)a->kind);
  return -1;
}

/* Round k: a zero-byte message to rank + 2^k, one from rank - 2^k. After
 * ceil(log2 n) rounds every rank has heard, through some chain, from all. */
int rt_comm_ring_barrier(rt_comm *c, char *err, size_t errlen) {
  int n = c->size;
  for (int k = 0, d = 1; d < n; k++, d *= 2) {
    comm_req *reqs[2] = {NULL, NULL};
    int peers[2] = {(c->rank + d) % n, ((c->rank - d) % n + n) % n};
    bool recv[2] = {false, true};
    static const char zero = 0;
    char why[512];
    if (c->be->irecv(c, peers[1], TAG_BARRIER + k, NULL, 0, &reqs[1], why, sizeof why) ||
        c->be->isend(c, peers[0], TAG_BARRIER + k, &zero, 0, &reqs[0], why, sizeof why)) {
      c->broken = true;
      rt_comm_errf(err, errlen, "barrier: %s", why);
      return -1;
    }
    if (rt_comm_wait(c, "barrier", reqs, peers, recv, 2, NULL, err, errlen)) return -1;
  }
  return 0;
}
