/* runtime/kern_einsum.c — general einsum ("ij,jk->ik", "bij,bjk->bik",
 * "ii->i", "ij->" ...).
 *
 * The equation is parsed into labels (letters). Labels of the output index
 * the result; every other label is summed. For each operand and label the
 * kernel precomputes one stride: the sum of the operand's strides over the
 * dims carrying that label (so a repeated label walks a diagonal). Each
 * result element (in parallel) then walks the summed labels' index space
 * with an odometer, multiplying the operands' elements and accumulating in
 * double — sequentially, so the result does not depend on thread count.
 * Without "->" the output is the labels used exactly once, in alphabetical
 * order (numpy's implicit form).
 */
#include <ctype.h>

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

static int label_id(char c, int *ids, ein_plan *p) {
  int slot = islower((unsigned char)c) ? c - 'a' : c - 'A' + 26;
  if (ids[slot] < 0) ids[slot] = p->n_labels++;
  return ids[slot];
}

/* Parses eq against the operand types; 0 or -1 with a message in k->err. */
static int ein_parse(const rt_kctx *k, const char *eq, ein_plan *p) {
  const char *name = rt_value_name(k->node->out[0]);
  int ids[EIN_MAX_LABELS];
  for (int i = 0; i < EIN_MAX_LABELS; i++) ids[i] = -1;
  int count[EIN_MAX_LABELS] = {0};
  memset(p, 0, sizeof *p);
  for (int i = 0; i < EIN_MAX_LABELS; i++) p->size[i] = -1;
  p->n_ops = k->node->n_in;
  if (p->n_ops > EIN_MAX_OPS) {
    rt_kerr(k, "einsum %%%s: more than %d operands", name, EIN_MAX_OPS);
    return -1;
  }
  const char *s = eq;
  for (int op = 0; op < p->n_ops; op++) {
    const ir_type *t = &k->in[op]->type;
    int64_t strides[IR_MAX_RANK], acc = 1;
    for (int d = t->rank - 1; d >= 0; d--) strides[d] = acc, acc *= t->dims[d];
    int d = 0;
    for (; *s && *s != ',' && *s != '-'; s++) {
      if (*s == ' ') continue;
      if (!isalpha((unsigned char)*s) || d >= t->rank) {
        rt_kerr(k, "einsum %%%s: equation '%s' does not match operand %d", name, eq, op);
        return -1;
      }
      int l = label_id(*s, ids, p);
      if (p->size[l] >= 0 && p->size[l] != t->dims[d]) {
        rt_kerr(k, "einsum %%%s: label '%c' has sizes %lld and %lld", name, *s,
                (long long)p->size[l], (long long)t->dims[d]);
        return -1;
      }
      p->size[l] = t->dims[d];
      p->stride[op][l] += strides[d];
      count[l]++;
      d++;
    }
    if (d != t->rank || (op + 1 < p->n_ops) != (*s == ',')) {
      rt_kerr(k, "einsum %%%s: equation '%s' does not match operand %d", name, eq, op);
      return -1;
    }
    if (*s == ',') s++;
  }
  bool in_out[EIN_MAX_LABELS] = {0};
  if (s[0] == '-' && s[1] == '>') {
    for (s += 2; *s; s++) {
      if (*s == ' ') continue;
      int slot = isalpha((unsigned char)*s) ? (islower((unsigned char)*s) ? *s - 'a' : *s - 'A' + 26) : -1;
      if (slot < 0 || ids[slot] < 0 || in_out[ids[slot]] || p->out_rank >= IR_MAX_RANK) {
        rt_kerr(k, "einsum %%%s: bad output labels in '%s'", name, eq);
        return -1;
      }
      in_out[ids[slot]] = true;
      p->out_label[p->out_rank++] = ids[slot];
    }
  } else if (*s) {
    rt_kerr(k, "einsum %%%s: cannot parse '%s'", name, eq);
    return -1;
  } else { /* implicit: labels used once, alphabetically (upper case first, as ASCII) */
    for (int slot = 26; slot < 52; slot++)
      if (ids[slot] >= 0 && count[ids[slot]] == 1 && p->out_rank < IR_MAX_RANK)
        in_out[ids[slot]] = true, p->out_label[p->out_rank++] = ids[slot];
    for (int slot = 0; slot < 26; slot++)
      if (ids[slot] >= 0 && count[ids[slot]] == 1 && p->out_rank < IR_MAX_RANK)
        in_out[ids[slot]] = true, p->out_label[p->out_rank++] = ids[slot];
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
  if (!eq || eq->kind != IR_ATTR_STR || !eq->s) {
    rt_kerr(k, "einsum %%%s: missing 'eq'", rt_value_name(k->node->out[0]));
    return -1;
  }
  ein_plan p;
  if (ein_parse(k, eq->s, &p) != 0) return -1;
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
