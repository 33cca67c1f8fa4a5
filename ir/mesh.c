/* ir/mesh.c — the device mesh and sharding specs: names, parsing of
 * `--mesh dp=2,tp=2,pp=2`, and the text the printer, DOT, JSON and
 * diagnostics share for both.
 *
 * The axes are fixed (mesh_axes.def: pp, dp, tp, outermost first), so a
 * spec is a bit mask per dim and the text names axes, never numbers. The
 * kinds of collective (collectives.def) have their tables here too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static const char *const axis_names[IR_NUM_AXES] = {
#define IR_MESH_AXIS(id, name, word) [IR_AXIS_##id] = name,
#include "mesh_axes.def"
#undef IR_MESH_AXIS
};
static const char *const axis_words[IR_NUM_AXES] = {
#define IR_MESH_AXIS(id, name, word) [IR_AXIS_##id] = word,
#include "mesh_axes.def"
#undef IR_MESH_AXIS
};

const char *ir_axis_name(ir_axis a) { return (unsigned)a < IR_NUM_AXES ? axis_names[a] : "?"; }
const char *ir_axis_word(ir_axis a) { return (unsigned)a < IR_NUM_AXES ? axis_words[a] : "?"; }

int ir_axis_from_name(const char *name, size_t n) {
  for (int a = 0; a < IR_NUM_AXES; a++)
    if (strlen(axis_names[a]) == n && memcmp(axis_names[a], name, n) == 0) return a;
  return -1;
}

/* ---- collective kinds (collectives.def) ---- */

static const struct {
  const char *name, *label;
  ir_op op;
} colls[IR_NUM_COLLS] = {
#define IR_COLL(id, name, op, label, ring) [IR_COLL_##id] = {name, label, IR_OP_##op},
#include "collectives.def"
#undef IR_COLL
};

const char *ir_coll_name(ir_coll k) { return (unsigned)k < IR_NUM_COLLS ? colls[k].name : "?"; }
const char *ir_coll_label(ir_coll k) { return (unsigned)k < IR_NUM_COLLS ? colls[k].label : "?"; }
ir_op ir_coll_op(ir_coll k) { return (unsigned)k < IR_NUM_COLLS ? colls[k].op : IR_NUM_OPS; }

int ir_coll_of_op(ir_op op) {
  for (int k = 0; k < IR_NUM_COLLS; k++)
    if (colls[k].op == op) return k;
  return -1;
}

double ir_coll_ring_factor(ir_coll k, int64_t n) {
  if (n <= 1) return 0;
  switch (k) {
#define IR_COLL(id, name, op, label, ring) \
  case IR_COLL_##id: return ring;
#include "collectives.def"
#undef IR_COLL
  default: return 0;
  }
}

ir_mesh ir_mesh_single(void) {
  ir_mesh m = {.sp = false, .stage = -1};
  for (int a = 0; a < IR_NUM_AXES; a++) m.size[a] = 1;
  return m;
}

int64_t ir_mesh_ranks(const ir_mesh *m) {
  int64_t n = 1;
  for (int a = 0; a < IR_NUM_AXES; a++) n *= m->size[a];
  return n;
}

bool ir_mesh_is_single(const ir_mesh *m) { return ir_mesh_ranks(m) == 1 && !m->sp && m->stage < 0; }

#define MESH_MAX_SIZE 4096

static int fail(char *err, size_t errlen, const char *fmt, const char *a, size_t an) {
  if (err && errlen) snprintf(err, errlen, fmt, (int)an, a);
  return -1;
}

int ir_mesh_parse(const char *text, ir_mesh *m, char *err, size_t errlen) {
  *m = ir_mesh_single();
  bool seen[IR_NUM_AXES] = {false}, sp = false;
  const char *p = text;
  if (!*p) return fail(err, errlen, "an empty mesh%.*s (give axes like dp=2,tp=2)", "", 0);
  for (;;) {
    const char *item = p;
    size_t len = strcspn(p, ",");
    const char *eq = memchr(item, '=', len);
    if (len == 2 && memcmp(item, "sp", 2) == 0) {
      if (sp) return fail(err, errlen, "'%.*s' given twice", item, len);
      sp = true;
    } else if (!eq) {
      return fail(err, errlen, "'%.*s' is not an axis=size item (axes: pp, dp, tp; 'sp' turns on sequence parallelism)",
                  item, len);
    } else {
      int a = ir_axis_from_name(item, (size_t)(eq - item));
      if (a < 0)
        return fail(err, errlen, "unknown mesh axis '%.*s' (axes: pp, dp, tp; 'sp' turns on sequence parallelism)",
                    item, (size_t)(eq - item));
      if (seen[a]) return fail(err, errlen, "mesh axis '%.*s' given twice", item, (size_t)(eq - item));
      seen[a] = true;
      const char *num = eq + 1, *end = item + len;
      long v = 0;
      bool ok = num < end;
      for (const char *c = num; c < end && ok; c++) {
        ok = *c >= '0' && *c <= '9';
        if (ok) v = v * 10 + (*c - '0');
        if (v > MESH_MAX_SIZE) ok = false;
      }
      if (!ok || v < 1)
        return fail(err, errlen, "mesh axis size '%.*s' must be a whole number from 1 to 4096", item, len);
      m->size[a] = (int)v;
    }
    p += len;
    if (!*p) break;
    p++;
    if (!*p) return fail(err, errlen, "the mesh '%.*s' ends with ','", text, strlen(text));
  }
  if (sp && m->size[IR_AXIS_TP] < 2)
    return fail(err, errlen, "'sp' (sequence parallelism) needs a tensor-parallel axis tp of size 2 or more%.*s", "", 0);
  m->sp = sp;
  if (ir_mesh_ranks(m) > MESH_MAX_SIZE)
    return fail(err, errlen, "the mesh '%.*s' has more than 4096 ranks", text, strlen(text));
  return 0;
}

char *ir_mesh_str(const ir_mesh *m, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int a = 0; a < IR_NUM_AXES && len < n; a++)
    if (m->size[a] > 1) len += (size_t)snprintf(buf + len, n - len, "%s%s=%d", len ? ", " : "", axis_names[a], m->size[a]);
  if (m->sp && len < n) len += (size_t)snprintf(buf + len, n - len, " sp");
  if (len == 0) snprintf(buf, n, "one device");
  return buf;
}

bool ir_shard_is_replicated(const ir_shard *s) {
  if (s->partial) return false;
  for (int i = 0; i < IR_MAX_RANK; i++)
    if (s->split[i]) return false;
  return true;
}

bool ir_shard_equal(const ir_shard *a, const ir_shard *b, int rank) {
  if (a->partial != b->partial) return false;
  for (int d = 0; d < rank && d < IR_MAX_RANK; d++)
    if (a->split[d] != b->split[d] ||
        (a->split[d] && (ir_shard_pieces(a, d) != ir_shard_pieces(b, d) || a->pad[d] != b->pad[d])))
      return false;
  return true;
}

int64_t ir_shard_blocks(const ir_shard *s, const ir_mesh *m, int d) {
  int64_t b = 1;
  for (int a = 0; a < IR_NUM_AXES; a++)
    if ((s->split[d] >> a) & 1) b *= m->size[a];
  return b;
}

ir_type ir_shard_global_type(const ir_type *local, const ir_shard *s, const ir_mesh *m) {
  ir_type g = *local;
  for (int d = 0; d < g.rank; d++)
    for (int a = 0; a < IR_NUM_AXES; a++)
      if ((s->split[d] >> a) & 1) g.dims[d] *= m->size[a];
  for (int d = 0; d < g.rank; d++)
    if (s->split[d] && s->pad[d] > 0) g.dims[d] -= s->pad[d];
  return g;
}

int64_t ir_shard_global_index(const ir_shard *s, const ir_mesh *m, const int *coord, int d, int64_t local_size,
                              int64_t l) {
  int64_t block = 0, blocks = 1;
  for (int a = 0; a < IR_NUM_AXES; a++)
    if ((s->split[d] >> a) & 1) {
      block = block * m->size[a] + coord[a];
      blocks *= m->size[a];
    }
  if (blocks == 1) return l;
  int k = ir_shard_pieces(s, d);
  if (k == 1) return block * local_size + l;
  /* parts: the innermost axis splits each of k parts of the outer axes' block */
  int inner = 0;
  for (int a = 0; a < IR_NUM_AXES; a++)
    if ((s->split[d] >> a) & 1) inner = a;
  int64_t n = m->size[inner], c = coord[inner], outer_block = (block - c) / n;
  int64_t w = local_size / k; /* this rank's share of one part */
  return outer_block * (local_size * n) + (l / w) * (w * n) + c * w + l % w;
}

/* "dp", "(dp, tp)" or "-" */
static size_t axes_str(unsigned mask, char *buf, size_t n) {
  int count = 0;
  for (int a = 0; a < IR_NUM_AXES; a++) count += (mask >> a) & 1;
  if (count == 0) return (size_t)snprintf(buf, n, "-");
  size_t len = 0;
  if (count > 1) len += (size_t)snprintf(buf, n, "(");
  int k = 0;
  for (int a = 0; a < IR_NUM_AXES; a++)
    if (((mask >> a) & 1) && len < n) len += (size_t)snprintf(buf + len, n - len, "%s%s", k++ ? ", " : "", axis_names[a]);
  if (count > 1 && len < n) len += (size_t)snprintf(buf + len, n - len, ")");
  return len;
}

char *ir_shard_str(const ir_shard *s, int rank, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  bool split = false;
  for (int d = 0; d < rank && d < IR_MAX_RANK; d++) split |= s->split[d] != 0;
  if (split) {
    len += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < rank && len < n; d++) {
      if (d) len += (size_t)snprintf(buf + len, n - len, ", ");
      if (len < n) len += axes_str(s->split[d], buf + len, n - len);
      if (s->split[d] && s->pieces[d] > 1 && len < n) len += (size_t)snprintf(buf + len, n - len, ":%d", s->pieces[d]);
      if (s->split[d] && s->pad[d] > 0 && len < n) len += (size_t)snprintf(buf + len, n - len, " pad %d", (int)s->pad[d]);
    }
    if (len < n) len += (size_t)snprintf(buf + len, n - len, "]");
  }
  if (s->partial && len < n) {
    len += (size_t)snprintf(buf + len, n - len, "%spartial(", split ? " " : "");
    int k = 0;
    for (int a = 0; a < IR_NUM_AXES && len < n; a++)
      if ((s->partial >> a) & 1) len += (size_t)snprintf(buf + len, n - len, "%s%s", k++ ? ", " : "", axis_names[a]);
    if (len < n) snprintf(buf + len, n - len, ")");
  }
  return buf;
}

int ir_shard_spec_parse(const char *text, int rank, ir_shard *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  int n = 0;
  unsigned used = 0;
  const char *p = text;
  for (;;) {
    while (*p == ' ') p++;
    const char *q = p;
    while (*q && *q != ',' && *q != ' ') q++;
    size_t len = (size_t)(q - p);
    if (len == 0) {
      snprintf(err, errlen, "entry %d of the spec is empty", n + 1);
      return -1;
    }
    if (!(len == 1 && *p == '-')) {
      int a = ir_axis_from_name(p, len);
      if (a < 0 || a == IR_AXIS_PP) {
        snprintf(err, errlen, "entry %d of the spec is '%.*s': a dim is split over dp or tp, or replicated (-)%s", n + 1,
                 (int)(len > 40 ? 40 : len), p, a == IR_AXIS_PP ? "; pp splits the layers, not values" : "");
        return -1;
      }
      if ((used >> a) & 1) {
        snprintf(err, errlen, "%s splits two dims of the spec (an axis splits at most one)", ir_axis_name((ir_axis)a));
        return -1;
      }
      used |= 1u << a;
      if (n < IR_MAX_RANK) out->split[n] = (uint8_t)(1u << a);
    }
    n++;
    while (*q == ' ') q++;
    if (!*q) break;
    if (*q != ',') {
      snprintf(err, errlen, "expected ',' between the spec's entries");
      return -1;
    }
    p = q + 1;
  }
  if (n != rank) {
    snprintf(err, errlen, "the spec has %d entr%s but the value has rank %d", n, n == 1 ? "y" : "ies", rank);
    return -1;
  }
  return 0;
}
