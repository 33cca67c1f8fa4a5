/* tests/unit/test_train_resume.c — save + resume is exact, and state files
 * that do not fit the model are refused.
 *
 * For two models (examples/mlp.tg on xor with adam, warmup + cosine,
 * clipping and 2 micro-batches; examples/reverse.tg --config tiny on
 * reverse with adamw) a run of N steps in one go is compared with N/2 steps,
 * save, a fresh trainer, load, N/2 more: the parameters must be equal byte
 * for byte, and so must the two final state files (same tensors, same
 * metadata). Then the refusals, with their exact messages: a state saved
 * with another optimizer (missing / unexpected optimizer state), for
 * another shape of the model, without the tgc format marker, and a corrupt
 * file.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "testtrain.h"
#include "frontend.h"
#include "ir.h"
#include "pass.h"
#include "runtime.h"

static void test_resume(const setup *c, int n, const char *dir, const char *tag) {
  char full[600], half[600], resumed[600];
  snprintf(full, sizeof full, "%s/%s_full.safetensors", dir, tag);
  snprintf(half, sizeof half, "%s/%s_half.safetensors", dir, tag);
  snprintf(resumed, sizeof resumed, "%s/%s_resumed.safetensors", dir, tag);
  session a, b, r;
  CHECK_EQ_INT(session_open(&a, c), 0);
  CHECK_EQ_INT(session_steps(&a, n), 0);
  CHECK_EQ_INT(session_save(&a, full), 0);

  CHECK_EQ_INT(session_open(&b, c), 0);
  CHECK_EQ_INT(session_steps(&b, n / 2), 0);
  CHECK_EQ_INT(session_save(&b, half), 0);
  session_close(&b);

  CHECK_EQ_INT(session_open(&r, c), 0);
  char err[1024] = "";
  int rc = session_load(&r, half, err, sizeof err);
  if (rc) fprintf(stderr, "load: %s\n", err);
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(rt_trainer_steps_done(r.tr), n / 2);
  CHECK_EQ_INT(session_steps(&r, n - n / 2), 0);
  CHECK_EQ_INT(rt_trainer_steps_done(r.tr), n);
  CHECK_EQ_INT(session_save(&r, resumed), 0);

  int np = a.tr ? rt_trainer_num_params(a.tr) : 0;
  CHECK(np > 0);
  int differing = 0;
  for (int i = 0; i < np && r.tr; i++) {
    const rt_tensor *x = rt_trainer_param(a.tr, i), *y = rt_trainer_param(r.tr, i);
    if (x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes) != 0) {
      if (!differing) fprintf(stderr, "%s: parameter '%s' differs after resume\n", tag, a.g->params[i]->name);
      differing++;
    }
  }
  CHECK_EQ_INT(differing, 0);
  /* and the initial parameters did move */
  session fresh;
  CHECK_EQ_INT(session_open(&fresh, c), 0);
  const rt_tensor *p0 = fresh.tr ? rt_trainer_param(fresh.tr, 0) : NULL, *pn = a.tr ? rt_trainer_param(a.tr, 0) : NULL;
  CHECK(p0 && pn && memcmp(p0->data, pn->data, p0->nbytes) != 0);
  session_close(&fresh);
  size_t n1 = 0, n2 = 0;
  char *f1 = read_whole_file(full, &n1), *f2 = read_whole_file(resumed, &n2);
  CHECK(f1 && f2 && n1 == n2 && memcmp(f1, f2, n1) == 0);
  free(f1);
  free(f2);
  session_close(&a);
  session_close(&r);
  remove(full);
  remove(half);
  remove(resumed);
}

static void test_refusals(const char *dir) {
  char adam_path[600], bad[600], err[1024], want[1400];
  snprintf(adam_path, sizeof adam_path, "%s/adam.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
  setup c = {.path = "examples/mlp.tg", .data = "xor", .opt = pass_optimizer_defaults(PASS_OPT_ADAM),
             .sched = {.kind = RT_SCHEDULE_CONSTANT, .lr = 0.01}, .micro = 1};
  session a;
  CHECK_EQ_INT(session_open(&a, &c), 0);
  CHECK_EQ_INT(session_steps(&a, 2), 0);
  CHECK_EQ_INT(session_save(&a, adam_path), 0);
  session_close(&a);

  /* into an sgd trainer: adam's moments are not expected */
  setup sgd = c;
  sgd.opt = pass_optimizer_defaults(PASS_OPT_SGD);
  session s;
  CHECK_EQ_INT(session_open(&s, &sgd), 0);
  CHECK_EQ_INT(session_load(&s, adam_path, err, sizeof err), -1);
  snprintf(want, sizeof want,
           "%s: unexpected tensor 'opt/m.l.0.W': not a parameter or optimizer state of this model and optimizer",
           adam_path);
  CHECK_STR(err, want);
  /* an sgd state into an adam trainer: the moments are missing */
  CHECK_EQ_INT(session_save(&s, bad), 0);
  session_close(&s);
  CHECK_EQ_INT(session_open(&a, &c), 0);
  CHECK_EQ_INT(session_load(&a, bad, err, sizeof err), -1);
  snprintf(want, sizeof want,
           "%s: missing tensor 'opt/m.l.0.W' (optimizer state: was it saved with another optimizer?)", bad);
  CHECK_STR(err, want);
  CHECK_EQ_INT(rt_trainer_steps_done(a.tr), 0); /* nothing was loaded */
  session_close(&a);

  /* another shape of the model */
  setup wide = c;
  wide.define_name = "D";
  wide.define_value = "4";
  CHECK_EQ_INT(session_open(&s, &wide), 0);
  CHECK_EQ_INT(session_load(&s, adam_path, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: tensor 'l.0.W' is f64[8, 8] but the model's parameter is f64[4, 4]", adam_path);
  CHECK_STR(err, want);
  session_close(&s);
  /* fewer layers: layer 3 is not in the file */
  setup deep = c;
  deep.define_name = "L";
  deep.define_value = "4";
  CHECK_EQ_INT(session_open(&s, &deep), 0);
  CHECK_EQ_INT(session_load(&s, adam_path, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: missing tensor 'l.3.W' (a parameter of the model)", adam_path);
  CHECK_STR(err, want);
  session_close(&s);

  /* a safetensors file that is not a tgc training state */
  ir_type t = {.dtype = IR_DT_F64, .rank = 1, .dims = {2}};
  rt_tensor *x = rt_tensor_new(&t);
  rt_named_tensor nt = {"w", x};
  CHECK_EQ_INT(rt_safetensors_write(bad, &nt, 1, NULL, 0, err, sizeof err), 0);
  rt_tensor_free(x);
  CHECK_EQ_INT(session_open(&s, &c), 0);
  CHECK_EQ_INT(session_load(&s, bad, err, sizeof err), -1);
  snprintf(want, sizeof want,
           "%s: not a tgc training state (metadata \"format\" is missing, expected \"tgc-train-2\")", bad);
  CHECK_STR(err, want);

  /* a truncated state file */
  size_t n = 0;
  char *buf = read_whole_file(adam_path, &n);
  FILE *f = fopen(bad, "wb");
  fwrite(buf, 1, n - 10, f);
  fclose(f);
  free(buf);
  CHECK_EQ_INT(session_load(&s, bad, err, sizeof err), -1);
  CHECK(strncmp(err, bad, strlen(bad)) == 0 && strstr(err, "go past the end of the data") != NULL);
  session_close(&s);
  remove(adam_path);
  remove(bad);
}

int main(void) {
  char dir[] = "/tmp/tgc_resume_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  pass_optimizer adam = pass_optimizer_defaults(PASS_OPT_ADAM);
  adam.clip_norm = 0.5;
  setup mlp = {.path = "examples/mlp.tg", .data = "xor", .opt = adam,
               .sched = {.kind = RT_SCHEDULE_COSINE, .lr = 0.05, .warmup = 4, .total = 20, .floor = 0.1},
               .micro = 2, .seed = 5};
  test_resume(&mlp, 20, dir, "mlp");
  pass_optimizer adamw = pass_optimizer_defaults(PASS_OPT_ADAMW);
  adamw.weight_decay = 0.01;
  adamw.clip_norm = 1.0;
  setup rev = {.path = "examples/reverse.tg", .config = "tiny", .data = "reverse", .opt = adamw,
               .sched = {.kind = RT_SCHEDULE_COSINE, .lr = 0.003, .warmup = 2, .total = 8, .floor = 0.1},
               .micro = 1, .seed = 2};
  test_resume(&rev, 8, dir, "reverse");
  test_refusals(dir);
  rmdir(dir);
  return check_done();
}
