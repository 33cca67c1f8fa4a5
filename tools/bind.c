/* tools/bind.c — what the commands that run a model share (moved here from
 * cmd_run.c): the --input/--seed flags, binding inputs (numbers, lists, .npy
 * files or seeded random) and initializing parameters from the seed, the
 * memory check (every command that allocates: run, grad, gradcheck, train), and printing tensors as text or JSON. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir_die.h"
#include "rt_tokenizer.h"
#include "tool.h"

static int parse_number(const char *s, double *out) {
  while (*s == ' ') s++;
  if (!*s) return -1;
  if (strcmp(s, "true") == 0) return *out = 1, 0;
  if (strcmp(s, "false") == 0) return *out = 0, 0;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  while (*end == ' ') end++;
  if (end == s || *end) return -1;
  *out = v;
  return 0;
}

/* Checks v fits dtype t exactly as given (integers integral and in range). */
static const char *value_problem(ir_dtype t, double v) {
  switch (t) {
  case IR_DT_I32:
    if (v != floor(v) || v < -2147483648.0 || v > 2147483647.0) return "is not an i32";
    return NULL;
  case IR_DT_I64:
    if (v != floor(v) || fabs(v) > 9007199254740992.0) return "is not an i64 (|v| <= 2^53)";
    return NULL;
  case IR_DT_BOOL:
    if (v != 0 && v != 1) return "is not a bool (true, false, 1, 0)";
    return NULL;
  default:
    return NULL;
  }
}

/* The exclusive upper bound for random integers fed to input v: the smallest
 * table/class count it indexes, else 10. */
static int64_t random_int_bound(const ir_graph *g, const ir_value *v) {
  int64_t bound = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    int64_t b = 0;
    if (n->op == IR_OP_EMBEDDING && n->in[1] == v) b = n->in[0]->type.dims[0];
    if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD) && n->in[1] == v)
      b = n->in[0]->type.dims[n->in[0]->type.rank - 1];
    if (n->op == IR_OP_LINEAR_CROSS_ENTROPY && n->in[2] == v) b = n->out[4]->type.dims[1]; /* its chunk buffer's V */
    if (b > 0 && (bound == 0 || b < bound)) bound = b;
  }
  return bound ? bound : 10;
}

rt_tensor *tool_bind_input(const ir_graph *g, const ir_value *in, const char *spec, uint64_t seed, ir_diag *d) {
  char tb[160];
  ir_type_str(&in->type, tb, sizeof tb);
  if (spec == NULL || strcmp(spec, "random") == 0) {
    rt_tensor *t = rt_tensor_new(&in->type);
    if (!t) {
      ir_error_plain(d, "out of memory allocating input '%s' (%s)", in->name, tb);
      return NULL;
    }
    rt_fill_random(t, seed, in->name, random_int_bound(g, in));
    return t;
  }
  if (spec[0] == '@') {
    char err[512];
    rt_tensor *f = rt_npy_read(spec + 1, err, sizeof err);
    if (!f) {
      ir_error_plain(d, "--input %s: %s", in->name, err);
      return NULL;
    }
    char fb[160];
    ir_type_str(&f->type, fb, sizeof fb);
    bool same_shape = f->type.rank == in->type.rank;
    for (int i = 0; same_shape && i < f->type.rank; i++) same_shape = f->type.dims[i] == in->type.dims[i];
    bool compatible = ir_dtype_is_float(f->type.dtype) == ir_dtype_is_float(in->type.dtype) &&
                      (f->type.dtype == IR_DT_BOOL) == (in->type.dtype == IR_DT_BOOL);
    if (!same_shape || !compatible) {
      ir_error_plain(d, "--input %s=%s: the file holds %s but input '%s' is %s", in->name, spec, fb,
                     in->name, tb);
      rt_tensor_free(f);
      return NULL;
    }
    if (f->type.dtype == in->type.dtype) return f;
    rt_tensor *t = rt_tensor_new(&in->type);
    int64_t n = ir_type_numel(&in->type);
    for (int64_t i = 0; t && i < n; i++) {
      double v = rt_tensor_get(f, i);
      const char *why = value_problem(in->type.dtype, v);
      if (why) {
        ir_error_plain(d, "--input %s=%s: element %lld (%.17g) %s", in->name, spec, (long long)i, v, why);
        rt_tensor_free(t);
        t = NULL;
        break;
      }
      rt_tensor_set(t, i, v);
    }
    rt_tensor_free(f);
    return t;
  }
  /* a number, or a list of numbers */
  int64_t n = ir_type_numel(&in->type);
  const char *s = spec;
  while (*s == ' ') s++;
  bool bracketed = *s == '[';
  char *copy = strdup(bracketed ? s + 1 : s);
  if (!copy) IR_DIE("out of memory (copy)");
  if (bracketed) {
    char *close = strrchr(copy, ']');
    if (!close || close[1]) {
      ir_error_plain(d, "--input %s=%s: a list is '[v1, v2, ...]' or 'v1,v2,...'", in->name, spec);
      free(copy);
      return NULL;
    }
    *close = 0;
  }
  int64_t count = 1;
  for (const char *p = copy; *p; p++) count += *p == ',';
  if (!bracketed && count == 1) { /* one number fills the tensor */
    double v;
    const char *why;
    if (parse_number(copy, &v) != 0) {
      ir_error_plain(d, "--input %s=%s: '%s' is not a number (give a number, a list, @file.npy or random)",
                     in->name, spec, copy);
      free(copy);
      return NULL;
    }
    if ((why = value_problem(in->type.dtype, v))) {
      ir_error_plain(d, "--input %s=%s: %s %s", in->name, spec, copy, why);
      free(copy);
      return NULL;
    }
    rt_tensor *t = rt_tensor_new(&in->type);
    if (!t) ir_error_plain(d, "out of memory allocating input '%s' (%s)", in->name, tb);
    else rt_tensor_fill(t, v);
    free(copy);
    return t;
  }
  if (count != n) {
    ir_error_plain(d, "--input %s: %lld values given but %s has %lld elements", in->name,
                   (long long)count, tb, (long long)n);
    free(copy);
    return NULL;
  }
  rt_tensor *t = rt_tensor_new(&in->type);
  if (!t) {
    ir_error_plain(d, "out of memory allocating input '%s' (%s)", in->name, tb);
    free(copy);
    return NULL;
  }
  char *save = NULL, *tok = strtok_r(copy, ",", &save);
  for (int64_t i = 0; i < n; i++, tok = strtok_r(NULL, ",", &save)) {
    double v;
    const char *why = NULL;
    if (!tok || parse_number(tok, &v) != 0 || (why = value_problem(in->type.dtype, v))) {
      ir_error_plain(d, "--input %s: element %lld ('%s') %s", in->name, (long long)i, tok ? tok : "",
                     why ? why : "is not a number");
      rt_tensor_free(t);
      free(copy);
      return NULL;
    }
    rt_tensor_set(t, i, v);
  }
  free(copy);
  return t;
}

/* ---- printing ---- */
static void print_scalar(FILE *out, ir_dtype t, double v) {
  if (isnan(v)) fputs("nan", out);
  else if (isinf(v)) fputs(v > 0 ? "inf" : "-inf", out);
  else if (t == IR_DT_BOOL) fputs(v != 0 ? "true" : "false", out);
  else if (!ir_dtype_is_float(t)) fprintf(out, "%lld", (long long)v);
  else if (t == IR_DT_F64) fprintf(out, "%.17g", v);
  else if (t == IR_DT_F32) fprintf(out, "%.9g", v);
  else fprintf(out, "%.5g", v);
}

static void print_nested(FILE *out, const rt_tensor *t, int dim, int64_t *offset, int indent) {
  if (dim == t->type.rank) {
    print_scalar(out, t->type.dtype, rt_tensor_get(t, (*offset)++));
    return;
  }
  fputc('[', out);
  for (int64_t i = 0; i < t->type.dims[dim]; i++) {
    if (i) {
      fputc(',', out);
      if (dim + 1 < t->type.rank) fprintf(out, "\n%*s", indent + dim + 1, "");
      else fputc(' ', out);
    }
    print_nested(out, t, dim + 1, offset, indent);
  }
  fputc(']', out);
}

typedef struct {
  double min, max, mean, sum;
  int64_t nan_count;
} summary;

static summary summarize(const rt_tensor *t) {
  int64_t n = ir_type_numel(&t->type);
  summary s = {INFINITY, -INFINITY, 0, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    double v = rt_tensor_get(t, i);
    if (isnan(v)) {
      s.nan_count++;
      continue;
    }
    s.min = v < s.min ? v : s.min;
    s.max = v > s.max ? v : s.max;
    s.sum += v;
  }
  s.mean = n ? s.sum / (double)n : 0;
  return s;
}

enum { PRINT_LIMIT = 256, JSON_LIMIT = 4096 };

void tool_print_tensor(FILE *out, const char *name, const rt_tensor *t) {
  char tb[160];
  ir_type_str(&t->type, tb, sizeof tb);
  int64_t n = ir_type_numel(&t->type);
  if (t->type.rank == 0) {
    fprintf(out, "%s = ", name);
    print_scalar(out, t->type.dtype, rt_tensor_get(t, 0));
    fprintf(out, "  (%s)\n", ir_dtype_name(t->type.dtype));
    return;
  }
  if (n <= PRINT_LIMIT) {
    fprintf(out, "%s : %s =\n", name, tb);
    int64_t off = 0;
    print_nested(out, t, 0, &off, 0);
    fputc('\n', out);
    return;
  }
  summary s = summarize(t);
  fprintf(out, "%s : %s (%lld elements) min ", name, tb, (long long)n);
  print_scalar(out, IR_DT_F64, s.min);
  fputs(" max ", out);
  print_scalar(out, IR_DT_F64, s.max);
  fputs(" mean ", out);
  print_scalar(out, IR_DT_F64, s.mean);
  if (s.nan_count) fprintf(out, " nan %lld", (long long)s.nan_count);
  fputs("\n  first:", out);
  for (int64_t i = 0; i < 8 && i < n; i++) {
    fputc(' ', out);
    print_scalar(out, t->type.dtype, rt_tensor_get(t, i));
  }
  fputs(" ...\n", out);
}

static json_t *json_number(ir_dtype t, double v) {
  if (isnan(v)) return json_string("nan");
  if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
  if (t == IR_DT_BOOL) return json_boolean(v != 0);
  if (!ir_dtype_is_float(t)) return json_integer((json_int_t)v);
  return json_real(v);
}

json_t *tool_tensor_json(const rt_tensor *t) {
  if (t->type.rank == 0) return json_number(t->type.dtype, rt_tensor_get(t, 0));
  json_t *o = json_object();
  json_object_set_new(o, "dtype", json_string(ir_dtype_name(t->type.dtype)));
  json_t *shape = json_array();
  for (int i = 0; i < t->type.rank; i++) json_array_append_new(shape, json_integer(t->type.dims[i]));
  json_object_set_new(o, "shape", shape);
  int64_t n = ir_type_numel(&t->type);
  if (n <= JSON_LIMIT) {
    json_t *data = json_array();
    for (int64_t i = 0; i < n; i++) json_array_append_new(data, json_number(t->type.dtype, rt_tensor_get(t, i)));
    json_object_set_new(o, "data", data);
  } else {
    summary s = summarize(t);
    json_t *sm = json_object();
    json_object_set_new(sm, "min", json_number(IR_DT_F64, s.min));
    json_object_set_new(sm, "max", json_number(IR_DT_F64, s.max));
    json_object_set_new(sm, "mean", json_number(IR_DT_F64, s.mean));
    json_object_set_new(sm, "sum", json_number(IR_DT_F64, s.sum));
    json_object_set_new(sm, "nan", json_integer(s.nan_count));
    json_object_set_new(o, "summary", sm);
  }
  return o;
}

/* ---- the memory check: every command that allocates asks it first ----
 * What a command needs is what its memory plans say it allocates: the
 * buffers the caller binds (parameters, inputs, optimizer state) plus the
 * arena of every program (pass_memplan, with the donations the runtime
 * makes), nothing allocated meanwhile. What is available is the machine's
 * physical memory, or less: the address-space limit (ulimit -v), or
 * TGC_MEMORY_BYTES (a budget in bytes, e.g. for tests); under a launcher
 * every rank of this machine gets an equal share and checks its own graphs
 * (which hold its share of the model) against it. A command is refused when
 * it needs more than 80% of that: large configs are for `tgc stats` and
 * `tgc plan`, not for running here. */
static double memory_available(int *ranks_here, const char **source) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  double have = pages > 0 && page > 0 ? (double)pages * (double)page : 16e9;
  *source = "this machine has";
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (double)rl.rlim_cur < have)
    have = (double)rl.rlim_cur, *source = "the address-space limit (ulimit -v) allows";
  const char *budget = getenv("TGC_MEMORY_BYTES");
  if (budget && *budget) {
    char *end;
    errno = 0;
    double b = strtod(budget, &end);
    if (!*end && !errno && b > 0 && isfinite(b)) have = b, *source = "TGC_MEMORY_BYTES allows";
  }
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local) local = getenv("MPI_LOCALNRANKS");
  *ranks_here = local ? atoi(local) : 1;
  if (*ranks_here < 1) *ranks_here = 1;
  return have / *ranks_here;
}

static const char *gib(double b, char *buf, size_t n) { /* GiB, else MiB, KiB or bytes */
  if (b >= 1073741824.0) snprintf(buf, n, "%.1f GiB", b / 1073741824.0);
  else if (b >= 1048576.0) snprintf(buf, n, "%.1f MiB", b / 1048576.0);
  else if (b >= 1024.0) snprintf(buf, n, "%.1f KiB", b / 1024.0);
  else snprintf(buf, n, "%.0f bytes", b);
  return buf;
}

/* Refuses `what` (running, training) needing `need` bytes, `held` of them the
 * buffers described by held_what, when it does not fit what is available. */
static int check_fits(const char *what, double need, double held, const char *held_what, ir_diag *d) {
  int ranks = 1;
  const char *source;
  double have = memory_available(&ranks, &source);
  if (need <= 0.8 * have) return 0;
  char b1[32], b2[32], b3[32], b4[32], share[96] = "";
  if (ranks > 1) snprintf(share, sizeof share, ", this rank's share: 1 of %d ranks on this machine", ranks);
  ir_error_plain(d, "%s this model needs at least %s (%s %s) but %s %s (80%% usable: %s%s); choose a smaller config",
                 what, gib(need, b1, sizeof b1), held_what, gib(held, b2, sizeof b2), source, gib(have, b3, sizeof b3),
                 gib(0.8 * have, b4, sizeof b4), share);
  return -1;
}

static double type_bytes(const ir_type *t) { return (double)ir_type_numel(t) * (double)ir_dtype_size(t->dtype); }

static double bound_bytes(const ir_graph *g) { /* parameters and inputs: the buffers the caller binds */
  double bytes = 0;
  for (int i = 0; i < g->n_params; i++) bytes += type_bytes(&g->params[i]->type);
  for (int i = 0; i < g->n_inputs; i++) bytes += type_bytes(&g->inputs[i]->type);
  return bytes;
}

static double arena_bytes(const ir_graph *g, const bool *donate_inputs, const bool *donate_params) {
  pass_plan_options po = {.donate_inputs = donate_inputs, .donate_params = donate_params};
  pass_plan *p = pass_memplan(g, &po);
  if (!p) IR_DIE("out of memory (p)");
  double bytes = (double)p->arena_bytes;
  pass_plan_free(p);
  return bytes;
}

int tool_check_memory(const ir_graph *g, ir_diag *d) {
  double held = bound_bytes(g);
  return check_fits("running", held + arena_bytes(g, NULL, NULL), held, "parameters and inputs", d);
}

/* As rt_trainer_new allocates: the step's parameters and inputs (data,
 * gradient sums), the optimizer state, the step's arena (or, pipelined, every
 * chunk's two halves') with the sums donated, the update's with the state
 * and parameters donated. */
int tool_check_training_memory(const pass_training *pt, ir_diag *d) {
  const ir_graph *sg = pt->step, *ug = pt->update;
  double held = bound_bytes(sg), arenas = 0;
  for (int i = 0; i < pt->n_states; i++) held += type_bytes(&ug->inputs[pt->n_params + i]->type);
  int most = sg->n_inputs > ug->n_inputs ? sg->n_inputs : ug->n_inputs;
  for (int c = 0; pt->fwd && c < pt->n_chunks; c++) {
    int n = pt->chunk[c].bwd->n_inputs;
    most = n > most ? n : most;
  }
  bool *don = calloc((size_t)most + 1, sizeof *don), *pdon = calloc((size_t)pt->n_params + 1, sizeof *pdon);
  if (!don || !pdon) IR_DIE("out of memory (don || !pdon)");
  for (int i = pt->n_data; i < sg->n_inputs; i++) don[i] = true;
  if (pt->fwd) {
    for (int c = 0; c < pt->n_chunks; c++) {
      const pass_pipe_chunk *ch = &pt->chunk[c];
      bool *bdon = calloc((size_t)ch->bwd->n_inputs + 1, sizeof *bdon);
      if (!bdon) IR_DIE("out of memory (bdon)");
      for (int i = pt->n_data; i < pt->bwd_saved0 && i < ch->bwd->n_inputs; i++) bdon[i] = true;
      arenas += arena_bytes(ch->fwd, don, NULL) + arena_bytes(ch->bwd, bdon, NULL);
      free(bdon);
    }
  } else {
    arenas += arena_bytes(sg, don, NULL);
  }
  memset(don, 0, ((size_t)most + 1) * sizeof *don);
  for (int i = 0; i < pt->n_states; i++) don[pt->n_params + i] = true;
  for (int i = 0; i < pt->n_params; i++) pdon[i] = true;
  arenas += arena_bytes(ug, don, pdon);
  if (pt->eval) arenas += arena_bytes(pt->eval, NULL, NULL); /* the eval program's own arena (nothing donated) */
  free(don);
  free(pdon);
  return check_fits("training", held + arenas, held, "parameters, optimizer state and inputs", d);
}

bool tool_flag(const char *flag, int argc, char **argv, int *i, const char **val) {
  const char *a = argv[*i];
  size_t fl = strlen(flag);
  if (strncmp(a, flag, fl) != 0 || (a[fl] != 0 && a[fl] != '=')) return false;
  *val = a[fl] == '=' ? a + fl + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
  return true;
}

int tool_parse_input_flag(int argc, char **argv, int *i, tool_input_spec *specs, int *n_specs, uint64_t *seed,
                          ir_diag *d) {
  const char *val = NULL;
  if (tool_flag("--input", argc, argv, i, &val)) {
    const char *eq = val ? strchr(val, '=') : NULL;
    if (!val || !eq || eq == val) {
      ir_error_plain(d, "--input %s: expected NAME=VALUE, NAME=@file.npy or NAME=random", val ? val : "");
      return -1;
    }
    ((char *)val)[eq - val] = 0;
    specs[(*n_specs)++] = (tool_input_spec){val, eq + 1};
    return 1;
  }
  if (tool_flag("--seed", argc, argv, i, &val)) {
    char *end;
    errno = 0;
    unsigned long long s = val ? strtoull(val, &end, 10) : 0;
    if (!val || !*val || *end || errno || val[0] == '-') {
      ir_error_plain(d, "--seed %s: expected a non-negative integer", val ? val : "");
      return -1;
    }
    *seed = s;
    return 1;
  }
  return 0;
}

int tool_check_input_specs(const ir_graph *g, const tool_input_spec *specs, int n_specs, ir_diag *d) {
  int rc = 0;
  /* every --input must name an input, once */
  for (int s = 0; rc == 0 && s < n_specs; s++) {
    bool found = false;
    for (int i = 0; i < g->n_inputs; i++) found |= strcmp(g->inputs[i]->name, specs[s].name) == 0;
    for (int t = 0; t < s; t++)
      if (strcmp(specs[t].name, specs[s].name) == 0) {
        ir_error_plain(d, "--input %s given twice", specs[s].name);
        rc = -1;
      }
    if (!found) {
      char list[1024] = "";
      for (int i = 0; i < g->n_inputs; i++) {
        if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, g->inputs[i]->name, sizeof list - strlen(list) - 1);
      }
      ir_error_plain(d, "--input %s: the model has no input of that name (inputs: %s)", specs[s].name,
                     g->n_inputs ? list : "none");
      rc = -1;
    }
  }
  return rc;
}

int tool_bind_all(const ir_graph *g, const tool_input_spec *specs, int n_specs, uint64_t seed, bool quiet,
                  rt_tensor **inputs, rt_tensor **params, ir_diag *d) {
  for (int i = 0; i < g->n_inputs; i++) {
    const char *spec = NULL;
    for (int s = 0; s < n_specs; s++)
      if (strcmp(specs[s].name, g->inputs[i]->name) == 0) spec = specs[s].spec;
    if (!spec && !quiet)
      fprintf(stderr, "tgc: note: input '%s' not given; using random values (seed %llu)\n", g->inputs[i]->name,
              (unsigned long long)seed);
    if (!(inputs[i] = tool_bind_input(g, g->inputs[i], spec, seed, d))) return -1;
  }
  for (int i = 0; i < g->n_params; i++) {
    if (!(params[i] = rt_tensor_new(&g->params[i]->type))) {
      ir_error_plain(d, "out of memory allocating parameter '%s'", g->params[i]->name);
      return -1;
    }
    rt_init_param(params[i], g->params[i], seed);
  }
  return 0;
}

void tool_alloc_slots(const ir_graph *g, tool_slots *s) {
  s->inputs = calloc((size_t)g->n_inputs + 1, sizeof *s->inputs);
  s->params = calloc((size_t)g->n_params + 1, sizeof *s->params);
  s->outputs = calloc((size_t)g->n_outputs + 1, sizeof *s->outputs);
  if (!s->inputs || !s->params || !s->outputs) IR_DIE("out of memory (s->inputs || !s->params || !s->outputs)");
}

void tool_free_slots(const ir_graph *g, tool_slots *s) {
  for (int i = 0; g && s->inputs && i < g->n_inputs; i++) rt_tensor_free(s->inputs[i]);
  for (int i = 0; g && s->params && i < g->n_params; i++) rt_tensor_free(s->params[i]);
  for (int i = 0; g && s->outputs && i < g->n_outputs; i++) rt_tensor_free(s->outputs[i]);
  free(s->inputs);
  free(s->params);
  free(s->outputs);
  *s = (tool_slots){0};
}

int tool_execute(const tool_backend *tb, const ir_graph *g, rt_tensor *const *inputs, rt_tensor *const *params,
                 rt_tensor **outputs, rt_stats *stats, ir_diag *d) {
  char err[1024] = "";
  rt_stats local = {0};
  if (!stats) stats = &local;
  stats->device = tb ? &tb->device : NULL;
  const rt_backend *b = tb && tb->backend ? tb->backend : &rt_cpu_backend;
  if (rt_run(b, g, inputs, params, outputs, stats, err, sizeof err) != 0) {
    ir_error_plain(d, "%s", err);
    return -1;
  }
  return 0;
}

const char *const tool_backend_help =
    "  --backend NAME       where the model runs: cpu (the default, and the reference every\n"
    "                       other backend is tested against), cuda, cuda-emu\n"
    "  --device N           which device of the backend (default 0); under mpirun the cuda\n"
    "                       backend counts it from the rank's node-local GPU (rank r: GPU r + N)\n"
    "  --racecheck          cuda-emu: report shared-memory races between the threads of a block\n";

int tool_parse_backend(int argc, char **argv, int *i, tool_backend *tb, ir_diag *d) {
  const char *val = NULL;
  if (strcmp(argv[*i], "--racecheck") == 0) {
    tb->device.racecheck = true;
    return 1;
  }
  if (tool_flag("--device", argc, argv, i, &val)) {
    char *end = NULL;
    long n = val ? strtol(val, &end, 10) : -1;
    if (!val || !*val || *end || n < 0 || n > 1024) {
      ir_error_plain(d, "--device %s: expected a device number in [0, 1024]", val ? val : "");
      return -1;
    }
    tb->device.index = (int)n;
    return 1;
  }
  if (!tool_flag("--backend", argc, argv, i, &val)) return 0;
  if ((tb->backend = rt_backend_lookup(val))) return 1;
  char known[256] = "";
  for (int k = 0; k < rt_backend_count(); k++) {
    if (k) strncat(known, ", ", sizeof known - strlen(known) - 1);
    strncat(known, rt_backend_at(k)->name, sizeof known - strlen(known) - 1);
  }
  ir_error_plain(d, "--backend %s: unknown backend (known: %s)", val ? val : "", known);
  return -1;
}

const char *const tool_weights_help =
    "  --weights PATH       the parameters from a safetensors file, or an HF-style folder holding\n"
    "                       model.safetensors (docs/weights.md); every parameter must be there\n"
    "  --map MAP            a name map (e.g. examples/maps/hf_gpt2.map): tgc names to the file's\n"
    "                       names, with transforms; without it the names are tgc's own, or for an\n"
    "                       HF folder maps/hf_<model_type>.map beside FILE (config.json's model_type)\n";

int tool_parse_weights_flag(int argc, char **argv, int *i, tool_weights *w, ir_diag *d) {
  const char *val = NULL;
  bool weights = tool_flag("--weights", argc, argv, i, &val);
  if (!weights && !tool_flag("--map", argc, argv, i, &val)) return 0;
  if (!val || !*val) {
    ir_error_plain(d, "%s needs a %s", weights ? "--weights" : "--map", weights ? "PATH" : "MAP file");
    return -1;
  }
  *(weights ? &w->path : &w->map) = val;
  return 1;
}

/* An HF folder's map when none is given: maps/hf_<model_type>.map beside
 * the model file, model_type read from DIR/config.json (NULL: none). */
static char *default_map(const tool_weights *w) {
  struct stat st;
  char cfg[4096];
  snprintf(cfg, sizeof cfg, "%s/config.json", w->path);
  if (!w->model || stat(w->path, &st) != 0 || !S_ISDIR(st.st_mode)) return NULL;
  json_t *root = json_load_file(cfg, 0, NULL);
  const char *type = root ? json_string_value(json_object_get(root, "model_type")) : NULL;
  char *map = NULL;
  if (type && strspn(type, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(type)) {
    const char *slash = strrchr(w->model, '/');
    int dl = slash ? (int)(slash - w->model) : 1;
    size_t n = strlen(w->model) + strlen(type) + 32;
    map = malloc(n);
    if (!map) IR_DIE("out of memory (map)");
    snprintf(map, n, "%.*s/maps/hf_%s.map", dl, slash ? w->model : ".", type);
    if (stat(map, &st) != 0) free(map), map = NULL;
  }
  json_decref(root);
  return map;
}

int tool_bind_weights(const ir_graph *g, const tool_weights *w, rt_tensor **params, ir_diag *d) {
  if (!w->path) {
    if (w->map) ir_error_plain(d, "--map needs --weights PATH");
    return w->map ? -1 : 0;
  }
  char err[2048];
  rt_weight_map *m = NULL;
  char *auto_map = w->map ? NULL : default_map(w);
  const char *map = w->map ? w->map : auto_map;
  if (map && !(m = rt_weight_map_read(map, err, sizeof err))) {
    free(auto_map);
    ir_error_plain(d, "--map: %s", err);
    return -1;
  }
  int rc = rt_weights_load(g, params, w->path, m, NULL, err, sizeof err);
  if (rc != 0) ir_error_plain(d, "--weights: %s%s%s%s", err, auto_map ? " (the map: " : "", auto_map ? auto_map : "",
                              auto_map ? ", from config.json's model_type)" : "");
  rt_weight_map_free(m);
  free(auto_map);
  return rc;
}

int tool_parse_text_flag(int argc, char **argv, int *i, tool_text *t, ir_diag *d) {
  const char *val = NULL;
  bool text = tool_flag("--text", argc, argv, i, &val);
  if (!text && !tool_flag("--tokenizer", argc, argv, i, &val)) return 0;
  if (!val || (!text && !*val)) {
    ir_error_plain(d, "%s needs a %s", text ? "--text" : "--tokenizer", text ? "TEXT" : "FILE (a tokenizer.json)");
    return -1;
  }
  *(text ? &t->text : &t->tokenizer) = val;
  return 1;
}

/* A sentence-transformers folder's sentence_bert_config.json: its
 * max_seq_length (0 when the folder has no such file or the file no such
 * key; -1 with an error when it is not an integer >= 1 or the file not JSON).
 * sentence-transformers truncates to it, not to tokenizer.json's own
 * truncation (all-MiniLM-L6-v2: 256, where tokenizer.json says 128). */
static int64_t sentence_max_seq_length(const char *dir, ir_diag *d) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/sentence_bert_config.json", dir);
  if (stat(path, &st) != 0) return 0;
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) {
    ir_error_plain(d, "--text: %s:%d:%d: %s", path, je.line, je.column, je.text);
    return -1;
  }
  json_t *mx = json_is_object(root) ? json_object_get(root, "max_seq_length") : NULL;
  int64_t n = mx ? (json_is_integer(mx) && json_integer_value(mx) >= 1 ? json_integer_value(mx) : -1) : 0;
  json_decref(root);
  if (n < 0) ir_error_plain(d, "--text: %s: max_seq_length: expected an integer >= 1", path);
  return n;
}

int tool_text_prepare(tool_text *t, const tool_weights *w, tool_compile_opts *o, ir_diag *d) {
  if (!t->text) {
    if (t->tokenizer) ir_error_plain(d, "--tokenizer needs --text TEXT");
    return t->tokenizer ? -1 : 0;
  }
  char path[4096], err[1024];
  struct stat st;
  bool dir = w->path && stat(w->path, &st) == 0 && S_ISDIR(st.st_mode);
  if (t->tokenizer) snprintf(path, sizeof path, "%s", t->tokenizer);
  else if (dir) snprintf(path, sizeof path, "%s/tokenizer.json", w->path);
  else {
    ir_error_plain(d, "--text needs a tokenizer: --tokenizer FILE, or --weights DIR holding tokenizer.json");
    return -1;
  }
  int64_t max_len = dir ? sentence_max_seq_length(w->path, d) : 0;
  if (max_len < 0) return -1;
  rt_tokenizer *tok = rt_tokenizer_load(path, err, sizeof err);
  if (!tok) {
    ir_error_plain(d, "--tokenizer: %s", err);
    return -1;
  }
  if (max_len) rt_tokenizer_set_max_length(tok, max_len);
  int32_t *ids = NULL;
  size_t n = 0;
  int rc = rt_tokenizer_encode(tok, t->text, strlen(t->text), true, &ids, &n, err, sizeof err);
  rt_tokenizer_free(tok);
  if (rc != 0 || n == 0) {
    ir_error_plain(d, "--text: %s", rc ? err : "no tokens");
    free(ids);
    return -1;
  }
  if (!(t->ids = malloc(n * 12 + 1))) IR_DIE("out of memory ((t->ids = malloc(n * 12 + 1)))");
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += (size_t)sprintf(t->ids + k, "%s%d", i ? "," : "", (int)ids[i]);
  free(ids);
  snprintf(t->n, sizeof t->n, "%zu", n);
  fe_config_set *cs = tool_configs(o);
  rc = tool_set_constant(o, cs, "--text", "T", t->n, d);
  fe_config_set_free(cs);
  return rc;
}

void tool_text_specs(const tool_text *t, const ir_graph *g, tool_input_spec *specs, int *n_specs) {
  static const char *const names[] = {"tokens", "types", "mask"};
  for (int k = 0; t->ids && k < 3; k++)
    for (int i = 0; i < g->n_inputs; i++)
      if (strcmp(g->inputs[i]->name, names[k]) == 0) specs[(*n_specs)++] = (tool_input_spec){names[k], k == 0 ? t->ids : k == 1 ? "0" : "1"};
}
