/* tests/unit/test_mesh_vocab.c — the mesh axes (ir/mesh_axes.def) and the
 * collective kinds (ir/collectives.def) are declared once: every table
 * built from them (ir's names, the planner's words and labels, the comm
 * layer's names, the ops, the ring factors of the cost model) has an entry
 * for every row, and every communication op of ops.def is a row. A comm
 * op's axis is an index in the graph, printed and read as its name. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "ir.h"
#include "plan.h"

static void test_axes(void) {
  int rows = 0;
#define IR_MESH_AXIS(id, name, word)                                          \
  rows++;                                                                     \
  CHECK_STR(ir_axis_name(IR_AXIS_##id), name);                                \
  CHECK_STR(ir_axis_word(IR_AXIS_##id), word);                                \
  CHECK_STR(pass_axis_name(IR_AXIS_##id), word);                              \
  CHECK_EQ_INT(ir_axis_from_name(name, strlen(name)), IR_AXIS_##id);          \
  CHECK_EQ_INT(ir_axis_from_name(name, strlen(name) - 1), -1);                \
  CHECK(IR_AXIS_##id == rows - 1); /* the rows are the enum, in mesh order */
#include "mesh_axes.def"
#undef IR_MESH_AXIS
  CHECK_EQ_INT(rows, IR_NUM_AXES);
  CHECK_STR(ir_axis_name(IR_NUM_AXES), "?");
  CHECK_STR(pass_axis_name(IR_NUM_AXES), "?");
  for (int a = 0; a < IR_NUM_AXES; a++)
    for (int b = 0; b < a; b++) {
      CHECK(strcmp(ir_axis_name((ir_axis)a), ir_axis_name((ir_axis)b)) != 0);
      CHECK(strcmp(ir_axis_word((ir_axis)a), ir_axis_word((ir_axis)b)) != 0);
    }
  /* the mesh's text and its JSON keys are the same names */
  ir_mesh m = ir_mesh_single();
  char err[128] = "", buf[64];
  CHECK_EQ_INT(ir_mesh_parse("tp=2,dp=3,pp=4", &m, err, sizeof err), 0);
  CHECK_STR(ir_mesh_str(&m, buf, sizeof buf), "pp=4, dp=3, tp=2");
}

static void test_collectives(void) {
  int rows = 0;
  double n = 0;
#define IR_COLL(id, name, op, label, ring)                                                  \
  rows++;                                                                                   \
  CHECK(IR_COLL_##id == rows - 1);                                                          \
  CHECK_STR(ir_coll_name(IR_COLL_##id), name);                                              \
  CHECK_STR(rt_coll_name(IR_COLL_##id), name);                                              \
  CHECK_STR(ir_coll_label(IR_COLL_##id), label);                                            \
  CHECK_STR(pass_coll_name(IR_COLL_##id), label);                                           \
  CHECK_EQ_INT(ir_coll_op(IR_COLL_##id), IR_OP_##op);                                       \
  CHECK(ir_op_has(IR_OP_##op, IR_OPF_COMM) && ir_op_on_mesh_axis(IR_OP_##op));              \
  CHECK_EQ_INT(ir_coll_of_op(IR_OP_##op), IR_COLL_##id);                                    \
  for (int k = 1; k <= 9; k++) {                                                            \
    n = k;                                                                                  \
    double want = k == 1 ? 0 : (ring);                                                      \
    CHECK(isfinite(want) && want >= 0);                                                     \
    CHECK(ir_coll_ring_factor(IR_COLL_##id, k) == want);                                    \
    CHECK(pass_comm_bytes(IR_OP_##op, k, 1000.0) == want * 1000.0);                         \
  }
#include "collectives.def"
#undef IR_COLL
  (void)n;
  CHECK_EQ_INT(rows, IR_NUM_COLLS);
  CHECK_STR(ir_coll_name(IR_NUM_COLLS), "?");
  CHECK_STR(rt_coll_name(IR_NUM_COLLS), "?");
  CHECK_EQ_INT(ir_coll_op(IR_NUM_COLLS), IR_NUM_OPS);
  /* every op that communicates is a kind; mesh_slice names an axis and moves nothing */
  for (int op = 0; op < IR_NUM_OPS; op++) {
    bool comm = ir_op_has((ir_op)op, IR_OPF_COMM);
    CHECK_EQ_INT(ir_coll_of_op((ir_op)op) >= 0, comm);
    CHECK_EQ_INT(ir_op_on_mesh_axis((ir_op)op), comm || op == IR_OP_MESH_SLICE);
  }
  CHECK(pass_comm_bytes(IR_OP_MESH_SLICE, 4, 1000.0) == 0);
  /* the planner's three tensor-axis kinds come first (pass_plan_group.coll_*) */
  CHECK(IR_COLL_ALL_REDUCE == 0 && IR_COLL_ALL_GATHER == 1 && IR_COLL_REDUCE_SCATTER == 2);
}

/* Every op on a mesh axis, over every axis: built with the index, printed
 * with the name, read back as the index, printed byte-identically. */
static void test_axis_attribute(void) {
  ir_graph *g = ir_graph_new("axes", "axes.tg");
  for (int a = 0; a < IR_NUM_AXES; a++) g->mesh.size[a] = 2;
  ir_type t = {.dtype = IR_DT_F32, .rank = 2, .dims = {4, 6}};
  ir_value *x = ir_graph_add_input(g, "x", t, (ir_loc){g->source_file, 1, 1});
  int built = 0;
  for (int a = 0; a < IR_NUM_AXES; a++)
    for (int op = 0; op < IR_NUM_OPS; op++) {
      if (!ir_op_on_mesh_axis((ir_op)op) || op == IR_OP_RECV) continue;
      ir_attr at[4] = {ir_attr_mesh_axis("axis", (ir_axis)a), ir_attr_int("n", 2)};
      int na = 2;
      if (op == IR_OP_ALL_GATHER || op == IR_OP_REDUCE_SCATTER || op == IR_OP_MESH_SLICE) at[na++] = ir_attr_int("dim", 1);
      if (op == IR_OP_ALL_TO_ALL) at[na++] = ir_attr_int("split_dim", 1), at[na++] = ir_attr_int("concat_dim", 0);
      if (op == IR_OP_SEND) at[na++] = ir_attr_int("peer", 1);
      if (op == IR_OP_COMM_BROADCAST) at[na++] = ir_attr_int("root", 1);
      char err[256] = "";
      ir_node *n = ir_graph_build(g, (ir_op)op, &x, 1, at, na, NULL, NULL, (ir_loc){g->source_file, 2, 1}, err, sizeof err);
      if (!n) fprintf(stderr, "%s: %s\n", ir_op_name((ir_op)op), err);
      CHECK(n != NULL);
      if (!n) continue;
      CHECK_EQ_INT(ir_node_mesh_axis(n), a);
      CHECK_EQ_INT(ir_node_attr(n, "axis")->kind, IR_ATTR_MESH_AXIS);
      built++;
    }
  CHECK(built > 0);
  char *text = ir_print_to_string(g);
  char want[32];
  snprintf(want, sizeof want, "{axis = \"%s\", n = 2", ir_axis_name(IR_AXIS_TP));
  CHECK(strstr(text, want) != NULL);
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *h = ir_read("axes.ir", text, strlen(text), d);
  CHECK(h != NULL);
  if (h) {
    char *again = ir_print_to_string(h);
    CHECK_STR(again, text);
    free(again);
    int on_axis = 0;
    for (int i = 0; i < h->n_nodes; i++)
      if (ir_op_on_mesh_axis(h->nodes[i]->op)) {
        CHECK_EQ_INT(ir_node_mesh_axis(h->nodes[i]), ir_node_mesh_axis(g->nodes[i]));
        on_axis++;
      }
    CHECK_EQ_INT(on_axis, built);
    ir_graph_free(h);
  }
  ir_diag_free(d);
  free(text);
  ir_graph_free(g);
}

int main(void) {
  test_axes();
  test_collectives();
  test_axis_attribute();
  return check_done();
}
