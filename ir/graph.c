/* ir/graph.c — building and editing graphs.
 *
 * Values and nodes live in the graph's arena; the graph keeps growable
 * pointer arrays (values, nodes in topological order, inputs, params,
 * outputs). Names are unique per graph: a hash map from name to value (and
 * the next numeric suffix to try) makes ir_graph_unique_name and
 * ir_graph_find_value O(1), so elaborating a 100-layer model stays linear.
 * Passes edit with ir_replace_all_uses, node->dead + ir_graph_compact, and
 * ir_graph_move_tail to place nodes they appended. */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "ir.h"

/* ---- name map: open addressing, string keys in the arena ----
 * Each slot keeps its key's hash (32 bits, in what would be padding), so a
 * probe compares hashes before strings and growing never rehashes a key:
 * with 10^6 names in the table every string compare is a cache miss. */
typedef struct {
  const char *key;
  ir_value *value;  /* the value with this name, NULL if only reserved */
  int next_suffix;  /* next n to try for "key.n" */
  uint32_t hash;
} name_entry;

struct ir_name_set {
  name_entry *slots;
  size_t cap, count;
  int next_anon; /* next number for nameless values */
};

uint64_t ir_hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  h ^= h >> 32; /* without it, names that differ in a digit clustered into long probe runs */
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

static uint32_t hash_str(const char *s) { return (uint32_t)ir_hash_bytes(s, strlen(s)); }

/* The slot of key (hash h): its entry, or the empty slot where it goes. */
static name_entry *name_slot(struct ir_name_set *ns, const char *key, uint32_t h) {
  size_t mask = ns->cap - 1, i = h & mask;
  while (ns->slots[i].key && (ns->slots[i].hash != h || strcmp(ns->slots[i].key, key) != 0)) i = (i + 1) & mask;
  return &ns->slots[i];
}

static void name_grow(struct ir_name_set *ns) {
  name_entry *old = ns->slots;
  size_t old_cap = ns->cap;
  ns->cap = old_cap ? old_cap * 2 : 64;
  ns->slots = calloc(ns->cap, sizeof *ns->slots);
  if (!ns->slots) IR_DIE("out of memory (ns->slots)");
  for (size_t i = 0; i < old_cap; i++) /* keys are unique: the first empty slot */
    if (old[i].key) {
      size_t j = old[i].hash & (ns->cap - 1);
      while (ns->slots[j].key) j = (j + 1) & (ns->cap - 1);
      ns->slots[j] = old[i];
    }
  free(old);
}

/* The entry of key, inserted (reserved, no value) when it is new; *fresh
 * says which. */
static name_entry *name_insert(ir_graph *g, const char *key, bool *fresh) {
  struct ir_name_set *ns = g->names;
  if ((ns->count + 1) * 2 > ns->cap) name_grow(ns);
  uint32_t h = hash_str(key);
  name_entry *e = name_slot(ns, key, h);
  *fresh = !e->key;
  if (!e->key) {
    e->key = ir_arena_strdup(g->arena, key);
    e->value = NULL;
    e->next_suffix = 1;
    e->hash = h;
    ns->count++;
  }
  return e;
}

static name_entry *name_find(const ir_graph *g, const char *key) {
  if (!g->names->cap) return NULL;
  name_entry *e = name_slot(g->names, key, hash_str(key));
  return e->key ? e : NULL;
}

/* A fresh entry for hint (or "hint.N", or a number when there is no hint):
 * one probe per candidate, which is also the insertion. */
static name_entry *unique_entry(ir_graph *g, const char *hint) {
  char buf[256];
  bool fresh;
  if (!hint || !*hint) {
    for (;;) {
      snprintf(buf, sizeof buf, "%d", g->names->next_anon++);
      name_entry *e = name_insert(g, buf, &fresh);
      if (fresh) return e;
    }
  }
  name_entry *base = name_insert(g, hint, &fresh);
  if (fresh) return base;
  size_t hl = strlen(hint);
  char *cand = hl + 24 <= sizeof buf ? buf : malloc(hl + 24);
  if (!cand) IR_DIE("out of memory (cand)");
  for (;;) {
    int n = base->next_suffix++;
    snprintf(cand, hl + 24, "%s.%d", hint, n);
    name_entry *e = name_insert(g, cand, &fresh); /* may grow the table: base moves */
    if (fresh) {
      if (cand != buf) free(cand);
      return e;
    }
    base = name_find(g, hint);
  }
}

const char *ir_graph_unique_name(ir_graph *g, const char *hint) { return unique_entry(g, hint)->key; }

ir_value *ir_graph_find_value(const ir_graph *g, const char *name) {
  name_entry *e = name_find(g, name);
  return e ? e->value : NULL;
}

/* ---- arrays ---- */
#define PUSH(arr, n, cap, x)                                         \
  do {                                                               \
    if ((n) == (cap)) {                                              \
      (cap) = (cap) ? 2 * (cap) : 16;                                \
      (arr) = realloc((arr), (size_t)(cap) * sizeof *(arr));         \
      if (!(arr)) IR_DIE("out of memory ((arr))");                                           \
    }                                                                \
    (arr)[(n)++] = (x);                                              \
  } while (0)

ir_graph *ir_graph_new(const char *name, const char *source_file) {
  ir_graph *g = calloc(1, sizeof *g);
  if (!g) IR_DIE("out of memory (g)");
  g->arena = ir_arena_new();
  g->names = calloc(1, sizeof *g->names);
  if (!g->names) IR_DIE("out of memory (g->names)");
  g->name = ir_arena_strdup(g->arena, name ? name : "main");
  g->source_file = source_file ? ir_arena_strdup(g->arena, source_file) : NULL;
  g->mesh = ir_mesh_single();
  return g;
}

void ir_graph_free(ir_graph *g) {
  if (!g) return;
  free(g->values);
  free(g->nodes);
  free(g->inputs);
  free(g->params);
  free(g->outputs);
  free(g->names->slots);
  free(g->names);
  ir_arena_free(g->arena);
  free(g);
}

static ir_value *new_value(ir_graph *g, const char *name, ir_type type, ir_role role, ir_loc loc) {
  ir_value *v = ir_arena_alloc(g->arena, sizeof *v);
  v->id = g->n_values;
  name_entry *e = unique_entry(g, name);
  e->value = v;
  v->name = e->key;
  v->type = type;
  v->role = role;
  v->loc = loc;
  v->def_result = 0;
  PUSH(g->values, g->n_values, g->cap_values, v);
  return v;
}

int ir_graph_input_index(const ir_graph *g, const char *name) {
  for (int i = 0; name && i < g->n_inputs; i++)
    if (g->inputs[i]->name && strcmp(g->inputs[i]->name, name) == 0) return i;
  return -1;
}

int ir_graph_output_index(const ir_graph *g, const char *name) {
  for (int i = 0; name && i < g->n_outputs; i++)
    if (g->outputs[i].name && strcmp(g->outputs[i].name, name) == 0) return i;
  return -1;
}

ir_value *ir_graph_add_input(ir_graph *g, const char *name, ir_type type, ir_loc loc) {
  ir_value *v = new_value(g, name, type, IR_ROLE_INPUT, loc);
  PUSH(g->inputs, g->n_inputs, g->cap_inputs, v);
  return v;
}

ir_value *ir_graph_add_param(ir_graph *g, const char *name, ir_type type, ir_init init, ir_loc loc) {
  ir_value *v = new_value(g, name, type, IR_ROLE_PARAM, loc);
  v->init = init;
  PUSH(g->params, g->n_params, g->cap_params, v);
  return v;
}

void ir_graph_add_output(ir_graph *g, const char *name, ir_value *v) {
  ir_output o = {ir_arena_strdup(g->arena, name), v};
  PUSH(g->outputs, g->n_outputs, g->cap_outputs, o);
}

static ir_attr copy_attr(ir_graph *g, ir_op op, const ir_attr *a) {
  ir_attr c = *a;
  c.key = ir_arena_strdup(g->arena, a->key);
  if (a->kind == IR_ATTR_INTS) {
    int64_t *v = ir_arena_alloc(g->arena, (size_t)(a->n > 0 ? a->n : 1) * sizeof *v);
    if (a->n > 0) memcpy(v, a->ints, (size_t)a->n * sizeof *v);
    c.ints = v;
  }
  if (a->kind == IR_ATTR_STR) c.s = ir_arena_strdup(g->arena, a->s ? a->s : "");
  ir_attr_parse(op, &c, g->arena); /* expr / eq: the structure, in the graph */
  return c;
}

ir_node *ir_graph_add_node(ir_graph *g, ir_op op, ir_value *const *in, int n_in,
                           const ir_type *out_types, int n_out, const ir_attr *attrs,
                           int n_attrs, const char *const *out_names, ir_loc loc) {
  ir_node *n = ir_arena_alloc(g->arena, sizeof *n);
  n->id = g->n_nodes;
  n->op = op;
  n->loc = loc;
  n->layer = -1;
  n->n_in = n_in;
  n->in = ir_arena_alloc(g->arena, (size_t)(n_in > 0 ? n_in : 1) * sizeof *n->in);
  for (int i = 0; i < n_in; i++) n->in[i] = in[i];
  n->n_attrs = n_attrs;
  /* no attribute array for the many nodes without attributes (64 bytes each) */
  n->attrs = n_attrs > 0 ? ir_arena_alloc(g->arena, (size_t)n_attrs * sizeof *n->attrs) : NULL;
  for (int i = 0; i < n_attrs; i++) n->attrs[i] = copy_attr(g, op, &attrs[i]);
  n->n_out = n_out;
  n->out = ir_arena_alloc(g->arena, (size_t)(n_out > 0 ? n_out : 1) * sizeof *n->out);
  for (int i = 0; i < n_out; i++) {
    ir_value *v = new_value(g, out_names ? out_names[i] : NULL, out_types[i], IR_ROLE_ACT, loc);
    v->def = n;
    v->def_result = i;
    n->out[i] = v;
  }
  PUSH(g->nodes, g->n_nodes, g->cap_nodes, n);
  return n;
}

ir_node *ir_graph_build(ir_graph *g, ir_op op, ir_value *const *in, int n_in,
                        const ir_attr *attrs, int n_attrs, const ir_type *out_type,
                        const char *name_hint, ir_loc loc, char *err, size_t errlen) {
  enum { MAX_IN = 64 };
  ir_type in_types_small[MAX_IN], *in_types = in_types_small;
  if (n_in > MAX_IN) {
    in_types = malloc((size_t)n_in * sizeof *in_types);
    if (!in_types) IR_DIE("out of memory (in_types)");
  }
  for (int i = 0; i < n_in; i++) in_types[i] = in[i]->type;
  /* split may have many results: size the buffer by its sizes attribute */
  int cap_out = n_in + 16; /* grad has one result per operand */
  for (int i = 0; i < n_attrs; i++)
    if (attrs[i].kind == IR_ATTR_INTS && attrs[i].n + 1 > cap_out) cap_out = attrs[i].n + 1;
  ir_type *out = calloc((size_t)cap_out, sizeof *out);
  if (!out) IR_DIE("out of memory (out)");
  if (out_type) out[0] = *out_type;
  int n_out = out_type ? 1 : 0;
  ir_node *node = NULL;
  /* an expr or eq is parsed here, once: typed, then copied with the node */
  ir_attr *parsed = NULL;
  for (int i = 0; i < n_attrs && !parsed; i++)
    if (attrs[i].kind == IR_ATTR_STR && !attrs[i].expr && !attrs[i].einsum) {
      ir_attr probe = attrs[i];
      ir_attr_parse(op, &probe, g->arena);
      if (probe.expr || probe.einsum) {
        if (!(parsed = malloc((size_t)n_attrs * sizeof *parsed))) IR_DIE("out of memory ((parsed = malloc((size_t)n_attrs * sizeof *parsed)))");
        memcpy(parsed, attrs, (size_t)n_attrs * sizeof *parsed);
        parsed[i] = probe;
      }
    }
  if (parsed) attrs = parsed;
  if (ir_infer(op, in_types, n_in, attrs, n_attrs, out, &n_out, err, errlen) == 0) {
    const char **names = calloc((size_t)(n_out > 0 ? n_out : 1), sizeof *names);
    if (!names) IR_DIE("out of memory (names)");
    char buf[256];
    for (int i = 0; i < n_out; i++) {
      if (!name_hint) continue;
      if (n_out == 1) names[i] = name_hint;
      else {
        snprintf(buf, sizeof buf, "%s.%d", name_hint, i);
        names[i] = ir_arena_strdup(g->arena, buf);
      }
    }
    node = ir_graph_add_node(g, op, in, n_in, out, n_out, attrs, n_attrs, names, loc);
    free(names);
  }
  free(parsed);
  free(out);
  if (in_types != in_types_small) free(in_types);
  return node;
}

ir_value *ir_graph_build1(ir_graph *g, ir_op op, ir_value *const *in, int n_in,
                          const ir_attr *attrs, int n_attrs, const char *name_hint, ir_loc loc) {
  char err[512];
  ir_node *n = ir_graph_build(g, op, in, n_in, attrs, n_attrs, NULL, name_hint, loc, err, sizeof err);
  if (!n) {
    fprintf(stderr, "tgc: internal error: building %s: %s\n", ir_op_name(op), err);
    abort();
  }
  return n->out[0];
}

void ir_replace_all_uses(ir_graph *g, ir_value *old_v, ir_value *new_v) {
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = g->nodes[i];
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j] == old_v) n->in[j] = new_v;
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i].value == old_v) g->outputs[i].value = new_v;
}

void ir_replace_uses_many(ir_graph *g, ir_value *const *olds, ir_value *const *news, int n) {
  if (n <= 0) return;
  int bound = ir_graph_id_bound(g);
  ir_value **to = calloc((size_t)bound + 1, sizeof *to);
  if (!to) IR_DIE("out of memory (to)");
  for (int i = 0; i < n; i++)
    if (olds[i]->id >= 0 && olds[i]->id < bound && olds[i] != news[i]) to[olds[i]->id] = news[i];
  /* follows chains (a -> b, b -> c); a cycle would be a pass bug */
#define FINAL(v)                                                                        \
  do {                                                                                  \
    for (int hops = 0; (v)->id >= 0 && (v)->id < bound && to[(v)->id]; hops++) {        \
      if (hops > n) abort();                                                            \
      (v) = to[(v)->id];                                                                \
    }                                                                                   \
  } while (0)
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *nd = g->nodes[i];
    for (int j = 0; j < nd->n_in; j++) FINAL(nd->in[j]);
  }
  for (int i = 0; i < g->n_outputs; i++) FINAL(g->outputs[i].value);
#undef FINAL
  free(to);
}

int ir_count_uses(const ir_graph *g, const ir_value *v) {
  int uses = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    for (int j = 0; j < n->n_in; j++) uses += n->in[j] == v;
  }
  for (int i = 0; i < g->n_outputs; i++) uses += g->outputs[i].value == v;
  return uses;
}

int ir_graph_readers(const ir_graph *g, const ir_value *v, ir_node **out, int max) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *m = g->nodes[i];
    if (m->dead) continue;
    for (int k = 0; k < m->n_in; k++)
      if (m->in[k] == v) {
        if (n == max) return -1;
        out[n++] = m;
        break;
      }
  }
  return n;
}

int ir_graph_id_bound(const ir_graph *g) {
  int bound = 0;
  for (int i = 0; i < g->n_values; i++)
    if (g->values[i] && g->values[i]->id >= bound) bound = g->values[i]->id + 1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int j = 0; j < g->nodes[i]->n_out; j++)
      if (g->nodes[i]->out[j]->id >= bound) bound = g->nodes[i]->out[j]->id + 1;
  return bound;
}

bool ir_graph_is_output(const ir_graph *g, const ir_value *v) {
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i].value == v) return true;
  return false;
}

int *ir_use_counts(const ir_graph *g, int *bound) {
  int max_id = ir_graph_id_bound(g);
  int *uses = calloc((size_t)(max_id > 0 ? max_id : 1), sizeof *uses);
  if (!uses) return NULL;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j]->id >= 0 && n->in[j]->id < max_id) uses[n->in[j]->id]++;
  }
  for (int i = 0; i < g->n_outputs; i++) {
    const ir_value *v = g->outputs[i].value;
    if (v->id >= 0 && v->id < max_id) uses[v->id]++;
  }
  *bound = max_id;
  return uses;
}

void ir_graph_compact(ir_graph *g) {
  int k = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i]->dead) g->nodes[k++] = g->nodes[i];
  g->n_nodes = k;
  for (int i = 0; i < k; i++) g->nodes[i]->id = i;
  /* a declaration stays only while it is still listed (one mark per value
   * id: a scan of the lists per value was quadratic in the params) */
  bool *listed = calloc((size_t)g->n_values + 1, sizeof *listed);
  if (!listed) IR_DIE("out of memory (listed)");
  for (int j = 0; j < g->n_inputs + g->n_params; j++) {
    const ir_value *v = j < g->n_inputs ? g->inputs[j] : g->params[j - g->n_inputs];
    if (v->id >= 0 && v->id < g->n_values && g->values[v->id] == v) listed[v->id] = true;
  }
  k = 0;
  for (int i = 0; i < g->n_values; i++) {
    ir_value *v = g->values[i];
    bool keep = v->def ? !v->def->dead : listed[i];
    if (keep) {
      v->id = k;
      g->values[k++] = v;
    } else {
      name_entry *e = name_find(g, v->name);
      if (e && e->value == v) e->value = NULL; /* name stays reserved */
    }
  }
  g->n_values = k;
  free(listed);
}

void ir_graph_move_tail(ir_graph *g, int count, int pos) {
  if (count <= 0 || pos >= g->n_nodes - count) return;
  ir_node **tmp = malloc((size_t)count * sizeof *tmp);
  if (!tmp) IR_DIE("out of memory (tmp)");
  memcpy(tmp, g->nodes + g->n_nodes - count, (size_t)count * sizeof *tmp);
  memmove(g->nodes + pos + count, g->nodes + pos, (size_t)(g->n_nodes - count - pos) * sizeof *tmp);
  memcpy(g->nodes + pos, tmp, (size_t)count * sizeof *tmp);
  free(tmp);
  for (int i = pos; i < g->n_nodes; i++) g->nodes[i]->id = i;
}

void ir_graph_take_place(ir_graph *g, ir_node *n, ir_node *dead) {
  int a = n->id, b = dead->id;
  if (a < 0 || b < 0 || a >= g->n_nodes || b >= g->n_nodes || g->nodes[a] != n || g->nodes[b] != dead || !dead->dead)
    abort(); /* a pass bug: not nodes of g, or the place is not free */
  g->nodes[b] = n, n->id = b;
  g->nodes[a] = dead, dead->id = a;
}

/* ---- types, roles, attributes ---- */
int64_t ir_type_numel(const ir_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

bool ir_type_equal(const ir_type *a, const ir_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

char *ir_type_str(const ir_type *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", ir_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)t->dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

static const char *const role_names[IR_NUM_ROLES] = {"input", "param", "const", "act", "grad", "opt_state", "recompute"};
const char *ir_role_name(ir_role r) { return (unsigned)r < IR_NUM_ROLES ? role_names[r] : "?"; }
int ir_role_from_name(const char *name) {
  for (int i = 0; i < IR_NUM_ROLES; i++)
    if (strcmp(role_names[i], name) == 0) return i;
  return -1;
}


ir_attr ir_attr_int(const char *key, int64_t v) { return (ir_attr){.key = key, .kind = IR_ATTR_INT, .i = v}; }
ir_attr ir_attr_float(const char *key, double v) { return (ir_attr){.key = key, .kind = IR_ATTR_FLOAT, .f = v}; }
ir_attr ir_attr_ints(const char *key, const int64_t *v, int n) {
  return (ir_attr){.key = key, .kind = IR_ATTR_INTS, .ints = v, .n = n};
}
ir_attr ir_attr_str(const char *key, const char *s) { return (ir_attr){.key = key, .kind = IR_ATTR_STR, .s = s}; }
ir_attr ir_attr_dtype(const char *key, ir_dtype t) { return (ir_attr){.key = key, .kind = IR_ATTR_DTYPE, .i = t}; }
ir_attr ir_attr_mesh_axis(const char *key, ir_axis a) { return (ir_attr){.key = key, .kind = IR_ATTR_MESH_AXIS, .i = a}; }
ir_attr ir_attr_expr(const char *key, const ir_expr *e, const char *text) {
  return (ir_attr){.key = key, .kind = IR_ATTR_STR, .s = text, .expr = e};
}

bool ir_fused_counts(const ir_node *n) { return n && n->op == IR_OP_FUSED && ir_node_attr(n, "nonfinite") != NULL; }
int ir_fused_results(const ir_node *n) { return n->n_out - ir_fused_counts(n); }

bool ir_node_may_reuse(const ir_node *n, int r, int i) {
  if (!n || r < 0 || r >= n->n_out || i < 0 || i >= n->n_in || !n->in[i] || !n->out[r]) return false;
  if (ir_op_has(n->op, IR_OPF_VIEW)) return n->n_out == 1 && i == 0;
  /* an all-reduce in place: NCCL's in-place form, the rings' too */
  if (n->op == IR_OP_ALL_REDUCE) return n->n_out == 1 && ir_type_equal(&n->in[i]->type, &n->out[r]->type);
  if (!ir_op_has(n->op, IR_OPF_INPLACE)) return false;
  if (n->n_out != 1 && n->op != IR_OP_FUSED) return false; /* several results: fused computes a block before storing */
  if (r == n->n_out - 1 && ir_fused_counts(n)) return false; /* a count, added to */
  return ir_type_equal(&n->in[i]->type, &n->out[r]->type);
}

const ir_attr *ir_node_attr(const ir_node *n, const char *key) {
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].key, key) == 0) return &n->attrs[i];
  return NULL;
}

int64_t ir_node_attr_int(const ir_node *n, const char *key, int64_t dflt) {
  const ir_attr *a = ir_node_attr(n, key);
  return a && (a->kind == IR_ATTR_INT || a->kind == IR_ATTR_DTYPE) ? a->i : dflt;
}

int ir_node_mesh_axis(const ir_node *n) {
  const ir_attr *a = ir_node_attr(n, "axis");
  return a && a->kind == IR_ATTR_MESH_AXIS && a->i >= 0 && a->i < IR_NUM_AXES ? (int)a->i : -1;
}

double ir_node_attr_float(const ir_node *n, const char *key, double dflt) {
  const ir_attr *a = ir_node_attr(n, key);
  if (!a) return dflt;
  if (a->kind == IR_ATTR_FLOAT) return a->f;
  if (a->kind == IR_ATTR_INT) return (double)a->i;
  return dflt;
}

bool ir_transpose_swaps_last2(const ir_node *n) {
  if (!n || n->op != IR_OP_TRANSPOSE) return false;
  const ir_attr *a = ir_node_attr(n, "perm");
  if (!a || a->kind != IR_ATTR_INTS || a->n < 2) return false;
  int r = a->n;
  for (int i = 0; i < r - 2; i++)
    if (a->ints[i] != i) return false;
  return a->ints[r - 2] == r - 1 && a->ints[r - 1] == r - 2;
}
