/* runtime/io/weights.c — pretrained weights in and out through a name map.
 *
 * A name map is data: a text file of lines
 *
 *   TGC-PATTERN = HF-PATTERN [TRANSFORM ...]     a parameter and its tensor
 *   ! GLOB                                        file tensors to leave unused
 *   # comment
 *
 * where a pattern may hold one "{i}" (a layer index: decimal digits) and a
 * GLOB is an fnmatch(3) pattern. Reading (file -> parameter) applies the
 * transforms in the order written to the file's tensor:
 *
 *   split(K,N,A)  part K of N equal parts along axis A (a fused qkv); must
 *                 come first; export joins the parts back into one tensor
 *   rope(H)       the rotary permutation of HF Llama's q/k rows: [H*2*h, ...]
 *                 read as [H, 2, h, ...] and stored as [H, h, 2, ...] (the
 *                 half-split layout to Meta's interleaved one; a model that
 *                 rotates halves, as examples/llama.tg does, needs none)
 *   transpose     a 2-D tensor's transpose (GPT-2's Conv1D is [in, out] like
 *                 tgc; torch.nn.Linear is [out, in])
 *   cast          allows the file's float dtype to differ from the parameter's
 *                 (rounded to it); without it a dtype mismatch is an error
 *
 * Export applies the inverses in reverse order and writes the parameter's
 * dtype. Without a map, names are matched as they are, with no transform.
 * Every error names both names and both types; every missing tensor and
 * every unused one (not matched by a "!" line) is listed.
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir_die.h"
#include "internal.h"
#include "rt_io.h"

typedef enum { WT_SPLIT, WT_ROPE, WT_TRANSPOSE, WT_CAST } wt_kind;

typedef struct {
  wt_kind kind;
  int a, b, c; /* split: K, N, axis; rope: H */
} wt_transform;

typedef struct {
  char *tgc, *hf; /* hf NULL: an ignore line ("! GLOB" in tgc) */
  wt_transform tr[8];
  int n_tr;
  int line;
} wt_rule;

struct rt_weight_map {
  char *path;
  wt_rule *rules;
  int n;
};

void rt_weight_map_free(rt_weight_map *m) {
  if (!m) return;
  for (int i = 0; i < m->n; i++) free(m->rules[i].tgc), free(m->rules[i].hf);
  free(m->rules);
  free(m->path);
  free(m);
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
  return s;
}

/* A pattern: no spaces, at most one "{i}". */
static bool pattern_ok(const char *p) {
  const char *w = strstr(p, "{i}");
  return *p && !strpbrk(p, " \t") && (!w || !strstr(w + 3, "{i}"));
}

static int parse_transform(const char *tok, wt_transform *t) {
  char tail;
  if (strcmp(tok, "transpose") == 0) return t->kind = WT_TRANSPOSE, 0;
  if (strcmp(tok, "cast") == 0) return t->kind = WT_CAST, 0;
  if (sscanf(tok, "split(%d,%d,%d)%c", &t->a, &t->b, &t->c, &tail) == 3 && t->b > 0 && t->a >= 0 && t->a < t->b &&
      t->c >= 0)
    return t->kind = WT_SPLIT, 0;
  if (sscanf(tok, "rope(%d)%c", &t->a, &tail) == 1 && t->a > 0) return t->kind = WT_ROPE, 0;
  return -1;
}

rt_weight_map *rt_weight_map_read(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    rt_path_errf(err, errlen, path, "cannot open the name map: %s", strerror(errno));
    return NULL;
  }
  rt_weight_map *m = calloc(1, sizeof *m);
  if (!m || !(m->path = strdup(path))) IR_DIE("out of memory (m || !(m->path = strdup(path)))");
  char buf[4096];
  int cap = 0, lineno = 0;
  while (fgets(buf, sizeof buf, f)) {
    lineno++;
    char *hash = strchr(buf, '#');
    if (hash) *hash = 0;
    char *s = trim(buf);
    if (!*s) continue;
    if (m->n == cap) {
      cap = cap ? 2 * cap : 32;
      if (!(m->rules = realloc(m->rules, (size_t)cap * sizeof *m->rules))) IR_DIE("out of memory ((m->rules = realloc(m->rules, (size_t)cap * sizeof *m->rules)))");
    }
    wt_rule *r = &m->rules[m->n];
    *r = (wt_rule){.line = lineno};
    if (*s == '!') {
      char *g = trim(s + 1);
      if (!*g || strpbrk(g, " \t")) {
        rt_errf(err, errlen, "%s:%d: error: expected '! GLOB' (one pattern of tensors to leave unused)", path, lineno);
        goto fail;
      }
      if (!(r->tgc = strdup(g))) IR_DIE("out of memory ((r->tgc = strdup(g)))");
      m->n++;
      continue;
    }
    char *eq = strchr(s, '=');
    if (!eq) {
      rt_errf(err, errlen, "%s:%d: error: expected 'tgc-name = hf-name [transform...]'", path, lineno);
      goto fail;
    }
    *eq = 0;
    char *lhs = trim(s), *rest = eq + 1;
    char *save = NULL, *tok = strtok_r(rest, " \t", &save);
    if (!pattern_ok(lhs) || !tok || !pattern_ok(tok) || (strstr(lhs, "{i}") != NULL) != (strstr(tok, "{i}") != NULL)) {
      rt_errf(err, errlen,
              "%s:%d: error: expected 'tgc-name = hf-name [transform...]' (names without spaces, '{i}' on both "
              "sides or neither)",
              path, lineno);
      goto fail;
    }
    if (!(r->tgc = strdup(lhs)) || !(r->hf = strdup(tok))) IR_DIE("out of memory ((r->tgc = strdup(lhs)) || !(r->hf = strdup(tok)))");
    m->n++;
    while ((tok = strtok_r(NULL, " \t", &save))) {
      wt_transform t = {0};
      if (parse_transform(tok, &t) != 0) {
        rt_errf(err, errlen,
                "%s:%d: error: unknown transform '%s' (known: transpose, split(K,N,AXIS), rope(HEADS), cast)", path,
                lineno, tok);
        goto fail;
      }
      if (t.kind == WT_SPLIT && r->n_tr) {
        rt_errf(err, errlen, "%s:%d: error: split(...) must be the first transform", path, lineno);
        goto fail;
      }
      if (r->n_tr == 8) {
        rt_errf(err, errlen, "%s:%d: error: more than 8 transforms", path, lineno);
        goto fail;
      }
      r->tr[r->n_tr++] = t;
    }
  }
  fclose(f);
  return m;
fail:
  fclose(f);
  rt_weight_map_free(m);
  return NULL;
}

/* name against pattern with at most one "{i}" (digits): the file name in out
 * (hf with the digits put in for its "{i}"), or false. */
static bool match_rule(const char *pattern, const char *name, const char *hf, char *out, size_t outlen) {
  const char *w = strstr(pattern, "{i}");
  if (!w) {
    if (strcmp(pattern, name) != 0) return false;
    snprintf(out, outlen, "%s", hf);
    return true;
  }
  size_t pre = (size_t)(w - pattern), post = strlen(w + 3), n = strlen(name);
  if (n < pre + post + 1 || strncmp(name, pattern, pre) != 0 || strcmp(name + n - post, w + 3) != 0) return false;
  size_t nd = n - pre - post;
  if (strspn(name + pre, "0123456789") != nd) return false;
  const char *hw = strstr(hf, "{i}");
  snprintf(out, outlen, "%.*s%.*s%s", (int)(hw - hf), hf, (int)nd, name + pre, hw + 3);
  return true;
}

/* The rule for parameter name (NULL: none), its file name in out. */
static const wt_rule *find_rule(const rt_weight_map *m, const char *name, char *out, size_t outlen) {
  for (int i = 0; m && i < m->n; i++)
    if (m->rules[i].hf && match_rule(m->rules[i].tgc, name, m->rules[i].hf, out, outlen)) return &m->rules[i];
  if (!m) snprintf(out, outlen, "%s", name);
  return NULL;
}

/* find_rule, or -1 with the error when a map has no line for parameter p. */
static int rule_for(const rt_weight_map *m, const ir_value *p, char *hf, size_t n, const wt_rule **r, char *err,
                    size_t errlen) {
  *r = find_rule(m, p->name, hf, n);
  if (!m || *r) return 0;
  rt_errf(err, errlen, "%s: parameter '%s' has no line in the name map", m->path, p->name);
  return -1;
}

static void type_str(const ir_type *t, char *buf, size_t n) {
  int k = snprintf(buf, n, "%s[", ir_dtype_name(t->dtype));
  for (int d = 0; d < t->rank && k > 0 && (size_t)k < n; d++)
    k += snprintf(buf + k, n - (size_t)k, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
  if (k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, "]");
}

/* ---- the transforms, on host tensors (each returns a new tensor) ---- */

/* out[..., j, ...] = in[..., off + j, ...] along axis, or the reverse (put). */
static void copy_slab(const rt_tensor *whole, rt_tensor *part, int axis, int64_t off, bool put) {
  size_t es = ir_dtype_size(whole->type.dtype);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= whole->type.dims[d];
  for (int d = axis + 1; d < whole->type.rank; d++) inner *= whole->type.dims[d];
  int64_t wn = whole->type.dims[axis], pn = part->type.dims[axis];
  for (int64_t o = 0; o < outer; o++) {
    char *w = (char *)whole->data + ((o * wn + off) * inner) * es;
    char *p = (char *)part->data + (o * pn * inner) * es;
    size_t bytes = (size_t)(pn * inner) * es;
    if (put) memcpy(w, p, bytes);
    else memcpy(p, w, bytes);
  }
}

static rt_tensor *do_transpose(const rt_tensor *in) {
  ir_type t = in->type;
  t.dims[0] = in->type.dims[1], t.dims[1] = in->type.dims[0];
  rt_tensor *o = rt_tensor_new(&t);
  if (!o) IR_DIE("out of memory (o)");
  size_t es = ir_dtype_size(t.dtype);
  int64_t r = in->type.dims[0], c = in->type.dims[1];
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < c; j++) memcpy((char *)o->data + (j * r + i) * es, (char *)in->data + (i * c + j) * es, es);
  return o;
}

/* rows [H, 2, h] -> [H, h, 2] (inverse: [H, h, 2] -> [H, 2, h]). */
static rt_tensor *do_rope(const rt_tensor *in, int heads, bool inverse) {
  rt_tensor *o = rt_tensor_new(&in->type);
  if (!o) IR_DIE("out of memory (o)");
  int64_t rows = in->type.dims[0], h = rows / heads / 2, row_elems = rt_numel(&in->type) / rows;
  size_t rb = (size_t)row_elems * ir_dtype_size(in->type.dtype);
  for (int64_t H = 0; H < heads; H++)
    for (int64_t two = 0; two < 2; two++)
      for (int64_t j = 0; j < h; j++) {
        int64_t half = H * 2 * h + two * h + j, inter = H * 2 * h + j * 2 + two;
        memcpy((char *)o->data + (size_t)(inverse ? half : inter) * rb,
               (char *)in->data + (size_t)(inverse ? inter : half) * rb, rb);
      }
  return o;
}

static rt_tensor *do_cast(const rt_tensor *in, ir_dtype dt) {
  ir_type t = in->type;
  t.dtype = dt;
  rt_tensor *o = rt_tensor_new(&t);
  if (!o) IR_DIE("out of memory (o)");
  for (int64_t i = 0, n = rt_numel(&t); i < n; i++) rt_tensor_set(o, i, rt_tensor_get(in, i));
  return o;
}

static bool is_float(ir_dtype dt) {
  return dt == IR_DT_F64 || dt == IR_DT_F32 || dt == IR_DT_BF16 || dt == IR_DT_F16;
}

/* The parameter value from file tensor ft through rule r (NULL: as it is),
 * or NULL with err naming both names and both types. */
static rt_tensor *read_through(const wt_rule *r, const char *file, const char *hf, const rt_tensor *ft,
                               const ir_value *p, char *err, size_t errlen) {
  char ht[160], pt[160];
  type_str(&ft->type, ht, sizeof ht);
  type_str(&p->type, pt, sizeof pt);
  rt_tensor *cur = rt_tensor_new(&ft->type);
  if (!cur) IR_DIE("out of memory (cur)");
  if (ft->nbytes) memcpy(cur->data, ft->data, ft->nbytes);
  bool cast = false;
  for (int i = 0; r && i < r->n_tr; i++) {
    const wt_transform *t = &r->tr[i];
    rt_tensor *next = NULL;
    const char *why = NULL;
    if (t->kind == WT_TRANSPOSE) {
      if (cur->type.rank != 2) why = "transpose needs a 2-D tensor";
      else next = do_transpose(cur);
    } else if (t->kind == WT_ROPE) {
      if (cur->type.rank < 1 || cur->type.dims[0] % (2 * t->a) != 0) why = "rope(H) needs a first dim divisible by 2*H";
      else next = do_rope(cur, t->a, false);
    } else if (t->kind == WT_SPLIT) {
      if (t->c >= cur->type.rank || cur->type.dims[t->c] % t->b != 0)
        why = "split(K,N,AXIS) needs an axis whose size N divides";
      else {
        ir_type pt2 = cur->type;
        pt2.dims[t->c] /= t->b;
        next = rt_tensor_new(&pt2);
        if (!next) IR_DIE("out of memory (next)");
        copy_slab(cur, next, t->c, t->a * pt2.dims[t->c], false);
      }
    } else {
      cast = true;
      if (cur->type.dtype != p->type.dtype && is_float(cur->type.dtype) && is_float(p->type.dtype))
        next = do_cast(cur, p->type.dtype);
      else if (cur->type.dtype != p->type.dtype)
        why = "cast converts between float dtypes only";
    }
    if (why) {
      rt_path_errf(err, errlen, file, "tensor '%s' %s cannot be bound to parameter '%s' %s: %s (map line %d)", hf, ht,
                   p->name, pt, why, r->line);
      rt_tensor_free(cur);
      return NULL;
    }
    if (next) rt_tensor_free(cur), cur = next;
  }
  bool same_dtype = cur->type.dtype == p->type.dtype;
  bool same_shape = cur->type.rank == p->type.rank;
  for (int d = 0; same_shape && d < p->type.rank; d++) same_shape = cur->type.dims[d] == p->type.dims[d];
  if (!same_dtype || !same_shape) {
    char after[200] = "";
    if (r && r->n_tr) {
      char ct[140];
      type_str(&cur->type, ct, sizeof ct);
      snprintf(after, sizeof after, " (%s after the map's transforms)", ct);
    }
    rt_path_errf(err, errlen, file, "tensor '%s' %s does not fit parameter '%s' %s%s%s", hf, ht, p->name, pt, after,
                 !same_dtype && same_shape && !cast ? ": the dtypes differ (the map's 'cast' converts)" : "");
    rt_tensor_free(cur);
    return NULL;
  }
  return cur;
}

/* The safetensors file PATH names: itself, or PATH/model.safetensors of a folder. */
static char *weights_file(const char *path) {
  struct stat st;
  size_t n = strlen(path) + 32;
  char *f = malloc(n);
  if (!f) IR_DIE("out of memory (f)");
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(f, n, "%s/model.safetensors", path);
  else snprintf(f, n, "%s", path);
  return f;
}

static bool ignored(const rt_weight_map *m, const char *name, const char *const *skip) {
  for (int i = 0; m && i < m->n; i++)
    if (!m->rules[i].hf && fnmatch(m->rules[i].tgc, name, 0) == 0) return true;
  for (int i = 0; skip && skip[i]; i++)
    if (fnmatch(skip[i], name, 0) == 0) return true;
  return false;
}

/* Appends ", name" to a list (at most about 1 KB of it, then "..."). */
static void list_add(char *list, size_t n, const char *name) {
  size_t k = strlen(list);
  if (k > 900) {
    if (!strstr(list, "...")) snprintf(list + k, n - k, ", ...");
    return;
  }
  /* appended piece by piece (a name longer than the room left is cut there) */
  const char *parts[2] = {k ? ", " : "", name};
  for (int j = 0; j < 2 && k + 1 < n; j++) {
    size_t len = strlen(parts[j]);
    if (len > n - 1 - k) len = n - 1 - k;
    memcpy(list + k, parts[j], len);
    k += len;
    list[k] = 0;
  }
}

int rt_weights_load(const ir_graph *g, rt_tensor **params, const char *path, const rt_weight_map *m,
                    const char *const *skip, char *err, size_t errlen) {
  return rt_weights_load_values((const ir_value *const *)g->params, g->n_params, params, path, m, skip, err, errlen);
}

int rt_weights_load_values(const ir_value *const *pv, int np, rt_tensor **params, const char *path,
                           const rt_weight_map *m, const char *const *skip, char *err, size_t errlen) {
  char *file = weights_file(path);
  rt_safetensors *f = rt_safetensors_read(file, err, errlen);
  if (!f) {
    free(file);
    return -1;
  }
  int rc = 0, n = rt_safetensors_count(f);
  bool *used = calloc((size_t)n + 1, sizeof *used);
  char *missing = calloc(1, 1024), *unused = calloc(1, 1024);
  if (!used || !missing || !unused) IR_DIE("out of memory (used || !missing || !unused)");
  for (int i = 0; i < np && rc == 0; i++) {
    const ir_value *p = pv[i];
    char hf[512];
    const wt_rule *r = NULL;
    if ((rc = rule_for(m, p, hf, sizeof hf, &r, err, errlen)) != 0) break;
    int k = -1;
    for (int j = 0; j < n; j++)
      if (strcmp(rt_safetensors_name(f, j), hf) == 0) k = j;
    if (k < 0) {
      char item[1100];
      snprintf(item, sizeof item, "'%s' (for '%s')", hf, p->name);
      list_add(missing, 1024, item);
      continue;
    }
    used[k] = true;
    rt_tensor *v = read_through(r, file, hf, rt_safetensors_tensor(f, k), p, err, errlen);
    if (!v) {
      rc = -1;
      break;
    }
    rt_tensor_free(params[i]);
    params[i] = v;
  }
  if (rc == 0 && *missing) {
    rt_path_errf(err, errlen, file, "missing tensors: %s", missing);
    rc = -1;
  }
  for (int j = 0; rc == 0 && j < n; j++)
    if (!used[j] && !ignored(m, rt_safetensors_name(f, j), skip)) list_add(unused, 1024, rt_safetensors_name(f, j));
  if (rc == 0 && *unused) {
    rt_path_errf(err, errlen, file, "unused tensors (bound to no parameter; a map's '! GLOB' line leaves them): %s",
                 unused);
    rc = -1;
  }
  free(used);
  free(missing);
  free(unused);
  free(file);
  rt_safetensors_free(f);
  return rc;
}

/* ---- export ---- */

typedef struct {
  char *name;
  rt_tensor *t;
  int parts_seen, parts;
} wt_out;

int rt_weights_export(const ir_graph *g, rt_tensor *const *params, const rt_weight_map *m, const char *out,
                      char *err, size_t errlen) {
  wt_out *outs = calloc((size_t)g->n_params + 1, sizeof *outs);
  if (!outs) IR_DIE("out of memory (outs)");
  int n_out = 0, rc = 0;
  for (int i = 0; i < g->n_params && rc == 0; i++) {
    const ir_value *p = g->params[i];
    char hf[512];
    const wt_rule *r = NULL;
    if ((rc = rule_for(m, p, hf, sizeof hf, &r, err, errlen)) != 0) break;
    rt_tensor *cur = rt_tensor_new(&params[i]->type);
    if (!cur) IR_DIE("out of memory (cur)");
    if (cur->nbytes) memcpy(cur->data, params[i]->data, cur->nbytes);
    const wt_transform *split = NULL;
    for (int k = r ? r->n_tr - 1 : -1; k >= 0; k--) { /* the inverses, last first */
      const wt_transform *t = &r->tr[k];
      rt_tensor *next = NULL;
      if (t->kind == WT_TRANSPOSE && cur->type.rank == 2) next = do_transpose(cur);
      else if (t->kind == WT_ROPE && cur->type.rank >= 1 && cur->type.dims[0] % (2 * t->a) == 0)
        next = do_rope(cur, t->a, true);
      else if (t->kind == WT_SPLIT && t->c < cur->type.rank) split = t;
      else if (t->kind != WT_CAST) {
        rt_errf(err, errlen, "%s:%d: error: the map's transforms do not fit parameter '%s'", m->path, r->line, p->name);
        rt_tensor_free(cur);
        rc = -1;
        break;
      }
      if (next) rt_tensor_free(cur), cur = next;
    }
    if (rc) break;
    int j = 0;
    while (j < n_out && strcmp(outs[j].name, hf) != 0) j++;
    if (!split) {
      if (j < n_out) {
        rt_errf(err, errlen, "%s: two parameters map to tensor '%s' (the second: '%s')", m ? m->path : out, hf,
                p->name);
        rt_tensor_free(cur);
        rc = -1;
        break;
      }
      outs[n_out++] = (wt_out){strdup(hf), cur, 1, 1};
      continue;
    }
    if (j == n_out) {
      ir_type wt = cur->type;
      wt.dims[split->c] *= split->b;
      outs[n_out++] = (wt_out){strdup(hf), rt_tensor_new(&wt), 0, split->b};
      if (!outs[j].name || !outs[j].t) IR_DIE("out of memory (outs[j].name || !outs[j].t)");
    }
    bool fits = outs[j].t->type.rank == cur->type.rank && outs[j].t->type.dtype == cur->type.dtype;
    for (int d = 0; fits && d < cur->type.rank; d++)
      fits = outs[j].t->type.dims[d] == cur->type.dims[d] * (d == split->c ? split->b : 1);
    if (!fits) {
      char a[160], b[160];
      type_str(&outs[j].t->type, a, sizeof a);
      type_str(&cur->type, b, sizeof b);
      rt_errf(err, errlen, "%s:%d: error: parameter '%s' %s is not part %d of %d of tensor '%s' %s", m->path, r->line,
              p->name, b, split->a, split->b, hf, a);
      rt_tensor_free(cur);
      rc = -1;
      break;
    }
    copy_slab(outs[j].t, cur, split->c, split->a * cur->type.dims[split->c], true);
    outs[j].parts_seen++;
    rt_tensor_free(cur);
  }
  for (int j = 0; rc == 0 && j < n_out; j++)
    if (outs[j].parts_seen != outs[j].parts) { /* a split tensor some of whose parts no parameter gave */
      rt_errf(err, errlen, "%s: %d of the %d parts of tensor '%s' are parameters of the model", m->path,
              outs[j].parts_seen, outs[j].parts, outs[j].name);
      rc = -1;
    }
  rt_named_tensor *nt = calloc((size_t)n_out + 1, sizeof *nt);
  if (!nt) IR_DIE("out of memory (nt)");
  for (int j = 0; j < n_out; j++) nt[j] = (rt_named_tensor){outs[j].name, outs[j].t};
  rt_meta_entry meta[] = {{"format", "pt"}};
  if (rc == 0 && rt_safetensors_write(out, nt, n_out, meta, 1, err, errlen) != 0) rc = -1;
  for (int j = 0; j < n_out; j++) free(outs[j].name), rt_tensor_free(outs[j].t);
  free(nt);
  free(outs);
  return rc;
}
