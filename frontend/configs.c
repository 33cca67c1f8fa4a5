/* frontend/configs.c — config sets: choosing one (--config), binding its
 * constants with the -D overrides (fe_compile), and the configs of a file as
 * data (fe_configs, for the tools: which constants a config defines, their
 * values, where they are written).
 *
 * A config's entries are evaluated in order in the global scope, so each
 * sees the entries before it and nothing else; a -D value is parsed as an
 * integer, else as a real, and replaces the entry's expression. fe_configs
 * evaluates every config the same way (the -D overrides apply to the chosen
 * one), with the same evaluator fe_compile uses, so a value it gives is the
 * value the model is compiled with. It elaborates no function: a file whose
 * configs are fine but whose code is not still lists them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_die.h"
#include "sema.h"

/* Parses -D text as an integer or a float. */
static bool parse_define(const char *text, sv *out) {
  if (!text || !*text) return false;
  char *end;
  errno = 0;
  long long i = strtoll(text, &end, 10);
  if (*end == 0 && errno == 0) {
    *out = sv_int(i);
    return true;
  }
  errno = 0;
  double f = strtod(text, &end);
  if (*end == 0 && errno == 0 && end != text) {
    *out = sv_float(f);
    return true;
  }
  return false;
}

/* Config names compare with '-', '.' and '_' as the same character, so
 * `--config gpt3-2.7b` selects `config gpt3_2_7b` (identifiers cannot hold
 * '-' or '.', but the published model names do). */
static bool config_name_eq(const char *a, const char *b) {
  for (;; a++, b++) {
    char x = *a == '-' || *a == '.' ? '_' : *a, y = *b == '-' || *b == '.' ? '_' : *b;
    if (x != y) return false;
    if (!x) return true;
  }
}

const ast *fe_pick_config(fe_sema *S, const ast *items, const char *want, const char *path) {
  const ast *first = NULL, *dflt = NULL, *found = NULL;
  int n = 0;
  for (int i = 0; i < items->n; i++) {
    const ast *it = items->kid[i];
    if (it->kind != AST_CONFIG) continue;
    n++;
    if (!first) first = it;
    if (!dflt && strcmp(it->name, "default") == 0) dflt = it;
    if (want && !found && config_name_eq(it->name, want)) found = it;
  }
  if (!want) return dflt ? dflt : first;
  if (found) return found;
  if (n == 0) {
    ir_error_plain(S->d, "unknown config '%s': %s defines no configs", want, path);
  } else {
    char list[512];
    size_t k = 0;
    list[0] = 0;
    for (int i = 0; i < items->n && k < sizeof list - 80; i++)
      if (items->kid[i]->kind == AST_CONFIG)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "", items->kid[i]->name);
    ir_error_plain(S->d, "unknown config '%s'; available: %s", want, list);
  }
  S->errors++;
  return NULL;
}

/* Binds the entries of cfg into globals in order: entry K takes the value
 * of the last of defines[0..n) naming K (dv: their parsed values; POISON
 * for a malformed one), else its expression's. A name bound already (a
 * duplicate entry, reported by check_configs) keeps its first value. */
static void bind_entries(fe_sema *S, const ast *cfg, const fe_define *defines, int n, const sv *dv) {
  const ast *entries = cfg->kid[0];
  for (int i = 0; i < entries->n; i++) {
    const ast *e = entries->kid[i];
    if (fe_sym_find(&S->globals, e->name)) continue;
    sv v = sv_poison();
    int def = -1;
    for (int j = 0; j < n; j++)
      if (strcmp(defines[j].name, e->name) == 0) def = j; /* the last -D wins */
    if (def >= 0) {
      v = dv[def];
    } else {
      v = fe_eval(S, e->kid[0], NULL, 0);
      if (v.kind != SV_POISON && !sv_is_const(v)) {
        fe_error(S, e->kid[0], "config constant '%s' must be a number, got %s", e->name, fe_describe(S, v));
        v = sv_poison();
      }
    }
    fe_sym *s = fe_sym_put(&S->globals, e->name);
    s->kind = SYM_CONST;
    s->decl = e;
    s->val = v;
  }
}

bool fe_bind_config(fe_sema *S, const ast *cfg, const fe_options *opt) {
  bool ok = true;
  sv *dv = calloc((size_t)(opt->n_defines > 0 ? opt->n_defines : 1), sizeof *dv);
  if (!dv) IR_DIE("out of memory (dv)");
  for (int j = 0; j < opt->n_defines; j++) {
    const fe_define *def = &opt->defines[j];
    if (!parse_define(def->value, &dv[j])) {
      ir_error_plain(S->d, "-D %s=%s: value is not a number", def->name, def->value ? def->value : "");
      S->errors++;
      ok = false;
      continue;
    }
    bool known = false;
    for (int i = 0; cfg && i < cfg->kid[0]->n; i++)
      if (strcmp(cfg->kid[0]->kid[i]->name, def->name) == 0) known = true;
    if (!known) {
      if (cfg)
        ir_error_plain(S->d, "-D %s=%s: config '%s' has no constant '%s'", def->name, def->value, cfg->name,
                       def->name);
      else
        ir_error_plain(S->d, "-D %s=%s: the file defines no config constants", def->name, def->value);
      S->errors++;
      ok = false;
    }
  }
  if (ok && cfg) bind_entries(S, cfg, opt->defines, opt->n_defines, dv);
  free(dv);
  return ok;
}

/* ---------------------------------------------------------------------- */
/* fe_configs                                                              */
/* ---------------------------------------------------------------------- */

/* The value entry e of the config just bound holds. */
static fe_const const_of(fe_sema *S, const ast *e, bool overridden) {
  fe_const c = {.name = e->name, .loc = fe_loc(S, e), .overridden = overridden};
  const ast *x = e->kid[0];
  c.text = ir_arena_strndup(S->arena, S->text + x->start, (size_t)(x->end > x->start ? x->end - x->start : 0));
  const fe_sym *s = fe_sym_find(&S->globals, e->name);
  if (!s || s->decl != e) return c; /* a duplicate entry: the first one holds the name */
  switch (s->val.kind) {
  case SV_INT: c.kind = FE_CONST_INT; break;
  case SV_FLOAT: c.kind = FE_CONST_REAL; break;
  case SV_BOOL: c.kind = FE_CONST_BOOL; break;
  default: return c;
  }
  c.i = s->val.i;
  c.f = sv_num(s->val);
  return c;
}

fe_config_set *fe_configs(const char *path, const char *text, size_t len, const fe_options *opt, ir_diag *d) {
  static const fe_options no_options;
  if (!opt) opt = &no_options;
  if (!path) path = "<input>";
  if (!text) text = "";
  /* evaluation problems are fe_compile's to report: S reports into a sink */
  char *sink_buf = NULL;
  size_t sink_len = 0;
  FILE *sink = open_memstream(&sink_buf, &sink_len);
  if (!sink) IR_DIE("out of memory (sink)");
  ir_diag *quiet = ir_diag_new(sink);
  fe_sema S = {.d = quiet, .arena = ir_arena_new(), .text = text, .layer = -1, .const_only = true,
               .builtins = &fe_builtins};
  S.file = ir_arena_strdup(S.arena, path); /* locations live as long as the set */
  ir_diag_add_source(d ? d : quiet, path, text, len);
  fe_parser P = {.arena = S.arena, .d = d ? d : quiet, .path = path, .text = text, .len = len};
  const ast *items = fe_parse(&P);
  fe_config_set *set = NULL;
  if (items) {
    set = ir_arena_alloc(S.arena, sizeof *set);
    const ast *chosen = fe_pick_config(&S, items, opt->config, path);
    int n = 0;
    for (int i = 0; i < items->n; i++) n += items->kid[i]->kind == AST_CONFIG;
    fe_config *cs = ir_arena_alloc(S.arena, sizeof *cs * (size_t)(n ? n : 1));
    const ast *dflt = fe_pick_config(&S, items, NULL, path);
    sv *dv = ir_arena_alloc(S.arena, sizeof *dv * (size_t)(opt->n_defines ? opt->n_defines : 1));
    for (int j = 0; j < opt->n_defines; j++)
      if (!parse_define(opt->defines[j].value, &dv[j])) dv[j] = sv_poison();
    for (int i = 0; i < items->n; i++) {
      const ast *it = items->kid[i];
      if (it->kind != AST_CONFIG) continue;
      fe_config *c = &cs[set->n_configs++];
      const ast *entries = it->kid[0];
      fe_const *consts = ir_arena_alloc(S.arena, sizeof *consts * (size_t)(entries->n ? entries->n : 1));
      fe_symtab_free(&S.globals); /* other configs' constants are not visible */
      memset(&S.globals, 0, sizeof S.globals);
      int n_defines = it == chosen ? opt->n_defines : 0;
      bind_entries(&S, it, opt->defines, n_defines, dv);
      for (int k = 0; k < entries->n; k++) {
        bool overridden = false;
        for (int j = 0; j < n_defines; j++) overridden |= strcmp(opt->defines[j].name, entries->kid[k]->name) == 0;
        consts[k] = const_of(&S, entries->kid[k], overridden);
      }
      *c = (fe_config){it->name, fe_loc(&S, it), it == dflt, consts, entries->n};
      if (it == chosen) set->chosen = c;
    }
    set->configs = cs;
    set->arena = S.arena;
    S.arena = NULL; /* the set owns the syntax tree's arena: names and texts live in it */
  }
  fe_symtab_free(&S.globals);
  free(S.path);
  free(S.reported);
  ir_arena_free(S.arena);
  ir_diag_free(quiet);
  fclose(sink);
  free(sink_buf);
  return set;
}

void fe_config_set_free(fe_config_set *s) {
  if (s) ir_arena_free(s->arena); /* s itself lives in its arena */
}

const fe_const *fe_config_const(const fe_config *c, const char *name) {
  for (int i = 0; c && i < c->n_consts; i++)
    if (strcmp(c->consts[i].name, name) == 0) return &c->consts[i];
  return NULL;
}
