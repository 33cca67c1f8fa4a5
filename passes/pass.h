/* passes/pass.h — the pass manager and every graph transformation.
 * Passes are declared once in passes.def; each lives in one file with one
 * entry point `int pass_<name>(ir_graph *g, const pass_options *o)` returning
 * 0 on success or -1 after reporting through o->diag.
 */
#ifndef TGC_PASS_H
#define TGC_PASS_H

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

/* ---- fuse-transpose's bias gradients (fuse_transpose.c) ----
 * The product a bias gradient folds into: node r of g is a reduce_sum of X
 * over every axis but the last (keepdims 0), and the first live node after
 * it that reads X (or a reshape of X to [rows, N]) as operand 1 of a 2-D
 * matmul with transpose_a (dW = A^T X: the weight gradient) comes before
 * any reader of r's result, which some node reads later or is a graph
 * output. Returns that matmul's index in g->nodes, else -1. fuse-transpose
 * marks such a reduce_sum {in_product = 1}; the lowering computes it in the
 * product's epilogue (cuBLASLt's bias gradient of B) and the cost model
 * counts only its result written. */
int pass_bias_grad_product(const ir_graph *g, int r);
/* The same for node r a cross_entropy: the cross_entropy_grad of its logits
 * and targets after it (before any reader of the loss), else -1; marked
 * {with_grad = 1}: its kernel computes the loss too, the logits read once. */
int pass_cross_entropy_grad_of(const ir_graph *g, int r);

/* linear_cross_entropy's chunking as its device lowering lays out the
 * op's [C, V] chunk buffer (codegen/emit_nn.c), and as the cost model
 * counts it: rows *ld elements apart, V rounded up to 64 (16-byte aligned
 * rows for cuBLASLt's fast kernels, whatever V), so a chunk holds the rows
 * that fit C x V elements (a multiple of 8 from 8 up); returns them.
 * ld = V and C rows when V is a multiple of 64. (fuse_lm_head.c) */
int64_t pass_linear_ce_chunk_rows(int64_t C, int64_t V, int64_t *ld);
/* The vocabulary columns its device products take in one piece: V rounded
 * down to a multiple of 8, the rest (1 to 7 columns) in a second, small
 * product each. cuBLASLt ran the LM head's three products at about 140
 * TFLOP/s with V = 50,257 on an H200 and at about 3 times that with
 * V = 50,264 (the other dims and the leading dimensions unchanged). V when
 * V is a multiple of 8 or below 8. (fuse_lm_head.c) */
int64_t pass_linear_ce_main_cols(int64_t V);

/* ---- analyses (memplan.c, cost.c) ----
 * The arena a backend allocates to run g: pass_memplan(g, NULL)->arena_bytes. */
size_t pass_predict_peak_bytes(const ir_graph *g);

typedef struct {
  double flops;  /* floating-point operations (a multiply-add counts 2) */
  double bytes;  /* bytes read (each operand once) + bytes written (each result once) */
  double comm;   /* communication ops: bytes one rank sends over its mesh axis (pass_comm_bytes) */
} pass_cost;
pass_cost pass_node_cost(const ir_node *n);
/* Bytes one rank of a group of n sends for a communication op whose
 * operand is `bytes` bytes, by the ring algorithms of the comm layer
 * (docs/comm.md): all_reduce 2(n-1)/n of the buffer (a reduce-scatter and
 * an all-gather), reduce_scatter and all_to_all (n-1)/n of the operand,
 * all_gather (n-1) x the operand (= (n-1)/n of the result), comm_broadcast
 * the buffer, send the buffer, recv nothing; 0 when n = 1 and for every
 * other op. Divisible sizes; docs/comm.md gives the uneven case. */
double pass_comm_bytes(ir_op op, int64_t n, double bytes);
/* What the rank at coord (coordinates by ir_axis) of g's mesh sends and
 * receives in one run of g, by communication op and mesh axis: calls and
 * payload bytes by the comm layer's ring algorithms, exact for any count
 * (chunk j of an all-reduce of c elements over n ranks holds c/n + (j < c%n);
 * docs/comm.md). The prediction every rank's counters must equal. */
typedef struct {
  int64_t calls, sent, received;
} pass_comm_tally;
void pass_comm_tally_of(const ir_graph *g, const int *coord, pass_comm_tally tally[IR_NUM_OPS][IR_NUM_AXES]);

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
typedef enum { PASS_OPT_SGD, PASS_OPT_MOMENTUM, PASS_OPT_ADAM, PASS_OPT_ADAMW, PASS_OPT_COUNT } pass_optimizer_kind;
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
const char *pass_optimizer_name(pass_optimizer_kind kind);    /* "sgd" "momentum" "adam" "adamw" */
int pass_optimizer_from_name(const char *name);                /* -1 if unknown */
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
 * parameter and state is its old value: the step is skipped. */
ir_graph *pass_build_update_for_training(const ir_graph *model, const pass_optimizer *opt, int micro_batches,
                                         bool loss, bool accuracy, double positions, bool skip_overflow, ir_diag *d);

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
} pass_train_options;
typedef struct {
  ir_graph *step, *update;   /* owned */
  int micro_batches;
  int n_params, n_states;    /* states: n_params * pass_optimizer_state_count */
  int n_data, acc_input0, loss_sum_input, correct_sum_input;
  int *grad_output;          /* n_params */
  int loss_sum_output, correct_sum_output;
  int lr_input, step_input, update_loss_sum_input, update_correct_sum_input;
  int loss_output, accuracy_output, nonfinite_output;
  int loss_scale_input, overflow_output; /* -1 without loss scaling */
  int dropout_key_input;     /* step: the i64[] key of its dropouts (pass_key_dropout), -1 without dropout */
  bool accuracy;
  int64_t positions;         /* targets per micro-batch */
  int batch_dim[64];         /* per data input: its batch dim (pass_train_options.batch_dims), -1 none */
  /* pipeline parallelism (mesh pp > 1; shard_stage.c): this rank's stage
   * (step and update hold its parameters only) with the step cut in two
   * that the trainer runs micro-batch by micro-batch in the schedule's order:
   *   fwd: inputs and params as the step's; outputs the loss and correct
   *        sums (fwd_loss_sum_output, fwd_correct_sum_output; -1 none), then
   *        n_saved values from fwd_saved0 on: what bwd reads of fwd;
   *   bwd: inputs the step's, then those n_saved from bwd_saved0 on; params
   *        the step's; outputs the gradients (bwd_grad_output[param]).
   * NULL without pp. With v chunks per rank (n_chunks, interleaved 1F1B),
   * these are chunk 0's (virtual stage `stage`) and chunk[c] holds chunk c's
   * (virtual stage c * n_stages + stage), chunk[0] aliasing the fields here;
   * every chunk's fwd and bwd have the step's inputs and parameters (the
   * rank's), and a chunk's bwd_grad_output[param] is -1 where it makes no
   * part of that gradient (the trainer then leaves that sum alone). */
  ir_graph *fwd, *bwd;
  int n_saved, fwd_saved0, bwd_saved0;
  int fwd_loss_sum_output, fwd_correct_sum_output;
  int *bwd_grad_output;
  /* evaluation (pass_train_options.eval): the model's forward alone, no
   * gradient, no update: inputs the step's data inputs [0, n_data), params
   * the step's (the same types and layouts on every rank: the trainer runs
   * it on the step's parameter buffers); outputs eval_loss_output (f64: the
   * loss) and eval_correct_output (f64: correct predictions, -1 without
   * accuracy), both whole on every rank (a dp partial sum all-reduced).
   * NULL without eval; refused with pipeline parallelism. */
  ir_graph *eval;
  int eval_loss_output, eval_correct_output;
  int stage, n_stages;      /* this rank's stage of n_stages (n_stages 1: no pipeline) */
  int schedule;             /* pass_schedule: PASS_SCHED_GPIPE, PASS_SCHED_1F1B or PASS_SCHED_INTERLEAVED */
  int n_chunks;             /* chunks (virtual stages) per rank: v of interleaved, else 1 */
  struct pass_pipe_chunk *chunk; /* n_chunks (pipelined), else NULL */
  int *stage_boundaries;    /* pass_train_options.stage_boundaries (owned), NULL: the even split */
  int n_stage_boundaries;
} pass_training;
/* One chunk's halves (pass_training.chunk; the fields as pass_training's). */
typedef struct pass_pipe_chunk {
  ir_graph *fwd, *bwd;
  int n_saved, fwd_saved0, bwd_saved0;
  int fwd_loss_sum_output, fwd_correct_sum_output;
  int *bwd_grad_output;
} pass_pipe_chunk;
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

/* ---- checkpoint.c / memplan.c / cost.c ----
 * Cost model (cost.c): pass_node_cost above is defined for every op (the
 * formulas are listed at the top of cost.c). A node's phase comes from the
 * roles of its results (grad: backward, recompute: recompute, opt_state or
 * param: optimizer, else forward). */
typedef enum { PASS_PHASE_FORWARD, PASS_PHASE_BACKWARD, PASS_PHASE_RECOMPUTE, PASS_PHASE_OPTIMIZER, PASS_NUM_PHASES } pass_phase;
pass_phase pass_node_phase(const ir_node *n);
/* The share of n's FLOPs, bytes and time that phase p holds: 1 for its
 * phase, 0 for the others, but a linear_cross_entropy is forward and
 * backward both (its logits product, loss and argmax are the forward's:
 * (2 D + 6) / (6 D + 13) of its FLOPs, and that share of the rest). */
double pass_node_phase_share(const ir_node *n, pass_phase p);
const char *pass_phase_name(pass_phase p);     /* "forward" "backward" "recompute" "optimizer" */
typedef struct {
  double flops[PASS_NUM_PHASES], bytes[PASS_NUM_PHASES];
  double op_flops[IR_NUM_OPS], op_bytes[IR_NUM_OPS]; /* all phases, by op kind */
  int op_count[IR_NUM_OPS];
  double comm[IR_NUM_OPS][IR_NUM_AXES];  /* bytes one rank sends, by op and mesh axis */
} pass_graph_cost;
void pass_graph_cost_of(const ir_graph *g, pass_graph_cost *c);

/* The memory plan (memplan.c): where every value lives, as data every
 * backend follows (see the top of memplan.c for the rules). */
enum { PASS_PLAN_ALIGNMENT = 256 };
typedef enum {
  PASS_SPACE_NONE,   /* not planned (a value of a dead node) */
  PASS_SPACE_ARENA,  /* the graph's arena, at offset */
  PASS_SPACE_INPUT,  /* the caller's buffer of graph input `index` */
  PASS_SPACE_PARAM,  /* the caller's buffer of graph param `index` */
} pass_space;
const char *pass_space_name(pass_space s); /* "arena", "input", "param", "-" */
typedef struct {
  pass_space space;
  int index;          /* INPUT / PARAM: which */
  size_t offset;      /* ARENA: bytes from the arena's start (aligned) */
  size_t bytes;       /* elements x dtype size */
  int buffer;         /* index in plan->buffers (shared by views and in-place results) */
  int reused_operand; /* a result computed in place: the operand whose buffer it took, else -1 */
} pass_loc;
typedef struct {
  pass_space space;
  int index;
  size_t offset, bytes;  /* ARENA: where; bytes unaligned (the arena block is rounded up) */
  int first, last;       /* the steps it is live (-1: before the first; n_steps: to the end) */
  ir_role role;          /* of the value that created it */
} pass_buffer;
typedef struct {
  int node;              /* index in g->nodes */
  bool view;             /* no kernel: the result is the operand's bytes */
  bool zero;             /* results zero-filled before the kernel (IR_OPF_ZEROED) */
} pass_step;
typedef struct pass_plan {
  int n_values;          /* ir_graph_id_bound of the graph */
  pass_loc *loc;         /* by value id */
  int n_steps;
  pass_step *steps;      /* the non-dead nodes, in order */
  int n_buffers;
  pass_buffer *buffers;
  size_t arena_bytes;    /* what a backend allocates, once */
  size_t alignment;
} pass_plan;
typedef struct {
  size_t alignment;                      /* 0: PASS_PLAN_ALIGNMENT */
  const bool *donate_inputs, *donate_params; /* NULL, or per input / param: results may be computed in its buffer */
} pass_plan_options;
pass_plan *pass_memplan(const ir_graph *g, const pass_plan_options *o); /* NULL: out of memory */
void pass_plan_free(pass_plan *p);
/* One line per result: step, name, bytes, where, lifetime, view / in place / zeroed. */
void pass_plan_print(FILE *out, const ir_graph *g, const pass_plan *p);

/* What the plan of g (without donation) holds over time. */
typedef struct {
  size_t peak_bytes;                     /* the largest sum of live buffers (exact sizes) */
  int peak_node;                         /* node index running at the peak */
  size_t peak_role_bytes[IR_NUM_ROLES];  /* what the peak is made of, by role */
  size_t activation_peak_bytes;          /* max over time of live act + recompute bytes */
  size_t saved_bytes;                    /* act bytes live when the first backward node starts */
  int first_backward_node;               /* -1: no backward */
  size_t final_bytes;                    /* live at the end (the outputs) */
  size_t arena_bytes;                    /* the arena (>= peak_bytes: alignment and fragmentation) */
} pass_mem_report;
int pass_memplan_analyze(const ir_graph *g, pass_mem_report *r); /* 0, or -1 out of memory */

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

/* ---- target.c (targets.def): hardware targets and the roofline ----
 * A target is a device's peak FLOP/s, memory bandwidth and capacity: the
 * built-in ones are listed once in targets.def with their vendor sources, a
 * user's own comes from a target file (`tgc stats --target-file F`). The
 * roofline: an op of f FLOPs that moves b bytes takes max(f / peak,
 * b / bandwidth) seconds; it is compute-bound when its arithmetic intensity
 * f / b reaches the ridge point peak / bandwidth, else memory-bound. */
typedef struct {
  char name[64];
  double flops_bf16;   /* peak dense bf16/fp16 FLOP/s */
  double flops_fp32;   /* peak fp32 FLOP/s (TF32 matrix units where the device has them) */
  double bandwidth;    /* memory bandwidth, bytes/s */
  double memory;       /* memory capacity, bytes (0: not given) */
  const char *source;  /* where the figures come from (a target file: its path) */
} pass_target;
int pass_target_count(void);
const pass_target *pass_target_at(int i);                 /* NULL when out of range */
const pass_target *pass_target_lookup(const char *name);  /* NULL if unknown */
/* Parses a target file: `key = value` lines (keys name, flops_bf16,
 * flops_fp32, bandwidth, memory; numbers such as 312e12), '#' comments and
 * blank lines. flops_bf16, flops_fp32 and bandwidth are required; name
 * defaults to the path. Reports "path:line:col: error: ..." through d for
 * every bad line (path's text is registered with d) and returns -1; else 0.
 * t->source is path (keep it alive). */
int pass_target_parse(const char *path, const char *text, size_t len, pass_target *t, ir_diag *d);
/* The peak for elements of elem_bytes: flops_bf16 for 2-byte floats, else flops_fp32. */
double pass_target_peak(const pass_target *t, size_t elem_bytes);
double pass_roofline_seconds(double flops, double bytes, double peak, double bandwidth);
bool pass_roofline_compute_bound(double flops, double bytes, double peak, double bandwidth);
/* Estimates of a training step (what `tgc stats` prints):
 * the closed form 12*l*h^2 + 2*v*h of a transformer's parameter count (l
 * layers of width h: 4h^2 attention + 8h^2 MLP; input and output embeddings
 * v*h each; biases and norms left out); */
double pass_closed_form_params(double layers, double width, double vocab);
/* training memory in bytes for n parameters held in elem_bytes each:
 * parameters and gradients in elem_bytes; optimizer state opt_states fp32
 * values per parameter, plus an fp32 master copy when elem_bytes == 2
 * (mixed precision: adam 2+2+12 = 16 bytes per parameter); activations as
 * given (the memory planner's peak); no gradients or optimizer when !trains; */
typedef struct {
  double params, grads, optimizer, activations, total;
} pass_train_memory;
pass_train_memory pass_training_memory(double n, size_t elem_bytes, int opt_states, double activations, bool trains);
/* model FLOPs utilization as in PaLM (Chowdhery et al. 2022):
 * 6 * n * tokens / (step_seconds * peak); 0 when undefined. */
double pass_mfu(double n, double tokens, double step_seconds, double peak);

/* ---- step_report.c: what one training step costs, as `tgc stats` reports it ----
 * The group of every parameter of g (the rules at the top of step_report.c)
 * into groups[i] for g->params[i]. */
typedef enum {
  PASS_GROUP_EMBEDDINGS, PASS_GROUP_ATTENTION, PASS_GROUP_MLP, PASS_GROUP_NORMS, PASS_GROUP_OTHER, PASS_GROUP_COUNT
} pass_param_group;
const char *pass_param_group_name(pass_param_group g); /* "embeddings" "attention" "mlp" "norms" "other" */
void pass_param_groups(const ir_graph *g, pass_param_group *groups);
/* The roofline of every live node of g, by node and by op kind; with a
 * target the time of each phase (the optimizer's: its update as one fused
 * pass over parameters, gradients and state), of the step, and its MFU. */
typedef struct {
  const pass_target *target;  /* NULL: FLOPs and bytes only */
  size_t elem_bytes;          /* the target's peak for elements of this size */
  double optimizer_flops;     /* the update's (pass_update_flops) */
  pass_train_memory memory;   /* what the update reads and writes */
  double params, tokens;      /* for MFU: parameter elements, tokens per step (0: unknown) */
} pass_step_costing;
typedef struct {
  const ir_node *n;
  double flops, bytes, time;
  bool compute_bound;
} pass_roofline_row;
typedef struct {
  double flops, bytes, time;
  int nodes, compute_nodes;
} pass_roofline_kind;
typedef struct {
  pass_roofline_row *rows;    /* every live node, in order (pass_roofline_free) */
  int n_rows;
  pass_roofline_kind kinds[IR_NUM_OPS];
  double peak;                /* FLOP/s; 0 without a target */
  double phase_time[PASS_NUM_PHASES], step_time, mfu;
} pass_roofline;
void pass_roofline_of(const ir_graph *g, const pass_step_costing *c, pass_roofline *r);
void pass_roofline_free(pass_roofline *r);


/* ===================================================================== */
/* the planner (retype.c, keyvalue.c, cluster.c + clusters.def, plan*.c) */
/* ===================================================================== */

/* ---- retype.c ----
 * Every float value of g (and every cast to a float dtype) becomes dt: the
 * graph as if written in dt, for costing and measuring only (never run). */
void pass_retype_floats(ir_graph *g, ir_dtype dt);
/* A copy of g with every float dtype dt (values, cast targets, the given
 * types of constants), every result type inferred again; names, roles,
 * locations and layers kept. NULL after reporting "converting to DT: ..."
 * at a node that does not type-check in dt. */
ir_graph *pass_retyped_copy(const ir_graph *g, ir_dtype dt, ir_diag *d);

/* ---- keyvalue.c: `key = value` files (target and cluster files) ----
 * pass_kv_read reads every line of text, checks the key against spec->keys,
 * refuses a key given twice and calls spec->set(ctx, key, value, length,
 * value location, d) with the trimmed value; the setter reports a bad value
 * at that location and returns -1. seen[k] gets the line of key k (0: not
 * given; minus its line: given with a bad value). Returns the number of
 * errors reported (every bad line is). */
typedef struct {
  const char *what;               /* "a target file": for the NUL-byte message */
  const char *const *keys;
  int n_keys;
  int (*set)(void *ctx, int key, const char *value, size_t len, ir_loc loc, ir_diag *d);
} pass_kv_spec;
int pass_kv_read(const pass_kv_spec *spec, const char *path, const char *text, size_t len, int *seen, void *ctx,
                 ir_diag *d);
/* A finite number (strtod syntax, the whole value): 0, or -1 reported at loc. */
int pass_kv_number(const char *v, size_t n, ir_loc loc, double *out, ir_diag *d);
/* One word of printable characters into out[cap] ("<what> is one word ..."). */
int pass_kv_word(const char *v, size_t n, ir_loc loc, const char *what, char *out, size_t cap, ir_diag *d);

/* ---- cluster.c (clusters.def): what a plan runs on ----
 * nodes x gpus_per_node GPUs (gpus: the number in use), each a `device`;
 * bandwidths are per GPU per direction, latencies per ring step (clusters.def
 * says where every built-in figure comes from). */
#define PASS_CLUSTER_MAX_NODES 1000000
typedef struct {
  char name[64];
  int gpus_per_node;
  int nodes;             /* 0 until the size is known (NAME without :NODES, a file without nodes) */
  int gpus;              /* nodes * gpus_per_node, or --gpus N; 0 until known */
  pass_target device;
  double intra_bw;       /* bytes/s per GPU per direction inside a node (NVLink) */
  double intra_lat;      /* seconds per ring step inside a node */
  double inter_bw;       /* bytes/s per GPU per direction across nodes (network) */
  double inter_lat;      /* seconds per ring step across nodes */
  double reserve;        /* bytes of each device's memory kept free */
  const char *source;    /* clusters.def's source line, or the cluster file's path */
  const char *target_name; /* built-ins: the targets.def row of the device */
} pass_cluster;
int pass_cluster_count(void);
const pass_cluster *pass_cluster_at(int i);                /* NULL when out of range; 1 node */
const pass_cluster *pass_cluster_lookup(const char *name);  /* NULL if unknown */
void pass_cluster_names(char *buf, size_t cap);             /* "dgx-a100, dgx-h100" */
/* "NAME:NODES" or "NAME" (size left to --gpus): 0, or -1 after reporting
 * "--cluster SPEC: ..." (unknown cluster, bad NODES). */
int pass_cluster_from_spec(const char *spec, pass_cluster *c, ir_diag *d);
/* --gpus N: N GPUs of c's nodes (a multiple of gpus_per_node, or part of one
 * node); -1 after reporting. */
int pass_cluster_set_gpus(pass_cluster *c, const char *gpus, ir_diag *d);
/* Parses a cluster file (see the top of cluster.c): 0, or -1 after reporting
 * "path:line:col: error: ..." for every bad line. c->source is path (keep it). */
int pass_cluster_parse(const char *path, const char *text, size_t len, pass_cluster *c, ir_diag *d);


/* One node's seconds on dev by the planner's roofline with its default
 * efficiencies (plan_profile.c: GEMMs by their shape, attention, memory). */
double pass_plan_node_seconds(const ir_node *n, const pass_target *dev, double flops, double bytes);

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

/* ---- the cost model of a sharded step (plan_tp.c, plan_profile.c, plan.c) ---- */
/* Collective kinds, and the mesh axes they run on: the shared enums of
 * ir/collectives.def and ir/mesh_axes.def. A send and its recv are costed
 * as one transfer, kind IR_COLL_SEND ("send/recv"). */
typedef ir_coll pass_coll_kind;
const char *pass_coll_name(pass_coll_kind k); /* "all-reduce" "all-gather" "reduce-scatter" ... "send/recv" */
typedef ir_axis pass_mesh_axis;
const char *pass_axis_name(pass_mesh_axis a); /* "data" "tensor" "pipeline" */


/* Checkpoint policies the planner chooses from, and the checkpoint pass's
 * policy each one compiles with: none (NULL), selective, full ("block": every
 * layer recomputed from its input). */
typedef enum { PASS_PLAN_CK_NONE, PASS_PLAN_CK_SELECTIVE, PASS_PLAN_CK_FULL, PASS_PLAN_CK_COUNT } pass_plan_ckpt;
const char *pass_plan_ckpt_name(pass_plan_ckpt c);        /* "none" "selective" "full" */
const char *pass_plan_ckpt_policy(pass_plan_ckpt c);      /* NULL "selective" "block" */
int pass_plan_ckpt_from_name(const char *name);           /* -1 if unknown; "block" is "full" */

/* The model of one training step, derived from its training graph: the
 * graph compiled at micro-batch b0 and at 2 b0 (per checkpoint policy)
 * tells which dims grow with the batch, so every figure is known at any
 * micro-batch b exactly (FLOPs and bytes are affine in b; GEMM shapes give
 * the efficiency). Nodes are grouped by layer: group 0 holds what comes
 * before the first layer (the embeddings), groups 1..L the layers, group
 * L+1 what comes after the last (the head and the loss); their backward
 * nodes go with them. How each node divides under tensor and sequence
 * parallelism, and what it communicates, is what the shard pass's engine
 * makes of it at that tp (plan_tp.c): the planner runs the shard algebra. */
typedef struct pass_plan_model pass_plan_model;
/* device: the GPU every figure of time is for (its peak and bandwidth). */
pass_plan_model *pass_plan_model_new(const pass_target *device);
void pass_plan_model_free(pass_plan_model *m);
/* Adds policy ck from its training graph at micro-batch b0 (g2: the model
 * keeps it, and frees it with itself, also on failure) and at 2 b0 (g4:
 * kept and freed the same way), each as the shard pass sees it: compiled
 * with the passes after the shard pass disabled (fuse-elementwise,
 * fuse-transpose, fuse-lm-head). For every tp the planner asks about, the
 * model runs the shard pass on both and then those passes, as the runtime
 * builds a rank's step (passes/plan_tp.c). The two must be the same graph but for the
 * batch dims (when a per-sample dim equals another dim at b0 the passes may
 * build another graph: try another b0). Returns 0, or -1 after reporting
 * through d. */
int pass_plan_model_add(pass_plan_model *m, pass_plan_ckpt ck, int b0, ir_graph *g2, ir_graph *g4, ir_diag *d);
/* The optimizer update: FLOPs per parameter element (its update graph's
 * count / the parameters) and state values per parameter (adam: 2). */
void pass_plan_model_set_optimizer(pass_plan_model *m, double flops_per_param, int states);
/* The passes (by pass_id) the user disabled: not run after the shard pass
 * either (fuse-lm-head never is: a sharded step does not fuse the head). */
void pass_plan_model_disable(pass_plan_model *m, const bool *disabled);
/* The parameters' tp layouts by the shard pass's search (--tp-layout
 * search; passes/plan_tp.c), else Megatron-LM's rule. */
void pass_plan_model_set_tp_search(pass_plan_model *m, bool on);
/* The graph the search chooses layouts on (pass_tp_search; the model frees
 * it): the training graph of the model's first policy at micro-batch b0 if
 * none is given (tgc plan gives the one tgc train searches on:
 * tool_tp_search_graph). layers: the model's layers (g may have fewer). */
void pass_plan_model_set_search_graph(pass_plan_model *m, ir_graph *g, int layers);
/* The layouts the search chose at (t, sp) (NULL: none searched there or it failed). */
const pass_tp_layouts *pass_plan_model_tp_layouts(const pass_plan_model *m, int t, bool sp);
bool pass_plan_model_tp_search(const pass_plan_model *m);
bool pass_plan_model_has(const pass_plan_model *m, pass_plan_ckpt ck);
/* Whether policy ck's graph recomputes anything (selective recompute with
 * fused attention has nothing left to recompute: the search skips it). */
bool pass_plan_model_recomputes(const pass_plan_model *m, pass_plan_ckpt ck);
int pass_plan_model_layers(const pass_plan_model *m);     /* L */
double pass_plan_model_params(const pass_plan_model *m);  /* parameter elements */
size_t pass_plan_model_elem_bytes(const pass_plan_model *m); /* bytes of a parameter element (2: mixed precision) */
const ir_graph *pass_plan_model_graph(const pass_plan_model *m, pass_plan_ckpt ck); /* at micro-batch b0 */

/* One group of nodes on one device of a tensor-parallel group of t, for one
 * micro-batch of b sequences (sp: sequence parallelism). */
typedef struct {
  double flops[PASS_NUM_PHASES];   /* per device */
  double gemm_flops[PASS_NUM_PHASES]; /* of those, the products of matmuls (2*M*N*K, epilogues left out) */
  double seconds[PASS_NUM_PHASES]; /* compute time per device: the roofline with GEMM efficiency */
  double coll_bytes[PASS_NUM_PHASES][IR_NUM_COLLS]; /* tensor-axis collectives: payload bytes (the full buffer) */
  int coll_count[PASS_NUM_PHASES][IR_NUM_COLLS];
  double coll_seconds[PASS_NUM_PHASES]; /* their time on the tensor axis (needs the cluster: plan.c fills it) */
  double saved;     /* activation bytes its backward reads (kept per micro-batch in flight), per device */
  double again;     /* of those, what a pipelined stage does not keep per micro-batch (pass_plan_handed_in) */
  double working;   /* bytes live while its backward runs: recomputed values + the largest op's */
  double params;    /* parameter elements per device of the parameters only its nodes read */
  double gather[2]; /* parameter elements per device its forward [0] and its backward and recompute [1] nodes
                     * read: what ZeRO 3 gathers for it per micro-batch (a weight two groups read, both) */
  /* its parameters' gradients the update brings to their parameters'
   * layouts on the tensor axis, by collective (IR_COLL_*): a partial sum
   * all-reduced (reduce-scattered where tp splits the parameter), a split
   * one gathered; payload bytes and tensors (one call each) */
  double grad_sync[IR_NUM_COLLS];
  int grad_sync_n[IR_NUM_COLLS];
  double grads, grads_whole; /* elements per device of the gradients of its parameters as the step hands them over
                              * (the shard pass's layout of each gradient, not always its parameter's); of those, the
                              * gradients of parameters ZeRO cannot split */
  double grads_dp, grads_dp_whole; /* the same as the update reduces them over dp: a gradient tp splits where its
                                    * parameter is not is gathered on tp first */
  double tensors;   /* parameter tensors only its nodes read (the runtime reduces over dp one call per tensor) */
  double whole, whole_tensors; /* of its parameters, those ZeRO cannot split: a 1-D tensor tp splits has no dim left
                                * for dp (the shard pass keeps it whole over dp); elements per device, tensors */
  double gather_n[2]; /* tensors ZeRO 3 gathers for its forward and its backward (one call each) */
} pass_plan_group;
/* The groups (L + 2 of them) of policy ck at (b, t, sp), and the bytes per
 * device that cross the cut after group g forward (act[g]) and backward
 * (grad[g]). Computed once and kept (pointers stay valid until the model is
 * freed). NULL when ck was not added. */
/* tied: a weight read in two groups (a tied embedding) whose gradient is
 * summed from group hi into group lo: when they fall in different pipeline
 * stages the two stages all-reduce those bytes once a step (Megatron-LM's
 * embedding group). */
typedef struct {
  int lo, hi;
  double bytes;
} pass_plan_tied;
/* shared: a parameter read in several groups (a stage holding any of them
 * holds all of it): groups[0..n), or with more than 4 every group from
 * groups[0] to groups[3]. shared_saved: the same for an activation the
 * backward of several groups reads (a table made from constants, read by
 * every layer: kept once per stage); elems are then bytes. */
typedef struct {
  double elems;
  double grads, grads_dp; /* a parameter's: its gradient's elements per device (pass_plan_group.grads, grads_dp) */
  int groups[4], n;
  bool span;
  bool whole; /* a parameter ZeRO cannot split (pass_plan_group.whole) */
  bool again; /* an activation a pipelined stage does not keep (pass_plan_group.again) */
} pass_plan_shared;
typedef struct {
  const pass_plan_group *groups;
  const double *act, *grad;
  const double *act_n, *grad_n; /* values crossing the cut after group g forward and backward (one send each) */
  int n_groups;
  const pass_plan_tied *tied;
  int n_tied;
  const pass_plan_shared *shared, *shared_saved;
  int n_shared, n_shared_saved;
  int tp_sums; /* the trainer's scalar sums (loss, correct predictions) the step makes partial over tp: each
                * all-reduced (8 bytes) on the tensor axis */
} pass_plan_profile;
/* Parameter elements per device of a stage holding groups lo..hi. */
double pass_plan_params_in(const pass_plan_profile *p, int lo, int hi);
/* The same as elements, tensors, and of them those ZeRO cannot split
 * (pass_plan_group.whole). */
typedef struct {
  double elems, tensors, whole, whole_tensors;
  double grads, grads_whole; /* their gradients' elements (pass_plan_group.grads) */
  double grads_dp, grads_dp_whole;
} pass_plan_params;
pass_plan_params pass_plan_params_of(const pass_plan_profile *p, int lo, int hi);
/* Activation bytes per micro-batch the backward of groups lo..hi reads, each value once. */
double pass_plan_saved_in(const pass_plan_profile *p, int lo, int hi);
/* Of those, what a pipelined stage keeps per micro-batch in flight (what its
 * fwd hands its bwd): less what bwd makes again (values made from
 * parameters and constants alone, layouts of values it reads anyway) and
 * the loss and correct count (the trainer sums them once a step). */
double pass_plan_handed_in(const pass_plan_profile *p, int lo, int hi);
/* Of those, the elements of parameter i of the graph (pass_plan_model_graph(m,
 * ck)->params[i]) on one device of a tensor-parallel group of t: 0 when no
 * node of groups lo..hi reads it. (Over every i they add up to
 * pass_plan_params_in.) whole (may be NULL): ZeRO cannot split it; grads (may be
 * NULL): the elements of its gradient as the step hands it over. */
double pass_plan_param_in(const pass_plan_model *m, pass_plan_ckpt ck, int i, int t, bool sp, int lo, int hi,
                          bool *whole, double *grads);
const pass_plan_profile *pass_plan_model_profile(pass_plan_model *m, pass_plan_ckpt ck, int b, int t, bool sp);
/* Whether the shard pass refuses tensor degree t: 0 with *heads true and
 * *size, *value, *dim set when t does not divide an attention op's heads
 * (the runtime's refusal), or with *heads false when the shard pass cannot
 * shard the graph at t; 1 when it can. Any other dim t does not divide the
 * shard pass leaves whole, and so does the planner. */
int pass_plan_model_tp_check(const pass_plan_model *m, int t, int64_t *size, const ir_value **value, int *dim,
                             bool *heads);


/* ---- plan_sim.c: the pipeline, simulated event by event ----
 * p devices (stages) each hold v model chunks (v > 1 only interleaved):
 * virtual stage k = chunk k / p on device k % p, p*v of them in model order.
 * Every device runs its operations (F: one micro-batch's forward of one
 * chunk, B: its backward) in the order of the schedule:
 *   gpipe        all m forwards, then the m backwards (last micro-batch first)
 *   1f1b         min(p - s - 1, m) forwards, then one forward and one backward
 *                in turn, then the remaining backwards (PipeDream-Flush, as
 *                Megatron-LM runs it without interleaving)
 *   interleaved  Megatron-LM's interleaved 1F1B: forwards k = 0, 1, ... run
 *                chunk (k / p) mod v of micro-batch (k / (p v)) p + k mod p;
 *                backwards the chunks in reverse; (p - s - 1) * 2 + (v - 1) * p
 *                warm-up forwards (at most m v); m a multiple of p
 * An operation starts when its device is free and its input is there: F of
 * virtual stage k needs F of k - 1 to have ended plus send[k - 1] seconds;
 * B of k needs B of k + 1 plus send_back[k] (the last stage's B needs its
 * own F). Uniform stages with free sends give the textbook bubble: (p - 1) /
 * m of the ideal time for gpipe and 1f1b, (p - 1) / (v m) interleaved. */
typedef enum { PASS_SCHED_GPIPE, PASS_SCHED_1F1B, PASS_SCHED_INTERLEAVED, PASS_SCHED_COUNT } pass_schedule;
const char *pass_schedule_name(pass_schedule s);   /* "gpipe" "1f1b" "interleaved" */
int pass_schedule_from_name(const char *name);     /* -1 if unknown */
typedef struct {
  pass_schedule schedule;
  int p, v, m;
  const double *fwd, *bwd;        /* seconds per micro-batch, per virtual stage (p * v) */
  const double *send, *send_back; /* seconds from virtual stage k to k + 1 and back (p * v - 1); NULL: free */
  const double *act;              /* bytes a virtual stage keeps per micro-batch in flight; NULL: not tracked */
} pass_pipe;
typedef struct {
  int device, chunk, mb;
  bool backward;
  double start, end;
} pass_pipe_op;
typedef struct {
  double makespan;       /* the last operation's end */
  double *busy, *end;    /* per device: seconds computing; its last operation's end */
  double *peak_act;      /* per device: most bytes in flight (with act) */
  int *peak_mb;          /* per device: most micro-batch chunks in flight */
  double *last_b_start, *last_b_end; /* per virtual stage: its last backward (gradients complete) */
  pass_pipe_op *ops;     /* every operation, when recorded (2 * m * p * v) */
  int n_ops;
} pass_pipe_result;
/* Simulates s: 0, or -1 when s is malformed (a count below 1, m not a
 * multiple of p interleaved). r's arrays are malloc'd: pass_pipe_result_free. */
int pass_pipe_simulate(const pass_pipe *s, pass_pipe_result *r, bool record);
void pass_pipe_result_free(pass_pipe_result *r);
/* The most bytes (with s->act) and micro-batch chunks each device keeps at
 * once: fixed by the order alone (p entries each; no times needed). */
void pass_pipe_in_flight(const pass_pipe *s, double *peak_act, int *peak_mb);

/* A Chrome trace (chrome://tracing, Perfetto): lanes of slices, times in
 * seconds; written as JSON with microsecond timestamps. */
typedef struct {
  int lane;
  const char *name, *cat; /* cat: forward, backward, recompute, idle, send/recv, all-reduce, optimizer, ... */
  double start, dur;
} pass_trace_slice;
typedef struct {
  const char *const *lane_names;
  int n_lanes;
  const pass_trace_slice *slices;
  int n_slices;
} pass_trace;
/* 0, or -1 when f could not be written. */
int pass_trace_write(FILE *f, const pass_trace *t);


/* ---- plan.c: a plan's cost, and the search ----
 * A plan puts gpus = dp * tp * pp devices in a mesh, tensor axis innermost
 * (tp consecutive ranks share a node), then data, then pipeline (rank =
 * (stage * dp + replica) * tp + shard: Megatron-LM's order), and chooses
 * sequence parallelism, the ZeRO stage, the micro-batch size b (m = global
 * batch / (dp * b) micro-batches per replica), the schedule (v chunks per
 * device interleaved) and the checkpoint policy. The layers are split into
 * pp * v stages balanced by time (the embeddings go with the first, the head
 * with the last). docs/plan.md has every formula. */
typedef struct {
  int global_batch; /* sequences per step */
  int seq;          /* tokens per sequence (for tokens/s and MFU) */
} pass_plan_job;
typedef struct {
  int dp, tp, pp, v;     /* v: model chunks per device (interleaved; else 1) */
  bool sp;               /* sequence parallelism (tp > 1) */
  int zero;              /* 0 none, 1 optimizer state, 2 + gradients, 3 + parameters, sharded over dp */
  int micro_batch;
  pass_schedule schedule;
  pass_plan_ckpt ckpt;
} pass_plan_strategy;
enum { PASS_MEM_PARAMS, PASS_MEM_GRADS, PASS_MEM_OPTIMIZER, PASS_MEM_ACTIVATIONS, PASS_MEM_WORKING, PASS_MEM_COMM,
       PASS_MEM_KINDS };
const char *pass_mem_kind_name(int k);
/* The rows of a step's time, on the stage that finishes last: they add up
 * to the step. */
enum { PASS_ROW_FORWARD, PASS_ROW_BACKWARD, PASS_ROW_RECOMPUTE, PASS_ROW_TP_ALL_REDUCE, PASS_ROW_TP_ALL_GATHER,
       PASS_ROW_TP_REDUCE_SCATTER, PASS_ROW_PP_SEND_RECV, PASS_ROW_BUBBLE, PASS_ROW_DP, PASS_ROW_OPTIMIZER, PASS_ROWS };
const char *pass_plan_row_name(int r);
#define PASS_PLAN_MAX_COMM 16
typedef struct {
  pass_coll_kind kind;
  pass_mesh_axis axis;
  const char *what;  /* what it moves: "activations", "gradients", "parameters", ... */
  double payload;  /* bytes per step of one device: the buffers of all its calls */
  double calls;    /* calls per step */
  double seconds;  /* their time */
  double exposed;  /* of which the step waits for */
} pass_plan_comm;
typedef struct {
  pass_plan_strategy s;
  int m;                 /* micro-batches per replica per step */
  bool fits;
  double step;           /* seconds */
  double lower;          /* a lower bound of step: the busiest stage's work + its optimizer */
  double rows[PASS_ROWS];
  int critical;          /* the stage the rows are of */
  int fullest;           /* the stage with the most memory */
  double mem[PASS_MEM_KINDS], mem_total, capacity; /* the fullest stage; capacity: the device's memory less the reserve */
  double mfu;            /* 6 N tokens / (step * peak * gpus) */
  double tokens_per_s;
  double hw_flops;       /* FLOP/s per GPU of all the work done (recompute and replicated work included) */
  pass_plan_comm comm[PASS_PLAN_MAX_COMM];
  int n_comm;
} pass_plan_result;
/* Per stage, for --explain, JSON and the trace (pass_plan_detail_free). */
typedef struct {
  int n_stages, n_virtual;
  int *first, *last;        /* per virtual stage: its groups (0 embeddings, 1..L layers, L + 1 head) */
  double *fwd, *bwd;        /* per virtual stage: seconds per micro-batch (compute and tensor-axis collectives) */
  double *fwd_comm, *bwd_comm; /* of which the collectives */
  double *send, *send_back; /* per boundary: seconds to send a micro-batch's activations, and its gradient back */
  double *send_bytes, *back_bytes; /* per boundary: those bytes (per device, one micro-batch) */
  double *act;              /* per virtual stage: activation bytes its backward reads, kept per micro-batch in flight */
  double *mem;              /* per stage: PASS_MEM_KINDS figures */
  double *end, *dp_exposed, *opt; /* per stage */
  pass_plan_comm *comm;     /* per stage: its collectives of one step, PASS_PLAN_MAX_COMM entries from */
  int *n_comm;              /* stage x PASS_PLAN_MAX_COMM on, n_comm[stage] of them (r->comm: the critical stage's) */
  pass_pipe_result sim;     /* with every operation recorded */
} pass_plan_detail;
void pass_plan_detail_free(pass_plan_detail *d);
/* The time of `calls` collectives of kind k moving `bytes` in all over n
 * ranks spanning `nodes` nodes of c (the alpha-beta model above). */
double pass_plan_coll_seconds(const pass_plan_model *m, const pass_cluster *c, pass_coll_kind k, int n, double bytes,
                              double calls, int nodes);
/* Nodes the data-parallel group of a plan spans, and whether the pipeline
 * boundary after stage a crosses nodes. */
int pass_plan_dp_nodes(const pass_cluster *c, int tp, int dp);
bool pass_plan_pp_crosses(const pass_cluster *c, int tp, int dp, int a, int b);
/* The roofline constants of the model (docs/plan.md gives the source or the
 * calibration of each): the defaults, and a model's own (what-if analyses
 * and the calibration script set them: tgc plan --constant NAME=VALUE). */
typedef struct {
  double gemm_eff;      /* a large GEMM's share of the peak */
  double gemm_half;     /* per GEMM dim d the share is multiplied by d / (d + gemm_half) */
  double attn_eff;      /* fused attention's share of the peak, over the FLOPs it really does (causal: half) */
  double mem_eff;       /* a memory-bound kernel's share of the bandwidth */
  double nccl_base_lat; /* seconds every collective call costs before its steps */
} pass_plan_constants;
pass_plan_constants pass_plan_default_constants(void);
const pass_plan_constants *pass_plan_model_constants(const pass_plan_model *m);
void pass_plan_model_set_constants(pass_plan_model *m, const pass_plan_constants *k);
/* Evaluates strategy s: 0, or -1 with why (one line) when it is not a valid
 * plan for this model, cluster and job. detail may be NULL. */
int pass_plan_evaluate(pass_plan_model *m, const pass_cluster *c, const pass_plan_job *j, const pass_plan_strategy *s,
                       pass_plan_result *r, pass_plan_detail *detail, char *why, size_t why_len);
/* The search. A field of q >= 0 fixes that choice (dp, tp, pp together:
 * mesh >= 0), -1 searches it. Plans are enumerated, the ones over memory
 * dropped before they are timed, the ones whose lower bound (their busiest
 * device's work) is no better than the top-th best skipped, the rest
 * simulated. */
typedef struct {
  int dp, tp, pp;        /* -1: search (all three, or none, given) */
  int sp, zero, micro_batch, schedule, v, ckpt; /* -1: search */
  int top;               /* plans kept, best first (>= 1) */
} pass_plan_query;
typedef struct {
  pass_plan_result *plans;  /* best first */
  int n_plans;
  pass_plan_result *unfit;  /* with top > 1: faster than the best but over memory */
  int n_unfit;
  pass_plan_result smallest; /* the plan with the least memory (meaningful when nothing fits) */
  bool have_smallest;
  long considered, over_memory, pruned, simulated;
  double seconds;      /* wall-clock */
  double cpu_seconds;  /* this process's CPU time (steadier on a shared machine) */
} pass_plan_found;
/* 0 (found->plans[0] is the best), 1 when no plan fits (found->smallest
 * says by how much it misses), -1 after reporting a user error through d
 * (the batch divides by no data-parallel degree; a given mesh that is not
 * one). */
int pass_plan_search(pass_plan_model *m, const pass_cluster *c, const pass_plan_job *j, const pass_plan_query *q,
                     pass_plan_found *found, ir_diag *d);
void pass_plan_found_free(pass_plan_found *f);
/* The Chrome trace of a plan's simulated step (detail from pass_plan_evaluate):
 * per stage a lane of forward, backward, idle and optimizer slices (the
 * tensor-axis collectives nested in the operations that wait for them) and
 * a lane of its send/recv and data-parallel reductions. */
int pass_plan_write_trace(FILE *f, const pass_plan_model *m, const pass_plan_result *r, const pass_plan_detail *d);

#endif
