/* tests/unit/test_cuda_racecheck.c — the emulator's shared-memory race
 * check (rt_cuda_emu_config.racecheck / TGC_EMU_RACECHECK=1; tgc's
 * --racecheck), on tests/cuda/race.cu and on kernels that must be clean.
 *
 *   reverse_racy     the planted race: reported with kernel, block, array,
 *                    index and both threads (exact line, exact count), as
 *                    a sticky CUDA_ERROR_LAUNCH_FAILED at the next call;
 *                    without racecheck it gives a wrong answer instead
 *   reverse_synced   the same with its barrier: no report, right answer
 *   warp_exchange    lanes of one warp: ordered by __syncwarp, else a race
 *   shared_histogram atomics on shared memory: no report, exact counts;
 *   histogram_racy   a read of a bin other threads still add to: reported
 *   block_sum, matmul_tiled (the prelude's reduction, a tiled matmul): no
 *                    report; matmul_missing_barrier: reported */
#include "check.h"
#include "testcuda.h"

/* Launches f, synchronizes, and returns the check line ("" if clean). */
static const char *run(cg_cu_function f, unsigned int grid, unsigned int block, void **params) {
  TCU(cuLaunchKernel, f, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL);
  if (CG_CU(&T_api, NULL, T_err, sizeof T_err, cuCtxSynchronize) == 0) T_err[0] = 0;
  return T_err;
}

static void test_reverse(void) {
  cg_cu_module m = t_load_file("race.cu");
  float x[256], out[256];
  for (int i = 0; i < 256; i++) x[i] = (float)i;
  cg_cu_deviceptr dx = t_upload(x, sizeof x), dout = t_upload(NULL, sizeof out);
  void *params[] = {&dx, &dout};
  rt_cuda_emu_counters before = rt_cuda_emu_counters_get();
  CHECK_STR(run(t_function(m, "reverse_racy"), 1, 256, params),
            "cuCtxSynchronize: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure): 256 racecheck hazards in kernel "
            "reverse_racy; the first: kernel reverse_racy block (0,0,0): shared array 'buf' index 128: read by "
            "thread (127,0,0), then write by thread (128,0,0), with no barrier between them");
  CHECK_EQ_INT(rt_cuda_emu_counters_get().races - before.races, 256);
  const char *const *lines;
  int n = rt_cuda_emu_race_reports(&lines);
  CHECK_EQ_INT(n, 64); /* the first 64 distinct hazards are kept */
  if (n >= 2) {
    CHECK_STR(lines[0], "racecheck: kernel reverse_racy block (0,0,0): shared array 'buf' index 128: read by thread "
                        "(127,0,0), then write by thread (128,0,0), with no barrier between them");
    CHECK_STR(lines[1], "racecheck: kernel reverse_racy block (0,0,0): shared array 'buf' index 127: write by thread "
                        "(127,0,0), then read by thread (128,0,0), with no barrier between them");
  }
  TCU(cuDevicePrimaryCtxReset, T_dev.device);

  m = t_load_file("race.cu");
  dx = t_upload(x, sizeof x), dout = t_upload(NULL, sizeof out);
  before = rt_cuda_emu_counters_get();
  CHECK_STR(run(t_function(m, "reverse_synced"), 1, 256, params), "");
  t_download(out, dout, sizeof out);
  int bad = 0;
  for (int i = 0; i < 256; i++) bad += out[i] != x[255 - i];
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(rt_cuda_emu_counters_get().races, before.races);

  /* lanes of a warp */
  int synced = 1;
  void *wparams[] = {&dout, &synced};
  CHECK_STR(run(t_function(m, "warp_exchange"), 1, 32, wparams), "");
  t_download(out, dout, 32 * sizeof(float));
  bad = 0;
  for (int i = 0; i < 32; i++) bad += out[i] != (float)(31 - i);
  CHECK_EQ_INT(bad, 0);
  synced = 0;
  CHECK_STR(run(t_function(m, "warp_exchange"), 1, 32, wparams),
            "cuCtxSynchronize: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure): 32 racecheck hazards in kernel "
            "warp_exchange; the first: kernel warp_exchange block (0,0,0): shared array 's' index 16: read by thread "
            "(15,0,0), then write by thread (16,0,0), with no barrier between them");
  TCU(cuDevicePrimaryCtxReset, T_dev.device);
}

static void test_atomics(void) {
  cg_cu_module m = t_load_file("race.cu");
  int keys[256], hist[16];
  for (int i = 0; i < 256; i++) keys[i] = i;
  cg_cu_deviceptr dk = t_upload(keys, sizeof keys), dh = t_upload(NULL, sizeof hist);
  int n = 256;
  void *params[] = {&dk, &n, &dh};
  CHECK_STR(run(t_function(m, "shared_histogram"), 2, 64, params), "");
  t_download(hist, dh, sizeof hist);
  for (int b = 0; b < 16; b++) CHECK_EQ_INT(hist[b], 32); /* 16 per bin, from each of 2 blocks */
  const char *got = run(t_function(m, "histogram_racy"), 1, 64, params);
  const char *want = "cuCtxSynchronize: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure): ";
  CHECK(strncmp(got, want, strlen(want)) == 0);
  CHECK(strstr(got, "racecheck hazards in kernel histogram_racy; the first: kernel histogram_racy block (0,0,0): "
                    "shared array 'bins' index 0: read by thread (0,0,0), then atomic by thread (16,0,0), with no "
                    "barrier between them") != NULL);
  if (!strstr(got, "index 0: read by thread (0,0,0), then atomic by thread (16,0,0)")) fprintf(stderr, "  got: %s\n", got);
  TCU(cuDevicePrimaryCtxReset, T_dev.device);
}

/* Kernels that synchronize correctly have no hazard; the one missing a barrier has. */
static void test_clean_kernels(void) {
  cg_cu_module warp = t_load_file("warp.cu"), mm = t_load_file("matmul.cu");
  enum { N = 1000 };
  float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)(i % 13);
  cg_cu_deviceptr dx = t_upload(x, sizeof x), dout = t_upload(NULL, 4 * sizeof(float));
  int n = N;
  void *params[] = {&dx, &dout, &n};
  CHECK_STR(run(t_function(warp, "block_sum"), 4, 256, params), "");
  int M = 37, Nn = 29, K = 45;
  cg_cu_deviceptr A = t_upload(NULL, (size_t)M * K * 4), B = t_upload(NULL, (size_t)K * Nn * 4),
                  C = t_upload(NULL, (size_t)M * Nn * 4);
  void *mp[] = {&A, &B, &C, &M, &Nn, &K};
  TCU(cuLaunchKernel, t_function(mm, "matmul_tiled"), 2, 3, 1, 16, 16, 1, 0, NULL, mp, NULL);
  TCU(cuCtxSynchronize);
  TCU(cuLaunchKernel, t_function(mm, "matmul_missing_barrier"), 2, 3, 1, 16, 16, 1, 0, NULL, mp, NULL);
  CHECK(CG_CU(&T_api, NULL, T_err, sizeof T_err, cuCtxSynchronize) == -1);
  CHECK(strstr(T_err, "racecheck hazards in kernel matmul_missing_barrier; the first: kernel matmul_missing_barrier "
                      "block (") != NULL);
  CHECK(strstr(T_err, "shared array 'As' index ") || strstr(T_err, "shared array 'Bs' index "));
  TCU(cuDevicePrimaryCtxReset, T_dev.device);
}

/* Without racecheck the planted race is simply a wrong answer. */
static void test_without_racecheck(void) {
  t_emu_open(80, false, 64 << 20);
  cg_cu_module m = t_load_file("race.cu");
  float x[256], out[256];
  for (int i = 0; i < 256; i++) x[i] = (float)i;
  cg_cu_deviceptr dx = t_upload(x, sizeof x), dout = t_upload(NULL, sizeof out);
  void *params[] = {&dx, &dout};
  CHECK_STR(run(t_function(m, "reverse_racy"), 1, 256, params), "");
  t_download(out, dout, sizeof out);
  int wrong = 0;
  for (int i = 0; i < 256; i++) wrong += out[i] != x[255 - i];
  CHECK_EQ_INT(wrong, 128); /* threads 0..127 read what 128..255 had not written yet */
  t_emu_close();
}

int main(void) {
  t_emu_open(80, true, 64 << 20);
  test_reverse();
  test_atomics();
  test_clean_kernels();
  t_emu_close();
  test_without_racecheck();
  return check_done();
}
