/* tools/cmd_plan.c — `tgc plan`: the parallel plan of a training step for a
 * cluster, searched (or evaluated, when the user gives it), simulated and
 * explained. The planner itself lives in plan/ (its clusters in analysis/cluster.c); this
 * file parses the flags, compiles the training graph the planner reads
 * (once per checkpoint policy at micro-batch 2 and 4), runs the search and
 * hands the result to plan_print.c.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan_print.h"
#include "ir_clock.h"

static const char *const plan_help =
    "usage: tgc plan FILE [--config C] [-D NAME=VALUE]... (--cluster NAME[:NODES] | --cluster-file F) [--gpus N]\n"
    "                --global-batch G [--seq S] [--dtype bf16|fp16|fp32] [--optimizer adam|adamw|momentum|sgd]\n"
    "                [--mesh dp=D,tp=T,pp=P[,sp]] [--zero 0|1|2|3] [--micro-batch B]\n"
    "                [--pipeline-schedule gpipe|1f1b|interleaved[:V]] [--checkpoint none|selective|block]\n"
    "                [--save-plan plan.json] [--train-tokens N]\n"
    "                [--top K] [--explain] [--json] [--trace trace.json] [--constant NAME=VALUE]... [options]\n"
    "\n"
    "Searches the parallel plan of one training step of FILE on a cluster: data (dp), tensor\n"
    "(tp, inside a node) and pipeline (pp) degrees with dp x tp x pp = the GPUs, sequence\n"
    "parallelism, the ZeRO stage, the micro-batch size and count, the pipeline schedule\n"
    "(gpipe, 1f1b, interleaved 1f1b with V chunks per GPU), the stage boundaries (a dynamic\n"
    "program over the layers: the embeddings count with the first stage, the head with the\n"
    "last) and the checkpoint policy, under each GPU's memory. It prints the fastest plan\n"
    "that fits: memory per GPU by kind, bytes per collective and mesh axis, and the step\n"
    "time in rows that add up to the total, with MFU and tokens/s. Every figure comes from\n"
    "the model's training graph (the one `tgc stats` costs) and docs/plan.md's model. The\n"
    "output ends with the command that runs the plan (`tgc train`; the data source is yours).\n"
    "\n"
    "  --cluster NAME[:NODES]  a built-in node kind (dgx-a100, dgx-h100, cpu-host; analysis/clusters.def)\n"
    "                          and how many nodes\n"
    "  --cluster-file F        your own: lines 'key = value', keys name, gpus_per_node, nodes,\n"
    "                          target (a --target of tgc stats), intra_bandwidth, inter_bandwidth\n"
    "                          (bytes/s per GPU per direction), intra_latency, inter_latency\n"
    "                          (seconds per ring step), reserve (bytes per GPU left free);\n"
    "                          bandwidths 1e6..1e13, latencies 0..1, reserve 0..1e15 (docs/plan.md)\n"
    "  --gpus N                N GPUs of the cluster's nodes (instead of :NODES; dgx-a100 if\n"
    "                          no cluster is named)\n"
    "  --global-batch G        sequences per step (required)\n"
    "  --seq S                 tokens per sequence: sets the config constant T\n"
    "  --dtype DT              bf16 (default: mixed precision, fp32 master weights and\n"
    "                          optimizer state), fp16 or fp32\n"
    "  --optimizer NAME        adam (default), adamw, momentum or sgd\n"
    "  --mesh dp=D,tp=T,pp=P[,sp]  fix the mesh (the syntax of every command: each axis optional,\n"
    "                          default 1; ',sp' fixes sequence parallelism on, else it is searched);\n"
    "                          --zero, --micro-batch, --pipeline-schedule and --checkpoint fix the\n"
    "                          rest; what is not fixed is searched\n"
    "  --pipeline-schedule S   gpipe, 1f1b or interleaved[:V] (V chunks per GPU)\n"
    "  --checkpoint POLICY     none, selective or block (full is block): the checkpoint pass's\n"
    "                          policies the planner models (sqrt and budget=BYTES it does not)\n"
    "  --sp on|off, --schedule S  the old spellings of --mesh ...,sp and --pipeline-schedule\n"
    "  --save-plan FILE        write the chosen plan as JSON (docs/plan.md); `mpirun -np N tgc\n"
    "                          train FILE --plan plan.json --data SOURCE` runs it\n"
    "  --train-tokens N        also the time to train on N tokens (300e9, 300B, 1.5T, ...): days\n"
    "                          and GPU-hours at the plan's tokens/s, beside the closed form\n"
    "                          8 T P / (N F U) of Narayanan et al. 2021 (eq. 4)\n"
    "  --top K                 also list the K-1 runners-up and why each lost, and the plans\n"
    "                          that would be faster but do not fit\n"
    "  --explain               show the arithmetic behind every figure\n"
    "  --json                  one JSON object instead of text\n"
    "  --trace FILE            a Chrome trace (chrome://tracing, ui.perfetto.dev) of one\n"
    "                          simulated step of the plan: lanes per pipeline stage\n"
    "  --constant NAME=VALUE   change a constant of the cost model (docs/plan.md): gemm_eff,\n"
    "                          gemm_half, attn_eff, mem_eff, nccl_base_lat (seconds)\n"
    "\n"
    "The model needs a config constant B (the batch: the planner compiles the training\n"
    "graph at B = 2 and 4 to see which dims grow with it) and `repeat` layers.\n"
    "\n";

extern const char *const tool_common_help;

static bool parse_count(const char *v, long lo, long hi, long *out) {
  if (!v || !*v) return false;
  char *end;
  long n = strtol(v, &end, 10);
  if (*end || n < lo || n > hi || v[0] == '+' || v[0] == ' ') return false;
  *out = n;
  return true;
}

static int bad(ir_diag *d, const char *flag, const char *v, const char *want) {
  ir_error_plain(d, "%s %s: expected %s", flag, v ? v : "(nothing)", want);
  return -1;
}

typedef struct {
  const char *cluster, *cluster_file, *gpus, *global_batch, *seq, *mesh, *trace, *checkpoint, *save_plan, *train_tokens;
  const char *constants[8]; /* --constant NAME=VALUE */
  int n_constants;
  int dtype, optimizer, top, zero, micro_batch, schedule, v, sp;
  bool explain, json, dtype_given;
} plan_flags;

/* 1 consumed, 0 not a plan flag, -1 error (reported). */
static int parse_flag(plan_flags *f, int argc, char **argv, int *i, ir_diag *d) {
  const char *v = NULL;
  const char *a = argv[*i];
  if (strcmp(a, "--json") == 0) return f->json = true, 1;
  if (strcmp(a, "--explain") == 0) return f->explain = true, 1;
  long n;
  if (tool_flag("--top", argc, argv, i, &v)) {
    if (!parse_count(v, 1, 1000, &n)) return bad(d, "--top", v, "a count from 1 to 1000");
    return f->top = (int)n, 1;
  }
  if (tool_flag("--zero", argc, argv, i, &v)) {
    if (!parse_count(v, 0, 3, &n)) return bad(d, "--zero", v, "a ZeRO stage: 0, 1, 2 or 3");
    return f->zero = (int)n, 1;
  }
  if (tool_flag("--micro-batch", argc, argv, i, &v)) {
    if (!parse_count(v, 1, 1 << 20, &n)) return bad(d, "--micro-batch", v, "a positive number of sequences");
    return f->micro_batch = (int)n, 1;
  }
  if (tool_flag("--sp", argc, argv, i, &v)) { /* the old spelling of --mesh ...,sp */
    if (!v || (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)) return bad(d, "--sp", v, "on or off");
    ir_note(d, (ir_loc){0}, "--sp %s: sequence parallelism is spelled --mesh ...,sp (e.g. --mesh dp=2,tp=2,sp)", v);
    return f->sp = strcmp(v, "on") == 0, 1;
  }
  if (tool_flag("--dtype", argc, argv, i, &v)) {
    f->dtype = !v ? -1 : strcmp(v, "bf16") == 0 ? IR_DT_BF16 : strcmp(v, "fp16") == 0 ? IR_DT_F16
                      : strcmp(v, "fp32") == 0 ? IR_DT_F32 : -1;
    f->dtype_given = true;
    return f->dtype < 0 ? bad(d, "--dtype", v, "bf16, fp16 or fp32") : 1;
  }
  if (tool_flag("--optimizer", argc, argv, i, &v)) {
    f->optimizer = pass_optimizer_from_name(v);
    return f->optimizer < 0 ? bad(d, "--optimizer", v, "adam, adamw, momentum or sgd") : 1;
  }
  if (tool_flag("--constant", argc, argv, i, &v)) {
    if (!v || !strchr(v, '=')) return bad(d, "--constant", v, "NAME=VALUE (gemm_eff, gemm_half, attn_eff, mem_eff, nccl_base_lat)");
    if (f->n_constants == 8) return bad(d, "--constant", v, "at most 8 of them");
    return f->constants[f->n_constants++] = v, 1;
  }
  if (tool_flag("--checkpoint", argc, argv, i, &v)) {
    const char *name = tool_checkpoint_name(v);
    if (!name) return bad(d, "--checkpoint", v, "none, block (or full), selective, sqrt or budget=BYTES");
    if (pass_plan_ckpt_from_name(name) < 0) {
      ir_error_plain(d, "--checkpoint %s: the planner models only none, selective and block (or full); give one of "
                        "them, or leave --checkpoint out to search them", v);
      return -1;
    }
    return f->checkpoint = name, 1;
  }
  bool old_schedule = tool_flag("--schedule", argc, argv, i, &v);
  if (old_schedule || tool_flag("--pipeline-schedule", argc, argv, i, &v)) {
    const char *flag = old_schedule ? "--schedule" : "--pipeline-schedule";
    char name[32] = "";
    const char *colon = v ? strchr(v, ':') : NULL;
    if (v) snprintf(name, sizeof name, "%.*s", colon ? (int)(colon - v) : (int)strlen(v), v);
    f->schedule = pass_schedule_from_name(name);
    if (f->schedule < 0) return bad(d, flag, v, "gpipe, 1f1b or interleaved[:V]");
    if (colon && (f->schedule != PASS_SCHED_INTERLEAVED || !parse_count(colon + 1, 2, 1024, &n)))
      return bad(d, flag, v, "interleaved:V with V >= 2 chunks per GPU (only the interleaved schedule has chunks)");
    if (colon) f->v = (int)n;
    if (old_schedule) ir_note(d, (ir_loc){0}, "--schedule %s: the pipeline schedule is spelled --pipeline-schedule", v);
    return 1;
  }
  const char **dst = NULL;
  const char *flag = NULL;
  static const char *const names[] = {"--cluster", "--cluster-file", "--gpus",      "--global-batch", "--seq",
                                      "--mesh",    "--trace",        "--save-plan", "--train-tokens"};
  const char **fields[] = {&f->cluster, &f->cluster_file, &f->gpus,      &f->global_batch, &f->seq,
                           &f->mesh,    &f->trace,        &f->save_plan, &f->train_tokens};
  for (size_t k = 0; k < sizeof names / sizeof names[0] && !dst; k++)
    if (tool_flag(names[k], argc, argv, i, &v)) dst = fields[k], flag = names[k];
  if (!dst) return 0;
  if (!v || !*v) {
    ir_error_plain(d, "%s needs a value", flag);
    return -1;
  }
  *dst = v;
  return 1;
}

/* --mesh: the one syntax of every command (ir_mesh_parse: each axis
 * optional, default 1; ",sp" fixes sequence parallelism on). */
static int parse_mesh(const char *spec, pass_plan_query *q, ir_diag *d) {
  ir_mesh m;
  char err[256];
  if (ir_mesh_parse(spec, &m, err, sizeof err) != 0) {
    ir_error_plain(d, "--mesh %s: %s", spec, err);
    return -1;
  }
  if (m.sp && q->sp == 0) {
    ir_error_plain(d, "--mesh %s and --sp off: give one", spec);
    return -1;
  }
  q->dp = m.size[IR_AXIS_DP], q->tp = m.size[IR_AXIS_TP], q->pp = m.size[IR_AXIS_PP];
  if (m.sp) q->sp = 1;
  return 0;
}

/* --train-tokens N: a count of tokens, plain (300000000000), in exponent
 * form (300e9) or with a suffix K, M, B (or G), T (300B, 1.5T). */
static bool parse_tokens(const char *v, double *out) {
  if (!v || !*v || *v == '-' || *v == '+' || *v == ' ') return false;
  char *end;
  double x = strtod(v, &end);
  static const char suffix[] = "KMBGT";
  static const double scale[] = {1e3, 1e6, 1e9, 1e9, 1e12};
  const char *s = *end ? strchr(suffix, *end) : NULL;
  if (end == v || (*end && (!s || end[1]))) return false;
  if (s) x *= scale[s - suffix];
  if (!(x >= 1 && x <= 1e18)) return false;
  *out = x;
  return true;
}

/* --constant NAME=VALUE: the model's roofline constants for what-if analyses. */
static int apply_constants(const plan_flags *f, pass_plan_model *m, ir_diag *d) {
  pass_plan_constants k = *pass_plan_model_constants(m);
  static const char *const names[] = {"gemm_eff", "gemm_half", "attn_eff", "mem_eff", "nccl_base_lat"};
  double *fields[] = {&k.gemm_eff, &k.gemm_half, &k.attn_eff, &k.mem_eff, &k.nccl_base_lat};
  for (int i = 0; i < f->n_constants; i++) {
    const char *eq = strchr(f->constants[i], '=');
    int which = -1;
    for (int j = 0; j < 5; j++)
      if (strlen(names[j]) == (size_t)(eq - f->constants[i]) && strncmp(names[j], f->constants[i], (size_t)(eq - f->constants[i])) == 0)
        which = j;
    char *end;
    double v = strtod(eq + 1, &end);
    bool fraction = which == 0 || which == 2 || which == 3;
    if (which < 0 || *end || eq[1] == 0 || !(v >= 0) || (fraction && (v <= 0 || v > 1)) || v > 1e9) {
      ir_error_plain(d, "--constant %s: expected gemm_eff, attn_eff or mem_eff in (0, 1], gemm_half or nccl_base_lat >= 0",
                     f->constants[i]);
      return -1;
    }
    *fields[which] = v;
  }
  pass_plan_model_set_constants(m, &k);
  return 0;
}

static int pick_cluster(const plan_flags *f, pass_cluster *c, char **text, ir_diag *d) {
  if (f->cluster && f->cluster_file) {
    ir_error_plain(d, "--cluster and --cluster-file: give one");
    return -1;
  }
  if (f->cluster_file) {
    size_t len;
    if (!(*text = ir_read_file(f->cluster_file, 1u << 20, &len, d))) return -1;
    if (pass_cluster_parse(f->cluster_file, *text, len, c, d) != 0) return -1;
  } else if (pass_cluster_from_spec(f->cluster ? f->cluster : "dgx-a100", c, d) != 0) {
    return -1;
  }
  if (f->gpus && pass_cluster_set_gpus(c, f->gpus, d) != 0) return -1;
  if (c->gpus == 0) {
    ir_error_plain(d, "how many GPUs? give --cluster %s:NODES or --gpus N%s", c->name,
                   f->cluster_file ? " (or nodes = N in the cluster file)" : "");
    return -1;
  }
  return 0;
}

/* The training graph at batch B for policy ck, in dtype dt. */
static ir_graph *compile_train(tool_compile_opts *o, int b_index, const char *b, pass_plan_ckpt ck, ir_dtype dt,
                               ir_diag *d, char **text) {
  o->defines[b_index].value = b;
  ir_graph *g = tool_load(o, d, text);
  if (!g) return NULL;
  if (tool_shard_view_graph(o, g, pass_plan_ckpt_policy(ck), dt, d) != 0) {
    ir_graph_free(g);
    return NULL;
  }
  return g;
}

/* The optimizer update's FLOPs per parameter element (its update graph). */
static int set_optimizer(const ir_graph *g, const plan_flags *f, pass_plan_model *m, ir_diag *d) {
  double flops = 0, n = 0;
  if (pass_update_flops(g, (pass_optimizer_kind)f->optimizer, &flops, d) != 0) return -1;
  for (int i = 0; i < g->n_params; i++) n += (double)ir_type_numel(&g->params[i]->type);
  pass_plan_model_set_optimizer(m, n > 0 ? flops / n : 0, pass_optimizer_state_count((pass_optimizer_kind)f->optimizer));
  return 0;
}

/* Compiles every policy the search may use into m, at micro-batch b0 and
 * 2 b0 (b0 = 2; 3 or 5 when a per-sample dim equals another dim at 2 and the
 * graphs differ); 0 or -1 (reported). */
static int build_model(tool_compile_opts *o, const plan_flags *f, pass_plan_model *m, ir_dtype dt, int *seq,
                       ir_diag *d) {
  pass_plan_model_disable(m, o->pass_disabled);
  pass_plan_model_set_tp_search(m, !o->tp_megatron);
  int bi = o->fe.n_defines;
  o->defines[bi] = (fe_define){"B", "2"};
  o->fe.n_defines++;
  o->fe.defines = o->defines;
  static const int b0s[] = {2, 3, 5};
  static const char *const lo[] = {"2", "3", "5"}, *const hi[] = {"4", "6", "10"};
  int rc = 0, layers = 0;
  for (int ck = 0; ck < PASS_PLAN_CK_COUNT && rc == 0; ck++) {
    if (f->checkpoint && pass_plan_ckpt_from_name(f->checkpoint) != ck) continue;
    bool added = false;
    for (int t = 0; t < 3 && rc == 0 && !added; t++) {
      char *t2 = NULL, *t4 = NULL;
      ir_graph *g2 = compile_train(o, bi, lo[t], (pass_plan_ckpt)ck, dt, d, &t2);
      ir_graph *g4 = g2 ? compile_train(o, bi, hi[t], (pass_plan_ckpt)ck, dt, d, &t4) : NULL;
      if (!g2 || !g4) rc = -1;
      if (rc == 0 && *seq == 0) { /* tokens per sequence: the first integer input's elements per sequence */
        for (int i = 0; i < g2->n_inputs && *seq == 0; i++)
          if (!ir_dtype_is_float(g2->inputs[i]->type.dtype)) *seq = (int)(ir_type_numel(&g2->inputs[i]->type) / b0s[t]);
        if (set_optimizer(g2, f, m, d) != 0) rc = -1;
      }
      if (rc == 0 && layers == 0) layers = tool_graph_layers(g2);
      if (rc == 0) {
        FILE *sink = t < 2 ? tmpfile() : NULL; /* the last try says why */
        ir_diag *q = sink ? ir_diag_new(sink) : d;
        added = pass_plan_model_add(m, (pass_plan_ckpt)ck, b0s[t], g2, g4, q) == 0;
        g4 = NULL; /* the model took it */
        if (sink) ir_diag_free(q), fclose(sink);
        if (!added && t == 2) rc = -1;
      } else {
        ir_graph_free(g2);
      }
      ir_graph_free(g4);
      free(t2);
      free(t4);
    }
  }
  o->fe.n_defines = bi;
  if (rc == 0 && !o->tp_megatron) { /* the graph tgc train searches too (tool_tp_layouts): the same layouts */
    ir_graph *sg = tool_tp_search_graph(o, dt, d);
    if (!sg) return -1;
    pass_plan_model_set_search_graph(m, sg, layers);
  }
  return rc;
}

/* The numbers of the flags: --global-batch (required), --train-tokens,
 * --mesh (its devices the cluster's), into *gb, *tokens and q. */
static int plan_numbers(const plan_flags *f, const pass_cluster *cluster, long *gb, double *tokens, pass_plan_query *q,
                        ir_diag *d) {
  if (!f->global_batch) {
    ir_error_plain(d, "tgc plan needs --global-batch G (sequences per training step)");
    return -1;
  }
  if (!parse_count(f->global_batch, 1, 1L << 30, gb)) {
    bad(d, "--global-batch", f->global_batch, "a positive number of sequences");
    return -1;
  }
  if (f->train_tokens && !parse_tokens(f->train_tokens, tokens)) {
    bad(d, "--train-tokens", f->train_tokens, "a count of tokens such as 300000000000, 300e9, 300B or 1.5T");
    return -1;
  }
  *q = (pass_plan_query){-1, -1, -1, f->sp, f->zero, f->micro_batch, f->schedule, f->v, -1, f->top};
  if (f->checkpoint) q->ckpt = pass_plan_ckpt_from_name(f->checkpoint);
  if (f->mesh && parse_mesh(f->mesh, q, d) != 0) return -1;
  if (f->mesh && (long)q->dp * q->tp * q->pp != cluster->gpus) { /* before compiling anything */
    ir_error_plain(d, "--mesh %s: dp %d x tp %d x pp %d = %ld devices, but the cluster has %d GPUs", f->mesh, q->dp, q->tp,
                   q->pp, (long)q->dp * q->tp * q->pp, cluster->gpus);
    return -1;
  }
  return 0;
}

/* The model's config: B must be a constant the planner sets (not -D); --seq
 * sets T. *cfg: the configs read (freed by the caller). */
static int plan_config(tool_compile_opts *o, const plan_flags *f, fe_config_set **cfg, ir_diag *d) {
  *cfg = tool_configs(o);
  if (!*cfg || !(*cfg)->chosen || !fe_config_const((*cfg)->chosen, "B")) {
    if (!*cfg && !tool_is_ir_file(o->file)) { /* it does not read or parse: let the frontend say why */
      char *text = NULL;
      ir_graph *g = tool_load(o, d, &text);
      ir_graph_free(g);
      free(text);
    } else {
      ir_error_plain(d, "%s: tgc plan needs a .tg model whose config defines the batch as a constant B (it compiles "
                        "the training graph at B = 2 and 4)", o->file);
    }
    return -1;
  }
  for (int k = 0; k < o->fe.n_defines; k++)
    if (strcmp(o->defines[k].name, "B") == 0) {
      ir_error_plain(d, "-D B=%s: tgc plan chooses the micro-batch itself (fix it with --micro-batch %s)",
                     o->defines[k].value, o->defines[k].value);
      return -1;
    }
  return f->seq ? tool_set_constant(o, *cfg, "--seq", "T", f->seq, d) : 0;
}

int tool_cmd_plan(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s", plan_help, tool_common_help);
      return 0;
    }
  double t0 = ir_clock_s();
  ir_diag *d = tool_diag_new();
  tool_compile_opts o = {0};
  plan_flags f = {.dtype = IR_DT_BF16, .optimizer = PASS_OPT_ADAM, .top = 1, .zero = -1, .micro_batch = -1,
                  .schedule = -1, .v = -1, .sp = -1};
  int rc = 0;
  for (int i = 1; i < argc && rc == 0; i++) {
    const char *a = argv[i];
    int r = parse_flag(&f, argc, argv, &i, d);
    if (r == 0) r = tool_parse_common(&o, argc, argv, &i, d);
    if (r < 0) rc = -1;
    if (r != 0) continue;
    if (tool_positional("plan", a, &o, d) != 0) rc = -1;
  }
  if (rc == 0 && tool_need_file("plan", &o, d) != 0) rc = -1;
  pass_cluster cluster;
  char *cluster_text = NULL;
  if (rc == 0 && pick_cluster(&f, &cluster, &cluster_text, d) != 0) rc = -1;
  long gb = 0;
  double train_tokens = 0;
  pass_plan_query q;
  if (rc == 0) rc = plan_numbers(&f, &cluster, &gb, &train_tokens, &q, d);
  fe_config_set *cfg = NULL;
  if (rc == 0) rc = plan_config(&o, &f, &cfg, d);
  pass_plan_model *m = NULL;
  int seq = 0;
  double t_compile = 0, c_compile = 0;
  if (rc == 0) {
    m = pass_plan_model_new(&cluster.device);
    if (apply_constants(&f, m, d) != 0) rc = -1;
    double tc = ir_clock_s(), cc = ir_cpu_clock_s();
    if (rc == 0 && build_model(&o, &f, m, (ir_dtype)f.dtype, &seq, d) != 0) rc = -1;
    t_compile = ir_clock_s() - tc;
    c_compile = ir_cpu_clock_s() - cc;
  }
  pass_plan_job job = {(int)gb, seq};
  pass_plan_found found = {0};
  int sr = rc == 0 ? pass_plan_search(m, &cluster, &job, &q, &found, d) : 0;
  if (sr < 0) rc = -1;
  if (rc == 0 && sr == 1) {
    plan_print_no_fit(d, &found, &cluster, m);
    rc = -1;
  }
  uint64_t hash = 0;
  if (rc == 0) { /* the model file's identity, for the plan file and the train run's check */
    size_t len = 0;
    char *bytes = ir_read_file(o.file, TOOL_MAX_FILE_BYTES, &len, d);
    if (!bytes) rc = -1;
    else hash = tool_fnv1a64(bytes, len);
    free(bytes);
  }
  if (rc == 0) {
    plan_report rep = {.file = o.file, .config = cfg->chosen->name, .cluster = &cluster, .model = m, .job = &job,
                       .found = &found, .dtype = (ir_dtype)f.dtype, .dtype_given = f.dtype_given, .optimizer = (pass_optimizer_kind)f.optimizer,
                       .compile_s = t_compile, .compile_cpu_s = c_compile, .explain = f.explain,
                       .config_flag = o.fe.config, .defines = o.defines, .n_defines = o.fe.n_defines,
                       .model_hash = hash, .save_plan = f.save_plan, .train_tokens = train_tokens};
    rep.total_s = ir_clock_s() - t0;
    if (f.save_plan && plan_save(&rep, d) != 0) rc = -1;
    else if (f.json) plan_print_json(stdout, &rep);
    else plan_print_text(stdout, &rep);
    if (rc == 0 && f.trace && plan_write_trace_file(f.trace, &rep, d) != 0) rc = -1;
  }
  pass_plan_found_free(&found);
  pass_plan_model_free(m);
  fe_config_set_free(cfg);
  free(cluster_text);
  ir_diag_free(d);
  return rc == 0 ? 0 : 1;
}

/* `tgc train --mesh auto`: the planner's plan for `ranks` ranks of one
 * cpu-host (clusters.def), restricted to what the trainer runs: the batch B
 * of the config split over dp (b = B / dp per replica, K micro-batches),
 * dp, tp, sp, pp, ZeRO 0-3, gpipe or 1f1b, no checkpointing. The search is
 * deterministic, so every rank chooses the same plan. Sets o->mesh (and
 * o->zero, *schedule); 0, or -1 after reporting. */
int tool_plan_auto_mesh(tool_compile_opts *o, const char *cluster, const char *cluster_file, int ranks,
                        int micro_batches, ir_dtype dt, int optimizer, bool print, int *schedule, ir_diag *d) {
  fe_config_set *cfg = tool_configs(o);
  const fe_const *B = cfg && cfg->chosen ? fe_config_const(cfg->chosen, "B") : NULL;
  if (!B || B->kind != FE_CONST_INT || B->i < 1) {
    fe_config_set_free(cfg);
    if (!cfg && !tool_is_ir_file(o->file)) return 0; /* it does not parse: tool_load says why */
    ir_error_plain(d, "--mesh auto: %s: the planner needs a .tg model whose config defines the batch as a constant B",
                   o->file);
    return -1;
  }
  long batch = (long)B->i;
  fe_config_set_free(cfg);
  tool_compile_opts po = *o; /* the planner sets B itself: without the -D B of --batch */
  po.fe.n_defines = 0;
  for (int k = 0; k < o->fe.n_defines; k++)
    if (strcmp(o->defines[k].name, "B") != 0) po.defines[po.fe.n_defines++] = o->defines[k];
  po.fe.defines = po.defines;
  po.mesh_auto = false;
  plan_flags f = {.dtype = dt, .optimizer = optimizer, .checkpoint = "none"};
  pass_cluster c;
  char n[16], *ctext = NULL;
  snprintf(n, sizeof n, "%d", ranks);
  if (cluster && strchr(cluster, ':')) {
    ir_error_plain(d, "--cluster %s: with --mesh auto the cluster's size is the job's ranks (%d); give the node kind "
                   "alone (e.g. --cluster %.*s)", cluster, ranks, (int)(strchr(cluster, ':') - cluster), cluster);
    return -1;
  }
  if (cluster && cluster_file) {
    ir_error_plain(d, "--cluster and --cluster-file: give one");
    return -1;
  }
  /* the cluster's size is the job's ranks: an error names what the user gave
   * (--cluster-file's nodes, the ranks), never --gpus, which train has not */
  int prc = 0;
  if (cluster_file) {
    size_t len;
    prc = !(ctext = ir_read_file(cluster_file, 1u << 20, &len, d)) || pass_cluster_parse(cluster_file, ctext, len, &c, d) != 0;
  } else {
    prc = pass_cluster_from_spec(cluster ? cluster : "cpu-host", &c, d) != 0;
  }
  char given[1100];
  snprintf(given, sizeof given, cluster_file ? "--cluster-file %s" : "--cluster %s", cluster_file ? cluster_file : cluster ? cluster : "cpu-host");
  if (!prc && cluster_file && c.nodes > 0 && c.gpus != ranks) {
    ir_error_plain(d, "%s: the file sets nodes = %d (%d GPUs), but with --mesh auto the cluster's size is the job's "
                   "ranks (%d); remove 'nodes' from the file, or start %d ranks", given, c.nodes, c.gpus, ranks, c.gpus);
    prc = 1;
  } else if (!prc && !(cluster_file && c.nodes > 0) && ranks > c.gpus_per_node && ranks % c.gpus_per_node != 0) {
    ir_error_plain(d, "%s: the job's %d ranks are not a whole number of %s nodes (%d GPUs each); start a multiple of "
                   "%d ranks, or at most %d", given, ranks, c.name, c.gpus_per_node, c.gpus_per_node, c.gpus_per_node);
    prc = 1;
  } else if (!prc && !(cluster_file && c.nodes > 0)) {
    prc = pass_cluster_set_gpus(&c, n, d) != 0;
  }
  if (prc) {
    free(ctext);
    return -1;
  }
  pass_plan_model *m = pass_plan_model_new(&c.device);
  int seq = 0, rc = build_model(&po, &f, m, dt, &seq, d);
  pass_plan_job job = {(int)(batch * micro_batches), seq};
  /* per micro-batch b dividing B (the search keeps one plan per family,
   * micro-batch sizes together): the plans with dp = B / b */
  pass_plan_found found = {0};
  pass_plan_result chosen;
  const pass_plan_result *best = NULL;
  for (long b = 1; rc == 0 && b <= batch; b++) {
    if (batch % b != 0) continue;
    pass_plan_query q = {-1, -1, -1, -1, -1, (int)b, -1, 1, PASS_PLAN_CK_NONE, 1000};
    FILE *sink = tmpfile(); /* a b no plan takes is no error */
    ir_diag *qd = sink ? ir_diag_new(sink) : d;
    int sr = pass_plan_search(m, &c, &job, &q, &found, qd);
    if (sink) ir_diag_free(qd), fclose(sink);
    for (int i = 0; sr == 0 && i < found.n_plans; i++) {
      const pass_plan_result *r = &found.plans[i];
      if ((long)r->s.dp * b == batch && r->s.schedule != PASS_SCHED_INTERLEAVED && r->s.v == 1 && (!best || r->step < best->step))
        chosen = *r, best = &chosen;
    }
    pass_plan_found_free(&found);
    memset(&found, 0, sizeof found);
  }
  if (rc == 0 && !best) {
    ir_error_plain(d, "--mesh auto: no plan for %d ranks fits (batch %ld, %d micro-batches); give --mesh", ranks, batch,
                   micro_batches);
    rc = -1;
  }
  if (rc == 0) {
    const pass_plan_strategy *s = &best->s;
    o->mesh = ir_mesh_single();
    o->mesh.size[IR_AXIS_DP] = s->dp, o->mesh.size[IR_AXIS_TP] = s->tp, o->mesh.size[IR_AXIS_PP] = s->pp;
    o->mesh.sp = s->sp;
    o->mesh_set = true, o->mesh_auto = false;
    o->zero = s->dp > 1 ? s->zero : 0;
    *schedule = s->pp > 1 ? (int)s->schedule : PASS_SCHED_GPIPE;
    if (print) {
      char ms[128];
      printf("mesh auto: dp=%d,tp=%d,pp=%d%s (planner: %s, %d ranks of %s; ZeRO %d, %s, micro-batch %d x %d; "
             "step %.3g ms predicted)\n",
             s->dp, s->tp, s->pp, s->sp ? ",sp" : "", ir_mesh_str(&o->mesh, ms, sizeof ms), ranks, c.name, o->zero,
             pass_schedule_name((pass_schedule)*schedule), s->micro_batch, best->m, best->step * 1e3);
    }
  }
  pass_plan_found_free(&found);
  pass_plan_model_free(m);
  free(ctext);
  return rc;
}
