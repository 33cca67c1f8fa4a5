/* tests/unit/test_tokenizer.c — the tokenizers (runtime/tokenizer/) beyond
 * the reference ids that tests/scripts/tokenize_ref.sh compares:
 *   - the byte-to-unicode map is a bijection of the 256 bytes;
 *   - the hand-written scanners of GPT-2's and Llama 3's split patterns cut
 *     texts into the pieces the patterns define (expected pieces worked out
 *     from the patterns' leftmost-first semantics);
 *   - byte-level BPE loses nothing: decode(encode(x)) == x for 3,000 random
 *     texts of mixed scripts, whitespace, digits and apostrophes, under both
 *     small BPE files of tests/data/tokenizers;
 *   - decoding bytes that are not UTF-8 gives U+FFFD, as the reference does.
 * Exact comparisons (no tolerance). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tokenizer/tok_internal.h"

static void check_byte_map(void) {
  bool seen[512] = {0};
  for (int b = 0; b < 256; b++) {
    uint32_t c = rt_tok_byte_to_cp((uint8_t)b);
    CHECK(c < 512 && !seen[c]);
    if (c < 512) seen[c] = true;
    CHECK_EQ_INT(rt_tok_cp_to_byte(c), b);
  }
  CHECK_EQ_INT(rt_tok_byte_to_cp(' '), 0x120); /* 'Ġ' */
  CHECK_EQ_INT(rt_tok_byte_to_cp('\n'), 0x10A); /* 'Ċ' */
  CHECK_EQ_INT(rt_tok_cp_to_byte(0x200), -1);
}

typedef struct {
  char out[1024];
} pieces;

static int add_piece(void *ctx, const char *w, size_t len) {
  pieces *p = ctx;
  size_t n = strlen(p->out);
  snprintf(p->out + n, sizeof p->out - n, "%s%.*s", n ? "|" : "", (int)len, w);
  return 0;
}

/* The pieces of text under t's pre-tokenizer, joined by '|' (bytes mapped). */
static const char *split(const rt_tokenizer *t, const char *text) {
  static pieces p;
  p.out[0] = 0;
  rt_tok_cps cps = {0};
  size_t bad;
  if (rt_tok_utf8_decode(text, strlen(text), &cps, &bad) != 0) return "(not UTF-8)";
  rt_tok_pretokenize(t, cps.v, cps.n, add_piece, &p);
  rt_tok_cps_free(&cps);
  return p.out;
}

static void check_patterns(const rt_tokenizer *gpt2, const rt_tokenizer *llama3) {
  /* Ġ is a space, Ċ a newline, ĉ a tab */
  CHECK_STR(split(gpt2, "Hello world"), "Hello|Ġworld");
  CHECK_STR(split(gpt2, "  hi"), "Ġ|Ġhi");
  CHECK_STR(split(gpt2, "a\n\n b"), "a|ĊĊ|Ġb");
  CHECK_STR(split(gpt2, "a\nb"), "a|Ċ|b");
  CHECK_STR(split(gpt2, "I'm 12345 it's"), "I|'m|Ġ12345|Ġit|'s");
  CHECK_STR(split(gpt2, "DON'T 'x"), "DON|'|T|Ġ'|x"); /* GPT-2's contractions are lowercase only */
  CHECK_STR(split(gpt2, "x?! ...y"), "x|?!|Ġ...|y");
  CHECK_STR(split(gpt2, "tab\t\tend  "), "tab|ĉ|ĉ|end|ĠĠ");
  CHECK_STR(split(llama3, "12345"), "123|45");
  CHECK_STR(split(llama3, "a\n\n b"), "a|ĊĊ|Ġb");
  CHECK_STR(split(llama3, "DON'T you're"), "DON|'T|Ġyou|'re");
  CHECK_STR(split(llama3, "it'\u017Fx"), "it|'Å¿|x"); /* (?i) folds long s to s: the reference's split */
  CHECK_STR(split(llama3, "(hello) x"), "(hello|)|Ġx");
  CHECK_STR(split(llama3, "a  \n\n  b"), "a|ĠĠĊĊ|Ġ|Ġb");
  CHECK_STR(split(llama3, "x...\n\ny"), "x|...ĊĊ|y");
}

/* A random code point from a mix the patterns treat differently. */
static uint32_t random_cp(unsigned *s) {
  static const uint32_t some[] = {' ', ' ', ' ', '\n', '\t', '\r', '\'', 's', 'T', '1', '9', '.', '!', 0xE9, 0x3000,
                                  0x4E2D, 0x1F600, 0x1F3FD, 0x200D, 0x0301, 0xA0, 0x0663, 0x00BD, 'l', 'L'};
  unsigned r = (unsigned)rand_r(s);
  switch (r % 4) {
  case 0: return some[(r / 4) % (sizeof some / sizeof some[0])];
  case 1: return 0x20 + (r / 4) % 0x5F; /* ASCII */
  case 2: return 0xA0 + (r / 4) % 0x2000; /* Latin, Greek, Cyrillic, ... */
  default: {
    uint32_t c = (r / 4) % 0x30000; /* anywhere in the first planes, surrogates excluded */
    return c >= 0xD800 && c <= 0xDFFF ? 'x' : c == 0 ? 'y' : c;
  }
  }
}

static void check_round_trip(const rt_tokenizer *t, const char *name) {
  unsigned seed = 12345;
  int failures = 0;
  for (int i = 0; i < 1500; i++) {
    rt_tok_buf text = {0};
    rt_tok_buf_add(&text, "", 0);
    int n = rand_r(&seed) % 40;
    for (int k = 0; k < n; k++) rt_tok_buf_cp(&text, random_cp(&seed));
    int32_t *ids;
    size_t nids, len;
    char err[256];
    if (rt_tokenizer_encode(t, text.s, text.n, false, &ids, &nids, err, sizeof err) != 0) {
      fprintf(stderr, "%s: encode failed: %s\n", name, err);
      failures++;
      rt_tok_buf_free(&text);
      continue;
    }
    char *back = rt_tokenizer_decode(t, ids, nids, true, &len, err, sizeof err);
    if (!back || len != text.n || memcmp(back, text.s, len) != 0) {
      if (failures++ < 3) fprintf(stderr, "%s: round trip of \"%s\" gave \"%s\"\n", name, text.s, back ? back : err);
    }
    free(back);
    free(ids);
    rt_tok_buf_free(&text);
  }
  CHECK_EQ_INT(failures, 0);
}

static void check_lossy(const rt_tokenizer *gpt2) {
  int32_t a = rt_tok_strmap_get(&gpt2->vocab, "Ã", strlen("Ã"));
  int32_t c = rt_tok_strmap_get(&gpt2->vocab, "©", strlen("©"));
  CHECK(a >= 0 && c >= 0);
  if (a < 0 || c < 0) return;
  char err[256];
  size_t len;
  int32_t ids[3] = {a, c, a}; /* 0xC3 0xA9 is "é"; 0xC3 alone is not UTF-8 */
  char *s = rt_tokenizer_decode(gpt2, ids, 3, true, &len, err, sizeof err);
  CHECK_STR(s, "é\xEF\xBF\xBD");
  free(s);
}

int main(void) {
  char err[512];
  rt_tokenizer *gpt2 = rt_tokenizer_load("tests/data/tokenizers/bpe_gpt2.json", err, sizeof err);
  rt_tokenizer *llama3 = rt_tokenizer_load("tests/data/tokenizers/bpe_llama3.json", err, sizeof err);
  CHECK(gpt2 && llama3);
  if (!gpt2 || !llama3) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  check_byte_map();
  check_patterns(gpt2, llama3);
  check_round_trip(gpt2, "gpt2");
  check_round_trip(llama3, "llama3");
  check_lossy(gpt2);
  rt_tokenizer_free(gpt2);
  rt_tokenizer_free(llama3);
  return check_done();
}
