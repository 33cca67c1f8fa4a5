/* runtime/cuda/backend.c — the `cuda` and `cuda-emu` backends: one
 * rt_backend implementation over the CUDA entry-point table, filled from
 * the real libraries (rt_cuda_load) or by the emulator (rt_cuda_emu_load).
 * Nothing below the open function knows which: the emulator runs the same
 * calls, the same generated CUDA C and the same cuBLASLt descriptors.
 *
 *   open      load the table (cuda: libcuda, libnvrtc, libcublasLt; the
 *             messages "no CUDA driver: libcuda.so.1 not found", "no CUDA
 *             device", "CUDA driver too old: ..." come from rt_cuda.h),
 *             open device --device N, create the cuBLASLt handle, open the
 *             disk cache ($TGC_CACHE_DIR, default ~/.cache/tgc). cuda-emu:
 *             the emulator is configured from the environment (TGC_EMU_*),
 *             with racecheck when the device options ask for it; devices
 *             opened together share it.
 *   memory    cuMemAlloc after cuMemGetInfo: a request beyond the free
 *             memory is refused before allocating, naming both numbers;
 *             copies and memsets on the default stream; fills of 2-, 4-
 *             and 8-byte patterns by a small kernel (no transfer);
 *             page-locked host memory (cuMemHostAlloc) for the trainer's
 *             batch, uploaded by cuMemcpyHtoDAsync on the kernels' stream
 *             with an event the host waits on before writing it again.
 *   prepare   cg_lower (the plan's steps to kernels, products, copies),
 *             compile the program's CUDA C for the device's arch through
 *             the table's NVRTC with the disk cache (a second run of the
 *             same model compiles nothing) in parts of about 16 kernels on
 *             a pool of threads (TGC_COMPILE_THREADS, default the online
 *             CPUs up to 16; codegen/parts.c), load each part as a module,
 *             look up every kernel in its part's, plan every product
 *             (blaslt.c), allocate the program's workspace.
 *   run       a kernel action of the executor's program (its plan step:
 *             the lowered step of the same index): the step's launches
 *             with the addresses of the action's tensors, products,
 *             copies, memsets. Every call is checked;
 *             a failure names the call, CUDA's error name and string, the
 *             kernel and its IR value (the executor adds the .tg line).
 *             cuda-emu synchronizes after each launch, so a kernel fault
 *             (a trap, a misaligned access, a racecheck hazard) is named at
 *             its own kernel; on a GPU launches are asynchronous and a
 *             fault surfaces at a later call (TGC_CUDA_SYNC=1 makes every
 *             launch synchronous to find it).
 *   graphs    the actions run on a stream the device creates (capture
 *             needs one; it is blocking, so the legacy stream's uploads,
 *             downloads and NCCL calls stay ordered with it). A program's
 *             first run runs its actions; its second is captured as a
 *             CUDA graph (cuStreamBeginCapture .. cuStreamEndCapture,
 *             cuGraphInstantiate) and launched; each later run is one
 *             cuGraphLaunch. What changes between steps reaches the graph
 *             through device memory (the batch, the learning rate, the step
 *             number, the dropout key and the loss scale are tensors the
 *             trainer uploads into the same buffers every step); the
 *             addresses the actions bind are compared with the capture's
 *             at every run, and a run whose tensors moved (the trainer
 *             rebinding parameters to other buffers) is captured again,
 *             up to GRAPH_SLOTS sets kept per program (a program that
 *             has needed 2 x GRAPH_SLOTS captures runs directly when its
 *             addresses change again). Collectives are not captured: a
 *             program is cut at them (pieces, by analysis's
 *             pass_graph_pieces: the rule `tgc stats` counts graph
 *             launches by), each segment between two is its own graph,
 *             and the collective runs as an action between the
 *             launches (the comm layer's NCCL call on its own stream,
 *             after an event on the legacy stream, which waits for the
 *             segment's graph; a gradient bucket is left in flight, and
 *             before launching or capturing a segment the executor's join
 *             makes the legacy stream wait for the buckets whose bytes
 *             the segment touches: docs/cuda.md). Nothing is captured
 *             when TGC_CUDA_GRAPH=0, TGC_CUDA_SYNC=1 or TGC_CUDA_PROFILE=1
 *             (they time or synchronize each action). Host reads (the loss, the
 *             non-finite count) are the trainer's, after the run.
 *   stats     TGC_CUDA_STATS=1: at close, the device's counts on stderr
 *             (programs, direct runs, graph captures and launches, kernel
 *             launches and products the host issued).
 *   profile   TGC_CUDA_PROFILE=1: the device is synchronized before and
 *             after every action (launch, product, copy, memset), the wall
 *             time between is added to the action's class (the node's op
 *             and value's name, digits as '#' so that the layers of a
 *             repeat share one, and the kernel's name or the product's
 *             m x n x k), and at close the classes are printed to stderr
 *             by time, with their launches and products. A synchronization
 *             costs a few microseconds; the sum beside the step time shows
 *             the host's share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_internal.h"
#include "comm/comm.h"
#include "ir_clock.h"

enum { LT_WORKSPACE_GPU = 32 << 20, LT_WORKSPACE_EMU = 64 << 10 };

/* ---- checks ---- */

static bool is_kernel_fault(cg_cu_result r) {
  return r == CG_CUDA_ERROR_LAUNCH_FAILED || r == CG_CUDA_ERROR_ILLEGAL_ADDRESS || r == CG_CUDA_ERROR_MISALIGNED_ADDRESS ||
         r == 710 /* ASSERT */ || r == 714 /* HARDWARE_STACK_ERROR */ || r == 715 /* ILLEGAL_INSTRUCTION */ ||
         r == 717 /* INVALID_ADDRESS_SPACE */ || r == 718 /* INVALID_PC */;
}

int cuda_check(cuda_ctx *x, cg_cu_result r, const char *call, const char *context, char *err, size_t errlen) {
  if (cg_cu_check(&x->api, r, call, context, err, errlen) == 0) return 0;
  if (is_kernel_fault(r) && !x->sync && x->last_kernel[0]) {
    size_t n = strlen(err);
    snprintf(err + n, errlen - n, " (a kernel fault surfaces at the first call after it; the last launch was %s: "
                                  "run with TGC_CUDA_SYNC=1 to name the kernel that faulted)", x->last_kernel);
  }
  return -1;
}

/* ---- the emulator, shared by the cuda-emu devices open at one time ---- */

static int emu_users;
static bool emu_racecheck;
static cg_cuda_api emu_api;

static int emu_acquire(cuda_ctx *x, bool racecheck, char *err, size_t errlen) {
  if (emu_users > 0) {
    if (racecheck != emu_racecheck) {
      cg_errf(err, errlen, "cuda-emu is already open with racecheck %s: every device open at one time shares it",
              emu_racecheck ? "on" : "off");
      return -1;
    }
  } else {
    rt_cuda_emu_config cfg;
    if (rt_cuda_emu_config_init(&cfg, err, errlen) != 0) return -1;
    cfg.racecheck = cfg.racecheck || racecheck;
    if (rt_cuda_emu_load(&emu_api, &cfg, err, errlen) != 0) return -1;
    emu_racecheck = cfg.racecheck;
  }
  emu_users++;
  x->api = emu_api;
  return 0;
}

static void emu_release(void) {
  if (emu_users > 0 && --emu_users == 0) rt_cuda_emu_shutdown();
}

/* ---- open / close ---- */

static void cuda_close(rt_device *d);

/* ---- profile (TGC_CUDA_PROFILE=1) ---- */

enum { PROFILE_CLASSES = 1024 };
typedef struct {
  char key[120];
  int64_t calls, launches, gemms;
  double seconds;
} profile_class;
struct cuda_profile {
  int n;
  profile_class c[PROFILE_CLASSES];
};

static void profile_add(cuda_ctx *x, const ir_node *n, const char *what, double seconds, int64_t launches,
                        int64_t gemms) {
  char key[120];
  /* digits as '#' in the node's names and the kernel's (a repeat's layers
   * share a class), not in a product's m x n x k */
  bool keep = strncmp(what, "gemm ", 5) == 0;
  int len = snprintf(key, sizeof key, "%s %s: %s", ir_op_name(n->op), n->n_out ? n->out[0]->name : "", what);
  int end = keep ? len - (int)strlen(what) : len;
  for (int i = 0; i < end && key[i]; i++)
    if (key[i] >= '0' && key[i] <= '9') {
      int j = i;
      while (key[j] >= '0' && key[j] <= '9') j++;
      key[i] = '#';
      memmove(key + i + 1, key + j, strlen(key + j) + 1);
      end -= j - i - 1;
    }
  struct cuda_profile *p = x->profile;
  int k = 0;
  while (k < p->n && strcmp(p->c[k].key, key) != 0) k++;
  if (k == p->n) {
    if (p->n == PROFILE_CLASSES) k = p->n - 1, snprintf(p->c[k].key, sizeof p->c[k].key, "(other)");
    else snprintf(p->c[p->n++].key, sizeof p->c[k].key, "%s", key);
  }
  p->c[k].calls++;
  p->c[k].launches += launches;
  p->c[k].gemms += gemms;
  p->c[k].seconds += seconds;
}

static int profile_cmp(const void *a, const void *b) {
  double x = ((const profile_class *)a)->seconds, y = ((const profile_class *)b)->seconds;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void profile_print(cuda_ctx *x) {
  struct cuda_profile *p = x->profile;
  double total = 0;
  for (int k = 0; k < p->n; k++) total += p->c[k].seconds;
  qsort(p->c, (size_t)p->n, sizeof p->c[0], profile_cmp);
  fprintf(stderr, "cuda profile (TGC_CUDA_PROFILE=1): %.3f s in nodes, %d classes, by time:\n", total, p->n);
  fprintf(stderr, "  %10s %6s %8s %9s %7s  %s\n", "ms", "%", "calls", "launches", "gemms", "op value");
  for (int k = 0; k < p->n && k < 60; k++)
    fprintf(stderr, "  %10.3f %5.1f%% %8lld %9lld %7lld  %s\n", 1e3 * p->c[k].seconds,
            total > 0 ? 100 * p->c[k].seconds / total : 0, (long long)p->c[k].calls, (long long)p->c[k].launches,
            (long long)p->c[k].gemms, p->c[k].key);
}

static bool env_on(const char *name) {
  const char *v = getenv(name);
  return v && strcmp(v, "1") == 0;
}

static int open_common(rt_device *d, bool emu, char *err, size_t errlen) {
  cuda_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  d->impl = x;
  x->emu = emu;
  int rc = emu ? emu_acquire(x, d->opts.racecheck, err, errlen)
               : rt_cuda_load(&x->api, CG_CUDA_LIB_DRIVER | CG_CUDA_LIB_NVRTC | CG_CUDA_LIB_CUBLASLT, err, errlen);
  if (rc != 0) {
    if (!emu) rt_cuda_unload(&x->api);
    free(x);
    d->impl = NULL;
    return -1;
  }
  int ordinal = emu ? d->opts.index : rt_cuda_rank_device(d->opts.index);
  if (rt_cuda_open_device(&x->api, ordinal, &x->dev, err, errlen) != 0) {
    if (ordinal != d->opts.index) {
      size_t len = strlen(err);
      snprintf(err + len, errlen - len, " (--device %d counted from this rank's node-local rank %d)", d->opts.index,
               ordinal - d->opts.index);
    }
    cuda_close(d);
    return -1;
  }
  if (CG_CUBLAS(&x->api, NULL, err, errlen, cublasLtCreate, &x->lt)) {
    cuda_close(d);
    return -1;
  }
  x->sync = emu || env_on("TGC_CUDA_SYNC");
  x->no_epilogues = env_on("TGC_CUDA_NO_EPILOGUES");
  if (env_on("TGC_CUDA_PROFILE")) x->profile = calloc(1, sizeof *x->profile);
  const char *graphs = getenv("TGC_CUDA_GRAPH");
  x->graphs = !(graphs && strcmp(graphs, "0") == 0) && !env_on("TGC_CUDA_SYNC") && !x->profile;
  if (x->graphs && CUDA_CALL(x, "the program stream", err, errlen, cuStreamCreate, &x->stream, CG_CU_STREAM_DEFAULT)) {
    cuda_close(d);
    return -1;
  }
  char ignored[512];
  x->cache = cg_cache_open(NULL, ignored, sizeof ignored); /* without one every run compiles */
  return 0;
}

int rt_cuda_rank_device(int index) { return rt_comm_under_launcher() ? index + rt_comm_local_rank() : index; }

static int cuda_open(rt_device *d, char *err, size_t errlen) { return open_common(d, false, err, errlen); }
static int cuda_emu_open(rt_device *d, char *err, size_t errlen) { return open_common(d, true, err, errlen); }

static void cuda_close(rt_device *d) {
  cuda_ctx *x = d->impl;
  if (!x) return;
  if (x->profile) {
    profile_print(x);
    free(x->profile);
  }
  if (env_on("TGC_CUDA_STATS")) {
    const rt_cuda_backend_stats *st = &x->stats;
    fprintf(stderr, "cuda stats: %lld programs, %lld direct runs, %lld graph captures, %lld graph launches, %lld "
            "kernel launches, %lld products\n", (long long)st->programs, (long long)st->direct_runs,
            (long long)st->graph_captures, (long long)st->graph_launches, (long long)st->launches, (long long)st->gemms);
  }
  if (x->fill_module) x->api.cuModuleUnload(x->fill_module);
  if (x->upload_done) x->api.cuEventDestroy(x->upload_done);
  if (x->stream) x->api.cuStreamDestroy(x->stream);
  if (x->lt_workspace) x->api.cuMemFree(x->lt_workspace);
  if (x->lt) x->api.cublasLtDestroy(x->lt);
  if (x->dev.context) rt_cuda_close_device(&x->api, &x->dev);
  cg_cache_free(x->cache);
  if (x->emu) emu_release();
  else rt_cuda_unload(&x->api);
  free(x);
  d->impl = NULL;
}

int rt_cuda_backend_stats_of(const struct rt_device *d, rt_cuda_backend_stats *s) {
  if (!d || (d->backend != &rt_cuda_backend && d->backend != &rt_cuda_emu_backend) || !d->impl) return -1;
  *s = ((const cuda_ctx *)d->impl)->stats;
  return 0;
}

/* ---- memory ---- */

static cg_cu_deviceptr dptr(const void *p) { return (cg_cu_deviceptr)(uintptr_t)p; }

/* cuMemAlloc of bytes, refused before allocating when more than the free memory. */
static int device_alloc(cuda_ctx *x, size_t bytes, cg_cu_deviceptr *p, const char *what, char *err, size_t errlen) {
  size_t free_b = 0, total_b = 0;
  if (CUDA_CALL(x, what, err, errlen, cuMemGetInfo, &free_b, &total_b)) return -1;
  if (bytes > free_b) {
    cg_errf(err, errlen, "out of device memory: %s of %zu bytes, device %d (%s) has %zu bytes free of %zu (refused before allocating)",
            what, bytes, x->dev.ordinal, x->dev.name, free_b, total_b);
    return -1;
  }
  return CUDA_CALL(x, what, err, errlen, cuMemAlloc, p, bytes ? bytes : 1);
}

static int cuda_alloc(rt_device *d, size_t bytes, void **ptr, char *err, size_t errlen) {
  cg_cu_deviceptr p = 0;
  *ptr = NULL;
  if (device_alloc(d->impl, bytes, &p, "an allocation", err, errlen) != 0) return -1;
  *ptr = (void *)(uintptr_t)p;
  return 0;
}

static void cuda_free(rt_device *d, void *ptr) {
  cuda_ctx *x = d->impl;
  if (ptr) x->api.cuMemFree(dptr(ptr));
}

static int cuda_upload(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen) {
  return CUDA_CALL((cuda_ctx *)d->impl, "an upload", err, errlen, cuMemcpyHtoD, dptr(dst), src, n);
}

/* ---- page-locked host memory and asynchronous uploads ----
 * The trainer's batch goes up from cuMemHostAlloc memory by
 * cuMemcpyHtoDAsync on the stream the kernels run on (the legacy one), so
 * the host prepares the next batch while the device works; an event
 * recorded after each such upload is what host_wait waits for before the
 * host writes the memory again (on a GPU the copy reads it when its turn
 * comes). TGC_CUDA_PINNED=0: no page-locked memory (pageable uploads). */

static int cuda_host_alloc(rt_device *d, size_t bytes, void **ptr, char *err, size_t errlen) {
  cuda_ctx *x = d->impl;
  *ptr = NULL;
  const char *v = getenv("TGC_CUDA_PINNED");
  if (v && strcmp(v, "0") == 0) return 0;
  if (CUDA_CALL(x, "page-locked host memory", err, errlen, cuMemHostAlloc, ptr, bytes, 0)) return -1;
  x->stats.host_buffers++;
  return 0;
}

static void cuda_host_free(rt_device *d, void *ptr) {
  cuda_ctx *x = d->impl;
  if (ptr) x->api.cuMemFreeHost(ptr);
}

static int cuda_upload_async(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen) {
  cuda_ctx *x = d->impl;
  if (!x->upload_done && CUDA_CALL(x, "an asynchronous upload", err, errlen, cuEventCreate, &x->upload_done,
                                   CG_CU_EVENT_DISABLE_TIMING))
    return -1;
  if (CUDA_CALL(x, "an asynchronous upload", err, errlen, cuMemcpyHtoDAsync, dptr(dst), src, n, NULL) ||
      CUDA_CALL(x, "an asynchronous upload", err, errlen, cuEventRecord, x->upload_done, NULL))
    return -1;
  x->upload_pending = true;
  x->stats.async_uploads++;
  return 0;
}

static int cuda_host_wait(rt_device *d, char *err, size_t errlen) {
  cuda_ctx *x = d->impl;
  if (!x->upload_pending) return 0;
  x->upload_pending = false;
  return CUDA_CALL(x, "waiting for the asynchronous uploads", err, errlen, cuEventSynchronize, x->upload_done);
}

static int cuda_download(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen) {
  return CUDA_CALL((cuda_ctx *)d->impl, "a download", err, errlen, cuMemcpyDtoH, dst, dptr(src), n);
}

static int cuda_copy(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen) {
  cuda_ctx *x = d->impl;
  x->stats.copies++;
  return CUDA_CALL(x, "a device copy", err, errlen, cuMemcpyDtoD, dptr(dst), dptr(src), n);
}

static const char *const fill_source =
    "// the cuda backends' fills of 2-, 4- and 8-byte patterns (runtime/cuda/backend.c)\n"
    "#include \"tgc_cuda.h\"\n"
    "extern \"C\" __global__ void tgc_fill_2(unsigned short *p, unsigned short v, long long n) {\n"
    "  TGC_GRID_STRIDE_LOOP(i, n) p[i] = v;\n}\nTGC_REGISTER(tgc_fill_2)\n"
    "extern \"C\" __global__ void tgc_fill_4(unsigned int *p, unsigned int v, long long n) {\n"
    "  TGC_GRID_STRIDE_LOOP(i, n) p[i] = v;\n}\nTGC_REGISTER(tgc_fill_4)\n"
    "extern \"C\" __global__ void tgc_fill_8(unsigned long long *p, unsigned long long v, long long n) {\n"
    "  TGC_GRID_STRIDE_LOOP(i, n) p[i] = v;\n}\nTGC_REGISTER(tgc_fill_8)\n";

static int load_fill_module(cuda_ctx *x, char *err, size_t errlen) {
  cg_cuda_source src = {"tgc_fill.cu", fill_source, x->dev.arch, NULL, 0};
  cg_cuda_binary bin;
  if (cg_nvrtc_compile(&x->api, x->cache, &src, &bin, err, errlen) != 0) return -1;
  if (bin.cached) x->stats.cache_hits++;
  else x->stats.compiles++;
  int rc = CUDA_CALL(x, "the fill kernels", err, errlen, cuModuleLoadData, &x->fill_module, bin.image);
  cg_cuda_binary_free(&bin);
  static const char *const names[3] = {"tgc_fill_2", "tgc_fill_4", "tgc_fill_8"};
  for (int i = 0; rc == 0 && i < 3; i++)
    rc = CUDA_CALL(x, "the fill kernels", err, errlen, cuModuleGetFunction, &x->fill_fn[i + 1], x->fill_module, names[i]);
  return rc;
}

static int cuda_fill(rt_device *d, void *dst, size_t n, const void *pattern, size_t pattern_bytes, char *err,
                     size_t errlen) {
  cuda_ctx *x = d->impl;
  const unsigned char *pt = pattern;
  bool uniform = true;
  for (size_t i = 1; i < pattern_bytes; i++) uniform &= pt[i] == pt[0];
  x->stats.memsets++;
  if (uniform) return CUDA_CALL(x, "a fill", err, errlen, cuMemsetD8Async, dptr(dst), pt[0], n, x->stream);
  int which = pattern_bytes == 2 ? 1 : pattern_bytes == 4 ? 2 : pattern_bytes == 8 ? 3 : 0;
  if (!which || n % pattern_bytes) {
    cg_errf(err, errlen, "a fill of %zu bytes with a %zu-byte pattern", n, pattern_bytes);
    return -1;
  }
  if (!x->fill_module && load_fill_module(x, err, errlen) != 0) return -1;
  /* every parameter in an 8-byte variable (the pattern in the low bytes:
   * little-endian), as cuda-emu's capture reads them */
  unsigned long long v = 0;
  memcpy(&v, pattern, pattern_bytes);
  long long count = (long long)(n / pattern_bytes);
  cg_cu_deviceptr p = dptr(dst);
  void *params[3] = {&p, &v, &count};
  long long blocks = (count + 255) / 256;
  if (blocks > 65535) blocks = 65535;
  if (CUDA_CALL(x, "a fill", err, errlen, cuLaunchKernel, x->fill_fn[which], (unsigned)blocks, 1, 1, 256, 1, 1, 0,
                x->stream, params, NULL))
    return -1;
  return x->sync && !x->capturing ? CUDA_CALL(x, "a fill", err, errlen, cuCtxSynchronize) : 0;
}

/* ---- programs ---- */

enum { GRAPH_SLOTS = 4 }; /* CUDA graphs kept per program, one per set of bound addresses */

typedef struct {
  cg_program *prog;
  const ir_graph *g;
  cg_cu_module *modules;        /* per part of the program's source (cg_program_parts) */
  int n_modules;
  cg_cu_function *fns;          /* per kernel, from its part's module */
  cuda_gemm_plan *gemms;        /* per action (GEMM actions only) */
  cg_cu_deviceptr workspace;
  const rt_action **step_action; /* per plan step: its kernel action (NULL: a view or a collective); a later
                                  * launch reads a deferred step's tensors through it */
  const rt_action *actions;      /* the executor's program (prepare's) */
  int n_actions;
  int n_pieces;                  /* the program cut at its collectives: a segment of other actions is captured, */
  struct cuda_piece {            /* a collective runs as an action */
    int first, end;
    bool collective;
  } *pieces;
  int64_t runs, captures;
  int n_bound;                   /* the addresses a run binds: every kernel action's operands and results */
  const void **bound;            /* this run's */
  struct cuda_graph {
    cg_cu_graph_exec *exec;      /* per piece (NULL for a collective's); NULL: an empty slot */
    const void **bound;          /* the addresses it was captured with */
    int64_t last_run;
  } graphs[GRAPH_SLOTS];
} cuda_state;

static void clear_slot(cuda_ctx *x, cuda_state *s, struct cuda_graph *g);

static bool cuda_supports_op(const ir_node *n) { return n && cg_op_lowers(n->op); }

/* "kernel NAME of %value" for messages. */
static void kernel_context(const cuda_state *s, int kernel, char *buf, size_t len) {
  const cg_kernel *k = &s->prog->kernels[kernel];
  const ir_node *n = k->node >= 0 ? s->g->nodes[k->node] : NULL;
  snprintf(buf, len, "kernel %s of %%%s", k->name, n && n->n_out ? n->out[0]->name : "?");
}

static void node_context(const ir_node *n, const char *what, char *buf, size_t len) {
  snprintf(buf, len, "%s of %%%s", what, n && n->n_out ? n->out[0]->name : "?");
}

static void cuda_release(rt_device *d, void *state) {
  cuda_ctx *x = d->impl;
  cuda_state *s = state;
  if (!s) return;
  for (int i = 0; i < GRAPH_SLOTS; i++) {
    clear_slot(x, s, &s->graphs[i]);
    free(s->graphs[i].bound);
  }
  free(s->bound);
  free(s->pieces);
  for (int i = 0; s->gemms && s->prog && i < s->prog->n_actions; i++)
    if (s->prog->actions[i].kind == CG_ACT_GEMM) cuda_gemm_release(x, &s->gemms[i]);
  for (int i = 0; i < s->n_modules; i++)
    if (s->modules[i]) x->api.cuModuleUnload(s->modules[i]);
  free(s->modules);
  if (s->workspace) x->api.cuMemFree(s->workspace);
  free(s->step_action);
  cg_program_free(s->prog);
  free(s->fns);
  free(s->gemms);
  free(s);
}

/* "gpt_step.cu": the model file's base name and the graph's name. */
static void source_name(const ir_graph *g, char *buf, size_t len) {
  const char *f = g->source_file ? g->source_file : "model";
  const char *slash = strrchr(f, '/');
  if (slash) f = slash + 1;
  size_t n = strcspn(f, ".");
  snprintf(buf, len, "%.*s_%s.cu", (int)(n < 100 ? n : 100), f, g->name ? g->name : "main");
}

/* Compiles the program's kernels in parts on a pool of threads (each part
 * from the disk cache when it is there), loads each part as a module and
 * looks every kernel up in its part's. */
static int load_program(cuda_ctx *x, cuda_state *s, const char *name, char *err, size_t errlen) {
  const cg_program *p = s->prog;
  int threads = cg_compile_threads(err, errlen);
  if (threads < 0) return -1;
  cg_part *parts = NULL;
  /* cuda-emu: one part (its host compiler pays for the prelude once per
   * part, and the test suite runs its programs two at a time on two cores) */
  int n = cg_program_parts(p, name, x->emu ? 1 << 30 : CG_PART_KERNELS, &parts);
  cg_cuda_binary *bins = n > 0 ? calloc((size_t)n, sizeof *bins) : NULL;
  if (n <= 0 || !bins || !(s->modules = calloc((size_t)n, sizeof *s->modules))) {
    cg_parts_free(parts, n);
    free(bins);
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  int rc = cg_nvrtc_compile_parts(&x->api, x->cache, x->dev.arch, parts, n, threads, bins, err, errlen);
  if (rc == 0) {
    s->n_modules = n;
    x->stats.kernels += p->n_kernels;
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    if (bins[i].cached) x->stats.cache_hits++;
    else x->stats.compiles++;
    rc = CUDA_CALL(x, parts[i].name, err, errlen, cuModuleLoadData, &s->modules[i], bins[i].image);
    for (int k = parts[i].first_kernel; rc == 0 && k < parts[i].first_kernel + parts[i].n_kernels; k++) {
      char ctx[400];
      kernel_context(s, k, ctx, sizeof ctx);
      rc = CUDA_CALL(x, ctx, err, errlen, cuModuleGetFunction, &s->fns[k], s->modules[i], p->kernels[k].name);
    }
  }
  for (int i = 0; i < n; i++) cg_cuda_binary_free(&bins[i]);
  free(bins);
  cg_parts_free(parts, n);
  return rc;
}

/* Whether every reference of lowered step st that reaches back does so to
 * a step with a kernel action (the lowering only defers computing steps). */
static bool ref_resolves(const cuda_state *s, int st, cg_ref r) {
  return r.back <= 0 || (r.back <= st && s->step_action[st - r.back] != NULL);
}

static bool refs_resolve(const cuda_state *s, int st) {
  const cg_program *p = s->prog;
  const cg_step *cs = &p->steps[st];
  for (int a = cs->first_action; a < cs->first_action + cs->n_actions; a++) {
    const cg_action *act = &p->actions[a];
    const cg_gemm *g = &act->gemm;
    int kernels[2] = {act->kind == CG_ACT_KERNEL ? act->kernel : -1, act->kind == CG_ACT_GEMM ? g->fallback_kernel : -1};
    for (int k = 0; k < 2; k++)
      for (int i = 0; kernels[k] >= 0 && i < p->kernels[kernels[k]].n_args; i++)
        if (!ref_resolves(s, st, p->args[p->kernels[kernels[k]].first_arg + i])) return false;
    if (act->kind == CG_ACT_GEMM && !(ref_resolves(s, st, g->a) && ref_resolves(s, st, g->b) && ref_resolves(s, st, g->c) &&
                                      ref_resolves(s, st, g->bias) && ref_resolves(s, st, g->aux)))
      return false;
    if ((act->kind == CG_ACT_COPY || act->kind == CG_ACT_MEMSET) &&
        !(ref_resolves(s, st, act->dst) && ref_resolves(s, st, act->src)))
      return false;
  }
  return true;
}

static int cuda_prepare(rt_device *d, const ir_graph *g, const pass_plan *plan, rt_action *actions, int n_actions,
                        void **state, char *err, size_t errlen) {
  cuda_ctx *x = d->impl;
  cuda_state *s = calloc(1, sizeof *s);
  *state = s;
  if (!s) {
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  s->g = g;
  char title[512], name[160];
  source_name(g, name, sizeof name);
  snprintf(title, sizeof title, "%s, graph @%s", g->source_file ? g->source_file : "?", g->name ? g->name : "main");
  cg_lower_options lo = {.title = title};
  if (!(s->prog = cg_lower(g, plan, &lo, err, errlen))) return -1;
  cg_program *p = s->prog;
  s->fns = calloc((size_t)(p->n_kernels > 0 ? p->n_kernels : 1), sizeof *s->fns);
  s->gemms = calloc((size_t)(p->n_actions > 0 ? p->n_actions : 1), sizeof *s->gemms);
  s->step_action = calloc((size_t)(p->n_steps > 0 ? p->n_steps : 1), sizeof *s->step_action);
  if (!s->fns || !s->gemms || !s->step_action) {
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  /* each kernel action runs the lowered step of its plan step (cg_lower
   * makes one per plan step, in the plan's order) */
  for (int i = 0; i < n_actions; i++) {
    if (actions[i].kind != RT_ACT_KERNEL) continue;
    if (actions[i].step < 0 || actions[i].step >= p->n_steps || g->nodes[plan->steps[actions[i].step].node] != actions[i].node) {
      cg_errf(err, errlen, "internal error: %%%s is not a step of the lowered program",
              actions[i].node->n_out ? actions[i].node->out[0]->name : "?");
      return -1;
    }
    actions[i].impl = &p->steps[actions[i].step];
    s->step_action[actions[i].step] = &actions[i];
  }
  s->actions = actions, s->n_actions = n_actions;
  /* the pieces: analysis's cut rule (pass_graph_pieces, what tgc stats counts), each piece the actions of its steps */
  pass_piece *cut = calloc((size_t)plan->n_steps + 1, sizeof *cut);
  if (!(s->pieces = calloc((size_t)n_actions + 1, sizeof *s->pieces)) || !cut) {
    free(cut);
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  int n_cut = pass_graph_pieces(g, plan, cut), next = 0;
  for (int k = 0; k < n_cut; k++) {
    int first = next;
    while (next < n_actions && actions[next].step < cut[k].end) next++;
    s->pieces[s->n_pieces++] = (struct cuda_piece){first, next, cut[k].collective};
  }
  free(cut);
  if (next != n_actions) {
    cg_errf(err, errlen, "internal error: the program's pieces leave actions from %d of %d", next, n_actions);
    return -1;
  }
  for (int i = 0; i < n_actions; i++)
    if (actions[i].kind == RT_ACT_KERNEL) s->n_bound += actions[i].node->n_in + actions[i].node->n_out;
  if (!(s->bound = calloc((size_t)s->n_bound + 1, sizeof *s->bound))) {
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  for (int st = 0; st < p->n_steps; st++)
    if (!refs_resolve(s, st)) {
      cg_errf(err, errlen, "internal error: step %d of the lowered program reaches back to a step without a kernel action",
              st);
      return -1;
    }
  x->stats.programs++;
  if (p->n_kernels > 0 && load_program(x, s, name, err, errlen) != 0) return -1;
  if (p->n_gemms > 0 && !x->lt_workspace) { /* optional: cuBLASLt runs without one (fewer algorithms) */
    size_t want = x->emu ? LT_WORKSPACE_EMU : LT_WORKSPACE_GPU, free_b = 0, total_b = 0;
    if (x->api.cuMemGetInfo(&free_b, &total_b) == CG_CUDA_SUCCESS && free_b >= 2 * want &&
        x->api.cuMemAlloc(&x->lt_workspace, want) == CG_CUDA_SUCCESS)
      x->lt_workspace_bytes = want;
  }
  for (int st = 0; st < p->n_steps; st++) {
    const cg_step *cs = &p->steps[st];
    for (int a = cs->first_action; a < cs->first_action + cs->n_actions; a++) {
      if (p->actions[a].kind != CG_ACT_GEMM) continue;
      char ctx[400];
      node_context(g->nodes[plan->steps[st].node], "the product", ctx, sizeof ctx);
      if (cuda_gemm_prepare(x, &p->actions[a].gemm, &s->gemms[a], ctx, err, errlen) != 0) return -1;
    }
  }
  if (p->workspace_bytes && device_alloc(x, p->workspace_bytes, &s->workspace, "the program's workspace", err, errlen) != 0)
    return -1;
  return 0;
}

/* The address of r at step st (whose node's tensors are in / out). */
static cg_cu_deviceptr ref_address(const cuda_state *s, int st, cg_ref r, const rt_tensor *const *in,
                                   rt_tensor *const *out) {
  if (r.back > 0) { /* a deferred step's tensor: its action's (the program's tensors do not move during a run) */
    const rt_action *da = s->step_action[st - r.back];
    in = da->in, out = da->out;
  }
  const void *base = r.kind == CG_REF_IN ? in[r.index]->data : r.kind == CG_REF_OUT ? out[r.index]->data
                                                                                      : (const void *)(uintptr_t)s->workspace;
  return dptr(base) + r.offset;
}

static int launch(cuda_ctx *x, cuda_state *s, int st, int kernel, const unsigned grid[3], unsigned block, unsigned smem,
                  const rt_tensor *const *in, rt_tensor *const *out, char *err, size_t errlen) {
  const cg_kernel *k = &s->prog->kernels[kernel];
  enum { MAX_ARGS = 512 }; /* 4 KiB of pointers: the classic kernel parameter limit */
  cg_cu_deviceptr ptrs[MAX_ARGS];
  void *params[MAX_ARGS];
  if (k->n_args > MAX_ARGS) {
    cg_errf(err, errlen, "kernel %s takes %d pointers (at most %d)", k->name, k->n_args, (int)MAX_ARGS);
    return -1;
  }
  for (int i = 0; i < k->n_args; i++) {
    ptrs[i] = ref_address(s, st, s->prog->args[k->first_arg + i], in, out);
    params[i] = &ptrs[i];
  }
  char ctx[400];
  kernel_context(s, kernel, ctx, sizeof ctx);
  snprintf(x->last_kernel, sizeof x->last_kernel, "%s", ctx);
  x->stats.launches++;
  if (CUDA_CALL(x, ctx, err, errlen, cuLaunchKernel, s->fns[kernel], grid[0], grid[1], grid[2], block, 1, 1, smem,
                x->stream, params, NULL))
    return -1;
  return x->sync && !x->capturing ? CUDA_CALL(x, ctx, err, errlen, cuCtxSynchronize) : 0;
}

static int run_step(rt_device *d, void *state, const rt_action *ra, char *err, size_t errlen) {
  cuda_ctx *x = d->impl;
  cuda_state *s = state;
  const ir_node *n = ra->node;
  const rt_tensor *const *in = ra->in;
  rt_tensor *const *out = ra->out;
  int st = ra->step;
  const cg_program *p = s->prog;
  const cg_step *cs = ra->impl;
  if (cs->deferred) return 0; /* computed by a later step's launch, which reads this action's tensors */
  double t0 = x->profile ? ir_clock_s() : 0;
  for (int a = cs->first_action; a < cs->first_action + cs->n_actions; a++) {
    const cg_action *act = &p->actions[a];
    char ctx[400];
    int64_t launches = x->stats.launches, gemms = x->stats.gemms;
    if (a > cs->first_action && x->profile) {
      if (CUDA_CALL(x, "the profile", err, errlen, cuCtxSynchronize)) return -1;
      t0 = ir_clock_s();
    }
    switch (act->kind) {
    case CG_ACT_KERNEL:
      if (launch(x, s, st, act->kernel, act->grid, act->block, act->smem_dynamic, in, out, err, errlen)) return -1;
      break;
    case CG_ACT_GEMM: {
      const cg_gemm *g = &act->gemm;
      node_context(n, "the product", ctx, sizeof ctx);
      if (cuda_gemm_run(x, g, &s->gemms[a], ref_address(s, st, g->a, in, out), ref_address(s, st, g->b, in, out),
                        ref_address(s, st, g->c, in, out), ref_address(s, st, g->bias, in, out),
                        ref_address(s, st, g->aux, in, out), ctx, err, errlen))
        return -1;
      if ((s->gemms[a].use_fallback || (x->no_epilogues && g->fallback_kernel >= 0)) && g->fallback_kernel >= 0) {
        unsigned grid[3] = {g->fallback_grid, 1, 1};
        if (launch(x, s, st, g->fallback_kernel, grid, p->kernels[g->fallback_kernel].block, 0, in, out, err, errlen))
          return -1;
      }
      break;
    }
    case CG_ACT_COPY:
      node_context(n, "a copy", ctx, sizeof ctx);
      x->stats.copies++;
      if (CUDA_CALL(x, ctx, err, errlen, cuMemcpyDtoDAsync, ref_address(s, st, act->dst, in, out),
                    ref_address(s, st, act->src, in, out), act->bytes, x->stream))
        return -1;
      break;
    case CG_ACT_MEMSET:
      node_context(n, "a memset", ctx, sizeof ctx);
      x->stats.memsets++;
      if (CUDA_CALL(x, ctx, err, errlen, cuMemsetD8Async, ref_address(s, st, act->dst, in, out), 0, act->bytes,
                    x->stream))
        return -1;
      break;
    }
    if (x->profile) { /* the action's time, under the node's class and what the action is */
      if (CUDA_CALL(x, "the profile", err, errlen, cuCtxSynchronize)) return -1;
      char what[64];
      if (act->kind == CG_ACT_KERNEL) snprintf(what, sizeof what, "%.60s", p->kernels[act->kernel].name);
      else if (act->kind == CG_ACT_GEMM)
        snprintf(what, sizeof what, "gemm %lldx%lldx%lld%s", (long long)act->gemm.m, (long long)act->gemm.n,
                 (long long)act->gemm.k, s->gemms[a].use_fallback ? " +fallback" : "");
      else snprintf(what, sizeof what, "%s", act->kind == CG_ACT_COPY ? "copy" : "memset");
      profile_add(x, n, what, ir_clock_s() - t0, x->stats.launches - launches, x->stats.gemms - gemms);
    }
  }
  return 0;
}

static int cuda_run(rt_device *d, void *state, const rt_action *a, char *err, size_t errlen) {
  cuda_ctx *x = d->impl;
  if (x->profile && CUDA_CALL(x, "the profile", err, errlen, cuCtxSynchronize)) return -1;
  return run_step(d, state, a, err, errlen);
}

/* The addresses this run binds, into s->bound. */
static void bound_now(cuda_state *s) {
  int k = 0;
  for (int i = 0; i < s->n_actions; i++) {
    const rt_action *a = &s->actions[i];
    if (a->kind != RT_ACT_KERNEL) continue;
    for (int j = 0; j < a->node->n_in; j++) s->bound[k++] = a->in[j]->data;
    for (int j = 0; j < a->node->n_out; j++) s->bound[k++] = a->out[j]->data;
  }
}

typedef int (*walk_fn)(void *ctx, int first, int end, char *err, size_t errlen);

/* Records piece k's walk into a CUDA graph of slot g. */
static int capture(cuda_ctx *x, cuda_state *s, struct cuda_graph *g, int k, walk_fn walk, void *ctx, char *err,
                   size_t errlen) {
  const char *what = "capturing the program as a CUDA graph";
  if (CUDA_CALL(x, what, err, errlen, cuStreamBeginCapture, x->stream, CG_CU_STREAM_CAPTURE_MODE_GLOBAL)) return -1;
  x->capturing = true;
  int rc = walk(ctx, s->pieces[k].first, s->pieces[k].end, err, errlen);
  x->capturing = false;
  cg_cu_graph graph = NULL;
  cg_cu_result r = x->api.cuStreamEndCapture(x->stream, &graph); /* ended whatever walk did */
  if (rc == 0) rc = cuda_check(x, r, "cuStreamEndCapture", what, err, errlen);
  if (rc == 0) rc = CUDA_CALL(x, what, err, errlen, cuGraphInstantiate, &g->exec[k], graph, 0);
  if (graph) x->api.cuGraphDestroy(graph);
  if (rc == 0) x->stats.graph_captures++;
  return rc;
}

/* Slot g's graphs destroyed: an empty slot. */
static void clear_slot(cuda_ctx *x, cuda_state *s, struct cuda_graph *g) {
  for (int k = 0; g->exec && k < s->n_pieces; k++)
    if (g->exec[k]) x->api.cuGraphExecDestroy(g->exec[k]);
  free(g->exec);
  g->exec = NULL;
}

/* Slot g emptied for the addresses of this run. */
static int reset_slot(cuda_ctx *x, cuda_state *s, struct cuda_graph *g, char *err, size_t errlen) {
  clear_slot(x, s, g);
  if (!(g->exec = calloc((size_t)s->n_pieces, sizeof *g->exec)) ||
      (!g->bound && !(g->bound = calloc((size_t)s->n_bound + 1, sizeof *g->bound)))) {
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  memcpy(g->bound, s->bound, (size_t)s->n_bound * sizeof *s->bound);
  s->captures++;
  return 0;
}

/* A run: the first (and every run with graphs off) walks the actions;
 * later ones launch, segment by segment, the graphs captured with the same
 * addresses (capturing them first where there are none), the collectives
 * between them run as actions. */
static int cuda_run_program(rt_device *d, void *state, walk_fn walk, walk_fn join, void *ctx, char *err,
                            size_t errlen) {
  cuda_ctx *x = d->impl;
  cuda_state *s = state;
  if (!x->graphs || s->runs++ == 0) {
    x->stats.direct_runs++;
    return walk(ctx, 0, s->n_actions, err, errlen);
  }
  bound_now(s);
  struct cuda_graph *g = NULL, *oldest = &s->graphs[0];
  for (int i = 0; i < GRAPH_SLOTS && !g; i++) {
    struct cuda_graph *c = &s->graphs[i];
    if (c->exec && memcmp(c->bound, s->bound, (size_t)s->n_bound * sizeof *s->bound) == 0) g = c;
    else if (!c->exec || (oldest->exec && c->last_run < oldest->last_run)) oldest = c;
  }
  if (!g && s->captures >= 2 * GRAPH_SLOTS) { /* its tensors move every run: capturing would only add cost */
    x->stats.direct_runs++;
    return walk(ctx, 0, s->n_actions, err, errlen);
  }
  bool fresh = !g;
  if (fresh && reset_slot(x, s, g = oldest, err, errlen) != 0) return -1;
  g->last_run = s->runs;
  for (int k = 0; k < s->n_pieces; k++) {
    const struct cuda_piece *pc = &s->pieces[k];
    if (pc->collective) {
      if (walk(ctx, pc->first, pc->end, err, errlen) != 0) return -1;
      continue;
    }
    if (join(ctx, pc->first, pc->end, err, errlen) != 0) return -1; /* the collectives in flight it needs: outside the graph */
    if (fresh && capture(x, s, g, k, walk, ctx, err, errlen) != 0) {
      clear_slot(x, s, g); /* no half-captured slot is launched later */
      return -1;
    }
    x->stats.graph_launches++;
    if (CUDA_CALL(x, "the program's CUDA graph", err, errlen, cuGraphLaunch, g->exec[k], x->stream)) return -1;
  }
  return 0;
}

/* The table NCCL runs from: the device's own (cuda-emu's emulation has
 * NCCL; on a GPU libnccl.so.2 is loaded into it the first time). */
static int cuda_comm_table(rt_device *d, const struct cg_cuda_api **api, char *err, size_t errlen) {
  cuda_ctx *x = d->impl;
  if (!(x->api.libs & CG_CUDA_LIB_NCCL) && rt_cuda_load(&x->api, CG_CUDA_LIB_NCCL, err, errlen) != 0) return -1;
  *api = &x->api;
  return 0;
}

#define CUDA_BACKEND(var, label, open_fn)                                                                    \
  const rt_backend var = {                                                                                   \
      .name = label,                                                                                         \
      .host_memory = false,                                                                                  \
      .open = open_fn,                                                                                       \
      .close = cuda_close,                                                                                   \
      .alloc = cuda_alloc,                                                                                   \
      .free = cuda_free,                                                                                     \
      .upload = cuda_upload,                                                                                 \
      .download = cuda_download,                                                                             \
      .copy = cuda_copy,                                                                                     \
      .fill = cuda_fill,                                                                                     \
      .supports_op = cuda_supports_op,                                                                       \
      .prepare = cuda_prepare,                                                                               \
      .run = cuda_run,                                                                                       \
      .run_program = cuda_run_program,                                                                       \
      .release = cuda_release,                                                                               \
      .comm_table = cuda_comm_table,                                                                         \
      .host_alloc = cuda_host_alloc,                                                                         \
      .host_free = cuda_host_free,                                                                           \
      .upload_async = cuda_upload_async,                                                                     \
      .host_wait = cuda_host_wait,                                                                           \
  };
CUDA_BACKEND(rt_cuda_backend, "cuda", cuda_open)
CUDA_BACKEND(rt_cuda_emu_backend, "cuda-emu", cuda_emu_open)
