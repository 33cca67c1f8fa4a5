/* runtime/tokenizer/encode.c — text to ids and back. encode: the text is
 * cut at the added tokens (matched as written, the longest first; each is
 * its own id), every other piece goes through pretok.c to words, and every
 * word through the model: WordPiece (greedy longest match from the left,
 * continuations prefixed "##", a word with an unmatched rest is [UNK]) or BPE
 * (start from the word's characters, merge the adjacent pair of lowest rank,
 * the leftmost on a tie, until no pair merges). Then truncation and the
 * post-processor's special ids. decode: ids to tokens, then the decoder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "tok_internal.h"

typedef struct {
  const rt_tokenizer *t;
  rt_tok_cps ids; /* ids are >= 0: kept in the code-point array */
} id_list;

static void push(id_list *l, int32_t id) { rt_tok_cps_push(&l->ids, (uint32_t)id); }

static size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

static int wordpiece(void *ctx, const char *w, size_t len) {
  id_list *l = ctx;
  const rt_tokenizer *t = l->t;
  size_t chars = 0;
  for (size_t i = 0; i < len; i += utf8_len((unsigned char)w[i])) chars++;
  if ((int64_t)chars > t->max_word_chars) {
    push(l, t->unk);
    return 0;
  }
  size_t first = l->ids.n, plen = strlen(t->cont_prefix);
  char *piece = malloc(plen + len + 1);
  if (!piece) IR_DIE("out of memory (piece)");
  memcpy(piece, t->cont_prefix, plen);
  for (size_t start = 0; start < len;) {
    int32_t found = -1;
    size_t end = len;
    while (end > start) {
      const char *s = start ? piece : w + start;
      size_t n = start ? plen + end - start : end - start;
      if (start) memcpy(piece + plen, w + start, end - start);
      if ((found = rt_tok_strmap_get(&t->vocab, s, n)) >= 0) break;
      do end--; /* back to the previous character boundary */
      while (end > start && ((unsigned char)w[end] & 0xC0) == 0x80);
    }
    if (found < 0) { /* the whole word is unknown */
      l->ids.n = first;
      push(l, t->unk);
      break;
    }
    push(l, found);
    start = end;
  }
  free(piece);
  return 0;
}

static int bpe(void *ctx, const char *w, size_t len) {
  id_list *l = ctx;
  const rt_tokenizer *t = l->t;
  if (t->ignore_merges) {
    int32_t whole = rt_tok_strmap_get(&t->vocab, w, len);
    if (whole >= 0) {
      push(l, whole);
      return 0;
    }
  }
  int32_t *sym = malloc((len ? len : 1) * sizeof *sym);
  if (!sym) IR_DIE("out of memory (sym)");
  size_t n = 0;
  for (size_t i = 0; i < len;) {
    size_t k = utf8_len((unsigned char)w[i]);
    int32_t id = rt_tok_strmap_get(&t->vocab, w + i, k);
    if (id < 0) id = t->unk; /* no unk: the character is dropped, as the reference does */
    if (id >= 0) sym[n++] = id;
    i += k;
  }
  for (;;) {
    int32_t best_rank = INT32_MAX, best_merged = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; i++) {
      int32_t rank, merged;
      if (rt_tok_merges_get(&t->merges, sym[i], sym[i + 1], &rank, &merged) && rank < best_rank) {
        best_rank = rank;
        best_merged = merged;
        at = i;
      }
    }
    if (best_merged < 0) break;
    sym[at] = best_merged;
    memmove(sym + at + 1, sym + at + 2, (n - at - 2) * sizeof *sym);
    n--;
  }
  for (size_t i = 0; i < n; i++) push(l, sym[i]);
  free(sym);
  return 0;
}

/* The added token that starts at s (the longest), or NULL. */
static const rt_tok_added *added_at(const rt_tokenizer *t, const char *s, size_t left) {
  for (int i = 0; i < t->n_added; i++) {
    size_t k = strlen(t->added[i].content);
    if (k <= left && memcmp(s, t->added[i].content, k) == 0) return &t->added[i];
  }
  return NULL;
}

static int encode_piece(const rt_tokenizer *t, const char *s, size_t len, id_list *l, char *err, size_t errlen,
                        size_t offset) {
  if (len == 0) return 0;
  rt_tok_cps cps = {0};
  size_t bad = 0;
  if (rt_tok_utf8_decode(s, len, &cps, &bad) != 0) {
    snprintf(err, errlen, "the text is not valid UTF-8 (byte %zu)", offset + bad);
    rt_tok_cps_free(&cps);
    return -1;
  }
  int rc = rt_tok_pretokenize(t, cps.v, cps.n, t->bpe ? bpe : wordpiece, l);
  rt_tok_cps_free(&cps);
  return rc;
}

int rt_tokenizer_encode(const rt_tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
                        size_t *n, char *err, size_t errlen) {
  id_list l = {.t = t};
  size_t start = 0;
  for (size_t i = 0; i <= len; i++) {
    const rt_tok_added *a = i < len ? added_at(t, text + i, len - i) : NULL;
    if (i < len && !a) continue;
    if (encode_piece(t, text + start, i - start, &l, err, errlen, start)) {
      rt_tok_cps_free(&l.ids);
      return -1;
    }
    if (a) {
      push(&l, a->id);
      i += strlen(a->content) - 1;
    }
    start = i + 1;
  }
  size_t keep = l.ids.n, from = 0;
  if (t->trunc_max) { /* the reference truncates without the special tokens too, then counting none */
    int64_t room = t->trunc_max - (add_special ? t->n_prefix + t->n_suffix : 0);
    if (room < 0) room = 0;
    if ((int64_t)keep > room) {
      if (t->trunc_left) from = keep - (size_t)room;
      keep = (size_t)room;
    }
  }
  size_t total = keep + (add_special ? (size_t)(t->n_prefix + t->n_suffix) : 0);
  int32_t *out = malloc((total ? total : 1) * sizeof *out);
  if (!out) IR_DIE("out of memory (out)");
  size_t k = 0;
  if (add_special)
    for (int i = 0; i < t->n_prefix; i++) out[k++] = t->prefix_ids[i];
  for (size_t i = 0; i < keep; i++) out[k++] = (int32_t)l.ids.v[from + i];
  if (add_special)
    for (int i = 0; i < t->n_suffix; i++) out[k++] = t->suffix_ids[i];
  rt_tok_cps_free(&l.ids);
  *ids = out;
  *n = k;
  return 0;
}

/* ---- decode ---- */

/* The WordPiece decoder's cleanup of one token (with its leading space):
 * spaces before punctuation and English contractions removed. */
static void cleanup(rt_tok_buf *out, const char *s) {
  static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " do not", " 's", " 've", " 're"};
  static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re"};
  enum { N = sizeof from / sizeof from[0] };
  char *cur = strdup(s);
  if (!cur) IR_DIE("out of memory (cur)");
  for (int r = 0; r < N; r++) { /* one replace-all after another, as str::replace */
    rt_tok_buf next = {0};
    size_t fl = strlen(from[r]);
    const char *p = cur, *hit;
    while ((hit = strstr(p, from[r]))) {
      rt_tok_buf_add(&next, p, (size_t)(hit - p));
      rt_tok_buf_add(&next, to[r], strlen(to[r]));
      p = hit + fl;
    }
    rt_tok_buf_add(&next, p, strlen(p));
    free(cur);
    cur = next.s;
  }
  rt_tok_buf_add(out, cur, strlen(cur));
  free(cur);
}

/* Bytes to text as Rust's String::from_utf8_lossy: each maximal invalid
 * sequence becomes one U+FFFD. */
static void lossy_utf8(rt_tok_buf *out, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = p[i];
    size_t need = c < 0x80                 ? 0
                  : c >= 0xC2 && c <= 0xDF ? 1
                  : c >= 0xE0 && c <= 0xEF ? 2
                  : c >= 0xF0 && c <= 0xF4 ? 3
                                           : 99; /* 99: never a lead byte */
    size_t k = 1;
    if (need != 99) {
      for (; k <= need && i + k < n; k++) {
        unsigned lo = 0x80, hi = 0xBF;
        if (k == 1 && c == 0xE0) lo = 0xA0;
        if (k == 1 && c == 0xED) hi = 0x9F;
        if (k == 1 && c == 0xF0) lo = 0x90;
        if (k == 1 && c == 0xF4) hi = 0x8F;
        if (p[i + k] < lo || p[i + k] > hi) break;
      }
    }
    if (need != 99 && k == need + 1) {
      rt_tok_buf_add(out, (const char *)p + i, k);
      i += k;
    } else {
      rt_tok_buf_cp(out, 0xFFFD);
      i += k;
    }
  }
}

char *rt_tokenizer_decode(const rt_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, size_t *len,
                          char *err, size_t errlen) {
  rt_tok_buf out = {0}, bytes = {0};
  rt_tok_buf_add(&out, "", 0);
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= t->n_tokens || !t->tokens[id]) {
      snprintf(err, errlen, "id %d is not in the vocabulary (ids 0 to %d)", id, t->n_tokens - 1);
      rt_tok_buf_free(&out);
      rt_tok_buf_free(&bytes);
      return NULL;
    }
    if (skip_special && t->is_special[id]) continue;
    const char *tok = t->tokens[id];
    if (t->decoder == TOK_DEC_BYTELEVEL) { /* each token: its characters' bytes, or its own UTF-8 if one is unmapped */
      rt_tok_cps cps = {0};
      size_t bad;
      bool mapped = rt_tok_utf8_decode(tok, strlen(tok), &cps, &bad) == 0;
      for (size_t k = 0; mapped && k < cps.n; k++) mapped = rt_tok_cp_to_byte(cps.v[k]) >= 0;
      if (mapped) {
        for (size_t k = 0; k < cps.n; k++) {
          char b = (char)rt_tok_cp_to_byte(cps.v[k]);
          rt_tok_buf_add(&bytes, &b, 1);
        }
      } else {
        rt_tok_buf_add(&bytes, tok, strlen(tok));
      }
      rt_tok_cps_free(&cps);
    } else if (t->decoder == TOK_DEC_WORDPIECE) {
      size_t pl = strlen(t->dec_prefix);
      rt_tok_buf one = {0};
      if (kept && strncmp(tok, t->dec_prefix, pl) == 0) rt_tok_buf_add(&one, tok + pl, strlen(tok) - pl);
      else {
        if (kept) rt_tok_buf_add(&one, " ", 1);
        rt_tok_buf_add(&one, tok, strlen(tok));
      }
      if (t->dec_cleanup) cleanup(&out, one.s);
      else rt_tok_buf_add(&out, one.s, one.n);
      rt_tok_buf_free(&one);
    } else {
      if (kept) rt_tok_buf_add(&out, " ", 1);
      rt_tok_buf_add(&out, tok, strlen(tok));
    }
    kept++;
  }
  if (t->decoder == TOK_DEC_BYTELEVEL) lossy_utf8(&out, (const unsigned char *)bytes.s, bytes.n);
  rt_tok_buf_free(&bytes);
  *len = out.n;
  return out.s;
}
