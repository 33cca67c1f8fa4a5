/* runtime/internal.h — private to runtime/: what its files share besides
 * the public runtime.h: element access in any dtype (every value computed
 * in double and stored rounded with ir_round_to_dtype, so kernels and
 * constant folding agree bit for bit), element counts and strides, and the
 * error formatters. */
#ifndef TGC_RT_INTERNAL_H
#define TGC_RT_INTERNAL_H

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

/* The mesh steps of a program (collective.c): communication ops and
 * mesh_slice, run by the executor instead of a backend kernel. */
typedef struct rt_coll rt_coll;
rt_coll *rt_coll_new(rt_device *d, const ir_graph *g, rt_comm *comm, char *err, size_t errlen);
void rt_coll_free(rt_coll *c);
void rt_coll_reset(rt_coll *c);
/* The index of mesh step n among c's bound steps (-1: not one); what the
 * program's collective action holds. */
int rt_coll_index(const rt_coll *c, const ir_node *n);
/* "over tp (2 ranks)" for rt_program_print_actions. */
void rt_coll_describe(const rt_coll *c, int index, char *buf, size_t len);
/* Runs mesh step `index`. With the comm layer's overlap (rt_comm_overlaps:
 * NCCL) a whole-buffer all_reduce, all_gather or reduce_scatter of a group
 * of two or more is issued in a batch with the collectives right before it
 * and left in flight; any other step first closes the batch and joins what
 * it touches, then completes in the call. */
int rt_coll_run(rt_coll *c, int index, const rt_tensor *const *in, rt_tensor *const *out, char *err, size_t errlen);
/* Before other work on tensors ts (n of them): closes an open batch and
 * makes the device wait for the operations in flight that use their
 * bytes. finish: closes it and waits for all (the program's end). Nothing
 * without overlap. */
int rt_coll_settle(rt_coll *c, const rt_tensor *const *ts, int n, char *err, size_t errlen);
int rt_coll_finish(rt_coll *c, char *err, size_t errlen);
static inline bool rt_is_mesh_step(const ir_node *n) {
  return ir_op_on_mesh_axis(n->op);
}

/* Loops shorter than this run on one thread (thread start-up costs more). */
#define RT_PAR_MIN 4096

/* Element i of raw storage of dtype dt, as a double. */
static inline double rt_load(ir_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case IR_DT_F64: return ((const double *)p)[i];
  case IR_DT_F32: return ((const float *)p)[i];
  case IR_DT_BF16: return ir_bf16_to_f32(((const uint16_t *)p)[i]);
  case IR_DT_F16: return ir_f16_to_f32(((const uint16_t *)p)[i]);
  case IR_DT_I32: return ((const int32_t *)p)[i];
  case IR_DT_I64: return (double)((const int64_t *)p)[i];
  case IR_DT_BOOL: return ((const uint8_t *)p)[i] ? 1.0 : 0.0;
  default: return 0.0;
  }
}

/* Stores v rounded to dt (ir_round_to_dtype), so the stored value is exactly
 * what constant folding computes. */
/* ir_round_to_dtype(IR_DT_F32, x) as a float, with its common case inline:
 * (float)x rounds to nearest even; only finite values past FLT_MAX take the
 * out-of-line path (converting those is undefined in C). */
static inline float rt_round_f32(double x) {
  if (!(fabs(x) > FLT_MAX) || isinf(x)) return (float)x;
  return (float)ir_round_to_dtype(IR_DT_F32, x);
}

/* ir_round_to_dtype(IR_DT_BF16, x) with its common case inline: a normal x
 * whose bf16 rounding is normal and finite, rounded to 8 significant bits
 * to nearest even on the double's own bits; zeros as they are; the rest
 * (bf16 subnormals, overflow, Inf, NaN) out of line. */
static inline double rt_round_bf16(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  if ((b << 1) == 0) return x;
  uint64_t e = (b >> 52) & 0x7FF;
  if (e < 1023 - 126 || e > 1023 + 127) return ir_round_to_dtype(IR_DT_BF16, x);
  const uint64_t low = (1ull << 45) - 1; /* below bf16's last significand bit */
  b = (b + (low >> 1) + ((b >> 45) & 1)) & ~low;
  if (((b >> 52) & 0x7FF) > 1023 + 127) return ir_round_to_dtype(IR_DT_BF16, x); /* rounded up past the maximum */
  memcpy(&x, &b, sizeof x);
  return x;
}

static inline void rt_store(ir_dtype dt, void *p, int64_t i, double v) {
  double r = dt == IR_DT_BF16 ? rt_round_bf16(v) : ir_round_to_dtype(dt, v);
  switch (dt) {
  case IR_DT_F64: ((double *)p)[i] = r; break;
  case IR_DT_F32: ((float *)p)[i] = (float)r; break;
  case IR_DT_BF16: ((uint16_t *)p)[i] = ir_f32_to_bf16((float)r); break;
  case IR_DT_F16: ((uint16_t *)p)[i] = ir_f32_to_f16((float)r); break;
  case IR_DT_I32: ((int32_t *)p)[i] = r == r ? (int32_t)r : 0; break;
  case IR_DT_I64: ((int64_t *)p)[i] = r == r ? (int64_t)r : 0; break;
  case IR_DT_BOOL: ((uint8_t *)p)[i] = r != 0; break;
  default: break;
  }
}

/* Integer element (for ids / targets); exact for i32 and i64. */
static inline int64_t rt_load_int(ir_dtype dt, const void *p, int64_t i) {
  if (dt == IR_DT_I64) return ((const int64_t *)p)[i];
  if (dt == IR_DT_I32) return ((const int32_t *)p)[i];
  double v = rt_load(dt, p, i);
  return v == v && fabs(v) < 9.2e18 ? (int64_t)v : INT64_MIN;
}

/* Row-major strides (in elements) of t; broadcast against a result of rank
 * out_rank: missing leading dims and size-1 dims get stride 0. */
void rt_broadcast_strides(const ir_type *t, int out_rank, const int64_t *out_dims,
                          int64_t *strides);
int64_t rt_numel(const ir_type *t);
/* rt_tensor_new without the zero fill (freed with rt_tensor_free): only for
 * a result the kernel about to run overwrites entirely (cpu.c). */
rt_tensor *rt_tensor_new_uninit(const ir_type *type);
/* The name of v for messages, printed after a '%' ("?" if none). */
const char *rt_value_name(const ir_value *v);
/* "message" / "PATH: message" into err (errlen bytes; nothing if err is NULL). */
void rt_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void rt_path_errf(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
