/* runtime/cuda/backend_internal.h — private to runtime/cuda/backend.c and
 * blaslt.c: the device context of the cuda / cuda-emu backends and the
 * cuBLASLt plan of one matrix product. */
#ifndef TGC_CUDA_BACKEND_INTERNAL_H
#define TGC_CUDA_BACKEND_INTERNAL_H

#include "codegen.h"
#include "rt_cuda.h"
#include "runtime.h"

/* An opened device: the table (real or emulated), the device, cuBLASLt. */
typedef struct {
  cg_cuda_api api;
  rt_cuda_device dev;
  bool emu;
  bool sync;                        /* synchronize after every launch (cuda-emu; TGC_CUDA_SYNC=1) */
  bool no_epilogues;                /* TGC_CUDA_NO_EPILOGUES=1: products without cuBLASLt epilogues */
  cg_cublaslt_handle lt;
  cg_cu_deviceptr lt_workspace;     /* cuBLASLt's scratch, allocated at the first product */
  size_t lt_workspace_bytes;
  cg_cache *cache;                  /* NULL when the cache folder cannot be made */
  cg_cu_module fill_module;         /* the fill kernels (compiled at the first fill that needs one) */
  cg_cu_function fill_fn[4];        /* 1, 2, 4, 8-byte patterns */
  rt_cuda_backend_stats stats;
  char last_kernel[400];            /* what the last launch ran, for faults found later */
  cg_cu_event upload_done;          /* recorded after each asynchronous upload (created at the first) */
  bool upload_pending;              /* one was recorded since the last host_wait */
  struct cuda_profile *profile;     /* TGC_CUDA_PROFILE=1: time per node class, printed at close */
  bool graphs;                      /* capture steady programs as CUDA graphs (TGC_CUDA_GRAPH, default on) */
  cg_cu_stream stream;              /* what programs run on: a created blocking stream where graphs are on
                                     * (capture needs one), else NULL (the legacy stream) */
  bool capturing;                   /* a program's actions are being recorded: nothing synchronizes */
} cuda_ctx;

/* A product planned once (prepare) and run at each step. */
typedef struct {
  cg_cublaslt_matmul_desc desc;
  cg_cublaslt_matrix_layout a, b, c;  /* cuBLASLt's A (our b), B (our a), C = D */
  cg_cublaslt_algo algo;
  bool use_fallback;                  /* no algorithm with the epilogue: plain product + the fallback kernel */
  bool f64;
  uint32_t align[5];                  /* the alignments (bytes) algo was chosen for: cuBLASLt's A, B, C, D, the bias */
} cuda_gemm_plan;

/* blaslt.c: plans g (descriptors, layouts, an algorithm from the
 * heuristic); context names the node for messages. 0 or -1. */
int cuda_gemm_prepare(cuda_ctx *x, const cg_gemm *g, cuda_gemm_plan *p, const char *context, char *err, size_t errlen);
void cuda_gemm_release(cuda_ctx *x, cuda_gemm_plan *p);
/* Runs it on the given device addresses. */
int cuda_gemm_run(cuda_ctx *x, const cg_gemm *g, cuda_gemm_plan *p, cg_cu_deviceptr a, cg_cu_deviceptr b,
                  cg_cu_deviceptr c, cg_cu_deviceptr bias, cg_cu_deviceptr aux, const char *context, char *err,
                  size_t errlen);
/* A checked call's failure message gets, for a kernel fault that surfaces
 * later on a GPU launched asynchronously, where to look. */
int cuda_check(cuda_ctx *x, cg_cu_result r, const char *call, const char *context, char *err, size_t errlen);
#define CUDA_CALL(x, ctx, err, errlen, fn, ...) cuda_check((x), (x)->api.fn(__VA_ARGS__), #fn, (ctx), (err), (errlen))

#endif
