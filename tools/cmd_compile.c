/* tools/cmd_compile.c — `tgc compile`: a model's graphs lowered to CUDA C
 * (codegen's cg_lower), compiled with NVRTC for an arch, and written out
 * with a manifest — no GPU needed, and NVRTC only for PTX and the
 * registers / spills of the report.
 *
 * The graphs are the forward graph (the default pipeline, as `tgc run`
 * runs it) or, with --train, the training program's step and update graphs
 * (pass_build_train, as `tgc train` builds them). --dtype bf16|f16 makes
 * them mixed precision (pass_mixed_precision: f32 master weights). Each is
 * planned (pass_memplan, no donation), lowered and written as
 * DIR/NAME_GRAPH.cu; compiled in parts as the cuda backend compiles it
 * (codegen/parts.c: the same cache entries), the PTX of each part as
 * DIR/NAME_GRAPH.ARCH.ptx (one part) or DIR/NAME_GRAPH.pK.ARCH.ptx; the manifest,
 * DIR/manifest.json, lists for every graph its kernels (name, IR value, op,
 * .tg file and line, grid, block, shared memory, registers, spills, stack)
 * and its cuBLASLt products (shape, transposes, batch, epilogue), the
 * launches, and the bytes its steps read and write (cg_step.bytes, the cost
 * model's count per node; views move nothing).
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen.h"
#include "rt_cuda.h"
#include "tool.h"

extern const char *const tool_common_help;

static const char *const compile_help =
    "usage: tgc compile FILE [--target cuda] [--arch sm_80|sm_90] -o DIR [--emit cu,ptx,report]\n"
    "                   [--train [--optimizer NAME] [--micro-batches K] [--clip NORM]] [--dtype bf16|f16]\n"
    "                   [model options]\n"
    "\n"
    "Lowers FILE to CUDA C kernels and cuBLASLt products (what --backend cuda runs), compiles the\n"
    "kernels with NVRTC for the architecture, and writes into DIR (created if needed):\n"
    "  NAME_GRAPH.cu        every kernel of a graph, each named after the IR value it computes,\n"
    "                       with the IR line and '// from FILE:LINE' above it\n"
    "  NAME_GRAPH.ARCH.ptx  their PTX (needs libnvrtc, not a GPU); a program of more than 16\n"
    "                       kernels compiles in parts (one NVRTC program each, on TGC_COMPILE_THREADS\n"
    "                       threads) with one NAME_GRAPH.pK.ARCH.ptx per part K\n"
    "  manifest.json        per graph: its kernels (IR value, .tg line, grid, block, shared\n"
    "                       memory, and from ptxas registers, spills, stack), its cuBLASLt\n"
    "                       products (m, n, k, batch, transposes, epilogue), arena and workspace\n"
    "GRAPH is main (the forward graph), or with --train step (forward and backward) and update\n"
    "(the optimizer).\n"
    "\n"
    "  --target cuda        what to compile for (cuda is the one target)\n"
    "  --arch ARCH          sm_80 (default) or sm_90, or any arch the NVRTC found supports\n"
    "  -o DIR               where to write\n"
    "  --emit LIST          cu, ptx, report (default all three); without ptx and report NVRTC\n"
    "                       is not needed; a report without NVRTC has no registers or spills\n"
    "  --train              the training program's graphs instead of the forward graph\n"
    "  --optimizer NAME     sgd, momentum, adam (default), adamw; --micro-batches K; --clip NORM\n"
    "  --dtype bf16|f16     mixed precision, as tgc train --dtype\n";

typedef struct {
  const char *out, *arch;
  bool emit_cu, emit_ptx, emit_report;
  bool train;
  int optimizer, micro;
  double clip;
  ir_dtype dtype;         /* IR_DT_F32: the model's */
} compile_opts;

static int parse_emit(compile_opts *c, const char *v, ir_diag *d) {
  c->emit_cu = c->emit_ptx = c->emit_report = false;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", v);
  for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
    if (!strcmp(w, "cu")) c->emit_cu = true;
    else if (!strcmp(w, "ptx")) c->emit_ptx = true;
    else if (!strcmp(w, "report")) c->emit_report = true;
    else {
      ir_error_plain(d, "--emit %s: '%s' is not one of cu, ptx, report", v, w);
      return -1;
    }
  }
  return 0;
}

static int write_file(const char *path, const void *data, size_t n, ir_diag *d) {
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(data, 1, n, f) == n;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) ir_error_plain(d, "cannot write '%s': %s", path, strerror(errno));
  return ok ? 0 : -1;
}

/* The model's base name: "examples/gpt.tg" -> "gpt". */
static void base_name(const char *file, char *buf, size_t len) {
  const char *slash = strrchr(file, '/');
  const char *b = slash ? slash + 1 : file;
  size_t n = strcspn(b, ".");
  snprintf(buf, len, "%.*s", (int)(n < 120 ? n : 120), b);
}

/* "3.49 MB", "77.97 GB": bytes in decimal units, 4 significant digits. */
static const char *human_bytes(double b, char *buf, size_t len) {
  static const char *const units[] = {"bytes", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) b /= 1000, u++;
  snprintf(buf, len, u ? "%.4g %s" : "%.0f %s", b, units[u]);
  return buf;
}

static json_t *loc_json(const ir_graph *g, const ir_node *n, json_t *o) {
  const char *file = n->loc.file ? n->loc.file : g->source_file;
  json_object_set_new(o, "file", file ? json_string(file) : json_null());
  json_object_set_new(o, "line", n->loc.line > 0 ? json_integer(n->loc.line) : json_null());
  return o;
}

/* One graph: plan, lower, write the .cu, compile, write the PTX; its manifest entry into graphs. */
static int compile_graph(const compile_opts *c, const cg_cuda_api *api, cg_cache *cache, const ir_graph *g,
                         const char *stem, const char *graph_name, json_t *graphs, ir_diag *d) {
  pass_plan *plan = pass_memplan(g, NULL);
  if (!plan) {
    ir_error_plain(d, "out of memory planning the %s graph", graph_name);
    return -1;
  }
  char err[4096], title[512], cu[160], path[4400];
  snprintf(title, sizeof title, "%s, graph @%s, for %s", g->source_file ? g->source_file : "?", graph_name, c->arch);
  cg_lower_options lo = {.title = title};
  cg_program *p = cg_lower(g, plan, &lo, err, sizeof err);
  int rc = -1, n_parts = 0;
  cg_part *parts = NULL;
  cg_cuda_binary *bins = NULL;
  bool compiled = false;
  if (!p) {
    ir_error_plain(d, "%s", err);
    goto done;
  }
  snprintf(cu, sizeof cu, "%s_%s.cu", stem, graph_name);
  snprintf(path, sizeof path, "%s/%s", c->out, cu);
  if (c->emit_cu && write_file(path, p->source, p->source_len, d) != 0) goto done;
  if (api && p->n_kernels > 0) { /* in parts, as the cuda backend compiles it (the same cache entries) */
    int threads = cg_compile_threads(err, sizeof err);
    if (threads < 0 || (n_parts = cg_program_parts(p, cu, CG_PART_KERNELS, &parts)) <= 0 ||
        !(bins = calloc((size_t)n_parts, sizeof *bins))) {
      ir_error_plain(d, "%s", threads < 0 ? err : "out of memory");
      goto done;
    }
    if (cg_nvrtc_compile_parts(api, cache, c->arch, parts, n_parts, threads, bins, err, sizeof err) != 0) {
      free(bins);
      bins = NULL;
      ir_error_plain(d, "%s", err);
      goto done;
    }
    compiled = true;
  }
  /* the PTX of each part: NAME_GRAPH.ARCH.ptx for a program of one part, NAME_GRAPH.pK.ARCH.ptx for part K */
  json_t *ptxs = json_array();
  for (int i = 0; compiled && c->emit_ptx && i < n_parts; i++) {
    char ptx[240];
    const char *dot = strrchr(parts[i].name, '.');
    snprintf(ptx, sizeof ptx, "%.*s.%s.ptx", (int)(dot - parts[i].name), parts[i].name, c->arch);
    snprintf(path, sizeof path, "%s/%s", c->out, ptx);
    json_array_append_new(ptxs, json_string(ptx));
    if (write_file(path, bins[i].ptx, bins[i].ptx_size, d) != 0) {
      json_decref(ptxs);
      goto done;
    }
  }
  /* the manifest entry, and the summary line */
  json_t *gj = json_object(), *ks = json_array(), *gs = json_array();
  json_object_set_new(gj, "graph", json_string(graph_name));
  json_object_set_new(gj, "source", c->emit_cu ? json_string(cu) : json_null());
  json_object_set_new(gj, "parts", compiled ? json_integer(n_parts) : json_null());
  json_object_set_new(gj, "ptx", ptxs);
  json_object_set_new(gj, "arena_bytes", json_integer((json_int_t)plan->arena_bytes));
  json_object_set_new(gj, "workspace_bytes", json_integer((json_int_t)p->workspace_bytes));
  json_object_set_new(gj, "steps", json_integer(plan->n_steps));
  int max_regs = 0;
  long long spills = 0;
  for (int k = 0; k < p->n_kernels; k++) {
    const cg_kernel *kk = &p->kernels[k];
    const ir_node *n = g->nodes[kk->node];
    json_t *kj = json_object();
    json_object_set_new(kj, "name", json_string(kk->name));
    char v[600];
    snprintf(v, sizeof v, "%%%s", n->n_out ? n->out[0]->name : "?");
    json_object_set_new(kj, "value", json_string(v));
    json_object_set_new(kj, "op", json_string(ir_op_name(n->op)));
    loc_json(g, n, kj);
    json_t *grid = json_null();
    int launches = 0;
    for (int a = 0; a < p->n_actions; a++) {
      const cg_action *act = &p->actions[a];
      unsigned gx = 0;
      if (act->kind == CG_ACT_KERNEL && act->kernel == k) gx = act->grid[0], launches++;
      else if (act->kind == CG_ACT_GEMM && act->gemm.fallback_kernel == k) gx = act->gemm.fallback_grid;
      if (gx && json_is_null(grid)) {
        json_decref(grid);
        grid = json_pack("[iii]", (int)gx, act->kind == CG_ACT_KERNEL ? (int)act->grid[1] : 1, 1);
      }
    }
    json_object_set_new(kj, "grid", grid);
    json_object_set_new(kj, "block", json_integer(kk->block));
    json_object_set_new(kj, "launches", json_integer(launches)); /* 0: the fallback of a product's epilogue */
    int part = 0;
    while (compiled && part < n_parts - 1 && k >= parts[part].first_kernel + parts[part].n_kernels) part++;
    json_object_set_new(kj, "part", compiled ? json_integer(part) : json_null());
    const cg_kernel_info *ki = compiled ? cg_cuda_binary_kernel(&bins[part], kk->name) : NULL;
    json_object_set_new(kj, "shared_static", ki ? json_integer(ki->smem_bytes) : json_null());
    json_object_set_new(kj, "shared_dynamic", json_integer(0));
    json_object_set_new(kj, "registers", ki && ki->registers >= 0 ? json_integer(ki->registers) : json_null());
    json_object_set_new(kj, "spills", ki && ki->spill_store_bytes >= 0
                                          ? json_integer(ki->spill_store_bytes + ki->spill_load_bytes)
                                          : json_null());
    json_object_set_new(kj, "stack", ki && ki->stack_bytes >= 0 ? json_integer(ki->stack_bytes) : json_null());
    json_array_append_new(ks, kj);
    if (ki && ki->registers > max_regs) max_regs = ki->registers;
    if (ki && ki->spill_store_bytes > 0) spills += ki->spill_store_bytes;
    if (ki && ki->spill_load_bytes > 0) spills += ki->spill_load_bytes;
  }
  for (int s = 0; s < p->n_steps; s++)
    for (int a = p->steps[s].first_action; a < p->steps[s].first_action + p->steps[s].n_actions; a++) {
      const cg_action *act = &p->actions[a];
      if (act->kind != CG_ACT_GEMM) continue;
      const cg_gemm *gm = &act->gemm;
      const ir_node *n = g->nodes[plan->steps[s].node];
      char v[600];
      snprintf(v, sizeof v, "%%%s", n->out[0]->name);
      json_t *mj = json_pack("{s:s, s:s}", "value", v, "op", ir_op_name(n->op));
      loc_json(g, n, mj);
      json_t *shape = json_pack("{s:s, s:I, s:I, s:I, s:I, s:b, s:b, s:s}", "dtype", ir_dtype_name(gm->dtype), "m",
                                (json_int_t)gm->m, "n", (json_int_t)gm->n, "k", (json_int_t)gm->k, "batch",
                                (json_int_t)gm->batch, "trans_a", gm->trans_a, "trans_b", gm->trans_b, "epilogue",
                                cg_epilogue_name(gm->epilogue));
      json_object_update(mj, shape);
      json_decref(shape);
      json_array_append_new(gs, mj);
    }
  /* bytes: what the program's steps read and write (cg_step.bytes, equal
   * to the cost model's pass_node_cost node by node: test_cost_lowering),
   * and what a copy would move for the views the plan makes free
   * (reshape: no kernel, no bytes: its operand read and its result written) */
  double moved = 0, views = 0;
  for (int st = 0; st < plan->n_steps; st++) {
    const ir_node *vn = g->nodes[plan->steps[st].node];
    moved += p->steps[st].bytes;
    if (plan->steps[st].view)
      views += 2 * (double)ir_type_numel(&vn->out[0]->type) * (double)ir_dtype_size(vn->out[0]->type.dtype);
  }
  json_object_set_new(gj, "kernels", ks);
  json_object_set_new(gj, "gemms", gs);
  json_object_set_new(gj, "bytes_moved", json_real(moved));
  json_object_set_new(gj, "view_bytes_not_moved", json_real(views));
  json_object_set_new(gj, "launches", json_integer(p->n_launches));
  json_object_set_new(gj, "copies", json_integer(p->n_copies));
  json_object_set_new(gj, "memsets", json_integer(p->n_memsets));
  json_array_append_new(graphs, gj);
  printf("%-24s %4d kernels", cu, p->n_kernels);
  if (compiled)
    printf(" (%s, %d part%s: at most %d registers, %lld bytes of spills)", c->arch, n_parts, n_parts == 1 ? "" : "s",
           max_regs, spills);
  printf(", %d cuBLASLt products, arena %zu bytes\n", p->n_gemms, plan->arena_bytes);
  char mb[32], vb[32];
  printf("%-24s %4d launches, %s read and written (views: %s not moved)\n", "", p->n_launches,
         human_bytes(moved, mb, sizeof mb), human_bytes(views, vb, sizeof vb));
  rc = 0;
done:
  for (int i = 0; bins && i < n_parts; i++) cg_cuda_binary_free(&bins[i]);
  free(bins);
  cg_parts_free(parts, n_parts);
  cg_program_free(p);
  pass_plan_free(plan);
  return rc;
}

static int parse_compile_args(int argc, char **argv, tool_compile_opts *o, compile_opts *c, ir_diag *d) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = NULL;
    int r = tool_parse_common(o, argc, argv, &i, d);
    if (r < 0) return -1;
    if (r != 0) continue;
    if (tool_flag("--target", argc, argv, &i, &val)) {
      if (!val || strcmp(val, "cuda") != 0) ir_error_plain(d, "--target %s: unknown target (known: cuda)", val ? val : ""), r = -1;
    } else if (tool_flag("--arch", argc, argv, &i, &val)) {
      if (!val || !*val) ir_error_plain(d, "--arch needs a CUDA architecture, e.g. sm_80"), r = -1;
      c->arch = val;
    } else if (tool_flag("-o", argc, argv, &i, &val) || tool_flag("--output", argc, argv, &i, &val)) {
      if (!val || !*val) ir_error_plain(d, "-o needs a directory"), r = -1;
      c->out = val;
    } else if (tool_flag("--emit", argc, argv, &i, &val)) {
      if (!val || parse_emit(c, val, d) != 0) r = -1;
    } else if (strcmp(a, "--train") == 0) {
      c->train = true;
    } else if (tool_flag("--optimizer", argc, argv, &i, &val)) {
      if ((c->optimizer = val ? pass_optimizer_from_name(val) : -1) < 0)
        ir_error_plain(d, "--optimizer %s: expected sgd, momentum, adam or adamw", val ? val : ""), r = -1;
    } else if (tool_flag("--micro-batches", argc, argv, &i, &val)) {
      char *end = NULL;
      long k = val ? strtol(val, &end, 10) : 0;
      if (!val || *end || k < 1 || k > 1000000)
        ir_error_plain(d, "--micro-batches %s: expected an integer in [1, 1000000]", val ? val : ""), r = -1;
      c->micro = (int)k;
    } else if (tool_flag("--clip", argc, argv, &i, &val)) {
      char *end = NULL;
      c->clip = val ? strtod(val, &end) : -1;
      if (!val || *end || !(c->clip >= 0)) ir_error_plain(d, "--clip %s: expected a number >= 0", val ? val : ""), r = -1;
    } else if (tool_flag("--dtype", argc, argv, &i, &val)) {
      if (val && (!strcmp(val, "bf16"))) c->dtype = IR_DT_BF16;
      else if (val && (!strcmp(val, "f16") || !strcmp(val, "fp16"))) c->dtype = IR_DT_F16;
      else if (val && (!strcmp(val, "f32") || !strcmp(val, "fp32"))) c->dtype = IR_DT_F32;
      else ir_error_plain(d, "--dtype %s: expected f32, bf16 or f16", val ? val : ""), r = -1;
    } else {
      r = tool_positional("compile", a, o, d);
    }
    if (r != 0) return -1;
  }
  if (tool_need_file("compile", o, d) != 0) return -1;
  if (!c->out) {
    ir_error_plain(d, "compile: missing -o DIR (see 'tgc compile --help')");
    return -1;
  }
  if (mkdir(c->out, 0777) != 0 && errno != EEXIST) {
    ir_error_plain(d, "-o %s: cannot create the directory: %s", c->out, strerror(errno));
    return -1;
  }
  return 0;
}

/* OUT/manifest.json: what was compiled, for which target, by which NVRTC. */
static int write_manifest(const tool_compile_opts *o, const compile_opts *c, const cg_cuda_api *nvrtc, json_t *graphs,
                          ir_diag *d) {
  int major = 0, minor = 0, rc = 0;
  char nv[32] = "";
  if (nvrtc && nvrtc->nvrtcVersion(&major, &minor) == 0) snprintf(nv, sizeof nv, "%d.%d", major, minor);
  json_t *m = json_object();
  json_object_set_new(m, "tgc", json_string(TGC_VERSION));
  json_object_set_new(m, "model", json_string(o->file));
  json_object_set_new(m, "config", o->fe.config ? json_string(o->fe.config) : json_null());
  json_object_set_new(m, "target", json_string("cuda"));
  json_object_set_new(m, "arch", json_string(c->arch));
  json_object_set_new(m, "dtype", json_string(ir_dtype_name(c->dtype)));
  json_object_set_new(m, "nvrtc", nv[0] ? json_string(nv) : json_null());
  json_object_set_new(m, "graphs", json_incref(graphs));
  char path[4400];
  snprintf(path, sizeof path, "%s/manifest.json", c->out);
  char *s = json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  size_t n = s ? strlen(s) : 0;
  char *line = s ? realloc(s, n + 2) : NULL;
  if (line) line[n] = '\n', line[n + 1] = 0, s = line;
  if (!line || write_file(path, s, n + 1, d) != 0) rc = -1;
  free(s);
  json_decref(m);
  return rc;
}

int tool_cmd_compile(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s\n%s", compile_help, tool_common_help);
      return 0;
    }
  ir_diag *d = tool_diag_new();
  tool_compile_opts o = {0};
  compile_opts c = {.arch = "sm_80", .emit_cu = true, .emit_ptx = true, .emit_report = true,
                    .optimizer = PASS_OPT_ADAM, .micro = 1, .dtype = IR_DT_F32};
  int rc = parse_compile_args(argc, argv, &o, &c, d);
  /* NVRTC: for PTX and the report's registers; a report alone goes without it */
  cg_cuda_api api = {0};
  cg_cache *cache = NULL;
  bool have_nvrtc = false;
  char err[1024];
  if (rc == 0 && (c.emit_ptx || c.emit_report)) {
    have_nvrtc = rt_cuda_load(&api, CG_CUDA_LIB_NVRTC, err, sizeof err) == 0;
    if (!have_nvrtc && c.emit_ptx) ir_error_plain(d, "%s (--emit cu,report needs no NVRTC)", err), rc = -1;
    if (have_nvrtc) cache = cg_cache_open(NULL, err, sizeof err); /* without one everything compiles */
  }
  char *text = NULL, stem[128];
  ir_graph *g = NULL;
  pass_training *prog = NULL;
  if (rc == 0 && !(g = tool_load(&o, d, &text))) rc = -1;
  json_t *graphs = json_array();
  if (rc == 0) base_name(o.file, stem, sizeof stem);
  pass_options po = {.diag = d, .verify_each = o.verify_each, .time_passes = o.time_passes, .verbose = o.verbose,
                     .checkpoint = o.checkpoint, .disabled = o.pass_disabled, .tp_search = !o.tp_megatron};
  const cg_cuda_api *use = have_nvrtc ? &api : NULL;
  if (rc == 0 && c.train) {
    pass_train_options to = {.opt = pass_optimizer_defaults((pass_optimizer_kind)c.optimizer), .micro_batches = c.micro,
                             .targets_input = -1, .passes = &po, .mixed_precision = c.dtype != IR_DT_F32,
                             .compute_dtype = c.dtype, .loss_scaling = c.dtype == IR_DT_F16};
    to.opt.clip_norm = c.clip;
    prog = pass_build_train(g, &to);
    g = NULL; /* the step graph now */
    if (!prog || compile_graph(&c, use, cache, prog->step, stem, "step", graphs, d) != 0 ||
        compile_graph(&c, use, cache, prog->update, stem, "update", graphs, d) != 0)
      rc = -1;
  } else if (rc == 0) {
    if ((c.dtype != IR_DT_F32 && pass_mixed_precision(g, c.dtype, d) != 0) || tool_run_passes(g, &o, d, stdout) != 0 ||
        compile_graph(&c, use, cache, g, stem, "main", graphs, d) != 0)
      rc = -1;
  }
  if (rc == 0 && c.emit_report && write_manifest(&o, &c, use, graphs, d) != 0) rc = -1;
  if (rc == 0)
    printf("wrote %s/ (%s%s%s)\n", c.out, c.emit_cu ? "cu " : "", c.emit_ptx ? "ptx " : "",
           c.emit_report ? "manifest.json" : "");
  json_decref(graphs);
  cg_cache_free(cache);
  pass_training_free(prog);
  ir_graph_free(g);
  free(text);
  ir_diag_free(d);
  return rc == 0 ? 0 : 1;
}
