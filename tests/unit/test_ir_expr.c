/* tests/unit/test_ir_expr.c — ir/expr.c: the sub-languages parsed once.
 *
 * Fused expressions: parse -> print gives the same text; the instructions
 * are in postfix order with the right kinds, ops, dtypes and literals;
 * every syntax error has its exact message; the builder and ir_expr_append
 * (the several-results join of fuse-elementwise) renumber operands and
 * results. Einsum equations: labels per term and output, and the syntax
 * errors. Attributes: a node built with an expr or eq carries the parsed
 * structure (in the graph's arena), a copied node a copy of it.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir.h"

static void roundtrip(const char *text, bool multi) {
  char err[200];
  ir_expr *e = ir_expr_parse(text, multi, err, sizeof err);
  CHECK(e != NULL);
  if (!e) {
    fprintf(stderr, "  %s: %s\n", text, err);
    return;
  }
  char *back = ir_expr_print(e);
  CHECK_STR(back, text);
  free(back);
  ir_expr_free(e);
}

static void parse_error(const char *text, bool multi, const char *want) {
  char err[200] = "";
  ir_expr *e = ir_expr_parse(text, multi, err, sizeof err);
  CHECK(e == NULL);
  CHECK_STR(err, want);
  ir_expr_free(e);
}

static void test_expr(void) {
  roundtrip("$0", false);
  roundtrip("(gelu (add $0 $1))", false);
  roundtrip("(sub $0 (mul (cast f32 $1) (div $2 (add (sqrt $3) (const f32 1e-08)))))", false);
  roundtrip("(where $0 $1 (neg $2))", false);
  roundtrip("(neg $0); (mul #0 $1); (add #1 #0)", true);

  char err[200];
  ir_expr *e = ir_expr_parse("(mul (cast f64 $1) (const f64 0.5)); (exp #0)", true, err, sizeof err);
  CHECK(e && e->n_ins == 6 && e->n_results == 2);
  if (e) {
    /* $1, cast, const, mul | #0, exp */
    CHECK(e->ins[0].kind == IR_EXPR_OPERAND && e->ins[0].index == 1);
    CHECK(e->ins[1].kind == IR_EXPR_OP && e->ins[1].op == IR_OP_CAST && e->ins[1].dtype == IR_DT_F64 &&
          e->ins[1].arg[0] == 0 && e->ins[1].arg[1] == -1);
    CHECK(e->ins[2].kind == IR_EXPR_CONST && e->ins[2].dtype == IR_DT_F64 && e->ins[2].value == 0.5);
    CHECK(e->ins[3].op == IR_OP_MUL && e->ins[3].arg[0] == 1 && e->ins[3].arg[1] == 2);
    CHECK(e->ins[4].kind == IR_EXPR_RESULT && e->ins[4].index == 0);
    CHECK(e->ins[5].op == IR_OP_EXP && e->ins[5].arg[0] == 4);
    CHECK(e->results[0] == 3 && e->results[1] == 5);
  }
  ir_expr_free(e);

  /* dropout: p and stream in the instruction, (x, key, g) its arguments */
  roundtrip("(mul (dropout 0.10000000000000001 3 (add $0 $1) $2 (add (mul $3 (const i64 8)) $4)) $5)", false);
  e = ir_expr_parse("(dropout 0.25 7 $0 $1 $2)", false, err, sizeof err);
  CHECK(e && e->n_ins == 4);
  if (e) {
    CHECK(e->ins[3].kind == IR_EXPR_OP && e->ins[3].op == IR_OP_DROPOUT && e->ins[3].value == 0.25 &&
          e->ins[3].index == 7 && e->ins[3].arg[0] == 0 && e->ins[3].arg[1] == 1 && e->ins[3].arg[2] == 2);
    CHECK_EQ_INT(ir_expr_arity(&e->ins[3]), 3);
  }
  ir_expr_free(e);
  parse_error("(dropout 1 0 $0 $1 $2)", false, "bad expr at offset 10: expected dropout's p in (0, 1)");
  parse_error("(dropout 0.5 x $0 $1 $2)", false, "bad expr at offset 14: expected dropout's stream");
  parse_error("(dropout 0.5 0 $0 (neg $1) $2)", false, "bad expr at offset 18: expected dropout's key, an operand '$N'");

  parse_error("(add $0", false, "bad expr at offset 7: expected '$N', '#N', '%N' or '('");
  parse_error("(add $0 $1", false, "bad expr at offset 10: expected ')'");
  parse_error("(matmul $0 $1)", false, "expr uses 'matmul', which is not an elementwise op");
  parse_error("(neg $0); (mul #1 $0)", true, "expr 1 names #1, which is not an earlier result");
  parse_error("(neg $0); (neg $0)", false, "bad expr at offset 8: text after the expression");
  parse_error("$0;$0;$0;$0;$0;$0;$0;$0;$0", true, "expr has more than 8 results");
  parse_error("(const f99 1)", false, "bad expr at offset 10: expected a dtype name");
  parse_error("(const f32 x)", false, "bad expr at offset 12: expected a number");
  parse_error("$x", false, "bad expr at offset 1: expected an operand number after '$'");
  char deep[2000] = "";
  for (int i = 0; i < 201; i++) strcat(deep, "(neg ");
  strcat(deep, "$0");
  for (int i = 0; i < 201; i++) strcat(deep, ")");
  parse_error(deep, false, "bad expr at offset 1004: nested too deeply");

  /* the builder and the join of two expressions */
  ir_expr *f = ir_expr_parse("(mul $0 $1)", false, err, sizeof err);
  ir_expr *p = ir_expr_parse("(add $0 $1); (neg #0)", true, err, sizeof err);
  ir_expr_builder *b = ir_expr_builder_new();
  int fmap[2] = {2, 0}, pmap[2] = {-1, 1}; /* p's $0 is f's result */
  CHECK_EQ_INT(ir_expr_append(b, f, fmap, 0), 0);
  CHECK_EQ_INT(ir_expr_append(b, p, pmap, 1), 0);
  ir_expr *j = ir_expr_builder_finish(b);
  char *jt = j ? ir_expr_print(j) : NULL;
  CHECK_STR(jt, "(mul $2 $0); (add #0 $1); (neg #1)");
  free(jt);
  ir_expr_free(j);
  ir_expr_builder_free(b);
  ir_expr_free(f);
  ir_expr_free(p);

  /* the same join when f's result is read twice and by nothing else: it
   * stops being a result and p reads f's instruction itself, twice (one
   * instruction, not a copy), printed as the shared %0 */
  f = ir_expr_parse("(sigmoid $0)", false, err, sizeof err);
  p = ir_expr_parse("(mul $1 (sub $0 (mul $0 $0))); (neg #0)", true, err, sizeof err);
  b = ir_expr_builder_new();
  int fmap1[1] = {0}, pmap1[2] = {-1, 1};
  CHECK_EQ_INT(ir_expr_append(b, f, fmap1, 0), 0);
  CHECK_EQ_INT(ir_expr_append(b, p, pmap1, 1), 0);
  CHECK_EQ_INT(ir_expr_builder_unresult(b, 3), -1); /* no result 3 */
  CHECK_EQ_INT(ir_expr_builder_unresult(b, 0), 0);
  j = ir_expr_builder_finish(b);
  CHECK(j && j->n_results == 2 && j->n_ins == 8);
  if (j) {
    /* $0 sigmoid | $1 (mul sig sig) (sub sig .) mul | #0 neg: the three #0 reads gone, #1 now #0 */
    int sig = 1, reads = 0;
    for (int i = 0; i < j->n_ins; i++)
      for (int k = 0; k < 3; k++) reads += j->ins[i].kind == IR_EXPR_OP && j->ins[i].arg[k] == sig;
    CHECK_EQ_INT(reads, 3);
    CHECK(j->ins[6].kind == IR_EXPR_RESULT && j->ins[6].index == 0 && j->results[1] == 7);
  }
  jt = j ? ir_expr_print(j) : NULL;
  CHECK_STR(jt, "%0 = (sigmoid $0); (mul $1 (sub %0 (mul %0 %0))); (neg #0)");
  ir_expr *back = jt ? ir_expr_parse(jt, true, err, sizeof err) : NULL; /* the same instructions */
  CHECK(back && j && back->n_ins == j->n_ins && memcmp(back->ins, j->ins, sizeof *j->ins * (size_t)j->n_ins) == 0);
  ir_expr_free(back);
  free(jt);
  ir_expr_free(j);
  ir_expr_builder_free(b);
  ir_expr_free(f);
  ir_expr_free(p);
}

/* Shared subexpressions: %N = (...) items, computed once, read twice or more. */
static void test_shared(void) {
  roundtrip("%0 = (sigmoid $0); (mul (mul $1 $2) (mul %0 (add (const f32 1) (mul $0 (sub (const f32 1) %0)))))", true);
  roundtrip("%0 = (exp $0); %1 = (add %0 %0); (mul %1 %1)", true);
  roundtrip("(neg $0); %0 = (exp #0); (add %0 %0); (mul %0 #1)", true); /* a shared item between results */
  roundtrip("%0 = (exp $0); (add %0 %0)", false);                     /* fused_matmul's single expr too */
  char err[200];
  ir_expr *e = ir_expr_parse("%0 = (exp $0); (add %0 %0)", false, err, sizeof err);
  CHECK(e && e->n_ins == 3 && e->ins[2].arg[0] == 1 && e->ins[2].arg[1] == 1); /* one exp, read twice */
  ir_expr_free(e);
  parse_error("%1 = (exp $0); (add %1 %1)", true, "shared subexpression %1 out of order (%0 expected)");
  parse_error("%0 = (exp $0); (add %0 %1)", true, "expr names %1, which is not an earlier shared subexpression");
  parse_error("%0 = (exp $0); (neg %0)", true, "shared subexpression %0 is read 1 time (at least twice, or write it in place)");
  parse_error("%0 = (exp $0); (neg $0)", true, "shared subexpression %0 is read 0 times (at least twice, or write it in place)");
  parse_error("%0 (exp $0); (neg %0)", true, "bad expr at offset 3: expected '=' after a shared subexpression's number");
  parse_error("%0 = $0; (add %0 %0)", true, "bad expr at offset 5: expected '(' (a shared subexpression is an op)");
  parse_error("%0 = (exp $0)", true, "bad expr at offset 13: expected ';' after a shared subexpression");
  parse_error("%0 = (exp $0);", true, "bad expr at offset 14: expected '$N', '#N', '%N' or '('");
  parse_error("%x = (exp $0); $0", true, "bad expr at offset 1: expected a number after '%'");
}

static void einsum_error(const char *eq, const char *want) {
  char err[200] = "";
  ir_einsum *e = ir_einsum_parse(eq, err, sizeof err);
  CHECK(e == NULL);
  CHECK_STR(err, want);
  ir_einsum_free(e);
}

static void test_einsum(void) {
  char err[200];
  ir_einsum *e = ir_einsum_parse("bij,bjk->bik", err, sizeof err);
  CHECK(e && e->n_terms == 2 && e->out_len == 3);
  if (e) {
    CHECK(e->start[0] == 0 && e->start[1] == 3 && e->start[2] == 6);
    CHECK(e->labels[0] == ir_einsum_label('b') && e->labels[4] == ir_einsum_label('j'));
    CHECK(e->out[2] == ir_einsum_label('k'));
  }
  ir_einsum_free(e);
  e = ir_einsum_parse("ij->", err, sizeof err); /* a full sum: empty output */
  CHECK(e && e->n_terms == 1 && e->out_len == 0);
  ir_einsum_free(e);
  e = ir_einsum_parse(",->", err, sizeof err); /* two scalars */
  CHECK(e && e->n_terms == 2 && e->start[2] == 0);
  ir_einsum_free(e);
  CHECK_EQ_INT(ir_einsum_label('Z'), 51);
  CHECK_EQ_INT(ir_einsum_letter(27), 'B');
  einsum_error("ij,jk", "einsum equation \"ij,jk\" must have the explicit form \"ij,jk->ik\"");
  einsum_error("ij->j->i", "einsum equation \"ij->j->i\" must have the explicit form \"ij,jk->ik\"");
  einsum_error("i1->i", "einsum equation \"i1->i\" has an invalid character '1'");
  einsum_error("ij->k", "einsum output letter 'k' appears in no input of \"ij->k\"");
  einsum_error("ij->ii", "einsum output letter 'i' repeated in \"ij->ii\"");
}

static void test_attrs(void) {
  ir_graph *g = ir_graph_new("t", NULL);
  ir_type t = {.dtype = IR_DT_F32, .rank = 1, .dims = {4}};
  ir_value *x = ir_graph_add_input(g, "x", t, (ir_loc){0});
  ir_attr a = ir_attr_str("expr", "(neg $0)");
  ir_node *n = ir_graph_add_node(g, IR_OP_FUSED, &x, 1, &t, 1, &a, 1, NULL, (ir_loc){0});
  const ir_attr *na = ir_node_attr(n, "expr");
  CHECK(na && na->expr && na->expr->n_ins == 2 && na->expr->ins[1].op == IR_OP_NEG);
  CHECK_STR(na->s, "(neg $0)");
  /* a copy of the node carries a copy of the structure */
  ir_node *c = ir_graph_add_node(g, IR_OP_FUSED, &x, 1, &t, 1, n->attrs, n->n_attrs, NULL, (ir_loc){0});
  const ir_attr *ca = ir_node_attr(c, "expr");
  CHECK(ca->expr && ca->expr != na->expr && ca->expr->n_ins == 2);
  /* a malformed expr: no structure (the verifier reports it) */
  ir_attr bad = ir_attr_str("expr", "(neg $0");
  ir_node *nb = ir_graph_add_node(g, IR_OP_FUSED, &x, 1, &t, 1, &bad, 1, NULL, (ir_loc){0});
  CHECK(ir_node_attr(nb, "expr")->expr == NULL);
  /* einsum through ir_graph_build: parsed once, typed, kept */
  ir_type m = {.dtype = IR_DT_F32, .rank = 2, .dims = {2, 3}};
  ir_value *y = ir_graph_add_input(g, "y", m, (ir_loc){0});
  ir_attr eq = ir_attr_str("eq", "ij->ji");
  char err[200];
  ir_node *en = ir_graph_build(g, IR_OP_EINSUM, &y, 1, &eq, 1, NULL, "yt", (ir_loc){0}, err, sizeof err);
  CHECK(en && ir_node_attr(en, "eq")->einsum && en->out[0]->type.dims[0] == 3);
  ir_attr eq2 = ir_attr_str("eq", "ij->k");
  CHECK(ir_graph_build(g, IR_OP_EINSUM, &y, 1, &eq2, 1, NULL, NULL, (ir_loc){0}, err, sizeof err) == NULL);
  CHECK_STR(err, "einsum output letter 'k' appears in no input of \"ij->k\"");
  /* other attributes carry no structure, whatever their key */
  ir_attr other = ir_attr_str("expr", "(neg $0)");
  ir_node *rs = ir_graph_add_node(g, IR_OP_NEG, &x, 1, &t, 1, &other, 1, NULL, (ir_loc){0});
  CHECK(ir_node_attr(rs, "expr")->expr == NULL);
  ir_graph_free(g);
}

int main(void) {
  test_expr();
  test_shared();
  test_einsum();
  test_attrs();
  return check_done();
}
