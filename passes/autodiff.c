/* passes/autodiff.c — the `autodiff` pass: expands every grad node
 *   %d_w1, %d_w2 = grad %loss, %w1, %w2
 * into the reverse-mode backward graph of loss (pass_vjp, vjp.c).
 *
 * requires: a verified graph.
 * invalidates: node and value ids (it compacts); nothing when there is no
 * grad node.
 *
 * Grad nodes are expanded in program order: pass_vjp appends the backward
 * nodes at the end, ir_graph_move_tail puts them where the grad node was,
 * every use of a grad result is replaced by the gradient (a zero constant if
 * the loss does not depend on that value; all results in one walk), and the
 * grad node is marked dead.
 * Because the expansion of an earlier grad is ordinary IR by the time a later
 * grad is expanded, a grad of a gradient (second order) works for every op
 * whose VJP rule is itself differentiable.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "ir_die.h"
#include "autodiff_impl.h"

int pass_autodiff(ir_graph *g, const pass_options *o) {
  bool changed = false;
  for (int k = 0; k < g->n_nodes; k++) {
    ir_node *n = g->nodes[k];
    if (n->dead || n->op != IR_OP_GRAD) continue;
    int n_wrt = n->n_in - 1;
    if (n_wrt < 1 || n->n_out != n_wrt) {
      ir_error(o->diag, n->loc, "malformed grad node: %d results for %d values", n->n_out, n_wrt);
      return -1;
    }
    ir_value **grads = calloc((size_t)n_wrt, sizeof *grads);
    if (!grads) IR_DIE("out of memory (grads)");
    int before = g->n_nodes;
    if (pass_vjp(g, n->in[0], n->in + 1, n_wrt, grads, o->diag) != 0) {
      free(grads);
      return -1;
    }
    int added = g->n_nodes - before;
    ir_graph_move_tail(g, added, k);
    /* every result at once: one walk over the graph, not one per parameter */
    ir_replace_uses_many(g, n->out, grads, n_wrt);
    n->dead = true;
    int bound = ir_graph_id_bound(g);
    bool *is_grad = calloc((size_t)bound + 1, sizeof *is_grad);
    if (!is_grad) IR_DIE("out of memory (is_grad)");
    for (int i = 0; i < n_wrt; i++)
      if (grads[i]->id >= 0 && grads[i]->id < bound) is_grad[grads[i]->id] = true;
    for (int j = 0; j < g->n_outputs; j++) { /* a returned gradient keeps role grad */
      ir_value *v = g->outputs[j].value;
      if (v->id >= 0 && v->id < bound && is_grad[v->id]) v->role = IR_ROLE_GRAD;
    }
    free(is_grad);
    free(grads);
    k += added; /* now the grad node's index */
    changed = true;
  }
  if (changed) ir_graph_compact(g);
  return 0;
}
