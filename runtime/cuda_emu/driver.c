/* runtime/cuda_emu/driver.c — the driver API of the emulated GPU.
 *
 * One emulated device (sm_80 like an A100, or sm_90 like an H100) with:
 *   memory    memory.c;
 *   modules   the image is a shared object behind a small header (written
 *             by the emulator's NVRTC, nvrtc.c); loading is dlopen of a
 *             memfd; an image for a newer arch than the device's is refused
 *             like a GPU does (CUDA_ERROR_NO_BINARY_FOR_GPU);
 *   launches  checked as a GPU checks them (block and grid dimensions,
 *             static + dynamic shared memory against 48 KiB or the
 *             function's opt-in, which cuFuncSetAttribute may raise to the
 *             arch's limit), then run to completion by exec.c;
 *   errors    a launch that faults returns CUDA_SUCCESS and the fault is
 *             sticky, as on a GPU: every later call returns it (with the
 *             kernel, block and thread in the detail) until
 *             cuDevicePrimaryCtxReset. Streams are in-order and synchronous;
 *   capture   a stream in capture records its launches, copies, memsets
 *             and products instead of running them, and cuGraphLaunch
 *             replays them (capture.c, with the rules a GPU enforces). A
 *             recorded launch keeps each kernel parameter as 8 bytes read
 *             at capture (tgc's kernels take pointers and scalars of at
 *             most 8 bytes, passed in 8-byte variables: the emulated
 *             kernels carry no parameter sizes).
 * The detail line of a failing call is per host thread (emu_detail). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* memfd_create */
#include <time.h>
#include <unistd.h>

#include "ir_clock.h"
#include "emu_internal.h"

#define STATIC_SMEM_LIMIT RT_EMU_STATIC_SMEM_LIMIT
#define MAX_RACE_LINES 64


#define LEGACY_STREAM ((cg_cu_stream)0x1)
#define PER_THREAD_STREAM ((cg_cu_stream)0x2)
/* a created stream as itself, the legacy and per-thread ones as NULL */
static cg_cu_stream stream_or_null(cg_cu_stream s) {
  return s == LEGACY_STREAM || s == PER_THREAD_STREAM ? NULL : s;
}

/* Streams, events and modules are listed (a handle a caller passes is
 * looked up before it is used): each starts with its link. */
typedef struct listed {
  struct listed *next;
} listed;

struct CUctx_st {
  int unused;
};
struct CUstream_st {
  listed link;
  unsigned int flags;
};
struct CUevent_st {
  listed link;
  unsigned int flags;
  bool recorded;
  double ms;
  cg_cu_stream stream; /* of its last record (NULL: the legacy stream) */
  long mark;           /* rt_emu_nccl_mark then */
};
struct CUmod_st {
  listed link;
  void *dl;
  int fd; /* the memfd it was loaded from: open while loaded, so that no
           * later module gets the same /proc/self/fd/N name (dlopen would
           * hand back this one) */
  const tgc_emu_module *m;
  emu_function *functions;
};

static struct {
  pthread_mutex_t lock;
  bool loaded, initialized;
  rt_cuda_emu_config cfg;
  char cxx[4096];
  const emu_arch *arch;
  int ctx_refs;
  cg_cu_result sticky;
  char sticky_detail[1024];
  listed *modules, *streams, *events;
  rt_cuda_emu_counters counters;
  char *race_lines[MAX_RACE_LINES];
  int nrace_lines;
  int64_t launch_races;  /* hazards of the launch running now */
  char launch_first_race[512];
} emu = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct CUctx_st the_context;
static _Thread_local char detail[1024];
static _Thread_local bool ctx_current;

static void list_add(listed **list, listed *l) {
  pthread_mutex_lock(&emu.lock);
  l->next = *list;
  *list = l;
  pthread_mutex_unlock(&emu.lock);
}

/* Unlinks h; false when it is not in the list. */
static bool list_remove(listed **list, const void *h) {
  pthread_mutex_lock(&emu.lock);
  listed **p = list;
  while (*p && (const void *)*p != h) p = &(*p)->next;
  bool found = *p != NULL;
  if (found) *p = (*p)->next;
  pthread_mutex_unlock(&emu.lock);
  return found;
}

static bool list_has(const listed *list, const void *h) {
  for (; list; list = list->next)
    if ((const void *)list == h) return true;
  return false;
}

static void list_free(listed **list, void (*free_one)(void *)) {
  while (*list) {
    listed *l = *list;
    *list = l->next;
    free_one(l);
  }
}

/* ---- details, errors ---- */

void rt_emu_set_detail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
}

static const char *get_detail(void) { return detail; }
const char *rt_emu_detail(void) { return detail; }

#define ENTER() rt_emu_enter()
#define fail rt_emu_fail
#define need_context rt_emu_need_context
#define check_stream rt_emu_check_stream

void rt_emu_enter(void) { detail[0] = 0; }

cg_cu_result rt_emu_fail(cg_cu_result r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return r;
}

cg_cu_result rt_emu_need_context(void) {
  if (!emu.initialized) return fail(CG_CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called");
  if (!ctx_current) return fail(CG_CUDA_ERROR_INVALID_CONTEXT, "no current context (cuCtxSetCurrent)");
  if (emu.sticky != CG_CUDA_SUCCESS) return fail(emu.sticky, "%s", emu.sticky_detail);
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_sticky_error(const char **d) {
  *d = emu.sticky_detail;
  return emu.sticky;
}

void rt_emu_set_sticky(cg_cu_result r, const char *d) {
  pthread_mutex_lock(&emu.lock);
  if (emu.sticky == CG_CUDA_SUCCESS) {
    emu.sticky = r;
    snprintf(emu.sticky_detail, sizeof emu.sticky_detail, "%s", d);
  }
  pthread_mutex_unlock(&emu.lock);
}

const emu_arch *rt_emu_current_arch(void) { return emu.arch; }
const rt_cuda_emu_config *rt_emu_config(void) { return &emu.cfg; }
rt_cuda_emu_counters *rt_emu_counters(void) { return &emu.counters; }
cg_cu_context rt_emu_context(void) { return &the_context; }

void rt_emu_race_report(const char *line) {
  emu.counters.races++;
  if (emu.launch_races++ == 0) snprintf(emu.launch_first_race, sizeof emu.launch_first_race, "%s", line);
  for (int i = 0; i < emu.nrace_lines; i++)
    if (strcmp(emu.race_lines[i], line) == 0) return;
  if (emu.nrace_lines < MAX_RACE_LINES) emu.race_lines[emu.nrace_lines++] = strdup(line);
}

/* ---- errors, init, devices ---- */

cg_cu_result rt_emu_cuGetErrorName(cg_cu_result error, const char **str) {
  *str = cg_cu_result_name(error);
  return *str ? CG_CUDA_SUCCESS : CG_CUDA_ERROR_INVALID_VALUE;
}

cg_cu_result rt_emu_cuGetErrorString(cg_cu_result error, const char **str) {
  *str = cg_cu_result_string(error);
  return *str ? CG_CUDA_SUCCESS : CG_CUDA_ERROR_INVALID_VALUE;
}

cg_cu_result rt_emu_cuInit(unsigned int flags) {
  ENTER();
  if (flags != 0) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuInit flags must be 0");
  if (emu.cfg.devices == 0) return fail(CG_CUDA_ERROR_NO_DEVICE, "the emulator is configured with no device");
  emu.initialized = true;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuDriverGetVersion(int *version) {
  ENTER();
  *version = emu.cfg.driver_version;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuDeviceGetCount(int *count) {
  ENTER();
  if (!emu.initialized) return fail(CG_CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called");
  *count = emu.cfg.devices;
  return CG_CUDA_SUCCESS;
}

static cg_cu_result check_device(cg_cu_device dev) {
  if (!emu.initialized) return fail(CG_CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called");
  if (dev < 0 || dev >= emu.cfg.devices) return fail(CG_CUDA_ERROR_INVALID_DEVICE, "no emulated device %d", dev);
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuDeviceGet(cg_cu_device *device, int ordinal) {
  ENTER();
  cg_cu_result r = check_device(ordinal);
  if (r == CG_CUDA_SUCCESS) *device = ordinal;
  return r;
}

cg_cu_result rt_emu_cuDeviceGetName(char *name, int len, cg_cu_device dev) {
  ENTER();
  cg_cu_result r = check_device(dev);
  if (r != CG_CUDA_SUCCESS) return r;
  if (len <= 0) return fail(CG_CUDA_ERROR_INVALID_VALUE, "name buffer of %d bytes", len);
  snprintf(name, (size_t)len, "%s", emu.arch->name);
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuDeviceTotalMem(size_t *bytes, cg_cu_device dev) {
  ENTER();
  cg_cu_result r = check_device(dev);
  if (r == CG_CUDA_SUCCESS) *bytes = emu.cfg.device_bytes;
  return r;
}

cg_cu_result rt_emu_cuDeviceGetAttribute(int *value, cg_cu_device_attribute attrib, cg_cu_device dev) {
  ENTER();
  cg_cu_result r = check_device(dev);
  if (r != CG_CUDA_SUCCESS) return r;
  if (rt_emu_device_attribute(emu.arch, attrib, value) != 0)
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "device attribute %u is not emulated", attrib);
  return CG_CUDA_SUCCESS;
}

/* ---- contexts ---- */

cg_cu_result rt_emu_cuDevicePrimaryCtxRetain(cg_cu_context *ctx, cg_cu_device dev) {
  ENTER();
  cg_cu_result r = check_device(dev);
  if (r != CG_CUDA_SUCCESS) return r;
  emu.ctx_refs++;
  *ctx = &the_context;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuDevicePrimaryCtxRelease(cg_cu_device dev) {
  ENTER();
  cg_cu_result r = check_device(dev);
  if (r != CG_CUDA_SUCCESS) return r;
  if (emu.ctx_refs == 0) return fail(CG_CUDA_ERROR_INVALID_CONTEXT, "the primary context is not retained");
  emu.ctx_refs--;
  return CG_CUDA_SUCCESS;
}

static void free_modules(void);

/* Destroys everything in the context (memory, modules, streams, events)
 * and clears a sticky error, as the driver does. */
cg_cu_result rt_emu_cuDevicePrimaryCtxReset(cg_cu_device dev) {
  ENTER();
  cg_cu_result r = check_device(dev);
  if (r != CG_CUDA_SUCCESS) return r;
  free_modules();
  list_free(&emu.streams, free);
  list_free(&emu.events, free);
  rt_emu_memory_reset();
  pthread_mutex_lock(&emu.lock);
  emu.sticky = CG_CUDA_SUCCESS;
  emu.sticky_detail[0] = 0;
  pthread_mutex_unlock(&emu.lock);
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuCtxSetCurrent(cg_cu_context ctx) {
  ENTER();
  if (!emu.initialized) return fail(CG_CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called");
  if (ctx && ctx != &the_context) return fail(CG_CUDA_ERROR_INVALID_CONTEXT, "not the emulator's context");
  if (ctx && emu.ctx_refs == 0) return fail(CG_CUDA_ERROR_INVALID_CONTEXT, "the primary context is not retained");
  ctx_current = ctx != NULL;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuCtxSynchronize(void) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = rt_emu_capture_forbid("cuCtxSynchronize", NULL);
  return r == CG_CUDA_SUCCESS ? rt_emu_nccl_force(NULL, true, rt_emu_nccl_mark()) : r;
}

/* ---- modules ---- */

static void unload(void *p) {
  struct CUmod_st *m = p;
  dlclose(m->dl);
  close(m->fd);
  free(m->functions);
  free(m);
}

static void free_modules(void) { list_free(&emu.modules, unload); }

/* dlopen of the shared object in image, through a memfd (left open in *fd). */
static void *open_image(const unsigned char *so, size_t bytes, int *fd, char *why, size_t len) {
  *fd = memfd_create("tgc-emu-module", MFD_CLOEXEC);
  if (*fd < 0) {
    snprintf(why, len, "memfd_create: %s", strerror(errno));
    return NULL;
  }
  size_t done = 0;
  while (done < bytes) {
    ssize_t w = write(*fd, so + done, bytes - done);
    if (w <= 0) break;
    done += (size_t)w;
  }
  void *dl = NULL;
  if (done == bytes) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", *fd);
    dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) snprintf(why, len, "%s", dlerror());
  } else {
    snprintf(why, len, "could not write the module to memory");
  }
  if (!dl) close(*fd);
  return dl;
}

cg_cu_result rt_emu_cuModuleLoadData(cg_cu_module *module, const void *image) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  const emu_image_header *h = image;
  if (!image) return fail(CG_CUDA_ERROR_INVALID_VALUE, "no image");
  if (memcmp(h->magic, EMU_IMAGE_MAGIC, 8) != 0) {
    if (memcmp(image, "\177ELF", 4) == 0)
      return fail(CG_CUDA_ERROR_INVALID_IMAGE, "a GPU binary cannot run in cuda-emu: compile with the emulator's NVRTC");
    return fail(CG_CUDA_ERROR_INVALID_IMAGE, "not a cuda-emu module");
  }
  if (h->abi_version != TGC_EMU_ABI_VERSION)
    return fail(CG_CUDA_ERROR_INVALID_IMAGE, "module of emulator ABI %u, this emulator runs %d", h->abi_version,
                TGC_EMU_ABI_VERSION);
  if ((int)h->arch / 10 != emu.arch->arch / 10 || (int)h->arch > emu.arch->arch)
    return fail(CG_CUDA_ERROR_NO_BINARY_FOR_GPU, "module compiled for sm_%u cannot run on the emulated sm_%d",
                h->arch, emu.arch->arch);
  if ((bool)h->racecheck != emu.cfg.racecheck)
    return fail(CG_CUDA_ERROR_INVALID_IMAGE, "module compiled %s racecheck, the emulator runs %s it",
                h->racecheck ? "with" : "without", emu.cfg.racecheck ? "with" : "without");
  char why[1024];
  int fd = -1;
  void *dl = open_image((const unsigned char *)image + sizeof *h, (size_t)h->so_bytes, &fd, why, sizeof why);
  if (!dl) return fail(CG_CUDA_ERROR_INVALID_IMAGE, "cannot load the module: %s", why);
  tgc_emu_module_get_fn get = (tgc_emu_module_get_fn)dlsym(dl, TGC_EMU_MODULE_SYMBOL);
  const tgc_emu_module *m = get ? get() : NULL;
  const char *bad = !m ? "it has no " TGC_EMU_MODULE_SYMBOL
                       : m->abi_version != TGC_EMU_ABI_VERSION ? "it was built against another emu_abi.h"
                                                               : m->error;
  if (bad) {
    snprintf(why, sizeof why, "%s", bad);
    dlclose(dl);
    close(fd);
    return fail(CG_CUDA_ERROR_INVALID_IMAGE, "cannot use the module: %s", why);
  }
  struct CUmod_st *mod = calloc(1, sizeof *mod);
  emu_function *fs = calloc((size_t)(m->nkernels ? m->nkernels : 1), sizeof *fs);
  if (!mod || !fs) {
    free(mod), free(fs), dlclose(dl), close(fd);
    return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int i = 0; i < m->nkernels; i++) {
    fs[i].module = mod;
    fs[i].kernel = &m->kernels[i];
    fs[i].max_dynamic_smem = STATIC_SMEM_LIMIT - (int)m->kernels[i].static_smem;
    fs[i].carveout = -1;
  }
  mod->dl = dl, mod->fd = fd, mod->m = m, mod->functions = fs;
  list_add(&emu.modules, &mod->link);
  emu.counters.modules_loaded++;
  *module = mod;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuModuleUnload(cg_cu_module module) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  if (!list_remove(&emu.modules, module)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not a loaded module");
  unload(module);
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuModuleGetFunction(cg_cu_function *function, cg_cu_module module, const char *name) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  if (!list_has(emu.modules, module)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not a loaded module");
  for (int i = 0; i < module->m->nkernels; i++)
    if (strcmp(module->m->kernels[i].name, name) == 0) {
      *function = &module->functions[i];
      return CG_CUDA_SUCCESS;
    }
  return fail(CG_CUDA_ERROR_NOT_FOUND, "the module has no kernel %s (is it TGC_REGISTER'ed?)", name);
}

static bool function_known(const emu_function *f) {
  for (const listed *l = emu.modules; l; l = l->next) {
    const struct CUmod_st *m = (const struct CUmod_st *)l;
    if (f >= m->functions && f < m->functions + m->m->nkernels) return true;
  }
  return false;
}

/* What the launch rules need of f: the emulator knows no registers or
 * __launch_bounds__ (the host compiler's code has neither). */
static rt_emu_launch_limits limits_of(const emu_function *f) {
  return (rt_emu_launch_limits){f->kernel->name, f->kernel->static_smem, f->max_dynamic_smem, emu.arch->smem_optin,
                                emu.arch->arch, 0, 0};
}

cg_cu_result rt_emu_cuFuncGetAttribute(int *value, cg_cu_function_attribute attrib, cg_cu_function f) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  if (!function_known(f)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not a function of a loaded module");
  switch (attrib) {
  case CG_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
  case CG_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = (int)f->kernel->static_smem; break;
  case CG_CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *value = 0; break;
  case CG_CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = 0; break;
  case CG_CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = emu.arch->arch; break;
  case CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = f->max_dynamic_smem; break;
  case CG_CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *value = f->carveout; break;
  case CG_CU_FUNC_ATTRIBUTE_NUM_REGS:
    return fail(CG_CUDA_ERROR_NOT_SUPPORTED, "registers are not emulated (the ptxas lines of a real compile have them)");
  default: return fail(CG_CUDA_ERROR_INVALID_VALUE, "function attribute %u is not emulated", attrib);
  }
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuFuncSetAttribute(cg_cu_function f, cg_cu_function_attribute attrib, int value) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  if (!function_known(f)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not a function of a loaded module");
  if (attrib == CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    rt_emu_launch_limits lim = limits_of(f);
    char why[512];
    if ((r = rt_emu_smem_optin_rule(&lim, value, why, sizeof why)) != CG_CUDA_SUCCESS) return fail(r, "%s", why);
    f->max_dynamic_smem = value;
    return CG_CUDA_SUCCESS;
  }
  if (attrib == CG_CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
    if (value < -1 || value > 100) return fail(CG_CUDA_ERROR_INVALID_VALUE, "carveout %d (-1 or 0..100)", value);
    f->carveout = value;
    return CG_CUDA_SUCCESS;
  }
  return fail(CG_CUDA_ERROR_INVALID_VALUE, "function attribute %u cannot be set", attrib);
}

/* A launch recorded by a capture: the kernel, its dimensions and its
 * parameters' values (8 bytes each, see the head of this file). */
enum { MAX_RECORDED_PARAMS = 1024 };
typedef struct {
  cg_cu_function f;
  unsigned grid[3], block[3], smem;
  int n;
  uint64_t args[];
} launch_node;

static cg_cu_result replay_launch(const void *payload, cg_cu_stream s) {
  const launch_node *l = payload;
  void *params[MAX_RECORDED_PARAMS];
  for (int i = 0; i < l->n; i++) params[i] = (void *)(uintptr_t)&l->args[i];
  return rt_emu_cuLaunchKernel(l->f, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->smem,
                               s, params, NULL);
}

static cg_cu_result record_launch(cg_cu_function f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                                  void **params, cg_cu_stream s) {
  int n = f->kernel->nparams;
  if (n > MAX_RECORDED_PARAMS) return fail(CG_CUDA_ERROR_NOT_SUPPORTED, "%s: more than %d parameters in a capture",
                                           f->kernel->name, MAX_RECORDED_PARAMS);
  size_t bytes = sizeof(launch_node) + (size_t)n * sizeof(uint64_t);
  launch_node *l = calloc(1, bytes);
  if (!l) return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
  *l = (launch_node){f, {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, smem, n};
  for (int i = 0; i < n; i++) memcpy(&l->args[i], params[i], sizeof(uint64_t));
  cg_cu_result r = rt_emu_capture_node(s, replay_launch, l, bytes);
  free(l);
  return r;
}

cg_cu_result rt_emu_cuLaunchKernel(cg_cu_function f, unsigned int gx, unsigned int gy, unsigned int gz,
                                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_bytes,
                                       cg_cu_stream stream, void **params, void **extra) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = check_stream(stream);
  if (r != CG_CUDA_SUCCESS) return r;
  if (!function_known(f)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not a function of a loaded module");
  const char *name = f->kernel->name;
  rt_emu_launch_limits lim = limits_of(f);
  char why[1024];
  const unsigned grid[3] = {gx, gy, gz}, blk[3] = {bx, by, bz};
  if ((r = rt_emu_launch_rules(&lim, grid, blk, shared_bytes, why, sizeof why)) != CG_CUDA_SUCCESS)
    return fail(r, "%s", why);
  unsigned long long threads = (unsigned long long)bx * by * bz;
  if (extra) return fail(CG_CUDA_ERROR_NOT_SUPPORTED, "%s: the 'extra' form of parameters is not emulated", name);
  if (!params && f->kernel->nparams > 0)
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "%s takes %d parameters, kernelParams is NULL", name, f->kernel->nparams);
  if (rt_emu_capturing(stream)) return record_launch(f, grid, blk, shared_bytes, params, stream);
  /* a parameter into bytes an operation in flight uses (read as 8 bytes each, as a capture records them;
   * only when something is in flight: a launch of 4-byte parameters is fine otherwise) */
  for (int i = 0; rt_emu_nccl_in_flight() && i < f->kernel->nparams; i++) {
    uint64_t v;
    memcpy(&v, params[i], sizeof v);
    if ((r = rt_emu_nccl_touch(name, stream, v, 1)) != CG_CUDA_SUCCESS) return r;
  }
  emu_launch l = {f, {gx, gy, gz}, {bx, by, bz}, shared_bytes, params, emu.cfg.racecheck, emu.cfg.threads};
  char fault[1024] = "";
  pthread_mutex_lock(&emu.lock);
  emu.launch_races = 0;
  cg_cu_result fr = rt_emu_exec_grid(&l, fault, sizeof fault);
  int64_t races = emu.launch_races;
  emu.counters.launches++;
  emu.counters.blocks += (int64_t)gx * gy * gz;
  emu.counters.threads += (int64_t)gx * gy * gz * (int64_t)threads;
  /* a fault surfaces later, as a GPU's does: sticky from now on */
  if (fr != CG_CUDA_SUCCESS) {
    emu.sticky = fr;
    snprintf(emu.sticky_detail, sizeof emu.sticky_detail, "%s", fault);
  } else if (races > 0) {
    emu.sticky = CG_CUDA_ERROR_LAUNCH_FAILED;
    snprintf(emu.sticky_detail, sizeof emu.sticky_detail, "%lld racecheck hazard%s in kernel %s; the first: %s",
             (long long)races, races == 1 ? "" : "s", name, emu.launch_first_race + strlen("racecheck: "));
  }
  pthread_mutex_unlock(&emu.lock);
  return CG_CUDA_SUCCESS;
}

/* ---- streams and events ---- */


cg_cu_result rt_emu_check_stream(cg_cu_stream s) {
  if (!s || s == LEGACY_STREAM || s == PER_THREAD_STREAM || list_has(emu.streams, s))
    return rt_emu_capture_legacy("work on the legacy stream", s);
  return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not a stream of this context");
}

cg_cu_result rt_emu_cuStreamCreate(cg_cu_stream *stream, unsigned int flags) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  if (flags > CG_CU_STREAM_NON_BLOCKING) return fail(CG_CUDA_ERROR_INVALID_VALUE, "stream flags %u", flags);
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s) return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
  s->flags = flags;
  list_add(&emu.streams, &s->link);
  *stream = s;
  return CG_CUDA_SUCCESS;
}

bool rt_emu_stream_nonblocking(cg_cu_stream s) {
  s = stream_or_null(s);
  return s && list_has(emu.streams, s) && (((struct CUstream_st *)s)->flags & CG_CU_STREAM_NON_BLOCKING);
}

cg_cu_result rt_emu_cuStreamDestroy(cg_cu_stream stream) {
  ENTER();
  if (!emu.initialized) return fail(CG_CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called");
  if (!list_has(emu.streams, stream)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not a stream of this context");
  rt_emu_nccl_force(stream, false, rt_emu_nccl_mark()); /* its work completes first */
  list_remove(&emu.streams, stream);
  for (listed *l = emu.events; l; l = l->next)
    if (((struct CUevent_st *)l)->stream == stream) ((struct CUevent_st *)l)->stream = NULL;
  free(stream);
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuStreamSynchronize(cg_cu_stream stream) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = check_stream(stream);
  if (r == CG_CUDA_SUCCESS && rt_emu_capturing(stream)) r = rt_emu_capture_forbid("cuStreamSynchronize", stream);
  if (r == CG_CUDA_SUCCESS && stream_or_null(stream)) r = rt_emu_nccl_force(stream, false, rt_emu_nccl_mark());
  return r;
}

cg_cu_result rt_emu_cuStreamWaitEvent(cg_cu_stream stream, cg_cu_event event, unsigned int flags) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = check_stream(stream);
  if (r != CG_CUDA_SUCCESS) return r;
  struct CUevent_st *e = list_has(emu.events, event) ? (struct CUevent_st *)event : NULL;
  if (!e) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not an event of this context");
  if (flags) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuStreamWaitEvent flags %u (0 is emulated)", flags);
  if (rt_emu_capturing(stream) || rt_emu_capturing(e->stream))
    return fail(CG_CUDA_ERROR_NOT_SUPPORTED, "cuStreamWaitEvent in a stream capture is not emulated");
  /* the stream's later work comes after what the event's stream did before the record: that runs now */
  return e->recorded && e->stream ? rt_emu_nccl_force(e->stream, false, e->mark) : CG_CUDA_SUCCESS;
}

/* ---- stream capture and graphs (capture.c) ---- */

cg_cu_result rt_emu_cuStreamBeginCapture(cg_cu_stream stream, cg_cu_stream_capture_mode mode) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  bool legacy = !stream || stream == LEGACY_STREAM || stream == PER_THREAD_STREAM;
  if (!legacy && !list_has(emu.streams, stream)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not a stream of this context");
  return rt_emu_capture_begin(stream, legacy || !(((struct CUstream_st *)stream)->flags & CG_CU_STREAM_NON_BLOCKING),
                              mode);
}

cg_cu_result rt_emu_cuStreamEndCapture(cg_cu_stream stream, cg_cu_graph *graph) {
  ENTER();
  cg_cu_result r = need_context();
  return r == CG_CUDA_SUCCESS ? rt_emu_capture_end(stream, graph) : r;
}

cg_cu_result rt_emu_cuStreamIsCapturing(cg_cu_stream stream, cg_cu_stream_capture_status *status) {
  ENTER();
  cg_cu_result r = need_context();
  return r == CG_CUDA_SUCCESS ? rt_emu_capture_status(stream, status) : r;
}

cg_cu_result rt_emu_cuGraphInstantiate(cg_cu_graph_exec *exec, cg_cu_graph graph, unsigned long long flags) {
  ENTER();
  cg_cu_result r = need_context();
  return r == CG_CUDA_SUCCESS ? rt_emu_graph_instantiate(exec, graph, flags) : r;
}

cg_cu_result rt_emu_cuGraphLaunch(cg_cu_graph_exec exec, cg_cu_stream stream) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = check_stream(stream);
  return r == CG_CUDA_SUCCESS ? rt_emu_graph_launch(exec, stream) : r;
}
/* cuGraphExecDestroy, cuGraphDestroy: capture.c's (they need no context) */

static struct CUevent_st *find_event(cg_cu_event e) { return list_has(emu.events, e) ? e : NULL; }

cg_cu_result rt_emu_cuEventCreate(cg_cu_event *event, unsigned int flags) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  if (flags & ~(unsigned int)(CG_CU_EVENT_BLOCKING_SYNC | CG_CU_EVENT_DISABLE_TIMING))
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "event flags %u", flags);
  struct CUevent_st *e = calloc(1, sizeof *e);
  if (!e) return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
  e->flags = flags;
  list_add(&emu.events, &e->link);
  *event = e;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuEventDestroy(cg_cu_event event) {
  ENTER();
  if (!emu.initialized) return fail(CG_CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called");
  if (!list_remove(&emu.events, event)) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not an event of this context");
  free(event);
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuEventRecord(cg_cu_event event, cg_cu_stream stream) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = check_stream(stream);
  if (r != CG_CUDA_SUCCESS) return r;
  struct CUevent_st *e = find_event(event);
  if (!e) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not an event of this context");
  e->ms = 1e3 * ir_clock_s();
  e->recorded = true;
  e->stream = stream_or_null(stream), e->mark = rt_emu_nccl_mark();
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuEventSynchronize(cg_cu_event event) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  struct CUevent_st *e = find_event(event);
  if (!e) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not an event of this context");
  return e->recorded && e->stream ? rt_emu_nccl_force(e->stream, false, e->mark) : CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuEventElapsedTime(float *milliseconds, cg_cu_event start, cg_cu_event end) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  struct CUevent_st *a = find_event(start), *b = find_event(end);
  if (!a || !b) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "not an event of this context");
  if ((a->flags | b->flags) & CG_CU_EVENT_DISABLE_TIMING)
    return fail(CG_CUDA_ERROR_INVALID_HANDLE, "an event created with CU_EVENT_DISABLE_TIMING");
  if (!a->recorded || !b->recorded) return fail(CG_CUDA_ERROR_INVALID_HANDLE, "an event that was never recorded");
  *milliseconds = (float)(b->ms - a->ms);
  return CG_CUDA_SUCCESS;
}

/* ---- configuration, the table ---- */


static int parse_bytes(const char *s, size_t *out) {
  char *end;
  double v = strtod(s, &end);
  double unit = 1;
  if (*end == 'K' || *end == 'k') unit = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') unit = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g') unit = 1024.0 * 1024 * 1024, end++;
  if (end == s || *end || v <= 0 || v * unit > 1099511627776.0) return -1;
  *out = (size_t)(v * unit);
  return 0;
}

int rt_cuda_emu_config_init(rt_cuda_emu_config *cfg, char *err, size_t errlen) {
  memset(cfg, 0, sizeof *cfg);
  cfg->arch = 80;
  cfg->devices = 1;
  cfg->device_bytes = (size_t)8 << 30;
  cfg->driver_version = 13000;
  const char *v = getenv("TGC_EMU_ARCH");
  if (v && *v) {
    if (strcmp(v, "sm_80") == 0) cfg->arch = 80;
    else if (strcmp(v, "sm_90") == 0) cfg->arch = 90;
    else {
      cg_errf(err, errlen, "TGC_EMU_ARCH=%s: the emulator has sm_80 and sm_90", v);
      return -1;
    }
  }
  v = getenv("TGC_EMU_DEVICE_MEMORY");
  if (v && *v && parse_bytes(v, &cfg->device_bytes) != 0) {
    cg_errf(err, errlen, "TGC_EMU_DEVICE_MEMORY=%s: expected a size such as 4G, 512M or 1048576 (at most 1T)", v);
    return -1;
  }
  v = getenv("TGC_EMU_RACECHECK");
  cfg->racecheck = v && strcmp(v, "1") == 0;
  /* what a machine without a GPU, or with an old driver, looks like (the
   * backend's error tests) */
  v = getenv("TGC_EMU_DEVICES");
  if (v && *v) {
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (*end || n < 0 || n > 16) {
      cg_errf(err, errlen, "TGC_EMU_DEVICES=%s: expected a device count in [0, 16]", v);
      return -1;
    }
    cfg->devices = (int)n;
  }
  v = getenv("TGC_EMU_DRIVER_VERSION");
  if (v && *v) {
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (*end || n < 1000 || n > 99000) {
      cg_errf(err, errlen, "TGC_EMU_DRIVER_VERSION=%s: expected a cuDriverGetVersion value such as 12040", v);
      return -1;
    }
    cfg->driver_version = (int)n;
  }
  return 0;
}

static void shutdown_locked(void) {
  rt_emu_memory_shutdown();
  for (int i = 0; i < emu.nrace_lines; i++) free(emu.race_lines[i]);
  rt_emu_exec_free();
  pthread_mutex_t lock = emu.lock;
  memset(&emu, 0, sizeof emu);
  emu.lock = lock;
}

void rt_cuda_emu_shutdown(void) {
  rt_emu_capture_reset();
  free_modules();
  list_free(&emu.streams, free);
  list_free(&emu.events, free);
  pthread_mutex_lock(&emu.lock);
  shutdown_locked();
  pthread_mutex_unlock(&emu.lock);
  ctx_current = false;
}

int rt_cuda_emu_load(cg_cuda_api *api, const rt_cuda_emu_config *cfg, char *err, size_t errlen) {
  const emu_arch *arch = rt_emu_arch_find(cfg->arch);
  if (!arch) {
    cg_errf(err, errlen, "the emulator has no sm_%d (sm_80 and sm_90)", cfg->arch);
    return -1;
  }
  if (cfg->device_bytes < 256) {
    cg_errf(err, errlen, "emulated device memory of %zu bytes", cfg->device_bytes);
    return -1;
  }
  rt_cuda_emu_shutdown();
  pthread_mutex_lock(&emu.lock);
  emu.cfg = *cfg;
  const char *cxx = cfg->cxx ? cfg->cxx : getenv("TGC_EMU_CXX");
  snprintf(emu.cxx, sizeof emu.cxx, "%s", cxx && *cxx ? cxx : TGC_EMU_CXX);
  emu.cfg.cxx = emu.cxx;
  emu.arch = arch;
  if (rt_emu_memory_init(cfg->device_bytes, err, errlen) != 0) {
    pthread_mutex_unlock(&emu.lock);
    return -1;
  }
  emu.loaded = true;
  pthread_mutex_unlock(&emu.lock);
  memset(api, 0, sizeof *api);
#define CG_CUDA_FN(lib, name, symbol, fallback, ret, params) api->name = rt_emu_##name;
#include "cuda_api.def"
#undef CG_CUDA_FN
  api->libs = CG_CUDA_LIB_DRIVER | CG_CUDA_LIB_NVRTC | CG_CUDA_LIB_CUBLASLT | CG_CUDA_LIB_NCCL;
  api->backend = "cuda-emu";
  api->emu_detail = get_detail;
  api->build_id = rt_emu_build_id;
  return 0;
}

rt_cuda_emu_counters rt_cuda_emu_counters_get(void) {
  rt_cuda_emu_counters c = emu.counters;
  rt_emu_capture_counters g = rt_emu_capture_counters_get();
  c.captures = g.captures, c.graph_launches = g.launches, c.graph_nodes_replayed = g.nodes_replayed;
  return c;
}

void rt_cuda_emu_counters_reset(void) { memset(&emu.counters, 0, sizeof emu.counters); }

int rt_cuda_emu_race_reports(const char *const **lines) {
  *lines = (const char *const *)emu.race_lines;
  return emu.nrace_lines;
}
