/* ir/print.c — the textual IR printer (the format is docs/ir.md).
 *
 * One pass over the graph: header, inputs, params, nodes in topological
 * order, outputs, `end`. Everything that could make two printings of the
 * same graph differ is pinned down here so that parse(print(g)) prints
 * byte-identically (read.c is the other half of that contract):
 *   - floats are %.17g plus ".0" when the text would read back as an INT;
 *   - strings escape exactly `"`, `\` and newline;
 *   - role / shard / partial / layer are printed only when not the default.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* %.17g, plus ".0" when the text would otherwise read back as an INT. */
static void format_float(char *buf, size_t n, double x) {
  snprintf(buf, n, "%.17g", x);
  if (!strpbrk(buf, ".eni")) {
    size_t len = strlen(buf);
    if (len + 2 < n) memcpy(buf + len, ".0", 3);
  }
}

static void print_float(FILE *out, double x) {
  char buf[64];
  format_float(buf, sizeof buf, x);
  fputs(buf, out);
}

static void print_string(FILE *out, const char *s) {
  fputc('"', out);
  for (const char *p = s ? s : ""; *p; p++) {
    if (*p == '"') fputs("\\\"", out);
    else if (*p == '\\') fputs("\\\\", out);
    else if (*p == '\n') fputs("\\n", out);
    else fputc(*p, out);
  }
  fputc('"', out);
}

/* annot := DTYPE '[' dims ']' ('role' R)? ('shard' [...])? ('partial' '(' axes ')')? */
static void print_annot(FILE *out, const ir_value *v, ir_role default_role) {
  const ir_type *t = &v->type;
  fprintf(out, "%s[", ir_dtype_name(t->dtype));
  for (int d = 0; d < t->rank; d++) fprintf(out, d ? ", %" PRId64 : "%" PRId64, t->dims[d]);
  fputc(']', out);
  if (v->role != default_role) fprintf(out, " role %s", ir_role_name(v->role));
  if (!ir_shard_is_replicated(&v->shard)) {
    char buf[160];
    ir_shard_str(&v->shard, t->rank, buf, sizeof buf);
    fprintf(out, buf[0] == '[' ? " shard %s" : " %s", buf);
  }
}

static void print_loc(FILE *out, ir_loc loc) { fprintf(out, " loc %d:%d", loc.line, loc.col); }

static void print_init(FILE *out, ir_init init) {
  switch (init.kind) {
  case IR_INIT_NONE: return;
  case IR_INIT_ZEROS: fputs(" init zeros", out); return;
  case IR_INIT_ONES: fputs(" init ones", out); return;
  case IR_INIT_NORMAL:
    fputs(" init normal(", out);
    print_float(out, init.a);
    fputc(')', out);
    return;
  case IR_INIT_UNIFORM:
    fputs(" init uniform(", out);
    print_float(out, init.a);
    fputs(", ", out);
    print_float(out, init.b);
    fputc(')', out);
    return;
  }
}

static void print_attr_value(FILE *out, const ir_attr *a) {
  switch (a->kind) {
  case IR_ATTR_INT: fprintf(out, "%" PRId64, a->i); break;
  case IR_ATTR_FLOAT: print_float(out, a->f); break;
  case IR_ATTR_INTS:
    fputc('[', out);
    for (int k = 0; k < a->n; k++) fprintf(out, k ? ", %" PRId64 : "%" PRId64, a->ints[k]);
    fputc(']', out);
    break;
  case IR_ATTR_STR: print_string(out, a->s); break;
  case IR_ATTR_DTYPE: fputs(ir_dtype_name((ir_dtype)a->i), out); break;
  case IR_ATTR_MESH_AXIS: print_string(out, ir_axis_name((ir_axis)a->i)); break; /* the name, as read */
  }
}

/* %a, %b = op %x, %y {k = v, ...} : annot, annot loc L:C layer N */
static void print_node(FILE *out, const ir_node *n) {
  fputs("  ", out);
  for (int r = 0; r < n->n_out; r++) fprintf(out, r ? ", %%%s" : "%%%s", n->out[r]->name);
  fprintf(out, n->n_out ? " = %s" : "%s", ir_op_name(n->op));
  for (int k = 0; k < n->n_in; k++) fprintf(out, k ? ", %%%s" : " %%%s", n->in[k]->name);
  if (n->n_attrs > 0) {
    fputs(" {", out);
    for (int k = 0; k < n->n_attrs; k++) {
      if (k) fputs(", ", out);
      fprintf(out, "%s = ", n->attrs[k].key);
      print_attr_value(out, &n->attrs[k]);
    }
    fputc('}', out);
  }
  if (n->n_out) fputs(" : ", out);
  for (int r = 0; r < n->n_out; r++) {
    if (r) fputs(", ", out);
    print_annot(out, n->out[r], IR_ROLE_ACT);
  }
  print_loc(out, n->loc);
  if (n->layer >= 0) fprintf(out, " layer %d", n->layer);
  fputc('\n', out);
}

void ir_print(FILE *out, const ir_graph *g) {
  fputs("tgc.ir 1\n", out);
  fprintf(out, "graph @%s", g->name ? g->name : "main");
  if (g->source_file) {
    fputs(" file ", out);
    print_string(out, g->source_file);
  }
  fputc('\n', out);
  if (!ir_mesh_is_single(&g->mesh)) {
    const ir_mesh *m = &g->mesh;
    fputs("  mesh", out);
    for (int a = 0, k = 0; a < IR_NUM_AXES; a++)
      if (m->size[a] > 1) fprintf(out, "%s %s = %d", k++ ? "," : "", ir_axis_name((ir_axis)a), m->size[a]);
    if (m->sp) fputs(" sp", out);
    if (m->stage >= 0) fprintf(out, " stage %d", m->stage);
    fputc('\n', out);
  }
  for (int k = 0; k < g->n_inputs; k++) {
    const ir_value *v = g->inputs[k];
    fprintf(out, "  input %%%s : ", v->name);
    print_annot(out, v, IR_ROLE_INPUT);
    print_loc(out, v->loc);
    fputc('\n', out);
  }
  for (int k = 0; k < g->n_params; k++) {
    const ir_value *v = g->params[k];
    fprintf(out, "  param %%%s : ", v->name);
    print_annot(out, v, IR_ROLE_PARAM);
    print_init(out, v->init);
    print_loc(out, v->loc);
    fputc('\n', out);
  }
  for (int k = 0; k < g->n_nodes; k++) print_node(out, g->nodes[k]);
  for (int k = 0; k < g->n_outputs; k++) {
    fputs("  output ", out);
    print_string(out, g->outputs[k].name);
    fprintf(out, " = %%%s\n", g->outputs[k].value->name);
  }
  fputs("end\n", out);
}

char *ir_print_to_string(const ir_graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  ir_print(f, g);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}
