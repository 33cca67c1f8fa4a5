/* passes/shard.c — the shard pass: SPMD partitioning of a graph over the
 * dp and tp axes of its mesh (pipeline stages: shard_stage.c).
 *
 * The engine rebuilds the graph node by node, in order, into a new graph
 * whose values are what one rank holds:
 *  1. for each mesh axis of size > 1, outermost first, the op's rule
 *     (shard_rules.c) reads the layouts of the operands on that axis and
 *     answers the layouts they must have and those of the results;
 *  2. each operand is converted to its layout (the conversion of a value to
 *     a layout is made once per phase — forward, backward, recompute,
 *     optimizer — and shared by that phase's readers): splits an outer axis
 *     adds are made before inner ones, gathers inner before outer, so a dim
 *     split over (dp, tp) always holds block dp_coord * tp + tp_coord;
 *  3. the node is rebuilt on the local operands (reshape and broadcast get
 *     their local shapes; every other attribute is size-free) and its
 *     inferred result types checked against the global types divided by the
 *     result layouts (a mismatch is an internal error, never a wrong graph);
 *  4. the rule's rescalings, maxima and immediate reductions follow it.
 * A rule may instead ask for the node to be replaced by a sub-graph of
 * existing ops on the local operands (sh_dec.expand: the vocabulary-parallel
 * ops of shard_vocab.c); the engine gives the expansion its builders
 * (sh_x_*) and treats the sub-graph's results as the node's.
 * Inputs and parameters start as their caller places them (or unplaced: the
 * first rule to read one places it). Outputs are converted to the layouts
 * the caller asks for, or left as they are.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "shard_impl.h"

typedef struct conv {
  sh_st st[IR_NUM_AXES];
  int phase;
  ir_value *v;
  struct conv *next;
} conv;

typedef struct kept {
  int key, slot;
  ir_value *v;
  struct kept *next;
} kept;

/* The readers of every value of a graph, in node order (a node once per
 * operand slot that reads it): CSR arrays by value id. */
typedef struct {
  int *start; /* id bound + 1 */
  const ir_node **list;
} reader_index;

static void readers_build(const ir_graph *g, reader_index *r) {
  int nv = ir_graph_id_bound(g) + 1;
  r->start = calloc((size_t)nv + 1, sizeof *r->start);
  int total = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i]->dead) total += g->nodes[i]->n_in;
  r->list = calloc((size_t)total + 1, sizeof *r->list);
  int *fill = calloc((size_t)nv + 1, sizeof *fill);
  if (!r->start || !r->list || !fill) IR_DIE("out of memory (r->start || !r->list || !fill)");
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; !g->nodes[i]->dead && k < g->nodes[i]->n_in; k++) r->start[g->nodes[i]->in[k]->id + 1]++;
  for (int v = 0; v < nv; v++) r->start[v + 1] += r->start[v];
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; !g->nodes[i]->dead && k < g->nodes[i]->n_in; k++) {
      int v = g->nodes[i]->in[k]->id;
      r->list[r->start[v] + fill[v]++] = g->nodes[i];
    }
  free(fill);
}

static void readers_free(reader_index *r) {
  free(r->start);
  free(r->list);
}

struct sh_engine {
  const ir_graph *src;
  ir_graph *dst;
  const ir_mesh *mesh;
  bool megatron;
  int nv;                 /* id bound of src */
  ir_value **map;         /* src value id -> dst value in its placed layout */
  sh_st (*st)[IR_NUM_AXES]; /* src value id -> placed layout per axis */
  conv **convs;           /* src value id -> conversions made */
  int *readers;           /* src value id -> how many live nodes read it */
  bool *sums_on;          /* src value id -> read by one add or sub and nothing else (no output) */
  double *pad_value;      /* src value id -> what its padding (a padded split dim's) holds as placed, in
                           * every padded element; NaN: not known (shard.c padding_value) */
  reader_index rindex;    /* src's readers of every value */
  bool slice_counts[IR_NUM_AXES];
  ir_diag *d;
  int errors;
  kept *kept;             /* values expansions keep for later ones (sh_x_keep) */
};

static const char *axis_str(int a) { return ir_axis_name((ir_axis)a); }

/* l with its file in the new graph's arena: a location's file points into
 * its graph's arena, and src may hold locations of another graph (the
 * update's nodes: the step graph's file, which the sharded step replaces
 * and frees). */
static ir_loc reloc(const sh_engine *e, ir_loc l) {
  if (!l.file || l.file == e->dst->source_file) return l;
  if (l.file == e->src->source_file || (e->dst->source_file && strcmp(l.file, e->dst->source_file) == 0))
    l.file = e->dst->source_file;
  else
    l.file = ir_arena_strdup(e->dst->arena, l.file);
  return l;
}

/* How many blocks layout st cuts dim k into (the product of its axes' sizes). */
static int64_t dim_blocks(const sh_engine *e, const sh_st *st, int k) {
  int64_t b = 1;
  for (int a = 0; a < IR_NUM_AXES; a++)
    if (st[a].kind == SH_S && st[a].dim == k) b *= e->mesh->size[a];
  return b;
}

/* The layout st of a value of global type t: a split dim that does not
 * divide by its blocks is padded to the next multiple of them (a padded
 * vocabulary: docs/sharding.md). */
static ir_shard to_shard(const sh_engine *e, const sh_st *st, const ir_type *t) {
  ir_shard s = {{0}, 0, {0}, {0}};
  for (int a = 0; a < IR_NUM_AXES; a++) {
    if (st[a].kind == SH_S && st[a].dim < t->rank) {
      s.split[st[a].dim] |= (uint8_t)(1u << a);
      if (sh_parts(st[a]) > 1) s.pieces[st[a].dim] = (uint8_t)sh_parts(st[a]);
    }
    if (st[a].kind == SH_P) s.partial |= (uint8_t)(1u << a);
  }
  for (int k = 0; k < t->rank; k++) {
    int64_t b = dim_blocks(e, st, k);
    if (t->dims[k] % b != 0) s.pad[k] = (int32_t)(b - t->dims[k] % b);
  }
  return s;
}

/* The global type t as one rank holds it under layout st: a dim that does
 * not divide by its blocks, padded, gives each rank ceil(size / blocks). */
static ir_type local_type(const sh_engine *e, const ir_type *t, const sh_st *st) {
  ir_type l = *t;
  for (int k = 0; k < l.rank; k++) {
    int64_t b = dim_blocks(e, st, k);
    l.dims[k] = (l.dims[k] + b - 1) / b;
  }
  return l;
}

/* Whether dim k of global type t is padded under st. */
static bool padded_dim(const sh_engine *e, const ir_type *t, const sh_st *st, int k) {
  return k >= 0 && k < t->rank && t->dims[k] % dim_blocks(e, st, k) != 0;
}

/* Whether any dim of global type t is padded under st. */
static bool padded(const sh_engine *e, const ir_type *t, const sh_st *st) {
  for (int k = 0; k < t->rank; k++)
    if (padded_dim(e, t, st, k)) return true;
  return false;
}

static bool active_axis(const sh_engine *e, int a) { return a != IR_AXIS_PP && e->mesh->size[a] > 1; }

/* ---- conversions ---- */

/* The role of a value the engine computes from x: an input's or a
 * parameter's view or block is an activation (a computed value; the
 * pipeline's stage cut copies only what is computed). */
static ir_role derived_role(const ir_value *x) {
  return x->role == IR_ROLE_INPUT || x->role == IR_ROLE_PARAM ? IR_ROLE_ACT : x->role;
}

static ir_value *comm1(sh_engine *e, ir_op op, ir_value *x, int axis, int dim, const char *reduce, const char *suffix,
                       ir_loc loc, int layer) {
  ir_attr at[4];
  int na = 0;
  at[na++] = ir_attr_mesh_axis("axis", (ir_axis)axis);
  at[na++] = ir_attr_int("n", e->mesh->size[axis]);
  if (dim >= 0) at[na++] = ir_attr_int("dim", dim);
  if (reduce) at[na++] = ir_attr_str("reduce", reduce);
  char name[512];
  if (suffix[0] == '=') snprintf(name, sizeof name, "%s", suffix + 1); /* "=NAME": exactly NAME */
  else snprintf(name, sizeof name, "%s.%s", x->name, suffix);
  char err[512];
  ir_node *n = ir_graph_build(e->dst, op, &x, 1, at, na, NULL, name, loc, err, sizeof err);
  if (!n) {
    fprintf(stderr, "tgc: internal error: shard: %s of %%%s: %s\n", ir_op_name(op), x->name, err);
    abort();
  }
  n->layer = layer;
  n->out[0]->role = derived_role(x);
  return n->out[0];
}

/* v (one rank's, of global type t) in layout st */
static void set_layout(const sh_engine *e, ir_value *v, const sh_st *st, const ir_type *t) { v->shard = to_shard(e, st, t); }

static ir_value *reshape_to(sh_engine *e, ir_value *x, const int64_t *dims, int rank, ir_loc loc, int layer) {
  ir_attr a = ir_attr_ints("shape", dims, rank);
  ir_value *r = ir_graph_build1(e->dst, IR_OP_RESHAPE, &x, 1, &a, 1, NULL, loc);
  r->def->layer = layer;
  r->role = derived_role(x);
  return r;
}

/* x with dim d viewed as [p, q, L / (p q)] (rank + 2 dims). */
static ir_value *view3(sh_engine *e, ir_value *x, int d, int64_t p, int64_t q, ir_loc loc, int layer) {
  int64_t dims[IR_MAX_RANK + 2];
  int r = 0;
  for (int k = 0; k < x->type.rank; k++) {
    if (k != d) {
      dims[r++] = x->type.dims[k];
      continue;
    }
    dims[r++] = p;
    dims[r++] = q;
    dims[r++] = x->type.dims[k] / (p * q);
  }
  return reshape_to(e, x, dims, r, loc, layer);
}

/* dims d and d + 1 of x merged (and d + 2 with them when three). */
static ir_value *merge(sh_engine *e, ir_value *x, int d, int count, ir_loc loc, int layer) {
  int64_t dims[IR_MAX_RANK + 2];
  int r = 0;
  for (int k = 0; k < x->type.rank; k++) {
    if (k > d && k < d + count) {
      dims[r - 1] *= x->type.dims[k];
      continue;
    }
    dims[r++] = x->type.dims[k];
  }
  return reshape_to(e, x, dims, r, loc, layer);
}

static ir_value *swap_dims(sh_engine *e, ir_value *x, int i, int j, ir_loc loc, int layer) {
  int64_t perm[IR_MAX_RANK + 2];
  for (int k = 0; k < x->type.rank; k++) perm[k] = k;
  perm[i] = j, perm[j] = i;
  ir_attr a = ir_attr_ints("perm", perm, x->type.rank);
  ir_value *r = ir_graph_build1(e->dst, IR_OP_TRANSPOSE, &x, 1, &a, 1, NULL, loc);
  r->def->layer = layer;
  r->role = derived_role(x);
  return r;
}

static ir_value *first_only(sh_engine *e, ir_value *x, int axis, const char *name, ir_loc loc, int layer);

/* A padded dim is split over one axis, whole (not in parts): the padding is
 * at the end of the whole dim. */
static _Noreturn void die_nested_pad(const ir_value *v, int axis) {
  fprintf(stderr, "tgc: internal error: shard: %%%s is padded on %s together with another split or in parts\n", v->name,
          axis_str(axis));
  abort();
}

/* x's first `size` elements along dim: a gathered padded dim without its padding. */
static ir_value *unpad(sh_engine *e, ir_value *x, int dim, int64_t size, ir_loc loc, int layer) {
  ir_attr a[4] = {ir_attr_int("axis", dim), ir_attr_int("start", 0), ir_attr_int("end", size), ir_attr_int("step", 1)};
  char name[300];
  snprintf(name, sizeof name, "%.280s.unpad", x->name);
  ir_value *r = ir_graph_build1(e->dst, IR_OP_SLICE, &x, 1, a, 4, name, loc);
  r->def->layer = layer;
  r->role = derived_role(x);
  return r;
}

/* x with zeros appended along dim up to a multiple of n (before a padded split). */
static ir_value *pad_zeros(sh_engine *e, ir_value *x, int dim, int64_t n, ir_loc loc, int layer) {
  int64_t more = n - x->type.dims[dim] % n;
  if (more == n) return x;
  char err[256];
  ir_attr zero = ir_attr_float("value", 0);
  ir_type z = {.dtype = x->type.dtype, .rank = 0};
  ir_node *c = ir_graph_build(e->dst, IR_OP_CONST, NULL, 0, &zero, 1, &z, NULL, loc, err, sizeof err);
  if (!c) IR_DIE("out of memory (c)");
  c->layer = layer;
  int64_t dims[IR_MAX_RANK];
  for (int k = 0; k < x->type.rank; k++) dims[k] = k == dim ? more : x->type.dims[k];
  ir_attr shape = ir_attr_ints("shape", dims, x->type.rank);
  ir_value *zeros = ir_graph_build1(e->dst, IR_OP_BROADCAST, &c->out[0], 1, &shape, 1, NULL, loc);
  ir_value *in[2] = {x, zeros};
  ir_attr ax = ir_attr_int("axis", dim);
  ir_value *r = ir_graph_build1(e->dst, IR_OP_CONCAT, in, 2, &ax, 1, NULL, loc);
  zeros->def->layer = r->def->layer = layer;
  zeros->role = r->role = derived_role(x);
  return r;
}

/* v (src) converted to layout want (per axis; UNSET entries: as placed). */
static ir_value *convert(sh_engine *e, const ir_value *v, const sh_st *want_in, int phase, ir_loc loc, int layer);

/* A reshape's result gathered on some axes, the rest kept: the reshape of
 * its operand gathered on them (NULL when that is not the case). A view, so
 * a value the phase gathers whole and as a reshape (an output gradient read
 * by the input gradient's matmul and, flattened, by the weight gradient's)
 * is gathered once, as Megatron-LM's sequence parallelism does. */
static ir_value *gather_view(sh_engine *e, const ir_value *v, const sh_st *cur, const sh_st *want, int phase, ir_loc loc,
                             int layer) {
  const ir_value *u = v->def && v->def->op == IR_OP_RESHAPE ? v->def->in[0] : NULL;
  if (!u) return NULL;
  sh_st uw[IR_NUM_AXES];
  bool gathers = false;
  for (int a = 0; a < IR_NUM_AXES; a++) {
    uw[a] = (sh_st){SH_UNSET, 0, 1};
    if (sh_eq(cur[a], want[a])) continue;
    if (cur[a].kind != SH_S || want[a].kind != SH_R || e->st[u->id][a].kind != SH_S) return NULL;
    uw[a] = sh_R(), gathers = true;
  }
  if (!gathers) return NULL;
  ir_value *x = convert(e, u, uw, phase, loc, layer);
  ir_type t = local_type(e, &v->type, want);
  x = reshape_to(e, x, t.dims, t.rank, loc, layer);
  set_layout(e, x, want, &v->type);
  return x;
}

/* u when v is transpose(transpose(u)) with perms that undo each other and
 * the same layout (the backward's transpose of a forward transpose of a
 * weight, a tied LM head's): converting u instead, the backward does not
 * keep the forward's transposed block alive (under ZeRO 3 it is the
 * gather's source), else NULL. */
static const ir_value *undone_transpose(const sh_engine *e, const ir_value *v) {
  const ir_node *a = v->def, *b = a && a->op == IR_OP_TRANSPOSE ? a->in[0]->def : NULL;
  if (!b || b->op != IR_OP_TRANSPOSE) return NULL;
  const ir_attr *pa = ir_node_attr(a, "perm"), *pb = ir_node_attr(b, "perm");
  if (!pa || !pb || pa->n != pb->n) return NULL;
  for (int i = 0; i < pa->n; i++)
    if (pa->ints[i] < 0 || pa->ints[i] >= pb->n || pb->ints[pa->ints[i]] != i) return NULL;
  const ir_value *u = b->in[0];
  for (int x = 0; x < IR_NUM_AXES; x++)
    if (!sh_eq(e->st[u->id][x], e->st[v->id][x])) return NULL;
  return u;
}

static ir_value *convert(sh_engine *e, const ir_value *v, const sh_st *want_in, int phase, ir_loc loc, int layer) {
  sh_st want[IR_NUM_AXES], cur[IR_NUM_AXES];
  memcpy(cur, e->st[v->id], sizeof cur);
  for (int a = 0; a < IR_NUM_AXES; a++) want[a] = want_in[a].kind == SH_UNSET ? cur[a] : want_in[a];
  bool same = true;
  for (int a = 0; a < IR_NUM_AXES; a++) same &= sh_eq(cur[a], want[a]);
  if (same) return e->map[v->id];
  for (conv *c = e->convs[v->id]; c; c = c->next) {
    bool eq = c->phase == phase;
    for (int a = 0; a < IR_NUM_AXES && eq; a++) eq = sh_eq(c->st[a], want[a]);
    if (eq) return c->v;
  }
  const ir_value *u = undone_transpose(e, v);
  if (u) return convert(e, u, want, phase, loc, layer);
  ir_value *x = gather_view(e, v, cur, want, phase, loc, layer);
  if (x) memcpy(cur, want, sizeof cur);
  else x = e->map[v->id];
  /* 1. gathers, inner axes first: a split that goes, or whose dim's outer splits change */
  for (int a = IR_NUM_AXES - 1; a >= 0; a--) {
    if (cur[a].kind != SH_S) continue;
    int dim = cur[a].dim;
    bool go = !sh_eq(cur[a], want[a]);
    for (int o = 0; o < a && !go; o++) {
      bool was = cur[o].kind == SH_S && cur[o].dim == dim, will = want[o].kind == SH_S && want[o].dim == dim;
      go = was != will;
    }
    if (!go) continue;
    int k = sh_parts(cur[a]), n = e->mesh->size[a];
    bool pad = padded_dim(e, &v->type, cur, dim);
    if (pad && (k > 1 || dim_blocks(e, cur, dim) != n)) die_nested_pad(v, a);
    x = comm1(e, IR_OP_ALL_GATHER, x, a, dim, NULL, "ag", loc, layer);
    if (k > 1) { /* gathered in (rank, part) order: back to (part, rank) */
      x = view3(e, x, dim, n, k, loc, layer);
      x = merge(e, swap_dims(e, x, dim, dim + 1, loc, layer), dim, 3, loc, layer);
    }
    if (pad) x = unpad(e, x, dim, v->type.dims[dim], loc, layer); /* the padding gone */
    cur[a] = sh_R();
    set_layout(e, x, cur, &v->type);
  }
  /* 2. the rest, outer axes first */
  for (int a = 0; a < IR_NUM_AXES; a++) {
    if (sh_eq(cur[a], want[a])) continue;
    if (want[a].kind == SH_R && cur[a].kind == SH_P) {
      x = comm1(e, IR_OP_ALL_REDUCE, x, a, -1, NULL, "ar", loc, layer);
    } else if (want[a].kind == SH_P && cur[a].kind == SH_R) {
      /* a replicated value as a partial sum: its whole on the axis' first
       * rank, 0 on the others (exact: the sum over the axis is the value) */
      x = first_only(e, x, a, NULL, loc, layer);
    } else if (want[a].kind == SH_S && (cur[a].kind == SH_R || cur[a].kind == SH_P)) {
      ir_op op = cur[a].kind == SH_R ? IR_OP_MESH_SLICE : IR_OP_REDUCE_SCATTER;
      const char *sfx = cur[a].kind == SH_R ? "sl" : "rs";
      int k = sh_parts(want[a]), dim = want[a].dim;
      sh_st next[IR_NUM_AXES];
      memcpy(next, cur, sizeof next);
      next[a] = want[a];
      if (padded_dim(e, &v->type, next, dim)) { /* padded with zeros to a multiple of the axis */
        if (k > 1 || dim_blocks(e, next, dim) != e->mesh->size[a]) die_nested_pad(v, a);
        x = pad_zeros(e, x, dim, e->mesh->size[a], loc, layer);
      }
      if (k > 1) { /* each of the k parts: its block of this rank */
        x = view3(e, x, dim, k, e->mesh->size[a], loc, layer);
        x = comm1(e, op, x, a, dim + 1, NULL, sfx, loc, layer);
        x = merge(e, x, dim, 3, loc, layer);
      } else {
        x = comm1(e, op, x, a, dim, NULL, sfx, loc, layer);
      }
    } else {
      fprintf(stderr, "tgc: internal error: shard: no conversion of %%%s on %s from kind %d to kind %d\n", v->name,
              axis_str(a), cur[a].kind, want[a].kind);
      abort();
    }
    cur[a] = want[a];
    set_layout(e, x, cur, &v->type);
  }
  conv *c = calloc(1, sizeof *c);
  if (!c) IR_DIE("out of memory (c)");
  memcpy(c->st, want, sizeof c->st);
  c->phase = phase;
  c->v = x;
  c->next = e->convs[v->id];
  e->convs[v->id] = c;
  return x;
}

/* An input or parameter takes its first layout: its local type is now fixed. */
static void place(sh_engine *e, const ir_value *v, int a, sh_st s) {
  e->st[v->id][a] = s;
  e->pad_value[v->id] = 0; /* a block's padding starts as zeros (rt_shard_extract) */
  ir_value *x = e->map[v->id];
  x->type = local_type(e, &v->type, e->st[v->id]);
  set_layout(e, x, e->st[v->id], &v->type);
}

/* ---- nodes ---- */

/* A parameter, or a transpose / reshape / cast of one (a weight read
 * transposed by the backward): what the rules keep split or gather first. */
static bool is_weight(const ir_value *v) {
  for (int k = 0; k < 8 && v; k++) {
    if (!v->def) return v->role == IR_ROLE_PARAM;
    ir_op op = v->def->op;
    if (op != IR_OP_TRANSPOSE && op != IR_OP_RESHAPE && op != IR_OP_CAST) return false;
    v = v->def->in[0];
  }
  return false;
}

static ir_value *scale_by(sh_engine *e, ir_value *x, double f, ir_loc loc, int layer, const char *name) {
  ir_attr c = ir_attr_float("value", f);
  ir_type t = {.dtype = x->type.dtype, .rank = 0};
  char err[256];
  ir_node *k = ir_graph_build(e->dst, IR_OP_CONST, NULL, 0, &c, 1, &t, NULL, loc, err, sizeof err);
  if (!k) IR_DIE("out of memory (k)");
  k->layer = layer;
  ir_value *in[2] = {x, k->out[0]};
  ir_value *r = ir_graph_build1(e->dst, IR_OP_MUL, in, 2, NULL, 0, name, loc);
  r->def->layer = layer;
  r->role = derived_role(x);
  r->shard = x->shard;
  return r;
}

/* x on the first rank of axis, 0 on the others: a partial sum of x (named
 * name, else after x). */
static ir_value *first_only(sh_engine *e, ir_value *x, int axis, const char *name, ir_loc loc, int layer) {
  char err[256], hint[300];
  ir_attr ax = ir_attr_int("axis", 0), zero = ir_attr_float("value", 0), shape = ir_attr_ints("shape", NULL, 0);
  ir_type t = {.dtype = IR_DT_I64, .rank = 1, .dims = {e->mesh->size[axis]}}, z = {.dtype = x->type.dtype, .rank = 0};
  snprintf(hint, sizeof hint, "%.280s.ids", x->name);
  ir_node *ids = ir_graph_build(e->dst, IR_OP_IOTA, NULL, 0, &ax, 1, &t, hint, loc, err, sizeof err);
  snprintf(hint, sizeof hint, "%.280s.c", x->name);
  ir_node *c = ir_graph_build(e->dst, IR_OP_CONST, NULL, 0, &zero, 1, &z, hint, loc, err, sizeof err);
  if (!ids || !c) IR_DIE("out of memory (ids || !c)");
  ids->layer = c->layer = layer;
  ir_value *coord = comm1(e, IR_OP_MESH_SLICE, ids->out[0], axis, 0, NULL, "sl", loc, layer); /* [1]: the coordinate */
  coord = ir_graph_build1(e->dst, IR_OP_RESHAPE, &coord, 1, &shape, 1, NULL, loc);
  ir_value *zi = c->out[0];
  if (x->type.dtype != IR_DT_I64) { /* the coordinate's zero */
    ir_node *k = ir_graph_build(e->dst, IR_OP_CONST, NULL, 0, &zero, 1, &(ir_type){.dtype = IR_DT_I64}, NULL, loc, err,
                                sizeof err);
    if (!k) IR_DIE("out of memory (k)");
    zi = k->out[0];
  }
  ir_value *eq_in[2] = {coord, zi};
  ir_value *is_first = ir_graph_build1(e->dst, IR_OP_EQ, eq_in, 2, NULL, 0, NULL, loc);
  ir_value *in[3] = {is_first, x, c->out[0]};
  snprintf(hint, sizeof hint, "%.280s.first", x->name);
  ir_value *r = ir_graph_build1(e->dst, IR_OP_WHERE, in, 3, NULL, 0, name ? name : hint, loc);
  coord->def->layer = is_first->def->layer = r->def->layer = layer;
  r->role = derived_role(x);
  return r;
}

/* ---- the builders of expansions (shard_impl.h) ---- */

static int x_layer(const sh_x *x) { return x->node->layer; }

static ir_role x_role(const sh_x *x) { return x->node->n_out ? x->node->out[0]->role : IR_ROLE_ACT; }

ir_value *sh_x_op(const sh_x *x, ir_op op, ir_value *const *in, int n, const ir_attr *at, int na, const char *name,
                  ir_shard shard) {
  char err[512], hint[300];
  if (!name || name[0] == '.') { /* named after the result it is part of */
    snprintf(hint, sizeof hint, "%.200s.%.80s", x->node->out[0]->name, name ? name + 1 : ir_op_name(op));
    name = hint;
  }
  ir_node *m = ir_graph_build(x->e->dst, op, in, n, at, na, NULL, name, x->loc, err, sizeof err);
  if (!m) {
    fprintf(stderr, "tgc: internal error: shard: %s in the expansion of %s at %d:%d: %s\n", ir_op_name(op),
            ir_op_name(x->node->op), x->node->loc.line, x->node->loc.col, err);
    abort();
  }
  m->layer = x_layer(x);
  m->out[0]->role = x_role(x);
  m->out[0]->shard = shard;
  return m->out[0];
}

/* A nullary op (const, iota) of type t named RESULT.suffix. */
static ir_value *x_source(const sh_x *x, ir_op op, const ir_attr *at, const ir_type *t, const char *suffix) {
  char err[256], hint[300];
  snprintf(hint, sizeof hint, "%.200s.%s", x->node->out[0]->name, suffix);
  ir_node *k = ir_graph_build(x->e->dst, op, NULL, 0, at, 1, t, hint, x->loc, err, sizeof err);
  if (!k) IR_DIE("out of memory (k)");
  k->layer = x_layer(x);
  k->out[0]->role = x_role(x);
  return k->out[0];
}

ir_value *sh_x_const(const sh_x *x, ir_dtype dt, double value) {
  ir_attr c = ir_attr_float("value", value);
  ir_type t = {.dtype = dt, .rank = 0};
  return x_source(x, IR_OP_CONST, &c, &t, "c");
}

ir_value *sh_x_all_reduce(const sh_x *x, ir_value *v, const char *reduce, ir_shard shard) {
  ir_value *r = comm1(x->e, IR_OP_ALL_REDUCE, v, x->axis, -1, reduce, "ar", x->loc, x_layer(x));
  r->role = x_role(x);
  r->shard = shard;
  return r;
}

ir_value *sh_x_block_ids(const sh_x *x, int64_t whole, ir_dtype dt) {
  ir_attr ax = ir_attr_int("axis", 0);
  ir_type t = {.dtype = dt, .rank = 1, .dims = {whole}};
  ir_value *ids = x_source(x, IR_OP_IOTA, &ax, &t, "ids");
  ir_value *b = comm1(x->e, IR_OP_MESH_SLICE, ids, x->axis, 0, NULL, "sl", x->loc, x_layer(x));
  b->role = x_role(x);
  b->shard = (ir_shard){{0}, 0, {0}, {0}};
  b->shard.split[0] = (uint8_t)(1u << x->axis);
  return b;
}

void sh_x_keep(const sh_x *x, const ir_value *key, int slot, ir_value *v) {
  kept *k = calloc(1, sizeof *k);
  if (!k) IR_DIE("out of memory (k)");
  *k = (kept){key->id, slot, v, x->e->kept};
  x->e->kept = k;
}

ir_value *sh_x_kept(const sh_x *x, const ir_value *key, int slot) {
  for (const kept *k = x->e->kept; k; k = k->next)
    if (k->key == key->id && k->slot == slot) return k->v;
  return NULL;
}

/* The size attributes of the local results: reshape and broadcast's shape,
 * split's sizes (shape holds room for either). */
static int localize_attrs(const ir_node *n, const ir_type *local_out, ir_attr *attrs, int64_t *shape) {
  if (n->n_attrs) memcpy(attrs, n->attrs, (size_t)n->n_attrs * sizeof *attrs);
  for (int i = 0; i < n->n_attrs; i++) {
    if ((n->op == IR_OP_RESHAPE || n->op == IR_OP_BROADCAST) && strcmp(attrs[i].key, "shape") == 0) {
      for (int k = 0; k < local_out->rank; k++) shape[k] = local_out->dims[k];
      attrs[i] = ir_attr_ints("shape", shape, local_out->rank);
    }
    if (n->op == IR_OP_SPLIT && strcmp(attrs[i].key, "sizes") == 0) {
      int axis = (int)ir_node_attr_int(n, "axis", 0);
      for (int j = 0; j < n->n_out; j++) shape[j] = local_out[j].dims[axis];
      attrs[i] = ir_attr_ints("sizes", shape, n->n_out);
    }
  }
  return n->n_attrs;
}

/* How many equal parts the last dim of v is split into later: through
 * elementwise consumers (a bias, an activation) to a split along it. */
static int find_parts(const reader_index *r, const ir_value *v, int dim, int depth) {
  if (depth > 4) return 1;
  for (int j = r->start[v->id]; j < r->start[v->id + 1]; j++) {
    const ir_node *u = r->list[j];
    if (u->op == IR_OP_SPLIT && ir_node_attr_int(u, "axis", -1) == dim && u->n_out >= 2) {
      bool eq = true;
      for (int q = 1; q < u->n_out; q++) eq &= u->out[q]->type.dims[dim] == u->out[0]->type.dims[dim];
      if (eq) return u->n_out;
    }
    if ((ir_op_is_elementwise(u->op) || u->op == IR_OP_FUSED) && u->n_out >= 1) {
      int od = dim + (u->out[0]->type.rank - v->type.rank);
      if (u->out[0]->type.dims[od] == v->type.dims[dim]) {
        int p = find_parts(r, u->out[0], od, depth + 1);
        if (p > 1) return p;
      }
    }
  }
  return 1;
}

/* The node n rebuilt on the local operands in (its results: out). */
static void build_local(sh_engine *e, const ir_node *n, ir_value **in, int na, const ir_attr *attrs,
                        const ir_type *local_out, const char *const *names, ir_loc loc, ir_value **out) {
  char err[512];
  ir_type got[SH_MAX_ARGS];
  int n_got = 0;
  ir_type in_t[SH_MAX_ARGS];
  for (int i = 0; i < n->n_in; i++) in_t[i] = in[i]->type;
  if (ir_op_kind_of(n->op) == IR_OPK_NULLARY) got[0] = local_out[0];
  if (ir_infer(n->op, in_t, n->n_in, attrs, na, got, &n_got, err, sizeof err) != 0 || n_got != n->n_out) {
    fprintf(stderr, "tgc: internal error: shard: %s at %d:%d on local operands: %s\n", ir_op_name(n->op), n->loc.line,
            n->loc.col, err);
    abort();
  }
  for (int j = 0; j < n->n_out; j++)
    if (!ir_type_equal(&got[j], &local_out[j])) {
      char a[128], b[128];
      fprintf(stderr, "tgc: internal error: shard: %%%s (%s at %d:%d) is %s on one rank, its layout wants %s\n",
              n->out[j]->name, ir_op_name(n->op), n->loc.line, n->loc.col, ir_type_str(&got[j], a, sizeof a),
              ir_type_str(&local_out[j], b, sizeof b));
      abort();
    }
  static ir_value *const none[1];
  ir_node *m = ir_graph_add_node(e->dst, n->op, n->n_in ? in : none, n->n_in, got, n->n_out, attrs, na, names, loc);
  m->layer = n->layer;
  for (int j = 0; j < n->n_out; j++) out[j] = m->out[j];
}

/* The constant a scalar operand v holds (a rank-0 const), NaN when none. */
static double const_scalar(const ir_value *v) {
  if (!v->def || v->def->op != IR_OP_CONST || v->type.rank != 0) return NAN;
  const ir_attr *a = ir_node_attr(v->def, "value");
  return a && a->kind == IR_ATTR_FLOAT ? a->f : a && a->kind == IR_ATTR_INT ? (double)a->i : NAN;
}

/* What n's padded results hold in their padding, given its operands'
 * (in_pad: operand i is padded; pad_value: what its padding holds, NaN:
 * not known): what a reduction over a padded dim needs (a sum of zero
 * padding is exact, a count of finite padding counts nothing; the rules
 * gather otherwise: sh_dec.in_pad_value). Views and moves keep the padding;
 * an elementwise op maps the padded operands' values with its scalar
 * meaning (ir_eval_*) and an unpadded operand's when it is a constant
 * scalar (Adam's eps: sqrt(0) + eps, then 0 / eps = 0); zeros times, or
 * divided by, an unpadded operand are zeros (operands are finite, divisors
 * nonzero: a scale, a bias correction); a product contracting, or a
 * reduction along other dims of, zero padding is zeros; a max or mean of a
 * constant padding is that constant. The vocabulary-parallel expansions
 * mask their padding (0). NaN when none of these applies. */
static double padding_value(const ir_node *n, const bool *in_pad, const double *pv) {
  double v[3] = {NAN, NAN, NAN};
  bool any_zero = false, all_known = true;
  double same = NAN;
  int padded_in = 0;
  for (int i = 0; i < n->n_in; i++) {
    if (!in_pad[i]) continue;
    padded_in++;
    any_zero |= pv[i] == 0;
    all_known &= !isnan(pv[i]);
    same = padded_in == 1 ? pv[i] : (same == pv[i] ? same : NAN);
  }
  switch (n->op) {
  case IR_OP_TRANSPOSE: case IR_OP_RESHAPE: case IR_OP_BROADCAST: case IR_OP_SLICE: case IR_OP_SPLIT:
  case IR_OP_CONCAT: case IR_OP_SHARD_HINT: case IR_OP_REDUCE_MAX: case IR_OP_REDUCE_MEAN:
    return same;
  case IR_OP_MATMUL: case IR_OP_REDUCE_SUM: return same == 0 ? 0 : NAN;
  case IR_OP_CAST: return ir_dtype_is_float((ir_dtype)ir_node_attr_int(n, "to", IR_DT_F32)) ? same : NAN;
  case IR_OP_WHERE: return in_pad[1] && in_pad[2] && pv[1] == pv[2] ? pv[1] : NAN;
  default: break;
  }
  if (ir_op_kind_of(n->op) == IR_OPK_UNARY && n->n_in == 1 && all_known) {
    double r = ir_eval_unary(n->op, pv[0]);
    return isnan(r) ? NAN : r;
  }
  if (ir_op_kind_of(n->op) != IR_OPK_BINARY || n->n_in != 2) return NAN;
  if ((n->op == IR_OP_MUL && any_zero) || (n->op == IR_OP_DIV && in_pad[0] && pv[0] == 0 && !in_pad[1])) return 0;
  for (int i = 0; i < 2; i++) v[i] = in_pad[i] ? pv[i] : const_scalar(n->in[i]);
  if (isnan(v[0]) || isnan(v[1])) return NAN;
  double r = ir_eval_binary(n->op, v[0], v[1]);
  return isnan(r) ? NAN : r;
}

static int shard_node(sh_engine *e, const ir_node *n) {
  if (n->op == IR_OP_GRAD || ir_op_has(n->op, IR_OPF_COMM) || n->op == IR_OP_MESH_SLICE) {
    ir_error(e->d, n->loc, "the shard pass cannot shard '%s'%s", ir_op_name(n->op),
             n->op == IR_OP_GRAD ? " (run the autodiff pass first)" : ": the graph is already sharded");
    return -1;
  }
  if (n->n_in > SH_MAX_ARGS || n->n_out > SH_MAX_ARGS) {
    ir_error(e->d, n->loc, "the shard pass handles at most %d operands and results ('%s' has %d and %d)", SH_MAX_ARGS,
             ir_op_name(n->op), n->n_in, n->n_out);
    return -1;
  }
  sh_rule rule = sh_rule_of(n->op);
  if (!rule) {
    fprintf(stderr, "tgc: internal error: shard: no rule for %s\n", ir_op_name(n->op));
    abort();
  }
  sh_st want[SH_MAX_ARGS][IR_NUM_AXES], res[SH_MAX_ARGS][IR_NUM_AXES];
  bool scale[IR_NUM_AXES] = {false}, maxr[IR_NUM_AXES] = {false}, red[IR_NUM_AXES] = {false}, first[IR_NUM_AXES] = {false};
  int scale_op[IR_NUM_AXES];
  sh_expand expand = NULL;
  int expand_axis = -1;
  for (int a = 0; a < IR_NUM_AXES; a++) {
    scale_op[a] = -1;
    for (int i = 0; i < n->n_in; i++) want[i][a] = sh_R();
    for (int j = 0; j < n->n_out; j++) res[j][a] = sh_R();
    if (!active_axis(e, a)) {
      for (int i = 0; i < n->n_in; i++) want[i][a] = (sh_st){SH_UNSET, 0, 1};
      continue;
    }
    sh_dec d = {.node = n, .axis = a, .size = e->mesh->size[a], .n_in = n->n_in, .n_out = n->n_out,
                .megatron = e->megatron && a == IR_AXIS_TP, .scale_operand = -1, .parts_hint = 1,
                .sp = e->mesh->sp && a == IR_AXIS_TP, .readers = n->n_out ? e->readers[n->out[0]->id] : 0,
                .sum_continues = n->n_out == 1 && e->sums_on[n->out[0]->id],
                .slice_counts = e->slice_counts[a]};
    if (d.megatron && (n->op == IR_OP_MATMUL || n->op == IR_OP_FUSED_MATMUL) && n->out[0]->type.rank >= 1)
      d.parts_hint = find_parts(&e->rindex, n->out[0], n->out[0]->type.rank - 1, 0);
    for (int i = 0; i < n->n_in; i++) {
      const ir_value *v = n->in[i];
      d.in[i] = e->st[v->id][a];
      d.in_param[i] = is_weight(v);
      d.in_pad_value[i] = padded(e, &v->type, e->st[v->id]) ? e->pad_value[v->id] : 0;
      for (int o = 0; o < IR_NUM_AXES; o++)
        if (o != a && e->st[v->id][o].kind == SH_S) d.in_other[i] |= 1u << e->st[v->id][o].dim;
      for (int k = 0; k < v->type.rank; k++) {
        int64_t s = v->type.dims[k];
        for (int o = 0; o < a; o++) /* the outer axes' splits already chosen */
          if (want[i][o].kind == SH_S && want[i][o].dim == k) s /= e->mesh->size[o];
        d.in_local[i][k] = s;
      }
    }
    rule(&d);
    /* a partial activation several nodes read (a column-parallel layer's
     * input gradient, or llama's sum of them, read by a norm's backward):
     * reduced where it is made, as Megatron-LM does; kept partial, each
     * reader that cannot take it would reduce it, and again the partial
     * products made from it (3 reduce-scatters per norm under sp), and the
     * norm's gain gradient would be a partial sum reduced in the update */
    if (d.megatron && n->n_out == 1 && d.out[0].kind == SH_P && d.readers > 1 &&
        (n->out[0]->type.rank >= 3 || (n->out[0]->type.rank == 2 && n->out[0]->role == IR_ROLE_ACT)))
      d.reduce_results = true;
    for (int i = 0; i < n->n_in; i++) {
      want[i][a] = d.in[i].kind == SH_UNSET ? sh_R() : d.in[i];
      if (e->st[n->in[i]->id][a].kind == SH_UNSET) place(e, n->in[i], a, want[i][a]);
    }
    for (int j = 0; j < n->n_out; j++) res[j][a] = d.out[j].kind == SH_UNSET ? sh_R() : d.out[j];
    scale[a] = d.scale_results;
    scale_op[a] = d.scale_operand;
    maxr[a] = d.max_results;
    red[a] = d.reduce_results && d.out[0].kind == SH_P;
    first[a] = d.first_only;
    if (d.expand) {
      if (expand) {
        fprintf(stderr, "tgc: internal error: shard: %s at %d:%d expands on two axes\n", ir_op_name(n->op), n->loc.line,
                n->loc.col);
        abort();
      }
      expand = d.expand, expand_axis = a;
    }
  }
  /* operands */
  int phase = pass_node_phase(n);
  ir_loc loc = reloc(e, n->loc);
  ir_value *in[SH_MAX_ARGS];
  bool in_pad[SH_MAX_ARGS];     /* operand i as converted: padded */
  double in_value[SH_MAX_ARGS]; /* and what its padding holds (padding_value) */
  for (int i = 0; i < n->n_in; i++) {
    const ir_value *v = n->in[i];
    sh_st w[IR_NUM_AXES];
    for (int a = 0; a < IR_NUM_AXES; a++) w[a] = want[i][a].kind == SH_UNSET ? e->st[v->id][a] : want[i][a];
    bool kept = true; /* not converted: the padding as placed; converted: zeros (pad_zeros) */
    for (int a = 0; a < IR_NUM_AXES; a++) kept &= sh_eq(w[a], e->st[v->id][a]);
    in_pad[i] = padded(e, &v->type, w);
    in_value[i] = !in_pad[i] || !kept ? 0 : e->pad_value[v->id];
    in[i] = convert(e, n->in[i], want[i], phase, loc, n->layer);
    int div = 1;
    for (int a = 0; a < IR_NUM_AXES; a++)
      if (scale_op[a] == i) div *= e->mesh->size[a];
    if (div > 1) in[i] = scale_by(e, in[i], 1.0 / div, loc, n->layer, NULL);
  }
  /* the node on local operands */
  ir_type local_out[SH_MAX_ARGS];
  for (int j = 0; j < n->n_out; j++) local_out[j] = local_type(e, &n->out[j]->type, res[j]);
  ir_attr attrs[64];
  int64_t shape[SH_MAX_ARGS > IR_MAX_RANK ? SH_MAX_ARGS : IR_MAX_RANK];
  if (n->n_attrs > 64) abort();
  int na = localize_attrs(n, local_out, attrs, shape);
  /* a result rescaled or maxed afterwards: the node's is the local one, the
   * final value keeps the name */
  bool post = false;
  for (int a = 0; a < IR_NUM_AXES; a++) post |= scale[a] || maxr[a] || red[a] || first[a];
  const char *names[SH_MAX_ARGS];
  char local_names[SH_MAX_ARGS][300];
  for (int j = 0; j < n->n_out; j++) {
    names[j] = n->out[j]->name;
    if (post) {
      snprintf(local_names[j], sizeof local_names[j], "%.280s.local", n->out[j]->name);
      names[j] = local_names[j];
    }
  }
  ir_value *built[SH_MAX_ARGS];
  if (expand) {
    ir_shard layout[SH_MAX_ARGS];
    for (int j = 0; j < n->n_out; j++) layout[j] = to_shard(e, res[j], &n->out[j]->type);
    sh_x x = {.e = e, .node = n, .axis = expand_axis, .size = e->mesh->size[expand_axis], .in = in, .out = local_out,
              .layout = layout, .names = names, .loc = loc};
    expand(&x, built);
    for (int j = 0; j < n->n_out; j++)
      if (!built[j] || !ir_type_equal(&built[j]->type, &local_out[j])) {
        char a[128], b[128];
        fprintf(stderr, "tgc: internal error: shard: the expansion of %s at %d:%d gives %s for %%%s, its layout wants %s\n",
                ir_op_name(n->op), n->loc.line, n->loc.col, built[j] ? ir_type_str(&built[j]->type, a, sizeof a) : "nothing",
                n->out[j]->name, ir_type_str(&local_out[j], b, sizeof b));
        abort();
      }
  } else {
    build_local(e, n, in, na, attrs, local_out, names, loc, built);
  }
  for (int j = 0; j < n->n_out; j++) {
    ir_value *r = built[j];
    r->role = n->out[j]->role;
    memcpy(e->st[n->out[j]->id], res[j], sizeof res[j]);
    e->pad_value[n->out[j]->id] =
        !padded(e, &n->out[j]->type, res[j]) || expand ? 0 : padding_value(n, in_pad, in_value);
    set_layout(e, r, res[j], &n->out[j]->type);
    int div = 1, maxes = 0;
    for (int a = 0; a < IR_NUM_AXES; a++) {
      if (scale[a] && ir_dtype_is_float(r->type.dtype)) div *= e->mesh->size[a];
      maxes += (maxr[a] || red[a] || first[a]) && j == 0;
    }

    char final[320];
    snprintf(final, sizeof final, "=%.300s", n->out[j]->name);
    for (int a = 0; a < IR_NUM_AXES; a++)
      if (first[a] && j == 0) {
        r = first_only(e, r, a, --maxes == 0 && div == 1 ? n->out[j]->name : NULL, loc, n->layer);
        set_layout(e, r, res[j], &n->out[j]->type);
      }
    for (int a = 0; a < IR_NUM_AXES; a++)
      if (maxr[a] && j == 0) {
        r = comm1(e, IR_OP_ALL_REDUCE, r, a, -1, "max", --maxes == 0 && div == 1 ? final : "max", loc, n->layer);
        set_layout(e, r, res[j], &n->out[j]->type);
      }
    for (int a = 0; a < IR_NUM_AXES; a++)
      if (red[a] && j == 0) { /* reduced at once: all-reduced, with sp reduce-scattered along the sequence */
        int64_t size = e->mesh->size[a];
        bool seq = e->mesh->sp && a == IR_AXIS_TP && r->type.rank >= 3 && r->type.dims[1] >= size &&
                   r->type.dims[1] % size == 0;
        res[j][a] = seq ? sh_S(1) : sh_R();
        r = comm1(e, seq ? IR_OP_REDUCE_SCATTER : IR_OP_ALL_REDUCE, r, a, seq ? 1 : -1, NULL,
                  --maxes == 0 && div == 1 ? final : seq ? "rs" : "ar", loc, n->layer);
        set_layout(e, r, res[j], &n->out[j]->type);
        memcpy(e->st[n->out[j]->id], res[j], sizeof res[j]);
      }
    if (div > 1) r = scale_by(e, r, 1.0 / div, loc, n->layer, n->out[j]->name);
    e->map[n->out[j]->id] = r;
  }
  return 0;
}

bool pass_shard_has_rule(ir_op op) { return sh_rule_of(op) != NULL; }

int sh_part_counts(const ir_graph *g, int *out, int cap) {
  reader_index r;
  readers_build(g, &r);
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *u = g->nodes[i];
    if (u->dead || (u->op != IR_OP_MATMUL && u->op != IR_OP_FUSED_MATMUL) || u->out[0]->type.rank < 1) continue;
    int k = find_parts(&r, u->out[0], u->out[0]->type.rank - 1, 0);
    bool seen = k <= 1 || k > 127;
    for (int j = 0; j < n && !seen; j++) seen = out[j] == k;
    if (!seen && n < cap) out[n++] = k;
  }
  readers_free(&r);
  return n;
}

/* ---- the engine's API (shard_impl.h) ---- */

sh_engine *sh_engine_new(const ir_graph *src, ir_diag *d, bool megatron) {
  sh_engine *e = calloc(1, sizeof *e);
  if (!e) IR_DIE("out of memory (e)");
  e->src = src;
  e->mesh = &src->mesh;
  e->megatron = megatron;
  e->d = d;
  e->nv = ir_graph_id_bound(src) + 1;
  e->map = calloc((size_t)e->nv, sizeof *e->map);
  e->st = calloc((size_t)e->nv, sizeof *e->st);
  e->convs = calloc((size_t)e->nv, sizeof *e->convs);
  e->readers = calloc((size_t)e->nv, sizeof *e->readers);
  e->sums_on = calloc((size_t)e->nv, sizeof *e->sums_on);
  e->pad_value = calloc((size_t)e->nv, sizeof *e->pad_value);
  if (!e->map || !e->st || !e->convs || !e->readers || !e->sums_on || !e->pad_value) IR_DIE("out of memory (e->map || !e->st || !e->convs || !e->readers || !e->sums_on || !e->pad_value)");
  for (int i = 0; i < src->n_nodes; i++)
    for (int k = 0; !src->nodes[i]->dead && k < src->nodes[i]->n_in; k++) e->readers[src->nodes[i]->in[k]->id]++;
  for (int i = 0; i < src->n_nodes; i++) {
    const ir_node *u = src->nodes[i];
    if (u->dead || (u->op != IR_OP_ADD && u->op != IR_OP_SUB)) continue;
    for (int k = 0; k < u->n_in; k++) e->sums_on[u->in[k]->id] = e->readers[u->in[k]->id] == 1;
  }
  for (int i = 0; i < src->n_outputs; i++) e->sums_on[src->outputs[i].value->id] = false;
  readers_build(src, &e->rindex);
  e->dst = ir_graph_new(src->name, src->source_file);
  e->dst->mesh = src->mesh;
  for (int i = 0; i < src->n_inputs; i++) {
    const ir_value *v = src->inputs[i];
    ir_value *x = ir_graph_add_input(e->dst, v->name, v->type, reloc(e, v->loc));
    x->role = v->role;
    e->map[v->id] = x;
  }
  for (int i = 0; i < src->n_params; i++) {
    const ir_value *v = src->params[i];
    ir_value *x = ir_graph_add_param(e->dst, v->name, v->type, v->init, reloc(e, v->loc));
    x->role = v->role;
    e->map[v->id] = x;
  }
  for (int i = 0; i < e->nv; i++)
    for (int a = 0; a < IR_NUM_AXES; a++) e->st[i][a] = active_axis(e, a) ? (sh_st){SH_UNSET, 0, 1} : sh_R();
  return e;
}

void sh_engine_place(sh_engine *e, const ir_value *v, int axis, sh_st s) {
  if (active_axis(e, axis)) place(e, v, axis, s);
}

sh_st sh_engine_layout(const sh_engine *e, const ir_value *v, int axis) { return e->st[v->id][axis]; }

void sh_engine_convert_input(sh_engine *e, const ir_value *v, const sh_st *want) {
  sh_st w[IR_NUM_AXES];
  for (int a = 0; a < IR_NUM_AXES; a++) w[a] = active_axis(e, a) ? want[a] : sh_R();
  ir_value *x = convert(e, v, w, PASS_PHASE_OPTIMIZER, reloc(e, v->loc), -1);
  e->map[v->id] = x;
  memcpy(e->st[v->id], w, sizeof w);
}

void sh_engine_slice_counts(sh_engine *e, int axis) { e->slice_counts[axis] = true; }

int sh_engine_run(sh_engine *e) {
  for (int i = 0; i < e->src->n_nodes; i++) {
    const ir_node *n = e->src->nodes[i];
    if (n->dead) continue;
    if (shard_node(e, n) != 0) return -1;
  }
  /* inputs and parameters nothing read: replicated */
  for (int k = 0; k < e->src->n_inputs + e->src->n_params; k++) {
    const ir_value *v = k < e->src->n_inputs ? e->src->inputs[k] : e->src->params[k - e->src->n_inputs];
    for (int a = 0; a < IR_NUM_AXES; a++)
      if (e->st[v->id][a].kind == SH_UNSET) place(e, v, a, sh_R());
  }
  return 0;
}

void sh_engine_output(sh_engine *e, int i, const sh_st *want) {
  const ir_output *o = &e->src->outputs[i];
  sh_st keep[IR_NUM_AXES];
  for (int a = 0; a < IR_NUM_AXES; a++) keep[a] = want ? want[a] : (sh_st){SH_UNSET, 0, 1};
  ir_value *v = convert(e, o->value, keep, PASS_PHASE_OPTIMIZER + 1, reloc(e, o->value->loc), -1);
  ir_graph_add_output(e->dst, o->name, v);
}

ir_graph *sh_engine_finish(sh_engine *e) {
  ir_graph *g = e->dst;
  e->dst = NULL;
  return g;
}

void sh_engine_free(sh_engine *e) {
  if (!e) return;
  for (int i = 0; i < e->nv; i++)
    for (conv *c = e->convs[i]; c;) {
      conv *next = c->next;
      free(c);
      c = next;
    }
  free(e->convs);
  free(e->readers);
  free(e->sums_on);
  free(e->pad_value);
  readers_free(&e->rindex);
  for (kept *k = e->kept; k;) {
    kept *next = k->next;
    free(k);
    k = next;
  }
  free(e->map);
  free(e->st);
  ir_graph_free(e->dst);
  free(e);
}
