/* tests/unit/test_cost_lowering.c — the cost model counts what the lowered
 * program moves: for every step of a training graph, pass_node_cost's
 * bytes (analysis/cost.c, what `tgc stats` sums into its roofline) equal
 * cg_step.bytes of cg_lower's program (codegen/lower.c: the operands and
 * results the step's actions touch), so the prediction and the program
 * cannot drift apart again.
 *
 * The graphs: the training graph `tgc stats` costs (pass_build_training_graph,
 * the default pipeline, every float retyped to --dtype), planned and lowered
 * as the cuda backends do (nothing is allocated: lowering writes source), for
 *  - examples/gpt.tg, config gpt2-124m with nL = 2 and B = 2, T = 256, in bf16
 *    (the layers of `tgc stats ... --config gpt2-124m --dtype bf16` at a
 *    smaller size; every kind of node of the 12-layer graph is in it);
 *  - examples/gpt.tg --config tiny in f32, and examples/reverse.tg in f32;
 *  - examples/llama.tg --config tiny with grouped-query attention (nKV = 2
 *    of 4 heads; in bf16 at head width 64, and in f32), every step:
 *    attention_grad reads the kv heads and writes dk, dv of their shape, and
 *    SwiGLU's backward is one fused node that reads sigmoid(gate) twice as a
 *    shared subexpression, not as a result (which the lowering would not
 *    store and the cost model would count); the test checks that the graph
 *    has such a node, so it keeps covering that case.
 * Tolerance: exact per node (both are sums of whole tensor sizes in bytes,
 * integers far below 2^53); the first 10 mismatches are printed with the
 * node, its op and both figures. The same for the device calls: pass_node_launches
 * (analysis/launches.c, what `tgc stats` charges launch time for) equals the
 * step's actions (kernels, products, memsets, copies: the one writing a
 * deferred {with_grad} cross_entropy's loss counted for that step) plus the
 * executor's zero-fills, step by step. Also checked: a view step (reshape) is 0 on
 * both sides and has no action, and the totals agree.
 *
 * The training program `tgc train` builds of each model (pass_build_train:
 * Adam with clipping, one micro-batch, mixed precision in the bf16 cases),
 * its step and update planned and lowered the same way: the multi-tensor
 * groups analysis's pass_group_size finds (the rule codegen/emit_group.c
 * lowers by) are exactly the lowered program's (a group's last step holds
 * its one kernel, the others are deferred with no action), every other
 * step's device calls are pass_node_launches, and pass_program_calls_of's
 * total (what `tgc stats` reports per training step) is the program's
 * action count. The update must have groups (mixed precision's too: bf16
 * gradients beside f32 state), so the check keeps covering the rule. The
 * costed graph's total is checked the same way.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "pass.h"

/* How many steps back the node is whose results an action writes: its
 * results' refs' `back` when all of them reach back alike (a {with_grad}
 * cross_entropy's loss, written by its gradient's step), else 0. */
static int action_back(const cg_program *p, const cg_action *x) {
  int back = -1;
  if (x->kind == CG_ACT_KERNEL)
    for (int i = 0; i < p->kernels[x->kernel].n_args; i++) {
      const cg_ref *r = &p->args[p->kernels[x->kernel].first_arg + i];
      if (r->kind != CG_REF_OUT) continue;
      if (back >= 0 && back != r->back) return 0;
      back = r->back;
    }
  else if (x->kind == CG_ACT_GEMM) back = x->gemm.c.back;
  else back = x->dst.back;
  return back > 0 ? back : 0;
}

/* A fused node whose expression has a shared subexpression (printed %0). */
static bool has_shared_subexpression(const ir_node *n) {
  const ir_attr *a = n->op == IR_OP_FUSED ? ir_node_attr(n, "expr") : NULL;
  return a && a->s && strstr(a->s, "%0 = ") != NULL;
}

/* The executor's zero-fills of a run. */
static double fills_of(const ir_graph *g, const pass_plan *plan) {
  double f = 0;
  for (int s = 0; s < plan->n_steps; s++)
    for (int i = 0; plan->steps[s].zero && i < g->nodes[plan->steps[s].node]->n_out; i++)
      f += ir_type_numel(&g->nodes[plan->steps[s].node]->out[i]->type) > 0;
  return f;
}

/* The device calls of program p (g lowered over plan), each action counted
 * for the step whose node's results it writes, plus the executor's
 * zero-fills, into acts[plan->n_steps] (calloc'd; NULL: out of memory). */
static double *step_actions(const ir_graph *g, const pass_plan *plan, const cg_program *p) {
  double *acts = calloc((size_t)plan->n_steps + 1, sizeof *acts);
  for (int s = 0; acts && s < plan->n_steps; s++) {
    const ir_node *n = g->nodes[plan->steps[s].node];
    for (int i = 0; plan->steps[s].zero && i < n->n_out; i++) acts[s] += ir_type_numel(&n->out[i]->type) > 0; /* exec.c's fills */
    for (int a = p->steps[s].first_action; a < p->steps[s].first_action + p->steps[s].n_actions; a++)
      acts[s - action_back(p, &p->actions[a])] += 1;
  }
  return acts;
}

/* A whole program: pass_program_calls_of against the lowered program,
 * step by step with the multi-tensor groups (a group of k steps: k - 1
 * deferred steps without an action, then its kernel); returns the groups. */
static int compare_program(const char *file, const char *what, const ir_graph *g, const pass_plan *plan,
                           const cg_program *p) {
  pass_program_calls calls;
  CHECK_EQ_INT(pass_program_calls_of(g, plan, &calls), 0);
  double *acts = step_actions(g, plan, p);
  int n_uses = 0, *uses = ir_use_counts(g, &n_uses);
  CHECK(acts && uses);
  int mismatches = 0, groups = 0;
  double total = 0;
  for (int s = 0; acts && s < plan->n_steps; s++) total += acts[s];
  for (int s = 0; acts && uses && s < plan->n_steps; s++) {
    const ir_node *n = g->nodes[plan->steps[s].node];
    int k = ir_op_on_mesh_axis(n->op) ? 1 : pass_group_size(g, plan, uses, n_uses, s);
    if (k > 1) { /* members 0 .. k-2 deferred without actions, the last one kernel */
      groups++;
      for (int m = 0; m + 1 < k; m++)
        if ((acts[s + m] != 0 || !p->steps[s + m].deferred) && mismatches++ < 10)
          fprintf(stderr, "%s %s: step %d, member %d of a group of %d: %.0f device calls%s, want none, deferred\n", file,
                  what, s + m, m, k, acts[s + m], p->steps[s + m].deferred ? "" : ", not deferred");
      s += k - 1;
    }
    double want = k > 1 ? 1 : pass_launch_total(pass_node_launches(n));
    if ((acts[s] != want || (k > 1 && p->steps[s].deferred)) && mismatches++ < 10)
      fprintf(stderr, "%s %s: %%%s (%s, step %d%s): cost model %.0f device calls, lowered program %.0f\n", file, what,
              n->n_out ? n->out[0]->name : "?", ir_op_name(n->op), s, k > 1 ? ", a group's last" : "", want, acts[s]);
  }
  CHECK_EQ_INT(mismatches, 0);
  CHECK_EQ_INT(groups, calls.groups);
  CHECK(total == pass_launch_total(calls.launches));
  if (total != pass_launch_total(calls.launches))
    fprintf(stderr, "%s %s: cost model %.0f device calls, lowered program %.0f\n", file, what,
            pass_launch_total(calls.launches), total);
  CHECK(total == p->n_launches + p->n_gemms + p->n_memsets + p->n_copies + fills_of(g, plan));
  free(acts);
  free(uses);
  return groups;
}

/* want_shared: the graph must have a fused node with a shared subexpression. */
static void compare(const char *file, const char *config, const fe_define *defs, int n_defs, int dtype,
                    bool want_shared) {
  ir_diag *d = ir_diag_new(stderr);
  size_t len;
  char *text = ir_read_file(file, 1 << 22, &len, d);
  fe_options fo = {.config = config, .defines = defs, .n_defines = n_defs};
  ir_graph *g = text ? fe_compile(file, text, len, &fo, d) : NULL;
  CHECK(g != NULL);
  if (!g) {
    free(text);
    ir_diag_free(d);
    return;
  }
  pass_options po = {.diag = d};
  pass_train_graph_options to = {.passes = &po, .any_model = true, .dtype = dtype};
  pass_train_graph_info info;
  CHECK_EQ_INT(pass_build_training_graph(g, &to, &info), 0);
  pass_train_graph_info_free(&info);
  pass_plan *plan = pass_memplan(g, NULL);
  char err[1024];
  cg_program *p = plan ? cg_lower(g, plan, NULL, err, sizeof err) : NULL;
  if (!p) fprintf(stderr, "%s: %s\n", file, plan ? err : "no plan");
  CHECK(p != NULL);
  int mismatches = 0, views = 0, shared = 0;
  double cost_total = 0, low_total = 0;
  for (int s = 0; p && s < plan->n_steps; s++) {
    const ir_node *n = g->nodes[plan->steps[s].node];
    shared += has_shared_subexpression(n);
    double want = pass_node_cost(n).bytes, got = p->steps[s].bytes;
    cost_total += want;
    low_total += got;
    if (plan->steps[s].view) {
      views++;
      CHECK_EQ_INT(p->steps[s].n_actions, 0);
    }
    if (want != got && mismatches++ < 10)
      fprintf(stderr, "%s: %%%s (%s, step %d%s): cost model %.0f bytes, lowered program %.0f\n", file,
              n->n_out ? n->out[0]->name : "?", ir_op_name(n->op), s, plan->steps[s].view ? ", a view" : "", want, got);
  }
  CHECK_EQ_INT(mismatches, 0);
  /* launches: pass_node_launches against the program's actions, each
   * counted for the step whose node's results it writes */
  double *acts = p ? step_actions(g, plan, p) : NULL;
  int launch_mismatches = 0;
  double want_launches = 0, got_launches = 0;
  for (int s = 0; acts && s < plan->n_steps; s++) {
    const ir_node *n = g->nodes[plan->steps[s].node];
    pass_launches l = pass_node_launches(n);
    double want = pass_launch_total(l);
    CHECK(pass_node_cost(n).launches == want);
    want_launches += want;
    got_launches += acts[s];
    if (want != acts[s] && launch_mismatches++ < 10)
      fprintf(stderr, "%s: %%%s (%s, step %d): cost model %.0f launches (%.0f kernels, %.0f products, %.0f stream ops), "
              "lowered program %.0f\n", file, n->n_out ? n->out[0]->name : "?", ir_op_name(n->op), s, want, l.kernels,
              l.products, l.stream_ops, acts[s]);
  }
  CHECK_EQ_INT(launch_mismatches, 0);
  CHECK(want_launches == got_launches);
  if (acts) CHECK(got_launches >= p->n_launches + p->n_gemms + p->n_memsets + p->n_copies);
  free(acts);
  if (p) compare_program(file, "step", g, plan, p);
  /* the training program tgc train builds of the model (compiled again): Adam with clipping, mixed
   * precision in the bf16 cases; its step and update programs */
  ir_graph *m = fe_compile(file, text, len, &fo, d);
  CHECK(m != NULL);
  pass_train_options tr = {.opt = pass_optimizer_defaults(PASS_OPT_ADAM), .micro_batches = 1, .targets_input = -1,
                           .passes = &po, .mixed_precision = dtype >= 0, .compute_dtype = dtype >= 0 ? (ir_dtype)dtype : IR_DT_F32};
  tr.opt.clip_norm = 1.0;
  pass_training *t = m ? pass_build_train(m, &tr) : NULL;
  CHECK(t != NULL);
  pass_plan *uplan = t ? pass_memplan(t->update, NULL) : NULL, *splan = t ? pass_memplan(t->step, NULL) : NULL;
  cg_program *up = uplan ? cg_lower(t->update, uplan, NULL, err, sizeof err) : NULL;
  if (t && !up) fprintf(stderr, "%s update: %s\n", file, uplan ? err : "no plan");
  cg_program *sp = splan ? cg_lower(t->step, splan, NULL, err, sizeof err) : NULL;
  if (t && !sp) fprintf(stderr, "%s training step: %s\n", file, splan ? err : "no plan");
  CHECK(up != NULL && sp != NULL);
  int groups = up ? compare_program(file, "update", t->update, uplan, up) : 0;
  CHECK(groups > 0);
  if (sp) compare_program(file, "training step", t->step, splan, sp);
  pass_program_calls uc = {0};
  if (uplan) pass_program_calls_of(t->update, uplan, &uc);
  CHECK(views > 0);
  if (want_shared) CHECK(shared > 0);
  CHECK(cost_total == low_total);
  printf("%-22s %-10s %-5s %4d steps (%3d views), %3d kernels, %3d products: %.0f bytes, cost model %.0f; "
         "%.0f launches, cost model %.0f; %d with a shared subexpression; update: %d steps, %.0f device calls, "
         "%d multi-tensor launches of %d\n", file, config ? config : "-", dtype >= 0 ? ir_dtype_name((ir_dtype)dtype) : "f32",
         plan ? plan->n_steps : 0, views, p ? p->n_kernels : 0, p ? p->n_gemms : 0, low_total, cost_total, got_launches,
         want_launches, shared, uplan ? uplan->n_steps : 0, pass_launch_total(uc.launches), uc.groups, uc.grouped_nodes);
  cg_program_free(up);
  cg_program_free(sp);
  pass_plan_free(uplan);
  pass_plan_free(splan);
  pass_training_free(t);
  cg_program_free(p);
  pass_plan_free(plan);
  ir_graph_free(g);
  free(text);
  ir_diag_free(d);
}

int main(void) {
  fe_define small[4] = {{"nL", "2"}, {"B", "2"}, {"T", "256"}};
  compare("examples/gpt.tg", "gpt2-124m", small, 3, IR_DT_BF16, false);
  compare("examples/gpt.tg", "tiny", NULL, 0, -1, false);
  compare("examples/reverse.tg", NULL, NULL, 0, -1, false);
  /* grouped-query: attention_grad reads the shared kv heads and writes dk, dv of their shape */
  fe_define gqa[3] = {{"nKV", "2"}, {"D", "256"}, {"nH", "4"}};
  compare("examples/llama.tg", "tiny", gqa, 3, IR_DT_BF16, true);
  compare("examples/llama.tg", "tiny", gqa, 1, -1, true);
  return check_done();
}
