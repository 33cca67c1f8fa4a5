/* bench/cuda_emu.c — how fast the cuda-emu emulator runs kernels (what a
 * --backend cuda-emu run pays per kernel), measured, never asserted:
 *   launch     an empty 1-block, 32-thread launch: the fixed cost
 *   threads    y = a x + y over 2^22 floats, 256-thread blocks: the cost of
 *              a CUDA thread that never waits (fiber start and end)
 *   barriers   the tiled matmul of tests/cuda/matmul.cu at 256^3: threads
 *              switching at every __syncthreads
 *   shuffles   block_sum of tests/cuda/warp.cu over 2^20 floats: 5 warp
 *              rounds per reduction, two reductions per block
 *   gemm       cublasLtMatmul 1024^3 fp32 (the CPU GEMM under the contract)
 * Usage (from the repository root, after cmake -DTGC_BENCH=ON and a build):
 *   ./build/bench/cuda_emu [repeats]
 * Kernels are compiled once through the cache ($TGC_CACHE_DIR). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen.h"
#include "rt_cuda.h"

static cg_cuda_api api;
static char err[4096];

#define CU(fn, ...)                                                   \
  do {                                                                \
    if (CG_CU(&api, NULL, err, sizeof err, fn, __VA_ARGS__)) {        \
      fprintf(stderr, "%s\n", err);                                   \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *axpy_source =
    "#include \"tgc_cuda.h\"\n"
    "extern \"C\" __global__ void axpy(float a, const float *x, float *y, int n) {\n"
    "  long long i = tgc_global_id();\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n"
    "TGC_REGISTER(axpy)\n"
    "extern \"C\" __global__ void empty() {}\n"
    "TGC_REGISTER(empty)\n";

static cg_cu_module load(cg_cache *cache, const char *name, const char *text, const char *arch) {
  cg_cuda_source src = {name, text, arch, NULL, 0};
  cg_cuda_binary bin;
  if (cg_nvrtc_compile(&api, cache, &src, &bin, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  cg_cu_module m;
  CU(cuModuleLoadData, &m, bin.image);
  cg_cuda_binary_free(&bin);
  return m;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open (run from the repository root)\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = calloc((size_t)n + 1, 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) exit(1);
  fclose(f);
  return s;
}

/* Seconds per launch of f, best of `repeats`. */
static double time_launch(cg_cu_function f, unsigned int gx, unsigned int gy, unsigned int bx, unsigned int by,
                          void **params, int repeats) {
  double best = 1e30;
  for (int r = 0; r < repeats; r++) {
    double t0 = now();
    CU(cuLaunchKernel, f, gx, gy, 1, bx, by, 1, 0, NULL, params, NULL);
    CU(cuCtxSynchronize, );
    double t = now() - t0;
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  int repeats = argc > 1 ? atoi(argv[1]) : 3;
  rt_cuda_emu_config cfg;
  rt_cuda_device dev;
  if (rt_cuda_emu_config_init(&cfg, err, sizeof err) || rt_cuda_emu_load(&api, &cfg, err, sizeof err) ||
      rt_cuda_open_device(&api, 0, &dev, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  cg_cache *cache = cg_cache_open(NULL, err, sizeof err);
  char *warp = read_text("tests/cuda/warp.cu"), *matmul = read_text("tests/cuda/matmul.cu");
  cg_cu_module ma = load(cache, "axpy.cu", axpy_source, dev.arch), mw = load(cache, "warp.cu", warp, dev.arch),
               mm = load(cache, "matmul.cu", matmul, dev.arch);
  cg_cu_function axpy, empty, block_sum, tiled;
  CU(cuModuleGetFunction, &axpy, ma, "axpy");
  CU(cuModuleGetFunction, &empty, ma, "empty");
  CU(cuModuleGetFunction, &block_sum, mw, "block_sum");
  CU(cuModuleGetFunction, &tiled, mm, "matmul_tiled");
  printf("cuda-emu on %s, %d OpenMP threads, best of %d\n", dev.name, omp_get_max_threads(), repeats);

  double t = time_launch(empty, 1, 1, 32, 1, NULL, repeats * 10);
  printf("launch    empty kernel, 1 x 32 threads            %9.1f us\n", t * 1e6);

  int n = 1 << 22;
  cg_cu_deviceptr x, y;
  CU(cuMemAlloc, &x, (size_t)n * 4);
  CU(cuMemAlloc, &y, (size_t)n * 4);
  CU(cuMemsetD8, x, 0, (size_t)n * 4);
  CU(cuMemsetD8, y, 0, (size_t)n * 4);
  float a = 2;
  void *pa[] = {&a, &x, &y, &n};
  t = time_launch(axpy, (unsigned int)(n / 256), 1, 256, 1, pa, repeats);
  printf("threads   axpy, 2^22 threads                      %9.1f ms  %6.1f ns per CUDA thread\n", t * 1e3,
         t * 1e9 / n);

  int M = 256;
  cg_cu_deviceptr A, B, C;
  CU(cuMemAlloc, &A, (size_t)M * M * 4);
  CU(cuMemAlloc, &B, (size_t)M * M * 4);
  CU(cuMemAlloc, &C, (size_t)M * M * 4);
  CU(cuMemsetD8, A, 0, (size_t)M * M * 4);
  CU(cuMemsetD8, B, 0, (size_t)M * M * 4);
  void *pm[] = {&A, &B, &C, &M, &M, &M};
  t = time_launch(tiled, (unsigned int)M / 16, (unsigned int)M / 16, 16, 16, pm, repeats);
  double switches = 2.0 * (M / 16) * (double)M * M; /* threads x barriers per thread */
  printf("barriers  tiled matmul 256^3, 16x16 blocks        %9.1f ms  %6.1f ns per thread-barrier\n", t * 1e3,
         t * 1e9 / switches);

  int nb = 1 << 20;
  cg_cu_deviceptr out;
  CU(cuMemAlloc, &out, (size_t)(nb / 256) * 4);
  void *pb[] = {&x, &out, &nb};
  t = time_launch(block_sum, (unsigned int)(nb / 256), 1, 256, 1, pb, repeats);
  printf("shuffles  block_sum 2^20, 256-thread blocks       %9.1f ms  %6.1f ns per thread-shuffle\n", t * 1e3,
         t * 1e9 / (10.0 * nb));

  int g = 1024;
  cg_cu_deviceptr ga, gb, gc;
  CU(cuMemAlloc, &ga, (size_t)g * g * 4);
  CU(cuMemAlloc, &gb, (size_t)g * g * 4);
  CU(cuMemAlloc, &gc, (size_t)g * g * 4);
  CU(cuMemsetD8, ga, 0, (size_t)g * g * 4);
  CU(cuMemsetD8, gb, 0, (size_t)g * g * 4);
  cg_cublaslt_handle h;
  cg_cublaslt_matmul_desc desc;
  cg_cublaslt_matrix_layout l;
  if (CG_CUBLAS(&api, NULL, err, sizeof err, cublasLtCreate, &h) ||
      CG_CUBLAS(&api, NULL, err, sizeof err, cublasLtMatmulDescCreate, &desc, CG_CUBLAS_COMPUTE_32F, CG_CUDA_R_32F) ||
      CG_CUBLAS(&api, NULL, err, sizeof err, cublasLtMatrixLayoutCreate, &l, CG_CUDA_R_32F, (uint64_t)g, (uint64_t)g,
                g)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  float one = 1, zero = 0;
  double best = 1e30;
  for (int r = 0; r < repeats; r++) {
    double t0 = now();
    if (CG_CUBLAS(&api, NULL, err, sizeof err, cublasLtMatmul, h, desc, &one, (void *)(uintptr_t)ga, l,
                  (void *)(uintptr_t)gb, l, &zero, (void *)(uintptr_t)gc, l, (void *)(uintptr_t)gc, l, NULL, NULL, 0,
                  NULL)) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    double tt = now() - t0;
    if (tt < best) best = tt;
  }
  printf("gemm      cublasLtMatmul 1024^3 fp32              %9.1f ms  %6.1f GFLOP/s\n", best * 1e3,
         2.0 * g * g * g / best * 1e-9);
  api.cublasLtMatrixLayoutDestroy(l);
  api.cublasLtMatmulDescDestroy(desc);
  api.cublasLtDestroy(h);
  free(warp), free(matmul);
  cg_cache_free(cache);
  rt_cuda_close_device(&api, &dev);
  rt_cuda_emu_shutdown();
  return 0;
}
