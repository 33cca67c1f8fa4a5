/* runtime/cpu/cpu.c — the CPU backend: host memory and the kernel table.
 *
 * Device memory is host memory (256-byte aligned), so host tensors are
 * bound without copies. prepare binds each kernel action of a program to
 * its node's kernel (kern_*.c) and run calls it: the
 * table below is indexed by the op enum, elementwise ops run by their kind;
 * an op without an entry is not supported (test_runtime_kernels loops over
 * ops.def and fails on a gap). Scheduling, buffers and in-place execution
 * are the executor's (exec.c) and the memory plan's (analysis/memplan.c).
 * The backend keeps no state per program.
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

/* ---- running a node ---- */

int rt_cpu_run_node(const ir_node *n, const rt_tensor *const *in, rt_tensor *const *out, char *err, size_t errlen) {
  if (!cpu_supports_op(n)) {
    rt_errf(err, errlen, "the cpu backend has no kernel for '%s'", ir_op_name(n->op));
    return -1;
  }
  rt_kctx k = {.node = n, .in = in, .out = out, .err = err, .errlen = errlen};
  return cpu_kernel(n->op)(&k);
}

/* A program's kernel actions, bound to their entries of the kernel table:
 * a run calls each through the pointer, nothing looked up. */
static int cpu_prepare(rt_device *d, const ir_graph *g, const pass_plan *plan, rt_action *actions, int n_actions,
                       void **state, char *err, size_t errlen) {
  (void)d, (void)g, (void)plan;
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
  return 0;
}

static int cpu_run(rt_device *d, void *state, const rt_action *a, char *err, size_t errlen) {
  (void)d, (void)state;
  rt_kctx k = {.node = a->node, .in = a->in, .out = a->out, .err = err, .errlen = errlen};
  return ((kernel_fn)a->impl)(&k);
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
};
