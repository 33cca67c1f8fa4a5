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

int tool_cmd_grad(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    printf("%s%s\n%s", grad_help, tool_backend_help, tool_common_help);
    return 0;
  }
  ir_diag *d = tool_diag_new();
  tool_compile_opts o = {0};
  tool_input_spec *specs = calloc((size_t)argc * 2 + 8, sizeof *specs);
  name_value *seeds = calloc((size_t)argc + 1, sizeof *seeds), *tangs = calloc((size_t)argc + 1, sizeof *tangs);
  const char **wrt_names = calloc((size_t)argc * 2 + 64, sizeof *wrt_names);
  if (!specs || !seeds || !tangs || !wrt_names) IR_DIE("out of memory (specs || !seeds || !tangs || !wrt_names)");
  int n_specs = 0, n_seeds = 0, n_tangs = 0, n_wrt = 0, rc = 0;
  uint64_t seed = 0;
  bool json = false, forward = false;
  tool_backend backend = {0};
  const char *of = NULL;
  char *wrt_copy = NULL;
  for (int i = 1; i < argc && rc == 0; i++) {
    const char *a = argv[i], *val = NULL;
    int r = tool_parse_common(&o, argc, argv, &i, d);
    if (r == 0) r = tool_parse_input_flag(argc, argv, &i, specs, &n_specs, &seed, d);
    if (r == 0) r = tool_parse_backend(argc, argv, &i, &backend, d);
    if (r < 0) rc = 1;
    if (r != 0) continue;
    if (tool_flag("--wrt", argc, argv, &i, &val)) {
      if (!val || !*val) {
        ir_error_plain(d, "--wrt needs a comma-separated list of names");
        rc = 1;
        continue;
      }
      free(wrt_copy);
      wrt_copy = strdup(val);
      if (!wrt_copy) IR_DIE("out of memory (wrt_copy)");
      n_wrt = 0;
      char *save = NULL;
      for (char *t = strtok_r(wrt_copy, ",", &save); t && n_wrt < argc + 32; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ') t++;
        if (*t) wrt_names[n_wrt++] = t;
      }
    } else if (tool_flag("--mode", argc, argv, &i, &val)) {
      if (val && strcmp(val, "reverse") == 0) forward = false;
      else if (val && strcmp(val, "forward") == 0) forward = true;
      else {
        ir_error_plain(d, "--mode %s: expected reverse or forward", val ? val : "");
        rc = 1;
      }
    } else if (tool_flag("--of", argc, argv, &i, &val)) {
      if (!val || !*val) {
        ir_error_plain(d, "--of needs an output name");
        rc = 1;
      }
      of = val;
    } else if (tool_flag("--seed-output", argc, argv, &i, &val)) {
      if (split_nv("--seed-output", val, &seeds[n_seeds], d) != 0) rc = 1;
      else n_seeds++;
    } else if (tool_flag("--tangent", argc, argv, &i, &val)) {
      if (split_nv("--tangent", val, &tangs[n_tangs], d) != 0) rc = 1;
      else n_tangs++;
    } else if (strcmp(a, "--json") == 0) {
      json = true;
    } else if (tool_positional("grad", a, &o, d) != 0) {
      rc = 1;
    }
  }
  /* --tangent names join the wrt list */
  for (int t = 0; rc == 0 && t < n_tangs; t++) {
    bool listed = false;
    for (int k = 0; k < n_wrt; k++) listed |= strcmp(wrt_names[k], tangs[t].name) == 0;
    if (!listed) wrt_names[n_wrt++] = tangs[t].name;
  }
  if (rc == 0 && tool_need_file("grad", &o, d) != 0) rc = 1;
  if (rc == 0 && n_wrt == 0) {
    ir_error_plain(d, "grad: --wrt NAMES is required (the inputs or parameters to differentiate by)");
    rc = 1;
  }
  if (rc == 0 && !forward && n_tangs) {
    ir_error_plain(d, "--tangent is for --mode forward");
    rc = 1;
  }
  if (rc == 0 && forward && (of || n_seeds)) {
    ir_error_plain(d, "--of and --seed-output are for --mode reverse (forward mode gives the tangent of every output)");
    rc = 1;
  }
  char *text = NULL;
  ir_graph *g = NULL;
  if (rc == 0) rc = tool_single_device("grad", &o, d);
  if (rc == 0 && !(g = tool_load(&o, d, &text))) rc = 1;
  pass_options po = pass_settings(&o, d);
  if (rc == 0 && pass_run_until_autodiff(g, &po) != 0) rc = 1;
  if (rc == 0 && tool_check_input_specs(g, specs, n_specs, d) != 0) rc = 1;
  ir_value **wrt = calloc((size_t)n_wrt + 1, sizeof *wrt);
  if (!wrt) IR_DIE("out of memory (wrt)");
  for (int k = 0; rc == 0 && k < n_wrt; k++) {
    if (!(wrt[k] = find_leaf(g, wrt_names[k], d))) rc = 1;
    else if (!ir_dtype_is_float(wrt[k]->type.dtype)) {
      ir_error_plain(d, "--wrt %s: it is %s; only floating-point values have derivatives", wrt_names[k],
                     ir_dtype_name(wrt[k]->type.dtype));
      rc = 1;
    }
  }
  int n_fwd_outputs = g ? g->n_outputs : 0;
  const char *of_label = NULL;
  /* derivative outputs appended after the model's: [first_deriv, first_deriv + n_deriv) */
  int first_deriv = n_fwd_outputs, n_deriv = 0;
  const char **deriv_keys = calloc((size_t)(n_fwd_outputs + n_wrt + 1), sizeof *deriv_keys);
  ir_value **tan_inputs = calloc((size_t)n_wrt + 1, sizeof *tan_inputs);
  ir_value **outs = calloc((size_t)n_seeds + 1, sizeof *outs);
  double *weights = calloc((size_t)n_seeds + 1, sizeof *weights);
  if (!deriv_keys || !tan_inputs || !outs || !weights) IR_DIE("out of memory (deriv_keys || !tan_inputs || !outs || !weights)");
  if (rc == 0 && !forward) {
    /* the loss: sum_k V_k * sum(out_k) for --seed-output, else the sum of one output */
    for (int s = 0; rc == 0 && s < n_seeds; s++) {
      const ir_output *out = find_output(g, seeds[s].name);
      char *end;
      errno = 0;
      weights[s] = strtod(seeds[s].value, &end);
      if (!out || !ir_dtype_is_float(out->value->type.dtype)) {
        ir_error_plain(d, "--seed-output %s: the model has no float output of that name", seeds[s].name);
        rc = 1;
      } else if (*end || errno || !isfinite(weights[s])) {
        ir_error_plain(d, "--seed-output %s=%s: expected a number", seeds[s].name, seeds[s].value);
        rc = 1;
      } else if (s > 0 && out->value->type.dtype != outs[0]->type.dtype) {
        ir_error_plain(d, "--seed-output: the seeded outputs must have one dtype");
        rc = 1;
      }
      if (out) outs[s] = out->value;
    }
    if (n_seeds) of_label = "seeded outputs";
    const ir_output *out = NULL;
    if (!n_seeds && of && !(out = find_output(g, of))) {
      ir_error_plain(d, "--of %s: the model has no output of that name", of);
      rc = 1;
    }
    for (int i = 0; rc == 0 && !n_seeds && !out && i < g->n_outputs; i++)
      if (ir_dtype_is_float(g->outputs[i].value->type.dtype)) out = &g->outputs[i];
    if (rc == 0 && !n_seeds && (!out || !ir_dtype_is_float(out->value->type.dtype))) {
      ir_error_plain(d, "grad: %s", out ? "--of names an output that is not floating-point" : "the model has no floating-point output");
      rc = 1;
    }
    if (rc == 0 && !n_seeds) {
      of_label = out->name;
      outs[0] = out->value;
      if (out->value->type.rank > 0 && !json)
        fprintf(stderr, "tgc: note: output '%s' is not a scalar; differentiating the sum of its elements\n",
                out->name);
    }
    pass_grad_request req = {outs, n_seeds ? weights : NULL, n_seeds ? n_seeds : 1, wrt, n_wrt};
    if (rc == 0 && pass_append_gradients(g, &req, &po) != 0) rc = 1;
    for (int k = 0; rc == 0 && k < n_wrt; k++) deriv_keys[n_deriv++] = wrt[k]->name;
  } else if (rc == 0) {
    /* tangents on the --tangent names, else 1 on the first --wrt name */
    int n_t = 0;
    const char **tspec = calloc((size_t)n_wrt + 1, sizeof *tspec);
    if (!tspec) IR_DIE("out of memory (tspec)");
    for (int k = 0; k < n_wrt; k++) {
      const char *spec = NULL;
      for (int t = 0; t < n_tangs; t++)
        if (strcmp(tangs[t].name, wrt_names[k]) == 0) spec = tangs[t].value;
      if (!spec && !(n_tangs == 0 && k == 0)) continue;
      tspec[n_t] = spec ? spec : "1";
      wrt[n_t++] = wrt[k]; /* the "wrt" report lists the seeded values only */
    }
    n_wrt = n_t;
    if (pass_append_tangents(g, wrt, n_wrt, tan_inputs, &po) != 0) rc = 1;
    for (int k = 0; rc == 0 && k < n_wrt; k++) specs[n_specs++] = (tool_input_spec){tan_inputs[k]->name, tspec[k]};
    for (int i = 0; rc == 0 && i < n_fwd_outputs; i++)
      if (ir_dtype_is_float(g->outputs[i].value->type.dtype)) deriv_keys[n_deriv++] = g->outputs[i].name;
    free(tspec);
  }
  if (rc == 0 && tool_check_memory(g, d) != 0) rc = 1;
  tool_slots slots = {0};
  if (g) tool_alloc_slots(g, &slots);
  rt_tensor **inputs = slots.inputs, **params = slots.params, **outputs = slots.outputs;
  if (rc == 0 && tool_bind_all(g, specs, n_specs, seed, json, inputs, params, d) != 0) rc = 1;
  if (rc == 0 && tool_execute(&backend, g, inputs, params, outputs, NULL, d) != 0) rc = 1;
  if (rc == 0 && json) {
    json_t *root = json_object(), *outs = json_object(), *ders = json_object();
    json_object_set_new(root, "mode", json_string(forward ? "forward" : "reverse"));
    if (forward) {
      json_t *w = json_object();
      for (int k = 0; k < n_wrt; k++) {
        int at = -1;
        for (int i = 0; i < g->n_inputs; i++)
          if (g->inputs[i] == tan_inputs[k]) at = i;
        json_object_set_new(w, wrt[k]->name, tool_tensor_json(inputs[at]));
      }
      json_object_set_new(root, "wrt", w);
    } else {
      json_object_set_new(root, "of", json_string(of_label));
    }
    for (int i = 0; i < n_deriv; i++)
      json_object_set_new(ders, deriv_keys[i], tool_tensor_json(outputs[first_deriv + i]));
    json_object_set_new(root, forward ? "tangents" : "gradients", ders);
    for (int i = 0; i < n_fwd_outputs; i++) json_object_set_new(outs, g->outputs[i].name, tool_tensor_json(outputs[i]));
    json_object_set_new(root, "outputs", outs);
    json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    fputc('\n', stdout);
    json_decref(root);
  } else if (rc == 0) {
    for (int i = 0; i < n_fwd_outputs; i++) tool_print_tensor(stdout, g->outputs[i].name, outputs[i]);
    if (forward) {
      printf("tangents for");
      for (int k = 0; k < n_wrt; k++) printf("%s %s", k ? "," : "", wrt[k]->name);
      printf(" (t_NAME: the derivative of output NAME along the input tangents):\n");
    } else {
      printf("gradients of %s:\n", of_label);
    }
    for (int i = 0; i < n_deriv; i++)
      tool_print_tensor(stdout, g->outputs[first_deriv + i].name, outputs[first_deriv + i]);
  }
  tool_free_slots(g, &slots);
  free(deriv_keys);
  free(tan_inputs);
  free(outs);
  free(weights);
  free(wrt);
  ir_graph_free(g);
  free(text);
  free(wrt_copy);
  free(wrt_names);
  free(specs);
  free(seeds);
  free(tangs);
  ir_diag_free(d);
  return rc;
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

int tool_cmd_gradcheck(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    printf("%s%s\n%s", gradcheck_help, tool_backend_help, tool_common_help);
    return 0;
  }
  ir_diag *d = tool_diag_new();
  tool_compile_opts o = {0};
  tool_input_spec *specs = calloc((size_t)argc + 1, sizeof *specs);
  if (!specs) IR_DIE("out of memory (specs)");
  int n_specs = 0, rc = 0;
  uint64_t seed = 0;
  double eps = 1e-6, tol = 1e-6;
  bool json = false;
  tool_backend backend = {0};
  for (int i = 1; i < argc && rc == 0; i++) {
    const char *a = argv[i], *val = NULL;
    int r = tool_parse_common(&o, argc, argv, &i, d);
    if (r == 0) r = tool_parse_input_flag(argc, argv, &i, specs, &n_specs, &seed, d);
    if (r == 0) r = tool_parse_backend(argc, argv, &i, &backend, d);
    if (r < 0) rc = 1;
    if (r != 0) continue;
    if (tool_flag("--eps", argc, argv, &i, &val)) {
      if (parse_positive("--eps", val, &eps, d) != 0) rc = 1;
    } else if (tool_flag("--tol", argc, argv, &i, &val)) {
      if (parse_positive("--tol", val, &tol, d) != 0) rc = 1;
    } else if (strcmp(a, "--json") == 0) {
      json = true;
    } else if (tool_positional("gradcheck", a, &o, d) != 0) {
      rc = 1;
    }
  }
  if (rc == 0 && tool_need_file("gradcheck", &o, d) != 0) rc = 1;
  char *text = NULL;
  ir_graph *g = NULL;
  pass_gradcheck gc = {0};
  if (rc == 0) rc = tool_single_device("gradcheck", &o, d);
  if (rc == 0 && !(g = tool_load(&o, d, &text))) rc = 1;
  pass_options po = pass_settings(&o, d);
  if (rc == 0 && pass_run_until_autodiff(g, &po) != 0) rc = 1;
  if (rc == 0 && tool_check_input_specs(g, specs, n_specs, d) != 0) rc = 1;
  if (rc == 0 && tool_check_memory(g, d) != 0) rc = 1;
  if (rc == 0 && pass_build_gradcheck(g, &gc, d) != 0) rc = 1;
  ir_graph *gl = gc.loss, *gd = gc.deriv; /* the loss alone; the loss and its derivatives */
  if (rc == 0 && tool_check_memory(gd, d) != 0) rc = 1; /* what runs: f64, with the derivatives */
  bool summed = gc.loss_summed;
  int n_w = gc.n_checked;
  wrt_check *w = calloc((size_t)n_w + 1, sizeof *w);
  if (!w) IR_DIE("out of memory (w)");
  for (int k = 0; k < n_w; k++) {
    int leaf = gc.leaf[k];
    w[k].name = leaf < gl->n_inputs ? gl->inputs[leaf]->name : gl->params[leaf - gl->n_inputs]->name;
    w[k].grad_out = gc.grad_output[k];
  }
  /* tensors: the loss graph's inputs/params, shared with the derivative
   * graph, whose tangent inputs come after */
  rt_tensor **in_l = NULL, **par = NULL, **in_d = NULL, **out_l = NULL, **out_d = NULL;
  if (rc == 0) {
    in_l = calloc((size_t)gl->n_inputs + 1, sizeof *in_l);
    par = calloc((size_t)gl->n_params + 1, sizeof *par);
    in_d = calloc((size_t)gd->n_inputs + 1, sizeof *in_d);
    out_l = calloc((size_t)gl->n_outputs + 1, sizeof *out_l);
    out_d = calloc((size_t)gd->n_outputs + 1, sizeof *out_d);
    if (!in_l || !par || !in_d || !out_l || !out_d) IR_DIE("out of memory (in_l || !par || !in_d || !out_l || !out_d)");
    if (tool_bind_all(gl, specs, n_specs, seed, json, in_l, par, d) != 0) rc = 1;
  }
  for (int i = 0; rc == 0 && i < gd->n_inputs; i++) {
    if (i < gl->n_inputs) in_d[i] = in_l[i];
    else if (!(in_d[i] = rt_tensor_new(&gd->inputs[i]->type))) rc = 1;
  }
  for (int k = 0; rc == 0 && k < n_w; k++) {
    int leaf = gc.leaf[k];
    w[k].x = leaf < gl->n_inputs ? in_d[leaf] : par[leaf - gl->n_inputs];
    w[k].tangent = in_d[gc.tangent_input[k]];
  }
  /* the derivatives at x: loss and every gradient (zero tangents) */
  if (rc == 0 && tool_execute(&backend, gd, in_d, par, out_d, NULL, d) != 0) rc = 1;
  double loss0 = rc == 0 ? rt_tensor_get(out_d[0], 0) : 0;
  /* elements computed by one run of the derivative graph: bounds the work
   * of element-by-element checks */
  double run_cost = 0;
  for (int k = 0; gd && k < gd->n_nodes; k++)
    for (int j = 0; j < gd->nodes[k]->n_out; j++) run_cost += (double)ir_type_numel(&gd->nodes[k]->out[j]->type);
  double total_abs = 0, total_rel = 0;
  for (int k = 0; rc == 0 && k < n_w; k++) {
    wrt_check *c = &w[k];
    int64_t n = ir_type_numel(&c->x->type);
    c->elements = n <= ELEMENT_LIMIT && (double)n * run_cost <= ELEMENT_BUDGET;
    int n_dir = c->elements ? (int)n : RANDOM_DIRECTIONS;
    rt_tensor *x0 = rt_tensor_new(&c->x->type), *v = rt_tensor_new(&c->x->type);
    if (!x0 || !v) IR_DIE("out of memory (x0 || !v)");
    memcpy(x0->data, c->x->data, x0->nbytes);
    double xnorm = 0; /* |x| for directions: the 2-norm, as the directions have norm 1 */
    for (int64_t e = 0; e < n; e++) xnorm += rt_tensor_get(x0, e) * rt_tensor_get(x0, e);
    xnorm = sqrt(xnorm);
    uint64_t stream = rt_hash_name(c->name);
    for (int dir = 0; rc == 0 && dir < n_dir; dir++) {
      /* unit vectors: e_dir, or a random normal direction scaled to norm 1
       * (a small step per element: few ReLU kinks crossed in large models) */
      double norm = 0;
      for (int64_t e = 0; e < n; e++) {
        double r = c->elements ? (e == dir) : rt_random_normal(seed, stream, (uint64_t)dir * (uint64_t)n + (uint64_t)e);
        rt_tensor_set(v, e, r);
        norm += r * r;
      }
      norm = sqrt(norm);
      for (int64_t e = 0; norm > 0 && !c->elements && e < n; e++) rt_tensor_set(v, e, rt_tensor_get(v, e) / norm);
      double h = eps * fmax(1.0, c->elements ? fabs(rt_tensor_get(x0, dir)) : xnorm);
      /* reverse: <grad, v> */
      double rev = 0;
      for (int64_t e = 0; e < n; e++) rev += rt_tensor_get(out_d[c->grad_out], e) * rt_tensor_get(v, e);
      /* forward: the jvp output with tangent v */
      memcpy(c->tangent->data, v->data, v->nbytes);
      rt_tensor **o2 = calloc((size_t)gd->n_outputs, sizeof *o2);
      if (!o2) IR_DIE("out of memory (o2)");
      if (tool_execute(&backend, gd, in_d, par, o2, NULL, d) != 0) rc = 1;
      double fwd = rc == 0 ? rt_tensor_get(o2[1], 0) : 0;
      free_tensors(o2, gd->n_outputs);
      memset(c->tangent->data, 0, c->tangent->nbytes);
      /* finite differences: central with steps h and h/2, and the 4-point
       * stencil (8 (f(H) - f(-H)) - (f(2H) - f(-2H))) / 12H with H = 100 h,
       * whose larger step has 100x less rounding error and O(H^4) truncation
       * error on smooth functions. The estimate closest to the derivatives
       * is used: a step across a kink (relu, abs, max) is no derivative, and
       * rarely spoils all three; a wrong derivative disagrees with all. */
      static const double mult[4] = {1, -1, 2, -2};
      double fd = NAN, err = INFINITY, l[4];
      for (int est = 0; rc == 0 && est < 3; est++) {
        double step = est == 0 ? h : est == 1 ? h / 2 : 100 * h;
        int points = est == 2 ? 4 : 2;
        for (int pt = 0; rc == 0 && pt < points; pt++) {
          for (int64_t e = 0; e < n; e++)
            rt_tensor_set(c->x, e, rt_tensor_get(x0, e) + mult[pt] * step * rt_tensor_get(v, e));
          if (tool_execute(&backend, gl, in_l, par, out_l, NULL, d) != 0) rc = 1;
          else l[pt] = rt_tensor_get(out_l[0], 0);
          rt_tensor_free(out_l[0]);
          out_l[0] = NULL;
        }
        if (rc != 0) break;
        double f = est < 2 ? (l[0] - l[1]) / (2 * step) : (8 * (l[0] - l[1]) - (l[2] - l[3])) / (12 * step);
        double e = fmax(fabs(rev - f), fabs(fwd - f));
        if (e < err || (est == 0 && isnan(e))) fd = f, err = e;
      }
      memcpy(c->x->data, x0->data, x0->nbytes);
      c->max_abs = fmax(c->max_abs, err);
      if (isnan(rev) || isnan(fwd) || isnan(fd)) c->max_abs = NAN;
      c->max_fd = fmax(c->max_fd, fabs(fd));
      c->checks++;
    }
    c->max_rel = c->max_abs == 0 ? 0 : c->max_abs / fmax(c->max_fd, 1e-300);
    if (isnan(c->max_abs)) c->max_rel = NAN;
    total_abs = isnan(c->max_abs) || isnan(total_abs) ? NAN : fmax(total_abs, c->max_abs);
    total_rel = isnan(c->max_rel) || isnan(total_rel) ? NAN : fmax(total_rel, c->max_rel);
    rt_tensor_free(x0);
    rt_tensor_free(v);
  }
  bool pass = rc == 0 && total_rel <= tol; /* NaN fails */
  const char *loss_name = g && g->n_outputs ? g->outputs[0].name : "?";
  if (rc == 0 && json) {
    json_t *root = json_object(), *jw = json_object();
    char lbuf[300];
    snprintf(lbuf, sizeof lbuf, summed ? "sum(%s)" : "%s", loss_name);
    json_object_set_new(root, "loss", json_string(lbuf));
    json_object_set_new(root, "loss_value", json_real(loss0));
    json_object_set_new(root, "eps", json_real(eps));
    json_object_set_new(root, "tol", json_real(tol));
    for (int k = 0; k < n_w; k++) {
      json_t *e = json_object();
      json_object_set_new(e, "checks", json_integer(w[k].checks));
      json_object_set_new(e, "kind", json_string(w[k].elements ? "elements" : "directions"));
      json_object_set_new(e, "max_abs_error", isnan(w[k].max_abs) ? json_string("nan") : json_real(w[k].max_abs));
      json_object_set_new(e, "max_rel_error", isnan(w[k].max_rel) ? json_string("nan") : json_real(w[k].max_rel));
      json_object_set_new(jw, w[k].name, e);
    }
    json_object_set_new(root, "wrt", jw);
    json_object_set_new(root, "max_abs_error", isnan(total_abs) ? json_string("nan") : json_real(total_abs));
    json_object_set_new(root, "max_rel_error", isnan(total_rel) ? json_string("nan") : json_real(total_rel));
    json_object_set_new(root, "pass", json_boolean(pass));
    json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    fputc('\n', stdout);
    json_decref(root);
  } else if (rc == 0) {
    printf("gradcheck %s: loss = %s%s%s = %.17g (f64), eps %g, tol %g\n", o.file, summed ? "sum(" : "", loss_name,
           summed ? ") (the first output is not a scalar)" : " (the first output)", loss0, eps, tol);
    printf("  %-24s %-14s %14s %14s\n", "value", "checks", "max abs err", "max rel err");
    for (int k = 0; k < n_w; k++) {
      char checks[64];
      snprintf(checks, sizeof checks, "%d %s", w[k].checks, w[k].elements ? "elements" : "directions");
      printf("  %-24s %-14s %14.3e %14.3e\n", w[k].name, checks, w[k].max_abs, w[k].max_rel);
    }
    printf("  %-24s %-14s %14.3e %14.3e\n", "all", "", total_abs, total_rel);
    printf("%s: reverse and forward mode agree with central differences %s rel %g\n", pass ? "PASS" : "FAIL",
           pass ? "within" : "NOT within", tol);
  }
  if (rc == 0 && !pass) rc = 1;
  if (gl) {
    for (int i = 0; i < gl->n_inputs; i++) rt_tensor_free(in_l ? in_l[i] : NULL);
    for (int i = 0; i < gl->n_params; i++) rt_tensor_free(par ? par[i] : NULL);
    for (int i = 0; i < gl->n_outputs; i++) rt_tensor_free(out_l ? out_l[i] : NULL);
  }
  if (gd && gl) {
    for (int i = gl->n_inputs; i < gd->n_inputs; i++) rt_tensor_free(in_d ? in_d[i] : NULL);
    for (int i = 0; i < gd->n_outputs; i++) rt_tensor_free(out_d ? out_d[i] : NULL);
  }
  free(in_l);
  free(par);
  free(in_d);
  free(out_l);
  free(out_d);
  free(w);
  pass_gradcheck_free(&gc);
  ir_graph_free(g);
  free(text);
  free(specs);
  ir_diag_free(d);
  return rc;
}
