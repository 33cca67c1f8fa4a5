/* runtime/cuda_emu/emu_internal.h — what the emulator's files share (not
 * exported: everything outside uses the table and rt_cuda.h).
 *   fiber.c   context switches            exec.c   running a grid
 *   driver.c  the driver API entries      memory.c device memory entries
 *   nvrtc.c   the NVRTC entries           blas.c   the cuBLASLt entries */
#ifndef TGC_EMU_INTERNAL_H
#define TGC_EMU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include "codegen.h"
#include "emu_abi.h"
#include "rt_cuda.h"

/* AddressSanitizer builds (GCC says so one way, clang another). */
#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif

/* ---- fiber.c ---- */
typedef struct {
#if defined(__x86_64__)
  void *sp;
#else
  ucontext_t uc;
#endif
  void *stack_lo;
  size_t stack_bytes;
  void *fake_stack; /* ASan's, while switched out */
} emu_fiber_ctx;

/* A fiber that will run entry(arg) on [stack_lo, stack_lo + bytes). */
void rt_emu_fiber_init(emu_fiber_ctx *f, void *stack_lo, size_t stack_bytes, void (*entry)(void *), void *arg);
/* Switches from the running context to `to`; returns when something
 * switches back. from_finished: `from` will never run again. */
void rt_emu_fiber_switch(emu_fiber_ctx *from, emu_fiber_ctx *to, bool from_finished);
/* First thing a new fiber does (ASan bookkeeping; records the caller's stack). */
void rt_emu_fiber_entered(emu_fiber_ctx *self, emu_fiber_ctx *caller);
/* Clears ASan's marks on a stack about to be reused. */
void rt_emu_stack_unpoison(void *lo, size_t bytes);

/* ---- the emulated device ---- */
typedef struct {
  int arch;                 /* 80, 90 */
  const char *name;
  int sm_count, clock_khz, memory_clock_khz, bus_width, l2_bytes;
  int smem_per_sm, smem_optin;
} emu_arch;

/* A module (CUmodule): the shared object of one compiled source
 * (driver.c). */
typedef struct CUmod_st emu_module;
/* A kernel of a module (CUfunction): the handle is this struct. */
typedef struct CUfunc_st {
  emu_module *module;
  const tgc_emu_kernel *kernel;
  int max_dynamic_smem;     /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
  int carveout;             /* CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT */
} emu_function;

/* ---- exec.c ---- */
typedef struct {
  const emu_function *function;
  tgc_emu_dim3 grid, block;
  unsigned int dynamic_smem;
  void **params;
  bool racecheck;
  int threads;              /* OS threads for the blocks (0: OpenMP's default) */
} emu_launch;

/* Runs a grid to completion. CUDA_SUCCESS, or the fault (a kernel's, a
 * deadlock) with its detail line in detail. Race reports go to
 * rt_emu_race_report. */
cg_cu_result rt_emu_exec_grid(const emu_launch *l, char *detail, size_t len);
/* Frees the worker stacks and shared-memory buffers. */
void rt_emu_exec_free(void);

/* driver.c: what entry points share: clear the detail, fail with one,
 * require a current context (and no sticky error), check a stream; the
 * counters. */
void rt_emu_enter(void);
cg_cu_result rt_emu_fail(cg_cu_result r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cg_cu_result rt_emu_need_context(void);
cg_cu_result rt_emu_check_stream(cg_cu_stream s);
rt_cuda_emu_counters *rt_emu_counters(void);
cg_cu_context rt_emu_context(void);
/* memory.c: the arena of device_bytes; freeing every allocation; unmapping. */
int rt_emu_memory_init(size_t device_bytes, char *err, size_t errlen);
void rt_emu_memory_reset(void);
void rt_emu_memory_shutdown(void);
/* driver.c: adds a racecheck hazard (the caller serializes). */
void rt_emu_race_report(const char *line);
/* memory.c: whether [ptr, ptr + bytes) lies in one device allocation (1),
 * touches device memory otherwise (-1), or is outside it (0). */
int rt_emu_device_range(uint64_t ptr, size_t bytes);
/* driver.c: the sticky error (CUDA_SUCCESS if none) and its detail; making
 * one (a fault found outside a kernel, e.g. by cublasLtMatmul). */
cg_cu_result rt_emu_sticky_error(const char **detail);
void rt_emu_set_sticky(cg_cu_result r, const char *detail);
/* driver.c: the detail line of the calling thread's last failure. */
void rt_emu_set_detail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *rt_emu_detail(void);
/* driver.c: whether s is a stream created CU_STREAM_NON_BLOCKING */
bool rt_emu_stream_nonblocking(cg_cu_stream s);
/* nccl.c: NCCL operations in flight on non-blocking streams (see its
 * head). mark: the sequence number an event recorded now stands for;
 * force: runs those of stream s (every stream: all_streams) up to mark
 * upto; touch: work by `call` on stream s (any handle a call takes: NULL
 * and the legacy ones are the host's or the legacy stream's) over
 * [p, p + bytes): first runs what s itself has deferred, then
 * fails if another stream's operation still uses those bytes. */
long rt_emu_nccl_mark(void);
bool rt_emu_nccl_in_flight(void); /* anything deferred */
cg_cu_result rt_emu_nccl_force(cg_cu_stream s, bool all_streams, long upto);
cg_cu_result rt_emu_nccl_touch(const char *call, cg_cu_stream s, uint64_t p, size_t bytes);
const emu_arch *rt_emu_current_arch(void);
const rt_cuda_emu_config *rt_emu_config(void);
/* device_rules.c: the emulated archs (NULL for another); a device
 * attribute of one (-1: not emulated). */
const emu_arch *rt_emu_arch_find(int arch);
int rt_emu_device_attribute(const emu_arch *a, cg_cu_device_attribute attrib, int *value);
/* device_rules.c: what the driver checks of a launch (grid and block
 * dimensions, __launch_bounds__, registers, dynamic shared memory against
 * the function's limit) and of cuFuncSetAttribute's shared-memory opt-in:
 * CUDA_SUCCESS, or the error a GPU returns with a detail line. */
#define RT_EMU_STATIC_SMEM_LIMIT 49152
typedef struct {
  const char *name;                /* the kernel's */
  unsigned long long static_smem;  /* bytes */
  int max_dynamic_smem;            /* its current limit (48 KiB - static unless raised) */
  int smem_optin;                  /* the arch's most per block */
  int arch;                        /* 80, 90 */
  int regs;                        /* per thread; 0: not known (the emulator) */
  int max_threads;                 /* __launch_bounds__; 0: none known */
} rt_emu_launch_limits;
cg_cu_result rt_emu_launch_rules(const rt_emu_launch_limits *f, const unsigned grid[3], const unsigned block[3],
                                 unsigned shared_bytes, char *detail, size_t len);
cg_cu_result rt_emu_smem_optin_rule(const rt_emu_launch_limits *f, int value, char *detail, size_t len);

/* ---- capture.c: stream capture and graphs (the emulator's and the stub's) ---- */
/* Replays one recorded call on stream s from its payload (a flat copy). */
typedef cg_cu_result (*emu_replay_fn)(const void *payload, cg_cu_stream s);
typedef struct {
  int64_t captures, invalidated, instantiated, launches, nodes_recorded, nodes_replayed;
} rt_emu_capture_counters;
rt_emu_capture_counters rt_emu_capture_counters_get(void);
/* Whether s is a stream in capture (the calls made on it are recorded). */
bool rt_emu_capturing(cg_cu_stream s);
/* Records a call on capturing stream s: replay(copy of payload, stream) at each launch. */
cg_cu_result rt_emu_capture_node(cg_cu_stream s, emu_replay_fn replay, const void *payload, size_t bytes);
/* A call not permitted during capture (a synchronization, an allocation):
 * of stream s (NULL: of any stream). CUDA_SUCCESS when nothing captures;
 * else the captures are invalidated, STREAM_CAPTURE_UNSUPPORTED. */
cg_cu_result rt_emu_capture_forbid(const char *call, cg_cu_stream s);
/* Work on stream s: when s is the legacy one and a blocking stream
 * captures, STREAM_CAPTURE_IMPLICIT (the capture is invalidated). */
cg_cu_result rt_emu_capture_legacy(const char *call, cg_cu_stream s);
cg_cu_result rt_emu_capture_begin(cg_cu_stream s, bool blocking, cg_cu_stream_capture_mode mode);
cg_cu_result rt_emu_capture_end(cg_cu_stream s, cg_cu_graph *graph);
cg_cu_result rt_emu_capture_status(cg_cu_stream s, cg_cu_stream_capture_status *status);
cg_cu_result rt_emu_graph_instantiate(cg_cu_graph_exec *exec, cg_cu_graph g, unsigned long long flags);
/* The entries themselves (no context needed): the emulator's table takes them as they are. */
cg_cu_result rt_emu_cuGraphDestroy(cg_cu_graph g);
cg_cu_result rt_emu_cuGraphExecDestroy(cg_cu_graph_exec e);
cg_cu_result rt_emu_graph_launch(cg_cu_graph_exec e, cg_cu_stream s);
/* A copy or memset on capturing stream s, replayed through the filler's
 * entries (dst / src: device addresses or host pointers, as the call's). */
typedef enum { EMU_REC_HTOD, EMU_REC_DTOH, EMU_REC_DTOD, EMU_REC_MEMSET } emu_recorded_kind;
typedef struct {
  cg_cu_result (*htod)(cg_cu_deviceptr dst, const void *src, size_t bytes, cg_cu_stream s);
  cg_cu_result (*dtoh)(void *dst, cg_cu_deviceptr src, size_t bytes, cg_cu_stream s);
  cg_cu_result (*dtod)(cg_cu_deviceptr dst, cg_cu_deviceptr src, size_t bytes, cg_cu_stream s);
  cg_cu_result (*memset)(cg_cu_deviceptr dst, unsigned char value, size_t n, cg_cu_stream s);
} emu_copy_entries;
cg_cu_result rt_emu_capture_copy(cg_cu_stream s, const emu_copy_entries *e, emu_recorded_kind kind, uint64_t dst,
                                 uint64_t src, size_t bytes, unsigned char value);
/* Ends every capture (the context's reset). */
void rt_emu_capture_reset(void);

/* Every entry of the table: rt_emu_<NAME> (driver.c, memory.c, nvrtc.c,
 * blas.c); rt_cuda_emu_load assigns api->NAME = rt_emu_NAME for each row. */
#ifndef TGC_CUDA_STUB
#define CG_CUDA_FN(lib, name, symbol, fallback, ret, params) ret rt_emu_##name params;
#else /* tests/cuda_stub: blaslt_rules.c's entries exported under cuBLASLt's own symbols */
#define EMU_STUB_DRIVER(ret, name, symbol, params)
#define EMU_STUB_NVRTC(ret, name, symbol, params)
#define EMU_STUB_NCCL(ret, name, symbol, params)
#define EMU_STUB_CUBLASLT(ret, name, symbol, params) ret rt_emu_##name params __asm__(symbol);
#define CG_CUDA_FN(lib, name, symbol, fallback, ret, params) EMU_STUB_##lib(ret, name, symbol, params)
#endif
#include "cuda_api.def"
#undef CG_CUDA_FN

/* nvrtc.c: what compiled modules depend on (compiler, flags, mode). */
const char *rt_emu_build_id(void);

/* The image cuModuleLoadData takes: this header, then the shared object. */
#define EMU_IMAGE_MAGIC "TGCEMU\0\1"
typedef struct {
  char magic[8];
  uint32_t abi_version;
  uint32_t arch;            /* compiled for sm_<arch> */
  uint32_t racecheck;
  uint32_t reserved;
  uint64_t so_bytes;
} emu_image_header;

#endif
