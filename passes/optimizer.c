/* passes/optimizer.c — training as IR: the training graph (forward +
 * backward) and the optimizer's update graph.
 *
 * pass_build_training edits a model graph in place: it picks the loss,
 * appends one GRAD node (loss, params...) whose results become the outputs
 * d_<param>, and runs the default pipeline (autodiff expands the GRAD node,
 * canonicalize cleans up, checkpoint applies --checkpoint).
 *
 * pass_build_update builds a separate graph holding one optimizer step for
 * every parameter, written in elementwise IR ops in the parameter's dtype
 * (each op rounds to that dtype, so in f64 a plain-C loop doing the same
 * operations in the same order agrees bit for bit). With g the gradient,
 * p the parameter, lr and t (the 1-based step) scalar inputs:
 *
 *   clipping (clip_norm > 0, over all parameters together, in f64):
 *     norm  = sqrt(sum_i reduce_sum(square(f64(g_i))))   (summed in param order)
 *     scale = minimum(1, clip_norm / (norm + 1e-6));     g_i = g_i * scale
 *   L2 weight decay (sgd, momentum, adam with weight_decay > 0): g = g + wd * p
 *   sgd:      p' = p - lr * g
 *   momentum: v' = mu * v + g;  p' = p - lr * v'
 *   adam:     m' = b1 * m + (1 - b1) * g;   v' = b2 * v + (1 - b2) * square(g)
 *             with bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t), step = lr / bc1 and
 *             sbc2 = sqrt(bc2) (all four in f64), as PyTorch's Adam writes it:
 *             p' = p - step * (m' / (sqrt(v') / sbc2 + eps))
 *             (= p - lr * mhat / (sqrt(vhat) + eps) with mhat = m' / bc1, vhat =
 *             v' / bc2, in two divisions per element instead of three)
 *   adamw:    as adam, with decoupled decay first: p1 = p - (lr * wd) * p  (lr * wd in f64)
 *             p' = p1 - step * (m' / (sqrt(v') / sbc2 + eps))
 * Scalars computed in f64 (lr, 1 - pow(b, t), lr * wd, scale) are cast to
 * the parameter's dtype where they meet it; constants such as 1 - b1 are
 * computed in double and stored in the parameter's dtype.
 *
 * requires: a verified model graph; invalidates: nothing (builds a new graph).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "pass.h"

int pass_optimizer_state_count(pass_optimizer_kind kind) {
  switch (kind) {
  case PASS_OPT_MOMENTUM: return 1;
  case PASS_OPT_ADAM:
  case PASS_OPT_ADAMW: return 2;
  default: return 0;
  }
}

pass_optimizer pass_optimizer_defaults(pass_optimizer_kind kind) {
  pass_optimizer o = {0};
  o.kind = kind;
  o.momentum = 0.9;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  return o;
}

/* ---------------------------------------------------------------------- */
/* the update graph                                                        */
/* ---------------------------------------------------------------------- */

typedef struct {
  ir_graph *g;
  ir_loc loc; /* of the parameter being updated */
} builder;

static ir_value *scalar(builder *b, ir_dtype dt, double v) {
  ir_type t = {.dtype = dt, .rank = 0};
  ir_attr a = ir_attr_float("value", v);
  char err[256];
  ir_node *n = ir_graph_build(b->g, IR_OP_CONST, NULL, 0, &a, 1, &t, NULL, b->loc, err, sizeof err);
  if (!n) {
    fprintf(stderr, "tgc: internal error: const: %s\n", err);
    abort();
  }
  return n->out[0];
}

static ir_value *op2(builder *b, ir_op op, ir_value *x, ir_value *y, const char *name) {
  ir_value *in[2] = {x, y};
  return ir_graph_build1(b->g, op, in, 2, NULL, 0, name, b->loc);
}

static ir_value *op1(builder *b, ir_op op, ir_value *x, const char *name) {
  return ir_graph_build1(b->g, op, &x, 1, NULL, 0, name, b->loc);
}

static ir_value *cast_to(builder *b, ir_value *x, ir_dtype dt) {
  if (x->type.dtype == dt) return x;
  ir_attr a = ir_attr_dtype("to", dt);
  return ir_graph_build1(b->g, IR_OP_CAST, &x, 1, &a, 1, NULL, b->loc);
}

/* "<prefix><param>" in the graph arena (a name hint: the graph makes it unique). */
static const char *derived_name(ir_graph *g, const char *prefix, const char *param) {
  size_t len = strlen(prefix) + strlen(param) + 1;
  char *s = ir_arena_alloc(g->arena, len);
  snprintf(s, len, "%s%s", prefix, param);
  return s;
}

/* sqrt(sum_i reduce_sum(square(f64(g_i)))) -> scale, an f64 scalar. */
static ir_value *clip_scale(builder *b, ir_value *const *grads, int np, double clip_norm) {
  ir_value *total = NULL;
  for (int i = 0; i < np; i++) {
    ir_value *sq = op1(b, IR_OP_SQUARE, cast_to(b, grads[i], IR_DT_F64), NULL);
    if (sq->type.rank > 0) {
      int64_t axes[IR_MAX_RANK];
      for (int k = 0; k < sq->type.rank; k++) axes[k] = k;
      ir_attr a = ir_attr_ints("axes", axes, sq->type.rank);
      sq = ir_graph_build1(b->g, IR_OP_REDUCE_SUM, &sq, 1, &a, 1, NULL, b->loc);
    }
    total = total ? op2(b, IR_OP_ADD, total, sq, NULL) : sq;
  }
  ir_value *norm = op1(b, IR_OP_SQRT, total, "grad_norm");
  ir_value *den = op2(b, IR_OP_ADD, norm, scalar(b, IR_DT_F64, 1e-6), NULL);
  ir_value *ratio = op2(b, IR_OP_DIV, scalar(b, IR_DT_F64, clip_norm), den, NULL);
  return op2(b, IR_OP_MINIMUM, scalar(b, IR_DT_F64, 1.0), ratio, "clip_scale");
}

/* What a training program's update graph adds to the bare one (training.c):
 * the micro-batch average, the logged scalars and the finiteness check. */
typedef struct {
  int micro_batches;  /* K: gradients are sums over K micro-batches (divided by K first) */
  bool loss;          /* input loss_sum (f64): output loss = loss_sum / K */
  bool accuracy;      /* input correct_sum (f64): output accuracy = correct_sum / (positions K) */
  double positions;   /* targets per micro-batch */
  bool nonfinite;     /* output nonfinite (i64): Inf / NaN elements of the new parameters */
  bool skip_overflow; /* output overflow (i64): Inf / NaN elements of the gradients; when there are any the
                       * parameters and states stay as they were (dynamic loss scaling skips the step) */
  const ir_dtype *grad_dtype; /* NULL, or per parameter its gradient input's dtype (widened on reading) */
  const ir_dtype *copy_dtype; /* NULL, or per parameter a narrower dtype of a copy of the new value (outputs last) */
} update_extras;

static ir_graph *build_update(const ir_graph *model, const pass_optimizer *opt, const update_extras *x, ir_diag *d);

ir_graph *pass_build_update(const ir_graph *model, const pass_optimizer *opt, ir_diag *d) {
  return build_update(model, opt, NULL, d);
}

int pass_update_flops(const ir_graph *model, pass_optimizer_kind kind, double *flops, ir_diag *d) {
  pass_optimizer opt = pass_optimizer_defaults(kind);
  ir_graph *u = pass_build_update(model, &opt, d);
  if (!u) return -1;
  pass_graph_cost uc;
  pass_graph_cost_of(u, &uc);
  *flops = 0;
  for (int p = 0; p < PASS_NUM_PHASES; p++) *flops += uc.flops[p];
  ir_graph_free(u);
  return 0;
}

ir_graph *pass_build_update_for_training(const ir_graph *model, const pass_optimizer *opt, int micro_batches,
                                         bool loss, bool accuracy, double positions, bool skip_overflow,
                                         const ir_dtype *grad_dtype, const ir_dtype *copy_dtype, ir_diag *d) {
  update_extras x = {.micro_batches = micro_batches, .loss = loss, .accuracy = accuracy, .positions = positions,
                     .nonfinite = true, .skip_overflow = skip_overflow, .grad_dtype = grad_dtype,
                     .copy_dtype = copy_dtype};
  return build_update(model, opt, &x, d);
}

/* The order the parameters' updates are built in: alike ones together
 * (the gradient's dtype, a narrower copy written or not; otherwise
 * parameter order). The lowering runs consecutive alike updates as one
 * multi-tensor kernel (analysis's pass_group_size: one expression, one
 * store pattern), and with mixed precision the weights' updates write a
 * bf16 copy where the biases' and norms' do not: in parameter order the
 * two alternate and no run forms (gpt2-124m: 148 launches, against 12).
 * Each update reads and writes its own parameter's values only, so the
 * order changes no result. */
static int *update_order(ir_value *const *p, ir_value *const *grad, const update_extras *x, int np) {
  int *order = malloc((size_t)(np > 0 ? np : 1) * sizeof *order), *key = malloc((size_t)(np > 0 ? np : 1) * sizeof *key);
  if (!order || !key) IR_DIE("out of memory (order, key)");
  for (int i = 0; i < np; i++) {
    bool copy = x && x->copy_dtype && x->copy_dtype[i] != p[i]->type.dtype;
    key[i] = (int)grad[i]->type.dtype * 2 + copy;
    int k = i; /* a stable insertion by key */
    while (k > 0 && key[order[k - 1]] > key[i]) order[k] = order[k - 1], k--;
    order[k] = i;
  }
  free(key);
  return order;
}

static ir_graph *build_update(const ir_graph *model, const pass_optimizer *opt, const update_extras *x, ir_diag *d) {
  if ((unsigned)opt->kind >= PASS_OPT_COUNT) {
    ir_error_plain(d, "unknown optimizer kind %d", (int)opt->kind);
    return NULL;
  }
  int np = model->n_params;
  for (int i = 0; i < np; i++)
    if (!ir_dtype_is_float(model->params[i]->type.dtype)) {
      ir_error(d, model->params[i]->loc, "parameter '%s' is not floating-point: it cannot be trained",
               model->params[i]->name);
      return NULL;
    }
  ir_graph *g = ir_graph_new("update", model->source_file);
  g->mesh = model->mesh; /* sharded with the model (shard_train.c) */
  builder b = {.g = g};
  int ns = pass_optimizer_state_count(opt->kind);
  ir_value **p = calloc((size_t)np + 1, sizeof *p), **grad = calloc((size_t)np + 1, sizeof *grad);
  ir_value **state = calloc((size_t)np * (size_t)ns + 1, sizeof *state);
  if (!p || !grad || !state) IR_DIE("out of memory (p || !grad || !state)");
  for (int i = 0; i < np; i++) {
    const ir_value *mp = model->params[i];
    p[i] = ir_graph_add_param(g, mp->name, mp->type, mp->init, mp->loc);
  }
  for (int i = 0; i < np; i++) {
    ir_type gt = p[i]->type;
    if (x && x->grad_dtype) gt.dtype = x->grad_dtype[i];
    grad[i] = ir_graph_add_input(g, derived_name(g, "d_", p[i]->name), gt, p[i]->loc);
  }
  static const char *const state_prefix[PASS_OPT_COUNT][2] = {
      [PASS_OPT_MOMENTUM] = {"mom."}, [PASS_OPT_ADAM] = {"m.", "v."}, [PASS_OPT_ADAMW] = {"m.", "v."}};
  for (int i = 0; i < np; i++)
    for (int s = 0; s < ns; s++)
      state[i * ns + s] = ir_graph_add_input(g, derived_name(g, state_prefix[opt->kind][s], p[i]->name),
                                             p[i]->type, p[i]->loc);
  ir_type sc = {.dtype = IR_DT_F64, .rank = 0};
  ir_loc none = {0};
  ir_value *lr = ir_graph_add_input(g, "lr", sc, none);
  ir_value *step = ir_graph_add_input(g, "step", sc, none);
  ir_value *loss_sum = x && x->loss ? ir_graph_add_input(g, "loss_sum", sc, none) : NULL;
  ir_value *correct_sum = x && x->accuracy ? ir_graph_add_input(g, "correct_sum", sc, none) : NULL;
  for (int i = 0; x && x->grad_dtype && i < np; i++) { /* narrow gradients widened (exact) where the update reads them */
    b.loc = p[i]->loc;
    grad[i] = cast_to(&b, grad[i], p[i]->type.dtype);
  }
  if (x && x->micro_batches > 1) /* the mean of the micro-batches' gradients, in each one's dtype */
    for (int i = 0; i < np; i++) {
      b.loc = p[i]->loc;
      grad[i] = op2(&b, IR_OP_DIV, grad[i], scalar(&b, grad[i]->type.dtype, (double)x->micro_batches), NULL);
    }
  b.loc = none;

  /* the norm of narrow gradients read as they are (f64 of the bf16 value is f64 of its widening): the
   * multi-tensor sum of squares reads them, and nothing writes the wide ones */
  bool narrow = x && x->grad_dtype && x->micro_batches <= 1;
  ir_value *scale = opt->clip_norm > 0 ? clip_scale(&b, narrow ? g->inputs : grad, np, opt->clip_norm) : NULL;
  ir_value *step_size = NULL, *sbc2 = NULL, *lr_wd = NULL;
  if (opt->kind == PASS_OPT_ADAM || opt->kind == PASS_OPT_ADAMW) {
    ir_value *bc1 = op2(&b, IR_OP_SUB, scalar(&b, IR_DT_F64, 1.0),
                        op2(&b, IR_OP_POW, scalar(&b, IR_DT_F64, opt->beta1), step, NULL), "bias_correction1");
    ir_value *bc2 = op2(&b, IR_OP_SUB, scalar(&b, IR_DT_F64, 1.0),
                        op2(&b, IR_OP_POW, scalar(&b, IR_DT_F64, opt->beta2), step, NULL), "bias_correction2");
    step_size = op2(&b, IR_OP_DIV, lr, bc1, "step_size");
    sbc2 = op1(&b, IR_OP_SQRT, bc2, "sqrt_bias_correction2");
  }
  if (opt->kind == PASS_OPT_ADAMW && opt->weight_decay > 0)
    lr_wd = op2(&b, IR_OP_MUL, lr, scalar(&b, IR_DT_F64, opt->weight_decay), "lr_wd");

  ir_value **new_state = calloc((size_t)np * (size_t)ns + 1, sizeof *new_state);
  ir_value **new_p = calloc((size_t)np + 1, sizeof *new_p);
  if (!new_state || !new_p) IR_DIE("out of memory (new_state || !new_p)");
  int *order = update_order(p, grad, x, np);
  for (int k = 0; k < np; k++) {
    int i = order[k];
    b.loc = p[i]->loc;
    ir_dtype dt = p[i]->type.dtype;
    ir_value *gv = grad[i];
    if (scale) gv = op2(&b, IR_OP_MUL, gv, cast_to(&b, scale, dt), NULL);
    if (opt->weight_decay > 0 && opt->kind != PASS_OPT_ADAMW)
      gv = op2(&b, IR_OP_ADD, gv, op2(&b, IR_OP_MUL, scalar(&b, dt, opt->weight_decay), p[i], NULL), NULL);
    const char *pname = derived_name(g, "new.", p[i]->name);
    switch (opt->kind) {
    case PASS_OPT_SGD:
      new_p[i] = op2(&b, IR_OP_SUB, p[i], op2(&b, IR_OP_MUL, cast_to(&b, lr, dt), gv, NULL), pname);
      break;
    case PASS_OPT_MOMENTUM: {
      ir_value *v = state[i];
      ir_value *v2 = op2(&b, IR_OP_ADD, op2(&b, IR_OP_MUL, scalar(&b, dt, opt->momentum), v, NULL), gv,
                         derived_name(g, "new.", v->name));
      new_state[i] = v2;
      new_p[i] = op2(&b, IR_OP_SUB, p[i], op2(&b, IR_OP_MUL, cast_to(&b, lr, dt), v2, NULL), pname);
      break;
    }
    case PASS_OPT_ADAM:
    case PASS_OPT_ADAMW: {
      ir_value *m = state[2 * i], *v = state[2 * i + 1];
      ir_value *m2 = op2(&b, IR_OP_ADD, op2(&b, IR_OP_MUL, scalar(&b, dt, opt->beta1), m, NULL),
                         op2(&b, IR_OP_MUL, scalar(&b, dt, 1.0 - opt->beta1), gv, NULL), derived_name(g, "new.", m->name));
      ir_value *v2 = op2(&b, IR_OP_ADD, op2(&b, IR_OP_MUL, scalar(&b, dt, opt->beta2), v, NULL),
                         op2(&b, IR_OP_MUL, scalar(&b, dt, 1.0 - opt->beta2), op1(&b, IR_OP_SQUARE, gv, NULL), NULL),
                         derived_name(g, "new.", v->name));
      ir_value *den = op2(&b, IR_OP_ADD, op2(&b, IR_OP_DIV, op1(&b, IR_OP_SQRT, v2, NULL), cast_to(&b, sbc2, dt), NULL),
                          scalar(&b, dt, opt->eps), NULL);
      ir_value *upd = op2(&b, IR_OP_MUL, cast_to(&b, step_size, dt), op2(&b, IR_OP_DIV, m2, den, NULL), NULL);
      ir_value *base = p[i];
      if (lr_wd) base = op2(&b, IR_OP_SUB, p[i], op2(&b, IR_OP_MUL, cast_to(&b, lr_wd, dt), p[i], NULL), NULL);
      new_p[i] = op2(&b, IR_OP_SUB, base, upd, pname);
      new_state[2 * i] = m2;
      new_state[2 * i + 1] = v2;
      break;
    }
    default: break;
    }
  }
  ir_value *overflow = NULL;
  if (x && x->skip_overflow) { /* the gradients' Inf / NaN elements; any: keep the old values */
    b.loc = none;
    for (int i = 0; i < np; i++) {
      ir_value *c = op1(&b, IR_OP_COUNT_NONFINITE, g->inputs[i], NULL);
      overflow = overflow ? op2(&b, IR_OP_ADD, overflow, c, NULL) : c;
    }
    ir_value *ok = op2(&b, IR_OP_EQ, overflow, scalar(&b, IR_DT_I64, 0), "no_overflow");
    for (int i = 0; i < np * ns + np; i++) {
      ir_value **nv = i < np ? &new_p[i] : &new_state[i - np], *old = i < np ? p[i] : state[i - np];
      ir_value *in[3] = {ok, *nv, old};
      const char *name = (*nv)->name;
      b.loc = old->loc;
      ir_value *kept = ir_graph_build1(g, IR_OP_WHERE, in, 3, NULL, 0, NULL, b.loc);
      kept->name = name; /* the output keeps its name: the computed value takes a suffix */
      (*nv)->name = ir_graph_unique_name(g, name);
      *nv = kept;
    }
  }
  for (int i = 0; i < np; i++) ir_graph_add_output(g, new_p[i]->name, new_p[i]);
  for (int i = 0; i < np * ns; i++) {
    new_state[i]->role = IR_ROLE_OPT_STATE;
    ir_graph_add_output(g, new_state[i]->name, new_state[i]);
  }
  b.loc = none;
  double K = x && x->micro_batches > 1 ? (double)x->micro_batches : 1.0;
  if (loss_sum) ir_graph_add_output(g, "loss", op2(&b, IR_OP_DIV, loss_sum, scalar(&b, IR_DT_F64, K), "loss"));
  if (correct_sum)
    ir_graph_add_output(g, "accuracy",
                        op2(&b, IR_OP_DIV, correct_sum, scalar(&b, IR_DT_F64, x->positions * K), "accuracy"));
  if (x && x->nonfinite) { /* the new parameters' Inf / NaN elements, summed in param order */
    ir_value *total = NULL;
    for (int i = 0; i < np; i++) {
      ir_value *c = op1(&b, IR_OP_COUNT_NONFINITE, new_p[i], NULL);
      total = total ? op2(&b, IR_OP_ADD, total, c, NULL) : c;
    }
    if (total) ir_graph_add_output(g, "nonfinite", total);
  }
  if (overflow) ir_graph_add_output(g, "overflow", overflow);
  for (int i = 0; x && x->copy_dtype && i < np; i++) /* the compute copies (training.c's fold) */
    if (x->copy_dtype[i] != p[i]->type.dtype) {
      b.loc = p[i]->loc;
      char nm[600];
      snprintf(nm, sizeof nm, "%s.%s", p[i]->name, ir_dtype_name(x->copy_dtype[i])); /* the step input's name */
      ir_attr to = ir_attr_dtype("to", x->copy_dtype[i]);
      ir_value *c = ir_graph_build1(g, IR_OP_CAST, &new_p[i], 1, &to, 1, derived_name(g, "", nm), b.loc);
      c->role = new_p[i]->role;
      ir_graph_add_output(g, c->name, c);
    }
  free(order);
  free(p);
  free(grad);
  free(state);
  free(new_state);
  free(new_p);
  if (ir_verify(g, d) != 0) {
    ir_graph_free(g);
    return NULL;
  }
  return g;
}
