/* tests/unit/test_frontend.c — the .tg frontend end to end: small programs
 * compiled from strings with fe_compile (diagnostics captured in memory),
 * checking the graph (ops, types, names, outputs, layers, param names,
 * attributes) or the exact error messages. Also config/-D handling,
 * fe_configs, and compile speed on a 100-layer model.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "ast.h"
#include "frontend.h"

static char *last_errors; /* diagnostics of the last compile */

static ir_graph *compile_opt(const char *src, const fe_options *opt) {
  free(last_errors);
  last_errors = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&last_errors, &n);
  ir_diag *d = ir_diag_new(f);
  ir_diag_set_max_errors(d, 100);
  ir_graph *g = fe_compile("t.tg", src, strlen(src), opt, d);
  if (g && ir_verify(g, d) != 0) {
    fprintf(stderr, "verifier rejected the graph of:\n%s\n", src);
    ir_graph_free(g);
    g = NULL;
  }
  ir_diag_free(d);
  fclose(f);
  return g;
}

static ir_graph *compile(const char *src) { return compile_opt(src, NULL); }

/* The error text must contain want. */
static void check_error(const char *src, const char *want) {
  ir_graph *g = compile(src);
  CHECK(g == NULL);
  ir_graph_free(g);
  if (!last_errors || !strstr(last_errors, want))
    fprintf(stderr, "want error containing: %s\ngot:\n%s\n", want, last_errors ? last_errors : "(none)");
  CHECK(last_errors && strstr(last_errors, want));
}

static int count_substr(const char *s, const char *sub) {
  int n = 0;
  for (const char *p = s; p && (p = strstr(p, sub)); p += strlen(sub)) n++;
  return n;
}

static const ir_node *find_op(const ir_graph *g, ir_op op, int nth) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->op == op && nth-- == 0) return g->nodes[i];
  return NULL;
}

static const char *type_s(const ir_type *t) {
  static char buf[8][128];
  static int k;
  k = (k + 1) % 8;
  return ir_type_str(t, buf[k], sizeof buf[k]);
}

static void test_straight_line(void) {
  const char *src = "fn f(w1: f64, w2: f64) -> f64 {\n"
                    "  z1 = w1 / w2\n"
                    "  z2 = sin(2 * pi * z1)\n"
                    "  z3 = exp(2 * w2)\n"
                    "  z4 = 3 * z1 - z3\n"
                    "  z5 = z2 + z4\n"
                    "  z6 = z4 * z5\n"
                    "  return z6\n"
                    "}\n";
  ir_graph *g = compile(src);
  CHECK(g != NULL);
  if (!g) return;
  CHECK_STR(g->name, "f");
  CHECK_STR(g->source_file, "t.tg");
  CHECK_EQ_INT(g->n_inputs, 2);
  CHECK_STR(g->inputs[0]->name, "w1");
  CHECK_STR(type_s(&g->inputs[1]->type), "f64[]");
  CHECK_EQ_INT(g->inputs[0]->loc.line, 1);
  CHECK_EQ_INT(g->inputs[0]->loc.col, 6);
  CHECK_EQ_INT(g->n_outputs, 1);
  CHECK_STR(g->outputs[0].name, "z6");
  CHECK_STR(g->outputs[0].value->name, "z6");
  const ir_node *div = find_op(g, IR_OP_DIV, 0);
  CHECK(div && strcmp(div->out[0]->name, "z1") == 0);
  CHECK(div && div->loc.line == 2 && div->loc.col == 8 && div->layer == -1);
  CHECK(div && div->loc.file && strcmp(div->loc.file, "t.tg") == 0);
  /* 2 * pi folds into one constant */
  const ir_node *c = find_op(g, IR_OP_CONST, 0);
  CHECK(c && c->out[0]->type.dtype == IR_DT_F64);
  CHECK_NEAR(c ? ir_node_attr_float(c, "value", 0) : 0, 6.283185307179586, 1e-15);
  const ir_node *sn = find_op(g, IR_OP_SIN, 0);
  CHECK(sn && strcmp(sn->out[0]->name, "z2") == 0);
  CHECK(find_op(g, IR_OP_EXP, 0) && find_op(g, IR_OP_SUB, 0) && find_op(g, IR_OP_ADD, 0));
  CHECK_EQ_INT(g->n_nodes, 12);
  ir_graph_free(g);
}

static void test_hw1_q4(void) {
  ir_graph *g = compile("fn main(x1: f64, x2: f64) -> (y1: f64, y2: f64) {\n"
                        "  v1 = x1 + x2\n  v2 = x1 - x2\n  y1 = v1 ** 2\n  y2 = square(v2)\n"
                        "  return y1, y2\n}\n");
  CHECK(g != NULL);
  if (!g) return;
  CHECK_EQ_INT(g->n_nodes, 4);
  CHECK_EQ_INT(g->nodes[2]->op, IR_OP_SQUARE);
  CHECK_EQ_INT(g->nodes[3]->op, IR_OP_SQUARE);
  CHECK_EQ_INT(g->n_outputs, 2);
  CHECK_STR(g->outputs[0].name, "y1");
  CHECK_STR(g->outputs[1].name, "y2");
  ir_graph_free(g);
}

static const char *doc_model =
    "config tiny  { B = 2, L = 16, D = 64, nH = 4, nL = 2 }\n"
    "config small { B = 8, L = 128, D = 256, nH = 8, nL = 4 }\n"
    "let H = D / nH\n"
    "param wte: f32[100, D] = normal(0.02)\n"
    "fn block(x: f32[B, L, D]) -> f32[B, L, D] {\n"
    "  param W: f32[D, D] = normal(0.02)\n"
    "  param b: f32[D] = zeros\n"
    "  return relu(x @ W + b)\n"
    "}\n"
    "fn main(x: f32[B, L, D], tokens: i32[B, L]) -> (loss: f32, y: f32[B, L, D]) {\n"
    "  h = x\n"
    "  repeat l in 0..nL {\n"
    "    h = block(h)\n"
    "  }\n"
    "  q = reshape(h, [B, L, nH, H])\n"
    "  loss = mean(square(h))\n"
    "  return loss, h\n"
    "}\n";

static void test_repeat_params_layers(void) {
  ir_graph *g = compile(doc_model);
  CHECK(g != NULL);
  if (!g) return;
  CHECK_STR(g->name, "main");
  CHECK_EQ_INT(g->n_params, 5);
  CHECK_STR(g->params[0]->name, "wte");
  CHECK_STR(g->params[1]->name, "l.0.block.W");
  CHECK_STR(g->params[2]->name, "l.0.block.b");
  CHECK_STR(g->params[3]->name, "l.1.block.W");
  CHECK_EQ_INT(g->params[1]->init.kind, IR_INIT_NORMAL);
  CHECK_NEAR(g->params[1]->init.a, 0.02, 0);
  CHECK_EQ_INT(g->params[2]->init.kind, IR_INIT_ZEROS);
  CHECK_STR(type_s(&g->params[1]->type), "f32[64, 64]");
  const ir_node *mm0 = find_op(g, IR_OP_MATMUL, 0), *mm1 = find_op(g, IR_OP_MATMUL, 1);
  CHECK(mm0 && mm0->layer == 0 && mm1 && mm1->layer == 1);
  CHECK(mm0 && mm0->in[1] == g->params[1]);
  const ir_node *relu1 = find_op(g, IR_OP_RELU, 1);
  CHECK(relu1 && strcmp(relu1->out[0]->name, "h.1") == 0); /* the caller's name, made unique */
  const ir_node *rs = find_op(g, IR_OP_RESHAPE, 0);
  CHECK(rs && rs->layer == -1);
  CHECK(rs && strcmp(type_s(&rs->out[0]->type), "f32[2, 16, 4, 16]") == 0);
  CHECK_EQ_INT(g->n_outputs, 2);
  CHECK_STR(g->outputs[0].name, "loss");
  CHECK_STR(g->outputs[1].name, "y");
  CHECK(g->outputs[1].value == relu1->out[0]);
  const ir_node *mean = find_op(g, IR_OP_REDUCE_MEAN, 0);
  const ir_attr *axes = mean ? ir_node_attr(mean, "axes") : NULL;
  CHECK(axes && axes->n == 3 && axes->ints[2] == 2);
  ir_graph_free(g);

  /* a repeat without a variable, nested inside a call */
  g = compile("fn lin(x: f32[4]) -> f32[4] {\n  param w: f32[4]\n  return x * w\n}\n"
              "fn main(x: f32[4]) {\n  repeat 2 { repeat j in 1..3 { x = lin(x) } }\n  return x\n}\n");
  CHECK(g != NULL);
  if (!g) return;
  CHECK_EQ_INT(g->n_params, 4);
  CHECK_STR(g->params[0]->name, "0.j.1.lin.w");
  CHECK_STR(g->params[3]->name, "1.j.2.lin.w");
  CHECK_EQ_INT(g->nodes[g->n_nodes - 1]->layer, 1); /* the outermost repeat's iteration */
  ir_graph_free(g);
}

static void test_configs(void) {
  fe_options o = {0};
  o.config = "small";
  ir_graph *g = compile_opt(doc_model, &o);
  CHECK(g && strcmp(type_s(&g->inputs[0]->type), "f32[8, 128, 256]") == 0);
  CHECK(g && g->n_params == 9);
  ir_graph_free(g);

  fe_define defs[2] = {{"D", "32"}, {"nL", "1"}};
  o = (fe_options){.defines = defs, .n_defines = 2};
  g = compile_opt(doc_model, &o);
  CHECK(g && strcmp(type_s(&g->inputs[0]->type), "f32[2, 16, 32]") == 0);
  CHECK(g && g->n_params == 3);
  ir_graph_free(g);

  fe_define bad[1] = {{"D", "abc"}};
  o = (fe_options){.defines = bad, .n_defines = 1};
  g = compile_opt(doc_model, &o);
  CHECK(g == NULL);
  CHECK_STR(last_errors, "tgc: error: -D D=abc: value is not a number\n");

  fe_define unknown[1] = {{"Q", "3"}};
  o = (fe_options){.defines = unknown, .n_defines = 1};
  g = compile_opt(doc_model, &o);
  CHECK(g == NULL);
  CHECK_STR(last_errors, "tgc: error: -D Q=3: config 'tiny' has no constant 'Q'\n");

  o = (fe_options){.config = "huge"};
  g = compile_opt(doc_model, &o);
  CHECK(g == NULL);
  CHECK_STR(last_errors, "tgc: error: unknown config 'huge'; available: tiny, small\n");

  /* a config named default wins; floats via -D */
  const char *src = "config a { N = 2 }\nconfig default { N = 3, S = 1.5 }\n"
                    "fn main(x: f32[N]) { return x * S }\n";
  g = compile(src);
  CHECK(g && g->inputs[0]->type.dims[0] == 3);
  ir_graph_free(g);
  fe_define fl[1] = {{"S", "2.5e-1"}};
  o = (fe_options){.defines = fl, .n_defines = 1};
  g = compile_opt(src, &o);
  const ir_node *c = g ? find_op(g, IR_OP_CONST, 0) : NULL;
  CHECK(c && ir_node_attr_float(c, "value", 0) == 0.25);
  ir_graph_free(g);

  /* exact integer arithmetic; / exact when it divides */
  g = compile("let A = 3 * 4 - 2\nlet B = A / 5\nlet C = 2 ** 10\n"
              "fn main(x: f32[A, B, C / 4]) { return x }\n");
  CHECK(g && strcmp(type_s(&g->inputs[0]->type), "f32[10, 2, 256]") == 0);
  ir_graph_free(g);
  check_error("let A = 7 / 2\nfn main(x: f32[A]) { return x }\n",
              "t.tg:2:16: error: dimension 'A' is not an integer: 3.5");
  check_error("let A = 4611686018427387904 * 4\nfn main(x: f32[2]) { return x }\n",
              "integer overflow in '*': 4611686018427387904 and 4");

}

/* fe_configs over src, diagnostics (syntax errors) into last_errors. */
static fe_config_set *configs_of(const char *src, const fe_options *o) {
  free(last_errors);
  last_errors = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&last_errors, &n);
  ir_diag *d = ir_diag_new(f);
  fe_config_set *s = fe_configs("t.tg", src, strlen(src), o, d);
  ir_diag_free(d);
  fclose(f);
  return s;
}

#define CHECK_CONST(cfg, nm, knd, val)                                      \
  do {                                                                      \
    const fe_const *c_ = fe_config_const(cfg, nm);                          \
    CHECK(c_ != NULL);                                                      \
    if (c_) {                                                               \
      CHECK_EQ_INT(c_->kind, knd);                                          \
      if ((knd) == FE_CONST_INT) CHECK_EQ_INT(c_->i, (int64_t)(val));       \
      if ((knd) != FE_CONST_UNKNOWN) CHECK_NEAR(c_->f, (double)(val), 0);   \
    }                                                                       \
  } while (0)

/* fe_configs: the configs of a file as data, evaluated as fe_compile binds them. */
static void test_config_data(void) {
  fe_config_set *s = configs_of(doc_model, NULL);
  CHECK(s != NULL && s->n_configs == 2);
  if (!s) return;
  CHECK_STR(s->configs[0].name, "tiny");
  CHECK_STR(s->configs[1].name, "small");
  CHECK(s->configs[0].is_default && !s->configs[1].is_default);
  CHECK(s->chosen == &s->configs[0]);
  CHECK_EQ_INT(s->configs[1].n_consts, 5);
  CHECK_EQ_INT(s->configs[1].loc.line, 2);
  CHECK_EQ_INT(s->configs[1].loc.col, 8); /* its name */
  const fe_const *l = fe_config_const(&s->configs[1], "L");
  CHECK(l && l->kind == FE_CONST_INT && l->i == 128 && l->loc.line == 2 && l->loc.col == 23 && !l->overridden);
  CHECK_STR(l ? l->loc.file : NULL, "t.tg");
  CHECK_STR(l ? l->text : NULL, "128");
  CHECK(fe_config_const(&s->configs[1], "H") == NULL); /* a let, not a config constant */
  CHECK(fe_config_const(NULL, "B") == NULL);
  CHECK_STR(last_errors, "");
  fe_config_set_free(s);

  /* values: the frontend's own evaluator (exact integer division stays an
   * integer, else a real; '**', builtins, earlier entries) */
  const char *src = "config a { B = 2, T = 8, D = 2 ** 3, H = D / 2, R = D / 3, E = 1e-5, M = maximum(B, T),\n"
                    "           G = T * B, F = B > 1, Z = (B + T) * 2 - 1 }\n"
                    "config gpt3_2_7b { X = 1, Y = X + 1, X = 5 }\n"
                    "config late { W = B }\n"
                    "fn main(x: f32[B]) { return x }\n";
  s = configs_of(src, NULL);
  CHECK(s && s->n_configs == 3 && s->chosen == &s->configs[0]);
  if (!s) return;
  const fe_config *a = &s->configs[0];
  CHECK_CONST(a, "D", FE_CONST_INT, 8);
  CHECK_CONST(a, "H", FE_CONST_INT, 4);
  CHECK_CONST(a, "R", FE_CONST_REAL, 8.0 / 3.0);
  CHECK_CONST(a, "E", FE_CONST_REAL, 1e-5);
  CHECK_CONST(a, "M", FE_CONST_INT, 8);
  CHECK_CONST(a, "G", FE_CONST_INT, 16);
  CHECK_CONST(a, "F", FE_CONST_BOOL, 1);
  CHECK_CONST(a, "Z", FE_CONST_INT, 19);
  CHECK_STR(fe_config_const(a, "Z")->text, "(B + T) * 2 - 1");
  CHECK_EQ_INT(fe_config_const(a, "G")->loc.line, 2);
  /* a duplicate entry: the first holds the name (fe_compile reports the second) */
  const fe_config *dup = &s->configs[1];
  CHECK_EQ_INT(dup->n_consts, 3);
  CHECK_CONST(dup, "X", FE_CONST_INT, 1);
  CHECK_CONST(dup, "Y", FE_CONST_INT, 2);
  CHECK_EQ_INT(dup->consts[2].kind, FE_CONST_UNKNOWN);
  /* another config's constants are not visible */
  CHECK_CONST(&s->configs[2], "W", FE_CONST_UNKNOWN, 0);
  fe_config_set_free(s);

  /* -D overrides the chosen config only; entries after it see the new value;
   * --config matches with '-', '.' and '_' alike */
  fe_define defs[] = {{"T", "16"}, {"E", "3"}, {"T", "4"}};
  fe_options o = {.defines = defs, .n_defines = 3};
  s = configs_of(src, &o);
  CHECK(s && s->chosen == &s->configs[0]);
  if (!s) return;
  CHECK_CONST(s->chosen, "T", FE_CONST_INT, 4); /* the last -D of a name wins */
  CHECK_CONST(s->chosen, "G", FE_CONST_INT, 8);
  CHECK_CONST(s->chosen, "E", FE_CONST_INT, 3);
  CHECK(fe_config_const(s->chosen, "T")->overridden && !fe_config_const(s->chosen, "G")->overridden);
  fe_config_set_free(s);
  fe_define x9[] = {{"X", "9"}};
  o = (fe_options){.config = "gpt3-2.7b", .defines = x9, .n_defines = 1};
  s = configs_of(src, &o);
  CHECK(s && s->chosen == &s->configs[1]);
  if (s) {
    CHECK_CONST(s->chosen, "Y", FE_CONST_INT, 10);
    CHECK_CONST(&s->configs[0], "T", FE_CONST_INT, 8); /* not the chosen one: no -D */
  }
  fe_config_set_free(s);
  /* a -D value that is no number, an unknown config: nothing reported here
   * (fe_compile reports them), the value unknown, no config chosen */
  fe_define bad[] = {{"T", "abc"}};
  o = (fe_options){.defines = bad, .n_defines = 1};
  s = configs_of(src, &o);
  CHECK(s != NULL);
  if (s) {
    CHECK_CONST(s->chosen, "T", FE_CONST_UNKNOWN, 0);
    CHECK_CONST(s->chosen, "G", FE_CONST_UNKNOWN, 0);
    CHECK_CONST(s->chosen, "B", FE_CONST_INT, 2);
  }
  fe_config_set_free(s);
  o = (fe_options){.config = "nope"};
  s = configs_of(src, &o);
  CHECK(s && s->chosen == NULL && s->n_configs == 3);
  CHECK_STR(last_errors, "");
  fe_config_set_free(s);

  /* no configs; code that does not compile still lists its configs; a
   * syntax error gives NULL, reported through d (or not at all with NULL) */
  s = configs_of("fn main(x: f32[2]) { return x }\n", NULL);
  CHECK(s && s->n_configs == 0 && s->chosen == NULL);
  fe_config_set_free(s);
  s = configs_of("config c { N = 3 }\nfn main(x: f32[N]) { return undefined_name(x) }\n", NULL);
  CHECK(s && s->n_configs == 1);
  if (s) CHECK_CONST(s->chosen, "N", FE_CONST_INT, 3);
  fe_config_set_free(s);
  s = configs_of("config c { N = 3 \nfn main(", NULL);
  CHECK(s == NULL && strstr(last_errors, "t.tg:2:1: error: "));
  const char *broken = "config c { N = }";
  s = fe_configs("t.tg", broken, strlen(broken), NULL, NULL);
  CHECK(s == NULL);
}

static void test_entry(void) {
  const char *src = "fn a(x: f32[2]) { return x + 1 }\nfn b(x: f32[3]) { return x - 1 }\n";
  ir_graph *g = compile(src);
  CHECK(g && strcmp(g->name, "b") == 0 && g->outputs[0].name && strcmp(g->outputs[0].name, "out0") == 0);
  ir_graph_free(g);
  fe_options o = {.entry = "a"};
  g = compile_opt(src, &o);
  CHECK(g && strcmp(g->name, "a") == 0 && g->nodes[1]->op == IR_OP_ADD);
  ir_graph_free(g);
  o.entry = "zz";
  g = compile_opt(src, &o);
  CHECK(g == NULL && strstr(last_errors, "--entry zz"));
  ir_graph_free(g);
}

static void test_einsum_and_layout(void) {
  ir_graph *g = compile("fn main(a: f32[2, 3], b: f32[3, 4], m: f32[5, 5], v: f32[3]) {\n"
                        "  p = einsum(\"ij,jk\", a, b)\n"
                        "  t = einsum(\"ii\", m)\n"
                        "  s = einsum(\"ba\", a)\n"
                        "  e = einsum(\"ij,jk->ki\", a, b)\n"
                        "  w = v @ b\n"
                        "  u = a @ v\n"
                        "  r = reshape(a, [-1, 2])\n"
                        "  sm = softmax(a)\n"
                        "  ls = log_softmax(a, axis=0)\n"
                        "  su = sum(a, axis=-1, keepdims=true)\n"
                        "  mx = max(a)\n"
                        "  tr = transpose(a)\n"
                        "  pm = permute(a, [-1, 0])\n"
                        "  x1, x2 = split(b, [1, 3], axis=-1)\n"
                        "  sl = slice(a, axis=-1, start=-2)\n"
                        "  cc = concat([a, a], axis=-2)\n"
                        "  return p, t, s, e, w, u, r, sm, ls, su, mx, tr, pm, x1, x2, sl, cc\n"
                        "}\n");
  CHECK(g != NULL);
  if (!g) return;
  const char *eqs[4] = {"ij,jk->ik", "ii->", "ba->ab", "ij,jk->ki"};
  for (int i = 0; i < 4; i++) {
    const ir_node *n = find_op(g, IR_OP_EINSUM, i);
    const ir_attr *a = n ? ir_node_attr(n, "eq") : NULL;
    CHECK(a && strcmp(a->s, eqs[i]) == 0);
  }
  const char *want[17] = {"f32[2, 4]", "f32[]", "f32[3, 2]", "f32[4, 2]", "f32[4]", "f32[2]",
                          "f32[3, 2]", "f32[2, 3]", "f32[2, 3]", "f32[2, 1]", "f32[]", "f32[3, 2]",
                          "f32[3, 2]", "f32[3, 1]", "f32[3, 3]", "f32[2, 2]", "f32[4, 3]"};
  CHECK_EQ_INT(g->n_outputs, 17);
  for (int i = 0; i < 17 && i < g->n_outputs; i++) {
    if (strcmp(type_s(&g->outputs[i].value->type), want[i]) != 0)
      fprintf(stderr, "output %s: %s, want %s\n", g->outputs[i].name, type_s(&g->outputs[i].value->type), want[i]);
    CHECK_STR(type_s(&g->outputs[i].value->type), want[i]);
  }
  /* w = v @ b: reshape [1, 3], matmul, reshape to [4]; the last carries the name */
  CHECK(strcmp(g->outputs[4].value->name, "w") == 0 && g->outputs[4].value->def->op == IR_OP_RESHAPE);
  CHECK_EQ_INT(ir_node_attr_int(find_op(g, IR_OP_SOFTMAX, 0), "axis", -9), 1);
  CHECK_EQ_INT(ir_node_attr_int(find_op(g, IR_OP_LOG_SOFTMAX, 0), "axis", -9), 0);
  CHECK_EQ_INT(ir_node_attr_int(find_op(g, IR_OP_REDUCE_SUM, 0), "keepdims", -9), 1);
  const ir_attr *perm = ir_node_attr(find_op(g, IR_OP_TRANSPOSE, 1), "perm");
  CHECK(perm && perm->n == 2 && perm->ints[0] == 1 && perm->ints[1] == 0);
  const ir_node *sl = find_op(g, IR_OP_SLICE, 0);
  CHECK(sl && ir_node_attr_int(sl, "axis", -1) == 1 && ir_node_attr_int(sl, "start", -1) == 1 &&
        ir_node_attr_int(sl, "end", -1) == 3);
  CHECK_STR(g->outputs[13].value->name, "x1");
  CHECK_STR(g->outputs[14].value->name, "x2");
  ir_graph_free(g);
}

static void test_scalars_and_dtypes(void) {
  ir_graph *g = compile("fn main(x: f16[3], i: i32[3], c: bool[3]) {\n"
                        "  a = x * 2\n  b = x ** 3\n  d = 1 - x\n  k = i + 1\n"
                        "  w = where(c, x, 0)\n  m = cast(i, f32)\n  z = zeros([2, 3], i64)\n"
                        "  r = arange(4)\n  n = !c && c\n  o = x > 0.5\n"
                        "  return a, b, d, k, w, m, z, r, n, o\n}\n");
  CHECK(g != NULL);
  if (!g) return;
  const ir_node *c0 = find_op(g, IR_OP_CONST, 0);
  CHECK(c0 && c0->out[0]->type.dtype == IR_DT_F16 && c0->out[0]->type.rank == 0);
  const ir_node *pw = find_op(g, IR_OP_POW, 0);
  CHECK(pw && pw->in[1]->def && pw->in[1]->def->op == IR_OP_CONST);
  CHECK(pw && ir_node_attr_float(pw->in[1]->def, "value", 0) == 3.0);
  CHECK(find_op(g, IR_OP_SQUARE, 0) == NULL);
  const ir_node *sub = find_op(g, IR_OP_SUB, 0);
  CHECK(sub && sub->in[0]->def && sub->in[0]->def->op == IR_OP_CONST); /* 1 - x keeps the order */
  CHECK_STR(type_s(&g->outputs[3].value->type), "i32[3]");
  CHECK_STR(type_s(&g->outputs[4].value->type), "f16[3]");
  CHECK_STR(type_s(&g->outputs[5].value->type), "f32[3]");
  CHECK_STR(type_s(&g->outputs[6].value->type), "i64[2, 3]");
  CHECK_STR(type_s(&g->outputs[7].value->type), "i32[4]");
  CHECK_STR(type_s(&g->outputs[8].value->type), "bool[3]");
  CHECK_STR(type_s(&g->outputs[9].value->type), "bool[3]");
  CHECK(find_op(g, IR_OP_IOTA, 0) != NULL);
  ir_graph_free(g);

  /* broadcasting */
  g = compile("fn main(a: f32[2, 1, 3], b: f32[4, 1]) { return a + b }\n");
  CHECK(g && strcmp(type_s(&g->outputs[0].value->type), "f32[2, 4, 3]") == 0);
  ir_graph_free(g);
  check_error("fn main(a: f32[2, 3], b: f32[2]) { return a + b }\n",
              "t.tg:1:43: error: shape mismatch in '+': f32[2, 3] and f32[2] do not broadcast");
  check_error("fn main(a: f32[2], b: f64[2]) {\n  y = a * b\n  return y\n}\n",
              "t.tg:2:7: error: dtype mismatch: f32 and f64 in '*'; use cast(a, f64)");
  check_error("fn main(i: i32[2]) { return i * 0.5 }\n", "cannot use the number 0.5 with an i32 tensor");
}

static void test_errors(void) {
  /* several unknown names: each reported once, at its first use */
  ir_graph *g = compile("fn main(x: f32[2]) {\n  a = foo + x\n  b = bar + foo\n  c = bar * 2\n  return a\n}\n");
  CHECK(g == NULL);
  CHECK_EQ_INT(count_substr(last_errors, "error:"), 2);
  CHECK(strstr(last_errors, "t.tg:2:7: error: unknown name 'foo'"));
  CHECK(strstr(last_errors, "t.tg:3:7: error: unknown name 'bar'"));
  check_error("fn main(x: f32[2]) {\n  y = sofmax(x)\n  return y\n}\n",
              "t.tg:2:7: error: unknown function 'sofmax' (did you mean 'softmax'?)");
  check_error("fn main(x: f32[2]) { return softmax(x, x, x) }\n",
              "error: wrong number of arguments to 'softmax': expected 1 or 2 (then: axis), got 3");
  check_error("fn main(x: f32[2]) { return softmax(x, axes=0) }\n",
              "error: unknown attribute 'axes' for 'softmax' (did you mean 'axis'?)");
  check_error("fn main(x: f32[2]) { return x + ) }\n", "t.tg:1:33: error: syntax error: unexpected ')'");
  check_error("fn f(x: f32[2]) -> f32[2] { return f(x) }\nfn main(x: f32[2]) { return f(x) }\n",
              "error: recursive call of 'f'");
  check_error("param w: f32[2]\nparam w: f32[3]\nfn main(x: f32[2]) { return x }\n",
              "t.tg:2:7: error: redefinition of param 'w'\n");
  CHECK(strstr(last_errors, "t.tg:1:7: note: previous definition of 'w' is here"));
  check_error("fn main(x: f32[2]) {\n  y = x /* not closed\n}\n", "t.tg:2:9: error: unterminated comment");
  check_error("fn main(x: f32[-1]) { return x }\n", "dimension '-1' is negative: -1");
  check_error("fn main(x: f32[100000000, 100000000]) { return x }\n",
              "'f32[100000000, 100000000]' has too many elements");
  check_error("fn main(x: f32[2, 3], w: f32[4, 5]) { return x @ w }\n",
              "shape mismatch in '@': f32[2, 3] and f32[4, 5] (inner dimensions 3 and 4 differ)");
  /* one error inside a repeated block is reported once */
  g = compile("fn main(x: f32[2]) {\n  repeat 50 { x = x + nope }\n  return x\n}\n");
  CHECK(g == NULL && count_substr(last_errors, "error:") == 1);
  /* deep nesting is an error, not a crash */
  char *deep = malloc(200000);
  strcpy(deep, "fn main(x: f32[2]) { return ");
  size_t k = strlen(deep);
  memset(deep + k, '-', 50000);
  strcpy(deep + k + 50000, "x }\n");
  check_error(deep, "nested too deeply");
  strcpy(deep, "fn main(x: f32[2]) { return ");
  k = strlen(deep);
  for (int i = 0; i < 300; i++) k += (size_t)sprintf(deep + k, "relu(");
  k += (size_t)sprintf(deep + k, "x");
  for (int i = 0; i < 300; i++) deep[k++] = ')';
  strcpy(deep + k, " }\n");
  check_error(deep, "nested too deeply");
  free(deep);
  /* NUL bytes */
  const char nul[] = "fn main(x: f32[2]) { return x \0 }\n";
  free(last_errors);
  size_t n = 0;
  FILE *f = open_memstream(&last_errors, &n);
  ir_diag *d = ir_diag_new(f);
  g = fe_compile("t.tg", nul, sizeof nul - 1, NULL, d);
  ir_diag_free(d);
  fclose(f);
  CHECK(g == NULL && strstr(last_errors, "t.tg:1:31: error: NUL byte in source"));
}

/* 100 transformer-like layers: must elaborate in well under a second. */
static void test_speed(void) {
  const char *src =
      "config c { B = 2, L = 8, D = 32, nH = 4, nL = 100 }\n"
      "let H = D / nH\n"
      "fn attn(x: f32[B, L, D]) -> f32[B, L, D] {\n"
      "  param wq: f32[D, D] = normal(0.02)\n  param wk: f32[D, D] = normal(0.02)\n"
      "  param wv: f32[D, D] = normal(0.02)\n  param wo: f32[D, D] = normal(0.02)\n"
      "  q = permute(reshape(x @ wq, [B, L, nH, H]), [0, 2, 1, 3])\n"
      "  k = permute(reshape(x @ wk, [B, L, nH, H]), [0, 2, 1, 3])\n"
      "  v = permute(reshape(x @ wv, [B, L, nH, H]), [0, 2, 1, 3])\n"
      "  s = causal_mask(q @ transpose(k) / sqrt(H))\n"
      "  o = permute(softmax(s) @ v, [0, 2, 1, 3])\n"
      "  return reshape(o, [B, L, D]) @ wo\n"
      "}\n"
      "fn mlp(x: f32[B, L, D]) -> f32[B, L, D] {\n"
      "  param w1: f32[D, 4 * D] = normal(0.02)\n  param w2: f32[4 * D, D] = normal(0.02)\n"
      "  return gelu(x @ w1) @ w2\n"
      "}\n"
      "fn main(x: f32[B, L, D]) -> (y: f32[B, L, D]) {\n"
      "  repeat l in 0..nL {\n"
      "    param g1: f32[D] = ones\n    param b1: f32[D]\n    param g2: f32[D] = ones\n"
      "    x = x + attn(layernorm(x, g1, b1))\n"
      "    x = x + mlp(rmsnorm(x, g2))\n"
      "  }\n"
      "  return x\n"
      "}\n";
  clock_t t0 = clock();
  ir_graph *g = compile(src);
  double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  CHECK(g != NULL);
  if (!g) return;
  CHECK_EQ_INT(g->n_params, 900);
  CHECK_STR(g->params[899]->name, "l.99.mlp.w2");
  CHECK(g->n_nodes > 2000);
  CHECK_EQ_INT(g->nodes[g->n_nodes - 1]->layer, 99);
  printf("100-layer model: %d nodes in %.3f s (compile + verify)\n", g->n_nodes, secs);
  CHECK(secs < 2.0);
  ir_graph_free(g);
}

/* The statement limit (FE_MAX_STMTS, 5,000,000): counted while unrolling
 * (empty repeat bodies count, or a loop could spin forever), and while
 * parsing, so a file that can never compile stops before its syntax tree
 * grows (6 million statements held 2.7 GB). The parse check makes a 20 MB
 * text and ~1.5 GB of tree: skipped in sanitizer builds. */
static void test_statement_limit(void) {
  check_error("fn main(x: f32[2]) -> f32[2] {\n  repeat i in 0..1000000 { repeat j in 0..5 { } }\n  return x\n}\n",
              "t.tg:2:28: error: program too large: more than 5000000 statements after unrolling and inlining");
#if defined(__SANITIZE_ADDRESS__)
  fprintf(stderr, "test_statement_limit: the parse-time limit is not checked in the sanitizer build\n");
#else
  const char *head = "fn main(x: f32[2]) -> f32[2] {\n", *tail = "return x\n}\n";
  long n = FE_MAX_STMTS + 1;
  size_t len = strlen(head) + (size_t)n * 4 + strlen(tail);
  char *src = malloc(len + 1), *p = src;
  p += sprintf(p, "%s", head);
  for (long i = 0; i < n; i++, p += 4) memcpy(p, "y=x\n", 4);
  strcpy(p, tail);
  /* the last statement (line n + 1), the return, is the one past the limit */
  check_error(src, "t.tg:5000002:1: error: program too large: more than 5000000 statements after unrolling and inlining");
  CHECK_EQ_INT(count_substr(last_errors, "error:"), 1);
  free(src);
#endif
}

int main(void) {
  test_statement_limit();
  test_straight_line();
  test_hw1_q4();
  test_repeat_params_layers();
  test_configs();
  test_config_data();
  test_entry();
  test_einsum_and_layout();
  test_scalars_and_dtypes();
  test_errors();
  test_speed();
  free(last_errors);
  return check_done();
}
