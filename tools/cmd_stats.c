/* tools/cmd_stats.c — `tgc stats`: what a model costs, computed from the IR
 * alone (nothing is allocated, so configs far too large to run — gpt3-175b —
 * are analysed in well under a second).
 *
 * This file parses the flags, picks the config constants and the target,
 * and gathers what the layers compute into one report (stats.h) that
 * stats_print.c prints as text or JSON: the training graph and the memory
 * before and after checkpointing (pass_build_training_graph, any model: the
 * loss is the output named `loss`, else the first, summed if it is not a
 * scalar; gradients with respect to every parameter, or every float input
 * when there is none; --dtype costs the same graph held in bf16/fp16/fp32),
 * the FLOPs by phase (cost.c), the optimizer update (pass_update_flops),
 * parameters by group and the per-op roofline, step time and MFU on a
 * target (step_report.c, targets.def or --target-file). The help text below
 * gives every definition.
 *
 * Config constants (B, T, nL, D, V, ...) are the chosen config's as the
 * frontend evaluates them (fe_configs, -D overrides applied); one that is no
 * positive integer counts as unknown.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir_die.h"
#include "stats.h"
#include "ir_clock.h"

static const char *const stats_help =
    "usage: tgc stats FILE [--config C] [-D NAME=VALUE]... [--batch B] [--seq S] [--dtype bf16|fp16|fp32]\n"
    "                 [--optimizer sgd|momentum|adam|adamw] [--checkpoint POLICY] [--target NAME]\n"
    "                 [--target-file F] [--top N] [--params] [--weights PATH [--map MAP]] [--json] [options]\n"
    "\n"
    "Compiles FILE and its training graph (gradients of the output 'loss', else of the\n"
    "first output, with respect to every parameter) without allocating anything, and\n"
    "reports what one training step costs:\n"
    "  parameters   the exact count, by group, and the closed form 12*l*h^2 + 2*v*h beside\n"
    "               it. Groups, first rule that applies: embeddings (a table read by an\n"
    "               embedding op, or a name with embed, wte, wpe, tok_emb, pos_emb, lm_head,\n"
    "               unembed, or a name part 'output'); norms (read by layernorm/rmsnorm as\n"
    "               gamma/beta); attention (a name with attn, attention, q_proj, k_proj,\n"
    "               v_proj, o_proj, qkv, or a name part wq, wk, wv, wo); mlp (a name with mlp,\n"
    "               ffn, feed_forward, fc, up_proj, down_proj, gate_proj, or a name part w1,\n"
    "               w2, w3, up, down, gate); norms (a name with norm or a part starting with\n"
    "               ln); other. Name parts are split at '.'. The closed form is shown when\n"
    "               the config defines l as nL, n_layer, n_layers, num_layers or layers, h as\n"
    "               D, d_model, n_embd, dim or hidden, and v as V, vocab, vocab_size or n_vocab\n"
    "  FLOPs        forward, backward, recompute (--checkpoint), the optimizer update (the\n"
    "               update graph of passes/optimizer.c), and 6*N*tokens beside forward +\n"
    "               backward; tokens per step = B*T when the config defines B and T, else\n"
    "               the elements of the first integer input. Formulas: analysis/cost.c\n"
    "  memory       in bytes of --dtype (default: the model's own): parameters, gradients,\n"
    "               optimizer state (sgd 0, momentum 1, adam/adamw 2 values per parameter, in\n"
    "               fp32), activations (the memory planner's activation peak under the\n"
    "               checkpoint policy). With bf16/fp16, mixed precision as usually trained:\n"
    "               16-bit parameters and gradients, fp32 optimizer state plus an fp32\n"
    "               master copy of the parameters (adam: 2+2+12 = 16 bytes per parameter).\n"
    "               With dropout, its masks at 1 byte an element: not kept (the backward\n"
    "               draws them again), shown as the literature counts them (Korthikanti\n"
    "               et al. 2022) with the activations they would make.\n"
    "               GB = 1e9 bytes, GiB = 2^30. Also the CPU executor's predicted peak\n"
    "  roofline     per op: FLOPs, bytes moved (each operand read once, each result\n"
    "               written once), arithmetic intensity FLOP/byte, and with a target whether\n"
    "               it is compute-bound (intensity >= peak/bandwidth) or memory-bound and\n"
    "               its time max(FLOPs/peak, bytes/bandwidth, device calls x the target's\n"
    "               launch time: the kernel launches, cuBLASLt products, memsets and\n"
    "               zero-fills the lowered program issues for it); by op kind and the --top N\n"
    "               (default 10) individual ops. Peak: the target's bf16/fp16 figure for a\n"
    "               16-bit dtype, else its fp32 (TF32) figure\n"
    "  step time    the sum of the per-op roofline times, plus the optimizer update as one\n"
    "               fused pass over parameters, gradients and state (at least the update\n"
    "               program's device calls x the launch time)\n"
    "  device calls per training step: what tgc train's step and update programs issue\n"
    "               as lowered (built from FILE as tgc train builds them: --optimizer without\n"
    "               clipping, one micro-batch, mixed precision for a 16-bit --dtype, token\n"
    "               accuracy when the model has an integer input named targets, the mesh):\n"
    "               kernel launches (the update's per-parameter steps one multi-tensor kernel\n"
    "               per group of up to 32), cuBLASLt products, memsets, copies and\n"
    "               zero-fills, and the collectives; with CUDA graphs the host issues one\n"
    "               graph launch per segment of a program between its collectives, plus the\n"
    "               collectives (mesh slices among them: host-run, no communication).\n"
    "               Not counted with a pipeline (pp > 1)\n"
    "  MFU          model FLOPs utilization as in PaLM (Chowdhery et al. 2022):\n"
    "               6*N*tokens / (step time * peak), N = the parameter count\n"
    "\n"
    "  --batch B, --seq S   set the config constants B and T (an error if the config has none)\n"
    "  --dtype DT           bf16, fp16 or fp32: the element size of every byte count\n"
    "  --optimizer NAME     sgd, momentum, adam (default) or adamw\n"
    "  --target NAME        a100-80g, a100-40g, h100-sxm, h200, v100, cpu-local (analysis/targets.def)\n"
    "  --target-file F      your own: lines 'key = value', keys name, flops_bf16, flops_fp32,\n"
    "                       bandwidth (bytes/s), memory (bytes), launch (seconds a device call\n"
    "                       takes at least, default 0); e.g. 'flops_bf16 = 989e12'\n"
    "                       (flops 1e6..1e18, bandwidth 1e6..1e14, memory 0..1e15)\n"
    "  --top N              how many individual ops to list (0: none)\n"
    "  --params             list every parameter tensor\n"
    "  --weights PATH       first check that PATH (safetensors or an HF folder; --map MAP names\n"
    "                       its tensors) binds every parameter, as tgc run --weights would\n"
    "  --json               one JSON object: {\"params\": {\"total\", \"by_group\", \"closed_form\", ...},\n"
    "                       \"flops\": {\"forward\", \"backward\", \"recompute\", \"six_n_tokens\", ...},\n"
    "                       \"memory\": {\"params\", \"grads\", \"optimizer\", \"activations\", \"dropout_masks\", \"total\",\n"
    "                       \"peak_bytes\", ...}, \"target\", \"step_time_s\", \"mfu\", \"launches\" (the costed graph's\n"
    "                       device calls), \"launch_time_s\", \"step_launches\", \"update_launches\",\n"
    "                       \"update_multi_tensor_launches\", \"launches_per_step\" (step + update),\n"
    "                       \"collectives\", \"mesh_slices\", \"graph_launches\" (step + update),\n"
    "                       \"step_graph_launches\", \"update_graph_launches\", \"host_calls_with_graphs\"\n"
    "                       (graph launches + collectives; these null when not counted), \"ops\", \"top_ops\"}\n"
    "\n";

extern const char *const tool_common_help;

/* The first of names the config defines as a positive integer. */
static const fe_const *cfg_first(const fe_config *c, const char *const *names) {
  for (; *names; names++) {
    const fe_const *e = fe_config_const(c, *names);
    if (e && e->kind == FE_CONST_INT && e->i > 0) return e;
  }
  return NULL;
}

static void count_params(const ir_graph *g, stats *s) {
  pass_param_group *groups = calloc((size_t)g->n_params + 1, sizeof *groups);
  s->params = calloc((size_t)g->n_params + 1, sizeof *s->params);
  if (!groups || !s->params) IR_DIE("out of memory (groups || !s->params)");
  pass_param_groups(g, groups);
  s->n_params = g->n_params;
  for (int i = 0; i < g->n_params; i++) {
    const ir_value *p = g->params[i];
    stats_param *sp = &s->params[i];
    *sp = (stats_param){strdup(p->name), p->type, ir_type_numel(&p->type), groups[i], NULL};
    if (!sp->name) IR_DIE("out of memory (sp->name)");
    s->param_total += sp->count;
    s->group_total[sp->group] += sp->count;
    s->param_bytes += (double)sp->count * (double)ir_dtype_size(p->type.dtype);
  }
  free(groups);
}

static const char *dtype_label(ir_dtype t) {
  switch (t) {
  case IR_DT_F32: return "fp32";
  case IR_DT_F16: return "fp16";
  case IR_DT_BF16: return "bf16";
  case IR_DT_F64: return "fp64";
  default: return ir_dtype_name(t);
  }
}

/* The model's float dtype: its first parameter's, else its first float input's, else f32. */
static ir_dtype model_dtype(const ir_graph *g) {
  for (int i = 0; i < g->n_params; i++)
    if (ir_dtype_is_float(g->params[i]->type.dtype)) return g->params[i]->type.dtype;
  for (int i = 0; i < g->n_inputs; i++)
    if (ir_dtype_is_float(g->inputs[i]->type.dtype)) return g->inputs[i]->type.dtype;
  return IR_DT_F32;
}

/* ---- gathering ---- */
static void find_tokens(const ir_graph *g, const fe_config *c, stats *s) {
  s->cb = fe_config_const(c, "B");
  s->ct = fe_config_const(c, "T");
  if (s->cb && s->ct && s->cb->kind == FE_CONST_INT && s->ct->kind == FE_CONST_INT && s->cb->i > 0 && s->ct->i > 0) {
    s->tokens = (double)s->cb->i * (double)s->ct->i;
    s->tokens_from = "B*T";
    return;
  }
  for (int i = 0; i < g->n_inputs; i++)
    if (!ir_dtype_is_float(g->inputs[i]->type.dtype) && g->inputs[i]->type.dtype != IR_DT_BOOL) {
      s->tokens = (double)ir_type_numel(&g->inputs[i]->type);
      s->tokens_from = g->inputs[i]->name;
      return;
    }
}

static void closed_form(const fe_config *c, stats *s) {
  static const char *const l_names[] = {"nL", "n_layer", "n_layers", "num_layers", "layers", NULL};
  static const char *const h_names[] = {"D", "d_model", "n_embd", "dim", "hidden", NULL};
  static const char *const v_names[] = {"V", "vocab", "vocab_size", "n_vocab", NULL};
  s->cl = cfg_first(c, l_names);
  s->ch = cfg_first(c, h_names);
  s->cv = cfg_first(c, v_names);
  if (!s->cl || !s->ch || !s->cv) {
    s->cl = s->ch = s->cv = NULL;
    return;
  }
  double l = (double)s->cl->i, h = (double)s->ch->i, v = (double)s->cv->i;
  s->closed_form = pass_closed_form_params(l, h, v);
}

/* What one run of each lowered program of the training program issues
 * (launches.c): the step and update graphs `tgc train` builds from the
 * model (pass_build_train, compiled again from FILE: g is the costed
 * training graph by now) with --optimizer (no clipping), one micro-batch,
 * mixed precision for a 16-bit --dtype the model does not hold (loss
 * scaling with fp16), token accuracy when the model has an integer input
 * named targets (as tgc train's sequence data binds it), the mesh, ZeRO,
 * checkpoint policy and tp layouts given; each over its memory plan. No
 * pipeline (pp > 1: its stages' programs are not counted). 0, with
 * s->programs false where FILE builds no training program (said in
 * s->programs_why); -1 after reporting. */
static int count_programs(const tool_compile_opts *o, int dtype_arg, const pass_tp_layouts *tpl, stats *s, ir_diag *d) {
  if (o->mesh_set && o->mesh.size[IR_AXIS_PP] > 1) {
    s->programs_why = "a pipeline's stages are not counted";
    return 0;
  }
  char *text = NULL;
  ir_graph *m = tool_load(o, d, &text);
  if (!m) {
    free(text);
    return -1;
  }
  ir_diag *q = ir_diag_new(stderr); /* quiet: a model tgc train does not train is still costed */
  ir_diag_set_max_errors(q, 0);
  ir_diag_set_quiet(q, true);
  pass_options po = {.diag = q, .checkpoint = o->checkpoint, .disabled = o->pass_disabled, .zero = o->zero, .bucket_bytes = o->bucket_bytes,
                     .tp_search = !o->tp_megatron, .tp_layouts = tpl};
  pass_train_options to = {.opt = pass_optimizer_defaults(s->opt), .micro_batches = 1, .targets_input = -1,
                           .passes = &po};
  int ti = ir_graph_input_index(m, "targets");
  if (ti >= 0 && !ir_dtype_is_float(m->inputs[ti]->type.dtype)) to.targets_input = ti;
  ir_dtype own = m->n_params > 0 ? m->params[0]->type.dtype : IR_DT_F32;
  if ((dtype_arg == IR_DT_BF16 || dtype_arg == IR_DT_F16) && own != (ir_dtype)dtype_arg) {
    to.mixed_precision = true;
    to.compute_dtype = (ir_dtype)dtype_arg;
    to.loss_scaling = dtype_arg == IR_DT_F16;
  }
  pass_training *t = pass_build_train(m, &to); /* takes m */
  ir_diag_free(q);
  free(text);
  if (!t) {
    s->programs_why = "tgc train builds no training program of this model; tgc train FILE says why";
    return 0;
  }
  pass_plan *sp = pass_memplan(t->step, NULL), *up = pass_memplan(t->update, NULL);
  if (!sp || !up || pass_program_calls_of(t->step, sp, &s->step_calls) != 0 ||
      pass_program_calls_of(t->update, up, &s->update_calls) != 0)
    IR_DIE("out of memory (the programs' device calls)");
  s->programs = true;
  pass_plan_free(sp);
  pass_plan_free(up);
  pass_training_free(t);
  return 0;
}

static int stats_collect(ir_graph *g, const tool_compile_opts *o, const fe_config *c, int dtype_arg, stats *s,
                         ir_diag *d) {
  count_params(g, s);
  closed_form(c, s);
  find_tokens(g, c, s);
  ir_dtype own = model_dtype(g);
  ir_dtype dt = dtype_arg >= 0 ? (ir_dtype)dtype_arg : own;
  s->dtype_name = dtype_label(dt);
  s->dtype_bytes = ir_dtype_size(dt);
  s->mixed = s->dtype_bytes == 2;
  pass_options po = {.diag = d, .verify_each = o->verify_each, .time_passes = o->time_passes, .verbose = o->verbose, .dump_after = o->after,
                     .dump_out = stdout, .dump_format = o->format, .checkpoint = o->checkpoint,
                     .disabled = o->pass_disabled, .tp_search = !o->tp_megatron};
  if (!o->pass_disabled[PASS_FUSE_ATTENTION]) { /* the softmax nodes fuse-attention will leave, on the forward
                                                 * graph it sees (the backward reads p too) */
    s->n_attn_miss = pass_attention_misses(g, NULL, 0);
    if (s->n_attn_miss && !(s->attn_miss = calloc((size_t)s->n_attn_miss, sizeof *s->attn_miss))) abort();
    pass_attention_misses(g, s->attn_miss, s->n_attn_miss);
  }
  pass_train_graph_options to = {.passes = &po, .any_model = true, .dtype = dtype_arg, .measure = true};
  /* --tp-layout search: the layouts tgc plan and tgc train choose (tool_tp_layouts) */
  pass_tp_layouts *tpl = NULL;
  bool dump = o->after && (strcmp(o->after, "shard") == 0 || strcmp(o->after, "all") == 0);
  if (tool_tp_layouts(o, g, dtype_arg, dump ? stdout : NULL, &tpl, d) != 0)
    return -1;
  po.tp_layouts = tpl;
  int brc = pass_build_training_graph(g, &to, &s->graph);
  if (brc != 0) {
    pass_tp_layouts_free(tpl);
    return -1;
  }
  for (int i = 0; i < g->n_params; i++) { /* the parameters the shard pass padded (g is one rank's now) */
    char line[400];
    if (!pass_shard_padding_str(g->params[i], &g->mesh, line, sizeof line)) continue;
    for (int k = 0; k < s->n_params; k++)
      if (!s->params[k].padding && strcmp(s->params[k].name, g->params[i]->name) == 0 &&
          !(s->params[k].padding = strdup(line)))
        abort();
  }
  if (pass_memplan_analyze(g, &s->mem) != 0) {
    pass_tp_layouts_free(tpl);
    return -1;
  }
  for (int i = 0; i < g->n_nodes; i++) s->attn_fused += g->nodes[i]->op == IR_OP_ATTENTION;
  pass_graph_cost_of(g, &s->cost);
  /* optimizer: the FLOPs of its update graph; memory by the model in the help */
  bool trains = s->graph.n_wrt != 0 && g->n_params > 0;
  if (trains && pass_update_flops(g, s->opt, &s->opt_flops, d) != 0) {
    pass_tp_layouts_free(tpl);
    return -1;
  }
  pass_train_memory m = pass_training_memory((double)s->param_total, s->dtype_bytes, pass_optimizer_state_count(s->opt),
                                             (double)s->mem.activation_peak_bytes, trains);
  s->m_params = m.params, s->m_grads = m.grads, s->m_opt = m.optimizer, s->m_act = m.activations, s->m_total = m.total;
  s->m_masks = (double)pass_dropout_mask_bytes(g, &s->n_dropouts);
  int crc = trains ? count_programs(o, dtype_arg, tpl, s, d) : 0;
  pass_tp_layouts_free(tpl);
  if (crc != 0) return -1;
  pass_step_costing sc = {s->target, s->dtype_bytes, s->opt_flops, m, (double)s->param_total, s->tokens,
                          pass_launch_total(s->update_calls.launches)};
  pass_roofline_of(g, &sc, &s->roof);
  return 0;
}

/* ===================================================================== */
/* flags                                                                  */
/* ===================================================================== */

static int bad_value(ir_diag *d, const char *flag, const char *v, const char *want) {
  ir_error_plain(d, "%s %s: expected %s", flag, v ? v : "(nothing)", want);
  return -1;
}

typedef struct {
  bool json, list_params;
  int dtype, optimizer, top;
  const char *target, *target_file, *batch, *seq;
} stats_flags;

/* 1 consumed, 0 not a stats flag, -1 error (reported). */
static int parse_stats_flag(stats_flags *f, int argc, char **argv, int *i, ir_diag *d) {
  const char *v = NULL;
  if (strcmp(argv[*i], "--json") == 0) return f->json = true, 1;
  if (strcmp(argv[*i], "--params") == 0) return f->list_params = true, 1;
  if (tool_flag("--dtype", argc, argv, i, &v)) {
    f->dtype = !v ? -1 : strcmp(v, "bf16") == 0 ? IR_DT_BF16 : strcmp(v, "fp16") == 0 ? IR_DT_F16
                      : strcmp(v, "fp32") == 0 ? IR_DT_F32 : -1;
    return f->dtype < 0 ? bad_value(d, "--dtype", v, "bf16, fp16 or fp32") : 1;
  }
  if (tool_flag("--optimizer", argc, argv, i, &v)) {
    f->optimizer = pass_optimizer_from_name(v);
    return f->optimizer < 0 ? bad_value(d, "--optimizer", v, "sgd, momentum, adam or adamw") : 1;
  }
  if (tool_flag("--top", argc, argv, i, &v)) {
    int64_t n;
    if (!tool_parse_int(v, 0, 1000000, &n)) return bad_value(d, "--top", v, "a count from 0 to 1000000");
    f->top = (int)n;
    return 1;
  }
  const char **dst = NULL;
  const char *flag = NULL;
  if (tool_flag("--target", argc, argv, i, &v)) dst = &f->target, flag = "--target";
  else if (tool_flag("--target-file", argc, argv, i, &v)) dst = &f->target_file, flag = "--target-file";
  else if (tool_flag("--batch", argc, argv, i, &v)) dst = &f->batch, flag = "--batch";
  else if (tool_flag("--seq", argc, argv, i, &v)) dst = &f->seq, flag = "--seq";
  if (!dst) return 0;
  if (!v || !*v) {
    ir_error_plain(d, "%s needs a value", flag);
    return -1;
  }
  *dst = v;
  return 1;
}

static int pick_target(const stats_flags *f, pass_target *own, const pass_target **out, char **text_out, ir_diag *d) {
  *out = NULL;
  if (f->target && f->target_file) {
    ir_error_plain(d, "--target and --target-file: give one");
    return -1;
  }
  if (f->target) {
    if (!(*out = pass_target_lookup(f->target))) {
      char list[512] = "";
      for (int i = 0; i < pass_target_count(); i++) {
        if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, pass_target_at(i)->name, sizeof list - strlen(list) - 1);
      }
      ir_error_plain(d, "--target %s: unknown target (known: %s; or --target-file F)", f->target, list);
      return -1;
    }
    return 0;
  }
  if (f->target_file) {
    size_t len;
    char *text = ir_read_file(f->target_file, 1u << 20, &len, d);
    if (!text) return -1;
    *text_out = text;
    if (pass_target_parse(f->target_file, text, len, own, d) != 0) return -1;
    *out = own;
  }
  return 0;
}

int tool_cmd_stats(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s", stats_help, tool_common_help);
      return 0;
    }
  double t0 = ir_clock_s();
  ir_diag *d = tool_diag_new();
  tool_compile_opts o = {0};
  stats_flags f = {.dtype = -1, .optimizer = PASS_OPT_ADAM, .top = 10};
  tool_weights weights = {0};
  int rc = 0;
  for (int i = 1; i < argc && rc == 0; i++) {
    const char *a = argv[i];
    int r = tool_parse_common(&o, argc, argv, &i, d);
    if (r == 0) r = parse_stats_flag(&f, argc, argv, &i, d);
    if (r == 0) r = tool_parse_weights_flag(argc, argv, &i, &weights, d);
    if (r < 0) rc = 1;
    if (r != 0) continue;
    if (tool_positional("stats", a, &o, d) != 0) rc = 1;
  }
  if (rc == 0 && tool_need_file("stats", &o, d) != 0) rc = 1;
  pass_target own_target;
  const pass_target *target = NULL;
  char *target_text = NULL, *text = NULL;
  if (rc == 0 && pick_target(&f, &own_target, &target, &target_text, d) != 0) rc = 1;
  fe_config_set *cfg = NULL; /* the config's constants, before and after --batch/--seq */
  if (rc == 0 && !tool_is_ir_file(o.file)) {
    cfg = tool_configs(&o);
  } else if (rc == 0 && (f.batch || f.seq)) {
    ir_error_plain(d, "%s applies to .tg files; '%s' is already IR", f.batch ? "--batch" : "--seq", o.file);
    rc = 1;
  }
  if (rc == 0 && f.batch && tool_set_constant(&o, cfg, "--batch", "B", f.batch, d) != 0) rc = 1;
  if (rc == 0 && f.seq && tool_set_constant(&o, cfg, "--seq", "T", f.seq, d) != 0) rc = 1;
  if (rc == 0 && (f.batch || f.seq)) { /* evaluated again with the new values */
    fe_config_set_free(cfg);
    cfg = tool_configs(&o);
  }
  const fe_config *chosen = cfg ? cfg->chosen : NULL;
  ir_graph *g = NULL;
  stats s = {0};
  if (rc == 0 && !(g = tool_load(&o, d, &text))) rc = 1;
  weights.model = o.file;
  if (rc == 0 && (weights.path || weights.map)) { /* the file must bind every parameter, as tgc run would */
    tool_slots slots = {0};
    tool_alloc_slots(g, &slots);
    if (tool_bind_weights(g, &weights, slots.params, d) != 0) rc = 1;
    tool_free_slots(g, &slots);
    if (rc == 0 && !f.json)
      printf("weights: %s binds all %d parameters%s%s\n", weights.path, g->n_params, weights.map ? " through " : "",
             weights.map ? weights.map : "");
  }
  if (rc == 0) {
    s.file = o.file;
    s.config = chosen ? chosen->name : NULL;
    s.policy = o.checkpoint ? o.checkpoint : "none";
    s.opt = (pass_optimizer_kind)f.optimizer;
    s.target = target;
    s.top = f.top;
    s.list_params = f.list_params;
    if (stats_collect(g, &o, chosen, f.dtype, &s, d) != 0) rc = 1;
    s.analysis_s = ir_clock_s() - t0;
  }
  if (rc == 0) {
    if (f.json) stats_print_json(stdout, &s);
    else stats_print_text(stdout, &s);
  }
  for (int i = 0; i < s.n_params; i++) free(s.params[i].name), free(s.params[i].padding);
  free(s.params);
  free(s.attn_miss);
  pass_train_graph_info_free(&s.graph);
  pass_roofline_free(&s.roof);
  ir_graph_free(g);
  free(text);
  free(target_text);
  fe_config_set_free(cfg);
  ir_diag_free(d);
  return rc;
}
