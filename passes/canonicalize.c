/* passes/canonicalize.c — constant folding, exact algebraic simplification,
 * CSE and DCE, iterated to a fixpoint.
 *
 *   requires:    a verified graph (operand counts and attributes as ops.def says)
 *   invalidates: node and value ids (the graph is compacted), value pointers of
 *                removed nodes; keeps value names, output names, locations,
 *                layers, roles and sharding of every surviving value.
 *
 * How it works. One forward sweep over the nodes in topological order:
 *   1. each operand is resolved through a forwarding table (value id ->
 *      replacement), so replacing a value costs O(1) instead of a graph walk;
 *   2. the node is simplified: folded into a CONST in place (same node, same
 *      result value, so its name, location and layer stay), rewritten in
 *      place (reshape∘reshape, transpose∘transpose, broadcast∘broadcast), or
 *      its result forwarded to an existing value (x*1 -> x);
 *   3. a surviving node is looked up in a hash table of the nodes seen so
 *      far (op, operands, attributes, result types): a match forwards its
 *      results to the earlier node (CSE).
 * Then graph outputs are resolved and a backward liveness walk marks nodes
 * whose results nobody uses dead (DCE); ir_graph_compact drops them. The
 * sweep repeats until nothing changes.
 *
 * Folding evaluates exactly what the CPU runtime computes: operands are the
 * CONST values rounded to their dtype, the op is ir_eval_unary/_binary, and
 * the result is rounded with ir_round_to_dtype. Every simplification is
 * bit-exact for all inputs (-0.0, NaN, inf included), so x+0 and x*0 are
 * never rewritten for floats, and a replacement must have exactly the type
 * of the value it replaces (x*1 broadcasting x to a bigger shape is not x).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"

typedef struct {
  ir_graph *g;
  ir_value **fwd;    /* by value id: the value that replaces it, or NULL */
  int n_fwd;
  ir_node **table;   /* CSE hash table (open addressing), cap a power of two */
  size_t cap;
  bool changed;
} canon;

enum { SIMPLIFY_NONE, SIMPLIFY_REWRITTEN, SIMPLIFY_FORWARDED };

/* ---- forwarding ---- */

static ir_value *resolve(const canon *c, ir_value *v) {
  for (int guard = 0; v && v->id >= 0 && v->id < c->n_fwd && c->fwd[v->id] && guard < 1 << 20; guard++)
    v = c->fwd[v->id];
  return v;
}

static bool shard_equal(const ir_shard *a, const ir_shard *b) {
  if (a->partial != b->partial) return false;
  for (int i = 0; i < IR_MAX_RANK; i++)
    if (a->split[i] != b->split[i]) return false;
  return true;
}

/* Whether every use of old may read repl instead: same type exactly, same
 * sharding, and no loss of a role later passes key on (grad, opt_state). */
static bool can_replace(const ir_value *old_v, const ir_value *repl) {
  if (old_v == repl || !ir_type_equal(&old_v->type, &repl->type)) return false;
  if (!shard_equal(&old_v->shard, &repl->shard)) return false;
  return old_v->role == repl->role || old_v->role == IR_ROLE_ACT || old_v->role == IR_ROLE_CONST;
}

static int forward(canon *c, ir_node *n, ir_value *repl) {
  if (n->n_out != 1 || !can_replace(n->out[0], repl)) return SIMPLIFY_NONE;
  if (n->out[0]->id < 0 || n->out[0]->id >= c->n_fwd) return SIMPLIFY_NONE;
  c->fwd[n->out[0]->id] = repl;
  return SIMPLIFY_FORWARDED;
}

/* ---- constants ---- */

/* The splat value of v if it is defined by a CONST, rounded to v's dtype
 * (what the runtime materializes). */
static bool const_of(const ir_value *v, double *out) {
  const ir_node *d = v->def;
  if (!d || d->dead || d->op != IR_OP_CONST) return false;
  const ir_attr *a = ir_node_attr(d, "value");
  if (!a || (a->kind != IR_ATTR_FLOAT && a->kind != IR_ATTR_INT)) return false;
  double x = a->kind == IR_ATTR_FLOAT ? a->f : (double)a->i;
  *out = ir_round_to_dtype(v->type.dtype, x);
  return true;
}

static bool is_const_equal(const ir_value *v, double want) {
  double x;
  return const_of(v, &x) && x == want;
}

/* +0.0 for floats (x - +0 == x for every x, -0 included); 0 for integers. */
static bool is_pos_zero(const ir_value *v) {
  double x;
  return const_of(v, &x) && x == 0 && (!ir_dtype_is_float(v->type.dtype) || !signbit(x));
}

/* -0.0 for floats (x + -0 == x for every x); 0 for integers. */
static bool is_additive_identity(const ir_value *v) {
  double x;
  return const_of(v, &x) && x == 0 && (!ir_dtype_is_float(v->type.dtype) || signbit(x));
}

/* Rewrites n in place into `const {value}` of its (single) result type. */
static int fold_to_const(canon *c, ir_node *n, double value) {
  if (n->n_out != 1) return SIMPLIFY_NONE;
  ir_dtype dt = n->out[0]->type.dtype;
  value = ir_round_to_dtype(dt, value);
  if (!ir_dtype_is_float(dt) && value == 0) value = 0; /* no "-0.0" for integers */
  ir_attr *a = ir_arena_alloc(c->g->arena, sizeof *a);
  *a = ir_attr_float(ir_arena_strdup(c->g->arena, "value"), value);
  n->op = IR_OP_CONST;
  n->n_in = 0;
  n->attrs = a;
  n->n_attrs = 1;
  return SIMPLIFY_REWRITTEN;
}

static int try_fold(canon *c, ir_node *n) {
  double a, b, k;
  ir_op_kind kind = ir_op_kind_of(n->op);
  if (kind == IR_OPK_UNARY && n->n_in == 1 && const_of(n->in[0], &a))
    return fold_to_const(c, n, ir_eval_unary(n->op, a));
  if (kind == IR_OPK_BINARY && n->n_in == 2 && const_of(n->in[0], &a) && const_of(n->in[1], &b))
    return fold_to_const(c, n, ir_eval_binary(n->op, a, b));
  switch (n->op) {
  case IR_OP_WHERE:
    if (n->n_in == 3 && const_of(n->in[0], &k) && const_of(n->in[1], &a) && const_of(n->in[2], &b))
      return fold_to_const(c, n, k != 0 ? a : b);
    break;
  case IR_OP_BROADCAST: /* a splat moved around is the same splat */
  case IR_OP_RESHAPE:
  case IR_OP_TRANSPOSE:
  case IR_OP_SLICE:
    if (n->n_in == 1 && n->out[0]->type.dtype == n->in[0]->type.dtype && const_of(n->in[0], &a))
      return fold_to_const(c, n, a);
    break;
  default:
    break;
  }
  return SIMPLIFY_NONE;
}

/* ---- algebra ---- */

/* perm as ints if it is a valid permutation of rank entries. */
static const int64_t *get_perm(const ir_node *n, int rank) {
  const ir_attr *a = ir_node_attr(n, "perm");
  if (!a || a->kind != IR_ATTR_INTS || a->n != rank || rank > IR_MAX_RANK) return NULL;
  bool seen[IR_MAX_RANK] = {false};
  for (int i = 0; i < rank; i++) {
    if (a->ints[i] < 0 || a->ints[i] >= rank || seen[a->ints[i]]) return NULL;
    seen[a->ints[i]] = true;
  }
  return a->ints;
}

static bool is_identity_perm(const int64_t *p, int rank) {
  for (int i = 0; i < rank; i++)
    if (p[i] != i) return false;
  return true;
}

/* The single-result node defining v, if it has op `op`. */
static ir_node *def_with_op(const ir_value *v, ir_op op) {
  ir_node *d = v->def;
  return d && !d->dead && d->op == op && d->n_out == 1 && d->n_in == 1 ? d : NULL;
}

/* transpose(transpose(x, p1), p2) == transpose(x, p1[p2[i]]). */
static int simplify_transpose(canon *c, ir_node *n) {
  int rank = n->in[0]->type.rank;
  const int64_t *p2 = get_perm(n, rank);
  if (!p2) return SIMPLIFY_NONE;
  if (is_identity_perm(p2, rank)) return forward(c, n, n->in[0]);
  ir_node *inner = def_with_op(n->in[0], IR_OP_TRANSPOSE);
  if (!inner) return SIMPLIFY_NONE;
  const int64_t *p1 = get_perm(inner, inner->in[0]->type.rank);
  if (!p1 || inner->in[0]->type.rank != rank) return SIMPLIFY_NONE;
  int64_t composed[IR_MAX_RANK];
  for (int i = 0; i < rank; i++) composed[i] = p1[p2[i]];
  if (is_identity_perm(composed, rank)) return forward(c, n, inner->in[0]);
  /* rewrite n into one transpose of x: copy the attributes, replace perm */
  ir_attr *attrs = ir_arena_alloc(c->g->arena, (size_t)n->n_attrs * sizeof *attrs);
  int64_t *perm = ir_arena_alloc(c->g->arena, (size_t)(rank > 0 ? rank : 1) * sizeof *perm);
  memcpy(perm, composed, (size_t)rank * sizeof *perm);
  for (int i = 0; i < n->n_attrs; i++) {
    attrs[i] = n->attrs[i];
    if (strcmp(attrs[i].key, "perm") == 0) attrs[i].ints = perm;
  }
  n->attrs = attrs;
  n->in[0] = inner->in[0];
  return SIMPLIFY_REWRITTEN;
}

static int try_algebra(canon *c, ir_node *n) {
  ir_node *inner;
  double k;
  int r = SIMPLIFY_NONE;
  switch (n->op) {
  case IR_OP_MUL: /* x*1 and 1*x: exact for every x (NaN, inf, -0) */
    if (is_const_equal(n->in[1], 1)) r = forward(c, n, n->in[0]);
    if (!r && is_const_equal(n->in[0], 1)) r = forward(c, n, n->in[1]);
    return r;
  case IR_OP_DIV:
    return is_const_equal(n->in[1], 1) ? forward(c, n, n->in[0]) : SIMPLIFY_NONE;
  case IR_OP_SUB: /* x - (+0) == x, but x - (-0) turns -0 into +0 */
    return is_pos_zero(n->in[1]) ? forward(c, n, n->in[0]) : SIMPLIFY_NONE;
  case IR_OP_ADD: /* x + (-0) == x, but x + (+0) turns -0 into +0 */
    if (is_additive_identity(n->in[1])) r = forward(c, n, n->in[0]);
    if (!r && is_additive_identity(n->in[0])) r = forward(c, n, n->in[1]);
    return r;
  case IR_OP_AND: /* bool: x && x == x (not maximum(x, x): it canonicalizes NaN's sign) */
  case IR_OP_OR:
    return n->in[0] == n->in[1] ? forward(c, n, n->in[0]) : SIMPLIFY_NONE;
  case IR_OP_NEG:
    inner = def_with_op(n->in[0], IR_OP_NEG);
    return inner ? forward(c, n, inner->in[0]) : SIMPLIFY_NONE;
  case IR_OP_WHERE:
    if (n->in[1] == n->in[2]) return forward(c, n, n->in[1]);
    if (const_of(n->in[0], &k)) return forward(c, n, k != 0 ? n->in[1] : n->in[2]);
    return SIMPLIFY_NONE;
  case IR_OP_CAST:
    return forward(c, n, n->in[0]); /* only when the type is unchanged */
  case IR_OP_RESHAPE:
  case IR_OP_BROADCAST:
    r = forward(c, n, n->in[0]); /* to the same shape */
    if (r) return r;
    /* reshape(reshape(x)) == reshape(x); broadcast(broadcast(x)) == broadcast(x) */
    inner = def_with_op(n->in[0], n->op);
    if (inner && inner->in[0]->type.dtype == n->out[0]->type.dtype) {
      n->in[0] = inner->in[0];
      return SIMPLIFY_REWRITTEN;
    }
    return SIMPLIFY_NONE;
  case IR_OP_TRANSPOSE:
    return simplify_transpose(c, n);
  case IR_OP_DROPOUT: /* the inference form is the identity (dropout.c) */
    return n->n_in == 1 ? forward(c, n, n->in[0]) : SIMPLIFY_NONE;
  default:
    return SIMPLIFY_NONE;
  }
}

static int simplify(canon *c, ir_node *n) {
  /* malformed nodes are left alone for the verifier to report */
  int nin = ir_op_num_inputs(n->op), nout = ir_op_num_outputs(n->op);
  if ((nin >= 0 && n->n_in != nin) || (nout >= 0 && n->n_out != nout)) return SIMPLIFY_NONE;
  for (int i = 0; i < n->n_in; i++)
    if (!n->in[i]) return SIMPLIFY_NONE;
  int r = try_fold(c, n);
  return r ? r : try_algebra(c, n);
}

/* ---- CSE ---- */

static uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t double_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static uint64_t hash_str(const char *s) { return s ? ir_hash_bytes(s, strlen(s)) : 0; }

static uint64_t hash_attr(const ir_attr *a) {
  uint64_t h = mix(hash_str(a->key), (uint64_t)a->kind);
  switch (a->kind) {
  case IR_ATTR_INT:
  case IR_ATTR_DTYPE:
  case IR_ATTR_MESH_AXIS: return mix(h, (uint64_t)a->i);
  case IR_ATTR_FLOAT: return mix(h, double_bits(a->f));
  case IR_ATTR_STR: return mix(h, hash_str(a->s));
  case IR_ATTR_INTS:
    h = mix(h, (uint64_t)a->n);
    for (int i = 0; i < a->n; i++) h = mix(h, (uint64_t)a->ints[i]);
    return h;
  }
  return h;
}

static uint64_t hash_type(const ir_type *t) {
  uint64_t h = mix((uint64_t)t->dtype, (uint64_t)t->rank);
  for (int i = 0; i < t->rank && i < IR_MAX_RANK; i++) h = mix(h, (uint64_t)t->dims[i]);
  return h;
}

static uint64_t hash_node(const ir_node *n) {
  uint64_t h = mix((uint64_t)n->op, (uint64_t)n->n_in);
  for (int i = 0; i < n->n_in; i++) h = mix(h, (uint64_t)n->in[i]->id);
  uint64_t ah = 0; /* attribute order does not matter */
  for (int i = 0; i < n->n_attrs; i++) ah += hash_attr(&n->attrs[i]);
  h = mix(mix(h, ah), (uint64_t)n->n_out);
  for (int i = 0; i < n->n_out; i++) h = mix(h, hash_type(&n->out[i]->type));
  return h;
}

static bool attr_equal(const ir_attr *a, const ir_attr *b) {
  if (a->kind != b->kind || strcmp(a->key, b->key) != 0) return false;
  switch (a->kind) {
  case IR_ATTR_INT:
  case IR_ATTR_DTYPE:
  case IR_ATTR_MESH_AXIS: return a->i == b->i;
  case IR_ATTR_FLOAT: return double_bits(a->f) == double_bits(b->f); /* -0 != +0; NaN == same NaN */
  case IR_ATTR_STR: return strcmp(a->s ? a->s : "", b->s ? b->s : "") == 0;
  case IR_ATTR_INTS:
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++)
      if (a->ints[i] != b->ints[i]) return false;
    return true;
  }
  return false;
}

static bool nodes_equal(const ir_node *a, const ir_node *b) {
  if (a->op != b->op || a->n_in != b->n_in || a->n_out != b->n_out || a->n_attrs != b->n_attrs) return false;
  for (int i = 0; i < a->n_in; i++)
    if (a->in[i] != b->in[i]) return false;
  for (int i = 0; i < a->n_attrs; i++) {
    const ir_attr *other = ir_node_attr(b, a->attrs[i].key);
    if (!other || !attr_equal(&a->attrs[i], other)) return false;
  }
  /* the later node's results must be replaceable by the earlier's */
  for (int i = 0; i < a->n_out; i++)
    if (!can_replace(b->out[i], a->out[i])) return false;
  return true;
}

/* Returns an earlier equal node, or inserts n and returns NULL. */
static ir_node *cse_find_or_insert(canon *c, ir_node *n) {
  size_t mask = c->cap - 1, i = (size_t)hash_node(n) & mask;
  for (; c->table[i]; i = (i + 1) & mask)
    if (nodes_equal(c->table[i], n)) return c->table[i];
  c->table[i] = n;
  return NULL;
}

static bool try_cse(canon *c, ir_node *n) {
  if (n->n_out < 1) return false;
  for (int i = 0; i < n->n_in; i++)
    if (!n->in[i]) return false;
  ir_node *earlier = cse_find_or_insert(c, n);
  if (!earlier) return false;
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i]->id >= 0 && n->out[i]->id < c->n_fwd) c->fwd[n->out[i]->id] = earlier->out[i];
  return true;
}

/* ---- the sweep ---- */

static bool is_forwarded(const canon *c, const ir_node *n) {
  for (int i = 0; i < n->n_out; i++) {
    int id = n->out[i]->id;
    if (id >= 0 && id < c->n_fwd && c->fwd[id]) return true;
  }
  return false;
}

static void sweep(canon *c) {
  ir_graph *g = c->g;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    if (n->dead) continue;
    for (int j = 0; j < n->n_in; j++) {
      ir_value *r = resolve(c, n->in[j]);
      if (r != n->in[j]) n->in[j] = r, c->changed = true;
    }
    int r = SIMPLIFY_NONE;
    for (int round = 0; round < 8; round++) { /* a rewritten node may simplify further */
      r = simplify(c, n);
      if (r != SIMPLIFY_NONE) c->changed = true;
      if (r != SIMPLIFY_REWRITTEN) break;
    }
    if (r == SIMPLIFY_FORWARDED || is_forwarded(c, n)) continue;
    if (try_cse(c, n)) c->changed = true;
  }
  for (int i = 0; i < g->n_outputs; i++) {
    ir_value *r = resolve(c, g->outputs[i].value);
    if (r != g->outputs[i].value) g->outputs[i].value = r, c->changed = true;
  }
}

/* Marks nodes none of whose results reaches a graph output dead (effects,
 * like send, stay). Returns
 * whether any was. */
static bool mark_dead(ir_graph *g, bool *live) {
  bool any = false;
  memset(live, 0, (size_t)g->n_values * sizeof *live);
  for (int i = 0; i < g->n_outputs; i++) {
    ir_value *v = g->outputs[i].value;
    if (v && v->id >= 0 && v->id < g->n_values) live[v->id] = true;
  }
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    ir_node *n = g->nodes[i];
    if (n->dead) continue;
    bool used = ir_op_has(n->op, IR_OPF_EFFECT); /* a send matters to its peer */
    for (int j = 0; j < n->n_out && !used; j++)
      used = n->out[j]->id >= 0 && n->out[j]->id < g->n_values && live[n->out[j]->id];
    if (!used) {
      n->dead = true;
      any = true;
      continue;
    }
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j] && n->in[j]->id >= 0 && n->in[j]->id < g->n_values) live[n->in[j]->id] = true;
  }
  return any;
}

int pass_canonicalize(ir_graph *g, const pass_options *o) {
  for (int iter = 0; iter < 32; iter++) {
    canon c = {.g = g};
    c.n_fwd = g->n_values;
    c.cap = 16;
    while (c.cap < (size_t)g->n_nodes * 2) c.cap *= 2;
    c.fwd = calloc((size_t)(c.n_fwd > 0 ? c.n_fwd : 1), sizeof *c.fwd);
    c.table = calloc(c.cap, sizeof *c.table);
    bool *live = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *live);
    if (!c.fwd || !c.table || !live) {
      free(c.fwd), free(c.table), free(live);
      if (o && o->diag) ir_error_plain(o->diag, "canonicalize: out of memory");
      return -1;
    }
    sweep(&c);
    if (mark_dead(g, live)) {
      c.changed = true;
      ir_graph_compact(g);
    }
    free(c.fwd), free(c.table), free(live);
    if (!c.changed) break;
  }
  return 0;
}
