/* passes/pass.h — the pass manager and every graph transformation (what
 * they read off a graph without changing it is analysis/analysis.h).
 * Passes are declared once in passes.def; each lives in one file with one
 * entry point `int pass_<name>(ir_graph *g, const pass_options *o)` returning
 * 0 on success or -1 after reporting through o->diag.
 */
#ifndef TGC_PASS_H
#define TGC_PASS_H

#include "analysis.h"
#include "ir.h"

/* The parameters' tensor-parallel layouts chosen by the shard pass's
 * search (shard_search.c, pass_tp_search below), by parameter class (names
 * equal but for their numeric parts, and types equal). */
typedef struct pass_tp_layouts pass_tp_layouts;

typedef struct {
  ir_diag *diag;          /* where passes report problems */
  bool verify_each;       /* run ir_verify after every pass; abort the pipeline on failure */
  bool time_passes;       /* print a timing table to time_out at the end */
  FILE *time_out;         /* default stderr */
  const char *dump_after; /* pass name, "all", or NULL: print the IR after it */
  FILE *dump_out;         /* where dumps go (default stdout) */
  int dump_format;        /* 0 text, 1 dot, 2 json */
  const char *checkpoint; /* checkpoint policy: none (NULL), block, selective, sqrt, budget=BYTES */
  const bool *disabled;   /* NULL, or PASS_COUNT flags: passes every pipeline run with these options skips
                           * (--disable-pass, --no-fuse; also reaches pass_build_training) */
  int zero;               /* the shard pass: ZeRO stage 0-3 (--zero) */
  double bucket_bytes;    /* the shard pass: the gradient buckets' size (--bucket-mb; 0: 25 MiB, DDP's) */
  bool tp_search;         /* the shard pass: the parameters' tp layouts by search (--tp-layout search), else
                           * Megatron-LM's rule (docs/sharding.md) */
  const pass_tp_layouts *tp_layouts; /* the shard pass: the parameters' tp layouts as given (pass_tp_search;
                                      * what tgc train and tgc plan use), else tp_search's or the rule's */
  bool verbose;           /* -v: passes say, as notes through diag, what they left undone and why
                           * (fuse-attention: every softmax it did not fuse) */
} pass_options;

/* ---- fuse_attention.c: the softmax nodes the pattern does not match ----
 * why: "softmax %p (line L) not fused: REASON", the reason naming the
 * operand that broke the pattern and its line; at: the node where it broke. */
typedef struct {
  const ir_node *softmax, *at;
  char why[512];
} pass_attention_miss;
/* The softmax nodes of g that fuse-attention would leave (after the pass:
 * those it left), in graph order: their count, the first max in out. */
int pass_attention_misses(const ir_graph *g, pass_attention_miss *out, int max);

/* ---- generation with a KV cache (kv_cache.c) ----
 * On the model after fuse-attention. pass_kv_prefill adds the outputs
 * "cache.k.L" / "cache.v.L" (attention L's k and v, L in graph order);
 * pass_kv_decode turns the model at T = 1 into one decode step: a new input
 * "pos" i32[1] (its index: *pos_input; named pos.1 when the model has a pos), the positions become it, inputs cache.k.L / cache.v.L of
 * `window` rows, the new row written at pos, attention over the cache with
 * qpos = pos, the updated caches as outputs of the same names (computed in
 * the inputs' buffers when those are donated). *n_layers: L's count. 0, or
 * -1 after reporting through d (an attention left unfused, or not a
 * causal one over one row). */
int pass_kv_prefill(ir_graph *g, int *n_layers, ir_diag *d);
int pass_kv_decode(ir_graph *g, int64_t window, int *n_layers, int *pos_input, ir_diag *d);
/* The heads dim of a KV cache tensor of type t named `name` (an input or
 * output "cache.k.L" / "cache.v.L" of those graphs, [.., Hkv, S, E]: rank
 * - 3, where the shard pass splits it over tp), or -1: not a cache, or one
 * of rank < 4 (no heads dim: kept whole on every rank). */
int pass_kv_cache_heads_dim(const char *name, const ir_type *t);

typedef enum {
#define PASS(id, name, fn, help) PASS_##id,
#include "passes.def"
#undef PASS
  PASS_COUNT
} pass_id;

typedef int (*pass_fn)(ir_graph *g, const pass_options *o);

const char *pass_name(pass_id p);
const char *pass_help(pass_id p);
int pass_lookup(const char *name);       /* -1 if unknown */

/* The pipeline `tgc run` and `tgc dump --after` use, in order. */
extern const pass_id pass_default_pipeline[];
extern const int pass_default_pipeline_len;

/* Runs the passes in order with o's dumping, verifying and timing.
 * Returns 0 or -1 (a pass failed or verification failed). */
int pass_run_pipeline(ir_graph *g, const pass_id *passes, int n, const pass_options *o);
/* Prints g as the pipeline's dumps do ("# IR after PASS", o->dump_format, o->dump_out). */
void pass_dump_graph(const ir_graph *g, const char *pass, const pass_options *o);

#define PASS(id, name, fn, help) int fn(ir_graph *g, const pass_options *o);
#include "passes.def"
#undef PASS

/* ---- autodiff (autodiff.c, vjp.c, jvp.c) ----
 * Reverse mode: appends to the end of g the backward graph of the rank-0
 * float value `loss` with respect to wrt[0..n); grads[i] receives d loss /
 * d wrt[i] (same type as wrt[i]; a zero constant if loss does not depend on
 * it). Every value it creates has role IR_ROLE_GRAD, is named after the
 * forward value it is the gradient of (d_z4), and carries the location (and
 * layer) of the forward node it differentiates. Returns 0, or -1 after
 * reporting (e.g. a dependency through a non-differentiable op) through d.
 * The `autodiff` pass expands every GRAD node of g with it. */
int pass_vjp(ir_graph *g, ir_value *loss, ir_value *const *wrt, int n, ir_value **grads, ir_diag *d);
/* Forward mode: tangents[i] (values of wrt[i]'s type) seed wrt[i]; appends
 * nodes computing the tangent of each of[j] into out[j] (role GRAD, named
 * t_<name>; a zero constant if of[j] does not depend on any wrt). */
int pass_jvp(ir_graph *g, ir_value *const *wrt, ir_value *const *tangents, int n, ir_value *const *of, int n_of,
             ir_value **out, ir_diag *d);

/* ---- derivative graphs (derivative.c): what `tgc grad` and `tgc gradcheck` run ----
 * pass_sum_all: the sum of every element of v (v itself when it is a
 * scalar), a reduce_sum named name at v's location. */
ir_value *pass_sum_all(ir_graph *g, ir_value *v, const char *name);
/* The trainer's count of correct predictions, built into g:
 * reduce_sum(cast(eq(argmax(logits), targets), f64)), or NULL when the
 * targets (i32 or i64, the logits' shape less the classes) do not fit the
 * logits. The training program adds it; the planner adds it to its graphs
 * (beside the cross-entropy), so both shard the same nodes. */
ir_value *pass_accuracy(ir_graph *g, ir_value *logits, ir_value *targets);
/* The default pipeline's passes up to and including autodiff, less
 * o->disabled: what is differentiated is the graph `tgc run` executes, fused
 * ops included. Autodiff is never left out (disabled, it runs alone). */
int pass_run_until_autodiff(ir_graph *g, const pass_options *o);
typedef struct {
  ir_value *const *outputs; /* float values of g, of one dtype */
  const double *weights;    /* NULL: one output; the loss is its sum (named sum_of). Else the loss is
                             * sum_k weights[k] * sum(outputs[k]) */
  int n_outputs;
  ir_value *const *wrt;     /* inputs and parameters of g */
  int n_wrt;
} pass_grad_request;
/* Reverse mode: appends the gradients of r's loss with respect to r->wrt as
 * outputs d_<name> after g's, then canonicalizes (always, with o's dump,
 * verify and timing settings) and verifies. 0, or -1 after reporting
 * through o->diag. */
int pass_append_gradients(ir_graph *g, const pass_grad_request *r, const pass_options *o);
/* Forward mode: a tangent input t_<name> for each wrt[k] (tangent_inputs[k]),
 * and the derivative of every float output of g along them as outputs
 * t_<output> after g's, in order; then as pass_append_gradients. */
int pass_append_tangents(ir_graph *g, ir_value *const *wrt, int n, ir_value **tangent_inputs, const pass_options *o);
/* gradcheck's graphs: the model in f64 (pass_retyped_copy); its loss is its
 * first output (summed when it is not a scalar: loss_summed). `loss` has the
 * model's inputs and parameters and one output, loss. `deriv` has the same
 * inputs and parameters, then one tangent input per checked value, and the
 * outputs loss, jvp (the derivative of the loss along the tangents) and the
 * gradient of each checked value. The checked values are every float input
 * and parameter, in order: leaf[k] is the index of value k among the
 * model's inputs followed by its parameters; tangent_input[k] and
 * grad_output[k] its tangent input and gradient output in deriv. 0, or -1
 * after reporting through d (a first output that is not floating-point, no
 * float value to check, a node that does not type-check in f64). */
typedef struct {
  ir_graph *loss, *deriv; /* owned */
  bool loss_summed;
  int n_checked;
  int *leaf, *tangent_input, *grad_output;
} pass_gradcheck;
int pass_build_gradcheck(const ir_graph *model, pass_gradcheck *c, ir_diag *d);
void pass_gradcheck_free(pass_gradcheck *c);

/* ---- fuse-elementwise's multi-tensor reductions (fuse_multi_tensor.c) ----
 * A left-leaning chain of scalar adds of count_nonfinite(x_k), or of
 * reduce_sum(square(cast f64 g_k)), becomes one count_nonfinite(x...) or
 * sum_squares(g...) (the same value; leaves after the first that does not
 * match stay added). Merged nodes are marked dead. 0, or -1 when out of memory. */
int pass_fuse_multi_tensor(ir_graph *g);
/* A count_nonfinite's operands that are float results of fused nodes are
 * counted by those nodes as they store them ({nonfinite = [r...]}: one more
 * result, i64[]), the count adding those (the same value). The replaced
 * nodes are marked dead. 0, or -1 when out of memory. */
int pass_fold_counts(ir_graph *g);

/* ---- optimizer (optimizer.c) ----
 * Training as IR. pass_build_update builds a separate UPDATE graph for the parameters of
 * `model` (same names, types and order in its g->params):
 *   inputs:  P gradients d_<p>; then the optimizer state, per parameter in
 *            order (momentum: mom.<p>; adam/adamw: m.<p>, v.<p>); then `lr`
 *            and `step` (f64 scalars; step counts from 1);
 *   outputs: P new parameters new.<p>, then the new states in input order
 *            (new.m.<p>, ...).
 * Every update rule is written in IR ops (see optimizer.c for the exact
 * formulas, mirrored by the reference in tests/unit/test_optimizer.c), in
 * each parameter's dtype; clipping computes the global norm in f64.
 * Graph inputs must have role input (the verifier's rule), so gradients and
 * states are told apart by position; their new values carry roles grad /
 * opt_state. Returns NULL after reporting through d. */
typedef struct {
  pass_optimizer_kind kind;
  double momentum;      /* momentum: v = mu v + g (mu, default 0.9) */
  double beta1, beta2;  /* adam/adamw moment decay (0.9, 0.999) */
  double eps;           /* adam/adamw denominator guard (1e-8) */
  double weight_decay;  /* adamw: decoupled p -= lr wd p; others: L2, g += wd p; 0 = none */
  double clip_norm;     /* global-norm clipping threshold; <= 0: no clipping */
} pass_optimizer;
/* The defaults above for kind. */
pass_optimizer pass_optimizer_defaults(pass_optimizer_kind kind);
int pass_optimizer_state_count(pass_optimizer_kind kind);      /* state tensors per parameter: 0, 1 or 2 */
ir_graph *pass_build_update(const ir_graph *model, const pass_optimizer *opt, ir_diag *d);
/* The FLOPs of one optimizer step of model's parameters (the cost model's
 * count of its update graph, every phase). 0, or -1 after reporting. */
int pass_update_flops(const ir_graph *model, pass_optimizer_kind kind, double *flops, ir_diag *d);
/* pass_build_update plus what a training program needs (training.c):
 * gradients divided by micro_batches first (when > 1); inputs loss_sum
 * (when loss) and correct_sum (when accuracy) after step; outputs after the
 * states: loss = loss_sum / K, accuracy = correct_sum / (positions K) and
 * nonfinite (i64: Inf / NaN elements of the new parameters). With
 * skip_overflow (dynamic loss scaling) one more output, overflow (i64: Inf
 * / NaN elements of the gradients), and while it is not 0 every new
 * parameter and state is its old value: the step is skipped. grad_dtype
 * (NULL: the parameters' dtypes) is each gradient input's dtype: one
 * narrower than its parameter's (mixed precision's bf16 / f16 gradients)
 * is widened where the update reads it, so the fused update reads it as
 * it is and no pass of its own writes a wide copy. copy_dtype (NULL: none)
 * names, per parameter, a narrower dtype in which the update also outputs
 * the new parameter (cast: one more result of its fused update), after
 * every other output, in parameter order: the step's next copy. */
ir_graph *pass_build_update_for_training(const ir_graph *model, const pass_optimizer *opt, int micro_batches,
                                         bool loss, bool accuracy, double positions, bool skip_overflow,
                                         const ir_dtype *grad_dtype, const ir_dtype *copy_dtype, ir_diag *d);

/* ---- mixed precision (mixed_precision.c) ----
 * Makes a model compute in dt (bf16 or f16) with its parameters and float
 * inputs kept in their dtype (f32 master weights) and read through one
 * cast each; cross_entropy reads f32 logits (autocast's rule). Run before
 * autodiff: each parameter's gradient comes back through its cast, in f32.
 * 0, or -1 after reporting through d. */
int pass_mixed_precision(ir_graph *g, ir_dtype dt, ir_diag *d);

/* ---- training programs (training.c) ----
 * The one builder of what training runs, used by `tgc train` (and, bare,
 * by the tests): a STEP graph (forward + backward of one micro-batch) and
 * an UPDATE graph (the optimizer), with every input and output bound by its
 * role here, by index: no runtime matches names.
 *   step:   inputs  [0, n_data)       the model's inputs (the data)
 *                   acc_input0 + i    (K > 1) parameter i's gradient sum so far
 *                   loss_sum_input    f64: the loss summed over the micro-batches so far
 *                   correct_sum_input f64 (accuracy only): correct predictions so far
 *           params  the model's
 *                   loss_scale_input  f32 (loss scaling only): the loss scale
 *           outputs grad_output[i]    parameter i's gradient (K = 1) or the new sum (K > 1)
 *                   loss_sum_output, correct_sum_output: the new sums
 *   update: pass_build_update_for_training's layout: inputs gradients [0, np),
 *           states [np, np + ns), lr, step, loss_sum, correct_sum (accuracy
 *           only); outputs new params [0, np), new states [np, np + ns),
 *           loss, accuracy (if any), nonfinite, overflow (loss scaling only).
 * Mixed precision (compute_dtype bf16 or f16, mixed_precision set): the
 * model computes in that dtype (pass_mixed_precision) with the parameters,
 * their gradients, the sums, the optimizer states and the update in f32.
 * With loss_scaling (what f16 needs: its range is narrow) the backward
 * pass differentiates loss * loss_scale; each gradient is divided by the
 * scale before it is summed, so the update sees true gradients, and an
 * update whose gradients overflowed is skipped (the runtime halves the
 * scale; rt_trainer's dynamic loss scaling).
 * Sums start from -0.0 (x + -0.0 = x for every x, -0.0 included), so one
 * micro-batch's values come through bit for bit. Token accuracy is counted
 * when the model has an output named "logits" [..., V] and targets_input
 * names an integer input of the logits' leading shape: correct =
 * sum(argmax(logits) == targets) in f64. */
typedef struct {
  pass_optimizer opt;
  int micro_batches;      /* K >= 1 */
  int targets_input;      /* the model input of the targets (-1: no accuracy) */
  int schedule;           /* pipeline parallelism: PASS_SCHED_GPIPE (0), PASS_SCHED_1F1B or PASS_SCHED_INTERLEAVED */
  int chunks;             /* PASS_SCHED_INTERLEAVED: v chunks (virtual stages) per rank; else 1 (0 means 1) */
  const int *stage_boundaries; /* NULL (the even split), or pp * v - 1 ascending layer indices: the first
                                * layer of every (virtual) stage after the first (copied) */
  int n_stage_boundaries;
  const int *batch_dims;  /* NULL (dim 0), or per model input: the dim its batch is (the shard
                           * pass splits it over dp), -1 for an input that is not data */
  const pass_options *passes; /* the pipeline's settings (diag, dump, checkpoint, disabled passes) */
  bool mixed_precision;   /* compute in compute_dtype (bf16 or f16), parameters and update in f32 */
  ir_dtype compute_dtype;
  bool loss_scaling;      /* the loss scale input and the skipped overflowing updates (f16) */
  bool eval;              /* also the eval graph (pass_training.eval) */
  bool no_cast_fold;      /* tests: mixed precision's casts left in the step (f32 gradient outputs, each
                           * parameter cast where the step reads it), to compare the fold with */
} pass_train_options;
/* dropout.c: gives every dropout of g in its inference form (x) {p} its
 * training form (ops.def): an i64[] input "dropout_key" appended to g's
 * inputs (its index is returned; -1, and nothing changed, when g has no
 * dropout), its stream and its positions. Called by the training builders
 * before autodiff. */
int pass_key_dropout(ir_graph *g);
/* The bytes of the masks of g's dropouts (training form) at 1 byte an
 * element, each dropout once (its backward's shares its stream), and their
 * count: what the literature counts as kept for the backward (Korthikanti
 * et al. 2022) and tgc does not keep (the backward draws each mask again). */
int64_t pass_dropout_mask_bytes(const ir_graph *g, int *n_dropouts);
/* Builds both graphs from model (consumed: it becomes the step graph; freed
 * on failure). NULL after reporting through o->passes->diag. */
pass_training *pass_build_train(ir_graph *model, const pass_train_options *o);
void pass_training_free(pass_training *t);

/* ---- sharding (shard.c, shard_rules.c, shard_train.c; docs/sharding.md) ----
 * pass_shard (the pass `shard`) partitions g over g->mesh's dp and tp axes:
 * data inputs split along their batch (dim 0), parameters placed by the
 * rules (tp: Megatron-LM's column / row split) and o->zero, every value
 * given a layout (ir_value.shard) and its type made what one rank holds,
 * collectives inserted where layouts change. A no-op on a one-device mesh.
 * pass_shard_training does the same to a training program, keeping step and
 * update consistent: gradients handed over as partial sums (reduced in the
 * update) or, ZeRO 2-3, reduce-scattered; optimizer state sharded from
 * ZeRO 1; parameters from ZeRO 3 (shard_train.c). Both report through
 * o->diag and return -1 (a batch that does not divide by dp, ...). */
int pass_shard(ir_graph *g, const pass_options *o);
/* Whether op has a sharding rule (every op but grad, the communication ops
 * and mesh_slice, which the pass refuses: test_shard loops over ops.def). */
bool pass_shard_has_rule(ir_op op);
int pass_shard_training(pass_training *t, const pass_options *o);
/* The padding of v, a value of a sharded graph on mesh m (a vocabulary tp
 * does not divide, padded to the next multiple of tp: docs/sharding.md), in
 * words ("%wte f32[63, 32]: dim 0 (63) padded to 64 over tp = 2, 32 per
 * rank"); false (buf "") when v has none. */
bool pass_shard_padding_str(const ir_value *v, const ir_mesh *m, char *buf, size_t n);
/* A pipeline's hand-over (shard_stage.c; the planner's pass_plan_handed_in
 * applies the same rule): of the values forward nodes (forward: per node
 * index) make that the backward reads (saved: per value id), those the
 * backward makes again rather than being handed per micro-batch in flight
 * (again, per value id: set where saved): made from parameters and
 * constants alone (the same in every micro-batch), or a layout (no FLOPs:
 * a transpose) of a value it reads anyway. */
void pass_pipe_remade(const ir_graph *g, const bool *forward, const bool *saved, bool *again);

/* ---- the training graph analyses read (training.c) ----
 * pass_build_training_graph turns model g into its training graph in place,
 * as `tgc stats` and `tgc plan` cost it:
 *  - the gradients: as `tgc train` takes them, the loss is the output named
 *    "loss", else the first (a float scalar), differentiated by a GRAD node
 *    with respect to every parameter, and the outputs become loss and
 *    d_<param> in g->params order (a training step returns no logits:
 *    fuse-lm-head may then fuse the head with its loss). any_model
 *    (stats: any model is costed) relaxes that: a loss that is not a scalar
 *    is summed (stats_loss), a model without parameters is differentiated by
 *    its float inputs, the gradients d_<name> follow the model's outputs (less "logits"), and
 *    a model that asks for gradients itself (a grad node) or is a training
 *    graph already (an .ir file with grad values) gets no more;
 *  - the default pipeline (less o->passes->disabled) in two parts: the
 *    passes before checkpoint; then, with dtype >= 0, every float value is
 *    retyped to dtype (pass_retype_floats: costing only); with measure the
 *    memory plan is measured (mem_none) and, when fuse-attention fused
 *    something, that of the same graph without it (mem_unfused); then the
 *    rest, with o->passes->checkpoint.
 * 0, or -1 after reporting through o->passes->diag. info's loss_name is
 * malloc'd (pass_train_graph_info_free).
 * pass_build_training(g, o) is the plain form: as `tgc train`, model dtype. */
typedef struct {
  const pass_options *passes; /* diag, dumps, verify, timing, checkpoint policy, disabled passes, zero */
  bool any_model;
  int dtype;                  /* -1: the model's own; else an ir_dtype */
  bool measure;
} pass_train_graph_options;
typedef struct {
  char *loss_name;            /* the output differentiated; NULL for a training graph already */
  bool loss_summed;           /* not a scalar: its sum is differentiated */
  int n_wrt;                  /* values differentiated by (-1: a training graph already) */
  bool wrt_inputs;            /* no parameters: the float inputs */
  pass_mem_report mem_none;   /* with measure: before checkpointing */
  pass_mem_report mem_unfused; /* with measure and have_unfused: before checkpointing, without fuse-attention */
  bool have_unfused;
} pass_train_graph_info;
int pass_build_training_graph(ir_graph *g, const pass_train_graph_options *o, pass_train_graph_info *info);
void pass_train_graph_info_free(pass_train_graph_info *info);
int pass_build_training(ir_graph *g, const pass_options *o);

/* Checkpoint pass (checkpoint.c): see the top of checkpoint.c for the
 * policies. Recompute clones have role recompute (phase recompute), so the
 * recompute FLOPs of a graph are pass_graph_cost_of(g).flops[PASS_PHASE_RECOMPUTE];
 * with --time-passes the pass also prints a summary line.
 *
 * The exact budget solver for a chain of blocks (dynamic programming).
 * A plan gives each block a kind: PASS_CK_STORE (its activations kept),
 * PASS_CK_START (recomputed in a segment that starts here: its input is
 * kept, a checkpoint) or PASS_CK_CONT (recomputed in the same segment as
 * block i-1). The model, in bytes: base (always kept) + act of every stored
 * block + at each cut after block i-1 (and after the last block):
 *   out of block i-1        when block i-1 is recomputed and block i is not
 *                           CONT (or the chain ends), or block i is START;
 *   out_saved of block i-1  when block i-1 is stored and block i is stored
 *                           (or the chain ends);
 * + the largest recomputed segment's act + out_saved of its inner cuts.
 * Cost = flops of the recomputed blocks. Writes the cheapest plan whose
 * memory fits in budget into plan[0..n) (ties: less memory), its memory and
 * cost, and returns 0; when none fits writes a plan of least memory and
 * returns 1; -1: out of memory. */
typedef struct {
  double act;       /* bytes of its values the backward reads, except those it hands on */
  double out;       /* bytes of the values it hands on (to the next block or after the chain) */
  double out_saved; /* of those, the bytes the backward reads too */
  double flops;     /* its forward FLOPs */
} pass_ck_block;
enum { PASS_CK_STORE, PASS_CK_START, PASS_CK_CONT };
int pass_checkpoint_solve_chain(int n, const pass_ck_block *b, double base, double budget, int *plan, double *mem,
                                double *cost);
/* Memory and cost of a plan under the same model; memory -1 if the plan is
 * malformed (CONT at block 0 or after a stored block, or an unknown kind). */
void pass_checkpoint_plan_cost(int n, const pass_ck_block *b, double base, const int *plan, double *mem, double *cost);

/* ---- retype.c ----
 * Every float value of g (and every cast to a float dtype) becomes dt: the
 * graph as if written in dt, for costing and measuring only (never run). */
void pass_retype_floats(ir_graph *g, ir_dtype dt);
/* A copy of g with every float dtype dt (values, cast targets, the given
 * types of constants), every result type inferred again; names, roles,
 * locations and layers kept. NULL after reporting "converting to DT: ..."
 * at a node that does not type-check in dt. */
ir_graph *pass_retyped_copy(const ir_graph *g, ir_dtype dt, ir_diag *d);


/* ---- the parameters' tp layouts by search (shard_search.c) ----
 * pass_tp_search chooses every parameter class's layout on a tensor-
 * parallel group of tp devices (sp: with sequence parallelism) by the
 * search docs/sharding.md describes, each candidate costed on g sharded so
 * (data inputs placed as the runtime places them, every gradient output
 * converted to its parameter's layout, as the update receives it) by the
 * modelled time of one rank's program. g: a training graph as the shard
 * pass sees it (pass_build_training_graph, the passes after the shard pass
 * disabled), possibly compiled with fewer layers than the model has
 * (fe_options.max_layers): layers is the model's count; g's middle layers
 * (all but its first and last) then stand for the model's middle ones, their
 * cost weighted so. tgc plan and tgc train search the same graph
 * (tool_tp_search_graph), so they choose alike. report: NULL, or where to
 * print each class's layout and runner-up. NULL after reporting through d
 * when even every parameter replicated does not shard. */
pass_tp_layouts *pass_tp_search(ir_graph *g, int tp, bool sp, int layers, FILE *report, ir_diag *d);
void pass_tp_layouts_free(pass_tp_layouts *l);
/* The size of the tp axis and sp the layouts were chosen for. */
int pass_tp_layouts_tp(const pass_tp_layouts *l);
bool pass_tp_layouts_sp(const pass_tp_layouts *l);
/* One rank's step of g on a tensor-parallel group of t alone (sp as asked;
 * g's mesh set for the run and restored), placed as the runtime places a
 * training step: every parameter as lay chose (NULL: Megatron-LM's rule),
 * data inputs as the shard pass places them. What the planner reads its
 * profile off (plan/plan_tp.c). NULL after reporting through d. */
ir_graph *pass_shard_tp_graph(ir_graph *g, int t, bool sp, const pass_tp_layouts *lay, ir_diag *d);
/* An attention of g whose heads t does not divide (the shard pass refuses
 * such a tp), or NULL. */
const ir_node *pass_tp_heads_conflict(const ir_graph *g, int t);

#endif
