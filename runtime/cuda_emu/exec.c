/* runtime/cuda_emu/exec.c — running a grid of an emulated kernel.
 *
 * Blocks are spread over OpenMP threads ("workers"); a worker runs one
 * block at a time, each CUDA thread of it on a fiber of its own. The
 * worker's scheduler loop switches to a runnable thread, which runs until
 * it must wait for others (a barrier, a warp collective) or exits; the
 * scheduler then picks the next runnable thread in queue order (thread
 * rank order at the start, release order after). So threads interleave
 * exactly at the points where CUDA lets them.
 *
 * Each thread's fiber region (TGC_EMU_FIBER_BYTES, aligned to its size)
 * holds its cuda_thread at the base — the tgc_emu_thread kernels see comes
 * first — then a guard page, then the stack.
 *
 *   barriers   a thread arriving waits until every thread of the block that
 *              has not exited has arrived (an exited thread counts as
 *              arrived, as on current GPUs); _count/_and/_or reduce the
 *              predicates;
 *   warps      a collective forms a "round" per mask: each lane of the mask
 *              that has not exited must join it with the same operation;
 *              the last one computes every lane's result (PTX semantics for
 *              shfl: segments of width lanes, out-of-range lanes keep their
 *              own value, a source lane not in the round gives all bits set);
 *   deadlock   no runnable thread while some have not exited: a fault that
 *              says who waits where;
 *   faults     a kernel's fault (misaligned vector access, ...) ends its
 *              block and the grid, and is reported with kernel, block and
 *              thread;
 *   racecheck  (modules built with TGC_RACECHECK) every TGC_SHARED element
 *              access is checked against the last write and the last two
 *              readers of that byte since the last barrier: two threads, one
 *              writing, neither atomic both, not ordered by a barrier (or a
 *              __syncwarp within one warp) is a hazard. */
#define _GNU_SOURCE
#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu_internal.h"

#define PAGE 4096u
#define MAX_THREADS 1024

enum { ST_RUNNABLE, ST_BARRIER, ST_WARP, ST_EXITED };
#define OP_GATHER TGC_EMU_NUM_WARP_OPS /* the warp_gather entry, a round like the others */

static const char *const warp_op_names[] = {
    "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
    "__any_sync", "__all_sync", "__syncwarp", "__reduce_add_sync", "__reduce_min_sync",
    "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync", "__match_any_sync",
    "tgc_mma / tgc_ldmatrix (warp gather)"};
_Static_assert(sizeof warp_op_names / sizeof warp_op_names[0] == TGC_EMU_NUM_WARP_OPS + 1, "one name per op");

static const char *const barrier_names[] = {"__syncthreads", "__syncthreads_count", "__syncthreads_and",
                                            "__syncthreads_or"};

struct block;

/* One CUDA thread, at the base of its fiber region. */
typedef struct {
  tgc_emu_thread t; /* first: what kernels see */
  emu_fiber_ctx ctx;
  struct block *block;
  int status;
  int wait_op;                /* the barrier or warp op it waits in */
  unsigned int wait_mask;
  unsigned long long result;  /* of the barrier / collective it waited in */
} cuda_thread;
_Static_assert(sizeof(cuda_thread) <= PAGE, "a thread's state fits in the region's first page");

typedef struct {
  bool used;
  int op, width, arg0;
  unsigned int mask, arrived;
  unsigned long long value[32];
  int arg[32];
  const void *src[32];
  void *dst[32];
  unsigned int bytes;
} warp_round;

typedef struct {
  unsigned int exists, live;  /* lanes */
  unsigned int sync_epoch;    /* __syncwarp rounds completed (racecheck) */
  warp_round rounds[32];
} warp_state;

typedef struct {
  uint64_t epoch;             /* the block epoch the entry belongs to */
  int32_t w_tid, r1_tid, r2_tid;  /* -1: none */
  uint32_t w_wepoch, r1_wepoch, r2_wepoch;
  uint8_t w_atomic;
} shadow_entry;

typedef struct {
  const emu_launch *l;
  atomic_int faulted;
  cg_cu_result code;
  char detail[1024];
  pthread_mutex_t lock;
} grid_state;

typedef struct worker worker;
typedef struct block {
  worker *w;
  grid_state *g;
  const emu_launch *l;
  tgc_emu_dim3 idx;
  int nthreads, live, nwarps;
  int bar_arrived, bar_op, bar_acc;
  uint64_t race_epoch;
  bool aborted;
  int queue[MAX_THREADS];
  int qhead, qcount;
  warp_state warps[32];
} block;

struct worker {
  unsigned char *map;         /* the mapping holding the fiber regions */
  size_t map_bytes;
  unsigned char *regions;     /* aligned to TGC_EMU_FIBER_BYTES */
  int nregions;
  unsigned char *smem;
  size_t smem_bytes;
  shadow_entry *shadow;
  size_t shadow_n;
  uint64_t epoch_counter;
  emu_fiber_ctx sched;
  block b;
};

static worker **workers;
static int nworkers;

static cuda_thread *thread_at(worker *w, int i) {
  return (cuda_thread *)(w->regions + (size_t)i * TGC_EMU_FIBER_BYTES);
}

/* ---- faults ---- */

static void record_fault(grid_state *g, cg_cu_result code, const char *detail) {
  pthread_mutex_lock(&g->lock);
  if (!atomic_load(&g->faulted)) {
    g->code = code;
    snprintf(g->detail, sizeof g->detail, "%s", detail);
    atomic_store(&g->faulted, 1);
  }
  pthread_mutex_unlock(&g->lock);
}

static void thread_coords(const block *b, unsigned int linear, unsigned int out[3]) {
  tgc_emu_dim3 d = b->l->block;
  out[0] = linear % d.x, out[1] = linear / d.x % d.y, out[2] = linear / (d.x * d.y);
}

/* Ends the block with a fault raised by thread ct; never returns. */
static void fault_thread(cuda_thread *ct, cg_cu_result code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static void fault_thread(cuda_thread *ct, cg_cu_result code, const char *fmt, ...) {
  block *b = ct->block;
  char msg[768], detail[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(detail, sizeof detail, "kernel %s block (%u,%u,%u) thread (%u,%u,%u): %s", b->l->function->kernel->name,
           b->idx.x, b->idx.y, b->idx.z, ct->t.thread_idx.x, ct->t.thread_idx.y, ct->t.thread_idx.z, msg);
  record_fault(b->g, code, detail);
  b->aborted = true;
  ct->status = ST_EXITED;
  rt_emu_fiber_switch(&ct->ctx, &b->w->sched, true);
  abort(); /* a finished fiber is never resumed */
}

static void host_fault(tgc_emu_thread *t, int cuda_error, const char *message) {
  fault_thread((cuda_thread *)t, (cg_cu_result)cuda_error, "%s", message);
}

/* ---- scheduling ---- */

static void push(block *b, int i) {
  b->queue[(b->qhead + b->qcount) % MAX_THREADS] = i;
  b->qcount++;
}

static void wake(block *b, cuda_thread *x, unsigned long long result, cuda_thread *self) {
  x->result = result;
  x->status = ST_RUNNABLE;
  if (x != self) push(b, (int)x->t.linear);
}

/* Waits until another thread makes ct runnable again. */
static void wait_here(cuda_thread *ct) { rt_emu_fiber_switch(&ct->ctx, &ct->block->w->sched, false); }

/* ---- barriers ---- */

static void release_barrier(block *b, cuda_thread *self) {
  int result = b->bar_acc;
  b->bar_arrived = 0;
  b->race_epoch = ++b->w->epoch_counter;
  for (int i = 0; i < b->nthreads; i++) {
    cuda_thread *x = thread_at(b->w, i);
    if (x->status == ST_BARRIER) wake(b, x, (unsigned long long)result, self);
  }
}

static int host_barrier(tgc_emu_thread *t, int op, int pred) {
  cuda_thread *ct = (cuda_thread *)t;
  block *b = ct->block;
  if (b->bar_arrived == 0) {
    b->bar_op = op;
    b->bar_acc = op == TGC_EMU_BAR_AND ? 1 : 0;
  } else if (b->bar_op != op) {
    fault_thread(ct, CG_CUDA_ERROR_LAUNCH_FAILED, "%s while other threads of the block wait in %s",
                 barrier_names[op], barrier_names[b->bar_op]);
  }
  if (op == TGC_EMU_BAR_COUNT) b->bar_acc += pred;
  else if (op == TGC_EMU_BAR_AND) b->bar_acc &= pred;
  else if (op == TGC_EMU_BAR_OR) b->bar_acc |= pred;
  b->bar_arrived++;
  ct->status = ST_BARRIER;
  ct->wait_op = op;
  if (b->bar_arrived == b->live) release_barrier(b, ct);
  else wait_here(ct);
  return (int)ct->result;
}

/* ---- warp collectives ---- */

/* The lane shfl reads from (PTX's shfl.sync: c = ((32 - width) << 8) | 31,
 * 0 for up), or lane itself when the source is out of range. */
static unsigned int shfl_source(int op, unsigned int lane, unsigned int b, int width) {
  unsigned int segmask = (unsigned int)(32 - width) & 31u;
  unsigned int cval = op == TGC_EMU_SHFL_UP ? 0u : 31u;
  int maxlane = (int)((lane & segmask) | (cval & ~segmask)), minlane = (int)(lane & segmask);
  b &= 31u;
  int j;
  bool in_range;
  switch (op) {
  case TGC_EMU_SHFL_UP: j = (int)lane - (int)b, in_range = j >= maxlane; break;
  case TGC_EMU_SHFL_DOWN: j = (int)(lane + b), in_range = j <= maxlane; break;
  case TGC_EMU_SHFL_XOR: j = (int)(lane ^ b), in_range = j <= maxlane; break;
  default: j = minlane | (int)(b & ~segmask), in_range = j <= maxlane; break;
  }
  return in_range ? (unsigned int)j : lane;
}

static unsigned long long lane_result(const warp_round *r, unsigned int lane) {
  unsigned int ballot = 0;
  switch (r->op) {
  case TGC_EMU_SHFL_IDX:
  case TGC_EMU_SHFL_UP:
  case TGC_EMU_SHFL_DOWN:
  case TGC_EMU_SHFL_XOR: {
    unsigned int src = shfl_source(r->op, lane, (unsigned int)r->arg[lane], r->width);
    /* a lane not in the round holds no value: undefined, here all ones */
    return (r->arrived >> src) & 1u ? r->value[src] : ~0ull;
  }
  case TGC_EMU_BALLOT:
  case TGC_EMU_ANY:
  case TGC_EMU_ALL:
    for (int j = 0; j < 32; j++)
      if ((r->arrived >> j) & 1u && r->value[j]) ballot |= 1u << j;
    return r->op == TGC_EMU_BALLOT ? ballot : r->op == TGC_EMU_ANY ? ballot != 0 : ballot == r->arrived;
  case TGC_EMU_REDUCE_ADD:
  case TGC_EMU_REDUCE_MIN:
  case TGC_EMU_REDUCE_MAX:
  case TGC_EMU_REDUCE_AND:
  case TGC_EMU_REDUCE_OR:
  case TGC_EMU_REDUCE_XOR: {
    bool first = true;
    uint32_t acc = 0;
    for (int j = 0; j < 32; j++) {
      if (!((r->arrived >> j) & 1u)) continue;
      uint32_t v = (uint32_t)r->value[j];
      if (first) acc = v, first = false;
      else if (r->op == TGC_EMU_REDUCE_ADD) acc += v;
      else if (r->op == TGC_EMU_REDUCE_AND) acc &= v;
      else if (r->op == TGC_EMU_REDUCE_OR) acc |= v;
      else if (r->op == TGC_EMU_REDUCE_XOR) acc ^= v;
      else {
        bool less = r->arg0 ? (int32_t)v < (int32_t)acc : v < acc;
        if (r->op == TGC_EMU_REDUCE_MIN ? less : !less && v != acc) acc = v;
      }
    }
    return acc;
  }
  case TGC_EMU_MATCH_ANY: {
    unsigned int m = 0;
    for (int j = 0; j < 32; j++)
      if ((r->arrived >> j) & 1u && r->value[j] == r->value[lane]) m |= 1u << j;
    return m;
  }
  default: return 0;
  }
}

static void complete_round(block *b, int warp, warp_round *r, cuda_thread *self) {
  warp_state *ws = &b->warps[warp];
  if (r->op == OP_GATHER) {
    for (int l = 0; l < 32; l++) {
      if (!((r->arrived >> l) & 1u)) continue;
      for (int j = 0; j < 32; j++) {
        unsigned char *to = (unsigned char *)r->dst[l] + (size_t)j * r->bytes;
        if ((r->arrived >> j) & 1u) memcpy(to, r->src[j], r->bytes);
        else memset(to, 0xff, r->bytes);
      }
    }
  }
  if (r->op == TGC_EMU_SYNCWARP) ws->sync_epoch++;
  r->used = false;
  for (int l = 0; l < 32; l++)
    if ((r->arrived >> l) & 1u) wake(b, thread_at(b->w, warp * 32 + l), lane_result(r, (unsigned int)l), self);
}

/* Completes the rounds of a warp that no longer wait for anyone. */
static void check_rounds(block *b, int warp, cuda_thread *self) {
  warp_state *ws = &b->warps[warp];
  for (int i = 0; i < 32; i++) {
    warp_round *r = &ws->rounds[i];
    if (r->used && r->arrived == (r->mask & ws->live)) complete_round(b, warp, r, self);
  }
}

static unsigned long long join_round(cuda_thread *ct, int op, unsigned int mask, unsigned long long value, int arg,
                                     int width, const void *src, void *dst, unsigned int bytes) {
  block *b = ct->block;
  unsigned int lane = ct->t.lane, bit = 1u << lane;
  int warp = (int)ct->t.warp;
  const char *name = warp_op_names[op];
  if (!(mask & bit))
    fault_thread(ct, CG_CUDA_ERROR_LAUNCH_FAILED, "%s with mask 0x%08x, which leaves out the calling lane %u", name,
                 mask, lane);
  if (width < 1 || width > 32 || (width & (width - 1)))
    fault_thread(ct, CG_CUDA_ERROR_LAUNCH_FAILED, "%s with width %d (a power of two up to 32 is needed)", name,
                 width);
  warp_state *ws = &b->warps[warp];
  warp_round *r = NULL, *free_round = NULL;
  for (int i = 0; i < 32 && !r; i++) {
    warp_round *x = &ws->rounds[i];
    if (x->used && x->mask == mask && !(x->arrived & bit)) r = x;
    else if (!x->used && !free_round) free_round = x;
  }
  if (r && (r->op != op || r->width != width || (op >= TGC_EMU_REDUCE_ADD && r->arg0 != arg))) {
    unsigned int other = (unsigned int)__builtin_ctz(r->arrived);
    fault_thread(ct, CG_CUDA_ERROR_LAUNCH_FAILED,
                 "%s (width %d) while lane %u of the same mask 0x%08x is in %s (width %d)", name, width, other,
                 mask, warp_op_names[r->op], r->width);
  }
  if (!r) {
    r = free_round; /* a lane is in at most one round: 32 always suffice */
    r->used = true, r->op = op, r->width = width, r->arg0 = arg, r->mask = mask, r->arrived = 0;
  }
  r->value[lane] = value, r->arg[lane] = arg;
  r->src[lane] = src, r->dst[lane] = dst, r->bytes = bytes;
  r->arrived |= bit;
  ct->status = ST_WARP;
  ct->wait_op = op;
  ct->wait_mask = mask;
  if (r->arrived == (mask & ws->live)) complete_round(b, warp, r, ct);
  else wait_here(ct);
  return ct->result;
}

static unsigned long long host_warp(tgc_emu_thread *t, int op, unsigned int mask, unsigned long long value, int arg,
                                    int width) {
  cuda_thread *ct = (cuda_thread *)t;
  if (op < 0 || op >= TGC_EMU_NUM_WARP_OPS)
    fault_thread(ct, CG_CUDA_ERROR_LAUNCH_FAILED, "unknown warp operation %d (a module of another emulator?)", op);
  return join_round(ct, op, mask, value, arg, width, NULL, NULL, 0);
}

static void host_warp_gather(tgc_emu_thread *t, unsigned int mask, const void *mine, void *all, unsigned int bytes) {
  join_round((cuda_thread *)t, OP_GATHER, mask, 0, 0, 32, mine, all, bytes);
}

static unsigned int host_activemask(tgc_emu_thread *t) {
  cuda_thread *ct = (cuda_thread *)t;
  return ct->block->warps[ct->t.warp].live;
}

/* ---- racecheck ---- */

static const char *const access_names[] = {"", "read", "write", "atomic"};

static void report_race(cuda_thread *ct, const tgc_emu_shared *s, unsigned long long index, int first_kind,
                        int first_tid, int kind) {
  block *b = ct->block;
  unsigned int a[3], c[3];
  thread_coords(b, (unsigned int)first_tid, a);
  thread_coords(b, ct->t.linear, c);
  char line[512];
  snprintf(line, sizeof line,
           "racecheck: kernel %s block (%u,%u,%u): shared array '%s' index %llu: %s by thread (%u,%u,%u), then %s by "
           "thread (%u,%u,%u), with no barrier between them",
           b->l->function->kernel->name, b->idx.x, b->idx.y, b->idx.z, s->name, index, access_names[first_kind], a[0],
           a[1], a[2], access_names[kind], c[0], c[1], c[2]);
  pthread_mutex_lock(&b->g->lock);
  rt_emu_race_report(line);
  pthread_mutex_unlock(&b->g->lock);
}

/* Whether an earlier access by tid (made when its warp had completed
 * wepoch __syncwarp rounds) happens before one by ct. */
static bool ordered(const cuda_thread *ct, int32_t tid, uint32_t wepoch) {
  return (unsigned int)tid / 32 == ct->t.warp && wepoch != ct->block->warps[ct->t.warp].sync_epoch;
}

static void host_shared_access(tgc_emu_thread *t, const tgc_emu_shared *s, unsigned long long index, int kind) {
  cuda_thread *ct = (cuda_thread *)t;
  block *b = ct->block;
  worker *w = b->w;
  if (!b->l->racecheck) return;
  size_t off = (size_t)(s->offset + index * s->elem_bytes);
  if (off >= w->shadow_n) return;
  shadow_entry *e = &w->shadow[off];
  if (e->epoch != b->race_epoch) {
    e->epoch = b->race_epoch;
    e->w_tid = e->r1_tid = e->r2_tid = -1;
    e->w_atomic = 0;
  }
  int32_t me = (int32_t)ct->t.linear;
  uint32_t mine = b->warps[ct->t.warp].sync_epoch;
  /* against the last write */
  if (e->w_tid >= 0 && e->w_tid != me && !ordered(ct, e->w_tid, e->w_wepoch) &&
      !(kind == TGC_EMU_ATOMIC && e->w_atomic))
    report_race(ct, s, index, e->w_atomic ? TGC_EMU_ATOMIC : TGC_EMU_WRITE, e->w_tid, kind);
  /* a write against the reads */
  else if (kind != TGC_EMU_READ) {
    if (e->r1_tid >= 0 && e->r1_tid != me && !ordered(ct, e->r1_tid, e->r1_wepoch))
      report_race(ct, s, index, TGC_EMU_READ, e->r1_tid, kind);
    else if (e->r2_tid >= 0 && e->r2_tid != me && !ordered(ct, e->r2_tid, e->r2_wepoch))
      report_race(ct, s, index, TGC_EMU_READ, e->r2_tid, kind);
  }
  if (kind == TGC_EMU_READ) {
    if (e->r1_tid < 0 || e->r1_tid == me) e->r1_tid = me, e->r1_wepoch = mine;
    else e->r2_tid = me, e->r2_wepoch = mine; /* two distinct readers are enough to find any writer's hazard */
  } else {
    e->w_tid = me, e->w_wepoch = mine, e->w_atomic = kind == TGC_EMU_ATOMIC;
  }
}

static const tgc_emu_host host = {host_barrier, host_warp, host_warp_gather, host_activemask, host_shared_access,
                                  host_fault};

/* ---- running a block ---- */

static void thread_main(void *arg) {
  cuda_thread *ct = arg;
  block *b = ct->block;
  rt_emu_fiber_entered(&ct->ctx, &b->w->sched);
  b->l->function->kernel->invoke(b->l->params);
  /* exit: counts as arrived at a pending barrier, leaves its warp */
  ct->status = ST_EXITED;
  b->live--;
  b->warps[ct->t.warp].live &= ~(1u << ct->t.lane);
  if (b->bar_arrived > 0 && b->bar_arrived == b->live) release_barrier(b, NULL);
  check_rounds(b, (int)ct->t.warp, NULL);
  rt_emu_fiber_switch(&ct->ctx, &b->w->sched, true);
  abort();
}

static void deadlock(block *b) {
  int at_barrier = 0, at_warp = 0, first_bar = -1, first_warp = -1;
  for (int i = 0; i < b->nthreads; i++) {
    cuda_thread *x = thread_at(b->w, i);
    if (x->status == ST_BARRIER) at_barrier++, first_bar = first_bar < 0 ? i : first_bar;
    if (x->status == ST_WARP) at_warp++, first_warp = first_warp < 0 ? i : first_warp;
  }
  char detail[1024], part[400];
  int n = snprintf(detail, sizeof detail, "kernel %s block (%u,%u,%u): deadlock:", b->l->function->kernel->name,
                   b->idx.x, b->idx.y, b->idx.z);
  if (at_barrier) {
    unsigned int c[3];
    cuda_thread *x = thread_at(b->w, first_bar);
    thread_coords(b, (unsigned int)first_bar, c);
    snprintf(part, sizeof part, " %d thread%s wait%s in %s (first: thread (%u,%u,%u))", at_barrier,
             at_barrier == 1 ? "" : "s", at_barrier == 1 ? "s" : "", barrier_names[x->wait_op], c[0], c[1], c[2]);
    n += snprintf(detail + n, sizeof detail - (size_t)n, "%s", part);
  }
  if (at_warp) {
    unsigned int c[3];
    cuda_thread *x = thread_at(b->w, first_warp);
    thread_coords(b, (unsigned int)first_warp, c);
    snprintf(part, sizeof part, "%s %d thread%s wait%s in a warp collective (first: thread (%u,%u,%u) in %s, mask 0x%08x)",
             at_barrier ? ";" : "", at_warp, at_warp == 1 ? "" : "s", at_warp == 1 ? "s" : "", c[0], c[1], c[2],
             warp_op_names[x->wait_op], x->wait_mask);
    n += snprintf(detail + n, sizeof detail - (size_t)n, "%s", part);
  }
  snprintf(detail + n, sizeof detail - (size_t)n,
           "; every thread of a block must reach each barrier, every lane of a mask each warp collective");
  record_fault(b->g, CG_CUDA_ERROR_LAUNCH_FAILED, detail);
  b->aborted = true;
}

static void run_block(worker *w, grid_state *g, tgc_emu_dim3 idx) {
  const emu_launch *l = g->l;
  block *b = &w->b;
  b->w = w, b->g = g, b->l = l, b->idx = idx;
  b->nthreads = (int)(l->block.x * l->block.y * l->block.z);
  b->live = b->nthreads;
  b->nwarps = (b->nthreads + 31) / 32;
  b->bar_arrived = 0;
  b->aborted = false;
  b->qhead = b->qcount = 0;
  b->race_epoch = ++w->epoch_counter;
  const tgc_emu_kernel *k = l->function->kernel;
  unsigned char *dyn = w->smem + k->dyn_offset;
  size_t smem_used = (size_t)k->dyn_offset + l->dynamic_smem;
  memset(w->smem, 0xff, smem_used); /* uninitialized shared memory reads as NaN */
  for (int wi = 0; wi < b->nwarps; wi++) {
    int lanes = b->nthreads - wi * 32 < 32 ? b->nthreads - wi * 32 : 32;
    warp_state *ws = &b->warps[wi];
    ws->exists = ws->live = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
    ws->sync_epoch = 0;
    for (int r = 0; r < 32; r++) ws->rounds[r].used = false;
  }
  for (int i = 0; i < b->nthreads; i++) {
    cuda_thread *ct = thread_at(w, i);
    memset(ct, 0, sizeof *ct);
    unsigned int c[3];
    thread_coords(b, (unsigned int)i, c);
    ct->t.thread_idx = (tgc_emu_dim3){c[0], c[1], c[2]};
    ct->t.block_idx = idx, ct->t.block_dim = l->block, ct->t.grid_dim = l->grid;
    ct->t.linear = (unsigned int)i, ct->t.lane = (unsigned int)i % 32, ct->t.warp = (unsigned int)i / 32;
    ct->t.smem = w->smem, ct->t.dyn_smem = dyn;
    ct->t.host = &host, ct->t.kernel = k;
    ct->block = b;
    ct->status = ST_RUNNABLE;
    unsigned char *stack = (unsigned char *)ct + 2 * PAGE;
    size_t stack_bytes = TGC_EMU_FIBER_BYTES - 2 * PAGE;
    rt_emu_stack_unpoison(stack, stack_bytes);
    rt_emu_fiber_init(&ct->ctx, stack, stack_bytes, thread_main, ct);
    push(b, i);
  }
  while (b->qcount > 0 && !b->aborted) {
    int i = b->queue[b->qhead];
    b->qhead = (b->qhead + 1) % MAX_THREADS;
    b->qcount--;
    cuda_thread *ct = thread_at(w, i);
    if (ct->status != ST_RUNNABLE) continue;
    rt_emu_fiber_switch(&w->sched, &ct->ctx, false);
    if (atomic_load(&g->faulted)) b->aborted = true;
  }
  if (!b->aborted && b->live > 0) deadlock(b);
}

/* ---- workers ---- */

/* Unmaps the fiber stacks, unpoisoning their shadow first: ASan keeps the
 * stack poisoning of an unmapped range, and a module dlopen'd later into the
 * same addresses would see false stack-buffer errors in its globals. */
static void unmap_stacks(worker *w) {
  if (!w->map) return;
  rt_emu_stack_unpoison(w->map, w->map_bytes);
  munmap(w->map, w->map_bytes);
  w->map = NULL;
}

static void worker_free(worker *w) {
  if (!w) return;
  unmap_stacks(w);
  free(w->smem);
  free(w->shadow);
  free(w);
}

/* Makes w able to run blocks of nthreads threads and smem bytes. */
static int worker_reserve(worker *w, int nthreads, size_t smem, bool racecheck) {
  if (w->nregions < nthreads) {
    unmap_stacks(w);
    size_t bytes = (size_t)nthreads * TGC_EMU_FIBER_BYTES + TGC_EMU_FIBER_BYTES;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return -1;
    w->map = m, w->map_bytes = bytes;
    uintptr_t a = ((uintptr_t)m + TGC_EMU_FIBER_BYTES - 1) & ~(uintptr_t)(TGC_EMU_FIBER_BYTES - 1);
    w->regions = (unsigned char *)a;
    w->nregions = nthreads;
    for (int i = 0; i < nthreads; i++) /* the guard page between the state and the stack */
      if (mprotect(w->regions + (size_t)i * TGC_EMU_FIBER_BYTES + PAGE, PAGE, PROT_NONE) != 0) return -1;
  }
  if (w->smem_bytes < smem || !w->smem) {
    free(w->smem);
    w->smem = malloc(smem ? smem : 16);
    if (!w->smem) return -1;
    w->smem_bytes = smem;
  }
  if (racecheck && w->shadow_n < smem) {
    free(w->shadow);
    w->shadow = calloc(smem, sizeof *w->shadow);
    if (!w->shadow) return -1;
    w->shadow_n = smem;
  }
  return 0;
}

cg_cu_result rt_emu_exec_grid(const emu_launch *l, char *detail, size_t len) {
  grid_state g;
  memset(&g, 0, sizeof g);
  g.l = l;
  atomic_init(&g.faulted, 0);
  g.code = CG_CUDA_SUCCESS;
  pthread_mutex_init(&g.lock, NULL);
  long long nblocks = (long long)l->grid.x * l->grid.y * l->grid.z;
  int nthreads = (int)(l->block.x * l->block.y * l->block.z);
  size_t smem = (size_t)l->function->kernel->dyn_offset + l->dynamic_smem;
  int T = l->threads > 0 ? l->threads : omp_get_max_threads();
  if ((long long)T > nblocks) T = (int)nblocks;
  if (T < 1) T = 1;
  if (T > nworkers) {
    worker **nw = realloc(workers, (size_t)T * sizeof *nw);
    if (!nw) {
      snprintf(detail, len, "out of host memory for %d emulator workers", T);
      return CG_CUDA_ERROR_OUT_OF_MEMORY;
    }
    workers = nw;
    for (int i = nworkers; i < T; i++) workers[i] = calloc(1, sizeof(worker));
    nworkers = T;
  }
  for (int i = 0; i < T; i++) {
    if (!workers[i] || worker_reserve(workers[i], nthreads, smem, l->racecheck) != 0) {
      snprintf(detail, len, "out of host memory for the stacks of %d threads", nthreads);
      return CG_CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  unsigned int gx = l->grid.x, gy = l->grid.y;
#pragma omp parallel for num_threads(T) schedule(dynamic, 1)
  for (long long i = 0; i < nblocks; i++) {
    if (atomic_load(&g.faulted)) continue;
    tgc_emu_dim3 idx = {(unsigned int)(i % gx), (unsigned int)(i / gx % gy), (unsigned int)(i / ((long long)gx * gy))};
    run_block(workers[omp_get_thread_num()], &g, idx);
  }
  pthread_mutex_destroy(&g.lock);
  if (g.code != CG_CUDA_SUCCESS) snprintf(detail, len, "%s", g.detail);
  return g.code;
}

void rt_emu_exec_free(void) {
  for (int i = 0; i < nworkers; i++) worker_free(workers[i]);
  free(workers);
  workers = NULL;
  nworkers = 0;
}
