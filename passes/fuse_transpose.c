/* passes/fuse_transpose.c — the fuse-transpose pass: a matmul reads a
 * transposed operand the way BLAS does (a transpose flag) instead of reading a
 * transpose written out to memory first.
 *
 *   requires:    a verified graph; runs after fuse-elementwise in the default
 *                pipeline, so the operands of fused_matmul fold too (and
 *                fuse-elementwise never sees the attributes).
 *   invalidates: node and value ids (the graph is compacted when a transpose
 *                goes) and the values of the removed transposes; every value
 *                that stays keeps its name, role, location and layer.
 *
 * The backward pass is full of them: dX = dY @ W^T and dW = X^T @ dY. For
 * operand 0 or 1 of every matmul and fused_matmul that is the result of a
 * transpose swapping exactly the last two axes (perm [0, 1, ..., r-3, r-1,
 * r-2], rank r >= 2), the operand becomes the transpose's input and the
 * node's transpose_a (operand 0) or transpose_b (operand 1) flips. A read of
 * a transpose of a transpose flips twice: the attribute is dropped (absent =
 * 0) and the matmul reads the original. Every runtime path of the matmul
 * kernel (runtime/cpu/kern_matmul.c: f64, f32, bf16/f16 widened, the plain loop)
 * reads transposed operands, so no dtype is left out, and each gives the
 * bytes the graph with the transpose gives (kern_matmul.c says how). A
 * transpose left with no reader (and not a graph output) is removed; one
 * that is still read elsewhere stays (it is computed once either way).
 * With --time-passes it prints how many operands it folded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"

static const char *const transpose_key[2] = {"transpose_a", "transpose_b"};

/* Flips n's attribute key between 1 and absent (0), in a new attribute list
 * in the graph arena (the old one has no room to grow). */
static void flip(ir_graph *g, ir_node *n, const char *key) {
  bool on = ir_node_attr_int(n, key, 0) == 0;
  ir_attr *attrs = ir_arena_alloc(g->arena, (size_t)(n->n_attrs + 1) * sizeof *attrs);
  int k = 0;
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].key, key) != 0) attrs[k++] = n->attrs[i];
  if (on) attrs[k++] = ir_attr_int(key, 1);
  n->attrs = attrs;
  n->n_attrs = k;
}

int pass_fuse_transpose(ir_graph *g, const pass_options *o) {
  int bound = 0;
  int *uses = ir_use_counts(g, &bound);
  if (!uses) {
    if (o && o->diag) ir_error_plain(o->diag, "fuse-transpose: out of memory");
    return -1;
  }
  int folded = 0, removed = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->dead || (n->op != IR_OP_MATMUL && n->op != IR_OP_FUSED_MATMUL) || n->n_in < 2) continue;
    for (int j = 0; j < 2; j++) {
      ir_node *t;
      while ((t = n->in[j]->def) && !t->dead && ir_transpose_swaps_last2(t)) {
        ir_value *x = t->in[0];
        n->in[j] = x;
        flip(g, n, transpose_key[j]);
        uses[x->id]++;
        if (--uses[t->out[0]->id] == 0) { /* the matmul was its last reader */
          t->dead = true;
          uses[x->id]--;
          removed++;
        }
        folded++;
      }
    }
  }
  free(uses);
  if (removed) ir_graph_compact(g);
  if (o && o->time_passes)
    fprintf(o->time_out ? o->time_out : stderr, "fuse-transpose: folded %d transposed operands, removed %d transposes\n",
            folded, removed);
  return 0;
}
