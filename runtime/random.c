/* runtime/random.c — counter-based deterministic random numbers.
 *
 * A number is a pure function of (seed, stream, index): three rounds of the
 * splitmix64 finalizer mix them into 64 bits, the top 53 of which give a
 * uniform double in [0, 1). Normal numbers come in Box–Muller pairs: indices
 * 2k and 2k+1 share the uniforms at 4k and 4k+1 (radius from the first,
 * angle from the second) and take the cosine and the sine branch; so one
 * log and one sincos serve two numbers when a tensor is filled. Because nothing is
 * sequential, tensors can be filled in parallel and the result does not
 * depend on thread count, fill order, or on which other tensors exist:
 * inputs and parameters take their stream from the FNV-1a hash of their name.
 */
#include <math.h>

#include "internal.h"

static uint64_t splitmix64(uint64_t z) {
  z += UINT64_C(0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* The per-(seed, stream) key: hoisted out of fill loops. */
static uint64_t stream_key(uint64_t seed, uint64_t stream) { return splitmix64(splitmix64(seed) ^ stream); }

/* dropout's key of micro-batch `micro` of step `step` (0-based): the same
 * on every rank and backend; each dropout mixes in its stream and each
 * element its global index (ir_dropout_bits). The constant keeps it apart
 * from the parameters' and inputs' streams. */
uint64_t rt_dropout_key(uint64_t seed, int64_t step, int micro) {
  uint64_t k = stream_key(seed, UINT64_C(0x64726f706f7574)); /* "dropout" */
  return splitmix64(splitmix64(k ^ (uint64_t)step) ^ (uint64_t)micro);
}

static uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(stream_key(seed, stream) ^ index);
}

static double uniform_from_key(uint64_t key, uint64_t index) {
  return (double)(splitmix64(key ^ index) >> 11) * 0x1.0p-53;
}

/* The Box–Muller pair k: out[0] = normal(2k), out[1] = normal(2k+1). */
static void normal_pair(uint64_t key, uint64_t k, double out[2]) {
  double u1 = uniform_from_key(key, 4 * k), u2 = uniform_from_key(key, 4 * k + 1);
  /* 1 - u1 is in (0, 1], so the log is finite. */
  double r = sqrt(-2.0 * log(1.0 - u1)), a = 6.283185307179586476925 * u2;
  out[0] = r * cos(a);
  out[1] = r * sin(a);
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
  double pair[2];
  normal_pair(stream_key(seed, stream), index / 2, pair);
  return pair[index & 1];
}

/* t[i] = scale * normal(i) for every element, a pair at a time. */
static void fill_normal(rt_tensor *t, uint64_t seed, uint64_t stream, double scale) {
  uint64_t key = stream_key(seed, stream);
  int64_t n = rt_numel(&t->type), pairs = (n + 1) / 2;
  ir_dtype dt = t->type.dtype;
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
  for (int64_t k = 0; k < pairs; k++) {
    double z[2];
    normal_pair(key, (uint64_t)k, z);
    for (int j = 0; j < 2 && 2 * k + j < n; j++) {
      if (dt == IR_DT_F32) ((float *)t->data)[2 * k + j] = (float)(scale * z[j]);
      else rt_store(dt, t->data, 2 * k + j, scale * z[j]);
    }
  }
}

void rt_fill_random(rt_tensor *t, uint64_t seed, const char *name, int64_t int_high) {
  uint64_t stream = rt_hash_name(name);
  int64_t n = rt_numel(&t->type);
  ir_dtype dt = t->type.dtype;
  double high = int_high > 0 ? (double)int_high : 1.0;
  if (ir_dtype_is_float(dt)) {
    fill_normal(t, seed, stream, 1.0);
    return;
  }
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
    fill_normal(t, seed, stream, init.a);
    return;
  case IR_INIT_UNIFORM:
#pragma omp parallel for schedule(static) if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
      rt_store(dt, t->data, i,
               init.a + (init.b - init.a) * rt_random_uniform(seed, stream, (uint64_t)i));
    return;
  }
}
