/* bench/gemm_bench.c — rt_sgemm's rate on the products of the gpt2-124m
 * training step (B=4, T=64: 256 rows), GFLOP/s per shape, best of REPS.
 * A measurement, not a test:
 *   cc -O2 -fopenmp -Iruntime/cpu bench/gemm_bench.c BUILD/runtime/libtgc_gemm.a -lm -o gemm_bench
 *   OMP_NUM_THREADS=2 ./gemm_bench [REPS [WHAT [bf16]]]   (WHAT: only the shapes whose name contains
 *   it, "" for all; bf16: rt_gemm_bf16 on the operands rounded to bf16: AMX tiles where the machine
 *   has them, vdpbf16ps with TGC_GEMM_BF16=1, nothing with TGC_GEMM_AMX=0 on a machine without
 *   AVX512-BF16)
 * The "check" column: the largest |difference| from the same product on one
 * thread with rt_sgemm (0: the result does not depend on the thread count;
 * with vdpbf16ps, nor on the instruction: the same chain over the same
 * values; with AMX, the tiles' own order of the sums: small, not 0), and
 * "threads": the largest |difference| from the same kernel on one thread
 * (0 for every kernel). "cpu": the
 * best process CPU time per product over the thread count (with
 * OMP_WAIT_POLICY=passive, the busy time of a thread), which other processes
 * on a shared machine disturb less than the wall time. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm.h"

typedef struct {
  const char *what;
  int ta, tb;
  long M, N, K;
} shape;

static const shape shapes[] = {
    {"qkv fwd     x W", 0, 0, 256, 2304, 768},   {"proj fwd    x W", 0, 0, 256, 768, 768},
    {"fc fwd      x W", 0, 0, 256, 3072, 768},   {"mproj fwd   x W", 0, 0, 256, 768, 3072},
    {"qkv dx     dy W^T", 0, 1, 256, 768, 2304}, {"fc dx      dy W^T", 0, 1, 256, 768, 3072},
    {"mproj dx   dy W^T", 0, 1, 256, 3072, 768}, {"qkv dW     x^T dy", 1, 0, 768, 2304, 256},
    {"fc dW      x^T dy", 1, 0, 768, 3072, 256}, {"mproj dW   x^T dy", 1, 0, 3072, 768, 256},
    {"head fwd   h E^T", 0, 1, 256, 50257, 768}, {"head dh    g E", 0, 0, 256, 768, 50257},
    {"head dE    g^T h", 1, 0, 50257, 768, 256},
};

static double now(void) { return omp_get_wtime(); }
static double cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 3;
  bool bf16 = argc > 3 && strcmp(argv[3], "bf16") == 0;
  if (bf16 && !rt_gemm_bf16_native()) {
    printf("rt_gemm_bf16 is off: no AMX here (or TGC_GEMM_AMX=0); TGC_GEMM_BF16=1 asks for vdpbf16ps\n");
    return 1;
  }
  printf("isa %s%s%s, %d threads\n", rt_gemm_isa(), bf16 ? ", bf16 products on " : "", bf16 ? rt_gemm_bf16_kind() : "",
         omp_get_max_threads());
  double tot_flop = 0, tot_s = 0, tot_cpu = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const shape *s = &shapes[i];
    if (argc > 2 && !strstr(s->what, argv[2])) continue;
    long M = s->M, N = s->N, K = s->K;
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C = malloc(sizeof(float) * M * N), *C1 = malloc(sizeof(float) * M * N), *Ct = malloc(sizeof(float) * M * N);
    if (!A || !B || !C || !C1 || !Ct) return 1;
    srand(1);
    for (long j = 0; j < M * K; j++) A[j] = (float)rand() / RAND_MAX - 0.5f;
    for (long j = 0; j < K * N; j++) B[j] = (float)rand() / RAND_MAX - 0.5f;
    long lda = s->ta ? M : K, ldb = s->tb ? K : N;
    uint16_t *Ah = bf16 ? malloc(2 * M * K) : NULL, *Bh = bf16 ? malloc(2 * K * N) : NULL;
    if (bf16 && (!Ah || !Bh)) return 1;
    for (long j = 0; bf16 && j < M * K; j++) {
      uint32_t u;
      memcpy(&u, &A[j], 4);
      Ah[j] = (uint16_t)(u >> 16), u &= 0xffff0000u, memcpy(&A[j], &u, 4); /* truncated: A holds the same values */
    }
    for (long j = 0; bf16 && j < K * N; j++) {
      uint32_t u;
      memcpy(&u, &B[j], 4);
      Bh[j] = (uint16_t)(u >> 16), u &= 0xffff0000u, memcpy(&B[j], &u, 4);
    }
    double best = 1e30, best_cpu = 1e30;
    int nt = omp_get_max_threads();
    for (int r = 0; r < reps; r++) {
      double t0 = now(), c0 = cpu();
      if (bf16) rt_gemm_bf16(s->ta, s->tb, M, N, K, Ah, lda, Bh, ldb, C, N);
      else rt_sgemm(s->ta, s->tb, M, N, K, A, lda, B, ldb, C, N);
      double dt = now() - t0, dc = (cpu() - c0) / nt;
      if (dt < best) best = dt;
      if (dc < best_cpu) best_cpu = dc;
    }
    omp_set_num_threads(1);
    rt_sgemm(s->ta, s->tb, M, N, K, A, lda, B, ldb, C1, N);
    if (bf16) rt_gemm_bf16(s->ta, s->tb, M, N, K, Ah, lda, Bh, ldb, Ct, N);
    else rt_sgemm(s->ta, s->tb, M, N, K, A, lda, B, ldb, Ct, N);
    omp_set_num_threads(nt);
    double diff = 0, tdiff = 0;
    for (long j = 0; j < M * N; j++) diff = fmax(diff, fabs((double)C[j] - C1[j]));
    for (long j = 0; j < M * N; j++) tdiff = fmax(tdiff, fabs((double)C[j] - Ct[j]));
    double flop = 2.0 * M * N * K;
    tot_flop += flop;
    tot_s += best;
    tot_cpu += best_cpu;
    printf("%-18s ta%d tb%d %5ld x %5ld x %5ld  %8.2f ms  %6.1f GFLOP/s  cpu %6.1f GFLOP/s  check %g  threads %g\n", s->what,
           s->ta, s->tb, M, N, K, best * 1e3, flop / best * 1e-9, flop / best_cpu * 1e-9, diff, tdiff);
    free(A), free(B), free(C), free(C1), free(Ct), free(Ah), free(Bh);
  }
  printf("all: %.1f GFLOP/s, cpu %.1f GFLOP/s\n", tot_flop / tot_s * 1e-9, tot_flop / tot_cpu * 1e-9);
  return 0;
}
