/* runtime/exec.c — the backend-neutral executor.
 *
 * A program is a graph prepared on a device: its memory plan (pass_memplan,
 * with the caller's donation flags), one arena of plan->arena_bytes
 * allocated on the device once, its list of actions (rt_action), and
 * whatever the backend's prepare keeps. Every value has a view (a tensor of
 * its type at its plan location): arena values are fixed when the program
 * is made; values in an input's or a param's space (the inputs and params
 * themselves, and results computed in a donated buffer or viewing one) are
 * rebound from the caller's tensors at each run, in place, so the actions'
 * tensor pointers stay valid. The actions are made once from the plan's
 * steps: a view step has none (its result is its operand's bytes); another
 * has a fill per result when the plan says its results start at zero, then
 * a kernel (the backend's run, with what its prepare bound to the action)
 * or a collective (collective.c, bound to its communicator). A run binds
 * the caller's tensors and walks the actions, the same list on every
 * backend (a backend with a run_program hook is handed the walk: the cuda
 * backend captures it once as a CUDA graph and launches that later).
 * Nothing is allocated or looked up while a program runs. Outputs are
 * views (rt_program_output), valid until the next run.
 *
 * rt_run is one run from host tensors: a device, a program, uploads
 * (none on a host-memory backend, where host tensors are bound as they
 * are), downloads into new host tensors.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "ir_clock.h"

struct rt_program {
  rt_device *dev;
  const ir_graph *g;
  pass_plan *plan;
  rt_buffer *arena;
  void *state;           /* the backend's */
  rt_coll *coll;         /* mesh steps (collective.c); NULL when the graph has none */
  rt_tensor *view;       /* by value id */
  rt_action *actions;    /* what a run does, in order */
  int n_actions;
  int n_runs;            /* its kernel and collective actions (a run adds them to rt_device_stats.kernels) */
  rt_tensor **args;      /* the actions' in / out arrays: pointers into view */
  rt_profile *profile;
};

const char *rt_action_kind_name(rt_action_kind k) {
  switch (k) {
  case RT_ACT_FILL: return "fill";
  case RT_ACT_KERNEL: return "kernel";
  case RT_ACT_COLLECTIVE: return "collective";
  }
  return "?";
}

/* The actions of the plan's steps (see the head of this file). */
static int make_actions(rt_program *p, char *err, size_t errlen) {
  const ir_graph *g = p->g;
  const pass_plan *plan = p->plan;
  size_t n_args = 0;
  int n = 0;
  for (int s = 0; s < plan->n_steps; s++) {
    const pass_step *st = &plan->steps[s];
    const ir_node *nd = g->nodes[st->node];
    if (st->view) continue;
    n += 1 + (st->zero ? nd->n_out : 0);
    n_args += (size_t)(nd->n_in + nd->n_out);
  }
  p->actions = calloc((size_t)n + 1, sizeof *p->actions);
  p->args = calloc(n_args + 1, sizeof *p->args);
  if (!p->actions || !p->args) {
    rt_errf(err, errlen, "out of memory");
    return -1;
  }
  rt_tensor **arg = p->args;
  for (int s = 0; s < plan->n_steps; s++) {
    const pass_step *st = &plan->steps[s];
    const ir_node *nd = g->nodes[st->node];
    if (st->view) continue;
    const rt_tensor *const *in = (const rt_tensor *const *)arg;
    for (int i = 0; i < nd->n_in; i++) *arg++ = &p->view[nd->in[i]->id];
    rt_tensor *const *out = arg;
    for (int i = 0; i < nd->n_out; i++) *arg++ = &p->view[nd->out[i]->id];
    rt_action a = {.step = s, .node = nd, .in = in, .out = out};
    for (int i = 0; st->zero && i < nd->n_out; i++) {
      a.kind = RT_ACT_FILL, a.index = i;
      p->actions[p->n_actions++] = a;
    }
    a.kind = RT_ACT_KERNEL, a.index = 0;
    if (rt_is_mesh_step(nd)) {
      a.kind = RT_ACT_COLLECTIVE;
      if ((a.index = p->coll ? rt_coll_index(p->coll, nd) : -1) < 0) {
        rt_errf(err, errlen, "internal error: %s is not a bound collective", ir_op_name(nd->op));
        return -1;
      }
    }
    p->actions[p->n_actions++] = a;
    p->n_runs++;
  }
  return 0;
}

/* "file:line:col: " + message into err. */
static void loc_errf(const ir_graph *g, ir_loc loc, char *err, size_t errlen, const char *msg) {
  if (!err || !errlen) return;
  const char *file = loc.file ? loc.file : g->source_file;
  if (loc.line > 0 && file) snprintf(err, errlen, "%s:%d:%d: %s", file, loc.line, loc.col, msg);
  else if (loc.line > 0) snprintf(err, errlen, "%d:%d: %s", loc.line, loc.col, msg);
  else snprintf(err, errlen, "%s", msg);
}

rt_program *rt_program_new(rt_device *d, const ir_graph *g, const rt_program_options *o, char *err, size_t errlen) {
  rt_program *p = calloc(1, sizeof *p);
  if (!p) {
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  p->dev = d;
  p->g = g;
  p->profile = o ? o->profile : NULL;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || rt_is_mesh_step(n) || d->backend->supports_op(n)) continue;
    char msg[256];
    if (n->op == IR_OP_GRAD)
      snprintf(msg, sizeof msg, "cannot run a grad request: the autodiff pass expands it (was it disabled?)");
    else snprintf(msg, sizeof msg, "the %s backend has no kernel for '%s'", d->backend->name, ir_op_name(n->op));
    loc_errf(g, n->loc, err, errlen, msg);
    goto fail;
  }
  pass_plan_options po = {.donate_inputs = o ? o->donate_inputs : NULL, .donate_params = o ? o->donate_params : NULL};
  if (!(p->plan = pass_memplan(g, &po))) {
    rt_errf(err, errlen, "out of memory planning the graph");
    goto fail;
  }
  char why[512];
  if (pass_plan_check_comm(g, p->plan, why, sizeof why) != 0) {
    rt_errf(err, errlen, "internal error: the memory plan: %s", why);
    goto fail;
  }
  p->view = calloc((size_t)(p->plan->n_values > 0 ? p->plan->n_values : 1), sizeof *p->view);
  if (!p->view) {
    rt_errf(err, errlen, "out of memory");
    goto fail;
  }
  if (!(p->arena = rt_buffer_alloc(d, p->plan->arena_bytes, err, errlen))) {
    /* name the largest value: usually the one that asks too much */
    const ir_value *big = NULL;
    for (int i = 0; i < g->n_values; i++) {
      const pass_loc *l = &p->plan->loc[g->values[i]->id];
      if (l->space == PASS_SPACE_ARENA && (!big || l->bytes > p->plan->loc[big->id].bytes)) big = g->values[i];
    }
    if (big) { /* a device backend's reason (its free memory) is kept after the plan's numbers */
      char msg[1024], ts[128], why[512];
      snprintf(why, sizeof why, "%s", err ? err : "");
      snprintf(msg, sizeof msg, "out of memory: the arena needs %zu bytes (its largest value, %%%s %s, %zu bytes)%s%s",
               p->plan->arena_bytes, rt_value_name(big), ir_type_str(&big->type, ts, sizeof ts),
               p->plan->loc[big->id].bytes, d->backend->host_memory || !why[0] ? "" : ": ",
               d->backend->host_memory ? "" : why);
      loc_errf(g, big->loc, err, errlen, msg);
    }
    goto fail;
  }
  /* arena views are fixed; the others are bound at each run */
  for (int i = 0; i < g->n_values; i++) {
    const ir_value *v = g->values[i];
    const pass_loc *l = &p->plan->loc[v->id];
    if (l->space == PASS_SPACE_ARENA) p->view[v->id] = rt_tensor_view(p->arena, l->offset, &v->type);
  }
  bool mesh_steps = false;
  for (int i = 0; i < g->n_nodes; i++) mesh_steps |= !g->nodes[i]->dead && rt_is_mesh_step(g->nodes[i]);
  if (mesh_steps && !(p->coll = rt_coll_new(d, g, o ? o->comm : NULL, err, errlen))) goto fail;
  if (make_actions(p, err, errlen) != 0) goto fail;
  if (d->backend->prepare &&
      d->backend->prepare(d, g, p->plan, p->actions, p->n_actions, &p->state, err, errlen) != 0)
    goto fail;
  return p;
fail:
  rt_program_free(p);
  return NULL;
}

void rt_program_free(rt_program *p) {
  if (!p) return;
  if (p->state && p->dev->backend->release) p->dev->backend->release(p->dev, p->state);
  rt_coll_free(p->coll);
  rt_buffer_free(p->arena);
  pass_plan_free(p->plan);
  free(p->view);
  free(p->actions);
  free(p->args);
  free(p);
}

const pass_plan *rt_program_plan(const rt_program *p) { return p->plan; }
size_t rt_program_arena_bytes(const rt_program *p) { return p->plan->arena_bytes; }
rt_device *rt_program_device(const rt_program *p) { return p->dev; }

const rt_action *rt_program_actions(const rt_program *p, int *n) {
  *n = p->n_actions;
  return p->actions;
}

void rt_program_print_actions(FILE *f, const rt_program *p) {
  for (int i = 0; i < p->n_actions; i++) {
    const rt_action *a = &p->actions[i];
    const ir_node *n = a->node;
    fprintf(f, "%4d %-10s", i, rt_action_kind_name(a->kind));
    if (a->kind == RT_ACT_FILL) {
      fprintf(f, " %%%s: %zu bytes", rt_value_name(n->out[a->index]), a->out[a->index]->nbytes);
    } else {
      for (int k = 0; k < n->n_out; k++) fprintf(f, "%s%%%s", k ? ", " : " ", rt_value_name(n->out[k]));
      fprintf(f, " = %s", ir_op_name(n->op));
      if (a->kind == RT_ACT_COLLECTIVE) {
        char what[128];
        rt_coll_describe(p->coll, a->index, what, sizeof what);
        fprintf(f, " %s", what);
      }
    }
    fprintf(f, "  [step %d]\n", a->step);
  }
}

const rt_tensor *rt_program_output(const rt_program *p, int i) {
  return i >= 0 && i < p->g->n_outputs ? &p->view[p->g->outputs[i].value->id] : NULL;
}

/* Checks and binds the caller's tensors of one kind. */
static int bind(rt_program *p, ir_value *const *vals, int n, rt_tensor *const *ts, pass_space space, char *err,
                size_t errlen) {
  const char *what = space == PASS_SPACE_INPUT ? "input" : "param";
  for (int i = 0; i < n; i++) {
    const ir_value *v = vals[i];
    char msg[400];
    if (!ts || !ts[i]) {
      snprintf(msg, sizeof msg, "no tensor given for %s %%%s", what, rt_value_name(v));
      loc_errf(p->g, v->loc, err, errlen, msg);
      return -1;
    }
    if (!ir_type_equal(&ts[i]->type, &v->type)) {
      char want[128], got[128];
      snprintf(msg, sizeof msg, "%s %%%s: expected %s, got %s", what, rt_value_name(v),
               ir_type_str(&v->type, want, sizeof want), ir_type_str(&ts[i]->type, got, sizeof got));
      loc_errf(p->g, v->loc, err, errlen, msg);
      return -1;
    }
    if (!ts[i]->buf || ts[i]->buf->dev != p->dev) {
      snprintf(msg, sizeof msg, "%s %%%s is not on the program's device", what, rt_value_name(v));
      loc_errf(p->g, v->loc, err, errlen, msg);
      return -1;
    }
  }
  /* every value living in these spaces: a view at the same place */
  for (int i = 0; i < p->g->n_values; i++) {
    const ir_value *v = p->g->values[i];
    const pass_loc *l = &p->plan->loc[v->id];
    if (l->space != space) continue;
    const rt_tensor *t = ts[l->index];
    p->view[v->id] = rt_tensor_view(t->buf, t->offset + l->offset, &v->type);
  }
  return 0;
}

/* Before action a (not a collective): the collectives in flight that use
 * its tensors' bytes joined (collective.c; nothing unless the comm layer
 * overlaps). A failure is named at a's line. */
static int settle(rt_program *p, const rt_action *a, char *err, size_t errlen) {
  char msg[512] = "";
  if (!p->coll || a->kind == RT_ACT_COLLECTIVE ||
      (rt_coll_settle(p->coll, a->in, a->node->n_in, msg, sizeof msg) == 0 &&
       rt_coll_settle(p->coll, (const rt_tensor *const *)a->out, a->node->n_out, msg, sizeof msg) == 0))
    return 0;
  loc_errf(p->g, a->node->loc, err, errlen, msg);
  return -1;
}

/* Before a backend runs actions [first, end) otherwise than through walk
 * (launching a CUDA graph of them, or capturing one): what they touch
 * joined, so that nothing in between orders them. */
static int join(void *ctx, int first, int end, char *err, size_t errlen) {
  rt_program *p = ctx;
  for (int i = first; i < end && p->coll; i++)
    if (settle(p, &p->actions[i], err, errlen) != 0) return -1;
  return 0;
}

/* Runs actions [first, end) of a bound program in order (ctx: the program). */
static int walk(void *ctx, int first, int end, char *err, size_t errlen) {
  rt_program *p = ctx;
  rt_device *d = p->dev;
  static const unsigned char zero = 0;
  rt_profile *prof = p->profile;
  for (int i = first; i < end; i++) {
    const rt_action *a = &p->actions[i];
    double t0 = prof ? ir_clock_s() : 0;
    char msg[512] = "";
    int rc;
    if (settle(p, a, err, errlen) != 0) return -1;
    switch (a->kind) {
    case RT_ACT_FILL: rc = rt_fill_bytes(d, a->out[a->index]->data, a->out[a->index]->nbytes, &zero, 1, msg, sizeof msg); break;
    case RT_ACT_COLLECTIVE: rc = rt_coll_run(p->coll, a->index, a->in, a->out, msg, sizeof msg); break;
    default: rc = d->backend->run(d, p->state, a, msg, sizeof msg); break;
    }
    if (rc != 0) {
      loc_errf(p->g, a->node->loc, err, errlen, msg);
      return -1;
    }
    if (prof) {
      double t = ir_clock_s() - t0;
      if (a->kind == RT_ACT_FILL) {
        prof->fill_seconds += t;
        prof->fills++;
        prof->fill_bytes += (double)a->out[a->index]->nbytes;
      } else {
        prof->seconds[a->node->op] += t;
        prof->calls[a->node->op]++;
      }
    }
  }
  return 0;
}

int rt_program_run(rt_program *p, rt_tensor *const *inputs, rt_tensor *const *params, char *err, size_t errlen) {
  const ir_graph *g = p->g;
  rt_device *d = p->dev;
  if (err && errlen) err[0] = 0;
  double t_start = p->profile ? ir_clock_s() : 0;
  if (bind(p, g->inputs, g->n_inputs, inputs, PASS_SPACE_INPUT, err, errlen) != 0 ||
      bind(p, g->params, g->n_params, params, PASS_SPACE_PARAM, err, errlen) != 0)
    return -1;
  if (p->coll) rt_coll_reset(p->coll);
  /* a backend that runs whole programs (a CUDA graph) walks them itself;
   * the profile times each action, so it walks them here */
  int rc = d->backend->run_program && !p->profile ? d->backend->run_program(d, p->state, walk, join, p, err, errlen)
                                                  : walk(p, 0, p->n_actions, err, errlen);
  if (rc != 0) return -1;
  /* the collectives still in flight end before whatever follows the run */
  char msg[512] = "";
  if (p->coll && rt_coll_finish(p->coll, msg, sizeof msg) != 0) {
    rt_errf(err, errlen, "%s", msg);
    return -1;
  }
  d->stats.kernels += p->n_runs;
  if (p->profile) p->profile->total_seconds += ir_clock_s() - t_start;
  return 0;
}

/* ---- one run from host tensors ---- */

/* The host tensor t as a tensor of device d: itself (wrapped) on a
 * host-memory device, else an uploaded copy. */
static int to_device(rt_device *d, rt_tensor *t, rt_buffer *wrap, rt_tensor *dev_t, rt_tensor **owned, char *err,
                     size_t errlen) {
  *owned = NULL;
  if (!t) return 0;
  if (d->backend->host_memory) {
    *wrap = rt_buffer_wrap(d, t->data, t->nbytes);
    *dev_t = rt_tensor_view(wrap, 0, &t->type);
    return 0;
  }
  if (!(*owned = rt_device_tensor_new(d, &t->type, err, errlen))) return -1;
  *dev_t = **owned;
  return rt_upload(dev_t, t->data, err, errlen);
}

int rt_run(const rt_backend *b, const ir_graph *g, rt_tensor *const *inputs, rt_tensor *const *params,
           rt_tensor **outputs, rt_stats *stats, char *err, size_t errlen) {
  int n_in = g->n_inputs, n_par = g->n_params, n = n_in + n_par;
  for (int i = 0; i < g->n_outputs; i++) outputs[i] = NULL;
  rt_device *d = rt_device_open_with(b, stats ? stats->device : NULL, err, errlen);
  if (!d) return -1;
  rt_program *p = NULL;
  rt_buffer *wraps = calloc((size_t)n + 1, sizeof *wraps);
  rt_tensor *views = calloc((size_t)n + 1, sizeof *views), **owned = calloc((size_t)n + 1, sizeof *owned);
  rt_tensor **bound = calloc((size_t)n + 1, sizeof *bound);
  int rc = -1;
  if (!wraps || !views || !owned || !bound) {
    rt_errf(err, errlen, "out of memory");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    rt_tensor *t = i < n_in ? (inputs ? inputs[i] : NULL) : (params ? params[i - n_in] : NULL);
    if (to_device(d, t, &wraps[i], &views[i], &owned[i], err, errlen) != 0) goto done;
    bound[i] = t ? &views[i] : NULL;
  }
  rt_program_options po = {.donate_inputs = stats ? stats->donate_inputs : NULL,
                           .donate_params = stats ? stats->donate_params : NULL,
                           .profile = stats ? stats->profile : NULL,
                           .comm = stats ? stats->comm : NULL};
  if (!(p = rt_program_new(d, g, &po, err, errlen))) goto done;
  if (stats && stats->print_actions) {
    fprintf(stats->print_actions, "program of %s, graph @%s on %s: %d actions\n",
            g->source_file ? g->source_file : "?", g->name ? g->name : "main", d->backend->name, p->n_actions);
    rt_program_print_actions(stats->print_actions, p);
  }
  if (rt_program_run(p, bound, bound + n_in, err, errlen) != 0) goto done;
  for (int i = 0; i < g->n_outputs; i++) {
    const rt_tensor *o = rt_program_output(p, i);
    if (!(outputs[i] = rt_tensor_new(&o->type)) || rt_download(outputs[i]->data, o, err, errlen) != 0) {
      if (!outputs[i]) rt_errf(err, errlen, "out of memory");
      goto done;
    }
  }
  rc = 0;
done:
  if (stats) {
    stats->peak_bytes = p ? rt_program_arena_bytes(p) : 0;
    stats->total_allocs = (size_t)d->stats.allocs;
    stats->kernels_run = (int)d->stats.kernels;
  }
  if (rc != 0)
    for (int i = 0; i < g->n_outputs; i++) {
      rt_tensor_free(outputs[i]);
      outputs[i] = NULL;
    }
  rt_program_free(p);
  for (int i = 0; owned && i < n; i++) rt_device_tensor_free(owned[i]);
  free(wraps);
  free(views);
  free(owned);
  free(bound);
  rt_device_close(d);
  return rc;
}
