/* codegen/lower.c — cg_lower: a graph and its memory plan to a program
 * (codegen.h): the driver, the per-op emitter table, and the helpers the
 * emitters (emit_*.c, through emit.h) build the source and the actions
 * with.
 *
 * The driver walks the plan's steps in order. A view step gets no actions.
 * Any other step's node goes to its op's emitter, which writes zero or more
 * kernels into the one source and appends the step's actions. Kernel names
 * come from the node's first result (cg_kernel_base_name, made unique with
 * a numeric suffix), and every kernel is preceded by the node's IR line and
 * `// from FILE:LINE`, so a profile row, a fault or a ptxas line points
 * back at the .tg line.
 *
 * Each step's text, with the kernels it defines, is one chunk of the
 * source (cg_chunk): no step's kernels refer to another step's text, so
 * codegen/parts.c can compile any run of chunks after the header apart.
 *
 * The source starts with the prelude includes: tgc_cuda.h (the CUDA
 * surface, also under the emulator), tgc_ops.h (the ops' scalar meaning),
 * tgc_kernels.h and tgc_attention.h (the kernel bodies the generated
 * kernels call).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"

/* ---- the emitters (emit_*.c) ---- */
#define EMITTER(op, fn) int fn(cg_ctx *c, const ir_node *n);
#include "emitters.def"
#undef EMITTER
int cg_emit_elementwise(cg_ctx *c, const ir_node *n);

/* The emitter of every op that is not plain elementwise (unary and binary
 * ops go to cg_emit_elementwise by their kind). GRAD has none: autodiff
 * expands it before anything runs. */
static const cg_emit_fn emitters[IR_NUM_OPS] = {
#define EMITTER(op, fn) [IR_OP_##op] = fn,
#include "emitters.def"
#undef EMITTER
};

static cg_emit_fn emitter(ir_op op) {
  if ((unsigned)op >= IR_NUM_OPS) return NULL;
  switch (ir_op_kind_of(op)) {
  case IR_OPK_UNARY:
  case IR_OPK_BINARY: return cg_emit_elementwise;
  default: return emitters[op];
  }
}

/* Communication ops and mesh_slice lower to no kernel: the executor runs
 * them through the comm layer (runtime/collective.c) on any backend. */
static bool mesh_step(ir_op op) { return ir_op_on_mesh_axis(op); }

bool cg_op_lowers(ir_op op) { return mesh_step(op) || emitter(op) != NULL; }

const char *cg_epilogue_name(cg_epilogue e) {
  switch (e) {
  case CG_EPI_NONE: return "none";
  case CG_EPI_BIAS: return "bias";
  case CG_EPI_RELU_BIAS: return "relu+bias";
  case CG_EPI_GELU_BIAS: return "gelu+bias";
  case CG_EPI_DGELU: return "dgelu";
  case CG_EPI_BGRAD_B: return "bgrad";
  }
  return "?";
}

/* ---- strings ---- */

void cg_buf_printf(cg_buf *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = true;
    return;
  }
  if (!b->s || b->len + (size_t)n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *ns = realloc(b->s, cap);
    if (!ns) {
      b->oom = true;
      return;
    }
    b->s = ns;
    b->cap = cap;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
  }
  b->len += (size_t)n;
}

void cg_buf_free(cg_buf *b) {
  free(b->s);
  memset(b, 0, sizeof *b);
}

void cg_src(cg_ctx *c, const char *fmt, ...) {
  if (c->src.oom) return;
  char small[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    cg_buf_printf(&c->src, "%s", small);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    c->src.oom = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  cg_buf_printf(&c->src, "%s", big);
  free(big);
}

int cg_fail(cg_ctx *c, const char *fmt, ...) {
  if (c->failed) return -1;
  c->failed = true;
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  const ir_node *n = c->node;
  const char *file = n && n->loc.file ? n->loc.file : c->g->source_file;
  const char *v = n && n->n_out ? n->out[0]->name : "?";
  const char *op = n ? ir_op_name(n->op) : "?";
  if (n && n->loc.line > 0 && file)
    snprintf(c->err, c->errlen, "%s:%d:%d: cannot lower %%%s (%s): %s", file, n->loc.line, n->loc.col, v, op, why);
  else snprintf(c->err, c->errlen, "cannot lower %%%s (%s): %s", v, op, why);
  return -1;
}

/* ---- types ---- */

const char *cg_ctype(ir_dtype t) {
  switch (t) {
  case IR_DT_F64: return "double";
  case IR_DT_F32: return "float";
  case IR_DT_BF16: return "__nv_bfloat16";
  case IR_DT_F16: return "__half";
  case IR_DT_I32: return "int";
  case IR_DT_I64: return "long long";
  case IR_DT_BOOL: return "unsigned char";
  default: return "void";
  }
}

const char *cg_acctype(ir_dtype t) {
  return t == IR_DT_F32 || t == IR_DT_BF16 || t == IR_DT_F16 ? "float" : "double";
}

int64_t cg_numel(const ir_type *t) { return ir_type_numel(t); }

int64_t cg_blocks(int64_t n, int64_t per_block) {
  int64_t b = per_block > 0 ? (n + per_block - 1) / per_block : 1;
  if (b < 1) b = 1;
  if (b > 65535) b = 65535; /* grid-stride loops cover the rest */
  return b;
}

void cg_literal(char *buf, size_t len, double v, ir_dtype dt) {
  bool f = !strcmp(cg_acctype(dt), "float");
  if (v != v) snprintf(buf, len, "%s", f ? "tgc_nan_f()" : "tgc_nan_d()");
  else if (v == 1.0 / 0.0) snprintf(buf, len, "%s", f ? "tgc_inf_f()" : "tgc_inf_d()");
  else if (v == -1.0 / 0.0) snprintf(buf, len, "%s", f ? "(-tgc_inf_f())" : "(-tgc_inf_d())");
  else if (f) snprintf(buf, len, "%.9gf", (double)(float)v);
  else snprintf(buf, len, "%.17g", v);
  /* "1f" is not a literal: give integral values a decimal point */
  if (f && !strpbrk(buf, ".eEn(")) {
    size_t l = strlen(buf);
    if (l + 2 < len) memmove(buf + l - 1, ".0f", 4);
  } else if (!f && !strpbrk(buf, ".eEn(")) {
    size_t l = strlen(buf);
    if (l + 3 < len) memcpy(buf + l, ".0", 3);
  }
}

/* ---- names ---- */

void cg_kernel_base_name(const ir_value *v, char *buf, size_t len) {
  const char *name = v && v->name ? v->name : "v";
  /* "k_": a value named y1, exp or sin must not be a math function's name */
  size_t k = (size_t)snprintf(buf, len, "k_");
  for (const char *p = name; *p && k + 1 < len; p++) {
    char ch = *p;
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
    buf[k++] = ok ? ch : '_';
  }
  buf[k < len ? k : len - 1] = 0;
}

static bool name_taken(const cg_ctx *c, const char *name) {
  for (int i = 0; i < c->n_names; i++)
    if (strcmp(c->names[i], name) == 0) return true;
  return false;
}

/* ---- kernels and actions ---- */

static void *grow(void *p, int *cap, int need, size_t size) {
  if (need <= *cap) return p;
  int nc = *cap ? *cap : 16;
  while (nc < need) nc *= 2;
  void *np = realloc(p, (size_t)nc * size);
  if (!np) return NULL;
  *cap = nc;
  return np;
}

/* The node's IR line, shortened: results, op, operands, first result type. */
static void node_comment(cg_ctx *c, const ir_node *n) {
  cg_src(c, "// ");
  for (int i = 0; i < n->n_out; i++) cg_src(c, "%s%%%s", i ? ", " : "", n->out[i]->name);
  cg_src(c, " = %s", ir_op_name(n->op));
  for (int i = 0; i < n->n_in && i < 8; i++) cg_src(c, "%s%%%s", i ? ", " : " ", n->in[i]->name);
  if (n->n_in > 8) cg_src(c, ", ... (%d operands)", n->n_in);
  const ir_attr *e = ir_node_attr(n, "expr");
  if (e && e->s) {
    size_t l = strlen(e->s);
    if (l <= 160) cg_src(c, " {expr = \"%s\"}", e->s);
    else cg_src(c, " {expr = \"%.150s...\"}", e->s);
  }
  char tb[160];
  if (n->n_out) cg_src(c, " : %s", ir_type_str(&n->out[0]->type, tb, sizeof tb));
  cg_src(c, "\n");
  const char *file = n->loc.file ? n->loc.file : c->g->source_file;
  if (n->loc.line > 0) cg_src(c, "// from %s:%d\n", file ? file : "?", n->loc.line);
  else cg_src(c, "// from %s (no source line: made by a pass)\n", file ? file : "?");
}

int cg_kernel_begin(cg_ctx *c, const char *suffix) {
  cg_program *p = c->p;
  const ir_node *n = c->node;
  char base[140], name[160];
  cg_kernel_base_name(n->n_out ? n->out[0] : NULL, base, sizeof base);
  snprintf(name, sizeof name, "%s%s%s", base, suffix && *suffix ? "_" : "", suffix ? suffix : "");
  for (int k = 1; name_taken(c, name); k++)
    snprintf(name, sizeof name, "%s%s%s_%d", base, suffix && *suffix ? "_" : "", suffix ? suffix : "", k);
  char **nn = grow(c->names, &c->cap_names, c->n_names + 1, sizeof *nn);
  cg_kernel *nk = grow(p->kernels, &c->cap_kernels, p->n_kernels + 1, sizeof *nk);
  if (nn) c->names = nn;
  if (nk) p->kernels = nk;
  if (!nn || !nk || !(c->names[c->n_names] = strdup(name))) {
    c->src.oom = true;
    return 0;
  }
  c->n_names++;
  int k = p->n_kernels++;
  cg_kernel *kk = &p->kernels[k];
  memset(kk, 0, sizeof *kk);
  snprintf(kk->name, sizeof kk->name, "%s", name);
  kk->node = c->g->nodes[c->plan->steps[c->step].node] == n ? c->plan->steps[c->step].node : -1;
  kk->first_arg = p->n_args;
  node_comment(c, n);
  c->kernel = k;
  return k;
}

void cg_add_arg(cg_ctx *c, int kernel, cg_ref r) {
  cg_program *p = c->p;
  cg_ref *na = grow(p->args, &c->cap_args, p->n_args + 1, sizeof *na);
  if (!na) {
    c->src.oom = true;
    return;
  }
  p->args = na;
  p->args[p->n_args++] = r;
  p->kernels[kernel].n_args++;
}

void cg_kernel_signature(cg_ctx *c, int kernel, int threads, bool workspace) {
  cg_kernel_signature_part(c, kernel, threads, 0, c->node->n_in, true, workspace);
}

void cg_kernel_signature_part(cg_ctx *c, int kernel, int threads, int first_in, int n_in, bool results, bool workspace) {
  const ir_node *n = c->node;
  cg_kernel *k = &c->p->kernels[kernel];
  k->block = (unsigned)threads;
  cg_src(c, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", threads, k->name);
  int np = 0;
  for (int i = first_in; i < first_in + n_in; i++, np++) {
    cg_src(c, "%sconst %s *in%d", np ? ", " : "", cg_ctype(n->in[i]->type.dtype), i);
    cg_add_arg(c, kernel, (cg_ref){.kind = CG_REF_IN, .index = i});
  }
  for (int i = 0; results && i < n->n_out; i++, np++) {
    cg_src(c, "%s%s *out%d", np ? ", " : "", cg_ctype(n->out[i]->type.dtype), i);
    cg_add_arg(c, kernel, (cg_ref){.kind = CG_REF_OUT, .index = i});
  }
  if (workspace) {
    cg_src(c, "%sunsigned char *ws", np ? ", " : "");
    cg_add_arg(c, kernel, (cg_ref){.kind = CG_REF_WORKSPACE});
  }
  cg_src(c, ") {\n");
}

void cg_kernel_end(cg_ctx *c, int kernel) {
  cg_src(c, "}\nTGC_REGISTER(%s)\n\n", c->p->kernels[kernel].name);
  c->kernel = -1;
}

static cg_action *new_action(cg_ctx *c, cg_action_kind kind) {
  cg_program *p = c->p;
  cg_action *na = grow(p->actions, &c->cap_actions, p->n_actions + 1, sizeof *na);
  if (!na) {
    c->src.oom = true;
    return NULL;
  }
  p->actions = na;
  cg_action *a = &p->actions[p->n_actions++];
  memset(a, 0, sizeof *a);
  a->kind = kind;
  a->kernel = -1;
  p->steps[c->step].n_actions++;
  return a;
}

void cg_launch(cg_ctx *c, int kernel, int64_t grid_x, int64_t grid_y, unsigned block, unsigned smem_dynamic) {
  cg_action *a = new_action(c, CG_ACT_KERNEL);
  if (!a) return;
  a->kernel = kernel;
  a->grid[0] = (unsigned)(grid_x < 1 ? 1 : grid_x);
  a->grid[1] = (unsigned)(grid_y < 1 ? 1 : grid_y);
  a->grid[2] = 1;
  a->block = block;
  a->smem_dynamic = smem_dynamic;
  c->p->n_launches++;
}

void cg_gemm_action(cg_ctx *c, const cg_gemm *gm) {
  cg_action *a = new_action(c, CG_ACT_GEMM);
  if (!a) return;
  a->gemm = *gm;
  c->p->n_gemms++;
}

void cg_copy(cg_ctx *c, cg_ref dst, cg_ref src, size_t bytes) {
  if (!bytes) return;
  cg_action *a = new_action(c, CG_ACT_COPY);
  if (!a) return;
  a->dst = dst, a->src = src, a->bytes = bytes;
  c->p->n_copies++;
}

void cg_memset(cg_ctx *c, cg_ref dst, size_t bytes) {
  if (!bytes) return;
  cg_action *a = new_action(c, CG_ACT_MEMSET);
  if (!a) return;
  a->dst = dst, a->bytes = bytes;
  c->p->n_memsets++;
}

void cg_need_workspace(cg_ctx *c, size_t bytes) {
  bytes = (bytes + 255) / 256 * 256;
  if (bytes > c->p->workspace_bytes) c->p->workspace_bytes = bytes;
}

void cg_step_moves(cg_ctx *c, double bytes) {
  if (c->moves) c->moves[c->step] = bytes;
  else c->src.oom = true;
}

void cg_reads_part(cg_ctx *c, int index, double bytes) {
  struct cg_part *np = grow(c->parts, &c->cap_parts, c->n_parts + 1, sizeof *np);
  if (!np) {
    c->src.oom = true;
    return;
  }
  c->parts = np;
  c->parts[c->n_parts++] = (struct cg_part){c->step, index, bytes};
}

bool cg_value_live(const cg_ctx *c, const ir_value *v) {
  return !c->uses || v->id < 0 || v->id >= c->n_uses || c->uses[v->id] > 0;
}

/* ---- the driver ---- */

static double value_bytes(const ir_value *v) {
  return (double)cg_numel(&v->type) * (double)ir_dtype_size(v->type.dtype);
}

/* cg_step.bytes of every step: each (step, operand / result) some action
 * touches is marked once (a ref `back` steps earlier marks that step's),
 * then the marked tensors' sizes are added, cg_reads_part's figures
 * replacing whole operands. */
static int step_bytes(cg_ctx *c) {
  const ir_graph *g = c->g;
  cg_program *p = c->p;
  int *first = calloc((size_t)p->n_steps + 1, sizeof *first);
  if (!first) return -1;
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *n = g->nodes[c->plan->steps[s].node];
    first[s + 1] = first[s] + n->n_in + n->n_out;
  }
  unsigned char *mark = calloc((size_t)first[p->n_steps] + 1, 1);
  if (!mark) {
    free(first);
    return -1;
  }
#define MARK(st, r)                                                                                                   \
  do {                                                                                                                \
    int o_ = (st) - (r).back;                                                                                         \
    if ((r).kind != CG_REF_WORKSPACE && o_ >= 0 && o_ < p->n_steps) {                                                 \
      const ir_node *on_ = g->nodes[c->plan->steps[o_].node];                                                         \
      int i_ = (r).kind == CG_REF_IN ? (r).index : on_->n_in + (r).index;                                             \
      if (i_ >= 0 && i_ < on_->n_in + on_->n_out) mark[first[o_] + i_] = 1;                                           \
    }                                                                                                                 \
  } while (0)
  for (int s = 0; s < p->n_steps; s++)
    for (int a = p->steps[s].first_action; a < p->steps[s].first_action + p->steps[s].n_actions; a++) {
      const cg_action *x = &p->actions[a];
      switch (x->kind) {
      case CG_ACT_KERNEL:
        for (int i = 0; i < p->kernels[x->kernel].n_args; i++) MARK(s, p->args[p->kernels[x->kernel].first_arg + i]);
        break;
      case CG_ACT_GEMM:
        MARK(s, x->gemm.a);
        MARK(s, x->gemm.b);
        MARK(s, x->gemm.c);
        if (x->gemm.epilogue == CG_EPI_BIAS || x->gemm.epilogue == CG_EPI_RELU_BIAS || x->gemm.epilogue == CG_EPI_GELU_BIAS)
          MARK(s, x->gemm.bias);
        if (x->gemm.epilogue == CG_EPI_DGELU) MARK(s, x->gemm.aux);
        if (x->gemm.epilogue == CG_EPI_BGRAD_B) MARK(s, x->gemm.bias);
        break;
      case CG_ACT_COPY:
        MARK(s, x->src);
        MARK(s, x->dst);
        break;
      case CG_ACT_MEMSET: MARK(s, x->dst); break;
      }
    }
#undef MARK
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *n = g->nodes[c->plan->steps[s].node];
    double b = 0;
    for (int i = 0; i < n->n_in; i++) {
      if (!mark[first[s] + i]) continue;
      double part = value_bytes(n->in[i]);
      for (int k = 0; k < c->n_parts; k++)
        if (c->parts[k].step == s && c->parts[k].index == i) part = c->parts[k].bytes;
      b += part;
    }
    for (int i = 0; i < n->n_out; i++)
      if (mark[first[s] + n->n_in + i] && cg_value_live(c, n->out[i])) b += value_bytes(n->out[i]);
    b = c->moves && c->moves[s] >= 0 ? c->moves[s] : b;
    for (int i = 0; c->plan->steps[s].zero && i < n->n_out; i++) b += value_bytes(n->out[i]); /* the executor's zero-fill */
    p->steps[s].bytes = b;
  }
  free(mark);
  free(first);
  return 0;
}

void cg_program_free(cg_program *p) {
  if (!p) return;
  free(p->source);
  free(p->chunks);
  free(p->kernels);
  free(p->args);
  free(p->actions);
  free(p->steps);
  free(p);
}

/* Ends a chunk at the source written so far when kernels were defined
 * since the last one (*chunked: kernels in chunks). */
static void close_chunk(cg_ctx *c, int *chunked) {
  cg_program *p = c->p;
  if (p->n_kernels == *chunked || c->src.oom) return;
  cg_chunk *nc = grow(p->chunks, &c->cap_chunks, p->n_chunks + 1, sizeof *nc);
  if (!nc) {
    c->src.oom = true;
    return;
  }
  p->chunks = nc;
  p->chunks[p->n_chunks++] = (cg_chunk){.end = c->src.len, .first_kernel = *chunked, .n_kernels = p->n_kernels - *chunked};
  *chunked = p->n_kernels;
}

cg_program *cg_lower(const ir_graph *g, const pass_plan *plan, const cg_lower_options *o, char *err, size_t errlen) {
  cg_program *p = calloc(1, sizeof *p);
  cg_ctx c = {.g = g, .plan = plan, .p = p, .kernel = -1, .err = err, .errlen = errlen};
  if (err && errlen) err[0] = 0;
  if (!p || !(p->steps = calloc((size_t)(plan->n_steps > 0 ? plan->n_steps : 1), sizeof *p->steps))) {
    snprintf(err, errlen, "out of memory lowering the graph");
    free(p);
    return NULL;
  }
  p->n_steps = plan->n_steps;
  cg_src(&c, "// %s: generated by tgc " TGC_VERSION " (codegen/lower.c). One kernel per line below of the IR;\n",
         o && o->title ? o->title : (g->source_file ? g->source_file : g->name));
  cg_src(&c, "// matrix products run in cuBLASLt and are not in this file.\n");
  cg_src(&c, "#include \"tgc_cuda.h\"\n#include \"tgc_ops.h\"\n#include \"tgc_kernels.h\"\n#include \"tgc_attention.h\"\n\n");
  p->header_len = c.src.len;
  int chunked = 0; /* kernels in chunks so far */
  c.uses = ir_use_counts(g, &c.n_uses); /* NULL (out of memory): every result is stored */
  c.moves = malloc((size_t)(plan->n_steps > 0 ? plan->n_steps : 1) * sizeof *c.moves);
  for (int s = 0; c.moves && s < plan->n_steps; s++) c.moves[s] = -1;
  c.partner_step = malloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * sizeof *c.partner_step);
  for (int i = 0; c.partner_step && i < g->n_nodes; i++) c.partner_step[i] = -1;
  for (int s = 0; c.partner_step && s < plan->n_steps; s++) { /* results a later node's kernels compute */
    int r = plan->steps[s].node, m = -1;
    if (ir_node_attr_int(g->nodes[r], "in_product", 0)) m = pass_bias_grad_product(g, r);
    if (ir_node_attr_int(g->nodes[r], "with_grad", 0)) m = pass_cross_entropy_grad_of(g, r);
    if (m >= 0) c.partner_step[m] = s;
  }
  for (int s = 0; s < plan->n_steps && !c.failed; s++) {
    close_chunk(&c, &chunked); /* the previous step's kernels */
    const ir_node *n = g->nodes[plan->steps[s].node];
    c.node = n;
    c.step = s;
    p->steps[s].first_action = p->n_actions;
    if (plan->steps[s].view || mesh_step(n->op)) continue;
    int group = pass_group_size(g, plan, c.uses, c.n_uses, s); /* analysis/launches.c */
    if (ir_fused_counts(n) && !pass_group_eligible(n)) {
      cg_fail(&c, "a fused node with {nonfinite} whose operands are not each of its results' shape or one element "
                  "(the count runs in the multi-tensor kernel)");
      break;
    }
    if (group > 1 || ir_fused_counts(n)) { /* a multi-tensor launch at the group's last step (a count: always) */
      for (int k = 1; k < group; k++) p->steps[s + k].first_action = p->n_actions;
      if (cg_emit_group(&c, s, group) != 0) break;
      s += group - 1;
      continue;
    }
    cg_emit_fn fn = emitter(n->op);
    if (!fn) {
      cg_fail(&c, n->op == IR_OP_GRAD ? "a grad request: the autodiff pass expands it (was it disabled?)"
                                      : "no emitter for this op");
      break;
    }
    if (fn(&c, n) != 0) {
      if (!c.failed) cg_fail(&c, "the emitter failed");
      break;
    }
  }
  close_chunk(&c, &chunked);
  if (p->n_chunks > 0) p->chunks[p->n_chunks - 1].end = c.src.len; /* trailing text goes with the last chunk */
  if (!c.failed && !c.src.oom && step_bytes(&c) != 0) c.src.oom = true;
  for (int i = 0; i < c.n_names; i++) free(c.names[i]);
  free(c.names);
  free(c.uses);
  free(c.parts);
  free(c.partner_step);
  free(c.moves);
  if (!c.failed && c.src.oom) snprintf(err, errlen, "out of memory lowering the graph");
  if (c.failed || c.src.oom) {
    cg_buf_free(&c.src);
    cg_program_free(p);
    return NULL;
  }
  p->source = c.src.s;
  p->source_len = c.src.len;
  return p;
}
