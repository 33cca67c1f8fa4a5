/* runtime/comm/mpi.c — the MPI implementation: Open MPI as a byte
 * transport (isend / irecv / test) under comm.c's ring algorithms.
 *
 * tgc links no MPI library. mpi.h (Open MPI's, from libopenmpi-dev) gives
 * the types and constants; the functions of mpi_api.def and the predefined
 * handles (Open MPI's are global objects: ompi_mpi_comm_world,
 * ompi_mpi_byte, ompi_mpi_errors_return) are resolved with dlsym from
 * libmpi.so.40 (TGC_MPI_LIB names another file), loaded with RTLD_GLOBAL
 * because Open MPI's own plugins resolve its symbols globally. Nothing is
 * loaded until rt_comm_open chooses mpi; where mpi.h is missing at build
 * time this file only says so ("MPI is not built in").
 *
 * MPI_Init_thread (MPI_THREAD_SERIALIZED) once per process, MPI_Finalize
 * when the last communicator closes; every communicator is its own
 * MPI_Comm_dup of the world (its messages never meet another's), with
 * MPI_ERRORS_RETURN so every failure comes back as a message. Messages of
 * more than 1 GiB go as several (MPI counts are ints); a receive checks the
 * size that arrived. Requests are recycled through a free list. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_internal.h"

#ifdef TGC_HAVE_MPI_H
#include <mpi.h>
#endif

#if !defined(TGC_HAVE_MPI_H) || !defined(OPEN_MPI)

int rt_comm_mpi_open(rt_comm *c, char *err, size_t errlen) {
  (void)c;
#ifdef TGC_HAVE_MPI_H
  rt_comm_errf(err, errlen, "MPI is not built in: the mpi.h tgc was built with is not Open MPI's (install "
                            "libopenmpi-dev and rebuild)");
#else
  rt_comm_errf(err, errlen, "MPI is not built in: tgc was built without mpi.h (install libopenmpi-dev and rebuild)");
#endif
  return -1;
}

const comm_backend rt_comm_mpi_backend = {.name = "mpi"};

bool rt_comm_has_mpi(void) { return false; }

#else

bool rt_comm_has_mpi(void) { return true; }


#define PART_BYTES ((size_t)1 << 30)
#define MAX_PARTS 64

struct comm_req {
  struct comm_req *next;     /* the free list */
  int nparts, peer, from;
  bool recv;
  size_t bytes;
  MPI_Request r[MAX_PARTS];
  unsigned char done[MAX_PARTS];
};

/* the process's MPI: the library, its entry points and handles */
static struct {
  void *lib;
  char path[256];
#define MPI_FN(name) __typeof__(name) *p_##name;
#include "mpi_api.def"
#undef MPI_FN
  MPI_Comm world;
  MPI_Datatype byte;
  MPI_Errhandler errors_return;
  int opens;
  bool we_initialized, finalized;
} mpi;

typedef struct {
  MPI_Comm comm;
  int tag_ub;
  comm_req *free_reqs;
} mpi_state;

static void mpi_errf(char *err, size_t errlen, const char *call, int rc) {
  char s[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (mpi.p_MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
  rt_comm_errf(err, errlen, "%s: %s", call, s);
}

static int load(char *err, size_t errlen) {
  if (mpi.lib) return 0;
  const char *path = getenv("TGC_MPI_LIB");
  if (!path || !*path) path = "libmpi.so.40";
  void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    rt_comm_errf(err, errlen, "cannot load Open MPI: %s (install openmpi-bin, or set TGC_MPI_LIB to its libmpi.so)",
                 dlerror());
    return -1;
  }
  void *world = dlsym(h, "ompi_mpi_comm_world"), *byte = dlsym(h, "ompi_mpi_byte");
  void *errors_return = dlsym(h, "ompi_mpi_errors_return");
  if (!world || !byte || !errors_return) {
    rt_comm_errf(err, errlen, "%s is not Open MPI (it has no ompi_mpi_comm_world): tgc's MPI support is built for Open MPI",
                 path);
    return -1; /* left loaded: MPI libraries do not expect to be unloaded */
  }
#define MPI_FN(name)                                                                    \
  *(void **)&mpi.p_##name = dlsym(h, #name);                                            \
  if (!mpi.p_##name) {                                                                  \
    rt_comm_errf(err, errlen, "%s has no %s: tgc needs Open MPI 3 or newer", path, #name); \
    return -1;                                                                          \
  }
#include "mpi_api.def"
#undef MPI_FN
  mpi.world = (MPI_Comm)world;
  mpi.byte = (MPI_Datatype)byte;
  mpi.errors_return = (MPI_Errhandler)errors_return;
  snprintf(mpi.path, sizeof mpi.path, "%s", path);
  mpi.lib = h;
  return 0;
}

int rt_comm_mpi_open(rt_comm *c, char *err, size_t errlen) {
  if (load(err, errlen)) return -1;
  int flag = 0;
  if (mpi.finalized || (mpi.p_MPI_Finalized(&flag) == MPI_SUCCESS && flag)) {
    rt_comm_errf(err, errlen, "MPI was finalized in this process: it cannot be opened again");
    return -1;
  }
  int rc;
  if (mpi.p_MPI_Initialized(&flag) == MPI_SUCCESS && !flag) {
    int provided = 0;
    if ((rc = mpi.p_MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided)) != MPI_SUCCESS) {
      rt_comm_errf(err, errlen, "MPI_Init_thread failed (error %d)", rc);
      return -1;
    }
    mpi.we_initialized = true;
    if (provided < MPI_THREAD_SERIALIZED) {
      rt_comm_errf(err, errlen, "this MPI gives thread level %d; tgc needs MPI_THREAD_SERIALIZED (%d)", provided,
                   MPI_THREAD_SERIALIZED);
      return -1;
    }
  }
  mpi_state *st = calloc(1, sizeof *st);
  if (!st) {
    rt_comm_errf(err, errlen, "out of memory");
    return -1;
  }
  void *ub = NULL;
  flag = 0;
  if ((rc = mpi.p_MPI_Comm_dup(mpi.world, &st->comm)) != MPI_SUCCESS ||
      (rc = mpi.p_MPI_Comm_set_errhandler(st->comm, mpi.errors_return)) != MPI_SUCCESS ||
      (rc = mpi.p_MPI_Comm_rank(st->comm, &c->rank)) != MPI_SUCCESS ||
      (rc = mpi.p_MPI_Comm_size(st->comm, &c->size)) != MPI_SUCCESS ||
      (rc = mpi.p_MPI_Comm_get_attr(st->comm, MPI_TAG_UB, &ub, &flag)) != MPI_SUCCESS) {
    mpi_errf(err, errlen, "opening the MPI communicator", rc);
    free(st);
    return -1;
  }
  st->tag_ub = flag && ub ? *(int *)ub : 32767;
  c->impl = st;
  mpi.opens++;
  return 0;
}

static comm_req *new_req(mpi_state *st) {
  comm_req *r = st->free_reqs;
  if (r) st->free_reqs = r->next;
  else r = malloc(sizeof *r);
  if (r) {
    r->next = NULL;
    memset(r->done, 0, sizeof r->done);
  }
  return r;
}

static void free_req(mpi_state *st, comm_req *r) {
  r->next = st->free_reqs;
  st->free_reqs = r;
}

static int post(rt_comm *c, bool recv, int peer, int tag, void *buf, size_t bytes, comm_req **out, char *err,
                size_t errlen) {
  mpi_state *st = c->impl;
  size_t nparts = bytes ? (bytes + PART_BYTES - 1) / PART_BYTES : 1;
  if (nparts > MAX_PARTS) {
    rt_comm_errf(err, errlen, "a message of %zu bytes (at most %zu)", bytes, (size_t)MAX_PARTS * PART_BYTES);
    return -1;
  }
  if (recv && peer < 0 && nparts > 1) {
    rt_comm_errf(err, errlen, "a receive from any rank of %zu bytes (at most %zu)", bytes, PART_BYTES);
    return -1;
  }
  comm_req *r = new_req(st);
  if (!r) {
    rt_comm_errf(err, errlen, "out of memory");
    return -1;
  }
  r->nparts = (int)nparts, r->peer = peer, r->from = peer, r->recv = recv, r->bytes = bytes;
  for (size_t i = 0; i < nparts; i++) {
    size_t off = i * PART_BYTES, len = bytes - off < PART_BYTES ? bytes - off : PART_BYTES;
    int rc = recv ? mpi.p_MPI_Irecv((char *)buf + off, (int)len, mpi.byte, peer < 0 ? MPI_ANY_SOURCE : peer, tag,
                                    st->comm, &r->r[i])
                  : mpi.p_MPI_Isend((char *)buf + off, (int)len, mpi.byte, peer, tag, st->comm, &r->r[i]);
    if (rc != MPI_SUCCESS) {
      mpi_errf(err, errlen, recv ? "MPI_Irecv" : "MPI_Isend", rc);
      return -1; /* the parts posted stay with MPI: the communicator is broken */
    }
  }
  *out = r;
  return 0;
}

static int mpi_isend(rt_comm *c, int to, int tag, const void *buf, size_t bytes, comm_req **req, char *err,
                     size_t errlen) {
  return post(c, false, to, tag, (void *)buf, bytes, req, err, errlen);
}

static int mpi_irecv(rt_comm *c, int from, int tag, void *buf, size_t bytes, comm_req **req, char *err,
                     size_t errlen) {
  return post(c, true, from, tag, buf, bytes, req, err, errlen);
}

static int mpi_test(rt_comm *c, comm_req *r, int *from, char *err, size_t errlen) {
  for (int i = 0; i < r->nparts; i++) {
    if (r->done[i]) continue;
    int flag = 0;
    MPI_Status status;
    memset(&status, 0, sizeof status);
    int rc = mpi.p_MPI_Test(&r->r[i], &flag, &status);
    size_t off = (size_t)i * PART_BYTES, expected = r->bytes - off < PART_BYTES ? r->bytes - off : PART_BYTES;
    if (rc == MPI_ERR_TRUNCATE) {
      rt_comm_errf(err, errlen,
                   "a message from rank %d larger than the %zu bytes expected (do all ranks call it with the same "
                   "count and dtype?)",
                   r->peer, r->bytes);
      return -1;
    }
    if (rc != MPI_SUCCESS) {
      mpi_errf(err, errlen, r->recv ? "receiving" : "sending", rc);
      return -1;
    }
    if (!flag) return 0;
    if (r->recv) {
      int got = -1;
      mpi.p_MPI_Get_count(&status, mpi.byte, &got);
      r->from = status.MPI_SOURCE;
      if (got < 0 || (size_t)got != expected) {
        rt_comm_errf(err, errlen,
                     "a message of %zu bytes from rank %d, where %zu were expected (do all ranks call it with the "
                     "same count and dtype?)",
                     (size_t)got + off, r->from, r->bytes);
        return -1;
      }
    }
    r->done[i] = 1;
  }
  if (from) *from = r->from;
  free_req(c->impl, r);
  return 1;
}

static int mpi_iprobe(rt_comm *c, int tag, int *from) {
  mpi_state *st = c->impl;
  int flag = 0;
  MPI_Status status;
  memset(&status, 0, sizeof status);
  if (mpi.p_MPI_Iprobe(MPI_ANY_SOURCE, tag, st->comm, &flag, &status) != MPI_SUCCESS) return -1;
  if (flag && from) *from = status.MPI_SOURCE;
  return flag != 0;
}

static int mpi_tag_limit(const rt_comm *c) { return ((const mpi_state *)c->impl)->tag_ub; }

static void mpi_close(rt_comm *c, bool broken) {
  mpi_state *st = c->impl;
  if (!broken) mpi.p_MPI_Comm_free(&st->comm);
  while (st->free_reqs) {
    comm_req *r = st->free_reqs;
    st->free_reqs = r->next;
    free(r);
  }
  free(st);
  mpi.opens--;
  /* A broken job is not finalized (MPI_Finalize could wait for requests
   * that will never complete): the process's exit ends it. */
  if (mpi.opens == 0 && mpi.we_initialized && !broken) {
    mpi.p_MPI_Finalize();
    mpi.finalized = true;
  }
}

static _Noreturn void mpi_abort(rt_comm *c) {
  (void)c;
  mpi.p_MPI_Abort(mpi.world, 1);
  _exit(1);
}

const comm_backend rt_comm_mpi_backend = {
    .name = "mpi",
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .test = mpi_test,
    .iprobe = mpi_iprobe,
    .tag_limit = mpi_tag_limit,
    .close = mpi_close,
    .abort = mpi_abort,
};
#endif
