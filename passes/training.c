/* passes/training.c — the training program: the step graph (forward and
 * backward of one micro-batch, its sums) and the update graph (the
 * optimizer, the logged scalars), bound by role (pass.h: pass_training).
 *
 * pass_build_training_graph is the graph analyses read (`tgc stats` and
 * `tgc plan` cost it; pass_build_training is its bare form for the tests);
 * pass_build_train the whole program `tgc train` runs. Both take the loss
 * and add the gradients the same way (pick_loss, add_grad).
 *
 * The step graph is the model with, before the default pipeline runs:
 *  - token accuracy (when the model outputs "logits" and targets are
 *    given): correct = reduce_sum(cast(eq(argmax(logits), targets), f64));
 *  - one GRAD node of the loss with respect to every parameter (as
 *    pass_build_training);
 *  - the sums: loss_sum' = loss_sum + f64(loss), correct_sum' = correct_sum
 *    + correct, and with K > 1 micro-batches acc'_p = acc_p + d_p, whose
 *    inputs the runtime fills with -0.0 before the first micro-batch and
 *    donates, so the memory plan computes them in place.
 * Every sum is in the dtype of its terms and in micro-batch order, as the
 * host loop it replaces summed them; the update graph divides by K.
 *
 * requires: a verified model graph; invalidates: the model graph (it
 * becomes the step graph).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "pass.h"

void pass_training_free(pass_training *t) {
  if (!t) return;
  ir_graph_free(t->step);
  ir_graph_free(t->update);
  ir_graph_free(t->eval);
  ir_graph_free(t->fwd);
  ir_graph_free(t->bwd);
  free(t->grad_output);
  free(t->bwd_grad_output);
  free(t->copy_input);
  free(t->copy_output);
  for (int c = 1; t->chunk && c < t->n_chunks; c++) { /* chunk 0 is the fields above */
    ir_graph_free(t->chunk[c].fwd);
    ir_graph_free(t->chunk[c].bwd);
    free(t->chunk[c].bwd_grad_output);
  }
  free(t->chunk);
  free(t->stage_boundaries);
  free(t);
}

/* correct = reduce_sum(cast(eq(argmax(logits), targets), f64)), or NULL
 * when the model has no logits output or the targets do not fit them. */
static ir_value *accuracy_nodes(ir_graph *g, int targets_input, int64_t *positions) {
  int li = ir_graph_output_index(g, "logits");
  if (li < 0 || targets_input < 0 || targets_input >= g->n_inputs) return NULL;
  ir_value *c = pass_accuracy(g, g->outputs[li].value, g->inputs[targets_input]);
  if (c) *positions = ir_type_numel(&g->inputs[targets_input]->type);
  return c;
}

ir_value *pass_accuracy(ir_graph *g, ir_value *logits, ir_value *targets) {
  const ir_type *lt = &logits->type, *tt = &targets->type;
  if (lt->rank < 1 || !ir_dtype_is_float(lt->dtype) || (tt->dtype != IR_DT_I32 && tt->dtype != IR_DT_I64) ||
      tt->rank != lt->rank - 1 || memcmp(tt->dims, lt->dims, sizeof(int64_t) * (size_t)tt->rank) != 0 ||
      lt->dims[lt->rank - 1] < 1)
    return NULL;
  ir_loc at = logits->loc;
  ir_attr axis = ir_attr_int("axis", lt->rank - 1);
  ir_value *am = ir_graph_build1(g, IR_OP_ARGMAX, &logits, 1, &axis, 1, "predicted", at);
  if (tt->dtype != IR_DT_I32) {
    ir_attr to = ir_attr_dtype("to", tt->dtype);
    am = ir_graph_build1(g, IR_OP_CAST, &am, 1, &to, 1, NULL, at);
  }
  ir_value *pair[2] = {am, targets};
  ir_value *hit = ir_graph_build1(g, IR_OP_EQ, pair, 2, NULL, 0, NULL, at);
  ir_attr to = ir_attr_dtype("to", IR_DT_F64);
  return pass_sum_all(g, ir_graph_build1(g, IR_OP_CAST, &hit, 1, &to, 1, NULL, at), "correct");
}

/* The loss: the output named "loss", else the first; a float scalar. */
static ir_value *pick_loss(ir_graph *g, ir_diag *d) {
  if (g->n_outputs == 0) {
    ir_error_plain(d, "the model has no outputs: training needs a scalar loss output");
    return NULL;
  }
  if (g->n_params == 0) {
    ir_error_plain(d, "the model has no parameters: there is nothing to train");
    return NULL;
  }
  int li = ir_graph_output_index(g, "loss");
  if (li < 0) li = 0;
  ir_value *loss = g->outputs[li].value;
  if (loss->type.rank != 0 || !ir_dtype_is_float(loss->type.dtype)) {
    char tb[160];
    ir_type_str(&loss->type, tb, sizeof tb);
    ir_error(d, loss->loc, "the loss (output '%s') must be a floating-point scalar, got %s", g->outputs[li].name, tb);
    return NULL;
  }
  return loss;
}

/* GRAD(loss, wrt...) with results d_<name> (role grad), or NULL. wrt
 * NULL: every parameter. */
static ir_node *add_grad_of(ir_graph *g, ir_value *loss, ir_value *const *wrt, int np, ir_diag *d) {
  ir_value **in = malloc(sizeof *in * (size_t)(np + 1));
  ir_type *types = malloc(sizeof *types * (size_t)(np + 1)), *out_types = malloc(sizeof *out_types * (size_t)(np + 1));
  const char **names = malloc(sizeof *names * (size_t)(np + 1));
  if (!in || !types || !out_types || !names) IR_DIE("out of memory (in || !types || !out_types || !names)");
  in[0] = loss;
  for (int i = 0; i < np; i++) in[i + 1] = wrt ? wrt[i] : g->params[i];
  for (int i = 0; i <= np; i++) types[i] = in[i]->type;
  char err[512];
  int n_out = 0;
  ir_node *gn = NULL;
  if (ir_infer(IR_OP_GRAD, types, np + 1, NULL, 0, out_types, &n_out, err, sizeof err) != 0) {
    ir_error(d, loss->loc, "cannot differentiate the loss: %s", err);
  } else {
    for (int i = 0; i < np; i++) {
      char nm[600];
      snprintf(nm, sizeof nm, "d_%s", in[i + 1]->name);
      names[i] = ir_arena_strdup(g->arena, nm);
    }
    gn = ir_graph_add_node(g, IR_OP_GRAD, in, np + 1, out_types, n_out, NULL, 0, names, loss->loc);
    for (int i = 0; i < gn->n_out; i++) gn->out[i]->role = IR_ROLE_GRAD;
  }
  free(in), free(types), free(out_types), free(names);
  return gn;
}

static ir_node *add_grad(ir_graph *g, ir_value *loss, ir_diag *d) { return add_grad_of(g, loss, NULL, g->n_params, d); }

/* The training graph as `tgc train` trains it: a float scalar loss (the
 * output named "loss", else the first), a GRAD node with respect to every
 * parameter; outputs loss, d_<param>... (no logits: see drop_logits) */
static int add_training_grad(ir_graph *g, pass_train_graph_info *info, ir_diag *d) {
  ir_value *loss = pick_loss(g, d);
  if (!loss) return -1;
  int li = ir_graph_output_index(g, "loss");
  const char *loss_name = li >= 0 ? "loss" : g->outputs[0].name;
  ir_node *gn = add_grad(g, loss, d);
  if (!gn) return -1;
  g->n_outputs = 0;
  ir_graph_add_output(g, loss_name ? loss_name : "loss", loss);
  for (int i = 0; i < gn->n_out; i++) ir_graph_add_output(g, gn->out[i]->name, gn->out[i]);
  info->loss_name = strdup(loss_name ? loss_name : "loss");
  info->n_wrt = gn->n_out;
  return 0;
}

/* A training step returns no logits (the trainer reads the loss, the
 * gradients and the accuracy it computes in the graph), so nothing keeps
 * the [..., V] logits whole and fuse-lm-head may fuse the head with its
 * loss. The output named "logits" goes unless it is the loss k. */
static void drop_logits(ir_graph *g, int k) {
  int gi = ir_graph_output_index(g, "logits");
  if (gi < 0 || gi == k || g->outputs[gi].value == g->outputs[k].value) return;
  memmove(g->outputs + gi, g->outputs + gi + 1, sizeof *g->outputs * (size_t)(g->n_outputs - gi - 1));
  g->n_outputs--;
}

/* The training graph of any model, for analysis (`tgc stats`): see pass.h. */
static int add_any_grad(ir_graph *g, pass_train_graph_info *info, ir_diag *d) {
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->op == IR_OP_GRAD) { /* the model asks for its own gradients */
      info->n_wrt = n->n_in - 1;
      info->loss_name = strdup(n->in[0]->name);
      return 0;
    }
    for (int j = 0; j < n->n_out; j++)
      if (n->out[j]->role == IR_ROLE_GRAD) { /* already a training graph (.ir) */
        info->n_wrt = -1;
        return 0;
      }
  }
  if (g->n_outputs == 0) {
    ir_error_plain(d, "%s has no outputs: nothing to differentiate", g->source_file ? g->source_file : g->name);
    return -1;
  }
  int k = ir_graph_output_index(g, "loss");
  if (k < 0) k = 0;
  ir_value *loss = g->outputs[k].value;
  info->loss_name = strdup(g->outputs[k].name);
  drop_logits(g, k);
  if (!ir_dtype_is_float(loss->type.dtype)) {
    char tb[128];
    ir_error_plain(d, "output '%s' is %s: tgc stats differentiates a floating-point output", info->loss_name,
                   ir_type_str(&loss->type, tb, sizeof tb));
    return -1;
  }
  if (loss->type.rank > 0) {
    loss = pass_sum_all(g, loss, "stats_loss");
    info->loss_summed = true;
  }
  int n = g->n_params;
  ir_value **wrt = malloc(sizeof *wrt * (size_t)(g->n_params + g->n_inputs + 1));
  if (!wrt) IR_DIE("out of memory (wrt)");
  for (int i = 0; i < n; i++) wrt[i] = g->params[i];
  if (n == 0) {
    info->wrt_inputs = true;
    for (int i = 0; i < g->n_inputs; i++)
      if (ir_dtype_is_float(g->inputs[i]->type.dtype)) wrt[n++] = g->inputs[i];
  }
  info->n_wrt = n;
  ir_node *gn = n > 0 ? add_grad_of(g, loss, wrt, n, d) : NULL;
  for (int i = 0; gn && i < gn->n_out; i++) ir_graph_add_output(g, gn->out[i]->name, gn->out[i]);
  free(wrt);
  return n > 0 && !gn ? -1 : 0;
}

/* The index of pass p in the default pipeline. */
static int default_index(pass_id p) {
  for (int i = 0; i < pass_default_pipeline_len; i++)
    if (pass_default_pipeline[i] == p) return i;
  return pass_default_pipeline_len;
}

/* The memory plan of the graph printed as before, after the passes before
 * checkpoint less fuse-attention (what fusing attention saves). */
static bool measure_unfused(const ir_graph *g, const char *before, const pass_train_graph_options *o,
                            pass_mem_report *r) {
  bool disabled[PASS_COUNT] = {false};
  for (int p = 0; o->passes->disabled && p < PASS_COUNT; p++) disabled[p] = o->passes->disabled[p];
  disabled[PASS_FUSE_ATTENTION] = true;
  ir_diag *d = ir_diag_new(stderr); /* its own: the text parsed here is no file a message may quote */
  ir_graph *u = ir_parse(g->source_file ? g->source_file : "<training graph>", before, strlen(before), d);
  pass_options uo = {.diag = d, .disabled = disabled};
  bool ok = u && pass_run_pipeline(u, pass_default_pipeline, default_index(PASS_CHECKPOINT), &uo) == 0;
  if (ok && o->dtype >= 0) pass_retype_floats(u, (ir_dtype)o->dtype);
  ok = ok && pass_memplan_analyze(u, r) == 0;
  ir_graph_free(u);
  ir_diag_free(d);
  return ok;
}

int pass_build_training_graph(ir_graph *g, const pass_train_graph_options *o, pass_train_graph_info *info) {
  const pass_options *po = o->passes;
  ir_diag *d = po->diag;
  memset(info, 0, sizeof *info);
  if ((o->any_model ? add_any_grad : add_training_grad)(g, info, d) != 0) return -1;
  pass_key_dropout(g);
  if (ir_verify(g, d) != 0) return -1;
  /* the passes before checkpoint; the dtype; what the plan holds without
   * checkpointing (and without fused attention); then the rest */
  int split = default_index(PASS_CHECKPOINT);
  char *before = o->measure ? ir_print_to_string(g) : NULL;
  pass_options first = *po;
  first.checkpoint = NULL;
  int rc = pass_run_pipeline(g, pass_default_pipeline, split, &first);
  if (rc == 0 && o->dtype >= 0) pass_retype_floats(g, (ir_dtype)o->dtype);
  if (rc == 0 && o->measure && pass_memplan_analyze(g, &info->mem_none) != 0) rc = -1;
  bool fused = false;
  for (int i = 0; rc == 0 && o->measure && i < g->n_nodes; i++) fused |= g->nodes[i]->op == IR_OP_ATTENTION;
  if (fused) info->have_unfused = measure_unfused(g, before, o, &info->mem_unfused);
  free(before);
  if (rc == 0) rc = pass_run_pipeline(g, pass_default_pipeline + split, pass_default_pipeline_len - split, po);
  return rc;
}

void pass_train_graph_info_free(pass_train_graph_info *info) {
  free(info->loss_name);
  info->loss_name = NULL;
}

int pass_build_training(ir_graph *g, const pass_options *o) {
  pass_train_graph_options to = {.passes = o, .dtype = -1};
  pass_train_graph_info info;
  int rc = pass_build_training_graph(g, &to, &info);
  pass_train_graph_info_free(&info);
  return rc;
}

/* The eval graph: a copy of the model as it stands (the loss and the
 * accuracy count built, no gradient yet) whose outputs are the loss in f64
 * and the correct count, through the passes before the shard pass. */
static ir_graph *build_eval(const ir_graph *g, const ir_value *loss, const ir_value *correct, pass_training *t,
                            const pass_train_options *o) {
  ir_diag *d = o->passes->diag;
  char *text = ir_print_to_string(g);
  ir_graph *e = text ? ir_parse(g->source_file ? g->source_file : "<eval graph>", text, strlen(text), d) : NULL;
  free(text);
  if (!e) return NULL;
  e->mesh = g->mesh;
  ir_value *el = ir_graph_find_value(e, loss->name), *ec = correct ? ir_graph_find_value(e, correct->name) : NULL;
  if (!el || (correct && !ec) || e->n_params != g->n_params || e->n_inputs != g->n_inputs) {
    ir_error_plain(d, "internal error: the eval graph's copy of the model lost its loss, accuracy or inputs");
    ir_graph_free(e);
    return NULL;
  }
  ir_attr to = ir_attr_dtype("to", IR_DT_F64);
  if (el->type.dtype != IR_DT_F64) el = ir_graph_build1(e, IR_OP_CAST, &el, 1, &to, 1, NULL, el->loc);
  e->n_outputs = 0;
  t->eval_loss_output = 0;
  ir_graph_add_output(e, "loss", el);
  if (ec) {
    t->eval_correct_output = 1;
    ir_graph_add_output(e, "correct", ec);
  }
  static const pass_id front[] = {PASS_FUSE_ATTENTION, PASS_CANONICALIZE};
  pass_options eo = {.diag = d, .verify_each = o->passes->verify_each, .disabled = o->passes->disabled};
  if (ir_verify(e, d) != 0 || pass_run_pipeline(e, front, 2, &eo) != 0) {
    ir_graph_free(e);
    return NULL;
  }
  return e;
}

/* Mixed precision's gradients leave the step in the compute dtype: where
 * parameter i's gradient output is cast(x, f32) of a bf16 / f16 x (the
 * VJP of the parameter's cast), the output becomes x and grad_dtype[i]
 * x's dtype, and the update graph widens it where it reads it, inside its
 * fused update (optimizer.c), instead of the step writing an f32 copy of
 * every gradient in a pass of its own. Widening is exact: the update reads
 * the same f32 values, bit for bit. Only where the gradient goes straight
 * to the update: one micro-batch (sums stay f32), no loss scaling (the
 * unscaling divides in f32), one rank (collectives sum in the gradient's
 * dtype). grad_dtype[i] is the parameter's dtype where nothing is folded. */
static void fold_grad_casts(ir_graph *g, const pass_training *t, ir_dtype *grad_dtype) {
  for (int i = 0; i < t->n_params; i++) grad_dtype[i] = g->params[i]->type.dtype;
  if (t->micro_batches > 1 || t->loss_scale_input >= 0 || !ir_mesh_is_single(&g->mesh)) return;
  for (int i = 0; i < t->n_params; i++) {
    ir_value *v = g->outputs[t->grad_output[i]].value;
    ir_node *n = v->def;
    if (!n || n->op != IR_OP_CAST || n->n_in != 1 || v->type.dtype != g->params[i]->type.dtype) continue;
    ir_value *x = n->in[0];
    if (x->type.dtype != IR_DT_BF16 && x->type.dtype != IR_DT_F16) continue;
    g->outputs[t->grad_output[i]].value = x;
    grad_dtype[i] = x->type.dtype;
    if (ir_count_uses(g, v) == 0) n->dead = true;
  }
}

/* ... and its parameters enter it in the compute dtype: where every
 * reader of parameter i is a cast to one bf16 / f16 dtype (the mixed
 * precision pass's, and checkpoint's recompute copies of it), they read a
 * new step input "<param>.<dtype>" instead (copy_input[i]), which the
 * update writes as one more result of the pass that writes the parameter
 * (optimizer.c: copy_dtype[i]): the step no longer reads every f32
 * parameter to write its narrow copy. The same rounding, so the same bits.
 * Only where no elementwise node reads a cast (matmul weights, norm
 * scales, embeddings: what the step casts in a pass of its own). One rank
 * only (a sharded parameter's copy would need the shard pass's layouts).
 * copy_dtype[i] is the parameter's dtype where nothing is folded. */
static void fold_param_casts(ir_graph *g, pass_training *t, ir_dtype *copy_dtype) {
  int np = t->n_params;
  for (int i = 0; i < np; i++) copy_dtype[i] = g->params[i]->type.dtype;
  if (!ir_mesh_is_single(&g->mesh)) return;
  enum { MAX_READERS = 8 };
  for (int i = 0; i < np; i++) {
    ir_value *p = g->params[i];
    ir_node *readers[MAX_READERS];
    int nr = ir_graph_readers(g, p, readers, MAX_READERS);
    ir_dtype dt = nr > 0 ? readers[0]->out[0]->type.dtype : IR_DT_F32;
    bool ok = nr > 0 && (dt == IR_DT_BF16 || dt == IR_DT_F16) && !ir_graph_is_output(g, p);
    for (int r = 0; ok && r < nr; r++) {
      ok = readers[r]->op == IR_OP_CAST && readers[r]->out[0]->type.dtype == dt && readers[r]->in[0] == p;
      /* a cast an elementwise node reads is fused into it (no pass of its own), and its reader may then take
       * another form (a bias read by a product's epilogue: cuBLASLt's bias epilogue rounds once): left alone */
      ir_node *users[MAX_READERS];
      int nu = ok ? ir_graph_readers(g, readers[r]->out[0], users, MAX_READERS) : 0;
      ok = ok && nu >= 0 && !ir_graph_is_output(g, readers[r]->out[0]);
      for (int k = 0; ok && k < nu; k++) ok = !ir_op_is_elementwise(users[k]->op);
    }
    if (!ok) continue;
    if (!t->copy_input) {
      t->copy_input = malloc(sizeof *t->copy_input * (size_t)np);
      t->copy_output = malloc(sizeof *t->copy_output * (size_t)np);
      if (!t->copy_input || !t->copy_output) IR_DIE("out of memory (copy_input, copy_output)");
      for (int k = 0; k < np; k++) t->copy_input[k] = t->copy_output[k] = -1;
    }
    char nm[600];
    snprintf(nm, sizeof nm, "%s.%s", p->name, ir_dtype_name(dt));
    ir_type ct = p->type;
    ct.dtype = dt;
    t->copy_input[i] = g->n_inputs;
    ir_value *copy = ir_graph_add_input(g, nm, ct, p->loc);
    for (int r = 0; r < nr; r++) {
      ir_replace_all_uses(g, readers[r]->out[0], copy);
      readers[r]->dead = true;
    }
    copy_dtype[i] = dt;
  }
}

static ir_value *add2(ir_graph *g, ir_value *a, ir_value *b, const char *name, ir_loc at) {
  ir_value *in[2] = {a, b};
  return ir_graph_build1(g, IR_OP_ADD, in, 2, NULL, 0, name, at);
}

pass_training *pass_build_train(ir_graph *g, const pass_train_options *o) {
  ir_diag *d = o->passes->diag;
  pass_training *t = calloc(1, sizeof *t);
  ir_value **grads = NULL;
  if (!t) IR_DIE("out of memory (t)");
  t->micro_batches = o->micro_batches > 1 ? o->micro_batches : 1;
  t->step = g;
  t->n_data = g->n_inputs;
  if (t->n_data > 64) {
    ir_error_plain(d, "a training program takes at most 64 data inputs; the model has %d", t->n_data);
    free(t);
    return NULL;
  }
  for (int i = 0; i < t->n_data; i++) t->batch_dim[i] = o->batch_dims ? o->batch_dims[i] : 0;
  t->acc_input0 = t->correct_sum_input = t->correct_sum_output = -1;
  t->update_correct_sum_input = t->accuracy_output = -1;
  t->loss_scale_input = t->overflow_output = -1;
  t->n_stages = 1;
  t->schedule = o->schedule;
  /* (interleaved with one chunk runs its own order, plan_sim.c's) */
  t->n_chunks = o->schedule == PASS_SCHED_INTERLEAVED && o->chunks > 1 ? o->chunks : 1;
  if (o->stage_boundaries && o->n_stage_boundaries > 0) {
    if (!(t->stage_boundaries = malloc(sizeof *t->stage_boundaries * (size_t)o->n_stage_boundaries))) IR_DIE("out of memory ((t->stage_boundaries = malloc(sizeof *t->stage_boundaries * (size_t)o->n_stage_boundaries)))");
    memcpy(t->stage_boundaries, o->stage_boundaries, sizeof *t->stage_boundaries * (size_t)o->n_stage_boundaries);
    t->n_stage_boundaries = o->n_stage_boundaries;
  }
  int np = t->n_params = g->n_params;
  t->n_states = np * pass_optimizer_state_count(o->opt.kind);
  if (o->mixed_precision && (!pick_loss(g, d) || pass_mixed_precision(g, o->compute_dtype, d) != 0)) goto fail;
  ir_value *loss = pick_loss(g, d);
  if (!loss) goto fail;
  ir_value *correct = accuracy_nodes(g, o->targets_input, &t->positions);
  t->accuracy = correct != NULL;
  t->eval_loss_output = t->eval_correct_output = -1;
  if (o->eval && !(t->eval = build_eval(g, loss, correct, t, o))) goto fail;
  ir_value *scale = NULL, *seed = loss; /* loss scaling: the backward pass starts from f32(loss) * scale */
  if (o->loss_scaling) {
    ir_type f32 = {.dtype = IR_DT_F32, .rank = 0};
    t->loss_scale_input = g->n_inputs;
    scale = ir_graph_add_input(g, "loss_scale", f32, (ir_loc){0});
    ir_value *lf = loss;
    if (lf->type.dtype != IR_DT_F32) {
      ir_attr to = ir_attr_dtype("to", IR_DT_F32);
      lf = ir_graph_build1(g, IR_OP_CAST, &lf, 1, &to, 1, NULL, loss->loc);
    }
    ir_value *pair[2] = {lf, scale};
    seed = ir_graph_build1(g, IR_OP_MUL, pair, 2, NULL, 0, "scaled_loss", loss->loc);
  }
  ir_node *gn = add_grad(g, seed, d);
  if (!gn) goto fail;

  /* the sums and the outputs */
  ir_type f64 = {.dtype = IR_DT_F64, .rank = 0};
  ir_loc none = {0};
  grads = calloc((size_t)np + 1, sizeof *grads);
  t->grad_output = calloc((size_t)np + 1, sizeof *t->grad_output);
  if (!grads || !t->grad_output) IR_DIE("out of memory (grads || !t->grad_output)");
  for (int i = 0; i < np; i++) {
    grads[i] = gn->out[i];
    if (scale) { /* unscaled before they are summed */
      ir_value *s = scale;
      if (s->type.dtype != grads[i]->type.dtype) {
        ir_attr to = ir_attr_dtype("to", grads[i]->type.dtype);
        s = ir_graph_build1(g, IR_OP_CAST, &s, 1, &to, 1, NULL, grads[i]->loc);
      }
      ir_value *pair[2] = {grads[i], s};
      grads[i] = ir_graph_build1(g, IR_OP_DIV, pair, 2, NULL, 0, NULL, grads[i]->loc);
      grads[i]->role = IR_ROLE_GRAD;
    }
  }
  if (t->micro_batches > 1) {
    t->acc_input0 = g->n_inputs;
    for (int i = 0; i < np; i++) {
      char nm[600];
      snprintf(nm, sizeof nm, "acc.%s", g->params[i]->name);
      ir_value *acc = ir_graph_add_input(g, nm, g->params[i]->type, g->params[i]->loc);
      snprintf(nm, sizeof nm, "new.acc.%s", g->params[i]->name);
      grads[i] = add2(g, acc, grads[i], nm, g->params[i]->loc);
      grads[i]->role = IR_ROLE_GRAD;
    }
  }
  t->loss_sum_input = g->n_inputs;
  ir_value *ls = ir_graph_add_input(g, "loss_sum", f64, none);
  ir_attr to = ir_attr_dtype("to", IR_DT_F64);
  ir_value *lf = ir_graph_build1(g, IR_OP_CAST, &loss, 1, &to, 1, NULL, loss->loc);
  ir_value *ls2 = add2(g, ls, lf, "new.loss_sum", loss->loc);
  ir_value *cs2 = NULL;
  if (correct) {
    t->correct_sum_input = g->n_inputs;
    ir_value *cs = ir_graph_add_input(g, "correct_sum", f64, none);
    cs2 = add2(g, cs, correct, "new.correct_sum", correct->loc);
  }
  t->dropout_key_input = pass_key_dropout(g); /* the last input: the trainer sets it per micro-batch */
  g->n_outputs = 0;
  for (int i = 0; i < np; i++) {
    t->grad_output[i] = g->n_outputs;
    ir_graph_add_output(g, grads[i]->name, grads[i]);
  }
  t->loss_sum_output = g->n_outputs;
  ir_graph_add_output(g, "loss_sum", ls2);
  if (cs2) {
    t->correct_sum_output = g->n_outputs;
    ir_graph_add_output(g, "correct_sum", cs2);
  }
  free(grads);
  grads = NULL;
  if (ir_verify(g, d) != 0) goto fail;
  /* the default pipeline, with the shard pass over both graphs at its place */
  static const pass_id front[] = {PASS_FUSE_ATTENTION, PASS_AUTODIFF, PASS_CANONICALIZE, PASS_CHECKPOINT};
  static const pass_id back[] = {PASS_FUSE_ELEMENTWISE, PASS_FUSE_TRANSPOSE, PASS_FUSE_LM_HEAD};
  if (pass_run_pipeline(g, front, 4, o->passes) != 0) goto fail;
  ir_dtype *grad_dtype = calloc((size_t)np + 1, sizeof *grad_dtype), *copy_dtype = calloc((size_t)np + 1, sizeof *copy_dtype);
  if (!grad_dtype || !copy_dtype) IR_DIE("out of memory (grad_dtype, copy_dtype)");
  if (!o->no_cast_fold) {
    fold_grad_casts(g, t, grad_dtype);
    fold_param_casts(g, t, copy_dtype);
  }
  t->update = !o->no_cast_fold && ir_verify(g, d) != 0
                  ? NULL
                  : pass_build_update_for_training(g, &o->opt, t->micro_batches, true, t->accuracy, (double)t->positions,
                                                   o->loss_scaling, o->no_cast_fold ? NULL : grad_dtype,
                                                   o->no_cast_fold ? NULL : copy_dtype, d);
  free(grad_dtype);
  free(copy_dtype);
  if (!t->update) goto fail;
  int n_copies = 0; /* the copies: the update's last outputs, in parameter order */
  for (int i = 0; t->copy_input && i < np; i++) n_copies += t->copy_input[i] >= 0;
  for (int i = 0, k = t->update->n_outputs - n_copies; t->copy_input && i < np; i++)
    if (t->copy_input[i] >= 0) t->copy_output[i] = k++;
  t->lr_input = np + t->n_states;
  t->step_input = t->lr_input + 1;
  t->update_loss_sum_input = t->step_input + 1;
  if (t->accuracy) t->update_correct_sum_input = t->update_loss_sum_input + 1;
  t->loss_output = np + t->n_states;
  if (t->accuracy) t->accuracy_output = t->loss_output + 1;
  t->nonfinite_output = t->loss_output + 1 + t->accuracy;
  if (o->loss_scaling) t->overflow_output = t->nonfinite_output + 1;
  if (!(o->passes->disabled && o->passes->disabled[PASS_SHARD])) {
    if (pass_shard_training(t, o->passes) != 0) goto fail;
    const char *after = o->passes->dump_after;
    if (after && (strcmp(after, "shard") == 0 || strcmp(after, "all") == 0) && !ir_mesh_is_single(&t->step->mesh)) {
      pass_dump_graph(t->step, "shard (the training step)", o->passes);
      pass_dump_graph(t->update, "shard (the optimizer update)", o->passes);
    }
  }
  g = t->step;
  if (pass_run_pipeline(g, back, 3, o->passes) != 0) goto fail;
  if (t->eval) { /* fused as the step (no dumps: those are the step's) */
    pass_options eo = {.diag = d, .verify_each = o->passes->verify_each, .disabled = o->passes->disabled};
    if (pass_run_pipeline(t->eval, back, 3, &eo) != 0) goto fail;
  }
  /* the update, fused like every graph the default pipeline makes */
  pass_options uo = {.diag = d, .verify_each = o->passes->verify_each, .disabled = o->passes->disabled};
  if (pass_run_pipeline(t->update, back, 1, &uo) != 0) goto fail;
  return t;
fail:
  free(grads);
  pass_training_free(t);
  return NULL;
}
