/* runtime/comm/nccl.c — the nccl implementation: collectives on device
 * buffers through the NCCL entries of the CUDA table (the real libnccl.so.2
 * loaded by runtime/cuda/loader.c, or cuda-emu's emulation).
 *
 * The bootstrap is another communicator: mpi under a launcher, else local
 * (world size 1). It gives the ranks, and carries the unique ids: one NCCL
 * communicator per mesh group of two or more (the world's at open, each
 * axis's at rt_comm_set_mesh), its id made by the group's coordinate-0 rank
 * and broadcast to the group over the bootstrap; NCCL rank = coordinate.
 * Groups of one are copies (comm.c). Each operation is issued on the
 * options' stream and waited for (cuStreamSynchronize) before the call
 * returns, so results are there as with the other implementations.
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

typedef struct {
  const cg_cuda_api *api;
  cg_cu_stream stream, send_stream;
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
  switch (a->kind) {
  case IR_COLL_ALL_REDUCE: rc = NCCL(st, ctx, err, errlen, ncclAllReduce, a->send, a->recv, count, t, op, comm, st->stream); break;
  case IR_COLL_ALL_GATHER: rc = NCCL(st, ctx, err, errlen, ncclAllGather, a->send, a->recv, count, t, comm, st->stream); break;
  case IR_COLL_REDUCE_SCATTER:
    rc = NCCL(st, ctx, err, errlen, ncclReduceScatter, a->send, a->recv, count, t, op, comm, st->stream);
    break;
  case IR_COLL_BROADCAST:
    rc = NCCL(st, ctx, err, errlen, ncclBroadcast, a->recv, a->recv, count, t, a->peer, comm, st->stream);
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
        rc = NCCL(st, ctx, err, errlen, ncclSend, send + j * bytes, count, t, (int)j, comm, st->stream) ||
             NCCL(st, ctx, err, errlen, ncclRecv, recv + j * bytes, count, t, (int)j, comm, st->stream);
    if (NCCL(st, ctx, err, errlen, ncclGroupEnd) && !rc) rc = -1;
    if (!rc && bytes)
      rc = CG_CU(api, ctx, err, errlen, cuMemcpyDtoDAsync, dptr(recv + me * bytes), dptr(send + me * bytes), bytes,
                 st->stream);
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
  case IR_COLL_RECV: rc = NCCL(st, ctx, err, errlen, ncclRecv, a->recv, count, t, a->peer, comm, st->stream); break;
  case IR_NUM_COLLS: rc = -1; break;
  }
  if (rc) return -1;
  return CG_CU(api, ctx, err, errlen, cuStreamSynchronize, st->stream);
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
  if (CG_CU(st->api, "barrier", err, errlen, cuStreamSynchronize, st->stream)) return -1;
  return rt_comm_barrier(st->boot, err, errlen);
}

static void nccl_close(rt_comm *c, bool broken) {
  nccl_state *st = c->impl;
  char err[256];
  if (!broken) {
    settle_sends(st, err, sizeof err);
    destroy_axes(st);
    if (st->world) st->api->ncclCommDestroy(st->world);
    for (int i = 0; i < st->n_free; i++) st->api->cuMemFree(st->free_bufs[i].ptr);
    if (st->send_stream) st->api->cuStreamDestroy(st->send_stream);
  }
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
  if (CG_CU(api, "the send stream", err, errlen, cuStreamCreate, &st->send_stream, CG_CU_STREAM_NON_BLOCKING) ||
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
    .barrier = nccl_barrier,
    .tag_limit = nccl_tag_limit,
    .close = nccl_close,
    .abort = nccl_abort,
};
