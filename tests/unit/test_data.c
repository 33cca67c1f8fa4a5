/* tests/unit/test_data.c — the training data sources (runtime/io/data.c):
 * what each task puts in the inputs, the bias feature, both layouts,
 * determinism in (seed, step, micro-batch), text and token files (raw and
 * llm.c's format, written here), .npy arrays bound by name (shuffled per
 * epoch, the last partial batch dropped), evaluation batches, and the exact
 * errors for models whose inputs or files do not fit a source.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ir.h"
#include "rt_train.h"
#include "rt_tokenizer.h"

static ir_graph *vector_model(const char *xname, int64_t d0, int64_t d1, const char *yname, int yrank, int64_t batch) {
  ir_graph *g = ir_graph_new("main", NULL);
  ir_loc loc = {0};
  ir_type xt = {.dtype = IR_DT_F64, .rank = 2, .dims = {d0, d1}};
  ir_type yt = {.dtype = IR_DT_F32, .rank = yrank, .dims = {batch, 1}};
  ir_graph_add_input(g, xname, xt, loc);
  ir_graph_add_input(g, yname, yt, loc);
  return g;
}

/* tokens/targets i32[B, T] and an embedding table of `vocab` rows. */
static ir_graph *sequence_model(int64_t B, int64_t T, int64_t vocab) {
  ir_graph *g = ir_graph_new("main", NULL);
  ir_loc loc = {0};
  ir_type it = {.dtype = IR_DT_I32, .rank = 2, .dims = {B, T}};
  ir_type tt = {.dtype = IR_DT_F32, .rank = 2, .dims = {vocab, 4}};
  ir_value *tok = ir_graph_add_input(g, "tokens", it, loc);
  ir_graph_add_input(g, "targets", it, loc);
  ir_value *table = ir_graph_add_param(g, "wte", tt, (ir_init){0}, loc);
  ir_value *in[2] = {table, tok};
  ir_value *e = ir_graph_build1(g, IR_OP_EMBEDDING, in, 2, NULL, 0, "e", loc);
  ir_graph_add_output(g, "e", e);
  return g;
}

static rt_tensor **alloc_inputs(const ir_graph *g) {
  rt_tensor **t = calloc((size_t)g->n_inputs, sizeof *t);
  for (int i = 0; i < g->n_inputs; i++) t[i] = rt_tensor_new(&g->inputs[i]->type);
  return t;
}
static void free_inputs(const ir_graph *g, rt_tensor **t) {
  for (int i = 0; i < g->n_inputs; i++) rt_tensor_free(t[i]);
  free(t);
}
static bool same_tensor(const rt_tensor *a, const rt_tensor *b) {
  return a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

static void test_xor(void) {
  char err[512];
  /* X [features 4, batch 8] */
  ir_graph *g = vector_model("X", 4, 8, "Y", 1, 8);
  rt_data *ds = rt_data_open("xor", 0, err, sizeof err);
  CHECK(ds != NULL);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), 0);
  CHECK_EQ_INT(rt_data_batch_items(ds), 8);
  CHECK(!rt_data_is_sequence(ds));
  rt_tensor **in = alloc_inputs(g);
  CHECK_EQ_INT(rt_data_fill(ds, 1, 5, 0, in, err, sizeof err), 0);
  int seen[4] = {0};
  for (int j = 0; j < 8; j++) {
    double x1 = rt_tensor_get(in[0], 0 * 8 + j), x2 = rt_tensor_get(in[0], 1 * 8 + j);
    CHECK(x1 == 0 || x1 == 1);
    CHECK(x2 == 0 || x2 == 1);
    CHECK(rt_tensor_get(in[0], 2 * 8 + j) == 1.0); /* the bias feature */
    CHECK(rt_tensor_get(in[0], 3 * 8 + j) == 0.0);
    CHECK(rt_tensor_get(in[1], j) == (double)((int)x1 ^ (int)x2));
    seen[(int)x1 + 2 * (int)x2]++;
  }
  for (int p = 0; p < 4; p++) CHECK_EQ_INT(seen[p], 2); /* each point twice in a batch of 8 */
  free_inputs(g, in);
  rt_data_free(ds);
  ir_graph_free(g);

  /* x [batch 4, features 2]: no room for a bias feature, none added */
  g = vector_model("x", 4, 2, "y", 2, 4);
  ds = rt_data_open("xor", 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), 0);
  in = alloc_inputs(g);
  CHECK_EQ_INT(rt_data_fill(ds, 1, 0, 0, in, err, sizeof err), 0);
  for (int j = 0; j < 4; j++) {
    int x1 = (int)rt_tensor_get(in[0], j * 2), x2 = (int)rt_tensor_get(in[0], j * 2 + 1);
    CHECK(rt_tensor_get(in[1], j) == (double)(x1 ^ x2));
  }
  free_inputs(g, in);
  rt_data_free(ds);
  ir_graph_free(g);
}

static void test_regression(void) {
  char err[512];
  ir_graph *g = vector_model("X", 5, 16, "Y", 1, 16);
  rt_data *ds = rt_data_open("regression", 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), 0);
  rt_tensor **a = alloc_inputs(g), **b = alloc_inputs(g), **c = alloc_inputs(g);
  rt_data_fill(ds, 3, 7, 1, a, err, sizeof err);
  rt_data_fill(ds, 3, 7, 1, b, err, sizeof err);
  rt_data_fill(ds, 3, 8, 1, c, err, sizeof err);
  CHECK(same_tensor(a[0], b[0]) && same_tensor(a[1], b[1])); /* a function of (seed, step, micro) */
  CHECK(!same_tensor(a[0], c[0]));
  rt_data_fill(ds, 3, 7, 2, c, err, sizeof err);
  CHECK(!same_tensor(a[0], c[0]));
  for (int j = 0; j < 16; j++) CHECK(rt_tensor_get(a[0], 4 * 16 + j) == 1.0); /* 4 task features, then the bias */
  free_inputs(g, a);
  free_inputs(g, b);
  free_inputs(g, c);
  rt_data_free(ds);
  ir_graph_free(g);
}

static void test_sequences(void) {
  char err[512];
  const char *tasks[] = {"copy", "reverse", "sort"};
  for (int k = 0; k < 3; k++) {
    ir_graph *g = sequence_model(3, 8, 32);
    rt_data *ds = rt_data_open(tasks[k], 12, err, sizeof err);
    CHECK(ds != NULL);
    CHECK(rt_data_is_sequence(ds));
    CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), 0);
    CHECK_EQ_INT(rt_data_batch_items(ds), 24);
    CHECK_EQ_INT(rt_data_targets_input(ds), 1);
    rt_tensor **in = alloc_inputs(g), **again = alloc_inputs(g);
    CHECK_EQ_INT(rt_data_fill(ds, 9, 4, 0, in, err, sizeof err), 0);
    rt_data_fill(ds, 9, 4, 0, again, err, sizeof err);
    CHECK(same_tensor(in[0], again[0]) && same_tensor(in[1], again[1]));
    for (int b = 0; b < 3; b++)
      for (int t = 0; t < 8; t++) {
        double tok = rt_tensor_get(in[0], b * 8 + t), tgt = rt_tensor_get(in[1], b * 8 + t);
        CHECK(tok >= 0 && tok < 12);
        if (k == 0) CHECK(tgt == tok);
        if (k == 1) CHECK(tgt == rt_tensor_get(in[0], b * 8 + 7 - t));
        if (k == 2 && t > 0) CHECK(tgt >= rt_tensor_get(in[1], b * 8 + t - 1));
      }
    if (k == 2) { /* sorted targets are a permutation of the tokens: same sum */
      double s1 = 0, s2 = 0;
      for (int i = 0; i < 24; i++) s1 += rt_tensor_get(in[0], i), s2 += rt_tensor_get(in[1], i);
      CHECK(s1 == s2);
    }
    free_inputs(g, in);
    free_inputs(g, again);
    rt_data_free(ds);
    ir_graph_free(g);
  }
  /* the vocabulary defaults to the model's, and may not exceed it */
  ir_graph *g = sequence_model(2, 4, 7);
  rt_data *ds = rt_data_open("copy", 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), 0);
  rt_data_free(ds);
  ds = rt_data_open("copy", 8, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  CHECK_STR(err, "--vocab 8 is larger than the model's vocabulary 7");
  rt_data_free(ds);
  ir_graph_free(g);
}

static void test_files(void) {
  char err[512], dir[] = "/tmp/tgc_data_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char text[600], toks[600], odd[600];
  snprintf(text, sizeof text, "%s/a.txt", dir);
  snprintf(toks, sizeof toks, "%s/a.tok", dir);
  snprintf(odd, sizeof odd, "%s/odd.tok", dir);
  const char *body = "the quick brown fox jumps over the lazy dog";
  FILE *f = fopen(text, "wb");
  fputs(body, f);
  fclose(f);
  f = fopen(toks, "wb");
  for (int i = 0; i < 50; i++) {
    unsigned char b[2] = {(unsigned char)(i % 40), 0};
    fwrite(b, 1, 2, f);
  }
  fclose(f);
  f = fopen(odd, "wb");
  fputs("abc", f);
  fclose(f);

  char spec[700];
  snprintf(spec, sizeof spec, "text:%s", text);
  ir_graph *g = sequence_model(2, 6, 256);
  rt_data *ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK(ds != NULL);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), 0);
  rt_tensor **in = alloc_inputs(g);
  CHECK_EQ_INT(rt_data_fill(ds, 1, 3, 0, in, err, sizeof err), 0);
  for (int b = 0; b < 2; b++) {
    char window[8] = {0};
    for (int t = 0; t < 6; t++) window[t] = (char)rt_tensor_get(in[0], b * 6 + t);
    CHECK(strstr(body, window) != NULL);
    for (int t = 0; t + 1 < 6; t++) CHECK(rt_tensor_get(in[1], b * 6 + t) == rt_tensor_get(in[0], b * 6 + t + 1));
  }
  free_inputs(g, in);
  rt_data_free(ds);
  ir_graph_free(g);

  /* a byte file needs a vocabulary of 256 */
  g = sequence_model(2, 6, 32);
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  char want[900];
  snprintf(want, sizeof want, "data source '%s' has tokens up to 255 but the model's vocabulary is 32 (--vocab 256 sets V)",
           spec);
  CHECK_STR(err, want);
  rt_data_free(ds);
  ir_graph_free(g);

  /* uint16 tokens: the largest is 39 */
  snprintf(spec, sizeof spec, "tokens:%s", toks);
  g = sequence_model(2, 6, 40);
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), 0);
  in = alloc_inputs(g);
  CHECK_EQ_INT(rt_data_fill(ds, 1, 0, 0, in, err, sizeof err), 0);
  for (int i = 0; i < 12; i++) {
    double tok = rt_tensor_get(in[0], i);
    CHECK(tok >= 0 && tok < 40);
    if (i % 6 < 5) CHECK(rt_tensor_get(in[1], i) == rt_tensor_get(in[0], i + 1));
  }
  free_inputs(g, in);
  rt_data_free(ds);
  ir_graph_free(g);
  g = sequence_model(2, 6, 39);
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  rt_data_free(ds);
  ir_graph_free(g);
  /* windows longer than the file */
  g = sequence_model(2, 50, 40);
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  snprintf(want, sizeof want, "data source '%s': the file holds 50 tokens, fewer than one window of T + 1 = 51", spec);
  CHECK_STR(err, want);
  rt_data_free(ds);
  ir_graph_free(g);

  snprintf(spec, sizeof spec, "tokens:%s", odd);
  CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s: 3 bytes is an odd size: not a file of uint16 tokens", odd);
  CHECK_STR(err, want);
  snprintf(spec, sizeof spec, "text:%s/missing.txt", dir);
  CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s/missing.txt: cannot open: No such file or directory", dir);
  CHECK_STR(err, want);
  remove(text);
  remove(toks);
  remove(odd);
  rmdir(dir);
}

/* text:PATH through a tokenizer.json: the windows are runs of the file's
 * ids under that tokenizer (the same ids rt_tokenizer_encode gives the
 * whole text, no special tokens), eval batches in order from the first id;
 * the vocabulary is the tokenizer's; other sources are refused. */
static void test_text_tokenizer(void) {
  char err[512], dir[] = "/tmp/tgc_data_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char text[600], spec[700];
  snprintf(text, sizeof text, "%s/a.txt", dir);
  snprintf(spec, sizeof spec, "text:%s", text);
  const char *body = "the quick brown fox jumps over the lazy dog. Naïve café, 東京! 12345 ";
  FILE *f = fopen(text, "wb");
  for (int i = 0; i < 4; i++) fputs(body, f);
  fclose(f);
  const char *tj = "tests/data/tokenizers/bpe_gpt2.json";
  rt_tokenizer *tok = rt_tokenizer_load(tj, err, sizeof err);
  CHECK(tok != NULL);
  char all[1024] = "";
  for (int i = 0; i < 4; i++) strcat(all, body);
  int32_t *ids = NULL;
  size_t n = 0;
  CHECK_EQ_INT(rt_tokenizer_encode(tok, all, strlen(all), false, &ids, &n, err, sizeof err), 0);
  CHECK_EQ_INT(rt_tokenizer_vocab_size(tok), 1500);
  rt_tokenizer_free(tok);

  ir_graph *g = sequence_model(3, 5, 1500);
  rt_data *ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_use_tokenizer(ds, tj, err, sizeof err), 0);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), 0);
  rt_tensor **in = alloc_inputs(g);
  int found = 0;
  for (int step = 0; step < 4; step++) {
    CHECK_EQ_INT(rt_data_fill(ds, 7, step, 0, in, err, sizeof err), 0);
    for (int b = 0; b < 3; b++)
      for (size_t s = 0; s + 6 <= n; s++) { /* the window is ids[s .. s + 6) for some s */
        bool same = true;
        for (int t = 0; t < 5 && same; t++)
          same = rt_tensor_get(in[0], b * 5 + t) == ids[s + t] && rt_tensor_get(in[1], b * 5 + t) == ids[s + t + 1];
        if (same) {
          found++;
          break;
        }
      }
  }
  CHECK_EQ_INT(found, 12);
  CHECK(rt_data_eval_batches(ds) == (int64_t)(n - 1) / 5 / 3);
  CHECK_EQ_INT(rt_data_fill_eval(ds, 7, 0, in, err, sizeof err), 0);
  for (int t = 0; t < 15; t++) CHECK(rt_tensor_get(in[0], t) == ids[t] && rt_tensor_get(in[1], t) == ids[t + 1]);
  free_inputs(g, in);
  rt_data_free(ds);
  ir_graph_free(g);

  /* the tokenizer's vocabulary, not 256, and not the largest id in the file */
  g = sequence_model(3, 5, 1499);
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_use_tokenizer(ds, tj, err, sizeof err), 0);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  char want[900];
  snprintf(want, sizeof want,
           "data source '%s' has tokens up to 1499 but the model's vocabulary is 1499 (--vocab 1500 sets V)", spec);
  CHECK_STR(err, want);
  rt_data_free(ds);
  ir_graph_free(g);
  /* refusals: not a text file; a tokenizer file that is not one */
  ds = rt_data_open("copy", 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_use_tokenizer(ds, tj, err, sizeof err), -1);
  CHECK_STR(err, "data source 'copy' is not text:PATH: a tokenizer encodes a text file");
  rt_data_free(ds);
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_use_tokenizer(ds, text, err, sizeof err), -1);
  CHECK(strncmp(err, text, strlen(text)) == 0); /* "PATH:LINE:COL: not valid JSON ..." */
  rt_data_free(ds);
  rt_train_settings st = {.vocab = 1500, .vocab_set = true, .tokenizer = "absent.json", .tokenizer_set = true};
  CHECK(rt_data_open_settings(&st, spec, err, sizeof err) == NULL);
  CHECK_STR(err, "--tokenizer: absent.json: cannot read: No such file or directory");
  free(ids);
  remove(text);
  rmdir(dir);
}

/* A token file in llm.c's format (dev/data/data_common.py write_datafile):
 * 256 int32 (magic, version, count; zeros), then count uint16 tokens;
 * `count` is what the header says, n the tokens written. */
static void write_llmc(const char *path, int32_t magic, int32_t version, int32_t count, int n, int vocab) {
  FILE *f = fopen(path, "wb");
  int32_t h[256] = {magic, version, count};
  fwrite(h, sizeof h, 1, f);
  for (int i = 0; i < n; i++) {
    uint16_t t = (uint16_t)((i * 7) % vocab);
    fwrite(&t, 2, 1, f);
  }
  fclose(f);
}

static void test_llmc(void) {
  char err[512], dir[] = "/tmp/tgc_llmc_XXXXXX", bin[600], raw[600], spec[700], want[1200];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(bin, sizeof bin, "%s/train.bin", dir);
  snprintf(raw, sizeof raw, "%s/train.tok", dir);
  write_llmc(bin, 20240520, 1, 50, 50, 40);
  FILE *f = fopen(raw, "wb");
  for (int i = 0; i < 50; i++) {
    uint16_t t = (uint16_t)((i * 7) % 40);
    fwrite(&t, 2, 1, f);
  }
  fclose(f);
  /* read as tokens, not the header: eval batch 1 is windows 2 and 3 of T = 6 */
  ir_graph *g = sequence_model(2, 6, 40);
  snprintf(spec, sizeof spec, "tokens:%s", bin);
  rt_data *ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK(ds != NULL);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), 0);
  CHECK_EQ_INT(rt_data_eval_batches(ds), 4); /* 49 / 6 = 8 windows, 4 batches of 2 */
  rt_tensor **in = alloc_inputs(g);
  CHECK_EQ_INT(rt_data_fill_eval(ds, 0, 1, in, err, sizeof err), 0);
  for (int b = 0; b < 2; b++)
    for (int t = 0; t < 6; t++) {
      int at = (2 + b) * 6 + t;
      CHECK_EQ_INT((int)rt_tensor_get(in[0], b * 6 + t), (at * 7) % 40);
      CHECK_EQ_INT((int)rt_tensor_get(in[1], b * 6 + t), ((at + 1) * 7) % 40);
    }
  CHECK_EQ_INT(rt_data_fill_eval(ds, 0, 4, in, err, sizeof err), -1);
  /* training windows: the same as the raw file's (the header skipped) */
  rt_tensor **r = alloc_inputs(g);
  snprintf(spec, sizeof spec, "tokens:%s", raw);
  rt_data *rs = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(rs, g, err, sizeof err), 0);
  CHECK_EQ_INT(rt_data_fill(ds, 3, 9, 0, in, err, sizeof err), 0);
  CHECK_EQ_INT(rt_data_fill(rs, 3, 9, 0, r, err, sizeof err), 0);
  CHECK(same_tensor(in[0], r[0]) && same_tensor(in[1], r[1]));
  free_inputs(g, in);
  free_inputs(g, r);
  rt_data_free(ds);
  rt_data_free(rs);
  ir_graph_free(g);

  /* malformed: each refused with its name and what was expected */
  write_llmc(bin, 20240521, 1, 50, 50, 40);
  snprintf(spec, sizeof spec, "tokens:%s", bin);
  CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s: bad magic 20240521: not an llm.c token file (expected 20240520; a raw uint16 token file must not be named .bin)", bin);
  CHECK_STR(err, want);
  write_llmc(bin, 20240520, 2, 50, 50, 40);
  CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s: llm.c token file version 2, expected 1 (uint16 tokens)", bin);
  CHECK_STR(err, want);
  write_llmc(bin, 20240520, 1, 60, 50, 40);
  CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s: the header says 60 tokens (120 bytes after the 1024-byte header), the file has 100 bytes there (truncated)", bin);
  CHECK_STR(err, want);
  f = fopen(bin, "wb");
  fwrite("\x88\xd8\x34\x01\x01\x00", 6, 1, f); /* the magic, then nothing of the header */
  fclose(f);
  CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s: truncated llm.c header: 6 bytes, expected 1024", bin);
  CHECK_STR(err, want);
  f = fopen(bin, "wb");
  fclose(f);
  CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s: 0 bytes: too short for llm.c's token header (1024 bytes, magic 20240520)", bin);
  CHECK_STR(err, want);
  remove(bin);
  remove(raw);
  rmdir(dir);
}

static ir_graph *npy_model(ir_dtype xdt, int64_t B, int64_t F, ir_dtype ydt) {
  ir_graph *g = ir_graph_new("main", NULL);
  ir_loc loc = {0};
  ir_type xt = {.dtype = xdt, .rank = 2, .dims = {B, F}}, yt = {.dtype = ydt, .rank = 1, .dims = {B}};
  ir_graph_add_input(g, "x", xt, loc);
  ir_graph_add_input(g, "y", yt, loc);
  return g;
}

/* x [n, f]: x[i][c] = 10 i + c; y [n]: i (dtype ydt) */
static void write_arrays(const char *xp, const char *yp, int64_t n, int64_t f, ir_dtype ydt) {
  char err[512];
  ir_type xt = {.dtype = IR_DT_F32, .rank = 2, .dims = {n, f}}, yt = {.dtype = ydt, .rank = 1, .dims = {n}};
  rt_tensor *x = rt_tensor_new(&xt), *y = rt_tensor_new(&yt);
  for (int64_t i = 0; i < n; i++) {
    for (int64_t c = 0; c < f; c++) rt_tensor_set(x, i * f + c, (double)(10 * i + c));
    rt_tensor_set(y, i, (double)i);
  }
  CHECK_EQ_INT(rt_npy_write(xp, x, err, sizeof err), 0);
  CHECK_EQ_INT(rt_npy_write(yp, y, err, sizeof err), 0);
  rt_tensor_free(x);
  rt_tensor_free(y);
}

static void test_npy(void) {
  char err[512], dir[] = "/tmp/tgc_npy_XXXXXX", xp[600], yp[600], spec[2000], want[3000];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(xp, sizeof xp, "%s/x.npy", dir);
  snprintf(yp, sizeof yp, "%s/y.npy", dir);
  write_arrays(xp, yp, 10, 3, IR_DT_I64); /* integer labels in i64, into an i32 input */
  snprintf(spec, sizeof spec, "npy:x=%s,y=%s", xp, yp);
  ir_graph *g = npy_model(IR_DT_F32, 4, 3, IR_DT_I32);
  rt_data *ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK(ds != NULL);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), 0);
  CHECK(!rt_data_is_sequence(ds));
  CHECK_EQ_INT(rt_data_batch_items(ds), 4);
  CHECK_EQ_INT(rt_data_batch_dim(ds, 0), 0);
  CHECK_EQ_INT(rt_data_batch_dim(ds, 1), 0);
  CHECK_EQ_INT(rt_data_targets_input(ds), 1);
  CHECK_EQ_INT(rt_data_eval_batches(ds), 2);
  /* one epoch: 2 batches of 4 distinct samples (10 = 2 x 4 + 2 dropped), rows intact */
  rt_tensor **in = alloc_inputs(g), **again = alloc_inputs(g);
  int seen[10] = {0};
  for (int step = 0; step < 2; step++) {
    CHECK_EQ_INT(rt_data_fill(ds, 5, step, 0, in, err, sizeof err), 0);
    for (int j = 0; j < 4; j++) {
      int s = (int)rt_tensor_get(in[1], j);
      CHECK(s >= 0 && s < 10);
      seen[s]++;
      for (int c = 0; c < 3; c++) CHECK(rt_tensor_get(in[0], j * 3 + c) == 10.0 * s + c);
    }
  }
  int once = 0;
  for (int s = 0; s < 10; s++) {
    CHECK(seen[s] <= 1);
    once += seen[s];
  }
  CHECK_EQ_INT(once, 8);
  /* a function of (seed, step, micro): the same again; another epoch another order */
  CHECK_EQ_INT(rt_data_fill(ds, 5, 1, 0, in, err, sizeof err), 0);
  CHECK_EQ_INT(rt_data_fill(ds, 5, 7, 0, again, err, sizeof err), 0);
  CHECK_EQ_INT(rt_data_fill(ds, 5, 1, 0, again, err, sizeof err), 0);
  CHECK(same_tensor(in[0], again[0]) && same_tensor(in[1], again[1]));
  bool differs = false;
  for (int e = 1; e < 6 && !differs; e++) {
    CHECK_EQ_INT(rt_data_fill(ds, 5, 2 * e + 1, 0, again, err, sizeof err), 0);
    differs = !same_tensor(in[1], again[1]);
  }
  CHECK(differs);
  /* K = 2 micro-batches a step: (step 0, micro 1) is batch 1 */
  rt_data_set_micro_batches(ds, 2);
  CHECK_EQ_INT(rt_data_fill(ds, 5, 0, 1, again, err, sizeof err), 0);
  CHECK(same_tensor(in[1], again[1]));
  /* evaluation: samples in file order */
  CHECK_EQ_INT(rt_data_fill_eval(ds, 5, 1, in, err, sizeof err), 0);
  for (int j = 0; j < 4; j++) CHECK_EQ_INT((int)rt_tensor_get(in[1], j), 4 + j);
  free_inputs(g, in);
  free_inputs(g, again);
  rt_data_free(ds);
  ir_graph_free(g);

  /* refusals, exact */
  g = npy_model(IR_DT_F32, 4, 3, IR_DT_I32);
  write_arrays(xp, yp, 10, 3, IR_DT_F32); /* float labels into an i32 input */
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: dtype <f4 does not fit input 'y' i32[4]: expected integers (<i4 or <i8)", yp);
  CHECK_STR(err, want);
  rt_data_free(ds);
  write_arrays(xp, yp, 10, 2, IR_DT_I32); /* 2 features, the input has 3 */
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  snprintf(want, sizeof want, "%s: shape (10, 2) does not match input 'x' f32[4, 3]: expected (N, 3) (N samples of the input's shape less its batch dim)", xp);
  CHECK_STR(err, want);
  rt_data_free(ds);
  write_arrays(xp, yp, 3, 3, IR_DT_I32); /* fewer samples than a batch */
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  snprintf(want, sizeof want, "data source '%s' holds 3 samples, fewer than one batch of 4", spec);
  CHECK_STR(err, want);
  rt_data_free(ds);
  write_arrays(xp, yp, 10, 3, IR_DT_I32);
  snprintf(spec, sizeof spec, "npy:x=%s", xp); /* y not fed */
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  snprintf(want, sizeof want, "data source '%s' feeds no array to the model's input 'y' (add y=FILE.npy)", spec);
  CHECK_STR(err, want);
  rt_data_free(ds);
  snprintf(spec, sizeof spec, "npy:x=%s,y=%s,z=%s", xp, yp, yp); /* an input the model lacks */
  ds = rt_data_open(spec, 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  snprintf(want, sizeof want, "data source '%s': the model has no input 'z' (its inputs: x, y)", spec);
  CHECK_STR(err, want);
  rt_data_free(ds);
  ir_graph_free(g);
  CHECK(rt_data_open("npy:x", 0, err, sizeof err) == NULL);
  CHECK_STR(err, "data source 'npy:x': expected NAME=PATH (a model input and its .npy file), got 'x'");
  CHECK(rt_data_open("npy:", 0, err, sizeof err) == NULL);
  CHECK_STR(err, "data source 'npy:': expected NAME=PATH (a model input and its .npy file), got ''");
  snprintf(spec, sizeof spec, "npy:x=%s,x=%s", xp, xp);
  CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "data source '%s': input 'x' is given twice", spec);
  CHECK_STR(err, want);
  write_arrays(xp, yp, 10, 3, IR_DT_I32);
  char y9[640];
  snprintf(y9, sizeof y9, "%s/y9.npy", dir);
  write_arrays(xp, y9, 9, 3, IR_DT_I32);
  write_arrays(xp, yp, 10, 3, IR_DT_I32);
  snprintf(spec, sizeof spec, "npy:x=%s,y=%s", xp, y9);
  CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s holds 9 samples (dim 0) but %s holds 10: every array needs one row per sample", y9, xp);
  CHECK_STR(err, want);
  /* a malformed .npy: the reader's message, naming the file */
  FILE *f = fopen(yp, "wb");
  fputs("not numpy", f);
  fclose(f);
  snprintf(spec, sizeof spec, "npy:x=%s,y=%s", xp, yp);
  CHECK(rt_data_open(spec, 0, err, sizeof err) == NULL);
  snprintf(want, sizeof want, "%s: not a .npy file (bad magic)", yp);
  CHECK_STR(err, want);
  remove(xp);
  remove(yp);
  remove(y9);
  rmdir(dir);
}

static void test_errors(void) {
  char err[512];
  CHECK(rt_data_open("mnist", 0, err, sizeof err) == NULL);
  CHECK_STR(err, "unknown data source 'mnist' (known: xor, regression, copy, reverse, sort, text:PATH, tokens:PATH, npy:NAME=PATH,...)");
  CHECK(rt_data_open("xor", 5, err, sizeof err) == NULL);
  CHECK_STR(err, "data source 'xor' has no vocabulary");

  /* a sequence model given a vector task */
  ir_graph *g = sequence_model(2, 4, 8);
  rt_data *ds = rt_data_open("xor", 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  CHECK_STR(err, "data source 'xor' feeds inputs X [features, batch] or x [batch, features] and Y or y [batch]; the model also has input 'tokens'");
  rt_data_free(ds);
  ir_graph_free(g);

  /* a vector model given a sequence task */
  g = vector_model("X", 4, 8, "Y", 1, 8);
  ds = rt_data_open("reverse", 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  CHECK_STR(err, "data source 'reverse' feeds inputs 'tokens' and 'targets'; the model also has input 'X'");
  rt_data_free(ds);
  ir_graph_free(g);

  /* targets whose batch does not match */
  g = vector_model("X", 4, 8, "Y", 1, 6);
  ds = rt_data_open("xor", 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  CHECK_STR(err, "data source 'xor': targets Y must be [8] or [8, 1] (the batch of X f64[4, 8])");
  rt_data_free(ds);
  ir_graph_free(g);

  /* one feature is too few for xor */
  g = vector_model("X", 1, 8, "Y", 1, 8);
  ds = rt_data_open("xor", 0, err, sizeof err);
  CHECK_EQ_INT(rt_data_bind(ds, g, err, sizeof err), -1);
  CHECK_STR(err, "data source 'xor' has 2 features but the model's X has 1");
  rt_data_free(ds);
  ir_graph_free(g);
}

int main(void) {
  test_xor();
  test_regression();
  test_sequences();
  test_files();
  test_text_tokenizer();
  test_llmc();
  test_npy();
  test_errors();
  return check_done();
}
