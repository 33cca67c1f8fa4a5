/* tests/cuda_stub/test_cuda_stub.c — the stub of the CUDA libraries
 * (stub.c), loaded by the real loader (rt_cuda_load, TGC_CUDA_LIB_PATH =
 * the stub's directory) with kernels compiled by the real NVRTC: what it
 * reads from the cubins equals ptxas's report, and the planted defects are
 * caught with their messages — a launch over __launch_bounds__, over the
 * block dimensions, over the dynamic shared memory limit and over the
 * registers of a block; a misaligned cuBLASLt operand; a read of an
 * asynchronous download before its stream is synchronized (it reads NaN);
 * a write of a page-locked upload source before its stream's sync;
 * NCCL buffers that overlap without being in place; the rules of stream
 * capture (test_cuda_capture.h: a synchronization, an allocation and a
 * legacy-stream copy planted in a capture are refused with the GPU's
 * error codes and invalidate it). Skipped (77) without
 * the toolkit's NVRTC. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "codegen.h"
#include "rt_cuda.h"
#include "test_cuda_capture.h"

static cg_cuda_api api;
static rt_cuda_device dev;
static const char *(*last_error)(void);

#define LAST_IS(want) CHECK_STR(last_error(), want)
#define LAST_HAS(part) CHECK(strstr(last_error(), part) != NULL)

static const char *const planted_source =
    "extern \"C\" __global__ void __launch_bounds__(128) bounded(float *p) {\n"
    "  __shared__ float tile[1024];\n"
    "  tile[threadIdx.x] = p[threadIdx.x];\n"
    "  __syncthreads();\n"
    "  p[threadIdx.x] = tile[127 - threadIdx.x];\n"
    "}\n"
    "extern \"C\" __global__ void dynamic(float *p) {\n"
    "  extern __shared__ float buf[];\n"
    "  buf[threadIdx.x] = p[threadIdx.x];\n"
    "  __syncthreads();\n"
    "  p[threadIdx.x] = buf[0];\n"
    "}\n"
    /* 64 doubles live across two passes: more than 64 registers per thread */
    "extern \"C\" __global__ void heavy(const double *p, double *q) {\n"
    "  double a[64];\n"
    "  #pragma unroll\n"
    "  for (int i = 0; i < 64; i++) a[i] = p[i * 1024 + threadIdx.x];\n"
    "  double s = 1;\n"
    "  #pragma unroll\n"
    "  for (int i = 0; i < 64; i++) s = s * a[i] + a[(i * 37 + 11) % 64];\n"
    "  #pragma unroll\n"
    "  for (int i = 0; i < 64; i++) s = s * a[(i * 13 + 5) % 64] + a[i];\n"
    "  q[threadIdx.x] = s;\n"
    "}\n";

static void test_launches(void) {
  cg_cuda_source src = {"planted.cu", planted_source, dev.arch, NULL, 0};
  cg_cuda_binary bin;
  char err[2048];
  if (cg_nvrtc_compile(&api, NULL, &src, &bin, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    CHECK(0);
    return;
  }
  cg_cu_module mod = NULL;
  CHECK_EQ_INT(api.cuModuleLoadData(&mod, bin.image), CG_CUDA_SUCCESS);
  cg_cu_function bounded = NULL, dynamic = NULL, heavy = NULL;
  CHECK_EQ_INT(api.cuModuleGetFunction(&bounded, mod, "bounded"), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuModuleGetFunction(&dynamic, mod, "dynamic"), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuModuleGetFunction(&heavy, mod, "heavy"), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuModuleGetFunction(&heavy, mod, "absent"), CG_CUDA_ERROR_NOT_FOUND);
  LAST_IS("cuModuleGetFunction: the module has no kernel absent");

  /* what the stub reads from the cubin is what ptxas reported */
  const char *names[3] = {"bounded", "dynamic", "heavy"};
  cg_cu_function fns[3] = {bounded, dynamic, heavy};
  int regs[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) {
    const cg_kernel_info *k = cg_cuda_binary_kernel(&bin, names[i]);
    int smem = -1;
    CHECK(k != NULL);
    CHECK_EQ_INT(api.cuFuncGetAttribute(&regs[i], CG_CU_FUNC_ATTRIBUTE_NUM_REGS, fns[i]), CG_CUDA_SUCCESS);
    CHECK_EQ_INT(api.cuFuncGetAttribute(&smem, CG_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fns[i]), CG_CUDA_SUCCESS);
    if (k) {
      CHECK_EQ_INT(regs[i], k->registers);
      CHECK_EQ_INT(smem, k->smem_bytes);
    }
  }
  int max_threads = 0;
  CHECK_EQ_INT(api.cuFuncGetAttribute(&max_threads, CG_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, bounded), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(max_threads, 128);

  cg_cu_deviceptr p = 0, q = 0;
  CHECK_EQ_INT(api.cuMemAlloc(&p, 64 * 1024 * sizeof(double)), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuMemAlloc(&q, 1024 * sizeof(double)), CG_CUDA_SUCCESS);
  void *params[2] = {&p, &q};
  CHECK_EQ_INT(api.cuLaunchKernel(bounded, 1, 1, 1, 128, 1, 1, 0, NULL, params, NULL), CG_CUDA_SUCCESS);
  /* planted: more threads than __launch_bounds__(128) */
  CHECK_EQ_INT(api.cuLaunchKernel(bounded, 1, 1, 1, 256, 1, 1, 0, NULL, params, NULL), CG_CUDA_ERROR_INVALID_VALUE);
  LAST_IS("cuLaunchKernel: bounded: block of 256 threads, more than its __launch_bounds__ (128)");
  CHECK_EQ_INT(api.cuLaunchKernel(dynamic, 1, 1, 1, 2048, 1, 1, 0, NULL, params, NULL), CG_CUDA_ERROR_INVALID_VALUE);
  LAST_IS("cuLaunchKernel: dynamic: block 2048 x 1 x 1 (each at least 1, at most 1024 x 1024 x 64)");
  CHECK_EQ_INT(api.cuLaunchKernel(dynamic, 1, 70000, 1, 32, 1, 1, 0, NULL, params, NULL), CG_CUDA_ERROR_INVALID_VALUE);
  LAST_IS("cuLaunchKernel: dynamic: grid 1 x 70000 x 1 (each at least 1, at most 2147483647 x 65535 x 65535)");
  CHECK_EQ_INT(api.cuLaunchKernel(dynamic, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CG_CUDA_ERROR_INVALID_VALUE);
  LAST_IS("cuLaunchKernel: dynamic takes 1 parameters, kernelParams is NULL");
  /* planted: 64 KiB of dynamic shared memory without the opt-in */
  CHECK_EQ_INT(api.cuLaunchKernel(dynamic, 1, 1, 1, 32, 1, 1, 65536, NULL, params, NULL), CG_CUDA_ERROR_INVALID_VALUE);
  char want[512];
  snprintf(want, sizeof want,
           "cuLaunchKernel: dynamic: 65536 bytes of dynamic shared memory, more than the 49152 it may use (0 static "
           "of 49152 without the opt-in; cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) allows "
           "up to %d in all on %s)",
           strcmp(dev.arch, "sm_90") == 0 ? 232448 : 166912, dev.arch);
  LAST_IS(want);
  CHECK_EQ_INT(api.cuFuncSetAttribute(dynamic, CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuLaunchKernel(dynamic, 1, 1, 1, 32, 1, 1, 65536, NULL, params, NULL), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuFuncSetAttribute(dynamic, CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 240000),
               CG_CUDA_ERROR_INVALID_VALUE);
  LAST_HAS("dynamic: 240000 bytes of dynamic shared memory and 0 static are more than");
  /* planted: a block of 1024 threads of a kernel with more than 64 registers */
  CHECK(regs[2] > 64);
  CHECK_EQ_INT(api.cuLaunchKernel(heavy, 1, 1, 1, 256, 1, 1, 0, NULL, params, NULL), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuLaunchKernel(heavy, 1, 1, 1, 1024, 1, 1, 0, NULL, params, NULL),
               CG_CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  int unit = (regs[2] * 32 + 255) / 256 * 256;
  snprintf(want, sizeof want,
           "cuLaunchKernel: heavy: 1024 threads of %d registers need %d registers, more than the 65536 of a block on %s",
           regs[2], 32 * unit, dev.arch);
  LAST_IS(want);
  CHECK_EQ_INT(api.cuMemFree(p), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuMemFree(q), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuModuleUnload(mod), CG_CUDA_SUCCESS);
  cg_cuda_binary_free(&bin);
}

static void test_blaslt(void) {
  enum { N = 16 };
  cg_cublaslt_handle lt = NULL;
  cg_cublaslt_matmul_desc desc = NULL;
  cg_cublaslt_matrix_layout l = NULL, bad = NULL;
  cg_cublaslt_preference pref = NULL;
  CHECK_EQ_INT(api.cublasLtCreate(&lt), CG_CUBLAS_STATUS_SUCCESS);
  CHECK_EQ_INT(api.cublasLtMatmulDescCreate(&desc, CG_CUBLAS_COMPUTE_32F, CG_CUDA_R_32F), CG_CUBLAS_STATUS_SUCCESS);
  CHECK_EQ_INT(api.cublasLtMatrixLayoutCreate(&l, CG_CUDA_R_32F, N, N, N), CG_CUBLAS_STATUS_SUCCESS);
  CHECK_EQ_INT(api.cublasLtMatrixLayoutCreate(&bad, CG_CUDA_R_32F, N, N, N / 2), CG_CUBLAS_STATUS_SUCCESS);
  CHECK_EQ_INT(api.cublasLtMatmulPreferenceCreate(&pref), CG_CUBLAS_STATUS_SUCCESS);
  cg_cublaslt_heuristic h;
  int found = 0;
  CHECK_EQ_INT(api.cublasLtMatmulAlgoGetHeuristic(lt, desc, bad, l, l, l, pref, 1, &h, &found),
               CG_CUBLAS_STATUS_INVALID_VALUE);
  LAST_IS("matrix A: leading dimension 8 below its 16 rows");
  CHECK_EQ_INT(api.cublasLtMatmulAlgoGetHeuristic(lt, desc, l, l, l, l, pref, 1, &h, &found), CG_CUBLAS_STATUS_SUCCESS);
  CHECK_EQ_INT(found, 1);
  cg_cu_deviceptr m[4];
  for (int i = 0; i < 4; i++) CHECK_EQ_INT(api.cuMemAlloc(&m[i], N * N * sizeof(float) + 256), CG_CUDA_SUCCESS);
  void *a = (void *)(uintptr_t)m[0], *b = (void *)(uintptr_t)m[1], *c = (void *)(uintptr_t)m[2],
       *d = (void *)(uintptr_t)m[3];
  float one = 1, zero = 0;
  CHECK_EQ_INT(api.cublasLtMatmul(lt, desc, &one, a, l, b, l, &zero, c, l, d, l, &h.algo, NULL, 0, NULL),
               CG_CUBLAS_STATUS_SUCCESS);
  /* planted: an operand 4 bytes past the 256-byte alignment the algorithm assumes */
  CHECK_EQ_INT(api.cublasLtMatmul(lt, desc, &one, (char *)a + 4, l, b, l, &zero, c, l, d, l, &h.algo, NULL, 0, NULL),
               CG_CUBLAS_STATUS_NOT_SUPPORTED);
  LAST_HAS("is aligned to 4 bytes, less than the 256 the algorithm was chosen for "
           "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES)");
  /* the documented 256-byte workspace alignment */
  CHECK_EQ_INT(api.cublasLtMatmul(lt, desc, &one, a, l, b, l, &zero, c, l, d, l, &h.algo, (char *)d + 16, 64, NULL),
               CG_CUBLAS_STATUS_INVALID_VALUE);
  LAST_HAS("is not 256-byte aligned");
  for (int i = 0; i < 4; i++) CHECK_EQ_INT(api.cuMemFree(m[i]), CG_CUDA_SUCCESS);
  api.cublasLtMatmulPreferenceDestroy(pref);
  api.cublasLtMatrixLayoutDestroy(l);
  api.cublasLtMatrixLayoutDestroy(bad);
  api.cublasLtMatmulDescDestroy(desc);
  api.cublasLtDestroy(lt);
}

/* The planted defect: the value read right after an asynchronous download,
 * before its stream is synchronized (what the code under test must not do). */
static float read_before_sync(cg_cu_deviceptr d, cg_cu_stream s, float *host) {
  api.cuMemcpyDtoHAsync(host, d, 64 * sizeof(float), s);
  float v = host[3];
  api.cuStreamSynchronize(s);
  return v;
}

static void test_stream_ordering(void) {
  float in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = (float)i + 1;
  cg_cu_deviceptr d = 0;
  cg_cu_stream s = NULL, nb = NULL;
  cg_cu_event e = NULL;
  CHECK_EQ_INT(api.cuMemAlloc(&d, sizeof in), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuMemcpyHtoD(d, in, sizeof in), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuStreamCreate(&s, 0), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuStreamCreate(&nb, CG_CU_STREAM_NON_BLOCKING), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuEventCreate(&e, 0), CG_CUDA_SUCCESS);
  CHECK(isnan(read_before_sync(d, s, out))); /* caught: a test reading it sees NaN */
  CHECK(out[3] == 4.0f);                     /* after the sync: the bytes */
  /* the host buffer is NaN until a sync point of its stream */
  memset(out, 0, sizeof out);
  CHECK_EQ_INT(api.cuMemcpyDtoHAsync(out, d, sizeof out, nb), CG_CUDA_SUCCESS);
  CHECK(isnan(out[0]) && isnan(out[63]));
  CHECK_EQ_INT(api.cuMemcpyDtoH(out + 32, d, 4), CG_CUDA_SUCCESS); /* legacy stream: no wait for a non-blocking one */
  CHECK(isnan(out[0]));
  CHECK_EQ_INT(api.cuEventRecord(e, nb), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuEventSynchronize(e), CG_CUDA_SUCCESS);
  CHECK(out[0] == 1.0f && out[63] == 64.0f);
  /* a blocking stream's copy lands at the next synchronous call */
  CHECK_EQ_INT(api.cuMemcpyDtoHAsync(out, d, sizeof out, s), CG_CUDA_SUCCESS);
  CHECK(isnan(out[10]));
  CHECK_EQ_INT(api.cuCtxSynchronize(), CG_CUDA_SUCCESS);
  CHECK(out[10] == 11.0f);
  /* a host pointer where device memory belongs */
  CHECK_EQ_INT(api.cuMemcpyHtoD((cg_cu_deviceptr)(uintptr_t)out, in, 16), CG_CUDA_ERROR_INVALID_VALUE);
  LAST_HAS("cuMemcpyHtoD: the destination [0x");
  LAST_HAS(", +16 bytes) is not inside one device allocation");
  CHECK_EQ_INT(api.cuMemcpyDtoH(out, d, sizeof in + 4), CG_CUDA_ERROR_INVALID_VALUE);
  api.cuEventDestroy(e);
  api.cuStreamDestroy(s);
  api.cuStreamDestroy(nb);
  CHECK_EQ_INT(api.cuMemFree(d), CG_CUDA_SUCCESS);
}

/* An upload from page-locked memory (the trainer's batch) reads its source
 * when its turn in the stream comes: the host writes it again only after a
 * sync point. Right: upload, event, wait, write; a pageable source may be
 * reused at once. Planted: a write between the upload and the sync, caught
 * at the sync (sticky: every later call fails with the message); a reset
 * of the context clears it. */
static void test_pinned_upload(void) {
  float *h = NULL, pageable[64], out[64];
  cg_cu_deviceptr d = 0;
  cg_cu_event e = NULL;
  CHECK_EQ_INT(api.cuMemHostAlloc((void **)&h, sizeof out, 0), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuMemAlloc(&d, sizeof out), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuEventCreate(&e, CG_CU_EVENT_DISABLE_TIMING), CG_CUDA_SUCCESS);
  if (!h || !d || !e) return;
  for (int i = 0; i < 64; i++) h[i] = (float)i, pageable[i] = -(float)i;
  CHECK_EQ_INT(api.cuMemcpyHtoDAsync(d, h, sizeof out, NULL), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuEventRecord(e, NULL), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuEventSynchronize(e), CG_CUDA_SUCCESS);
  h[5] = 99; /* after the sync: allowed */
  CHECK_EQ_INT(api.cuMemcpyDtoH(out, d, sizeof out), CG_CUDA_SUCCESS);
  CHECK(out[5] == 5.0f && out[63] == 63.0f);
  CHECK_EQ_INT(api.cuMemcpyHtoDAsync(d, pageable, sizeof out, NULL), CG_CUDA_SUCCESS);
  pageable[0] = 7; /* pageable: the driver staged it */
  CHECK_EQ_INT(api.cuCtxSynchronize(), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.cuMemFreeHost(pageable), CG_CUDA_ERROR_INVALID_VALUE);
  LAST_HAS("is not a block of cuMemHostAlloc");
  /* planted: the host writes the source before the stream's sync */
  CHECK_EQ_INT(api.cuMemcpyHtoDAsync(d, h, sizeof out, NULL), CG_CUDA_SUCCESS);
  h[1] = 42;
  CHECK_EQ_INT(api.cuEventRecord(e, NULL), CG_CUDA_SUCCESS);
  api.cuEventSynchronize(e); /* the sync point: the check */
  CHECK_EQ_INT(api.cuMemcpyDtoH(out, d, sizeof out), CG_CUDA_ERROR_INVALID_VALUE);
  LAST_HAS("the host wrote its page-locked source");
  LAST_HAS("before the stream was synchronized");
  CHECK_EQ_INT(api.cuDevicePrimaryCtxReset(dev.device), CG_CUDA_SUCCESS); /* frees d, clears the error */
  CHECK_EQ_INT(api.cuMemFreeHost(h), CG_CUDA_SUCCESS);
  api.cuEventDestroy(e);
}

static void test_nccl(void) {
  char err[1024];
  if (rt_cuda_load(&api, CG_CUDA_LIB_NCCL, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    CHECK(0);
    return;
  }
  cg_nccl_unique_id id;
  cg_nccl_comm comm = NULL;
  CHECK_EQ_INT(api.ncclGetUniqueId(&id), CG_ncclSuccess);
  CHECK_EQ_INT(api.ncclCommInitRank(&comm, 1, id, 0), CG_ncclSuccess);
  cg_cu_deviceptr d = 0;
  CHECK_EQ_INT(api.cuMemAlloc(&d, 1024), CG_CUDA_SUCCESS);
  void *p = (void *)(uintptr_t)d;
  CHECK_EQ_INT(api.ncclAllReduce(p, p, 64, CG_ncclFloat32, CG_ncclSum, comm, NULL), CG_ncclSuccess);
  CHECK_EQ_INT(api.ncclAllGather(p, p, 64, CG_ncclFloat32, comm, NULL), CG_ncclSuccess); /* rank 0: in place */
  /* planted: out of place, overlapping */
  CHECK_EQ_INT(api.ncclAllReduce((char *)p + 16, p, 64, CG_ncclFloat32, CG_ncclSum, comm, NULL), CG_ncclInvalidArgument);
  LAST_HAS("ncclAllReduce: the send buffer [0x");
  LAST_HAS(", +256) without being in place");
  float host[4];
  CHECK_EQ_INT(api.ncclBroadcast(host, p, 4, CG_ncclFloat32, 0, comm, NULL), CG_ncclInvalidArgument);
  LAST_IS("ncclBroadcast: the send buffer is not inside one device allocation");
  CHECK_EQ_INT(api.cuMemFree(d), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api.ncclCommDestroy(comm), CG_ncclSuccess);
}

int main(void) {
  const char *dir = getenv("TGC_CUDA_LIB_PATH");
  char nvrtc[4096];
  snprintf(nvrtc, sizeof nvrtc, "%s/libnvrtc.so.13", dir ? dir : ".");
  if (!dir || (access(nvrtc, R_OK) != 0 && (snprintf(nvrtc, sizeof nvrtc, "%s/libnvrtc.so.12", dir), access(nvrtc, R_OK) != 0))) {
    printf("skipped: no NVRTC of the CUDA toolkit beside the stub (TGC_CUDA_LIB_PATH=%s)\n", dir ? dir : "(unset)");
    return 77;
  }
  char err[2048];
  if (rt_cuda_load(&api, CG_CUDA_LIB_DRIVER | CG_CUDA_LIB_NVRTC | CG_CUDA_LIB_CUBLASLT, err, sizeof err) != 0 ||
      rt_cuda_open_device(&api, 0, &dev, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  *(void **)&last_error = dlsym(api.handles[0], "tgc_cuda_stub_last_error");
  CHECK(last_error != NULL);
  if (!last_error) return check_done();
  CHECK(strstr(dev.name, "tgc cuda stub") != NULL);
  test_launches();
  test_blaslt();
  test_stream_ordering();
  test_nccl();
  check_capture_rules(&api, "the stub");
  test_pinned_upload(); /* last: its planted defect resets the context */
  rt_cuda_close_device(&api, &dev);
  return check_done();
}
