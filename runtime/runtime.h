/* runtime/runtime.h — tensors, .npy I/O, seeded random numbers, and the
 * executors. The CPU backend (cpu.c + kernels) runs any verified ir_graph
 * with whole-tensor kernels: BLAS for matmul, OpenMP loops for the rest,
 * deterministic run to run. Backends are a small vtable (ggml-style).
 */
#ifndef TGC_RUNTIME_H
#define TGC_RUNTIME_H

#include "ir.h"

/* A dense row-major tensor. bf16/f16 are stored as uint16 bit patterns,
 * bool as one byte. data is owned by the tensor. */
typedef struct {
  ir_type type;
  void *data;
  size_t nbytes;
} rt_tensor;

rt_tensor *rt_tensor_new(const ir_type *type);     /* zero-filled; NULL if out of memory */
void rt_tensor_free(rt_tensor *t);
/* Keeps freed tensor buffers of 1 MiB and more, up to `bytes` in all, for
 * reuse by allocations of the same size (no fresh pages each training
 * step). 0 (the default) turns the cache off and frees what it holds. */
void rt_tensor_cache_limit(size_t bytes);
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

/* Counter-based deterministic random numbers: the same (seed, stream, index)
 * always gives the same number on every machine and thread count. */
uint64_t rt_hash_name(const char *name);
double rt_random_uniform(uint64_t seed, uint64_t stream, uint64_t index);   /* [0, 1) */
double rt_random_normal(uint64_t seed, uint64_t stream, uint64_t index);    /* N(0, 1) */
/* Inputs: floats standard normal, integers uniform in [0, int_high), bool 0/1;
 * stream = hash of name, so each input is independent of the others. */
void rt_fill_random(rt_tensor *t, uint64_t seed, const char *name, int64_t int_high);
/* Initializes a parameter from its ir_init with stream = hash of its name. */
void rt_init_param(rt_tensor *t, const ir_value *param, uint64_t seed);

/* Where the time of graph runs went, by op (kernel wall time, accumulated
 * over every run given the same profile). Filled only when a caller sets
 * rt_stats.profile: timing every kernel costs two clock reads per node. */
typedef struct {
  double seconds[IR_NUM_OPS];
  int64_t calls[IR_NUM_OPS];
  double alloc_seconds;  /* allocating (and zero-filling) results */
  double total_seconds;  /* the whole graph_compute calls */
} rt_profile;

typedef struct {
  size_t peak_bytes;     /* peak of live tensor bytes during the run */
  size_t total_allocs;
  int kernels_run;
  rt_profile *profile;   /* in: NULL, or where to add this run's kernel times */
  /* in: NULL, or per input / param: true = donated. A donated tensor stays
   * the caller's, but results may be computed in its buffer (it is then
   * garbage) and it may come back as one of the outputs (outputs[j] ==
   * inputs[i]): the caller frees each of its donated tensors that is not an
   * output, and must not read them after the call, even on failure. */
  const bool *donate_inputs, *donate_params;
} rt_stats;

/* A backend: what it supports and how it runs a graph. */
typedef struct rt_backend {
  const char *name;
  bool (*supports_op)(const ir_node *n);
  /* inputs[i] feeds g->inputs[i], params[i] feeds g->params[i]; outputs[i]
   * receives a new tensor for g->outputs[i] (caller frees). Returns 0, or -1
   * with a message in err. Inputs and params are not modified, unless the
   * caller donates them (rt_stats.donate_*). */
  int (*graph_compute)(const ir_graph *g, rt_tensor *const *inputs, rt_tensor *const *params,
                       rt_tensor **outputs, rt_stats *stats, char *err, size_t errlen);
} rt_backend;

extern const rt_backend rt_cpu_backend;

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

typedef struct rt_safetensors rt_safetensors;
rt_safetensors *rt_safetensors_read(const char *path, char *err, size_t errlen);
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
 * targets are the next bytes), "tokens:PATH" (uint16 little-endian tokens).
 *
 * Binding, by input name (rt_data_bind checks every model input is fed):
 *   vector tasks: X laid out [features, batch] or x [batch, features]
 *     (float); Y or y [batch] or [batch, 1] targets (float). The task's own
 *     features come first (xor: 2, regression: features - 1); the next
 *     feature is a constant 1 (a bias feature), any further ones are 0.
 *   sequence tasks: tokens and targets, integer [batch, T]. Text and token
 *     files give random windows of T + 1 tokens: tokens = window[0..T),
 *     targets = window[1..T].
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
/* Samples (vector tasks) or tokens (sequence tasks) in one batch. */
int64_t rt_data_batch_items(const rt_data *ds);
/* Fills inputs[i] (tensors of g->inputs[i]'s type, g as bound). */
int rt_data_fill(rt_data *ds, uint64_t seed, int64_t step, int micro, rt_tensor *const *inputs, char *err,
                 size_t errlen);
/* The index of the targets input in g->inputs (-1 if none). */
int rt_data_targets_input(const rt_data *ds);

/* ===================================================================== */
/* train.c — the training loop                                            */
/* ===================================================================== */
/* Runs a training graph and an update graph (passes/pass.h:
 * pass_build_training, pass_build_update) on the CPU backend.
 *   train:  inputs fed by the data source; params = the model's; outputs
 *           `loss` (first), optionally `logits` [B, T, V], and d_<param>
 *           for every param (matched by output name).
 *   update: params = the same params (by name, same order); inputs = P
 *           grads, S optimizer states, then lr and step (f64 scalars);
 *           outputs = P new params, then S new states.
 * One step: for each of K micro-batches fill the inputs from the data
 * source (seed, step, k) and run the training graph; sum the gradients on
 * the host in micro-batch order and divide by K; run the update graph with
 * lr from the schedule and step + 1. Parameters are initialized from the
 * seed (rt_init_param), states to zero. Deterministic: the same config gives
 * bit-identical parameters, and save + resume continues exactly.
 * After every update the parameters are checked for Inf/NaN: a step that
 * makes one non-finite fails ("parameters became non-finite ('NAME': K of
 * N elements are Inf or NaN; the loss was L)"), and the trainer then
 * refuses further steps and saves, so the last good state on disk stays. */
typedef enum { RT_SCHEDULE_CONSTANT, RT_SCHEDULE_COSINE } rt_schedule_kind;
typedef struct {
  rt_schedule_kind kind;
  double lr;            /* the peak learning rate */
  int64_t warmup;       /* linear warmup over the first `warmup` steps: lr (s + 1) / warmup */
  int64_t total;        /* cosine: decays from lr (after warmup) to floor * lr at step total */
  double floor;         /* cosine: the final lr as a fraction of lr (e.g. 0.1) */
} rt_schedule;
/* The learning rate of 0-based step s. */
double rt_schedule_lr(const rt_schedule *s, int64_t step);

typedef struct {
  const ir_graph *train, *update;
  rt_data *data;        /* rt_trainer_new binds it to train */
  uint64_t seed;
  int micro_batches;    /* K >= 1 */
  rt_schedule schedule;
  rt_profile *profile;         /* NULL, or kernel times of the training graph runs */
  rt_profile *update_profile;  /* NULL, or kernel times of the update graph runs */
} rt_train_config;

typedef struct {
  int64_t step;         /* steps done after this one */
  double loss;          /* mean over the micro-batches */
  double accuracy;      /* token accuracy (argmax of logits vs targets), -1 when not available */
  double lr;            /* the learning rate used */
  size_t peak_bytes;    /* the largest rt_stats.peak_bytes of the training graph runs */
} rt_step_result;

/* The most steps a run can count: the update reads the step as an f64. */
#define RT_MAX_STEP (INT64_C(1) << 53)
typedef struct rt_trainer rt_trainer;
rt_trainer *rt_trainer_new(const rt_train_config *c, char *err, size_t errlen);
void rt_trainer_free(rt_trainer *t);
int rt_trainer_step(rt_trainer *t, rt_step_result *r, char *err, size_t errlen);
int64_t rt_trainer_steps_done(const rt_trainer *t);
int rt_trainer_num_params(const rt_trainer *t);
const rt_tensor *rt_trainer_param(const rt_trainer *t, int i);   /* in train->params order */
/* Saves params (by name), optimizer states ("opt/<state input name>") and
 * meta + {"format": "tgc-train-1", "step": N, "seed": S}. Refuses (and
 * writes nothing) when a parameter holds Inf or NaN. */
int rt_trainer_save(const rt_trainer *t, const char *path, const rt_meta_entry *meta, int n_meta, char *err,
                    size_t errlen);
/* Loads a state saved for the same model and optimizer: every tensor must
 * be there with the same dtype and shape. Sets the step from the file. */
int rt_trainer_load(rt_trainer *t, const rt_safetensors *f, const char *path, char *err, size_t errlen);

#endif
