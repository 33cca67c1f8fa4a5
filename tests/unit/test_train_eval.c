/* tests/unit/test_train_eval.c — evaluation (rt_trainer_eval, the eval
 * graph of pass_build_train): on the batch a training step reads, with lr 0,
 * the eval loss and accuracy are the step's; evaluating changes nothing (the
 * same result again, the parameters bit-identical); the eval graph holds no
 * gradient and no update; on the cpu and on cuda-emu.
 *
 * Tolerance: none. The eval graph is the step's forward copied before the
 * gradient is added and sharded with the same layouts, so the loss comes out
 * bit for bit (f64 examples/mlp.tg on xor, f32 gpt tiny); a pass that one
 * day fuses them differently would be told here, and tol given there.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "testtrain.h"

static bool params_equal(rt_trainer *tr, rt_tensor **snap) {
  bool same = true;
  for (int i = 0; i < rt_trainer_num_params(tr); i++) {
    const rt_tensor *p = rt_trainer_param(tr, i);
    rt_tensor *h = rt_tensor_new(&p->type);
    char err[256];
    CHECK_EQ_INT(rt_download(h->data, p, err, sizeof err), 0);
    if (!snap[i]) snap[i] = h;
    else {
      same &= memcmp(h->data, snap[i]->data, h->nbytes) == 0;
      rt_tensor_free(h);
    }
  }
  return same;
}

/* The eval graph is the forward: no grad nodes, no optimizer state, no
 * parameter written. */
static void check_forward_only(const pass_training *pt) {
  CHECK(pt->eval != NULL);
  CHECK_EQ_INT(pt->eval->n_inputs, pt->n_data);
  CHECK_EQ_INT(pt->eval->n_params, pt->n_params);
  for (int i = 0; i < pt->eval->n_values; i++) {
    ir_role r = pt->eval->values[i]->role;
    CHECK(r != IR_ROLE_GRAD && r != IR_ROLE_OPT_STATE);
  }
}

/* One model: eval on the step's own batch (source `eval_spec`, or the
 * step's batch written to .npy files when NULL), then the step (lr 0). */
static void check_model(const char *path, const char *config, const char *data, const char *eval_spec,
                        const rt_backend *b, double tol) {
  char err[1024];
  session s;
  setup c = {.path = path, .config = config, .data = data, .opt = pass_optimizer_defaults(PASS_OPT_SGD),
             .sched = {.kind = RT_SCHEDULE_CONSTANT, .lr = 0}, .micro = 1, .seed = 3, .backend = b, .eval = true};
  if (session_open(&s, &c) != 0) {
    CHECK(!"session_open");
    return;
  }
  check_forward_only(s.prog);
  int n = s.prog->n_data;
  char dir[] = "/tmp/tgc_eval_XXXXXX", spec[2048] = "";
  CHECK(mkdtemp(dir) != NULL);
  if (!eval_spec) { /* the batch of step 0 as arrays of B samples: eval batch 0 in file order */
    rt_tensor **in = calloc((size_t)n, sizeof *in);
    for (int i = 0; i < n; i++) in[i] = rt_tensor_new(&s.g->inputs[i]->type);
    CHECK_EQ_INT(rt_data_fill(s.ds, 3, 0, 0, in, err, sizeof err), 0);
    size_t used = (size_t)snprintf(spec, sizeof spec, "npy:");
    for (int i = 0; i < n; i++) {
      char f[600];
      snprintf(f, sizeof f, "%s/%s.npy", dir, s.g->inputs[i]->name);
      CHECK_EQ_INT(rt_npy_write(f, in[i], err, sizeof err), 0);
      used += (size_t)snprintf(spec + used, sizeof spec - used, "%s%s=%s", i ? "," : "", s.g->inputs[i]->name, f);
      rt_tensor_free(in[i]);
    }
    free(in);
    eval_spec = spec;
  }
  rt_data *ev = rt_data_open(eval_spec, 0, err, sizeof err);
  CHECK(ev != NULL);
  CHECK_EQ_INT(rt_data_bind_inputs(ev, s.g, n, err, sizeof err), 0);
  rt_tensor **snap = calloc((size_t)rt_trainer_num_params(s.tr) + 1, sizeof *snap);
  params_equal(s.tr, snap);
  rt_eval_result e1, e2;
  CHECK_EQ_INT(rt_trainer_eval(s.tr, ev, 1, &e1, err, sizeof err), 0);
  CHECK_EQ_INT(rt_trainer_eval(s.tr, ev, 1, &e2, err, sizeof err), 0);
  CHECK(memcmp(&e1, &e2, sizeof e1) == 0); /* deterministic, and it changed nothing */
  CHECK(params_equal(s.tr, snap));
  CHECK_EQ_INT(rt_trainer_steps_done(s.tr), 0);
  rt_step_result r;
  CHECK_EQ_INT(rt_trainer_step(s.tr, &r, err, sizeof err), 0);
  double rel = fabs(e1.loss - r.loss) / fmax(fabs(r.loss), 1e-30);
  if (rel > tol)
    fprintf(stderr, "%s on %s: eval loss %.17g, step loss %.17g (relative %.3g > %.3g)\n", path, b ? b->name : "cpu",
            e1.loss, r.loss, rel, tol);
  CHECK(rel <= tol);
  CHECK(e1.accuracy == r.accuracy); /* counts of the same argmaxes: exact (-1 for both without accuracy) */
  CHECK(params_equal(s.tr, snap)); /* lr 0 */
  for (int i = 0; i < rt_trainer_num_params(s.tr); i++) rt_tensor_free(snap[i]);
  free(snap);
  rt_data_free(ev);
  session_close(&s);
  char cmd[100];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_EQ_INT(system(cmd), 0);
}

int main(void) {
  const rt_backend *backends[2] = {NULL, &rt_cuda_emu_backend};
  for (int k = 0; k < 2; k++) {
    /* xor's eval batch 0 is its step-0 batch (step 2^53: the same points) */
    check_model("examples/mlp.tg", NULL, "xor", "xor", backends[k], 0);
    check_model("examples/gpt.tg", "tiny", "reverse", NULL, backends[k], 0);
  }
  return check_done();
}
