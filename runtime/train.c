/* runtime/train.c — the training loop: runs a training graph (forward +
 * backward) and an optimizer update graph on the CPU backend, step after
 * step, and saves / restores the whole state.
 *
 * The graphs come from passes/ (pass_build_training, pass_build_update); the
 * runtime only relies on their documented layout (runtime.h). The trainer
 * owns the parameters and optimizer states; each update returns new tensors
 * that replace the old ones. Everything is deterministic: batches are a
 * function of (seed, step, micro-batch), gradients of micro-batches are
 * summed in order and divided by K, and the kernels do not depend on the
 * thread count. So saving after N steps and resuming gives, bit for bit, the
 * parameters of an uninterrupted run (tests/unit/test_train_resume.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#define STATE_PREFIX "opt/"
#define FORMAT_NAME "tgc-train-1"

struct rt_trainer {
  rt_train_config c;
  int np, ns;
  rt_tensor **params;   /* np, in train->params order */
  rt_tensor **states;   /* ns, in update input order */
  rt_tensor **inputs;   /* train->n_inputs, refilled each micro-batch */
  rt_tensor **outs;     /* train->n_outputs, scratch */
  rt_tensor **grads;    /* np, the (accumulated) gradients of one step */
  int *grad_out;        /* np: index of d_<param> among train outputs */
  int loss_out, logits_out;
  int64_t step;
  bool lost;            /* a failed update consumed the parameters: no more steps or saves */
  bool nonfinite;       /* an update made a parameter Inf or NaN: no more steps or saves */
  bool *donate;         /* update inputs given to the executor (grads, states), and the params */
};


double rt_schedule_lr(const rt_schedule *s, int64_t step) {
  if (s->warmup > 0 && step < s->warmup) return s->lr * (double)(step + 1) / (double)s->warmup;
  if (s->kind == RT_SCHEDULE_CONSTANT) return s->lr;
  int64_t decay = s->total - s->warmup;
  if (decay <= 0) return s->lr;
  double p = (double)(step - s->warmup) / (double)decay;
  if (p > 1) p = 1;
  double floor_lr = s->lr * s->floor;
  return floor_lr + (s->lr - floor_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * p));
}

static int find_output(const ir_graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i].name && strcmp(g->outputs[i].name, name) == 0) return i;
  return -1;
}

void rt_trainer_free(rt_trainer *t) {
  if (!t) return;
  for (int i = 0; t->params && i < t->np; i++) rt_tensor_free(t->params[i]);
  for (int i = 0; t->states && i < t->ns; i++) rt_tensor_free(t->states[i]);
  for (int i = 0; t->grads && i < t->np; i++) rt_tensor_free(t->grads[i]);
  for (int i = 0; t->inputs && i < t->c.train->n_inputs; i++) rt_tensor_free(t->inputs[i]);
  free(t->params);
  free(t->states);
  free(t->grads);
  free(t->inputs);
  free(t->outs);
  free(t->grad_out);
  free(t->donate);
  free(t);
}

/* Checks the two graphs have the layout runtime.h describes. */
static int check_layout(rt_trainer *t, char *err, size_t errlen) {
  const ir_graph *tg = t->c.train, *ug = t->c.update;
  char a[160], b[160];
  t->np = tg->n_params;
  t->loss_out = find_output(tg, "loss");
  if (t->loss_out < 0) t->loss_out = 0;
  if (tg->n_outputs == 0 || tg->outputs[t->loss_out].value->type.rank != 0 ||
      !ir_dtype_is_float(tg->outputs[t->loss_out].value->type.dtype)) {
    rt_errf(err, errlen, "the training graph's first output must be a float scalar loss");
    return -1;
  }
  t->logits_out = find_output(tg, "logits");
  for (int i = 0; i < t->np; i++) {
    char name[600];
    snprintf(name, sizeof name, "d_%s", tg->params[i]->name);
    int k = find_output(tg, name);
    if (k < 0 || !ir_type_equal(&tg->outputs[k].value->type, &tg->params[i]->type)) {
      rt_errf(err, errlen, "the training graph has no output %s of the type of parameter '%s' (%s)", name,
           tg->params[i]->name, ir_type_str(&tg->params[i]->type, a, sizeof a));
      return -1;
    }
    t->grad_out[i] = k;
  }
  if (ug->n_params != t->np) {
    rt_errf(err, errlen, "the update graph has %d parameters, the training graph %d", ug->n_params, t->np);
    return -1;
  }
  for (int i = 0; i < t->np; i++)
    if (strcmp(ug->params[i]->name, tg->params[i]->name) != 0 ||
        !ir_type_equal(&ug->params[i]->type, &tg->params[i]->type)) {
      rt_errf(err, errlen, "update parameter %d is '%s' %s, training parameter '%s' %s", i, ug->params[i]->name,
           ir_type_str(&ug->params[i]->type, a, sizeof a), tg->params[i]->name,
           ir_type_str(&tg->params[i]->type, b, sizeof b));
      return -1;
    }
  t->ns = ug->n_inputs - t->np - 2;
  if (t->ns < 0 || ug->n_outputs != t->np + t->ns) {
    rt_errf(err, errlen, "the update graph has %d inputs and %d outputs for %d parameters: not the optimizer layout",
         ug->n_inputs, ug->n_outputs, t->np);
    return -1;
  }
  for (int i = 0; i < 2; i++) {
    const ir_type *st = &ug->inputs[t->np + t->ns + i]->type;
    if (st->rank != 0 || st->dtype != IR_DT_F64) {
      rt_errf(err, errlen, "the update graph's %s input must be an f64 scalar", i ? "step" : "lr");
      return -1;
    }
  }
  for (int i = 0; i < t->np; i++)
    if (!ir_type_equal(&ug->inputs[i]->type, &tg->params[i]->type) ||
        !ir_type_equal(&ug->outputs[i].value->type, &tg->params[i]->type)) {
      rt_errf(err, errlen, "update graph gradient/new value %d does not have the type of parameter '%s'", i,
           tg->params[i]->name);
      return -1;
    }
  for (int i = 0; i < t->ns; i++)
    if (!ir_type_equal(&ug->inputs[t->np + i]->type, &ug->outputs[t->np + i].value->type)) {
      rt_errf(err, errlen, "optimizer state '%s' and its new value differ in type", ug->inputs[t->np + i]->name);
      return -1;
    }
  return 0;
}

rt_trainer *rt_trainer_new(const rt_train_config *c, char *err, size_t errlen) {
  rt_trainer *t = calloc(1, sizeof *t);
  if (!t) {
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  t->c = *c;
  if (t->c.micro_batches < 1) t->c.micro_batches = 1;
  const ir_graph *tg = c->train, *ug = c->update;
  t->grad_out = calloc((size_t)tg->n_params + 1, sizeof *t->grad_out);
  t->inputs = calloc((size_t)tg->n_inputs + 1, sizeof *t->inputs);
  t->outs = calloc((size_t)tg->n_outputs + 1, sizeof *t->outs);
  if (!t->grad_out || !t->inputs || !t->outs) goto oom;
  if (check_layout(t, err, errlen) != 0) goto fail;
  if (rt_data_bind(c->data, tg, err, errlen) != 0) goto fail;
  t->params = calloc((size_t)t->np + 1, sizeof *t->params);
  t->grads = calloc((size_t)t->np + 1, sizeof *t->grads);
  t->states = calloc((size_t)t->ns + 1, sizeof *t->states);
  if (!t->params || !t->grads || !t->states) goto oom;
  for (int i = 0; i < tg->n_inputs; i++)
    if (!(t->inputs[i] = rt_tensor_new(&tg->inputs[i]->type))) goto oom;
  for (int i = 0; i < t->np; i++) {
    if (!(t->params[i] = rt_tensor_new(&tg->params[i]->type))) goto oom;
    rt_init_param(t->params[i], tg->params[i], c->seed);
  }
  for (int i = 0; i < t->ns; i++)
    if (!(t->states[i] = rt_tensor_new(&ug->inputs[t->np + i]->type))) goto oom;
  /* update inputs: grads and states donated, lr and step not; the first np
   * entries (all true) serve as the params' flags too */
  if (!(t->donate = calloc((size_t)ug->n_inputs + 1, sizeof *t->donate))) goto oom;
  for (int i = 0; i < t->np + t->ns; i++) t->donate[i] = true;
  return t;
oom:
  rt_errf(err, errlen, "out of memory");
fail:
  rt_trainer_free(t);
  return NULL;
}

int64_t rt_trainer_steps_done(const rt_trainer *t) { return t->step; }
int rt_trainer_num_params(const rt_trainer *t) { return t->np; }
const rt_tensor *rt_trainer_param(const rt_trainer *t, int i) { return t->params[i]; }

/* acc += g, element by element in index order (deterministic). */
static void accumulate(rt_tensor *acc, const rt_tensor *g) {
  int64_t n = rt_numel(&acc->type);
  if (acc->type.dtype == IR_DT_F64) {
    double *a = acc->data;
    const double *b = g->data;
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
  } else if (acc->type.dtype == IR_DT_F32) {
    float *a = acc->data;
    const float *b = g->data;
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
  } else {
    for (int64_t i = 0; i < n; i++) rt_store(acc->type.dtype, acc->data, i, rt_load(acc->type.dtype, acc->data, i) + rt_load(g->type.dtype, g->data, i));
  }
}

static void divide(rt_tensor *acc, double k) {
  int64_t n = rt_numel(&acc->type);
  for (int64_t i = 0; i < n; i++) rt_store(acc->type.dtype, acc->data, i, rt_load(acc->type.dtype, acc->data, i) / k);
}

/* Correct argmax predictions of logits [..., V] against integer targets. */
static int64_t count_correct(const rt_tensor *logits, const rt_tensor *targets, int64_t *positions) {
  int rank = logits->type.rank;
  int64_t V = rank ? logits->type.dims[rank - 1] : 1;
  int64_t n = V ? rt_numel(&logits->type) / V : 0;
  *positions = 0;
  if (rt_numel(&targets->type) != n) return 0;
  *positions = n;
  int64_t correct = 0;
  bool f32 = logits->type.dtype == IR_DT_F32;
#pragma omp parallel for schedule(static) reduction(+ : correct) if (n * V > RT_PAR_MIN && n > 1)
  for (int64_t p = 0; p < n; p++) {
    int64_t best = 0;
    if (f32) { /* the same comparisons, on the floats as stored */
      const float *x = (const float *)logits->data + p * V;
      for (int64_t v = 1; v < V; v++)
        if (x[v] > x[best]) best = v;
    } else {
      double bv = rt_load(logits->type.dtype, logits->data, p * V);
      for (int64_t v = 1; v < V; v++) {
        double x = rt_load(logits->type.dtype, logits->data, p * V + v);
        if (x > bv) bv = x, best = v;
      }
    }
    correct += best == rt_load_int(targets->type.dtype, targets->data, p);
  }
  return correct;
}

/* Elements of x that are Inf or NaN (their exponent bits all ones; integer
 * tensors have none). One pass over the bytes, threaded for large tensors. */
static int64_t count_nonfinite(const rt_tensor *x) {
  int64_t n = rt_numel(&x->type), bad = 0;
  ir_dtype dt = x->type.dtype;
  if (dt == IR_DT_F64) {
    const uint64_t *b = x->data;
#pragma omp parallel for schedule(static) reduction(+ : bad) if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) bad += (b[i] & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
  } else if (dt == IR_DT_F32) {
    const uint32_t *b = x->data;
#pragma omp parallel for schedule(static) reduction(+ : bad) if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) bad += (b[i] & 0x7f800000u) == 0x7f800000u;
  } else if (dt == IR_DT_BF16 || dt == IR_DT_F16) {
    const uint16_t *b = x->data;
    uint16_t e = dt == IR_DT_BF16 ? 0x7f80 : 0x7c00;
#pragma omp parallel for schedule(static) reduction(+ : bad) if (n > RT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) bad += (b[i] & e) == e;
  }
  return bad;
}

/* The parameters are all finite: 0, or -1 with "'NAME': K of N elements are
 * Inf or NaN" (the first such parameter) in err. Run after every update and
 * before every save, so a step that blows up never replaces a good state.
 * (Over the parameter tensors only: it moves with them to whichever
 * backend holds them.) */
static int check_params_finite(const rt_trainer *t, char *err, size_t errlen) {
  for (int i = 0; i < t->np; i++) {
    int64_t bad = count_nonfinite(t->params[i]);
    if (bad) {
      rt_errf(err, errlen, "'%s': %lld of %lld elements are Inf or NaN", t->c.train->params[i]->name,
              (long long)bad, (long long)rt_numel(&t->params[i]->type));
      return -1;
    }
  }
  return 0;
}

int rt_trainer_step(rt_trainer *t, rt_step_result *r, char *err, size_t errlen) {
  const ir_graph *tg = t->c.train, *ug = t->c.update;
  int K = t->c.micro_batches;
  double loss = 0;
  int64_t correct = 0, positions = 0;
  size_t peak = 0;
  int targ = rt_data_targets_input(t->c.data);
  if (t->lost || t->nonfinite) {
    rt_errf(err, errlen, t->lost ? "the parameters were lost in a failed optimizer update"
                                 : "the parameters became non-finite in an earlier step");
    return -1;
  }
  for (int i = 0; i < t->np; i++) {
    rt_tensor_free(t->grads[i]);
    t->grads[i] = NULL;
  }
  for (int k = 0; k < K; k++) {
    if (rt_data_fill(t->c.data, t->c.seed, t->step, k, t->inputs, err, errlen) != 0) return -1;
    rt_stats st = {.profile = t->c.profile};
    if (rt_cpu_backend.graph_compute(tg, t->inputs, t->params, t->outs, &st, err, errlen) != 0) return -1;
    if (st.peak_bytes > peak) peak = st.peak_bytes;
    loss += rt_tensor_get(t->outs[t->loss_out], 0);
    if (t->logits_out >= 0 && targ >= 0) {
      int64_t pos = 0;
      correct += count_correct(t->outs[t->logits_out], t->inputs[targ], &pos);
      positions += pos;
    }
    for (int i = 0; i < t->np; i++) {
      rt_tensor **g = &t->outs[t->grad_out[i]];
      if (!t->grads[i]) {
        t->grads[i] = *g; /* take it */
        *g = NULL;
      } else {
        accumulate(t->grads[i], *g);
      }
    }
    for (int i = 0; i < tg->n_outputs; i++) {
      rt_tensor_free(t->outs[i]);
      t->outs[i] = NULL;
    }
  }
  if (K > 1)
    for (int i = 0; i < t->np; i++) divide(t->grads[i], (double)K);

  double lr = rt_schedule_lr(&t->c.schedule, t->step);
  int nu = ug->n_inputs;
  rt_tensor **uin = calloc((size_t)nu, sizeof *uin), **uout = calloc((size_t)ug->n_outputs + 1, sizeof *uout);
  ir_type sc = {.dtype = IR_DT_F64, .rank = 0};
  rt_tensor *lr_t = rt_tensor_new(&sc), *step_t = rt_tensor_new(&sc);
  int rc = -1;
  if (!uin || !uout || !lr_t || !step_t) {
    rt_errf(err, errlen, "out of memory");
    goto done;
  }
  rt_tensor_set(lr_t, 0, lr);
  rt_tensor_set(step_t, 0, (double)(t->step + 1));
  for (int i = 0; i < t->np; i++) uin[i] = t->grads[i];
  for (int i = 0; i < t->ns; i++) uin[t->np + i] = t->states[i];
  uin[t->np + t->ns] = lr_t;
  uin[t->np + t->ns + 1] = step_t;
  /* Gradients, states and parameters are donated: the update computes in
   * their buffers (no fresh pages for ~3 copies of the model every step) and
   * may hand them back as outputs. The old tensors that did not come back
   * are freed after; on failure the model state is lost (the run stops). */
  rt_stats ust = {.profile = t->c.update_profile, .donate_inputs = t->donate, .donate_params = t->donate};
  int urc = rt_cpu_backend.graph_compute(ug, uin, t->params, uout, &ust, err, errlen);
  /* the old tensors: free those not handed back as an output */
  int nold = 2 * t->np + t->ns, nnew = t->np + t->ns;
  for (int i = 0; i < nold; i++) {
    rt_tensor *old = i < t->np ? t->grads[i] : i < 2 * t->np ? t->params[i - t->np] : t->states[i - 2 * t->np];
    bool kept = false;
    for (int j = 0; urc == 0 && j < nnew && !kept; j++) kept = uout[j] == old;
    if (!kept) rt_tensor_free(old);
  }
  for (int i = 0; i < t->np; i++) t->grads[i] = NULL;
  for (int i = 0; i < t->np; i++) t->params[i] = urc == 0 ? uout[i] : NULL;
  for (int i = 0; i < t->ns; i++) t->states[i] = urc == 0 ? uout[t->np + i] : NULL;
  if (urc != 0) {
    t->lost = true;
    goto done;
  }
  char why[700];
  if (check_params_finite(t, why, sizeof why) != 0) {
    t->nonfinite = true;
    rt_errf(err, errlen, "parameters became non-finite (%s; the loss was %g)", why, loss / K);
    goto done;
  }
  t->step++;
  rc = 0;
  if (r) {
    r->step = t->step;
    r->loss = loss / K;
    r->accuracy = positions ? (double)correct / (double)positions : -1;
    r->lr = lr;
    r->peak_bytes = peak;
  }
done:
  rt_tensor_free(lr_t);
  rt_tensor_free(step_t);
  free(uin);
  free(uout);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* state files                                                             */
/* ---------------------------------------------------------------------- */

static char *state_name(const rt_trainer *t, int i) {
  const char *n = t->c.update->inputs[t->np + i]->name;
  size_t len = strlen(STATE_PREFIX) + strlen(n) + 1;
  char *s = malloc(len);
  if (s) snprintf(s, len, "%s%s", STATE_PREFIX, n);
  return s;
}

int rt_trainer_save(const rt_trainer *t, const char *path, const rt_meta_entry *meta, int n_meta, char *err,
                    size_t errlen) {
  if (t->lost) {
    rt_errf(err, errlen, "%s: not saved: the parameters were lost in a failed optimizer update", path);
    return -1;
  }
  char why[700];
  if (check_params_finite(t, why, sizeof why) != 0) {
    rt_errf(err, errlen, "%s: not saved: parameter %s", path, why);
    return -1;
  }
  int n = t->np + t->ns;
  rt_named_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
  char **snames = calloc((size_t)t->ns + 1, sizeof *snames);
  rt_meta_entry *md = calloc((size_t)n_meta + 3, sizeof *md);
  int rc = -1;
  if (!ts || !snames || !md) {
    rt_errf(err, errlen, "%s: out of memory", path);
    goto done;
  }
  for (int i = 0; i < t->np; i++) ts[i] = (rt_named_tensor){t->c.train->params[i]->name, t->params[i]};
  for (int i = 0; i < t->ns; i++) {
    if (!(snames[i] = state_name(t, i))) {
      rt_errf(err, errlen, "%s: out of memory", path);
      goto done;
    }
    ts[t->np + i] = (rt_named_tensor){snames[i], t->states[i]};
  }
  char step[32], seed[32];
  snprintf(step, sizeof step, "%" PRId64, t->step);
  snprintf(seed, sizeof seed, "%" PRIu64, t->c.seed);
  md[0] = (rt_meta_entry){"format", FORMAT_NAME};
  md[1] = (rt_meta_entry){"step", step};
  md[2] = (rt_meta_entry){"seed", seed};
  for (int i = 0; i < n_meta; i++) md[3 + i] = meta[i];
  rc = rt_safetensors_write(path, ts, n, md, n_meta + 3, err, errlen);
done:
  for (int i = 0; snames && i < t->ns; i++) free(snames[i]);
  free(snames);
  free(ts);
  free(md);
  return rc;
}

/* Finds `name` in f and checks it has type want; kind says what it is for messages. */
static const rt_tensor *expect_tensor(const rt_safetensors *f, const char *path, const char *name, const ir_type *want,
                                      bool is_state, char *err, size_t errlen) {
  const rt_tensor *x = rt_safetensors_find(f, name);
  char a[160], b[160];
  if (!x) {
    rt_errf(err, errlen, "%s: missing tensor '%s' (%s)", path, name,
         is_state ? "optimizer state: was it saved with another optimizer?" : "a parameter of the model");
    return NULL;
  }
  if (!ir_type_equal(&x->type, want)) {
    rt_errf(err, errlen, "%s: tensor '%s' is %s but the model's %s is %s", path, name, ir_type_str(&x->type, a, sizeof a),
         is_state ? "optimizer state" : "parameter", ir_type_str(want, b, sizeof b));
    return NULL;
  }
  return x;
}

int rt_trainer_load(rt_trainer *t, const rt_safetensors *f, const char *path, char *err, size_t errlen) {
  const char *fmt = rt_safetensors_meta(f, "format"), *step = rt_safetensors_meta(f, "step");
  if (!fmt || strcmp(fmt, FORMAT_NAME) != 0) {
    rt_errf(err, errlen, "%s: not a tgc training state (metadata \"format\" is %s%s%s, expected \"%s\")", path,
         fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "", FORMAT_NAME);
    return -1;
  }
  /* rt_safetensors_read checked it: a state without one was not written by tgc whole */
  if (!rt_safetensors_meta(f, RT_SAFETENSORS_CRC_KEY)) {
    rt_errf(err, errlen, "%s: no metadata \"%s\" (the checksum of the tensor bytes every tgc state carries)", path,
            RT_SAFETENSORS_CRC_KEY);
    return -1;
  }
  char *end = NULL;
  errno = 0;
  long long s = step ? strtoll(step, &end, 10) : -1;
  if (!step || end == step || *end || errno || s < 0 || s > RT_MAX_STEP) {
    char shown[48] = "";
    if (step) snprintf(shown, sizeof shown, "\"%.40s%s\"", step, strlen(step) > 40 ? "..." : "");
    rt_errf(err, errlen, "%s: metadata \"step\" is %s: expected an integer in [0, %lld]", path,
            step ? shown : "missing", (long long)RT_MAX_STEP);
    return -1;
  }
  int n = t->np + t->ns;
  const rt_tensor **src = calloc((size_t)n + 1, sizeof *src);
  if (!src) {
    rt_errf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  int rc = -1;
  for (int i = 0; i < t->np; i++)
    if (!(src[i] = expect_tensor(f, path, t->c.train->params[i]->name, &t->params[i]->type, false, err, errlen)))
      goto done;
  for (int i = 0; i < t->ns; i++) {
    char *name = state_name(t, i);
    if (!name) {
      rt_errf(err, errlen, "%s: out of memory", path);
      goto done;
    }
    src[t->np + i] = expect_tensor(f, path, name, &t->states[i]->type, true, err, errlen);
    free(name);
    if (!src[t->np + i]) goto done;
  }
  if (rt_safetensors_count(f) != n) {
    /* name the first tensor this model does not have */
    for (int j = 0; j < rt_safetensors_count(f); j++) {
      const rt_tensor *x = rt_safetensors_tensor(f, j);
      bool used = false;
      for (int i = 0; i < n && !used; i++) used = src[i] == x;
      if (!used) {
        rt_errf(err, errlen, "%s: unexpected tensor '%s': not a parameter or optimizer state of this model and optimizer",
             path, rt_safetensors_name(f, j));
        goto done;
      }
    }
  }
  for (int i = 0; i < t->np; i++) memcpy(t->params[i]->data, src[i]->data, src[i]->nbytes);
  for (int i = 0; i < t->ns; i++) memcpy(t->states[i]->data, src[t->np + i]->data, src[t->np + i]->nbytes);
  t->step = s;
  rc = 0;
done:
  free(src);
  return rc;
}
