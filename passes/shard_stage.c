/* passes/shard_stage.c — pipeline parallelism: a training program (already
 * partitioned over dp and tp) cut into the stage one rank runs.
 *
 * Stages. The layers (`repeat`, ir_node.layer) are cut into p contiguous
 * groups: layer l runs on stage l p / L, or as --stage-boundaries says
 * (pass_training.stage_boundaries). With v chunks per rank (interleaved
 * 1F1B) they are p v virtual stages, k on rank k mod p: each is cut as a
 * stage below, into its own fwd and bwd over the rank's parameters, and
 * the rank has one update (its parameters are those of its chunks); the
 * messages are between ranks (peer: the virtual stage mod p), and only
 * between neighbouring virtual stages. A node without a layer runs where
 * its operands are made (the loss after the last layer, the embedding
 * gradients after the first), or where its results are read when no
 * operand is made by a node (the embeddings, constants). An add whose
 * operands come from several stages (the gradient of a weight two stages
 * use, GPT-2's tied embedding) is a partial sum: each of those stages adds
 * what it has, and the update sums the parts.
 *
 * The step. Each stage's graph holds its nodes in the original order; a
 * value made from constants alone (const, iota, a rotary table made of
 * them) is made by every stage that reads it; any other
 * value made on stage a and read on stage b is sent by a right after it is
 * made and received by b at the same place of the order (so the messages
 * between two stages are received in the order they are sent, and since
 * sends never wait, any order the whole program allows cannot deadlock).
 * The stage graph is then split in two for the schedule: fwd (its forward
 * nodes: the sends of activations, the loss and its sums) and bwd (the
 * rest: the gradients), with the values bwd reads from fwd handed over.
 * The stage's parameters are those its nodes read; a stage that does not
 * compute the loss passes its loss and correct-prediction sums through.
 *
 * The update. Each stage updates its own parameters (one two stages hold,
 * on both, from their summed gradient parts, exchanged by send and recv and
 * added in stage order, so both hold the same bits). The sums over every
 * parameter (the clipping norm, the Inf / NaN count) and the loss (made on
 * the last stage) become partial sums over pp, each stage contributing its
 * own parameters once, all-reduced where a non-linear op or an output needs
 * them. */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "shard_impl.h"

#define MIXED (-2)
#define UNKNOWN (-1)

typedef uint64_t smask; /* stages, one bit each (p <= 64) */

static ir_value *build(ir_graph *g, ir_op op, ir_value *const *in, int n_in, const ir_attr *a, int na,
                       const ir_type *t, const char *name, ir_loc loc, int layer, ir_role role) {
  char err[512];
  ir_node *n = ir_graph_build(g, op, in, n_in, a, na, t, name, loc, err, sizeof err);
  if (!n) {
    fprintf(stderr, "tgc: internal error: pipeline cut: %s: %s\n", ir_op_name(op), err);
    abort();
  }
  n->layer = layer;
  for (int j = 0; j < n->n_out; j++) n->out[j]->role = role;
  return n->n_out ? n->out[0] : NULL;
}

static void send_to(ir_graph *g, ir_value *x, int p, int peer, ir_loc loc, int layer) {
  ir_attr a[3] = {ir_attr_mesh_axis("axis", IR_AXIS_PP), ir_attr_int("n", p), ir_attr_int("peer", peer)};
  build(g, IR_OP_SEND, &x, 1, a, 3, NULL, NULL, loc, layer, IR_ROLE_ACT);
}

static ir_value *recv_from(ir_graph *g, const ir_value *like, int p, int peer, ir_loc loc, int layer) {
  ir_attr a[3] = {ir_attr_mesh_axis("axis", IR_AXIS_PP), ir_attr_int("n", p), ir_attr_int("peer", peer)};
  ir_value *v = build(g, IR_OP_RECV, NULL, 0, a, 3, &like->type, like->name, loc, layer, like->role);
  v->shard = like->shard;
  return v;
}

static ir_value *zero_like(ir_graph *g, const ir_value *like, ir_loc loc) {
  ir_attr a = ir_attr_float("value", 0.0);
  ir_value *v = build(g, IR_OP_CONST, NULL, 0, &a, 1, &like->type, NULL, loc, -1, like->role);
  v->shard = like->shard;
  return v;
}

static ir_value *add2(ir_graph *g, ir_value *a, ir_value *b, ir_loc loc, int layer, ir_role role) {
  ir_value *in[2] = {a, b};
  ir_value *v = build(g, IR_OP_ADD, in, 2, NULL, 0, NULL, NULL, loc, layer, role);
  v->shard = a->shard;
  return v;
}

static ir_value *all_reduce_pp(ir_graph *g, ir_value *x, int p, ir_loc loc) {
  ir_attr a[2] = {ir_attr_mesh_axis("axis", IR_AXIS_PP), ir_attr_int("n", p)};
  char name[400];
  snprintf(name, sizeof name, "%.380s.arpp", x->name);
  ir_value *v = build(g, IR_OP_ALL_REDUCE, &x, 1, a, 2, NULL, name, loc, -1, x->role);
  v->shard = x->shard;
  return v;
}

/* l with its file in g's arena: a location's file points into its graph's
 * arena, and the graphs cut here are freed once the stages are made. */
static ir_loc own_loc(const ir_graph *g, ir_loc l) {
  if (!l.file || l.file == g->source_file) return l;
  l.file = g->source_file && strcmp(l.file, g->source_file) == 0 ? g->source_file : ir_arena_strdup(g->arena, l.file);
  return l;
}

/* A copy of node n in g on operands in[] (attributes and result types as they are). */
static ir_node *copy_node(ir_graph *g, const ir_node *n, ir_value *const *in) {
  ir_type t[64];
  const char *names[64];
  if (n->n_out > 64) abort();
  for (int j = 0; j < n->n_out; j++) t[j] = n->out[j]->type, names[j] = n->out[j]->name;
  static ir_value *const none[1];
  ir_node *m = ir_graph_add_node(g, n->op, n->n_in ? in : none, n->n_in, t, n->n_out, n->attrs, n->n_attrs, names,
                                 own_loc(g, n->loc));
  m->layer = n->layer;
  for (int j = 0; j < n->n_out; j++) m->out[j]->role = n->out[j]->role, m->out[j]->shard = n->out[j]->shard;
  return m;
}

static ir_loc reloc(const ir_graph *from, const ir_graph *to, ir_loc l) {
  if (l.file && l.file == from->source_file) l.file = to->source_file;
  return own_loc(to, l);
}

/* ---- which stage runs each node of the step ---- */

typedef struct {
  const ir_graph *g;
  int p, s, nv;    /* p (virtual) stages, s the one cut; nv: g's value id bound */
  int ranks;       /* the pp ranks: virtual stage k runs on rank k % ranks (p = ranks x chunks) */
  const int *bounds; /* NULL, or p - 1 layer indices: the first layer of every stage after the first */
  int n_bounds;
  int *stage;      /* per node: a stage, MIXED (a partial sum over several) or UNKNOWN */
  smask *made;     /* per value: the stages that make it (one, or several for a partial sum); 0: an input or parameter */
  smask *read;     /* per value: the stages that read it */
  smask *mixed_of; /* per node: the stages of a partial sum */
  smask *table;    /* per value made from constants alone (a rotary table): the stages that make it (every reader) */
} stages;

static void stages_free(stages *c) {
  free(c->stage);
  free(c->made);
  free(c->read);
  free(c->mixed_of);
  free(c->table);
}

/* n reads the result of a partial sum (a node placed on several stages) */
static bool reads_part(const stages *c, const ir_node *n) {
  for (int k = 0; k < n->n_in; k++) {
    const ir_node *def = n->in[k]->def;
    if (def && c->stage[def->id] == MIXED) return true;
  }
  return false;
}

/* An op of one operand that is linear in it (a part in, a part out): the
 * reductions and layout changes the dp / tp partition adds to a gradient. */
static bool linear_in_part(const ir_node *n) {
  if (n->n_in != 1) return false;
  switch (n->op) {
  case IR_OP_REDUCE_SCATTER: case IR_OP_ALL_GATHER: case IR_OP_MESH_SLICE: case IR_OP_RESHAPE:
  case IR_OP_TRANSPOSE: case IR_OP_NEG: return true;
  case IR_OP_ALL_REDUCE: {
    const ir_attr *r = ir_node_attr(n, "reduce");
    return !r || strcmp(r->s, "sum") == 0;
  }
  case IR_OP_CAST: return ir_dtype_is_float(n->out[0]->type.dtype);
  default: return false;
  }
}

/* Whether n may be a table's node: not a communication or an effect, but
 * mesh_slice (a rank's block of a table, moving nothing: dropout's
 * positions under dp or tp, docs/ir.md). */
static bool made_of_constants(const ir_node *n) {
  return n->op == IR_OP_MESH_SLICE || !(ir_op_flags(n->op) & (IR_OPF_COMM | IR_OPF_EFFECT));
}

/* A value made from constants alone (iota, const, and what is computed from
 * them alone: the positions, a rotary table) is the same in every
 * micro-batch: every stage that reads it makes it, with what it is made
 * of, rather than receiving it per micro-batch (and its bwd making it again
 * rather than keeping it, see remade). */
static void tables(stages *c) {
  const ir_graph *g = c->g;
  bool *made_of_consts = calloc((size_t)c->nv, sizeof *made_of_consts);
  c->table = calloc((size_t)c->nv, sizeof *c->table);
  if (!made_of_consts || !c->table) IR_DIE("out of memory (made_of_consts || !c->table)");
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    bool t = !n->dead && n->n_out > 0 && made_of_constants(n);
    for (int k = 0; k < n->n_in && t; k++) t = made_of_consts[n->in[k]->id];
    for (int j = 0; j < n->n_out; j++) made_of_consts[n->out[j]->id] = t;
  }
  for (int i = g->n_nodes - 1; i >= 0; i--) { /* its readers' stages, through the tables made of it */
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    smask at = c->stage[i] == MIXED ? c->mixed_of[i] : 1ull << c->stage[i];
    if (n->n_out > 0 && made_of_consts[n->out[0]->id]) {
      at = 0;
      for (int j = 0; j < n->n_out; j++) at |= c->table[n->out[j]->id];
      if (!at) at = 1ull << c->stage[i]; /* read by no node (an output): where placed */
      for (int j = 0; j < n->n_out; j++) c->table[n->out[j]->id] = at;
    }
    for (int k = 0; k < n->n_in; k++)
      if (made_of_consts[n->in[k]->id]) c->table[n->in[k]->id] |= at;
  }
  free(made_of_consts);
}

/* "pp = 2" or "pp = 2 x 2 chunks" */
static const char *stage_count(const stages *c, char *buf, size_t len) {
  if (c->p == c->ranks) snprintf(buf, len, "pp = %d", c->p);
  else snprintf(buf, len, "pp = %d x %d chunks", c->ranks, c->p / c->ranks);
  return buf;
}

/* --stage-boundaries against the model's layers: p - 1 of them, each
 * stage non-empty (0 < b[0] < b[1] < ... < layers). */
static int check_bounds(const stages *c, int layers, ir_diag *d) {
  char what[64];
  if (c->n_bounds != c->p - 1) {
    ir_error_plain(d, "--stage-boundaries: %s makes %d stages, so %d boundaries (the first layer of every stage "
                   "after the first) are expected, not %d", stage_count(c, what, sizeof what), c->p, c->p - 1,
                   c->n_bounds);
    return -1;
  }
  for (int i = 0; i < c->n_bounds; i++) {
    int b = c->bounds[i];
    if (b < 1 || b >= layers) {
      ir_error_plain(d, "--stage-boundaries: layer %d is out of range: a boundary is a layer from 1 to %d (the "
                     "model has %d)", b, layers - 1, layers);
      return -1;
    }
    if (i > 0 && b <= c->bounds[i - 1]) {
      if (b == c->bounds[i - 1])
        ir_error_plain(d, "--stage-boundaries: layer %d twice: stage %d would hold no layer", b, i);
      else
        ir_error_plain(d, "--stage-boundaries: %d after %d: the boundaries must be ascending", b, c->bounds[i - 1]);
      return -1;
    }
  }
  return 0;
}

/* The (virtual) stage of layer l of `layers`: the boundaries', else the even split l p / layers. */
static int stage_of_layer(const stages *c, int l, int layers) {
  if (!c->bounds) return (int)((int64_t)l * c->p / layers);
  int k = 0;
  while (k < c->n_bounds && l >= c->bounds[k]) k++;
  return k;
}

static int assign(stages *c, ir_diag *d) {
  const ir_graph *g = c->g;
  int layers = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i]->dead && g->nodes[i]->layer + 1 > layers) layers = g->nodes[i]->layer + 1;
  if (c->bounds && layers >= c->p && check_bounds(c, layers, d) != 0) return -1;
  if (layers < c->p) {
    ir_loc at = g->n_params ? g->params[0]->loc : (ir_loc){0};
    for (int i = 0; i < g->n_nodes; i++)
      if (!g->nodes[i]->dead && g->nodes[i]->layer >= 0) {
        at = g->nodes[i]->loc; /* the first layer's first line */
        break;
      }
    char what[64];
    ir_error(d, at, "pipeline parallelism (%s) cuts the layers (repeat) into stages, but the model has %d layer%s",
             stage_count(c, what, sizeof what), layers, layers == 1 ? "" : "s");
    return -1;
  }
  c->stage = malloc((size_t)(g->n_nodes + 1) * sizeof *c->stage);
  c->mixed_of = calloc((size_t)g->n_nodes + 1, sizeof *c->mixed_of);
  c->made = calloc((size_t)c->nv, sizeof *c->made);
  c->read = calloc((size_t)c->nv, sizeof *c->read);
  bool *constant = calloc((size_t)c->nv, sizeof *constant); /* made from constants alone (a table: see tables) */
  if (!c->stage || !c->mixed_of || !c->made || !c->read || !constant) IR_DIE("out of memory (c->stage || !c->mixed_of || !c->made || !c->read || !constant)");
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    bool t = !n->dead && n->n_out > 0 && made_of_constants(n);
    for (int k = 0; k < n->n_in && t; k++) t = constant[n->in[k]->id];
    for (int j = 0; j < n->n_out; j++) constant[n->out[j]->id] = t;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    int st = UNKNOWN;
    smask from = 0;
    /* a table is made where it is read: it does not place its readers (dropout's positions, shared by layers) */
    for (int k = 0; k < n->n_in; k++) from |= constant[n->in[k]->id] ? 0 : c->made[n->in[k]->id];
    if (n->dead) st = UNKNOWN;
    else if (n->layer >= 0) st = stage_of_layer(c, n->layer, layers);
    else if (from && !(from & (from - 1))) st = __builtin_ctzll(from);
    else if (from && n->op == IR_OP_ADD) st = MIXED, c->mixed_of[i] = from;
    else if (from && reads_part(c, n) && linear_in_part(n)) st = MIXED, c->mixed_of[i] = from;
    else if (from && reads_part(c, n)) {
      ir_error(d, n->loc, "pipeline parallelism: %%%s ('%s') reads a sum whose parts are made on several stages; only "
               "sums of gradients can be", n->n_out ? n->out[0]->name : "?", ir_op_name(n->op));
      return -1;
    }
    else if (from) st = 63 - __builtin_clzll(from); /* the last of them; the others send */
    c->stage[i] = st;
    for (int j = 0; j < n->n_out && st != UNKNOWN; j++) c->made[n->out[j]->id] = st == MIXED ? from : 1ull << st;
  }
  /* nodes no operand placed (embeddings, constants): where their results are read */
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    const ir_node *n = g->nodes[i];
    if (n->dead || c->stage[i] != UNKNOWN) continue;
    int st = UNKNOWN;
    for (int k = i + 1; k < g->n_nodes && st == UNKNOWN; k++) {
      const ir_node *u = g->nodes[k];
      if (u->dead || c->stage[k] == UNKNOWN) continue;
      for (int a = 0; a < u->n_in && st == UNKNOWN; a++)
        for (int j = 0; j < n->n_out; j++)
          if (u->in[a] == n->out[j]) st = c->stage[k] == MIXED ? __builtin_ctzll(c->mixed_of[k]) : c->stage[k];
    }
    c->stage[i] = st == UNKNOWN ? 0 : st;
    for (int j = 0; j < n->n_out; j++) c->made[n->out[j]->id] = 1ull << c->stage[i];
  }
  /* the placement above may leave an unplaced node's readers behind it: place again in order */
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    int st = c->stage[i];
    for (int k = 0; k < n->n_in; k++)
      if (st != MIXED) c->read[n->in[k]->id] |= 1ull << st;
      else c->read[n->in[k]->id] |= c->made[n->in[k]->id] & c->mixed_of[i];
  }
  for (int i = 0; i < g->n_outputs; i++) c->read[g->outputs[i].value->id] |= 0; /* outputs: where made */
  free(constant);
  tables(c);
  /* With chunks, the messages between two ranks come from several stages'
   * programs, run in the schedule's order: received in the order they are
   * sent only between neighbouring stages (each chunk's forwards and
   * backwards run in micro-batch order; tests/unit/test_pipe_order.c). */
  for (int i = 0; c->p > c->ranks && i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || c->stage[i] < 0) continue;
    for (int j = 0; j < n->n_out; j++) {
      if (c->table[n->out[j]->id]) continue;
      smask to = c->read[n->out[j]->id] & ~(1ull << c->stage[i]);
      for (int u = 0; u < c->p; u++)
        if (((to >> u) & 1) && abs(u - c->stage[i]) != 1) {
          ir_error(d, n->loc, "interleaved pipeline: %%%s is made on virtual stage %d and read on virtual stage %d; "
                   "only neighbouring stages exchange values", n->out[j]->name, c->stage[i], u);
          return -1;
        }
    }
  }
  return 0;
}

/* ---- the stage's step graph ---- */

/* Stage c->s's nodes of c->g into g (map: c->g's values to g's, its
 * inputs and parameters already there), with the messages between stages. */
static void cut_nodes(const stages *c, ir_graph *g, ir_value **map) {
  const ir_graph *S = c->g;
  int s = c->s, p = c->p, ranks = c->ranks;
  for (int i = 0; i < S->n_nodes; i++) {
    const ir_node *n = S->nodes[i];
    if (n->dead) continue;
    int st = c->stage[i];
    ir_loc loc = reloc(S, g, n->loc);
    smask table = n->n_out ? c->table[n->out[0]->id] : 0;
    if (table) { /* made from constants alone: by every stage that reads it, never sent */
      if (!((table >> s) & 1)) continue;
      ir_value *in[64];
      if (n->n_in > 64) abort();
      for (int k = 0; k < n->n_in; k++) in[k] = map[n->in[k]->id];
      ir_node *m = copy_node(g, n, in);
      for (int j = 0; j < n->n_out; j++) map[n->out[j]->id] = m->out[j];
      continue;
    }
    if (st == MIXED) {
      if (!((c->mixed_of[i] >> s) & 1)) continue;
      if (n->op != IR_OP_ADD) { /* linear in its one operand: this stage's part through it */
        ir_value *x = map[n->in[0]->id];
        map[n->out[0]->id] = x ? copy_node(g, n, &x)->out[0] : NULL;
        continue;
      }
      ir_value *sum = NULL; /* what this stage has of the partial sum */
      for (int k = 0; k < n->n_in; k++) {
        ir_value *x = (c->made[n->in[k]->id] >> s) & 1 ? map[n->in[k]->id] : NULL;
        if (!x && !c->made[n->in[k]->id]) x = map[n->in[k]->id]; /* an input: the sum of micro-batches (acc) */
        if (x) sum = sum ? add2(g, sum, x, loc, n->layer, n->out[0]->role) : x;
      }
      map[n->out[0]->id] = sum;
      continue;
    }
    if (st != s) { /* made elsewhere: received here, at this place of the order, if read here */
      for (int j = 0; j < n->n_out; j++)
        if ((c->read[n->out[j]->id] >> s) & 1)
          map[n->out[j]->id] = recv_from(g, n->out[j], ranks, st % ranks, loc, n->layer);
      continue;
    }
    ir_value *in[64];
    if (n->n_in > 64) abort();
    for (int k = 0; k < n->n_in; k++) {
      in[k] = map[n->in[k]->id];
      if (!in[k]) {
        fprintf(stderr, "tgc: internal error: pipeline cut: %%%s is not on stage %d\n", n->in[k]->name, s);
        abort();
      }
    }
    ir_node *m = copy_node(g, n, in);
    for (int j = 0; j < n->n_out; j++) {
      map[n->out[j]->id] = m->out[j];
      smask to = c->read[n->out[j]->id] & ~(1ull << s);
      for (int u = 0; u < p; u++)
        if ((to >> u) & 1) send_to(g, m->out[j], ranks, u % ranks, loc, n->layer);
    }
  }
}

typedef struct {
  ir_graph *g;
  int *param_of;   /* stage param j -> global param index */
  int n_params;
  int acc0, loss_sum_input, correct_sum_input, loss_scale_input, dropout_key_input;
  int *grad_output; /* stage param j -> output */
  int loss_sum_output, correct_sum_output;
} stage_step;

/* rank_uses: the parameters of the rank's stages (every chunk's graphs
 * take them all, so the trainer binds one list); a gradient this stage
 * makes no part of is no output (grad_output -1). */
static int cut_step(const pass_training *t, stages *c, stage_step *o, const bool *rank_uses) {
  const ir_graph *S = c->g;
  int s = c->s;
  ir_graph *g = ir_graph_new(S->name, S->source_file);
  g->mesh = S->mesh;
  g->mesh.stage = s;
  ir_value **map = calloc((size_t)c->nv, sizeof *map);
  bool *uses = calloc((size_t)S->n_params + 1, sizeof *uses);
  if (!map || !uses) IR_DIE("out of memory (map || !uses)");
  /* the stage's parameters: those its nodes read */
  for (int i = 0; i < S->n_nodes; i++) {
    const ir_node *n = S->nodes[i];
    bool here = !n->dead && (c->stage[i] == s || (c->stage[i] == MIXED && ((c->mixed_of[i] >> s) & 1)));
    for (int k = 0; here && k < n->n_in; k++)
      for (int q = 0; q < S->n_params; q++)
        if (n->in[k] == S->params[q]) uses[q] = true;
  }
  /* inputs: the data, the sums of this stage's parameters, the scalars */
  o->param_of = calloc((size_t)S->n_params + 1, sizeof *o->param_of);
  o->grad_output = calloc((size_t)S->n_params + 1, sizeof *o->grad_output);
  if (!o->param_of || !o->grad_output) IR_DIE("out of memory (o->param_of || !o->grad_output)");
  o->acc0 = o->loss_sum_input = o->correct_sum_input = o->loss_scale_input = o->dropout_key_input = -1;
  for (int i = 0; i < S->n_inputs; i++) {
    const ir_value *v = S->inputs[i];
    int q = t->acc_input0 >= 0 && i >= t->acc_input0 && i < t->acc_input0 + t->n_params ? i - t->acc_input0 : -1;
    if (q >= 0 && !rank_uses[q]) continue;
    if (q >= 0 && o->acc0 < 0) o->acc0 = g->n_inputs;
    if (i == t->loss_sum_input) o->loss_sum_input = g->n_inputs;
    if (i == t->correct_sum_input) o->correct_sum_input = g->n_inputs;
    if (i == t->loss_scale_input) o->loss_scale_input = g->n_inputs;
    if (i == t->dropout_key_input) o->dropout_key_input = g->n_inputs;
    ir_value *x = ir_graph_add_input(g, v->name, v->type, reloc(S, g, v->loc));
    x->role = v->role, x->shard = v->shard;
    map[v->id] = x;
  }
  for (int q = 0; q < S->n_params; q++) {
    if (!rank_uses[q]) continue;
    const ir_value *v = S->params[q];
    ir_value *x = ir_graph_add_param(g, v->name, v->type, v->init, reloc(S, g, v->loc));
    x->role = v->role, x->shard = v->shard;
    map[v->id] = x;
    o->param_of[o->n_params++] = q;
  }
  cut_nodes(c, g, map);
  /* outputs: the gradients of this stage's parameters (parts of a partial
   * sum), then the sums (passed through where the loss is not made) */
  for (int j = 0; j < o->n_params; j++) {
    int q = o->param_of[j];
    const ir_output *src = &S->outputs[t->grad_output[q]];
    ir_value *v = map[src->value->id];
    const ir_node *def = src->value->def;
    if (!v && def && def->op == IR_OP_CONST && uses[q]) v = copy_node(g, def, NULL)->out[0]; /* a constant gradient */
    if (!v && !uses[q]) { /* another chunk's parameter */
      o->grad_output[j] = -1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "tgc: internal error: pipeline cut: the gradient of '%s' is not made on stage %d, which holds it\n",
              S->params[q]->name, s);
      abort();
    }
    o->grad_output[j] = g->n_outputs;
    ir_graph_add_output(g, src->name, v);
  }
  for (int k = 0; k < 2; k++) {
    int out = k ? t->correct_sum_output : t->loss_sum_output, in = k ? o->correct_sum_input : o->loss_sum_input;
    if (out < 0) continue;
    const ir_output *src = &S->outputs[out];
    ir_value *v = map[src->value->id];
    if (!v || !((c->made[src->value->id] >> s) & 1)) v = g->inputs[in];
    if (k) o->correct_sum_output = g->n_outputs;
    else o->loss_sum_output = g->n_outputs;
    ir_graph_add_output(g, src->name, v);
  }
  if (t->correct_sum_output < 0) o->correct_sum_output = -1;
  o->g = g;
  free(map);
  free(uses);
  return 0;
}

/* ---- fwd and bwd ---- */

static bool backward_node(const ir_node *n) {
  if (n->n_out == 0) { /* a send: with what it sends */
    const ir_value *x = n->in[0];
    return x->role == IR_ROLE_GRAD || x->role == IR_ROLE_RECOMPUTE;
  }
  return pass_node_phase(n) != PASS_PHASE_FORWARD;
}

void pass_pipe_remade(const ir_graph *g, const bool *forward, const bool *saved, bool *again) {
  bool *fixed = calloc((size_t)ir_graph_id_bound(g) + 1, sizeof *fixed); /* made from parameters and constants alone */
  if (!fixed) IR_DIE("out of memory (fixed)");
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    bool effect = ir_op_flags(n->op) & (IR_OPF_COMM | IR_OPF_EFFECT);
    if (n->dead || !forward[i] || effect) continue;
    bool f = true;
    for (int k = 0; k < n->n_in && f; k++) f = n->in[k]->role == IR_ROLE_PARAM || fixed[n->in[k]->id];
    const ir_value *u = n->n_in == 1 ? n->in[0] : NULL;
    bool layout = u && (saved[u->id] || fixed[u->id]) && pass_node_cost(n).flops == 0;
    for (int j = 0; j < n->n_out; j++) fixed[n->out[j]->id] = f, again[n->out[j]->id] = saved[n->out[j]->id] && (f || layout);
  }
  free(fixed);
}

/* What bwd computes of fwd's values (need, per value; set where remade:
 * pass_pipe_remade), with the operands of those it is not handed. */
static void remade(const ir_graph *g, const bool *in_fwd, const bool *saved, bool *need) {
  bool *forward = calloc((size_t)g->n_nodes + 1, sizeof *forward);
  if (!forward) IR_DIE("out of memory (forward)");
  for (int i = 0; i < g->n_nodes; i++) forward[i] = !backward_node(g->nodes[i]);
  pass_pipe_remade(g, forward, saved, need);
  free(forward);
  for (int i = g->n_nodes - 1; i >= 0; i--) { /* what those read that is not handed */
    const ir_node *n = g->nodes[i];
    bool needed = false;
    for (int j = 0; j < n->n_out; j++) needed |= need[n->out[j]->id];
    if (n->dead || backward_node(n) || !needed) continue;
    for (int k = 0; k < n->n_in; k++) {
      int x = n->in[k]->id;
      if (in_fwd[x] && !(saved[x] && !need[x])) need[x] = true;
    }
  }
}

/* fwd: the forward nodes; outputs the sums, then what bwd reads of them
 * less what it makes again (remade). bwd: those remade nodes, then the
 * rest; inputs the stage's, then the handed values; outputs the gradients. */
static int split(pass_pipe_chunk *t, const stage_step *st) {
  const ir_graph *g = st->g;
  int nv = ir_graph_id_bound(g) + 1;
  ir_graph *f = ir_graph_new(g->name, g->source_file), *b = ir_graph_new(g->name, g->source_file);
  f->mesh = b->mesh = g->mesh;
  ir_value **mf = calloc((size_t)nv, sizeof *mf), **mb = calloc((size_t)nv, sizeof *mb);
  bool *in_fwd = calloc((size_t)nv, sizeof *in_fwd), *saved = calloc((size_t)nv, sizeof *saved);
  bool *need = calloc((size_t)nv, sizeof *need);
  if (!mf || !mb || !in_fwd || !saved || !need) IR_DIE("out of memory (mf || !mb || !in_fwd || !saved || !need)");
  for (int i = 0; i < g->n_inputs; i++) {
    const ir_value *v = g->inputs[i];
    ir_value *x = ir_graph_add_input(f, v->name, v->type, reloc(g, f, v->loc)), *y = ir_graph_add_input(b, v->name, v->type, reloc(g, b, v->loc));
    x->role = y->role = v->role, x->shard = y->shard = v->shard;
    mf[v->id] = x, mb[v->id] = y;
  }
  for (int i = 0; i < g->n_params; i++) {
    const ir_value *v = g->params[i];
    ir_value *x = ir_graph_add_param(f, v->name, v->type, v->init, reloc(g, f, v->loc)),
             *y = ir_graph_add_param(b, v->name, v->type, v->init, reloc(g, b, v->loc));
    x->shard = y->shard = v->shard;
    mf[v->id] = x, mb[v->id] = y;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || backward_node(n)) continue;
    ir_value *in[64];
    for (int k = 0; k < n->n_in; k++) in[k] = mf[n->in[k]->id];
    ir_node *m = copy_node(f, n, in);
    for (int j = 0; j < n->n_out; j++) mf[n->out[j]->id] = m->out[j], in_fwd[n->out[j]->id] = true;
  }
  /* what bwd reads of fwd's values (its nodes and its outputs) */
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || !backward_node(n)) continue;
    for (int k = 0; k < n->n_in; k++) saved[n->in[k]->id] |= in_fwd[n->in[k]->id];
  }
  for (int j = 0; j < st->n_params; j++)
    if (st->grad_output[j] >= 0) {
      int x = g->outputs[st->grad_output[j]].value->id;
      saved[x] |= in_fwd[x];
    }
  remade(g, in_fwd, saved, need);
  /* fwd's outputs: the sums, then the saved values in value order */
  t->fwd_loss_sum_output = t->fwd_correct_sum_output = -1;
  for (int k = 0; k < 2; k++) {
    int out = k ? st->correct_sum_output : st->loss_sum_output;
    if (out < 0) continue;
    if (k) t->fwd_correct_sum_output = f->n_outputs;
    else t->fwd_loss_sum_output = f->n_outputs;
    ir_graph_add_output(f, g->outputs[out].name, mf[g->outputs[out].value->id]);
  }
  t->fwd_saved0 = f->n_outputs;
  t->bwd_saved0 = b->n_inputs;
  t->n_saved = 0;
  for (int v = 0; v < nv; v++) {
    if (!saved[v] || need[v]) continue;
    ir_value *x = mf[v];
    char name[400];
    snprintf(name, sizeof name, "saved.%.380s", x->name);
    ir_graph_add_output(f, name, x);
    ir_value *y = ir_graph_add_input(b, name, x->type, x->loc);
    y->role = IR_ROLE_INPUT, y->shard = x->shard;
    mb[v] = y;
    t->n_saved++;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    bool again = false;
    for (int j = 0; j < n->n_out; j++) again |= need[n->out[j]->id];
    if (n->dead || !(again || backward_node(n))) continue;
    ir_value *in[64];
    for (int k = 0; k < n->n_in; k++) {
      in[k] = mb[n->in[k]->id];
      if (!in[k]) {
        fprintf(stderr, "tgc: internal error: pipeline split: %%%s\n", n->in[k]->name);
        abort();
      }
    }
    ir_node *m = copy_node(b, n, in);
    for (int j = 0; j < n->n_out; j++) mb[n->out[j]->id] = m->out[j];
  }
  free(t->bwd_grad_output);
  t->bwd_grad_output = calloc((size_t)st->n_params + 1, sizeof *t->bwd_grad_output);
  if (!t->bwd_grad_output) IR_DIE("out of memory (t->bwd_grad_output)");
  for (int j = 0; j < st->n_params; j++) {
    t->bwd_grad_output[j] = st->grad_output[j] < 0 ? -1 : b->n_outputs;
    if (st->grad_output[j] < 0) continue;
    const ir_output *o = &g->outputs[st->grad_output[j]];
    ir_graph_add_output(b, o->name, mb[o->value->id]);
  }
  t->fwd = f;
  t->bwd = b;
  free(mf), free(mb), free(in_fwd), free(saved), free(need);
  return 0;
}

/* ---- the stage's update ---- */

typedef struct {
  smask mask; /* where it can be computed */
  bool part;  /* a partial sum over pp: each stage holds its own part */
} where;

static ir_graph *cut_update(const pass_training *t, const stages *c, const stage_step *st, smask *holders) {
  const ir_graph *U = t->update;
  int s = c->s, p = c->p, np = t->n_params, per = np ? t->n_states / np : 0;
  smask all = p >= 64 ? ~0ull : (1ull << p) - 1;
  int nv = ir_graph_id_bound(U) + 1;
  where *w = calloc((size_t)nv, sizeof *w);
  ir_value **map = calloc((size_t)nv, sizeof *map);
  int *pindex = malloc((size_t)(np + 1) * sizeof *pindex); /* global param -> stage param, -1 */
  if (!w || !map || !pindex) IR_DIE("out of memory (w || !map || !pindex)");
  for (int q = 0; q < np; q++) pindex[q] = -1;
  for (int j = 0; j < st->n_params; j++) pindex[st->param_of[j]] = j;
  ir_graph *g = ir_graph_new(U->name, U->source_file);
  g->mesh = U->mesh;
  g->mesh.stage = s;
  /* inputs: gradients and states of this stage's parameters, then the scalars */
  for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < st->n_params; j++) {
      int q = st->param_of[j];
      for (int k = 0; k < (pass ? per : 1); k++) {
        const ir_value *v = U->inputs[pass ? np + q * per + k : q];
        ir_value *x = ir_graph_add_input(g, v->name, v->type, reloc(U, g, v->loc));
        x->role = v->role, x->shard = v->shard;
        map[v->id] = x;
        w[v->id].mask = holders[q];
      }
    }
  for (int i = np + t->n_states; i < U->n_inputs; i++) {
    const ir_value *v = U->inputs[i];
    ir_value *x = ir_graph_add_input(g, v->name, v->type, reloc(U, g, v->loc));
    x->role = v->role, x->shard = v->shard;
    map[v->id] = x;
    w[v->id].mask = all;
    w[v->id].part = i == t->update_loss_sum_input || i == t->update_correct_sum_input;
  }
  for (int j = 0; j < st->n_params; j++) {
    const ir_value *v = U->params[st->param_of[j]];
    ir_value *x = ir_graph_add_param(g, v->name, v->type, v->init, reloc(U, g, v->loc));
    x->shard = v->shard;
    map[v->id] = x;
    w[v->id].mask = holders[st->param_of[j]];
  }
  for (int q = 0; q < np; q++) w[U->params[q]->id].mask = holders[q];
  for (int q = 0; q < np; q++) w[U->inputs[q]->id].mask = holders[q];
  for (int q = 0; q < np; q++)
    for (int k = 0; k < per; k++) w[U->inputs[np + q * per + k]->id].mask = holders[q];
  /* a gradient two stages hold in parts: exchanged, summed in stage order */
  for (int j = 0; j < st->n_params; j++) {
    int q = st->param_of[j];
    smask h = holders[q];
    if (!(h & (h - 1))) continue;
    ir_value *own = map[U->inputs[q]->id], *parts[64] = {NULL};
    for (int u = 0; u < p; u++)
      if (((h >> u) & 1) && u != s) send_to(g, own, p, u, own->loc, -1);
    for (int u = 0; u < p; u++)
      if ((h >> u) & 1) parts[u] = u == s ? own : recv_from(g, own, p, u, own->loc, -1);
    ir_value *sum = NULL;
    for (int u = 0; u < p; u++)
      if (parts[u]) sum = sum ? add2(g, sum, parts[u], own->loc, -1, own->role) : parts[u];
    map[U->inputs[q]->id] = sum;
  }
  /* the nodes */
  for (int i = 0; i < U->n_nodes; i++) {
    const ir_node *n = U->nodes[i];
    if (n->dead) continue;
    ir_loc loc = reloc(U, g, n->loc);
    smask m = all;
    bool anypart = false;
    for (int k = 0; k < n->n_in; k++) {
      if (w[n->in[k]->id].part) anypart = true;
      else m &= w[n->in[k]->id].mask;
    }
    bool sum_like = n->op == IR_OP_ADD || n->op == IR_OP_SUB;
    bool partial_add = sum_like && (anypart || m == 0);
    ir_value *in[64];
    if (partial_add) { /* each operand counted on one stage: a part its own, else its first holder's */
      for (int j = 0; j < n->n_out; j++) w[n->out[j]->id] = (where){all, true};
      for (int k = 0; k < n->n_in; k++) {
        const ir_value *v = n->in[k];
        bool mine = w[v->id].part || (w[v->id].mask && __builtin_ctzll(w[v->id].mask) == s);
        in[k] = mine && map[v->id] ? map[v->id] : zero_like(g, v, loc);
      }
      ir_node *x = copy_node(g, n, in);
      for (int j = 0; j < n->n_out; j++) map[n->out[j]->id] = x->out[j];
      continue;
    }
    if (anypart) { /* linear in one part (neg, a float cast, times or over a whole value): stays a part */
      bool keep0 = (n->op == IR_OP_NEG || (n->op == IR_OP_CAST && ir_dtype_is_float(n->out[0]->type.dtype)) ||
                    n->op == IR_OP_MUL || n->op == IR_OP_DIV) &&
                   w[n->in[0]->id].part;
      bool keep1 = n->op == IR_OP_MUL && !keep0 && n->n_in > 1 && w[n->in[1]->id].part;
      anypart = keep0 || keep1;
      for (int k = 0; k < n->n_in; k++) /* reduce the other parts first */
        if (w[n->in[k]->id].part && !(k == 0 && keep0) && !(k == 1 && keep1)) {
          map[n->in[k]->id] = all_reduce_pp(g, map[n->in[k]->id], p, loc);
          w[n->in[k]->id] = (where){all, false};
        }
    }
    for (int j = 0; j < n->n_out; j++) w[n->out[j]->id] = (where){m, anypart};
    if (!((m >> s) & 1)) continue; /* not computable here: another stage's parameter */
    for (int k = 0; k < n->n_in; k++) in[k] = map[n->in[k]->id];
    ir_node *x = copy_node(g, n, in);
    for (int j = 0; j < n->n_out; j++) map[n->out[j]->id] = x->out[j];
  }
  /* outputs: this stage's new parameters and states, then the scalars (whole on every stage) */
  for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < st->n_params; j++) {
      int q = st->param_of[j];
      for (int k = 0; k < (pass ? per : 1); k++) {
        const ir_output *o = &U->outputs[pass ? np + q * per + k : q];
        ir_graph_add_output(g, o->name, map[o->value->id]);
      }
    }
  for (int o = np + t->n_states; o < U->n_outputs; o++) {
    const ir_output *out = &U->outputs[o];
    ir_value *v = map[out->value->id];
    if (w[out->value->id].part) v = all_reduce_pp(g, v, p, reloc(U, g, out->value->loc));
    ir_graph_add_output(g, out->name, v);
  }
  (void)pindex;
  free(pindex), free(map), free(w);
  return g;
}

/* A plain graph (no training program: what `tgc dump --after shard` shows)
 * cut to stage `stage`: the inputs it reads, the parameters its nodes read,
 * its nodes with the sends and receives, the outputs made on it. */
int sh_cut_graph_stage(ir_graph *g, int stage, ir_diag *d) {
  int p = g->mesh.size[IR_AXIS_PP];
  if (p > 64) {
    ir_error_plain(d, "pipeline parallelism: at most 64 stages (pp = %d)", p);
    return -1;
  }
  stages c = {.g = g, .p = p, .ranks = p, .s = stage, .nv = ir_graph_id_bound(g) + 1};
  if (assign(&c, d) != 0) {
    stages_free(&c);
    return -1;
  }
  ir_graph *h = ir_graph_new(g->name, g->source_file);
  h->mesh = g->mesh;
  h->mesh.stage = stage;
  ir_value **map = calloc((size_t)c.nv, sizeof *map);
  if (!map) IR_DIE("out of memory (map)");
  for (int i = 0; i < g->n_inputs; i++) {
    const ir_value *v = g->inputs[i];
    if (!((c.read[v->id] >> stage) & 1)) continue;
    ir_value *x = ir_graph_add_input(h, v->name, v->type, reloc(g, h, v->loc));
    x->role = v->role, x->shard = v->shard;
    map[v->id] = x;
  }
  for (int i = 0; i < g->n_params; i++) {
    const ir_value *v = g->params[i];
    if (!((c.read[v->id] >> stage) & 1)) continue;
    ir_value *x = ir_graph_add_param(h, v->name, v->type, v->init, reloc(g, h, v->loc));
    x->role = v->role, x->shard = v->shard;
    map[v->id] = x;
  }
  cut_nodes(&c, h, map);
  for (int i = 0; i < g->n_outputs; i++) {
    const ir_value *v = g->outputs[i].value;
    if (map[v->id] && (!v->def || ((c.made[v->id] >> stage) & 1))) ir_graph_add_output(h, g->outputs[i].name, map[v->id]);
  }
  free(map);
  stages_free(&c);
  ir_graph tmp = *g; /* the stage's graph takes g's place */
  *g = *h;
  *h = tmp;
  ir_graph_free(h);
  return 0;
}

/* The eval graph (t->eval, sharded over dp/tp as the step) cut to stage
 * `stage` as the step was (t->stage_boundaries), after sh_cut_stages:
 * every data input kept (the trainer binds the step's data buffers by
 * index), the parameters those of the stage's step, in its order (its
 * parameter buffers), the forward's nodes with their sends and receives;
 * each output (the loss, the correct count) all-reduced over pp, the
 * stages that do not make it adding zero, so every rank reads it. One run
 * is one forward through the stages in turn (a micro-batch of the
 * pipeline's forward schedule: evaluation has no backward to overlap). */
int sh_cut_eval_stage(pass_training *t, int stage, ir_diag *d) {
  ir_graph *g = t->eval;
  int p = g->mesh.size[IR_AXIS_PP];
  if (t->n_chunks > 1) {
    ir_error_plain(d, "evaluation under the interleaved schedule (chunks of stages per rank) is not built: evaluate "
                      "with --schedule gpipe or 1f1b, or on a mesh without pp (a saved state loads on any mesh)");
    return -1;
  }
  stages c = {.g = g, .p = p, .ranks = p, .s = stage, .nv = ir_graph_id_bound(g) + 1,
              .bounds = t->stage_boundaries, .n_bounds = t->n_stage_boundaries};
  if (assign(&c, d) != 0) {
    stages_free(&c);
    return -1;
  }
  ir_graph *h = ir_graph_new(g->name, g->source_file);
  h->mesh = g->mesh;
  h->mesh.stage = stage;
  ir_value **map = calloc((size_t)c.nv, sizeof *map);
  if (!map) IR_DIE("out of memory (map)");
  for (int i = 0; i < g->n_inputs; i++) {
    const ir_value *v = g->inputs[i];
    ir_value *x = ir_graph_add_input(h, v->name, v->type, reloc(g, h, v->loc));
    x->role = v->role, x->shard = v->shard;
    map[v->id] = x;
  }
  int rc = 0;
  for (int i = 0; i < t->step->n_params && rc == 0; i++) {
    const ir_value *sp = t->step->params[i], *v = NULL;
    for (int j = 0; j < g->n_params && !v; j++)
      if (strcmp(g->params[j]->name, sp->name) == 0) v = g->params[j];
    if (!v) v = sp; /* a parameter the forward does not read: bound, unused */
    ir_value *x = ir_graph_add_param(h, v->name, v->type, v->init, reloc(v == sp ? t->step : g, h, v->loc));
    x->role = v->role, x->shard = v->shard;
    if (v != sp) map[v->id] = x;
  }
  for (int j = 0; j < g->n_params && rc == 0; j++)
    if (((c.read[g->params[j]->id] >> stage) & 1) && !map[g->params[j]->id]) {
      ir_error_plain(d, "internal error: the eval graph reads parameter '%s' on pipeline stage %d, which does not "
                        "hold it", g->params[j]->name, stage);
      rc = -1;
    }
  if (rc == 0) {
    cut_nodes(&c, h, map);
    for (int i = 0; i < g->n_outputs; i++) {
      const ir_value *v = g->outputs[i].value;
      ir_loc loc = reloc(g, h, v->loc);
      bool here = map[v->id] && (!v->def || ((c.made[v->id] >> stage) & 1));
      ir_value *x = here ? map[v->id] : zero_like(h, v, loc);
      ir_graph_add_output(h, g->outputs[i].name, all_reduce_pp(h, x, p, loc));
    }
  }
  free(map);
  stages_free(&c);
  if (rc == 0) {
    t->eval = h;
    ir_graph_free(g);
  } else {
    ir_graph_free(h);
  }
  return rc;
}

int sh_cut_stages(pass_training *t, int stage, ir_diag *d) {
  int p = t->step->mesh.size[IR_AXIS_PP], v = t->n_chunks > 1 ? t->n_chunks : 1;
  if (p * v > 64) {
    ir_error_plain(d, "pipeline parallelism: at most 64 stages (pp = %d%s)", p, v > 1 ? " x the chunks" : "");
    return -1;
  }
  if (t->loss_scale_input >= 0) {
    ir_error_plain(d, "pipeline parallelism with loss scaling (--dtype f16) is not built yet");
    return -1;
  }
  if (t->schedule == PASS_SCHED_INTERLEAVED && t->micro_batches % p != 0) {
    ir_error_plain(d, "the interleaved schedule runs the micro-batches in groups of pp (Megatron-LM's): "
                   "--micro-batches %d is not a multiple of pp = %d", t->micro_batches, p);
    return -1;
  }
  stages c = {.g = t->step, .p = p * v, .ranks = p, .s = stage, .nv = ir_graph_id_bound(t->step) + 1,
              .bounds = t->stage_boundaries, .n_bounds = t->n_stage_boundaries};
  if (assign(&c, d) != 0) {
    stages_free(&c);
    return -1;
  }
  /* every rank's parameters (the update needs who holds what): a rank holds those of its chunks */
  smask *holders = calloc((size_t)t->n_params + 1, sizeof *holders);
  bool *rank_uses = calloc((size_t)t->n_params + 1, sizeof *rank_uses);
  stage_step *st = calloc((size_t)v, sizeof *st);
  pass_pipe_chunk *chunk = calloc((size_t)v, sizeof *chunk);
  if (!holders || !rank_uses || !st || !chunk) IR_DIE("out of memory (holders || !rank_uses || !st || !chunk)");
  for (int i = 0; i < t->step->n_nodes; i++) {
    const ir_node *n = t->step->nodes[i];
    if (n->dead) continue;
    smask at = c.stage[i] == MIXED ? c.mixed_of[i] : 1ull << c.stage[i];
    for (int k = 0; k < n->n_in; k++)
      for (int q = 0; q < t->n_params; q++)
        if (n->in[k] == t->step->params[q])
          for (int u = 0; u < c.p; u++)
            if ((at >> u) & 1) holders[q] |= 1ull << (u % p);
  }
  for (int q = 0; q < t->n_params; q++) rank_uses[q] = (holders[q] >> stage) & 1;
  for (int k = 0; k < v; k++) { /* chunk k: virtual stage k p + stage */
    c.s = k * p + stage;
    cut_step(t, &c, &st[k], rank_uses);
    split(&chunk[k], &st[k]);
  }
  stages cu = {.p = p, .s = stage}; /* the update: the rank's, over the ranks */
  ir_graph *u = cut_update(t, &cu, &st[0], holders);
  /* the stage's program: its parameters, in their order */
  int per = t->n_params ? t->n_states / t->n_params : 0;
  ir_graph_free(t->step);
  ir_graph_free(t->update);
  t->step = st[0].g;
  t->update = u;
  t->n_params = st[0].n_params;
  t->n_states = st[0].n_params * per;
  t->acc_input0 = st[0].acc0;
  t->loss_sum_input = st[0].loss_sum_input;
  t->correct_sum_input = st[0].correct_sum_input;
  t->dropout_key_input = st[0].dropout_key_input;
  free(t->grad_output);
  t->grad_output = st[0].grad_output;
  t->loss_sum_output = st[0].loss_sum_output;
  t->correct_sum_output = st[0].correct_sum_output;
  t->lr_input = t->n_params + t->n_states;
  t->step_input = t->lr_input + 1;
  t->update_loss_sum_input = t->step_input + 1;
  t->update_correct_sum_input = t->accuracy ? t->update_loss_sum_input + 1 : -1;
  t->loss_output = t->n_params + t->n_states;
  t->accuracy_output = t->accuracy ? t->loss_output + 1 : -1;
  t->nonfinite_output = t->loss_output + 1 + t->accuracy;
  t->stage = stage;
  t->n_stages = p;
  t->n_chunks = v;
  t->fwd = chunk[0].fwd, t->bwd = chunk[0].bwd;
  t->n_saved = chunk[0].n_saved, t->fwd_saved0 = chunk[0].fwd_saved0, t->bwd_saved0 = chunk[0].bwd_saved0;
  t->fwd_loss_sum_output = chunk[0].fwd_loss_sum_output;
  t->fwd_correct_sum_output = chunk[0].fwd_correct_sum_output;
  free(t->bwd_grad_output);
  t->bwd_grad_output = chunk[0].bwd_grad_output;
  free(t->chunk);
  t->chunk = chunk;
  for (int k = 0; k < v; k++) {
    if (k > 0) ir_graph_free(st[k].g), free(st[k].grad_output);
    free(st[k].param_of);
  }
  free(st);
  free(rank_uses);
  free(holders);
  stages_free(&c);
  return 0;
}
