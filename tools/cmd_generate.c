/* tools/cmd_generate.c — `tgc generate`: sample text from a language model
 * (an input "tokens" i32[B, T] and an output "logits" [B, T, V], as
 * examples/gpt.tg), its parameters from a training state (--resume) or the
 * seed. The model is compiled once at B = 1; each step runs the whole
 * forward over the tokens so far (causal: the positions after them do not
 * change the logits read) and picks the next token from the logits of the
 * last one: greedy (temperature 0, the default), or sampled with
 * temperature, top-k and top-p, deterministic by --seed. Prompt text is
 * token ids through --tokenizer tokenizer.json, else bytes (ids 0..255, the
 * vocabulary of `tgc train --data text:PATH`).
 * With the KV cache (the default) the model is compiled twice, once each:
 * a prefill graph (the window, with the cache of every layer as outputs)
 * and a decode graph (one token at a position, the cache read and updated
 * in place; passes/kv_cache.c), run by rt_generator. --no-kv-cache runs the
 * whole forward over the window at every step instead. Under mpirun with
 * --mesh each rank runs its block of the graphs (run_mesh.c binds the
 * parameters on the one-device graph and hands each rank its blocks). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_clock.h"
#include "ir_die.h"
#include "rt_tokenizer.h"
#include "tool.h"

static const char *const generate_help =
    "usage: tgc generate FILE --prompt TEXT --max-new-tokens N [--resume STATE | --weights PATH [--map MAP]]\n"
    "                    [--tokenizer F]\n"
    "                    [--temperature T] [--top-k K] [--top-p P] [--seed S] [--json]\n"
    "                    [--no-kv-cache] [--timing] [--config NAME] [-D NAME=VALUE] [--backend NAME]\n"
    "\n"
    "Continues TEXT with N tokens from a model with an input tokens [B, T] and an output\n"
    "logits [B, T, V] (examples/gpt.tg), at B = 1. With the KV cache (the default) it is\n"
    "compiled twice, once each: a prefill graph over the prompt that outputs every layer's\n"
    "keys and values, and a decode graph (-D T=1) that reads one token at a position and\n"
    "the cache, writing its row in place.\n"
    "\n"
    "  --resume STATE       parameters from a state saved by tgc train --save (its --vocab and\n"
    "                       --seq-len are the model's V and T); else initialized from --seed\n"
    "  --tokenizer F        a tokenizer.json for the prompt and the output text (default: the\n"
    "                       state's, when it was trained with one); without one, text is\n"
    "                       bytes: token b is byte b (as --data text:PATH trains)\n"
    "  --temperature T      0 (the default): greedy, the most likely token; else sample from\n"
    "                       softmax(logits / T)\n"
    "  --top-k K            sample among the K most likely tokens only (0: all, the default)\n"
    "  --top-p P            sample among the most likely tokens whose probabilities add up to P\n"
    "  --seed S             the sampling stream and parameter initialization (default 0)\n"
    "  --json               print {\"ids\": [the new ids], \"text\": \"their text\"}\n"
    "  --no-kv-cache        recompute the full forward over the window at every step\n"
    "  --timing             print to stderr the prefill's time and the decode steps' (with the\n"
    "                       cache): their positions, seconds and tokens/s (bench/generate.sh);\n"
    "                       then the device memory, predicted by the plans and measured\n";
static const char *const generate_help_tail =
    "\n"
    "A prompt longer than the context T is refused; once prompt and output fill T, the\n"
    "oldest tokens leave the window (each step is then a prefill of the last T tokens).\n"
    "Greedy output with the cache equals --no-kv-cache's, token for token.\n"
    "\n"
    "On a mesh (the cpu backend, MPI ranks): mpirun -np N tgc generate FILE --mesh tp=N ...\n"
    "runs each rank's block of both graphs (the shard pass's layouts); rank 0 prints, the\n"
    "same tokens as one device.\n";

extern const char *const tool_common_help;

typedef struct {
  const char *prompt, *resume, *tokenizer;
  int64_t max_new, top_k;
  double temperature, top_p;
  uint64_t seed;
  bool json, no_cache, timing;
} gen_opts;

/* A float flag's value in [lo, hi]. */
static int parse_real(const char *flag, const char *v, double lo, double hi, double *out, ir_diag *d) {
  char *end = NULL;
  double x = v ? strtod(v, &end) : NAN;
  if (!v || !*v || *end || !(x >= lo && x <= hi)) {
    ir_error_plain(d, "%s needs a number in [%g, %g], not '%s'", flag, lo, hi, v ? v : "");
    return -1;
  }
  *out = x;
  return 0;
}

/* The flags of generate at argv[*i]: 1 consumed, 0 not one of them, -1 reported. */
static int parse_gen_flag(gen_opts *g, int argc, char **argv, int *i, ir_diag *d) {
  const char *v = NULL;
  int64_t n = 0;
  if (tool_flag("--prompt", argc, argv, i, &v)) {
    if (!v) return ir_error_plain(d, "--prompt needs TEXT"), -1;
    g->prompt = v;
  } else if (tool_flag("--resume", argc, argv, i, &v)) {
    if (!v || !*v) return ir_error_plain(d, "--resume needs a STATE file"), -1;
    g->resume = v;
  } else if (tool_flag("--tokenizer", argc, argv, i, &v)) {
    if (!v || !*v) return ir_error_plain(d, "--tokenizer needs a tokenizer.json"), -1;
    g->tokenizer = v;
  } else if (tool_flag("--max-new-tokens", argc, argv, i, &v)) {
    if (!v || !tool_parse_int(v, 1, 1000000, &g->max_new))
      return ir_error_plain(d, "--max-new-tokens needs an integer in [1, 1000000], not '%s'", v ? v : ""), -1;
  } else if (tool_flag("--top-k", argc, argv, i, &v)) {
    if (!v || !tool_parse_int(v, 0, INT32_MAX, &g->top_k))
      return ir_error_plain(d, "--top-k needs a non-negative integer, not '%s'", v ? v : ""), -1;
  } else if (tool_flag("--seed", argc, argv, i, &v)) {
    if (!v || !tool_parse_int(v, 0, INT64_MAX, &n))
      return ir_error_plain(d, "--seed needs a non-negative integer, not '%s'", v ? v : ""), -1;
    g->seed = (uint64_t)n;
  } else if (tool_flag("--temperature", argc, argv, i, &v)) {
    return parse_real("--temperature", v, 0, 1000, &g->temperature, d) ? -1 : 1;
  } else if (tool_flag("--top-p", argc, argv, i, &v)) {
    return parse_real("--top-p", v, 1e-9, 1, &g->top_p, d) ? -1 : 1;
  } else if (strcmp(argv[*i], "--json") == 0) {
    g->json = true;
  } else if (strcmp(argv[*i], "--no-kv-cache") == 0) {
    g->no_cache = true;
  } else if (strcmp(argv[*i], "--timing") == 0) {
    g->timing = true;
  } else {
    return 0;
  }
  return 1;
}

/* -D B=1, and the state's sizes (metadata vocab, seq_len; st may be NULL)
 * as -D V / -D T, for each the chosen config has. store keeps the values
 * alive with o. */
static int model_sizes(tool_compile_opts *o, const rt_safetensors *st, char store[2][32], ir_diag *d) {
  fe_config_set *cs = tool_configs(o);
  const fe_config *c = cs ? cs->chosen : NULL;
  static const char *const keys[2] = {"vocab", "seq_len"}, *const consts[2] = {"V", "T"};
  int rc = c && fe_config_const(c, "B") ? tool_add_define(o, "B", "1", d) : 0;
  for (int k = 0; k < 2 && rc == 0; k++) {
    const char *v = st ? rt_safetensors_meta(st, keys[k]) : NULL;
    if (!v || !c || !fe_config_const(c, consts[k])) continue;
    snprintf(store[k], sizeof store[k], "%s", v);
    if (tool_add_define(o, consts[k], store[k], d) != 0) rc = -1;
  }
  fe_config_set_free(cs);
  return rc;
}

/* The state's tensor of each parameter, same dtype and shape, into params. */
static int load_params(const ir_graph *g, const rt_safetensors *st, const char *path, rt_tensor **params,
                       ir_diag *d) {
  for (int i = 0; i < g->n_params; i++) {
    const ir_value *p = g->params[i];
    const rt_tensor *t = rt_safetensors_find(st, p->name);
    char a[128], b[128];
    if (!t) return ir_error_plain(d, "%s: no tensor \"%s\" (a parameter of the model)", path, p->name), -1;
    if (!ir_type_equal(&t->type, &p->type))
      return ir_error_plain(d, "%s: tensor \"%s\" is %s but the model's parameter is %s", path, p->name,
                            ir_type_str(&t->type, a, sizeof a), ir_type_str(&p->type, b, sizeof b)),
             -1;
    memcpy(params[i]->data, t->data, t->nbytes);
  }
  return 0;
}

typedef struct {
  float p;
  int32_t id;
} cand;
static int by_prob_desc(const void *x, const void *y) {
  const cand *a = x, *b = y;
  return a->p > b->p ? -1 : a->p < b->p ? 1 : a->id - b->id;
}

/* The next token from V logits: the argmax (lowest id on a tie) at
 * temperature 0, else a draw (u in [0, 1)) from the tempered softmax
 * restricted to top-k, then top-p. c has room for V. */
static int32_t pick(const float *logits, int64_t V, const gen_opts *o, double u, cand *c) {
  if (o->temperature == 0) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
      if (logits[v] > logits[best]) best = v;
    return (int32_t)best;
  }
  float mx = logits[0];
  for (int64_t v = 1; v < V; v++) mx = fmaxf(mx, logits[v]);
  for (int64_t v = 0; v < V; v++) c[v].p = (float)exp((logits[v] - mx) / o->temperature), c[v].id = (int32_t)v;
  qsort(c, (size_t)V, sizeof *c, by_prob_desc);
  int64_t n = o->top_k > 0 && o->top_k < V ? o->top_k : V;
  double sum = 0;
  for (int64_t k = 0; k < n; k++) sum += c[k].p;
  if (o->top_p > 0 && o->top_p < 1) {
    double acc = 0;
    for (int64_t k = 0; k < n; k++)
      if ((acc += c[k].p / sum) >= o->top_p) {
        n = k + 1;
        break;
      }
    sum = 0;
    for (int64_t k = 0; k < n; k++) sum += c[k].p;
  }
  double target = u * sum, acc = 0;
  for (int64_t k = 0; k < n; k++)
    if ((acc += c[k].p) > target) return c[k].id;
  return c[n - 1].id;
}

/* The prompt's ids (byte ids without a tokenizer); -1 after reporting. */
static int encode_prompt(const rt_tokenizer *tk, const char *text, int32_t **ids, size_t *n, ir_diag *d) {
  char err[512];
  if (tk) {
    if (rt_tokenizer_encode(tk, text, strlen(text), false, ids, n, err, sizeof err) != 0)
      return ir_error_plain(d, "--prompt: %s", err), -1;
    return 0;
  }
  *n = strlen(text);
  if (!(*ids = malloc((*n + 1) * sizeof **ids))) IR_DIE("out of memory ((*ids = malloc((*n + 1) * sizeof **ids)))");
  for (size_t i = 0; i < *n; i++) (*ids)[i] = (unsigned char)text[i];
  return 0;
}

/* The text of ids (malloc'd, *len bytes); NULL after reporting. */
static char *decode_ids(const rt_tokenizer *tk, const int32_t *ids, size_t n, size_t *len, ir_diag *d) {
  char err[512];
  if (tk) {
    char *s = rt_tokenizer_decode(tk, ids, n, true, len, err, sizeof err);
    if (!s) ir_error_plain(d, "decoding the output: %s", err);
    return s;
  }
  char *s = malloc(n + 1);
  if (!s) IR_DIE("out of memory (s)");
  for (size_t i = 0; i < n; i++) s[i] = (char)(ids[i] & 0xff); /* ids < 256 but for a model of a larger V */
  s[n] = 0;
  *len = n;
  return s;
}


/* The generation loop on a compiled g: ids (room for max_new more) grows
 * by max_new tokens; -1 after reporting. */
static int generate(const tool_backend *tb, tool_mesh_run *mr, const ir_graph *g, const ir_graph *gw,
                    const gen_opts *o, int32_t *ids, size_t n_prompt, tool_slots *s, ir_diag *d) {
  int ti = ir_graph_input_index(gw, "tokens"), li = ir_graph_output_index(gw, "logits");
  const ir_type *tt = &gw->inputs[ti]->type, *lt = &gw->outputs[li].value->type;
  int64_t T = tt->dims[1], V = lt->dims[lt->rank - 1];
  if (lt->dtype != IR_DT_F32)
    return ir_error_plain(d, "generate: the logits are %s; only f32 logits are read", ir_dtype_name(lt->dtype)), -1;
  cand *c = malloc((size_t)V * sizeof *c);
  if (!c) IR_DIE("out of memory (c)");
  int rc = 0;
  size_t n = n_prompt;
  for (int64_t step = 0; step < o->max_new && rc == 0; step++) {
    size_t start = n > (size_t)T ? n - (size_t)T : 0, len = n - start; /* the window: the last T tokens */
    int32_t *tok = s->inputs[ti]->data;
    memset(tok, 0, (size_t)T * sizeof *tok);
    memcpy(tok, ids + start, len * sizeof *tok);
    for (int k = 0; k < gw->n_outputs; k++) rt_tensor_free(s->outputs[k]), s->outputs[k] = NULL;
    rt_stats stats = {0};
    if (mr->comm ? tool_mesh_run_execute(mr, g, s->inputs, s->params, s->outputs, &stats, d) != 0
                 : tool_execute(tb, g, s->inputs, s->params, s->outputs, &stats, d) != 0) {
      rc = -1;
      break;
    }
    const float *row = (const float *)s->outputs[li]->data + (len - 1) * (size_t)V;
    ids[n++] = pick(row, V, o, rt_random_uniform(o->seed, 0x67656eu, (uint64_t)step), c);
  }
  free(c);
  return rc;
}

/* The same loop over the KV cache: the prefill of the prompt, then one
 * decode step per token while the positions fit the window T; past it,
 * each step is a prefill of the last T tokens (the window slides: the
 * positions of the cached rows would change), exactly what --no-kv-cache
 * computes. */
static int generate_cached(const tool_backend *tb, const tool_mesh_run *mr, const ir_graph *pre, const ir_graph *dec,
                           int pos_input, const gen_opts *o, int32_t *ids, size_t n_prompt,
                           rt_tensor *const *params, rt_tensor *const *dec_params, ir_diag *d) {
  int li = ir_graph_output_index(pre, "logits");
  const ir_type *lt = &pre->outputs[li].value->type;
  int64_t T = pre->inputs[ir_graph_input_index(pre, "tokens")]->type.dims[1], V = lt->dims[lt->rank - 1];
  if (lt->dtype != IR_DT_F32)
    return ir_error_plain(d, "generate: the logits are %s; only f32 logits are read", ir_dtype_name(lt->dtype)), -1;
  char err[1024] = "";
  const rt_backend *b = tb && tb->backend ? tb->backend : &rt_cpu_backend;
  rt_generator_options go = {.comm = mr->comm};
  rt_generator *gen = rt_generator_new(b, &tb->device, pre, dec, pos_input, params, dec_params, &go, err, sizeof err);
  if (!gen) return ir_error_plain(d, "%s", err), -1;
  cand *c = malloc((size_t)V * sizeof *c);
  float *row = malloc((size_t)V * sizeof *row);
  if (!c || !row) IR_DIE("out of memory (c, row)");
  int rc = 0;
  size_t n = n_prompt;
  /* --timing: the prefills' and the decode steps' wall time (each step's
   * logits read back to the host, as generation does) */
  double t_prefill = 0, t_decode = 0;
  int64_t n_prefill = 0, n_decode = 0, first_pos = -1, last_pos = -1;
  for (int64_t step = 0; step < o->max_new && rc == 0; step++) {
    double t0 = ir_clock_s();
    if (step == 0 || n > (size_t)T) { /* the window: the last T tokens */
      size_t start = n > (size_t)T ? n - (size_t)T : 0;
      rc = rt_generator_prefill(gen, ids + start, (int64_t)(n - start), row, err, sizeof err);
      t_prefill += ir_clock_s() - t0, n_prefill++;
    } else {
      rc = rt_generator_decode(gen, ids[n - 1], (int64_t)(n - 1), row, err, sizeof err);
      t_decode += ir_clock_s() - t0, n_decode++;
      if (first_pos < 0) first_pos = (int64_t)(n - 1);
      last_pos = (int64_t)(n - 1);
    }
    if (rc != 0) {
      ir_error_plain(d, "%s", err);
      break;
    }
    ids[n++] = pick(row, V, o, rt_random_uniform(o->seed, 0x67656eu, (uint64_t)step), c);
  }
  if (rc == 0 && o->timing) {
    fprintf(stderr, "timing: %lld prefill%s in %.6f s", (long long)n_prefill, n_prefill == 1 ? "" : "s", t_prefill);
    if (n_decode > 0)
      fprintf(stderr, "; %lld decode steps at positions %lld..%lld in %.6f s: %.2f tokens/s", (long long)n_decode,
              (long long)first_pos, (long long)last_pos, t_decode, (double)n_decode / t_decode);
    fputc('\n', stderr);
    rt_generator_memory m = rt_generator_memory_use(gen);
    fprintf(stderr, "memory: predicted %zu bytes, measured %zu (the KV cache %zu bytes, placed by the memory plan)\n",
            m.predicted, m.measured, m.cache);
  }
  free(c);
  free(row);
  rt_generator_free(gen);
  return rc;
}

/* -D NAME=VALUE in o, replacing one given before. */
static int set_define(tool_compile_opts *o, const char *name, const char *value, ir_diag *d) {
  for (int i = 0; i < o->fe.n_defines; i++)
    if (strcmp(o->defines[i].name, name) == 0) {
      o->defines[i].value = value;
      return 0;
    }
  return tool_add_define(o, name, value, d);
}

/* The first passes of the cache's graphs: canonicalize (the inference
 * form of dropout goes) and fuse-attention. */
static int front_passes(ir_graph *g, ir_diag *d) {
  static const pass_id front[] = {PASS_CANONICALIZE, PASS_FUSE_ATTENTION};
  pass_options po = {.diag = d};
  return pass_run_pipeline(g, front, 2, &po);
}

/* Every parameter of dec (the model at T = 1) is one of whole's (the model
 * at the window), of the same type: both graphs bind the same tensors. */
static int same_params(const ir_graph *dec, const ir_graph *whole, const char *file, ir_diag *d) {
  for (int i = 0; i < dec->n_params; i++) {
    const ir_value *p = dec->params[i], *w = NULL;
    for (int j = 0; j < whole->n_params && !w; j++)
      if (strcmp(whole->params[j]->name, p->name) == 0) w = whole->params[j];
    char a[128], b[128];
    if (!w || !ir_type_equal(&w->type, &p->type)) {
      ir_error(d, p->loc,
               "generate: parameter %s is %s in the model at its window but %s at T = 1 (the decode graph): the KV "
               "cache needs parameters that do not depend on T; --no-kv-cache runs %s",
               p->name, w ? ir_type_str(&w->type, a, sizeof a) : "absent", ir_type_str(&p->type, b, sizeof b), file);
      return -1;
    }
  }
  return 0;
}

/* The decode graph: the model loaded again at T = 1, made a decode step
 * over a cache of `window` rows (its parameters those of whole, the model
 * on one device); NULL after reporting. *text: its source, which d quotes
 * in messages (the caller frees it after the last one). */
static ir_graph *decode_graph(const tool_compile_opts *o, const ir_graph *whole, int64_t window, int *pos_input,
                              char **text, ir_diag *d) {
  fe_config_set *cs = tool_configs(o);
  bool has_t = cs && cs->chosen && fe_config_const(cs->chosen, "T");
  fe_config_set_free(cs);
  if (!has_t) {
    ir_error_plain(d, "%s: generate with the KV cache compiles the model at T = 1 and needs the window as a config "
                      "constant T (as examples/gpt.tg); --no-kv-cache runs without it",
                   o->file);
    return NULL;
  }
  tool_compile_opts o1 = *o;
  o1.after = NULL;
  if (set_define(&o1, "T", "1", d) != 0) return NULL;
  ir_graph *g = tool_load(&o1, d, text);
  int n_layers = 0;
  if (g && (same_params(g, whole, o->file, d) != 0 || front_passes(g, d) != 0 ||
            pass_kv_decode(g, window, &n_layers, pos_input, d) != 0 ||
            tool_run_passes(g, &o1, d, stdout) != 0)) {
    ir_graph_free(g);
    return NULL;
  }
  return g;
}

/* The model's shape for generation: an input tokens i32[1, T], an output logits [1, T, V]. */
static int check_model(const ir_graph *g, const char *file, ir_diag *d) {
  int ti = ir_graph_input_index(g, "tokens"), li = ir_graph_output_index(g, "logits");
  if (ti < 0 || li < 0)
    return ir_error_plain(d, "%s: generate needs an input \"tokens\" and an output \"logits\" (as examples/gpt.tg)",
                          file),
           -1;
  const ir_type *tt = &g->inputs[ti]->type, *lt = &g->outputs[li].value->type;
  if (tt->dtype != IR_DT_I32 || tt->rank != 2 || tt->dims[0] != 1 || lt->rank != 3 || lt->dims[1] != tt->dims[1])
    return ir_error_plain(d, "%s: generate needs tokens i32[1, T] and logits [1, T, V] (is B a config constant?)",
                          file),
           -1;
  return 0;
}

/* At s[0..n) (n > 0): the length of the valid UTF-8 sequence there (> 0),
 * or minus the length of its maximal ill-formed subpart (the bytes that
 * begin some valid sequence; at least one), which Unicode (and Python's
 * decode(errors="replace")) replaces with one U+FFFD. */
static long utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (len == 0) return -1;
  /* the second byte's range (E0: no overlong, ED: no surrogate, F0/F4: U+10000..U+10FFFF) */
  unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80, hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
  for (size_t k = 1; k < len; k++) {
    if (k >= n || s[k] < (k == 1 ? lo : 0x80) || s[k] > (k == 1 ? hi : 0xbf)) return -(long)k;
  }
  return (long)len;
}

/* text as valid UTF-8 for JSON, ill-formed parts replaced with U+FFFD as
 * Python's decode(errors="replace") does. malloc'd; *out_len its bytes. */
static char *utf8_repair(const char *text, size_t len, size_t *out_len) {
  char *r = malloc(3 * len + 1);
  if (!r) IR_DIE("out of memory (r)");
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    long k = utf8_seq((const unsigned char *)text + i, len - i);
    if (k > 0) memcpy(r + o, text + i, (size_t)k), o += (size_t)k, i += (size_t)k;
    else memcpy(r + o, "\xef\xbf\xbd", 3), o += 3, i += (size_t)-k;
  }
  r[o] = 0;
  *out_len = o;
  return r;
}

static void print_result(const int32_t *ids, size_t n, const char *text, size_t len, bool json) {
  if (json) {
    json_t *root = json_object(), *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    json_object_set_new(root, "ids", arr);
    size_t n_ok = 0;
    char *ok = utf8_repair(text, len, &n_ok);
    json_object_set_new(root, "text", json_stringn(ok, n_ok));
    free(ok);
    json_dumpf(root, stdout, JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    fputc('\n', stdout);
    json_decref(root);
  } else {
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
  }
}

/* The flags of tgc generate, checked. */
typedef struct {
  tool_compile_opts o;
  gen_opts go;
  tool_backend backend;
  tool_weights weights;
} gen_args;

static int parse_generate_args(int argc, char **argv, gen_args *a, ir_diag *d) {
  for (int i = 1; i < argc; i++) {
    int r = tool_parse_common(&a->o, argc, argv, &i, d);
    if (r == 0) r = parse_gen_flag(&a->go, argc, argv, &i, d);
    if (r == 0) r = tool_parse_weights_flag(argc, argv, &i, &a->weights, d);
    if (r == 0) r = tool_parse_backend(argc, argv, &i, &a->backend, d);
    if (r < 0 || (r == 0 && tool_positional("generate", argv[i], &a->o, d) != 0)) return -1;
  }
  if (tool_need_file("generate", &a->o, d) != 0) return -1;
  a->weights.model = a->o.file;
  if (a->go.timing && a->go.no_cache) {
    ir_error_plain(d, "generate: --timing times the KV cache's prefill and decode steps; leave out --no-kv-cache");
    return -1;
  }
  if (a->go.resume && a->weights.path) {
    ir_error_plain(d, "generate: give the parameters by --resume STATE or by --weights PATH, not both");
    return -1;
  }
  if (!a->go.prompt || a->go.max_new == 0) {
    ir_error_plain(d, "generate: %s is required", !a->go.prompt ? "--prompt TEXT" : "--max-new-tokens N");
    return -1;
  }
  return 0;
}

/* The prompt's ids fit graph g: some, at most its context T, each below its vocabulary V. */
static int check_prompt(const ir_graph *g, const rt_tokenizer *tk, const int32_t *ids, size_t n, ir_diag *d) {
  int ti = ir_graph_input_index(g, "tokens"), li = ir_graph_output_index(g, "logits");
  int64_t T = g->inputs[ti]->type.dims[1], V = g->outputs[li].value->type.dims[2];
  if (n == 0) {
    ir_error_plain(d, "--prompt: the prompt has no tokens");
    return -1;
  }
  if ((int64_t)n > T) {
    ir_error_plain(d, "--prompt: the prompt is %zu tokens, longer than the model's context of %lld", n, (long long)T);
    return -1;
  }
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= V) {
      ir_error_plain(d, "--prompt: token %lld (position %zu) is outside the model's vocabulary of %lld%s",
                     (long long)ids[i], i, (long long)V, tk ? "" : " (text is bytes: give --vocab 256 to train)");
      return -1;
    }
  return 0;
}

/* With the KV cache: the decode graph made from gw, the parameters as each
 * graph binds them (with a mesh: this rank's blocks), and the tokens. */
static int run_cached(const gen_args *a, tool_mesh_run *mr, const ir_graph *g, const ir_graph *gw, tool_slots *slots,
                      int32_t *ids, size_t n_prompt, ir_diag *ed) {
  int64_t T = g->inputs[ir_graph_input_index(g, "tokens")]->type.dims[1];
  int pos_input = -1, rc = 0;
  char *dec_text = NULL;
  ir_graph *dec = decode_graph(&a->o, gw, T, &pos_input, &dec_text, ed);
  rt_tensor **local[2] = {NULL, NULL}; /* with a mesh: this rank's blocks of the parameters of g, dec */
  if (!dec) rc = -1;
  const ir_graph *gs[2] = {g, dec};
  for (int k = 0; k < 2 && rc == 0 && mr->comm; k++) {
    if (!(local[k] = calloc((size_t)gs[k]->n_params + 1, sizeof *local[k]))) IR_DIE("out of memory (local)");
    if (tool_mesh_run_params(mr, gs[k], slots->params, local[k], ed) != 0) rc = -1;
  }
  if (rc == 0 && generate_cached(&a->backend, mr, g, dec, pos_input, &a->go, ids, n_prompt,
                                 mr->comm ? local[0] : slots->params, mr->comm ? local[1] : slots->params, ed) != 0)
    rc = -1;
  for (int k = 0; k < 2; k++) {
    for (int i = 0; local[k] && i < gs[k]->n_params; i++) rt_tensor_free(local[k][i]);
    free(local[k]);
  }
  ir_graph_free(dec);
  free(dec_text);
  return rc;
}

int tool_cmd_generate(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s%s%s\n%s", generate_help, tool_weights_help, tool_backend_help, generate_help_tail,
             tool_common_help);
      return 0;
    }
  ir_diag *d = tool_diag_new();
  gen_args a = {0};
  char err[512], store[2][32];
  rt_safetensors *st = NULL;
  rt_tokenizer *tk = NULL;
  int rc = parse_generate_args(argc, argv, &a, d);
  if (rc == 0 && a.go.resume && !(st = rt_safetensors_read(a.go.resume, err, sizeof err)))
    ir_error_plain(d, "--resume: %s", err), rc = -1;
  if (rc == 0 && !a.go.tokenizer && st) a.go.tokenizer = rt_safetensors_meta(st, "tokenizer"); /* train --tokenizer's */
  if (rc == 0 && a.go.tokenizer && !(tk = rt_tokenizer_load(a.go.tokenizer, err, sizeof err)))
    ir_error_plain(d, "--tokenizer: %s", err), rc = -1;
  if (rc == 0 && model_sizes(&a.o, st, store, d) != 0) rc = -1;
  /* --mesh of more than one rank: each rank runs its block of the graphs
   * (run_mesh.c); the parameters are bound on the one-device graph */
  tool_mesh_run mr = {.command = "generate"};
  if (rc == 0 && a.o.mesh_set && ir_mesh_ranks(&a.o.mesh) > 1 && tool_mesh_run_open(&mr, &a.o, &a.backend, d) != 0)
    rc = -1;
  ir_diag *ed = mr.diag ? mr.diag : d; /* ranks other than 0 print nothing */
  char *text = NULL;
  ir_graph *g = NULL;
  int n_layers = 0;
  if (rc == 0 && !(g = tool_load(&a.o, ed, &text))) rc = -1;
  if (rc == 0 && check_model(g, a.o.file, ed) != 0) rc = -1;
  if (rc == 0 && !a.go.no_cache && (front_passes(g, ed) != 0 || pass_kv_prefill(g, &n_layers, ed) != 0)) rc = -1;
  if (rc == 0 && tool_run_passes(g, &a.o, ed, stdout) != 0) rc = -1;
  if (rc == 0 && mr.comm && tool_mesh_run_compile_whole(&mr, &a.o) != 0) rc = -1;
  ir_graph *gw = mr.whole ? mr.whole : g; /* the graph whose values are bound: one device's */
  if (rc == 0 && tool_check_memory(g, ed) != 0) rc = -1;
  tool_slots slots = {0};
  tool_input_spec *specs = gw ? calloc((size_t)gw->n_inputs + 1, sizeof *specs) : NULL;
  for (int i = 0; gw && i < gw->n_inputs; i++) specs[i] = (tool_input_spec){gw->inputs[i]->name, "0"};
  if (gw) tool_alloc_slots(gw, &slots);
  if (rc == 0 && tool_bind_all(gw, specs, gw->n_inputs, a.go.seed, true, slots.inputs, slots.params, ed) != 0) rc = -1;
  if (rc == 0 && st && load_params(gw, st, a.go.resume, slots.params, ed) != 0) rc = -1;
  if (rc == 0 && tool_bind_weights(gw, &a.weights, slots.params, ed) != 0) rc = -1;
  int32_t *ids = NULL;
  size_t n_prompt = 0;
  if (rc == 0 && encode_prompt(tk, a.go.prompt, &ids, &n_prompt, ed) != 0) rc = -1;
  if (rc == 0 && check_prompt(gw, tk, ids, n_prompt, ed) != 0) rc = -1;
  if (rc == 0 && !(ids = realloc(ids, (n_prompt + (size_t)a.go.max_new) * sizeof *ids))) IR_DIE("out of memory (ids)");
  if (rc == 0 && !a.go.no_cache) rc = run_cached(&a, &mr, g, gw, &slots, ids, n_prompt, ed);
  else if (rc == 0 && generate(&a.backend, &mr, g, gw, &a.go, ids, n_prompt, &slots, ed) != 0) rc = -1;
  size_t len = 0;
  char *out = rc == 0 ? decode_ids(tk, ids + n_prompt, (size_t)a.go.max_new, &len, d) : NULL;
  if (rc == 0 && !out) rc = -1;
  if (rc == 0) print_result(ids + n_prompt, (size_t)a.go.max_new, out, len, a.go.json);
  free(out);
  free(ids);
  free(specs);
  if (gw) tool_free_slots(gw, &slots);
  tool_mesh_run_close(&mr);
  ir_graph_free(g);
  free(text);
  rt_tokenizer_free(tk);
  rt_safetensors_free(st);
  ir_diag_free(d);
  return rc == 0 ? 0 : 1;
}
