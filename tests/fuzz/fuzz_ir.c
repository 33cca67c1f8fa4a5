/* tests/fuzz/fuzz_ir.c — libFuzzer target: the textual IR reader and the
 * verifier must report errors, never crash; what parses prints and
 * re-parses to the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (!devnull) devnull = fopen("/dev/null", "w");
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = 0;
  ir_diag *d = ir_diag_new(devnull);
  ir_graph *g = ir_parse("fuzz.ir", text, size, d);
  if (g && ir_verify(g, d) == 0) {
    char *once = ir_print_to_string(g);
    ir_graph *g2 = ir_parse("fuzz2.ir", once, strlen(once), d);
    if (!g2) abort(); /* printed IR must read back */
    char *twice = ir_print_to_string(g2);
    if (strcmp(once, twice) != 0) abort(); /* and print identically */
    free(twice);
    free(once);
    ir_graph_free(g2);
  }
  ir_graph_free(g);
  ir_diag_free(d);
  free(text);
  return 0;
}
