/* plan/plan_sim.c — the pipeline of a training step, simulated event by
 * event (gpipe, 1f1b, interleaved 1f1b; pass.h describes the orders), and
 * the Chrome trace writer.
 *
 * Each device runs its operations in a fixed order; an operation starts at
 * max(the device is free, its input has arrived). The simulation keeps a
 * queue of devices to look at: a device runs operations until one waits for
 * an input, and the end of an operation queues the one device that may have
 * been waiting for it. Every operation is started once and queues at most
 * one device, so a step of O(m p v) operations costs O(m p v). Operations
 * left when the queue empties mean the order deadlocks: the orders here
 * never do (tested), so that is an internal error.
 */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "plan.h"


typedef struct {
  int chunk, mb;
  bool backward;
} op_ref;

/* Device dev's forwards before its first backward (w), out of its m v. */
static int warmup(const pass_pipe *s, int dev) {
  int p = s->p, v = s->v, m = s->m, total = m * v, w;
  switch (s->schedule) {
  case PASS_SCHED_GPIPE: return m;
  case PASS_SCHED_1F1B: w = p - dev - 1; break;
  case PASS_SCHED_INTERLEAVED: w = (p - dev - 1) * 2 + (v - 1) * p; break;
  default: w = 0; break;
  }
  return w < total ? w : total;
}

/* The k-th forward or backward of a device, in the order micro-batches go
 * through its chunks (interleaved: p micro-batches per chunk in turn). */
static op_ref nth_op(const pass_pipe *s, int k, bool backward) {
  int p = s->p, v = s->v;
  if (s->schedule != PASS_SCHED_INTERLEAVED) return (op_ref){0, backward && s->schedule == PASS_SCHED_GPIPE ? s->m - 1 - k : k, backward};
  int chunk = (k / p) % v;
  return (op_ref){backward ? v - 1 - chunk : chunk, (k / (p * v)) * p + k % p, backward};
}

/* Operation j of device dev (of 2 m v): w forwards, then a forward and a
 * backward in turn, then the backwards left. */
static op_ref op_at(const pass_pipe *s, int dev, int j) {
  int total = s->m * s->v, w = warmup(s, dev);
  if (j < w) return nth_op(s, j, false);
  int t = j - w;
  if (t < 2 * (total - w)) return nth_op(s, t % 2 ? t / 2 : w + t / 2, t % 2 != 0);
  return nth_op(s, j - total, true);
}

void pass_pipe_result_free(pass_pipe_result *r) {
  free(r->busy);
  free(r->end);
  free(r->peak_act);
  free(r->peak_mb);
  free(r->last_b_start);
  free(r->last_b_end);
  free(r->ops);
  memset(r, 0, sizeof *r);
}

int pass_pipe_simulate(const pass_pipe *s, pass_pipe_result *r, bool record) {
  memset(r, 0, sizeof *r);
  int p = s->p, v = s->schedule == PASS_SCHED_INTERLEAVED ? s->v : 1, m = s->m;
  if (p < 1 || v < 1 || m < 1 || (unsigned)s->schedule >= PASS_SCHED_COUNT) return -1;
  if (s->schedule == PASS_SCHED_INTERLEAVED && m % p != 0) return -1;
  pass_pipe sv = *s;
  sv.v = v;
  int nvs = p * v, per_dev = 2 * m * v;
  int *next = calloc((size_t)p, sizeof *next);
  int *queue = malloc(sizeof *queue * (size_t)(p + 1));
  bool *queued = calloc((size_t)p, sizeof *queued);
  double *free_at = calloc((size_t)p, sizeof *free_at);
  double *fend = malloc((size_t)m * nvs * sizeof *fend), *bend = malloc((size_t)m * nvs * sizeof *bend);
  double *inflight = calloc((size_t)p, sizeof *inflight);
  int *inflight_mb = calloc((size_t)p, sizeof *inflight_mb);
  r->busy = calloc((size_t)p, sizeof *r->busy);
  r->end = calloc((size_t)p, sizeof *r->end);
  r->peak_act = calloc((size_t)p, sizeof *r->peak_act);
  r->peak_mb = calloc((size_t)p, sizeof *r->peak_mb);
  r->last_b_start = calloc((size_t)nvs, sizeof *r->last_b_start);
  r->last_b_end = calloc((size_t)nvs, sizeof *r->last_b_end);
  if (record) r->ops = malloc((size_t)p * per_dev * sizeof *r->ops);
  if (!next || !queue || !queued || !free_at || !fend || !bend || !inflight || !inflight_mb || !r->busy ||
      !r->end || !r->peak_act || !r->peak_mb || !r->last_b_start || !r->last_b_end || (record && !r->ops))
    abort();
  for (int i = 0; i < m * nvs; i++) fend[i] = bend[i] = -1;
  /* a ring of devices to look at: every device once, then each device an
   * operation's end may have unblocked (the one running the next stage's
   * forward, or the previous stage's backward) */
  int head = 0, count = p, done = 0;
  for (int d = 0; d < p; d++) queue[d] = d, queued[d] = true;
  while (count > 0) {
    int d = queue[head];
    head = (head + 1) % (p + 1);
    count--;
    queued[d] = false;
    while (next[d] < per_dev) {
      op_ref o = op_at(&sv, d, next[d]);
      int k = o.chunk * p + d; /* virtual stage */
      double ready;
      if (!o.backward) {
        if (k == 0) ready = 0;
        else if (fend[o.mb * nvs + k - 1] < 0) break;
        else ready = fend[o.mb * nvs + k - 1] + (s->send ? s->send[k - 1] : 0);
      } else if (k == nvs - 1) {
        if (fend[o.mb * nvs + k] < 0) break;
        ready = fend[o.mb * nvs + k];
      } else if (bend[o.mb * nvs + k + 1] < 0) {
        break;
      } else {
        ready = bend[o.mb * nvs + k + 1] + (s->send_back ? s->send_back[k] : 0);
      }
      double start = ready > free_at[d] ? ready : free_at[d];
      double dur = o.backward ? s->bwd[k] : s->fwd[k];
      double end = start + dur;
      free_at[d] = end;
      r->busy[d] += dur;
      int wake = -1;
      if (!o.backward) {
        fend[o.mb * nvs + k] = end;
        inflight[d] += s->act ? s->act[k] : 0;
        inflight_mb[d]++;
        if (inflight[d] > r->peak_act[d]) r->peak_act[d] = inflight[d];
        if (inflight_mb[d] > r->peak_mb[d]) r->peak_mb[d] = inflight_mb[d];
        if (k + 1 < nvs) wake = (k + 1) % p;
      } else {
        bend[o.mb * nvs + k] = end;
        inflight[d] -= s->act ? s->act[k] : 0;
        inflight_mb[d]--;
        if (end >= r->last_b_end[k]) r->last_b_start[k] = start, r->last_b_end[k] = end;
        if (k > 0) wake = (k - 1) % p;
      }
      if (record) r->ops[r->n_ops++] = (pass_pipe_op){d, o.chunk, o.mb, o.backward, start, end};
      if (end > r->end[d]) r->end[d] = end;
      if (end > r->makespan) r->makespan = end;
      next[d]++;
      done++;
      if (wake >= 0 && wake != d && !queued[wake]) {
        queue[(head + count) % (p + 1)] = wake;
        queued[wake] = true;
        count++;
      }
    }
  }
  int rc = done == p * per_dev ? 0 : -1; /* not all ran: the order deadlocks (never for the schedules above) */
  free(next);
  free(queue);
  free(queued);
  free(free_at);
  free(fend);
  free(bend);
  free(inflight);
  free(inflight_mb);
  if (rc != 0) pass_pipe_result_free(r);
  return rc;
}

/* The most bytes (and micro-batch chunks) each device keeps in flight: it
 * depends on the order alone, not on the times. peak_act, peak_mb: p each. */
void pass_pipe_in_flight(const pass_pipe *s, double *peak_act, int *peak_mb) {
  int p = s->p, v = s->schedule == PASS_SCHED_INTERLEAVED ? s->v : 1, total = s->m * v;
  pass_pipe sv = *s;
  sv.v = v;
  /* After the last forward only backwards run, which lower the bytes
   * (activations are >= 0) and the count. Between, pairs of a forward and a
   * backward whose activations repeat every p v pairs (every pair with one
   * chunk): once a period leaves the bytes exactly where it found them,
   * every later period does the same in floating point too, and no new peak
   * follows. The additions are the ones the order runs, in its order. */
  int period = v > 1 ? p * v : 1;
  for (int d = 0; d < p; d++) {
    int w = warmup(&sv, d), last_f = total > w ? w + 2 * (total - w) - 2 : w - 1;
    double bytes = 0, at_period = 0;
    int n = 0;
    peak_act[d] = 0, peak_mb[d] = 0;
    for (int j = 0; j <= last_f; j++) {
      if (j >= w && (j - w) % (2 * period) == 0) {
        if (j > w && bytes == at_period) break;
        at_period = bytes;
      }
      op_ref o = op_at(&sv, d, j);
      double a = s->act ? s->act[o.chunk * p + d] : 0;
      if (o.backward) bytes -= a, n--;
      else bytes += a, n++;
      if (bytes > peak_act[d]) peak_act[d] = bytes;
      if (n > peak_mb[d]) peak_mb[d] = n;
    }
  }
}

/* ---- the Chrome trace ---- */
static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

int pass_trace_write(FILE *f, const pass_trace *t) {
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  fprintf(f, "  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": \"tgc plan: one simulated step\"}}");
  for (int i = 0; i < t->n_lanes; i++) {
    fprintf(f, ",\n  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": ", i);
    json_string(f, t->lane_names[i]);
    fprintf(f, "}},\n  {\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"sort_index\": %d}}",
            i, i);
  }
  for (int i = 0; i < t->n_slices; i++) {
    const pass_trace_slice *s = &t->slices[i];
    fprintf(f, ",\n  {\"name\": ");
    json_string(f, s->name);
    fprintf(f, ", \"cat\": ");
    json_string(f, s->cat);
    fprintf(f, ", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}", s->lane, s->start * 1e6,
            s->dur * 1e6);
  }
  fprintf(f, "\n]}\n");
  return ferror(f) ? -1 : 0;
}

/* ---- the trace of a plan ---- */
static int op_cmp(const void *a, const void *b) {
  const pass_pipe_op *x = a, *y = b;
  if (x->device != y->device) return x->device - y->device;
  return (x->start > y->start) - (x->start < y->start);
}

int pass_plan_write_trace(FILE *f, const pass_plan_model *m, const pass_plan_result *r, const pass_plan_detail *d) {
  int p = d->n_stages, L = pass_plan_model_layers(m), n_ops = d->sim.n_ops;
  (void)r;
  enum { LANES = 3 }; /* per stage: compute; sends and the data-parallel sync; gradients sent back */
  char **lanes = calloc((size_t)p * LANES, sizeof *lanes);
  size_t cap = (size_t)n_ops * 4 + (size_t)p * 4 + 8;
  pass_trace_slice *sl = calloc(cap, sizeof *sl);
  char *names = calloc(cap, 24);
  pass_pipe_op *ops = malloc(sizeof *ops * (size_t)(n_ops ? n_ops : 1));
  if (!lanes || !sl || !names || !ops) IR_DIE("out of memory (lanes || !sl || !names || !ops)");
  memcpy(ops, d->sim.ops, sizeof *ops * (size_t)n_ops);
  qsort(ops, (size_t)n_ops, sizeof *ops, op_cmp);
  for (int s = 0; s < p; s++) {
    char buf[256] = "", part[64];
    int v = d->n_virtual / p;
    for (int k = s; k < d->n_virtual; k += p) {
      if (v > 3 && k > s && k < d->n_virtual - p) { /* many chunks: the first, the count, the last */
        if (k == s + p) {
          snprintf(part, sizeof part, ", ... (%d chunks)", v);
          strncat(buf, part, sizeof buf - strlen(buf) - 1);
        }
        continue;
      }
      int a = d->first[k] < 1 ? 1 : d->first[k], b = d->last[k] > L ? L : d->last[k];
      char range[32];
      if (a == b) snprintf(range, sizeof range, "layer %d", a - 1);
      else snprintf(range, sizeof range, "layers %d-%d", a - 1, b - 1);
      snprintf(part, sizeof part, "%s%s%s%s", k == s ? "" : ", ", d->first[k] == 0 ? "embeddings + " : "", range,
               d->last[k] == L + 1 ? " + head" : "");
      strncat(buf, part, sizeof buf - strlen(buf) - 1);
    }
    for (int l = 0; l < LANES; l++) {
      static const char *const what[LANES] = {"compute", "send, data-parallel sync", "gradients sent back"};
      lanes[s * LANES + l] = malloc(320);
      if (!lanes[s * LANES + l]) IR_DIE("out of memory (lanes[s * LANES + l])");
      snprintf(lanes[s * LANES + l], 320, "stage %d (%s): %s", s, buf, what[l]);
    }
  }
  int n = 0;
#define NAME(...) (snprintf(names + (size_t)n * 24, 24, __VA_ARGS__), names + (size_t)n * 24)
  double last_end = 0;
  int last_dev = -1;
  for (int i = 0; i < n_ops; i++) {
    const pass_pipe_op *o = &ops[i];
    int k = o->chunk * p + o->device, lane = o->device * LANES;
    if (o->device != last_dev) last_dev = o->device, last_end = 0;
    if (o->start > last_end) sl[n] = (pass_trace_slice){lane, "idle", "idle", last_end, o->start - last_end}, n++;
    last_end = o->end;
    if (d->n_virtual > p) sl[n] = (pass_trace_slice){lane, NAME("%c%d.%d", o->backward ? 'B' : 'F', o->mb, o->chunk),
                                                     o->backward ? "backward" : "forward", o->start, o->end - o->start};
    else sl[n] = (pass_trace_slice){lane, NAME("%c%d", o->backward ? 'B' : 'F', o->mb), o->backward ? "backward" : "forward",
                                    o->start, o->end - o->start};
    n++;
    double comm = o->backward ? d->bwd_comm[k] : d->fwd_comm[k];
    if (comm > o->end - o->start) comm = o->end - o->start;
    if (comm > 0) sl[n++] = (pass_trace_slice){lane, "tensor collectives", "tensor collectives", o->end - comm, comm};
    if (!o->backward && k + 1 < d->n_virtual && d->send[k] > 0)
      sl[n] = (pass_trace_slice){lane + 1, NAME("send %d", o->mb), "send/recv", o->end, d->send[k]}, n++;
    if (o->backward && k > 0 && d->send_back[k - 1] > 0)
      sl[n] = (pass_trace_slice){lane + 2, NAME("send grad %d", o->mb), "send/recv", o->end, d->send_back[k - 1]}, n++;
  }
  for (int s = 0; s < p; s++) {
    double t = d->end[s];
    if (d->dp_exposed[s] > 0) sl[n++] = (pass_trace_slice){s * LANES + 1, "data-parallel sync (exposed)", "all-reduce", t, d->dp_exposed[s]};
    t += d->dp_exposed[s];
    if (d->opt[s] > 0) sl[n++] = (pass_trace_slice){s * LANES, "optimizer", "optimizer", t, d->opt[s]};
  }
#undef NAME
  pass_trace tr = {(const char *const *)lanes, p * LANES, sl, n};
  int rc = pass_trace_write(f, &tr);
  for (int i = 0; i < p * LANES; i++) free(lanes[i]);
  free(lanes);
  free(sl);
  free(names);
  free(ops);
  return rc;
}
