/* runtime/cuda_emu/nvrtc.c — the emulator's NVRTC: the same CUDA C,
 * compiled by the host C++ compiler into a shared object.
 *
 * nvrtcCompileProgram writes the source and the in-memory headers (the
 * prelude) into a fresh directory, runs
 *   CXX -std=c++17 -O2 -fPIC -shared -fvisibility=hidden -fno-gnu-unique
 *       -DTGC_EMU_ARCH=<sm> [-DTGC_RACECHECK] [the build's -fsanitize flags]
 *       [the program's -D/-U/-I options] -I. -o module.so -x c++ NAME
 * in it (CXX: the configuration's, else $TGC_EMU_CXX, else the compiler tgc
 * was built with), keeps the compiler's output as the program log, then
 * loads the result once to do what ptxas would: refuse more than 48 KiB of
 * static shared memory per kernel, and (with --ptxas-options=-v) write one
 * info line per kernel. The "CUBIN" is the shared object behind an
 * emu_image_header; the "PTX" is a one-line note. Options NVRTC knows but
 * that mean nothing here (-lineinfo, --use_fast_math, --fmad=...) are
 * accepted; unknown ones fail as NVRTC's do. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_internal.h"

extern char **environ;

#define EMU_NVRTC_MAJOR 13
#define EMU_NVRTC_MINOR 0
#define STATIC_SMEM_LIMIT 49152

static const int supported_archs[] = {80, 86, 89, 90};
static const char no_ptx[] = "// tgc cuda-emu: this module was compiled for the CPU; there is no PTX\n";

struct _nvrtcProgram {
  char *src, *name;
  int nheaders;
  char **headers, **include_names;
  char *log;
  unsigned char *image;
  size_t image_size;
  bool compiled;
};

const char *rt_emu_nvrtcGetErrorString(cg_nvrtc_result r) {
  const char *name = cg_nvrtc_result_name(r);
  return name ? name : "NVRTC_ERROR unknown";
}

cg_nvrtc_result rt_emu_nvrtcVersion(int *major, int *minor) {
  rt_emu_set_detail("%s", "");
  *major = EMU_NVRTC_MAJOR, *minor = EMU_NVRTC_MINOR;
  return CG_NVRTC_SUCCESS;
}

cg_nvrtc_result rt_emu_nvrtcGetNumSupportedArchs(int *count) {
  rt_emu_set_detail("%s", "");
  *count = (int)(sizeof supported_archs / sizeof supported_archs[0]);
  return CG_NVRTC_SUCCESS;
}

cg_nvrtc_result rt_emu_nvrtcGetSupportedArchs(int *archs) {
  rt_emu_set_detail("%s", "");
  memcpy(archs, supported_archs, sizeof supported_archs);
  return CG_NVRTC_SUCCESS;
}

static void program_free(struct _nvrtcProgram *p) {
  if (!p) return;
  free(p->src), free(p->name), free(p->log), free(p->image);
  for (int i = 0; i < p->nheaders; i++) free(p->headers[i]), free(p->include_names[i]);
  free(p->headers), free(p->include_names);
  free(p);
}

cg_nvrtc_result rt_emu_nvrtcCreateProgram(cg_nvrtc_program *prog, const char *src, const char *name, int nheaders,
                                              const char *const *headers, const char *const *include_names) {
  rt_emu_set_detail("%s", "");
  if (!prog || !src || nheaders < 0 || (nheaders > 0 && (!headers || !include_names)))
    return CG_NVRTC_ERROR_INVALID_INPUT;
  struct _nvrtcProgram *p = calloc(1, sizeof *p);
  if (!p) return CG_NVRTC_ERROR_OUT_OF_MEMORY;
  p->src = strdup(src);
  p->name = strdup(name && *name ? name : "default_program");
  p->headers = calloc((size_t)nheaders + 1, sizeof *p->headers);
  p->include_names = calloc((size_t)nheaders + 1, sizeof *p->include_names);
  p->log = strdup("");
  bool ok = p->src && p->name && p->headers && p->include_names && p->log;
  for (int i = 0; ok && i < nheaders; i++) {
    p->headers[i] = strdup(headers[i]);
    p->include_names[i] = strdup(include_names[i]);
    p->nheaders = i + 1;
    ok = p->headers[i] && p->include_names[i];
  }
  if (!ok) {
    program_free(p);
    return CG_NVRTC_ERROR_OUT_OF_MEMORY;
  }
  *prog = p;
  return CG_NVRTC_SUCCESS;
}

cg_nvrtc_result rt_emu_nvrtcDestroyProgram(cg_nvrtc_program *prog) {
  rt_emu_set_detail("%s", "");
  if (!prog || !*prog) return CG_NVRTC_ERROR_INVALID_PROGRAM;
  program_free(*prog);
  *prog = NULL;
  return CG_NVRTC_SUCCESS;
}

/* ---- compiling ---- */

typedef struct {
  char *items[96];
  int n;
} argv_list;

static void add(argv_list *a, const char *s) {
  if (a->n < 94) a->items[a->n++] = strdup(s);
}

static void argv_free(argv_list *a) {
  for (int i = 0; i < a->n; i++) free(a->items[i]);
  a->n = 0;
}

static void set_log(struct _nvrtcProgram *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_log(struct _nvrtcProgram *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0) s = NULL;
  va_end(ap);
  free(p->log);
  p->log = s ? s : strdup("");
}

static void append_log(struct _nvrtcProgram *p, const char *text) {
  size_t a = strlen(p->log), b = strlen(text);
  char *s = realloc(p->log, a + b + 1);
  if (!s) return;
  memcpy(s + a, text, b + 1);
  p->log = s;
}

/* Writes text to dir/name, making the directories of name. */
static int write_in(const char *dir, const char *name, const char *text) {
  if (strstr(name, "..") || name[0] == '/') return -1;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  for (char *s = path + strlen(dir) + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(path, 0755);
      *s = '/';
    }
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  size_t n = strlen(text);
  int ok = fwrite(text, 1, n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

static char *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
      buf[n] = 0;
      *size = (size_t)n;
    } else {
      free(buf);
      buf = NULL;
    }
  }
  fclose(f);
  return buf;
}

/* Runs argv in dir with its output into dir/compiler.log: the exit status, or -1. */
static int run_in(const char *dir, argv_list *a) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  char log[4200];
  snprintf(log, sizeof log, "%s/compiler.log", dir);
  posix_spawn_file_actions_addchdir_np(&fa, dir);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  a->items[a->n] = NULL;
  pid_t pid;
  int rc = strchr(a->items[0], '/') ? posix_spawn(&pid, a->items[0], &fa, NULL, a->items, environ)
                                    : posix_spawnp(&pid, a->items[0], &fa, NULL, a->items, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void remove_tree(const char *dir) {
  argv_list a = {.n = 0};
  add(&a, "rm");
  add(&a, "-rf");
  add(&a, dir);
  a.items[a.n] = NULL;
  pid_t pid;
  if (posix_spawnp(&pid, "rm", NULL, NULL, a.items, environ) == 0) waitpid(pid, NULL, 0);
  argv_free(&a);
}

/* The options: arch, verbose, and what goes to the compiler. */
static int parse_options(struct _nvrtcProgram *p, int n, const char *const *opts, int *arch, bool *verbose,
                         argv_list *pass) {
  for (int i = 0; i < n; i++) {
    const char *o = opts[i];
    const char *v = NULL;
    if (strncmp(o, "--gpu-architecture=", 19) == 0) v = o + 19;
    else if (strncmp(o, "-arch=", 6) == 0) v = o + 6;
    else if ((strcmp(o, "--gpu-architecture") == 0 || strcmp(o, "-arch") == 0) && i + 1 < n) v = opts[++i];
    if (v) {
      char *end;
      if (strncmp(v, "sm_", 3) != 0 || (*arch = (int)strtol(v + 3, &end, 10)) <= 0 || (*end && strcmp(end, "a"))) {
        set_log(p, "nvrtc: error: the emulator compiles for a real architecture (sm_XY), not '%s'\n", v);
        return -1;
      }
      continue;
    }
    if (strcmp(o, "--ptxas-options=-v") == 0 || strcmp(o, "--ptxas-options=--verbose") == 0) *verbose = true;
    else if (strcmp(o, "-Xptxas") == 0 && i + 1 < n) *verbose = *verbose || strcmp(opts[++i], "-v") == 0;
    else if (strncmp(o, "-D", 2) == 0 || strncmp(o, "-U", 2) == 0 || strncmp(o, "-I", 2) == 0) add(pass, o);
    else if (strncmp(o, "--define-macro=", 15) == 0) {
      char d[1024];
      snprintf(d, sizeof d, "-D%s", o + 15);
      add(pass, d);
    } else if (strncmp(o, "--include-path=", 15) == 0) {
      char d[1024];
      snprintf(d, sizeof d, "-I%s", o + 15);
      add(pass, d);
    } else if (strcmp(o, "-std=c++17") && strcmp(o, "--std=c++17") && strcmp(o, "-std=c++14") &&
               strcmp(o, "-lineinfo") && strcmp(o, "--generate-line-info") && strcmp(o, "--use_fast_math") &&
               strcmp(o, "-use_fast_math") && strncmp(o, "--fmad=", 7) && strncmp(o, "-fmad=", 6) &&
               strcmp(o, "-default-device") && strcmp(o, "--device-as-default-execution-space") &&
               strncmp(o, "--ptxas-options=", 16) && strncmp(o, "-maxrregcount=", 14) &&
               strncmp(o, "--maxrregcount=", 15)) {
      set_log(p, "nvrtc: error: unrecognized option: %s\n", o);
      return -1;
    }
  }
  return 0;
}

/* What ptxas would check and say, from the module's registry. */
static int inspect(struct _nvrtcProgram *p, const char *so_path, int arch, bool verbose) {
  void *dl = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    set_log(p, "tgc-emu error : the compiled module does not load: %s\n", dlerror());
    return -1;
  }
  tgc_emu_module_get_fn get = (tgc_emu_module_get_fn)dlsym(dl, TGC_EMU_MODULE_SYMBOL);
  const tgc_emu_module *m = get ? get() : NULL;
  int rc = 0;
  char line[512];
  if (!m || m->error) {
    snprintf(line, sizeof line, "tgc-emu error : %s\n", m ? m->error : "no " TGC_EMU_MODULE_SYMBOL " in the module");
    append_log(p, line);
    rc = -1;
  }
  for (int i = 0; m && i < m->nkernels; i++) {
    const tgc_emu_kernel *k = &m->kernels[i];
    if (k->static_smem > STATIC_SMEM_LIMIT) {
      snprintf(line, sizeof line, "ptxas error   : Entry function '%s' uses too much shared data (0x%llx bytes, 0x%x max)\n",
               k->name, k->static_smem, STATIC_SMEM_LIMIT);
      append_log(p, line);
      rc = -1;
    } else if (verbose) {
      snprintf(line, sizeof line,
               "tgc-emu info  : Function '%s' for 'sm_%d': %llu bytes smem, %d parameters (registers and spills are "
               "not emulated)\n",
               k->name, arch, k->static_smem, k->nparams);
      append_log(p, line);
    }
  }
  dlclose(dl);
  return rc;
}

cg_nvrtc_result rt_emu_nvrtcCompileProgram(cg_nvrtc_program prog, int nopts, const char *const *opts) {
  rt_emu_set_detail("%s", "");
  struct _nvrtcProgram *p = prog;
  if (!p) return CG_NVRTC_ERROR_INVALID_PROGRAM;
  if (nopts < 0 || (nopts > 0 && !opts)) return CG_NVRTC_ERROR_INVALID_INPUT;
  const rt_cuda_emu_config *cfg = rt_emu_config();
  int arch = 52; /* NVRTC's default, refused below like any arch the emulator lacks */
  bool verbose = false;
  argv_list pass = {.n = 0};
  if (parse_options(p, nopts, opts, &arch, &verbose, &pass) != 0) {
    argv_free(&pass);
    return CG_NVRTC_ERROR_INVALID_OPTION;
  }
  bool known = false;
  for (size_t i = 0; i < sizeof supported_archs / sizeof supported_archs[0]; i++) known |= supported_archs[i] == arch;
  if (!known) {
    set_log(p, "nvrtc: error: invalid value for --gpu-architecture (-arch): the emulator has sm_80, sm_86, sm_89, sm_90\n");
    argv_free(&pass);
    return CG_NVRTC_ERROR_INVALID_OPTION;
  }
  char dir[] = "/tmp/tgc-emu-XXXXXX";
  const char *tmpdir = getenv("TMPDIR");
  char dirbuf[4096];
  snprintf(dirbuf, sizeof dirbuf, "%s/tgc-emu-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  char *d = mkdtemp(dirbuf);
  if (!d) d = mkdtemp(dir);
  if (!d) {
    set_log(p, "tgc-emu error : cannot make a temporary directory: %s\n", strerror(errno));
    argv_free(&pass);
    return CG_NVRTC_ERROR_BUILTIN_OPERATION_FAILURE;
  }
  cg_nvrtc_result result = CG_NVRTC_ERROR_COMPILATION;
  bool written = write_in(d, p->name, p->src) == 0;
  for (int i = 0; written && i < p->nheaders; i++) written = write_in(d, p->include_names[i], p->headers[i]) == 0;
  if (!written) {
    set_log(p, "tgc-emu error : cannot write %s or its headers into %s\n", p->name, d);
    result = CG_NVRTC_ERROR_INVALID_INPUT;
  } else {
    argv_list a = {.n = 0};
    char flag[64];
    add(&a, cfg->cxx);
    add(&a, "-std=c++17");
    add(&a, "-O2");
    add(&a, "-fPIC");
    add(&a, "-shared");
    add(&a, "-fvisibility=hidden");
    add(&a, "-fno-gnu-unique");
    snprintf(flag, sizeof flag, "-DTGC_EMU_ARCH=%d", arch * 10);
    add(&a, flag);
    if (cfg->racecheck) add(&a, "-DTGC_RACECHECK=1");
    char sanitize[] = TGC_EMU_CXX_FLAGS;
    for (char *save = NULL, *f = strtok_r(sanitize, " ", &save); f; f = strtok_r(NULL, " ", &save)) add(&a, f);
    for (int i = 0; i < pass.n; i++) add(&a, pass.items[i]);
    add(&a, "-I.");
    add(&a, "-o");
    add(&a, "module.so");
    add(&a, "-x");
    add(&a, "c++");
    add(&a, p->name);
    int rc = run_in(d, &a);
    char path[4200];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/compiler.log", d);
    char *out = read_all(path, &n);
    set_log(p, "%s", out ? out : "");
    free(out);
    if (rc < 0) {
      set_log(p, "tgc-emu error : cannot run the host C++ compiler %s: %s\n", cfg->cxx, strerror(errno));
      result = CG_NVRTC_ERROR_BUILTIN_OPERATION_FAILURE;
    } else if (rc == 0) {
      snprintf(path, sizeof path, "%s/module.so", d);
      char *so = read_all(path, &n);
      if (so && inspect(p, path, arch, verbose) == 0) {
        free(p->image);
        p->image = malloc(sizeof(emu_image_header) + n);
        if (p->image) {
          emu_image_header h = {.abi_version = TGC_EMU_ABI_VERSION, .arch = (uint32_t)arch,
                                .racecheck = cfg->racecheck, .so_bytes = n};
          memcpy(h.magic, EMU_IMAGE_MAGIC, 8);
          memcpy(p->image, &h, sizeof h);
          memcpy(p->image + sizeof h, so, n);
          p->image_size = sizeof h + n;
          p->compiled = true;
          result = CG_NVRTC_SUCCESS;
        } else {
          result = CG_NVRTC_ERROR_OUT_OF_MEMORY;
        }
      }
      free(so);
    }
    argv_free(&a);
  }
  argv_free(&pass);
  remove_tree(d);
  return result;
}

cg_nvrtc_result rt_emu_nvrtcGetPTXSize(cg_nvrtc_program prog, size_t *size) {
  rt_emu_set_detail("%s", "");
  if (!prog) return CG_NVRTC_ERROR_INVALID_PROGRAM;
  if (!prog->compiled) return CG_NVRTC_ERROR_INVALID_INPUT;
  *size = sizeof no_ptx;
  return CG_NVRTC_SUCCESS;
}

cg_nvrtc_result rt_emu_nvrtcGetPTX(cg_nvrtc_program prog, char *ptx) {
  rt_emu_set_detail("%s", "");
  if (!prog) return CG_NVRTC_ERROR_INVALID_PROGRAM;
  if (!prog->compiled) return CG_NVRTC_ERROR_INVALID_INPUT;
  memcpy(ptx, no_ptx, sizeof no_ptx);
  return CG_NVRTC_SUCCESS;
}

cg_nvrtc_result rt_emu_nvrtcGetCUBINSize(cg_nvrtc_program prog, size_t *size) {
  rt_emu_set_detail("%s", "");
  if (!prog) return CG_NVRTC_ERROR_INVALID_PROGRAM;
  if (!prog->compiled) return CG_NVRTC_ERROR_INVALID_INPUT;
  *size = prog->image_size;
  return CG_NVRTC_SUCCESS;
}

cg_nvrtc_result rt_emu_nvrtcGetCUBIN(cg_nvrtc_program prog, char *cubin) {
  rt_emu_set_detail("%s", "");
  if (!prog) return CG_NVRTC_ERROR_INVALID_PROGRAM;
  if (!prog->compiled) return CG_NVRTC_ERROR_INVALID_INPUT;
  memcpy(cubin, prog->image, prog->image_size);
  return CG_NVRTC_SUCCESS;
}

cg_nvrtc_result rt_emu_nvrtcGetProgramLogSize(cg_nvrtc_program prog, size_t *size) {
  rt_emu_set_detail("%s", "");
  if (!prog) return CG_NVRTC_ERROR_INVALID_PROGRAM;
  *size = strlen(prog->log) + 1;
  return CG_NVRTC_SUCCESS;
}

cg_nvrtc_result rt_emu_nvrtcGetProgramLog(cg_nvrtc_program prog, char *log) {
  rt_emu_set_detail("%s", "");
  if (!prog) return CG_NVRTC_ERROR_INVALID_PROGRAM;
  memcpy(log, prog->log, strlen(prog->log) + 1);
  return CG_NVRTC_SUCCESS;
}

/* The cache key part: which compiler (its path, size and time, and the
 * version tgc was built with when it is that compiler), its flags, the
 * emulator ABI and racecheck. */
const char *rt_emu_build_id(void) {
  static _Thread_local char id[4096 + 512];
  const rt_cuda_emu_config *cfg = rt_emu_config();
  struct stat st;
  long long size = 0, mtime = 0;
  if (stat(cfg->cxx, &st) == 0) size = (long long)st.st_size, mtime = (long long)st.st_mtime;
  snprintf(id, sizeof id, "cuda-emu abi %d; cxx %s (%lld bytes, mtime %lld%s%s); flags '%s'; racecheck %d",
           TGC_EMU_ABI_VERSION, cfg->cxx, size, mtime, strcmp(cfg->cxx, TGC_EMU_CXX) == 0 ? ", " : "",
           strcmp(cfg->cxx, TGC_EMU_CXX) == 0 ? TGC_EMU_CXX_ID : "", TGC_EMU_CXX_FLAGS, cfg->racecheck ? 1 : 0);
  return id;
}

