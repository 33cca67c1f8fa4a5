/* runtime/cpu.c — the CPU backend: the kernel table and the executor.
 *
 * cpu_kernels is indexed by the op enum (elementwise ops by their kind); an
 * op without an entry is not supported (test_runtime_kernels loops over
 * ops.def and fails on a gap).
 *
 * graph_compute runs the nodes of a verified graph in order. Buffers:
 *  - inputs and params are borrowed from the caller, never written or freed;
 *  - each node's results are allocated just before it runs (zeroed, unless
 *    cpu_overwrites says its kernel writes every element), and an
 *    intermediate is freed right after its last use (precomputed per value;
 *    a result nobody uses is freed right after its node);
 *  - a result may take over an operand's buffer instead (ir_node_may_reuse:
 *    elementwise ops and fused in place, reshape by moving the bytes) when
 *    that operand is an intermediate read by nothing later and not an
 *    output — the first such operand. Inputs and params are never reused,
 *    except those the caller donates (rt_stats.donate_*);
 *  - graph outputs are handed to the caller; an output that is also an
 *    input/param (not donated), or that is listed a second time, is copied.
 * stats->peak_bytes is the peak of live bytes this executor allocated
 * (intermediates and outputs, not the borrowed inputs/params). On any error
 * every buffer it allocated is freed and outputs[] are NULL.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels.h"

/* Kernels of the ops that are not plain elementwise (those run
 * rt_kern_unary / rt_kern_binary by their kind: cpu_kernel). */
static const kernel_fn cpu_kernels[IR_NUM_OPS] = {
    [IR_OP_CONST] = rt_kern_const,
    [IR_OP_IOTA] = rt_kern_iota,
    [IR_OP_WHERE] = rt_kern_where,
    [IR_OP_MATMUL] = rt_kern_matmul,
    [IR_OP_TRANSPOSE] = rt_kern_transpose,
    [IR_OP_RESHAPE] = rt_kern_reshape,
    [IR_OP_BROADCAST] = rt_kern_broadcast,
    [IR_OP_SLICE] = rt_kern_slice,
    [IR_OP_CONCAT] = rt_kern_concat,
    [IR_OP_SPLIT] = rt_kern_split,
    [IR_OP_REDUCE_SUM] = rt_kern_reduce,
    [IR_OP_REDUCE_MEAN] = rt_kern_reduce,
    [IR_OP_REDUCE_MAX] = rt_kern_reduce,
    [IR_OP_SOFTMAX] = rt_kern_softmax,
    [IR_OP_LOG_SOFTMAX] = rt_kern_softmax,
    [IR_OP_LAYERNORM] = rt_kern_layernorm,
    [IR_OP_RMSNORM] = rt_kern_rmsnorm,
    [IR_OP_EMBEDDING] = rt_kern_embedding,
    [IR_OP_CROSS_ENTROPY] = rt_kern_cross_entropy,
    [IR_OP_CAUSAL_MASK] = rt_kern_causal_mask,
    [IR_OP_EINSUM] = rt_kern_einsum,
    /* GRAD has no kernel: the autodiff pass expands it before anything runs */
    [IR_OP_UNSLICE] = rt_kern_unslice,
    [IR_OP_EMBEDDING_GRAD] = rt_kern_embedding_grad,
    [IR_OP_CROSS_ENTROPY_GRAD] = rt_kern_cross_entropy_grad,
    [IR_OP_ATTENTION] = rt_kern_attention,
    [IR_OP_ATTENTION_GRAD] = rt_kern_attention_grad,
    [IR_OP_FUSED] = rt_kern_fused,
    [IR_OP_FUSED_MATMUL] = rt_kern_fused_matmul,
    [IR_OP_ADD_LAYERNORM] = rt_kern_add_layernorm,
};

static kernel_fn cpu_kernel(ir_op op) {
  switch (ir_op_kind_of(op)) {
  case IR_OPK_UNARY: return rt_kern_unary;
  case IR_OPK_BINARY: return rt_kern_binary;
  default: return (unsigned)op < IR_NUM_OPS ? cpu_kernels[op] : NULL;
  }
}

/* Results are allocated without the zero fill, except for the ops whose
 * kernels accumulate into them (IR_OPF_ZEROED in ops.def): every other
 * kernel writes every element of every result (matmul writes the zeros of
 * an empty sum itself); valgrind runs the kernel tests. */
static bool cpu_overwrites(ir_op op) { return !ir_op_has(op, IR_OPF_ZEROED); }

static bool cpu_supports_op(const ir_node *n) {
  return n && (int)n->op >= 0 && n->op < IR_NUM_OPS && cpu_kernel(n->op) != NULL;
}

/* Per-value executor state, indexed by value id. */
typedef struct {
  rt_tensor *t;
  bool borrowed;  /* an input/param tensor of the caller: never freed here */
  bool donated;   /* ... that the caller lets results overwrite (and get back) */
  bool is_output; /* handed to the caller: never freed by the executor */
  int last_use;   /* index of the last node reading it; -1 if none */
} slot;

typedef struct {
  const ir_graph *g;
  slot *slots;
  int n_slots;
  size_t live, peak, allocs;
  int kernels;
  rt_profile *prof; /* NULL unless the caller profiles */
  char *err;
  size_t errlen;
} exec;

static void exec_err(exec *x, const ir_loc *loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void exec_err(exec *x, const ir_loc *loc, const char *fmt, ...) {
  if (!x->err || x->errlen == 0) return;
  int n = 0;
  if (loc && loc->line > 0) {
    const char *file = loc->file ? loc->file : x->g->source_file;
    n = file ? snprintf(x->err, x->errlen, "%s:%d:%d: ", file, loc->line, loc->col)
             : snprintf(x->err, x->errlen, "%d:%d: ", loc->line, loc->col);
    if (n < 0 || (size_t)n >= x->errlen) return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
  va_end(ap);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static slot *slot_of(exec *x, const ir_value *v) {
  return v && v->id >= 0 && v->id < x->n_slots ? &x->slots[v->id] : NULL;
}

/* Allocates v's tensor (zero-filled unless `zeroed` is false), counting it;
 * NULL + a message at loc on failure. */
static rt_tensor *exec_alloc(exec *x, const ir_value *v, const ir_loc *loc, bool zeroed) {
  rt_tensor *t = zeroed ? rt_tensor_new(&v->type) : rt_tensor_new_uninit(&v->type);
  if (!t) {
    char ts[128];
    ir_type_str(&v->type, ts, sizeof ts);
    size_t es = (int)v->type.dtype >= 0 && v->type.dtype < IR_NUM_DTYPES ? ir_dtype_size(v->type.dtype) : 0;
    /* the byte count can exceed size_t only for absurd types: print in double */
    double bytes = (double)es;
    for (int d = 0; d < v->type.rank; d++) bytes *= (double)v->type.dims[d];
    exec_err(x, loc, "out of memory allocating %s (%.0f bytes) for %%%s", ts, bytes,
             rt_value_name(v));
    return NULL;
  }
  x->live += t->nbytes;
  x->allocs++;
  if (x->live > x->peak) x->peak = x->live;
  return t;
}

static void exec_release(exec *x, slot *s) {
  if (!s->t || s->borrowed) return;
  x->live -= s->t->nbytes;
  rt_tensor_free(s->t);
  s->t = NULL;
}

static rt_tensor *copy_tensor(exec *x, const ir_value *v, const rt_tensor *src) {
  rt_tensor *t = exec_alloc(x, v, &v->loc, false);
  if (t && t->nbytes) memcpy(t->data, src->data, t->nbytes);
  return t;
}

/* Binds the caller's inputs/params after checking their types. */
static int bind_borrowed(exec *x, ir_value *const *vals, int n, rt_tensor *const *ts, const bool *donate,
                         const char *what) {
  for (int i = 0; i < n; i++) {
    slot *s = slot_of(x, vals[i]);
    if (!s) {
      exec_err(x, NULL, "%s %d has a bad value id", what, i);
      return -1;
    }
    if (!ts || !ts[i]) {
      exec_err(x, &vals[i]->loc, "no tensor given for %s %%%s", what, rt_value_name(vals[i]));
      return -1;
    }
    if (!ir_type_equal(&ts[i]->type, &vals[i]->type)) {
      char want[128], got[128];
      exec_err(x, &vals[i]->loc, "%s %%%s: expected %s, got %s", what, rt_value_name(vals[i]),
               ir_type_str(&vals[i]->type, want, sizeof want),
               ir_type_str(&ts[i]->type, got, sizeof got));
      return -1;
    }
    s->t = ts[i];
    s->borrowed = true;
    s->donated = donate && donate[i];
  }
  return 0;
}

/* The operand slot whose buffer n's result r takes over, or NULL (see the
 * header comment; passes/memplan.c replays this choice). Slots already
 * handed to an earlier result have no tensor any more. */
static slot *reusable_operand(exec *x, const ir_node *n, int ni, int r) {
  if (!cpu_overwrites(n->op)) return NULL;
  for (int i = 0; i < n->n_in; i++) {
    slot *s = slot_of(x, n->in[i]);
    if (!s->t || s->last_use != ni || s->is_output || !ir_node_may_reuse(n, r, i)) continue;
    if (s->borrowed && !s->donated) continue;
    return s;
  }
  return NULL;
}

/* Runs node n (index ni): allocates its results, runs its kernel, frees
 * operands at their last use. in/out are scratch arrays of n's arity. */
static int run_node(exec *x, const ir_node *n, int ni, const rt_tensor **in, rt_tensor **out) {
  if (!cpu_supports_op(n)) {
    if (n->op == IR_OP_GRAD)
      exec_err(x, &n->loc, "cannot run a grad request: the autodiff pass expands it (was it disabled?)");
    else
      exec_err(x, &n->loc, "the cpu backend has no kernel for '%s'", ir_op_name(n->op));
    return -1;
  }
  for (int i = 0; i < n->n_in; i++) {
    slot *s = slot_of(x, n->in[i]);
    if (!s || !s->t) {
      exec_err(x, &n->loc, "%s: operand %%%s has no value (graph not verified?)", ir_op_name(n->op),
               rt_value_name(n->in[i]));
      return -1;
    }
    in[i] = s->t;
  }
  double t0 = x->prof ? now_s() : 0;
  for (int i = 0; i < n->n_out; i++) {
    slot *s = slot_of(x, n->out[i]);
    if (!s || s->t) {
      exec_err(x, &n->loc, "%s: result %%%s defined twice or bad id", ir_op_name(n->op),
               rt_value_name(n->out[i]));
      return -1;
    }
    slot *reuse = reusable_operand(x, n, ni, i);
    if (reuse) { /* the operand's tensor becomes the result */
      s->t = reuse->t;
      s->borrowed = reuse->borrowed;
      s->donated = reuse->donated;
      s->t->type = n->out[i]->type; /* differs only for reshape */
      reuse->t = NULL;
    } else if (!(s->t = exec_alloc(x, n->out[i], &n->loc, !cpu_overwrites(n->op)))) {
      return -1;
    }
    out[i] = s->t;
  }
  char kmsg[512] = "";
  rt_kctx k = {.node = n, .in = in, .out = out, .err = kmsg, .errlen = sizeof kmsg};
  double t1 = x->prof ? now_s() : 0;
  if (cpu_kernel(n->op)(&k) != 0) {
    exec_err(x, &n->loc, "%s", kmsg);
    return -1;
  }
  if (x->prof) {
    double t2 = now_s();
    x->prof->alloc_seconds += t1 - t0;
    x->prof->seconds[n->op] += t2 - t1;
    x->prof->calls[n->op]++;
  }
  x->kernels++;
  for (int i = 0; i < n->n_in; i++) {
    slot *s = slot_of(x, n->in[i]);
    if (s->last_use == ni && !s->is_output) exec_release(x, s);
  }
  for (int i = 0; i < n->n_out; i++) { /* results nobody reads */
    slot *s = slot_of(x, n->out[i]);
    if (s->last_use < ni && !s->is_output) exec_release(x, s);
  }
  return 0;
}

static int run_nodes(exec *x) {
  const ir_graph *g = x->g;
  int max_args = 1;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ir_node *n = g->nodes[ni];
    if (n->n_in > max_args) max_args = n->n_in;
    if (n->n_out > max_args) max_args = n->n_out;
  }
  const rt_tensor **in = malloc((size_t)max_args * sizeof *in);
  rt_tensor **out = malloc((size_t)max_args * sizeof *out);
  int rc = 0;
  if (!in || !out) {
    exec_err(x, NULL, "out of memory");
    rc = -1;
  }
  for (int ni = 0; ni < g->n_nodes && rc == 0; ni++)
    if (!g->nodes[ni]->dead) rc = run_node(x, g->nodes[ni], ni, in, out);
  free(in);
  free(out);
  return rc;
}

static int cpu_graph_compute(const ir_graph *g, rt_tensor *const *inputs, rt_tensor *const *params,
                             rt_tensor **outputs, rt_stats *stats, char *err, size_t errlen) {
  exec x = {.g = g, .err = err, .errlen = errlen, .prof = stats ? stats->profile : NULL};
  double t_start = x.prof ? now_s() : 0;
  if (err && errlen) err[0] = 0;
  for (int i = 0; i < g->n_outputs; i++) outputs[i] = NULL;
  x.n_slots = ir_graph_id_bound(g); /* every id a value of this graph may carry */
  x.slots = calloc((size_t)(x.n_slots > 0 ? x.n_slots : 1), sizeof *x.slots);
  if (!x.slots) {
    exec_err(&x, NULL, "out of memory");
    return -1;
  }
  for (int i = 0; i < x.n_slots; i++) x.slots[i].last_use = -1;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ir_node *n = g->nodes[ni];
    if (n->dead) continue;
    for (int i = 0; i < n->n_in; i++) {
      slot *s = slot_of(&x, n->in[i]);
      if (s) s->last_use = ni;
    }
  }
  int rc = -1;
  for (int i = 0; i < g->n_outputs; i++) {
    slot *s = slot_of(&x, g->outputs[i].value);
    if (!s) {
      exec_err(&x, NULL, "output \"%s\" has no value", g->outputs[i].name ? g->outputs[i].name : "?");
      goto done;
    }
    s->is_output = true;
  }
  if (bind_borrowed(&x, g->inputs, g->n_inputs, inputs, stats ? stats->donate_inputs : NULL, "input") != 0 ||
      bind_borrowed(&x, g->params, g->n_params, params, stats ? stats->donate_params : NULL, "param") != 0)
    goto done;
  if (run_nodes(&x) != 0) goto done;
  /* Hand over outputs. First the copies (an input/param, or a value listed
   * again), while every slot still holds its tensor; then the originals,
   * which nothing can fail after. */
  for (int i = 0; i < g->n_outputs; i++) {
    const ir_value *v = g->outputs[i].value;
    slot *s = slot_of(&x, v);
    if (!s->t) {
      exec_err(&x, &v->loc, "output \"%s\" (%%%s) was not computed", g->outputs[i].name,
               rt_value_name(v));
      goto done;
    }
    bool repeated = false;
    for (int j = 0; j < i; j++) repeated |= g->outputs[j].value == v;
    if (((s->borrowed && !s->donated) || repeated) && !(outputs[i] = copy_tensor(&x, v, s->t))) goto done;
  }
  for (int i = 0; i < g->n_outputs; i++) {
    slot *s = slot_of(&x, g->outputs[i].value);
    if (!outputs[i]) {
      outputs[i] = s->t;
      s->t = NULL; /* the caller owns it now */
    }
  }
  rc = 0;
done:
  if (rc != 0)
    for (int i = 0; i < g->n_outputs; i++) { /* only copies are here on failure */
      rt_tensor_free(outputs[i]);
      outputs[i] = NULL;
    }
  for (int i = 0; i < x.n_slots; i++)
    if (!x.slots[i].borrowed) rt_tensor_free(x.slots[i].t);
  free(x.slots);
  if (x.prof) x.prof->total_seconds += now_s() - t_start;
  if (stats) {
    stats->peak_bytes = x.peak;
    stats->total_allocs = x.allocs;
    stats->kernels_run = x.kernels;
  }
  return rc;
}

const rt_backend rt_cpu_backend = {
    .name = "cpu",
    .supports_op = cpu_supports_op,
    .graph_compute = cpu_graph_compute,
};
