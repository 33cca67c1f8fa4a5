/* tests/unit/test_cuda_emu.c — the hand-written kernels of tests/cuda/warp.cu
 * and matmul.cu run in cuda-emu against host references.
 *
 *   block_sum       a block reduction through warp shuffles and shared
 *                   memory (tolerance 1e-5 relative: float sums in a
 *                   different order than the double reference)
 *   warp_vote       ballot / any / all, a partial last warp
 *   shuffles        idx / up / down / xor at widths 8 and 32, a half-warp
 *                   mask reading outside the round (undefined: all bits set,
 *                   NaN), __reduce_add_sync, __match_any_sync — expected values
 *                   from CUDA's documented segment semantics (exact)
 *   atomics         integer histogram, float sum (exact: 0.5 per element),
 *                   max, a compare-and-swap counter, from 8 blocks
 *   low_precision   float -> bf16 / half bits for ties, subnormals,
 *                   overflow, NaN and 65536 values of every exponent, and
 *                   h + h * h, against ir/'s conversions (bit-exact; NaN is
 *                   CUDA's 0x7fff)
 *   matmul_tiled    a 37x45 @ 45x29 tiled matmul (tolerance 1e-5), and the
 *                   same kernel missing its first barrier: wrong
 *   mma_tile        one warp's 16x8x16 bf16 tensor-core tile (exact: small
 *                   integer operands)
 *   ldmatrix_tile   the same tile with its fragments loaded from padded
 *                   shared rows (A's copied in by cp.async) by ldmatrix
 *                   (x4 A; x2 .trans, x2 of the
 *                   transposed B, x1 .trans B): each of the three results
 *                   exact */
#include <math.h>
#include <string.h>

#include "check.h"
#include "ir.h"
#include "testcuda.h"

static void test_block_sum(cg_cu_module m) {
  enum { N = 1000, BLOCK = 256, BLOCKS = (N + BLOCK - 1) / BLOCK };
  float x[N], out[BLOCKS];
  double want[BLOCKS] = {0};
  for (int i = 0; i < N; i++) {
    x[i] = (float)sin(0.37 * i) * 3.0f;
    want[i / BLOCK] += x[i];
  }
  cg_cu_deviceptr dx = t_upload(x, sizeof x), dout = t_upload(NULL, sizeof out);
  int n = N;
  void *params[] = {&dx, &dout, &n};
  TCU(cuLaunchKernel, t_function(m, "block_sum"), BLOCKS, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL);
  t_download(out, dout, sizeof out);
  CHECK_EQ_INT(t_compare("block_sum", out, want, BLOCKS, 1e-5), 0);
  TCU(cuMemFree, dx);
  TCU(cuMemFree, dout);
}

static void test_warp_vote(cg_cu_module m) {
  enum { N = 100, BLOCK = 128, WARPS = BLOCK / 32 };
  float x[N];
  for (int i = 0; i < N; i++) x[i] = i % 7 == 3 ? -1.0f : (i < 32 ? -2.0f : 1.0f) * (i % 5 == 0 ? -1.0f : 1.0f);
  unsigned int ballot[WARPS];
  int any[WARPS], all[WARPS];
  cg_cu_deviceptr dx = t_upload(x, sizeof x), db = t_upload(NULL, sizeof ballot), da = t_upload(NULL, sizeof any),
                  dl = t_upload(NULL, sizeof all);
  int n = N;
  void *params[] = {&dx, &db, &da, &dl, &n};
  TCU(cuLaunchKernel, t_function(m, "warp_vote"), 1, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL);
  t_download(ballot, db, sizeof ballot);
  t_download(any, da, sizeof any);
  t_download(all, dl, sizeof all);
  for (int w = 0; w < WARPS; w++) {
    unsigned int want = 0;
    for (int l = 0; l < 32; l++)
      if (w * 32 + l < N && x[w * 32 + l] > 0) want |= 1u << l;
    CHECK_EQ_INT(ballot[w], want);
    CHECK_EQ_INT(any[w], want != 0);
    CHECK_EQ_INT(all[w], want == 0xffffffffu);
  }
  CHECK(ballot[3] != 0 && ballot[3] >> 4 == 0); /* the last warp: lanes 0..3 only */
  cg_cu_deviceptr bufs[] = {dx, db, da, dl};
  for (int i = 0; i < 4; i++) TCU(cuMemFree, bufs[i]);
}

static void test_shuffles(cg_cu_module m) {
  float out[320];
  cg_cu_deviceptr d = t_upload(NULL, sizeof out);
  void *params[] = {&d};
  TCU(cuLaunchKernel, t_function(m, "shuffles"), 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
  t_download(out, d, sizeof out);
  for (int lane = 0; lane < 32; lane++) {
    const float *o = out + lane * 10;
    int seg = lane / 8 * 8, in_seg = lane % 8;
#define V(l) (100.0f + (float)(l))
    CHECK(o[0] == V(seg + (lane + 3) % 8));
    CHECK(o[1] == (in_seg >= 3 ? V(lane - 3) : V(lane)));
    CHECK(o[2] == (in_seg + 3 < 8 ? V(lane + 3) : V(lane)));
    CHECK(o[3] == V(lane ^ 5));
    CHECK(o[4] == (lane >= 3 ? V(lane - 3) : V(lane)));
    CHECK(o[5] == (lane + 3 < 32 ? V(lane + 3) : V(lane)));
    CHECK(o[6] == V(lane ^ 17));
    uint32_t bits;
    memcpy(&bits, &o[7], 4);
    if (lane < 16) CHECK_EQ_INT(bits, 0xffffffffu); /* read a lane outside the round: undefined */
    else CHECK(o[7] == 0.0f);
    CHECK(o[8] == 496.0f);
    unsigned int same = 0;
    for (int j = 0; j < 32; j++)
      if (j % 3 == lane % 3) same |= 1u << j;
    CHECK(o[9] == (float)same);
#undef V
  }
  TCU(cuMemFree, d);
}

static void test_atomics(cg_cu_module m) {
  enum { N = 10000 };
  int *keys = malloc(N * sizeof *keys), hist[16] = {0}, want_hist[16] = {0}, want_max = -1;
  for (int i = 0; i < N; i++) {
    keys[i] = (int)((i * 2654435761u) % 1000u);
    want_hist[keys[i] & 15]++;
    if (keys[i] > want_max) want_max = keys[i];
  }
  float sum = 0;
  int max_key = -1;
  unsigned int counter = 0;
  cg_cu_deviceptr dk = t_upload(keys, N * sizeof *keys), dh = t_upload(NULL, sizeof hist), ds = t_upload(NULL, 4),
                  dm = t_upload(&max_key, 4), dc = t_upload(NULL, 4);
  int n = N;
  void *params[] = {&dk, &n, &dh, &ds, &dm, &dc};
  TCU(cuLaunchKernel, t_function(m, "atomics"), 8, 1, 1, 128, 1, 1, 0, NULL, params, NULL);
  t_download(hist, dh, sizeof hist);
  t_download(&sum, ds, 4);
  t_download(&max_key, dm, 4);
  t_download(&counter, dc, 4);
  for (int b = 0; b < 16; b++) CHECK_EQ_INT(hist[b], want_hist[b]);
  CHECK(sum == 0.5f * N);
  CHECK_EQ_INT(max_key, want_max);
  CHECK_EQ_INT(counter, N);
  cg_cu_deviceptr bufs[] = {dk, dh, ds, dm, dc};
  for (int i = 0; i < 5; i++) TCU(cuMemFree, bufs[i]);
  free(keys);
}

/* CUDA's conversions: round to nearest even (ir/), NaN -> 0x7fff. */
static uint16_t ref_bf16(float f) { return f != f ? 0x7fff : ir_f32_to_bf16(f); }
static uint16_t ref_f16(float f) { return f != f ? 0x7fff : ir_f32_to_f16(f); }

static void test_low_precision(cg_cu_module m) {
  enum { SPECIAL = 26, N = SPECIAL + 65536 };
  float *x = malloc(N * sizeof *x);
  const float special[SPECIAL] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -0.0f, 0x1p-149f,
                                  3.4e38f, 3.4028235e38f, 65504.0f, 65519.0f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x3p-25f,
                                  0x1p-14f, 1e-8f, NAN, INFINITY, -INFINITY, 0.1f, 1.0f / 3.0f, -2.5f, 0x1.fffffep-127f,
                                  0x1p-126f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f};
  memcpy(x, special, sizeof special);
  for (int i = SPECIAL; i < N; i++) { /* every exponent (subnormals, inf and NaN payloads included), both signs */
    uint32_t b = (uint32_t)i * 2654435761u ^ (uint32_t)i * 40503u << 7;
    b = (b & 0x807fffffu) | ((uint32_t)(i % 256) << 23);
    memcpy(&x[i], &b, 4);
  }
  size_t h = N * sizeof(uint16_t), f = N * sizeof(float);
  cg_cu_deviceptr dx = t_upload(x, f), d[6];
  size_t sizes[6] = {h, f, h, h, f, h};
  for (int i = 0; i < 6; i++) d[i] = t_upload(NULL, sizes[i]);
  int n = N;
  void *params[] = {&dx, &d[0], &d[1], &d[2], &d[3], &d[4], &d[5], &n};
  TCU(cuLaunchKernel, t_function(m, "low_precision"), 64, 1, 1, 256, 1, 1, 0, NULL, params, NULL);
  uint16_t *bb = malloc(h), *ba = malloc(h), *hb = malloc(h), *ha = malloc(h);
  float *bf = malloc(f), *hf = malloc(f);
  t_download(bb, d[0], h), t_download(bf, d[1], f), t_download(ba, d[2], h);
  t_download(hb, d[3], h), t_download(hf, d[4], f), t_download(ha, d[5], h);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    uint16_t wb = ref_bf16(x[i]), wh = ref_f16(x[i]);
    float fb = ir_bf16_to_f32(wb), fh = ir_f16_to_f32(wh);
    /* b + b * b: the product is exact in float, the sum rounded once */
    uint16_t wba = ref_bf16((float)((double)fb + (double)ir_bf16_to_f32(ref_bf16(fb * fb))));
    uint16_t wha = ref_f16((float)((double)fh + (double)ir_f16_to_f32(ref_f16(fh * fh))));
    bool ok = bb[i] == wb && ha[i] == wha && hb[i] == wh && ba[i] == wba &&
              (memcmp(&bf[i], &fb, 4) == 0 || (bf[i] != bf[i] && fb != fb)) &&
              (memcmp(&hf[i], &fh, 4) == 0 || (hf[i] != hf[i] && fh != fh));
    if (!ok && bad++ < 5)
      fprintf(stderr, "  x = %a: bf16 %04x (want %04x), arith %04x (want %04x); half %04x (want %04x), arith %04x (want %04x)\n",
              (double)x[i], bb[i], wb, ba[i], wba, hb[i], wh, ha[i], wha);
  }
  CHECK_EQ_INT(bad, 0);
  /* spot checks that do not lean on ir/: ties to even, overflow, NaN */
  CHECK_EQ_INT(bb[1], 0x3f80);  /* 1 + 2^-8: tie, to 1.0 */
  CHECK_EQ_INT(bb[2], 0x3f82);  /* 1 + 3 2^-8: tie, to even */
  CHECK_EQ_INT(bb[3], 0x3f81);  /* above the tie */
  CHECK_EQ_INT(bb[7], 0x7f80);  /* FLT_MAX rounds to infinity in bf16 */
  CHECK_EQ_INT(bb[16], 0x7fff); /* NaN */
  CHECK_EQ_INT(hb[9], 0x7bff);  /* 65519: below the tie, the largest half */
  CHECK_EQ_INT(hb[10], 0x7c00); /* 65520: the tie, to infinity */
  CHECK_EQ_INT(hb[11], 0x0001); /* 2^-24, the smallest subnormal */
  CHECK_EQ_INT(hb[12], 0x0000); /* 2^-25: tie, to even (zero) */
  CHECK_EQ_INT(hb[13], 0x0002); /* 3 2^-25: tie, to even */
  CHECK_EQ_INT(hb[16], 0x7fff);
  CHECK_EQ_INT(hb[24], 0x3c00); /* 1 + 2^-11: tie, to 1.0 */
  CHECK_EQ_INT(hb[25], 0x3c02); /* 1 + 3 2^-11: tie, to even */
  free(bb), free(ba), free(hb), free(ha), free(bf), free(hf), free(x);
  TCU(cuMemFree, dx);
  for (int i = 0; i < 6; i++) TCU(cuMemFree, d[i]);
}

static void matmul_ref(const float *A, const float *B, double *C, int M, int N, int K) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += (double)A[i * K + k] * B[k * N + j];
      C[i * N + j] = s;
    }
}

static void test_matmul(cg_cu_module m) {
  enum { M = 37, N = 29, K = 45 };
  float A[M * K], B[K * N], C[M * N];
  double want[M * N];
  for (int i = 0; i < M * K; i++) A[i] = (float)cos(0.1 * i);
  for (int i = 0; i < K * N; i++) B[i] = (float)sin(0.07 * i + 1);
  matmul_ref(A, B, want, M, N, K);
  cg_cu_deviceptr dA = t_upload(A, sizeof A), dB = t_upload(B, sizeof B), dC = t_upload(NULL, sizeof C);
  int mm = M, nn = N, kk = K;
  void *params[] = {&dA, &dB, &dC, &mm, &nn, &kk};
  TCU(cuLaunchKernel, t_function(m, "matmul_tiled"), (N + 15) / 16, (M + 15) / 16, 1, 16, 16, 1, 0, NULL, params,
      NULL);
  t_download(C, dC, sizeof C);
  CHECK_EQ_INT(t_compare("matmul_tiled", C, want, M * N, 1e-5), 0);
  /* without its first barrier, threads read tiles not yet written */
  TCU(cuMemsetD8, dC, 0, sizeof C);
  TCU(cuLaunchKernel, t_function(m, "matmul_missing_barrier"), (N + 15) / 16, (M + 15) / 16, 1, 16, 16, 1, 0, NULL,
      params, NULL);
  t_download(C, dC, sizeof C);
  int wrong = 0;
  for (int i = 0; i < M * N; i++) wrong += !(fabs(C[i] - want[i]) <= 1e-5 * (fabs(want[i]) > 1 ? fabs(want[i]) : 1));
  printf("matmul_missing_barrier: %d of %d outputs wrong\n", wrong, M * N);
  CHECK(wrong > M * N / 2);
  TCU(cuMemFree, dA);
  TCU(cuMemFree, dB);
  TCU(cuMemFree, dC);
}

static void test_mma(cg_cu_module m) {
  uint16_t A[16 * 16], B[16 * 8];
  float C[16 * 8], D[16 * 8];
  double want[16 * 8];
  for (int i = 0; i < 256; i++) A[i] = ir_f32_to_bf16((float)(i % 7 - 3));
  for (int i = 0; i < 128; i++) B[i] = ir_f32_to_bf16((float)(i % 5 - 2) * 0.5f);
  for (int i = 0; i < 128; i++) C[i] = (float)i;
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 8; c++) {
      double s = C[r * 8 + c];
      for (int k = 0; k < 16; k++) s += (double)ir_bf16_to_f32(A[r * 16 + k]) * ir_bf16_to_f32(B[k * 8 + c]);
      want[r * 8 + c] = s;
    }
  cg_cu_deviceptr dA = t_upload(A, sizeof A), dB = t_upload(B, sizeof B), dC = t_upload(C, sizeof C),
                  dD = t_upload(NULL, sizeof D);
  void *params[] = {&dA, &dB, &dC, &dD};
  TCU(cuLaunchKernel, t_function(m, "mma_tile"), 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
  t_download(D, dD, sizeof D);
  CHECK_EQ_INT(t_compare("mma_tile", D, want, 128, 0.0), 0);
  cg_cu_deviceptr d1 = t_upload(NULL, sizeof D), d2 = t_upload(NULL, sizeof D), d3 = t_upload(NULL, sizeof D);
  void *lparams[] = {&dA, &dB, &dC, &d1, &d2, &d3};
  TCU(cuLaunchKernel, t_function(m, "ldmatrix_tile"), 1, 1, 1, 32, 1, 1, 0, NULL, lparams, NULL);
  const char *names[] = {"ldmatrix_tile x4 + x2.trans", "ldmatrix_tile x4 + x2 of B^T", "ldmatrix_tile x4 + x1.trans"};
  cg_cu_deviceptr outs[] = {d1, d2, d3};
  for (int v = 0; v < 3; v++) {
    memset(D, 0, sizeof D);
    t_download(D, outs[v], sizeof D);
    CHECK_EQ_INT(t_compare(names[v], D, want, 128, 0.0), 0);
  }
  cg_cu_deviceptr bufs[] = {dA, dB, dC, dD, d1, d2, d3};
  for (int i = 0; i < 7; i++) TCU(cuMemFree, bufs[i]);
}

int main(void) {
  t_emu_open(80, false, 0);
  cg_cu_module warp = t_load_file("warp.cu"), matmul = t_load_file("matmul.cu");
  if (warp) {
    test_block_sum(warp);
    test_warp_vote(warp);
    test_shuffles(warp);
    test_atomics(warp);
    test_low_precision(warp);
  }
  if (matmul) {
    test_matmul(matmul);
    test_mma(matmul);
  }
  TCU(cuCtxSynchronize);
  t_emu_close();
  return check_done();
}
