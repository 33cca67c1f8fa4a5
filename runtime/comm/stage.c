/* runtime/comm/stage.c — staged sends (the payload copied into a spare
 * buffer and posted; rt_comm_progress completes them, rt_comm_drain waits
 * for all), the loopback queue (send/recv to this rank itself, FIFO per
 * tag), copies and scratch buffers. A steady loop allocates nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

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


int comm_copy(rt_comm *c, void *dst, const void *src, size_t bytes, char *err, size_t errlen) {
  if (!bytes || dst == src) return 0;
  if (c->be->copy) return c->be->copy(c, dst, src, bytes, err, errlen);
  memmove(dst, src, bytes);
  return 0;
}


/* send/recv with this rank itself: through the loopback queue (FIFO per tag) */
int comm_loopback(rt_comm *c, const comm_group *g, const rt_coll_args *a, char *err, size_t errlen) {
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
