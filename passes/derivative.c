/* passes/derivative.c — the derivative graphs `tgc grad` and `tgc gradcheck`
 * run, built from a model graph with the compiler's own autodiff (pass_vjp,
 * pass_jvp); the command only chooses what to differentiate and binds and
 * prints.
 *
 *  - pass_run_until_autodiff: the default pipeline up to and including
 *    autodiff, so what is differentiated is the graph `tgc run` executes,
 *    fused ops included (the model's own grad requests expanded).
 *  - pass_append_gradients (reverse mode): the loss is one output's sum, or
 *    sum_k w_k sum(output_k) for seeded outputs; its gradients with respect
 *    to the chosen inputs and parameters become outputs d_<name>.
 *  - pass_append_tangents (forward mode): a tangent input t_<name> per
 *    chosen value; the directional derivative of every float output of the
 *    model becomes output t_<output>.
 *    Both then canonicalize (always: it tidies what autodiff wrote) and
 *    verify.
 *  - pass_build_gradcheck: the model in f64 (pass_retyped_copy), twice: a
 *    graph computing the loss alone (the first output, its sum if it is not
 *    a scalar) for the finite differences, and one computing the loss, the
 *    directional derivative along tangent inputs (forward mode) and every
 *    gradient (reverse mode), for every float input and parameter.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "pass.h"

ir_value *pass_sum_all(ir_graph *g, ir_value *v, const char *name) {
  if (v->type.rank == 0) return v;
  int64_t axes[IR_MAX_RANK];
  for (int i = 0; i < v->type.rank; i++) axes[i] = i;
  ir_attr a[2] = {ir_attr_ints("axes", axes, v->type.rank), ir_attr_int("keepdims", 0)};
  return ir_graph_build1(g, IR_OP_REDUCE_SUM, &v, 1, a, 2, name, v->loc);
}

int pass_run_until_autodiff(ir_graph *g, const pass_options *o) {
  int k = 0;
  while (k < pass_default_pipeline_len && pass_default_pipeline[k] != PASS_AUTODIFF) k++;
  if (o->disabled && o->disabled[PASS_AUTODIFF]) { /* autodiff is never optional: it runs alone */
    pass_options alone = *o;
    alone.disabled = NULL;
    pass_id p = PASS_AUTODIFF;
    return pass_run_pipeline(g, &p, 1, &alone);
  }
  return pass_run_pipeline(g, pass_default_pipeline, k + 1, o);
}

/* Canonicalize (whatever o disables) and verify what autodiff appended. */
static int finish(ir_graph *g, const pass_options *o) {
  pass_options always = *o;
  always.disabled = NULL;
  pass_id p = PASS_CANONICALIZE;
  if (pass_run_pipeline(g, &p, 1, &always) != 0) return -1;
  if (ir_verify(g, o->diag) != 0) {
    ir_error_plain(o->diag, "internal error: the derivative graph does not verify");
    return -1;
  }
  return 0;
}

/* The loss of r: the sum of the one output, or sum_k w_k sum(output_k). */
static ir_value *seeded_loss(ir_graph *g, const pass_grad_request *r) {
  if (!r->weights) return pass_sum_all(g, r->outputs[0], "sum_of");
  ir_loc nowhere = {0};
  ir_value *loss = NULL;
  for (int s = 0; s < r->n_outputs; s++) {
    ir_value *v = pass_sum_all(g, r->outputs[s], NULL);
    ir_attr a = ir_attr_float("value", r->weights[s]);
    ir_type st = {.dtype = v->type.dtype, .rank = 0};
    char err[256];
    ir_node *cw = ir_graph_build(g, IR_OP_CONST, NULL, 0, &a, 1, &st, NULL, nowhere, err, sizeof err);
    ir_value *in[2] = {cw->out[0], v};
    ir_value *term = ir_graph_build1(g, IR_OP_MUL, in, 2, NULL, 0, NULL, nowhere);
    if (loss) {
      ir_value *in2[2] = {loss, term};
      loss = ir_graph_build1(g, IR_OP_ADD, in2, 2, NULL, 0, NULL, nowhere);
    } else {
      loss = term;
    }
  }
  return loss;
}

int pass_append_gradients(ir_graph *g, const pass_grad_request *r, const pass_options *o) {
  for (int s = 0; s < r->n_outputs; s++)
    if (!ir_dtype_is_float(r->outputs[s]->type.dtype) || r->outputs[s]->type.dtype != r->outputs[0]->type.dtype ||
        (!r->weights && s > 0)) {
      ir_error_plain(o->diag, "internal error: the differentiated outputs must be float outputs of one dtype");
      return -1;
    }
  ir_value *loss = seeded_loss(g, r);
  ir_value **grads = calloc((size_t)r->n_wrt + 1, sizeof *grads);
  if (!grads) IR_DIE("out of memory (grads)");
  int rc = pass_vjp(g, loss, r->wrt, r->n_wrt, grads, o->diag);
  for (int k = 0; rc == 0 && k < r->n_wrt; k++) {
    char name[600];
    snprintf(name, sizeof name, "d_%s", r->wrt[k]->name);
    ir_graph_add_output(g, name, grads[k]);
  }
  free(grads);
  return rc == 0 ? finish(g, o) : -1;
}

int pass_append_tangents(ir_graph *g, ir_value *const *wrt, int n, ir_value **tangent_inputs, const pass_options *o) {
  int n_model = g->n_outputs;
  ir_value **of = calloc((size_t)n_model + 1, sizeof *of), **touts = calloc((size_t)n_model + 1, sizeof *touts);
  if (!of || !touts) IR_DIE("out of memory (of || !touts)");
  for (int k = 0; k < n; k++) {
    char name[600];
    snprintf(name, sizeof name, "t_%s", wrt[k]->name);
    tangent_inputs[k] = ir_graph_add_input(g, name, wrt[k]->type, wrt[k]->loc);
  }
  int n_of = 0;
  for (int i = 0; i < n_model; i++)
    if (ir_dtype_is_float(g->outputs[i].value->type.dtype)) of[n_of++] = g->outputs[i].value;
  int rc = pass_jvp(g, wrt, tangent_inputs, n, of, n_of, touts, o->diag);
  for (int i = 0, j = 0; rc == 0 && i < n_model; i++) {
    if (!ir_dtype_is_float(g->outputs[i].value->type.dtype)) continue;
    char name[600];
    snprintf(name, sizeof name, "t_%s", g->outputs[i].name);
    ir_graph_add_output(g, name, touts[j++]);
  }
  free(of);
  free(touts);
  return rc == 0 ? finish(g, o) : -1;
}

/* ---- gradcheck ---- */

/* The f64 copy of model with no outputs and its loss (the first output, or
 * its sum, named gradcheck_loss). */
static ir_graph *f64_loss_graph(const ir_graph *model, ir_value **loss, bool *summed, ir_diag *d) {
  ir_graph *h = pass_retyped_copy(model, IR_DT_F64, d);
  if (!h) return NULL;
  if (h->n_outputs == 0 || !ir_dtype_is_float(h->outputs[0].value->type.dtype)) {
    ir_error_plain(d, "gradcheck: the first output of the model must be floating-point");
    ir_graph_free(h);
    return NULL;
  }
  ir_value *y = h->outputs[0].value;
  *summed = y->type.rank > 0;
  *loss = pass_sum_all(h, y, "gradcheck_loss");
  h->n_outputs = 0; /* the loss (and derivatives) are the outputs now */
  return h;
}

void pass_gradcheck_free(pass_gradcheck *c) {
  ir_graph_free(c->loss);
  ir_graph_free(c->deriv);
  free(c->leaf);
  free(c->tangent_input);
  free(c->grad_output);
  memset(c, 0, sizeof *c);
}

int pass_build_gradcheck(const ir_graph *model, pass_gradcheck *c, ir_diag *d) {
  memset(c, 0, sizeof *c);
  ir_value *loss_l = NULL, *loss_d = NULL;
  if (!(c->loss = f64_loss_graph(model, &loss_l, &c->loss_summed, d)) ||
      !(c->deriv = f64_loss_graph(model, &loss_d, &c->loss_summed, d))) {
    pass_gradcheck_free(c);
    return -1;
  }
  ir_graph *gd = c->deriv;
  int n_leaf = gd->n_inputs + gd->n_params, n_in0 = gd->n_inputs;
  ir_value **wv = calloc((size_t)n_leaf + 1, sizeof *wv), **tv = calloc((size_t)n_leaf + 1, sizeof *tv);
  ir_value **grads = calloc((size_t)n_leaf + 1, sizeof *grads);
  c->leaf = calloc((size_t)n_leaf + 1, sizeof *c->leaf);
  c->tangent_input = calloc((size_t)n_leaf + 1, sizeof *c->tangent_input);
  c->grad_output = calloc((size_t)n_leaf + 1, sizeof *c->grad_output);
  if (!wv || !tv || !grads || !c->leaf || !c->tangent_input || !c->grad_output) IR_DIE("out of memory (wv || !tv || !grads || !c->leaf || !c->tangent_input || !c->grad_output)");
  for (int i = 0; i < n_leaf; i++) {
    ir_value *v = i < n_in0 ? gd->inputs[i] : gd->params[i - n_in0];
    if (!ir_dtype_is_float(v->type.dtype)) continue;
    c->leaf[c->n_checked] = i;
    wv[c->n_checked++] = v;
  }
  int rc = 0, n_w = c->n_checked;
  if (n_w == 0) {
    ir_error_plain(d, "gradcheck: the model has no floating-point input or parameter to check");
    rc = -1;
  }
  ir_value *jvp_out = NULL;
  if (rc == 0) {
    ir_graph_add_output(c->loss, "loss", loss_l);
    ir_graph_add_output(gd, "loss", loss_d);
    rc = pass_vjp(gd, loss_d, wv, n_w, grads, d);
  }
  for (int k = 0; rc == 0 && k < n_w; k++) {
    char name[600];
    snprintf(name, sizeof name, "t_%s", wv[k]->name);
    c->tangent_input[k] = gd->n_inputs;
    tv[k] = ir_graph_add_input(gd, name, wv[k]->type, wv[k]->loc);
  }
  if (rc == 0) rc = pass_jvp(gd, wv, tv, n_w, &loss_d, 1, &jvp_out, d);
  if (rc == 0) {
    ir_graph_add_output(gd, "jvp", jvp_out);
    for (int k = 0; k < n_w; k++) {
      char name[600];
      snprintf(name, sizeof name, "d_%s", wv[k]->name);
      c->grad_output[k] = gd->n_outputs;
      ir_graph_add_output(gd, name, grads[k]);
    }
    if (ir_verify(gd, d) != 0) {
      ir_error_plain(d, "internal error: the derivative graph does not verify");
      rc = -1;
    }
  }
  free(wv);
  free(tv);
  free(grads);
  if (rc != 0) pass_gradcheck_free(c);
  return rc;
}
