/* runtime/comm/comm.h — communication between ranks: one interface, three
 * implementations (the runtime layer's comm section; names rt_comm_*).
 *
 *   local  one process, world size 1: every group is this rank alone
 *   mpi    one rank per process of an MPI job (Open MPI, dlopen'd only when
 *          chosen: a plain tgc start loads no MPI)
 *   nccl   GPU buffers through NCCL (real, or cuda-emu's emulation), with
 *          the MPI (or local) implementation as its bootstrap
 *
 * Ranks form a device mesh: axes outermost first (e.g. pp, dp, tp). A rank's
 * coordinates are the row-major digits of its world rank (the last axis
 * varies fastest: a tp group is consecutive ranks, as Megatron lays them
 * out). A collective over `axis` runs among the ranks that differ from this
 * one only on that axis, in the order of their coordinate; axis -1 is the
 * whole world (in world-rank order).
 *
 * The collectives are tgc's own ring algorithms over point-to-point messages
 * (ring.c; the MPI implementation only moves bytes), so the bytes counted
 * are the bytes moved, and results are deterministic: the same inputs on
 * the same mesh give the same bits every run, and every member of a group
 * ends with the same bits. Per rank of a group of n, with coordinate i, a
 * buffer of `count` elements of `size` bytes (payload only, no headers):
 *
 *   all_reduce      ring reduce-scatter, then ring all-gather. The buffer is
 *                   cut into n chunks, chunk j of c_j = count/n + (j <
 *                   count%n) elements. Sent (2 count - c_i - c_{i+1}) size,
 *                   received (2 count - c_{i-1} - c_i) size (indices mod n):
 *                   2 (n-1)/n count size each when n divides count.
 *   reduce_scatter  the first half of that on n blocks of count: sent and
 *                   received (n-1) count size.
 *   all_gather      ring: sent and received (n-1) count size.
 *   all_to_all      n-1 pairwise exchanges (step s: block to coordinate i+s,
 *                   from i-s): sent and received (n-1) count size.
 *   broadcast       a pipelined chain root, root+1, ..., root+n-1 (NCCL's
 *                   ring broadcast): every member but the last of the chain
 *                   sends count size, every member but the root receives
 *                   count size.
 *   send, recv      count size.
 * A group of one (n = 1) copies (nothing when send == recv): 0 bytes,
 * counted as one call. rt_comm_ring_bytes computes these formulas.
 *
 * Reductions (SUM, MAX) in the element type, every hop computing
 * incoming OP local for the elements of one chunk: f64 and f32 in their own
 * IEEE arithmetic; bf16 and f16 widened to f32, combined in f32 and rounded
 * (to nearest even) once per hop; i32 and i64 wrap around (two's
 * complement); bool: SUM and MAX are both logical or. MAX propagates NaN.
 * Chunk j of all_reduce (and block j of reduce_scatter) is therefore
 *   x_{j+1}, then acc = acc OP x_{j+2}, ..., acc = acc OP x_{j+n} = x_j
 * over coordinates mod n: the order tests reproduce bit for bit.
 *
 * Every wait polls (yielding, then sleeping up to 1 ms, so oversubscribed
 * ranks do not starve each other) and gives up after the timeout with
 *   tgc: rank R: all_reduce over tp: no message from rank S for 300 s (--comm-timeout); stopping every rank
 * and the whole job ends non-zero (rt_comm_abort). A rank that dies makes
 * mpirun end the job (it names the rank); see docs/comm.md.
 *
 * One thread uses a communicator at a time. docs/comm.md has the whole
 * story (algorithms, faults, MPI loading, NCCL and its emulation).
 *
 * Test hooks (for fault tests of tgc and of programs built on it):
 * TGC_TEST_COMM_HANG=R[:K] makes rank R hang forever in its K-th (default
 * first) collective or send/recv, TGC_TEST_COMM_KILL=R[:K] makes it die of
 * SIGKILL there, TGC_TEST_COMM_EXIT=R[:K] makes it exit(0) without closing. */
#ifndef TGC_COMM_H
#define TGC_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir.h"

typedef struct rt_comm rt_comm;
struct cg_cuda_api;
struct CUstream_st;

/* The kinds of communication tgc counts: ir/collectives.def's. */
typedef ir_coll rt_coll_kind;
const char *rt_coll_name(rt_coll_kind k);   /* "all_reduce", ...; "?" out of range (ir_coll_name) */

typedef enum {
  RT_REDUCE_SUM,   /* + (bool: or) */
  RT_REDUCE_MAX,   /* max, NaN wins (bool: or) */
} rt_reduce_op;

/* The most mesh axes. */
#define RT_COMM_MAX_AXES 8

typedef struct {
  /* NULL or "auto": mpi when started by a launcher (rt_comm_under_launcher),
   * else local; or "local", "mpi", "nccl". */
  const char *impl;
  double timeout_s;   /* --comm-timeout: how long any wait may last; 0: 300 s */
  /* nccl only: the table that holds NCCL (rt_cuda_load with
   * CG_CUDA_LIB_NCCL, or rt_cuda_emu_load), with this rank's device already
   * open and its context current (one GPU per rank: rt_comm_local_rank()
   * tells which), and the stream the collectives run on (NULL: the default
   * stream). Buffers are device pointers of that context. */
  const struct cg_cuda_api *cuda;
  struct CUstream_st *cuda_stream;
} rt_comm_options;

/* Started by a launcher (mpirun, srun with PMIx/PMI): from the environment
 * only (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK); loads nothing. */
bool rt_comm_under_launcher(void);
/* Whether the mpi implementation is built in (Open MPI's mpi.h was found
 * at build time); loads nothing. */
bool rt_comm_has_mpi(void);
/* This process's rank among those of its node (OMPI_COMM_WORLD_LOCAL_RANK,
 * MPI_LOCALRANKID, SLURM_LOCALID), 0 when not known: the GPU to use. */
int rt_comm_local_rank(void);
/* This process's rank in the job (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK,
 * SLURM_PROCID), 0 when not started by a launcher or not known. */
int rt_comm_launcher_rank(void);

/* Opens the implementation o asks for (o NULL: the defaults). Collective:
 * under MPI every rank of the job calls it. NULL and a message on failure:
 *   "unknown comm implementation 'x' (auto, local, mpi, nccl)"
 *   "MPI is not built in: tgc was built without mpi.h (install libopenmpi-dev and rebuild)"
 *   "cannot load Open MPI: ..." (libmpi.so.40 missing; TGC_MPI_LIB names another)
 *   "MPI was finalized in this process: it cannot be opened again"
 *   "the nccl implementation needs a CUDA table with NCCL loaded" */
rt_comm *rt_comm_open(const rt_comm_options *o, char *err, size_t errlen);
/* Completes pending sends (with the timeout), then frees everything; the
 * last MPI communicator of the process calls MPI_Finalize. NULL: nothing. */
void rt_comm_close(rt_comm *c);
const char *rt_comm_impl(const rt_comm *c);   /* "local", "mpi", "nccl" */
int rt_comm_rank(const rt_comm *c);           /* world */
int rt_comm_size(const rt_comm *c);
double rt_comm_timeout(const rt_comm *c);     /* seconds */

/* The device mesh: n_axes names and sizes, outermost first (names:
 * non-empty, distinct, at most 15 characters). The product of the sizes must
 * equal the world size, else -1 and
 *   "--mesh dp=2,tp=2 needs 4 ranks, but tgc runs as 1 process (start it with mpirun -np 4)"
 *   "--mesh dp=2,tp=2 needs 4 ranks, but this job has 8 (start it with mpirun -np 4)"
 * Collective: every rank sets the same mesh (checked under mpi: "--mesh
 * dp=4 differs from rank 0's (every rank sets the same mesh)"; the mesh
 * stays as it was). Resets the counters (their
 * axes change) and waits for pending sends. n_axes 0: no axes, the world
 * only (any world size); a new communicator starts so. */
int rt_comm_set_mesh(rt_comm *c, int n_axes, const char *const *names, const int *sizes, char *err, size_t errlen);
int rt_comm_axis_count(const rt_comm *c);
int rt_comm_axis_size(const rt_comm *c, int axis);    /* axis -1: the world size */
const char *rt_comm_axis_name(const rt_comm *c, int axis);  /* axis -1: "world" */
int rt_comm_coord(const rt_comm *c, int axis);        /* axis -1: the world rank */
int rt_comm_axis_find(const rt_comm *c, const char *name);   /* its index, or -1 */

/* Collectives among the ranks that differ from this one only on `axis`
 * (axis = -1: the whole world). Buffers are host memory (nccl: device
 * pointers). count is in elements of dt (any ir_dtype). Every member calls
 * with the same count, dt, op and root. 0, or -1 and a message (a bad
 * axis, count, buffer or root; a message of the wrong size from a peer;
 * an MPI or NCCL error). Buffers that overlap are handled (a staged copy),
 * except that all_reduce may run in place (send == recv). */
int rt_comm_all_reduce(rt_comm *c, int axis, rt_reduce_op op, ir_dtype dt, const void *send, void *recv, int64_t count,
                       char *err, size_t errlen);
/* count per rank; recv holds n*count: member j's block at j*count. */
int rt_comm_all_gather(rt_comm *c, int axis, ir_dtype dt, const void *send, void *recv, int64_t count, char *err,
                       size_t errlen);
/* send holds n*count; recv count: block `coordinate` of the reduction. */
int rt_comm_reduce_scatter(rt_comm *c, int axis, rt_reduce_op op, ir_dtype dt, const void *send, void *recv,
                           int64_t count, char *err, size_t errlen);
/* send: n blocks of count (block j goes to member j); recv: n blocks
 * (block j came from member j). */
int rt_comm_all_to_all(rt_comm *c, int axis, ir_dtype dt, const void *send, void *recv, int64_t count, char *err,
                       size_t errlen);
/* buf of the member at coordinate root_coord to every member's buf. */
int rt_comm_broadcast(rt_comm *c, int axis, int root_coord, ir_dtype dt, void *buf, int64_t count, char *err,
                      size_t errlen);
/* Point to point along an axis (pipeline stages): peer_coord is the peer's
 * coordinate on `axis`, its other coordinates equal this rank's. send
 * returns as soon as buf may be reused and never waits for the receiver
 * (the message is staged and completes later), so any schedule whose
 * receives are matched cannot deadlock; recv blocks (with the timeout).
 * Messages between one pair along one axis arrive in the order they were
 * sent. peer_coord may be this rank's own (a copy through a queue). */
int rt_comm_send(rt_comm *c, int axis, int peer_coord, ir_dtype dt, const void *buf, int64_t count, char *err,
                 size_t errlen);
int rt_comm_recv(rt_comm *c, int axis, int peer_coord, ir_dtype dt, void *buf, int64_t count, char *err,
                 size_t errlen);
/* Every rank of the world waits for all (a dissemination barrier over
 * point-to-point messages: a timeout names the rank it waited for). Not
 * counted. */
int rt_comm_barrier(rt_comm *c, char *err, size_t errlen);

/* ---- operations in flight (nccl: overlap with the device's work) ----
 * Every implementation's operation is complete when its call returns,
 * except the nccl one's between batch_begin and batch_end: there
 * all_reduce, all_gather and reduce_scatter (whole buffers) are issued on
 * the communicator's own stream, after the device's work issued so far
 * (an event recorded on the options' stream, which that stream waits on)
 * and inside one ncclGroupStart/End, and return at once. batch_end
 * records an event after them. From then until a join, their buffers are
 * in flight: the device's later work must not touch them (read a result,
 * write an operand) before join of those bytes, which makes the options'
 * stream wait for the batch that uses them (and every batch before it);
 * join_all waits for all. The host must not read them before join_all and
 * a synchronization of the options' stream. overlaps: whether operations
 * can be in flight (nccl unless TGC_COMM_OVERLAP=0; off, a batch is
 * nothing and every operation completes in its call, as before).
 * in_flight: how many batches are. Elsewhere these do nothing. */
bool rt_comm_overlaps(const rt_comm *c);
int rt_comm_batch_begin(rt_comm *c, char *err, size_t errlen);
int rt_comm_batch_end(rt_comm *c, char *err, size_t errlen);
int rt_comm_join(rt_comm *c, const void *p, size_t bytes, char *err, size_t errlen);
int rt_comm_join_all(rt_comm *c, char *err, size_t errlen);
int rt_comm_in_flight(const rt_comm *c);
/* Whether the open batch's operations use bytes [p, p + bytes) (an
 * operation on them belongs in the next batch: a group's operations are not
 * ordered among themselves). */
bool rt_comm_batch_touches(const rt_comm *c, const void *p, size_t bytes);
/* What overlap did since the counts were reset (rt_comm_reset_counts):
 * batches closed with collectives in them, those collectives, and joins
 * that waited for a batch before the end of the program (work touching
 * its bytes: less overlap than a wait at the end). */
typedef struct {
  int64_t batches, collectives, early_joins;
} rt_comm_overlap_count;
rt_comm_overlap_count rt_comm_overlap(const rt_comm *c);

/* What this rank moved, per kind and per axis (axis index n_axes, or -1:
 * world). Payload bytes only. Zeros for an axis or kind out of range. */
typedef struct {
  int64_t calls, bytes_sent, bytes_received;
} rt_comm_counter;
rt_comm_counter rt_comm_count(const rt_comm *c, rt_coll_kind k, int axis);
void rt_comm_reset_counts(rt_comm *c);

/* The formulas above: the payload bytes the member at coordinate `coord`
 * of a group of n sends and receives in one call of kind k on count
 * elements of elem_bytes each (root: broadcast's root coordinate; send and
 * recv: count elem_bytes one way, 0 the other). What every implementation
 * counts; what the shard pass's prediction must equal. */
rt_comm_counter rt_comm_ring_bytes(rt_coll_kind k, int n, int coord, int root, int64_t count, size_t elem_bytes);

/* Stops every rank: "tgc: rank R: MESSAGE" on stderr, then the whole job
 * ends with a non-zero status (MPI_Abort under MPI; exit(1) alone). c may
 * be NULL (exit(1)). */
_Noreturn void rt_comm_abort(rt_comm *c, const char *msg);

/* ===================================================================== */
/* Explicit groups: for code that keeps its own communicators over an MPI  */
/* job (cuda-emu's NCCL emulation runs ncclAllReduce & co. through here).  */
/* ===================================================================== */
/* The MPI communicator tgc opened in this process (the first one still
 * open), or NULL. */
rt_comm *rt_comm_process_mpi(void);

/* Tags from RT_COMM_TAG_USER to rt_comm_tag_limit(c) are the caller's;
 * comm.c's own messages use smaller ones. */
#define RT_COMM_TAG_USER 64
int rt_comm_tag_limit(const rt_comm *c);

typedef struct {
  int n;                    /* members */
  int me;                   /* this rank's index */
  const int *world_ranks;   /* member i's world rank: the ring goes 0, 1, ..., n-1 */
  int tag;                  /* the group's two tags: tag (collectives) and tag + 1 (send/recv) */
  const char *label;        /* what messages name, e.g. "ncclAllReduce" */
  rt_comm_counter *counter; /* calls and bytes added here (NULL: not counted) */
} rt_comm_group;

typedef struct {
  rt_coll_kind kind;
  rt_reduce_op op;          /* all_reduce, reduce_scatter */
  ir_dtype dt;
  const void *send;         /* all_reduce, all_gather, reduce_scatter, all_to_all, send */
  void *recv;               /* those, recv; broadcast: the buffer */
  int64_t count;            /* as in the functions above */
  int peer;                 /* broadcast: the root's index; send, recv: the peer's */
} rt_coll_args;

/* NCCL's buffer rule for a collective of `bytes` per rank's block over n
 * ranks, this rank at coordinate me: the send and receive ranges apart, or
 * in place exactly as NCCL documents it (all-reduce and broadcast: the same
 * pointer; all-gather: send = recv + me x bytes; reduce-scatter: recv =
 * send + me x bytes). Any other overlap is undefined on NCCL, so the nccl
 * implementation refuses it before the call. true when the pair is legal. */
bool rt_nccl_buffers_legal(ir_coll kind, const void *send, const void *recv, size_t bytes, size_t n, size_t me);

/* One operation over an explicit group, with the algorithms above, on host
 * memory (never through a NCCL backend). 0, or -1 and a message. */
int rt_comm_group_run(rt_comm *c, const rt_comm_group *g, const rt_coll_args *a, char *err, size_t errlen);

/* Raw messages between world ranks on a caller's tag (a bootstrap): not
 * counted. send stages and returns; recv waits (with the timeout) for a
 * message of exactly `bytes` from world rank `from`, or from anyone when
 * from is -1 (then *source says who; source may be NULL otherwise). */
int rt_comm_raw_send(rt_comm *c, int to, int tag, const void *buf, size_t bytes, char *err, size_t errlen);
int rt_comm_raw_recv(rt_comm *c, int from, int tag, void *buf, size_t bytes, int *source, char *err, size_t errlen);

#endif
