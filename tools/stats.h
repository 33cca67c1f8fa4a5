/* tools/stats.h — what `tgc stats` gathers (cmd_stats.c) and prints
 * (stats_print.c): private to those two files. */
#ifndef TGC_STATS_H
#define TGC_STATS_H

#include "tool.h"

/* ===================================================================== */
/* the report                                                             */
/* ===================================================================== */
typedef struct {
  char *name;                   /* malloc'd: the passes may rebuild the graph (shard) */
  ir_type type;
  int64_t count;
  pass_param_group group;
  char *padding;                /* malloc'd: how the shard pass pads it on the mesh (a vocabulary tp does not
                                 * divide: pass_shard_padding_str), or NULL */
} stats_param;

typedef struct {
  const char *file, *policy, *config;
  pass_train_graph_info graph;  /* the training graph: its loss, what it differentiates by (n_wrt 0: forward
                                 * only, -1: given as a training graph), memory before checkpointing */
  stats_param *params;
  int n_params;
  int64_t param_total, group_total[PASS_GROUP_COUNT];
  double param_bytes;           /* in the model's own dtypes */
  const fe_const *cl, *ch, *cv; /* closed-form constants (NULL: not identifiable) */
  double closed_form;
  const fe_const *cb, *ct;      /* B and T */
  double tokens;                /* per step; 0: unknown */
  const char *tokens_from;
  /* settings */
  const char *dtype_name;
  size_t dtype_bytes;
  bool mixed;                   /* 16-bit dtype: fp32 master weights and optimizer state */
  pass_optimizer_kind opt;
  const pass_target *target;
  int top;
  bool list_params;
  /* measurements */
  pass_graph_cost cost;         /* of the final graph (with the policy) */
  pass_mem_report mem;          /* with the policy */
  double opt_flops;             /* the optimizer update graph */
  double m_params, m_grads, m_opt, m_act, m_total;
  double m_masks;               /* dropout masks at 1 byte an element: the literature's count, not kept */
  int n_dropouts;
  pass_roofline roof;           /* every op, by kind, phase and step time, MFU */
  bool programs;                /* the training program's step and update were counted (cmd_stats.c: count_programs) */
  const char *programs_why;     /* else why not (NULL: nothing is trained) */
  pass_program_calls step_calls;   /* what one run of the step's lowered program issues (pass_program_calls_of) */
  pass_program_calls update_calls; /* ... and of the update's */
  int attn_fused;               /* attention nodes fuse-attention made */
  pass_attention_miss *attn_miss; /* malloc'd: the softmax nodes it left, and why */
  int n_attn_miss;
  double analysis_s;
} stats;

static inline double six_n_tokens(const stats *s) { return 6.0 * (double)s->param_total * s->tokens; }
static inline double fwd_flops(const stats *s) { return s->cost.flops[PASS_PHASE_FORWARD]; }
static inline double grad_flops(const stats *s) { return fwd_flops(s) + s->cost.flops[PASS_PHASE_BACKWARD]; }

void stats_print_text(FILE *out, const stats *s);
/* Number formats (stats_print.c; `tgc plan` prints with them too):
 * 1234567 -> "1,234,567" (integral values; others %.4g); 2.15e15, "FLOP"
 * -> "2.15 PFLOP"; seconds as "1.234 s", "12.345 ms" or "3.000 us". */
const char *stats_grouped(double v, char *buf, size_t n);
const char *stats_si(double v, const char *unit, char *buf, size_t n);
const char *stats_seconds(double t, char *buf, size_t n);
void stats_print_json(FILE *out, const stats *s);

#endif
