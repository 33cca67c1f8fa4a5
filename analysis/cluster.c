/* analysis/cluster.c — the clusters `tgc plan` plans for: the built-in node
 * kinds (one row per entry of clusters.def), `NAME:NODES` specs, `--gpus N`,
 * and the parser of a user's cluster file; declared in pass.h, section
 * "planner".
 *
 * A cluster is N identical nodes of G GPUs. Inside a node GPUs talk over
 * NVLink (intra_bw per direction, intra_lat per ring step); between nodes
 * over the network (inter_bw per GPU per direction, inter_lat per step). The
 * device of every GPU is a target of targets.def.
 *
 * Cluster file, one `key = value` per line ('#' comments, blank lines skipped;
 * read by keyvalue.c, so every bad line is reported as path:line:col):
 *   name            = my-cluster   one word (default: the path)
 *   gpus_per_node   = 8            GPUs per node, 1..1024              (required)
 *   nodes           = 16           nodes, 1..1000000 (or give --gpus N)
 *   target          = a100-80g     the device: a target of targets.def (required)
 *   intra_bandwidth = 300e9        bytes/s per GPU per direction inside a node (required, 1e6..1e13)
 *   inter_bandwidth = 25e9         bytes/s per GPU per direction across nodes  (required, 1e6..1e13)
 *   intra_latency   = 3.4e-6       seconds per ring step inside a node (default 3.4e-6; 0..1)
 *   inter_latency   = 9.6e-6       seconds per ring step across nodes  (default 9.6e-6; 0..1)
 *   reserve         = 2e9          bytes per GPU left free (default 0, at most 1e15; less than the
 *                                  device's memory)
 * The ranges are physical (1 MB/s to 10 TB/s, at most a second a step): a
 * figure outside them is a typo, and would make predicted times inf or nan.
 */
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

static pass_cluster builtin_clusters[] = {
#define CLUSTER(id, nm, gpn, tgt, ibw, ilat, xbw, xlat, res, src) \
  {nm, gpn, 1, gpn, {{0}, 0, 0, 0, 0, NULL, 0}, ibw, ilat, xbw, xlat, res, src, tgt},
#include "clusters.def"
#undef CLUSTER
};
enum { N_CLUSTERS = (int)(sizeof builtin_clusters / sizeof builtin_clusters[0]) };

/* The device rows are filled from targets.def on first use (a static
 * initializer cannot copy another table's row). */
static void fill_devices(void) {
  for (int i = 0; i < N_CLUSTERS; i++)
    if (!builtin_clusters[i].device.source) {
      const pass_target *t = pass_target_lookup(builtin_clusters[i].target_name);
      if (!t) {
        fprintf(stderr, "tgc: internal error: clusters.def: %s names unknown target %s\n", builtin_clusters[i].name,
                builtin_clusters[i].target_name);
        abort();
      }
      builtin_clusters[i].device = *t;
    }
}

int pass_cluster_count(void) { return N_CLUSTERS; }

const pass_cluster *pass_cluster_at(int i) {
  fill_devices();
  return i >= 0 && i < N_CLUSTERS ? &builtin_clusters[i] : NULL;
}

const pass_cluster *pass_cluster_lookup(const char *name) {
  fill_devices();
  for (int i = 0; name && i < N_CLUSTERS; i++)
    if (strcmp(builtin_clusters[i].name, name) == 0) return &builtin_clusters[i];
  return NULL;
}

void pass_cluster_names(char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < N_CLUSTERS && len < cap; i++) {
    int w = snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", builtin_clusters[i].name);
    if (w < 0) break;
    len += (size_t)w;
  }
}

/* A decimal integer in [lo, hi], the whole string. */
static bool parse_count(const char *s, size_t n, long lo, long hi, long *out) {
  if (n == 0 || n > 9) return false;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

int pass_cluster_from_spec(const char *spec, pass_cluster *c, ir_diag *d) {
  const char *colon = strchr(spec, ':');
  size_t nlen = colon ? (size_t)(colon - spec) : strlen(spec);
  char name[64];
  if (nlen >= sizeof name) nlen = sizeof name - 1;
  memcpy(name, spec, nlen);
  name[nlen] = 0;
  const pass_cluster *b = pass_cluster_lookup(name);
  if (!b) {
    char known[256];
    pass_cluster_names(known, sizeof known);
    ir_error_plain(d, "--cluster %s: unknown cluster '%s' (known: %s; or --cluster-file F)", spec, name, known);
    return -1;
  }
  *c = *b;
  c->nodes = 0; /* not given: --gpus decides */
  c->gpus = 0;
  if (colon) {
    long nodes;
    if (!parse_count(colon + 1, strlen(colon + 1), 1, PASS_CLUSTER_MAX_NODES, &nodes)) {
      ir_error_plain(d, "--cluster %s: NODES must be a whole number of nodes from 1 to %d, got '%s'", spec,
                     PASS_CLUSTER_MAX_NODES, colon + 1);
      return -1;
    }
    c->nodes = (int)nodes;
    c->gpus = c->nodes * c->gpus_per_node;
  }
  return 0;
}

int pass_cluster_set_gpus(pass_cluster *c, const char *gpus, ir_diag *d) {
  long n;
  if (!parse_count(gpus, strlen(gpus), 1, (long)PASS_CLUSTER_MAX_NODES * c->gpus_per_node, &n)) {
    ir_error_plain(d, "--gpus %s: expected a whole number of GPUs from 1 to %ld", gpus,
                   (long)PASS_CLUSTER_MAX_NODES * c->gpus_per_node);
    return -1;
  }
  if (n > c->gpus_per_node && n % c->gpus_per_node != 0) {
    ir_error_plain(d, "--gpus %ld: not a whole number of %s nodes (%d GPUs each); give a multiple of %d, or at most %d",
                   n, c->name, c->gpus_per_node, c->gpus_per_node, c->gpus_per_node);
    return -1;
  }
  if (c->gpus && c->gpus != n) {
    ir_error_plain(d, "--gpus %ld and --cluster %s:%d (%d GPUs) disagree: give one", n, c->name, c->nodes, c->gpus);
    return -1;
  }
  c->gpus = (int)n;
  c->nodes = n <= c->gpus_per_node ? 1 : (int)(n / c->gpus_per_node);
  if (n < c->gpus_per_node) c->gpus_per_node = (int)n; /* a part of one node */
  return 0;
}

/* ---- the cluster file ---- */
enum { K_NAME, K_GPN, K_NODES, K_TARGET, K_INTRA_BW, K_INTER_BW, K_INTRA_LAT, K_INTER_LAT, K_RESERVE, N_KEYS };
static const char *const key_names[N_KEYS] = {"name",           "gpus_per_node",   "nodes",
                                              "target",         "intra_bandwidth", "inter_bandwidth",
                                              "intra_latency",  "inter_latency",   "reserve"};

static int set_key(void *ctx, int key, const char *v, size_t n, ir_loc loc, ir_diag *d) {
  pass_cluster *c = ctx;
  if (key == K_NAME) return pass_kv_word(v, n, loc, "a cluster name", c->name, sizeof c->name, d);
  if (key == K_TARGET) {
    char tn[64];
    if (pass_kv_word(v, n, loc, "a target name", tn, sizeof tn, d) != 0) return -1;
    const pass_target *t = pass_target_lookup(tn);
    if (!t) {
      char known[512] = "";
      for (int i = 0; i < pass_target_count(); i++) {
        if (i) strncat(known, ", ", sizeof known - strlen(known) - 1);
        strncat(known, pass_target_at(i)->name, sizeof known - strlen(known) - 1);
      }
      ir_error(d, loc, "unknown target '%s' (known: %s)", tn, known);
      return -1;
    }
    c->device = *t;
    return 0;
  }
  if (key == K_GPN || key == K_NODES) {
    long hi = key == K_GPN ? 1024 : PASS_CLUSTER_MAX_NODES, x;
    if (!parse_count(v, n, 1, hi, &x)) {
      ir_error(d, loc, "%s must be a whole number from 1 to %ld, got %.*s", key_names[key], hi, (int)n, v);
      return -1;
    }
    *(key == K_GPN ? &c->gpus_per_node : &c->nodes) = (int)x;
    return 0;
  }
  double x;
  if (pass_kv_number(v, n, loc, &x, d) != 0) return -1;
  /* physical ranges: a figure outside them is a typo, and would make the
   * planner's times inf or nan (bytes / 1e-300) */
  static const struct { double lo, hi; const char *text; } range[N_KEYS] = {
      [K_INTRA_BW] = {1e6, 1e13, "from 1e6 to 1e13 bytes/s"}, [K_INTER_BW] = {1e6, 1e13, "from 1e6 to 1e13 bytes/s"},
      [K_INTRA_LAT] = {0, 1, "from 0 to 1 s"},                [K_INTER_LAT] = {0, 1, "from 0 to 1 s"},
      [K_RESERVE] = {0, 1e15, "from 0 to 1e15 bytes"}};
  if (!(x >= range[key].lo && x <= range[key].hi)) {
    ir_error(d, loc, "%s must be %s, got %.*s", key_names[key], range[key].text, (int)n, v);
    return -1;
  }
  double *field[N_KEYS] = {[K_INTRA_BW] = &c->intra_bw, [K_INTER_BW] = &c->inter_bw, [K_INTRA_LAT] = &c->intra_lat,
                           [K_INTER_LAT] = &c->inter_lat, [K_RESERVE] = &c->reserve};
  *field[key] = x;
  return 0;
}

int pass_cluster_parse(const char *path, const char *text, size_t len, pass_cluster *c, ir_diag *d) {
  memset(c, 0, sizeof *c);
  if (!path) path = "<cluster>";
  c->source = path;
  c->intra_lat = 3.4e-6; /* NCCL tuning.cc hwLat, as clusters.def */
  c->inter_lat = 9.6e-6;
  static const pass_kv_spec spec = {"a cluster file", key_names, N_KEYS, set_key};
  int seen[N_KEYS];
  int errors = pass_kv_read(&spec, path, text, len, seen, c, d);
  static const int required[] = {K_GPN, K_TARGET, K_INTRA_BW, K_INTER_BW};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
    if (!seen[required[i]]) {
      ir_error(d, (ir_loc){path, 0, 0},
               "missing '%s = ...' (a cluster file needs gpus_per_node, target, intra_bandwidth and inter_bandwidth)",
               key_names[required[i]]);
      errors++;
    }
  if (seen[K_RESERVE] > 0 && seen[K_TARGET] > 0 && c->device.memory > 0 && c->reserve >= c->device.memory) {
    ir_error(d, (ir_loc){path, seen[K_RESERVE], 1}, "reserve (%.4g bytes) leaves nothing of the %s's %.4g bytes",
             c->reserve, c->device.name, c->device.memory);
    errors++;
  }
  if (seen[K_TARGET] > 0 && !(c->device.memory > 0)) {
    ir_error(d, (ir_loc){path, seen[K_TARGET], 1}, "target '%s' gives no memory capacity: the planner needs one",
             c->device.name);
    errors++;
  }
  if (!seen[K_NAME]) {
    size_t n = strlen(path);
    const char *p = n >= sizeof c->name ? path + n - (sizeof c->name - 1) : path;
    snprintf(c->name, sizeof c->name, "%s", p);
  }
  if (seen[K_NODES] > 0) c->gpus = c->nodes * c->gpus_per_node;
  else c->nodes = 0; /* not given: --gpus decides */
  return errors ? -1 : 0;
}
