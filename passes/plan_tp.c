/* passes/plan_tp.c — the planner's training graph on a tensor-parallel
 * group of t devices, made by the shard pass itself: no second copy of the
 * sharding rules, so what the planner predicts is what the runtime runs, on
 * any graph.
 *
 * The planner keeps each policy's training graph as the shard pass sees it
 * in a training program (pass_build_train: after fuse-attention, autodiff,
 * canonicalize and checkpoint; the passes after the shard pass not run).
 * plan_tp_shard runs the shard pass's engine on it with the mesh tp = t (sp
 * as asked; dp and pp are the planner's to cost), placed as the runtime
 * places a training step under Megatron-LM's rule (sh_place_megatron: data
 * inputs, the vocabulary table; the rules place the other parameters at
 * their first reader), then the passes the runtime runs after the shard
 * pass on a rank's step (fuse-elementwise, fuse-transpose; fuse-lm-head
 * declines on a mesh). What comes back is one rank's step: every value is
 * what one device holds, every tensor-axis collective a node (at its
 * source's layer and phase), every node the work one device does. The
 * planner reads its profile off that graph (plan_profile.c).
 *
 * With --tp-layout search (pass_plan_model_set_tp_search) the parameters'
 * layouts at each (t, sp) are the shard pass's search's (plan_tp_search:
 * shard_search.c, each candidate costed by sh_graph_cost on g sharded so),
 * the data inputs placed as above; the runtime's search costs candidates
 * on its training program (the step and the update) at its micro-batch,
 * the planner's on its step at micro-batch b0: the same algebra and cost,
 * test_plan_consistency checks that the two choose alike.
 */
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"
#include "shard_impl.h"

struct plan_layouts {
  int n;
  sh_st *tp;
};

/* g at tp = t, sp, placed by lay (NULL: Megatron-LM's rule), before the
 * fusions. grads_placed: every parameter's gradient converted to the
 * parameter's layout, as the runtime's update receives it (a partial sum
 * reduced): what a search's evaluation costs, as the runtime's search costs
 * the step and the update; the planner's own graph keeps them as the step
 * hands them over (it costs the update's reductions itself). */
static ir_graph *shard_at(ir_graph *g, int t, bool sp, const sh_st *lay, bool grads_placed, ir_diag *d) {
  ir_mesh saved = g->mesh;
  for (int a = 0; a < IR_NUM_AXES; a++) g->mesh.size[a] = 1;
  g->mesh.size[IR_AXIS_TP] = t;
  g->mesh.sp = sp && t > 1;
  g->mesh.stage = -1;
  sh_engine *e = sh_engine_new(g, d, true);
  ir_graph *s = NULL;
  int rc = lay ? sh_place_data(e, g, d) : sh_place_megatron(e, g, d);
  for (int i = 0; lay && rc == 0 && i < g->n_params; i++) sh_engine_place(e, g->params[i], IR_AXIS_TP, lay[i]);
  if (rc == 0 && sh_engine_run(e) == 0) {
    for (int i = 0, p = 0; i < g->n_outputs; i++) {
      sh_st want[IR_NUM_AXES];
      for (int a = 0; a < IR_NUM_AXES; a++) want[a] = (sh_st){SH_UNSET, 0, 1};
      bool grad = g->outputs[i].value->role == IR_ROLE_GRAD && p < g->n_params; /* d_<param> in the parameters' order */
      if (grad && lay && grads_placed) want[IR_AXIS_TP] = lay[p];
      p += grad;
      sh_engine_output(e, i, grad && lay && grads_placed ? want : NULL); /* else as the step hands them over */
    }
    s = sh_engine_finish(e);
  }
  sh_engine_free(e);
  g->mesh = saved;
  return s;
}

typedef struct {
  ir_graph *g;
  int t;
  bool sp;
  ir_diag *quiet;
} search_ctx;

static int eval_at(void *ctx, const sh_st *tp, sh_cost *cost) {
  const search_ctx *x = ctx;
  ir_graph *s = shard_at(x->g, x->t, x->sp, tp, true, x->quiet);
  if (!s) return -1;
  *cost = sh_graph_cost(s);
  ir_graph_free(s);
  return 0;
}

plan_layouts *plan_tp_search(ir_graph *g, int t, bool sp) {
  plan_layouts *l = calloc(1, sizeof *l);
  if (!l) abort();
  l->n = g->n_params;
  l->tp = calloc((size_t)g->n_params + 1, sizeof *l->tp);
  if (!l->tp) abort();
  for (int i = 0; i < g->n_params; i++) l->tp[i] = sh_R();
  search_ctx x = {g, t, sp, ir_diag_new(stderr)};
  ir_diag_set_max_errors(x.quiet, 0);
  ir_mesh saved = g->mesh; /* the search reads the tp size off the graph's mesh */
  for (int a = 0; a < IR_NUM_AXES; a++) g->mesh.size[a] = 1;
  g->mesh.size[IR_AXIS_TP] = t;
  g->mesh.sp = sp && t > 1;
  int rc = sh_search_tp(g, eval_at, &x, l->tp, NULL, x.quiet);
  g->mesh = saved;
  ir_diag_free(x.quiet);
  if (rc != 0) {
    plan_layouts_free(l);
    return NULL;
  }
  return l;
}

void plan_layouts_free(plan_layouts *l) {
  if (!l) return;
  free(l->tp);
  free(l);
}

ir_graph *plan_tp_shard(ir_graph *g, int t, bool sp, const plan_layouts *lay, const bool *disabled, ir_diag *d) {
  if (lay && lay->n != g->n_params) {
    ir_error_plain(d, "internal error: the planner's tp layouts are for %d parameters, the graph has %d", lay->n,
                   g->n_params);
    return NULL;
  }
  ir_graph *s = shard_at(g, t, sp, lay ? lay->tp : NULL, false, d);
  static const pass_id after[] = {PASS_FUSE_ELEMENTWISE, PASS_FUSE_TRANSPOSE, PASS_FUSE_LM_HEAD};
  pass_options po = {.diag = d, .disabled = disabled};
  if (s && pass_run_pipeline(s, after, 3, &po) != 0) {
    ir_graph_free(s);
    s = NULL;
  }
  return s;
}

bool plan_tp_heads(const ir_graph *g, int t, int64_t *size, const ir_value **value, int *dim) {
  const ir_node *n = sh_heads_conflict(g, t);
  if (!n) return false;
  const ir_value *q = n->in[0];
  *dim = q->type.rank - 3, *size = q->type.dims[*dim], *value = q;
  return true;
}
