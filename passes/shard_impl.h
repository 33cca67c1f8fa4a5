/* passes/shard_impl.h — private to the shard pass (shard.c, the engine;
 * shard_rules.c, the per-op rules; shard_vocab.c, the sub-graphs of the
 * vocabulary-parallel ops).
 *
 * The pass decides a layout for every value one mesh axis at a time. On one
 * axis a value is replicated (R), split along one dim (S d) or a partial sum
 * (P); UNSET is an input or parameter no rule has placed yet (the first rule
 * that reads it places it, as the planner's rules do). A rule sees the
 * states of a node's operands on one axis and says which state each operand
 * must be in (the engine converts: R -> S d is mesh_slice, P -> R
 * all_reduce, P -> S d reduce_scatter, S d -> R all_gather, S d -> S e
 * all_to_all, R -> P the value on the axis' first rank and 0 elsewhere) and which state each result is in; it may also ask for a
 * rescaling (a mean over a split dim) or a max over the axis, or replace
 * the node by a sub-graph of existing ops (sh_dec.expand, below).
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

typedef struct sh_engine sh_engine;
typedef struct sh_x sh_x;
/* An expansion: builds, from x->in, the sub-graph that replaces x->node on
 * one rank and returns its results in res (x->node->n_out of them, of the
 * types x->out). */
typedef void (*sh_expand)(const sh_x *x, ir_value **res);

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
  int readers;                 /* how many nodes read result 0 */
  bool sum_continues;          /* result 0 is read by one add or sub and nothing else (not an output) */
  bool slice_counts;           /* count_nonfinite of a replicated operand is partial (sh_engine_slice_counts) */
  uint32_t in_other[SH_MAX_ARGS]; /* operand i: the dims other axes split now (bit k: dim k) */
  double in_pad_value[SH_MAX_ARGS]; /* what operand i's padding holds in every padded element (shard.c
                                    * padding_value): 0 when it has none, NaN when not known */
  int parts_hint;              /* matmul on tp: > 1 when result 0's last dim is later split in that many
                                * equal parts (a fused q, k, v projection): a column-parallel weight is
                                * then placed in parts */
  /* rescalings, all by 1 / size: */
  bool scale_results;          /* every float result (a mean over a split dim) */
  int scale_operand;           /* >= 0: that operand, before the op (cross_entropy_grad's g) */
  bool max_results;            /* result 0 is a local max: all_reduce(max) over the axis */
  bool first_only;             /* result 0 is kept on the axis' first rank, 0 on the others (a partial sum) */
  bool reduce_results;         /* result 0, a partial sum, is reduced at once (Megatron-LM's all-reduce
                                * after the vocabulary-parallel embedding and of the LM head's input
                                * gradient), not where its readers need it: a partial sum kept along the
                                * residual stream would be reduced once per reader and phase. With sp a
                                * reduce-scatter along the sequence (dim 1) when it divides. */
  /* The hook for an op whose split needs more than the op on local operands
   * (Megatron-LM's vocabulary-parallel embedding and cross-entropy: a rank
   * needs its block's offset, masks, all-reduces of row statistics). When a
   * rule sets it, the engine converts the operands as the rule says, then
   * calls expand instead of rebuilding the node; the rescalings and maxima
   * of the other axes follow the sub-graph's results as they follow a node.
   * At most one axis of a node expands it (an internal error otherwise). */
  sh_expand expand;
} sh_dec;

typedef void (*sh_rule)(sh_dec *d);
/* The rule of op (shard_rules.c); test_shard loops over every op. */
sh_rule sh_rule_of(ir_op op);
/* Whether dim d of operand i can be split once more on d->axis (in k parts). */
bool sh_can_split(const sh_dec *d, int i, int dim);
bool sh_can_split_parts(const sh_dec *d, int i, int dim, int k);
/* Whether operand i is split on d->axis along a dim that does not divide by
 * it: padded to a multiple of the axis (a padded vocabulary, placed so by
 * shard_train.c; the rules never split a dim that does not divide, they
 * follow such a split or gather it). */
bool sh_padded(const sh_dec *d, int i);

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
sh_engine *sh_engine_new(const ir_graph *src, ir_diag *d, bool megatron);
void sh_engine_place(sh_engine *e, const ir_value *v, int axis, sh_st s);
sh_st sh_engine_layout(const sh_engine *e, const ir_value *v, int axis);
/* Input v (placed) converted to want at the start of the graph: every
 * reader sees the converted value. */
void sh_engine_convert_input(sh_engine *e, const ir_value *v, const sh_st *want);
/* On axis, count_nonfinite of a replicated operand is a partial count (each
 * rank counts its block, or the first rank counts it all): a sum of counts
 * over split and replicated tensors is then reduced once, not once for each
 * split tensor meeting the replicated total. */
void sh_engine_slice_counts(sh_engine *e, int axis);
int sh_engine_run(sh_engine *e);
void sh_engine_output(sh_engine *e, int i, const sh_st *want);
ir_graph *sh_engine_finish(sh_engine *e);
void sh_engine_free(sh_engine *e);
/* Megatron-LM's placement of a graph's inputs on tp (shard_train.c): every
 * input a data input split along dim 0 over dp (sequence parallelism:
 * along dim 1 on tp, ids and targets whole), a vocabulary table split by
 * rows; the rules place the rest. -1 after reporting. */
int sh_place_megatron(sh_engine *e, const ir_graph *g, ir_diag *d);
/* Only the data inputs placed as sh_place_megatron places them. */
int sh_place_data(sh_engine *e, const ir_graph *g, ir_diag *d);
/* The vocabulary dim of parameter p on a tp of that size (shard_train.c):
 * 0 for a table [V, D] that embedding reads at data ids, 1 for an untied
 * LM head [D, V] (V not divisible by tp) whose product cross_entropy reads;
 * -1 for any other parameter. A split there is padded when tp does not
 * divide V (docs/sharding.md). */
int sh_vocab_dim(const ir_graph *g, const ir_value *p, int tp);
/* An attention of g whose heads tp does not divide (the runtime refuses
 * it: check_heads), or NULL. */
const ir_node *sh_heads_conflict(const ir_graph *g, int tp);

/* ---- expansions (the hook sh_dec.expand; built in shard.c) ----
 * What an expansion sees: the node it replaces, the axis that asked for
 * it, the operands as one rank holds them (converted to the rule's layouts
 * on every axis) and the result types one rank must get. It builds with the
 * sh_x_* helpers, which add nodes to the new graph at the node's place
 * (location, layer; the role of its first result: phase of the conversions
 * and of the pipeline cut). */
struct sh_x {
  sh_engine *e;
  const ir_node *node;
  int axis, size;         /* the axis that expands (IR_AXIS_*), its size */
  ir_value *const *in;    /* the local operands */
  const ir_type *out;     /* the local result types */
  const ir_shard *layout; /* the results' layouts */
  const char *const *names; /* the results' names */
  ir_loc loc;
};
/* op on in (types inferred; a type error is an internal error), named name
 * (".SUFFIX" or NULL: after the node's first result, RESULT.SUFFIX or RESULT.OP),
 * in layout shard. */
ir_value *sh_x_op(const sh_x *x, ir_op op, ir_value *const *in, int n, const ir_attr *at, int na, const char *name,
                  ir_shard shard);
/* A scalar constant of dtype dt. */
ir_value *sh_x_const(const sh_x *x, ir_dtype dt, double value);
/* all_reduce (reduce "sum" or "max") of v over x->axis; the result in layout shard. */
ir_value *sh_x_all_reduce(const sh_x *x, ir_value *v, const char *reduce, ir_shard shard);
/* This rank's block of the ids 0 .. whole - 1 (dtype dt) along x->axis:
 * mesh_slice of an iota, [whole / size]; its first element is the offset of
 * the rank's block. */
ir_value *sh_x_block_ids(const sh_x *x, int64_t whole, ir_dtype dt);
/* A value an expansion keeps for a later one (the cross-entropy's row max
 * and sum of exponentials for its gradient): slot k of src value key. */
void sh_x_keep(const sh_x *x, const ir_value *key, int slot, ir_value *v);
ir_value *sh_x_kept(const sh_x *x, const ir_value *key, int slot);

/* The expansions (shard_vocab.c): on an axis that splits the table's rows
 * (embedding, embedding_grad) or the classes (cross_entropy,
 * cross_entropy_grad, argmax along the split dim). */
void sh_vocab_embedding(const sh_x *x, ir_value **res);
void sh_vocab_embedding_grad(const sh_x *x, ir_value **res);
void sh_vocab_cross_entropy(const sh_x *x, ir_value **res);
void sh_vocab_cross_entropy_grad(const sh_x *x, ir_value **res);
void sh_vocab_argmax(const sh_x *x, ir_value **res);

/* ---- search (shard_search.c) ----
 * The tp layout of every parameter, chosen by evaluating candidate layouts
 * (the file's head says how). An evaluation shards the caller's program
 * with the parameters' tp layouts tp (g->params order) and measures it:
 * 0 with *cost set, or -1 when that layout cannot be sharded (nothing
 * reported). */
typedef struct {
  double heavy;   /* FLOPs per device of GEMM-like ops */
  double weights; /* bytes per device of the parameters GEMM-like ops read (set by the search) */
  double seconds; /* the rank's program, modelled (collectives + roofline of the rest) */
  double comm;    /* bytes one rank sends */
} sh_cost;
typedef int (*sh_search_eval)(void *ctx, const sh_st *tp, sh_cost *cost);
typedef struct sh_search_report sh_search_report;
/* The cost of one rank's program g (sharded). */
sh_cost sh_graph_cost(const ir_graph *g);
/* The same with node costs weighted by their layer: w[layer] (nodes of
 * layer >= nw, and outside the layers, weight 1). */
sh_cost sh_graph_cost_weighted(const ir_graph *g, const double *w, int nw);
/* g sharded on tp = t alone (sp as asked; g's mesh set for the run and
 * restored): data inputs placed as sh_place_data, the parameters at lay
 * (NULL: Megatron-LM's rule, sh_place_megatron); the gradients converted
 * to their parameters' layouts when grads_placed (what a search evaluates:
 * the update receives them so), else as the step hands them over. NULL
 * after reporting through d. */
ir_graph *sh_shard_tp(ir_graph *g, int t, bool sp, const sh_st *lay, bool grads_placed, ir_diag *d);
/* The same under Megatron-LM's rule, each parameter's layout the rules gave in found. */
ir_graph *sh_shard_tp_found(ir_graph *g, int t, bool sp, sh_st *found, ir_diag *d);
/* p's layout in l (its class: name but for numeric parts, and type): 0, or
 * -1 when l has none. */
int sh_tp_layouts_find(const pass_tp_layouts *l, const ir_value *p, sh_st *out);
/* tp[i] for every parameter of g; *report (may be NULL) for printing. -1
 * when even every parameter replicated fails (eval reported nothing: the
 * caller runs it to report). */
int sh_search_tp(const ir_graph *g, sh_search_eval eval, void *ctx, const sh_st *start, sh_st *tp,
                 sh_search_report **report, ir_diag *d);
void sh_search_print(FILE *out, const sh_search_report *r);
void sh_search_report_free(sh_search_report *r);
/* The part counts (2..127, at most cap of them) the graph later splits a
 * product's last dim into (its columns read through a bias and activations
 * by a split into equal parts: a fused q, k, v projection). */
int sh_part_counts(const ir_graph *g, int *out, int cap);

/* Pipeline parallelism (shard_stage.c): t (already partitioned over dp and
 * tp) cut into stage `stage` of its mesh's pp. -1 after reporting. */
int sh_cut_stages(pass_training *t, int stage, ir_diag *d);
/* t->eval cut to the stage as the step was (after sh_cut_stages); its
 * outputs all-reduced over pp. 0, or -1 after reporting. */
int sh_cut_eval_stage(pass_training *t, int stage, ir_diag *d);
/* A plain graph g (no backward: `tgc dump --after shard`) cut in place to
 * stage `stage`: the inputs and parameters it reads, its nodes with the
 * sends and receives, the outputs made on it. -1 after reporting. */
int sh_cut_graph_stage(ir_graph *g, int stage, ir_diag *d);

#endif
