/* analysis/memplan.c — the memory plan: where every value of a graph lives,
 * as data every backend follows.
 *
 * pass_memplan gives each value a location: graph inputs and params are
 * bound by the caller at run time (spaces INPUT and PARAM: the caller's
 * buffers); every node result lives in a *buffer*. A buffer is either a
 * block of the one arena of the graph (offset aligned to o->alignment,
 * 256 bytes by default) or, by donation, the caller's input / param buffer.
 * Several values may share a buffer:
 *  - a VIEW op's result (reshape: IR_OPF_VIEW) is its operand's bytes: the
 *    same buffer and offset, and no kernel runs (the step is a view);
 *  - in place: result r of node n takes the buffer of operand i when
 *    ir_node_may_reuse(n, r, i) (IR_OPF_INPLACE: same type, the kernel reads
 *    each element before writing it), nothing reads any value of that buffer
 *    after n, no value of it is a graph output, it is an arena buffer or a
 *    donated input / param, and no earlier result of n took it — the first
 *    such operand, unless another operand of n is a different value on the
 *    same bytes (a view read with another index map). (The rule every
 *    backend obeys: kernels of INPLACE ops are written for it.)
 *  - an all_reduce's result takes its operand's buffer on the same terms
 *    (NCCL's in-place form; ir_node_may_reuse).
 * A buffer is live from the step that creates it to the last step that
 * reads one of its values; a buffer holding a graph output lives to the end,
 * and the operand of another collective whose result is an output to the
 * next run of collectives after the work that follows it (a reduce-scatter
 * of a gradient bucket may still read it, in flight, until the next bucket).
 * Results nobody reads live for their own step. Dead nodes are skipped.
 * Arena offsets: buffers in order of size (largest first, then earliest),
 * each at the lowest aligned offset free of every placed buffer whose
 * lifetime overlaps its own (first fit). The arena's size is the end of the
 * highest buffer: a backend allocates exactly that, once, so the planned
 * memory is the allocated memory by construction.
 *
 * Steps: one per non-dead node, in graph order, saying whether it is a view
 * (no kernel) and whether its results are zero-filled before the kernel runs
 * (IR_OPF_ZEROED: kernels that accumulate).
 *
 * pass_memplan_analyze reads a plan made without donation: the peak of live
 * bytes (buffers' exact sizes, no alignment) and what it is made of by role,
 * the activation peak (live act + recompute bytes: what checkpointing
 * trades), the activations saved for the backward pass (forward bytes live
 * when the first backward node runs) and the arena size. Sizes are size_t
 * and nothing is allocated for the tensors themselves: a graph of any config
 * can be planned.
 *
 * requires: a verified graph; invalidates: nothing (the plan is keyed by
 * value id and node index: rebuild it after any pass).
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

static size_t value_bytes(const ir_value *v) {
  if ((int)v->type.dtype < 0 || v->type.dtype >= IR_NUM_DTYPES) return 0;
  size_t n = ir_dtype_size(v->type.dtype);
  for (int d = 0; d < v->type.rank; d++) n *= (size_t)(v->type.dims[d] > 0 ? v->type.dims[d] : 0);
  return n;
}

static size_t round_up(size_t n, size_t a) { return a > 1 ? (n + a - 1) / a * a : n; }

/* Per value during planning. */
typedef struct {
  int last_read;   /* step of the last non-dead node reading it, -1 if none */
  bool output;     /* a graph output */
  int buffer;      /* its buffer, -1 until defined */
} vinfo;

/* Per buffer during planning. */
typedef struct {
  int last_read;   /* the latest last_read of its values */
  bool output;     /* holds an output: lives to the end */
  bool reusable;   /* arena, or a donated input / param */
  int taken_at;    /* step at which a result took it over (-1) */
} binfo;

typedef struct {
  const ir_graph *g;
  pass_plan *p;
  vinfo *v;
  binfo *b;
  int cap_buffers;
} planner;

static int new_buffer(planner *P, pass_space space, int index, size_t bytes, int first, ir_role role, bool reusable) {
  pass_plan *p = P->p;
  if (p->n_buffers == P->cap_buffers) {
    int cap = P->cap_buffers ? 2 * P->cap_buffers : 64;
    pass_buffer *nb = realloc(p->buffers, (size_t)cap * sizeof *nb);
    binfo *ni = realloc(P->b, (size_t)cap * sizeof *ni);
    if (nb) p->buffers = nb;
    if (ni) P->b = ni;
    if (!nb || !ni) return -1;
    P->cap_buffers = cap;
  }
  int k = p->n_buffers++;
  p->buffers[k] = (pass_buffer){.space = space, .index = index, .bytes = bytes, .first = first, .last = first,
                                .role = role};
  P->b[k] = (binfo){.last_read = -1, .reusable = reusable, .taken_at = -1};
  return k;
}

/* Puts value v on buffer k (whose location it then shares). */
static void assign(planner *P, const ir_value *v, int k) {
  vinfo *vi = &P->v[v->id];
  binfo *bi = &P->b[k];
  vi->buffer = k;
  if (vi->last_read > bi->last_read) bi->last_read = vi->last_read;
  bi->output |= vi->output;
}

/* The operand buffer result r of node n (at step s) takes, or -1. */
static int reuse_of(planner *P, const ir_node *n, int s, int r) {
  for (int i = 0; i < n->n_in; i++) {
    int k = P->v[n->in[i]->id].buffer;
    if (k < 0) continue;
    binfo *bi = &P->b[k];
    if (!bi->reusable || bi->output || bi->last_read != s || bi->taken_at == s) continue;
    if (!ir_node_may_reuse(n, r, i)) continue;
    if (value_bytes(n->out[r]) != value_bytes(n->in[i])) continue;
    /* another value on the same bytes (a view) is read with another index
     * map: writing element e could clobber what it still has to read */
    bool aliased = false;
    for (int j = 0; j < n->n_in && !aliased; j++)
      aliased = n->in[j] != n->in[i] && P->v[n->in[j]->id].buffer == k;
    if (aliased) continue;
    return k;
  }
  return -1;
}

static int plan_steps(planner *P, const pass_plan_options *o) {
  const ir_graph *g = P->g;
  pass_plan *p = P->p;
  for (int i = 0; i < g->n_inputs; i++) {
    int k = new_buffer(P, PASS_SPACE_INPUT, i, value_bytes(g->inputs[i]), -1, g->inputs[i]->role,
                       o && o->donate_inputs && o->donate_inputs[i]);
    if (k < 0) return -1;
    assign(P, g->inputs[i], k);
  }
  for (int i = 0; i < g->n_params; i++) {
    int k = new_buffer(P, PASS_SPACE_PARAM, i, value_bytes(g->params[i]), -1, g->params[i]->role,
                       o && o->donate_params && o->donate_params[i]);
    if (k < 0) return -1;
    assign(P, g->params[i], k);
  }
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *n = g->nodes[p->steps[s].node];
    pass_step *st = &p->steps[s];
    st->view = ir_op_has(n->op, IR_OPF_VIEW) && n->n_out == 1 && n->n_in >= 1;
    st->zero = ir_op_has(n->op, IR_OPF_ZEROED);
    for (int r = 0; r < n->n_out; r++) {
      const ir_value *v = n->out[r];
      int k = st->view ? P->v[n->in[0]->id].buffer : reuse_of(P, n, s, r);
      if (k >= 0 && !st->view) {
        P->b[k].taken_at = s;
        p->loc[v->id].reused_operand = -1;
        for (int i = 0; i < n->n_in; i++)
          if (P->v[n->in[i]->id].buffer == k) {
            p->loc[v->id].reused_operand = i;
            break;
          }
      }
      if (k < 0 && (k = new_buffer(P, PASS_SPACE_ARENA, -1, value_bytes(v), s, v->role, true)) < 0) return -1;
      assign(P, v, k);
    }
  }
  return 0;
}

/* Lifetimes of the arena buffers, then first-fit offsets. */
static const pass_buffer *sort_buffers; /* for qsort's comparator */
static int by_size(const void *a, const void *b) {
  const pass_buffer *x = &sort_buffers[*(const int *)a], *y = &sort_buffers[*(const int *)b];
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

static int place(planner *P, size_t align) {
  pass_plan *p = P->p;
  int end = p->n_steps; /* outputs live through the end */
  int n_arena = 0;
  for (int k = 0; k < p->n_buffers; k++) {
    pass_buffer *b = &p->buffers[k];
    int last = P->b[k].last_read > b->first ? P->b[k].last_read : b->first;
    b->last = P->b[k].output ? end : last;
    if (b->space == PASS_SPACE_ARENA) n_arena++;
  }
  int *order = malloc((size_t)(n_arena > 0 ? n_arena : 1) * sizeof *order);
  int *placed = malloc((size_t)(n_arena > 0 ? n_arena : 1) * sizeof *placed);
  if (!order || !placed) {
    free(order), free(placed);
    return -1;
  }
  int m = 0;
  for (int k = 0; k < p->n_buffers; k++)
    if (p->buffers[k].space == PASS_SPACE_ARENA) order[m++] = k;
  sort_buffers = p->buffers;
  qsort(order, (size_t)m, sizeof *order, by_size);
  /* placed[0..n_placed) sorted by offset; a buffer goes in the first gap
   * between those whose lifetimes overlap its own */
  int n_placed = 0;
  size_t arena = 0;
  for (int j = 0; j < m; j++) {
    pass_buffer *b = &p->buffers[order[j]];
    size_t need = round_up(b->bytes, align), at = 0;
    for (int q = 0; q < n_placed; q++) {
      const pass_buffer *c = &p->buffers[placed[q]];
      if (c->last < b->first || b->last < c->first) continue; /* never live together */
      if (c->offset >= at + need) break;                       /* the gap before c fits */
      size_t c_end = c->offset + round_up(c->bytes, align);
      if (c_end > at) at = c_end;
    }
    b->offset = at;
    if (at + need > arena) arena = at + need;
    /* insert in offset order */
    int q = n_placed++;
    while (q > 0 && p->buffers[placed[q - 1]].offset > at) {
      placed[q] = placed[q - 1];
      q--;
    }
    placed[q] = order[j];
  }
  p->arena_bytes = arena;
  free(order);
  free(placed);
  return 0;
}

pass_plan *pass_memplan(const ir_graph *g, const pass_plan_options *o) {
  pass_plan *p = calloc(1, sizeof *p);
  planner P = {.g = g, .p = p};
  if (!p) return NULL;
  p->alignment = o && o->alignment ? o->alignment : PASS_PLAN_ALIGNMENT;
  p->n_values = ir_graph_id_bound(g);
  p->loc = calloc((size_t)(p->n_values > 0 ? p->n_values : 1), sizeof *p->loc);
  P.v = calloc((size_t)(p->n_values > 0 ? p->n_values : 1), sizeof *P.v);
  p->steps = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof *p->steps);
  if (!p->loc || !P.v || !p->steps) goto oom;
  for (int i = 0; i < p->n_values; i++) {
    P.v[i] = (vinfo){.last_read = -1, .buffer = -1};
    p->loc[i] = (pass_loc){.space = PASS_SPACE_NONE, .buffer = -1, .reused_operand = -1};
  }
  for (int ni = 0; ni < g->n_nodes; ni++)
    if (!g->nodes[ni]->dead) p->steps[p->n_steps++].node = ni;
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *n = g->nodes[p->steps[s].node];
    for (int i = 0; i < n->n_in; i++) P.v[n->in[i]->id].last_read = s;
  }
  for (int i = 0; i < g->n_outputs; i++) P.v[g->outputs[i].value->id].output = true;
  /* the operand of a collective whose result leaves the program (a
   * gradient reduce-scattered in the backward) is not reused before the
   * next run of collectives after the work that follows it (the next
   * bucket), or the end: a device may still be reading it meanwhile (the
   * comm layer's overlap leaves such collectives in flight, one bucket's
   * backward long; a reuse after that waits for them). An all-reduce takes
   * its operand's buffer in place instead (ir_node_may_reuse). */
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *n = g->nodes[p->steps[s].node];
    if (!ir_op_has(n->op, IR_OPF_COMM) || n->op == IR_OP_ALL_REDUCE || n->n_out != 1 || !P.v[n->out[0]->id].output)
      continue;
    int next = s + 1;
    while (next < p->n_steps && ir_op_has(g->nodes[p->steps[next].node]->op, IR_OPF_COMM)) next++;
    while (next < p->n_steps && !ir_op_has(g->nodes[p->steps[next].node]->op, IR_OPF_COMM)) next++;
    for (int i = 0; i < n->n_in; i++)
      if (P.v[n->in[i]->id].last_read < next) P.v[n->in[i]->id].last_read = next;
  }
  if (plan_steps(&P, o) != 0 || place(&P, p->alignment) != 0) goto oom;
  /* every value's location: its buffer's */
  for (int i = 0; i < p->n_values; i++) {
    int k = P.v[i].buffer;
    if (k < 0) continue;
    const pass_buffer *b = &p->buffers[k];
    p->loc[i].space = b->space;
    p->loc[i].index = b->index;
    p->loc[i].offset = b->space == PASS_SPACE_ARENA ? b->offset : 0;
    p->loc[i].buffer = k;
  }
  for (int i = 0; i < g->n_values; i++) {
    const ir_value *v = g->values[i];
    if (v->id >= 0 && v->id < p->n_values) p->loc[v->id].bytes = value_bytes(v);
  }
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *n = g->nodes[p->steps[s].node];
    for (int r = 0; r < n->n_out; r++) p->loc[n->out[r]->id].bytes = value_bytes(n->out[r]);
  }
  free(P.v);
  free(P.b);
  return p;
oom:
  free(P.v);
  free(P.b);
  pass_plan_free(p);
  return NULL;
}

/* The bytes of value v in plan p overlap those of w: the same caller buffer
 * or arena ranges that intersect. */
static bool same_bytes_overlap(const pass_plan *p, const ir_value *v, const ir_value *w, bool *same_start) {
  const pass_loc *a = &p->loc[v->id], *b = &p->loc[w->id];
  *same_start = false;
  if (a->space == PASS_SPACE_NONE || a->space != b->space || !a->bytes || !b->bytes) return false;
  if (a->space != PASS_SPACE_ARENA && a->index != b->index) return false;
  *same_start = a->offset == b->offset;
  return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

int pass_plan_check_comm(const ir_graph *g, const pass_plan *p, char *why, size_t n) {
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *x = g->nodes[p->steps[s].node];
    if (!ir_op_has(x->op, IR_OPF_COMM) || x->n_in < 1 || x->n_out < 1) continue;
    bool in_place_ok = x->op == IR_OP_ALL_REDUCE || x->op == IR_OP_COMM_BROADCAST;
    for (int i = 0; i < x->n_in; i++) {
      bool same;
      if (!same_bytes_overlap(p, x->out[0], x->in[i], &same)) continue;
      if (in_place_ok && same && p->loc[x->out[0]->id].bytes == p->loc[x->in[i]->id].bytes) continue;
      snprintf(why, n, "%s %%%s overlaps its operand %%%s in memory (%s %zu..%zu and %zu..%zu): NCCL leaves that undefined",
               ir_op_name(x->op), x->out[0]->name, x->in[i]->name, pass_space_name(p->loc[x->out[0]->id].space),
               p->loc[x->out[0]->id].offset, p->loc[x->out[0]->id].offset + p->loc[x->out[0]->id].bytes,
               p->loc[x->in[i]->id].offset, p->loc[x->in[i]->id].offset + p->loc[x->in[i]->id].bytes);
      return -1;
    }
  }
  return 0;
}

void pass_plan_free(pass_plan *p) {
  if (!p) return;
  free(p->loc);
  free(p->steps);
  free(p->buffers);
  free(p);
}

/* ---- the analysis: live bytes over the steps ---- */

static bool is_backward_node(const ir_node *n) {
  pass_phase ph = pass_node_phase(n);
  return ph == PASS_PHASE_BACKWARD || ph == PASS_PHASE_OPTIMIZER;
}

int pass_memplan_analyze(const ir_graph *g, pass_mem_report *r) {
  memset(r, 0, sizeof *r);
  pass_plan *p = pass_memplan(g, NULL);
  if (!p) return -1;
  r->arena_bytes = p->arena_bytes;
  r->first_backward_node = -1;
  r->peak_node = -1;
  /* bytes made at each step, and freed before it (after the previous one) */
  int n = p->n_steps;
  double(*plus)[IR_NUM_ROLES] = calloc((size_t)n + 2, sizeof *plus);
  double(*minus)[IR_NUM_ROLES] = calloc((size_t)n + 2, sizeof *minus);
  if (!plus || !minus) {
    free(plus), free(minus);
    pass_plan_free(p);
    return -1;
  }
  for (int k = 0; k < p->n_buffers; k++) {
    const pass_buffer *b = &p->buffers[k];
    if (b->space != PASS_SPACE_ARENA) continue;
    int role = b->role < IR_NUM_ROLES ? b->role : IR_ROLE_ACT;
    plus[b->first][role] += (double)b->bytes;
    minus[b->last + 1][role] += (double)b->bytes;
  }
  double live[IR_NUM_ROLES] = {0};
  bool seen = false;
  for (int s = 0; s <= n; s++) {
    for (int q = 0; q < IR_NUM_ROLES; q++) live[q] -= minus[s][q];
    if (s < n && r->first_backward_node < 0 && is_backward_node(g->nodes[p->steps[s].node])) {
      r->first_backward_node = p->steps[s].node;
      r->saved_bytes = (size_t)live[IR_ROLE_ACT]; /* forward values still held when the backward starts */
    }
    double total = 0;
    for (int q = 0; q < IR_NUM_ROLES; q++) total += (live[q] += plus[s][q]);
    double act = live[IR_ROLE_ACT] + live[IR_ROLE_RECOMPUTE];
    if (act > (double)r->activation_peak_bytes) r->activation_peak_bytes = (size_t)act;
    if (s < n && (!seen || total > (double)r->peak_bytes)) {
      seen = true;
      r->peak_bytes = (size_t)total;
      r->peak_node = p->steps[s].node;
      for (int q = 0; q < IR_NUM_ROLES; q++) r->peak_role_bytes[q] = (size_t)live[q];
    }
    if (s == n) r->final_bytes = (size_t)total;
  }
  free(plus);
  free(minus);
  pass_plan_free(p);
  return 0;
}

size_t pass_predict_peak_bytes(const ir_graph *g) {
  pass_plan *p = pass_memplan(g, NULL);
  size_t bytes = p ? p->arena_bytes : 0;
  pass_plan_free(p);
  return bytes;
}

/* ---- the listing (tgc dump --plan / --after memplan) ---- */

static const char *space_name(pass_space s) {
  switch (s) {
  case PASS_SPACE_ARENA: return "arena";
  case PASS_SPACE_INPUT: return "input";
  case PASS_SPACE_PARAM: return "param";
  default: return "-";
  }
}

const char *pass_space_name(pass_space s) { return space_name(s); }

void pass_plan_print(FILE *out, const ir_graph *g, const pass_plan *p) {
  fprintf(out, "memory plan: arena %zu bytes (alignment %zu), %d steps, %d buffers\n", p->arena_bytes, p->alignment,
          p->n_steps, p->n_buffers);
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *n = g->nodes[p->steps[s].node];
    for (int r = 0; r < n->n_out; r++) {
      const ir_value *v = n->out[r];
      const pass_loc *l = &p->loc[v->id];
      const pass_buffer *b = &p->buffers[l->buffer];
      char where[96];
      if (l->space == PASS_SPACE_ARENA) snprintf(where, sizeof where, "arena+%zu", l->offset);
      else snprintf(where, sizeof where, "%s %d", space_name(l->space), l->index);
      fprintf(out, "  %5d  %%%-24s %12zu B  %-16s live %d..%d", s, v->name ? v->name : "?", l->bytes, where,
              b->first, b->last);
      if (p->steps[s].view) fprintf(out, "  view of %%%s", n->in[0]->name);
      else if (l->reused_operand >= 0) fprintf(out, "  in place of %%%s", n->in[l->reused_operand]->name);
      if (p->steps[s].zero) fprintf(out, "  zeroed");
      fputc('\n', out);
    }
  }
}
