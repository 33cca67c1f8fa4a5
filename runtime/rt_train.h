/* runtime/rt_train.h — training on any device (train.c, train_state.c):
 * the learning-rate schedule, the settings a state file records
 * (io/settings.c), the trainer, pipeline schedules and evaluation. */
#ifndef TGC_RT_TRAIN_H
#define TGC_RT_TRAIN_H

#include "rt_io.h"

/* ===================================================================== */
/* train.c — the training loop, on any backend                            */
/* ===================================================================== */
/* Runs a training program (pass_build_train: a step graph and an update
 * graph, bound by role) on a device. The trainer keeps, in device memory
 * across steps: the parameters, the optimizer states, the data inputs,
 * the gradient sums (K > 1), the loss and correct-prediction sums and the
 * lr / step scalars. One step:
 *   fill the sums with -0.0; for each of K micro-batches fill the data
 *   inputs from the source (seed, step, k: written in place on a host-memory
 *   device, uploaded otherwise) and run the step program (the sums are
 *   donated: computed in place); upload lr (the schedule's) and step + 1;
 *   run the update program with the states and parameters donated (the new
 *   ones are computed in their buffers; the trainer follows the plan to know
 *   which buffer holds which); download the logged scalars: loss,
 *   accuracy, and the count of Inf / NaN elements in the new parameters.
 * Nothing is allocated and nothing else crosses to the host in the steady
 * state (rt_device_stats counts it). A step that makes a parameter
 * non-finite fails ("parameters became non-finite ('NAME': K of N elements
 * are Inf or NaN; the loss was L)") and the trainer then refuses further
 * steps and saves, so the last good state on disk stays. Deterministic: the
 * same config gives bit-identical parameters, and save + resume continues
 * exactly (tests/unit/test_train_resume.c). */
typedef enum { RT_SCHEDULE_CONSTANT, RT_SCHEDULE_COSINE } rt_schedule_kind;
typedef struct {
  rt_schedule_kind kind;
  double lr;            /* the peak learning rate */
  int64_t warmup;       /* linear warmup over the first `warmup` steps: lr (s + 1) / warmup */
  int64_t total;        /* cosine: decays from lr (after warmup) to floor * lr at step total */
  double floor;         /* cosine: the final lr as a fraction of lr (e.g. 0.1) */
} rt_schedule;

/* ---- the settings a state file records (io/settings.c) ----
 * What `tgc train --save` writes as metadata beside the tensors and what
 * --resume and `tgc eval` read back: one table parses both the flag
 * (`--lr X`) and the saved value, so a resumed setting gets the flag's
 * checks (a state saying lr=-1 is refused, naming the file). The *_set
 * flags tell given from default. */
struct rt_train_settings {
  const char *data;
  const char *tokenizer;   /* --tokenizer F: text:PATH sources read through this tokenizer.json */
  const char *eval_data;   /* --eval-data SOURCE: held-out data, evaluated every eval_every steps */
  int64_t eval_every, eval_batches;
  int64_t steps, batch, seq_len, vocab, warmup;
  int optimizer, micro_batches; /* optimizer: a pass_optimizer_kind */
  int dtype;               /* --dtype: 0 the model's (f32), 1 bf16, 2 f16 (mixed precision) */
  rt_schedule_kind schedule;
  double lr, clip, weight_decay;
  uint64_t seed;
  bool data_set, eval_data_set, eval_every_set, eval_batches_set, steps_set, lr_set, opt_set, sched_set, warmup_set,
      mb_set, clip_set, wd_set, seed_set, batch_set, seq_set, vocab_set, dtype_set, tokenizer_set;
};
enum { RT_SETTINGS_MAX = 24 };
int rt_settings_count(void);
const char *rt_settings_flag(int k);      /* "--lr" ...; NULL out of range */
int rt_settings_find(const char *key);    /* the row of metadata key ("schedule"), -1 if none */
/* Parses v into setting k of s; flag: the spelling to name in a message
 * (NULL: the row's). 0, or -1 after reporting "FLAG V: expected ...". */
int rt_settings_set(rt_train_settings *s, int k, const char *flag, const char *v, ir_diag *d);
/* Applies the settings saved in state file f (read from path) to those not
 * given as flags; every saved value is checked, used or not, and a key tgc
 * does not write is an error ("PATH: unknown metadata key ..."). 0 or -1. */
int rt_settings_apply_saved(rt_train_settings *s, const rt_safetensors *f, const char *path, ir_diag *d);
/* The settings as metadata (at most RT_SETTINGS_MAX entries; text holds the
 * formatted numbers): the sizes and eval settings only when given, the seed
 * left to rt_trainer_save. Returns the count. */
int rt_settings_meta(const rt_train_settings *s, rt_meta_entry *meta, char text[][40]);
/* An integer flag that is not a setting: text in [lo, INT64_MAX], else -1
 * after reporting "FLAG V: expected an integer >= LO". */
int rt_settings_parse_int(const char *flag, const char *v, int64_t lo, int64_t *out, ir_diag *d);
/* Integer text in [lo, hi]: 0, or -1 with "expected ..." in why. */
int rt_settings_check_int(const char *v, int64_t lo, int64_t hi, int64_t *out, char *why, size_t n);
/* v cut to 40 bytes, non-printing bytes as '?', for messages. */
const char *rt_settings_shown(const char *v, char buf[48]);
/* The learning rate of 0-based step s. */
double rt_schedule_lr(const rt_schedule *s, int64_t step);

typedef struct {
  const pass_training *prog;   /* the graphs and their bindings (kept alive by the caller) */
  const rt_backend *backend;   /* NULL: the cpu */
  rt_device_options device;    /* which device, and its checks */
  rt_data *data;               /* rt_trainer_new binds it to the step graph's data inputs; a
                                * sharded program's source must be bound to the whole model
                                * already (its batch is made whole, then each rank takes its block) */
  rt_comm *comm;               /* a sharded program (its graphs' mesh has more than one rank): the
                                * communicator of exactly that many ranks; the trainer sets its mesh */
  bool nccl;                   /* sharded on a GPU backend: the graphs' collectives through NCCL on
                                * device memory (a communicator the trainer opens over comm's ranks),
                                * not through comm and host memory */
  uint64_t seed;
  rt_schedule schedule;
  rt_profile *profile;         /* NULL, or kernel times of the step graph runs */
  rt_profile *update_profile;  /* NULL, or kernel times of the update graph runs */
  double loss_scale_init;      /* dynamic loss scaling: the first scale (0: RT_LOSS_SCALE_INIT) */
} rt_train_config;

typedef struct {
  int64_t step;         /* steps done after this one */
  double loss;          /* mean over the micro-batches */
  double accuracy;      /* token accuracy (argmax of logits vs targets), -1 when not available */
  double lr;            /* the learning rate used */
  size_t peak_bytes;    /* the step program's arena (its activations: planned = allocated) */
  double loss_scale;    /* dynamic loss scaling (f16): the scale this step used, else 0 */
  bool skipped;         /* ... and its gradients overflowed: the update was skipped, the scale halved */
} rt_step_result;
/* Dynamic loss scaling (a program built with loss_scaling): the scale
 * starts at 2^16, halves after a step whose gradients overflow (that
 * step's update is skipped: parameters and states keep their values) and
 * doubles after 2000 steps without one — PyTorch's GradScaler defaults. The
 * scale is uploaded when it changes; each step downloads one more scalar,
 * the overflow count. */
#define RT_LOSS_SCALE_INIT 65536.0
#define RT_LOSS_SCALE_BACKOFF 0.5
#define RT_LOSS_SCALE_INTERVAL 2000

typedef struct rt_trainer rt_trainer;
rt_trainer *rt_trainer_new(const rt_train_config *c, char *err, size_t errlen);
void rt_trainer_free(rt_trainer *t);
int rt_trainer_step(rt_trainer *t, rt_step_result *r, char *err, size_t errlen);
int64_t rt_trainer_steps_done(const rt_trainer *t);
int rt_trainer_num_params(const rt_trainer *t);
/* Parameter i (step graph order) on the trainer's device: host memory on a
 * host-memory device; read it with rt_download elsewhere. */
const rt_tensor *rt_trainer_param(const rt_trainer *t, int i);
rt_device *rt_trainer_device(const rt_trainer *t);
/* What this rank's communication ops move in one training step, by the
 * graphs (pass_comm_tally_of: the step graph K times, then the update):
 * what the comm layer's counters must show. */
void rt_trainer_comm_predicted(const rt_trainer *t, pass_comm_tally tally[IR_NUM_OPS][IR_NUM_AXES]);
/* What the evaluations so far moved (rt_trainer_eval: the eval graph's tally
 * times its runs): counted by the comm layer with the steps', taken off
 * before the steps' are compared with rt_trainer_comm_predicted. */
void rt_trainer_comm_eval(const rt_trainer *t, pass_comm_tally tally[IR_NUM_OPS][IR_NUM_AXES]);
/* The communicator the graphs' collectives run on (and count on): the
 * config's comm, or the trainer's NCCL one (rt_train_config.nccl). */
rt_comm *rt_trainer_comm(const rt_trainer *t);
/* The communication check of `tgc train` (its "comm" JSON and summary): what
 * this rank's collectives moved over `steps` training steps, by collective
 * kind and mesh axis, beside what the graphs predict per step. measured:
 * the comm layer's counters less what evaluations moved; equal: measured =
 * steps x predicted for every kind and axis (false when steps <= 0). */
typedef struct {
  pass_comm_tally measured[IR_NUM_COLLS][IR_NUM_AXES];  /* the steps' totals */
  pass_comm_tally predicted[IR_NUM_COLLS][IR_NUM_AXES]; /* per step */
  int64_t steps;
  bool equal;
} rt_comm_check;
void rt_trainer_comm_check(const rt_trainer *t, int64_t steps, rt_comm_check *out);
/* The arena bytes of the step and update programs. */
size_t rt_trainer_arena_bytes(const rt_trainer *t, bool update);
/* Pipeline parallelism: the most (micro-batch, chunk) pairs whose saved
 * activations (what a chunk's bwd reads of its fwd) the last step kept at
 * once, and the most bytes of them (*bytes; 0 and 0 without pp). */
int rt_trainer_pipeline_in_flight(const rt_trainer *t, size_t *bytes);
/* Pipeline parallelism: the device memory reserved for those saved
 * activations, one arena shared by the rank's chunks (0 without pp). */
size_t rt_trainer_pipeline_reserved(const rt_trainer *t);
/* The order of one step's halves on pipeline stage s of p with v chunks
 * and K micro-batches (pass_schedule; train.c describes them): op i is the
 * forward (bwd[i] false) or backward of micro-batch mb[i] on chunk
 * chunk[i] (virtual stage chunk p + s); arrays of 2 K v. Returns 2 K v, or
 * -1 (interleaved with K not a multiple of p). */
int rt_pipeline_order(int schedule, int p, int v, int s, int K, int *mb, int *chunk, bool *bwd);
/* Where a rank keeps its saved activations: the n ops of rt_pipeline_order
 * (v chunks), each forward filling a holding of bytes[its chunk] that its
 * backward reads last, placed in one arena (first fit over the order, then
 * a bounded search; train.c). off[o]: op o's holding's offset (a forward's
 * and its backward's are the same). Returns the arena's bytes: *least (if
 * given), the most bytes held at once, whenever a placement that small was
 * found, else more. */
size_t rt_pipeline_place(int n, const int *mb, const int *chunk, const bool *bwd, int v, const size_t *bytes,
                         size_t *off, size_t *least);
/* Evaluation (a program built with pass_train_options.eval): runs the eval
 * graph (the forward alone: no gradient, no update, compiled once by
 * rt_trainer_new) on the trainer's parameter buffers for eval batches
 * 0 .. batches-1 of src (rt_data_fill_eval; src bound to the whole model as
 * the training source, each rank taking its block of a batch as in
 * training), between steps. Leaves the parameters and the step alone. */
typedef struct {
  double loss;          /* the mean of the batches' losses */
  double accuracy;      /* token accuracy (argmax of logits vs targets), -1 when not available */
  double perplexity;    /* exp(loss) for a sequence source (a language model), else -1 */
  int64_t batches;
} rt_eval_result;
int rt_trainer_eval(rt_trainer *t, rt_data *src, int64_t batches, rt_eval_result *r, char *err, size_t errlen);
/* Saves params (by name), optimizer states ("opt/<state input name>") and
 * meta + {"format": "tgc-train-2", "step": N, "seed": S}. Refuses (and
 * writes nothing) when a parameter holds Inf or NaN. */
int rt_trainer_save(const rt_trainer *t, const char *path, const rt_meta_entry *meta, int n_meta, char *err,
                    size_t errlen);
/* Loads a state saved for the same model and optimizer: every tensor must
 * be there with the same dtype and shape. Sets the step from the file. */
int rt_trainer_load(rt_trainer *t, const rt_safetensors *f, const char *path, char *err, size_t errlen);
/* Sets the trainer's parameters (each rank its block) from pretrained
 * weights (rt_weights_load_values through m); the optimizer state and the
 * step stay as rt_trainer_new left them (fresh). */
int rt_trainer_load_weights(rt_trainer *t, const char *path, const rt_weight_map *m, char *err, size_t errlen);

#endif
