/* tests/unit/test_ir_edit.c — the graph edits passes use to stay linear:
 *   - ir_replace_uses_many replaces every listed value in node operands and
 *     graph outputs in one walk, following chains (a -> b -> c), leaving
 *     other values alone; the graph verifies afterwards;
 *   - ir_graph_take_place swaps a new node into a dead node's place (ids
 *     stay equal to positions), and compaction then gives the order a
 *     move-before would have given;
 *   - ir_graph_compact keeps exactly the declarations still listed (the
 *     listed-value marks replaced a scan of the lists per value).
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ir.h"
#include "testgraph.h"

static ir_value *un(ir_graph *g, ir_op op, ir_value *x, const char *name) {
  return ir_graph_build1(g, op, &x, 1, NULL, 0, name, (ir_loc){0});
}

static void test_replace_many(void) {
  ir_graph *g = ir_graph_new("m", NULL);
  ir_type t = T(IR_DT_F32, 1, D(4));
  ir_value *x = ir_graph_add_input(g, "x", t, (ir_loc){0});
  ir_value *a = un(g, IR_OP_NEG, x, "a"), *b = un(g, IR_OP_EXP, x, "b"), *c = un(g, IR_OP_TANH, x, "c");
  ir_value *in2[2] = {a, b};
  ir_value *s = ir_graph_build1(g, IR_OP_ADD, in2, 2, NULL, 0, "s", (ir_loc){0});
  ir_value *u = un(g, IR_OP_SQUARE, a, "u");
  ir_graph_add_output(g, "s", s);
  ir_graph_add_output(g, "a", a);
  ir_graph_add_output(g, "u", u);
  /* a -> b and b -> c: every use of a or b becomes c */
  ir_value *olds[2] = {a, b}, *news[2] = {b, c};
  ir_replace_uses_many(g, olds, news, 2);
  CHECK(s->def->in[0] == c && s->def->in[1] == c);
  CHECK(u->def->in[0] == c);
  CHECK(g->outputs[1].value == c);
  CHECK(g->outputs[0].value == s && g->outputs[2].value == u);
  CHECK(c->def->in[0] == x); /* untouched */
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  ir_diag *d = ir_diag_new(m);
  CHECK_EQ_INT(ir_verify(g, d), 0);
  ir_diag_free(d);
  fclose(m);
  free(text);
  ir_graph_free(g);
}

static void test_take_place_and_compact(void) {
  ir_graph *g = ir_graph_new("m", NULL);
  ir_type t = T(IR_DT_F32, 1, D(4));
  ir_value *x = ir_graph_add_input(g, "x", t, (ir_loc){0});
  ir_value *p = ir_graph_add_param(g, "p", t, (ir_init){IR_INIT_ZEROS, 0, 0}, (ir_loc){0});
  ir_value *q = ir_graph_add_param(g, "q", t, (ir_init){IR_INIT_ZEROS, 0, 0}, (ir_loc){0});
  ir_value *a = un(g, IR_OP_NEG, x, "a");   /* node 0 */
  ir_value *b = un(g, IR_OP_EXP, a, "b");   /* node 1: to be replaced */
  ir_value *c = un(g, IR_OP_TANH, b, "c");  /* node 2 */
  ir_value *in2[2] = {c, p};
  ir_value *s = ir_graph_build1(g, IR_OP_ADD, in2, 2, NULL, 0, "s", (ir_loc){0}); /* node 3 */
  ir_graph_add_output(g, "s", s);
  ir_value *b2 = un(g, IR_OP_SIN, a, "b2"); /* node 4, appended */
  ir_node *old = b->def, *fresh = b2->def;
  ir_replace_all_uses(g, b, b2);
  old->dead = true;
  ir_graph_take_place(g, fresh, old);
  CHECK(g->nodes[1] == fresh && fresh->id == 1);
  CHECK(g->nodes[4] == old && old->id == 4);
  /* q is no longer listed: compaction drops it, keeps x and p */
  g->params[1] = g->params[0];
  g->n_params = 1;
  ir_graph_compact(g);
  CHECK_EQ_INT(g->n_nodes, 4);
  const char *order[4] = {"a", "b2", "c", "s"};
  for (int i = 0; i < 4 && i < g->n_nodes; i++) {
    CHECK_STR(g->nodes[i]->out[0]->name, order[i]);
    CHECK_EQ_INT(g->nodes[i]->id, i);
  }
  bool has_q = false, has_p = false, has_x = false;
  for (int i = 0; i < g->n_values; i++) {
    CHECK_EQ_INT(g->values[i]->id, i);
    has_q |= g->values[i] == q, has_p |= g->values[i] == p, has_x |= g->values[i] == x;
  }
  CHECK(!has_q && has_p && has_x);
  CHECK_EQ_INT(g->n_values, 6); /* x, p, a, b2, c, s */
  ir_graph_free(g);
}

/* Inputs and outputs by name. */
static void test_find_by_name(void) {
  ir_graph *g = ir_graph_new("names", NULL);
  ir_type t = {IR_DT_F32, 1, {4}};
  ir_value *x = ir_graph_add_input(g, "x", t, (ir_loc){0});
  ir_value *y = ir_graph_add_input(g, "y", t, (ir_loc){0});
  ir_graph_add_output(g, "out", y);
  ir_graph_add_output(g, "x_again", x);
  CHECK_EQ_INT(ir_graph_input_index(g, "x"), 0);
  CHECK_EQ_INT(ir_graph_input_index(g, "y"), 1);
  CHECK_EQ_INT(ir_graph_input_index(g, "out"), -1);
  CHECK_EQ_INT(ir_graph_input_index(g, NULL), -1);
  CHECK_EQ_INT(ir_graph_output_index(g, "x_again"), 1);
  CHECK_EQ_INT(ir_graph_output_index(g, "out"), 0);
  CHECK_EQ_INT(ir_graph_output_index(g, "x"), -1);
  ir_graph_free(g);
}

int main(void) {
  test_find_by_name();
  test_replace_many();
  test_take_place_and_compact();
  return check_done();
}
