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
 *   text:PATH   bytes of a file (vocabulary 256), or with a tokenizer
 *               (rt_data_use_tokenizer: tgc train --tokenizer F) the file's
 *               ids under that tokenizer.json, encoded once when opened
 *               (no special tokens added; the vocabulary the tokenizer's);
 *               tokens:PATH uint16
 *               little-endian tokens, raw or in llm.c's format (a header of
 *               256 int32: magic 20240520, version 1, the token count;
 *               recognized by its magic, required of a .bin file). Each row
 *               is a window of T + 1 tokens at a random offset; tokens =
 *               window[0..T), targets = window[1..T]. Files are read with
 *               pread, never loaded whole.
 *   npy:NAME=PATH,...
 *               arrays bound to the model's inputs by name, dim 0 the
 *               samples (N, the same in every array), the rest the input's
 *               per-sample shape. Batch q = step K + micro (K micro-batches
 *               a step) is batch q mod nb of epoch q / nb, nb = floor(N /
 *               B): epoch e visits the samples in a permutation drawn from
 *               (seed, e), and the N mod B left at its end are dropped.
 * Vector tasks fill the task features first, then one constant-1 bias
 * feature, then zeros (so a model without biases can still fit xor).
 *
 * Evaluation batches (rt_data_fill_eval) are in order, not drawn: file
 * windows and array samples one after the other from the start, each used
 * once; a task's eval batch k is its batch of step 2^53 + k, a step
 * training never reaches.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "rt_train.h"
#include "rt_tokenizer.h"

typedef enum { DS_XOR, DS_REGRESSION, DS_NPY, DS_COPY, DS_REVERSE, DS_SORT, DS_TEXT, DS_TOKENS } ds_kind;

static const char *const ds_names[] = {"xor", "regression", "npy", "copy", "reverse", "sort", "text", "tokens"};

#define KNOWN_SOURCES "xor, regression, copy, reverse, sort, text:PATH, tokens:PATH, npy:NAME=PATH,..."

/* llm.c's token files (dev/data/data_common.py write_datafile): 256 int32
 * little-endian, [0] the magic, [1] the version (1: uint16 tokens), [2] the
 * token count, then the tokens. */
#define LLMC_MAGIC 20240520
#define LLMC_HEADER_BYTES 1024

/* One array of an npy source. */
typedef struct {
  char *name, *path;
  rt_tensor *t;           /* as read: [N, per-sample shape] */
  int input;              /* the model input it feeds (bound) */
  int64_t per_sample;     /* elements of one sample */
} ds_array;

struct rt_data {
  ds_kind kind;
  char *spec;
  /* files */
  int fd;
  int64_t n_file_tokens;
  int64_t file_vocab;     /* 1 + the largest token in the file (text: 256, or the tokenizer's) */
  int64_t vocab;          /* sequence tasks: tokens are < vocab */
  int64_t header_bytes;   /* tokens:PATH in llm.c's format: the header before the tokens */
  int32_t *ids;           /* text:PATH through a tokenizer: the file's ids (n_file_tokens), read whole */
  /* npy:NAME=PATH,... */
  ds_array *arrays;
  int n_arrays;
  int64_t n_samples;      /* N: dim 0 of every array */
  int64_t *perm;          /* the order of epoch perm_epoch (made when first needed) */
  int64_t perm_epoch;
  int micro_batches;      /* K: batches a step (rt_data_set_micro_batches) */
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
/* A file source: windows of its tokens, not drawn tokens. */
static bool from_file(const rt_data *ds) { return ds->fd >= 0 || ds->ids; }
void rt_data_set_micro_batches(rt_data *ds, int k) { ds->micro_batches = k > 1 ? k : 1; }
bool rt_data_is_sequence(const rt_data *ds) { return is_sequence(ds->kind); }
const char *rt_data_spec(const rt_data *ds) { return ds->spec; }
int rt_data_targets_input(const rt_data *ds) { return ds->bound ? ds->in_targ : -1; }

int rt_data_batch_dim(const rt_data *ds, int i) {
  if (ds->bound && ds->kind == DS_NPY) {
    for (int a = 0; a < ds->n_arrays; a++)
      if (ds->arrays[a].input == i) return 0;
    return -1;
  }
  if (!ds->bound || (i != ds->in_feat && i != ds->in_targ)) return -1;
  return i == ds->in_feat && !is_sequence(ds->kind) && !ds->feat_batch_major ? 1 : 0;
}
int64_t rt_data_batch_items(const rt_data *ds) {
  return is_sequence(ds->kind) ? ds->batch * ds->seq_len : ds->batch;
}


void rt_data_free(rt_data *ds) {
  if (!ds) return;
  if (ds->fd >= 0) close(ds->fd);
  free(ds->ids);
  free(ds->row);
  free(ds->buf);
  for (int a = 0; a < ds->n_arrays; a++) {
    free(ds->arrays[a].name);
    rt_tensor_free(ds->arrays[a].t);
  }
  free(ds->arrays);
  free(ds->perm);
  free(ds->spec);
  free(ds);
}

static bool ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), m = strlen(tail);
  return n >= m && strcmp(s + n - m, tail) == 0;
}

static int64_t le32(const unsigned char *b) {
  return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}

/* A token file in llm.c's format sets header_bytes (after checking the
 * header against the file's size); a .bin file must be one; any other file
 * without the magic is raw uint16 tokens. */
static int read_llmc_header(rt_data *ds, const char *path, int64_t size, char *err, size_t errlen) {
  unsigned char h[LLMC_HEADER_BYTES];
  ssize_t got = size >= 4 ? pread(ds->fd, h, sizeof h, 0) : 0;
  if (got < 0) {
    rt_errf(err, errlen, "%s: read error: %s", path, strerror(errno));
    return -1;
  }
  bool magic = got >= 4 && le32(h) == LLMC_MAGIC;
  if (!magic && !ends_with(path, ".bin")) return 0;
  if (!magic) {
    if (got < 4) rt_errf(err, errlen, "%s: %lld bytes: too short for llm.c's token header (1024 bytes, magic 20240520)", path, (long long)size);
    else rt_errf(err, errlen, "%s: bad magic %lld: not an llm.c token file (expected 20240520; a raw uint16 token file must not be named .bin)", path, (long long)le32(h));
    return -1;
  }
  if (got < LLMC_HEADER_BYTES) {
    rt_errf(err, errlen, "%s: truncated llm.c header: %lld bytes, expected 1024", path, (long long)size);
    return -1;
  }
  int64_t version = le32(h + 4), count = le32(h + 8);
  if (version != 1) {
    rt_errf(err, errlen, "%s: llm.c token file version %lld, expected 1 (uint16 tokens)", path, (long long)version);
    return -1;
  }
  int64_t have = size - LLMC_HEADER_BYTES;
  if (count < 0 || have != 2 * count) {
    rt_errf(err, errlen, "%s: the header says %lld tokens (%lld bytes after the 1024-byte header), the file has %lld bytes there%s",
            path, (long long)count, (long long)(2 * count), (long long)have, have < 2 * count ? " (truncated)" : "");
    return -1;
  }
  ds->header_bytes = LLMC_HEADER_BYTES;
  return 0;
}

/* Scans a token file once for its largest token (files are read in chunks). */
static int scan_file(rt_data *ds, const char *path, char *err, size_t errlen) {
  struct stat st;
  if (fstat(ds->fd, &st) != 0) {
    rt_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  int width = ds->kind == DS_TOKENS ? 2 : 1;
  if (ds->kind == DS_TOKENS && read_llmc_header(ds, path, (int64_t)st.st_size, err, errlen) != 0) return -1;
  if (ds->header_bytes) {
    ds->n_file_tokens = ((int64_t)st.st_size - ds->header_bytes) / 2;
  } else if (ds->kind == DS_TOKENS && st.st_size % 2 != 0) {
    rt_errf(err, errlen, "%s: %lld bytes is an odd size: not a file of uint16 tokens", path, (long long)st.st_size);
    return -1;
  }
  if (!ds->header_bytes) ds->n_file_tokens = (int64_t)st.st_size / width;
  if (ds->kind == DS_TEXT) {
    ds->file_vocab = 256;
    return 0;
  }
  unsigned char buf[1 << 16];
  int64_t max = -1;
  off_t at = (off_t)ds->header_bytes;
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

/* npy:NAME=PATH,...: every array read whole, their sample counts checked. */
static int open_arrays(rt_data *ds, char *err, size_t errlen) {
  const char *p = ds->spec + 4;
  int most = 1;
  for (const char *q = p; *q; q++) most += *q == ',';
  if (!(ds->arrays = calloc((size_t)most, sizeof *ds->arrays))) {
    rt_errf(err, errlen, "out of memory");
    return -1;
  }
  while (*p || ds->n_arrays == 0) {
    size_t len = strcspn(p, ",");
    const char *eq = memchr(p, '=', len);
    if (!eq || eq == p || eq + 1 == p + len) {
      rt_errf(err, errlen, "data source '%s': expected NAME=PATH (a model input and its .npy file), got '%.*s'",
              ds->spec, (int)len, p);
      return -1;
    }
    ds_array *a = &ds->arrays[ds->n_arrays];
    if (!(a->name = malloc(len + 1))) {
      rt_errf(err, errlen, "out of memory");
      return -1;
    }
    memcpy(a->name, p, len);
    a->name[len] = 0;
    a->name[eq - p] = 0;
    a->path = a->name + (eq - p) + 1;
    a->input = -1;
    ds->n_arrays++;
    for (int k = 0; k + 1 < ds->n_arrays; k++)
      if (strcmp(ds->arrays[k].name, a->name) == 0) {
        rt_errf(err, errlen, "data source '%s': input '%s' is given twice", ds->spec, a->name);
        return -1;
      }
    if (!(a->t = rt_npy_read(a->path, err, errlen))) return -1;
    if (a->t->type.rank < 1) {
      rt_errf(err, errlen, "%s: a scalar array: expected samples along dim 0", a->path);
      return -1;
    }
    int64_t n = a->t->type.dims[0];
    if (ds->n_arrays > 1 && n != ds->n_samples) {
      rt_errf(err, errlen, "%s holds %lld samples (dim 0) but %s holds %lld: every array needs one row per sample",
              a->path, (long long)n, ds->arrays[0].path, (long long)ds->n_samples);
      return -1;
    }
    ds->n_samples = n;
    p += len;
    if (*p == ',') p++;
  }
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
  if (strncmp(ds->spec, "npy:", 4) == 0) kind = DS_NPY;
  if (kind < 0) {
    rt_errf(err, errlen, "unknown data source '%s' (known: " KNOWN_SOURCES ")", ds->spec);
    rt_data_free(ds);
    return NULL;
  }
  ds->kind = (ds_kind)kind;
  if (vocab < 0 || (vocab > 0 && !is_sequence(ds->kind))) {
    rt_errf(err, errlen, vocab < 0 ? "the vocabulary must be positive" : "data source '%s' has no vocabulary", ds->spec);
    rt_data_free(ds);
    return NULL;
  }
  if (ds->kind == DS_NPY && open_arrays(ds, err, errlen) != 0) {
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

int rt_data_use_tokenizer(rt_data *ds, const char *tokenizer, char *err, size_t errlen) {
  if (ds->kind != DS_TEXT || ds->fd < 0 || ds->bound) {
    rt_errf(err, errlen, "data source '%s' is not text:PATH: a tokenizer encodes a text file", ds->spec);
    return -1;
  }
  rt_tokenizer *tok = rt_tokenizer_load(tokenizer, err, errlen);
  if (!tok) return -1;
  const char *path = ds->spec + 5;
  struct stat st;
  char *text = NULL;
  int rc = -1;
  if (fstat(ds->fd, &st) != 0 || !(text = malloc((size_t)st.st_size + 1))) {
    rt_errf(err, errlen, "%s: %s", path, text ? strerror(errno) : "out of memory");
    goto done;
  }
  for (off_t at = 0; at < st.st_size;) {
    ssize_t got = pread(ds->fd, text + at, (size_t)(st.st_size - at), at);
    if (got <= 0) {
      rt_errf(err, errlen, "%s: read error: %s", path, got < 0 ? strerror(errno) : "the file shrank");
      goto done;
    }
    at += got;
  }
  size_t n = 0;
  char why[512];
  if (rt_tokenizer_encode(tok, text, (size_t)st.st_size, false, &ds->ids, &n, why, sizeof why) != 0) {
    rt_errf(err, errlen, "%s through %s: %s", path, tokenizer, why);
    goto done;
  }
  ds->n_file_tokens = (int64_t)n;
  ds->file_vocab = rt_tokenizer_vocab_size(tok);
  close(ds->fd); /* the ids are the source now */
  ds->fd = -1;
  rc = 0;
done:
  free(text);
  rt_tokenizer_free(tok);
  return rc;
}

rt_data *rt_data_open_settings(const rt_train_settings *s, const char *spec, char *err, size_t errlen) {
  rt_data *ds = rt_data_open(spec, s->vocab_set ? s->vocab : 0, err, errlen);
  if (!ds || !s->tokenizer_set) return ds;
  char why[1024];
  if (rt_data_use_tokenizer(ds, s->tokenizer, why, sizeof why) != 0) {
    rt_errf(err, errlen, "--tokenizer: %s", why);
    rt_data_free(ds);
    return NULL;
  }
  return ds;
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
  int ti = ir_graph_input_index(g, "tokens"), gi = ir_graph_input_index(g, "targets");
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
  if (from_file(ds)) {
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
  int xi = ir_graph_input_index(g, "X"), xs = ir_graph_input_index(g, "x"), yi = ir_graph_input_index(g, "Y"), ys = ir_graph_input_index(g, "y");
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

/* "(N, 3, 4)": an input's per-sample shape behind N. */
static void sample_shape(const ir_type *t, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "(N");
  for (int k = 1; k < t->rank && used < n; k++) used += (size_t)snprintf(buf + used, n - used, ", %lld", (long long)t->dims[k]);
  if (used < n) snprintf(buf + used, n - used, ")");
}

static void array_shape(const ir_type *t, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "(");
  for (int k = 0; k < t->rank && used < n; k++)
    used += (size_t)snprintf(buf + used, n - used, k ? ", %lld" : "%lld", (long long)t->dims[k]);
  if (used < n) snprintf(buf + used, n - used, t->rank == 1 ? ",)" : ")");
}

/* Array a fits input v: its dtype (floats into a float input, integers
 * into an integer one, in the input's range) and its shape [N, rest]. */
static int bind_array(const rt_data *ds, ds_array *a, const ir_value *v, char *err, size_t errlen) {
  const ir_type *it = &v->type, *at = &a->t->type;
  char tb[160], want[160], have[160];
  ir_type_str(it, tb, sizeof tb);
  bool in_int = it->dtype == IR_DT_I32 || it->dtype == IR_DT_I64, arr_int = at->dtype == IR_DT_I32 || at->dtype == IR_DT_I64;
  bool fits = ir_dtype_is_float(it->dtype) ? ir_dtype_is_float(at->dtype) : in_int ? arr_int : at->dtype == it->dtype;
  if (!fits) {
    rt_errf(err, errlen, "%s: dtype %s does not fit input '%s' %s: expected %s", a->path, rt_npy_descr(at->dtype),
            v->name, tb, ir_dtype_is_float(it->dtype) ? "floats (<f4, <f8 or <f2)"
                     : in_int                          ? "integers (<i4 or <i8)"
                                                       : "booleans (|b1)");
    return -1;
  }
  bool shape_ok = it->rank >= 1 && at->rank == it->rank;
  for (int k = 1; shape_ok && k < it->rank; k++) shape_ok = at->dims[k] == it->dims[k];
  if (!shape_ok) {
    if (it->rank < 1) rt_errf(err, errlen, "data source '%s': input '%s' %s is a scalar: it has no batch dim to fill", ds->spec, v->name, tb);
    else {
      sample_shape(it, want, sizeof want);
      array_shape(at, have, sizeof have);
      rt_errf(err, errlen, "%s: shape %s does not match input '%s' %s: expected %s (N samples of the input's shape less its batch dim)",
              a->path, have, v->name, tb, want);
    }
    return -1;
  }
  int64_t n = rt_numel(at);
  for (int64_t i = 0; it->dtype == IR_DT_I32 && at->dtype == IR_DT_I64 && i < n; i++) {
    double x = rt_load(at->dtype, a->t->data, i);
    if (x < INT32_MIN || x > INT32_MAX) {
      rt_errf(err, errlen, "%s: element %lld is %.0f, outside input '%s' %s", a->path, (long long)i, x, v->name, tb);
      return -1;
    }
  }
  a->per_sample = at->dims[0] ? n / at->dims[0] : 0;
  return 0;
}

static int bind_npy(rt_data *ds, const ir_graph *g, int n_inputs, char *err, size_t errlen) {
  for (int k = 0; k < ds->n_arrays; k++) {
    ds_array *a = &ds->arrays[k];
    a->input = ir_graph_input_index(g, a->name);
    if (a->input < 0 || a->input >= n_inputs) {
      char names[400] = "";
      size_t used = 0;
      for (int i = 0; i < n_inputs && used < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, i ? ", %s" : "%s", g->inputs[i]->name);
      rt_errf(err, errlen, "data source '%s': the model has no input '%s' (its inputs: %s)", ds->spec, a->name,
              n_inputs ? names : "none");
      return -1;
    }
    if (bind_array(ds, a, g->inputs[a->input], err, errlen) != 0) return -1;
  }
  for (int i = 0; i < n_inputs; i++) {
    bool fed = false;
    for (int k = 0; k < ds->n_arrays; k++) fed |= ds->arrays[k].input == i;
    if (!fed) {
      rt_errf(err, errlen, "data source '%s' feeds no array to the model's input '%s' (add %s=FILE.npy)", ds->spec,
              g->inputs[i]->name, g->inputs[i]->name);
      return -1;
    }
  }
  ds->batch = g->inputs[ds->arrays[0].input]->type.dims[0];
  for (int k = 1; k < ds->n_arrays; k++) {
    const ir_value *v = g->inputs[ds->arrays[k].input], *v0 = g->inputs[ds->arrays[0].input];
    if (v->type.dims[0] != ds->batch) {
      rt_errf(err, errlen, "data source '%s': inputs '%s' and '%s' have batches %lld and %lld (dim 0): the arrays fill both from the same samples",
              ds->spec, v0->name, v->name, (long long)ds->batch, (long long)v->type.dims[0]);
      return -1;
    }
  }
  if (ds->n_samples < ds->batch) {
    rt_errf(err, errlen, "data source '%s' holds %lld samples, fewer than one batch of %lld", ds->spec,
            (long long)ds->n_samples, (long long)ds->batch);
    return -1;
  }
  /* the targets (token accuracy): the integer input named targets, y or Y */
  ds->in_targ = -1;
  static const char *const targ_names[] = {"targets", "y", "Y"};
  for (int k = 0; k < 3 && ds->in_targ < 0; k++) {
    int i = ir_graph_input_index(g, targ_names[k]);
    if (i >= 0 && i < n_inputs && !ir_dtype_is_float(g->inputs[i]->type.dtype)) ds->in_targ = i;
  }
  return 0;
}

int rt_data_bind_inputs(rt_data *ds, const ir_graph *g, int n_inputs, char *err, size_t errlen) {
  ds->bound = false;
  int rc = ds->kind == DS_NPY      ? bind_npy(ds, g, n_inputs, err, errlen)
           : is_sequence(ds->kind) ? bind_sequence(ds, g, n_inputs, err, errlen)
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

/* Row b of a file batch: the window at token start. */
static int read_window(const rt_data *ds, int64_t start, int64_t b, rt_tensor *tok, rt_tensor *tgt, char *err,
                       size_t errlen) {
  int64_t T = ds->seq_len;
  int width = ds->kind == DS_TOKENS ? 2 : 1;
  unsigned char *buf = ds->buf;
  int64_t *row = ds->row;
  if (ds->ids) {
    for (int64_t t = 0; t <= T; t++) row[t] = ds->ids[start + t];
  } else {
    size_t want = (size_t)(T + 1) * (size_t)width;
    ssize_t got = pread(ds->fd, buf, want, (off_t)(ds->header_bytes + start * width));
    if (got != (ssize_t)want) {
      rt_errf(err, errlen, "data source '%s': short read at token %lld", ds->spec, (long long)start);
      return -1;
    }
    for (int64_t t = 0; t <= T; t++) row[t] = width == 2 ? (buf[2 * t] | (int64_t)buf[2 * t + 1] << 8) : buf[t];
  }
  for (int64_t t = 0; t < T; t++) {
    rt_tensor_set(tok, b * T + t, (double)row[t]);
    rt_tensor_set(tgt, b * T + t, (double)row[t + 1]);
  }
  return 0;
}

static int fill_sequence(const rt_data *ds, uint64_t seed, int64_t step, int micro, rt_tensor *tok, rt_tensor *tgt,
                         char *err, size_t errlen) {
  int64_t T = ds->seq_len;
  uint64_t stream = batch_stream(ds, step, micro);
  int64_t *row = ds->row;
  int rc = 0;
  for (int64_t b = 0; b < ds->batch && rc == 0; b++) {
    if (from_file(ds)) {
      int64_t span = ds->n_file_tokens - T; /* window starts 0 .. span-1 */
      int64_t start = (int64_t)(rt_random_uniform(seed, stream, (uint64_t)b) * (double)span);
      rc = read_window(ds, start, b, tok, tgt, err, errlen);
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

/* Sample s of every array into row j of its input. */
static void copy_sample(const rt_data *ds, int64_t s, int64_t j, rt_tensor *const *inputs) {
  for (int k = 0; k < ds->n_arrays; k++) {
    const ds_array *a = &ds->arrays[k];
    rt_tensor *x = inputs[a->input];
    ir_dtype adt = a->t->type.dtype;
    int64_t e = a->per_sample;
    if (adt == x->type.dtype) {
      size_t es = ir_dtype_size(adt);
      memcpy((char *)x->data + (size_t)(j * e) * es, (const char *)a->t->data + (size_t)(s * e) * es, (size_t)e * es);
      continue;
    }
    for (int64_t i = 0; i < e; i++) rt_tensor_set(x, j * e + i, rt_load(adt, a->t->data, s * e + i));
  }
}

/* The permutation of epoch e: Fisher-Yates driven by (seed, e). */
static int make_epoch(rt_data *ds, uint64_t seed, int64_t e, char *err, size_t errlen) {
  if (ds->perm && ds->perm_epoch == e) return 0;
  if (!ds->perm && !(ds->perm = malloc(sizeof *ds->perm * (size_t)ds->n_samples))) {
    rt_errf(err, errlen, "out of memory");
    return -1;
  }
  uint64_t stream = rt_hash_name("npy.epoch") ^ ((uint64_t)e * UINT64_C(0x9e3779b97f4a7c15));
  int64_t n = ds->n_samples;
  for (int64_t i = 0; i < n; i++) ds->perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t k = (int64_t)(rt_random_uniform(seed, stream, (uint64_t)i) * (double)(i + 1));
    if (k > i) k = i;
    int64_t tmp = ds->perm[i];
    ds->perm[i] = ds->perm[k];
    ds->perm[k] = tmp;
  }
  ds->perm_epoch = e;
  return 0;
}

static int fill_npy(rt_data *ds, uint64_t seed, int64_t step, int micro, rt_tensor *const *inputs, char *err,
                    size_t errlen) {
  int64_t nb = ds->n_samples / ds->batch, q = step * (ds->micro_batches ? ds->micro_batches : 1) + micro;
  if (make_epoch(ds, seed, q / nb, err, errlen) != 0) return -1;
  int64_t first = q % nb * ds->batch;
  for (int64_t j = 0; j < ds->batch; j++) copy_sample(ds, ds->perm[first + j], j, inputs);
  return 0;
}

int64_t rt_data_eval_batches(const rt_data *ds) {
  if (!ds->bound) return 0;
  if (ds->kind == DS_NPY) return ds->n_samples / ds->batch;
  if (from_file(ds)) return (ds->n_file_tokens - 1) / ds->seq_len / ds->batch;
  return INT64_MAX;
}

int rt_data_fill_eval(rt_data *ds, uint64_t seed, int64_t k, rt_tensor *const *inputs, char *err, size_t errlen) {
  if (!ds->bound || k < 0 || k >= rt_data_eval_batches(ds)) {
    rt_errf(err, errlen, "data source '%s' has no eval batch %lld", ds->spec, (long long)k);
    return -1;
  }
  if (ds->kind == DS_NPY) {
    for (int64_t j = 0; j < ds->batch; j++) copy_sample(ds, k * ds->batch + j, j, inputs);
    return 0;
  }
  if (from_file(ds)) {
    for (int64_t b = 0; b < ds->batch; b++)
      if (read_window(ds, (k * ds->batch + b) * ds->seq_len, b, inputs[ds->in_feat], inputs[ds->in_targ], err, errlen) != 0)
        return -1;
    return 0;
  }
  return rt_data_fill(ds, seed, RT_MAX_STEP + k, 0, inputs, err, errlen);
}

int rt_data_fill(rt_data *ds, uint64_t seed, int64_t step, int micro, rt_tensor *const *inputs, char *err,
                 size_t errlen) {
  if (!ds->bound) {
    rt_errf(err, errlen, "data source '%s' is not bound to a model", ds->spec);
    return -1;
  }
  if (ds->kind == DS_NPY) return fill_npy(ds, seed, step, micro, inputs, err, errlen);
  rt_tensor *a = inputs[ds->in_feat], *b = inputs[ds->in_targ];
  if (is_sequence(ds->kind)) return fill_sequence(ds, seed, step, micro, a, b, err, errlen);
  fill_vector(ds, seed, step, micro, a, b);
  return 0;
}
