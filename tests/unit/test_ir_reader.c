/* tests/unit/test_ir_reader.c — ir_parse on malformed input.
 *
 * A table of broken modules, each with the exact first diagnostic it must
 * produce ("line:col: message"), checks that the reader's messages and
 * locations stay precise. Then robustness: every prefix of a valid module
 * (copied into a buffer of exactly that size, so ASan catches any read past
 * len) must parse without crashing and fail with at least one error unless
 * it is complete; a few thousand deterministic byte mutations must never
 * crash, and whatever they parse must round-trip through the printer.
 * Error recovery is checked too: independent errors on several lines are
 * all reported, while uses of a value whose definition failed are not.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir.h"

#define H "tgc.ir 1\ngraph @g\n"
#define X "  input %x : f32[] loc 1:1\n"

typedef struct {
  const char *text;
  const char *first_error; /* "line:col: message" */
} bad_case;

static const bad_case cases[] = {
    {"", "1:1: expected 'tgc.ir' header, got end of file"},
    {"tgc.ir 2\ngraph @g\nend\n", "1:8: unsupported IR version 2 (this reader knows version 1)"},
    {"tgc.ir\n", "1:7: expected a version number after 'tgc.ir', got end of line"},
    {"tgc.ir 1\ngraf @g\nend\n", "2:1: expected 'graph', got 'graf'"},
    {"tgc.ir 1\ngraph g\nend\n", "2:7: expected a graph name '@NAME' after 'graph', got 'g'"},
    {"tgc.ir 1\ngraph @\nend\n", "2:7: expected graph name after '@'"},
    {"tgc.ir 1\ngraph @g file \"abc\nend\n", "2:15: unterminated string"},
    {"tgc.ir 1\ngraph @g file x.tg\nend\n", "2:15: expected a string after 'file', got 'x.tg'"},
    {H "  input %x = f32[] loc 1:1\nend\n", "3:12: expected ':' after value name, got '='"},
    {H "  input x : f32[] loc 1:1\nend\n", "3:9: expected a value name after 'input', got 'x'"},
    {H "  input % : f32[] loc 1:1\nend\n", "3:9: expected value name after '%'"},
    {H "  input %x : f31[] loc 1:1\nend\n", "3:14: unknown dtype 'f31'"},
    {H "  input %x : f32 loc 1:1\nend\n", "3:18: expected '[' after dtype, got 'loc'"},
    {H "  input %x : f32[2, -1] loc 1:1\nend\n", "3:21: dims must be non-negative"},
    {H "  input %x : f32[99999999999999999999] loc 1:1\nend\n", "3:18: bad integer '99999999999999999999'"},
    {H "  input %x : f32[2 3] loc 1:1\nend\n", "3:20: expected ',' or ']' in shape, got '3'"},
    {H "  input %x : f32[1, 1, 1, 1, 1, 1, 1, 1, 1] loc 1:1\nend\n", "3:42: too many dims (max 8)"},
    {H "  input %x : f32[1000000, 1000000, 1000] loc 1:1\nend\n", "3:36: tensor has more than 2^48 elements"},
    {H X "  input %x : f32[] loc 1:1\nend\n", "4:9: value '%x' defined twice"},
    {H X "  %y = addd %x, %x : f32[] loc 1:1\nend\n", "4:8: unknown op 'addd'"},
    {H "  %y = neg %x : f32[] loc 1:1\nend\n", "3:12: use of undefined value '%x'"},
    {H X "  %y = neg %y : f32[] loc 1:1\nend\n", "4:12: use of undefined value '%y'"},
    {H "  output \"y\" = %y\nend\n", "3:16: use of undefined value '%y'"},
    {H X, "3:27: missing 'end'"},
    {H X "end\nfoo\n", "5:1: unexpected 'foo' after 'end'"},
    {H "  input %x : f32[] role boss loc 1:1\nend\n", "3:25: unknown role 'boss'"},
    {H "  input %x : f32[4] shard [dp, tp] loc 1:1\nend\n", "3:27: shard has 2 entries but the type has rank 1"},
    {H "  input %x : f32[4] shard [0] loc 1:1\nend\n", "3:28: expected a mesh axis (pp, dp, tp), '(' or '-', got '0'"},
    {H "  input %x : f32[4] shard [xp] loc 1:1\nend\n", "3:28: unknown mesh axis 'xp' (axes: pp, dp, tp)"},
    {H "  input %x : f32[4, 4] shard [dp, dp] loc 1:1\nend\n", "3:35: mesh axis 'dp' given twice"},
    {H "  input %x : f32[4] shard [(tp, dp)] loc 1:1\nend\n", "3:33: mesh axes must be listed outermost first (pp, dp, tp)"},
    {H "  input %x : f32[4] partial loc 1:1\nend\n", "3:29: expected '(' and mesh axes after 'partial', got 'loc'"},
    {H "  mesh dp = 1\nend\n", "3:13: a mesh axis size must be between 2 and 4096"},
    {H "  mesh dp = 2,\nend\n", "3:15: expected a mesh axis after ',', got end of line"},
    {H "  mesh dp = 2 sp\nend\n", "3:15: 'sp' (sequence parallelism) needs a tp axis"},
    {H "  mesh pp = 2 stage 2\nend\n", "3:21: the stage must be below the pp size"},
    {H X "  %y = add %x : f32[] loc 1:1\nend\n", "4:8: op 'add' takes 2 operands, got 1"},
    {H X "  %y, %z = neg %x : f32[], f32[] loc 1:1\nend\n", "4:12: op 'neg' has 1 result, got 2"},
    {H "  %y = concat : f32[] loc 1:1\nend\n", "3:8: op 'concat' takes at least 1 operand, got 0"},
    {H X "  %y = neg %x {a = 1, a = 2} : f32[] loc 1:1\nend\n", "4:23: duplicate attribute 'a'"},
    {H X "  %y = neg %x {a = 1.2.3} : f32[] loc 1:1\nend\n", "4:20: bad number '1.2.3'"},
    {H X "  %y = neg %x {a = 1e999} : f32[] loc 1:1\nend\n", "4:20: float out of range '1e999'"},
    {H X "  %y = neg %x {a = f31} : f32[] loc 1:1\nend\n", "4:20: unknown dtype 'f31'"},
    {H X "  %y = neg %x {a = [1, 2.0]} : f32[] loc 1:1\nend\n", "4:24: expected an integer in list, got '2.0'"},
    {H X "  %y = neg %x {a = 1 b = 2} : f32[] loc 1:1\nend\n", "4:22: expected ',' or '}' in attributes, got 'b'"},
    {H X "  %y = neg %x {a = } : f32[] loc 1:1\nend\n", "4:20: expected an attribute value, got '}'"},
    {H X "  output \"a\\qb\" = %x\nend\n", "4:12: unknown escape '\\q' in string"},
    {H "  input %x : f32[] loc 1:1 $\nend\n", "3:28: unexpected character '$'"},
    {H "  input %x : f32[] loc 1:1 extra\nend\n", "3:28: expected end of line, got 'extra'"},
    {H "  input %x : f32[]\nend\n", "3:19: expected 'loc', got end of line"},
    {H "  input %x : f32[] loc 1:3000000000\nend\n", "3:26: loc numbers must be between 0 and 2147483647"},
    {H X "  %y = neg %x : f32[] loc 1:1 layer -1\nend\n", "4:37: layer must be non-negative"},
    {H X "  %a, %b = split %x {axis = 0, sizes = [1, 1]} : f32[1] loc 1:1\nend\n", "4:48: 2 results but 1 type"},
    {H "  param %w : f32[] init gaussian(1.0) loc 1:1\nend\n",
     "3:25: expected 'zeros', 'ones', 'normal' or 'uniform' after 'init', got 'gaussian'"},
    {H "  param %w : f32[] init normal(1.0 loc 1:1\nend\n", "3:36: expected ')' after init arguments, got 'loc'"},
    {H X "  output \"y\" = %x\n  output \"y\" = %x\nend\n", "5:10: output \"y\" defined twice"},
    {H "  banana\nend\n", "3:3: expected 'input', 'param', 'output', a value or 'end', got 'banana'"},
    {H X "  %y = neg %x : f32[] loc 1:1\n  %y, %z = split %x {axis = 0, sizes = [1]} : f32[], f32[] loc 1:1\nend\n",
     "5:3: value '%y' defined twice"},
};

/* The first line the diagnostics printed for text, "" if none. */
static char *first_error(const char *text, size_t len, int *n_errors, ir_graph **out) {
  char *buf = NULL;
  size_t blen = 0;
  FILE *f = open_memstream(&buf, &blen);
  ir_diag *d = ir_diag_new(f);
  ir_graph *g = ir_parse("t.ir", text, len, d);
  *n_errors = ir_diag_errors(d);
  ir_diag_free(d);
  fclose(f);
  if (out) *out = g;
  else ir_graph_free(g);
  char *nl = strchr(buf, '\n');
  if (nl) *nl = '\0';
  return buf;
}

static void test_table(void) {
  CHECK((int)(sizeof cases / sizeof *cases) >= 25);
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    int n;
    ir_graph *g;
    char *got = first_error(cases[k].text, strlen(cases[k].text), &n, &g);
    char want[512];
    /* "L:C: msg" -> "t.ir:L:C: error: msg" */
    const char *msg = strstr(cases[k].first_error, ": ");
    snprintf(want, sizeof want, "t.ir:%.*s: error: %s", (int)(msg - cases[k].first_error),
             cases[k].first_error, msg + 2);
    if (strcmp(got, want) != 0) fprintf(stderr, "case %zu:\n", k);
    CHECK_STR(got, want);
    CHECK(g == NULL);
    CHECK(n >= 1);
    ir_graph_free(g);
    free(got);
  }
}

static const char *valid =
    "# a module using every construct\n"
    "tgc.ir 1\n"
    "graph @m.1 file \"a \\\"b\\\".tg\"\n"
    "  mesh pp = 2, dp = 2, tp = 2 sp stage 1\n"
    "  input %x : f32[2, 3] shard [(pp, dp), -] partial(tp) loc 1:2\n"
    "  input %ids : i32[2] loc 1:9\n"
    "  param %w.0 : f32[3, 3] init uniform(-0.5, 0.5) loc 2:1\n"
    "  param %b : f32[3] init normal(0.02) loc 3:1\n"
    "  param %c : f32[3] init ones loc 3:1\n"
    "  %0 = const {value = -inf} : f32[] loc 0:0\n"
    "  %h = matmul %x, %w.0 : f32[2, 3] role grad loc 4:5 layer 12\n"
    "  %t = transpose %h {perm = [1, 0]} : f32[3, 2] loc 5:1\n"
    "  %s1, %s2 = split %t {axis = 0, sizes = [1, 2]} : f32[1, 2], f32[2, 2] loc 6:1\n"
    "  %q = cast %s1 {to = bf16} : bf16[1, 2] loc 7:1\n"
    "  %e = einsum %h, %h {eq = \"ij,ij->\"} : f32[] loc 8:1\n"
    "  %r = reduce_sum %h {axes = [], keepdims = 0} : f32[2, 3] loc 9:1\n"
    "  output \"y\" = %e\n"
    "  output \"z\" = %q\n"
    "end\n";

static void test_valid_and_prefixes(void) {
  size_t len = strlen(valid);
  int n;
  ir_graph *g;
  char *got = first_error(valid, len, &n, &g);
  CHECK_STR(got, "");
  CHECK(g != NULL);
  CHECK_EQ_INT(n, 0);
  if (g) {
    ir_diag *d = ir_diag_new(stderr);
    CHECK_EQ_INT(ir_verify(g, d), 0); /* the sample is a valid graph, too */
    ir_diag_free(d);
    ir_graph_free(g);
  }
  free(got);
  /* every prefix, in an exactly sized heap buffer */
  size_t end_pos = strstr(valid, "end\n") - valid + 3; /* "...end" is complete */
  for (size_t k = 0; k < len; k++) {
    char *buf = malloc(k ? k : 1);
    memcpy(buf, valid, k);
    char *e = first_error(buf, k, &n, &g);
    if (k >= end_pos) {
      CHECK(g != NULL);
      CHECK_EQ_INT(n, 0);
    } else {
      if (g != NULL || n < 1) fprintf(stderr, "prefix %zu accepted\n", k);
      CHECK(g == NULL && n >= 1);
    }
    ir_graph_free(g);
    free(e);
    free(buf);
  }
}

/* Parses text; when accepted, print -> parse -> print must be a fixed point. */
static void check_fixed_point(const char *text, size_t len) {
  FILE *sink = fopen("/dev/null", "w");
  ir_diag *d = ir_diag_new(sink);
  ir_graph *g = ir_parse("fuzz.ir", text, len, d);
  if (g) {
    char *t1 = ir_print_to_string(g);
    ir_graph *g2 = ir_parse("fuzz2.ir", t1, strlen(t1), d);
    CHECK(g2 != NULL);
    if (g2) {
      char *t2 = ir_print_to_string(g2);
      if (strcmp(t1, t2) != 0) fprintf(stderr, "not a fixed point:\n%s\n----\n%s\n", t1, t2);
      CHECK(strcmp(t1, t2) == 0);
      free(t2);
      ir_graph_free(g2);
    }
    free(t1);
    ir_graph_free(g);
  }
  ir_diag_free(d);
  fclose(sink);
}

static void test_mutations(void) {
  static const char alphabet[] = "%@\"\\#:,={}[]()-.e0123456789 \n\tabfilnrx\xff";
  size_t len = strlen(valid);
  unsigned state = 12345;
  int accepted = 0;
  for (int iter = 0; iter < 3000; iter++) {
    char *buf = malloc(len + 8);
    memcpy(buf, valid, len);
    size_t n = len;
    int edits = 1 + iter % 4;
    for (int k = 0; k < edits; k++) {
      state = state * 1103515245u + 12345u;
      size_t pos = (state >> 8) % n;
      state = state * 1103515245u + 12345u;
      char c = alphabet[(state >> 8) % (sizeof alphabet - 1)];
      switch (iter % 3) {
      case 0: buf[pos] = c; break;                                            /* replace */
      case 1: memmove(buf + pos, buf + pos + 1, n - pos - 1); n--; break;       /* delete */
      default: memmove(buf + pos + 1, buf + pos, n - pos); buf[pos] = c; n++; /* insert */
      }
      if (n < 2 || n > len + 4) break;
    }
    char *exact = malloc(n);
    memcpy(exact, buf, n);
    free(buf);
    check_fixed_point(exact, n);
    free(exact);
    accepted++;
  }
  CHECK_EQ_INT(accepted, 3000);
  check_fixed_point(valid, len);
}

/* Recovery: independent errors are all reported, cascades are not. */
static void test_recovery(void) {
  int n;
  const char *two = H "  input %x : f31[] loc 1:1\n  %y = neg %x : f32[] loc 1:1\n"
                      "  input %w : f32[-1] loc 1:1\n  output \"z\" = %y\n  output \"q\" = %nope\nend\n";
  char *e = first_error(two, strlen(two), &n, NULL);
  CHECK_STR(e, "t.ir:3:14: error: unknown dtype 'f31'");
  CHECK_EQ_INT(n, 3); /* f31, -1, %nope; not %x / %y */
  free(e);
  /* the note points at the first definition */
  const char *dup = H X "  input %x : f32[] loc 1:1\nend\n";
  char *buf = NULL;
  size_t blen = 0;
  FILE *f = open_memstream(&buf, &blen);
  ir_diag *d = ir_diag_new(f);
  ir_graph *g = ir_parse("t.ir", dup, strlen(dup), d);
  ir_diag_free(d);
  fclose(f);
  CHECK(g == NULL);
  CHECK(strstr(buf, "t.ir:3:9: note: '%x' was first defined here\n") != NULL);
  CHECK(strstr(buf, "    4 |   input %x : f32[] loc 1:1\n      |         ^\n") != NULL);
  free(buf);
  /* NUL bytes are errors, not terminators */
  const char nul[] = "tgc.ir 1\ngraph @g\n  output \"a\0b\" = %x\nend\n";
  e = first_error(nul, sizeof nul - 1, &n, NULL);
  CHECK_STR(e, "t.ir:3:12: error: NUL byte in string");
  free(e);
  const char nul2[] = "tgc.ir 1\ngraph @g\n\0\nend\n";
  e = first_error(nul2, sizeof nul2 - 1, &n, NULL);
  CHECK_STR(e, "t.ir:3:1: error: unexpected byte 0x00");
  free(e);
}

int main(void) {
  test_table();
  test_valid_and_prefixes();
  test_mutations();
  test_recovery();
  return check_done();
}
