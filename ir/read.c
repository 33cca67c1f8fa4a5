/* ir/read.c — the textual IR reader: ir_parse turns the text of docs/ir.md
 * back into a graph (print.c is the other half; parse(print(g)) prints
 * byte-identically).
 *
 * How it works: a hand-written lexer (one token of lookahead, exact
 * line:col, newlines are tokens) under a recursive-descent parser with one
 * function per grammar rule. The input is untrusted (it is fuzzed), so:
 *   - the text is bounded by len and need not be NUL-terminated; NUL bytes
 *     are reported, never read as terminators;
 *   - integers are range-checked while accumulating digits (no overflow),
 *     ranks are <= IR_MAX_RANK, tensors <= IR_MAX_ELEMENTS elements, and
 *     every list grows with the text it consumes (no size is taken on trust).
 * Every error goes through ir_error at its place in the .ir file. After an
 * error inside a body line the rest of that line is skipped and parsing goes
 * on with the next one; values the failed line would have defined are
 * "poisoned" so their later uses fail quietly instead of cascading into
 * "undefined value" errors. Header errors stop the parse. The graph is built
 * as lines are read (ir_graph_add_input / _param / _node / _output, with the
 * printed names verbatim) and freed again if anything was reported.
 * ir_parse does not re-infer types (its caller runs ir_verify); ir_read
 * runs the verifier with the position of every node (its op name), value
 * (its name where defined) and output (its line) in the .ir text, so
 * verifier errors point into the .ir file too.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "ir.h"

#define MAX_LIST 1000000 /* operands / results / list items in one line */
#define MAX_ATTRS 64     /* attributes of one node */

typedef enum {
  T_EOF,    /* end of text */
  T_NL,     /* '\n' */
  T_IDENT,  /* [A-Za-z_][A-Za-z0-9_.]* (keywords, ops, dtypes, attr keys) */
  T_VAL,    /* %name */
  T_AT,     /* @name */
  T_INT,    /* -?[0-9]+ */
  T_FLOAT,  /* -?[0-9]+ ('.' [0-9]*)? (e[+-]?[0-9]+)? with '.' or 'e'; -inf, -nan */
  T_STRING, /* "..." (decoded into parser.sbuf) */
  T_PUNCT,  /* one of : , = { } [ ] ( ) - */
  T_ERROR,  /* a lexical error, already reported */
} tok_kind;

typedef struct {
  tok_kind kind;
  const char *start; /* raw text */
  size_t len;
  int line, col;
  int64_t i;  /* T_INT */
  double f;   /* T_FLOAT */
  char punct; /* T_PUNCT */
} token;

typedef enum { E_DEFINED = 1, E_PENDING, E_POISONED } entry_state;
typedef struct {
  const char *name; /* scratch arena */
  size_t len;
  ir_value *v;      /* E_DEFINED */
  int line, col;    /* where it was defined */
  entry_state state;
} entry;

typedef struct {
  entry **slots;
  size_t cap, count; /* cap: power of two */
} name_table;

typedef struct {
  const char *path, *text;
  size_t len, pos;
  int line, col;
  ir_diag *d;
  token tok;
  char *sbuf; /* decoded T_STRING / number scratch text */
  size_t slen, scap;
  int errors;
  bool last_error_at_eof;
  ir_arena *scratch;
  ir_graph *g;
  name_table values, outputs;
  entry **pending; /* names defined by the line being parsed */
  int n_pending, cap_pending;
  bool record;     /* ir_read: keep where each node, value and output is in the text */
  ir_loc *node_at, *value_at, *output_at; /* indexed by node id, value id, output index */
  int cap_node_at, cap_value_at, cap_output_at;
} parser;

/* ------------------------------------------------------------------ */
/* diagnostics                                                          */
/* ------------------------------------------------------------------ */

static void report(parser *p, int line, int col, bool at_eof, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void report(parser *p, int line, int col, bool at_eof, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_verror(p->d, (ir_loc){p->path, line, col}, fmt, ap);
  va_end(ap);
  p->errors++;
  p->last_error_at_eof = at_eof;
}

/* "'text'" (at most 40 bytes of it), "end of line" or "end of file". */
static const char *describe(const token *t, char *buf, size_t n) {
  if (t->kind == T_EOF) return "end of file";
  if (t->kind == T_NL) return "end of line";
  int show = t->len > 40 ? 40 : (int)t->len;
  snprintf(buf, n, "'%.*s%s'", show, t->start, t->len > 40 ? "..." : "");
  return buf;
}

/* Reports "expected WHAT, got TOKEN" at the current token; quiet when the
 * token is a lexical error (already reported). Always returns false. */
static bool expected(parser *p, const char *what) {
  if (p->tok.kind == T_ERROR) return false;
  char buf[64];
  report(p, p->tok.line, p->tok.col, p->tok.kind == T_EOF, "expected %s, got %s", what,
         describe(&p->tok, buf, sizeof buf));
  return false;
}

/* ------------------------------------------------------------------ */
/* lexer                                                                */
/* ------------------------------------------------------------------ */

/* ASCII only, whatever the locale. */
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_ident_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_name_char(int c) { return is_ident_start(c) || is_digit(c) || c == '.'; }
static bool is_print(int c) { return c >= 0x20 && c < 0x7f; }

static int peek_at(const parser *p, size_t k) {
  return p->pos + k < p->len ? (unsigned char)p->text[p->pos + k] : -1;
}

static void advance(parser *p) {
  if (p->text[p->pos] == '\n') {
    p->line++;
    p->col = 1;
  } else {
    p->col++;
  }
  p->pos++;
}

static void sbuf_push(parser *p, char c) {
  if (p->slen + 1 >= p->scap) {
    size_t cap = p->scap ? p->scap * 2 : 64;
    char *nb = realloc(p->sbuf, cap);
    if (!nb) IR_DIE("out of memory (nb)");
    p->sbuf = nb;
    p->scap = cap;
  }
  p->sbuf[p->slen++] = c;
  p->sbuf[p->slen] = '\0';
}

static void lex_error(parser *p, int line, int col, const char *fmt, const char *arg) {
  report(p, line, col, false, fmt, arg);
  p->tok.kind = T_ERROR;
}

/* Consumes [A-Za-z0-9_.]* and reports "bad number '...'". */
static void lex_bad_number(parser *p) {
  while (is_name_char(peek_at(p, 0))) advance(p);
  token *t = &p->tok;
  char buf[64];
  int show = (int)(p->pos - (size_t)(t->start - p->text));
  snprintf(buf, sizeof buf, "%.*s%s", show > 40 ? 40 : show, t->start, show > 40 ? "..." : "");
  lex_error(p, t->line, t->col, "bad number '%s'", buf);
}

static void lex_number(parser *p) {
  token *t = &p->tok;
  bool neg = false, is_float = false, overflow = false;
  int64_t v = 0;
  if (peek_at(p, 0) == '-') {
    neg = true;
    advance(p);
  }
  while (is_digit(peek_at(p, 0))) {
    int digit = peek_at(p, 0) - '0';
    if (!neg && v > (INT64_MAX - digit) / 10) overflow = true;
    if (neg && v < (INT64_MIN + digit) / 10) overflow = true;
    if (!overflow) v = v * 10 + (neg ? -digit : digit);
    advance(p);
  }
  if (peek_at(p, 0) == '.') {
    is_float = true;
    advance(p);
    while (is_digit(peek_at(p, 0))) advance(p);
  }
  int e1 = peek_at(p, 1), e2 = peek_at(p, 2);
  if ((peek_at(p, 0) == 'e' || peek_at(p, 0) == 'E') &&
      (is_digit(e1) || ((e1 == '+' || e1 == '-') && is_digit(e2)))) {
    is_float = true;
    advance(p);
    if (!is_digit(peek_at(p, 0))) advance(p);
    while (is_digit(peek_at(p, 0))) advance(p);
  }
  if (is_name_char(peek_at(p, 0))) {
    lex_bad_number(p);
    return;
  }
  t->len = (size_t)(p->text + p->pos - t->start);
  if (!is_float) {
    if (overflow) {
      char buf[64];
      int show = t->len > 40 ? 40 : (int)t->len;
      snprintf(buf, sizeof buf, "%.*s%s", show, t->start, t->len > 40 ? "..." : "");
      lex_error(p, t->line, t->col, "bad integer '%s'", buf);
      return;
    }
    t->kind = T_INT;
    t->i = v;
    return;
  }
  p->slen = 0;
  for (size_t k = 0; k < t->len; k++) sbuf_push(p, t->start[k]);
  errno = 0;
  double f = strtod(p->sbuf, NULL);
  if (isinf(f)) {
    char buf[64];
    int show = t->len > 40 ? 40 : (int)t->len;
    snprintf(buf, sizeof buf, "%.*s%s", show, t->start, t->len > 40 ? "..." : "");
    lex_error(p, t->line, t->col, "float out of range '%s'", buf);
    return;
  }
  t->kind = T_FLOAT;
  t->f = f; /* underflow to a subnormal or zero is fine */
}

/* "..." with escapes \" \\ \n; decoded into p->sbuf. */
static void lex_string(parser *p) {
  token *t = &p->tok;
  advance(p);
  p->slen = 0;
  sbuf_push(p, '\0');
  p->slen = 0;
  for (;;) {
    int c = peek_at(p, 0);
    if (c < 0 || c == '\n') {
      lex_error(p, t->line, t->col, "unterminated string%s", "");
      return;
    }
    if (c == '"') {
      advance(p);
      break;
    }
    if (c == 0) {
      lex_error(p, p->line, p->col, "NUL byte in string%s", "");
      return;
    }
    if (c == '\\') {
      int line = p->line, col = p->col;
      int e = peek_at(p, 1);
      if (e < 0 || e == '\n') {
        advance(p);
        lex_error(p, t->line, t->col, "unterminated string%s", "");
        return;
      }
      if (e != '"' && e != '\\' && e != 'n') {
        char esc[16];
        if (is_print(e)) snprintf(esc, sizeof esc, "\\%c", e);
        else snprintf(esc, sizeof esc, "\\x%02x", e);
        lex_error(p, line, col, "unknown escape '%s' in string", esc);
        return;
      }
      advance(p);
      advance(p);
      sbuf_push(p, e == 'n' ? '\n' : (char)e);
      continue;
    }
    sbuf_push(p, (char)c);
    advance(p);
  }
  t->kind = T_STRING;
  t->len = (size_t)(p->text + p->pos - t->start);
}

static bool word_at(const parser *p, size_t k, const char *w) {
  size_t n = strlen(w);
  if (p->pos + k + n > p->len || memcmp(p->text + p->pos + k, w, n) != 0) return false;
  return !is_name_char(peek_at(p, k + n));
}

static void next(parser *p) {
  token *t = &p->tok;
  for (;;) { /* blanks and comments; '\n' is a token */
    int c = peek_at(p, 0);
    if (c == ' ' || c == '\t' || c == '\r') advance(p);
    else if (c == '#') {
      while (peek_at(p, 0) >= 0 && peek_at(p, 0) != '\n') advance(p);
    } else break;
  }
  t->start = p->text + p->pos;
  t->line = p->line;
  t->col = p->col;
  t->len = 1;
  int c = peek_at(p, 0);
  if (c < 0) {
    t->kind = T_EOF;
    t->len = 0;
    if (p->len > 0 && p->text[p->len - 1] == '\n' && p->line > 1) {
      /* Point at the end of the last line rather than at an empty line past it. */
      size_t start = p->len - 1;
      while (start > 0 && p->text[start - 1] != '\n') start--;
      t->line = p->line - 1;
      t->col = (int)(p->len - start);
    }
    return;
  }
  if (c == '\n') {
    t->kind = T_NL;
    advance(p);
    return;
  }
  if (c == '%' || c == '@') {
    advance(p);
    bool ok = c == '%' ? is_name_char(peek_at(p, 0)) : is_ident_start(peek_at(p, 0));
    if (!ok) {
      lex_error(p, t->line, t->col,
                c == '%' ? "expected value name after '%s'" : "expected graph name after '%s'",
                c == '%' ? "%" : "@");
      return;
    }
    while (is_name_char(peek_at(p, 0))) advance(p);
    t->kind = c == '%' ? T_VAL : T_AT;
    t->len = (size_t)(p->text + p->pos - t->start);
    return;
  }
  if (c == '"') {
    lex_string(p);
    return;
  }
  if (is_digit(c) || (c == '-' && is_digit(peek_at(p, 1)))) {
    lex_number(p);
    return;
  }
  if (c == '-' && (word_at(p, 1, "inf") || word_at(p, 1, "nan"))) {
    bool is_nan = peek_at(p, 1) == 'n';
    for (int k = 0; k < 4; k++) advance(p);
    t->kind = T_FLOAT;
    t->len = 4;
    t->f = is_nan ? copysign(NAN, -1.0) : -INFINITY;
    return;
  }
  if (is_ident_start(c)) {
    while (is_name_char(peek_at(p, 0))) advance(p);
    t->kind = T_IDENT;
    t->len = (size_t)(p->text + p->pos - t->start);
    return;
  }
  if (c != 0 && strchr(":,={}[]()-", c)) {
    advance(p);
    t->kind = T_PUNCT;
    t->punct = (char)c;
    return;
  }
  advance(p);
  char buf[32];
  if (is_print(c)) snprintf(buf, sizeof buf, "character '%c'", c);
  else snprintf(buf, sizeof buf, "byte 0x%02x", c);
  lex_error(p, t->line, t->col, "unexpected %s", buf);
}

/* ------------------------------------------------------------------ */
/* token helpers                                                        */
/* ------------------------------------------------------------------ */

static bool is_punct(const parser *p, char c) { return p->tok.kind == T_PUNCT && p->tok.punct == c; }

static bool is_word(const parser *p, const char *w) {
  return p->tok.kind == T_IDENT && p->tok.len == strlen(w) && memcmp(p->tok.start, w, p->tok.len) == 0;
}

/* Consumes punctuation c or reports "expected 'c' CONTEXT, got ...". */
static bool expect_punct(parser *p, char c, const char *context) {
  if (is_punct(p, c)) {
    next(p);
    return true;
  }
  char what[96];
  snprintf(what, sizeof what, "'%c'%s%s", c, *context ? " " : "", context);
  return expected(p, what);
}

static bool expect_eol(parser *p) {
  if (p->tok.kind == T_NL || p->tok.kind == T_EOF) return true;
  return expected(p, "end of line");
}

/* Copies the current token's text into arena a (NUL-terminated). */
static char *tok_dup(parser *p, ir_arena *a, size_t skip) {
  return ir_arena_strndup(a, p->tok.start + skip, p->tok.len - skip);
}

/* Skips the rest of the current line (raw, so no further lexical errors). */
static void skip_line(parser *p) {
  if (p->tok.kind == T_NL || p->tok.kind == T_EOF) return;
  while (p->pos < p->len && p->text[p->pos] != '\n') advance(p);
  next(p);
}

static void skip_blank_lines(parser *p) {
  while (p->tok.kind == T_NL) next(p);
}

/* ------------------------------------------------------------------ */
/* name tables                                                          */
/* ------------------------------------------------------------------ */

static size_t hash_name(const char *s, size_t n) { return (size_t)ir_hash_bytes(s, n); }

static entry *table_find(const name_table *t, const char *s, size_t n) {
  if (!t->cap) return NULL;
  for (size_t k = hash_name(s, n) & (t->cap - 1);; k = (k + 1) & (t->cap - 1)) {
    entry *e = t->slots[k];
    if (!e) return NULL;
    if (e->len == n && memcmp(e->name, s, n) == 0) return e;
  }
}

static entry *table_insert(parser *p, name_table *t, const char *s, size_t n, int line, int col) {
  if ((t->count + 1) * 2 > t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    entry **slots = calloc(cap, sizeof *slots);
    if (!slots) IR_DIE("out of memory (slots)");
    for (size_t k = 0; k < t->cap; k++) {
      entry *e = t->slots[k];
      if (!e) continue;
      size_t j = hash_name(e->name, e->len) & (cap - 1);
      while (slots[j]) j = (j + 1) & (cap - 1);
      slots[j] = e;
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
  }
  entry *e = ir_arena_alloc(p->scratch, sizeof *e);
  e->name = ir_arena_strndup(p->g->arena, s, n); /* handed to the graph as is */
  e->len = n;
  e->line = line;
  e->col = col;
  e->state = E_PENDING;
  size_t j = hash_name(s, n) & (t->cap - 1);
  while (t->slots[j]) j = (j + 1) & (t->cap - 1);
  t->slots[j] = e;
  t->count++;
  return e;
}

/* Declares the current T_VAL token as a value the current line defines. */
static entry *define_value(parser *p) {
  const char *s = p->tok.start + 1;
  size_t n = p->tok.len - 1;
  entry *prev = table_find(&p->values, s, n);
  if (prev) {
    report(p, p->tok.line, p->tok.col, false, "value '%%%s' defined twice", prev->name);
    ir_note(p->d, (ir_loc){p->path, prev->line, prev->col}, "'%%%s' was first defined here",
            prev->name);
    return NULL;
  }
  entry *e = table_insert(p, &p->values, s, n, p->tok.line, p->tok.col);
  if (p->n_pending == p->cap_pending) {
    int cap = p->cap_pending ? p->cap_pending * 2 : 16;
    entry **np = realloc(p->pending, (size_t)cap * sizeof *np);
    if (!np) IR_DIE("out of memory (np)");
    p->pending = np;
    p->cap_pending = cap;
  }
  p->pending[p->n_pending++] = e;
  return e;
}

/* Resolves the current T_VAL token as a use; NULL (reported, or quietly
 * for a poisoned name) if there is no such value yet. */
static ir_value *use_value(parser *p) {
  entry *e = table_find(&p->values, p->tok.start + 1, p->tok.len - 1);
  if (e && e->state == E_DEFINED) return e->v;
  if (!e || e->state == E_PENDING)
    report(p, p->tok.line, p->tok.col, false, "use of undefined value '%.*s'", (int)p->tok.len,
           p->tok.start);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* grammar                                                              */
/* ------------------------------------------------------------------ */

typedef struct {
  ir_type type;
  ir_role role;
  ir_shard shard;
} annot;

/* INT within [lo, hi]; msg when outside. */
static bool parse_int(parser *p, int64_t lo, int64_t hi, const char *what, const char *range_msg,
                      int64_t *out) {
  if (p->tok.kind != T_INT) return expected(p, what);
  if (p->tok.i < lo || p->tok.i > hi) {
    report(p, p->tok.line, p->tok.col, false, "%s", range_msg);
    return false;
  }
  *out = p->tok.i;
  next(p);
  return true;
}

/* number := FLOAT | INT | 'inf' | 'nan' (inits accept INT too) */
static bool parse_number(parser *p, bool allow_int, double *out) {
  if (p->tok.kind == T_FLOAT) *out = p->tok.f;
  else if (allow_int && p->tok.kind == T_INT) *out = (double)p->tok.i;
  else if (is_word(p, "inf")) *out = INFINITY;
  else if (is_word(p, "nan")) *out = NAN;
  else return expected(p, "a number");
  next(p);
  return true;
}

/* DTYPE as the current identifier. */
static bool parse_dtype(parser *p, ir_dtype *out) {
  if (p->tok.kind != T_IDENT) return expected(p, "a dtype");
  char name[16];
  int dt = -1;
  if (p->tok.len < sizeof name) {
    memcpy(name, p->tok.start, p->tok.len);
    name[p->tok.len] = '\0';
    dt = ir_dtype_from_name(name);
  }
  if (dt < 0) {
    char buf[64];
    report(p, p->tok.line, p->tok.col, false, "unknown dtype %s", describe(&p->tok, buf, sizeof buf));
    return false;
  }
  *out = (ir_dtype)dt;
  next(p);
  return true;
}

/* annot := DTYPE '[' (INT (',' INT)*)? ']' ('role' ROLE)?
 *          ('shard' '[' ('-'|INT) (',' ('-'|INT))* ']')? ('partial')? */
/* One mesh axis name, into *mask; the axis must not be in *used yet. */
static bool parse_axis(parser *p, unsigned *mask, unsigned *used, const char *what) {
  char buf[64];
  if (p->tok.kind != T_IDENT) return expected(p, what);
  int ax = ir_axis_from_name(p->tok.start, p->tok.len);
  if (ax < 0) {
    report(p, p->tok.line, p->tok.col, false, "unknown mesh axis %s (axes: pp, dp, tp)", describe(&p->tok, buf, sizeof buf));
    return false;
  }
  if (*used & (1u << ax)) {
    report(p, p->tok.line, p->tok.col, false, "mesh axis '%s' given twice", ir_axis_name((ir_axis)ax));
    return false;
  }
  *used |= 1u << ax;
  *mask |= 1u << ax;
  next(p);
  return true;
}

/* axes := AXIS | '(' AXIS (',' AXIS)* ')', outermost first */
static bool parse_axes(parser *p, unsigned *mask, unsigned *used, const char *what) {
  if (!is_punct(p, '(')) return parse_axis(p, mask, used, what);
  next(p);
  int last = -1;
  do {
    if (last >= 0) next(p); /* the ',' */
    int line = p->tok.line, col = p->tok.col;
    unsigned one = 0;
    if (!parse_axis(p, &one, used, "a mesh axis (pp, dp, tp)")) return false;
    int ax = __builtin_ctz(one);
    if (ax <= last) {
      report(p, line, col, false, "mesh axes must be listed outermost first (pp, dp, tp)");
      return false;
    }
    last = ax;
    *mask |= one;
  } while (is_punct(p, ','));
  return expect_punct(p, ')', "after mesh axes");
}

static bool parse_annot(parser *p, ir_role default_role, annot *a) {
  memset(a, 0, sizeof *a);
  a->role = default_role;
  if (!parse_dtype(p, &a->type.dtype)) return false;
  if (!expect_punct(p, '[', "after dtype")) return false;
  int64_t numel = 1;
  while (!is_punct(p, ']')) {
    if (a->type.rank > 0 && !expect_punct(p, ',', "or ']' in shape")) return false;
    if (p->tok.kind == T_INT && p->tok.i < 0) {
      report(p, p->tok.line, p->tok.col, false, "dims must be non-negative");
      return false;
    }
    int line = p->tok.line, col = p->tok.col;
    int64_t dim;
    if (!parse_int(p, 0, INT64_MAX, "a dimension", "", &dim)) return false;
    if (a->type.rank == IR_MAX_RANK) {
      report(p, line, col, false, "too many dims (max %d)", IR_MAX_RANK);
      return false;
    }
    if (dim > 1 && numel > IR_MAX_ELEMENTS / dim) numel = IR_MAX_ELEMENTS + 1;
    else if (dim > 1) numel *= dim;
    if (numel > IR_MAX_ELEMENTS) {
      report(p, line, col, false, "tensor has more than 2^48 elements");
      return false;
    }
    a->type.dims[a->type.rank++] = dim;
  }
  next(p);
  if (is_word(p, "role")) {
    next(p);
    if (p->tok.kind != T_IDENT) return expected(p, "a role after 'role'");
    char *name = tok_dup(p, p->scratch, 0);
    int r = ir_role_from_name(name);
    if (r < 0) {
      char buf[64];
      report(p, p->tok.line, p->tok.col, false, "unknown role %s", describe(&p->tok, buf, sizeof buf));
      return false;
    }
    a->role = (ir_role)r;
    next(p);
  }
  if (is_word(p, "shard")) {
    next(p);
    int line = p->tok.line, col = p->tok.col, n = 0;
    unsigned used = 0;
    if (!expect_punct(p, '[', "after 'shard'")) return false;
    do {
      if (n > 0) next(p); /* the ',' */
      unsigned mask = 0;
      if (is_punct(p, '-')) {
        next(p);
      } else if (!parse_axes(p, &mask, &used, "a mesh axis (pp, dp, tp), '(' or '-'")) {
        return false;
      }
      if (mask && is_punct(p, ':')) { /* in parts */
        next(p);
        int pl = p->tok.line, pc = p->tok.col;
        int64_t k;
        if (!parse_int(p, 2, 255, "a number of parts after ':'", "a dim is in 2 to 255 parts", &k)) return false;
        (void)pl, (void)pc;
        if (n < IR_MAX_RANK) a->shard.pieces[n] = (uint8_t)k;
      }
      if (mask && is_word(p, "pad")) { /* padded to a multiple of its blocks */
        next(p);
        int64_t k;
        if (!parse_int(p, 1, INT32_MAX, "a number of padding elements after 'pad'", "a pad is 1 or more elements", &k))
          return false;
        if (n < IR_MAX_RANK) a->shard.pad[n] = (int32_t)k;
      }
      if (n < IR_MAX_RANK) a->shard.split[n] = (uint8_t)mask;
      if (n <= IR_MAX_RANK) n++;
    } while (is_punct(p, ','));
    if (!expect_punct(p, ']', "after shard entries")) return false;
    if (n != a->type.rank) {
      report(p, line, col, false, "shard has %s%d entr%s but the type has rank %d",
             n > IR_MAX_RANK ? "more than " : "", n > IR_MAX_RANK ? IR_MAX_RANK : n,
             n == 1 ? "y" : "ies", a->type.rank);
      return false;
    }
  }
  if (is_word(p, "partial")) {
    next(p);
    unsigned mask = 0, used = 0;
    if (!is_punct(p, '(')) return expected(p, "'(' and mesh axes after 'partial'");
    if (!parse_axes(p, &mask, &used, "")) return false;
    a->shard.partial = (uint8_t)mask;
  }
  return true;
}

/* loc := 'loc' INT ':' INT */
static bool parse_loc(parser *p, ir_loc *loc) {
  if (!is_word(p, "loc")) return expected(p, "'loc'");
  next(p);
  int64_t line, col;
  const char *range = "loc numbers must be between 0 and 2147483647";
  if (!parse_int(p, 0, INT_MAX, "a line number after 'loc'", range, &line)) return false;
  if (!expect_punct(p, ':', "between line and column")) return false;
  if (!parse_int(p, 0, INT_MAX, "a column number", range, &col)) return false;
  *loc = (ir_loc){line > 0 ? p->g->source_file : NULL, (int)line, (int)col};
  return true;
}

/* init := 'zeros' | 'ones' | 'normal' '(' FLOAT ')' | 'uniform' '(' FLOAT ',' FLOAT ')' */
static bool parse_init(parser *p, ir_init *init) {
  if (is_word(p, "zeros")) init->kind = IR_INIT_ZEROS;
  else if (is_word(p, "ones")) init->kind = IR_INIT_ONES;
  else if (is_word(p, "normal")) init->kind = IR_INIT_NORMAL;
  else if (is_word(p, "uniform")) init->kind = IR_INIT_UNIFORM;
  else return expected(p, "'zeros', 'ones', 'normal' or 'uniform' after 'init'");
  next(p);
  if (init->kind == IR_INIT_NORMAL || init->kind == IR_INIT_UNIFORM) {
    if (!expect_punct(p, '(', "after init kind")) return false;
    if (!parse_number(p, true, &init->a)) return false;
    if (init->kind == IR_INIT_UNIFORM) {
      if (!expect_punct(p, ',', "between uniform bounds")) return false;
      if (!parse_number(p, true, &init->b)) return false;
    }
    if (!expect_punct(p, ')', "after init arguments")) return false;
  }
  return true;
}

/* at[i] = (path, line, col), growing at as needed (ir_read only). */
static void record_at(parser *p, ir_loc **at, int *cap, int i, int line, int col) {
  if (!p->record) return;
  if (i >= *cap) {
    int nc = *cap ? *cap : 64;
    while (nc <= i) nc *= 2;
    ir_loc *na = realloc(*at, (size_t)nc * sizeof *na);
    if (!na) IR_DIE("out of memory (na)");
    *at = na;
    *cap = nc;
  }
  (*at)[i] = (ir_loc){p->path, line, col};
}

/* 'input' VAL ':' annot loc  |  'param' VAL ':' annot ('init' init)? loc */
static bool parse_decl(parser *p, bool is_param) {
  next(p);
  if (p->tok.kind != T_VAL)
    return expected(p, is_param ? "a value name after 'param'" : "a value name after 'input'");
  entry *e = define_value(p);
  if (!e) return false;
  next(p);
  if (!expect_punct(p, ':', "after value name")) return false;
  annot a;
  if (!parse_annot(p, is_param ? IR_ROLE_PARAM : IR_ROLE_INPUT, &a)) return false;
  ir_init init = {IR_INIT_NONE, 0, 0};
  if (is_param && is_word(p, "init")) {
    next(p);
    if (!parse_init(p, &init)) return false;
  }
  ir_loc loc;
  if (!parse_loc(p, &loc)) return false;
  if (!expect_eol(p)) return false;
  ir_value *v = is_param ? ir_graph_add_param(p->g, e->name, a.type, init, loc)
                         : ir_graph_add_input(p->g, e->name, a.type, loc);
  v->role = a.role;
  v->shard = a.shard;
  e->v = v;
  record_at(p, &p->value_at, &p->cap_value_at, v->id, e->line, e->col);
  return true;
}

/* attrval := INT | FLOAT | '[' (INT (',' INT)*)? ']' | STRING | DTYPE */
static bool parse_attr_value(parser *p, ir_attr *at, int64_t **ints_owned) {
  static const int64_t no_ints[1];
  token *t = &p->tok;
  if (t->kind == T_INT) {
    at->kind = IR_ATTR_INT;
    at->i = t->i;
  } else if (t->kind == T_FLOAT || is_word(p, "inf") || is_word(p, "nan")) {
    at->kind = IR_ATTR_FLOAT;
    return parse_number(p, false, &at->f);
  } else if (t->kind == T_STRING) {
    at->kind = IR_ATTR_STR;
    at->s = ir_arena_strndup(p->g->arena, p->sbuf, p->slen);
  } else if (t->kind == T_IDENT) {
    ir_dtype dt;
    if (!parse_dtype(p, &dt)) return false;
    at->kind = IR_ATTR_DTYPE;
    at->i = dt;
    return true;
  } else if (is_punct(p, '[')) {
    at->kind = IR_ATTR_INTS;
    at->ints = no_ints;
    next(p);
    int64_t *buf = NULL;
    int n = 0, cap = 0;
    while (!is_punct(p, ']')) {
      if (n > 0 && !expect_punct(p, ',', "or ']' in integer list")) goto fail;
      if (p->tok.kind != T_INT) {
        expected(p, "an integer in list");
        goto fail;
      }
      if (n == MAX_LIST) {
        report(p, p->tok.line, p->tok.col, false, "too many list items (max %d)", MAX_LIST);
        goto fail;
      }
      if (n == cap) {
        cap = cap ? cap * 2 : 8;
        int64_t *nb = realloc(buf, (size_t)cap * sizeof *nb);
        if (!nb) IR_DIE("out of memory (nb)");
        buf = nb;
      }
      buf[n++] = p->tok.i;
      next(p);
    }
    *ints_owned = buf;
    if (n) at->ints = buf;
    at->n = n;
    next(p);
    return true;
  fail:
    free(buf);
    return false;
  } else {
    return expected(p, "an attribute value");
  }
  next(p);
  return true;
}

/* The "axis" of an op on a mesh axis is written as the axis name and held
 * as its index: the one place a name becomes an axis in a graph. */
static bool mesh_axis_attr(parser *p, ir_attr *at, int line, int col) {
  int a = ir_axis_from_name(at->s, strlen(at->s));
  if (a < 0) {
    char names[64] = "";
    for (int k = 0; k < IR_NUM_AXES; k++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "", ir_axis_name((ir_axis)k));
    report(p, line, col, false, "unknown mesh axis \"%.20s\" (axes: %s)", at->s, names);
    return false;
  }
  at->kind = IR_ATTR_MESH_AXIS;
  at->i = a;
  at->s = NULL;
  return true;
}

/* attrs := '{' (KEY '=' attrval (',' KEY '=' attrval)*)? '}' */
static bool parse_attrs(parser *p, ir_op op, ir_attr *attrs, int64_t **owned, int *n_attrs) {
  next(p); /* '{' */
  while (!is_punct(p, '}')) {
    if (*n_attrs > 0 && !expect_punct(p, ',', "or '}' in attributes")) return false;
    if (p->tok.kind != T_IDENT) return expected(p, "an attribute name");
    if (*n_attrs == MAX_ATTRS) {
      report(p, p->tok.line, p->tok.col, false, "too many attributes (max %d)", MAX_ATTRS);
      return false;
    }
    for (int k = 0; k < *n_attrs; k++) {
      if (strlen(attrs[k].key) == p->tok.len && memcmp(attrs[k].key, p->tok.start, p->tok.len) == 0) {
        report(p, p->tok.line, p->tok.col, false, "duplicate attribute '%s'", attrs[k].key);
        return false;
      }
    }
    ir_attr *at = &attrs[*n_attrs];
    memset(at, 0, sizeof *at);
    at->key = tok_dup(p, p->g->arena, 0);
    next(p);
    if (!expect_punct(p, '=', "after attribute name")) return false;
    int64_t *ints = NULL;
    int line = p->tok.line, col = p->tok.col;
    bool ok = parse_attr_value(p, at, &ints);
    owned[*n_attrs] = ints;
    (*n_attrs)++; /* counted even on failure so `owned` is freed */
    if (!ok) return false;
    if (at->kind == IR_ATTR_STR && ir_op_on_mesh_axis(op) && strcmp(at->key, "axis") == 0 &&
        !mesh_axis_attr(p, at, line, col))
      return false;
  }
  next(p);
  return true;
}

typedef struct { /* growable arrays of one node line */
  const char **names;
  ir_value **in;
  annot *annots;
  int n_names, n_in, n_annots;
  int cap_names, cap_in, cap_annots;
} node_lists;

static void grow(void **arr, int *cap, int n, size_t elem) {
  if (n < *cap) return;
  int nc = *cap ? *cap * 2 : 8;
  void *na = realloc(*arr, (size_t)nc * elem);
  if (!na) IR_DIE("out of memory (na)");
  *arr = na;
  *cap = nc;
}

static bool too_many(parser *p, int n, const char *what) {
  if (n < MAX_LIST) return false;
  report(p, p->tok.line, p->tok.col, false, "too many %s (max %d)", what, MAX_LIST);
  return true;
}

/* VAL (',' VAL)* '=' OPNAME operands? attrs? ':' annot (',' annot)* loc layer? */
static bool parse_node_line(parser *p, node_lists *L, ir_attr *attrs, int64_t **owned, int *n_attrs) {
  bool no_results = p->tok.kind == T_IDENT; /* an op without results (send) */
  for (; !no_results;) {
    if (too_many(p, L->n_names, "results")) return false;
    entry *e = define_value(p);
    if (!e) return false;
    grow((void **)&L->names, &L->cap_names, L->n_names, sizeof *L->names);
    L->names[L->n_names++] = e->name;
    next(p);
    if (!is_punct(p, ',')) break;
    next(p);
    if (p->tok.kind != T_VAL) return expected(p, "a value name after ','");
  }
  if (!no_results && !expect_punct(p, '=', "after result names")) return false;
  if (p->tok.kind != T_IDENT) return expected(p, "an op name after '='");
  int op_line = p->tok.line, op_col = p->tok.col;
  char *opname = tok_dup(p, p->scratch, 0);
  int op = ir_op_from_name(opname);
  if (op < 0) {
    char buf[64];
    report(p, op_line, op_col, false, "unknown op %s", describe(&p->tok, buf, sizeof buf));
    return false;
  }
  int want_out = ir_op_num_outputs((ir_op)op);
  if (want_out >= 0 && want_out != L->n_names) {
    report(p, op_line, op_col, false, "op '%s' has %d result%s, got %d", opname, want_out,
           want_out == 1 ? "" : "s", L->n_names);
    return false;
  }
  next(p);
  while (p->tok.kind == T_VAL) {
    if (too_many(p, L->n_in, "operands")) return false;
    ir_value *v = use_value(p);
    if (!v) return false;
    grow((void **)&L->in, &L->cap_in, L->n_in, sizeof *L->in);
    L->in[L->n_in++] = v;
    next(p);
    if (!is_punct(p, ',')) break;
    next(p);
    if (p->tok.kind != T_VAL) return expected(p, "a value name after ','");
  }
  int want_in = ir_op_num_inputs((ir_op)op);
  if (want_in >= 0 && want_in != L->n_in) {
    report(p, op_line, op_col, false, "op '%s' takes %d operand%s, got %d", opname, want_in,
           want_in == 1 ? "" : "s", L->n_in);
    return false;
  }
  if (want_in < 0 && L->n_in == 0) {
    report(p, op_line, op_col, false, "op '%s' takes at least 1 operand, got 0", opname);
    return false;
  }
  if (is_punct(p, '{') && !parse_attrs(p, (ir_op)op, attrs, owned, n_attrs)) return false;
  int colon_line = p->tok.line, colon_col = p->tok.col;
  if (!no_results && !expect_punct(p, ':', "before result types")) return false;
  for (; !no_results;) {
    if (too_many(p, L->n_annots, "result types")) return false;
    grow((void **)&L->annots, &L->cap_annots, L->n_annots, sizeof *L->annots);
    if (!parse_annot(p, IR_ROLE_ACT, &L->annots[L->n_annots])) return false;
    L->n_annots++;
    if (!is_punct(p, ',')) break;
    next(p);
  }
  if (L->n_annots != L->n_names) {
    report(p, colon_line, colon_col, false, "%d result%s but %d type%s", L->n_names,
           L->n_names == 1 ? "" : "s", L->n_annots, L->n_annots == 1 ? "" : "s");
    return false;
  }
  ir_loc loc;
  if (!parse_loc(p, &loc)) return false;
  int64_t layer = -1;
  if (is_word(p, "layer")) {
    next(p);
    if (p->tok.kind == T_INT && p->tok.i < 0) {
      report(p, p->tok.line, p->tok.col, false, "layer must be non-negative");
      return false;
    }
    if (!parse_int(p, 0, INT_MAX, "a layer number", "layer out of range", &layer)) return false;
  }
  if (!expect_eol(p)) return false;

  ir_type *types = malloc((size_t)(L->n_annots ? L->n_annots : 1) * sizeof *types);
  if (!types) IR_DIE("out of memory (types)");
  for (int r = 0; r < L->n_annots; r++) types[r] = L->annots[r].type;
  static ir_value *const no_operands[1];
  ir_node *n = ir_graph_add_node(p->g, (ir_op)op, L->n_in ? L->in : no_operands, L->n_in, types, L->n_annots, attrs,
                                 *n_attrs, L->names, loc);
  free(types);
  n->layer = (int)layer;
  record_at(p, &p->node_at, &p->cap_node_at, n->id, op_line, op_col);
  for (int r = 0; r < n->n_out; r++) {
    n->out[r]->role = L->annots[r].role;
    n->out[r]->shard = L->annots[r].shard;
    p->pending[r]->v = n->out[r];
    record_at(p, &p->value_at, &p->cap_value_at, n->out[r]->id, p->pending[r]->line, p->pending[r]->col);
    if (strcmp(n->out[r]->name, L->names[r]) != 0) {
      report(p, p->pending[r]->line, p->pending[r]->col, false,
             "internal error: the graph renamed '%%%s' to '%%%s'", L->names[r], n->out[r]->name);
      return false;
    }
  }
  return true;
}

static bool parse_node(parser *p) {
  node_lists L = {0};
  ir_attr attrs[MAX_ATTRS];
  int64_t *owned[MAX_ATTRS];
  int n_attrs = 0;
  bool ok = parse_node_line(p, &L, attrs, owned, &n_attrs);
  for (int k = 0; k < n_attrs; k++) free(owned[k]);
  free(L.names);
  free(L.in);
  free(L.annots);
  return ok;
}

/* 'output' STRING '=' VAL */
static bool parse_output(parser *p) {
  int line = p->tok.line, col = p->tok.col;
  next(p);
  if (p->tok.kind != T_STRING) return expected(p, "an output name string after 'output'");
  if (table_find(&p->outputs, p->sbuf, p->slen)) {
    report(p, p->tok.line, p->tok.col, false, "output %.*s defined twice", (int)(p->tok.len > 60 ? 60 : p->tok.len),
           p->tok.start);
    return false;
  }
  entry *name = table_insert(p, &p->outputs, p->sbuf, p->slen, p->tok.line, p->tok.col);
  name->state = E_DEFINED;
  next(p);
  if (!expect_punct(p, '=', "after output name")) return false;
  if (p->tok.kind != T_VAL) return expected(p, "a value name after '='");
  ir_value *v = use_value(p);
  if (!v) return false;
  next(p);
  if (!expect_eol(p)) return false;
  ir_graph_add_output(p->g, name->name, v);
  record_at(p, &p->output_at, &p->cap_output_at, p->g->n_outputs - 1, line, col);
  return true;
}

/* The token names an op that has no results (a line "send %x {...} loc L:C"). */
static bool op_without_results(parser *p) {
  char name[32];
  if (p->tok.len >= sizeof name) return false;
  memcpy(name, p->tok.start, p->tok.len);
  name[p->tok.len] = 0;
  int op = ir_op_from_name(name);
  return op >= 0 && ir_op_num_outputs((ir_op)op) == 0;
}

/* line := input | param | node | output; on failure the line's values are poisoned. */
static void parse_line(parser *p) {
  p->n_pending = 0;
  bool ok;
  if (is_word(p, "input")) ok = parse_decl(p, false);
  else if (is_word(p, "param")) ok = parse_decl(p, true);
  else if (is_word(p, "output")) ok = parse_output(p);
  else if (p->tok.kind == T_VAL || (p->tok.kind == T_IDENT && op_without_results(p))) ok = parse_node(p);
  else ok = expected(p, "'input', 'param', 'output', a value or 'end'");
  for (int k = 0; k < p->n_pending; k++) p->pending[k]->state = ok ? E_DEFINED : E_POISONED;
  if (!ok) skip_line(p);
}

/* mesh := 'mesh' (AXIS '=' INT (',' AXIS '=' INT)*)? 'sp'? ('stage' INT)? NL */
static bool parse_mesh(parser *p) {
  ir_mesh *m = &p->g->mesh;
  unsigned used = 0;
  next(p);
  while (p->tok.kind == T_IDENT && !is_word(p, "sp") && !is_word(p, "stage")) {
    unsigned one = 0;
    int64_t size;
    if (!parse_axis(p, &one, &used, "a mesh axis (pp, dp, tp)")) return false;
    if (!expect_punct(p, '=', "after a mesh axis")) return false;
    if (!parse_int(p, 2, 4096, "an axis size", "a mesh axis size must be between 2 and 4096", &size)) return false;
    m->size[__builtin_ctz(one)] = (int)size;
    if (!is_punct(p, ',')) break;
    next(p);
    if (p->tok.kind != T_IDENT || is_word(p, "sp") || is_word(p, "stage")) return expected(p, "a mesh axis after ','");
  }
  if (is_word(p, "sp")) {
    if (m->size[IR_AXIS_TP] < 2) {
      report(p, p->tok.line, p->tok.col, false, "'sp' (sequence parallelism) needs a tp axis");
      return false;
    }
    m->sp = true;
    next(p);
  }
  if (is_word(p, "stage")) {
    next(p);
    int64_t st;
    if (!parse_int(p, 0, m->size[IR_AXIS_PP] - 1, "a stage number", "the stage must be below the pp size", &st)) return false;
    m->stage = (int)st;
  }
  return expect_eol(p);
}

/* module := 'tgc.ir' INT NL 'graph' '@' NAME ('file' STRING)? NL line* 'end' NL */
static void parse_module(parser *p) {
  next(p);
  skip_blank_lines(p);
  if (!is_word(p, "tgc.ir")) {
    expected(p, "'tgc.ir' header");
    return;
  }
  next(p);
  if (p->tok.kind != T_INT) {
    expected(p, "a version number after 'tgc.ir'");
    return;
  }
  if (p->tok.i != 1) {
    report(p, p->tok.line, p->tok.col, false, "unsupported IR version %lld (this reader knows version 1)",
           (long long)p->tok.i);
    return;
  }
  next(p);
  if (!expect_eol(p)) return;
  skip_blank_lines(p);
  if (!is_word(p, "graph")) {
    expected(p, "'graph'");
    return;
  }
  next(p);
  if (p->tok.kind != T_AT) {
    expected(p, "a graph name '@NAME' after 'graph'");
    return;
  }
  char *name = tok_dup(p, p->scratch, 1);
  char *file = NULL;
  next(p);
  if (is_word(p, "file")) {
    next(p);
    if (p->tok.kind != T_STRING) {
      expected(p, "a string after 'file'");
      return;
    }
    file = ir_arena_strndup(p->scratch, p->sbuf, p->slen);
    next(p);
  }
  if (!expect_eol(p)) return;
  p->g = ir_graph_new(name, file); /* copies both into the graph arena */
  skip_blank_lines(p);
  if (is_word(p, "mesh") && !parse_mesh(p)) return;
  for (;;) {
    skip_blank_lines(p);
    if (p->tok.kind == T_EOF) {
      if (!p->last_error_at_eof || !p->errors)
        report(p, p->tok.line, p->tok.col, true, "missing 'end'");
      return;
    }
    if (p->tok.kind == T_ERROR) {
      skip_line(p);
      continue;
    }
    if (is_word(p, "end")) break;
    parse_line(p);
  }
  next(p);
  for (;;) {
    skip_blank_lines(p);
    if (p->tok.kind == T_EOF || p->tok.kind == T_ERROR) return;
    char buf[64];
    report(p, p->tok.line, p->tok.col, false, "unexpected %s after 'end'", describe(&p->tok, buf, sizeof buf));
    return;
  }
}

static ir_graph *parse_text(const char *path, const char *text, size_t len, ir_diag *d, bool verify) {
  parser p = {0};
  p.record = verify;
  p.path = path;
  p.text = text ? text : "";
  p.len = text ? len : 0;
  p.line = 1;
  p.col = 1;
  p.d = d;
  p.scratch = ir_arena_new();
  ir_diag_add_source(d, path, p.text, p.len);
  parse_module(&p);
  free(p.sbuf);
  free(p.values.slots);
  free(p.outputs.slots);
  free(p.pending);
  ir_arena_free(p.scratch);
  if (!p.errors && verify) {
    ir_verify_locs at = {p.node_at, p.value_at, p.output_at};
    p.errors = ir_verify_at(p.g, &at, d);
  }
  free(p.node_at);
  free(p.value_at);
  free(p.output_at);
  if (p.errors && p.g) {
    ir_graph_free(p.g);
    p.g = NULL;
  }
  return p.errors ? NULL : p.g;
}

ir_graph *ir_parse(const char *path, const char *text, size_t len, ir_diag *d) {
  return parse_text(path, text, len, d, false);
}

ir_graph *ir_read(const char *path, const char *text, size_t len, ir_diag *d) {
  return parse_text(path, text, len, d, true);
}
