/* analysis/keyvalue.c — the reader of `key = value` files that describe
 * hardware: target files (target.c) and cluster files (cluster.c).
 *
 * A file is lines of `key = value`; '#' starts a comment; blank lines are
 * skipped. The reader splits each line, checks the key against the caller's
 * list, refuses a key given twice, and hands the value (trimmed, with its
 * location) to the caller's setter, which checks and stores it. Every bad
 * line is reported as "path:line:col: error: ..." with the line and a caret,
 * and reading goes on, so one run shows every mistake. The caller checks for
 * missing keys afterwards with the line numbers in seen[] (0: not given;
 * minus the line: given with a bad value, already reported).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* "name, flops_bf16, ..." of the keys, for messages. */
static void key_list(const pass_kv_spec *s, char *buf, size_t cap) {
  buf[0] = 0;
  for (int k = 0; k < s->n_keys; k++) {
    if (k) strncat(buf, ", ", cap - strlen(buf) - 1);
    strncat(buf, s->keys[k], cap - strlen(buf) - 1);
  }
}

/* One line [start, end): 0 ok (or blank), -1 reported. */
static int read_line(const pass_kv_spec *s, const char *path, int line, const char *start, const char *end, int *seen,
                     void *ctx, ir_diag *d) {
  const char *p = start;
  const char *hash = memchr(p, '#', (size_t)(end - p));
  if (hash) end = hash;
  while (end > p && is_blank(end[-1])) end--;
  while (p < end && is_blank(*p)) p++;
  if (p == end) return 0;
#define COL(q) ((int)((q) - start) + 1)
  ir_loc loc = {path, line, COL(p)};
  char keys[512];
  key_list(s, keys, sizeof keys);
  const char *k0 = p;
  while (p < end && (isalnum((unsigned char)*p) || *p == '_')) p++;
  size_t klen = (size_t)(p - k0);
  if (klen == 0) {
    ir_error(d, loc, "expected 'key = value' (keys: %s)", keys);
    return -1;
  }
  int key = -1;
  for (int k = 0; k < s->n_keys; k++)
    if (strlen(s->keys[k]) == klen && strncmp(s->keys[k], k0, klen) == 0) key = k;
  if (key < 0) {
    ir_error(d, loc, "unknown key '%.*s' (keys: %s)", (int)klen, k0, keys);
    return -1;
  }
  while (p < end && is_blank(*p)) p++;
  if (p == end || *p != '=') {
    ir_error(d, (ir_loc){path, line, COL(p)}, "expected '=' after '%s'", s->keys[key]);
    return -1;
  }
  p++;
  while (p < end && is_blank(*p)) p++;
  ir_loc vloc = {path, line, COL(p)};
  if (p == end) {
    ir_error(d, vloc, "missing value for '%s'", s->keys[key]);
    return -1;
  }
  if (seen[key] > 0) {
    ir_error(d, loc, "'%s' given twice (first on line %d)", s->keys[key], seen[key]);
    return -1;
  }
  if (s->set(ctx, key, p, (size_t)(end - p), vloc, d) != 0) {
    if (!seen[key]) seen[key] = -line; /* given, but wrong: reported here, not missing */
    return -1;
  }
  seen[key] = line;
  return 0;
#undef COL
}

int pass_kv_read(const pass_kv_spec *s, const char *path, const char *text, size_t len, int *seen, void *ctx,
                 ir_diag *d) {
  ir_diag_add_source(d, path, text ? text : "", text ? len : 0);
  for (int k = 0; k < s->n_keys; k++) seen[k] = 0;
  int errors = 0, line = 1;
  const char *p = text ? text : "", *end = p + (text ? len : 0);
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl ? nl : end;
    if (memchr(p, '\0', (size_t)(le - p))) {
      ir_error(d, (ir_loc){path, line, 1}, "NUL byte in %s", s->what);
      errors++;
    } else if (read_line(s, path, line, p, le, seen, ctx, d) != 0) {
      errors++;
    }
    p = nl ? nl + 1 : end;
    line++;
  }
  return errors;
}

int pass_kv_number(const char *v, size_t n, ir_loc loc, double *out, ir_diag *d) {
  char num[64];
  if (n >= sizeof num) {
    ir_error(d, loc, "'%.*s...' is not a number", 20, v);
    return -1;
  }
  memcpy(num, v, n);
  num[n] = 0;
  char *stop;
  errno = 0;
  double x = strtod(num, &stop);
  if (stop == num || *stop || errno == ERANGE || !isfinite(x)) {
    ir_error(d, loc, "'%s' is not a number (write e.g. 312e12)", num);
    return -1;
  }
  *out = x;
  return 0;
}

int pass_kv_word(const char *v, size_t n, ir_loc loc, const char *what, char *out, size_t cap, ir_diag *d) {
  for (size_t i = 0; i < n; i++)
    if (is_blank(v[i]) || !isprint((unsigned char)v[i])) {
      ir_error(d, (ir_loc){loc.file, loc.line, loc.col + (int)i}, "%s is one word of printable characters", what);
      return -1;
    }
  if (n >= cap) {
    ir_error(d, loc, "%s is longer than %zu characters", what, cap - 1);
    return -1;
  }
  memcpy(out, v, n);
  out[n] = 0;
  return 0;
}
