/* tests/unit/test_shard_search.c — the tensor-parallel layouts the shard
 * pass chooses by search (--tp-layout search, passes/shard_search.c) and the
 * partial sums it adds locally (passes/shard_rules.c):
 *  - the textbook chain y = x W1 W2 W3 on tp = 2 moves no more bytes per
 *    step than the better hand partition (2 S, S one [B, D] f32 activation);
 *    Megatron-LM's rule moves more;
 *  - on gpt tiny the search finds Megatron-LM's layout (column, then row
 *    parallel; the fused q, k, v columns in 3 parts; the vocabulary split)
 *    and the same collectives, byte for byte;
 *  - textbook transformer layers (separate q, k, v projections, no norm):
 *    the backward all-reduces the sum of the three partial input gradients
 *    once, 4 all-reduces of B L D values per layer less the first layer's
 *    input gradient (the closed form, at tp = 2 and for the 7B config at
 *    tp = 8 in fp16: 8 N B L D bytes less 2 B L D).
 * Counts are what one rank's step and update graphs send (pass_comm_tally_of). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"
#include "ir.h"
#include "plan.h"

typedef struct {
  int64_t calls, sent;       /* over tp, every kind */
  int64_t ar_calls, ar_sent; /* the all-reduces over tp */
} tally;

/* The training program of path (config) on mesh, layouts by search or not;
 * NULL after reporting. */
static pass_training *program(const char *path, const char *config, const char *mesh, bool search, ir_dtype compute) {
  ir_diag *d = ir_diag_new(stderr);
  size_t len = 0;
  char *text = ir_read_file(path, 1u << 20, &len, d);
  fe_options fo = {.config = config};
  ir_graph *model = text ? fe_compile(path, text, len, &fo, d) : NULL;
  pass_training *t = NULL;
  char err[256];
  if (model && ir_mesh_parse(mesh, &model->mesh, err, sizeof err) == 0) {
    bool mixed = compute != IR_DT_F32;
    pass_options po = {.diag = d, .tp_search = search};
    pass_train_options to = {.opt = pass_optimizer_defaults(PASS_OPT_ADAM), .micro_batches = 1, .targets_input = -1,
                             .passes = &po, .mixed_precision = mixed, .compute_dtype = compute};
    t = pass_build_train(model, &to);
    model = NULL;
  }
  ir_graph_free(model);
  free(text);
  ir_diag_free(d);
  return t;
}

/* What rank 0 sends over tp in one step: the step graph and the update. */
static tally count(const pass_training *t) {
  tally r = {0, 0, 0, 0};
  const ir_graph *gs[2] = {t->step, t->update};
  for (int k = 0; k < 2; k++) {
    int coord[IR_NUM_AXES] = {0};
    pass_comm_tally c[IR_NUM_OPS][IR_NUM_AXES];
    pass_comm_tally_of(gs[k], coord, c);
    for (int op = 0; op < IR_NUM_OPS; op++) {
      r.calls += c[op][IR_AXIS_TP].calls;
      r.sent += c[op][IR_AXIS_TP].sent;
    }
    r.ar_calls += c[IR_OP_ALL_REDUCE][IR_AXIS_TP].calls;
    r.ar_sent += c[IR_OP_ALL_REDUCE][IR_AXIS_TP].sent;
  }
  return r;
}

static const ir_value *param(const pass_training *t, const char *name) {
  for (int i = 0; i < t->step->n_params; i++)
    if (strcmp(t->step->params[i]->name, name) == 0) return t->step->params[i];
  return NULL;
}

/* the tp split dim of a parameter (-1: not split over tp) */
static int tp_dim(const ir_value *p) {
  for (int k = 0; p && k < p->type.rank; k++)
    if ((p->shard.split[k] >> IR_AXIS_TP) & 1) return k;
  return -1;
}

static void test_chain(void) {
  pass_training *s = program("tests/models/textbook_chain.tg", NULL, "tp=2", true, IR_DT_F32);
  pass_training *m = program("tests/models/textbook_chain.tg", NULL, "tp=2", false, IR_DT_F32);
  CHECK(s && m);
  if (!s || !m) return;
  const int64_t S = 64 * 1024 * 4;
  tally a = count(s), b = count(m);
  printf("textbook chain on tp=2: search sends %lld B in %lld calls (hand partition 2 S = %lld B), Megatron-LM's "
         "rule %lld B in %lld calls\n", (long long)a.sent, (long long)a.calls, (long long)(2 * S), (long long)b.sent,
         (long long)b.calls);
  /* 2 S, and two sums of 8 bytes in the update: the loss and the Inf/NaN count */
  CHECK(a.sent <= 2 * S + 16);
  CHECK(b.sent <= 2 * S + 16); /* (the rule too, now that a partial product two nodes read is reduced once) */
  /* every weight split: the three products divided, y not a partial sum of a replicated W3 */
  CHECK(tp_dim(param(s, "W1")) >= 0 && tp_dim(param(s, "W2")) >= 0 && tp_dim(param(s, "W3")) >= 0);
  CHECK(tp_dim(param(m, "W1")) >= 0 && tp_dim(param(m, "W2")) >= 0 && tp_dim(param(m, "W3")) >= 0);
  pass_training_free(s);
  pass_training_free(m);
}

static void test_gpt_megatron_found(void) {
  const char *meshes[] = {"tp=2", "dp=2,tp=2"};
  for (int k = 0; k < 2; k++) {
    pass_training *s = program("examples/gpt.tg", "tiny", meshes[k], true, IR_DT_F32);
    pass_training *m = program("examples/gpt.tg", "tiny", meshes[k], false, IR_DT_F32);
    CHECK(s && m);
    if (!s || !m) continue;
    CHECK_EQ_INT(s->step->n_params, m->step->n_params);
    for (int i = 0; i < s->step->n_params && i < m->step->n_params; i++) {
      const ir_value *a = s->step->params[i], *b = m->step->params[i];
      bool same = memcmp(&a->shard, &b->shard, sizeof a->shard) == 0 && ir_type_equal(&a->type, &b->type);
      if (!same) fprintf(stderr, "%s: %s laid out unlike Megatron-LM's rule\n", meshes[k], a->name);
      CHECK(same);
    }
    tally a = count(s), b = count(m);
    CHECK_EQ_INT(a.calls, b.calls);
    CHECK_EQ_INT(a.sent, b.sent);
    pass_training_free(s);
    pass_training_free(m);
  }
}

/* (4 N - 1) all-reduces of B L D values per step: 4 per layer, the first
 * layer's input gradient not computed; and the update's all-reduce of the
 * Inf/NaN count (8 bytes). Megatron-LM's rule places weights read by
 * casts (mixed precision) replicated, so in fp16 only the search is
 * checked. */
static void test_textbook_layer(void) {
  struct {
    const char *config, *mesh;
    ir_dtype dt;
    int64_t N, B, L, D, tp;
  } cases[] = {{NULL, "tp=2", IR_DT_F32, 2, 2, 16, 32, 2}, {"b7", "tp=8", IR_DT_F16, 32, 128, 4096, 4096, 8}};
  for (int c = 0; c < 2; c++) {
    for (int search = cases[c].dt == IR_DT_F32 ? 0 : 1; search < 2; search++) {
      pass_training *t = program("tests/models/textbook_layer.tg", cases[c].config, cases[c].mesh, search, cases[c].dt);
      CHECK(t != NULL);
      if (!t) continue;
      tally a = count(t);
      int64_t n = cases[c].tp, elem = ir_dtype_size(cases[c].dt), bld = cases[c].B * cases[c].L * cases[c].D;
      int64_t calls = 4 * cases[c].N - 1, payload = calls * bld * elem;
      int64_t sent = payload / n * 2 * (n - 1); /* a ring all-reduce sends 2 (n - 1) / n of its buffer */
      printf("textbook layers %s on %s (%s): %lld all-reduces, %lld B sent; closed form %lld, %lld B (payload %lld B = "
             "8 N B L D - 2 B L D in fp16)\n", cases[c].config ? cases[c].config : "default", cases[c].mesh,
             search ? "search" : "Megatron-LM's rule", (long long)a.ar_calls, (long long)a.ar_sent, (long long)calls,
             (long long)sent, (long long)payload);
      CHECK_EQ_INT(a.ar_calls, calls + 1);
      CHECK(a.ar_sent - sent > 0 && a.ar_sent - sent <= 16);
      CHECK_EQ_INT(a.calls, a.ar_calls); /* nothing else over tp */
      if (elem == 2) CHECK_EQ_INT(payload, 8 * cases[c].N * bld - 2 * bld);
      pass_training_free(t);
    }
  }
}

int main(void) {
  test_chain();
  test_gpt_megatron_found();
  test_textbook_layer();
  return check_done();
}
