/* tools/cmd_stats.c — `tgc stats`: what a model costs, computed from the IR
 * alone (nothing is allocated, so configs far too large to run can be
 * analysed).
 *
 * It compiles the model, builds its training graph (the loss is the output
 * named `loss`, else the first output — summed to a scalar if it is not one;
 * a grad node with respect to every parameter, or every float input when the
 * model has no parameters, its results output as d_<name>), runs the pass
 * pipeline without checkpointing, measures, then runs the checkpoint pass with
 * --checkpoint POLICY and measures again. Reported: parameter counts, FLOPs by
 * phase (forward, backward, recompute) and by op kind with bytes moved and
 * arithmetic intensity (passes/cost.c), and the CPU executor's peak memory as
 * the memory planner predicts it (passes/memplan.c), with and without the
 * policy. Gather (stats_collect) and print (text / JSON) are separate so more
 * reports (roofline, targets, optimizer memory) can join the same struct.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

static const char *const stats_help =
    "usage: tgc stats FILE [--config C] [-D NAME=VALUE]... [--checkpoint POLICY] [--json] [options]\n"
    "\n"
    "Compiles FILE and its training graph (gradients of the output 'loss', else of the\n"
    "first output, with respect to every parameter) without allocating anything, and\n"
    "reports what one training step costs:\n"
    "  parameters      total and per parameter tensor\n"
    "  FLOPs           forward, backward, recompute (from --checkpoint); gradient/forward\n"
    "                  = (forward + backward) / forward; per op kind with bytes moved and\n"
    "                  arithmetic intensity (FLOP/byte; formulas in passes/cost.c)\n"
    "  memory          the peak bytes of tensors the CPU executor holds (predicted by the\n"
    "                  memory planner: inputs and parameters not included), with and\n"
    "                  without the checkpoint policy; the activation peak (forward and\n"
    "                  recomputed values) and the activations saved for the backward pass\n"
    "\n"
    "  --json          print one JSON object: {\"file\", \"params\": {\"total\", \"tensors\"},\n"
    "                  \"flops\": {\"forward\", \"backward\", \"recompute\", \"gradient\",\n"
    "                  \"gradient_ratio\"}, \"memory\": {\"peak_bytes\", ...}, \"ops\": {...}}\n"
    "\n";

extern const char *const tool_common_help;

typedef struct {
  const char *name;
  ir_type type;
  int64_t count;
} stats_param;

typedef struct {
  const char *file, *policy, *loss_name;
  bool loss_summed;             /* the loss output was not a scalar: its sum is differentiated */
  int n_wrt;                    /* values differentiated by (0: forward only, -1: given as a training graph) */
  bool wrt_inputs;              /* no params: differentiated by the float inputs */
  stats_param *params;
  int n_params;
  int64_t param_total;
  double param_bytes;
  pass_graph_cost cost;         /* of the final graph (with the policy) */
  pass_mem_report mem_none;     /* without checkpointing */
  pass_mem_report mem;          /* with the policy */
} stats;

/* ---- the training graph ---- */
static ir_value *pick_loss(ir_graph *g, stats *s, ir_diag *d) {
  if (g->n_outputs == 0) {
    ir_error_plain(d, "%s has no outputs: nothing to differentiate", s->file);
    return NULL;
  }
  int k = 0;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i].name && strcmp(g->outputs[i].name, "loss") == 0) k = i;
  ir_value *loss = g->outputs[k].value;
  s->loss_name = g->outputs[k].name;
  if (!ir_dtype_is_float(loss->type.dtype)) {
    char tb[128];
    ir_error_plain(d, "output '%s' is %s: tgc stats differentiates a floating-point output", s->loss_name,
                   ir_type_str(&loss->type, tb, sizeof tb));
    return NULL;
  }
  if (loss->type.rank > 0) {
    int64_t axes[IR_MAX_RANK];
    for (int i = 0; i < loss->type.rank; i++) axes[i] = i;
    ir_attr at[2] = {ir_attr_ints("axes", axes, loss->type.rank), ir_attr_int("keepdims", 0)};
    loss = ir_graph_build1(g, IR_OP_REDUCE_SUM, &loss, 1, at, 2, "stats_loss", loss->loc);
    s->loss_summed = true;
  }
  return loss;
}

/* Appends `grad loss, wrt...` with results d_<name> as outputs. */
static int add_gradients(ir_graph *g, stats *s, ir_diag *d) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->op == IR_OP_GRAD) { /* the model asks for its own gradients */
      s->n_wrt = n->n_in - 1;
      s->loss_name = n->in[0]->name;
      return 0;
    }
    for (int j = 0; j < n->n_out; j++)
      if (n->out[j]->role == IR_ROLE_GRAD) { /* already a training graph (.ir) */
        s->n_wrt = -1;
        return 0;
      }
  }
  ir_value *loss = pick_loss(g, s, d);
  if (!loss) return -1;
  int n = g->n_params;
  ir_value **wrt = malloc((size_t)(g->n_params + g->n_inputs + 2) * sizeof *wrt);
  ir_type *types = malloc((size_t)(g->n_params + g->n_inputs + 1) * sizeof *types);
  const char **names = malloc((size_t)(g->n_params + g->n_inputs + 1) * sizeof *names);
  if (!wrt || !types || !names) abort();
  wrt[0] = loss;
  for (int i = 0; i < n; i++) wrt[1 + i] = g->params[i];
  if (n == 0) {
    s->wrt_inputs = true;
    for (int i = 0; i < g->n_inputs; i++)
      if (ir_dtype_is_float(g->inputs[i]->type.dtype)) wrt[1 + n++] = g->inputs[i];
  }
  s->n_wrt = n;
  if (n > 0) {
    for (int i = 0; i < n; i++) {
      char buf[256];
      snprintf(buf, sizeof buf, "d_%s", wrt[1 + i]->name);
      names[i] = ir_arena_strdup(g->arena, buf);
      types[i] = wrt[1 + i]->type;
    }
    ir_node *gn = ir_graph_add_node(g, IR_OP_GRAD, wrt, n + 1, types, n, NULL, 0, names, loss->loc);
    for (int i = 0; i < n; i++) {
      gn->out[i]->role = IR_ROLE_GRAD;
      ir_graph_add_output(g, gn->out[i]->name, gn->out[i]);
    }
  }
  free(wrt);
  free(types);
  free(names);
  return 0;
}

/* ---- gathering ---- */
static int stats_collect(ir_graph *g, const tool_compile_opts *o, stats *s, ir_diag *d) {
  s->n_params = g->n_params;
  s->params = calloc((size_t)(g->n_params > 0 ? g->n_params : 1), sizeof *s->params);
  if (!s->params) abort();
  for (int i = 0; i < g->n_params; i++) {
    const ir_value *p = g->params[i];
    s->params[i] = (stats_param){p->name, p->type, ir_type_numel(&p->type)};
    s->param_total += s->params[i].count;
    s->param_bytes += (double)s->params[i].count * (double)ir_dtype_size(p->type.dtype);
  }
  if (add_gradients(g, s, d) != 0) return -1;
  if (ir_verify(g, d) != 0) return -1;
  pass_options po = {0};
  po.diag = d;
  po.verify_each = o->verify_each;
  po.time_passes = o->time_passes;
  po.dump_after = o->after;
  po.dump_out = stdout;
  po.dump_format = o->format;
  /* the default pipeline up to the checkpoint pass, measure; then the rest with the policy */
  int split = pass_default_pipeline_len;
  for (int i = 0; i < pass_default_pipeline_len; i++)
    if (pass_default_pipeline[i] == PASS_CHECKPOINT) {
      split = i;
      break;
    }
  if (pass_run_pipeline(g, pass_default_pipeline, split, &po) != 0) return -1;
  if (pass_memplan_analyze(g, &s->mem_none) != 0) return -1;
  po.checkpoint = o->checkpoint;
  if (pass_run_pipeline(g, pass_default_pipeline + split, pass_default_pipeline_len - split, &po) != 0) return -1;
  if (pass_memplan_analyze(g, &s->mem) != 0) return -1;
  pass_graph_cost_of(g, &s->cost);
  return 0;
}

/* ---- printing ---- */
/* 1234567 -> "1,234,567" (integral doubles; others with %.4g) */
static const char *grouped(double v, char *buf, size_t n) {
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

static const char *human_bytes(double b, char *buf, size_t n) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) b /= 1024, u++;
  snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", b, unit[u]);
  return buf;
}

static double fwd_flops(const stats *s) { return s->cost.flops[PASS_PHASE_FORWARD]; }
static double grad_flops(const stats *s) { return fwd_flops(s) + s->cost.flops[PASS_PHASE_BACKWARD]; }

static void print_text(FILE *out, const stats *s) {
  char a[64], b[64], c[64];
  fprintf(out, "model: %s\n", s->file);
  fprintf(out, "\nparameters: %s (%s)\n", grouped((double)s->param_total, a, sizeof a),
          human_bytes(s->param_bytes, b, sizeof b));
  int w = 4;
  for (int i = 0; i < s->n_params; i++)
    if ((int)strlen(s->params[i].name) > w) w = (int)strlen(s->params[i].name);
  for (int i = 0; i < s->n_params && i < 200; i++) {
    char tb[128];
    fprintf(out, "  %-*s  %-20s %15s\n", w, s->params[i].name, ir_type_str(&s->params[i].type, tb, sizeof tb),
            grouped((double)s->params[i].count, a, sizeof a));
  }
  if (s->n_params > 200) fprintf(out, "  ... (%d more)\n", s->n_params - 200);

  if (s->n_wrt < 0) fprintf(out, "\ntraining graph: as given (it already has a backward pass)\n");
  else if (s->n_wrt)
    fprintf(out, "\ntraining graph: gradients of %s%s%s with respect to %d %s\n", s->loss_summed ? "sum(" : "",
            s->loss_name ? s->loss_name : "?", s->loss_summed ? ")" : "", s->n_wrt,
            s->wrt_inputs ? "float inputs" : "parameters");
  else fprintf(out, "\nno gradients (nothing to differentiate by): forward only\n");
  fprintf(out, "\nFLOPs per step:\n");
  fprintf(out, "  forward     %22s\n", grouped(fwd_flops(s), a, sizeof a));
  fprintf(out, "  backward    %22s\n", grouped(s->cost.flops[PASS_PHASE_BACKWARD], a, sizeof a));
  fprintf(out, "  recompute   %22s   (--checkpoint %s)\n", grouped(s->cost.flops[PASS_PHASE_RECOMPUTE], a, sizeof a),
          s->policy);
  if (s->cost.flops[PASS_PHASE_OPTIMIZER] > 0)
    fprintf(out, "  optimizer   %22s\n", grouped(s->cost.flops[PASS_PHASE_OPTIMIZER], a, sizeof a));
  if (fwd_flops(s) > 0) {
    fprintf(out, "  gradient / forward = (forward + backward) / forward = %.3f\n", grad_flops(s) / fwd_flops(s));
    if (s->cost.flops[PASS_PHASE_RECOMPUTE] > 0)
      fprintf(out, "  with recompute: (forward + backward + recompute) / forward = %.3f\n",
              (grad_flops(s) + s->cost.flops[PASS_PHASE_RECOMPUTE]) / fwd_flops(s));
  }

  fprintf(out, "\nmemory (CPU executor peak, predicted; inputs and parameters not included):\n");
  fprintf(out, "  %-28s %18s  activation peak %s, saved for backward %s\n", "without checkpointing",
          grouped((double)s->mem_none.peak_bytes, a, sizeof a),
          grouped((double)s->mem_none.activation_peak_bytes, b, sizeof b),
          grouped((double)s->mem_none.saved_bytes, c, sizeof c));
  if (strcmp(s->policy, "none") != 0) {
    char label[64];
    snprintf(label, sizeof label, "with --checkpoint %s", s->policy);
    fprintf(out, "  %-28s %18s  activation peak %s, saved for backward %s\n", label,
            grouped((double)s->mem.peak_bytes, a, sizeof a), grouped((double)s->mem.activation_peak_bytes, b, sizeof b),
            grouped((double)s->mem.saved_bytes, c, sizeof c));
  }

  fprintf(out, "\nFLOPs by op (all phases):\n");
  fprintf(out, "  %-20s %7s %22s %7s %20s %12s\n", "op", "nodes", "FLOPs", "share", "bytes moved", "FLOP/byte");
  double total = 0;
  for (int op = 0; op < IR_NUM_OPS; op++) total += s->cost.op_flops[op];
  /* largest first */
  bool done[IR_NUM_OPS] = {false};
  for (;;) {
    int best = -1;
    for (int op = 0; op < IR_NUM_OPS; op++)
      if (!done[op] && s->cost.op_count[op] &&
          (best < 0 || s->cost.op_flops[op] > s->cost.op_flops[best] ||
           (s->cost.op_flops[op] == s->cost.op_flops[best] && s->cost.op_bytes[op] > s->cost.op_bytes[best])))
        best = op;
    if (best < 0) break;
    done[best] = true;
    double by = s->cost.op_bytes[best];
    fprintf(out, "  %-20s %7d %22s %6.1f%% %20s %12.2f\n", ir_op_name((ir_op)best), s->cost.op_count[best],
            grouped(s->cost.op_flops[best], a, sizeof a), total > 0 ? 100 * s->cost.op_flops[best] / total : 0.0,
            grouped(by, b, sizeof b), by > 0 ? s->cost.op_flops[best] / by : 0.0);
  }
}

/* an exact integer when it is one and fits in 2^53, else a real */
static json_t *jnum(double v) {
  if (v == floor(v) && fabs(v) <= 9007199254740992.0) return json_integer((json_int_t)v);
  return json_real(v);
}

static json_t *mem_json(const pass_mem_report *m) {
  json_t *o = json_object();
  json_object_set_new(o, "peak_bytes", jnum((double)m->peak_bytes));
  json_object_set_new(o, "activation_peak_bytes", jnum((double)m->activation_peak_bytes));
  json_object_set_new(o, "saved_bytes", jnum((double)m->saved_bytes));
  return o;
}

static void print_json(FILE *out, const stats *s) {
  json_t *root = json_object();
  json_object_set_new(root, "file", json_string(s->file));
  json_t *params = json_object(), *tensors = json_array();
  json_object_set_new(params, "total", jnum((double)s->param_total));
  json_object_set_new(params, "bytes", jnum(s->param_bytes));
  for (int i = 0; i < s->n_params; i++) {
    json_t *t = json_object(), *shape = json_array();
    json_object_set_new(t, "name", json_string(s->params[i].name));
    json_object_set_new(t, "dtype", json_string(ir_dtype_name(s->params[i].type.dtype)));
    for (int k = 0; k < s->params[i].type.rank; k++) json_array_append_new(shape, json_integer(s->params[i].type.dims[k]));
    json_object_set_new(t, "shape", shape);
    json_object_set_new(t, "count", jnum((double)s->params[i].count));
    json_array_append_new(tensors, t);
  }
  json_object_set_new(params, "tensors", tensors);
  json_object_set_new(root, "params", params);

  json_t *fl = json_object();
  json_object_set_new(fl, "forward", jnum(fwd_flops(s)));
  json_object_set_new(fl, "backward", jnum(s->cost.flops[PASS_PHASE_BACKWARD]));
  json_object_set_new(fl, "recompute", jnum(s->cost.flops[PASS_PHASE_RECOMPUTE]));
  json_object_set_new(fl, "optimizer", jnum(s->cost.flops[PASS_PHASE_OPTIMIZER]));
  json_object_set_new(fl, "gradient", jnum(grad_flops(s)));
  json_object_set_new(fl, "gradient_ratio", json_real(fwd_flops(s) > 0 ? grad_flops(s) / fwd_flops(s) : 0.0));
  json_object_set_new(root, "flops", fl);

  json_t *mem = mem_json(&s->mem);
  json_object_set_new(mem, "checkpoint", json_string(s->policy));
  json_object_set_new(mem, "no_checkpoint", mem_json(&s->mem_none));
  json_object_set_new(root, "memory", mem);

  json_t *grad = json_object();
  json_object_set_new(grad, "loss", json_string(s->loss_name ? s->loss_name : ""));
  json_object_set_new(grad, "loss_summed", json_boolean(s->loss_summed));
  json_object_set_new(grad, "wrt", json_integer(s->n_wrt));
  json_object_set_new(root, "training", grad);

  json_t *ops = json_object();
  for (int op = 0; op < IR_NUM_OPS; op++) {
    if (!s->cost.op_count[op]) continue;
    json_t *e = json_object();
    json_object_set_new(e, "nodes", json_integer(s->cost.op_count[op]));
    json_object_set_new(e, "flops", jnum(s->cost.op_flops[op]));
    json_object_set_new(e, "bytes", jnum(s->cost.op_bytes[op]));
    json_object_set_new(e, "intensity", json_real(s->cost.op_bytes[op] > 0 ? s->cost.op_flops[op] / s->cost.op_bytes[op] : 0.0));
    json_object_set_new(ops, ir_op_name((ir_op)op), e);
  }
  json_object_set_new(root, "ops", ops);
  json_dumpf(root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  fputc('\n', out);
  json_decref(root);
}

int tool_cmd_stats(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s", stats_help, tool_common_help);
      return 0;
    }
  ir_diag *d = ir_diag_new(stderr);
  tool_compile_opts o = {0};
  bool json = false;
  int rc = 0;
  for (int i = 1; i < argc && rc == 0; i++) {
    const char *a = argv[i];
    int r = tool_parse_common(&o, argc, argv, &i, d);
    if (r < 0) rc = 1;
    if (r != 0) continue;
    if (strcmp(a, "--json") == 0) json = true;
    else if (a[0] == '-' && a[1]) {
      ir_error_plain(d, "unknown option '%s' (see 'tgc stats --help')", a);
      rc = 1;
    } else if (o.file) {
      ir_error_plain(d, "unexpected argument '%s' (one FILE at a time)", a);
      rc = 1;
    } else o.file = a;
  }
  if (rc == 0 && !o.file) {
    ir_error_plain(d, "stats: missing FILE (see 'tgc stats --help')");
    rc = 1;
  }
  char *text = NULL;
  ir_graph *g = NULL;
  stats s = {0};
  if (rc == 0 && !(g = tool_load(&o, d, &text))) rc = 1;
  if (rc == 0) {
    s.file = o.file;
    s.policy = o.checkpoint ? o.checkpoint : "none";
    if (stats_collect(g, &o, &s, d) != 0) rc = 1;
  }
  if (rc == 0) {
    if (json) print_json(stdout, &s);
    else print_text(stdout, &s);
  }
  free(s.params);
  ir_graph_free(g);
  free(text);
  ir_diag_free(d);
  return rc;
}
