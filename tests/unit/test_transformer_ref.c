/* tests/unit/test_transformer_ref.c — examples/transformer_block.tg against an
 * independent reference: the same block written here with naive loops in
 * double (it calls no tgc kernel; it only reads the parameter and input
 * values that the runtime initialized, so both sides see identical numbers).
 *
 * Setup: fe_compile with the default config (B=2, L=16, D=64, nH=4), params
 * from rt_init_param(seed 1), x from rt_fill_random(seed 1, "x"), run on
 * rt_cpu_backend (no passes).
 *
 * Tolerances, per element, with ref the double reference:
 *   f32 run: |got - ref| <= 1e-4 * max(1, |ref|)   (f32 keeps ~7 digits; the
 *            block has ~6 chained reductions of up to 256 terms, O(1) values)
 *   f64 run: |got - ref| <= 1e-10 * max(1, |ref|)
 * The f64 run compiles the example's text with every "f32" replaced by
 * "f64" (the language has no dtype parameter), so it stays in sync with the
 * file. A second f32 case overrides nH=8 (-D) to check the head split for a
 * different head count.
 * On failure the first mismatches and the max abs diff are printed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"
#include "ir.h"
#include "runtime.h"

#define EXAMPLE "examples/transformer_block.tg"

/* Parameter/input values copied out as doubles, shapes from the graph. */
typedef struct {
  int64_t B, L, D, nH, H;
  double *x, *WQ, *WK, *WV, *WO, *W1, *W2;
} block_data;

/* ---------------------------------------------------------------------- */
/* The reference: y = relu(((softmax(Q K^T / sqrt(D)) V) merged) WO W1) W2  */
/* ---------------------------------------------------------------------- */

/* out[n, j] = sum_k a[n, k] * w[k, j]   (a is [N, K], w is [K, J]) */
static void ref_matmul(double *out, const double *a, const double *w, int64_t N, int64_t K,
                       int64_t J) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < J; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += a[n * K + k] * w[k * J + j];
      out[n * J + j] = s;
    }
}

/* Returns y: [B, L, D] (malloc'd). */
static double *ref_block(const block_data *p) {
  int64_t B = p->B, L = p->L, D = p->D, nH = p->nH, H = p->H, N = B * L;
  double *Q = malloc((size_t)(N * D) * sizeof(double));
  double *K = malloc((size_t)(N * D) * sizeof(double));
  double *V = malloc((size_t)(N * D) * sizeof(double));
  double *Z = malloc((size_t)(N * D) * sizeof(double));
  double *Out = malloc((size_t)(N * D) * sizeof(double));
  double *A = malloc((size_t)(N * 4 * D) * sizeof(double));
  double *y = malloc((size_t)(N * D) * sizeof(double));
  double *row = malloc((size_t)L * sizeof(double));
  /* Q = x WQ etc., x viewed as [B*L, D] */
  ref_matmul(Q, p->x, p->WQ, N, D, D);
  ref_matmul(K, p->x, p->WK, N, D, D);
  ref_matmul(V, p->x, p->WV, N, D, D);
  /* Head h of token (b, i) is columns h*H .. h*H+H-1 (reshape [B, L, nH, H]).
   * Score[b,h,i,:] = softmax_j(Q_h[b,i] . K_h[b,j] / sqrt(D));
   * Z[b,i,h*H+e] = sum_j Score[b,h,i,j] V[b,j,h*H+e] (the merged heads). */
  double scale = sqrt((double)D);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < nH; h++)
      for (int64_t i = 0; i < L; i++) {
        const double *q = Q + (b * L + i) * D + h * H;
        double mx = -INFINITY;
        for (int64_t j = 0; j < L; j++) {
          const double *k = K + (b * L + j) * D + h * H;
          double s = 0;
          for (int64_t e = 0; e < H; e++) s += q[e] * k[e];
          row[j] = s / scale;
          if (row[j] > mx) mx = row[j];
        }
        double sum = 0;
        for (int64_t j = 0; j < L; j++) sum += row[j] = exp(row[j] - mx);
        for (int64_t j = 0; j < L; j++) row[j] /= sum;
        for (int64_t e = 0; e < H; e++) {
          double s = 0;
          for (int64_t j = 0; j < L; j++) s += row[j] * V[(b * L + j) * D + h * H + e];
          Z[(b * L + i) * D + h * H + e] = s;
        }
      }
  ref_matmul(Out, Z, p->WO, N, D, D);
  ref_matmul(A, Out, p->W1, N, D, 4 * D);
  for (int64_t i = 0; i < N * 4 * D; i++) A[i] = A[i] > 0 ? A[i] : 0;
  ref_matmul(y, A, p->W2, N, 4 * D, D);
  free(Q);
  free(K);
  free(V);
  free(Z);
  free(Out);
  free(A);
  free(row);
  return y;
}

/* ---------------------------------------------------------------------- */
/* Running the example                                                     */
/* ---------------------------------------------------------------------- */

static double *copy_out(const rt_tensor *t, int64_t want_numel) {
  if (!t || ir_type_numel(&t->type) != want_numel) return NULL;
  double *v = malloc((size_t)want_numel * sizeof *v);
  for (int64_t i = 0; i < want_numel; i++) v[i] = rt_tensor_get(t, i);
  return v;
}

/* Compares got with ref element by element; prints the first mismatches. */
static void compare(const char *what, const rt_tensor *got, const double *ref, int64_t n,
                    double tol) {
  double max_abs = 0, max_ref = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = rt_tensor_get(got, i), d = fabs(g - ref[i]);
    max_ref = fmax(max_ref, fabs(ref[i]));
    if (!(d <= max_abs)) max_abs = d; /* also catches NaN */
    if (!(d <= tol * fmax(1.0, fabs(ref[i])))) {
      if (bad < 8) fprintf(stderr, "%s: y[%lld] = %.9g, reference %.9g (diff %.3g)\n", what,
                           (long long)i, g, ref[i], d);
      bad++;
    }
  }
  if (bad)
    fprintf(stderr, "%s: %lld of %lld elements outside tol %g; max abs diff %.3g\n", what,
            (long long)bad, (long long)n, tol, max_abs);
  else
    printf("%s: max abs diff %.3g (tol %g), max |y| %.3g\n", what, max_abs, tol, max_ref);
  CHECK_EQ_INT(bad, 0);
}

/* Compiles text (the example or its f64 twin), runs it and compares with
 * the reference at tolerance tol. want: dtype expected of x and y. */
static void run_case(const char *what, const char *text, size_t len, const fe_options *opt,
                     ir_dtype want, double tol) {
  ir_diag *d = ir_diag_new(stderr);
  ir_graph *g = fe_compile(EXAMPLE, text, len, opt, d);
  CHECK(g != NULL);
  if (!g) {
    ir_diag_free(d);
    return;
  }
  CHECK_EQ_INT(ir_verify(g, d), 0);
  CHECK_EQ_INT(g->n_inputs, 1);
  CHECK_EQ_INT(g->n_outputs, 1);
  CHECK_EQ_INT(g->n_params, 6);
  if (g->n_inputs != 1 || g->n_outputs != 1 || g->n_params != 6 || g->inputs[0]->type.rank != 3) {
    ir_graph_free(g);
    ir_diag_free(d);
    return;
  }
  CHECK_STR(g->inputs[0]->name, "x");
  CHECK_STR(g->outputs[0].name, "y");
  CHECK_EQ_INT(g->inputs[0]->type.dtype, want);
  CHECK_EQ_INT(g->outputs[0].value->type.dtype, want);

  rt_tensor *x = rt_tensor_new(&g->inputs[0]->type);
  rt_fill_random(x, 1, "x", 0);
  rt_tensor *params[6] = {0};
  for (int i = 0; i < 6; i++) {
    params[i] = rt_tensor_new(&g->params[i]->type);
    rt_init_param(params[i], g->params[i], 1);
  }
  block_data p = {0};
  p.B = x->type.dims[0];
  p.L = x->type.dims[1];
  p.D = x->type.dims[2];
  /* nH from the chosen config: default 4, or the -D override */
  p.nH = 4;
  for (int i = 0; i < opt->n_defines; i++)
    if (strcmp(opt->defines[i].name, "nH") == 0) p.nH = atoi(opt->defines[i].value);
  p.H = p.D / p.nH;
  p.x = copy_out(x, p.B * p.L * p.D);
  static const char *const names[6] = {"WQ", "WK", "WV", "WO", "W1", "W2"};
  double **slots[6] = {&p.WQ, &p.WK, &p.WV, &p.WO, &p.W1, &p.W2};
  const int64_t sizes[6] = {p.D * p.D, p.D * p.D, p.D * p.D, p.D * p.D, 4 * p.D * p.D, 4 * p.D * p.D};
  bool ok = p.x != NULL;
  for (int k = 0; k < 6; k++) {
    for (int i = 0; i < 6; i++)
      if (strcmp(g->params[i]->name, names[k]) == 0) *slots[k] = copy_out(params[i], sizes[k]);
    if (!*slots[k]) {
      fprintf(stderr, "%s: parameter %s missing or of the wrong size\n", what, names[k]);
      ok = false;
    }
  }
  CHECK(ok);

  rt_tensor *out[1] = {0};
  char err[512] = "";
  if (ok) {
    int rc = rt_run(&rt_cpu_backend, g, &x, params, out, NULL, err, sizeof err);
    if (rc != 0) fprintf(stderr, "%s: run failed: %s\n", what, err);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0 && out[0]) {
      int64_t n = p.B * p.L * p.D;
      CHECK_EQ_INT(ir_type_numel(&out[0]->type), n);
      if (ir_type_numel(&out[0]->type) == n) {
        double *ref = ref_block(&p);
        compare(what, out[0], ref, n, tol);
        free(ref);
      }
    }
  }
  rt_tensor_free(out[0]);
  free(p.x);
  for (int k = 0; k < 6; k++) free(*slots[k]);
  for (int i = 0; i < 6; i++) rt_tensor_free(params[i]);
  rt_tensor_free(x);
  ir_graph_free(g);
  ir_diag_free(d);
}

/* The example with every "f32" turned into "f64" (malloc'd). */
static char *to_f64(const char *text, size_t len) {
  char *t = malloc(len + 1);
  memcpy(t, text, len);
  t[len] = 0;
  for (char *p = t; (p = strstr(p, "f32")) != NULL; p += 3) p[1] = '6', p[2] = '4';
  return t;
}

int main(void) {
  ir_diag *d = ir_diag_new(stderr);
  size_t len = 0;
  char *text = ir_read_file(EXAMPLE, 1u << 20, &len, d);
  CHECK(text != NULL);
  if (text) {
    fe_options def = {0};
    run_case("f32 default", text, len, &def, IR_DT_F32, 1e-4);
    fe_define nh8 = {"nH", "8"};
    fe_options heads8 = {.defines = &nh8, .n_defines = 1};
    run_case("f32 nH=8", text, len, &heads8, IR_DT_F32, 1e-4);
    char *t64 = to_f64(text, len);
    CHECK(strstr(t64, "f32") == NULL);
    run_case("f64 default", t64, len, &def, IR_DT_F64, 1e-10);
    free(t64);
  }
  free(text);
  ir_diag_free(d);
  return check_done();
}
