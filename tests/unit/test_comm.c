/* tests/unit/test_comm.c — the communication layer (runtime/comm).
 *
 * Without a launcher (plain CTest): the local implementation — world size
 * 1, every collective on axes of size 1 (copies, one call, 0 bytes), the
 * loopback queue, every argument error and the mesh-too-big error with
 * their exact messages, the byte formulas by hand, rt_comm_abort's line
 * and status, and that no MPI library is loaded.
 *
 * Under mpirun (CTest runs it on 1, 2, 3, 4 and 8 ranks): the mpi
 * implementation — every mesh of the world size (2-D and 3-D), every axis
 * and the world, every collective, every dtype, counts divisible by the
 * group size and not, and 0, checked bit for bit against references each
 * rank computes (testcomm.h), bit-identical across members, counters equal
 * to the closed forms; point-to-point in an order that deadlocks with
 * blocking sends (every rank sends first) and a 1F1B pipeline schedule;
 * determinism (the same call twice, the same bits); the wrong-mesh error;
 * and that libmpi is loaded (the check the local run relies on can fail).
 *
 *   test_comm --fault N   under mpirun with a TGC_TEST_COMM_* hook set:
 *                         all_reduce in a loop, N seconds of timeout; it
 *                         must never end normally (tests/scripts/comm_fault.sh)
 *   test_comm --mismatch  rank 0 all_reduces 8 elements, the others 16:
 *                         each rank prints its error (comm_fault.sh) */
#define _GNU_SOURCE
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "testcomm.h"

static bool maps_contain(const char *needle) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return false;
  char line[1024];
  bool found = false;
  while (fgets(line, sizeof line, f))
    if (strstr(line, needle)) found = true;
  fclose(f);
  return found;
}

/* ---- local (no launcher) ---- */

static void test_local_open(void) {
  CHECK(!rt_comm_under_launcher());
  rt_comm_options o = {.impl = "bogus"};
  CHECK(rt_comm_open(&o, C_err, sizeof C_err) == NULL);
  CHECK_STR(C_err, "unknown comm implementation 'bogus' (auto, local, mpi, nccl)");
  o = (rt_comm_options){.timeout_s = -1};
  CHECK(rt_comm_open(&o, C_err, sizeof C_err) == NULL);
  CHECK_STR(C_err, "--comm-timeout -1: expected seconds, 0 for the default (300)");
  o = (rt_comm_options){.impl = "nccl"};
  CHECK(rt_comm_open(&o, C_err, sizeof C_err) == NULL);
  CHECK_STR(C_err, "the nccl implementation needs a CUDA table with NCCL loaded (rt_cuda_load with CG_CUDA_LIB_NCCL, "
                   "or the cuda-emu backend)");
  /* an MPI library that is not there: nothing is loaded, a clear message
   * (or, built without mpi.h, that MPI is not built in) */
  setenv("TGC_MPI_LIB", "/nonexistent/libmpi.so.40", 1);
  o = (rt_comm_options){.impl = "mpi"};
  CHECK(rt_comm_open(&o, C_err, sizeof C_err) == NULL);
  if (rt_comm_has_mpi())
    CHECK_STR(C_err, "cannot load Open MPI: /nonexistent/libmpi.so.40: cannot open shared object file: No such file "
                     "or directory (install openmpi-bin, or set TGC_MPI_LIB to its libmpi.so)");
  else
    CHECK_STR(C_err, "MPI is not built in: tgc was built without mpi.h (install libopenmpi-dev and rebuild)");
  printf("mpi implementation built in: %s\n", rt_comm_has_mpi() ? "yes" : "no");
  unsetenv("TGC_MPI_LIB");

  rt_comm *c = rt_comm_open(NULL, C_err, sizeof C_err);
  CHECK(c != NULL);
  CHECK_STR(rt_comm_impl(c), "local");
  CHECK_EQ_INT(rt_comm_rank(c), 0);
  CHECK_EQ_INT(rt_comm_size(c), 1);
  CHECK(rt_comm_timeout(c) == 300);
  CHECK_EQ_INT(rt_comm_axis_count(c), 0);
  CHECK_EQ_INT(rt_comm_tag_limit(c), RT_COMM_TAG_USER - 1);
  CHECK(rt_comm_process_mpi() == NULL);

  /* the mesh */
  const char *names[] = {"dp", "tp", "pp"};
  int sizes[] = {2, 2, 1};
  CHECK_EQ_INT(rt_comm_set_mesh(c, 2, names, sizes, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "--mesh dp=2,tp=2 needs 4 ranks, but tgc runs as 1 process (start it with mpirun -np 4)");
  int one[] = {1, 8};
  CHECK_EQ_INT(rt_comm_set_mesh(c, 2, names, one, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "--mesh dp=1,tp=8 needs 8 ranks, but tgc runs as 1 process (start it with mpirun -np 8)");
  const char *dup[] = {"dp", "dp"};
  int ones[] = {1, 1, 1};
  CHECK_EQ_INT(rt_comm_set_mesh(c, 2, dup, ones, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "mesh axis 'dp' appears twice");
  int zero[] = {1, 0};
  CHECK_EQ_INT(rt_comm_set_mesh(c, 2, names, zero, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "mesh axis tp=0: sizes are 1 or more");
  const char *empty[] = {""};
  CHECK_EQ_INT(rt_comm_set_mesh(c, 1, empty, ones, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "mesh axis 0: a name of 1 to 15 characters, not ''");
  CHECK_EQ_INT(rt_comm_set_mesh(c, 9, names, ones, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "a mesh of 9 axes (at most 8)");
  CHECK_EQ_INT(rt_comm_set_mesh(c, 3, names, ones, C_err, sizeof C_err), 0);
  CHECK_EQ_INT(rt_comm_axis_count(c), 3);
  CHECK_EQ_INT(rt_comm_axis_size(c, 1), 1);
  CHECK_EQ_INT(rt_comm_axis_size(c, -1), 1);
  CHECK_STR(rt_comm_axis_name(c, 2), "pp");
  CHECK_STR(rt_comm_axis_name(c, -1), "world");
  CHECK_EQ_INT(rt_comm_coord(c, 0), 0);
  CHECK_EQ_INT(rt_comm_axis_find(c, "tp"), 1);
  CHECK_EQ_INT(rt_comm_axis_find(c, "sp"), -1);

  /* every collective on every axis and the world: copies */
  t_sweep s = {.c = c, .mem = &t_host_mem};
  t_set_mesh(&s, 3, ones);
  for (int axis = -1; axis < 3; axis++) t_sweep_axis(&s, axis, 1000);
  CHECK_EQ_INT(s.mismatches, 0);
  rt_comm_counter w = rt_comm_count(c, IR_COLL_ALL_REDUCE, -1);
  CHECK(w.calls > 0);
  CHECK_EQ_INT(w.bytes_sent, 0);
  CHECK_EQ_INT(w.bytes_received, 0);
  rt_comm_counter w2 = rt_comm_count(c, IR_COLL_ALL_REDUCE, 3); /* index n_axes: the world too */
  CHECK_EQ_INT(w2.calls, w.calls);
  CHECK_EQ_INT(rt_comm_count(c, IR_COLL_ALL_REDUCE, 4).calls, 0); /* no such axis */
  rt_comm_reset_counts(c);
  CHECK_EQ_INT(rt_comm_count(c, IR_COLL_ALL_REDUCE, -1).calls, 0);
  CHECK_EQ_INT(rt_comm_set_mesh(c, 3, names, ones, C_err, sizeof C_err), 0); /* dp, tp, pp again */

  /* argument errors, exact */
  float x[4] = {1, 2, 3, 4}, y[4];
  CHECK_EQ_INT(rt_comm_all_reduce(c, 3, RT_REDUCE_SUM, IR_DT_F32, x, y, 4, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "all_reduce: no mesh axis 3 (the mesh has 3 axes: dp, tp, pp; -1 is the world)");
  CHECK_EQ_INT(rt_comm_all_gather(c, 0, IR_DT_F32, x, y, -2, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "all_gather over dp: count -2 (expected 0 to 1152921504606846975 elements)");
  CHECK_EQ_INT(rt_comm_reduce_scatter(c, 1, RT_REDUCE_MAX, IR_DT_F32, NULL, y, 4, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "reduce_scatter over tp: a NULL send buffer for 4 elements");
  CHECK_EQ_INT(rt_comm_broadcast(c, 2, 1, IR_DT_F32, y, 4, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "broadcast over pp: root coordinate 1 does not exist (1 member: 0 to 0)");
  CHECK_EQ_INT(rt_comm_all_reduce(c, -1, (rt_reduce_op)7, IR_DT_F32, x, y, 4, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "all_reduce over world: unknown reduction 7");
  CHECK_EQ_INT(rt_comm_all_to_all(c, -1, (ir_dtype)99, x, y, 4, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "all_to_all over world: unknown dtype 99");
  CHECK_EQ_INT(rt_comm_send(c, 0, 1, IR_DT_F32, x, 4, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "send over dp: peer coordinate 1 does not exist (1 member: 0 to 0)");
  CHECK_EQ_INT(rt_comm_count(c, IR_COLL_SEND, 0).calls, 0); /* a refused call is not counted */

  /* send/recv to itself: a FIFO per axis; 0 bytes counted */
  float a1[3] = {1, 2, 3}, a2[3] = {4, 5, 6}, r1[3] = {0}, r2[3] = {0};
  CHECK_EQ_INT(rt_comm_send(c, 2, 0, IR_DT_F32, a1, 3, C_err, sizeof C_err), 0);
  a1[0] = 99; /* the send was staged: buf may be reused at once */
  CHECK_EQ_INT(rt_comm_send(c, 2, 0, IR_DT_F32, a2, 3, C_err, sizeof C_err), 0);
  CHECK_EQ_INT(rt_comm_recv(c, 0, 0, IR_DT_F32, r1, 3, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "recv over dp: from this rank itself, but it sent itself nothing");
  CHECK_EQ_INT(rt_comm_recv(c, 2, 0, IR_DT_F32, r1, 2, C_err, sizeof C_err), -1);
  CHECK_STR(C_err, "recv over pp: this rank sent itself 12 bytes, but receives 8");
  CHECK_EQ_INT(rt_comm_recv(c, 2, 0, IR_DT_F32, r1, 3, C_err, sizeof C_err), 0);
  CHECK_EQ_INT(rt_comm_recv(c, 2, 0, IR_DT_F32, r2, 3, C_err, sizeof C_err), 0);
  CHECK(r1[0] == 1 && r1[2] == 3 && r2[0] == 4 && r2[2] == 6);
  rt_comm_counter sc = rt_comm_count(c, IR_COLL_SEND, 2), rc = rt_comm_count(c, IR_COLL_RECV, 2);
  CHECK_EQ_INT(sc.calls, 2);
  CHECK_EQ_INT(sc.bytes_sent, 0);
  CHECK_EQ_INT(rc.calls, 3); /* the refused one over pp counts: it reached the queue */
  CHECK_EQ_INT(rc.bytes_received, 0);
  CHECK_EQ_INT(rt_comm_barrier(c, C_err, sizeof C_err), 0);
  /* re-meshing resets the counters */
  CHECK_EQ_INT(rt_comm_set_mesh(c, 0, NULL, NULL, C_err, sizeof C_err), 0);
  CHECK_EQ_INT(rt_comm_count(c, IR_COLL_SEND, -1).calls, 0);
  rt_comm_close(c);
  rt_comm_close(NULL);
  /* nothing of MPI was loaded by any of this */
  CHECK(!maps_contain("libmpi"));
  CHECK(!maps_contain("libopen-pal"));
}

/* The byte formulas on numbers checkable by hand. */
static void test_formulas(void) {
  /* all_reduce of 10 f32 over 4: chunks 3, 3, 2, 2 */
  rt_comm_counter r = rt_comm_ring_bytes(IR_COLL_ALL_REDUCE, 4, 0, 0, 10, 4);
  CHECK_EQ_INT(r.bytes_sent, (20 - 3 - 3) * 4);     /* 56: all chunks but c0, then all but c1 */
  CHECK_EQ_INT(r.bytes_received, (20 - 2 - 3) * 4); /* 60: all but c3, then all but c0 */
  r = rt_comm_ring_bytes(IR_COLL_ALL_REDUCE, 4, 2, 0, 10, 4);
  CHECK_EQ_INT(r.bytes_sent, (20 - 2 - 2) * 4);     /* 64 */
  CHECK_EQ_INT(r.bytes_received, (20 - 3 - 2) * 4); /* 60 */
  /* 12 elements over 4: 2 (n-1)/n of the buffer, 18 elements */
  r = rt_comm_ring_bytes(IR_COLL_ALL_REDUCE, 4, 1, 0, 12, 2);
  CHECK_EQ_INT(r.bytes_sent, 36);
  CHECK_EQ_INT(r.bytes_received, 36);
  /* the sum over members of sent = of received = 2 (n-1) count */
  int64_t sent = 0, recvd = 0;
  for (int i = 0; i < 4; i++) {
    r = rt_comm_ring_bytes(IR_COLL_ALL_REDUCE, 4, i, 0, 10, 1);
    sent += r.bytes_sent, recvd += r.bytes_received;
  }
  CHECK_EQ_INT(sent, 60);
  CHECK_EQ_INT(recvd, 60);
  r = rt_comm_ring_bytes(IR_COLL_ALL_GATHER, 8, 5, 0, 100, 8);
  CHECK_EQ_INT(r.bytes_sent, 5600);
  CHECK_EQ_INT(r.bytes_received, 5600);
  r = rt_comm_ring_bytes(IR_COLL_REDUCE_SCATTER, 2, 0, 0, 3, 4);
  CHECK_EQ_INT(r.bytes_sent, 12);
  r = rt_comm_ring_bytes(IR_COLL_ALL_TO_ALL, 3, 2, 0, 5, 8);
  CHECK_EQ_INT(r.bytes_received, 80);
  /* broadcast from 2 over 4: chain 2, 3, 0, 1 */
  r = rt_comm_ring_bytes(IR_COLL_BROADCAST, 4, 2, 2, 10, 4);
  CHECK(r.bytes_sent == 40 && r.bytes_received == 0);
  r = rt_comm_ring_bytes(IR_COLL_BROADCAST, 4, 0, 2, 10, 4);
  CHECK(r.bytes_sent == 40 && r.bytes_received == 40);
  r = rt_comm_ring_bytes(IR_COLL_BROADCAST, 4, 1, 2, 10, 4);
  CHECK(r.bytes_sent == 0 && r.bytes_received == 40);
  r = rt_comm_ring_bytes(IR_COLL_SEND, 2, 0, 1, 10, 2);
  CHECK(r.bytes_sent == 20 && r.bytes_received == 0 && r.calls == 1);
  r = rt_comm_ring_bytes(IR_COLL_ALL_REDUCE, 1, 0, 0, 10, 4);
  CHECK(r.bytes_sent == 0 && r.bytes_received == 0 && r.calls == 1);
  CHECK_STR(rt_coll_name(IR_COLL_REDUCE_SCATTER), "reduce_scatter");
  CHECK_STR(rt_coll_name(IR_NUM_COLLS), "?");
}

/* rt_comm_abort in a child: its line on stderr and exit status 1. */
static void test_abort(void) {
  int fds[2];
  CHECK_EQ_INT(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    rt_comm *c = rt_comm_open(NULL, C_err, sizeof C_err);
    rt_comm_abort(c, "all_reduce over tp: no message from rank 3 for 300 s (--comm-timeout); stopping every rank");
  }
  close(fds[1]);
  char buf[512] = "";
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = 0;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  CHECK_STR(buf,
            "tgc: rank 0: all_reduce over tp: no message from rank 3 for 300 s (--comm-timeout); stopping every rank\n");
}

/* ---- under mpirun ---- */

/* Every rank first sends 4 messages of 1 MiB to each neighbour (blocking
 * sends of this size would wait for receives nobody has posted yet: a
 * deadlock), then receives them: contents and order. */
static void test_send_first(rt_comm *c) {
  int n = rt_comm_size(c), me = rt_comm_rank(c);
  if (n < 2) return;
  enum { MSGS = 4, COUNT = 1 << 18 };
  float *buf = malloc(COUNT * sizeof *buf);
  rt_comm_reset_counts(c);
  for (int m = 0; m < MSGS; m++)
    for (int dir = -1; dir <= 1; dir += 2) {
      for (int i = 0; i < COUNT; i++) buf[i] = (float)(me * 1000 + m * 10 + (dir > 0)) + (float)i / COUNT;
      int peer = ((me + dir) % n + n) % n;
      CHECK_EQ_INT(rt_comm_send(c, -1, peer, IR_DT_F32, buf, COUNT, C_err, sizeof C_err), 0);
    }
  int bad = 0;
  for (int m = 0; m < MSGS; m++)
    for (int dir = -1; dir <= 1; dir += 2) {
      /* the peer sent it with the same direction (with n = 2 both
       * neighbours are one rank: its messages come in the order sent) */
      int from = ((me - dir) % n + n) % n;
      CHECK_EQ_INT(rt_comm_recv(c, -1, from, IR_DT_F32, buf, COUNT, C_err, sizeof C_err), 0);
      for (int i = 0; i < COUNT; i += 997)
        bad += buf[i] != (float)(from * 1000 + m * 10 + (dir > 0)) + (float)i / COUNT;
    }
  CHECK_EQ_INT(bad, 0);
  rt_comm_counter s = rt_comm_count(c, IR_COLL_SEND, -1), r = rt_comm_count(c, IR_COLL_RECV, -1);
  CHECK_EQ_INT(s.calls, 2 * MSGS);
  CHECK_EQ_INT(s.bytes_sent, 2LL * MSGS * COUNT * 4);
  CHECK_EQ_INT(r.bytes_received, 2LL * MSGS * COUNT * 4);
  free(buf);
}

/* 1F1B over the pipeline axis: stage p runs min(S-p-1, M) forwards, then
 * alternates one forward and one backward, then the remaining backwards.
 * A forward receives the activation of micro-batch m from p-1 and sends
 * its own to p+1; a backward receives the gradient from p+1 and sends one
 * to p-1. Activations of 512 KiB. */
static void test_1f1b(rt_comm *c, int axis) {
  int S = rt_comm_axis_size(c, axis), p = rt_comm_coord(c, axis), M = 6;
  if (S < 2) return;
  enum { COUNT = 1 << 17 };
  double *buf = malloc(COUNT * sizeof *buf);
  int bad = 0, fwd = 0, bwd = 0;
  rt_comm_reset_counts(c);
  int warm = S - p - 1 < M ? S - p - 1 : M;
  /* the sequence of ops: 0 = forward, 1 = backward */
  int ops[64], nops = 0;
  for (int i = 0; i < warm; i++) ops[nops++] = 0;
  for (int i = 0; i < M - warm; i++) ops[nops++] = 0, ops[nops++] = 1;
  for (int i = 0; i < warm; i++) ops[nops++] = 1;
  for (int o = 0; o < nops; o++) {
    if (ops[o] == 0) {
      int m = fwd++;
      if (p > 0) {
        CHECK_EQ_INT(rt_comm_recv(c, axis, p - 1, IR_DT_F64, buf, COUNT, C_err, sizeof C_err), 0);
        for (int i = 0; i < COUNT; i += 1021) bad += buf[i] != (p - 1) * 100 + m + i * 1e-6;
      }
      for (int i = 0; i < COUNT; i++) buf[i] = p * 100 + m + i * 1e-6;
      if (p < S - 1) CHECK_EQ_INT(rt_comm_send(c, axis, p + 1, IR_DT_F64, buf, COUNT, C_err, sizeof C_err), 0);
    } else {
      int m = bwd++;
      if (p < S - 1) {
        CHECK_EQ_INT(rt_comm_recv(c, axis, p + 1, IR_DT_F64, buf, COUNT, C_err, sizeof C_err), 0);
        for (int i = 0; i < COUNT; i += 1021) bad += buf[i] != -((p + 1) * 100 + m + i * 1e-6);
      }
      for (int i = 0; i < COUNT; i++) buf[i] = -(p * 100 + m + i * 1e-6);
      if (p > 0) CHECK_EQ_INT(rt_comm_send(c, axis, p - 1, IR_DT_F64, buf, COUNT, C_err, sizeof C_err), 0);
    }
  }
  CHECK_EQ_INT(fwd, M);
  CHECK_EQ_INT(bwd, M);
  CHECK_EQ_INT(bad, 0);
  /* a stage boundary: M activations forward, M gradients backward */
  int64_t msg = COUNT * 8;
  int links = (p > 0) + (p < S - 1);
  CHECK_EQ_INT(rt_comm_count(c, IR_COLL_SEND, axis).bytes_sent, links * M * msg);
  CHECK_EQ_INT(rt_comm_count(c, IR_COLL_RECV, axis).bytes_received, links * M * msg);
  free(buf);
}

/* Buffers that overlap, over the world: all_gather with send at this
 * rank's block of recv, reduce_scatter with recv at this rank's block of
 * send (both NCCL's in-place forms), all_to_all with send == recv (staged).
 * Results against the references of testcomm.h. */
static void test_overlaps(rt_comm *c) {
  int n = rt_comm_size(c), me = rt_comm_rank(c);
  int64_t count = 7;
  uint64_t salt = 4242;
  int members[64];
  for (int j = 0; j < n; j++) members[j] = j;
  float *buf = calloc((size_t)(n * count), sizeof *buf), *want = calloc((size_t)(n * count), sizeof *want);
  /* all_gather in place */
  for (int64_t e = 0; e < count; e++) t_input(IR_DT_F32, me, e, salt, buf, me * count + e);
  for (int j = 0; j < n; j++)
    for (int64_t e = 0; e < count; e++) t_input(IR_DT_F32, j, e, salt, want, j * count + e);
  CHECK_EQ_INT(rt_comm_all_gather(c, -1, IR_DT_F32, buf + me * count, buf, count, C_err, sizeof C_err), 0);
  CHECK_EQ_INT(t_compare("in-place all_gather", IR_DT_F32, buf, want, n * count), 0);
  /* reduce_scatter in place */
  for (int64_t i = 0; i < n * count; i++) t_input(IR_DT_F32, me, i, salt, buf, i);
  for (int64_t e = 0; e < count; e++) t_ref_reduce(IR_DT_F32, RT_REDUCE_SUM, members, n, me, me * count + e, salt, want, e);
  CHECK_EQ_INT(rt_comm_reduce_scatter(c, -1, RT_REDUCE_SUM, IR_DT_F32, buf, buf + me * count, count, C_err, sizeof C_err),
               0);
  CHECK_EQ_INT(t_compare("in-place reduce_scatter", IR_DT_F32, buf + me * count, want, count), 0);
  /* all_to_all with send == recv */
  for (int64_t i = 0; i < n * count; i++) t_input(IR_DT_F32, me, i, salt + 1, buf, i);
  for (int j = 0; j < n; j++)
    for (int64_t e = 0; e < count; e++) t_input(IR_DT_F32, j, me * count + e, salt + 1, want, j * count + e);
  CHECK_EQ_INT(rt_comm_all_to_all(c, -1, IR_DT_F32, buf, buf, count, C_err, sizeof C_err), 0);
  CHECK_EQ_INT(t_compare("in-place all_to_all", IR_DT_F32, buf, want, n * count), 0);
  free(buf);
  free(want);
}

/* The same all_reduce twice: the same bits (and the reference's). */
static void test_determinism(rt_comm *c) {
  int64_t count = 300001;
  float *a = malloc((size_t)count * sizeof *a), *r1 = malloc((size_t)count * sizeof *r1),
        *r2 = malloc((size_t)count * sizeof *r2);
  for (int64_t i = 0; i < count; i++) t_input(IR_DT_F32, rt_comm_rank(c), i, 777, a, i);
  CHECK_EQ_INT(rt_comm_all_reduce(c, -1, RT_REDUCE_SUM, IR_DT_F32, a, r1, count, C_err, sizeof C_err), 0);
  CHECK_EQ_INT(rt_comm_all_reduce(c, -1, RT_REDUCE_SUM, IR_DT_F32, a, r2, count, C_err, sizeof C_err), 0);
  CHECK(memcmp(r1, r2, (size_t)count * sizeof *r1) == 0);
  /* against the sum in double: the f32 ring is within n roundings */
  int n = rt_comm_size(c);
  double maxrel = 0;
  for (int64_t i = 0; i < count; i += 101) {
    double s = 0, mag = 0;
    float x;
    for (int r = 0; r < n; r++) {
      t_input(IR_DT_F32, r, i, 777, &x, 0);
      s += x, mag += fabs(x);
    }
    double rel = fabs(r1[i] - s) / (mag > 0 ? mag : 1);
    if (rel > maxrel) maxrel = rel;
  }
  CHECK(maxrel <= n * 6e-8); /* n roundings of 2^-24 relative to the sum of magnitudes */
  /* every rank prints the same hash (the CTest log shows it) */
  uint64_t h = t_hash(r1, (size_t)count * sizeof *r1), all[64];
  CHECK_EQ_INT(rt_comm_all_gather(c, -1, IR_DT_I64, &h, all, 1, C_err, sizeof C_err), 0);
  for (int r = 0; r < n; r++) CHECK(all[r] == h);
  if (rt_comm_rank(c) == 0)
    printf("all_reduce of %lld f32 over %d ranks: hash %016llx, max error %.3g of the sum of magnitudes\n",
           (long long)count, n, (unsigned long long)h, maxrel);
  free(a);
  free(r1);
  free(r2);
}

static void run_meshes(rt_comm *c) {
  int n = rt_comm_size(c);
  t_sweep s = {.c = c, .mem = &t_host_mem};
  /* the world first, with no axes */
  t_set_mesh(&s, 0, NULL);
  t_sweep_axis(&s, -1, 100003);
  /* then 2-D and 3-D meshes of the world size (axis 0 is the pipeline) */
  static const struct {
    int world, n_axes, sizes[3];
  } all[] = {{1, 2, {1, 1}},    {2, 2, {1, 2}},    {2, 2, {2, 1}}, {3, 2, {3, 1}},
             {3, 3, {1, 3, 1}}, {4, 2, {2, 2}},    {4, 3, {1, 4, 1}}, {8, 2, {2, 4}},
             {8, 3, {2, 2, 2}}};
  int meshes[8][3], naxes[8], m = 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i].world == n) {
      naxes[m] = all[i].n_axes;
      memcpy(meshes[m], all[i].sizes, sizeof meshes[m]);
      m++;
    }
  for (int i = 0; i < m; i++) {
    if (t_set_mesh(&s, naxes[i], meshes[i])) continue;
    for (int axis = 0; axis < naxes[i]; axis++) t_sweep_axis(&s, axis, 5003);
    test_1f1b(c, 0);
  }
  CHECK_EQ_INT(s.mismatches, 0);
  if (rt_comm_rank(c) == 0) printf("%lld collectives checked on %d meshes of %d ranks\n", (long long)s.calls, m + 1, n);
}

static int run_mpi(void) {
  rt_comm_options o = {0};
  rt_comm *c = rt_comm_open(&o, C_err, sizeof C_err);
  if (!c) {
    fprintf(stderr, "%s\n", C_err);
    return 1;
  }
  CHECK_STR(rt_comm_impl(c), "mpi");
  CHECK(maps_contain("libmpi.so")); /* the local run's check would see it */
  CHECK(rt_comm_process_mpi() == c);
  CHECK(rt_comm_tag_limit(c) >= 32767);
  int n = rt_comm_size(c);
  const char *names[] = {"dp"};
  int wrong[] = {n + 1};
  CHECK_EQ_INT(rt_comm_set_mesh(c, 1, names, wrong, C_err, sizeof C_err), -1);
  char want[256];
  snprintf(want, sizeof want, "--mesh dp=%d needs %d ranks, but this job has %d (start it with mpirun -np %d)", n + 1,
           n + 1, n, n + 1);
  CHECK_STR(C_err, want);
  /* ranks that set different meshes are told so, each naming another */
  if (n == 4) {
    const char *two[] = {"dp", "tp"};
    int me = rt_comm_rank(c), sizes22[] = {2, 2}, sizes4[] = {4};
    int rc = me == 0 ? rt_comm_set_mesh(c, 2, two, sizes22, C_err, sizeof C_err)
                     : rt_comm_set_mesh(c, 1, two, sizes4, C_err, sizeof C_err);
    CHECK_EQ_INT(rc, -1);
    CHECK_STR(C_err, me == 0 ? "--mesh dp=2,tp=2 differs from rank 1's (every rank sets the same mesh)"
                             : "--mesh dp=4 differs from rank 0's (every rank sets the same mesh)");
    CHECK_EQ_INT(rt_comm_axis_count(c), 0); /* the mesh stays as it was */
  }
  run_meshes(c);
  t_sweep s = {.c = c, .mem = &t_host_mem};
  t_set_mesh(&s, 0, NULL);
  test_send_first(c);
  test_overlaps(c);
  test_determinism(c);
  CHECK_EQ_INT(rt_comm_barrier(c, C_err, sizeof C_err), 0);
  rt_comm_close(c);
  CHECK(rt_comm_process_mpi() == NULL);
  /* MPI allows one MPI_Init per process */
  CHECK(rt_comm_open(&o, C_err, sizeof C_err) == NULL);
  CHECK_STR(C_err, "MPI was finalized in this process: it cannot be opened again");
  return check_done();
}

/* all_reduce forever; a TGC_TEST_COMM_* hook makes one rank fail. */
static int run_fault(double timeout) {
  rt_comm_options o = {.timeout_s = timeout};
  rt_comm *c = rt_comm_open(&o, C_err, sizeof C_err);
  if (!c) {
    fprintf(stderr, "%s\n", C_err);
    return 1;
  }
  float x[1024] = {0}, y[1024];
  for (int i = 0; i < 20; i++)
    if (rt_comm_all_reduce(c, -1, RT_REDUCE_SUM, IR_DT_F32, x, y, 1024, C_err, sizeof C_err)) {
      fprintf(stderr, "rank %d: %s\n", rt_comm_rank(c), C_err);
      return 1;
    }
  int rank = rt_comm_rank(c);
  rt_comm_close(c);
  printf("rank %d: no fault happened\n", rank);
  return 0;
}

/* Ranks disagree on the count: every rank reports the wrong message size. */
static int run_mismatch(void) {
  rt_comm_options o = {.timeout_s = 5};
  rt_comm *c = rt_comm_open(&o, C_err, sizeof C_err);
  if (!c) return 1;
  float x[16] = {0}, y[16];
  int count = rt_comm_rank(c) == 0 ? 8 : 16;
  int rc = rt_comm_all_reduce(c, -1, RT_REDUCE_SUM, IR_DT_F32, x, y, count, C_err, sizeof C_err);
  if (rc) fprintf(stderr, "tgc: rank %d: %s\n", rt_comm_rank(c), C_err);
  rt_comm_close(c);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--fault") == 0) return run_fault(atof(argv[2]));
  if (argc == 2 && strcmp(argv[1], "--mismatch") == 0) return run_mismatch();
  if (rt_comm_under_launcher()) return run_mpi();
  test_local_open();
  test_formulas();
  test_abort();
  return check_done();
}
