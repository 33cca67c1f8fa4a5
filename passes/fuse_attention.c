/* passes/fuse_attention.c — finds scaled dot-product attention written in
 * primitive ops and replaces its core with one ATTENTION node (FlashAttention:
 * tiled, online softmax, the backward recomputes the scores; kernels in
 * runtime/cpu/kern_attention.c, VJP in passes/vjp.c).
 *
 *   requires:    a verified graph; runs before autodiff (the default pipeline
 *                puts it first), so the backward is built from the fused op.
 *   invalidates: node and value ids (the graph is compacted) and the values
 *                of the removed nodes; the fused result keeps the name of the
 *                value it replaces, and every survivor keeps its name, role,
 *                location and layer.
 *
 * The pattern, read backwards from each softmax (X* = optional):
 *
 *   s  = matmul(q, kt)            q[..,T,E], kt[..,E,S]; or einsum "..te,..se->..ts"
 *                                 (or "..te,..es->..ts"); batch dims all equal
 *   s' = mul(s, c) | mul(c, s) | div(s, c)     X* c a constant splat, the result s's type
 *   m  = causal_mask(s')          X* fill -inf (the default)
 *   p  = softmax(m, axis = last)
 *   o  = matmul(p, v)             v[..,S,F]; or einsum "..ts,..sf->..tf"
 *
 * with the scale and the mask in either order — mask then scale only for a
 * constant c > 0 (or 1/c > 0), the one case where -inf * c stays -inf so the
 * result is the same. Every value from s to p must have exactly one use (p
 * also returned as an output, or read elsewhere, blocks the fusion). The
 * core becomes
 *
 *   o, lse = attention(q, k, v) {scale = c (1/c for div; 1 when absent), causal}
 *
 * where k is kt's operand when kt = transpose(k) swapping the last two axes,
 * else a new transpose of kt. The constant is taken as its dtype stores it,
 * so the fused op computes exactly what the graph computes, up to rounding
 * (x / c becomes x * (1/c)). Head split and merge (reshape/transpose) stay:
 * the op works on any batch dims. Near misses are left alone: a scale that is
 * not a constant, a non-positive scale applied after the mask, a mask with
 * another fill or on another value (the transposed scores, K), softmax over
 * another axis, broadcast batch dims, a matmul with transpose_a or
 * transpose_b set, anything between the steps: a dropout between p and the
 * product (GPT-2's attention dropout) too, so that attention stays unfused,
 * as the fused kernels draw no mask (dropout inside them would draw it in
 * the forward's online softmax and again in the backward's recomputed
 * scores: not built).
 * With --time-passes it prints how many softmax nodes it fused; with -v
 * (pass_options.verbose) a note at every softmax it leaves, saying which
 * operand broke the pattern and at which line (pass_attention_misses gives
 * the same for tgc stats).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "pass.h"

typedef struct {
  ir_node *scores, *scale, *mask, *softmax, *pv; /* scale, mask: NULL when absent */
  ir_value *q, *kt, *k, *v;                       /* k NULL: transpose kt */
  double scale_value;
  /* when the pattern is not there: why, and the node where it broke */
  char why[240];
  const ir_node *at;
} attn_match;

/* Records why the pattern is not there (at: the node that broke it); false. */
static bool miss(attn_match *m, const ir_node *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool miss(attn_match *m, const ir_node *at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->why, sizeof m->why, fmt, ap);
  va_end(ap);
  m->at = at;
  return false;
}

/* "%name (line L)" of v, for the reasons above. */
static const char *val_str(const ir_value *v, char *buf, size_t n) {
  int line = v->def ? v->def->loc.line : v->loc.line;
  if (line > 0) snprintf(buf, n, "%%%s (line %d)", v->name ? v->name : "?", line);
  else snprintf(buf, n, "%%%s", v->name ? v->name : "?");
  return buf;
}

/* The pass stays linear in the graph: use counts and each value's reader are
 * tabled once and kept up to date by the rewrites, fused nodes take the
 * places of dead ones (ir_graph_take_place), and the uses of replaced values
 * are rewritten in one walk at the end (ir_replace_uses_many; nothing the
 * matcher reads depends on them meanwhile). */
typedef struct {
  ir_graph *g;
  int *uses;        /* by value id: operand uses by live nodes + graph outputs */
  ir_node **reader; /* by value id: a node that reads it (the one, when uses == 1) */
  ir_value **to;    /* by value id: the value that replaces it, or NULL */
  int n_uses;       /* entries of the three */
  ir_value **olds, **news; /* replacements, applied at the end */
  int n_repl, cap_repl;
  int gqa;          /* fused attentions reading shared kv heads */
} fa_ctx;

static void count_uses(fa_ctx *c) {
  c->uses = ir_use_counts(c->g, &c->n_uses);
  c->reader = calloc((size_t)c->n_uses + 1, sizeof *c->reader);
  c->to = calloc((size_t)c->n_uses + 1, sizeof *c->to);
  if (!c->uses || !c->reader || !c->to) IR_DIE("out of memory (c->uses || !c->reader || !c->to)");
  for (int i = 0; i < c->g->n_nodes; i++) {
    ir_node *n = c->g->nodes[i];
    if (n->dead) continue;
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j]->id >= 0 && n->in[j]->id < c->n_uses) c->reader[n->in[j]->id] = n;
  }
}

/* Room for the values the rewrite added (ids past the tables). */
static void grow_uses(fa_ctx *c) {
  int bound = c->g->n_values; /* new values take ids n_values - 1, ... (ir_graph_add_node) */
  if (bound <= c->n_uses) return;
  int *u = realloc(c->uses, (size_t)bound * sizeof *u);
  ir_node **r = realloc(c->reader, (size_t)bound * sizeof *r);
  ir_value **t = realloc(c->to, (size_t)bound * sizeof *t);
  if (!u || !r || !t) IR_DIE("out of memory (u || !r || !t)");
  for (int i = c->n_uses; i < bound; i++) u[i] = 0, r[i] = NULL, t[i] = NULL;
  c->uses = u, c->reader = r, c->to = t, c->n_uses = bound;
}

/* v, or the value that replaced it (a fused result): what v's readers read
 * once the replacements are applied. */
static ir_value *resolve(const fa_ctx *c, ir_value *v) {
  while (v && v->id >= 0 && v->id < c->n_uses && c->to[v->id]) v = c->to[v->id];
  return v;
}

/* n now reads its operands: counts and readers. */
static void add_reads(fa_ctx *c, ir_node *n) {
  for (int j = 0; j < n->n_in; j++)
    if (n->in[j]->id >= 0 && n->in[j]->id < c->n_uses) c->uses[n->in[j]->id]++, c->reader[n->in[j]->id] = n;
}

static int uses_of(const fa_ctx *c, ir_value *v) {
  v = resolve(c, v);
  return v->id >= 0 && v->id < c->n_uses ? c->uses[v->id] : 0;
}

/* The live node defining v if it has op `op`. */
static ir_node *def_op(const ir_value *v, ir_op op) {
  return v && v->def && !v->def->dead && v->def->op == op ? v->def : NULL;
}

/* A matmul that reads its operands as they are (no transpose_a /
 * transpose_b): the pattern's shapes are written for that form. */
static bool plain_matmul(const ir_node *n) {
  return !ir_node_attr_int(n, "transpose_a", 0) && !ir_node_attr_int(n, "transpose_b", 0);
}

/* Batch dims (all but the last two) of a and b are equal, ranks too. */
static bool same_batch(const ir_type *a, const ir_type *b) {
  if (a->rank != b->rank || a->rank < 2) return false;
  for (int i = 0; i < a->rank - 2; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* ---- einsum equations: "X,Y->Z" with two operands of rank r ---- */
typedef struct {
  char x[IR_MAX_RANK + 1], y[IR_MAX_RANK + 1], z[IR_MAX_RANK + 1];
} eq2;

static bool distinct(const char *s) {
  for (int i = 0; s[i]; i++)
    if (strchr(s + i + 1, s[i])) return false;
  return true;
}

static bool parse_eq2(const ir_node *n, int r, eq2 *e) {
  const ir_attr *a = ir_node_attr(n, "eq");
  const ir_einsum *q = a ? a->einsum : NULL;
  if (n->n_in != 2 || !q || q->n_terms != 2 || r > IR_MAX_RANK) return false;
  if (q->start[1] != r || q->start[2] - q->start[1] != r || q->out_len != r) return false;
  for (int k = 0; k < r; k++) {
    e->x[k] = ir_einsum_letter(q->labels[k]);
    e->y[k] = ir_einsum_letter(q->labels[r + k]);
    e->z[k] = ir_einsum_letter(q->out[k]);
  }
  e->x[r] = e->y[r] = e->z[r] = 0;
  if (!distinct(e->x) || !distinct(e->y) || !distinct(e->z)) return false;
  return strncmp(e->x, e->y, (size_t)r - 2) == 0 && strncmp(e->x, e->z, (size_t)r - 2) == 0;
}

/* q k^T as an einsum: "Bte,Bse->Bts" (*k_t = false) or "Bte,Bes->Bts" (true). */
static bool einsum_scores(const ir_node *n, int r, bool *k_t) {
  eq2 e;
  if (!parse_eq2(n, r, &e)) return false;
  char t = e.x[r - 2], ee = e.x[r - 1], s = e.z[r - 1];
  if (e.z[r - 2] != t) return false;
  if (e.y[r - 2] == s && e.y[r - 1] == ee) return *k_t = false, true;
  if (e.y[r - 2] == ee && e.y[r - 1] == s) return *k_t = true, true;
  return false;
}

/* p v as an einsum: "Bts,Bsf->Btf". */
static bool einsum_pv(const ir_node *n, int r) {
  eq2 e;
  if (!parse_eq2(n, r, &e)) return false;
  return e.y[r - 2] == e.x[r - 1] && e.z[r - 2] == e.x[r - 2] && e.z[r - 1] == e.y[r - 1];
}

/* A constant splat scaling x: mul(x, c), mul(c, x) or div(x, c) whose result
 * has x's type. Sets *x to the scaled operand and *scale (1/c for div). */
static bool match_scale(const ir_node *n, ir_value **x, double *scale) {
  if (n->op != IR_OP_MUL && n->op != IR_OP_DIV) return false;
  for (int side = 0; side < (n->op == IR_OP_MUL ? 2 : 1); side++) {
    ir_value *other = n->in[side], *cv = n->in[1 - side];
    ir_node *cn = def_op(cv, IR_OP_CONST);
    if (!cn || !ir_type_equal(&other->type, &n->out[0]->type)) continue;
    const ir_attr *a = ir_node_attr(cn, "value");
    if (!a || a->kind != IR_ATTR_FLOAT) continue;
    double c = ir_round_to_dtype(cv->type.dtype, a->f); /* the value the graph multiplies by */
    if (n->op == IR_OP_DIV) {
      if (c == 0 || !isfinite(c)) continue;
      c = 1.0 / c;
    }
    if (!isfinite(c)) continue;
    *x = other;
    *scale = c;
    return true;
  }
  return false;
}

/* Grouped-query attention's shared kv heads: k = reshape(rep) where rep is
 * broadcast(x5) or x5 times a splat 1 (llama.tg's repeat_kv before and
 * after canonicalize), x5 = reshape(kv): kv [.., Hkv, S, E] -> x5
 * [.., Hkv, 1, S, E] -> rep [.., Hkv, G, S, E] -> k [.., Hkv * G, S, E].
 * Returns kv (the attention reads it, query head h its head h / G), or
 * NULL. */
static ir_value *repeated_kv(ir_value *k) {
  ir_node *r1 = def_op(k, IR_OP_RESHAPE);
  if (!r1) return NULL;
  ir_value *rep = r1->in[0], *x5 = NULL;
  ir_node *b = rep->def;
  if (!b || b->dead) return NULL;
  if (b->op == IR_OP_BROADCAST) x5 = b->in[0];
  for (int side = 0; b->op == IR_OP_MUL && side < 2 && !x5; side++) {
    ir_node *cn = def_op(b->in[1 - side], IR_OP_CONST);
    const ir_attr *a = cn ? ir_node_attr(cn, "value") : NULL;
    if (a && a->kind == IR_ATTR_FLOAT && a->f == 1.0) x5 = b->in[side];
  }
  ir_node *r0 = x5 ? def_op(x5, IR_OP_RESHAPE) : NULL;
  if (!r0) return NULL;
  ir_value *kv = r0->in[0];
  const ir_type *t = &k->type, *tk = &kv->type, *t5 = &x5->type, *tr = &rep->type;
  int r = t->rank;
  if (r < 3 || tk->rank != r || t5->rank != r + 1 || tr->rank != r + 1 || tk->dtype != t->dtype ||
      tr->dtype != t->dtype || t5->dtype != t->dtype)
    return NULL;
  int64_t hkv = tk->dims[r - 3], g = tr->dims[r - 2];
  bool ok = hkv > 0 && g > 1 && t5->dims[r - 2] == 1 && t->dims[r - 3] == hkv * g && t5->dims[r - 3] == hkv &&
            tr->dims[r - 3] == hkv;
  for (int i = 0; ok && i < r - 3; i++) ok = tk->dims[i] == t->dims[i] && t5->dims[i] == t->dims[i] && tr->dims[i] == t->dims[i];
  for (int i = r - 2; ok && i < r; i++) ok = tk->dims[i] == t->dims[i] && t5->dims[i + 1] == t->dims[i] && tr->dims[i + 1] == t->dims[i];
  return ok ? kv : NULL;
}

static bool mask_is_plain(const ir_node *m) {
  const ir_attr *a = ir_node_attr(m, "fill");
  return !a || (a->kind == IR_ATTR_FLOAT && a->f == -INFINITY);
}

/* The pattern ending at softmax node sm; false if it is not there exactly. */
static bool match_at(const fa_ctx *c, ir_node *sm, attn_match *m) {
  memset(m, 0, sizeof *m);
  m->softmax = sm;
  m->scale_value = 1.0;
  ir_value *p = sm->out[0];
  int r = p->type.rank;
  char a[160], b[160];
  if (r < 2) return miss(m, sm, "its operand has rank %d (attention scores are [..., T, S])", r);
  if (!ir_dtype_is_float(p->type.dtype)) return miss(m, sm, "it is not floating-point");
  if (ir_node_attr_int(sm, "axis", -1) != r - 1)
    return miss(m, sm, "it is over axis %lld, not the last (the keys)", (long long)ir_node_attr_int(sm, "axis", -1));
  int p_uses = uses_of(c, p);
  if (p_uses != 1)
    return miss(m, sm, "its result %s has %d uses (an output, or read beside p @ v); the pattern needs one, the product with v",
                val_str(p, a, sizeof a), p_uses);
  /* the one user: p v (a dead reader: p's reader was rewritten, and the
   * node that reads it now is a fused attention, no p v) */
  ir_node *pv = p->id >= 0 && p->id < c->n_uses ? c->reader[p->id] : NULL;
  if (!pv || pv->dead) return miss(m, sm, "its result is not read by a matmul");
  if (pv->n_in != 2 || pv->in[0] != p || pv->in[1] == p ||
      !((pv->op == IR_OP_MATMUL && plain_matmul(pv)) || (pv->op == IR_OP_EINSUM && einsum_pv(pv, r))))
    return miss(m, pv, "its result is read by %s %s, not by a product p @ v with p on the left",
                ir_op_name(pv->op), val_str(pv->out[0], a, sizeof a));
  m->pv = pv;
  m->v = pv->in[1];
  if (!same_batch(&m->v->type, &p->type) || m->v->type.dims[r - 2] != p->type.dims[r - 1])
    return miss(m, pv, "v = %s does not have the scores' batch dims and key length (broadcast or mismatched)",
                val_str(m->v, a, sizeof a));
  /* back from the softmax: the mask and the scale, in either order */
  ir_value *x = sm->in[0];
  bool scale_first = false; /* forward order: scale, then mask */
  for (int step = 0; step < 2; step++) {
    ir_node *d = x->def;
    if (!d || d->dead || uses_of(c, x) != 1) break;
    if (!m->mask && d->op == IR_OP_CAUSAL_MASK) {
      if (!mask_is_plain(d))
        return miss(m, d, "the causal_mask %s fills with another value than -inf", val_str(d->out[0], a, sizeof a));
      m->mask = d;
      x = d->in[0];
      scale_first = m->scale == NULL;
    } else if (!m->scale && match_scale(d, &x, &m->scale_value)) {
      m->scale = d;
    } else {
      break;
    }
  }
  /* mask then scale: only -inf * c == -inf (c > 0) keeps the masked entries masked */
  if (m->mask && m->scale && !scale_first && !(m->scale_value > 0))
    return miss(m, m->scale, "the scale %g is applied after the mask and is not positive (-inf * c must stay -inf)",
                m->scale_value);
  /* the scores */
  ir_node *s = x->def;
  if (!s || s->dead) return miss(m, sm, "the scores %s are not computed by a node (an input or a parameter)", val_str(x, a, sizeof a));
  if (uses_of(c, x) != 1)
    return miss(m, s, "the scores %s have %d uses; the pattern needs one", val_str(x, a, sizeof a), uses_of(c, x));
  if ((s->op == IR_OP_MUL || s->op == IR_OP_DIV) && s->n_in == 2) { /* a scale, but not by a constant */
    int other = def_op(s->in[0], IR_OP_MATMUL) || def_op(s->in[0], IR_OP_EINSUM) ? 1 : 0;
    return miss(m, s, "the scores are scaled by %s, which is not a constant (fuse-attention needs a constant scale: "
                "a number, a config value, 1 / sqrt(E))", val_str(s->in[other], b, sizeof b));
  }
  bool k_t = true;
  if (s->op == IR_OP_EINSUM) {
    if (s->n_in != 2 || !einsum_scores(s, r, &k_t))
      return miss(m, s, "the einsum %s is not q k^T (\"...te,...se->...ts\")", val_str(s->out[0], a, sizeof a));
  } else if (s->op != IR_OP_MATMUL || s->n_in != 2) {
    return miss(m, s, "its operand %s is computed by %s, not by q @ k^T (with at most a constant scale and a causal_mask "
                "between)", val_str(x, a, sizeof a), ir_op_name(s->op));
  } else if (!plain_matmul(s)) {
    return miss(m, s, "the scores' matmul %s reads an operand transposed (transpose_a / transpose_b)",
                val_str(s->out[0], a, sizeof a));
  }
  m->scores = s;
  m->q = s->in[0];
  ir_value *kk = s->in[1];
  if (!same_batch(&m->q->type, &p->type) || !same_batch(&kk->type, &p->type))
    return miss(m, s, "q = %s or k = %s does not have the scores' batch dims (broadcast batch dims)",
                val_str(m->q, a, sizeof a), val_str(kk, b, sizeof b));
  if (k_t) { /* kk is [.., E, S] */
    m->kt = kk;
    ir_node *t = def_op(kk, IR_OP_TRANSPOSE);
    if (t && ir_transpose_swaps_last2(t)) m->k = t->in[0];
  } else {
    m->k = kk;
  }
  const ir_type *q = &m->q->type;
  if (q->dtype != m->v->type.dtype || !ir_dtype_is_float(q->dtype))
    return miss(m, pv, "q is %s and v %s (one floating-point dtype needed)", ir_dtype_name(q->dtype),
                ir_dtype_name(m->v->type.dtype));
  /* nothing empty: softmax over no keys and p v over no keys disagree */
  for (int i = 0; i < r; i++)
    if (q->dims[i] == 0 || m->v->type.dims[i] == 0 || p->type.dims[i] == 0)
      return miss(m, sm, "a dimension is 0 (no queries or no keys)");
  return true;
}

/* Marks n dead and drops its operand uses from the counts. */
static void kill(fa_ctx *c, ir_node *n) {
  if (!n || n->dead) return;
  n->dead = true;
  for (int j = 0; j < n->n_in; j++) {
    const ir_value *v = resolve(c, n->in[j]);
    if (v->id >= 0 && v->id < c->n_uses) c->uses[v->id]--;
  }
}

/* A node left with no users (the scale constant, k's transpose) goes too. */
static void kill_if_unused(fa_ctx *c, ir_value *v) {
  if (v && v->def && !v->def->dead && v->def->n_out == 1 && uses_of(c, v) == 0) kill(c, v->def);
}

static void rewrite(fa_ctx *c, attn_match *m) {
  ir_graph *g = c->g;
  ir_loc loc = m->softmax->loc;
  /* operands that an earlier fusion replaced: the new nodes read the new values */
  m->q = resolve(c, m->q), m->v = resolve(c, m->v), m->kt = resolve(c, m->kt);
  if (m->k) m->k = resolve(c, m->k);
  ir_value *k = m->k;
  if (!k) {
    int r = m->kt->type.rank;
    int64_t perm[IR_MAX_RANK];
    for (int i = 0; i < r; i++) perm[i] = i;
    perm[r - 2] = r - 1, perm[r - 1] = r - 2;
    ir_attr pa = ir_attr_ints("perm", perm, r);
    k = ir_graph_build1(g, IR_OP_TRANSPOSE, &m->kt, 1, &pa, 1, NULL, m->scores->loc);
    k->def->layer = m->scores->layer;
    k->role = m->scores->out[0]->role;
  }
  /* grouped-query: the kv heads themselves, not their repeat (no copy) */
  ir_value *v = m->v, *kv = repeated_kv(k), *vv = repeated_kv(v), *reps[2] = {NULL, NULL};
  if (kv && vv && kv->type.dims[kv->type.rank - 3] == vv->type.dims[vv->type.rank - 3]) {
    reps[0] = k, reps[1] = v;
    k = kv, v = vv;
    c->gqa++;
  }
  ir_value *in[3] = {m->q, k, v};
  ir_attr attrs[2] = {ir_attr_float("scale", m->scale_value), ir_attr_int("causal", m->mask != NULL)};
  ir_type in_t[3] = {m->q->type, k->type, v->type}, out_t[3];
  int n_out = 0;
  char err[256];
  if (ir_infer(IR_OP_ATTENTION, in_t, 3, attrs, 2, out_t, &n_out, err, sizeof err) != 0) {
    fprintf(stderr, "tgc: internal error: fuse-attention building attention: %s\n", err);
    abort();
  }
  const char *names[2] = {NULL, "lse"};
  ir_node *att = ir_graph_add_node(g, IR_OP_ATTENTION, in, 3, out_t, n_out, attrs, 2, names, loc);
  att->layer = m->softmax->layer;
  ir_value *old = m->pv->out[0], *o = att->out[0];
  o->role = att->out[1]->role = old->role;
  o->shard = old->shard;
  grow_uses(c);
  if (!m->k) add_reads(c, k->def);
  add_reads(c, att);
  /* old's readers read o from now on (rewritten at the end) */
  if (c->n_repl == c->cap_repl) {
    c->cap_repl = c->cap_repl ? 2 * c->cap_repl : 16;
    c->olds = realloc(c->olds, (size_t)c->cap_repl * sizeof *c->olds);
    c->news = realloc(c->news, (size_t)c->cap_repl * sizeof *c->news);
    if (!c->olds || !c->news) IR_DIE("out of memory (c->olds || !c->news)");
  }
  c->olds[c->n_repl] = old, c->news[c->n_repl++] = o;
  c->uses[o->id] = c->uses[old->id], c->uses[old->id] = 0;
  c->to[old->id] = o;
  /* the fused result takes the replaced value's name (both names stay reserved) */
  const char *name = old->name;
  old->name = o->name;
  o->name = name;
  kill(c, m->pv);
  kill(c, m->softmax);
  kill(c, m->mask);
  kill(c, m->scale);
  kill(c, m->scores);
  if (m->scale)
    for (int j = 0; j < m->scale->n_in; j++) kill_if_unused(c, m->scale->in[j]);
  if (m->k && m->kt != m->k) kill_if_unused(c, m->kt);
  /* the repeats nothing else reads: reshape, broadcast (or the multiply
   * and its splat), reshape */
  for (int i = 0; i < 2; i++)
    for (ir_value *x = reps[i]; x && x->def && !x->def->dead && uses_of(c, x) == 0;) {
      ir_node *dn = x->def;
      kill(c, dn);
      x = NULL;
      for (int j = 0; j < dn->n_in; j++) {
        ir_value *o = resolve(c, dn->in[j]);
        if (o->def && def_op(o, IR_OP_CONST)) kill_if_unused(c, o);
        else x = o;
      }
      if (x == (i ? v : k)) break; /* the kv heads: read by the attention */
    }
  /* att at p v's place (after q, k, v); a new transpose of kt at the
   * softmax's (after the scores, so after kt; before att) */
  if (!m->k) ir_graph_take_place(g, k->def, m->softmax);
  ir_graph_take_place(g, att, m->pv);
}

static void free_ctx(fa_ctx *c) {
  free(c->uses);
  free(c->reader);
  free(c->to);
  free(c->olds);
  free(c->news);
}

/* "softmax %p (line L) not fused: WHY" */
static void miss_text(const ir_node *sm, const attn_match *m, char *buf, size_t n) {
  char a[160];
  snprintf(buf, n, "softmax %s not fused: %s", val_str(sm->out[0], a, sizeof a), m->why);
}

int pass_attention_misses(const ir_graph *g, pass_attention_miss *out, int max) {
  fa_ctx c = {.g = (ir_graph *)g}; /* read only: nothing is rewritten */
  count_uses(&c);
  int n_miss = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    attn_match m;
    if (n->dead || n->op != IR_OP_SOFTMAX || match_at(&c, n, &m)) continue;
    if (n_miss < max) {
      out[n_miss].softmax = n;
      out[n_miss].at = m.at ? m.at : n;
      miss_text(n, &m, out[n_miss].why, sizeof out[n_miss].why);
    }
    n_miss++;
  }
  free_ctx(&c);
  return n_miss;
}

int pass_fuse_attention(ir_graph *g, const pass_options *o) {
  fa_ctx c = {.g = g};
  count_uses(&c);
  int fused = 0, softmaxes = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_SOFTMAX) continue;
    softmaxes++;
    attn_match m;
    if (!match_at(&c, n, &m)) {
      if (o && o->verbose && o->diag) {
        char text[512];
        miss_text(n, &m, text, sizeof text);
        ir_note(o->diag, n->loc, "fuse-attention: %s", text);
      }
      continue;
    }
    rewrite(&c, &m);
    fused++;
  }
  ir_replace_uses_many(g, c.olds, c.news, c.n_repl);
  free_ctx(&c);
  if (fused) ir_graph_compact(g);
  if (o && o->time_passes)
    fprintf(o->time_out ? o->time_out : stderr, "fuse-attention: fused %d of %d softmax nodes (%d with shared kv heads)\n",
            fused, softmaxes, c.gqa);
  return 0;
}
