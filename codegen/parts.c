/* codegen/parts.c — a program's kernels as several translation units
 * (parts), compiled concurrently.
 *
 * One NVRTC compile of a whole training step (hundreds of kernels) runs on
 * one core for most of a minute. cg_program_parts cuts the program's source
 * at chunk boundaries (cg_chunk: the text of one step) into parts of about
 * CG_PART_KERNELS kernels each (a chunk of more than CG_PART_KERNEL_BYTES of
 * text per kernel counts as one kernel per such unit), every part the header (title comment and
 * prelude includes) followed by its chunks. The cut depends on the program
 * alone (not on the thread count or the machine), so the same program gives
 * the same parts and every part hits the disk cache on a second run; a
 * program whose one kernel changed differs in one part, and only that part
 * compiles again. A program of at most CG_PART_KERNELS kernels is one part,
 * its source byte for byte.
 *
 * cg_nvrtc_compile_parts compiles the parts on a pool of threads, each part
 * through cg_nvrtc_compile (its own nvrtcProgram, its own cache entry):
 * NVRTC allows concurrent calls on distinct programs, the emulator's
 * compile runs the host compiler in a directory of its own, and the cache's
 * counters are locked. Threads take the largest part left first. The first
 * failure (in part order) is the error; parts not yet started are skipped.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen.h"

void cg_parts_free(cg_part *parts, int n) {
  for (int i = 0; parts && i < n; i++) free(parts[i].source);
  free(parts);
}

/* The name of part `index` of `of`: "gpt_step.cu" -> "gpt_step.p3.cu"; the
 * name itself when the program is one part. */
static void part_name(const char *name, int index, int of, char *buf, size_t len) {
  if (of == 1) {
    snprintf(buf, len, "%s", name);
    return;
  }
  const char *dot = strrchr(name, '.');
  int stem = dot ? (int)(dot - name) : (int)strlen(name);
  snprintf(buf, len, "%.*s.p%d%s", stem, name, index, dot ? dot : "");
}

/* What a chunk counts for against kernels_per_part: its kernels, or its
 * text in units of CG_PART_KERNEL_BYTES when that is more: a multi-tensor
 * group kernel over dozens of tensors (17 KB of text in GPT-2's update)
 * compiles like a dozen small kernels, and five of them in one part made
 * that part the update's critical path. Quantized, so that a kernel's text
 * changing within the same KiB moves no cut. */
static int chunk_weight(const cg_program *p, int ch) {
  size_t begin = ch ? p->chunks[ch - 1].end : p->header_len;
  size_t units = (p->chunks[ch].end - begin) / CG_PART_KERNEL_BYTES;
  return units > (size_t)p->chunks[ch].n_kernels ? (int)(units < 1000000 ? units : 1000000) : p->chunks[ch].n_kernels;
}

int cg_program_parts(const cg_program *p, const char *name, int kernels_per_part, cg_part **out) {
  *out = NULL;
  if (kernels_per_part < 1) kernels_per_part = 1;
  /* part boundaries: a part ends at the first chunk that brings it to kernels_per_part */
  int n = 0, cap = 0;
  int *last = NULL; /* per part: its last chunk */
  for (int ch = 0, in_part = 0; ch < p->n_chunks; ch++) {
    in_part += chunk_weight(p, ch);
    bool whole = p->n_kernels <= kernels_per_part; /* a small program stays one unit, whatever its bytes */
    if ((!whole && in_part >= kernels_per_part) || ch == p->n_chunks - 1) {
      if (n == cap) {
        cap = cap ? 2 * cap : 16;
        int *nl = realloc(last, (size_t)cap * sizeof *nl);
        if (!nl) {
          free(last);
          return -1;
        }
        last = nl;
      }
      last[n++] = ch;
      in_part = 0;
    }
  }
  cg_part *parts = calloc((size_t)(n > 0 ? n : 1), sizeof *parts);
  if (!parts) {
    free(last);
    return -1;
  }
  for (int i = 0, first = 0; i < n; first = last[i] + 1, i++) {
    cg_part *pt = &parts[i];
    const cg_chunk *a = &p->chunks[first], *b = &p->chunks[last[i]];
    size_t begin = first ? p->chunks[first - 1].end : p->header_len;
    part_name(name, i, n, pt->name, sizeof pt->name);
    pt->first_kernel = a->first_kernel;
    pt->n_kernels = b->first_kernel + b->n_kernels - a->first_kernel;
    if (n == 1) { /* the whole source, as one compile always had it */
      pt->source = strdup(p->source);
      pt->len = p->source_len;
    } else {
      char note[128];
      int nl = snprintf(note, sizeof note, "// part %d of this program (%d kernels); the others are compiled apart\n\n",
                        i, pt->n_kernels);
      pt->len = p->header_len + (size_t)nl + (b->end - begin);
      if ((pt->source = malloc(pt->len + 1))) {
        memcpy(pt->source, p->source, p->header_len);
        memcpy(pt->source + p->header_len, note, (size_t)nl);
        memcpy(pt->source + p->header_len + nl, p->source + begin, b->end - begin);
        pt->source[pt->len] = 0;
      }
    }
    if (!pt->source) {
      cg_parts_free(parts, n);
      free(last);
      return -1;
    }
  }
  free(last);
  *out = parts;
  return n;
}

int cg_compile_threads(char *err, size_t errlen) {
  const char *v = getenv("TGC_COMPILE_THREADS");
  if (v && *v) {
    char *end;
    long t = strtol(v, &end, 10);
    if (*end || t < 1 || t > CG_MAX_COMPILE_THREADS) {
      cg_errf(err, errlen, "TGC_COMPILE_THREADS=%s: expected a number of compile threads from 1 to %d", v,
              CG_MAX_COMPILE_THREADS);
      return -1;
    }
    return (int)t;
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 1) cpus = 1;
  return cpus > CG_DEFAULT_COMPILE_THREADS_CAP ? CG_DEFAULT_COMPILE_THREADS_CAP : (int)cpus;
}

/* ---- the pool ---- */

typedef struct {
  const cg_cuda_api *api;
  cg_cache *cache;
  const char *arch;
  const cg_part *parts;
  cg_cuda_binary *bins;
  int *order;            /* parts by size, largest first */
  int n, next;           /* next: index into order of the next part to take */
  int *rc;               /* per part: 0 compiled, -1 failed, 1 not started */
  char (*errs)[2048];    /* per part */
  bool failed;
  pthread_mutex_t lock;
} pool;

static void *worker(void *arg) {
  pool *pl = arg;
  for (;;) {
    pthread_mutex_lock(&pl->lock);
    int i = pl->failed || pl->next == pl->n ? -1 : pl->order[pl->next++];
    pthread_mutex_unlock(&pl->lock);
    if (i < 0) return NULL;
    cg_cuda_source src = {pl->parts[i].name, pl->parts[i].source, pl->arch, NULL, 0};
    pl->rc[i] = cg_nvrtc_compile(pl->api, pl->cache, &src, &pl->bins[i], pl->errs[i], sizeof pl->errs[i]);
    if (pl->rc[i] != 0) {
      pthread_mutex_lock(&pl->lock);
      pl->failed = true;
      pthread_mutex_unlock(&pl->lock);
    }
  }
}

typedef struct {
  size_t len;
  int index;
} sized;

static int by_size(const void *a, const void *b) {
  const sized *x = a, *y = b;
  return x->len < y->len ? 1 : x->len > y->len ? -1 : x->index - y->index;
}

int cg_nvrtc_compile_parts(const cg_cuda_api *api, cg_cache *cache, const char *arch, const cg_part *parts, int n,
                           int threads, cg_cuda_binary *bins, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) memset(&bins[i], 0, sizeof bins[i]);
  if (n == 0) return 0;
  if (threads > n) threads = n;
  if (threads < 1) threads = 1;
  pool pl = {.api = api, .cache = cache, .arch = arch, .parts = parts, .bins = bins, .n = n};
  pl.order = malloc((size_t)n * sizeof *pl.order);
  pl.rc = malloc((size_t)n * sizeof *pl.rc);
  pl.errs = calloc((size_t)n, sizeof *pl.errs);
  pthread_t *tids = malloc((size_t)threads * sizeof *tids);
  if (!pl.order || !pl.rc || !pl.errs || !tids) {
    free(pl.order), free(pl.rc), free(pl.errs), free(tids);
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  sized *by = malloc((size_t)n * sizeof *by);
  if (!by) {
    free(pl.order), free(pl.rc), free(pl.errs), free(tids);
    cg_errf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < n; i++) by[i] = (sized){parts[i].len, i}, pl.rc[i] = 1;
  qsort(by, (size_t)n, sizeof *by, by_size);
  for (int i = 0; i < n; i++) pl.order[i] = by[i].index;
  free(by);
  pthread_mutex_init(&pl.lock, NULL);
  int started = 0;
  for (int t = 1; t < threads; t++) /* the calling thread is the first worker */
    if (pthread_create(&tids[started], NULL, worker, &pl) == 0) started++;
  worker(&pl);
  for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
  pthread_mutex_destroy(&pl.lock);
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++)
    if (pl.rc[i] < 0) {
      cg_errf(err, errlen, "%s", pl.errs[i]);
      rc = -1;
    }
  if (rc != 0)
    for (int i = 0; i < n; i++) cg_cuda_binary_free(&bins[i]);
  free(pl.order), free(pl.rc), free(pl.errs), free(tids);
  return rc;
}
