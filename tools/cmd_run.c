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

int tool_cmd_run(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s%s%s\n%s", run_help, tool_weights_help, tool_backend_help, run_mesh_help, tool_common_help);
      return 0;
    }
  ir_diag *d = tool_diag_new();
  tool_compile_opts o = {0};
  tool_input_spec *specs = calloc((size_t)argc + 3, sizeof *specs);
  if (!specs) IR_DIE("out of memory (specs)");
  int n_specs = 0, rc = 0;
  uint64_t seed = 0;
  const char *out_dir = NULL;
  tool_backend backend = {0};
  bool json = false, profile = false, print_actions = false;
  rt_profile prof = {0};
  tool_weights weights = {0};
  tool_text text_in = {0};
  for (int i = 1; i < argc && rc == 0; i++) {
    const char *a = argv[i];
    int r = tool_parse_common(&o, argc, argv, &i, d);
    if (r == 0) r = tool_parse_input_flag(argc, argv, &i, specs, &n_specs, &seed, d);
    if (r < 0) rc = 1;
    if (r != 0) continue;
    const char *val = NULL;
    if (tool_flag("--out-dir", argc, argv, &i, &val)) {
      if (!val || !*val) {
        ir_error_plain(d, "--out-dir needs a directory");
        rc = 1;
      }
      out_dir = val;
    } else if ((r = tool_parse_weights_flag(argc, argv, &i, &weights, d)) != 0) {
      if (r < 0) rc = 1;
    } else if ((r = tool_parse_text_flag(argc, argv, &i, &text_in, d)) != 0) {
      if (r < 0) rc = 1;
    } else if ((r = tool_parse_backend(argc, argv, &i, &backend, d)) != 0) {
      if (r < 0) rc = 1;
    } else if (strcmp(a, "--json") == 0) {
      json = true;
    } else if (strcmp(a, "--profile") == 0) {
      profile = true;
    } else if (strcmp(a, "--print-actions") == 0) {
      print_actions = true;
    } else if (tool_positional("run", a, &o, d) != 0) {
      rc = 1;
    }
  }
  if (rc == 0 && tool_need_file("run", &o, d) != 0) rc = 1;
  weights.model = o.file;
  if (rc == 0 && tool_text_prepare(&text_in, &weights, &o, d) != 0) rc = 1;
  char *text = NULL;
  ir_graph *g = NULL;
  tool_mesh_run mr = {0}; /* --mesh of more than one rank */
  if (rc == 0 && o.mesh_set && ir_mesh_ranks(&o.mesh) > 1 && tool_mesh_run_open(&mr, &o, &backend, d) != 0) rc = 1;
  if (rc == 0 && !(g = tool_load(&o, mr.diag ? mr.diag : d, &text))) rc = 1;
  if (rc == 0 && tool_run_passes(g, &o, mr.diag ? mr.diag : d, stdout) != 0) rc = 1;
  if (rc == 0 && mr.comm && tool_mesh_run_compile_whole(&mr, &o) != 0) rc = 1;
  ir_graph *gw = mr.whole ? mr.whole : g; /* the graph whose values are bound and printed: one device's */
  if (rc == 0) tool_text_specs(&text_in, gw, specs, &n_specs);
  if (rc == 0 && tool_check_input_specs(gw, specs, n_specs, mr.diag ? mr.diag : d) != 0) rc = 1;
  if (rc == 0 && tool_check_memory(gw, mr.diag ? mr.diag : d) != 0) rc = 1;
  tool_slots slots = {0};
  if (gw) tool_alloc_slots(gw, &slots);
  rt_tensor **inputs = slots.inputs, **params = slots.params, **outputs = slots.outputs;
  if (rc == 0 && tool_bind_all(gw, specs, n_specs, seed, json || mr.quiet, inputs, params, mr.diag ? mr.diag : d) != 0)
    rc = 1;
  if (rc == 0 && tool_bind_weights(gw, &weights, params, mr.diag ? mr.diag : d) != 0) rc = 1;
  rt_stats stats = {.profile = profile ? &prof : NULL, .print_actions = print_actions && !mr.quiet ? stderr : NULL};
  if (rc == 0 && !mr.comm && tool_execute(&backend, g, inputs, params, outputs, &stats, d) != 0) rc = 1;
  if (rc == 0 && mr.comm && tool_mesh_run_execute(&mr, g, inputs, params, outputs, &stats, d) != 0) rc = 1;
  if (rc == 0 && profile && !mr.quiet) tool_print_profile(stderr, &prof, o.file, 1);
  if (mr.quiet) out_dir = NULL; /* rank 0 writes the outputs */
  if (rc == 0 && out_dir) {
    struct stat st;
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
      ir_error_plain(d, "--out-dir %s: cannot create the directory: %s", out_dir, strerror(errno));
      rc = 1;
    } else if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
      ir_error_plain(d, "--out-dir %s: not a directory", out_dir);
      rc = 1;
    }
    for (int i = 0; rc == 0 && i < gw->n_outputs; i++)
      if (save_output(out_dir, gw->outputs[i].name, outputs[i], d) != 0) rc = 1;
  }
  if (rc == 0 && !mr.quiet) {
    if (json) {
      json_t *root = json_object(), *outs = json_object();
      for (int i = 0; i < gw->n_outputs; i++) json_object_set_new(outs, gw->outputs[i].name, tool_tensor_json(outputs[i]));
      json_object_set_new(root, "outputs", outs);
      json_t *st = json_object();
      json_object_set_new(st, "kernels", json_integer(stats.kernels_run));
      json_object_set_new(st, "peak_bytes", json_integer((json_int_t)stats.peak_bytes));
      json_object_set_new(st, "threads", json_integer(omp_get_max_threads()));
      json_object_set_new(root, "stats", st);
      json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
      fputc('\n', stdout);
      json_decref(root);
    } else {
      for (int i = 0; i < gw->n_outputs; i++) tool_print_tensor(stdout, gw->outputs[i].name, outputs[i]);
    }
  }
  tool_free_slots(gw, &slots);
  tool_mesh_run_close(&mr);
  ir_graph_free(g);
  free(text);
  free(specs);
  free(text_in.ids);
  ir_diag_free(d);
  return rc;
}
