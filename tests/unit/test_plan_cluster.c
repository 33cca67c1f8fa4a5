/* tests/unit/test_plan_cluster.c — the clusters of the planner
 * (analysis/cluster.c, clusters.def, keyvalue.c):
 *  - the built-in figures, each as its source quotes it: dgx-a100 NVLink3
 *    600 GB/s bidirectional = 300e9 bytes/s per direction, 8 x 200 Gb/s HDR
 *    = 25e9 bytes/s per GPU per direction; dgx-h100 NVLink4 900 GB/s
 *    bidirectional = 450e9 per direction, 400 Gb/s NDR = 50e9; both 8 GPUs a
 *    node; the device rows are those of targets.def;
 *  - NAME:NODES, --gpus N and their errors (unknown cluster, bad NODES, a
 *    GPU count that is not whole nodes, both disagreeing);
 *  - the cluster file: a good file with defaults, and every kind of bad line
 *    reported as path:line:col, the count of errors exact.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan.h"

/* Runs fn with a diagnostics sink; the messages land in msgs. */
#define WITH_DIAG(msgs, call)                            \
  do {                                                   \
    FILE *f_ = tmpfile();                                \
    ir_diag *d = ir_diag_new(f_ ? f_ : stderr);          \
    call;                                                \
    ir_diag_free(d);                                     \
    (msgs)[0] = 0;                                       \
    if (f_) {                                            \
      rewind(f_);                                        \
      size_t n_ = fread((msgs), 1, sizeof(msgs) - 1, f_); \
      (msgs)[n_] = 0;                                    \
      fclose(f_);                                        \
    }                                                    \
  } while (0)

static void test_builtins(void) {
  CHECK_EQ_INT(pass_cluster_count(), 3);
  const pass_cluster *a = pass_cluster_lookup("dgx-a100"), *h = pass_cluster_lookup("dgx-h100");
  CHECK(a && h);
  if (!a || !h) return;
  CHECK_EQ_INT(a->gpus_per_node, 8);
  CHECK(a->intra_bw == 600e9 / 2);
  CHECK(a->inter_bw == 200e9 / 8); /* 200 Gb/s is 25 GB/s */
  CHECK(a->intra_lat == 3.4e-6 && a->inter_lat == 9.6e-6);
  CHECK_STR(a->device.name, "a100-80g");
  CHECK(a->device.flops_bf16 == 312e12 && a->device.memory == 80e9);
  CHECK_EQ_INT(h->gpus_per_node, 8);
  CHECK(h->intra_bw == 900e9 / 2);
  CHECK(h->inter_bw == 400e9 / 8);
  CHECK_STR(h->device.name, "h100-sxm");
  CHECK(pass_cluster_at(0) == a && pass_cluster_at(3) == NULL && pass_cluster_lookup("dgx-b200") == NULL);
  char names[128];
  pass_cluster_names(names, sizeof names);
  CHECK_STR(names, "dgx-a100, dgx-h100, cpu-host");
}

static void test_specs(void) {
  pass_cluster c;
  char msgs[2048];
  int rc;
  WITH_DIAG(msgs, rc = pass_cluster_from_spec("dgx-a100:128", &c, d));
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(c.nodes, 128);
  CHECK_EQ_INT(c.gpus, 1024);
  WITH_DIAG(msgs, rc = pass_cluster_from_spec("dgx-b200:4", &c, d));
  CHECK_EQ_INT(rc, -1);
  CHECK_STR(msgs, "tgc: error: --cluster dgx-b200:4: unknown cluster 'dgx-b200' (known: dgx-a100, dgx-h100, cpu-host; or "
                  "--cluster-file F)\n");
  const char *bad[] = {"dgx-a100:0", "dgx-a100:", "dgx-a100:x", "dgx-a100:-1", "dgx-a100:1000001", "dgx-a100:2.5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    WITH_DIAG(msgs, rc = pass_cluster_from_spec(bad[i], &c, d));
    CHECK_EQ_INT(rc, -1);
    CHECK(strstr(msgs, "NODES must be a whole number of nodes from 1 to 1000000") != NULL);
  }
  /* --gpus: whole nodes, or a part of one node */
  WITH_DIAG(msgs, rc = pass_cluster_from_spec("dgx-h100", &c, d));
  CHECK(rc == 0 && c.gpus == 0);
  WITH_DIAG(msgs, rc = pass_cluster_set_gpus(&c, "64", d));
  CHECK(rc == 0 && c.gpus == 64 && c.nodes == 8 && c.gpus_per_node == 8);
  WITH_DIAG(msgs, rc = pass_cluster_from_spec("dgx-h100", &c, d));
  WITH_DIAG(msgs, rc = pass_cluster_set_gpus(&c, "4", d));
  CHECK(rc == 0 && c.gpus == 4 && c.nodes == 1 && c.gpus_per_node == 4);
  WITH_DIAG(msgs, rc = pass_cluster_from_spec("dgx-h100", &c, d));
  WITH_DIAG(msgs, rc = pass_cluster_set_gpus(&c, "12", d));
  CHECK_EQ_INT(rc, -1);
  CHECK_STR(msgs, "tgc: error: --gpus 12: not a whole number of dgx-h100 nodes (8 GPUs each); give a multiple of 8, "
                  "or at most 8\n");
  WITH_DIAG(msgs, rc = pass_cluster_from_spec("dgx-a100:2", &c, d));
  WITH_DIAG(msgs, rc = pass_cluster_set_gpus(&c, "32", d));
  CHECK_EQ_INT(rc, -1);
  CHECK_STR(msgs, "tgc: error: --gpus 32 and --cluster dgx-a100:2 (16 GPUs) disagree: give one\n");
  WITH_DIAG(msgs, rc = pass_cluster_set_gpus(&c, "0", d));
  CHECK_EQ_INT(rc, -1);
}

/* The cluster file text parsed; 0, or minus the number of errors. */
#define PARSE(text, c, msgs) parse_file(text, c, msgs, sizeof(msgs))
static int parse_file(const char *text, pass_cluster *c, char *out, size_t cap) {
  char msgs[8192];
  int rc, errors;
  WITH_DIAG(msgs, rc = pass_cluster_parse("my.cluster", text, strlen(text), c, d); errors = ir_diag_errors(d));
  snprintf(out, cap, "%s", msgs);
  return rc < 0 ? -errors : rc;
}

static void test_file(void) {
  pass_cluster c;
  char msgs[8192];
  int rc = PARSE("# a small one\nname = lab\ngpus_per_node = 4\nnodes = 2\ntarget = h100-sxm\n"
                 "intra_bandwidth = 450e9   # NVLink\ninter_bandwidth=12.5e9\nreserve = 1e9\n",
                 &c, msgs);
  CHECK_EQ_INT(rc, 0);
  CHECK_STR(c.name, "lab");
  CHECK(c.gpus_per_node == 4 && c.nodes == 2 && c.gpus == 8);
  CHECK_STR(c.device.name, "h100-sxm");
  CHECK(c.intra_bw == 450e9 && c.inter_bw == 12.5e9 && c.reserve == 1e9);
  CHECK(c.intra_lat == 3.4e-6 && c.inter_lat == 9.6e-6); /* the defaults */
  CHECK_STR(c.source, "my.cluster");
  /* without nodes the size is left to --gpus; the name defaults to the path */
  rc = PARSE("gpus_per_node = 8\ntarget = a100-80g\nintra_bandwidth = 1e9\ninter_bandwidth = 1e9\n", &c, msgs);
  CHECK(rc == 0 && c.nodes == 0 && c.gpus == 0);
  CHECK_STR(c.name, "my.cluster");
  rc = PARSE("gpus_per_node = 0\nnodes = x\ntarget = b200\nintra_bandwidth = -1\ninter_bandwidth = fast\n"
             "intra_latency = -2\nspeed = 3\ngpus_per_node = 8\n= 1\nname = two words\n",
             &c, msgs);
  printf("%s", msgs);
  CHECK(strstr(msgs, "my.cluster:1:17: error: gpus_per_node must be a whole number from 1 to 1024, got 0") != NULL);
  CHECK(strstr(msgs, "my.cluster:2:9: error: nodes must be a whole number from 1 to 1000000, got x") != NULL);
  CHECK(strstr(msgs, "my.cluster:3:10: error: unknown target 'b200' (known: a100-80g, a100-40g, h100-sxm, h200, v100, "
                     "cpu-local)") != NULL);
  CHECK(strstr(msgs, "my.cluster:4:19: error: intra_bandwidth must be from 1e6 to 1e13 bytes/s, got -1") != NULL);
  CHECK(strstr(msgs, "my.cluster:5:19: error: 'fast' is not a number (write e.g. 312e12)") != NULL);
  CHECK(strstr(msgs, "my.cluster:6:17: error: intra_latency must be from 0 to 1 s, got -2") != NULL);
  CHECK(strstr(msgs, "my.cluster:7:1: error: unknown key 'speed' (keys: name, gpus_per_node, nodes, target, "
                     "intra_bandwidth, inter_bandwidth, intra_latency, inter_latency, reserve)") != NULL);
  CHECK(strstr(msgs, "my.cluster:9:1: error: expected 'key = value'") != NULL);
  CHECK(strstr(msgs, "my.cluster:10:11: error: a cluster name is one word of printable characters") != NULL);
  /* line 8 sets gpus_per_node after line 1 failed to: not "given twice" */
  CHECK(strstr(msgs, "given twice") == NULL);
  /* target, intra_bandwidth and inter_bandwidth were given, wrongly: reported there, not as missing */
  CHECK(strstr(msgs, "missing") == NULL);
  CHECK_EQ_INT(rc, -9);
  rc = PARSE("gpus_per_node = 8\ngpus_per_node = 4\ntarget = a100-80g\nintra_bandwidth = 1e9\ninter_bandwidth = 1e9\n"
             "reserve = 80e9\n",
             &c, msgs);
  CHECK_EQ_INT(rc, -2);
  CHECK(strstr(msgs, "my.cluster:2:1: error: 'gpus_per_node' given twice (first on line 1)") != NULL);
  CHECK(strstr(msgs, "my.cluster:6:1: error: reserve (8e+10 bytes) leaves nothing of the a100-80g's 8e+10 bytes") !=
        NULL);
  rc = PARSE("target = cpu-local\n", &c, msgs);
  CHECK_EQ_INT(rc, -3); /* three required keys missing; cpu-local has a memory figure */
  CHECK(strstr(msgs, "my.cluster: error: missing 'gpus_per_node = ...' (a cluster file needs gpus_per_node, target, "
                     "intra_bandwidth and inter_bandwidth)") != NULL);
}

int main(void) {
  test_builtins();
  test_specs();
  test_file();
  return check_done();
}
