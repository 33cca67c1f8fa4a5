/* tools/plan_print.c — the renderings of a `tgc plan` result: text (the
 * plan, memory by kind, collectives by kind and axis, the step's rows, the
 * runners-up; with --explain the arithmetic behind each), one JSON object,
 * the "nothing fits" error, the Chrome trace file, the plan file
 * (--save-plan), the command that runs the plan (the text's last line, the
 * JSON's "command") and the time to train (--train-tokens). cmd_plan.c runs
 * the search; plan/plan*.c hold the model. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir_die.h"
#include "plan_print.h"

/* The checkpoint pass's name of a planner policy (none, selective, block):
 * the one vocabulary of plan, train, stats and dump. */
static const char *ckpt_name(pass_plan_ckpt c) {
  const char *p = pass_plan_ckpt_policy(c);
  return p ? p : "none";
}

static const char *gb(double bytes, char *buf, size_t n) {
  snprintf(buf, n, "%.2f GB", bytes / 1e9);
  return buf;
}

/* bytes with an SI prefix, 4 digits: "65.06 MB" */
static const char *bytes_si(double bytes, char *buf, size_t n) { return stats_si(bytes, "B", buf, n); }

/* "dp 8 x tp 8 x pp 16, sequence parallel, ZeRO-1, micro-batch 1 x 192, interleaved 1f1b (v = 2), checkpoint selective" */
static const char *describe(const pass_plan_result *r, char *buf, size_t n) {
  const pass_plan_strategy *s = &r->s;
  char sched[64];
  if (s->pp == 1) snprintf(sched, sizeof sched, "no pipeline");
  else if (s->schedule == PASS_SCHED_INTERLEAVED) snprintf(sched, sizeof sched, "interleaved 1f1b (v = %d)", s->v);
  else snprintf(sched, sizeof sched, "%s", pass_schedule_name(s->schedule));
  snprintf(buf, n, "dp %d x tp %d x pp %d%s, ZeRO-%d, micro-batch %d x %d, %s, checkpoint %s", s->dp, s->tp, s->pp,
           s->sp ? ", sequence parallel" : "", s->zero, s->micro_batch, r->m, sched, ckpt_name(s->ckpt));
  return buf;
}

/* "layers 0-11" of groups first..last (group 0: embeddings, L + 1: head) */
static const char *layers_of(int first, int last, int L, char *buf, size_t n) {
  int a = first < 1 ? 1 : first, b = last > L ? L : last;
  char range[32];
  if (a == b) snprintf(range, sizeof range, "layer %d", a - 1);
  else snprintf(range, sizeof range, "layers %d-%d", a - 1, b - 1);
  snprintf(buf, n, "%s%s%s", first == 0 ? "embeddings + " : "", range, last == L + 1 ? " + head" : "");
  return buf;
}

static const char *dtype_name(ir_dtype t) {
  return t == IR_DT_BF16 ? "bf16" : t == IR_DT_F16 ? "fp16" : t == IR_DT_F32 ? "fp32" : ir_dtype_name(t);
}

/* What a device of the cluster is called: a GPU, or, on a cluster of CPU
 * devices (cpu-host: mpirun's ranks on one host's cores), a rank, whose
 * ranks on one node talk through shared memory, not NVLink. */
static bool host_ranks(const pass_cluster *cl) { return strncmp(cl->device.name, "cpu", 3) == 0; }
static const char *dev(const pass_cluster *cl) { return host_ranks(cl) ? "rank" : "GPU"; }
static const char *intra_link(const pass_cluster *cl) { return host_ranks(cl) ? "shared memory" : "NVLink"; }

static void print_header(FILE *f, const plan_report *r) {
  char a[64], b[64], c[64], e[64], g[64];
  const pass_cluster *cl = r->cluster;
  const pass_plan_found *fd = r->found;
  int L = pass_plan_model_layers(r->model);
  size_t eb = pass_plan_model_elem_bytes(r->model);
  fprintf(f, "tgc plan: %s%s%s: %s parameters, %d layers; %s%s%s, %s\n", r->file, r->config ? ", config " : "",
          r->config ? r->config : "", stats_grouped(pass_plan_model_params(r->model), a, sizeof a), L,
          dtype_name(r->dtype), eb == 2 ? " (mixed precision: fp32 master weights and optimizer state)" : "",
          r->dtype_given ? "" : " (tgc plan's default; tgc train runs fp32 unless --dtype bf16: --dtype fp32 plans that)",
          pass_optimizer_name(r->optimizer));
  fprintf(f, "cluster: %s, %d node%s x %d %ss = %s %ss (%s: %s bf16, %s; %s %s, network %s per %s per direction)\n",
          cl->name, cl->nodes, cl->nodes == 1 ? "" : "s", cl->gpus_per_node, dev(cl), stats_grouped(cl->gpus, a, sizeof a),
          dev(cl), cl->device.name, stats_si(cl->device.flops_bf16, "FLOP/s", b, sizeof b), gb(cl->device.memory, c, sizeof c),
          intra_link(cl), stats_si(cl->intra_bw, "B/s", e, sizeof e), stats_si(cl->inter_bw, "B/s", g, sizeof g), dev(cl));
  double tokens = (double)r->job->global_batch * r->job->seq;
  fprintf(f, "step: %s sequences x %s tokens = %s tokens\n", stats_grouped(r->job->global_batch, a, sizeof a),
          stats_grouped(r->job->seq, b, sizeof b), stats_grouped(tokens, c, sizeof c));
  fprintf(f, "search: %s plans in %.3f s, %.3f s CPU (training graph compiled %d times in %.3f s, %.3f s CPU): %s over "
             "memory, %s cut by their lower bound, %s simulated\n",
          stats_grouped((double)fd->considered, a, sizeof a), fd->seconds, fd->cpu_seconds,
          2 * (pass_plan_model_has(r->model, 0) + pass_plan_model_has(r->model, 1) + pass_plan_model_has(r->model, 2)),
          r->compile_s, r->compile_cpu_s, stats_grouped((double)fd->over_memory, b, sizeof b),
          stats_grouped((double)fd->pruned, c, sizeof c), stats_grouped((double)fd->simulated, e, sizeof e));
}

static void print_stages(FILE *f, const pass_plan_detail *dt, int L) {
  fprintf(f, "  stages (the embeddings go with the first, the head with the last):\n");
  for (int dev = 0; dev < dt->n_stages; dev++) {
    fprintf(f, "    stage %d:", dev);
    for (int k = dev; k < dt->n_virtual; k += dt->n_stages) {
      char l[96];
      fprintf(f, "%s %s", k == dev ? "" : ",", layers_of(dt->first[k], dt->last[k], L, l, sizeof l));
    }
    fprintf(f, "\n");
  }
}

static void print_memory(FILE *f, const pass_plan_result *b, const pass_plan_detail *dt, const plan_report *r) {
  char x[64], y[64], z[64];
  const pass_cluster *cl = r->cluster;
  fprintf(f, "\nmemory per %s (stage %d, the fullest) of %s usable (%s less a %s reserve):\n", dev(cl), b->fullest,
          gb(b->capacity, x, sizeof x), gb(cl->device.memory, y, sizeof y), gb(cl->reserve, z, sizeof z));
  static const char *const notes[PASS_MEM_KINDS] = {"", "", "", "micro-batches in flight", "one layer's backward",
                                                    "send/recv buffers"};
  for (int k = 0; k < PASS_MEM_KINDS; k++) {
    fprintf(f, "  %-16s %10s", pass_mem_kind_name(k), bytes_si(b->mem[k], x, sizeof x));
    if (k == PASS_MEM_ACTIVATIONS && dt)
      fprintf(f, "  (%d %s in flight)", dt->sim.peak_mb[b->fullest],
              b->s.v > 1 ? (dt->sim.peak_mb[b->fullest] == 1 ? "micro-batch chunk" : "micro-batch chunks")
                         : (dt->sim.peak_mb[b->fullest] == 1 ? "micro-batch" : "micro-batches"));
    else if (k == PASS_MEM_OPTIMIZER && b->s.zero >= 1) fprintf(f, "  (sharded over dp %d: ZeRO-%d)", b->s.dp, b->s.zero);
    else if (notes[k][0]) fprintf(f, "  (%s)", notes[k]);
    fprintf(f, "\n");
  }
  fprintf(f, "  %-16s %10s  (%.1f%% of %s)\n", "total", bytes_si(b->mem_total, x, sizeof x), 100 * b->mem_total / b->capacity,
          bytes_si(b->capacity, y, sizeof y));
}

static void print_comm(FILE *f, const pass_plan_result *b, const pass_cluster *cl) {
  char x[64], y[64], z[64], w[64];
  fprintf(f, "\ncommunication per %s per step (stage %d):\n", dev(cl), b->critical);
  fprintf(f, "  %-15s %-9s %-24s %12s %10s %12s %12s\n", "kind", "axis", "of", "payload", "calls", "time", "exposed");
  for (int i = 0; i < b->n_comm; i++) {
    const pass_plan_comm *c = &b->comm[i];
    fprintf(f, "  %-15s %-9s %-24s %12s %10s %12s %12s\n", pass_coll_name(c->kind), pass_axis_name(c->axis), c->what,
            bytes_si(c->payload, x, sizeof x), stats_grouped(c->calls, y, sizeof y), stats_seconds(c->seconds, z, sizeof z),
            stats_seconds(c->exposed, w, sizeof w));
  }
  if (b->n_comm == 0) fprintf(f, "  (none: one %s)\n", dev(cl));
}

static void print_rows(FILE *f, const pass_plan_result *b, const plan_report *r) {
  char x[64], y[64], z[64];
  fprintf(f, "\nstep time (stage %d, the last to finish):\n", b->critical);
  double sum = 0;
  for (int k = 0; k < PASS_ROWS; k++) {
    sum += b->rows[k];
    fprintf(f, "  %-22s %12s  %5.1f%%\n", pass_plan_row_name(k), stats_seconds(b->rows[k], x, sizeof x),
            100 * b->rows[k] / b->step);
  }
  fprintf(f, "  %-22s %12s\n", "total", stats_seconds(b->step, x, sizeof x));
  double tokens = (double)r->job->global_batch * r->job->seq;
  fprintf(f, "MFU %.1f%% (6 x %s parameters x %s tokens / (%s x %s x %d %ss)); %s tokens/s; %s per %s of all work "
             "done (recompute and replicated ops included)\n",
          100 * b->mfu, stats_si(pass_plan_model_params(r->model), "", x, sizeof x),
          stats_grouped(tokens, y, sizeof y), stats_seconds(b->step, z, sizeof z),
          stats_si(r->cluster->device.flops_bf16, "FLOP/s", x + 32, sizeof x - 32), r->cluster->gpus, dev(r->cluster),
          stats_grouped(round(b->tokens_per_s), y + 32, sizeof y - 32), stats_si(b->hw_flops, "FLOP/s", z + 32, sizeof z - 32),
          dev(r->cluster));
  (void)sum;
}

static void print_runners_up(FILE *f, const plan_report *r) {
  const pass_plan_found *fd = r->found;
  char d[256], x[64], y[64];
  if (fd->n_plans > 1) {
    fprintf(f, "\nrunners-up:\n");
    for (int i = 1; i < fd->n_plans; i++)
      fprintf(f, "  %d. %s: %s, slower by %.1f%%\n", i + 1, describe(&fd->plans[i], d, sizeof d),
              stats_seconds(fd->plans[i].step, x, sizeof x), 100 * (fd->plans[i].step / fd->plans[0].step - 1));
  }
  if (fd->n_unfit > 0) {
    fprintf(f, "\nfaster, but over memory:\n");
    for (int i = 0; i < fd->n_unfit; i++) {
      const pass_plan_result *u = &fd->unfit[i];
      fprintf(f, "  %s: %s (%.1f%% faster), does not fit by %s on stage %d (needs %s)\n", describe(u, d, sizeof d),
              stats_seconds(u->step, x, sizeof x), 100 * (1 - u->step / fd->plans[0].step),
              gb(u->mem_total - u->capacity, y, sizeof y), u->fullest, gb(u->mem_total, x + 32, sizeof x - 32));
    }
  }
}

/* ---- --explain ---- */
static void explain_group(FILE *f, const pass_plan_model *m, const char *name, const pass_plan_profile *P, int gi,
                          const pass_cluster *cl, int t) {
  const pass_plan_group *g = &P->groups[gi];
  double params = pass_plan_params_in(P, gi, gi);
  char a[64], b[64], c[64], d[64], e[64], h[64];
  fprintf(f, "    %-14s forward %s (%s), backward %s (%s), recompute %s (%s)\n", name,
          stats_si(g->flops[0], "FLOP", a, sizeof a), stats_seconds(g->seconds[0], b, sizeof b),
          stats_si(g->flops[1], "FLOP", c, sizeof c), stats_seconds(g->seconds[1], d, sizeof d),
          stats_si(g->flops[2], "FLOP", e, sizeof e), stats_seconds(g->seconds[2], h, sizeof h));
  fprintf(f, "    %-14s kept for the backward %s, working %s, parameters %s\n", "", bytes_si(g->saved, a, sizeof a),
          bytes_si(g->working, b, sizeof b), stats_grouped(params, c, sizeof c));
  for (int p = 0; p < PASS_NUM_PHASES; p++)
    for (int k = 0; k < 3; k++)
      if (g->coll_count[p][k])
        fprintf(f, "    %-14s %s: %d %s of %s in all on %d GPUs = %s\n", "", pass_phase_name(p), g->coll_count[p][k],
                pass_coll_name(k), bytes_si(g->coll_bytes[p][k], a, sizeof a), t,
                stats_seconds(pass_plan_coll_seconds(m, cl, k, t, g->coll_bytes[p][k], g->coll_count[p][k], 1), b, sizeof b));
}

static void print_explain(FILE *f, const plan_report *r, const pass_plan_result *best, const pass_plan_detail *dt) {
  char a[64], b[64], c[64], d[64];
  const pass_plan_strategy *s = &best->s;
  const pass_cluster *cl = r->cluster;
  int L = pass_plan_model_layers(r->model), m = best->m;
  pass_plan_constants k = *pass_plan_model_constants(r->model);
  const pass_plan_profile *P = pass_plan_model_profile(r->model, s->ckpt, s->micro_batch, s->tp, s->sp);
  fprintf(f, "\nexplain\n");
  fprintf(f, "  per layer, from the training graph (compiled at micro-batch 2 and 4, checkpoint %s, %s), on one GPU "
             "of the tensor group (tp %d%s), one micro-batch of %d:\n",
          ckpt_name(s->ckpt), dtype_name(r->dtype), s->tp, s->sp ? ", sequence parallel" : "",
          s->micro_batch);
  explain_group(f, r->model, "embeddings", P, 0, cl, s->tp);
  explain_group(f, r->model, "layer 0", P, 1, cl, s->tp);
  if (L > 2) {
    snprintf(a, sizeof a, "layer %d", L / 2);
    explain_group(f, r->model, a, P, L / 2 + 1, cl, s->tp);
  }
  explain_group(f, r->model, "head", P, L + 1, cl, s->tp);
  fprintf(f, "  compute time: per op max(FLOPs / (peak x e), bytes / (%s x %.2f), device calls x %s); e = %.2f x "
             "d/(d + %.0f) for each of a matmul's M, N, K; %.2f for fused attention (over half its FLOPs when causal); "
             "1 otherwise\n",
          stats_si(cl->device.bandwidth, "B/s", a, sizeof a), k.mem_eff, stats_seconds(cl->device.launch, b, sizeof b),
          k.gemm_eff, k.gemm_half, k.attn_eff);
  fprintf(f, "  collectives: base %s + steps x alpha + bytes factor x payload / beta; all-reduce 2(n-1) steps and "
             "2(n-1)/n, all-gather and reduce-scatter n-1 and (n-1)/n; alpha %s (%s), %s (network); beta %s, %s\n",
          stats_seconds(k.nccl_base_lat, a, sizeof a), stats_seconds(cl->intra_lat, b, sizeof b), intra_link(cl),
          stats_seconds(cl->inter_lat, c, sizeof c), stats_si(cl->intra_bw, "B/s", d, sizeof d),
          stats_si(cl->inter_bw, "B/s", a + 32, sizeof a - 32));
  fprintf(f, "  stages: a dynamic program over the %d layers minimizing the slowest of the %d stages; per micro-batch:\n",
          L, dt->n_virtual);
  for (int v = 0; v < dt->n_virtual; v++) {
    char l[96];
    fprintf(f, "    virtual stage %d on GPU stage %d (%s): forward %s, backward %s (collectives %s + %s)", v,
            v % dt->n_stages, layers_of(dt->first[v], dt->last[v], L, l, sizeof l), stats_seconds(dt->fwd[v], a, sizeof a),
            stats_seconds(dt->bwd[v], b, sizeof b), stats_seconds(dt->fwd_comm[v], c, sizeof c),
            stats_seconds(dt->bwd_comm[v], d, sizeof d));
    if (v + 1 < dt->n_virtual) fprintf(f, ", send %s", stats_seconds(dt->send[v], a, sizeof a));
    fprintf(f, "\n");
  }
  int cs = best->critical;
  fprintf(f, "  pipeline (%s, %d micro-batches) simulated event by event: stage %d computes %s and ends at %s; "
             "idle %s (bubble %s + waiting for sends %s)\n",
          s->pp == 1 ? "one stage" : pass_schedule_name(s->schedule), m, cs, stats_seconds(dt->sim.busy[cs], a, sizeof a),
          stats_seconds(dt->end[cs], b, sizeof b), stats_seconds(dt->end[cs] - dt->sim.busy[cs], c, sizeof c),
          stats_seconds(best->rows[PASS_ROW_BUBBLE], d, sizeof d),
          stats_seconds(best->rows[PASS_ROW_PP_SEND_RECV], a + 32, sizeof a - 32));
  if (s->pp > 1 && s->schedule != PASS_SCHED_INTERLEAVED)
    fprintf(f, "    (uniform stages would idle (p - 1) / m = %d / %d = %.1f%% of the work)\n", s->pp - 1, m,
            100.0 * (s->pp - 1) / m);
  else if (s->schedule == PASS_SCHED_INTERLEAVED)
    fprintf(f, "    (uniform stages would idle (p - 1) / (v m) = %d / %d = %.1f%% of the work)\n", s->pp - 1, s->v * m,
            100.0 * (s->pp - 1) / (s->v * m));
  size_t eb = pass_plan_model_elem_bytes(r->model);
  pass_train_memory per = pass_training_memory(1, eb, pass_optimizer_state_count(r->optimizer), 0, true);
  const double *mem = dt->mem + (size_t)best->fullest * PASS_MEM_KINDS;
  double elems = mem[PASS_MEM_PARAMS] / per.params * (s->zero >= 3 ? s->dp : 1);
  fprintf(f, "  memory of stage %d: %s parameter elements on this GPU; parameters x %.0f B%s, gradients x %.0f B%s, "
             "optimizer x %.0f B (%d fp32 states%s)%s\n",
          best->fullest, stats_grouped(round(elems), a, sizeof a), per.params, s->zero >= 3 ? " / dp" : "", per.grads,
          s->zero >= 2 ? " / dp" : "", per.optimizer, pass_optimizer_state_count(r->optimizer),
          eb == 2 ? " + the fp32 master copy" : "", s->zero >= 1 ? " / dp" : "");
  fprintf(f, "    activations: the simulation's most bytes kept at once on this stage (micro-batches whose forward "
             "ran and backward has not)\n");
  int nodes = pass_plan_dp_nodes(cl, s->tp, s->dp);
  if (s->dp > 1 && s->zero <= 1)
    fprintf(f, "  data-parallel: %s of each layer's gradients over %d GPUs spanning %d node%s, started as the last "
               "micro-batch's backward finishes the layer%s\n",
            s->zero == 0 ? "all-reduce" : "reduce-scatter", s->dp, nodes, nodes == 1 ? "" : "s",
            s->zero == 1 ? "; the updated parameters all-gathered after the optimizer" : "");
  else if (s->dp > 1)
    fprintf(f, "  data-parallel (ZeRO-%d): every micro-batch's gradients reduce-scattered%s over %d GPUs spanning %d "
               "node%s, layer by layer inside the operation that makes them (it lasts the longer of its compute and its "
               "collectives)%s\n",
            s->zero, s->zero == 3 ? ", and the parameters all-gathered for each forward and backward," : "", s->dp, nodes,
            nodes == 1 ? "" : "s", s->zero == 2 ? "; the updated parameters all-gathered after the optimizer" : "");
  fprintf(f, "  after its pipeline, stage %d waits %s for these reductions (with the tied weights' gradients summed "
             "across stages and the gradients left partial over the tensor axis)\n",
          cs, stats_seconds(dt->dp_exposed[cs], a, sizeof a));
  fprintf(f, "  optimizer: one pass over %s elements reading parameters, gradients and state and writing parameters and "
             "state at %s x %.2f: %s\n",
          stats_grouped(round(elems / (s->zero >= 1 ? s->dp : 1)), a, sizeof a), stats_si(cl->device.bandwidth, "B/s", b, sizeof b),
          k.mem_eff, stats_seconds(dt->opt[cs], c, sizeof c));
}

/* ---- the command that runs the plan, the plan file, the time to train ---- */

/* Appends one shell word (quoted when it holds anything but safe characters). */
static void word(char *buf, size_t n, const char *w) {
  size_t len = strlen(buf);
  bool safe = *w != 0;
  for (const char *c = w; *c; c++)
    safe &= (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("_./:=,+-@%", *c);
  if (safe) snprintf(buf + len, n - len, "%s%s", len ? " " : "", w);
  else {
    snprintf(buf + len, n - len, "%s'", len ? " " : "");
    for (const char *c = w; *c; c++) {
      len = strlen(buf);
      snprintf(buf + len, n - len, *c == '\'' ? "'\\''" : "%c", *c);
    }
    len = strlen(buf);
    snprintf(buf + len, n - len, "'");
  }
}

/* Appends text as it is (flags and numbers the command writes itself). */
static void lit(char *buf, size_t n, const char *text) {
  size_t len = strlen(buf);
  snprintf(buf + len, n - len, "%s%s", len ? " " : "", text);
}

/* The first layer of each virtual stage after the first (0-based layers;
 * the planner's stage dynamic program). out holds n_virtual - 1 entries. */
static void stage_boundaries(const pass_plan_detail *dt, int *out) {
  for (int k = 1; k < dt->n_virtual; k++) out[k - 1] = dt->first[k] < 1 ? 0 : dt->first[k] - 1;
}

/* Whether the boundaries are the shard pass's even split (layer l on stage l pp / L). */
static bool even_split(const pass_plan_detail *dt, int L) {
  if (dt->n_virtual != dt->n_stages) return false;
  for (int k = 1; k < dt->n_virtual; k++)
    if (dt->first[k] - 1 != (k * L + dt->n_stages - 1) / dt->n_stages) return false;
  return true;
}

static const char *train_dtype(ir_dtype t) { return t == IR_DT_BF16 ? "bf16" : t == IR_DT_F16 ? "f16" : "f32"; }

/* `mpirun -np N tgc train FILE [--config C] [-D ...] [--dtype] [--optimizer]`
 * then --plan FILE (with --save-plan) or the plan as flags, then
 * `--data SOURCE` (the data is the user's). */
static void plan_command(const plan_report *r, const pass_plan_result *b, const pass_plan_detail *dt, char *buf,
                         size_t n) {
  const pass_plan_strategy *s = &b->s;
  char x[512];
  buf[0] = 0;
  snprintf(x, sizeof x, "mpirun -np %d tgc train", s->dp * s->tp * s->pp);
  lit(buf, n, x);
  word(buf, n, r->file);
  if (r->config_flag) lit(buf, n, "--config"), word(buf, n, r->config_flag);
  for (int i = 0; i < r->n_defines; i++) {
    snprintf(x, sizeof x, "%s=%s", r->defines[i].name, r->defines[i].value);
    lit(buf, n, "-D"), word(buf, n, x);
  }
  if (r->dtype != IR_DT_F32) lit(buf, n, "--dtype"), lit(buf, n, train_dtype(r->dtype));
  if (r->optimizer != PASS_OPT_ADAM) lit(buf, n, "--optimizer"), lit(buf, n, pass_optimizer_name(r->optimizer));
  if (r->save_plan) {
    lit(buf, n, "--plan"), word(buf, n, r->save_plan);
  } else {
    snprintf(x, sizeof x, "dp=%d,tp=%d,pp=%d%s", s->dp, s->tp, s->pp, s->sp ? ",sp" : "");
    lit(buf, n, "--mesh"), lit(buf, n, x);
    snprintf(x, sizeof x, "--zero %d --batch %d --micro-batches %d", s->zero, s->micro_batch * s->dp, b->m);
    lit(buf, n, x);
    if (s->tp > 1 && !pass_plan_model_tp_search(r->model)) lit(buf, n, "--tp-layout megatron");
    if (s->pp > 1) {
      if (s->schedule == PASS_SCHED_INTERLEAVED) snprintf(x, sizeof x, "--pipeline-schedule interleaved:%d", s->v);
      else snprintf(x, sizeof x, "--pipeline-schedule %s", pass_schedule_name(s->schedule));
      lit(buf, n, x);
      if (!even_split(dt, pass_plan_model_layers(r->model))) { /* the runtime's default is the even split */
        snprintf(x, sizeof x, "--stage-boundaries ");
        size_t len = strlen(x);
        int *bd = malloc(sizeof *bd * (size_t)dt->n_virtual);
        if (!bd) IR_DIE("out of memory (bd)");
        stage_boundaries(dt, bd);
        for (int k = 0; k + 1 < dt->n_virtual && len < sizeof x; k++, len = strlen(x))
          snprintf(x + len, sizeof x - len, "%s%d", k ? "," : "", bd[k]);
        free(bd);
        lit(buf, n, x);
      }
    }
    lit(buf, n, "--checkpoint"), lit(buf, n, ckpt_name(s->ckpt));
  }
  lit(buf, n, "--data SOURCE");
}

/* --train-tokens: days and GPU-hours at the plan's tokens/s, and the closed
 * form 8 T P / (N F U) (Narayanan et al. 2021, eq. 4) in days. */
typedef struct {
  double days, gpu_hours, closed_days, peak;
} train_time;
static train_time time_to_train(const plan_report *r, const pass_plan_result *b) {
  train_time t;
  double T = r->train_tokens, P = pass_plan_model_params(r->model), N = r->cluster->gpus;
  t.peak = pass_target_peak(&r->cluster->device, pass_plan_model_elem_bytes(r->model));
  t.days = T / b->tokens_per_s / 86400;
  t.gpu_hours = t.days * 24 * N;
  t.closed_days = 8 * T * P / (N * t.peak * b->mfu) / 86400;
  return t;
}

static void print_train_time(FILE *f, const plan_report *r, const pass_plan_result *b) {
  char x[64], y[64], z[64], w[64];
  train_time t = time_to_train(r, b);
  char g[64];
  stats_grouped(r->cluster->gpus, g, sizeof g);
  fprintf(f, "\ntime to train %s tokens: %.4g days, %s %s-hours (%s tokens / %s tokens/s on %s %ss)\n",
          stats_grouped(r->train_tokens, x, sizeof x), t.days, stats_grouped(round(t.gpu_hours), y, sizeof y), dev(r->cluster),
          stats_grouped(r->train_tokens, z, sizeof z), stats_grouped(round(b->tokens_per_s), w, sizeof w), g, dev(r->cluster));
  fprintf(f, "  closed form 8 T P / (N F U) (Narayanan et al. 2021, eq. 4: 6 FLOPs per parameter and token + 2 to "
             "recompute the forward) = 8 x %.4g x %.4g / (%s x %s x %.2f%%) = %.4g days\n",
          r->train_tokens, pass_plan_model_params(r->model), g, stats_si(t.peak, "FLOP/s", x, sizeof x),
          100 * b->mfu, t.closed_days);
}

static void print_command(FILE *f, const plan_report *r, const pass_plan_result *b, const pass_plan_detail *dt) {
  char cmd[4096];
  plan_command(r, b, dt, cmd, sizeof cmd);
  if (r->save_plan) fprintf(f, "\nsaved the plan to %s; it runs with (SOURCE: your data):\n", r->save_plan);
  else fprintf(f, "\nthe plan runs with (SOURCE: your data):\n");
  fprintf(f, "  %s\n", cmd);
}

static bool best_detail(const plan_report *r, pass_plan_result *res, pass_plan_detail *dt) {
  char why[256];
  return r->found->n_plans > 0 &&
         pass_plan_evaluate(r->model, r->cluster, r->job, &r->found->plans[0].s, res, dt, why, sizeof why) == 0;
}

void plan_print_text(FILE *f, const plan_report *r) {
  print_header(f, r);
  pass_plan_result best;
  pass_plan_detail dt;
  if (!best_detail(r, &best, &dt)) return;
  char d[256];
  fprintf(f, "\nplan: %s\n", describe(&best, d, sizeof d));
  print_stages(f, &dt, pass_plan_model_layers(r->model));
  print_memory(f, &best, &dt, r);
  print_comm(f, &best, r->cluster);
  print_rows(f, &best, r);
  if (r->train_tokens > 0) print_train_time(f, r, &best);
  print_runners_up(f, r);
  if (r->explain) print_explain(f, r, &best, &dt);
  print_command(f, r, &best, &dt); /* the last lines: the command that runs the plan */
  pass_plan_detail_free(&dt);
}

/* ---- JSON ---- */
static json_t *num(double v) {
  if (v == floor(v) && fabs(v) <= 9007199254740992.0) return json_integer((json_int_t)v);
  return json_real(v);
}

static json_t *plan_json(const pass_plan_result *b) {
  json_t *o = json_object();
  const pass_plan_strategy *s = &b->s;
  json_t *mesh = json_object();
  json_object_set_new(mesh, "dp", json_integer(s->dp));
  json_object_set_new(mesh, "tp", json_integer(s->tp));
  json_object_set_new(mesh, "pp", json_integer(s->pp));
  json_object_set_new(o, "mesh", mesh);
  json_object_set_new(o, "sequence_parallel", json_boolean(s->sp));
  json_object_set_new(o, "zero", json_integer(s->zero));
  json_object_set_new(o, "micro_batch", json_integer(s->micro_batch));
  json_object_set_new(o, "micro_batches", json_integer(b->m));
  json_object_set_new(o, "schedule", json_string(s->pp == 1 ? "none" : pass_schedule_name(s->schedule)));
  json_object_set_new(o, "chunks", json_integer(s->v));
  json_object_set_new(o, "checkpoint", json_string(ckpt_name(s->ckpt)));
  json_object_set_new(o, "fits", json_boolean(b->fits));
  json_t *mem = json_object();
  static const char *const keys[PASS_MEM_KINDS] = {"params", "grads", "optimizer", "activations", "working", "comm_buffers"};
  json_object_set_new(mem, "stage", json_integer(b->fullest));
  for (int k = 0; k < PASS_MEM_KINDS; k++) json_object_set_new(mem, keys[k], num(round(b->mem[k])));
  json_object_set_new(mem, "total", num(round(b->mem_total)));
  json_object_set_new(mem, "capacity", num(round(b->capacity)));
  json_object_set_new(o, "memory", mem);
  json_t *comm = json_array();
  for (int i = 0; i < b->n_comm; i++) {
    json_t *c = json_object();
    json_object_set_new(c, "kind", json_string(pass_coll_name(b->comm[i].kind)));
    json_object_set_new(c, "axis", json_string(pass_axis_name(b->comm[i].axis)));
    json_object_set_new(c, "of", json_string(b->comm[i].what));
    json_object_set_new(c, "payload_bytes", num(round(b->comm[i].payload)));
    json_object_set_new(c, "calls", num(b->comm[i].calls));
    json_object_set_new(c, "seconds", json_real(b->comm[i].seconds));
    json_object_set_new(c, "exposed_seconds", json_real(b->comm[i].exposed));
    json_array_append_new(comm, c);
  }
  json_object_set_new(o, "communication", comm);
  json_t *time = json_object();
  static const char *const rows[PASS_ROWS] = {"forward", "backward", "recompute", "tp_all_reduce", "tp_all_gather",
                                              "tp_reduce_scatter", "pp_send_recv", "pp_bubble", "dp_sync", "optimizer"};
  json_object_set_new(time, "stage", json_integer(b->critical));
  for (int k = 0; k < PASS_ROWS; k++) json_object_set_new(time, rows[k], json_real(b->rows[k]));
  json_object_set_new(time, "total", json_real(b->step));
  json_object_set_new(o, "time_s", time);
  json_object_set_new(o, "mfu", json_real(b->mfu));
  json_object_set_new(o, "tokens_per_s", json_real(b->tokens_per_s));
  json_object_set_new(o, "hw_flops_per_gpu", json_real(b->hw_flops));
  return o;
}

void plan_print_json(FILE *f, const plan_report *r) {
  json_t *root = json_object();
  json_object_set_new(root, "file", json_string(r->file));
  json_object_set_new(root, "config", r->config ? json_string(r->config) : json_null());
  json_t *model = json_object();
  json_object_set_new(model, "params", num(pass_plan_model_params(r->model)));
  json_object_set_new(model, "layers", json_integer(pass_plan_model_layers(r->model)));
  json_object_set_new(model, "dtype", json_string(dtype_name(r->dtype)));
  json_object_set_new(model, "optimizer", json_string(pass_optimizer_name(r->optimizer)));
  json_object_set_new(root, "model", model);
  const pass_cluster *cl = r->cluster;
  json_t *c = json_object();
  json_object_set_new(c, "name", json_string(cl->name));
  json_object_set_new(c, "nodes", json_integer(cl->nodes));
  json_object_set_new(c, "gpus_per_node", json_integer(cl->gpus_per_node));
  json_object_set_new(c, "gpus", json_integer(cl->gpus));
  json_object_set_new(c, "device", json_string(cl->device.name));
  json_object_set_new(c, "intra_bandwidth", num(cl->intra_bw));
  json_object_set_new(c, "inter_bandwidth", num(cl->inter_bw));
  json_object_set_new(root, "cluster", c);
  json_object_set_new(root, "global_batch", json_integer(r->job->global_batch));
  json_object_set_new(root, "seq", json_integer(r->job->seq));
  const pass_plan_found *fd = r->found;
  json_t *se = json_object();
  json_object_set_new(se, "considered", num((double)fd->considered));
  json_object_set_new(se, "over_memory", num((double)fd->over_memory));
  json_object_set_new(se, "pruned", num((double)fd->pruned));
  json_object_set_new(se, "simulated", num((double)fd->simulated));
  json_object_set_new(se, "seconds", json_real(fd->seconds));
  json_object_set_new(se, "cpu_seconds", json_real(fd->cpu_seconds));
  json_object_set_new(se, "compile_seconds", json_real(r->compile_s));
  json_object_set_new(se, "compile_cpu_seconds", json_real(r->compile_cpu_s));
  json_object_set_new(root, "search", se);
  json_object_set_new(root, "tp_layout", json_string(pass_plan_model_tp_search(r->model) ? "search" : "megatron"));
  pass_plan_result best;
  pass_plan_detail dt;
  if (best_detail(r, &best, &dt)) {
    json_t *p = plan_json(&best);
    json_t *stages = json_array();
    for (int v = 0; v < dt.n_virtual; v++) {
      json_t *st = json_object();
      json_object_set_new(st, "stage", json_integer(v % dt.n_stages));
      json_object_set_new(st, "first_layer", json_integer(dt.first[v] < 1 ? 0 : dt.first[v] - 1));
      json_object_set_new(st, "last_layer", json_integer((dt.last[v] > pass_plan_model_layers(r->model) ? dt.last[v] - 1 : dt.last[v]) - 1));
      json_object_set_new(st, "embeddings", json_boolean(dt.first[v] == 0));
      json_object_set_new(st, "head", json_boolean(dt.last[v] == pass_plan_model_layers(r->model) + 1));
      json_object_set_new(st, "forward_s", json_real(dt.fwd[v]));
      json_object_set_new(st, "backward_s", json_real(dt.bwd[v]));
      json_array_append_new(stages, st);
    }
    json_object_set_new(p, "stages", stages);
    json_object_set_new(root, "plan", p);
    char cmd[4096];
    plan_command(r, &best, &dt, cmd, sizeof cmd);
    json_object_set_new(root, "command", json_string(cmd));
    if (r->train_tokens > 0) {
      train_time t = time_to_train(r, &best);
      json_object_set_new(root, "train_tokens", num(r->train_tokens));
      json_object_set_new(root, "train_days", json_real(t.days));
      json_object_set_new(root, "gpu_hours", json_real(t.gpu_hours));
      json_object_set_new(root, "closed_form_days", json_real(t.closed_days));
    }
    pass_plan_detail_free(&dt);
  }
  json_t *ru = json_array();
  for (int i = 1; i < fd->n_plans; i++) {
    json_t *p = plan_json(&fd->plans[i]);
    char why[64];
    snprintf(why, sizeof why, "slower by %.1f%%", 100 * (fd->plans[i].step / fd->plans[0].step - 1));
    json_object_set_new(p, "why", json_string(why));
    json_array_append_new(ru, p);
  }
  for (int i = 0; i < fd->n_unfit; i++) {
    json_t *p = plan_json(&fd->unfit[i]);
    char why[128];
    snprintf(why, sizeof why, "does not fit by %.2f GB on stage %d", (fd->unfit[i].mem_total - fd->unfit[i].capacity) / 1e9,
             fd->unfit[i].fullest);
    json_object_set_new(p, "why", json_string(why));
    json_array_append_new(ru, p);
  }
  json_object_set_new(root, "runners_up", ru);
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  if (text) fprintf(f, "%s\n", text);
  free(text);
  json_decref(root);
}

void plan_print_no_fit(ir_diag *d, const pass_plan_found *fd, const pass_cluster *c, const pass_plan_model *m) {
  (void)m;
  if (!fd->have_smallest) {
    ir_error_plain(d, "no plan: no mesh of %d GPUs matches the model and the constraints given", c->gpus);
    return;
  }
  char desc[256];
  const pass_plan_result *s = &fd->smallest;
  ir_error_plain(d, "no plan fits: the smallest (%s) needs %.2f GB on stage %d, %.2f GB more than the %.2f GB usable of each %s "
                    "(%s %.2f GB, activations %.2f GB)",
                 describe(s, desc, sizeof desc), s->mem_total / 1e9, s->fullest, (s->mem_total - s->capacity) / 1e9,
                 s->capacity / 1e9, c->device.name, "parameters, gradients and optimizer state",
                 (s->mem[PASS_MEM_PARAMS] + s->mem[PASS_MEM_GRADS] + s->mem[PASS_MEM_OPTIMIZER]) / 1e9,
                 s->mem[PASS_MEM_ACTIVATIONS] / 1e9);
}

typedef struct {
  const plan_report *r;
  const pass_plan_result *best;
  const pass_plan_detail *dt;
} trace_job;

static int fill_trace(FILE *f, void *ctx) {
  const trace_job *j = ctx;
  return pass_plan_write_trace(f, j->r->model, j->best, j->dt);
}

/* Written as --save writes a state (rt_write_file_atomic): a failed write
 * leaves the previous trace whole. A character device or FIFO (/dev/stdout,
 * a pipe) cannot be replaced by a rename: written straight. */
int plan_write_trace_file(const char *path, const plan_report *r, ir_diag *d) {
  pass_plan_result best;
  pass_plan_detail dt;
  if (!best_detail(r, &best, &dt)) return 0;
  trace_job job = {r, &best, &dt};
  char err[1024];
  struct stat st;
  int rc;
  if (stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) { /* /dev/stdout, a pipe: no rename */
    errno = 0;
    FILE *f = fopen(path, "w");
    rc = f && fill_trace(f, &job) == 0 && !ferror(f) ? 0 : -1;
    int e = errno;
    if (f && fclose(f) != 0 && !rc) rc = -1, e = errno;
    if (rc) snprintf(err, sizeof err, "%s: cannot write it: %s", path, strerror(e ? e : EIO));
  } else {
    rc = rt_write_file_atomic(path, fill_trace, &job, err, sizeof err);
  }
  if (rc) ir_error_plain(d, "--trace %s", err);
  pass_plan_detail_free(&dt);
  return rc;
}

/* ---- the plan file (--save-plan; tools/plan_file.c reads it) ---- */
static json_t *plan_file_json(const plan_report *r, const pass_plan_result *b, const pass_plan_detail *dt) {
  const pass_plan_strategy *s = &b->s;
  json_t *o = json_object();
  char hash[32];
  snprintf(hash, sizeof hash, "%016llx", (unsigned long long)r->model_hash);
  json_object_set_new(o, "format", json_string(TOOL_PLAN_FORMAT));
  json_object_set_new(o, "version", json_integer(TOOL_PLAN_VERSION));
  json_object_set_new(o, "model", json_pack("{s:s,s:s}", "path", r->file, "fnv1a64", hash));
  json_object_set_new(o, "config", json_string(r->config));
  json_t *defs = json_array();
  for (int i = 0; i < r->n_defines; i++) {
    char x[512];
    snprintf(x, sizeof x, "%s=%s", r->defines[i].name, r->defines[i].value);
    json_array_append_new(defs, json_string(x));
  }
  json_object_set_new(o, "defines", defs);
  json_object_set_new(o, "layers", json_integer(pass_plan_model_layers(r->model)));
  json_object_set_new(o, "dtype", json_string(dtype_name(r->dtype)));
  json_object_set_new(o, "optimizer", json_string(pass_optimizer_name(r->optimizer)));
  json_object_set_new(o, "global_batch", json_integer(r->job->global_batch));
  json_object_set_new(o, "seq", json_integer(r->job->seq));
  const pass_cluster *cl = r->cluster;
  json_object_set_new(o, "cluster",
                      json_pack("{s:s,s:i,s:i,s:i,s:s,s:o,s:o,s:o,s:o,s:o}", "name", cl->name, "nodes", cl->nodes,
                                "gpus_per_node", cl->gpus_per_node, "gpus", cl->gpus, "device", cl->device.name,
                                "intra_bandwidth", num(cl->intra_bw), "inter_bandwidth", num(cl->inter_bw),
                                "intra_latency", json_real(cl->intra_lat), "inter_latency", json_real(cl->inter_lat),
                                "reserve", num(cl->reserve)));
  json_object_set_new(o, "ranks", json_integer(s->dp * s->tp * s->pp));
  json_object_set_new(o, "mesh", json_pack("{s:i,s:i,s:i,s:b}", "dp", s->dp, "tp", s->tp, "pp", s->pp, "sp", s->sp));
  json_object_set_new(o, "zero", json_integer(s->zero));
  json_object_set_new(o, "micro_batch", json_integer(s->micro_batch));
  json_object_set_new(o, "micro_batches", json_integer(b->m));
  json_object_set_new(o, "pipeline_schedule",
                      json_pack("{s:s,s:i}", "name", pass_schedule_name(s->schedule), "virtual_stages", s->v));
  json_t *bounds = json_array();
  int *bd = malloc(sizeof *bd * (size_t)dt->n_virtual);
  if (!bd) IR_DIE("out of memory (bd)");
  stage_boundaries(dt, bd);
  for (int k = 0; k + 1 < dt->n_virtual; k++) json_array_append_new(bounds, json_integer(bd[k]));
  free(bd);
  json_object_set_new(o, "stage_boundaries", bounds);
  json_object_set_new(o, "checkpoint", json_string(ckpt_name(s->ckpt)));
  json_object_set_new(o, "tp_layout", json_string(pass_plan_model_tp_search(r->model) ? "search" : "megatron"));
  json_t *pred = json_object();
  json_object_set_new(pred, "step_s", json_real(b->step));
  json_object_set_new(pred, "tokens_per_s", json_real(b->tokens_per_s));
  json_object_set_new(pred, "mfu", json_real(b->mfu));
  json_object_set_new(pred, "memory_per_gpu_bytes", num(round(b->mem_total)));
  json_object_set_new(o, "predicted", pred);
  char cmd[4096];
  plan_command(r, b, dt, cmd, sizeof cmd);
  json_object_set_new(o, "command", json_string(cmd));
  return o;
}

int plan_save(const plan_report *r, ir_diag *d) {
  pass_plan_result best;
  pass_plan_detail dt;
  if (!best_detail(r, &best, &dt)) return 0;
  json_t *o = plan_file_json(r, &best, &dt);
  pass_plan_detail_free(&dt);
  FILE *f = fopen(r->save_plan, "w");
  int rc = f && json_dumpf(o, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) == 0 &&
                   fputc('\n', f) != EOF ? 0 : -1;
  if (f && fclose(f) != 0) rc = -1;
  if (rc) ir_error_plain(d, "--save-plan %s: cannot write the file", r->save_plan);
  json_decref(o);
  return rc;
}
