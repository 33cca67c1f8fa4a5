/* tools/cmd_train.c — `tgc train`: compile a model into its training graph
 * (pass_build_training) and an optimizer update graph (pass_build_update),
 * feed it from a data source, and run the loop in runtime/train.c with a
 * progress display, a JSON-lines log and safetensors state files.
 *
 * --batch / --seq-len / --vocab become -D B=N (or M=N) / -D T=N / -D V=N when
 * the chosen config defines that constant (fe_configs);
 * otherwise the model's own shapes must already agree. --resume reads the
 * state file first: the training settings saved in its metadata are the
 * defaults, flags given again override them. --steps is the total step
 * count of the run (the cosine schedule ends there), so a resumed run goes
 * on to the same end.
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
#include "tool.h"
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

/* Training options: the settings a state file records (rt_train_settings,
 * runtime/io/settings.c), and the run's own. */
typedef struct {
  rt_train_settings s;
  bool eval_only;          /* tgc eval: --data is the held-out data, evaluated once */
  int64_t save_every, stop_at, print_every;
  const char *save, *resume, *log;
  tool_weights weights;     /* --weights PATH [--map MAP]: the initial parameters */
  bool json, profile;
  tool_backend backend; /* --backend, --device */
  double comm_timeout;  /* --comm-timeout SECONDS (0: the comm layer's 300 s) */
  const char *comm;     /* --comm auto|mpi|nccl (NULL: auto) */
  const char *cluster, *cluster_file; /* --mesh auto: what each rank is (--cluster NAME | --cluster-file F) */
  int pp_schedule;      /* --pipeline-schedule gpipe|1f1b (pipeline parallelism): pass_schedule */
  bool pp_schedule_set;
  const char *plan;     /* --plan FILE (tgc plan --save-plan) */
  char notes[2][160];   /* old spellings used (--schedule): told once the ranks are known, by rank 0 */
  int pp_chunks;        /* interleaved:V: V chunks per rank */
  int stage_bounds[64], n_stage_bounds; /* --stage-boundaries L1,L2,...: each later stage's first layer */
} train_opts;

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

/* Defaults by task family (see the help text). */
static void apply_defaults(train_opts *t, bool sequence) {
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
static int save_state(const rt_trainer *tr, const train_opts *t, const char *path, ir_diag *d) {
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
static int parse_pp_schedule(const char *flag, const char *val, train_opts *t, ir_diag *d) {
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
static int parse_stage_bounds(const char *val, train_opts *t, ir_diag *d) {
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

static int parse_args(int argc, char **argv, tool_compile_opts *o, train_opts *t, ir_diag *d) {
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

/* --comm: whether a sharded run's collectives go through NCCL. auto: on a
 * GPU backend, when NCCL is there (cuda-emu emulates it; on a GPU,
 * libnccl.so.2 loads), else MPI through host memory with a note. */
static int use_nccl(const train_opts *t, bool rank0, ir_diag *d, bool *nccl) {
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
}

/* The size flags as -D overrides of the chosen config (when it has the constant). */
static int map_size_flags(tool_compile_opts *o, train_opts *t, const char *text, char store[3][32], ir_diag *d) {
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
static int check_sizes(const ir_graph *g, const train_opts *t, rt_data *ds, int dp, ir_diag *d) {
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
static int apply_plan(tool_compile_opts *o, train_opts *t, const tool_plan *p, ir_diag *d) {
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

/* The eval source (bound to the model as the training source is, in the
 * same layout) and how many of its batches an evaluation reads: --eval-batches,
 * else every complete batch of a file or arrays, 20 of a task. */
static int open_eval_source(const train_opts *t, const ir_graph *g, rt_data *train_ds, rt_data **eval_ds,
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

static int train_or_eval(int argc, char **argv, bool eval_only) {
  ir_diag *d = tool_diag_new();
  tool_compile_opts o = {0};
  train_opts t = {.s = {.optimizer = PASS_OPT_ADAM, .micro_batches = 1}, .eval_only = eval_only};
  rt_data *eval_ds = NULL;  /* --eval-data */
  int64_t eval_batches = 0;
  json_t *last_eval = NULL; /* the last evaluation, for --json */
  bool have_eval = false;
  rt_safetensors *state = NULL;
  pass_tp_layouts *tpl = NULL; /* --tp-layout search: the layouts, as tgc plan chooses them */
  char *text = NULL, err[1024] = "";
  ir_graph *g = NULL;
  pass_training *prog = NULL;
  rt_data *ds = NULL;
  rt_trainer *tr = NULL;
  FILE *log = NULL;
  rt_profile *prof = NULL; /* --profile: [0] training graph, [1] update graph */
  rt_comm *comm = NULL;    /* --mesh of more than one rank */
  tool_plan plan = {0};    /* --plan FILE */
  char define_store[3][32];
  int rc = 1;
  if (parse_args(argc, argv, &o, &t, d) != 0) goto done;
  if (t.plan && (tool_plan_read(t.plan, &plan, d) != 0 || apply_plan(&o, &t, &plan, d) != 0)) goto done;
  if (t.save && check_save_target(t.save, d) != 0) goto done;
  if ((t.weights.path && t.resume) || (t.weights.map && !t.weights.path)) {
    ir_error_plain(d, "%s", t.resume ? "--weights and --resume: give one (--resume continues a state, --weights starts from "
                                       "parameters with a fresh optimizer)"
                                     : "--map needs --weights PATH");
    goto done;
  }
  bool data_given = t.s.data_set, eval_batches_given = t.s.eval_batches_set;
  if (t.resume) {
    if (!(state = rt_safetensors_read(t.resume, err, sizeof err))) {
      ir_error_plain(d, "--resume: %s", err);
      goto done;
    }
    if (rt_settings_apply_saved(&t.s, state, t.resume, d) != 0) goto done;
  }
  if (eval_only) { /* the training run's eval settings are not this command's */
    if (!t.resume || !data_given) {
      ir_error_plain(d, "eval: %s is required", !t.resume ? "--resume STATE (a state saved by tgc train --save)"
                                                          : "--data SOURCE (the held-out data to evaluate on)");
      goto done;
    }
    t.s.eval_data = NULL;
    t.s.eval_every_set = false;
    t.s.eval_batches_set = eval_batches_given;
  }
  if (t.s.eval_every_set && !t.s.eval_data) {
    ir_error_plain(d, "--eval-every needs --eval-data SOURCE");
    goto done;
  }
  if (t.s.eval_batches_set && !t.s.eval_data && !eval_only) {
    ir_error_plain(d, "--eval-batches needs --eval-data SOURCE");
    goto done;
  }
  if (!t.s.data) {
    ir_error_plain(d, "train: --data SOURCE is required (xor, regression, copy, reverse, sort, text:PATH, tokens:PATH, npy:NAME=PATH,...)");
    goto done;
  }
  if (!(ds = rt_data_open_settings(&t.s, t.s.data, err, sizeof err))) {
    if (data_given) ir_error_plain(d, "--data: %s", err);
    else ir_error_plain(d, "%s: metadata \"data\": %s", t.resume, err);
    goto done;
  }
  apply_defaults(&t, rt_data_is_sequence(ds));

  /* compile: the size flags first become -D overrides */
  {
    size_t len = 0;
    char *peek = ir_read_file(o.file, TOOL_MAX_FILE_BYTES, &len, d);
    if (!peek) goto done;
    bool is_ir = len && strlen(o.file) > 3 && strcmp(o.file + strlen(o.file) - 3, ".ir") == 0;
    int mrc = map_size_flags(&o, &t, is_ir ? NULL : peek, define_store, d);
    free(peek);
    if (mrc != 0) goto done;
  }
  if (o.stage_set) {
    ir_error_plain(d, "--stage %d: tgc train runs each rank's own pipeline stage (its place in the mesh)", o.stage);
    goto done;
  }
  if (plan.root) { /* --plan: the job's ranks must be the plan's */
    rt_comm_options co = {.timeout_s = t.comm_timeout};
    if (rt_comm_under_launcher() && !(comm = rt_comm_open(&co, err, sizeof err))) {
      ir_error_plain(d, "%s", err);
      goto done;
    }
    int ranks = comm ? rt_comm_size(comm) : 1;
    if (ranks != plan.ranks) {
      char m[64];
      ir_error_plain(d, "--plan %s: the plan is for %lld ranks (--mesh %s), but the job has %d (run it with mpirun -np %lld)",
                     plan.path, (long long)plan.ranks, mesh_flag(plan.dp, plan.tp, plan.pp, plan.sp, m, sizeof m), ranks,
                     (long long)plan.ranks);
      goto done;
    }
    if (ranks == 1) rt_comm_close(comm), comm = NULL;
  }
  if (o.mesh_auto) { /* --mesh auto: the planner's mesh for the ranks the launcher started (none: one) */
    rt_comm_options co = {.timeout_s = t.comm_timeout};
    if (rt_comm_under_launcher() && !(comm = rt_comm_open(&co, err, sizeof err))) {
      ir_error_plain(d, "%s", err);
      goto done;
    }
    int ranks = comm ? rt_comm_size(comm) : 1;
    ir_dtype dt = t.s.dtype == 1 ? IR_DT_BF16 : t.s.dtype == 2 ? IR_DT_F16 : IR_DT_F32;
    if (tool_plan_auto_mesh(&o, t.cluster, t.cluster_file, ranks, t.s.micro_batches, dt, t.s.optimizer, !comm || rt_comm_rank(comm) == 0,
                            &t.pp_schedule, d) != 0)
      goto done;
    if (ranks == 1) rt_comm_close(comm), comm = NULL;
  }
  if (o.mesh_set && ir_mesh_ranks(&o.mesh) > 1) { /* many ranks: the communicator first (every rank opens it) */
    rt_comm_options co = {.timeout_s = t.comm_timeout};
    if ((!comm && !(comm = rt_comm_open(&co, err, sizeof err))) || rt_mesh_bind(comm, &o.mesh, NULL, err, sizeof err) != 0) {
      ir_error_plain(d, "%s", err);
      goto done;
    }
    int coord[IR_NUM_AXES];
    if (rt_mesh_bind(comm, &o.mesh, coord, err, sizeof err) != 0) {
      ir_error_plain(d, "%s", err);
      goto done;
    }
    o.mesh.stage = o.mesh.size[IR_AXIS_PP] > 1 ? coord[IR_AXIS_PP] : -1; /* this rank's pipeline stage */
    if (rt_comm_rank(comm) != 0) { /* rank 0 prints and logs */
      if (!freopen("/dev/null", "w", stdout)) {
        ir_error_plain(d, "rank %d: cannot silence stdout: %s", rt_comm_rank(comm), strerror(errno));
        goto done;
      }
      t.log = NULL;
    }
  }
  for (int k = 0; k < 2; k++) /* the old spellings, told once (rank 0) */
    if (t.notes[k][0] && (!comm || rt_comm_rank(comm) == 0)) ir_note(d, (ir_loc){0}, "%s", t.notes[k]);
  if (plan.root && !t.json) {
    char m[64];
    printf("plan %s: --mesh %s --zero %d --batch %lld --micro-batches %d --pipeline-schedule %s --checkpoint %s\n",
           plan.path, mesh_flag(plan.dp, plan.tp, plan.pp, plan.sp, m, sizeof m), o.zero, (long long)t.s.batch,
           t.s.micro_batches, pass_schedule_name((pass_schedule)t.pp_schedule), o.checkpoint);
  }
  if (t.n_stage_bounds && !(o.mesh_set && o.mesh.size[IR_AXIS_PP] > 1)) {
    ir_error_plain(d, "--stage-boundaries places the layers on pipeline stages: it needs pp > 1 (--mesh pp=P,...)");
    goto done;
  }
  if (!(g = tool_load(&o, d, &text))) goto done;
  pass_options po = {.diag = d, .verify_each = o.verify_each, .time_passes = o.time_passes, .verbose = o.verbose, .dump_after = o.after,
                     .dump_out = stdout, .dump_format = o.format, .checkpoint = o.checkpoint,
                     .disabled = o.pass_disabled, .zero = o.zero, .tp_search = !o.tp_megatron};
  { /* --tp-layout search: chosen on the graph tgc plan searches (tool_tp_layouts), so both choose alike */
    int sdt = t.s.dtype == 1 ? IR_DT_BF16 : t.s.dtype == 2 ? IR_DT_F16 : -1;
    bool dump = o.after && (strcmp(o.after, "shard") == 0 || strcmp(o.after, "all") == 0);
    if (tool_tp_layouts(&o, g, sdt, dump ? stdout : NULL, &tpl, d) != 0) goto done;
    po.tp_layouts = tpl;
  }
  /* the data decides where the targets are (token accuracy), then the program */
  if (rt_data_bind(ds, g, err, sizeof err) != 0) {
    ir_error_plain(d, "%s", err);
    goto done;
  }
  if ((t.s.eval_data || eval_only) && open_eval_source(&t, g, ds, &eval_ds, &eval_batches, d) != 0) goto done;
  int batch_dims[64];
  for (int i = 0; i < g->n_inputs && i < 64; i++) batch_dims[i] = rt_data_batch_dim(ds, i);
  pass_train_options to = {.opt = pass_optimizer_defaults((pass_optimizer_kind)t.s.optimizer),
                           .micro_batches = t.s.micro_batches,
                           .targets_input = rt_data_targets_input(ds),
                           .batch_dims = batch_dims,
                           .schedule = t.pp_schedule,
                           .chunks = t.pp_chunks,
                           .stage_boundaries = t.n_stage_bounds ? t.stage_bounds : NULL,
                           .n_stage_boundaries = t.n_stage_bounds,
                           .passes = &po,
                           .eval = t.s.eval_data || eval_only};
  to.opt.clip_norm = t.s.clip;
  to.opt.weight_decay = t.s.weight_decay;
  if (t.s.dtype) { /* mixed precision: f32 master weights, optimizer and gradient sums; f16 scales the loss */
    to.mixed_precision = true;
    to.compute_dtype = t.s.dtype == 1 ? IR_DT_BF16 : IR_DT_F16;
    to.loss_scaling = t.s.dtype == 2;
  }
  int model_params = g->n_params; /* the whole model's (a pipeline stage holds its share) */
  prog = pass_build_train(g, &to);
  g = NULL; /* the step graph now */
  if (!prog || tool_check_training_memory(prog, d) != 0) goto done;
  rt_train_config cfg = {.prog = prog, .backend = t.backend.backend, .device = t.backend.device, .data = ds,
                         .seed = t.s.seed, .comm = comm};
  if (comm && use_nccl(&t, rt_comm_rank(comm) == 0, d, &cfg.nccl) != 0) goto done;
  if (t.profile && !(prof = calloc(2, sizeof *prof))) {
    ir_error_plain(d, "out of memory");
    goto done;
  }
  if (prof) cfg.profile = &prof[0], cfg.update_profile = &prof[1];
  cfg.schedule = (rt_schedule){.kind = t.s.schedule, .lr = t.s.lr, .warmup = t.s.warmup, .total = t.s.steps, .floor = 0.1};
  if (!(tr = rt_trainer_new(&cfg, err, sizeof err))) {
    ir_error_plain(d, "%s", err);
    goto done;
  }
  if (check_sizes(prog->step, &t, ds, o.mesh_set ? o.mesh.size[IR_AXIS_DP] : 1, d) != 0) goto done;
  if (t.weights.path) {
    rt_weight_map *wm = NULL;
    if (t.weights.map && !(wm = rt_weight_map_read(t.weights.map, err, sizeof err))) {
      ir_error_plain(d, "--map: %s", err);
      goto done;
    }
    int wr = rt_trainer_load_weights(tr, t.weights.path, wm, err, sizeof err);
    rt_weight_map_free(wm);
    if (wr != 0) {
      ir_error_plain(d, "--weights: %s", err);
      goto done;
    }
  }
  if (state && rt_trainer_load(tr, state, t.resume, err, sizeof err) != 0) {
    ir_error_plain(d, "--resume: %s", err);
    goto done;
  }
  if (eval_only) { /* tgc eval: once, on the saved parameters */
    rt_eval_result ev;
    if (rt_trainer_eval(tr, ds, eval_batches, &ev, err, sizeof err) != 0) {
      ir_error_plain(d, "eval: %s", err);
      goto done;
    }
    if (t.json) {
      json_t *j = eval_json(&ev, rt_trainer_steps_done(tr));
      json_object_set_new(j, "data", json_string(t.s.data));
      json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
      fputc('\n', stdout);
      json_decref(j);
    } else {
      char head[1200];
      snprintf(head, sizeof head, "eval %s (step %lld) on %s", t.resume, (long long)rt_trainer_steps_done(tr), t.s.data);
      print_eval(stdout, head, &ev);
    }
    rc = 0;
    goto done;
  }
  if (t.log && !(log = fopen(t.log, rt_trainer_steps_done(tr) > 0 ? "a" : "w"))) {
    ir_error_plain(d, "--log %s: cannot write: %s", t.log, strerror(errno));
    goto done;
  }

  size_t predicted = rt_trainer_arena_bytes(tr, false); /* the step program's plan */
  bool seq = rt_data_is_sequence(ds);
  int64_t items = rt_data_batch_items(ds) * t.s.micro_batches;
  bool bar = isatty(STDERR_FILENO);
  FILE *lines = stdout;
  int64_t start = rt_trainer_steps_done(tr), end = t.s.steps;
  if (t.stop_at && t.stop_at < end) end = t.stop_at;
  int64_t every = t.print_every ? t.print_every : (t.s.steps >= 10 ? t.s.steps / 10 : 1);
  char share[96] = "";
  if (prog->n_params != model_params)
    snprintf(share, sizeof share, " (pipeline stage %d holds %d of them)", o.mesh.stage, prog->n_params);
  if (!t.json)
    fprintf(stdout, "training %s: %d parameter tensors%s, %s, %s, lr %g (%s%s), data %s, %s %lld per step%s\n", o.file,
            model_params, share,
            t.s.dtype == 1 ? "bf16 (mixed precision)" : t.s.dtype == 2 ? "f16 (mixed precision)" : "f32",
            pass_optimizer_name((pass_optimizer_kind)t.s.optimizer), t.s.lr,
            t.s.schedule == RT_SCHEDULE_COSINE ? "cosine" : "constant", t.s.warmup ? ", warmup" : "", t.s.data,
            seq ? "tokens" : "samples", (long long)items, start ? " (resumed)" : "");
  if (start >= t.s.steps && !t.json) fprintf(stdout, "already at step %lld of %lld\n", (long long)start, (long long)t.s.steps);
  struct sigaction sa = {0}, old_sa;
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, &old_sa);
  double t0 = ir_clock_s(), last_draw = 0;
  enum { WINDOW = 10 };
  double recent_loss[WINDOW] = {0}, recent_acc[WINDOW] = {0};
  int n_recent = 0;
  size_t peak = 0;
  rt_step_result r = {0};
  bool failed = false;
  int64_t last_saved = 0; /* the step of this run's last save */

  for (int64_t s = start; s < end && !interrupted; s++) {
    if (rt_trainer_step(tr, &r, err, sizeof err) != 0) {
      if (bar) fputc('\n', stderr);
      ir_error_plain(d, "step %lld: %s", (long long)(s + 1), err);
      failed = true;
      break;
    }
    if (r.peak_bytes > peak) peak = r.peak_bytes;
    recent_loss[n_recent % WINDOW] = r.loss;
    recent_acc[n_recent % WINDOW] = r.accuracy;
    n_recent++;
    double el = ir_clock_s() - t0;
    if (log) {
      fprintf(log, "{\"step\":%lld", (long long)r.step);
      json_num(log, "loss", r.loss);
      json_num(log, "lr", r.lr);
      if (r.accuracy >= 0) json_num(log, "accuracy", r.accuracy);
      if (r.loss_scale > 0) json_num(log, "loss_scale", r.loss_scale);
      if (r.skipped) fputs(",\"skipped\":true", log);
      json_num(log, "elapsed_s", el);
      fputs("}\n", log);
      if (log_failed(log, t.log, d)) {
        failed = true;
        break;
      }
    }
    double rate = (double)(r.step - start) / (el > 0 ? el : 1e-9);
    char eta[32], acc[80] = "";
    fmt_eta((double)(t.s.steps - r.step) / rate, eta, sizeof eta);
    if (r.accuracy >= 0) snprintf(acc, sizeof acc, "  acc %5.1f%%", 100 * r.accuracy);
    if (r.loss_scale > 0) { /* f16: the loss scale, and whether this step's update was skipped */
      size_t used = strlen(acc);
      snprintf(acc + used, sizeof acc - used, "  scale %g%s", r.loss_scale, r.skipped ? " (skipped)" : "");
    }
    if (bar && (el - last_draw > 0.1 || r.step == end)) {
      last_draw = el;
      int width = 24, filled = (int)(width * (double)r.step / (double)t.s.steps);
      char b[32];
      for (int k = 0; k < width; k++) b[k] = k < filled ? '#' : '.';
      b[width] = 0;
      fprintf(stderr, "\r[%s] %lld/%lld  loss %.4g%s  %.0f %s/s  ETA %s   ", b, (long long)r.step, (long long)t.s.steps,
              r.loss, acc, rate * (double)items, seq ? "tok" : "samples", eta);
      fflush(stderr);
    } else if (!bar && !t.json && (r.step % every == 0 || r.step == end)) {
      fprintf(lines, "step %lld/%lld  loss %.6g%s  lr %.3g  %.0f %s/s  ETA %s\n", (long long)r.step, (long long)t.s.steps,
              r.loss, acc, r.lr, rate * (double)items, seq ? "tokens" : "samples", eta);
      fflush(lines);
    }
    if (!isfinite(r.loss)) {
      if (bar) fputc('\n', stderr);
      ir_error_plain(d, "step %lld: the loss is %g; stopping (try a smaller --lr or --clip)", (long long)r.step, r.loss);
      failed = true;
      break;
    }
    if (eval_ds && ((t.s.eval_every_set && r.step % t.s.eval_every == 0) || r.step == end)) {
      rt_eval_result ev;
      if (rt_trainer_eval(tr, eval_ds, eval_batches, &ev, err, sizeof err) != 0) {
        if (bar) fputc('\n', stderr);
        ir_error_plain(d, "eval at step %lld: %s", (long long)r.step, err);
        failed = true;
        break;
      }
      if (have_eval) json_decref(last_eval);
      last_eval = eval_json(&ev, r.step);
      have_eval = true;
      char head[64];
      snprintf(head, sizeof head, "eval at step %lld", (long long)r.step);
      if (bar) fputc('\n', stderr);
      if (!t.json) print_eval(stdout, head, &ev);
      if (log) {
        fprintf(log, "{\"step\":%lld", (long long)r.step);
        json_num(log, "eval_loss", ev.loss);
        if (ev.accuracy >= 0) json_num(log, "eval_accuracy", ev.accuracy);
        if (ev.perplexity >= 0) json_num(log, "eval_perplexity", ev.perplexity);
        fprintf(log, ",\"eval_batches\":%lld}\n", (long long)ev.batches);
        if (log_failed(log, t.log, d)) {
          failed = true;
          break;
        }
      }
    }
    if (t.save && t.save_every && r.step % t.save_every == 0 && r.step != end) {
      if (save_state(tr, &t, t.save, d) != 0) {
        failed = true;
        break;
      }
      last_saved = r.step;
    }
  }
  sigaction(SIGINT, &old_sa, NULL);
  if (bar && end > start) fputc('\n', stderr);
  double elapsed = ir_clock_s() - t0;
  if (failed) {
    note_kept_state(t.save, last_saved, d);
    goto done;
  }
  if (interrupted && !t.json)
    fprintf(stdout, "interrupted at step %lld%s\n", (long long)rt_trainer_steps_done(tr),
            t.save ? "; saving the state" : "");
  if (t.save && save_state(tr, &t, t.save, d) != 0) goto done;

  int nw = n_recent < WINDOW ? n_recent : WINDOW;
  double mean_loss = 0, mean_acc = 0;
  for (int k = 0; k < nw; k++) mean_loss += recent_loss[k], mean_acc += recent_acc[k];
  if (nw) mean_loss /= nw, mean_acc /= nw;
  bool have_acc = nw && r.accuracy >= 0;
  int64_t done_steps = rt_trainer_steps_done(tr) - start;
  rt_comm_check ck;
  if (comm) rt_trainer_comm_check(tr, done_steps, &ck); /* every rank: what it moved beside what its graphs say */
  double sps = elapsed > 0 ? (double)done_steps / elapsed : 0;
  if (t.json) {
    json_t *j = json_object();
    json_object_set_new(j, "steps", json_integer(rt_trainer_steps_done(tr)));
    json_object_set_new(j, "steps_run", json_integer(done_steps));
    json_object_set_new(j, "final_loss", nw && isfinite(mean_loss) ? json_real(mean_loss) : json_null());
    json_object_set_new(j, "last_loss", nw && isfinite(r.loss) ? json_real(r.loss) : json_null());
    json_object_set_new(j, "accuracy", have_acc ? json_real(mean_acc) : json_null());
    json_object_set_new(j, "seconds", json_real(elapsed));
    json_object_set_new(j, "steps_per_s", json_real(sps));
    json_object_set_new(j, seq ? "tokens_per_s" : "samples_per_s", json_real(sps * (double)items));
    json_object_set_new(j, "predicted_peak_bytes", json_integer((json_int_t)predicted));
    json_object_set_new(j, "measured_peak_bytes", json_integer((json_int_t)peak));
    json_object_set_new(j, "interrupted", json_boolean(interrupted));
    if (eval_ds) json_object_set_new(j, "eval", have_eval ? json_incref(last_eval) : json_null());
    if (comm || plan.root) { /* what the run ran: the mesh and the plan's other settings */
      json_t *par = json_object();
      json_object_set_new(par, "plan", t.plan ? json_string(t.plan) : json_null());
      json_object_set_new(par, "mesh", json_pack("{s:i,s:i,s:i,s:b}", "dp", o.mesh.size[IR_AXIS_DP], "tp",
                                                 o.mesh.size[IR_AXIS_TP], "pp", o.mesh.size[IR_AXIS_PP], "sp", o.mesh.sp));
      json_object_set_new(par, "zero", json_integer(o.zero));
      json_object_set_new(par, "tp_layout", json_string(o.tp_megatron ? "megatron" : "search"));
      json_object_set_new(par, "pipeline_schedule", json_string(pass_schedule_name((pass_schedule)t.pp_schedule)));
      json_object_set_new(par, "checkpoint", json_string(o.checkpoint ? o.checkpoint : "none"));
      json_object_set_new(par, "batch", t.s.batch_set ? json_integer(t.s.batch) : json_null());
      json_object_set_new(par, "micro_batches", json_integer(t.s.micro_batches));
      json_object_set_new(j, "parallel", par);
    }
    if (comm) json_object_set_new(j, "comm", comm_json(rt_trainer_comm(tr), &ck));
    if (prog->fwd && done_steps > 0) json_object_set_new(j, "pipeline", pipeline_json(prog, tr));
    json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    fputc('\n', stdout);
    json_decref(j);
  } else if (nw) {
    char pb[32], mb[32];
    printf("done: %lld steps in %.2f s (%.1f steps/s, %.0f %s/s)\n", (long long)rt_trainer_steps_done(tr), elapsed, sps,
           sps * (double)items, seq ? "tokens" : "samples");
    printf("final loss %.6g (mean of the last %d steps; last %.6g)\n", mean_loss, nw, r.loss);
    if (have_acc) printf("%saccuracy %.2f%% (mean of the last %d steps)\n", seq ? "token " : "", 100 * mean_acc, nw);
    printf("peak activation memory: predicted %s, measured %s\n", fmt_bytes(predicted, pb, sizeof pb),
           fmt_bytes(peak, mb, sizeof mb));
    if (t.save) printf("saved %s\n", t.save);
    if (comm) print_comm(rt_trainer_comm(tr), &ck);
  }
  if (comm && done_steps > 0) { /* every rank: what it moved is what the graphs say it moves */
    if (!ck.equal) {
      ir_error_plain(d, "internal error: rank %d moved other bytes than its graphs predict (see --json's \"comm\")",
                     rt_comm_rank(comm));
      goto done;
    }
  }
  if (prog->fwd && done_steps > 0) { /* every rank: it kept in flight what the planner's simulation says */
    json_t *pj = pipeline_json(prog, tr);
    bool same = json_is_true(json_object_get(pj, "planned_equals_measured"));
    if (same && !json_is_true(json_object_get(pj, "reserved_equals_planned"))) /* the arena's placement fell short */
      fprintf(stderr,
              "tgc train: note: pipeline stage %d reserved %" JSON_INTEGER_FORMAT " bytes for the activations in "
              "flight, more than the %" JSON_INTEGER_FORMAT " the plan's peak needs\n",
              prog->stage, json_integer_value(json_object_get(pj, "reserved_bytes")),
              json_integer_value(json_object_get(pj, "planned_in_flight_bytes")));
    json_decref(pj);
    if (!same) {
      ir_error_plain(d, "internal error: pipeline stage %d kept other activations in flight than the planner's "
                     "simulation says (see --json's \"pipeline\")", prog->stage);
      goto done;
    }
  }
  if (prof) {
    int64_t runs = rt_trainer_steps_done(tr) - start;
    tool_print_profile(stderr, &prof[0], "training graph (forward + backward)", runs * t.s.micro_batches);
    tool_print_profile(stderr, &prof[1], "optimizer update", runs);
  }
  rc = 0;
done:
  if (log && fclose(log) != 0 && rc == 0) {
    ir_error_plain(d, "--log %s: cannot write: %s", t.log, strerror(errno));
    rc = 1;
  }
  free(prof);
  rt_data_free(eval_ds);
  json_decref(last_eval);
  rt_trainer_free(tr);
  rt_comm_close(comm);
  tool_plan_free(&plan);
  rt_data_free(ds);
  rt_safetensors_free(state);
  pass_tp_layouts_free(tpl);
  pass_training_free(prog);
  ir_graph_free(g);
  free(text);
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
