/* tests/unit/test_backend.c — a second backend, added by filling the
 * backend struct and nothing else: the executor, the trainer and the plan
 * are unchanged, and what they do is checked through it.
 *
 * The "copy" backend keeps device memory in its own allocations and hands
 * out device pointers that are NOT host addresses (a high bit flipped: any
 * dereference by the runtime would fault). Its run copies the
 * operands to host tensors, runs the CPU backend's kernel
 * (rt_cpu_run_node: the kernel table), and copies the results back,
 * counting the copies. So:
 *  - every example's outputs equal the CPU backend's bit for bit;
 *  - training examples/reverse.tg (K = 1) and examples/mlp.tg (K = 2
 *    micro-batches) on it gives the parameters and losses of the CPU
 *    trainer bit for bit;
 *  - a steady-state training step allocates nothing on the device and
 *    moves, between host and device, exactly the batch (uploads), the lr
 *    and step scalars (2 uploads of 8 bytes) and the logged scalars (loss,
 *    accuracy when counted, and the non-finite count: downloads of 8 bytes).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "testtrain.h"

#define MASK ((uintptr_t)1 << 62) /* non-canonical on x86-64: a fault if dereferenced */
static void *host_of(const void *dev) { return (void *)((uintptr_t)dev ^ MASK); }
static void *dev_of(void *host) { return (void *)((uintptr_t)host ^ MASK); }

static int64_t kernel_copies;

static int cb_alloc(rt_device *d, size_t bytes, void **ptr, char *err, size_t errlen) {
  void *p = NULL;
  if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) {
    snprintf(err, errlen, "copy backend: out of memory");
    return -1;
  }
  *ptr = dev_of(p);
  return 0;
}
static void cb_free(rt_device *d, void *ptr) { free(host_of(ptr)); }
static int cb_upload(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen) {
  memcpy(host_of(dst), src, n);
  return 0;
}
static int cb_download(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen) {
  memcpy(dst, host_of(src), n);
  return 0;
}
static int cb_copy(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen) {
  memmove(host_of(dst), host_of(src), n);
  return 0;
}
static int cb_fill(rt_device *d, void *dst, size_t n, const void *pattern, size_t pb, char *err, size_t errlen) {
  unsigned char *o = host_of(dst);
  for (size_t i = 0; i < n; i++) o[i] = ((const unsigned char *)pattern)[i % pb];
  return 0;
}
static bool cb_supports(const ir_node *n) { return rt_cpu_backend.supports_op(n); }
static bool no_matmul(const ir_node *n) { return n->op != IR_OP_MATMUL && cb_supports(n); }

/* Host copies of the operands and results (results carry what the device
 * holds: zeros for accumulating ops), the CPU kernel, the results back. */
static int64_t cb_runs; /* kernel actions run */

static int cb_run(rt_device *d, void *state, const rt_action *a, char *err, size_t errlen) {
  const ir_node *n = a->node;
  cb_runs++;
  const rt_tensor *const *in = a->in;
  rt_tensor *const *out = a->out;
  rt_tensor **hin = calloc((size_t)n->n_in + 1, sizeof *hin), **hout = calloc((size_t)n->n_out + 1, sizeof *hout);
  int rc = 0;
  for (int i = 0; i < n->n_in && rc == 0; i++) {
    hin[i] = rt_tensor_new(&in[i]->type);
    memcpy(hin[i]->data, host_of(in[i]->data), in[i]->nbytes);
    kernel_copies++;
  }
  for (int i = 0; i < n->n_out; i++) {
    hout[i] = rt_tensor_new(&out[i]->type);
    memcpy(hout[i]->data, host_of(out[i]->data), out[i]->nbytes);
  }
  rc = rt_cpu_run_node(n, (const rt_tensor *const *)hin, hout, err, errlen);
  for (int i = 0; i < n->n_out && rc == 0; i++) {
    memcpy(host_of(out[i]->data), hout[i]->data, out[i]->nbytes);
    kernel_copies++;
  }
  for (int i = 0; i < n->n_in; i++) rt_tensor_free(hin[i]);
  for (int i = 0; i < n->n_out; i++) rt_tensor_free(hout[i]);
  free(hin);
  free(hout);
  return rc;
}

static const rt_backend copy_backend = {
    .name = "copy",
    .host_memory = false,
    .alloc = cb_alloc,
    .free = cb_free,
    .upload = cb_upload,
    .download = cb_download,
    .copy = cb_copy,
    .fill = cb_fill,
    .supports_op = cb_supports,
    .run = cb_run,
};

/* Every output of running example `path` (config, forward) on both backends. */
static void check_example(const char *path, const char *config) {
  ir_diag *d = ir_diag_new(stderr);
  size_t len;
  char *text = ir_read_file(path, 1 << 20, &len, d);
  fe_options fo = {.config = config};
  ir_graph *g = text ? fe_compile(path, text, len, &fo, d) : NULL;
  CHECK(g != NULL);
  pass_options po = {.diag = d};
  if (g) CHECK_EQ_INT(pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &po), 0);
  rt_tensor **in = calloc((size_t)(g ? g->n_inputs : 0) + 1, sizeof *in);
  rt_tensor **par = calloc((size_t)(g ? g->n_params : 0) + 1, sizeof *par);
  rt_tensor **o1 = calloc((size_t)(g ? g->n_outputs : 0) + 1, sizeof *o1), **o2 = calloc((size_t)(g ? g->n_outputs : 0) + 1, sizeof *o2);
  for (int i = 0; g && i < g->n_inputs; i++) {
    in[i] = rt_tensor_new(&g->inputs[i]->type);
    rt_fill_random(in[i], 5, g->inputs[i]->name, 8);
  }
  for (int i = 0; g && i < g->n_params; i++) {
    par[i] = rt_tensor_new(&g->params[i]->type);
    rt_init_param(par[i], g->params[i], 5);
  }
  char err[512];
  if (g) {
    int64_t before = kernel_copies, runs = cb_runs;
    CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, in, par, o1, NULL, err, sizeof err), 0);
    rt_profile prof = {0};
    rt_stats st = {.profile = &prof};
    int rc = rt_run(&copy_backend, g, in, par, o2, &st, err, sizeof err);
    if (rc) fprintf(stderr, "copy backend: %s\n", err);
    CHECK_EQ_INT(rc, 0);
    CHECK(kernel_copies > before);
    /* the program: one backend run per kernel action; its fill actions are
     * the cost model's (count and bytes) */
    CHECK_EQ_INT(cb_runs - runs, st.kernels_run);
    pass_graph_cost gc;
    pass_graph_cost_of(g, &gc);
    CHECK_EQ_INT(prof.fills, gc.fills);
    CHECK(prof.fill_bytes == gc.fill_bytes);
    int same = 0;
    for (int i = 0; rc == 0 && i < g->n_outputs; i++) same += memcmp(o1[i]->data, o2[i]->data, o1[i]->nbytes) == 0;
    CHECK_EQ_INT(same, rc == 0 ? g->n_outputs : 0);
    printf("copy backend: %-28s %d outputs, the same bits as the cpu; %lld kernel actions, %lld fills (%.0f bytes)\n",
           path, g->n_outputs, (long long)(cb_runs - runs), (long long)prof.fills, prof.fill_bytes);
    for (int i = 0; i < g->n_inputs; i++) rt_tensor_free(in[i]);
    for (int i = 0; i < g->n_params; i++) rt_tensor_free(par[i]);
    for (int i = 0; i < g->n_outputs; i++) rt_tensor_free(o1[i]), rt_tensor_free(o2[i]);
  }
  free(in), free(par), free(o1), free(o2);
  ir_graph_free(g);
  free(text);
  ir_diag_free(d);
}

/* The same training on both backends; the transfers of the steady state. */
static void check_training(const char *path, const char *config, const char *data, int micro, int steps) {
  session s[2];
  setup c = {.path = path, .config = config, .data = data, .opt = pass_optimizer_defaults(PASS_OPT_ADAM),
             .sched = {.kind = RT_SCHEDULE_COSINE, .lr = 0.003, .warmup = 2, .total = steps, .floor = 0.1},
             .micro = micro, .seed = 3};
  c.opt.clip_norm = 1.0;
  double loss[2][16];
  for (int b = 0; b < 2; b++) {
    c.backend = b ? &copy_backend : NULL;
    int rc = session_open(&s[b], &c);
    CHECK_EQ_INT(rc, 0);
    if (rc) return;
    char err[1024];
    rt_device *dev = rt_trainer_device(s[b].tr);
    for (int k = 0; k < steps; k++) {
      rt_device_stats before = dev->stats;
      rt_step_result r;
      CHECK_EQ_INT(rt_trainer_step(s[b].tr, &r, err, sizeof err), 0);
      loss[b][k] = r.loss;
      if (b == 1 && k > 0) { /* the steady state, on a device that is not host memory */
        const pass_training *pt = s[b].prog;
        size_t batch = 0;
        for (int i = 0; i < pt->n_data; i++) batch += ir_type_numel(&pt->step->inputs[i]->type) *
                                                      ir_dtype_size(pt->step->inputs[i]->type.dtype);
        int64_t downs = 2 + pt->accuracy; /* loss, nonfinite, accuracy */
        CHECK_EQ_INT(dev->stats.allocs - before.allocs, 0);
        CHECK_EQ_INT(dev->stats.uploads - before.uploads, (int64_t)pt->n_data * micro + 2);
        CHECK_EQ_INT(dev->stats.bytes_uploaded - before.bytes_uploaded, (int64_t)batch * micro + 16);
        CHECK_EQ_INT(dev->stats.downloads - before.downloads, downs);
        CHECK_EQ_INT(dev->stats.bytes_downloaded - before.bytes_downloaded, 8 * downs);
      }
    }
  }
  int differ = 0;
  for (int k = 0; k < steps; k++) differ += memcmp(&loss[0][k], &loss[1][k], sizeof(double)) != 0;
  for (int i = 0; i < rt_trainer_num_params(s[0].tr); i++) {
    const rt_tensor *a = rt_trainer_param(s[0].tr, i), *bdev = rt_trainer_param(s[1].tr, i);
    rt_tensor *bh = rt_tensor_new(&bdev->type);
    char err[256];
    CHECK_EQ_INT(rt_download(bh->data, bdev, err, sizeof err), 0);
    differ += memcmp(a->data, bh->data, a->nbytes) != 0;
    rt_tensor_free(bh);
  }
  CHECK_EQ_INT(differ, 0);
  printf("copy backend: training %s (K = %d) for %d steps: losses and parameters equal the cpu's\n", path, micro,
         steps);
  session_close(&s[0]);
  session_close(&s[1]);
}

int main(void) {
  check_example("examples/straight_line.tg", NULL);
  check_example("examples/mlp.tg", NULL);
  check_example("examples/transformer_block.tg", NULL);
  check_example("examples/gpt.tg", "tiny");
  check_training("examples/reverse.tg", NULL, "reverse", 1, 4);
  check_training("examples/mlp.tg", NULL, "xor", 2, 5);
  /* no kernel: a clear error before anything runs, naming the backend and the node */
  rt_backend partial = copy_backend;
  partial.name = "partial";
  partial.supports_op = no_matmul;
  ir_diag *d = ir_diag_new(stderr);
  const char *src = "fn f(a: f32[2, 3], b: f32[3, 4]) -> f32[2, 4] {\n  return a @ b\n}\n";
  ir_graph *g = fe_compile("mm.tg", src, strlen(src), &(fe_options){0}, d);
  rt_tensor *in[2] = {NULL, NULL}, *out[1] = {NULL};
  ir_type ta = {IR_DT_F32, 2, {2, 3}}, tb = {IR_DT_F32, 2, {3, 4}};
  in[0] = rt_tensor_new(&ta), in[1] = rt_tensor_new(&tb);
  char err[256];
  CHECK_EQ_INT(rt_run(&partial, g, in, NULL, out, NULL, err, sizeof err), -1);
  CHECK_STR(err, "mm.tg:2:10: the partial backend has no kernel for 'matmul'");
  rt_tensor_free(in[0]), rt_tensor_free(in[1]);
  ir_graph_free(g);
  ir_diag_free(d);
  return check_done();
}
