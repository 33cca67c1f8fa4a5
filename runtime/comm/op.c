/* runtime/comm/op.c — one collective or message, checked and run.
 *
 * Every operation goes through one path (run_op): the test hooks, the
 * argument checks, the group of `axis` (its members' world ranks, ring
 * order = coordinate order, its tags, its counter), then
 *   - a group of one, or a send/recv to oneself: a copy (0 bytes counted);
 *   - a backend that runs whole operations (nccl): that, counted by the
 *     formulas of rt_comm_ring_bytes;
 *   - else the ring algorithms of ring.c over the backend's transport,
 *     counted as they post messages; buffers that overlap are staged
 *     first so the algorithms see either in-place all_reduce or disjoint
 *     buffers.
 * Sends are staged: the payload is copied into a spare buffer and posted;
 * the request completes later (rt_comm_progress tests them at every call,
 * rt_comm_drain waits for all of them before a mesh change and at close),
 * and its buffer goes back to the spares, so a steady loop allocates
 * nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

/* ---- one operation ---- */

static bool overlap(const void *a, size_t na, const void *b, size_t nb) {
  const char *x = a, *y = b;
  return na && nb && x < y + nb && y < x + na;
}

/* Buffer sizes in elements: what send and recv hold for kind on a group of n. */
static void buffer_counts(rt_coll_kind k, int n, int64_t count, int64_t *send, int64_t *recv) {
  *send = *recv = count;
  if (k == IR_COLL_ALL_GATHER) *recv = n * count;
  if (k == IR_COLL_REDUCE_SCATTER) *send = n * count;
  if (k == IR_COLL_ALL_TO_ALL) *send = *recv = n * count;
  if (k == IR_COLL_BROADCAST || k == IR_COLL_RECV) *send = 0;
  if (k == IR_COLL_SEND) *recv = 0;
}

static int check_args(const comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
  if ((unsigned)a->kind >= IR_NUM_COLLS) {
    rt_comm_errf(err, errlen, "unknown collective %d", (int)a->kind);
    return -1;
  }
  if ((unsigned)a->dt >= IR_NUM_DTYPES) {
    rt_comm_errf(err, errlen, "%s: unknown dtype %d", g->desc, (int)a->dt);
    return -1;
  }
  if ((a->kind == IR_COLL_ALL_REDUCE || a->kind == IR_COLL_REDUCE_SCATTER) && a->op != RT_REDUCE_SUM &&
      a->op != RT_REDUCE_MAX) {
    rt_comm_errf(err, errlen, "%s: unknown reduction %d", g->desc, (int)a->op);
    return -1;
  }
  int64_t limit = INT64_MAX / 8 / (g->n > 0 ? g->n : 1);
  if (a->count < 0 || a->count > limit) {
    rt_comm_errf(err, errlen, "%s: count %lld (expected 0 to %lld elements)", g->desc, (long long)a->count,
                 (long long)limit);
    return -1;
  }
  int64_t ns, nr;
  buffer_counts(a->kind, g->n, a->count, &ns, &nr);
  if ((ns && !a->send) || (nr && !a->recv)) {
    rt_comm_errf(err, errlen, "%s: a NULL %s buffer for %lld elements", g->desc, ns && !a->send ? "send" : "receive",
                 (long long)(ns && !a->send ? ns : nr));
    return -1;
  }
  bool p2p = a->kind == IR_COLL_SEND || a->kind == IR_COLL_RECV;
  if ((p2p || a->kind == IR_COLL_BROADCAST) && (a->peer < 0 || a->peer >= g->n)) {
    rt_comm_errf(err, errlen, "%s: %s coordinate %d does not exist (%d member%s: 0 to %d)", g->desc,
                 p2p ? "peer" : "root", a->peer, g->n, g->n == 1 ? "" : "s", g->n - 1);
    return -1;
  }
  return 0;
}


static int copy_alone(rt_comm *c, const rt_coll_args *a, char *err, size_t errlen) {
  size_t bytes = (size_t)a->count * ir_dtype_size(a->dt);
  switch (a->kind) {
  case IR_COLL_ALL_REDUCE:
  case IR_COLL_ALL_GATHER:
  case IR_COLL_REDUCE_SCATTER:
  case IR_COLL_ALL_TO_ALL: return comm_copy(c, a->recv, a->send, bytes, err, errlen);
  default: return 0;
  }
}

/* Prepares host buffers for the rings: in-place all_reduce, disjoint otherwise. */
static int ring_with_staging(comm_group *g, const rt_coll_args *in, char *err, size_t errlen) {
  rt_comm *c = g->c;
  rt_coll_args a = *in;
  size_t es = ir_dtype_size(a.dt), bytes = (size_t)a.count * es;
  int64_t ns, nr;
  buffer_counts(a.kind, g->n, a.count, &ns, &nr);
  switch (a.kind) {
  case IR_COLL_ALL_REDUCE: /* the rings run in place on recv */
    if (a.send != a.recv) memmove(a.recv, a.send, bytes);
    break;
  case IR_COLL_ALL_GATHER: /* only recv is read after this */
    memmove((char *)a.recv + (size_t)g->me * bytes, a.send, bytes);
    break;
  case IR_COLL_REDUCE_SCATTER:
  case IR_COLL_ALL_TO_ALL: {
    bool in_place = a.kind == IR_COLL_REDUCE_SCATTER && a.recv == (const char *)a.send + (size_t)g->me * bytes;
    if (!in_place && overlap(a.send, (size_t)ns * es, a.recv, (size_t)nr * es)) {
      void *s = rt_comm_scratch(c, 2, (size_t)ns * es);
      if (!s) {
        rt_comm_errf(err, errlen, "out of memory");
        return -1;
      }
      memcpy(s, a.send, (size_t)ns * es);
      a.send = s;
    }
    if (a.kind == IR_COLL_ALL_TO_ALL)
      memcpy((char *)a.recv + (size_t)g->me * bytes, (const char *)a.send + (size_t)g->me * bytes, bytes);
    break;
  }
  default: break;
  }
  return rt_comm_ring_run(g, &a, err, errlen);
}

int comm_run_group(rt_comm *c, comm_group *g, int axis, const rt_coll_args *a, char *err, size_t errlen) {
  if (check_args(g, a, err, errlen)) return -1;
  if (c->broken) {
    rt_comm_errf(err, errlen, "%s: the communicator is unusable after an earlier failure", g->desc);
    return -1;
  }
  if (g->ctr) g->ctr->calls++;
  if (c->pending && rt_comm_progress(c, err, errlen)) return -1;
  bool p2p = a->kind == IR_COLL_SEND || a->kind == IR_COLL_RECV;
  if (p2p && a->peer == g->me) return comm_loopback(c, g, a, err, errlen);
  if (g->n == 1) return copy_alone(c, a, err, errlen);
  if (c->be->run) {
    if (c->be->run(c, axis, a, err, errlen)) return -1;
    if (g->ctr) {
      rt_comm_counter b = rt_comm_ring_bytes(a->kind, g->n, g->me, a->peer, a->count, ir_dtype_size(a->dt));
      g->ctr->bytes_sent += b.bytes_sent;
      g->ctr->bytes_received += b.bytes_received;
    }
    return 0;
  }
  if (!c->be->isend) {
    rt_comm_errf(err, errlen, "%s: the %s implementation has no transport", g->desc, c->be->name);
    return -1;
  }
  return ring_with_staging(g, a, err, errlen);
}

/* The group of `axis` for kind k (axis -1: the world). */
static int axis_group(rt_comm *c, int axis, rt_coll_kind k, comm_group *g, char *err, size_t errlen) {
  memset(g, 0, sizeof *g);
  g->c = c;
  g->kind = k;
  if (axis == -1) {
    g->n = c->size, g->me = c->rank, g->base = 0, g->stride = 1, g->tag = TAG_WORLD;
    g->ctr = (unsigned)k < IR_NUM_COLLS ? &c->counts[k][c->n_axes] : NULL;
    snprintf(g->desc, sizeof g->desc, "%s over world", rt_coll_name(k));
    return 0;
  }
  if (axis < 0 || axis >= c->n_axes) {
    char list[160] = "";
    size_t used = 0;
    for (int j = 0; j < c->n_axes; j++) {
      int w = snprintf(list + used, sizeof list - used, "%s%s", j ? ", " : ": ", c->names[j]);
      if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
    }
    rt_comm_errf(err, errlen, "%s: no mesh axis %d (the mesh has %d ax%s%s; -1 is the world)", rt_coll_name(k), axis,
                 c->n_axes, c->n_axes == 1 ? "is" : "es", list);
    return -1;
  }
  g->n = c->sizes[axis], g->me = c->coords[axis], g->stride = c->strides[axis];
  g->base = c->rank - g->me * g->stride;
  g->tag = 2 * axis;
  g->ctr = (unsigned)k < IR_NUM_COLLS ? &c->counts[k][axis] : NULL;
  snprintf(g->desc, sizeof g->desc, "%s over %s", rt_coll_name(k), c->names[axis]);
  return 0;
}

static int run_op(rt_comm *c, int axis, const rt_coll_args *a, char *err, size_t errlen) {
  comm_fault_hook(c);
  comm_group g;
  if (axis_group(c, axis, a->kind, &g, err, errlen)) return -1;
  return comm_run_group(c, &g, axis, a, err, errlen);
}

int rt_comm_all_reduce(rt_comm *c, int axis, rt_reduce_op op, ir_dtype dt, const void *send, void *recv, int64_t count,
                       char *err, size_t errlen) {
  rt_coll_args a = {IR_COLL_ALL_REDUCE, op, dt, send, recv, count, 0};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_all_gather(rt_comm *c, int axis, ir_dtype dt, const void *send, void *recv, int64_t count, char *err,
                       size_t errlen) {
  rt_coll_args a = {IR_COLL_ALL_GATHER, RT_REDUCE_SUM, dt, send, recv, count, 0};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_reduce_scatter(rt_comm *c, int axis, rt_reduce_op op, ir_dtype dt, const void *send, void *recv,
                           int64_t count, char *err, size_t errlen) {
  rt_coll_args a = {IR_COLL_REDUCE_SCATTER, op, dt, send, recv, count, 0};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_all_to_all(rt_comm *c, int axis, ir_dtype dt, const void *send, void *recv, int64_t count, char *err,
                       size_t errlen) {
  rt_coll_args a = {IR_COLL_ALL_TO_ALL, RT_REDUCE_SUM, dt, send, recv, count, 0};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_broadcast(rt_comm *c, int axis, int root_coord, ir_dtype dt, void *buf, int64_t count, char *err,
                      size_t errlen) {
  rt_coll_args a = {IR_COLL_BROADCAST, RT_REDUCE_SUM, dt, NULL, buf, count, root_coord};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_send(rt_comm *c, int axis, int peer_coord, ir_dtype dt, const void *buf, int64_t count, char *err,
                 size_t errlen) {
  rt_coll_args a = {IR_COLL_SEND, RT_REDUCE_SUM, dt, buf, NULL, count, peer_coord};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_recv(rt_comm *c, int axis, int peer_coord, ir_dtype dt, void *buf, int64_t count, char *err,
                 size_t errlen) {
  rt_coll_args a = {IR_COLL_RECV, RT_REDUCE_SUM, dt, NULL, buf, count, peer_coord};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_barrier(rt_comm *c, char *err, size_t errlen) {
  comm_fault_hook(c);
  if (c->broken) {
    rt_comm_errf(err, errlen, "barrier: the communicator is unusable after an earlier failure");
    return -1;
  }
  if (c->pending && rt_comm_progress(c, err, errlen)) return -1;
  if (c->size == 1) return 0;
  if (c->be->barrier) return c->be->barrier(c, err, errlen);
  return rt_comm_ring_barrier(c, err, errlen);
}

/* ---- explicit groups and raw messages ---- */

int rt_comm_group_run(rt_comm *c, const rt_comm_group *eg, const rt_coll_args *a, char *err, size_t errlen) {
  if (!c || !eg || eg->n < 1 || eg->me < 0 || eg->me >= eg->n || !eg->world_ranks) {
    rt_comm_errf(err, errlen, "%s: a malformed group", eg && eg->label ? eg->label : "group");
    return -1;
  }
  for (int i = 0; i < eg->n; i++)
    if (eg->world_ranks[i] < 0 || eg->world_ranks[i] >= c->size) {
      rt_comm_errf(err, errlen, "%s: member %d is world rank %d, but the world has %d", eg->label ? eg->label : "group",
                   i, eg->world_ranks[i], c->size);
      return -1;
    }
  if (eg->n > 1 && (eg->tag < RT_COMM_TAG_USER || eg->tag + 1 > rt_comm_tag_limit(c))) {
    rt_comm_errf(err, errlen, "%s: tag %d is not the caller's (%d to %d)", eg->label ? eg->label : "group", eg->tag,
                 RT_COMM_TAG_USER, rt_comm_tag_limit(c) - 1);
    return -1;
  }
  if (!c->be->isend && !(eg->n == 1 && !c->be->copy)) {
    rt_comm_errf(err, errlen, "%s: explicit groups need the mpi implementation (or, of one member, local), not %s",
                 eg->label ? eg->label : "group", c->be->name);
    return -1;
  }
  comm_group g = {.c = c, .n = eg->n, .me = eg->me, .ranks = eg->world_ranks, .tag = eg->tag, .kind = a->kind,
                  .ctr = eg->counter};
  snprintf(g.desc, sizeof g.desc, "%s", eg->label ? eg->label : rt_coll_name(a->kind));
  return comm_run_group(c, &g, -1, a, err, errlen);
}

int rt_comm_raw_send(rt_comm *c, int to, int tag, const void *buf, size_t bytes, char *err, size_t errlen) {
  if (!c->be->isend || to < 0 || to >= c->size || tag < RT_COMM_TAG_USER || tag > rt_comm_tag_limit(c)) {
    rt_comm_errf(err, errlen, "raw send to rank %d on tag %d: not possible on the %s implementation of %d rank%s", to,
                 tag, c->be->name, c->size, c->size == 1 ? "" : "s");
    return -1;
  }
  if (c->pending && rt_comm_progress(c, err, errlen)) return -1;
  return rt_comm_stage_send(c, to, tag, buf, bytes, err, errlen);
}

int rt_comm_raw_recv(rt_comm *c, int from, int tag, void *buf, size_t bytes, int *source, char *err, size_t errlen) {
  if (!c->be->irecv || from < -1 || from >= c->size || tag < RT_COMM_TAG_USER || tag > rt_comm_tag_limit(c)) {
    rt_comm_errf(err, errlen, "raw receive from rank %d on tag %d: not possible on the %s implementation of %d rank%s",
                 from, tag, c->be->name, c->size, c->size == 1 ? "" : "s");
    return -1;
  }
  comm_req *r = NULL;
  char why[512];
  if (c->be->irecv(c, from, tag, buf, bytes, &r, why, sizeof why)) {
    c->broken = true;
    rt_comm_errf(err, errlen, "receive on tag %d: %s", tag, why);
    return -1;
  }
  bool recv = true;
  int got = -1;
  char what[64];
  snprintf(what, sizeof what, "a receive on tag %d", tag);
  if (rt_comm_wait(c, what, &r, &from, &recv, 1, &got, err, errlen)) return -1;
  if (source) *source = got;
  return 0;
}
