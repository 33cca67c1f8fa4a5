/* tests/unit/test_shard_blocks.c — a rank's block of a whole value
 * (runtime/shard.c, ir_shard_global_index): the blocks of every rank
 * reassemble the whole value exactly, for splits over one axis, nested
 * splits (dp, tp) of one dim, two dims, and dims in parts; the parts layout
 * holds the block of every part (Megatron's fused q, k, v columns); a
 * sharded parameter's block has exactly the values one device would give
 * those elements; a padded dim (a padded vocabulary) keeps its padding out
 * of the whole value and of what a state file stores. */
#include <string.h>

#include "check.h"
#include "runtime.h"

static ir_type T2(int64_t a, int64_t b) { return (ir_type){.dtype = IR_DT_F32, .rank = 2, .dims = {a, b}}; }

/* every rank's block of `whole` put back into a zeroed tensor gives `whole` again */
static void roundtrip(const ir_type *t, const ir_shard *s, const ir_mesh *m) {
  rt_tensor *whole = rt_tensor_new(t), *back = rt_tensor_new(t);
  for (int64_t i = 0; i < ir_type_numel(t); i++) rt_tensor_set(whole, i, (double)i);
  ir_type lt = *t;
  for (int d = 0; d < t->rank; d++)
    for (int a = 0; a < IR_NUM_AXES; a++)
      if ((s->split[d] >> a) & 1) lt.dims[d] /= m->size[a];
  rt_tensor *local = rt_tensor_new(&lt);
  char err[256];
  int hits = 0;
  for (int pp = 0; pp < m->size[0]; pp++)
    for (int dp = 0; dp < m->size[1]; dp++)
      for (int tp = 0; tp < m->size[2]; tp++) {
        int coord[IR_NUM_AXES] = {pp, dp, tp};
        CHECK_EQ_INT(rt_shard_extract(whole, local, s, m, coord, err, sizeof err), 0);
        CHECK_EQ_INT(rt_shard_insert(back, local, s, m, coord, err, sizeof err), 0);
        hits++;
      }
  CHECK(hits == ir_mesh_ranks(m));
  CHECK(memcmp(whole->data, back->data, whole->nbytes) == 0);
  rt_tensor_free(whole), rt_tensor_free(back), rt_tensor_free(local);
}

static void test_layouts(void) {
  ir_mesh m = ir_mesh_single();
  m.size[IR_AXIS_DP] = 2, m.size[IR_AXIS_TP] = 3;
  ir_type t = T2(12, 18);
  ir_shard s = {{0}, 0, {0}, {0}};
  s.split[0] = 1 << IR_AXIS_DP;
  roundtrip(&t, &s, &m);
  s.split[0] = 1 << IR_AXIS_DP | 1 << IR_AXIS_TP; /* nested on one dim */
  roundtrip(&t, &s, &m);
  s.split[0] = 1 << IR_AXIS_DP, s.split[1] = 1 << IR_AXIS_TP; /* two dims */
  roundtrip(&t, &s, &m);
  s.split[0] = 0, s.split[1] = 1 << IR_AXIS_TP, s.pieces[1] = 2; /* 2 parts of 9: blocks of 3 */
  roundtrip(&t, &s, &m);
  /* parts under an outer split: dim 0 over (dp, tp), tp in 2 parts of each dp block */
  memset(&s, 0, sizeof s);
  s.split[0] = 1 << IR_AXIS_DP | 1 << IR_AXIS_TP, s.pieces[0] = 2;
  roundtrip(&t, &s, &m);
}

static void test_parts_layout(void) {
  /* [2, 12] as 3 parts of 4 columns, tp = 2: rank 1 holds columns 2,3 | 6,7 | 10,11 */
  ir_mesh m = ir_mesh_single();
  m.size[IR_AXIS_TP] = 2;
  ir_type t = T2(2, 12), lt = T2(2, 6);
  ir_shard s = {{0}, 0, {0}, {0}};
  s.split[1] = 1 << IR_AXIS_TP, s.pieces[1] = 3;
  rt_tensor *whole = rt_tensor_new(&t), *local = rt_tensor_new(&lt);
  for (int i = 0; i < 24; i++) rt_tensor_set(whole, i, i % 12);
  int coord[IR_NUM_AXES] = {0, 0, 1};
  char err[128];
  CHECK_EQ_INT(rt_shard_extract(whole, local, &s, &m, coord, err, sizeof err), 0);
  const double want[6] = {2, 3, 6, 7, 10, 11};
  for (int j = 0; j < 6; j++) CHECK(rt_tensor_get(local, j) == want[j] && rt_tensor_get(local, 6 + j) == want[j]);
  CHECK_EQ_INT(ir_shard_global_index(&s, &m, coord, 1, 6, 5), 11);
  rt_tensor_free(whole), rt_tensor_free(local);
}

/* a [B, T] value with B over dp, T over tp, flattened: [B T] with tp in B/dp parts */
static void test_flattened(void) {
  ir_mesh m = ir_mesh_single();
  m.size[IR_AXIS_DP] = 2, m.size[IR_AXIS_TP] = 2;
  ir_shard s = {{0}, 0, {0}, {0}};
  s.split[0] = 1 << IR_AXIS_DP | 1 << IR_AXIS_TP, s.pieces[0] = 2; /* B = 4, T = 6: local rows 2 x 3 */
  int coord[IR_NUM_AXES] = {0, 1, 1};
  /* rank (dp 1, tp 1) holds b in {2, 3}, t in {3, 4, 5}: rows b * 6 + t */
  const int64_t want[6] = {15, 16, 17, 21, 22, 23};
  for (int l = 0; l < 6; l++) CHECK_EQ_INT(ir_shard_global_index(&s, &m, coord, 0, 6, l), want[l]);
}

static void test_param_init(void) {
  ir_graph *g = ir_graph_new("g", NULL);
  ir_value *p = ir_graph_add_param(g, "w", T2(6, 8), (ir_init){IR_INIT_NORMAL, 0.02, 0}, (ir_loc){0});
  rt_tensor *whole = rt_tensor_new(&p->type);
  rt_init_param(whole, p, 7);
  ir_mesh m = ir_mesh_single();
  m.size[IR_AXIS_TP] = 2;
  p->shard.split[1] = 1 << IR_AXIS_TP;
  ir_type lt = T2(6, 4);
  rt_tensor *local = rt_tensor_new(&lt);
  char err[128];
  for (int r = 0; r < 2; r++) {
    int coord[IR_NUM_AXES] = {0, 0, r};
    CHECK_EQ_INT(rt_init_param_shard(local, p, 7, &m, coord, err, sizeof err), 0);
    for (int i = 0; i < 6; i++)
      for (int j = 0; j < 4; j++) CHECK(rt_tensor_get(local, i * 4 + j) == rt_tensor_get(whole, i * 8 + r * 4 + j));
  }
  rt_tensor_free(whole), rt_tensor_free(local);
  ir_graph_free(g);
}

/* a padded vocabulary: [7, 2] rows over tp = 4, padded to 8 (pad 1): blocks
 * of 2 rows, rank 3's second row is padding. The blocks reassemble the
 * whole value, a block's padding is zeros on extract and no element on
 * insert; unpadded (as a state file holds it) rank 3 keeps 1 row, repadded
 * it is the block again; a parameter's block is one device's values and
 * zeros for the padding */
static void test_padded(void) {
  ir_mesh m = ir_mesh_single();
  m.size[IR_AXIS_TP] = 4;
  ir_type t = T2(7, 2), lt = T2(2, 2);
  ir_shard s = {{0}, 0, {0}, {0}};
  s.split[0] = 1 << IR_AXIS_TP, s.pad[0] = 1;
  ir_type g = ir_shard_global_type(&lt, &s, &m);
  CHECK(ir_type_equal(&g, &t));
  char buf[64], err[256];
  CHECK_STR(ir_shard_str(&s, 2, buf, sizeof buf), "[tp pad 1, -]");
  rt_tensor *whole = rt_tensor_new(&t), *back = rt_tensor_new(&t), *local = rt_tensor_new(&lt);
  for (int i = 0; i < 14; i++) rt_tensor_set(whole, i, 1 + i);
  for (int r = 0; r < 4; r++) {
    int coord[IR_NUM_AXES] = {0, 0, r};
    for (int i = 0; i < 4; i++) rt_tensor_set(local, i, -1); /* overwritten: padding included */
    CHECK_EQ_INT(rt_shard_extract(whole, local, &s, &m, coord, err, sizeof err), 0);
    for (int i = 0; i < 4; i++) CHECK(rt_tensor_get(local, i) == (r * 4 + i < 14 ? 1 + r * 4 + i : 0));
    CHECK_EQ_INT(rt_shard_insert(back, local, &s, &m, coord, err, sizeof err), 0);
    rt_tensor *stored = rt_shard_unpad(local, &s, &m, coord);
    CHECK(stored && stored->type.dims[0] == (r == 3 ? 1 : 2) && stored->type.dims[1] == 2);
    for (int i = 0; stored && i < stored->type.dims[0] * 2; i++) CHECK(rt_tensor_get(stored, i) == 1 + r * 4 + i);
    rt_tensor *again = stored ? rt_shard_repad(stored, &s, &m, &t) : NULL;
    CHECK(again && ir_type_equal(&again->type, &lt) && memcmp(again->data, local->data, local->nbytes) == 0);
    rt_tensor_free(stored), rt_tensor_free(again);
  }
  CHECK(memcmp(whole->data, back->data, whole->nbytes) == 0);
  ir_graph *pg = ir_graph_new("g", NULL);
  ir_value *p = ir_graph_add_param(pg, "wte", t, (ir_init){IR_INIT_NORMAL, 0.02, 0}, (ir_loc){0});
  rt_init_param(whole, p, 5);
  p->shard = s;
  int last[IR_NUM_AXES] = {0, 0, 3};
  CHECK_EQ_INT(rt_init_param_shard(local, p, 5, &m, last, err, sizeof err), 0);
  CHECK(rt_tensor_get(local, 0) == rt_tensor_get(whole, 12) && rt_tensor_get(local, 1) == rt_tensor_get(whole, 13));
  CHECK(rt_tensor_get(local, 2) == 0 && rt_tensor_get(local, 3) == 0);
  ir_graph_free(pg);
  rt_tensor_free(whole), rt_tensor_free(back), rt_tensor_free(local);
}

int main(void) {
  test_layouts();
  test_padded();
  test_parts_layout();
  test_flattened();
  test_param_init();
  return check_done();
}
