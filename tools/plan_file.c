/* tools/plan_file.c — plan files: `tgc plan --save-plan FILE` writes the
 * chosen plan as one JSON object (plan_print.c builds it), `tgc train
 * --plan FILE` reads it back here (docs/plan.md, "Plan files"). Reading
 * checks the format, the version and every field train uses, and each
 * refusal is one line naming the file: a plan is run on many ranks for a
 * long time, so a damaged or foreign file must stop the job before any work.
 * The model file is identified by the FNV-1a 64 hash of its bytes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "tool.h"

uint64_t tool_fnv1a64(const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void tool_plan_free(tool_plan *p) {
  if (p->root) json_decref(p->root);
  free(p->boundaries);
  memset(p, 0, sizeof *p);
}

/* "--plan FILE: field X is missing or not Y". */
static int damaged(const char *path, const char *field, const char *want, ir_diag *d) {
  ir_error_plain(d, "--plan %s: \"%s\" is missing or not %s (the file is damaged or not written by tgc plan)", path,
                 field, want);
  return -1;
}

/* An integer member in [lo, hi]. */
static int get_int(const json_t *o, const char *key, const char *path, int64_t lo, int64_t hi, int64_t *out,
                   const char *field, ir_diag *d) {
  const json_t *v = json_object_get(o, key);
  char want[96];
  snprintf(want, sizeof want, "an integer from %lld to %lld", (long long)lo, (long long)hi);
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
    return damaged(path, field ? field : key, want, d);
  *out = json_integer_value(v);
  return 0;
}

static const char *get_str(const json_t *o, const char *key, const char *path, const char *field, ir_diag *d) {
  const json_t *v = json_object_get(o, key);
  if (!json_is_string(v) || !*json_string_value(v)) {
    damaged(path, field ? field : key, "a string", d);
    return NULL;
  }
  return json_string_value(v);
}

int tool_plan_read(const char *path, tool_plan *p, ir_diag *d) {
  memset(p, 0, sizeof *p);
  p->path = path;
  FILE *f = fopen(path, "rb");
  if (!f) {
    ir_error_plain(d, "--plan %s: cannot read: %s", path, strerror(errno));
    return -1;
  }
  json_error_t je;
  json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
  fclose(f);
  if (!root) {
    ir_error_plain(d, "--plan %s: not a plan file: line %d: %s", path, je.line, je.text);
    return -1;
  }
  p->root = root;
  const json_t *fmt = json_object_get(root, "format");
  if (!json_is_object(root) || !json_is_string(fmt) || strcmp(json_string_value(fmt), TOOL_PLAN_FORMAT) != 0) {
    char got[64] = "missing";
    if (json_is_string(fmt)) snprintf(got, sizeof got, "\"%.40s\"", json_string_value(fmt));
    ir_error_plain(d, "--plan %s: not a tgc plan file (\"format\" is %s, expected \"%s\")", path, got, TOOL_PLAN_FORMAT);
    goto fail;
  }
  const json_t *ver = json_object_get(root, "version");
  if (!json_is_integer(ver) || json_integer_value(ver) < 1) {
    damaged(path, "version", "a version number", d);
    goto fail;
  }
  if (json_integer_value(ver) > TOOL_PLAN_VERSION) {
    ir_error_plain(d, "--plan %s: plan version %lld is newer than this tgc reads (version %d): plan again with this tgc",
                   path, (long long)json_integer_value(ver), TOOL_PLAN_VERSION);
    goto fail;
  }
  const json_t *model = json_object_get(root, "model");
  const json_t *mesh = json_object_get(root, "mesh");
  const json_t *sched = json_object_get(root, "pipeline_schedule");
  const json_t *defs = json_object_get(root, "defines");
  const json_t *bounds = json_object_get(root, "stage_boundaries");
  if (!json_is_object(model)) {
    damaged(path, "model", "an object", d);
    goto fail;
  }
  if (!json_is_object(mesh)) {
    damaged(path, "mesh", "an object", d);
    goto fail;
  }
  if (!json_is_object(sched)) {
    damaged(path, "pipeline_schedule", "an object", d);
    goto fail;
  }
  if (!json_is_array(defs) || json_array_size(defs) > 64) {
    damaged(path, "defines", "a list of NAME=VALUE strings", d);
    goto fail;
  }
  if (!(p->model_path = get_str(model, "path", path, "model.path", d))) goto fail;
  if (!(p->model_hash = get_str(model, "fnv1a64", path, "model.fnv1a64", d))) goto fail;
  if (!(p->config = get_str(root, "config", path, NULL, d))) goto fail;
  for (size_t i = 0; i < json_array_size(defs); i++) {
    const json_t *s = json_array_get(defs, i);
    if (!json_is_string(s) || !strchr(json_string_value(s), '=')) {
      damaged(path, "defines", "a list of NAME=VALUE strings", d);
      goto fail;
    }
    p->defines[p->n_defines++] = json_string_value(s);
  }
  int64_t x;
  const int64_t big = 1 << 30;
  if (get_int(root, "ranks", path, 1, big, &p->ranks, NULL, d) ||
      get_int(root, "global_batch", path, 1, big, &p->global_batch, NULL, d) ||
      get_int(root, "seq", path, 1, big, &p->seq, NULL, d) || get_int(root, "layers", path, 0, big, &p->layers, NULL, d))
    goto fail;
  int *const mf[3] = {&p->dp, &p->tp, &p->pp};
  static const char *const mk[3] = {"dp", "tp", "pp"}, *const mn[3] = {"mesh.dp", "mesh.tp", "mesh.pp"};
  for (int k = 0; k < 3; k++) {
    if (get_int(mesh, mk[k], path, 1, 4096, &x, mn[k], d)) goto fail;
    *mf[k] = (int)x;
  }
  const json_t *sp = json_object_get(mesh, "sp");
  if (!json_is_boolean(sp)) {
    damaged(path, "mesh.sp", "true or false", d);
    goto fail;
  }
  p->sp = json_is_true(sp);
  if (get_int(root, "zero", path, 0, 3, &x, NULL, d)) goto fail;
  p->zero = (int)x;
  if (get_int(root, "micro_batch", path, 1, big, &x, NULL, d)) goto fail;
  p->micro_batch = (int)x;
  if (get_int(root, "micro_batches", path, 1, big, &x, NULL, d)) goto fail;
  p->micro_batches = (int)x;
  const char *sn = get_str(sched, "name", path, "pipeline_schedule.name", d);
  if (!sn) goto fail;
  if ((p->schedule = pass_schedule_from_name(sn)) < 0) {
    damaged(path, "pipeline_schedule.name", "gpipe, 1f1b or interleaved", d);
    goto fail;
  }
  if (get_int(sched, "virtual_stages", path, 1, 1024, &x, "pipeline_schedule.virtual_stages", d)) goto fail;
  p->virtual_stages = (int)x;
  const json_t *tl = json_object_get(root, "tp_layout"); /* absent in plans written before it: megatron */
  if (tl && (!json_is_string(tl) || (strcmp(json_string_value(tl), "megatron") != 0 &&
                                     strcmp(json_string_value(tl), "search") != 0))) {
    damaged(path, "tp_layout", "megatron or search", d);
    goto fail;
  }
  p->tp_search = tl && strcmp(json_string_value(tl), "search") == 0;
  const char *ck = get_str(root, "checkpoint", path, NULL, d);
  if (!ck) goto fail;
  if (!(p->checkpoint = tool_checkpoint_name(ck))) {
    damaged(path, "checkpoint", "none, selective or block", d);
    goto fail;
  }
  /* the figures must agree with one another: a hand-edited plan is refused, not half run */
  if ((int64_t)p->dp * p->tp * p->pp != p->ranks) {
    ir_error_plain(d, "--plan %s: \"ranks\" is %lld but the mesh dp=%d,tp=%d,pp=%d has %lld", path, (long long)p->ranks,
                   p->dp, p->tp, p->pp, (long long)p->dp * p->tp * p->pp);
    goto fail;
  }
  if ((int64_t)p->micro_batch * p->dp * p->micro_batches != p->global_batch) {
    ir_error_plain(d, "--plan %s: micro-batch %d x dp %d x %d micro-batches is not the global batch %lld", path,
                   p->micro_batch, p->dp, p->micro_batches, (long long)p->global_batch);
    goto fail;
  }
  size_t nb = (size_t)p->pp * (size_t)p->virtual_stages - 1;
  if (!json_is_array(bounds) || json_array_size(bounds) != nb || nb > 4096) {
    char want[96];
    snprintf(want, sizeof want, "a list of %zu layers (pp x virtual stages - 1)", nb);
    damaged(path, "stage_boundaries", want, d);
    goto fail;
  }
  p->boundaries = calloc(nb + 1, sizeof *p->boundaries);
  if (!p->boundaries) IR_DIE("out of memory (p->boundaries)");
  for (size_t i = 0; i < nb; i++) {
    const json_t *b = json_array_get(bounds, i);
    int64_t prev = i ? p->boundaries[i - 1] : 0;
    if (!json_is_integer(b) || json_integer_value(b) <= prev || json_integer_value(b) >= p->layers) {
      damaged(path, "stage_boundaries", "increasing layers inside the model", d);
      goto fail;
    }
    p->boundaries[i] = (int)json_integer_value(b);
  }
  p->n_boundaries = (int)nb;
  return 0;
fail:
  tool_plan_free(p);
  return -1;
}

bool tool_plan_even_split(const tool_plan *p) {
  if (p->virtual_stages != 1) return false;
  for (int s = 1; s < p->pp; s++) /* the shard pass: layer l on stage l p / L */
    if (p->boundaries[s - 1] != (int)((s * p->layers + p->pp - 1) / p->pp)) return false;
  return true;
}
