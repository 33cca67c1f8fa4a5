/* bench/baseline_gpt2.c — the plain-C baseline that bench/ compares tgc against.
 *
 * One training step of GPT-2 124M, written the straightforward way: fp32
 * arrays, every layer a pair of functions x_forward / x_backward, matmuls as
 * plain triple loops threaded with `#pragma omp parallel for`, AdamW.  No
 * BLAS, no tiling, no hand vectorization; the only help the compiler gets is
 * `#pragma omp simd` on innermost loops (so that -O3 may vectorize a float dot
 * product without -ffast-math) and a loop order that reads each weight row
 * from memory once per step rather than once per token.
 *
 * Model (GPT-2): token + learned position embedding; L pre-LayerNorm blocks
 *   x = x + proj(attention(qkv(ln1(x))))      causal, H heads, softmax(q·k/sqrt(hs))
 *   x = x + fcproj(gelu(fc(ln2(x))))          GELU tanh form, width 4D
 * final LayerNorm; logits = lnf(x) · wteᵀ (tied); mean cross-entropy against
 * the next token.  Linear layers hold W as [out, in] and compute y = x·Wᵀ + b.
 *
 * Modes:
 *   baseline_gpt2 [--steps N] [--batch B] [--seq T] [--seed S] [--tiny]
 *       trains N steps (default 5) of GPT-2 124M (V 50257, context 1024,
 *       D 768, 12 layers, 12 heads) at B = 4, T = 64 on random tokens and
 *       prints per-step times (forward / backward / update) and a summary:
 *       min and median ms/step, tokens/s and GFLOP/s at the min.
 *   baseline_gpt2 --check
 *       checks correctness on a tiny config (V 64, T 8, D 32, 2 layers, 4
 *       heads, B 2): loss at init ≈ ln V; every parameter tensor's gradient
 *       against central finite differences at a random point; the exact
 *       parameter count of the 124M config; a few AdamW steps lower the loss.
 *       Exit status 0 when all checks pass.
 *   baseline_gpt2 --write-tokens FILE COUNT [--seed S]
 *       writes COUNT random tokens in [0, 50257) as uint16 little-endian
 *       (the `tokens:PATH` format of `tgc train`), for the tgc side of bench/.
 *
 * Build: gcc -O3 -march=native -fopenmp bench/baseline_gpt2.c -lm  (fp32)
 *        add -DBASELINE_DOUBLE for an fp64 build (used for a tight --check).
 * Threads: OMP_NUM_THREADS (default: all cores).
 *
 * FLOPs reported: 6·N·tokens (N = every parameter, 124,439,808) plus the
 * attention score and value products that the loops execute (causal: t2 <= t),
 * 6·L·B·D·T(T+1) per step for forward + backward.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef BASELINE_DOUBLE
typedef double real;
#define REAL_NAME "fp64"
static inline real r_exp(real x) { return exp(x); }
static inline real r_log(real x) { return log(x); }
static inline real r_sqrt(real x) { return sqrt(x); }
static inline real r_tanh(real x) { return tanh(x); }
#else
typedef float real;
#define REAL_NAME "fp32"
static inline real r_exp(real x) { return expf(x); }
static inline real r_log(real x) { return logf(x); }
static inline real r_sqrt(real x) { return sqrtf(x); }
static inline real r_tanh(real x) { return tanhf(x); }
#endif

static int n_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the whole process (all threads): under load, cpu / threads
 * approximates the wall time the step would take on idle cores. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (!p) {
    fprintf(stderr, "baseline_gpt2: out of memory (%zu x %zu bytes)\n", n, size);
    exit(1);
  }
  return p;
}

/* ---------------------------------------------------------------- random */

/* splitmix64: a counter-based generator, so initialization is the same for
 * any number of threads. */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* uniform in (0, 1) */
static double uniform01(uint64_t seed, uint64_t i) {
  return ((double)(mix64(seed * 0x100000001b3ull + i) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* standard normal (Box-Muller), the i-th of stream `seed` */
static double normal01(uint64_t seed, uint64_t i) {
  double u1 = uniform01(seed, 2 * i), u2 = uniform01(seed, 2 * i + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---------------------------------------------------------------- model */

typedef struct {
  int V;    /* vocabulary */
  int maxT; /* rows of the position table */
  int D;    /* model width */
  int L;    /* blocks */
  int H;    /* heads; D % H == 0 */
} model_cfg;

enum { N_TENSORS = 16 };

/* Parameters (and, with the same layout, their gradients). Per-layer tensors
 * are stacked over the L layers. */
typedef struct {
  real *wte, *wpe;     /* [V,D], [maxT,D] */
  real *ln1w, *ln1b;   /* [L,D] */
  real *qkvw, *qkvb;   /* [L,3D,D], [L,3D] */
  real *projw, *projb; /* [L,D,D], [L,D] */
  real *ln2w, *ln2b;   /* [L,D] */
  real *fcw, *fcb;     /* [L,4D,D], [L,4D] */
  real *fcpw, *fcpb;   /* [L,D,4D], [L,D] */
  real *lnfw, *lnfb;   /* [D] */
} params;

static const char *const tensor_names[N_TENSORS] = {"wte",  "wpe",  "ln1w", "ln1b", "qkvw", "qkvb", "projw", "projb",
                                                    "ln2w", "ln2b", "fcw",  "fcb",  "fcpw", "fcpb", "lnfw",  "lnfb"};

static void tensor_sizes(const model_cfg *c, size_t sz[N_TENSORS]) {
  size_t V = (size_t)c->V, T = (size_t)c->maxT, D = (size_t)c->D, L = (size_t)c->L;
  size_t s[N_TENSORS] = {V * D,         T * D, L * D,     L * D, L * 3 * D * D, L * 3 * D, L * D * D, L * D,
                         L * D,         L * D, L * 4 * D * D, L * 4 * D, L * D * 4 * D, L * D, D,  D};
  memcpy(sz, s, sizeof s);
}

static void tensor_slots(params *p, real **slot[N_TENSORS]) {
  real **s[N_TENSORS] = {&p->wte,  &p->wpe,  &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->projw, &p->projb,
                         &p->ln2w, &p->ln2b, &p->fcw,  &p->fcb,  &p->fcpw, &p->fcpb, &p->lnfw,  &p->lnfb};
  memcpy(slot, s, sizeof s);
}

/* Points the tensors of p into base, in the order above. */
static void params_point(params *p, real *base, const size_t sz[N_TENSORS]) {
  real **slot[N_TENSORS];
  tensor_slots(p, slot);
  for (int k = 0; k < N_TENSORS; k++) *slot[k] = base, base += sz[k];
}

static size_t count_params(const model_cfg *c) {
  size_t sz[N_TENSORS], n = 0;
  tensor_sizes(c, sz);
  for (int k = 0; k < N_TENSORS; k++) n += sz[k];
  return n;
}

/* Saved forward activations (per-layer ones stacked over L). N = B·T rows. */
typedef struct {
  real *emb;                        /* [N,D] residual stream into block 0 */
  real *ln1, *ln1_mean, *ln1_rstd;  /* [L,N,D], [L,N], [L,N] */
  real *qkv;                        /* [L,N,3D] */
  real *att;                        /* [L,B,H,T,T] softmax probabilities */
  real *atty;                       /* [L,N,D] attention output, heads merged */
  real *res1;                       /* [L,N,D] residual after attention */
  real *ln2, *ln2_mean, *ln2_rstd;  /* [L,N,D], [L,N], [L,N] */
  real *fch, *fchg;                 /* [L,N,4D] fc output, after GELU */
  real *res2;                       /* [L,N,D] residual after the MLP */
  real *lnf, *lnf_mean, *lnf_rstd;  /* [N,D], [N], [N] */
  real *probs;                      /* [N,V] logits -> probabilities -> dlogits */
  real *losses;                     /* [N] */
} acts;

/* Gradient buffers for one block at a time (backward walks the blocks down). */
typedef struct {
  real *dres;        /* [N,D] gradient of the residual stream */
  real *dln;         /* [N,D] gradient of a LayerNorm output */
  real *dqkv;        /* [N,3D] */
  real *datty;       /* [N,D] */
  real *dfch, *dfchg; /* [N,4D] */
  real *dp;          /* [B,H,T] attention scratch */
} scratch;

typedef struct {
  model_cfg c;
  int B, T;
  size_t sz[N_TENSORS], n_params;
  real *param_mem, *grad_mem, *m_mem, *v_mem;
  params p, g;
  acts a;
  scratch s;
  int *tokens, *targets; /* [N] */
  int step;              /* AdamW steps taken */
} model;

static void model_init(model *m, const model_cfg *c, int B, int T) {
  memset(m, 0, sizeof *m);
  m->c = *c;
  m->B = B, m->T = T;
  tensor_sizes(c, m->sz);
  m->n_params = count_params(c);
  m->param_mem = xcalloc(m->n_params, sizeof(real));
  m->grad_mem = xcalloc(m->n_params, sizeof(real));
  m->m_mem = xcalloc(m->n_params, sizeof(real));
  m->v_mem = xcalloc(m->n_params, sizeof(real));
  params_point(&m->p, m->param_mem, m->sz);
  params_point(&m->g, m->grad_mem, m->sz);
  size_t N = (size_t)B * T, D = (size_t)c->D, L = (size_t)c->L, H = (size_t)c->H, V = (size_t)c->V;
  acts *a = &m->a;
  a->emb = xcalloc(N * D, sizeof(real));
  a->ln1 = xcalloc(L * N * D, sizeof(real));
  a->ln1_mean = xcalloc(L * N, sizeof(real));
  a->ln1_rstd = xcalloc(L * N, sizeof(real));
  a->qkv = xcalloc(L * N * 3 * D, sizeof(real));
  a->att = xcalloc(L * N * H * (size_t)T, sizeof(real));
  a->atty = xcalloc(L * N * D, sizeof(real));
  a->res1 = xcalloc(L * N * D, sizeof(real));
  a->ln2 = xcalloc(L * N * D, sizeof(real));
  a->ln2_mean = xcalloc(L * N, sizeof(real));
  a->ln2_rstd = xcalloc(L * N, sizeof(real));
  a->fch = xcalloc(L * N * 4 * D, sizeof(real));
  a->fchg = xcalloc(L * N * 4 * D, sizeof(real));
  a->res2 = xcalloc(L * N * D, sizeof(real));
  a->lnf = xcalloc(N * D, sizeof(real));
  a->lnf_mean = xcalloc(N, sizeof(real));
  a->lnf_rstd = xcalloc(N, sizeof(real));
  a->probs = xcalloc(N * V, sizeof(real));
  a->losses = xcalloc(N, sizeof(real));
  scratch *s = &m->s;
  s->dres = xcalloc(N * D, sizeof(real));
  s->dln = xcalloc(N * D, sizeof(real));
  s->dqkv = xcalloc(N * 3 * D, sizeof(real));
  s->datty = xcalloc(N * D, sizeof(real));
  s->dfch = xcalloc(N * 4 * D, sizeof(real));
  s->dfchg = xcalloc(N * 4 * D, sizeof(real));
  s->dp = xcalloc(N * H, sizeof(real));
  m->tokens = xcalloc(N, sizeof(int));
  m->targets = xcalloc(N, sizeof(int));
}

static void model_free(model *m) {
  free(m->param_mem), free(m->grad_mem), free(m->m_mem), free(m->v_mem);
  acts *a = &m->a;
  real *ab[] = {a->emb, a->ln1,  a->ln1_mean, a->ln1_rstd, a->qkv,      a->att,      a->atty,  a->res1,   a->ln2, a->ln2_mean,
                a->ln2_rstd, a->fch, a->fchg, a->res2,     a->lnf,      a->lnf_mean, a->lnf_rstd, a->probs, a->losses};
  for (size_t k = 0; k < sizeof ab / sizeof ab[0]; k++) free(ab[k]);
  scratch *s = &m->s;
  free(s->dres), free(s->dln), free(s->dqkv), free(s->datty), free(s->dfch), free(s->dfchg), free(s->dp);
  free(m->tokens), free(m->targets);
}

/* GPT-2 style: weights normal(0, std), LayerNorm weights 1, biases 0.
 * With jitter > 0 (the gradient check), LayerNorm weights are 1 + normal(jitter)
 * and biases normal(jitter), so that no gradient sits at a special point. */
static void init_params(model *m, uint64_t seed, double std, double jitter) {
  real **slot[N_TENSORS];
  tensor_slots(&m->p, slot);
  for (int k = 0; k < N_TENSORS; k++) {
    const char *nm = tensor_names[k];
    size_t len = strlen(nm);
    int is_bias = nm[len - 1] == 'b' && strcmp(nm, "wte") != 0;
    int is_lnw = (strncmp(nm, "ln", 2) == 0) && nm[len - 1] == 'w';
    real *t = *slot[k];
    long long n = (long long)m->sz[k];
    uint64_t stream = seed * 131 + (uint64_t)k;
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < n; i++) {
      double z = normal01(stream, (uint64_t)i);
      if (is_lnw) t[i] = (real)(1.0 + jitter * z);
      else if (is_bias) t[i] = (real)(jitter * z);
      else t[i] = (real)(std * z);
    }
  }
}

/* Random tokens in [0, V): a stream of N + 1, tokens = stream[0..N), targets = stream[1..N]. */
static void init_data(model *m, uint64_t seed) {
  int N = m->B * m->T;
  for (int n = 0; n < N; n++) {
    m->tokens[n] = (int)(mix64(seed * 7919 + (uint64_t)n) % (uint64_t)m->c.V);
    m->targets[n] = (int)(mix64(seed * 7919 + (uint64_t)n + 1) % (uint64_t)m->c.V);
  }
}

/* ---------------------------------------------------------------- layers */

/* emb[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]     emb (B,T,D) */
static void embedding_forward(real *emb, const int *tokens, const real *wte, const real *wpe, int B, int T, int D) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      real *e = emb + ((size_t)b * T + t) * D;
      const real *we = wte + (size_t)tokens[b * T + t] * D, *pe = wpe + (size_t)t * D;
      for (int i = 0; i < D; i++) e[i] = we[i] + pe[i];
    }
}

/* backward of the line above: dwte[tok] += demb, dwpe[t] += demb (serial:
 * tokens repeat, so rows of dwte are shared between positions) */
static void embedding_backward(real *dwte, real *dwpe, const real *demb, const int *tokens, int B, int T, int D) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const real *g = demb + ((size_t)b * T + t) * D;
      real *we = dwte + (size_t)tokens[b * T + t] * D, *pe = dwpe + (size_t)t * D;
      for (int i = 0; i < D; i++) we[i] += g[i], pe[i] += g[i];
    }
}

/* y = (x - mean) * rstd * w + b over the last axis    x, y (N,D); mean, rstd (N) */
static void layernorm_forward(real *y, real *mean, real *rstd, const real *x, const real *w, const real *b, int N, int D) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const real *xr = x + (size_t)n * D;
    real *yr = y + (size_t)n * D;
    real mu = 0, var = 0;
    for (int i = 0; i < D; i++) mu += xr[i];
    mu /= (real)D;
    for (int i = 0; i < D; i++) var += (xr[i] - mu) * (xr[i] - mu);
    var /= (real)D;
    real s = 1 / r_sqrt(var + (real)1e-5);
    for (int i = 0; i < D; i++) yr[i] = (xr[i] - mu) * s * w[i] + b[i];
    mean[n] = mu, rstd[n] = s;
  }
}

/* backward of y = xhat * w + b, xhat = (x - mean) * rstd:
 *   dx += rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * w
 *   dw += sum_n dy * xhat,  db += sum_n dy */
static void layernorm_backward(real *dx, real *dw, real *db, const real *dy, const real *x, const real *mean,
                               const real *rstd, const real *w, int N, int D) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const real *xr = x + (size_t)n * D, *dyr = dy + (size_t)n * D;
    real *dxr = dx + (size_t)n * D;
    real mu = mean[n], s = rstd[n], gm = 0, gxm = 0;
    for (int i = 0; i < D; i++) {
      real g = dyr[i] * w[i];
      gm += g, gxm += g * (xr[i] - mu) * s;
    }
    gm /= (real)D, gxm /= (real)D;
    for (int i = 0; i < D; i++) {
      real xhat = (xr[i] - mu) * s;
      dxr[i] += s * (dyr[i] * w[i] - gm - xhat * gxm);
    }
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < D; i++) {
    real sw = 0, sb = 0;
    for (int n = 0; n < N; n++) {
      real g = dy[(size_t)n * D + i];
      sw += g * (x[(size_t)n * D + i] - mean[n]) * rstd[n];
      sb += g;
    }
    dw[i] += sw, db[i] += sb;
  }
}

/* out[n,o] = b[o] + sum_i x[n,i] W[o,i]      x (N,I), W (O,I), b (O) or NULL, out (N,O)
 * The weight row is the outer loop, so each row of W (the LM head's is 154 MB
 * in all) is read from memory once and the N rows of x stay in cache. */
static void matmul_forward(real *out, const real *x, const real *W, const real *b, int N, int I, int O) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int o = 0; o < O; o++)
    for (int n = 0; n < N; n++) {
      const real *xr = x + (size_t)n * I, *wr = W + (size_t)o * I;
      real acc = b ? b[o] : 0;
#pragma omp simd reduction(+ : acc)
      for (int i = 0; i < I; i++) acc += xr[i] * wr[i];
      out[(size_t)n * O + o] = acc;
    }
}

/* backward of out = x·Wᵀ + b, given dout (N,O):
 *   dW[o,:] += sum_n dout[n,o] x[n,:]   db[o] += sum_n dout[n,o]   (threads own rows of W)
 *   dx[n,:]  = sum_o dout[n,o] W[o,:]                              (threads own rows of x) */
static void matmul_backward(real *dx, real *dW, real *db, const real *dout, const real *x, const real *W, int N, int I,
                            int O) {
#pragma omp parallel for schedule(static)
  for (int o = 0; o < O; o++) {
    real *dwr = dW + (size_t)o * I, bsum = 0;
    for (int n = 0; n < N; n++) {
      real g = dout[(size_t)n * O + o];
      const real *xr = x + (size_t)n * I;
      bsum += g;
#pragma omp simd
      for (int i = 0; i < I; i++) dwr[i] += g * xr[i];
    }
    if (db) db[o] += bsum;
  }
#pragma omp parallel
  {
#ifdef _OPENMP
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
    int nt = 1, id = 0;
#endif
    int n0 = (int)((long long)N * id / nt), n1 = (int)((long long)N * (id + 1) / nt);
    memset(dx + (size_t)n0 * I, 0, (size_t)(n1 - n0) * I * sizeof(real));
    /* weight rows outer, as in the forward: W is streamed once per thread */
    for (int o = 0; o < O; o++) {
      const real *wr = W + (size_t)o * I;
      for (int n = n0; n < n1; n++) {
        real g = dout[(size_t)n * O + o];
        real *dxr = dx + (size_t)n * I;
#pragma omp simd
        for (int i = 0; i < I; i++) dxr[i] += g * wr[i];
      }
    }
  }
}

/* Causal multi-head attention.  qkv (B,T,3D) holds q | k | v, head h in
 * columns h·hs .. (h+1)·hs of each; out (B,T,D) heads merged; att (B,H,T,T)
 * the probabilities p[t,t2] = softmax_{t2<=t}(q_t·k_t2 / sqrt(hs)), 0 above
 * the diagonal. */
static void attention_forward(real *out, real *att, const real *qkv, int B, int T, int D, int H) {
  int hs = D / H;
  size_t C3 = 3 * (size_t)D;
  real scale = 1 / r_sqrt((real)hs);
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++) {
        const real *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
        real *p = att + (((size_t)b * H + h) * T + t) * T;
        real mx = -INFINITY, sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const real *k = qkv + ((size_t)b * T + t2) * C3 + D + (size_t)h * hs;
          real sc = 0;
          for (int i = 0; i < hs; i++) sc += q[i] * k[i];
          p[t2] = sc * scale;
          if (p[t2] > mx) mx = p[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) p[t2] = r_exp(p[t2] - mx), sum += p[t2];
        for (int t2 = 0; t2 <= t; t2++) p[t2] /= sum;
        for (int t2 = t + 1; t2 < T; t2++) p[t2] = 0;
        real *o = out + ((size_t)b * T + t) * D + (size_t)h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const real *v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)D + (size_t)h * hs;
          for (int i = 0; i < hs; i++) o[i] += p[t2] * v[i];
        }
      }
}

/* backward of the above, dqkv (B,T,3D) overwritten; one thread per (b,h),
 * since dk and dv of a position collect from every later query:
 *   o_t = sum p[t,t2] v_t2         =>  dp[t2] = do_t·v_t2,  dv_t2 += p[t,t2] do_t
 *   p = softmax(s)                 =>  ds[t2] = p[t2] (dp[t2] - sum_j p[j] dp[j])
 *   s[t2] = scale q_t·k_t2         =>  dq_t += scale ds[t2] k_t2,  dk_t2 += scale ds[t2] q_t */
static void attention_backward(real *dqkv, real *dp_scratch, const real *dout, const real *qkv, const real *att, int B,
                               int T, int D, int H) {
  int hs = D / H;
  size_t C3 = 3 * (size_t)D;
  real scale = 1 / r_sqrt((real)hs);
  memset(dqkv, 0, (size_t)B * T * C3 * sizeof(real));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      real *dp = dp_scratch + ((size_t)b * H + h) * T;
      for (int t = 0; t < T; t++) {
        const real *p = att + (((size_t)b * H + h) * T + t) * T;
        const real *dO = dout + ((size_t)b * T + t) * D + (size_t)h * hs;
        const real *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
        real *dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
        real pdp = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const real *v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)D + (size_t)h * hs;
          real *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)D + (size_t)h * hs;
          real acc = 0;
          for (int i = 0; i < hs; i++) acc += dO[i] * v[i], dv[i] += p[t2] * dO[i];
          dp[t2] = acc;
          pdp += p[t2] * acc;
        }
        for (int t2 = 0; t2 <= t; t2++) {
          const real *k = qkv + ((size_t)b * T + t2) * C3 + D + (size_t)h * hs;
          real *dk = dqkv + ((size_t)b * T + t2) * C3 + D + (size_t)h * hs;
          real ds = p[t2] * (dp[t2] - pdp) * scale;
          for (int i = 0; i < hs; i++) dq[i] += ds * k[i], dk[i] += ds * q[i];
        }
      }
    }
}

/* y = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x³) */
#define GELU_C ((real)0.7978845608028654)
static void gelu_forward(real *y, const real *x, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    real v = x[i];
    y[i] = (real)0.5 * v * (1 + r_tanh(GELU_C * (v + (real)0.044715 * v * v * v)));
  }
}

/* dy/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh² u) sqrt(2/pi) (1 + 3·0.044715 x²) */
static void gelu_backward(real *dx, const real *x, const real *dy, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    real v = x[i], th = r_tanh(GELU_C * (v + (real)0.044715 * v * v * v));
    real d = (real)0.5 * (1 + th) + (real)0.5 * v * (1 - th * th) * GELU_C * (1 + (real)(3 * 0.044715) * v * v);
    dx[i] = d * dy[i];
  }
}

/* probs (N,V): logits in, softmax out; losses[n] = -log p[n, target[n]];
 * returns the mean loss */
static double crossentropy_forward(real *probs, real *losses, const int *targets, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    real *p = probs + (size_t)n * V;
    real mx = p[0], sum = 0;
    for (int v = 1; v < V; v++) mx = p[v] > mx ? p[v] : mx;
    real zt = p[targets[n]] - mx;
    for (int v = 0; v < V; v++) p[v] = r_exp(p[v] - mx), sum += p[v];
    for (int v = 0; v < V; v++) p[v] /= sum;
    losses[n] = r_log(sum) - zt;
  }
  double total = 0;
  for (int n = 0; n < N; n++) total += losses[n];
  return total / N;
}

/* backward of the mean loss, in place: dlogits = (p - onehot(target)) / N */
static void crossentropy_backward(real *probs, const int *targets, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    real *p = probs + (size_t)n * V;
    p[targets[n]] -= 1;
    for (int v = 0; v < V; v++) p[v] /= (real)N;
  }
}

static void add_inplace(real *y, const real *x, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* AdamW (decoupled weight decay), bias-corrected:
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;  p -= lr (m̂ / (sqrt(v̂) + eps) + wd p) */
static void adamw_update(real *p, const real *g, real *m, real *v, size_t n, int step, double lr, double b1, double b2,
                         double eps, double wd) {
  real c1 = (real)(1 - pow(b1, step)), c2 = (real)(1 - pow(b2, step));
  real rb1 = (real)b1, rb2 = (real)b2, rlr = (real)lr, reps = (real)eps, rwd = (real)wd;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    m[i] = rb1 * m[i] + (1 - rb1) * g[i];
    v[i] = rb2 * v[i] + (1 - rb2) * g[i] * g[i];
    p[i] -= rlr * ((m[i] / c1) / (r_sqrt(v[i] / c2) + reps) + rwd * p[i]);
  }
}

/* ---------------------------------------------------------------- step */

static double model_forward(model *m) {
  const model_cfg *c = &m->c;
  int B = m->B, T = m->T, N = B * T, D = c->D, H = c->H, V = c->V;
  size_t ND = (size_t)N * D, DD = (size_t)D * D;
  params *p = &m->p;
  acts *a = &m->a;
  embedding_forward(a->emb, m->tokens, p->wte, p->wpe, B, T, D);
  const real *r = a->emb;
  for (int l = 0; l < c->L; l++) {
    real *ln1 = a->ln1 + l * ND, *qkv = a->qkv + l * 3 * ND, *att = a->att + (size_t)l * N * H * T;
    real *atty = a->atty + l * ND, *res1 = a->res1 + l * ND, *ln2 = a->ln2 + l * ND;
    real *fch = a->fch + l * 4 * ND, *fchg = a->fchg + l * 4 * ND, *res2 = a->res2 + l * ND;
    layernorm_forward(ln1, a->ln1_mean + (size_t)l * N, a->ln1_rstd + (size_t)l * N, r, p->ln1w + (size_t)l * D,
                      p->ln1b + (size_t)l * D, N, D);
    matmul_forward(qkv, ln1, p->qkvw + l * 3 * DD, p->qkvb + (size_t)l * 3 * D, N, D, 3 * D);
    attention_forward(atty, att, qkv, B, T, D, H);
    matmul_forward(res1, atty, p->projw + l * DD, p->projb + (size_t)l * D, N, D, D);
    add_inplace(res1, r, ND);
    layernorm_forward(ln2, a->ln2_mean + (size_t)l * N, a->ln2_rstd + (size_t)l * N, res1, p->ln2w + (size_t)l * D,
                      p->ln2b + (size_t)l * D, N, D);
    matmul_forward(fch, ln2, p->fcw + l * 4 * DD, p->fcb + (size_t)l * 4 * D, N, D, 4 * D);
    gelu_forward(fchg, fch, 4 * ND);
    matmul_forward(res2, fchg, p->fcpw + l * 4 * DD, p->fcpb + (size_t)l * D, N, 4 * D, D);
    add_inplace(res2, res1, ND);
    r = res2;
  }
  layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, r, p->lnfw, p->lnfb, N, D);
  matmul_forward(a->probs, a->lnf, p->wte, NULL, N, D, V);
  return crossentropy_forward(a->probs, a->losses, m->targets, N, V);
}

/* Gradients of the mean loss into m->g (zeroed first). Needs model_forward. */
static void model_backward(model *m) {
  const model_cfg *c = &m->c;
  int B = m->B, T = m->T, N = B * T, D = c->D, H = c->H, V = c->V;
  size_t ND = (size_t)N * D, DD = (size_t)D * D;
  params *p = &m->p, *g = &m->g;
  acts *a = &m->a;
  scratch *s = &m->s;
  long long np = (long long)m->n_params;
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < np; i++) m->grad_mem[i] = 0;

  crossentropy_backward(a->probs, m->targets, N, V);
  matmul_backward(s->dln, g->wte, NULL, a->probs, a->lnf, p->wte, N, D, V);
  memset(s->dres, 0, ND * sizeof(real));
  const real *r_last = c->L ? a->res2 + (size_t)(c->L - 1) * ND : a->emb;
  layernorm_backward(s->dres, g->lnfw, g->lnfb, s->dln, r_last, a->lnf_mean, a->lnf_rstd, p->lnfw, N, D);
  for (int l = c->L - 1; l >= 0; l--) {
    const real *r_in = l ? a->res2 + (size_t)(l - 1) * ND : a->emb;
    real *ln1 = a->ln1 + l * ND, *qkv = a->qkv + l * 3 * ND, *att = a->att + (size_t)l * N * H * T;
    real *atty = a->atty + l * ND, *res1 = a->res1 + l * ND, *ln2 = a->ln2 + l * ND;
    real *fch = a->fch + l * 4 * ND, *fchg = a->fchg + l * 4 * ND;
    /* res2 = res1 + fcproj(gelu(fc(ln2(res1)))); s->dres holds d res2 */
    matmul_backward(s->dfchg, g->fcpw + l * 4 * DD, g->fcpb + (size_t)l * D, s->dres, fchg, p->fcpw + l * 4 * DD, N,
                    4 * D, D);
    gelu_backward(s->dfch, fch, s->dfchg, 4 * ND);
    matmul_backward(s->dln, g->fcw + l * 4 * DD, g->fcb + (size_t)l * 4 * D, s->dfch, ln2, p->fcw + l * 4 * DD, N, D,
                    4 * D);
    layernorm_backward(s->dres, g->ln2w + (size_t)l * D, g->ln2b + (size_t)l * D, s->dln, res1,
                       a->ln2_mean + (size_t)l * N, a->ln2_rstd + (size_t)l * N, p->ln2w + (size_t)l * D, N, D);
    /* res1 = r_in + proj(attention(qkv(ln1(r_in)))); s->dres holds d res1 */
    matmul_backward(s->datty, g->projw + l * DD, g->projb + (size_t)l * D, s->dres, atty, p->projw + l * DD, N, D, D);
    attention_backward(s->dqkv, s->dp, s->datty, qkv, att, B, T, D, H);
    matmul_backward(s->dln, g->qkvw + l * 3 * DD, g->qkvb + (size_t)l * 3 * D, s->dqkv, ln1, p->qkvw + l * 3 * DD, N, D,
                    3 * D);
    layernorm_backward(s->dres, g->ln1w + (size_t)l * D, g->ln1b + (size_t)l * D, s->dln, r_in,
                       a->ln1_mean + (size_t)l * N, a->ln1_rstd + (size_t)l * N, p->ln1w + (size_t)l * D, N, D);
  }
  embedding_backward(g->wte, g->wpe, s->dres, m->tokens, B, T, D);
}

static const double LR = 3e-4, BETA1 = 0.9, BETA2 = 0.999, EPS = 1e-8, WEIGHT_DECAY = 0.0;

static void model_update(model *m) {
  m->step++;
  adamw_update(m->param_mem, m->grad_mem, m->m_mem, m->v_mem, m->n_params, m->step, LR, BETA1, BETA2, EPS,
               WEIGHT_DECAY);
}

/* ---------------------------------------------------------------- check */

static const model_cfg GPT2_124M = {50257, 1024, 768, 12, 12};
static const model_cfg TINY = {64, 8, 32, 2, 4};

static int check_mode(void) {
  int fails = 0;
  /* 1. parameter count of the real config, by the closed form and exactly */
  size_t n124 = count_params(&GPT2_124M);
  printf("check: gpt2-124m parameters %zu (expected 124439808): %s\n", n124, n124 == 124439808u ? "ok" : "FAIL");
  fails += n124 != 124439808u;

  model m;
  int B = 2, T = 8;
  model_init(&m, &TINY, B, T);
  init_data(&m, 1);

  /* 2. loss at init ~ ln V */
  init_params(&m, 1, 0.02, 0.0);
  double loss0 = model_forward(&m), lnv = log((double)TINY.V);
  int ok = fabs(loss0 - lnv) < 0.05;
  printf("check: loss at init %.6f, ln V = %.6f, |diff| %.2e < 0.05: %s\n", loss0, lnv, fabs(loss0 - lnv),
         ok ? "ok" : "FAIL");
  fails += !ok;

  /* 3. gradients against central differences at a random point */
#ifdef BASELINE_DOUBLE
  const double h = 1e-5, rtol = 1e-6, atol = 1e-9;
#else
  const double h = 1e-2, rtol = 1e-2, atol = 2e-4;
#endif
  init_params(&m, 2, 0.3, 0.3);
  model_forward(&m);
  model_backward(&m);
  real **pslot[N_TENSORS], **gslot[N_TENSORS];
  tensor_slots(&m.p, pslot);
  tensor_slots(&m.g, gslot);
  double worst_rel = 0;
  int n_checked = 0;
  printf("check: gradients vs central differences (%s, h %g, pass if |a-n| <= %g max(|a|,|n|) + %g)\n", REAL_NAME, h,
         rtol, atol);
  for (int k = 0; k < N_TENSORS; k++) {
    real *pt = *pslot[k], *gt = *gslot[k];
    size_t n = m.sz[k], idx[5];
    size_t amax = 0;
    for (size_t i = 1; i < n; i++)
      if (fabs((double)gt[i]) > fabs((double)gt[amax])) amax = i;
    idx[0] = amax;
    for (int j = 1; j < 5; j++) idx[j] = (size_t)(mix64(1000 + (uint64_t)k * 10 + (uint64_t)j) % n);
    double tensor_worst = 0;
    int tensor_ok = 1;
    for (int j = 0; j < 5; j++) {
      size_t i = idx[j];
      real save = pt[i];
      pt[i] = (real)(save + h);
      double lp = model_forward(&m);
      pt[i] = (real)(save - h);
      double lm = model_forward(&m);
      pt[i] = save;
      double num = (lp - lm) / (2 * h), ana = (double)gt[i];
      double err = fabs(num - ana), scale = fmax(fabs(num), fabs(ana));
      double rel = scale > 0 ? err / scale : 0;
      if (err > rtol * scale + atol) {
        tensor_ok = 0;
        printf("  %s[%zu]: analytic %.8e numeric %.8e rel %.2e  MISMATCH\n", tensor_names[k], i, ana, num, rel);
      }
      if (scale > 10 * atol && rel > tensor_worst) tensor_worst = rel;
      n_checked++;
    }
    if (tensor_worst > worst_rel) worst_rel = tensor_worst;
    printf("  %-6s max |grad| %.3e  worst rel err %.2e  %s\n", tensor_names[k], fabs((double)gt[amax]), tensor_worst,
           tensor_ok ? "ok" : "FAIL");
    fails += !tensor_ok;
  }
  printf("check: %d entries of %d tensors, worst rel err %.2e (entries with |grad| > %g)\n", n_checked, N_TENSORS,
         worst_rel, 10 * atol);

  /* 4. AdamW steps on one fixed batch lower the loss */
  init_params(&m, 1, 0.02, 0.0);
  double first = 0, last = 0;
  for (int it = 0; it < 50; it++) {
    double l = model_forward(&m);
    model_backward(&m);
    for (size_t i = 0; i < m.n_params; i++) m.grad_mem[i] *= 10; /* lr 3e-4 is slow for a 20-second check */
    model_update(&m);
    if (it == 0) first = l;
    last = l;
  }
  ok = last < first - 0.5;
  printf("check: 50 AdamW steps on one batch: loss %.4f -> %.4f: %s\n", first, last, ok ? "ok" : "FAIL");
  fails += !ok;
  model_free(&m);
  printf("check: %s\n", fails ? "FAILED" : "all passed");
  return fails ? 1 : 0;
}

/* ---------------------------------------------------------------- main */

static int write_tokens(const char *path, long long count, uint64_t seed) {
  if (count <= 0 || count > (1ll << 32)) {
    fprintf(stderr, "baseline_gpt2: --write-tokens COUNT must be in [1, 2^32]\n");
    return 2;
  }
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    return 1;
  }
  for (long long i = 0; i < count; i++) {
    unsigned v = (unsigned)(mix64(seed * 7919 + (uint64_t)i) % (uint64_t)GPT2_124M.V);
    unsigned char b[2] = {(unsigned char)(v & 0xff), (unsigned char)(v >> 8)};
    if (fwrite(b, 1, 2, f) != 2) {
      perror(path);
      fclose(f);
      return 1;
    }
  }
  if (fclose(f) != 0) {
    perror(path);
    return 1;
  }
  return 0;
}

static void print_load(const char *when) {
  FILE *f = fopen("/proc/loadavg", "r");
  char buf[128];
  if (f && fgets(buf, sizeof buf, f)) printf("load average %s: %s", when, buf);
  if (f) fclose(f);
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static int usage(void) {
  fprintf(stderr, "usage: baseline_gpt2 [--steps N] [--batch B] [--seq T] [--seed S] [--tiny]\n"
                  "       baseline_gpt2 --check\n"
                  "       baseline_gpt2 --write-tokens FILE COUNT [--seed S]\n");
  return 2;
}

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  long long steps = 5, B = 4, T = 64, seed = 0, count = 0;
  int check = 0, tiny = 0, seq_given = 0;
  const char *tok_path = NULL;
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows through pipes */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--check") == 0) check = 1;
    else if (strcmp(a, "--tiny") == 0) tiny = 1;
    else if (strcmp(a, "--steps") == 0 && v && parse_int(v, 1, 1000000, &steps) == 0) i++;
    else if (strcmp(a, "--batch") == 0 && v && parse_int(v, 1, 4096, &B) == 0) i++;
    else if (strcmp(a, "--seq") == 0 && v && parse_int(v, 1, 1 << 20, &T) == 0) i++, seq_given = 1;
    else if (strcmp(a, "--seed") == 0 && v && parse_int(v, 0, 1ll << 40, &seed) == 0) i++;
    else if (strcmp(a, "--write-tokens") == 0 && v && i + 2 < argc && parse_int(argv[i + 2], 1, 1ll << 32, &count) == 0)
      tok_path = v, i += 2;
    else return usage();
  }
  if (check) return check_mode();
  if (tok_path) return write_tokens(tok_path, count, (uint64_t)seed);

  const model_cfg *c = tiny ? &TINY : &GPT2_124M;
  if (tiny && !seq_given) T = c->maxT;
  if (T > c->maxT) {
    fprintf(stderr, "baseline_gpt2: --seq %lld exceeds the context %d\n", T, c->maxT);
    return 2;
  }
  if (B * T > 65536) {
    fprintf(stderr, "baseline_gpt2: B*T = %lld tokens is more than this benchmark allocates (65536)\n", B * T);
    return 2;
  }
  model m;
  model_init(&m, c, (int)B, (int)T);
  init_params(&m, (uint64_t)seed, 0.02, 0.0);
  init_data(&m, (uint64_t)seed);

  double tokens = (double)B * (double)T;
  double flops_6nd = 6.0 * (double)m.n_params * tokens;
  double flops_att = 6.0 * c->L * (double)B * c->D * (double)T * (double)(T + 1);
  double flops = flops_6nd + flops_att;
  printf("baseline_gpt2 (%s, %d threads): V %d, context %d, D %d, %d layers, %d heads; B %lld, T %lld\n", REAL_NAME,
         n_threads(), c->V, c->maxT, c->D, c->L, c->H, B, T);
  printf("parameters %zu; FLOPs/step: 6·N·tokens %.4g + attention %.4g = %.4g\n", m.n_params, flops_6nd, flops_att,
         flops);
  print_load("before");
  double *times = xcalloc((size_t)steps, sizeof(double)), *cpus = xcalloc((size_t)steps, sizeof(double));
  for (long long it = 0; it < steps; it++) {
    double c0 = cpu_s(), t0 = now_s();
    double loss = model_forward(&m);
    double t1 = now_s();
    model_backward(&m);
    double t2 = now_s();
    model_update(&m);
    double t3 = now_s();
    times[it] = t3 - t0;
    cpus[it] = cpu_s() - c0;
    printf("step %lld: loss %.6f  %.1f ms (forward %.1f, backward %.1f, update %.1f; cpu %.1f ms)\n", it + 1, loss,
           1e3 * (t3 - t0), 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2), 1e3 * cpus[it]);
    if (it == 0) printf("  loss at init %.4f vs ln V = %.4f\n", loss, log((double)c->V));
  }
  print_load("after");
  qsort(times, (size_t)steps, sizeof(double), cmp_double);
  qsort(cpus, (size_t)steps, sizeof(double), cmp_double);
  double best = times[0], median = times[steps / 2], cpu_best = cpus[0];
  printf("min %.1f ms/step, median %.1f ms/step over %lld steps\n", 1e3 * best, 1e3 * median, steps);
  printf("min cpu time %.1f ms/step; / %d threads = %.1f ms (an idle-machine estimate; spinning threads inflate it)\n",
         1e3 * cpu_best, n_threads(), 1e3 * cpu_best / n_threads());
  printf("at the min: %.0f tokens/s, %.1f GFLOP/s (6ND + attention), %.1f GFLOP/s (6ND only)\n", tokens / best,
         flops / best * 1e-9, flops_6nd / best * 1e-9);
  printf("RESULT baseline ms_per_step=%.1f median_ms=%.1f tokens_per_s=%.0f gflops=%.1f cpu_ms=%.1f threads=%d\n",
         1e3 * best, 1e3 * median, tokens / best, flops / best * 1e-9, 1e3 * cpu_best, n_threads());
  free(times), free(cpus);
  model_free(&m);
  return 0;
}
