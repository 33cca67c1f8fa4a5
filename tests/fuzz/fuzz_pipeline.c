/* tests/fuzz/fuzz_pipeline.c — libFuzzer target: whatever elaborates must go
 * through the whole compiler without a crash, an abort or an internal error.
 *
 * The input is read both as .tg (fe_compile) and as .ir (ir_read: parse +
 * verify); each graph that comes out, and is not too large to stay quick,
 * goes through:
 *   1. the default pipeline with the verifier after every pass (the graph
 *      `tgc run` executes), its cost and memory plan;
 *   2. from a fresh copy: the training graph (pass_build_training: autodiff,
 *      checkpointing, the fusions, verified after each pass) and, under each
 *      optimizer, the update graph with fuse-elementwise, then the memory
 *      plan and cost of both.
 * Errors reported through the diag are fine (a model without a float
 * scalar output has no training graph); an abort or a sanitizer report is
 * a finding. Nothing is executed: shapes may be huge.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "pass.h"

enum { MAX_NODES = 20000 }; /* larger graphs are valid but slow the fuzzer */

static void plan_and_cost(const ir_graph *g) {
  pass_mem_report r;
  pass_memplan_analyze(g, &r);
  pass_graph_cost c;
  pass_graph_cost_of(g, &c);
}

static void compile_all(ir_graph *(*load)(const char *, size_t, ir_diag *), const char *text, size_t size,
                        ir_diag *d) {
  ir_graph *g = load(text, size, d);
  if (!g) return;
  if (g->n_nodes > MAX_NODES) {
    ir_graph_free(g);
    return;
  }
  pass_options o = {.diag = d, .verify_each = true};
  if (pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &o) == 0) plan_and_cost(g);
  ir_graph_free(g);
  /* training: a fresh copy (the pipeline above changed g) */
  if (!(g = load(text, size, d))) return;
  if (pass_build_training(g, &o) == 0) {
    plan_and_cost(g);
    for (int k = 0; k < PASS_OPT_COUNT; k++) {
      pass_optimizer opt = pass_optimizer_defaults((pass_optimizer_kind)k);
      opt.clip_norm = k % 2 ? 1.0 : 0.0;
      opt.weight_decay = k >= 2 ? 0.01 : 0.0;
      ir_graph *u = pass_build_update(g, &opt, d);
      if (!u) continue;
      static const pass_id fuse = PASS_FUSE_ELEMENTWISE;
      if (pass_run_pipeline(u, &fuse, 1, &o) == 0) plan_and_cost(u);
      ir_graph_free(u);
    }
  }
  ir_graph_free(g);
}

static ir_graph *load_tg(const char *text, size_t size, ir_diag *d) {
  fe_options fo = {0};
  ir_graph *g = fe_compile("fuzz.tg", text, size, &fo, d);
  if (g && (ir_diag_errors(d) || ir_verify(g, d) != 0)) {
    ir_graph_free(g);
    g = NULL;
  }
  return g;
}

static ir_graph *load_ir(const char *text, size_t size, ir_diag *d) { return ir_read("fuzz.ir", text, size, d); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (!devnull) devnull = fopen("/dev/null", "w");
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = 0;
  ir_diag *d = ir_diag_new(devnull);
  compile_all(load_tg, text, size, d);
  ir_diag_free(d);
  d = ir_diag_new(devnull);
  compile_all(load_ir, text, size, d);
  ir_diag_free(d);
  free(text);
  return 0;
}
