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
 *
 * Attention reads and writes its heads in place: the head split [B,T,H,E]
 * -> [B,H,T,E] and merge transposes around a fused attention (perm swapping
 * axes r-3 and r-2 of q, k, v; of o for its readers; of do and dq, dk, dv in
 * the backward) fold into the op's `heads` attribute (ir/infer.c: q[...,T,H,E]
 * and o[...,T,H,F]; lse stays [...,H,T]), so no transpose is written: the
 * kernels (codegen's tgc_attention.h) address head h of row t at t*H*E + h*E,
 * and the CPU kernel permutes copies (bit for bit the same results). It
 * folds only an attention whose q, k and v all come from such transposes,
 * whose o is read only by such transposes and by attention_grads of the
 * same q, k, v, o and lse (their do a transposed value, their dq, dk and dv
 * read only by such transposes), and no value of which is a graph output;
 * anything else keeps the layout it has.
 *
 * Bias gradients: a reduce_sum of the output gradient X over its rows (db)
 * next to the weight gradient A^T X (dW) of the same X is marked
 * {in_product = 1} (pass_bias_grad_product says when): the lowering sums
 * X's columns in the product's epilogue (cuBLASLt BGRAD), so X is read once
 * for both. Likewise a cross_entropy whose cross_entropy_grad of the same
 * logits and targets follows (pass_cross_entropy_grad_of) is marked
 * {with_grad = 1}: the gradient's kernel computes the loss in its pass over
 * the logits, read once instead of twice. The CPU ignores both marks.
 * With --time-passes it prints how many operands it folded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
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

/* A transpose of [..., X, Y, C] swapping X and Y (rank >= 3). */
static bool swaps_heads(const ir_node *t) {
  if (!t || t->dead || t->op != IR_OP_TRANSPOSE) return false;
  const ir_attr *a = ir_node_attr(t, "perm");
  if (!a || a->kind != IR_ATTR_INTS || a->n < 3) return false;
  int r = a->n;
  for (int i = 0; i < r - 3; i++)
    if (a->ints[i] != i) return false;
  return a->ints[r - 3] == r - 2 && a->ints[r - 2] == r - 3 && a->ints[r - 1] == r - 1;
}

enum { MAX_READERS = 16 };

/* The readers of every value (one entry per operand slot), kept up to date
 * by the folding below, which rewires operands: ir_graph_readers and
 * ir_replace_all_uses scan the whole graph, once per attention and value,
 * and a sharded graph of 96 layers (the planner folds one per tensor
 * degree) made that quadratic scan most of `tgc plan`'s time. */
typedef struct {
  ir_node ***list;
  int *n, *cap;
  int bound;
} reader_ix;

static void ix_add(reader_ix *x, const ir_value *v, ir_node *m) {
  int i = v->id;
  if (x->n[i] == x->cap[i]) {
    x->cap[i] = x->cap[i] ? 2 * x->cap[i] : 4;
    x->list[i] = realloc(x->list[i], (size_t)x->cap[i] * sizeof *x->list[i]);
    if (!x->list[i]) IR_DIE("out of memory (x->list[i])");
  }
  x->list[i][x->n[i]++] = m;
}

static void ix_build(reader_ix *x, const ir_graph *g) {
  x->bound = ir_graph_id_bound(g) + 1;
  x->list = calloc((size_t)x->bound, sizeof *x->list);
  x->n = calloc((size_t)x->bound, sizeof *x->n);
  x->cap = calloc((size_t)x->bound, sizeof *x->cap);
  if (!x->list || !x->n || !x->cap) IR_DIE("out of memory (x->list || !x->n || !x->cap)");
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; !g->nodes[i]->dead && k < g->nodes[i]->n_in; k++) ix_add(x, g->nodes[i]->in[k], g->nodes[i]);
}

static void ix_free(reader_ix *x) {
  for (int i = 0; i < x->bound; i++) free(x->list[i]);
  free(x->list), free(x->n), free(x->cap);
}

/* Operand k of m set to v (the index follows). */
static void ix_set_input(reader_ix *x, ir_node *m, int k, ir_value *v) {
  const ir_value *old = m->in[k];
  for (int j = 0; j < x->n[old->id]; j++)
    if (x->list[old->id][j] == m) {
      x->list[old->id][j] = x->list[old->id][--x->n[old->id]];
      break;
    }
  m->in[k] = v;
  ix_add(x, v, m);
}

/* The live nodes reading v, each once (at most max; -1 if more), as ir_graph_readers. */
static int ix_readers(const reader_ix *x, const ir_value *v, ir_node **out, int max) {
  int n = 0;
  for (int j = 0; j < x->n[v->id]; j++) {
    ir_node *m = x->list[v->id][j];
    bool seen = m->dead;
    for (int q = 0; q < n && !seen; q++) seen = out[q] == m;
    if (seen) continue;
    if (n == max) return -1;
    out[n++] = m;
  }
  return n;
}

/* Every use of old reads v (graph outputs too), as ir_replace_all_uses. */
static void ix_replace_all(reader_ix *x, ir_graph *g, ir_value *old, ir_value *v) {
  while (x->n[old->id] > 0) {
    ir_node *m = x->list[old->id][0];
    for (int k = 0; k < m->n_in; k++)
      if (m->in[k] == old) {
        ix_set_input(x, m, k, v);
        break;
      }
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i].value == old) g->outputs[i].value = v;
}

/* Every reader of v is a heads-swapping transpose (v is no graph output). */
static bool only_swaps(const ir_graph *g, const reader_ix *x, const ir_value *v) {
  ir_node *r[MAX_READERS];
  int n = ix_readers(x, v, r, MAX_READERS);
  if (n < 0 || ir_graph_is_output(g, v)) return false;
  for (int i = 0; i < n; i++)
    if (!swaps_heads(r[i])) return false;
  return true;
}

/* v takes the place of every heads-swapping transpose reading it: the
 * transposes' uses read v (of their type: the caller swapped v's). */
static void bypass_swaps(ir_graph *g, reader_ix *x, ir_value *v) {
  ir_node *r[MAX_READERS];
  int n = ix_readers(x, v, r, MAX_READERS);
  for (int i = 0; i < n; i++) {
    if (!swaps_heads(r[i])) continue; /* attention_grad reading o */
    ix_replace_all(x, g, r[i]->out[0], v);
    r[i]->dead = true;
  }
}

/* v's heads and tokens dims swapped: its type and its layout over the mesh
 * (a sharded graph's heads split over tp stay split: [B, T, H/tp, E]). */
static void swap_type(ir_value *v) {
  ir_type *t = &v->type;
  int a = t->rank - 3, b = t->rank - 2;
  int64_t x = t->dims[a];
  t->dims[a] = t->dims[b];
  t->dims[b] = x;
  uint8_t s = v->shard.split[a], p = v->shard.pieces[a];
  int32_t pad = v->shard.pad[a];
  v->shard.split[a] = v->shard.split[b], v->shard.pieces[a] = v->shard.pieces[b], v->shard.pad[a] = v->shard.pad[b];
  v->shard.split[b] = s, v->shard.pieces[b] = p, v->shard.pad[b] = pad;
}

/* Appends attribute a to n's list (a new list in the graph arena). */
static void add_attr(ir_graph *g, ir_node *n, ir_attr a) {
  ir_attr *attrs = ir_arena_alloc(g->arena, (size_t)(n->n_attrs + 1) * sizeof *attrs);
  if (n->n_attrs > 0) memcpy(attrs, n->attrs, (size_t)n->n_attrs * sizeof *attrs);
  attrs[n->n_attrs] = a;
  n->attrs = attrs;
  n->n_attrs++;
}

/* Folds the head transposes around attention node a (see the top); the
 * number of transposes no longer written, 0 when the pattern is not there. */
static int fold_attention(ir_graph *g, reader_ix *x, ir_node *a) {
  if (ir_node_attr(a, "heads") || a->n_in != 3 || a->n_out != 2 || a->in[0]->type.rank < 3) return 0;
  int rq = a->in[0]->type.rank;
  if (a->in[1]->type.dims[rq - 3] != a->in[0]->type.dims[rq - 3]) return 0; /* grouped-query: no heads layout */
  for (int i = 0; i < 3; i++)
    if (!swaps_heads(a->in[i]->def)) return 0;
  ir_value *o = a->out[0], *lse = a->out[1];
  ir_node *r[MAX_READERS], *grads[MAX_READERS];
  int nr = ix_readers(x, o, r, MAX_READERS), ng = 0;
  if (nr < 0 || ir_graph_is_output(g, o) || ir_graph_is_output(g, lse)) return 0;
  for (int i = 0; i < nr; i++) {
    if (swaps_heads(r[i])) continue;
    ir_node *b = r[i];
    bool ok = b->op == IR_OP_ATTENTION_GRAD && b->n_in == 6 && b->n_out == 3 && !ir_node_attr(b, "heads") &&
              b->in[3] == o && b->in[4] == lse && swaps_heads(b->in[5]->def);
    for (int k = 0; ok && k < 3; k++) ok = b->in[k] == a->in[k] && only_swaps(g, x, b->out[k]);
    if (!ok) return 0;
    grads[ng++] = b;
  }
  int64_t h = a->in[0]->type.dims[a->in[0]->type.rank - 3];
  int folded = 0;
  ir_value *qkv[3];
  for (int i = 0; i < 3; i++) qkv[i] = a->in[i]->def->in[0];
  for (int k = 0; k < ng; k++) {
    ir_node *b = grads[k];
    for (int i = 0; i < 3; i++) ix_set_input(x, b, i, qkv[i]);
    ix_set_input(x, b, 5, b->in[5]->def->in[0]);
    add_attr(g, b, ir_attr_int("heads", h));
    for (int i = 0; i < 3; i++) {
      swap_type(b->out[i]);
      bypass_swaps(g, x, b->out[i]);
    }
    folded += 4;
  }
  for (int i = 0; i < 3; i++) ix_set_input(x, a, i, qkv[i]);
  add_attr(g, a, ir_attr_int("heads", h));
  swap_type(o);
  bypass_swaps(g, x, o);
  return folded + 4;
}

/* The transposes nothing reads any more (the operands' head splits). */
static void drop_unread_transposes(ir_graph *g) {
  int bound = 0;
  int *uses = ir_use_counts(g, &bound);
  for (int i = g->n_nodes - 1; uses && i >= 0; i--) {
    ir_node *t = g->nodes[i];
    if (t->dead || t->op != IR_OP_TRANSPOSE || uses[t->out[0]->id] != 0 || ir_graph_is_output(g, t->out[0])) continue;
    t->dead = true;
    uses[t->in[0]->id]--;
  }
  free(uses);
}

/* Marks what pass_bias_grad_product and pass_cross_entropy_grad_of pair
 * (pass_partners_of finds them all at once): counts[0] bias gradients,
 * counts[1] losses. Marking adds attributes only: the pairs hold throughout. */
static void mark_partners(ir_graph *g, int counts[2]) {
  static const char *const key[2] = {"in_product", "with_grad"};
  int *partner = malloc(((size_t)g->n_nodes + 1) * sizeof *partner);
  if (!partner) IR_DIE("out of memory (partner)");
  pass_partners_of(g, partner);
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    int k = n->op == IR_OP_REDUCE_SUM ? 0 : n->op == IR_OP_CROSS_ENTROPY ? 1 : -1;
    if (k < 0 || ir_node_attr(n, key[k]) || partner[i] < 0) continue;
    add_attr(g, n, ir_attr_int(key[k], 1));
    counts[k]++;
  }
  free(partner);
}

int pass_fuse_transpose(ir_graph *g, const pass_options *o) {
  int heads_folded = 0;
  reader_ix x = {0};
  bool any = false;
  for (int i = 0; i < g->n_nodes && !any; i++) any = !g->nodes[i]->dead && g->nodes[i]->op == IR_OP_ATTENTION;
  if (any) ix_build(&x, g);
  for (int i = 0; any && i < g->n_nodes; i++)
    if (!g->nodes[i]->dead && g->nodes[i]->op == IR_OP_ATTENTION) heads_folded += fold_attention(g, &x, g->nodes[i]);
  if (any) ix_free(&x);
  if (heads_folded) {
    drop_unread_transposes(g);
    ir_graph_compact(g);
  }
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
  int marked[2] = {0, 0};
  mark_partners(g, marked);
  if (o && o->time_passes)
    fprintf(o->time_out ? o->time_out : stderr,
            "fuse-transpose: folded %d transposed operands, removed %d transposes; %d head transposes into attention; "
            "%d bias gradients into products; %d losses into their gradient's kernel\n",
            folded, removed, heads_folded, marked[0], marked[1]);
  return 0;
}
