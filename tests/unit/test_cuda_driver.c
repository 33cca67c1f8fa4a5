/* tests/unit/test_cuda_driver.c — the emulated driver outside kernels, and
 * rt_cuda_open_device's messages driven through the emulator.
 *
 *   opening: "no CUDA device" (an emulator with none), the driver-version
 *   check (an emulated CUDA 12.4 driver under NVRTC 13.0), a device
 *   ordinal out of range, the device's name, arch, memory and attributes;
 *   memory: device pointers in their own range; cuMemGetInfo exact before
 *   and after allocations; out of memory with both numbers; copies that
 *   leave an allocation, host pointers that are device memory, freeing a
 *   pointer that is not an allocation; pointer attributes; 0-byte
 *   allocations; memset; counters of copies (exact);
 *   contexts: calls without a current context; streams and events,
 *   elapsed time, events without timing;
 *   configuration from the environment and its errors;
 *   the GPU of a rank: --device N counted from the node-local rank under a
 *   launcher (rt_cuda_rank_device). */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "testcuda.h"

#define EXPECT_FAIL(want, fn, ...)                                                      \
  do {                                                                                  \
    CHECK(CG_CU(&T_api, NULL, T_err, sizeof T_err, fn, __VA_ARGS__) == -1);             \
    CHECK_STR(T_err, want);                                                             \
  } while (0)

static void test_open_device(void) {
  rt_cuda_emu_config cfg;
  CHECK_EQ_INT(rt_cuda_emu_config_init(&cfg, T_err, sizeof T_err), 0);
  cfg.devices = 0;
  CHECK_EQ_INT(rt_cuda_emu_load(&T_api, &cfg, T_err, sizeof T_err), 0);
  CHECK_STR(T_api.backend, "cuda-emu");
  rt_cuda_device dev;
  CHECK_EQ_INT(rt_cuda_open_device(&T_api, 0, &dev, T_err, sizeof T_err), -1);
  CHECK_STR(T_err, "no CUDA device");
  cfg.devices = 1, cfg.driver_version = 12040;
  CHECK_EQ_INT(rt_cuda_emu_load(&T_api, &cfg, T_err, sizeof T_err), 0);
  CHECK_EQ_INT(rt_cuda_open_device(&T_api, 0, &dev, T_err, sizeof T_err), -1);
  CHECK_STR(T_err, "CUDA driver too old: it supports CUDA 12.4, but NVRTC 13.0 needs a driver for CUDA 13.0 or newer");
  cfg.driver_version = 13000;
  CHECK_EQ_INT(rt_cuda_emu_load(&T_api, &cfg, T_err, sizeof T_err), 0);
  CHECK_EQ_INT(rt_cuda_open_device(&T_api, 1, &dev, T_err, sizeof T_err), -1);
  CHECK_STR(T_err, "CUDA device 1 does not exist (1 device: 0 to 0)");
  rt_cuda_emu_shutdown();

  cfg.arch = 70;
  CHECK_EQ_INT(rt_cuda_emu_load(&T_api, &cfg, T_err, sizeof T_err), -1);
  CHECK_STR(T_err, "the emulator has no sm_70 (sm_80 and sm_90)");
  setenv("TGC_EMU_ARCH", "sm_75", 1);
  CHECK_EQ_INT(rt_cuda_emu_config_init(&cfg, T_err, sizeof T_err), -1);
  CHECK_STR(T_err, "TGC_EMU_ARCH=sm_75: the emulator has sm_80 and sm_90");
  setenv("TGC_EMU_ARCH", "sm_90", 1);
  setenv("TGC_EMU_DEVICE_MEMORY", "1.5G", 1);
  setenv("TGC_EMU_RACECHECK", "1", 1);
  CHECK_EQ_INT(rt_cuda_emu_config_init(&cfg, T_err, sizeof T_err), 0);
  CHECK_EQ_INT(cfg.arch, 90);
  CHECK_EQ_INT(cfg.device_bytes, (size_t)3 << 29);
  CHECK(cfg.racecheck);
  setenv("TGC_EMU_DEVICE_MEMORY", "12Q", 1);
  CHECK_EQ_INT(rt_cuda_emu_config_init(&cfg, T_err, sizeof T_err), -1);
  CHECK_STR(T_err, "TGC_EMU_DEVICE_MEMORY=12Q: expected a size such as 4G, 512M or 1048576 (at most 1T)");
  unsetenv("TGC_EMU_ARCH");
  unsetenv("TGC_EMU_DEVICE_MEMORY");
  unsetenv("TGC_EMU_RACECHECK");
}

static void test_device(void) {
  CHECK_STR(T_dev.name, "tgc cuda-emu sm_80 (A100-like, on the CPU)");
  CHECK_EQ_INT(T_dev.total_bytes, 64 << 20);
  CHECK_EQ_INT(T_dev.cc_major, 8);
  CHECK_EQ_INT(T_dev.cc_minor, 0);
  int v = 0;
  struct {
    cg_cu_device_attribute a;
    int want;
  } attrs[] = {{CG_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
               {CG_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
               {CG_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
               {CG_CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
               {CG_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 108},
               {CG_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
               {CG_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 166912}};
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    TCU(cuDeviceGetAttribute, &v, attrs[i].a, T_dev.device);
    CHECK_EQ_INT(v, attrs[i].want);
  }
  EXPECT_FAIL("cuDeviceGetAttribute: CUDA_ERROR_INVALID_VALUE (invalid argument): device attribute 200 is not emulated",
              cuDeviceGetAttribute, &v, 200, T_dev.device);
  EXPECT_FAIL("cuDeviceGet: CUDA_ERROR_INVALID_DEVICE (invalid device ordinal): no emulated device 3", cuDeviceGet,
              &v, 3);
  const char *s = NULL;
  CHECK_EQ_INT(T_api.cuGetErrorString(CG_CUDA_ERROR_ILLEGAL_ADDRESS, &s), CG_CUDA_SUCCESS);
  CHECK_STR(s, "an illegal memory access was encountered");
  CHECK_EQ_INT(T_api.cuGetErrorName(77777, &s), CG_CUDA_ERROR_INVALID_VALUE);
}

static void test_memory(void) {
  size_t free0, total;
  TCU(cuMemGetInfo, &free0, &total);
  CHECK_EQ_INT(total, 64 << 20);
  CHECK_EQ_INT(free0, total);
  cg_cu_deviceptr a, b;
  TCU(cuMemAlloc, &a, 1000);
  TCU(cuMemAlloc, &b, 1 << 20);
  CHECK(a >= 0x200000000000ull || a > (uintptr_t)&free0 + (1ull << 36)); /* its own range */
  CHECK(a % 256 == 0 && b % 256 == 0);
  size_t free1;
  TCU(cuMemGetInfo, &free1, &total);
  size_t used = free0 - free1;
  CHECK(used >= 1024 + (1 << 20) && used <= 2048 + (1 << 20)); /* granules (+ a redzone each under ASan) */
  char want[512];
  snprintf(want, sizeof want,
           "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory): 67108864 bytes asked, %zu of 67108864 bytes of "
           "device memory free",
           free1);
  cg_cu_deviceptr c;
  EXPECT_FAIL(want, cuMemAlloc, &c, (size_t)64 << 20);
  EXPECT_FAIL("cuMemAlloc: CUDA_ERROR_INVALID_VALUE (invalid argument): an allocation of 0 bytes", cuMemAlloc, &c, 0);

  char host[2048];
  memset(host, 7, sizeof host);
  TCU(cuMemcpyHtoD, a, host, 1000);
  snprintf(want, sizeof want,
           "cuMemcpyHtoD: CUDA_ERROR_INVALID_VALUE (invalid argument): destination [0x%llx, +200 bytes) is not inside "
           "one allocation",
           a + 900);
  EXPECT_FAIL(want, cuMemcpyHtoD, a + 900, host, 200);
  snprintf(want, sizeof want,
           "cuMemcpyHtoD: CUDA_ERROR_INVALID_VALUE (invalid argument): source %p is device memory",
           (void *)(uintptr_t)b);
  EXPECT_FAIL(want, cuMemcpyHtoD, a, (const void *)(uintptr_t)b, 16);
  snprintf(want, sizeof want, "cuMemcpyDtoH: CUDA_ERROR_INVALID_VALUE (invalid argument): source 0x%llx is not device memory",
           (unsigned long long)(uintptr_t)host);
  EXPECT_FAIL(want, cuMemcpyDtoH, host, (cg_cu_deviceptr)(uintptr_t)host, 16);
  TCU(cuMemcpyDtoD, b, a, 1000);
  TCU(cuMemsetD8, a, 0xab, 1000);
  memset(host, 0, sizeof host);
  t_download(host, b, 1000);
  CHECK(host[0] == 7 && host[999] == 7);
  t_download(host, a, 1000);
  CHECK((unsigned char)host[500] == 0xab);

  unsigned int type = 0;
  TCU(cuPointerGetAttribute, &type, CG_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 10);
  CHECK_EQ_INT(type, CG_CU_MEMORYTYPE_DEVICE);
  snprintf(want, sizeof want, "cuPointerGetAttribute: CUDA_ERROR_INVALID_VALUE (invalid argument): 0x%llx is not device memory",
           (unsigned long long)(uintptr_t)host);
  EXPECT_FAIL(want, cuPointerGetAttribute, &type, CG_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (cg_cu_deviceptr)(uintptr_t)host);
  snprintf(want, sizeof want, "cuMemFree: CUDA_ERROR_INVALID_VALUE (invalid argument): 0x%llx is not an allocation's start",
           a + 8);
  EXPECT_FAIL(want, cuMemFree, a + 8);
  TCU(cuMemFree, a);
  TCU(cuMemFree, b);
  TCU(cuMemGetInfo, &free1, &total);
  CHECK_EQ_INT(free1, free0);
  /* the space is reused: the whole device in one allocation */
  TCU(cuMemAlloc, &c, (size_t)(64 << 20) - 4096);
  TCU(cuMemFree, c);

  rt_cuda_emu_counters k = rt_cuda_emu_counters_get();
  CHECK_EQ_INT(k.htod_calls, 1);
  CHECK_EQ_INT(k.htod_bytes, 1000);
  CHECK_EQ_INT(k.dtoh_calls, 2);
  CHECK_EQ_INT(k.dtoh_bytes, 2000);
  CHECK_EQ_INT(k.dtod_calls, 1);
  CHECK_EQ_INT(k.memset_calls, 1);
}

static void test_context_streams_events(void) {
  cg_cu_stream s;
  TCU(cuStreamCreate, &s, CG_CU_STREAM_NON_BLOCKING);
  cg_cu_deviceptr a;
  TCU(cuMemAlloc, &a, 64);
  char host[64] = {1};
  TCU(cuMemcpyHtoDAsync, a, host, 64, s);
  TCU(cuStreamSynchronize, s);
  cg_cu_event e0, e1, nt;
  TCU(cuEventCreate, &e0, CG_CU_EVENT_DEFAULT);
  TCU(cuEventCreate, &e1, CG_CU_EVENT_DEFAULT);
  TCU(cuEventCreate, &nt, CG_CU_EVENT_DISABLE_TIMING);
  float ms = -1;
  EXPECT_FAIL("cuEventElapsedTime: CUDA_ERROR_INVALID_HANDLE (invalid resource handle): an event that was never recorded",
              cuEventElapsedTime, &ms, e0, e1);
  TCU(cuEventRecord, e0, s);
  TCU(cuMemsetD8Async, a, 1, 64, s);
  TCU(cuEventRecord, e1, s);
  TCU(cuEventSynchronize, e1);
  TCU(cuEventElapsedTime, &ms, e0, e1);
  CHECK(ms >= 0 && ms < 1000);
  TCU(cuEventRecord, nt, s);
  EXPECT_FAIL("cuEventElapsedTime: CUDA_ERROR_INVALID_HANDLE (invalid resource handle): an event created with "
              "CU_EVENT_DISABLE_TIMING",
              cuEventElapsedTime, &ms, e0, nt);
  TCU(cuEventDestroy, e0);
  TCU(cuEventDestroy, e1);
  TCU(cuEventDestroy, nt);
  TCU(cuStreamDestroy, s);
  EXPECT_FAIL("cuMemcpyHtoDAsync: CUDA_ERROR_INVALID_HANDLE (invalid resource handle): not a stream of this context",
              cuMemcpyHtoDAsync, a, host, 64, s);
  /* no current context */
  TCU(cuCtxSetCurrent, NULL);
  cg_cu_deviceptr b;
  EXPECT_FAIL("cuMemAlloc: CUDA_ERROR_INVALID_CONTEXT (invalid device context): no current context (cuCtxSetCurrent)",
              cuMemAlloc, &b, 64);
  TCU(cuCtxSetCurrent, T_dev.context);
  TCU(cuMemFree, a);
}

static void test_rank_device(void) {
  unsetenv("OMPI_COMM_WORLD_SIZE"), unsetenv("PMIX_RANK"), unsetenv("PMI_RANK");
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  CHECK_EQ_INT(rt_cuda_rank_device(0), 0); /* no launcher: --device as given */
  CHECK_EQ_INT(rt_cuda_rank_device(2), 2);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  CHECK_EQ_INT(rt_cuda_rank_device(0), 3); /* rank 3 of its node: GPU 3 */
  CHECK_EQ_INT(rt_cuda_rank_device(2), 5);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  setenv("SLURM_LOCALID", "1", 1);
  CHECK_EQ_INT(rt_cuda_rank_device(0), 1);
  unsetenv("SLURM_LOCALID");
  CHECK_EQ_INT(rt_cuda_rank_device(0), 0); /* local rank unknown: 0 */
  unsetenv("OMPI_COMM_WORLD_SIZE");
}

int main(void) {
  test_rank_device();
  test_open_device();
  t_emu_open(80, false, 64 << 20);
  test_device();
  test_memory();
  test_context_streams_events();
  t_emu_close();
  return check_done();
}
