/* ir/dot.c — Graphviz export of a graph (`tgc dump --dot`, `dot -Tpng`).
 *
 * Laid out top to bottom for reading a transformer block of a few dozen
 * nodes: inputs are blue ellipses, params orange ellipses, op nodes rounded
 * boxes labelled "op", a line of short key attributes (axis=1, perm=[0, 2, 1])
 * and the result type(s); constants are small grey boxes; graph outputs are
 * double octagons. Gradients and optimizer state are tinted. Edges carry the
 * value name when it is short and meaningful (not an auto-numbered "17").
 * Every label is built as plain text and then escaped for a DOT string,
 * with control and non-ASCII bytes replaced by '?', so any name prints.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "ir.h"

#define EDGE_LABEL_MAX 12 /* longer value names leave the edge unlabelled */
#define ATTR_TEXT_MAX 28  /* longer attributes are left out of the label */
#define ATTRS_SHOWN 3

/* Writes s as the inside of a DOT double-quoted string; '\n' is a line break. */
static void put_escaped(FILE *out, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"') fputs("\\\"", out);
    else if (*p == '\\') fputs("\\\\", out);
    else if (*p == '\n') fputs("\\n", out);
    else if (*p < 0x20 || *p >= 0x7f) fputc('?', out);
    else fputc(*p, out);
  }
}

static void put_label(FILE *out, const char *text) {
  fputs("label=\"", out);
  put_escaped(out, text);
  fputc('"', out);
}

static void attr_text(const ir_attr *a, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "%s=", a->key);
  if (len >= n) return;
  switch (a->kind) {
  case IR_ATTR_INT: snprintf(buf + len, n - len, "%" PRId64, a->i); break;
  case IR_ATTR_FLOAT: { /* short for reading (%.6g), still marked as a float */
    char num[40];
    snprintf(num, sizeof num, "%.6g", a->f);
    snprintf(buf + len, n - len, "%s%s", num, strpbrk(num, ".eni") ? "" : ".0");
    break;
  }
  case IR_ATTR_INTS:
    len += (size_t)snprintf(buf + len, n - len, "[");
    for (int k = 0; k < a->n && len < n; k++)
      len += (size_t)snprintf(buf + len, n - len, k ? ", %" PRId64 : "%" PRId64, a->ints[k]);
    if (len < n) snprintf(buf + len, n - len, "]");
    break;
  case IR_ATTR_STR: snprintf(buf + len, n - len, "\"%s\"", a->s ? a->s : ""); break;
  case IR_ATTR_DTYPE: snprintf(buf + len, n - len, "%s", ir_dtype_name((ir_dtype)a->i)); break;
  case IR_ATTR_MESH_AXIS: snprintf(buf + len, n - len, "\"%s\"", ir_axis_name((ir_axis)a->i)); break;
  }
}

static void type_text(const ir_value *v, char *buf, size_t n) {
  ir_type_str(&v->type, buf, n);
  size_t len = strlen(buf);
  if (!ir_shard_is_replicated(&v->shard) && len + 1 < n) {
    buf[len++] = ' ';
    ir_shard_str(&v->shard, v->type.rank, buf + len, n - len);
  }
}

/* "v<id>" for inputs/params, "n<id>" for node results. */
static void node_ref(char *buf, size_t n, const ir_value *v) {
  if (v->def) snprintf(buf, n, "n%d", v->def->id);
  else snprintf(buf, n, "v%d", v->id);
}

static bool edge_worthy(const char *name) {
  if (!name || strlen(name) > EDGE_LABEL_MAX) return false;
  for (const char *p = name; *p; p++)
    if (*p < '0' || *p > '9') return true;
  return false; /* auto-numbered */
}

static const char *role_color(ir_role r) {
  switch (r) {
  case IR_ROLE_GRAD: return "#fde2e2";
  case IR_ROLE_OPT_STATE: return "#ece4ff";
  default: return "#f2f2f2";
  }
}

static void print_value_node(FILE *out, const ir_value *v, const char *color) {
  char type[160];
  type_text(v, type, sizeof type);
  size_t n = strlen(v->name) + strlen(type) + 4;
  char *label = malloc(n);
  if (!label) IR_DIE("out of memory (label)");
  snprintf(label, n, "%%%s\n%s", v->name, type);
  fprintf(out, "  v%d [", v->id);
  put_label(out, label);
  fprintf(out, ", shape=ellipse, style=filled, fillcolor=\"%s\"];\n", color);
  free(label);
}

static void print_op_node(FILE *out, const ir_node *n) {
  char *label = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&label, &len);
  if (!f) IR_DIE("out of memory (f)");
  bool is_const = n->op == IR_OP_CONST;
  fputs(ir_op_name(n->op), f);
  if (n->layer >= 0) fprintf(f, " (layer %d)", n->layer);
  int shown = 0;
  for (int k = 0; k < n->n_attrs && shown < ATTRS_SHOWN; k++) {
    char text[256];
    attr_text(&n->attrs[k], text, sizeof text);
    if (strlen(text) > ATTR_TEXT_MAX) continue;
    fputs(shown ? " " : (is_const ? " " : "\n"), f);
    fputs(is_const && strncmp(text, "value=", 6) == 0 ? text + 6 : text, f);
    shown++;
  }
  for (int r = 0; r < n->n_out; r++) {
    char type[160];
    type_text(n->out[r], type, sizeof type);
    fputc('\n', f);
    if (n->n_out > 1) fprintf(f, "%%%s: ", n->out[r]->name);
    fputs(type, f);
  }
  fclose(f);
  fprintf(out, "  n%d [", n->id);
  put_label(out, label);
  free(label);
  if (is_const)
    fputs(", shape=box, style=\"rounded,filled\", fillcolor=\"#e6e6e6\", fontsize=8, "
          "height=0.2, margin=\"0.05,0.02\"];\n", out);
  else
    fprintf(out, ", shape=box, style=\"rounded,filled\", fillcolor=\"%s\"];\n",
            role_color(n->n_out > 0 ? n->out[0]->role : IR_ROLE_ACT));
}

void ir_print_dot(FILE *out, const ir_graph *g) {
  fputs("digraph \"", out);
  put_escaped(out, g->name ? g->name : "graph");
  fputs("\" {\n", out);
  fputs("  rankdir=TB;\n", out);
  fputs("  node [fontname=\"Helvetica\", fontsize=10];\n", out);
  fputs("  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n", out);
  for (int k = 0; k < g->n_inputs; k++) print_value_node(out, g->inputs[k], "#cfe3ff");
  for (int k = 0; k < g->n_params; k++) print_value_node(out, g->params[k], "#ffdca8");
  for (int k = 0; k < g->n_nodes; k++) print_op_node(out, g->nodes[k]);
  for (int k = 0; k < g->n_outputs; k++) {
    fprintf(out, "  o%d [", k);
    put_label(out, g->outputs[k].name ? g->outputs[k].name : "");
    fputs(", shape=doubleoctagon, style=filled, fillcolor=\"#d9f2d9\"];\n", out);
  }
  char src[32];
  for (int k = 0; k < g->n_nodes; k++) {
    const ir_node *n = g->nodes[k];
    for (int i = 0; i < n->n_in; i++) {
      const ir_value *v = n->in[i];
      node_ref(src, sizeof src, v);
      fprintf(out, "  %s -> n%d", src, n->id);
      bool multi = v->def && v->def->n_out > 1;
      if (v->def && (multi || edge_worthy(v->name)) && strlen(v->name) <= EDGE_LABEL_MAX) {
        fputs(" [label=\"%", out);
        put_escaped(out, v->name);
        fputs("\"]", out);
      }
      fputs(";\n", out);
    }
  }
  for (int k = 0; k < g->n_outputs; k++) {
    node_ref(src, sizeof src, g->outputs[k].value);
    fprintf(out, "  %s -> o%d;\n", src, k);
  }
  fputs("}\n", out);
}
