/* runtime/comm/comm.c — the communication API (comm.h): choosing an
 * implementation, the mesh and its groups, checking arguments, the n = 1
 * copies, counters, staged sends and the loopback queue, faults.
 *
 * Every operation goes through one path (run_op): the test hooks, the
 * argument checks, the group of `axis` (its members' world ranks, ring
 * order = coordinate order, its tags, its counter), then
 *   - a group of one, or a send/recv to oneself: a copy (0 bytes counted);
 *   - a backend that runs whole operations (nccl): that, counted by the
 *     formulas of rt_comm_ring_bytes;
 *   - else the ring algorithms of ring.c over the backend's transport,
 *     counted as they post messages; buffers that overlap are staged
 *     first so the algorithms see either in-place all_reduce or disjoint
 *     buffers.
 * Sends are staged: the payload is copied into a spare buffer and posted;
 * the request completes later (rt_comm_progress tests them at every call,
 * rt_comm_drain waits for all of them before a mesh change and at close),
 * and its buffer goes back to the spares, so a steady loop allocates
 * nothing. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_internal.h"

#define DEFAULT_TIMEOUT_S 300.0

enum { FAULT_NONE, FAULT_HANG, FAULT_KILL, FAULT_EXIT };

const char *rt_coll_name(rt_coll_kind k) { return ir_coll_name(k); }

void rt_comm_errf(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* ---- the environment ---- */

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  return *end || x < 0 || x > 1 << 30 ? fallback : (int)x;
}

bool rt_comm_under_launcher(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return true;
  }
  return false;
}

int rt_comm_local_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    int r = env_int(vars[i], -1);
    if (r >= 0) return r;
  }
  return 0;
}

int rt_comm_launcher_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    int r = env_int(vars[i], -1);
    if (r >= 0) return r;
  }
  return 0;
}

/* TGC_TEST_COMM_{HANG,KILL,EXIT}=R[:K] */
static void read_fault_hooks(rt_comm *c) {
  static const struct {
    const char *var;
    int kind;
  } hooks[] = {{"TGC_TEST_COMM_HANG", FAULT_HANG}, {"TGC_TEST_COMM_KILL", FAULT_KILL}, {"TGC_TEST_COMM_EXIT", FAULT_EXIT}};
  for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
    const char *v = getenv(hooks[i].var);
    if (!v || !*v) continue;
    char *end = NULL;
    long r = strtol(v, &end, 10), k = 1;
    if (*end == ':') k = strtol(end + 1, &end, 10);
    if (*end || r != c->rank || k < 1) continue;
    c->fault_kind = hooks[i].kind;
    c->fault_call = (int)k;
  }
}

static void fault_hook(rt_comm *c) {
  if (!c->fault_kind || ++c->calls_made != c->fault_call) return;
  if (c->fault_kind == FAULT_HANG)
    for (;;) pause();
  if (c->fault_kind == FAULT_KILL) raise(SIGKILL);
  exit(0);
}

/* ---- open / close ---- */

static rt_comm *open_mpi_list[8]; /* the open MPI communicators, oldest first */

rt_comm *rt_comm_process_mpi(void) { return open_mpi_list[0]; }

static void track_mpi(rt_comm *c, bool add) {
  int n = (int)(sizeof open_mpi_list / sizeof open_mpi_list[0]);
  if (add) {
    for (int i = 0; i < n; i++)
      if (!open_mpi_list[i]) {
        open_mpi_list[i] = c;
        return;
      }
    return;
  }
  for (int i = 0; i < n; i++)
    if (open_mpi_list[i] == c) {
      memmove(&open_mpi_list[i], &open_mpi_list[i + 1], (size_t)(n - i - 1) * sizeof open_mpi_list[0]);
      open_mpi_list[n - 1] = NULL;
      return;
    }
}

rt_comm *rt_comm_open(const rt_comm_options *o, char *err, size_t errlen) {
  rt_comm_options defaults = {0};
  if (!o) o = &defaults;
  const char *impl = o->impl && *o->impl ? o->impl : "auto";
  if (strcmp(impl, "auto") == 0) impl = rt_comm_under_launcher() ? "mpi" : "local";
  if (strcmp(impl, "local") != 0 && strcmp(impl, "mpi") != 0 && strcmp(impl, "nccl") != 0) {
    rt_comm_errf(err, errlen, "unknown comm implementation '%s' (auto, local, mpi, nccl)", impl);
    return NULL;
  }
  if (!(o->timeout_s >= 0) || o->timeout_s > 1e9) {
    rt_comm_errf(err, errlen, "--comm-timeout %g: expected seconds, 0 for the default (300)", o->timeout_s);
    return NULL;
  }
  rt_comm *c = calloc(1, sizeof *c);
  if (!c) {
    rt_comm_errf(err, errlen, "out of memory");
    return NULL;
  }
  c->timeout_s = o->timeout_s > 0 ? o->timeout_s : DEFAULT_TIMEOUT_S;
  c->size = 1;
  c->waiting_for = -1;
  int rc = 0;
  if (strcmp(impl, "local") == 0) {
    c->be = &rt_comm_local_backend;
  } else if (strcmp(impl, "mpi") == 0) {
    c->be = &rt_comm_mpi_backend;
    rc = rt_comm_mpi_open(c, err, errlen);
    if (rc == 0) track_mpi(c, true);
  } else {
    c->be = &rt_comm_nccl_backend;
    rc = rt_comm_nccl_open(c, o, err, errlen);
  }
  if (rc != 0) {
    free(c);
    return NULL;
  }
  read_fault_hooks(c);
  return c;
}

static void free_list(staged *s) {
  while (s) {
    staged *next = s->next;
    free(s->data);
    free(s);
    s = next;
  }
}

void rt_comm_close(rt_comm *c) {
  if (!c) return;
  char err[512];
  if (!c->broken && rt_comm_drain(c, err, sizeof err) != 0) {
    fprintf(stderr, "tgc: rank %d: %s\n", c->rank, err);
    c->broken = true;
  }
  if (c->be == &rt_comm_mpi_backend) track_mpi(c, false);
  if (c->be->close) c->be->close(c, c->broken);
  /* a broken communicator's requests may still write into these */
  if (!c->broken) {
    free_list(c->pending);
    for (int i = 0; i < 3; i++) free(c->scratch[i]);
  }
  free_list(c->loopback);
  free_list(c->spare);
  free(c);
}

const char *rt_comm_impl(const rt_comm *c) { return c->be->name; }
int rt_comm_rank(const rt_comm *c) { return c->rank; }
int rt_comm_size(const rt_comm *c) { return c->size; }
double rt_comm_timeout(const rt_comm *c) { return c->timeout_s; }
int rt_comm_tag_limit(const rt_comm *c) { return c->be->tag_limit ? c->be->tag_limit(c) : RT_COMM_TAG_USER - 1; }

_Noreturn void rt_comm_abort(rt_comm *c, const char *msg) {
  fprintf(stderr, "tgc: rank %d: %s\n", c ? c->rank : 0, msg);
  fflush(stderr);
  rt_comm_abort_quiet(c);
}

_Noreturn void rt_comm_abort_quiet(rt_comm *c) {
  if (c && c->be->abort) c->be->abort(c);
  exit(1);
}

/* ---- the mesh ---- */

static int run_group(rt_comm *c, comm_group *g, int axis, const rt_coll_args *a, char *err, size_t errlen);

/* Every rank sets the same mesh: its text's hash, all-gathered over the
 * world (not counted). Over the transport only: nccl's bootstrap checks
 * for it. */
static int same_mesh_everywhere(rt_comm *c, const char *text, char *err, size_t errlen) {
  if (!c->be->isend || c->size < 2) return 0;
  uint64_t h = 1469598103934665603ull;
  for (const char *p = text; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  uint64_t *all = malloc((size_t)c->size * sizeof *all);
  if (!all) {
    rt_comm_errf(err, errlen, "out of memory");
    return -1;
  }
  comm_group g = {.c = c, .n = c->size, .me = c->rank, .stride = 1, .tag = TAG_WORLD, .kind = IR_COLL_ALL_GATHER};
  snprintf(g.desc, sizeof g.desc, "--mesh %s: comparing meshes", text);
  rt_coll_args a = {IR_COLL_ALL_GATHER, RT_REDUCE_SUM, IR_DT_I64, &h, all, 1, 0};
  int rc = run_group(c, &g, -1, &a, err, errlen);
  for (int r = 0; rc == 0 && r < c->size; r++)
    if (all[r] != h) {
      rt_comm_errf(err, errlen, "--mesh %s differs from rank %d's (every rank sets the same mesh)", text, r);
      rc = -1;
    }
  free(all);
  return rc;
}

int rt_comm_set_mesh(rt_comm *c, int n_axes, const char *const *names, const int *sizes, char *err, size_t errlen) {
  if (n_axes < 0 || n_axes > RT_COMM_MAX_AXES) {
    rt_comm_errf(err, errlen, "a mesh of %d axes (at most %d)", n_axes, RT_COMM_MAX_AXES);
    return -1;
  }
  char text[256] = "";
  size_t used = 0;
  int64_t product = 1;
  for (int k = 0; k < n_axes; k++) {
    const char *name = names[k] ? names[k] : "";
    size_t len = strlen(name);
    if (len == 0 || len >= sizeof c->names[0]) {
      rt_comm_errf(err, errlen, "mesh axis %d: a name of 1 to %d characters, not '%s'", k,
                   (int)sizeof c->names[0] - 1, name);
      return -1;
    }
    for (int j = 0; j < k; j++)
      if (strcmp(names[j], name) == 0) {
        rt_comm_errf(err, errlen, "mesh axis '%s' appears twice", name);
        return -1;
      }
    if (sizes[k] < 1) {
      rt_comm_errf(err, errlen, "mesh axis %s=%d: sizes are 1 or more", name, sizes[k]);
      return -1;
    }
    int w = snprintf(text + used, sizeof text - used, "%s%s=%d", k ? "," : "", name, sizes[k]);
    if (w > 0 && (size_t)w < sizeof text - used) used += (size_t)w;
    product *= sizes[k];
    if (product > (1 << 24)) product = (1 << 24) + 1; /* more than any job: the message below says so */
  }
  if (n_axes > 0 && product != c->size) {
    char need[32];
    snprintf(need, sizeof need, product > (1 << 24) ? "more than %d" : "%d", product > (1 << 24) ? 1 << 24 : (int)product);
    if (!rt_comm_under_launcher() && c->size == 1)
      rt_comm_errf(err, errlen, "--mesh %s needs %s ranks, but tgc runs as 1 process (start it with mpirun -np %s)", text,
                   need, need);
    else
      rt_comm_errf(err, errlen, "--mesh %s needs %s ranks, but this job has %d (start it with mpirun -np %s)", text,
                   need, c->size, need);
    return -1;
  }
  if (rt_comm_drain(c, err, errlen) || same_mesh_everywhere(c, text, err, errlen)) return -1;
  c->n_axes = n_axes;
  int rest = c->rank, stride = 1;
  for (int k = n_axes - 1; k >= 0; k--) {
    snprintf(c->names[k], sizeof c->names[k], "%s", names[k]);
    c->sizes[k] = sizes[k];
    c->strides[k] = stride;
    c->coords[k] = rest % sizes[k];
    rest /= sizes[k];
    stride *= sizes[k];
  }
  rt_comm_reset_counts(c);
  return c->be->mesh_changed ? c->be->mesh_changed(c, err, errlen) : 0;
}

int rt_comm_axis_count(const rt_comm *c) { return c->n_axes; }
int rt_comm_axis_size(const rt_comm *c, int axis) {
  return axis == -1 ? c->size : axis >= 0 && axis < c->n_axes ? c->sizes[axis] : 0;
}
const char *rt_comm_axis_name(const rt_comm *c, int axis) {
  return axis == -1 ? "world" : axis >= 0 && axis < c->n_axes ? c->names[axis] : NULL;
}
int rt_comm_coord(const rt_comm *c, int axis) {
  return axis == -1 ? c->rank : axis >= 0 && axis < c->n_axes ? c->coords[axis] : -1;
}
int rt_comm_axis_find(const rt_comm *c, const char *name) {
  for (int k = 0; k < c->n_axes; k++)
    if (strcmp(c->names[k], name) == 0) return k;
  return -1;
}

/* ---- counters ---- */

rt_comm_counter rt_comm_count(const rt_comm *c, rt_coll_kind k, int axis) {
  rt_comm_counter zero = {0, 0, 0};
  if ((unsigned)k >= IR_NUM_COLLS) return zero;
  if (axis == -1) axis = c->n_axes;
  if (axis < 0 || axis > c->n_axes) return zero;
  return c->counts[k][axis];
}

void rt_comm_reset_counts(rt_comm *c) { memset(c->counts, 0, sizeof c->counts); }

rt_comm_counter rt_comm_ring_bytes(rt_coll_kind k, int n, int coord, int root, int64_t count, size_t elem_bytes) {
  rt_comm_counter r = {1, 0, 0};
  int64_t es = (int64_t)elem_bytes;
  if (n <= 1 || count <= 0) return r;
  int i = ((coord % n) + n) % n;
  switch (k) {
  case IR_COLL_ALL_REDUCE: {
    int64_t q = count / n, rem = count % n;
#define CHUNK(j) (q + ((((j) % n + n) % n) < rem))
    r.bytes_sent = (2 * count - CHUNK(i) - CHUNK(i + 1)) * es;
    r.bytes_received = (2 * count - CHUNK(i - 1) - CHUNK(i)) * es;
#undef CHUNK
    break;
  }
  case IR_COLL_REDUCE_SCATTER:
  case IR_COLL_ALL_GATHER:
  case IR_COLL_ALL_TO_ALL: r.bytes_sent = r.bytes_received = (int64_t)(n - 1) * count * es; break;
  case IR_COLL_BROADCAST: {
    int pos = ((i - root) % n + n) % n;
    r.bytes_sent = pos < n - 1 ? count * es : 0;
    r.bytes_received = pos > 0 ? count * es : 0;
    break;
  }
  case IR_COLL_SEND: r.bytes_sent = count * es; break;
  case IR_COLL_RECV: r.bytes_received = count * es; break;
  case IR_NUM_COLLS: break;
  }
  return r;
}

/* ---- staged sends, the loopback queue, scratch ---- */

void *rt_comm_scratch(rt_comm *c, int k, size_t bytes) {
  if (bytes <= c->scratch_cap[k]) return c->scratch[k];
  void *p = realloc(c->scratch[k], bytes);
  if (!p) return NULL;
  c->scratch[k] = p;
  c->scratch_cap[k] = bytes;
  return p;
}

/* A staged buffer of at least bytes: the smallest spare that fits, else
 * the largest spare grown, else a new one. */
static staged *take_spare(rt_comm *c, size_t bytes) {
  staged **best = NULL, **largest = NULL;
  for (staged **p = &c->spare; *p; p = &(*p)->next) {
    if ((*p)->cap >= bytes && (!best || (*p)->cap < (*best)->cap)) best = p;
    if (!largest || (*p)->cap > (*largest)->cap) largest = p;
  }
  staged **pick = best ? best : largest;
  staged *s;
  if (pick) {
    s = *pick;
    *pick = s->next;
  } else {
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
  }
  if (s->cap < bytes) {
    void *d = realloc(s->data, bytes);
    if (!d) {
      s->next = c->spare;
      c->spare = s;
      return NULL;
    }
    s->data = d;
    s->cap = bytes;
  }
  s->next = NULL;
  s->req = NULL;
  s->bytes = bytes;
  return s;
}

static void append(staged **list, staged *s) {
  while (*list) list = &(*list)->next;
  s->next = NULL;
  *list = s;
}

int rt_comm_stage_send(rt_comm *c, int to, int tag, const void *buf, size_t bytes, char *err, size_t errlen) {
  staged *s = take_spare(c, bytes ? bytes : 1);
  if (!s) {
    rt_comm_errf(err, errlen, "out of memory staging a message of %zu bytes", bytes);
    return -1;
  }
  if (bytes) memcpy(s->data, buf, bytes);
  s->bytes = bytes;
  s->to = to;
  s->tag = tag;
  if (c->be->isend(c, to, tag, s->data, bytes, &s->req, err, errlen)) {
    c->broken = true;
    s->next = c->spare;
    c->spare = s;
    return -1;
  }
  append(&c->pending, s);
  return 0;
}

int rt_comm_progress(rt_comm *c, char *err, size_t errlen) {
  for (staged **p = &c->pending; *p;) {
    staged *s = *p;
    int r = c->be->test(c, s->req, NULL, err, errlen);
    if (r < 0) {
      c->broken = true;
      return -1;
    }
    if (r == 0) {
      p = &s->next;
      continue;
    }
    *p = s->next;
    s->req = NULL;
    s->next = c->spare;
    c->spare = s;
  }
  return 0;
}

int rt_comm_drain(rt_comm *c, char *err, size_t errlen) {
  while (c->pending) {
    staged *s = c->pending;
    bool recv = false;
    char what[64];
    snprintf(what, sizeof what, "a send to rank %d", s->to);
    if (rt_comm_wait(c, what, &s->req, &s->to, &recv, 1, NULL, err, errlen)) return -1;
    c->pending = s->next;
    s->next = c->spare;
    c->spare = s;
  }
  return 0;
}

/* ---- one operation ---- */

static bool overlap(const void *a, size_t na, const void *b, size_t nb) {
  const char *x = a, *y = b;
  return na && nb && x < y + nb && y < x + na;
}

/* Buffer sizes in elements: what send and recv hold for kind on a group of n. */
static void buffer_counts(rt_coll_kind k, int n, int64_t count, int64_t *send, int64_t *recv) {
  *send = *recv = count;
  if (k == IR_COLL_ALL_GATHER) *recv = n * count;
  if (k == IR_COLL_REDUCE_SCATTER) *send = n * count;
  if (k == IR_COLL_ALL_TO_ALL) *send = *recv = n * count;
  if (k == IR_COLL_BROADCAST || k == IR_COLL_RECV) *send = 0;
  if (k == IR_COLL_SEND) *recv = 0;
}

static int check_args(const comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
  if ((unsigned)a->kind >= IR_NUM_COLLS) {
    rt_comm_errf(err, errlen, "unknown collective %d", (int)a->kind);
    return -1;
  }
  if ((unsigned)a->dt >= IR_NUM_DTYPES) {
    rt_comm_errf(err, errlen, "%s: unknown dtype %d", g->desc, (int)a->dt);
    return -1;
  }
  if ((a->kind == IR_COLL_ALL_REDUCE || a->kind == IR_COLL_REDUCE_SCATTER) && a->op != RT_REDUCE_SUM &&
      a->op != RT_REDUCE_MAX) {
    rt_comm_errf(err, errlen, "%s: unknown reduction %d", g->desc, (int)a->op);
    return -1;
  }
  int64_t limit = INT64_MAX / 8 / (g->n > 0 ? g->n : 1);
  if (a->count < 0 || a->count > limit) {
    rt_comm_errf(err, errlen, "%s: count %lld (expected 0 to %lld elements)", g->desc, (long long)a->count,
                 (long long)limit);
    return -1;
  }
  int64_t ns, nr;
  buffer_counts(a->kind, g->n, a->count, &ns, &nr);
  if ((ns && !a->send) || (nr && !a->recv)) {
    rt_comm_errf(err, errlen, "%s: a NULL %s buffer for %lld elements", g->desc, ns && !a->send ? "send" : "receive",
                 (long long)(ns && !a->send ? ns : nr));
    return -1;
  }
  bool p2p = a->kind == IR_COLL_SEND || a->kind == IR_COLL_RECV;
  if ((p2p || a->kind == IR_COLL_BROADCAST) && (a->peer < 0 || a->peer >= g->n)) {
    rt_comm_errf(err, errlen, "%s: %s coordinate %d does not exist (%d member%s: 0 to %d)", g->desc,
                 p2p ? "peer" : "root", a->peer, g->n, g->n == 1 ? "" : "s", g->n - 1);
    return -1;
  }
  return 0;
}

static int copy(rt_comm *c, void *dst, const void *src, size_t bytes, char *err, size_t errlen) {
  if (!bytes || dst == src) return 0;
  if (c->be->copy) return c->be->copy(c, dst, src, bytes, err, errlen);
  memmove(dst, src, bytes);
  return 0;
}

/* send/recv with this rank itself: through the loopback queue (FIFO per tag) */
static int loopback(rt_comm *c, const comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
  size_t bytes = (size_t)a->count * ir_dtype_size(a->dt);
  int tag = g->tag + 1;
  if (c->be->copy) {
    rt_comm_errf(err, errlen, "%s: to this rank itself: not supported by the %s implementation", g->desc, c->be->name);
    return -1;
  }
  if (a->kind == IR_COLL_SEND) {
    staged *s = take_spare(c, bytes ? bytes : 1);
    if (!s) {
      rt_comm_errf(err, errlen, "out of memory");
      return -1;
    }
    if (bytes) memcpy(s->data, a->send, bytes);
    s->bytes = bytes;
    s->tag = tag;
    s->to = c->rank;
    append(&c->loopback, s);
    return 0;
  }
  for (staged **p = &c->loopback; *p; p = &(*p)->next) {
    staged *s = *p;
    if (s->tag != tag) continue;
    if (s->bytes != bytes) {
      rt_comm_errf(err, errlen, "%s: this rank sent itself %zu bytes, but receives %zu", g->desc, s->bytes, bytes);
      return -1;
    }
    if (bytes) memcpy(a->recv, s->data, bytes);
    *p = s->next;
    s->next = c->spare;
    c->spare = s;
    return 0;
  }
  rt_comm_errf(err, errlen, "%s: from this rank itself, but it sent itself nothing", g->desc);
  return -1;
}

/* The n = 1 result: a copy. */
static int copy_alone(rt_comm *c, const rt_coll_args *a, char *err, size_t errlen) {
  size_t bytes = (size_t)a->count * ir_dtype_size(a->dt);
  switch (a->kind) {
  case IR_COLL_ALL_REDUCE:
  case IR_COLL_ALL_GATHER:
  case IR_COLL_REDUCE_SCATTER:
  case IR_COLL_ALL_TO_ALL: return copy(c, a->recv, a->send, bytes, err, errlen);
  default: return 0;
  }
}

/* Prepares host buffers for the rings: in-place all_reduce, disjoint otherwise. */
static int ring_with_staging(comm_group *g, const rt_coll_args *in, char *err, size_t errlen) {
  rt_comm *c = g->c;
  rt_coll_args a = *in;
  size_t es = ir_dtype_size(a.dt), bytes = (size_t)a.count * es;
  int64_t ns, nr;
  buffer_counts(a.kind, g->n, a.count, &ns, &nr);
  switch (a.kind) {
  case IR_COLL_ALL_REDUCE: /* the rings run in place on recv */
    if (a.send != a.recv) memmove(a.recv, a.send, bytes);
    break;
  case IR_COLL_ALL_GATHER: /* only recv is read after this */
    memmove((char *)a.recv + (size_t)g->me * bytes, a.send, bytes);
    break;
  case IR_COLL_REDUCE_SCATTER:
  case IR_COLL_ALL_TO_ALL: {
    bool in_place = a.kind == IR_COLL_REDUCE_SCATTER && a.recv == (const char *)a.send + (size_t)g->me * bytes;
    if (!in_place && overlap(a.send, (size_t)ns * es, a.recv, (size_t)nr * es)) {
      void *s = rt_comm_scratch(c, 2, (size_t)ns * es);
      if (!s) {
        rt_comm_errf(err, errlen, "out of memory");
        return -1;
      }
      memcpy(s, a.send, (size_t)ns * es);
      a.send = s;
    }
    if (a.kind == IR_COLL_ALL_TO_ALL)
      memcpy((char *)a.recv + (size_t)g->me * bytes, (const char *)a.send + (size_t)g->me * bytes, bytes);
    break;
  }
  default: break;
  }
  return rt_comm_ring_run(g, &a, err, errlen);
}

static int run_group(rt_comm *c, comm_group *g, int axis, const rt_coll_args *a, char *err, size_t errlen) {
  if (check_args(g, a, err, errlen)) return -1;
  if (c->broken) {
    rt_comm_errf(err, errlen, "%s: the communicator is unusable after an earlier failure", g->desc);
    return -1;
  }
  if (g->ctr) g->ctr->calls++;
  if (c->pending && rt_comm_progress(c, err, errlen)) return -1;
  bool p2p = a->kind == IR_COLL_SEND || a->kind == IR_COLL_RECV;
  if (p2p && a->peer == g->me) return loopback(c, g, a, err, errlen);
  if (g->n == 1) return copy_alone(c, a, err, errlen);
  if (c->be->run) {
    if (c->be->run(c, axis, a, err, errlen)) return -1;
    if (g->ctr) {
      rt_comm_counter b = rt_comm_ring_bytes(a->kind, g->n, g->me, a->peer, a->count, ir_dtype_size(a->dt));
      g->ctr->bytes_sent += b.bytes_sent;
      g->ctr->bytes_received += b.bytes_received;
    }
    return 0;
  }
  if (!c->be->isend) {
    rt_comm_errf(err, errlen, "%s: the %s implementation has no transport", g->desc, c->be->name);
    return -1;
  }
  return ring_with_staging(g, a, err, errlen);
}

/* The group of `axis` for kind k (axis -1: the world). */
static int axis_group(rt_comm *c, int axis, rt_coll_kind k, comm_group *g, char *err, size_t errlen) {
  memset(g, 0, sizeof *g);
  g->c = c;
  g->kind = k;
  if (axis == -1) {
    g->n = c->size, g->me = c->rank, g->base = 0, g->stride = 1, g->tag = TAG_WORLD;
    g->ctr = (unsigned)k < IR_NUM_COLLS ? &c->counts[k][c->n_axes] : NULL;
    snprintf(g->desc, sizeof g->desc, "%s over world", rt_coll_name(k));
    return 0;
  }
  if (axis < 0 || axis >= c->n_axes) {
    char list[160] = "";
    size_t used = 0;
    for (int j = 0; j < c->n_axes; j++) {
      int w = snprintf(list + used, sizeof list - used, "%s%s", j ? ", " : ": ", c->names[j]);
      if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
    }
    rt_comm_errf(err, errlen, "%s: no mesh axis %d (the mesh has %d ax%s%s; -1 is the world)", rt_coll_name(k), axis,
                 c->n_axes, c->n_axes == 1 ? "is" : "es", list);
    return -1;
  }
  g->n = c->sizes[axis], g->me = c->coords[axis], g->stride = c->strides[axis];
  g->base = c->rank - g->me * g->stride;
  g->tag = 2 * axis;
  g->ctr = (unsigned)k < IR_NUM_COLLS ? &c->counts[k][axis] : NULL;
  snprintf(g->desc, sizeof g->desc, "%s over %s", rt_coll_name(k), c->names[axis]);
  return 0;
}

static int run_op(rt_comm *c, int axis, const rt_coll_args *a, char *err, size_t errlen) {
  fault_hook(c);
  comm_group g;
  if (axis_group(c, axis, a->kind, &g, err, errlen)) return -1;
  return run_group(c, &g, axis, a, err, errlen);
}

int rt_comm_all_reduce(rt_comm *c, int axis, rt_reduce_op op, ir_dtype dt, const void *send, void *recv, int64_t count,
                       char *err, size_t errlen) {
  rt_coll_args a = {IR_COLL_ALL_REDUCE, op, dt, send, recv, count, 0};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_all_gather(rt_comm *c, int axis, ir_dtype dt, const void *send, void *recv, int64_t count, char *err,
                       size_t errlen) {
  rt_coll_args a = {IR_COLL_ALL_GATHER, RT_REDUCE_SUM, dt, send, recv, count, 0};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_reduce_scatter(rt_comm *c, int axis, rt_reduce_op op, ir_dtype dt, const void *send, void *recv,
                           int64_t count, char *err, size_t errlen) {
  rt_coll_args a = {IR_COLL_REDUCE_SCATTER, op, dt, send, recv, count, 0};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_all_to_all(rt_comm *c, int axis, ir_dtype dt, const void *send, void *recv, int64_t count, char *err,
                       size_t errlen) {
  rt_coll_args a = {IR_COLL_ALL_TO_ALL, RT_REDUCE_SUM, dt, send, recv, count, 0};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_broadcast(rt_comm *c, int axis, int root_coord, ir_dtype dt, void *buf, int64_t count, char *err,
                      size_t errlen) {
  rt_coll_args a = {IR_COLL_BROADCAST, RT_REDUCE_SUM, dt, NULL, buf, count, root_coord};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_send(rt_comm *c, int axis, int peer_coord, ir_dtype dt, const void *buf, int64_t count, char *err,
                 size_t errlen) {
  rt_coll_args a = {IR_COLL_SEND, RT_REDUCE_SUM, dt, buf, NULL, count, peer_coord};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_recv(rt_comm *c, int axis, int peer_coord, ir_dtype dt, void *buf, int64_t count, char *err,
                 size_t errlen) {
  rt_coll_args a = {IR_COLL_RECV, RT_REDUCE_SUM, dt, NULL, buf, count, peer_coord};
  return run_op(c, axis, &a, err, errlen);
}

int rt_comm_barrier(rt_comm *c, char *err, size_t errlen) {
  fault_hook(c);
  if (c->broken) {
    rt_comm_errf(err, errlen, "barrier: the communicator is unusable after an earlier failure");
    return -1;
  }
  if (c->pending && rt_comm_progress(c, err, errlen)) return -1;
  if (c->size == 1) return 0;
  if (c->be->barrier) return c->be->barrier(c, err, errlen);
  return rt_comm_ring_barrier(c, err, errlen);
}

/* ---- explicit groups and raw messages ---- */

int rt_comm_group_run(rt_comm *c, const rt_comm_group *eg, const rt_coll_args *a, char *err, size_t errlen) {
  if (!c || !eg || eg->n < 1 || eg->me < 0 || eg->me >= eg->n || !eg->world_ranks) {
    rt_comm_errf(err, errlen, "%s: a malformed group", eg && eg->label ? eg->label : "group");
    return -1;
  }
  for (int i = 0; i < eg->n; i++)
    if (eg->world_ranks[i] < 0 || eg->world_ranks[i] >= c->size) {
      rt_comm_errf(err, errlen, "%s: member %d is world rank %d, but the world has %d", eg->label ? eg->label : "group",
                   i, eg->world_ranks[i], c->size);
      return -1;
    }
  if (eg->n > 1 && (eg->tag < RT_COMM_TAG_USER || eg->tag + 1 > rt_comm_tag_limit(c))) {
    rt_comm_errf(err, errlen, "%s: tag %d is not the caller's (%d to %d)", eg->label ? eg->label : "group", eg->tag,
                 RT_COMM_TAG_USER, rt_comm_tag_limit(c) - 1);
    return -1;
  }
  if (!c->be->isend && !(eg->n == 1 && !c->be->copy)) {
    rt_comm_errf(err, errlen, "%s: explicit groups need the mpi implementation (or, of one member, local), not %s",
                 eg->label ? eg->label : "group", c->be->name);
    return -1;
  }
  comm_group g = {.c = c, .n = eg->n, .me = eg->me, .ranks = eg->world_ranks, .tag = eg->tag, .kind = a->kind,
                  .ctr = eg->counter};
  snprintf(g.desc, sizeof g.desc, "%s", eg->label ? eg->label : rt_coll_name(a->kind));
  return run_group(c, &g, -1, a, err, errlen);
}

int rt_comm_raw_send(rt_comm *c, int to, int tag, const void *buf, size_t bytes, char *err, size_t errlen) {
  if (!c->be->isend || to < 0 || to >= c->size || tag < RT_COMM_TAG_USER || tag > rt_comm_tag_limit(c)) {
    rt_comm_errf(err, errlen, "raw send to rank %d on tag %d: not possible on the %s implementation of %d rank%s", to,
                 tag, c->be->name, c->size, c->size == 1 ? "" : "s");
    return -1;
  }
  if (c->pending && rt_comm_progress(c, err, errlen)) return -1;
  return rt_comm_stage_send(c, to, tag, buf, bytes, err, errlen);
}

int rt_comm_raw_recv(rt_comm *c, int from, int tag, void *buf, size_t bytes, int *source, char *err, size_t errlen) {
  if (!c->be->irecv || from < -1 || from >= c->size || tag < RT_COMM_TAG_USER || tag > rt_comm_tag_limit(c)) {
    rt_comm_errf(err, errlen, "raw receive from rank %d on tag %d: not possible on the %s implementation of %d rank%s",
                 from, tag, c->be->name, c->size, c->size == 1 ? "" : "s");
    return -1;
  }
  comm_req *r = NULL;
  char why[512];
  if (c->be->irecv(c, from, tag, buf, bytes, &r, why, sizeof why)) {
    c->broken = true;
    rt_comm_errf(err, errlen, "receive on tag %d: %s", tag, why);
    return -1;
  }
  bool recv = true;
  int got = -1;
  char what[64];
  snprintf(what, sizeof what, "a receive on tag %d", tag);
  if (rt_comm_wait(c, what, &r, &from, &recv, 1, &got, err, errlen)) return -1;
  if (source) *source = got;
  return 0;
}
