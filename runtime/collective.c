/* runtime/collective.c — the executor's steps that involve the device mesh:
 * the communication ops of ops.def (flag COMM) and mesh_slice, which the
 * executor runs here instead of calling a backend kernel.
 *
 * Groups of one rank (attribute n = 1, as on a one-device mesh, or in the
 * one-process tests of the autodiff rules) need no communicator: every
 * collective is then a copy of its operand, and a send to oneself is held
 * in a FIFO until a recv from oneself takes it (messages between one pair
 * of ranks arrive in the order sent, as the comm layer promises). Each
 * send node has its own staging buffer, allocated with the program.
 *
 * Groups of more ranks go to the comm layer (runtime/comm/), whose mesh is
 * the graph's axes of size > 1, named as mesh_axes.def names them
 * (rt_mesh_bind). Each mesh step is bound to its group when the program is
 * prepared (rt_coll_new: the node's axis index, held in the IR, to the
 * communicator's axis; its attributes read into a bound step, which the
 * program's collective action names by index): a run looks nothing up,
 * by name or by attribute.
 * The comm layer's collectives work on whole buffers (all_gather puts
 * member j's block at j * count); an op along a dim d > 0 moves its blocks
 * through a scratch buffer: [outer][n][L][inner] <-> [n][outer][L][inner].
 * On a device whose memory is not the host's, buffers go through host
 * scratch (download, communicate, upload) unless the comm layer is NCCL,
 * which takes device pointers: then the scratch is device memory and the
 * block moves are the device's copies (one per block row). Scratch is
 * allocated with the program: a run allocates nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "internal.h"

/* A mesh step bound when the program is made: its axis, group and
 * attributes, and its staging buffer (a send in a one-rank group). */
typedef struct {
  const ir_node *n;
  ir_axis axis;        /* its mesh axis */
  int group;           /* the communicator's axis of it (-1: none, or no communicator) */
  int size, dim, split_dim, concat_dim, root, peer;
  rt_reduce_op reduce;
  rt_buffer *staging;
} bound;

typedef struct {
  const bound *send;   /* the send whose staging buffer holds the message */
} message;

struct rt_coll {
  const ir_graph *g;
  rt_device *dev;
  rt_comm *comm;       /* NULL: one process */
  bool host_ptrs;      /* this device's pointers are host memory */
  bool nccl;           /* the comm layer takes device pointers */
  bound *steps;        /* the graph's mesh steps, in node order */
  int n_steps;
  int *of_node;        /* node index -> its index in steps (-1) */
  message *fifo;       /* sent and not yet received, oldest first */
  int head, tail, cap;
  char *scratch[3];    /* operand, result, blocks (multi-rank groups): host memory, or with NCCL on a
                        * device the device's (dscratch) */
  rt_buffer *dscratch[3];
  size_t scratch_bytes;
  bool overlap;        /* the comm layer leaves batches in flight (rt_comm_overlaps) */
  bool batch_open;
  int batch_group;     /* the open batch's communicator axis */
  bool no_joins;       /* test hook TGC_TEST_COMM_NO_JOIN=1: a planted race (nothing waits for the batches) */
};

/* The communicator's axis of mesh axis a: -1 when c has none (a is of size 1). */
static int comm_axis(const rt_comm *c, ir_axis a) { return rt_comm_axis_find(c, ir_axis_name(a)); }

static const char *str_attr(const ir_node *n, const char *key) {
  const ir_attr *a = ir_node_attr(n, key);
  return a && a->kind == IR_ATTR_STR ? a->s : "?";
}

static size_t bytes_of(const ir_type *t) { return (size_t)ir_type_numel(t) * ir_dtype_size(t->dtype); }

int rt_mesh_bind(rt_comm *c, const ir_mesh *m, int *coord, char *err, size_t errlen) {
  const char *names[IR_NUM_AXES];
  int sizes[IR_NUM_AXES], n = 0;
  for (int a = 0; a < IR_NUM_AXES; a++)
    if (m->size[a] > 1) names[n] = ir_axis_name((ir_axis)a), sizes[n++] = m->size[a];
  if (rt_comm_set_mesh(c, n, names, sizes, err, errlen) != 0) return -1;
  for (int a = 0; a < IR_NUM_AXES && coord; a++) {
    int k = m->size[a] > 1 ? comm_axis(c, (ir_axis)a) : -1;
    coord[a] = k >= 0 ? rt_comm_coord(c, k) : 0;
  }
  return 0;
}

rt_coll *rt_coll_new(rt_device *d, const ir_graph *g, rt_comm *comm, char *err, size_t errlen) {
  rt_coll *c = calloc(1, sizeof *c);
  if (!c || !(c->steps = calloc((size_t)g->n_nodes + 1, sizeof *c->steps)) ||
      !(c->of_node = malloc(((size_t)g->n_nodes + 1) * sizeof *c->of_node))) {
    if (c) free(c->steps);
    free(c);
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  c->g = g;
  c->dev = d;
  c->comm = comm;
  c->host_ptrs = d->backend->host_memory;
  c->nccl = comm && strcmp(rt_comm_impl(comm), "nccl") == 0;
  c->overlap = c->nccl && !c->host_ptrs && rt_comm_overlaps(comm);
  const char *hook = getenv("TGC_TEST_COMM_NO_JOIN");
  c->no_joins = hook && strcmp(hook, "1") == 0;
  int sends = 0;
  size_t most = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    c->of_node[i] = -1;
    if (n->dead || !rt_is_mesh_step(n)) continue;
    int a = ir_node_mesh_axis(n);
    if (a < 0) {
      rt_errf(err, errlen, "internal error: %s has no mesh axis", ir_op_name(n->op));
      rt_coll_free(c);
      return NULL;
    }
    bound *b = &c->steps[c->of_node[i] = c->n_steps++];
    *b = (bound){.n = n,
                 .axis = (ir_axis)a,
                 .group = comm ? comm_axis(comm, (ir_axis)a) : -1,
                 .size = (int)ir_node_attr_int(n, "n", 1),
                 .dim = (int)ir_node_attr_int(n, "dim", 0),
                 .split_dim = (int)ir_node_attr_int(n, "split_dim", 0),
                 .concat_dim = (int)ir_node_attr_int(n, "concat_dim", 0),
                 .root = (int)ir_node_attr_int(n, "root", 0),
                 .peer = (int)ir_node_attr_int(n, "peer", 0),
                 .reduce = strcmp(str_attr(n, "reduce"), "max") == 0 ? RT_REDUCE_MAX : RT_REDUCE_SUM};
    for (int k = 0; k < n->n_in; k++) most = bytes_of(&n->in[k]->type) > most ? bytes_of(&n->in[k]->type) : most;
    for (int k = 0; k < n->n_out; k++) most = bytes_of(&n->out[k]->type) > most ? bytes_of(&n->out[k]->type) : most;
    if (n->op != IR_OP_SEND || b->size != 1) continue;
    if (!(b->staging = rt_buffer_alloc(d, bytes_of(&n->in[0]->type), err, errlen))) {
      rt_coll_free(c);
      return NULL;
    }
    sends++;
  }
  c->cap = sends + 1;
  c->scratch_bytes = most;
  bool oom = !(c->fifo = calloc((size_t)c->cap, sizeof *c->fifo));
  bool on_device = c->nccl && !c->host_ptrs;
  for (int k = 0; k < 3 && comm && !oom && !on_device; k++) oom = !(c->scratch[k] = malloc(most ? most : 1));
  for (int k = 0; k < 3 && comm && on_device; k++) {
    if (!(c->dscratch[k] = rt_buffer_alloc(d, most ? most : 1, err, errlen))) {
      rt_coll_free(c);
      return NULL;
    }
    c->scratch[k] = c->dscratch[k]->ptr;
  }
  if (oom) {
    rt_coll_free(c);
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  return c;
}

void rt_coll_free(rt_coll *c) {
  if (!c) return;
  for (int i = 0; c->steps && i < c->n_steps; i++) rt_buffer_free(c->steps[i].staging);
  free(c->steps);
  free(c->of_node);
  free(c->fifo);
  for (int k = 0; k < 3; k++)
    if (c->dscratch[k]) rt_buffer_free(c->dscratch[k]);
    else free(c->scratch[k]);
  free(c);
}

/* Every message of the last run was received (a run that leaves one behind
 * sent to nobody). */
void rt_coll_reset(rt_coll *c) { c->head = c->tail = 0; }

int rt_coll_index(const rt_coll *c, const ir_node *n) {
  if (n->id >= 0 && n->id < c->g->n_nodes && c->g->nodes[n->id] == n) return c->of_node[n->id];
  for (int i = 0; i < c->g->n_nodes; i++) /* ids not dense (an uncompacted graph) */
    if (c->g->nodes[i] == n) return c->of_node[i];
  return -1;
}

void rt_coll_describe(const rt_coll *c, int index, char *buf, size_t len) {
  const bound *b = index >= 0 && index < c->n_steps ? &c->steps[index] : NULL;
  if (!b) snprintf(buf, len, "?");
  else snprintf(buf, len, "over %s (%d rank%s%s)", ir_axis_name(b->axis), b->size, b->size == 1 ? "" : "s",
                b->size == 1 ? ": a copy" : b->group >= 0 ? "" : ", no communicator");
}

static int copy(const rt_tensor *dst, const rt_tensor *src, char *err, size_t errlen) {
  if (dst->data == src->data || dst->nbytes == 0) return 0;
  return rt_copy(dst, src, err, errlen);
}

/* ---- one-rank groups ---- */

static int run_local(rt_coll *c, const bound *b, const rt_tensor *const *in, rt_tensor *const *out, char *err,
                     size_t errlen) {
  const ir_node *n = b->n;
  switch (n->op) {
  case IR_OP_SEND: {
    if (!b->staging || c->tail - c->head >= c->cap) {
      rt_errf(err, errlen, "internal error: send without a staging buffer");
      return -1;
    }
    rt_tensor staged = rt_tensor_view(b->staging, 0, &n->in[0]->type);
    if (copy(&staged, in[0], err, errlen) != 0) return -1;
    c->fifo[c->tail++ % c->cap] = (message){b};
    return 0;
  }
  case IR_OP_RECV: {
    const char *axis = ir_axis_name(b->axis);
    for (int k = c->head; k < c->tail; k++) {
      message *m = &c->fifo[k % c->cap];
      if (m->send->axis != b->axis) continue;
      if (!ir_type_equal(&m->send->n->in[0]->type, &n->out[0]->type)) {
        char a[128], bt[128];
        rt_errf(err, errlen, "recv over %s expects %s but the message sent is %s", axis,
                ir_type_str(&n->out[0]->type, a, sizeof a), ir_type_str(&m->send->n->in[0]->type, bt, sizeof bt));
        return -1;
      }
      rt_tensor staged = rt_tensor_view(m->send->staging, 0, &n->out[0]->type);
      if (copy(out[0], &staged, err, errlen) != 0) return -1;
      for (int j = k; j > c->head; j--) c->fifo[j % c->cap] = c->fifo[(j - 1) % c->cap]; /* keep the order */
      c->head++;
      return 0;
    }
    rt_errf(err, errlen, "recv over %s: nothing was sent to this rank (every rank would wait here forever)", axis);
    return -1;
  }
  default: /* every collective of a one-rank group, and mesh_slice, is its operand */
    return copy(out[0], in[0], err, errlen);
  }
}

/* ---- multi-rank groups ---- */

/* t as [outer][size of dim d][inner bytes]. */
static void split_at(const ir_type *t, int d, int64_t *outer, int64_t *len, size_t *inner) {
  *outer = 1, *len = t->rank ? t->dims[d] : 1;
  *inner = ir_dtype_size(t->dtype);
  for (int k = 0; k < d; k++) *outer *= t->dims[k];
  for (int k = d + 1; k < t->rank; k++) *inner *= (size_t)t->dims[k];
}

/* n bytes from src to dst, both where the comm layer's buffers are: host
 * memory, or (NCCL) the device's (its copy). */
static int move(rt_coll *c, void *dst, const void *src, size_t n, char *err, size_t errlen) {
  if (!n || dst == src) return 0;
  if (!(c->nccl && !c->host_ptrs)) {
    memcpy(dst, src, n);
    return 0;
  }
  return c->dev->backend->copy(c->dev, dst, src, n, err, errlen);
}

/* dst [n][outer][L][inner] <- src [outer][n L][inner] (to_blocks), or back. */
static int blocks(rt_coll *c, char *dst, const char *src, int64_t outer, int n, int64_t L, size_t inner, bool to_blocks,
                  char *err, size_t errlen) {
  size_t row = (size_t)L * inner;
  for (int j = 0; j < n; j++)
    for (int64_t o = 0; o < outer; o++) {
      size_t b = ((size_t)j * (size_t)outer + (size_t)o) * row, w = ((size_t)o * (size_t)n + (size_t)j) * row;
      if (move(c, to_blocks ? dst + b : dst + w, to_blocks ? src + w : src + b, row, err, errlen) != 0) return -1;
    }
  return 0;
}

static int run_comm(rt_coll *c, const bound *b, const void *in, void *out, char *err, size_t errlen) {
  rt_comm *m = c->comm;
  const ir_node *n = b->n;
  int axis = b->group;
  if (axis < 0) {
    rt_errf(err, errlen, "internal error: the communicator has no mesh axis %s", ir_axis_name(b->axis));
    return -1;
  }
  int size = b->size, dim = b->dim;
  rt_reduce_op op = b->reduce;
  const ir_type *ti = n->n_in ? &n->in[0]->type : &n->out[0]->type;
  ir_dtype dt = ti->dtype;
  int64_t count = ir_type_numel(ti), outer, L;
  size_t inner;
  char *blk = c->scratch[2];
  switch (n->op) {
  case IR_OP_ALL_REDUCE: return rt_comm_all_reduce(m, axis, op, dt, in, out, count, err, errlen);
  case IR_OP_ALL_GATHER:
    split_at(ti, dim, &outer, &L, &inner);
    if (outer == 1) return rt_comm_all_gather(m, axis, dt, in, out, count, err, errlen);
    if (rt_comm_all_gather(m, axis, dt, in, blk, count, err, errlen) != 0) return -1;
    return blocks(c, out, blk, outer, size, L, inner, false, err, errlen);
  case IR_OP_REDUCE_SCATTER:
    split_at(ti, dim, &outer, &L, &inner);
    if (outer == 1) return rt_comm_reduce_scatter(m, axis, op, dt, in, out, count / size, err, errlen);
    if (blocks(c, blk, in, outer, size, L / size, inner, true, err, errlen) != 0) return -1;
    return rt_comm_reduce_scatter(m, axis, op, dt, blk, out, count / size, err, errlen);
  case IR_OP_ALL_TO_ALL: {
    int sd = b->split_dim, cd = b->concat_dim;
    int64_t o1, l1, o2, l2;
    size_t i1, i2;
    split_at(ti, sd, &o1, &l1, &i1);
    if (blocks(c, blk, in, o1, size, l1 / size, i1, true, err, errlen) != 0) return -1; /* block j: slice j of split_dim */
    if (rt_comm_all_to_all(m, axis, dt, blk, c->scratch[1] == out ? c->scratch[0] : c->scratch[1], count / size, err,
                           errlen) != 0)
      return -1;
    /* received block j is [...] with split_dim divided; concatenate them along concat_dim */
    ir_type part = *ti;
    part.dims[sd] /= size;
    split_at(&part, cd, &o2, &l2, &i2);
    return blocks(c, out, c->scratch[1] == out ? c->scratch[0] : c->scratch[1], o2, size, l2, i2, false, err, errlen);
  }
  case IR_OP_COMM_BROADCAST:
    if (move(c, out, in, (size_t)count * ir_dtype_size(dt), err, errlen) != 0) return -1;
    return rt_comm_broadcast(m, axis, b->root, dt, out, count, err, errlen);
  case IR_OP_SEND: return rt_comm_send(m, axis, b->peer, dt, in, count, err, errlen);
  case IR_OP_RECV: return rt_comm_recv(m, axis, b->peer, dt, out, count, err, errlen);
  case IR_OP_MESH_SLICE: {
    split_at(ti, dim, &outer, &L, &inner);
    int coord = rt_comm_coord(m, axis);
    size_t part = (size_t)(L / size) * inner;
    for (int64_t o = 0; o < outer; o++)
      if (move(c, (char *)out + (size_t)o * part, (const char *)in + ((size_t)o * (size_t)L * inner) + (size_t)coord * part,
               part, err, errlen) != 0)
        return -1;
    return 0;
  }
  default: rt_errf(err, errlen, "internal error: %s is not a mesh step", ir_op_name(n->op)); return -1;
  }
}

/* ---- operations in flight (the comm layer's overlap) ---- */

/* Whether step b may be left in flight: one whole-buffer NCCL call. */
static bool may_fly(const rt_coll *c, const bound *b) {
  if (!c->overlap || b->size == 1 || b->group < 0) return false;
  const ir_node *n = b->n;
  int64_t outer, L;
  size_t inner;
  switch (n->op) {
  case IR_OP_ALL_REDUCE: return true;
  case IR_OP_ALL_GATHER:
  case IR_OP_REDUCE_SCATTER: split_at(&n->in[0]->type, b->dim, &outer, &L, &inner); return outer == 1;
  default: return false;
  }
}

static int close_batch(rt_coll *c, char *err, size_t errlen) {
  if (!c->batch_open) return 0;
  c->batch_open = false;
  return rt_comm_batch_end(c->comm, err, errlen);
}

int rt_coll_settle(rt_coll *c, const rt_tensor *const *ts, int n, char *err, size_t errlen) {
  if (!c->overlap) return 0;
  if (close_batch(c, err, errlen) != 0) return -1;
  for (int i = 0; i < n && !c->no_joins && rt_comm_in_flight(c->comm); i++)
    if (ts[i]->nbytes && rt_comm_join(c->comm, ts[i]->data, ts[i]->nbytes, err, errlen) != 0) return -1;
  return 0;
}

int rt_coll_finish(rt_coll *c, char *err, size_t errlen) {
  if (!c->overlap) return 0;
  return close_batch(c, err, errlen) != 0 || (!c->no_joins && rt_comm_join_all(c->comm, err, errlen) != 0) ? -1 : 0;
}

int rt_coll_run(rt_coll *c, int index, const rt_tensor *const *in, rt_tensor *const *out, char *err, size_t errlen) {
  if (index < 0 || index >= c->n_steps) {
    rt_errf(err, errlen, "internal error: collective %d is not one of the program's %d", index, c->n_steps);
    return -1;
  }
  const bound *b = &c->steps[index];
  const ir_node *n = b->n;
  if (c->overlap) {
    if (may_fly(c, b)) {
      /* a group's operations run in no order among themselves: one on
       * another communicator, or on bytes the open batch uses (a sum of
       * sums, a buffer reused), goes in the next batch */
      if (c->batch_open && (b->group != c->batch_group || rt_comm_batch_touches(c->comm, in[0]->data, in[0]->nbytes) ||
                            rt_comm_batch_touches(c->comm, out[0]->data, out[0]->nbytes)) &&
          close_batch(c, err, errlen) != 0)
        return -1;
      if (!c->batch_open && rt_comm_batch_begin(c->comm, err, errlen) != 0) return -1;
      c->batch_open = true, c->batch_group = b->group;
      return run_comm(c, b, in[0]->data, out[0]->data, err, errlen);
    }
    if (rt_coll_settle(c, in, n->n_in, err, errlen) != 0 ||
        rt_coll_settle(c, (const rt_tensor *const *)out, n->n_out, err, errlen) != 0)
      return -1;
  }
  if (b->size == 1) return run_local(c, b, in, out, err, errlen);
  if (!c->comm) {
    rt_errf(err, errlen, "%s over %s needs the %d ranks of that mesh axis; this run has one process (start tgc "
            "with mpirun and --mesh)", ir_op_name(n->op), ir_axis_name(b->axis), b->size);
    return -1;
  }
  const void *src = n->n_in ? in[0]->data : NULL;
  void *dst = n->n_out ? out[0]->data : NULL;
  if (c->nccl && !c->host_ptrs) return run_comm(c, b, src, dst, err, errlen); /* device pointers throughout */
  if (!c->host_ptrs) { /* through host memory */
    if (n->n_in && rt_download(c->scratch[0], in[0], err, errlen) != 0) return -1;
    src = c->scratch[0], dst = c->scratch[1];
  }
  if (run_comm(c, b, src, dst, err, errlen) != 0) return -1;
  if (!c->host_ptrs && n->n_out && rt_upload(out[0], c->scratch[1], err, errlen) != 0) return -1;
  return 0;
}
