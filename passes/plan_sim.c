/* passes/plan_sim.c — the pipeline of a training step, simulated event by
 * event (gpipe, 1f1b, interleaved 1f1b; pass.h describes the orders), and
 * the Chrome trace writer.
 *
 * Each device runs its operations in a fixed order; an operation starts at
 * max(the device is free, its input has arrived). The simulation sweeps the
 * devices repeatedly, starting every operation whose input is known; each
 * operation is started once, so a step of O(m p v) operations costs about
 * that many steps (plus the sweeps that find a device waiting). A sweep that
 * starts nothing while operations remain means the order deadlocks: the
 * orders here never do (tested), so that is an internal error.
 */
#include <stdlib.h>
#include <string.h>

#include "pass.h"

static const char *const sched_names[PASS_SCHED_COUNT] = {"gpipe", "1f1b", "interleaved"};

const char *pass_schedule_name(pass_schedule s) { return (unsigned)s < PASS_SCHED_COUNT ? sched_names[s] : "?"; }

int pass_schedule_from_name(const char *name) {
  for (int i = 0; name && i < PASS_SCHED_COUNT; i++)
    if (strcmp(name, sched_names[i]) == 0) return i;
  return -1;
}

typedef struct {
  int chunk, mb;
  bool backward;
} op_ref;

/* The order of device s's operations; returns their count (2 m v). */
static int device_order(const pass_pipe *s, int dev, op_ref *ops) {
  int p = s->p, v = s->v, m = s->m, n = 0;
  switch (s->schedule) {
  case PASS_SCHED_GPIPE:
    for (int i = 0; i < m; i++) ops[n++] = (op_ref){0, i, false};
    for (int i = m - 1; i >= 0; i--) ops[n++] = (op_ref){0, i, true};
    break;
  case PASS_SCHED_1F1B: {
    int w = p - dev - 1 < m ? p - dev - 1 : m;
    for (int i = 0; i < w; i++) ops[n++] = (op_ref){0, i, false};
    for (int i = 0; i < m - w; i++) {
      ops[n++] = (op_ref){0, w + i, false};
      ops[n++] = (op_ref){0, i, true};
    }
    for (int i = m - w; i < m; i++) ops[n++] = (op_ref){0, i, true};
    break;
  }
  case PASS_SCHED_INTERLEAVED: {
    int total = m * v, w = (p - dev - 1) * 2 + (v - 1) * p;
    if (w > total) w = total;
#define FWD(k) (op_ref){((k) / p) % v, ((k) / (p * v)) * p + (k) % p, false}
#define BWD(k) (op_ref){v - 1 - ((k) / p) % v, ((k) / (p * v)) * p + (k) % p, true}
    for (int k = 0; k < w; k++) ops[n++] = FWD(k);
    for (int i = 0; i < total - w; i++) {
      ops[n++] = FWD(w + i);
      ops[n++] = BWD(i);
    }
    for (int k = total - w; k < total; k++) ops[n++] = BWD(k);
#undef FWD
#undef BWD
    break;
  }
  case PASS_SCHED_COUNT: break;
  }
  return n;
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
  op_ref *order = malloc((size_t)p * per_dev * sizeof *order);
  int *next = calloc((size_t)p, sizeof *next);
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
  if (!order || !next || !free_at || !fend || !bend || !inflight || !inflight_mb || !r->busy || !r->end ||
      !r->peak_act || !r->peak_mb || !r->last_b_start || !r->last_b_end || (record && !r->ops))
    abort();
  for (int i = 0; i < m * nvs; i++) fend[i] = bend[i] = -1;
  for (int d = 0; d < p; d++) device_order(&sv, d, order + (size_t)d * per_dev);
  int remaining = p * per_dev, rc = 0;
  while (remaining > 0) {
    int started = 0;
    for (int d = 0; d < p; d++) {
      while (next[d] < per_dev) {
        op_ref o = order[(size_t)d * per_dev + next[d]];
        int k = o.chunk * p + d; /* virtual stage */
        double ready;
        if (!o.backward) {
          if (k == 0) ready = 0;
          else if (fend[o.mb * nvs + k - 1] < 0) break;
          else ready = fend[o.mb * nvs + k - 1] + (s->send ? s->send[k - 1] : 0);
        } else {
          if (k == nvs - 1) {
            if (fend[o.mb * nvs + k] < 0) break;
            ready = fend[o.mb * nvs + k];
          } else if (bend[o.mb * nvs + k + 1] < 0) {
            break;
          } else {
            ready = bend[o.mb * nvs + k + 1] + (s->send_back ? s->send_back[k] : 0);
          }
        }
        double start = ready > free_at[d] ? ready : free_at[d];
        double dur = o.backward ? s->bwd[k] : s->fwd[k];
        double end = start + dur;
        free_at[d] = end;
        r->busy[d] += dur;
        if (!o.backward) {
          fend[o.mb * nvs + k] = end;
          inflight[d] += s->act ? s->act[k] : 0;
          inflight_mb[d]++;
          if (inflight[d] > r->peak_act[d]) r->peak_act[d] = inflight[d];
          if (inflight_mb[d] > r->peak_mb[d]) r->peak_mb[d] = inflight_mb[d];
        } else {
          bend[o.mb * nvs + k] = end;
          inflight[d] -= s->act ? s->act[k] : 0;
          inflight_mb[d]--;
          if (end >= r->last_b_end[k]) r->last_b_start[k] = start, r->last_b_end[k] = end;
        }
        if (record) r->ops[r->n_ops++] = (pass_pipe_op){d, o.chunk, o.mb, o.backward, start, end};
        if (end > r->end[d]) r->end[d] = end;
        if (end > r->makespan) r->makespan = end;
        next[d]++;
        remaining--;
        started++;
      }
    }
    if (started == 0) {
      rc = -1; /* the order deadlocks: never for the schedules above */
      break;
    }
  }
  free(order);
  free(next);
  free(free_at);
  free(fend);
  free(bend);
  free(inflight);
  free(inflight_mb);
  if (rc != 0) pass_pipe_result_free(r);
  return rc;
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
