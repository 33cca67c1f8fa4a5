/* codegen/emit_gemm.c — matmul and fused_matmul: cuBLASLt products.
 *
 * a[..., M, K] @ b[..., K, N] (transpose_a / transpose_b read a stored
 * [..., K, M] / b stored [..., N, K], as BLAS's flags do) becomes row-major
 * cg_gemm actions (the backend turns them into cuBLASLt's column-major
 * call). Batch dims broadcast: after merging the batch dims both operands
 * walk contiguously, one strided-batched product covers the innermost
 * batch dim (stride 0 for an operand broadcast along it) and one action is
 * issued per index of the outer ones; x @ W with W shared by every batch
 * and x not transposed is a single [batches * M, K] @ [K, N] product.
 *
 * fused_matmul's epilogue goes into cuBLASLt when it is one the library
 * has: (add $0 $1) with a bias along N (BIAS), (relu (add $0 $1))
 * (RELU_BIAS), (gelu (add $0 $1)) (GELU_BIAS), (mul $0 (gelu_grad $1))
 * with $1 of the product's shape (DGELU, the GELU MLP's backward). Its
 * elementwise kernel is generated as well (the action's fallback_kernel),
 * for a cuBLASLt that finds no algorithm with that epilogue. Any other
 * epilogue is a plain product followed by that kernel, which reads the
 * product in place. (Products are of floats only: matmul's typing rule.)
 *
 * A weight-gradient matmul dW = A^T X that fuse-transpose paired with the
 * bias gradient db = reduce_sum(X over its rows) (a deferred earlier step,
 * cg_ctx.partner_step) writes db in its epilogue (CG_EPI_BGRAD_B: the column
 * sums of B, cuBLASLt's BGRADA in its column-major terms), its fallback a
 * kernel of column sums in double (the cpu's reduce_sum order), so X is
 * read once for both.
 */
#include <stdlib.h>
#include <string.h>

#include "emit.h"

enum { THREADS = 256 };

/* The shape and epilogue decisions are the cost model's (analysis/launches.c),
 * which counts the products they make. */
_Static_assert((int)CG_EPI_BIAS == (int)PASS_EPI_BIAS && (int)CG_EPI_RELU_BIAS == (int)PASS_EPI_RELU_BIAS &&
                   (int)CG_EPI_GELU_BIAS == (int)PASS_EPI_GELU_BIAS && (int)CG_EPI_DGELU == (int)PASS_EPI_DGELU,
               "cg_epilogue starts with pass_epilogue's members");

/* The bias gradient's fallback: bias[j] = sum over the k rows of B (operand
 * 1, [k, n]) of column j, in double, rounded once; bias is result 0 of the
 * deferred step `back` steps earlier. A block per 32 columns: lane l of
 * warp w adds rows w, w + 8, ... of column 32 b + l (each warp reads 32
 * neighbouring columns of a row), then warp 0 adds the 8 warps' sums in
 * warp order: the same order every run, and k / 8 rows per thread (it was a
 * thread per column over all k rows: 3 blocks and 16,384 serial rows for
 * gpt2-124m's 768-wide biases, ~1 ms a call where cuBLASLt has no BGRADA). */
static int bgrad_kernel(cg_ctx *c, const ir_node *n, int back, int64_t k, int64_t nn, int *kernel, int64_t *grid) {
  const char *t = cg_ctype(n->in[1]->type.dtype);
  int kk = cg_kernel_begin(c, "bgrad");
  c->p->kernels[kk].block = THREADS;
  cg_src(c, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const %s *b, %s *bias) {\n", THREADS,
         c->p->kernels[kk].name, t, t);
  cg_add_arg(c, kk, (cg_ref){.kind = CG_REF_IN, .index = 1});
  cg_add_arg(c, kk, (cg_ref){.kind = CG_REF_OUT, .index = 0, .back = back});
  cg_src(c, "  TGC_SHARED(double, part, %d);\n", THREADS);
  cg_src(c, "  const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32;\n");
  cg_src(c, "  const long long j = (long long)blockIdx.x * 32 + lane;\n");
  cg_src(c, "  double s = 0;\n");
  cg_src(c, "  if (j < %lldLL)\n", (long long)nn);
  cg_src(c, "    for (long long r = warp; r < %lldLL; r += %d) s += tgc_d(b[r * %lldLL + j]);\n", (long long)k,
         THREADS / 32, (long long)nn);
  cg_src(c, "  part[threadIdx.x] = s;\n  __syncthreads();\n");
  cg_src(c, "  if (warp == 0 && j < %lldLL) {\n    double t = 0;\n", (long long)nn);
  cg_src(c, "    for (int w = 0; w < %d; w++) t += part[w * 32 + lane];\n", THREADS / 32);
  cg_src(c, "    bias[j] = tgc_round<%s>(t);\n  }\n", t);
  cg_kernel_end(c, kk);
  *kernel = kk;
  *grid = (nn + 31) / 32;
  return 0;
}

/* The epilogue kernel: $0 = the product in out0 (read in place), $k = operand k + 1. */
static int epilogue_kernel(cg_ctx *c, const ir_node *n, const ir_expr *e, int *kernel, int64_t *grid) {
  enum { MAX = 64 };
  if (n->n_in - 1 > MAX) return cg_fail(c, "too many epilogue operands");
  cg_operand_map maps[MAX];
  char names[MAX][16];
  const ir_type *out = &n->out[0]->type;
  maps[0] = (cg_operand_map){.param = "out0", .dt = out->dtype};
  cg_broadcast_map(out, out->rank, out->dims, &maps[0]);
  for (int i = 2; i < n->n_in; i++) {
    snprintf(names[i - 1], sizeof names[i - 1], "in%d", i);
    maps[i - 1] = (cg_operand_map){.param = names[i - 1], .dt = n->in[i]->type.dtype};
    cg_broadcast_map(&n->in[i]->type, out->rank, out->dims, &maps[i - 1]);
  }
  ir_dtype res = out->dtype;
  return cg_emit_map_kernel(c, "epilogue", out, &res, 1, e, maps, n->n_in - 1, kernel, grid);
}

int cg_emit_matmul(cg_ctx *c, const ir_node *n) {
  if (n->n_in < 2) return cg_fail(c, "needs two operands");
  const ir_type *at = &n->in[0]->type, *bt = &n->in[1]->type, *ot = &n->out[0]->type;
  bool ta = ir_node_attr_int(n, "transpose_a", 0) != 0, tb = ir_node_attr_int(n, "transpose_b", 0) != 0;
  pass_mm_shape s;
  pass_matmul_shape(at, bt, ta, tb, &s);
  const ir_expr *e = NULL;
  if (n->op == IR_OP_FUSED_MATMUL) {
    const ir_attr *a = ir_node_attr(n, "expr");
    if (!a || !a->expr) return cg_fail(c, "no parsed expr attribute");
    e = a->expr;
  }
  if (cg_numel(ot) == 0) return 0;
  ir_dtype dt = ot->dtype;
  if (dt != IR_DT_F32 && dt != IR_DT_F64 && dt != IR_DT_BF16 && dt != IR_DT_F16)
    return cg_fail(c, "%s products are not floating-point", ir_dtype_name(dt)); /* the typing rule refuses them */
  bool blas = true;
  if (s.k == 0) { /* an empty sum: zeros, then the epilogue */
    cg_memset(c, (cg_ref){.kind = CG_REF_OUT, .index = 0}, (size_t)cg_numel(ot) * ir_dtype_size(dt));
    blas = false;
  }
  cg_epilogue epi = blas ? (cg_epilogue)pass_matmul_epilogue(n) : CG_EPI_NONE;
  int fk = -1;
  int64_t fgrid = 0;
  if (e && epilogue_kernel(c, n, e, &fk, &fgrid) != 0) return -1;
  int node = c->plan->steps[c->step].node, bstep = c->partner_step && !e ? c->partner_step[node] : -1;
  cg_ref bgrad = {.kind = CG_REF_OUT, .index = 0, .back = c->step - bstep};
  if (bstep >= 0 && !blas) /* no rows: the bias gradient is zeros */
    cg_memset(c, bgrad, (size_t)s.n * ir_dtype_size(dt));
  if (bstep >= 0 && blas) {
    epi = CG_EPI_BGRAD_B;
    if (bgrad_kernel(c, n, c->step - bstep, s.k, s.n, &fk, &fgrid) != 0) return -1;
  }
  if (blas) {
    cg_gemm g = {.dtype = dt, .trans_a = ta, .trans_b = tb, .m = s.m, .n = s.n, .k = s.k,
                 .lda = ta ? s.m : s.k, .ldb = tb ? s.k : s.n, .ldc = s.n, .batch = 1,
                 .a = {CG_REF_IN, 0, 0}, .b = {CG_REF_IN, 1, 0}, .c = {CG_REF_OUT, 0, 0}, .epilogue = epi,
                 .fallback_kernel = epi != CG_EPI_NONE ? fk : -1, .fallback_grid = (unsigned)fgrid};
    if (epi == CG_EPI_BIAS || epi == CG_EPI_GELU_BIAS || epi == CG_EPI_RELU_BIAS) g.bias = (cg_ref){.kind = CG_REF_IN, .index = 2};
    if (epi == CG_EPI_DGELU) g.aux = (cg_ref){.kind = CG_REF_IN, .index = 2};
    if (epi == CG_EPI_BGRAD_B) g.bias = bgrad;
    size_t es = ir_dtype_size(dt);
    int inner = s.inner; /* the strided-batch dim; the outer ones get an action per index */
    if (s.rows_merged) g.m = s.m * s.ext[0]; /* x @ W: one product over every row */
    if (inner >= 0) {
      g.batch = s.ext[inner];
      g.stride_a = s.sa[inner] * s.m * s.k, g.stride_b = s.sb[inner] * s.k * s.n, g.stride_c = s.sc[inner] * s.m * s.n;
    }
    for (int64_t o = 0; o < s.calls; o++) {
      cg_gemm gi = g;
      int64_t q = o, pa = 0, pb = 0, pc = 0;
      for (int d = inner - 1; d >= 0; d--) {
        int64_t x = q % s.ext[d];
        q /= s.ext[d];
        pa += x * s.sa[d] * s.m * s.k, pb += x * s.sb[d] * s.k * s.n, pc += x * s.sc[d] * s.m * s.n;
      }
      gi.a.offset = (size_t)pa * es, gi.b.offset = (size_t)pb * es, gi.c.offset = (size_t)pc * es;
      if (epi == CG_EPI_DGELU) gi.aux.offset = (size_t)pc * es;
      cg_gemm_action(c, &gi);
    }
    if (e && epi == CG_EPI_NONE && fk >= 0) cg_launch(c, fk, fgrid, 1, THREADS, 0);
    return 0;
  }
  if (e && fk >= 0) cg_launch(c, fk, fgrid, 1, THREADS, 0);
  return 0;
}
