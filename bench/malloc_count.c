/* bench/malloc_count.c — an LD_PRELOAD shim for bench/alloc_step.sh: counts
 * the heap allocations of a process (malloc, calloc, realloc,
 * posix_memalign, aligned_alloc: calls and bytes asked for) and prints the
 * totals to stderr at exit as one line:
 *   malloc_count: calls N bytes B
 * Built by the script with: cc -O2 -shared -fPIC bench/malloc_count.c -o malloc_count.so -ldl
 * (a measuring tool for bench/, never linked into tgc). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_llong calls, bytes;
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static int (*real_memalign)(void **, size_t, size_t);
static void *(*real_aligned)(size_t, size_t);

/* dlsym may call calloc before real_calloc is known: serve it from here */
static char boot[4096];
static size_t boot_used;

static void count(size_t n) {
  atomic_fetch_add(&calls, 1);
  atomic_fetch_add(&bytes, (long long)n);
}

void *malloc(size_t n) {
  if (!real_malloc) real_malloc = dlsym(RTLD_NEXT, "malloc");
  count(n);
  return real_malloc(n);
}
void *calloc(size_t a, size_t b) {
  if (!real_calloc) {
    static int inside;
    if (inside) { /* dlsym's own calloc */
      void *p = boot + boot_used;
      boot_used += (a * b + 15) & ~(size_t)15;
      return p;
    }
    inside = 1;
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    inside = 0;
  }
  count(a * b);
  return real_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  if (!real_realloc) real_realloc = dlsym(RTLD_NEXT, "realloc");
  count(n);
  return real_realloc(p, n);
}
void free(void *p) {
  static void (*real_free)(void *);
  if ((char *)p >= boot && (char *)p < boot + sizeof boot) return;
  if (!real_free) real_free = dlsym(RTLD_NEXT, "free");
  real_free(p);
}
int posix_memalign(void **out, size_t a, size_t n) {
  if (!real_memalign) real_memalign = dlsym(RTLD_NEXT, "posix_memalign");
  count(n);
  return real_memalign(out, a, n);
}
void *aligned_alloc(size_t a, size_t n) {
  if (!real_aligned) real_aligned = dlsym(RTLD_NEXT, "aligned_alloc");
  count(n);
  return real_aligned(a, n);
}

__attribute__((destructor)) static void report(void) {
  char line[128];
  int k = snprintf(line, sizeof line, "malloc_count: calls %lld bytes %lld\n", (long long)atomic_load(&calls),
                   (long long)atomic_load(&bytes));
  if (k > 0) (void)!write(2, line, (size_t)k);
}
