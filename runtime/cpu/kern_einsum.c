/* runtime/cpu/kern_einsum.c — general einsum ("ij,jk->ik", "bij,bjk->bik",
 * "ii->i", "ij->" ...).
 *
 * The equation comes parsed (ir/expr.c: labels per term). Labels of the
 * output index the result; every other label is summed. For each operand and label the
 * kernel precomputes one stride: the sum of the operand's strides over the
 * dims carrying that label (so a repeated label walks a diagonal). Each
 * result element (in parallel) then walks the summed labels' index space
 * with an odometer, multiplying the operands' elements and accumulating in
 * double — sequentially, so the result does not depend on thread count.
 * (The frontend writes numpy's implicit form out: every equation here has
 * its "->".)
 */
#include "kernels.h"

#define EIN_MAX_LABELS 52
#define EIN_MAX_OPS 16

typedef struct {
  int n_ops;
  int n_labels;                                /* distinct labels */
  int64_t size[EIN_MAX_LABELS];                /* extent of each label */
  int out_rank;
  int out_label[IR_MAX_RANK];                  /* label of each result dim */
  int n_sum;
  int sum_label[EIN_MAX_LABELS];               /* labels summed over */
  int64_t stride[EIN_MAX_OPS][EIN_MAX_LABELS]; /* per operand, per label */
} ein_plan;

/* The plan of equation e (ir/expr.c's structure) against the operand
 * types: labels numbered in order of first appearance; 0 or -1 with a
 * message in k->err (the graph may be unverified). */
static int ein_plan_of(const rt_kctx *k, const ir_einsum *e, const char *eq, ein_plan *p) {
  const char *name = rt_value_name(k->node->out[0]);
  int ids[EIN_MAX_LABELS];
  for (int i = 0; i < EIN_MAX_LABELS; i++) ids[i] = -1;
  memset(p, 0, sizeof *p);
  for (int i = 0; i < EIN_MAX_LABELS; i++) p->size[i] = -1;
  p->n_ops = k->node->n_in;
  if (p->n_ops > EIN_MAX_OPS) {
    rt_kerr(k, "einsum %%%s: more than %d operands", name, EIN_MAX_OPS);
    return -1;
  }
  if (e->n_terms != p->n_ops) {
    rt_kerr(k, "einsum %%%s: equation '%s' has %d terms for %d operands", name, eq, e->n_terms, p->n_ops);
    return -1;
  }
  for (int op = 0; op < p->n_ops; op++) {
    const ir_type *t = &k->in[op]->type;
    int len = e->start[op + 1] - e->start[op];
    if (len != t->rank) {
      rt_kerr(k, "einsum %%%s: equation '%s' does not match operand %d", name, eq, op);
      return -1;
    }
    int64_t strides[IR_MAX_RANK], acc = 1;
    for (int d = t->rank - 1; d >= 0; d--) strides[d] = acc, acc *= t->dims[d];
    for (int d = 0; d < len; d++) {
      int slot = e->labels[e->start[op] + d];
      if (ids[slot] < 0) ids[slot] = p->n_labels++;
      int l = ids[slot];
      if (p->size[l] >= 0 && p->size[l] != t->dims[d]) {
        rt_kerr(k, "einsum %%%s: label '%c' has sizes %lld and %lld", name, ir_einsum_letter(slot),
                (long long)p->size[l], (long long)t->dims[d]);
        return -1;
      }
      p->size[l] = t->dims[d];
      p->stride[op][l] += strides[d];
    }
  }
  bool in_out[EIN_MAX_LABELS] = {0};
  for (int d = 0; d < e->out_len; d++) {
    int l = ids[e->out[d]];
    if (l < 0 || in_out[l] || p->out_rank >= IR_MAX_RANK) {
      rt_kerr(k, "einsum %%%s: bad output labels in '%s'", name, eq);
      return -1;
    }
    in_out[l] = true;
    p->out_label[p->out_rank++] = l;
  }
  for (int l = 0; l < p->n_labels; l++)
    if (!in_out[l]) p->sum_label[p->n_sum++] = l;
  const ir_type *ot = &k->out[0]->type;
  bool ok = ot->rank == p->out_rank;
  for (int d = 0; ok && d < ot->rank; d++) ok = ot->dims[d] == p->size[p->out_label[d]];
  if (!ok) {
    rt_kerr(k, "einsum %%%s: result type does not match '%s'", name, eq);
    return -1;
  }
  return 0;
}

int rt_kern_einsum(const rt_kctx *k) {
  const ir_attr *eq = ir_node_attr(k->node, "eq");
  if (!eq || eq->kind != IR_ATTR_STR || !eq->einsum) {
    rt_kerr(k, "einsum %%%s: missing or malformed 'eq'", rt_value_name(k->node->out[0]));
    return -1;
  }
  ein_plan p;
  if (ein_plan_of(k, eq->einsum, eq->s, &p) != 0) return -1;
  rt_tensor *out = k->out[0];
  int64_t nout = rt_numel(&out->type), nsum = 1;
  for (int i = 0; i < p.n_sum; i++) nsum *= p.size[p.sum_label[i]];
  ir_dtype odt = out->type.dtype;
#pragma omp parallel for schedule(static) if (nout * nsum > RT_PAR_MIN && nout > 1)
  for (int64_t o = 0; o < nout; o++) {
    int64_t off[EIN_MAX_OPS] = {0}, rem = o;
    for (int d = p.out_rank - 1; d >= 0; d--) {
      int l = p.out_label[d];
      int64_t i = rem % p.size[l];
      rem /= p.size[l];
      for (int op = 0; op < p.n_ops; op++) off[op] += i * p.stride[op][l];
    }
    int64_t idx[EIN_MAX_LABELS] = {0};
    double acc = 0;
    for (int64_t r = 0; r < nsum; r++) {
      double prod = 1;
      for (int op = 0; op < p.n_ops; op++) prod *= rt_load(k->in[op]->type.dtype, k->in[op]->data, off[op]);
      acc += prod;
      for (int s = p.n_sum - 1; s >= 0; s--) { /* odometer, last label fastest */
        int l = p.sum_label[s];
        for (int op = 0; op < p.n_ops; op++) off[op] += p.stride[op][l];
        if (++idx[s] < p.size[l]) break;
        for (int op = 0; op < p.n_ops; op++) off[op] -= p.stride[op][l] * p.size[l];
        idx[s] = 0;
      }
    }
    rt_store(odt, out->data, o, acc);
  }
  return 0;
}
