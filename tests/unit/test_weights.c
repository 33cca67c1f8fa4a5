/* tests/unit/test_weights.c — pretrained weights through name maps
 * (runtime/io/weights.c): GPT-2- and Llama-shaped random checkpoints written
 * here under the Hugging Face names and layouts (GPT-2's Conv1D [in, out],
 * torch.nn.Linear's [out, in]) are read through examples/maps/hf_*.map into
 * examples/gpt.tg and examples/llama.tg (config tiny): every parameter holds
 * exactly the file's values in tgc's layout, and exporting gives back the
 * file's tensors bit for bit. Then split/rope/cast on a small model, and
 * every refusal with its exact message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "frontend.h"
#include "rt_io.h"

static ir_graph *load_tiny(const char *path, char **text) {
  ir_diag *d = ir_diag_new(stderr);
  size_t len;
  *text = ir_read_file(path, 1 << 20, &len, d);
  fe_options o = {0};
  o.config = "tiny";
  ir_graph *g = *text ? fe_compile(path, *text, len, &o, d) : NULL;
  ir_diag_free(d);
  return g;
}

/* An HF tensor: name, rank, dims, and whether tgc holds it transposed. */
typedef struct {
  char name[128];
  int rank;
  int64_t dims[2];
} hf_spec;

static rt_tensor *filled(int rank, const int64_t *dims, int salt) {
  ir_type t = {.dtype = IR_DT_F32, .rank = rank};
  for (int d = 0; d < rank; d++) t.dims[d] = dims[d];
  rt_tensor *x = rt_tensor_new(&t);
  for (int64_t i = 0, n = ir_type_numel(&t); i < n; i++) ((float *)x->data)[i] = (float)(salt * 1000 + i) * 0.001f;
  return x;
}

static char tmpdir[] = "/tmp/tgc_test_weights_XXXXXX";

static const char *tmp(const char *name) {
  static char buf[4][256];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

/* Writes specs as a safetensors file; returns the tensors (caller frees). */
static rt_tensor **write_hf(const char *path, const hf_spec *s, int n) {
  rt_tensor **ts = calloc((size_t)n, sizeof *ts);
  rt_named_tensor *nt = calloc((size_t)n, sizeof *nt);
  for (int i = 0; i < n; i++) ts[i] = filled(s[i].rank, s[i].dims, i + 1), nt[i] = (rt_named_tensor){s[i].name, ts[i]};
  char err[512] = "";
  CHECK_EQ_INT(rt_safetensors_write(path, nt, n, NULL, 0, err, sizeof err), 0);
  free(nt);
  return ts;
}

static int param_index(const ir_graph *g, const char *name) {
  for (int i = 0; i < g->n_params; i++)
    if (strcmp(g->params[i]->name, name) == 0) return i;
  return -1;
}

/* params[tgc] equals file tensor hf (transposed when tr), element for element. */
static void check_bound(const ir_graph *g, rt_tensor **params, const char *tgc, const rt_tensor *hf, bool tr) {
  int p = param_index(g, tgc);
  CHECK(p >= 0);
  if (p < 0) return;
  const rt_tensor *t = params[p];
  CHECK_EQ_INT(ir_type_numel(&t->type), ir_type_numel(&hf->type));
  int64_t r = hf->type.rank == 2 ? hf->type.dims[0] : 1, c = hf->type.dims[hf->type.rank - 1];
  int bad = 0;
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < c; j++) {
      float want = ((const float *)hf->data)[i * c + j];
      float got = ((const float *)t->data)[tr ? j * r + i : i * c + j];
      bad += want != got;
    }
  if (bad) fprintf(stderr, "parameter %s: %d elements differ from the file's\n", tgc, bad);
  CHECK_EQ_INT(bad, 0);
}

/* The export of params through map equals the file's tensors, bit for bit. */
static void check_round_trip(const ir_graph *g, rt_tensor **params, const rt_weight_map *m, const hf_spec *s,
                             rt_tensor **ts, int n, const char *out) {
  char err[2048] = "";
  CHECK_EQ_INT(rt_weights_export(g, params, m, out, err, sizeof err), 0);
  if (*err) fprintf(stderr, "%s\n", err);
  rt_safetensors *f = rt_safetensors_read(out, err, sizeof err);
  CHECK(f != NULL);
  if (!f) return;
  int bound = 0;
  for (int i = 0; i < n; i++) {
    const rt_tensor *x = rt_safetensors_find(f, s[i].name);
    if (!x) continue; /* an ignored tensor (e.g. a tied head) is not written back */
    bound++;
    CHECK(x->nbytes == ts[i]->nbytes && memcmp(x->data, ts[i]->data, x->nbytes) == 0);
    CHECK(x->type.rank == ts[i]->type.rank && x->type.dims[0] == ts[i]->type.dims[0]);
  }
  CHECK_EQ_INT(bound, rt_safetensors_count(f));
  CHECK_EQ_INT(bound, g->n_params);
  rt_safetensors_free(f);
}

static rt_tensor **new_params(const ir_graph *g) {
  rt_tensor **p = calloc((size_t)g->n_params, sizeof *p);
  for (int i = 0; i < g->n_params; i++) p[i] = rt_tensor_new(&g->params[i]->type);
  return p;
}

static void free_all(rt_tensor **ts, int n) {
  for (int i = 0; i < n; i++) rt_tensor_free(ts[i]);
  free(ts);
}

/* GPT-2 tiny: V 64, ctx 16, D 32, 2 layers; HF Conv1D weights are [in, out]. */
static void test_gpt2(void) {
  char *text = NULL;
  ir_graph *g = load_tiny("examples/gpt.tg", &text);
  CHECK(g != NULL);
  if (!g) return;
  hf_spec s[64];
  int n = 0;
  s[n++] = (hf_spec){"wte.weight", 2, {64, 32}};
  s[n++] = (hf_spec){"wpe.weight", 2, {16, 32}};
  s[n++] = (hf_spec){"ln_f.weight", 1, {32}};
  s[n++] = (hf_spec){"ln_f.bias", 1, {32}};
  for (int l = 0; l < 2; l++) {
    static const struct {
      const char *n;
      int rank;
      int64_t d0, d1;
    } per[] = {{"ln_1.weight", 1, 32, 0},       {"ln_1.bias", 1, 32, 0},         {"attn.c_attn.weight", 2, 32, 96},
               {"attn.c_attn.bias", 1, 96, 0},  {"attn.c_proj.weight", 2, 32, 32}, {"attn.c_proj.bias", 1, 32, 0},
               {"ln_2.weight", 1, 32, 0},       {"ln_2.bias", 1, 32, 0},         {"mlp.c_fc.weight", 2, 32, 128},
               {"mlp.c_fc.bias", 1, 128, 0},    {"mlp.c_proj.weight", 2, 128, 32}, {"mlp.c_proj.bias", 1, 32, 0},
               {"attn.bias", 2, 16, 16}};       /* the causal-mask buffer old exports keep */
    for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
      s[n] = (hf_spec){"", per[k].rank, {per[k].d0, per[k].d1}};
      snprintf(s[n].name, sizeof s[n].name, "h.%d.%s", l, per[k].n);
      n++;
    }
  }
  rt_tensor **ts = write_hf(tmp("gpt2.safetensors"), s, n);
  char err[2048] = "";
  rt_weight_map *m = rt_weight_map_read("examples/maps/hf_gpt2.map", err, sizeof err);
  CHECK(m != NULL);
  rt_tensor **params = new_params(g);
  CHECK_EQ_INT(rt_weights_load(g, params, tmp("gpt2.safetensors"), m, NULL, err, sizeof err), 0);
  if (*err) fprintf(stderr, "%s\n", err);
  check_bound(g, params, "wte", ts[0], false);
  check_bound(g, params, "ln_f_b", ts[3], false);
  check_bound(g, params, "l.1.block.attn.c_attn_w", ts[4 + 13 + 2], false);
  check_bound(g, params, "l.0.block.mlp.c_proj_w", ts[4 + 10], false);
  check_round_trip(g, params, m, s, ts, n, tmp("gpt2_out.safetensors"));

  /* a shape that does not fit: both names, both types */
  s[4 + 2].dims[1] = 95;
  free_all(ts, n);
  ts = write_hf(tmp("gpt2_bad.safetensors"), s, n);
  CHECK_EQ_INT(rt_weights_load(g, params, tmp("gpt2_bad.safetensors"), m, NULL, err, sizeof err), -1);
  char want[1024];
  snprintf(want, sizeof want,
           "%s: tensor 'h.0.attn.c_attn.weight' f32[32, 95] does not fit parameter 'l.0.block.attn.c_attn_w' f32[32, 96]",
           tmp("gpt2_bad.safetensors"));
  CHECK_STR(err, want);
  /* missing tensors listed, with the parameter each was for */
  s[4 + 2].dims[1] = 96;
  free_all(ts, n);
  ts = write_hf(tmp("gpt2_missing.safetensors"), s, 4);
  CHECK_EQ_INT(rt_weights_load(g, params, tmp("gpt2_missing.safetensors"), m, NULL, err, sizeof err), -1);
  CHECK(strstr(err, ": missing tensors: 'h.0.ln_1.weight' (for 'l.0.block.ln_1_g'), 'h.0.ln_1.bias' (for "
                    "'l.0.block.ln_1_b'), ") != NULL);
  fprintf(stderr, "(expected) %s\n", err);
  /* unused tensors listed */
  free_all(ts, 4);
  strcpy(s[n].name, "h.9.extra");
  s[n].rank = 1, s[n].dims[0] = 3;
  ts = write_hf(tmp("gpt2_extra.safetensors"), s, n + 1);
  CHECK_EQ_INT(rt_weights_load(g, params, tmp("gpt2_extra.safetensors"), m, NULL, err, sizeof err), -1);
  snprintf(want, sizeof want,
           "%s: unused tensors (bound to no parameter; a map's '! GLOB' line leaves them): h.9.extra",
           tmp("gpt2_extra.safetensors"));
  CHECK_STR(err, want);
  free_all(ts, n + 1);
  /* without a map the names are tgc's: every HF name is missing */
  CHECK_EQ_INT(rt_weights_load(g, params, tmp("gpt2.safetensors"), NULL, NULL, err, sizeof err), -1);
  CHECK(strstr(err, "missing tensors: 'wte' (for 'wte'), 'wpe' (for 'wpe')") != NULL);
  free_all(params, g->n_params);
  rt_weight_map_free(m);
  ir_graph_free(g);
  free(text);
}

/* Llama tiny: V 64, D 32, F 96, 2 layers; Linear weights [out, in], transposed by the map. */
static void test_llama(void) {
  char *text = NULL;
  ir_graph *g = load_tiny("examples/llama.tg", &text);
  CHECK(g != NULL);
  if (!g) return;
  hf_spec s[64];
  int n = 0;
  s[n++] = (hf_spec){"model.embed_tokens.weight", 2, {64, 32}};
  s[n++] = (hf_spec){"model.norm.weight", 1, {32}};
  s[n++] = (hf_spec){"lm_head.weight", 2, {64, 32}};
  for (int l = 0; l < 2; l++) {
    static const struct {
      const char *n;
      int rank;
      int64_t d0, d1;
    } per[] = {{"input_layernorm.weight", 1, 32, 0},    {"post_attention_layernorm.weight", 1, 32, 0},
               {"self_attn.q_proj.weight", 2, 32, 32}, {"self_attn.k_proj.weight", 2, 32, 32},
               {"self_attn.v_proj.weight", 2, 32, 32}, {"self_attn.o_proj.weight", 2, 32, 32},
               {"mlp.gate_proj.weight", 2, 96, 32},    {"mlp.up_proj.weight", 2, 96, 32},
               {"mlp.down_proj.weight", 2, 32, 96}};
    for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
      s[n] = (hf_spec){"", per[k].rank, {per[k].d0, per[k].d1}};
      snprintf(s[n].name, sizeof s[n].name, "model.layers.%d.%s", l, per[k].n);
      n++;
    }
  }
  rt_tensor **ts = write_hf(tmp("llama.safetensors"), s, n);
  char err[2048] = "";
  rt_weight_map *m = rt_weight_map_read("examples/maps/hf_llama.map", err, sizeof err);
  CHECK(m != NULL);
  rt_tensor **params = new_params(g);
  CHECK_EQ_INT(rt_weights_load(g, params, tmp("llama.safetensors"), m, NULL, err, sizeof err), 0);
  if (*err) fprintf(stderr, "%s\n", err);
  check_bound(g, params, "tok_embeddings", ts[0], false);
  check_bound(g, params, "output", ts[2], true);
  check_bound(g, params, "l.0.block.attention.wq", ts[3 + 2], true);
  check_bound(g, params, "l.1.block.feed_forward.w1", ts[3 + 9 + 6], true);
  check_bound(g, params, "l.1.block.feed_forward.w2", ts[3 + 9 + 8], true);
  check_round_trip(g, params, m, s, ts, n, tmp("llama_out.safetensors"));
  /* a Linear stored untransposed [in, out] by mistake: the shape after the transform is named */
  s[3 + 6].dims[0] = 32, s[3 + 6].dims[1] = 96;
  free_all(ts, n);
  ts = write_hf(tmp("llama_bad.safetensors"), s, n);
  CHECK_EQ_INT(rt_weights_load(g, params, tmp("llama_bad.safetensors"), m, NULL, err, sizeof err), -1);
  char want[1024];
  snprintf(want, sizeof want,
           "%s: tensor 'model.layers.0.mlp.gate_proj.weight' f32[32, 96] does not fit parameter "
           "'l.0.block.feed_forward.w1' f32[32, 96] (f32[96, 32] after the map's transforms)",
           tmp("llama_bad.safetensors"));
  CHECK_STR(err, want);
  free_all(ts, n);
  free_all(params, g->n_params);
  rt_weight_map_free(m);
  ir_graph_free(g);
  free(text);
}

static const char *write_text(const char *name, const char *body) {
  const char *p = tmp(name);
  FILE *f = fopen(p, "w");
  fputs(body, f);
  fclose(f);
  return p;
}

/* split (a fused qkv into q, k, v, joined back on export), rope and cast. */
static void test_split_rope_cast(void) {
  static const char *src = "config c { D = 4 }\n"
                           "param q: f32[D, D] = zeros\n"
                           "param k: f32[D, D] = zeros\n"
                           "param v: f32[D, D] = zeros\n"
                           "param g: f32[D] = zeros\n"
                           "fn main(x: f32[D]) -> f32[D] { return x * g }\n";
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *g = fe_compile("t.tg", src, strlen(src), &(fe_options){0}, d);
  ir_diag_free(d);
  CHECK(g != NULL);
  if (!g) return;
  /* fused [3D, D] rows (torch Linear): q rows 0..3, k 4..7, v 8..11; g in f64 */
  rt_tensor *qkv = filled(2, (int64_t[]){12, 4}, 1);
  ir_type t64 = {.dtype = IR_DT_F64, .rank = 1, .dims = {4}};
  rt_tensor *g64 = rt_tensor_new(&t64);
  for (int i = 0; i < 4; i++) ((double *)g64->data)[i] = 0.5 + i;
  rt_named_tensor nt[] = {{"qkv", qkv}, {"gamma", g64}};
  char err[2048] = "";
  CHECK_EQ_INT(rt_safetensors_write(tmp("fused.safetensors"), nt, 2, NULL, 0, err, sizeof err), 0);
  const char *map = write_text("fused.map", "# q, k, v from one fused tensor\n"
                                            "q = qkv split(0,3,0) rope(1) transpose\n"
                                            "k = qkv split(1,3,0) transpose\n"
                                            "v = qkv split(2,3,0) transpose\n"
                                            "g = gamma cast\n");
  rt_weight_map *m = rt_weight_map_read(map, err, sizeof err);
  CHECK(m != NULL);
  rt_tensor **params = new_params(g);
  CHECK_EQ_INT(rt_weights_load(g, params, tmp("fused.safetensors"), m, NULL, err, sizeof err), 0);
  if (*err) fprintf(stderr, "%s\n", err);
  const float *Q = params[param_index(g, "q")]->data, *K = params[param_index(g, "k")]->data;
  const float *X = qkv->data;
  /* rope(1) on rows [1 head, 2 halves, 2]: half-split row order 0 1 | 2 3 -> interleaved 0 2 1 3 */
  static const int rope_row[4] = {0, 2, 1, 3};
  int bad = 0;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      bad += Q[j * 4 + i] != X[rope_row[i] * 4 + j];
      bad += K[j * 4 + i] != X[(4 + i) * 4 + j];
    }
  CHECK_EQ_INT(bad, 0);
  CHECK(((const float *)params[param_index(g, "g")]->data)[3] == 3.5f);
  /* export joins q, k, v back into qkv, rows permuted back; g is written as f32 */
  CHECK_EQ_INT(rt_weights_export(g, params, m, tmp("fused_out.safetensors"), err, sizeof err), 0);
  rt_safetensors *f = rt_safetensors_read(tmp("fused_out.safetensors"), err, sizeof err);
  CHECK(f != NULL);
  const rt_tensor *back = f ? rt_safetensors_find(f, "qkv") : NULL;
  CHECK(back && back->nbytes == qkv->nbytes && memcmp(back->data, qkv->data, qkv->nbytes) == 0);
  CHECK(f && rt_safetensors_find(f, "gamma") && rt_safetensors_find(f, "gamma")->type.dtype == IR_DT_F32);
  rt_safetensors_free(f);
  rt_weight_map_free(m);

  /* without cast, the dtypes must agree */
  m = rt_weight_map_read(write_text("nocast.map", "q = qkv split(0,3,0)\nk = qkv split(1,3,0)\n"
                                                  "v = qkv split(2,3,0)\ng = gamma\n"),
                         err, sizeof err);
  CHECK_EQ_INT(rt_weights_load(g, params, tmp("fused.safetensors"), m, NULL, err, sizeof err), -1);
  char want[1024];
  snprintf(want, sizeof want,
           "%s: tensor 'gamma' f64[4] does not fit parameter 'g' f32[4]: the dtypes differ (the map's 'cast' converts)",
           tmp("fused.safetensors"));
  CHECK_STR(err, want);
  /* export with a part missing: q, k only */
  rt_weight_map_free(m);
  m = rt_weight_map_read(write_text("twoparts.map", "q = qkv split(0,3,0)\nk = qkv split(1,3,0)\n"
                                                    "v = vv\ng = gamma\n"),
                         err, sizeof err);
  CHECK_EQ_INT(rt_weights_export(g, params, m, tmp("x.safetensors"), err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: 2 of the 3 parts of tensor 'qkv' are parameters of the model", tmp("twoparts.map"));
  CHECK_STR(err, want);
  rt_weight_map_free(m);
  /* a parameter with no line in the map */
  m = rt_weight_map_read(write_text("partial.map", "q = qkv split(0,3,0)\n"), err, sizeof err);
  CHECK_EQ_INT(rt_weights_load(g, params, tmp("fused.safetensors"), m, NULL, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: parameter 'k' has no line in the name map", tmp("partial.map"));
  CHECK_STR(err, want);
  rt_weight_map_free(m);
  free_all(params, g->n_params);
  rt_tensor_free(qkv);
  rt_tensor_free(g64);
  ir_graph_free(g);
}

/* Map syntax errors: MAP:LINE: error: ... */
static void test_map_errors(void) {
  static const struct {
    const char *body, *msg;
  } cases[] = {
      {"wte\n", "%s:1: error: expected 'tgc-name = hf-name [transform...]'"},
      {"\n# c\nl.{i}.a = b.c\n",
       "%s:3: error: expected 'tgc-name = hf-name [transform...]' (names without spaces, '{i}' on both sides or "
       "neither)"},
      {"a = b flip\n", "%s:1: error: unknown transform 'flip' (known: transpose, split(K,N,AXIS), rope(HEADS), cast)"},
      {"a = b transpose split(0,2,0)\n", "%s:1: error: split(...) must be the first transform"},
      {"a = b split(2,2,0)\n", "%s:1: error: unknown transform 'split(2,2,0)' (known: transpose, split(K,N,AXIS), "
                               "rope(HEADS), cast)"},
      {"!\n", "%s:1: error: expected '! GLOB' (one pattern of tensors to leave unused)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *p = write_text("bad.map", cases[i].body);
    char err[1024] = "", want[1024];
    rt_weight_map *m = rt_weight_map_read(p, err, sizeof err);
    CHECK(m == NULL);
    snprintf(want, sizeof want, cases[i].msg, p);
    CHECK_STR(err, want);
  }
  char err[512];
  CHECK(rt_weight_map_read(tmp("absent.map"), err, sizeof err) == NULL);
  char want[512];
  snprintf(want, sizeof want, "%s: cannot open the name map: No such file or directory", tmp("absent.map"));
  CHECK_STR(err, want);
}

int main(void) {
  if (!mkdtemp(tmpdir)) return 1;
  test_gpt2();
  test_llama();
  test_split_rope_cast();
  test_map_errors();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return check_done();
}
