/* tests/unit/test_memplan.c — the memory plan (analysis/memplan.c) is valid
 * and is what the executor allocates, on: every example (forward, and its
 * training graph from the autodiff pass), the textual-IR corner cases
 * (outputs that are inputs or params or listed twice, results nobody reads,
 * dead nodes, multi-result split), and hand-made graphs.
 *  - valid: every result of a live node has a location; arena offsets are
 *    aligned; two arena buffers live at the same step never overlap in
 *    memory; a view shares its operand's buffer, an in-place result the
 *    buffer of the operand it names, which nothing reads later;
 *  - predicted (pass_predict_peak_bytes) = allocated (rt_stats.peak_bytes);
 *  - running a program twice on the same arena gives the same bits (nothing
 *    depends on what an earlier run left in it).
 * Also the report's parts (activation peak, saved bytes, final bytes).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "testgraph.h"
#include "frontend.h"
#include "pass.h"
#include "runtime.h"

static int execute(const ir_graph *g, rt_stats *st) {
  rt_tensor **out = calloc((size_t)g->n_outputs + 1, sizeof *out);
  int rc = test_execute(g, 3, 2, 4, out, st);
  for (int i = 0; i < g->n_outputs; i++) rt_tensor_free(out[i]);
  free(out);
  return rc;
}

/* The plan's invariants (see the top of this file). */
static void check_plan(const char *what, const ir_graph *g, const pass_plan *p) {
  int bad = 0;
  for (int k = 0; k < p->n_buffers; k++) {
    const pass_buffer *a = &p->buffers[k];
    if (a->space != PASS_SPACE_ARENA) continue;
    if (a->offset % p->alignment || a->offset + a->bytes > p->arena_bytes) bad++;
    for (int j = k + 1; j < p->n_buffers; j++) {
      const pass_buffer *b = &p->buffers[j];
      if (b->space != PASS_SPACE_ARENA || a->last < b->first || b->last < a->first) continue;
      if (a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes && a->bytes && b->bytes) {
        if (bad++ < 3) fprintf(stderr, "  %s: buffers %d and %d overlap in memory while both live\n", what, k, j);
      }
    }
  }
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *n = g->nodes[p->steps[s].node];
    for (int r = 0; r < n->n_out; r++) {
      const pass_loc *l = &p->loc[n->out[r]->id];
      if (l->space == PASS_SPACE_NONE || l->buffer < 0) bad++;
      if (p->steps[s].view && l->buffer != p->loc[n->in[0]->id].buffer) bad++;
      if (l->reused_operand >= 0) {
        const ir_value *op = n->in[l->reused_operand];
        if (p->loc[op->id].buffer != l->buffer) bad++;
        for (int t = s + 1; t < p->n_steps; t++) /* nothing reads the operand later */
          for (int i = 0; i < g->nodes[p->steps[t].node]->n_in; i++) bad += g->nodes[p->steps[t].node]->in[i] == op;
      }
    }
  }
  if (bad) fprintf(stderr, "  %s: %d plan invariants broken\n", what, bad);
  CHECK_EQ_INT(bad, 0);
}

static void check_graph(const char *what, const ir_graph *g) {
  pass_plan *p = pass_memplan(g, NULL);
  CHECK(p != NULL);
  if (p) check_plan(what, g, p);
  pass_plan_free(p);
  rt_stats st = {0};
  int rc = execute(g, &st);
  CHECK_EQ_INT(rc, 0);
  size_t pred = pass_predict_peak_bytes(g);
  printf("%-40s planned %9zu allocated %9zu bytes\n", what, pred, st.peak_bytes);
  CHECK_EQ_INT(pred, st.peak_bytes);
  /* twice on one arena: the same bits */
  char err[512];
  rt_device *dev = rt_device_open(&rt_cpu_backend, err, sizeof err);
  rt_program *prog = rt_program_new(dev, g, NULL, err, sizeof err);
  CHECK(prog != NULL);
  rt_tensor **in = calloc((size_t)g->n_inputs + 1, sizeof *in), **par = calloc((size_t)g->n_params + 1, sizeof *par);
  for (int i = 0; i < g->n_inputs; i++) {
    in[i] = rt_device_tensor_new(dev, &g->inputs[i]->type, err, sizeof err);
    rt_fill_random(in[i], 3, g->inputs[i]->name, 4);
  }
  for (int i = 0; i < g->n_params; i++) {
    par[i] = rt_device_tensor_new(dev, &g->params[i]->type, err, sizeof err);
    rt_init_param(par[i], g->params[i], 2);
  }
  void **first = calloc((size_t)g->n_outputs + 1, sizeof *first);
  for (int run = 0; prog && run < 2; run++) {
    CHECK_EQ_INT(rt_program_run(prog, in, par, err, sizeof err), 0);
    for (int o = 0; o < g->n_outputs; o++) {
      const rt_tensor *t = rt_program_output(prog, o);
      if (run == 0) {
        first[o] = malloc(t->nbytes ? t->nbytes : 1);
        memcpy(first[o], t->data, t->nbytes);
      } else {
        CHECK(memcmp(first[o], t->data, t->nbytes) == 0);
      }
    }
  }
  for (int o = 0; o < g->n_outputs; o++) free(first[o]);
  free(first);
  for (int i = 0; i < g->n_inputs; i++) rt_device_tensor_free(in[i]);
  for (int i = 0; i < g->n_params; i++) rt_device_tensor_free(par[i]);
  free(in), free(par);
  rt_program_free(prog);
  rt_device_close(dev);
}

static void add_training(ir_graph *g) {
  ir_value *loss = g->outputs[0].value;
  for (int i = 0; i < g->n_outputs; i++)
    if (strcmp(g->outputs[i].name, "loss") == 0) loss = g->outputs[i].value;
  if (loss->type.rank > 0) {
    int64_t axes[IR_MAX_RANK];
    for (int i = 0; i < loss->type.rank; i++) axes[i] = i;
    ir_attr at[2] = {ir_attr_ints("axes", axes, loss->type.rank), ir_attr_int("keepdims", 0)};
    loss = ir_graph_build1(g, IR_OP_REDUCE_SUM, &loss, 1, at, 2, "sumloss", loss->loc);
  }
  ir_value *wrt[64];
  ir_type types[64];
  int n = 0;
  wrt[0] = loss;
  for (int i = 0; i < g->n_params && n < 63; i++) wrt[1 + n++] = g->params[i];
  if (n == 0)
    for (int i = 0; i < g->n_inputs && n < 63; i++)
      if (ir_dtype_is_float(g->inputs[i]->type.dtype)) wrt[1 + n++] = g->inputs[i];
  for (int i = 0; i < n; i++) types[i] = wrt[1 + i]->type;
  ir_node *gn = ir_graph_add_node(g, IR_OP_GRAD, wrt, n + 1, types, n, NULL, 0, NULL, loss->loc);
  for (int i = 0; i < n; i++) {
    gn->out[i]->role = IR_ROLE_GRAD;
    ir_graph_add_output(g, gn->out[i]->name, gn->out[i]);
  }
}

static void test_examples(void) {
  const char *files[] = {"examples/mlp.tg", "examples/transformer_block.tg", "examples/straight_line.tg",
                         "examples/hw1_q4.tg"};
  for (int f = 0; f < 4; f++)
    for (int train = 0; train < 2; train++) {
      ir_diag *d = ir_diag_new(stderr);
      size_t len;
      char *text = ir_read_file(files[f], 1 << 20, &len, d);
      ir_graph *g = text ? fe_compile(files[f], text, len, &(fe_options){0}, d) : NULL;
      CHECK(g != NULL);
      if (g) {
        if (train) add_training(g);
        pass_options o = {.diag = d, .verify_each = true};
        int rc = pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &o);
        CHECK_EQ_INT(rc, 0);
        char what[128];
        snprintf(what, sizeof what, "%s%s", files[f], train ? " (training)" : "");
        if (rc == 0) check_graph(what, g);
        if (rc == 0 && train) {
          pass_mem_report r;
          CHECK_EQ_INT(pass_memplan_analyze(g, &r), 0);
          CHECK(r.first_backward_node >= 0);
          CHECK(r.activation_peak_bytes <= r.peak_bytes || r.peak_role_bytes[IR_ROLE_ACT] <= r.peak_bytes);
        }
      }
      ir_graph_free(g);
      free(text);
      ir_diag_free(d);
    }
}

/* The executor's corner cases, written as textual IR. */
static const char *const corner_ir =
    "tgc.ir 1\n"
    "graph @corners\n"
    "  input %x : f32[4, 6] loc 1:1\n"
    "  param %w : f32[6, 6] init normal(0.5) loc 2:1\n"
    "  %a = matmul %x, %w : f32[4, 6] loc 3:1\n"
    "  %unused = exp %a : f32[4, 6] loc 4:1\n"
    "  %s0, %s1 = split %a {axis = 1, sizes = [2, 4]} : f32[4, 2], f32[4, 4] loc 5:1\n"
    "  %b = tanh %s1 : f32[4, 4] loc 6:1\n"
    "  %c = concat %s0, %b {axis = 1} : f32[4, 6] loc 7:1\n"
    "  %d = add %c, %x : f32[4, 6] loc 8:1\n"
    "  %e = square %d : f32[4, 6] role grad loc 9:1\n"
    "  output \"x_again\" = %x\n"
    "  output \"w_again\" = %w\n"
    "  output \"d\" = %d\n"
    "  output \"d_twice\" = %d\n"
    "  output \"e\" = %e\n"
    "end\n";

static void test_corners(void) {
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *g = ir_parse("corners.ir", corner_ir, strlen(corner_ir), d);
  CHECK(g != NULL);
  if (g) {
    CHECK_EQ_INT(ir_verify(g, d), 0);
    check_graph("corners (outputs = inputs, twice, unused)", g);
    pass_mem_report r;
    pass_memplan_analyze(g, &r);
    /* at the end: d and e (96 B each) in the arena; x, w are the caller's, d twice is one buffer */
    CHECK_EQ_INT(r.final_bytes, 96 * 2);
    CHECK_EQ_INT(r.first_backward_node, 6);
    /* a dead node is neither run nor counted */
    g->nodes[1]->dead = true; /* %unused */
    check_graph("corners with a dead node", g);
  }
  ir_graph_free(g);
  ir_diag_free(d);
}

/* A deep chain where intermediates are freed as soon as they are used. */
static void test_chain(void) {
  ir_graph *g = ir_graph_new("chain", NULL);
  ir_type t = {IR_DT_F64, 1, {1000}};
  ir_value *v = ir_graph_add_input(g, "x", t, (ir_loc){0});
  for (int i = 0; i < 50; i++) v = ir_graph_build1(g, i % 2 ? IR_OP_SIN : IR_OP_COS, &v, 1, NULL, 0, "v", (ir_loc){0});
  ir_graph_add_output(g, "y", v);
  check_graph("chain of 50 elementwise ops", g);
  /* every op after the first computes in place: one block of 8000 bytes, 8192 aligned */
  CHECK_EQ_INT(pass_predict_peak_bytes(g), 8192);
  pass_mem_report r;
  CHECK_EQ_INT(pass_memplan_analyze(g, &r), 0);
  CHECK_EQ_INT(r.peak_bytes, 8000);
  ir_graph_free(g);
}

/* NCCL's rule for a collective's buffers (pass_plan_check_comm): the plan
 * never overlaps a result with its operand but for an all_reduce in place
 * (which it makes when the operand dies there); the operand of a
 * collective whose result is an output lives to the end;
 * a planted overlap is caught and named, and so is any on a real sharded
 * step (every rt_program_new checks its plan). */
static const char *comm_ir =
    "tgc.ir 1\n"
    "graph @comm\n"
    "  mesh tp = 2\n"
    "  input %x : f32[4, 6] loc 1:1\n"
    "  %a = exp %x : f32[4, 6] loc 1:1\n"
    "  %s = all_reduce %a {axis = \"tp\", n = 2} : f32[4, 6] loc 2:1\n"
    "  %g = all_gather %s {axis = \"tp\", n = 2, dim = 0} : f32[8, 6] loc 3:1\n"
    "  %r = reduce_scatter %g {axis = \"tp\", n = 2, dim = 1} : f32[8, 3] loc 4:1\n"
    "  output \"r\" = %r\n"
    "end\n";

static void test_comm_overlap(void) {
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *g = ir_parse("comm.ir", comm_ir, strlen(comm_ir), d);
  CHECK(g != NULL);
  if (g) {
    CHECK_EQ_INT(ir_verify(g, d), 0);
    pass_plan *p = pass_memplan(g, NULL);
    char why[512] = "";
    CHECK_EQ_INT(pass_plan_check_comm(g, p, why, sizeof why), 0);
    const ir_value *a = g->nodes[0]->out[0], *s = g->nodes[1]->out[0], *ag = g->nodes[2]->out[0];
    const ir_value *rs = g->nodes[3]->out[0];
    CHECK(p->loc[ag->id].offset + p->loc[ag->id].bytes <= p->loc[s->id].offset ||
          p->loc[s->id].offset + p->loc[s->id].bytes <= p->loc[ag->id].offset);
    /* the all_reduce takes its dying operand's buffer (in place: NCCL's form, nothing to keep in flight apart) */
    CHECK_EQ_INT(p->loc[s->id].buffer, p->loc[a->id].buffer);
    CHECK_EQ_INT(p->loc[s->id].reused_operand, 0);
    /* the reduce_scatter's result leaves the program: its operand is not reused before the next run of
     * collectives after more work, here none: the end (in flight until then) */
    CHECK_EQ_INT(p->buffers[p->loc[ag->id].buffer].last, p->n_steps);
    CHECK(p->buffers[p->loc[s->id].buffer].last < p->n_steps); /* an operand of a collective whose result stays in */
    pass_loc keep = p->loc[a->id];
    p->loc[a->id].space = p->loc[s->id].space, p->loc[a->id].offset = p->loc[s->id].offset; /* all_reduce in place: allowed */
    CHECK_EQ_INT(pass_plan_check_comm(g, p, why, sizeof why), 0);
    p->loc[a->id].offset += 32; /* partly over its result: refused */
    CHECK_EQ_INT(pass_plan_check_comm(g, p, why, sizeof why), -1);
    CHECK(strstr(why, "all_reduce %s overlaps its operand %a") != NULL);
    p->loc[a->id] = keep;
    p->loc[rs->id].space = p->loc[ag->id].space, p->loc[rs->id].offset = p->loc[ag->id].offset; /* reduce_scatter into its operand */
    CHECK_EQ_INT(pass_plan_check_comm(g, p, why, sizeof why), -1);
    CHECK(strstr(why, "reduce_scatter %r overlaps its operand %g") != NULL);
    printf("  planted overlap: %s\n", why);
    pass_plan_free(p);
  }
  ir_graph_free(g);
  ir_diag_free(d);
}

int main(void) {
  test_comm_overlap();
  test_chain();
  test_corners();
  test_examples();
  return check_done();
}
