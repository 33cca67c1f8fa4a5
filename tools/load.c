/* tools/load.c — what every compiling subcommand shares: the common flags
 * (-D, --config, --entry, --after/--dump-after, --format, --verify-each,
 * --time-passes, --disable-pass/--no-fuse, --mesh, --zero), loading a .tg or
 * .ir file into a verified graph, the model's configs (fe_configs) and flags
 * that set a config constant (--batch, --seq), and running the pass pipeline. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "tool.h"

static bool has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && strcmp(s + n - m, suf) == 0;
}

bool tool_is_ir_file(const char *path) { return has_suffix(path, ".ir"); }

fe_config_set *tool_configs(const tool_compile_opts *o) {
  if (!o->file || tool_is_ir_file(o->file)) return NULL;
  size_t len = 0;
  FILE *sink = tmpfile(); /* a file that does not read is tool_load's to report */
  ir_diag *quiet = ir_diag_new(sink ? sink : stderr);
  char *text = sink ? ir_read_file(o->file, TOOL_MAX_FILE_BYTES, &len, quiet) : NULL;
  ir_diag_free(quiet);
  if (sink) fclose(sink);
  fe_config_set *s = text ? fe_configs(o->file, text, len, &o->fe, NULL) : NULL;
  free(text);
  return s;
}

int tool_add_define(tool_compile_opts *o, const char *name, const char *value, ir_diag *d) {
  if (o->fe.n_defines == (int)(sizeof o->defines / sizeof o->defines[0])) {
    ir_error_plain(d, "too many -D options (at most 64)");
    return -1;
  }
  o->defines[o->fe.n_defines++] = (fe_define){name, value};
  o->fe.defines = o->defines;
  return 0;
}

bool tool_parse_int(const char *v, int64_t lo, int64_t hi, int64_t *out) {
  if (!v || !*v || (*v != '-' && (*v < '0' || *v > '9'))) return false;
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (*end || errno || n < lo || n > hi) return false;
  *out = n;
  return true;
}

int tool_set_constant(tool_compile_opts *o, const fe_config_set *cs, const char *flag, const char *cname,
                      const char *v, ir_diag *d) {
  int64_t n;
  if (!tool_parse_int(v, 1, INT64_C(1) << 40, &n)) {
    ir_error_plain(d, "%s %s: expected a positive integer", flag, v ? v : "(nothing)");
    return -1;
  }
  if (cs && cs->n_configs == 0) {
    ir_error_plain(d, "%s %s: the model defines no config constants, so it has no %s to set", flag, v, cname);
    return -1;
  }
  /* without a chosen config (an unknown --config) tool_load reports why */
  if (cs && cs->chosen && !fe_config_const(cs->chosen, cname)) {
    ir_error_plain(d, "%s %s: the model's config %s defines no constant '%s' (%s sets %s; use -D NAME=VALUE for other names)",
                   flag, v, cs->chosen->name, cname, flag, cname);
    return -1;
  }
  for (int k = 0; k < o->fe.n_defines; k++)
    if (strcmp(o->defines[k].name, cname) == 0) {
      ir_error_plain(d, "%s %s and -D %s=%s both set %s: give one", flag, v, cname, o->defines[k].value, cname);
      return -1;
    }
  return tool_add_define(o, cname, v, d);
}

/* --mesh and --stage onto g: the stage shown must be one of the mesh's */
static int apply_mesh(const tool_compile_opts *o, ir_graph *g, ir_diag *d) {
  if (o->stage_set && (!o->mesh_set || o->stage >= o->mesh.size[IR_AXIS_PP])) {
    int pp = o->mesh_set ? o->mesh.size[IR_AXIS_PP] : 1;
    ir_error_plain(d, "--stage %d: the mesh has %d pipeline stage%s (pp = %d)%s", o->stage, pp, pp == 1 ? "" : "s", pp,
                   pp == 1 ? "; give --mesh with pp > 1" : "");
    return -1;
  }
  if (o->mesh_set) g->mesh = o->mesh;
  if (o->stage_set) g->mesh.stage = o->stage;
  return 0;
}

ir_diag *tool_diag_new(void) {
  ir_diag *d = ir_diag_new(stderr);
  if (rt_comm_under_launcher() && rt_comm_launcher_rank() != 0) ir_diag_set_quiet(d, true);
  return d;
}

static ir_graph *load(const tool_compile_opts *o, ir_diag *d, char **text_out);

ir_graph *tool_load(const tool_compile_opts *o, ir_diag *d, char **text_out) {
  ir_graph *g = load(o, d, text_out);
  if (g) ir_diag_set_quiet(d, false); /* from here on a rank's errors may be its own */
  return g;
}

static ir_graph *load(const tool_compile_opts *o, ir_diag *d, char **text_out) {
  size_t len = 0;
  *text_out = NULL;
  if (o->mesh_auto) { /* only tgc train chooses a mesh (it resolves auto before loading) */
    ir_error_plain(d, "--mesh auto: only tgc train asks the planner for a mesh; give --mesh dp=D,tp=T,pp=P");
    return NULL;
  }
  char *text = ir_read_file(o->file, TOOL_MAX_FILE_BYTES, &len, d);
  if (!text) return NULL;
  *text_out = text;
  /* neither .tg nor .ir starts with '{': a JSON dump would be a syntax error at its first byte */
  size_t first = 0;
  while (first < len && (text[first] == ' ' || text[first] == '\t' || text[first] == '\n' || text[first] == '\r')) first++;
  if (first < len && text[first] == '{') {
    ir_error_plain(d, "%s: this is a JSON dump (an output format of tgc dump --format json); tgc reads .tg "
                   "and .ir files (the default text dump, saved as FILE.ir, reads back)", o->file);
    return NULL;
  }
  ir_graph *g;
  if (tool_is_ir_file(o->file)) {
    if (o->fe.n_defines || o->fe.config || o->fe.entry) {
      ir_error_plain(d, "-D, --config and --entry apply to .tg files; '%s' is already IR", o->file);
      return NULL;
    }
    ir_diag_add_source(d, o->file, text, len);
    g = ir_read(o->file, text, len, d); /* verified, errors at .ir positions */
    if (g && apply_mesh(o, g, d) != 0) {
      ir_graph_free(g);
      return NULL;
    }
    return g;
  }
  g = fe_compile(o->file, text, len, &o->fe, d);
  if (!g) return NULL;
  if (ir_diag_errors(d) || ir_verify(g, d) != 0) {
    ir_graph_free(g);
    return NULL;
  }
  if (apply_mesh(o, g, d) != 0) {
    ir_graph_free(g);
    return NULL;
  }
  return g;
}

/* The default pipeline minus the passes o disables. */
static int tool_pipeline(const tool_compile_opts *o, pass_id *out) {
  int n = 0;
  for (int i = 0; i < pass_default_pipeline_len; i++)
    if (!o->pass_disabled[pass_default_pipeline[i]]) out[n++] = pass_default_pipeline[i];
  return n;
}

int tool_run_passes(ir_graph *g, const tool_compile_opts *o, ir_diag *d, FILE *dump_out) {
  /* memplan is not a pass of the pipeline: its plan is printed after it */
  bool memplan = o->after && strcmp(o->after, "memplan") == 0, all = o->after && strcmp(o->after, "all") == 0;
  pass_options po = {0};
  po.diag = d;
  po.verify_each = o->verify_each;
  po.time_passes = o->time_passes;
  po.verbose = o->verbose;
  po.dump_after = memplan ? NULL : o->after;
  po.dump_out = dump_out;
  po.dump_format = o->format;
  po.checkpoint = o->checkpoint;
  po.disabled = o->pass_disabled;
  po.zero = o->zero;
  po.bucket_bytes = o->bucket_bytes;
  po.tp_search = !o->tp_megatron;
  pass_id list[PASS_COUNT * 2 + 8];
  int n = tool_pipeline(o, list);
  if (pass_run_pipeline(g, list, n, &po) != 0) return -1;
  if (memplan || all) return tool_print_plan(dump_out, g, o->format, memplan, d);
  return 0;
}


/* Takes the value of a flag given as "--flag VALUE" or "--flag=VALUE". */
static const char *flag_value(const char *flag, int argc, char **argv, int *i, ir_diag *d) {
  const char *a = argv[*i];
  size_t fl = strlen(flag);
  if (a[fl] == '=') return a + fl + 1;
  if (*i + 1 >= argc) {
    ir_error_plain(d, "%s needs a value", flag);
    return NULL;
  }
  return argv[++*i];
}

static bool is_flag(const char *a, const char *flag) {
  size_t fl = strlen(flag);
  return strncmp(a, flag, fl) == 0 && (a[fl] == 0 || a[fl] == '=');
}

/* The checkpoint pass's policy names are the one vocabulary of every command;
 * "full" (tgc plan's old name) is "block". */
const char *tool_checkpoint_name(const char *v) {
  if (!v) return NULL;
  if (strcmp(v, "full") == 0 || strcmp(v, "block") == 0) return "block";
  if (strcmp(v, "none") == 0 || strcmp(v, "selective") == 0 || strcmp(v, "sqrt") == 0 || strncmp(v, "budget=", 7) == 0)
    return v;
  return NULL;
}

int tool_parse_common(tool_compile_opts *o, int argc, char **argv, int *i, ir_diag *d) {
  const char *a = argv[*i];
  if (strncmp(a, "-D", 2) == 0) {
    const char *def = a[2] ? a + 2 : (*i + 1 < argc ? argv[++*i] : NULL);
    if (!def) {
      ir_error_plain(d, "-D needs NAME=VALUE");
      return -1;
    }
    const char *eq = strchr(def, '=');
    if (!eq || eq == def || !eq[1]) {
      ir_error_plain(d, "-D %s: expected NAME=VALUE", def);
      return -1;
    }
    /* argv strings live for the whole run: cut the name off in place */
    char *name = (char *)def;
    name[eq - def] = 0;
    return tool_add_define(o, name, eq + 1, d) == 0 ? 1 : -1;
  }
  const char *v;
  if (is_flag(a, "--config")) {
    if (!(v = flag_value("--config", argc, argv, i, d))) return -1;
    o->fe.config = v;
    return 1;
  }
  if (is_flag(a, "--entry")) {
    if (!(v = flag_value("--entry", argc, argv, i, d))) return -1;
    o->fe.entry = v;
    return 1;
  }
  if (is_flag(a, "--after") || is_flag(a, "--dump-after")) {
    const char *flag = is_flag(a, "--after") ? "--after" : "--dump-after";
    if (!(v = flag_value(flag, argc, argv, i, d))) return -1;
    if (strcmp(v, "all") != 0 && strcmp(v, "memplan") != 0 && pass_lookup(v) < 0) {
      char list[512] = "all";
      for (int p = 0; p < PASS_COUNT; p++) {
        strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, pass_name((pass_id)p), sizeof list - strlen(list) - 1);
      }
      strncat(list, ", memplan", sizeof list - strlen(list) - 1);
      ir_error_plain(d, "%s %s: unknown pass (known: %s)", flag, v, list);
      return -1;
    }
    o->after = v;
    return 1;
  }
  if (is_flag(a, "--format")) {
    if (!(v = flag_value("--format", argc, argv, i, d))) return -1;
    if (strcmp(v, "text") == 0) o->format = 0;
    else if (strcmp(v, "dot") == 0) o->format = 1;
    else if (strcmp(v, "json") == 0) o->format = 2;
    else {
      ir_error_plain(d, "--format %s: expected text, dot or json", v);
      return -1;
    }
    return 1;
  }
  if (is_flag(a, "--checkpoint")) {
    if (!(v = flag_value("--checkpoint", argc, argv, i, d))) return -1;
    if (!(o->checkpoint = tool_checkpoint_name(v))) {
      ir_error_plain(d, "--checkpoint %s: expected none, block (or full), selective, sqrt or budget=BYTES", v);
      return -1;
    }
    return 1;
  }
  if (is_flag(a, "--disable-pass")) {
    if (!(v = flag_value("--disable-pass", argc, argv, i, d))) return -1;
    int p = pass_lookup(v);
    if (p < 0) {
      char list[512] = "";
      for (int q = 0; q < PASS_COUNT; q++) {
        if (q) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, pass_name((pass_id)q), sizeof list - strlen(list) - 1);
      }
      ir_error_plain(d, "--disable-pass %s: unknown pass (known: %s)", v, list);
      return -1;
    }
    o->pass_disabled[p] = true;
    return 1;
  }
  if (strcmp(a, "--no-fuse") == 0) {
    for (int p = 0; p < PASS_COUNT; p++)
      if (strncmp(pass_name((pass_id)p), "fuse-", 5) == 0) o->pass_disabled[p] = true;
    return 1;
  }
  if (is_flag(a, "--mesh")) {
    if (!(v = flag_value("--mesh", argc, argv, i, d))) return -1;
    if (strcmp(v, "auto") == 0) { /* tgc train resolves it before loading; elsewhere tool_load refuses it */
      o->mesh_auto = true, o->mesh_set = false;
      return 1;
    }
    o->mesh_auto = false;
    char err[256];
    if (ir_mesh_parse(v, &o->mesh, err, sizeof err) != 0) {
      ir_error_plain(d, "--mesh %s: %s", v, err);
      return -1;
    }
    o->mesh_set = true;
    return 1;
  }
  if (is_flag(a, "--stage")) {
    if (!(v = flag_value("--stage", argc, argv, i, d))) return -1;
    char *end = NULL;
    long s = strtol(v, &end, 10);
    if (!*v || *end || s < 0 || s > 63) {
      ir_error_plain(d, "--stage %s: expected a pipeline stage 0 to 63", v);
      return -1;
    }
    o->stage = (int)s;
    o->stage_set = true;
    return 1;
  }
  if (is_flag(a, "--zero")) {
    if (!(v = flag_value("--zero", argc, argv, i, d))) return -1;
    if (strlen(v) != 1 || v[0] < '0' || v[0] > '3') {
      ir_error_plain(d, "--zero %s: expected a ZeRO stage 0, 1, 2 or 3", v);
      return -1;
    }
    o->zero = v[0] - '0';
    o->zero_set = true;
    return 1;
  }
  if (is_flag(a, "--bucket-mb")) {
    if (!(v = flag_value("--bucket-mb", argc, argv, i, d))) return -1;
    char *end = NULL;
    double mb = strtod(v, &end);
    if (!*v || *end || !(mb > 0) || mb > 1048576) {
      ir_error_plain(d, "--bucket-mb %s: expected a size in MiB above 0 (e.g. 25, or 0.5)", v);
      return -1;
    }
    o->bucket_bytes = mb * 1048576.0;
    return 1;
  }
  if (is_flag(a, "--tp-layout")) {
    if (!(v = flag_value("--tp-layout", argc, argv, i, d))) return -1;
    if (strcmp(v, "search") != 0 && strcmp(v, "megatron") != 0) {
      ir_error_plain(d, "--tp-layout %s: expected megatron or search", v);
      return -1;
    }
    o->tp_megatron = strcmp(v, "megatron") == 0;
    o->tp_layout_set = true;
    return 1;
  }
  if (strcmp(a, "--verify-each") == 0) {
    o->verify_each = true;
    return 1;
  }
  if (strcmp(a, "--time-passes") == 0) {
    o->time_passes = true;
    return 1;
  }
  if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
    o->verbose = true;
    return 1;
  }
  return 0;
}

int tool_single_device(const char *cmd, const tool_compile_opts *o, ir_diag *d) {
  if (!o->mesh_set || ir_mesh_ranks(&o->mesh) == 1) return 0;
  char m[128];
  ir_error_plain(d, "tgc %s runs on one device; --mesh %s (%lld ranks) applies to run, train, dump and stats", cmd,
                 ir_mesh_str(&o->mesh, m, sizeof m), (long long)ir_mesh_ranks(&o->mesh));
  return 1;
}

int tool_positional(const char *cmd, const char *a, tool_compile_opts *o, ir_diag *d) {
  if (a[0] == '-' && a[1]) {
    ir_error_plain(d, "unknown option '%s' (see 'tgc %s --help')", a, cmd);
    return 1;
  }
  if (o->file) {
    ir_error_plain(d, "unexpected argument '%s' (one FILE at a time)", a);
    return 1;
  }
  o->file = a;
  return 0;
}

int tool_need_file(const char *cmd, const tool_compile_opts *o, ir_diag *d) {
  if (o->file) return 0;
  ir_error_plain(d, "%s: missing FILE (see 'tgc %s --help')", cmd, cmd);
  return 1;
}

/* ---- --tp-layout search: the layouts tgc plan and tgc train choose alike ---- */

ir_graph *tool_tp_search_graph(const tool_compile_opts *o, int dt, ir_diag *d) {
  if (!o->file || tool_is_ir_file(o->file)) return NULL;
  tool_compile_opts c = *o;
  c.fe.defines = c.defines;
  c.fe.max_layers = 3;
  c.mesh_auto = c.mesh_set = c.stage_set = false; /* one device: the search shards it at each layout */
  c.mesh = ir_mesh_single();
  /* at B = 2 as tgc plan compiles it; a model without a constant B (which tgc plan refuses) at its own batch */
  FILE *sink = tmpfile();
  ir_diag *quiet = sink ? ir_diag_new(sink) : NULL;
  char *text = NULL;
  ir_graph *g = NULL;
  if (quiet && tool_add_define(&c, "B", "2", quiet) == 0) g = tool_load(&c, quiet, &text);
  ir_diag_free(quiet);
  if (sink) fclose(sink);
  if (!g) {
    free(text);
    text = NULL;
    c.fe.n_defines = o->fe.n_defines;
    g = tool_load(&c, d, &text);
  }
  if (g && tool_shard_view_graph(o, g, NULL, dt, d) != 0) { /* as tgc plan compiles its policies, no recompute */
    ir_graph_free(g);
    g = NULL;
  }
  free(text);
  return g;
}

int tool_shard_view_graph(const tool_compile_opts *o, ir_graph *g, const char *checkpoint, int dt, ir_diag *d) {
  /* sharded programs, where fuse-lm-head declines (one device only); and the graph as the shard pass sees it:
   * the model shards it at each tp and runs the passes after it (plan_tp.c) */
  bool off[PASS_COUNT];
  for (int p = 0; p < PASS_COUNT; p++) off[p] = o->pass_disabled[p];
  off[PASS_FUSE_LM_HEAD] = off[PASS_FUSE_ELEMENTWISE] = off[PASS_FUSE_TRANSPOSE] = true;
  pass_options po = {.diag = d, .verify_each = o->verify_each, .checkpoint = checkpoint, .disabled = off};
  pass_train_graph_options to = {.passes = &po, .dtype = dt};
  pass_train_graph_info info;
  int rc = pass_build_training_graph(g, &to, &info);
  pass_train_graph_info_free(&info);
  return rc;
}

int tool_graph_layers(const ir_graph *g) {
  int layers = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->layer + 1 > layers) layers = g->nodes[i]->layer + 1;
  return layers;
}

int tool_tp_layouts(const tool_compile_opts *o, const ir_graph *model, int dt, FILE *report,
                    pass_tp_layouts **out, ir_diag *d) {
  *out = NULL;
  const ir_mesh *m = &model->mesh;
  if (o->tp_megatron || m->size[IR_AXIS_TP] <= 1 || tool_is_ir_file(o->file)) return 0;
  ir_graph *g = tool_tp_search_graph(o, dt, d);
  if (!g) return -1;
  *out = pass_tp_search(g, m->size[IR_AXIS_TP], m->sp, tool_graph_layers(model), report, d);
  ir_graph_free(g);
  return *out ? 0 : -1;
}
