/* runtime/rt_io.h — what the runtime reads and writes: .npy arrays,
 * safetensors files (training states, weights), pretrained weights through
 * a name map (io/weights.c), and training data sources (io/data.c). */
#ifndef TGC_RT_IO_H
#define TGC_RT_IO_H

#include "runtime.h"

/* The most steps a run can count (the update reads the step as an f64;
 * a data source draws batch (seed, step, micro-batch)). */
#define RT_MAX_STEP (INT64_C(1) << 53)

/* Reads a .npy file (format v1/v2/v3; little-endian <f8 <f4 <f2 <i4 <i8 and
 * |b1, C order) into a tensor of the file's dtype. Any malformation
 * (bad magic, header, dtype, shape, truncated data, trailing bytes) gives
 * NULL and "path: message" in err. */
rt_tensor *rt_npy_read(const char *path, char *err, size_t errlen);
/* Writes format v1.0; bf16 tensors are written as <f4 (numpy has no bf16). */
int rt_npy_write(const char *path, const rt_tensor *t, char *err, size_t errlen);
/* The descr a .npy file gives dtype dt ("<f4", "<i8", ...; bf16: "<f4"); NULL if none. */
const char *rt_npy_descr(ir_dtype dt);

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
/* text:PATH through a tokenizer.json (before binding): the file is read
 * whole and encoded once (no special tokens added); its tokens are the ids
 * and its vocabulary the tokenizer's (rt_tokenizer_vocab_size). 0, or -1
 * with err (not text:PATH, a bad tokenizer file, text it cannot encode). */
int rt_data_use_tokenizer(rt_data *ds, const char *tokenizer, char *err, size_t errlen);
/* rt_data_open(spec) with the settings' --vocab, through their --tokenizer
 * when given (rt_data_use_tokenizer; its errors start "--tokenizer: "). */
typedef struct rt_train_settings rt_train_settings; /* rt_train.h */
rt_data *rt_data_open_settings(const rt_train_settings *s, const char *spec, char *err, size_t errlen);
/* Evaluation: batch k (0 <= k < rt_data_eval_batches) of the source in
 * order (files: consecutive windows from the start, arrays: samples in
 * file order; tasks: batches no training step draws). */
int64_t rt_data_eval_batches(const rt_data *ds);  /* INT64_MAX for tasks */
int rt_data_fill_eval(rt_data *ds, uint64_t seed, int64_t k, rt_tensor *const *inputs, char *err, size_t errlen);
/* The batch dim of g->inputs[i] as bound (tokens, targets, x, y: 0; X:
 * 1), -1 when the source does not feed input i. */
int rt_data_batch_dim(const rt_data *ds, int i);

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

#endif
