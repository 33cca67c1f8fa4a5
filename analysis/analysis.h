/* analysis/analysis.h — what a graph costs and where it lives, read off the
 * graph without changing it: the cost model (FLOPs, bytes, collectives,
 * phases; the roofline of a node), the memory plan every backend follows,
 * hardware targets and clusters, `key = value` files, the step report of
 * `tgc stats`, the training program as data (its graphs and bindings) and
 * the pipeline schedules. Includes ir/ only (ARCHITECTURE.md: analysis/);
 * the passes and the planner build on it.
 */
#ifndef TGC_ANALYSIS_H
#define TGC_ANALYSIS_H

#include <stdio.h>

#include "ir.h"

/* ---- pairs a kernel computes together (partners.c; fuse-transpose marks them) ----
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
/* Both at once for every node of g, in one pass over it: partner[i] (of
 * g->n_nodes) the node that pairs with node i, or -1. (partners.c) */
void pass_partners_of(const ir_graph *g, int *partner);

/* linear_cross_entropy's chunking as its device lowering lays out the
 * op's [C, V] chunk buffer (codegen/emit_nn.c), and as the cost model
 * counts it: rows *ld elements apart, V rounded up to 64 (16-byte aligned
 * rows for cuBLASLt's fast kernels, whatever V), so a chunk holds the rows
 * that fit C x V elements (a multiple of 8 from 8 up); returns them.
 * ld = V and C rows when V is a multiple of 64. (cost.c) */
int64_t pass_linear_ce_chunk_rows(int64_t C, int64_t V, int64_t *ld);
/* The vocabulary columns its device products take in one piece: V rounded
 * down to a multiple of 8, the rest (1 to 7 columns) in a second, small
 * product each. cuBLASLt ran the LM head's three products at about 140
 * TFLOP/s with V = 50,257 on an H200 and at about 3 times that with
 * V = 50,264 (the other dims and the leading dimensions unchanged). V when
 * V is a multiple of 8 or below 8. (cost.c) */
int64_t pass_linear_ce_main_cols(int64_t V);

/* ---- analyses (memplan.c, cost.c) ----
 * The arena a backend allocates to run g: pass_memplan(g, NULL)->arena_bytes. */
size_t pass_predict_peak_bytes(const ir_graph *g);

typedef struct {
  double flops;  /* floating-point operations (a multiply-add counts 2) */
  double bytes;  /* bytes read (each operand once) + bytes written (each result once) */
  double comm;   /* communication ops: bytes one rank sends over its mesh axis (pass_comm_bytes) */
  double fill;   /* of bytes: what the executor's fill actions write before the kernel (each result of an
                  * IR_OPF_ZEROED op, zeroed; runtime/exec.c), and */
  int fills;     /* ... how many fill actions (one per result) */
  double launches; /* device calls of the lowered program: pass_launch_total(pass_node_launches(n)) */
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

/* ---- launches.c: what the lowered program issues for a node ----
 * Counted as codegen's cg_lower lowers it (the table at the top of
 * launches.c); test_cost_lowering holds the count to the program's actions
 * step by step. An action counts for the node whose results it writes (the
 * loss kernel a cross_entropy_grad's step launches for a {with_grad}
 * cross_entropy counts for that cross_entropy). */
typedef struct {
  double kernels;     /* kernel launches */
  double products;    /* cuBLASLt matmul calls */
  double stream_ops;  /* memsets and copies of the program, and the executor's zero-fills */
} pass_launches;
pass_launches pass_node_launches(const ir_node *n);
double pass_launch_total(pass_launches l);
/* A product a[..., M, K] @ b[..., K, N] (transposed as the flags say) as
 * the lowering issues it: merged batch dims (both operands walk them
 * contiguously; stride 0 for an operand broadcast along one), the innermost
 * of them one strided-batched call, a call per index of the outer ones;
 * x @ W with W shared by every batch and x not transposed one call over
 * batches * M rows (rows_merged). codegen/emit_gemm.c lowers by it. */
typedef struct {
  bool ta, tb;
  int64_t m, k, n;
  int nb;                           /* merged batch dims */
  int64_t ext[IR_MAX_RANK];         /* their extents */
  int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK], sc[IR_MAX_RANK]; /* their strides, in matrices (0: broadcast) */
  int64_t batches;                  /* product of the batch dims */
  bool rows_merged;                 /* one product over batches * M rows */
  int inner;                        /* the strided-batch dim, -1: none */
  int64_t calls;                    /* products issued: the outer dims' indices */
} pass_mm_shape;
void pass_matmul_shape(const ir_type *a, const ir_type *b, bool ta, bool tb, pass_mm_shape *s);
/* The epilogue of a fused_matmul cuBLASLt computes (codegen's cg_epilogue
 * has the same members first): (add $0 $1) with a bias along N, relu or
 * gelu of it, (mul $0 (gelu_grad $1)) with $1 of the product's shape; NONE
 * for any other expression (an elementwise kernel after the product) and
 * for a plain matmul. */
typedef enum { PASS_EPI_NONE, PASS_EPI_BIAS, PASS_EPI_RELU_BIAS, PASS_EPI_GELU_BIAS, PASS_EPI_DGELU } pass_epilogue;
pass_epilogue pass_matmul_epilogue(const ir_node *n);

/* ---- training programs as data (built by pass_build_train, passes/pass.h,
 * which describes every binding) ---- */
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
  /* mixed precision on one rank (training.c's fold): parameter i's copy in
   * the compute dtype, which the update writes (update output
   * copy_output[i]) in the pass that writes the parameter and the step reads
   * (step input copy_input[i]) in place of casting the parameter; the
   * trainer makes it from the parameter where no update has (start, load).
   * Both -1 where the step casts the parameter itself; NULL: none. */
  int *copy_input, *copy_output;
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
  double fill_bytes;                     /* the fill actions' bytes (pass_cost.fill), in bytes[] too */
  int64_t fills;                         /* ... and how many */
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
/* What NCCL requires of a collective's buffers, which the comm layer's own
 * algorithms do not (they stage overlapping buffers aside first): a result
 * never overlaps its operand, but for an all_reduce or comm_broadcast in
 * place (the same bytes exactly). The plan's rules give that (a collective
 * is not IR_OPF_INPLACE, and operand and result are live at its step);
 * rt_program_new checks it of every plan. 0, or -1 with the pair in why. */
int pass_plan_check_comm(const ir_graph *g, const pass_plan *p, char *why, size_t n);
/* One line per result: step, name, bytes, where, lifetime, view / in place / zeroed. */
void pass_plan_print(FILE *out, const ir_graph *g, const pass_plan *p);

/* ---- launches.c: what a lowered program issues, over its memory plan ----
 * The multi-tensor launch: how many consecutive plan steps from `step`
 * run as one kernel (codegen/emit_group.c lowers by it; 1: the step
 * alone): fused nodes of one expression text, operand and result dtypes
 * and stored results, each operand of the results' shape (in any dtype) or
 * one element, whose live places (the plan's) do not overlap another
 * member's and that read nothing another member writes; at most 32
 * members and 480 pointers. uses: ir_use_counts(g) of n_uses (a result nothing reads is
 * not stored); NULL: every result is. */
int pass_group_size(const ir_graph *g, const pass_plan *p, const int *uses, int n_uses, int step);
/* Whether fused node n can be a member of a multi-tensor group: results
 * of one element count (a {nonfinite} count aside), operands of that shape
 * in any dtype or one element, at most 24 pointers. */
bool pass_group_eligible(const ir_node *n);
/* The pieces a CUDA graph run cuts the program of g into
 * (runtime/cuda/backend.c captures by them): in plan order, each
 * collective step (ir_op_on_mesh_axis) a piece of its own, run by the host;
 * each maximal run of other steps between two a piece captured as one
 * graph, one cuGraphLaunch a run. A piece is the plan steps [first, end)
 * (view steps have no action: they cut nothing and start no piece).
 * Writes them into pieces (NULL: only counts; room for p->n_steps) and
 * returns how many. */
typedef struct {
  int first, end;
  bool collective;
} pass_piece;
int pass_graph_pieces(const ir_graph *g, const pass_plan *p, pass_piece *pieces);
/* What one run of the lowered program of g issues: the device calls of
 * every step (pass_node_launches; a multi-tensor group one kernel), the
 * collectives, and the segments a CUDA graph run launches (pieces without
 * a collective): with graphs the host issues segments + collectives calls
 * a run. 0, or -1 out of memory. */
typedef struct {
  pass_launches launches;     /* the device calls without graphs (pass_launch_total) */
  int groups, grouped_nodes;  /* multi-tensor launches, and the steps they run */
  int collectives;            /* collective actions: the comm layer's calls, and */
  int mesh_slices;            /* ... of them mesh_slice (a rank's slice of a whole value: no communication) */
  int segments;               /* graphs a run launches */
} pass_program_calls;
int pass_program_calls_of(const ir_graph *g, const pass_plan *p, pass_program_calls *c);

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
  double launch;       /* seconds a device call takes at least (targets.def; 0: no floor) */
} pass_target;
int pass_target_count(void);
const pass_target *pass_target_at(int i);                 /* NULL when out of range */
const pass_target *pass_target_lookup(const char *name);  /* NULL if unknown */
/* Parses a target file: `key = value` lines (keys name, flops_bf16,
 * flops_fp32, bandwidth, memory, launch; numbers such as 312e12), '#' comments and
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
 * target a node takes max(its roofline time, its device calls x the
 * target's launch time) (a kernel issued back to back takes at least
 * that), and the time of each phase (the optimizer's: its update as one fused
 * pass over parameters, gradients and state, at least its update_launches x
 * the launch time), of the step, and its MFU. */
typedef struct {
  const pass_target *target;  /* NULL: FLOPs and bytes only */
  size_t elem_bytes;          /* the target's peak for elements of this size */
  double optimizer_flops;     /* the update's (pass_update_flops) */
  pass_train_memory memory;   /* what the update reads and writes */
  double params, tokens;      /* for MFU: parameter elements, tokens per step (0: unknown) */
  double update_launches;     /* device calls of the update program (pass_program_calls_of; 0: not counted):
                               * the update takes at least them x the target's launch time */
} pass_step_costing;
typedef struct {
  const ir_node *n;
  double flops, bytes, time;
  bool compute_bound;
  double launches;            /* device calls (pass_node_launches) */
  bool launch_bound;          /* time is launches x the target's launch time, above the roofline's */
} pass_roofline_row;
typedef struct {
  double flops, bytes, time;
  int nodes, compute_nodes;
  double launches;
} pass_roofline_kind;
typedef struct {
  pass_roofline_row *rows;    /* every live node, in order (pass_roofline_free) */
  int n_rows;
  pass_roofline_kind kinds[IR_NUM_OPS];
  double peak;                /* FLOP/s; 0 without a target */
  double phase_time[PASS_NUM_PHASES], step_time, mfu;
  double launches;            /* device calls of the step's nodes (the optimizer's update: update_launches) */
  double launch_time;         /* what the launch floor adds to the nodes' roofline times and the update's */
  double update_launches;     /* the costing's */
  bool update_launch_bound;   /* the update's time is its calls x the launch time, above its roofline */
} pass_roofline;
void pass_roofline_of(const ir_graph *g, const pass_step_costing *c, pass_roofline *r);
void pass_roofline_free(pass_roofline *r);


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

/* ---- the optimizers (passes/optimizer.c builds their updates; program.c) ---- */
typedef enum { PASS_OPT_SGD, PASS_OPT_MOMENTUM, PASS_OPT_ADAM, PASS_OPT_ADAMW, PASS_OPT_COUNT } pass_optimizer_kind;
const char *pass_optimizer_name(pass_optimizer_kind kind);    /* "sgd" "momentum" "adam" "adamw" */
int pass_optimizer_from_name(const char *name);                /* -1 if unknown */

/* ---- pipeline schedules (plan/plan_sim.c simulates them; runtime/train.c runs them; program.c) ---- */
typedef enum { PASS_SCHED_GPIPE, PASS_SCHED_1F1B, PASS_SCHED_INTERLEAVED, PASS_SCHED_COUNT } pass_schedule;
const char *pass_schedule_name(pass_schedule s);   /* "gpipe" "1f1b" "interleaved" */
int pass_schedule_from_name(const char *name);     /* -1 if unknown */

/* ---- the roofline of one node (target.c) ----
 * The roofline constants of the planner's model (docs/plan.md gives the source or the
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
/* M, N, K and the batch count of a matmul-like node (zeros for others). */
void pass_gemm_dims(const ir_node *n, double mnk[4]);
/* One node's seconds on dev by the roofline with efficiencies k: a GEMM's
 * by its shape (mnk), attention's (half the FLOPs when causal), a
 * memory-bound kernel's by its bytes; views and constants take none. elem:
 * the bytes of its elements (the peak for them). (target.c) */
double pass_node_roofline_seconds(const pass_plan_constants *k, const pass_target *dev, size_t elem, ir_op op, bool causal,
                                  double flops, double bytes, const double mnk[4]);
/* The same with the default efficiencies, op, shape and dtype read off n:
 * what the layout search costs a candidate by. */
double pass_plan_node_seconds(const ir_node *n, const pass_target *dev, double flops, double bytes);

#endif
