/* runtime/random.c — counter-based deterministic random numbers.
 *
 * A number is a pure function of (seed, stream, index): three rounds of the
 * splitmix64 finalizer mix them into 64 bits, the top 53 of which give a
 * uniform double in [0, 1). The normal number at index i uses the uniforms
 * at indices 2i and 2i+1 (Box–Muller, cosine branch). Because nothing is
 * sequential, tensors can be filled in parallel and the result does not
 * depend on thread count, fill order, or on which other tensors exist:
 * inputs and parameters take their stream from the FNV-1a hash of their name.
 */
#include <math.h>

#include "kernels.h"

static uint64_t splitmix64(uint64_t z) {
  z += UINT64_C(0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

uint64_t rt_hash_name(const char *name) {
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (const unsigned char *p = (const unsigned char *)(name ? name : ""); *p; p++) {
    h ^= *p;
    h *= UINT64_C(0x100000001b3);
  }
  return h;
}

double rt_random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (double)(random_bits(seed, stream, index) >> 11) * 0x1.0p-53;
}

double rt_random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = rt_random_uniform(seed, stream, 2 * index);
  double u2 = rt_random_uniform(seed, stream, 2 * index + 1);
  /* 1 - u1 is in (0, 1], so the log is finite. */
  return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586476925 * u2);
}

void rt_fill_random(rt_tensor *t, uint64_t seed, const char *name, int64_t int_high) {
  uint64_t stream = rt_hash_name(name);
  int64_t n = rt_numel(&t->type);
  ir_dtype dt = t->type.dtype;
  double high = int_high > 0 ? (double)int_high : 1.0;
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    double v;
    if (ir_dtype_is_float(dt))
      v = rt_random_normal(seed, stream, (uint64_t)i);
    else if (dt == IR_DT_BOOL)
      v = rt_random_uniform(seed, stream, (uint64_t)i) < 0.5 ? 0.0 : 1.0;
    else
      v = floor(rt_random_uniform(seed, stream, (uint64_t)i) * high);
    rt_store(dt, t->data, i, v);
  }
}

void rt_init_param(rt_tensor *t, const ir_value *param, uint64_t seed) {
  uint64_t stream = rt_hash_name(param->name);
  int64_t n = rt_numel(&t->type);
  ir_dtype dt = t->type.dtype;
  ir_init init = param->init;
  switch (init.kind) {
  case IR_INIT_NONE:
  case IR_INIT_ZEROS: rt_tensor_fill(t, 0.0); return;
  case IR_INIT_ONES: rt_tensor_fill(t, 1.0); return;
  case IR_INIT_NORMAL:
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
      rt_store(dt, t->data, i, init.a * rt_random_normal(seed, stream, (uint64_t)i));
    return;
  case IR_INIT_UNIFORM:
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
      rt_store(dt, t->data, i,
               init.a + (init.b - init.a) * rt_random_uniform(seed, stream, (uint64_t)i));
    return;
  }
}
