/* tests/unit/test_cuda_nvrtc.c — codegen/nvrtc.c with the real NVRTC.
 *
 * Skipped (exit 77) when libnvrtc cannot be loaded. Otherwise:
 *   - every kernel of the tests/cuda .cu files compiles for sm_80 and sm_90, ptxas
 *     reports it (each TGC_REGISTER'd name has a resource line) with a
 *     register count and 0 bytes of spills; the table is printed;
 *   - the cache: a second compile of the same source compiles nothing (the
 *     compile counter stays at 1, the result says cached and is the same
 *     image), a corrupted entry is recompiled (counted corrupt);
 *   - a failing source: the error names the first compiler error and the
 *     files where the source and the log were kept (their contents
 *     checked); ptxas's refusal of too much static shared memory (which
 *     NVRTC's log does not spell out) is named from the resource lines;
 *   - architectures NVRTC does not know are refused by name. */
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "codegen.h"
#include "rt_cuda.h"

static char tmp[256];

static char *read_text(const char *path) {
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

/* Every name in TGC_REGISTER(name) of a source, in order. */
static int registered_kernels(const char *src, char names[][64], int max) {
  int n = 0;
  for (const char *p = strstr(src, "\nTGC_REGISTER("); p && n < max; p = strstr(p + 1, "\nTGC_REGISTER(")) {
    const char *s = p + 14, *e = strchr(s, ')');
    if (!e || e - s >= 64) break;
    memcpy(names[n], s, (size_t)(e - s));
    names[n][e - s] = 0;
    n++;
  }
  return n;
}

static void test_all_kernels(const cg_cuda_api *api, cg_cache *cache) {
  DIR *d = opendir("tests/cuda");
  CHECK(d != NULL);
  if (!d) return;
  char files[32][128];  /* names of up to 127 bytes */
  int nfiles = 0;
  struct dirent *e;
  while ((e = readdir(d)) && nfiles < 32) {
    size_t len = strlen(e->d_name);
    if (len > 3 && len < 128 && strcmp(e->d_name + len - 3, ".cu") == 0) memcpy(files[nfiles++], e->d_name, len + 1);
  }
  closedir(d);
  CHECK(nfiles >= 4);
  printf("%-28s %-6s %5s %9s %6s %7s\n", "kernel", "arch", "regs", "smem", "stack", "spills");
  const char *archs[] = {"sm_80", "sm_90"};
  for (int f = 0; f < nfiles; f++) {
    char path[4200];
    snprintf(path, sizeof path, "tests/cuda/%s", files[f]);
    char *src = read_text(path);
    CHECK(src != NULL);
    if (!src) continue;
    char names[64][64];
    int nnames = registered_kernels(src, names, 64);
    CHECK(nnames > 0);
    for (int a = 0; a < 2; a++) {
      cg_cuda_source s = {files[f], src, archs[a], NULL, 0};
      cg_cuda_binary b;
      char err[4096];
      int rc = cg_nvrtc_compile(api, cache, &s, &b, err, sizeof err);
      if (rc != 0) fprintf(stderr, "%s for %s: %s\n", files[f], archs[a], err);
      CHECK_EQ_INT(rc, 0);
      if (rc != 0) continue;
      CHECK(b.image_size > 0 && b.ptx_size > 0);
      CHECK_EQ_INT(b.nkernels, nnames);
      for (int k = 0; k < nnames; k++) {
        const cg_kernel_info *ki = cg_cuda_binary_kernel(&b, names[k]);
        CHECK(ki != NULL);
        if (!ki) {
          fprintf(stderr, "no ptxas line for %s (%s)\n", names[k], archs[a]);
          continue;
        }
        CHECK_STR(ki->arch, archs[a]);
        CHECK(ki->registers > 0);
        CHECK_EQ_INT(ki->spill_store_bytes, 0);
        CHECK_EQ_INT(ki->spill_load_bytes, 0);
        printf("%-28s %-6s %5d %9lld %6lld %7lld\n", ki->name, ki->arch, ki->registers, ki->smem_bytes,
               ki->stack_bytes, ki->spill_store_bytes + ki->spill_load_bytes);
      }
      cg_cuda_binary_free(&b);
    }
    free(src);
  }
}

static const char *small_source =
    "#include \"tgc_cuda.h\"\n"
    "extern \"C\" __global__ void scale(float *x, float a, int n) {\n"
    "  TGC_GRID_STRIDE_LOOP(i, n) x[i] *= a;\n"
    "}\n"
    "TGC_REGISTER(scale)\n";

static void test_cache_counts(const cg_cuda_api *api) {
  char dir[300], err[4096];
  snprintf(dir, sizeof dir, "%s/cache", tmp);
  cg_cache *cache = cg_cache_open(dir, err, sizeof err);
  CHECK(cache != NULL);
  if (!cache) return;
  cg_cache_stats *st = cg_cache_stats_of(cache);
  cg_cuda_source s = {"small.cu", small_source, "sm_80", NULL, 0};
  cg_cuda_binary first, second, third;
  CHECK_EQ_INT(cg_nvrtc_compile(api, cache, &s, &first, err, sizeof err), 0);
  CHECK_EQ_INT(st->compiles, 1);
  CHECK(!first.cached);
  CHECK_EQ_INT(cg_nvrtc_compile(api, cache, &s, &second, err, sizeof err), 0);
  CHECK_EQ_INT(st->compiles, 1); /* the second compile compiled nothing */
  CHECK_EQ_INT(st->hits, 1);
  CHECK(second.cached);
  CHECK(second.image_size == first.image_size && memcmp(second.image, first.image, first.image_size) == 0);
  CHECK_STR(second.ptx, first.ptx);
  CHECK_EQ_INT(second.nkernels, 1);
  CHECK_EQ_INT(second.kernels[0].registers, first.kernels[0].registers);
  /* a different option is a different entry */
  const char *opt[] = {"-DUNUSED=1"};
  cg_cuda_source s2 = {"small.cu", small_source, "sm_80", opt, 1};
  CHECK_EQ_INT(cg_nvrtc_compile(api, cache, &s2, &third, err, sizeof err), 0);
  CHECK_EQ_INT(st->compiles, 2);
  cg_cuda_binary_free(&third);
  /* corrupt the first entry: recompiled, not trusted */
  char path[4096];
  cg_cache_entry_path(cache, &first.key, path, sizeof path);
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 300, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
  }
  CHECK_EQ_INT(cg_nvrtc_compile(api, cache, &s, &third, err, sizeof err), 0);
  CHECK_EQ_INT(st->corrupt, 1);
  CHECK_EQ_INT(st->compiles, 3);
  CHECK(!third.cached);
  CHECK(third.image_size == first.image_size && memcmp(third.image, first.image, first.image_size) == 0);
  cg_cuda_binary_free(&first);
  cg_cuda_binary_free(&second);
  cg_cuda_binary_free(&third);
  cg_cache_free(cache);
}

static void test_failures(const cg_cuda_api *api) {
  char dir[300], err[4096], want[4096];
  snprintf(dir, sizeof dir, "%s/fail-cache", tmp);
  cg_cache *cache = cg_cache_open(dir, err, sizeof err);
  if (!cache) return;
  const char *bad =
      "#include \"tgc_cuda.h\"\n"
      "extern \"C\" __global__ void broken(float *x) {\n"
      "  x[0] = undefined_name;\n"
      "}\n";
  cg_cuda_source s = {"gen/broken.cu", bad, "sm_90", NULL, 0};
  cg_cuda_binary b;
  CHECK_EQ_INT(cg_nvrtc_compile(api, cache, &s, &b, err, sizeof err), -1);
  char hex[65];
  cg_hash_hex(&b.key, hex);
  snprintf(want, sizeof want,
           "NVRTC could not compile gen/broken.cu for sm_90 (a tgc code generator bug): gen/broken.cu(3): error: "
           "identifier \"undefined_name\" is undefined; source kept in %s/failed/gen_broken-%.8s.cu, log in "
           "%s/failed/gen_broken-%.8s.log",
           dir, hex, dir, hex);
  CHECK_STR(err, want);
  char path[600];
  snprintf(path, sizeof path, "%s/failed/gen_broken-%.8s.cu", dir, hex);
  char *kept = read_text(path);
  CHECK(kept && strcmp(kept, bad) == 0);
  free(kept);
  snprintf(path, sizeof path, "%s/failed/gen_broken-%.8s.log", dir, hex);
  kept = read_text(path);
  CHECK(kept && strstr(kept, "undefined_name"));
  free(kept);
  CHECK_EQ_INT(cg_cache_stats_of(cache)->stores, 0);

  /* ptxas refuses 48 KiB + 4 bytes of static shared memory */
  const char *big =
      "#include \"tgc_cuda.h\"\n"
      "extern \"C\" __global__ void big(float *x) {\n"
      "  TGC_SHARED(float, s, 12289);\n"
      "  s[threadIdx.x] = x[threadIdx.x];\n"
      "  __syncthreads();\n"
      "  x[threadIdx.x] = s[12288 - threadIdx.x];\n"
      "}\n"
      "TGC_REGISTER(big)\n";
  cg_cuda_source s2 = {"big.cu", big, "sm_80", NULL, 0};
  CHECK_EQ_INT(cg_nvrtc_compile(api, cache, &s2, &b, err, sizeof err), -1);
  const char *want_big =
      "NVRTC could not compile big.cu for sm_80 (a tgc code generator bug): kernel big uses 49156 bytes of static "
      "shared memory, more than ptxas allows (49152); source kept in ";
  CHECK(strncmp(err, want_big, strlen(want_big)) == 0);
  if (strncmp(err, want_big, strlen(want_big)) != 0) fprintf(stderr, "got: %s\n", err);

  /* architectures */
  cg_cuda_source s3 = {"small.cu", small_source, "gfx90a", NULL, 0};
  CHECK_EQ_INT(cg_nvrtc_compile(api, cache, &s3, &b, err, sizeof err), -1);
  CHECK_STR(err, "bad CUDA architecture 'gfx90a' (expected sm_XY, e.g. sm_80 or sm_90)");
  s3.arch = "sm_20";
  CHECK_EQ_INT(cg_nvrtc_compile(api, cache, &s3, &b, err, sizeof err), -1);
  int major = 0, minor = 0;
  api->nvrtcVersion(&major, &minor);
  snprintf(want, sizeof want, "NVRTC %d.%d cannot compile for sm_20 (it supports sm_", major, minor);
  CHECK(strncmp(err, want, strlen(want)) == 0);
  cg_cache_free(cache);
}

int main(void) {
  cg_cuda_api api;
  memset(&api, 0, sizeof api);
  char err[1024];
  if (rt_cuda_load(&api, CG_CUDA_LIB_NVRTC, err, sizeof err) != 0) {
    printf("SKIP: %s (these checks need the CUDA toolkit's NVRTC)\n", err);
    return 77;
  }
  snprintf(tmp, sizeof tmp, "/tmp/tgc-nvrtc-XXXXXX");
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 2;
  }
  cg_cache *cache = cg_cache_open(NULL, err, sizeof err); /* the build tree's (TGC_CACHE_DIR) */
  test_all_kernels(&api, cache);
  cg_cache_free(cache);
  test_cache_counts(&api);
  test_failures(&api);
  rt_cuda_unload(&api);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  return check_done();
}
