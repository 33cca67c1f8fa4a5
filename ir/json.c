/* ir/json.c — JSON export of a graph for tools (`tgc dump --json`), built
 * with jansson. The schema ("tgc.ir.json" version 1) is documented in
 * docs/ir.md next to the textual IR it mirrors: graph name and file, inputs,
 * params (with init), nodes (op, operand names, results, attrs, loc, layer)
 * and outputs. Keys keep insertion order; reals are written with 17
 * significant digits so they read back exactly. JSON has no inf/nan, so a
 * non-finite float is written as {"float": "inf" | "-inf" | "nan"}; a dtype
 * attribute is {"dtype": "f32"} so it cannot be mistaken for a string.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ir.h"

/* set / append that take ownership and tolerate NULL from a failed alloc */
static void put(json_t *obj, const char *key, json_t *v) {
  if (v) json_object_set_new(obj, key, v);
}
static void push(json_t *arr, json_t *v) {
  if (v) json_array_append_new(arr, v);
}

/* json_string, with bytes of invalid UTF-8 replaced by '?' rather than lost. */
static json_t *str_json(const char *s) {
  if (!s) s = "";
  json_t *j = json_string(s);
  if (j) return j;
  size_t n = strlen(s);
  char *copy = malloc(n + 1);
  if (!copy) return NULL;
  for (size_t k = 0; k <= n; k++) copy[k] = (unsigned char)s[k] >= 0x80 ? '?' : s[k];
  j = json_string(copy);
  free(copy);
  return j;
}

static json_t *real_value(double x) {
  if (isfinite(x)) return json_real(x);
  return json_pack("{s:s}", "float", isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf"));
}

static json_t *shape_json(const ir_type *t) {
  json_t *a = json_array();
  for (int d = 0; d < t->rank; d++) push(a, json_integer(t->dims[d]));
  return a;
}

static json_t *loc_json(ir_loc loc) {
  json_t *o = json_object();
  put(o, "line", json_integer(loc.line));
  put(o, "col", json_integer(loc.col));
  return o;
}

/* Mesh axes as JSON: "dp", or ["dp", "tp"] when several (outermost first). */
static json_t *axes_json(unsigned mask, bool always_array) {
  int count = 0;
  for (int a = 0; a < IR_NUM_AXES; a++) count += (mask >> a) & 1;
  if (count == 1 && !always_array) return json_string(ir_axis_name((ir_axis)__builtin_ctz(mask)));
  json_t *arr = json_array();
  for (int a = 0; a < IR_NUM_AXES; a++)
    if ((mask >> a) & 1) push(arr, json_string(ir_axis_name((ir_axis)a)));
  return arr;
}

/* {"dims": [axis | [axes] | {"axis": axis, "parts": k} | {"axis": axis, "pad": p} | null, ...],
 * "partial": [axes]}, or NULL when replicated. */
static json_t *shard_json(const ir_value *v) {
  if (ir_shard_is_replicated(&v->shard)) return NULL;
  json_t *o = json_object(), *dims = json_array();
  for (int d = 0; d < v->type.rank; d++) {
    json_t *x = v->shard.split[d] ? axes_json(v->shard.split[d], false) : json_null();
    if (v->shard.split[d] && v->shard.pieces[d] > 1) x = json_pack("{s:o,s:i}", "axis", x, "parts", v->shard.pieces[d]);
    if (v->shard.split[d] && v->shard.pad[d] > 0) x = json_pack("{s:o,s:i}", "axis", x, "pad", (int)v->shard.pad[d]);
    push(dims, x);
  }
  put(o, "dims", dims);
  put(o, "partial", axes_json(v->shard.partial, true));
  return o;
}

/* {"pp": N, "dp": N, "tp": N, "sp": bool, "stage": N | null} */
static json_t *mesh_json(const ir_mesh *m) {
  json_t *o = json_object();
  for (int a = 0; a < IR_NUM_AXES; a++) put(o, ir_axis_name((ir_axis)a), json_integer(m->size[a]));
  put(o, "sp", json_boolean(m->sp));
  put(o, "stage", m->stage >= 0 ? json_integer(m->stage) : json_null());
  return o;
}

/* {"name","dtype","shape","role"?,"shard"?} */
static json_t *value_json(const ir_value *v, ir_role default_role) {
  json_t *o = json_object();
  put(o, "name", str_json(v->name));
  put(o, "dtype", json_string(ir_dtype_name(v->type.dtype)));
  put(o, "shape", shape_json(&v->type));
  if (v->role != default_role) put(o, "role", json_string(ir_role_name(v->role)));
  put(o, "shard", shard_json(v));
  return o;
}

static json_t *init_json(ir_init init) {
  switch (init.kind) {
  case IR_INIT_NONE: return NULL;
  case IR_INIT_ZEROS: return json_pack("{s:s}", "kind", "zeros");
  case IR_INIT_ONES: return json_pack("{s:s}", "kind", "ones");
  case IR_INIT_NORMAL: return json_pack("{s:s,s:o}", "kind", "normal", "std", real_value(init.a));
  case IR_INIT_UNIFORM:
    return json_pack("{s:s,s:o,s:o}", "kind", "uniform", "low", real_value(init.a), "high",
                     real_value(init.b));
  }
  return NULL;
}

static json_t *attr_json(const ir_attr *a) {
  switch (a->kind) {
  case IR_ATTR_INT: return json_integer(a->i);
  case IR_ATTR_FLOAT: return real_value(a->f);
  case IR_ATTR_INTS: {
    json_t *arr = json_array();
    for (int k = 0; k < a->n; k++) push(arr, json_integer(a->ints[k]));
    return arr;
  }
  case IR_ATTR_STR: return str_json(a->s);
  case IR_ATTR_DTYPE: return json_pack("{s:s}", "dtype", ir_dtype_name((ir_dtype)a->i));
  case IR_ATTR_MESH_AXIS: return json_string(ir_axis_name((ir_axis)a->i)); /* "tp", as before axes were indices */
  }
  return NULL;
}

static json_t *node_json(const ir_node *n) {
  json_t *o = json_object(), *ins = json_array(), *outs = json_array(), *attrs = json_object();
  put(o, "op", json_string(ir_op_name(n->op)));
  for (int k = 0; k < n->n_in; k++) push(ins, str_json(n->in[k]->name));
  put(o, "inputs", ins);
  for (int r = 0; r < n->n_out; r++) push(outs, value_json(n->out[r], IR_ROLE_ACT));
  put(o, "outputs", outs);
  for (int k = 0; k < n->n_attrs; k++) put(attrs, n->attrs[k].key, attr_json(&n->attrs[k]));
  put(o, "attrs", attrs);
  put(o, "loc", loc_json(n->loc));
  if (n->layer >= 0) put(o, "layer", json_integer(n->layer));
  return o;
}

void ir_print_json(FILE *out, const ir_graph *g) {
  json_t *root = json_object();
  put(root, "format", json_string("tgc.ir.json"));
  put(root, "version", json_integer(1));
  put(root, "graph", str_json(g->name));
  put(root, "file", g->source_file ? str_json(g->source_file) : json_null());
  put(root, "mesh", mesh_json(&g->mesh));
  json_t *inputs = json_array(), *params = json_array(), *nodes = json_array(),
         *outputs = json_array();
  for (int k = 0; k < g->n_inputs; k++) {
    json_t *v = value_json(g->inputs[k], IR_ROLE_INPUT);
    put(v, "loc", loc_json(g->inputs[k]->loc));
    push(inputs, v);
  }
  for (int k = 0; k < g->n_params; k++) {
    json_t *v = value_json(g->params[k], IR_ROLE_PARAM);
    put(v, "init", init_json(g->params[k]->init));
    put(v, "loc", loc_json(g->params[k]->loc));
    push(params, v);
  }
  for (int k = 0; k < g->n_nodes; k++) push(nodes, node_json(g->nodes[k]));
  for (int k = 0; k < g->n_outputs; k++)
    push(outputs, json_pack("{s:o,s:o}", "name", str_json(g->outputs[k].name), "value",
                            str_json(g->outputs[k].value->name)));
  put(root, "inputs", inputs);
  put(root, "params", params);
  put(root, "nodes", nodes);
  put(root, "outputs", outputs);
  json_dumpf(root, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  fputc('\n', out);
  json_decref(root);
}
