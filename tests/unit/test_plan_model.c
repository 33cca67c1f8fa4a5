/* tests/unit/test_plan_model.c — the planner's model of a training step
 * (passes/plan_rules.c, plan_profile.c) against the closed forms, on
 * examples/gpt.tg in bf16. Notation (Korthikanti et al. 2022): s sequence,
 * b micro-batch, h hidden, a heads, l layers, v vocabulary, t tensor degree.
 *  - every op of ops.def has a tensor-parallel rule;
 *  - parameters: the IR count is the closed form 12 l h^2 + 2 v h with the
 *    exact terms of gpt.tg (13 h of biases and norms per layer, one tied
 *    embedding, learned positions ctx h, the final norm 2 h); per device
 *    under t: l (12 h^2 / t + 7 h / t + 6 h) + ceil(v / t) h + ctx h + 2 h;
 *  - Adam: 2 fp32 values per parameter (plus the fp32 master copy);
 *  - activations kept per interior layer (bytes), Korthikanti's
 *    34 s b h + 5 a s^2 b (16-bit values, 1-byte dropout masks) less the terms
 *    gpt.tg does not have with pdrop 0, its default (no dropout: 2 s b h of
 *    masks, a s^2 b of mask and 2 a s^2 b of dropout output; with GPT-2's
 *    dropout, test_dropout_activations):
 *      attention unfused, no recompute      32 s b h + 2 a s^2 b
 *      the same, t-way tensor parallel      8 s b h + (24 s b h + 2 a s^2 b) / t
 *      the same, with sequence parallelism  (32 s b h + 2 a s^2 b) / t
 *      selective recompute                  32 s b h  (/ t with sequence parallelism)
 *      full recompute                       2 s b h   (the layer's input)
 *      fused attention (FlashAttention)     32 s b h + 4 a s b: no s^2 terms, but
 *                                           the output o and the row log-sum-exp
 *                                           the fused backward reads; the head
 *                                           split and merge transposes around it
 *                                           are folded into the op (its `heads`
 *                                           layout, fuse_transpose.c) and not
 *                                           stored: 2 s b h less than with them
 *  - FLOPs per interior layer: matmul products 24 b s h^2 + 4 b s^2 h forward
 *    (24 b s h^2 with fused attention), twice that backward, / t under
 *    tensor parallelism; full recompute repeats the forward but the MLP's
 *    output projection (the checkpoint pass recomputes what the backward
 *    reads), selective only Q K^T (2 b s^2 h);
 *  - tensor-axis collectives per interior layer (payload 2 s b h bytes
 *    each): 2 all-reduces forward and 2 backward; with sequence
 *    parallelism 2 all-gathers + 2 reduce-scatters forward, 4 all-gathers +
 *    2 reduce-scatters backward (Korthikanti et al. section 4.2.2);
 *  - figures at micro-batch 3 are 3 times those at 1 where per-sample;
 *  - the tensor degree must divide the heads (12 for gpt3-small).
 * All equalities are exact (integers in double) unless a tolerance is given.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"
#include "plan_impl.h"

static const char *model_path = "examples/gpt.tg";
static const char *pdrop = "0"; /* gpt.tg's dropout (-D pdrop) */

static ir_graph *train(const char *config, int B, pass_plan_ckpt ck, bool fuse_attention, ir_diag *d, char **text) {
  size_t len;
  *text = ir_read_file(model_path, 1 << 20, &len, d);
  if (!*text) return NULL;
  char bs[16];
  snprintf(bs, sizeof bs, "%d", B);
  fe_define defs[2] = {{"B", bs}, {"pdrop", pdrop}};
  fe_options fo = {.config = config, .defines = defs, .n_defines = strstr(model_path, "gpt.tg") ? 2 : 1};
  ir_graph *g = fe_compile(model_path, *text, len, &fo, d);
  bool off[PASS_COUNT] = {0};
  off[PASS_FUSE_ATTENTION] = !fuse_attention;
  off[PASS_FUSE_LM_HEAD] = off[PASS_FUSE_ELEMENTWISE] = off[PASS_FUSE_TRANSPOSE] = true; /* as tgc plan compiles (cmd_plan.c) */
  pass_options po = {.diag = d, .checkpoint = pass_plan_ckpt_policy(ck), .disabled = off};
  if (!g || pass_build_training(g, &po) != 0) {
    ir_graph_free(g);
    return NULL;
  }
  pass_retype_floats(g, IR_DT_BF16);
  return g;
}

/* A model of config with the given policies, on device dev (NULL: a100-80g). */
static pass_plan_model *model_on(const pass_target *dev, const char *config, bool fuse_attention, int policies) {
  ir_diag *d = ir_diag_new(stderr);
  pass_plan_model *m = pass_plan_model_new(dev ? dev : pass_target_lookup("a100-80g"));
  for (int ck = 0; ck < PASS_PLAN_CK_COUNT; ck++) {
    if (!(policies & (1 << ck))) continue;
    char *t2 = NULL, *t4 = NULL;
    ir_graph *g2 = train(config, 2, (pass_plan_ckpt)ck, fuse_attention, d, &t2);
    ir_graph *g4 = train(config, 4, (pass_plan_ckpt)ck, fuse_attention, d, &t4);
    int rc = g2 && g4 ? pass_plan_model_add(m, (pass_plan_ckpt)ck, 2, g2, g4, d) : -1;
    CHECK(rc == 0);
    if (rc != 0 && g2 && !g4) ir_graph_free(g2);
    if (!g2) ir_graph_free(g4); /* else the model took both */
    free(t2);
    free(t4);
  }
  ir_diag_free(d);
  return m;
}

static pass_plan_model *model(const char *config, bool fuse_attention, int policies) {
  return model_on(NULL, config, fuse_attention, policies);
}


/* gpt3-175b: l 96, h 12288, v 50257, ctx 2048 */
static void test_params_175b(void) {
  pass_plan_model *m = model("gpt3_175b", true, 1);
  const double l = 96, h = 12288, v = 50257, ctx = 2048;
  double exact = l * (12 * h * h + 13 * h) + v * h + ctx * h + 2 * h;
  double closed = pass_closed_form_params(l, h, v);
  printf("gpt3-175b: parameters %.0f, closed form %.0f, closed form - v h + 13 l h + ctx h + 2 h = %.0f\n",
         pass_plan_model_params(m), closed, closed - v * h + 13 * l * h + ctx * h + 2 * h);
  CHECK(pass_plan_model_params(m) == 174604259328.0);
  CHECK(exact == closed - v * h + 13 * l * h + ctx * h + 2 * h);
  const pass_plan_profile *p1 = pass_plan_model_profile(m, PASS_PLAN_CK_NONE, 1, 1, false);
  CHECK(pass_plan_params_in(p1, 0, p1->n_groups - 1) == exact);
  for (int t = 2; t <= 8; t *= 2) {
    const pass_plan_profile *p = pass_plan_model_profile(m, PASS_PLAN_CK_NONE, 1, t, true);
    /* the vocabulary (50,257) padded to the next multiple of t, as the
     * shard pass pads it (docs/sharding.md): ceil(v / t) rows per rank */
    double want = l * (12 * h * h / t + 7 * h / t + 6 * h) + ceil(v / t) * h + ctx * h + 2 * h;
    double got = pass_plan_params_in(p, 0, p->n_groups - 1);
    printf("  t = %d: %.0f per device (want %.0f)\n", t, got, want);
    CHECK(got == want);
    /* an interior layer alone: 12 h^2 / t + 7 h / t + 6 h exactly.
     * fuse-elementwise computes the next layer's first layernorm in this
     * layer's last node (add_layernorm); the planner gives that layernorm's
     * gain and bias to the next layer, where the shard pass's pipeline cut
     * (made before the fusion) puts them */
    CHECK(pass_plan_params_in(p, 5, 5) == 12 * h * h / t + 7 * h / t + 6 * h);
    CHECK(pass_plan_params_in(p, 3, 7) == 5 * (12 * h * h / t + 7 * h / t + 6 * h));
  }
  /* Adam: 2 fp32 values per parameter, and the fp32 master copy in mixed precision */
  pass_train_memory tm = pass_training_memory(exact, 2, 2, 0, true);
  CHECK(tm.optimizer == exact * 4 * (2 + 1));
  CHECK(pass_plan_model_elem_bytes(m) == 2);
  pass_plan_model_free(m);
}

static void test_activations(void) {
  /* gpt3-small: l 12, h 768, a 12, s 2048 */
  const double s = 2048, h = 768, a = 12;
  pass_plan_model *un = model("gpt3_small", false, 7), *fu = model("gpt3_small", true, 1);
  const int g = 6; /* an interior layer (layer 5) */
  for (int b = 1; b <= 3; b += 2) {
    double sbh = s * b * h, as2b = a * s * s * b;
    const pass_plan_group *n1 = &pass_plan_model_profile(un, PASS_PLAN_CK_NONE, b, 1, false)->groups[g];
    const pass_plan_group *n8 = &pass_plan_model_profile(un, PASS_PLAN_CK_NONE, b, 4, false)->groups[g];
    const pass_plan_group *s4 = &pass_plan_model_profile(un, PASS_PLAN_CK_NONE, b, 4, true)->groups[g];
    const pass_plan_group *sel = &pass_plan_model_profile(un, PASS_PLAN_CK_SELECTIVE, b, 1, false)->groups[g];
    const pass_plan_group *sel4 = &pass_plan_model_profile(un, PASS_PLAN_CK_SELECTIVE, b, 4, true)->groups[g];
    const pass_plan_group *full = &pass_plan_model_profile(un, PASS_PLAN_CK_FULL, b, 1, false)->groups[g];
    const pass_plan_group *fa = &pass_plan_model_profile(fu, PASS_PLAN_CK_NONE, b, 1, false)->groups[g];
    double korth = 34 * sbh + 5 * as2b, no_dropout = korth - 2 * sbh - 3 * as2b;
    printf("b = %d: Korthikanti 34sbh + 5as^2b = %.0f; without dropout %.0f; IR: %.0f\n", b, korth, no_dropout,
           n1->saved);
    CHECK(n1->saved == no_dropout);
    CHECK(n1->saved == 32 * sbh + 2 * as2b);
    CHECK(n8->saved == 8 * sbh + (24 * sbh + 2 * as2b) / 4);
    CHECK(s4->saved == (32 * sbh + 2 * as2b) / 4);
    CHECK(sel->saved == 32 * sbh);
    CHECK(sel4->saved == 32 * sbh / 4);
    CHECK(full->saved == 2 * sbh);
    printf("  t=4: %.0f, t=4 sp: %.0f, selective %.0f, full %.0f, fused attention %.0f (32sbh + 4asb = %.0f)\n",
           n8->saved, s4->saved, sel->saved, full->saved, fa->saved, 32 * sbh + 4 * a * s * b);
    CHECK(fa->saved == korth - 2 * sbh - 5 * as2b + 4 * a * s * b); /* the log-sum-exp in fp32 */
    /* FLOPs of the matmul products */
    double fwd = 24 * b * s * h * h + 4 * b * s * s * h;
    CHECK(n1->gemm_flops[PASS_PHASE_FORWARD] == fwd);
    CHECK(n1->gemm_flops[PASS_PHASE_BACKWARD] == 2 * fwd);
    CHECK(n8->gemm_flops[PASS_PHASE_FORWARD] == fwd / 4);
    CHECK(n8->gemm_flops[PASS_PHASE_BACKWARD] == 2 * fwd / 4);
    /* full recompute reruns what the backward reads: all but the MLP's output
     * projection (8 b s h^2), whose result only the residual add reads */
    CHECK(full->gemm_flops[PASS_PHASE_RECOMPUTE] == fwd - 8 * b * s * h * h);
    CHECK(sel->gemm_flops[PASS_PHASE_RECOMPUTE] == 2 * b * s * s * h);
    CHECK(fa->gemm_flops[PASS_PHASE_FORWARD] == 24 * b * s * h * h);
    /* the tensor axis: payload 2 s b h bytes per collective */
    double pay = 2 * sbh;
    CHECK(n8->coll_count[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE] == 2);
    CHECK(n8->coll_bytes[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE] == 2 * pay);
    CHECK(n8->coll_count[PASS_PHASE_BACKWARD][IR_COLL_ALL_REDUCE] == 2);
    CHECK(n8->coll_count[PASS_PHASE_FORWARD][IR_COLL_ALL_GATHER] == 0);
    CHECK(s4->coll_count[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE] == 0);
    CHECK(s4->coll_count[PASS_PHASE_FORWARD][IR_COLL_ALL_GATHER] == 2);
    CHECK(s4->coll_count[PASS_PHASE_FORWARD][IR_COLL_REDUCE_SCATTER] == 2);
    CHECK(s4->coll_count[PASS_PHASE_BACKWARD][IR_COLL_ALL_GATHER] == 4);
    CHECK(s4->coll_count[PASS_PHASE_BACKWARD][IR_COLL_REDUCE_SCATTER] == 2);
    CHECK(s4->coll_bytes[PASS_PHASE_BACKWARD][IR_COLL_ALL_GATHER] == 4 * pay);
    CHECK(n1->coll_count[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE] == 0); /* t = 1: none */
    /* the pipeline's sends at an interior cut: the residual (2 s b h bf16)
     * forward, its gradient backward: the next layer's first layernorm,
     * which fuse-elementwise computes in this layer's last node, runs on the
     * next stage (as the shard pass cuts it) */
    const pass_plan_profile *pf = pass_plan_model_profile(fu, PASS_PLAN_CK_NONE, b, 1, false);
    CHECK(pf->act[g] == 2 * sbh);
    CHECK(pf->grad[g] == 2 * sbh);
    const pass_plan_profile *pf4 = pass_plan_model_profile(fu, PASS_PLAN_CK_NONE, b, 4, true);
    CHECK(pf4->act[g] == 2 * sbh / 4 && pf4->grad[g] == 2 * sbh / 4);
    /* a stage of 5 interior layers keeps 5 layers' activations: no value is
     * read by two layers' backward (tables made from constants would be
     * kept once; gpt.tg has none) */
    const pass_plan_profile *pn = pass_plan_model_profile(un, PASS_PLAN_CK_NONE, b, 1, false);
    CHECK(pn->n_shared_saved == 0 && pass_plan_saved_in(pn, 3, 7) == 5 * (32 * sbh + 2 * as2b));
    const pass_plan_profile *ps4 = pass_plan_model_profile(un, PASS_PLAN_CK_SELECTIVE, b, 4, true);
    CHECK(pass_plan_saved_in(ps4, 3, 7) == 5 * 32 * sbh / 4);
  }
  /* per-sample figures are linear in b */
  const pass_plan_group *b1 = &pass_plan_model_profile(un, PASS_PLAN_CK_NONE, 1, 1, false)->groups[g];
  const pass_plan_group *b3 = &pass_plan_model_profile(un, PASS_PLAN_CK_NONE, 3, 1, false)->groups[g];
  CHECK(b3->saved == 3 * b1->saved);
  CHECK(b3->gemm_flops[PASS_PHASE_FORWARD] == 3 * b1->gemm_flops[PASS_PHASE_FORWARD]);
  CHECK(b3->seconds[PASS_PHASE_FORWARD] > b1->seconds[PASS_PHASE_FORWARD]);
  /* heads: 12. The runtime refuses a tp that does not divide the heads of
   * an attention op (the fused model); attention written in primitives it
   * shards what divides and gathers the rest, and so does the planner */
  int64_t size;
  const ir_value *v;
  int dim;
  bool heads;
  int ok4 = pass_plan_model_tp_check(fu, 4, &size, &v, &dim, &heads);
  if (ok4 == 0) printf("t = 4 refused: %%%s dim %d size %lld\n", v ? v->name : "?", dim, (long long)size);
  CHECK(ok4 == 1);
  CHECK(pass_plan_model_tp_check(fu, 8, &size, &v, &dim, &heads) == 0 && size == 12 && heads);
  CHECK(pass_plan_model_tp_check(fu, 5, &size, &v, &dim, &heads) == 0 && size == 12 && heads && v);
  CHECK(pass_plan_model_tp_check(un, 8, &size, &v, &dim, &heads) == 1);
  if (v) printf("t = 5: the heads, dim %d of %%%s (size %lld)\n", dim, v->name, (long long)size);
  pass_plan_model_free(un);
  pass_plan_model_free(fu);
}

/* GPT-2's dropout (pdrop 0.1: attention probabilities, both residual
 * branches, the embeddings): the masks are drawn again in the backward, so
 * an interior layer keeps Korthikanti's 34 s b h + 5 a s^2 b less the
 * 1-byte masks (2 s b h + a s^2 b) = 32 s b h + 4 a s^2 b: the dropped
 * probabilities (2 a s^2 b) the product with v reads, beside the softmax
 * output its backward reads. With the masks counted as the literature does
 * (pass_dropout_mask_bytes: one byte an element of each dropout), exactly
 * Korthikanti's figure. */
static void test_dropout_activations(void) {
  const double s = 2048, h = 768, a = 12, b = 1, sbh = s * b * h, as2b = a * s * s * b;
  pdrop = "0.1";
  pass_plan_model *un = model("gpt3_small", false, 1);
  const pass_plan_group *n1 = &pass_plan_model_profile(un, PASS_PLAN_CK_NONE, 1, 1, false)->groups[6];
  printf("dropout: interior layer keeps %.0f (32sbh + 4as^2b = %.0f; with 1-byte masks %.0f, Korthikanti %.0f)\n",
         n1->saved, 32 * sbh + 4 * as2b, n1->saved + 2 * sbh + as2b, 34 * sbh + 5 * as2b);
  CHECK(n1->saved == 32 * sbh + 4 * as2b);
  pass_plan_model_free(un);
  /* the masks of one layer, as the literature counts them */
  char *text = NULL;
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *g = train("gpt3_small", 1, PASS_PLAN_CK_NONE, false, d, &text);
  CHECK(g != NULL);
  int n = 0;
  int64_t masks = g ? pass_dropout_mask_bytes(g, &n) : 0;
  CHECK_EQ_INT(n, 12 * 3 + 1); /* three a layer, and the embeddings' */
  CHECK((double)masks == 12 * (2 * sbh + as2b) + sbh);
  ir_graph_free(g);
  free(text);
  ir_diag_free(d);
  pdrop = "0";
}

/* llama-7b (l 32, h 4096, F 11008, v 32000, a 32; untied head, RMSNorm,
 * SwiGLU, no biases): its parameters, and Megatron-LM's tensor-parallel
 * collectives per layer with three separate q, k, v projections and a
 * SwiGLU's two input projections, whose partial input gradients are added
 * before one all-reduce (the embedding's all-reduce belongs to group 0, as
 * Megatron-LM reduces it inside the embedding). */
static void test_llama(void) {
  model_path = "examples/llama.tg";
  pass_plan_model *m = model("llama_7b", true, 1);
  model_path = "examples/gpt.tg";
  const double l = 32, h = 4096, F = 11008, v = 32000, s = 2048;
  double exact = 2 * v * h + l * (4 * h * h + 3 * h * F + 2 * h) + h;
  printf("llama-7b: parameters %.0f (2 v h + l (4 h^2 + 3 h F + 2 h) + h = %.0f)\n", pass_plan_model_params(m), exact);
  CHECK(pass_plan_model_params(m) == exact && exact == 6738415616.0);
  for (int t = 2; t <= 8; t *= 2) {
    const pass_plan_profile *p = pass_plan_model_profile(m, PASS_PLAN_CK_NONE, 1, t, false);
    double want = l * (4 * h * h / t + 3 * h * F / t + 2 * h) + 2 * ceil(v / t) * h + h;
    CHECK(pass_plan_params_in(p, 0, p->n_groups - 1) == want);
    double pay = 2 * s * h; /* bf16 [b = 1, s, h] */
    for (int g = 1; g <= (int)l; g++) {
      const pass_plan_group *G = &p->groups[g];
      bool ok = G->coll_count[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE] == 2 &&
                G->coll_count[PASS_PHASE_BACKWARD][IR_COLL_ALL_REDUCE] == 2 &&
                G->coll_bytes[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE] == 2 * pay &&
                G->coll_bytes[PASS_PHASE_BACKWARD][IR_COLL_ALL_REDUCE] == 2 * pay;
      if (!ok)
        printf("  t = %d, layer %d: %d + %d all-reduces, %.0f + %.0f B (want 2 + 2 of %.0f B)\n", t, g - 1,
               G->coll_count[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE], G->coll_count[PASS_PHASE_BACKWARD][IR_COLL_ALL_REDUCE],
               G->coll_bytes[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE], G->coll_bytes[PASS_PHASE_BACKWARD][IR_COLL_ALL_REDUCE], pay);
      CHECK(ok);
    }
    const pass_plan_group *emb = &p->groups[0], *head = &p->groups[p->n_groups - 1];
    CHECK(emb->coll_count[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE] == 1 &&
          emb->coll_bytes[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE] == pay);
    /* vocabulary-parallel cross-entropy: 3 fp32 per token, and the
     * trainer's accuracy: the max (bf16) and its index (i32) per token; the
     * head's input gradient */
    CHECK(head->coll_count[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE] == 5 &&
          head->coll_bytes[PASS_PHASE_FORWARD][IR_COLL_ALL_REDUCE] == (3 * 4 + 2 + 4) * s);
    CHECK(head->coll_count[PASS_PHASE_BACKWARD][IR_COLL_ALL_REDUCE] == 1 &&
          head->coll_bytes[PASS_PHASE_BACKWARD][IR_COLL_ALL_REDUCE] == pay);
  }
  pass_plan_model_free(m);
}

/* A node takes at least its device calls x the target's launch time, as
 * tgc stats times it: with a launch time that dwarfs every roofline (1 s),
 * a layer's forward takes a whole number of seconds, its calls, the same at
 * any micro-batch and any tp (tp splits the work, not the calls); with the
 * real 4 us it is above the roofline alone. */
static void test_launch_floor(void) {
  pass_target slow = *pass_target_lookup("a100-80g"), none = slow;
  slow.launch = 1.0, none.launch = 0;
  pass_plan_model *ms = model_on(&slow, "gpt3_small", true, 1), *m0 = model_on(&none, "gpt3_small", true, 1);
  const int g = 6; /* an interior layer */
  double calls = pass_plan_model_profile(ms, PASS_PLAN_CK_NONE, 1, 1, false)->groups[g].seconds[PASS_PHASE_FORWARD];
  double calls3 = pass_plan_model_profile(ms, PASS_PLAN_CK_NONE, 3, 1, false)->groups[g].seconds[PASS_PHASE_FORWARD];
  double calls_tp = pass_plan_model_profile(ms, PASS_PLAN_CK_NONE, 1, 4, false)->groups[g].seconds[PASS_PHASE_FORWARD];
  double roof = pass_plan_model_profile(m0, PASS_PLAN_CK_NONE, 1, 1, false)->groups[g].seconds[PASS_PHASE_FORWARD];
  printf("gpt3-small layer forward: %.0f device calls (tp 4: %.0f); roofline %.3g s\n", calls, calls_tp, roof);
  CHECK(calls >= 8 && calls == floor(calls) && calls == calls3);
  CHECK(calls_tp >= calls && calls_tp == floor(calls_tp)); /* tp adds its collectives' neighbours, never fewer calls */
  CHECK(roof < 0.01 && roof > 0);
  pass_plan_model_free(ms);
  pass_plan_model_free(m0);
}

int main(void) {
  test_launch_floor();
  test_params_175b();
  test_activations();
  test_dropout_activations();
  test_llama();
  return check_done();
}
