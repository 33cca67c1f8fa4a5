/* tests/unit/testcuda.h — what the cuda-emu tests share: the emulator's
 * table opened on its device, compiling a tests/cuda file through the
 * table's NVRTC (cached in $TGC_CACHE_DIR, the build tree's under CTest),
 * loading it, device buffers, launches, and checked calls that print the
 * one-line message of a failure. Include after check.h. */
#ifndef TGC_TESTCUDA_H
#define TGC_TESTCUDA_H

#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "rt_cuda.h"

static cg_cuda_api T_api;
static rt_cuda_device T_dev;
static cg_cache *T_cache;
static char T_err[4096];

/* A call of the table that must succeed: prints the check line if not. */
#define TCU(fn, ...)                                                                    \
  do {                                                                                  \
    int t_rc_ = CG_CU(&T_api, NULL, T_err, sizeof T_err, fn, __VA_ARGS__);              \
    if (t_rc_) fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, T_err);               \
    CHECK(t_rc_ == 0);                                                                  \
  } while (0)

/* The emulator as the table, on its device 0 (arch 80 or 90). Exits the
 * test on failure: nothing else can run. */
static inline void t_emu_open(int arch, bool racecheck, size_t device_bytes) {
  rt_cuda_emu_config cfg;
  if (rt_cuda_emu_config_init(&cfg, T_err, sizeof T_err) != 0) {
    fprintf(stderr, "%s\n", T_err);
    exit(1);
  }
  cfg.arch = arch, cfg.racecheck = racecheck;
  if (device_bytes) cfg.device_bytes = device_bytes;
  if (rt_cuda_emu_load(&T_api, &cfg, T_err, sizeof T_err) != 0 ||
      rt_cuda_open_device(&T_api, 0, &T_dev, T_err, sizeof T_err) != 0) {
    fprintf(stderr, "cannot open the emulator: %s\n", T_err);
    exit(1);
  }
  if (!T_cache) T_cache = cg_cache_open(NULL, T_err, sizeof T_err);
}

static inline void t_emu_close(void) {
  rt_cuda_close_device(&T_api, &T_dev);
  rt_cuda_emu_shutdown();
  cg_cache_free(T_cache);
  T_cache = NULL;
}

static inline char *t_read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) == (size_t)n) s[n] = 0;
  else {
    free(s);
    s = NULL;
  }
  fclose(f);
  return s;
}

/* Compiles source (named name) for the device's arch and loads it. */
static inline cg_cu_module t_load_source(const char *name, const char *source) {
  cg_cuda_source src = {name, source, T_dev.arch, NULL, 0};
  cg_cuda_binary bin;
  if (cg_nvrtc_compile(&T_api, T_cache, &src, &bin, T_err, sizeof T_err) != 0) {
    fprintf(stderr, "%s\n", T_err);
    CHECK(0);
    return NULL;
  }
  cg_cu_module m = NULL;
  TCU(cuModuleLoadData, &m, bin.image);
  cg_cuda_binary_free(&bin);
  return m;
}

/* Compiles and loads tests/cuda/<file>. */
static inline cg_cu_module t_load_file(const char *file) {
  char path[256];
  snprintf(path, sizeof path, "tests/cuda/%s", file);
  char *text = t_read_text(path);
  CHECK(text != NULL);
  if (!text) return NULL;
  cg_cu_module m = t_load_source(file, text);
  free(text);
  return m;
}

static inline cg_cu_function t_function(cg_cu_module m, const char *name) {
  cg_cu_function f = NULL;
  if (m) TCU(cuModuleGetFunction, &f, m, name);
  return f;
}

/* Device memory holding a copy of host (or zeros when host is NULL). */
static inline cg_cu_deviceptr t_upload(const void *host, size_t bytes) {
  cg_cu_deviceptr p = 0;
  TCU(cuMemAlloc, &p, bytes);
  if (host) TCU(cuMemcpyHtoD, p, host, bytes);
  else TCU(cuMemsetD8, p, 0, bytes);
  return p;
}

static inline void t_download(void *host, cg_cu_deviceptr p, size_t bytes) { TCU(cuMemcpyDtoH, host, p, bytes); }

/* Compares n floats with |got - want| <= tol * max(1, |want|); prints the
 * first mismatches and the largest error. Returns the mismatch count. */
static inline int t_compare(const char *what, const float *got, const double *want, int n, double tol) {
  int bad = 0;
  double worst = 0;
  for (int i = 0; i < n; i++) {
    double scale = fabs(want[i]) > 1 ? fabs(want[i]) : 1;
    double err = fabs((double)got[i] - want[i]) / scale;
    if (!(err <= tol)) {
      if (bad < 5) fprintf(stderr, "  %s[%d] = %.9g, want %.9g\n", what, i, got[i], want[i]);
      bad++;
    }
    if (err > worst || err != err) worst = err;
  }
  if (bad) fprintf(stderr, "  %s: %d of %d differ (tolerance %g), largest error %g\n", what, bad, n, tol, worst);
  return bad;
}

#endif
