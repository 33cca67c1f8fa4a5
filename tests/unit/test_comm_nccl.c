/* tests/unit/test_comm_nccl.c — the nccl implementation of runtime/comm,
 * through cuda-emu's NCCL emulation (no GPU), and the real libnccl.so.2's
 * entry points where it is installed.
 *
 * Alone (plain CTest): the loader finds the real NCCL and resolves every
 * NCCL entry, or says exactly what it searched; the emulated entries'
 * errors (their detail lines); the nccl implementation over a local
 * bootstrap (world size 1): every collective on device buffers, copies
 * counted as 0 bytes.
 *
 * Under mpirun (CTest: 2 and 4 ranks): the same sweep as test_comm's
 * (testcomm.h) on device buffers, over the NCCL emulation: results bit for
 * bit, counters equal to the closed forms, and the bytes the emulation
 * really moved (rt_cuda_emu_counters) equal to what the nccl implementation
 * counted by formula; send-first point-to-point on device buffers. */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "rt_cuda.h"
#include "runtime.h"
#include "testcomm.h"

static cg_cuda_api E;   /* the emulator's table */
static rt_cuda_device E_dev;
static char E_err[1024];

static void *dev_alloc(size_t bytes) {
  cg_cu_deviceptr p = 0;
  if (CG_CU(&E, NULL, E_err, sizeof E_err, cuMemAlloc, &p, bytes ? bytes : 1)) {
    fprintf(stderr, "%s\n", E_err);
    exit(1);
  }
  return (void *)(uintptr_t)p;
}
static void dev_free(void *p) { E.cuMemFree((cg_cu_deviceptr)(uintptr_t)p); }
static void dev_put(void *dst, const void *src, size_t n) {
  if (n) CHECK(CG_CU(&E, NULL, E_err, sizeof E_err, cuMemcpyHtoD, (cg_cu_deviceptr)(uintptr_t)dst, src, n) == 0);
}
static void dev_get(void *dst, const void *src, size_t n) {
  if (n) CHECK(CG_CU(&E, NULL, E_err, sizeof E_err, cuMemcpyDtoH, dst, (cg_cu_deviceptr)(uintptr_t)src, n) == 0);
}
static const t_mem dev_mem = {dev_alloc, dev_free, dev_put, dev_get};

static void emu_moved(int64_t *sent, int64_t *received) {
  rt_cuda_emu_counters k = rt_cuda_emu_counters_get();
  *sent = k.nccl_bytes_sent;
  *received = k.nccl_bytes_received;
}

static void emu_open(void) {
  rt_cuda_emu_config cfg;
  if (rt_cuda_emu_config_init(&cfg, E_err, sizeof E_err) != 0) {
    fprintf(stderr, "%s\n", E_err);
    exit(1);
  }
  cfg.device_bytes = (size_t)1 << 30;
  if (rt_cuda_emu_load(&E, &cfg, E_err, sizeof E_err) || rt_cuda_open_device(&E, 0, &E_dev, E_err, sizeof E_err)) {
    fprintf(stderr, "cannot open the emulator: %s\n", E_err);
    exit(1);
  }
}

static void emu_close(void) {
  rt_cuda_close_device(&E, &E_dev);
  rt_cuda_emu_shutdown();
}

/* The real library: loaded and complete, or the loader's exact message. */
static void test_real_nccl(void) {
  char dir[] = "/tmp/tgc_nccl_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  setenv("TGC_CUDA_LIB_PATH", dir, 1);
  cg_cuda_api api;
  memset(&api, 0, sizeof api);
  CHECK_EQ_INT(rt_cuda_load(&api, CG_CUDA_LIB_NCCL, E_err, sizeof E_err), -1);
  char want[256];
  snprintf(want, sizeof want, "no NCCL: libnccl.so not found (searched %s)", dir);
  CHECK_STR(E_err, want);
  unsetenv("TGC_CUDA_LIB_PATH");
  rmdir(dir);
  memset(&api, 0, sizeof api);
  if (rt_cuda_load(&api, CG_CUDA_LIB_NCCL, E_err, sizeof E_err) != 0) {
    printf("no real NCCL here (%s): its entry points are not checked\n", E_err);
    return;
  }
  CHECK(api.libs & CG_CUDA_LIB_NCCL);
  int entries = 0, filled = 0;
#define CG_CUDA_FN(lib, name, symbol, fallback, ret, params) \
  if (CG_CUDA_LIB_##lib == CG_CUDA_LIB_NCCL) entries++, filled += api.name != NULL;
#include "cuda_api.def"
#undef CG_CUDA_FN
  CHECK_EQ_INT(filled, entries);
  CHECK_EQ_INT(entries, 13);
  int version = 0;
  CHECK_EQ_INT(api.ncclGetVersion(&version), CG_ncclSuccess);
  CHECK(version >= 21000);
  CHECK_STR(api.ncclGetErrorString(CG_ncclInvalidArgument), "invalid argument (run with NCCL_DEBUG=WARN for details)");
  printf("real NCCL %d.%d.%d: %d entry points resolved\n", version / 10000, version / 100 % 100, version % 100, filled);
  /* a table with NCCL but no driver is refused by the nccl implementation */
  rt_comm_options o = {.impl = "nccl", .cuda = &api};
  CHECK(rt_comm_open(&o, C_err, sizeof C_err) == NULL);
  CHECK_STR(C_err, "the nccl implementation needs a CUDA table with NCCL loaded (rt_cuda_load with "
                   "CG_CUDA_LIB_NCCL, or the cuda-emu backend)");
  rt_cuda_unload(&api);
}

#define DETAIL() (E.emu_detail ? E.emu_detail() : "")

/* The emulated entries' own checks. */
static void test_emulated_entries(void) {
  int version = 0;
  CHECK_EQ_INT(E.ncclGetVersion(&version), CG_ncclSuccess);
  CHECK_EQ_INT(version, 22809);
  CHECK_STR(E.ncclGetErrorString(CG_ncclInvalidUsage), "invalid usage (run with NCCL_DEBUG=WARN for details)");
  cg_nccl_unique_id id;
  memset(&id, 0, sizeof id);
  cg_nccl_comm comm = NULL;
  CHECK_EQ_INT(E.ncclCommInitRank(&comm, 1, id, 0), CG_ncclInvalidArgument);
  CHECK_STR(DETAIL(), "ncclCommInitRank: not a unique id of the emulation (ncclGetUniqueId)");
  CHECK_EQ_INT(E.ncclGetUniqueId(&id), CG_ncclSuccess);
  CHECK_EQ_INT(E.ncclCommInitRank(&comm, 2, id, 2), CG_ncclInvalidArgument);
  CHECK_STR(DETAIL(), "ncclCommInitRank: rank 2 of 2 ranks");
  CHECK_EQ_INT(E.ncclCommInitRank(&comm, 2, id, 1), CG_ncclInvalidUsage);
  CHECK_STR(DETAIL(), "the NCCL emulation runs over tgc's MPI communicator: open one (rt_comm_open, mpi or nccl, under "
                      "mpirun) before ncclCommInitRank of 2 ranks");
  CHECK_EQ_INT(E.ncclCommInitRank(&comm, 1, id, 0), CG_ncclSuccess);
  /* a communicator of one: device buffers only, copies */
  float host[4] = {1, 2, 3, 4}, back[4] = {0};
  void *a = dev_alloc(16), *b = dev_alloc(16);
  dev_put(a, host, 16);
  CHECK_EQ_INT(E.ncclAllReduce(host, b, 4, CG_ncclFloat32, CG_ncclSum, comm, NULL), CG_ncclInvalidArgument);
  char want[256];
  snprintf(want, sizeof want, "ncclAllReduce: sendbuff %p (16 bytes) is not in one device allocation", (void *)host);
  CHECK_STR(DETAIL(), want);
  CHECK_EQ_INT(E.ncclAllReduce(a, b, 4, CG_ncclFloat32, 1 /* ncclProd */, comm, NULL), CG_ncclInvalidArgument);
  CHECK_STR(DETAIL(), "ncclAllReduce: reduction 1 is not emulated (sum, max)");
  CHECK_EQ_INT(E.ncclAllReduce(a, b, 4, 10 /* fp8 */, CG_ncclSum, comm, NULL), CG_ncclInvalidArgument);
  CHECK_STR(DETAIL(), "ncclAllReduce: data type 10 with this reduction is not emulated");
  CHECK_EQ_INT(E.ncclAllReduce(a, b, 16, CG_ncclUint8, CG_ncclMax, comm, NULL), CG_ncclInvalidArgument);
  CHECK_STR(DETAIL(), "ncclAllReduce: ncclUint8 max is emulated on 0 and 1 only; element 2 is 128");
  CHECK_EQ_INT(E.ncclSend(a, 4, CG_ncclFloat32, 0, comm, NULL), CG_ncclInvalidUsage);
  CHECK_STR(DETAIL(), "ncclSend to the rank itself is not emulated");
  CHECK_EQ_INT(E.ncclGroupEnd(), CG_ncclInvalidUsage);
  CHECK_STR(DETAIL(), "ncclGroupEnd without ncclGroupStart");
  rt_cuda_emu_counters_reset();
  CHECK_EQ_INT(E.ncclAllReduce(a, b, 4, CG_ncclFloat32, CG_ncclSum, comm, NULL), CG_ncclSuccess);
  dev_get(back, b, 16);
  CHECK(memcmp(back, host, 16) == 0);
  /* in a group nothing happens until the end */
  memset(back, 0, sizeof back);
  dev_put(b, back, 16);
  CHECK_EQ_INT(E.ncclGroupStart(), CG_ncclSuccess);
  CHECK_EQ_INT(E.ncclBroadcast(a, b, 4, CG_ncclFloat32, 0, comm, NULL), CG_ncclSuccess);
  dev_get(back, b, 16);
  CHECK(back[0] == 0);
  CHECK_EQ_INT(E.ncclGroupEnd(), CG_ncclSuccess);
  dev_get(back, b, 16);
  CHECK(memcmp(back, host, 16) == 0);
  rt_cuda_emu_counters k = rt_cuda_emu_counters_get();
  CHECK_EQ_INT(k.nccl_calls, 2);
  CHECK_EQ_INT(k.nccl_bytes_sent, 0);
  CHECK_EQ_INT(E.ncclCommDestroy(comm), CG_ncclSuccess);
  dev_free(a);
  dev_free(b);
}

/* Operations in flight on a non-blocking stream (the emulation's model of
 * a GPU running them late): deferred until something orders later work
 * after them, and any other work on their bytes before that refused. */
static void test_in_flight(void) {
  cg_nccl_unique_id id;
  cg_nccl_comm comm = NULL;
  CHECK_EQ_INT(E.ncclGetUniqueId(&id), CG_ncclSuccess);
  CHECK_EQ_INT(E.ncclCommInitRank(&comm, 1, id, 0), CG_ncclSuccess);
  cg_cu_stream s = NULL, blocking = NULL;
  cg_cu_event e = NULL;
  CHECK_EQ_INT(E.cuStreamCreate(&s, CG_CU_STREAM_NON_BLOCKING), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(E.cuStreamCreate(&blocking, CG_CU_STREAM_DEFAULT), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(E.cuEventCreate(&e, CG_CU_EVENT_DISABLE_TIMING), CG_CUDA_SUCCESS);
  float host[4] = {1, 2, 3, 4}, zero[4] = {0}, back[4] = {0};
  char *a = dev_alloc(16), *b = dev_alloc(16);
  dev_put(a, host, 16);
  dev_put(b, zero, 16);
  /* deferred: the result is not there, and reading it first is refused */
  CHECK_EQ_INT(E.ncclAllReduce(a, b, 4, CG_ncclFloat32, CG_ncclSum, comm, s), CG_ncclSuccess);
  CHECK_EQ_INT(E.cuMemcpyDtoH(back, (cg_cu_deviceptr)(uintptr_t)b, 16), CG_CUDA_ERROR_ILLEGAL_STATE);
  char want[512];
  snprintf(want, sizeof want, "cuMemcpyDtoHAsync touches [0x%llx, +16) while ncclAllReduce on stream %p may still "
           "write [0x%llx, 0x%llx): nothing orders it after that operation (cuStreamWaitEvent on an event recorded after "
           "it)", (unsigned long long)(uintptr_t)b, (void *)s, (unsigned long long)(uintptr_t)b,
           (unsigned long long)(uintptr_t)b + 16);
  CHECK_STR(DETAIL(), want);
  /* writing its operand: a memset on the legacy stream, a copy on a blocking stream (part of it) */
  CHECK_EQ_INT(E.cuMemsetD8((cg_cu_deviceptr)(uintptr_t)a, 0, 16), CG_CUDA_ERROR_ILLEGAL_STATE);
  CHECK(strstr(DETAIL(), "may still read") != NULL);
  CHECK_EQ_INT(E.cuMemcpyHtoDAsync((cg_cu_deviceptr)(uintptr_t)(a + 8), zero, 4, blocking), CG_CUDA_ERROR_ILLEGAL_STATE);
  /* an event recorded after it, waited on by the legacy stream: it has run, its bytes are free */
  CHECK_EQ_INT(E.cuEventRecord(e, s), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(E.cuStreamWaitEvent(NULL, e, 1), CG_CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(E.cuStreamWaitEvent(NULL, e, 0), CG_CUDA_SUCCESS);
  dev_get(back, b, 16);
  CHECK(memcmp(back, host, 16) == 0);
  /* an event recorded before an operation does not order after it */
  dev_put(b, zero, 16);
  CHECK_EQ_INT(E.cuEventRecord(e, s), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(E.ncclAllReduce(a, b, 4, CG_ncclFloat32, CG_ncclSum, comm, s), CG_ncclSuccess);
  CHECK_EQ_INT(E.cuStreamWaitEvent(blocking, e, 0), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(E.cuMemcpyDtoHAsync(back, (cg_cu_deviceptr)(uintptr_t)b, 16, blocking), CG_CUDA_ERROR_ILLEGAL_STATE);
  /* work on its own stream comes after it */
  memset(back, 0, sizeof back);
  CHECK_EQ_INT(E.cuMemcpyDtoHAsync(back, (cg_cu_deviceptr)(uintptr_t)b, 16, s), CG_CUDA_SUCCESS);
  CHECK(memcmp(back, host, 16) == 0);
  /* a group is deferred whole, and cuStreamSynchronize runs it */
  dev_put(b, zero, 16);
  CHECK_EQ_INT(E.ncclGroupStart(), CG_ncclSuccess);
  CHECK_EQ_INT(E.ncclAllReduce(a, b, 2, CG_ncclFloat32, CG_ncclSum, comm, s), CG_ncclSuccess);
  CHECK_EQ_INT(E.ncclAllReduce(a + 8, b + 8, 2, CG_ncclFloat32, CG_ncclSum, comm, s), CG_ncclSuccess);
  CHECK_EQ_INT(E.ncclGroupEnd(), CG_ncclSuccess);
  CHECK_EQ_INT(E.cuMemsetD8((cg_cu_deviceptr)(uintptr_t)(b + 12), 0, 4), CG_CUDA_ERROR_ILLEGAL_STATE);
  CHECK_EQ_INT(E.cuStreamSynchronize(s), CG_CUDA_SUCCESS);
  dev_get(back, b, 16);
  CHECK(memcmp(back, host, 16) == 0);
  /* bytes it does not use are free meanwhile; cuCtxSynchronize runs everything */
  CHECK_EQ_INT(E.ncclAllReduce(a, b, 2, CG_ncclFloat32, CG_ncclSum, comm, s), CG_ncclSuccess);
  CHECK_EQ_INT(E.cuMemsetD8((cg_cu_deviceptr)(uintptr_t)(b + 8), 0, 8), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(E.cuCtxSynchronize(), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(E.cuMemsetD8((cg_cu_deviceptr)(uintptr_t)a, 0, 16), CG_CUDA_SUCCESS);
  /* on a blocking stream an operation completes in its call, as before */
  dev_put(a, host, 16);
  CHECK_EQ_INT(E.ncclAllReduce(a, b, 4, CG_ncclFloat32, CG_ncclSum, comm, blocking), CG_ncclSuccess);
  dev_get(back, b, 16);
  CHECK(memcmp(back, host, 16) == 0);
  CHECK_EQ_INT(E.cuEventDestroy(e), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(E.cuStreamDestroy(s), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(E.cuStreamDestroy(blocking), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(E.ncclCommDestroy(comm), CG_ncclSuccess);
  dev_free(a);
  dev_free(b);
}

/* Every rank sends to both neighbours first, then receives: device buffers. */
static void test_send_first(rt_comm *c) {
  int n = rt_comm_size(c), me = rt_comm_rank(c);
  enum { COUNT = 1 << 16 };
  float *host = malloc(COUNT * sizeof *host);
  void *d = dev_alloc(COUNT * sizeof *host);
  for (int dir = -1; dir <= 1; dir += 2) {
    for (int i = 0; i < COUNT; i++) host[i] = (float)(me * 10 + (dir > 0)) + (float)i;
    dev_put(d, host, COUNT * sizeof *host);
    CHECK_EQ_INT(rt_comm_send(c, -1, ((me + dir) % n + n) % n, IR_DT_F32, d, COUNT, C_err, sizeof C_err), 0);
  }
  int bad = 0;
  for (int dir = -1; dir <= 1; dir += 2) {
    int from = ((me - dir) % n + n) % n;
    CHECK_EQ_INT(rt_comm_recv(c, -1, from, IR_DT_F32, d, COUNT, C_err, sizeof C_err), 0);
    dev_get(host, d, COUNT * sizeof *host);
    for (int i = 0; i < COUNT; i += 101) bad += host[i] != (float)(from * 10 + (dir > 0)) + (float)i;
  }
  CHECK_EQ_INT(bad, 0);
  dev_free(d);
  free(host);
}

static int run(bool launched) {
  rt_comm_options o = {.impl = "nccl", .cuda = &E, .timeout_s = 60};
  rt_comm *c = rt_comm_open(&o, C_err, sizeof C_err);
  if (!c) {
    fprintf(stderr, "%s\n", C_err);
    return 1;
  }
  CHECK_STR(rt_comm_impl(c), "nccl");
  int n = rt_comm_size(c);
  CHECK_EQ_INT(n > 1, launched);
  t_sweep s = {.c = c, .mem = &dev_mem, .moved = emu_moved};
  t_set_mesh(&s, 0, NULL);
  t_sweep_axis(&s, -1, 20011);
  int sizes[2] = {2, n / 2};
  if (n >= 4 && n % 2 == 0 && !t_set_mesh(&s, 2, sizes)) {
    t_sweep_axis(&s, 0, 1001);
    t_sweep_axis(&s, 1, 1001);
  }
  if (n == 1) {
    int ones[2] = {1, 1};
    if (!t_set_mesh(&s, 2, ones)) t_sweep_axis(&s, 1, 1001);
  }
  CHECK_EQ_INT(s.mismatches, 0);
  if (n > 1) {
    t_set_mesh(&s, 0, NULL);
    test_send_first(c);
  }
  CHECK_EQ_INT(rt_comm_barrier(c, C_err, sizeof C_err), 0);
  if (rt_comm_rank(c) == 0) printf("%lld collectives checked over nccl (emulated) on %d ranks\n", (long long)s.calls, n);
  rt_comm_close(c);
  return 0;
}

/* The executor's batches (runtime/collective.c) on a cuda-emu device over
 * NCCL with overlap: %b all-reduces %a, the all-reduce right before it, in
 * place on %a's bytes. NCCL promises no order among a group's operations
 * (the emulation runs a deferred group last to first), so %b must go in a
 * batch after %a's: d = b + c = 2 x 3 + 3 = 9 on 2 ranks holding 1 and 2.
 * And overlap itself: 2 batches (a; b with c, which is apart), the output
 * read after the program's end joined them; the same at each of 3 runs
 * (the second and third through CUDA graphs). */
static const char *dep_ir =
    "tgc.ir 1\n"
    "graph @dep\n"
    "  mesh dp = 2\n"
    "  input %x : f32[64] loc 1:1\n"
    "  %a = all_reduce %x {axis = \"dp\", n = 2} : f32[64] loc 2:1\n"
    "  %b = all_reduce %a {axis = \"dp\", n = 2} : f32[64] loc 3:1\n"
    "  %c = all_reduce %x {axis = \"dp\", n = 2} : f32[64] loc 4:1\n"
    "  %d = add %b, %c : f32[64] loc 5:1\n"
    "  output \"d\" = %d\n"
    "end\n";

static void test_executor_batches(rt_comm *world) {
  char err[1024] = "";
  if (!world || rt_comm_size(world) != 2) return;
  rt_device *dev = rt_device_open_with(&rt_cuda_emu_backend, &(rt_device_options){0}, err, sizeof err);
  const struct cg_cuda_api *api = NULL;
  CHECK(dev && dev->backend->comm_table(dev, &api, err, sizeof err) == 0);
  rt_comm *c = rt_comm_open(&(rt_comm_options){.impl = "nccl", .cuda = api, .timeout_s = 60}, err, sizeof err);
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *g = ir_parse("dep.ir", dep_ir, strlen(dep_ir), d);
  CHECK(c && g && ir_verify(g, d) == 0 && rt_comm_overlaps(c));
  CHECK_EQ_INT(rt_mesh_bind(c, &g->mesh, NULL, err, sizeof err), 0);
  rt_program *p = rt_program_new(dev, g, &(rt_program_options){.comm = c}, err, sizeof err);
  if (!p) fprintf(stderr, "%s\n", err);
  CHECK(p != NULL);
  float x[64], out[64];
  for (int i = 0; i < 64; i++) x[i] = (float)(rt_comm_rank(c) + 1);
  rt_tensor *in = rt_device_tensor_new(dev, &g->inputs[0]->type, err, sizeof err);
  CHECK(in && rt_upload(in, x, err, sizeof err) == 0);
  for (int run = 0; p && in && run < 3; run++) { /* graphs from the second run on */
    rt_comm_reset_counts(c);
    if (rt_program_run(p, &in, NULL, err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
    CHECK_EQ_INT(rt_download(out, rt_program_output(p, 0), err, sizeof err), 0);
    int bad = 0;
    for (int i = 0; i < 64; i++) bad += out[i] != 9.0f;
    CHECK_EQ_INT(bad, 0);
    rt_comm_overlap_count ov = rt_comm_overlap(c);
    CHECK_EQ_INT(ov.batches, 2);
    CHECK_EQ_INT(ov.collectives, 3);
  }
  rt_device_tensor_free(in);
  rt_program_free(p);
  ir_graph_free(g);
  ir_diag_free(d);
  rt_comm_close(c);
  rt_device_close(dev);
}

/* NCCL's buffer rule (rt_nccl_buffers_legal): apart, or in place as NCCL
 * documents it; the memory plan never gives a collective overlapping
 * buffers (comm ops are not IR_OPF_INPLACE), and the nccl implementation
 * refuses any that would be undefined on NCCL. */
static void test_buffer_rules(void) {
  static char buf[4096];
  char *b = buf;
  /* all-gather over 4 ranks, 64 bytes a block, rank 2 */
  CHECK(rt_nccl_buffers_legal(IR_COLL_ALL_GATHER, b + 1024, b, 64, 4, 2));       /* apart */
  CHECK(rt_nccl_buffers_legal(IR_COLL_ALL_GATHER, b + 128, b, 64, 4, 2));        /* in place: recv + 2 x 64 */
  CHECK(!rt_nccl_buffers_legal(IR_COLL_ALL_GATHER, b + 64, b, 64, 4, 2));        /* inside recv, not its slot */
  CHECK(!rt_nccl_buffers_legal(IR_COLL_ALL_GATHER, b + 200, b, 64, 4, 2));       /* straddles */
  /* reduce-scatter: recv = send + me x 64 in place */
  CHECK(rt_nccl_buffers_legal(IR_COLL_REDUCE_SCATTER, b, b + 1024, 64, 4, 2));
  CHECK(rt_nccl_buffers_legal(IR_COLL_REDUCE_SCATTER, b, b + 128, 64, 4, 2));
  CHECK(!rt_nccl_buffers_legal(IR_COLL_REDUCE_SCATTER, b, b + 64, 64, 4, 2));
  CHECK(!rt_nccl_buffers_legal(IR_COLL_REDUCE_SCATTER, b, b + 250, 64, 4, 2));
  /* all-reduce: the same pointer or apart */
  CHECK(rt_nccl_buffers_legal(IR_COLL_ALL_REDUCE, b, b, 64, 4, 2));
  CHECK(rt_nccl_buffers_legal(IR_COLL_ALL_REDUCE, b, b + 64, 64, 4, 2));
  CHECK(!rt_nccl_buffers_legal(IR_COLL_ALL_REDUCE, b, b + 32, 64, 4, 2));
  CHECK(rt_nccl_buffers_legal(IR_COLL_ALL_REDUCE, b, b + 32, 0, 4, 2)); /* nothing moves */
}

int main(void) {
  test_buffer_rules();
  bool launched = rt_comm_under_launcher();
  char err[512] = "";
  /* MPI stays initialized from one test's communicators to the next's (closing the last finalizes it) */
  rt_comm *world = launched ? rt_comm_open(&(rt_comm_options){.impl = "mpi", .timeout_s = 60}, err, sizeof err) : NULL;
  CHECK(!launched || world != NULL);
  if (launched) test_executor_batches(world);
  if (!launched) test_real_nccl();
  emu_open();
  if (!launched) test_emulated_entries(), test_in_flight();
  run(launched);
  emu_close();
  rt_comm_close(world);
  return check_done();
}
