/* codegen/codegen.h — the codegen layer's public header: compiling CUDA C
 * through the entry-point table's NVRTC (real or emulated), the disk cache
 * of compiled code, and the prelude every generated kernel includes.
 * (Lowering and CUDA C emission, issue 12's cg_lower, come next and go
 * here too.) May include ir/ and passes/, never runtime/.
 *
 *   sha256.c   SHA-256: cache keys and entry checksums
 *   cache.c    the disk cache ($TGC_CACHE_DIR, default ~/.cache/tgc)
 *   nvrtc.c    compile a source for an arch; ptxas info per kernel
 *   cuda_api.c the checks every CUDA call goes through (cuda_api.h)
 *   prelude/   tgc_cuda.h (device side), emu.h + emu_abi.h (the CPU side)
 */
#ifndef TGC_CODEGEN_H
#define TGC_CODEGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"

/* ===================================================================== */
/* sha256.c                                                               */
/* ===================================================================== */
typedef struct {
  uint8_t bytes[32];
} cg_hash;

typedef struct {
  uint32_t h[8];
  uint64_t bytes;
  uint8_t buf[64];
  size_t fill;
} cg_sha256;

void cg_sha256_init(cg_sha256 *s);
void cg_sha256_update(cg_sha256 *s, const void *data, size_t n);
void cg_sha256_final(cg_sha256 *s, cg_hash *out);
/* A length-prefixed field: the concatenation of fields is unambiguous. */
void cg_sha256_field(cg_sha256 *s, const void *data, size_t n);
void cg_hash_hex(const cg_hash *h, char out[65]);

/* ===================================================================== */
/* cache.c — compiled code on disk                                        */
/* ===================================================================== */
/* One file per entry, DIR/cuda/<64 hex digits of the key>.tgcc, holding
 * tagged blobs (image, PTX, log) and a SHA-256 of the whole file. Writes go
 * to a unique temporary name in the same directory and are renamed into
 * place, so readers see an old entry, a new one, or none. An entry that
 * fails any check (magic, version, key, sizes, checksum) is removed,
 * counted as corrupt and treated as a miss: it is recompiled, never
 * trusted. */
typedef struct cg_cache cg_cache;

typedef struct {
  int64_t compiles;     /* sources compiled (cg_nvrtc_compile) */
  int64_t hits;         /* entries found and verified */
  int64_t misses;       /* lookups that found no (usable) entry */
  int64_t corrupt;      /* entries rejected and removed */
  int64_t stores;       /* entries written */
  int64_t store_failures; /* entries that could not be written (compiling still succeeds) */
} cg_cache_stats;

typedef struct {
  uint32_t tag;         /* what the blob is (the caller's numbering) */
  const void *data;
  size_t size;
} cg_blob;

/* dir NULL: $TGC_CACHE_DIR if set, else $HOME/.cache/tgc. Creates the
 * directories. NULL with a message in err when it cannot. */
cg_cache *cg_cache_open(const char *dir, char *err, size_t errlen);
void cg_cache_free(cg_cache *c);
const char *cg_cache_dir(const cg_cache *c);
cg_cache_stats *cg_cache_stats_of(cg_cache *c);
/* The entry file of key (whether or not it exists). */
void cg_cache_entry_path(const cg_cache *c, const cg_hash *key, char *buf, size_t len);
/* A hit returns the number of blobs (<= max) pointing into *storage, which
 * the caller frees; a miss returns 0. */
int cg_cache_get(cg_cache *c, const cg_hash *key, cg_blob *blobs, int max, void **storage);
/* Writes the entry; 0 or -1 with err (the stats count either). */
int cg_cache_put(cg_cache *c, const cg_hash *key, const cg_blob *blobs, int n, char *err, size_t errlen);

/* ===================================================================== */
/* nvrtc.c — CUDA C to a loadable image                                   */
/* ===================================================================== */
/* What ptxas says about one kernel (-1: not reported; the emulator reports
 * shared memory only). */
typedef struct {
  char name[128];
  char arch[16];
  int registers;
  int barriers;
  long long smem_bytes;         /* static shared memory */
  long long stack_bytes;        /* stack frame */
  long long spill_store_bytes;
  long long spill_load_bytes;
} cg_kernel_info;

typedef struct {
  const char *name;       /* the file name messages show, e.g. "model.cu" */
  const char *source;     /* CUDA C; includes "tgc_cuda.h" */
  const char *arch;       /* "sm_80", "sm_90", ... */
  const char *const *options;  /* extra NVRTC options (e.g. "-DTILE=64"), or NULL */
  int noptions;
} cg_cuda_source;

typedef struct {
  void *image;            /* cubin, or the emulator's module: cuModuleLoadData's argument */
  size_t image_size;
  char *ptx;              /* PTX text ("" from the emulator) */
  size_t ptx_size;
  char *log;              /* the compiler's log (ptxas info lines) */
  cg_kernel_info *kernels;
  int nkernels;
  bool cached;            /* came from the disk cache */
  cg_hash key;
} cg_cuda_binary;

/* Compiles src through api's NVRTC (real or emulated) with the options tgc
 * always passes (--gpu-architecture, --ptxas-options=-v, -std=c++17,
 * -lineinfo) and the prelude as in-memory headers; looks the result up in
 * cache first when cache is not NULL (keyed by source, prelude, arch,
 * options, NVRTC version and api->build_id) and stores it after. A failed
 * compile is a code generator bug: the source and log are written to
 * DIR/failed/ (DIR = the cache's, else $TMPDIR or /tmp) and err names the
 * first error and both paths. */
int cg_nvrtc_compile(const cg_cuda_api *api, cg_cache *cache, const cg_cuda_source *src, cg_cuda_binary *out,
                     char *err, size_t errlen);
void cg_cuda_binary_free(cg_cuda_binary *b);
/* Parses ptxas -v output (as NVRTC returns it in the log) into one entry
 * per "Compiling entry function" (malloc'd array, caller frees). Returns
 * the number of kernels. */
int cg_ptxas_info_parse(const char *log, cg_kernel_info **kernels);
/* The info of the kernel named name, or NULL. */
const cg_kernel_info *cg_cuda_binary_kernel(const cg_cuda_binary *b, const char *name);

/* ===================================================================== */
/* prelude/ — compiled into the binary (prelude.c, generated)             */
/* ===================================================================== */
typedef struct {
  const char *name;       /* "tgc_cuda.h", "emu.h", "emu_abi.h" */
  const char *text;
} cg_prelude_file;

extern const cg_prelude_file cg_prelude_files[];
extern const int cg_prelude_count;

#endif
