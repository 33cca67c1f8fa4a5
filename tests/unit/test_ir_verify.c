/* tests/unit/test_ir_verify.c — ir_verify on a small valid graph, then on
 * copies broken in one way each (types, order, ownership, names, roles,
 * inits, dead nodes, outputs, sharding, arity, def links, attributes): each
 * must be reported, with its message and the node's location. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir.h"

static ir_type T2(int64_t a, int64_t b) { return (ir_type){.dtype = IR_DT_F32, .rank = 2, .dims = {a, b}}; }
static ir_loc L(int line) { return (ir_loc){NULL, line, 1}; }

typedef struct {
  ir_graph *g;
  ir_value *x, *w, *y, *s, *p0, *p1;
  ir_node *mm, *sm, *sp;
} fixture;

/* x: f32[2,3] input, W: f32[3,2] param; y = x @ W; s = softmax(y, 1);
 * p0, p1 = split(s, 1, [1, 1]); outputs "y" = s, "p" = p0 */
static fixture make(void) {
  fixture f;
  f.g = ir_graph_new("main", "m.tg");
  f.x = ir_graph_add_input(f.g, "x", T2(2, 3), L(1));
  f.w = ir_graph_add_param(f.g, "W", T2(3, 2), (ir_init){IR_INIT_NORMAL, 0.02, 0}, L(2));
  ir_value *mm_in[2] = {f.x, f.w};
  f.y = ir_graph_build1(f.g, IR_OP_MATMUL, mm_in, 2, NULL, 0, "y", L(3));
  ir_attr ax = ir_attr_int("axis", 1);
  f.s = ir_graph_build1(f.g, IR_OP_SOFTMAX, &f.y, 1, &ax, 1, "s", L(4));
  int64_t sizes[2] = {1, 1};
  ir_attr sp[2] = {ir_attr_int("axis", 1), ir_attr_ints("sizes", sizes, 2)};
  char err[256];
  f.sp = ir_graph_build(f.g, IR_OP_SPLIT, &f.s, 1, sp, 2, NULL, "p", L(5), err, sizeof err);
  if (!f.sp) {
    fprintf(stderr, "fixture: %s\n", err);
    abort();
  }
  f.p0 = f.sp->out[0];
  f.p1 = f.sp->out[1];
  f.mm = f.y->def;
  f.sm = f.s->def;
  ir_graph_add_output(f.g, "y", f.s);
  ir_graph_add_output(f.g, "p", f.p0);
  return f;
}

/* Verifies g; returns the problem count and the text in *text (malloc'd). */
static int verify(const ir_graph *g, char **text) {
  size_t len = 0;
  *text = NULL;
  FILE *mem = open_memstream(text, &len);
  ir_diag *d = ir_diag_new(mem);
  int n = ir_verify(g, d);
  CHECK_EQ_INT(ir_diag_errors(d), n);
  ir_diag_free(d);
  fclose(mem);
  return n;
}

/* Expects at least one problem and the message piece in the report; frees the graph. */
static void expect(fixture *f, const char *piece, int line) {
  char *text;
  int n = verify(f->g, &text);
  if (n == 0 || !strstr(text, piece))
    fprintf(stderr, "test_ir_verify.c:%d: wanted \"%s\" in:\n%s", line, piece, text ? text : "");
  CHECK(n > 0);
  CHECK(strstr(text, piece) != NULL);
  free(text);
  ir_graph_free(f->g);
}
#define EXPECT(f, piece) expect(&(f), piece, __LINE__)

static void expect_valid(ir_graph *g) {
  char *text;
  int n = verify(g, &text);
  if (n) fprintf(stderr, "unexpected problems:\n%s", text);
  CHECK_EQ_INT(n, 0);
  free(text);
}

int main(void) {
  fixture f = make();
  expect_valid(f.g);
  ir_graph_free(f.g);

  ir_graph *empty = ir_graph_new("e", NULL);
  expect_valid(empty);
  ir_graph_free(empty);

  /* a result type that disagrees with inference, reported at the node's line */
  f = make();
  f.y->type = T2(2, 3);
  EXPECT(f, "m.tg:3:1: error: verifier: result 0 of matmul has type f32[2, 3] but its operands give f32[2, 2]\n");

  /* use before definition */
  f = make();
  f.g->nodes[0] = f.sm;
  f.g->nodes[1] = f.mm;
  f.sm->id = 0;
  f.mm->id = 1;
  EXPECT(f, "m.tg:4:1: error: verifier: operand 0 of softmax, %y, is used before its definition");

  /* operand from another graph */
  f = make();
  ir_graph *other = ir_graph_new("o", NULL);
  f.mm->in[1] = ir_graph_add_input(other, "W", T2(3, 2), L(1));
  EXPECT(f, "verifier: operand 1 of matmul is not a value of this graph");
  ir_graph_free(other);

  /* names */
  f = make();
  f.s->name = "y";
  EXPECT(f, "verifier: name %y is used by two values");
  f = make();
  f.p1->name = "";
  EXPECT(f, "verifier: value 5 has no name");

  /* declarations */
  f = make();
  f.x->def = f.mm;
  EXPECT(f, "verifier: input %x has a defining node");
  f = make();
  f.x->role = IR_ROLE_ACT;
  EXPECT(f, "m.tg:1:1: error: verifier: input %x has role act");
  f = make();
  f.w->init = (ir_init){IR_INIT_UNIFORM, 1.0, 0.0};
  EXPECT(f, "verifier: param %W has an invalid init");
  f = make();
  f.w->init = (ir_init){IR_INIT_NORMAL, NAN, 0.0};
  EXPECT(f, "verifier: param %W has an invalid init");
  f = make();
  f.g->params[0] = f.x;
  EXPECT(f, "verifier: %x is declared twice (as input and param)");
  f = make();
  f.g->n_params = 0; /* W is no longer declared */
  EXPECT(f, "verifier: operand 1 of matmul, %W, has no definition");

  /* dead nodes */
  f = make();
  f.sm->dead = true;
  EXPECT(f, "verifier: operand 0 of split, %s, is defined by a removed node");
  f = make();
  f.sm->dead = true;
  EXPECT(f, "verifier: output \"y\" refers to %s, defined by a removed node");
  f = make();
  ir_attr ax0 = ir_attr_int("axis", 0);
  ir_graph_build1(f.g, IR_OP_SOFTMAX, &f.y, 1, &ax0, 1, "unused", L(9))->def->dead = true;
  expect_valid(f.g); /* a dead node nobody uses is fine, before and after compaction */
  ir_graph_compact(f.g);
  expect_valid(f.g);
  ir_graph_free(f.g);

  /* outputs */
  f = make();
  ir_graph_add_output(f.g, "y", f.p1);
  EXPECT(f, "verifier: output name \"y\" is used twice");
  f = make();
  other = ir_graph_new("o", NULL);
  ir_graph_add_output(f.g, "z", ir_graph_add_input(other, "z", T2(1, 1), L(1)));
  EXPECT(f, "verifier: output \"z\" is not a value of this graph");
  ir_graph_free(other);

  /* sharding */
  f = make();
  f.g->mesh.size[IR_AXIS_DP] = 2;
  f.g->mesh.size[IR_AXIS_TP] = 2;
  f.y->shard.split[0] = 1 << IR_AXIS_DP;
  f.y->shard.split[1] = 1 << IR_AXIS_TP;
  expect_valid(f.g);
  ir_graph_free(f.g);
  f = make();
  f.g->mesh.size[IR_AXIS_DP] = 2;
  f.g->mesh.size[IR_AXIS_TP] = 2;
  f.y->shard.split[0] = 1 << IR_AXIS_DP | 1 << IR_AXIS_TP;
  f.y->shard.partial = 0;
  expect_valid(f.g);
  ir_graph_free(f.g);
  f = make();
  f.g->mesh.size[IR_AXIS_DP] = 2;
  f.y->shard.split[2] = 1 << IR_AXIS_DP;
  EXPECT(f, "verifier: %y is split on dim 2 but has rank 2");
  f = make();
  f.g->mesh.size[IR_AXIS_DP] = 2;
  f.y->shard.split[0] = 1 << IR_AXIS_DP;
  f.y->shard.split[1] = 1 << IR_AXIS_DP;
  EXPECT(f, "verifier: %y is split over dp on two dims");
  f = make();
  f.y->shard.split[0] = 1 << IR_AXIS_PP;
  EXPECT(f, "verifier: %y is split over pp, but the graph's mesh has no pp axis");
  f = make();
  f.y->shard.split[1] = 1 << 5;
  EXPECT(f, "verifier: %y is split over an invalid mesh axis 5");
  f = make();
  f.g->mesh.size[IR_AXIS_TP] = 4;
  f.y->shard.split[1] = 1 << IR_AXIS_TP;
  f.y->shard.partial = 1 << IR_AXIS_TP;
  EXPECT(f, "verifier: %y is both split and partial over tp");
  f = make();
  f.y->shard.partial = 1 << IR_AXIS_DP;
  EXPECT(f, "verifier: %y is partial over dp, but the graph's mesh has no dp axis");

  /* arity and def links */
  f = make();
  f.mm->n_in = 1;
  EXPECT(f, "m.tg:3:1: error: verifier: matmul has 1 operands");
  f = make();
  f.s->def_result = 1;
  EXPECT(f, "verifier: %s claims to be result 1 of softmax, which it is not");
  f = make();
  f.s->def_result = 1;
  EXPECT(f, "verifier: result 0 of softmax, %s, does not point back to its node");
  f = make();
  f.sp->n_out = 1;
  EXPECT(f, "verifier: split has 1 results but its operands give 2");
  f = make();
  f.sm->out[0] = f.y;
  EXPECT(f, "verifier: %y is defined twice (result 0 of softmax)");
  f = make();
  f.sm->id = 7;
  EXPECT(f, "verifier: node 1 has id 7");
  f = make();
  f.mm->op = (ir_op)200;
  EXPECT(f, "verifier: node 0 has an invalid op 200");

  /* attributes and types go through ir_infer */
  f = make();
  f.sm->n_attrs = 0;
  EXPECT(f, "m.tg:4:1: error: verifier: missing attribute 'axis' in softmax");
  f = make();
  f.sm->attrs[0].i = 5;
  EXPECT(f, "verifier: axis 5 out of range for f32[2, 2] in softmax");
  f = make();
  f.y->type.dims[0] = -4;
  EXPECT(f, "verifier: %y has an invalid type");
  f = make();
  f.w->type.dtype = IR_DT_F64;
  EXPECT(f, "verifier: dtype mismatch in matmul: f32 and f64");

  /* a const node: its given type is validated, not re-derived */
  f = make();
  ir_attr v = ir_attr_float("value", 1.5);
  ir_type ct = T2(2, 2);
  char err[128];
  ir_node *cn = ir_graph_build(f.g, IR_OP_CONST, NULL, 0, &v, 1, &ct, "c", L(8), err, sizeof err);
  CHECK(cn != NULL);
  expect_valid(f.g);
  cn->attrs[0].kind = IR_ATTR_INT;
  EXPECT(f, "verifier: attribute 'value' of const must be a float");

  /* errors past the diag limit are still counted */
  f = make();
  for (int i = 0; i < 30; i++) ir_graph_add_output(f.g, "dup", f.s);
  char *text;
  CHECK_EQ_INT(verify(f.g, &text), 29);
  free(text);
  ir_graph_free(f.g);

  return check_done();
}
