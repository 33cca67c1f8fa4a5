/* passes/shard_train.c — where the shard pass places what a graph does not
 * compute: its inputs, parameters, optimizer state and outputs, for one
 * graph (the pass `shard` of the pipeline) and for a training program (the
 * step and update graphs, which must agree).
 *
 * Data parallelism (dp): every data input is split along dim 0, its batch;
 * parameters are replicated, so their gradients come out as partial sums
 * over dp: with one micro-batch the step all-reduces each where it is made
 * (inside the backward, as DDP's buckets), with several the update reduces
 * their sums once. ZeRO (--zero N) shards along dp, each
 * parameter along its "ZeRO dim" (the first dim that divides by dp and
 * that tp does not split; a parameter without one stays replicated):
 *   1: the optimizer state; the gradients are reduce-scattered (by the
 *      step with one micro-batch, else by the update), each rank updates
 *      its shard and all-gathers the new parameters;
 *   2: also the gradients the step hands over (and their micro-batch sums);
 *   3: also the parameters, all-gathered where each phase reads them.
 * Tensor parallelism (tp): the parameters' layouts are chosen by search
 * (pass_options.tp_search: shard_search.c, each candidate costed on the
 * program the engine builds for it), or by Megatron-LM's rule in the rules
 * of matmul and embedding (shard_rules.c), which a first run of the engine
 * finds; either way before the real run, so the ZeRO dims can avoid the
 * dims tp splits (for one graph too, under ZeRO-3). With sequence parallelism the data inputs are split
 * along the sequence on tp, except ids and targets (read whole by the
 * vocabulary-parallel embedding and loss, as Megatron-LM's tokens).
 * A plain graph's outputs come out whole (replicated on dp and tp: a
 * partial sum all-reduced, a split all-gathered), so every rank holds what
 * one device prints; the training program's keep the layouts the update
 * reads.
 */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "shard_impl.h"

static const sh_st UNSET = {SH_UNSET, 0, 1};

static bool mesh_active(const ir_mesh *m) { return m->size[IR_AXIS_DP] > 1 || m->size[IR_AXIS_TP] > 1; }
static bool pipelined(const ir_mesh *m) { return m->size[IR_AXIS_PP] > 1; }

/* Whether v is read as ids or targets (embedding, embedding_grad,
 * cross_entropy(_grad)): with sequence parallelism such an input stays whole
 * on tp, as Megatron-LM's tokens (the vocabulary-parallel embedding reads
 * every position and reduce-scatters its partial sum along the sequence). */
static bool read_as_ids(const ir_graph *g, const ir_value *v) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    int k = n->op == IR_OP_EMBEDDING || n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD ? 1
            : n->op == IR_OP_EMBEDDING_GRAD                                                           ? 0
                                                                                                      : -1;
    if (k >= 0 && n->in[k] == v) return true;
  }
  return false;
}

/* Megatron-LM's vocabulary-parallel table on tp: a parameter [V, D] (or a
 * float cast of one: mixed precision) read by embedding at ids the graph
 * takes as data is split along its rows before any rule reads it (its
 * casts, the tied LM head's transpose and its gradient then follow: the
 * table, its optimizer state and its gradient are V/tp rows). A V that tp
 * does not divide is padded to the next multiple of tp, Vp, each rank
 * holding Vp/tp rows (the layout carries the padding: shard.c to_shard);
 * an untied LM head's [D, V] weight the same along its columns. */
static const ir_value *float_source(const ir_value *v) {
  while (v->def && v->def->op == IR_OP_CAST && ir_dtype_is_float(v->type.dtype)) v = v->def->in[0];
  return v;
}

/* The vocabulary dim of p on tp (0: a table [V, D] that embedding reads at
 * data ids; 1: an untied LM head [D, V] whose product cross_entropy reads,
 * only when tp does not divide V: one that divides, the rules split by
 * themselves), or -1 when p is neither. */
int sh_vocab_dim(const ir_graph *g, const ir_value *p, int tp) {
  for (int i = 0; i < g->n_nodes && tp > 1; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    if (n->op == IR_OP_EMBEDDING && !n->in[1]->def && n->in[1]->role == IR_ROLE_INPUT) {
      const ir_value *t = float_source(n->in[0]);
      if (t == p && !t->def && t->role == IR_ROLE_PARAM && t->type.rank == 2 && t->type.dims[0] >= tp) return 0;
    }
    /* an untied LM head: logits = x @ W (W [D, V], a parameter or its float cast) read by cross_entropy */
    const ir_node *mm = n->op == IR_OP_CROSS_ENTROPY ? n->in[0]->def : NULL;
    if (!mm || mm->op != IR_OP_MATMUL || ir_node_attr_int(mm, "transpose_b", 0)) continue;
    const ir_value *w = float_source(mm->in[1]);
    int64_t v = w->type.rank == 2 ? w->type.dims[1] : 0;
    if (w == p && !w->def && w->role == IR_ROLE_PARAM && v >= tp && v % tp != 0 &&
        v == n->in[0]->type.dims[n->in[0]->type.rank - 1])
      return 1;
  }
  return -1;
}

static void place_vocab(sh_engine *e, const ir_graph *g) {
  int tp = g->mesh.size[IR_AXIS_TP];
  for (int i = 0; i < g->n_params && tp > 1; i++) {
    const ir_value *p = g->params[i];
    int d = sh_vocab_dim(g, p, tp);
    if (d >= 0 && sh_engine_layout(e, p, IR_AXIS_TP).kind == SH_UNSET) sh_engine_place(e, p, IR_AXIS_TP, sh_S(d));
  }
}

/* The data inputs split along their batch dims (NULL: dim 0; -1: not
 * data): a clear error when one does not divide. */
static int place_data(sh_engine *e, const ir_graph *g, int n_data, const int *batch_dim, ir_diag *d) {
  int dp = g->mesh.size[IR_AXIS_DP];
  for (int i = 0; i < n_data; i++) {
    const ir_value *v = g->inputs[i];
    int b = batch_dim ? batch_dim[i] : 0;
    /* tp: every rank of a tensor-parallel group sees the whole batch; with
     * sequence parallelism each holds a block of the sequence (the dim after
     * the batch) */
    bool seq = g->mesh.sp && b >= 0 && b + 1 < v->type.rank && v->type.dims[b + 1] % g->mesh.size[IR_AXIS_TP] == 0 &&
               !read_as_ids(g, v);
    int heads = pass_kv_cache_heads_dim(v->name, &v->type); /* a KV cache: this rank's kv heads (check_kv_cache) */
    sh_engine_place(e, v, IR_AXIS_TP, heads >= 0 ? sh_S(heads) : seq ? sh_S(b + 1) : sh_R());
    if (b < 0 || dp < 2) continue;
    if (b >= v->type.rank) {
      ir_error(d, v->loc, "data parallelism (dp = %d) splits every data input along its batch (dim %d), but input "
               "%%%s has rank %d", dp, b, v->name, v->type.rank);
      return -1;
    }
    if (v->type.dims[b] % dp != 0) {
      ir_error(d, v->loc, "data parallelism (dp = %d) splits input %%%s along its batch (dim %d, size %lld), which "
               "does not divide by %d", dp, v->name, b, (long long)v->type.dims[b], dp);
      return -1;
    }
    sh_engine_place(e, v, IR_AXIS_DP, sh_S(b));
  }
  return 0;
}

/* The ZeRO dim of a parameter of type t whose tp layout is tp: -1 if none. */
static int zero_dim(const ir_type *t, sh_st tp, int dp) {
  for (int k = 0; k < t->rank; k++)
    if (!(tp.kind == SH_S && tp.dim == k) && t->dims[k] >= dp && t->dims[k] % dp == 0) return k;
  return -1;
}

static int check_hints(const ir_graph *g, ir_diag *d);
static int check_heads(const ir_graph *g, int tp, ir_diag *d);
static int check_kv_cache(const ir_graph *g, int tp, ir_diag *d);

/* tp[i] for every parameter of g from the layouts given (pass_tp_search):
 * 0, or -1 after reporting a parameter they have none for. */
static int given_layouts(const ir_graph *g, const pass_tp_layouts *l, sh_st *tp, ir_diag *d) {
  if (pass_tp_layouts_tp(l) != g->mesh.size[IR_AXIS_TP] || pass_tp_layouts_sp(l) != g->mesh.sp) {
    ir_error_plain(d, "internal error: tp layouts chosen for tp = %d%s, the mesh has tp = %d%s", pass_tp_layouts_tp(l),
                   pass_tp_layouts_sp(l) ? " with sp" : "", g->mesh.size[IR_AXIS_TP], g->mesh.sp ? " with sp" : "");
    return -1;
  }
  for (int i = 0; i < g->n_params; i++)
    if (sh_tp_layouts_find(l, g->params[i], &tp[i]) != 0) {
      char t[160];
      ir_error(d, g->params[i]->loc, "the tp layouts searched have none for parameter %%%s (%s): the search's graph "
               "and this one differ", g->params[i]->name, ir_type_str(&g->params[i]->type, t, sizeof t));
      return -1;
    }
  return 0;
}

/* g sharded over its mesh's dp and tp with the parameters' tp layouts tp
 * (NULL: replicated) and ZeRO-3's dims over dp when zero >= 3: one rank's
 * graph, or NULL after reporting through d. */
static void share_output_collectives(ir_graph *g);

static ir_graph *shard_plain(const ir_graph *g, const sh_st *tp, int zero, ir_diag *d, sh_st *found) {
  int dp = g->mesh.size[IR_AXIS_DP];
  bool z3 = zero >= 3 && dp > 1;
  sh_engine *e = sh_engine_new(g, d, true);
  int rc = place_data(e, g, g->n_inputs, NULL, d);
  for (int i = 0; rc == 0 && i < g->n_params; i++) {
    sh_st t = tp ? tp[i] : (sh_st){SH_UNSET, 0, 1};
    int z = z3 ? zero_dim(&g->params[i]->type, t, dp) : -1;
    sh_engine_place(e, g->params[i], IR_AXIS_DP, z >= 0 ? sh_S(z) : sh_R());
    if (tp) sh_engine_place(e, g->params[i], IR_AXIS_TP, t);
  }
  if (!tp) place_vocab(e, g); /* Megatron-LM's placement: the rules place the rest at their first reader */
  if (rc == 0) rc = sh_engine_run(e);
  for (int i = 0; rc == 0 && found && i < g->n_params; i++) found[i] = sh_engine_layout(e, g->params[i], IR_AXIS_TP);
  ir_graph *s = NULL;
  if (rc == 0) {
    /* every output whole on every rank: a partial sum all-reduced, a split
     * all-gathered (what `tgc run --mesh` prints on rank 0); but a gradient
     * (the training graph `tgc stats` costs) stays as the step hands it to
     * the update, which reduces it there */
    sh_st whole[IR_NUM_AXES], heads[IR_NUM_AXES];
    for (int a = 0; a < IR_NUM_AXES; a++) whole[a] = a == IR_AXIS_DP || a == IR_AXIS_TP ? sh_R() : UNSET;
    for (int i = 0; i < g->n_outputs; i++) {
      /* a KV cache stays split along its heads (the next step's cache input) */
      int h = pass_kv_cache_heads_dim(g->outputs[i].name, &g->outputs[i].value->type);
      memcpy(heads, whole, sizeof heads);
      if (h >= 0) heads[IR_AXIS_TP] = sh_S(h);
      sh_engine_output(e, i, g->outputs[i].value->role == IR_ROLE_GRAD ? NULL : h >= 0 ? heads : whole);
    }
    s = sh_engine_finish(e);
    share_output_collectives(s);
  }
  sh_engine_free(e);
  return s;
}

typedef struct {
  const ir_graph *g;
  int zero;
  ir_diag *quiet;
} plain_eval;

static int eval_plain(void *ctx, const sh_st *tp, sh_cost *cost) {
  const plain_eval *x = ctx;
  ir_graph *s = shard_plain(x->g, tp, x->zero, x->quiet, NULL);
  if (!s) return -1;
  *cost = sh_graph_cost(s);
  ir_graph_free(s);
  return 0;
}

/* A quiet diagnostics sink for the search's evaluations (the real run
 * reports). */
static ir_diag *quiet_diag(void) {
  ir_diag *q = ir_diag_new(stderr);
  ir_diag_set_max_errors(q, 0);
  return q;
}

static bool dumps_shard(const pass_options *o) {
  return o->dump_after && o->dump_format == 0 && (strcmp(o->dump_after, "shard") == 0 || strcmp(o->dump_after, "all") == 0);
}

static bool same_attrs(const ir_node *a, const ir_node *b) {
  if (a->n_attrs != b->n_attrs) return false;
  for (int i = 0; i < a->n_attrs; i++) {
    const ir_attr *x = &a->attrs[i], *y = ir_node_attr(b, x->key);
    if (!y || x->kind != y->kind) return false;
    if ((x->kind == IR_ATTR_INT || x->kind == IR_ATTR_DTYPE) && x->i != y->i) return false;
    if (x->kind == IR_ATTR_STR && strcmp(x->s ? x->s : "", y->s ? y->s : "") != 0) return false;
    if (x->kind == IR_ATTR_FLOAT || x->kind == IR_ATTR_INTS) return false; /* (no collective has one) */
  }
  return true;
}

/* An earlier node of g, before `before`, applying n's collective to x with
 * n's attributes, or NULL. */
static ir_node *earlier_collective(const ir_graph *g, const ir_node *n, const ir_value *x, const ir_node *before) {
  for (int i = 0; i < g->n_nodes && g->nodes[i] != before; i++) {
    ir_node *m = g->nodes[i];
    if (!m->dead && m->op == n->op && m->n_in == 1 && m->in[0] == x && m->n_out == 1 && same_attrs(m, n)) return m;
  }
  return NULL;
}

static bool not_an_output(const ir_graph *g, const ir_value *v) {
  for (int k = 0; k < g->n_outputs; k++)
    if (g->outputs[k].value == v) return false;
  return true;
}

/* Whether v is read by nothing but output o. */
static bool only_output(const ir_graph *g, const ir_value *v, int o) {
  for (int k = 0; k < g->n_outputs; k++)
    if (k != o && g->outputs[k].value == v) return false;
  return ir_graph_readers(g, v, NULL, 0) == 0;
}

/* An output made whole by a collective that the graph already applies to
 * the same value reuses that result, so the bytes move once: y all-reduced
 * over tp for the loss and again for the output y takes the first; y
 * gathered over dp and then all-reduced over tp (the engine's order:
 * gathers first) becomes the gather of the all-reduced y the loss reads.
 * (The engine keeps an output's conversions apart from the body's, as a
 * training program's phases need; a plain graph does not.) */
static void share_output_collectives(ir_graph *g) {
  bool changed = false;
  for (int o = 0; o < g->n_outputs; o++) {
    ir_node *n = g->outputs[o].value->def, *m;
    if (!n || n->dead || (n->op != IR_OP_ALL_REDUCE && n->op != IR_OP_ALL_GATHER) || n->n_in != 1 ||
        !only_output(g, n->out[0], o))
      continue;
    if ((m = earlier_collective(g, n, n->in[0], n)) && ir_type_equal(&m->out[0]->type, &n->out[0]->type)) {
      g->outputs[o].value = m->out[0];
      n->dead = changed = true;
      continue;
    }
    ir_node *a = n->in[0]->def; /* reduce(gather(x)) -> gather(reduce(x)) when reduce(x) is there */
    if (n->op != IR_OP_ALL_REDUCE || !a || a->op != IR_OP_ALL_GATHER || a->n_in != 1 ||
        ir_graph_readers(g, a->out[0], (ir_node *[1]){0}, 1) != 1 || !not_an_output(g, a->out[0]))
      continue;
    if ((m = earlier_collective(g, n, a->in[0], a)) && ir_type_equal(&m->out[0]->type, &a->in[0]->type)) {
      a->in[0] = m->out[0];
      a->out[0]->shard = n->out[0]->shard;
      g->outputs[o].value = a->out[0];
      n->dead = changed = true;
    }
  }
  if (changed) ir_graph_compact(g);
}

bool pass_shard_padding_str(const ir_value *v, const ir_mesh *m, char *buf, size_t n) {
  if (n) buf[0] = 0;
  for (int d = 0; d < v->type.rank; d++) {
    if (!v->shard.split[d] || v->shard.pad[d] <= 0) continue;
    int64_t blocks = ir_shard_blocks(&v->shard, m, d);
    char axes[64] = "";
    size_t len = 0;
    for (int a = 0; a < IR_NUM_AXES; a++)
      if (((v->shard.split[d] >> a) & 1) && len < sizeof axes)
        len += (size_t)snprintf(axes + len, sizeof axes - len, "%s%s = %d", len ? ", " : "", ir_axis_name((ir_axis)a),
                                m->size[a]);
    ir_type whole = ir_shard_global_type(&v->type, &v->shard, m);
    char t[160];
    snprintf(buf, n, "%%%s %s: dim %d (%lld) padded to %lld over %s, %lld per rank", v->name,
             ir_type_str(&whole, t, sizeof t), d, (long long)whole.dims[d], (long long)(v->type.dims[d] * blocks),
             axes, (long long)v->type.dims[d]);
    return true;
  }
  return false;
}

/* "# padded: ..." before a dump of the sharded graph g: every parameter
 * whose split dim is padded (the padding of the values made from them
 * follows: their layouts say "pad N"). */
static void print_padding(FILE *out, const ir_graph *g) {
  char line[400];
  for (int i = 0; i < g->n_params; i++)
    if (pass_shard_padding_str(g->params[i], &g->mesh, line, sizeof line))
      fprintf(out, "# padded (a vocabulary tp does not divide; docs/sharding.md): %s\n", line);
}

int pass_shard(ir_graph *g, const pass_options *o) {
  if (!mesh_active(&g->mesh)) return pipelined(&g->mesh) ? sh_cut_graph_stage(g, g->mesh.stage >= 0 ? g->mesh.stage : 0, o->diag) : 0;
  if (check_hints(g, o->diag) != 0) return -1;
  if (check_heads(g, g->mesh.size[IR_AXIS_TP], o->diag) != 0) return -1;
  if (check_kv_cache(g, g->mesh.size[IR_AXIS_TP], o->diag) != 0) return -1;
  sh_st *tp = calloc((size_t)g->n_params + 1, sizeof *tp);
  if (!tp) IR_DIE("out of memory (tp)");
  for (int i = 0; i < g->n_params; i++) tp[i] = sh_R();
  bool placed = true;
  if (g->mesh.size[IR_AXIS_TP] > 1 && o->tp_layouts) { /* as given (tgc train and plan: pass_tp_search) */
    if (given_layouts(g, o->tp_layouts, tp, o->diag) != 0) {
      free(tp);
      return -1;
    }
  } else if (g->mesh.size[IR_AXIS_TP] > 1 && o->tp_search) { /* the parameters' tp layouts, by search */
    plain_eval x = {g, o->zero, quiet_diag()};
    sh_search_report *rep = NULL;
    sh_search_tp(g, eval_plain, &x, NULL, tp, dumps_shard(o) ? &rep : NULL, o->diag);
    ir_diag_free(x.quiet);
    if (rep) sh_search_print(o->dump_out ? o->dump_out : stdout, rep);
    sh_search_report_free(rep);
  } else if (g->mesh.size[IR_AXIS_TP] > 1) { /* Megatron-LM's rule; under ZeRO 3 found first, so the ZeRO dims avoid it */
    placed = false;
    if (o->zero >= 3 && g->mesh.size[IR_AXIS_DP] > 1) {
      ir_graph *probe = shard_plain(g, NULL, 0, o->diag, tp);
      placed = probe != NULL;
      ir_graph_free(probe);
      if (!probe) {
        free(tp);
        return -1;
      }
    }
  }
  ir_graph *s = shard_plain(g, placed ? tp : NULL, o->zero, o->diag, NULL);
  free(tp);
  if (!s) return -1;
  if (dumps_shard(o)) print_padding(o->dump_out ? o->dump_out : stdout, s);
  /* the sharded graph takes g's place */
  ir_graph tmp = *g;
  *g = *s;
  *s = tmp;
  ir_graph_free(s);
  int rc = 0;
  if (pipelined(&g->mesh)) rc = sh_cut_graph_stage(g, g->mesh.stage >= 0 ? g->mesh.stage : 0, o->diag);
  return rc;
}

/* ---- training programs ---- */

typedef struct {
  sh_st param[IR_NUM_AXES];  /* where the parameter lives */
  sh_st state[IR_NUM_AXES];  /* its optimizer state (and ZeRO 2, 3: its gradient) */
  sh_st grad[IR_NUM_AXES];   /* the gradient the step hands over */
} param_layout;

/* ---- gradient buckets ----
 * The step's gradient collectives (a dp all-reduce or reduce-scatter of a
 * gradient that only leaves the step as an output) come out of the engine
 * at the graph's end, after the whole backward. They move up into buckets,
 * as PyTorch DDP's: gradients in the order the backward makes them, a
 * bucket closed when it holds GRAD_BUCKET_BYTES (DDP's bucket_cap_mb, 25
 * MiB; --bucket-mb sets another), its collectives placed together right after the node that made the
 * last of its gradients, the rest at the end. A device then starts moving a
 * bucket while the backward goes on (docs/sharding.md), and a program cut at
 * collectives (CUDA graphs) is cut once per bucket. Values do not change:
 * the same collectives of the same bytes, in the same order on every rank. */
enum { GRAD_BUCKET_BYTES = 25 << 20 };

static bool bucketed(const ir_graph *g, const ir_node *n, const int *readers) {
  if (n->dead || (n->op != IR_OP_ALL_REDUCE && n->op != IR_OP_REDUCE_SCATTER) ||
      ir_node_mesh_axis(n) != IR_AXIS_DP || n->n_in != 1 || n->n_out != 1 || n->out[0]->role != IR_ROLE_GRAD)
    return false;
  const ir_node *d = n->in[0]->def;
  return d && !d->dead && d->id >= 0 && d->id < g->n_nodes && readers[n->out[0]->id] == 0;
}

static void bucket_gradient_collectives(ir_graph *g, double cap) {
  int n = g->n_nodes, bound = ir_graph_id_bound(g);
  int *readers = calloc((size_t)bound + 1, sizeof *readers), *bucket = malloc((size_t)n * sizeof *bucket);
  ir_node **order = malloc((size_t)n * sizeof *order);
  bool *moved = calloc((size_t)n + 1, sizeof *moved);
  if (!readers || !bucket || !order || !moved) IR_DIE("out of memory (buckets)");
  for (int i = 0; i < n; i++)
    for (int j = 0; !g->nodes[i]->dead && j < g->nodes[i]->n_in; j++) readers[g->nodes[i]->in[j]->id]++;
  /* by producer: the collectives of its results, in graph order (a linked list through next) */
  int *first = malloc((size_t)n * sizeof *first), *next = malloc((size_t)n * sizeof *next), *last = malloc((size_t)n * sizeof *last);
  if (!first || !next || !last) IR_DIE("out of memory (buckets)");
  for (int i = 0; i < n; i++) first[i] = last[i] = next[i] = -1;
  for (int i = 0; i < n; i++) {
    const ir_node *c = g->nodes[i];
    if (!bucketed(g, c, readers)) continue;
    int d = c->in[0]->def->id;
    if (d > i) continue; /* (not after its producer: left alone) */
    moved[i] = true;
    if (last[d] < 0) first[d] = i;
    else next[last[d]] = i;
    last[d] = i;
  }
  int m = 0, nb = 0;
  double bytes = 0;
  for (int i = 0; i < n; i++) {
    if (moved[i]) continue;
    order[m++] = g->nodes[i];
    for (int k = first[i]; k >= 0; k = next[k]) {
      bucket[nb++] = k;
      bytes += (double)ir_type_numel(&g->nodes[k]->in[0]->type) * (double)ir_dtype_size(g->nodes[k]->in[0]->type.dtype);
    }
    if (bytes >= cap) { /* the bucket is full: its collectives here */
      for (int k = 0; k < nb; k++) order[m++] = g->nodes[bucket[k]];
      nb = 0, bytes = 0;
    }
  }
  for (int k = 0; k < nb; k++) order[m++] = g->nodes[bucket[k]];
  for (int i = 0; i < n; i++) g->nodes[i] = order[i], g->nodes[i]->id = i;
  free(readers), free(bucket), free(order), free(moved), free(first), free(next), free(last);
}

/* Every parameter's gradient is its own value (canonicalize merges equal
 * ones: two biases added one after the other): one collective each, as
 * the planner counts them (plan/plan.c), when the step reduces them. */
static bool distinct_grads(const pass_training *t) {
  const ir_graph *g = t->step;
  for (int i = 0; i < t->n_params; i++)
    for (int j = 0; j < i; j++)
      if (t->grad_output[i] >= 0 && t->grad_output[j] >= 0 &&
          g->outputs[t->grad_output[i]].value == g->outputs[t->grad_output[j]].value)
        return false;
  return true;
}

/* One run of the engine over the step graph, the parameters placed as lay
 * says (the gradients' layouts it hands over are written back to lay). */
static ir_graph *shard_step(const pass_training *t, int zero, double bucket, param_layout *lay, sh_st *sums, bool probe,
                            ir_diag *d) {
  const ir_graph *g = t->step;
  int dp = g->mesh.size[IR_AXIS_DP];
  sh_engine *e = sh_engine_new(g, d, true);
  ir_graph *out = NULL;
  if (place_data(e, g, t->n_data, t->batch_dim, d) != 0) goto done;
  if (probe) place_vocab(e, g);
  for (int i = 0; i < t->n_params; i++) {
    const ir_value *p = g->params[i];
    sh_engine_place(e, p, IR_AXIS_DP, lay[i].param[IR_AXIS_DP]);
    if (lay[i].param[IR_AXIS_TP].kind != SH_UNSET) sh_engine_place(e, p, IR_AXIS_TP, lay[i].param[IR_AXIS_TP]);
    if (t->acc_input0 >= 0) { /* the micro-batch sums: as the gradients handed over */
      const ir_value *acc = g->inputs[t->acc_input0 + i];
      sh_engine_place(e, acc, IR_AXIS_DP, zero >= 2 ? lay[i].state[IR_AXIS_DP] : (dp > 1 ? sh_P() : sh_R()));
      /* a padded vocabulary's sum padded as its gradient (no rule splits a dim that does not divide) */
      sh_st ptp = lay[i].param[IR_AXIS_TP];
      int tp = g->mesh.size[IR_AXIS_TP];
      if (tp > 1 && ptp.kind == SH_S && p->type.dims[ptp.dim] % tp != 0) sh_engine_place(e, acc, IR_AXIS_TP, ptp);
    }
  }
  for (int k = 0; k < 2; k++) { /* loss and correct-prediction sums: partial over dp */
    int in = k == 0 ? t->loss_sum_input : t->correct_sum_input;
    if (in >= 0) sh_engine_place(e, g->inputs[in], IR_AXIS_DP, dp > 1 ? sh_P() : sh_R());
  }
  if (sh_engine_run(e) != 0) goto done;
  for (int i = 0; i < t->n_params; i++)
    for (int a = 0; a < IR_NUM_AXES; a++) lay[i].param[a] = sh_engine_layout(e, g->params[i], a);
  for (int o = 0; o < g->n_outputs; o++) {
    int pi = -1;
    for (int i = 0; i < t->n_params; i++)
      if (t->grad_output[i] == o) pi = i;
    sh_st want[IR_NUM_AXES];
    for (int a = 0; a < IR_NUM_AXES; a++) want[a] = UNSET;
    if (pi >= 0 && t->acc_input0 >= 0) { /* the new sum is fed back as the sum */
      for (int a = 0; a < IR_NUM_AXES; a++) want[a] = sh_engine_layout(e, g->inputs[t->acc_input0 + pi], a);
    } else if (pi >= 0 && (zero >= 2 || (dp > 1 && !pipelined(&g->mesh) && distinct_grads(t)))) {
      /* handed over reduced over dp to the state's layout (all-reduced;
       * ZeRO 1 and 2: reduce-scattered), in the layout tp leaves it (a
       * gradient split where its parameter is not is reduced split, and
       * the update gathers it: plan/plan.c's step_reduces counts that
       * route): the engine places each collective where its gradient is
       * made, inside the backward, where a device overlaps it with the
       * rest (as DDP); with K > 1 micro-batches (the branch above) the sums
       * stay partial, reduced once by the update (DDP's no_sync);
       * pipelined (pp), the update reduces them (each stage's own) */
      want[IR_AXIS_DP] = lay[pi].state[IR_AXIS_DP];
    } else if (o == t->loss_sum_output || o == t->correct_sum_output) {
      int in = o == t->loss_sum_output ? t->loss_sum_input : t->correct_sum_input;
      for (int a = 0; a < IR_NUM_AXES; a++) want[a] = sh_engine_layout(e, g->inputs[in], a);
    }
    sh_engine_output(e, o, want);
    for (int a = 0; a < IR_NUM_AXES; a++) {
      sh_st s = want[a].kind != SH_UNSET ? want[a] : sh_engine_layout(e, g->outputs[o].value, a);
      if (pi >= 0) lay[pi].grad[a] = s;
      if (o == t->loss_sum_output) sums[a] = s;
      if (o == t->correct_sum_output) sums[IR_NUM_AXES + a] = s;
    }
  }
  out = sh_engine_finish(e);
  if (out) bucket_gradient_collectives(out, bucket > 0 ? bucket : GRAD_BUCKET_BYTES);
done:
  sh_engine_free(e);
  return out;
}

static ir_graph *shard_update(const pass_training *t, int zero, const param_layout *lay, const sh_st *sums, ir_diag *d) {
  const ir_graph *u = t->update;
  int np = t->n_params, per = np ? t->n_states / np : 0;
  sh_engine *e = sh_engine_new(u, d, false);
  ir_graph *out = NULL;
  /* the Inf/NaN count: one all-reduce where split and replicated parameters
   * mix (tp; dp under ZeRO); none on dp without ZeRO (every rank holds the
   * same parameters) */
  sh_engine_slice_counts(e, IR_AXIS_TP);
  if (zero >= 1) sh_engine_slice_counts(e, IR_AXIS_DP);
  for (int a = 0; a < IR_NUM_AXES; a++) {
    for (int i = 0; i < np; i++) {
      sh_engine_place(e, u->inputs[i], a, lay[i].grad[a]);
      sh_engine_place(e, u->params[i], a, lay[i].param[a]);
      for (int k = 0; k < per; k++) sh_engine_place(e, u->inputs[np + i * per + k], a, lay[i].state[a]);
    }
    sh_engine_place(e, u->inputs[t->lr_input], a, sh_R());
    sh_engine_place(e, u->inputs[t->step_input], a, sh_R());
    sh_engine_place(e, u->inputs[t->update_loss_sum_input], a, sums[a]);
    if (t->update_correct_sum_input >= 0) sh_engine_place(e, u->inputs[t->update_correct_sum_input], a, sums[IR_NUM_AXES + a]);
  }
  /* every gradient reduced once, at the start, to its state's layout (a
   * reduce-scatter under ZeRO, else an all-reduce): the optimizer's many
   * readers of it then share that */
  for (int i = 0; i < np; i++) sh_engine_convert_input(e, u->inputs[i], lay[i].state);
  if (sh_engine_run(e) != 0) goto done;
  for (int o = 0; o < u->n_outputs; o++) {
    sh_st want[IR_NUM_AXES];
    for (int a = 0; a < IR_NUM_AXES; a++) {
      if (o < np) want[a] = lay[o].param[a];
      else if (o < np + t->n_states) want[a] = lay[(o - np) / (per ? per : 1)].state[a];
      else want[a] = sh_R(); /* loss, accuracy, nonfinite: the same on every rank */
    }
    sh_engine_output(e, o, want);
  }
  out = sh_engine_finish(e);
done:
  sh_engine_free(e);
  return out;
}

static int shard_dp_tp(pass_training *t, const pass_options *o);

/* The eval graph (the forward alone) sharded with the step's parameter
 * layouts lay and its data placement, its outputs (the loss, the correct
 * count) whole on every rank. */
static ir_graph *shard_eval(const pass_training *t, const param_layout *lay, ir_diag *d) {
  const ir_graph *g = t->eval;
  sh_engine *e = sh_engine_new(g, d, true);
  ir_graph *out = NULL;
  if (place_data(e, g, t->n_data, t->batch_dim, d) != 0) goto done;
  for (int i = 0; i < t->n_params; i++) {
    sh_engine_place(e, g->params[i], IR_AXIS_DP, lay[i].param[IR_AXIS_DP]);
    if (lay[i].param[IR_AXIS_TP].kind != SH_UNSET) sh_engine_place(e, g->params[i], IR_AXIS_TP, lay[i].param[IR_AXIS_TP]);
  }
  if (sh_engine_run(e) != 0) goto done;
  for (int o = 0; o < g->n_outputs; o++) {
    sh_st whole[IR_NUM_AXES];
    for (int a = 0; a < IR_NUM_AXES; a++) whole[a] = sh_R();
    sh_engine_output(e, o, whole);
  }
  out = sh_engine_finish(e);
done:
  sh_engine_free(e);
  return out;
}

int pass_shard_training(pass_training *t, const pass_options *o) {
  ir_mesh m = t->step->mesh; /* (the graphs are replaced) */
  if (mesh_active(&m) && shard_dp_tp(t, o) != 0) return -1;
  if (!pipelined(&m)) return 0;
  int stage = m.stage >= 0 ? m.stage : 0;
  if (sh_cut_stages(t, stage, o->diag) != 0) return -1;
  return t->eval ? sh_cut_eval_stage(t, stage, o->diag) : 0;
}

const ir_node *sh_heads_conflict(const ir_graph *g, int tp) {
  for (int i = 0; i < g->n_nodes && tp > 1; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_ATTENTION || n->in[0]->type.rank < 3) continue;
    const ir_value *q = n->in[0];
    if (q->type.dims[q->type.rank - 3] % tp != 0) return n;
  }
  return NULL;
}

/* tp splits attention by heads: they must divide (an error at the
 * attention's line naming the heads' value, not a silent replication). */
/* A KV cache (generation's cache.k.L / cache.v.L inputs and outputs) is
 * split along its kv heads over tp: tp must divide them. */
static int check_kv_cache(const ir_graph *g, int tp, ir_diag *d) {
  for (int i = 0; i < g->n_inputs + g->n_outputs && tp > 1; i++) {
    const ir_value *v = i < g->n_inputs ? g->inputs[i] : g->outputs[i - g->n_inputs].value;
    const char *name = i < g->n_inputs ? v->name : g->outputs[i - g->n_inputs].name;
    int h = pass_kv_cache_heads_dim(name, &v->type);
    if (h < 0 || v->type.dims[h] % tp == 0) continue;
    ir_loc at = v->loc; /* the attention that reads it, where there is one */
    for (int k = 0; k < g->n_nodes; k++) {
      const ir_node *n = g->nodes[k];
      if (!n->dead && n->op == IR_OP_ATTENTION && (n->in[1] == v || n->in[2] == v)) {
        at = n->loc;
        break;
      }
    }
    char t[160];
    ir_error(d, at, "tensor parallelism (tp = %d) splits the KV cache %s (%s) along its %lld kv heads (dim %d), "
             "which do not divide by %d", tp, name, ir_type_str(&v->type, t, sizeof t), (long long)v->type.dims[h], h, tp);
    return -1;
  }
  return 0;
}

static int check_heads(const ir_graph *g, int tp, ir_diag *d) {
  const ir_node *n = sh_heads_conflict(g, tp);
  if (!n) return 0;
  const ir_value *q = n->in[0];
  int hd = q->type.rank - 3;
  ir_error(d, n->loc, "tensor parallelism (tp = %d) splits the attention heads (dim %d of %%%s, %lld heads), which "
           "do not divide by %d", tp, hd, q->name, (long long)q->type.dims[hd], tp);
  return -1;
}

int sh_place_data(sh_engine *e, const ir_graph *g, ir_diag *d) { return place_data(e, g, g->n_inputs, NULL, d); }

int sh_place_megatron(sh_engine *e, const ir_graph *g, ir_diag *d) {
  if (place_data(e, g, g->n_inputs, NULL, d) != 0) return -1;
  place_vocab(e, g);
  return 0;
}

/* The sharding constraints of the model (shard_hint: .tg shard(x, [...])):
 * a dim split over an axis must divide by its size (an error at the
 * constraint's line, naming the value, the dim and the axis). */
static int check_hints(const ir_graph *g, ir_diag *d) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    const ir_attr *a = ir_node_attr(n, "spec");
    if (n->dead || n->op != IR_OP_SHARD_HINT || !a || a->kind != IR_ATTR_STR) continue;
    ir_shard s;
    char err[200];
    const ir_type *t = &n->in[0]->type;
    if (ir_shard_spec_parse(a->s, t->rank, &s, err, sizeof err) != 0) continue; /* the verifier reports it */
    for (int k = 0; k < t->rank; k++)
      for (int ax = 0; ax < IR_NUM_AXES; ax++) {
        int size = g->mesh.size[ax];
        if (((s.split[k] >> ax) & 1) && size > 1 && t->dims[k] % size != 0) {
          ir_error(d, n->loc, "shard(%%%s, ...) splits dim %d (size %lld) over %s = %d, which does not divide it",
                   n->in[0]->name, k, (long long)t->dims[k], ir_axis_name((ir_axis)ax), size);
          return -1;
        }
      }
  }
  return 0;
}

/* Every parameter's layouts, for tp layouts tp and the ZeRO stage: the
 * optimizer state (and under ZeRO 3 the parameter) split over dp along the
 * parameter's ZeRO dim. */
static void param_layouts(const pass_training *t, const sh_st *tp, int zero, param_layout *lay) {
  int dp = t->step->mesh.size[IR_AXIS_DP];
  for (int i = 0; i < t->n_params; i++) {
    const ir_value *p = t->step->params[i];
    int z = zero >= 1 && dp > 1 ? zero_dim(&p->type, tp[i], dp) : -1;
    for (int a = 0; a < IR_NUM_AXES; a++) lay[i].param[a] = lay[i].state[a] = lay[i].grad[a] = sh_R();
    lay[i].param[IR_AXIS_TP] = lay[i].state[IR_AXIS_TP] = tp[i];
    if (z >= 0) {
      lay[i].state[IR_AXIS_DP] = sh_S(z);
      if (zero >= 3) lay[i].param[IR_AXIS_DP] = sh_S(z);
    }
  }
}

/* The step and update graphs of t sharded with the parameters' tp layouts
 * tp: 0, or -1 after reporting through d. */
static int shard_program(const pass_training *t, const sh_st *tp, int zero, double bucket, ir_graph **step,
                         ir_graph **update,
                         ir_graph **eval, ir_diag *d, sh_st *found) {
  int np = t->n_params;
  param_layout *lay = calloc((size_t)np + 1, sizeof *lay);
  sh_st sums[2 * IR_NUM_AXES];
  if (!lay) IR_DIE("out of memory (lay)");
  for (int a = 0; a < 2 * IR_NUM_AXES; a++) sums[a] = sh_R();
  param_layouts(t, tp, zero, lay);
  bool probe = false; /* tp unplaced: the rules place the parameters (Megatron-LM's rule) */
  for (int i = 0; i < np; i++) probe |= tp[i].kind == SH_UNSET;
  *step = shard_step(t, zero, bucket, lay, sums, probe, d);
  for (int i = 0; *step && found && i < np; i++) found[i] = lay[i].param[IR_AXIS_TP];
  *update = *step && !probe ? shard_update(t, zero, lay, sums, d) : NULL;
  if (eval && *update && !(*eval = shard_eval(t, lay, d))) {
    ir_graph_free(*update);
    *update = NULL;
  }
  if (probe && *step) {
    free(lay);
    *update = ir_graph_new("probe", NULL);
    return 0;
  }
  free(lay);
  if (*update) return 0;
  ir_graph_free(*step);
  *step = NULL;
  return -1;
}

typedef struct {
  const pass_training *t;
  int zero;
  ir_diag *quiet;
} train_eval;

static int eval_train(void *ctx, const sh_st *tp, sh_cost *cost) {
  const train_eval *x = ctx;
  ir_graph *step, *update;
  if (shard_program(x->t, tp, x->zero, 0, &step, &update, NULL, x->quiet, NULL) != 0) return -1;
  sh_cost a = sh_graph_cost(step), b = sh_graph_cost(update);
  *cost = (sh_cost){.heavy = a.heavy + b.heavy, .seconds = a.seconds + b.seconds, .comm = a.comm + b.comm};
  ir_graph_free(step);
  ir_graph_free(update);
  return 0;
}

static int shard_dp_tp(pass_training *t, const pass_options *o) {
  const ir_mesh *m = &t->step->mesh;
  if (check_heads(t->step, m->size[IR_AXIS_TP], o->diag) != 0) return -1;
  if (check_hints(t->step, o->diag) != 0) return -1;
  int np = t->n_params;
  sh_st *tp = calloc((size_t)np + 1, sizeof *tp);
  if (!tp) IR_DIE("out of memory (tp)");
  for (int i = 0; i < np; i++) tp[i] = sh_R();
  if (m->size[IR_AXIS_TP] > 1 && o->tp_layouts) { /* as given (tgc train and plan: pass_tp_search) */
    if (given_layouts(t->step, o->tp_layouts, tp, o->diag) != 0) {
      free(tp);
      return -1;
    }
  } else if (m->size[IR_AXIS_TP] > 1 && !o->tp_search) { /* Megatron-LM's rule: a probe run, the rules placing them */
    for (int i = 0; i < np; i++) tp[i] = (sh_st){SH_UNSET, 0, 1};
    ir_graph *step, *update;
    if (shard_program(t, tp, 0, o->bucket_bytes, &step, &update, NULL, o->diag, tp) != 0) {
      free(tp);
      return -1;
    }
    ir_graph_free(step);
    ir_graph_free(update);
  } else if (m->size[IR_AXIS_TP] > 1) { /* the parameters' tp layouts, by search */
    train_eval x = {t, o->zero, quiet_diag()};
    sh_search_report *rep = NULL;
    sh_search_tp(t->step, eval_train, &x, NULL, tp, dumps_shard(o) ? &rep : NULL, o->diag);
    ir_diag_free(x.quiet);
    if (rep) sh_search_print(o->dump_out ? o->dump_out : stdout, rep);
    sh_search_report_free(rep);
  }
  ir_graph *step, *update, *eval = NULL;
  int rc = shard_program(t, tp, o->zero, o->bucket_bytes, &step, &update, t->eval ? &eval : NULL, o->diag, NULL);
  free(tp);
  if (rc != 0) return -1;
  if (eval) {
    ir_graph_free(t->eval);
    t->eval = eval;
  }
  if (dumps_shard(o)) print_padding(o->dump_out ? o->dump_out : stdout, step);
  ir_graph_free(t->step);
  ir_graph_free(t->update);
  t->step = step;
  t->update = update;
  return 0;
}
