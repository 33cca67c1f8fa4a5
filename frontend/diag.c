/* frontend/diag.c — the frontend's diagnostics: an error at a node of the
 * AST, reported once per position (a line is elaborated once per `repeat`
 * iteration and per call), notes, and the stop after a size limit. The
 * bottom of the frontend: every other file reports through it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "sema.h"

ir_loc fe_loc(const fe_sema *S, const ast *at) {
  return (ir_loc){S->file, at ? at->line : 0, at ? at->col : 0};
}

/* Inserts (line, col) into the reported set; returns whether it was new. */
static bool first_report(fe_sema *S, const ast *at) {
  int64_t key = ((int64_t)at->line << 32 | (uint32_t)at->col) + 1;
  if ((S->rep_count + 1) * 2 > S->rep_cap) {
    size_t old_cap = S->rep_cap;
    int64_t *old = S->reported;
    S->rep_cap = old_cap ? old_cap * 2 : 64;
    S->reported = calloc(S->rep_cap, sizeof *S->reported);
    if (!S->reported) IR_DIE("out of memory (S->reported)");
    for (size_t i = 0; i < old_cap; i++) {
      if (!old[i]) continue;
      size_t j = (size_t)(old[i] * 0x9E3779B97F4A7C15ULL) & (S->rep_cap - 1);
      while (S->reported[j]) j = (j + 1) & (S->rep_cap - 1);
      S->reported[j] = old[i];
    }
    free(old);
  }
  size_t j = (size_t)(key * 0x9E3779B97F4A7C15ULL) & (S->rep_cap - 1);
  while (S->reported[j]) {
    if (S->reported[j] == key) return false;
    j = (j + 1) & (S->rep_cap - 1);
  }
  S->reported[j] = key;
  S->rep_count++;
  return true;
}

bool fe_error(fe_sema *S, const ast *at, const char *fmt, ...) {
  S->errors++;
  if (at && !first_report(S, at)) return false;
  va_list ap;
  va_start(ap, fmt);
  ir_verror(S->d, fe_loc(S, at), fmt, ap);
  va_end(ap);
  return true;
}

void fe_note(fe_sema *S, const ast *at, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  ir_note(S->d, fe_loc(S, at), "%s", buf);
}

void fe_abort(fe_sema *S, const ast *at, const char *fmt, ...) {
  if (S->aborted) return;
  S->aborted = true;
  S->errors++;
  va_list ap;
  va_start(ap, fmt);
  ir_verror(S->d, fe_loc(S, at), fmt, ap);
  va_end(ap);
}

