/* tests/unit/test_models.c — the transformer models examples/gpt.tg and
 * examples/llama.tg: every config compiles (fe_compile + ir_verify) and has
 * exactly the parameter count of an independent closed form written here;
 * the `tiny` configs run on rt_cpu_backend with a loss near log(V); the
 * biggest configs compile quickly (nothing is allocated).
 *
 * GPT (attention width A = nH * Hd, = D except gpt3_xl and gpt3_13b):
 *   V*D (wte) + ctx*D (wpe) + 2D (ln_f)
 *   + nL * (2D ln_1 + 3AD + 3A c_attn + AD + D c_proj + 2D ln_2
 *           + 4D^2 + 4D c_fc + 4D^2 + D mlp c_proj)
 *   = V*D + ctx*D + 2D + nL * (4AD + 3A + 8D^2 + 10D),
 *   which is the standard 12D^2 + 13D per block when A = D;
 *   gpt2-124m = 124,439,808 exactly.
 * LLaMA: 2*V*D + D + nL * (4D^2 + 3DF + 2D), F = 256 * ceil(8D/3 / 256)
 *   (checked against the F written in each config); llama-7b = 6,738,415,616.
 *
 * Loss at initialization: the logits are small (weights N(0, 0.02)), so the
 * softmax is nearly uniform and the cross-entropy is log(V) up to a few
 * percent; the test allows |loss - log V| <= 0.5 (what the brief asks).
 * Compile time of gpt3_175b (96 unrolled layers) and llama_65b is printed
 * and asserted only < 20 s (robust on a loaded machine; it is ~0.05 s). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "frontend.h"
#include "ir.h"
#include "runtime.h"

typedef struct {
  ir_diag *diag;
  char *text;
  size_t len;
  const char *path;
} source;

static int source_load(source *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->path = path;
  s->diag = ir_diag_new(stderr);
  s->text = ir_read_file(path, 1u << 20, &s->len, s->diag);
  return s->text ? 0 : -1;
}

static void source_free(source *s) {
  free(s->text);
  ir_diag_free(s->diag);
  memset(s, 0, sizeof *s);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Compiles one config (with optional -D overrides) and verifies the graph;
 * NULL (after a failed CHECK) on any error. */
static ir_graph *compile(source *s, const char *config, const fe_define *defs, int n_defs) {
  fe_options opt = {.config = config, .defines = defs, .n_defines = n_defs};
  ir_graph *g = fe_compile(s->path, s->text, s->len, &opt, s->diag);
  CHECK(g != NULL);
  if (!g) {
    fprintf(stderr, "fe_compile(%s --config %s) failed\n", s->path, config);
    return NULL;
  }
  int rc = ir_verify(g, s->diag);
  CHECK_EQ_INT(rc, 0);
  if (rc != 0) {
    ir_graph_free(g);
    return NULL;
  }
  return g;
}

static int64_t param_count(const ir_graph *g) {
  int64_t n = 0;
  for (int i = 0; i < g->n_params; i++) n += ir_type_numel(&g->params[i]->type);
  return n;
}

static const ir_value *find_param(const ir_graph *g, const char *name) {
  for (int i = 0; i < g->n_params; i++)
    if (strcmp(g->params[i]->name, name) == 0) return g->params[i];
  return NULL;
}

static const ir_value *find_input(const ir_graph *g, const char *name) {
  for (int i = 0; i < g->n_inputs; i++)
    if (strcmp(g->inputs[i]->name, name) == 0) return g->inputs[i];
  return NULL;
}

static int find_output(const ir_graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (strcmp(g->outputs[i].name, name) == 0) return i;
  return -1;
}

/* tokens, targets: i32[B, T]; outputs loss: f32[] and logits: f32[B, T, V]. */
static void check_interface(const ir_graph *g, int64_t B, int64_t T, int64_t V) {
  const char *names[2] = {"tokens", "targets"};
  for (int k = 0; k < 2; k++) {
    const ir_value *in = find_input(g, names[k]);
    CHECK(in != NULL);
    if (!in) continue;
    CHECK_EQ_INT(in->type.dtype, IR_DT_I32);
    CHECK_EQ_INT(in->type.rank, 2);
    CHECK_EQ_INT(in->type.dims[0], B);
    CHECK_EQ_INT(in->type.dims[1], T);
  }
  int li = find_output(g, "loss"), gi = find_output(g, "logits");
  CHECK(li >= 0 && gi >= 0);
  if (li < 0 || gi < 0) return;
  CHECK_EQ_INT(g->outputs[li].value->type.rank, 0);
  const ir_type *lt = &g->outputs[gi].value->type;
  CHECK_EQ_INT(lt->rank, 3);
  CHECK_EQ_INT(lt->dims[0], B);
  CHECK_EQ_INT(lt->dims[1], T);
  CHECK_EQ_INT(lt->dims[2], V);
}

/* ---------------------------------------------------------------------- */
/* GPT                                                                     */
/* ---------------------------------------------------------------------- */

typedef struct {
  const char *name;
  int64_t V, ctx, nL, D, nH, Hd;
} gpt_cfg;

/* The GPT-3 paper's table (d_head 128 where D / nH does not divide). */
static const gpt_cfg gpt_cfgs[] = {
    {"tiny", 64, 16, 2, 32, 4, 8},
    {"gpt2_124m", 50257, 1024, 12, 768, 12, 64},
    {"gpt3_small", 50257, 2048, 12, 768, 12, 64},
    {"gpt3_medium", 50257, 2048, 24, 1024, 16, 64},
    {"gpt3_large", 50257, 2048, 24, 1536, 16, 96},
    {"gpt3_xl", 50257, 2048, 24, 2048, 24, 128},
    {"gpt3_2_7b", 50257, 2048, 32, 2560, 32, 80},
    {"gpt3_6_7b", 50257, 2048, 32, 4096, 32, 128},
    {"gpt3_13b", 50257, 2048, 40, 5140, 40, 128},
    {"gpt3_175b", 50257, 2048, 96, 12288, 96, 128},
};

static int64_t gpt_params(const gpt_cfg *c) {
  int64_t D = c->D, A = c->nH * c->Hd;
  return c->V * D + c->ctx * D + 2 * D + c->nL * (4 * A * D + 3 * A + 8 * D * D + 10 * D);
}

static void test_gpt_counts(source *s) {
  /* the standard form when A = D, and the well-known figure */
  const gpt_cfg *g2 = &gpt_cfgs[1];
  int64_t D = g2->D;
  CHECK_EQ_INT(gpt_params(g2), g2->V * D + g2->ctx * D + g2->nL * (12 * D * D + 13 * D) + 2 * D);
  CHECK_EQ_INT(gpt_params(g2), INT64_C(124439808));

  for (size_t i = 0; i < sizeof gpt_cfgs / sizeof gpt_cfgs[0]; i++) {
    const gpt_cfg *c = &gpt_cfgs[i];
    ir_graph *g = compile(s, c->name, NULL, 0);
    if (!g) continue;
    int64_t got = param_count(g), want = gpt_params(c);
    CHECK_EQ_INT(got, want);
    printf("gpt %-12s params %" PRId64 "\n", c->name, got);
    CHECK_EQ_INT(g->n_params, 4 + 12 * c->nL);
    int64_t B = strcmp(c->name, "tiny") == 0 ? 4 : 1;
    check_interface(g, B, c->ctx, c->V);
    /* the fused qkv projection is [D, 3A] and the output projection [A, D] */
    const ir_value *w = find_param(g, "l.0.block.attn.c_attn_w");
    const ir_value *o = find_param(g, "l.0.block.attn.c_proj_w");
    CHECK(w && o);
    if (w && o) {
      CHECK_EQ_INT(w->type.dims[0], c->D);
      CHECK_EQ_INT(w->type.dims[1], 3 * c->nH * c->Hd);
      CHECK_EQ_INT(o->type.dims[0], c->nH * c->Hd);
      CHECK_EQ_INT(o->type.dims[1], c->D);
    }
    ir_graph_free(g);
  }
  CHECK_EQ_INT(gpt_params(&gpt_cfgs[1]), INT64_C(124439808));

  /* -D B=4 -D T=64 changes the shapes, not the parameters (wpe stays [ctx, D]) */
  fe_define defs[2] = {{"B", "4"}, {"T", "64"}};
  ir_graph *g = compile(s, "gpt2_124m", defs, 2);
  if (g) {
    CHECK_EQ_INT(param_count(g), INT64_C(124439808));
    check_interface(g, 4, 64, 50257);
    ir_graph_free(g);
  }
}

/* ---------------------------------------------------------------------- */
/* LLaMA                                                                   */
/* ---------------------------------------------------------------------- */

typedef struct {
  const char *name;
  int64_t V, nL, D, nH, nKV, F, ctx;
} llama_cfg;

static const llama_cfg llama_cfgs[] = {
    {"tiny", 64, 2, 32, 4, 4, 96, 16},
    {"llama_7b", 32000, 32, 4096, 32, 32, 11008, 2048},
    {"llama_13b", 32000, 40, 5120, 40, 40, 13824, 2048},
    {"llama_33b", 32000, 60, 6656, 52, 52, 17920, 2048},
    {"llama_65b", 32000, 80, 8192, 64, 64, 22016, 2048},
    {"llama3_8b", 128256, 32, 4096, 32, 8, 14336, 8192}, /* grouped-query attention */
};

/* wq, wo [D, D]; wk, wv [D, nKV * Hd] (grouped-query attention shares a kv head) */
static int64_t llama_params(const llama_cfg *c) {
  int64_t D = c->D, Dkv = c->nKV * (D / c->nH);
  return 2 * c->V * D + D + c->nL * (2 * D * D + 2 * D * Dkv + 3 * D * c->F + 2 * D);
}

static void test_llama_counts(source *s) {
  CHECK_EQ_INT(llama_params(&llama_cfgs[1]), INT64_C(6738415616));
  CHECK_EQ_INT(llama_params(&llama_cfgs[1]),
               INT64_C(32000) * 4096 * 2 + 32 * (INT64_C(4) * 4096 * 4096 + INT64_C(3) * 4096 * 11008 + 2 * 4096) +
                   4096);
  /* Llama-3-8B: the published 8.03B */
  CHECK_EQ_INT(llama_params(&llama_cfgs[5]), INT64_C(8030261248));
  for (size_t i = 0; i < sizeof llama_cfgs / sizeof llama_cfgs[0]; i++) {
    const llama_cfg *c = &llama_cfgs[i];
    /* F = 256 * ceil((8D/3) / 256) = 256 * ceil(8D / 768) for the LLaMA models;
       Llama 3: 1024 * ceil(1.3 (8D/3) / 1024) = 1024 * ceil(104D / 30720) */
    if (strcmp(c->name, "llama3_8b") == 0) CHECK_EQ_INT(c->F, 1024 * ((104 * c->D + 30719) / 30720));
    else if (strcmp(c->name, "tiny") != 0) CHECK_EQ_INT(c->F, 256 * ((8 * c->D + 767) / 768));
    ir_graph *g = compile(s, c->name, NULL, 0);
    if (!g) continue;
    int64_t got = param_count(g);
    CHECK_EQ_INT(got, llama_params(c));
    printf("llama %-10s params %" PRId64 "\n", c->name, got);
    CHECK_EQ_INT(g->n_params, 3 + 9 * c->nL);
    int64_t B = strcmp(c->name, "tiny") == 0 ? 4 : 1;
    check_interface(g, B, c->ctx, c->V);
    const ir_value *wk = find_param(g, "l.0.block.attention.wk");
    CHECK(wk != NULL);
    if (wk) CHECK_EQ_INT(wk->type.dims[1], c->nKV * (c->D / c->nH));
    const ir_value *w1 = find_param(g, "l.0.block.feed_forward.w1");
    CHECK(w1 != NULL);
    if (w1) CHECK_EQ_INT(w1->type.dims[1], c->F);
    ir_graph_free(g);
  }
}

/* ---------------------------------------------------------------------- */
/* tiny runs                                                               */
/* ---------------------------------------------------------------------- */

static void run_tiny(source *s, int64_t V) {
  ir_graph *g = compile(s, "tiny", NULL, 0);
  if (!g) return;
  rt_tensor **in = calloc((size_t)g->n_inputs + 1, sizeof *in);
  rt_tensor **pa = calloc((size_t)g->n_params + 1, sizeof *pa);
  rt_tensor **out = calloc((size_t)g->n_outputs + 1, sizeof *out);
  int ok = in && pa && out;
  for (int i = 0; ok && i < g->n_inputs; i++) {
    if (!(in[i] = rt_tensor_new(&g->inputs[i]->type))) ok = 0;
    else rt_fill_random(in[i], 3, g->inputs[i]->name, V);
  }
  for (int i = 0; ok && i < g->n_params; i++) {
    if (!(pa[i] = rt_tensor_new(&g->params[i]->type))) ok = 0;
    else rt_init_param(pa[i], g->params[i], 3);
  }
  CHECK(ok);
  if (ok) {
    char err[512] = "";
    double t0 = now_s();
    int rc = rt_run(&rt_cpu_backend, g, in, pa, out, NULL, err, sizeof err);
    double dt = now_s() - t0;
    CHECK_EQ_INT(rc, 0);
    if (rc != 0) fprintf(stderr, "%s tiny: %s\n", s->path, err);
    int li = find_output(g, "loss"), gi = find_output(g, "logits");
    if (rc == 0 && li >= 0 && gi >= 0 && out[li] && out[gi]) {
      double loss = rt_tensor_get(out[li], 0);
      printf("%s tiny: loss %.6f at init (log V = %.6f), forward %.1f ms\n", s->path, loss, log((double)V),
             1e3 * dt);
      CHECK(isfinite(loss));
      CHECK(fabs(loss - log((double)V)) <= 0.5);
      int64_t n = ir_type_numel(&out[gi]->type);
      int finite = 1;
      for (int64_t k = 0; k < n; k++) finite &= isfinite(rt_tensor_get(out[gi], k)) ? 1 : 0;
      CHECK(finite);
    }
  }
  for (int i = 0; in && i < g->n_inputs; i++) rt_tensor_free(in[i]);
  for (int i = 0; pa && i < g->n_params; i++) rt_tensor_free(pa[i]);
  for (int i = 0; out && i < g->n_outputs; i++) rt_tensor_free(out[i]);
  free(in);
  free(pa);
  free(out);
  ir_graph_free(g);
}

/* ---------------------------------------------------------------------- */
/* compile time of the biggest configs                                     */
/* ---------------------------------------------------------------------- */

static void time_compile(source *s, const char *config) {
  double t0 = now_s();
  fe_options opt = {.config = config};
  ir_graph *g = fe_compile(s->path, s->text, s->len, &opt, s->diag);
  double dt = now_s() - t0;
  CHECK(g != NULL);
  if (g) printf("%s --config %s: fe_compile %.3f s (%d nodes)\n", s->path, config, dt, g->n_nodes);
  CHECK(dt < 20.0);
  ir_graph_free(g);
}

int main(void) {
  source gpt, llama;
  int rg = source_load(&gpt, "examples/gpt.tg");
  int rl = source_load(&llama, "examples/llama.tg");
  CHECK_EQ_INT(rg, 0);
  CHECK_EQ_INT(rl, 0);
  if (rg == 0) {
    test_gpt_counts(&gpt);
    run_tiny(&gpt, 64);
    time_compile(&gpt, "gpt3_175b");
  }
  if (rl == 0) {
    test_llama_counts(&llama);
    run_tiny(&llama, 64);
    time_compile(&llama, "llama_65b");
  }
  source_free(&gpt);
  source_free(&llama);
  return check_done();
}
