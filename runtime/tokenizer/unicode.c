/* runtime/tokenizer/unicode.c — the Unicode questions the tokenizers ask:
 * general categories (binary search over the generated ranges of
 * unicode_tables.c), White_Space, simple lowercase (plus U+0130's full
 * mapping, as Rust's char::to_lowercase), canonical decomposition (recursive,
 * Hangul by rule), and strict UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "tok_internal.h"

static bool in_ranges(const rt_tok_range *r, int n, uint32_t c) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (c < r[mid].lo) hi = mid - 1;
    else if (c > r[mid].hi) lo = mid + 1;
    else return true;
  }
  return false;
}

bool rt_tok_is_letter(uint32_t c) { return in_ranges(rt_tok_letter_ranges, rt_tok_letter_ranges_count, c); }
bool rt_tok_is_number(uint32_t c) { return in_ranges(rt_tok_number_ranges, rt_tok_number_ranges_count, c); }
bool rt_tok_is_punct(uint32_t c) { return in_ranges(rt_tok_punct_ranges, rt_tok_punct_ranges_count, c); }
bool rt_tok_is_other(uint32_t c) { return in_ranges(rt_tok_other_ranges, rt_tok_other_ranges_count, c); }
bool rt_tok_is_mark_nonspacing(uint32_t c) {
  return in_ranges(rt_tok_mark_nonspacing_ranges, rt_tok_mark_nonspacing_ranges_count, c);
}

bool rt_tok_is_space(uint32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

void rt_tok_cps_push(rt_tok_cps *a, uint32_t c) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 64;
    uint32_t *v = realloc(a->v, a->cap * sizeof *v);
    if (!v) IR_DIE("out of memory (v)");
    a->v = v;
  }
  a->v[a->n++] = c;
}

void rt_tok_cps_free(rt_tok_cps *a) {
  free(a->v);
  *a = (rt_tok_cps){0};
}

/* The index of the entry whose first member (`from`) is c in a sorted table
 * of n entries of size bytes each, or -1. */
static int find_from(const void *table, size_t size, int n, uint32_t c) {
  const unsigned char *base = table;
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    uint32_t from;
    memcpy(&from, base + (size_t)mid * size, sizeof from);
    if (c < from) hi = mid - 1;
    else if (c > from) lo = mid + 1;
    else return mid;
  }
  return -1;
}

void rt_tok_push_lower(rt_tok_cps *a, uint32_t c) {
  if (c == 0x130) { /* LATIN CAPITAL LETTER I WITH DOT ABOVE: "i" + COMBINING DOT ABOVE */
    rt_tok_cps_push(a, 0x69);
    rt_tok_cps_push(a, 0x307);
    return;
  }
  int i = find_from(rt_tok_lower_map, sizeof *rt_tok_lower_map, rt_tok_lower_map_count, c);
  if (i >= 0) {
    rt_tok_cps_push(a, rt_tok_lower_map[i].to);
    return;
  }
  rt_tok_cps_push(a, c);
}

void rt_tok_push_nfd(rt_tok_cps *a, uint32_t c) {
  enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7, T_COUNT = 28, N_COUNT = 588,
         S_COUNT = 11172 };
  if (c >= S_BASE && c < S_BASE + S_COUNT) { /* Hangul syllable: L V (T) */
    uint32_t s = c - S_BASE;
    rt_tok_cps_push(a, L_BASE + s / N_COUNT);
    rt_tok_cps_push(a, V_BASE + (s % N_COUNT) / T_COUNT);
    if (s % T_COUNT) rt_tok_cps_push(a, T_BASE + s % T_COUNT);
    return;
  }
  int i = find_from(rt_tok_decomp_map, sizeof *rt_tok_decomp_map, rt_tok_decomp_map_count, c);
  if (i >= 0) {
    rt_tok_push_nfd(a, rt_tok_decomp_map[i].first);
    if (rt_tok_decomp_map[i].second) rt_tok_push_nfd(a, rt_tok_decomp_map[i].second);
    return;
  }
  rt_tok_cps_push(a, c);
}

int rt_tok_utf8_decode(const char *s, size_t len, rt_tok_cps *a, size_t *bad) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    uint32_t c = p[i];
    int extra = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (extra < 0 || (size_t)extra > len - i - 1) goto fail;
    if (extra > 0) c &= 0x3F >> extra;
    for (int k = 1; k <= extra; k++) {
      if ((p[i + k] & 0xC0) != 0x80) goto fail;
      c = c << 6 | (p[i + k] & 0x3F);
    }
    /* overlong forms, surrogates and values past U+10FFFF are not UTF-8 */
    if ((extra == 1 && c < 0x80) || (extra == 2 && c < 0x800) || (extra == 3 && c < 0x10000) || c > 0x10FFFF ||
        (c >= 0xD800 && c <= 0xDFFF))
      goto fail;
    rt_tok_cps_push(a, c);
    i += (size_t)extra + 1;
  }
  return 0;
fail:
  *bad = i;
  return -1;
}

int rt_tok_utf8_put(uint32_t c, char *out) {
  if (c < 0x80) {
    out[0] = (char)c;
    return 1;
  }
  if (c < 0x800) {
    out[0] = (char)(0xC0 | c >> 6);
    out[1] = (char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = (char)(0xE0 | c >> 12);
    out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[2] = (char)(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | c >> 18);
  out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
  out[3] = (char)(0x80 | (c & 0x3F));
  return 4;
}

void rt_tok_buf_add(rt_tok_buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) IR_DIE("out of memory (p)");
    b->s = p;
    b->cap = cap;
  }
  if (n) memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

void rt_tok_buf_cp(rt_tok_buf *b, uint32_t c) {
  char u[4];
  rt_tok_buf_add(b, u, (size_t)rt_tok_utf8_put(c, u));
}

void rt_tok_buf_free(rt_tok_buf *b) {
  free(b->s);
  *b = (rt_tok_buf){0};
}
