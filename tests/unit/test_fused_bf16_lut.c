/* tests/unit/test_fused_bf16_lut.c — the CPU fused kernel's tables of
 * unary ops from bf16 to bf16 (runtime/cpu/kern_fused.c bf16_lut), on every
 * one of the 65536 bf16 inputs, against the scalar meaning of the op
 * (ir_eval_unary in double, rounded to bf16): the same bits, every NaN a
 * NaN. Every unary elementwise op the expression grammar takes is checked;
 * at least gelu, gelu_grad, tanh and exp (the bf16 step's activations) are. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "runtime.h"
#include "scalar.h"

int main(void) {
  enum { N = 1 << 16 };
  ir_type t16 = {IR_DT_BF16, 1, {N}};
  rt_tensor *x = rt_tensor_new(&t16);
  uint16_t *xb = x->data;
  for (int i = 0; i < N; i++) xb[i] = (uint16_t)i;
  int checked = 0, named = 0;
  for (int op = 0; op < IR_NUM_OPS; op++) {
    if (!ir_op_is_elementwise((ir_op)op) || ir_op_kind_of((ir_op)op) != IR_OPK_UNARY || op == IR_OP_CAST) continue;
    char text[64], err[256] = "";
    snprintf(text, sizeof text, "(%s $0)", ir_op_name((ir_op)op));
    ir_expr *e = ir_expr_parse(text, false, err, sizeof err);
    if (!e) continue; /* not in the grammar as a plain unary op */
    ir_expr_free(e);
    ir_graph *g = ir_graph_new("lut", NULL);
    ir_value *in = ir_graph_add_input(g, "x", t16, (ir_loc){0});
    ir_attr a = ir_attr_str("expr", text);
    ir_node *n = ir_graph_add_node(g, IR_OP_FUSED, &in, 1, &t16, 1, &a, 1, NULL, (ir_loc){0});
    rt_tensor *y = rt_tensor_new(&t16);
    const rt_tensor *ins[1] = {x};
    int rc = rt_cpu_run_node(n, ins, &y, err, sizeof err);
    if (rc) fprintf(stderr, "%s: %s\n", text, err);
    CHECK_EQ_INT(rc, 0);
    const uint16_t *yb = y->data;
    int bad = 0;
    for (int i = 0; i < N && rc == 0; i++) {
      double want = ir_round_to_dtype(IR_DT_BF16, ir_eval_unary((ir_op)op, (double)ir_bf16_to_f32((uint16_t)i)));
      uint16_t wb = ir_f32_to_bf16((float)want);
      bool ok = isnan(want) ? (yb[i] & 0x7FFFu) > 0x7F80u : yb[i] == wb;
      if (!ok && bad++ < 3)
        fprintf(stderr, "  %s of bf16 %04x: kernel %04x, scalar %04x\n", ir_op_name((ir_op)op), i, yb[i], wb);
    }
    CHECK_EQ_INT(bad, 0);
    checked++;
    named += op == IR_OP_GELU || op == IR_OP_GELU_GRAD || op == IR_OP_TANH || op == IR_OP_EXP;
    rt_tensor_free(y);
    ir_graph_free(g);
  }
  CHECK_EQ_INT(named, 4);
  printf("%d unary ops from bf16 to bf16: the fused kernel equals the scalar meaning on all 65536 inputs\n", checked);
  rt_tensor_free(x);
  return check_done();
}
