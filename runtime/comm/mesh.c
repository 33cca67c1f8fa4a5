/* runtime/comm/mesh.c — the mesh of a communicator (rt_comm_set_mesh: its
 * axes, this rank's coordinates, the same mesh on every rank) and the
 * counters of what each kind of operation moved per axis. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

/* ---- the mesh ---- */

int comm_run_group(rt_comm *c, comm_group *g, int axis, const rt_coll_args *a, char *err, size_t errlen);

/* Every rank sets the same mesh: its text's hash, all-gathered over the
 * world (not counted). Over the transport only: nccl's bootstrap checks
 * for it. */
static int same_mesh_everywhere(rt_comm *c, const char *text, char *err, size_t errlen) {
  if (!c->be->isend || c->size < 2) return 0;
  uint64_t h = 1469598103934665603ull;
  for (const char *p = text; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  uint64_t *all = malloc((size_t)c->size * sizeof *all);
  if (!all) {
    rt_comm_errf(err, errlen, "out of memory");
    return -1;
  }
  comm_group g = {.c = c, .n = c->size, .me = c->rank, .stride = 1, .tag = TAG_WORLD, .kind = IR_COLL_ALL_GATHER};
  snprintf(g.desc, sizeof g.desc, "--mesh %s: comparing meshes", text);
  rt_coll_args a = {IR_COLL_ALL_GATHER, RT_REDUCE_SUM, IR_DT_I64, &h, all, 1, 0};
  int rc = comm_run_group(c, &g, -1, &a, err, errlen);
  for (int r = 0; rc == 0 && r < c->size; r++)
    if (all[r] != h) {
      rt_comm_errf(err, errlen, "--mesh %s differs from rank %d's (every rank sets the same mesh)", text, r);
      rc = -1;
    }
  free(all);
  return rc;
}

int rt_comm_set_mesh(rt_comm *c, int n_axes, const char *const *names, const int *sizes, char *err, size_t errlen) {
  if (n_axes < 0 || n_axes > RT_COMM_MAX_AXES) {
    rt_comm_errf(err, errlen, "a mesh of %d axes (at most %d)", n_axes, RT_COMM_MAX_AXES);
    return -1;
  }
  char text[256] = "";
  size_t used = 0;
  int64_t product = 1;
  for (int k = 0; k < n_axes; k++) {
    const char *name = names[k] ? names[k] : "";
    size_t len = strlen(name);
    if (len == 0 || len >= sizeof c->names[0]) {
      rt_comm_errf(err, errlen, "mesh axis %d: a name of 1 to %d characters, not '%s'", k,
                   (int)sizeof c->names[0] - 1, name);
      return -1;
    }
    for (int j = 0; j < k; j++)
      if (strcmp(names[j], name) == 0) {
        rt_comm_errf(err, errlen, "mesh axis '%s' appears twice", name);
        return -1;
      }
    if (sizes[k] < 1) {
      rt_comm_errf(err, errlen, "mesh axis %s=%d: sizes are 1 or more", name, sizes[k]);
      return -1;
    }
    int w = snprintf(text + used, sizeof text - used, "%s%s=%d", k ? "," : "", name, sizes[k]);
    if (w > 0 && (size_t)w < sizeof text - used) used += (size_t)w;
    product *= sizes[k];
    if (product > (1 << 24)) product = (1 << 24) + 1; /* more than any job: the message below says so */
  }
  if (n_axes > 0 && product != c->size) {
    char need[32];
    snprintf(need, sizeof need, product > (1 << 24) ? "more than %d" : "%d", product > (1 << 24) ? 1 << 24 : (int)product);
    if (!rt_comm_under_launcher() && c->size == 1)
      rt_comm_errf(err, errlen, "--mesh %s needs %s ranks, but tgc runs as 1 process (start it with mpirun -np %s)", text,
                   need, need);
    else
      rt_comm_errf(err, errlen, "--mesh %s needs %s ranks, but this job has %d (start it with mpirun -np %s)", text,
                   need, c->size, need);
    return -1;
  }
  if (rt_comm_drain(c, err, errlen) || same_mesh_everywhere(c, text, err, errlen)) return -1;
  c->n_axes = n_axes;
  int rest = c->rank, stride = 1;
  for (int k = n_axes - 1; k >= 0; k--) {
    snprintf(c->names[k], sizeof c->names[k], "%s", names[k]);
    c->sizes[k] = sizes[k];
    c->strides[k] = stride;
    c->coords[k] = rest % sizes[k];
    rest /= sizes[k];
    stride *= sizes[k];
  }
  rt_comm_reset_counts(c);
  return c->be->mesh_changed ? c->be->mesh_changed(c, err, errlen) : 0;
}

int rt_comm_axis_count(const rt_comm *c) { return c->n_axes; }
int rt_comm_axis_size(const rt_comm *c, int axis) {
  return axis == -1 ? c->size : axis >= 0 && axis < c->n_axes ? c->sizes[axis] : 0;
}
const char *rt_comm_axis_name(const rt_comm *c, int axis) {
  return axis == -1 ? "world" : axis >= 0 && axis < c->n_axes ? c->names[axis] : NULL;
}
int rt_comm_coord(const rt_comm *c, int axis) {
  return axis == -1 ? c->rank : axis >= 0 && axis < c->n_axes ? c->coords[axis] : -1;
}
int rt_comm_axis_find(const rt_comm *c, const char *name) {
  for (int k = 0; k < c->n_axes; k++)
    if (strcmp(c->names[k], name) == 0) return k;
  return -1;
}

/* ---- counters ---- */

rt_comm_counter rt_comm_count(const rt_comm *c, rt_coll_kind k, int axis) {
  rt_comm_counter zero = {0, 0, 0};
  if ((unsigned)k >= IR_NUM_COLLS) return zero;
  if (axis == -1) axis = c->n_axes;
  if (axis < 0 || axis > c->n_axes) return zero;
  return c->counts[k][axis];
}

void rt_comm_reset_counts(rt_comm *c) {
  memset(c->counts, 0, sizeof c->counts);
  memset(&c->overlap, 0, sizeof c->overlap);
}

rt_comm_counter rt_comm_ring_bytes(rt_coll_kind k, int n, int coord, int root, int64_t count, size_t elem_bytes) {
  rt_comm_counter r = {1, 0, 0};
  int64_t es = (int64_t)elem_bytes;
  if (n <= 1 || count <= 0) return r;
  int i = ((coord % n) + n) % n;
  switch (k) {
  case IR_COLL_ALL_REDUCE: {
    int64_t q = count / n, rem = count % n;
#define CHUNK(j) (q + ((((j) % n + n) % n) < rem))
    r.bytes_sent = (2 * count - CHUNK(i) - CHUNK(i + 1)) * es;
    r.bytes_received = (2 * count - CHUNK(i - 1) - CHUNK(i)) * es;
#undef CHUNK
    break;
  }
  case IR_COLL_REDUCE_SCATTER:
  case IR_COLL_ALL_GATHER:
  case IR_COLL_ALL_TO_ALL: r.bytes_sent = r.bytes_received = (int64_t)(n - 1) * count * es; break;
  case IR_COLL_BROADCAST: {
    int pos = ((i - root) % n + n) % n;
    r.bytes_sent = pos < n - 1 ? count * es : 0;
    r.bytes_received = pos > 0 ? count * es : 0;
    break;
  }
  case IR_COLL_SEND: r.bytes_sent = count * es; break;
  case IR_COLL_RECV: r.bytes_received = count * es; break;
  case IR_NUM_COLLS: break;
  }
  return r;
}

