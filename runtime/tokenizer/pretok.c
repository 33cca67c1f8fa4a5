/* runtime/tokenizer/pretok.c — from text to words: the normalizer
 * (BertNormalizer), then the pre-tokenizer: BertPreTokenizer, or the split
 * patterns of byte-level BPE scanned by hand (no regex engine) followed by
 * the byte-to-unicode map. The patterns, as the reference library writes them:
 *   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Each scanner returns the length of the leftmost-first match at a position,
 * the alternatives tried in the pattern's order. \p{L}, \p{N} and \s are the
 * full Unicode classes (unicode.c). */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* BERT's Chinese characters: the CJK Unified Ideographs blocks (not Japanese
 * kana or Korean hangul), as BertNormalizer lists them. */
static bool is_chinese(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static bool bert_space(uint32_t c) { return c == '\t' || c == '\n' || c == '\r' || rt_tok_is_space(c); }
static bool bert_control(uint32_t c) { return c != '\t' && c != '\n' && c != '\r' && rt_tok_is_other(c); }
static bool bert_punct(uint32_t c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126) ||
         rt_tok_is_punct(c);
}

/* BertNormalizer, in its order: clean text (drop NUL, U+FFFD and controls;
 * whitespace becomes a space), pad Chinese characters with spaces, strip
 * accents (NFD, drop non-spacing marks), lowercase. */
static void bert_normalize(const rt_tokenizer *t, const uint32_t *cp, size_t n, rt_tok_cps *out) {
  rt_tok_cps a = {0}, b = {0};
  for (size_t i = 0; i < n; i++) {
    uint32_t c = cp[i];
    if (t->clean_text) {
      if (c == 0 || c == 0xFFFD || bert_control(c)) continue;
      if (bert_space(c)) c = ' ';
    }
    if (t->chinese_chars && is_chinese(c)) {
      rt_tok_cps_push(&a, ' ');
      rt_tok_cps_push(&a, c);
      rt_tok_cps_push(&a, ' ');
    } else {
      rt_tok_cps_push(&a, c);
    }
  }
  if (t->strip_accents) {
    for (size_t i = 0; i < a.n; i++) rt_tok_push_nfd(&b, a.v[i]);
    size_t k = 0;
    for (size_t i = 0; i < b.n; i++)
      if (!rt_tok_is_mark_nonspacing(b.v[i])) b.v[k++] = b.v[i];
    b.n = k;
  } else {
    rt_tok_cps tmp = a;
    a = b;
    b = tmp;
  }
  if (t->lowercase) {
    for (size_t i = 0; i < b.n; i++) rt_tok_push_lower(out, b.v[i]);
  } else {
    for (size_t i = 0; i < b.n; i++) rt_tok_cps_push(out, b.v[i]);
  }
  rt_tok_cps_free(&a);
  rt_tok_cps_free(&b);
}

static int emit_cps(const uint32_t *cp, size_t n, rt_tok_word_fn emit, void *ctx) {
  if (n == 0) return 0;
  rt_tok_buf w = {0};
  for (size_t i = 0; i < n; i++) rt_tok_buf_cp(&w, cp[i]);
  int rc = emit(ctx, w.s, w.n);
  rt_tok_buf_free(&w);
  return rc;
}

/* BertPreTokenizer: whitespace separates words (and is dropped); every
 * punctuation character is a word of its own. */
static int bert_words(const uint32_t *cp, size_t n, rt_tok_word_fn emit, void *ctx) {
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && !rt_tok_is_space(cp[i]) && !bert_punct(cp[i])) continue;
    if (emit_cps(cp + start, i - start, emit, ctx)) return -1;
    if (i < n && bert_punct(cp[i]) && emit_cps(cp + i, 1, emit, ctx)) return -1;
    start = i + 1;
  }
  return 0;
}

/* ---- byte level ---- */

/* GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the
 * others (control, space, 127-160, 173) for 256, 257, ... in byte order. */
static bool byte_prints(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

uint32_t rt_tok_byte_to_cp(uint8_t b) {
  if (byte_prints(b)) return b;
  return b <= 32 ? 256u + b : b <= 160 ? b + 162u : 323u; /* 0-32: 256-288, 127-160: 289-322, 173: 323 */
}

int rt_tok_cp_to_byte(uint32_t c) {
  if (c < 256) return byte_prints(c) ? (int)c : -1;
  return c <= 288 ? (int)(c - 256) : c <= 322 ? (int)(c - 162) : c == 323 ? 173 : -1;
}

static int emit_bytes(const uint32_t *cp, size_t n, rt_tok_word_fn emit, void *ctx) {
  if (n == 0) return 0;
  rt_tok_buf w = {0};
  for (size_t i = 0; i < n; i++) {
    char u[4];
    int k = rt_tok_utf8_put(cp[i], u);
    for (int j = 0; j < k; j++) rt_tok_buf_cp(&w, rt_tok_byte_to_cp((uint8_t)u[j]));
  }
  int rc = emit(ctx, w.s, w.n);
  rt_tok_buf_free(&w);
  return rc;
}

static bool letter(const uint32_t *cp, size_t n, size_t i) { return i < n && rt_tok_is_letter(cp[i]); }
static bool number(const uint32_t *cp, size_t n, size_t i) { return i < n && rt_tok_is_number(cp[i]); }
static bool space(const uint32_t *cp, size_t n, size_t i) { return i < n && rt_tok_is_space(cp[i]); }
/* [^\s\p{L}\p{N}] */
static bool rest(const uint32_t *cp, size_t n, size_t i) {
  return i < n && !rt_tok_is_space(cp[i]) && !rt_tok_is_letter(cp[i]) && !rt_tok_is_number(cp[i]);
}
/* Case folding as (?i) does for the letters of the contractions: ASCII, and
 * U+017F LATIN SMALL LETTER LONG S, which folds to 's'. */
static uint32_t fold(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c == 0x17F ? 's' : c; }

/* 's|'t|'re|'ve|'m|'ll|'d (case-insensitive for Llama 3): the length, 0 if none. */
static size_t contraction(const uint32_t *cp, size_t n, size_t i, bool nocase) {
  if (cp[i] != '\'' || i + 1 >= n) return 0;
  uint32_t a = nocase ? fold(cp[i + 1]) : cp[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= n) return 0;
  uint32_t b = nocase ? fold(cp[i + 2]) : cp[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

/* \s+(?!\S)|\s+ at i (a whitespace character): the run, less its last
 * character when a non-space follows and the run is longer than one. */
static size_t space_run(const uint32_t *cp, size_t n, size_t i) {
  size_t k = i;
  while (space(cp, n, k)) k++;
  if (k < n && k - i > 1) return k - 1 - i;
  return k - i;
}

static size_t gpt2_match(const uint32_t *cp, size_t n, size_t i) {
  size_t m = contraction(cp, n, i, false);
  if (m) return m;
  size_t j = i + (cp[i] == ' ');
  if (letter(cp, n, j) || number(cp, n, j) || rest(cp, n, j)) { /*  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ */
    bool (*cls)(const uint32_t *, size_t, size_t) = letter(cp, n, j) ? letter : number(cp, n, j) ? number : rest;
    while (cls(cp, n, j)) j++;
    return j - i;
  }
  return space_run(cp, n, i);
}

static size_t llama3_match(const uint32_t *cp, size_t n, size_t i) {
  size_t m = contraction(cp, n, i, true);
  if (m) return m;
  /* [^\r\n\p{L}\p{N}]?\p{L}+ */
  size_t j = i;
  if (!letter(cp, n, j) && cp[j] != '\r' && cp[j] != '\n' && !number(cp, n, j) && letter(cp, n, j + 1)) j++;
  if (letter(cp, n, j)) {
    while (letter(cp, n, j)) j++;
    return j - i;
  }
  if (number(cp, n, i)) { /* \p{N}{1,3} */
    j = i;
    while (j < i + 3 && number(cp, n, j)) j++;
    return j - i;
  }
  j = i + (cp[i] == ' '); /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
  if (rest(cp, n, j)) {
    while (rest(cp, n, j)) j++;
    while (j < n && (cp[j] == '\r' || cp[j] == '\n')) j++;
    return j - i;
  }
  /* \s*[\r\n]+: the whitespace run up to its last line break */
  size_t k = i, last = SIZE_MAX;
  for (; space(cp, n, k); k++)
    if (cp[k] == '\r' || cp[k] == '\n') last = k;
  if (last != SIZE_MAX) return last + 1 - i;
  return space_run(cp, n, i);
}

static int split_words(const uint32_t *cp, size_t n, size_t (*match)(const uint32_t *, size_t, size_t),
                       rt_tok_word_fn emit, void *ctx) {
  for (size_t i = 0; i < n;) {
    size_t m = match(cp, n, i);
    if (m == 0) m = 1; /* cannot happen: the last alternatives take any character */
    if (emit_bytes(cp + i, m, emit, ctx)) return -1;
    i += m;
  }
  return 0;
}

int rt_tok_pretokenize(const rt_tokenizer *t, const uint32_t *cp, size_t n, rt_tok_word_fn emit, void *ctx) {
  rt_tok_cps norm = {0}, pre = {0};
  if (t->bert_norm) {
    bert_normalize(t, cp, n, &norm);
    cp = norm.v;
    n = norm.n;
  }
  if (t->add_prefix_space && n > 0 && cp[0] != ' ') {
    rt_tok_cps_push(&pre, ' ');
    for (size_t i = 0; i < n; i++) rt_tok_cps_push(&pre, cp[i]);
    cp = pre.v;
    n = pre.n;
  }
  int rc;
  switch (t->pretok) {
  case TOK_PRE_BERT: rc = bert_words(cp, n, emit, ctx); break;
  case TOK_PRE_GPT2: rc = split_words(cp, n, gpt2_match, emit, ctx); break;
  case TOK_PRE_LLAMA3: rc = split_words(cp, n, llama3_match, emit, ctx); break;
  case TOK_PRE_BYTES: rc = emit_bytes(cp, n, emit, ctx); break;
  default: rc = emit_cps(cp, n, emit, ctx); break;
  }
  rt_tok_cps_free(&norm);
  rt_tok_cps_free(&pre);
  return rc;
}
