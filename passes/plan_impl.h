/* passes/plan_impl.h — private to the planner's files of passes/
 * (plan_rules.c, plan_profile.c, plan_sim.c, plan.c): the tensor-parallel
 * states of values, the per-op rule propagation, and the per-layer profile
 * of a training graph. The public side is the "planner" section of pass.h.
 */
#ifndef TGC_PLAN_IMPL_H
#define TGC_PLAN_IMPL_H

#include "pass.h"

/* ---- plan_rules.c: how every op divides under tensor (and sequence) parallelism ----
 * A value on a tensor-parallel group of t devices is in one state:
 *   R  replicated: every device holds all of it;
 *   S  split along dim `dim`: each device holds 1/t (Megatron's column/row
 *      shards, attention heads, the vocabulary);
 *   Q  split along the tokens (sequence parallelism): a per-token value of the
 *      replicated region, split along `dim`, its first batch-scaled dim;
 *   P  a partial sum: every device holds a full-size addend.
 * Parameters start unset; the rule of the first op that reads one chooses
 * (a matmul weight whose other operand is replicated is split along its
 * output columns, one whose other operand is split along the contracted dim
 * along its rows; an embedding table read with token ids from a graph input
 * along the vocabulary; anything else replicated).
 * The rules (one per op, table indexed by the op enum) give each node's
 * result states, whether its work divides by t, which GEMM dim divides, and
 * the collectives needed before the node can run: an all-reduce of a partial
 * value (a reduce-scatter to Q under sequence parallelism, when the value is
 * per-token), an all-gather of a split one. An op no rule covers for its
 * operand states gathers every operand and runs replicated: always correct,
 * never free. */
enum { TP_UNSET, TP_R, TP_S, TP_Q, TP_P };
typedef struct {
  int8_t kind, dim;
} tp_state;

enum { GEMM_NONE, GEMM_M, GEMM_N, GEMM_K, GEMM_BATCH };

typedef struct {
  int node;      /* the node that needs it (its phase and layer group) */
  int value;     /* the value whose full size moves */
  int kind;      /* IR_COLL_ALL_REDUCE, _ALL_GATHER, _REDUCE_SCATTER */
  double scale;  /* multiplier on the value's bytes (cross-entropy's three per-token statistics in fp32) */
} tp_comm;

/* A dimension the tensor degree must divide (the vocabulary is padded and
 * never one). what: 0 a split dimension, 1 the attention heads. */
typedef struct {
  int64_t size;
  int value, dim, what;
} tp_req;

typedef struct {
  bool sp;
  tp_state *st;         /* per value id: the state it is computed in */
  uint8_t *split;       /* per node: its work divides by t */
  int8_t *gemm;         /* per node: GEMM_* (which dim of its product divides) */
  tp_comm *comm;
  int n_comm, cap_comm;
  tp_req *req;
  int n_req, cap_req;
} tp_result;

/* batch[v]: value v is per-sample (one of its dims grows with the batch). */
int plan_tp_propagate(const ir_graph *g, const uint8_t *batch, bool sp, tp_result *r);
void plan_tp_free(tp_result *r);
bool plan_tp_has_rule(int op);
/* The state a value is held in between its producer and its readers: a
 * partial value is reduced before anyone reads it (to Q under sequence
 * parallelism when it is per-token, else to R). */
tp_state plan_tp_stored(const tp_result *r, int value, bool batch);

/* ---- plan_profile.c ---- */

const pass_target *plan_model_device(const pass_plan_model *m);
double plan_model_opt_flops(const pass_plan_model *m);
int plan_model_opt_states(const pass_plan_model *m);
/* Whether the trainer counts correct predictions (the graph has a cross-entropy). */
bool plan_model_accuracy(const pass_plan_model *m);

#endif
