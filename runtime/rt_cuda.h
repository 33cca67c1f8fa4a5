/* runtime/rt_cuda.h — the runtime's CUDA section: the loader that fills the
 * entry-point table (runtime/cudaapi/cuda_api.h) from the real libraries, opening a
 * device, and the cuda-emu emulator that fills the same table on the CPU.
 * (Kept apart from runtime.h while issue 8 redesigns it; it is a section of
 * the runtime layer's public interface, with the same rt_ prefix.)
 *
 *   cuda/loader.c        dlopen + dlsym of libcuda.so.1, libnvrtc.so.N,
 *                        libcublasLt.so.N; device open; version checks
 *   cuda_emu/driver.c    the emulated driver API (device memory arena,
 *                        modules, launches and their checks)
 *   cuda_emu/exec.c      running a grid: fibers, barriers, warps, racecheck
 *   cuda_emu/fiber.c     the context switch
 *   cuda_emu/nvrtc.c     "NVRTC" by the host C++ compiler
 *   cuda_emu/blas.c      cuBLASLt by OpenBLAS under cuBLAS's contract
 *   cuda/backend.c       the cuda and cuda-emu backends (rt_backend,
 *                        declared in runtime.h) over either table
 *   cuda/blaslt.c        their cuBLASLt products
 *   cuda_emu/nccl.c      NCCL over tgc's MPI transport (runtime/comm)
 * Nothing here is touched (no library loaded, no memory mapped) until a
 * caller asks for a CUDA backend. */
#ifndef TGC_RT_CUDA_H
#define TGC_RT_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"

/* ===================================================================== */
/* cuda/loader.c — the real libraries                                     */
/* ===================================================================== */
/* Loads the libraries of `libs` (CG_CUDA_LIB_* bits) into api and resolves
 * every entry of cuda_api.def that comes from them. Where:
 *   libcuda.so.1       the dynamic loader's search (the driver installs it)
 *   libnvrtc.so.N,     the highest version found in $CUDA_HOME/lib64,
 *   libcublasLt.so.N   $CUDA_HOME/lib, /usr/local/cuda/lib64,
 *                      /usr/local/cuda/lib, then the loader's search
 * TGC_CUDA_LIB_PATH (DIR[:DIR...]) replaces all of these (tests use it).
 * Errors, in err:
 *   "no CUDA driver: libcuda.so.1 not found"
 *   "no NVRTC: libnvrtc.so not found (searched ...)"
 *   "no cuBLASLt: libcublasLt.so not found (searched ...)"
 *   "no NCCL: libnccl.so not found (searched ...)" (libnccl.so.2: the
 *                      same folders, then the loader's search)
 *   "PATH has no SYMBOL: ..." (a library too old for tgc)
 * Libraries already loaded in api are kept. Returns 0 or -1. */
int rt_cuda_load(cg_cuda_api *api, unsigned libs, char *err, size_t errlen);
/* Clears api. The libraries stay loaded until exit (NVIDIA's libraries are
 * not built to be unloaded: their static state leaks or breaks). */
void rt_cuda_unload(cg_cuda_api *api);

/* "CUDA driver too old: it supports CUDA 12.4, but NVRTC 13.0 needs a
 * driver for CUDA 13.0 or newer" when the driver's major version is below
 * NVRTC's (cubins from NVRTC N.x need a CUDA N driver); 0 when fine. */
int rt_cuda_check_driver_version(int driver_version, int nvrtc_major, int nvrtc_minor, char *err, size_t errlen);

typedef struct {
  int ordinal;
  cg_cu_device device;
  cg_cu_context context;     /* the primary context, retained and current */
  char name[256];
  char arch[16];             /* "sm_90" */
  int cc_major, cc_minor;
  size_t total_bytes;
  int driver_version;        /* cuDriverGetVersion: 13000 = CUDA 13.0 */
} rt_cuda_device;

/* cuInit, the version check (when api has NVRTC), device `ordinal`, its
 * primary context made current. Works on either table. Errors: "no CUDA
 * device", "CUDA device N does not exist (K devices: 0 to K-1)", the
 * version check's message, or a checked call's line. */
int rt_cuda_open_device(const cg_cuda_api *api, int ordinal, rt_cuda_device *dev, char *err, size_t errlen);
void rt_cuda_close_device(const cg_cuda_api *api, rt_cuda_device *dev);
/* The GPU the cuda backend opens for `--device N`: N counted from the
 * process's node-local rank when a launcher started it (mpirun: one GPU per
 * rank, NCCL refuses two ranks on one), else N. cuda-emu keeps N (its
 * devices are TGC_EMU_DEVICES, shared by the ranks of a test). */
int rt_cuda_rank_device(int index);

/* ===================================================================== */
/* cuda_emu/ — the emulator                                               */
/* ===================================================================== */
typedef struct {
  int arch;                  /* the emulated device: 80 (A100-like) or 90 (H100-like) */
  int devices;               /* how many (0 makes cuInit say CUDA_ERROR_NO_DEVICE) */
  size_t device_bytes;       /* device memory: allocations beyond it fail, cuMemGetInfo counts it */
  int driver_version;        /* what cuDriverGetVersion says (13000) */
  bool racecheck;            /* compile kernels with TGC_RACECHECK and report shared-memory races */
  const char *cxx;           /* the host C++ compiler; NULL: $TGC_EMU_CXX, else the one tgc was built with */
  int threads;               /* OS threads running blocks; 0: OpenMP's default */
} rt_cuda_emu_config;

/* The defaults, then the environment: TGC_EMU_ARCH (sm_80 | sm_90),
 * TGC_EMU_DEVICE_MEMORY (bytes, or with K/M/G suffix; default 8G),
 * TGC_EMU_RACECHECK (1), TGC_EMU_CXX, TGC_EMU_DEVICES (0 to 16; default 1),
 * TGC_EMU_DRIVER_VERSION (cuDriverGetVersion's value; default 13000). 0, or
 * -1 and err for a bad value. */
int rt_cuda_emu_config_init(rt_cuda_emu_config *cfg, char *err, size_t errlen);

/* Fills api with the emulator (every driver, NVRTC, cuBLASLt and NCCL entry) and
 * (re)configures it: everything a previous configuration held is freed.
 * Returns 0 or -1 with err. */
int rt_cuda_emu_load(cg_cuda_api *api, const rt_cuda_emu_config *cfg, char *err, size_t errlen);
/* Frees all the emulator holds (device memory, modules, worker stacks). */
void rt_cuda_emu_shutdown(void);

/* What the emulated device did, since rt_cuda_emu_load or the last reset. */
typedef struct {
  int64_t launches, blocks, threads;
  int64_t htod_calls, htod_bytes, dtoh_calls, dtoh_bytes, dtod_calls, dtod_bytes, memset_calls;
  int64_t gemms;             /* cublasLtMatmul calls */
  int64_t host_allocs;       /* cuMemHostAlloc blocks (page-locked host memory on a GPU) */
  int64_t htod_pinned_calls; /* host-to-device copies (in htod_calls) from such a block */
  int64_t modules_loaded;
  int64_t races;             /* racecheck hazards found */
  /* the NCCL emulation (cuda_emu/nccl.c): operations, and the payload bytes
   * its ring algorithms moved over the MPI transport */
  int64_t nccl_calls, nccl_bytes_sent, nccl_bytes_received;
  /* stream capture (capture.c; kept across resets): captures begun, graphs
   * launched, recorded calls replayed by them (in the counts above too) */
  int64_t captures, graph_launches, graph_nodes_replayed;
} rt_cuda_emu_counters;
rt_cuda_emu_counters rt_cuda_emu_counters_get(void);
void rt_cuda_emu_counters_reset(void);

/* The racecheck reports of the launches so far (one line each, the first
 * 64 distinct hazards), and how many there are. */
int rt_cuda_emu_race_reports(const char *const **lines);

/* ===================================================================== */
/* cuda/backend.c — what a cuda / cuda-emu device did                     */
/* ===================================================================== */
typedef struct {
  int64_t programs;          /* graphs prepared (lowered, compiled, loaded) */
  int64_t compiles;          /* NVRTC compiles (a program found in the disk cache compiles nothing) */
  int64_t cache_hits;        /* programs whose compiled code came from the disk cache */
  int64_t kernels;           /* kernels in the loaded programs */
  int64_t launches, gemms, copies, memsets;
  int64_t host_buffers;      /* page-locked host blocks allocated (cuMemHostAlloc: the trainer's batch) */
  int64_t async_uploads;     /* cuMemcpyHtoDAsync uploads from them */
  int64_t epilogue_fallbacks; /* products whose epilogue cuBLASLt had no algorithm for */
  /* CUDA graphs (TGC_CUDA_GRAPH): programs run directly (the first run of
   * each, and programs that are never captured), captures made (the second
   * run, or a run whose tensors moved), runs replayed by one cuGraphLaunch */
  int64_t direct_runs, graph_captures, graph_launches;
  int64_t gemm_replans;       /* products given a new algorithm at run time: operands aligned less than
                                 planned for, or a refused cublasLtMatmul (blaslt.c) */
} rt_cuda_backend_stats;
struct rt_device;
/* The counts of a device of the cuda or cuda-emu backend: 0, or -1 when d
 * is not one. */
int rt_cuda_backend_stats_of(const struct rt_device *d, rt_cuda_backend_stats *s);

#endif
