/* bench/comm_bench.c — throughput of tgc's collectives on CPU ranks (run by
 * bench/comm.sh under mpirun; built with -DTGC_BENCH=ON).
 *
 * For each size (f32 buffers) and each of all_reduce, all_gather and
 * send/recv (even ranks send to the next odd one): a few warm-up calls,
 * then calls for about `seconds` (every rank runs the same number: rank
 * 0's count, broadcast), timed from a barrier to a barrier. Printed by rank
 * 0: the buffer, the time per call (the slowest rank's), and MB/s per rank
 * = the payload bytes this rank sent (its counters) / time, and the
 * algorithm's bandwidth = buffer / time. 1 MB = 10^6 bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static char err[1024];

static void check(int rc) {
  if (rc) {
    fprintf(stderr, "comm_bench: %s\n", err);
    exit(1);
  }
}

/* one call of kind k on count floats; for send, even ranks send to rank+1 */
static void one(rt_comm *c, rt_coll_kind k, float *a, float *b, int64_t count) {
  int r = rt_comm_rank(c), n = rt_comm_size(c);
  switch (k) {
  case IR_COLL_ALL_REDUCE: check(rt_comm_all_reduce(c, -1, RT_REDUCE_SUM, IR_DT_F32, a, b, count, err, sizeof err)); break;
  case IR_COLL_ALL_GATHER: check(rt_comm_all_gather(c, -1, IR_DT_F32, a, b, count / n, err, sizeof err)); break;
  case IR_COLL_SEND:
    if (r % 2 == 0 && r + 1 < n) check(rt_comm_send(c, -1, r + 1, IR_DT_F32, a, count, err, sizeof err));
    if (r % 2 == 1) check(rt_comm_recv(c, -1, r - 1, IR_DT_F32, b, count, err, sizeof err));
    break;
  default: break;
  }
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 0.5;
  rt_comm *c = rt_comm_open(NULL, err, sizeof err);
  if (!c) {
    fprintf(stderr, "comm_bench: %s\n", err);
    return 1;
  }
  int n = rt_comm_size(c), me = rt_comm_rank(c);
  static const int64_t sizes[] = {1 << 10, 16 << 10, 256 << 10, 4 << 20, 16 << 20}; /* floats */
  static const rt_coll_kind kinds[] = {IR_COLL_ALL_REDUCE, IR_COLL_ALL_GATHER, IR_COLL_SEND};
  int64_t most = sizes[sizeof sizes / sizeof sizes[0] - 1];
  float *a = calloc((size_t)most, sizeof *a), *b = calloc((size_t)most, sizeof *b);
  for (int64_t i = 0; i < most; i++) a[i] = (float)(i % 1000) * 0.001f;
  if (me == 0)
    printf("%d ranks (%s)\n%-11s %10s %12s %16s %18s\n", n, rt_comm_impl(c), "operation", "buffer", "time/call",
           "MB/s per rank", "buffer MB/s (alg)");
  for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
      rt_coll_kind k = kinds[ki];
      int64_t count = sizes[si] / n * n;
      /* warm-up, timed: how many calls fill `seconds` (the same on every rank) */
      double t0 = now_s();
      for (int w = 0; w < 3; w++) one(c, k, a, b, count);
      double warm = (now_s() - t0) / 3, warm_max = 0;
      check(rt_comm_all_reduce(c, -1, RT_REDUCE_MAX, IR_DT_F64, &warm, &warm_max, 1, err, sizeof err));
      int64_t calls = (int64_t)(seconds / (warm_max > 1e-7 ? warm_max : 1e-7));
      if (calls < 5) calls = 5;
      if (calls > 100000) calls = 100000;
      rt_comm_reset_counts(c);
      check(rt_comm_barrier(c, err, sizeof err));
      t0 = now_s();
      for (int64_t i = 0; i < calls; i++) one(c, k, a, b, count);
      check(rt_comm_barrier(c, err, sizeof err));
      double per_call = (now_s() - t0) / (double)calls, slowest = 0;
      check(rt_comm_all_reduce(c, -1, RT_REDUCE_MAX, IR_DT_F64, &per_call, &slowest, 1, err, sizeof err));
      rt_comm_counter cnt = rt_comm_count(c, k, -1);
      double sent = (double)cnt.bytes_sent / (double)calls, sent_max = 0;
      check(rt_comm_all_reduce(c, -1, RT_REDUCE_MAX, IR_DT_F64, &sent, &sent_max, 1, err, sizeof err));
      if (me == 0) {
        double bytes = (double)count * 4;
        char buf[32];
        if (bytes >= 1 << 20) snprintf(buf, sizeof buf, "%.0f MiB", bytes / (1 << 20));
        else snprintf(buf, sizeof buf, "%.0f KiB", bytes / 1024);
        printf("%-11s %10s %10.1f us %16.1f %18.1f\n", rt_coll_name(k), buf, slowest * 1e6, sent_max / slowest / 1e6,
               bytes / slowest / 1e6);
      }
    }
  free(a);
  free(b);
  rt_comm_close(c);
  return 0;
}
