/* tools/memplan_dump.c — printing a graph's memory plan (tgc dump --after
 * memplan, --plan): the listing of analysis/memplan.c, or JSON with every
 * value's location, the buffers and the steps. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

static json_t *plan_json(const ir_graph *g, const pass_plan *p) {
  json_t *o = json_object();
  json_object_set_new(o, "arena_bytes", json_integer((json_int_t)p->arena_bytes));
  json_object_set_new(o, "alignment", json_integer((json_int_t)p->alignment));
  json_t *values = json_array();
  for (int s = 0; s < p->n_steps; s++) {
    const ir_node *n = g->nodes[p->steps[s].node];
    for (int r = 0; r < n->n_out; r++) {
      const pass_loc *l = &p->loc[n->out[r]->id];
      json_t *v = json_object();
      json_object_set_new(v, "name", json_string(n->out[r]->name ? n->out[r]->name : "?"));
      json_object_set_new(v, "step", json_integer(s));
      json_object_set_new(v, "space", json_string(pass_space_name(l->space)));
      if (l->space == PASS_SPACE_ARENA) json_object_set_new(v, "offset", json_integer((json_int_t)l->offset));
      else json_object_set_new(v, "index", json_integer(l->index));
      json_object_set_new(v, "bytes", json_integer((json_int_t)l->bytes));
      json_object_set_new(v, "buffer", json_integer(l->buffer));
      json_object_set_new(v, "live", json_pack("[ii]", p->buffers[l->buffer].first, p->buffers[l->buffer].last));
      if (p->steps[s].view) json_object_set_new(v, "view_of", json_string(n->in[0]->name));
      else if (l->reused_operand >= 0)
        json_object_set_new(v, "in_place_of", json_string(n->in[l->reused_operand]->name));
      if (p->steps[s].zero) json_object_set_new(v, "zeroed", json_true());
      json_array_append_new(values, v);
    }
  }
  json_object_set_new(o, "values", values);
  return o;
}

int tool_print_plan(FILE *out, const ir_graph *g, int format, bool with_ir, ir_diag *d) {
  pass_plan *p = pass_memplan(g, NULL);
  if (!p) {
    ir_error_plain(d, "out of memory planning the graph");
    return -1;
  }
  int rc = 0;
  if (format == 1) {
    if (with_ir) ir_print_dot(out, g);
  } else if (format == 0) {
    if (with_ir) {
      fprintf(out, "# IR after memplan\n");
      ir_print(out, g);
    }
    pass_plan_print(out, g, p);
  } else {
    json_t *o = json_object();
    if (with_ir) { /* the graph as ir_print_json writes it */
      char *buf = NULL;
      size_t len = 0;
      FILE *m = open_memstream(&buf, &len);
      if (m) {
        ir_print_json(m, g);
        fclose(m);
        json_t *gj = json_loadb(buf, len, 0, NULL);
        if (gj) json_object_set_new(o, "graph", gj);
      }
      free(buf);
    }
    json_object_set_new(o, "plan", plan_json(g, p));
    if (json_dumpf(o, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) rc = -1;
    fputc('\n', out);
    json_decref(o);
  }
  pass_plan_free(p);
  return rc;
}
