/* codegen/prelude/emu_abi.h — the contract between an emulated kernel
 * module (CUDA C compiled by the host C++ compiler against emu.h) and the
 * emulator that runs it (runtime/cuda_emu/). Plain C, included by both.
 *
 * Each CUDA thread runs on a fiber whose region is TGC_EMU_FIBER_BYTES
 * long and aligned to that size: the region's base holds the thread's
 * tgc_emu_thread, a guard page follows, and the stack fills the rest. Kernel
 * code finds its own thread by masking the stack pointer (emu.h: self()), so
 * threadIdx costs two instructions and needs no thread-local storage.
 * Everything that involves other threads (barriers, warp collectives,
 * shared-memory race checks, faults) is a call through tgc_emu_host, which
 * may switch to another fiber before it returns.
 *
 * A module exports one function, tgc_emu_module_get, listing its kernels
 * (name, how to call it with cuLaunchKernel's void **params) and its
 * TGC_SHARED arrays (size, owning kernel, offset in the block's shared
 * memory). Bump TGC_EMU_ABI_VERSION with any change here: the emulator
 * refuses a module built against another version. */
#ifndef TGC_EMU_ABI_H
#define TGC_EMU_ABI_H

#define TGC_EMU_ABI_VERSION 1
#define TGC_EMU_FIBER_BYTES (256u * 1024u) /* a power of two */

typedef struct {
  unsigned int x, y, z;
} tgc_emu_dim3;

struct tgc_emu_host;
struct tgc_emu_kernel;

/* The state of one CUDA thread, at the base of its fiber region. */
typedef struct tgc_emu_thread {
  tgc_emu_dim3 thread_idx, block_idx, block_dim, grid_dim;
  unsigned int linear;          /* x + y*bx + z*bx*by: the rank in the block */
  unsigned int lane, warp;      /* linear % 32, linear / 32 */
  unsigned char *smem;          /* the block's shared memory (static arrays first) */
  unsigned char *dyn_smem;      /* the dynamic part (cuLaunchKernel's sharedMemBytes) */
  const struct tgc_emu_host *host;
  const struct tgc_emu_kernel *kernel;
  void *emu;                    /* the emulator's own state for this thread */
} tgc_emu_thread;

/* Warp collectives (tgc_emu_host.warp). */
enum {
  TGC_EMU_SHFL_IDX, TGC_EMU_SHFL_UP, TGC_EMU_SHFL_DOWN, TGC_EMU_SHFL_XOR, /* arg: lane / delta / mask */
  TGC_EMU_BALLOT, TGC_EMU_ANY, TGC_EMU_ALL,                               /* value: the predicate */
  TGC_EMU_SYNCWARP,
  TGC_EMU_REDUCE_ADD, TGC_EMU_REDUCE_MIN, TGC_EMU_REDUCE_MAX,             /* arg: 1 = signed */
  TGC_EMU_REDUCE_AND, TGC_EMU_REDUCE_OR, TGC_EMU_REDUCE_XOR,
  TGC_EMU_MATCH_ANY,                                                       /* arg: value bytes (4 or 8) */
  TGC_EMU_NUM_WARP_OPS
};

/* Shared-memory accesses reported to the race checker. */
enum { TGC_EMU_READ = 1, TGC_EMU_WRITE = 2, TGC_EMU_ATOMIC = 3 };

/* __syncthreads_count / _and / _or */
enum { TGC_EMU_BAR_SYNC, TGC_EMU_BAR_COUNT, TGC_EMU_BAR_AND, TGC_EMU_BAR_OR };

/* One TGC_SHARED declaration. */
typedef struct tgc_emu_shared {
  const char *name;                /* the array's name (set when it first runs) */
  int line;                        /* the source line of the declaration */
  int kernel;                      /* index of the kernel whose body holds it; -1 none */
  unsigned long long elem_bytes, count, align;
  unsigned long long offset;       /* in the block's shared memory */
} tgc_emu_shared;

typedef struct tgc_emu_kernel {
  const char *name;
  int line;                        /* the line of its TGC_REGISTER, after the body */
  int nparams;
  void (*invoke)(void **params);   /* calls the kernel with cuLaunchKernel's params */
  unsigned long long static_smem;  /* bytes of its TGC_SHARED arrays, aligned */
  unsigned long long dyn_offset;   /* where dynamic shared memory starts */
} tgc_emu_kernel;

typedef struct tgc_emu_module {
  int abi_version;
  int racecheck;                   /* compiled with TGC_RACECHECK: TGC_SHARED accesses are reported */
  int nkernels;
  const tgc_emu_kernel *kernels;
  int nshared;
  const tgc_emu_shared *shared;
  const char *error;               /* non-NULL: the module is unusable (e.g. too many kernels) */
} tgc_emu_module;

typedef const tgc_emu_module *(*tgc_emu_module_get_fn)(void);
#define TGC_EMU_MODULE_SYMBOL "tgc_emu_module_get"

/* What kernel code calls in the emulator. Calls that wait for other
 * threads switch fibers inside. */
typedef struct tgc_emu_host {
  /* __syncthreads and its _count/_and/_or forms (op TGC_EMU_BAR_*). */
  int (*barrier)(tgc_emu_thread *t, int op, int pred);
  /* A warp collective over the lanes of mask: every non-exited lane of mask
   * must call it with the same op (and width); value holds up to 8 bytes. */
  unsigned long long (*warp)(tgc_emu_thread *t, int op, unsigned int mask, unsigned long long value, int arg,
                             int width);
  /* Gathers each lane's `bytes` bytes at mine into all[lane * bytes] of
   * every lane of mask (lanes outside mask or exited: all 0xff bytes). */
  void (*warp_gather)(tgc_emu_thread *t, unsigned int mask, const void *mine, void *all, unsigned int bytes);
  /* The warp's lanes that have not exited. */
  unsigned int (*activemask)(tgc_emu_thread *t);
  /* A TGC_SHARED element access (racecheck modules only). */
  void (*shared_access)(tgc_emu_thread *t, const tgc_emu_shared *s, unsigned long long index, int kind);
  /* A fault: ends the launch with this CUresult and message. Never returns. */
  void (*fault)(tgc_emu_thread *t, int cuda_error, const char *message);
} tgc_emu_host;

#endif
