/* plan/plan_tp.c — the planner's training graph on a tensor-parallel
 * group of t devices, made by the shard pass itself: no second copy of the
 * sharding rules, so what the planner predicts is what the runtime runs, on
 * any graph.
 *
 * The planner keeps each policy's training graph as the shard pass sees it
 * in a training program (pass_build_train: after fuse-attention, autodiff,
 * canonicalize and checkpoint; the passes after the shard pass not run).
 * plan_tp_shard runs the shard pass's engine on it with the mesh tp = t (sp
 * as asked; dp and pp are the planner's to cost), placed as the runtime
 * places a training step: under Megatron-LM's rule (sh_place_megatron: data
 * inputs, the vocabulary table; the rules place the other parameters at
 * their first reader), or, with --tp-layout search, every parameter as the
 * search chose (pass_tp_search, shard_search.c: the same search on the same
 * graph as tgc train's, so the same layouts), then the passes the runtime
 * runs after the shard pass on a rank's step (fuse-elementwise,
 * fuse-transpose; fuse-lm-head declines on a mesh). What comes back is one
 * rank's step: every value is what one device holds, every tensor-axis
 * collective a node (at its source's layer and phase), every node the work
 * one device does. The planner reads its profile off that graph
 * (plan_profile.c).
 */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "plan_impl.h"

ir_graph *plan_tp_shard(ir_graph *g, int t, bool sp, const pass_tp_layouts *lay, const bool *disabled, ir_diag *d) {
  ir_graph *s = pass_shard_tp_graph(g, t, sp, lay, d);
  static const pass_id after[] = {PASS_FUSE_ELEMENTWISE, PASS_FUSE_TRANSPOSE, PASS_FUSE_LM_HEAD};
  pass_options po = {.diag = d, .disabled = disabled};
  if (s && pass_run_pipeline(s, after, 3, &po) != 0) {
    ir_graph_free(s);
    s = NULL;
  }
  return s;
}

bool plan_tp_heads(const ir_graph *g, int t, int64_t *size, const ir_value **value, int *dim) {
  const ir_node *n = pass_tp_heads_conflict(g, t);
  if (!n) return false;
  const ir_value *q = n->in[0];
  *dim = q->type.rank - 3, *size = q->type.dims[*dim], *value = q;
  return true;
}
