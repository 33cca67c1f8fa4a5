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

typedef struct {
  size_t peak_bytes;     /* peak of live tensor bytes during the run */
  size_t total_allocs;
  int kernels_run;
} rt_stats;

/* A backend: what it supports and how it runs a graph. */
typedef struct rt_backend {
  const char *name;
  bool (*supports_op)(const ir_node *n);
  /* inputs[i] feeds g->inputs[i], params[i] feeds g->params[i]; outputs[i]
   * receives a new tensor for g->outputs[i] (caller frees). Returns 0, or -1
   * with a message in err. Inputs and params are not modified. */
  int (*graph_compute)(const ir_graph *g, rt_tensor *const *inputs, rt_tensor *const *params,
                       rt_tensor **outputs, rt_stats *stats, char *err, size_t errlen);
} rt_backend;

extern const rt_backend rt_cpu_backend;

#endif
