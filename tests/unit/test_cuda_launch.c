/* tests/unit/test_cuda_launch.c — the checks a GPU makes at launch, and
 * kernel faults, in cuda-emu (tests/cuda/launch.cu). Every failure is
 * compared with its exact one-line message (call, CUDA error, detail).
 *
 *   block dims (each <= 1024 x 1024 x 64, product <= 1024), grid dims
 *   (<= 2^31-1 x 65535 x 65535), static + dynamic shared memory against
 *   48 KiB, the opt-in through cuFuncSetAttribute up to 163 KiB on sm_80
 *   and 227 KiB on sm_90 (runs and gives the right answer there), missing
 *   params, the 'extra' form;
 *   faults, sticky until cuDevicePrimaryCtxReset as on a GPU: a misaligned
 *   float4 load (CUDA_ERROR_MISALIGNED_ADDRESS), a deadlock (a shuffle one
 *   thread waits in while its warp waits at __syncthreads);
 *   modules: an image for a newer arch (CUDA_ERROR_NO_BINARY_FOR_GPU), a GPU
 *   cubin, more than 48 KiB of static shared memory refused at compile time,
 *   a compile error naming the file and line;
 *   in sanitizer builds: a kernel reading past its device allocation is an
 *   AddressSanitizer report (run in a child: ASan ends the process). */
#include <math.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "testcuda.h"

/* Runs a failing call and compares its check line. */
#define EXPECT_FAIL(want, fn, ...)                                                      \
  do {                                                                                  \
    CHECK(CG_CU(&T_api, NULL, T_err, sizeof T_err, fn, __VA_ARGS__) == -1);             \
    CHECK_STR(T_err, want);                                                             \
  } while (0)

static void test_dimensions(cg_cu_module m) {
  cg_cu_function f = t_function(m, "dynamic_reverse");
  cg_cu_deviceptr out = t_upload(NULL, 4096);
  int n = 16;
  void *params[] = {&out, &n};
  const char *dims = "cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument): dynamic_reverse: block %u x %u x %u "
                     "(each at least 1, at most 1024 x 1024 x 64)";
  char want[512];
  unsigned int bad_blocks[][3] = {{1025, 1, 1}, {1, 1025, 1}, {1, 1, 65}, {0, 1, 1}};
  for (int i = 0; i < 4; i++) {
    snprintf(want, sizeof want, dims, bad_blocks[i][0], bad_blocks[i][1], bad_blocks[i][2]);
    EXPECT_FAIL(want, cuLaunchKernel, f, 1, 1, 1, bad_blocks[i][0], bad_blocks[i][1], bad_blocks[i][2], 0, NULL,
                params, NULL);
  }
  EXPECT_FAIL("cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument): dynamic_reverse: block 32 x 32 x 2 is "
              "2048 threads, more than 1024",
              cuLaunchKernel, f, 1, 1, 1, 32, 32, 2, 0, NULL, params, NULL);
  const char *grid = "cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument): dynamic_reverse: grid %u x %u x %u "
                     "(each at least 1, at most 2147483647 x 65535 x 65535)";
  unsigned int bad_grids[][3] = {{1, 65536, 1}, {1, 1, 65536}, {0, 1, 1}, {2147483648u, 1, 1}};
  for (int i = 0; i < 4; i++) {
    snprintf(want, sizeof want, grid, bad_grids[i][0], bad_grids[i][1], bad_grids[i][2]);
    EXPECT_FAIL(want, cuLaunchKernel, f, bad_grids[i][0], bad_grids[i][1], bad_grids[i][2], 32, 1, 1, 0, NULL, params,
                NULL);
  }
  /* the limits themselves launch (grid 65535 in y: blocks of one thread) */
  TCU(cuLaunchKernel, f, 1, 1, 1, 1024, 1, 1, 64, NULL, params, NULL);
  TCU(cuLaunchKernel, f, 1, 1, 1, 1, 1, 64, 64, NULL, params, NULL);
  EXPECT_FAIL("cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument): dynamic_reverse takes 2 parameters, "
              "kernelParams is NULL",
              cuLaunchKernel, f, 1, 1, 1, 32, 1, 1, 64, NULL, NULL, NULL);
  void *extra[] = {NULL};
  EXPECT_FAIL("cuLaunchKernel: CUDA_ERROR_NOT_SUPPORTED (operation not supported): dynamic_reverse: the 'extra' form "
              "of parameters is not emulated",
              cuLaunchKernel, f, 1, 1, 1, 32, 1, 1, 64, NULL, params, extra);
  TCU(cuMemFree, out);
}

/* dynamic_reverse over n floats of dynamic shared memory: out = n-1 .. 0 */
static void run_reverse(cg_cu_function f, int n) {
  cg_cu_deviceptr out = t_upload(NULL, (size_t)n * 4);
  void *params[] = {&out, &n};
  TCU(cuLaunchKernel, f, 1, 1, 1, 256, 1, 1, (unsigned int)n * 4, NULL, params, NULL);
  float *h = malloc((size_t)n * 4);
  t_download(h, out, (size_t)n * 4);
  int bad = 0;
  for (int i = 0; i < n; i++) bad += h[i] != (float)(n - 1 - i);
  CHECK_EQ_INT(bad, 0);
  free(h);
  TCU(cuMemFree, out);
}

static void test_shared_memory_sm80(cg_cu_module m) {
  cg_cu_function f = t_function(m, "dynamic_reverse");
  int n = 12289; /* 49156 bytes */
  cg_cu_deviceptr out = t_upload(NULL, 65536);
  void *params[] = {&out, &n};
  EXPECT_FAIL("cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument): dynamic_reverse: 49156 bytes of dynamic "
              "shared memory, more than the 49152 it may use (0 static of 49152 without the opt-in; "
              "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) allows up to 166912 in all on "
              "sm_80)",
              cuLaunchKernel, f, 1, 1, 1, 256, 1, 1, 49156, NULL, params, NULL);
  run_reverse(f, 12288); /* exactly 48 KiB */
  int v = 0;
  TCU(cuFuncGetAttribute, &v, CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f);
  CHECK_EQ_INT(v, 49152);
  /* the opt-in */
  TCU(cuFuncSetAttribute, f, CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 166912);
  TCU(cuFuncGetAttribute, &v, CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f);
  CHECK_EQ_INT(v, 166912);
  run_reverse(f, 166912 / 4);
  EXPECT_FAIL("cuFuncSetAttribute: CUDA_ERROR_INVALID_VALUE (invalid argument): dynamic_reverse: 166913 bytes of "
              "dynamic shared memory and 0 static are more than sm_80 allows a block (166912)",
              cuFuncSetAttribute, f, CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 166913);

  /* 40 KiB static: 8 KiB of dynamic without the opt-in */
  cg_cu_function s = t_function(m, "static_40k");
  TCU(cuFuncGetAttribute, &v, CG_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, s);
  CHECK_EQ_INT(v, 40960);
  void *p40[] = {&out};
  TCU(cuLaunchKernel, s, 1, 1, 1, 1024, 1, 1, 8192, NULL, p40, NULL);
  float h[1024];
  t_download(h, out, sizeof h);
  int bad = 0;
  for (int i = 0; i < 1024; i++) bad += h[i] != (float)(10239 - i);
  CHECK_EQ_INT(bad, 0);
  EXPECT_FAIL("cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument): static_40k: 8193 bytes of dynamic shared "
              "memory, more than the 8192 it may use (40960 static of 49152 without the opt-in; "
              "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) allows up to 166912 in all on "
              "sm_80)",
              cuLaunchKernel, s, 1, 1, 1, 1024, 1, 1, 8193, NULL, p40, NULL);
  EXPECT_FAIL("cuFuncSetAttribute: CUDA_ERROR_INVALID_VALUE (invalid argument): static_40k: 125953 bytes of dynamic "
              "shared memory and 40960 static are more than sm_80 allows a block (166912)",
              cuFuncSetAttribute, s, CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 125953);
  TCU(cuFuncSetAttribute, s, CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 125952);
  TCU(cuLaunchKernel, s, 1, 1, 1, 1024, 1, 1, 125952, NULL, p40, NULL);
  EXPECT_FAIL("cuFuncGetAttribute: CUDA_ERROR_NOT_SUPPORTED (operation not supported): registers are not emulated "
              "(the ptxas lines of a real compile have them)",
              cuFuncGetAttribute, &v, CG_CU_FUNC_ATTRIBUTE_NUM_REGS, s);
  TCU(cuMemFree, out);
}

static void test_faults(void) {
  cg_cu_module m = t_load_file("launch.cu");
  cg_cu_deviceptr x = t_upload(NULL, 4096), out = t_upload(NULL, 4096);
  /* a float4 load at x + 4 bytes: the launch succeeds, the fault is sticky */
  int offset = 1;
  void *params[] = {&x, &out, &offset};
  TCU(cuLaunchKernel, t_function(m, "load4"), 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
  char want[512];
  snprintf(want, sizeof want,
           "cuCtxSynchronize: CUDA_ERROR_MISALIGNED_ADDRESS (misaligned address): kernel load4 block (0,0,0) thread "
           "(0,0,0): tgc_load_float4: 16-byte access at %p is misaligned",
           (void *)(uintptr_t)(x + 4));
  EXPECT_FAIL(want, cuCtxSynchronize, );
  cg_cu_deviceptr y;
  snprintf(want, sizeof want,
           "cuMemAlloc: CUDA_ERROR_MISALIGNED_ADDRESS (misaligned address): kernel load4 block (0,0,0) thread "
           "(0,0,0): tgc_load_float4: 16-byte access at %p is misaligned",
           (void *)(uintptr_t)(x + 4));
  EXPECT_FAIL(want, cuMemAlloc, &y, 16);
  /* reset: a fresh context */
  TCU(cuDevicePrimaryCtxReset, T_dev.device);
  m = t_load_file("launch.cu");
  float ones[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  x = t_upload(ones, sizeof ones), out = t_upload(NULL, 32 * 4);
  offset = 4;
  TCU(cuLaunchKernel, t_function(m, "load4"), 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
  float h[32];
  t_download(h, out, sizeof h);
  CHECK(h[0] == 26.0f && h[31] == 26.0f);

  /* a deadlock */
  void *dl_params[] = {&out};
  TCU(cuLaunchKernel, t_function(m, "deadlock"), 1, 1, 1, 32, 1, 1, 0, NULL, dl_params, NULL);
  EXPECT_FAIL("cuStreamSynchronize: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure): kernel deadlock block "
              "(0,0,0): deadlock: 31 threads wait in __syncthreads (first: thread (1,0,0)); 1 thread waits in a warp "
              "collective (first: thread (0,0,0) in __shfl_sync, mask 0xffffffff); every thread of a block must reach "
              "each barrier, every lane of a mask each warp collective",
              cuStreamSynchronize, NULL);
  TCU(cuDevicePrimaryCtxReset, T_dev.device);
}

static const char *big_source =
    "#include \"tgc_cuda.h\"\n"
    "extern \"C\" __global__ void big(float *x) {\n"
    "  TGC_SHARED(float, s, 12289);\n"
    "  s[threadIdx.x] = x[threadIdx.x];\n"
    "  __syncthreads();\n"
    "  x[threadIdx.x] = s[12288 - threadIdx.x];\n"
    "}\n"
    "TGC_REGISTER(big)\n";

static void test_modules(void) {
  /* compiled for sm_90: the emulated sm_80 has no binary for it */
  char *text = t_read_text("tests/cuda/warp.cu");
  cg_cuda_source src = {"warp.cu", text, "sm_90", NULL, 0};
  cg_cuda_binary bin;
  CHECK_EQ_INT(cg_nvrtc_compile(&T_api, T_cache, &src, &bin, T_err, sizeof T_err), 0);
  cg_cu_module m;
  EXPECT_FAIL("cuModuleLoadData: CUDA_ERROR_NO_BINARY_FOR_GPU (no kernel image is available for execution on the "
              "device): module compiled for sm_90 cannot run on the emulated sm_80",
              cuModuleLoadData, &m, bin.image);
  cg_cuda_binary_free(&bin);
  free(text);
  unsigned char elf[64] = {0x7f, 'E', 'L', 'F'};
  EXPECT_FAIL("cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid): a GPU binary cannot run in "
              "cuda-emu: compile with the emulator's NVRTC",
              cuModuleLoadData, &m, elf);
  m = t_load_file("launch.cu");
  cg_cu_function f;
  EXPECT_FAIL("cuModuleGetFunction: CUDA_ERROR_NOT_FOUND (named symbol not found): the module has no kernel nope (is it "
              "TGC_REGISTER'ed?)",
              cuModuleGetFunction, &f, m, "nope");
  TCU(cuModuleUnload, m);
  EXPECT_FAIL("cuModuleUnload: CUDA_ERROR_INVALID_HANDLE (invalid resource handle): not a loaded module", cuModuleUnload,
              m);

  /* what ptxas refuses, the emulator's compiler refuses too */
  cg_cuda_source big = {"big.cu", big_source, "sm_80", NULL, 0};
  CHECK_EQ_INT(cg_nvrtc_compile(&T_api, T_cache, &big, &bin, T_err, sizeof T_err), -1);
  const char *want_big = "NVRTC could not compile big.cu for sm_80 (a tgc code generator bug): ptxas error   : Entry "
                         "function 'big' uses too much shared data (0xc004 bytes, 0xc000 max); source kept in ";
  CHECK(strncmp(T_err, want_big, strlen(want_big)) == 0);
  if (strncmp(T_err, want_big, strlen(want_big)) != 0) fprintf(stderr, "  got: %s\n", T_err);
  /* a compile error names the file and line */
  cg_cuda_source broken = {"gen/broken.cu",
                           "#include \"tgc_cuda.h\"\nextern \"C\" __global__ void broken(float *x) {\n"
                           "  x[0] = undefined_name;\n}\nTGC_REGISTER(broken)\n",
                           "sm_80", NULL, 0};
  CHECK_EQ_INT(cg_nvrtc_compile(&T_api, T_cache, &broken, &bin, T_err, sizeof T_err), -1);
  const char *want_broken = "NVRTC could not compile gen/broken.cu for sm_80 (a tgc code generator bug): gen/broken.cu:3:";
  CHECK(strncmp(T_err, want_broken, strlen(want_broken)) == 0 && strstr(T_err, "undefined_name"));
  if (strncmp(T_err, want_broken, strlen(want_broken)) != 0) fprintf(stderr, "  got: %s\n", T_err);
  const char *bad_opt[] = {"--no-such-option"};
  cg_cuda_source opt = {"small.cu", big_source, "sm_80", bad_opt, 1};
  CHECK_EQ_INT(cg_nvrtc_compile(&T_api, T_cache, &opt, &bin, T_err, sizeof T_err), -1);
  CHECK_STR(T_err, "nvrtcCompileProgram: NVRTC_ERROR_INVALID_OPTION (invalid compile option) [small.cu]: nvrtc: error: "
                   "unrecognized option: --no-such-option");
}

static void test_sm90(void) {
  t_emu_open(90, false, 64 << 20);
  CHECK_STR(T_dev.arch, "sm_90");
  cg_cu_module m = t_load_file("launch.cu");
  cg_cu_function f = t_function(m, "dynamic_reverse");
  TCU(cuFuncSetAttribute, f, CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232448);
  run_reverse(f, 232448 / 4);
  EXPECT_FAIL("cuFuncSetAttribute: CUDA_ERROR_INVALID_VALUE (invalid argument): dynamic_reverse: 232449 bytes of "
              "dynamic shared memory and 0 static are more than sm_90 allows a block (232448)",
              cuFuncSetAttribute, f, CG_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232449);
  t_emu_close();
}

/* Reads 32 floats starting at element 90 of a 100-float allocation. */
static void out_of_bounds_child(void) {
  t_emu_open(80, false, 64 << 20);
  cg_cu_module m = t_load_source("oob.cu", "#include \"tgc_cuda.h\"\n"
                                           "extern \"C\" __global__ void oob(float *x, int n) {\n"
                                           "  x[threadIdx.x] = x[threadIdx.x + n];\n"
                                           "}\n"
                                           "TGC_REGISTER(oob)\n");
  cg_cu_deviceptr d = t_upload(NULL, 100 * sizeof(float));
  int n = 90;
  void *params[] = {&d, &n};
  TCU(cuLaunchKernel, t_function(m, "oob"), 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
  t_emu_close();
}

static void test_out_of_bounds(const char *self) {
#if defined(__SANITIZE_ADDRESS__)
  char log[] = "/tmp/tgc-oob-XXXXXX";
  int fd = mkstemp(log);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  char *argv[] = {(char *)self, "--out-of-bounds", NULL};
  extern char **environ;
  pid_t pid;
  CHECK_EQ_INT(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  waitpid(pid, &status, 0);
  close(fd);
  char *text = t_read_text(log);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  CHECK(text && strstr(text, "ERROR: AddressSanitizer: use-after-poison") && strstr(text, "READ of size 4"));
  if (!text || !strstr(text, "use-after-poison")) fprintf(stderr, "  the child said: %s\n", text ? text : "(nothing)");
  free(text);
  unlink(log);
#else
  (void)self;
  printf("note: not a sanitizer build; the out-of-bounds check of device memory is not run\n");
#endif
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--out-of-bounds") == 0) {
    out_of_bounds_child();
    return 0;
  }
  test_out_of_bounds(argv[0]);
  t_emu_open(80, false, 64 << 20);
  CHECK_STR(T_dev.arch, "sm_80");
  cg_cu_module m = t_load_file("launch.cu");
  if (m) {
    test_dimensions(m);
    test_shared_memory_sm80(m);
  }
  test_faults();
  test_modules();
  t_emu_close();
  test_sm90();
  return check_done();
}
