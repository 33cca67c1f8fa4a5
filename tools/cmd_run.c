/* tools/cmd_run.c — `tgc run`: compile a model, bind its inputs (numbers,
 * lists, .npy files or seeded random), initialize its parameters from the
 * seed or read them (--weights, through a name map), run it on the CPU
 * backend, and print the outputs (text or one JSON
 * object) and optionally save them as .npy. Binding and printing live in
 * bind.c (shared with `tgc grad`); a run on a mesh of MPI ranks (--mesh
 * under mpirun) in run_mesh.c. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <omp.h>

#include "ir_die.h"
#include "tool.h"

static const char *const run_help =
    "usage: tgc run FILE [--input NAME=VALUE|NAME=@x.npy|NAME=random]... [--seed N]\n"
    "               [-D NAME=VALUE] [--config NAME] [--weights PATH [--map MAP]] [--text TEXT]\n"
    "               [--out-dir DIR] [--json] [options]\n"
    "       mpirun -np N tgc run FILE --mesh dp=D,tp=T,pp=P[,sp] [--zero Z] [same options]\n"
    "\n"
    "Compiles FILE, runs it (on the CPU unless --backend says otherwise) and prints its outputs.\n"
    "\n"
    "  --input NAME=VALUE   a number (fills the whole tensor), or a list '1,2,3' / '[1, 2, 3]'\n"
    "                       of exactly as many values as the input has elements (row-major)\n"
    "  --input NAME=@F.npy  read the input from a .npy file (shape must match; float files\n"
    "                       convert to the input's float dtype, integer files to its integer dtype)\n"
    "  --input NAME=random  seeded random: floats ~ N(0, 1); integers uniform in [0, n) where n\n"
    "                       is the vocabulary/classes the input indexes (10 if it indexes nothing)\n"
    "                       Inputs not given are random, with a note on stderr.\n"
    "  --seed N             seed for random inputs and parameter initialization (default 0)\n"
    "  --text TEXT          the input 'tokens' from TEXT's ids ([1, n], and the config's T = n;\n"
    "                       'types' 0 and 'mask' 1 when the model has them), by --tokenizer FILE\n"
    "                       or the tokenizer.json of --weights DIR (truncated to DIR's\n"
    "                       sentence_bert_config.json max_seq_length, when there is one,\n"
    "                       as sentence-transformers does)\n"
    "  --out-dir DIR        also write every output to DIR/NAME.npy (DIR is created)\n"
    "  --json               print one JSON object:\n"
    "                       {\"outputs\": {NAME: number | {\"dtype\", \"shape\", \"data\" | \"summary\"}},\n"
    "                        \"stats\": {\"kernels\", \"peak_bytes\" (the arena), \"threads\"}}\n"
    "                       (tensors of more than 4096 elements get a summary: min, max, mean, sum)\n"
    "  --profile            time every kernel; print where the time went, by op, to stderr\n"
    "  --print-actions      print the program every backend walks, one action per line, to\n"
    "                       stderr before running: fills (zeroing a result), kernels and\n"
    "                       collectives, with the memory plan's step of each\n";

static const char *const run_mesh_help =
    "\n"
    "many ranks (docs/sharding.md, \"tgc run on a mesh\"):\n"
    "  mpirun -np N tgc run FILE --mesh dp=D,tp=T,pp=P[,sp] [--zero Z] ...   N = D x T x P\n"
    "                       ranks, on the CPU; each runs its block of the sharded graph (its\n"
    "                       pipeline stage's) with the same inputs and parameters as one device\n"
    "                       (each rank takes its block); every output comes back whole to rank 0,\n"
    "                       which prints exactly what one device prints (--json, --out-dir too);\n"
    "                       the other ranks print nothing. Without a launcher, or with another\n"
    "                       number of ranks than the mesh's, it stops with an error\n";

extern const char *const tool_common_help;

/* DIR/NAME.npy with characters outside [A-Za-z0-9_.-] replaced by '_'. */
static int save_output(const char *dir, const char *name, const rt_tensor *t, ir_diag *d) {
  size_t n = strlen(dir) + strlen(name) + 8;
  char *path = malloc(n);
  if (!path) IR_DIE("out of memory (path)");
  int k = snprintf(path, n, "%s/", dir);
  for (const char *p = name; *p; p++) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || (c == '.' && p != name);
    path[k++] = ok ? c : '_';
  }
  strcpy(path + k, ".npy");
  char err[512];
  int rc = rt_npy_write(path, t, err, sizeof err);
  if (rc != 0) ir_error_plain(d, "%s", err);
  free(path);
  return rc;
}

/* The flags of tgc run. */
typedef struct {
  tool_compile_opts o;
  tool_input_spec *specs;
  int n_specs;
  uint64_t seed;
  const char *out_dir;     /* --out-dir */
  tool_backend backend;
  bool json, profile, print_actions;
  tool_weights weights;    /* --weights [--map] */
  tool_text text;          /* --text / --tokenizer */
} run_args;

static int parse_run_args(int argc, char **argv, run_args *a, ir_diag *d) {
  if (!(a->specs = calloc((size_t)argc + 3, sizeof *a->specs))) IR_DIE("out of memory (specs)");
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = NULL;
    int r = tool_parse_common(&a->o, argc, argv, &i, d);
    if (r == 0) r = tool_parse_input_flag(argc, argv, &i, a->specs, &a->n_specs, &a->seed, d);
    if (r == 0) r = tool_parse_weights_flag(argc, argv, &i, &a->weights, d);
    if (r == 0) r = tool_parse_text_flag(argc, argv, &i, &a->text, d);
    if (r == 0) r = tool_parse_backend(argc, argv, &i, &a->backend, d);
    if (r < 0) return -1;
    if (r != 0) continue;
    if (tool_flag("--out-dir", argc, argv, &i, &val)) {
      if (!val || !*val) {
        ir_error_plain(d, "--out-dir needs a directory");
        return -1;
      }
      a->out_dir = val;
    } else if (strcmp(arg, "--json") == 0) {
      a->json = true;
    } else if (strcmp(arg, "--profile") == 0) {
      a->profile = true;
    } else if (strcmp(arg, "--print-actions") == 0) {
      a->print_actions = true;
    } else if (tool_positional("run", arg, &a->o, d) != 0) {
      return -1;
    }
  }
  if (tool_need_file("run", &a->o, d) != 0) return -1;
  a->weights.model = a->o.file;
  return tool_text_prepare(&a->text, &a->weights, &a->o, d);
}

/* --out-dir DIR: every output as DIR/NAME.npy. */
static int save_outputs(const char *dir, const ir_graph *g, rt_tensor *const *outputs, ir_diag *d) {
  struct stat st;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    ir_error_plain(d, "--out-dir %s: cannot create the directory: %s", dir, strerror(errno));
    return -1;
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    ir_error_plain(d, "--out-dir %s: not a directory", dir);
    return -1;
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (save_output(dir, g->outputs[i].name, outputs[i], d) != 0) return -1;
  return 0;
}

static void print_run_json(const ir_graph *g, rt_tensor *const *outputs, const rt_stats *stats) {
  json_t *root = json_object(), *outs = json_object();
  for (int i = 0; i < g->n_outputs; i++) json_object_set_new(outs, g->outputs[i].name, tool_tensor_json(outputs[i]));
  json_object_set_new(root, "outputs", outs);
  json_t *st = json_object();
  json_object_set_new(st, "kernels", json_integer(stats->kernels_run));
  json_object_set_new(st, "peak_bytes", json_integer((json_int_t)stats->peak_bytes));
  json_object_set_new(st, "threads", json_integer(omp_get_max_threads()));
  json_object_set_new(root, "stats", st);
  json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  fputc('\n', stdout);
  json_decref(root);
}

int tool_cmd_run(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s%s%s\n%s", run_help, tool_weights_help, tool_backend_help, run_mesh_help, tool_common_help);
      return 0;
    }
  ir_diag *d = tool_diag_new();
  run_args a = {0};
  rt_profile prof = {0};
  char *text = NULL;
  ir_graph *g = NULL;
  tool_mesh_run mr = {0}; /* --mesh of more than one rank */
  int rc = parse_run_args(argc, argv, &a, d);
  tool_compile_opts *o = &a.o;
  if (rc == 0 && o->mesh_set && ir_mesh_ranks(&o->mesh) > 1 && tool_mesh_run_open(&mr, o, &a.backend, d) != 0) rc = -1;
  ir_diag *ed = mr.diag ? mr.diag : d; /* ranks other than 0 print nothing */
  if (rc == 0 && !(g = tool_load(o, ed, &text))) rc = -1;
  if (rc == 0 && tool_run_passes(g, o, ed, stdout) != 0) rc = -1;
  if (rc == 0 && mr.comm && tool_mesh_run_compile_whole(&mr, o) != 0) rc = -1;
  ir_graph *gw = mr.whole ? mr.whole : g; /* the graph whose values are bound and printed: one device's */
  if (rc == 0) tool_text_specs(&a.text, gw, a.specs, &a.n_specs);
  if (rc == 0 && tool_check_input_specs(gw, a.specs, a.n_specs, ed) != 0) rc = -1;
  if (rc == 0 && tool_check_memory(gw, ed) != 0) rc = -1;
  tool_slots slots = {0};
  if (gw) tool_alloc_slots(gw, &slots);
  if (rc == 0 && tool_bind_all(gw, a.specs, a.n_specs, a.seed, a.json || mr.quiet, slots.inputs, slots.params, ed) != 0)
    rc = -1;
  if (rc == 0 && tool_bind_weights(gw, &a.weights, slots.params, ed) != 0) rc = -1;
  rt_stats stats = {.profile = a.profile ? &prof : NULL, .print_actions = a.print_actions && !mr.quiet ? stderr : NULL};
  if (rc == 0 && !mr.comm && tool_execute(&a.backend, g, slots.inputs, slots.params, slots.outputs, &stats, d) != 0)
    rc = -1;
  if (rc == 0 && mr.comm && tool_mesh_run_execute(&mr, g, slots.inputs, slots.params, slots.outputs, &stats, d) != 0)
    rc = -1;
  if (rc == 0 && a.profile && !mr.quiet) tool_print_profile(stderr, &prof, o->file, 1);
  if (rc == 0 && a.out_dir && !mr.quiet && save_outputs(a.out_dir, gw, slots.outputs, d) != 0) rc = -1; /* rank 0 writes */
  if (rc == 0 && !mr.quiet) {
    if (a.json) print_run_json(gw, slots.outputs, &stats);
    else
      for (int i = 0; i < gw->n_outputs; i++) tool_print_tensor(stdout, gw->outputs[i].name, slots.outputs[i]);
  }
  tool_free_slots(gw, &slots);
  tool_mesh_run_close(&mr);
  ir_graph_free(g);
  free(text);
  free(a.specs);
  free(a.text.ids);
  ir_diag_free(d);
  return rc == 0 ? 0 : 1;
}
