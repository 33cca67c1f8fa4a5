/* codegen/emit_multi.c — multi-tensor reductions: count_nonfinite and
 * sum_squares over many tensors (fuse-elementwise makes them from the
 * optimizer's per-parameter checks: passes/fuse_multi_tensor.c), in two
 * kinds of kernel instead of a few launches per tensor.
 *
 *   partials: every tensor is cut into chunks of CHUNK elements, a block
 *     each; block b finds its tensor by comparing with the running chunk
 *     counts (constants), sums its chunk's squares in double (or counts its
 *     Inf / NaN elements) and the block's threads' shares in a fixed order
 *     (tgc_block_sum), and writes one partial to the workspace. At most
 *     MAX_PTRS tensors per kernel (4 KiB of kernel parameters); a node with
 *     more runs several such kernels into one partials array.
 *   total: one block; warp w adds the partials of tensors w, w + 8, ... in
 *     order (tgc::chunk_total), leaving tensor k's sum in the workspace after
 *     the partials; thread 0 adds the tensors' sums left to right, as the
 *     chain of adds it replaces did, and writes the result.
 * Every sum is in a fixed order: the result is the same run to run (not the
 * cpu's bits: the cpu adds each tensor's squares one by one). No memset, no
 * atomics: 2 launches for GPT-2 small's 148 parameters, where per-tensor
 * kernels took 148 x (count + memset + square + reduce_sum).
 */
#include <stdlib.h>

#include "emit.h"

enum { THREADS = 256, TOTAL_WARPS = THREADS / 32, CHUNK = 8192, MAX_PTRS = 256 };

int cg_emit_multi_reduce(cg_ctx *c, const ir_node *n) {
  bool squares = n->op == IR_OP_SUM_SQUARES;
  const char *acc = squares ? "double" : "unsigned long long";
  int nin = n->n_in;
  int64_t *start = calloc((size_t)nin + 1, sizeof *start); /* tensor k's partials: [start[k], start[k + 1]) */
  if (!start) return cg_fail(c, "out of memory");
  for (int k = 0; k < nin; k++) start[k + 1] = start[k] + (cg_numel(&n->in[k]->type) + CHUNK - 1) / CHUNK;
  int64_t parts = start[nin];
  cg_need_workspace(c, (size_t)(parts + nin) * 8);
  for (int first = 0; first < nin; first += MAX_PTRS) {
    int count = nin - first < MAX_PTRS ? nin - first : MAX_PTRS;
    int64_t blocks = start[first + count] - start[first];
    if (blocks == 0) continue; /* empty tensors: their sums are 0 */
    int k = cg_kernel_begin(c, "partials");
    cg_kernel_signature_part(c, k, THREADS, first, count, false, true);
    cg_src(c, "  TGC_SHARED(%s, scratch, 32);\n  const long long b = blockIdx.x + %lldLL;\n  %s s = 0;\n  ", acc,
           (long long)start[first], acc);
    for (int i = first; i < first + count; i++) {
      if (start[i + 1] == start[i]) continue;
      if (!squares && n->in[i]->type.dtype == IR_DT_I64) { /* a count its producer took (fused {nonfinite}) */
        cg_src(c, "if (b == %lldLL && tgc_thread_rank() == 0) s = (unsigned long long)in%d[0];\n  ", (long long)start[i], i);
        continue;
      }
      cg_src(c, "if (b >= %lldLL && b < %lldLL) s = tgc::chunk_%s(in%d, %lldLL, b - %lldLL, %d);\n  ",
             (long long)start[i], (long long)start[i + 1], squares ? "squares" : "nonfinite", i,
             (long long)cg_numel(&n->in[i]->type), (long long)start[i], CHUNK);
    }
    cg_src(c, "s = tgc_block_sum(s, scratch);\n");
    cg_src(c, "  if (tgc_thread_rank() == 0) ((%s *)ws)[b] = s;\n", acc);
    cg_kernel_end(c, k);
    cg_launch(c, k, blocks, 1, THREADS, 0);
  }
  int k = cg_kernel_begin(c, "total");
  cg_kernel_signature_part(c, k, THREADS, 0, 0, true, true);
  cg_src(c, "  %s *part = (%s *)ws, *sums = part + %lldLL;\n  const unsigned w = tgc_warp_id();\n", acc, acc,
         (long long)parts);
  for (int i = 0; i < nin; i++)
    cg_src(c, "  if (w == %d) { %s t = tgc::chunk_total(part + %lldLL, %lldLL); if (tgc_lane_id() == 0) sums[%d] = t; }\n",
           i % TOTAL_WARPS, acc, (long long)start[i], (long long)(start[i + 1] - start[i]), i);
  cg_src(c, "  __syncthreads();\n  if (tgc_thread_rank() == 0) {\n    %s total = sums[0];\n", acc);
  cg_src(c, "    for (int i = 1; i < %d; i++) total += sums[i];\n", nin);
  cg_src(c, "    out0[0] = (%s)total;\n  }\n", squares ? "double" : "long long");
  cg_kernel_end(c, k);
  cg_launch(c, k, 1, 1, THREADS, 0);
  free(start);
  return 0;
}
