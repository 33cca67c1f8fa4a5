/* runtime/collective.c — the executor's steps that involve the device mesh:
 * the communication ops of ops.def (flag COMM) and mesh_slice, which the
 * executor runs here instead of calling a backend kernel.
 *
 * Groups of one rank (attribute n = 1, as on a one-device mesh, or in the
 * one-process tests of the autodiff rules) need no communicator: every
 * collective is then a copy of its operand, and a send to oneself is held
 * in a FIFO until a recv from oneself takes it (messages between one pair
 * of ranks arrive in the order sent, as the comm layer promises). Each
 * send node has its own staging buffer, allocated with the program, so a
 * run allocates nothing. A group of more ranks needs the comm layer
 * (runtime/comm/), which a multi-rank run binds to the program.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct {
  const ir_node *send; /* the node whose staging buffer holds the message */
  rt_buffer *buf;
} message;

struct rt_coll {
  const ir_graph *g;
  rt_buffer **staging; /* by node index: a buffer per send node */
  message *fifo;       /* sent and not yet received, oldest first */
  int head, tail, cap;
};

static const char *str_attr(const ir_node *n, const char *key) {
  const ir_attr *a = ir_node_attr(n, key);
  return a && a->kind == IR_ATTR_STR ? a->s : "?";
}

rt_coll *rt_coll_new(rt_device *d, const ir_graph *g, char *err, size_t errlen) {
  rt_coll *c = calloc(1, sizeof *c);
  if (!c || !(c->staging = calloc((size_t)g->n_nodes + 1, sizeof *c->staging))) {
    free(c);
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  c->g = g;
  int sends = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_SEND) continue;
    size_t bytes = (size_t)ir_type_numel(&n->in[0]->type) * ir_dtype_size(n->in[0]->type.dtype);
    if (!(c->staging[i] = rt_buffer_alloc(d, bytes, err, errlen))) {
      rt_coll_free(c);
      return NULL;
    }
    sends++;
  }
  c->cap = sends + 1;
  if (!(c->fifo = calloc((size_t)c->cap, sizeof *c->fifo))) {
    rt_coll_free(c);
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  return c;
}

void rt_coll_free(rt_coll *c) {
  if (!c) return;
  for (int i = 0; c->staging && i < c->g->n_nodes; i++) rt_buffer_free(c->staging[i]);
  free(c->staging);
  free(c->fifo);
  free(c);
}

/* Every message of the last run was received (a run that leaves one behind
 * sent to nobody). */
void rt_coll_reset(rt_coll *c) { c->head = c->tail = 0; }

static int copy(const rt_tensor *dst, const rt_tensor *src, char *err, size_t errlen) {
  if (dst->data == src->data || dst->nbytes == 0) return 0;
  return rt_copy(dst, src, err, errlen);
}

int rt_coll_run(rt_coll *c, const ir_node *n, const rt_tensor *const *in, rt_tensor *const *out, char *err,
                size_t errlen) {
  int64_t size = ir_node_attr_int(n, "n", 1);
  if (size != 1) {
    rt_errf(err, errlen, "%s over %s needs the %lld ranks of that mesh axis; this run has one process (start tgc "
            "with mpirun and --mesh)", ir_op_name(n->op), str_attr(n, "axis"), (long long)size);
    return -1;
  }
  switch (n->op) {
  case IR_OP_SEND: {
    int idx = -1;
    for (int i = 0; i < c->g->n_nodes && idx < 0; i++)
      if (c->g->nodes[i] == n) idx = i;
    if (idx < 0 || !c->staging[idx] || c->tail - c->head >= c->cap) {
      rt_errf(err, errlen, "internal error: send without a staging buffer");
      return -1;
    }
    rt_tensor staged = rt_tensor_view(c->staging[idx], 0, &n->in[0]->type);
    if (copy(&staged, in[0], err, errlen) != 0) return -1;
    c->fifo[c->tail++ % c->cap] = (message){n, c->staging[idx]};
    return 0;
  }
  case IR_OP_RECV: {
    const char *axis = str_attr(n, "axis");
    for (int k = c->head; k < c->tail; k++) {
      message *m = &c->fifo[k % c->cap];
      if (strcmp(str_attr(m->send, "axis"), axis) != 0) continue;
      if (!ir_type_equal(&m->send->in[0]->type, &n->out[0]->type)) {
        char a[128], b[128];
        rt_errf(err, errlen, "recv over %s expects %s but the message sent is %s", axis,
                ir_type_str(&n->out[0]->type, a, sizeof a), ir_type_str(&m->send->in[0]->type, b, sizeof b));
        return -1;
      }
      rt_tensor staged = rt_tensor_view(m->buf, 0, &n->out[0]->type);
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
