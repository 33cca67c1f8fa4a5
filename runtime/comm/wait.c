/* runtime/comm/wait.c — waiting for messages: polling, the timeout, and
 * which rank to blame when a wait times out.
 *
 * A wait polls the transport: it tests every pending request, and when
 * none finished, tests again at once, then yields the processor, then
 * sleeps (50 us, doubling up to 1 ms), so that ranks oversubscribed on few
 * cores leave each other the processor. Any progress starts the clock
 * again; a wait that sees no progress for the timeout ends the job through
 * rt_comm_abort, naming the rank it waited for.
 *
 * That rank may itself be waiting for another: in a ring, a hung rank
 * stalls its neighbour, which stalls the next, and every rank times out at
 * about the same moment, each waiting for a different rank. So before it
 * gives up, a timed-out rank asks (on the transports that can probe for a
 * message: mpi) the rank it waited for what that one waits for, and so on
 * along the chain; ranks answer from inside their own waits (once they
 * sleep: never on a fast path). The chain ends at a rank that does not
 * answer within a grace period (hung, stopped, or busy outside tgc's
 * waits: the one to blame), or comes back to a rank already in it (a
 * deadlock). Every rank's message then names the same rank:
 *   tgc: rank 3: all_reduce over world: no message from rank 2 for 3 s (--comm-timeout); stopping every rank
 *   tgc: rank 0: all_reduce over world: no message from rank 3 for 3 s; rank 3 waits for rank 2, which does not answer (--comm-timeout); stopping every rank
 * The questions take at most min(timeout/4, 1 s) per rank asked and
 * min(timeout, 10 s) in all.
 *
 * Ranks do not time out together everywhere: in a pipeline the ranks that
 * started waiting later are still inside their timeout when the first one
 * ends the job (MPI_Abort kills them unheard). So a rank that times out
 * first tells every other rank (TAG_STOP, the rank it blames) and waits up
 * to the grace period for their acknowledgements before it aborts; a rank
 * told so inside a wait prints its own line naming the same rank, e.g.
 *   tgc: rank 2: recv over pp: waiting for rank 1, stopped by rank 0: rank 1 does not answer (--comm-timeout); stopping every rank
 * acknowledges, and waits to be ended. A rank busy outside tgc's waits
 * (computing) is ended without a line. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"
#include "ir_clock.h"

#define GRACE_MAX_S 1.0
#define BLAME_BUDGET_MAX_S 10.0
#define CHAIN_MAX 64

static void backoff(unsigned idle) {
  if (idle < 64) return;
  if (idle < 256) {
    sched_yield();
    return;
  }
  unsigned shift = (idle - 256) / 64;
  long us = 50L << (shift < 5 ? shift : 5);
  if (us > 1000) us = 1000;
  struct timespec d = {0, us * 1000};
  nanosleep(&d, NULL);
}

static void stopped_by(rt_comm *c, int from);

/* Answers every question waiting: {seq} -> {seq, the rank this one waits
 * for, or -1}; a stop from another rank ends this one (stopped_by). */
static void answer_questions(rt_comm *c) {
  int from = -1;
  char why[256];
  if (c->be->iprobe && c->be->iprobe(c, TAG_STOP, &from) == 1) stopped_by(c, from);
  while (c->be->iprobe && c->be->iprobe(c, TAG_QUESTION, &from) == 1) {
    int32_t q = 0;
    comm_req *r = NULL;
    if (c->be->irecv(c, from, TAG_QUESTION, &q, sizeof q, &r, why, sizeof why)) return;
    int done = 0;
    for (int spins = 0; (done = c->be->test(c, r, NULL, why, sizeof why)) == 0 && spins < 1000000; spins++) {
    }
    if (done != 1) return; /* the message was there: it does not happen */
    int32_t answer[2] = {q, c->waiting_for};
    if (rt_comm_stage_send(c, from, TAG_ANSWER, answer, sizeof answer, why, sizeof why)) return;
  }
}

/* What `who` waits for: its rank (>= 0), -1 if it waits for no one, -2 if
 * it did not answer within grace seconds. */
static int ask(rt_comm *c, int who, double grace) {
  char why[256];
  int32_t q = ++c->question_seq;
  if (rt_comm_stage_send(c, who, TAG_QUESTION, &q, sizeof q, why, sizeof why)) return -2;
  double until = ir_clock_s() + grace;
  int32_t answer[2];
  comm_req *r = NULL;
  unsigned idle = 0;
  for (;;) {
    if (!r && c->be->irecv(c, who, TAG_ANSWER, answer, sizeof answer, &r, why, sizeof why)) return -2;
    int t = c->be->test(c, r, NULL, why, sizeof why);
    if (t < 0) return -2;
    if (t == 1) {
      r = NULL;
      if (answer[0] == q) return answer[1] >= 0 ? answer[1] : -1;
      continue; /* an answer to an earlier question */
    }
    answer_questions(c);
    if (ir_clock_s() > until) return -2; /* r stays posted: the job ends now */
    backoff(idle++);
  }
}

/* The chain from `peer` (see the top), as text to add to the message; the
 * rank to blame (-1: a deadlock). */
static int blame(rt_comm *c, int peer, char *note, size_t len) {
  note[0] = 0;
  if (!c->be->iprobe || peer < 0 || peer == c->rank) return peer;
  double grace = c->timeout_s / 4 < GRACE_MAX_S ? c->timeout_s / 4 : GRACE_MAX_S;
  double budget = c->timeout_s < BLAME_BUDGET_MAX_S ? c->timeout_s : BLAME_BUDGET_MAX_S;
  double deadline = ir_clock_s() + budget;
  int chain[CHAIN_MAX], n = 0;
  chain[n++] = peer;
  while (n < CHAIN_MAX && ir_clock_s() < deadline) {
    int next = ask(c, chain[n - 1], grace);
    if (next < 0) {
      if (next == -1 || n == 1) return peer; /* the one asked runs, or the first one is to blame: as it is */
      break;                            /* chain[n-1] does not answer */
    }
    bool cycle = next == c->rank;
    for (int i = 0; i < n; i++) cycle |= chain[i] == next;
    chain[n++] = next;
    if (cycle) break;
  }
  if (n < 2) return peer;
  /* chain[i] waits for chain[i+1] */
  int used = snprintf(note, len, "; rank %d waits for rank %d", chain[0], chain[1]);
  for (int i = 2; i < n && used > 0 && (size_t)used < len; i++)
    used += snprintf(note + used, len - (size_t)used, ", which waits for rank %d", chain[i]);
  int last = chain[n - 1];
  bool cycle = last == c->rank;
  for (int i = 0; i + 1 < n; i++) cycle |= chain[i] == last;
  if (used > 0 && (size_t)used < len)
    snprintf(note + used, len - (size_t)used, cycle ? ": the ranks wait for each other (a deadlock)" : ", which does not answer");
  return cycle ? -1 : last;
}

static double grace_s(const rt_comm *c) { return c->timeout_s / 4 < GRACE_MAX_S ? c->timeout_s / 4 : GRACE_MAX_S; }

/* A stop message: {STOP, the rank blamed (-1: a deadlock)} or {ACK, 0}. */
enum { STOP = 1, ACK = 2 };

/* Receives the stop message waiting from `from` into m; 0, or -1. */
static int take_stop(rt_comm *c, int from, int32_t m[2]) {
  char why[256];
  comm_req *r = NULL;
  if (c->be->irecv(c, from, TAG_STOP, m, 2 * sizeof *m, &r, why, sizeof why)) return -1;
  int done = 0;
  for (int spins = 0; (done = c->be->test(c, r, NULL, why, sizeof why)) == 0 && spins < 1000000; spins++) {
  }
  return done == 1 ? 0 : -1;
}

/* Rank `from` timed out and stops the job: say so, naming the rank it
 * blames, acknowledge, and wait to be ended (then end). */
static void stopped_by(rt_comm *c, int from) {
  int32_t m[2] = {0, -1};
  if (take_stop(c, from, m) != 0 || m[0] != STOP) return; /* a late acknowledgement: nothing to do */
  char why[256], msg[640];
  const char *what = c->waiting_what ? c->waiting_what : "a wait";
  if (m[1] >= 0)
    snprintf(msg, sizeof msg, "%s: waiting for rank %d, stopped by rank %d: rank %d does not answer (--comm-timeout); "
             "stopping every rank", what, c->waiting_for, from, m[1]);
  else
    snprintf(msg, sizeof msg, "%s: waiting for rank %d, stopped by rank %d: the ranks wait for each other (a deadlock) "
             "(--comm-timeout); stopping every rank", what, c->waiting_for, from);
  fprintf(stderr, "tgc: rank %d: %s\n", c->rank, msg);
  fflush(stderr);
  int32_t ack[2] = {ACK, 0};
  if (rt_comm_stage_send(c, from, TAG_STOP, ack, sizeof ack, why, sizeof why) == 0) {
    double until = ir_clock_s() + 4 * grace_s(c) + 1; /* the stopper aborts within its grace */
    for (unsigned idle = 0; ir_clock_s() < until; idle++) {
      if (rt_comm_progress(c, why, sizeof why) != 0) break;
      backoff(idle < 512 ? idle : 512);
    }
  }
  rt_comm_abort_quiet(c);
}

/* This rank timed out (its line printed): tells every other rank, and waits
 * up to the grace period for their acknowledgements (a stop that another
 * timed-out rank sends meanwhile is acknowledged, not printed). */
static void stop_others(rt_comm *c, int blamed) {
  if (!c->be->iprobe || c->size < 2) return;
  char why[256];
  int32_t stop[2] = {STOP, blamed}, ack[2] = {ACK, 0};
  bool *heard = calloc((size_t)c->size, sizeof *heard);
  if (!heard) return;
  int want = 0;
  for (int r = 0; r < c->size; r++)
    if (r != c->rank && rt_comm_stage_send(c, r, TAG_STOP, stop, sizeof stop, why, sizeof why) == 0) want++;
  double until = ir_clock_s() + grace_s(c);
  for (unsigned idle = 0; want > 0 && ir_clock_s() < until; idle++) {
    int from = -1;
    int32_t m[2];
    if (c->be->iprobe(c, TAG_STOP, &from) == 1) {
      if (take_stop(c, from, m) != 0) break;
      if (from >= 0 && from < c->size && !heard[from]) heard[from] = true, want--; /* acknowledged, or it stops too */
      if (m[0] == STOP) rt_comm_stage_send(c, from, TAG_STOP, ack, sizeof ack, why, sizeof why);
      continue;
    }
    if (rt_comm_progress(c, why, sizeof why) != 0) break;
    backoff(idle < 512 ? idle : 512);
  }
  free(heard);
}

int rt_comm_wait(rt_comm *c, const char *what, comm_req **reqs, const int *peers, const bool *recv, int n,
                 int *sources, char *err, size_t errlen) {
  int left = 0, first = -1;
  for (int i = 0; i < n; i++)
    if (reqs[i]) left++, first = first < 0 ? i : first;
  if (!left) return 0;
  int outer = c->waiting_for;
  const char *outer_what = c->waiting_what;
  c->waiting_for = peers[first];
  c->waiting_what = what;
  double since = ir_clock_s();
  unsigned idle = 0;
  while (left > 0) {
    bool progressed = false;
    for (int i = 0; i < n; i++) {
      if (!reqs[i]) continue;
      char why[512];
      int r = c->be->test(c, reqs[i], sources ? &sources[i] : NULL, why, sizeof why);
      if (r < 0) {
        c->broken = true;
        c->waiting_for = outer;
        c->waiting_what = outer_what;
        rt_comm_errf(err, errlen, "%s: %s", what, why);
        return -1;
      }
      if (r == 1) reqs[i] = NULL, left--, progressed = true;
    }
    if (!left) break;
    if (progressed) {
      since = ir_clock_s();
      idle = 0;
      for (first = 0; !reqs[first]; first++) {
      }
      c->waiting_for = peers[first];
      continue;
    }
    if (ir_clock_s() - since > c->timeout_s) {
      char note[512], msg[1200];
      int blamed = blame(c, peers[first], note, sizeof note);
      if (recv[first] && peers[first] < 0)
        snprintf(msg, sizeof msg, "%s: no message from any rank for %g s (--comm-timeout); stopping every rank", what,
                 c->timeout_s);
      else if (recv[first])
        snprintf(msg, sizeof msg, "%s: no message from rank %d for %g s%s (--comm-timeout); stopping every rank", what,
                 peers[first], c->timeout_s, note);
      else
        snprintf(msg, sizeof msg, "%s: rank %d took no message for %g s%s (--comm-timeout); stopping every rank",
                 what, peers[first], c->timeout_s, note);
      fprintf(stderr, "tgc: rank %d: %s\n", c->rank, msg);
      fflush(stderr);
      stop_others(c, blamed);
      rt_comm_abort_quiet(c);
    }
    if (idle >= 256 && idle % 16 == 0) answer_questions(c);
    backoff(idle++);
  }
  c->waiting_for = outer;
  c->waiting_what = outer_what;
  return 0;
}
