/* tests/unit/test_ir_roundtrip.c — the textual IR round trip and the
 * DOT / JSON exports.
 *
 * Graphs are built by hand with explicit types (no shape inference), so
 * every printable feature appears: every attribute kind, empty int lists,
 * strings with quotes / backslashes / newlines, special floats (inf, -inf,
 * nan, -0.0, 1e-300, subnormals), multi-result nodes, non-default roles,
 * shard specs with partial sums, layers, every param init, names with dots
 * and digits, unknown locations. Each graph is printed, parsed back and
 * printed again; the two texts must be byte-identical. The exact printed
 * form of a small graph is also pinned against docs/ir.md's rules, and the
 * JSON is parsed back with jansson, the DOT checked for labels and (when
 * Graphviz is installed) rendered with `dot -Tpng`.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ir.h"

static ir_type ty(ir_dtype dt, int rank, const int64_t *dims) {
  ir_type t = {dt, rank, {0}};
  for (int d = 0; d < rank; d++) t.dims[d] = dims[d];
  return t;
}
static ir_loc at(int line, int col) { return (ir_loc){NULL, line, col}; }

static ir_attr attr_f(const char *key, double f) {
  ir_attr a = ir_attr_float(key, f);
  return a;
}

/* One node with one result of type t. */
static ir_value *node1(ir_graph *g, ir_op op, ir_value **in, int n_in, ir_type t, const ir_attr *attrs,
                       int n_attrs, const char *name, ir_loc loc) {
  const char *names[1] = {name};
  ir_node *n = ir_graph_add_node(g, op, in, n_in, &t, 1, attrs, n_attrs, names, loc);
  return n->out[0];
}

/* Builds a graph that uses every feature of the text format. */
static ir_graph *build_everything(void) {
  ir_graph *g = ir_graph_new("rt.graph_1", "models/a \"quoted\" \\dir\\x.tg");
  g->mesh.size[IR_AXIS_PP] = 2;
  g->mesh.size[IR_AXIS_DP] = 2;
  g->mesh.size[IR_AXIS_TP] = 4;
  g->mesh.sp = true;
  g->mesh.stage = 1;
  int64_t d23[] = {2, 3}, d32[] = {3, 2}, d2[] = {2}, d04[] = {0, 4}, d6[] = {6}, d234[] = {2, 3, 4};
  ir_value *x = ir_graph_add_input(g, "x", ty(IR_DT_F32, 2, d23), at(1, 2));
  ir_value *ids = ir_graph_add_input(g, "tok.ids.0", ty(IR_DT_I32, 1, d2), at(1, 20));
  ir_value *s = ir_graph_add_input(g, "s", ty(IR_DT_F64, 0, NULL), at(0, 0));
  ir_value *z = ir_graph_add_input(g, "zero_dim", ty(IR_DT_BF16, 2, d04), at(2, 1));
  z->role = IR_ROLE_CONST;
  ir_value *big = ir_graph_add_input(g, "big", ty(IR_DT_F16, 3, d234), at(3, 1));
  big->shard.split[0] = 1 << IR_AXIS_TP;                      /* split over tp */
  big->shard.split[2] = 1 << IR_AXIS_PP | 1 << IR_AXIS_DP;   /* over (pp, dp) */
  ir_value *pa = ir_graph_add_input(g, "p", ty(IR_DT_BOOL, 1, d2), at(3, 9));
  pa->shard.partial = 1 << IR_AXIS_DP | 1 << IR_AXIS_TP; /* partial without any split */
  ir_value *w = ir_graph_add_param(g, "l.0.W", ty(IR_DT_F32, 2, d32),
                                   (ir_init){IR_INIT_NORMAL, 0.02, 0}, at(7, 5));
  ir_graph_add_param(g, "blk.12.b", ty(IR_DT_F32, 1, d2), (ir_init){IR_INIT_ZEROS, 0, 0}, at(8, 5));
  ir_graph_add_param(g, "7", ty(IR_DT_F32, 1, d2), (ir_init){IR_INIT_ONES, 0, 0}, at(9, 5));
  ir_graph_add_param(g, "u", ty(IR_DT_F64, 0, NULL), (ir_init){IR_INIT_UNIFORM, -0.1, 1e-300}, at(10, 5));
  ir_value *st = ir_graph_add_param(g, "state", ty(IR_DT_F32, 1, d2), (ir_init){IR_INIT_NONE, 0, 0}, at(11, 5));
  st->role = IR_ROLE_OPT_STATE;

  double specials[] = {INFINITY, -INFINITY, NAN, -NAN, 1e-300, -0.0, 0.0, 2.0, 0.1, 1e300, 5e-324, -3.5e-7, 123456789.0, 1e22};
  for (size_t k = 0; k < sizeof specials / sizeof *specials; k++) {
    ir_attr a = attr_f("value", specials[k]);
    char name[16];
    snprintf(name, sizeof name, "c%zu", k);
    node1(g, IR_OP_CONST, NULL, 0, ty(IR_DT_F64, 0, NULL), &a, 1, name, at(20 + (int)k, 3));
  }
  int64_t perm[] = {1, 0};
  ir_attr tp = ir_attr_ints("perm", perm, 2);
  ir_value *xt = node1(g, IR_OP_TRANSPOSE, &x, 1, ty(IR_DT_F32, 2, d32), &tp, 1, "x.T", at(30, 1));
  ir_value *mm_in[] = {x, w};
  int64_t d22[] = {2, 2};
  ir_value *mm = node1(g, IR_OP_MATMUL, mm_in, 2, ty(IR_DT_F32, 2, d22), NULL, 0, "mm", at(31, 7));
  mm->role = IR_ROLE_GRAD;
  mm->shard.split[1] = 1 << IR_AXIS_DP;
  ir_attr to = ir_attr_dtype("to", IR_DT_BF16);
  node1(g, IR_OP_CAST, &xt, 1, ty(IR_DT_BF16, 2, d32), &to, 1, "x.T.bf", at(32, 1));
  ir_attr rs[] = {ir_attr_ints("axes", NULL, 0), ir_attr_int("keepdims", 0)};
  node1(g, IR_OP_REDUCE_SUM, &s, 1, ty(IR_DT_F64, 0, NULL), rs, 2, "sum.0", at(0, 0));
  ir_attr eq = ir_attr_str("eq", "a\"b\\c\nd \t{x, y}");
  ir_value *ein_in[] = {x, x};
  node1(g, IR_OP_EINSUM, ein_in, 2, ty(IR_DT_F32, 0, NULL), &eq, 1, "e", at(33, 2));
  int64_t ints[] = {INT64_MIN, -1, 0, INT64_MAX};
  ir_attr every[] = {ir_attr_int("i", INT64_MIN), attr_f("f", 1.5), ir_attr_ints("ints", ints, 4),
                     ir_attr_str("s", ""), ir_attr_dtype("d", IR_DT_BOOL), ir_attr_ints("none", NULL, 0),
                     ir_attr_int("big", INT64_MAX), attr_f("neg", -2.0)};
  node1(g, IR_OP_IOTA, NULL, 0, ty(IR_DT_I64, 1, d6), every, 8, "iota", at(34, 1));
  /* three results with roles, shard, partial and a layer */
  int64_t sizes[] = {1, 1, 1}, d21[] = {2, 1};
  ir_attr sp[] = {ir_attr_int("axis", 1), ir_attr_ints("sizes", sizes, 3)};
  ir_type st3[] = {ty(IR_DT_F32, 2, d21), ty(IR_DT_F32, 2, d21), ty(IR_DT_F32, 2, d21)};
  const char *names[] = {"a", "b.1", "9"};
  ir_node *split = ir_graph_add_node(g, IR_OP_SPLIT, &x, 1, st3, 3, sp, 2, names, at(35, 4));
  split->layer = 3;
  split->out[0]->role = IR_ROLE_GRAD;
  split->out[1]->shard.split[0] = 1 << IR_AXIS_PP;
  split->out[1]->shard.partial = 1 << IR_AXIS_TP;
  split->out[2]->role = IR_ROLE_INPUT;
  ir_value *cat_in[] = {split->out[0], split->out[1], split->out[2]};
  ir_attr ax = ir_attr_int("axis", 1);
  ir_value *cat = node1(g, IR_OP_CONCAT, cat_in, 3, ty(IR_DT_F32, 2, d23), &ax, 1, "cat", at(36, 1));
  cat->def->layer = 0;
  ir_value *emb_in[] = {w, ids};
  node1(g, IR_OP_EMBEDDING, emb_in, 2, ty(IR_DT_F32, 2, d22), NULL, 0, "emb", at(37, 1));
  ir_graph_add_output(g, "loss", cat);
  ir_graph_add_output(g, "out \"1\" \\ x", mm);
  ir_graph_add_output(g, "again", cat);
  return g;
}

static ir_graph *parse_text(const char *text) {
  char *buf = NULL;
  size_t len = 0;
  FILE *err = open_memstream(&buf, &len);
  ir_diag *d = ir_diag_new(err);
  ir_graph *g = ir_parse("rt.ir", text, strlen(text), d);
  ir_diag_free(d);
  fclose(err);
  if (!g) fprintf(stderr, "unexpected parse errors:\n%s", buf);
  free(buf);
  return g;
}

static void test_round_trip(void) {
  ir_graph *g = build_everything();
  char *t1 = ir_print_to_string(g);
  ir_graph *g2 = parse_text(t1);
  CHECK(g2 != NULL);
  if (!g2) {
    fputs(t1, stderr);
    free(t1);
    ir_graph_free(g);
    return;
  }
  char *t2 = ir_print_to_string(g2);
  CHECK_STR(t2, t1);
  /* a third generation changes nothing either */
  ir_graph *g3 = parse_text(t2);
  char *t3 = g3 ? ir_print_to_string(g3) : NULL;
  CHECK_STR(t3, t1);

  /* the parsed graph is the built one, names verbatim */
  CHECK_EQ_INT(g2->n_values, g->n_values);
  CHECK_EQ_INT(g2->n_nodes, g->n_nodes);
  CHECK_EQ_INT(g2->n_inputs, g->n_inputs);
  CHECK_EQ_INT(g2->n_params, g->n_params);
  CHECK_EQ_INT(g2->n_outputs, g->n_outputs);
  for (int k = 0; k < g->n_values && k < g2->n_values; k++) CHECK_STR(g2->values[k]->name, g->values[k]->name);
  CHECK_STR(g2->name, "rt.graph_1");
  CHECK_STR(g2->source_file, "models/a \"quoted\" \\dir\\x.tg");
  CHECK_STR(g2->outputs[1].name, "out \"1\" \\ x");
  CHECK(g2->outputs[2].value == g2->outputs[0].value);

  /* special floats keep their value and sign */
  ir_value *c2 = ir_graph_find_value(g2, "c2"), *c3 = ir_graph_find_value(g2, "c3");
  ir_value *c5 = ir_graph_find_value(g2, "c5"), *c10 = ir_graph_find_value(g2, "c10");
  ir_value *c1 = ir_graph_find_value(g2, "c1"), *c8 = ir_graph_find_value(g2, "c8");
  CHECK(c1 && c2 && c3 && c5 && c10 && c8);
  if (c1 && c2 && c3 && c5 && c10 && c8) {
    CHECK(isinf(ir_node_attr_float(c1->def, "value", 0)) && ir_node_attr_float(c1->def, "value", 0) < 0);
    CHECK(isnan(ir_node_attr_float(c2->def, "value", 0)) && !signbit(ir_node_attr_float(c2->def, "value", 0)));
    CHECK(isnan(ir_node_attr_float(c3->def, "value", 0)) && signbit(ir_node_attr_float(c3->def, "value", 0)));
    CHECK(ir_node_attr_float(c5->def, "value", 1) == 0.0 && signbit(ir_node_attr_float(c5->def, "value", 1)));
    CHECK(ir_node_attr_float(c10->def, "value", 0) == 5e-324); /* exact: tolerance 0 */
    CHECK(ir_node_attr_float(c8->def, "value", 0) == 0.1);
  }
  /* attribute kinds survive */
  ir_value *io = ir_graph_find_value(g2, "iota");
  if (io) {
    const ir_attr *a = ir_node_attr(io->def, "ints");
    CHECK(a && a->kind == IR_ATTR_INTS && a->n == 4 && a->ints[0] == INT64_MIN && a->ints[3] == INT64_MAX);
    a = ir_node_attr(io->def, "none");
    CHECK(a && a->kind == IR_ATTR_INTS && a->n == 0);
    a = ir_node_attr(io->def, "d");
    CHECK(a && a->kind == IR_ATTR_DTYPE && a->i == IR_DT_BOOL);
    a = ir_node_attr(io->def, "s");
    CHECK(a && a->kind == IR_ATTR_STR && a->s && a->s[0] == '\0');
    a = ir_node_attr(io->def, "neg");
    CHECK(a && a->kind == IR_ATTR_FLOAT && a->f == -2.0);
  }
  ir_value *e = ir_graph_find_value(g2, "e");
  if (e) CHECK_STR(ir_node_attr(e->def, "eq")->s, "a\"b\\c\nd \t{x, y}");
  /* roles, shard, partial, layer */
  ir_value *a = ir_graph_find_value(g2, "a"), *b1 = ir_graph_find_value(g2, "b.1"),
           *nine = ir_graph_find_value(g2, "9"), *big = ir_graph_find_value(g2, "big");
  CHECK(a && b1 && nine && big);
  if (a && b1 && nine && big) {
    CHECK(a->def == b1->def && b1->def == nine->def && nine->def_result == 2);
    CHECK_EQ_INT(a->role, IR_ROLE_GRAD);
    CHECK_EQ_INT(nine->role, IR_ROLE_INPUT);
    CHECK_EQ_INT(b1->shard.split[0], 1 << IR_AXIS_PP);
    CHECK_EQ_INT(b1->shard.partial, 1 << IR_AXIS_TP);
    CHECK_EQ_INT(a->def->layer, 3);
    CHECK_EQ_INT(big->shard.split[0], 1 << IR_AXIS_TP);
    CHECK_EQ_INT(big->shard.split[1], 0);
    CHECK_EQ_INT(big->shard.split[2], 1 << IR_AXIS_PP | 1 << IR_AXIS_DP);
    CHECK_EQ_INT(big->shard.partial, 0);
    CHECK_EQ_INT(g2->mesh.size[IR_AXIS_PP], 2);
    CHECK_EQ_INT(g2->mesh.size[IR_AXIS_DP], 2);
    CHECK_EQ_INT(g2->mesh.size[IR_AXIS_TP], 4);
    CHECK(g2->mesh.sp);
    CHECK_EQ_INT(g2->mesh.stage, 1);
    /* node locations refer to the graph's file; loc 0:0 means unknown */
    CHECK(a->def->loc.file == g2->source_file);
    CHECK_EQ_INT(a->def->loc.line, 35);
    CHECK_EQ_INT(a->def->loc.col, 4);
    CHECK(big->loc.file == g2->source_file);
  }
  ir_value *sum = ir_graph_find_value(g2, "sum.0"), *s = ir_graph_find_value(g2, "s");
  CHECK(sum && sum->def->loc.file == NULL && sum->def->loc.line == 0);
  CHECK(s && s->loc.file == NULL);
  ir_value *u = ir_graph_find_value(g2, "u");
  CHECK(u && u->init.kind == IR_INIT_UNIFORM && u->init.a == -0.1 && u->init.b == 1e-300);

  free(t1);
  free(t2);
  free(t3);
  ir_graph_free(g);
  ir_graph_free(g2);
  ir_graph_free(g3);
}

/* The exact text for a small graph, character by character per docs/ir.md. */
static void test_exact_text(void) {
  ir_graph *g = ir_graph_new("f", "examples/straight_line.tg");
  g->mesh.size[IR_AXIS_DP] = 2;
  g->mesh.size[IR_AXIS_TP] = 2;
  int64_t d2[] = {2}, d22[] = {2, 2}, d44[] = {4, 4}, d4[] = {4};
  ir_value *w1 = ir_graph_add_input(g, "w1", ty(IR_DT_F64, 0, NULL), at(1, 6));
  ir_value *w2 = ir_graph_add_input(g, "w2", ty(IR_DT_F64, 0, NULL), at(1, 15));
  ir_value *x = ir_graph_add_input(g, "x", ty(IR_DT_F32, 2, (int64_t[]){2, 4}), at(1, 24));
  ir_value *y = ir_graph_add_input(g, "y", ty(IR_DT_F32, 1, d2), at(1, 33));
  ir_graph_add_param(g, "l.0.W", ty(IR_DT_F32, 2, d44), (ir_init){IR_INIT_NORMAL, 0.02, 0}, at(7, 5));
  ir_graph_add_param(g, "b", ty(IR_DT_F32, 1, d4), (ir_init){IR_INIT_ZEROS, 0, 0}, at(8, 5));
  ir_value *div_in[] = {w1, w2};
  node1(g, IR_OP_DIV, div_in, 2, ty(IR_DT_F64, 0, NULL), NULL, 0, "z1", at(2, 8));
  ir_attr v2 = attr_f("value", 2);
  node1(g, IR_OP_CONST, NULL, 0, ty(IR_DT_F64, 0, NULL), &v2, 1, NULL, at(3, 13));
  ir_attr ve = attr_f("value", 1e-5);
  node1(g, IR_OP_CONST, NULL, 0, ty(IR_DT_F32, 0, NULL), &ve, 1, "eps", at(3, 20));
  int64_t sizes[] = {2, 2};
  ir_attr sp[] = {ir_attr_int("axis", 1), ir_attr_ints("sizes", sizes, 2)};
  ir_type split_types[] = {ty(IR_DT_F32, 2, d22), ty(IR_DT_F32, 2, d22)};
  const char *names[] = {"a", "b"}; /* "b" is taken by the param: becomes b.1 */
  ir_node *sn = ir_graph_add_node(g, IR_OP_SPLIT, &x, 1, split_types, 2, sp, 2, names, at(5, 3));
  sn->layer = 0;
  ir_value *add_in[] = {y, y};
  ir_value *gr = node1(g, IR_OP_ADD, add_in, 2, ty(IR_DT_F32, 1, d2), NULL, 0, "g", at(9, 1));
  gr->role = IR_ROLE_GRAD;
  gr->shard.split[0] = 1 << IR_AXIS_DP;
  gr->shard.partial = 1 << IR_AXIS_TP;
  ir_graph_add_output(g, "z6", gr);
  const char *want =
      "tgc.ir 1\n"
      "graph @f file \"examples/straight_line.tg\"\n"
      "  mesh dp = 2, tp = 2\n"
      "  input %w1 : f64[] loc 1:6\n"
      "  input %w2 : f64[] loc 1:15\n"
      "  input %x : f32[2, 4] loc 1:24\n"
      "  input %y : f32[2] loc 1:33\n"
      "  param %l.0.W : f32[4, 4] init normal(0.02) loc 7:5\n"
      "  param %b : f32[4] init zeros loc 8:5\n"
      "  %z1 = div %w1, %w2 : f64[] loc 2:8\n"
      "  %0 = const {value = 2.0} : f64[] loc 3:13\n"
      "  %eps = const {value = 1.0000000000000001e-05} : f32[] loc 3:20\n"
      "  %a, %b.1 = split %x {axis = 1, sizes = [2, 2]} : f32[2, 2], f32[2, 2] loc 5:3 layer 0\n"
      "  %g = add %y, %y : f32[2] role grad shard [dp] partial(tp) loc 9:1\n"
      "  output \"z6\" = %g\n"
      "end\n";
  char *t = ir_print_to_string(g);
  CHECK_STR(t, want);
  ir_graph *g2 = parse_text(want);
  char *t2 = g2 ? ir_print_to_string(g2) : NULL;
  CHECK_STR(t2, want);
  free(t);
  free(t2);
  ir_graph_free(g);
  ir_graph_free(g2);

  /* no file: no `file`, and comments / blank lines / CRLF are accepted */
  const char *loose = "# a comment\n\ntgc.ir 1   # version\r\ngraph @main\n\n  input %x : f32[] loc 0:0\n"
                      "  %y = neg %x : f32[] loc 2:2 # trailing\n  output \"y\" = %y\nend";
  ir_graph *g3 = parse_text(loose);
  char *t3 = g3 ? ir_print_to_string(g3) : NULL;
  CHECK_STR(t3, "tgc.ir 1\ngraph @main\n  input %x : f32[] loc 0:0\n  %y = neg %x : f32[] loc 2:2\n"
                "  output \"y\" = %y\nend\n");
  if (g3) CHECK(g3->source_file == NULL && g3->nodes[0]->loc.file == NULL);
  free(t3);
  ir_graph_free(g3);
}

static char *capture(void (*fn)(FILE *, const ir_graph *), const ir_graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fn(f, g);
  fclose(f);
  return buf;
}

static void test_json(void) {
  ir_graph *g = build_everything();
  char *text = capture(ir_print_json, g);
  json_error_t jerr;
  json_t *root = json_loads(text, 0, &jerr);
  CHECK(root != NULL);
  if (!root) {
    fprintf(stderr, "json error %s at line %d\n", jerr.text, jerr.line);
    free(text);
    ir_graph_free(g);
    return;
  }
  CHECK_STR(json_string_value(json_object_get(root, "format")), "tgc.ir.json");
  CHECK_EQ_INT(json_integer_value(json_object_get(root, "version")), 1);
  CHECK_STR(json_string_value(json_object_get(root, "graph")), "rt.graph_1");
  CHECK_STR(json_string_value(json_object_get(root, "file")), "models/a \"quoted\" \\dir\\x.tg");
  json_t *nodes = json_object_get(root, "nodes");
  CHECK_EQ_INT(json_array_size(nodes), g->n_nodes);
  CHECK_EQ_INT(json_array_size(json_object_get(root, "inputs")), g->n_inputs);
  CHECK_EQ_INT(json_array_size(json_object_get(root, "outputs")), g->n_outputs);
  /* node 0..: the constants; reals read back exactly, non-finite as objects */
  json_t *c8 = json_object_get(json_object_get(json_array_get(nodes, 8), "attrs"), "value");
  CHECK(json_is_real(c8) && json_real_value(c8) == 0.1);
  json_t *c10 = json_object_get(json_object_get(json_array_get(nodes, 10), "attrs"), "value");
  CHECK(json_is_real(c10) && json_real_value(c10) == 5e-324);
  json_t *c2 = json_object_get(json_object_get(json_array_get(nodes, 2), "attrs"), "value");
  CHECK_STR(json_string_value(json_object_get(c2, "float")), "nan");
  json_t *c0 = json_object_get(json_object_get(json_array_get(nodes, 0), "attrs"), "value");
  CHECK_STR(json_string_value(json_object_get(c0, "float")), "inf");
  CHECK(strstr(text, "\"value\": 2.0") != NULL); /* reals stay reals */
  /* params: init objects */
  json_t *p0 = json_array_get(json_object_get(root, "params"), 0);
  CHECK_STR(json_string_value(json_object_get(p0, "name")), "l.0.W");
  CHECK_STR(json_string_value(json_object_get(json_object_get(p0, "init"), "kind")), "normal");
  CHECK(json_real_value(json_object_get(json_object_get(p0, "init"), "std")) == 0.02);
  json_t *p4 = json_array_get(json_object_get(root, "params"), 4);
  CHECK(json_object_get(p4, "init") == NULL);
  CHECK_STR(json_string_value(json_object_get(p4, "role")), "opt_state");
  /* split: three outputs, roles and shard */
  json_t *split = NULL;
  for (size_t k = 0; k < json_array_size(nodes); k++)
    if (strcmp(json_string_value(json_object_get(json_array_get(nodes, k), "op")), "split") == 0)
      split = json_array_get(nodes, k);
  CHECK(split != NULL);
  if (split) {
    json_t *outs = json_object_get(split, "outputs");
    CHECK_EQ_INT(json_array_size(outs), 3);
    CHECK_STR(json_string_value(json_object_get(json_array_get(outs, 0), "role")), "grad");
    json_t *sh = json_object_get(json_array_get(outs, 1), "shard");
    CHECK_STR(json_string_value(json_array_get(json_object_get(sh, "partial"), 0)), "tp");
    CHECK_STR(json_string_value(json_array_get(json_object_get(sh, "dims"), 0)), "pp");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(root, "mesh"), "tp")), 4);
    CHECK(json_is_null(json_array_get(json_object_get(sh, "dims"), 1)));
    CHECK(json_object_get(json_array_get(outs, 2), "shard") == NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(split, "layer")), 3);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(split, "loc"), "line")), 35);
    CHECK_STR(json_string_value(json_array_get(json_object_get(split, "inputs"), 0)), "x");
  }
  /* dtype attributes are objects; ints lists arrays */
  json_t *iota = json_array_get(nodes, (size_t)ir_graph_find_value(g, "iota")->def->id);
  json_t *attrs = json_object_get(iota, "attrs");
  CHECK_STR(json_string_value(json_object_get(json_object_get(attrs, "d"), "dtype")), "bool");
  CHECK_EQ_INT(json_array_size(json_object_get(attrs, "none")), 0);
  CHECK(json_integer_value(json_array_get(json_object_get(attrs, "ints"), 0)) == INT64_MIN);
  CHECK_STR(json_string_value(json_object_get(attrs, "s")), "");
  json_t *out1 = json_array_get(json_object_get(root, "outputs"), 1);
  CHECK_STR(json_string_value(json_object_get(out1, "name")), "out \"1\" \\ x");
  CHECK_STR(json_string_value(json_object_get(out1, "value")), "mm");
  json_decref(root);
  free(text);
  ir_graph_free(g);
}

static void test_dot(void) {
  ir_graph *g = build_everything();
  char *text = capture(ir_print_dot, g);
  CHECK(strncmp(text, "digraph \"rt.graph_1\" {\n", 23) == 0);
  CHECK(strstr(text, "rankdir=TB") != NULL);
  CHECK(strstr(text, "label=\"transpose\\nperm=[1, 0]\\nf32[3, 2]\"") != NULL);
  CHECK(strstr(text, "label=\"const 2.0\\nf64[]\"") != NULL);
  CHECK(strstr(text, "label=\"%l.0.W\\nf32[3, 2]\", shape=ellipse") != NULL);
  CHECK(strstr(text, "label=\"out \\\"1\\\" \\\\ x\", shape=doubleoctagon") != NULL);
  CHECK(strstr(text, "split (layer 3)") != NULL);
  CHECK(strstr(text, "[label=\"%x.T\"]") != NULL);        /* short names label edges */
  CHECK(strstr(text, "eq=\\\"a\\\"b\\\\c\\nd ?{x, y}\\\"") != NULL); /* escaped, tab -> '?' */
  CHECK(text[strlen(text) - 2] == '}');
  /* Graphviz accepts it (skipped when dot is not installed) */
  if (system("command -v dot >/dev/null 2>&1") == 0) {
    char path[] = "/tmp/tgc_dot_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
      FILE *f = fdopen(fd, "w");
      fputs(text, f);
      fclose(f);
      char cmd[128];
      snprintf(cmd, sizeof cmd, "dot -Tpng %s -o /dev/null", path);
      CHECK_EQ_INT(system(cmd), 0);
      unlink(path);
    }
  }
  free(text);
  ir_graph_free(g);
}

int main(void) {
  test_round_trip();
  test_exact_text();
  test_json();
  test_dot();
  return check_done();
}
