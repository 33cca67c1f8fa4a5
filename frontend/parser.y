/* frontend/parser.y — the .tg grammar (pure Bison, locations).
 *
 * Each action is one fe_ast_* constructor call (or passes a child through);
 * all meaning lives in sema.c. Statements need no separators: no statement
 * can start with a token that could continue an expression, so `x = a`
 * followed by `y = b` on the next line parses without a `;`.
 *
 * Syntax errors are reported by yyreport_syntax_error as
 * "syntax error: unexpected X, expecting A or B" at the unexpected token;
 * the parser stops at the first one. A '[' right after an operand (`x[0]`)
 * is reported as indexing, which the language does not have, and `let`,
 * `for`, `while`, `if` in a function as what to write instead
 * (report_foreign_statement). `a % b` is the
 * call of the builtin "%" (integer constants; builtins.c). A LEXERROR token was already reported
 * by the lexer and produces no second message. Bison's stack overflow
 * ("memory exhausted") can only come from pathological nesting and is
 * reported as such.
 */
%code requires {
#include "ast.h"
#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif
}

%code {
#define YYSTYPE FE_YYSTYPE
#define YYLTYPE FE_YYLTYPE
#include "lexer.h"
#include <string.h>

static void fe_yyerror(FE_YYLTYPE *loc, yyscan_t scanner, fe_parser *P, const char *msg);

#define YYLLOC_DEFAULT(Cur, Rhs, N)                                    \
  do {                                                                 \
    if (N) {                                                           \
      (Cur).first_line = YYRHSLOC(Rhs, 1).first_line;                  \
      (Cur).first_column = YYRHSLOC(Rhs, 1).first_column;              \
      (Cur).start = YYRHSLOC(Rhs, 1).start;                            \
      (Cur).last_line = YYRHSLOC(Rhs, N).last_line;                    \
      (Cur).last_column = YYRHSLOC(Rhs, N).last_column;                \
      (Cur).end = YYRHSLOC(Rhs, N).end;                                \
    } else {                                                           \
      (Cur).first_line = (Cur).last_line = YYRHSLOC(Rhs, 0).last_line; \
      (Cur).first_column = (Cur).last_column = YYRHSLOC(Rhs, 0).last_column; \
      (Cur).start = (Cur).end = YYRHSLOC(Rhs, 0).end;                  \
    }                                                                  \
  } while (0)
}

%define api.pure full
%define api.prefix {fe_yy}
%define api.location.type {fe_span}
%define parse.error custom
%define parse.lac full
%locations
%param {yyscan_t scanner}
%parse-param {fe_parser *P}
%initial-action { @$ = (fe_span){1, 1, 1, 1, 0, 0}; }

%union {
  int64_t ival;
  double fval;
  const char *str;
  ast *node;
}

%token <str> NAME "identifier"
%token <str> STRING "string"
%token <ival> INT "integer"
%token <fval> FLOAT "number"
%token CONFIG "'config'" LET "'let'" PARAM "'param'" FN "'fn'"
%token REPEAT "'repeat'" IN "'in'" RETURN "'return'"
%token ARROW "'->'" DOTDOT "'..'" POW "'**'"
%token EQ "'=='" NE "'!='" LE "'<='" GE "'>='" AND "'&&'" OR "'||'"
%token LEXERROR "lexical error"

%type <node> items item config_entries config_entry param_decl init_opt type dims
%type <node> fn_args arg_list arg ret ret_list ret_item stmts stmt targets
%type <node> expr call_args call_arg_list call_arg expr_list expr_list_opt

%left OR
%left AND
%nonassoc EQ NE '<' LE '>' GE
%left '+' '-'
%left '*' '/' '%' '@'
%precedence UNARY
%right POW

%%

program
  : items                                   { fe_ast_program(P, $1); }
  ;

items
  : %empty                                  { $$ = fe_ast_list(P, @$); }
  | items item                              { $$ = fe_ast_append(P, $1, $2); }
  | items ';'                               { $$ = $1; }
  ;

item
  : CONFIG NAME '{' config_entries '}'      { $$ = fe_ast_config(P, $2, $4, @2); }
  | LET NAME '=' expr                       { $$ = fe_ast_let(P, $2, $4, @2); }
  | param_decl                              { $$ = $1; }
  | FN NAME '(' fn_args ')' ret '{' stmts '}' { $$ = fe_ast_fn(P, $2, $4, $6, $8, @2); }
  ;

config_entries
  : %empty                                  { $$ = fe_ast_list(P, @$); }
  | config_entries config_entry             { $$ = fe_ast_append(P, $1, $2); }
  | config_entries ','                      { $$ = $1; }
  | config_entries ';'                      { $$ = $1; }
  ;

config_entry
  : NAME '=' expr                           { $$ = fe_ast_let(P, $1, $3, @1); }
  ;

param_decl
  : PARAM NAME ':' type init_opt            { $$ = fe_ast_param(P, $2, $4, $5, @2); }
  ;

init_opt
  : %empty                                  { $$ = NULL; }
  | '=' expr                                { $$ = $2; }
  ;

type
  : NAME                                    { $$ = fe_ast_type(P, $1, NULL, @1); }
  | NAME '[' dims ']'                       { $$ = fe_ast_type(P, $1, $3, @$); }
  ;

dims
  : expr_list_opt                           { $$ = $1; }
  ;

fn_args
  : %empty                                  { $$ = fe_ast_list(P, @$); }
  | arg_list                                { $$ = $1; }
  | arg_list ','                            { $$ = $1; }
  ;

arg_list
  : arg                                     { $$ = fe_ast_append(P, fe_ast_list(P, @1), $1); }
  | arg_list ',' arg                        { $$ = fe_ast_append(P, $1, $3); }
  ;

arg
  : NAME ':' type                           { $$ = fe_ast_arg(P, $1, $3, @1); }
  ;

ret
  : %empty                                  { $$ = NULL; }
  | ARROW type                              { $$ = $2; }
  | ARROW '(' ret_list ')'                  { $$ = $3; }
  ;

ret_list
  : ret_item                                { $$ = fe_ast_append(P, fe_ast_list(P, @1), $1); }
  | ret_list ',' ret_item                   { $$ = fe_ast_append(P, $1, $3); }
  ;

ret_item
  : arg                                     { $$ = $1; }
  | type                                    { $$ = $1; }
  ;

stmts
  : %empty                                  { $$ = fe_ast_list(P, @$); }
  | stmts stmt                              { $$ = fe_ast_append(P, $1, $2); }
  | stmts ';'                               { $$ = $1; }
  ;

stmt
  : targets '=' expr                        { $$ = fe_ast_assign(P, $1, $3, @1); }
  | param_decl                              { $$ = $1; }
  | REPEAT NAME IN expr DOTDOT expr '{' stmts '}' { $$ = fe_ast_repeat(P, $2, $4, $6, $8, @1); }
  | REPEAT expr '{' stmts '}'               { $$ = fe_ast_repeat(P, NULL, NULL, $2, $4, @1); }
  | RETURN expr_list                        { $$ = fe_ast_return(P, $2, @1); }
  ;

targets
  : NAME                                    { $$ = fe_ast_targets(P, NULL, $1, @1); }
  | targets ',' NAME                        { $$ = fe_ast_targets(P, $1, $3, @3); }
  ;

expr
  : INT                                     { $$ = fe_ast_int(P, $1, @1); }
  | FLOAT                                   { $$ = fe_ast_float(P, $1, @1); }
  | STRING                                  { $$ = fe_ast_str(P, $1, @1); }
  | NAME                                    { $$ = fe_ast_name(P, $1, @1); }
  | NAME '(' call_args ')'                  { $$ = fe_ast_call(P, $1, $3, @$); }
  | '(' expr ')'                            { $$ = $2; }
  | '[' expr_list_opt ']'                   { $$ = fe_ast_listlit(P, $2, @$); }
  | '-' expr %prec UNARY                    { $$ = fe_ast_unary(P, IR_OP_NEG, $2, @$); }
  | '!' expr %prec UNARY                    { $$ = fe_ast_unary(P, IR_OP_NOT, $2, @$); }
  | expr POW expr                           { $$ = fe_ast_binary(P, IR_OP_POW, $1, $3, @$); }
  | expr '*' expr                           { $$ = fe_ast_binary(P, IR_OP_MUL, $1, $3, @$); }
  | expr '/' expr                           { $$ = fe_ast_binary(P, IR_OP_DIV, $1, $3, @$); }
  | expr '%' expr                           { $$ = fe_ast_call(P, "%", fe_ast_append(P, fe_ast_append(P, fe_ast_list(P, @1), $1), $3), @$); }
  | expr '@' expr                           { $$ = fe_ast_binary(P, IR_OP_MATMUL, $1, $3, @$); }
  | expr '+' expr                           { $$ = fe_ast_binary(P, IR_OP_ADD, $1, $3, @$); }
  | expr '-' expr                           { $$ = fe_ast_binary(P, IR_OP_SUB, $1, $3, @$); }
  | expr EQ expr                            { $$ = fe_ast_binary(P, IR_OP_EQ, $1, $3, @$); }
  | expr NE expr                            { $$ = fe_ast_binary(P, IR_OP_NE, $1, $3, @$); }
  | expr '<' expr                           { $$ = fe_ast_binary(P, IR_OP_LT, $1, $3, @$); }
  | expr LE expr                            { $$ = fe_ast_binary(P, IR_OP_LE, $1, $3, @$); }
  | expr '>' expr                           { $$ = fe_ast_binary(P, IR_OP_GT, $1, $3, @$); }
  | expr GE expr                            { $$ = fe_ast_binary(P, IR_OP_GE, $1, $3, @$); }
  | expr AND expr                           { $$ = fe_ast_binary(P, IR_OP_AND, $1, $3, @$); }
  | expr OR expr                            { $$ = fe_ast_binary(P, IR_OP_OR, $1, $3, @$); }
  ;

call_args
  : %empty                                  { $$ = fe_ast_list(P, @$); }
  | call_arg_list                           { $$ = $1; }
  | call_arg_list ','                       { $$ = $1; }
  ;

call_arg_list
  : call_arg                                { $$ = fe_ast_append(P, fe_ast_list(P, @1), $1); }
  | call_arg_list ',' call_arg              { $$ = fe_ast_append(P, $1, $3); }
  ;

call_arg
  : expr                                    { $$ = $1; }
  | NAME '=' expr                           { $$ = fe_ast_kwarg(P, $1, $3, @1); }
  ;

expr_list
  : expr                                    { $$ = fe_ast_append(P, fe_ast_list(P, @1), $1); }
  | expr_list ',' expr                      { $$ = fe_ast_append(P, $1, $3); }
  ;

expr_list_opt
  : %empty                                  { $$ = fe_ast_list(P, @$); }
  | expr_list                               { $$ = $1; }
  | expr_list ','                           { $$ = $1; }
  ;

%%

static void fe_yyerror(FE_YYLTYPE *loc, yyscan_t scanner, fe_parser *P, const char *msg) {
  (void)scanner;
  P->errors++;
  if (strcmp(msg, "memory exhausted") == 0)
    ir_error(P->d, (ir_loc){P->path, loc->first_line, loc->first_column},
             "nested too deeply (parser stack exhausted)");
  else
    ir_error(P->d, (ir_loc){P->path, loc->first_line, loc->first_column}, "%s", msg);
}

static bool is_operator(yysymbol_kind_t k) {
  static const char *const ops[] = {"'+'", "'-'", "'*'", "'/'", "'%'", "'@'", "'**'", "'<'", "'>'",
                                    "'<='", "'>='", "'=='", "'!='", "'&&'", "'||'"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (strcmp(yysymbol_name(k), ops[i]) == 0) return true;
  return false;
}

static bool expects(const yysymbol_kind_t *exp, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(yysymbol_name(exp[i]), name) == 0) return true;
  return false;
}

/* Statements of other languages inside a function body, said in words that
 * name what the language offers: `let y = ...` (a top-level constant; in a
 * function a name is bound by `y = ...`), and `for`/`while`/`if`, which lex as
 * identifiers (they are no keywords, so a model may still use them as names):
 * such a word at a statement's start, followed by anything but '=' or ','.
 * The error points at the word. Returns whether it reported. */
static bool report_foreign_statement(fe_parser *P, const FE_YYLTYPE *loc, yysymbol_kind_t got,
                                     const yysymbol_kind_t *exp, int n) {
  if (got == YYSYMBOL_LET && expects(exp, n, "'repeat'")) {
    ir_error(P->d, (ir_loc){P->path, loc->first_line, loc->first_column},
             "'let' declares a constant at the top level of the file; inside a function bind a name "
             "with 'y = expr' (no 'let')");
    return true;
  }
  if (!expects(exp, n, "'='") || !expects(exp, n, "','")) return false; /* not after a statement's first name */
  size_t end = loc->start;
  while (end > 0 && (P->text[end - 1] == ' ' || P->text[end - 1] == '\t')) end--;
  size_t b = end;
  while (b > 0 && (P->text[b - 1] == '_' || (P->text[b - 1] >= 'a' && P->text[b - 1] <= 'z'))) b--;
  if (b > 0 && (P->text[b - 1] == '_' || (P->text[b - 1] >= '0' && P->text[b - 1] <= '9') ||
                (P->text[b - 1] >= 'A' && P->text[b - 1] <= 'Z')))
    return false; /* the end of a longer name */
  ir_loc at = {P->path, loc->first_line, loc->first_column - (int)(loc->start - b)};
  const char *w = P->text + b;
  size_t len = end - b;
  if ((len == 3 && memcmp(w, "for", 3) == 0) || (len == 5 && memcmp(w, "while", 5) == 0)) {
    ir_error(P->d, at, "'%.*s' loops are not in the language (a model is one straight-line graph); to repeat "
             "statements write 'repeat i in 0..N { ... }' or 'repeat N { ... }', unrolled when the model "
             "is compiled", (int)len, w);
    return true;
  }
  if (len == 2 && memcmp(w, "if", 2) == 0) {
    ir_error(P->d, at, "'if' is not in the language (a model is one straight-line graph); to choose "
             "elementwise between two tensors write where(cond, a, b)");
    return true;
  }
  return false;
}

/* "syntax error: unexpected X, expecting A or B or C". The binary operators
 * (allowed after any complete expression) are summarized as "an operator";
 * a list still longer than MAX_LISTED is left out. */
static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner, fe_parser *P) {
  (void)scanner;
  yysymbol_kind_t got = yypcontext_token(ctx);
  const FE_YYLTYPE *loc = yypcontext_location(ctx);
  P->errors++;
  if (got == YYSYMBOL_LEXERROR || P->lex_error) return 0; /* already reported */
  if (got == YYSYMBOL_YYEMPTY ? false : strcmp(yysymbol_name(got), "'['") == 0 && fe_lex_follows_operand(P, loc)) {
    ir_error(P->d, (ir_loc){P->path, loc->first_line, loc->first_column},
             "indexing with '[...]' is not in the language; for a part of a tensor write "
             "slice(x, axis=A, start=S, end=E)");
    return 0;
  }
  enum { MAX_LISTED = 10 };
  yysymbol_kind_t exp[YYNTOKENS];
  int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
  if (report_foreign_statement(P, loc, got, exp, n)) return 0;
  const char *names[YYNTOKENS];
  int m = 0, ops = 0;
  for (int i = 0; i < n; i++) ops += is_operator(exp[i]);
  bool summarize = ops >= 10, summarized = false;
  for (int i = 0; i < n; i++) {
    if (summarize && is_operator(exp[i])) {
      if (!summarized) names[m++] = "an operator";
      summarized = true;
      continue;
    }
    names[m++] = yysymbol_name(exp[i]);
  }
  char buf[512];
  int len = snprintf(buf, sizeof buf, "syntax error: unexpected %s",
                     got == YYSYMBOL_YYEMPTY ? "end of file" : yysymbol_name(got));
  if (m > 0 && m <= MAX_LISTED)
    for (int i = 0; i < m && len < (int)sizeof buf; i++)
      len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s", i ? " or " : ", expecting ", names[i]);
  ir_error(P->d, (ir_loc){P->path, loc->first_line, loc->first_column}, "%s", buf);
  return 0;
}
