/* tests/unit/test_cuda_graph.c — the steady training step as CUDA graphs
 * on cuda-emu (runtime/cuda/backend.c, runtime/cuda_emu/capture.c).
 *
 *   - the capture rules through the emulator's table (test_cuda_capture.h):
 *     legacy-stream capture refused, replay of exactly what was recorded,
 *     planted violations (a sync during capture, ...) refused with the
 *     GPU's error codes;
 *   - gpt tiny, Adam with clipping and a warmed-up cosine schedule (the
 *     learning rate and the bias corrections change every step: they reach
 *     the graph through device memory), f32 and bf16, N steps and an
 *     evaluation with TGC_CUDA_GRAPH=0 and with graphs: every loss and
 *     every parameter bit for bit equal;
 *   - with graphs: the first step runs the step and update programs
 *     directly; from the second each program is captured once per set of
 *     addresses it binds (the update rotates parameters and Adam's states
 *     through their buffers with a period of 3, so steps 2-4 capture) and
 *     launched; every step from the 6th is two graph launches and nothing
 *     else: no capture, no kernel launched, no product run by the host
 *     (the backend's counts), the emulator's graph launches counted too;
 *   - with TGC_CUDA_GRAPH=0 nothing is captured. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rt_cuda.h"
#include "test_cuda_capture.h"
#include "testtrain.h"

static void test_rules(void) {
  rt_cuda_emu_config cfg;
  cg_cuda_api api;
  rt_cuda_device dev;
  char err[1024];
  CHECK_EQ_INT(rt_cuda_emu_config_init(&cfg, err, sizeof err), 0);
  CHECK_EQ_INT(rt_cuda_emu_load(&api, &cfg, err, sizeof err), 0);
  if (rt_cuda_open_device(&api, 0, &dev, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    CHECK(0);
    rt_cuda_emu_shutdown();
    return;
  }
  check_capture_rules(&api, "cuda-emu");
  rt_cuda_close_device(&api, &dev);
  rt_cuda_emu_shutdown();
}

enum { STEPS = 8, STEADY = 5 }; /* steps from index STEADY on are pure replays */

typedef struct {
  double loss[STEPS], eval_loss;
  rt_cuda_backend_stats after[STEPS];
  rt_cuda_emu_counters emu_after[STEPS];
} trace;

/* N steps and an eval; the stats after each step. */
static int train(const setup *c, session *s, trace *t) {
  if (session_open(s, c) != 0) return -1;
  char err[1024];
  rt_device *dev = rt_trainer_device(s->tr);
  for (int k = 0; k < STEPS; k++) {
    rt_step_result r;
    int rc = rt_trainer_step(s->tr, &r, err, sizeof err);
    if (rc) fprintf(stderr, "step %d: %s\n", k + 1, err);
    CHECK_EQ_INT(rc, 0);
    t->loss[k] = r.loss;
    CHECK_EQ_INT(rt_cuda_backend_stats_of(dev, &t->after[k]), 0);
    t->emu_after[k] = rt_cuda_emu_counters_get();
  }
  rt_eval_result ev;
  int er = rt_trainer_eval(s->tr, s->ds, 2, &ev, err, sizeof err);
  if (er) fprintf(stderr, "eval: %s\n", err);
  CHECK_EQ_INT(er, 0);
  t->eval_loss = ev.loss;
  return 0;
}

static int params_differ(session *s0, session *s1) {
  int diff = 0;
  for (int i = 0; i < rt_trainer_num_params(s0->tr); i++) {
    const rt_tensor *a = rt_trainer_param(s0->tr, i), *b = rt_trainer_param(s1->tr, i);
    rt_tensor *ha = rt_tensor_new(&a->type), *hb = rt_tensor_new(&b->type);
    char err[256];
    CHECK_EQ_INT(rt_download(ha->data, a, err, sizeof err), 0);
    CHECK_EQ_INT(rt_download(hb->data, b, err, sizeof err), 0);
    if (memcmp(ha->data, hb->data, ha->nbytes) != 0) {
      fprintf(stderr, "  parameter %s differs with and without CUDA graphs\n", s0->g->params[i]->name);
      diff++;
    }
    rt_tensor_free(ha);
    rt_tensor_free(hb);
  }
  return diff;
}

static void test_train(int dtype) {
  setup c = {.path = "examples/gpt.tg", .config = "tiny", .data = "copy", .opt = pass_optimizer_defaults(PASS_OPT_ADAM),
             .sched = {.kind = RT_SCHEDULE_COSINE, .lr = 0.003, .warmup = 2, .total = STEPS, .floor = 0.1},
             .micro = 1, .seed = 3, .backend = &rt_cuda_emu_backend, .dtype = dtype, .eval = true};
  c.opt.clip_norm = 1.0;
  session s[2];
  trace t[2];
  memset(t, 0, sizeof t);
  for (int run = 0; run < 2; run++) {
    if (run == 0) setenv("TGC_CUDA_GRAPH", "0", 1);
    else unsetenv("TGC_CUDA_GRAPH");
    int rc = train(&c, &s[run], &t[run]);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
      if (run) session_close(&s[0]);
      return;
    }
  }
  const char *dt = dtype ? ir_dtype_name((ir_dtype)dtype) : "f32";
  /* bit for bit */
  int diff = 0;
  for (int k = 0; k < STEPS; k++)
    if (memcmp(&t[0].loss[k], &t[1].loss[k], sizeof t[0].loss[k]) != 0) {
      fprintf(stderr, "  %s step %d: loss %.17g with graphs, %.17g without\n", dt, k + 1, t[1].loss[k], t[0].loss[k]);
      diff++;
    }
  diff += memcmp(&t[0].eval_loss, &t[1].eval_loss, sizeof t[0].eval_loss) != 0;
  diff += params_differ(&s[0], &s[1]);
  CHECK_EQ_INT(diff, 0);
  /* without graphs: nothing captured, every run direct */
  CHECK_EQ_INT(t[0].after[STEPS - 1].graph_captures, 0);
  CHECK_EQ_INT(t[0].after[STEPS - 1].graph_launches, 0);
  /* with graphs: step 1 direct; from step 2 each program is captured once
   * per set of addresses it binds (the update rotates parameters and
   * states through their buffers, so a few sets), then only launched */
  const rt_cuda_backend_stats *a = t[1].after;
  CHECK_EQ_INT(a[0].direct_runs, 2);
  CHECK_EQ_INT(a[0].graph_captures, 0);
  CHECK_EQ_INT(a[1].graph_captures, 2);
  CHECK_EQ_INT(a[1].graph_launches, 2);
  char schedule[128] = "";
  for (int k = 1; k < STEPS; k++) {
    CHECK_EQ_INT(a[k].graph_launches - a[k - 1].graph_launches, 2);
    CHECK_EQ_INT(a[k].direct_runs - a[k - 1].direct_runs, 0);
    CHECK_EQ_INT(t[1].emu_after[k].graph_launches - t[1].emu_after[k - 1].graph_launches, 2);
    size_t n = strlen(schedule);
    snprintf(schedule + n, sizeof schedule - n, "%s%lld", k > 1 ? " " : "",
             (long long)(a[k].graph_captures - a[k - 1].graph_captures));
  }
  CHECK(a[STEADY - 1].graph_captures <= 2 * 4); /* GRAPH_SLOTS sets at most */
  int64_t steady_launches = 0, steady_gemms = 0, steady_captures = 0, steady_actions = 0;
  for (int k = STEADY; k < STEPS; k++) {
    steady_captures += a[k].graph_captures - a[k - 1].graph_captures;
    steady_launches += a[k].launches - a[k - 1].launches;
    steady_gemms += a[k].gemms - a[k - 1].gemms;
    steady_actions += (a[k].copies - a[k - 1].copies) + (a[k].memsets - a[k - 1].memsets);
  }
  CHECK_EQ_INT(steady_captures, 0);
  CHECK_EQ_INT(steady_launches, 0);
  CHECK_EQ_INT(steady_gemms, 0);
  int64_t replayed = t[1].emu_after[STEPS - 1].graph_nodes_replayed - t[1].emu_after[STEPS - 2].graph_nodes_replayed;
  CHECK(replayed > 0);
  printf("graphs, gpt tiny %-4s %d steps + eval: losses and parameters bit for bit those without graphs; captures per "
         "step from step 2: %s (%lld in all), %lld graph launches; steps %d-%d: 2 graph launches a step replaying %lld "
         "recorded calls, %lld kernel launches and %lld products issued directly, %lld copies and fills (the "
         "trainer's, outside the programs)\n",
         dt, STEPS, schedule, (long long)a[STEPS - 1].graph_captures, (long long)a[STEPS - 1].graph_launches, STEADY + 1,
         STEPS, (long long)replayed, (long long)steady_launches, (long long)steady_gemms, (long long)steady_actions);
  session_close(&s[0]);
  session_close(&s[1]);
}

int main(void) {
  test_rules();
  test_train(0);
  test_train(IR_DT_BF16);
  return check_done();
}
