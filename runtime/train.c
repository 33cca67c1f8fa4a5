/* runtime/train.c — the training loop on any backend: runs a training
 * program (passes/training.c: a step graph and an update graph, bound by
 * role) step after step on a device, and saves / restores the whole state.
 *
 * Everything the loop keeps lives in device memory for the whole run (see
 * runtime.h for the step). The update computes the new parameters and
 * states in the buffers of the old ones (donated); since a result may land
 * in another parameter's or state's buffer, or in the update's arena, the
 * trainer reads from the plan where each output is after the run and
 * rebinds (copying from the arena when the plan put one there).
 * Deterministic: batches are a function of (seed, step, micro-batch), sums
 * run in micro-batch order, and the kernels do not depend on the thread
 * count, so saving after N steps and resuming gives, bit for bit, the
 * parameters of an uninterrupted run (tests/unit/test_train_resume.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "comm.h"
#include "train_internal.h"



double rt_schedule_lr(const rt_schedule *s, int64_t step) {
  if (s->warmup > 0 && step < s->warmup) return s->lr * (double)(step + 1) / (double)s->warmup;
  if (s->kind == RT_SCHEDULE_CONSTANT) return s->lr;
  int64_t decay = s->total - s->warmup;
  if (decay <= 0) return s->lr;
  double p = (double)(step - s->warmup) / (double)decay;
  if (p > 1) p = 1;
  double floor_lr = s->lr * s->floor;
  return floor_lr + (s->lr - floor_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * p));
}


void rt_trainer_free(rt_trainer *t) {
  if (!t) return;
  const pass_training *pt = t->pt;
  rt_program_free(t->step_prog);
  rt_program_free(t->update_prog);
  rt_program_free(t->eval_prog);
  for (int c = 0; c < t->n_chunks; c++) {
    if (t->fwd_prog) rt_program_free(t->fwd_prog[c]);
    if (t->bwd_prog) rt_program_free(t->bwd_prog[c]);
  }
  free(t->fwd_prog);
  free(t->bwd_prog);
  rt_buffer_free(t->held_arena);
  free(t->held);
  free(t->held0);
  free(t->op_hold);
  free(t->chunk_saved_bytes);
  free(t->bwd_in);
  free(t->op_mb);
  free(t->op_chunk);
  free(t->op_bwd);
  for (int i = 0; t->pool && i < t->np + t->ns; i++) rt_device_tensor_free(t->pool[i]);
  for (int i = 0; t->data && i < pt->n_data; i++) {
    if (t->data_host && t->data_pinned && t->data_pinned[i]) rt_pinned_tensor_free(t->dev, t->data_host[i]);
    else if (t->data_host && t->data_host[i] != t->data[i]) rt_tensor_free(t->data_host[i]);
    if (t->data_whole) rt_tensor_free(t->data_whole[i]);
    rt_device_tensor_free(t->data[i]);
  }
  for (int i = 0; t->acc && i < t->np; i++) rt_device_tensor_free(t->acc[i]);
  rt_device_tensor_free(t->loss_sum);
  rt_device_tensor_free(t->correct_sum);
  rt_device_tensor_free(t->lr);
  rt_device_tensor_free(t->step_no);
  rt_device_tensor_free(t->dropout_key);
  rt_device_tensor_free(t->loss_scale);
  rt_comm_close(t->nccl); /* after the programs, before the device whose context it uses */
  rt_device_close(t->dev);
  free(t->params);
  free(t->states);
  free(t->pool);
  free(t->data);
  free(t->data_host);
  free(t->data_pinned);
  free(t->data_whole);
  free(t->acc);
  free(t->step_in);
  free(t->update_in);
  free(t->new_place);
  free(t->taken);
  free(t);
}

/* A host tensor with the contents of device tensor x: x itself on a
 * host-memory device, else a downloaded copy (host_view_free). */
rt_tensor *rt_tr_host_view(const rt_trainer *t, rt_tensor *x, char *err, size_t errlen) {
  if (t->dev->backend->host_memory) return x;
  rt_tensor *h = rt_tensor_new(&x->type);
  if (!h) {
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  if (rt_download(h->data, x, err, errlen) != 0) {
    rt_tensor_free(h);
    return NULL;
  }
  return h;
}

void rt_tr_host_view_free(const rt_trainer *t, rt_tensor *h) {
  if (h && !t->dev->backend->host_memory) rt_tensor_free(h);
}

static double download_scalar(rt_trainer *t, const rt_tensor *x, int *rc, char *err, size_t errlen) {
  unsigned char b[8] = {0};
  if (*rc == 0 && rt_download(b, x, err, errlen) != 0) *rc = -1;
  return rt_load(x->type.dtype, b, 0);
}

static int upload_scalar(rt_tensor *x, double v, char *err, size_t errlen) {
  unsigned char b[8];
  rt_store(x->type.dtype, b, 0, v);
  return rt_upload(x, b, err, errlen);
}

/* Elements of x (host memory) that are Inf or NaN. */
static int64_t count_nonfinite(const rt_tensor *x) {
  int64_t n = rt_numel(&x->type), bad = 0;
  for (int64_t i = 0; i < n; i++) bad += !isfinite(rt_load(x->type.dtype, x->data, i));
  return bad;
}

/* The parameters (host views h[0..np)) are all finite: 0, or -1 with
 * "'NAME': K of N elements are Inf or NaN" (the first such parameter). */
int rt_tr_check_params_finite(const rt_trainer *t, rt_tensor *const *h, char *err, size_t errlen) {
  for (int i = 0; i < t->np; i++) {
    int64_t bad = count_nonfinite(h[i]);
    if (bad) {
      rt_errf(err, errlen, "'%s': %lld of %lld elements are Inf or NaN", t->pt->step->params[i]->name,
              (long long)bad, (long long)rt_numel(&h[i]->type));
      return -1;
    }
  }
  return 0;
}

static rt_tensor *scalar_tensor(rt_device *d, char *err, size_t errlen) {
  ir_type sc = {.dtype = IR_DT_F64, .rank = 0};
  return rt_device_tensor_new(d, &sc, err, errlen);
}

/* The order of one step's micro-batch halves on stage s of p (K
 * micro-batches, v chunks: chunk c is virtual stage c p + s), as the
 * planner simulates them (plan/plan_sim.c):
 *   gpipe        every forward, then every backward, the last micro-batch first;
 *   1f1b         min(p - s - 1, K) forwards, then a forward and a backward in
 *                turn, then the remaining backwards (PipeDream-Flush);
 *   interleaved  Megatron-LM's: the K v forwards taken p micro-batches at a
 *                time through chunk 0, then chunk 1, ...; the backwards the
 *                same way from chunk v - 1 down; min(2 (p - s - 1) + (v - 1) p,
 *                K v) forwards first, then a forward and a backward in turn,
 *                then the remaining backwards (K a multiple of p).
 * Returns the count, 2 K v (-1: interleaved with K not a multiple of p). */
int rt_pipeline_order(int schedule, int p, int v, int s, int K, int *mb, int *chunk, bool *bwd) {
  int n = 0;
#define OP(m, c, b) (mb[n] = (m), chunk[n] = (c), bwd[n] = (b), n++)
  if (schedule == PASS_SCHED_INTERLEAVED) {
    if (p < 1 || v < 1 || K % p != 0) return -1;
    int total = K * v, w = 2 * (p - s - 1) + (v - 1) * p;
    if (w > total) w = total;
    /* the i-th forward (backward): group i / (p v) of p micro-batches, chunk (i / p) mod v (from the last) */
#define FWD(i) OP((i) / (p * v) * p + (i) % p, (i) / p % v, false)
#define BWD(i) OP((i) / (p * v) * p + (i) % p, v - 1 - (i) / p % v, true)
    for (int i = 0; i < w; i++) FWD(i);
    for (int i = 0; i < total - w; i++) {
      FWD(w + i);
      BWD(i);
    }
    for (int i = total - w; i < total; i++) BWD(i);
#undef FWD
#undef BWD
  } else if (schedule == PASS_SCHED_1F1B) {
    int w = p - s - 1 < K ? p - s - 1 : K;
    for (int k = 0; k < w; k++) OP(k, 0, false);
    for (int k = 0; k < K - w; k++) {
      OP(w + k, 0, false);
      OP(k, 0, true);
    }
    for (int k = K - w; k < K; k++) OP(k, 0, true);
  } else {
    for (int k = 0; k < K; k++) OP(k, 0, false);
    for (int k = K - 1; k >= 0; k--) OP(k, 0, true);
  }
#undef OP
  return n;
}

/* The arena's offsets of the holdings: n intervals [start[h], end[h]] of
 * the schedule's ops (holding h is filled by op start[h], a forward, and
 * read last by op end[h], its backward), size[h] bytes each; two conflict
 * when their intervals meet. */
typedef struct {
  int n;
  const int *start, *end;
  const size_t *size;
  size_t *off;  /* n: the placed ones' offsets */
  bool *placed; /* n */
  int *near;    /* n: scratch */
  const int *by; /* n: the order the search tries them in */
  size_t target; /* the search's arena */
  long budget;   /* the search's work left (a first fit among m conflicting costs n + m m) */
} held_plan;

/* The lowest offset of h clear of the placed holdings it conflicts with:
 * 0 or the end of one of them. Placing more never makes it lower. */
static size_t first_fit(held_plan *p, int h) {
  int m = 0;
  for (int g = 0; g < p->n; g++)
    if (p->placed[g] && p->start[g] < p->end[h] && p->start[h] < p->end[g]) p->near[m++] = g;
  p->budget -= p->n + (long)m * m;
  size_t best = SIZE_MAX;
  for (int c = -1; c < m; c++) {
    size_t o = c < 0 ? 0 : p->off[p->near[c]] + p->size[p->near[c]];
    bool clear = o < best;
    for (int j = 0; j < m && clear; j++)
      clear = o >= p->off[p->near[j]] + p->size[p->near[j]] || p->off[p->near[j]] >= o + p->size[h];
    if (clear) best = o;
  }
  return best;
}

/* Each holding, in the order `by`, at its first fit. Returns the arena's bytes. */
static size_t place_in_order(held_plan *p, const int *by) {
  memset(p->placed, 0, (size_t)p->n * sizeof *p->placed);
  size_t top = 0;
  for (int i = 0; i < p->n; i++) {
    int h = by[i];
    p->off[h] = first_fit(p, h), p->placed[h] = true;
    if (p->off[h] + p->size[h] > top) top = p->off[h] + p->size[h];
  }
  return top;
}

/* An order whose first fits stay within p->target, searched depth first
 * (true: p->off holds them). Some order's first fits are as good as any
 * placement: those of a placement taken by its offsets are no higher, and
 * repeating that ends in a placement that first fit in the order of its own
 * offsets gives back; so the search only extends an order with offsets
 * that do not go down (a tie: a later holding), and gives up a branch where
 * some holding left can no longer fit (first fits only rise). */
static bool search_order(held_plan *p, int depth, size_t last_off, int last) {
  if (depth == p->n) return true;
  for (int i = 0; i < p->n; i++) { /* every holding left must still fit, and not below the order's offsets */
    if (p->placed[i]) continue;
    if (p->budget <= 0) return false;
    size_t o = first_fit(p, i);
    if (o + p->size[i] > p->target || o + p->size[i] <= last_off) return false;
  }
  for (int i = 0; i < p->n && p->budget > 0; i++) {
    int h = p->by[i];
    if (p->placed[h]) continue;
    size_t o = first_fit(p, h);
    if (o < last_off || (o == last_off && h < last)) continue;
    p->off[h] = o, p->placed[h] = true;
    if (search_order(p, depth + 1, o, h)) return true;
    p->placed[h] = false;
  }
  return false;
}

/* The saved values of one holding of chunk c: each at a multiple of
 * HELD_ALIGN from the holding's start (the programs' arenas' alignment). */
enum { HELD_ALIGN = PASS_PLAN_ALIGNMENT, HELD_SEARCH_BUDGET = 1 << 26 };
static size_t held_align(size_t b) { return (b + HELD_ALIGN - 1) / HELD_ALIGN * HELD_ALIGN; }

/* Holding h, the saved values of the h-th forward of the order, lives from
 * that forward to its backward. The most bytes held at once is the least
 * an arena can be; each holding goes at its first fit in the order of the
 * forwards, else (more than the least) in the order of size (the largest
 * first), else in an order search_order finds within HELD_SEARCH_BUDGET
 * steps; the smallest arena found is the one used (docs/sharding.md). */
size_t rt_pipeline_place(int n, const int *mb, const int *chunk, const bool *bwd, int v, const size_t *bytes,
                         size_t *off, size_t *least) {
  int nh = n / 2;
  int *start = calloc((size_t)nh + 1, sizeof *start), *end = calloc((size_t)nh + 1, sizeof *end);
  int *by_start = calloc((size_t)nh + 1, sizeof *by_start), *by_size = calloc((size_t)nh + 1, sizeof *by_size);
  int *near = calloc((size_t)nh + 1, sizeof *near), *of = calloc((size_t)nh + 1, sizeof *of); /* (mb, chunk) -> h */
  size_t *size = calloc((size_t)nh + 1, sizeof *size), *best = calloc((size_t)nh + 1, sizeof *best);
  size_t *at = calloc((size_t)nh + 1, sizeof *at);
  bool *placed = calloc((size_t)nh + 1, sizeof *placed);
  if (!start || !end || !by_start || !by_size || !near || !of || !size || !best || !at || !placed) IR_DIE("out of memory (start || !end || !by_start || !by_size || !near || !of || !size || !best || !at || !placed)");
  int h = 0;
  size_t most = 0, now = 0;
  for (int o = 0; o < n; o++) {
    int key = mb[o] * v + chunk[o];
    if (!bwd[o]) {
      of[key] = h, start[h] = o, end[h] = n, size[h] = bytes[chunk[o]], h++;
      if ((now += bytes[chunk[o]]) > most) most = now;
    } else end[of[key]] = o, now -= bytes[chunk[o]];
  }
  for (int i = 0; i < nh; i++) by_start[i] = by_size[i] = i;
  for (int i = 1; i < nh; i++) /* insertion sort: the largest first, then by start */
    for (int j = i; j > 0 && size[by_size[j - 1]] < size[by_size[j]]; j--) {
      int x = by_size[j];
      by_size[j] = by_size[j - 1], by_size[j - 1] = x;
    }
  held_plan hp = {nh, start, end, size, at, placed, near, by_start, most, 0};
  size_t arena = place_in_order(&hp, by_start);
  memcpy(best, at, (size_t)nh * sizeof *best);
  if (arena > most) {
    size_t a2 = place_in_order(&hp, by_size);
    if (a2 < arena) memcpy(best, at, (size_t)nh * sizeof *best), arena = a2;
  }
  if (arena > most) {
    memset(placed, 0, (size_t)nh * sizeof *placed);
    hp.budget = HELD_SEARCH_BUDGET;
    if (search_order(&hp, 0, 0, -1)) memcpy(best, at, (size_t)nh * sizeof *best), arena = most;
  }
  for (int o = 0; o < n; o++) off[o] = best[of[mb[o] * v + chunk[o]]];
  if (least) *least = most;
  free(start), free(end), free(by_start), free(by_size), free(near), free(of);
  free(size), free(best), free(at), free(placed);
  return arena;
}

/* Pipeline: the schedule, the holdings' places (rt_pipeline_place) and
 * bwd's bindings. */
static int pipeline_setup(rt_trainer *t, char *err, size_t errlen) {
  const pass_training *pt = t->pt;
  int v = t->n_chunks, n = 2 * t->K * v, nh = t->K * v;
  t->op_mb = calloc((size_t)n, sizeof *t->op_mb);
  t->op_chunk = calloc((size_t)n, sizeof *t->op_chunk);
  t->op_bwd = calloc((size_t)n, sizeof *t->op_bwd);
  t->op_hold = calloc((size_t)n, sizeof *t->op_hold);
  t->held0 = calloc((size_t)nh + 1, sizeof *t->held0);
  t->chunk_saved_bytes = calloc((size_t)v, sizeof *t->chunk_saved_bytes);
  int most = 0; /* bwd's inputs, the most of any chunk's */
  for (int c = 0; c < v; c++) most = pt->chunk[c].bwd->n_inputs > most ? pt->chunk[c].bwd->n_inputs : most;
  t->bwd_in = calloc((size_t)most + 1, sizeof *t->bwd_in);
  int *of = calloc((size_t)nh, sizeof *of); /* (mb, chunk) -> holding */
  size_t *off = calloc((size_t)n, sizeof *off), *aligned = calloc((size_t)v, sizeof *aligned);
  if (!t->op_mb || !t->op_chunk || !t->op_bwd || !t->op_hold || !t->held0 || !t->chunk_saved_bytes || !t->bwd_in ||
      !of || !off || !aligned)
    abort();
  int rc = -1;
  t->n_ops = rt_pipeline_order(pt->schedule, pt->n_stages, v, pt->stage, t->K, t->op_mb, t->op_chunk, t->op_bwd);
  if (t->n_ops != n) {
    rt_errf(err, errlen, "the interleaved schedule needs the micro-batches (%d) to be a multiple of pp (%d)", t->K,
            pt->n_stages);
    goto done;
  }
  for (int c = 0; c < v; c++) {
    const pass_pipe_chunk *ch = &pt->chunk[c];
    for (int j = 0; j < ch->n_saved; j++) {
      rt_tensor shape = rt_tensor_view(NULL, 0, &ch->fwd->outputs[ch->fwd_saved0 + j].value->type);
      t->chunk_saved_bytes[c] += shape.nbytes;
      aligned[c] += held_align(shape.nbytes);
    }
  }
  size_t arena = t->held_reserved =
      rt_pipeline_place(n, t->op_mb, t->op_chunk, t->op_bwd, v, aligned, off, NULL);
  size_t n_held = 0;
  for (int c = 0; c < v; c++) n_held += (size_t)t->K * (size_t)pt->chunk[c].n_saved;
  if (!(t->held = calloc(n_held + 1, sizeof *t->held))) IR_DIE("out of memory ((t->held = calloc(n_held + 1, sizeof *t->held)))");
  if (arena > 0) {
    const unsigned char zero = 0;
    if (!(t->held_arena = rt_buffer_alloc(t->dev, arena, err, errlen)) ||
        rt_fill_bytes(t->dev, t->held_arena->ptr, arena, &zero, 1, err, errlen) != 0)
      goto done;
  }
  int h = 0;
  for (int o = 0; o < n; o++) {
    int c = t->op_chunk[o], key = t->op_mb[o] * v + c;
    const pass_pipe_chunk *ch = &pt->chunk[c];
    if (!t->op_bwd[o]) { /* a new holding: its saved values' views */
      of[key] = h;
      t->held0[h + 1] = t->held0[h] + ch->n_saved;
      size_t at = off[o];
      for (int j = 0; j < ch->n_saved; j++) {
        rt_tensor *x = &t->held[t->held0[h] + j];
        *x = rt_tensor_view(t->held_arena, at, &ch->fwd->outputs[ch->fwd_saved0 + j].value->type);
        at += held_align(x->nbytes);
      }
      h++;
    }
    t->op_hold[o] = of[key];
  }
  for (int i = 0; i < pt->bwd_saved0; i++) t->bwd_in[i] = t->step_in[i];
  rc = 0;
done:
  free(of), free(off), free(aligned);
  return rc;
}

rt_trainer *rt_trainer_new(const rt_train_config *c, char *err, size_t errlen) {
  rt_trainer *t = calloc(1, sizeof *t);
  if (!t) {
    rt_errf(err, errlen, "out of memory");
    return NULL;
  }
  t->c = *c;
  const pass_training *pt = t->pt = c->prog;
  const ir_graph *sg = pt->step, *ug = pt->update;
  t->np = pt->n_params;
  t->ns = pt->n_states;
  t->K = pt->micro_batches;
  int np = t->np, ns = t->ns;
  t->mesh = &sg->mesh;
  t->sharded = ir_mesh_ranks(t->mesh) > 1;
  if (t->sharded) { /* the communicator's mesh is the graphs' */
    if (!c->comm) {
      rt_errf(err, errlen, "internal error: a sharded training program without a communicator");
      goto fail;
    }
    if (rt_mesh_bind(c->comm, t->mesh, t->coord, err, errlen) != 0) goto fail;
  }
  if (!(t->dev = rt_device_open_with(c->backend ? c->backend : &rt_cpu_backend, &c->device, err, errlen))) goto fail;
  if (t->sharded && c->nccl) { /* NCCL over the same ranks, bootstrapped over comm's launcher */
    const struct cg_cuda_api *api = NULL;
    if (!t->dev->backend->comm_table) {
      rt_errf(err, errlen, "NCCL needs a GPU backend (cuda or cuda-emu); the %s backend's collectives go through MPI",
              t->dev->backend->name);
      goto fail;
    }
    if (t->dev->backend->comm_table(t->dev, &api, err, errlen) != 0) goto fail;
    rt_comm_options no = {.impl = "nccl", .cuda = api, .timeout_s = rt_comm_timeout(c->comm)};
    if (!(t->nccl = rt_comm_open(&no, err, errlen)) || rt_mesh_bind(t->nccl, t->mesh, NULL, err, errlen) != 0) goto fail;
  }
  if (!t->sharded && rt_data_bind_inputs(c->data, sg, pt->n_data, err, errlen) != 0) goto fail;
  rt_data_set_micro_batches(c->data, t->K);
  t->params = calloc((size_t)np + 1, sizeof *t->params);
  t->states = calloc((size_t)ns + 1, sizeof *t->states);
  t->pool = calloc((size_t)(np + ns) + 1, sizeof *t->pool);
  t->new_place = calloc((size_t)(np + ns) + 1, sizeof *t->new_place);
  t->taken = calloc((size_t)(np + ns) + 1, sizeof *t->taken);
  t->data = calloc((size_t)pt->n_data + 1, sizeof *t->data);
  t->data_host = calloc((size_t)pt->n_data + 1, sizeof *t->data_host);
  t->data_pinned = calloc((size_t)pt->n_data + 1, sizeof *t->data_pinned);
  t->data_whole = calloc((size_t)pt->n_data + 1, sizeof *t->data_whole);
  t->acc = calloc((size_t)np + 1, sizeof *t->acc);
  t->step_in = calloc((size_t)sg->n_inputs + 1, sizeof *t->step_in);
  t->update_in = calloc((size_t)ug->n_inputs + 1, sizeof *t->update_in);
  if (!t->params || !t->states || !t->pool || !t->new_place || !t->taken || !t->data || !t->data_host || !t->data_pinned ||
      !t->data_whole || !t->acc || !t->step_in ||
      !t->update_in) {
    rt_errf(err, errlen, "out of memory");
    goto fail;
  }
  /* parameters: initialized on the host from the seed, then uploaded */
  for (int i = 0; i < np; i++) {
    const ir_value *p = sg->params[i];
    if (!(t->pool[i] = rt_device_tensor_new(t->dev, &p->type, err, errlen))) goto fail;
    t->params[i] = t->pool[i];
    rt_tensor *h = rt_tr_host_view(t, t->params[i], err, errlen);
    if (!h) goto fail;
    int rc = t->sharded ? rt_init_param_shard(h, p, c->seed, t->mesh, t->coord, err, errlen) : 0;
    if (!t->sharded) rt_init_param(h, p, c->seed);
    if (rc == 0 && h != t->params[i]) rc = rt_upload(t->params[i], h->data, err, errlen);
    rt_tr_host_view_free(t, h);
    if (rc != 0) goto fail;
  }
  for (int i = 0; i < ns; i++) {
    if (!(t->pool[np + i] = rt_device_tensor_new(t->dev, &ug->inputs[np + i]->type, err, errlen))) goto fail;
    t->states[i] = t->pool[np + i];
  }
  for (int i = 0; i < pt->n_data; i++) {
    if (!(t->data[i] = rt_device_tensor_new(t->dev, &sg->inputs[i]->type, err, errlen))) goto fail;
    /* the batch: in the device's page-locked memory where it has some (uploaded without waiting), else pageable */
    if (!t->dev->backend->host_memory) {
      t->data_host[i] = rt_pinned_tensor_new(t->dev, &sg->inputs[i]->type, err, errlen);
      if (!t->data_host[i] && err[0]) goto fail;
      t->data_pinned[i] = t->data_host[i] != NULL;
    }
    if (!t->data_host[i])
      t->data_host[i] = t->dev->backend->host_memory ? t->data[i] : rt_tensor_new(&sg->inputs[i]->type);
    if (t->sharded) { /* the source writes the whole batch; this rank's block is taken from it */
      ir_type whole = ir_shard_global_type(&sg->inputs[i]->type, &sg->inputs[i]->shard, t->mesh);
      t->data_whole[i] = rt_tensor_new(&whole);
    }
    if (!t->data_host[i] || (t->sharded && !t->data_whole[i])) {
      rt_errf(err, errlen, "out of memory");
      goto fail;
    }
    t->step_in[i] = t->data[i];
  }
  for (int i = 0; t->K > 1 && i < np; i++) {
    if (!(t->acc[i] = rt_device_tensor_new(t->dev, &sg->inputs[pt->acc_input0 + i]->type, err, errlen))) goto fail;
    t->step_in[pt->acc_input0 + i] = t->acc[i];
  }
  if (!(t->loss_sum = scalar_tensor(t->dev, err, errlen)) || !(t->lr = scalar_tensor(t->dev, err, errlen)) ||
      !(t->step_no = scalar_tensor(t->dev, err, errlen)))
    goto fail;
  t->step_in[pt->loss_sum_input] = t->loss_sum;
  if (pt->loss_scale_input >= 0) { /* dynamic loss scaling */
    ir_type sc = {.dtype = IR_DT_F32, .rank = 0};
    if (!(t->loss_scale = rt_device_tensor_new(t->dev, &sc, err, errlen))) goto fail;
    t->step_in[pt->loss_scale_input] = t->loss_scale;
    t->scale = c->loss_scale_init > 0 ? c->loss_scale_init : RT_LOSS_SCALE_INIT;
    t->scale_stale = true;
  }
  if (pt->accuracy) {
    if (!(t->correct_sum = scalar_tensor(t->dev, err, errlen))) goto fail;
    t->step_in[pt->correct_sum_input] = t->correct_sum;
  }
  if (pt->dropout_key_input >= 0) {
    ir_type i64 = {.dtype = IR_DT_I64, .rank = 0};
    if (!(t->dropout_key = rt_device_tensor_new(t->dev, &i64, err, errlen))) goto fail;
    t->step_in[pt->dropout_key_input] = t->dropout_key;
  }
  /* the programs: the sums donated to the step, states and params to the update */
  bool *sdon = calloc((size_t)sg->n_inputs + 1, sizeof *sdon), *udon = calloc((size_t)ug->n_inputs + 1, sizeof *udon),
       *pdon = calloc((size_t)np + 1, sizeof *pdon);
  if (!sdon || !udon || !pdon) {
    free(sdon), free(udon), free(pdon);
    rt_errf(err, errlen, "out of memory");
    goto fail;
  }
  for (int i = pt->n_data; i < sg->n_inputs; i++) sdon[i] = i != pt->dropout_key_input; /* the key: read to the end */
  for (int i = 0; pt->copy_input && i < np; i++) /* the update's results, read by every micro-batch */
    if (pt->copy_input[i] >= 0) sdon[pt->copy_input[i]] = false;
  for (int i = 0; i < ns; i++) udon[np + i] = true;
  for (int i = 0; i < np; i++) pdon[i] = true;
  rt_comm *gc = rt_trainer_comm(t);
  rt_program_options so = {.donate_inputs = sdon, .profile = c->profile, .comm = t->sharded ? gc : NULL};
  rt_program_options uo = {.donate_inputs = udon, .donate_params = pdon, .profile = c->update_profile,
                           .comm = t->sharded ? gc : NULL};
  if (pt->fwd) { /* pipeline: each chunk's halves (bwd's extra inputs, the saved values, not donated) */
    t->n_chunks = pt->n_chunks;
    t->fwd_prog = calloc((size_t)t->n_chunks, sizeof *t->fwd_prog);
    t->bwd_prog = calloc((size_t)t->n_chunks, sizeof *t->bwd_prog);
    int most = 0; /* bwd's inputs, the most of any chunk's (the step's, then its saved values) */
    for (int c = 0; c < t->n_chunks; c++) most = pt->chunk[c].bwd->n_inputs > most ? pt->chunk[c].bwd->n_inputs : most;
    bool *bdon = calloc((size_t)most + 1, sizeof *bdon);
    if (!t->fwd_prog || !t->bwd_prog || !bdon) IR_DIE("out of memory (t->fwd_prog || !t->bwd_prog || !bdon)");
    for (int i = pt->n_data; i < pt->bwd_saved0; i++) bdon[i] = i != pt->dropout_key_input;
    rt_program_options bo = so;
    bo.donate_inputs = bdon;
    bool ok = true;
    for (int c = 0; c < t->n_chunks && ok; c++)
      ok = (t->fwd_prog[c] = rt_program_new(t->dev, pt->chunk[c].fwd, &so, err, errlen)) &&
           (t->bwd_prog[c] = rt_program_new(t->dev, pt->chunk[c].bwd, &bo, err, errlen));
    free(bdon);
    t->update_prog = ok ? rt_program_new(t->dev, ug, &uo, err, errlen) : NULL;
  } else {
    t->step_prog = rt_program_new(t->dev, sg, &so, err, errlen);
    t->update_prog = t->step_prog ? rt_program_new(t->dev, ug, &uo, err, errlen) : NULL;
  }
  free(sdon), free(udon), free(pdon);
  if (!t->update_prog) goto fail;
  if (pt->eval) { /* compiled once; run on the step's parameter buffers and data inputs */
    for (int i = 0; i < np; i++)
      if (!ir_type_equal(&pt->eval->params[i]->type, &sg->params[i]->type)) {
        rt_errf(err, errlen, "internal error: the eval graph holds parameter '%s' in another layout than the step",
                sg->params[i]->name);
        goto fail;
      }
    rt_program_options eo = {.comm = t->sharded ? gc : NULL};
    if (!(t->eval_prog = rt_program_new(t->dev, pt->eval, &eo, err, errlen))) goto fail;
  }
  if (pt->fwd && pipeline_setup(t, err, errlen) != 0) goto fail;
  t->update_in[pt->lr_input] = t->lr;
  t->update_in[pt->step_input] = t->step_no;
  t->update_in[pt->update_loss_sum_input] = t->loss_sum;
  if (pt->accuracy) t->update_in[pt->update_correct_sum_input] = t->correct_sum;
  for (int i = 0; pt->copy_input && i < np; i++) /* where the update leaves them (its arena), where the step reads them */
    if (pt->copy_input[i] >= 0) t->step_in[pt->copy_input[i]] = (rt_tensor *)rt_program_output(t->update_prog, pt->copy_output[i]);
  if (rt_tr_make_copies(t, err, errlen) != 0) goto fail;
  return t;
fail:
  rt_trainer_free(t);
  return NULL;
}

int rt_tr_make_copies(rt_trainer *t, char *err, size_t errlen) {
  const pass_training *pt = t->pt;
  for (int i = 0; pt->copy_input && i < t->np; i++) {
    if (pt->copy_input[i] < 0) continue;
    rt_tensor *dst = t->step_in[pt->copy_input[i]], *h = rt_tr_host_view(t, t->params[i], err, errlen);
    rt_tensor *c = h ? rt_tensor_new(&dst->type) : NULL;
    int rc = c ? 0 : -1;
    if (h && !c) rt_errf(err, errlen, "out of memory");
    int64_t n = c ? rt_numel(&c->type) : 0;
    if (c && h->type.dtype == IR_DT_F32 && c->type.dtype == IR_DT_BF16) { /* the cast's rounding (ir/dtype.c) */
      const float *src = h->data;
      uint16_t *dst16 = c->data;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t k = 0; k < n; k++) dst16[k] = ir_f32_to_bf16(src[k]);
    } else {
      for (int64_t k = 0; k < n; k++) rt_store(c->type.dtype, c->data, k, rt_load(h->type.dtype, h->data, k));
    }
    if (rc == 0) rc = rt_upload(dst, c->data, err, errlen);
    rt_tensor_free(c);
    if (h) rt_tr_host_view_free(t, h);
    if (rc != 0) return -1;
  }
  return 0;
}

int64_t rt_trainer_steps_done(const rt_trainer *t) { return t->step; }
rt_comm *rt_trainer_comm(const rt_trainer *t) { return t->nccl ? t->nccl : t->c.comm; }
int rt_trainer_num_params(const rt_trainer *t) { return t->np; }
const rt_tensor *rt_trainer_param(const rt_trainer *t, int i) { return t->params[i]; }
rt_device *rt_trainer_device(const rt_trainer *t) { return t->dev; }
void rt_trainer_comm_predicted(const rt_trainer *t, pass_comm_tally tally[IR_NUM_OPS][IR_NUM_AXES]) {
  pass_comm_tally u[IR_NUM_OPS][IR_NUM_AXES];
  int zero[IR_NUM_AXES] = {0, 0, 0};
  const int *coord = t->sharded ? t->coord : zero;
  pass_comm_tally_of(t->pt->fwd ? t->pt->fwd : t->pt->step, coord, tally);
  for (int h = 1; t->pt->fwd && h < 2 * t->pt->n_chunks; h++) { /* pipeline: every chunk's two halves each micro-batch */
    pass_comm_tally b[IR_NUM_OPS][IR_NUM_AXES];
    const pass_pipe_chunk *ch = &t->pt->chunk[h / 2];
    pass_comm_tally_of(h % 2 ? ch->bwd : ch->fwd, coord, b);
    for (int o = 0; o < IR_NUM_OPS; o++)
      for (int a = 0; a < IR_NUM_AXES; a++) {
        tally[o][a].calls += b[o][a].calls;
        tally[o][a].sent += b[o][a].sent;
        tally[o][a].received += b[o][a].received;
      }
  }
  pass_comm_tally_of(t->pt->update, coord, u);
  for (int o = 0; o < IR_NUM_OPS; o++)
    for (int a = 0; a < IR_NUM_AXES; a++) {
      tally[o][a].calls = tally[o][a].calls * t->K + u[o][a].calls;
      tally[o][a].sent = tally[o][a].sent * t->K + u[o][a].sent;
      tally[o][a].received = tally[o][a].received * t->K + u[o][a].received;
    }
}

void rt_trainer_comm_check(const rt_trainer *t, int64_t steps, rt_comm_check *out) {
  pass_comm_tally pred[IR_NUM_OPS][IR_NUM_AXES], ev[IR_NUM_OPS][IR_NUM_AXES];
  memset(out, 0, sizeof *out);
  out->steps = steps;
  rt_trainer_comm_predicted(t, pred);
  rt_trainer_comm_eval(t, ev);
  const rt_comm *c = rt_trainer_comm(t);
  bool equal = steps > 0;
  for (int k = 0; k < IR_NUM_COLLS; k++)
    for (int a = 0; a < IR_NUM_AXES; a++) {
      ir_op op = ir_coll_op((ir_coll)k);
      int ca = rt_comm_axis_find(c, ir_axis_name((ir_axis)a));
      pass_comm_tally *m = &out->measured[k][a], *e = &ev[op][a];
      if (ca >= 0) {
        rt_comm_counter n = rt_comm_count(c, (rt_coll_kind)k, ca);
        *m = (pass_comm_tally){n.calls - e->calls, n.bytes_sent - e->sent, n.bytes_received - e->received};
      }
      const pass_comm_tally *p = &pred[op][a];
      out->predicted[k][a] = *p;
      if ((m->calls || p->calls) && steps > 0)
        equal &= m->calls == p->calls * steps && m->sent == p->sent * steps && m->received == p->received * steps;
    }
  out->equal = equal;
}

void rt_trainer_comm_eval(const rt_trainer *t, pass_comm_tally tally[IR_NUM_OPS][IR_NUM_AXES]) {
  memset(tally, 0, sizeof(pass_comm_tally) * IR_NUM_OPS * IR_NUM_AXES);
  if (!t->pt->eval || !t->eval_runs) return;
  int zero[IR_NUM_AXES] = {0, 0, 0};
  pass_comm_tally_of(t->pt->eval, t->sharded ? t->coord : zero, tally);
  for (int o = 0; o < IR_NUM_OPS; o++)
    for (int a = 0; a < IR_NUM_AXES; a++) {
      tally[o][a].calls *= t->eval_runs;
      tally[o][a].sent *= t->eval_runs;
      tally[o][a].received *= t->eval_runs;
    }
}

size_t rt_trainer_arena_bytes(const rt_trainer *t, bool update) {
  if (update) return rt_program_arena_bytes(t->update_prog);
  if (t->step_prog) return rt_program_arena_bytes(t->step_prog);
  size_t bytes = 0;
  for (int c = 0; c < t->n_chunks; c++)
    bytes += rt_program_arena_bytes(t->fwd_prog[c]) + rt_program_arena_bytes(t->bwd_prog[c]);
  return bytes;
}

int rt_trainer_pipeline_in_flight(const rt_trainer *t, size_t *bytes) {
  if (bytes) *bytes = t->in_flight_bytes_peak;
  return t->in_flight_peak;
}

size_t rt_trainer_pipeline_reserved(const rt_trainer *t) { return t->held_reserved; }

/* After a program run: the value of output `out` into dst (nothing when
 * the plan computed it in dst's buffer already). */
static int keep_output(rt_program *p, int out, rt_tensor *dst, char *err, size_t errlen) {
  const rt_tensor *o = rt_program_output(p, out);
  return o->data == dst->data ? 0 : rt_copy(dst, o, err, errlen);
}

/* After the update: the tensors of pool that hold the new parameters and
 * states, following where the plan put each output: in a donated buffer
 * (the tensor of the pool whose data it is), or in the arena (copied into a
 * pool tensor no output took, of the same size). */
static int rebind(rt_trainer *t, char *err, size_t errlen) {
  int n = t->np + t->ns;
  bool *taken = t->taken;
  memset(taken, 0, (size_t)n * sizeof *taken);
  for (int j = 0; j < n; j++) {
    const rt_tensor *o = rt_program_output(t->update_prog, j);
    t->new_place[j] = NULL;
    for (int k = 0; k < n && !t->new_place[j]; k++)
      if (!taken[k] && t->pool[k]->data == o->data) taken[k] = true, t->new_place[j] = t->pool[k];
  }
  int rc = 0;
  for (int j = 0; j < n && rc == 0; j++) {
    if (t->new_place[j]) continue;
    const rt_tensor *o = rt_program_output(t->update_prog, j);
    int k = 0;
    while (k < n && (taken[k] || t->pool[k]->nbytes != o->nbytes)) k++;
    if (k == n) {
      rt_errf(err, errlen, "internal error: no buffer left for output %d of the update", j);
      rc = -1;
      break;
    }
    taken[k] = true;
    t->new_place[j] = t->pool[k];
    rc = rt_copy(t->pool[k], o, err, errlen);
  }
  if (rc != 0) return -1;
  /* the pool's tensors carry the old types: give each its new value's */
  for (int j = 0; j < n; j++) {
    const rt_tensor *o = rt_program_output(t->update_prog, j);
    t->new_place[j]->type = o->type;
    if (j < t->np) t->params[j] = t->new_place[j];
    else t->states[j - t->np] = t->new_place[j];
  }
  return 0;
}

static const unsigned char minus_zero_f64[8] = {0, 0, 0, 0, 0, 0, 0, 0x80};

/* Every element = -0.0 in t's dtype: the start of a sum (x + -0.0 = x). */
static int fill_minus_zero(rt_tensor *x, char *err, size_t errlen) {
  unsigned char b[8];
  size_t es = ir_dtype_size(x->type.dtype);
  if (x->type.dtype == IR_DT_F64) memcpy(b, minus_zero_f64, 8);
  else rt_store(x->type.dtype, b, 0, -0.0);
  return rt_fill_bytes(x->buf->dev, x->data, x->nbytes, b, es, err, errlen);
}

/* The data inputs of micro-batch k of this step (this rank's block of
 * them), or (src given) of eval batch k of src. */
static int feed_from(rt_trainer *t, rt_data *src, int64_t k, char *err, size_t errlen) {
  const pass_training *pt = t->pt;
  rt_tensor **whole = t->sharded ? t->data_whole : t->data_host;
  if (rt_host_wait(t->dev, err, errlen) != 0) return -1; /* the last batch's uploads have read data_host */
  if (src ? rt_data_fill_eval(src, t->c.seed, k, whole, err, errlen) != 0
          : rt_data_fill(t->c.data, t->c.seed, t->step, (int)k, whole, err, errlen) != 0)
    return -1;
  for (int i = 0; t->sharded && i < pt->n_data; i++)
    if (rt_shard_extract(t->data_whole[i], t->data_host[i], &pt->step->inputs[i]->shard, t->mesh, t->coord, err,
                         errlen) != 0)
      return -1;
  for (int i = 0; i < pt->n_data; i++)
    if (t->data_pinned[i] ? rt_upload_async(t->data[i], t->data_host[i], err, errlen) != 0
                          : t->data_host[i] != t->data[i] && rt_upload(t->data[i], t->data_host[i]->data, err, errlen) != 0)
      return -1;
  return 0;
}

static int feed(rt_trainer *t, int k, char *err, size_t errlen) { return feed_from(t, NULL, k, err, errlen); }

int rt_trainer_eval(rt_trainer *t, rt_data *src, int64_t batches, rt_eval_result *r, char *err, size_t errlen) {
  const pass_training *pt = t->pt;
  if (!t->eval_prog) {
    rt_errf(err, errlen, "internal error: the training program was built without its eval graph");
    return -1;
  }
  if (t->lost || t->nonfinite) {
    rt_errf(err, errlen, "the parameters are not usable (an earlier step failed)");
    return -1;
  }
  double loss = 0, correct = 0;
  int rc = 0;
  for (int64_t k = 0; k < batches && rc == 0; k++) {
    if (feed_from(t, src, k, err, errlen) != 0 || rt_program_run(t->eval_prog, t->data, t->params, err, errlen) != 0)
      return -1;
    t->eval_runs++;
    loss += download_scalar(t, rt_program_output(t->eval_prog, pt->eval_loss_output), &rc, err, errlen);
    if (pt->eval_correct_output >= 0)
      correct += download_scalar(t, rt_program_output(t->eval_prog, pt->eval_correct_output), &rc, err, errlen);
  }
  if (rc != 0) return -1;
  r->batches = batches;
  r->loss = batches ? loss / (double)batches : 0;
  r->accuracy = pt->eval_correct_output >= 0 && batches ? correct / ((double)pt->positions * (double)batches) : -1;
  r->perplexity = rt_data_is_sequence(src) ? exp(r->loss) : -1;
  return 0;
}

/* The dropout key of micro-batch k of this step (rt_dropout_key): the same
 * on every rank, each of which draws its block of the mask from it. */
static int set_dropout_key(rt_trainer *t, int k, char *err, size_t errlen) {
  if (!t->dropout_key) return 0;
  int64_t key = (int64_t)rt_dropout_key(t->c.seed, t->step, k);
  return rt_upload(t->dropout_key, &key, err, errlen);
}

/* One step's halves in the schedule's order: a forward keeps the sums and
 * puts what the backward reads in its holding's place; a backward reads
 * it and keeps the gradient sums. */
static int pipeline_step(rt_trainer *t, char *err, size_t errlen) {
  const pass_training *pt = t->pt;
  t->in_flight = t->in_flight_peak = 0;
  t->in_flight_bytes = t->in_flight_bytes_peak = 0;
  for (int o = 0; o < t->n_ops; o++) {
    int k = t->op_mb[o], c = t->op_chunk[o];
    const pass_pipe_chunk *ch = &pt->chunk[c];
    rt_program *fwd = t->fwd_prog[c], *bwd = t->bwd_prog[c];
    rt_tensor *held = &t->held[t->held0[t->op_hold[o]]];
    if (feed(t, k, err, errlen) != 0 || set_dropout_key(t, k, err, errlen) != 0) return -1;
    if (!t->op_bwd[o]) {
      if (rt_program_run(fwd, t->step_in, t->params, err, errlen) != 0) return -1;
      if (ch->fwd_loss_sum_output >= 0 && keep_output(fwd, ch->fwd_loss_sum_output, t->loss_sum, err, errlen) != 0)
        return -1;
      if (t->correct_sum && ch->fwd_correct_sum_output >= 0 &&
          keep_output(fwd, ch->fwd_correct_sum_output, t->correct_sum, err, errlen) != 0)
        return -1;
      for (int j = 0; j < ch->n_saved; j++)
        if (keep_output(fwd, ch->fwd_saved0 + j, &held[j], err, errlen) != 0) return -1;
      if (++t->in_flight > t->in_flight_peak) t->in_flight_peak = t->in_flight;
      t->in_flight_bytes += t->chunk_saved_bytes[c];
      if (t->in_flight_bytes > t->in_flight_bytes_peak) t->in_flight_bytes_peak = t->in_flight_bytes;
      continue;
    }
    for (int j = 0; j < ch->n_saved; j++) t->bwd_in[ch->bwd_saved0 + j] = &held[j];
    if (rt_program_run(bwd, t->bwd_in, t->params, err, errlen) != 0) return -1;
    t->in_flight--;
    t->in_flight_bytes -= t->chunk_saved_bytes[c];
    for (int i = 0; t->K > 1 && i < t->np; i++)
      if (ch->bwd_grad_output[i] >= 0 && keep_output(bwd, ch->bwd_grad_output[i], t->acc[i], err, errlen) != 0)
        return -1;
  }
  return 0;
}

int rt_trainer_step(rt_trainer *t, rt_step_result *r, char *err, size_t errlen) {
  const pass_training *pt = t->pt;
  if (t->lost || t->nonfinite) {
    rt_errf(err, errlen, t->lost ? "the parameters were lost in a failed optimizer update"
                                 : "the parameters became non-finite in an earlier step");
    return -1;
  }
  if (fill_minus_zero(t->loss_sum, err, errlen) != 0 ||
      (t->correct_sum && fill_minus_zero(t->correct_sum, err, errlen) != 0))
    return -1;
  for (int i = 0; t->K > 1 && i < t->np; i++)
    if (fill_minus_zero(t->acc[i], err, errlen) != 0) return -1;
  if (t->loss_scale && t->scale_stale) { /* uploaded when it changes, not every step */
    if (upload_scalar(t->loss_scale, t->scale, err, errlen) != 0) return -1;
    t->scale_stale = false;
  }
  if (pt->fwd) {
    if (pipeline_step(t, err, errlen) != 0) return -1;
  }
  for (int k = 0; k < t->K && !pt->fwd; k++) {
    if (feed(t, k, err, errlen) != 0 || set_dropout_key(t, k, err, errlen) != 0) return -1;
    if (rt_program_run(t->step_prog, t->step_in, t->params, err, errlen) != 0) return -1;
    if (keep_output(t->step_prog, pt->loss_sum_output, t->loss_sum, err, errlen) != 0) return -1;
    if (t->correct_sum && keep_output(t->step_prog, pt->correct_sum_output, t->correct_sum, err, errlen) != 0)
      return -1;
    for (int i = 0; t->K > 1 && i < t->np; i++)
      if (keep_output(t->step_prog, pt->grad_output[i], t->acc[i], err, errlen) != 0) return -1;
  }
  /* the update: gradients (the step's outputs, or the sums), states, lr, step */
  for (int i = 0; i < t->np; i++)
    t->update_in[i] = t->K > 1 ? t->acc[i]
                      : pt->fwd ? (rt_tensor *)rt_program_output(t->bwd_prog[0], pt->bwd_grad_output[i])
                                : (rt_tensor *)rt_program_output(t->step_prog, pt->grad_output[i]);
  for (int i = 0; i < t->ns; i++) t->update_in[t->np + i] = t->states[i];
  double lr = rt_schedule_lr(&t->c.schedule, t->step);
  if (upload_scalar(t->lr, lr, err, errlen) != 0 || upload_scalar(t->step_no, (double)(t->step + 1), err, errlen) != 0)
    return -1;
  if (rt_program_run(t->update_prog, t->update_in, t->params, err, errlen) != 0 || rebind(t, err, errlen) != 0) {
    t->lost = true; /* the donated buffers are partly overwritten */
    return -1;
  }
  int rc = 0;
  double loss = download_scalar(t, rt_program_output(t->update_prog, pt->loss_output), &rc, err, errlen);
  double acc = pt->accuracy ? download_scalar(t, rt_program_output(t->update_prog, pt->accuracy_output), &rc, err,
                                              errlen)
                            : -1;
  double bad = download_scalar(t, rt_program_output(t->update_prog, pt->nonfinite_output), &rc, err, errlen);
  double overflow = pt->overflow_output >= 0
                        ? download_scalar(t, rt_program_output(t->update_prog, pt->overflow_output), &rc, err, errlen)
                        : 0;
  if (rc != 0) return -1;
  double used_scale = t->scale;
  if (t->loss_scale) { /* PyTorch's GradScaler: halve on overflow (the step was skipped), double after a run of good steps */
    if (overflow > 0) t->scale *= RT_LOSS_SCALE_BACKOFF, t->good_steps = 0, t->scale_stale = true;
    else if (++t->good_steps == RT_LOSS_SCALE_INTERVAL) t->scale *= 2, t->good_steps = 0, t->scale_stale = true;
  }
  if (bad > 0) { /* name the parameter: the rare path reads them */
    t->nonfinite = true;
    char why[700] = "";
    for (int i = 0; i < t->np && !why[0]; i++) {
      rt_tensor *h = rt_tr_host_view(t, t->params[i], err, errlen);
      if (!h) return -1;
      int64_t nb = count_nonfinite(h);
      if (nb)
        snprintf(why, sizeof why, "'%s': %lld of %lld elements are Inf or NaN", pt->step->params[i]->name,
                 (long long)nb, (long long)rt_numel(&h->type));
      rt_tr_host_view_free(t, h);
    }
    rt_errf(err, errlen, "parameters became non-finite (%s; the loss was %g)", why, loss);
    return -1;
  }
  t->step++;
  if (r) {
    r->step = t->step;
    r->loss = loss;
    r->accuracy = acc;
    r->lr = lr;
    r->peak_bytes = rt_trainer_arena_bytes(t, false);
    r->loss_scale = t->loss_scale ? used_scale : 0;
    r->skipped = overflow > 0;
  }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* state files                                                             */
/* ---------------------------------------------------------------------- */
