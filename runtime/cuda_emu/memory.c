/* runtime/cuda_emu/memory.c — the emulated device's memory.
 *
 * One mmap'd arena (MAP_NORESERVE: pages cost nothing until touched) at its
 * own address range, so device pointers are never host pointers and can be
 * told apart. Allocations are first-fit in 256-byte granules, kept sorted
 * by offset (a binary search finds the one holding a pointer);
 * cuMemGetInfo is exact against the configured size. Copies and memsets
 * check that each device range lies in one allocation and that host
 * pointers are not device memory. In sanitizer builds each allocation is
 * followed by a poisoned redzone of 256 bytes (counted as used) and freed
 * memory is poisoned, so a kernel reading past its buffer is an ASan
 * report. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "emu_internal.h"

#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#define REDZONE 256u
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define REDZONE 0u
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define GRANULE 256u
#define ARENA_HINT ((void *)0x200000000000ull) /* device addresses start here when it is free */

#define ENTER rt_emu_enter
#define fail rt_emu_fail
#define need_context rt_emu_need_context
#define check_stream rt_emu_check_stream

typedef struct {
  uint64_t off, bytes; /* bytes: asked for; the allocation spans its granules plus the redzone */
} allocation;

typedef struct {
  void *p;
  size_t bytes;
} host_block;

static struct {
  pthread_mutex_t lock;
  unsigned char *arena;
  size_t bytes, used;
  allocation *allocs;
  int n, cap;
  host_block *host;  /* cuMemHostAlloc's blocks (page-locked on a GPU; plain host memory here) */
  int n_host, cap_host;
} mem = {.lock = PTHREAD_MUTEX_INITIALIZER};

int rt_emu_memory_init(size_t device_bytes, char *err, size_t errlen) {
  size_t bytes = (device_bytes + GRANULE - 1) / GRANULE * GRANULE;
  void *m = mmap(ARENA_HINT, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    cg_errf(err, errlen, "cannot map %zu bytes of emulated device memory: %s", bytes, strerror(errno));
    return -1;
  }
  mem.arena = m, mem.bytes = bytes, mem.used = 0, mem.n = 0;
  return 0;
}

void rt_emu_memory_reset(void) {
  pthread_mutex_lock(&mem.lock);
  mem.n = 0;
  mem.used = 0;
  pthread_mutex_unlock(&mem.lock);
}

void rt_emu_memory_shutdown(void) {
  if (mem.arena) {
    UNPOISON(mem.arena, mem.bytes);
    munmap(mem.arena, mem.bytes);
  }
  free(mem.allocs);
  mem.arena = NULL, mem.allocs = NULL, mem.bytes = mem.used = 0, mem.n = mem.cap = 0;
  for (int i = 0; i < mem.n_host; i++) free(mem.host[i].p); /* blocks the program never freed */
  free(mem.host);
  mem.host = NULL, mem.n_host = mem.cap_host = 0;
}


static size_t span_of(uint64_t bytes) { return (size_t)((bytes + REDZONE + GRANULE - 1) / GRANULE * GRANULE); }

/* The allocation holding ptr, or -1. */
static int find_alloc(uint64_t ptr) {
  uint64_t base = (uint64_t)(uintptr_t)mem.arena;
  if (ptr < base || ptr >= base + mem.bytes) return -1;
  uint64_t off = ptr - base;
  int lo = 0, hi = mem.n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (off < mem.allocs[mid].off) hi = mid - 1;
    else if (off >= mem.allocs[mid].off + mem.allocs[mid].bytes) lo = mid + 1;
    else return mid;
  }
  return -1;
}

int rt_emu_device_range(uint64_t ptr, size_t bytes) {
  uint64_t base = (uint64_t)(uintptr_t)mem.arena;
  if (ptr + bytes <= base || ptr >= base + mem.bytes) return 0;
  int a = find_alloc(ptr);
  if (a < 0 || ptr + bytes > base + mem.allocs[a].off + mem.allocs[a].bytes) return -1;
  return 1;
}

static bool is_device(const void *p) {
  uintptr_t u = (uintptr_t)p, base = (uintptr_t)mem.arena;
  return u >= base && u < base + mem.bytes;
}

cg_cu_result rt_emu_cuMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  *free_bytes = mem.bytes - mem.used;
  *total_bytes = mem.bytes;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuMemAlloc(cg_cu_deviceptr *dptr, size_t bytes) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = rt_emu_capture_forbid("cuMemAlloc", NULL);
  if (r != CG_CUDA_SUCCESS) return r;
  if (bytes == 0) return fail(CG_CUDA_ERROR_INVALID_VALUE, "an allocation of 0 bytes");
  size_t span = span_of(bytes);
  if (bytes > mem.bytes || span > mem.bytes - mem.used)
    return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "%zu bytes asked, %zu of %zu bytes of device memory free", bytes,
                mem.bytes - mem.used, mem.bytes);
  pthread_mutex_lock(&mem.lock);
  /* first fit in the gaps between the allocations (kept sorted) */
  uint64_t at = 0;
  int i = 0;
  for (; i < mem.n; i++) {
    if (mem.allocs[i].off - at >= span) break;
    at = mem.allocs[i].off + span_of(mem.allocs[i].bytes);
  }
  if (at + span > mem.bytes) {
    pthread_mutex_unlock(&mem.lock);
    return fail(CG_CUDA_ERROR_OUT_OF_MEMORY,
                "%zu bytes asked: %zu of %zu bytes of device memory are free but no gap is large enough", bytes,
                mem.bytes - mem.used, mem.bytes);
  }
  if (mem.n == mem.cap) {
    int cap = mem.cap ? 2 * mem.cap : 64;
    allocation *na = realloc(mem.allocs, (size_t)cap * sizeof *na);
    if (!na) {
      pthread_mutex_unlock(&mem.lock);
      return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "out of host memory for the allocation table");
    }
    mem.allocs = na, mem.cap = cap;
  }
  memmove(&mem.allocs[i + 1], &mem.allocs[i], (size_t)(mem.n - i) * sizeof *mem.allocs);
  mem.allocs[i] = (allocation){at, bytes};
  mem.n++;
  mem.used += span;
  UNPOISON(mem.arena + at, bytes);
  POISON(mem.arena + at + bytes, span - bytes); /* the redzone (and the granule's tail) */
  *dptr = (cg_cu_deviceptr)(uintptr_t)(mem.arena + at);
  pthread_mutex_unlock(&mem.lock);
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuMemFree(cg_cu_deviceptr dptr) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = rt_emu_capture_forbid("cuMemFree", NULL);
  if (r != CG_CUDA_SUCCESS) return r;
  if (dptr == 0) return CG_CUDA_SUCCESS;
  pthread_mutex_lock(&mem.lock);
  int i = find_alloc(dptr);
  if (i < 0 || (uint64_t)(uintptr_t)mem.arena + mem.allocs[i].off != dptr) {
    pthread_mutex_unlock(&mem.lock);
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "0x%llx is not an allocation's start", dptr);
  }
  allocation a = mem.allocs[i];
  memmove(&mem.allocs[i], &mem.allocs[i + 1], (size_t)(mem.n - i - 1) * sizeof *mem.allocs);
  mem.n--;
  mem.used -= span_of(a.bytes);
  POISON(mem.arena + a.off, span_of(a.bytes));
  if (a.bytes >= (1u << 20)) madvise(mem.arena + a.off, span_of(a.bytes) & ~(size_t)4095, MADV_DONTNEED);
  pthread_mutex_unlock(&mem.lock);
  return CG_CUDA_SUCCESS;
}


static cg_cu_result check_device_range(const char *what, cg_cu_deviceptr p, size_t bytes) {
  if (bytes == 0) return CG_CUDA_SUCCESS;
  int r = rt_emu_device_range(p, bytes);
  if (r == 1) return CG_CUDA_SUCCESS;
  if (r == 0) return fail(CG_CUDA_ERROR_INVALID_VALUE, "%s 0x%llx is not device memory", what, p);
  return fail(CG_CUDA_ERROR_INVALID_VALUE, "%s [0x%llx, +%zu bytes) is not inside one allocation", what, p, bytes);
}

static cg_cu_result check_host(const char *what, const void *p, size_t bytes) {
  if (bytes && !p) return fail(CG_CUDA_ERROR_INVALID_VALUE, "%s is NULL", what);
  if (bytes && is_device(p)) return fail(CG_CUDA_ERROR_INVALID_VALUE, "%s %p is device memory", what, p);
  return CG_CUDA_SUCCESS;
}

/* ---- page-locked host memory: host memory here, listed so that an
 * upload from it is counted and a free of anything else refused ---- */

/* The block of cuMemHostAlloc holding [p, p + bytes), or -1 (mem.lock held). */
static int find_host(const void *p, size_t bytes) {
  for (int i = 0; i < mem.n_host; i++) {
    const char *b = mem.host[i].p;
    if ((const char *)p >= b && (const char *)p + bytes <= b + mem.host[i].bytes) return i;
  }
  return -1;
}

cg_cu_result rt_emu_cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  if (!pp) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuMemHostAlloc: pp is NULL");
  *pp = NULL;
  if (flags & ~7u) /* CU_MEMHOSTALLOC_PORTABLE 1, DEVICEMAP 2, WRITECOMBINED 4 */
    return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuMemHostAlloc: unknown flags 0x%x", flags);
  if (bytes == 0) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuMemHostAlloc of 0 bytes");
  void *p = calloc(1, bytes);
  pthread_mutex_lock(&mem.lock);
  if (p && mem.n_host == mem.cap_host) {
    int cap = mem.cap_host ? 2 * mem.cap_host : 8;
    host_block *nh = realloc(mem.host, (size_t)cap * sizeof *nh);
    if (nh) mem.host = nh, mem.cap_host = cap;
  }
  if (!p || mem.n_host == mem.cap_host) {
    pthread_mutex_unlock(&mem.lock);
    free(p);
    return fail(CG_CUDA_ERROR_OUT_OF_MEMORY, "cuMemHostAlloc: %zu bytes: out of host memory", bytes);
  }
  mem.host[mem.n_host++] = (host_block){p, bytes};
  pthread_mutex_unlock(&mem.lock);
  rt_emu_counters()->host_allocs++;
  *pp = p;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuMemFreeHost(void *p) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  pthread_mutex_lock(&mem.lock);
  int i = find_host(p, 0);
  bool start = i >= 0 && mem.host[i].p == p;
  if (start) mem.host[i] = mem.host[--mem.n_host];
  pthread_mutex_unlock(&mem.lock);
  if (!start) return fail(CG_CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost: %p is not a block of cuMemHostAlloc", p);
  free(p);
  return CG_CUDA_SUCCESS;
}

/* What a capture's recorded copies and memsets replay through (capture.c). */
static const emu_copy_entries entries = {rt_emu_cuMemcpyHtoDAsync, rt_emu_cuMemcpyDtoHAsync, rt_emu_cuMemcpyDtoDAsync,
                                         rt_emu_cuMemsetD8Async};
#define record_copy(s, kind, dst, src, bytes, value) rt_emu_capture_copy(s, &entries, kind, dst, src, bytes, value)

cg_cu_result rt_emu_cuMemcpyHtoDAsync(cg_cu_deviceptr dst, const void *src, size_t bytes, cg_cu_stream s) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = check_stream(s);
  if (r == CG_CUDA_SUCCESS) r = check_device_range("destination", dst, bytes);
  if (r == CG_CUDA_SUCCESS) r = check_host("source", src, bytes);
  if (r != CG_CUDA_SUCCESS) return r;
  if (rt_emu_capturing(s)) return record_copy(s, EMU_REC_HTOD, dst, (uint64_t)(uintptr_t)src, bytes, 0);
  if ((r = rt_emu_nccl_touch("cuMemcpyHtoDAsync", s, dst, bytes)) != CG_CUDA_SUCCESS) return r;
  if (bytes) memcpy((void *)(uintptr_t)dst, src, bytes);
  rt_emu_counters()->htod_calls++, rt_emu_counters()->htod_bytes += (int64_t)bytes;
  pthread_mutex_lock(&mem.lock);
  bool pinned = bytes && find_host(src, bytes) >= 0;
  pthread_mutex_unlock(&mem.lock);
  if (pinned) rt_emu_counters()->htod_pinned_calls++;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuMemcpyDtoHAsync(void *dst, cg_cu_deviceptr src, size_t bytes, cg_cu_stream s) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = check_stream(s);
  if (r == CG_CUDA_SUCCESS) r = check_device_range("source", src, bytes);
  if (r == CG_CUDA_SUCCESS) r = check_host("destination", dst, bytes);
  if (r != CG_CUDA_SUCCESS) return r;
  if (rt_emu_capturing(s)) return record_copy(s, EMU_REC_DTOH, (uint64_t)(uintptr_t)dst, src, bytes, 0);
  if ((r = rt_emu_nccl_touch("cuMemcpyDtoHAsync", s, src, bytes)) != CG_CUDA_SUCCESS) return r;
  if (bytes) memcpy(dst, (const void *)(uintptr_t)src, bytes);
  rt_emu_counters()->dtoh_calls++, rt_emu_counters()->dtoh_bytes += (int64_t)bytes;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuMemcpyDtoDAsync(cg_cu_deviceptr dst, cg_cu_deviceptr src, size_t bytes, cg_cu_stream s) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = check_stream(s);
  if (r == CG_CUDA_SUCCESS) r = check_device_range("destination", dst, bytes);
  if (r == CG_CUDA_SUCCESS) r = check_device_range("source", src, bytes);
  if (r != CG_CUDA_SUCCESS) return r;
  if (rt_emu_capturing(s)) return record_copy(s, EMU_REC_DTOD, dst, src, bytes, 0);
  if ((r = rt_emu_nccl_touch("cuMemcpyDtoDAsync", s, dst, bytes)) != CG_CUDA_SUCCESS ||
      (r = rt_emu_nccl_touch("cuMemcpyDtoDAsync", s, src, bytes)) != CG_CUDA_SUCCESS)
    return r;
  if (bytes) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
  rt_emu_counters()->dtod_calls++, rt_emu_counters()->dtod_bytes += (int64_t)bytes;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuMemcpyHtoD(cg_cu_deviceptr dst, const void *src, size_t bytes) {
  return rt_emu_cuMemcpyHtoDAsync(dst, src, bytes, NULL);
}
cg_cu_result rt_emu_cuMemcpyDtoH(void *dst, cg_cu_deviceptr src, size_t bytes) {
  return rt_emu_cuMemcpyDtoHAsync(dst, src, bytes, NULL);
}
cg_cu_result rt_emu_cuMemcpyDtoD(cg_cu_deviceptr dst, cg_cu_deviceptr src, size_t bytes) {
  return rt_emu_cuMemcpyDtoDAsync(dst, src, bytes, NULL);
}

cg_cu_result rt_emu_cuMemsetD8Async(cg_cu_deviceptr dst, unsigned char value, size_t n, cg_cu_stream s) {
  ENTER();
  cg_cu_result r = need_context();
  if (r == CG_CUDA_SUCCESS) r = check_stream(s);
  if (r == CG_CUDA_SUCCESS) r = check_device_range("destination", dst, n);
  if (r != CG_CUDA_SUCCESS) return r;
  if (rt_emu_capturing(s)) return record_copy(s, EMU_REC_MEMSET, dst, 0, n, value);
  if ((r = rt_emu_nccl_touch("cuMemsetD8Async", s, dst, n)) != CG_CUDA_SUCCESS) return r;
  if (n) memset((void *)(uintptr_t)dst, value, n);
  rt_emu_counters()->memset_calls++;
  return CG_CUDA_SUCCESS;
}
cg_cu_result rt_emu_cuMemsetD8(cg_cu_deviceptr dst, unsigned char value, size_t n) {
  return rt_emu_cuMemsetD8Async(dst, value, n, NULL);
}

cg_cu_result rt_emu_cuPointerGetAttribute(void *data, cg_cu_pointer_attribute attribute, cg_cu_deviceptr ptr) {
  ENTER();
  cg_cu_result r = need_context();
  if (r != CG_CUDA_SUCCESS) return r;
  if (find_alloc(ptr) < 0) return fail(CG_CUDA_ERROR_INVALID_VALUE, "0x%llx is not device memory", ptr);
  switch (attribute) {
  case CG_CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = CG_CU_MEMORYTYPE_DEVICE; break;
  case CG_CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(cg_cu_deviceptr *)data = ptr; break;
  case CG_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = 0; break;
  case CG_CU_POINTER_ATTRIBUTE_CONTEXT: *(cg_cu_context *)data = rt_emu_context(); break;
  default: return fail(CG_CUDA_ERROR_INVALID_VALUE, "pointer attribute %u is not emulated", attribute);
  }
  return CG_CUDA_SUCCESS;
}
