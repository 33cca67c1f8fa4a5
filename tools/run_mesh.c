/* tools/run_mesh.c — `tgc run FILE --mesh ...` under mpirun: each rank runs
 * its block of the sharded graph (its pipeline stage's with pp) on the CPU,
 * its collectives through the comm layer, as tgc train does. The values are
 * one device's: the graph is also compiled without the mesh, its inputs and
 * parameters bound there exactly as one-device `tgc run` binds them (the
 * same --input values, the same seeded random ones, the same initializers),
 * and each rank copies out its block (rt_shard_extract). The shard pass
 * makes every output of a plain graph whole on dp and tp; with pp the
 * stage that makes an output sends it to stage 0 after the run
 * (rt_outputs_to_first_stage). Rank 0 prints; the others print nothing (the
 * compile's errors, the same on every rank, are rank 0's to print). */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "tool.h"

int tool_mesh_run_open(tool_mesh_run *mr, tool_compile_opts *o, const tool_backend *tb, ir_diag *d) {
  char err[1024] = "";
  mr->d = d;
  mr->backend = tb;
  if (o->stage_set) {
    ir_error_plain(d, "--stage %d: tgc run runs each rank's own pipeline stage (its place in the mesh)", o->stage);
    return -1;
  }
  if (tb->backend && tb->backend != &rt_cpu_backend) {
    ir_error_plain(d, "--backend %s: tgc %s --mesh runs on the cpu backend (tgc train --mesh runs on the others)",
                   tb->backend->name, mr->command ? mr->command : "run");
    return -1;
  }
  rt_comm_options co = {0};
  if (!(mr->comm = rt_comm_open(&co, err, sizeof err)) || rt_mesh_bind(mr->comm, &o->mesh, mr->coord, err, sizeof err) != 0) {
    if (!mr->comm || rt_comm_rank(mr->comm) == 0) ir_error_plain(d, "%s", err); /* (every rank has it: one prints) */
    return -1;
  }
  o->mesh.stage = o->mesh.size[IR_AXIS_PP] > 1 ? mr->coord[IR_AXIS_PP] : -1; /* this rank's pipeline stage */
  if (rt_comm_rank(mr->comm) == 0) return 0;
  mr->quiet = true;
  o->time_passes = false;
  if (!(mr->null = fopen("/dev/null", "w")) || !freopen("/dev/null", "w", stdout)) {
    ir_error_plain(d, "rank %d: cannot silence stdout", rt_comm_rank(mr->comm));
    return -1;
  }
  mr->diag = ir_diag_new(mr->null);
  return 0;
}

int tool_mesh_run_compile_whole(tool_mesh_run *mr, const tool_compile_opts *o) {
  tool_compile_opts one = *o;
  one.mesh_set = false;
  one.stage_set = false;
  one.after = NULL;
  one.time_passes = false;
  ir_diag *d = mr->diag ? mr->diag : mr->d;
  if (!(mr->whole = tool_load(&one, d, &mr->whole_text))) return -1;
  return tool_run_passes(mr->whole, &one, d, stdout);
}

static int index_of(ir_value *const *vs, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(vs[i]->name, name) == 0) return i;
  return -1;
}

/* local[i]: this rank's block of whole[index of vs[i]'s name in wvs]. */
static int blocks(const ir_graph *g, ir_value *const *vs, int n, ir_value *const *wvs, int wn, rt_tensor *const *whole,
                  const int *coord, rt_tensor **local, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    int j = index_of(wvs, wn, vs[i]->name);
    if (j < 0) {
      snprintf(err, errlen, "internal error: the sharded graph's '%s' is not one device's", vs[i]->name);
      return -1;
    }
    if (!(local[i] = rt_tensor_new(&vs[i]->type))) {
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    if (rt_shard_extract(whole[j], local[i], &vs[i]->shard, &g->mesh, coord, err, errlen) != 0) return -1;
  }
  return 0;
}

int tool_mesh_run_params(tool_mesh_run *mr, const ir_graph *g, rt_tensor *const *whole, rt_tensor **local,
                         ir_diag *d) {
  char err[1024] = "";
  const ir_graph *w = mr->whole;
  if (blocks(g, g->params, g->n_params, w->params, w->n_params, whole, mr->coord, local, err, sizeof err) != 0) {
    ir_error_plain(d, "%s", err);
    return -1;
  }
  return 0;
}

int tool_mesh_run_execute(tool_mesh_run *mr, const ir_graph *g, rt_tensor *const *inputs, rt_tensor *const *params,
                          rt_tensor **outputs, rt_stats *stats, ir_diag *d) {
  const ir_graph *w = mr->whole;
  char err[1024] = "";
  tool_slots local = {0};
  tool_alloc_slots(g, &local);
  int rc = -1;
  if (blocks(g, g->inputs, g->n_inputs, w->inputs, w->n_inputs, inputs, mr->coord, local.inputs, err, sizeof err) != 0 ||
      blocks(g, g->params, g->n_params, w->params, w->n_params, params, mr->coord, local.params, err, sizeof err) != 0) {
    ir_error_plain(d, "%s", err);
    goto done;
  }
  stats->comm = mr->comm;
  if (tool_execute(mr->backend, g, local.inputs, local.params, local.outputs, stats, d) != 0) goto done;
  if (g->mesh.size[IR_AXIS_PP] > 1) {
    if (rt_outputs_to_first_stage(mr->comm, w, g, local.outputs, outputs, err, sizeof err) != 0) {
      ir_error_plain(d, "%s", err);
      goto done;
    }
  } else { /* every output whole on every rank (the shard pass made it so) */
    for (int i = 0; i < w->n_outputs; i++) {
      int k = -1;
      for (int j = 0; j < g->n_outputs && k < 0; j++)
        if (strcmp(g->outputs[j].name, w->outputs[i].name) == 0) k = j;
      if (k < 0 || !ir_type_equal(&local.outputs[k]->type, &w->outputs[i].value->type)) {
        ir_error_plain(d, "internal error: output '%s' is not whole on this rank", w->outputs[i].name);
        goto done;
      }
      outputs[i] = local.outputs[k];
      local.outputs[k] = NULL;
    }
  }
  rc = 0;
done:
  tool_free_slots(g, &local);
  return rc;
}

void tool_mesh_run_close(tool_mesh_run *mr) {
  rt_comm_close(mr->comm);
  ir_graph_free(mr->whole);
  free(mr->whole_text);
  ir_diag_free(mr->diag);
  if (mr->null) fclose(mr->null);
  *mr = (tool_mesh_run){0};
}
