/* tests/unit/test_mesh_vocab.c — the mesh axes (ir/mesh_axes.def) and the
 * collective kinds (ir/collectives.def) are declared once: every table
 * built from them (ir's names, the planner's words and labels, the comm
 * layer's names, the ops, the ring factors of the cost model) has an entry
 * for every row, and every communication op of ops.def is a row. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "ir.h"
#include "pass.h"

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
  CHECK(ir_op_has(IR_OP_##op, IR_OPF_COMM));                                                \
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
  /* every op that communicates is a kind; mesh_slice moves nothing */
  for (int op = 0; op < IR_NUM_OPS; op++) {
    bool comm = ir_op_has((ir_op)op, IR_OPF_COMM);
    CHECK_EQ_INT(ir_coll_of_op((ir_op)op) >= 0, comm);
  }
  CHECK(pass_comm_bytes(IR_OP_MESH_SLICE, 4, 1000.0) == 0);
  /* the planner's three tensor-axis kinds come first (pass_plan_group.coll_*) */
  CHECK(IR_COLL_ALL_REDUCE == 0 && IR_COLL_ALL_GATHER == 1 && IR_COLL_REDUCE_SCATTER == 2);
}

int main(void) {
  test_axes();
  test_collectives();
  return check_done();
}
