/* runtime/comm/nccl.c — the nccl implementation: collectives on device
 * buffers through the NCCL entries of the CUDA table (the real libnccl.so.2
 * loaded by runtime/cuda/loader.c, or cuda-emu's emulation).
 *
 * The bootstrap is another communicator: mpi under a launcher, else local
 * (world size 1). It gives the ranks, and carries the unique ids: one NCCL
 * communicator per mesh group of two or more (the world's at open, each
 * axis's at rt_comm_set_mesh), its id made by the group's coordinate-0 rank
 * and broadcast to the group over the bootstrap; NCCL rank = coordinate.
 * Groups of one are copies (comm.c).
 *
 * Streams. With overlap (the default; TGC_COMM_OVERLAP=0 turns it off)
 * every operation runs on the communicator's own stream (non-blocking),
 * after an event recorded on the options' stream (the device's work so
 * far). Outside a batch the call then waits for that stream on the host
 * (cuStreamSynchronize), so results are there as with the other
 * implementations. Inside a batch (rt_comm_batch_begin/end: the gradient
 * all-reduces or reduce-scatters of one bucket, issued where the backward
 * made them) the calls are one ncclGroupStart/End and return at once;
 * batch_end records a `done` event on the comm stream, and the batch's
 * buffers are in flight until a join makes the options' stream wait on
 * it: the device's kernels go on meanwhile (DDP's overlap). The comm
 * stream is in order, so joining a batch also joins every earlier one.
 * A group's operations are not ordered among themselves, so the executor
 * starts a new batch for an operation on another communicator or on bytes
 * the open batch uses (rt_comm_batch_touches).
 * Without overlap each operation is issued on the options' stream and
 * waited for, and batches are nothing.
 *
 *   all_reduce, all_gather, reduce_scatter, broadcast   the NCCL calls
 *     (broadcast in place); bool is uint8 with max for both reductions
 *   all_to_all   grouped ncclSend/ncclRecv to every other member, plus a
 *     device copy of the own block
 *   send         a device copy into a staging buffer (then buf may be
 *     reused), ncclSend from it on a stream of its own, so a send never
 *     waits for its receiver; staging buffers are recycled after the send
 *     stream is synchronized, which happens when 16 are in flight, at a
 *     mesh change and at close
 *   recv         ncclRecv on the stream, waited for
 * Counters are the formulas of rt_comm_ring_bytes (NCCL's ring), added by
 * comm.c. Timeouts: the emulation's waits are the MPI transport's; a real
 * NCCL call that never completes is not timed out here (cuStreamSynchronize
 * blocks). Not run on a GPU yet (docs/comm.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "cuda_api.h"

#define STAGED_IN_FLIGHT 16

typedef struct {
  cg_cu_deviceptr ptr;
  size_t bytes;
} dev_buf;

/* a batch in flight: its done event and its buffers' bytes */
typedef struct {
  cg_cu_event done;
  int first, n; /* ranges[first .. first + n) */
} flight;

typedef struct {
  uintptr_t lo, hi;
} byte_range;

typedef struct {
  const cg_cuda_api *api;
  cg_cu_stream stream, send_stream;
  cg_cu_stream comm_stream;         /* overlap: the operations' own stream; NULL: off */
  cg_cu_event ready;                /* recorded on stream before each operation or batch */
  bool batch_open;
  flight *flights;                  /* in flight, oldest first; the last one open while batch_open */
  int n_flights, cap_flights;
  byte_range *ranges;
  int n_ranges, cap_ranges;
  cg_cu_event *spare;               /* done events to record again */
  int n_spare, cap_spare;
  rt_comm *boot;
  cg_nccl_comm world, axes[RT_COMM_MAX_AXES];
  dev_buf free_bufs[STAGED_IN_FLIGHT], busy_bufs[STAGED_IN_FLIGHT];
  int n_free, n_busy;
} nccl_state;

static const char *result_name(cg_nccl_result r) {
  static const char *const names[] = {"ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError",
                                      "ncclInternalError",   "ncclInvalidArgument",    "ncclInvalidUsage",
                                      "ncclRemoteError",     "ncclInProgress"};
  return r < sizeof names / sizeof names[0] ? names[r] : "ncclResult?";
}

/* "CALL: NAME (STRING) [CONTEXT]: DETAIL", like the CUDA checks */
static int nccl_check(const cg_cuda_api *api, cg_nccl_result r, const char *call, const char *ctx, char *err,
                      size_t errlen) {
  if (r == CG_ncclSuccess) return 0;
  const char *s = api->ncclGetErrorString ? api->ncclGetErrorString(r) : NULL;
  const char *detail = api->emu_detail ? api->emu_detail() : NULL;
  rt_comm_errf(err, errlen, "%s: %s (%s)%s%s%s%s%s", call, result_name(r), s ? s : "?", ctx ? " [" : "",
               ctx ? ctx : "", ctx ? "]" : "", detail && *detail ? ": " : "", detail && *detail ? detail : "");
  return -1;
}
#define NCCL(st, ctx, err, errlen, fn, ...) nccl_check((st)->api, (st)->api->fn(__VA_ARGS__), #fn, (ctx), (err), (errlen))

static cg_cu_deviceptr dptr(const void *p) { return (cg_cu_deviceptr)(uintptr_t)p; }

static bool nccl_type(ir_dtype dt, rt_reduce_op op, cg_nccl_data_type *t, cg_nccl_red_op *o) {
  *o = op == RT_REDUCE_MAX ? CG_ncclMax : CG_ncclSum;
  switch (dt) {
  case IR_DT_F64: *t = CG_ncclFloat64; return true;
  case IR_DT_F32: *t = CG_ncclFloat32; return true;
  case IR_DT_BF16: *t = CG_ncclBfloat16; return true;
  case IR_DT_F16: *t = CG_ncclFloat16; return true;
  case IR_DT_I32: *t = CG_ncclInt32; return true;
  case IR_DT_I64: *t = CG_ncclInt64; return true;
  case IR_DT_BOOL: *t = CG_ncclUint8, *o = CG_ncclMax; return true; /* or = max on 0 and 1 */
  default: return false;
  }
}

/* The NCCL communicator of the group of `axis` (-1: the world), made by
 * its coordinate-0 rank's id broadcast over the bootstrap. NULL for a
 * group of one. */
static int make_comm(rt_comm *c, int axis, cg_nccl_comm *out, char *err, size_t errlen) {
  nccl_state *st = c->impl;
  *out = NULL;
  int n = rt_comm_axis_size(c, axis), coord = rt_comm_coord(c, axis);
  if (n < 2) return 0;
  cg_nccl_unique_id id;
  memset(&id, 0, sizeof id);
  char ctx[64];
  snprintf(ctx, sizeof ctx, "the communicator of %s", rt_comm_axis_name(c, axis));
  if (coord == 0 && NCCL(st, ctx, err, errlen, ncclGetUniqueId, &id)) return -1;
  _Static_assert(sizeof id % 8 == 0, "the id moves as int64 elements");
  if (rt_comm_broadcast(st->boot, axis, 0, IR_DT_I64, &id, (int64_t)(sizeof id / 8), err, errlen)) return -1;
  return NCCL(st, ctx, err, errlen, ncclCommInitRank, out, n, id, coord);
}

static void destroy_axes(nccl_state *st) {
  for (int k = 0; k < RT_COMM_MAX_AXES; k++)
    if (st->axes[k]) {
      st->api->ncclCommDestroy(st->axes[k]);
      st->axes[k] = NULL;
    }
}

/* Waits for the staged sends and recycles their buffers. */
static int settle_sends(nccl_state *st, char *err, size_t errlen) {
  if (!st->n_busy) return 0;
  if (CG_CU(st->api, "staged sends", err, errlen, cuStreamSynchronize, st->send_stream)) return -1;
  for (int i = 0; i < st->n_busy; i++) {
    if (st->n_free < STAGED_IN_FLIGHT) st->free_bufs[st->n_free++] = st->busy_bufs[i];
    else st->api->cuMemFree(st->busy_bufs[i].ptr);
  }
  st->n_busy = 0;
  return 0;
}

static int staging_buffer(nccl_state *st, size_t bytes, dev_buf *out, char *err, size_t errlen) {
  if (st->n_busy == STAGED_IN_FLIGHT && settle_sends(st, err, errlen)) return -1;
  int best = -1;
  for (int i = 0; i < st->n_free; i++)
    if (st->free_bufs[i].bytes >= bytes && (best < 0 || st->free_bufs[i].bytes < st->free_bufs[best].bytes)) best = i;
  if (best >= 0) {
    *out = st->free_bufs[best];
    st->free_bufs[best] = st->free_bufs[--st->n_free];
  } else {
    out->bytes = bytes < 256 ? 256 : bytes;
    if (CG_CU(st->api, "a staging buffer for send", err, errlen, cuMemAlloc, &out->ptr, out->bytes)) return -1;
  }
  st->busy_bufs[st->n_busy++] = *out;
  return 0;
}

bool rt_nccl_buffers_legal(ir_coll kind, const void *send, const void *recv, size_t bytes, size_t n, size_t me) {
  uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
  size_t sb = bytes, rb = bytes; /* the ranges each call reads and writes */
  uintptr_t in_place = s;        /* where send must be for NCCL's in-place form */
  switch (kind) {
  case IR_COLL_ALL_GATHER: rb = n * bytes, in_place = r + me * bytes; break;
  case IR_COLL_REDUCE_SCATTER: sb = n * bytes, in_place = r >= me * bytes ? r - me * bytes : (uintptr_t)-1; break;
  case IR_COLL_ALL_REDUCE:
  case IR_COLL_BROADCAST: in_place = r; break;
  default: return true; /* all-to-all checks its own; send and recv use one buffer each */
  }
  bool overlap = sb && rb && s < r + rb && r < s + sb;
  return !overlap || s == in_place;
}

/* ---- overlap: the comm stream, batches in flight, joins ---- */

/* the comm stream waits for the device's work issued so far */
static int after_device(nccl_state *st, const char *ctx, char *err, size_t errlen) {
  return CG_CU(st->api, ctx, err, errlen, cuEventRecord, st->ready, st->stream) ||
         CG_CU(st->api, ctx, err, errlen, cuStreamWaitEvent, st->comm_stream, st->ready, 0u);
}

static void *grow(void *p, int *cap, int need, size_t elem) {
  if (need <= *cap) return p;
  int n = *cap ? 2 * *cap : 16;
  while (n < need) n *= 2;
  void *q = realloc(p, (size_t)n * elem);
  if (q) *cap = n;
  return q;
}

/* flights [0, k) joined (done, or waited on): their events to the spares */
static void drop_flights(nccl_state *st, int k) {
  if (k <= 0) return;
  for (int i = 0; i < k; i++)
    if (st->flights[i].done) st->spare[st->n_spare++] = st->flights[i].done; /* spare has room: see batch_end */
  int keep_from = k < st->n_flights ? st->flights[k].first : st->n_ranges;
  if (st->n_ranges > keep_from)
    memmove(st->ranges, st->ranges + keep_from, (size_t)(st->n_ranges - keep_from) * sizeof *st->ranges);
  st->n_ranges -= keep_from;
  if (st->n_flights > k) memmove(st->flights, st->flights + k, (size_t)(st->n_flights - k) * sizeof *st->flights);
  st->n_flights -= k;
  for (int i = 0; i < st->n_flights; i++) st->flights[i].first -= keep_from;
}

static bool nccl_overlaps(const rt_comm *c) { return ((const nccl_state *)c->impl)->comm_stream != NULL; }

static int nccl_in_flight(const rt_comm *c) {
  const nccl_state *st = c->impl;
  return st->n_flights - (st->batch_open ? 1 : 0);
}

static bool nccl_batch_touches(const rt_comm *c, const void *p, size_t bytes) {
  const nccl_state *st = c->impl;
  if (!st->batch_open) return false;
  const flight *f = &st->flights[st->n_flights - 1];
  uintptr_t lo = (uintptr_t)p, hi = lo + (bytes ? bytes : 1);
  for (int j = f->first; j < f->first + f->n; j++)
    if (st->ranges[j].lo < hi && lo < st->ranges[j].hi) return true;
  return false;
}

static int nccl_batch_begin(rt_comm *c, char *err, size_t errlen) {
  nccl_state *st = c->impl;
  if (!st->comm_stream) return 0;
  if (st->batch_open) {
    rt_comm_errf(err, errlen, "internal error: a batch of collectives inside another");
    return -1;
  }
  if (!(st->flights = grow(st->flights, &st->cap_flights, st->n_flights + 1, sizeof *st->flights))) {
    rt_comm_errf(err, errlen, "out of memory");
    return -1;
  }
  if (after_device(st, "a batch of collectives", err, errlen) || NCCL(st, NULL, err, errlen, ncclGroupStart)) return -1;
  st->flights[st->n_flights++] = (flight){NULL, st->n_ranges, 0};
  st->batch_open = true;
  return 0;
}

static int nccl_batch_end(rt_comm *c, char *err, size_t errlen) {
  nccl_state *st = c->impl;
  if (!st->batch_open) return 0;
  st->batch_open = false;
  flight *f = &st->flights[st->n_flights - 1];
  if (NCCL(st, "a batch of collectives", err, errlen, ncclGroupEnd)) return -1;
  if (!f->n) { /* nothing was issued */
    st->n_flights--;
    return 0;
  }
  c->overlap.batches++;
  if (!(st->spare = grow(st->spare, &st->cap_spare, st->n_flights + st->n_spare + 1, sizeof *st->spare))) {
    rt_comm_errf(err, errlen, "out of memory");
    return -1;
  }
  if (st->n_spare) f->done = st->spare[--st->n_spare];
  else if (CG_CU(st->api, "a batch's event", err, errlen, cuEventCreate, &f->done, CG_CU_EVENT_DISABLE_TIMING))
    return -1;
  return CG_CU(st->api, "a batch of collectives", err, errlen, cuEventRecord, f->done, st->comm_stream);
}

static int nccl_join(rt_comm *c, const void *p, size_t bytes, char *err, size_t errlen) {
  nccl_state *st = c->impl;
  uintptr_t lo = (uintptr_t)p, hi = lo + (bytes ? bytes : 1);
  int last = -1; /* the newest closed batch using these bytes */
  for (int i = 0; i < st->n_flights; i++) {
    const flight *f = &st->flights[i];
    if (!f->done) continue;
    for (int j = f->first; j < f->first + f->n && last < i; j++)
      if (st->ranges[j].lo < hi && lo < st->ranges[j].hi) last = i;
  }
  if (last < 0) return 0;
  if (CG_CU(st->api, "waiting for a batch of collectives", err, errlen, cuStreamWaitEvent, st->stream,
            st->flights[last].done, 0u))
    return -1;
  drop_flights(st, last + 1); /* the comm stream is in order: the earlier ones are done before it */
  c->overlap.early_joins++;
  return 0;
}

static int nccl_join_all(rt_comm *c, char *err, size_t errlen) {
  nccl_state *st = c->impl;
  int closed = st->n_flights - (st->batch_open ? 1 : 0);
  if (closed <= 0) return 0;
  if (CG_CU(st->api, "waiting for the collectives", err, errlen, cuStreamWaitEvent, st->stream,
            st->flights[closed - 1].done, 0u))
    return -1;
  drop_flights(st, closed);
  return 0;
}

/* buffer [p, p + bytes) in the open batch's flight */
static int add_range(nccl_state *st, const void *p, size_t bytes, char *err, size_t errlen) {
  if (!bytes) return 0;
  if (!(st->ranges = grow(st->ranges, &st->cap_ranges, st->n_ranges + 1, sizeof *st->ranges))) {
    rt_comm_errf(err, errlen, "out of memory");
    return -1;
  }
  st->ranges[st->n_ranges++] = (byte_range){(uintptr_t)p, (uintptr_t)p + bytes};
  st->flights[st->n_flights - 1].n++;
  return 0;
}

static int nccl_run(rt_comm *c, int axis, const rt_coll_args *a, char *err, size_t errlen) {
  nccl_state *st = c->impl;
  const cg_cuda_api *api = st->api;
  cg_nccl_comm comm = axis < 0 ? st->world : st->axes[axis];
  char ctx[64];
  snprintf(ctx, sizeof ctx, "%s over %s", rt_coll_name(a->kind), rt_comm_axis_name(c, axis));
  cg_nccl_data_type t;
  cg_nccl_red_op op;
  if (!comm || !nccl_type(a->dt, a->op, &t, &op)) {
    rt_comm_errf(err, errlen, "%s: no NCCL communicator or type for it", ctx);
    return -1;
  }
  size_t n = (size_t)rt_comm_axis_size(c, axis), me = (size_t)rt_comm_coord(c, axis);
  size_t count = (size_t)a->count, bytes = count * ir_dtype_size(a->dt);
  if (!rt_nccl_buffers_legal(a->kind, a->send, a->recv, bytes, n, me)) {
    rt_comm_errf(err, errlen,
                 "%s: send %p and recv %p overlap other than in NCCL's in-place form (internal error: the memory "
                 "plan keeps a collective's buffers apart)", ctx, a->send, (void *)a->recv);
    return -1;
  }
  int rc = 0;
  cg_cu_stream on = st->comm_stream ? st->comm_stream : st->stream;
  if (st->batch_open) { /* in flight until a join: whole-buffer operations only */
    bool whole = a->kind == IR_COLL_ALL_REDUCE || a->kind == IR_COLL_ALL_GATHER || a->kind == IR_COLL_REDUCE_SCATTER;
    size_t sb = a->kind == IR_COLL_REDUCE_SCATTER ? n * bytes : bytes, rb = a->kind == IR_COLL_ALL_GATHER ? n * bytes : bytes;
    if (!whole) {
      rt_comm_errf(err, errlen, "internal error: %s in a batch of collectives", ctx);
      return -1;
    }
    if (add_range(st, a->send, sb, err, errlen) || add_range(st, a->recv, rb, err, errlen)) return -1;
    c->overlap.collectives++;
  } else if (st->comm_stream && after_device(st, ctx, err, errlen))
    return -1;
  switch (a->kind) {
  case IR_COLL_ALL_REDUCE: rc = NCCL(st, ctx, err, errlen, ncclAllReduce, a->send, a->recv, count, t, op, comm, on); break;
  case IR_COLL_ALL_GATHER: rc = NCCL(st, ctx, err, errlen, ncclAllGather, a->send, a->recv, count, t, comm, on); break;
  case IR_COLL_REDUCE_SCATTER:
    rc = NCCL(st, ctx, err, errlen, ncclReduceScatter, a->send, a->recv, count, t, op, comm, on);
    break;
  case IR_COLL_BROADCAST:
    rc = NCCL(st, ctx, err, errlen, ncclBroadcast, a->recv, a->recv, count, t, a->peer, comm, on);
    break;
  case IR_COLL_ALL_TO_ALL: {
    const char *send = a->send;
    char *recv = a->recv;
    if (send < recv + n * bytes && recv < send + n * bytes && bytes) {
      rt_comm_errf(err, errlen, "%s: send and recv overlap (the nccl implementation needs them apart)", ctx);
      return -1;
    }
    if (NCCL(st, ctx, err, errlen, ncclGroupStart)) return -1;
    for (size_t j = 0; j < n && !rc; j++)
      if (j != me)
        rc = NCCL(st, ctx, err, errlen, ncclSend, send + j * bytes, count, t, (int)j, comm, on) ||
             NCCL(st, ctx, err, errlen, ncclRecv, recv + j * bytes, count, t, (int)j, comm, on);
    if (NCCL(st, ctx, err, errlen, ncclGroupEnd) && !rc) rc = -1;
    if (!rc && bytes)
      rc = CG_CU(api, ctx, err, errlen, cuMemcpyDtoDAsync, dptr(recv + me * bytes), dptr(send + me * bytes), bytes, on);
    break;
  }
  case IR_COLL_SEND: {
    dev_buf b = {0, 0};
    if (staging_buffer(st, bytes, &b, err, errlen)) return -1;
    if (bytes && (CG_CU(api, ctx, err, errlen, cuMemcpyDtoDAsync, b.ptr, dptr(a->send), bytes, st->stream) ||
                  CG_CU(api, ctx, err, errlen, cuStreamSynchronize, st->stream)))
      return -1;
    return NCCL(st, ctx, err, errlen, ncclSend, (const void *)(uintptr_t)b.ptr, count, t, a->peer, comm,
                st->send_stream);
  }
  case IR_COLL_RECV: rc = NCCL(st, ctx, err, errlen, ncclRecv, a->recv, count, t, a->peer, comm, on); break;
  case IR_NUM_COLLS: rc = -1; break;
  }
  if (rc) return -1;
  if (st->batch_open) return 0;
  if (CG_CU(api, ctx, err, errlen, cuStreamSynchronize, on)) return -1;
  if (st->comm_stream) drop_flights(st, st->n_flights); /* the comm stream is idle: every batch is done */
  return 0;
}

static int nccl_copy(rt_comm *c, void *dst, const void *src, size_t bytes, char *err, size_t errlen) {
  nccl_state *st = c->impl;
  return CG_CU(st->api, "a copy in a group of one", err, errlen, cuMemcpyDtoDAsync, dptr(dst), dptr(src), bytes,
               st->stream) ||
                 CG_CU(st->api, "a copy in a group of one", err, errlen, cuStreamSynchronize, st->stream)
             ? -1
             : 0;
}

static int nccl_mesh_changed(rt_comm *c, char *err, size_t errlen) {
  nccl_state *st = c->impl;
  if (settle_sends(st, err, errlen)) return -1;
  destroy_axes(st);
  const char *names[RT_COMM_MAX_AXES];
  for (int k = 0; k < c->n_axes; k++) names[k] = c->names[k];
  if (rt_comm_set_mesh(st->boot, c->n_axes, names, c->sizes, err, errlen)) return -1;
  for (int k = 0; k < c->n_axes; k++)
    if (make_comm(c, k, &st->axes[k], err, errlen)) return -1;
  return 0;
}

static int nccl_barrier(rt_comm *c, char *err, size_t errlen) {
  nccl_state *st = c->impl;
  if (nccl_batch_end(c, err, errlen) || nccl_join_all(c, err, errlen) ||
      CG_CU(st->api, "barrier", err, errlen, cuStreamSynchronize, st->stream))
    return -1;
  return rt_comm_barrier(st->boot, err, errlen);
}

static void nccl_close(rt_comm *c, bool broken) {
  nccl_state *st = c->impl;
  char err[256];
  if (!broken) {
    settle_sends(st, err, sizeof err);
    if (st->batch_open) st->api->ncclGroupEnd();
    if (st->comm_stream) st->api->cuStreamSynchronize(st->comm_stream);
    destroy_axes(st);
    if (st->world) st->api->ncclCommDestroy(st->world);
    for (int i = 0; i < st->n_free; i++) st->api->cuMemFree(st->free_bufs[i].ptr);
    if (st->send_stream) st->api->cuStreamDestroy(st->send_stream);
    if (st->comm_stream) st->api->cuStreamDestroy(st->comm_stream);
    for (int i = 0; i < st->n_flights; i++)
      if (st->flights[i].done) st->api->cuEventDestroy(st->flights[i].done);
    for (int i = 0; i < st->n_spare; i++) st->api->cuEventDestroy(st->spare[i]);
    if (st->ready) st->api->cuEventDestroy(st->ready);
  }
  free(st->flights);
  free(st->ranges);
  free(st->spare);
  rt_comm_close(st->boot);
  free(st);
}

static _Noreturn void nccl_abort(rt_comm *c) {
  nccl_state *st = c->impl;
  if (st && st->boot && st->boot->be->abort) st->boot->be->abort(st->boot);
  exit(1);
}

int rt_comm_nccl_open(rt_comm *c, const rt_comm_options *o, char *err, size_t errlen) {
  const cg_cuda_api *api = o->cuda;
  if (!api || !(api->libs & CG_CUDA_LIB_NCCL) || !(api->libs & CG_CUDA_LIB_DRIVER)) {
    rt_comm_errf(err, errlen,
                 "the nccl implementation needs a CUDA table with NCCL loaded (rt_cuda_load with CG_CUDA_LIB_NCCL, or "
                 "the cuda-emu backend)");
    return -1;
  }
  int version = 0;
  if (nccl_check(api, api->ncclGetVersion(&version), "ncclGetVersion", NULL, err, errlen)) return -1;
  if (version < 21000) {
    rt_comm_errf(err, errlen, "NCCL %d.%d.%d is too old: tgc needs NCCL 2.10 or newer (bf16 reductions)",
                 version / 10000, version / 100 % 100, version % 100);
    return -1;
  }
  nccl_state *st = calloc(1, sizeof *st);
  if (!st) {
    rt_comm_errf(err, errlen, "out of memory");
    return -1;
  }
  st->api = api;
  st->stream = o->cuda_stream;
  rt_comm_options boot = {.impl = rt_comm_under_launcher() ? "mpi" : "local", .timeout_s = o->timeout_s};
  st->boot = rt_comm_open(&boot, err, errlen);
  if (!st->boot) {
    free(st);
    return -1;
  }
  st->boot->fault_kind = 0; /* the test hooks count the nccl communicator's calls, not its bootstrap's */
  c->impl = st;
  c->rank = rt_comm_rank(st->boot);
  c->size = rt_comm_size(st->boot);
  const char *overlap = getenv("TGC_COMM_OVERLAP");
  bool want_overlap = !(overlap && strcmp(overlap, "0") == 0);
  if (CG_CU(api, "the send stream", err, errlen, cuStreamCreate, &st->send_stream, CG_CU_STREAM_NON_BLOCKING) ||
      (want_overlap &&
       (CG_CU(api, "the collectives' stream", err, errlen, cuStreamCreate, &st->comm_stream, CG_CU_STREAM_NON_BLOCKING) ||
        CG_CU(api, "the collectives' stream", err, errlen, cuEventCreate, &st->ready, CG_CU_EVENT_DISABLE_TIMING))) ||
      make_comm(c, -1, &st->world, err, errlen)) {
    nccl_close(c, false);
    c->impl = NULL;
    return -1;
  }
  return 0;
}

static int nccl_tag_limit(const rt_comm *c) { return RT_COMM_TAG_USER - 1; }

const comm_backend rt_comm_nccl_backend = {
    .name = "nccl",
    .run = nccl_run,
    .copy = nccl_copy,
    .mesh_changed = nccl_mesh_changed,
    .overlaps = nccl_overlaps,
    .batch_begin = nccl_batch_begin,
    .batch_end = nccl_batch_end,
    .join = nccl_join,
    .join_all = nccl_join_all,
    .in_flight = nccl_in_flight,
    .batch_touches = nccl_batch_touches,
    .barrier = nccl_barrier,
    .tag_limit = nccl_tag_limit,
    .close = nccl_close,
    .abort = nccl_abort,
};
