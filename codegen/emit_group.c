/* codegen/emit_group.c — multi-tensor launches: consecutive fused nodes of
 * one expression over tensors of different sizes, as one kernel.
 *
 * The optimizer's update graph is, after fuse-elementwise, one fused node
 * per parameter with the same expression (Adam: the clipped gradient, m, v
 * and the new parameter from g, m, v, p and a few scalars). Launched one by
 * one that is a kernel per parameter tensor (148 for GPT-2 small), most of
 * them tiny; as PyTorch's multi_tensor_apply does, the group runs as one
 * kernel whose blocks are split between the tensors: block b finds its
 * tensor by comparing with the running block counts (constants), and
 * walks that tensor with a grid stride of its share of blocks.
 *
 * A group is a run of consecutive plan steps whose fused nodes have the
 * same expression text, operand and result dtypes, whose operands are each
 * either the whole shape of the results (read contiguously) or one element
 * (uniform, e.g. the step size), whose results are contiguous, that read
 * nothing another member writes, and whose live buffers (the plan's
 * places) do not overlap another member's: computing them at once is then
 * the same as one after another. The rule is analysis's pass_group_size
 * (analysis/launches.c), which cg_lower asks and the cost model counts
 * launches by: one copy. Every step but the last is deferred
 * (cg_step.deferred: the backend keeps its addresses); the last launches
 * the kernel, its arguments reaching back to the deferred steps
 * (cg_ref.back). At most 32 tensors per launch, so the pointers stay under
 * 4 KiB of kernel parameters.
 */
#include <stdlib.h>
#include <string.h>

#include "emit.h"

enum { THREADS = 256 };

static const ir_attr *expr_attr(const ir_node *n) {
  const ir_attr *a = n->op == IR_OP_FUSED ? ir_node_attr(n, "expr") : NULL;
  return a && a->expr && a->s ? a : NULL;
}

int cg_emit_group(cg_ctx *c, int first, int count) {
  const pass_plan *p = c->plan;
  const ir_node *n0 = c->g->nodes[p->steps[first].node];
  const ir_expr *e = expr_attr(n0)->expr;
  const ir_attr *nf = NULL; /* a member's last result counts these results' Inf / NaN (members may not count) */
  for (int m = 0; m < count && !nf; m++) nf = ir_node_attr(c->g->nodes[p->steps[first + m].node], "nonfinite");
  int ni = n0->n_in, no = ir_fused_results(n0);
  unsigned counted = 0;
  for (int i = 0; nf && i < nf->n; i++) counted |= 1u << nf->ints[i];
  /* one vector width for every member (each tensor starts 256-byte aligned) */
  size_t widest = 0;
  for (int i = 0; i < ni; i++)
    if (cg_numel(&n0->in[i]->type) > 1 && ir_dtype_size(n0->in[i]->type.dtype) > widest) widest = ir_dtype_size(n0->in[i]->type.dtype);
  for (int r = 0; r < no; r++)
    if (ir_dtype_size(n0->out[r]->type.dtype) > widest) widest = ir_dtype_size(n0->out[r]->type.dtype);
  int W = (int)(16 / (widest ? widest : 16));
  for (int k = 0; k < count; k++)
    while (W > 1 && cg_numel(&c->g->nodes[p->steps[first + k].node]->out[0]->type) % W) W /= 2;

  cg_operand_map maps[24];
  char names[24][16];
  for (int i = 0; i < ni; i++) {
    snprintf(names[i], sizeof names[i], "in%d", i);
    maps[i] = (cg_operand_map){.param = names[i], .dt = n0->in[i]->type.dtype};
  }
  ir_dtype *dt = malloc((size_t)(e->n_ins > 0 ? e->n_ins : 1) * sizeof *dt);
  if (!dt) return cg_fail(c, "out of memory");
  cg_expr_dtypes(e, maps, ni, dt);
  if (cg_expr_f64_calls(e, dt)) W = 1; /* f64 subroutine ops: one element per thread (emit_elementwise.c) */
  /* the element function, shared by the members */
  int k = cg_kernel_begin(c, "group");
  const char *kname = c->p->kernels[k].name;
  if (count > 1) cg_src(c, "// ... and %d more tensors of the same expression (a multi-tensor launch)\n", count - 1);
  cg_src(c, "static __device__ __forceinline__ %s %s_elems(", nf ? "unsigned long long" : "void", kname);
  for (int i = 0; i < ni; i++) cg_src(c, "const %s *in%d, ", cg_ctype(n0->in[i]->type.dtype), i);
  for (int r = 0; r < no; r++) cg_src(c, "%s *out%d, ", cg_ctype(n0->out[r]->type.dtype), r);
  cg_src(c, "long long n, long long g0, long long stride) {\n");
  if (nf) cg_src(c, "  unsigned long long bad = 0;\n");
  cg_src(c, "  for (long long g = g0; g < n / %d; g += stride) {\n    const long long i = g * %d;\n", W, W);
  char vals[24][24];
  const char *val[24];
  for (int i = 0; i < ni; i++) {
    const char *ct = cg_ctype(n0->in[i]->type.dtype);
    if (cg_numel(&n0->in[i]->type) == 1) {
      cg_src(c, "    const %s a%d = in%d[0];\n", ct, i, i);
      snprintf(vals[i], sizeof vals[i], "a%d", i);
    } else {
      cg_src(c, "    %s a%d[%d];\n    tgc_vload<%d>(in%d + i, a%d);\n", ct, i, W, W, i, i);
      snprintf(vals[i], sizeof vals[i], "a%d[l]", i);
    }
    val[i] = vals[i];
  }

  for (int r = 0; r < no; r++) cg_src(c, "    %s r%d[%d];\n", cg_ctype(n0->out[r]->type.dtype), r, W);
  cg_src(c, "#pragma unroll\n    for (int l = 0; l < %d; l++) {\n", W);
  cg_emit_expr_lanes(c, e, dt, val, no);
  for (int r = 0; r < no; r++) {
    int root = e->results[r];
    if (dt[root] == n0->out[r]->type.dtype) cg_src(c, "      r%d[l] = v%d;\n", r, root);
    else cg_src(c, "      r%d[l] = tgc_round<%s>(tgc_acc(v%d));\n", r, cg_ctype(n0->out[r]->type.dtype), root);
    if (counted >> r & 1) cg_src(c, "      bad += tgc_nonfinite_bits(r%d[l]);\n", r); /* as stored */
  }
  cg_src(c, "    }\n");
  for (int r = 0; r < no; r++)
    if (cg_value_live(c, n0->out[r])) cg_src(c, "    tgc_vstore<%d>(out%d + i, r%d);\n", W, r, r);
  cg_src(c, nf ? "  }\n  return bad;\n}\n" : "  }\n}\n");
  /* {nonfinite}: each block's count (a block sum, fixed order) in a partial
   * of the module's own; the member's last block to finish (a ticket, as
   * CUDA's threadFenceReduction sample) adds its member's partials and
   * writes the count, then resets the ticket: no memset, no atomics on the
   * result, the same count every run, and replayable in a CUDA graph. */
  int64_t total_blocks = 0;
  for (int m = 0; m < count; m++) {
    int64_t len = cg_numel(&c->g->nodes[p->steps[first + m].node]->out[0]->type), blocks = cg_blocks(len / W, THREADS);
    total_blocks += blocks > 1024 ? 1024 : blocks;
  }
  if (nf)
    cg_src(c, "__device__ unsigned long long %s_part[%lld];\n__device__ unsigned int %s_ticket[%d];\n", kname,
           (long long)total_blocks, kname, count);
  /* the kernel: every member's pointers; block ranges by member */
  cg_src(c, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", THREADS, kname);
  c->p->kernels[k].block = THREADS;
  for (int m = 0; m < count; m++) {
    const ir_node *nm = c->g->nodes[p->steps[first + m].node];
    int back = count - 1 - m;
    for (int i = 0; i < ni; i++) {
      cg_src(c, "%sconst %s *m%d_in%d", m || i ? ", " : "", cg_ctype(nm->in[i]->type.dtype), m, i);
      cg_add_arg(c, k, (cg_ref){.kind = CG_REF_IN, .index = i, .back = back});
    }
    for (int r = 0; r < nm->n_out; r++) {
      cg_src(c, ", %s *m%d_out%d", cg_ctype(nm->out[r]->type.dtype), m, r);
      cg_add_arg(c, k, (cg_ref){.kind = CG_REF_OUT, .index = r, .back = back});
    }
  }
  cg_src(c, ") {\n  const long long b = blockIdx.x;\n");
  if (nf) cg_src(c, "  TGC_SHARED(unsigned long long, scratch, 32);\n");
  int64_t start = 0;
  for (int m = 0; m < count; m++) {
    const ir_node *nm = c->g->nodes[p->steps[first + m].node];
    int64_t len = cg_numel(&nm->out[0]->type), blocks = cg_blocks(len / W, THREADS);
    if (blocks > 1024) blocks = 1024;
    bool counts = ir_fused_counts(nm);
    cg_src(c, "  %sif (b < %lldLL) {  // %%%s: %lld elements\n    %s%s_elems(", m ? "else " : "", (long long)(start + blocks),
           nm->out[no - 1]->name, (long long)len, counts ? "const unsigned long long bad = tgc_block_sum(" : "", kname);
    for (int i = 0; i < ni; i++) cg_src(c, "m%d_in%d, ", m, i);
    for (int r = 0; r < no; r++) cg_src(c, "m%d_out%d, ", m, r);
    cg_src(c, "%lldLL, (b - %lldLL) * %d + threadIdx.x, %lldLL)%s;\n", (long long)len, (long long)start, THREADS,
           (long long)(blocks * THREADS), counts ? ", scratch)" : "");
    if (counts)
      cg_src(c,
             "    if (tgc_thread_rank() == 0) {\n      %s_part[b] = bad;\n      __threadfence();\n"
             "      if (atomicAdd(&%s_ticket[%d], 1u) == %lldu) {  // the member's last block\n"
             "        __threadfence();\n        unsigned long long s = 0;\n"
             "        for (long long j = %lldLL; j < %lldLL; j++) s += ((volatile unsigned long long *)%s_part)[j];\n"
             "        *m%d_out%d = (long long)s;\n        %s_ticket[%d] = 0;\n      }\n    }\n",
             kname, kname, m, (long long)(blocks - 1), (long long)start, (long long)(start + blocks), kname, m, no,
             kname, m);
    cg_src(c, "  }\n");
    start += blocks;
  }
  cg_kernel_end(c, k);
  free(dt);
  for (int m = 0; m < count - 1; m++) c->p->steps[first + m].deferred = true;
  int saved = c->step;
  c->step = first + count - 1;
  cg_launch(c, k, start, 1, THREADS, 0);
  c->step = saved;
  return 0;
}
