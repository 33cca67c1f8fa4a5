/* tools/bind.c — what the commands that run a model share (moved here from
 * cmd_run.c): the --input/--seed flags, binding inputs (numbers, lists, .npy
 * files or seeded random) and initializing parameters from the seed, the
 * memory check, and printing tensors as text or JSON. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
  if (!copy) abort();
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

/* Refuses graphs whose parameters and inputs alone exceed the machine's memory:
 * large configs are for `tgc stats`, not for running here. */
int tool_check_memory(const ir_graph *g, ir_diag *d) {
  double bytes = 0, largest = 0;
  for (int i = 0; i < g->n_values; i++) {
    const ir_value *v = g->values[i];
    double b = (double)ir_type_numel(&v->type) * (double)ir_dtype_size(v->type.dtype);
    if (!v->def) bytes += b;
    else if (b > largest) largest = b;
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  double have = pages > 0 && page > 0 ? (double)pages * (double)page : 16e9;
  if (bytes + largest > 0.8 * have) {
    ir_error_plain(d,
                   "running this model needs at least %.1f GiB (parameters and inputs %.1f GiB) but this "
                   "machine has %.1f GiB; choose a smaller config",
                   (bytes + largest) / 1073741824.0, bytes / 1073741824.0, have / 1073741824.0);
    return -1;
  }
  return 0;
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
  if (!s->inputs || !s->params || !s->outputs) abort();
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
    "  --device N           which device of the backend (default 0)\n"
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
