/* runtime/cuda/loader.c — fills the entry-point table from the real CUDA
 * libraries with dlopen/dlsym, and opens a device through any table.
 *
 * tgc links no CUDA library: each is found at run time, so one binary runs
 * with and without a GPU. libcuda.so.1 comes from the dynamic loader's
 * search (the NVIDIA driver installs it there); NVRTC and cuBLASLt are
 * versioned per toolkit (libnvrtc.so.13, libcublasLt.so.13; NCCL is
 * libnccl.so.2, from the toolkit's folders or the system's), so the loader
 * looks in the usual toolkit directories for the highest version, then asks
 * the dynamic loader for the sonames it knows. TGC_CUDA_LIB_PATH replaces
 * all of that with a list of directories (how the tests point the loader at
 * an empty one). Every entry of cuda_api.def is resolved by its exported
 * symbol (cuMemAlloc_v2 for cuMemAlloc, ...), with the row's fallback for
 * older libraries. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_cuda.h"

enum { SLOT_DRIVER, SLOT_NVRTC, SLOT_CUBLASLT, SLOT_NCCL };

typedef struct {
  cg_cuda_lib lib;
  int slot;
  const char *what;        /* for messages: "CUDA driver", "NVRTC", ... */
  const char *stem;        /* "libnvrtc.so": versioned files are stem.N[.M...] */
  const char *sonames[6];  /* what to ask the dynamic loader for, in order */
} lib_info;

static const lib_info libs_known[] = {
    {CG_CUDA_LIB_DRIVER, SLOT_DRIVER, "CUDA driver", "libcuda.so", {"libcuda.so.1"}},
    {CG_CUDA_LIB_NVRTC, SLOT_NVRTC, "NVRTC", "libnvrtc.so",
     {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}},
    {CG_CUDA_LIB_CUBLASLT, SLOT_CUBLASLT, "cuBLASLt", "libcublasLt.so",
     {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}},
    {CG_CUDA_LIB_NCCL, SLOT_NCCL, "NCCL", "libnccl.so", {"libnccl.so.2", "libnccl.so"}},
};
#define NLIBS (sizeof libs_known / sizeof libs_known[0])

/* Compares the version suffixes of two file names of stem ("13" < "13.1"). */
static int version_cmp(const char *a, const char *b) {
  while (*a || *b) {
    long x = strtol(a, (char **)&a, 10), y = strtol(b, (char **)&b, 10);
    if (x != y) return x < y ? -1 : 1;
    if (*a == '.') a++;
    if (*b == '.') b++;
    if (!*a || !*b) return *a ? 1 : *b ? -1 : 0;
  }
  return 0;
}

/* stem.N[.M...] with digits only after the stem's dot. */
static const char *version_suffix(const char *name, const char *stem) {
  size_t n = strlen(stem);
  if (strncmp(name, stem, n) != 0 || name[n] != '.' || !name[n + 1]) return NULL;
  for (const char *p = name + n + 1; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p == '.' && p[1] && p[-1] != '.'))) return NULL;
  return name + n + 1;
}

/* The best file of lib in dir: the driver's soname, or the highest stem.N
 * (else stem itself). 1 and the path, or 0. */
static int find_in_dir(const lib_info *lib, const char *dir, char *path, size_t len) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  char best[256] = "";
  int plain = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (lib->slot == SLOT_DRIVER) {
      if (strcmp(e->d_name, lib->sonames[0]) == 0) snprintf(best, sizeof best, "%s", e->d_name);
      continue;
    }
    if (strcmp(e->d_name, lib->stem) == 0) plain = 1;
    const char *v = version_suffix(e->d_name, lib->stem);
    if (v && (!best[0] || version_cmp(v, version_suffix(best, lib->stem)) > 0))
      snprintf(best, sizeof best, "%s", e->d_name);
  }
  closedir(d);
  if (!best[0] && plain) snprintf(best, sizeof best, "%s", lib->stem);
  if (!best[0]) return 0;
  snprintf(path, len, "%s/%s", dir, best);
  return 1;
}

/* The file a handle was loaded from. */
static const char *lib_path(void *h) {
  struct link_map *map = NULL;
  if (dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return "?";
}

/* Opens lib: a handle and the file or soname it came from (in `used`), or
 * NULL with the searched places in `searched`. */
static void *open_lib(const lib_info *lib, char *used_path, size_t ulen, char *searched, size_t slen, char *why,
                      size_t wlen) {
  const char *override = getenv("TGC_CUDA_LIB_PATH");
  char dirs[4096] = "";
  if (override) {
    snprintf(dirs, sizeof dirs, "%s", override);
  } else if (lib->slot != SLOT_DRIVER) {
    const char *home = getenv("CUDA_HOME");
    if (home && *home) snprintf(dirs, sizeof dirs, "%s/lib64:%s/lib:", home, home);
    size_t n = strlen(dirs);
    snprintf(dirs + n, sizeof dirs - n, "/usr/local/cuda/lib64:/usr/local/cuda/lib");
  }
  searched[0] = why[0] = 0;
  size_t used = 0;
  for (char *save = NULL, *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
    int w = snprintf(searched + used, slen - used, "%s%s", used ? ", " : "", dir);
    if (w > 0 && (size_t)w < slen - used) used += (size_t)w;
    char path[4352];
    if (!find_in_dir(lib, dir, path, sizeof path)) continue;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) {
      snprintf(used_path, ulen, "%s", path);
      return h;
    }
    snprintf(why, wlen, "%s", dlerror());
  }
  if (override) return NULL;
  for (int i = 0; i < 6 && lib->sonames[i]; i++) {
    void *h = dlopen(lib->sonames[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      snprintf(used_path, ulen, "%s", lib_path(h));
      return h;
    }
    const char *e = dlerror();
    /* a library that exists but does not load says why */
    if (e && !strstr(e, "No such file")) snprintf(why, wlen, "%s", e);
  }
  int w = snprintf(searched + used, slen - used, "%sthe dynamic loader's path", used ? ", " : "");
  (void)w;
  return NULL;
}

/* symbol, else fallback (NULL: none) */
static void *lookup(void *h, const char *symbol, const char *fallback) {
  void *p = dlsym(h, symbol);
  return p || !fallback ? p : dlsym(h, fallback);
}

static int resolve(cg_cuda_api *api, const lib_info *lib, void *h, const char *path, char *err, size_t errlen) {
#define CG_CUDA_FN(which, name, symbol, fallback, ret, params)                                      \
  if (CG_CUDA_LIB_##which == lib->lib) {                                                           \
    void *p = lookup(h, symbol, fallback);                                                         \
    if (!p) {                                                                                      \
      cg_errf(err, errlen, "%s has no %s: the %s is too old for tgc", path, symbol, lib->what);        \
      return -1;                                                                                   \
    }                                                                                              \
    *(void **)&api->name = p;                                                                      \
  }
#include "cuda_api.def"
#undef CG_CUDA_FN
  return 0;
}

int rt_cuda_load(cg_cuda_api *api, unsigned libs, char *err, size_t errlen) {
  api->backend = "cuda";
  for (size_t i = 0; i < NLIBS; i++) {
    const lib_info *lib = &libs_known[i];
    if (!(libs & lib->lib) || (api->libs & lib->lib)) continue;
    char searched[2048], why[1024], path[4400];
    void *h = open_lib(lib, path, sizeof path, searched, sizeof searched, why, sizeof why);
    if (!h) {
      if (lib->slot == SLOT_DRIVER && !why[0]) cg_errf(err, errlen, "no CUDA driver: libcuda.so.1 not found");
      else if (lib->slot == SLOT_DRIVER) cg_errf(err, errlen, "no CUDA driver: libcuda.so.1 does not load: %s", why);
      else if (why[0]) cg_errf(err, errlen, "no %s: %s does not load: %s", lib->what, lib->stem, why);
      else cg_errf(err, errlen, "no %s: %s not found (searched %s)", lib->what, lib->stem, searched);
      return -1;
    }
    if (resolve(api, lib, h, path, err, errlen) != 0) return -1; /* left loaded: see rt_cuda_unload */
    api->handles[lib->slot] = h;
    api->libs |= lib->lib;
  }
  return 0;
}

/* The libraries stay mapped: NVIDIA's keep static state (their C++
 * runtime's pools, atexit handlers) that is lost, or run after unmapping,
 * when they are dlclosed. A later rt_cuda_load gets the same handles back. */
void rt_cuda_unload(cg_cuda_api *api) { memset(api, 0, sizeof *api); }

int rt_cuda_check_driver_version(int driver_version, int nvrtc_major, int nvrtc_minor, char *err, size_t errlen) {
  if (driver_version / 1000 >= nvrtc_major) return 0;
  char have[32];
  cg_cuda_version_text(driver_version, have, sizeof have);
  cg_errf(err, errlen, "CUDA driver too old: it supports %s, but NVRTC %d.%d needs a driver for CUDA %d.0 or newer", have,
       nvrtc_major, nvrtc_minor, nvrtc_major);
  return -1;
}

int rt_cuda_open_device(const cg_cuda_api *api, int ordinal, rt_cuda_device *dev, char *err, size_t errlen) {
  memset(dev, 0, sizeof *dev);
  if (!(api->libs & CG_CUDA_LIB_DRIVER)) {
    cg_errf(err, errlen, "no CUDA driver loaded");
    return -1;
  }
  cg_cu_result r = api->cuInit(0);
  if (r == CG_CUDA_ERROR_NO_DEVICE) {
    cg_errf(err, errlen, "no CUDA device");
    return -1;
  }
  if (cg_cu_check(api, r, "cuInit", NULL, err, errlen)) return -1;
  if (CG_CU(api, NULL, err, errlen, cuDriverGetVersion, &dev->driver_version)) return -1;
  if (api->libs & CG_CUDA_LIB_NVRTC) {
    int major = 0, minor = 0;
    if (CG_NVRTC(api, NULL, err, errlen, nvrtcVersion, &major, &minor)) return -1;
    if (rt_cuda_check_driver_version(dev->driver_version, major, minor, err, errlen)) return -1;
  }
  int count = 0;
  if (CG_CU(api, NULL, err, errlen, cuDeviceGetCount, &count)) return -1;
  if (count == 0) {
    cg_errf(err, errlen, "no CUDA device");
    return -1;
  }
  if (ordinal < 0 || ordinal >= count) {
    cg_errf(err, errlen, "CUDA device %d does not exist (%d device%s: 0 to %d)", ordinal, count, count == 1 ? "" : "s",
         count - 1);
    return -1;
  }
  dev->ordinal = ordinal;
  if (CG_CU(api, NULL, err, errlen, cuDeviceGet, &dev->device, ordinal) ||
      CG_CU(api, NULL, err, errlen, cuDeviceGetName, dev->name, (int)sizeof dev->name, dev->device) ||
      CG_CU(api, NULL, err, errlen, cuDeviceGetAttribute, &dev->cc_major,
            CG_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev->device) ||
      CG_CU(api, NULL, err, errlen, cuDeviceGetAttribute, &dev->cc_minor,
            CG_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev->device) ||
      CG_CU(api, NULL, err, errlen, cuDeviceTotalMem, &dev->total_bytes, dev->device) ||
      CG_CU(api, NULL, err, errlen, cuDevicePrimaryCtxRetain, &dev->context, dev->device))
    return -1;
  if (CG_CU(api, NULL, err, errlen, cuCtxSetCurrent, dev->context)) {
    api->cuDevicePrimaryCtxRelease(dev->device);
    dev->context = NULL;
    return -1;
  }
  snprintf(dev->arch, sizeof dev->arch, "sm_%d%d", dev->cc_major, dev->cc_minor);
  return 0;
}

void rt_cuda_close_device(const cg_cuda_api *api, rt_cuda_device *dev) {
  if (dev->context) {
    api->cuCtxSetCurrent(NULL);
    api->cuDevicePrimaryCtxRelease(dev->device);
  }
  dev->context = NULL;
}
