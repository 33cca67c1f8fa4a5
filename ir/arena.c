/* ir/arena.c — a bump allocator: a graph's values, nodes, names and
 * attributes are carved out of large chunks and freed together. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

typedef struct arena_chunk {
  struct arena_chunk *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
} arena_chunk;

struct ir_arena {
  arena_chunk *head;
};

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) {
    fprintf(stderr, "tgc: fatal: out of memory (%zu bytes)\n", n);
    abort();
  }
  return p;
}

ir_arena *ir_arena_new(void) {
  ir_arena *a = xmalloc(sizeof *a);
  a->head = NULL;
  return a;
}

void *ir_arena_alloc(ir_arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  arena_chunk *c = a->head;
  if (!c || c->size - c->used < size) {
    size_t want = size > 65536 ? size : 65536;
    c = xmalloc(sizeof *c + want);
    c->size = want;
    c->used = 0;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += size;
  memset(p, 0, size);
  return p;
}

char *ir_arena_strndup(ir_arena *a, const char *s, size_t n) {
  char *p = ir_arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *ir_arena_strdup(ir_arena *a, const char *s) { return ir_arena_strndup(a, s, strlen(s)); }

void ir_arena_free(ir_arena *a) {
  if (!a) return;
  for (arena_chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a);
}
