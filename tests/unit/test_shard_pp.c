/* tests/unit/test_shard_pp.c — the bytes a pipeline moves, against the
 * closed forms (issue 10: "a pipeline boundary B·T·D activations forward and
 * the same gradients backward per micro-batch").
 *
 * examples/gpt.tg --config tiny (V 64, T 16, D 32, 2 layers) on pp = 2 with
 * 2 micro-batches of B = 4: layer 0 runs on stage 0, layer 1, the final
 * layernorm and the head on stage 1. Per micro-batch, pass_comm_tally_of
 * (the prediction every rank's counters equal in the mpirun tests) must
 * give exactly:
 *   stage 0 fwd: one send over pp of B·T·D f32 (the residual stream after
 *                layer 0), no receive; stage 1 fwd: the receive of it;
 *   stage 1 bwd: one send of B·T·D f32 (its gradient); stage 0 bwd: the
 *                receive;
 *   the update: the tied embedding's gradient parts exchanged (V·D f32
 *                each way), and only scalars all-reduced over pp (the loss
 *                and accuracy sums, the Inf/NaN count).
 * Nothing else crosses: a constant two stages read (a layernorm's eps) is
 * made by both, not sent.
 * And on dp = 2 x pp = 2, the boundary is the rank's half of the batch,
 * and the gradients all-reduce over dp moves 2 (n - 1) / n of each
 * stage's gradient bytes (the ring's closed form). */
#include "check.h"
#include "testtrain.h"

enum { V = 64, T = 16, D = 32, B = 4 };

/* The training program of gpt tiny on mesh, built for pipeline stage s. */
static pass_training *build(const char *mesh, int stage, int K) {
  sharded_setup c = {.path = "examples/gpt.tg", .config = "tiny", .mesh = mesh, .stage = stage, .micro = K,
                     .schedule = PASS_SCHED_1F1B, .opt = PASS_OPT_ADAMW, .verify_each = true};
  pass_training *t = sharded_program(&c);
  CHECK(t != NULL);
  return t;
}

typedef pass_comm_tally tally[IR_NUM_OPS][IR_NUM_AXES];

/* Every call over pp in g, outside sends, receives and all-reduces, is an error. */
static void only_p2p_and_scalars(const tally t) {
  for (int op = 0; op < IR_NUM_OPS; op++)
    if (op != IR_OP_SEND && op != IR_OP_RECV && op != IR_OP_ALL_REDUCE && t[op][IR_AXIS_PP].calls) {
      fprintf(stderr, "unexpected %s over pp\n", ir_op_name((ir_op)op));
      CHECK(0);
    }
}

static void test_boundary(const char *mesh, int dp) {
  const int64_t boundary = (int64_t)(B / dp) * T * D * 4;
  for (int s = 0; s < 2; s++) {
    pass_training *t = build(mesh, s, 2);
    if (!t) continue;
    CHECK(t->fwd && t->bwd);
    CHECK_EQ_INT(t->stage, s);
    CHECK_EQ_INT(t->n_stages, 2);
    if (!t->fwd || !t->bwd) {
      pass_training_free(t);
      continue;
    }
    int coord[IR_NUM_AXES] = {0};
    coord[IR_AXIS_PP] = s;
    tally f, b, u;
    pass_comm_tally_of(t->fwd, coord, f);
    pass_comm_tally_of(t->bwd, coord, b);
    pass_comm_tally_of(t->update, coord, u);
    only_p2p_and_scalars(f);
    only_p2p_and_scalars(b);
    only_p2p_and_scalars(u);
    /* forward: stage 0 sends the activations, stage 1 receives them */
    CHECK_EQ_INT(f[IR_OP_SEND][IR_AXIS_PP].calls, s == 0);
    CHECK_EQ_INT(f[IR_OP_SEND][IR_AXIS_PP].sent, s == 0 ? boundary : 0);
    CHECK_EQ_INT(f[IR_OP_RECV][IR_AXIS_PP].calls, s == 1);
    CHECK_EQ_INT(f[IR_OP_RECV][IR_AXIS_PP].received, s == 1 ? boundary : 0);
    CHECK_EQ_INT(f[IR_OP_ALL_REDUCE][IR_AXIS_PP].calls, 0);
    /* backward: the gradient of the same values, the other way */
    CHECK_EQ_INT(b[IR_OP_SEND][IR_AXIS_PP].calls, s == 1);
    CHECK_EQ_INT(b[IR_OP_SEND][IR_AXIS_PP].sent, s == 1 ? boundary : 0);
    CHECK_EQ_INT(b[IR_OP_RECV][IR_AXIS_PP].calls, s == 0);
    CHECK_EQ_INT(b[IR_OP_RECV][IR_AXIS_PP].received, s == 0 ? boundary : 0);
    CHECK_EQ_INT(b[IR_OP_ALL_REDUCE][IR_AXIS_PP].calls, 0);
    /* the update: the tied embedding's gradient parts, each way */
    CHECK_EQ_INT(u[IR_OP_SEND][IR_AXIS_PP].sent, (int64_t)V * D * 4);
    CHECK_EQ_INT(u[IR_OP_RECV][IR_AXIS_PP].received, (int64_t)V * D * 4);
    /* and scalars only, over pp: the loss and accuracy (f64) and the
     * Inf/NaN count (i64); a one-element all-reduce over 2 ranks sends its 8 bytes */
    CHECK_EQ_INT(u[IR_OP_ALL_REDUCE][IR_AXIS_PP].calls, 3);
    CHECK_EQ_INT(u[IR_OP_ALL_REDUCE][IR_AXIS_PP].sent, 3 * 8);
    if (dp > 1) {
      /* the ring: 2 (n - 1) / n of this stage's gradients, n = 2, once per
       * step, and of the loss and accuracy sums (f64) */
      int64_t grad_bytes = 0;
      for (int p = 0; p < t->update->n_params; p++) grad_bytes += ir_type_numel(&t->update->params[p]->type) * (int64_t)ir_dtype_size(t->update->params[p]->type.dtype);
      CHECK_EQ_INT(u[IR_OP_ALL_REDUCE][IR_AXIS_DP].sent, grad_bytes + 2 * 8);
      CHECK_EQ_INT(f[IR_OP_ALL_REDUCE][IR_AXIS_DP].calls + b[IR_OP_ALL_REDUCE][IR_AXIS_DP].calls, 0);
    }
    printf("%s stage %d: fwd send %lld recv %lld, bwd send %lld recv %lld, update pp send %lld, dp all-reduce %lld bytes\n",
           mesh, s, (long long)f[IR_OP_SEND][IR_AXIS_PP].sent, (long long)f[IR_OP_RECV][IR_AXIS_PP].received,
           (long long)b[IR_OP_SEND][IR_AXIS_PP].sent, (long long)b[IR_OP_RECV][IR_AXIS_PP].received,
           (long long)u[IR_OP_SEND][IR_AXIS_PP].sent, (long long)u[IR_OP_ALL_REDUCE][IR_AXIS_DP].sent);
    pass_training_free(t);
  }
}

int main(void) {
  test_boundary("pp=2", 1);
  test_boundary("dp=2,pp=2", 2);
  return check_done();
}
