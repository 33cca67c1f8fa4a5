/* plan/plan_impl.h — private to the planner's files of passes/
 * (plan_tp.c, plan_profile.c, plan_sim.c, plan.c): a training graph on a
 * tensor-parallel group as the shard pass's engine shards it, and the
 * per-layer profile of a training graph. The public side is the "planner" section of pass.h.
 */
#ifndef TGC_PLAN_IMPL_H
#define TGC_PLAN_IMPL_H

#include "plan.h"

/* ---- plan_tp.c: a training graph on a tensor-parallel group, as the shard pass makes it ----
 * g: a policy's training graph as the shard pass sees it (the passes after
 * it not run; its mesh is set for the run and restored); one rank's step at
 * tp = t (sp as asked), the parameters placed as lay says (NULL:
 * Megatron-LM's rule, the rules placing them at their first reader), fused
 * as the runtime fuses it (disabled: passes not to run), or NULL after
 * reporting through d. */
ir_graph *plan_tp_shard(ir_graph *g, int t, bool sp, const pass_tp_layouts *lay, const bool *disabled, ir_diag *d);
/* An attention of g whose heads t does not divide (the runtime refuses t):
 * true with the heads' size, value and dim. */
bool plan_tp_heads(const ir_graph *g, int t, int64_t *size, const ir_value **value, int *dim);

/* ---- plan_profile.c ---- */

const pass_target *plan_model_device(const pass_plan_model *m);
double plan_model_opt_flops(const pass_plan_model *m);
int plan_model_opt_states(const pass_plan_model *m);
/* Whether the trainer counts correct predictions (the graph has a cross-entropy). */
bool plan_model_accuracy(const pass_plan_model *m);

#endif
