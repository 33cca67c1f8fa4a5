/* tools/train_job.h — what `tgc train` and `tgc eval` run: a training job
 * opened from its flags (train_job.c) and the loop that steps it, logs,
 * evaluates and saves (cmd_train.c). The job is the one library call of
 * those subcommands: the flags in, a trainer ready to step out. */
#ifndef TGC_TRAIN_JOB_H
#define TGC_TRAIN_JOB_H

#include <stdbool.h>
#include <stdint.h>

#include "tool.h"

/* Training options: the settings a state file records (rt_train_settings,
 * runtime/io/settings.c), and the run's own. */
typedef struct {
  rt_train_settings s;
  bool eval_only;          /* tgc eval: --data is the held-out data, evaluated once */
  int64_t save_every, stop_at, print_every;
  const char *save, *resume, *log;
  tool_weights weights;     /* --weights PATH [--map MAP]: the initial parameters */
  bool json, profile;
  tool_backend backend; /* --backend, --device */
  double comm_timeout;  /* --comm-timeout SECONDS (0: the comm layer's 300 s) */
  const char *comm;     /* --comm auto|mpi|nccl (NULL: auto) */
  const char *cluster, *cluster_file; /* --mesh auto: what each rank is (--cluster NAME | --cluster-file F) */
  int pp_schedule;      /* --pipeline-schedule gpipe|1f1b (pipeline parallelism): pass_schedule */
  bool pp_schedule_set;
  const char *plan;     /* --plan FILE (tgc plan --save-plan) */
  char notes[2][160];   /* old spellings used (--schedule): told once the ranks are known, by rank 0 */
  int pp_chunks;        /* interleaved:V: V chunks per rank */
  int stage_bounds[64], n_stage_bounds; /* --stage-boundaries L1,L2,...: each later stage's first layer */
} tool_train_opts;

/* An opened job: the program compiled for this rank, its data, its
 * communicator and a trainer holding the initial (or resumed, or given)
 * state. Zero it, fill o and t from the flags, then open it. */
typedef struct {
  tool_compile_opts o;
  tool_train_opts t;
  tool_plan plan;          /* --plan FILE */
  rt_safetensors *state;   /* --resume: the state read */
  rt_data *ds;             /* --data */
  rt_data *eval_ds;        /* --eval-data (tgc eval: ds itself, not owned here) */
  int64_t eval_batches;    /* batches per evaluation */
  pass_tp_layouts *tpl;    /* --tp-layout search: the layouts, as tgc plan chooses them */
  pass_training *prog;     /* the step program of this rank */
  rt_trainer *tr;
  rt_comm *comm;           /* --mesh of more than one rank */
  rt_profile *prof;        /* --profile: [0] training graph, [1] update graph */
  char *text;              /* the model file's text */
  int model_params;        /* the whole model's parameter tensors (a pipeline stage holds its share) */
  char define_store[3][32];
} tool_train_job;

/* Everything from the parsed flags to a trainer ready to step: the plan
 * file and the resumed settings applied, the data opened and bound, the
 * ranks' communicator and this rank's mesh place, the model compiled into
 * its step program, the trainer made and its state loaded. Under a mesh,
 * the ranks other than 0 write nothing to stdout from here on. 0, or -1
 * after reporting through d. */
int tool_train_job_open(tool_train_job *j, ir_diag *d);
void tool_train_job_close(tool_train_job *j);

#endif
