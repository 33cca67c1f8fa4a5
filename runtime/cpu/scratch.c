/* runtime/cpu/scratch.c — kernel scratch memory without the heap in the
 * steady state: every thread has a stack of chunks; a kernel marks it,
 * pushes what it needs and pops back to the mark before it returns. Chunks
 * are kept across calls: a training step's kernels ask for the same sizes
 * every step, so after the first step nothing is allocated (bench/
 * alloc_step.sh counts it). When a thread's stack is empty again and it had
 * to add chunks, they are merged into one of their total size, so one
 * chunk per thread remains. A thread's chunks are freed when it exits (a
 * thread-specific key's destructor, which also takes its stack off the
 * list: the stack itself is thread-local storage, gone after that), the
 * rest at exit.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels.h"

enum { MAX_CHUNKS = 32, ALIGN = 64 };

typedef struct {
  char *base[MAX_CHUNKS];
  size_t cap[MAX_CHUNKS], used[MAX_CHUNKS];
  int n;       /* chunks */
  int top;     /* the chunk pushes go to */
  bool registered;
} stack;

static _Thread_local stack ts;

/* every thread's stack, for freeing at exit */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static stack **all;
static int n_all, cap_all;
static bool exit_registered;
static pthread_key_t exit_key; /* its destructor runs at a thread's exit with the thread's stack */
static bool key_made;

static void free_all(void) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_all; i++) {
    for (int c = 0; c < all[i]->n; c++) free(all[i]->base[c]);
    all[i]->n = all[i]->top = 0;
  }
  free(all);
  all = NULL;
  n_all = cap_all = 0;
  pthread_mutex_unlock(&lock);
}

/* A thread's exit: its chunks freed, its stack off the list. */
static void thread_exit(void *arg) {
  stack *s = arg;
  pthread_mutex_lock(&lock);
  for (int c = 0; c < s->n; c++) free(s->base[c]);
  s->n = s->top = 0;
  s->registered = false;
  for (int i = 0; i < n_all; i++)
    if (all[i] == s) {
      all[i] = all[--n_all];
      break;
    }
  pthread_mutex_unlock(&lock);
}

static void register_stack(stack *s) {
  pthread_mutex_lock(&lock);
  if (!key_made) key_made = pthread_key_create(&exit_key, thread_exit) == 0;
  if (!key_made) { /* without the key a thread's exit would leave its stack on the list */
    pthread_mutex_unlock(&lock);
    return;
  }
  if (n_all == cap_all) {
    int cap = cap_all ? 2 * cap_all : 16;
    stack **na = realloc(all, (size_t)cap * sizeof *na);
    if (na) all = na, cap_all = cap;
  }
  if (n_all < cap_all && pthread_setspecific(exit_key, s) == 0) {
    all[n_all++] = s;
    s->registered = true;
  }
  if (!exit_registered) {
    exit_registered = true;
    atexit(free_all);
  }
  pthread_mutex_unlock(&lock);
}

int rt_scratch_threads(void) {
  pthread_mutex_lock(&lock);
  int n = n_all;
  pthread_mutex_unlock(&lock);
  return n;
}

size_t rt_scratch_mark(void) {
  stack *s = &ts;
  return s->n ? (size_t)s->top << 48 | s->used[s->top] : 0;
}

void *rt_scratch_push(size_t bytes) {
  stack *s = &ts;
  if (!s->registered) register_stack(s);
  if (!s->registered) return NULL;
  bytes = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  if (bytes == 0) bytes = ALIGN;
  for (; s->top < s->n; s->top++) {
    if (s->cap[s->top] - s->used[s->top] >= bytes) {
      void *p = s->base[s->top] + s->used[s->top];
      s->used[s->top] += bytes;
      return p;
    }
    if (s->top + 1 < s->n) s->used[s->top + 1] = 0;
    else break;
  }
  if (s->n == MAX_CHUNKS) return NULL;
  size_t cap = s->n ? 2 * s->cap[s->n - 1] : (size_t)1 << 16;
  if (cap < bytes) cap = bytes;
  void *p = NULL;
  if (posix_memalign(&p, ALIGN, cap) != 0) return NULL;
  s->base[s->n] = p;
  s->cap[s->n] = cap;
  s->used[s->n] = bytes;
  s->top = s->n++;
  return p;
}

void rt_scratch_pop(size_t mark) {
  stack *s = &ts;
  if (!s->n) return;
  s->top = (int)(mark >> 48);
  s->used[s->top] = mark & (((size_t)1 << 48) - 1);
  if (mark == 0 && s->n > 1) { /* empty: merge the chunks into one */
    size_t total = 0;
    for (int c = 0; c < s->n; c++) total += s->cap[c], free(s->base[c]);
    void *p = NULL;
    s->n = 0;
    if (posix_memalign(&p, ALIGN, total) == 0) {
      s->base[0] = p;
      s->cap[0] = total;
      s->used[0] = 0;
      s->n = 1;
    }
    s->top = 0;
  }
}
