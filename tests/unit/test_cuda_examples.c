/* tests/unit/test_cuda_examples.c — cuda-emu equals cpu on every example:
 * the generated CUDA C (compiled by the emulator's host compiler), the
 * cuBLASLt products (the emulator's, under cuBLAS's column-major contract)
 * and the backend's plumbing, against the CPU backend's kernels.
 *
 *   - every op of ir/ops.def but GRAD has an emitter (cg_op_lowers);
 *   - `run`: every output of every example (straight_line, hw1_q4, mlp,
 *     transformer_block, reverse, gpt --config tiny, llama --config tiny)
 *     within 1e-5 relative of the CPU's (compare_tensors in testgpu.h:
 *     relative to the tensor's largest magnitude);
 *   - `grad`: the training graph of every example with parameters and a
 *     scalar loss (loss and every parameter's gradient) within 1e-5 the
 *     same way (tests/cli/cuda_emu.tg checks `tgc grad` of the others).
 * Where they differ: reductions add in another order (warp butterflies
 * vs. the CPU's index order, both in double), attention accumulates in
 * float in another order, f32 transcendental functions are CUDA's float
 * ones (here libm's float ones) vs. the CPU's double ones. The largest
 * error of each example is printed. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen.h"
#include "testgpu.h"

static const double TOL = 1e-5;

static void test_every_op_lowers(void) {
  int missing = 0;
  for (int op = 0; op < IR_NUM_OPS; op++) {
    if (op == IR_OP_GRAD) {
      CHECK(!cg_op_lowers((ir_op)op)); /* expanded by autodiff before anything runs */
      continue;
    }
    if (!cg_op_lowers((ir_op)op)) {
      fprintf(stderr, "no emitter for %s\n", ir_op_name((ir_op)op));
      missing++;
    }
  }
  CHECK_EQ_INT(missing, 0);
}

/* cuda-emu, or the real cuda backend when TGC_TEST_BACKEND=cuda (on a GPU). */
static const rt_backend *device_backend = &rt_cuda_emu_backend;

static void check_example(const char *path, const char *config, bool training, int64_t int_high) {
  gmodel m;
  int rc = gmodel_load(&m, path, config, training, 7, int_high);
  CHECK_EQ_INT(rc, 0);
  if (rc == 0) {
    double worst = 0;
    int64_t bad = compare_backends(&m, &rt_cpu_backend, device_backend, TOL, &worst, NULL);
    CHECK_EQ_INT(bad, 0);
    printf("%s vs cpu: %-30s %-5s %-5s %2d outputs, largest relative error %.3g\n",
           device_backend == &rt_cuda_backend ? "cuda" : "cuda-emu", path, config ? config : "",
           training ? "grad" : "run", m.g->n_outputs, worst);
  }
  gmodel_free(&m);
}

int main(void) {
  const char *which = getenv("TGC_TEST_BACKEND");
  if (which && strcmp(which, "cuda") == 0) device_backend = &rt_cuda_backend;
  test_every_op_lowers();
  static const struct {
    const char *path, *config;
    int64_t int_high; /* ids and targets below it */
    bool params;
  } examples[] = {
      {"examples/straight_line.tg", NULL, 10, false},
      {"examples/hw1_q4.tg", NULL, 10, false},
      {"examples/mlp.tg", NULL, 2, true},
      {"examples/transformer_block.tg", NULL, 10, false}, /* no scalar loss to train */
      {"examples/reverse.tg", NULL, 32, true},
      {"examples/gpt.tg", "tiny", 16, true},
      {"examples/llama.tg", "tiny", 16, true},
  };
  for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) {
    check_example(examples[i].path, examples[i].config, false, examples[i].int_high);
    if (examples[i].params) check_example(examples[i].path, examples[i].config, true, examples[i].int_high);
  }
  return check_done();
}
