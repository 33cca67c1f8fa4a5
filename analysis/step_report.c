/* analysis/step_report.c — what one training step costs, as `tgc stats`
 * reports it: the parameters by group, and the roofline of every op on a
 * target with the step time and MFU it adds up to. The command prints.
 *
 * Groups (first rule that applies; names compared in lower case, name parts
 * split at '.'): embeddings (a table read by an embedding op, or a name with
 * embed, wte, wpe, tok_emb, pos_emb, lm_head, unembed, or a part "output");
 * norms (read by layernorm/rmsnorm as gamma/beta); attention (a name with
 * attn, attention, q_proj, k_proj, v_proj, o_proj, qkv, or a part wq, wk, wv,
 * wo); mlp (mlp, ffn, feed_forward, fc, up_proj, down_proj, gate_proj, or a
 * part w1, w2, w3, up, down, gate); norms (a name with norm, or a part
 * starting with ln); other.
 *
 * The roofline of a node (cost.c's FLOPs and bytes) is max(FLOPs / peak,
 * bytes / bandwidth), compute-bound when its intensity reaches the ridge
 * point; a node takes at least its device calls (launches.c) x the target's
 * launch time (targets.def), launch-bound when that is more; the step is
 * the sum over nodes plus the optimizer update as one
 * fused pass that reads parameters, gradients and state (with the master
 * copy) and writes parameters and state, at least the update program's
 * device calls (launches.c's pass_program_calls_of, counted by the caller)
 * x the launch time.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "analysis.h"

static const char *const group_names[PASS_GROUP_COUNT] = {"embeddings", "attention", "mlp", "norms", "other"};

const char *pass_param_group_name(pass_param_group g) {
  return (unsigned)g < PASS_GROUP_COUNT ? group_names[g] : "?";
}

enum { USE_EMBED = 1, USE_NORM = 2 };

static bool has_part(const char *name, const char *const *words) {
  const char *p = name;
  while (*p) {
    size_t n = strcspn(p, ".");
    for (const char *const *w = words; *w; w++)
      if (strlen(*w) == n && strncmp(p, *w, n) == 0) return true;
    p += n;
    if (*p) p++;
  }
  return false;
}

static bool has_sub(const char *name, const char *const *words) {
  for (const char *const *w = words; *w; w++)
    if (strstr(name, *w)) return true;
  return false;
}

static pass_param_group group_of(const char *raw, unsigned uses) {
  static const char *const emb_sub[] = {"embed", "wte", "wpe", "tok_emb", "pos_emb", "lm_head", "unembed", NULL};
  static const char *const emb_part[] = {"output", NULL};
  static const char *const attn_sub[] = {"attn", "attention", "q_proj", "k_proj", "v_proj", "o_proj", "qkv", NULL};
  static const char *const attn_part[] = {"wq", "wk", "wv", "wo", NULL};
  static const char *const mlp_sub[] = {"mlp", "ffn", "feed_forward", "fc", "up_proj", "down_proj", "gate_proj", NULL};
  static const char *const mlp_part[] = {"w1", "w2", "w3", "up", "down", "gate", NULL};
  static const char *const norm_sub[] = {"norm", NULL};
  if (uses & USE_EMBED) return PASS_GROUP_EMBEDDINGS;
  if (uses & USE_NORM) return PASS_GROUP_NORMS;
  char name[256];
  size_t i = 0;
  for (; raw[i] && i + 1 < sizeof name; i++) name[i] = (char)tolower((unsigned char)raw[i]);
  name[i] = 0;
  if (has_sub(name, emb_sub) || has_part(name, emb_part)) return PASS_GROUP_EMBEDDINGS;
  if (has_sub(name, attn_sub) || has_part(name, attn_part)) return PASS_GROUP_ATTENTION;
  if (has_sub(name, mlp_sub) || has_part(name, mlp_part)) return PASS_GROUP_MLP;
  if (has_sub(name, norm_sub)) return PASS_GROUP_NORMS;
  for (const char *p = name; *p;) { /* a name part starting with ln (ln_1_g, ln_f_b) */
    if (p[0] == 'l' && p[1] == 'n') return PASS_GROUP_NORMS;
    p += strcspn(p, ".");
    if (*p) p++;
  }
  return PASS_GROUP_OTHER;
}

void pass_param_groups(const ir_graph *g, pass_param_group *groups) {
  unsigned *uses = calloc((size_t)g->n_values + 1, sizeof *uses);
  if (!uses) IR_DIE("out of memory (uses)");
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    for (int k = 0; k < n->n_in; k++) {
      const ir_value *v = n->in[k];
      if (v->role != IR_ROLE_PARAM || v->id < 0 || v->id >= g->n_values) continue;
      if (n->op == IR_OP_EMBEDDING && k == 0) uses[v->id] |= USE_EMBED;
      if ((n->op == IR_OP_LAYERNORM || n->op == IR_OP_RMSNORM) && k >= 1) uses[v->id] |= USE_NORM;
    }
  }
  for (int i = 0; i < g->n_params; i++) {
    const ir_value *p = g->params[i];
    groups[i] = group_of(p->name, p->id >= 0 && p->id < g->n_values ? uses[p->id] : 0);
  }
  free(uses);
}

void pass_roofline_of(const ir_graph *g, const pass_step_costing *c, pass_roofline *r) {
  memset(r, 0, sizeof *r);
  r->rows = calloc((size_t)g->n_nodes + 1, sizeof *r->rows);
  if (!r->rows) IR_DIE("out of memory (r->rows)");
  const pass_target *t = c->target;
  double bw = t ? t->bandwidth : 0;
  r->peak = t ? pass_target_peak(t, c->elem_bytes) : 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead) continue;
    pass_cost nc = pass_node_cost(n);
    pass_roofline_row *row = &r->rows[r->n_rows++];
    *row = (pass_roofline_row){n, nc.flops, nc.bytes, 0, false, nc.launches, false};
    r->launches += nc.launches;
    if (t) {
      row->time = pass_roofline_seconds(nc.flops, nc.bytes, r->peak, bw);
      row->compute_bound = pass_roofline_compute_bound(nc.flops, nc.bytes, r->peak, bw);
      double floor = nc.launches * t->launch; /* back-to-back calls take at least this */
      if (floor > row->time) {
        r->launch_time += floor - row->time;
        row->time = floor;
        row->launch_bound = true;
      }
      for (int p = 0; p < PASS_NUM_PHASES; p++) r->phase_time[p] += pass_node_phase_share(n, (pass_phase)p) * row->time;
    }
    pass_roofline_kind *k = &r->kinds[n->op];
    k->flops += nc.flops, k->bytes += nc.bytes, k->time += row->time, k->launches += nc.launches;
    k->nodes++, k->compute_nodes += row->compute_bound;
  }
  if (!t) return;
  const pass_train_memory *m = &c->memory;
  double opt_bytes = 2 * m->params + m->grads + 2 * m->optimizer;
  double update = pass_roofline_seconds(c->optimizer_flops, opt_bytes, r->peak, bw);
  r->update_launches = c->update_launches;
  if (c->update_launches * t->launch > update) { /* its multi-tensor launches, norm, checks and scalars */
    r->launch_time += c->update_launches * t->launch - update;
    update = c->update_launches * t->launch;
    r->update_launch_bound = true;
  }
  r->phase_time[PASS_PHASE_OPTIMIZER] += update;
  for (int p = 0; p < PASS_NUM_PHASES; p++) r->step_time += r->phase_time[p];
  r->mfu = pass_mfu(c->params, c->tokens, r->step_time, r->peak);
}

void pass_roofline_free(pass_roofline *r) {
  free(r->rows);
  r->rows = NULL;
  r->n_rows = 0;
}
