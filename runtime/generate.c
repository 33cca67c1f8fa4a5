/* runtime/generate.c — generation with a KV cache: the prefill and decode
 * graphs (passes/kv_cache.c) prepared once on one device as two programs
 * that share the parameters (uploaded once) and the cache tensors.
 *
 * Prefill: tokens [1, T] (the window; the rest zero), the logits of the
 * last real row; every "cache.k.L" / "cache.v.L" output is copied into the
 * decode program's cache input of that name (one copy per generation).
 * Decode: tokens [1, 1] and pos; the cache inputs are donated, so the plan
 * computes the updated cache in their buffers (the outputs live there: no
 * copy; were one placed elsewhere it would be copied back).
 * Sharded graphs (a mesh, o->comm): each rank runs its block of both; the
 * shard pass splits every cache input and output alike along the kv heads
 * (passes/kv_cache.c), so a rank's cache output is its block of the cache,
 * the type of its cache input, and it never holds the whole cache. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "runtime.h"

struct rt_generator {
  rt_device *dev;
  const ir_graph *g[2];    /* prefill, decode */
  rt_program *p[2];
  rt_tensor **in[2];       /* device tensors of each graph's inputs */
  rt_tensor **params;      /* the prefill graph's */
  rt_tensor **dparams;     /* the decode graph's (the prefill's tensor where both bind one host tensor) */
  bool *downed;            /* per decode param: its own tensor (not the prefill's) */
  rt_comm *comm;
  bool *donate;            /* per decode input: the caches */
  int tokens[2], pos, logits[2];
  int *cache_src;          /* per prefill output: the decode input it fills, or -1 */
  float *host_logits;      /* the prefill's whole logits */
};


void rt_generator_free(rt_generator *r) {
  if (!r) return;
  for (int k = 0; k < 2; k++) {
    rt_program_free(r->p[k]);
    for (int i = 0; r->in[k] && i < r->g[k]->n_inputs; i++) rt_device_tensor_free(r->in[k][i]);
    free(r->in[k]);
  }
  for (int i = 0; r->params && i < r->g[0]->n_params; i++) rt_device_tensor_free(r->params[i]);
  for (int i = 0; r->dparams && r->downed && i < r->g[1]->n_params; i++)
    if (r->downed[i]) rt_device_tensor_free(r->dparams[i]);
  free(r->params);
  free(r->dparams);
  free(r->downed);
  free(r->donate);
  free(r->cache_src);
  free(r->host_logits);
  rt_device_close(r->dev);
  free(r);
}

rt_generator *rt_generator_new(const rt_backend *b, const rt_device_options *dopt, const ir_graph *prefill,
                               const ir_graph *decode, int pos_input, rt_tensor *const *params,
                               rt_tensor *const *dec_params, const rt_generator_options *go, char *err,
                               size_t errlen) {
  rt_generator *r = calloc(1, sizeof *r);
  if (!r) return rt_errf(err, errlen, "out of memory"), NULL;
  r->g[0] = prefill, r->g[1] = decode;
  r->comm = go ? go->comm : NULL;
  if (!(r->dev = rt_device_open_with(b, dopt, err, errlen))) return free(r), NULL;
  const ir_graph *P = prefill, *D = decode;
  r->params = calloc((size_t)P->n_params + 1, sizeof *r->params);
  r->dparams = calloc((size_t)D->n_params + 1, sizeof *r->dparams);
  r->downed = calloc((size_t)D->n_params + 1, sizeof *r->downed);
  r->donate = calloc((size_t)D->n_inputs + 1, sizeof *r->donate);
  r->cache_src = calloc((size_t)P->n_outputs + 1, sizeof *r->cache_src);
  for (int k = 0; k < 2; k++) r->in[k] = calloc((size_t)r->g[k]->n_inputs + 1, sizeof *r->in[k]);
  if (!r->params || !r->dparams || !r->downed || !r->donate || !r->cache_src || !r->in[0] || !r->in[1]) {
    rt_errf(err, errlen, "out of memory");
    goto fail;
  }
  for (int i = 0; i < P->n_params; i++) {
    if (!(r->params[i] = rt_device_tensor_new(r->dev, &P->params[i]->type, err, errlen))) goto fail;
    if (rt_upload(r->params[i], params[i]->data, err, errlen) != 0) goto fail;
  }
  for (int i = 0; i < D->n_params; i++) {
    int j = 0;
    while (j < P->n_params && params[j] != dec_params[i]) j++;
    if (j < P->n_params && ir_type_equal(&P->params[j]->type, &D->params[i]->type)) {
      r->dparams[i] = r->params[j];
      continue;
    }
    r->downed[i] = true;
    if (!(r->dparams[i] = rt_device_tensor_new(r->dev, &D->params[i]->type, err, errlen))) goto fail;
    if (rt_upload(r->dparams[i], dec_params[i]->data, err, errlen) != 0) goto fail;
  }
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < r->g[k]->n_inputs; i++)
      if (!(r->in[k][i] = rt_device_tensor_new(r->dev, &r->g[k]->inputs[i]->type, err, errlen))) goto fail;
  for (int k = 0; k < 2; k++) {
    r->tokens[k] = ir_graph_input_index(r->g[k], "tokens");
    r->logits[k] = ir_graph_output_index(r->g[k], "logits");
  }
  r->pos = pos_input >= 0 && pos_input < D->n_inputs ? pos_input : -1;
  if (r->tokens[0] < 0 || r->tokens[1] < 0 || r->logits[0] < 0 || r->logits[1] < 0 || r->pos < 0) {
    rt_errf(err, errlen, "internal error: generation graphs without tokens, pos or logits");
    goto fail;
  }
  for (int o = 0; o < P->n_outputs; o++) {
    r->cache_src[o] = strncmp(P->outputs[o].name, "cache.", 6) == 0 ? ir_graph_input_index(D, P->outputs[o].name) : -1;
    if (r->cache_src[o] >= 0) r->donate[r->cache_src[o]] = true;
  }
  rt_program_options po = {.comm = r->comm};
  if (!(r->p[0] = rt_program_new(r->dev, P, &po, err, errlen))) goto fail;
  po.donate_inputs = r->donate;
  if (!(r->p[1] = rt_program_new(r->dev, D, &po, err, errlen))) goto fail;
  const ir_type *lt = &P->outputs[r->logits[0]].value->type;
  if (!(r->host_logits = malloc((size_t)ir_type_numel(lt) * sizeof(float) + 1))) {
    rt_errf(err, errlen, "out of memory");
    goto fail;
  }
  return r;
fail:
  rt_generator_free(r);
  return NULL;
}

/* The logits of output li of program p, row `row` (V floats) into out. */
static int read_row(rt_generator *r, int k, int64_t row, float *out, char *err, size_t errlen) {
  const rt_tensor *o = rt_program_output(r->p[k], r->logits[k]);
  int64_t V = o->type.dims[o->type.rank - 1];
  if (rt_download(r->host_logits, o, err, errlen) != 0) return -1;
  memcpy(out, r->host_logits + row * V, (size_t)V * sizeof *out);
  return 0;
}

/* The cache output t into the decode graph's cache input i: nothing when
 * it was computed there, else a copy (on a mesh both are this rank's
 * block: the same type). */
static int to_cache(rt_generator *r, int i, const rt_tensor *t, char *err, size_t errlen) {
  rt_tensor *c = r->in[1][i];
  if (t->data == c->data) return 0;
  if (ir_type_equal(&t->type, &c->type)) return rt_copy(c, t, err, errlen);
  rt_errf(err, errlen, "internal error: cache output %s is %lld bytes, its input %lld", r->g[1]->inputs[i]->name,
          (long long)t->nbytes, (long long)c->nbytes);
  return -1;
}

int rt_generator_prefill(rt_generator *r, const int32_t *ids, int64_t n, float *logits, char *err, size_t errlen) {
  rt_tensor *tok = r->in[0][r->tokens[0]];
  int64_t T = tok->type.dims[1];
  int32_t *buf = calloc((size_t)T, sizeof *buf);
  if (!buf) return rt_errf(err, errlen, "out of memory"), -1;
  memcpy(buf, ids, (size_t)n * sizeof *buf);
  int rc = rt_upload(tok, buf, err, errlen);
  free(buf);
  if (rc == 0) rc = rt_program_run(r->p[0], r->in[0], r->params, err, errlen);
  for (int o = 0; rc == 0 && o < r->g[0]->n_outputs; o++)
    if (r->cache_src[o] >= 0) rc = to_cache(r, r->cache_src[o], rt_program_output(r->p[0], o), err, errlen);
  if (rc == 0) rc = read_row(r, 0, n - 1, logits, err, errlen);
  return rc;
}

int rt_generator_decode(rt_generator *r, int32_t id, int64_t pos, float *logits, char *err, size_t errlen) {
  int32_t p = (int32_t)pos;
  const ir_graph *D = r->g[1];
  if (rt_upload(r->in[1][r->tokens[1]], &id, err, errlen) != 0 || rt_upload(r->in[1][r->pos], &p, err, errlen) != 0)
    return -1;
  if (rt_program_run(r->p[1], r->in[1], r->dparams, err, errlen) != 0) return -1;
  for (int o = 0; o < D->n_outputs; o++) {
    int i = strncmp(D->outputs[o].name, "cache.", 6) == 0 ? ir_graph_input_index(D, D->outputs[o].name) : -1;
    if (i < 0) continue;
    if (to_cache(r, i, rt_program_output(r->p[1], o), err, errlen) != 0) return -1;
  }
  return read_row(r, 1, 0, logits, err, errlen);
}

size_t rt_generator_arena_bytes(const rt_generator *r, bool decode) { return rt_program_arena_bytes(r->p[decode]); }

static size_t type_bytes(const ir_type *t) { return (size_t)ir_type_numel(t) * ir_dtype_size(t->dtype); }

rt_generator_memory rt_generator_memory_use(const rt_generator *r) {
  rt_generator_memory m = {.measured = r->dev->stats.peak_bytes};
  for (int i = 0; i < r->g[0]->n_params; i++) m.predicted += type_bytes(&r->g[0]->params[i]->type);
  for (int i = 0; i < r->g[1]->n_params; i++)
    if (r->downed[i]) m.predicted += type_bytes(&r->g[1]->params[i]->type);
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < r->g[k]->n_inputs; i++) {
      size_t b = type_bytes(&r->g[k]->inputs[i]->type);
      m.predicted += b;
      if (k == 1 && r->donate[i]) m.cache += b;
    }
    m.predicted += rt_program_arena_bytes(r->p[k]);
  }
  return m;
}
