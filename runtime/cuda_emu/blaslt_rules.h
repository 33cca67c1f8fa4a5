/* runtime/cuda_emu/blaslt_rules.h — cuBLASLt's descriptors and the
 * checks it makes, shared by the emulator (blas.c computes the product
 * after them) and the test suite's stub of libcublasLt (tests/cuda_stub/,
 * where the product is a no-op). blaslt_rules.c holds the entries that
 * create and set descriptors, layouts and preferences, the heuristic, and
 * cublasLtMatmul's checks before it hands the product to the filler's
 * rt_emu_blaslt_run. What they report goes through rt_emu_set_detail, rt_emu_set_sticky,
 * rt_emu_sticky_error and rt_emu_device_range, which each filler defines. */
#ifndef TGC_EMU_BLASLT_RULES_H
#define TGC_EMU_BLASLT_RULES_H

#include "emu_internal.h"

struct cublasLtContext {
  int unused;
};

typedef struct {
  uint32_t compute, scale;
  int32_t pointer_mode, transa, transb, transc;
  uint32_t epilogue;
  const void *bias;
  int64_t bias_batch_stride;
  const void *aux;
  int64_t aux_ld, aux_batch_stride;
  int32_t aux_type, bias_type; /* -1: D's type */
} emu_desc;

typedef struct {
  uint32_t type;
  int32_t order;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;
} emu_layout;

typedef struct {
  uint32_t search_mode;
  uint64_t workspace;
  uint32_t min_align[4]; /* CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES; 0: the default, 256 */
} emu_pref;

typedef struct {
  const emu_desc *d;
  const emu_layout *a, *b, *c, *dl;
  int m, n, k, batch;
  uint32_t bias_type, aux_type;
  bool bias, gelu, relu, aux_out, dgelu, bgrad, bgrada, bgradb;
} emu_problem;

size_t rt_emu_blaslt_type_bytes(uint32_t type);
/* Sets the detail line (rt_emu_set_detail) and returns s. */
cg_cublas_status rt_emu_blaslt_fail(cg_cublas_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The product after cublasLtMatmul's checks passed (blaslt_rules.c):
 * the emulator's computes it (blas.c), the stub's does nothing. */
cg_cublas_status rt_emu_blaslt_run(const emu_problem *p, double alpha, double beta, const void *a, const void *b,
                                   const void *c, void *d, cg_cu_stream stream);

#endif
