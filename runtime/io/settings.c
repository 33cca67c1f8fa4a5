/* runtime/io/settings.c — the settings a state file records (runtime.h,
 * rt_train_settings): one row per setting: its flag, its metadata key, how it is parsed and its
 * range. The same row parses `--lr X` and the "lr" of a state file given to
 * --resume, so a resumed setting gets exactly the checks of the flag (a
 * state saying micro_batches=1000000000, lr=-1 or seed=abc is refused,
 * naming the file). Float settings must be finite in f32 (the parameters'
 * precision): --lr 1e39 is refused before any work. */
#include <errno.h>
#include <float.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "ir_die.h"
#include "rt_train.h"

typedef enum { SETTING_INT, SETTING_NUM, SETTING_CHOICE, SETTING_TEXT } setting_kind;
typedef struct {
  const char *flag, *key;
  setting_kind kind;
  size_t value, set;                 /* offsetof the value and its *_set flag in rt_train_settings */
  int width;                         /* SETTING_INT: sizeof the field (int or int64_t) */
  int64_t lo, hi;                    /* SETTING_INT: the range */
  double min;                        /* SETTING_NUM: the lower bound (the upper is FLT_MAX) */
  int (*from_name)(const char *);    /* SETTING_CHOICE: name -> value, -1 if unknown */
  const char *(*to_name)(int);       /* SETTING_CHOICE: value -> name */
  const char *choices;               /* SETTING_CHOICE: the names, for messages; SETTING_TEXT: what it is */
  bool only_if_given;                /* saved only when given (the model's sizes) */
  bool saved_by_trainer;             /* rt_trainer_save writes it (the seed) */
} train_setting;

static int schedule_from_name(const char *v) {
  return strcmp(v, "constant") == 0 ? RT_SCHEDULE_CONSTANT : strcmp(v, "cosine") == 0 ? RT_SCHEDULE_COSINE : -1;
}
static const char *schedule_name(int k) { return k == RT_SCHEDULE_COSINE ? "cosine" : "constant"; }
static const char *optimizer_name(int k) { return pass_optimizer_name((pass_optimizer_kind)k); }
static int optimizer_from_name(const char *v) { return pass_optimizer_from_name(v); }
static int dtype_from_name(const char *v) {
  return !strcmp(v, "f32") || !strcmp(v, "fp32") ? 0 : !strcmp(v, "bf16") ? 1 : !strcmp(v, "f16") || !strcmp(v, "fp16") ? 2 : -1;
}
static const char *dtype_name(int k) { return k == 1 ? "bf16" : k == 2 ? "f16" : "f32"; }

#define OPT(f) offsetof(rt_train_settings, f)
#define INT(flag, key, f, set, lo, hi, only) {flag, key, SETTING_INT, OPT(f), OPT(set), (int)sizeof(((rt_train_settings *)0)->f), lo, hi, 0, NULL, NULL, NULL, only, false}
#define NUM(flag, key, f, set) {flag, key, SETTING_NUM, OPT(f), OPT(set), 0, 0, 0, 0, NULL, NULL, NULL, false, false}
static const train_setting settings[] = {
    {"--data", "data", SETTING_TEXT, OPT(data), OPT(data_set), 0, 0, 0, 0, NULL, NULL, "SOURCE", false, false},
    {"--tokenizer", "tokenizer", SETTING_TEXT, OPT(tokenizer), OPT(tokenizer_set), 0, 0, 0, 0, NULL, NULL,
     "FILE (a tokenizer.json)", true, false},
    INT("--steps", "steps", steps, steps_set, 1, RT_MAX_STEP, false),
    {"--optimizer", "optimizer", SETTING_CHOICE, OPT(optimizer), OPT(opt_set), 0, 0, 0, 0, optimizer_from_name,
     optimizer_name, "sgd, momentum, adam or adamw", false, false},
    NUM("--lr", "lr", lr, lr_set),
    {"--lr-schedule", "schedule", SETTING_CHOICE, OPT(schedule), OPT(sched_set), 0, 0, 0, 0, schedule_from_name,
     schedule_name, "constant or cosine", false, false},
    INT("--warmup", "warmup", warmup, warmup_set, 0, RT_MAX_STEP, false),
    INT("--micro-batches", "micro_batches", micro_batches, mb_set, 1, 1000000, false),
    NUM("--clip", "clip", clip, clip_set),
    NUM("--weight-decay", "weight_decay", weight_decay, wd_set),
    INT("--seed", "seed", seed, seed_set, 0, INT64_MAX, false),
    INT("--batch", "batch", batch, batch_set, 1, INT64_MAX, true),
    INT("--seq-len", "seq_len", seq_len, seq_set, 1, INT64_MAX, true),
    INT("--vocab", "vocab", vocab, vocab_set, 1, INT64_MAX, true),
    {"--dtype", "dtype", SETTING_CHOICE, OPT(dtype), OPT(dtype_set), 0, 0, 0, 0, dtype_from_name, dtype_name,
     "f32, bf16 or f16", true, false},
    {"--eval-data", "eval_data", SETTING_TEXT, OPT(eval_data), OPT(eval_data_set), 0, 0, 0, 0, NULL, NULL, "SOURCE",
     true, false},
    INT("--eval-every", "eval_every", eval_every, eval_every_set, 1, RT_MAX_STEP, true),
    INT("--eval-batches", "eval_batches", eval_batches, eval_batches_set, 1, INT64_MAX, true),
};
#undef INT
#undef NUM
#define N_SETTINGS ((int)(sizeof settings / sizeof settings[0]))
_Static_assert(N_SETTINGS <= RT_SETTINGS_MAX, "RT_SETTINGS_MAX holds every setting");
/* metadata keys that are not settings: read by the trainer (format, step,
 * the sharded index's), by the reader (the checksums) or for people (data_rng) */
static const char *const other_keys[] = {"format",     "step",   RT_SAFETENSORS_CRC_KEY, RT_SAFETENSORS_HEADER_CRC_KEY,
                                         "data_rng",   "loss_scale", "loss_scale_good_steps", "sharded",
                                         "shards",     "mesh_sizes", "replaced"};

/* v cut to 40 bytes, non-printing bytes as '?', for messages. */
const char *rt_settings_shown(const char *v, char buf[48]) {
  size_t n = 0;
  for (; v && v[n] && n < 40; n++) buf[n] = v[n] >= 32 && v[n] < 127 ? v[n] : '?';
  buf[n] = 0;
  if (v && v[n]) strcpy(buf + n, "...");
  return buf;
}

/* Integer text in [lo, hi]: 0, or -1 with "expected ..." in why. */
int rt_settings_check_int(const char *v, int64_t lo, int64_t hi, int64_t *out, char *why, size_t n) {
  char *end;
  errno = 0;
  long long x = v && *v ? strtoll(v, &end, 10) : 0;
  if (!v || !*v || *end || errno || x < lo || x > hi) {
    if (hi == INT64_MAX) snprintf(why, n, "expected an integer >= %lld", (long long)lo);
    else snprintf(why, n, "expected an integer in [%lld, %lld]", (long long)lo, (long long)hi);
    return -1;
  }
  *out = x;
  return 0;
}

/* Number text >= lo and finite in f32: 0, or -1 with the reason in why. */
static int check_num(const char *v, double lo, double *out, char *why, size_t n) {
  char *end;
  errno = 0;
  double x = v && *v ? strtod(v, &end) : 0;
  if (!v || !*v || *end || errno || !(x >= lo && x <= FLT_MAX)) {
    snprintf(why, n, "expected a number in [%g, %g] (finite in f32)", lo, (double)FLT_MAX);
    return -1;
  }
  *out = x;
  return 0;
}

/* Parses v into setting s of t. origin is NULL for the flag, else the state
 * file's path (for the message). 0, or -1 after reporting. */
static int set_setting(rt_train_settings *t, const train_setting *s, const char *flag, const char *v, const char *origin,
                       ir_diag *d) {
  char why[160] = "", b[48];
  char *base = (char *)t;
  int rc = 0;
  if (s->kind == SETTING_INT) {
    int64_t x = 0;
    rc = rt_settings_check_int(v, s->lo, s->hi, &x, why, sizeof why);
    if (rc == 0 && s->width == (int)sizeof(int)) *(int *)(base + s->value) = (int)x;
    else if (rc == 0) *(int64_t *)(base + s->value) = x;
  } else if (s->kind == SETTING_NUM) {
    rc = check_num(v, s->min, (double *)(base + s->value), why, sizeof why);
  } else if (s->kind == SETTING_CHOICE) {
    int k = v ? s->from_name(v) : -1;
    if (k < 0) rc = -1, snprintf(why, sizeof why, "expected %s", s->choices);
    else *(int *)(base + s->value) = k;
  } else {
    if (!v || !*v) rc = -1, snprintf(why, sizeof why, "expected a non-empty value");
    else *(const char **)(base + s->value) = v;
  }
  if (rc != 0) {
    if (origin) ir_error_plain(d, "%s: metadata \"%s\" is \"%s\": %s", origin, s->key, rt_settings_shown(v, b), why);
    else if (s->kind == SETTING_TEXT) ir_error_plain(d, "%s needs a %s", flag, s->choices);
    else ir_error_plain(d, "%s %s: %s", flag, rt_settings_shown(v, b), why);
    return -1;
  }
  *(bool *)(base + s->set) = true;
  return 0;
}

/* Applies the settings saved in a state file to those not given on the
 * command line. Every saved value is checked, used or not, and a key tgc
 * does not write is an error: the file is not what tgc saved. */
int rt_settings_apply_saved(rt_train_settings *t, const rt_safetensors *f, const char *path, ir_diag *d) {
  for (int m = 0; m < rt_safetensors_meta_count(f); m++) {
    const char *key = rt_safetensors_meta_key(f, m), *v = rt_safetensors_meta(f, key);
    int k = 0;
    while (k < N_SETTINGS && strcmp(settings[k].key, key) != 0) k++;
    if (k == N_SETTINGS) {
      bool other = false;
      for (size_t i = 0; i < sizeof other_keys / sizeof other_keys[0]; i++) other |= strcmp(other_keys[i], key) == 0;
      char b[48];
      if (other) continue;
      ir_error_plain(d, "%s: unknown metadata key \"%s\" (not written by tgc train)", path, rt_settings_shown(key, b));
      return -1;
    }
    bool given = *(bool *)((char *)t + settings[k].set);
    rt_train_settings scratch = *t; /* a setting given as a flag wins; its saved value is still checked */
    if (set_setting(given ? &scratch : t, &settings[k], settings[k].flag, v, path, d) != 0) return -1;
  }
  return 0;
}

/* The settings as state-file metadata; text holds the formatted numbers. */
int rt_settings_meta(const rt_train_settings *t, rt_meta_entry *meta, char text[][40]) {
  const char *base = (const char *)t;
  int n = 0;
  for (int k = 0; k < N_SETTINGS; k++) {
    const train_setting *s = &settings[k];
    if (s->saved_by_trainer || (s->only_if_given && !*(const bool *)(base + s->set))) continue;
    const char *v = text[n];
    if (s->kind == SETTING_INT && s->width == (int)sizeof(int)) snprintf(text[n], 40, "%d", *(const int *)(base + s->value));
    else if (s->kind == SETTING_INT) snprintf(text[n], 40, "%lld", (long long)*(const int64_t *)(base + s->value));
    else if (s->kind == SETTING_NUM) snprintf(text[n], 40, "%.17g", *(const double *)(base + s->value));
    else if (s->kind == SETTING_CHOICE) v = s->to_name(*(const int *)(base + s->value));
    else v = *(const char *const *)(base + s->value);
    meta[n++] = (rt_meta_entry){s->key, v};
  }
  return n;
}

int rt_settings_count(void) { return N_SETTINGS; }

const char *rt_settings_flag(int k) { return k >= 0 && k < N_SETTINGS ? settings[k].flag : NULL; }

int rt_settings_find(const char *key) {
  for (int k = 0; k < N_SETTINGS; k++)
    if (strcmp(settings[k].key, key) == 0) return k;
  return -1;
}

int rt_settings_set(rt_train_settings *t, int k, const char *flag, const char *v, ir_diag *d) {
  if (k < 0 || k >= N_SETTINGS) IR_DIE("setting %d out of range", k);
  return set_setting(t, &settings[k], flag ? flag : settings[k].flag, v, NULL, d);
}

int rt_settings_parse_int(const char *flag, const char *v, int64_t lo, int64_t *out, ir_diag *d) {
  char why[160], b[48];
  if (rt_settings_check_int(v, lo, INT64_MAX, out, why, sizeof why) == 0) return 0;
  ir_error_plain(d, "%s %s: %s", flag, rt_settings_shown(v, b), why);
  return -1;
}
