/* plan/plan.h — the planner: the model of a sharded training step read off
 * the shard pass's own output (plan_tp.c, plan_profile.c), the pipeline
 * simulated event by event (plan_sim.c), a plan's cost and the search over
 * meshes, schedules, ZeRO stages, micro-batches and checkpoint policies
 * (plan.c). Includes ir/, analysis/ and passes/ (ARCHITECTURE.md: plan/).
 */
#ifndef TGC_PLAN_H
#define TGC_PLAN_H

#include "analysis.h"
#include "pass.h"





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
 * builds a rank's step (plan/plan_tp.c). The two must be the same graph but for the
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
 * search; plan/plan_tp.c), else Megatron-LM's rule. */
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
  bool grads_shared; /* two parameters' gradients are one value: the update reduces them over dp, not the
                      * step's buckets (the shard pass's distinct_grads) */
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
