/* tests/unit/test_cast_fast.c — the CPU's one-pass f32 <-> bf16 conversion
 * (runtime/cpu/kern_cast.c) against the fused interpreter, bit for bit.
 *
 * Each conversion runs twice on the same operand: as "(cast T $0)" (the
 * fast path) and as the two-result node "(cast T $0); (cast T $0)", which
 * the fast path does not take, so the general interpreter computes the same
 * conversion (bf16 -> f32: its widening load, what the optimizer update
 * uses to read mixed precision's bf16 gradients). The operand holds every class: zeros of both signs,
 * subnormals, the largest finite values (some of which round to infinity
 * in bf16), infinities, quiet and signalling NaNs with payloads, ties at
 * bf16's last bit (even and odd), and a sweep of random bit patterns. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime.h"

/* The first result of the fused node `expr` (n_results results of dtype
 * to) of x, through the CPU kernel table. */
static rt_tensor *convert(rt_tensor *x, ir_dtype to, const char *expr, int n_results) {
  ir_graph *g = ir_graph_new("cast", NULL);
  ir_value *in = ir_graph_add_input(g, "x", x->type, (ir_loc){0});
  ir_type t[2] = {x->type, x->type};
  t[0].dtype = t[1].dtype = to;
  ir_attr e = ir_attr_str("expr", expr);
  ir_node *n = ir_graph_add_node(g, IR_OP_FUSED, &in, 1, t, n_results, &e, 1, NULL, (ir_loc){0});
  rt_tensor *y[2] = {rt_tensor_new(&t[0]), n_results > 1 ? rt_tensor_new(&t[1]) : NULL};
  const rt_tensor *ins[1] = {x};
  char err[256] = "";
  int rc = rt_cpu_run_node(n, ins, y, err, sizeof err);
  if (rc) fprintf(stderr, "%s: %s\n", expr, err);
  CHECK_EQ_INT(rc, 0);
  rt_tensor_free(y[1]);
  ir_graph_free(g);
  return y[0];
}

static int same_bits(const rt_tensor *a, const rt_tensor *b) {
  int64_t n = (int64_t)(a->nbytes / ir_dtype_size(a->type.dtype)), bad = 0;
  size_t es = ir_dtype_size(a->type.dtype);
  for (int64_t i = 0; i < n; i++)
    if (memcmp((const char *)a->data + i * es, (const char *)b->data + i * es, es) != 0) {
      if (bad++ < 5) {
        uint32_t x = 0, y = 0;
        memcpy(&x, (const char *)a->data + i * es, es);
        memcpy(&y, (const char *)b->data + i * es, es);
        fprintf(stderr, "  element %lld: fast %08x, interpreter %08x\n", (long long)i, x, y);
      }
    }
  return bad == 0;
}

int main(void) {
  enum { N = 1 << 16 };
  static const uint32_t special[] = {
      0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00400000, 0x00008000, 0x00018000, /* zeros, subnormals */
      0x7f7fffff, 0xff7fffff, 0x7f7f7fff, 0x7f7f8000, 0x7f7f8001, 0x7f7e8000,             /* near the largest */
      0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa00000, 0x7f812345, /* inf, NaNs */
      0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0xbf808000, 0x00808000, 0x00818000, /* ties, near ties */
  };
  int ns = (int)(sizeof special / sizeof special[0]);
  ir_type t32 = {IR_DT_F32, 1, {N}}, t16 = {IR_DT_BF16, 1, {N}};
  rt_tensor *x = rt_tensor_new(&t32), *h = rt_tensor_new(&t16);
  uint32_t *xb = x->data;
  uint16_t *hb = h->data;
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < N; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    xb[i] = i < ns ? special[i] : (uint32_t)(s >> 11);
    hb[i] = i < ns ? (uint16_t)(special[i] >> 16) : (uint16_t)i; /* every pattern */
  }
  rt_tensor *a = convert(x, IR_DT_BF16, "(cast bf16 $0)", 1), *b = convert(x, IR_DT_BF16, "(cast bf16 $0); (cast bf16 $0)", 2);
  CHECK(same_bits(a, b));
  rt_tensor *c = convert(h, IR_DT_F32, "(cast f32 $0)", 1), *d = convert(h, IR_DT_F32, "(cast f32 $0); (cast f32 $0)", 2);
  CHECK(same_bits(c, d));
  printf("f32 -> bf16 and bf16 -> f32 (every bf16 pattern): the one-pass conversion equals the interpreter on %d values\n", N);
  rt_tensor_free(a), rt_tensor_free(b), rt_tensor_free(c), rt_tensor_free(d);
  rt_tensor_free(x), rt_tensor_free(h);
  return check_done();
}
