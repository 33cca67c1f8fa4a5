/* passes/fuse_lm_head.c — the fuse-lm-head pass: the LM head's product, its
 * cross-entropy with the gradient, and the two products of the backward
 * become one linear_cross_entropy (ir/ops.def) that takes `chunk` rows at a
 * time, so the [rows, V] logits and their gradient are never whole: the op's
 * chunk buffer ([chunk, V]) holds one chunk's logits, then their gradient.
 *
 *   requires:    a verified training graph, after autodiff (and after
 *                fuse-transpose in the default pipeline: it reads the
 *                products' transpose flags); a graph without a mesh (a
 *                sharded vocabulary is the shard pass's: it declines).
 *   invalidates: node and value ids; the logits, their gradient and the
 *                replaced products are gone. Nodes that read the loss or the
 *                argmax move after the fused op (a stable order otherwise).
 *
 * The pattern: logits = matmul(h[..., D], w) with w a [V, D] matrix read
 * transposed (transpose_b = 1, a tied embedding) or a [D, V] one, read only by
 *  - one cross_entropy_grad(logits, targets, g) (required), at most one
 *    cross_entropy(logits, targets) of the same targets, any argmax over the
 *    last axis (the trainer's accuracy);
 * and the gradient dlogits read only by
 *  - dh = matmul(dlogits, w) (w read transposed when the forward did not),
 *    h's type;
 *  - dw = matmul(h, dlogits) {transpose_a = 1} ([D, V]) or
 *    matmul(dlogits, h) {transpose_a = 1} ([V, D]), each operand possibly
 *    through a reshape to rows ([rows, D], [rows, V]) read by it alone. dw
 *    of w's layout is the op's result; of the other, a transpose of it (or
 *    the reader of the product that is such a transpose takes it).
 *    The product may be a fused_matmul "(add $0 $1)" (or "(add $1 $0)") of
 *    those operands and an addend: fuse-elementwise's fold of a tied
 *    embedding's gradient into it when the product comes out in the table's
 *    layout (rows <= D: gpt3_xl and larger). That addend is computed from
 *    dh (the embedding's gradient is the end of the backward), so it cannot
 *    be an operand of the op: the add stays, a fused node in the product's
 *    place reading the op's dw.
 * Neither logits nor dlogits may be a graph output (the training step does
 * not return the logits; `tgc run` has no backward and never fuses). Under
 * mixed precision (passes/mixed_precision.c) the losses read the bf16 / f16
 * logits through one conversion to f32 and the f32 gradient goes back
 * through one conversion (cast, or a fused "(cast dt $0)"): the op then
 * takes the f32 g and gives an f32 loss (ir/infer.c).
 *
 * The chunk: the largest power of two of rows, at most every row, whose
 * buffer is at most CHUNK_BYTES. Fewer rows per chunk save memory but read
 * w and read-modify-write dw once more per chunk (4 V D bytes of the dtype
 * each): at 256 MiB gpt2-124m's head (V = 50257, bf16) takes 2048 rows, 8
 * chunks, and its bytes stay below its FLOPs at an H100's ridge point
 * (analysis/cost.c counts them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "pass.h"

enum { MAX_ARGMAX = 8 };
#define CHUNK_BYTES (256.0 * 1024 * 1024)

typedef struct {
  ir_node *mm, *ce, *cg, *dh, *dw, *rs_h, *rs_dl, *dw_t;
  ir_value *addend; /* dw's product is a fused_matmul "(add $0 $1)" of this (the tied table's other gradient) */
  ir_node *widen, *narrow; /* mixed precision: logits to f32 for the loss, its gradient back */
  ir_node *argmax[MAX_ARGMAX];
  int n_argmax;
  bool tb;        /* w is [V, D], read transposed */
  bool dw_is_wt;  /* dw's product is w's transpose ([D, V] for a [V, D] w, or the reverse) */
} lm_head;

/* n is a one-operand conversion to dt: cast {to = dt}, or fused "(cast dt $0)". */
static bool is_cast_to(const ir_node *n, ir_dtype dt) {
  if (n->n_in != 1 || n->n_out != 1 || n->out[0]->type.dtype != dt) return false;
  if (n->op == IR_OP_CAST) return true;
  const ir_attr *e = n->op == IR_OP_FUSED ? ir_node_attr(n, "expr") : NULL;
  char want[32];
  snprintf(want, sizeof want, "(cast %s $0)", ir_dtype_name(dt));
  return e && e->kind == IR_ATTR_STR && e->s && strcmp(e->s, want) == 0;
}

/* The one reader of v when it is a conversion to dt (v no output), else NULL. */
static ir_node *cast_reader(const ir_graph *g, const ir_value *v, ir_dtype dt);

static bool plain_matmul(const ir_node *n, int ta, int tb) {
  return n && !n->dead && n->op == IR_OP_MATMUL && n->n_in == 2 && ir_node_attr_int(n, "transpose_a", 0) == ta &&
         ir_node_attr_int(n, "transpose_b", 0) == tb;
}

/* v, or the reshape to [rows, last dim] of v that n reads (kept in *rs). */
static bool reads_rows_of(const ir_node *n, int k, const ir_value *v, ir_node **rs) {
  const ir_value *x = n->in[k];
  if (x == v) return true;
  const ir_node *r = x->def;
  if (!r || r->op != IR_OP_RESHAPE || r->in[0] != v || x->type.rank != 2 ||
      x->type.dims[1] != v->type.dims[v->type.rank - 1])
    return false;
  *rs = (ir_node *)r;
  return true;
}

/* The reader nodes of v (live ones), at most max; -1 if more or v is an output. */
static int readers(const ir_graph *g, const ir_value *v, ir_node **out, int max) {
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i].value == v) return -1;
  return ir_graph_readers(g, v, out, max);
}

static ir_node *cast_reader(const ir_graph *g, const ir_value *v, ir_dtype dt) {
  ir_node *r[2];
  return readers(g, v, r, 1) == 1 && is_cast_to(r[0], dt) ? r[0] : NULL;
}

/* n is fused_matmul(a, b, x) {transpose_a = ta, transpose_b = tb} adding x to the product. */
static bool add_epilogue_matmul(const ir_node *n, int ta, int tb) {
  if (!n || n->dead || n->op != IR_OP_FUSED_MATMUL || n->n_in != 3 || ir_node_attr_int(n, "transpose_a", 0) != ta ||
      ir_node_attr_int(n, "transpose_b", 0) != tb)
    return false;
  const ir_attr *e = ir_node_attr(n, "expr");
  return e && e->kind == IR_ATTR_STR && e->s && (strcmp(e->s, "(add $0 $1)") == 0 || strcmp(e->s, "(add $1 $0)") == 0);
}

static bool match_dw(lm_head *p, ir_node *m, const ir_value *h, const ir_value *dl) {
  if (p->dw || !(plain_matmul(m, 1, 0) || add_epilogue_matmul(m, 1, 0))) return false;
  ir_node *rh = NULL, *rd = NULL;
  if (reads_rows_of(m, 0, h, &rh) && reads_rows_of(m, 1, dl, &rd)) p->dw_is_wt = p->tb; /* h^T dl: [D, V] */
  else if (reads_rows_of(m, 0, dl, &rd) && reads_rows_of(m, 1, h, &rh)) p->dw_is_wt = !p->tb; /* dl^T h: [V, D] */
  else return false;
  p->dw = m, p->rs_h = rh, p->rs_dl = rd;
  p->addend = m->op == IR_OP_FUSED_MATMUL ? m->in[2] : NULL;
  return true;
}

/* Whether mm heads the pattern (filled into p). */
static bool match(const ir_graph *g, ir_node *mm, lm_head *p) {
  memset(p, 0, sizeof *p);
  if (mm->dead || mm->op != IR_OP_MATMUL || mm->n_in != 2 || ir_node_attr_int(mm, "transpose_a", 0)) return false;
  const ir_value *h = mm->in[0], *w = mm->in[1], *lg = mm->out[0];
  if (w->type.rank != 2 || h->type.rank < 2 || lg->type.rank != h->type.rank) return false;
  p->mm = mm, p->tb = ir_node_attr_int(mm, "transpose_b", 0) != 0;
  ir_node *rd[MAX_ARGMAX + 2];
  int n = readers(g, lg, rd, MAX_ARGMAX + 2);
  if (n < 1) return false;
  const ir_value *lv = lg; /* what the losses read: the logits, or (mixed precision) their f32 widening */
  int direct = 0;
  for (int i = 0; i < n; i++) {
    ir_node *r = rd[i];
    if (r->op == IR_OP_ARGMAX && ir_node_attr_int(r, "axis", -1) == lg->type.rank - 1 && p->n_argmax < MAX_ARGMAX)
      p->argmax[p->n_argmax++] = r;
    else if (lg->type.dtype != IR_DT_F32 && is_cast_to(r, IR_DT_F32) && !p->widen && lv == lg)
      p->widen = r, lv = r->out[0];
    else if (r->op == IR_OP_CROSS_ENTROPY || r->op == IR_OP_CROSS_ENTROPY_GRAD)
      direct++;
    else
      return false;
  }
  if (p->widen && direct) return false;
  n = readers(g, lv, rd, MAX_ARGMAX + 2);
  for (int i = 0; i < n; i++) {
    ir_node *r = rd[i];
    if (r->op == IR_OP_CROSS_ENTROPY_GRAD && r->in[0] == lv && !p->cg) p->cg = r;
    else if (r->op == IR_OP_CROSS_ENTROPY && r->in[0] == lv && !p->ce) p->ce = r;
    else if (r->op != IR_OP_ARGMAX || lv != lg) return false;
  }
  if (!p->cg || (p->ce && p->ce->in[1] != p->cg->in[1])) return false;
  const ir_value *dl = p->cg->out[0];
  if (p->widen) { /* the gradient goes back to the logits' dtype */
    if (!(p->narrow = cast_reader(g, dl, lg->type.dtype))) return false;
    dl = p->narrow->out[0];
  }
  ir_node *dr[4];
  n = readers(g, dl, dr, 4);
  for (int i = 0; i < n; i++) {
    ir_node *r = dr[i];
    if (r->op == IR_OP_RESHAPE) { /* the dw product's rows: that product is its only reader */
      ir_node *rr[2];
      if (readers(g, r->out[0], rr, 1) != 1 || !match_dw(p, rr[0], h, dl) || p->rs_dl != r) return false;
    } else if (plain_matmul(r, 0, !p->tb) && r->in[0] == dl && r->in[1] == w && !p->dh) {
      p->dh = r;
    } else if (!match_dw(p, r, h, dl)) {
      return false;
    }
  }
  if (n < 2 || !p->dh || !p->dw || !ir_type_equal(&p->dh->out[0]->type, &h->type)) return false;
  if (p->rs_h) { /* the reshape of h must be read by the dw product alone */
    ir_node *rr[2];
    if (readers(g, p->rs_h->out[0], rr, 1) != 1) return false;
  }
  if (p->dw_is_wt && !p->addend) { /* a transpose of the product that its one reader writes takes the op's dw */
    ir_node *rr[2];
    if (readers(g, p->dw->out[0], rr, 1) == 1 && rr[0]->op == IR_OP_TRANSPOSE && ir_transpose_swaps_last2(rr[0]))
      p->dw_t = rr[0];
  }
  return true;
}

static int64_t chunk_rows(int64_t rows, int64_t V, ir_dtype dt) {
  int64_t c = 1;
  while (c * 2 <= rows && (double)(c * 2) * (double)V * (double)ir_dtype_size(dt) <= CHUNK_BYTES) c *= 2;
  return c;
}

/* Whether value v depends on node x (its def or a transitive operand's). */
static bool depends_on(const ir_value *v, const ir_node *x, unsigned char *seen) {
  const ir_node *d = v->def;
  if (!d) return false;
  if (d == x) return true;
  if (seen[d->id]) return false;
  seen[d->id] = 1;
  for (int k = 0; k < d->n_in; k++)
    if (depends_on(d->in[k], x, seen)) return true;
  return false;
}

/* Reorders g's nodes so each comes after its operands' definitions, moving
 * a node only later than it was (until its operands are ready). */
static void settle(ir_graph *g) {
  int bound = ir_graph_id_bound(g), n = g->n_nodes, done = 0, np = 0;
  unsigned char *ready = calloc((size_t)bound + 1, 1);
  ir_node **order = malloc(sizeof *order * (size_t)(n + 1)), **pend = malloc(sizeof *pend * (size_t)(n + 1));
  if (!ready || !order || !pend) IR_DIE("out of memory (ready || !order || !pend)");
  for (int i = 0; i < n; i++) {
    pend[np++] = g->nodes[i];
    for (bool moved = true; moved;) { /* emit every pending node whose operands are ready, in order */
      moved = false;
      for (int j = 0; j < np; j++) {
        ir_node *x = pend[j];
        bool ok = true;
        for (int k = 0; ok && k < x->n_in; k++) ok = !x->in[k]->def || ready[x->in[k]->id];
        if (!ok) continue;
        for (int k = 0; k < x->n_out; k++) ready[x->out[k]->id] = 1;
        order[done++] = x;
        memmove(pend + j, pend + j + 1, sizeof *pend * (size_t)(np - j - 1));
        np--;
        moved = true;
        break;
      }
    }
  }
  for (int j = 0; j < np; j++) order[done++] = pend[j]; /* none: the graph was acyclic */
  memcpy(g->nodes, order, sizeof *order * (size_t)n);
  for (int i = 0; i < n; i++) g->nodes[i]->id = i;
  free(ready), free(order), free(pend);
}

static void fuse(ir_graph *g, lm_head *p) {
  ir_node *mm = p->mm, *cg = p->cg;
  ir_value *h = mm->in[0], *w = mm->in[1];
  int64_t rows = ir_type_numel(&cg->in[1]->type), V = w->type.dims[p->tb ? 0 : 1];
  ir_attr at[2] = {ir_attr_int("chunk", chunk_rows(rows, V, h->type.dtype)), ir_attr_int("transpose_b", p->tb)};
  ir_value *in[4] = {h, w, cg->in[1], cg->in[2]};
  ir_type types[4] = {h->type, w->type, in[2]->type, in[3]->type}, out[5];
  int n_out = 0;
  char err[256];
  if (ir_infer(IR_OP_LINEAR_CROSS_ENTROPY, types, 4, at, 2, out, &n_out, err, sizeof err) != 0) abort(); /* matched */
  const char *names[5] = {p->ce ? p->ce->out[0]->name : "loss", p->dh->out[0]->name,
                          (p->dw_t ? p->dw_t : p->dw)->out[0]->name, "predicted", "lm_head_chunk"};
  ir_node *f = ir_graph_add_node(g, IR_OP_LINEAR_CROSS_ENTROPY, in, 4, out, 5, at, 2, names, mm->loc);
  f->layer = mm->layer;
  ir_value *olds[MAX_ARGMAX + 3], *news[MAX_ARGMAX + 3];
  int k = 0;
  if (p->ce) olds[k] = p->ce->out[0], news[k++] = f->out[0];
  olds[k] = p->dh->out[0], news[k++] = f->out[1];
  ir_value *dw = f->out[2];
  if (p->dw_is_wt && !p->dw_t) {
    ir_attr perm = ir_attr_ints("perm", (const int64_t[]){1, 0}, 2);
    dw = ir_graph_build1(g, IR_OP_TRANSPOSE, &dw, 1, &perm, 1, p->dw->out[0]->name, p->dw->loc);
  }
  ir_node *sum = NULL; /* the epilogue's add, in the product's place (its addend comes later in the backward) */
  if (p->addend) {
    f->out[2]->role = p->dw->out[0]->role;
    ir_value *ab[2] = {dw, p->addend};
    ir_attr ex = ir_attr_str("expr", ir_node_attr(p->dw, "expr")->s);
    dw = ir_graph_build1(g, IR_OP_FUSED, ab, 2, &ex, 1, p->dw->out[0]->name, p->dw->loc);
    dw->role = p->dw->out[0]->role;
    sum = dw->def;
  }
  olds[k] = p->dw_t ? p->dw_t->out[0] : p->dw->out[0], news[k++] = dw;
  for (int i = 0; i < p->n_argmax; i++) olds[k] = p->argmax[i]->out[0], news[k++] = f->out[3];
  /* the new values keep the names and roles of those they replace */
  for (int i = 0; i < k; i++)
    if (news[i]->def == f) news[i]->role = olds[i]->role;
  ir_replace_uses_many(g, olds, news, k);
  ir_node *gone[] = {mm, p->ce, cg, p->dh, p->dw, p->rs_h, p->rs_dl, p->dw_t, p->widen, p->narrow};
  for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
    if (gone[i]) gone[i]->dead = true;
  for (int i = 0; i < p->n_argmax; i++) p->argmax[i]->dead = true;
  int tail = g->n_nodes - f->id;
  if (sum) ir_graph_take_place(g, sum, p->dw); /* the product, dead, goes to the tail */
  ir_graph_move_tail(g, tail, cg->id);
}

int pass_fuse_lm_head(ir_graph *g, const pass_options *o) {
  int fused = 0;
  if (!ir_mesh_is_single(&g->mesh)) goto done;
  for (int i = 0; i < g->n_nodes; i++) {
    lm_head p;
    if (!match(g, g->nodes[i], &p)) continue;
    /* g (the loss's gradient) must not come from the values the op replaces */
    unsigned char *seen = calloc((size_t)g->n_nodes + 1, 1);
    if (!seen) IR_DIE("out of memory (seen)");
    bool cyclic = depends_on(p.cg->in[2], p.mm, seen);
    free(seen);
    if (cyclic) continue;
    fuse(g, &p);
    ir_graph_compact(g);
    settle(g);
    fused++;
    i = -1; /* ids changed: look again (the fused op matches nothing) */
  }
done:
  if (o && o->time_passes)
    fprintf(o->time_out ? o->time_out : stderr, "fuse-lm-head: %d heads fused with their loss\n", fused);
  return 0;
}
