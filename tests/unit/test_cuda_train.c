/* tests/unit/test_cuda_train.c — training on cuda-emu: the trainer
 * (runtime/train.c) unchanged, on the cuda-emu backend.
 *
 *   - examples/gpt.tg --config tiny (copy task) and examples/reverse.tg
 *     (reverse task, its default config), 20 steps of Adam with clipping
 *     and a cosine schedule: the loss of every step within 1e-4 relative
 *     of the cpu's, and the final parameters within 0.25 relative to each
 *     tensor's scale: a check against a wrong update, not a precision
 *     figure (Adam divides by sqrt(v): where a gradient component is near
 *     zero its float noise moves the update by up to lr, so parameters that
 *     start at zero, such as biases, differ by a fraction of lr * steps;
 *     measured 3e-3 in the normal build, 9e-2 in the Debug sanitizer build,
 *     whose cpu kernels round differently); sanitizer builds run 4 steps;
 *   - examples/mlp.tg with K = 2 micro-batches (the gradient sums on the
 *     device): losses within 1e-4;
 *   - the steady state (every step after the first): nothing allocated on
 *     the device, and what crosses between host and device is exactly the
 *     batch and the lr and step scalars in, the logged scalars out (loss,
 *     accuracy when counted, the non-finite count) — counted twice: by the
 *     runtime (rt_device_stats) and by the emulator itself (its htod / dtoh
 *     counters see every cuMemcpy, the backend's own included);
 *   - the batch from page-locked memory, uploaded asynchronously, trains
 *     bit for bit as from pageable memory (TGC_CUDA_PINNED=0), and the
 *     pinned path is taken for every data upload;
 *   - the disk cache: with a fresh $TGC_CACHE_DIR a first trainer compiles
 *     its programs, a second one of the same model compiles nothing
 *     (rt_cuda_backend_stats);
 *   - mixed precision (--dtype): bf16 training of gpt tiny and reverse on
 *     cuda-emu within 1e-2 relative of the cpu's f32 losses at every step
 *     (bf16 keeps 8 bits: each activation is rounded to 2^-9 relative;
 *     measured about 5e-4 over 20 steps) and within 2e-3 of the cpu running
 *     the same bf16 program; f16 (with dynamic loss scaling) within 2e-3 of
 *     f32; parameters stay f32 (master weights); the steady f16 step also
 *     downloads the overflow count;
 *   - dynamic loss scaling: from a scale of 2^24 the f16 gradients
 *     overflow, those updates are skipped (the parameters do not change)
 *     and the scale halves each time until an update goes through. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "rt_cuda.h"
#include "testgpu.h"
#include "testtrain.h"

enum { MAX_STEPS = 20 };

static int64_t batch_bytes(const pass_training *pt) {
  int64_t b = 0;
  for (int i = 0; i < pt->n_data; i++)
    b += ir_type_numel(&pt->step->inputs[i]->type) * (int64_t)ir_dtype_size(pt->step->inputs[i]->type.dtype);
  return b;
}

/* The same training on the cpu (in cpu_dtype: 0 the model's f32) and on
 * cuda-emu (in emu_dtype); losses within loss_tol relative at every step. */
static void train_both(const char *path, const char *config, const char *data, int micro, int steps, int cpu_dtype,
                       int emu_dtype, double loss_tol) {
  session s[2];
  setup c = {.path = path, .config = config, .data = data, .opt = pass_optimizer_defaults(PASS_OPT_ADAM),
             .sched = {.kind = RT_SCHEDULE_COSINE, .lr = 0.003, .warmup = 2, .total = steps, .floor = 0.1},
             .micro = micro, .seed = 11};
  c.opt.clip_norm = 1.0;
  double loss[2][MAX_STEPS];
  for (int b = 0; b < 2; b++) {
    c.backend = b ? &rt_cuda_emu_backend : NULL;
    c.dtype = b ? emu_dtype : cpu_dtype;
    int rc = session_open(&s[b], &c);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
      if (b) session_close(&s[0]);
      return;
    }
    char err[2048];
    rt_device *dev = rt_trainer_device(s[b].tr);
    for (int k = 0; k < steps; k++) {
      rt_device_stats before = dev->stats;
      rt_cuda_emu_counters eb = rt_cuda_emu_counters_get();
      rt_step_result r;
      int sr = rt_trainer_step(s[b].tr, &r, err, sizeof err);
      if (sr) fprintf(stderr, "%s step %d on %s: %s\n", path, k + 1, dev->backend->name, err);
      CHECK_EQ_INT(sr, 0);
      loss[b][k] = r.loss;
      if (b == 1 && k > 0) { /* the steady state on cuda-emu */
        const pass_training *pt = s[b].prog;
        rt_cuda_emu_counters ea = rt_cuda_emu_counters_get();
        /* loss scaling downloads the overflow count too, and uploads the scale only when it changed */
        int64_t downs = 2 + pt->accuracy + (pt->overflow_output >= 0), ups = (int64_t)pt->n_data * micro + 2;
        CHECK_EQ_INT(dev->stats.allocs - before.allocs, 0);
        CHECK_EQ_INT(dev->stats.uploads - before.uploads, ups);
        CHECK_EQ_INT(dev->stats.bytes_uploaded - before.bytes_uploaded, batch_bytes(pt) * micro + 16);
        CHECK_EQ_INT(dev->stats.downloads - before.downloads, downs);
        CHECK_EQ_INT(dev->stats.bytes_downloaded - before.bytes_downloaded, 8 * downs);
        CHECK_EQ_INT(ea.htod_calls - eb.htod_calls, ups);
        CHECK_EQ_INT(ea.htod_bytes - eb.htod_bytes, batch_bytes(pt) * micro + 16);
        CHECK_EQ_INT(ea.dtoh_calls - eb.dtoh_calls, downs);
        CHECK_EQ_INT(ea.dtoh_bytes - eb.dtoh_bytes, 8 * downs);
        CHECK_EQ_INT(ea.modules_loaded - eb.modules_loaded, 0);
        /* the batch from page-locked memory, asynchronously: every data upload */
        CHECK_EQ_INT(dev->stats.async_uploads - before.async_uploads, (int64_t)pt->n_data * micro);
        CHECK_EQ_INT(ea.htod_pinned_calls - eb.htod_pinned_calls, (int64_t)pt->n_data * micro);
        CHECK_EQ_INT(ea.host_allocs - eb.host_allocs, 0);
      }
    }
  }
  int bad = 0;
  double worst = 0;
  for (int k = 0; k < steps; k++) {
    double e = fabs(loss[1][k] - loss[0][k]) / fabs(loss[0][k]);
    if (!(e <= loss_tol)) {
      if (bad < 5) fprintf(stderr, "  step %d: loss %.9g on cuda-emu, %.9g on cpu (error %.3g)\n", k + 1, loss[1][k],
                           loss[0][k], e);
      bad++;
    }
    if (e > worst) worst = e;
  }
  CHECK_EQ_INT(bad, 0);
  double pworst = 0;
  int64_t pbad = 0;
  for (int i = 0; !cpu_dtype && !emu_dtype && i < rt_trainer_num_params(s[0].tr); i++) { /* f32: bf16 gradients differ by roundings Adam amplifies */
    const rt_tensor *a = rt_trainer_param(s[0].tr, i), *dv = rt_trainer_param(s[1].tr, i);
    rt_tensor *h = rt_tensor_new(&dv->type);
    char err[256];
    CHECK_EQ_INT(rt_download(h->data, dv, err, sizeof err), 0);
    pbad += compare_tensors(s[0].g->params[i]->name, h, a, 0.25, &pworst);
    rt_tensor_free(h);
  }
  CHECK_EQ_INT(pbad, 0);
  char params[64] = "parameters not compared";
  if (!cpu_dtype && !emu_dtype) snprintf(params, sizeof params, "parameters within %.3g", pworst);
  printf("train %-22s %-5s K=%d %2d steps, cuda-emu %-4s vs cpu %-4s: losses within %.3g (tolerance %g), %s; last loss "
         "%.6g\n",
         path, config ? config : "", micro, steps, emu_dtype ? ir_dtype_name((ir_dtype)emu_dtype) : "f32",
         cpu_dtype ? ir_dtype_name((ir_dtype)cpu_dtype) : "f32", worst, loss_tol, params, loss[1][steps - 1]);
  session_close(&s[0]);
  session_close(&s[1]);
}

/* A second trainer of the same model compiles nothing. */
static void test_cache(void) {
  char dir[] = "/tmp/tgc-cuda-train-cache-XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK(!"mkdtemp");
    return;
  }
  const char *old = getenv("TGC_CACHE_DIR");
  char *saved = old ? strdup(old) : NULL;
  setenv("TGC_CACHE_DIR", dir, 1);
  setup c = {.path = "examples/mlp.tg", .data = "xor", .opt = pass_optimizer_defaults(PASS_OPT_ADAM),
             .sched = {.kind = RT_SCHEDULE_CONSTANT, .lr = 0.05}, .micro = 1, .seed = 1, .backend = &rt_cuda_emu_backend};
  rt_cuda_backend_stats st[2];
  for (int run = 0; run < 2; run++) {
    session s;
    int rc = session_open(&s, &c);
    CHECK_EQ_INT(rc, 0);
    char err[1024];
    rt_step_result r;
    if (rc == 0) CHECK_EQ_INT(rt_trainer_step(s.tr, &r, err, sizeof err), 0);
    CHECK_EQ_INT(rc == 0 ? rt_cuda_backend_stats_of(rt_trainer_device(s.tr), &st[run]) : -1, 0);
    session_close(&s);
  }
  CHECK_EQ_INT(st[0].programs, 2);             /* the step and the update */
  CHECK_EQ_INT(st[0].compiles, 3);             /* ... and the fill kernels (the sums start at -0.0) */
  CHECK_EQ_INT(st[0].cache_hits, 0);
  CHECK_EQ_INT(st[1].compiles, 0);
  CHECK_EQ_INT(st[1].cache_hits, 3);
  printf("disk cache: first trainer compiled %lld programs, the second %lld (%lld from the cache)\n",
         (long long)st[0].compiles, (long long)st[1].compiles, (long long)st[1].cache_hits);
  if (saved) setenv("TGC_CACHE_DIR", saved, 1);
  else unsetenv("TGC_CACHE_DIR");
  free(saved);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_EQ_INT(system(cmd), 0);
}

/* The batch from page-locked memory, uploaded asynchronously (the
 * default on a GPU backend), trains exactly as from pageable memory
 * (TGC_CUDA_PINNED=0): gpt tiny on cuda-emu, 2 micro-batches (the second's
 * batch written while the first's upload is recorded) and an evaluation,
 * every step's loss and every parameter after 5 steps bit for bit equal;
 * the pinned path taken (rt_device_stats.async_uploads, the backend's and
 * the emulator's counters) only when allowed. */
static void test_pinned_batch(void) {
  setup c = {.path = "examples/gpt.tg", .config = "tiny", .data = "copy", .opt = pass_optimizer_defaults(PASS_OPT_ADAM),
             .sched = {.kind = RT_SCHEDULE_CONSTANT, .lr = 0.003}, .micro = 2, .seed = 5,
             .backend = &rt_cuda_emu_backend, .eval = true};
  enum { STEPS = 5 };
  double loss[2][STEPS];
  session s[2];
  bool open[2] = {false, false};
  for (int run = 0; run < 2; run++) {
    if (run == 0) setenv("TGC_CUDA_PINNED", "0", 1);
    else unsetenv("TGC_CUDA_PINNED");
    rt_cuda_emu_counters e0 = rt_cuda_emu_counters_get();
    int rc = session_open(&s[run], &c);
    CHECK_EQ_INT(rc, 0);
    if (rc) break;
    open[run] = true;
    char err[1024];
    for (int k = 0; k < STEPS; k++) {
      rt_step_result r;
      int sr = rt_trainer_step(s[run].tr, &r, err, sizeof err);
      if (sr) fprintf(stderr, "pinned batch %d, step %d: %s\n", run, k + 1, err);
      CHECK_EQ_INT(sr, 0);
      loss[run][k] = r.loss;
    }
    rt_eval_result ev;
    int er = rt_trainer_eval(s[run].tr, s[run].ds, 2, &ev, err, sizeof err);
    if (er) fprintf(stderr, "pinned batch %d, eval: %s\n", run, err);
    CHECK_EQ_INT(er, 0);
    rt_device *dev = rt_trainer_device(s[run].tr);
    rt_cuda_backend_stats st;
    CHECK_EQ_INT(rt_cuda_backend_stats_of(dev, &st), 0);
    rt_cuda_emu_counters e1 = rt_cuda_emu_counters_get();
    int64_t want = run ? (int64_t)s[run].prog->n_data * (2 * STEPS + 2) : 0; /* 2 micro-batches a step, 2 eval batches */
    CHECK_EQ_INT(dev->stats.async_uploads, want);
    CHECK_EQ_INT(st.async_uploads, want);
    CHECK_EQ_INT(st.host_buffers, run ? s[run].prog->n_data : 0);
    CHECK_EQ_INT(e1.htod_pinned_calls - e0.htod_pinned_calls, want);
    CHECK_EQ_INT(e1.host_allocs - e0.host_allocs, run ? s[run].prog->n_data : 0);
  }
  int diff = 0;
  for (int k = 0; open[1] && k < STEPS; k++) diff += memcmp(&loss[0][k], &loss[1][k], sizeof loss[0][k]) != 0;
  for (int i = 0; open[1] && i < rt_trainer_num_params(s[0].tr); i++) {
    const rt_tensor *a = rt_trainer_param(s[0].tr, i), *b = rt_trainer_param(s[1].tr, i);
    rt_tensor *ha = rt_tensor_new(&a->type), *hb = rt_tensor_new(&b->type);
    char err[256];
    CHECK_EQ_INT(rt_download(ha->data, a, err, sizeof err), 0);
    CHECK_EQ_INT(rt_download(hb->data, b, err, sizeof err), 0);
    if (memcmp(ha->data, hb->data, ha->nbytes) != 0) {
      fprintf(stderr, "  parameter %s differs between the pinned and the pageable batch\n", s[0].g->params[i]->name);
      diff++;
    }
    rt_tensor_free(ha);
    rt_tensor_free(hb);
  }
  CHECK_EQ_INT(diff, 0);
  printf("pinned batch: %d steps of gpt tiny (K = 2) and an eval on cuda-emu, losses and parameters bit for bit those "
         "of the pageable batch\n", STEPS);
  for (int run = 0; run < 2; run++)
    if (open[run]) session_close(&s[run]);
}

/* f16 with a first scale of 2^24: d_logits (scale / positions, in f32)
 * overflows f16 in the backward pass, so the first updates are skipped
 * (parameters unchanged) and the scale halves each time, until the
 * gradients fit; then training goes on. */
static void test_loss_scaling(void) {
  setup c = {.path = "examples/gpt.tg", .config = "tiny", .data = "copy", .opt = pass_optimizer_defaults(PASS_OPT_ADAM),
             .sched = {.kind = RT_SCHEDULE_CONSTANT, .lr = 0.003}, .micro = 1, .seed = 5,
             .backend = &rt_cuda_emu_backend, .dtype = IR_DT_F16, .loss_scale_init = 16777216.0};
  session s;
  int rc = session_open(&s, &c);
  CHECK_EQ_INT(rc, 0);
  if (rc) return;
  const rt_tensor *p0 = rt_trainer_param(s.tr, 0);
  rt_tensor *before = rt_tensor_new(&p0->type), *after = rt_tensor_new(&p0->type);
  char err[1024];
  int skipped = 0, first_good = -1;
  double scale = 0, last_loss = 0;
  for (int k = 0; k < 12; k++) {
    CHECK_EQ_INT(rt_download(before->data, rt_trainer_param(s.tr, 0), err, sizeof err), 0);
    rt_step_result r;
    CHECK_EQ_INT(rt_trainer_step(s.tr, &r, err, sizeof err), 0);
    CHECK_EQ_INT(rt_download(after->data, rt_trainer_param(s.tr, 0), err, sizeof err), 0);
    bool same = memcmp(before->data, after->data, before->nbytes) == 0;
    CHECK(same == r.skipped); /* a skipped step changes nothing; another step changes the parameters */
    if (k > 0) CHECK(r.loss_scale == (skipped && first_good < 0 ? scale * 0.5 : r.loss_scale));
    if (r.skipped && first_good < 0) skipped++;
    if (!r.skipped && first_good < 0) first_good = k;
    scale = r.loss_scale;
    last_loss = r.loss;
  }
  CHECK(skipped >= 2);
  CHECK(first_good == skipped);
  CHECK(isfinite(last_loss));
  printf("loss scaling (f16, first scale 2^24): %d steps skipped, the first update at scale %g; last loss %.6g\n",
         skipped, 16777216.0 / (double)(1 << skipped), last_loss);
  rt_tensor_free(before);
  rt_tensor_free(after);
  session_close(&s);
}

int main(void) {
#if defined(__SANITIZE_ADDRESS__)
  /* sanitizer builds run the same code a few steps (the emulator under ASan
   * is tens of times slower); the normal build runs the 20 */
  enum { STEPS = 4 };
  const bool full = false;
#else
  enum { STEPS = 20 };
  const bool full = true;
#endif
  test_cache();
  test_pinned_batch();
  train_both("examples/mlp.tg", NULL, "xor", 2, 10, 0, 0, 1e-4);
  train_both("examples/gpt.tg", "tiny", "copy", 1, STEPS, 0, 0, 1e-4);
  train_both("examples/reverse.tg", NULL, "reverse", 1, STEPS, 0, 0, 1e-4);
  /* mixed precision: bf16 / f16 on cuda-emu against the cpu's f32 training, and against the cpu running the
   * same mixed-precision program with its reference kernels */
  train_both("examples/gpt.tg", "tiny", "copy", 1, STEPS, 0, IR_DT_BF16, 1e-2);
  if (full) train_both("examples/gpt.tg", "tiny", "copy", 1, STEPS, IR_DT_BF16, IR_DT_BF16, 2e-3);
  train_both("examples/gpt.tg", "tiny", "copy", 1, STEPS, 0, IR_DT_F16, 2e-3);
  if (full) train_both("examples/reverse.tg", NULL, "reverse", 1, STEPS, 0, IR_DT_BF16, 1e-2);
  test_loss_scaling();
  return check_done();
}
