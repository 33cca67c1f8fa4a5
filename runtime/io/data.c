/* runtime/io/data.c — training data sources.
 *
 * Every batch is a pure function of (seed, step, micro-batch): numbers come
 * from the counter-based generator (random.c) with a stream derived from the
 * task and the (step, micro) pair, so there is no hidden RNG state and a
 * resumed run sees exactly the batches an uninterrupted one would.
 *
 * Tasks (see runtime.h for how inputs are bound by name):
 *   xor         the 4 points x in {0,1}^2, y = x1 xor x2; sample j of a
 *               batch is point (j + step + micro) mod 4 (a batch of 4 holds
 *               each point once).
 *   regression  x ~ N(0, 1) over F = features - 1 task features (1 if the
 *               model has one feature), y = a . x + 0.01 n with a fixed
 *               a_f ~ N(0, 1/F) (drawn from the seed) and n ~ N(0, 1).
 *   copy / reverse / sort
 *               tokens uniform in [0, vocab); targets = tokens, the tokens
 *               reversed, or the tokens sorted ascending.
 *   text:PATH   bytes of a file (vocabulary 256); tokens:PATH uint16
 *               little-endian tokens. Each row is a window of T + 1 tokens
 *               at a random offset; tokens = window[0..T), targets =
 *               window[1..T]. Files are read with pread, never loaded whole.
 * Vector tasks fill the task features first, then one constant-1 bias
 * feature, then zeros (so a model without biases can still fit xor).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

typedef enum { DS_XOR, DS_REGRESSION, DS_COPY, DS_REVERSE, DS_SORT, DS_TEXT, DS_TOKENS } ds_kind;

static const char *const ds_names[] = {"xor", "regression", "copy", "reverse", "sort", "text", "tokens"};

struct rt_data {
  ds_kind kind;
  char *spec;
  /* files */
  int fd;
  int64_t n_file_tokens;
  int64_t file_vocab;     /* 1 + the largest token in the file */
  int64_t vocab;          /* sequence tasks: tokens are < vocab */
  /* binding */
  bool bound;
  int n_inputs;
  int in_feat, in_targ;   /* indices into g->inputs */
  bool feat_batch_major;  /* x [batch, features] (else X [features, batch]) */
  int64_t batch, features, seq_len;
  int64_t *row;           /* sequence tasks: one window of seq_len + 1 tokens (made when bound) */
  unsigned char *buf;     /* ... and its bytes as read from a file */
};

static bool is_sequence(ds_kind k) { return k >= DS_COPY; }
bool rt_data_is_sequence(const rt_data *ds) { return is_sequence(ds->kind); }
const char *rt_data_spec(const rt_data *ds) { return ds->spec; }
int rt_data_targets_input(const rt_data *ds) { return ds->bound ? ds->in_targ : -1; }

int rt_data_batch_dim(const rt_data *ds, int i) {
  if (!ds->bound || (i != ds->in_feat && i != ds->in_targ)) return -1;
  return i == ds->in_feat && !is_sequence(ds->kind) && !ds->feat_batch_major ? 1 : 0;
}
int64_t rt_data_batch_items(const rt_data *ds) {
  return is_sequence(ds->kind) ? ds->batch * ds->seq_len : ds->batch;
}


void rt_data_free(rt_data *ds) {
  if (!ds) return;
  if (ds->fd >= 0) close(ds->fd);
  free(ds->row);
  free(ds->buf);
  free(ds->spec);
  free(ds);
}

/* Scans a token file once for its largest token (files are read in chunks). */
static int scan_file(rt_data *ds, const char *path, char *err, size_t errlen) {
  struct stat st;
  if (fstat(ds->fd, &st) != 0) {
    rt_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  int width = ds->kind == DS_TOKENS ? 2 : 1;
  if (ds->kind == DS_TOKENS && st.st_size % 2 != 0) {
    rt_errf(err, errlen, "%s: %lld bytes is an odd size: not a file of uint16 tokens", path, (long long)st.st_size);
    return -1;
  }
  ds->n_file_tokens = (int64_t)st.st_size / width;
  if (ds->kind == DS_TEXT) {
    ds->file_vocab = 256;
    return 0;
  }
  unsigned char buf[1 << 16];
  int64_t max = -1;
  off_t at = 0;
  for (;;) {
    ssize_t got = pread(ds->fd, buf, sizeof buf, at);
    if (got < 0) {
      rt_errf(err, errlen, "%s: read error: %s", path, strerror(errno));
      return -1;
    }
    if (got == 0) break;
    for (ssize_t i = 0; i + 1 < got; i += 2) {
      int64_t tok = buf[i] | (int64_t)buf[i + 1] << 8;
      if (tok > max) max = tok;
    }
    at += got & ~(ssize_t)1;
    if (got & 1) break; /* cannot happen for an even-sized regular file */
  }
  ds->file_vocab = max + 1;
  return 0;
}

rt_data *rt_data_open(const char *spec, int64_t vocab, char *err, size_t errlen) {
  rt_data *ds = calloc(1, sizeof *ds);
  if (!ds) {
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  ds->fd = -1;
  ds->vocab = vocab;
  ds->spec = strdup(spec ? spec : "");
  if (!ds->spec) {
    rt_errf(err, errlen, "out of memory");
    free(ds);
    return NULL;
  }
  const char *path = NULL;
  int kind = -1;
  for (int k = DS_XOR; k <= DS_SORT; k++)
    if (strcmp(ds->spec, ds_names[k]) == 0) kind = k;
  if (strncmp(ds->spec, "text:", 5) == 0) kind = DS_TEXT, path = ds->spec + 5;
  if (strncmp(ds->spec, "tokens:", 7) == 0) kind = DS_TOKENS, path = ds->spec + 7;
  if (kind < 0) {
    rt_errf(err, errlen, "unknown data source '%s' (known: xor, regression, copy, reverse, sort, text:PATH, tokens:PATH)",
         ds->spec);
    rt_data_free(ds);
    return NULL;
  }
  ds->kind = (ds_kind)kind;
  if (vocab < 0 || (vocab > 0 && !is_sequence(ds->kind))) {
    rt_errf(err, errlen, vocab < 0 ? "the vocabulary must be positive" : "data source '%s' has no vocabulary", ds->spec);
    rt_data_free(ds);
    return NULL;
  }
  if (path) {
    if (!*path) {
      rt_errf(err, errlen, "data source '%s' needs a file path", ds->spec);
      rt_data_free(ds);
      return NULL;
    }
    ds->fd = ir_open_regular(path);
    if (ds->fd < 0) {
      if (ds->fd == -2) rt_errf(err, errlen, "%s: not a regular file", path);
      else rt_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
      ds->fd = -1;
      rt_data_free(ds);
      return NULL;
    }
    if (scan_file(ds, path, err, errlen) != 0) {
      rt_data_free(ds);
      return NULL;
    }
  }
  return ds;
}

static int find_input(const ir_graph *g, const char *name) {
  for (int i = 0; i < g->n_inputs; i++)
    if (strcmp(g->inputs[i]->name, name) == 0) return i;
  return -1;
}

/* The smallest vocabulary the model indexes with input v (0 if none). */
static int64_t model_vocab(const ir_graph *g, const ir_value *tokens, const ir_value *targets) {
  int64_t vocab = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    int64_t b = 0;
    if (n->op == IR_OP_EMBEDDING && n->in[1] == tokens) b = n->in[0]->type.dims[0];
    if (n->op == IR_OP_CROSS_ENTROPY && n->in[1] == targets) b = n->in[0]->type.dims[n->in[0]->type.rank - 1];
    if (b > 0 && (vocab == 0 || b < vocab)) vocab = b;
  }
  return vocab;
}

static int bind_sequence(rt_data *ds, const ir_graph *g, int n_inputs, char *err, size_t errlen) {
  int ti = find_input(g, "tokens"), gi = find_input(g, "targets");
  for (int i = 0; i < n_inputs; i++)
    if (i != ti && i != gi) {
      rt_errf(err, errlen, "data source '%s' feeds inputs 'tokens' and 'targets'; the model also has input '%s'", ds->spec,
           g->inputs[i]->name);
      return -1;
    }
  if (ti < 0 || gi < 0) {
    rt_errf(err, errlen, "data source '%s' needs model inputs 'tokens' and 'targets' (integer [batch, T]); the model has no '%s'",
         ds->spec, ti < 0 ? "tokens" : "targets");
    return -1;
  }
  const ir_type *tt = &g->inputs[ti]->type, *gt = &g->inputs[gi]->type;
  char a[160], b[160];
  bool int_t = tt->dtype == IR_DT_I32 || tt->dtype == IR_DT_I64, int_g = gt->dtype == IR_DT_I32 || gt->dtype == IR_DT_I64;
  if (!int_t || !int_g || tt->rank != 2 || !ir_type_equal(tt, gt)) {
    rt_errf(err, errlen, "data source '%s' needs 'tokens' and 'targets' of the same integer type [batch, T]; the model has %s and %s",
         ds->spec, ir_type_str(tt, a, sizeof a), ir_type_str(gt, b, sizeof b));
    return -1;
  }
  ds->in_feat = ti;
  ds->in_targ = gi;
  ds->batch = tt->dims[0];
  ds->seq_len = tt->dims[1];
  int64_t mv = model_vocab(g, g->inputs[ti], g->inputs[gi]);
  if (ds->fd >= 0) {
    if (ds->n_file_tokens < ds->seq_len + 1) {
      rt_errf(err, errlen, "data source '%s': the file holds %lld tokens, fewer than one window of T + 1 = %lld", ds->spec,
           (long long)ds->n_file_tokens, (long long)(ds->seq_len + 1));
      return -1;
    }
    if (mv && ds->file_vocab > mv) {
      rt_errf(err, errlen, "data source '%s' has tokens up to %lld but the model's vocabulary is %lld (--vocab %lld sets V)",
           ds->spec, (long long)(ds->file_vocab - 1), (long long)mv, (long long)ds->file_vocab);
      return -1;
    }
    ds->vocab = ds->file_vocab;
    return 0;
  }
  if (ds->vocab == 0) ds->vocab = mv;
  if (ds->vocab == 0) {
    rt_errf(err, errlen, "data source '%s': cannot tell the vocabulary from the model; give --vocab V", ds->spec);
    return -1;
  }
  if (mv && ds->vocab > mv) {
    rt_errf(err, errlen, "--vocab %lld is larger than the model's vocabulary %lld", (long long)ds->vocab, (long long)mv);
    return -1;
  }
  return 0;
}

static int bind_vector(rt_data *ds, const ir_graph *g, int n_inputs, char *err, size_t errlen) {
  int xi = find_input(g, "X"), xs = find_input(g, "x"), yi = find_input(g, "Y"), ys = find_input(g, "y");
  if (xi >= 0 && xs >= 0) xs = -1; /* X wins; x is then an unknown input below */
  if (yi >= 0 && ys >= 0) ys = -1;
  int fi = xi >= 0 ? xi : xs, ti = yi >= 0 ? yi : ys;
  for (int i = 0; i < n_inputs; i++)
    if (i != fi && i != ti) {
      rt_errf(err, errlen, "data source '%s' feeds inputs X [features, batch] or x [batch, features] and Y or y [batch]; the model also has input '%s'",
           ds->spec, g->inputs[i]->name);
      return -1;
    }
  if (fi < 0 || ti < 0) {
    rt_errf(err, errlen, "data source '%s' needs a features input (X [features, batch] or x [batch, features]) and a targets input (Y or y [batch]); the model has no %s",
         ds->spec, fi < 0 ? "X or x" : "Y or y");
    return -1;
  }
  const ir_type *ft = &g->inputs[fi]->type, *tt = &g->inputs[ti]->type;
  char a[160], b[160];
  if (!ir_dtype_is_float(ft->dtype) || !ir_dtype_is_float(tt->dtype) || ft->rank != 2) {
    rt_errf(err, errlen, "data source '%s' needs float inputs %s: [%s] and %s: [batch]; the model has %s and %s", ds->spec,
         g->inputs[fi]->name, fi == xi ? "features, batch" : "batch, features", g->inputs[ti]->name,
         ir_type_str(ft, a, sizeof a), ir_type_str(tt, b, sizeof b));
    return -1;
  }
  ds->feat_batch_major = fi == xs;
  ds->batch = ds->feat_batch_major ? ft->dims[0] : ft->dims[1];
  ds->features = ds->feat_batch_major ? ft->dims[1] : ft->dims[0];
  bool targ_ok = (tt->rank == 1 && tt->dims[0] == ds->batch) ||
                 (tt->rank == 2 && tt->dims[0] == ds->batch && tt->dims[1] == 1);
  if (!targ_ok) {
    rt_errf(err, errlen, "data source '%s': targets %s must be [%lld] or [%lld, 1] (the batch of %s %s)", ds->spec,
         g->inputs[ti]->name, (long long)ds->batch, (long long)ds->batch, g->inputs[fi]->name,
         ir_type_str(ft, a, sizeof a));
    return -1;
  }
  int64_t need = ds->kind == DS_XOR ? 2 : 1;
  if (ds->features < need) {
    rt_errf(err, errlen, "data source '%s' has %lld features but the model's %s has %lld", ds->spec, (long long)need,
         g->inputs[fi]->name, (long long)ds->features);
    return -1;
  }
  ds->in_feat = fi;
  ds->in_targ = ti;
  return 0;
}

int rt_data_bind_inputs(rt_data *ds, const ir_graph *g, int n_inputs, char *err, size_t errlen) {
  ds->bound = false;
  int rc = is_sequence(ds->kind) ? bind_sequence(ds, g, n_inputs, err, errlen)
                                 : bind_vector(ds, g, n_inputs, err, errlen);
  if (rc == 0 && is_sequence(ds->kind)) { /* the window scratch of rt_data_fill: allocated once */
    free(ds->row);
    free(ds->buf);
    ds->row = malloc(sizeof *ds->row * (size_t)(ds->seq_len + 1));
    ds->buf = malloc((size_t)(ds->seq_len + 1) * 2);
    if (!ds->row || !ds->buf) {
      rt_errf(err, errlen, "out of memory");
      rc = -1;
    }
  }
  if (rc == 0) {
    ds->bound = true;
    ds->n_inputs = n_inputs;
  }
  return rc;
}

int rt_data_bind(rt_data *ds, const ir_graph *g, char *err, size_t errlen) {
  return rt_data_bind_inputs(ds, g, g->n_inputs, err, errlen);
}

/* ---------------------------------------------------------------------- */
/* filling                                                                 */
/* ---------------------------------------------------------------------- */

/* The random stream of one batch: distinct for every (task, step, micro). */
static uint64_t batch_stream(const rt_data *ds, int64_t step, int micro) {
  return rt_hash_name(ds_names[ds->kind]) ^ ((uint64_t)step * UINT64_C(0x9e3779b97f4a7c15)) ^
         ((uint64_t)(micro + 1) * UINT64_C(0xd1b54a32d192ed03));
}

/* The task's own feature count (regression) */
static int64_t task_features(const rt_data *ds) {
  if (ds->kind == DS_XOR) return 2;
  return ds->features >= 2 ? ds->features - 1 : 1;
}

static void set_feature(const rt_data *ds, rt_tensor *x, int64_t sample, int64_t f, double v) {
  int64_t i = ds->feat_batch_major ? sample * ds->features + f : f * ds->batch + sample;
  rt_tensor_set(x, i, v);
}

static void fill_vector(const rt_data *ds, uint64_t seed, int64_t step, int micro, rt_tensor *x, rt_tensor *y) {
  int64_t nf = task_features(ds);
  uint64_t stream = batch_stream(ds, step, micro);
  uint64_t wstream = rt_hash_name("regression.weights");
  for (int64_t j = 0; j < ds->batch; j++) {
    double target = 0;
    if (ds->kind == DS_XOR) {
      int64_t p = (j + step + micro) % 4;
      int x1 = (int)(p & 1), x2 = (int)(p >> 1);
      set_feature(ds, x, j, 0, x1);
      set_feature(ds, x, j, 1, x2);
      target = x1 ^ x2;
    } else {
      for (int64_t f = 0; f < nf; f++) {
        double v = rt_random_normal(seed, stream, (uint64_t)(j * nf + f));
        set_feature(ds, x, j, f, v);
        target += rt_random_normal(seed, wstream, (uint64_t)f) / sqrt((double)nf) * v;
      }
      target += 0.01 * rt_random_normal(seed, stream ^ UINT64_C(0x5bd1e995), (uint64_t)j);
    }
    for (int64_t f = nf; f < ds->features; f++) set_feature(ds, x, j, f, f == nf ? 1.0 : 0.0);
    rt_tensor_set(y, j, target);
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int fill_sequence(const rt_data *ds, uint64_t seed, int64_t step, int micro, rt_tensor *tok, rt_tensor *tgt,
                         char *err, size_t errlen) {
  int64_t T = ds->seq_len;
  uint64_t stream = batch_stream(ds, step, micro);
  int64_t *row = ds->row;
  unsigned char *buf = ds->buf;
  int rc = 0;
  for (int64_t b = 0; b < ds->batch && rc == 0; b++) {
    if (ds->fd >= 0) {
      int width = ds->kind == DS_TOKENS ? 2 : 1;
      int64_t span = ds->n_file_tokens - T; /* window starts 0 .. span-1 */
      int64_t start = (int64_t)(rt_random_uniform(seed, stream, (uint64_t)b) * (double)span);
      size_t want = (size_t)(T + 1) * (size_t)width;
      ssize_t got = pread(ds->fd, buf, want, (off_t)start * width);
      if (got != (ssize_t)want) {
        rt_errf(err, errlen, "data source '%s': short read at token %lld", ds->spec, (long long)start);
        rc = -1;
        break;
      }
      for (int64_t t = 0; t <= T; t++) row[t] = width == 2 ? (buf[2 * t] | (int64_t)buf[2 * t + 1] << 8) : buf[t];
      for (int64_t t = 0; t < T; t++) {
        rt_tensor_set(tok, b * T + t, (double)row[t]);
        rt_tensor_set(tgt, b * T + t, (double)row[t + 1]);
      }
      continue;
    }
    for (int64_t t = 0; t < T; t++) {
      row[t] = (int64_t)(rt_random_uniform(seed, stream, (uint64_t)(b * T + t)) * (double)ds->vocab);
      rt_tensor_set(tok, b * T + t, (double)row[t]);
    }
    if (ds->kind == DS_SORT) qsort(row, (size_t)T, sizeof *row, cmp_i64);
    for (int64_t t = 0; t < T; t++)
      rt_tensor_set(tgt, b * T + t, (double)(ds->kind == DS_REVERSE ? row[T - 1 - t] : row[t]));
  }
  return rc;
}

int rt_data_fill(rt_data *ds, uint64_t seed, int64_t step, int micro, rt_tensor *const *inputs, char *err,
                 size_t errlen) {
  if (!ds->bound) {
    rt_errf(err, errlen, "data source '%s' is not bound to a model", ds->spec);
    return -1;
  }
  rt_tensor *a = inputs[ds->in_feat], *b = inputs[ds->in_targ];
  if (is_sequence(ds->kind)) return fill_sequence(ds, seed, step, micro, a, b, err, errlen);
  fill_vector(ds, seed, step, micro, a, b);
  return 0;
}
