/* ir/die.c — internal errors (ir_die.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "ir_die.h"

void ir_die_at(const char *file, int line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* one write, so that ranks under mpirun do not interleave their lines */
  fprintf(stderr, "tgc: internal error at %s:%d: %s\n", file, line, msg);
  fflush(stderr);
  abort();
}
