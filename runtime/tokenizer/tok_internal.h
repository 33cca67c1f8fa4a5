/* runtime/tokenizer/tok_internal.h — shared between the files of the
 * tokenizer (not a public header: rt_tokenizer.h is). load.c reads
 * tokenizer.json into rt_tokenizer; unicode.c answers the Unicode questions
 * (from the generated unicode_tables.c); pretok.c normalizes and splits text
 * into words; encode.c runs the models (WordPiece, BPE), the
 * post-processor and the decoders. */
#ifndef TGC_TOK_INTERNAL_H
#define TGC_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rt_tokenizer.h"

/* ---- unicode.c (tables: unicode_tables.c) ---- */
typedef struct {
  uint32_t lo, hi;
} rt_tok_range;
typedef struct {
  uint32_t from, to;
} rt_tok_map1;
typedef struct {
  uint32_t from, first, second; /* second 0: a one-code-point decomposition */
} rt_tok_map2;
extern const rt_tok_range rt_tok_letter_ranges[], rt_tok_number_ranges[], rt_tok_punct_ranges[], rt_tok_other_ranges[],
    rt_tok_mark_nonspacing_ranges[];
extern const int rt_tok_letter_ranges_count, rt_tok_number_ranges_count, rt_tok_punct_ranges_count,
    rt_tok_other_ranges_count,
    rt_tok_mark_nonspacing_ranges_count;
extern const rt_tok_map1 rt_tok_lower_map[];
extern const int rt_tok_lower_map_count;
extern const rt_tok_map2 rt_tok_decomp_map[];
extern const int rt_tok_decomp_map_count;

bool rt_tok_is_letter(uint32_t c);     /* \p{L} */
bool rt_tok_is_number(uint32_t c);     /* \p{N} */
bool rt_tok_is_punct(uint32_t c);      /* \p{P} */
bool rt_tok_is_other(uint32_t c);      /* Cc, Cf, Co, Cs: control, format, private use, surrogate */
bool rt_tok_is_mark_nonspacing(uint32_t c); /* \p{Mn} */
bool rt_tok_is_space(uint32_t c);      /* the White_Space property: \s, Rust's char::is_whitespace */

/* A growable array of code points. */
typedef struct {
  uint32_t *v;
  size_t n, cap;
} rt_tok_cps;
void rt_tok_cps_push(rt_tok_cps *a, uint32_t c);
void rt_tok_cps_free(rt_tok_cps *a);
/* Appends the lowercase of c (one or two code points). */
void rt_tok_push_lower(rt_tok_cps *a, uint32_t c);
/* Appends the canonical decomposition (NFD, without reordering marks) of c. */
void rt_tok_push_nfd(rt_tok_cps *a, uint32_t c);

/* UTF-8: decodes s[0..len) into a (strict: -1 and the offset of the first
 * bad byte in *bad when it is not UTF-8). */
int rt_tok_utf8_decode(const char *s, size_t len, rt_tok_cps *a, size_t *bad);
/* Encodes c into out (4 bytes at most); returns the byte count. */
int rt_tok_utf8_put(uint32_t c, char *out);

/* ---- a growable byte string ---- */
typedef struct {
  char *s;
  size_t n, cap;
} rt_tok_buf;
void rt_tok_buf_add(rt_tok_buf *b, const char *s, size_t n);
void rt_tok_buf_cp(rt_tok_buf *b, uint32_t c);
void rt_tok_buf_free(rt_tok_buf *b);

/* ---- the tokenizer (load.c) ---- */
typedef enum {
  TOK_PRE_NONE,       /* no pre-tokenizer: the whole text is one word */
  TOK_PRE_BERT,       /* BertPreTokenizer: split on whitespace, isolate punctuation */
  TOK_PRE_GPT2,       /* ByteLevel (use_regex): GPT-2's pattern, then bytes to unicode */
  TOK_PRE_LLAMA3,     /* Split(Llama 3's pattern) then ByteLevel without its regex */
  TOK_PRE_BYTES,      /* ByteLevel without a regex: bytes to unicode only */
} rt_tok_pretok_kind;

typedef enum {
  TOK_DEC_NONE,      /* tokens joined by spaces */
  TOK_DEC_WORDPIECE, /* "##" joins, a space elsewhere, optional cleanup */
  TOK_DEC_BYTELEVEL, /* unicode back to bytes */
} rt_tok_decoder_kind;

typedef struct {
  char *content;
  int32_t id;
  bool special;
} rt_tok_added;

/* An open-addressing table from a string to an id. */
typedef struct {
  const char **keys; /* borrowed from rt_tokenizer.tokens */
  int32_t *vals;
  size_t cap;
} rt_tok_strmap;
int32_t rt_tok_strmap_get(const rt_tok_strmap *m, const char *s, size_t n); /* -1: absent */

/* BPE merges: (left id, right id) -> (rank, merged id). */
typedef struct {
  uint64_t *keys; /* left << 32 | right, UINT64_MAX: empty */
  int32_t *rank, *merged;
  size_t cap;
} rt_tok_merges;
bool rt_tok_merges_get(const rt_tok_merges *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged);

struct rt_tokenizer {
  bool bpe;                     /* else WordPiece */
  char **tokens;                /* id -> token text (NULL: no token has that id) */
  int32_t n_tokens;             /* one more than the largest id */
  rt_tok_strmap vocab;             /* the model's vocabulary */
  rt_tok_merges merges;            /* BPE */
  bool ignore_merges;           /* BPE: a word that is a token is kept whole */
  int32_t unk;                  /* -1: none */
  char *cont_prefix;            /* WordPiece "##" */
  int64_t max_word_chars;       /* WordPiece: longer words are unknown */
  rt_tok_added *added;             /* added tokens, longest first */
  int n_added;
  bool *is_special;             /* id -> added as special */
  /* normalizer: BertNormalizer (bert_norm) or none */
  bool bert_norm, clean_text, chinese_chars, strip_accents, lowercase;
  rt_tok_pretok_kind pretok;
  bool add_prefix_space;        /* ByteLevel */
  /* post-processor: the special ids before and after the sequence */
  int32_t *prefix_ids, *suffix_ids;
  int n_prefix, n_suffix;
  int64_t trunc_max;            /* 0: no truncation */
  bool trunc_left;
  rt_tok_decoder_kind decoder;
  char *dec_prefix;             /* WordPiece decoder */
  bool dec_cleanup;
};

/* ---- pretok.c ---- */
/* The words of code points cp[0..n) (already split from added tokens):
 * normalized and pre-tokenized; each word is its UTF-8 text (for byte-level
 * pre-tokenizers: its bytes mapped to unicode). Calls emit for each. */
typedef int (*rt_tok_word_fn)(void *ctx, const char *word, size_t len);
int rt_tok_pretokenize(const rt_tokenizer *t, const uint32_t *cp, size_t n, rt_tok_word_fn emit, void *ctx);
/* The byte <-> unicode map of byte-level BPE. */
uint32_t rt_tok_byte_to_cp(uint8_t b);
int rt_tok_cp_to_byte(uint32_t c); /* -1: not a mapped byte */

#endif
