/* tests/fuzz/fuzz_tg.c — libFuzzer target: the .tg frontend (lexer, parser,
 * sema) must report errors, never crash, hang or allocate wildly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (!devnull) devnull = fopen("/dev/null", "w");
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = 0;
  ir_diag *d = ir_diag_new(devnull);
  fe_options o = {0};
  ir_graph *g = fe_compile("fuzz.tg", text, size, &o, d);
  if (g) {
    ir_verify(g, d);
    ir_graph_free(g);
  }
  ir_diag_free(d);
  free(text);
  return 0;
}
