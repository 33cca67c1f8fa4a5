/* frontend/ast.h — the syntax tree of a .tg file and the parser context.
 *
 * The parser (parser.y) builds the tree with the fe_ast_* constructors below,
 * one call per grammar action; the tree carries no meaning beyond the
 * syntax: names are resolved, constants evaluated and types checked by
 * sema.c. Every node records where its source text starts (line:col) and
 * its byte range, so messages can point at it and quote it.
 *
 * Memory: every node lives in the parser's arena (P->arena), freed by the
 * caller of fe_parse in one go.
 *
 * Nesting limit: each constructor computes the node's depth; a tree deeper
 * than FE_MAX_NESTING is reported once ("nested too deeply") so that the
 * recursive walks in sema can never exhaust the C stack.
 */
#ifndef TGC_FE_AST_H
#define TGC_FE_AST_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

#define FE_MAX_NESTING 200
/* Statements executed after unrolling and inlining (sema); a file with more
 * statements than that can never compile, so the parser stops there too
 * (a 48 MB file of 6 million statements held 2.7 GB of syntax tree). */
#define FE_MAX_STMTS 5000000L

/* A source span: Bison's location type (api.location.type). */
typedef struct fe_span {
  int first_line, first_column;
  int last_line, last_column;
  int start, end; /* byte offsets [start, end) into the source text */
} fe_span;

typedef enum {
  /* expressions */
  AST_INT,     /* integer literal: ival */
  AST_FLOAT,   /* float literal: fval */
  AST_STR,     /* string literal: name = contents (escapes resolved) */
  AST_NAME,    /* identifier: name */
  AST_UNARY,   /* op kid[0]; op is IR_OP_NEG or IR_OP_NOT */
  AST_BINARY,  /* kid[0] op kid[1]; op is an ir_op (ADD ... OR, MATMUL, POW) */
  AST_CALL,    /* name(kid[0..n)); keyword arguments are AST_KWARG kids */
  AST_KWARG,   /* name = kid[0] (only inside a call) */
  AST_LISTLIT, /* [kid, ...] */
  /* declarations and types */
  AST_TYPE,    /* name = dtype text; kid[0] = AST_LIST of dim exprs or NULL (scalar) */
  AST_ARG,     /* name : kid[0] (an AST_TYPE) — fn argument or named result */
  /* statements */
  AST_ASSIGN,  /* kid[0] = AST_LIST of AST_NAME targets, kid[1] = expr */
  AST_PARAM,   /* param name : kid[0] (type) = kid[1] (init expr or NULL) */
  AST_REPEAT,  /* repeat name in kid[0]..kid[1] {kid[2]}; name NULL and kid[0] NULL for `repeat N` */
  AST_RETURN,  /* return kid[0] (an AST_LIST of exprs) */
  /* items */
  AST_CONFIG,  /* config name { kid[0] = AST_LIST of AST_LET } */
  AST_LET,     /* let name = kid[0] (also a config entry) */
  AST_FN,      /* fn name(kid[0] = AST_LIST of AST_ARG) -> kid[1] { kid[2] = AST_LIST of stmts };
                  kid[1] is NULL, an AST_TYPE, or an AST_LIST of AST_ARG / AST_TYPE */
  AST_LIST     /* a plain list: kid[0..n) */
} ast_kind;

typedef struct ast ast;
struct ast {
  ast_kind kind;
  int op;            /* AST_UNARY / AST_BINARY: an ir_op */
  const char *name;  /* identifier, string contents, dtype text */
  union {
    int64_t ival;    /* AST_INT */
    double fval;     /* AST_FLOAT */
  };
  int line, col;     /* where the node's text starts (1-based) */
  int start, end;    /* byte range of the node's text */
  int depth;         /* 1 + the deepest child */
  int n, cap;
  ast **kid;
};

/* The parser context: shared by the lexer (as yyextra) and the parser. */
typedef struct fe_parser {
  ir_arena *arena;
  ir_diag *d;
  const char *path;
  const char *text;
  size_t len;
  /* lexer position of the next character */
  int line, col, off;
  ast *items;          /* AST_LIST of items, set when parsing succeeds */
  int errors;          /* lexical, syntax and nesting errors reported */
  bool lex_error;      /* the current token is a lexer error (already reported) */
  bool depth_reported; /* the nesting limit was reported */
  long n_stmts;        /* statements parsed */
  bool stop;           /* a limit was reported: the lexer ends the parse */
} fe_parser;

/* Parses P->text. Returns the item list, or NULL after reporting errors
 * through P->d. P->arena, d, path, text and len must be set. */
ast *fe_parse(fe_parser *P);

/* Lexer support (ast.c): sets *loc to the span of the token text and moves
 * the position past it; reports a lexical error at the token. */
void fe_lex_advance(fe_parser *P, fe_span *loc, const char *text, int len);
void fe_lex_error(fe_parser *P, const fe_span *loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
char *fe_lex_string(fe_parser *P, const char *text, int len); /* unescapes "..." */
bool fe_lex_follows_operand(const fe_parser *P, const fe_span *loc);

/* Constructors: one per grammar action. */
ast *fe_ast_int(fe_parser *P, int64_t v, fe_span loc);
ast *fe_ast_float(fe_parser *P, double v, fe_span loc);
ast *fe_ast_str(fe_parser *P, const char *s, fe_span loc);
ast *fe_ast_name(fe_parser *P, const char *name, fe_span loc);
ast *fe_ast_unary(fe_parser *P, int op, ast *x, fe_span loc);
ast *fe_ast_binary(fe_parser *P, int op, ast *a, ast *b, fe_span loc);
ast *fe_ast_call(fe_parser *P, const char *name, ast *args, fe_span loc);
ast *fe_ast_kwarg(fe_parser *P, const char *name, ast *value, fe_span loc);
ast *fe_ast_listlit(fe_parser *P, ast *items, fe_span loc);
ast *fe_ast_type(fe_parser *P, const char *dtype, ast *dims, fe_span loc);
ast *fe_ast_arg(fe_parser *P, const char *name, ast *type, fe_span loc);
ast *fe_ast_assign(fe_parser *P, ast *targets, ast *value, fe_span loc);
ast *fe_ast_targets(fe_parser *P, ast *list, const char *name, fe_span loc);
ast *fe_ast_param(fe_parser *P, const char *name, ast *type, ast *init, fe_span loc);
ast *fe_ast_repeat(fe_parser *P, const char *var, ast *lo, ast *hi, ast *body, fe_span loc);
ast *fe_ast_return(fe_parser *P, ast *values, fe_span loc);
ast *fe_ast_config(fe_parser *P, const char *name, ast *entries, fe_span loc);
ast *fe_ast_let(fe_parser *P, const char *name, ast *value, fe_span loc);
ast *fe_ast_fn(fe_parser *P, const char *name, ast *args, ast *ret, ast *body, fe_span loc);
ast *fe_ast_list(fe_parser *P, fe_span loc);
/* Appends x (when not NULL) to list and returns list. */
ast *fe_ast_append(fe_parser *P, ast *list, ast *x);
/* Records that the whole file parsed. */
ast *fe_ast_program(fe_parser *P, ast *items);

#endif
