/* analysis/partners.c — the nodes a later kernel computes with another:
 * a bias gradient in its weight gradient's product (cuBLASLt's epilogue),
 * a loss in its gradient's kernel. fuse-transpose marks the pairs
 * (passes/fuse_transpose.c), the lowering emits them (codegen/lower.c),
 * the cost model counts them (cost.c); analysis.h says when a pair holds.
 */
#include <stdlib.h>

#include "analysis.h"
#include "ir_die.h"

/* What lets pass_partners_of scan a little of the graph per candidate: use
 * counts (ir_use_counts), and per value the last live node that reads it
 * or a reshape of it, past which no partner can be. */
typedef struct {
  int *uses, *reach;
} partner_ix;

/* The first live node after r that `is_partner` accepts, provided no node
 * reads r's result before it and some node reads it after (or it is a
 * graph output): where a later kernel can compute r's result instead.
 * With x (or NULL: the whole graph), the scan ends at the partner (with no
 * reader before it, every reader the counts hold comes after) and at
 * reach[v], v the value every partner reads (or reads reshaped). */
static int partner_after(const ir_graph *g, int r, bool (*is_partner)(const ir_node *r, const ir_node *m),
                         const partner_ix *x, const ir_value *v) {
  const ir_node *n = g->nodes[r];
  const ir_value *res = n->out[0];
  bool read_later = x ? x->uses[res->id] > 0 : ir_graph_is_output(g, res);
  int found = -1, end = x ? x->reach[v->id] + 1 : g->n_nodes;
  for (int i = r + 1; i < end && !(found >= 0 && read_later); i++) {
    const ir_node *m = g->nodes[i];
    if (m->dead) continue;
    bool reads = false;
    for (int k = 0; k < m->n_in; k++) reads |= m->in[k] == res;
    if (reads && found < 0) return -1; /* read before its partner */
    read_later |= reads;
    if (found < 0 && is_partner(n, m)) found = i;
  }
  return found >= 0 && read_later ? found : -1;
}

/* m = matmul(A, reshape(X) or X) {transpose_a}, 2-D: the weight gradient of r's X. */
static bool weight_grad_of(const ir_node *r, const ir_node *m) {
  const ir_value *x = r->in[0], *b = m->n_in == 2 ? m->in[1] : NULL;
  const ir_type *xt = &x->type;
  int64_t n = xt->dims[xt->rank - 1], rows = n > 0 ? ir_type_numel(xt) / n : 0;
  return m->op == IR_OP_MATMUL && b && (b == x || (b->def && !b->def->dead && b->def->op == IR_OP_RESHAPE && b->def->in[0] == x)) &&
         b->type.rank == 2 && b->type.dims[0] == rows && b->type.dims[1] == n && b->type.dtype == xt->dtype &&
         m->in[0]->type.rank == 2 && ir_node_attr_int(m, "transpose_a", 0) != 0 && ir_node_attr_int(m, "transpose_b", 0) == 0;
}

static int bias_grad_product(const ir_graph *g, int r, const partner_ix *x) {
  if (r < 0 || r >= g->n_nodes) return -1;
  const ir_node *n = g->nodes[r];
  if (n->dead || n->op != IR_OP_REDUCE_SUM || n->n_in != 1 || n->n_out != 1) return -1;
  const ir_type *xt = &n->in[0]->type;
  const ir_attr *axes = ir_node_attr(n, "axes");
  if (xt->rank < 2 || !ir_dtype_is_float(xt->dtype) || ir_node_attr_int(n, "keepdims", 0) != 0 || !axes ||
      axes->kind != IR_ATTR_INTS || axes->n != xt->rank - 1)
    return -1;
  for (int i = 0; i < axes->n; i++)
    if (axes->ints[i] != i) return -1;
  return partner_after(g, r, weight_grad_of, x, n->in[0]);
}

int pass_bias_grad_product(const ir_graph *g, int r) { return bias_grad_product(g, r, NULL); }

/* m = cross_entropy_grad of r's logits and targets. */
static bool ce_grad_of(const ir_node *r, const ir_node *m) {
  return m->op == IR_OP_CROSS_ENTROPY_GRAD && m->n_in == 3 && m->in[0] == r->in[0] && m->in[1] == r->in[1];
}

static int cross_entropy_grad_of(const ir_graph *g, int r, const partner_ix *x) {
  if (r < 0 || r >= g->n_nodes) return -1;
  const ir_node *n = g->nodes[r];
  if (n->dead || n->op != IR_OP_CROSS_ENTROPY || n->n_in != 2 || n->n_out != 1) return -1;
  return partner_after(g, r, ce_grad_of, x, n->in[0]);
}

int pass_cross_entropy_grad_of(const ir_graph *g, int r) { return cross_entropy_grad_of(g, r, NULL); }

void pass_partners_of(const ir_graph *g, int *partner) {
  int bound = 0;
  partner_ix x = {ir_use_counts(g, &bound), NULL};
  x.reach = malloc(((size_t)bound + 1) * sizeof *x.reach);
  if (!x.uses || !x.reach) IR_DIE("out of memory (x.uses || x.reach)");
  for (int v = 0; v < bound; v++) x.reach[v] = -1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int j = 0; !g->nodes[i]->dead && j < g->nodes[i]->n_in; j++) x.reach[g->nodes[i]->in[j]->id] = i;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (!n->dead && n->op == IR_OP_RESHAPE && n->n_in == 1 && n->n_out == 1 && x.reach[n->out[0]->id] > x.reach[n->in[0]->id])
      x.reach[n->in[0]->id] = x.reach[n->out[0]->id];
  }
  for (int i = 0; i < g->n_nodes; i++) {
    int op = g->nodes[i]->op;
    partner[i] = op == IR_OP_REDUCE_SUM ? bias_grad_product(g, i, &x) : op == IR_OP_CROSS_ENTROPY ? cross_entropy_grad_of(g, i, &x) : -1;
  }
  free(x.uses);
  free(x.reach);
}
