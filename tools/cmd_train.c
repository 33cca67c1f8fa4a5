/* tools/cmd_train.c — `tgc train` and `tgc eval`: the flags, one training
 * job (train_job.c: the model compiled into its step program, the data, the
 * ranks, a trainer), then the steps with a progress display, a JSON-lines
 * log, evaluations and safetensors state files, and the summary. --steps is
 * the total step count of the run (the cosine schedule ends there), so a
 * resumed run goes on to the same end.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ir_die.h"
#include "comm.h"
#include "rt_cuda.h"
#include "train_job.h"
#include "ir_clock.h"

static const char *const train_help =
    "usage: tgc train FILE --data SOURCE [--steps N] [--optimizer sgd|momentum|adam|adamw] [--lr X]\n"
    "                 [--batch N] [--vocab V] [--seq-len T] [--micro-batches K] [--clip NORM]\n"
    "                 [--weight-decay W] [--warmup N] [--lr-schedule constant|cosine] [--save PATH]\n"
    "                 [--save-every N] [--resume PATH] [--log run.jsonl] [--seed N] [--dtype bf16|f16]\n"
    "                 [--plan plan.json] [--eval-data SOURCE [--eval-every N] [--eval-batches K]]\n"
    "                 [--json] [options]\n"
    "\n"
    "Trains FILE: the loss is its output named 'loss' (else its first output, a float scalar);\n"
    "every parameter is trained.\n"
    "\n"
    "data (--data SOURCE, bound to the model's inputs by name):\n"
    "  xor, regression      vector tasks: inputs X [features, batch] or x [batch, features] and\n"
    "                       targets Y or y [batch] (or [batch, 1]). xor has 2 features, regression\n"
    "                       features - 1; the next feature is a constant 1 (a bias), the rest 0.\n"
    "  copy, reverse, sort  sequence tasks: inputs tokens and targets, integer [batch, T]; tokens\n"
    "                       uniform in [0, V); targets the tokens copied, reversed or sorted\n"
    "  text:PATH            a byte-level text file (tokens = bytes, targets = the next byte)\n"
    "  --tokenizer F        ... read through a tokenizer.json instead: tokens = its ids (encoded\n"
    "                       once, no special tokens), its vocabulary the model's V at least\n"
    "  tokens:PATH          uint16 little-endian tokens (targets = the next token): llm.c's .bin\n"
    "                       files (a 1 KiB header: magic 20240520, version 1, the token count;\n"
    "                       recognized by the magic, required of a .bin file) or raw\n"
    "  npy:NAME=PATH,...    .npy arrays bound to the inputs of those names, dim 0 the samples\n"
    "                       (the same N in every array), the rest the input's shape after its\n"
    "                       batch dim; floats into float inputs, integers (<i4, <i8: labels) into\n"
    "                       integer ones. Each epoch a fresh order from the seed; its last\n"
    "                       N mod batch samples are dropped. Under --mesh each dp rank reads its\n"
    "                       own block of every batch (docs/training.md)\n"
    "  --batch N            batch size: sets the config constant B (else M) with -D\n"
    "  --seq-len T          sequence length: sets the config constant T\n"
    "  --vocab V            vocabulary of copy/reverse/sort: sets the config constant V if there is one\n"
    "\n"
    "evaluation (held-out data; the forward graph alone, compiled once, on the parameters' own\n"
    "            buffers: no gradient, no update):\n"
    "  --eval-data SOURCE   a source as --data, bound the same way; evaluated after the last step\n"
    "  --eval-every N       ... and every N steps\n"
    "  --eval-batches K     batches per evaluation, read in order from the start of the source\n"
    "                       (default: every complete batch of a file or arrays, 20 of a task)\n"
    "                       prints 'eval at step S: loss L  accuracy A%  perplexity P (K batches)'\n"
    "                       (accuracy with a 'logits' output, perplexity = exp(loss) for token\n"
    "                       sources) and logs eval_loss, eval_accuracy, eval_perplexity\n"
    "\n"
    "optimization (defaults: vector tasks adam, lr 0.05, 1000 steps, constant schedule;\n"
    "              sequence tasks adam, lr 0.003, 200 steps, warmup 20, cosine to 0.1 lr, clip 1):\n"
    "  --steps N            total steps of the run (a resumed run continues to N)\n"
    "  --optimizer NAME     sgd, momentum (0.9), adam, adamw (betas 0.9, 0.999, eps 1e-8)\n"
    "  --lr X               peak learning rate\n"
    "  --lr-schedule S      constant, or cosine (decays to 0.1 x lr at the last step); the old\n"
    "                       spelling --schedule constant|cosine works too (with a note)\n"
    "  --warmup N           linear warmup over the first N steps\n"
    "  --micro-batches K    gradient accumulation: K batches per step, gradients averaged\n"
    "  --clip NORM          clip the global gradient norm to NORM (0 = off)\n"
    "  --weight-decay W     adamw: decoupled; others: L2 added to the gradient\n"
    "  --seed N             parameter initialization and data (default 0)\n"
    "  --dtype bf16|f16     mixed precision: the model computes in bf16 (or f16) with f32 master\n"
    "                       weights, gradients, optimizer state and update; f16 scales the loss\n"
    "                       dynamically (from 65536: halved and the step skipped when the gradients\n"
    "                       overflow, doubled after 2000 good steps). Meant for --backend cuda and\n"
    "                       cuda-emu; the cpu runs the same graphs with its reference kernels\n"
    "\n"
    "state and output:\n"
    "  --save PATH          save parameters + optimizer state (safetensors) at the end; with\n"
    "                       --mesh every rank writes its blocks to PATH.step<S>.rank<R>-of-<N> and\n"
    "                       PATH is their index (resumable on any mesh, one device included)\n"
    "  --save-every N       ... and every N steps (each save is written to a temporary file next\n"
    "                       to PATH, fsynced, renamed over PATH; PATH must be a regular file or new)\n"
    "  --weights PATH       start from these parameters (a safetensors file or an HF folder; --map MAP\n"
    "                       names them: docs/weights.md); the optimizer state starts fresh\n"
    "  --resume PATH        continue from a saved state, bit-identically; its settings are the defaults\n"
    "                       (checked like the flags; flags given again override them)\n"
    "  --stop-at N          stop after step N (saving), as if interrupted; resume later\n"
    "  --log FILE           one JSON object per step: step, loss, lr, accuracy (sequence models\n"
    "                       with a 'logits' output), elapsed_s\n"
    "  --print-every N      plain progress lines every N steps when not on a terminal\n"
    "  --json               print the summary as one JSON object\n"
    "  --profile            time every kernel; print where the time went, by op, for the\n"
    "                       training graph and the optimizer update (to stderr)\n"
    "\n"
    "many ranks (docs/sharding.md, docs/comm.md):\n"
    "  mpirun -np N tgc train FILE --mesh dp=D,tp=T [--zero Z] ...   N = D x T ranks; every\n"
    "                       rank runs its shard of the model, rank 0 prints and logs\n"
    "  mpirun -np N tgc train FILE --mesh auto ...   the planner (tgc plan on N ranks of the\n"
    "                       cpu-host cluster) chooses dp, tp, sp, pp, --zero and the pipeline\n"
    "                       schedule for the config's batch B and --micro-batches; rank 0 prints\n"
    "                       'mesh auto: ...'; without a launcher --mesh auto is one rank\n"
    "  --cluster NAME | --cluster-file F   with --mesh auto: what each rank is and the links\n"
    "                       between them (a node kind of tgc plan, default cpu-host; the job's\n"
    "                       ranks are the cluster's size)\n"
    "  --pipeline-schedule gpipe|1f1b|interleaved:V   the pipeline's order of micro-batch\n"
    "                       forwards and backwards (pp > 1; default gpipe). interleaved:V:\n"
    "                       Megatron-LM's interleaved 1F1B, the layers cut into pp x V chunks, rank\n"
    "                       s holding chunks s, s + pp, ...; --micro-batches a multiple of pp.\n"
    "                       --schedule takes these values too (and the learning-rate schedule's)\n"
    "  --stage-boundaries L1,L2,...   the first layer of every (virtual) stage after the first\n"
    "                       (pp x V - 1 ascending layer indices) instead of the even split\n"
    "  mpirun -np N tgc train FILE --plan plan.json --data SOURCE ...   runs a plan of `tgc plan\n"
    "                       --save-plan` (its last line prints this command): the mesh, ZeRO stage,\n"
    "                       sp, micro-batching (--batch = micro-batch x dp, --micro-batches), the\n"
    "                       pipeline schedule, stage boundaries and checkpoint policy are the plan's; a flag that\n"
    "                       says otherwise, another rank count, model file (by hash), config or -D\n"
    "                       is refused (docs/plan.md, \"Plan files\")\n"
    "  --comm-timeout S     give up (every rank, naming the rank waited for) when a message does\n"
    "                       not come for S seconds (default 300)\n"
    "  --comm auto|mpi|nccl  how a GPU backend's collectives move: nccl on device memory, or\n"
    "                       mpi through host memory; auto (default): nccl on cuda and cuda-emu\n"
    "                       (cuda: when libnccl.so.2 loads, else mpi with a note), mpi on cpu\n"
    "\n"
    "A progress bar is drawn on stderr when it is a terminal; otherwise (without --json) plain\n"
    "progress lines go to stdout. The summary gives the final loss and\n"
    "accuracy (means over the last 10 steps), steps/s, and predicted vs measured peak activation bytes.\n"
    "\n";

static const char *const eval_help =
    "usage: tgc eval FILE --resume STATE --data SOURCE [--eval-batches K] [--json] [options]\n"
    "\n"
    "Evaluates the parameters of STATE (saved by tgc train --save) on SOURCE once: the forward\n"
    "graph alone (no gradient, no update), compiled once on the parameters' own buffers, on\n"
    "the backend and --mesh given (mpirun -np N for more than one rank). Prints\n"
    "  eval STATE (step S) on SOURCE: loss L  accuracy A%  perplexity P  (K batches)\n"
    "accuracy when the model has a 'logits' output and integer targets, perplexity = exp(loss)\n"
    "for token sources.\n"
    "\n"
    "  --data SOURCE        the held-out data, any source of tgc train --data (see tgc train\n"
    "                       --help), read in order from its start\n"
    "  --resume STATE       the saved state; its settings (optimizer, sizes, --vocab, --dtype,\n"
    "                       ...) build the same program, flags given override them\n"
    "  --eval-batches K     batches to read (default: every complete batch of a file or\n"
    "                       arrays, 20 of a task)\n"
    "  --json               print the result as one JSON object: step, loss, accuracy,\n"
    "                       perplexity, batches, data\n"
    "\n";

extern const char *const tool_common_help;

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}


static const char *fmt_bytes(size_t b, char *buf, size_t n) {
  if (b >= (1u << 20)) snprintf(buf, n, "%.2f MiB", (double)b / (1 << 20));
  else if (b >= 1024) snprintf(buf, n, "%.1f KiB", (double)b / 1024);
  else snprintf(buf, n, "%zu B", b);
  return buf;
}

static void fmt_eta(double s, char *buf, size_t n) {
  if (!isfinite(s) || s < 0) s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* Saves the state with the run's settings as metadata. */
static int save_state(const rt_trainer *tr, const tool_train_opts *t, const char *path, ir_diag *d) {
  rt_meta_entry meta[RT_SETTINGS_MAX + 1];
  char text[RT_SETTINGS_MAX][40];
  int n = rt_settings_meta(&t->s, meta, text);
  /* the data stream is a function of (seed, step, micro-batch): its position is the step */
  meta[n++] = (rt_meta_entry){"data_rng", "counter: (seed, step, micro-batch)"};
  char err[1024];
  if (rt_trainer_save(tr, path, meta, n, err, sizeof err) != 0) {
    ir_error_plain(d, "%s", err);
    return -1;
  }
  return 0;
}

static void json_num(FILE *f, const char *key, double v) {
  if (isfinite(v)) fprintf(f, ",\"%s\":%.17g", key, v);
  else fprintf(f, ",\"%s\":null", key);
}


/* After a failed step: what --save PATH holds (a failed run never saves). */
static void note_kept_state(const char *path, int64_t last_saved, ir_diag *d) {
  if (!path) return;
  if (last_saved) ir_note(d, (ir_loc){0}, "%s keeps the state of step %lld", path, (long long)last_saved);
  else if (access(path, F_OK) == 0) ir_note(d, (ir_loc){0}, "%s was left as it was", path);
  else ir_note(d, (ir_loc){0}, "nothing was saved to %s", path);
}

/* A log line that did not reach the file (full disk, closed pipe) stops the
 * run: a log with holes would pass for a complete one. */
static bool log_failed(FILE *log, const char *path, ir_diag *d) {
  if (fflush(log) == 0 && !ferror(log)) return false;
  ir_error_plain(d, "--log %s: cannot write: %s", path, strerror(errno));
  return true;
}

/* --pipeline-schedule gpipe|1f1b|interleaved:V (V chunks per rank, from 2). */
static int parse_pp_schedule(const char *flag, const char *val, tool_train_opts *t, ir_diag *d) {
  char *end = NULL;
  if (val && strcmp(val, "gpipe") == 0) t->pp_schedule = PASS_SCHED_GPIPE, t->pp_chunks = 1;
  else if (val && strcmp(val, "1f1b") == 0) t->pp_schedule = PASS_SCHED_1F1B, t->pp_chunks = 1;
  else if (val && strncmp(val, "interleaved:", 12) == 0 && (t->pp_chunks = (int)strtol(val + 12, &end, 10), 1) &&
           end != val + 12 && !*end && t->pp_chunks >= 2 && t->pp_chunks <= 64)
    t->pp_schedule = PASS_SCHED_INTERLEAVED;
  else {
    ir_error_plain(d, "%s %s: expected gpipe, 1f1b or interleaved:V (V chunks per rank, 2 to 64)", flag, val ? val : "");
    return -1;
  }
  return 0;
}

/* --stage-boundaries L1,L2,...: layer indices (checked against the model and the mesh by the pipeline cut). */
static int parse_stage_bounds(const char *val, tool_train_opts *t, ir_diag *d) {
  const char *p = val ? val : "";
  t->n_stage_bounds = 0;
  for (;;) {
    char *end = NULL;
    long x = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',') || x < 0 || x > 1000000000 || t->n_stage_bounds == 63) {
      ir_error_plain(d, "--stage-boundaries %s: expected layer indices L1,L2,... (at most 63): the first layer of "
                     "every stage after the first", val ? val : "");
      return -1;
    }
    t->stage_bounds[t->n_stage_bounds++] = (int)x;
    if (!*end) return 0;
    p = end + 1;
  }
}

static int parse_args(int argc, char **argv, tool_compile_opts *o, tool_train_opts *t, ir_diag *d) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = tool_parse_common(o, argc, argv, &i, d);
    if (r == 0) r = tool_parse_backend(argc, argv, &i, &t->backend, d);
    if (r == 0) r = tool_parse_weights_flag(argc, argv, &i, &t->weights, d);
    if (r < 0) return -1;
    if (r > 0) continue;
    const char *val = NULL;
#define TAKE(flag)                                                                              \
  (strncmp(a, flag, strlen(flag)) == 0 && (a[strlen(flag)] == 0 || a[strlen(flag)] == '=') &&   \
   ((val = a[strlen(flag)] == '=' ? a + strlen(flag) + 1 : (i + 1 < argc ? argv[++i] : NULL)), 1))
    int rc = 0, k = 0;
    /* the old --schedule names the learning-rate schedule (constant, cosine:
     * now --lr-schedule) or the pipeline's (gpipe, 1f1b, interleaved:V: now
     * --pipeline-schedule) */
    if (TAKE("--schedule")) {
      bool pipe = val && (strcmp(val, "gpipe") == 0 || strcmp(val, "1f1b") == 0 || strncmp(val, "interleaved", 11) == 0);
      if (pipe) {
        if (parse_pp_schedule("--schedule", val, t, d) != 0) return -1;
        t->pp_schedule_set = true;
        snprintf(t->notes[0], sizeof t->notes[0], "--schedule %s: the pipeline schedule is spelled --pipeline-schedule",
                 val);
        continue;
      }
      if (rt_settings_set(&t->s, rt_settings_find("schedule"), "--schedule", val, d) != 0) return -1;
      snprintf(t->notes[1], sizeof t->notes[1], "--schedule %s: the learning-rate schedule is spelled --lr-schedule", val);
      continue;
    }
    if (TAKE("--pipeline-schedule")) {
      if (parse_pp_schedule("--pipeline-schedule", val, t, d) != 0) return -1;
      t->pp_schedule_set = true;
      continue;
    }
    while (k < rt_settings_count() && !TAKE(rt_settings_flag(k))) k++;
    if (k < rt_settings_count()) {
      rc = rt_settings_set(&t->s, k, NULL, val, d);
    } else if (TAKE("--plan")) {
      if (!val || !*val) rc = -1, ir_error_plain(d, "--plan needs a FILE (written by tgc plan --save-plan)");
      t->plan = val;
    } else if (TAKE("--save")) {
      if (!val || !*val) rc = -1, ir_error_plain(d, "--save needs a PATH");
      t->save = val;
    } else if (TAKE("--save-every")) {
      rc = rt_settings_parse_int("--save-every", val, 1, &t->save_every, d);
    } else if (TAKE("--resume")) {
      if (!val || !*val) rc = -1, ir_error_plain(d, "--resume needs a PATH");
      t->resume = val;
    } else if (TAKE("--stop-at")) {
      rc = rt_settings_parse_int("--stop-at", val, 1, &t->stop_at, d);
    } else if (TAKE("--log")) {
      if (!val || !*val) rc = -1, ir_error_plain(d, "--log needs a FILE");
      t->log = val;
    } else if (TAKE("--stage-boundaries")) {
      rc = parse_stage_bounds(val, t, d);
    } else if (TAKE("--comm-timeout")) {
      char *end = NULL;
      t->comm_timeout = val ? strtod(val, &end) : 0;
      if (!val || end == val || *end || !(t->comm_timeout > 0) || t->comm_timeout > 1e6)
        rc = -1, ir_error_plain(d, "--comm-timeout %s: expected seconds, more than 0 and at most 1000000", val ? val : "");
    } else if (TAKE("--cluster")) {
      if (!val || !*val) rc = -1, ir_error_plain(d, "--cluster needs a NAME (dgx-a100, dgx-h100, cpu-host, ...)");
      t->cluster = val;
    } else if (TAKE("--cluster-file")) {
      if (!val || !*val) rc = -1, ir_error_plain(d, "--cluster-file needs a FILE");
      t->cluster_file = val;
    } else if (TAKE("--comm")) {
      if (!val || (strcmp(val, "auto") != 0 && strcmp(val, "mpi") != 0 && strcmp(val, "nccl") != 0))
        rc = -1, ir_error_plain(d, "--comm %s: expected auto, mpi or nccl", val ? val : "");
      t->comm = val;
    } else if (TAKE("--print-every")) {
      rc = rt_settings_parse_int("--print-every", val, 1, &t->print_every, d);
    } else if (strcmp(a, "--json") == 0) {
      t->json = true;
    } else if (strcmp(a, "--profile") == 0) {
      t->profile = true;
    } else if (tool_positional("train", a, o, d) != 0) {
      rc = -1;
    }
#undef TAKE
    if (rc) return -1;
  }
  if (tool_need_file(t->eval_only ? "eval" : "train", o, d) != 0) return -1;
  if (t->eval_only && (t->s.eval_data || t->s.eval_every_set)) {
    ir_error_plain(d, "eval: --data SOURCE is the data evaluated (--eval-data and --eval-every are tgc train's)");
    return -1;
  }

  if (t->save_every && !t->save) {
    ir_error_plain(d, "--save-every needs --save PATH");
    return -1;
  }
  if ((t->cluster || t->cluster_file) && !o->mesh_auto) {
    ir_error_plain(d, "%s: only --mesh auto plans for a cluster (tgc plan evaluates others)",
                   t->cluster ? "--cluster" : "--cluster-file");
    return -1;
  }
  if (t->comm && strcmp(t->comm, "nccl") == 0 && !(t->backend.backend && t->backend.backend->comm_table)) {
    ir_error_plain(d, "--comm nccl: NCCL moves GPU memory; give --backend cuda or cuda-emu");
    return -1;
  }
  return 0;
}


/* Pipeline parallelism: what the planner's simulation (pass_pipe_in_flight)
 * says this rank keeps in flight, with each chunk's saved values as its
 * bytes, beside what the last step kept: {"schedule", "chunks", "stage",
 * "in_flight", "in_flight_bytes", "planned_in_flight", "planned_in_flight_bytes",
 * "planned_equals_measured", "reserved_bytes" (the device memory the
 * trainer reserved for them: one arena of the rank's chunks),
 * "reserved_equals_planned"}. */
static json_t *pipeline_json(const pass_training *pt, const rt_trainer *tr) {
  int p = pt->n_stages, v = pt->n_chunks, s = pt->stage;
  double *act = calloc((size_t)p * v, sizeof *act), peak_act_bytes = 0;
  double *peak_act = calloc((size_t)p, sizeof *peak_act);
  int *peak_mb = calloc((size_t)p, sizeof *peak_mb);
  if (!act || !peak_act || !peak_mb) IR_DIE("out of memory (act || !peak_act || !peak_mb)");
  for (int c = 0; c < v; c++) { /* this rank's chunks (the others' do not count on it) */
    const pass_pipe_chunk *ch = &pt->chunk[c];
    for (int j = 0; j < ch->n_saved; j++) {
      const ir_type *ty = &ch->fwd->outputs[ch->fwd_saved0 + j].value->type;
      act[c * p + s] += (double)ir_type_numel(ty) * (double)ir_dtype_size(ty->dtype);
    }
  }
  pass_pipe pp = {(pass_schedule)pt->schedule, p, v, pt->micro_batches, NULL, NULL, NULL, NULL, act};
  pass_pipe_in_flight(&pp, peak_act, peak_mb);
  peak_act_bytes = peak_act[s];
  size_t bytes = 0;
  int n = rt_trainer_pipeline_in_flight(tr, &bytes);
  json_t *o = json_object();
  json_object_set_new(o, "schedule", json_string(pass_schedule_name((pass_schedule)pt->schedule)));
  json_object_set_new(o, "chunks", json_integer(v));
  json_object_set_new(o, "stage", json_integer(s));
  json_object_set_new(o, "in_flight", json_integer(n));
  json_object_set_new(o, "in_flight_bytes", json_integer((json_int_t)bytes));
  json_object_set_new(o, "planned_in_flight", json_integer(peak_mb[s]));
  json_object_set_new(o, "planned_in_flight_bytes", json_integer((json_int_t)peak_act_bytes));
  json_object_set_new(o, "planned_equals_measured", json_boolean(n == peak_mb[s] && (double)bytes == peak_act_bytes));
  size_t reserved = rt_trainer_pipeline_reserved(tr);
  json_object_set_new(o, "reserved_bytes", json_integer((json_int_t)reserved));
  json_object_set_new(o, "reserved_equals_planned", json_boolean((double)reserved == peak_act_bytes));
  free(act), free(peak_act), free(peak_mb);
  return o;
}

/* The IR op of a comm layer kind (collectives.def). */
/* What this rank moved per step, by kind and mesh axis, beside what the
 * graphs predict (rt_trainer_comm_check): {"rank", "ranks", "steps",
 * "per_step": {"all_reduce": {"dp": {"calls", "bytes_sent",
 * "bytes_received", "predicted_calls", "predicted_bytes_sent",
 * "predicted_bytes_received"}}, ...}, "predicted_equals_measured": bool}
 * (every step moves the same). */
static json_t *comm_json(const rt_comm *c, const rt_comm_check *ck) {
  int64_t steps = ck->steps;
  json_t *o = json_object(), *per = json_object();
  json_object_set_new(o, "rank", json_integer(rt_comm_rank(c)));
  json_object_set_new(o, "ranks", json_integer(rt_comm_size(c)));
  json_object_set_new(o, "impl", json_string(rt_comm_impl(c)));
  json_object_set_new(o, "steps", json_integer(steps));
  for (int k = 0; k < IR_NUM_COLLS; k++) {
    json_t *kind = json_object();
    for (int a = 0; a < IR_NUM_AXES; a++) {
      const pass_comm_tally *n = &ck->measured[k][a], *p = &ck->predicted[k][a];
      if ((!n->calls && !p->calls) || steps <= 0) continue;
      json_object_set_new(kind, ir_axis_name((ir_axis)a),
                          json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "calls", (json_int_t)(n->calls / steps), "bytes_sent",
                                    (json_int_t)(n->sent / steps), "bytes_received", (json_int_t)(n->received / steps),
                                    "predicted_calls", (json_int_t)p->calls, "predicted_bytes_sent", (json_int_t)p->sent,
                                    "predicted_bytes_received", (json_int_t)p->received));
    }
    if (json_object_size(kind)) json_object_set_new(per, rt_coll_name((rt_coll_kind)k), kind);
    else json_decref(kind);
  }
  json_object_set_new(o, "per_step", per);
  json_object_set_new(o, "predicted_equals_measured", json_boolean(ck->equal));
  if (rt_comm_overlaps(c) && steps > 0) {
    rt_comm_overlap_count ov = rt_comm_overlap(c);
    json_object_set_new(o, "overlap", json_pack("{s:I,s:I,s:I}", "batches", (json_int_t)(ov.batches / steps),
                                                "collectives", (json_int_t)(ov.collectives / steps), "early_joins",
                                                (json_int_t)(ov.early_joins / steps)));
  }
  return o;
}

/* The same as lines, the communicator's axes in its order. */
static void print_comm(const rt_comm *c, const rt_comm_check *ck) {
  int64_t steps = ck->steps;
  if (steps <= 0) return;
  printf("communication of rank %d per step (of %d ranks%s):\n", rt_comm_rank(c), rt_comm_size(c),
         strcmp(rt_comm_impl(c), "nccl") == 0 ? ", through NCCL" : "");
  for (int k = 0; k < IR_NUM_COLLS; k++)
    for (int a = 0; a < rt_comm_axis_count(c); a++) {
      const char *name = rt_comm_axis_name(c, a);
      int ax = ir_axis_from_name(name, strlen(name));
      const pass_comm_tally *n = ax >= 0 ? &ck->measured[k][ax] : NULL;
      if (!n || !n->calls) continue;
      printf("  %-15s over %-3s %6lld calls  %12lld bytes sent  %12lld received\n", rt_coll_name((rt_coll_kind)k), name,
             (long long)(n->calls / steps), (long long)(n->sent / steps), (long long)(n->received / steps));
    }
  if (rt_comm_overlaps(c)) {
    rt_comm_overlap_count ov = rt_comm_overlap(c);
    printf("  overlap: %lld batch%s a step on the collectives' stream (%lld calls: the gradient buckets, ...), in flight "
           "while the device goes on; %lld waited for before their program's end\n", (long long)(ov.batches / steps),
           ov.batches / steps == 1 ? "" : "es", (long long)(ov.collectives / steps), (long long)(ov.early_joins / steps));
  }
}


/* "loss 2.1  accuracy 35.20%  perplexity 8.2  (4 batches)" */
static void print_eval(FILE *f, const char *head, const rt_eval_result *e) {
  fprintf(f, "%s: loss %.6g", head, e->loss);
  if (e->accuracy >= 0) fprintf(f, "  accuracy %.2f%%", 100 * e->accuracy);
  if (e->perplexity >= 0) fprintf(f, "  perplexity %.4g", e->perplexity);
  fprintf(f, "  (%lld batch%s)\n", (long long)e->batches, e->batches == 1 ? "" : "es");
  fflush(f);
}

static json_t *eval_json(const rt_eval_result *e, int64_t step) {
  json_t *j = json_object();
  json_object_set_new(j, "step", json_integer(step));
  json_object_set_new(j, "loss", isfinite(e->loss) ? json_real(e->loss) : json_null());
  json_object_set_new(j, "accuracy", e->accuracy >= 0 ? json_real(e->accuracy) : json_null());
  json_object_set_new(j, "perplexity", e->perplexity >= 0 && isfinite(e->perplexity) ? json_real(e->perplexity) : json_null());
  json_object_set_new(j, "batches", json_integer(e->batches));
  return j;
}

/* tgc eval: one evaluation of the saved parameters, printed. */
static int eval_once(tool_train_job *j, ir_diag *d) {
  rt_eval_result ev;
  char err[1024];
  if (rt_trainer_eval(j->tr, j->ds, j->eval_batches, &ev, err, sizeof err) != 0) {
    ir_error_plain(d, "eval: %s", err);
    return -1;
  }
  if (j->t.json) {
    json_t *o = eval_json(&ev, rt_trainer_steps_done(j->tr));
    json_object_set_new(o, "data", json_string(j->t.s.data));
    json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    fputc('\n', stdout);
    json_decref(o);
  } else {
    char head[1200];
    snprintf(head, sizeof head, "eval %s (step %lld) on %s", j->t.resume, (long long)rt_trainer_steps_done(j->tr), j->t.s.data);
    print_eval(stdout, head, &ev);
  }
  return 0;
}

/* The loop's running figures. */
enum { WINDOW = 10 }; /* the summary's means are over the last WINDOW steps */
typedef struct {
  FILE *log;             /* --log */
  bool bar;              /* stderr is a terminal: a progress bar there */
  bool seq;              /* token data (tokens/s), else samples */
  int64_t items;         /* tokens or samples per step */
  int64_t start, end, every;
  double t0, last_draw, elapsed;
  double recent_loss[WINDOW], recent_acc[WINDOW];
  int n_recent;
  size_t predicted;      /* the step program's planned activation peak */
  size_t peak;           /* the largest measured one */
  rt_step_result r;      /* the last step */
  int64_t last_saved;    /* the step of this run's last save */
  json_t *last_eval;     /* the last evaluation, for --json */
} train_loop;

/* --log: one JSON line for step r. */
static int log_step(const train_loop *L, const char *path, double el, ir_diag *d) {
  const rt_step_result *r = &L->r;
  fprintf(L->log, "{\"step\":%lld", (long long)r->step);
  json_num(L->log, "loss", r->loss);
  json_num(L->log, "lr", r->lr);
  if (r->accuracy >= 0) json_num(L->log, "accuracy", r->accuracy);
  if (r->loss_scale > 0) json_num(L->log, "loss_scale", r->loss_scale);
  if (r->skipped) fputs(",\"skipped\":true", L->log);
  json_num(L->log, "elapsed_s", el);
  fputs("}\n", L->log);
  return log_failed(L->log, path, d) ? -1 : 0;
}

/* The progress bar (a terminal) or a progress line every L->every steps. */
static void show_progress(train_loop *L, const tool_train_opts *t, double el) {
  const rt_step_result *r = &L->r;
  double rate = (double)(r->step - L->start) / (el > 0 ? el : 1e-9);
  char eta[32], acc[80] = "";
  fmt_eta((double)(t->s.steps - r->step) / rate, eta, sizeof eta);
  if (r->accuracy >= 0) snprintf(acc, sizeof acc, "  acc %5.1f%%", 100 * r->accuracy);
  if (r->loss_scale > 0) { /* f16: the loss scale, and whether this step's update was skipped */
    size_t used = strlen(acc);
    snprintf(acc + used, sizeof acc - used, "  scale %g%s", r->loss_scale, r->skipped ? " (skipped)" : "");
  }
  if (L->bar && (el - L->last_draw > 0.1 || r->step == L->end)) {
    L->last_draw = el;
    int width = 24, filled = (int)(width * (double)r->step / (double)t->s.steps);
    char b[32];
    for (int k = 0; k < width; k++) b[k] = k < filled ? '#' : '.';
    b[width] = 0;
    fprintf(stderr, "\r[%s] %lld/%lld  loss %.4g%s  %.0f %s/s  ETA %s   ", b, (long long)r->step, (long long)t->s.steps,
            r->loss, acc, rate * (double)L->items, L->seq ? "tok" : "samples", eta);
    fflush(stderr);
  } else if (!L->bar && !t->json && (r->step % L->every == 0 || r->step == L->end)) {
    fprintf(stdout, "step %lld/%lld  loss %.6g%s  lr %.3g  %.0f %s/s  ETA %s\n", (long long)r->step, (long long)t->s.steps,
            r->loss, acc, r->lr, rate * (double)L->items, L->seq ? "tokens" : "samples", eta);
    fflush(stdout);
  }
}

/* --eval-data: an evaluation after step r, printed and logged. */
static int eval_step(tool_train_job *j, train_loop *L, ir_diag *d) {
  rt_eval_result ev;
  char err[1024], head[64];
  int64_t step = L->r.step;
  if (rt_trainer_eval(j->tr, j->eval_ds, j->eval_batches, &ev, err, sizeof err) != 0) {
    if (L->bar) fputc('\n', stderr);
    ir_error_plain(d, "eval at step %lld: %s", (long long)step, err);
    return -1;
  }
  json_decref(L->last_eval);
  L->last_eval = eval_json(&ev, step);
  snprintf(head, sizeof head, "eval at step %lld", (long long)step);
  if (L->bar) fputc('\n', stderr);
  if (!j->t.json) print_eval(stdout, head, &ev);
  if (!L->log) return 0;
  fprintf(L->log, "{\"step\":%lld", (long long)step);
  json_num(L->log, "eval_loss", ev.loss);
  if (ev.accuracy >= 0) json_num(L->log, "eval_accuracy", ev.accuracy);
  if (ev.perplexity >= 0) json_num(L->log, "eval_perplexity", ev.perplexity);
  fprintf(L->log, ",\"eval_batches\":%lld}\n", (long long)ev.batches);
  return log_failed(L->log, j->t.log, d) ? -1 : 0;
}

/* Steps from the trainer's step to L->end (or an interrupt): each logged,
 * shown, evaluated and saved as the flags ask. 0, or -1 after reporting
 * (what --save holds is told). */
static int run_steps(tool_train_job *j, train_loop *L, ir_diag *d) {
  const tool_train_opts *t = &j->t;
  char err[1024];
  struct sigaction sa = {0}, old_sa;
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, &old_sa);
  L->t0 = ir_clock_s();
  int rc = 0;
  for (int64_t s = L->start; s < L->end && !interrupted && rc == 0; s++) {
    if (rt_trainer_step(j->tr, &L->r, err, sizeof err) != 0) {
      if (L->bar) fputc('\n', stderr);
      ir_error_plain(d, "step %lld: %s", (long long)(s + 1), err);
      rc = -1;
      break;
    }
    const rt_step_result *r = &L->r;
    if (r->peak_bytes > L->peak) L->peak = r->peak_bytes;
    L->recent_loss[L->n_recent % WINDOW] = r->loss;
    L->recent_acc[L->n_recent % WINDOW] = r->accuracy;
    L->n_recent++;
    double el = ir_clock_s() - L->t0;
    if (L->log && log_step(L, t->log, el, d) != 0) {
      rc = -1;
      break;
    }
    show_progress(L, t, el);
    if (!isfinite(r->loss)) {
      if (L->bar) fputc('\n', stderr);
      ir_error_plain(d, "step %lld: the loss is %g; stopping (try a smaller --lr or --clip)", (long long)r->step, r->loss);
      rc = -1;
    } else if (j->eval_ds && ((t->s.eval_every_set && r->step % t->s.eval_every == 0) || r->step == L->end)) {
      rc = eval_step(j, L, d);
    }
    if (rc == 0 && t->save && t->save_every && r->step % t->save_every == 0 && r->step != L->end) {
      rc = save_state(j->tr, t, t->save, d);
      if (rc == 0) L->last_saved = r->step;
    }
  }
  sigaction(SIGINT, &old_sa, NULL);
  if (L->bar && L->end > L->start) fputc('\n', stderr);
  L->elapsed = ir_clock_s() - L->t0;
  if (rc != 0) note_kept_state(t->save, L->last_saved, d);
  return rc;
}

/* --json: the run's summary as one object. */
static void print_summary_json(tool_train_job *j, const train_loop *L, double mean_loss, double mean_acc, int nw,
                               int64_t done_steps, const rt_comm_check *ck) {
  const tool_compile_opts *o = &j->o;
  const tool_train_opts *t = &j->t;
  double sps = L->elapsed > 0 ? (double)done_steps / L->elapsed : 0;
  json_t *s = json_object();
  json_object_set_new(s, "steps", json_integer(rt_trainer_steps_done(j->tr)));
  json_object_set_new(s, "steps_run", json_integer(done_steps));
  json_object_set_new(s, "final_loss", nw && isfinite(mean_loss) ? json_real(mean_loss) : json_null());
  json_object_set_new(s, "last_loss", nw && isfinite(L->r.loss) ? json_real(L->r.loss) : json_null());
  json_object_set_new(s, "accuracy", nw && L->r.accuracy >= 0 ? json_real(mean_acc) : json_null());
  json_object_set_new(s, "seconds", json_real(L->elapsed));
  json_object_set_new(s, "steps_per_s", json_real(sps));
  json_object_set_new(s, L->seq ? "tokens_per_s" : "samples_per_s", json_real(sps * (double)L->items));
  json_object_set_new(s, "predicted_peak_bytes", json_integer((json_int_t)L->predicted));
  json_object_set_new(s, "measured_peak_bytes", json_integer((json_int_t)L->peak));
  json_object_set_new(s, "interrupted", json_boolean(interrupted));
  if (j->eval_ds) json_object_set_new(s, "eval", L->last_eval ? json_incref(L->last_eval) : json_null());
  if (j->comm || j->plan.root) { /* what the run ran: the mesh and the plan's other settings */
    json_t *par = json_object();
    json_object_set_new(par, "plan", t->plan ? json_string(t->plan) : json_null());
    json_object_set_new(par, "mesh", json_pack("{s:i,s:i,s:i,s:b}", "dp", o->mesh.size[IR_AXIS_DP], "tp",
                                               o->mesh.size[IR_AXIS_TP], "pp", o->mesh.size[IR_AXIS_PP], "sp", o->mesh.sp));
    json_object_set_new(par, "zero", json_integer(o->zero));
    json_object_set_new(par, "tp_layout", json_string(o->tp_megatron ? "megatron" : "search"));
    json_object_set_new(par, "pipeline_schedule", json_string(pass_schedule_name((pass_schedule)t->pp_schedule)));
    json_object_set_new(par, "checkpoint", json_string(o->checkpoint ? o->checkpoint : "none"));
    json_object_set_new(par, "batch", t->s.batch_set ? json_integer(t->s.batch) : json_null());
    json_object_set_new(par, "micro_batches", json_integer(t->s.micro_batches));
    json_object_set_new(par, "bucket_mb", json_real(o->bucket_bytes > 0 ? o->bucket_bytes / 1048576.0 : 25.0));
    json_object_set_new(s, "parallel", par);
  }
  if (j->comm) json_object_set_new(s, "comm", comm_json(rt_trainer_comm(j->tr), ck));
  if (j->prog->fwd && done_steps > 0) json_object_set_new(s, "pipeline", pipeline_json(j->prog, j->tr));
  json_dumpf(s, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  fputc('\n', stdout);
  json_decref(s);
}

/* The summary lines. */
static void print_summary_text(tool_train_job *j, const train_loop *L, double mean_loss, double mean_acc, int nw,
                               int64_t done_steps, const rt_comm_check *ck) {
  char pb[32], mb[32];
  double sps = L->elapsed > 0 ? (double)done_steps / L->elapsed : 0;
  printf("done: %lld steps in %.2f s (%.1f steps/s, %.0f %s/s)\n", (long long)rt_trainer_steps_done(j->tr), L->elapsed,
         sps, sps * (double)L->items, L->seq ? "tokens" : "samples");
  printf("final loss %.6g (mean of the last %d steps; last %.6g)\n", mean_loss, nw, L->r.loss);
  if (L->r.accuracy >= 0) printf("%saccuracy %.2f%% (mean of the last %d steps)\n", L->seq ? "token " : "", 100 * mean_acc, nw);
  printf("peak activation memory: predicted %s, measured %s\n",
         fmt_bytes(L->predicted, pb, sizeof pb), fmt_bytes(L->peak, mb, sizeof mb));
  if (j->t.save) printf("saved %s\n", j->t.save);
  if (j->comm) print_comm(rt_trainer_comm(j->tr), ck);
}

/* Every rank, after the steps: it moved the bytes its graphs say, and kept
 * in flight the activations the planner's simulation says. */
static int check_predictions(tool_train_job *j, int64_t done_steps, const rt_comm_check *ck, ir_diag *d) {
  if (done_steps <= 0) return 0;
  if (j->comm && !ck->equal) {
    ir_error_plain(d, "internal error: rank %d moved other bytes than its graphs predict (see --json's \"comm\")",
                   rt_comm_rank(j->comm));
    return -1;
  }
  if (!j->prog->fwd) return 0;
  json_t *pj = pipeline_json(j->prog, j->tr);
  bool same = json_is_true(json_object_get(pj, "planned_equals_measured"));
  if (same && !json_is_true(json_object_get(pj, "reserved_equals_planned"))) /* the arena's placement fell short */
    fprintf(stderr,
            "tgc train: note: pipeline stage %d reserved %" JSON_INTEGER_FORMAT " bytes for the activations in "
            "flight, more than the %" JSON_INTEGER_FORMAT " the plan's peak needs\n",
            j->prog->stage, json_integer_value(json_object_get(pj, "reserved_bytes")),
            json_integer_value(json_object_get(pj, "planned_in_flight_bytes")));
  json_decref(pj);
  if (!same) {
    ir_error_plain(d, "internal error: pipeline stage %d kept other activations in flight than the planner's "
                   "simulation says (see --json's \"pipeline\")", j->prog->stage);
    return -1;
  }
  return 0;
}

/* The training run of an opened job: the heading, the steps, the save, the
 * summary and the checks of what was predicted. */
static int train(tool_train_job *j, ir_diag *d) {
  const tool_train_opts *t = &j->t;
  train_loop L = {.bar = isatty(STDERR_FILENO), .seq = rt_data_is_sequence(j->ds)};
  L.items = rt_data_batch_items(j->ds) * t->s.micro_batches;
  L.predicted = rt_trainer_arena_bytes(j->tr, false);
  L.start = rt_trainer_steps_done(j->tr), L.end = t->s.steps;
  if (t->stop_at && t->stop_at < L.end) L.end = t->stop_at;
  L.every = t->print_every ? t->print_every : (t->s.steps >= 10 ? t->s.steps / 10 : 1);
  if (t->log && !(L.log = fopen(t->log, L.start > 0 ? "a" : "w"))) {
    ir_error_plain(d, "--log %s: cannot write: %s", t->log, strerror(errno));
    return -1;
  }
  char share[96] = "";
  if (j->prog->n_params != j->model_params)
    snprintf(share, sizeof share, " (pipeline stage %d holds %d of them)", j->o.mesh.stage, j->prog->n_params);
  if (!t->json)
    fprintf(stdout, "training %s: %d parameter tensors%s, %s, %s, lr %g (%s%s), data %s, %s %lld per step%s\n", j->o.file,
            j->model_params, share,
            t->s.dtype == 1 ? "bf16 (mixed precision)" : t->s.dtype == 2 ? "f16 (mixed precision)" : "f32",
            pass_optimizer_name((pass_optimizer_kind)t->s.optimizer), t->s.lr,
            t->s.schedule == RT_SCHEDULE_COSINE ? "cosine" : "constant", t->s.warmup ? ", warmup" : "", t->s.data,
            L.seq ? "tokens" : "samples", (long long)L.items, L.start ? " (resumed)" : "");
  if (L.start >= t->s.steps && !t->json)
    fprintf(stdout, "already at step %lld of %lld\n", (long long)L.start, (long long)t->s.steps);
  int rc = run_steps(j, &L, d);
  if (rc == 0 && interrupted && !t->json)
    fprintf(stdout, "interrupted at step %lld%s\n", (long long)rt_trainer_steps_done(j->tr),
            t->save ? "; saving the state" : "");
  if (rc == 0 && t->save) rc = save_state(j->tr, t, t->save, d);
  if (rc == 0) {
    int nw = L.n_recent < WINDOW ? L.n_recent : WINDOW;
    double mean_loss = 0, mean_acc = 0;
    for (int k = 0; k < nw; k++) mean_loss += L.recent_loss[k], mean_acc += L.recent_acc[k];
    if (nw) mean_loss /= nw, mean_acc /= nw;
    int64_t done_steps = rt_trainer_steps_done(j->tr) - L.start;
    rt_comm_check ck;
    if (j->comm) rt_trainer_comm_check(j->tr, done_steps, &ck); /* every rank: what it moved beside what its graphs say */
    if (t->json) print_summary_json(j, &L, mean_loss, mean_acc, nw, done_steps, &ck);
    else if (nw) print_summary_text(j, &L, mean_loss, mean_acc, nw, done_steps, &ck);
    rc = check_predictions(j, done_steps, &ck, d);
  }
  if (rc == 0 && j->prof) {
    int64_t runs = rt_trainer_steps_done(j->tr) - L.start;
    tool_print_profile(stderr, &j->prof[0], "training graph (forward + backward)", runs * t->s.micro_batches);
    tool_print_profile(stderr, &j->prof[1], "optimizer update", runs);
  }
  if (L.log && fclose(L.log) != 0 && rc == 0) {
    ir_error_plain(d, "--log %s: cannot write: %s", t->log, strerror(errno));
    rc = -1;
  }
  json_decref(L.last_eval);
  return rc;
}

/* tgc train and tgc eval: the flags, the job, its steps or its one evaluation. */
static int train_or_eval(int argc, char **argv, bool eval_only) {
  ir_diag *d = tool_diag_new();
  tool_train_job *j = calloc(1, sizeof *j);
  if (!j) IR_DIE("out of memory (train job)");
  j->t = (tool_train_opts){.s = {.optimizer = PASS_OPT_ADAM, .micro_batches = 1}, .eval_only = eval_only};
  int rc = parse_args(argc, argv, &j->o, &j->t, d) == 0 && tool_train_job_open(j, d) == 0 &&
                   (eval_only ? eval_once(j, d) : train(j, d)) == 0
               ? 0
               : 1;
  tool_train_job_close(j);
  free(j);
  ir_diag_free(d);
  return rc;
}

int tool_cmd_train(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s\n%s", train_help, tool_backend_help, tool_common_help);
      return 0;
    }
  return train_or_eval(argc, argv, false);
}

int tool_cmd_eval(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s\n%s", eval_help, tool_backend_help, tool_common_help);
      return 0;
    }
  return train_or_eval(argc, argv, true);
}
