/* tests/unit/test_derivative.c — the derivative graphs `tgc grad` and
 * `tgc gradcheck` run (passes/derivative.c, passes/retype.c), built from
 * .tg source and run on the CPU:
 *   - pass_append_gradients: y1 = (x1 + x2)^2, y2 = (x1 - x2)^2 at (2, 4):
 *     the gradient of y2 is (-4, 4) and that of 1 y1 + 3 y2 is (0, 24)
 *     (2 (x1 + x2) = 12, 2 (x1 - x2) = -4; exact in f64), outputs d_x1,
 *     d_x2 after the model's; a non-scalar output is summed (the gradient
 *     of sum(x * x) is 2 x);
 *   - pass_append_tangents: t_x1 = 1 gives t_y1 = 12, t_y2 = -4;
 *   - pass_run_until_autodiff: the model's own grad is expanded, passes
 *     after autodiff do not run, and a disabled autodiff still runs;
 *   - pass_retyped_copy: every float value and cast target in the new
 *     dtype, names, roles, layers and locations kept; an op that does not
 *     type-check in the new dtype is reported at its node;
 *   - pass_build_gradcheck: the layout of its two f64 graphs (outputs,
 *     tangent inputs, leaf indices), and its two user errors.
 * Every number compared here is exact (small integers in f64).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"
#include "pass.h"
#include "runtime.h"

static char *errors; /* the diagnostics of the last diag closed by close_diag */
static FILE *err_file;

static ir_diag *open_diag(void) {
  free(errors);
  errors = NULL;
  size_t n = 0;
  err_file = open_memstream(&errors, &n);
  return ir_diag_new(err_file);
}

static void close_diag(ir_diag *d) {
  ir_diag_free(d);
  fclose(err_file);
}

static ir_graph *compile(const char *src, ir_diag *d) {
  ir_graph *g = fe_compile("t.tg", src, strlen(src), NULL, d);
  CHECK(g != NULL);
  return g;
}

/* Runs g with inputs[i] = x[i] (every element); outputs into out[]. */
static int run(const ir_graph *g, const double *x, rt_tensor **out) {
  rt_tensor **in = calloc((size_t)g->n_inputs + 1, sizeof *in), **pa = calloc((size_t)g->n_params + 1, sizeof *pa);
  for (int i = 0; i < g->n_inputs; i++) {
    in[i] = rt_tensor_new(&g->inputs[i]->type);
    for (int64_t e = 0; e < ir_type_numel(&g->inputs[i]->type); e++) rt_tensor_set(in[i], e, x[i]);
  }
  for (int i = 0; i < g->n_params; i++) {
    pa[i] = rt_tensor_new(&g->params[i]->type);
    rt_init_param(pa[i], g->params[i], 1);
  }
  char err[512];
  int rc = rt_run(&rt_cpu_backend, g, in, pa, out, NULL, err, sizeof err);
  if (rc) fprintf(stderr, "run: %s\n", err);
  for (int i = 0; i < g->n_inputs; i++) rt_tensor_free(in[i]);
  for (int i = 0; i < g->n_params; i++) rt_tensor_free(pa[i]);
  free(in);
  free(pa);
  return rc;
}

static void free_outputs(const ir_graph *g, rt_tensor **out) {
  for (int i = 0; i < g->n_outputs; i++) rt_tensor_free(out[i]);
}

static int output_index(const ir_graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (strcmp(g->outputs[i].name, name) == 0) return i;
  return -1;
}

static const char *hw1 = "fn main(x1: f64, x2: f64) -> (y1: f64, y2: f64) {\n"
                         "  return (x1 + x2) ** 2, (x1 - x2) ** 2\n"
                         "}\n";

static void test_gradients(void) {
  ir_diag *d = open_diag();
  pass_options po = {.diag = d};
  /* the gradient of one output */
  ir_graph *g = compile(hw1, d);
  if (!g) return;
  ir_value *wrt[2] = {g->inputs[0], g->inputs[1]}, *of[1] = {g->outputs[1].value};
  pass_grad_request r = {of, NULL, 1, wrt, 2};
  CHECK_EQ_INT(pass_append_gradients(g, &r, &po), 0);
  CHECK_EQ_INT(g->n_outputs, 4);
  CHECK_STR(g->outputs[2].name, "d_x1");
  CHECK_STR(g->outputs[3].name, "d_x2");
  rt_tensor *out[8] = {0};
  double at[2] = {2, 4};
  CHECK_EQ_INT(run(g, at, out), 0);
  if (out[3]) {
    CHECK_NEAR(rt_tensor_get(out[1], 0), 4, 0);
    CHECK_NEAR(rt_tensor_get(out[2], 0), -4, 0);
    CHECK_NEAR(rt_tensor_get(out[3], 0), 4, 0);
  }
  free_outputs(g, out);
  ir_graph_free(g);
  /* seeded outputs: 1 y1 + 3 y2 */
  g = compile(hw1, d);
  ir_value *wrt2[2] = {g->inputs[0], g->inputs[1]}, *both[2] = {g->outputs[0].value, g->outputs[1].value};
  double w[2] = {1, 3};
  pass_grad_request r2 = {both, w, 2, wrt2, 2};
  CHECK_EQ_INT(pass_append_gradients(g, &r2, &po), 0);
  memset(out, 0, sizeof out);
  CHECK_EQ_INT(run(g, at, out), 0);
  if (out[3]) {
    CHECK_NEAR(rt_tensor_get(out[output_index(g, "d_x1")], 0), 0, 0);
    CHECK_NEAR(rt_tensor_get(out[output_index(g, "d_x2")], 0), 24, 0);
  }
  free_outputs(g, out);
  ir_graph_free(g);
  /* a non-scalar output is summed: d sum(x * x) / dx = 2 x */
  g = compile("fn main(x: f64[3]) -> (y: f64[3]) { return x * x }\n", d);
  ir_value *x = g->inputs[0], *y = g->outputs[0].value;
  pass_grad_request r3 = {&y, NULL, 1, &x, 1};
  CHECK_EQ_INT(pass_append_gradients(g, &r3, &po), 0);
  memset(out, 0, sizeof out);
  double three[1] = {3};
  CHECK_EQ_INT(run(g, three, out), 0);
  for (int e = 0; out[1] && e < 3; e++) CHECK_NEAR(rt_tensor_get(out[1], e), 6, 0);
  free_outputs(g, out);
  ir_graph_free(g);
  close_diag(d);
  CHECK_STR(errors, "");
}

static void test_tangents(void) {
  ir_diag *d = open_diag();
  pass_options po = {.diag = d};
  ir_graph *g = compile(hw1, d);
  if (!g) return;
  ir_value *wrt[1] = {g->inputs[0]}, *tan[1] = {NULL};
  CHECK_EQ_INT(pass_append_tangents(g, wrt, 1, tan, &po), 0);
  CHECK(tan[0] != NULL && g->n_inputs == 3 && g->inputs[2] == tan[0]);
  CHECK_STR(tan[0] ? tan[0]->name : NULL, "t_x1");
  CHECK_EQ_INT(g->n_outputs, 4);
  CHECK_STR(g->outputs[2].name, "t_y1");
  CHECK_STR(g->outputs[3].name, "t_y2");
  rt_tensor *out[8] = {0};
  double at[3] = {2, 4, 1};
  CHECK_EQ_INT(run(g, at, out), 0);
  if (out[3]) {
    CHECK_NEAR(rt_tensor_get(out[2], 0), 12, 0);
    CHECK_NEAR(rt_tensor_get(out[3], 0), -4, 0);
  }
  free_outputs(g, out);
  ir_graph_free(g);
  close_diag(d);
  CHECK_STR(errors, "");
}

/* The passes a pipeline ran, from its --time-passes table. */
static void ran_passes(ir_graph *g, const bool *disabled, char *list, size_t cap) {
  char *t = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&t, &n);
  ir_diag *d = ir_diag_new(stderr);
  pass_options po = {.diag = d, .time_passes = true, .time_out = f, .disabled = disabled};
  CHECK_EQ_INT(pass_run_until_autodiff(g, &po), 0);
  ir_diag_free(d);
  fclose(f);
  list[0] = 0;
  for (char *line = t; line && *line;) { /* the rows that name a pass */
    char word[64];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(line, " \n"), line);
    if (pass_lookup(word) >= 0) snprintf(list + strlen(list), cap - strlen(list), "%s%s", *list ? "," : "", word);
    line = strchr(line, '\n');
    if (line) line++;
  }
  free(t);
}

static void test_until_autodiff(void) {
  const char *src = "fn main(x: f64) -> (y: f64, g: f64) {\n"
                    "  y = x * x\n"
                    "  return y, grad(y, x)\n"
                    "}\n";
  ir_diag *d = open_diag();
  char list[256];
  for (int variant = 0; variant < 2; variant++) {
    ir_graph *g = compile(src, d);
    if (!g) continue;
    bool disabled[PASS_COUNT] = {false};
    disabled[PASS_AUTODIFF] = variant == 1;
    ran_passes(g, disabled, list, sizeof list);
    CHECK_STR(list, variant ? "autodiff" : "fuse-attention,autodiff");
    bool grad_left = false;
    for (int i = 0; i < g->n_nodes; i++) grad_left |= !g->nodes[i]->dead && g->nodes[i]->op == IR_OP_GRAD;
    CHECK(!grad_left);
    ir_graph_free(g);
  }
  close_diag(d);
}

static void test_retyped_copy(void) {
  const char *src = "param w: f32[3] = ones\n"
                    "fn main(x: f32[3], n: i32[3]) -> (y: f32, z: f32[3]) {\n"
                    "  repeat 2 { x = x * w }\n"
                    "  z = cast(cast(n, f32) + x, f16)\n"
                    "  return sum(x), cast(z, f32)\n"
                    "}\n";
  ir_diag *d = open_diag();
  ir_graph *g = compile(src, d);
  if (!g) return;
  ir_graph *h = pass_retyped_copy(g, IR_DT_F64, d);
  CHECK(h != NULL);
  if (h) {
    CHECK_EQ_INT(ir_verify(h, d), 0);
    CHECK_EQ_INT(h->n_inputs, 2);
    CHECK_EQ_INT(h->inputs[1]->type.dtype, IR_DT_I32);
    CHECK_EQ_INT(h->params[0]->type.dtype, IR_DT_F64);
    CHECK_STR(h->params[0]->name, "w");
    CHECK_EQ_INT(h->n_outputs, 2);
    CHECK_STR(h->outputs[1].name, "z");
    int floats = 0, casts = 0, layered = 0;
    for (int i = 0; i < h->n_nodes; i++) {
      const ir_node *n = h->nodes[i];
      const ir_node *m = g->nodes[i];
      CHECK(n->op == m->op && n->loc.line == m->loc.line && n->layer == m->layer);
      layered += n->layer == 1;
      for (int j = 0; j < n->n_out; j++) {
        CHECK_STR(n->out[j]->name, m->out[j]->name);
        CHECK_EQ_INT(n->out[j]->role, m->out[j]->role);
        floats += ir_dtype_is_float(n->out[j]->type.dtype);
        CHECK(!ir_dtype_is_float(n->out[j]->type.dtype) || n->out[j]->type.dtype == IR_DT_F64);
      }
      for (int k = 0; n->op == IR_OP_CAST && k < n->n_attrs; k++)
        if (n->attrs[k].kind == IR_ATTR_DTYPE) casts += n->attrs[k].i == IR_DT_F64;
    }
    CHECK_EQ_INT(g->n_nodes, h->n_nodes);
    CHECK(floats >= 6 && layered >= 1);
    CHECK_EQ_INT(casts, 3);
  }
  ir_graph_free(h);
  /* an op that has no meaning in the new dtype: reported at its node */
  h = pass_retyped_copy(g, IR_DT_BOOL, d);
  CHECK(h == NULL);
  ir_graph_free(g);
  close_diag(d);
  CHECK(strstr(errors, "t.tg:3:") && strstr(errors, "error: converting to bool: "));
}

static void test_gradcheck_graphs(void) {
  const char *src = "param w: f32[2] = ones\n"
                    "fn main(x: f32[2], k: i32[2], s: f32) -> (y: f32[2], z: i32[2]) {\n"
                    "  return x * w * s, k\n"
                    "}\n";
  ir_diag *d = open_diag();
  ir_graph *g = compile(src, d);
  if (!g) return;
  pass_gradcheck c;
  CHECK_EQ_INT(pass_build_gradcheck(g, &c, d), 0);
  CHECK(c.loss && c.deriv && c.loss_summed);
  CHECK_EQ_INT(c.n_checked, 3); /* x, s (inputs), w (param); not k */
  if (c.n_checked == 3) {
    CHECK_EQ_INT(c.leaf[0], 0);
    CHECK_EQ_INT(c.leaf[1], 2);
    CHECK_EQ_INT(c.leaf[2], 3);
    CHECK_EQ_INT(c.loss->n_outputs, 1);
    CHECK_STR(c.loss->outputs[0].name, "loss");
    CHECK_EQ_INT(c.loss->outputs[0].value->type.dtype, IR_DT_F64);
    CHECK_EQ_INT(c.deriv->n_inputs, 6);
    CHECK_STR(c.deriv->inputs[c.tangent_input[0]]->name, "t_x");
    CHECK_STR(c.deriv->inputs[c.tangent_input[1]]->name, "t_s");
    CHECK_STR(c.deriv->inputs[c.tangent_input[2]]->name, "t_w");
    CHECK_STR(c.deriv->outputs[0].name, "loss");
    CHECK_STR(c.deriv->outputs[1].name, "jvp");
    CHECK_STR(c.deriv->outputs[c.grad_output[0]].name, "d_x");
    CHECK_STR(c.deriv->outputs[c.grad_output[2]].name, "d_w");
    CHECK_EQ_INT(c.grad_output[2], 4);
    CHECK_EQ_INT(c.deriv->params[0]->type.dtype, IR_DT_F64);
    /* d loss / d s = sum(x * w) = 2 x at x = 1.5, w = 1; jvp along t_s = 1 */
    rt_tensor *out[8] = {0};
    double at[6] = {1.5, 7, 2, 0, 1, 0};
    CHECK_EQ_INT(run(c.deriv, at, out), 0);
    if (out[4]) {
      CHECK_NEAR(rt_tensor_get(out[0], 0), 6, 0);
      CHECK_NEAR(rt_tensor_get(out[1], 0), 3, 0);
      CHECK_NEAR(rt_tensor_get(out[c.grad_output[1]], 0), 3, 0);
      CHECK_NEAR(rt_tensor_get(out[c.grad_output[2]], 1), 3, 0);
    }
    free_outputs(c.deriv, out);
  }
  pass_gradcheck_free(&c);
  ir_graph_free(g);
  close_diag(d);
  CHECK_STR(errors, "");
  /* the errors a user can meet */
  d = open_diag();
  g = compile("fn main(k: i32[2], x: f32) -> (z: i32[2], y: f32) { return k, x }\n", d);
  CHECK_EQ_INT(pass_build_gradcheck(g, &c, d), -1);
  CHECK(c.loss == NULL && c.deriv == NULL);
  ir_graph_free(g);
  g = compile("fn main(k: i32[2]) -> (y: f32) { return sum(cast(k, f32)) }\n", d);
  CHECK_EQ_INT(pass_build_gradcheck(g, &c, d), -1);
  ir_graph_free(g);
  close_diag(d);
  CHECK_STR(errors, "tgc: error: gradcheck: the first output of the model must be floating-point\n"
                    "tgc: error: gradcheck: the model has no floating-point input or parameter to check\n");
}

int main(void) {
  test_gradients();
  test_tangents();
  test_until_autodiff();
  test_retyped_copy();
  test_gradcheck_graphs();
  free(errors);
  return check_done();
}
