/* tests/unit/test_cuda_loader.c — runtime/cuda/loader.c and the checks of
 * runtime/cudaapi/cuda_api.c.
 *
 *   - the exact messages when a library is missing: TGC_CUDA_LIB_PATH
 *     pointed at an empty directory for all three, and libcuda.so.1 for
 *     real (this machine has no driver; on one that has, that check says so
 *     and is skipped);
 *   - a library that is not ELF, a library without the needed symbols, and
 *     the choice of the highest libnvrtc.so.N in a directory;
 *   - the real NVRTC and cuBLASLt load when the toolkit is installed (every
 *     table entry resolved, their versions answer), else skipped with a note;
 *   - the driver-version check and the one-line format of failed calls.
 * Every message is compared byte for byte. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "rt_cuda.h"

static char tmp[256];

static const char *path_in(const char *dir, const char *name) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/%s/%s", tmp, dir, name);
  return buf;
}

static void make_dir(const char *dir) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", tmp, dir);
  mkdir(p, 0755);
}

/* Loads libs with TGC_CUDA_LIB_PATH = tmp/dir; returns rc and the message. */
static int load_from(const char *dir, unsigned libs, cg_cuda_api *api, char *err, size_t errlen) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", tmp, dir);
  setenv("TGC_CUDA_LIB_PATH", p, 1);
  memset(api, 0, sizeof *api);
  err[0] = 0;
  int rc = rt_cuda_load(api, libs, err, errlen);
  unsetenv("TGC_CUDA_LIB_PATH");
  return rc;
}

/* Where the real NVRTC lives, found through the loader itself. */
static int real_nvrtc_path(char *out, size_t len) {
  static const char *const dirs[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib", NULL};
  const char *home = getenv("CUDA_HOME");
  char p[512];
  for (int i = -1; i < 2; i++) {
    const char *d = i < 0 ? home : dirs[i];
    if (!d) continue;
    for (int v = 20; v >= 11; v--) {
      snprintf(p, sizeof p, "%s/libnvrtc.so.%d", d, v);
      if (access(p, R_OK) == 0) {
        snprintf(out, len, "%s", p);
        return 1;
      }
    }
  }
  return 0;
}

static void test_missing_libraries(void) {
  char err[1024], want[1024];
  cg_cuda_api api;
  make_dir("empty");
  CHECK_EQ_INT(load_from("empty", CG_CUDA_LIB_DRIVER, &api, err, sizeof err), -1);
  CHECK_STR(err, "no CUDA driver: libcuda.so.1 not found");
  CHECK_EQ_INT(load_from("empty", CG_CUDA_LIB_NVRTC, &api, err, sizeof err), -1);
  snprintf(want, sizeof want, "no NVRTC: libnvrtc.so not found (searched %s/empty)", tmp);
  CHECK_STR(err, want);
  CHECK_EQ_INT(load_from("empty", CG_CUDA_LIB_CUBLASLT, &api, err, sizeof err), -1);
  snprintf(want, sizeof want, "no cuBLASLt: libcublasLt.so not found (searched %s/empty)", tmp);
  CHECK_STR(err, want);
  CHECK_EQ_INT(api.libs, 0);

  /* the real search: this machine has no NVIDIA driver */
  memset(&api, 0, sizeof api);
  if (rt_cuda_load(&api, CG_CUDA_LIB_DRIVER, err, sizeof err) != 0) {
    CHECK_STR(err, "no CUDA driver: libcuda.so.1 not found");
  } else {
    printf("note: this machine has a CUDA driver; the real 'not found' check is skipped\n");
    rt_cuda_unload(&api);
  }
}

static void test_bad_libraries(void) {
  char err[1024], want[1024], nvrtc[512];
  cg_cuda_api api;
  /* not an ELF file */
  make_dir("junk");
  FILE *f = fopen(path_in("junk", "libnvrtc.so.13"), "w");
  fputs("not a library\n", f);
  fclose(f);
  CHECK_EQ_INT(load_from("junk", CG_CUDA_LIB_NVRTC, &api, err, sizeof err), -1);
  snprintf(want, sizeof want, "no NVRTC: libnvrtc.so does not load: %s", path_in("junk", "libnvrtc.so.13"));
  CHECK(strncmp(err, want, strlen(want)) == 0);
  if (strncmp(err, want, strlen(want)) != 0) fprintf(stderr, "  got: %s\n", err);

  if (!real_nvrtc_path(nvrtc, sizeof nvrtc)) {
    printf("note: no libnvrtc.so.N installed; version choice and symbol checks skipped\n");
    return;
  }
  /* the highest version wins: .9 is junk, .13 the real one */
  make_dir("versions");
  f = fopen(path_in("versions", "libnvrtc.so.9"), "w");
  fputs("junk\n", f);
  fclose(f);
  CHECK(symlink(nvrtc, path_in("versions", "libnvrtc.so.13")) == 0);
  CHECK_EQ_INT(load_from("versions", CG_CUDA_LIB_NVRTC, &api, err, sizeof err), 0);
  CHECK_EQ_INT(api.libs, CG_CUDA_LIB_NVRTC);
  rt_cuda_unload(&api);

  /* a library of the right name without the entry points */
  make_dir("wrong");
  CHECK(symlink(nvrtc, path_in("wrong", "libcublasLt.so.13")) == 0);
  CHECK_EQ_INT(load_from("wrong", CG_CUDA_LIB_CUBLASLT, &api, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s has no cublasLtGetVersion: the cuBLASLt is too old for tgc",
           path_in("wrong", "libcublasLt.so.13"));
  CHECK_STR(err, want);
}

static void test_real_libraries(void) {
  char err[1024];
  cg_cuda_api api;
  memset(&api, 0, sizeof api);
  if (rt_cuda_load(&api, CG_CUDA_LIB_NVRTC, err, sizeof err) != 0) {
    printf("note: %s; the real NVRTC checks are skipped\n", err);
  } else {
    int major = 0, minor = 0;
    CHECK_EQ_INT(api.nvrtcVersion(&major, &minor), CG_NVRTC_SUCCESS);
    CHECK(major >= 11);
    int entries = 0, filled = 0;
#define CG_CUDA_FN(lib, name, symbol, fallback, ret, params) \
  if (CG_CUDA_LIB_##lib == CG_CUDA_LIB_NVRTC) entries++, filled += api.name != NULL;
#include "cuda_api.def"
#undef CG_CUDA_FN
    CHECK_EQ_INT(filled, entries);
    CHECK_STR(api.nvrtcGetErrorString(CG_NVRTC_ERROR_COMPILATION), "NVRTC_ERROR_COMPILATION");
    printf("NVRTC %d.%d: %d entry points\n", major, minor, entries);
  }
  if (rt_cuda_load(&api, CG_CUDA_LIB_CUBLASLT, err, sizeof err) != 0) {
    printf("note: %s; the real cuBLASLt checks are skipped\n", err);
  } else {
    CHECK(api.cublasLtGetVersion() >= 110000);
    CHECK_STR(api.cublasLtGetStatusName(CG_CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
    printf("cuBLASLt %zu\n", api.cublasLtGetVersion());
  }
  rt_cuda_unload(&api);
  CHECK_EQ_INT(api.libs, 0);
}

static void test_versions_and_checks(void) {
  char err[512];
  CHECK_EQ_INT(rt_cuda_check_driver_version(12040, 13, 0, err, sizeof err), -1);
  CHECK_STR(err, "CUDA driver too old: it supports CUDA 12.4, but NVRTC 13.0 needs a driver for CUDA 13.0 or newer");
  CHECK_EQ_INT(rt_cuda_check_driver_version(13000, 13, 0, err, sizeof err), 0);
  CHECK_EQ_INT(rt_cuda_check_driver_version(13020, 13, 0, err, sizeof err), 0);
  CHECK_EQ_INT(rt_cuda_check_driver_version(12020, 12, 8, err, sizeof err), 0);

  cg_cuda_api api;
  memset(&api, 0, sizeof api);
  rt_cuda_device dev;
  CHECK_EQ_INT(rt_cuda_open_device(&api, 0, &dev, err, sizeof err), -1);
  CHECK_STR(err, "no CUDA driver loaded");

  /* failed calls, from tgc's own tables (no library loaded) */
  CHECK_EQ_INT(cg_cu_check(&api, CG_CUDA_SUCCESS, "cuInit", NULL, err, sizeof err), 0);
  CHECK_EQ_INT(cg_cu_check(&api, CG_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc", "the arena of %x", err, sizeof err), -1);
  CHECK_STR(err, "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory) [the arena of %x]");
  cg_cu_check(&api, 12345, "cuInit", "", err, sizeof err);
  CHECK_STR(err, "cuInit: error 12345 (no description)");
  cg_nvrtc_check(&api, CG_NVRTC_ERROR_INVALID_OPTION, "nvrtcCompileProgram", "k.cu", err, sizeof err);
  CHECK_STR(err, "nvrtcCompileProgram: NVRTC_ERROR_INVALID_OPTION (invalid compile option) [k.cu]");
  cg_cublas_check(&api, CG_CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul", "%y = matmul (m.tg:3)", err, sizeof err);
  CHECK_STR(err,
            "cublasLtMatmul: CUBLAS_STATUS_INVALID_VALUE (an invalid numeric value was used as an argument) "
            "[%y = matmul (m.tg:3)]");
  char text[32];
  cg_cuda_version_text(12090, text, sizeof text);
  CHECK_STR(text, "CUDA 12.9");
}

int main(void) {
  snprintf(tmp, sizeof tmp, "/tmp/tgc-loader-XXXXXX");
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 2;
  }
  test_missing_libraries();
  test_bad_libraries();
  test_real_libraries();
  test_versions_and_checks();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  return check_done();
}
