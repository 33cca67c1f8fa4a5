/* runtime/cuda_emu/device_rules.c — the emulated GPUs (sm_80 like an
 * A100, sm_90 like an H100): their attributes, and what the driver checks
 * of a launch and of a function's shared-memory opt-in, with the error a
 * GPU returns and one detail line. Shared by the
 * emulator (driver.c) and the test suite's stub of libcuda
 * (tests/cuda_stub/, which checks real cubins: its kernels also carry their
 * registers and __launch_bounds__, which the emulator does not know). */
#include <stdio.h>

#include "emu_internal.h"

/* Registers are allocated per warp in units of 256; an SM (and so a block)
 * has 64K of them. */
static const emu_arch arches[] = {
    {80, "tgc cuda-emu sm_80 (A100-like, on the CPU)", 108, 1410000, 1215000, 5120, 40 << 20, 167936, 166912},
    {90, "tgc cuda-emu sm_90 (H100-like, on the CPU)", 132, 1980000, 2619000, 5120, 50 << 20, 233472, 232448},
};

const emu_arch *rt_emu_arch_find(int arch) {
  for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++)
    if (arches[i].arch == arch) return &arches[i];
  return NULL;
}

int rt_emu_device_attribute(const emu_arch *a, cg_cu_device_attribute attrib, int *value) {
  switch (attrib) {
  case CG_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *value = 1024; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = 1024; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = 64; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 2147483647; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *value = 65535; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = 65535; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = RT_EMU_STATIC_SMEM_LIMIT; break;
  case CG_CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *value = 65536; break;
  case CG_CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *value = 65536; break;
  case CG_CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = a->clock_khz; break;
  case CG_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = a->sm_count; break;
  case CG_CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = a->memory_clock_khz; break;
  case CG_CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *value = a->bus_width; break;
  case CG_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = a->l2_bytes; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *value = 2048; break;
  case CG_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
  case CG_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = a->arch / 10; break;
  case CG_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = a->arch % 10; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *value = a->smem_per_sm; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *value = 65536; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = a->smem_optin; break;
  case CG_CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *value = 32; break;
  default: return -1;
  }
  return 0;
}

enum { REGS_PER_BLOCK = 65536, REG_UNIT = 256 };

cg_cu_result rt_emu_launch_rules(const rt_emu_launch_limits *f, const unsigned grid[3], const unsigned block[3],
                                 unsigned shared_bytes, char *detail, size_t len) {
  const char *name = f->name;
  unsigned gx = grid[0], gy = grid[1], gz = grid[2], bx = block[0], by = block[1], bz = block[2];
  if (gx == 0 || gy == 0 || gz == 0 || gx > 2147483647u || gy > 65535 || gz > 65535) {
    snprintf(detail, len, "%s: grid %u x %u x %u (each at least 1, at most 2147483647 x 65535 x 65535)", name, gx, gy,
             gz);
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  if (bx == 0 || by == 0 || bz == 0 || bx > 1024 || by > 1024 || bz > 64) {
    snprintf(detail, len, "%s: block %u x %u x %u (each at least 1, at most 1024 x 1024 x 64)", name, bx, by, bz);
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  unsigned long long threads = (unsigned long long)bx * by * bz;
  if (threads > 1024) {
    snprintf(detail, len, "%s: block %u x %u x %u is %llu threads, more than 1024", name, bx, by, bz, threads);
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  if (f->max_threads > 0 && threads > (unsigned long long)f->max_threads) {
    snprintf(detail, len, "%s: block of %llu threads, more than its __launch_bounds__ (%d)", name, threads,
             f->max_threads);
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  if (f->regs > 0) {
    unsigned long long warps = (threads + 31) / 32;
    unsigned long long per_warp = ((unsigned long long)f->regs * 32 + REG_UNIT - 1) / REG_UNIT * REG_UNIT;
    if (warps * per_warp > REGS_PER_BLOCK) {
      snprintf(detail, len, "%s: %llu threads of %d registers need %llu registers, more than the %d of a block on sm_%d",
               name, threads, f->regs, warps * per_warp, (int)REGS_PER_BLOCK, f->arch);
      return CG_CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    }
  }
  if ((long long)shared_bytes > f->max_dynamic_smem) {
    snprintf(detail, len,
             "%s: %u bytes of dynamic shared memory, more than the %d it may use (%llu static of %d without the "
             "opt-in; cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) allows up to %d in all "
             "on sm_%d)",
             name, shared_bytes, f->max_dynamic_smem, f->static_smem, RT_EMU_STATIC_SMEM_LIMIT, f->smem_optin,
             f->arch);
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_smem_optin_rule(const rt_emu_launch_limits *f, int value, char *detail, size_t len) {
  if (value < 0 || (long long)value + (long long)f->static_smem > f->smem_optin) {
    snprintf(detail, len, "%s: %d bytes of dynamic shared memory and %llu static are more than sm_%d allows a block (%d)",
             f->name, value, f->static_smem, f->arch, f->smem_optin);
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  return CG_CUDA_SUCCESS;
}
