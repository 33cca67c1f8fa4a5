/* frontend/symtab.c — the scope table of sema: open addressing on the name
 * (ir_hash_bytes), linear probing, grown at 1/2 load. Removal marks a slot
 * SYM_FREE but keeps its name, so probe chains stay intact and a later
 * fe_sym_put of the same name reuses the slot. Names are not copied: they
 * live in the AST arena. Also the edit distance for did-you-mean hints.
 */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "sema.h"

static uint64_t hash_name(const char *s) { return ir_hash_bytes(s, strlen(s)); }

static fe_sym *probe(const fe_symtab *t, const char *name) {
  size_t mask = t->cap - 1;
  for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
    fe_sym *s = &t->slots[i];
    if (!s->name || strcmp(s->name, name) == 0) return s;
  }
}

fe_sym *fe_sym_find(const fe_symtab *t, const char *name) {
  if (!t || !t->cap) return NULL;
  fe_sym *s = probe(t, name);
  return s->name && s->kind != SYM_FREE ? s : NULL;
}

static void grow(fe_symtab *t) {
  size_t old_cap = t->cap;
  fe_sym *old = t->slots;
  t->cap = old_cap ? old_cap * 2 : 16;
  t->slots = calloc(t->cap, sizeof *t->slots);
  if (!t->slots) IR_DIE("out of memory (t->slots)");
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].name) *probe(t, old[i].name) = old[i];
  free(old);
}

fe_sym *fe_sym_put(fe_symtab *t, const char *name) {
  if ((t->count + 1) * 2 > t->cap) grow(t);
  fe_sym *s = probe(t, name);
  if (!s->name) {
    s->name = name;
    s->kind = SYM_FREE;
    t->count++;
  }
  return s;
}

void fe_symtab_free(fe_symtab *t) {
  free(t->slots);
  t->slots = NULL;
  t->cap = t->count = 0;
}

const char *fe_sym_kind_name(sym_kind k) {
  switch (k) {
  case SYM_FREE: return "name";
  case SYM_CONST: return "config constant";
  case SYM_LET: return "constant";
  case SYM_PARAM: return "param";
  case SYM_ARG: return "argument";
  case SYM_LOCAL: return "variable";
  case SYM_LOOPVAR: return "loop variable";
  case SYM_FN: return "function";
  case SYM_CONFIG: return "config";
  }
  return "name";
}

int fe_edit_distance(const char *a, const char *b, int limit) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return limit + 1;
  if ((int)(la > lb ? la - lb : lb - la) > limit) return limit + 1;
  int row[65];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int prev = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int cur = row[j];
      int best = prev + (a[i - 1] != b[j - 1]);
      if (row[j] + 1 < best) best = row[j] + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      prev = cur;
    }
  }
  return row[lb] > limit ? limit + 1 : row[lb];
}
