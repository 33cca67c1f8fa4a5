/* tests/unit/test_cuda_abi.c — runtime/cudaapi/cuda_api.h is ABI-identical to the
 * CUDA toolkit's headers.
 *
 * Built with the real cuda.h, nvrtc.h and cublasLt.h when CMake finds them
 * (else it exits 77: skipped). Everything is checked at compile time, so a
 * wrong value or prototype fails the build of this test:
 *   - every constant of cuda_results.def and cuda_consts.def equals the
 *     header's constant of the same name;
 *   - every entry of cuda_api.def has a prototype compatible with the
 *     header's declaration (return and parameter types);
 *   - the cuBLASLt descriptor and heuristic-result layouts match;
 * and at run time, that each entry's SYMBOL is the name the header maps the
 * API name to (cuMemAlloc -> cuMemAlloc_v2, ...). NCCL's rows (constants,
 * prototypes, types) are checked where nccl.h is installed too. */
#include <stdio.h>
#include <string.h>

#include "check.h"

#ifndef TGC_HAVE_CUDA_HEADERS
int main(void) {
  printf("SKIP: the CUDA toolkit headers (cuda.h, nvrtc.h, cublasLt.h) are not installed\n");
  return 77;
}
#else
#include <stddef.h>

#include <cublasLt.h>
#include <cuda.h>
#include <nvrtc.h>
/* NCCL's header is not in every toolkit: its rows are checked where it is */
#if __has_include(<nccl.h>)
#include <nccl.h>
#define HAVE_NCCL_H 1
#define CG_NCCL_REAL_TYPES
typedef ncclUniqueId cg_nccl_unique_id;
#endif

/* cuBLASLt's descriptor handles are anonymous-struct typedefs: checked as
 * cublasLt.h's own types (cuda_api.h lets this file supply them). */
#define CG_CUBLASLT_REAL_TYPES
typedef cublasLtMatmulDesc_t cg_cublaslt_matmul_desc;
typedef cublasLtMatrixLayout_t cg_cublaslt_matrix_layout;
typedef cublasLtMatmulPreference_t cg_cublaslt_preference;
typedef cublasLtMatmulAlgo_t cg_cublaslt_algo;
typedef cublasLtMatmulHeuristicResult_t cg_cublaslt_heuristic;
#include "cuda_api.h"

#define CG_CU_RESULT(name, value, string) _Static_assert((long long)name == value && (long long)CG_##name == (long long)name, #name " differs");
#include "cuda_results.def"
#undef CG_CU_RESULT
#define CG_CUDA_CONST(name, value) _Static_assert((long long)name == value && (long long)CG_##name == (long long)name, #name " differs");
#include "cuda_consts.def"

#ifdef HAVE_NCCL_H
#include "nccl_consts.def"
#endif
#undef CG_CUDA_CONST

#define CHECK_PROTO(name, ret, params) \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), ret(*) params), #name "'s prototype differs");
#define CHECK_PROTO_DRIVER CHECK_PROTO
#define CHECK_PROTO_NVRTC CHECK_PROTO
#define CHECK_PROTO_CUBLASLT CHECK_PROTO
#ifdef HAVE_NCCL_H
#define CHECK_PROTO_NCCL CHECK_PROTO
_Static_assert(__builtin_types_compatible_p(ncclComm_t, cg_nccl_comm), "ncclComm_t");
_Static_assert(__builtin_types_compatible_p(ncclResult_t, cg_nccl_result), "ncclResult_t");
_Static_assert(__builtin_types_compatible_p(ncclDataType_t, cg_nccl_data_type), "ncclDataType_t");
_Static_assert(__builtin_types_compatible_p(ncclRedOp_t, cg_nccl_red_op), "ncclRedOp_t");
#else
#define CHECK_PROTO_NCCL(name, ret, params)
#endif
#define CG_CUDA_FN(lib, name, symbol, fallback, ret, params) CHECK_PROTO_##lib(name, ret, params)
#include "cuda_api.def"
#undef CG_CUDA_FN

_Static_assert(__builtin_types_compatible_p(CUresult, cg_cu_result), "CUresult");
_Static_assert(__builtin_types_compatible_p(CUdeviceptr, cg_cu_deviceptr), "CUdeviceptr");
_Static_assert(__builtin_types_compatible_p(CUdevice, cg_cu_device), "CUdevice");
_Static_assert(__builtin_types_compatible_p(CUstream, cg_cu_stream), "CUstream");
_Static_assert(__builtin_types_compatible_p(cudaStream_t, cg_cu_stream), "cudaStream_t");
_Static_assert(sizeof(cublasLtMatmulDescOpaque_t) == sizeof(cg_cublaslt_matmul_desc_opaque), "desc size");
_Static_assert(sizeof(cublasLtMatrixLayoutOpaque_t) == sizeof(cg_cublaslt_matrix_layout_opaque), "layout size");
_Static_assert(sizeof(cublasLtMatmulPreferenceOpaque_t) == sizeof(cg_cublaslt_preference_opaque), "pref size");
_Static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(cg_cublaslt_algo_layout), "algo size");
_Static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == sizeof(cg_cublaslt_heuristic_layout), "heuristic size");
_Static_assert(offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize) ==
                   offsetof(cg_cublaslt_heuristic_layout, workspaceSize), "workspaceSize");
_Static_assert(offsetof(cublasLtMatmulHeuristicResult_t, state) == offsetof(cg_cublaslt_heuristic_layout, state),
               "state");
_Static_assert(offsetof(cublasLtMatmulHeuristicResult_t, wavesCount) ==
                   offsetof(cg_cublaslt_heuristic_layout, wavesCount), "wavesCount");

#define STR(x) #x
#define XSTR(x) STR(x)

int main(void) {
  /* what cuda.h maps each API name to (after its #defines) is the symbol
   * the loader asks for */
  static const struct {
    const char *api, *mapped, *symbol;
  } names[] = {
#define CG_CUDA_FN(lib, name, symbol, fallback, ret, params) {#name, XSTR(name), symbol},
#include "cuda_api.def"
#undef CG_CUDA_FN
  };
  int n = (int)(sizeof names / sizeof names[0]);
  for (int i = 0; i < n; i++) {
    if (strcmp(names[i].mapped, names[i].symbol) != 0)
      fprintf(stderr, "%s: the header maps it to %s, the table loads %s\n", names[i].api, names[i].mapped,
              names[i].symbol);
    CHECK(strcmp(names[i].mapped, names[i].symbol) == 0);
  }
  /* the check helpers name codes from the tables */
  CHECK_STR(cg_cu_result_name(CUDA_ERROR_MISALIGNED_ADDRESS), "CUDA_ERROR_MISALIGNED_ADDRESS");
  CHECK_STR(cg_nvrtc_result_name(NVRTC_ERROR_COMPILATION), "NVRTC_ERROR_COMPILATION");
  CHECK_STR(cg_cublas_status_name(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  printf("%d entry points, their symbols and every constant match the CUDA headers\n", n);
  return check_done();
}
#endif
