/* tests/unit/test_cuda_compile.c — every generated kernel of every example
 * compiles with the real NVRTC and assembles with ptxas for sm_80 and
 * sm_90, with 0 bytes of spills.
 *
 * The graphs: each example's forward graph (the default pipeline); llama
 * tiny with grouped-query attention at head width 64 (2 kv heads for 4
 * query heads: the backward's kernels on the shared kv heads); llama
 * tiny's generation graphs with grouped-query attention (prefill and the
 * decode step over the KV cache, f32 and bf16); and for
 * the examples that train (a scalar loss and parameters) the training
 * program's step graph (forward + backward) and update graph (Adam with
 * clipping); each in f32 and mixed precision bf16 and f16 (f16 with loss
 * scaling). Every graph is planned and lowered as the backend does, and its
 * program compiled for both architectures; every kernel the lowering named
 * must have a ptxas resource line with a register count and no spill
 * stores or loads. The table of kernels per program is printed (largest
 * register count, shared memory). Compiled programs go to the build
 * tree's cache, so a second run compiles nothing.
 *
 * Skipped (exit 77) when libnvrtc cannot be loaded, and in sanitizer
 * builds (NVRTC is not what they check; about two minutes of compiles
 * without the cache). */
#include <stdlib.h>

#include "check.h"
#include "codegen.h"
#include "rt_cuda.h"
#include "testgpu.h"

static cg_cuda_api api;
static cg_cache *cache;
static int programs, kernels_checked;

static void compile_graph(const ir_graph *g, const char *what) {
  pass_plan *plan = pass_memplan(g, NULL);
  char err[4096];
  cg_program *p = plan ? cg_lower(g, plan, NULL, err, sizeof err) : NULL;
  if (!p) fprintf(stderr, "%s: %s\n", what, err);
  CHECK(p != NULL);
  static const char *const archs[2] = {"sm_80", "sm_90"};
  for (int a = 0; p && a < 2 && p->n_kernels > 0; a++) {
    cg_cuda_source src = {"program.cu", p->source, archs[a], NULL, 0};
    cg_cuda_binary bin;
    int rc = cg_nvrtc_compile(&api, cache, &src, &bin, err, sizeof err);
    if (rc) fprintf(stderr, "%s for %s: %s\n", what, archs[a], err);
    CHECK_EQ_INT(rc, 0);
    if (rc) continue;
    programs++;
    int missing = 0, spilling = 0, max_regs = 0;
    long long max_smem = 0;
    for (int k = 0; k < p->n_kernels; k++) {
      const cg_kernel_info *ki = cg_cuda_binary_kernel(&bin, p->kernels[k].name);
      if (!ki || ki->registers <= 0) {
        if (missing++ < 3) fprintf(stderr, "%s for %s: no ptxas line for %s\n", what, archs[a], p->kernels[k].name);
        continue;
      }
      if (ki->spill_store_bytes != 0 || ki->spill_load_bytes != 0) {
        fprintf(stderr, "%s for %s: %s spills %lld + %lld bytes\n", what, archs[a], ki->name, ki->spill_store_bytes,
                ki->spill_load_bytes);
        spilling++;
      }
      if (ki->registers > max_regs) max_regs = ki->registers;
      if (ki->smem_bytes > max_smem) max_smem = ki->smem_bytes;
      kernels_checked++;
    }
    CHECK_EQ_INT(missing, 0);
    CHECK_EQ_INT(spilling, 0);
    printf("  %-44s %s %4d kernels, at most %3d registers, %6lld bytes of shared memory, 0 spills%s\n", what, archs[a],
           p->n_kernels, max_regs, max_smem, bin.cached ? " (cached)" : "");
    cg_cuda_binary_free(&bin);
  }
  cg_program_free(p);
  pass_plan_free(plan);
}

/* The forward graph and (trains) the training program's graphs of path in
 * dtype dt (0: the model's), with n_defs -D overrides (label: how `what`
 * names them). */
static void compile_example(const char *path, const char *config, const fe_define *defs, int n_defs,
                            const char *label, bool trains, int dt) {
  char what[256];
  const char *dn = dt ? ir_dtype_name((ir_dtype)dt) : "f32";
  ir_diag *d = ir_diag_new(stderr);
  size_t len;
  char *text = ir_read_file(path, 1 << 22, &len, d);
  fe_options fo = {.config = config, .defines = defs, .n_defines = n_defs};
  if (label) config = label;
  ir_graph *g = text ? fe_compile(path, text, len, &fo, d) : NULL;
  CHECK(g != NULL);
  pass_options po = {.diag = d};
  if (g && dt) CHECK_EQ_INT(pass_mixed_precision(g, (ir_dtype)dt, d), 0);
  if (g && pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &po) == 0) {
    snprintf(what, sizeof what, "%s %s forward %s", path, config ? config : "", dn);
    compile_graph(g, what);
  }
  ir_graph_free(g);
  if (trains && text) {
    g = fe_compile(path, text, len, &fo, d);
    pass_train_options to = {.opt = pass_optimizer_defaults(PASS_OPT_ADAM), .micro_batches = 1, .targets_input = -1,
                             .passes = &po, .mixed_precision = dt != 0, .compute_dtype = (ir_dtype)dt,
                             .loss_scaling = dt == IR_DT_F16};
    to.opt.clip_norm = 1.0;
    pass_training *t = g ? pass_build_train(g, &to) : NULL;
    CHECK(t != NULL);
    if (t) {
      snprintf(what, sizeof what, "%s %s step %s", path, config ? config : "", dn);
      compile_graph(t->step, what);
      snprintf(what, sizeof what, "%s %s update %s", path, config ? config : "", dn);
      compile_graph(t->update, what);
    }
    pass_training_free(t);
  }
  free(text);
  ir_diag_free(d);
}

/* Generation's graphs (passes/kv_cache.c) of llama tiny with grouped-query
 * attention (2 kv heads for 4 query heads): the prefill (the fused
 * attention reading the kv heads in place) and the decode step (the
 * attention over the cache with its qpos operand, the cache row written by
 * a fused where), in dtype dt (0: f32). */
static void compile_generation(int dt) {
  const char *path = "examples/llama.tg", *dn = dt ? ir_dtype_name((ir_dtype)dt) : "f32";
  ir_diag *d = ir_diag_new(stderr);
  size_t len;
  char *text = ir_read_file(path, 1 << 22, &len, d);
  for (int decode = 0; decode < 2 && text; decode++) {
    fe_define defs[3] = {{"nKV", "2"}, {"B", "1"}, {"T", "1"}};
    fe_options fo = {.config = "tiny", .defines = defs, .n_defines = decode ? 3 : 2};
    ir_graph *g = fe_compile(path, text, len, &fo, d);
    CHECK(g != NULL);
    pass_options po = {.diag = d};
    static const pass_id front[2] = {PASS_CANONICALIZE, PASS_FUSE_ATTENTION};
    int n_layers = 0, pos = -1;
    if (g && dt) CHECK_EQ_INT(pass_mixed_precision(g, (ir_dtype)dt, d), 0);
    if (g) CHECK_EQ_INT(pass_run_pipeline(g, front, 2, &po), 0);
    if (g) CHECK_EQ_INT(decode ? pass_kv_decode(g, 16, &n_layers, &pos, d) : pass_kv_prefill(g, &n_layers, d), 0);
    if (g && pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &po) == 0) {
      char what[128];
      snprintf(what, sizeof what, "%s tiny nKV=2 %s %s", path, decode ? "decode" : "prefill", dn);
      compile_graph(g, what);
    }
    ir_graph_free(g);
  }
  free(text);
  ir_diag_free(d);
}

int main(void) {
  char err[1024];
#if defined(__SANITIZE_ADDRESS__)
  /* NVRTC's compiles are the same in every build, and minutes long: the
   * normal build's run is the check (the lowering runs sanitized in every
   * other cuda test) */
  printf("skipped in sanitizer builds\n");
  return 77;
#endif
  if (rt_cuda_load(&api, CG_CUDA_LIB_NVRTC, err, sizeof err) != 0) {
    printf("skipped: %s\n", err);
    return 77;
  }
  cache = cg_cache_open(NULL, err, sizeof err);
  static const struct {
    const char *path, *config;
    bool trains;
  } examples[] = {
      {"examples/straight_line.tg", NULL, false}, {"examples/hw1_q4.tg", NULL, false},
      {"examples/mlp.tg", NULL, true},           {"examples/transformer_block.tg", NULL, false},
      {"examples/reverse.tg", NULL, true},       {"examples/gpt.tg", "tiny", true},
      {"examples/llama.tg", "tiny", true},
  };
  static const int dtypes[3] = {0, IR_DT_BF16, IR_DT_F16};
  for (size_t e = 0; e < sizeof examples / sizeof examples[0]; e++)
    for (int k = 0; k < 3; k++)
      compile_example(examples[e].path, examples[e].config, NULL, 0, NULL, examples[e].trains, dtypes[k]);
  /* grouped-query training at gpt2's head width (Hd = 64: the tensor-core
   * backward whose dk/dv kernel walks a kv head's 2 query heads) */
  static const fe_define gqa[3] = {{"nKV", "2"}, {"D", "256"}, {"nH", "4"}};
  for (int k = 0; k < 3; k++) compile_example("examples/llama.tg", "tiny", gqa, 3, "tiny nKV=2 Hd=64", true, dtypes[k]);
  for (int k = 0; k < 2; k++) compile_generation(dtypes[k]);
  printf("%d programs compiled, %d kernels assembled with 0 spills\n", programs, kernels_checked);
  cg_cache_free(cache);
  return check_done();
}
