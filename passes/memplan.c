/* passes/memplan.c — the memory planner's prediction: the bytes of tensors
 * the CPU executor holds while it runs a graph, found by replaying exactly
 * the allocation schedule of runtime/cpu.c (keep the two in step):
 *  - inputs and params are borrowed from the caller: never counted;
 *  - before a node runs, each of its results is allocated (counted) in turn,
 *    the peak checked after each allocation — unless the result takes over
 *    an operand's buffer (ir_node_may_reuse; the first operand that is not
 *    an input/param, not an output, read by nothing after this node and not
 *    taken by an earlier result): then the bytes change hands;
 *  - after the node, each operand whose last use (the last non-dead node
 *    reading it) is this node is freed unless it is a graph output, and a
 *    result nobody reads is freed at once (again unless it is an output);
 *  - dead nodes are skipped (neither run nor counted as uses);
 *  - at the end, an output that is an input/param, or that is listed a second
 *    time, is copied (allocated) while everything else is still held.
 * A tensor's size is elements x dtype size, as rt_tensor_new allocates.
 *
 * Besides the peak it reports what the peak is made of (bytes of each role
 * live at that moment), the activation peak (the largest sum of live act +
 * recompute bytes at any moment: what checkpointing trades), and the
 * activations saved for the backward pass (forward values still held when
 * the first backward node runs). Sizes are size_t: a graph of any config can
 * be analysed without allocating anything.
 */
#include <stdlib.h>
#include <string.h>

#include "pass.h"

static size_t value_bytes(const ir_value *v) {
  if ((int)v->type.dtype < 0 || v->type.dtype >= IR_NUM_DTYPES) return 0;
  size_t n = ir_dtype_size(v->type.dtype);
  for (int d = 0; d < v->type.rank; d++) n *= (size_t)(v->type.dims[d] > 0 ? v->type.dims[d] : 0);
  return n;
}

typedef struct {
  int last_use;    /* index of the last non-dead node reading it, -1 if none */
  bool is_output;
  bool borrowed;   /* input or param */
  bool live;
  bool listed;     /* seen as an output by the final copy loop */
  size_t bytes;
} mp_slot;

typedef struct {
  const ir_graph *g;
  mp_slot *s;
  int n;
  size_t live, live_role[IR_NUM_ROLES];
  pass_mem_report *r;
} mp;

static mp_slot *slot(mp *m, const ir_value *v) { return v && v->id >= 0 && v->id < m->n ? &m->s[v->id] : NULL; }

static void note_peak(mp *m, int node) {
  size_t act = m->live_role[IR_ROLE_ACT] + m->live_role[IR_ROLE_RECOMPUTE];
  if (act > m->r->activation_peak_bytes) m->r->activation_peak_bytes = act;
  if (m->r->peak_node == -2 || m->live > m->r->peak_bytes) {
    m->r->peak_bytes = m->live;
    m->r->peak_node = node;
    memcpy(m->r->peak_role_bytes, m->live_role, sizeof m->live_role);
  }
}

static void alloc_value(mp *m, const ir_value *v, int node) {
  mp_slot *s = slot(m, v);
  if (!s) return;
  s->live = true;
  m->live += s->bytes;
  m->live_role[v->role < IR_NUM_ROLES ? v->role : IR_ROLE_ACT] += s->bytes;
  note_peak(m, node);
}

static void release(mp *m, const ir_value *v) {
  mp_slot *s = slot(m, v);
  if (!s || !s->live || s->borrowed) return;
  s->live = false;
  m->live -= s->bytes;
  m->live_role[v->role < IR_NUM_ROLES ? v->role : IR_ROLE_ACT] -= s->bytes;
}

static bool is_backward_node(const ir_node *n) {
  pass_phase p = pass_node_phase(n);
  return p == PASS_PHASE_BACKWARD || p == PASS_PHASE_OPTIMIZER;
}

int pass_memplan_analyze(const ir_graph *g, pass_mem_report *r) {
  memset(r, 0, sizeof *r);
  r->peak_node = -2; /* nothing seen yet */
  mp m = {.g = g, .n = ir_graph_id_bound(g), .r = r};
  m.s = calloc((size_t)(m.n > 0 ? m.n : 1), sizeof *m.s);
  if (!m.s) return -1;
  for (int i = 0; i < m.n; i++) m.s[i].last_use = -1;
  for (int i = 0; i < g->n_values; i++) {
    mp_slot *s = slot(&m, g->values[i]);
    if (s) s->bytes = value_bytes(g->values[i]);
  }
  for (int i = 0; i < g->n_nodes; i++)
    for (int j = 0; j < g->nodes[i]->n_out; j++) {
      mp_slot *s = slot(&m, g->nodes[i]->out[j]);
      if (s) s->bytes = value_bytes(g->nodes[i]->out[j]);
    }
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ir_node *n = g->nodes[ni];
    if (n->dead) continue;
    for (int i = 0; i < n->n_in; i++) {
      mp_slot *s = slot(&m, n->in[i]);
      if (s) s->last_use = ni;
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    mp_slot *s = slot(&m, g->outputs[i].value);
    if (s) s->is_output = true;
  }
  for (int i = 0; i < g->n_inputs; i++) {
    mp_slot *s = slot(&m, g->inputs[i]);
    if (s) s->borrowed = s->live = true;
  }
  for (int i = 0; i < g->n_params; i++) {
    mp_slot *s = slot(&m, g->params[i]);
    if (s) s->borrowed = s->live = true;
  }
  r->first_backward_node = -1;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ir_node *n = g->nodes[ni];
    if (n->dead) continue;
    if (r->first_backward_node < 0 && is_backward_node(n)) {
      r->first_backward_node = ni;
      r->saved_bytes = m.live_role[IR_ROLE_ACT];
    }
    for (int k = 0; k < n->n_out; k++) {
      int reuse = -1;
      for (int i = 0; i < n->n_in && reuse < 0; i++) {
        mp_slot *s = slot(&m, n->in[i]);
        if (s && s->live && !s->borrowed && !s->is_output && s->last_use == ni && ir_node_may_reuse(n, k, i)) reuse = i;
      }
      if (reuse < 0) {
        alloc_value(&m, n->out[k], ni);
        continue;
      }
      /* the operand's buffer becomes the result */
      const ir_value *a = n->in[reuse], *o = n->out[k];
      mp_slot *sa = slot(&m, a), *so = slot(&m, o);
      sa->live = false;
      m.live_role[a->role < IR_NUM_ROLES ? a->role : IR_ROLE_ACT] -= sa->bytes;
      m.live += so->bytes - sa->bytes; /* equal: same type, or a reshape */
      m.live_role[o->role < IR_NUM_ROLES ? o->role : IR_ROLE_ACT] += so->bytes;
      so->live = true;
      note_peak(&m, ni);
    }
    for (int i = 0; i < n->n_in; i++) {
      mp_slot *s = slot(&m, n->in[i]);
      if (s && s->last_use == ni && !s->is_output) release(&m, n->in[i]);
    }
    for (int i = 0; i < n->n_out; i++) {
      mp_slot *s = slot(&m, n->out[i]);
      if (s && s->last_use < ni && !s->is_output) release(&m, n->out[i]);
    }
  }
  /* the copies handed out for outputs that are inputs/params or repeated */
  for (int i = 0; i < g->n_outputs; i++) {
    const ir_value *v = g->outputs[i].value;
    mp_slot *s = slot(&m, v);
    if (!s) continue;
    bool repeated = s->listed; /* listed by an earlier output (a flag, not a scan: outputs can be many) */
    s->listed = true;
    if (s->borrowed || repeated) {
      m.live += s->bytes;
      m.live_role[v->role < IR_NUM_ROLES ? v->role : IR_ROLE_ACT] += s->bytes;
      note_peak(&m, g->n_nodes);
    }
  }
  if (r->peak_node < -1) r->peak_node = -1;
  r->final_bytes = m.live;
  free(m.s);
  return 0;
}

size_t pass_predict_peak_bytes(const ir_graph *g) {
  pass_mem_report r;
  return pass_memplan_analyze(g, &r) == 0 ? r.peak_bytes : 0;
}
