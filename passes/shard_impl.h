/* passes/shard_impl.h — private to the shard pass (shard.c, the engine;
 * shard_rules.c, the per-op rules).
 *
 * The pass decides a layout for every value one mesh axis at a time. On one
 * axis a value is replicated (R), split along one dim (S d) or a partial sum
 * (P); UNSET is an input or parameter no rule has placed yet (the first rule
 * that reads it places it, as the planner's rules do). A rule sees the
 * states of a node's operands on one axis and says which state each operand
 * must be in (the engine converts: R -> S d is mesh_slice, P -> R
 * all_reduce, P -> S d reduce_scatter, S d -> R all_gather, S d -> S e
 * all_to_all) and which state each result is in; it may also ask for a
 * rescaling (a mean over a split dim) or a max over the axis.
 */
#ifndef TGC_SHARD_IMPL_H
#define TGC_SHARD_IMPL_H

#include "pass.h"

enum { SH_UNSET, SH_R, SH_S, SH_P };
typedef struct {
  int8_t kind;
  int8_t dim;    /* SH_S: the split dim */
  int8_t pieces; /* SH_S: > 1 when the dim is that many equal parts, each split (ir_shard.pieces) */
} sh_st;

#define SH_MAX_ARGS 16

/* One node on one axis: the rule's input and answer. */
typedef struct {
  const ir_node *node;
  int axis;                    /* IR_AXIS_* */
  int size;                    /* the axis size (> 1) */
  int n_in, n_out;
  sh_st in[SH_MAX_ARGS];       /* in: the operands' states; out: the states they must have */
  sh_st out[SH_MAX_ARGS];      /* the results' states */
  bool in_param[SH_MAX_ARGS];  /* operand i is a parameter (gathered first in a conflict) */
  int64_t in_local[SH_MAX_ARGS][IR_MAX_RANK]; /* operand dims as divided by the outer axes' splits */
  bool megatron;               /* tp axis: place unset weights by Megatron's column / row rule */
  bool sp;                     /* tp axis with sequence parallelism: a partial sum an op cannot take is
                                * reduce-scattered along the sequence (dim 1 of [B, T, ...]) */
  int parts_hint;              /* matmul on tp: > 1 when result 0's last dim is later split in that many
                                * equal parts (a fused q, k, v projection): a column-parallel weight is
                                * then placed in parts */
  /* rescalings, all by 1 / size: */
  bool scale_results;          /* every float result (a mean over a split dim) */
  int scale_operand;           /* >= 0: that operand, before the op (cross_entropy_grad's g) */
  bool max_results;            /* result 0 is a local max: all_reduce(max) over the axis */
} sh_dec;

typedef void (*sh_rule)(sh_dec *d);
/* The rule of op (shard_rules.c); test_shard loops over every op. */
sh_rule sh_rule_of(ir_op op);
/* Whether dim d of operand i can be split once more on d->axis (in k parts). */
bool sh_can_split(const sh_dec *d, int i, int dim);
bool sh_can_split_parts(const sh_dec *d, int i, int dim, int k);

static inline sh_st sh_R(void) { return (sh_st){SH_R, 0, 1}; }
static inline sh_st sh_P(void) { return (sh_st){SH_P, 0, 1}; }
static inline sh_st sh_S(int dim) { return (sh_st){SH_S, (int8_t)dim, 1}; }
static inline sh_st sh_Sk(int dim, int k) { return (sh_st){SH_S, (int8_t)dim, (int8_t)(k > 1 ? k : 1)}; }
static inline int sh_parts(sh_st s) { return s.kind == SH_S && s.pieces > 1 ? s.pieces : 1; }
static inline bool sh_eq(sh_st a, sh_st b) {
  return a.kind == b.kind && (a.kind != SH_S || (a.dim == b.dim && sh_parts(a) == sh_parts(b)));
}

/* ---- the engine (shard.c) ----
 * sh_engine_new copies src's inputs and parameters (unplaced on every
 * active axis: dp and tp of size > 1); sh_engine_place places one on an
 * axis; sh_engine_run shards every node (-1 after reporting through d);
 * sh_engine_output adds output i converted to want (NULL, or UNSET entries:
 * as it is); sh_engine_finish hands over the new graph. */
typedef struct sh_engine sh_engine;
sh_engine *sh_engine_new(const ir_graph *src, ir_diag *d, bool megatron);
void sh_engine_place(sh_engine *e, const ir_value *v, int axis, sh_st s);
sh_st sh_engine_layout(const sh_engine *e, const ir_value *v, int axis);
/* Input v (placed) converted to want at the start of the graph: every
 * reader sees the converted value. */
void sh_engine_convert_input(sh_engine *e, const ir_value *v, const sh_st *want);
int sh_engine_run(sh_engine *e);
void sh_engine_output(sh_engine *e, int i, const sh_st *want);
ir_graph *sh_engine_finish(sh_engine *e);
void sh_engine_free(sh_engine *e);

/* Pipeline parallelism (shard_stage.c): t (already partitioned over dp and
 * tp) cut into stage `stage` of its mesh's pp. -1 after reporting. */
int sh_cut_stages(pass_training *t, int stage, ir_diag *d);
/* A plain graph g (no backward: `tgc dump --after shard`) cut in place to
 * stage `stage`: the inputs and parameters it reads, its nodes with the
 * sends and receives, the outputs made on it. -1 after reporting. */
int sh_cut_graph_stage(ir_graph *g, int stage, ir_diag *d);

#endif
