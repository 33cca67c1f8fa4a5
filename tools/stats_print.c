/* tools/stats_print.c — the two renderings of a `tgc stats` report: text
 * (grouped digits, SI and binary units, per-op tables) and one JSON object
 * with exact numbers (integers as integers). cmd_stats.c gathers the figures. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "stats.h"

const char *stats_grouped(double v, char *buf, size_t n) {
  if (!(fabs(v) < 9.2e18) || v != floor(v)) {
    snprintf(buf, n, "%.4g", v);
    return buf;
  }
  char raw[32];
  snprintf(raw, sizeof raw, "%lld", (long long)v);
  size_t len = strlen(raw), k = 0;
  const char *p = raw;
  if (*p == '-') buf[k++] = *p++, len--;
  for (size_t i = 0; i < len && k + 2 < n; i++) {
    if (i && (len - i) % 3 == 0) buf[k++] = ',';
    buf[k++] = p[i];
  }
  buf[k] = 0;
  return buf;
}

/* "698.36 GB, 650.41 GiB" (decimal and binary units side by side) */
static const char *both_units(double b, char *buf, size_t n) {
  const char *dec[] = {"B", "kB", "MB", "GB", "TB", "PB"}, *bin[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0, w = 0;
  double x = b, y = b;
  while (x >= 1000 && u < 5) x /= 1000, u++;
  while (y >= 1024 && w < 5) y /= 1024, w++;
  if (u == 0) snprintf(buf, n, "%.0f B", b);
  else snprintf(buf, n, "%.2f %s, %.2f %s", x, dec[u], y, bin[w]);
  return buf;
}

/* 2.15e15 -> "2.15 PFLOP" style (SI prefixes) */
const char *stats_si(double v, const char *unit, char *buf, size_t n) {
  const char *pre[] = {"", "k", "M", "G", "T", "P", "E"};
  int u = 0;
  while (fabs(v) >= 1000 && u < 6) v /= 1000, u++;
  snprintf(buf, n, "%.4g %s%s", v, pre[u], unit);
  return buf;
}

const char *stats_seconds(double t, char *buf, size_t n) {
  if (t == 0) snprintf(buf, n, "0 s");
  else if (t >= 1) snprintf(buf, n, "%.3f s", t);
  else if (t >= 1e-3) snprintf(buf, n, "%.3f ms", t * 1e3);
  else snprintf(buf, n, "%.3f us", t * 1e6);
  return buf;
}

static const char *bound_of(const pass_roofline_kind *k) {
  if (k->compute_nodes == k->nodes) return "compute";
  return k->compute_nodes ? "mixed" : "memory";
}

/* Ops by kind, the most expensive first (time on the target, else FLOPs). */
static int kind_order(const stats *s, int *order) {
  int n = 0;
  for (int op = 0; op < IR_NUM_OPS; op++)
    if (s->roof.kinds[op].nodes) order[n++] = op;
  for (int i = 1; i < n; i++) /* insertion sort, stable by op enum */
    for (int j = i; j > 0; j--) {
      const pass_roofline_kind *a = &s->roof.kinds[order[j - 1]], *b = &s->roof.kinds[order[j]];
      bool swap = b->time > a->time ||
                  (b->time == a->time && (b->flops > a->flops || (b->flops == a->flops && b->bytes > a->bytes)));
      if (!swap) break;
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  return n;
}

static int row_cmp(const void *pa, const void *pb) {
  const pass_roofline_row *a = pa, *b = pb;
  if (a->time != b->time) return a->time < b->time ? 1 : -1;
  if (a->flops != b->flops) return a->flops < b->flops ? 1 : -1;
  if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
  return a->n->id - b->n->id;
}

/* A copy of the rows, largest first (predicted time, then FLOPs, bytes,
 * node order): the "top ops" of both printers. The caller frees it. */
/* One row of the memory plan: live peak, arena, activation peak, saved. */
static void mem_row(FILE *out, const char *label, const pass_mem_report *m) {
  char a[64], b[64], c[64], e[64];
  fprintf(out, "    %-26s %18s  arena %s, activation peak %s, saved for backward %s\n", label,
          stats_grouped((double)m->peak_bytes, a, sizeof a), stats_grouped((double)m->arena_bytes, e, sizeof e),
          stats_grouped((double)m->activation_peak_bytes, b, sizeof b), stats_grouped((double)m->saved_bytes, c, sizeof c));
}

static pass_roofline_row *rows_ranked(const stats *s) {
  pass_roofline_row *sorted = malloc((size_t)(s->roof.n_rows > 0 ? s->roof.n_rows : 1) * sizeof *sorted);
  if (!sorted) IR_DIE("out of memory (sorted)");
  memcpy(sorted, s->roof.rows, (size_t)s->roof.n_rows * sizeof *sorted);
  qsort(sorted, (size_t)s->roof.n_rows, sizeof *sorted, row_cmp);
  return sorted;
}

/* What the lowered step and update programs of tgc train's training
 * program issue per training step (launches.c), without and with CUDA
 * graphs. */
static void print_programs(FILE *out, const stats *s) {
  if (!s->programs) {
    if (s->programs_why) fprintf(out, "\ndevice calls per training step: not counted (%s)\n", s->programs_why);
    return;
  }
  const pass_program_calls *st = &s->step_calls, *up = &s->update_calls;
  double sl = pass_launch_total(st->launches), ul = pass_launch_total(up->launches);
  fprintf(out, "\ndevice calls per training step (tgc train's step and update programs as lowered):\n");
  fprintf(out, "  step     %8.0f  (%.0f kernel launches, %.0f cuBLASLt products, %.0f memsets, copies and zero-fills)\n", sl,
          st->launches.kernels, st->launches.products, st->launches.stream_ops);
  fprintf(out, "  update   %8.0f  (%.0f kernel launches, %d of them multi-tensor for %d parameters; %.0f other calls)\n", ul,
          up->launches.kernels, up->groups, up->grouped_nodes, up->launches.products + up->launches.stream_ops);
  int coll = st->collectives + up->collectives, slices = st->mesh_slices + up->mesh_slices;
  fprintf(out, "  total    %8.0f  and %d collectives", sl + ul, coll);
  if (slices) fprintf(out, " (%d of them mesh slices: no communication)", slices);
  fprintf(out, "\n");
  fprintf(out, "  with CUDA graphs: %d host calls a step (graph launches: the step's %d, the update's %d; collectives %d)\n",
          st->segments + up->segments + coll, st->segments, up->segments, coll);
}

void stats_print_text(FILE *out, const stats *s) {
  char a[64], b[64], c[64], e[96];
  fprintf(out, "model: %s%s%s\n", s->file, s->config ? ", config " : "", s->config ? s->config : "");
  fprintf(out, "settings: dtype %s (%zu bytes per element%s), optimizer %s, checkpoint %s", s->dtype_name,
          s->dtype_bytes, s->mixed ? "; mixed precision: fp32 master weights and optimizer state" : "",
          pass_optimizer_name(s->opt), s->policy);
  if (s->tokens > 0)
    fprintf(out, ", %s tokens per step (%s)", stats_grouped(s->tokens, a, sizeof a),
            strcmp(s->tokens_from, "B*T") == 0 ? (snprintf(e, sizeof e, "B = %lld, T = %lld", (long long)s->cb->i,
                                                          (long long)s->ct->i), e)
                                               : s->tokens_from);
  fprintf(out, "\n");

  fprintf(out, "\nparameters: %s\n", stats_grouped((double)s->param_total, a, sizeof a));
  for (int gi = 0; gi < PASS_GROUP_COUNT; gi++)
    fprintf(out, "  %-12s %22s  %5.1f%%\n", pass_param_group_name((pass_param_group)gi), stats_grouped((double)s->group_total[gi], a, sizeof a),
            s->param_total ? 100.0 * (double)s->group_total[gi] / (double)s->param_total : 0.0);
  if (s->cl)
    fprintf(out, "  closed form 12*l*h^2 + 2*v*h = %s  (l = %s = %lld, h = %s = %lld, v = %s = %lld; exact / closed form = %.4f)\n",
            stats_grouped(s->closed_form, a, sizeof a), s->cl->name, (long long)s->cl->i, s->ch->name,
            (long long)s->ch->i, s->cv->name, (long long)s->cv->i,
            s->closed_form > 0 ? (double)s->param_total / s->closed_form : 0.0);
  else
    fprintf(out, "  closed form 12*l*h^2 + 2*v*h: not shown (the config defines no layers nL, width D and vocabulary V)\n");
  for (int i = 0; i < s->n_params; i++)
    if (s->params[i].padding) fprintf(out, "  padded on the mesh: %s (docs/sharding.md)\n", s->params[i].padding);
  if (s->list_params || s->n_params <= 16) {
    int w = 4;
    for (int i = 0; i < s->n_params; i++)
      if ((int)strlen(s->params[i].name) > w) w = (int)strlen(s->params[i].name);
    for (int i = 0; i < s->n_params; i++) {
      char tb[128];
      fprintf(out, "  %-*s  %-20s %15s  %s\n", w, s->params[i].name, ir_type_str(&s->params[i].type, tb, sizeof tb),
              stats_grouped((double)s->params[i].count, a, sizeof a), pass_param_group_name(s->params[i].group));
    }
  } else {
    fprintf(out, "  (%d tensors: --params lists them)\n", s->n_params);
  }

  if (s->graph.n_wrt < 0) fprintf(out, "\ntraining graph: as given (it already has a backward pass)\n");
  else if (s->graph.n_wrt)
    fprintf(out, "\ntraining graph: gradients of %s%s%s with respect to %d %s\n", s->graph.loss_summed ? "sum(" : "",
            s->graph.loss_name ? s->graph.loss_name : "?", s->graph.loss_summed ? ")" : "", s->graph.n_wrt,
            s->graph.wrt_inputs ? "float inputs" : "parameters");
  else fprintf(out, "\nno gradients (nothing to differentiate by): forward only\n");
  fprintf(out, "\nFLOPs per step:\n");
  fprintf(out, "  forward     %26s  %s\n", stats_grouped(fwd_flops(s), a, sizeof a), stats_si(fwd_flops(s), "FLOP", b, sizeof b));
  fprintf(out, "  backward    %26s  %s\n", stats_grouped(s->cost.flops[PASS_PHASE_BACKWARD], a, sizeof a),
          stats_si(s->cost.flops[PASS_PHASE_BACKWARD], "FLOP", b, sizeof b));
  fprintf(out, "  recompute   %26s  %s (--checkpoint %s)\n", stats_grouped(s->cost.flops[PASS_PHASE_RECOMPUTE], a, sizeof a),
          stats_si(s->cost.flops[PASS_PHASE_RECOMPUTE], "FLOP", b, sizeof b), s->policy);
  fprintf(out, "  optimizer   %26s  %s (%s update)\n", stats_grouped(s->opt_flops, a, sizeof a),
          stats_si(s->opt_flops, "FLOP", b, sizeof b), pass_optimizer_name(s->opt));
  if (s->tokens > 0 && s->param_total > 0)
    fprintf(out, "  6*N*tokens  %26s  %s (forward + backward = %.4f x 6*N*tokens)\n", stats_grouped(six_n_tokens(s), a, sizeof a),
            stats_si(six_n_tokens(s), "FLOP", b, sizeof b), grad_flops(s) / six_n_tokens(s));
  if (fwd_flops(s) > 0) {
    fprintf(out, "  gradient / forward = (forward + backward) / forward = %.3f\n", grad_flops(s) / fwd_flops(s));
    if (s->cost.flops[PASS_PHASE_RECOMPUTE] > 0)
      fprintf(out, "  with recompute: (forward + backward + recompute) / forward = %.3f\n",
              (grad_flops(s) + s->cost.flops[PASS_PHASE_RECOMPUTE]) / fwd_flops(s));
  }

  fprintf(out, "\nmemory for training (%s%s):\n", s->dtype_name, s->mixed ? ", mixed precision" : "");
  char note[128];
  int ns = pass_optimizer_state_count(s->opt);
  snprintf(note, sizeof note, "%s: %d fp32 value%s per parameter%s", pass_optimizer_name(s->opt), ns, ns == 1 ? "" : "s",
           s->mixed ? " + fp32 master weights" : "");
  const struct {
    const char *label;
    double v;
    const char *note;
  } mem[] = {{"parameters", s->m_params, ""},
             {"gradients", s->m_grads, ""},
             {"optimizer", s->m_opt, note},
             {"activations", s->m_act, "peak, --checkpoint"},
             {"total", s->m_total, ""}};
  for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++) {
    fprintf(out, "  %-12s %22s bytes  (%s)", mem[i].label, stats_grouped(mem[i].v, a, sizeof a), both_units(mem[i].v, b, sizeof b));
    if (i == 3) fprintf(out, "  %s %s", mem[i].note, s->policy);
    else if (*mem[i].note) fprintf(out, "  %s", mem[i].note);
    fputc('\n', out);
  }
  if (s->n_dropouts > 0) /* the literature's convention beside tgc's (docs/memory.md, dropout) */
    fprintf(out, "  %-13s %21s bytes  (%s)  not kept: the backward draws them again; kept as 1-byte masks "
                 "(Korthikanti et al.), activations would be %s bytes\n",
            "dropout masks", stats_grouped(s->m_masks, a, sizeof a), both_units(s->m_masks, b, sizeof b),
            stats_grouped(s->m_act + s->m_masks, c, sizeof c));
  if (s->target && s->target->memory > 0)
    fprintf(out, "  on %s (%s): %s\n", s->target->name, both_units(s->target->memory, a, sizeof a),
            s->m_total <= s->target->memory
                ? "fits"
                : (snprintf(e, sizeof e, "does not fit: %.1f x its memory", s->m_total / s->target->memory), e));
  fprintf(out, "  memory plan (live peak; the arena a backend allocates; inputs and parameters not included):\n");
  mem_row(out, "without checkpointing", &s->graph.mem_none);
  if (s->graph.have_unfused) mem_row(out, "without fuse-attention", &s->graph.mem_unfused);
  if (strcmp(s->policy, "none") != 0) {
    char label[64];
    snprintf(label, sizeof label, "with --checkpoint %s", s->policy);
    mem_row(out, label, &s->mem);
  }
  if (s->n_attn_miss > 0) { /* the softmax nodes fuse-attention left, each with why */
    fprintf(out, "\nfuse-attention: fused %d of %d softmax nodes; not fused:\n", s->attn_fused, s->attn_fused + s->n_attn_miss);
    for (int i = 0; i < s->n_attn_miss; i++) fprintf(out, "  %s\n", s->attn_miss[i].why);
  }

  print_programs(out, s);

  if (s->target) {
    const pass_target *t = s->target;
    fprintf(out, "\ntarget %s: %s bf16/fp16, %s fp32/TF32, %s, %s\n", t->name, stats_si(t->flops_bf16, "FLOP/s", a, sizeof a),
            stats_si(t->flops_fp32, "FLOP/s", b, sizeof b), stats_si(t->bandwidth, "B/s", c, sizeof c),
            t->memory > 0 ? both_units(t->memory, e, sizeof e) : "memory not given");
    fprintf(out, "  peak for %s: %s; ridge point %.1f FLOP/byte (compute-bound above it)\n", s->dtype_name,
            stats_si(s->roof.peak, "FLOP/s", a, sizeof a), s->roof.peak / t->bandwidth);
    fprintf(out, "predicted step time (roofline: sum over ops of max(FLOPs/peak, bytes/bandwidth, device calls x %s)):\n",
            stats_seconds(t->launch, b, sizeof b));
    for (int p = 0; p < PASS_NUM_PHASES; p++)
      fprintf(out, "  %-10s %14s%s\n", pass_phase_name((pass_phase)p), stats_seconds(s->roof.phase_time[p], a, sizeof a),
              p == PASS_PHASE_OPTIMIZER ? "  (one fused pass over parameters, gradients and state)" : "");
    fprintf(out, "  %-10s %14s\n", "total", stats_seconds(s->roof.step_time, a, sizeof a));
    fprintf(out, "  device calls %.0f (kernel launches, cuBLASLt products, memsets and zero-fills; the update's %.0f): "
            "the launch floor adds %s\n", s->roof.launches, s->roof.update_launches,
            stats_seconds(s->roof.launch_time, a, sizeof a));
    if (s->tokens > 0)
      fprintf(out, "MFU = 6*N*tokens / (step time * peak) = %.1f%%   (%.4g tokens/s)\n", 100 * s->roof.mfu,
              s->tokens / s->roof.step_time);
  } else {
    fprintf(out, "\n(--target NAME gives the roofline, predicted step time and MFU: ");
    for (int i = 0; i < pass_target_count(); i++) fprintf(out, "%s%s", i ? ", " : "", pass_target_at(i)->name);
    fprintf(out, ")\n");
  }

  fprintf(out, "\nops by kind (all phases; bytes in %s):\n", s->dtype_name);
  fprintf(out, "  %-20s %7s %26s %7s %22s %10s %8s %12s %7s\n", "op", "nodes", "FLOPs", "share", "bytes moved", "FLOP/byte",
          "bound", "time", "time%");
  double total = 0;
  for (int op = 0; op < IR_NUM_OPS; op++) total += s->roof.kinds[op].flops;
  int order[IR_NUM_OPS], nk = kind_order(s, order);
  double step_ops = 0;
  for (int p = 0; p < PASS_NUM_PHASES; p++)
    if (p != PASS_PHASE_OPTIMIZER) step_ops += s->roof.phase_time[p];
  for (int i = 0; i < nk; i++) {
    const pass_roofline_kind *k = &s->roof.kinds[order[i]];
    fprintf(out, "  %-20s %7d %26s %6.1f%% %22s %10.1f %8s %12s %6.1f%%\n", ir_op_name((ir_op)order[i]), k->nodes,
            stats_grouped(k->flops, a, sizeof a), total > 0 ? 100 * k->flops / total : 0.0, stats_grouped(k->bytes, b, sizeof b),
            k->bytes > 0 ? k->flops / k->bytes : 0.0, s->target ? bound_of(k) : "-",
            s->target ? stats_seconds(k->time, c, sizeof c) : "-", step_ops > 0 ? 100 * k->time / step_ops : 0.0);
  }

  int top = s->top < s->roof.n_rows ? s->top : s->roof.n_rows;
  if (top > 0) {
    pass_roofline_row *sorted = rows_ranked(s);
    fprintf(out, "\ntop %d ops by %s:\n", top, s->target ? "predicted time" : "FLOPs");
    fprintf(out, "  %-24s %-18s %-9s %-24s %22s %18s %10s %8s %12s  %s\n", "value", "op", "phase", "type", "FLOPs",
            "bytes", "FLOP/byte", "bound", "time", "from");
    for (int i = 0; i < top; i++) {
      const pass_roofline_row *r = &sorted[i];
      char tb[128];
      const ir_value *v = r->n->n_out ? r->n->out[0] : NULL;
      char from[64] = "-";
      if (r->n->loc.line > 0) {
        int k = snprintf(from, sizeof from, "line %d", r->n->loc.line);
        if (r->n->layer >= 0 && k > 0 && (size_t)k < sizeof from)
          snprintf(from + k, sizeof from - (size_t)k, ", layer %d", r->n->layer);
      }
      fprintf(out, "  %-24s %-18s %-9s %-24s %22s %18s %10.1f %8s %12s  %s\n", v ? v->name : "-", ir_op_name(r->n->op),
              pass_phase_name(pass_node_phase(r->n)), v ? ir_type_str(&v->type, tb, sizeof tb) : "-",
              stats_grouped(r->flops, a, sizeof a), stats_grouped(r->bytes, b, sizeof b), r->bytes > 0 ? r->flops / r->bytes : 0.0,
              s->target ? (r->compute_bound ? "compute" : "memory") : "-", s->target ? stats_seconds(r->time, c, sizeof c) : "-",
              from);
    }
    free(sorted);
  }
  fprintf(out, "\n(analysed in %.2f s: compile, training graph, passes, cost)\n", s->analysis_s);
}

/* an exact integer when it is one and fits in 2^53, else a real */
static json_t *jnum(double v) {
  if (v == floor(v) && fabs(v) <= 9007199254740992.0) return json_integer((json_int_t)v);
  return json_real(v);
}

static json_t *mem_json(const pass_mem_report *m) {
  json_t *o = json_object();
  json_object_set_new(o, "peak_bytes", jnum((double)m->peak_bytes));
  json_object_set_new(o, "arena_bytes", jnum((double)m->arena_bytes));
  json_object_set_new(o, "activation_peak_bytes", jnum((double)m->activation_peak_bytes));
  json_object_set_new(o, "saved_bytes", jnum((double)m->saved_bytes));
  return o;
}

static json_t *cfg_json(const fe_const *e) {
  if (!e) return json_null();
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(e->name));
  json_object_set_new(o, "value", json_integer(e->i));
  return o;
}

static json_t *real_or_null(bool have, double v) { return have ? json_real(v) : json_null(); }

void stats_print_json(FILE *out, const stats *s) {
  json_t *root = json_object();
  json_object_set_new(root, "file", json_string(s->file));
  json_object_set_new(root, "config", s->config ? json_string(s->config) : json_null());
  json_t *set = json_object();
  json_object_set_new(set, "dtype", json_string(s->dtype_name));
  json_object_set_new(set, "dtype_bytes", json_integer((json_int_t)s->dtype_bytes));
  json_object_set_new(set, "mixed_precision", json_boolean(s->mixed));
  json_object_set_new(set, "optimizer", json_string(pass_optimizer_name(s->opt)));
  json_object_set_new(set, "checkpoint", json_string(s->policy));
  json_object_set_new(set, "batch", s->cb && s->cb->kind == FE_CONST_INT ? json_integer(s->cb->i) : json_null());
  json_object_set_new(set, "seq", s->ct && s->ct->kind == FE_CONST_INT ? json_integer(s->ct->i) : json_null());
  json_object_set_new(set, "tokens", s->tokens > 0 ? jnum(s->tokens) : json_null());
  json_object_set_new(root, "settings", set);

  json_t *params = json_object(), *tensors = json_array(), *groups = json_object();
  json_object_set_new(params, "total", jnum((double)s->param_total));
  json_object_set_new(params, "bytes", jnum(s->param_bytes));
  for (int gi = 0; gi < PASS_GROUP_COUNT; gi++) json_object_set_new(groups, pass_param_group_name((pass_param_group)gi), jnum((double)s->group_total[gi]));
  json_object_set_new(params, "by_group", groups);
  json_object_set_new(params, "closed_form", s->cl ? jnum(s->closed_form) : json_null());
  json_t *cc = json_object();
  json_object_set_new(cc, "l", cfg_json(s->cl));
  json_object_set_new(cc, "h", cfg_json(s->ch));
  json_object_set_new(cc, "v", cfg_json(s->cv));
  json_object_set_new(params, "closed_form_constants", cc);
  for (int i = 0; i < s->n_params; i++) {
    json_t *t = json_object(), *shape = json_array();
    json_object_set_new(t, "name", json_string(s->params[i].name));
    json_object_set_new(t, "dtype", json_string(ir_dtype_name(s->params[i].type.dtype)));
    for (int k = 0; k < s->params[i].type.rank; k++) json_array_append_new(shape, json_integer(s->params[i].type.dims[k]));
    json_object_set_new(t, "shape", shape);
    json_object_set_new(t, "count", jnum((double)s->params[i].count));
    json_object_set_new(t, "group", json_string(pass_param_group_name(s->params[i].group)));
    if (s->params[i].padding) json_object_set_new(t, "padding", json_string(s->params[i].padding));
    json_array_append_new(tensors, t);
  }
  json_object_set_new(params, "tensors", tensors);
  json_object_set_new(root, "params", params);

  json_t *fl = json_object();
  json_object_set_new(fl, "forward", jnum(fwd_flops(s)));
  json_object_set_new(fl, "backward", jnum(s->cost.flops[PASS_PHASE_BACKWARD]));
  json_object_set_new(fl, "recompute", jnum(s->cost.flops[PASS_PHASE_RECOMPUTE]));
  json_object_set_new(fl, "optimizer", jnum(s->opt_flops));
  json_object_set_new(fl, "gradient", jnum(grad_flops(s)));
  json_object_set_new(fl, "gradient_ratio", json_real(fwd_flops(s) > 0 ? grad_flops(s) / fwd_flops(s) : 0.0));
  json_object_set_new(fl, "six_n_tokens", s->tokens > 0 ? jnum(six_n_tokens(s)) : json_null());
  json_object_set_new(root, "flops", fl);

  json_t *mem = json_object();
  json_object_set_new(mem, "params", jnum(s->m_params));
  json_object_set_new(mem, "grads", jnum(s->m_grads));
  json_object_set_new(mem, "optimizer", jnum(s->m_opt));
  json_object_set_new(mem, "activations", jnum(s->m_act));
  json_object_set_new(mem, "dropout_masks", jnum(s->m_masks)); /* not kept; the literature's convention */
  json_object_set_new(mem, "total", jnum(s->m_total));
  json_t *cpu = mem_json(&s->mem); /* the CPU executor's predicted peak */
  json_object_update(mem, cpu);
  json_decref(cpu);
  json_object_set_new(mem, "checkpoint", json_string(s->policy));
  json_object_set_new(mem, "no_checkpoint", mem_json(&s->graph.mem_none));
  if (s->graph.have_unfused) json_object_set_new(mem, "no_fuse_attention", mem_json(&s->graph.mem_unfused));
  json_object_set_new(root, "memory", mem);
  if (s->attn_fused + s->n_attn_miss > 0) { /* the model has softmax nodes: what fuse-attention did with them */
    json_t *fa = json_object(), *left = json_array();
    json_object_set_new(fa, "fused", json_integer(s->attn_fused));
    for (int i = 0; i < s->n_attn_miss; i++) json_array_append_new(left, json_string(s->attn_miss[i].why));
    json_object_set_new(fa, "not_fused", left);
    json_object_set_new(root, "fuse_attention", fa);
  }

  json_t *grad = json_object();
  json_object_set_new(grad, "loss", json_string(s->graph.loss_name ? s->graph.loss_name : ""));
  json_object_set_new(grad, "loss_summed", json_boolean(s->graph.loss_summed));
  json_object_set_new(grad, "wrt", json_integer(s->graph.n_wrt));
  json_object_set_new(root, "training", grad);

  bool tg = s->target != NULL;
  if (tg) {
    const pass_target *t = s->target;
    json_t *to = json_object();
    json_object_set_new(to, "name", json_string(t->name));
    json_object_set_new(to, "flops_bf16", jnum(t->flops_bf16));
    json_object_set_new(to, "flops_fp32", jnum(t->flops_fp32));
    json_object_set_new(to, "bandwidth", jnum(t->bandwidth));
    json_object_set_new(to, "memory", jnum(t->memory));
    json_object_set_new(to, "peak", jnum(s->roof.peak));
    json_object_set_new(to, "ridge", json_real(s->roof.peak / t->bandwidth));
    json_object_set_new(to, "source", json_string(t->source ? t->source : ""));
    json_object_set_new(to, "fits", t->memory > 0 ? json_boolean(s->m_total <= t->memory) : json_null());
    json_object_set_new(to, "launch_s", json_real(t->launch));
    json_object_set_new(root, "target", to);
    json_t *pt = json_object();
    for (int p = 0; p < PASS_NUM_PHASES; p++) json_object_set_new(pt, pass_phase_name((pass_phase)p), json_real(s->roof.phase_time[p]));
    json_object_set_new(root, "time_by_phase_s", pt);
  } else {
    json_object_set_new(root, "target", json_null());
    json_object_set_new(root, "time_by_phase_s", json_null());
  }
  json_object_set_new(root, "step_time_s", real_or_null(tg, s->roof.step_time));
  json_object_set_new(root, "mfu", real_or_null(tg && s->tokens > 0, s->roof.mfu));
  json_object_set_new(root, "launches", jnum(s->roof.launches));
  json_object_set_new(root, "launch_time_s", real_or_null(tg, s->roof.launch_time));
  /* the lowered programs per training step (launches.c): null when nothing is trained */
  bool pr = s->programs;
  const pass_program_calls *st = &s->step_calls, *up = &s->update_calls;
  json_object_set_new(root, "step_launches", pr ? jnum(pass_launch_total(st->launches)) : json_null());
  json_object_set_new(root, "update_launches", pr ? jnum(pass_launch_total(up->launches)) : json_null());
  json_object_set_new(root, "update_multi_tensor_launches", pr ? json_integer(up->groups) : json_null());
  json_object_set_new(root, "launches_per_step",
                      pr ? jnum(pass_launch_total(st->launches) + pass_launch_total(up->launches)) : json_null());
  json_object_set_new(root, "collectives", pr ? json_integer(st->collectives + up->collectives) : json_null());
  json_object_set_new(root, "mesh_slices", pr ? json_integer(st->mesh_slices + up->mesh_slices) : json_null());
  json_object_set_new(root, "graph_launches", pr ? json_integer(st->segments + up->segments) : json_null());
  json_object_set_new(root, "step_graph_launches", pr ? json_integer(st->segments) : json_null());
  json_object_set_new(root, "update_graph_launches", pr ? json_integer(up->segments) : json_null());
  json_object_set_new(root, "host_calls_with_graphs",
                      pr ? json_integer(st->segments + up->segments + st->collectives + up->collectives) : json_null());

  json_t *ops = json_array();
  int order[IR_NUM_OPS], nk = kind_order(s, order);
  for (int i = 0; i < nk; i++) {
    const pass_roofline_kind *k = &s->roof.kinds[order[i]];
    json_t *e = json_object();
    json_object_set_new(e, "op", json_string(ir_op_name((ir_op)order[i])));
    json_object_set_new(e, "nodes", json_integer(k->nodes));
    json_object_set_new(e, "flops", jnum(k->flops));
    json_object_set_new(e, "bytes", jnum(k->bytes));
    json_object_set_new(e, "intensity", json_real(k->bytes > 0 ? k->flops / k->bytes : 0.0));
    json_object_set_new(e, "bound", tg ? json_string(bound_of(k)) : json_null());
    json_object_set_new(e, "compute_bound_nodes", tg ? json_integer(k->compute_nodes) : json_null());
    json_object_set_new(e, "time_s", real_or_null(tg, k->time));
    json_object_set_new(e, "launches", jnum(k->launches));
    json_array_append_new(ops, e);
  }
  json_object_set_new(root, "ops", ops);
  json_t *topj = json_array();
  int top = s->top < s->roof.n_rows ? s->top : s->roof.n_rows;
  if (top > 0) {
    pass_roofline_row *sorted = rows_ranked(s);
    for (int i = 0; i < top; i++) {
      const pass_roofline_row *r = &sorted[i];
      const ir_value *v = r->n->n_out ? r->n->out[0] : NULL;
      char tb[128];
      json_t *e = json_object();
      json_object_set_new(e, "value", json_string(v ? v->name : ""));
      json_object_set_new(e, "op", json_string(ir_op_name(r->n->op)));
      json_object_set_new(e, "phase", json_string(pass_phase_name(pass_node_phase(r->n))));
      json_object_set_new(e, "type", json_string(v ? ir_type_str(&v->type, tb, sizeof tb) : ""));
      json_object_set_new(e, "flops", jnum(r->flops));
      json_object_set_new(e, "bytes", jnum(r->bytes));
      json_object_set_new(e, "intensity", json_real(r->bytes > 0 ? r->flops / r->bytes : 0.0));
      json_object_set_new(e, "bound", tg ? json_string(r->compute_bound ? "compute" : "memory") : json_null());
      json_object_set_new(e, "time_s", real_or_null(tg, r->time));
      json_object_set_new(e, "launches", jnum(r->launches));
      json_object_set_new(e, "launch_bound", tg ? json_boolean(r->launch_bound) : json_null());
      json_array_append_new(topj, e);
    }
    free(sorted);
  }
  json_object_set_new(root, "top_ops", topj);
  json_dumpf(root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  fputc('\n', out);
  json_decref(root);
}

/* ===================================================================== */
/* the command                                                            */
/* ===================================================================== */
