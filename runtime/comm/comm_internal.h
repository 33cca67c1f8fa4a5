/* runtime/comm/comm_internal.h — what the files of runtime/comm/ share
 * (not exported: everything outside uses comm.h).
 *
 *   comm.c   the API: options, dispatch, the mesh and its groups, argument
 *            checks, counters, pending sends, the loopback queue, faults
 *   ring.c   the algorithms over a point-to-point transport, the
 *            reductions
 *   wait.c   the waits, their timeouts, whom a timeout blames
 *   local.c  world size 1 (no transport: every group is a copy)
 *   mpi.c    Open MPI through dlopen: the transport
 *   nccl.c   NCCL through the CUDA table: whole operations per group
 *
 * Two levels of vtable: a comm_backend is what rt_comm_open chose; the
 * ring algorithms need only its point-to-point part (isend, irecv, test),
 * which local and nccl leave NULL (local never has a group of two; nccl
 * runs whole operations in `run`). */
#ifndef TGC_COMM_INTERNAL_H
#define TGC_COMM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"

/* Tags below RT_COMM_TAG_USER: axis k's collectives 2k, its send/recv
 * 2k + 1; the world's TAG_WORLD and TAG_WORLD + 1; the barrier's rounds
 * from TAG_BARRIER (one tag per round). */
#define TAG_WORLD (2 * RT_COMM_MAX_AXES)
#define TAG_BARRIER (TAG_WORLD + 2)
#define BARRIER_ROUNDS 32
/* wait.c's questions after a timeout: "what do you wait for?" */
#define TAG_QUESTION (TAG_BARRIER + BARRIER_ROUNDS)
#define TAG_ANSWER (TAG_QUESTION + 1)
#define TAG_STOP (TAG_ANSWER + 1) /* wait.c: a timed-out rank tells the others, who say so and answer */
_Static_assert(TAG_STOP < RT_COMM_TAG_USER, "comm.c's tags overlap the callers'");

typedef struct comm_req comm_req;   /* a transport's request */

typedef struct comm_backend {
  const char *name;                 /* "local", "mpi", "nccl" */
  /* ---- point to point (the rings' transport); NULL for local, nccl ----
   * isend: starts sending; buf must stay untouched until test says done.
   * irecv: from world rank `from` (-1: any); exactly `bytes`, else test
   * fails naming both sizes. test: 1 done (the request is freed; *from,
   * when not NULL, is the sender), 0 not yet, -1 error. */
  int (*isend)(rt_comm *c, int to, int tag, const void *buf, size_t bytes, comm_req **req, char *err, size_t errlen);
  int (*irecv)(rt_comm *c, int from, int tag, void *buf, size_t bytes, comm_req **req, char *err, size_t errlen);
  int (*test)(rt_comm *c, comm_req *req, int *from, char *err, size_t errlen);
  /* whether a message on tag waits to be received (1, and from whom), 0
   * not, -1 error; NULL: the transport cannot tell (no questions) */
  int (*iprobe)(rt_comm *c, int tag, int *from);
  /* ---- whole operations on a group (nccl); NULL: the rings ---- */
  int (*run)(rt_comm *c, int axis, const rt_coll_args *a, char *err, size_t errlen);
  /* copies for groups of one (nccl: device memory); NULL: memcpy */
  int (*copy)(rt_comm *c, void *dst, const void *src, size_t bytes, char *err, size_t errlen);
  /* after rt_comm_set_mesh changed the mesh (nccl: its communicators) */
  int (*mesh_changed)(rt_comm *c, char *err, size_t errlen);
  /* operations in flight (comm.h); NULL: none ever are */
  bool (*overlaps)(const rt_comm *c);
  int (*batch_begin)(rt_comm *c, char *err, size_t errlen);
  int (*batch_end)(rt_comm *c, char *err, size_t errlen);
  int (*join)(rt_comm *c, const void *p, size_t bytes, char *err, size_t errlen);
  int (*join_all)(rt_comm *c, char *err, size_t errlen);
  int (*in_flight)(const rt_comm *c);
  bool (*batch_touches)(const rt_comm *c, const void *p, size_t bytes);
  /* NULL: the dissemination barrier over isend/irecv */
  int (*barrier)(rt_comm *c, char *err, size_t errlen);
  int (*tag_limit)(const rt_comm *c);
  /* frees the backend's state (pending sends are done); broken: an
   * operation failed midway, so the peers cannot be waited for */
  void (*close)(rt_comm *c, bool broken);
  /* ends every rank (NULL: exit(1) after the message) */
  void (*abort)(rt_comm *c);
} comm_backend;

extern const comm_backend rt_comm_local_backend, rt_comm_mpi_backend, rt_comm_nccl_backend;
/* mpi.c: loads Open MPI and initializes it (refcounted), fills rank and
 * size and the backend's state. nccl.c: the same, with its bootstrap. */
int rt_comm_mpi_open(rt_comm *c, char *err, size_t errlen);
int rt_comm_nccl_open(rt_comm *c, const rt_comm_options *o, char *err, size_t errlen);

/* A staged message (a send not yet complete, or a message to oneself). */
typedef struct staged {
  struct staged *next;
  comm_req *req;            /* NULL: a loopback message */
  int to, tag;              /* world rank, tag */
  void *data;
  size_t bytes, cap;
} staged;

struct rt_comm {
  const comm_backend *be;
  void *impl;                       /* the backend's state */
  int rank, size;
  double timeout_s;
  /* the mesh */
  int n_axes;
  char names[RT_COMM_MAX_AXES][16];
  int sizes[RT_COMM_MAX_AXES], strides[RT_COMM_MAX_AXES], coords[RT_COMM_MAX_AXES];
  rt_comm_counter counts[IR_NUM_COLLS][RT_COMM_MAX_AXES + 1];
  rt_comm_overlap_count overlap;     /* the backend's (nccl.c), reset with counts */
  /* sends in flight (oldest first), loopback messages, spare buffers */
  staged *pending, *loopback, *spare;
  /* scratch for the rings: two chunk buffers and a staging copy */
  void *scratch[3];
  size_t scratch_cap[3];
  bool broken;                      /* an operation failed midway */
  /* wait.c: the rank the current wait waits for (-1: none), questions
   * asked, and what the wait is for (its messages) */
  int waiting_for, question_seq;
  const char *waiting_what;
  /* test hooks: TGC_TEST_COMM_{HANG,KILL,EXIT}=R[:K] */
  int fault_kind, fault_call, calls_made;
};

/* A group of world ranks in ring order, and the operation in progress on
 * it (for counters and messages). */
typedef struct {
  rt_comm *c;
  int n, me;
  int base, stride;         /* member i = base + i * stride ... */
  const int *ranks;         /* ... or ranks[i] */
  int tag;                  /* collectives: tag; send/recv: tag + 1 */
  rt_coll_kind kind;
  char desc[96];            /* for messages: "all_reduce over tp", or an explicit group's label */
  rt_comm_counter *ctr;     /* bytes go here (NULL: not counted) */
} comm_group;

static inline int group_world_rank(const comm_group *g, int i) {
  return g->ranks ? g->ranks[i] : g->base + i * g->stride;
}

/* ---- ring.c, wait.c ---- */
/* Runs a (checked) operation on a group of two or more over the transport.
 * a->send/recv are host memory, non-overlapping except in-place
 * all_reduce (comm.c stages the rest). */
int rt_comm_ring_run(comm_group *g, const rt_coll_args *a, char *err, size_t errlen);
/* Waits for n requests (peers[i]: the world rank each talks to, -1: any;
 * recv[i]: whether it is a receive; sources, when not NULL: who sent each).
 * A request done is set to NULL. Times out through rt_comm_abort; what
 * names the operation in messages. */
int rt_comm_wait(rt_comm *c, const char *what, comm_req **reqs, const int *peers, const bool *recv, int n,
                 int *sources, char *err, size_t errlen);
/* out[i] = in[i] OP local[i] in dt (out may alias either). */
void rt_comm_reduce(ir_dtype dt, rt_reduce_op op, void *out, const void *in, const void *local, int64_t n);
/* The dissemination barrier over the transport. */
int rt_comm_ring_barrier(rt_comm *c, char *err, size_t errlen);

/* ---- comm.c ---- */
/* scratch buffer k of at least bytes (grown once, kept) or NULL */
void *rt_comm_scratch(rt_comm *c, int k, size_t bytes);
/* Tests the pending sends once; frees the finished ones. */
int rt_comm_progress(rt_comm *c, char *err, size_t errlen);
/* Waits (with the timeout) until every pending send is done. */
int rt_comm_drain(rt_comm *c, char *err, size_t errlen);
/* A staged, non-blocking send over the transport. */
/* Ends the job (the backend's abort, then exit 1) without a message. */
_Noreturn void rt_comm_abort_quiet(rt_comm *c);
int rt_comm_stage_send(rt_comm *c, int to, int tag, const void *buf, size_t bytes, char *err, size_t errlen);
/* "message" into err. */
void rt_comm_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Shared by the files of the comm layer (comm.c, mesh.c, stage.c, op.c). */
void comm_fault_hook(rt_comm *c); /* the test hook TGC_COMM_FAULT: hang, die or exit at a given call (comm.c) */
int comm_copy(rt_comm *c, void *dst, const void *src, size_t bytes, char *err, size_t errlen); /* (stage.c) */
/* send/recv with this rank itself: through the loopback queue (stage.c) */
int comm_loopback(rt_comm *c, const comm_group *g, const rt_coll_args *a, char *err, size_t errlen);
/* one operation on group g (axis: its mesh axis, or -1): checked, then run (op.c) */
int comm_run_group(rt_comm *c, comm_group *g, int axis, const rt_coll_args *a, char *err, size_t errlen);

#endif
