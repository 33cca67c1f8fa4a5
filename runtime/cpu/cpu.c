/* runtime/cpu/cpu.c — the CPU backend: host memory and the kernel table.
 *
 * Device memory is host memory (256-byte aligned), so host tensors are
 * bound without copies. prepare binds each kernel action of a program to
 * its node's kernel (kern_*.c) and run calls it: the
 * table below is indexed by the op enum, elementwise ops run by their kind;
 * an op without an entry is not supported (test_runtime_kernels loops over
 * ops.def and fails on a gap). Scheduling, buffers and in-place execution
 * are the executor's (exec.c) and the memory plan's (analysis/memplan.c).
 * prepare keeps one thing per program: which count_nonfinite operands their
 * fused producer counts as it stores them (below).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* Kernels of the ops that are not plain elementwise (those run
 * rt_kern_unary / rt_kern_binary by their kind: cpu_kernel). */
static const kernel_fn cpu_kernels[IR_NUM_OPS] = {
#define KERNEL(op, fn) [IR_OP_##op] = fn,
#include "kernels.def"
#undef KERNEL
};

static kernel_fn cpu_kernel(ir_op op) {
  switch (ir_op_kind_of(op)) {
  case IR_OPK_UNARY: return rt_kern_unary;
  case IR_OPK_BINARY: return rt_kern_binary;
  default: return (unsigned)op < IR_NUM_OPS ? cpu_kernels[op] : NULL;
  }
}

static bool cpu_supports_op(const ir_node *n) {
  return n && (int)n->op >= 0 && n->op < IR_NUM_OPS && cpu_kernel(n->op) != NULL;
}

void rt_kerr(const rt_kctx *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(k->err, k->errlen, fmt, ap);
  va_end(ap);
}

/* ---- memory: host memory, 256-byte aligned ---- */

static int cpu_alloc(rt_device *d, size_t bytes, void **ptr, char *err, size_t errlen) {
  (void)d;
  *ptr = NULL;
  if (bytes > ((size_t)1 << 40) || posix_memalign(ptr, PASS_PLAN_ALIGNMENT, bytes ? bytes : 1) != 0) {
    *ptr = NULL;
    rt_errf(err, errlen, "out of memory allocating %zu bytes", bytes);
    return -1;
  }
  return 0;
}

static void cpu_free(rt_device *d, void *ptr) {
  (void)d;
  free(ptr);
}

static int cpu_move(rt_device *d, void *dst, const void *src, size_t n, char *err, size_t errlen) {
  (void)d, (void)err, (void)errlen;
  if (n && dst != src) memmove(dst, src, n);
  return 0;
}

static int cpu_fill(rt_device *d, void *dst, size_t n, const void *pattern, size_t pattern_bytes, char *err,
                    size_t errlen) {
  (void)d, (void)err, (void)errlen;
  const unsigned char *pt = pattern;
  bool uniform = true;
  for (size_t i = 1; i < pattern_bytes; i++) uniform &= pt[i] == pt[0];
  if (uniform) {
    memset(dst, pt[0], n);
    return 0;
  }
  unsigned char *o = dst;
  size_t have = pattern_bytes < n ? pattern_bytes : n;
  memcpy(o, pt, have);
  while (have < n) { /* double the filled prefix */
    size_t c = have < n - have ? have : n - have;
    memcpy(o + have, o, c);
    have += c;
  }
  return 0;
}

/* ---- programs: the non-finite count folded into its operands' producer ----
 *
 * A count_nonfinite (the trainer's check of the new parameters, made one
 * multi-tensor count by fuse-elementwise) reads every element of values
 * that a fused kernel has just written (the optimizer update). prepare finds
 * each operand that is a result of a fused node of the same graph; the fused
 * kernel then counts that result's Inf / NaN elements chunk by chunk as it
 * stores them (kern_fused.c), and the count adds those counts instead of
 * reading the tensors again. The graph is SSA and the count reads the value,
 * so nothing overwrites it between its producer and the count (the memory
 * plan frees a buffer only after its last reader): the count is the same. */
typedef struct {
  int n_nodes;
  int *slot;       /* per node id: fused: index in counts of its result 0; count_nonfinite: of its operands in
                    * operand; -1: nothing folded */
  unsigned *mask;  /* per node id (fused): the results counted as stored */
  int64_t *counts; /* IR_FUSED_MAX_RESULTS per counting fused node, written by its last run */
  int *operand;    /* per operand of a folded count: its index in counts, -1: read */
  int64_t *known;  /* one count's operands as it runs (-1: read) */
  int folded;      /* operands folded (tests: rt_cpu_folded_counts) */
} cpu_program;

static void cpu_release(rt_device *d, void *state) {
  (void)d;
  cpu_program *c = state;
  if (!c) return;
  free(c->slot), free(c->mask), free(c->counts), free(c->operand), free(c->known);
  free(c);
}

/* v, an operand of a count: a result of a fused node of g (ids dense). */
static const ir_node *fused_producer(const ir_graph *g, const ir_value *v) {
  const ir_node *f = v->def;
  if (!f || f->dead || f->op != IR_OP_FUSED || f->id < 0 || f->id >= g->n_nodes || g->nodes[f->id] != f) return NULL;
  return v->def_result >= 0 && v->def_result < IR_FUSED_MAX_RESULTS && f->n_out <= IR_FUSED_MAX_RESULTS ? f : NULL;
}

/* The folds of graph g: *state NULL when there are none. 0, or -1 out of memory. */
static int fold_prepare(const ir_graph *g, void **state, char *err, size_t errlen) {
  *state = NULL;
  int n_ops = 0, widest = 0, fold = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_COUNT_NONFINITE || n->id != i) continue;
    for (int j = 0; j < n->n_in; j++) fold += fused_producer(g, n->in[j]) != NULL;
    n_ops += n->n_in;
    if (n->n_in > widest) widest = n->n_in;
  }
  if (!fold) return 0;
  cpu_program *c = calloc(1, sizeof *c);
  if (c) {
    c->n_nodes = g->n_nodes;
    c->slot = malloc((size_t)g->n_nodes * sizeof *c->slot);
    c->mask = calloc((size_t)g->n_nodes, sizeof *c->mask);
    c->operand = malloc((size_t)n_ops * sizeof *c->operand);
    c->known = malloc((size_t)widest * sizeof *c->known);
  }
  if (!c || !c->slot || !c->mask || !c->operand || !c->known) {
    cpu_release(NULL, c);
    rt_errf(err, errlen, "out of memory preparing a program");
    return -1;
  }
  for (int i = 0; i < g->n_nodes; i++) c->slot[i] = -1;
  for (int i = 0; i < g->n_nodes; i++) { /* the fused results a count reads */
    const ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_COUNT_NONFINITE || n->id != i) continue;
    for (int j = 0; j < n->n_in; j++) {
      const ir_node *f = fused_producer(g, n->in[j]);
      if (f) c->mask[f->id] |= 1u << n->in[j]->def_result;
    }
  }
  int n_counting = 0, at = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (c->mask[i]) c->slot[i] = IR_FUSED_MAX_RESULTS * n_counting++;
  c->counts = calloc((size_t)n_counting * IR_FUSED_MAX_RESULTS, sizeof *c->counts);
  if (!c->counts) {
    cpu_release(NULL, c);
    rt_errf(err, errlen, "out of memory preparing a program");
    return -1;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = g->nodes[i];
    if (n->dead || n->op != IR_OP_COUNT_NONFINITE || n->id != i) continue;
    c->slot[i] = at;
    for (int j = 0; j < n->n_in; j++) {
      const ir_node *f = fused_producer(g, n->in[j]);
      c->operand[at++] = f ? c->slot[f->id] + n->in[j]->def_result : -1;
    }
  }
  c->folded = fold;
  *state = c;
  return 0;
}

int rt_cpu_folded_counts(const void *state) { return state ? ((const cpu_program *)state)->folded : 0; }

/* ---- running a node ---- */

/* Node n's kernel fn, with what program c folded into it (c NULL: nothing). */
static int run_kernel(const cpu_program *c, kernel_fn fn, const ir_node *n, const rt_tensor *const *in,
                      rt_tensor *const *out, char *err, size_t errlen) {
  rt_kctx k = {.node = n, .in = in, .out = out, .err = err, .errlen = errlen};
  int s = c && n->id >= 0 && n->id < c->n_nodes ? c->slot[n->id] : -1;
  if (s >= 0 && n->op == IR_OP_FUSED) {
    k.result_nonfinite = c->counts + s;
    k.count_results = c->mask[n->id];
  } else if (s >= 0 && n->op == IR_OP_COUNT_NONFINITE) {
    for (int j = 0; j < n->n_in; j++) c->known[j] = c->operand[s + j] >= 0 ? c->counts[c->operand[s + j]] : -1;
    k.operand_nonfinite = c->known;
  }
  return fn(&k);
}

int rt_cpu_run_node(const ir_node *n, const rt_tensor *const *in, rt_tensor *const *out, char *err, size_t errlen) {
  if (!cpu_supports_op(n)) {
    rt_errf(err, errlen, "the cpu backend has no kernel for '%s'", ir_op_name(n->op));
    return -1;
  }
  return run_kernel(NULL, cpu_kernel(n->op), n, in, out, err, errlen);
}

/* A program's kernel actions, bound to their entries of the kernel table:
 * a run calls each through the pointer, nothing looked up; and the counts
 * folded into their producers (above). */
static int cpu_prepare(rt_device *d, const ir_graph *g, const pass_plan *plan, rt_action *actions, int n_actions,
                       void **state, char *err, size_t errlen) {
  (void)d, (void)plan;
  *state = NULL;
  for (int i = 0; i < n_actions; i++) {
    if (actions[i].kind != RT_ACT_KERNEL) continue;
    kernel_fn fn = cpu_kernel(actions[i].node->op);
    if (!fn) {
      rt_errf(err, errlen, "the cpu backend has no kernel for '%s'", ir_op_name(actions[i].node->op));
      return -1;
    }
    actions[i].impl = (void *)fn;
  }
  return fold_prepare(g, state, err, errlen);
}

static int cpu_run(rt_device *d, void *state, const rt_action *a, char *err, size_t errlen) {
  (void)d;
  return run_kernel(state, (kernel_fn)a->impl, a->node, a->in, a->out, err, errlen);
}

const rt_backend rt_cpu_backend = {
    .name = "cpu",
    .host_memory = true,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_move,
    .download = cpu_move,
    .copy = cpu_move,
    .fill = cpu_fill,
    .supports_op = cpu_supports_op,
    .prepare = cpu_prepare,
    .run = cpu_run,
    .release = cpu_release,
};
