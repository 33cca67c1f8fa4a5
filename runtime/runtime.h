/* runtime/runtime.h — tensors, devices and their buffers, the
 * backend-neutral executor and generation.
 *
 * Layers of execution:
 *   rt_backend  a small vtable (ggml-style): a context, device memory
 *               (alloc, free, upload, download, copy, fill), prepare (bind
 *               a program's kernel actions to what the backend runs, once)
 *               and run (one kernel action on device tensors). cpu.c is
 *               the CPU's.
 *   rt_device   an opened backend, counting what it allocates and moves.
 *   rt_program  a graph prepared on a device (exec.c): its memory plan
 *               (analysis/memplan.c), the one arena the plan asks for,
 *               allocated once, and one list of actions (rt_action: fill,
 *               kernel, collective) with their tensors resolved, which
 *               every backend walks the same way. Scheduling, liveness,
 *               in-place execution and donation are the plan's, written
 *               once for every backend.
 *   rt_generator  generation with a KV cache (generate.c).
 * Training (rt_trainer) is rt_train.h; files and data sources (.npy,
 * safetensors, weight maps, training data) are rt_io.h.
 * Tensors are views: a type, a buffer and an offset. Host tensors
 * (rt_tensor_new) own their memory.
 */
#ifndef TGC_RUNTIME_H
#define TGC_RUNTIME_H

#include <stdio.h>

#include "ir.h"
#include "analysis.h"

typedef struct rt_device rt_device;
typedef struct rt_backend rt_backend;
typedef struct rt_action rt_action;
typedef struct rt_comm rt_comm; /* runtime/comm/comm.h: the ranks a multi-rank run talks to */
struct cg_cuda_api;             /* runtime/cudaapi/cuda_api.h: the CUDA entry points (rt_backend.comm_table) */

/* Device memory: ptr is a host pointer on host-memory backends (cpu), a
 * device address elsewhere (never dereferenced on the host there). */
typedef struct {
  rt_device *dev;
  void *ptr;
  size_t bytes;
  bool owned;   /* allocated by rt_buffer_alloc (false: wraps the caller's host memory) */
} rt_buffer;

/* A dense row-major tensor: bf16/f16 are stored as uint16 bit patterns,
 * bool as one byte. data = buf->ptr + offset (on a host-memory backend, or
 * a host tensor, a host pointer the kernels read). buf NULL: a host tensor
 * that owns data (rt_tensor_new / rt_tensor_free). */
typedef struct {
  ir_type type;
  void *data;
  size_t nbytes;
  rt_buffer *buf;
  size_t offset;
} rt_tensor;

rt_tensor *rt_tensor_new(const ir_type *type);     /* a host tensor, zero-filled; NULL if out of memory */
void rt_tensor_free(rt_tensor *t);                 /* host tensors only */
/* A view of type t at offset off of b. */
rt_tensor rt_tensor_view(rt_buffer *b, size_t off, const ir_type *t);
double rt_tensor_get(const rt_tensor *t, int64_t i);          /* element i as double */
void rt_tensor_set(rt_tensor *t, int64_t i, double v);        /* rounds to the dtype */
/* Fills with a constant. */
void rt_tensor_fill(rt_tensor *t, double v);

/* Counter-based deterministic random numbers: the same (seed, stream, index)
 * always gives the same number on every machine and thread count. */
uint64_t rt_hash_name(const char *name);
uint64_t rt_dropout_key(uint64_t seed, int64_t step, int micro); /* dropout's key (ops.def) */
double rt_random_uniform(uint64_t seed, uint64_t stream, uint64_t index);   /* [0, 1) */
double rt_random_normal(uint64_t seed, uint64_t stream, uint64_t index);    /* N(0, 1) */
/* Inputs: floats standard normal, integers uniform in [0, int_high), bool 0/1;
 * stream = hash of name, so each input is independent of the others. */
void rt_fill_random(rt_tensor *t, uint64_t seed, const char *name, int64_t int_high);
/* Initializes a parameter from its ir_init with stream = hash of its name. */
void rt_init_param(rt_tensor *t, const ir_value *param, uint64_t seed);

/* Gives communicator c the axes of m of size > 1 (names pp, dp, tp; the
 * sizes must multiply to its ranks, else -1 and "--mesh dp=2 needs 2 ranks,
 * but tgc runs as 1 process (start it with mpirun -np 2)") and fills
 * coord[IR_NUM_AXES] (NULL: not) with this rank's coordinates (0 on an axis
 * of size 1). Every rank calls it. */
int rt_mesh_bind(rt_comm *c, const ir_mesh *m, int *coord, char *err, size_t errlen);

/* ---- shards (shard.c) ----
 * One rank's block of a whole value (host tensors; s the block's layout,
 * coord the rank's coordinates by ir_axis): extract copies it out of the
 * whole value, insert puts it back. rt_init_param_shard initializes a
 * parameter's block with exactly the values one device would give those
 * elements (it makes the whole parameter on the host, then takes the block). */
int rt_shard_extract(const rt_tensor *whole, rt_tensor *local, const ir_shard *s, const ir_mesh *m, const int *coord,
                     char *err, size_t errlen);
int rt_shard_insert(rt_tensor *whole, const rt_tensor *local, const ir_shard *s, const ir_mesh *m, const int *coord,
                    char *err, size_t errlen);
int rt_init_param_shard(rt_tensor *local, const ir_value *param, uint64_t seed, const ir_mesh *m, const int *coord,
                        char *err, size_t errlen);
/* A block of a padded layout (a padded vocabulary: ir_shard.pad) without
 * its padding, as a state file holds it (rt_shard_unpad: the elements whose
 * global index is in the whole value, a prefix along each padded dim), and
 * back (rt_shard_repad: the block of the layout, zeros for the padding;
 * whole: the whole value's type). New tensors (NULL: out of memory). */
rt_tensor *rt_shard_unpad(const rt_tensor *local, const ir_shard *s, const ir_mesh *m, const int *coord);
rt_tensor *rt_shard_repad(const rt_tensor *stored, const ir_shard *s, const ir_mesh *m, const ir_type *whole);
/* A pipelined plain graph's outputs (tgc run --mesh with pp > 1) brought
 * whole to stage 0: each rank ran its stage's graph `stage` (whose outputs
 * stage_out[k] are whole on dp and tp: the shard pass makes them so) and
 * every output of `whole` (the unsharded graph, by name) is made on at
 * least one stage; the lowest such stage sends it along pp to stage 0 (at
 * run time, the sends and receives in output order). On stage 0, out[i]
 * receives output i of `whole` (a new host tensor; the caller frees); on
 * the other stages out[] stays NULL. Collective over pp: every rank calls. */
int rt_outputs_to_first_stage(rt_comm *c, const ir_graph *whole, const ir_graph *stage, rt_tensor *const *stage_out,
                              rt_tensor **out, char *err, size_t errlen);

/* Where the time of graph runs went, by op (kernel wall time, accumulated
 * over every run given the same profile). Filled only when a caller sets a
 * profile: timing every kernel costs two clock reads per node. */
typedef struct {
  double seconds[IR_NUM_OPS];
  int64_t calls[IR_NUM_OPS];
  double fill_seconds;   /* the program's fill actions: zero-filling results (the arena is allocated once) */
  int64_t fills;         /* ... how many ran */
  double fill_bytes;     /* ... and the bytes they wrote */
  double total_seconds;  /* whole program runs */
} rt_profile;

/* ---- devices (device.c) ---- */

/* What a device did, counted by the runtime around every backend call. */
typedef struct {
  size_t bytes_in_use, peak_bytes;          /* device memory allocated (now, most ever) */
  int64_t allocs, frees;
  size_t bytes_uploaded, bytes_downloaded;  /* host -> device, device -> host */
  size_t bytes_copied, bytes_filled;        /* device -> device, fills */
  int64_t uploads, downloads, copies, fills;
  int64_t async_uploads;                    /* of the uploads, from page-locked host memory (rt_upload_async) */
  int64_t kernels;                          /* nodes run */
} rt_device_stats;

/* One action of a program (exec.c builds the list from the memory plan
 * once, when the program is made; each run walks it in order):
 *   RT_ACT_FILL        zero result `index` of the node (an IR_OPF_ZEROED
 *                      op accumulates into its results), a device fill
 *   RT_ACT_KERNEL      the node's computation: the backend's run, with
 *                      what its prepare bound in `impl` (the CPU: the
 *                      node's entry of its kernel table; CUDA: the lowered
 *                      step's kernels, cuBLASLt products, copies, memsets)
 *   RT_ACT_COLLECTIVE  a communication op or mesh_slice: collective
 *                      `index` of the program, bound to its communicator
 *                      and its attributes read when the program was made
 * A view step (reshape, a shard hint that moves nothing) has no action.
 * in / out are the node's operands and results as tensors of the program:
 * arena tensors fixed when it is made, inputs' and params' rebound at each
 * run at the same addresses, so an action's pointers never change. */
typedef enum { RT_ACT_FILL, RT_ACT_KERNEL, RT_ACT_COLLECTIVE } rt_action_kind;
struct rt_action {
  rt_action_kind kind;
  int step;                      /* its step of the memory plan (plan->steps[step]) */
  const ir_node *node;
  const rt_tensor *const *in;    /* node->n_in operands */
  rt_tensor *const *out;         /* node->n_out results */
  int index;                     /* FILL: which result; COLLECTIVE: which collective */
  void *impl;                    /* KERNEL: the backend's, set by its prepare */
};
const char *rt_action_kind_name(rt_action_kind k); /* "fill" "kernel" "collective" */

struct rt_backend {
  const char *name;
  bool host_memory;  /* device pointers are host pointers: host tensors are bound without copies */
  /* context: 0, or -1 with a message */
  int (*open)(rt_device *d, char *err, size_t errlen);
  void (*close)(rt_device *d);
  /* memory (bytes may be 0; pointers from alloc are 256-byte aligned) */
  int (*alloc)(rt_device *d, size_t bytes, void **ptr, char *err, size_t errlen);
  void (*free)(rt_device *d, void *ptr);
  int (*upload)(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen);
  int (*download)(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen);
  int (*copy)(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen);
  /* n bytes at dst = the pattern of pattern_bytes (1, 2, 4 or 8) repeated */
  int (*fill)(rt_device *d, void *dst, size_t n, const void *pattern, size_t pattern_bytes, char *err, size_t errlen);
  /* programs: prepare once per program (state: what the backend keeps;
   * it may set each kernel action's `impl`: what run calls for it), run
   * one kernel action on device tensors (results preallocated; zero-filled
   * by the fill actions before it), release. prepare may be NULL. */
  bool (*supports_op)(const ir_node *n);
  int (*prepare)(rt_device *d, const ir_graph *g, const pass_plan *plan, rt_action *actions, int n_actions,
                 void **state, char *err, size_t errlen);
  int (*run)(rt_device *d, void *state, const rt_action *a, char *err, size_t errlen);
  /* optional: one whole run of a prepared program, its tensors bound:
   * walk(ctx, first, end) runs actions [first, end) (prepare's) in order
   * (fills, kernels through run, collectives). A GPU backend may capture
   * walks once as CUDA graphs and launch them in place of later walks;
   * before capturing or launching one it calls join(ctx, first, end),
   * which orders those actions after the collectives still in flight
   * whose bytes they touch (the comm layer's overlap; outside a capture).
   * NULL: the executor walks all of them. */
  int (*run_program)(rt_device *d, void *state, int (*walk)(void *ctx, int first, int end, char *err, size_t errlen),
                     int (*join)(void *ctx, int first, int end, char *err, size_t errlen), void *ctx, char *err,
                     size_t errlen);
  void (*release)(rt_device *d, void *state);
  /* GPU backends: the CUDA table with NCCL loaded for this device (its
   * context current), for the comm layer's nccl implementation; NULL (the
   * hook, or -1 and a message) where there is none */
  int (*comm_table)(rt_device *d, const struct cg_cuda_api **api, char *err, size_t errlen);
  /* GPU backends: page-locked host memory (cuMemHostAlloc), which an
   * upload_async reads on the device's stream while the host goes on; the
   * host writes it again only after host_wait (every such upload has read
   * its source). host_alloc gives *ptr NULL where the device has none to
   * give (TGC_CUDA_PINNED=0). NULL hooks: none (host-memory backends). */
  int (*host_alloc)(rt_device *d, size_t bytes, void **ptr, char *err, size_t errlen);
  void (*host_free)(rt_device *d, void *ptr);
  int (*upload_async)(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen);
  int (*host_wait)(rt_device *d, char *err, size_t errlen);
};

/* How to open a device: which one, and backend-specific checks. */
typedef struct {
  int index;               /* --device N: the backend's device number (0: the first) */
  bool racecheck;          /* cuda-emu: check shared-memory races (--racecheck) */
} rt_device_options;

struct rt_device {
  const rt_backend *backend;
  rt_device_options opts;
  void *impl;              /* the backend's context */
  rt_device_stats stats;
};

extern const rt_backend rt_cpu_backend;
/* cuda/backend.c: a GPU through the real CUDA libraries (dlopen'd), and the
 * same code over the cuda-emu emulator's table (rt_cuda.h). */
extern const rt_backend rt_cuda_backend, rt_cuda_emu_backend;
/* The backends `--backend NAME` knows (backends.c): NULL if none is called name. */
const rt_backend *rt_backend_lookup(const char *name);
int rt_backend_count(void);
const rt_backend *rt_backend_at(int i);
/* The CPU backend's kernel of n (its kernel table; also what a test backend reuses). */
int rt_cpu_run_node(const ir_node *n, const rt_tensor *const *in, rt_tensor *const *out, char *err, size_t errlen);

rt_device *rt_device_open(const rt_backend *b, char *err, size_t errlen);  /* default options */
rt_device *rt_device_open_with(const rt_backend *b, const rt_device_options *o, char *err, size_t errlen);
void rt_device_close(rt_device *d);
/* A buffer of device memory (NULL + message when out of memory). */
rt_buffer *rt_buffer_alloc(rt_device *d, size_t bytes, char *err, size_t errlen);
/* The caller's host memory as a buffer of a host-memory device (not freed by rt_buffer_free's owner). */
rt_buffer rt_buffer_wrap(rt_device *d, void *host, size_t bytes);
void rt_buffer_free(rt_buffer *b);       /* rt_buffer_alloc's buffers */
int rt_upload(const rt_tensor *dst, const void *src, char *err, size_t errlen);   /* dst->nbytes */
/* Host tensors for what the host hands a device step after step (the
 * trainer's batch): rt_pinned_tensor_new gives one whose data is the
 * device's page-locked host memory, or NULL with err empty where the device
 * has none (a host-memory backend; the caller uses rt_tensor_new), NULL with
 * err when it fails. rt_upload_async uploads such a tensor's data on the
 * device's stream and returns before the copy is done: the host may write
 * the source again only after rt_host_wait. */
rt_tensor *rt_pinned_tensor_new(rt_device *d, const ir_type *type, char *err, size_t errlen);
void rt_pinned_tensor_free(rt_device *d, rt_tensor *t);
int rt_upload_async(const rt_tensor *dst, const rt_tensor *src, char *err, size_t errlen); /* same nbytes */
int rt_host_wait(rt_device *d, char *err, size_t errlen);
int rt_download(void *dst, const rt_tensor *src, char *err, size_t errlen);       /* src->nbytes */
int rt_copy(const rt_tensor *dst, const rt_tensor *src, char *err, size_t errlen); /* same nbytes */
int rt_fill_bytes(rt_device *d, void *dst, size_t n, const void *pattern, size_t pattern_bytes, char *err,
                  size_t errlen);
/* Every element of t = v (rounded to its dtype). */
int rt_fill_value(const rt_tensor *t, double v, char *err, size_t errlen);
/* A device tensor of its own buffer (rt_device_tensor_free), zero-filled. */
rt_tensor *rt_device_tensor_new(rt_device *d, const ir_type *t, char *err, size_t errlen);
void rt_device_tensor_free(rt_tensor *t);

/* ---- programs (exec.c) ---- */

typedef struct rt_program rt_program;
typedef struct {
  /* NULL, or per input / param: results may be computed in its buffer
   * (pass_plan_options), which the run then leaves as garbage unless an
   * output lives there (rt_program_output says where each output is) */
  const bool *donate_inputs, *donate_params;
  rt_profile *profile;    /* NULL, or where runs add their kernel times */
  rt_comm *comm;          /* NULL (one process), or the communicator of a sharded graph's mesh
                           * (rt_mesh_bind) */
} rt_program_options;
/* Plans g (pass_memplan), allocates its arena on d, prepares the backend. */
rt_program *rt_program_new(rt_device *d, const ir_graph *g, const rt_program_options *o, char *err, size_t errlen);
void rt_program_free(rt_program *p);
/* Runs the plan: inputs[i] / params[i] are tensors on the program's device
 * of g's input / param types. 0, or -1 with "file:line:col: message". */
int rt_program_run(rt_program *p, rt_tensor *const *inputs, rt_tensor *const *params, char *err, size_t errlen);
/* Output i of the last run: a view into the arena, or into the bound input /
 * param buffer it lives in; valid until the next run or rebinding. */
const rt_tensor *rt_program_output(const rt_program *p, int i);
const pass_plan *rt_program_plan(const rt_program *p);
/* The program's actions, in the order a run performs them (n: how many). */
const rt_action *rt_program_actions(const rt_program *p, int *n);
/* One line per action, numbered: "   3 kernel     %h = matmul  [step 2]",
 * "   4 fill       %dw: 4096 bytes  [step 3]", "   9 collective %g = all_reduce
 * over dp (2 ranks)  [step 7]" (tgc run --print-actions, tests). */
void rt_program_print_actions(FILE *f, const rt_program *p);
size_t rt_program_arena_bytes(const rt_program *p);
rt_device *rt_program_device(const rt_program *p);

/* One run of g on backend b from host tensors: the convenience over the
 * program API for commands and tests. inputs[i] / params[i] are host
 * tensors (bound without copies on host-memory backends, uploaded
 * otherwise); outputs[i] receive new host tensors (caller frees). */
typedef struct {
  size_t peak_bytes;     /* out: the arena (what the device allocated for the run's values) */
  size_t total_allocs;   /* out: device allocations */
  int kernels_run;       /* out */
  rt_profile *profile;   /* in: NULL, or where to add this run's kernel times */
  /* in: NULL, or per input / param: donated (the tensor's contents are
   * garbage after the call, even on failure) */
  const bool *donate_inputs, *donate_params;
  const rt_device_options *device; /* in: NULL, or how to open the device */
  rt_comm *comm;         /* in: NULL (one process), or the communicator of g's mesh (a
                          * sharded graph: rt_mesh_bind; host memory, the collectives through it) */
  FILE *print_actions;   /* in: NULL, or where to print the program's actions before it runs */
} rt_stats;
int rt_run(const rt_backend *b, const ir_graph *g, rt_tensor *const *inputs, rt_tensor *const *params,
           rt_tensor **outputs, rt_stats *stats, char *err, size_t errlen);

/* ===================================================================== */
/* generate.c — generation with a KV cache                                */
/* ===================================================================== */
/* The prefill and decode graphs of passes/kv_cache.c (already through the
 * pipeline) prepared once on a device of backend b, as two programs sharing
 * the parameters (params / dec_params: host tensors of each graph's
 * parameters, uploaded once; one tensor where both give the same one) and the cache (the decode graph's donated inputs
 * cache.k.L / cache.v.L: the plan computes the new cache in them).
 * prefill: ids[0..n) (n <= T) at positions 0..n-1, the cache of the window
 * filled; decode (its input pos_input the position i32[1]): token id at position pos (< T) read and written in the
 * cache. Both write the V logits of the last row into logits. 0, or -1
 * with err. */
typedef struct rt_generator rt_generator;
typedef struct {
  rt_comm *comm; /* NULL (one device), or the communicator of the graphs' mesh (rt_mesh_bind); the
                  * graphs' cache inputs and outputs are this rank's kv heads (the shard pass's rule) */
} rt_generator_options;
rt_generator *rt_generator_new(const rt_backend *b, const rt_device_options *dopt, const ir_graph *prefill,
                               const ir_graph *decode, int pos_input, rt_tensor *const *params,
                               rt_tensor *const *dec_params, const rt_generator_options *go, char *err,
                               size_t errlen);
int rt_generator_prefill(rt_generator *r, const int32_t *ids, int64_t n, float *logits, char *err, size_t errlen);
int rt_generator_decode(rt_generator *r, int32_t id, int64_t pos, float *logits, char *err, size_t errlen);
size_t rt_generator_arena_bytes(const rt_generator *r, bool decode);
/* Device memory of generation. predicted: from the graphs and their memory
 * plans alone: the parameters (shared ones once), every input of both
 * graphs (the KV cache is the decode graph's donated cache.* inputs, where
 * the plan also places the written cache) and both arenas; cache: those
 * cache inputs. measured: the device's allocation counter
 * (rt_device_stats.peak_bytes) since the generator opened it, counted
 * around every backend allocation. */
typedef struct {
  size_t predicted, measured, cache;
} rt_generator_memory;
rt_generator_memory rt_generator_memory_use(const rt_generator *r);
void rt_generator_free(rt_generator *r);


#endif
