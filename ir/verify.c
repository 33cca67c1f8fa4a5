/* ir/verify.c — ir_verify: is this graph well formed?
 *
 * Runs after the reader, after sema and after every pass (in tests and debug
 * builds), so it assumes nothing: every pointer is checked to belong to the
 * graph before it is followed. One walk in node order keeps a state per value
 * id (undefined / defined / defined by a dead node), which gives
 * def-before-use; each live node is re-typed with ir_infer (the same rules
 * sema used) and its result types compared. Then the declarations (inputs,
 * params), value bookkeeping (ids, names, def links, roles, sharding) and the
 * outputs. Each problem is one "verifier: ..." error at the node's (or
 * value's) location; the count is returned.
 *
 * Dead nodes (node->dead, awaiting ir_graph_compact) are treated as absent:
 * using one of their results from a live node or an output is an error.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "ir.h"

enum { UNDEFINED = 0, DEFINED = 1, DEAD_DEF = 2 };

typedef struct {
  const ir_graph *g;
  ir_diag *d;
  const ir_verify_locs *at; /* NULL: report at the graph's own locs */
  int problems;
  unsigned char *state;   /* per value id */
  unsigned char *declared; /* per value id: 1 input, 2 param */
} vctx;

static ir_loc where(const vctx *c, ir_loc loc) {
  if (!loc.file && loc.line > 0) loc.file = c->g->source_file;
  return loc;
}

static void problem(vctx *c, ir_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void problem(vctx *c, ir_loc loc, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ir_error(c->d, where(c, loc), "verifier: %s", msg);
  c->problems++;
}

static bool owns_value(const ir_graph *g, const ir_value *v) {
  return v && v->id >= 0 && v->id < g->n_values && g->values[v->id] == v;
}
static bool owns_node(const ir_graph *g, const ir_node *n) {
  return n && n->id >= 0 && n->id < g->n_nodes && g->nodes[n->id] == n;
}
/* Where a problem of node n / value v / output i is reported. */
static ir_loc node_at(const vctx *c, const ir_node *n) {
  return c->at && c->at->nodes && owns_node(c->g, n) ? c->at->nodes[n->id] : n->loc;
}
static ir_loc value_at(const vctx *c, const ir_value *v) {
  return c->at && c->at->values && owns_value(c->g, v) ? c->at->values[v->id] : v->loc;
}
static const char *vname(const ir_value *v) { return v->name && v->name[0] ? v->name : "?"; }

/* ---- a set of strings (names), open addressing ---- */
typedef struct {
  const char **slots;
  size_t cap;
} name_set;

static void set_init(name_set *s, int n) {
  s->cap = 16;
  while (s->cap < (size_t)n * 2) s->cap *= 2;
  s->slots = calloc(s->cap, sizeof *s->slots);
  if (!s->slots) IR_DIE("out of memory (s->slots)");
}
/* Adds name; false if it was already there. */
static bool set_add(name_set *s, const char *name) {
  size_t i = ir_hash_bytes(name, strlen(name)) & (s->cap - 1);
  while (s->slots[i]) {
    if (strcmp(s->slots[i], name) == 0) return false;
    i = (i + 1) & (s->cap - 1);
  }
  s->slots[i] = name;
  return true;
}

/* ---- values ---- */
static bool type_valid(const ir_type *t) {
  if ((unsigned)t->dtype >= IR_NUM_DTYPES || t->rank < 0 || t->rank > IR_MAX_RANK) return false;
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0 || t->dims[i] > IR_MAX_ELEMENTS) return false;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] == 0) return true;
    if (n > IR_MAX_ELEMENTS / t->dims[i]) return false;
    n *= t->dims[i];
  }
  return true;
}

/* A spec names only axes of the graph's mesh (size > 1), splits each axis
 * on at most one dim of the value's rank, never splits and sums over one
 * axis at once, and pads only a split dim, by less than its blocks. */
static void check_shard(vctx *c, const ir_value *v) {
  const ir_mesh *m = &c->g->mesh;
  unsigned seen = 0;
  for (int d = 0; d < IR_MAX_RANK; d++) {
    unsigned mask = v->shard.split[d];
    int32_t pad = v->shard.pad[d];
    if (pad != 0 && (!mask || pad < 0 || ir_shard_pieces(&v->shard, d) > 1 || pad >= ir_shard_blocks(&v->shard, m, d)))
      problem(c, value_at(c, v), "%%%s pads dim %d by %d, but a pad is 1 to blocks - 1 elements of a split dim not in "
              "parts", vname(v), d, (int)pad);
    if (!mask) continue;
    if (d >= v->type.rank) {
      problem(c, value_at(c, v), "%%%s is split on dim %d but has rank %d", vname(v), d, v->type.rank);
      continue;
    }
    for (int a = 0; a < 8; a++) {
      if (!((mask >> a) & 1)) continue;
      if (a >= IR_NUM_AXES) problem(c, value_at(c, v), "%%%s is split over an invalid mesh axis %d", vname(v), a);
      else if (m->size[a] < 2)
        problem(c, value_at(c, v), "%%%s is split over %s, but the graph's mesh has no %s axis", vname(v),
                ir_axis_name((ir_axis)a), ir_axis_name((ir_axis)a));
      else if (seen & (1u << a))
        problem(c, value_at(c, v), "%%%s is split over %s on two dims", vname(v), ir_axis_name((ir_axis)a));
      seen |= 1u << a;
    }
  }
  for (int a = 0; a < 8; a++) {
    if (!((v->shard.partial >> a) & 1)) continue;
    if (a >= IR_NUM_AXES) problem(c, value_at(c, v), "%%%s is partial over an invalid mesh axis %d", vname(v), a);
    else if (m->size[a] < 2)
      problem(c, value_at(c, v), "%%%s is partial over %s, but the graph's mesh has no %s axis", vname(v),
              ir_axis_name((ir_axis)a), ir_axis_name((ir_axis)a));
    else if (seen & (1u << a))
      problem(c, value_at(c, v), "%%%s is both split and partial over %s", vname(v), ir_axis_name((ir_axis)a));
  }
}

static void check_values(vctx *c) {
  const ir_graph *g = c->g;
  name_set names;
  set_init(&names, g->n_values);
  for (int i = 0; i < g->n_values; i++) {
    const ir_value *v = g->values[i];
    if (!v) {
      problem(c, (ir_loc){0}, "value slot %d is empty", i);
      continue;
    }
    if (v->id != i) problem(c, value_at(c, v), "%%%s has id %d but is at index %d", vname(v), v->id, i);
    if (!v->name || !v->name[0]) problem(c, value_at(c, v), "value %d has no name", i);
    else if (!set_add(&names, v->name)) problem(c, value_at(c, v), "name %%%s is used by two values", v->name);
    if (!type_valid(&v->type)) problem(c, value_at(c, v), "%%%s has an invalid type", vname(v));
    if ((unsigned)v->role >= IR_NUM_ROLES) problem(c, value_at(c, v), "%%%s has an invalid role %d", vname(v), (int)v->role);
    check_shard(c, v);
    if (v->def) {
      if (!owns_node(g, v->def))
        problem(c, value_at(c, v), "%%%s is defined by a node that is not in the graph", vname(v));
      else if (v->def_result < 0 || v->def_result >= v->def->n_out || !v->def->out ||
               v->def->out[v->def_result] != v)
        problem(c, value_at(c, v), "%%%s claims to be result %d of %s, which it is not", vname(v), v->def_result,
                ir_op_name(v->def->op));
      if (c->declared[i])
        problem(c, value_at(c, v), "%s %%%s has a defining node", c->declared[i] == 1 ? "input" : "param", vname(v));
    }
  }
  free(names.slots);
}

static bool init_valid(const ir_init *in) {
  switch (in->kind) {
  case IR_INIT_NONE: case IR_INIT_ZEROS: case IR_INIT_ONES: return true;
  case IR_INIT_NORMAL: return isfinite(in->a) && in->a >= 0;
  case IR_INIT_UNIFORM: return isfinite(in->a) && isfinite(in->b) && in->a <= in->b;
  }
  return false;
}

/* Inputs and params: declared once, no def, proper role. Marks them DEFINED. */
static void check_decls(vctx *c, ir_value *const *list, int n, int kind) {
  const char *what = kind == 1 ? "input" : "param";
  for (int i = 0; i < n; i++) {
    const ir_value *v = list[i];
    if (!owns_value(c->g, v)) {
      problem(c, (ir_loc){0}, "%s %d is not a value of this graph", what, i);
      continue;
    }
    if (c->declared[v->id]) {
      problem(c, value_at(c, v), "%%%s is declared twice (as %s and %s)", vname(v),
              c->declared[v->id] == 1 ? "input" : "param", what);
      continue;
    }
    c->declared[v->id] = (unsigned char)kind;
    if (v->role != (kind == 1 ? IR_ROLE_INPUT : IR_ROLE_PARAM))
      problem(c, value_at(c, v), "%s %%%s has role %s", what, vname(v), ir_role_name(v->role));
    if (kind == 2 && !init_valid(&v->init)) problem(c, value_at(c, v), "param %%%s has an invalid init", vname(v));
    if (!v->def) c->state[v->id] = DEFINED;
  }
}

/* ---- nodes ---- */
/* Capacity ir_infer may need for the results of n (split: one per size). */
static int infer_capacity(const ir_node *n) {
  int cap = n->n_out > 1 ? n->n_out : 1;
  if (n->op == IR_OP_FUSED && cap < IR_FUSED_MAX_RESULTS) cap = IR_FUSED_MAX_RESULTS;
  for (int i = 0; i < n->n_attrs; i++)
    if (n->attrs[i].kind == IR_ATTR_INTS && n->attrs[i].n > cap) cap = n->attrs[i].n;
  return cap;
}

static void retype_node(vctx *c, const ir_node *n) {
  const char *op = ir_op_name(n->op);
  enum { SMALL = 16 };
  ir_type in_small[SMALL], out_small[SMALL];
  int cap = infer_capacity(n);
  ir_type *in = n->n_in > SMALL ? malloc((size_t)n->n_in * sizeof *in) : in_small;
  ir_type *out = cap > SMALL ? calloc((size_t)cap, sizeof *out) : out_small;
  if (!in || !out) IR_DIE("out of memory (in || !out)");
  for (int i = 0; i < n->n_in; i++) in[i] = n->in[i]->type;
  if (ir_op_kind_of(n->op) == IR_OPK_NULLARY) out[0] = n->out[0]->type;
  char err[512];
  int n_out = 0;
  if (ir_infer(n->op, in, n->n_in, n->attrs, n->n_attrs, out, &n_out, err, sizeof err) != 0) {
    problem(c, node_at(c, n), "%s", err);
  } else if (n_out != n->n_out) {
    problem(c, node_at(c, n), "%s has %d results but its operands give %d", op, n->n_out, n_out);
  } else {
    for (int i = 0; i < n_out; i++) {
      if (ir_type_equal(&out[i], &n->out[i]->type)) continue;
      char have[256], want[256];
      problem(c, node_at(c, n), "result %d of %s has type %s but its operands give %s", i, op,
              ir_type_str(&n->out[i]->type, have, sizeof have), ir_type_str(&out[i], want, sizeof want));
    }
  }
  if (in != in_small) free(in);
  if (out != out_small) free(out);
  /* a communication op's axis and its size are the graph's mesh's */
  int a = ir_op_on_mesh_axis(n->op) ? ir_node_mesh_axis(n) : -1;
  if (a >= 0) {
    int64_t size = ir_node_attr_int(n, "n", 1);
    const char *axis = ir_axis_name((ir_axis)a);
    if (size != c->g->mesh.size[a])
      problem(c, node_at(c, n), "%s over %s has n = %lld, but the graph's mesh has %s = %d", op, axis,
              (long long)size, axis, c->g->mesh.size[a]);
  }
}

static void check_node(vctx *c, int index) {
  const ir_graph *g = c->g;
  const ir_node *n = g->nodes[index];
  if (!n) {
    problem(c, (ir_loc){0}, "node slot %d is empty", index);
    return;
  }
  if (n->id != index) problem(c, node_at(c, n), "node %d has id %d", index, n->id);
  if ((unsigned)n->op >= IR_NUM_OPS) {
    problem(c, node_at(c, n), "node %d has an invalid op %d", index, (int)n->op);
    return;
  }
  const char *op = ir_op_name(n->op);
  bool ok = true;
  if (n->n_out < 0 || (n->n_out > 0 && !n->out) || n->n_in < 0 || (n->n_in > 0 && !n->in)) {
    problem(c, node_at(c, n), "%s has malformed operand or result lists", op);
    return;
  }
  if (n->dead) { /* absent: its results count as removed */
    for (int j = 0; j < n->n_out; j++)
      if (owns_value(g, n->out[j]) && n->out[j]->def == n) c->state[n->out[j]->id] = DEAD_DEF;
    return;
  }
  int want_in = ir_op_num_inputs(n->op), want_out = ir_op_num_outputs(n->op);
  if (want_in >= 0 ? n->n_in != want_in : n->n_in < 1) {
    problem(c, node_at(c, n), "%s has %d operands", op, n->n_in);
    ok = false;
  }
  if (want_out >= 0 ? n->n_out != want_out : n->n_out < 1) {
    problem(c, node_at(c, n), "%s has %d results", op, n->n_out);
    ok = false;
  }
  if (n->n_attrs < 0 || (n->n_attrs > 0 && !n->attrs)) {
    problem(c, node_at(c, n), "%s has a malformed attribute list", op);
    ok = false;
  }
  for (int j = 0; j < n->n_in; j++) {
    const ir_value *v = n->in[j];
    if (!owns_value(g, v)) {
      problem(c, node_at(c, n), "operand %d of %s is not a value of this graph", j, op);
      ok = false;
    } else if (c->state[v->id] == DEAD_DEF) {
      problem(c, node_at(c, n), "operand %d of %s, %%%s, is defined by a removed node", j, op, vname(v));
    } else if (c->state[v->id] != DEFINED) {
      if (v->def || c->declared[v->id])
        problem(c, node_at(c, n), "operand %d of %s, %%%s, is used before its definition", j, op, vname(v));
      else
        problem(c, node_at(c, n), "operand %d of %s, %%%s, has no definition", j, op, vname(v));
    }
  }
  for (int j = 0; j < n->n_out; j++) {
    const ir_value *v = n->out[j];
    if (!owns_value(g, v)) {
      problem(c, node_at(c, n), "result %d of %s is not a value of this graph", j, op);
      ok = false;
      continue;
    }
    if (v->def != n || v->def_result != j) {
      problem(c, node_at(c, n), "result %d of %s, %%%s, does not point back to its node", j, op, vname(v));
      ok = false;
    }
    if (c->state[v->id] != UNDEFINED || c->declared[v->id])
      problem(c, node_at(c, n), "%%%s is defined twice (result %d of %s)", vname(v), j, op);
    c->state[v->id] = DEFINED;
  }
  if (ok) {
    for (int j = 0; j < n->n_in; j++)
      if (!type_valid(&n->in[j]->type)) ok = false; /* reported with the value */
    for (int j = 0; j < n->n_out; j++)
      if (!type_valid(&n->out[j]->type)) ok = false;
  }
  if (ok) retype_node(c, n);
}

static void check_outputs(vctx *c) {
  const ir_graph *g = c->g;
  name_set names;
  set_init(&names, g->n_outputs);
  for (int i = 0; i < g->n_outputs; i++) {
    const ir_output *o = &g->outputs[i];
    const ir_value *v = o->value;
    ir_loc loc = c->at && c->at->outputs ? c->at->outputs[i] : owns_value(g, v) ? v->loc : (ir_loc){0};
    if (!o->name || !o->name[0]) problem(c, loc, "output %d has no name", i);
    else if (!set_add(&names, o->name)) problem(c, loc, "output name \"%s\" is used twice", o->name);
    const char *on = o->name ? o->name : "?";
    if (!owns_value(g, v)) problem(c, loc, "output \"%s\" is not a value of this graph", on);
    else if (c->state[v->id] == DEAD_DEF)
      problem(c, loc, "output \"%s\" refers to %%%s, defined by a removed node", on, vname(v));
    else if (c->state[v->id] != DEFINED)
      problem(c, loc, "output \"%s\" refers to %%%s, which has no definition", on, vname(v));
  }
  free(names.slots);
}

int ir_verify(const ir_graph *g, ir_diag *d) { return ir_verify_at(g, NULL, d); }

int ir_verify_at(const ir_graph *g, const ir_verify_locs *at, ir_diag *d) {
  vctx c = {.g = g, .d = d, .at = at};
  size_t nv = g->n_values > 0 ? (size_t)g->n_values : 1;
  c.state = calloc(nv, 1);
  c.declared = calloc(nv, 1);
  if (!c.state || !c.declared) IR_DIE("out of memory (c.state || !c.declared)");
  check_decls(&c, g->inputs, g->n_inputs, 1);
  check_decls(&c, g->params, g->n_params, 2);
  check_values(&c);
  for (int i = 0; i < g->n_nodes; i++) check_node(&c, i);
  check_outputs(&c);
  free(c.state);
  free(c.declared);
  return c.problems;
}
