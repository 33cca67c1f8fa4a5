/* tools/tgc.c — the tgc command: the table of subcommands (name, function,
 * one line of help: dispatch, `tgc --help` and the unknown-command message
 * all read it), the options every compiling command shares, and the small
 * commands (check, dump); the others live in cmd_*.c.
 * Every user-facing failure prints "tgc: error: ..." or
 * "file:line:col: error: ..." and exits with status 1. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#include <unistd.h>

#include "comm.h"
#include "tool.h"

const char *const tool_common_help =
    "model options:\n"
    "  -D NAME=VALUE        override a config constant (repeatable), e.g. -D D=512\n"
    "  --config NAME        use the named config set of the file (default: 'default', else the first)\n"
    "  --entry NAME         the function to compile (default: 'main', else the last one)\n"
    "pass options:\n"
    "  --dump-after PASS    print the IR after PASS (or 'all') to stdout\n"
    "  --verify-each        run the IR verifier after every pass\n"
    "  --time-passes        print the time and node count of every pass to stderr\n"
    "  -v, --verbose        notes on what the passes left undone and why: every softmax\n"
    "                       fuse-attention did not fuse (the operand that broke the pattern)\n"
    "  --disable-pass PASS  leave PASS out of the pipeline (repeatable), e.g. fuse-attention\n"
    "  --no-fuse            leave every fusion pass (fuse-*) out\n"
    "  --checkpoint POLICY  activation checkpointing for graphs with a backward pass:\n"
    "                       none (default), block (or full), selective, sqrt, budget=BYTES\n"
    "parallel options (docs/sharding.md):\n"
    "  --mesh AXES          the device mesh, e.g. dp=2,tp=2,pp=2 (axes pp, dp, tp, each optional,\n"
    "                       default 1; ',sp' adds sequence parallelism on tp: tp=2,sp; the same\n"
    "                       syntax in plan, train, stats and dump); the shard pass partitions the graph\n"
    "                       over it, and a run needs that many ranks (mpirun -np N)\n"
    "  --stage S            with pp > 1: the pipeline stage whose program dump and stats\n"
    "                       show (default 0; run and train: each rank's own)\n"
    "  --zero N             ZeRO stage 0-3 over dp: 1 shards the optimizer state, 2 also\n"
    "                       the gradients, 3 also the parameters (default 0)\n"
    "  --bucket-mb M        with dp (one micro-batch, no tp or pp): the step all-reduces (ZeRO 1-2:\n"
    "                       reduce-scatters) its gradients in buckets of M MiB as the backward makes\n"
    "                       them (default 25, DDP's bucket_cap_mb); with NCCL each bucket is one\n"
    "                       ncclGroupStart/End on its own stream, overlapping the rest of the backward\n"
    "  --tp-layout L        how each parameter is laid out over tp: search (the default: each\n"
    "                       parameter's layout chosen by the modelled cost of the sharded program;\n"
    "                       the dump after shard says why, beside the runner-up) or megatron\n"
    "                       (Megatron-LM's column / row rule). tgc plan models the one given; its\n"
    "                       plan file and command carry it\n";

static const char *const check_help =
    "usage: tgc check FILE [options]\n"
    "\n"
    "Parses FILE, elaborates it (names, config constants, repeat, shapes) and\n"
    "verifies the IR. Prints nothing and exits 0 when all is well; otherwise\n"
    "prints every diagnostic as 'file:line:col: error: ...' with the source\n"
    "line and a caret, and exits 1.\n"
    "\n";

static const char *const dump_help =
    "usage: tgc dump FILE [--train] [--after PASS|memplan|all] [--plan] [--format text|dot|json] [-o OUT]\n"
    "                [options]\n"
    "\n"
    "Prints the IR of FILE. Without --after, the IR right after elaboration;\n"
    "with --after PASS, the IR after that pass of the pipeline (canonicalize);\n"
    "with --after memplan, the IR after the whole pipeline and its memory plan:\n"
    "every result's place (arena offset, or the input/param buffer it is\n"
    "computed in), size, lifetime, views and in-place results; with --after all,\n"
    "after elaboration, after every pass, then the plan.\n"
    "\n"
    "With --train, the training program 'tgc train' runs, built as it builds it\n"
    "(adam, one micro-batch, no token accuracy): the training step (forward,\n"
    "the gradients d_PARAM of the loss, the sums; with --checkpoint POLICY the\n"
    "recomputed forward values) and then the optimizer update. With --after PASS\n"
    "the step after that pass (autodiff: the backward is there, checkpoint: the\n"
    "recomputation), then the finished update; --after all: the step after every\n"
    "pass, then both finished graphs.\n"
    "\n"
    "  --train              the training step and the optimizer update, not the forward\n"
    "  --after PASS|memplan|all  which point of the pipeline to print\n"
    "  --plan               the memory plan alone (text; --format json: {\"plan\": ...})\n"
    "  --format FORMAT      text (default; reads back with any tgc command), dot (Graphviz:\n"
    "                       'tgc dump m.tg --format dot | dot -Tpng -o m.png'), json\n"
    "  -o OUT               write to OUT instead of stdout\n"
    "\n";

static int usage_error(ir_diag *d, const char *cmd, const char *fmt, const char *arg) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, arg);
  ir_error_plain(d, "%s (see 'tgc %s --help')", msg, cmd);
  return 1;
}

/* Parses `tgc CMD FILE [common options] [extra]`; extra flags are handled by
 * the callback. Returns 0, or 1 after reporting. */
static int parse_compile_args(const char *cmd, int argc, char **argv, tool_compile_opts *o,
                              const char **out_path, bool *plan, bool *train, ir_diag *d) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = tool_parse_common(o, argc, argv, &i, d);
    if (r < 0) return 1;
    if (r > 0) continue;
    if (plan && strcmp(a, "--plan") == 0) {
      *plan = true;
      continue;
    }
    if (train && strcmp(a, "--train") == 0) {
      *train = true;
      continue;
    }
    if (out_path && (strcmp(a, "-o") == 0 || strncmp(a, "--output=", 9) == 0)) {
      if (a[1] == 'o') {
        if (i + 1 >= argc) return usage_error(d, cmd, "%s needs a file name", "-o");
        *out_path = argv[++i];
      } else {
        *out_path = a + 9;
      }
      continue;
    }
    if (a[0] == '-' && a[1]) return usage_error(d, cmd, "unknown option '%s'", a);
    if (o->file) return usage_error(d, cmd, "unexpected argument '%s' (one FILE at a time)", a);
    o->file = a;
  }
  if (!o->file) return usage_error(d, cmd, "%s: missing FILE", cmd);
  return 0;
}

static bool wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return true;
  return false;
}

static int cmd_check(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    printf("%s%s", check_help, tool_common_help);
    return 0;
  }
  ir_diag *d = tool_diag_new();
  tool_compile_opts o = {0};
  int rc = parse_compile_args("check", argc, argv, &o, NULL, NULL, NULL, d);
  char *text = NULL;
  if (rc == 0) {
    ir_graph *g = tool_load(&o, d, &text);
    if (!g) rc = 1;
    else if (tool_run_passes(g, &o, d, stdout) != 0) rc = 1;
    ir_graph_free(g);
  }
  free(text);
  ir_diag_free(d);
  return rc;
}

static void print_graph(FILE *out, const ir_graph *g, int format, const char *title) {
  if (title && format == 0) fprintf(out, "# %s\n", title);
  if (title && format == 1) fprintf(out, "// %s\n", title);
  if (format == 0) ir_print(out, g);
  else if (format == 1) ir_print_dot(out, g);
  else ir_print_json(out, g);
}

/* tgc dump --train: the training program as `tgc train` builds it
 * (pass_build_train, adam, one micro-batch, no token accuracy: that needs
 * the data's targets). --after PASS dumps the step inside the pipeline;
 * the finished update follows (its pipeline dumps nothing); without
 * --after, or with all, both finished graphs. Consumes g. */
static int dump_train(ir_graph *g, const tool_compile_opts *o, FILE *out, ir_diag *d) {
  bool all = o->after && strcmp(o->after, "all") == 0;
  if (all && o->format == 0) fprintf(out, "# IR after elaboration (the model)\n");
  if (all) print_graph(out, g, o->format, NULL);
  pass_options po = {.diag = d, .verify_each = o->verify_each, .time_passes = o->time_passes, .verbose = o->verbose, .dump_after = o->after,
                     .dump_out = out, .dump_format = o->format, .checkpoint = o->checkpoint,
                     .disabled = o->pass_disabled, .zero = o->zero, .bucket_bytes = o->bucket_bytes, .tp_search = !o->tp_megatron};
  pass_train_options to = {.opt = pass_optimizer_defaults(PASS_OPT_ADAM), .micro_batches = 1, .targets_input = -1,
                           .passes = &po};
  pass_training *prog = pass_build_train(g, &to);
  if (!prog) return 1;
  if (!o->after || all)
    print_graph(out, prog->step, o->format, "the training step (forward, gradients d_*, recompute)");
  print_graph(out, prog->update, o->format, "the optimizer update (adam)");
  pass_training_free(prog);
  return 0;
}

static int cmd_dump(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    printf("%s%s", dump_help, tool_common_help);
    return 0;
  }
  ir_diag *d = tool_diag_new();
  tool_compile_opts o = {0};
  const char *out_path = NULL;
  bool plan = false;
  bool train = false;
  int rc = parse_compile_args("dump", argc, argv, &o, &out_path, &plan, &train, d);
  if (rc == 0 && train && (plan || (o.after && strcmp(o.after, "memplan") == 0)))
    rc = usage_error(d, "dump", "%s: the memory plan is the forward graph's (leave out --train)",
                     plan ? "--plan" : "--after memplan");
  char *text = NULL;
  FILE *out = stdout;
  if (rc == 0 && out_path && !(out = fopen(out_path, "w"))) {
    ir_error_plain(d, "cannot write '%s': %s", out_path, strerror(errno));
    rc = 1;
    out = stdout;
  }
  if (rc == 0) {
    ir_graph *g = tool_load(&o, d, &text);
    if (!g) rc = 1;
    else if (train) rc = dump_train(g, &o, out, d);
    else {
      bool before = !plan && (!o.after || strcmp(o.after, "all") == 0);
      if (plan) { /* the plan alone, after the whole pipeline */
        tool_compile_opts quiet = o;
        quiet.after = NULL;
        if (tool_run_passes(g, &quiet, d, out) != 0 || tool_print_plan(out, g, o.format, false, d) != 0) rc = 1;
      }
      if (before) print_graph(out, g, o.format, o.after ? "IR after elaboration" : NULL);
      if (!plan && o.after && tool_run_passes(g, &o, d, out) != 0) rc = 1;
      ir_graph_free(g);
    }
  }
  if (out != stdout) {
    bool failed = fflush(out) != 0 || ferror(out);
    int e = errno;
    if ((fclose(out) != 0 || failed) && rc == 0) {
      ir_error_plain(d, "cannot write '%s': %s", out_path, strerror(failed ? e : errno));
      rc = 1;
    }
  }
  free(text);
  ir_diag_free(d);
  return rc;
}

/* libgomp reads OMP_WAIT_POLICY once, when it is loaded, before main. Its
 * default (spin, then sleep) makes idle workers fight other
 * processes for the cores of a small shared machine: measured 2.1 vs 6.2
 * training steps/s on 2 loaded cores. So unless the user chose a policy, tgc
 * restarts itself once with OMP_WAIT_POLICY=passive. */
static void prefer_passive_openmp(char **argv) {
  if (getenv("OMP_WAIT_POLICY")) return;
  /* Only when /proc/self/exe is this program: under valgrind or another
   * loader it is the tool's binary, and restarting that would fail. */
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return;
  exe[n] = 0;
  const char *exe_base = strrchr(exe, '/'), *arg_base = strrchr(argv[0], '/');
  exe_base = exe_base ? exe_base + 1 : exe;
  arg_base = arg_base ? arg_base + 1 : argv[0];
  if (strcmp(exe_base, arg_base) != 0) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv(exe, argv);
  unsetenv("OMP_WAIT_POLICY"); /* exec failed: carry on with the default policy */
}

/* Under an MPI launcher (mpirun, srun) several ranks of one node share its
 * cores: unless the user set OMP_NUM_THREADS, each rank takes its share of
 * the cores it may run on, instead of every rank starting a thread per
 * core. (The re-exec above happens once per rank, before anything else:
 * the launcher sees the same process.) */
static void share_cores_between_ranks(void) {
  if (getenv("OMP_NUM_THREADS")) return;
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local) local = getenv("MPI_LOCALNRANKS"); /* MPICH's hydra */
  if (!local) local = getenv("SLURM_NTASKS_PER_NODE");
  long ranks = local ? strtol(local, NULL, 10) : 0;
  if (ranks <= 1) return;
  long threads = omp_get_num_procs() / ranks;
  omp_set_num_threads(threads >= 1 ? (int)threads : 1);
}

/* Everything a command printed must have reached its destination: a full
 * disk or a closed file behind stdout is an error (exit 1) naming where the
 * output went, never a silent success. */
static int finish_stdout(int rc) {
  bool failed = ferror(stdout);
  errno = 0;
  if (fflush(stdout) != 0) failed = true;
  if (!failed) return rc;
  int e = errno;
  char where[4096];
  ssize_t n = readlink("/proc/self/fd/1", where, sizeof where - 1);
  if (n > 0) where[n] = 0;
  fprintf(stderr, "tgc: error: cannot write the output%s%s: %s\n", n > 0 ? " to " : "", n > 0 ? where : "",
          e ? strerror(e) : "a write failed");
  return 1;
}

/* The subcommands, in the order `tgc --help` lists them: the one place a
 * command is named (dispatch, the help, the unknown-command message). */
typedef struct {
  const char *name;
  int (*run)(int argc, char **argv); /* argv[0] is the command's name */
  const char *help;                  /* one line for `tgc --help` */
  const char *args;                  /* what it takes, for `tgc --help` (NULL: FILE) */
} tool_command;
static const tool_command commands[] = {
    {"check", cmd_check, "parse, elaborate and verify; print nothing and exit 0 if all is well", NULL},
    {"dump", cmd_dump, "print the IR (after elaboration, or after a pass) as text, DOT or JSON", NULL},
    {"run", tool_cmd_run, "compile and run (on the CPU, or --backend cuda / cuda-emu); print the outputs", NULL},
    {"grad", tool_cmd_grad, "gradients (reverse mode) or tangents (forward mode) of a model", NULL},
    {"gradcheck", tool_cmd_gradcheck, "compare both autodiff modes with finite differences in f64", NULL},
    {"train", tool_cmd_train, "train a model: optimizer, data, progress, safe checkpoints", NULL},
    {"eval", tool_cmd_eval, "evaluate a saved training state on held-out data: loss, accuracy, perplexity", NULL},
    {"stats", tool_cmd_stats, "what a model costs: parameters, FLOPs, memory", NULL},
    {"plan", tool_cmd_plan, "the parallel plan of a training step for a cluster, simulated and explained", NULL},
    {"compile", tool_cmd_compile, "lower to CUDA C and cuBLASLt calls, compile with NVRTC: .cu, PTX, manifest", NULL},
    {"generate", tool_cmd_generate, "sample text from a language model (a training state or the seed)", NULL},
    {"tokenize", tool_cmd_tokenize, "text to token ids (or back) with a tokenizer.json (WordPiece, byte-level BPE)",
     "TEXT"},
    {"export-weights", tool_cmd_export_weights, "a trained state's parameters as plain safetensors under a name map",
     NULL},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void print_main_help(FILE *out) {
  fputs("tgc " TGC_VERSION " - a compiler for machine-learning models\n"
        "\n"
        "usage: tgc COMMAND FILE [options]\n"
        "\n"
        "FILE is a model description (.tg) or textual IR (.ir, as printed by 'tgc dump').\n"
        "\n"
        "commands:\n",
        out);
  for (int i = 0; i < N_COMMANDS; i++) {
    char usage[32];
    snprintf(usage, sizeof usage, "%s %s", commands[i].name, commands[i].args ? commands[i].args : "FILE");
    fprintf(out, "  %-14s %s\n", usage, commands[i].help);
  }
  fputs("\n"
        "options:\n"
        "  -h, --help     this help ('tgc COMMAND --help' for a command's own)\n"
        "  --version      print the version\n"
        "\n"
        "environment:\n"
        "  TGC_MEMORY_BYTES   the memory a run may count on, in bytes (default: this machine's,\n"
        "                     or ulimit -v when smaller); every command that allocates checks\n"
        "                     its memory plans against 80% of it first (a rank: its share)\n"
        "  TGC_CACHE_DIR      where compiled CUDA programs are cached (default ~/.cache/tgc)\n"
        "  TGC_COMPILE_THREADS  threads that compile a CUDA program's parts at once (default:\n"
        "                     the online CPUs, at most 16)\n"
        "  TGC_CUDA_LIB_PATH  where libcuda, libnvrtc and libcublasLt are looked for\n"
        "  TGC_MPI_LIB        the MPI library to load (default libmpi.so.40; docs/comm.md)\n"
        "  TGC_EMU_*          the cuda-emu backend's emulated device (docs/cuda.md)\n"
        "\n"
        "Exit status: 0 on success, 1 on any error (diagnostics go to stderr).\n"
        "Documentation: docs/language.md (the .tg language), docs/ir.md (the IR).\n",
        out);
}

static int dispatch(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    if (argc >= 3 && strcmp(argv[1], "help") == 0) {
      static char help_flag[] = "--help";
      static char *h[4];
      h[0] = argv[0], h[1] = argv[2], h[2] = help_flag, h[3] = NULL;
      argv = h;
      argc = 3;
    } else {
      print_main_help(argc < 2 ? stderr : stdout);
      return argc < 2 ? 1 : 0;
    }
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("tgc %s\n", TGC_VERSION);
    return 0;
  }
  const char *cmd = argv[1];
  for (int i = 0; i < N_COMMANDS; i++)
    if (strcmp(cmd, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
  char names[256] = "";
  for (int i = 0; i < N_COMMANDS; i++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", commands[i].name);
  fprintf(stderr, "tgc: error: unknown command '%s' (commands: %s; see 'tgc --help')\n", cmd, names);
  return 1;
}

/* A failing rank other than 0 under a launcher printed nothing of what every
 * rank met (tool_diag_new): it lingers a moment before it exits, since
 * mpirun ends the whole job at the first non-zero exit, and rank 0 must not
 * be killed before its message is out. */
static int linger_if_quiet_rank(int rc) {
  if (rc != 0 && rt_comm_under_launcher() && rt_comm_launcher_rank() != 0)
    nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000}, NULL);
  return rc;
}

int main(int argc, char **argv) {
  prefer_passive_openmp(argv);
  share_cores_between_ranks();
  return linger_if_quiet_rank(finish_stdout(dispatch(argc, argv)));
}
