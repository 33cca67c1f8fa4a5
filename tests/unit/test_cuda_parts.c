/* tests/unit/test_cuda_parts.c — codegen/parts.c: a program's kernels as
 * several translation units compiled by a pool of threads.
 *
 *   - the split: gpt tiny's training step lowered twice gives the same parts
 *     byte for byte; the parts' kernels are contiguous and cover every
 *     kernel once; each part starts with the program's header, defines
 *     (TGC_REGISTER) exactly its own kernels, and every part but the last
 *     ends at the first chunk that brings it to CG_PART_KERNELS (a chunk
 *     counting its kernels, or its KiB of text when more: the optimizer's
 *     group kernels); a program of at most
 *     CG_PART_KERNELS kernels is one part, its source unchanged;
 *   - compiling (cuda-emu: the host C++ compiler, on three threads): every
 *     kernel is found in its part's module (cuModuleLoadData +
 *     cuModuleGetFunction); a second compile of the same program compiles
 *     nothing and hits the cache once per part; a program whose one kernel
 *     changed (one constant) compiles exactly one part again;
 *   - TGC_COMPILE_THREADS: a number is taken, anything else refused by name. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "pass.h"
#include "rt_cuda.h"

/* g lowered under its memory plan (NULL: a message went to stderr). */
static cg_program *lower(const ir_graph *g) {
  pass_plan *plan = pass_memplan(g, NULL);
  char err[1024];
  cg_program *p = plan ? cg_lower(g, plan, NULL, err, sizeof err) : NULL;
  if (!p) fprintf(stderr, "cannot lower: %s\n", plan ? err : "no plan");
  pass_plan_free(plan);
  return p;
}

/* gpt tiny's training step, lowered (as tgc train --backend cuda lowers it). */
static cg_program *gpt_step(void) {
  const char *path = "examples/gpt.tg";
  ir_diag *d = ir_diag_new(stderr);
  size_t len;
  char *text = ir_read_file(path, 1 << 22, &len, d);
  fe_options fo = {.config = "tiny"};
  ir_graph *g = text ? fe_compile(path, text, len, &fo, d) : NULL;
  pass_options po = {.diag = d};
  pass_train_options to = {.opt = pass_optimizer_defaults(PASS_OPT_ADAM), .micro_batches = 1, .targets_input = -1,
                           .passes = &po};
  pass_training *t = g ? pass_build_train(g, &to) : NULL;
  cg_program *p = t ? lower(t->step) : NULL;
  pass_training_free(t);
  free(text);
  ir_diag_free(d);
  return p;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *q = strstr(s, what); q; q = strstr(q + 1, what)) n++;
  return n;
}

/* The rule of the cut: a chunk counts its kernels, or its bytes in units of
 * CG_PART_KERNEL_BYTES when more; a part ends at the first chunk that
 * brings it to per_part. */
static int weight(const cg_program *p, int ch) {
  size_t begin = ch ? p->chunks[ch - 1].end : p->header_len;
  int units = (int)((p->chunks[ch].end - begin) / CG_PART_KERNEL_BYTES);
  return units > p->chunks[ch].n_kernels ? units : p->chunks[ch].n_kernels;
}

static void check_split(const cg_program *p, const cg_part *parts, int n, int per_part) {
  CHECK(n >= 1);
  int next = 0, ch = 0;
  for (int i = 0; i < n; i++) {
    const cg_part *pt = &parts[i];
    CHECK_EQ_INT(pt->first_kernel, next);
    next = pt->first_kernel + pt->n_kernels;
    CHECK(pt->n_kernels >= 1);
    int w = 0, last_w = 0;
    while (ch < p->n_chunks && p->chunks[ch].first_kernel < next) last_w = weight(p, ch), w += last_w, ch++;
    if (i < n - 1) CHECK(w >= per_part && w - last_w < per_part);
    CHECK(strlen(pt->source) == pt->len);
    CHECK(strncmp(pt->source, p->source, p->header_len) == 0);
    CHECK_EQ_INT(count(pt->source, "\nTGC_REGISTER("), pt->n_kernels);
    for (int k = pt->first_kernel; k < next; k++) {
      char reg[200];
      snprintf(reg, sizeof reg, "\nTGC_REGISTER(%s)\n", p->kernels[k].name);
      CHECK(strstr(pt->source, reg) != NULL);
    }
  }
  CHECK_EQ_INT(next, p->n_kernels);
}

static void test_split(void) {
  cg_program *a = gpt_step(), *b = gpt_step();
  CHECK(a && b);
  if (!a || !b) return;
  cg_part *pa = NULL, *pb = NULL;
  int na = cg_program_parts(a, "gpt_step.cu", CG_PART_KERNELS, &pa);
  int nb = cg_program_parts(b, "gpt_step.cu", CG_PART_KERNELS, &pb);
  CHECK(na > 1); /* tens of kernels */
  CHECK_EQ_INT(na, nb);
  check_split(a, pa, na, CG_PART_KERNELS);
  for (int i = 0; i < na && i < nb; i++) {
    CHECK_STR(pa[i].name, pb[i].name);
    CHECK(pa[i].len == pb[i].len && memcmp(pa[i].source, pb[i].source, pa[i].len) == 0);
  }
  CHECK_STR(pa[0].name, "gpt_step.p0.cu");
  printf("gpt tiny step: %d kernels in %d parts (deterministic)\n", a->n_kernels, na);
  /* a part size beyond the program: one part, the source itself */
  cg_part *one = NULL;
  CHECK_EQ_INT(cg_program_parts(a, "gpt_step.cu", a->n_kernels, &one), 1);
  if (one) {
    CHECK_STR(one[0].name, "gpt_step.cu");
    CHECK(one[0].len == a->source_len && strcmp(one[0].source, a->source) == 0);
    CHECK_EQ_INT(one[0].n_kernels, a->n_kernels);
  }
  /* one kernel a part */
  cg_part *each = NULL;
  int ne = cg_program_parts(a, "gpt_step.cu", 1, &each);
  CHECK_EQ_INT(ne, a->n_chunks);
  check_split(a, each, ne, 1);
  cg_parts_free(each, ne);
  cg_parts_free(one, 1);
  cg_parts_free(pa, na);
  cg_parts_free(pb, nb);
  cg_program_free(a);
  cg_program_free(b);
}

/* ---- compiling on the emulator ---- */

/* Nine elementwise kernels and their constants, unfused (no passes): `scale`
 * is one constant's kernel. */
static cg_program *chain(const char *scale) {
  char text[1024];
  snprintf(text, sizeof text,
           "fn main(x: f32[64]) -> f32[64] {\n"
           "  a = exp(x)\n  b = sin(a)\n  c = b * %s\n  d = c + a\n  e = tanh(d)\n"
           "  f = e - b\n  g = abs(f)\n  h = g * 0.5\n  i = h + x\n"
           "  return i\n}\n",
           scale);
  ir_diag *d = ir_diag_new(stderr);
  fe_options fo = {0};
  ir_graph *g = fe_compile("chain.tg", text, strlen(text), &fo, d);
  CHECK(g != NULL);
  cg_program *p = g ? lower(g) : NULL;
  ir_graph_free(g);
  ir_diag_free(d);
  return p;
}

enum { PER_PART = 3, THREADS = 3 };

/* Compiles p in parts; loads every part and finds each kernel in it. The
 * number of parts, or -1. */
static int compile_and_find(const cg_cuda_api *api, cg_cache *cache, const rt_cuda_device *dev, const cg_program *p) {
  cg_part *parts = NULL;
  int n = cg_program_parts(p, "chain_main.cu", PER_PART, &parts);
  CHECK(n > 1);
  cg_cuda_binary *bins = calloc((size_t)(n > 0 ? n : 1), sizeof *bins);
  char err[2048];
  int rc = n > 0 && bins ? cg_nvrtc_compile_parts(api, cache, "sm_80", parts, n, THREADS, bins, err, sizeof err) : -1;
  if (rc) fprintf(stderr, "compile: %s\n", err);
  CHECK_EQ_INT(rc, 0);
  int found = 0;
  for (int i = 0; rc == 0 && i < n; i++) {
    cg_cu_module m = NULL;
    CHECK_EQ_INT(CG_CU(api, NULL, err, sizeof err, cuModuleLoadData, &m, bins[i].image), 0);
    for (int k = parts[i].first_kernel; m && k < parts[i].first_kernel + parts[i].n_kernels; k++) {
      cg_cu_function f = NULL;
      int r = CG_CU(api, NULL, err, sizeof err, cuModuleGetFunction, &f, m, p->kernels[k].name);
      if (r) fprintf(stderr, "%s: %s\n", p->kernels[k].name, err);
      CHECK_EQ_INT(r, 0);
      CHECK(cg_cuda_binary_kernel(&bins[i], p->kernels[k].name) != NULL);
      found += r == 0;
    }
    if (m) api->cuModuleUnload(m);
    cg_cuda_binary_free(&bins[i]);
  }
  (void)dev;
  CHECK_EQ_INT(found, p->n_kernels);
  free(bins);
  cg_parts_free(parts, n);
  return rc == 0 ? n : -1;
}

static void test_compile(void) {
  char dir[] = "/tmp/tgc-cuda-parts-XXXXXX", err[1024];
  CHECK(mkdtemp(dir) != NULL);
  cg_cuda_api api;
  rt_cuda_emu_config cfg;
  rt_cuda_device dev;
  if (rt_cuda_emu_config_init(&cfg, err, sizeof err) != 0 || rt_cuda_emu_load(&api, &cfg, err, sizeof err) != 0 ||
      rt_cuda_open_device(&api, 0, &dev, err, sizeof err) != 0) {
    fprintf(stderr, "cannot open the emulator: %s\n", err);
    CHECK(!"emulator");
    return;
  }
  cg_cache *cache = cg_cache_open(dir, err, sizeof err);
  CHECK(cache != NULL);
  cg_program *p = chain("2.0"), *q = chain("3.0");
  CHECK(p && q);
  if (cache && p && q) {
    const cg_cache_stats *st = cg_cache_stats_of(cache);
    int n = compile_and_find(&api, cache, &dev, p);
    CHECK_EQ_INT(st->compiles, n);
    CHECK_EQ_INT(st->hits, 0);
    CHECK_EQ_INT(compile_and_find(&api, cache, &dev, p), n); /* the same program: every part from the cache */
    CHECK_EQ_INT(st->compiles, n);
    CHECK_EQ_INT(st->hits, n);
    CHECK_EQ_INT(q->n_kernels, p->n_kernels);
    CHECK_EQ_INT(compile_and_find(&api, cache, &dev, q), n); /* one constant changed: one part compiles */
    CHECK_EQ_INT(st->compiles, n + 1);
    CHECK_EQ_INT(st->hits, 2 * n - 1);
    printf("chain: %d kernels in %d parts; compiles %lld, cache hits %lld after the three programs\n", p->n_kernels, n,
           (long long)st->compiles, (long long)st->hits);
  }
  cg_program_free(p);
  cg_program_free(q);
  cg_cache_free(cache);
  rt_cuda_close_device(&api, &dev);
  rt_cuda_emu_shutdown();
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_EQ_INT(system(cmd), 0);
}

static void test_threads(void) {
  char err[256];
  const char *old = getenv("TGC_COMPILE_THREADS");
  char *saved = old ? strdup(old) : NULL;
  unsetenv("TGC_COMPILE_THREADS");
  int t = cg_compile_threads(err, sizeof err);
  CHECK(t >= 1 && t <= CG_DEFAULT_COMPILE_THREADS_CAP);
  setenv("TGC_COMPILE_THREADS", "3", 1);
  CHECK_EQ_INT(cg_compile_threads(err, sizeof err), 3);
  static const char *const bad[] = {"0", "-2", "many", "4x", "100000"};
  for (int i = 0; i < 5; i++) {
    setenv("TGC_COMPILE_THREADS", bad[i], 1);
    err[0] = 0;
    CHECK_EQ_INT(cg_compile_threads(err, sizeof err), -1);
    char want[64];
    snprintf(want, sizeof want, "TGC_COMPILE_THREADS=%s: expected", bad[i]);
    CHECK(strstr(err, want) != NULL);
  }
  if (saved) setenv("TGC_COMPILE_THREADS", saved, 1);
  else unsetenv("TGC_COMPILE_THREADS");
  free(saved);
}

int main(void) {
  test_split();
  test_threads();
  test_compile();
  return check_done();
}
