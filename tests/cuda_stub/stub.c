/* tests/cuda_stub/stub.c — a stub of the libraries the `cuda` backend
 * dlopens (libcuda.so.1, libcublasLt.so.13, libnccl.so.2; NVRTC is the
 * real one), so that the backend's host code runs in CI with no GPU.
 *
 * Built by the test suite as one shared object; the three library names
 * are links to it in one directory (with the toolkit's libnvrtc beside
 * them), which TGC_CUDA_LIB_PATH points the loader at. Every entry is
 * exported under the symbol cuda_api.def names, and declared from that row
 * (an asm label), so its prototype is the table's.
 *
 *   memory    device memory is host memory (aligned_alloc, 256 bytes,
 *             zero-filled) whose ranges the stub tracks: copies, memsets,
 *             products and collectives must stay inside one allocation,
 *             host pointers must not be device memory;
 *   modules   real cubins from NVRTC: the stub reads each kernel's
 *             registers (.text.NAME's sh_info), static shared memory
 *             (.nv.shared.NAME), __launch_bounds__ (EIATTR_MAX_THREADS) and
 *             parameter count (EIATTR_KPARAM_INFO) from the ELF, and
 *             refuses a cubin for another arch;
 *   launches  checked by the emulator's rules (device_rules.c: grid and
 *             block dimensions, launch bounds, registers per block,
 *             dynamic shared memory against the function's limit, for
 *             sm_80 or sm_90 as TGC_STUB_ARCH says), then nothing runs:
 *             kernels are no-ops, so results are garbage (zeros mostly);
 *   cuBLASLt  the emulator's descriptors and checks (blaslt_rules.c:
 *             shapes, types, leading dimensions, the operands' alignment
 *             against the algorithm's, the workspace's), then a no-op;
 *   NCCL      one rank: buffers inside device allocations, in-place only
 *             in the layout NCCL documents, out-of-place buffers apart;
 *   streams   an asynchronous device-to-host copy fills its host buffer
 *             with NaNs at once and the real bytes only when its stream
 *             is synchronized (cuStreamSynchronize, cuCtxSynchronize, an
 *             event recorded after it, or a synchronous call on the legacy
 *             stream for a blocking stream): code that reads it before
 *             reads NaNs. An asynchronous host-to-device copy from
 *             page-locked memory (cuMemHostAlloc) is read by the GPU when
 *             its turn comes, so the host must not write its source before
 *             that sync point: the stub keeps the source's bytes and, at
 *             the sync, refuses (sticky) a source that changed meanwhile;
 *             from pageable memory the driver stages the bytes before
 *             returning, and the host may reuse it at once.
 * Every failure prints one line "tgc cuda stub: CALL: DETAIL" to stderr
 * (the real backend has no emulator detail to show) and keeps it for
 * tgc_cuda_stub_last_error(). A fault found after a "launch" (a product
 * outside device memory) is sticky, as on a GPU. */
#define _GNU_SOURCE
#include <elf.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blaslt_rules.h"

/* The driver's and NCCL's entries: stub_NAME, exported as the row's symbol. */
#define STUB_DRIVER(ret, name, symbol, params) ret stub_##name params __asm__(symbol);
#define STUB_NCCL(ret, name, symbol, params) ret stub_##name params __asm__(symbol);
#define STUB_NVRTC(ret, name, symbol, params)
#define STUB_CUBLASLT(ret, name, symbol, params)
#define CG_CUDA_FN(lib, name, symbol, fallback, ret, params) STUB_##lib(ret, name, symbol, params)
#include "cuda_api.def"
#undef CG_CUDA_FN

const char *tgc_cuda_stub_last_error(void);

/* ---- state ---- */

typedef struct {
  uint64_t base;
  size_t bytes;
} alloc_range;

typedef struct {
  void *dst;           /* the host buffer (NULL: a check of an upload's source) */
  unsigned char *data; /* the device bytes at the copy's turn in the stream (an upload: its source's bytes then) */
  size_t bytes;
  const void *src;     /* an upload from page-locked memory: its source, which must still hold data at the sync */
} pending_copy;

/* Streams, events and modules are listed: each starts with its link. */
typedef struct listed {
  struct listed *next;
} listed;

struct CUstream_st {
  struct CUstream_st *next;
  unsigned int flags;
  pending_copy *pending;
  int n_pending, cap_pending;
};

struct CUevent_st {
  struct CUevent_st *next;
  cg_cu_stream stream;
  int upto;  /* the stream's pending copies before the record */
  bool recorded;
};

typedef struct stub_function {
  char name[256];
  rt_emu_launch_limits lim;
  int nparams;
  struct stub_function *next;
} stub_function;

struct CUmod_st {
  struct CUmod_st *next;
  stub_function *functions;
};

struct CUctx_st {
  int unused;
};

static struct {
  pthread_mutex_t lock;
  bool initialized;
  const emu_arch *arch;
  size_t total, used;
  alloc_range *allocs;
  int n_allocs, cap_allocs;
  struct CUstream_st legacy; /* the NULL stream */
  struct CUstream_st *streams;
  struct CUevent_st *events;
  struct CUmod_st *modules;
  cg_cu_result sticky;
  char sticky_detail[1024];
  int ctx_refs;
  long long launches, products, modules_loaded, kernels, async_downloads, pinned_uploads; /* TGC_STUB_SUMMARY */
  long long graph_launches;
  struct { void *p; size_t bytes; } *host; /* cuMemHostAlloc's blocks */
  int n_host, cap_host;
} S = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct CUctx_st the_context;
static _Thread_local bool ctx_current;
static _Thread_local char detail[1024];

const char *tgc_cuda_stub_last_error(void) { return detail; }

/* ---- reporting: blaslt_rules.c's hooks and the stub's own ---- */

void rt_emu_set_detail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  if (detail[0]) fprintf(stderr, "tgc cuda stub: %s\n", detail);
}

/* Sets the detail line (printed) and evaluates to r: a CUresult or an ncclResult_t. */
#define fail(r, ...) (rt_emu_set_detail(__VA_ARGS__), (r))

cg_cu_result rt_emu_sticky_error(const char **d) {
  *d = S.sticky_detail;
  return S.sticky;
}

void rt_emu_set_sticky(cg_cu_result r, const char *d) {
  if (S.sticky != CG_CUDA_SUCCESS) return;
  S.sticky = r;
  snprintf(S.sticky_detail, sizeof S.sticky_detail, "%s", d);
  fprintf(stderr, "tgc cuda stub: %s (sticky from now on)\n", d);
}

static void enter(void) { detail[0] = 0; }

/* How an entry that needs a current context (or a valid device) starts:
 * r is its result so far. */
#define ENTER_CONTEXT(call)              \
  enter();                               \
  cg_cu_result r = need_context(call);   \
  if (r != CG_CUDA_SUCCESS) return r
#define ENTER_DEVICE(call, dev)              \
  enter();                                   \
  cg_cu_result r = check_device(call, dev);  \
  if (r != CG_CUDA_SUCCESS) return r

/* A current context and no sticky error. */
static cg_cu_result need_context(const char *call) {
  if (!S.initialized) return fail(CG_CUDA_ERROR_NOT_INITIALIZED, "%s: cuInit has not been called", call);
  if (!ctx_current) return fail(CG_CUDA_ERROR_INVALID_CONTEXT, "%s: no current context", call);
  if (S.sticky != CG_CUDA_SUCCESS) return fail(S.sticky, "%s: %s", call, S.sticky_detail);
  return CG_CUDA_SUCCESS;
}

/* ---- lists ---- */

/* Adds node (a calloc'd struct starting with its link) to *head; NULL if node is. */
static void *push(void *head, void *node) {
  if (node) {
    ((listed *)node)->next = *(listed **)head;
    *(listed **)head = node;
  }
  return node;
}

/* Unlinks node from *head: whether it was there. */
static bool unlink_node(void *head, const void *node) {
  for (listed **p = head; *p; p = &(*p)->next)
    if (*p == node) {
      *p = (*p)->next;
      return true;
    }
  return false;
}

/* A destroy entry: unlinks node from *head and frees it, or says why not. */
static cg_cu_result destroy(void *head, void *node, void (*free_one)(void *), const char *not_found) {
  enter();
  if (!unlink_node(head, node)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "%s", not_found);
  free_one(node);
  return CG_CUDA_SUCCESS;
}

/* ---- device memory ---- */

/* The allocation holding ptr, or -1. */
static int find_alloc(uint64_t ptr) {
  for (int i = 0; i < S.n_allocs; i++)
    if (ptr >= S.allocs[i].base && ptr < S.allocs[i].base + S.allocs[i].bytes) return i;
  return -1;
}

int rt_emu_device_range(uint64_t ptr, size_t bytes) {
  int i = find_alloc(ptr);
  if (i >= 0) return ptr + bytes <= S.allocs[i].base + S.allocs[i].bytes ? 1 : -1;
  for (int j = 0; j < S.n_allocs; j++)
    if (ptr < S.allocs[j].base + S.allocs[j].bytes && ptr + bytes > S.allocs[j].base) return -1;
  return 0;
}

static cg_cu_result need_device(const char *call, const char *what, uint64_t ptr, size_t bytes) {
  if (!bytes || rt_emu_device_range(ptr, bytes) == 1) return CG_CUDA_SUCCESS;
  return fail(CG_CUDA_ERROR_INVALID_VALUE, "%s: %s [0x%llx, +%zu bytes) is not inside one device allocation", call,
              what, (unsigned long long)ptr, bytes);
}

static cg_cu_result need_host(const char *call, const char *what, const void *p, size_t bytes) {
  if (!bytes) return CG_CUDA_SUCCESS;
  if (!p) return fail(CG_CUDA_ERROR_INVALID_VALUE, "%s: %s is NULL", call, what);
  if (rt_emu_device_range((uint64_t)(uintptr_t)p, bytes) != 0)
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "%s: %s %p is device memory, not host memory", call, what, p);
  return CG_CUDA_SUCCESS;
}

/* ---- streams: pending device-to-host copies ---- */

static cg_cu_stream stream_of(cg_cu_stream s) {
  if (!s || s == (cg_cu_stream)0x1 || s == (cg_cu_stream)0x2) return &S.legacy;
  for (struct CUstream_st *t = S.streams; t; t = t->next)
    if (t == s) return t;
  return NULL;
}

/* The first `upto` pending copies of s land in their host buffers. */
static void complete(cg_cu_stream s, int upto) {
  if (upto > s->n_pending) upto = s->n_pending;
  for (int i = 0; i < upto; i++) {
    const pending_copy *c = &s->pending[i];
    if (c->dst) memcpy(c->dst, c->data, c->bytes);
    else if (memcmp(c->src, c->data, c->bytes) != 0) {
      char d[256];
      snprintf(d, sizeof d, "cuMemcpyHtoDAsync: the host wrote its page-locked source %p (%zu bytes) before the "
               "stream was synchronized: a GPU may copy the new bytes", c->src, c->bytes);
      rt_emu_set_sticky(CG_CUDA_ERROR_INVALID_VALUE, d);
    }
    free(c->data);
  }
  if (upto == 0) return;
  memmove(s->pending, s->pending + upto, (size_t)(s->n_pending - upto) * sizeof *s->pending);
  s->n_pending -= upto;
  for (struct CUevent_st *e = S.events; e; e = e->next)
    if (e->stream == s) e->upto = e->upto > upto ? e->upto - upto : 0;
}

static void complete_all(bool blocking_only) {
  complete(&S.legacy, S.legacy.n_pending);
  for (struct CUstream_st *t = S.streams; t; t = t->next)
    if (!blocking_only || !(t->flags & CG_CU_STREAM_NON_BLOCKING)) complete(t, t->n_pending);
}

/* TGC_STUB_SUMMARY=1: what the process did, at exit (the end-to-end tests
 * check that launches and products happened). */
__attribute__((destructor)) static void summary(void) {
  const char *v = getenv("TGC_STUB_SUMMARY");
  if (v && strcmp(v, "1") == 0)
    fprintf(stderr, "cuda stub summary: %lld modules, %lld kernels, %lld launches, %lld products, %lld async downloads, "
            "%lld pinned uploads, %lld captures, %lld graph launches\n", S.modules_loaded, S.kernels, S.launches,
            S.products, S.async_downloads, S.pinned_uploads, (long long)rt_emu_capture_counters_get().captures,
            (long long)rt_emu_capture_counters_get().launches);
}

/* ---- errors, init, devices ---- */

static cg_cu_result error_text(const char *text, const char **str) {
  *str = text;
  return text ? CG_CUDA_SUCCESS : CG_CUDA_ERROR_INVALID_VALUE;
}
cg_cu_result stub_cuGetErrorName(cg_cu_result error, const char **str) { return error_text(cg_cu_result_name(error), str); }
cg_cu_result stub_cuGetErrorString(cg_cu_result error, const char **str) {
  return error_text(cg_cu_result_string(error), str);
}

cg_cu_result stub_cuInit(unsigned int flags) {
  enter();
  if (flags != 0) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuInit: flags must be 0");
  const char *arch = getenv("TGC_STUB_ARCH");
  int n = arch && strncmp(arch, "sm_", 3) == 0 ? atoi(arch + 3) : 80;
  if (!(S.arch = rt_emu_arch_find(n)))
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuInit: TGC_STUB_ARCH=%s (sm_80 or sm_90)", arch);
  const char *mem = getenv("TGC_STUB_DEVICE_MEMORY");
  S.total = mem && atoll(mem) > 0 ? (size_t)atoll(mem) : (size_t)8 << 30;
  S.initialized = true;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuDriverGetVersion(int *version) {
  *version = 13000;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuDeviceGetCount(int *count) {
  enter();
  if (!S.initialized) return fail(CG_CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount: cuInit has not been called");
  *count = 1;
  return CG_CUDA_SUCCESS;
}

static cg_cu_result check_device(const char *call, cg_cu_device dev) {
  if (!S.initialized) return fail(CG_CUDA_ERROR_NOT_INITIALIZED, "%s: cuInit has not been called", call);
  if (dev != 0) return fail(CG_CUDA_ERROR_INVALID_DEVICE, "%s: no device %d (the stub has one)", call, dev);
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuDeviceGet(cg_cu_device *device, int ordinal) {
  enter();
  cg_cu_result r = check_device("cuDeviceGet", ordinal);
  if (r == CG_CUDA_SUCCESS) *device = ordinal;
  return r;
}

cg_cu_result stub_cuDeviceGetName(char *name, int len, cg_cu_device dev) {
  enter();
  cg_cu_result r = check_device("cuDeviceGetName", dev);
  if (r == CG_CUDA_SUCCESS) snprintf(name, (size_t)(len > 0 ? len : 1), "tgc cuda stub sm_%d (kernels do not run)", S.arch->arch);
  return r;
}

cg_cu_result stub_cuDeviceTotalMem(size_t *bytes, cg_cu_device dev) {
  enter();
  cg_cu_result r = check_device("cuDeviceTotalMem", dev);
  if (r == CG_CUDA_SUCCESS) *bytes = S.total;
  return r;
}

cg_cu_result stub_cuDeviceGetAttribute(int *value, cg_cu_device_attribute attrib, cg_cu_device dev) {
  ENTER_DEVICE("cuDeviceGetAttribute", dev);
  if (rt_emu_device_attribute(S.arch, attrib, value) != 0)
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute: attribute %u is not in the stub", attrib);
  return CG_CUDA_SUCCESS;
}

/* ---- contexts ---- */

cg_cu_result stub_cuDevicePrimaryCtxRetain(cg_cu_context *ctx, cg_cu_device dev) {
  ENTER_DEVICE("cuDevicePrimaryCtxRetain", dev);
  S.ctx_refs++;
  *ctx = &the_context;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuDevicePrimaryCtxRelease(cg_cu_device dev) {
  ENTER_DEVICE("cuDevicePrimaryCtxRelease", dev);
  if (S.ctx_refs == 0) return fail(CG_CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease: not retained");
  S.ctx_refs--;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuDevicePrimaryCtxReset(cg_cu_device dev) {
  ENTER_DEVICE("cuDevicePrimaryCtxReset", dev);
  complete_all(false);
  for (int i = 0; i < S.n_allocs; i++) free((void *)(uintptr_t)S.allocs[i].base);
  S.n_allocs = 0, S.used = 0;
  S.sticky = CG_CUDA_SUCCESS;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuCtxSetCurrent(cg_cu_context ctx) {
  enter();
  if (ctx && ctx != &the_context) return fail(CG_CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent: not the primary context");
  ctx_current = ctx != NULL;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuCtxSynchronize(void) {
  ENTER_CONTEXT("cuCtxSynchronize");
  if ((r = rt_emu_capture_forbid("cuCtxSynchronize", NULL)) != CG_CUDA_SUCCESS) return r;
  complete_all(false);
  return CG_CUDA_SUCCESS;
}

/* ---- memory ---- */

cg_cu_result stub_cuMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  ENTER_CONTEXT("cuMemGetInfo");
  *free_bytes = S.total - S.used, *total_bytes = S.total;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuMemAlloc(cg_cu_deviceptr *dptr, size_t bytes) {
  ENTER_CONTEXT("cuMemAlloc");
  if ((r = rt_emu_capture_forbid("cuMemAlloc", NULL)) != CG_CUDA_SUCCESS) return r;
  if (bytes == 0) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuMemAlloc: 0 bytes");
  size_t rounded = (bytes + 255) / 256 * 256;
  if (rounded > S.total - S.used)
    return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: %zu bytes, %zu free of %zu", bytes, S.total - S.used, S.total);
  void *p = aligned_alloc(256, rounded);
  if (!p) return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: %zu bytes: out of host memory", bytes);
  memset(p, 0, rounded); /* so that what no-op kernels leave reads as zeros (finite losses) */
  if (S.n_allocs == S.cap_allocs) {
    int cap = S.cap_allocs ? 2 * S.cap_allocs : 64;
    alloc_range *a = realloc(S.allocs, (size_t)cap * sizeof *a);
    if (!a) {
      free(p);
      return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: out of host memory");
    }
    S.allocs = a, S.cap_allocs = cap;
  }
  S.allocs[S.n_allocs++] = (alloc_range){(uint64_t)(uintptr_t)p, bytes};
  S.used += rounded;
  *dptr = (cg_cu_deviceptr)(uintptr_t)p;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuMemFree(cg_cu_deviceptr dptr) {
  ENTER_CONTEXT("cuMemFree");
  if ((r = rt_emu_capture_forbid("cuMemFree", NULL)) != CG_CUDA_SUCCESS) return r;
  int i = find_alloc(dptr);
  if (i < 0 || S.allocs[i].base != dptr)
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuMemFree: 0x%llx is not an allocation", (unsigned long long)dptr);
  complete_all(false); /* cuMemFree waits for the work in flight */
  S.used -= (S.allocs[i].bytes + 255) / 256 * 256;
  free((void *)(uintptr_t)dptr);
  S.allocs[i] = S.allocs[--S.n_allocs];
  return CG_CUDA_SUCCESS;
}

/* What every copy checks: context, stream, device and host ranges. */
static cg_cu_result copy_checks(const char *call, cg_cu_stream stream, uint64_t dev_dst, const void *host_dst,
                                uint64_t dev_src, const void *host_src, size_t bytes) {
  cg_cu_result r = need_context(call);
  if (r != CG_CUDA_SUCCESS) return r;
  if (!stream_of(stream)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "%s: not a stream of this context", call);
  if ((r = rt_emu_capture_legacy(call, stream)) != CG_CUDA_SUCCESS) return r;
  if ((r = dev_dst ? need_device(call, "the destination", dev_dst, bytes) : need_host(call, "the destination", host_dst, bytes)) ||
      (r = dev_src ? need_device(call, "the source", dev_src, bytes) : need_host(call, "the source", host_src, bytes)))
    return r;
  return CG_CUDA_SUCCESS;
}

/* A synchronous call runs on the legacy stream: it waits for the work of
 * every blocking stream before it. */
static cg_cu_result sync_copy(const char *call, void *dst, const void *src, size_t bytes, uint64_t dd, uint64_t ds) {
  enter();
  cg_cu_result r = copy_checks(call, NULL, dd, dst, ds, src, bytes);
  if (r != CG_CUDA_SUCCESS) return r;
  complete_all(true);
  if (bytes) memmove(dst, src, bytes);
  return CG_CUDA_SUCCESS;
}

static void *hp(cg_cu_deviceptr p) { return (void *)(uintptr_t)p; }

cg_cu_result stub_cuMemcpyHtoD(cg_cu_deviceptr dst, const void *src, size_t bytes) {
  return sync_copy("cuMemcpyHtoD", hp(dst), src, bytes, dst, 0);
}
cg_cu_result stub_cuMemcpyDtoH(void *dst, cg_cu_deviceptr src, size_t bytes) {
  return sync_copy("cuMemcpyDtoH", dst, hp(src), bytes, 0, src);
}
cg_cu_result stub_cuMemcpyDtoD(cg_cu_deviceptr dst, cg_cu_deviceptr src, size_t bytes) {
  return sync_copy("cuMemcpyDtoD", hp(dst), hp(src), bytes, dst, src);
}

/* The block of cuMemHostAlloc holding [p, p + bytes), or -1. */
static int find_host(const void *p, size_t bytes) {
  for (int i = 0; i < S.n_host; i++) {
    const char *b = S.host[i].p;
    if ((const char *)p >= b && (const char *)p + bytes <= b + S.host[i].bytes) return i;
  }
  return -1;
}

/* A pending entry of s: false when out of memory. */
static bool add_pending(cg_cu_stream s, pending_copy c) {
  if (s->n_pending == s->cap_pending) {
    int cap = s->cap_pending ? 2 * s->cap_pending : 16;
    pending_copy *p = realloc(s->pending, (size_t)cap * sizeof *p);
    if (!p) return false;
    s->pending = p, s->cap_pending = cap;
  }
  s->pending[s->n_pending++] = c;
  return true;
}

/* What a capture's recorded copies and memsets replay through (capture.c). */
static const emu_copy_entries entries = {stub_cuMemcpyHtoDAsync, stub_cuMemcpyDtoHAsync, stub_cuMemcpyDtoDAsync,
                                         stub_cuMemsetD8Async};
#define record_copy(s, kind, dst, src, bytes, value) rt_emu_capture_copy(s, &entries, kind, dst, src, bytes, value)

/* Host-to-device and device-to-device copies take effect at once: nothing
 * runs between them and the later work of their stream. An upload from
 * page-locked memory also leaves its source's bytes to check at the sync. */
cg_cu_result stub_cuMemcpyHtoDAsync(cg_cu_deviceptr dst, const void *src, size_t bytes, cg_cu_stream stream) {
  enter();
  cg_cu_result r = copy_checks("cuMemcpyHtoDAsync", stream, dst, NULL, 0, src, bytes);
  if (r == CG_CUDA_SUCCESS && rt_emu_capturing(stream))
    return record_copy(stream, EMU_REC_HTOD, dst, (uint64_t)(uintptr_t)src, bytes, 0);
  if (r != CG_CUDA_SUCCESS || !bytes) return r;
  memcpy(hp(dst), src, bytes);
  if (find_host(src, bytes) < 0) return CG_CUDA_SUCCESS; /* pageable: staged before the call returns */
  unsigned char *data = malloc(bytes);
  if (!data || !add_pending(stream_of(stream), (pending_copy){NULL, data, bytes, src})) {
    free(data);
    return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuMemcpyHtoDAsync: out of host memory");
  }
  memcpy(data, src, bytes);
  S.pinned_uploads++;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags) {
  ENTER_CONTEXT("cuMemHostAlloc");
  if (!pp) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuMemHostAlloc: pp is NULL");
  *pp = NULL;
  if (flags & ~7u) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuMemHostAlloc: unknown flags 0x%x", flags);
  if (!bytes) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuMemHostAlloc: 0 bytes");
  if (S.n_host == S.cap_host) {
    int cap = S.cap_host ? 2 * S.cap_host : 8;
    void *h = realloc(S.host, (size_t)cap * sizeof *S.host);
    if (!h) return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuMemHostAlloc: out of host memory");
    S.host = h, S.cap_host = cap;
  }
  void *p = malloc(bytes);
  if (!p) return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuMemHostAlloc: %zu bytes: out of host memory", bytes);
  memset(p, 0xa5, bytes); /* not zeroed: as the driver's */
  S.host[S.n_host].p = p, S.host[S.n_host].bytes = bytes, S.n_host++;
  *pp = p;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuMemFreeHost(void *p) {
  ENTER_CONTEXT("cuMemFreeHost");
  int i = find_host(p, 0);
  if (i < 0 || S.host[i].p != p) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost: %p is not a block of cuMemHostAlloc", p);
  complete_all(false); /* it waits for the work in flight, the uploads from it included */
  free(p);
  S.host[i] = S.host[--S.n_host];
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuMemcpyDtoDAsync(cg_cu_deviceptr dst, cg_cu_deviceptr src, size_t bytes, cg_cu_stream stream) {
  enter();
  cg_cu_result r = copy_checks("cuMemcpyDtoDAsync", stream, dst, NULL, src, NULL, bytes);
  if (r == CG_CUDA_SUCCESS && rt_emu_capturing(stream)) return record_copy(stream, EMU_REC_DTOD, dst, src, bytes, 0);
  if (r == CG_CUDA_SUCCESS && bytes) memmove(hp(dst), hp(src), bytes);
  return r;
}

/* The host buffer reads NaN (float 0x7fc00000; 0xff in a tail) until the
 * stream is synchronized; the bytes are taken now, at the copy's turn. */
cg_cu_result stub_cuMemcpyDtoHAsync(void *dst, cg_cu_deviceptr src, size_t bytes, cg_cu_stream stream) {
  enter();
  cg_cu_result r = copy_checks("cuMemcpyDtoHAsync", stream, 0, dst, src, NULL, bytes);
  if (r == CG_CUDA_SUCCESS && rt_emu_capturing(stream))
    return record_copy(stream, EMU_REC_DTOH, (uint64_t)(uintptr_t)dst, src, bytes, 0);
  if (r != CG_CUDA_SUCCESS || !bytes) return r;
  unsigned char *data = malloc(bytes);
  if (!data || !add_pending(stream_of(stream), (pending_copy){dst, data, bytes, NULL})) {
    free(data);
    return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuMemcpyDtoHAsync: out of host memory");
  }
  memcpy(data, hp(src), bytes);
  S.async_downloads++;
  const uint32_t nan = 0x7fc00000u;
  size_t i = 0;
  for (; i + 4 <= bytes; i += 4) memcpy((char *)dst + i, &nan, 4);
  memset((char *)dst + i, 0xff, bytes - i);
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuMemsetD8(cg_cu_deviceptr dst, unsigned char value, size_t n) {
  enter();
  cg_cu_result r = copy_checks("cuMemsetD8", NULL, dst, NULL, 0, &value, n);
  if (r != CG_CUDA_SUCCESS) return r;
  complete_all(true);
  if (n) memset(hp(dst), value, n);
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuMemsetD8Async(cg_cu_deviceptr dst, unsigned char value, size_t n, cg_cu_stream stream) {
  enter();
  cg_cu_result r = copy_checks("cuMemsetD8Async", stream, dst, NULL, 0, &value, n);
  if (r == CG_CUDA_SUCCESS && rt_emu_capturing(stream)) return record_copy(stream, EMU_REC_MEMSET, dst, 0, n, value);
  if (r == CG_CUDA_SUCCESS && n) memset(hp(dst), value, n);
  return r;
}

cg_cu_result stub_cuPointerGetAttribute(void *data, cg_cu_pointer_attribute attribute, cg_cu_deviceptr ptr) {
  ENTER_CONTEXT("cuPointerGetAttribute");
  if (find_alloc(ptr) < 0)
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuPointerGetAttribute: 0x%llx is not device memory", (unsigned long long)ptr);
  switch (attribute) {
  case CG_CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = CG_CU_MEMORYTYPE_DEVICE; break;
  case CG_CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(cg_cu_deviceptr *)data = ptr; break;
  case CG_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = 0; break;
  case CG_CU_POINTER_ATTRIBUTE_CONTEXT: *(cg_cu_context *)data = &the_context; break;
  default: return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuPointerGetAttribute: attribute %u is not in the stub", attribute);
  }
  return CG_CUDA_SUCCESS;
}

/* ---- modules: what a cubin says of its kernels ---- */

enum { EIFMT_SVAL = 4, EIATTR_MAX_THREADS = 0x05, EIATTR_KPARAM_INFO = 0x17 };

/* The image's headers, copied (it need not be 8-byte aligned). */
static Elf64_Ehdr elf_header(const unsigned char *img) {
  Elf64_Ehdr eh;
  memcpy(&eh, img, sizeof eh);
  return eh;
}
static Elf64_Shdr section_header(const unsigned char *img, int i) {
  Elf64_Ehdr eh = elf_header(img);
  Elf64_Shdr sh;
  memcpy(&sh, img + eh.e_shoff + (size_t)i * sizeof sh, sizeof sh);
  return sh;
}
static const char *section_name(const unsigned char *img, int i) {
  Elf64_Ehdr eh = elf_header(img);
  return (const char *)img + section_header(img, eh.e_shstrndx).sh_offset + section_header(img, i).sh_name;
}

/* The ELF section named name into *out: whether there is one. */
static bool section(const unsigned char *img, const char *name, Elf64_Shdr *out) {
  Elf64_Ehdr eh = elf_header(img);
  for (int i = 0; i < eh.e_shnum; i++)
    if (strcmp(section_name(img, i), name) == 0) {
      *out = section_header(img, i);
      return true;
    }
  return false;
}

/* __launch_bounds__ and the parameter count from .nv.info.NAME. */
static void read_info(const unsigned char *img, const char *kernel, stub_function *f) {
  char name[300];
  snprintf(name, sizeof name, ".nv.info.%s", kernel);
  Elf64_Shdr sh;
  if (!section(img, name, &sh)) return;
  const unsigned char *p = img + sh.sh_offset, *end = p + sh.sh_size;
  while (p + 4 <= end) {
    unsigned fmt = p[0], attr = p[1];
    size_t size = fmt == EIFMT_SVAL ? (size_t)(p[2] | p[3] << 8) : 0;
    if (fmt == EIFMT_SVAL && attr == EIATTR_MAX_THREADS && size >= 12 && p + 16 <= end) {
      uint32_t t[3];
      memcpy(t, p + 4, sizeof t);
      f->lim.max_threads = (int)(t[0] * t[1] * t[2]);
    }
    if (fmt == EIFMT_SVAL && attr == EIATTR_KPARAM_INFO) f->nparams++;
    p += 4 + size;
  }
}

static void free_module(void *p) {
  struct CUmod_st *m = p;
  while (m->functions) {
    stub_function *f = m->functions;
    m->functions = f->next;
    free(f);
  }
  free(m);
}

cg_cu_result stub_cuModuleLoadData(cg_cu_module *module, const void *image) {
  ENTER_CONTEXT("cuModuleLoadData");
  const unsigned char *img = image;
  if (!img || memcmp(img, ELFMAG, SELFMAG) != 0 || img[EI_CLASS] != ELFCLASS64 || elf_header(img).e_machine != 190)
    return fail(CG_CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: not a cubin (the stub loads no PTX)");
  Elf64_Ehdr eh = elf_header(img);
  int arch = (int)((eh.e_flags >> 8) & 0xff); /* EF_CUDA_SM */
  if (arch != S.arch->arch)
    return fail(CG_CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData: a cubin for sm_%d cannot run on sm_%d", arch,
                S.arch->arch);
  struct CUmod_st *m = calloc(1, sizeof *m);
  if (!m) return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuModuleLoadData: out of host memory");
  for (int i = 0; i < eh.e_shnum; i++) {
    const char *sname = section_name(img, i);
    if (strncmp(sname, ".text.", 6) != 0) continue;
    stub_function *f = calloc(1, sizeof *f);
    if (!f) {
      free_module(m);
      return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuModuleLoadData: out of host memory");
    }
    snprintf(f->name, sizeof f->name, "%s", sname + 6);
    char shared[300];
    snprintf(shared, sizeof shared, ".nv.shared.%s", f->name);
    Elf64_Shdr sm;
    unsigned long long static_smem = section(img, shared, &sm) ? sm.sh_size : 0;
    /* a kernel's .text section holds its register count in sh_info's top byte */
    f->lim = (rt_emu_launch_limits){f->name, static_smem, 0, S.arch->smem_optin, S.arch->arch,
                                    (int)(section_header(img, i).sh_info >> 24), 0};
    f->lim.max_dynamic_smem = RT_EMU_STATIC_SMEM_LIMIT - (int)f->lim.static_smem;
    read_info(img, f->name, f);
    S.kernels++;
    f->next = m->functions;
    m->functions = f;
  }
  *module = push(&S.modules, m);
  S.modules_loaded++;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuModuleUnload(cg_cu_module module) {
  return destroy(&S.modules, module, free_module, "cuModuleUnload: not a loaded module");
}

cg_cu_result stub_cuModuleGetFunction(cg_cu_function *function, cg_cu_module module, const char *name) {
  ENTER_CONTEXT("cuModuleGetFunction");
  for (stub_function *f = module ? module->functions : NULL; f; f = f->next)
    if (strcmp(f->name, name) == 0) {
      *function = (cg_cu_function)f;
      return CG_CUDA_SUCCESS;
    }
  return fail(CG_CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction: the module has no kernel %s", name);
}

static stub_function *function_of(cg_cu_function fn) {
  for (struct CUmod_st *m = S.modules; m; m = m->next)
    for (stub_function *f = m->functions; f; f = f->next)
      if ((cg_cu_function)f == fn) return f;
  return NULL;
}

cg_cu_result stub_cuFuncGetAttribute(int *value, cg_cu_function_attribute attrib, cg_cu_function fn) {
  enter();
  stub_function *f = function_of(fn);
  if (!f) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuFuncGetAttribute: not a function of a loaded module");
  switch (attrib) {
  case CG_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: {
    int by_regs = f->lim.regs > 0 ? 65536 / ((f->lim.regs * 32 + 255) / 256 * 256) * 32 : 1024;
    *value = f->lim.max_threads > 0 && f->lim.max_threads < by_regs ? f->lim.max_threads : by_regs < 1024 ? by_regs : 1024;
    break;
  }
  case CG_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = (int)f->lim.static_smem; break;
  case CG_CU_FUNC_ATTRIBUTE_NUM_REGS: *value = f->lim.regs; break;
  case CG_CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = S.arch->arch; break;
  case CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = f->lim.max_dynamic_smem; break;
  case CG_CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
  case CG_CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = 0; break;
  default: return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuFuncGetAttribute: attribute %u is not in the stub", attrib);
  }
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuFuncSetAttribute(cg_cu_function fn, cg_cu_function_attribute attrib, int value) {
  enter();
  stub_function *f = function_of(fn);
  if (!f) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuFuncSetAttribute: not a function of a loaded module");
  if (attrib == CG_CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) return CG_CUDA_SUCCESS;
  if (attrib != CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute: attribute %u cannot be set", attrib);
  char why[512];
  cg_cu_result r = rt_emu_smem_optin_rule(&f->lim, value, why, sizeof why);
  if (r != CG_CUDA_SUCCESS) return fail(r, "cuFuncSetAttribute: %s", why);
  f->lim.max_dynamic_smem = value;
  return CG_CUDA_SUCCESS;
}

/* A launch recorded by a capture: the kernel and its dimensions (the
 * kernel is a no-op: its parameters are not kept, the replay passes
 * placeholders), replayed through cuLaunchKernel's checks. */
typedef struct {
  cg_cu_function fn;
  unsigned grid[3], block[3], smem;
} recorded_launch;

static cg_cu_result replay_launch(const void *payload, cg_cu_stream s) {
  const recorded_launch *l = payload;
  static uint64_t placeholder;
  void *params[4096];
  stub_function *f = function_of(l->fn);
  for (int i = 0; f && i < f->nparams && i < 4096; i++) params[i] = &placeholder;
  return stub_cuLaunchKernel(l->fn, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->smem, s,
                             params, NULL);
}

cg_cu_result stub_cuLaunchKernel(cg_cu_function fn, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                                 unsigned int block_x, unsigned int block_y, unsigned int block_z,
                                 unsigned int shared_bytes, cg_cu_stream stream, void **params, void **extra) {
  ENTER_CONTEXT("cuLaunchKernel");
  if (!stream_of(stream)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel: not a stream of this context");
  if ((r = rt_emu_capture_legacy("cuLaunchKernel", stream)) != CG_CUDA_SUCCESS) return r;
  stub_function *f = function_of(fn);
  if (!f) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel: not a function of a loaded module");
  const unsigned grid[3] = {grid_x, grid_y, grid_z}, block[3] = {block_x, block_y, block_z};
  char why[1024];
  if ((r = rt_emu_launch_rules(&f->lim, grid, block, shared_bytes, why, sizeof why)) != CG_CUDA_SUCCESS)
    return fail(r, "cuLaunchKernel: %s", why);
  if (params && extra) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: %s: both kernelParams and extra", f->name);
  if (!params && !extra && f->nparams > 0)
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: %s takes %d parameters, kernelParams is NULL", f->name,
                f->nparams);
  for (int i = 0; params && i < f->nparams; i++)
    if (!params[i]) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: %s: kernelParams[%d] is NULL", f->name, i);
  if (rt_emu_capturing(stream)) {
    recorded_launch l = {fn, {grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared_bytes};
    return rt_emu_capture_node(stream, replay_launch, &l, sizeof l);
  }
  S.launches++;
  return CG_CUDA_SUCCESS; /* the kernel is a no-op */
}

/* ---- streams and events ---- */

cg_cu_result stub_cuStreamCreate(cg_cu_stream *stream, unsigned int flags) {
  ENTER_CONTEXT("cuStreamCreate");
  if (flags > CG_CU_STREAM_NON_BLOCKING) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuStreamCreate: flags %u", flags);
  struct CUstream_st *s = push(&S.streams, calloc(1, sizeof *s));
  if (!s) return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuStreamCreate: out of host memory");
  s->flags = flags;
  *stream = s;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuStreamDestroy(cg_cu_stream stream) {
  enter();
  if (!stream_of(stream) || stream == &S.legacy)
    return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy: not a stream of this context");
  complete(stream, stream->n_pending); /* its work finishes first */
  unlink_node(&S.streams, stream);
  for (struct CUevent_st *e = S.events; e; e = e->next)
    if (e->stream == stream) e->stream = NULL;
  free(stream->pending);
  free(stream);
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuStreamSynchronize(cg_cu_stream stream) {
  ENTER_CONTEXT("cuStreamSynchronize");
  cg_cu_stream s = stream_of(stream);
  if (!s) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuStreamSynchronize: not a stream of this context");
  if ((r = rt_emu_capture_legacy("cuStreamSynchronize", stream)) != CG_CUDA_SUCCESS ||
      (rt_emu_capturing(stream) && (r = rt_emu_capture_forbid("cuStreamSynchronize", stream)) != CG_CUDA_SUCCESS))
    return r;
  if (s == &S.legacy) complete_all(true); /* the legacy stream waits for every blocking stream */
  else complete(s, s->n_pending);
  return CG_CUDA_SUCCESS;
}

/* ---- stream capture and graphs (runtime/cuda_emu/capture.c) ---- */

cg_cu_result stub_cuStreamBeginCapture(cg_cu_stream stream, cg_cu_stream_capture_mode mode) {
  ENTER_CONTEXT("cuStreamBeginCapture");
  cg_cu_stream s = stream_of(stream);
  if (!s) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuStreamBeginCapture: not a stream of this context");
  return rt_emu_capture_begin(stream, !(s->flags & CG_CU_STREAM_NON_BLOCKING), mode);
}

cg_cu_result stub_cuStreamEndCapture(cg_cu_stream stream, cg_cu_graph *graph) {
  ENTER_CONTEXT("cuStreamEndCapture");
  return rt_emu_capture_end(stream, graph);
}

cg_cu_result stub_cuStreamIsCapturing(cg_cu_stream stream, cg_cu_stream_capture_status *status) {
  ENTER_CONTEXT("cuStreamIsCapturing");
  return rt_emu_capture_status(stream, status);
}

cg_cu_result stub_cuGraphInstantiate(cg_cu_graph_exec *exec, cg_cu_graph graph, unsigned long long flags) {
  ENTER_CONTEXT("cuGraphInstantiate");
  return rt_emu_graph_instantiate(exec, graph, flags);
}

cg_cu_result stub_cuGraphLaunch(cg_cu_graph_exec exec, cg_cu_stream stream) {
  ENTER_CONTEXT("cuGraphLaunch");
  if (!stream_of(stream)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuGraphLaunch: not a stream of this context");
  if ((r = rt_emu_capture_legacy("cuGraphLaunch", stream)) != CG_CUDA_SUCCESS) return r;
  return rt_emu_graph_launch(exec, stream);
}

cg_cu_result stub_cuGraphExecDestroy(cg_cu_graph_exec exec) { return rt_emu_cuGraphExecDestroy(exec); }
cg_cu_result stub_cuGraphDestroy(cg_cu_graph graph) { return rt_emu_cuGraphDestroy(graph); }

static struct CUevent_st *event_of(cg_cu_event e) {
  for (struct CUevent_st *t = S.events; t; t = t->next)
    if (t == e) return t;
  return NULL;
}

cg_cu_result stub_cuEventCreate(cg_cu_event *event, unsigned int flags) {
  ENTER_CONTEXT("cuEventCreate");
  (void)flags;
  if (!(*event = push(&S.events, calloc(1, sizeof **event))))
    return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuEventCreate: out of host memory");
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuEventDestroy(cg_cu_event event) {
  return destroy(&S.events, event, free, "cuEventDestroy: not an event");
}

cg_cu_result stub_cuEventRecord(cg_cu_event event, cg_cu_stream stream) {
  ENTER_CONTEXT("cuEventRecord");
  struct CUevent_st *e = event_of(event);
  cg_cu_stream s = stream_of(stream);
  if (!e || !s) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuEventRecord: not an event or not a stream");
  e->stream = s, e->upto = s->n_pending, e->recorded = true;
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuEventSynchronize(cg_cu_event event) {
  ENTER_CONTEXT("cuEventSynchronize");
  struct CUevent_st *e = event_of(event);
  if (!e) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuEventSynchronize: not an event");
  if (e->recorded && e->stream) complete(e->stream, e->upto);
  return CG_CUDA_SUCCESS;
}

/* The stream's later work waits for the event's stream up to the record:
 * the handles checked; nothing completes for the host. */
cg_cu_result stub_cuStreamWaitEvent(cg_cu_stream stream, cg_cu_event event, unsigned int flags) {
  ENTER_CONTEXT("cuStreamWaitEvent");
  if (!stream_of(stream) || !event_of(event))
    return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuStreamWaitEvent: not a stream or not an event");
  if (flags) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuStreamWaitEvent: flags %u", flags);
  return CG_CUDA_SUCCESS;
}

cg_cu_result stub_cuEventElapsedTime(float *milliseconds, cg_cu_event start, cg_cu_event end) {
  enter();
  struct CUevent_st *a = event_of(start), *b = event_of(end);
  if (!a || !b) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: not an event");
  if (!a->recorded || !b->recorded) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: an event was not recorded");
  *milliseconds = 0.001f; /* nothing runs */
  return CG_CUDA_SUCCESS;
}

/* ---- cuBLASLt: blaslt_rules.c's entries and checks; the product ---- */

cg_cublas_status rt_emu_blaslt_run(const emu_problem *p, double alpha, double beta, const void *a, const void *b,
                                   const void *c, void *d, cg_cu_stream stream) {
  (void)p, (void)alpha, (void)beta, (void)a, (void)b, (void)c, (void)d;
  if (!stream_of(stream)) return rt_emu_blaslt_fail(CG_CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: not a stream");
  S.products++;
  return CG_CUBLAS_STATUS_SUCCESS; /* the product is a no-op: the checks were all */
}

/* ---- NCCL: one rank ---- */

struct ncclComm {
  int nranks, rank;
};
static int nccl_group;

cg_nccl_result stub_ncclGetVersion(int *version) {
  *version = 22703;
  return CG_ncclSuccess;
}

const char *stub_ncclGetErrorString(cg_nccl_result result) {
  return result == CG_ncclSuccess ? "no error" : result == CG_ncclInvalidArgument ? "invalid argument"
                                              : result == CG_ncclInvalidUsage     ? "invalid usage"
                                                                                  : "error";
}

cg_nccl_result stub_ncclGetUniqueId(cg_nccl_unique_id *id) {
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "tgc cuda stub");
  return CG_ncclSuccess;
}

cg_nccl_result stub_ncclCommInitRank(cg_nccl_comm *comm, int nranks, cg_nccl_unique_id id, int rank) {
  (void)id;
  enter();
  if (nranks != 1 || rank != 0)
    return fail(CG_ncclInvalidUsage, "ncclCommInitRank: rank %d of %d: the stub runs one rank", rank, nranks);
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return fail(CG_ncclSystemError, "ncclCommInitRank: out of host memory");
  c->nranks = 1;
  *comm = c;
  return CG_ncclSuccess;
}

cg_nccl_result stub_ncclCommDestroy(cg_nccl_comm comm) {
  free(comm);
  return CG_ncclSuccess;
}

static size_t nccl_bytes(cg_nccl_data_type t) {
  switch (t) {
  case CG_ncclInt8: case CG_ncclUint8: return 1;
  case CG_ncclFloat16: case CG_ncclBfloat16: return 2;
  case CG_ncclInt32: case CG_ncclUint32: case CG_ncclFloat32: return 4;
  default: return 8;
  }
}

/* NCCL's buffer rules for one collective of a one-rank communicator:
 * both buffers in device memory; in place only when the send buffer is
 * where NCCL documents it (recv + rank * count for all-gather, the rank's
 * block for reduce-scatter, the same pointer otherwise); out of place,
 * apart. Then the data moves as one rank's collective moves it. */
static cg_nccl_result collective(const char *call, const void *send, size_t send_count, void *recv, size_t recv_count,
                                 cg_nccl_data_type type, cg_nccl_comm comm, cg_cu_stream stream) {
  enter();
  if (!comm) return fail(CG_ncclInvalidArgument, "%s: comm is NULL", call);
  if (!stream_of(stream)) return fail(CG_ncclInvalidArgument, "%s: not a stream", call);
  size_t sb = send_count * nccl_bytes(type), rb = recv_count * nccl_bytes(type);
  uint64_t s = (uint64_t)(uintptr_t)send, r = (uint64_t)(uintptr_t)recv;
  if ((sb && rt_emu_device_range(s, sb) != 1) || (rb && rt_emu_device_range(r, rb) != 1))
    return fail(CG_ncclInvalidArgument, "%s: the %s buffer is not inside one device allocation", call,
                     sb && rt_emu_device_range(s, sb) != 1 ? "send" : "receive");
  uint64_t in_place = r + (uint64_t)comm->rank * sb; /* all-gather's and reduce-scatter's slot of this rank */
  bool overlap = sb && rb && s < r + rb && r < s + sb;
  if (overlap && s != r && s != in_place)
    return fail(CG_ncclInvalidArgument, "%s: the send buffer [0x%llx, +%zu) overlaps the receive buffer [0x%llx, "
                     "+%zu) without being in place", call, (unsigned long long)s, sb, (unsigned long long)r, rb);
  if (sb && rb && s != r) memmove(recv, send, sb < rb ? sb : rb);
  return CG_ncclSuccess;
}

cg_nccl_result stub_ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, cg_nccl_data_type datatype,
                                  cg_nccl_red_op op, cg_nccl_comm comm, cg_cu_stream stream) {
  (void)op;
  return collective("ncclAllReduce", sendbuff, count, recvbuff, count, datatype, comm, stream);
}

cg_nccl_result stub_ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, cg_nccl_data_type datatype,
                                  cg_nccl_comm comm, cg_cu_stream stream) {
  return collective("ncclAllGather", sendbuff, sendcount, recvbuff, sendcount * (size_t)(comm ? comm->nranks : 1),
                    datatype, comm, stream);
}

cg_nccl_result stub_ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                      cg_nccl_data_type datatype, cg_nccl_red_op op, cg_nccl_comm comm,
                                      cg_cu_stream stream) {
  (void)op;
  return collective("ncclReduceScatter", sendbuff, recvcount * (size_t)(comm ? comm->nranks : 1), recvbuff, recvcount,
                    datatype, comm, stream);
}

cg_nccl_result stub_ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, cg_nccl_data_type datatype,
                                  int root, cg_nccl_comm comm, cg_cu_stream stream) {
  if (root != 0) return fail(CG_ncclInvalidArgument, "ncclBroadcast: root %d of 1 rank", root);
  return collective("ncclBroadcast", sendbuff, count, recvbuff, count, datatype, comm, stream);
}

cg_nccl_result stub_ncclSend(const void *sendbuff, size_t count, cg_nccl_data_type datatype, int peer,
                             cg_nccl_comm comm, cg_cu_stream stream) {
  (void)sendbuff, (void)count, (void)datatype, (void)comm, (void)stream;
  return fail(CG_ncclInvalidArgument, "ncclSend: peer %d: the stub runs one rank", peer);
}

cg_nccl_result stub_ncclRecv(void *recvbuff, size_t count, cg_nccl_data_type datatype, int peer, cg_nccl_comm comm,
                             cg_cu_stream stream) {
  (void)recvbuff, (void)count, (void)datatype, (void)comm, (void)stream;
  return fail(CG_ncclInvalidArgument, "ncclRecv: peer %d: the stub runs one rank", peer);
}

cg_nccl_result stub_ncclGroupStart(void) {
  nccl_group++;
  return CG_ncclSuccess;
}

cg_nccl_result stub_ncclGroupEnd(void) {
  if (nccl_group == 0) return fail(CG_ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart");
  nccl_group--;
  return CG_ncclSuccess;
}
