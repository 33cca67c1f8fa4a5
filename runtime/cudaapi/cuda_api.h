/* runtime/cudaapi/cuda_api.h — the one table of CUDA entry points (driver API,
 * NVRTC, cuBLASLt, NCCL), declared without any CUDA header so that
 * tgc builds on a machine with no CUDA toolkit.
 *
 * Types are ABI-identical to the real ones: handles are pointers to CUDA's
 * own struct tags, enums are unsigned int (GCC's type for an enum with no
 * negative member), and every constant tgc uses is CG_<CUDA's name> with
 * CUDA's value (cuda_results.def, cuda_consts.def). tests/unit/
 * test_cuda_abi.c includes the real headers next to this one and checks
 * every constant, struct layout and function signature statically.
 *
 * Two fillers of the same table: runtime/cuda/ dlopens the real libraries
 * (rt_cuda_load), runtime/cuda_emu/ runs everything on the CPU
 * (rt_cuda_emu_load). Code above the table cannot tell them apart, except
 * through emu_detail (a line of detail the emulator keeps about its last
 * failure) and build_id (what the cache keys compiled code by).
 *
 * Every call is checked: CG_CU(api, ctx, err, errlen, cuMemAlloc, &p, n)
 * calls api->cuMemAlloc(&p, n) and on failure writes one line
 *   cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory) [CONTEXT]: DETAIL
 * into err and evaluates to -1 (0 on success). CONTEXT is the caller's
 * (e.g. the kernel's IR value and .tg line), DETAIL the emulator's. */
#ifndef TGC_CUDA_API_H
#define TGC_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/* ---- scalar types ---- */
typedef unsigned int cg_cu_result;                 /* CUresult */
typedef int cg_cu_device;                          /* CUdevice */
typedef unsigned long long cg_cu_deviceptr;        /* CUdeviceptr (64-bit) */
typedef unsigned int cg_cu_device_attribute;       /* CUdevice_attribute */
typedef unsigned int cg_cu_function_attribute;     /* CUfunction_attribute */
typedef unsigned int cg_cu_pointer_attribute;      /* CUpointer_attribute */
typedef unsigned int cg_cu_stream_capture_mode;    /* CUstreamCaptureMode */
typedef unsigned int cg_cu_stream_capture_status;  /* CUstreamCaptureStatus */
typedef unsigned int cg_nvrtc_result;              /* nvrtcResult */
typedef unsigned int cg_cublas_status;             /* cublasStatus_t */
typedef unsigned int cg_cublas_compute_type;       /* cublasComputeType_t */
typedef unsigned int cg_cuda_data_type;            /* cudaDataType */
typedef unsigned int cg_cublaslt_matmul_desc_attribute;   /* cublasLtMatmulDescAttributes_t */
typedef unsigned int cg_cublaslt_matrix_layout_attribute; /* cublasLtMatrixLayoutAttribute_t */
typedef unsigned int cg_cublaslt_preference_attribute;    /* cublasLtMatmulPreferenceAttributes_t */

/* ---- handles: CUDA's own struct tags ---- */
typedef struct CUctx_st *cg_cu_context;
typedef struct CUmod_st *cg_cu_module;
typedef struct CUfunc_st *cg_cu_function;
typedef struct CUstream_st *cg_cu_stream;          /* also cudaStream_t */
typedef struct CUevent_st *cg_cu_event;
typedef struct CUgraph_st *cg_cu_graph;
typedef struct CUgraphExec_st *cg_cu_graph_exec;
typedef struct _nvrtcProgram *cg_nvrtc_program;
typedef struct cublasLtContext *cg_cublaslt_handle;
typedef struct ncclComm *cg_nccl_comm;             /* ncclComm_t */
typedef unsigned int cg_nccl_result;               /* ncclResult_t */
typedef unsigned int cg_nccl_data_type;            /* ncclDataType_t */
typedef unsigned int cg_nccl_red_op;               /* ncclRedOp_t */
/* ncclUniqueId is an anonymous-struct typedef in nccl.h (passed by value to
 * ncclCommInitRank): declared here under a tgc name, and the ABI test
 * defines CG_NCCL_REAL_TYPES to use nccl.h's. */
#ifndef CG_NCCL_REAL_TYPES
typedef struct cg_nccl_unique_id { char internal[128]; } cg_nccl_unique_id;
#endif

/* cuBLASLt's semi-opaque descriptors are typedefs of anonymous structs in
 * cublasLt.h, so no tag can match them: the layouts are declared here under
 * tgc names (the ABI test compares sizes and offsets), and the ABI test
 * defines CG_CUBLASLT_REAL_TYPES to map the handle names to cublasLt.h's. */
typedef struct cg_cublaslt_matmul_desc_opaque { uint64_t data[32]; } cg_cublaslt_matmul_desc_opaque;
typedef struct cg_cublaslt_matrix_layout_opaque { uint64_t data[8]; } cg_cublaslt_matrix_layout_opaque;
typedef struct cg_cublaslt_preference_opaque { uint64_t data[8]; } cg_cublaslt_preference_opaque;
typedef struct cg_cublaslt_algo_layout { uint64_t data[8]; } cg_cublaslt_algo_layout;
typedef struct cg_cublaslt_heuristic_layout {
  cg_cublaslt_algo_layout algo;
  size_t workspaceSize;
  cg_cublas_status state;
  float wavesCount;
  int reserved[4];
} cg_cublaslt_heuristic_layout;
#ifndef CG_CUBLASLT_REAL_TYPES
typedef cg_cublaslt_matmul_desc_opaque *cg_cublaslt_matmul_desc;       /* cublasLtMatmulDesc_t */
typedef cg_cublaslt_matrix_layout_opaque *cg_cublaslt_matrix_layout;   /* cublasLtMatrixLayout_t */
typedef cg_cublaslt_preference_opaque *cg_cublaslt_preference;         /* cublasLtMatmulPreference_t */
typedef cg_cublaslt_algo_layout cg_cublaslt_algo;                      /* cublasLtMatmulAlgo_t */
typedef cg_cublaslt_heuristic_layout cg_cublaslt_heuristic;            /* cublasLtMatmulHeuristicResult_t */
#endif

/* ---- constants: CG_<CUDA name> = CUDA's value ---- */
enum {
#define CG_CU_RESULT(name, value, string) CG_##name = value,
#include "cuda_results.def"
#undef CG_CU_RESULT
#define CG_CUDA_CONST(name, value) CG_##name = value,
#include "cuda_consts.def"
#include "nccl_consts.def"
#undef CG_CUDA_CONST
};

/* The libraries a table entry comes from (bits of cg_cuda_api.libs). */
typedef enum {
  CG_CUDA_LIB_DRIVER = 1,    /* libcuda.so.1 */
  CG_CUDA_LIB_NVRTC = 2,     /* libnvrtc.so.N */
  CG_CUDA_LIB_CUBLASLT = 4,  /* libcublasLt.so.N */
  CG_CUDA_LIB_NCCL = 8,      /* libnccl.so.2 (issue 10) */
} cg_cuda_lib;

/* ---- the table ---- */
typedef struct cg_cuda_api {
#define CG_CUDA_FN(lib, name, symbol, fallback, ret, params) ret(*name) params;
#include "cuda_api.def"
#undef CG_CUDA_FN
  unsigned libs;        /* CG_CUDA_LIB_* bits whose entries are all filled */
  const char *backend;  /* "cuda" or "cuda-emu" */
  /* The emulator: a line of detail about its last failure ("" if none);
   * NULL on a real GPU. */
  const char *(*emu_detail)(void);
  /* What compiled code depends on besides source, arch, options and the
   * NVRTC version: NULL for the real NVRTC; the emulator's host compiler,
   * its flags and mode (kept apart in the cache). */
  const char *(*build_id)(void);
  void *handles[4];     /* the loader's dlopen handles (DRIVER, NVRTC, CUBLASLT, NCCL) */
} cg_cuda_api;

/* ---- checks ---- */
/* Each returns 0 when r is success; else writes one line
 *   CALL: NAME (STRING) [CONTEXT]: DETAIL
 * into err (CONTEXT and DETAIL only when non-empty) and returns -1. */
int cg_cu_check(const cg_cuda_api *api, cg_cu_result r, const char *call, const char *context, char *err,
                size_t errlen);
int cg_nvrtc_check(const cg_cuda_api *api, cg_nvrtc_result r, const char *call, const char *context, char *err,
                   size_t errlen);
int cg_cublas_check(const cg_cuda_api *api, cg_cublas_status r, const char *call, const char *context, char *err,
                    size_t errlen);

#define CG_CU(api, ctx, err, errlen, fn, ...) cg_cu_check((api), (api)->fn(__VA_ARGS__), #fn, (ctx), (err), (errlen))
#define CG_NVRTC(api, ctx, err, errlen, fn, ...) \
  cg_nvrtc_check((api), (api)->fn(__VA_ARGS__), #fn, (ctx), (err), (errlen))
#define CG_CUBLAS(api, ctx, err, errlen, fn, ...) \
  cg_cublas_check((api), (api)->fn(__VA_ARGS__), #fn, (ctx), (err), (errlen))

/* Names and strings from tgc's own tables (what the emulator answers, and
 * what the checks fall back on without a library): "CUDA_ERROR_..." /
 * "NVRTC_ERROR_..." / "CUBLAS_STATUS_...", NULL for an unknown code. */
const char *cg_cu_result_name(cg_cu_result r);
const char *cg_cu_result_string(cg_cu_result r);
const char *cg_nvrtc_result_name(cg_nvrtc_result r);
const char *cg_cublas_status_name(cg_cublas_status s);
const char *cg_cublas_status_string(cg_cublas_status s);

/* snprintf into err: the message helper of the CUDA code (codegen, runtime). */
void cg_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "CUDA 12.4" style version text of a cuDriverGetVersion value (12040). */
void cg_cuda_version_text(int version, char *buf, size_t len);

#endif
