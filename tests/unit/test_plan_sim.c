/* tests/unit/test_plan_sim.c — the pipeline simulator and the trace writer
 * (plan/plan_sim.c). Durations are binary fractions, so every sum below
 * is exact in double and the checks are equalities:
 *  - uniform stages, free sends: the bubble (makespan minus the ideal
 *    m * (tf + tb) of one device) is exactly (p - 1) / m of the ideal for
 *    gpipe and 1f1b, and (p - 1) / (v m) for interleaved 1f1b (chunks of
 *    tf / v and tb / v), over a grid of p, m, v;
 *  - gpipe with a send time c per boundary: (m + p - 1)(tf + tb) + 2 (p - 1) c;
 *  - micro-batches in flight: 1f1b holds min(p - s, m) on device s, gpipe m;
 *    the peak of bytes is that count times the stage's bytes;
 *  - every device busy exactly m (tf + tb); every operation recorded once,
 *    a backward after its forward, no two overlapping on a device;
 *  - malformed input (m not a multiple of p interleaved, p < 1) is refused;
 *  - the trace is JSON with one thread name per lane and one X event per
 *    slice, timestamps in microseconds.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan.h"

static double run(pass_schedule sc, int p, int v, int m, double tf, double tb, double c, pass_pipe_result *r,
                  bool record) {
  int nvs = p * v;
  double *f = malloc(sizeof *f * nvs), *b = malloc(sizeof *b * nvs), *s = malloc(sizeof *s * nvs), *a = malloc(sizeof *a * nvs);
  for (int i = 0; i < nvs; i++) f[i] = tf / v, b[i] = tb / v, s[i] = c, a[i] = 1024.0 / v;
  pass_pipe pp = {sc, p, v, m, f, b, s, s, a};
  int rc = pass_pipe_simulate(&pp, r, record);
  free(f), free(b), free(s), free(a);
  return rc == 0 ? r->makespan : -1;
}

static void test_bubble(void) {
  const double tf = 12.0, tb = 24.0; /* backward twice the forward, as in a transformer; chunks of 1/2, 1/3, 1/4 exact */
  int fails = 0;
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 24; m++)
      for (int sc = 0; sc < PASS_SCHED_COUNT; sc++)
        for (int v = 1; v <= (sc == PASS_SCHED_INTERLEAVED ? 4 : 1); v++) {
          if (sc == PASS_SCHED_INTERLEAVED && (m % p != 0 || v < 2)) continue;
          pass_pipe_result r;
          double ms = run((pass_schedule)sc, p, v, m, tf, tb, 0, &r, true);
          double ideal = m * (tf + tb);
          double want = sc == PASS_SCHED_INTERLEAVED ? ideal * (p - 1) / (v * m) : ideal * (p - 1) / m;
          if (ms < 0 || ms - ideal != want) {
            if (fails++ < 5)
              printf("  %s p=%d v=%d m=%d: makespan %.17g, bubble %.17g, want %.17g\n", pass_schedule_name(sc), p, v, m,
                     ms, ms - ideal, want);
          }
          for (int d = 0; d < p && ms >= 0; d++)
            if (r.busy[d] != ideal) fails++;
          /* every op once, backward after forward, no overlap on a device */
          if (ms >= 0) {
            if (r.n_ops != 2 * m * p * v) fails++;
            for (int i = 0; i < r.n_ops; i++) {
              const pass_pipe_op *o = &r.ops[i];
              for (int j = i + 1; j < r.n_ops; j++) {
                const pass_pipe_op *q = &r.ops[j];
                if (q->device == o->device && q->start < o->end && o->start < q->end) fails++;
                if (q->device == o->device && q->chunk == o->chunk && q->mb == o->mb && q->backward == o->backward)
                  fails++;
                if (q->device == o->device && q->chunk == o->chunk && q->mb == o->mb && o->backward && !q->backward &&
                    q->end > o->start)
                  fails++;
              }
            }
          }
          pass_pipe_result_free(&r);
        }
  printf("bubble (p-1)/m and (p-1)/(v m) over p 1..8, m 1..24, v 2..4: %d mismatches\n", fails);
  CHECK_EQ_INT(fails, 0);
  /* one worked example: p 4, m 8: ideal 8 x 36 = 288, bubble 3/8 of it = 108; interleaved v 2: 3/16 = 54 */
  pass_pipe_result r;
  CHECK(run(PASS_SCHED_1F1B, 4, 1, 8, tf, tb, 0, &r, false) == 396);
  pass_pipe_result_free(&r);
  CHECK(run(PASS_SCHED_GPIPE, 4, 1, 8, tf, tb, 0, &r, false) == 396);
  pass_pipe_result_free(&r);
  CHECK(run(PASS_SCHED_INTERLEAVED, 4, 2, 8, tf, tb, 0, &r, false) == 342);
  pass_pipe_result_free(&r);
}

static void test_sends(void) {
  int fails = 0;
  for (int p = 1; p <= 6; p++)
    for (int m = 1; m <= 12; m++) {
      pass_pipe_result r;
      double ms = run(PASS_SCHED_GPIPE, p, 1, m, 1.0, 2.0, 0.25, &r, false);
      if (ms != (m + p - 1) * 3.0 + 2 * (p - 1) * 0.25) fails++;
      pass_pipe_result_free(&r);
      double base = run(PASS_SCHED_1F1B, p, 1, m, 1.0, 2.0, 0, &r, false);
      pass_pipe_result_free(&r);
      double with = run(PASS_SCHED_1F1B, p, 1, m, 1.0, 2.0, 0.25, &r, false);
      pass_pipe_result_free(&r);
      if (with < base || with > base + 2 * (p - 1) * 0.25 * m) fails++;
    }
  CHECK_EQ_INT(fails, 0);
}

static void test_in_flight(void) {
  int fails = 0;
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 16; m++) {
      pass_pipe_result r;
      run(PASS_SCHED_1F1B, p, 1, m, 1.0, 2.0, 0, &r, false);
      for (int d = 0; d < p; d++) {
        int want = p - d < m ? p - d : m;
        if (r.peak_mb[d] != want || r.peak_act[d] != 1024.0 * want) fails++;
      }
      pass_pipe_result_free(&r);
      run(PASS_SCHED_GPIPE, p, 1, m, 1.0, 2.0, 0, &r, false);
      for (int d = 0; d < p; d++)
        if (r.peak_mb[d] != m) fails++;
      pass_pipe_result_free(&r);
    }
  CHECK_EQ_INT(fails, 0);
  pass_pipe_result r;
  run(PASS_SCHED_INTERLEAVED, 4, 2, 8, 1.0, 2.0, 0, &r, false);
  printf("interleaved p=4 v=2 m=8: chunks in flight on devices 0..3: %d %d %d %d\n", r.peak_mb[0], r.peak_mb[1],
         r.peak_mb[2], r.peak_mb[3]);
  /* Megatron-LM's warm-up: device 0 runs (p-1)*2 + (v-1)*p = 10 forwards, then one more before its first backward */
  CHECK_EQ_INT(r.peak_mb[0], 11);
  CHECK_EQ_INT(r.peak_mb[3], 5);
  pass_pipe_result_free(&r);
}

static void test_refused(void) {
  pass_pipe_result r;
  CHECK(run(PASS_SCHED_INTERLEAVED, 4, 2, 6, 1, 2, 0, &r, false) < 0); /* 6 is not a multiple of 4 */
  CHECK(run(PASS_SCHED_1F1B, 0, 1, 6, 1, 2, 0, &r, false) < 0);
  CHECK(run(PASS_SCHED_1F1B, 2, 1, 0, 1, 2, 0, &r, false) < 0);
  CHECK(pass_schedule_from_name("1f1b") == PASS_SCHED_1F1B && pass_schedule_from_name("zb") == -1);
  CHECK_STR(pass_schedule_name(PASS_SCHED_INTERLEAVED), "interleaved");
}

static void test_trace(void) {
  const char *lanes[] = {"stage 0", "stage \"1\""};
  pass_trace_slice sl[] = {{0, "F0", "forward", 0, 0.001}, {1, "B0", "backward", 0.001, 0.0025}};
  pass_trace t = {lanes, 2, sl, 2};
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK(pass_trace_write(f, &t) == 0);
  fclose(f);
  CHECK(strstr(buf, "\"args\": {\"name\": \"stage \\\"1\\\"\"}") != NULL);
  CHECK(strstr(buf, "{\"name\": \"F0\", \"cat\": \"forward\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 0.000, "
                    "\"dur\": 1000.000}") != NULL);
  CHECK(strstr(buf, "\"tid\": 1, \"ts\": 1000.000, \"dur\": 2500.000}") != NULL);
  free(buf);
}

int main(void) {
  test_bubble();
  test_sends();
  test_in_flight();
  test_refused();
  test_trace();
  return check_done();
}
