/* tools/cmd_weights.c — `tgc export-weights`: a trained state's parameters
 * written back as a plain safetensors file under a name map's file names
 * (runtime/io/weights.c, docs/weights.md). Flags, one library call. */
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "tool.h"

static const char *const export_help =
    "usage: tgc export-weights FILE --resume STATE [--map MAP] -o OUT.safetensors [model options]\n"
    "\n"
    "Writes the parameters of STATE (saved by tgc train --save for FILE, on one device) as a\n"
    "plain safetensors file: each under the file name MAP gives it, with the map's transforms\n"
    "undone (transposed back, split parts joined, rotary rows permuted back). Without --map the\n"
    "names are tgc's. The optimizer state is left out. Reading OUT back with\n"
    "tgc run FILE --weights OUT --map MAP gives the same parameters, bit for bit.\n"
    "\n"
    "  --resume STATE       the training state\n"
    "  --map MAP            the name map (e.g. examples/maps/hf_gpt2.map)\n"
    "  -o OUT               the file to write (replaced atomically)\n";

extern const char *const tool_common_help;

int tool_cmd_export_weights(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s\n%s", export_help, tool_common_help);
      return 0;
    }
  ir_diag *d = tool_diag_new();
  tool_compile_opts o = {0};
  const char *state = NULL, *map = NULL, *out = NULL;
  int rc = 0;
  for (int i = 1; i < argc && rc == 0; i++) {
    int r = tool_parse_common(&o, argc, argv, &i, d);
    if (r < 0) rc = 1;
    if (r != 0) continue;
    const char *val = NULL, **dst = NULL, *what = NULL;
    if (tool_flag("--resume", argc, argv, &i, &val)) dst = &state, what = "--resume needs a STATE";
    else if (tool_flag("--map", argc, argv, &i, &val)) dst = &map, what = "--map needs a MAP file";
    else if (tool_flag("-o", argc, argv, &i, &val)) dst = &out, what = "-o needs an OUT file";
    else if (tool_positional("export-weights", argv[i], &o, d) != 0) rc = 1;
    if (dst && (!val || !*val)) ir_error_plain(d, "%s", what), rc = 1;
    else if (dst) *dst = val;
  }
  if (rc == 0 && tool_need_file("export-weights", &o, d) != 0) rc = 1;
  if (rc == 0 && (!state || !out)) {
    ir_error_plain(d, "export-weights: %s is required", !state ? "--resume STATE" : "-o OUT");
    rc = 1;
  }
  char *text = NULL, err[2048];
  ir_graph *g = NULL;
  rt_weight_map *m = NULL;
  if (rc == 0 && !(g = tool_load(&o, d, &text))) rc = 1;
  if (rc == 0 && map && !(m = rt_weight_map_read(map, err, sizeof err))) {
    ir_error_plain(d, "--map: %s", err);
    rc = 1;
  }
  tool_slots slots = {0};
  if (g) tool_alloc_slots(g, &slots);
  for (int i = 0; rc == 0 && i < g->n_params; i++)
    if (!(slots.params[i] = rt_tensor_new(&g->params[i]->type))) IR_DIE("out of memory ((slots.params[i] = rt_tensor_new(&g->params[i]->type)))");
  rt_safetensors *hdr = rc == 0 ? rt_safetensors_read_header(state, err, sizeof err) : NULL;
  if (rc == 0 && !hdr) {
    ir_error_plain(d, "--resume: %s", err);
    rc = 1;
  } else if (rc == 0 && rt_safetensors_meta(hdr, "sharded")) {
    ir_error_plain(d, "--resume: %s: a state saved on a mesh (an index of per-rank files); export-weights reads a "
                      "state saved on one device: resume it on one device and save it there", state);
    rc = 1;
  }
  rt_safetensors_free(hdr);
  /* the state's parameters by tgc name; its optimizer states and nothing else left aside */
  static const char *const skip[] = {"opt/*", NULL};
  if (rc == 0 && rt_weights_load(g, slots.params, state, NULL, skip, err, sizeof err) != 0) {
    ir_error_plain(d, "--resume: %s", err);
    rc = 1;
  }
  if (rc == 0 && rt_weights_export(g, slots.params, m, out, err, sizeof err) != 0) {
    ir_error_plain(d, "export-weights: %s", err);
    rc = 1;
  }
  if (rc == 0) printf("wrote %d parameters to %s\n", g->n_params, out);
  if (g) tool_free_slots(g, &slots);
  rt_weight_map_free(m);
  ir_graph_free(g);
  free(text);
  ir_diag_free(d);
  return rc;
}
