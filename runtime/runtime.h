/* runtime/runtime.h — tensors, devices and their buffers, the
 * backend-neutral executor, training, and I/O (.npy, safetensors, data).
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
 *   rt_trainer  training on any device (train.c).
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

/* Reads a .npy file (format v1/v2/v3; little-endian <f8 <f4 <f2 <i4 <i8 and
 * |b1, C order) into a tensor of the file's dtype. Any malformation
 * (bad magic, header, dtype, shape, truncated data, trailing bytes) gives
 * NULL and "path: message" in err. */
rt_tensor *rt_npy_read(const char *path, char *err, size_t errlen);
/* Writes format v1.0; bf16 tensors are written as <f4 (numpy has no bf16). */
int rt_npy_write(const char *path, const rt_tensor *t, char *err, size_t errlen);
/* The descr a .npy file gives dtype dt ("<f4", "<i8", ...; bf16: "<f4"); NULL if none. */
const char *rt_npy_descr(ir_dtype dt);

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
   * walks once as CUDA graphs and launch them in place of later walks.
   * NULL: the executor walks all of them. */
  int (*run_program)(rt_device *d, void *state, int (*walk)(void *ctx, int first, int end, char *err, size_t errlen),
                     void *ctx, char *err, size_t errlen);
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
void rt_generator_free(rt_generator *r);

/* ===================================================================== */
/* safetensors.c — training state files                                   */
/* ===================================================================== */
/* The safetensors format: an 8-byte little-endian header length N, N bytes
 * of JSON {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
 * ..., "__metadata__": {"key": "string", ...}}, then the tensor bytes
 * (little-endian, row-major; offsets relative to the end of the header).
 * Writing goes to a fresh PATH.tmp.<pid>.<random> (two writers never share
 * one), is flushed and fsynced, renamed over PATH, and the directory is
 * fsynced: a crash leaves either the old file or the new. An existing PATH
 * that is not a regular file (a device, folder, FIFO, symbolic link) is
 * refused, never replaced.
 * Reading refuses anything malformed (short file, header length beyond the
 * file, bad JSON, unknown dtype, bad shape, offsets out of range, overlapping
 * or leaving holes, size not matching the shape) with "PATH: problem" in err. */
/* Every file written carries metadata "data_crc32": the CRC-32 (zlib) of
 * all tensor bytes in file order, 8 lowercase hex digits. Reading checks it
 * when the file has it (files from other writers may not). */
#define RT_SAFETENSORS_CRC_KEY "data_crc32"
/* ... and "header_crc32": the CRC-32 of the header's bytes (padding
 * included) with these 8 digits read as "00000000", written in the compact
 * form "header_crc32":"<8 hex digits>"; checked when present. */
#define RT_SAFETENSORS_HEADER_CRC_KEY "header_crc32"
typedef struct {
  const char *name;
  const rt_tensor *t;
} rt_named_tensor;
typedef struct {
  const char *key, *value;
} rt_meta_entry;
int rt_safetensors_write(const char *path, const rt_named_tensor *tensors, int n, const rt_meta_entry *meta,
                         int n_meta, char *err, size_t errlen);
/* Before a long job that will save to path: refuses a path that exists and
 * is not a regular file, proves its folder writable (creates and removes a
 * temporary file), and removes temporary files of path left by writers that
 * are no longer running (*removed counts them). 0, or -1 with err. */
int rt_safetensors_check_target(const char *path, int *removed, char *err, size_t errlen);
/* The crash-safe write every file above gets, for any content: fill(f, ctx)
 * writes it into a fresh temporary file next to path (0, or -1 with errno
 * set), which is flushed, fsynced and renamed over path, then the folder is
 * fsynced. On any failure path is left as it was, the temporary file is
 * removed, and err reads "PATH: problem: <errno text>". Refuses a path that
 * exists and is not a regular file. */
int rt_write_file_atomic(const char *path, int (*fill)(FILE *f, void *ctx), void *ctx, char *err, size_t errlen);

typedef struct rt_safetensors rt_safetensors;
rt_safetensors *rt_safetensors_read(const char *path, char *err, size_t errlen);
/* The header alone (metadata and tensor names; no tensor is read, count is 0). */
rt_safetensors *rt_safetensors_read_header(const char *path, char *err, size_t errlen);
void rt_safetensors_free(rt_safetensors *f);
int rt_safetensors_count(const rt_safetensors *f);
const char *rt_safetensors_name(const rt_safetensors *f, int i);
const rt_tensor *rt_safetensors_tensor(const rt_safetensors *f, int i);
const rt_tensor *rt_safetensors_find(const rt_safetensors *f, const char *name);   /* NULL if absent */
const char *rt_safetensors_meta(const rt_safetensors *f, const char *key);         /* NULL if absent */
int rt_safetensors_meta_count(const rt_safetensors *f);
const char *rt_safetensors_meta_key(const rt_safetensors *f, int i);              /* in file order */

/* ===================================================================== */
/* data.c — training data sources                                         */
/* ===================================================================== */
/* A source fills a model's inputs for (seed, step, micro-batch): a pure
 * function of the three, so a resumed run sees exactly the same batches.
 * Specs: "xor", "regression" (vector tasks), "copy", "reverse", "sort"
 * (sequence tasks, tokens uniform in [0, vocab)), "text:PATH" (bytes; the
 * targets are the next bytes), "tokens:PATH" (uint16 little-endian tokens,
 * raw or in llm.c's format: a 1 KiB header of 256 int32, magic 20240520,
 * version 1, the token count; a .bin file must have it), "npy:NAME=PATH,..."
 * (.npy arrays bound to the inputs of those names; data.c says how their
 * samples are shuffled per epoch and the last partial batch dropped).
 *
 * Binding, by input name (rt_data_bind checks every model input is fed):
 *   vector tasks: X laid out [features, batch] or x [batch, features]
 *     (float); Y or y [batch] or [batch, 1] targets (float). The task's own
 *     features come first (xor: 2, regression: features - 1); the next
 *     feature is a constant 1 (a bias feature), any further ones are 0.
 *   sequence tasks: tokens and targets, integer [batch, T]. Text and token
 *     files give random windows of T + 1 tokens: tokens = window[0..T),
 *     targets = window[1..T].
 *   npy: every input named, every array [N, the input's dims after its
 *     batch dim 0]; floats into float inputs, integers (<i4, <i8) into
 *     integer ones. The targets (accuracy) are the integer input named
 *     targets, y or Y.
 * batch and T are read from the model's input shapes. */
typedef struct rt_data rt_data;
/* vocab: the sequence tasks' vocabulary (0 = take it from the model). */
rt_data *rt_data_open(const char *spec, int64_t vocab, char *err, size_t errlen);
void rt_data_free(rt_data *ds);
const char *rt_data_spec(const rt_data *ds);
bool rt_data_is_sequence(const rt_data *ds);
/* Checks g's inputs fit the source and remembers the layout; fills in the
 * vocabulary from the model when it was 0. Returns 0 or -1 with err. */
int rt_data_bind(rt_data *ds, const ir_graph *g, char *err, size_t errlen);
/* The same for the first n_inputs inputs of g (a step graph's data). */
int rt_data_bind_inputs(rt_data *ds, const ir_graph *g, int n_inputs, char *err, size_t errlen);
/* Samples (vector tasks) or tokens (sequence tasks) in one batch. */
int64_t rt_data_batch_items(const rt_data *ds);
/* Fills inputs[i] (tensors of g->inputs[i]'s type, g as bound). */
int rt_data_fill(rt_data *ds, uint64_t seed, int64_t step, int micro, rt_tensor *const *inputs, char *err,
                 size_t errlen);
/* The index of the targets input in g->inputs (-1 if none). */
int rt_data_targets_input(const rt_data *ds);
/* K micro-batches a step (npy: batch q = step K + micro; default 1). */
void rt_data_set_micro_batches(rt_data *ds, int k);
/* Evaluation: batch k (0 <= k < rt_data_eval_batches) of the source in
 * order (files: consecutive windows from the start, arrays: samples in
 * file order; tasks: batches no training step draws). */
int64_t rt_data_eval_batches(const rt_data *ds);  /* INT64_MAX for tasks */
int rt_data_fill_eval(rt_data *ds, uint64_t seed, int64_t k, rt_tensor *const *inputs, char *err, size_t errlen);
/* The batch dim of g->inputs[i] as bound (tokens, targets, x, y: 0; X:
 * 1), -1 when the source does not feed input i. */
int rt_data_batch_dim(const rt_data *ds, int i);

/* ===================================================================== */
/* train.c — the training loop, on any backend                            */
/* ===================================================================== */
/* Runs a training program (pass_build_train: a step graph and an update
 * graph, bound by role) on a device. The trainer keeps, in device memory
 * across steps: the parameters, the optimizer states, the data inputs,
 * the gradient sums (K > 1), the loss and correct-prediction sums and the
 * lr / step scalars. One step:
 *   fill the sums with -0.0; for each of K micro-batches fill the data
 *   inputs from the source (seed, step, k: written in place on a host-memory
 *   device, uploaded otherwise) and run the step program (the sums are
 *   donated: computed in place); upload lr (the schedule's) and step + 1;
 *   run the update program with the states and parameters donated (the new
 *   ones are computed in their buffers; the trainer follows the plan to know
 *   which buffer holds which); download the logged scalars: loss,
 *   accuracy, and the count of Inf / NaN elements in the new parameters.
 * Nothing is allocated and nothing else crosses to the host in the steady
 * state (rt_device_stats counts it). A step that makes a parameter
 * non-finite fails ("parameters became non-finite ('NAME': K of N elements
 * are Inf or NaN; the loss was L)") and the trainer then refuses further
 * steps and saves, so the last good state on disk stays. Deterministic: the
 * same config gives bit-identical parameters, and save + resume continues
 * exactly (tests/unit/test_train_resume.c). */
typedef enum { RT_SCHEDULE_CONSTANT, RT_SCHEDULE_COSINE } rt_schedule_kind;
typedef struct {
  rt_schedule_kind kind;
  double lr;            /* the peak learning rate */
  int64_t warmup;       /* linear warmup over the first `warmup` steps: lr (s + 1) / warmup */
  int64_t total;        /* cosine: decays from lr (after warmup) to floor * lr at step total */
  double floor;         /* cosine: the final lr as a fraction of lr (e.g. 0.1) */
} rt_schedule;

/* ---- the settings a state file records (io/settings.c) ----
 * What `tgc train --save` writes as metadata beside the tensors and what
 * --resume and `tgc eval` read back: one table parses both the flag
 * (`--lr X`) and the saved value, so a resumed setting gets the flag's
 * checks (a state saying lr=-1 is refused, naming the file). The *_set
 * flags tell given from default. */
typedef struct {
  const char *data;
  const char *eval_data;   /* --eval-data SOURCE: held-out data, evaluated every eval_every steps */
  int64_t eval_every, eval_batches;
  int64_t steps, batch, seq_len, vocab, warmup;
  int optimizer, micro_batches; /* optimizer: a pass_optimizer_kind */
  int dtype;               /* --dtype: 0 the model's (f32), 1 bf16, 2 f16 (mixed precision) */
  rt_schedule_kind schedule;
  double lr, clip, weight_decay;
  uint64_t seed;
  bool data_set, eval_data_set, eval_every_set, eval_batches_set, steps_set, lr_set, opt_set, sched_set, warmup_set,
      mb_set, clip_set, wd_set, seed_set, batch_set, seq_set, vocab_set, dtype_set;
} rt_train_settings;
enum { RT_SETTINGS_MAX = 24 };
int rt_settings_count(void);
const char *rt_settings_flag(int k);      /* "--lr" ...; NULL out of range */
int rt_settings_find(const char *key);    /* the row of metadata key ("schedule"), -1 if none */
/* Parses v into setting k of s; flag: the spelling to name in a message
 * (NULL: the row's). 0, or -1 after reporting "FLAG V: expected ...". */
int rt_settings_set(rt_train_settings *s, int k, const char *flag, const char *v, ir_diag *d);
/* Applies the settings saved in state file f (read from path) to those not
 * given as flags; every saved value is checked, used or not, and a key tgc
 * does not write is an error ("PATH: unknown metadata key ..."). 0 or -1. */
int rt_settings_apply_saved(rt_train_settings *s, const rt_safetensors *f, const char *path, ir_diag *d);
/* The settings as metadata (at most RT_SETTINGS_MAX entries; text holds the
 * formatted numbers): the sizes and eval settings only when given, the seed
 * left to rt_trainer_save. Returns the count. */
int rt_settings_meta(const rt_train_settings *s, rt_meta_entry *meta, char text[][40]);
/* An integer flag that is not a setting: text in [lo, INT64_MAX], else -1
 * after reporting "FLAG V: expected an integer >= LO". */
int rt_settings_parse_int(const char *flag, const char *v, int64_t lo, int64_t *out, ir_diag *d);
/* Integer text in [lo, hi]: 0, or -1 with "expected ..." in why. */
int rt_settings_check_int(const char *v, int64_t lo, int64_t hi, int64_t *out, char *why, size_t n);
/* v cut to 40 bytes, non-printing bytes as '?', for messages. */
const char *rt_settings_shown(const char *v, char buf[48]);
/* The learning rate of 0-based step s. */
double rt_schedule_lr(const rt_schedule *s, int64_t step);

typedef struct {
  const pass_training *prog;   /* the graphs and their bindings (kept alive by the caller) */
  const rt_backend *backend;   /* NULL: the cpu */
  rt_device_options device;    /* which device, and its checks */
  rt_data *data;               /* rt_trainer_new binds it to the step graph's data inputs; a
                                * sharded program's source must be bound to the whole model
                                * already (its batch is made whole, then each rank takes its block) */
  rt_comm *comm;               /* a sharded program (its graphs' mesh has more than one rank): the
                                * communicator of exactly that many ranks; the trainer sets its mesh */
  bool nccl;                   /* sharded on a GPU backend: the graphs' collectives through NCCL on
                                * device memory (a communicator the trainer opens over comm's ranks),
                                * not through comm and host memory */
  uint64_t seed;
  rt_schedule schedule;
  rt_profile *profile;         /* NULL, or kernel times of the step graph runs */
  rt_profile *update_profile;  /* NULL, or kernel times of the update graph runs */
  double loss_scale_init;      /* dynamic loss scaling: the first scale (0: RT_LOSS_SCALE_INIT) */
} rt_train_config;

typedef struct {
  int64_t step;         /* steps done after this one */
  double loss;          /* mean over the micro-batches */
  double accuracy;      /* token accuracy (argmax of logits vs targets), -1 when not available */
  double lr;            /* the learning rate used */
  size_t peak_bytes;    /* the step program's arena (its activations: planned = allocated) */
  double loss_scale;    /* dynamic loss scaling (f16): the scale this step used, else 0 */
  bool skipped;         /* ... and its gradients overflowed: the update was skipped, the scale halved */
} rt_step_result;
/* Dynamic loss scaling (a program built with loss_scaling): the scale
 * starts at 2^16, halves after a step whose gradients overflow (that
 * step's update is skipped: parameters and states keep their values) and
 * doubles after 2000 steps without one — PyTorch's GradScaler defaults. The
 * scale is uploaded when it changes; each step downloads one more scalar,
 * the overflow count. */
#define RT_LOSS_SCALE_INIT 65536.0
#define RT_LOSS_SCALE_BACKOFF 0.5
#define RT_LOSS_SCALE_INTERVAL 2000

/* The most steps a run can count: the update reads the step as an f64. */
#define RT_MAX_STEP (INT64_C(1) << 53)
typedef struct rt_trainer rt_trainer;
rt_trainer *rt_trainer_new(const rt_train_config *c, char *err, size_t errlen);
void rt_trainer_free(rt_trainer *t);
int rt_trainer_step(rt_trainer *t, rt_step_result *r, char *err, size_t errlen);
int64_t rt_trainer_steps_done(const rt_trainer *t);
int rt_trainer_num_params(const rt_trainer *t);
/* Parameter i (step graph order) on the trainer's device: host memory on a
 * host-memory device; read it with rt_download elsewhere. */
const rt_tensor *rt_trainer_param(const rt_trainer *t, int i);
rt_device *rt_trainer_device(const rt_trainer *t);
/* What this rank's communication ops move in one training step, by the
 * graphs (pass_comm_tally_of: the step graph K times, then the update):
 * what the comm layer's counters must show. */
void rt_trainer_comm_predicted(const rt_trainer *t, pass_comm_tally tally[IR_NUM_OPS][IR_NUM_AXES]);
/* What the evaluations so far moved (rt_trainer_eval: the eval graph's tally
 * times its runs): counted by the comm layer with the steps', taken off
 * before the steps' are compared with rt_trainer_comm_predicted. */
void rt_trainer_comm_eval(const rt_trainer *t, pass_comm_tally tally[IR_NUM_OPS][IR_NUM_AXES]);
/* The communicator the graphs' collectives run on (and count on): the
 * config's comm, or the trainer's NCCL one (rt_train_config.nccl). */
rt_comm *rt_trainer_comm(const rt_trainer *t);
/* The communication check of `tgc train` (its "comm" JSON and summary): what
 * this rank's collectives moved over `steps` training steps, by collective
 * kind and mesh axis, beside what the graphs predict per step. measured:
 * the comm layer's counters less what evaluations moved; equal: measured =
 * steps x predicted for every kind and axis (false when steps <= 0). */
typedef struct {
  pass_comm_tally measured[IR_NUM_COLLS][IR_NUM_AXES];  /* the steps' totals */
  pass_comm_tally predicted[IR_NUM_COLLS][IR_NUM_AXES]; /* per step */
  int64_t steps;
  bool equal;
} rt_comm_check;
void rt_trainer_comm_check(const rt_trainer *t, int64_t steps, rt_comm_check *out);
/* The arena bytes of the step and update programs. */
size_t rt_trainer_arena_bytes(const rt_trainer *t, bool update);
/* Pipeline parallelism: the most (micro-batch, chunk) pairs whose saved
 * activations (what a chunk's bwd reads of its fwd) the last step kept at
 * once, and the most bytes of them (*bytes; 0 and 0 without pp). */
int rt_trainer_pipeline_in_flight(const rt_trainer *t, size_t *bytes);
/* Pipeline parallelism: the device memory reserved for those saved
 * activations, one arena shared by the rank's chunks (0 without pp). */
size_t rt_trainer_pipeline_reserved(const rt_trainer *t);
/* The order of one step's halves on pipeline stage s of p with v chunks
 * and K micro-batches (pass_schedule; train.c describes them): op i is the
 * forward (bwd[i] false) or backward of micro-batch mb[i] on chunk
 * chunk[i] (virtual stage chunk p + s); arrays of 2 K v. Returns 2 K v, or
 * -1 (interleaved with K not a multiple of p). */
int rt_pipeline_order(int schedule, int p, int v, int s, int K, int *mb, int *chunk, bool *bwd);
/* Where a rank keeps its saved activations: the n ops of rt_pipeline_order
 * (v chunks), each forward filling a holding of bytes[its chunk] that its
 * backward reads last, placed in one arena (first fit over the order, then
 * a bounded search; train.c). off[o]: op o's holding's offset (a forward's
 * and its backward's are the same). Returns the arena's bytes: *least (if
 * given), the most bytes held at once, whenever a placement that small was
 * found, else more. */
size_t rt_pipeline_place(int n, const int *mb, const int *chunk, const bool *bwd, int v, const size_t *bytes,
                         size_t *off, size_t *least);
/* Evaluation (a program built with pass_train_options.eval): runs the eval
 * graph (the forward alone: no gradient, no update, compiled once by
 * rt_trainer_new) on the trainer's parameter buffers for eval batches
 * 0 .. batches-1 of src (rt_data_fill_eval; src bound to the whole model as
 * the training source, each rank taking its block of a batch as in
 * training), between steps. Leaves the parameters and the step alone. */
typedef struct {
  double loss;          /* the mean of the batches' losses */
  double accuracy;      /* token accuracy (argmax of logits vs targets), -1 when not available */
  double perplexity;    /* exp(loss) for a sequence source (a language model), else -1 */
  int64_t batches;
} rt_eval_result;
int rt_trainer_eval(rt_trainer *t, rt_data *src, int64_t batches, rt_eval_result *r, char *err, size_t errlen);
/* Saves params (by name), optimizer states ("opt/<state input name>") and
 * meta + {"format": "tgc-train-2", "step": N, "seed": S}. Refuses (and
 * writes nothing) when a parameter holds Inf or NaN. */
int rt_trainer_save(const rt_trainer *t, const char *path, const rt_meta_entry *meta, int n_meta, char *err,
                    size_t errlen);
/* weights.c — pretrained weights through a name map (docs/weights.md). A
 * map is a text file of "tgc-pattern = file-pattern [transform...]" and
 * "! GLOB" lines; NULL everywhere below means names as they are. */
typedef struct rt_weight_map rt_weight_map;
rt_weight_map *rt_weight_map_read(const char *path, char *err, size_t errlen);
void rt_weight_map_free(rt_weight_map *m);
/* Binds g's parameters from path (a safetensors file, or a folder holding
 * model.safetensors) through m: params[i] replaced by the value read. Every
 * parameter must find its tensor with its dtype and shape after the map's
 * transforms, and every tensor of the file must be used, matched by a "!"
 * line of m or by one of the NULL-terminated fnmatch globs skip (NULL: none). */
int rt_weights_load(const ir_graph *g, rt_tensor **params, const char *path, const rt_weight_map *m,
                    const char *const *skip, char *err, size_t errlen);
/* The same for the n values pv (parameters whose names and whole types the
 * file must give). */
int rt_weights_load_values(const ir_value *const *pv, int n, rt_tensor **params, const char *path,
                           const rt_weight_map *m, const char *const *skip, char *err, size_t errlen);
/* Writes g's parameters params under m's file names (inverse transforms;
 * split parts joined) as the safetensors file out. */
int rt_weights_export(const ir_graph *g, rt_tensor *const *params, const rt_weight_map *m, const char *out,
                      char *err, size_t errlen);
/* Loads a state saved for the same model and optimizer: every tensor must
 * be there with the same dtype and shape. Sets the step from the file. */
int rt_trainer_load(rt_trainer *t, const rt_safetensors *f, const char *path, char *err, size_t errlen);
/* Sets the trainer's parameters (each rank its block) from pretrained
 * weights (rt_weights_load_values through m); the optimizer state and the
 * step stay as rt_trainer_new left them (fresh). */
int rt_trainer_load_weights(rt_trainer *t, const char *path, const rt_weight_map *m, char *err, size_t errlen);

#endif
