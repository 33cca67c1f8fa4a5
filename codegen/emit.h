/* codegen/emit.h — private to codegen/: what lower.c (the driver) shares
 * with the per-op emitters (emit_*.c). Not part of the layer's interface
 * (codegen.h is).
 *
 * The driver walks the plan's steps; for each node it calls the node's
 * emitter (the table in lower.c, indexed by op), which appends CUDA C to
 * the program's source (cg_kernel_begin / cg_sig_* / cg_kernel_end) and
 * actions to the step (cg_launch, cg_gemm_action, cg_copy, cg_memset).
 * Every kernel takes, as pointers and in order, the node's operands
 * (in0, in1, ...), its results (out0, ...) and, when it asks for one, the
 * workspace (ws): the backend passes the addresses of the tensors of the
 * executor's kernel action (rt_action). Sizes are constants in the source. */
#ifndef TGC_CG_EMIT_H
#define TGC_CG_EMIT_H

#include <stdarg.h>

#include "codegen.h"

/* A growable string. */
typedef struct {
  char *s;
  size_t len, cap;
  bool oom;
} cg_buf;
void cg_buf_printf(cg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cg_buf_free(cg_buf *b);

typedef struct cg_ctx {
  const ir_graph *g;
  const pass_plan *plan;
  cg_program *p;
  cg_buf src;
  const ir_node *node;   /* the node being lowered */
  int step;              /* its plan step */
  int kernel;            /* the kernel being written (-1 none) */
  char **names;          /* kernel names so far (unique) */
  int n_names, cap_names;
  int cap_kernels, cap_args, cap_actions, cap_chunks; /* of the program's arrays */
  int *uses;             /* by value id: reads by live nodes and graph outputs (ir_use_counts) */
  int *partner_step;     /* by node index: the (deferred) earlier step whose result this node's kernels compute
                          * too: a reduce_sum {in_product} in a matmul's epilogue (pass_bias_grad_product), a
                          * cross_entropy {with_grad} in its gradient's kernel (pass_cross_entropy_grad_of);
                          * else -1; NULL: none */
  int n_uses;
  char *err;
  size_t errlen;
  bool failed;
  struct cg_part { int step, index; double bytes; } *parts; /* cg_reads_part's, in step order */
  int n_parts, cap_parts;
  double *moves;         /* by step: cg_step_moves's figure, or -1 */
} cg_ctx;

typedef int (*cg_emit_fn)(cg_ctx *c, const ir_node *n);

/* ---- lower.c: building the program ---- */
/* Starts a kernel for the current node: a unique name from its first
 * result's name (+ suffix), the comment lines (the IR line, "// from
 * FILE:LINE"). Returns the kernel index. */
int cg_kernel_begin(cg_ctx *c, const char *suffix);
/* The signature: extern "C" __global__ void __launch_bounds__(threads)
 * NAME(operands..., results..., [ws]) {  — all the node's operands and
 * results as typed pointers (const for operands), in0.. / out0..; the
 * workspace as `unsigned char *ws` when workspace is true. */
void cg_kernel_signature(cg_ctx *c, int kernel, int threads, bool workspace);
/* The same with only operands first_in..first_in+n_in-1 (keeping their
 * names in<i>), and the results only when results is true: a node with
 * more operands than one kernel's 4 KiB of parameters holds. */
void cg_kernel_signature_part(cg_ctx *c, int kernel, int threads, int first_in, int n_in, bool results, bool workspace);
void cg_kernel_end(cg_ctx *c, int kernel);
/* One more pointer argument of kernel (in its signature's order). */
void cg_add_arg(cg_ctx *c, int kernel, cg_ref r);
/* Some node reads v, or it is a graph output (else a kernel need not store it). */
bool cg_value_live(const cg_ctx *c, const ir_value *v);
/* emit_group.c: the kernel and launch of a multi-tensor group of count
 * steps from first (analysis's pass_group_size finds them). A fused node
 * with {nonfinite} always runs so, a group of one too (its count). */
int cg_emit_group(cg_ctx *c, int first, int count);
/* Actions of the current step. */
void cg_launch(cg_ctx *c, int kernel, int64_t grid_x, int64_t grid_y, unsigned block, unsigned smem_dynamic);
void cg_gemm_action(cg_ctx *c, const cg_gemm *gm);
void cg_copy(cg_ctx *c, cg_ref dst, cg_ref src, size_t bytes);
void cg_memset(cg_ctx *c, cg_ref dst, size_t bytes);
/* The current step's kernel reads only `bytes` of operand `index` (not all
 * of it): what cg_step.bytes counts for that operand. */
void cg_reads_part(cg_ctx *c, int index, double bytes);
/* The current step's actions move `bytes` in all (each action's operands
 * and results counted, the workspace not): cg_step.bytes for an emitter
 * whose actions touch a tensor more than once. */
void cg_step_moves(cg_ctx *c, double bytes);
/* The workspace must hold at least bytes (kernels of the step read it at offset 0). */
void cg_need_workspace(cg_ctx *c, size_t bytes);
/* Appends to the source. */
void cg_src(cg_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A generator failure (an op or shape this lowering does not handle):
 * "cannot lower %value (op): why". Returns -1. */
int cg_fail(cg_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- emit_multi.c ---- */
/* count_nonfinite (of several operands) and sum_squares: partials per chunk, then one total. */
int cg_emit_multi_reduce(cg_ctx *c, const ir_node *n);

/* ---- types ---- */
const char *cg_ctype(ir_dtype t);          /* "float", "__nv_bfloat16", "long long", "unsigned char" (bool) ... */
const char *cg_acctype(ir_dtype t);        /* the arithmetic type: "float" or "double" */
int64_t cg_numel(const ir_type *t);
/* Grid size for n items of `per_block` each (at least 1, capped for grid-stride loops). */
int64_t cg_blocks(int64_t n, int64_t per_block);
/* A double as a C literal of the arithmetic type of dt ("1.5f", "-INF": tgc_inf_f()...). */
void cg_literal(char *buf, size_t len, double v, ir_dtype dt);

/* ---- emit_elementwise.c ---- */
/* An operand of a map kernel: element (c_0, ..., c_{R-1}) of the result
 * reads element base + sum_d c_d stride[d] of pointer `param` ("in0",
 * "out0", ...), of dtype dt. */
typedef struct {
  const char *param;
  ir_dtype dt;
  int64_t base;
  int64_t stride[IR_MAX_RANK];
} cg_operand_map;
/* The dtype of each instruction of e (ir/infer.c's rules) into dt[0..n_ins). */
void cg_expr_dtypes(const ir_expr *e, const cg_operand_map *maps, int n_maps, ir_dtype *dt);
/* The instructions of e the first n_res results need, one temporary each
 * (v<i>, of its dtype), operand k read as operand_val[k]: the body of a lane loop. */
void cg_emit_expr_lanes(cg_ctx *c, const ir_expr *e, const ir_dtype *dt, const char *const *operand_val, int n_res);
/* e has an f64 op that is a subroutine call on a GPU (division, square
 * root, transcendental): such kernels run one element per thread (two
 * lanes of them spill on sm_80). */
bool cg_expr_f64_calls(const ir_expr *e, const ir_dtype *dt);
/* The strides of t broadcast numpy-style against a result of rank r, dims: 0 along broadcast dims. */
void cg_broadcast_map(const ir_type *t, int r, const int64_t *dims, cg_operand_map *m);
/* A kernel over every element of results of type out (n_res results
 * out0..): result k = expression e's result k over operands maps[0..n),
 * computed with each op's dtype (tgc_ops.h). e NULL: result 0 = operand 0
 * converted. Vectorized (16-byte accesses) when every access is
 * contiguous or uniform. Writes the whole kernel and its launch; 0, or -1
 * after cg_fail. */
int cg_emit_map(cg_ctx *c, const char *suffix, const ir_type *out, const ir_dtype *res_dt, int n_res, const ir_expr *e,
                const cg_operand_map *maps, int n_maps);
/* The same kernel without a launch: its index in *kernel (-1 when out has
 * no elements) and its grid in *grid (blocks of 256 threads). */
int cg_emit_map_kernel(cg_ctx *c, const char *suffix, const ir_type *out, const ir_dtype *res_dt, int n_res,
                       const ir_expr *e, const cg_operand_map *maps, int n_maps, int *kernel, int64_t *grid);

#endif
