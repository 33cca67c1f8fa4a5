/* codegen/emit_nn.c — the model ops: embedding and its gradient,
 * cross-entropy and its gradient, fused attention and its gradient, and
 * einsum.
 *
 *   embedding            a thread per W elements of the result, 16-byte row
 *                        copies; an id out of range fails the launch
 *                        (tgc_fail_index: the kernel's name says which value)
 *   embedding_grad       the positions bucketed by id once (count, scan,
 *                        place: tgc::embedding_grad_*), then a block per row
 *                        that has positions x 256 columns sums its bucket in
 *                        position order (no float atomics), grid (min(P, V),
 *                        D / 256)
 *   cross_entropy        a warp (or block) per position writes its loss in
 *                        double to the workspace; one block adds them in a
 *                        fixed order and divides by the positions
 *   cross_entropy_grad   a warp (or block) per position: softmax - onehot,
 *                        times g / positions
 *   attention            tgc::attention_fwd_mma for bf16 / f16 heads with E a
 *                        multiple of 16 and F of 8 (tensor cores: padded
 *                        uint4 shared rows, ldmatrix), else
 *                        tgc::attention_fwd; tiles as large as fit 48 KiB of
 *                        static shared memory
 *   attention_grad       D = rowsum(do * o) into the workspace (a warp per
 *                        row), then the dk/dv kernel (a block per key tile
 *                        of each kv head: with grouped-query it walks the
 *                        head's group of query heads) and the dq kernel (a
 *                        block per query tile): on
 *                        tensor cores (tgc::attention_bwd_*_mma) where the
 *                        forward uses them and F is a multiple of 16 too
 *   einsum               a thread per result element, the summed labels'
 *                        index space walked in row-major order, products
 *                        summed in double (the CPU's order and precision)
 */
#include <stdlib.h>
#include <string.h>

#include "emit.h"

enum { THREADS = 256, WARP_ROW_MAX = 2048, SMEM_STATIC = 48 * 1024, ATT_THREADS = 128 };

static int vec_width(int64_t len, size_t elem) {
  int w = (int)(16 / (elem ? elem : 1));
  while (w > 1 && len % w != 0) w /= 2;
  return w;
}

int cg_emit_embedding(cg_ctx *c, const ir_node *n) {
  const ir_type *tt = &n->in[0]->type, *ot = &n->out[0]->type;
  int64_t V = tt->dims[0], D = tt->rank > 1 ? tt->dims[1] : 1, N = cg_numel(ot);
  if (N == 0) return 0;
  int W = vec_width(D, ir_dtype_size(tt->dtype));
  int k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, THREADS, false);
  cg_src(c, "  TGC_GRID_STRIDE_LOOP(g, %lldLL) {\n", (long long)(N / W));
  cg_src(c, "    const long long i = g * %d, p = i / %lldLL, id = tgc_index(in1[p]);\n", W, (long long)D);
  cg_src(c, "    if (id < 0 || id >= %lldLL) tgc_fail_index(\"embedding id\", id, %lldLL, \"%%%s\", p);\n", (long long)V,
         (long long)V, n->in[1]->name);
  cg_src(c, "    %s v[%d];\n    tgc_vload<%d>(in0 + id * %lldLL + i %% %lldLL, v);\n    tgc_vstore<%d>(out0 + i, v);\n  }\n",
         cg_ctype(tt->dtype), W, W, (long long)D, (long long)D, W);
  cg_kernel_end(c, k);
  cg_launch(c, k, cg_blocks(N / W, THREADS), 1, THREADS, 0);
  cg_reads_part(c, 0, (double)N * (double)ir_dtype_size(tt->dtype)); /* the gathered rows, not the table */
  return 0;
}

int cg_emit_embedding_grad(cg_ctx *c, const ir_node *n) {
  const ir_type *idt = &n->in[0]->type, *ot = &n->out[0]->type;
  int64_t V = ot->dims[0], D = ot->rank > 1 ? ot->dims[1] : 1, P = cg_numel(idt);
  if (V * D == 0 || P == 0) return 0; /* the result is zero-filled */
  if (P >= INT32_MAX || V >= INT32_MAX)
    return cg_fail(c, "embedding_grad of %lld positions into %lld rows: the bucketing counts in 32-bit integers",
                   (long long)P, (long long)V);
  int64_t R = P < V ? P : V; /* rows that can have positions: a block each */
  /* the workspace, ints: cnt[V] (then the cursors), start[V + 1], nrows, rows[R], bucket[P] */
  int64_t o_start = V, o_nrows = 2 * V + 1, o_rows = o_nrows + 1, o_bucket = o_rows + R;
  cg_need_workspace(c, (size_t)(o_bucket + P) * 4);
  cg_memset(c, (cg_ref){.kind = CG_REF_WORKSPACE}, (size_t)V * 4);
  const char *name = n->in[0]->name;
  int k = cg_kernel_begin(c, "count");
  cg_kernel_signature(c, k, THREADS, true);
  cg_src(c, "  tgc::embedding_grad_count(in0, (int *)ws, %lldLL, %lldLL, \"%%%s\");\n", (long long)P, (long long)V, name);
  cg_kernel_end(c, k);
  cg_launch(c, k, cg_blocks(P, THREADS), 1, THREADS, 0);
  k = cg_kernel_begin(c, "scan"); /* one block: 512 threads, ~V / 512 counts each */
  cg_kernel_signature(c, k, 512, true);
  cg_src(c, "  TGC_SHARED(int, tot_s, 32);\n  TGC_SHARED(int, tot_r, 32);\n  int *w = (int *)ws;\n");
  cg_src(c, "  tgc::embedding_grad_scan(w, w + %lldLL, w + %lldLL, w + %lldLL, %d, tot_s, tot_r);\n", (long long)o_start,
         (long long)o_nrows, (long long)o_rows, (int)V);
  cg_kernel_end(c, k);
  cg_launch(c, k, 1, 1, 512, 0);
  k = cg_kernel_begin(c, "place");
  cg_kernel_signature(c, k, THREADS, true);
  cg_src(c, "  tgc::embedding_grad_place(in0, (int *)ws, (int *)ws + %lldLL, %lldLL);\n", (long long)o_bucket, (long long)P);
  cg_kernel_end(c, k);
  cg_launch(c, k, cg_blocks(P, THREADS), 1, THREADS, 0);
  k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, THREADS, true);
  cg_src(c, "  TGC_SHARED(int, keys, tgc::EMB_BUCKET_MAX);\n  TGC_SHARED(int, order, tgc::EMB_BUCKET_MAX);\n  const int *w = (const int *)ws;\n");
  cg_src(c, "  tgc::embedding_grad_rows(in0, in1, out0, w + %lldLL, w + %lldLL, w + %lldLL, w + %lldLL, %lldLL, %lldLL, keys, order);\n",
         (long long)o_start, (long long)o_nrows, (long long)o_rows, (long long)o_bucket, (long long)P, (long long)D);
  cg_kernel_end(c, k);
  cg_launch(c, k, R, (D + THREADS - 1) / THREADS, THREADS, 0);
  /* the ids are read twice (count, place); the rows kernel reads the
   * buckets (workspace), not the ids, while no id has more than
   * EMB_BUCKET_MAX positions (past it, a row's block rescans every id) */
  cg_reads_part(c, 0, 2 * (double)P * (double)ir_dtype_size(idt->dtype));
  return 0;
}

/* P positions of V logits: the rows' kernel prologue (warp or block per row). */
static bool ce_rows(const ir_node *n, int64_t *P, int64_t *V) {
  const ir_type *lt = &n->in[0]->type;
  *V = lt->rank ? lt->dims[lt->rank - 1] : 1;
  *P = cg_numel(&n->in[1]->type);
  return *V <= WARP_ROW_MAX;
}

static void row_head(cg_ctx *c, int64_t rows, bool warp) {
  if (warp) cg_src(c, "  const long long row = (long long)blockIdx.x * %d + tgc_warp_id();\n  if (row >= %lldLL) return;\n",
                   THREADS / 32, (long long)rows);
  else cg_src(c, "  const long long row = blockIdx.x;\n");
}

/* The loss: the mean of the P per-position losses in the workspace (double),
 * added by one block in a fixed order, into `loss` (a result of dtype dt:
 * this step's, or a deferred cross_entropy's). */
static void ce_loss_kernel(cg_ctx *c, int64_t P, ir_dtype dt, cg_ref loss) {
  int k = cg_kernel_begin(c, "loss");
  c->p->kernels[k].block = THREADS;
  cg_src(c, "extern \"C\" __global__ void __launch_bounds__(%d) %s(unsigned char *ws, %s *loss) {\n", THREADS,
         c->p->kernels[k].name, cg_ctype(dt));
  cg_add_arg(c, k, (cg_ref){.kind = CG_REF_WORKSPACE});
  cg_add_arg(c, k, loss);
  cg_src(c, "  TGC_SHARED(double, scratch, 32);\n");
  cg_src(c, "  const double total = tgc::reduce_row<double, 0, 1, false>((const double *)ws, %lldLL, scratch);\n",
         (long long)P);
  cg_src(c, "  if (tgc_thread_rank() == 0) loss[0] = tgc_round<%s>(total / %lld.0);\n", cg_ctype(dt), (long long)P);
  cg_kernel_end(c, k);
  cg_launch(c, k, 1, 1, THREADS, 0);
}

int cg_emit_cross_entropy(cg_ctx *c, const ir_node *n) {
  if (ir_node_attr_int(n, "with_grad", 0)) { /* its gradient's kernel computes the loss too */
    if (pass_cross_entropy_grad_of(c->g, c->plan->steps[c->step].node) < 0)
      return cg_fail(c, "marked with_grad, but no cross_entropy_grad of its logits and targets follows");
    c->p->steps[c->step].deferred = true; /* that step writes the loss at the address kept here */
    return 0;
  }
  int64_t P, V;
  bool warp = ce_rows(n, &P, &V);
  const ir_type *lt = &n->in[0]->type;
  int W = vec_width(V, ir_dtype_size(lt->dtype));
  if (P == 0) return 0;
  cg_need_workspace(c, (size_t)P * 8);
  int k = cg_kernel_begin(c, "rows");
  cg_kernel_signature(c, k, THREADS, true);
  cg_src(c, "  TGC_SHARED(float, scratch, 32);\n");
  row_head(c, P, warp);
  cg_src(c, "  const double loss = tgc::ce_row_loss<%d, %s>(in0 + row * %lldLL, in1, row, %lldLL, \"%%%s\", scratch);\n", W,
         warp ? "true" : "false", (long long)V, (long long)V, n->in[1]->name);
  cg_src(c, "  if (%s == 0) ((double *)ws)[row] = loss;\n", warp ? "tgc_lane_id()" : "tgc_thread_rank()");
  cg_kernel_end(c, k);
  cg_launch(c, k, warp ? (P + THREADS / 32 - 1) / (THREADS / 32) : P, 1, THREADS, 0);
  ce_loss_kernel(c, P, n->out[0]->type.dtype, (cg_ref){.kind = CG_REF_OUT, .index = 0});
  return 0;
}

/* With a deferred cross_entropy of the same logits (cg_ctx.partner_step),
 * the rows also leave their losses in the workspace and the loss kernel
 * writes that step's result: the logits are read once for both. */
int cg_emit_cross_entropy_grad(cg_ctx *c, const ir_node *n) {
  int64_t P, V;
  bool warp = ce_rows(n, &P, &V);
  const ir_type *lt = &n->in[0]->type;
  ir_dtype widest = ir_dtype_size(lt->dtype) >= ir_dtype_size(n->out[0]->type.dtype) ? lt->dtype : n->out[0]->type.dtype;
  int W = vec_width(V, ir_dtype_size(widest));
  int ce = c->partner_step ? c->partner_step[c->plan->steps[c->step].node] : -1;
  if (P == 0) return 0;
  if (ce >= 0) cg_need_workspace(c, (size_t)P * 8);
  int k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, THREADS, ce >= 0);
  cg_src(c, "  TGC_SHARED(float, scratch, 32);\n");
  row_head(c, P, warp);
  cg_src(c, "  const float scale = tgc_f(in2[0]) / %lld.0f;\n", (long long)P);
  cg_src(c, "  %stgc::ce_grad_row<%d, %s>(in0 + row * %lldLL, in1, row, %lldLL, scale, out0 + row * %lldLL, \"%%%s\", scratch);\n",
         ce >= 0 ? "const double loss = " : "", W, warp ? "true" : "false", (long long)V, (long long)V, (long long)V,
         n->in[1]->name);
  if (ce >= 0) cg_src(c, "  if (%s == 0) ((double *)ws)[row] = loss;\n", warp ? "tgc_lane_id()" : "tgc_thread_rank()");
  cg_kernel_end(c, k);
  cg_launch(c, k, warp ? (P + THREADS / 32 - 1) / (THREADS / 32) : P, 1, THREADS, 0);
  if (ce >= 0) {
    const ir_node *cn = c->g->nodes[c->plan->steps[ce].node];
    ce_loss_kernel(c, P, cn->out[0]->type.dtype, (cg_ref){.kind = CG_REF_OUT, .index = 0, .back = c->step - ce});
  }
  return 0;
}

/* linear_cross_entropy (passes/fuse_lm_head.c): per chunk of C rows, in
 * the op's chunk buffer (result 4): the logits product (cuBLASLt); one
 * kernel of the rows: each row's argmax (predicted), then its gradient in
 * place (softmax - onehot) with its loss (the workspace, in double) from
 * the same statistics (argmax_row ends with a barrier, and ce_grad_row
 * reads every value of the row before the group's first write, so in
 * place is race-free); the dh rows'
 * product; dw's product, accumulating from the second chunk (beta = 1).
 * Then the loss kernel adds the row losses in order. A kernel per chunk
 * (the chunk's first row is a constant of its source). The step moves what
 * every action reads and writes (cg_step_moves; analysis/cost.c counts the
 * same).
 * The buffer's rows are LD = V rounded up to 64 elements apart (50,304 for
 * GPT-2's 50,257), in chunks of fewer rows so that they fit it
 * (pass_linear_ce_chunk_rows, which the cost model counts too): with rows
 * V elements apart every row of a 16-bit buffer would start 2-byte aligned
 * for an odd V, and cuBLASLt has only its slow kernels for operands whose
 * leading dimension is not a multiple of 16 bytes (on an H200 the LM head
 * took 37 ms of a 117 ms gpt2-124m step that way). The padding columns
 * are neither read nor written; the buffer is the op's scratch, read by
 * nothing after it. */
int cg_emit_linear_cross_entropy(cg_ctx *c, const ir_node *n) {
  const ir_type *ht = &n->in[0]->type, *bt = &n->out[4]->type;
  bool tb = ir_node_attr_int(n, "transpose_b", 0) != 0;
  ir_dtype dt = ht->dtype;
  if (dt != IR_DT_F32 && dt != IR_DT_F64 && dt != IR_DT_BF16 && dt != IR_DT_F16) return cg_fail(c, "not a float dtype");
  int64_t D = ht->dims[ht->rank - 1], V = bt->dims[1], C = bt->dims[0], N = cg_numel(&n->in[2]->type);
  double es = (double)ir_dtype_size(dt), ts = (double)ir_dtype_size(n->in[2]->type.dtype), wb = (double)(V * D) * es;
  bool warp = V <= WARP_ROW_MAX;
  const char *t = cg_ctype(dt);
  int64_t LD, CR = pass_linear_ce_chunk_rows(C, V, &LD); /* rows of a chunk, LD elements apart */
  /* the rows kernel's vector width from the rows' alignment (LD), not V: an
   * odd V (GPT-2's 50,257) would make it 1 (2-byte loads, 1.6x the time
   * on an H200); the last V % W columns are then read one by one */
  int W = vec_width(LD, ir_dtype_size(dt));
  cg_need_workspace(c, (size_t)N * 8);
  double moved = 0;
  /* the vocabulary in pieces: [0, V8) with a multiple of 8 columns, then the
   * rest (pass_linear_ce_main_cols); each product once per piece */
  int64_t V8 = pass_linear_ce_main_cols(V), cuts[3] = {0, V8, V};
  int pieces = V8 < V ? 2 : 1;
  for (int64_t r0 = 0; r0 < N; r0 += CR) {
    int64_t rows = N - r0 < CR ? N - r0 : CR;
    size_t h_at = (size_t)(r0 * D) * (size_t)es;
    double buf = (double)(rows * V) * es, hc = (double)(rows * D) * es;
    for (int q = 0; q < pieces; q++) { /* logits[:, v0:v1] = h_c w[v0:v1]^T */
      int64_t v0 = cuts[q], nv = cuts[q + 1] - cuts[q];
      size_t w_at = (size_t)(tb ? v0 * D : v0) * (size_t)es, col = (size_t)v0 * (size_t)es;
      cg_gemm g = {.dtype = dt, .trans_b = tb, .m = rows, .n = nv, .k = D, .lda = D, .ldb = tb ? D : V, .ldc = LD,
                   .batch = 1, .a = {CG_REF_IN, 0, h_at, 0}, .b = {CG_REF_IN, 1, w_at, 0}, .c = {CG_REF_OUT, 4, col, 0},
                   .fallback_kernel = -1};
      cg_gemm_action(c, &g);
      moved += hc;
    }
    moved += wb + buf;
    { /* per row: its argmax and loss, then its gradient in place (one pass of the statistics) */
      int k = cg_kernel_begin(c, "rows");
      cg_kernel_signature(c, k, THREADS, true);
      cg_src(c, "  TGC_SHARED(float, scratch, 32);\n");
      cg_src(c, "  TGC_SHARED(double, dscratch, 32);\n");
      row_head(c, rows, warp);
      cg_src(c, "  %s *x = out4 + row * %lldLL;\n", t, (long long)LD);
      cg_src(c, "  const int best = tgc::argmax_row<%s>(x, %lldLL, dscratch);\n", warp ? "true" : "false", (long long)V);
      cg_src(c, "  const float scale = tgc_f(in3[0]) / %lld.0f;\n", (long long)N);
      cg_src(c, "  const double loss = tgc::ce_grad_row<%d, %s>(x, in2 + %lldLL, row, %lldLL, scale, x, \"%%%s\", scratch);\n",
             W, warp ? "true" : "false", (long long)r0, (long long)V, n->in[2]->name);
      cg_src(c, "  if (%s == 0) { out3[%lldLL + row] = best; ((double *)ws)[%lldLL + row] = loss; }\n",
             warp ? "tgc_lane_id()" : "tgc_thread_rank()", (long long)r0, (long long)r0);
      cg_kernel_end(c, k);
      cg_launch(c, k, warp ? (rows + THREADS / 32 - 1) / (THREADS / 32) : rows, 1, THREADS, 0);
      moved += 2 * buf + (double)rows * (ts + 4) + (double)ir_dtype_size(n->in[3]->type.dtype);
    }
    for (int q = 0; q < pieces; q++) { /* dh_c (+)= buffer[:, v0:v1] w[v0:v1] */
      int64_t v0 = cuts[q], nv = cuts[q + 1] - cuts[q];
      size_t w_at = (size_t)(tb ? v0 * D : v0) * (size_t)es, col = (size_t)v0 * (size_t)es;
      cg_gemm g = {.dtype = dt, .trans_b = !tb, .m = rows, .n = D, .k = nv, .lda = LD, .ldb = tb ? D : V, .ldc = D,
                   .batch = 1, .a = {CG_REF_OUT, 4, col, 0}, .b = {CG_REF_IN, 1, w_at, 0}, .c = {CG_REF_OUT, 1, h_at, 0},
                   .fallback_kernel = -1, .accumulate = q > 0};
      cg_gemm_action(c, &g);
      moved += (q > 0 ? 2 : 1) * hc;
    }
    moved += buf + wb;
    for (int q = 0; q < pieces; q++) {
      int64_t v0 = cuts[q], nv = cuts[q + 1] - cuts[q];
      size_t col = (size_t)v0 * (size_t)es;
      cg_gemm g;
      if (tb) /* dw[v0:v1, D] (+)= buffer[:, v0:v1]^T h_c */
        g = (cg_gemm){.dtype = dt, .trans_a = true, .m = nv, .n = D, .k = rows, .lda = LD, .ldb = D, .ldc = D,
                      .batch = 1, .a = {CG_REF_OUT, 4, col, 0}, .b = {CG_REF_IN, 0, h_at, 0},
                      .c = {CG_REF_OUT, 2, (size_t)(v0 * D) * (size_t)es, 0}};
      else /* dw[D, v0:v1] (+)= h_c^T buffer[:, v0:v1] */
        g = (cg_gemm){.dtype = dt, .trans_a = true, .m = D, .n = nv, .k = rows, .lda = D, .ldb = LD, .ldc = V,
                      .batch = 1, .a = {CG_REF_IN, 0, h_at, 0}, .b = {CG_REF_OUT, 4, col, 0},
                      .c = {CG_REF_OUT, 2, col, 0}};
      g.accumulate = r0 > 0;
      g.fallback_kernel = -1;
      cg_gemm_action(c, &g);
      moved += hc;
    }
    moved += buf + (r0 > 0 ? 2 : 1) * wb;
  }
  ce_loss_kernel(c, N, n->out[0]->type.dtype, (cg_ref){.kind = CG_REF_OUT, .index = 0});
  cg_step_moves(c, moved + (double)ir_dtype_size(n->out[0]->type.dtype));
  return 0;
}

/* ---- attention ---- */

typedef struct {
  int64_t bh, t, s, e, f;
  int64_t heads; /* the `heads` attribute: q[..., T, H, E] (1: q[..., T, E], one head per batch element) */
  int64_t group; /* grouped-query: query heads per kv head (k, v have bh / group heads); 1 */
  double scale;
  bool causal;
} att_dims;

static int att_dims_of(cg_ctx *c, const ir_node *n, att_dims *a) {
  const ir_type *q = &n->in[0]->type, *k = &n->in[1]->type, *v = &n->in[2]->type;
  int r = q->rank;
  a->heads = ir_node_attr_int(n, "heads", 0);
  int x = a->heads > 0 ? 1 : 0; /* the heads axis between T and E */
  if (r < 2 + x) return cg_fail(c, "q needs rank >= %d", 2 + x);
  if (!x) a->heads = 1;
  a->t = q->dims[r - 2 - x], a->e = q->dims[r - 1], a->s = k->dims[r - 2 - x], a->f = v->dims[r - 1];
  a->bh = 1;
  for (int d = 0; d < r - 2 - x; d++) a->bh *= q->dims[d];
  if (x) a->bh *= a->heads; /* B... x H heads */
  a->scale = ir_node_attr_float(n, "scale", 1.0);
  a->causal = ir_node_attr_int(n, "causal", 0) != 0;
  /* grouped-query: k, v with fewer heads (the dim before S) than q */
  a->group = !x && r >= 3 && k->dims[r - 3] > 0 ? q->dims[r - 3] / k->dims[r - 3] : 1;
  return 0;
}

/* Tile sizes for the scalar kernels: the largest power of two <= 32 whose
 * shared memory fits; 0 when none does. */
static int att_tile(const att_dims *a, size_t asize, bool backward) {
  for (int b = 32; b >= 4; b /= 2) {
    size_t words = backward ? (size_t)(b * a->e * 2 + b * a->f * 2 + 2 * b * b + 2 * b)
                            : (size_t)(b * a->e * 2 + b * a->f + b * b + 3 * b);
    if (words * asize <= SMEM_STATIC) return b;
  }
  return 0;
}

/* uint4s in a padded shared row of c 16-bit elements (tgc_attention.h:
 * c / 8 + 1, the extra 16 bytes staggering the rows over the banks) */
static long long att_row(int64_t c) { return (long long)(c / 8 + 1); }

/* Stages of a tensor-core kernel's tile pipeline (tgc::att_pipeline): 2
 * (the next tile's copies in flight while one is used) where two tiles of
 * `bytes` fit the static shared memory, else 1. */
static int att_stages(size_t bytes) { return 2 * bytes <= SMEM_STATIC ? 2 : 1; }

/* The tensor-core kernels: bf16 / f16 with head dims the MMA shapes take
 * (E a multiple of 16, F of 8; the backward's dp = do v^T runs over F, so
 * F of 16 there) whose 64-row padded tiles fit the static shared memory;
 * the backward's dk/dv kernel holds a warp's 16 keys of k, v, dk and dv in
 * registers, which spill past E + F = 256. */
static bool att_mma(ir_dtype dt, const att_dims *a, bool backward) {
  return (dt == IR_DT_BF16 || dt == IR_DT_F16) && a->e % 16 == 0 && a->f % (backward ? 16 : 8) == 0 && a->e <= 256 &&
         a->f <= 256 && (!backward || a->e + a->f <= 256) &&
         (size_t)64 * (size_t)(att_row(a->e) + att_row(a->f)) * 16 + (backward ? 64 * 2 * 4 : 0) <= SMEM_STATIC;
}

int cg_emit_attention(cg_ctx *c, const ir_node *n) {
  att_dims a;
  if (att_dims_of(c, n, &a) != 0) return -1;
  if (a.bh * a.t == 0) return 0;
  ir_dtype dt = n->in[0]->type.dtype;
  const char *A = cg_acctype(dt);
  char scale[64];
  cg_literal(scale, sizeof scale, a.scale, strcmp(A, "float") == 0 ? IR_DT_F32 : IR_DT_F64);
  int k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, ATT_THREADS, false);
  bool qpos = n->n_in == 4; /* a decode step's query offset: the scalar kernel reads it */
  if (!qpos && att_mma(dt, &a, false)) {
    int st = att_stages((size_t)(64 * (att_row(a.e) + att_row(a.f)) * 16));
    cg_src(c, "  TGC_SHARED(uint4, Ks, %lld);\n  TGC_SHARED(uint4, Vs, %lld);\n", st * 64 * att_row(a.e),
           st * 64 * att_row(a.f));
    cg_src(c, "  tgc::attention_fwd_mma<%lld, %lld, %s, %lld, %d>(in0, in1, in2, out0, out1, %lldLL, %lldLL, %s, Ks, Vs, %lldLL);\n",
           (long long)a.e, (long long)a.f, a.causal ? "true" : "false", (long long)a.heads, st, (long long)a.t,
           (long long)a.s, scale, (long long)a.group);
    cg_kernel_end(c, k);
    cg_launch(c, k, (a.t + 63) / 64, a.bh, ATT_THREADS, 0);
    return 0;
  }
  int b = att_tile(&a, strcmp(A, "float") == 0 ? 4 : 8, false);
  if (!b) return cg_fail(c, "head dims E = %lld, F = %lld need more than 48 KiB of shared memory", (long long)a.e,
                         (long long)a.f);
  cg_src(c, "  TGC_SHARED(%s, Qs, %lld);\n  TGC_SHARED(%s, Ks, %lld);\n  TGC_SHARED(%s, Vs, %lld);\n", A,
         (long long)(b * a.e), A, (long long)(b * a.e), A, (long long)(b * a.f));
  cg_src(c, "  TGC_SHARED(%s, Ss, %d);\n  TGC_SHARED(%s, rows, %d);\n", A, b * b, A, 3 * b);
  cg_src(c, "  tgc::attention_fwd<%s, %d, %d, %lld, %lld, %s, %lld>(in0, in1, in2, out0, out1, %lldLL, %lldLL, (%s)%s, Qs, Ks, Vs, Ss, rows, %s, %lldLL);\n",
         A, b, b, (long long)a.e, (long long)a.f, a.causal ? "true" : "false", (long long)a.heads, (long long)a.t,
         (long long)a.s, A, scale, qpos ? "in3" : "nullptr", (long long)a.group);
  cg_kernel_end(c, k);
  cg_launch(c, k, (a.t + b - 1) / b, a.bh, ATT_THREADS, 0);
  return 0;
}

/* The body of the tensor-core dk/dv (a block per 64 keys, the query tiles
 * through shared memory) or dq kernel (a block per 64 queries). */
static void att_grad_mma(cg_ctx *c, const att_dims *a, bool dkdv, const char *scale) {
  long long le = att_row(a->e), lf = att_row(a->f);
  const char *causal = a->causal ? "true" : "false";
  if (dkdv) {
    /* a thread keeps 3 (E + F) / 4 registers of K, V fragments and dK, dV
     * accumulators and BR of s^T, dp^T: query tiles of 64 rows while that
     * stays within 160 (gpt2's E = F = 64: 243 registers on sm_80), fewer
     * past it (E = F = 128 at 64 rows spills 2 KB, at 16 none) */
    int br = 64;
    while (br > 16 && 3 * (a->e + a->f) / 4 + br > 160) br /= 2;
    int st = att_stages((size_t)(br * (le + lf) * 16 + 2 * br * 4));
    cg_src(c, "  TGC_SHARED(uint4, Qs, %lld);\n  TGC_SHARED(uint4, dOs, %lld);\n  TGC_SHARED(float, rows, %d);\n",
           st * le * br, st * lf * br, st * 2 * br);
    cg_src(c, "  tgc::attention_bwd_dkdv_mma<%d, %lld, %lld, %s, %lld, %d>(in0, in1, in2, in4, in5, (const float *)ws, "
              "out1, out2, %lldLL, %lldLL, %s, Qs, dOs, rows, %lldLL);\n",
           br, (long long)a->e, (long long)a->f, causal, (long long)a->heads, st, (long long)a->t, (long long)a->s,
           scale, (long long)a->group);
  } else {
    int st = att_stages((size_t)(64 * (le + lf) * 16));
    cg_src(c, "  TGC_SHARED(uint4, Ks, %lld);\n  TGC_SHARED(uint4, Vs, %lld);\n", st * 64 * le, st * 64 * lf);
    cg_src(c, "  tgc::attention_bwd_dq_mma<%lld, %lld, %s, %lld, %d>(in0, in1, in2, in4, in5, (const float *)ws, out0, "
              "%lldLL, %lldLL, %s, Ks, Vs, %lldLL);\n",
           (long long)a->e, (long long)a->f, causal, (long long)a->heads, st, (long long)a->t, (long long)a->s, scale,
           (long long)a->group);
  }
}

int cg_emit_attention_grad(cg_ctx *c, const ir_node *n) {
  att_dims a;
  if (att_dims_of(c, n, &a) != 0) return -1;
  if (a.bh * (a.t + a.s) == 0) return 0;
  ir_dtype dt = n->in[0]->type.dtype;
  const char *A = cg_acctype(dt);
  size_t asize = strcmp(A, "float") == 0 ? 4 : 8;
  char scale[64];
  cg_literal(scale, sizeof scale, a.scale, asize == 4 ? IR_DT_F32 : IR_DT_F64);
  bool mma = att_mma(dt, &a, true);
  int b = mma ? 64 : att_tile(&a, asize, true);
  if (!b) return cg_fail(c, "head dims E = %lld, F = %lld need more than 48 KiB of shared memory", (long long)a.e,
                         (long long)a.f);
  cg_need_workspace(c, (size_t)(a.bh * a.t) * asize);
  /* D = rowsum(do * o) */
  int k = cg_kernel_begin(c, "rowdot");
  cg_kernel_signature(c, k, THREADS, true);
  cg_src(c, "  tgc::attention_bwd_rowdot<%s, %lld, %lld>(in3, in5, (%s *)ws, %lldLL, %lldLL);\n", A, (long long)a.f,
         (long long)a.heads, A, (long long)(a.bh * a.t), (long long)a.t);
  cg_kernel_end(c, k);
  cg_launch(c, k, cg_blocks(a.bh * a.t, THREADS / 32), 1, THREADS, 0); /* a warp per row */
  const char *which[2] = {"dkdv", "dq"};
  for (int w = 0; w < 2; w++) {
    k = cg_kernel_begin(c, which[w]);
    cg_kernel_signature(c, k, ATT_THREADS, true);
    if (mma) {
      att_grad_mma(c, &a, w == 0, scale);
      cg_kernel_end(c, k);
      cg_launch(c, k, w == 0 ? (a.s + 63) / 64 : (a.t + 63) / 64, w == 0 ? a.bh / a.group : a.bh, ATT_THREADS, 0);
      continue;
    }
    cg_src(c, "  TGC_SHARED(%s, Qs, %lld);\n  TGC_SHARED(%s, Ks, %lld);\n  TGC_SHARED(%s, Vs, %lld);\n", A,
           (long long)(b * a.e), A, (long long)(b * a.e), A, (long long)(b * a.f));
    cg_src(c, "  TGC_SHARED(%s, dOs, %lld);\n  TGC_SHARED(%s, Ps, %d);\n  TGC_SHARED(%s, dSs, %d);\n  TGC_SHARED(%s, rows, %d);\n",
           A, (long long)(b * a.f), A, b * b, A, b * b, A, 2 * b);
    if (w == 0)
      cg_src(c, "  tgc::attention_bwd_dkdv<%s, %d, %d, %lld, %lld, %s, %lld>(in0, in1, in2, in4, in5, (const %s *)ws, out1, "
                "out2, %lldLL, %lldLL, (%s)%s, Qs, Ks, Vs, dOs, Ps, dSs, rows, %lldLL);\n",
             A, b, b, (long long)a.e, (long long)a.f, a.causal ? "true" : "false", (long long)a.heads, A, (long long)a.t,
             (long long)a.s, A, scale, (long long)a.group);
    else
      cg_src(c, "  tgc::attention_bwd_dq<%s, %d, %d, %lld, %lld, %s, %lld>(in0, in1, in2, in4, in5, (const %s *)ws, out0, "
                "%lldLL, %lldLL, (%s)%s, Qs, Ks, Vs, dOs, Ps, dSs, rows, %lldLL);\n",
             A, b, b, (long long)a.e, (long long)a.f, a.causal ? "true" : "false", (long long)a.heads, A, (long long)a.t,
             (long long)a.s, A, scale, (long long)a.group);
    cg_kernel_end(c, k);
    cg_launch(c, k, w == 0 ? (a.s + b - 1) / b : (a.t + b - 1) / b, w == 0 ? a.bh / a.group : a.bh, ATT_THREADS, 0);
  }
  return 0;
}

/* ---- einsum ---- */

enum { EIN_MAX_LABELS = 52, EIN_MAX_OPS = 16 };

int cg_emit_einsum(cg_ctx *c, const ir_node *n) {
  const ir_attr *eq = ir_node_attr(n, "eq");
  if (!eq || !eq->einsum) return cg_fail(c, "missing or malformed 'eq'");
  const ir_einsum *e = eq->einsum;
  if (n->n_in > EIN_MAX_OPS || e->n_terms != n->n_in) return cg_fail(c, "the equation does not match the operands");
  int ids[EIN_MAX_LABELS], n_labels = 0;
  int64_t size[EIN_MAX_LABELS], stride[EIN_MAX_OPS][EIN_MAX_LABELS];
  memset(stride, 0, sizeof stride);
  for (int i = 0; i < EIN_MAX_LABELS; i++) ids[i] = -1, size[i] = -1;
  for (int op = 0; op < n->n_in; op++) {
    const ir_type *t = &n->in[op]->type;
    int len = e->start[op + 1] - e->start[op];
    if (len != t->rank) return cg_fail(c, "the equation does not match operand %d", op);
    int64_t s[IR_MAX_RANK], acc = 1;
    for (int d = t->rank - 1; d >= 0; d--) s[d] = acc, acc *= t->dims[d];
    for (int d = 0; d < len; d++) {
      int slot = e->labels[e->start[op] + d];
      if (ids[slot] < 0) ids[slot] = n_labels++;
      size[ids[slot]] = t->dims[d];
      stride[op][ids[slot]] += s[d];
    }
  }
  bool in_out[EIN_MAX_LABELS] = {0};
  int out_label[IR_MAX_RANK];
  for (int d = 0; d < e->out_len && d < IR_MAX_RANK; d++) {
    out_label[d] = ids[e->out[d]];
    if (out_label[d] < 0) return cg_fail(c, "bad output labels");
    in_out[out_label[d]] = true;
  }
  const ir_type *ot = &n->out[0]->type;
  int64_t N = cg_numel(ot);
  if (N == 0) return 0;
  int k = cg_kernel_begin(c, NULL);
  cg_kernel_signature(c, k, THREADS, false);
  cg_src(c, "  TGC_GRID_STRIDE_LOOP(o, %lldLL) {\n    long long q = o", (long long)N);
  for (int op = 0; op < n->n_in; op++) cg_src(c, ", p%d = 0", op);
  cg_src(c, ";\n");
  for (int d = e->out_len - 1; d >= 0; d--) {
    int l = out_label[d];
    cg_src(c, "    { const long long x = q %% %lldLL; q /= %lldLL;", (long long)size[l], (long long)size[l]);
    for (int op = 0; op < n->n_in; op++)
      if (stride[op][l]) cg_src(c, " p%d += x * %lldLL;", op, (long long)stride[op][l]);
    cg_src(c, " }\n");
  }
  cg_src(c, "    double acc = 0;\n");
  int depth = 0;
  for (int l = 0; l < n_labels; l++) {
    if (in_out[l]) continue;
    cg_src(c, "    for (long long s%d = 0; s%d < %lldLL; s%d++)\n", l, l, (long long)size[l], l);
    depth++;
  }
  cg_src(c, "    {\n      acc += 1.0");
  for (int op = 0; op < n->n_in; op++) {
    cg_src(c, " * tgc_d(in%d[p%d", op, op);
    for (int l = 0; l < n_labels; l++)
      if (!in_out[l] && stride[op][l]) cg_src(c, " + s%d * %lldLL", l, (long long)stride[op][l]);
    cg_src(c, "])");
  }
  cg_src(c, ";\n    }\n    out0[o] = tgc_round<%s>(acc);\n  }\n", cg_ctype(ot->dtype));
  (void)depth;
  cg_kernel_end(c, k);
  cg_launch(c, k, cg_blocks(N, THREADS), 1, THREADS, 0);
  return 0;
}
