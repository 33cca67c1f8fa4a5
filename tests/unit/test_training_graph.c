/* tests/unit/test_training_graph.c — pass_build_training_graph, the one
 * builder of the training graph `tgc stats` and `tgc plan` cost:
 *   - the memory it measures before checkpointing (mem_none) is the plan of
 *     the graph after exactly the passes before checkpoint, and mem_unfused
 *     the same without fuse-attention (examples/gpt.tg tiny, whose attention
 *     is fused): the same figures from the same builder with every later pass
 *     disabled, byte for byte;
 *   - dtype: every float value held in bf16, the measurements too;
 *   - the training form (`tgc plan`) with dtype bf16 is the graph
 *     pass_build_training makes retyped after every pass (how the planner
 *     built it before): the same cost by phase, node count and memory peak,
 *     for the planner's three checkpoint policies;
 *   - any_model (`tgc stats`): a model without parameters is differentiated
 *     by its float inputs, a loss that is not a scalar summed, the output
 *     named loss preferred, the model's own grad node and an existing
 *     training graph taken as they are, and the two user errors.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"
#include "pass.h"

static char *gpt_text;

static ir_graph *gpt_tiny(ir_diag *d) {
  if (!gpt_text) {
    size_t len;
    gpt_text = ir_read_file("examples/gpt.tg", 1 << 20, &len, d);
    if (!gpt_text) return NULL;
  }
  fe_options fo = {.config = "tiny"};
  return fe_compile("examples/gpt.tg", gpt_text, strlen(gpt_text), &fo, d);
}

static ir_graph *compile(const char *src, ir_diag *d) {
  ir_graph *g = fe_compile("t.tg", src, strlen(src), NULL, d);
  CHECK(g != NULL);
  return g;
}

static void check_same_report(const pass_mem_report *a, const pass_mem_report *b) {
  CHECK_EQ_INT(a->peak_bytes, b->peak_bytes);
  CHECK_EQ_INT(a->activation_peak_bytes, b->activation_peak_bytes);
  CHECK_EQ_INT(a->saved_bytes, b->saved_bytes);
  CHECK_EQ_INT(a->arena_bytes, b->arena_bytes);
  CHECK_EQ_INT(a->final_bytes, b->final_bytes);
}

/* The builder with only the passes before checkpoint (and fuse-attention
 * off when unfused), measured after. */
static void measure_front(int dtype, bool unfused, pass_mem_report *r, ir_diag *d) {
  ir_graph *g = gpt_tiny(d);
  if (!g) return;
  bool off[PASS_COUNT] = {false};
  off[PASS_CHECKPOINT] = off[PASS_SHARD] = off[PASS_FUSE_ELEMENTWISE] = off[PASS_FUSE_TRANSPOSE] = true;
  off[PASS_FUSE_ATTENTION] = unfused;
  pass_options po = {.diag = d, .disabled = off};
  pass_train_graph_options o = {.passes = &po, .any_model = true, .dtype = dtype};
  pass_train_graph_info info;
  CHECK_EQ_INT(pass_build_training_graph(g, &o, &info), 0);
  CHECK_EQ_INT(pass_memplan_analyze(g, r), 0);
  pass_train_graph_info_free(&info);
  ir_graph_free(g);
}

static void test_measured(void) {
  ir_diag *d = ir_diag_new(stderr);
  for (int variant = 0; variant < 2; variant++) {
    int dtype = variant ? IR_DT_BF16 : -1;
    ir_graph *g = gpt_tiny(d);
    if (!g) return;
    int n_params = g->n_params;
    pass_options po = {.diag = d, .checkpoint = "block"};
    pass_train_graph_options o = {.passes = &po, .any_model = true, .dtype = dtype, .measure = true};
    pass_train_graph_info info;
    CHECK_EQ_INT(pass_build_training_graph(g, &o, &info), 0);
    CHECK_STR(info.loss_name, "loss");
    CHECK_EQ_INT(info.n_wrt, n_params);
    CHECK(!info.loss_summed && !info.wrt_inputs && info.have_unfused);
    CHECK_EQ_INT(g->n_outputs, 1 + n_params); /* loss, then d_<param>: a training step returns no logits */
    CHECK_STR(g->outputs[1].name, "d_wte");
    pass_mem_report front, unfused;
    measure_front(dtype, false, &front, d);
    measure_front(dtype, true, &unfused, d);
    check_same_report(&info.mem_none, &front);
    check_same_report(&info.mem_unfused, &unfused);
    CHECK(unfused.activation_peak_bytes > front.activation_peak_bytes); /* what fusing attention saves */
    /* the policy ran after the measurement: block recomputes */
    pass_graph_cost c;
    pass_graph_cost_of(g, &c);
    CHECK(c.flops[PASS_PHASE_RECOMPUTE] > 0);
    int wrong = 0;
    for (int i = 0; i < g->n_values; i++)
      wrong += variant && ir_dtype_is_float(g->values[i]->type.dtype) && g->values[i]->type.dtype != IR_DT_BF16 &&
               !(g->values[i]->def && g->values[i]->def->op == IR_OP_ATTENTION && g->values[i] == g->values[i]->def->out[1] &&
                 g->values[i]->type.dtype == IR_DT_F32); /* attention's log-sum-exp is fp32 whatever q is */
    CHECK_EQ_INT(wrong, 0);
    pass_train_graph_info_free(&info);
    ir_graph_free(g);
  }
  ir_diag_free(d);
}

/* `tgc plan`'s graph before the builder: pass_build_training, then retyped. */
static void test_plan_graph_unchanged(void) {
  ir_diag *d = ir_diag_new(stderr);
  static const char *const policies[] = {NULL, "selective", "block"};
  for (int k = 0; k < 3; k++) {
    ir_graph *before = gpt_tiny(d), *now = gpt_tiny(d);
    if (!before || !now) return;
    pass_options po = {.diag = d, .checkpoint = policies[k]};
    CHECK_EQ_INT(pass_build_training(before, &po), 0);
    pass_retype_floats(before, IR_DT_BF16);
    pass_train_graph_options o = {.passes = &po, .dtype = IR_DT_BF16};
    pass_train_graph_info info;
    CHECK_EQ_INT(pass_build_training_graph(now, &o, &info), 0);
    pass_train_graph_info_free(&info);
    pass_graph_cost a, b;
    pass_graph_cost_of(before, &a);
    pass_graph_cost_of(now, &b);
    for (int p = 0; p < PASS_NUM_PHASES; p++) {
      CHECK_NEAR(b.flops[p], a.flops[p], 0);
      CHECK_NEAR(b.bytes[p], a.bytes[p], 0);
    }
    CHECK_EQ_INT(now->n_nodes, before->n_nodes);
    CHECK_EQ_INT(now->n_outputs, before->n_outputs);
    pass_mem_report ra, rb;
    CHECK_EQ_INT(pass_memplan_analyze(before, &ra), 0);
    CHECK_EQ_INT(pass_memplan_analyze(now, &rb), 0);
    check_same_report(&rb, &ra);
    ir_graph_free(before);
    ir_graph_free(now);
  }
  ir_diag_free(d);
}

static void test_any_model(void) {
  ir_diag *d = ir_diag_new(stderr);
  pass_options po = {.diag = d};
  pass_train_graph_options o = {.passes = &po, .any_model = true, .dtype = -1};
  pass_train_graph_info info;
  /* no parameters, a loss that is not a scalar */
  ir_graph *g = compile("fn main(x: f32[3], k: i32[3], y: f32[3]) -> (z: f32[3]) { return x * y + cast(k, f32) }\n", d);
  CHECK_EQ_INT(pass_build_training_graph(g, &o, &info), 0);
  CHECK_STR(info.loss_name, "z");
  CHECK(info.loss_summed && info.wrt_inputs);
  CHECK_EQ_INT(info.n_wrt, 2);
  CHECK_EQ_INT(g->n_outputs, 3);
  CHECK_STR(g->outputs[1].name, "d_x");
  CHECK_STR(g->outputs[2].name, "d_y");
  pass_train_graph_info_free(&info);
  /* a training graph already: taken as it is */
  int n_out = g->n_outputs;
  CHECK_EQ_INT(pass_build_training_graph(g, &o, &info), 0);
  CHECK_EQ_INT(info.n_wrt, -1);
  CHECK(info.loss_name == NULL);
  CHECK_EQ_INT(g->n_outputs, n_out);
  pass_train_graph_info_free(&info);
  ir_graph_free(g);
  /* the output named loss, and parameters */
  g = compile("param w: f32[2] = ones\nfn main(x: f32[2]) -> (a: f32[2], loss: f32) { return x, sum(x * w) }\n", d);
  CHECK_EQ_INT(pass_build_training_graph(g, &o, &info), 0);
  CHECK_STR(info.loss_name, "loss");
  CHECK(!info.loss_summed && !info.wrt_inputs && info.n_wrt == 1);
  CHECK_EQ_INT(g->n_outputs, 3);
  CHECK_STR(g->outputs[2].name, "d_w");
  pass_train_graph_info_free(&info);
  ir_graph_free(g);
  /* the model's own gradients */
  g = compile("fn main(x1: f64, x2: f64) -> (y: f64, g1: f64, g2: f64) {\n"
              "  y = x1 * x2\n  g1, g2 = grad(y, [x1, x2])\n  return y, g1, g2\n}\n", d);
  CHECK_EQ_INT(pass_build_training_graph(g, &o, &info), 0);
  CHECK_STR(info.loss_name, "y");
  CHECK_EQ_INT(info.n_wrt, 2);
  CHECK_EQ_INT(g->n_outputs, 3);
  pass_train_graph_info_free(&info);
  ir_graph_free(g);
  ir_diag_free(d);
  /* the user errors */
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  d = ir_diag_new(f);
  po.diag = d;
  g = compile("fn main(x: f32) { y = x }\n", d);
  CHECK_EQ_INT(pass_build_training_graph(g, &o, &info), -1);
  pass_train_graph_info_free(&info);
  ir_graph_free(g);
  g = compile("fn main(k: i32[2], x: f32) -> (n: i32[2], y: f32) { return k, x }\n", d);
  CHECK_EQ_INT(pass_build_training_graph(g, &o, &info), -1);
  pass_train_graph_info_free(&info);
  ir_graph_free(g);
  ir_diag_free(d);
  fclose(f);
  CHECK_STR(buf, "tgc: error: t.tg has no outputs: nothing to differentiate\n"
                 "tgc: error: output 'n' is i32[2]: tgc stats differentiates a floating-point output\n");
  free(buf);
}

int main(void) {
  test_measured();
  test_plan_graph_unchanged();
  test_any_model();
  free(gpt_text);
  return check_done();
}
