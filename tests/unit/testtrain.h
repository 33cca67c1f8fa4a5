/* tests/unit/testtrain.h — a training session for the unit tests: compile
 * a model (one optional -D), open the data source, build its training
 * program (pass_build_train: s->prog->step, s->prog->update; s->g is the
 * step graph) and a trainer (session_open); session_close frees it all. */
#ifndef TGC_TESTTRAIN_H
#define TGC_TESTTRAIN_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"
#include "pass.h"
#include "rt_train.h"

typedef struct {
  ir_diag *d;
  char *text;
  ir_graph *g;          /* the step graph (owned by prog) */
  pass_training *prog;
  rt_data *ds;
  rt_trainer *tr;
} session;

typedef struct {
  const char *path, *config, *data;
  const char *define_name, *define_value; /* one -D, or NULL */
  pass_optimizer opt;
  rt_schedule sched;
  int micro;
  uint64_t seed;
  bool verify_each;                       /* verify the IR after every pass */
  const rt_backend *backend;              /* NULL: the cpu */
  int dtype;                              /* 0: the model's; IR_DT_BF16 / IR_DT_F16: mixed precision (f16 scales the loss) */
  double loss_scale_init;                 /* 0: the default */
  const bool *disabled;                   /* passes left out (PASS_COUNT entries), or NULL */
  bool eval;                              /* also the eval graph (rt_trainer_eval) */
  bool no_cast_fold;                      /* mixed precision's casts left in the step (pass_train_options) */
} setup;

static inline void session_close(session *s) {
  rt_trainer_free(s->tr);
  rt_data_free(s->ds);
  pass_training_free(s->prog);
  free(s->text);
  ir_diag_free(s->d);
  memset(s, 0, sizeof *s);
}

static inline int session_open(session *s, const setup *c) {
  memset(s, 0, sizeof *s);
  s->d = ir_diag_new(stderr);
  size_t len = 0;
  if (!(s->text = ir_read_file(c->path, 1u << 20, &len, s->d))) return -1;
  fe_define def = {c->define_name, c->define_value};
  fe_options fo = {.config = c->config, .defines = c->define_name ? &def : NULL, .n_defines = c->define_name ? 1 : 0};
  ir_graph *model = fe_compile(c->path, s->text, len, &fo, s->d);
  if (!model) return -1;
  char err[1024];
  if (!(s->ds = rt_data_open(c->data, 0, err, sizeof err)) || rt_data_bind(s->ds, model, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    ir_graph_free(model);
    return -1;
  }
  pass_options po = {.diag = s->d, .verify_each = c->verify_each, .disabled = c->disabled};
  pass_train_options to = {.opt = c->opt, .micro_batches = c->micro, .targets_input = rt_data_targets_input(s->ds),
                           .passes = &po, .mixed_precision = c->dtype != 0, .compute_dtype = (ir_dtype)c->dtype,
                           .loss_scaling = c->dtype == IR_DT_F16, .eval = c->eval, .no_cast_fold = c->no_cast_fold};
  if (!(s->prog = pass_build_train(model, &to))) return -1;
  s->g = s->prog->step;
  rt_train_config tc = {.prog = s->prog, .backend = c->backend, .data = s->ds, .seed = c->seed, .schedule = c->sched,
                        .loss_scale_init = c->loss_scale_init};
  if (!(s->tr = rt_trainer_new(&tc, err, sizeof err))) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  return 0;
}

/* n steps of s's trainer: 0, or -1 after printing the message. */
static inline int session_steps(session *s, int n) {
  char err[1024];
  for (int i = 0; i < n; i++)
    if (rt_trainer_step(s->tr, NULL, err, sizeof err) != 0) {
      fprintf(stderr, "step: %s\n", err);
      return -1;
    }
  return 0;
}

/* s's state saved to path (metadata data=test): 0, or -1 after printing the message. */
static inline int session_save(session *s, const char *path) {
  char err[1024];
  rt_meta_entry meta[1] = {{"data", "test"}};
  if (rt_trainer_save(s->tr, path, meta, 1, err, sizeof err) != 0) {
    fprintf(stderr, "save: %s\n", err);
    return -1;
  }
  return 0;
}

/* Loads path into s; returns 0, or -1 with the message in err. */
static inline int session_load(session *s, const char *path, char *err, size_t errlen) {
  rt_safetensors *f = rt_safetensors_read(path, err, errlen);
  if (!f) return -1;
  int rc = rt_trainer_load(s->tr, f, path, err, errlen);
  rt_safetensors_free(f);
  return rc;
}

/* The bytes of path (malloc'd), *n of them; NULL when it cannot be opened. */
static inline char *read_whole_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  *n = fread(buf, 1, (size_t)len, f);
  fclose(f);
  return buf;
}

/* The training program of a model on a mesh, built as `tgc train --mesh`
 * builds it: compiled with its config, bound to a data source (whose batch
 * dims the shard pass splits over dp), the mesh set (stage: the pipeline
 * stage to cut, -1 none). NULL after reporting to stderr. */
typedef struct {
  const char *path, *config, *mesh, *data; /* data NULL: "reverse" */
  int stage, zero, micro, schedule;          /* micro 0: 1 */
  pass_optimizer_kind opt;
  bool verify_each;
  ir_dtype compute;                          /* 0 or f32: the model's dtype; bf16/f16: mixed precision */
  const fe_define *defines;                  /* -D NAME=VALUE overrides (n_defines of them) */
  int n_defines;
  bool tp_search; /* the parameters' tp layouts by search (--tp-layout search) */
  const pass_tp_layouts *tp_layouts; /* or as given (pass_tp_search) */
} sharded_setup;

static inline pass_training *sharded_program(const sharded_setup *c) {
  ir_diag *d = ir_diag_new(stderr);
  size_t len = 0;
  char *text = ir_read_file(c->path, 1u << 20, &len, d);
  fe_options fo = {.config = c->config, .defines = c->defines, .n_defines = c->n_defines};
  ir_graph *model = text ? fe_compile(c->path, text, len, &fo, d) : NULL;
  pass_training *t = NULL;
  char err[256];
  rt_data *ds = rt_data_open(c->data ? c->data : "reverse", 0, err, sizeof err);
  if (model && ds && rt_data_bind(ds, model, err, sizeof err) == 0 &&
      ir_mesh_parse(c->mesh, &model->mesh, err, sizeof err) == 0) {
    model->mesh.stage = c->stage;
    int dims[64];
    for (int i = 0; i < model->n_inputs && i < 64; i++) dims[i] = rt_data_batch_dim(ds, i);
    bool mixed = c->compute && c->compute != IR_DT_F32;
    pass_options po = {.diag = d, .verify_each = c->verify_each, .zero = c->zero, .tp_search = c->tp_search,
                       .tp_layouts = c->tp_layouts};
    pass_train_options to = {.opt = pass_optimizer_defaults(c->opt), .micro_batches = c->micro ? c->micro : 1,
                             .targets_input = rt_data_targets_input(ds), .batch_dims = dims, .passes = &po,
                             .schedule = c->schedule, .mixed_precision = mixed,
                             .compute_dtype = mixed ? c->compute : IR_DT_F32};
    t = pass_build_train(model, &to);
    model = NULL; /* the step graph now (freed on failure) */
  } else if (!ds || model) {
    fprintf(stderr, "%s\n", err);
  }
  ir_graph_free(model);
  rt_data_free(ds);
  free(text);
  ir_diag_free(d);
  return t;
}

#endif
