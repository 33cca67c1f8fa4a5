/* passes/kv_cache.c — generation with a KV cache, as two graphs made from
 * the model after fuse-attention (docs/generation.md):
 *
 *   prefill  the model at T = the window (the context): unchanged, plus the
 *            outputs "cache.k.L" and "cache.v.L", the k and v operands of
 *            attention L (in graph order) — the cache of every position of
 *            the window, [.., H, T, E] and [.., H, T, F].
 *   decode   the model at T = 1, reading one token at position pos (a new
 *            input "pos": i32[1]):
 *              - its positions (the value that is iota(T) along axis 0, or a
 *                slice of an iota from 0, of length T = 1) become pos;
 *              - each attention L (q, k, v of one row) reads the cache: new
 *                inputs cache.k.L [.., H, S, E], cache.v.L [.., H, S, F] (S
 *                the window), the row written at pos,
 *                  k' = where(iota(S) == pos, k, cache.k.L)     (one fused kernel)
 *                and attention(q, k', v', pos): row 0 sees keys j <= pos;
 *              - outputs cache.k.L = k', cache.v.L = v': the updated cache.
 *            The caller donates the cache inputs: k' is the same type as
 *            cache.k.L and nothing reads cache.k.L after it, so the memory
 *            plan computes k' in the input's buffer (the cache stays where it
 *            is, step after step; rt_program_output says where it is).
 *
 * Both graphs are verified models; the rest of the pipeline (canonicalize,
 * fusion, the memory plan) runs on them as on any graph. On a mesh the
 * shard pass splits every cache.k.L / cache.v.L (inputs and outputs) along
 * its heads over tp (pass_kv_cache_heads_dim): each rank keeps the K/V of
 * the kv heads its query heads read, never the whole cache.
 * requires: the graph after fuse-attention; invalidates: node indices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "pass.h"

/* The attention nodes of g, in graph order (malloc'd; *n their count);
 * NULL after reporting when there is none. */
static ir_node **attentions(const ir_graph *g, int *n, ir_diag *d) {
  ir_node **out = malloc((size_t)(g->n_nodes + 1) * sizeof *out);
  if (!out) IR_DIE("out of memory (out)");
  *n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i]->dead && g->nodes[i]->op == IR_OP_ATTENTION) out[(*n)++] = g->nodes[i];
  if (*n > 0) return out;
  free(out);
  ir_error_plain(d, "generate: the model has no attention, so no KV cache to keep (--no-kv-cache runs it)");
  return NULL;
}

/* Every attention must read the cache: no softmax left unfused. */
static int check_fused(const ir_graph *g, const char *what, ir_diag *d) {
  pass_attention_miss m;
  if (pass_attention_misses(g, &m, 1) > 0) {
    ir_error(d, m.at->loc, "%s: the KV cache needs every attention fused (%s); --no-kv-cache runs it unfused", what,
             m.why);
    return -1;
  }
  return 0;
}

int pass_kv_cache_heads_dim(const char *name, const ir_type *t) {
  bool cache = strncmp(name, "cache.k.", 8) == 0 || strncmp(name, "cache.v.", 8) == 0;
  return cache && t->rank >= 4 ? t->rank - 3 : -1;
}

int pass_kv_prefill(ir_graph *g, int *n_layers, ir_diag *d) {
  if (check_fused(g, "generate", d) != 0) return -1;
  int n = 0;
  ir_node **att = attentions(g, &n, d);
  if (!att) return -1;
  for (int l = 0; l < n; l++) {
    char name[64];
    snprintf(name, sizeof name, "cache.k.%d", l);
    ir_graph_add_output(g, name, att[l]->in[1]);
    snprintf(name, sizeof name, "cache.v.%d", l);
    ir_graph_add_output(g, name, att[l]->in[2]);
  }
  free(att);
  *n_layers = n;
  return 0;
}

/* v is the positions of a window of one token: iota along axis 0 of length
 * 1, or slice {axis 0, start 0, step 1} of such an iota. */
static bool is_positions(const ir_value *v) {
  const ir_node *n = v->def;
  if (!n || n->dead || v->type.rank != 1 || v->type.dims[0] != 1 ||
      (v->type.dtype != IR_DT_I32 && v->type.dtype != IR_DT_I64))
    return false;
  if (n->op == IR_OP_SLICE) {
    if (ir_node_attr_int(n, "axis", -1) != 0 || ir_node_attr_int(n, "start", -1) != 0 ||
        ir_node_attr_int(n, "step", 1) != 1)
      return false;
    n = n->in[0]->def;
    if (!n) return false;
  }
  return n && n->op == IR_OP_IOTA && ir_node_attr_int(n, "axis", -1) == 0 && n->out[0]->type.rank == 1;
}

/* k' = where(iota(S) == pos, k, cache): the cache with row pos replaced. */
static ir_value *cache_write(ir_graph *g, ir_value *row, ir_value *cache, ir_value *pos, ir_loc loc, int layer) {
  int r = cache->type.rank;
  ir_type it = {.dtype = IR_DT_I32, .rank = 2, .dims = {cache->type.dims[r - 2], 1}};
  ir_attr axis = ir_attr_int("axis", 0);
  char err[256];
  ir_node *io = ir_graph_build(g, IR_OP_IOTA, NULL, 0, &axis, 1, &it, NULL, loc, err, sizeof err);
  if (!io) IR_DIE("kv-cache: iota: %s", err);
  ir_value *eq_in[2] = {io->out[0], pos};
  ir_value *hit = ir_graph_build1(g, IR_OP_EQ, eq_in, 2, NULL, 0, NULL, loc);
  ir_value *w_in[3] = {hit, row, cache};
  ir_value *w = ir_graph_build1(g, IR_OP_WHERE, w_in, 3, NULL, 0, NULL, loc);
  io->layer = hit->def->layer = w->def->layer = layer;
  return w;
}

int pass_kv_decode(ir_graph *g, int64_t window, int *n_layers, int *pos_input, ir_diag *d) {
  if (check_fused(g, "generate", d) != 0) return -1;
  int n = 0;
  ir_node **att = attentions(g, &n, d);
  if (!att) return -1;
  ir_type pt = {.dtype = IR_DT_I32, .rank = 1, .dims = {1}};
  *pos_input = g->n_inputs;
  ir_value *pos = ir_graph_add_input(g, ir_graph_unique_name(g, "pos"), pt, g->nodes[0]->loc);
  /* the positions: pos (cast to their dtype); a model without positions (no
   * position embedding, no rotary angles) has none */
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *nd = g->nodes[i];
    if (nd->dead || nd->n_out != 1 || !is_positions(nd->out[0])) continue;
    ir_value *p = pos;
    if (nd->out[0]->type.dtype != IR_DT_I32) {
      ir_attr to = ir_attr_dtype("to", nd->out[0]->type.dtype);
      p = ir_graph_build1(g, IR_OP_CAST, &pos, 1, &to, 1, NULL, nd->loc);
      ir_graph_move_tail(g, 1, i + 1);
      i++;
    }
    ir_replace_all_uses(g, nd->out[0], p);
  }
  for (int l = 0; l < n; l++) {
    ir_node *a = att[l];
    int at = 0;
    while (g->nodes[at] != a) at++;
    ir_value *q = a->in[0], *k = a->in[1], *v = a->in[2];
    int r = q->type.rank;
    if (r < 3 || q->type.dims[r - 2] != 1 || k->type.dims[r - 2] != 1 || !ir_node_attr_int(a, "causal", 0) ||
        ir_node_attr(a, "heads")) {
      char b[128];
      ir_error(d, a->loc, "generate: the KV cache needs causal attention over one new row (q[..., 1, E]), got q %s",
               ir_type_str(&q->type, b, sizeof b));
      free(att);
      return -1;
    }
    char name[64];
    ir_type kt = k->type, vt = v->type;
    kt.dims[r - 2] = vt.dims[r - 2] = window;
    snprintf(name, sizeof name, "cache.k.%d", l);
    ir_value *kc = ir_graph_add_input(g, name, kt, a->loc);
    snprintf(name, sizeof name, "cache.v.%d", l);
    ir_value *vc = ir_graph_add_input(g, name, vt, a->loc);
    int before = g->n_nodes;
    ir_value *k2 = cache_write(g, k, kc, pos, a->loc, a->layer);
    ir_value *v2 = cache_write(g, v, vc, pos, a->loc, a->layer);
    ir_value *in[4] = {q, k2, v2, pos};
    ir_type in_t[4] = {q->type, k2->type, v2->type, pos->type}, out_t[2];
    int n_out = 0;
    char err[256];
    if (ir_infer(IR_OP_ATTENTION, in_t, 4, a->attrs, a->n_attrs, out_t, &n_out, err, sizeof err) != 0)
      IR_DIE("kv-cache: attention over the cache: %s", err);
    const char *names[2] = {NULL, "lse"};
    ir_node *na = ir_graph_add_node(g, IR_OP_ATTENTION, in, 4, out_t, n_out, a->attrs, a->n_attrs, names, a->loc);
    na->layer = a->layer;
    for (int j = 0; j < 2; j++) na->out[j]->role = a->out[j]->role;
    ir_graph_move_tail(g, g->n_nodes - before, at);
    const char *oname = a->out[0]->name;
    a->out[0]->name = na->out[0]->name;
    na->out[0]->name = oname;
    ir_replace_all_uses(g, a->out[0], na->out[0]);
    ir_replace_all_uses(g, a->out[1], na->out[1]);
    a->dead = true;
    snprintf(name, sizeof name, "cache.k.%d", l);
    ir_graph_add_output(g, name, k2);
    snprintf(name, sizeof name, "cache.v.%d", l);
    ir_graph_add_output(g, name, v2);
  }
  free(att);
  ir_graph_compact(g);
  *n_layers = n;
  return 0;
}
