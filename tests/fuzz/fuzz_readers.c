/* tests/fuzz/fuzz_readers.c — libFuzzer target: the file readers of the
 * runtime must refuse malformed files with a message, never crash, hang or
 * allocate more than the file justifies. The input is written to a file and
 * read by every reader: rt_npy_read (--input NAME=@F.npy),
 * rt_safetensors_read (--resume: header, offsets, the data_crc32 check; its
 * metadata walked), and the data sources tokens:F and text:F bound to a
 * small sequence model [2, 4] and filled for two steps, and
 * rt_tokenizer_load (--tokenizer: a tokenizer.json) with a text encoded and
 * its ids decoded.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_tokenizer.h"
#include "rt_io.h"

static ir_graph *sequence_model(void) {
  ir_graph *g = ir_graph_new("seq", NULL);
  ir_type t = {.dtype = IR_DT_I32, .rank = 2, .dims = {2, 4}};
  ir_graph_add_input(g, "tokens", t, (ir_loc){0});
  ir_graph_add_input(g, "targets", t, (ir_loc){0});
  return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[64];
  static ir_graph *model;
  if (!path[0]) snprintf(path, sizeof path, "/tmp/tgc_fuzz_readers.%ld", (long)getpid());
  if (!model) model = sequence_model();
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  char err[1024];
  rt_tensor *t = rt_npy_read(path, err, sizeof err);
  rt_tensor_free(t);
  rt_safetensors *st = rt_safetensors_read(path, err, sizeof err);
  if (st) {
    for (int i = 0; i < rt_safetensors_meta_count(st); i++)
      if (!rt_safetensors_meta(st, rt_safetensors_meta_key(st, i))) abort();
    for (int i = 0; i < rt_safetensors_count(st); i++)
      if (rt_safetensors_find(st, rt_safetensors_name(st, i)) == NULL) abort();
    rt_safetensors_free(st);
  }
  static const char *const kinds[2] = {"tokens:", "text:"};
  for (int k = 0; k < 2; k++) {
    char spec[128];
    snprintf(spec, sizeof spec, "%s%s", kinds[k], path);
    rt_data *ds = rt_data_open(spec, 0, err, sizeof err);
    if (!ds) continue;
    if (rt_data_bind(ds, model, err, sizeof err) == 0) {
      rt_tensor *in[2] = {rt_tensor_new(&model->inputs[0]->type), rt_tensor_new(&model->inputs[1]->type)};
      for (int step = 0; step < 2; step++) rt_data_fill(ds, 7, step, 0, in, err, sizeof err);
      rt_tensor_free(in[0]);
      rt_tensor_free(in[1]);
    }
    rt_data_free(ds);
  }
  rt_tokenizer *tok = rt_tokenizer_load(path, err, sizeof err);
  if (tok) {
    static const char text[] = "Hello,  wörld! 你好 'll 123456 \xf0\x9f\x98\x80\n [CLS]";
    int32_t *ids;
    size_t n, len;
    if (rt_tokenizer_encode(tok, text, sizeof text - 1, true, &ids, &n, err, sizeof err) == 0) {
      char *back = rt_tokenizer_decode(tok, ids, n, true, &len, err, sizeof err);
      free(back);
      free(ids);
    }
    rt_tokenizer_free(tok);
  }
  return 0;
}
