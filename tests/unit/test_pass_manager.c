/* tests/unit/test_pass_manager.c — the pass table, the default pipeline,
 * (autodiff before canonicalize and checkpoint) and pass_run_pipeline's dumping
 * (text dumps stay parseable IR), timing and verify_each (a graph with a wrongly typed node fails, naming the pass).
 * Dumps and reports go to tmpfile()s and are read back.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pass.h"

static ir_loc L(int line) { return (ir_loc){NULL, line, 1}; }

/* y = exp(x) + exp(x) * 1, with a dead node: canonicalize has work to do. */
static ir_graph *sample_graph(void) {
  ir_graph *g = ir_graph_new("sample", NULL);
  ir_type t = {.dtype = IR_DT_F32, .rank = 2, .dims = {2, 3}};
  ir_type s = {.dtype = IR_DT_F32, .rank = 0};
  ir_value *x = ir_graph_add_input(g, "x", t, L(1));
  ir_value *a = ir_graph_build1(g, IR_OP_EXP, &x, 1, NULL, 0, "a", L(2));
  ir_value *b = ir_graph_build1(g, IR_OP_EXP, &x, 1, NULL, 0, "b", L(3));
  ir_attr one = ir_attr_float("value", 1.0);
  char err[256];
  ir_node *c = ir_graph_build(g, IR_OP_CONST, NULL, 0, &one, 1, &s, "one", L(4), err, sizeof err);
  ir_value *in[2] = {b, c ? c->out[0] : b};
  ir_value *m = ir_graph_build1(g, IR_OP_MUL, in, 2, NULL, 0, "m", L(5));
  ir_graph_build1(g, IR_OP_SIN, &x, 1, NULL, 0, "dead", L(6));
  ir_value *in2[2] = {a, m};
  ir_graph_add_output(g, "y", ir_graph_build1(g, IR_OP_ADD, in2, 2, NULL, 0, "y", L(7)));
  return g;
}

/* Whole contents of f from the start, malloc'd. */
static char *slurp(FILE *f) {
  fflush(f);
  long n = ftell(f);
  if (n < 0) return NULL;
  char *buf = calloc((size_t)n + 1, 1);
  if (!buf) return NULL;
  rewind(f);
  size_t got = fread(buf, 1, (size_t)n, f);
  buf[got] = 0;
  return buf;
}

static void test_table(void) {
  CHECK_EQ_INT(pass_lookup("canonicalize"), PASS_CANONICALIZE);
  CHECK_EQ_INT(pass_lookup("no-such-pass"), -1);
  CHECK_EQ_INT(pass_lookup(NULL), -1);
  CHECK_STR(pass_name(PASS_CANONICALIZE), "canonicalize");
  CHECK(strlen(pass_help(PASS_CANONICALIZE)) > 0);
  for (int p = 0; p < PASS_COUNT; p++) CHECK_EQ_INT(pass_lookup(pass_name((pass_id)p)), p);
  /* the pipeline holds each pass once; grad requests are expanded (autodiff)
   * before the graph is simplified (canonicalize) and checkpointed */
  int at[PASS_COUNT];
  for (int p = 0; p < PASS_COUNT; p++) at[p] = -1;
  for (int i = 0; i < pass_default_pipeline_len; i++) {
    pass_id p = pass_default_pipeline[i];
    CHECK((unsigned)p < PASS_COUNT && at[p] < 0);
    if ((unsigned)p < PASS_COUNT) at[p] = i;
  }
  CHECK(at[PASS_AUTODIFF] >= 0 && at[PASS_CANONICALIZE] > at[PASS_AUTODIFF]);
  CHECK(at[PASS_CHECKPOINT] > at[PASS_AUTODIFF]);
  /* fuse-transpose folds into the fused_matmul nodes fuse-elementwise makes */
  CHECK(at[PASS_FUSE_ELEMENTWISE] >= 0 && at[PASS_FUSE_TRANSPOSE] > at[PASS_FUSE_ELEMENTWISE]);
}

static void test_dump_text(const char *dump_after, bool expect_dump) {
  ir_graph *g = sample_graph();
  FILE *f = tmpfile();
  ir_diag *d = ir_diag_new(stderr);
  pass_options o = {.diag = d, .verify_each = true, .dump_after = dump_after, .dump_out = f};
  CHECK_EQ_INT(pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &o), 0);
  char *text = slurp(f);
  CHECK(text != NULL);
  if (text && expect_dump) {
    /* the dump starts with the first pass dumped (with "all": the first of
     * the pipeline); with "all" the last section is the final graph */
    bool all = strcmp(dump_after, "all") == 0;
    const char *first = pass_name(pass_default_pipeline[0]);
    const char *final = pass_name(pass_default_pipeline[pass_default_pipeline_len - 1]);
    char head[64], tail[64];
    snprintf(head, sizeof head, "# IR after %s\n", all ? first : dump_after);
    snprintf(tail, sizeof tail, "# IR after %s\n", final);
    CHECK(strncmp(text, head, strlen(head)) == 0);
    const char *last = text;
    for (const char *p = text; (p = strstr(p, "# IR after ")); p++) last = p;
    const char *body = strchr(last, '\n');
    body = body ? body + 1 : last;
    if (all) {
      CHECK(strstr(text, "# IR after autodiff\n") != NULL);
      CHECK(strstr(text, "# IR after canonicalize\n") != NULL);
      CHECK(strncmp(last, tail, strlen(tail)) == 0);
    }
    char *printed = ir_print_to_string(g);
    if (all || strcmp(dump_after, final) == 0) CHECK(printed && strcmp(body, printed) == 0);
    /* the dump section, comment included, parses back to the same graph */
    ir_graph *back = ir_parse("dump.ir", last, strlen(last), d);
    CHECK(back != NULL);
    if (back) {
      char *again = ir_print_to_string(back);
      CHECK(again && strcmp(again, body) == 0);
      free(again);
      ir_graph_free(back);
    }
    free(printed);
  } else if (text) {
    CHECK_STR(text, "");
  }
  /* b*1 -> b, exp(x) twice -> once, sin dead: exp, add (fused or not) */
  CHECK(g->n_nodes >= 1 && g->n_nodes <= 2);
  free(text);
  fclose(f);
  CHECK_EQ_INT(ir_diag_errors(d), 0);
  ir_diag_free(d);
  ir_graph_free(g);
}

static void test_dump_formats(void) {
  for (int fmt = 1; fmt <= 2; fmt++) {
    ir_graph *g = sample_graph();
    FILE *f = tmpfile();
    pass_options o = {.dump_after = "all", .dump_out = f, .dump_format = fmt};
    CHECK_EQ_INT(pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &o), 0);
    char *text = slurp(f);
    CHECK(text && strlen(text) > 0);
    if (text && fmt == 2) CHECK(strchr(text, '{') != NULL);
    if (text && fmt == 1) {
      char head[64];
      snprintf(head, sizeof head, "// IR after %s", pass_name(pass_default_pipeline[0]));
      CHECK(strstr(text, head) == text);
      CHECK(strstr(text, "// IR after canonicalize") != NULL);
    }
    free(text);
    fclose(f);
    ir_graph_free(g);
  }
}

static void test_time_passes(void) {
  ir_graph *g = sample_graph();
  FILE *f = tmpfile();
  pass_options o = {.time_passes = true, .time_out = f};
  CHECK_EQ_INT(pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &o), 0);
  char *text = slurp(f);
  CHECK(text && strstr(text, "canonicalize") != NULL);
  CHECK(text && strstr(text, "total") != NULL);
  CHECK(text && strstr(text, "wall ms") != NULL);
  free(text);
  fclose(f);
  ir_graph_free(g);
}

/* A node whose declared result type is wrong survives the first pass of the
 * pipeline (no rule touches it) and verify_each reports it right after that
 * pass, naming the pass. */
static void test_verify_each_fails(void) {
  ir_graph *g = ir_graph_new("broken", NULL);
  ir_type t2 = {.dtype = IR_DT_F32, .rank = 1, .dims = {2}};
  ir_type t3 = {.dtype = IR_DT_F32, .rank = 1, .dims = {3}};
  ir_value *x = ir_graph_add_input(g, "x", t2, L(1));
  ir_value *in[2] = {x, x};
  ir_node *n = ir_graph_add_node(g, IR_OP_ADD, in, 2, &t3, 1, NULL, 0, NULL, L(2));
  ir_graph_add_output(g, "y", n->out[0]);
  FILE *errf = tmpfile();
  ir_diag *d = ir_diag_new(errf);
  pass_options o = {.diag = d, .verify_each = true};
  CHECK_EQ_INT(pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &o), -1);
  CHECK(ir_diag_errors(d) > 0);
  char *text = slurp(errf);
  char want[96];
  snprintf(want, sizeof want, "after pass '%s'", pass_name(pass_default_pipeline[0]));
  CHECK(text && strstr(text, want) != NULL);
  free(text);
  /* without verify_each the same pipeline succeeds */
  pass_options quiet = {.diag = d};
  CHECK_EQ_INT(pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, &quiet), 0);
  ir_diag_free(d);
  fclose(errf);
  ir_graph_free(g);
}

static void test_bad_pipeline(void) {
  ir_graph *g = sample_graph();
  FILE *errf = tmpfile();
  ir_diag *d = ir_diag_new(errf);
  pass_id bogus[1] = {(pass_id)PASS_COUNT};
  pass_options o = {.diag = d};
  CHECK_EQ_INT(pass_run_pipeline(g, bogus, 1, &o), -1);
  CHECK_EQ_INT(pass_run_pipeline(g, NULL, 0, &o), 0);
  CHECK_EQ_INT(pass_run_pipeline(g, pass_default_pipeline, pass_default_pipeline_len, NULL), 0);
  ir_diag_free(d);
  fclose(errf);
  ir_graph_free(g);
}

int main(void) {
  test_table();
  test_dump_text("canonicalize", true);
  test_dump_text("all", true);
  test_dump_text("autodiff", true);
  test_dump_text("no-such-pass", false);
  test_dump_text(NULL, false);
  test_dump_formats();
  test_time_passes();
  test_verify_each_fails();
  test_bad_pipeline();
  return check_done();
}
