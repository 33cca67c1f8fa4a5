/* tests/unit/test_mesh.c — the device mesh and sharding specs as text
 * (ir/mesh.c): `--mesh` parsing with its exact messages, the mesh and spec
 * strings the printer, DOT and diagnostics share, spec equality. */
#include <string.h>

#include "check.h"
#include "ir.h"

static void expect_mesh(const char *text, int pp, int dp, int tp, bool sp) {
  ir_mesh m;
  char err[256] = "";
  int rc = ir_mesh_parse(text, &m, err, sizeof err);
  if (rc != 0) fprintf(stderr, "%s: %s\n", text, err);
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(m.size[IR_AXIS_PP], pp);
  CHECK_EQ_INT(m.size[IR_AXIS_DP], dp);
  CHECK_EQ_INT(m.size[IR_AXIS_TP], tp);
  CHECK_EQ_INT(m.sp, sp);
  CHECK_EQ_INT(m.stage, -1);
  CHECK_EQ_INT(ir_mesh_ranks(&m), pp * dp * tp);
}

static void expect_error(const char *text, const char *msg) {
  ir_mesh m;
  char err[256] = "";
  CHECK_EQ_INT(ir_mesh_parse(text, &m, err, sizeof err), -1);
  CHECK_STR(err, msg);
}

static void test_parse(void) {
  expect_mesh("dp=2,tp=2,pp=2", 2, 2, 2, false);
  expect_mesh("tp=4,sp", 1, 1, 4, true);
  expect_mesh("pp=4", 4, 1, 1, false);
  expect_mesh("dp=1", 1, 1, 1, false);
  expect_mesh("dp=4096", 1, 4096, 1, false);
  expect_error("", "an empty mesh (give axes like dp=2,tp=2)");
  expect_error("xp=2", "unknown mesh axis 'xp' (axes: pp, dp, tp; 'sp' turns on sequence parallelism)");
  expect_error("dp=2,dp=4", "mesh axis 'dp' given twice");
  expect_error("dp=0", "mesh axis size 'dp=0' must be a whole number from 1 to 4096");
  expect_error("dp=2x", "mesh axis size 'dp=2x' must be a whole number from 1 to 4096");
  expect_error("dp=", "mesh axis size 'dp=' must be a whole number from 1 to 4096");
  expect_error("dp=4097", "mesh axis size 'dp=4097' must be a whole number from 1 to 4096");
  expect_error("dp=2,", "the mesh 'dp=2,' ends with ','");
  expect_error("dp", "'dp' is not an axis=size item (axes: pp, dp, tp; 'sp' turns on sequence parallelism)");
  expect_error("dp=2,sp", "'sp' (sequence parallelism) needs a tensor-parallel axis tp of size 2 or more");
  expect_error("tp=2,sp,sp", "'sp' given twice");
  expect_error("dp=64,tp=64,pp=2", "the mesh 'dp=64,tp=64,pp=2' has more than 4096 ranks");
}

static void test_strings(void) {
  char buf[128];
  ir_mesh m;
  CHECK_EQ_INT(ir_mesh_parse("tp=2,dp=4,sp", &m, buf, sizeof buf), 0);
  CHECK_STR(ir_mesh_str(&m, buf, sizeof buf), "dp=4, tp=2 sp");
  ir_mesh one = ir_mesh_single();
  CHECK(ir_mesh_is_single(&one));
  CHECK_STR(ir_mesh_str(&one, buf, sizeof buf), "one device");
  one.stage = 0;
  CHECK(!ir_mesh_is_single(&one));

  ir_shard s = {{0}, 0, {0}, {0}};
  CHECK(ir_shard_is_replicated(&s));
  CHECK_STR(ir_shard_str(&s, 2, buf, sizeof buf), "");
  s.split[0] = 1 << IR_AXIS_DP | 1 << IR_AXIS_TP;
  s.split[2] = 1 << IR_AXIS_PP;
  CHECK_STR(ir_shard_str(&s, 3, buf, sizeof buf), "[(dp, tp), -, pp]");
  s.partial = 1 << IR_AXIS_TP;
  CHECK_STR(ir_shard_str(&s, 3, buf, sizeof buf), "[(dp, tp), -, pp] partial(tp)");
  ir_shard p = {{0}, 1 << IR_AXIS_DP | 1 << IR_AXIS_TP, {0}, {0}};
  CHECK_STR(ir_shard_str(&p, 0, buf, sizeof buf), "partial(dp, tp)");
  CHECK(!ir_shard_equal(&s, &p, 3));
  ir_shard t = s;
  CHECK(ir_shard_equal(&s, &t, 3));
  t.split[5] = 1; /* beyond rank 3: not part of the spec */
  CHECK(ir_shard_equal(&s, &t, 3));
  t.pad[0] = 3; /* a padded dim: another layout */
  CHECK(!ir_shard_equal(&s, &t, 3));
  CHECK_STR(ir_shard_str(&t, 3, buf, sizeof buf), "[(dp, tp) pad 3, -, pp] partial(tp)");
  CHECK_STR(ir_axis_name(IR_AXIS_TP), "tp");
  CHECK_EQ_INT(ir_axis_from_name("pp", 2), IR_AXIS_PP);
  CHECK_EQ_INT(ir_axis_from_name("p", 1), -1);
}

int main(void) {
  test_parse();
  test_strings();
  return check_done();
}
