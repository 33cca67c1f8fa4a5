/* ir/expr.c — the sub-languages inside attributes, parsed once into
 * structures every layer walks: the elementwise expressions of fused and
 * fused_matmul (attribute `expr`) and einsum equations (attribute `eq`).
 *
 * The text stays the attribute's printed form (ir_attr.s); the structure
 * (ir_attr.expr, ir_attr.einsum) is made from it when a node is built or
 * read (ir_graph_add_node) and copied with the node. Typing (ir/infer.c),
 * the cost model, the fusion passes, autodiff and the kernels read the
 * structure; nothing parses the text again.
 *
 * Expression grammar (s-expressions; every op keeps its dtype, so a kernel
 * rounds each intermediate as the unfused op would):
 *   expr   := '$' N            operand N
 *           | '#' N            result N of the same node (an earlier one)
 *           | '%' N            shared subexpression N (an earlier one)
 *           | '(' 'const' DTYPE NUMBER ')'
 *           | '(' 'cast' DTYPE expr ')'
 *           | '(' OP expr+ ')'   OP an elementwise op of ops.def, with its arity
 *           | '(' 'dropout' P STREAM expr '$' N expr ')'
 *                              dropout's training form (ops.def) of x (the
 *                              first expr) with probability P and stream
 *                              STREAM, the key the operand $N (i64[], read
 *                              as its 64 bits: an operand, never computed),
 *                              and the element's index in the unsharded
 *                              value g (an i64 expr: the fusion pass writes
 *                              sum_d pos_d * stride_d)
 *   exprs  := item (';' item)*   one expr per result (fused only; at most
 *                                IR_FUSED_MAX_RESULTS), the last item an expr
 *   item   := expr | '%' N '=' '(' ... ')'
 *                              a shared subexpression: computed once, read
 *                              as %N by the later items (at least twice),
 *                              not a result of the node; numbered 0, 1, ...
 *                              in order (fuse-elementwise writes one where a
 *                              joined expression read another one's value
 *                              twice and nothing else reads that value)
 * Parsed into a postfix list: every instruction after its arguments; a
 * shared subexpression is one instruction that several instructions name
 * as an argument, and the printer writes every op instruction named by two
 * or more as one (so parse(print(e)) has e's instructions).
 *
 * Einsum grammar: TERM (',' TERM)* '->' TERM, a TERM a string of letters
 * (a-z, A-Z), the output's letters distinct and each in some input term.
 */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

enum { EXPR_MAX_NODES = 4096, EXPR_MAX_DEPTH = 200, EXPR_MAX_SHARED = 64 };

/* ====================================================================== */
/* fused expressions                                                       */
/* ====================================================================== */

typedef struct {
  const char *s;
  size_t pos;
  ir_expr_inst *ins;
  int n, cap;
  int results[IR_FUSED_MAX_RESULTS];
  int n_results;
  int shared[EXPR_MAX_SHARED], shared_reads[EXPR_MAX_SHARED]; /* %N: its instruction, times read */
  int n_shared;
  char *err;
  size_t errlen;
  bool failed;
} eparser;

static int efail(eparser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int efail(eparser *p, const char *fmt, ...) {
  if (!p->failed && p->err && p->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
  }
  p->failed = true;
  return -1;
}

static int ebad(eparser *p, const char *what) { return efail(p, "bad expr at offset %zu: %s", p->pos, what); }

static void espace(eparser *p) {
  while (p->s[p->pos] == ' ') p->pos++;
}

/* A word (up to a space or a parenthesis) into buf; its length (0: none, or
 * too long to be a name or number of ours). */
static size_t eword(eparser *p, char *buf, size_t cap) {
  espace(p);
  size_t n = 0;
  while (p->s[p->pos] && p->s[p->pos] != ' ' && p->s[p->pos] != '(' && p->s[p->pos] != ')' && p->s[p->pos] != ';') {
    if (n + 1 < cap) buf[n] = p->s[p->pos];
    n++;
    p->pos++;
  }
  if (n >= cap) return 0;
  buf[n] = 0;
  return n;
}

static int edtype(eparser *p, ir_dtype *dt) {
  char w[32];
  int d = eword(p, w, sizeof w) ? ir_dtype_from_name(w) : -1;
  if (d < 0) return ebad(p, "expected a dtype name");
  *dt = (ir_dtype)d;
  return 0;
}

static int eadd(eparser *p, ir_expr_inst in) {
  if (p->n == EXPR_MAX_NODES) return ebad(p, "too many nodes");
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    ir_expr_inst *ni = realloc(p->ins, (size_t)cap * sizeof *ni);
    if (!ni) return efail(p, "out of memory");
    p->ins = ni;
    p->cap = cap;
  }
  p->ins[p->n] = in;
  return p->n++;
}

/* $N / #N: the number after the sigil; -1 after reporting. */
static long enumber(eparser *p, const char *what) {
  p->pos++;
  long idx = 0;
  int digits = 0;
  while (p->s[p->pos] >= '0' && p->s[p->pos] <= '9' && digits < 9) idx = idx * 10 + (p->s[p->pos++] - '0'), digits++;
  if (digits == 0) return ebad(p, what);
  return idx;
}

/* One expression; its instruction index, or -1 after reporting. */
static int eparse(eparser *p, int depth) {
  if (depth > EXPR_MAX_DEPTH) return ebad(p, "nested too deeply");
  espace(p);
  ir_expr_inst in = {.kind = IR_EXPR_OPERAND, .arg = {-1, -1, -1}};
  if (p->s[p->pos] == '$') {
    long idx = enumber(p, "expected an operand number after '$'");
    if (idx < 0) return -1;
    in.index = (int)idx;
    return eadd(p, in);
  }
  if (p->s[p->pos] == '#') { /* an earlier result of the same node */
    long idx = enumber(p, "expected a result number after '#'");
    if (idx < 0) return -1;
    if (idx >= p->n_results)
      return efail(p, "expr %d names #%ld, which is not an earlier result", p->n_results, idx);
    in.kind = IR_EXPR_RESULT;
    in.index = (int)idx;
    return eadd(p, in);
  }
  if (p->s[p->pos] == '%') { /* an earlier shared subexpression: its instruction, no new one */
    long idx = enumber(p, "expected a number after '%'");
    if (idx < 0) return -1;
    if (idx >= p->n_shared) return efail(p, "expr names %%%ld, which is not an earlier shared subexpression", idx);
    p->shared_reads[idx]++;
    return p->shared[idx];
  }
  if (p->s[p->pos] != '(') return ebad(p, "expected '$N', '#N', '%N' or '('");
  p->pos++;
  char w[32];
  if (!eword(p, w, sizeof w)) return ebad(p, "expected an op name");
  if (strcmp(w, "const") == 0) {
    char num[64];
    in.kind = IR_EXPR_CONST;
    in.op = IR_OP_CONST;
    if (edtype(p, &in.dtype) < 0) return -1;
    size_t len = eword(p, num, sizeof num);
    char *end = NULL;
    in.value = len ? strtod(num, &end) : 0;
    if (!len || !end || *end) return ebad(p, "expected a number");
  } else if (strcmp(w, "cast") == 0) {
    in.kind = IR_EXPR_OP;
    in.op = IR_OP_CAST;
    if (edtype(p, &in.dtype) < 0) return -1;
    if ((in.arg[0] = eparse(p, depth + 1)) < 0) return -1;
  } else if (strcmp(w, "dropout") == 0) {
    char num[64];
    char *end = NULL;
    in.kind = IR_EXPR_OP;
    in.op = IR_OP_DROPOUT;
    size_t len = eword(p, num, sizeof num);
    in.value = len ? strtod(num, &end) : 0;
    if (!len || !end || *end || !(in.value > 0 && in.value < 1)) return ebad(p, "expected dropout's p in (0, 1)");
    len = eword(p, num, sizeof num);
    long stream = len ? strtol(num, &end, 10) : -1;
    if (!len || !end || *end || stream < 0 || stream > 1000000000) return ebad(p, "expected dropout's stream");
    in.index = (int)stream;
    if ((in.arg[0] = eparse(p, depth + 1)) < 0) return -1;
    espace(p);
    if (p->s[p->pos] != '$') return ebad(p, "expected dropout's key, an operand '$N'");
    if ((in.arg[1] = eparse(p, depth + 1)) < 0) return -1;
    if ((in.arg[2] = eparse(p, depth + 1)) < 0) return -1;
  } else {
    int op = ir_op_from_name(w);
    if (op < 0 || op == IR_OP_CAST || !ir_op_is_elementwise((ir_op)op))
      return efail(p, "expr uses '%s', which is not an elementwise op", w);
    in.kind = IR_EXPR_OP;
    in.op = (ir_op)op;
    int n = ir_op_num_inputs((ir_op)op);
    for (int i = 0; i < n; i++)
      if ((in.arg[i] = eparse(p, depth + 1)) < 0) return -1;
  }
  espace(p);
  if (p->s[p->pos] != ')') return ebad(p, "expected ')'");
  p->pos++;
  return eadd(p, in);
}

/* One block: the header, the instructions and the result roots. */
static ir_expr *expr_pack(const ir_expr_inst *ins, int n, const int *results, int n_results, ir_arena *a) {
  size_t bytes = sizeof(ir_expr) + (size_t)n * sizeof *ins + (size_t)n_results * sizeof *results;
  ir_expr *e = a ? ir_arena_alloc(a, bytes) : calloc(1, bytes);
  if (!e) return NULL;
  ir_expr_inst *ci = (ir_expr_inst *)(e + 1);
  int *cr = (int *)(ci + n);
  memcpy(ci, ins, (size_t)n * sizeof *ins);
  memcpy(cr, results, (size_t)n_results * sizeof *results);
  e->n_ins = n;
  e->n_results = n_results;
  e->ins = ci;
  e->results = cr;
  return e;
}

/* '%' N '=' '(' ... ')': shared subexpression N, numbered in order; 0, or
 * -1 after reporting. */
static int eshared(eparser *p) {
  long idx = enumber(p, "expected a number after '%'");
  if (idx < 0) return -1;
  if (idx != p->n_shared) return efail(p, "shared subexpression %%%ld out of order (%%%d expected)", idx, p->n_shared);
  if (p->n_shared == EXPR_MAX_SHARED) return efail(p, "expr has more than %d shared subexpressions", EXPR_MAX_SHARED);
  espace(p);
  if (p->s[p->pos] != '=') return ebad(p, "expected '=' after a shared subexpression's number");
  p->pos++;
  espace(p);
  if (p->s[p->pos] != '(') return ebad(p, "expected '(' (a shared subexpression is an op)");
  int root = eparse(p, 0);
  if (root < 0) return -1;
  p->shared[p->n_shared++] = root;
  espace(p);
  if (p->s[p->pos] != ';') return ebad(p, "expected ';' after a shared subexpression");
  p->pos++;
  return 0;
}

ir_expr *ir_expr_parse(const char *text, bool multi, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  eparser p = {.s = text ? text : "", .err = err, .errlen = errlen};
  for (;;) {
    espace(&p);
    if (p.s[p.pos] == '%') {
      if (eshared(&p) < 0) break;
      continue;
    }
    if (p.n_results == IR_FUSED_MAX_RESULTS) {
      efail(&p, "expr has more than %d results", IR_FUSED_MAX_RESULTS);
      break;
    }
    int root = eparse(&p, 0);
    if (root < 0) break;
    p.results[p.n_results++] = root;
    espace(&p);
    if (!multi || p.s[p.pos] != ';') break;
    p.pos++;
  }
  if (!p.failed && p.s[p.pos]) ebad(&p, "text after the expression");
  for (int k = 0; k < p.n_shared && !p.failed; k++)
    if (p.shared_reads[k] < 2) /* the printer writes it in place: a text that would not print back */
      efail(&p, "shared subexpression %%%d is read %d time%s (at least twice, or write it in place)", k,
            p.shared_reads[k], p.shared_reads[k] == 1 ? "" : "s");
  ir_expr *e = p.failed ? NULL : expr_pack(p.ins, p.n, p.results, p.n_results, NULL);
  if (!p.failed && !e) efail(&p, "out of memory");
  free(p.ins);
  return e;
}

void ir_expr_free(ir_expr *e) { free(e); }

int ir_expr_arity(const ir_expr_inst *in) {
  if (in->kind != IR_EXPR_OP) return 0;
  return in->op == IR_OP_CAST ? 1 : in->op == IR_OP_DROPOUT ? 3 : ir_op_num_inputs(in->op);
}

ir_expr *ir_expr_copy(const ir_expr *e, ir_arena *a) {
  return e ? expr_pack(e->ins, e->n_ins, e->results, e->n_results, a) : NULL;
}

/* ---- printing: the text the parser reads back ---- */
typedef struct {
  char *s;
  size_t len, cap;
  bool oom;
} sbuf;

static void sput(sbuf *b, const char *t) {
  size_t n = strlen(t);
  if (b->len + n + 1 > b->cap) {
    size_t cap = (b->len + n + 1) * 2 + 64;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = true;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
  memcpy(b->s + b->len, t, n + 1);
  b->len += n;
}

/* What the printer writes for an instruction named as an argument: itself,
 * %N (an op read by two or more instructions) or #r (a result's root). */
typedef struct {
  int *shared; /* by instruction: its %N, or -1 */
  int *root;   /* by instruction: the result it is the root of, or -1 */
} pnames;

static void print_inst(const ir_expr *e, int i, const pnames *nm, bool top, sbuf *b) {
  const ir_expr_inst *in = &e->ins[i];
  char buf[96];
  if (!top && nm->root[i] >= 0) {
    snprintf(buf, sizeof buf, "#%d", nm->root[i]);
    sput(b, buf);
    return;
  }
  if (!top && nm->shared[i] >= 0) {
    snprintf(buf, sizeof buf, "%%%d", nm->shared[i]);
    sput(b, buf);
    return;
  }
  switch (in->kind) {
  case IR_EXPR_OPERAND: snprintf(buf, sizeof buf, "$%d", in->index); sput(b, buf); return;
  case IR_EXPR_RESULT: snprintf(buf, sizeof buf, "#%d", in->index); sput(b, buf); return;
  case IR_EXPR_CONST:
    snprintf(buf, sizeof buf, "(const %s %.17g)", ir_dtype_name(in->dtype), in->value);
    sput(b, buf);
    return;
  case IR_EXPR_OP:
    if (in->op == IR_OP_CAST) snprintf(buf, sizeof buf, "(cast %s", ir_dtype_name(in->dtype));
    else if (in->op == IR_OP_DROPOUT) snprintf(buf, sizeof buf, "(dropout %.17g %d", in->value, in->index);
    else snprintf(buf, sizeof buf, "(%s", ir_op_name(in->op));
    sput(b, buf);
    for (int k = 0; k < 3 && in->arg[k] >= 0; k++) {
      sput(b, " ");
      print_inst(e, in->arg[k], nm, false, b);
    }
    sput(b, ")");
    return;
  }
}

/* Items in instruction order: a shared op as "%N = ...", a result when its
 * root is reached (results in order). */
char *ir_expr_print(const ir_expr *e) {
  sbuf b = {0};
  size_t n = (size_t)(e->n_ins > 0 ? e->n_ins : 1);
  pnames nm = {malloc(n * sizeof(int)), malloc(n * sizeof(int))};
  int *reads = calloc(n, sizeof(int));
  if (!nm.shared || !nm.root || !reads) b.oom = true;
  sput(&b, "");
  for (int i = 0; !b.oom && i < e->n_ins; i++) {
    nm.shared[i] = nm.root[i] = -1;
    for (int k = 0; k < 3; k++)
      if (e->ins[i].kind == IR_EXPR_OP && e->ins[i].arg[k] >= 0) reads[e->ins[i].arg[k]]++;
  }
  for (int r = 0; !b.oom && r < e->n_results; r++)
    if (nm.root[e->results[r]] < 0) nm.root[e->results[r]] = r;
  int n_shared = 0, next = 0, items = 0;
  for (int i = 0; !b.oom && i < e->n_ins; i++) {
    if (e->ins[i].kind == IR_EXPR_OP && reads[i] >= 2 && nm.root[i] < 0) {
      char buf[32];
      snprintf(buf, sizeof buf, "%s%%%d = ", items++ ? "; " : "", nm.shared[i] = n_shared++);
      sput(&b, buf);
      print_inst(e, i, &nm, true, &b);
    }
    for (; next < e->n_results && e->results[next] <= i; next++) {
      if (items++) sput(&b, "; ");
      print_inst(e, e->results[next], &nm, true, &b);
    }
  }
  free(nm.shared);
  free(nm.root);
  free(reads);
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

/* ---- building ---- */
struct ir_expr_builder {
  ir_expr_inst *ins;
  int n, cap;
  int results[IR_FUSED_MAX_RESULTS];
  int n_results;
  bool oom;
};

ir_expr_builder *ir_expr_builder_new(void) { return calloc(1, sizeof(ir_expr_builder)); }

void ir_expr_builder_free(ir_expr_builder *b) {
  if (!b) return;
  free(b->ins);
  free(b);
}

int ir_expr_add(ir_expr_builder *b, ir_expr_inst in) {
  if (b->oom) return -1;
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 16;
    ir_expr_inst *ni = realloc(b->ins, (size_t)cap * sizeof *ni);
    if (!ni) {
      b->oom = true;
      return -1;
    }
    b->ins = ni;
    b->cap = cap;
  }
  for (int k = 0; k < 3; k++)
    if (k >= ir_expr_arity(&in)) in.arg[k] = -1;
  b->ins[b->n] = in;
  return b->n++;
}

int ir_expr_add_result(ir_expr_builder *b, int root) {
  if (b->oom || root < 0 || root >= b->n || b->n_results == IR_FUSED_MAX_RESULTS) return -1;
  b->results[b->n_results++] = root;
  return 0;
}

int ir_expr_append(ir_expr_builder *b, const ir_expr *e, const int *operand_map, int result_base) {
  int base = b->n;
  for (int i = 0; i < e->n_ins && !b->oom; i++) {
    ir_expr_inst in = e->ins[i];
    if (in.kind == IR_EXPR_OPERAND && operand_map) {
      if (operand_map[in.index] < 0) { /* that operand is result 0 of the builder */
        in.kind = IR_EXPR_RESULT;
        in.index = 0;
      } else {
        in.index = operand_map[in.index];
      }
    } else if (in.kind == IR_EXPR_RESULT) {
      in.index += result_base;
    }
    for (int k = 0; k < 3; k++)
      if (in.arg[k] >= 0) in.arg[k] += base;
    ir_expr_add(b, in);
  }
  for (int r = 0; r < e->n_results && !b->oom; r++)
    if (ir_expr_add_result(b, e->results[r] + base) != 0) return -1;
  return b->oom ? -1 : 0;
}

int ir_expr_builder_unresult(ir_expr_builder *b, int r) {
  if (b->oom || r < 0 || r >= b->n_results) return -1;
  int root = b->results[r];
  for (int i = 0; i <= root; i++)
    if (b->ins[i].kind == IR_EXPR_RESULT && b->ins[i].index == r) return -1; /* #r before its root */
  int *to = malloc((size_t)(b->n > 0 ? b->n : 1) * sizeof *to); /* old index -> new */
  if (!to) {
    b->oom = true;
    return -1;
  }
  int n = 0;
  for (int i = 0; i < b->n; i++) {
    ir_expr_inst in = b->ins[i];
    if (in.kind == IR_EXPR_RESULT && in.index == r) { /* a reader of #r: the root's instruction itself */
      to[i] = to[root];
      continue;
    }
    if (in.kind == IR_EXPR_RESULT && in.index > r) in.index--;
    for (int k = 0; k < 3; k++)
      if (in.arg[k] >= 0) in.arg[k] = to[in.arg[k]];
    b->ins[n] = in;
    to[i] = n++;
  }
  b->n = n;
  for (int k = r; k + 1 < b->n_results; k++) b->results[k] = b->results[k + 1];
  b->n_results--;
  for (int k = 0; k < b->n_results; k++) b->results[k] = to[b->results[k]];
  free(to);
  return 0;
}

ir_expr *ir_expr_builder_finish(ir_expr_builder *b) {
  if (b->oom || b->n_results == 0) return NULL;
  return expr_pack(b->ins, b->n, b->results, b->n_results, NULL);
}

/* ====================================================================== */
/* einsum equations                                                        */
/* ====================================================================== */

int ir_einsum_label(char ch) {
  if (ch >= 'a' && ch <= 'z') return ch - 'a';
  if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
  return -1;
}

char ir_einsum_letter(int label) { return (char)(label < 26 ? 'a' + label : 'A' + label - 26); }

static ir_einsum *einsum_pack(int n_terms, const int *len, const int8_t *labels, int n_labels, const int8_t *out,
                              int out_len, ir_arena *a) {
  size_t bytes = sizeof(ir_einsum) + (size_t)(n_terms + 1) * sizeof(int) + (size_t)n_labels + (size_t)out_len + 1;
  ir_einsum *e = a ? ir_arena_alloc(a, bytes) : calloc(1, bytes);
  if (!e) return NULL;
  int *start = (int *)(e + 1);
  int8_t *lab = (int8_t *)(start + n_terms + 1);
  int8_t *o = lab + n_labels;
  int at = 0;
  for (int t = 0; t < n_terms; t++) start[t] = at, at += len[t];
  start[n_terms] = at;
  memcpy(lab, labels, (size_t)n_labels);
  memcpy(o, out, (size_t)out_len);
  e->n_terms = n_terms;
  e->start = start;
  e->labels = lab;
  e->out_len = out_len;
  e->out = o;
  return e;
}

ir_einsum *ir_einsum_parse(const char *eq, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!eq) eq = "";
#define EFAIL(...) ((void)(err && errlen ? snprintf(err, errlen, __VA_ARGS__) : 0))
  const char *arrow = strstr(eq, "->");
  if (!arrow || strstr(arrow + 2, "->")) {
    EFAIL("einsum equation \"%.64s\" must have the explicit form \"ij,jk->ik\"", eq);
    return NULL;
  }
  size_t n_chars = (size_t)(arrow - eq);
  int *len = calloc(n_chars + 2, sizeof *len);
  int8_t *labels = malloc(n_chars + 1), out[IR_MAX_RANK];
  if (!len || !labels) {
    free(len), free(labels);
    EFAIL("out of memory");
    return NULL;
  }
  int n_terms = 0, n_labels = 0, out_len = 0;
  bool seen[52] = {false}, used[52] = {false};
  ir_einsum *e = NULL;
  for (const char *p = eq;; p++) {
    if (p == arrow || *p == ',') {
      n_terms++;
      if (p == arrow) break;
      continue;
    }
    int li = ir_einsum_label(*p);
    if (li < 0) {
      EFAIL("einsum equation \"%.64s\" has an invalid character '%c'", eq, *p);
      goto done;
    }
    labels[n_labels++] = (int8_t)li;
    len[n_terms]++;
    seen[li] = true;
  }
  for (const char *q = arrow + 2; *q; q++) {
    int li = ir_einsum_label(*q);
    if (li < 0) {
      EFAIL("einsum equation \"%.64s\" has an invalid character '%c'", eq, *q);
      goto done;
    }
    if (!seen[li]) {
      EFAIL("einsum output letter '%c' appears in no input of \"%.64s\"", *q, eq);
      goto done;
    }
    if (used[li]) {
      EFAIL("einsum output letter '%c' repeated in \"%.64s\"", *q, eq);
      goto done;
    }
    used[li] = true;
    if (out_len == IR_MAX_RANK) {
      EFAIL("einsum output of \"%.64s\" has rank > %d", eq, IR_MAX_RANK);
      goto done;
    }
    out[out_len++] = (int8_t)li;
  }
  if (!(e = einsum_pack(n_terms, len, labels, n_labels, out, out_len, NULL))) EFAIL("out of memory");
done:
#undef EFAIL
  free(len);
  free(labels);
  return e;
}

void ir_einsum_free(ir_einsum *e) { free(e); }

ir_einsum *ir_einsum_copy(const ir_einsum *e, ir_arena *a) {
  if (!e) return NULL;
  int *len = malloc((size_t)(e->n_terms + 1) * sizeof *len);
  if (!len) return NULL;
  for (int t = 0; t < e->n_terms; t++) len[t] = e->start[t + 1] - e->start[t];
  ir_einsum *c = einsum_pack(e->n_terms, len, e->labels, e->start[e->n_terms], e->out, e->out_len, a);
  free(len);
  return c;
}

/* ====================================================================== */
/* attributes                                                              */
/* ====================================================================== */

/* Whether attribute `key` of op holds a sub-language, and which. */
static int parsed_kind(ir_op op, const char *key) {
  if ((op == IR_OP_FUSED || op == IR_OP_FUSED_MATMUL) && strcmp(key, "expr") == 0) return 1;
  if (op == IR_OP_EINSUM && strcmp(key, "eq") == 0) return 2;
  return 0;
}

void ir_attr_parse(ir_op op, ir_attr *a, ir_arena *arena) {
  if (a->kind != IR_ATTR_STR || !a->s) return;
  char err[8];
  switch (parsed_kind(op, a->key)) {
  case 1:
    if (a->expr) a->expr = ir_expr_copy(a->expr, arena);
    else if (arena) {
      ir_expr *e = ir_expr_parse(a->s, op == IR_OP_FUSED, err, sizeof err);
      a->expr = e ? ir_expr_copy(e, arena) : NULL;
      ir_expr_free(e);
    }
    break;
  case 2:
    if (a->einsum) a->einsum = ir_einsum_copy(a->einsum, arena);
    else if (arena) {
      ir_einsum *e = ir_einsum_parse(a->s, err, sizeof err);
      a->einsum = e ? ir_einsum_copy(e, arena) : NULL;
      ir_einsum_free(e);
    }
    break;
  default: a->expr = NULL, a->einsum = NULL; break;
  }
}
