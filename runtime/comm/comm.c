/* runtime/comm/comm.c — the communication API (comm.h): choosing an
 * implementation, opening and closing, the environment (launchers, local
 * ranks) and the fault hooks of the tests. The other jobs have a file each:
 * mesh.c (the mesh, its groups' axes, the counters), stage.c (staged sends,
 * the loopback queue, scratch), op.c (one operation, checked and run;
 * explicit groups and raw messages). */
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

void comm_fault_hook(rt_comm *c) {
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

bool rt_comm_overlaps(const rt_comm *c) { return c->be->overlaps && c->be->overlaps(c); }
int rt_comm_batch_begin(rt_comm *c, char *err, size_t errlen) {
  return c->be->batch_begin ? c->be->batch_begin(c, err, errlen) : 0;
}
int rt_comm_batch_end(rt_comm *c, char *err, size_t errlen) {
  return c->be->batch_end ? c->be->batch_end(c, err, errlen) : 0;
}
int rt_comm_join(rt_comm *c, const void *p, size_t bytes, char *err, size_t errlen) {
  return c->be->join ? c->be->join(c, p, bytes, err, errlen) : 0;
}
int rt_comm_join_all(rt_comm *c, char *err, size_t errlen) {
  return c->be->join_all ? c->be->join_all(c, err, errlen) : 0;
}
int rt_comm_in_flight(const rt_comm *c) { return c->be->in_flight ? c->be->in_flight(c) : 0; }
bool rt_comm_batch_touches(const rt_comm *c, const void *p, size_t bytes) {
  return c->be->batch_touches && c->be->batch_touches(c, p, bytes);
}
rt_comm_overlap_count rt_comm_overlap(const rt_comm *c) { return c->overlap; }

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

