/* runtime/cuda_emu/nccl.c — the NCCL entries of the emulated table, run on
 * the CPU over tgc's MPI transport (runtime/comm), so code written against
 * NCCL (runtime/comm/nccl.c) runs in tests with no GPU.
 *
 * A unique id carries what the emulation needs: a magic, the world rank of
 * the process that made it and that process's serial number. The pair
 * names the communicator's message tags (three of its own, from
 * RT_COMM_TAG_USER: collectives, send/recv, bootstrap), and
 * ncclCommInitRank bootstraps like NCCL does: each member tells the id's
 * maker its rank and world rank (the maker must be a member), and the
 * maker sends every member the table of world ranks. Operations are
 * rt_comm_group_run on that table (the same ring algorithms and
 * reductions as tgc's MPI collectives, on the emulated device memory,
 * which is host memory at its own addresses), with the MPI communicator's
 * timeout. On the legacy stream or a blocking one an operation is complete
 * when its call returns; ncclSend returns at once (the message is staged)
 * and ncclRecv waits, so a group's order does not matter. Inside
 * ncclGroupStart/End operations are queued and run at the end, sends
 * first. One thread uses the emulated NCCL at a time.
 *
 * In flight: on a stream created CU_STREAM_NON_BLOCKING (nothing orders it
 * with the others unless an event does) a collective, or a group of them
 * at ncclGroupEnd, is deferred as a GPU may run it late (a send or receive
 * runs at once). It runs when something orders later work after it
 * (rt_emu_nccl_force, from the driver): cuStreamSynchronize of its
 * stream, cuCtxSynchronize, cuEventSynchronize or cuStreamWaitEvent of an
 * event recorded on its stream after it, other work on its stream, the
 * stream's destruction; a group's collectives then run last to first
 * (NCCL promises no order among them). Until then its buffers are in
 * flight: a launch (any parameter pointing into them), copy, memset or
 * product on another stream that touches them fails (rt_emu_nccl_touch,
 * CUDA_ERROR_ILLEGAL_STATE naming both), and a reader the check cannot
 * see reads the bytes from before the operation, as a GPU's race could.
 * This is what tests the comm layer's overlap of collectives with the
 * backward (runtime/comm/nccl.c).
 *
 * Types: every ncclDataType_t moves; reductions in float16, bfloat16,
 * float32, float64, int32 and int64 (and uint32/uint64 sums, the same bits
 * as the signed ones); uint8 max only on 0 and 1 (tgc's bool). Anything
 * else is ncclInvalidArgument "not emulated", never a wrong answer.
 * Communicators of one member need no MPI. What the rings moved is counted
 * in rt_cuda_emu_counters (nccl_calls, nccl_bytes_sent/received). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "emu_internal.h"

/* the NCCL version the emulated API follows (nccl.h 2.28.9's prototypes) */
#define EMU_NCCL_VERSION 22809
#define ID_MAGIC "tgc-emu-nccl-1"
#define SERIALS 4096

typedef struct {
  char magic[16];
  int32_t creator;  /* world rank of the process that made it */
  int32_t serial;   /* its count of ids made before */
} emu_id;
_Static_assert(sizeof(emu_id) <= sizeof(cg_nccl_unique_id), "the emulated id fits ncclUniqueId");

struct ncclComm {
  int n, rank;
  int *world_ranks;
  int tag;
  rt_comm *transport;   /* NULL when n == 1 */
};

static int ids_made;

/* operations queued between ncclGroupStart and ncclGroupEnd */
typedef struct {
  struct ncclComm *comm;
  rt_coll_args a;
  const char *call;
  cg_cu_stream stream;
  uint64_t lo[2], hi[2];  /* the bytes it reads and writes (send, recv) */
} queued_op;
static struct {
  int depth;
  queued_op *ops;
  int n, cap;
} group;

/* operations deferred on non-blocking streams, oldest first: each an
 * operation or a group (ops[first .. first + n)) with its sequence number */
typedef struct {
  cg_cu_stream stream;
  long seq;
  int first, n;
} deferred;
static struct {
  deferred *d;
  int n, cap;
  queued_op *ops;
  int n_ops, cap_ops;
  long seq;
} flight;

static const char *const result_strings[] = {
    "no error",
    "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    "unhandled system error (run with NCCL_DEBUG=INFO for details)",
    "internal error - please report this issue to the NCCL developers",
    "invalid argument (run with NCCL_DEBUG=WARN for details)",
    "invalid usage (run with NCCL_DEBUG=WARN for details)",
    "remote process exited or there was a network error",
    "NCCL operation in progress",
};

#define fail(r, ...) ((cg_nccl_result)rt_emu_fail((r), __VA_ARGS__))

const char *rt_emu_ncclGetErrorString(cg_nccl_result result) {
  return result < sizeof result_strings / sizeof result_strings[0] ? result_strings[result] : "unknown result";
}

cg_nccl_result rt_emu_ncclGetVersion(int *version) {
  rt_emu_enter();
  if (!version) return fail(CG_ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = EMU_NCCL_VERSION;
  return CG_ncclSuccess;
}

cg_nccl_result rt_emu_ncclGetUniqueId(cg_nccl_unique_id *id) {
  rt_emu_enter();
  if (!id) return fail(CG_ncclInvalidArgument, "ncclGetUniqueId: id is NULL");
  rt_comm *c = rt_comm_process_mpi();
  emu_id e;
  memset(&e, 0, sizeof e);
  memcpy(e.magic, ID_MAGIC, sizeof ID_MAGIC);
  e.creator = c ? rt_comm_rank(c) : 0;
  e.serial = ids_made++;
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &e, sizeof e);
  return CG_ncclSuccess;
}

/* The maker gathers (rank, world rank) from every other member, then sends
 * them all the table. */
static cg_nccl_result bootstrap(struct ncclComm *comm, const emu_id *e) {
  rt_comm *c = comm->transport;
  int me = rt_comm_rank(c), n = comm->n, boot = comm->tag + 2;
  char err[512];
  if (me != e->creator) {
    int hello[2] = {comm->rank, me};
    if (rt_comm_raw_send(c, e->creator, boot, hello, sizeof hello, err, sizeof err) ||
        rt_comm_raw_recv(c, e->creator, boot, comm->world_ranks, (size_t)n * sizeof(int), NULL, err, sizeof err))
      return fail(CG_ncclSystemError, "ncclCommInitRank: %s", err);
    return CG_ncclSuccess;
  }
  for (int i = 0; i < n; i++) comm->world_ranks[i] = -1;
  comm->world_ranks[comm->rank] = me;
  for (int i = 1; i < n; i++) {
    int hello[2], from = -1;
    if (rt_comm_raw_recv(c, -1, boot, hello, sizeof hello, &from, err, sizeof err))
      return fail(CG_ncclSystemError, "ncclCommInitRank: %s", err);
    if (hello[0] < 0 || hello[0] >= n || hello[1] != from || comm->world_ranks[hello[0]] != -1)
      return fail(CG_ncclInvalidUsage, "ncclCommInitRank: world rank %d joins as rank %d of %d, which %s", from,
                  hello[0], n, hello[0] < 0 || hello[0] >= n ? "does not exist" : "another rank has");
    comm->world_ranks[hello[0]] = from;
  }
  for (int i = 0; i < n; i++)
    if (i != comm->rank &&
        rt_comm_raw_send(c, comm->world_ranks[i], boot, comm->world_ranks, (size_t)n * sizeof(int), err, sizeof err))
      return fail(CG_ncclSystemError, "ncclCommInitRank: %s", err);
  return CG_ncclSuccess;
}

cg_nccl_result rt_emu_ncclCommInitRank(cg_nccl_comm *out, int nranks, cg_nccl_unique_id id, int rank) {
  rt_emu_enter();
  if (rt_emu_need_context() != CG_CUDA_SUCCESS) return CG_ncclUnhandledCudaError;
  if (!out) return fail(CG_ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  emu_id e;
  memcpy(&e, id.internal, sizeof e);
  if (memcmp(e.magic, ID_MAGIC, sizeof ID_MAGIC) != 0)
    return fail(CG_ncclInvalidArgument, "ncclCommInitRank: not a unique id of the emulation (ncclGetUniqueId)");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(CG_ncclInvalidArgument, "ncclCommInitRank: rank %d of %d ranks", rank, nranks);
  if (group.depth) return fail(CG_ncclInvalidUsage, "ncclCommInitRank inside ncclGroupStart/End is not emulated");
  rt_comm *c = rt_comm_process_mpi();
  if (nranks > 1 && !c)
    return fail(CG_ncclInvalidUsage, "the NCCL emulation runs over tgc's MPI communicator: open one (rt_comm_open, mpi "
                                     "or nccl, under mpirun) before ncclCommInitRank of %d ranks",
                nranks);
  struct ncclComm *comm = calloc(1, sizeof *comm);
  int *table = calloc((size_t)nranks, sizeof *table);
  if (!comm || !table) {
    free(comm);
    free(table);
    return fail(CG_ncclSystemError, "out of host memory");
  }
  comm->n = nranks, comm->rank = rank, comm->world_ranks = table;
  table[rank] = c ? rt_comm_rank(c) : 0;
  if (nranks > 1) {
    long tag = RT_COMM_TAG_USER + 3L * ((long)e.creator * SERIALS + e.serial % SERIALS);
    if (e.creator < 0 || tag + 2 > rt_comm_tag_limit(c)) {
      free(table);
      free(comm);
      return fail(CG_ncclInvalidUsage, "the NCCL emulation has no message tags left for an id of world rank %d",
                  (int)e.creator);
    }
    comm->tag = (int)tag;
    comm->transport = c;
    cg_nccl_result r = bootstrap(comm, &e);
    if (r != CG_ncclSuccess) {
      free(table);
      free(comm);
      return r;
    }
  }
  *out = comm;
  return CG_ncclSuccess;
}

cg_nccl_result rt_emu_ncclCommDestroy(cg_nccl_comm comm) {
  rt_emu_enter();
  if (!comm) return fail(CG_ncclInvalidArgument, "ncclCommDestroy: comm is NULL");
  free(comm->world_ranks);
  free(comm);
  return CG_ncclSuccess;
}

/* the element type moved (and, for reductions, combined) */
static bool map_type(cg_nccl_data_type t, bool reduces, cg_nccl_red_op op, ir_dtype *dt) {
  switch (t) {
  case CG_ncclInt8: *dt = IR_DT_BOOL; return !reduces;
  case CG_ncclUint8: *dt = IR_DT_BOOL; return !reduces || op == CG_ncclMax;
  case CG_ncclInt32: *dt = IR_DT_I32; return true;
  case CG_ncclUint32: *dt = IR_DT_I32; return !reduces || op == CG_ncclSum;
  case CG_ncclInt64: *dt = IR_DT_I64; return true;
  case CG_ncclUint64: *dt = IR_DT_I64; return !reduces || op == CG_ncclSum;
  case CG_ncclFloat16: *dt = IR_DT_F16; return true;
  case CG_ncclFloat32: *dt = IR_DT_F32; return true;
  case CG_ncclFloat64: *dt = IR_DT_F64; return true;
  case CG_ncclBfloat16: *dt = IR_DT_BF16; return true;
  default: return false;
  }
}

static cg_nccl_result execute(const char *call, struct ncclComm *comm, const rt_coll_args *a) {
  rt_comm_counter ctr = {0, 0, 0};
  size_t bytes = (size_t)a->count * ir_dtype_size(a->dt);
  if (a->kind == IR_COLL_BROADCAST && a->send && a->send != a->recv && bytes) memmove(a->recv, a->send, bytes);
  if (comm->n == 1) {
    switch (a->kind) {
    case IR_COLL_SEND:
    case IR_COLL_RECV: return fail(CG_ncclInvalidUsage, "%s to the rank itself is not emulated", call);
    case IR_COLL_BROADCAST: break;
    default: /* all_reduce, all_gather, reduce_scatter, all_to_all of one */
      if (bytes && a->recv != a->send) memmove(a->recv, a->send, bytes);
    }
    ctr.calls = 1;
  } else {
    rt_comm_group g = {comm->n, comm->rank, comm->world_ranks, comm->tag, call, &ctr};
    char err[512];
    if (rt_comm_group_run(comm->transport, &g, a, err, sizeof err) != 0)
      return fail(CG_ncclSystemError, "%s", err);
  }
  rt_cuda_emu_counters *k = rt_emu_counters();
  k->nccl_calls += ctr.calls;
  k->nccl_bytes_sent += ctr.bytes_sent;
  k->nccl_bytes_received += ctr.bytes_received;
  return CG_ncclSuccess;
}

/* ops in order, sends first: they never wait, so the receives that follow
 * are matched; a deferred group's collectives last to first (reversed:
 * NCCL promises no order among a group's operations, and the reverse of
 * the calls' is the one most likely to expose code that relies on one) */
static cg_nccl_result run_ops(queued_op *ops, int n, bool reversed) {
  cg_nccl_result first = CG_ncclSuccess;
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < n; k++) {
      queued_op *q = &ops[reversed ? n - 1 - k : k];
      if ((q->a.kind == IR_COLL_SEND) != (pass == 0)) continue;
      cg_nccl_result r = execute(q->call, q->comm, &q->a);
      if (r != CG_ncclSuccess && first == CG_ncclSuccess) first = r;
    }
  return first;
}

/* Whether ops (one operation or a group, on one stream) are deferred: on a
 * non-blocking stream, collectives only (a send or receive runs at once,
 * as NCCL's point-to-point progresses by itself: a deferred send would
 * wait for its stream while its receiver waits for it). */
static bool deferred_on(const queued_op *ops, int n) {
  if (!n || !rt_emu_stream_nonblocking(ops[0].stream)) return false;
  for (int i = 0; i < n; i++)
    if (ops[i].a.kind == IR_COLL_SEND || ops[i].a.kind == IR_COLL_RECV) return false;
  return true;
}

/* ops (one operation or a group, on one stream) deferred */
static cg_nccl_result defer(const queued_op *ops, int n) {
  if (flight.n == flight.cap) {
    int cap = flight.cap ? 2 * flight.cap : 16;
    deferred *d = realloc(flight.d, (size_t)cap * sizeof *d);
    if (!d) return fail(CG_ncclSystemError, "out of host memory");
    flight.d = d, flight.cap = cap;
  }
  if (flight.n_ops + n > flight.cap_ops) {
    int cap = 2 * (flight.n_ops + n) + 16;
    queued_op *o = realloc(flight.ops, (size_t)cap * sizeof *o);
    if (!o) return fail(CG_ncclSystemError, "out of host memory");
    flight.ops = o, flight.cap_ops = cap;
  }
  memcpy(flight.ops + flight.n_ops, ops, (size_t)n * sizeof *ops);
  flight.d[flight.n++] = (deferred){ops[0].stream, ++flight.seq, flight.n_ops, n};
  flight.n_ops += n;
  return CG_ncclSuccess;
}

/* Checks an operation and runs it, or queues it inside a group. send_elems
 * / recv_elems: what the buffers must hold. */
static cg_nccl_result enqueue(const char *call, struct ncclComm *comm, rt_coll_args a, cg_nccl_data_type type,
                              cg_nccl_red_op op, int64_t send_elems, int64_t recv_elems, cg_cu_stream stream) {
  rt_emu_enter();
  if (rt_emu_need_context() != CG_CUDA_SUCCESS) return CG_ncclUnhandledCudaError;
  if (rt_emu_check_stream(stream) != CG_CUDA_SUCCESS) return CG_ncclInvalidArgument;
  if (!comm) return fail(CG_ncclInvalidArgument, "%s: comm is NULL", call);
  bool reduces = a.kind == IR_COLL_ALL_REDUCE || a.kind == IR_COLL_REDUCE_SCATTER;
  if (reduces && op != CG_ncclSum && op != CG_ncclMax)
    return fail(CG_ncclInvalidArgument, "%s: reduction %u is not emulated (sum, max)", call, op);
  if (!map_type(type, reduces, op, &a.dt))
    return fail(CG_ncclInvalidArgument, "%s: data type %u%s is not emulated", call, type,
                reduces ? " with this reduction" : "");
  a.op = op == CG_ncclMax ? RT_REDUCE_MAX : RT_REDUCE_SUM;
  if (a.count < 0) return fail(CG_ncclInvalidArgument, "%s: count %lld", call, (long long)a.count);
  size_t es = ir_dtype_size(a.dt);
  if (send_elems && rt_emu_device_range((uint64_t)(uintptr_t)a.send, (size_t)send_elems * es) != 1)
    return fail(CG_ncclInvalidArgument, "%s: sendbuff %p (%lld bytes) is not in one device allocation", call, a.send,
                (long long)send_elems * (long long)es);
  if (recv_elems && rt_emu_device_range((uint64_t)(uintptr_t)a.recv, (size_t)recv_elems * es) != 1)
    return fail(CG_ncclInvalidArgument, "%s: recvbuff %p (%lld bytes) is not in one device allocation", call, a.recv,
                (long long)recv_elems * (long long)es);
  if (reduces && type == CG_ncclUint8)
    for (int64_t i = 0; i < send_elems; i++)
      if (((const uint8_t *)a.send)[i] > 1)
        return fail(CG_ncclInvalidArgument, "%s: ncclUint8 max is emulated on 0 and 1 only; element %lld is %u", call,
                    (long long)i, ((const uint8_t *)a.send)[i]);
  if (a.peer < 0 || a.peer >= comm->n)
    return fail(CG_ncclInvalidArgument, "%s: rank %d of %d ranks", call, a.peer, comm->n);
  queued_op q = {comm, a, call, stream, {0, 0}, {0, 0}};
  q.lo[0] = (uint64_t)(uintptr_t)a.send, q.hi[0] = q.lo[0] + (uint64_t)send_elems * es;
  q.lo[1] = (uint64_t)(uintptr_t)a.recv, q.hi[1] = q.lo[1] + (uint64_t)recv_elems * es;
  if (!group.depth) return deferred_on(&q, 1) ? defer(&q, 1) : execute(call, comm, &a);
  if (group.n && group.ops[0].stream != stream)
    return fail(CG_ncclInvalidUsage, "%s: a group's operations on two streams is not emulated", call);
  if (group.n == group.cap) {
    int cap = group.cap ? 2 * group.cap : 16;
    queued_op *ops = realloc(group.ops, (size_t)cap * sizeof *ops);
    if (!ops) return fail(CG_ncclSystemError, "out of host memory");
    group.ops = ops, group.cap = cap;
  }
  group.ops[group.n++] = q;
  return CG_ncclSuccess;
}

cg_nccl_result rt_emu_ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, cg_nccl_data_type datatype,
                                    cg_nccl_red_op op, cg_nccl_comm comm, cg_cu_stream stream) {
  rt_coll_args a = {IR_COLL_ALL_REDUCE, RT_REDUCE_SUM, IR_DT_F32, sendbuff, recvbuff, (int64_t)count, 0};
  return enqueue("ncclAllReduce", comm, a, datatype, op, a.count, a.count, stream);
}

cg_nccl_result rt_emu_ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                    cg_nccl_data_type datatype, cg_nccl_comm comm, cg_cu_stream stream) {
  rt_coll_args a = {IR_COLL_ALL_GATHER, RT_REDUCE_SUM, IR_DT_F32, sendbuff, recvbuff, (int64_t)sendcount, 0};
  return enqueue("ncclAllGather", comm, a, datatype, CG_ncclSum, a.count, comm ? comm->n * a.count : 0, stream);
}

cg_nccl_result rt_emu_ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                        cg_nccl_data_type datatype, cg_nccl_red_op op, cg_nccl_comm comm,
                                        cg_cu_stream stream) {
  rt_coll_args a = {IR_COLL_REDUCE_SCATTER, RT_REDUCE_SUM, IR_DT_F32, sendbuff, recvbuff, (int64_t)recvcount, 0};
  return enqueue("ncclReduceScatter", comm, a, datatype, op, comm ? comm->n * a.count : 0, a.count, stream);
}

cg_nccl_result rt_emu_ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, cg_nccl_data_type datatype,
                                    int root, cg_nccl_comm comm, cg_cu_stream stream) {
  /* the root's sendbuff is copied into its recvbuff first (execute) */
  bool is_root = comm && comm->rank == root;
  rt_coll_args a = {IR_COLL_BROADCAST, RT_REDUCE_SUM, IR_DT_F32, is_root ? sendbuff : NULL, recvbuff, (int64_t)count,
                    root};
  return enqueue("ncclBroadcast", comm, a, datatype, CG_ncclSum, is_root ? a.count : 0, a.count, stream);
}

cg_nccl_result rt_emu_ncclSend(const void *sendbuff, size_t count, cg_nccl_data_type datatype, int peer,
                               cg_nccl_comm comm, cg_cu_stream stream) {
  rt_coll_args a = {IR_COLL_SEND, RT_REDUCE_SUM, IR_DT_F32, sendbuff, NULL, (int64_t)count, peer};
  return enqueue("ncclSend", comm, a, datatype, CG_ncclSum, a.count, 0, stream);
}

cg_nccl_result rt_emu_ncclRecv(void *recvbuff, size_t count, cg_nccl_data_type datatype, int peer, cg_nccl_comm comm,
                               cg_cu_stream stream) {
  rt_coll_args a = {IR_COLL_RECV, RT_REDUCE_SUM, IR_DT_F32, NULL, recvbuff, (int64_t)count, peer};
  return enqueue("ncclRecv", comm, a, datatype, CG_ncclSum, 0, a.count, stream);
}

cg_nccl_result rt_emu_ncclGroupStart(void) {
  rt_emu_enter();
  group.depth++;
  return CG_ncclSuccess;
}

cg_nccl_result rt_emu_ncclGroupEnd(void) {
  rt_emu_enter();
  if (group.depth == 0) return fail(CG_ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group.depth > 0) return CG_ncclSuccess;
  cg_nccl_result r = deferred_on(group.ops, group.n) ? defer(group.ops, group.n) : run_ops(group.ops, group.n, false);
  group.n = 0; /* group.ops stays for the next group */
  return r;
}

/* ---- in flight (see the head of this file) ---- */

long rt_emu_nccl_mark(void) { return flight.seq; }
bool rt_emu_nccl_in_flight(void) { return flight.n > 0; }

cg_cu_result rt_emu_nccl_force(cg_cu_stream s, bool all_streams, long upto) {
  cg_cu_result first = CG_CUDA_SUCCESS;
  int kept = 0;
  for (int i = 0; i < flight.n; i++) {
    deferred d = flight.d[i];
    if ((all_streams || d.stream == s) && d.seq <= upto) {
      if (run_ops(flight.ops + d.first, d.n, true) != CG_ncclSuccess && first == CG_CUDA_SUCCESS) {
        first = CG_CUDA_ERROR_LAUNCH_FAILED; /* as a GPU's NCCL kernel failing: surfaces later, sticky */
        char why[600];
        snprintf(why, sizeof why, "%s (run late, on its stream)", rt_emu_detail());
        rt_emu_set_sticky(first, why);
      }
    } else flight.d[kept++] = d;
  }
  flight.n = kept;
  if (!kept) flight.n_ops = 0;
  return first;
}

cg_cu_result rt_emu_nccl_touch(const char *call, cg_cu_stream s, uint64_t p, size_t bytes) {
  if (!flight.n) return CG_CUDA_SUCCESS;
  if (s && rt_emu_stream_nonblocking(s)) { /* work on a stream comes after what is deferred on it (only a
                                            * non-blocking stream has any) */
    cg_cu_result r = rt_emu_nccl_force(s, false, flight.seq);
    if (r != CG_CUDA_SUCCESS) return r;
  }
  if (!bytes) bytes = 1;
  for (int i = 0; i < flight.n; i++)
    for (int j = flight.d[i].first; j < flight.d[i].first + flight.d[i].n; j++) {
      const queued_op *q = &flight.ops[j];
      for (int k = 1; k >= 0; k--) /* what it writes first: an in-place operation's one buffer */
        if (q->hi[k] > q->lo[k] && p < q->hi[k] && q->lo[k] < p + bytes)
          return rt_emu_fail(CG_CUDA_ERROR_ILLEGAL_STATE,
                             "%s touches [0x%llx, +%zu) while %s on stream %p may still %s [0x%llx, 0x%llx): nothing "
                             "orders it after that operation (cuStreamWaitEvent on an event recorded after it)",
                             call, (unsigned long long)p, bytes, q->call, (void *)q->stream, k ? "write" : "read",
                             (unsigned long long)q->lo[k], (unsigned long long)q->hi[k]);
    }
  return CG_CUDA_SUCCESS;
}
