/* tools/train_job.c — a training job opened from the flags of `tgc train`
 * and `tgc eval` (train_job.h): the plan file and the resumed settings
 * applied, the data opened, the ranks' communicator, the model compiled into
 * this rank's step program, and a trainer holding the initial state. The
 * subcommands (cmd_train.c) parse flags, open a job, step it and print.
 *
 * --batch / --seq-len / --vocab become -D B=N (or M=N) / -D T=N / -D V=N when
 * the chosen config defines that constant (fe_configs);
 * otherwise the model's own shapes must already agree. --resume reads the
 * state file first: the training settings saved in its metadata are the
 * defaults, flags given again override them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "rt_cuda.h"
#include "train_job.h"

/* Defaults by task family (see the help text). */
static void apply_defaults(tool_train_opts *t, bool sequence) {
  if (!t->s.opt_set) t->s.optimizer = PASS_OPT_ADAM;
  if (!t->s.lr_set) t->s.lr = sequence ? 0.003 : 0.05;
  if (!t->s.steps_set) t->s.steps = sequence ? 200 : 1000;
  if (!t->s.sched_set) t->s.schedule = sequence ? RT_SCHEDULE_COSINE : RT_SCHEDULE_CONSTANT;
  if (!t->s.warmup_set) t->s.warmup = sequence ? 20 : 0;
  if (!t->s.clip_set) t->s.clip = sequence ? 1.0 : 0.0;
  if (!t->s.mb_set) t->s.micro_batches = 1;
}

static int add_define(tool_compile_opts *o, const char *name, int64_t v, char *store, ir_diag *d) {
  snprintf(store, 32, "%lld", (long long)v);
  return tool_add_define(o, name, store, d);
}

/* --save PATH is checked before any work: it must be a regular file or new,
 * in a writable folder (a run must not train for hours and then fail to
 * save). Temporary files of PATH left by killed runs are removed. */
static int check_save_target(const char *path, ir_diag *d) {
  char err[1024];
  int removed = 0;
  if (rt_safetensors_check_target(path, &removed, err, sizeof err) != 0) {
    ir_error_plain(d, "--save %s", err);
    return -1;
  }
  if (removed)
    ir_note(d, (ir_loc){0}, "removed %d temporary file%s of %s left by an interrupted save", removed,
            removed > 1 ? "s" : "", path);
  return 0;
}

/* --comm: whether a sharded run's collectives go through NCCL. auto: on a
 * GPU backend, when NCCL is there (cuda-emu emulates it; on a GPU,
 * libnccl.so.2 loads), else MPI through host memory with a note. */
static int use_nccl(const tool_train_opts *t, bool rank0, ir_diag *d, bool *nccl) {
  const rt_backend *b = t->backend.backend;
  bool gpu = b && b->comm_table, want = t->comm && strcmp(t->comm, "nccl") == 0;
  *nccl = false;
  if (t->comm && strcmp(t->comm, "mpi") == 0) return 0;
  if (!gpu) return 0; /* (--comm nccl without one was refused with the flags) */
  if (b == &rt_cuda_backend && !want) { /* auto on a GPU: NCCL when it loads */
    cg_cuda_api probe;
    char why[1024];
    memset(&probe, 0, sizeof probe);
    if (rt_cuda_load(&probe, CG_CUDA_LIB_NCCL, why, sizeof why) != 0) {
      if (rank0) fprintf(stderr, "tgc: note: %s: the collectives go through MPI and host memory\n", why);
      return 0;
    }
  }
  *nccl = true;
  return 0;
}

/* The size flags as -D overrides of the chosen config (when it has the constant). */
static int map_size_flags(tool_compile_opts *o, tool_train_opts *t, const char *text, char store[3][32], ir_diag *d) {
  if (!text) return 0;
  fe_config_set *cs = fe_configs(o->file, text, strlen(text), &o->fe, NULL);
  const fe_config *c = cs ? cs->chosen : NULL;
  int rc = 0;
  if (t->s.batch_set) {
    const char *name = fe_config_const(c, "B") ? "B" : fe_config_const(c, "M") ? "M" : NULL;
    if (name && add_define(o, name, t->s.batch, store[0], d) != 0) rc = -1;
  }
  if (rc == 0 && t->s.seq_set && fe_config_const(c, "T") && add_define(o, "T", t->s.seq_len, store[1], d) != 0) rc = -1;
  if (rc == 0 && t->s.vocab_set && fe_config_const(c, "V") && add_define(o, "V", t->s.vocab, store[2], d) != 0) rc = -1;
  fe_config_set_free(cs);
  return rc;
}

/* Checks --batch / --seq-len were honoured (the model may have no such constant). */
/* g is this rank's step graph: dp ranks each hold 1 / dp of the batch. */
static int check_sizes(const ir_graph *g, const tool_train_opts *t, rt_data *ds, int dp, ir_diag *d) {
  int64_t items = rt_data_batch_items(ds);
  bool seq = rt_data_is_sequence(ds);
  int64_t T = 0, B = items;
  for (int i = 0; i < g->n_inputs; i++)
    if (seq && strcmp(g->inputs[i]->name, "tokens") == 0) B = g->inputs[i]->type.dims[0] * dp, T = g->inputs[i]->type.dims[1];
  if (t->s.batch_set && B != t->s.batch) {
    ir_error_plain(d, "--batch %lld: the model's batch is %lld and its config has no constant B or M to set",
                   (long long)t->s.batch, (long long)B);
    return -1;
  }
  if (seq && t->s.seq_set && T != t->s.seq_len) {
    ir_error_plain(d, "--seq-len %lld: the model's sequence length is %lld and its config has no constant T to set",
                   (long long)t->s.seq_len, (long long)T);
    return -1;
  }
  return 0;
}

/* "dp=2,tp=1,pp=2,sp": a mesh in --mesh's syntax, every axis written. */
static const char *mesh_flag(int dp, int tp, int pp, bool sp, char *buf, size_t n) {
  snprintf(buf, n, "dp=%d,tp=%d,pp=%d%s", dp, tp, pp, sp ? ",sp" : "");
  return buf;
}

/* "-D a=1 -D b=2", or "no -D" (the overrides of a plan or of this run). */
static const char *defines_text(const char *const *defs, int n, char *buf, size_t size) {
  buf[0] = 0;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(buf);
    snprintf(buf + len, size - len, "%s-D %s", i ? " " : "", defs[i]);
  }
  if (!n) snprintf(buf, size, "no -D");
  return buf;
}

/* --plan FILE: the plan becomes the settings its flags set (--mesh, --zero,
 * --checkpoint, --batch, --micro-batches, --pipeline-schedule,
 * --stage-boundaries), so one code
 * path runs both. Refused here (one line naming both values): another model
 * file (by the hash of its bytes), config or -D; a flag given beside --plan
 * that says otherwise. The plan's pipeline schedule (interleaved too) and
 * stage boundaries are run as --pipeline-schedule and --stage-boundaries
 * run them. The rank count is checked when the job's ranks are known. 0, or
 * -1 after reporting. */
static int apply_plan(tool_compile_opts *o, tool_train_opts *t, const tool_plan *p, ir_diag *d) {
  const char *pf = p->path;
  char a[160], b[160];
  size_t len = 0;
  char *bytes = ir_read_file(o->file, TOOL_MAX_FILE_BYTES, &len, d);
  if (!bytes) return -1;
  char hash[32];
  snprintf(hash, sizeof hash, "%016llx", (unsigned long long)tool_fnv1a64(bytes, len));
  free(bytes);
  if (strcmp(hash, p->model_hash) != 0) {
    ir_error_plain(d, "--plan %s: the plan is for the model file %s (FNV-1a 64 %s), not %s (FNV-1a 64 %s)", pf,
                   p->model_path, p->model_hash, o->file, hash);
    return -1;
  }
  fe_config_set *cs = tool_configs(o);
  snprintf(a, sizeof a, "%s", cs && cs->chosen ? cs->chosen->name : "(none)");
  fe_config_set_free(cs);
  if (strcmp(a, p->config) != 0) {
    ir_error_plain(d, "--plan %s: the plan is for config %s, not %s", pf, p->config, a);
    return -1;
  }
  const char *mine[64];
  char store[64][160];
  int n = o->fe.n_defines, same = n == p->n_defines;
  for (int i = 0; i < n && i < 64; i++) {
    snprintf(store[i], sizeof store[i], "%s=%s", o->defines[i].name, o->defines[i].value);
    mine[i] = store[i];
    bool found = false;
    for (int j = 0; j < p->n_defines; j++) found |= strcmp(mine[i], p->defines[j]) == 0;
    same &= found;
  }
  if (!same) {
    char pd[1024], md[1024];
    ir_error_plain(d, "--plan %s: the plan is for %s, not %s", pf, defines_text(p->defines, p->n_defines, pd, sizeof pd),
                   defines_text(mine, n, md, sizeof md));
    return -1;
  }
  /* a flag beside --plan must say what the plan says */
  mesh_flag(p->dp, p->tp, p->pp, p->sp, b, sizeof b);
  if (o->mesh_auto) {
    ir_error_plain(d, "--mesh auto: the plan %s fixes the mesh (--mesh %s); give one of them", pf, b);
    return -1;
  }
  if (o->mesh_set) {
    mesh_flag(o->mesh.size[IR_AXIS_DP], o->mesh.size[IR_AXIS_TP], o->mesh.size[IR_AXIS_PP], o->mesh.sp, a, sizeof a);
    if (strcmp(a, b) != 0) {
      ir_error_plain(d, "--mesh %s: the plan %s says --mesh %s", a, pf, b);
      return -1;
    }
  }
  int zero = p->dp > 1 ? p->zero : 0; /* ZeRO shards over dp: nothing to shard over one replica */
  if (o->zero_set && o->zero != zero) {
    ir_error_plain(d, "--zero %d: the plan %s says --zero %d", o->zero, pf, zero);
    return -1;
  }
  if (o->tp_layout_set && p->tp > 1 && o->tp_megatron == p->tp_search) {
    ir_error_plain(d, "--tp-layout %s: the plan %s says --tp-layout %s", o->tp_megatron ? "megatron" : "search", pf,
                   p->tp_search ? "search" : "megatron");
    return -1;
  }
  if (o->checkpoint && strcmp(o->checkpoint, p->checkpoint) != 0) {
    ir_error_plain(d, "--checkpoint %s: the plan %s says --checkpoint %s", o->checkpoint, pf, p->checkpoint);
    return -1;
  }
  int64_t batch = (int64_t)p->micro_batch * p->dp;
  if (t->s.batch_set && t->s.batch != batch) {
    ir_error_plain(d, "--batch %lld: the plan %s says --batch %lld (micro-batch %d x dp %d)", (long long)t->s.batch, pf,
                   (long long)batch, p->micro_batch, p->dp);
    return -1;
  }
  if (t->s.mb_set && t->s.micro_batches != p->micro_batches) {
    ir_error_plain(d, "--micro-batches %d: the plan %s says --micro-batches %d", t->s.micro_batches, pf, p->micro_batches);
    return -1;
  }
  if (t->s.seq_set && t->s.seq_len != p->seq) {
    ir_error_plain(d, "--seq-len %lld: the plan %s is for sequences of %lld tokens", (long long)t->s.seq_len, pf,
                   (long long)p->seq);
    return -1;
  }
  if (t->pp_schedule_set && t->pp_schedule != p->schedule) {
    ir_error_plain(d, "--pipeline-schedule %s: the plan %s says --pipeline-schedule %s",
                   pass_schedule_name((pass_schedule)t->pp_schedule), pf, pass_schedule_name((pass_schedule)p->schedule));
    return -1;
  }
  int chunks = p->schedule == PASS_SCHED_INTERLEAVED ? p->virtual_stages : 1;
  if (t->pp_schedule_set && t->pp_schedule == PASS_SCHED_INTERLEAVED && t->pp_chunks != chunks) {
    ir_error_plain(d, "--pipeline-schedule interleaved:%d: the plan %s says --pipeline-schedule interleaved:%d",
                   t->pp_chunks, pf, chunks);
    return -1;
  }
  if (t->n_stage_bounds) {
    bool same_bounds = t->n_stage_bounds == p->n_boundaries;
    for (int k = 0; same_bounds && k < p->n_boundaries; k++) same_bounds = t->stage_bounds[k] == p->boundaries[k];
    if (!same_bounds) {
      ir_error_plain(d, "--stage-boundaries: the plan %s fixes the stage boundaries; give one of them", pf);
      return -1;
    }
  }
  if (p->n_boundaries > (int)(sizeof t->stage_bounds / sizeof t->stage_bounds[0])) {
    ir_error_plain(d, "--plan %s: %d stage boundaries; tgc train takes at most %d", pf, p->n_boundaries,
                   (int)(sizeof t->stage_bounds / sizeof t->stage_bounds[0]));
    return -1;
  }
  o->mesh = ir_mesh_single();
  o->mesh.size[IR_AXIS_DP] = p->dp, o->mesh.size[IR_AXIS_TP] = p->tp, o->mesh.size[IR_AXIS_PP] = p->pp;
  o->mesh.sp = p->sp;
  o->mesh_set = true;
  o->zero = zero, o->zero_set = true;
  o->checkpoint = p->checkpoint;
  o->tp_megatron = !p->tp_search;
  t->s.batch = batch, t->s.batch_set = true;
  t->s.micro_batches = p->micro_batches, t->s.mb_set = true;
  t->pp_schedule = p->schedule, t->pp_schedule_set = true;
  t->pp_chunks = chunks;
  /* the plan's stage boundaries (the first layer of every virtual stage
   * after the first), as --stage-boundaries sets them */
  t->n_stage_bounds = p->pp > 1 ? p->n_boundaries : 0;
  for (int k = 0; k < t->n_stage_bounds; k++) t->stage_bounds[k] = p->boundaries[k];
  return 0;
}

/* The eval source (bound to the model as the training source is, in the
 * same layout) and how many of its batches an evaluation reads: --eval-batches,
 * else every complete batch of a file or arrays, 20 of a task. */
static int open_eval_source(const tool_train_opts *t, const ir_graph *g, rt_data *train_ds, rt_data **eval_ds,
                            int64_t *batches, ir_diag *d) {
  char err[1024];
  const char *flag = t->eval_only ? "--data" : "--eval-data";
  const char *spec = t->eval_only ? t->s.data : t->s.eval_data;
  rt_data *e = t->eval_only ? train_ds : rt_data_open_settings(&t->s, spec, err, sizeof err);
  if (!e) {
    ir_error_plain(d, "%s: %s", flag, err);
    return -1;
  }
  if (!t->eval_only) *eval_ds = e;
  if (!t->eval_only && rt_data_bind(e, g, err, sizeof err) != 0) {
    ir_error_plain(d, "%s: %s", flag, err);
    return -1;
  }
  for (int i = 0; i < g->n_inputs; i++)
    if (rt_data_batch_dim(e, i) != rt_data_batch_dim(train_ds, i)) {
      ir_error_plain(d, "%s %s feeds input '%s' in another layout than --data %s", flag, spec, g->inputs[i]->name, t->s.data);
      return -1;
    }
  int64_t have = rt_data_eval_batches(e);
  if (have == 0) {
    ir_error_plain(d, "%s %s holds no complete batch of %lld %s", flag, spec, (long long)rt_data_batch_items(e),
                   rt_data_is_sequence(e) ? "tokens (windows of T + 1, T apart)" : "samples");
    return -1;
  }
  if (t->s.eval_batches_set && t->s.eval_batches > have) {
    ir_error_plain(d, "--eval-batches %lld: %s holds %lld batches of %lld %s", (long long)t->s.eval_batches, spec,
                   (long long)have, (long long)rt_data_batch_items(e), rt_data_is_sequence(e) ? "tokens" : "samples");
    return -1;
  }
  *batches = t->s.eval_batches_set ? t->s.eval_batches : have == INT64_MAX ? 20 : have;
  return 0;
}
/* The settings: --plan, --save's target, the resumed state's settings as
 * defaults, the data source opened and the task family's defaults. */
static int job_settings(tool_train_job *j, ir_diag *d) {
  tool_compile_opts *o = &j->o;
  tool_train_opts *t = &j->t;
  char err[1024];
  if (t->plan && (tool_plan_read(t->plan, &j->plan, d) != 0 || apply_plan(o, t, &j->plan, d) != 0)) return -1;
  if (t->save && check_save_target(t->save, d) != 0) return -1;
  if ((t->weights.path && t->resume) || (t->weights.map && !t->weights.path)) {
    ir_error_plain(d, "%s", t->resume ? "--weights and --resume: give one (--resume continues a state, --weights starts from "
                                        "parameters with a fresh optimizer)"
                                      : "--map needs --weights PATH");
    return -1;
  }
  bool data_given = t->s.data_set, eval_batches_given = t->s.eval_batches_set;
  if (t->resume) {
    if (!(j->state = rt_safetensors_read(t->resume, err, sizeof err))) {
      ir_error_plain(d, "--resume: %s", err);
      return -1;
    }
    if (rt_settings_apply_saved(&t->s, j->state, t->resume, d) != 0) return -1;
  }
  if (t->eval_only) { /* the training run's eval settings are not this command's */
    if (!t->resume || !data_given) {
      ir_error_plain(d, "eval: %s is required", !t->resume ? "--resume STATE (a state saved by tgc train --save)"
                                                           : "--data SOURCE (the held-out data to evaluate on)");
      return -1;
    }
    t->s.eval_data = NULL;
    t->s.eval_every_set = false;
    t->s.eval_batches_set = eval_batches_given;
  }
  if (t->s.eval_every_set && !t->s.eval_data) {
    ir_error_plain(d, "--eval-every needs --eval-data SOURCE");
    return -1;
  }
  if (t->s.eval_batches_set && !t->s.eval_data && !t->eval_only) {
    ir_error_plain(d, "--eval-batches needs --eval-data SOURCE");
    return -1;
  }
  if (!t->s.data) {
    ir_error_plain(d, "train: --data SOURCE is required (xor, regression, copy, reverse, sort, text:PATH, tokens:PATH, npy:NAME=PATH,...)");
    return -1;
  }
  if (!(j->ds = rt_data_open_settings(&t->s, t->s.data, err, sizeof err))) {
    if (data_given) ir_error_plain(d, "--data: %s", err);
    else ir_error_plain(d, "%s: metadata \"data\": %s", t->resume, err);
    return -1;
  }
  apply_defaults(t, rt_data_is_sequence(j->ds));
  /* the size flags become -D overrides of the model's config */
  size_t len = 0;
  char *peek = ir_read_file(o->file, TOOL_MAX_FILE_BYTES, &len, d);
  if (!peek) return -1;
  bool is_ir = len && strlen(o->file) > 3 && strcmp(o->file + strlen(o->file) - 3, ".ir") == 0;
  int mrc = map_size_flags(o, t, is_ir ? NULL : peek, j->define_store, d);
  free(peek);
  if (mrc != 0) return -1;
  if (o->stage_set) {
    ir_error_plain(d, "--stage %d: tgc train runs each rank's own pipeline stage (its place in the mesh)", o->stage);
    return -1;
  }
  return 0;
}

/* The communicator of the ranks a launcher started (none: one rank, NULL);
 * the ranks it holds in *ranks. */
static int open_launcher_comm(tool_train_job *j, int *ranks, ir_diag *d) {
  rt_comm_options co = {.timeout_s = j->t.comm_timeout};
  char err[1024];
  if (!j->comm && rt_comm_under_launcher() && !(j->comm = rt_comm_open(&co, err, sizeof err))) {
    ir_error_plain(d, "%s", err);
    return -1;
  }
  *ranks = j->comm ? rt_comm_size(j->comm) : 1;
  return 0;
}

/* The ranks: --plan's must be the job's, --mesh auto asks the planner for
 * the job's, a mesh of many ranks binds this rank to its place (its
 * pipeline stage); ranks other than 0 stop writing stdout and the log. */
static int job_ranks(tool_train_job *j, ir_diag *d) {
  tool_compile_opts *o = &j->o;
  tool_train_opts *t = &j->t;
  char err[1024], m[64];
  int ranks = 1;
  if (j->plan.root) { /* --plan: the job's ranks must be the plan's */
    if (open_launcher_comm(j, &ranks, d) != 0) return -1;
    if (ranks != j->plan.ranks) {
      ir_error_plain(d, "--plan %s: the plan is for %lld ranks (--mesh %s), but the job has %d (run it with mpirun -np %lld)",
                     j->plan.path, (long long)j->plan.ranks,
                     mesh_flag(j->plan.dp, j->plan.tp, j->plan.pp, j->plan.sp, m, sizeof m), ranks,
                     (long long)j->plan.ranks);
      return -1;
    }
  }
  if (o->mesh_auto) { /* --mesh auto: the planner's mesh for the ranks the launcher started (none: one) */
    if (open_launcher_comm(j, &ranks, d) != 0) return -1;
    ir_dtype dt = t->s.dtype == 1 ? IR_DT_BF16 : t->s.dtype == 2 ? IR_DT_F16 : IR_DT_F32;
    if (tool_plan_auto_mesh(o, t->cluster, t->cluster_file, ranks, t->s.micro_batches, dt, t->s.optimizer,
                            !j->comm || rt_comm_rank(j->comm) == 0, &t->pp_schedule, d) != 0)
      return -1;
  }
  if (j->comm && rt_comm_size(j->comm) == 1) rt_comm_close(j->comm), j->comm = NULL;
  if (o->mesh_set && ir_mesh_ranks(&o->mesh) > 1) { /* many ranks: the communicator first (every rank opens it) */
    rt_comm_options co = {.timeout_s = t->comm_timeout};
    int coord[IR_NUM_AXES];
    if ((!j->comm && !(j->comm = rt_comm_open(&co, err, sizeof err))) ||
        rt_mesh_bind(j->comm, &o->mesh, coord, err, sizeof err) != 0) {
      ir_error_plain(d, "%s", err);
      return -1;
    }
    o->mesh.stage = o->mesh.size[IR_AXIS_PP] > 1 ? coord[IR_AXIS_PP] : -1; /* this rank's pipeline stage */
    if (rt_comm_rank(j->comm) != 0) { /* rank 0 prints and logs */
      if (!freopen("/dev/null", "w", stdout)) {
        ir_error_plain(d, "rank %d: cannot silence stdout: %s", rt_comm_rank(j->comm), strerror(errno));
        return -1;
      }
      t->log = NULL;
    }
  }
  for (int k = 0; k < 2; k++) /* the old spellings, told once (rank 0) */
    if (t->notes[k][0] && (!j->comm || rt_comm_rank(j->comm) == 0)) ir_note(d, (ir_loc){0}, "%s", t->notes[k]);
  if (j->plan.root && !t->json)
    printf("plan %s: --mesh %s --zero %d --batch %lld --micro-batches %d --pipeline-schedule %s --checkpoint %s\n",
           j->plan.path, mesh_flag(j->plan.dp, j->plan.tp, j->plan.pp, j->plan.sp, m, sizeof m), o->zero,
           (long long)t->s.batch, t->s.micro_batches, pass_schedule_name((pass_schedule)t->pp_schedule), o->checkpoint);
  if (t->n_stage_bounds && !(o->mesh_set && o->mesh.size[IR_AXIS_PP] > 1)) {
    ir_error_plain(d, "--stage-boundaries places the layers on pipeline stages: it needs pp > 1 (--mesh pp=P,...)");
    return -1;
  }
  return 0;
}

/* The model compiled into this rank's step program (pass_build_train), the
 * data bound to its inputs, the eval source opened beside it. */
static int job_compile(tool_train_job *j, ir_diag *d) {
  tool_compile_opts *o = &j->o;
  tool_train_opts *t = &j->t;
  char err[1024];
  ir_graph *g = tool_load(o, d, &j->text);
  if (!g) return -1;
  pass_options po = {.diag = d, .verify_each = o->verify_each, .time_passes = o->time_passes, .verbose = o->verbose,
                     .dump_after = o->after, .dump_out = stdout, .dump_format = o->format, .checkpoint = o->checkpoint,
                     .disabled = o->pass_disabled, .zero = o->zero, .bucket_bytes = o->bucket_bytes, .tp_search = !o->tp_megatron};
  /* --tp-layout search: chosen on the graph tgc plan searches (tool_tp_layouts), so both choose alike */
  int sdt = t->s.dtype == 1 ? IR_DT_BF16 : t->s.dtype == 2 ? IR_DT_F16 : -1;
  bool dump = o->after && (strcmp(o->after, "shard") == 0 || strcmp(o->after, "all") == 0);
  int rc = tool_tp_layouts(o, g, sdt, dump ? stdout : NULL, &j->tpl, d);
  po.tp_layouts = j->tpl;
  /* the data decides where the targets are (token accuracy), then the program */
  if (rc == 0 && rt_data_bind(j->ds, g, err, sizeof err) != 0) ir_error_plain(d, "%s", err), rc = -1;
  if (rc == 0 && (t->s.eval_data || t->eval_only) &&
      open_eval_source(t, g, j->ds, &j->eval_ds, &j->eval_batches, d) != 0)
    rc = -1;
  if (rc != 0) {
    ir_graph_free(g);
    return -1;
  }
  int batch_dims[64];
  for (int i = 0; i < g->n_inputs && i < 64; i++) batch_dims[i] = rt_data_batch_dim(j->ds, i);
  pass_train_options to = {.opt = pass_optimizer_defaults((pass_optimizer_kind)t->s.optimizer),
                           .micro_batches = t->s.micro_batches,
                           .targets_input = rt_data_targets_input(j->ds),
                           .batch_dims = batch_dims,
                           .schedule = t->pp_schedule,
                           .chunks = t->pp_chunks,
                           .stage_boundaries = t->n_stage_bounds ? t->stage_bounds : NULL,
                           .n_stage_boundaries = t->n_stage_bounds,
                           .passes = &po,
                           .eval = t->s.eval_data || t->eval_only};
  to.opt.clip_norm = t->s.clip;
  to.opt.weight_decay = t->s.weight_decay;
  if (t->s.dtype) { /* mixed precision: f32 master weights, optimizer and gradient sums; f16 scales the loss */
    to.mixed_precision = true;
    to.compute_dtype = t->s.dtype == 1 ? IR_DT_BF16 : IR_DT_F16;
    to.loss_scaling = t->s.dtype == 2;
  }
  j->model_params = g->n_params;
  j->prog = pass_build_train(g, &to); /* takes g */
  return j->prog && tool_check_training_memory(j->prog, d) == 0 ? 0 : -1;
}

/* The trainer on the chosen backend, its parameters from --weights or its
 * whole state from --resume. */
static int job_trainer(tool_train_job *j, ir_diag *d) {
  tool_compile_opts *o = &j->o;
  tool_train_opts *t = &j->t;
  char err[1024];
  rt_train_config cfg = {.prog = j->prog, .backend = t->backend.backend, .device = t->backend.device, .data = j->ds,
                         .seed = t->s.seed, .comm = j->comm};
  if (j->comm && use_nccl(t, rt_comm_rank(j->comm) == 0, d, &cfg.nccl) != 0) return -1;
  if (t->profile && !(j->prof = calloc(2, sizeof *j->prof))) {
    ir_error_plain(d, "out of memory");
    return -1;
  }
  if (j->prof) cfg.profile = &j->prof[0], cfg.update_profile = &j->prof[1];
  cfg.schedule = (rt_schedule){.kind = t->s.schedule, .lr = t->s.lr, .warmup = t->s.warmup, .total = t->s.steps, .floor = 0.1};
  if (!(j->tr = rt_trainer_new(&cfg, err, sizeof err))) {
    ir_error_plain(d, "%s", err);
    return -1;
  }
  if (check_sizes(j->prog->step, t, j->ds, o->mesh_set ? o->mesh.size[IR_AXIS_DP] : 1, d) != 0) return -1;
  if (t->weights.path) {
    rt_weight_map *wm = NULL;
    if (t->weights.map && !(wm = rt_weight_map_read(t->weights.map, err, sizeof err))) {
      ir_error_plain(d, "--map: %s", err);
      return -1;
    }
    int wr = rt_trainer_load_weights(j->tr, t->weights.path, wm, err, sizeof err);
    rt_weight_map_free(wm);
    if (wr != 0) {
      ir_error_plain(d, "--weights: %s", err);
      return -1;
    }
  }
  if (j->state && rt_trainer_load(j->tr, j->state, t->resume, err, sizeof err) != 0) {
    ir_error_plain(d, "--resume: %s", err);
    return -1;
  }
  return 0;
}

int tool_train_job_open(tool_train_job *j, ir_diag *d) {
  if (job_settings(j, d) != 0 || job_ranks(j, d) != 0 || job_compile(j, d) != 0 || job_trainer(j, d) != 0) return -1;
  return 0;
}

void tool_train_job_close(tool_train_job *j) {
  free(j->prof);
  if (j->eval_ds != j->ds) rt_data_free(j->eval_ds);
  rt_trainer_free(j->tr);
  rt_comm_close(j->comm);
  tool_plan_free(&j->plan);
  rt_data_free(j->ds);
  rt_safetensors_free(j->state);
  pass_tp_layouts_free(j->tpl);
  pass_training_free(j->prog);
  free(j->text);
  memset(j, 0, sizeof *j);
}
