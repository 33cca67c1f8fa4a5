/* frontend/ast.c — syntax tree constructors, lexer position tracking and the
 * fe_parse driver (reentrant Flex scanner + pure Bison parser).
 *
 * Constructors allocate from the parser arena and compute each node's depth;
 * the first node deeper than FE_MAX_NESTING is reported, which keeps every
 * later tree walk's recursion bounded (the caller runs no sema after a parse
 * error). Lists grow by doubling inside the arena.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ast.h"
#include "parser.h"
#define YYSTYPE FE_YYSTYPE
#define YYLTYPE FE_YYLTYPE
#include "lexer.h"

/* ---------------------------------------------------------------------- */
/* lexer support                                                           */
/* ---------------------------------------------------------------------- */

void fe_lex_advance(fe_parser *P, fe_span *loc, const char *text, int len) {
  loc->first_line = P->line;
  loc->first_column = P->col;
  loc->start = P->off;
  loc->last_line = P->line;
  loc->last_column = P->col;
  for (int i = 0; i < len; i++) {
    loc->last_line = P->line;
    loc->last_column = P->col;
    if (text[i] == '\n') {
      P->line++;
      P->col = 1;
    } else {
      P->col++;
    }
  }
  P->off += len;
  loc->end = P->off;
}

/* Whether the token at loc follows, on the same line, the end of an operand
 * (a name that is no keyword, a number, or ')'): there `//` is floor
 * division as the user meant it, and `x.T` or `x[0]` an attribute or index. */
bool fe_lex_follows_operand(const fe_parser *P, const fe_span *loc) {
  static const char *const keywords[] = {"config", "let", "param", "fn", "repeat", "in", "return"};
  size_t i = loc->start;
  while (i > 0 && (P->text[i - 1] == ' ' || P->text[i - 1] == '\t')) i--;
  if (i == 0) return false;
  char c = P->text[i - 1];
  if (c == ')') return true;
  if (!(c == '_' || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))) return false;
  size_t b = i;
  while (b > 0 && (P->text[b - 1] == '_' || P->text[b - 1] == '.' || (P->text[b - 1] >= '0' && P->text[b - 1] <= '9') ||
                   (P->text[b - 1] >= 'A' && P->text[b - 1] <= 'Z') || (P->text[b - 1] >= 'a' && P->text[b - 1] <= 'z')))
    b--;
  for (size_t k = 0; k < sizeof keywords / sizeof keywords[0]; k++)
    if (strlen(keywords[k]) == i - b && memcmp(P->text + b, keywords[k], i - b) == 0) return false;
  return true;
}

void fe_lex_error(fe_parser *P, const fe_span *loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_verror(P->d, (ir_loc){P->path, loc->first_line, loc->first_column}, fmt, ap);
  va_end(ap);
  P->errors++;
  P->lex_error = true;
}

char *fe_lex_string(fe_parser *P, const char *text, int len) {
  /* text includes both quotes */
  char *s = ir_arena_alloc(P->arena, (size_t)len);
  int n = 0;
  for (int i = 1; i < len - 1; i++) {
    char c = text[i];
    if (c == '\\' && i + 1 < len - 1) {
      c = text[++i];
      if (c == 'n') c = '\n';
      else if (c == 't') c = '\t';
    }
    s[n++] = c;
  }
  s[n] = 0;
  return s;
}

/* ---------------------------------------------------------------------- */
/* constructors                                                            */
/* ---------------------------------------------------------------------- */

static void check_depth(fe_parser *P, ast *n) {
  if (n->depth > FE_MAX_NESTING && !P->depth_reported) {
    P->depth_reported = true;
    P->errors++;
    ir_error(P->d, (ir_loc){P->path, n->line, n->col},
             "nested too deeply (more than %d levels of expressions and blocks)",
             FE_MAX_NESTING);
  }
}

static ast *node(fe_parser *P, ast_kind kind, fe_span loc) {
  ast *n = ir_arena_alloc(P->arena, sizeof *n);
  n->kind = kind;
  n->line = loc.first_line;
  n->col = loc.first_column;
  n->start = loc.start;
  n->end = loc.end;
  n->depth = 1;
  return n;
}

static void add_kid(fe_parser *P, ast *n, ast *k) {
  if (n->n == n->cap) {
    int cap = n->cap ? 2 * n->cap : 2; /* most nodes have 1 or 2 kids (16 bytes in the arena) */
    ast **kid = ir_arena_alloc(P->arena, (size_t)cap * sizeof *kid);
    if (n->n) memcpy(kid, n->kid, (size_t)n->n * sizeof *kid);
    n->kid = kid;
    n->cap = cap;
  }
  n->kid[n->n++] = k;
  if (k) {
    int d = k->depth + (n->kind == AST_LIST ? 0 : 1);
    if (d > n->depth) n->depth = d;
  }
}

static ast *node_kids(fe_parser *P, ast_kind kind, fe_span loc, int nk, ast *a, ast *b, ast *c) {
  ast *n = node(P, kind, loc);
  ast *ks[3] = {a, b, c};
  for (int i = 0; i < nk; i++) add_kid(P, n, ks[i]);
  check_depth(P, n);
  return n;
}

ast *fe_ast_int(fe_parser *P, int64_t v, fe_span loc) {
  ast *n = node(P, AST_INT, loc);
  n->ival = v;
  return n;
}

ast *fe_ast_float(fe_parser *P, double v, fe_span loc) {
  ast *n = node(P, AST_FLOAT, loc);
  n->fval = v;
  return n;
}

ast *fe_ast_str(fe_parser *P, const char *s, fe_span loc) {
  ast *n = node(P, AST_STR, loc);
  n->name = s;
  return n;
}

ast *fe_ast_name(fe_parser *P, const char *name, fe_span loc) {
  ast *n = node(P, AST_NAME, loc);
  n->name = name;
  return n;
}

ast *fe_ast_unary(fe_parser *P, int op, ast *x, fe_span loc) {
  ast *n = node_kids(P, AST_UNARY, loc, 1, x, NULL, NULL);
  n->op = op;
  return n;
}

/* A left-associated chain (x + x + ... + x) is not nesting: sema walks the
 * left spine of binary operators in a loop, so only right operands (and
 * what is under them) add depth. */
ast *fe_ast_binary(fe_parser *P, int op, ast *a, ast *b, fe_span loc) {
  ast *n = node(P, AST_BINARY, loc);
  add_kid(P, n, a);
  add_kid(P, n, b);
  if (a && a->kind == AST_BINARY) {
    int right = b ? b->depth + 1 : 1;
    n->depth = a->depth > right ? a->depth : right;
  }
  check_depth(P, n);
  n->op = op;
  return n;
}

ast *fe_ast_call(fe_parser *P, const char *name, ast *args, fe_span loc) {
  ast *n = node(P, AST_CALL, loc);
  n->name = name;
  for (int i = 0; args && i < args->n; i++) add_kid(P, n, args->kid[i]);
  check_depth(P, n);
  return n;
}

ast *fe_ast_kwarg(fe_parser *P, const char *name, ast *value, fe_span loc) {
  ast *n = node_kids(P, AST_KWARG, loc, 1, value, NULL, NULL);
  n->name = name;
  return n;
}

ast *fe_ast_listlit(fe_parser *P, ast *items, fe_span loc) {
  ast *n = node(P, AST_LISTLIT, loc);
  for (int i = 0; items && i < items->n; i++) add_kid(P, n, items->kid[i]);
  check_depth(P, n);
  return n;
}

ast *fe_ast_type(fe_parser *P, const char *dtype, ast *dims, fe_span loc) {
  ast *n = node_kids(P, AST_TYPE, loc, 1, dims, NULL, NULL);
  n->name = dtype;
  return n;
}

ast *fe_ast_arg(fe_parser *P, const char *name, ast *type, fe_span loc) {
  ast *n = node_kids(P, AST_ARG, loc, 1, type, NULL, NULL);
  n->name = name;
  return n;
}

/* Counts a statement; past FE_MAX_STMTS reports once and stops the parse. */
static ast *stmt(fe_parser *P, ast *n) {
  if (++P->n_stmts > FE_MAX_STMTS && !P->stop) {
    P->stop = true;
    P->errors++;
    P->lex_error = true; /* the parser's own error for the cut is not reported */
    ir_error(P->d, (ir_loc){P->path, n->line, n->col},
             "program too large: more than %ld statements after unrolling and inlining", FE_MAX_STMTS);
  }
  return n;
}

ast *fe_ast_assign(fe_parser *P, ast *targets, ast *value, fe_span loc) {
  return stmt(P, node_kids(P, AST_ASSIGN, loc, 2, targets, value, NULL));
}

ast *fe_ast_targets(fe_parser *P, ast *list, const char *name, fe_span loc) {
  if (!list) list = node(P, AST_LIST, loc);
  return fe_ast_append(P, list, fe_ast_name(P, name, loc));
}

ast *fe_ast_param(fe_parser *P, const char *name, ast *type, ast *init, fe_span loc) {
  ast *n = node_kids(P, AST_PARAM, loc, 2, type, init, NULL);
  n->name = name;
  return stmt(P, n);
}

ast *fe_ast_repeat(fe_parser *P, const char *var, ast *lo, ast *hi, ast *body, fe_span loc) {
  ast *n = node_kids(P, AST_REPEAT, loc, 3, lo, hi, body);
  n->name = var;
  return stmt(P, n);
}

ast *fe_ast_return(fe_parser *P, ast *values, fe_span loc) {
  return stmt(P, node_kids(P, AST_RETURN, loc, 1, values, NULL, NULL));
}

ast *fe_ast_config(fe_parser *P, const char *name, ast *entries, fe_span loc) {
  ast *n = node_kids(P, AST_CONFIG, loc, 1, entries, NULL, NULL);
  n->name = name;
  return n;
}

ast *fe_ast_let(fe_parser *P, const char *name, ast *value, fe_span loc) {
  ast *n = node_kids(P, AST_LET, loc, 1, value, NULL, NULL);
  n->name = name;
  return n;
}

ast *fe_ast_fn(fe_parser *P, const char *name, ast *args, ast *ret, ast *body, fe_span loc) {
  ast *n = node_kids(P, AST_FN, loc, 3, args, ret, body);
  n->name = name;
  return n;
}

ast *fe_ast_list(fe_parser *P, fe_span loc) {
  ast *n = node(P, AST_LIST, loc);
  n->depth = 0;
  return n;
}

ast *fe_ast_append(fe_parser *P, ast *list, ast *x) {
  if (x) {
    add_kid(P, list, x);
    check_depth(P, list);
  }
  return list;
}

ast *fe_ast_program(fe_parser *P, ast *items) {
  P->items = items;
  return items;
}

/* ---------------------------------------------------------------------- */
/* driver                                                                  */
/* ---------------------------------------------------------------------- */

int fe_yyparse(void *scanner, fe_parser *P);

ast *fe_parse(fe_parser *P) {
  P->line = 1;
  P->col = 1;
  P->off = 0;
  P->items = NULL;
  if (P->len > (size_t)INT_MAX / 2) {
    ir_error_plain(P->d, "%s: file too large", P->path);
    P->errors++;
    return NULL;
  }
  yyscan_t scanner;
  if (fe_yylex_init_extra(P, &scanner) != 0) {
    ir_error_plain(P->d, "%s: out of memory", P->path);
    P->errors++;
    return NULL;
  }
  YY_BUFFER_STATE buf = fe_yy_scan_bytes(P->text, (int)P->len, scanner);
  int rc = fe_yyparse(scanner, P);
  fe_yy_delete_buffer(buf, scanner);
  fe_yylex_destroy(scanner);
  if (rc != 0 || P->errors) return NULL;
  return P->items;
}
