/* runtime/shard.c — moving between a whole value and one rank's block of
 * it (ir_shard: ir_shard_global_index says where each local element sits):
 * the data a rank feeds, the parameters it initializes, the state it saves
 * and loads on another mesh. Host tensors; every element is copied as bytes;
 * a padded dim's padding (ir_shard.pad) is zeros in a block and no element
 * of the whole, and a state file holds a block without it (rt_shard_unpad).
 * Also a pipelined plain graph's outputs brought to stage 0 (tgc run). */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "internal.h"

/* Per dim of the local tensor: the global index of each local index. */
static int64_t **index_maps(const rt_tensor *local, const ir_shard *s, const ir_mesh *m, const int *coord) {
  int r = local->type.rank;
  int64_t **map = calloc((size_t)r + 1, sizeof *map);
  if (!map) return NULL;
  for (int d = 0; d < r; d++) {
    int64_t n = local->type.dims[d];
    if (!(map[d] = malloc((size_t)(n ? n : 1) * sizeof **map))) {
      for (int k = 0; k < d; k++) free(map[k]);
      free(map);
      return NULL;
    }
    for (int64_t l = 0; l < n; l++) map[d][l] = ir_shard_global_index(s, m, coord, d, n, l);
  }
  return map;
}

/* Copies between whole and local (to_local: whole -> local). */
static int transfer(rt_tensor *whole, rt_tensor *local, const ir_shard *s, const ir_mesh *m, const int *coord,
                    bool to_local, char *err, size_t errlen) {
  ir_type want = ir_shard_global_type(&local->type, s, m);
  if (!ir_type_equal(&want, &whole->type)) {
    char a[128], b[128], c[128];
    rt_errf(err, errlen, "internal error: a block %s of %s is not one of %s", ir_type_str(&local->type, a, sizeof a),
            ir_type_str(&want, b, sizeof b), ir_type_str(&whole->type, c, sizeof c));
    return -1;
  }
  int r = local->type.rank;
  size_t es = ir_dtype_size(local->type.dtype);
  int64_t n = rt_numel(&local->type);
  if (n == 0) return 0;
  int64_t **map = index_maps(local, s, m, coord);
  if (!map) {
    rt_errf(err, errlen, "out of memory");
    return -1;
  }
  int64_t gstride[IR_MAX_RANK], idx[IR_MAX_RANK] = {0};
  for (int d = r - 1, st = 1; d >= 0; d--) {
    gstride[d] = st;
    st *= whole->type.dims[d];
  }
  char *w = whole->data, *l = local->data;
  bool padded = false; /* a padded dim (a padded vocabulary): its padding is zeros here, never a whole's element */
  for (int d = 0; d < r; d++) padded |= s->split[d] && s->pad[d] > 0;
  if (padded && to_local) memset(l, 0, (size_t)n * es);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    bool pad = false;
    for (int d = 0; d < r; d++) {
      off += map[d][idx[d]] * gstride[d];
      pad |= map[d][idx[d]] >= whole->type.dims[d];
    }
    if (!pad && to_local) memcpy(l + (size_t)i * es, w + (size_t)off * es, es);
    else if (!pad) memcpy(w + (size_t)off * es, l + (size_t)i * es, es);
    for (int d = r - 1; d >= 0; d--) { /* the next local index, row-major */
      if (++idx[d] < local->type.dims[d]) break;
      idx[d] = 0;
    }
  }
  for (int d = 0; d < r; d++) free(map[d]);
  free(map);
  return 0;
}

int rt_shard_extract(const rt_tensor *whole, rt_tensor *local, const ir_shard *s, const ir_mesh *m, const int *coord,
                     char *err, size_t errlen) {
  return transfer((rt_tensor *)whole, local, s, m, coord, true, err, errlen);
}

int rt_shard_insert(rt_tensor *whole, const rt_tensor *local, const ir_shard *s, const ir_mesh *m, const int *coord,
                    char *err, size_t errlen) {
  return transfer(whole, (rt_tensor *)local, s, m, coord, false, err, errlen);
}

int rt_init_param_shard(rt_tensor *local, const ir_value *param, uint64_t seed, const ir_mesh *m, const int *coord,
                        char *err, size_t errlen) {
  if (ir_shard_is_replicated(&param->shard)) {
    rt_init_param(local, param, seed);
    return 0;
  }
  ir_type g = ir_shard_global_type(&local->type, &param->shard, m);
  rt_tensor *whole = rt_tensor_new(&g);
  if (!whole) {
    rt_errf(err, errlen, "out of memory initializing parameter '%s' (%lld elements)", param->name,
            (long long)rt_numel(&g));
    return -1;
  }
  rt_init_param(whole, param, seed); /* the values one device would have: a block of them */
  int rc = rt_shard_extract(whole, local, &param->shard, m, coord, err, errlen);
  rt_tensor_free(whole);
  return rc;
}

/* dst's elements that src has (the index prefixes of every dim; dst zeroed first). */
static void copy_prefix(rt_tensor *dst, const rt_tensor *src) {
  int r = dst->type.rank;
  size_t es = ir_dtype_size(dst->type.dtype);
  int64_t n = rt_numel(&dst->type), idx[IR_MAX_RANK] = {0};
  if (n) memset(dst->data, 0, (size_t)n * es);
  for (int64_t i = 0; i < n; i++) {
    bool in = true;
    int64_t off = 0;
    for (int d = 0; d < r; d++) {
      in &= idx[d] < src->type.dims[d];
      off = off * src->type.dims[d] + idx[d];
    }
    if (in) memcpy((char *)dst->data + (size_t)i * es, (const char *)src->data + (size_t)off * es, es);
    for (int d = r - 1; d >= 0; d--) {
      if (++idx[d] < dst->type.dims[d]) break;
      idx[d] = 0;
    }
  }
}

static rt_tensor *prefix_copy(const rt_tensor *src, const ir_type *t) {
  rt_tensor *x = rt_tensor_new(t);
  if (x) copy_prefix(x, src);
  return x;
}

rt_tensor *rt_shard_unpad(const rt_tensor *local, const ir_shard *s, const ir_mesh *m, const int *coord) {
  ir_type whole = ir_shard_global_type(&local->type, s, m), t = local->type;
  for (int d = 0; d < t.rank; d++) {
    if (!s->split[d] || s->pad[d] <= 0) continue;
    int64_t real = 0; /* the block's elements before the padding */
    while (real < t.dims[d] && ir_shard_global_index(s, m, coord, d, local->type.dims[d], real) < whole.dims[d]) real++;
    t.dims[d] = real;
  }
  return prefix_copy(local, &t);
}

rt_tensor *rt_shard_repad(const rt_tensor *stored, const ir_shard *s, const ir_mesh *m, const ir_type *whole) {
  ir_type t = stored->type;
  for (int d = 0; d < t.rank; d++) {
    if (!s->split[d] || s->pad[d] <= 0) continue;
    t.dims[d] = (whole->dims[d] + s->pad[d]) / ir_shard_blocks(s, m, d);
  }
  return prefix_copy(stored, &t);
}

static int output_index(const ir_graph *g, const char *name) {
  for (int k = 0; k < g->n_outputs; k++)
    if (strcmp(g->outputs[k].name, name) == 0) return k;
  return -1;
}

int rt_outputs_to_first_stage(rt_comm *c, const ir_graph *whole, const ir_graph *stage, rt_tensor *const *stage_out,
                              rt_tensor **out, char *err, size_t errlen) {
  int axis = rt_comm_axis_find(c, "pp"), n = whole->n_outputs;
  int p = axis >= 0 ? rt_comm_axis_size(c, axis) : 1, s = axis >= 0 ? rt_comm_coord(c, axis) : 0;
  for (int i = 0; i < n; i++) out[i] = NULL;
  /* which stages make each output: one all-reduce of a count per (output, stage) */
  double *made = calloc((size_t)n * (size_t)p + 1, sizeof *made);
  if (!made) {
    rt_errf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < n; i++) made[(size_t)i * (size_t)p + (size_t)s] = output_index(stage, whole->outputs[i].name) >= 0;
  int rc = 0;
  if (axis >= 0 && n > 0) rc = rt_comm_all_reduce(c, axis, RT_REDUCE_SUM, IR_DT_F64, made, made, (int64_t)n * p, err, errlen);
  for (int i = 0; rc == 0 && i < n; i++) {
    int from = -1;
    for (int q = 0; q < p && from < 0; q++)
      if (made[(size_t)i * (size_t)p + (size_t)q] > 0) from = q;
    const ir_type *t = &whole->outputs[i].value->type;
    int k = from == s ? output_index(stage, whole->outputs[i].name) : -1;
    if (from < 0 || (k >= 0 && !ir_type_equal(&stage_out[k]->type, t))) {
      rt_errf(err, errlen, "internal error: output '%s' is %s on the pipeline stages", whole->outputs[i].name,
              from < 0 ? "made on none" : "not whole");
      rc = -1;
      break;
    }
    int64_t count = rt_numel(t);
    if (s == 0 && from == 0) {
      if (!(out[i] = rt_tensor_new(t))) rc = -1;
      else if (count) memcpy(out[i]->data, stage_out[k]->data, (size_t)count * ir_dtype_size(t->dtype));
    } else if (s == 0) {
      if (!(out[i] = rt_tensor_new(t))) rc = -1;
      else rc = rt_comm_recv(c, axis, from, t->dtype, out[i]->data, count, err, errlen);
    } else if (s == from) {
      rc = rt_comm_send(c, axis, 0, t->dtype, stage_out[k]->data, count, err, errlen);
    }
    if (rc != 0 && !err[0]) rt_errf(err, errlen, "out of memory");
  }
  free(made);
  if (rc != 0)
    for (int i = 0; i < n; i++) {
      rt_tensor_free(out[i]);
      out[i] = NULL;
    }
  return rc;
}
