/* codegen/nvrtc.c — CUDA C to a loadable image through the table's NVRTC.
 *
 * The same code drives the real NVRTC and the emulator's (which compiles
 * with the host C++ compiler): create a program with the prelude as
 * in-memory headers, compile for one arch with ptxas verbose output, fetch
 * the PTX, the CUBIN and the log, and parse the per-kernel resource lines
 * (registers, barriers, shared memory, stack, spills) out of the log.
 *
 * The result is cached under SHA-256(tag, build id, NVRTC version, arch,
 * options, source, prelude): a second compile of the same source compiles
 * nothing (cache stats count compiles and hits), and an entry that fails
 * verification is recompiled.
 *
 * A failed compile is a code generator bug: the source and the log are
 * written to DIR/failed/NAME-<hash>.cu / .log and the error names the
 * first error line and both files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "codegen.h"

enum { BLOB_IMAGE = 1, BLOB_PTX = 2, BLOB_LOG = 3 };

/* Options tgc always passes, after --gpu-architecture. */
static const char *const fixed_options[] = {"--ptxas-options=-v", "-std=c++17", "-lineinfo"};
#define NFIXED ((int)(sizeof fixed_options / sizeof fixed_options[0]))

/* ---- ptxas info ---- */

static cg_kernel_info *find_kernel(cg_kernel_info *k, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(k[i].name, name) == 0) return &k[i];
  return NULL;
}

/* The text between the first two single quotes after `after` in line. */
static int quoted(const char *line, const char *after, char *out, size_t len) {
  const char *p = strstr(line, after);
  if (!p) return 0;
  p = strchr(p + strlen(after), '\'');
  if (!p) return 0;
  const char *e = strchr(p + 1, '\'');
  if (!e || (size_t)(e - p - 1) >= len) return 0;
  memcpy(out, p + 1, (size_t)(e - p - 1));
  out[e - p - 1] = 0;
  return 1;
}

/* The number in front of `unit` in line ("1024 bytes smem" -> 1024), or -1. */
static long long number_before(const char *line, const char *unit) {
  const char *p = strstr(line, unit);
  if (!p) return -1;
  while (p > line && p[-1] == ' ') p--;
  const char *e = p;
  while (p > line && p[-1] >= '0' && p[-1] <= '9') p--;
  if (p == e) return -1;
  return strtoll(p, NULL, 10);
}

int cg_ptxas_info_parse(const char *log, cg_kernel_info **kernels) {
  cg_kernel_info *k = NULL;
  int n = 0, cap = 0;
  cg_kernel_info *current = NULL;  /* the entry function being compiled */
  char props[128] = "";            /* whose "Function properties" the next line is */
  for (const char *line = log; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[512];
    if (len >= sizeof buf) len = sizeof buf - 1;
    memcpy(buf, line, len);
    buf[len] = 0;
    char name[128], arch[16];
    if ((strstr(buf, "Compiling entry function") && quoted(buf, "entry function", name, sizeof name) &&
         quoted(buf, "' for", arch, sizeof arch)) ||
        (strncmp(buf, "tgc-emu info", 12) == 0 && quoted(buf, "Function", name, sizeof name) &&
         quoted(buf, "' for", arch, sizeof arch))) {
      if (n == cap) {
        cap = cap ? 2 * cap : 8;
        cg_kernel_info *nk = realloc(k, (size_t)cap * sizeof *k);
        if (!nk) break;
        k = nk;
      }
      current = &k[n++];
      memset(current, 0, sizeof *current);
      snprintf(current->name, sizeof current->name, "%s", name);
      snprintf(current->arch, sizeof current->arch, "%s", arch);
      current->registers = current->barriers = -1;
      current->stack_bytes = current->spill_store_bytes = current->spill_load_bytes = -1;
      current->smem_bytes = 0;
      if (strncmp(buf, "tgc-emu info", 12) == 0) current->smem_bytes = number_before(buf, "bytes smem");
    } else if (strstr(buf, "Function properties for ")) {
      snprintf(props, sizeof props, "%s", strstr(buf, "Function properties for ") + 24);
    } else if (strstr(buf, "bytes stack frame")) {
      /* An entry function's own line, or a called function's: its spills
       * count against the kernel being compiled (never under-report). */
      cg_kernel_info *t = find_kernel(k, n, props);
      long long stack = number_before(buf, "bytes stack frame");
      long long st = number_before(buf, "bytes spill stores"), ld = number_before(buf, "bytes spill loads");
      if (t) {  /* the kernel's own line: add to what called functions spilled */
        t->stack_bytes = stack;
        t->spill_store_bytes = st + (t->spill_store_bytes > 0 ? t->spill_store_bytes : 0);
        t->spill_load_bytes = ld + (t->spill_load_bytes > 0 ? t->spill_load_bytes : 0);
      } else if (current) {
        if (st > 0) current->spill_store_bytes = (current->spill_store_bytes > 0 ? current->spill_store_bytes : 0) + st;
        if (ld > 0) current->spill_load_bytes = (current->spill_load_bytes > 0 ? current->spill_load_bytes : 0) + ld;
      }
    } else if (current && strstr(buf, "Used ") && strstr(buf, " registers")) {
      current->registers = (int)number_before(buf, "registers");
      long long bar = number_before(buf, "barriers");
      current->barriers = bar < 0 ? 0 : (int)bar;
      long long smem = number_before(buf, "bytes smem");
      current->smem_bytes = smem < 0 ? 0 : smem;
    }
    line = end ? end + 1 : NULL;
  }
  *kernels = k;
  return n;
}

const cg_kernel_info *cg_cuda_binary_kernel(const cg_cuda_binary *b, const char *name) {
  return find_kernel(b->kernels, b->nkernels, name);
}

void cg_cuda_binary_free(cg_cuda_binary *b) {
  if (!b) return;
  free(b->image);
  free(b->ptx);
  free(b->log);
  free(b->kernels);
  memset(b, 0, sizeof *b);
}

/* ---- compiling ---- */

/* "sm_80" / "sm_90a" -> 80 / 90; 0 when malformed. */
static int arch_number(const char *arch) {
  if (strncmp(arch, "sm_", 3) != 0) return 0;
  char *end;
  long v = strtol(arch + 3, &end, 10);
  if (end == arch + 3 || (*end && strcmp(end, "a") != 0) || v < 10 || v > 1000) return 0;
  return (int)v;
}

static int check_arch(const cg_cuda_api *api, const char *arch, int major, int minor, char *err, size_t errlen) {
  int want = arch_number(arch);
  if (!want) {
    cg_errf(err, errlen, "bad CUDA architecture '%s' (expected sm_XY, e.g. sm_80 or sm_90)", arch);
    return -1;
  }
  int count = 0;
  if (CG_NVRTC(api, NULL, err, errlen, nvrtcGetNumSupportedArchs, &count)) return -1;
  int *archs = malloc((size_t)(count > 0 ? count : 1) * sizeof *archs);
  if (!archs) {
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  if (CG_NVRTC(api, NULL, err, errlen, nvrtcGetSupportedArchs, archs)) {
    free(archs);
    return -1;
  }
  int ok = 0;
  char list[512] = "";
  size_t used = 0;
  for (int i = 0; i < count; i++) {
    if (archs[i] == want) ok = 1;
    int w = snprintf(list + used, sizeof list - used, "%ssm_%d", i ? ", " : "", archs[i]);
    if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
  }
  free(archs);
  if (!ok) {
    cg_errf(err, errlen, "NVRTC %d.%d cannot compile for %s (it supports %s)", major, minor, arch, list);
    return -1;
  }
  return 0;
}

static cg_hash compile_key(const cg_cuda_api *api, const cg_cuda_source *src, const char *const *options,
                           int noptions, int major, int minor) {
  cg_sha256 s;
  cg_sha256_init(&s);
  static const char tag[] = "tgc-cuda-compile-1";
  cg_sha256_field(&s, tag, sizeof tag - 1);
  const char *build = api->build_id ? api->build_id() : "nvrtc";
  cg_sha256_field(&s, build, strlen(build));
  char version[32];
  snprintf(version, sizeof version, "%d.%d", major, minor);
  cg_sha256_field(&s, version, strlen(version));
  for (int i = 0; i < noptions; i++) cg_sha256_field(&s, options[i], strlen(options[i]));
  cg_sha256_field(&s, src->source, strlen(src->source));
  for (int i = 0; i < cg_prelude_count; i++) {
    cg_sha256_field(&s, cg_prelude_files[i].name, strlen(cg_prelude_files[i].name));
    cg_sha256_field(&s, cg_prelude_files[i].text, strlen(cg_prelude_files[i].text));
  }
  cg_hash h;
  cg_sha256_final(&s, &h);
  return h;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  size_t n = strlen(text);
  int ok = fwrite(text, 1, n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* The static shared memory ptxas accepts without an opt-in. */
#define STATIC_SMEM_LIMIT 49152

/* The first line of the log that says "error" (any case: NVRTC writes
 * "error:", ptxas "ptxas error"). NVRTC 13 drops ptxas's own complaint
 * about too much static shared memory from the log, leaving only the
 * resource lines: that case is named from them. */
static void first_error(const char *log, char *out, size_t len) {
  const char *p = NULL;
  for (const char *c = log; *c && !p; c++)
    if (strncasecmp(c, "error", 5) == 0) p = c;
  if (!p) {
    cg_kernel_info *k = NULL;
    int n = cg_ptxas_info_parse(log, &k);
    snprintf(out, len, "the log names no error");
    for (int i = 0; i < n; i++)
      if (k[i].smem_bytes > STATIC_SMEM_LIMIT) {
        snprintf(out, len, "kernel %s uses %lld bytes of static shared memory, more than ptxas allows (%d)",
                 k[i].name, k[i].smem_bytes, STATIC_SMEM_LIMIT);
        break;
      }
    free(k);
    return;
  }
  const char *line = p;
  while (line > log && line[-1] != '\n') line--;
  size_t n = strcspn(line, "\n");
  if (n >= len) n = len - 1;
  memcpy(out, line, n);
  out[n] = 0;
}

/* Keeps the source and log of a failed compile; err says where. */
static void report_failure(cg_cache *cache, const cg_cuda_source *src, const cg_hash *key, const char *log,
                           const char *what, char *err, size_t errlen) {
  const char *base = cache ? cg_cache_dir(cache) : getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  char dir[4096], stem[256], src_path[4400], log_path[4400], hex[65], first[512];
  snprintf(dir, sizeof dir, "%s/failed", base);
  mkdir(dir, 0755);
  snprintf(stem, sizeof stem, "%s", src->name ? src->name : "kernels.cu");
  char *dot = strrchr(stem, '.');
  if (dot) *dot = 0;
  for (char *c = stem; *c; c++)
    if (*c == '/') *c = '_';
  cg_hash_hex(key, hex);
  snprintf(src_path, sizeof src_path, "%s/%s-%.8s.cu", dir, stem, hex);
  snprintf(log_path, sizeof log_path, "%s/%s-%.8s.log", dir, stem, hex);
  first_error(log, first, sizeof first);
  int kept = write_text(src_path, src->source) == 0;
  kept = write_text(log_path, log) == 0 && kept;
  if (kept)
    cg_errf(err, errlen, "%s %s for %s (a tgc code generator bug): %s; source kept in %s, log in %s", what,
         src->name ? src->name : "kernels.cu", src->arch, first, src_path, log_path);
  else
    cg_errf(err, errlen, "%s %s for %s (a tgc code generator bug): %s; could not keep the source in %s: %s", what,
         src->name ? src->name : "kernels.cu", src->arch, first, dir, strerror(errno));
}

/* Copies NVRTC's output of one kind (size then bytes) into a malloc'd buffer. */
static int fetch(const cg_cuda_api *api, cg_nvrtc_program prog, int kind, char **out, size_t *size, char *err,
                 size_t errlen) {
  size_t n = 0;
  cg_nvrtc_result r;
  const char *call;
  if (kind == BLOB_PTX) call = "nvrtcGetPTXSize", r = api->nvrtcGetPTXSize(prog, &n);
  else if (kind == BLOB_IMAGE) call = "nvrtcGetCUBINSize", r = api->nvrtcGetCUBINSize(prog, &n);
  else call = "nvrtcGetProgramLogSize", r = api->nvrtcGetProgramLogSize(prog, &n);
  if (cg_nvrtc_check(api, r, call, NULL, err, errlen)) return -1;
  char *buf = calloc(n + 1, 1);
  if (!buf) {
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  if (kind == BLOB_PTX) call = "nvrtcGetPTX", r = n ? api->nvrtcGetPTX(prog, buf) : 0;
  else if (kind == BLOB_IMAGE) call = "nvrtcGetCUBIN", r = n ? api->nvrtcGetCUBIN(prog, buf) : 0;
  else call = "nvrtcGetProgramLog", r = n ? api->nvrtcGetProgramLog(prog, buf) : 0;
  if (cg_nvrtc_check(api, r, call, NULL, err, errlen)) {
    free(buf);
    return -1;
  }
  /* sizes of text include the terminating NUL */
  if (kind != BLOB_IMAGE) n = strlen(buf);
  *out = buf;
  *size = n;
  return 0;
}

static int compile_now(const cg_cuda_api *api, cg_cache *cache, const cg_cuda_source *src,
                       const char *const *options, int noptions, const cg_hash *key, cg_cuda_binary *out, char *err,
                       size_t errlen) {
  const char *names[16], *texts[16];
  for (int i = 0; i < cg_prelude_count && i < 16; i++) names[i] = cg_prelude_files[i].name, texts[i] = cg_prelude_files[i].text;
  cg_nvrtc_program prog = NULL;
  if (CG_NVRTC(api, src->name, err, errlen, nvrtcCreateProgram, &prog, src->source, src->name ? src->name : "kernels.cu",
               cg_prelude_count, texts, names))
    return -1;
  if (cache) cg_cache_count_compile(cache);
  cg_nvrtc_result r = api->nvrtcCompileProgram(prog, noptions, options);
  int rc = -1;
  size_t log_size = 0;
  if (fetch(api, prog, BLOB_LOG, &out->log, &log_size, err, errlen) == 0) {
    if (r == CG_NVRTC_ERROR_COMPILATION) {
      report_failure(cache, src, key, out->log, "NVRTC could not compile", err, errlen);
    } else if (r != CG_NVRTC_SUCCESS) {
      /* an option NVRTC refuses, ...: the log says which */
      cg_nvrtc_check(api, r, "nvrtcCompileProgram", src->name, err, errlen);
      size_t used = strlen(err), first = strcspn(out->log, "\n");
      if (first) snprintf(err + used, errlen - used, ": %.*s", (int)first, out->log);
    } else if (fetch(api, prog, BLOB_PTX, &out->ptx, &out->ptx_size, err, errlen) == 0 &&
               fetch(api, prog, BLOB_IMAGE, (char **)&out->image, &out->image_size, err, errlen) == 0) {
      if (out->image_size == 0) cg_errf(err, errlen, "NVRTC produced no CUBIN for %s (%s)", src->name, src->arch);
      else rc = 0;
    }
  }
  api->nvrtcDestroyProgram(&prog);
  if (rc == 0 && cache) {
    cg_blob blobs[3] = {{BLOB_IMAGE, out->image, out->image_size},
                        {BLOB_PTX, out->ptx, out->ptx_size},
                        {BLOB_LOG, out->log, strlen(out->log)}};
    char ignored[256];
    cg_cache_put(cache, key, blobs, 3, ignored, sizeof ignored); /* a cache that cannot be written only costs time */
  }
  return rc;
}

/* Fills out from a verified cache entry. */
static int from_cache(cg_cache *cache, const cg_hash *key, cg_cuda_binary *out) {
  cg_blob blobs[3];
  void *storage = NULL;
  int n = cg_cache_get(cache, key, blobs, 3, &storage);
  if (n != 3 || blobs[0].tag != BLOB_IMAGE || blobs[1].tag != BLOB_PTX || blobs[2].tag != BLOB_LOG) {
    free(storage);
    return 0;
  }
  out->image = malloc(blobs[0].size ? blobs[0].size : 1);
  out->ptx = malloc(blobs[1].size + 1);
  out->log = malloc(blobs[2].size + 1);
  if (!out->image || !out->ptx || !out->log) {
    free(storage);
    cg_cuda_binary_free(out);
    return 0;
  }
  memcpy(out->image, blobs[0].data, blobs[0].size);
  out->image_size = blobs[0].size;
  memcpy(out->ptx, blobs[1].data, blobs[1].size);
  out->ptx[blobs[1].size] = 0;
  out->ptx_size = blobs[1].size;
  memcpy(out->log, blobs[2].data, blobs[2].size);
  out->log[blobs[2].size] = 0;
  free(storage);
  return 1;
}

int cg_nvrtc_compile(const cg_cuda_api *api, cg_cache *cache, const cg_cuda_source *src, cg_cuda_binary *out,
                     char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (!(api->libs & CG_CUDA_LIB_NVRTC)) {
    cg_errf(err, errlen, "no NVRTC loaded: cannot compile CUDA C");
    return -1;
  }
  int major = 0, minor = 0;
  if (CG_NVRTC(api, NULL, err, errlen, nvrtcVersion, &major, &minor)) return -1;
  if (check_arch(api, src->arch, major, minor, err, errlen)) return -1;
  int noptions = 1 + NFIXED + src->noptions;
  const char **options = malloc((size_t)noptions * sizeof *options);
  char arch_option[64];
  if (!options) {
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  snprintf(arch_option, sizeof arch_option, "--gpu-architecture=%s", src->arch);
  options[0] = arch_option;
  for (int i = 0; i < NFIXED; i++) options[1 + i] = fixed_options[i];
  for (int i = 0; i < src->noptions; i++) options[1 + NFIXED + i] = src->options[i];
  out->key = compile_key(api, src, options, noptions, major, minor);
  int rc = 0;
  if (cache && from_cache(cache, &out->key, out)) out->cached = true;
  else rc = compile_now(api, cache, src, options, noptions, &out->key, out, err, errlen);
  free(options);
  if (rc == 0) out->nkernels = cg_ptxas_info_parse(out->log, &out->kernels);
  else {
    cg_hash key = out->key;
    cg_cuda_binary_free(out);
    out->key = key;
  }
  return rc;
}
