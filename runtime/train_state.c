/* runtime/train_state.c — a trainer's state on disk: rt_trainer_save and
 * rt_trainer_load (safetensors: parameters by name, optimizer states as
 * "opt/<state>", the step, the seed and the caller's settings as metadata).
 *
 * A sharded program (more than one rank) saves one file per rank and an
 * index:
 *   PATH.step<S>.rank<R>-of-<N>  the rank's blocks of every parameter and
 *       state (format "tgc-train-shard-2"; "rank", "coords" pp,dp,tp,
 *       "mesh_sizes" pp,dp,tp, and "layout.<tensor>" per tensor: per dim
 *       "<axis mask>:<parts>[:<pad>]", the block's ir_shard; a padded
 *       vocabulary's block is stored without its padding, so the rank
 *       holding the end of the vocabulary stores fewer rows), written
 *       atomically;
 *   PATH  the index, written by rank 0 once every rank's file is complete:
 *       no tensors, the metadata of an ordinary state file plus "sharded"
 *       (N) and "shards" (the file names, one per line: a name may hold a
 *       comma).
 * A save names its files by step, so a crash before the index is renamed
 * over PATH leaves the previous save whole; rank 0 then removes the files of
 * the save the old index named, having listed them in the new index's
 * "replaced" (a save killed while removing them leaves them there for the
 * next save). Only names of the form PATH's basename + ".step<S>.rank<R>-of-<N>"
 * are ever removed, and an index listing anything else is refused on load.
 * Ranks agree before anything is written (a non-finite parameter on any
 * rank: no rank saves) and after (a rank that failed to write fails every
 * rank, and each removes the new file it wrote). docs/sharding.md, "Saved
 * state", says what is promised.
 *
 * Every file carries "data_crc32" and (format version 2 on: "tgc-train-2",
 * "tgc-train-shard-2") "header_crc32"; loading requires both, the header's
 * only of version 2 (version 1 states predate it and still load).
 *
 * Loading assembles each whole tensor (from the one file, or from every
 * rank's block), checks its type against the whole value the program
 * trains, and gives the trainer its block of it: a state saved on one mesh
 * resumes on any other, a single device included.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir_die.h"
#include "comm.h"
#include "train_internal.h"

#define SHARD_FORMAT "tgc-train-shard-2"
#define SHARD_FORMAT_V1 "tgc-train-shard-1" /* before "header_crc32": still loads */

/* ---- helpers ---- */

char *rt_tr_state_name(const rt_trainer *t, int i) {
  const char *n = t->c.prog->update->inputs[t->np + i]->name;
  size_t len = strlen(STATE_PREFIX) + strlen(n) + 1;
  char *s = malloc(len);
  if (s) snprintf(s, len, "%s%s", STATE_PREFIX, n);
  return s;
}

static const ir_shard *layout_of(const rt_trainer *t, int i) {
  return i < t->np ? &t->pt->step->params[i]->shard : &t->pt->update->inputs[i]->shard; /* states: inputs np.. */
}

static rt_tensor *tensor_of(const rt_trainer *t, int i) { return i < t->np ? t->params[i] : t->states[i - t->np]; }

/* "<mask>:<parts>[:<pad>],..." per dim (the pad only when a padded
 * vocabulary's: docs/sharding.md) */
static void layout_text(const ir_shard *s, int rank, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int d = 0; d < rank && len < n; d++) {
    len += (size_t)snprintf(buf + len, n - len, "%s%d:%d", d ? "," : "", s->split[d], s->pieces[d]);
    if (s->pad[d] > 0 && len < n) len += (size_t)snprintf(buf + len, n - len, ":%d", (int)s->pad[d]);
  }
}

static int layout_parse(const char *text, int rank, ir_shard *s) {
  memset(s, 0, sizeof *s);
  const char *p = text;
  for (int d = 0; d < rank; d++) {
    char *end;
    long m = strtol(p, &end, 10);
    if (end == p || *end != ':' || m < 0 || m >= (1 << IR_NUM_AXES)) return -1;
    p = end + 1;
    long k = strtol(p, &end, 10);
    if (end == p || k < 0 || k > 255) return -1;
    p = end;
    s->split[d] = (uint8_t)m, s->pieces[d] = (uint8_t)k;
    if (*p == ':') { /* padded */
      long pad = strtol(p + 1, &end, 10);
      if (end == p + 1 || pad < 1 || pad > INT32_MAX || !m) return -1;
      s->pad[d] = (int32_t)pad;
      p = end;
    }
    if (d + 1 < rank) {
      if (*p != ',') return -1;
      p++;
    }
  }
  return *p ? -1 : 0;
}

static int parse_ints(const char *text, int *v, int n) {
  const char *p = text;
  for (int i = 0; i < n; i++) {
    char *end;
    long x = p ? strtol(p, &end, 10) : 0;
    if (!p || end == p || x < 0 || x > 1 << 20) return -1;
    v[i] = (int)x;
    p = end;
    if (i + 1 < n) {
      if (*p != ',') return -1;
      p++;
    }
  }
  return p && !*p ? 0 : -1;
}

/* All ranks agree: every rank's ok, combined (a max over the world of the
 * failures); 0 when every rank is ok. */
static int agree(const rt_trainer *t, bool ok, char *err, size_t errlen) {
  int32_t bad = ok ? 0 : 1, any = 0;
  char e2[256];
  if (rt_comm_all_reduce(t->c.comm, -1, RT_REDUCE_MAX, IR_DT_I32, &bad, &any, 1, e2, sizeof e2) != 0) {
    if (ok) rt_errf(err, errlen, "%s", e2);
    return -1;
  }
  return any ? -1 : 0;
}

/* The directory part of path ("" for none) and the file name's start. */
static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* Whether name is "<base>.step<S>.rank<R>-of-<N>" (S, R, N digits): the
 * only names a save ever deletes, and the only ones an index may list. */
static bool is_shard_name(const char *name, const char *base) {
  size_t bl = strlen(base);
  if (strncmp(name, base, bl) != 0) return false;
  const char *p = name + bl;
  static const char *const parts[] = {".step", ".rank", "-of-"};
  for (int i = 0; i < 3; i++) {
    size_t pl = strlen(parts[i]), k;
    if (strncmp(p, parts[i], pl) != 0 || !(k = strspn(p + pl, "0123456789"))) return false;
    p += pl + k;
  }
  return !*p;
}

/* Whether the list (names one a line) holds name. */
static bool list_has(const char *list, const char *name) {
  size_t nl = strlen(name);
  for (const char *p = list; p && *p;) {
    size_t len = strcspn(p, "\n");
    if (len == nl && memcmp(p, name, nl) == 0) return true;
    p += len + (p[len] == '\n');
  }
  return false;
}

/* The folder of path followed by name (malloc'd). */
static char *beside(const char *path, const char *name) {
  size_t dl = (size_t)(base_name(path) - path);
  char *full = malloc(dl + strlen(name) + 1);
  if (full) memcpy(full, path, dl), strcpy(full + dl, name);
  return full;
}

/* The rank files a save over path replaces, one a line ("" for none;
 * malloc'd, NULL when out of memory): those the index now at path lists in
 * "shards" or "replaced" (left by a save killed while removing them) that
 * are shard names of path (is_shard_name), are not among the new save's
 * files (keep) and still exist. Anything else an index lists is never
 * touched. */
static char *replaced_files(const char *path, const char *keep) {
  char e[512];
  rt_safetensors *old = access(path, F_OK) == 0 ? rt_safetensors_read_header(path, e, sizeof e) : NULL;
  const char *lists[2] = {old ? rt_safetensors_meta(old, "shards") : NULL, old ? rt_safetensors_meta(old, "replaced") : NULL};
  size_t cap = 1;
  for (int i = 0; i < 2; i++) cap += lists[i] ? strlen(lists[i]) + 1 : 0;
  char *out = malloc(cap), *name = malloc(cap);
  size_t len = 0;
  if (out && name) {
    out[0] = 0;
    for (int i = 0; i < 2; i++)
      for (const char *p = lists[i]; p && *p;) {
        size_t nl = strcspn(p, "\n");
        memcpy(name, p, nl);
        name[nl] = 0;
        p += nl + (p[nl] == '\n');
        char *full = is_shard_name(name, base_name(path)) && !list_has(keep, name) && !list_has(out, name)
                         ? beside(path, name)
                         : NULL;
        if (full && access(full, F_OK) == 0) len += (size_t)sprintf(out + len, "%s%s", len ? "\n" : "", name);
        free(full);
      }
  } else {
    free(out), out = NULL;
  }
  free(name);
  rt_safetensors_free(old);
  return out;
}

/* Removes the files of list (replaced_files), next to path. */
static void remove_files(const char *path, const char *list) {
  for (const char *p = list; p && *p;) {
    size_t nl = strcspn(p, "\n");
    char *name = strndup(p, nl), *full = name ? beside(path, name) : NULL;
    if (full) unlink(full);
    free(full);
    free(name);
    p += nl + (p[nl] == '\n');
  }
}

/* ---- save ---- */

/* The host views of every parameter and state; checks the parameters are finite. */
static rt_tensor **host_tensors(const rt_trainer *t, const char *path, char *why, size_t whylen, char *err,
                                size_t errlen, bool *finite) {
  int n = t->np + t->ns;
  rt_tensor **host = calloc((size_t)n + 1, sizeof *host);
  if (!host) {
    rt_errf(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  for (int i = 0; i < n; i++)
    if (!(host[i] = rt_tr_host_view(t, tensor_of(t, i), err, errlen))) {
      for (int j = 0; j < i; j++) rt_tr_host_view_free(t, host[j]);
      free(host);
      return NULL;
    }
  *finite = rt_tr_check_params_finite(t, host, why, whylen) == 0;
  return host;
}

static void host_free(const rt_trainer *t, rt_tensor **host) {
  for (int i = 0; host && i < t->np + t->ns; i++) rt_tr_host_view_free(t, host[i]);
  free(host);
}

/* Writes path with the tensors host[] (names: the parameters', "opt/..."),
 * the standard metadata, meta[] and extra[]. */
static int write_state(const rt_trainer *t, const char *path, rt_tensor **host, int n, const rt_meta_entry *meta,
                       int n_meta, const rt_meta_entry *extra, int n_extra, const char *format, char *err,
                       size_t errlen) {
  int total = t->np + t->ns;
  rt_named_tensor *ts = calloc((size_t)total + 1, sizeof *ts);
  char **snames = calloc((size_t)t->ns + 1, sizeof *snames);
  rt_meta_entry *md = calloc((size_t)(n_meta + n_extra) + 8, sizeof *md);
  int rc = -1;
  if (!ts || !snames || !md) {
    rt_errf(err, errlen, "%s: out of memory", path);
    goto done;
  }
  for (int i = 0; i < n && i < t->np; i++) ts[i] = (rt_named_tensor){t->c.prog->step->params[i]->name, host[i]};
  for (int i = 0; i < t->ns && n > t->np; i++) {
    if (!(snames[i] = rt_tr_state_name(t, i))) {
      rt_errf(err, errlen, "%s: out of memory", path);
      goto done;
    }
    ts[t->np + i] = (rt_named_tensor){snames[i], host[t->np + i]};
  }
  char step[32], seed[32];
  snprintf(step, sizeof step, "%" PRId64, t->step);
  snprintf(seed, sizeof seed, "%" PRIu64, t->c.seed);
  int n_md = 0;
  md[n_md++] = (rt_meta_entry){"format", format};
  md[n_md++] = (rt_meta_entry){"step", step};
  md[n_md++] = (rt_meta_entry){"seed", seed};
  for (int i = 0; i < n_meta; i++) md[n_md++] = meta[i];
  char scale[40], good[32];
  if (t->loss_scale) { /* dynamic loss scaling: its state, so a resumed run goes on with the same scale */
    snprintf(scale, sizeof scale, "%.17g", t->scale);
    snprintf(good, sizeof good, "%" PRId64, t->good_steps);
    md[n_md++] = (rt_meta_entry){"loss_scale", scale};
    md[n_md++] = (rt_meta_entry){"loss_scale_good_steps", good};
  }
  for (int i = 0; i < n_extra; i++) md[n_md++] = extra[i];
  rc = rt_safetensors_write(path, ts, n, md, n_md, err, errlen);
done:
  for (int i = 0; snames && i < t->ns; i++) free(snames[i]);
  free(snames);
  free(ts);
  free(md);
  return rc;
}

static int save_sharded(const rt_trainer *t, const char *path, const rt_meta_entry *meta, int n_meta, char *err,
                        size_t errlen) {
  int n = t->np + t->ns, rank = rt_comm_rank(t->c.comm), ranks = rt_comm_size(t->c.comm);
  char why[700] = "";
  bool finite = false;
  rt_tensor **host = host_tensors(t, path, why, sizeof why, err, errlen, &finite);
  if (agree(t, host && finite, err, errlen) != 0) {
    if (host && !finite) rt_errf(err, errlen, "%s: not saved: parameter %s (rank %d)", path, why, rank);
    else if (host) rt_errf(err, errlen, "%s: not saved: another rank could not (a parameter is Inf or NaN, or out of memory)", path);
    host_free(t, host);
    return -1;
  }
  /* this rank's file */
  size_t plen = strlen(path) + 64;
  char *file = malloc(plen), *files = malloc((size_t)ranks * (strlen(base_name(path)) + 64) + 1);
  rt_meta_entry *extra = calloc((size_t)n + 8, sizeof *extra);
  char (*lay)[IR_MAX_RANK * 8] = calloc((size_t)n + 1, sizeof *lay);
  char **keys = calloc((size_t)n + 1, sizeof *keys);
  rt_tensor **stored = calloc((size_t)n + 1, sizeof *stored);
  int rc = -1;
  bool wrote = false, existed = true;
  if (!file || !files || !extra || !lay || !keys || !stored) {
    rt_errf(err, errlen, "%s: out of memory", path);
    goto done;
  }
  snprintf(file, plen, "%s.step%" PRId64 ".rank%d-of-%d", path, t->step, rank, ranks);
  char coords[48], sizes[48], rk[16], rks[16];
  snprintf(coords, sizeof coords, "%d,%d,%d", t->coord[0], t->coord[1], t->coord[2]);
  snprintf(sizes, sizeof sizes, "%d,%d,%d", t->mesh->size[0], t->mesh->size[1], t->mesh->size[2]);
  snprintf(rk, sizeof rk, "%d", rank);
  snprintf(rks, sizeof rks, "%d", ranks);
  int ne = 0;
  extra[ne++] = (rt_meta_entry){"rank", rk};
  extra[ne++] = (rt_meta_entry){"ranks", rks};
  extra[ne++] = (rt_meta_entry){"coords", coords};
  extra[ne++] = (rt_meta_entry){"mesh_sizes", sizes};
  for (int i = 0; i < n; i++) {
    const char *name = i < t->np ? t->pt->step->params[i]->name : NULL;
    char *sname = i < t->np ? NULL : rt_tr_state_name(t, i - t->np);
    size_t kl = strlen(name ? name : sname ? sname : "") + 16;
    keys[i] = malloc(kl);
    if (keys[i]) snprintf(keys[i], kl, "layout.%s", name ? name : sname ? sname : "");
    free(sname);
    if (!keys[i]) {
      rt_errf(err, errlen, "%s: out of memory", path);
      goto done;
    }
    layout_text(layout_of(t, i), tensor_of(t, i)->type.rank, lay[i], sizeof lay[i]);
    extra[ne++] = (rt_meta_entry){keys[i], lay[i]};
  }
  existed = access(file, F_OK) == 0; /* a save at the old index's step rewrites its files in place */
  /* a padded vocabulary's blocks without their padding: a file holds the
   * rows of the whole [V, D], never the padding's */
  for (int i = 0; i < n; i++) {
    const ir_shard *s = layout_of(t, i);
    bool pad = false;
    for (int d = 0; d < host[i]->type.rank; d++) pad |= s->split[d] && s->pad[d] > 0;
    stored[i] = pad ? rt_shard_unpad(host[i], s, t->mesh, t->coord) : host[i];
    if (!stored[i]) {
      rt_errf(err, errlen, "%s: out of memory", path);
      goto done;
    }
  }
  wrote = write_state(t, file, stored, n, meta, n_meta, extra, ne, SHARD_FORMAT, err, errlen) == 0;
  if (agree(t, wrote, err, errlen) != 0) {
    if (wrote) rt_errf(err, errlen, "%s: not saved: another rank could not write its file", path);
    goto done;
  }
  /* rank 0: the index (listing in "replaced" the files of the save it
   * replaces), then those files */
  bool indexed = true;
  if (rank == 0) {
    size_t len = 0;
    files[0] = 0;
    for (int r = 0; r < ranks; r++)
      len += (size_t)sprintf(files + len, "%s%s.step%" PRId64 ".rank%d-of-%d", r ? "\n" : "", base_name(path), t->step,
                             r, ranks);
    char *stale = replaced_files(path, files);
    char sh[16];
    snprintf(sh, sizeof sh, "%d", ranks);
    rt_meta_entry ix[4] = {{"sharded", sh}, {"shards", files}, {"mesh_sizes", sizes}, {"replaced", stale}};
    if (!stale) rt_errf(err, errlen, "%s: out of memory", path);
    indexed = stale && write_state(t, path, NULL, 0, meta, n_meta, ix, *stale ? 4 : 3, FORMAT_NAME, err, errlen) == 0;
    if (indexed) remove_files(path, stale);
    free(stale);
  }
  if (agree(t, indexed, err, errlen) != 0) {
    if (indexed) rt_errf(err, errlen, "%s: not saved: rank 0 could not write the index", path);
    goto done;
  }
  rc = 0;
done:
  if (rc != 0 && wrote && !existed) unlink(file); /* a failed save leaves no new file of its own */
  for (int i = 0; keys && i < n; i++) free(keys[i]);
  free(keys);
  for (int i = 0; stored && host && i < n; i++)
    if (stored[i] != host[i]) rt_tensor_free(stored[i]);
  free(stored);
  free(lay);
  free(extra);
  free(files);
  free(file);
  host_free(t, host);
  return rc;
}

int rt_trainer_save(const rt_trainer *t, const char *path, const rt_meta_entry *meta, int n_meta, char *err,
                    size_t errlen) {
  if (t->lost) {
    rt_errf(err, errlen, "%s: not saved: the parameters were lost in a failed optimizer update", path);
    return -1;
  }
  if (t->sharded) return save_sharded(t, path, meta, n_meta, err, errlen);
  char why[700];
  bool finite = false;
  rt_tensor **host = host_tensors(t, path, why, sizeof why, err, errlen, &finite);
  if (!host) return -1;
  int rc = -1;
  char *stale = finite ? replaced_files(path, "") : NULL; /* a sharded save's files, when path is its index */
  rt_meta_entry rp = {"replaced", stale};
  if (!finite) rt_errf(err, errlen, "%s: not saved: parameter %s", path, why);
  else if (!stale) rt_errf(err, errlen, "%s: out of memory", path);
  else rc = write_state(t, path, host, t->np + t->ns, meta, n_meta, &rp, *stale ? 1 : 0, FORMAT_NAME, err, errlen);
  if (rc == 0) remove_files(path, stale);
  free(stale);
  host_free(t, host);
  return rc;
}

/* ---- load ---- */

/* rt_safetensors_read checked the checksums a file has: a state without
 * "data_crc32", or of the current format without "header_crc32", was not
 * written by tgc whole (true, with err). */
static bool missing_checksum(const rt_safetensors *f, const char *path, bool current, char *err, size_t errlen) {
  if (!rt_safetensors_meta(f, RT_SAFETENSORS_CRC_KEY)) {
    rt_errf(err, errlen, "%s: no metadata \"%s\" (the checksum of the tensor bytes every tgc state carries)", path,
            RT_SAFETENSORS_CRC_KEY);
    return true;
  }
  if (current && !rt_safetensors_meta(f, RT_SAFETENSORS_HEADER_CRC_KEY)) {
    rt_errf(err, errlen,
            "%s: no metadata \"%s\" (the checksum of the header every state of format \"%s\" or \"%s\" carries)", path,
            RT_SAFETENSORS_HEADER_CRC_KEY, FORMAT_NAME, SHARD_FORMAT);
    return true;
  }
  return false;
}

/* The shard files of an index: opened, checked against it and each other. */
typedef struct {
  int n;
  rt_safetensors **f;
  char **path;
  ir_mesh mesh;
} shard_set;

static void shards_free(shard_set *s) {
  for (int i = 0; i < s->n; i++) {
    rt_safetensors_free(s->f ? s->f[i] : NULL);
    free(s->path ? s->path[i] : NULL);
  }
  free(s->f);
  free(s->path);
  memset(s, 0, sizeof *s);
}

static int shards_open(const rt_safetensors *ix, const char *path, shard_set *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  const char *nt = rt_safetensors_meta(ix, "sharded"), *list = rt_safetensors_meta(ix, "shards"),
             *sizes = rt_safetensors_meta(ix, "mesh_sizes"), *step = rt_safetensors_meta(ix, "step");
  int n = 0, sz[IR_NUM_AXES];
  if (!nt || parse_ints(nt, &n, 1) != 0 || n < 1 || !list || !sizes || parse_ints(sizes, sz, IR_NUM_AXES) != 0 ||
      (int64_t)sz[0] * sz[1] * sz[2] != n) {
    rt_errf(err, errlen, "%s: a sharded state index whose \"sharded\", \"shards\" or \"mesh_sizes\" is missing or wrong",
            path);
    return -1;
  }
  s->mesh = ir_mesh_single();
  for (int a = 0; a < IR_NUM_AXES; a++) s->mesh.size[a] = sz[a];
  s->f = calloc((size_t)n, sizeof *s->f);
  s->path = calloc((size_t)n, sizeof *s->path);
  if (!s->f || !s->path) {
    rt_errf(err, errlen, "out of memory");
    return -1;
  }
  s->n = n;
  int names = 1;
  for (const char *c = list; *c; c++) names += *c == '\n';
  if (names != n) {
    rt_errf(err, errlen, "%s: damaged index: metadata \"shards\" names %d files, but \"sharded\" says %d", path, names, n);
    return -1;
  }
  const char *p = list;
  for (int r = 0; r < n; r++) {
    size_t len = strcspn(p, "\n");
    char *name = strndup(p, len), shown[80];
    if (!name) {
      rt_errf(err, errlen, "out of memory");
      return -1;
    }
    snprintf(shown, sizeof shown, "%.60s%s", name, len > 60 ? "..." : "");
    bool slash = strchr(name, '/') != NULL, named = !slash && is_shard_name(name, base_name(path));
    if (slash)
      rt_errf(err, errlen,
              "%s: damaged index: shard %d's name \"%s\" contains '/' (a shard name may not: the rank files lie next to "
              "the index)",
              path, r, shown);
    else if (!named)
      rt_errf(err, errlen, "%s: damaged index: shard %d's name \"%s\" is not of the form %s.step<S>.rank<R>-of-<N>", path,
              r, shown, base_name(path));
    s->path[r] = named ? beside(path, name) : NULL;
    free(name);
    if (!named) return -1;
    if (!s->path[r]) {
      rt_errf(err, errlen, "out of memory");
      return -1;
    }
    p += len + (p[len] == '\n');
    char e2[768];
    if (!(s->f[r] = rt_safetensors_read(s->path[r], e2, sizeof e2))) {
      rt_errf(err, errlen, "%s: shard %d of %d: %s", path, r, n, e2);
      return -1;
    }
    const char *fmt = rt_safetensors_meta(s->f[r], "format"), *rk = rt_safetensors_meta(s->f[r], "rank"),
               *st = rt_safetensors_meta(s->f[r], "step"), *c = rt_safetensors_meta(s->f[r], "coords");
    int rank = -1, co[IR_NUM_AXES];
    if (!fmt || (strcmp(fmt, SHARD_FORMAT) != 0 && strcmp(fmt, SHARD_FORMAT_V1) != 0) || !rk || parse_ints(rk, &rank, 1) != 0 || rank != r || !st || !step ||
        strcmp(st, step) != 0 || !c || parse_ints(c, co, IR_NUM_AXES) != 0) {
      rt_errf(err, errlen, "%s: is not rank %d's file of the state %s saved at step %s", s->path[r], r, path,
              step ? step : "?");
      return -1;
    }
    if (missing_checksum(s->f[r], s->path[r], strcmp(fmt, SHARD_FORMAT) == 0, err, errlen)) return -1;
  }
  return 0;
}

/* Whether x, a block of layout sh, is stored without a padding the layout
 * has (at most the block's size along each padded dim, which the whole
 * value's type want gives). */
static bool stored_unpadded(const rt_tensor *x, const ir_shard *sh, const ir_mesh *m, const ir_type *want) {
  bool pad = false;
  for (int d = 0; d < x->type.rank && x->type.rank == want->rank; d++) {
    if (!sh->split[d] || sh->pad[d] <= 0) continue;
    if (x->type.dims[d] > (want->dims[d] + sh->pad[d]) / ir_shard_blocks(sh, m, d)) return false;
    pad = true;
  }
  return pad;
}

/* The whole tensor `name` of type want (a new host tensor, caller frees):
 * from a plain file, or assembled from every shard's block. */
static rt_tensor *whole_tensor(const rt_safetensors *f, const shard_set *s, const char *path, const char *name,
                               const ir_type *want, bool is_state, char *err, size_t errlen) {
  char a[160], b[160];
  if (!s->n) {
    const rt_tensor *x = rt_safetensors_find(f, name);
    if (!x) {
      rt_errf(err, errlen, "%s: missing tensor '%s' (%s)", path, name,
              is_state ? "optimizer state: was it saved with another optimizer?" : "a parameter of the model");
      return NULL;
    }
    if (!ir_type_equal(&x->type, want)) {
      rt_errf(err, errlen, "%s: tensor '%s' is %s but the model's %s is %s", path, name,
              ir_type_str(&x->type, a, sizeof a), is_state ? "optimizer state" : "parameter", ir_type_str(want, b, sizeof b));
      return NULL;
    }
    rt_tensor *w = rt_tensor_new(want);
    if (w) memcpy(w->data, x->data, w->nbytes);
    else rt_errf(err, errlen, "out of memory");
    return w;
  }
  rt_tensor *w = NULL;
  size_t kl = strlen(name) + 16;
  char *key = malloc(kl);
  if (!key) goto oom;
  snprintf(key, kl, "layout.%s", name);
  for (int r = 0; r < s->n; r++) {
    const rt_tensor *x = rt_safetensors_find(s->f[r], name);
    const char *lt = rt_safetensors_meta(s->f[r], key), *c = rt_safetensors_meta(s->f[r], "coords");
    ir_shard sh;
    int co[IR_NUM_AXES];
    if (!x) continue; /* a pipeline stage holds only its own parameters */
    if (!lt || layout_parse(lt, x->type.rank, &sh) != 0 || parse_ints(c, co, IR_NUM_AXES) != 0) {
      rt_errf(err, errlen, "%s: tensor '%s' has no valid metadata \"%s\"", s->path[r], name, key);
      goto fail;
    }
    rt_tensor *padded = NULL; /* a padded vocabulary's block, stored without its padding */
    if (stored_unpadded(x, &sh, &s->mesh, want)) {
      if (!(padded = rt_shard_repad(x, &sh, &s->mesh, want))) goto oom;
      x = padded;
    }
    ir_type g = ir_shard_global_type(&x->type, &sh, &s->mesh);
    int rc = 0;
    if (!ir_type_equal(&g, want)) {
      rt_errf(err, errlen, "%s: tensor '%s' is %s (whole) but the model's %s is %s", s->path[r], name,
              ir_type_str(&g, a, sizeof a), is_state ? "optimizer state" : "parameter", ir_type_str(want, b, sizeof b));
      rc = -1;
    } else if (!w && !(w = rt_tensor_new(want))) {
      rt_errf(err, errlen, "out of memory");
      rc = -1;
    } else {
      rc = rt_shard_insert(w, x, &sh, &s->mesh, co, err, errlen);
    }
    rt_tensor_free(padded);
    if (rc != 0) goto fail;
  }
  if (!w) {
    rt_errf(err, errlen, "%s: missing tensor '%s' (%s): none of its %d rank files has it", path, name,
            is_state ? "optimizer state: was it saved with another optimizer?" : "a parameter of the model", s->n);
    goto fail;
  }
  free(key);
  return w;
oom:
  rt_errf(err, errlen, "out of memory");
fail:
  free(key);
  rt_tensor_free(w);
  return NULL;
}

int rt_trainer_load(rt_trainer *t, const rt_safetensors *f, const char *path, char *err, size_t errlen) {
  const char *fmt = rt_safetensors_meta(f, "format"), *step = rt_safetensors_meta(f, "step");
  if (!fmt || (strcmp(fmt, FORMAT_NAME) != 0 && strcmp(fmt, FORMAT_NAME_V1) != 0)) {
    rt_errf(err, errlen, "%s: not a tgc training state (metadata \"format\" is %s%s%s, expected \"%s\")", path,
         fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "", FORMAT_NAME);
    return -1;
  }
  if (missing_checksum(f, path, strcmp(fmt, FORMAT_NAME) == 0, err, errlen)) return -1;
  char *end = NULL;
  errno = 0;
  long long s = step ? strtoll(step, &end, 10) : -1;
  if (!step || end == step || *end || errno || s < 0 || s > RT_MAX_STEP) {
    char shown[48] = "";
    if (step) snprintf(shown, sizeof shown, "\"%.40s%s\"", step, strlen(step) > 40 ? "..." : "");
    rt_errf(err, errlen, "%s: metadata \"step\" is %s: expected an integer in [0, %lld]", path,
            step ? shown : "missing", (long long)RT_MAX_STEP);
    return -1;
  }
  shard_set set;
  memset(&set, 0, sizeof set);
  if (rt_safetensors_meta(f, "sharded") && shards_open(f, path, &set, err, errlen) != 0) {
    shards_free(&set);
    return -1;
  }
  int n = t->np + t->ns, rc = -1;
  if (!set.n) { /* a plain file: every tensor there with its type, and no other, before anything is loaded */
    for (int i = 0; i < n; i++) {
      rt_tensor *dst = tensor_of(t, i);
      ir_type want = t->sharded ? ir_shard_global_type(&dst->type, layout_of(t, i), t->mesh) : dst->type;
      char *sname = i < t->np ? NULL : rt_tr_state_name(t, i - t->np);
      const char *name = i < t->np ? t->pt->step->params[i]->name : sname;
      const rt_tensor *x = name ? rt_safetensors_find(f, name) : NULL;
      char a[160], b[160];
      if (!name) rt_errf(err, errlen, "%s: out of memory", path);
      else if (!x)
        rt_errf(err, errlen, "%s: missing tensor '%s' (%s)", path, name,
                i >= t->np ? "optimizer state: was it saved with another optimizer?" : "a parameter of the model");
      else if (!ir_type_equal(&x->type, &want))
        rt_errf(err, errlen, "%s: tensor '%s' is %s but the model's %s is %s", path, name,
                ir_type_str(&x->type, a, sizeof a), i >= t->np ? "optimizer state" : "parameter",
                ir_type_str(&want, b, sizeof b));
      free(sname);
      if (!x) goto done;
      if (!ir_type_equal(&x->type, &want)) goto done;
    }
  }
  if (!set.n && rt_safetensors_count(f) != n && t->pt->n_stages <= 1) {
    /* name the first tensor this model does not have (a pipeline stage
     * holds its stages' tensors alone: the file's others are the other
     * stages', each of which checks its own are there) */
    for (int j = 0; j < rt_safetensors_count(f); j++) {
      const char *name = rt_safetensors_name(f, j);
      bool used = false;
      for (int i = 0; i < n && !used; i++) {
        char *sn = i < t->np ? NULL : rt_tr_state_name(t, i - t->np);
        used = strcmp(name, i < t->np ? t->pt->step->params[i]->name : sn ? sn : "") == 0;
        free(sn);
      }
      if (!used) {
        rt_errf(err, errlen, "%s: unexpected tensor '%s': not a parameter or optimizer state of this model and optimizer",
                path, name);
        goto done;
      }
    }
  }
  for (int i = 0; i < n; i++) {
    rt_tensor *dst = tensor_of(t, i);
    const ir_shard *lay = layout_of(t, i);
    ir_type whole_t = t->sharded ? ir_shard_global_type(&dst->type, lay, t->mesh) : dst->type;
    char *sname = i < t->np ? NULL : rt_tr_state_name(t, i - t->np);
    const char *name = i < t->np ? t->pt->step->params[i]->name : sname;
    rt_tensor *whole = name ? whole_tensor(f, &set, path, name, &whole_t, i >= t->np, err, errlen) : NULL;
    free(sname);
    if (!whole) goto done;
    int r = 0;
    if (t->sharded) { /* this rank's block */
      rt_tensor *block = rt_tensor_new(&dst->type);
      r = block ? rt_shard_extract(whole, block, lay, t->mesh, t->coord, err, errlen) : -1;
      if (r == 0) r = rt_upload(dst, block->data, err, errlen);
      rt_tensor_free(block);
    } else {
      r = rt_upload(dst, whole->data, err, errlen);
    }
    rt_tensor_free(whole);
    if (r != 0) goto done;
  }
  const char *ls = rt_safetensors_meta(f, "loss_scale"), *lg = rt_safetensors_meta(f, "loss_scale_good_steps");
  if (t->loss_scale && ls && lg) {
    char *e1 = NULL, *e2 = NULL;
    double v = strtod(ls, &e1);
    long long gsteps = strtoll(lg, &e2, 10);
    if (*e1 || *e2 || !(v > 0) || !isfinite(v) || gsteps < 0 || gsteps >= RT_LOSS_SCALE_INTERVAL) {
      rt_errf(err, errlen, "%s: metadata \"loss_scale\" %s / \"loss_scale_good_steps\" %s is not a loss scaler's state",
              path, ls, lg);
      goto done;
    }
    t->scale = v, t->good_steps = gsteps, t->scale_stale = true;
  }
  t->step = s;
  rc = rt_tr_make_copies(t, err, errlen);
done:
  shards_free(&set);
  return rc;
}

int rt_trainer_load_weights(rt_trainer *t, const char *path, const rt_weight_map *m, char *err, size_t errlen) {
  ir_value *vals = calloc((size_t)t->np + 1, sizeof *vals);
  const ir_value **pv = calloc((size_t)t->np + 1, sizeof *pv);
  rt_tensor **whole = calloc((size_t)t->np + 1, sizeof *whole);
  if (!vals || !pv || !whole) IR_DIE("out of memory (vals || !pv || !whole)");
  for (int i = 0; i < t->np; i++) { /* the parameters with their whole types (a rank holds a block) */
    vals[i] = *t->pt->step->params[i];
    if (t->sharded) vals[i].type = ir_shard_global_type(&t->params[i]->type, layout_of(t, i), t->mesh);
    pv[i] = &vals[i];
  }
  int rc = rt_weights_load_values(pv, t->np, whole, path, m, NULL, err, errlen);
  for (int i = 0; rc == 0 && i < t->np; i++) {
    if (t->sharded) {
      rt_tensor *block = rt_tensor_new(&t->params[i]->type);
      rc = block ? rt_shard_extract(whole[i], block, layout_of(t, i), t->mesh, t->coord, err, errlen) : -1;
      if (rc == 0) rc = rt_upload(t->params[i], block->data, err, errlen);
      rt_tensor_free(block);
    } else {
      rc = rt_upload(t->params[i], whole[i]->data, err, errlen);
    }
  }
  for (int i = 0; i < t->np; i++) rt_tensor_free(whole[i]);
  free(whole);
  free(pv);
  free(vals);
  return rc == 0 ? rt_tr_make_copies(t, err, errlen) : rc;
}
