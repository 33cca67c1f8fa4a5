/* tests/unit/test_stats.c — the figures behind `tgc stats` (analysis/target.c,
 * targets.def, cost.c), exact where the arithmetic is exact:
 *  - the closed form 12*l*h^2 + 2*v*h at h = 4096, l = 32, v = 32000 is
 *    6,704,594,944 (exact in double);
 *  - A100 TF32 = 1.41 GHz x 108 SMs x 512 FMA/clock/SM x 2 = 155.9 TFLOP/s
 *    (155,934,720,000,000 exactly, 155.9e12 to 0.05e12); the other vendor
 *    figures of targets.def as quoted in issue 4; every target positive and
 *    found by its name;
 *  - the roofline: time = max(FLOPs/peak, bytes/bandwidth); the three fp16
 *    matmuls (intensity 1365.3, 31.5, 15.9) are compute-, memory- and
 *    memory-bound on a100-80g in bf16/fp16 (ridge 312e12 / 2.039e12 = 153.0);
 *  - parameter groups by use (embedding table, norm weight) and by name;
 *    the roofline of a one-matmul step on a toy target, by hand;
 *  - training memory: 175e9 parameters in fp32 are 700 GB exactly; mixed
 *    precision adam is 2 + 2 + 12 bytes per parameter; sgd holds no state;
 *  - the target-file parser: a good file, and every kind of bad line
 *    reported as path:line:col with the count of errors;
 *  - examples/gpt.tg: gpt2_124m has exactly 124,439,808 parameters; the
 *    gpt3_175b training graph (compile, gradients, autodiff + canonicalize,
 *    cost) is built in a few seconds at most (timed and printed; the bound
 *    asserted is a generous 30 s so a loaded machine does not fail it) and
 *    its parameter memory in fp32 is 4 bytes x the exact count (~698 GB).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "frontend.h"
#include "plan.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_closed_form(void) {
  double cf = pass_closed_form_params(32, 4096, 32000);
  printf("closed form at l=32 h=4096 v=32000: %.0f\n", cf);
  CHECK(cf == 6704594944.0);
  CHECK(pass_closed_form_params(96, 12288, 50257) == 175181291520.0);
}

static void test_targets(void) {
  const pass_target *a = pass_target_lookup("a100-80g");
  CHECK(a != NULL);
  if (a) {
    double tf32 = 1.41e9 * 108 * 512 * 2;
    printf("A100 TF32: 1.41 GHz x 108 x 512 x 2 = %.1f TFLOP/s\n", a->flops_fp32 / 1e12);
    CHECK(a->flops_fp32 == tf32);
    CHECK(a->flops_fp32 == 155934720000000.0);
    CHECK_NEAR(a->flops_fp32 / 1e12, 155.9, 0.05 / 155.9);
    CHECK(a->flops_bf16 == 312e12);
    CHECK(a->bandwidth == 2.039e12);
    CHECK(a->memory == 80e9);
    CHECK(pass_target_peak(a, 2) == 312e12);
    CHECK(pass_target_peak(a, 4) == tf32);
  }
  const pass_target *h = pass_target_lookup("h100-sxm"), *h2 = pass_target_lookup("h200");
  CHECK(h && h->flops_bf16 == 989e12 && h->bandwidth == 3.35e12 && h->memory == 80e9);
  CHECK(h2 && h2->flops_bf16 == 989e12 && h2->bandwidth == 4.8e12 && h2->memory == 141e9);
  const pass_target *a40 = pass_target_lookup("a100-40g");
  CHECK(a40 && a40->memory == 40e9 && a40->flops_bf16 == 312e12);
  CHECK(pass_target_lookup("v100") != NULL);
  CHECK(pass_target_lookup("cpu-local") != NULL);
  CHECK(pass_target_lookup("a100") == NULL);
  CHECK(pass_target_lookup(NULL) == NULL);
  CHECK(pass_target_count() >= 6);
  CHECK(pass_target_at(-1) == NULL && pass_target_at(pass_target_count()) == NULL);
  for (int i = 0; i < pass_target_count(); i++) {
    const pass_target *t = pass_target_at(i);
    CHECK(t->flops_bf16 > 0 && t->flops_fp32 > 0 && t->bandwidth > 0 && t->memory > 0 && t->source && *t->source);
    CHECK(t->flops_bf16 >= t->flops_fp32);
    CHECK(pass_target_lookup(t->name) == t);
  }
}

static double matmul_intensity(int64_t m, int64_t k, int64_t n, bool *compute_bound) {
  ir_graph *g = ir_graph_new("mm", NULL);
  ir_value *ab[2] = {ir_graph_add_input(g, "a", (ir_type){IR_DT_F16, 2, {m, k}}, (ir_loc){0}),
                     ir_graph_add_input(g, "b", (ir_type){IR_DT_F16, 2, {k, n}}, (ir_loc){0})};
  ir_value *c = ir_graph_build1(g, IR_OP_MATMUL, ab, 2, NULL, 0, "c", (ir_loc){0});
  pass_cost cost = pass_node_cost(c->def);
  const pass_target *a = pass_target_lookup("a100-80g");
  double peak = pass_target_peak(a, 2);
  *compute_bound = pass_roofline_compute_bound(cost.flops, cost.bytes, peak, a->bandwidth);
  double t = pass_roofline_seconds(cost.flops, cost.bytes, peak, a->bandwidth);
  double want = cost.flops / peak > cost.bytes / a->bandwidth ? cost.flops / peak : cost.bytes / a->bandwidth;
  CHECK(t == want);
  ir_graph_free(g);
  return cost.flops / cost.bytes;
}

static void test_roofline(void) {
  bool cb1, cb2, cb3;
  double i1 = matmul_intensity(4096, 4096, 4096, &cb1), i2 = matmul_intensity(4096, 32, 4096, &cb2),
         i3 = matmul_intensity(32, 4096, 32, &cb3);
  CHECK_NEAR(i1, 1365.3, 0.05 / 1365.3);
  CHECK_NEAR(i2, 31.5, 0.05 / 31.5);
  CHECK_NEAR(i3, 15.9, 0.05 / 15.9);
  CHECK(cb1 && !cb2 && !cb3);
  CHECK_NEAR(312e12 / 2.039e12, 153.0, 0.05 / 153.0);
  /* exactly at the ridge counts as compute-bound; no FLOPs is memory-bound */
  CHECK(pass_roofline_compute_bound(100, 1, 100, 1));
  CHECK(!pass_roofline_compute_bound(0, 10, 100, 1));
  CHECK(pass_roofline_seconds(2e12, 1e9, 1e12, 1e12) == 2.0);
  CHECK(pass_roofline_seconds(1e12, 4e12, 1e12, 1e12) == 4.0);
  CHECK(pass_roofline_seconds(0, 0, 0, 0) == 0);
  /* MFU: 6 N tokens / (time * peak) */
  CHECK_NEAR(pass_mfu(1e9, 1000, 0.1, 1e15), 6e12 / 1e14, 1e-15);
  CHECK(pass_mfu(1e9, 0, 1, 1) == 0 && pass_mfu(1e9, 1, 0, 1) == 0);
}

/* Parameter groups by use and name (analysis/step_report.c). */
static void test_param_groups(void) {
  const char *src = "tgc.ir 1\n"
                    "graph @main\n"
                    "  input %t : i32[2] loc 1:1\n"
                    "  param %tok_embeddings : f32[8, 4] init ones loc 1:1\n"
                    "  param %table : f32[8, 4] init ones loc 1:1\n"
                    "  param %gamma : f32[4] init ones loc 1:1\n"
                    "  param %layers.0.attention.wq : f32[4, 4] init ones loc 1:1\n"
                    "  param %blk.wk : f32[4, 4] init ones loc 1:1\n"
                    "  param %h.0.mlp.c_fc : f32[4, 4] init ones loc 1:1\n"
                    "  param %w2 : f32[4, 4] init ones loc 1:1\n"
                    "  param %ln_f_b : f32[4] init ones loc 1:1\n"
                    "  param %final_NORM : f32[4] init ones loc 1:1\n"
                    "  param %output : f32[4, 8] init ones loc 1:1\n"
                    "  param %scale : f32[4] init ones loc 1:1\n"
                    "  %x = embedding %table, %t : f32[2, 4] loc 1:1\n"
                    "  %y = rmsnorm %x, %gamma {eps = 1e-06} : f32[2, 4] loc 1:1\n"
                    "  output \"y\" = %y\n"
                    "end\n";
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *g = ir_parse("g.ir", src, strlen(src), d);
  CHECK(g != NULL);
  if (g) {
    static const pass_param_group want[] = {PASS_GROUP_EMBEDDINGS, PASS_GROUP_EMBEDDINGS, PASS_GROUP_NORMS,
                                            PASS_GROUP_ATTENTION,  PASS_GROUP_ATTENTION,  PASS_GROUP_MLP,
                                            PASS_GROUP_MLP,        PASS_GROUP_NORMS,      PASS_GROUP_NORMS,
                                            PASS_GROUP_EMBEDDINGS, PASS_GROUP_OTHER};
    CHECK_EQ_INT(g->n_params, 11);
    pass_param_group got[11];
    pass_param_groups(g, got);
    for (int i = 0; i < 11 && i < g->n_params; i++) {
      if (got[i] != want[i]) fprintf(stderr, "%s: group %s, want %s\n", g->params[i]->name,
                                     pass_param_group_name(got[i]), pass_param_group_name(want[i]));
      CHECK_EQ_INT(got[i], want[i]);
    }
    CHECK_STR(pass_param_group_name(PASS_GROUP_OTHER), "other");
  }
  ir_graph_free(g);
  ir_diag_free(d);
}

/* A step of one matmul x[4, 8] @ w[8, 16]: 1024 FLOPs, 896 bytes; on a
 * target of 1000 FLOP/s and 100 B/s it takes 8.96 s (memory-bound); the
 * update of 100 FLOPs over 2 * 512 + 512 + 2 * 1024 = 3584 bytes 35.84 s;
 * the step 44.8 s; MFU 6 * 128 * 4 / (44.8 * 1000). Exact to rounding. */
static void test_step_roofline(void) {
  ir_graph *g = ir_graph_new("main", NULL);
  ir_type xt = {.dtype = IR_DT_F32, .rank = 2, .dims = {4, 8}}, wt = {.dtype = IR_DT_F32, .rank = 2, .dims = {8, 16}};
  ir_value *in[2] = {ir_graph_add_input(g, "x", xt, (ir_loc){0}), ir_graph_add_param(g, "w", wt, (ir_init){0}, (ir_loc){0})};
  ir_graph_add_output(g, "y", ir_graph_build1(g, IR_OP_MATMUL, in, 2, NULL, 0, "y", (ir_loc){0}));
  pass_target t = {.name = "toy", .flops_bf16 = 2000, .flops_fp32 = 1000, .bandwidth = 100};
  pass_step_costing c = {&t, 4, 100, {.params = 512, .grads = 512, .optimizer = 1024}, 128, 4, 0};
  pass_roofline r;
  pass_roofline_of(g, &c, &r);
  CHECK_EQ_INT(r.n_rows, 1);
  CHECK_NEAR(r.rows[0].flops, 1024, 0);
  CHECK_NEAR(r.rows[0].bytes, 896, 0);
  CHECK_NEAR(r.rows[0].time, 8.96, 1e-15);
  CHECK(!r.rows[0].compute_bound);
  CHECK_EQ_INT(r.kinds[IR_OP_MATMUL].nodes, 1);
  CHECK_NEAR(r.peak, 1000, 0);
  CHECK_NEAR(r.phase_time[PASS_PHASE_FORWARD], 8.96, 1e-15);
  CHECK_NEAR(r.phase_time[PASS_PHASE_OPTIMIZER], 35.84, 1e-15);
  CHECK_NEAR(r.step_time, 44.8, 1e-15);
  CHECK_NEAR(r.mfu, 6.0 * 128 * 4 / (44.8 * 1000), 1e-15);
  pass_roofline_free(&r);
  c.elem_bytes = 2; /* the bf16 peak */
  c.target = NULL;  /* no target: FLOPs and bytes, no times */
  pass_roofline_of(g, &c, &r);
  CHECK(r.peak == 0 && r.step_time == 0 && r.rows[0].time == 0 && r.rows[0].bytes == 896);
  pass_roofline_free(&r);
  c.target = &t;
  pass_roofline_of(g, &c, &r);
  CHECK_NEAR(r.rows[0].time, 8.96, 1e-15); /* 1024 / 2000 < 896 / 100 */
  CHECK_NEAR(r.peak, 2000, 0);
  CHECK(r.rows[0].launches == 1 && r.launches == 1 && !r.rows[0].launch_bound && r.launch_time == 0); /* one product */
  pass_roofline_free(&r);
  /* the launch floor: 1 call of 10 s on a target that launches slowly is
   * launch-bound, and adds 10 - 8.96 s to the step */
  t.launch = 10;
  pass_roofline_of(g, &c, &r);
  CHECK_NEAR(r.rows[0].time, 10, 0);
  CHECK(r.rows[0].launch_bound);
  CHECK_NEAR(r.launch_time, 10 - 8.96, 1e-14);
  CHECK_NEAR(r.phase_time[PASS_PHASE_FORWARD], 10, 0);
  CHECK_NEAR(r.kinds[IR_OP_MATMUL].time, 10, 0);
  CHECK_NEAR(r.kinds[IR_OP_MATMUL].launches, 1, 0);
  CHECK(!r.update_launch_bound && r.phase_time[PASS_PHASE_OPTIMIZER] == 35.84); /* no update calls counted */
  pass_roofline_free(&r);
  /* the update program's device calls floor the update: 3 x 10 s is below
   * its 35.84 s, 4 x 10 s above (launch-bound, 40 - 35.84 s added) */
  c.update_launches = 3;
  pass_roofline_of(g, &c, &r);
  CHECK(!r.update_launch_bound && r.update_launches == 3);
  CHECK_NEAR(r.phase_time[PASS_PHASE_OPTIMIZER], 35.84, 1e-15);
  pass_roofline_free(&r);
  c.update_launches = 4;
  pass_roofline_of(g, &c, &r);
  CHECK(r.update_launch_bound);
  CHECK_NEAR(r.phase_time[PASS_PHASE_OPTIMIZER], 40, 0);
  CHECK_NEAR(r.launch_time, (10 - 8.96) + (40 - 35.84), 1e-13);
  CHECK_NEAR(r.step_time, 50, 1e-13);
  pass_roofline_free(&r);
  ir_graph_free(g);
}

static void test_memory(void) {
  pass_train_memory m = pass_training_memory(175e9, 4, 2, 0, true);
  CHECK(m.params == 700e9); /* 175B parameters in fp32 are 700 GB */
  CHECK(m.grads == 700e9);
  CHECK(m.optimizer == 1400e9);
  CHECK(m.total == 2800e9);
  m = pass_training_memory(1000, 2, 2, 500, true); /* mixed precision adam: 2 + 2 + 12 */
  CHECK(m.params == 2000 && m.grads == 2000 && m.optimizer == 12000 && m.activations == 500);
  CHECK(m.total == 16000 + 500);
  m = pass_training_memory(1000, 4, 0, 0, true); /* sgd */
  CHECK(m.optimizer == 0 && m.total == 8000);
  m = pass_training_memory(1000, 4, 1, 0, false); /* nothing trained */
  CHECK(m.grads == 0 && m.optimizer == 0 && m.total == 4000);
}

static int parse_target(const char *text, pass_target *t, char *msgs, size_t cap) {
  FILE *f = tmpfile();
  ir_diag *d = ir_diag_new(f ? f : stderr);
  int rc = pass_target_parse("my.target", text, strlen(text), t, d);
  int errors = ir_diag_errors(d);
  ir_diag_free(d);
  msgs[0] = 0;
  if (f) {
    rewind(f);
    size_t n = fread(msgs, 1, cap - 1, f);
    msgs[n] = 0;
    fclose(f);
  }
  return rc < 0 ? -errors : rc;
}

static void test_target_file(void) {
  pass_target t;
  char msgs[4096];
  int rc = parse_target("# mine\nname = my-gpu\n  flops_bf16 = 1e15 # dense\nflops_fp32=5e14\n\nbandwidth = 3e12\r\n", &t,
                        msgs, sizeof msgs);
  CHECK_EQ_INT(rc, 0);
  CHECK_STR(t.name, "my-gpu");
  CHECK(t.flops_bf16 == 1e15 && t.flops_fp32 == 5e14 && t.bandwidth == 3e12 && t.memory == 0);
  CHECK_STR(t.source, "my.target");
  rc = parse_target("flops_bf16 = 1e9\nflops_fp32 = 1e9\nbandwidth = 1e9\n", &t, msgs, sizeof msgs);
  CHECK_EQ_INT(rc, 0);
  CHECK_STR(t.name, "my.target"); /* the default name */
  rc = parse_target("flops_bf16 = 1e9\nflops_fp32 = 1e9\nbandwidth = 1e9\nspeed = 3\n= 4\nmemory = -1\nmemory 5\n"
                    "name = two words\nbandwidth = 2\nmemory = 1e999\nflops_fp32 =\n",
                    &t, msgs, sizeof msgs);
  printf("%s", msgs);
  CHECK_EQ_INT(rc, -8);
  CHECK(strstr(msgs, "my.target:4:1: error: unknown key 'speed'") != NULL);
  CHECK(strstr(msgs, "my.target:5:1: error: expected 'key = value'") != NULL);
  CHECK(strstr(msgs, "my.target:6:10: error: memory must be from 0 to 1e15 bytes, got -1") != NULL);
  CHECK(strstr(msgs, "my.target:7:8: error: expected '=' after 'memory'") != NULL);
  CHECK(strstr(msgs, "my.target:8:11: error: a target name is one word") != NULL);
  CHECK(strstr(msgs, "my.target:9:1: error: 'bandwidth' given twice (first on line 3)") != NULL);
  CHECK(strstr(msgs, "my.target:10:10: error: '1e999' is not a number") != NULL);
  CHECK(strstr(msgs, "my.target:11:13: error: missing value for 'flops_fp32'") != NULL);
  rc = parse_target("", &t, msgs, sizeof msgs);
  CHECK_EQ_INT(rc, -3);
  CHECK(strstr(msgs, "my.target: error: missing 'bandwidth = ...'") != NULL);
  /* a NUL byte, an over-long name */
  char nul[] = "flops_bf16 = 1e9\nflops_fp32 = 1e9\nbandwidth = 1e9\nname = a\0b\n";
  FILE *f = tmpfile();
  ir_diag *d = ir_diag_new(f ? f : stderr);
  CHECK(pass_target_parse("nul.target", nul, sizeof nul - 1, &t, d) == -1);
  ir_diag_free(d);
  if (f) fclose(f);
  char longname[200] = "flops_bf16 = 1e9\nflops_fp32 = 1e9\nbandwidth = 1e9\nname = ";
  memset(longname + strlen(longname), 'x', 100);
  rc = parse_target(longname, &t, msgs, sizeof msgs);
  CHECK_EQ_INT(rc, -1);
}

static ir_graph *compile(const char *config, ir_diag *d, char **text) {
  size_t len;
  *text = ir_read_file("examples/gpt.tg", 1 << 20, &len, d);
  fe_options fo = {.config = config};
  return *text ? fe_compile("examples/gpt.tg", *text, len, &fo, d) : NULL;
}

static double param_count(const ir_graph *g) {
  double n = 0;
  for (int i = 0; i < g->n_params; i++) n += (double)ir_type_numel(&g->params[i]->type);
  return n;
}

static void test_gpt(void) {
  ir_diag *d = ir_diag_new(stderr);
  char *text;
  ir_graph *g = compile("gpt2_124m", d, &text);
  CHECK(g != NULL);
  if (g) CHECK(param_count(g) == 124439808.0);
  ir_graph_free(g);
  free(text);

  double t0 = now_s();
  g = compile("gpt3_175b", d, &text);
  CHECK(g != NULL);
  if (g) {
    double t1 = now_s();
    double n = param_count(g);
    ir_value *wrt[4096 + 1];
    ir_type types[4096];
    int np = g->n_params < 4096 ? g->n_params : 4096;
    wrt[0] = g->outputs[0].value;
    for (int i = 0; i < np; i++) wrt[1 + i] = g->params[i], types[i] = g->params[i]->type;
    ir_node *gn = ir_graph_add_node(g, IR_OP_GRAD, wrt, np + 1, types, np, NULL, 0, NULL, wrt[0]->loc);
    for (int i = 0; i < np; i++) ir_graph_add_output(g, gn->out[i]->name, gn->out[i]);
    pass_options o = {.diag = d};
    CHECK(pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &o) == 0);
    double t2 = now_s();
    pass_graph_cost c;
    pass_graph_cost_of(g, &c);
    pass_mem_report mr;
    CHECK(pass_memplan_analyze(g, &mr) == 0);
    double t3 = now_s();
    printf("gpt3_175b: %.0f parameters, %d nodes; compile %.3f s, gradients + passes %.3f s, cost + memory plan %.3f s\n",
           n, g->n_nodes, t1 - t0, t2 - t1, t3 - t2);
    CHECK(t3 - t0 < 30);
    pass_train_memory m = pass_training_memory(n, 4, 2, 0, true);
    printf("gpt3_175b parameters in fp32: %.0f bytes (%.2f GB)\n", m.params, m.params / 1e9);
    CHECK(m.params == 4 * n);
    CHECK(m.params > 690e9 && m.params < 710e9); /* "700 GB" */
    CHECK(c.flops[PASS_PHASE_FORWARD] > 0);
    CHECK_NEAR(c.flops[PASS_PHASE_BACKWARD] / c.flops[PASS_PHASE_FORWARD], 2.0, 0.01);
  }
  ir_graph_free(g);
  free(text);
  ir_diag_free(d);
}

int main(void) {
  test_closed_form();
  test_targets();
  test_roofline();
  test_param_groups();
  test_step_roofline();
  test_memory();
  test_target_file();
  test_gpt();
  return check_done();
}
