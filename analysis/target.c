/* analysis/target.c — hardware targets for the cost reports: the built-in
 * table (one row per entry of targets.def), lookup by name, the parser of a
 * user's target file, and the two roofline formulas `tgc stats` applies to
 * every op, and the small formulas of a training-step estimate (closed-form
 * parameter count, training memory, MFU); declared in pass.h, section target.c.
 *
 * Target file, one `key = value` per line ('#' starts a comment, blank lines
 * are skipped):
 *   name       = my-gpu        any text without spaces (default: the path)
 *   flops_bf16 = 989e12        peak dense bf16/fp16 FLOP/s   (required, 1e6..1e18)
 *   flops_fp32 = 494.7e12      peak fp32/TF32 FLOP/s         (required, 1e6..1e18)
 *   bandwidth  = 3.35e12       memory bandwidth, bytes/s     (required, 1e6..1e14)
 *   memory     = 80e9          memory capacity, bytes        (optional, 0..1e15)
 *   launch     = 4e-6          seconds per device call at least (optional, 0..1e-3;
 *                              default 0: no launch floor)
 * The ranges are physical: a figure outside them is a typo, and would make
 * the roofline's times and MFU inf or nan.
 * Every bad line is reported (path:line:col with the line and a caret) and
 * parsing goes on, so one run shows all the mistakes; a missing required key
 * is reported at the end.
 */
#include <string.h>

#include "analysis.h"

static const pass_target builtin_targets[] = {
#define TARGET(id, nm, bf16, fp32, bw, mem, launch, src) {nm, bf16, fp32, bw, mem, src, launch},
#include "targets.def"
#undef TARGET
};
enum { N_TARGETS = (int)(sizeof builtin_targets / sizeof builtin_targets[0]) };

int pass_target_count(void) { return N_TARGETS; }

const pass_target *pass_target_at(int i) { return i >= 0 && i < N_TARGETS ? &builtin_targets[i] : NULL; }

const pass_target *pass_target_lookup(const char *name) {
  for (int i = 0; name && i < N_TARGETS; i++)
    if (strcmp(builtin_targets[i].name, name) == 0) return &builtin_targets[i];
  return NULL;
}

double pass_target_peak(const pass_target *t, size_t elem_bytes) {
  return elem_bytes == 2 ? t->flops_bf16 : t->flops_fp32;
}

double pass_roofline_seconds(double flops, double bytes, double peak, double bandwidth) {
  double c = peak > 0 ? flops / peak : 0, m = bandwidth > 0 ? bytes / bandwidth : 0;
  return c > m ? c : m;
}

bool pass_roofline_compute_bound(double flops, double bytes, double peak, double bandwidth) {
  if (flops <= 0) return false;
  if (peak <= 0 || bandwidth <= 0) return false;
  return flops / peak >= bytes / bandwidth;
}

/* ---- the target file (read by keyvalue.c) ---- */
enum { K_NAME, K_BF16, K_FP32, K_BW, K_MEM, K_LAUNCH, N_KEYS };
static const char *const key_names[N_KEYS] = {"name", "flops_bf16", "flops_fp32", "bandwidth", "memory", "launch"};

static int set_key(void *ctx, int key, const char *v, size_t n, ir_loc loc, ir_diag *d) {
  pass_target *t = ctx;
  if (key == K_NAME) return pass_kv_word(v, n, loc, "a target name", t->name, sizeof t->name, d);
  double x;
  if (pass_kv_number(v, n, loc, &x, d) != 0) return -1;
  /* physical ranges: outside them a figure is a typo, and the roofline's
   * times and MFU would be inf or nan */
  static const struct { double lo, hi; const char *text; } range[N_KEYS] = {
      [K_BF16] = {1e6, 1e18, "from 1e6 to 1e18 FLOP/s"}, [K_FP32] = {1e6, 1e18, "from 1e6 to 1e18 FLOP/s"},
      [K_BW] = {1e6, 1e14, "from 1e6 to 1e14 bytes/s"},   [K_MEM] = {0, 1e15, "from 0 to 1e15 bytes"},
      [K_LAUNCH] = {0, 1e-3, "from 0 to 1e-3 seconds"}};
  if (!(x >= range[key].lo && x <= range[key].hi)) {
    ir_error(d, loc, "%s must be %s, got %.*s", key_names[key], range[key].text, (int)n, v);
    return -1;
  }
  double *field[N_KEYS] = {NULL, &t->flops_bf16, &t->flops_fp32, &t->bandwidth, &t->memory, &t->launch};
  *field[key] = x;
  return 0;
}

int pass_target_parse(const char *path, const char *text, size_t len, pass_target *t, ir_diag *d) {
  memset(t, 0, sizeof *t);
  if (!path) path = "<target>";
  t->source = path;
  static const pass_kv_spec spec = {"a target file", key_names, N_KEYS, set_key};
  int seen[N_KEYS];
  int errors = pass_kv_read(&spec, path, text, len, seen, t, d);
  for (int k = K_BF16; k <= K_BW; k++)
    if (seen[k] <= 0) { /* not given, or given a bad value: still missing */
      ir_error(d, (ir_loc){path, 0, 0}, "missing '%s = ...' (a target file needs flops_bf16, flops_fp32 and bandwidth)",
               key_names[k]);
      errors++;
    }
  if (seen[K_NAME] <= 0) {
    size_t n = strlen(path);
    if (n >= sizeof t->name) path += n - (sizeof t->name - 1);
    snprintf(t->name, sizeof t->name, "%s", path);
  }
  return errors ? -1 : 0;
}

/* ---- training-step estimates ---- */
double pass_closed_form_params(double layers, double width, double vocab) {
  return 12 * layers * width * width + 2 * vocab * width;
}

pass_train_memory pass_training_memory(double n, size_t elem_bytes, int opt_states, double activations, bool trains) {
  pass_train_memory m = {0};
  m.params = n * (double)elem_bytes;
  if (trains) {
    m.grads = n * (double)elem_bytes;
    m.optimizer = n * 4.0 * (double)(opt_states + (elem_bytes == 2 ? 1 : 0));
  }
  m.activations = activations;
  m.total = m.params + m.grads + m.optimizer + m.activations;
  return m;
}

double pass_mfu(double n, double tokens, double step_seconds, double peak) {
  if (!(step_seconds > 0) || !(peak > 0) || !(n > 0) || !(tokens > 0)) return 0;
  return 6 * n * tokens / (step_seconds * peak);
}

/* ---- the roofline of one node, as the planner and the layout search cost it ---- */

/* The efficiencies (docs/plan.md: sources and calibration). */
static const pass_plan_constants default_k = {
    .gemm_eff = 0.58,     /* calibrated by bench/plan_calibrate.sh on two rows of Narayanan et al. 2021 (docs/plan.md) */
    .gemm_half = 16,      /* calibrated with it */
    .attn_eff = 0.50,     /* FlashAttention-2 (Dao 2023): 50-73% of A100 peak forward, less backward */
    .mem_eff = 0.85,      /* assumed: a streaming kernel's share of the HBM peak */
    .nccl_base_lat = 8.4e-6, /* NCCL tuning.cc baseLat, ring, Simple protocol */
};

pass_plan_constants pass_plan_default_constants(void) { return default_k; }

void pass_gemm_dims(const ir_node *n, double mnk[4]) {
  mnk[0] = mnk[1] = mnk[2] = 0, mnk[3] = 1;
  if ((n->op != IR_OP_MATMUL && n->op != IR_OP_FUSED_MATMUL) || n->n_in < 2) return;
  const ir_type *a = &n->in[0]->type, *o = &n->out[0]->type;
  if (a->rank < 1 || o->rank < 1) return;
  bool ta = ir_node_attr_int(n, "transpose_a", 0) != 0 && a->rank >= 2;
  mnk[2] = (double)a->dims[a->rank - (ta ? 2 : 1)];
  mnk[1] = (double)o->dims[o->rank - 1];
  mnk[0] = o->rank >= 2 ? (double)o->dims[o->rank - 2] : 1;
  for (int i = 0; i < o->rank - 2; i++) mnk[3] *= (double)o->dims[i];
}

double pass_node_roofline_seconds(const pass_plan_constants *k, const pass_target *dev, size_t elem, ir_op op, bool causal,
                                  double flops, double bytes, const double mnk[4]) {
  double peak = pass_target_peak(dev, elem), bw = dev->bandwidth * k->mem_eff;
  double tc;
  switch (op) {
  case IR_OP_RESHAPE: case IR_OP_CONST: case IR_OP_IOTA: case IR_OP_GRAD: return 0; /* views and constants */
  case IR_OP_MATMUL: case IR_OP_FUSED_MATMUL: {
    const double *d = mnk;
    double eff = k->gemm_eff;
    for (int i = 0; i < 3; i++) eff *= d[i] / (d[i] + k->gemm_half);
    tc = flops / (peak * eff);
    break;
  }
  case IR_OP_ATTENTION: case IR_OP_ATTENTION_GRAD:
    tc = flops * (causal ? 0.5 : 1.0) / (peak * k->attn_eff);
    break;
  case IR_OP_EINSUM: tc = flops / (peak * k->gemm_eff); break;
  default: tc = flops / peak; break;
  }
  double tm = bytes / bw;
  return tc > tm ? tc : tm;
}

double pass_plan_node_seconds(const ir_node *n, const pass_target *dev, double flops, double bytes) {
  double mnk[4];
  pass_gemm_dims(n, mnk);
  ir_dtype dt = n->n_out ? n->out[0]->type.dtype : IR_DT_F32;
  if (!ir_dtype_is_float(dt) && n->n_in) dt = n->in[0]->type.dtype;
  return pass_node_roofline_seconds(&default_k, dev, ir_dtype_size(dt), n->op, ir_node_attr_int(n, "causal", 0) != 0, flops,
                                    bytes, mnk);
}
