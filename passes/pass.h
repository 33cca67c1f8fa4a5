/* passes/pass.h — the pass manager and every graph transformation.
 * Passes are declared once in passes.def; each lives in one file with one
 * entry point `int pass_<name>(ir_graph *g, const pass_options *o)` returning
 * 0 on success or -1 after reporting through o->diag.
 */
#ifndef TGC_PASS_H
#define TGC_PASS_H

#include "ir.h"

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
} pass_options;

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

/* ---- analyses (memplan.c, cost.c) ----
 * The arena a backend allocates to run g: pass_memplan(g, NULL)->arena_bytes. */
size_t pass_predict_peak_bytes(const ir_graph *g);

typedef struct {
  double flops;  /* floating-point operations (a multiply-add counts 2) */
  double bytes;  /* bytes read (each operand once) + bytes written (each result once) */
} pass_cost;
pass_cost pass_node_cost(const ir_node *n);

/* ---- optimizer (optimizer.c) ----
 * Training as IR. pass_build_training turns a model graph into its training
 * graph in place: it takes the loss (the output named "loss", else the first
 * output; a float scalar), appends a GRAD node of it with respect to every
 * parameter, makes the outputs `loss`, `logits` (when the model has an output
 * of that name) and `d_<param>` for every parameter (in g->params order), and
 * runs the default pipeline (autodiff, canonicalize, checkpoint with
 * o->checkpoint). Returns 0, or -1 after reporting through o->diag.
 *
 * pass_build_update builds a separate UPDATE graph for the parameters of
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
int pass_build_training(ir_graph *g, const pass_options *o);
ir_graph *pass_build_update(const ir_graph *model, const pass_optimizer *opt, ir_diag *d);
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
  const pass_options *passes; /* the pipeline's settings (diag, dump, checkpoint, disabled passes) */
  bool mixed_precision;   /* compute in compute_dtype (bf16 or f16), parameters and update in f32 */
  ir_dtype compute_dtype;
  bool loss_scaling;      /* the loss scale input and the skipped overflowing updates (f16) */
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
  bool accuracy;
  int64_t positions;         /* targets per micro-batch */
} pass_training;
/* Builds both graphs from model (consumed: it becomes the step graph; freed
 * on failure). NULL after reporting through o->passes->diag. */
pass_training *pass_build_train(ir_graph *model, const pass_train_options *o);
void pass_training_free(pass_training *t);

/* ---- checkpoint.c / memplan.c / cost.c ----
 * Cost model (cost.c): pass_node_cost above is defined for every op (the
 * formulas are listed at the top of cost.c). A node's phase comes from the
 * roles of its results (grad: backward, recompute: recompute, opt_state or
 * param: optimizer, else forward). */
typedef enum { PASS_PHASE_FORWARD, PASS_PHASE_BACKWARD, PASS_PHASE_RECOMPUTE, PASS_PHASE_OPTIMIZER, PASS_NUM_PHASES } pass_phase;
pass_phase pass_node_phase(const ir_node *n);
const char *pass_phase_name(pass_phase p);     /* "forward" "backward" "recompute" "optimizer" */
typedef struct {
  double flops[PASS_NUM_PHASES], bytes[PASS_NUM_PHASES];
  double op_flops[IR_NUM_OPS], op_bytes[IR_NUM_OPS]; /* all phases, by op kind */
  int op_count[IR_NUM_OPS];
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

#endif
