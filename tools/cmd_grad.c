/* tools/cmd_grad.c — `tgc grad` (gradients by reverse mode, tangents by
 * forward mode, computed by the compiler's own autodiff and run on the CPU)
 * and `tgc gradcheck` (both modes against central finite differences in f64).
 *
 * grad: the model is loaded, the pipeline runs through autodiff (its own grad
 * requests expanded), then pass_append_gradients (reverse) or
 * pass_append_tangents (forward) appends the derivative graph and its
 * outputs, and the backend runs it once. This file chooses what is
 * differentiated (--wrt, --of, --seed-output, --tangent), binds and prints.
 * Inputs are bound as in `tgc run` (bind.c); forward-mode tangents become
 * extra inputs t_<name> bound the same way.
 *
 * gradcheck: the graphs are built by pass_build_gradcheck: the model in f64
 * (every float dtype, cast targets and constants), the loss its first output
 * (its sum if it is not a scalar); one graph computes loss, every gradient
 * (reverse) and the directional derivative along tangent inputs (forward),
 * a second the loss alone for the finite differences, which this file runs
 * (x ± h v, h = eps * max(1, |x|), |x| the
 * element's magnitude, or the 2-norm of x for a random unit direction; also
 * with h/2 and a 4-point stencil with step 100 h, keeping the estimate
 * closest to the derivatives: a step across a ReLU kink is no derivative).
 * Directions v are the unit vectors of each element for tensors of at most
 * 64 elements (in small graphs: see ELEMENT_BUDGET), else 4 seeded random
 * normal directions scaled to unit norm. Reported per value:
 * max abs error of both modes and the max rel error, the abs error over the
 * largest |finite difference| of that value; PASS when rel <= tol.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "tool.h"

extern const char *const tool_common_help;

static const char *const grad_help =
    "usage: tgc grad FILE --wrt NAMES [--mode reverse|forward] [--of OUTPUT] [--seed-output NAME=VALUE]...\n"
    "                [--tangent NAME=VALUE]... [--input NAME=VALUE]... [--seed N] [--json] [options]\n"
    "\n"
    "Differentiates FILE with the compiler's autodiff and runs it on the CPU.\n"
    "\n"
    "  --wrt NAMES          comma-separated inputs/parameters to differentiate with respect to\n"
    "  --mode reverse       (default) gradients d OUTPUT / d NAME of one scalar output\n"
    "  --of OUTPUT          the output to differentiate (default: the first); a non-scalar\n"
    "                       output is summed first\n"
    "  --seed-output N=V    reverse mode from several outputs: the gradient of sum V * N\n"
    "                       (repeatable; replaces --of)\n"
    "  --mode forward       tangents of every output for a tangent on the inputs: 1 on the\n"
    "                       first --wrt name unless given with --tangent\n"
    "  --tangent NAME=VALUE the tangent of NAME (a number, a list, @file.npy or random, as for\n"
    "                       --input; repeatable; NAME joins --wrt)\n"
    "  --input, --seed      bind inputs and initialize parameters as 'tgc run' does\n"
    "  --json               one JSON object; reverse:\n"
    "                       {\"mode\": \"reverse\", \"of\": OUTPUT, \"gradients\": {NAME: ...}, \"outputs\": {...}}\n"
    "                       forward: {\"mode\": \"forward\", \"wrt\": {NAME: tangent}, \"tangents\": {OUTPUT: ...},\n"
    "                       \"outputs\": {...}}; tensors as in 'tgc run --json'\n"
    "\n";

static const char *const gradcheck_help =
    "usage: tgc gradcheck FILE [--input NAME=VALUE]... [--seed N] [--eps E] [--tol T] [--json] [options]\n"
    "\n"
    "Checks the compiler's derivatives: converts FILE to f64, takes the first output as the\n"
    "loss (its sum if it is not a scalar) and, for every float input and parameter, compares\n"
    "reverse-mode gradients and forward-mode directional derivatives with central finite\n"
    "differences (x +- h v, h = eps * max(1, |x|), |x| the 2-norm for random unit directions):\n"
    "element by element for tensors of at most\n"
    "64 elements (in small models), along 4 seeded random directions for larger ones. Three\n"
    "estimates: steps h and h/2, and a 4-point stencil with step 100 h (less rounding error);\n"
    "the closest one counts (a step across a ReLU kink is no derivative). The relative error of a\n"
    "value is its max abs error over its largest |finite difference|. Exit status 1 on FAIL.\n"
    "\n"
    "  --eps E              finite-difference step scale (default 1e-6)\n"
    "  --tol T              pass when every relative error is <= T (default 1e-6)\n"
    "  --json               {\"loss\", \"eps\", \"tol\", \"wrt\": {NAME: {\"checks\", \"kind\", \"max_abs_error\",\n"
    "                       \"max_rel_error\"}}, \"max_abs_error\", \"max_rel_error\", \"pass\"}\n"
    "\n";

/* Element by element for tensors of at most ELEMENT_LIMIT elements while
 * elements x (elements one run computes) stays within ELEMENT_BUDGET; else
 * RANDOM_DIRECTIONS seeded random directions. */
enum { ELEMENT_LIMIT = 64, RANDOM_DIRECTIONS = 4 };
#define ELEMENT_BUDGET 2e7

static bool wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return true;
  return false;
}

/* ---- names given on the command line ---- */

static const ir_output *find_output(const ir_graph *g, const char *name) {
  int k = ir_graph_output_index(g, name);
  return k >= 0 ? &g->outputs[k] : NULL;
}

/* An input or parameter by name; NULL after reporting. */
static ir_value *find_leaf(const ir_graph *g, const char *name, ir_diag *d) {
  for (int i = 0; i < g->n_inputs; i++)
    if (strcmp(g->inputs[i]->name, name) == 0) return g->inputs[i];
  for (int i = 0; i < g->n_params; i++)
    if (strcmp(g->params[i]->name, name) == 0) return g->params[i];
  char list[1024] = "";
  for (int i = 0; i < g->n_inputs + g->n_params; i++) {
    const ir_value *v = i < g->n_inputs ? g->inputs[i] : g->params[i - g->n_inputs];
    if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
    strncat(list, v->name, sizeof list - strlen(list) - 1);
  }
  ir_error_plain(d, "--wrt %s: the model has no input or parameter of that name (it has: %s)", name,
                 list[0] ? list : "none");
  return NULL;
}

/* The pass settings of o: dumps to stdout, verification, timing, disabled passes. */
static pass_options pass_settings(const tool_compile_opts *o, ir_diag *d) {
  return (pass_options){.diag = d, .verify_each = o->verify_each, .time_passes = o->time_passes, .verbose = o->verbose,
                        .dump_after = o->after, .dump_out = stdout, .dump_format = o->format,
                        .disabled = o->pass_disabled};
}

static void free_tensors(rt_tensor **t, int n) {
  for (int i = 0; t && i < n; i++) rt_tensor_free(t[i]);
  free(t);
}

/* ---- tgc grad ---- */

typedef struct {
  const char *name, *value;
} name_value;

/* Splits NAME=VALUE in place. */
static int split_nv(const char *flag, const char *val, name_value *out, ir_diag *d) {
  const char *eq = val ? strchr(val, '=') : NULL;
  if (!val || !eq || eq == val || !eq[1]) {
    ir_error_plain(d, "%s %s: expected NAME=VALUE", flag, val ? val : "");
    return -1;
  }
  ((char *)val)[eq - val] = 0;
  *out = (name_value){val, eq + 1};
  return 0;
}

/* The flags of tgc grad. */
typedef struct {
  tool_compile_opts o;
  tool_input_spec *specs;    /* --input NAME=VALUE (forward mode: the tangents join them) */
  int n_specs;
  name_value *seeds, *tangs; /* --seed-output, --tangent */
  int n_seeds, n_tangs;
  const char **wrt_names;    /* --wrt, then the --tangent names not in it */
  int n_wrt;
  char *wrt_copy;            /* the --wrt list the names point into */
  uint64_t seed;
  bool json, forward;
  tool_backend backend;
  const char *of;            /* --of */
} grad_args;

/* --wrt NAMES: the comma-separated list, replacing an earlier one. */
static int parse_wrt(grad_args *a, const char *val, int argc, ir_diag *d) {
  if (!val || !*val) {
    ir_error_plain(d, "--wrt needs a comma-separated list of names");
    return -1;
  }
  free(a->wrt_copy);
  if (!(a->wrt_copy = strdup(val))) IR_DIE("out of memory (wrt_copy)");
  a->n_wrt = 0;
  char *save = NULL;
  for (char *t = strtok_r(a->wrt_copy, ",", &save); t && a->n_wrt < argc + 32; t = strtok_r(NULL, ",", &save)) {
    while (*t == ' ') t++;
    if (*t) a->wrt_names[a->n_wrt++] = t;
  }
  return 0;
}

static int parse_grad_args(int argc, char **argv, grad_args *a, ir_diag *d) {
  a->specs = calloc((size_t)argc * 2 + 8, sizeof *a->specs);
  a->seeds = calloc((size_t)argc + 1, sizeof *a->seeds), a->tangs = calloc((size_t)argc + 1, sizeof *a->tangs);
  a->wrt_names = calloc((size_t)argc * 2 + 64, sizeof *a->wrt_names);
  if (!a->specs || !a->seeds || !a->tangs || !a->wrt_names) IR_DIE("out of memory (grad flags)");
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = NULL;
    int r = tool_parse_common(&a->o, argc, argv, &i, d);
    if (r == 0) r = tool_parse_input_flag(argc, argv, &i, a->specs, &a->n_specs, &a->seed, d);
    if (r == 0) r = tool_parse_backend(argc, argv, &i, &a->backend, d);
    if (r < 0) return -1;
    if (r != 0) continue;
    if (tool_flag("--wrt", argc, argv, &i, &val)) {
      r = parse_wrt(a, val, argc, d);
    } else if (tool_flag("--mode", argc, argv, &i, &val)) {
      if (val && strcmp(val, "reverse") == 0) a->forward = false;
      else if (val && strcmp(val, "forward") == 0) a->forward = true;
      else ir_error_plain(d, "--mode %s: expected reverse or forward", val ? val : ""), r = -1;
    } else if (tool_flag("--of", argc, argv, &i, &val)) {
      if (!val || !*val) ir_error_plain(d, "--of needs an output name"), r = -1;
      a->of = val;
    } else if (tool_flag("--seed-output", argc, argv, &i, &val)) {
      r = split_nv("--seed-output", val, &a->seeds[a->n_seeds], d);
      if (r == 0) a->n_seeds++;
    } else if (tool_flag("--tangent", argc, argv, &i, &val)) {
      r = split_nv("--tangent", val, &a->tangs[a->n_tangs], d);
      if (r == 0) a->n_tangs++;
    } else if (strcmp(arg, "--json") == 0) {
      a->json = true;
    } else {
      r = tool_positional("grad", arg, &a->o, d);
    }
    if (r != 0) return -1;
  }
  for (int t = 0; t < a->n_tangs; t++) { /* --tangent names join the wrt list */
    bool listed = false;
    for (int k = 0; k < a->n_wrt; k++) listed |= strcmp(a->wrt_names[k], a->tangs[t].name) == 0;
    if (!listed) a->wrt_names[a->n_wrt++] = a->tangs[t].name;
  }
  if (tool_need_file("grad", &a->o, d) != 0) return -1;
  if (a->n_wrt == 0) {
    ir_error_plain(d, "grad: --wrt NAMES is required (the inputs or parameters to differentiate by)");
    return -1;
  }
  if (!a->forward && a->n_tangs) {
    ir_error_plain(d, "--tangent is for --mode forward");
    return -1;
  }
  if (a->forward && (a->of || a->n_seeds)) {
    ir_error_plain(d, "--of and --seed-output are for --mode reverse (forward mode gives the tangent of every output)");
    return -1;
  }
  return tool_single_device("grad", &a->o, d);
}

static void grad_args_free(grad_args *a) {
  free(a->wrt_copy);
  free(a->wrt_names);
  free(a->specs);
  free(a->seeds);
  free(a->tangs);
}

/* The derivative outputs appended to the model's: outputs [first,
 * first + n) of the graph, keyed by deriv_keys in the report. */
typedef struct {
  ir_value **wrt;          /* the values differentiated by (forward: the seeded ones) */
  int n_wrt;
  ir_value **tan_inputs;   /* forward: the tangent input of each wrt value */
  const char *of_label;    /* reverse: what was differentiated */
  int n_model_outputs;     /* the model's own outputs, before the derivatives */
  int n_deriv;
  const char **deriv_keys;
} grad_built;

/* The --wrt names as the graph's floating-point inputs or parameters. */
static int find_wrt(const ir_graph *g, const grad_args *a, grad_built *b, ir_diag *d) {
  b->n_model_outputs = g->n_outputs;
  b->n_wrt = a->n_wrt;
  b->wrt = calloc((size_t)a->n_wrt + 1, sizeof *b->wrt);
  b->tan_inputs = calloc((size_t)a->n_wrt + 1, sizeof *b->tan_inputs);
  b->deriv_keys = calloc((size_t)(g->n_outputs + a->n_wrt + 1), sizeof *b->deriv_keys);
  if (!b->wrt || !b->tan_inputs || !b->deriv_keys) IR_DIE("out of memory (grad_built)");
  for (int k = 0; k < a->n_wrt; k++) {
    if (!(b->wrt[k] = find_leaf(g, a->wrt_names[k], d))) return -1;
    if (!ir_dtype_is_float(b->wrt[k]->type.dtype)) {
      ir_error_plain(d, "--wrt %s: it is %s; only floating-point values have derivatives", a->wrt_names[k],
                     ir_dtype_name(b->wrt[k]->type.dtype));
      return -1;
    }
  }
  return 0;
}

/* Reverse mode: the loss sum_k V_k * sum(out_k) for --seed-output, else the
 * sum of one output (--of, or the first float one); its gradients appended. */
static int build_reverse(ir_graph *g, const grad_args *a, grad_built *b, pass_options *po, ir_diag *d) {
  int n = a->n_seeds ? a->n_seeds : 1, rc = 0;
  ir_value **outs = calloc((size_t)n, sizeof *outs);
  double *weights = calloc((size_t)n, sizeof *weights);
  if (!outs || !weights) IR_DIE("out of memory (outs || !weights)");
  for (int s = 0; rc == 0 && s < a->n_seeds; s++) {
    const ir_output *out = find_output(g, a->seeds[s].name);
    char *end;
    errno = 0;
    weights[s] = strtod(a->seeds[s].value, &end);
    if (!out || !ir_dtype_is_float(out->value->type.dtype)) {
      ir_error_plain(d, "--seed-output %s: the model has no float output of that name", a->seeds[s].name);
      rc = -1;
    } else if (*end || errno || !isfinite(weights[s])) {
      ir_error_plain(d, "--seed-output %s=%s: expected a number", a->seeds[s].name, a->seeds[s].value);
      rc = -1;
    } else if (s > 0 && out->value->type.dtype != outs[0]->type.dtype) {
      ir_error_plain(d, "--seed-output: the seeded outputs must have one dtype");
      rc = -1;
    }
    if (out) outs[s] = out->value;
  }
  if (a->n_seeds) b->of_label = "seeded outputs";
  const ir_output *out = NULL;
  if (rc == 0 && !a->n_seeds) {
    if (a->of && !(out = find_output(g, a->of))) {
      ir_error_plain(d, "--of %s: the model has no output of that name", a->of);
      rc = -1;
    }
    for (int i = 0; rc == 0 && !out && i < g->n_outputs; i++)
      if (ir_dtype_is_float(g->outputs[i].value->type.dtype)) out = &g->outputs[i];
    if (rc == 0 && (!out || !ir_dtype_is_float(out->value->type.dtype))) {
      ir_error_plain(d, "grad: %s", out ? "--of names an output that is not floating-point" : "the model has no floating-point output");
      rc = -1;
    }
    if (rc == 0) {
      b->of_label = out->name;
      outs[0] = out->value;
      if (out->value->type.rank > 0 && !a->json)
        fprintf(stderr, "tgc: note: output '%s' is not a scalar; differentiating the sum of its elements\n", out->name);
    }
  }
  pass_grad_request req = {outs, a->n_seeds ? weights : NULL, n, b->wrt, b->n_wrt};
  if (rc == 0 && pass_append_gradients(g, &req, po) != 0) rc = -1;
  for (int k = 0; rc == 0 && k < b->n_wrt; k++) b->deriv_keys[b->n_deriv++] = b->wrt[k]->name;
  free(outs);
  free(weights);
  return rc;
}

/* Forward mode: tangents on the --tangent names, else 1 on the first --wrt
 * name; they become inputs bound as --input binds (a->specs grows), and the
 * tangent of every float output is appended. */
static int build_forward(ir_graph *g, grad_args *a, grad_built *b, pass_options *po) {
  int n_t = 0;
  const char **tspec = calloc((size_t)b->n_wrt + 1, sizeof *tspec);
  if (!tspec) IR_DIE("out of memory (tspec)");
  for (int k = 0; k < b->n_wrt; k++) {
    const char *spec = NULL;
    for (int t = 0; t < a->n_tangs; t++)
      if (strcmp(a->tangs[t].name, a->wrt_names[k]) == 0) spec = a->tangs[t].value;
    if (!spec && !(a->n_tangs == 0 && k == 0)) continue;
    tspec[n_t] = spec ? spec : "1";
    b->wrt[n_t++] = b->wrt[k]; /* the "wrt" report lists the seeded values only */
  }
  b->n_wrt = n_t;
  int rc = pass_append_tangents(g, b->wrt, b->n_wrt, b->tan_inputs, po) != 0 ? -1 : 0;
  for (int k = 0; rc == 0 && k < b->n_wrt; k++) a->specs[a->n_specs++] = (tool_input_spec){b->tan_inputs[k]->name, tspec[k]};
  for (int i = 0; rc == 0 && i < b->n_model_outputs; i++)
    if (ir_dtype_is_float(g->outputs[i].value->type.dtype)) b->deriv_keys[b->n_deriv++] = g->outputs[i].name;
  free(tspec);
  return rc;
}

static void print_grad_json(const ir_graph *g, const grad_args *a, const grad_built *b, rt_tensor *const *inputs,
                            rt_tensor *const *outputs) {
  json_t *root = json_object(), *outs = json_object(), *ders = json_object();
  json_object_set_new(root, "mode", json_string(a->forward ? "forward" : "reverse"));
  if (a->forward) {
    json_t *w = json_object();
    for (int k = 0; k < b->n_wrt; k++)
      json_object_set_new(w, b->wrt[k]->name, tool_tensor_json(inputs[ir_graph_input_index(g, b->tan_inputs[k]->name)]));
    json_object_set_new(root, "wrt", w);
  } else {
    json_object_set_new(root, "of", json_string(b->of_label));
  }
  for (int i = 0; i < b->n_deriv; i++)
    json_object_set_new(ders, b->deriv_keys[i], tool_tensor_json(outputs[b->n_model_outputs + i]));
  json_object_set_new(root, a->forward ? "tangents" : "gradients", ders);
  for (int i = 0; i < b->n_model_outputs; i++) json_object_set_new(outs, g->outputs[i].name, tool_tensor_json(outputs[i]));
  json_object_set_new(root, "outputs", outs);
  json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  fputc('\n', stdout);
  json_decref(root);
}

static void print_grad_text(const ir_graph *g, const grad_args *a, const grad_built *b, rt_tensor *const *outputs) {
  for (int i = 0; i < b->n_model_outputs; i++) tool_print_tensor(stdout, g->outputs[i].name, outputs[i]);
  if (a->forward) {
    printf("tangents for");
    for (int k = 0; k < b->n_wrt; k++) printf("%s %s", k ? "," : "", b->wrt[k]->name);
    printf(" (t_NAME: the derivative of output NAME along the input tangents):\n");
  } else {
    printf("gradients of %s:\n", b->of_label);
  }
  for (int i = 0; i < b->n_deriv; i++)
    tool_print_tensor(stdout, g->outputs[b->n_model_outputs + i].name, outputs[b->n_model_outputs + i]);
}

int tool_cmd_grad(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    printf("%s%s\n%s", grad_help, tool_backend_help, tool_common_help);
    return 0;
  }
  ir_diag *d = tool_diag_new();
  grad_args a = {0};
  grad_built b = {0};
  char *text = NULL;
  ir_graph *g = NULL;
  int rc = parse_grad_args(argc, argv, &a, d);
  if (rc == 0 && !(g = tool_load(&a.o, d, &text))) rc = -1;
  pass_options po = pass_settings(&a.o, d);
  if (rc == 0 && pass_run_until_autodiff(g, &po) != 0) rc = -1;
  if (rc == 0 && tool_check_input_specs(g, a.specs, a.n_specs, d) != 0) rc = -1;
  if (rc == 0) rc = find_wrt(g, &a, &b, d);
  if (rc == 0) rc = a.forward ? build_forward(g, &a, &b, &po) : build_reverse(g, &a, &b, &po, d);
  if (rc == 0 && tool_check_memory(g, d) != 0) rc = -1;
  tool_slots slots = {0};
  if (g) tool_alloc_slots(g, &slots);
  if (rc == 0 && tool_bind_all(g, a.specs, a.n_specs, a.seed, a.json, slots.inputs, slots.params, d) != 0) rc = -1;
  if (rc == 0 && tool_execute(&a.backend, g, slots.inputs, slots.params, slots.outputs, NULL, d) != 0) rc = -1;
  if (rc == 0 && a.json) print_grad_json(g, &a, &b, slots.inputs, slots.outputs);
  else if (rc == 0) print_grad_text(g, &a, &b, slots.outputs);
  tool_free_slots(g, &slots);
  free(b.deriv_keys);
  free(b.tan_inputs);
  free(b.wrt);
  ir_graph_free(g);
  free(text);
  grad_args_free(&a);
  ir_diag_free(d);
  return rc == 0 ? 0 : 1;
}

/* ---- tgc gradcheck ---- */

typedef struct {
  const char *name;
  rt_tensor *x;         /* its tensor (an input or parameter, f64) */
  rt_tensor *tangent;   /* the tangent input of the derivative graph */
  int grad_out;         /* output index of its gradient */
  int checks;
  bool elements;
  double max_abs, max_fd, max_rel;
} wrt_check;

static int parse_positive(const char *flag, const char *val, double *out, ir_diag *d) {
  char *end;
  errno = 0;
  double v = val ? strtod(val, &end) : 0;
  if (!val || !*val || *end || errno || !(v > 0) || !isfinite(v)) {
    ir_error_plain(d, "%s %s: expected a positive number", flag, val ? val : "");
    return -1;
  }
  *out = v;
  return 0;
}

/* The flags of tgc gradcheck. */
typedef struct {
  tool_compile_opts o;
  tool_input_spec *specs;
  int n_specs;
  uint64_t seed;
  double eps, tol;
  bool json;
  tool_backend backend;
} gradcheck_args;

static int parse_gradcheck_args(int argc, char **argv, gradcheck_args *a, ir_diag *d) {
  if (!(a->specs = calloc((size_t)argc + 1, sizeof *a->specs))) IR_DIE("out of memory (specs)");
  a->eps = 1e-6, a->tol = 1e-6;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *val = NULL;
    int r = tool_parse_common(&a->o, argc, argv, &i, d);
    if (r == 0) r = tool_parse_input_flag(argc, argv, &i, a->specs, &a->n_specs, &a->seed, d);
    if (r == 0) r = tool_parse_backend(argc, argv, &i, &a->backend, d);
    if (r < 0) return -1;
    if (r != 0) continue;
    if (tool_flag("--eps", argc, argv, &i, &val)) r = parse_positive("--eps", val, &a->eps, d);
    else if (tool_flag("--tol", argc, argv, &i, &val)) r = parse_positive("--tol", val, &a->tol, d);
    else if (strcmp(arg, "--json") == 0) a->json = true;
    else r = tool_positional("gradcheck", arg, &a->o, d);
    if (r != 0) return -1;
  }
  if (tool_need_file("gradcheck", &a->o, d) != 0) return -1;
  return tool_single_device("gradcheck", &a->o, d);
}

/* The two graphs of pass_build_gradcheck and their tensors: the loss
 * graph's inputs and parameters, shared with the derivative graph, whose
 * tangent inputs come after. */
typedef struct {
  const gradcheck_args *a;
  ir_graph *gl, *gd;         /* the loss alone; the loss and its derivatives */
  rt_tensor **in_l, **par, **in_d, **out_l, **out_d;
  double run_cost;           /* elements one run of gd computes: bounds element-by-element checks */
  double loss0;              /* the loss at x */
} gradcheck_run;

/* Binds the tensors and runs the derivatives at x: the loss and every
 * gradient (zero tangents). */
static int gradcheck_bind(gradcheck_run *r, const pass_gradcheck *gc, wrt_check *w, int n_w, ir_diag *d) {
  ir_graph *gl = r->gl, *gd = r->gd;
  r->in_l = calloc((size_t)gl->n_inputs + 1, sizeof *r->in_l);
  r->par = calloc((size_t)gl->n_params + 1, sizeof *r->par);
  r->in_d = calloc((size_t)gd->n_inputs + 1, sizeof *r->in_d);
  r->out_l = calloc((size_t)gl->n_outputs + 1, sizeof *r->out_l);
  r->out_d = calloc((size_t)gd->n_outputs + 1, sizeof *r->out_d);
  if (!r->in_l || !r->par || !r->in_d || !r->out_l || !r->out_d) IR_DIE("out of memory (gradcheck tensors)");
  if (tool_bind_all(gl, r->a->specs, r->a->n_specs, r->a->seed, r->a->json, r->in_l, r->par, d) != 0) return -1;
  for (int i = 0; i < gd->n_inputs; i++) {
    if (i < gl->n_inputs) r->in_d[i] = r->in_l[i];
    else if (!(r->in_d[i] = rt_tensor_new(&gd->inputs[i]->type))) return -1;
  }
  for (int k = 0; k < n_w; k++) {
    int leaf = gc->leaf[k];
    w[k].x = leaf < gl->n_inputs ? r->in_d[leaf] : r->par[leaf - gl->n_inputs];
    w[k].tangent = r->in_d[gc->tangent_input[k]];
  }
  if (tool_execute(&r->a->backend, gd, r->in_d, r->par, r->out_d, NULL, d) != 0) return -1;
  r->loss0 = rt_tensor_get(r->out_d[0], 0);
  for (int k = 0; k < gd->n_nodes; k++)
    for (int j = 0; j < gd->nodes[k]->n_out; j++) r->run_cost += (double)ir_type_numel(&gd->nodes[k]->out[j]->type);
  return 0;
}

static void gradcheck_run_free(gradcheck_run *r) {
  const ir_graph *gl = r->gl, *gd = r->gd;
  if (gl) {
    for (int i = 0; i < gl->n_inputs; i++) rt_tensor_free(r->in_l ? r->in_l[i] : NULL);
    for (int i = 0; i < gl->n_params; i++) rt_tensor_free(r->par ? r->par[i] : NULL);
    for (int i = 0; i < gl->n_outputs; i++) rt_tensor_free(r->out_l ? r->out_l[i] : NULL);
  }
  if (gd && gl) {
    for (int i = gl->n_inputs; i < gd->n_inputs; i++) rt_tensor_free(r->in_d ? r->in_d[i] : NULL);
    for (int i = 0; i < gd->n_outputs; i++) rt_tensor_free(r->out_d ? r->out_d[i] : NULL);
  }
  free(r->in_l);
  free(r->par);
  free(r->in_d);
  free(r->out_l);
  free(r->out_d);
}

/* The derivative of the loss along v at x (x0 saved, h the step) by central
 * differences with steps h and h/2, and the 4-point stencil
 * (8 (f(H) - f(-H)) - (f(2H) - f(-2H))) / 12H with H = 100 h, whose larger
 * step has 100x less rounding error and O(H^4) truncation error on smooth
 * functions. The estimate closest to the derivatives (rev, fwd) is used: a
 * step across a kink (relu, abs, max) is no derivative, and rarely spoils
 * all three; a wrong derivative disagrees with all. *err: its distance. */
static int finite_difference(gradcheck_run *r, wrt_check *c, const rt_tensor *x0, const rt_tensor *v, double h,
                             double rev, double fwd, double *fd, double *err, ir_diag *d) {
  static const double mult[4] = {1, -1, 2, -2};
  int64_t n = ir_type_numel(&c->x->type);
  double l[4];
  *fd = NAN, *err = INFINITY;
  int rc = 0;
  for (int est = 0; rc == 0 && est < 3; est++) {
    double step = est == 0 ? h : est == 1 ? h / 2 : 100 * h;
    int points = est == 2 ? 4 : 2;
    for (int pt = 0; rc == 0 && pt < points; pt++) {
      for (int64_t e = 0; e < n; e++) rt_tensor_set(c->x, e, rt_tensor_get(x0, e) + mult[pt] * step * rt_tensor_get(v, e));
      if (tool_execute(&r->a->backend, r->gl, r->in_l, r->par, r->out_l, NULL, d) != 0) rc = -1;
      else l[pt] = rt_tensor_get(r->out_l[0], 0);
      rt_tensor_free(r->out_l[0]);
      r->out_l[0] = NULL;
    }
    if (rc != 0) break;
    double f = est < 2 ? (l[0] - l[1]) / (2 * step) : (8 * (l[0] - l[1]) - (l[2] - l[3])) / (12 * step);
    double e = fmax(fabs(rev - f), fabs(fwd - f));
    if (e < *err || (est == 0 && isnan(e))) *fd = f, *err = e;
  }
  memcpy(c->x->data, x0->data, x0->nbytes);
  return rc;
}

/* Value c checked along its directions: unit vectors e_k (small tensors),
 * else random normal directions scaled to norm 1 (a small step per element:
 * few ReLU kinks crossed in large models); reverse mode <grad, v>, forward
 * mode the jvp output with tangent v, each against the finite differences. */
static int check_value(gradcheck_run *r, wrt_check *c, ir_diag *d) {
  const gradcheck_args *a = r->a;
  int64_t n = ir_type_numel(&c->x->type);
  c->elements = n <= ELEMENT_LIMIT && (double)n * r->run_cost <= ELEMENT_BUDGET;
  int n_dir = c->elements ? (int)n : RANDOM_DIRECTIONS, rc = 0;
  rt_tensor *x0 = rt_tensor_new(&c->x->type), *v = rt_tensor_new(&c->x->type);
  if (!x0 || !v) IR_DIE("out of memory (x0 || !v)");
  memcpy(x0->data, c->x->data, x0->nbytes);
  double xnorm = 0; /* |x| for directions: the 2-norm, as the directions have norm 1 */
  for (int64_t e = 0; e < n; e++) xnorm += rt_tensor_get(x0, e) * rt_tensor_get(x0, e);
  xnorm = sqrt(xnorm);
  uint64_t stream = rt_hash_name(c->name);
  for (int dir = 0; rc == 0 && dir < n_dir; dir++) {
    double norm = 0;
    for (int64_t e = 0; e < n; e++) {
      double x = c->elements ? (e == dir) : rt_random_normal(a->seed, stream, (uint64_t)dir * (uint64_t)n + (uint64_t)e);
      rt_tensor_set(v, e, x);
      norm += x * x;
    }
    norm = sqrt(norm);
    for (int64_t e = 0; norm > 0 && !c->elements && e < n; e++) rt_tensor_set(v, e, rt_tensor_get(v, e) / norm);
    double h = a->eps * fmax(1.0, c->elements ? fabs(rt_tensor_get(x0, dir)) : xnorm);
    double rev = 0;
    for (int64_t e = 0; e < n; e++) rev += rt_tensor_get(r->out_d[c->grad_out], e) * rt_tensor_get(v, e);
    memcpy(c->tangent->data, v->data, v->nbytes);
    rt_tensor **o2 = calloc((size_t)r->gd->n_outputs, sizeof *o2);
    if (!o2) IR_DIE("out of memory (o2)");
    if (tool_execute(&a->backend, r->gd, r->in_d, r->par, o2, NULL, d) != 0) rc = -1;
    double fwd = rc == 0 ? rt_tensor_get(o2[1], 0) : 0, fd = NAN, err = INFINITY;
    free_tensors(o2, r->gd->n_outputs);
    memset(c->tangent->data, 0, c->tangent->nbytes);
    if (rc == 0) rc = finite_difference(r, c, x0, v, h, rev, fwd, &fd, &err, d);
    if (rc != 0) break;
    c->max_abs = fmax(c->max_abs, err);
    if (isnan(rev) || isnan(fwd) || isnan(fd)) c->max_abs = NAN;
    c->max_fd = fmax(c->max_fd, fabs(fd));
    c->checks++;
  }
  c->max_rel = c->max_abs == 0 ? 0 : c->max_abs / fmax(c->max_fd, 1e-300);
  if (isnan(c->max_abs)) c->max_rel = NAN;
  rt_tensor_free(x0);
  rt_tensor_free(v);
  return rc;
}

static json_t *json_error(double x) { return isnan(x) ? json_string("nan") : json_real(x); }

static void print_gradcheck_json(const gradcheck_args *a, const char *loss_name, bool summed, double loss0,
                                 const wrt_check *w, int n_w, double total_abs, double total_rel, bool pass) {
  json_t *root = json_object(), *jw = json_object();
  char lbuf[300];
  snprintf(lbuf, sizeof lbuf, summed ? "sum(%s)" : "%s", loss_name);
  json_object_set_new(root, "loss", json_string(lbuf));
  json_object_set_new(root, "loss_value", json_real(loss0));
  json_object_set_new(root, "eps", json_real(a->eps));
  json_object_set_new(root, "tol", json_real(a->tol));
  for (int k = 0; k < n_w; k++) {
    json_t *e = json_object();
    json_object_set_new(e, "checks", json_integer(w[k].checks));
    json_object_set_new(e, "kind", json_string(w[k].elements ? "elements" : "directions"));
    json_object_set_new(e, "max_abs_error", json_error(w[k].max_abs));
    json_object_set_new(e, "max_rel_error", json_error(w[k].max_rel));
    json_object_set_new(jw, w[k].name, e);
  }
  json_object_set_new(root, "wrt", jw);
  json_object_set_new(root, "max_abs_error", json_error(total_abs));
  json_object_set_new(root, "max_rel_error", json_error(total_rel));
  json_object_set_new(root, "pass", json_boolean(pass));
  json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  fputc('\n', stdout);
  json_decref(root);
}

static void print_gradcheck_text(const gradcheck_args *a, const char *loss_name, bool summed, double loss0,
                                 const wrt_check *w, int n_w, double total_abs, double total_rel, bool pass) {
  printf("gradcheck %s: loss = %s%s%s = %.17g (f64), eps %g, tol %g\n", a->o.file, summed ? "sum(" : "", loss_name,
         summed ? ") (the first output is not a scalar)" : " (the first output)", loss0, a->eps, a->tol);
  printf("  %-24s %-14s %14s %14s\n", "value", "checks", "max abs err", "max rel err");
  for (int k = 0; k < n_w; k++) {
    char checks[64];
    snprintf(checks, sizeof checks, "%d %s", w[k].checks, w[k].elements ? "elements" : "directions");
    printf("  %-24s %-14s %14.3e %14.3e\n", w[k].name, checks, w[k].max_abs, w[k].max_rel);
  }
  printf("  %-24s %-14s %14.3e %14.3e\n", "all", "", total_abs, total_rel);
  printf("%s: reverse and forward mode agree with central differences %s rel %g\n", pass ? "PASS" : "FAIL",
         pass ? "within" : "NOT within", a->tol);
}

int tool_cmd_gradcheck(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    printf("%s%s\n%s", gradcheck_help, tool_backend_help, tool_common_help);
    return 0;
  }
  ir_diag *d = tool_diag_new();
  gradcheck_args a = {0};
  char *text = NULL;
  ir_graph *g = NULL;
  pass_gradcheck gc = {0};
  int rc = parse_gradcheck_args(argc, argv, &a, d);
  if (rc == 0 && !(g = tool_load(&a.o, d, &text))) rc = -1;
  pass_options po = pass_settings(&a.o, d);
  if (rc == 0 && pass_run_until_autodiff(g, &po) != 0) rc = -1;
  if (rc == 0 && tool_check_input_specs(g, a.specs, a.n_specs, d) != 0) rc = -1;
  if (rc == 0 && tool_check_memory(g, d) != 0) rc = -1;
  if (rc == 0 && pass_build_gradcheck(g, &gc, d) != 0) rc = -1;
  gradcheck_run r = {.a = &a, .gl = gc.loss, .gd = gc.deriv};
  if (rc == 0 && tool_check_memory(r.gd, d) != 0) rc = -1; /* what runs: f64, with the derivatives */
  int n_w = rc == 0 ? gc.n_checked : 0;
  wrt_check *w = calloc((size_t)n_w + 1, sizeof *w);
  if (!w) IR_DIE("out of memory (w)");
  for (int k = 0; k < n_w; k++) {
    int leaf = gc.leaf[k];
    w[k].name = leaf < r.gl->n_inputs ? r.gl->inputs[leaf]->name : r.gl->params[leaf - r.gl->n_inputs]->name;
    w[k].grad_out = gc.grad_output[k];
  }
  if (rc == 0) rc = gradcheck_bind(&r, &gc, w, n_w, d);
  double total_abs = 0, total_rel = 0;
  for (int k = 0; rc == 0 && k < n_w; k++) {
    rc = check_value(&r, &w[k], d);
    total_abs = isnan(w[k].max_abs) || isnan(total_abs) ? NAN : fmax(total_abs, w[k].max_abs);
    total_rel = isnan(w[k].max_rel) || isnan(total_rel) ? NAN : fmax(total_rel, w[k].max_rel);
  }
  bool pass = rc == 0 && total_rel <= a.tol; /* NaN fails */
  const char *loss_name = g && g->n_outputs ? g->outputs[0].name : "?";
  if (rc == 0 && a.json) print_gradcheck_json(&a, loss_name, gc.loss_summed, r.loss0, w, n_w, total_abs, total_rel, pass);
  else if (rc == 0) print_gradcheck_text(&a, loss_name, gc.loss_summed, r.loss0, w, n_w, total_abs, total_rel, pass);
  if (rc == 0 && !pass) rc = -1;
  gradcheck_run_free(&r);
  free(w);
  pass_gradcheck_free(&gc);
  ir_graph_free(g);
  free(text);
  free(a.specs);
  ir_diag_free(d);
  return rc == 0 ? 0 : 1;
}
