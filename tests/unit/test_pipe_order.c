/* tests/unit/test_pipe_order.c — the trainer runs the pipeline the planner
 * simulates (issue 17): for gpipe, 1f1b and interleaved 1F1B over a grid
 * of pp, chunks v and micro-batches K, every rank's sequence of
 * (forward | backward, micro-batch, chunk) from rt_pipeline_order (what
 * runtime/train.c runs) equals the order pass_pipe_simulate
 * (plan/plan_sim.c) runs device by device, so the two have the same
 * bubble; and the most (micro-batch, chunk) pairs the trainer keeps in
 * flight, counted as it counts them, equal the simulation's peak_mb and
 * pass_pipe_in_flight's. Stage times differ per virtual stage (the order
 * must not depend on them), and the peak bytes with activations that
 * differ per stage equal the simulation's to the last bit. Also: a chunk's forwards and backwards each
 * run in micro-batch order (gpipe's backwards the last first; the
 * messages between two ranks received in the order sent rely on it;
 * shard_stage.c), the messages between two ranks
 * are received in the order they are sent (fifo), and
 * interleaved with K not a multiple of pp is refused by both. And where
 * the trainer keeps the saved activations (rt_pipeline_place): no two
 * alive at once overlap, and the arena is the plan's peak. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan.h"
#include "rt_train.h"

static void one(pass_schedule sc, int p, int v, int K) {
  int nvs = p * v, n = 2 * K * v;
  double *f = malloc(sizeof *f * nvs), *b = malloc(sizeof *b * nvs), *a = malloc(sizeof *a * nvs);
  double *peak_act = malloc(sizeof *peak_act * p);
  int *peak_mb = malloc(sizeof *peak_mb * p), *mb = malloc(sizeof *mb * n), *chunk = malloc(sizeof *chunk * n);
  bool *bwd = malloc(sizeof *bwd * n);
  int *next_f = malloc(sizeof *next_f * v), *next_b = malloc(sizeof *next_b * v);
  if (!f || !b || !a || !peak_act || !peak_mb || !mb || !chunk || !bwd || !next_f || !next_b) abort();
  for (int k = 0; k < nvs; k++) f[k] = 0.25 * (1 + k % 3), b[k] = 0.5 * (1 + (k * 5) % 4), a[k] = 1;
  pass_pipe pp = {sc, p, v, K, f, b, NULL, NULL, a};
  pass_pipe_result r;
  CHECK_EQ_INT(pass_pipe_simulate(&pp, &r, true), 0);
  pass_pipe_in_flight(&pp, peak_act, peak_mb);
  for (int s = 0; s < p && r.ops; s++) {
    int got = rt_pipeline_order(sc, p, v, s, K, mb, chunk, bwd);
    CHECK_EQ_INT(got, n);
    int i = 0, live = 0, most = 0, bad = 0;
    for (int c = 0; c < v; c++) next_f[c] = next_b[c] = 0;
    for (int j = 0; j < r.n_ops; j++) {
      const pass_pipe_op *o = &r.ops[j];
      if (o->device != s) continue;
      if (i < got && (o->mb != mb[i] || o->chunk != chunk[i] || o->backward != bwd[i]) && !bad++)
        fprintf(stderr, "  %s p %d v %d K %d stage %d op %d: simulated %c mb %d chunk %d, trainer %c mb %d chunk %d\n",
                pass_schedule_name(sc), p, v, K, s, i, o->backward ? 'B' : 'F', o->mb, o->chunk, bwd[i] ? 'B' : 'F',
                mb[i], chunk[i]);
      i++;
    }
    CHECK_EQ_INT(i, n);
    CHECK_EQ_INT(bad, 0);
    for (int j = 0; j < got; j++) { /* the trainer's count (runtime/train.c pipeline_step) */
      live += bwd[j] ? -1 : 1;
      if (live > most) most = live;
      if (bwd[j] && sc == PASS_SCHED_GPIPE) CHECK_EQ_INT(mb[j], K - 1 - next_b[chunk[j]]++); /* the last first */
      else CHECK_EQ_INT(mb[j], bwd[j] ? next_b[chunk[j]]++ : next_f[chunk[j]]++);
    }
    CHECK_EQ_INT(live, 0);
    CHECK_EQ_INT(most, r.peak_mb[s]);
    CHECK_EQ_INT(most, peak_mb[s]);
    CHECK_NEAR(peak_act[s], (double)most, 0);
  }
  pass_pipe_result_free(&r);
  /* activations that differ per virtual stage and are not sums of powers of
   * two: pass_pipe_in_flight (which stops once the order repeats) keeps the
   * same peak bytes as the simulation, which adds every operation's, to the
   * last bit */
  for (int k = 0; k < nvs; k++) a[k] = 0.1 * (1 + (k * 7) % 5);
  CHECK_EQ_INT(pass_pipe_simulate(&pp, &r, false), 0);
  pass_pipe_in_flight(&pp, peak_act, peak_mb);
  for (int s = 0; s < p; s++) {
    CHECK_NEAR(peak_act[s], r.peak_act[s], 0);
    CHECK_EQ_INT(peak_mb[s], r.peak_mb[s]);
  }
  pass_pipe_result_free(&r);
  free(f), free(b), free(a), free(peak_act), free(peak_mb), free(mb), free(chunk), free(bwd), free(next_f), free(next_b);
}

/* The messages between neighbouring virtual stages (forward k to k + 1,
 * backward k to k - 1) from rank a to rank b, in the order a's program
 * sends them and in the order b's receives them, are the same: a receive
 * takes the first message from its peer (shard_stage.c). */
static void fifo(pass_schedule sc, int p, int v, int K) {
  int n = 2 * K * v, nvs = p * v;
  int *mb = malloc(sizeof *mb * n), *chunk = malloc(sizeof *chunk * n);
  bool *bwd = malloc(sizeof *bwd * n);
  /* per (from, to): the messages as code (virtual stage of the sender, direction, micro-batch) */
  int *sent = malloc(sizeof *sent * (size_t)p * p * n), *got = malloc(sizeof *got * (size_t)p * p * n);
  int *ns = calloc((size_t)p * p, sizeof *ns), *ng = calloc((size_t)p * p, sizeof *ng);
  if (!mb || !chunk || !bwd || !sent || !got || !ns || !ng) abort();
  for (int s = 0; s < p; s++) {
    CHECK_EQ_INT(rt_pipeline_order(sc, p, v, s, K, mb, chunk, bwd), n);
    for (int i = 0; i < n; i++) {
      int k = chunk[i] * p + s, dir = bwd[i] ? -1 : 1, from = k - dir; /* the stage it receives from */
      if (k + dir >= 0 && k + dir < nvs) { /* sends to k + dir */
        int pair = s * p + (k + dir) % p;
        sent[(size_t)pair * n + ns[pair]++] = (k * 2 + bwd[i]) * K + mb[i];
      }
      if (from >= 0 && from < nvs) { /* receives from `from` */
        int pair = (from % p) * p + s;
        got[(size_t)pair * n + ng[pair]++] = (from * 2 + bwd[i]) * K + mb[i];
      }
    }
  }
  int bad = 0;
  for (int pair = 0; pair < p * p; pair++) {
    CHECK_EQ_INT(ns[pair], ng[pair]);
    for (int i = 0; i < ns[pair] && i < ng[pair]; i++) bad += sent[(size_t)pair * n + i] != got[(size_t)pair * n + i];
  }
  if (bad) fprintf(stderr, "  %s p %d v %d K %d: %d messages out of order\n", pass_schedule_name(sc), p, v, K, bad);
  CHECK_EQ_INT(bad, 0);
  free(mb), free(chunk), free(bwd), free(sent), free(got), free(ns), free(ng);
}

/* Where stage s keeps its saved activations (rt_pipeline_place, what
 * runtime/train.c reserves): chunk c's holdings are bytes[c] each; two
 * holdings alive at once never share a byte, a backward reads its
 * forward's place, and the arena is the most held at once, which is
 * pass_pipe_in_flight's peak (exact: the arena is that peak). */
static void place(pass_schedule sc, int p, int v, int s, int K, const size_t *bytes, bool exact) {
  int n = 2 * K * v;
  int *mb = malloc(sizeof *mb * n), *chunk = malloc(sizeof *chunk * n), *live = malloc(sizeof *live * n);
  bool *bwd = malloc(sizeof *bwd * n);
  size_t *off = malloc(sizeof *off * n), least = 0;
  double *a = calloc((size_t)p * v, sizeof *a), *peak_act = malloc(sizeof *peak_act * p);
  int *peak_mb = malloc(sizeof *peak_mb * p);
  if (!mb || !chunk || !live || !bwd || !off || !a || !peak_act || !peak_mb) abort();
  CHECK_EQ_INT(rt_pipeline_order(sc, p, v, s, K, mb, chunk, bwd), n);
  size_t arena = rt_pipeline_place(n, mb, chunk, bwd, v, bytes, off, &least);
  for (int c = 0; c < v; c++) a[c * p + s] = (double)bytes[c];
  pass_pipe pp = {sc, p, v, K, NULL, NULL, NULL, NULL, a};
  pass_pipe_in_flight(&pp, peak_act, peak_mb);
  CHECK_NEAR((double)least, peak_act[s], 0);
  CHECK(arena >= least);
  if (exact && arena != least)
    fprintf(stderr, "  %s p %d v %d K %d stage %d: arena %zu, peak %zu\n", pass_schedule_name(sc), p, v, K, s, arena,
            least);
  if (exact) CHECK_EQ_INT((long long)arena, (long long)least);
  int m = 0, bad = 0; /* the forwards alive: live[0..m) */
  for (int o = 0; o < n; o++) {
    if (bwd[o]) { /* its forward's place */
      int j = 0;
      while (j < m && !(mb[live[j]] == mb[o] && chunk[live[j]] == chunk[o])) j++;
      CHECK(j < m);
      if (j < m) {
        bad += off[live[j]] != off[o];
        live[j] = live[--m];
      }
      continue;
    }
    bad += off[o] + bytes[chunk[o]] > arena;
    for (int j = 0; j < m; j++) /* apart from every holding alive */
      bad += off[o] < off[live[j]] + bytes[chunk[live[j]]] && off[live[j]] < off[o] + bytes[chunk[o]];
    live[m++] = o;
  }
  if (bad)
    fprintf(stderr, "  %s p %d v %d K %d stage %d: %d holdings misplaced\n", pass_schedule_name(sc), p, v, K, s, bad);
  CHECK_EQ_INT(bad, 0);
  free(mb), free(chunk), free(live), free(bwd), free(off), free(a), free(peak_act), free(peak_mb);
}

/* place() on every stage, every chunk's holdings of one size (first fit
 * then fills the lowest free place of that size: the arena is the peak). */
static void place_alike(pass_schedule sc, int p, int v, int K) {
  size_t bytes[4] = {1024, 1024, 1024, 1024};
  for (int s = 0; s < p; s++) place(sc, p, v, s, K, bytes, true);
}

int main(void) {
  int ps[] = {1, 2, 3, 4, 8};
  for (int i = 0; i < 5; i++) {
    int p = ps[i];
    for (int K = 1; K <= 3 * p + 1; K++) {
      one(PASS_SCHED_GPIPE, p, 1, K);
      one(PASS_SCHED_1F1B, p, 1, K);
      fifo(PASS_SCHED_GPIPE, p, 1, K);
      fifo(PASS_SCHED_1F1B, p, 1, K);
      place_alike(PASS_SCHED_GPIPE, p, 1, K);
      place_alike(PASS_SCHED_1F1B, p, 1, K);
      if (K % p == 0)
        for (int v = 1; v <= 4; v++) {
          one(PASS_SCHED_INTERLEAVED, p, v, K), fifo(PASS_SCHED_INTERLEAVED, p, v, K);
          place_alike(PASS_SCHED_INTERLEAVED, p, v, K);
        }
    }
  }
  /* the cases by name: pp = 2 and 4 with 2 chunks */
  one(PASS_SCHED_INTERLEAVED, 2, 2, 4);
  one(PASS_SCHED_INTERLEAVED, 4, 2, 8);
  /* chunks of unlike sizes (a model's first and last stages, uneven --stage-boundaries): the places
   * never overlap; the arena is the peak in the cases of tests/scripts/pipe_in_flight.sh's shape */
  size_t last_big[2] = {3 * 256, 4 * 256}, first_big[2] = {5 * 256, 4 * 256}, uneven[2] = {256, 4 * 256};
  place(PASS_SCHED_INTERLEAVED, 4, 2, 3, 8, last_big, true);
  place(PASS_SCHED_INTERLEAVED, 2, 2, 1, 8, last_big, true);
  place(PASS_SCHED_INTERLEAVED, 2, 2, 0, 4, first_big, true);
  place(PASS_SCHED_INTERLEAVED, 2, 2, 0, 4, uneven, true);
  place(PASS_SCHED_INTERLEAVED, 2, 2, 1, 4, uneven, true);
  place(PASS_SCHED_INTERLEAVED, 4, 2, 0, 16, first_big, false);
  place(PASS_SCHED_INTERLEAVED, 2, 2, 0, 8, uneven, false);
  /* interleaved needs K a multiple of pp: both refuse */
  int mb[24], chunk[24];
  bool bwd[24];
  double f[4] = {1, 1, 1, 1};
  pass_pipe bad = {PASS_SCHED_INTERLEAVED, 2, 2, 3, f, f, NULL, NULL, NULL};
  pass_pipe_result r;
  CHECK_EQ_INT(pass_pipe_simulate(&bad, &r, false), -1);
  CHECK_EQ_INT(rt_pipeline_order(PASS_SCHED_INTERLEAVED, 2, 2, 0, 3, mb, chunk, bwd), -1);
  return check_done();
}
