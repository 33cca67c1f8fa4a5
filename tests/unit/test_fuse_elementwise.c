/* tests/unit/test_fuse_elementwise.c — the fuse-elementwise pass and its
 * kernels never change a result: fused and unfused graphs give the same
 * bytes (memcmp, no tolerance).
 *
 *   - every example (each .tg file of examples/, default config): the forward outputs;
 *   - gpt and llama `tiny`: one training step (loss, logits, every
 *     gradient) and the optimizer update graphs (sgd, momentum, adam, adamw
 *     with decay and clipping) fused vs unfused; gpt tiny's step also in
 *     bf16 (pass_mixed_precision: the fused kernels' bf16 fast paths, casts
 *     and arithmetic, against the unfused kernels' generic rounding);
 *   - the kernel count of gpt tiny, forward and training graph, before and
 *     after (printed; after < before);
 *   - a long f32 chain (an Adam step over 2M + 123 elements): bytes equal,
 *     times printed (informational, never asserted);
 *   - the contiguous f32 fast paths added for speed (reduce over leading or
 *     trailing dims, tiled transpose) against the reference semantics
 *     written here (double accumulation in the same order; plain copies):
 *     exact;
 *   - typing errors of fused exprs, a kernel fed a bad expr (an error, no
 *     crash), and differentiating a fused op (refused).
 * The unfused graphs come from the same pipeline with the pass skipped
 * (pass_options.disabled, honoured by the pass manager).
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "frontend.h"
#include "ir.h"
#include "pass.h"
#include "scalar.h"
#include "runtime.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ---- running graphs ---------------------------------------------------------------- */

typedef struct {
  rt_tensor **in, **par, **out;
  int n_in, n_par, n_out;
  int kernels;
} run_result;

static void run_free(run_result *r) {
  for (int i = 0; i < r->n_in; i++) rt_tensor_free(r->in[i]);
  for (int i = 0; i < r->n_par; i++) rt_tensor_free(r->par[i]);
  for (int i = 0; i < r->n_out; i++) rt_tensor_free(r->out[i]);
  free(r->in), free(r->par), free(r->out);
  memset(r, 0, sizeof *r);
}

/* The largest valid id for an integer input: the rows of the tables it
 * indexes, the classes of the logits it targets; 2 if neither. */
static int64_t int_high(const ir_graph *g, const ir_value *v) {
  int64_t high = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->op == IR_OP_EMBEDDING && n->in[1] == v) {
      int64_t h = n->in[0]->type.dims[0];
      if (!high || h < high) high = h;
    }
    if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_CROSS_ENTROPY_GRAD) && n->in[1] == v) {
      int64_t h = n->in[0]->type.dims[n->in[0]->type.rank - 1];
      if (!high || h < high) high = h;
    }
  }
  return high ? high : 2;
}

/* Binds seeded inputs (given[i] copied when not NULL; random floats made
 * non-negative when nonneg, e.g. second moments) and params, runs g. */
static int run_graph(const ir_graph *g, uint64_t seed, rt_tensor *const *given, bool nonneg, run_result *r) {
  memset(r, 0, sizeof *r);
  r->n_in = g->n_inputs, r->n_par = g->n_params, r->n_out = g->n_outputs;
  r->in = calloc((size_t)r->n_in + 1, sizeof *r->in);
  r->par = calloc((size_t)r->n_par + 1, sizeof *r->par);
  r->out = calloc((size_t)r->n_out + 1, sizeof *r->out);
  for (int i = 0; i < g->n_inputs; i++) {
    const ir_value *v = g->inputs[i];
    r->in[i] = rt_tensor_new(&v->type);
    if (given && given[i]) memcpy(r->in[i]->data, given[i]->data, r->in[i]->nbytes);
    else rt_fill_random(r->in[i], seed, v->name, int_high(g, v));
    if (nonneg && !(given && given[i]) && ir_dtype_is_float(v->type.dtype))
      for (int64_t k = 0; k < ir_type_numel(&v->type); k++) rt_tensor_set(r->in[i], k, fabs(rt_tensor_get(r->in[i], k)));
  }
  for (int i = 0; i < g->n_params; i++) {
    r->par[i] = rt_tensor_new(&g->params[i]->type);
    rt_init_param(r->par[i], g->params[i], seed);
  }
  rt_stats st = {0};
  char err[512];
  int rc = rt_run(&rt_cpu_backend, g, r->in, r->par, r->out, &st, err, sizeof err);
  if (rc != 0) fprintf(stderr, "run %s: %s\n", g->name, err);
  r->kernels = st.kernels_run;
  return rc;
}

/* Outputs of a and b byte for byte; prints the first differing output. */
static bool same_outputs(const char *what, const ir_graph *g, const run_result *a, const run_result *b) {
  if (a->n_out != b->n_out) return false;
  for (int i = 0; i < a->n_out; i++) {
    bool same = a->out[i] && b->out[i] && a->out[i]->nbytes == b->out[i]->nbytes &&
                memcmp(a->out[i]->data, b->out[i]->data, a->out[i]->nbytes) == 0;
    if (!same) {
      int64_t n = a->out[i] ? ir_type_numel(&a->out[i]->type) : 0, first = -1;
      double maxd = 0;
      for (int64_t k = 0; b->out[i] && k < n; k++) {
        double x = rt_tensor_get(a->out[i], k), y = rt_tensor_get(b->out[i], k);
        if (x != y && !(x != x && y != y)) {
          if (first < 0) first = k;
          if (fabs(x - y) > maxd) maxd = fabs(x - y);
        }
      }
      fprintf(stderr, "%s: output '%s' differs (first at %lld, max |diff| %g)\n", what, g->outputs[i].name,
              (long long)first, maxd);
      return false;
    }
  }
  return true;
}

static int count_op(const ir_graph *g, ir_op op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i]->op == op;
  return n;
}

/* ---- compiling with and without the pass ------------------------------------------ */

static ir_graph *compile(const char *path, const char *config, ir_diag *d, char **text) {
  size_t len = 0;
  *text = ir_read_file(path, 1u << 20, &len, d);
  if (!*text) return NULL;
  fe_options fo = {.config = config};
  ir_graph *g = fe_compile(path, *text, len, &fo, d);
  if (g && ir_verify(g, d) != 0) {
    ir_graph_free(g);
    return NULL;
  }
  return g;
}

/* Runs the default pipeline (training: pass_build_training) with or without fuse-elementwise. */
static int pipeline(ir_graph *g, bool fuse, bool training, ir_diag *d) {
  bool off[PASS_COUNT] = {false};
  off[PASS_FUSE_ELEMENTWISE] = !fuse;
  pass_options po = {.diag = d, .verify_each = true, .disabled = off};
  return training ? pass_build_training(g, &po)
                  : pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &po);
}

typedef struct {
  char *text[2];
  ir_graph *g[2]; /* [0] unfused, [1] fused */
  run_result r[2];
} pair;

static void pair_free(pair *p) {
  for (int i = 0; i < 2; i++) {
    run_free(&p->r[i]);
    ir_graph_free(p->g[i]);
    free(p->text[i]);
  }
}

/* Compiles path both ways, runs both with the same seed; 0 when both ran. */
static int pair_run_as(pair *p, const char *path, const char *config, bool training, ir_dtype mp, ir_diag *d) {
  memset(p, 0, sizeof *p);
  for (int f = 0; f < 2; f++) {
    if (!(p->g[f] = compile(path, config, d, &p->text[f]))) return -1;
    if (mp != IR_DT_F32 && pass_mixed_precision(p->g[f], mp, d) != 0) return -1;
    if (pipeline(p->g[f], f == 1, training, d) != 0) return -1;
    if (run_graph(p->g[f], 11, NULL, false, &p->r[f]) != 0) return -1;
  }
  return 0;
}
static int pair_run(pair *p, const char *path, const char *config, bool training, ir_diag *d) {
  return pair_run_as(p, path, config, training, IR_DT_F32, d);
}

/* ---- every example, forward ---------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_examples_forward(void) {
  DIR *dir = opendir("examples");
  CHECK(dir != NULL);
  if (!dir) return;
  char *names[64];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dir)) && n < 64) {
    size_t len = strlen(e->d_name);
    if (len > 3 && strcmp(e->d_name + len - 3, ".tg") == 0) names[n++] = strdup(e->d_name);
  }
  closedir(dir);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  CHECK(n >= 4);
  ir_diag *d = ir_diag_new(stderr);
  for (int i = 0; i < n; i++) {
    char path[300];
    snprintf(path, sizeof path, "examples/%s", names[i]);
    pair p;
    int rc = pair_run(&p, path, NULL, false, d);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
      bool same = same_outputs(path, p.g[1], &p.r[0], &p.r[1]);
      CHECK(same);
      printf("%-32s forward: %3d kernels unfused, %3d fused, outputs %s\n", path, p.r[0].kernels, p.r[1].kernels,
             same ? "bit-identical" : "DIFFER");
    }
    pair_free(&p);
    free(names[i]);
  }
  ir_diag_free(d);
}

/* ---- training steps and optimizer updates --------------------------------------------- */

/* The update graph of model for opt, fed with grads from a training run:
 * unfused and fused give the same bytes. */
static void check_update(const ir_graph *model, const run_result *train, pass_optimizer opt, const char *what,
                         ir_diag *d) {
  ir_graph *u[2] = {pass_build_update(model, &opt, d), pass_build_update(model, &opt, d)};
  CHECK(u[0] && u[1]);
  if (!u[0] || !u[1]) goto done;
  static const pass_id fuse = PASS_FUSE_ELEMENTWISE;
  pass_options po = {.diag = d, .verify_each = true};
  CHECK_EQ_INT(pass_run_pipeline(u[1], &fuse, 1, &po), 0);
  /* inputs: gradients from the training run (outputs d_<p> in param order), states random, lr, step */
  rt_tensor **given = calloc((size_t)u[0]->n_inputs + 1, sizeof *given);
  int np = model->n_params;
  int first_grad = train->n_out - np;
  for (int i = 0; i < np; i++) given[i] = train->out[first_grad + i];
  rt_tensor *lr = rt_tensor_new(&u[0]->inputs[u[0]->n_inputs - 2]->type), *step = rt_tensor_new(&lr->type);
  rt_tensor_fill(lr, 3e-3);
  rt_tensor_fill(step, 3);
  given[u[0]->n_inputs - 2] = lr;
  given[u[0]->n_inputs - 1] = step;
  run_result r[2];
  int rc0 = run_graph(u[0], 5, given, true, &r[0]), rc1 = run_graph(u[1], 5, given, true, &r[1]);
  CHECK(rc0 == 0 && rc1 == 0);
  if (rc0 == 0 && rc1 == 0) {
    bool same = same_outputs(what, u[0], &r[0], &r[1]);
    CHECK(same);
    printf("  update %-24s %3d kernels unfused, %3d fused, new parameters and states %s\n", what, r[0].kernels,
           r[1].kernels, same ? "bit-identical" : "DIFFER");
    CHECK(r[1].kernels < r[0].kernels);
  }
  run_free(&r[0]);
  run_free(&r[1]);
  rt_tensor_free(lr);
  rt_tensor_free(step);
  free(given);
done:
  ir_graph_free(u[0]);
  ir_graph_free(u[1]);
}

static void test_training(const char *path) {
  ir_diag *d = ir_diag_new(stderr);
  pair p;
  int rc = pair_run(&p, path, "tiny", true, d);
  CHECK_EQ_INT(rc, 0);
  if (rc == 0) {
    bool same = same_outputs(path, p.g[1], &p.r[0], &p.r[1]);
    CHECK(same);
    printf("%s tiny training step: loss, logits and %d gradients %s; kernels %d unfused, %d fused; "
           "fused ops: %d fused, %d fused_matmul, %d add_layernorm\n",
           path, p.g[1]->n_params, same ? "bit-identical" : "DIFFER", p.r[0].kernels, p.r[1].kernels,
           count_op(p.g[1], IR_OP_FUSED), count_op(p.g[1], IR_OP_FUSED_MATMUL), count_op(p.g[1], IR_OP_ADD_LAYERNORM));
    CHECK(p.r[1].kernels < p.r[0].kernels);
    /* the optimizers, on this model's parameters and gradients */
    pass_optimizer sgd = pass_optimizer_defaults(PASS_OPT_SGD), mom = pass_optimizer_defaults(PASS_OPT_MOMENTUM);
    pass_optimizer adam = pass_optimizer_defaults(PASS_OPT_ADAM), adamw = pass_optimizer_defaults(PASS_OPT_ADAMW);
    sgd.weight_decay = 0.01;
    adamw.weight_decay = 0.1;
    adamw.clip_norm = 0.5;
    check_update(p.g[1], &p.r[1], sgd, "sgd + L2", d);
    check_update(p.g[1], &p.r[1], mom, "momentum", d);
    check_update(p.g[1], &p.r[1], adam, "adam", d);
    check_update(p.g[1], &p.r[1], adamw, "adamw + decay + clip", d);
  }
  pair_free(&p);
  ir_diag_free(d);
}

/* The bf16 (mixed precision) training step, fused vs unfused. */
static void test_training_bf16(const char *path) {
  ir_diag *d = ir_diag_new(stderr);
  pair p;
  int rc = pair_run_as(&p, path, "tiny", true, IR_DT_BF16, d);
  CHECK_EQ_INT(rc, 0);
  if (rc == 0) {
    bool same = same_outputs(path, p.g[1], &p.r[0], &p.r[1]);
    CHECK(same);
    printf("%s tiny training step in bf16: loss, logits and %d gradients %s\n", path, p.g[1]->n_params,
           same ? "bit-identical" : "DIFFER");
  }
  pair_free(&p);
  ir_diag_free(d);
}

/* ---- kernel counts of gpt tiny --------------------------------------------------------- */

static void test_kernel_counts(void) {
  ir_diag *d = ir_diag_new(stderr);
  for (int training = 0; training < 2; training++) {
    pair p;
    int rc = pair_run(&p, "examples/gpt.tg", "tiny", training, d);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
      printf("gpt tiny %-14s kernels run: %d before fuse-elementwise, %d after (graph nodes %d -> %d)\n",
             training ? "training step" : "forward", p.r[0].kernels, p.r[1].kernels, p.g[0]->n_nodes,
             p.g[1]->n_nodes);
      CHECK(p.r[1].kernels < p.r[0].kernels);
      CHECK(count_op(p.g[1], IR_OP_FUSED_MATMUL) > 0);
      CHECK(count_op(p.g[1], IR_OP_ADD_LAYERNORM) > 0);
      /* the fused graph round-trips through the textual IR */
      char *t1 = ir_print_to_string(p.g[1]);
      ir_graph *back = ir_parse("fused.ir", t1, strlen(t1), d);
      CHECK(back != NULL);
      if (back) {
        CHECK_EQ_INT(ir_verify(back, d), 0);
        char *t2 = ir_print_to_string(back);
        CHECK(strcmp(t1, t2) == 0);
        free(t2);
        ir_graph_free(back);
      }
      free(t1);
    }
    pair_free(&p);
  }
  ir_diag_free(d);
}

/* ---- a long f32 chain: one Adam parameter step ---------------------------------------- */

static void test_long_chain(void) {
  int64_t n = (INT64_C(1) << 21) + 123;
  ir_graph *model = ir_graph_new("m", NULL);
  ir_type t = {IR_DT_F32, 2, {n / 123, 123}};
  ir_graph_add_param(model, "w", t, (ir_init){IR_INIT_NORMAL, 0.02, 0}, (ir_loc){0});
  ir_diag *d = ir_diag_new(stderr);
  pass_optimizer adam = pass_optimizer_defaults(PASS_OPT_ADAMW);
  adam.weight_decay = 0.01;
  ir_graph *u[2] = {pass_build_update(model, &adam, d), pass_build_update(model, &adam, d)};
  static const pass_id fuse = PASS_FUSE_ELEMENTWISE;
  pass_options po = {.diag = d, .verify_each = true};
  CHECK_EQ_INT(pass_run_pipeline(u[1], &fuse, 1, &po), 0);
  rt_tensor *given[5] = {0};
  for (int i = 0; i < 3; i++) {
    given[i] = rt_tensor_new(&u[0]->inputs[i]->type);
    rt_fill_random(given[i], 9, u[0]->inputs[i]->name, 0);
  }
  float *v = given[2]->data; /* the second moment is >= 0 */
  for (int64_t i = 0; i < n / 123 * 123; i++) v[i] = fabsf(v[i]);
  given[3] = rt_tensor_new(&u[0]->inputs[3]->type);
  given[4] = rt_tensor_new(&u[0]->inputs[4]->type);
  rt_tensor_fill(given[3], 1e-3);
  rt_tensor_fill(given[4], 7);
  run_result r[2];
  double ms[2];
  for (int f = 0; f < 2; f++) {
    double t0 = now_ms();
    CHECK_EQ_INT(run_graph(u[f], 9, given, false, &r[f]), 0);
    ms[f] = now_ms() - t0;
  }
  CHECK(same_outputs("adamw chain", u[0], &r[0], &r[1]));
  printf("adamw step over %lld f32 elements: %d kernels %.1f ms unfused, %d kernels %.1f ms fused (bytes equal)\n",
         (long long)(n / 123 * 123), r[0].kernels, ms[0], r[1].kernels, ms[1]);
  for (int f = 0; f < 2; f++) run_free(&r[f]);
  for (int i = 0; i < 5; i++) rt_tensor_free(given[i]);
  ir_graph_free(u[0]);
  ir_graph_free(u[1]);
  ir_graph_free(model);
  ir_diag_free(d);
}

/* ---- fast paths against the reference semantics ---------------------------------------- */

static rt_tensor *one_node(ir_op op, const ir_type *in_t, const ir_attr *attrs, int n_attrs, rt_tensor **x) {
  ir_graph *g = ir_graph_new("k", NULL);
  ir_value *in = ir_graph_add_input(g, "x", *in_t, (ir_loc){0});
  char err[256];
  ir_node *n = ir_graph_build(g, op, &in, 1, attrs, n_attrs, NULL, "y", (ir_loc){0}, err, sizeof err);
  if (!n) {
    fprintf(stderr, "%s\n", err);
    ir_graph_free(g);
    return NULL;
  }
  ir_graph_add_output(g, "y", n->out[0]);
  *x = rt_tensor_new(in_t);
  rt_fill_random(*x, 3, "x", 0);
  rt_tensor *out = NULL;
  if (rt_run(&rt_cpu_backend, g, x, NULL, &out, NULL, err, sizeof err) != 0) fprintf(stderr, "%s\n", err);
  ir_graph_free(g);
  return out;
}

static void test_reduce_fast_paths(void) {
  /* [A, B, C]: axes {0} (leading), {0,1} (leading), {2} (trailing), {1,2} (trailing), {1} (middle: general) */
  static const int64_t ax0[] = {0}, ax01[] = {0, 1}, ax2[] = {2}, ax12[] = {1, 2}, ax1[] = {1};
  const struct {
    const int64_t *axes;
    int n;
  } sets[] = {{ax0, 1}, {ax01, 2}, {ax2, 1}, {ax12, 2}, {ax1, 1}};
  ir_op ops[3] = {IR_OP_REDUCE_SUM, IR_OP_REDUCE_MEAN, IR_OP_REDUCE_MAX};
  ir_dtype dts[2] = {IR_DT_F32, IR_DT_F64};
  int64_t A = 3, B = 70, C = 531;
  int bad = 0, cases = 0;
  for (int di = 0; di < 2; di++)
    for (int oi = 0; oi < 3; oi++)
      for (int si = 0; si < 5; si++) {
        ir_type t = {dts[di], 3, {A, B, C}};
        ir_attr at = ir_attr_ints("axes", sets[si].axes, sets[si].n);
        rt_tensor *x = NULL, *y = one_node(ops[oi], &t, &at, 1, &x);
        CHECK(y != NULL);
        if (!y) {
          rt_tensor_free(x);
          continue;
        }
        bool red[3] = {false, false, false};
        for (int k = 0; k < sets[si].n; k++) red[sets[si].axes[k]] = true;
        int64_t dims[3] = {A, B, C}, o = 0;
        /* reference: for each result element in order, accumulate in double over the reduced
         * index space in row-major order, starting from 0 (max: -inf, NaN wins) */
        int64_t kd[3], kn = 0, rd[3], rn = 0;
        for (int d = 0; d < 3; d++) {
          if (red[d]) rd[rn++] = d;
          else kd[kn++] = d;
        }
        int64_t nk = 1, nr = 1;
        for (int k = 0; k < kn; k++) nk *= dims[kd[k]];
        for (int k = 0; k < rn; k++) nr *= dims[rd[k]];
        for (o = 0; o < nk; o++) {
          int64_t idx[3] = {0, 0, 0}, rem = o;
          for (int k = (int)kn - 1; k >= 0; k--) idx[kd[k]] = rem % dims[kd[k]], rem /= dims[kd[k]];
          double acc = ops[oi] == IR_OP_REDUCE_MAX ? -INFINITY : 0.0;
          for (int64_t r = 0; r < nr; r++) {
            int64_t rr = r;
            for (int k = (int)rn - 1; k >= 0; k--) idx[rd[k]] = rr % dims[rd[k]], rr /= dims[rd[k]];
            double v = rt_tensor_get(x, (idx[0] * B + idx[1]) * C + idx[2]);
            if (ops[oi] == IR_OP_REDUCE_MAX) acc = (v > acc || v != v) ? v : acc;
            else acc += v;
          }
          if (ops[oi] == IR_OP_REDUCE_MEAN) acc /= (double)nr;
          double want = ir_round_to_dtype(dts[di], acc), got = rt_tensor_get(y, o);
          if (memcmp(&want, &got, sizeof want) != 0 && bad++ < 5)
            fprintf(stderr, "%s %s axes set %d: element %lld: got %.17g want %.17g\n", ir_op_name(ops[oi]),
                    ir_dtype_name(dts[di]), si, (long long)o, got, want);
        }
        cases++;
        rt_tensor_free(x);
        rt_tensor_free(y);
      }
  CHECK_EQ_INT(bad, 0);
  printf("reduce fast paths: %d cases (f32/f64, sum/mean/max, leading/trailing/middle axes) bit-identical to the "
         "reference order\n",
         cases);
}

static void test_transpose_fast_path(void) {
  static const int64_t p10[] = {1, 0}, p021[] = {0, 2, 1}, p0231[] = {0, 2, 3, 1}, p0213[] = {0, 2, 1, 3};
  const struct {
    ir_type t;
    const int64_t *perm;
  } cases[] = {
      {{IR_DT_F32, 2, {67, 1029}}, p10},       {{IR_DT_F32, 3, {3, 40, 77}}, p021},
      {{IR_DT_I32, 4, {2, 33, 3, 9}}, p0231}, {{IR_DT_F32, 4, {2, 5, 3, 8}}, p0213},
      {{IR_DT_F64, 2, {31, 45}}, p10},         {{IR_DT_BF16, 3, {2, 35, 40}}, p021},
  };
  int bad = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const ir_type *t = &cases[c].t;
    ir_attr at = ir_attr_ints("perm", cases[c].perm, t->rank);
    rt_tensor *x = NULL, *y = one_node(IR_OP_TRANSPOSE, t, &at, 1, &x);
    CHECK(y != NULL);
    if (!y) {
      rt_tensor_free(x);
      continue;
    }
    size_t es = ir_dtype_size(t->dtype);
    int64_t n = ir_type_numel(t);
    for (int64_t o = 0; o < n; o++) {
      int64_t idx[IR_MAX_RANK], rem = o, src[IR_MAX_RANK], li = 0;
      for (int d = t->rank - 1; d >= 0; d--) idx[d] = rem % y->type.dims[d], rem /= y->type.dims[d];
      for (int d = 0; d < t->rank; d++) src[cases[c].perm[d]] = idx[d];
      for (int d = 0; d < t->rank; d++) li = li * t->dims[d] + src[d];
      if (memcmp((char *)y->data + o * es, (char *)x->data + li * es, es) != 0 && bad++ < 5)
        fprintf(stderr, "transpose case %zu: element %lld differs\n", c, (long long)o);
    }
    rt_tensor_free(x);
    rt_tensor_free(y);
  }
  CHECK_EQ_INT(bad, 0);
}

/* ---- typing, bad input, differentiation ------------------------------------------------- */

static void expect_infer_error(ir_op op, const ir_type *in, int n, const char *expr, const char *want) {
  ir_attr a = ir_attr_str("expr", expr);
  ir_type out[IR_FUSED_MAX_RESULTS];
  int n_out;
  char err[256] = "";
  CHECK_EQ_INT(ir_infer(op, in, n, &a, 1, out, &n_out, err, sizeof err), -1);
  if (!strstr(err, want)) fprintf(stderr, "expr \"%s\": got \"%s\", want it to contain \"%s\"\n", expr, err, want);
  CHECK(strstr(err, want) != NULL);
}

static void test_typing(void) {
  ir_type in[3] = {{IR_DT_F32, 2, {2, 3}}, {IR_DT_F32, 1, {3}}, {IR_DT_F64, 0, {0}}};
  ir_attr a = ir_attr_str("expr", "(add (mul $0 $1) (cast f32 (exp $2)))");
  ir_type out;
  int n_out;
  char err[256];
  CHECK_EQ_INT(ir_infer(IR_OP_FUSED, in, 3, &a, 1, &out, &n_out, err, sizeof err), 0);
  char ts[64];
  CHECK_STR(ir_type_str(&out, ts, sizeof ts), "f32[2, 3]");
  expect_infer_error(IR_OP_FUSED, in, 2, "(add $0 $1", "expected ')'");
  expect_infer_error(IR_OP_FUSED, in, 2, "(add $0 $2)", "expr names $2 but there are 2 operands");
  expect_infer_error(IR_OP_FUSED, in, 2, "(exp $0)", "operand $1 is not used");
  expect_infer_error(IR_OP_FUSED, in, 2, "(matmul $0 $1)", "not an elementwise op");
  expect_infer_error(IR_OP_FUSED, in, 3, "(add (add $0 $1) $2)", "dtype mismatch in add: f32 and f64");
  expect_infer_error(IR_OP_FUSED, in, 2, "(add $0 $1) $0", "text after the expression");
  expect_infer_error(IR_OP_FUSED, in, 2, "(add $0 (const f32 zero))", "expected a number");
  expect_infer_error(IR_OP_FUSED, in, 2, "(cast f33 (add $0 $1))", "expected a dtype");
  char deep[2200] = "";
  for (int i = 0; i < 300; i++) strcat(deep, "(neg ");
  expect_infer_error(IR_OP_FUSED, in, 1, deep, "nested too deeply");
  /* several results: one per ';'-separated expression, #k reads result k */
  ir_attr multi = ir_attr_str("expr", "(add $0 $1); (gt #0 $0)");
  ir_type outs[IR_FUSED_MAX_RESULTS];
  CHECK_EQ_INT(ir_infer(IR_OP_FUSED, in, 2, &multi, 1, outs, &n_out, err, sizeof err), 0);
  CHECK_EQ_INT(n_out, 2);
  CHECK_STR(ir_type_str(&outs[1], ts, sizeof ts), "bool[2, 3]");
  expect_infer_error(IR_OP_FUSED, in, 2, "(add $0 $1); (mul #1 $0)", "expr 1 names #1, which is not an earlier result");
  expect_infer_error(IR_OP_FUSED, in, 2, "(add $0 $1); (neg $1)", "result 1 has type f32[3], not the shape of result 0 (f32[2, 3])");
  expect_infer_error(IR_OP_FUSED, in, 1, "$0;$0;$0;$0;$0;$0;$0;$0;$0", "expr has more than 8 results");
  expect_infer_error(IR_OP_FUSED, in, 2, "(add $0 $1);", "expected '$N', '#N', '%N' or '('");
  expect_infer_error(IR_OP_FUSED, in, 2, "(add $0 #0)", "names #0, which is not an earlier result");
  ir_type mm[3] = {{IR_DT_F32, 2, {2, 3}}, {IR_DT_F32, 2, {3, 4}}, {IR_DT_F32, 2, {1, 1}}};
  expect_infer_error(IR_OP_FUSED_MATMUL, mm, 3, "(add $0 $1); $0", "text after the expression");
  expect_infer_error(IR_OP_FUSED_MATMUL, mm, 3, "(gt $0 $1)", "epilogue's type bool[2, 4] differs from the product's");
  ir_type mm3[3] = {mm[0], mm[1], {IR_DT_F32, 3, {5, 1, 1}}};
  expect_infer_error(IR_OP_FUSED_MATMUL, mm3, 3, "(add $0 $1)", "differs from the product's f32[2, 4]");
  ir_type al[4] = {{IR_DT_F32, 2, {2, 3}}, {IR_DT_F32, 1, {3}}, {IR_DT_F32, 1, {3}}, {IR_DT_F32, 1, {3}}};
  ir_attr eps = ir_attr_float("eps", 1e-5);
  ir_type two[2];
  CHECK_EQ_INT(ir_infer(IR_OP_ADD_LAYERNORM, al, 4, &eps, 1, two, &n_out, err, sizeof err), -1);
  CHECK(strstr(err, "same type") != NULL);
}

/* A fused node with three results, run with both operands donated: the
 * plan gives result 0 x's buffer and result 1 y's, so the kernel must
 * read every operand of a chunk before it stores any result (c reads the
 * original x and y). Checked against the same arithmetic in plain C. */
static void test_multi_results_in_place(void) {
  ir_graph *g = ir_graph_new("multi", NULL);
  enum { N = 3000 };
  ir_type t = {IR_DT_F32, 1, {N}};
  ir_value *xy[2] = {ir_graph_add_input(g, "x", t, (ir_loc){0}), ir_graph_add_input(g, "y", t, (ir_loc){0})};
  ir_attr a = ir_attr_str("expr", "(add $0 $1); (mul #0 $0); (sub $1 (exp $0))");
  ir_type ts[3] = {t, t, t};
  ir_node *n = ir_graph_add_node(g, IR_OP_FUSED, xy, 2, ts, 3, &a, 1, NULL, (ir_loc){0});
  const char *names[3] = {"a", "b", "c"};
  for (int i = 0; i < 3; i++) ir_graph_add_output(g, names[i], n->out[i]);
  CHECK_EQ_INT(ir_verify(g, NULL), 0);
  for (int donate = 0; donate < 2; donate++) {
    rt_tensor *in[2] = {rt_tensor_new(&t), rt_tensor_new(&t)}, *out[3] = {NULL, NULL, NULL};
    float x[N], y[N];
    for (int i = 0; i < N; i++) {
      x[i] = 0.001f * (float)i - 1.5f;
      y[i] = 0.5f - 0.0007f * (float)i;
      ((float *)in[0]->data)[i] = x[i];
      ((float *)in[1]->data)[i] = y[i];
    }
    bool d[2] = {donate, donate};
    rt_stats st = {.donate_inputs = d};
    char err[256] = "";
    CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, in, NULL, out, &st, err, sizeof err), 0);
    CHECK_EQ_INT(st.total_allocs, 1); /* the arena */
    /* donated: the plan computes a in x's buffer and b in y's */
    pass_plan_options po = {.donate_inputs = d};
    pass_plan *plan = pass_memplan(g, &po);
    CHECK_EQ_INT(plan->loc[n->out[0]->id].space, donate ? PASS_SPACE_INPUT : PASS_SPACE_ARENA);
    if (donate) CHECK(plan->loc[n->out[0]->id].index == 0 && plan->loc[n->out[1]->id].index == 1);
    pass_plan_free(plan);
    int bad = 0;
    for (int i = 0; i < N; i++) {
      float sum = x[i] + y[i], prod = sum * x[i], diff = (float)((double)y[i] - (double)(float)exp((double)x[i]));
      bad += ((float *)out[0]->data)[i] != sum || ((float *)out[1]->data)[i] != prod ||
             ((float *)out[2]->data)[i] != diff;
    }
    CHECK_EQ_INT(bad, 0);
    for (int i = 0; i < 3; i++) rt_tensor_free(out[i]);
    for (int i = 0; i < 2; i++) rt_tensor_free(in[i]);
  }
  ir_graph_free(g);
}

/* gelu and gelu_grad in the fused kernel (vectorized, one clone per ISA)
 * give the bits of ir_eval_unary (scalar) on a sweep and on special values;
 * ir_exp_smooth, their exp, is within 2 ulp of libm's. */
static void test_gelu_vector_path(void) {
  enum { N = 40000 };
  static float x[N];
  const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 3.4e38f, -3.4e38f, -5.3f, -9.0f, -30.0f, 30.0f};
  int ns = (int)(sizeof special / sizeof special[0]);
  for (int i = 0; i < N; i++) x[i] = i < ns ? special[i] : -12.0f + 24.0f * (float)i / (float)N;
  ir_graph *g = ir_graph_new("gelu", NULL);
  ir_type t = {IR_DT_F32, 1, {N}};
  ir_value *in = ir_graph_add_input(g, "x", t, (ir_loc){0});
  ir_attr a = ir_attr_str("expr", "(gelu $0); (gelu_grad $0)");
  ir_type ts[2] = {t, t};
  ir_node *n = ir_graph_add_node(g, IR_OP_FUSED, &in, 1, ts, 2, &a, 1, NULL, (ir_loc){0});
  ir_graph_add_output(g, "y", n->out[0]);
  ir_graph_add_output(g, "dy", n->out[1]);
  rt_tensor *tx = rt_tensor_new(&t), *out[2] = {NULL, NULL};
  memcpy(tx->data, x, sizeof x);
  char err[256] = "";
  CHECK_EQ_INT(rt_run(&rt_cpu_backend, g, &tx, NULL, out, NULL, err, sizeof err), 0);
  int bad = 0;
  for (int i = 0; i < N && out[0] && out[1]; i++) {
    float y = (float)ir_round_to_dtype(IR_DT_F32, ir_eval_unary(IR_OP_GELU, x[i]));
    float dy = (float)ir_round_to_dtype(IR_DT_F32, ir_eval_unary(IR_OP_GELU_GRAD, x[i]));
    float gy = ((float *)out[0]->data)[i], gdy = ((float *)out[1]->data)[i];
    bool same = (memcmp(&y, &gy, 4) == 0 || (isnan(y) && isnan(gy))) && (memcmp(&dy, &gdy, 4) == 0 || (isnan(dy) && isnan(gdy)));
    if (!same && bad++ < 5) fprintf(stderr, "gelu at %.9g: kernel %.9g %.9g, scalar %.9g %.9g\n", x[i], gy, gdy, y, dy);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(ir_eval_unary(IR_OP_GELU, INFINITY) == INFINITY && ir_eval_unary(IR_OP_GELU, -INFINITY) == 0);
  CHECK(ir_eval_unary(IR_OP_GELU_GRAD, INFINITY) == 1 && ir_eval_unary(IR_OP_GELU_GRAD, -INFINITY) == 0);
  double worst = 0;
  for (double v = -707; v < 709.78; v += 0.00713) {
    double e = exp(v), f = ir_exp_smooth(v);
    double ulps = fabs(e - f) / (nextafter(e, INFINITY) - e);
    if (ulps > worst) worst = ulps;
  }
  printf("gelu: fused kernel = ir_eval_unary bit for bit on %d values; ir_exp_smooth within %.2f ulp of exp\n", N, worst);
  CHECK(worst <= 2);
  CHECK(isinf(ir_exp_smooth(710)) && isnan(ir_exp_smooth(NAN)));
  rt_tensor_free(tx);
  rt_tensor_free(out[0]);
  rt_tensor_free(out[1]);
  ir_graph_free(g);
}

/* A fused node whose expr was never typed (built without ir_infer): the
 * kernel reports an error and does not crash. */
static void test_bad_expr_kernel(void) {
  const char *bad[] = {"", "(", "$9", "(add $0)", "(frobnicate $0)", "(cast f32 $0", "(const f32 1e999999x)", "$0 $0"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ir_graph *g = ir_graph_new("bad", NULL);
    ir_type t = {IR_DT_F32, 1, {4}};
    ir_value *x = ir_graph_add_input(g, "x", t, (ir_loc){0});
    ir_attr a = ir_attr_str("expr", bad[i]);
    ir_node *n = ir_graph_add_node(g, IR_OP_FUSED, &x, 1, &t, 1, &a, 1, NULL, (ir_loc){0});
    ir_graph_add_output(g, "y", n->out[0]);
    rt_tensor *in = rt_tensor_new(&t), *out = NULL;
    char err[256] = "";
    int rc = rt_run(&rt_cpu_backend, g, &in, NULL, &out, NULL, err, sizeof err);
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(err, "fused") != NULL);
    rt_tensor_free(in);
    rt_tensor_free(out);
    ir_graph_free(g);
  }
}

static void test_not_differentiable(void) {
  ir_graph *g = ir_graph_new("d", NULL);
  ir_type t = {IR_DT_F32, 1, {4}}, s = {IR_DT_F32, 0, {0}};
  ir_value *x = ir_graph_add_input(g, "x", t, (ir_loc){0});
  ir_attr a = ir_attr_str("expr", "(tanh $0)");
  ir_value *y = ir_graph_build1(g, IR_OP_FUSED, &x, 1, &a, 1, "y", (ir_loc){0});
  int64_t ax[1] = {0};
  ir_attr ra = ir_attr_ints("axes", ax, 1);
  ir_value *l = ir_graph_build1(g, IR_OP_REDUCE_SUM, &y, 1, &ra, 1, "l", (ir_loc){0});
  CHECK(ir_type_equal(&l->type, &s));
  ir_value *grad = NULL;
  FILE *devnull = fopen("/dev/null", "w");
  ir_diag *d = ir_diag_new(devnull);
  CHECK_EQ_INT(pass_vjp(g, l, &x, 1, &grad, d), -1);
  CHECK(ir_diag_errors(d) > 0);
  ir_diag_free(d);
  fclose(devnull);
  ir_graph_free(g);
}

int main(void) {
  test_typing();
  test_multi_results_in_place();
  test_gelu_vector_path();
  test_bad_expr_kernel();
  test_not_differentiable();
  test_reduce_fast_paths();
  test_transpose_fast_path();
  test_examples_forward();
  test_kernel_counts();
  test_training("examples/gpt.tg");
  test_training("examples/llama.tg");
  test_training_bf16("examples/gpt.tg");
  test_long_chain();
  return check_done();
}
