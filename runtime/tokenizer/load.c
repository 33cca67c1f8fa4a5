/* runtime/tokenizer/load.c — reads a Hugging Face tokenizer.json (with
 * jansson) into rt_tokenizer, refusing, by name, every part tgc does not
 * implement rather than tokenizing differently from the reference library.
 * Supported: models WordPiece and BPE; normalizer BertNormalizer (or none);
 * pre-tokenizers BertPreTokenizer, ByteLevel, and Sequence[Split(GPT-2's or
 * Llama 3's pattern), ByteLevel]; post-processors TemplateProcessing,
 * BertProcessing, RobertaProcessing, ByteLevel and Sequence of them; decoders
 * WordPiece and ByteLevel; added tokens; truncation. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "tok_internal.h"

static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct {
  const char *path;
  char *err;
  size_t errlen;
} loader;

static int fail(loader *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(loader *l, const char *fmt, ...) {
  int k = snprintf(l->err, l->errlen, "%s: ", l->path);
  va_list ap;
  va_start(ap, fmt);
  if (k >= 0 && (size_t)k < l->errlen) vsnprintf(l->err + k, l->errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- hash tables ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

int32_t rt_tok_strmap_get(const rt_tok_strmap *m, const char *s, size_t n) {
  if (!m->cap) return -1;
  for (size_t i = hash_bytes(s, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    const char *k = m->keys[i];
    if (!k) return -1;
    if (strncmp(k, s, n) == 0 && k[n] == 0) return m->vals[i];
  }
}

static void strmap_put(rt_tok_strmap *m, const char *key, int32_t id) {
  size_t n = strlen(key);
  for (size_t i = hash_bytes(key, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i]) {
      m->keys[i] = key;
      m->vals[i] = id;
      return;
    }
    if (strcmp(m->keys[i], key) == 0) return; /* the first id of a repeated token wins */
  }
}

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < 2 * n) c *= 2;
  return c;
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

bool rt_tok_merges_get(const rt_tok_merges *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged) {
  if (!m->cap) return false;
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  for (size_t i = mix64(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == UINT64_MAX) return false;
    if (m->keys[i] == key) {
      *rank = m->rank[i];
      *merged = m->merged[i];
      return true;
    }
  }
}

/* ---- the parts of tokenizer.json ---- */

static const char *type_of(json_t *o) {
  const char *s = json_string_value(json_object_get(o, "type"));
  return s ? s : "(no type)";
}

static int set_token(loader *l, rt_tokenizer *t, const char *tok, int64_t id) {
  if (id < 0 || id >= t->n_tokens) return fail(l, "token id %lld out of range", (long long)id);
  if (!t->tokens[id]) t->tokens[id] = strdup(tok);
  if (!t->tokens[id]) return fail(l, "out of memory");
  return 0;
}

/* The largest id of the vocabulary and of the added tokens. */
static int64_t largest_id(json_t *vocab, json_t *added) {
  int64_t top = -1;
  const char *k;
  json_t *v;
  json_object_foreach(vocab, k, v) if (json_integer_value(v) > top) top = json_integer_value(v);
  size_t i;
  json_array_foreach(added, i, v) {
    json_t *id = json_object_get(v, "id");
    if (json_is_integer(id) && json_integer_value(id) > top) top = json_integer_value(id);
  }
  return top;
}

static int load_vocab(loader *l, rt_tokenizer *t, json_t *vocab) {
  const char *k;
  json_t *v;
  json_object_foreach(vocab, k, v) {
    if (!json_is_integer(v)) return fail(l, "model.vocab: \"%s\" has no integer id", k);
    if (set_token(l, t, k, json_integer_value(v))) return -1;
  }
  t->vocab.cap = pow2_at_least(json_object_size(vocab));
  t->vocab.keys = calloc(t->vocab.cap, sizeof *t->vocab.keys);
  t->vocab.vals = calloc(t->vocab.cap, sizeof *t->vocab.vals);
  if (!t->vocab.keys || !t->vocab.vals) return fail(l, "out of memory");
  json_object_foreach(vocab, k, v) {
    int32_t id = (int32_t)json_integer_value(v);
    strmap_put(&t->vocab, t->tokens[id], id);
  }
  return 0;
}

static int32_t vocab_id(const rt_tokenizer *t, const char *s) { return rt_tok_strmap_get(&t->vocab, s, strlen(s)); }

/* BPE merges: "a b" strings (older files) or ["a", "b"] pairs (newer). */
static int load_merges(loader *l, rt_tokenizer *t, json_t *merges) {
  size_t n = json_array_size(merges);
  rt_tok_merges *m = &t->merges;
  m->cap = pow2_at_least(n);
  m->keys = malloc(m->cap * sizeof *m->keys);
  m->rank = malloc(m->cap * sizeof *m->rank);
  m->merged = malloc(m->cap * sizeof *m->merged);
  if (!m->keys || !m->rank || !m->merged) return fail(l, "out of memory");
  memset(m->keys, 0xFF, m->cap * sizeof *m->keys);
  for (size_t r = 0; r < n; r++) {
    json_t *e = json_array_get(merges, r);
    char a[1024], b[1024];
    if (json_is_string(e)) {
      const char *s = json_string_value(e), *sp = strchr(s, ' ');
      if (!sp || strchr(sp + 1, ' ') || (size_t)(sp - s) >= sizeof a || strlen(sp + 1) >= sizeof b)
        return fail(l, "model.merges[%zu]: \"%s\" is not two tokens separated by one space", r, s);
      memcpy(a, s, (size_t)(sp - s));
      a[sp - s] = 0;
      strcpy(b, sp + 1);
    } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
               json_is_string(json_array_get(e, 1)) && json_string_length(json_array_get(e, 0)) < sizeof a &&
               json_string_length(json_array_get(e, 1)) < sizeof b) {
      strcpy(a, json_string_value(json_array_get(e, 0)));
      strcpy(b, json_string_value(json_array_get(e, 1)));
    } else {
      return fail(l, "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", r);
    }
    char ab[2048];
    snprintf(ab, sizeof ab, "%s%s", a, b);
    int32_t ia = vocab_id(t, a), ib = vocab_id(t, b), iab = vocab_id(t, ab);
    if (ia < 0 || ib < 0 || iab < 0)
      return fail(l, "model.merges[%zu]: \"%s\" is not in the vocabulary", r, ia < 0 ? a : ib < 0 ? b : ab);
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    for (size_t i = mix64(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
      if (m->keys[i] == key) break; /* a repeated merge keeps its first rank */
      if (m->keys[i] == UINT64_MAX) {
        m->keys[i] = key;
        m->rank[i] = (int32_t)r;
        m->merged[i] = iab;
        break;
      }
    }
  }
  return 0;
}

static int load_model(loader *l, rt_tokenizer *t, json_t *model) {
  const char *type = json_string_value(json_object_get(model, "type"));
  json_t *vocab = json_object_get(model, "vocab");
  if (!type) type = json_object_get(model, "merges") ? "BPE" : "WordPiece"; /* old files name no type */
  if (strcmp(type, "WordPiece") != 0 && strcmp(type, "BPE") != 0)
    return fail(l, "unsupported tokenizer model '%s' (supported: WordPiece, BPE)", type);
  if (!json_is_object(vocab)) return fail(l, "model.vocab: expected an object of token: id");
  t->bpe = strcmp(type, "BPE") == 0;
  if (load_vocab(l, t, vocab)) return -1;
  json_t *unk = json_object_get(model, "unk_token");
  t->unk = -1;
  if (json_is_string(unk)) {
    t->unk = vocab_id(t, json_string_value(unk));
    if (t->unk < 0) return fail(l, "model.unk_token \"%s\" is not in the vocabulary", json_string_value(unk));
  }
  if (!t->bpe) {
    if (t->unk < 0) return fail(l, "a WordPiece model needs an unk_token");
    json_t *p = json_object_get(model, "continuing_subword_prefix");
    t->cont_prefix = strdup(json_is_string(p) ? json_string_value(p) : "##");
    json_t *mx = json_object_get(model, "max_input_chars_per_word");
    t->max_word_chars = json_is_integer(mx) ? json_integer_value(mx) : 100;
    return t->cont_prefix ? 0 : fail(l, "out of memory");
  }
  const char *unsupported[] = {"continuing_subword_prefix", "end_of_word_suffix", "dropout"};
  for (int i = 0; i < 3; i++) {
    json_t *v = json_object_get(model, unsupported[i]);
    if (v && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v)))
      return fail(l, "BPE model.%s is not supported", unsupported[i]);
  }
  if (json_is_true(json_object_get(model, "byte_fallback"))) return fail(l, "BPE model.byte_fallback is not supported");
  t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
  json_t *merges = json_object_get(model, "merges");
  if (!json_is_array(merges)) return fail(l, "model.merges: expected an array");
  return load_merges(l, t, merges);
}

static int load_normalizer(loader *l, rt_tokenizer *t, json_t *n) {
  if (!n || json_is_null(n)) return 0;
  const char *type = type_of(n);
  if (strcmp(type, "Sequence") == 0 && json_array_size(json_object_get(n, "normalizers")) == 0) return 0;
  if (strcmp(type, "BertNormalizer") != 0)
    return fail(l, "unsupported normalizer '%s' (supported: BertNormalizer)", type);
  t->bert_norm = true;
  json_t *ct = json_object_get(n, "clean_text"), *cc = json_object_get(n, "handle_chinese_chars"),
         *sa = json_object_get(n, "strip_accents"), *lc = json_object_get(n, "lowercase");
  t->clean_text = !ct || json_is_true(ct);
  t->chinese_chars = !cc || json_is_true(cc);
  t->lowercase = !lc || json_is_true(lc);
  t->strip_accents = !sa || json_is_null(sa) ? t->lowercase : json_is_true(sa); /* None follows lowercase */
  return 0;
}

static int byte_level(loader *l, rt_tokenizer *t, json_t *p, bool after_split) {
  t->add_prefix_space = json_is_true(json_object_get(p, "add_prefix_space"));
  json_t *re = json_object_get(p, "use_regex");
  bool regex = !re || json_is_true(re);
  if (after_split && regex) return fail(l, "pre_tokenizer: a ByteLevel with use_regex after a Split is not supported");
  if (!after_split) t->pretok = regex ? TOK_PRE_GPT2 : TOK_PRE_BYTES;
  return 0;
}

static int load_pretok(loader *l, rt_tokenizer *t, json_t *p) {
  const char *type = p && !json_is_null(p) ? type_of(p) : NULL;
  if (!type) return t->bpe ? fail(l, "a BPE model without a ByteLevel pre_tokenizer is not supported") : 0;
  if (strcmp(type, "BertPreTokenizer") == 0 && !t->bpe) {
    t->pretok = TOK_PRE_BERT;
    return 0;
  }
  if (strcmp(type, "ByteLevel") == 0 && t->bpe) return byte_level(l, t, p, false);
  json_t *seq = json_object_get(p, "pretokenizers");
  if (strcmp(type, "Sequence") == 0 && t->bpe && json_array_size(seq) == 2 &&
      strcmp(type_of(json_array_get(seq, 0)), "Split") == 0 &&
      strcmp(type_of(json_array_get(seq, 1)), "ByteLevel") == 0) {
    json_t *split = json_array_get(seq, 0);
    const char *re = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
    const char *behavior = json_string_value(json_object_get(split, "behavior"));
    if (!re || !behavior || strcmp(behavior, "Isolated") != 0 || json_is_true(json_object_get(split, "invert")))
      return fail(l, "pre_tokenizer: only a Split on a Regex, Isolated, not inverted, is supported");
    if (strcmp(re, gpt2_pattern) == 0) t->pretok = TOK_PRE_GPT2;
    else if (strcmp(re, llama3_pattern) == 0) t->pretok = TOK_PRE_LLAMA3;
    else return fail(l, "pre_tokenizer: unsupported Split pattern (supported: GPT-2's and Llama 3's)");
    return byte_level(l, t, json_array_get(seq, 1), true);
  }
  return fail(l, "unsupported pre_tokenizer '%s' for a %s model (supported: %s)", type, t->bpe ? "BPE" : "WordPiece",
              t->bpe ? "ByteLevel, Sequence[Split, ByteLevel]" : "BertPreTokenizer");
}

static int push_id(int32_t **ids, int *n, int32_t id) {
  int32_t *p = realloc(*ids, (size_t)(*n + 1) * sizeof *p);
  if (!p) return -1;
  p[(*n)++] = id;
  *ids = p;
  return 0;
}

/* A [token, id] pair of BertProcessing / RobertaProcessing. */
static int pair_id(loader *l, json_t *pair, const char *what, int32_t *id) {
  json_t *v = json_array_get(pair, 1);
  if (!json_is_integer(v)) return fail(l, "post_processor.%s: expected [token, id]", what);
  *id = (int32_t)json_integer_value(v);
  return 0;
}

static int template_processing(loader *l, rt_tokenizer *t, json_t *p) {
  json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens"), *e;
  size_t i;
  bool seen_seq = false;
  json_array_foreach(single, i, e) {
    if (json_object_get(e, "Sequence")) {
      seen_seq = true;
      continue;
    }
    const char *name = json_string_value(json_object_get(json_object_get(e, "SpecialToken"), "id"));
    json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
    if (!name || !json_is_array(ids)) return fail(l, "post_processor: template piece %zu names no special token", i);
    size_t k;
    json_t *id;
    json_array_foreach(ids, k, id) {
      if (push_id(seen_seq ? &t->suffix_ids : &t->prefix_ids, seen_seq ? &t->n_suffix : &t->n_prefix,
                  (int32_t)json_integer_value(id)))
        return fail(l, "out of memory");
    }
  }
  return 0;
}

static int load_post(loader *l, rt_tokenizer *t, json_t *p) {
  if (!p || json_is_null(p)) return 0;
  const char *type = type_of(p);
  if (strcmp(type, "Sequence") == 0) {
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(p, "processors"), i, e) if (load_post(l, t, e)) return -1;
    return 0;
  }
  if (strcmp(type, "ByteLevel") == 0) return 0; /* offsets only */
  if (strcmp(type, "TemplateProcessing") == 0) return template_processing(l, t, p);
  if (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0) {
    int32_t cls = -1, sep = -1;
    if (pair_id(l, json_object_get(p, "cls"), "cls", &cls) || pair_id(l, json_object_get(p, "sep"), "sep", &sep))
      return -1;
    if (push_id(&t->prefix_ids, &t->n_prefix, cls) || push_id(&t->suffix_ids, &t->n_suffix, sep))
      return fail(l, "out of memory");
    return 0;
  }
  return fail(l, "unsupported post_processor '%s' (supported: TemplateProcessing, BertProcessing, "
                 "RobertaProcessing, ByteLevel, Sequence)", type);
}

static int load_decoder(loader *l, rt_tokenizer *t, json_t *d) {
  if (!d || json_is_null(d)) return 0;
  const char *type = type_of(d);
  if (strcmp(type, "WordPiece") == 0) {
    json_t *p = json_object_get(d, "prefix"), *c = json_object_get(d, "cleanup");
    t->decoder = TOK_DEC_WORDPIECE;
    t->dec_prefix = strdup(json_is_string(p) ? json_string_value(p) : "##");
    t->dec_cleanup = !c || json_is_true(c);
    return t->dec_prefix ? 0 : fail(l, "out of memory");
  }
  if (strcmp(type, "ByteLevel") == 0) {
    t->decoder = TOK_DEC_BYTELEVEL;
    return 0;
  }
  return fail(l, "unsupported decoder '%s' (supported: WordPiece, ByteLevel)", type);
}

static int cmp_added(const void *a, const void *b) {
  size_t la = strlen(((const rt_tok_added *)a)->content), lb = strlen(((const rt_tok_added *)b)->content);
  return la < lb ? 1 : la > lb ? -1 : 0;
}

static int load_added(loader *l, rt_tokenizer *t, json_t *added) {
  size_t i;
  json_t *e;
  t->added = calloc(json_array_size(added) + 1, sizeof *t->added);
  if (!t->added) return fail(l, "out of memory");
  json_array_foreach(added, i, e) {
    const char *content = json_string_value(json_object_get(e, "content"));
    json_t *id = json_object_get(e, "id");
    if (!content || !*content || !json_is_integer(id))
      return fail(l, "added_tokens[%zu]: expected a non-empty \"content\" and an integer \"id\"", i);
    if (set_token(l, t, content, json_integer_value(id))) return -1;
    rt_tok_added *a = &t->added[t->n_added++];
    a->content = strdup(content);
    a->id = (int32_t)json_integer_value(id);
    a->special = json_is_true(json_object_get(e, "special"));
    if (!a->content) return fail(l, "out of memory");
    if (a->special) t->is_special[a->id] = true;
  }
  qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added); /* the longest match first */
  return 0;
}

static int load_truncation(loader *l, rt_tokenizer *t, json_t *tr) {
  if (!tr || json_is_null(tr)) return 0;
  json_t *mx = json_object_get(tr, "max_length");
  const char *dir = json_string_value(json_object_get(tr, "direction"));
  if (!json_is_integer(mx) || json_integer_value(mx) < 1)
    return fail(l, "truncation.max_length: expected an integer >= 1");
  t->trunc_max = json_integer_value(mx);
  t->trunc_left = dir && strcmp(dir, "Left") == 0;
  return 0;
}

static int load_root(loader *l, rt_tokenizer *t, json_t *root) {
  if (!json_is_object(root)) return fail(l, "not a tokenizer.json (expected a JSON object)");
  json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
  if (!json_is_object(model)) return fail(l, "not a tokenizer.json (no \"model\" object)");
  if (added && !json_is_array(added)) return fail(l, "added_tokens: expected an array");
  json_t *vocab = json_object_get(model, "vocab");
  int64_t top = json_is_object(vocab) ? largest_id(vocab, added) : -1;
  /* ids are dense in every real file: one far past the entries is an error, not a huge table */
  size_t entries = json_object_size(vocab) + json_array_size(added);
  if (top >= INT32_MAX || (top >= 0 && (size_t)top >= 2 * entries + 256))
    return fail(l, "token id %lld is far past the %zu entries of the vocabulary", (long long)top, entries);
  t->n_tokens = (int32_t)(top + 1);
  t->tokens = calloc((size_t)t->n_tokens + 1, sizeof *t->tokens);
  t->is_special = calloc((size_t)t->n_tokens + 1, sizeof *t->is_special);
  if (!t->tokens || !t->is_special) return fail(l, "out of memory");
  if (load_model(l, t, model) || load_added(l, t, added) ||
      load_normalizer(l, t, json_object_get(root, "normalizer")) ||
      load_pretok(l, t, json_object_get(root, "pre_tokenizer")) ||
      load_post(l, t, json_object_get(root, "post_processor")) ||
      load_decoder(l, t, json_object_get(root, "decoder")) ||
      load_truncation(l, t, json_object_get(root, "truncation")))
    return -1;
  for (int i = 0; i < t->n_prefix + t->n_suffix; i++) {
    int32_t id = i < t->n_prefix ? t->prefix_ids[i] : t->suffix_ids[i - t->n_prefix];
    if (id < 0 || id >= t->n_tokens || !t->tokens[id])
      return fail(l, "post_processor: special token id %d is not in the vocabulary", id);
  }
  return 0;
}

rt_tokenizer *rt_tokenizer_load(const char *path, char *err, size_t errlen) {
  loader l = {path, err, errlen};
  FILE *f = fopen(path, "rb");
  struct stat sb;
  if (!f || fstat(fileno(f), &sb) != 0 || S_ISDIR(sb.st_mode)) {
    fail(&l, "cannot read: %s", f && S_ISDIR(sb.st_mode) ? "it is a directory" : strerror(errno));
    if (f) fclose(f);
    return NULL;
  }
  json_error_t je;
  json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
  fclose(f);
  if (!root) {
    snprintf(err, errlen, "%s:%d:%d: not valid JSON: %s", path, je.line, je.column, je.text);
    return NULL;
  }
  rt_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    json_decref(root);
    fail(&l, "out of memory");
    return NULL;
  }
  int rc = load_root(&l, t, root);
  json_decref(root);
  if (rc) {
    rt_tokenizer_free(t);
    return NULL;
  }
  return t;
}

void rt_tokenizer_free(rt_tokenizer *t) {
  if (!t) return;
  for (int32_t i = 0; i < t->n_tokens; i++) free(t->tokens[i]);
  free(t->tokens);
  free(t->vocab.keys);
  free(t->vocab.vals);
  free(t->merges.keys);
  free(t->merges.rank);
  free(t->merges.merged);
  for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
  free(t->added);
  free(t->is_special);
  free(t->cont_prefix);
  free(t->prefix_ids);
  free(t->suffix_ids);
  free(t->dec_prefix);
  free(t);
}

const char *rt_tokenizer_model(const rt_tokenizer *t) { return t->bpe ? "BPE" : "WordPiece"; }

int64_t rt_tokenizer_vocab_size(const rt_tokenizer *t) { return t->n_tokens; }

void rt_tokenizer_set_max_length(rt_tokenizer *t, int64_t max_length) { t->trunc_max = max_length; }
