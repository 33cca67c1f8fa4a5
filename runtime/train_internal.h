/* runtime/train_internal.h — private to the trainer's files (train.c, the
 * loop; train_state.c, sharded state files): the trainer's fields and the
 * helpers both use. */
#ifndef TGC_TRAIN_INTERNAL_H
#define TGC_TRAIN_INTERNAL_H

#include "internal.h"
#include "rt_train.h"

#define STATE_PREFIX "opt/"
/* Version 2 adds the header's checksum ("header_crc32"), required from it
 * on; version 1 states (without it) still load. */
#define FORMAT_NAME "tgc-train-2"
#define FORMAT_NAME_V1 "tgc-train-1"

struct rt_trainer {
  rt_train_config c;
  const pass_training *pt;
  rt_device *dev;
  rt_comm *nccl;                 /* rt_train_config.nccl: the graphs' collectives on device memory */
  rt_program *step_prog, *update_prog;
  rt_program *eval_prog;         /* pt->eval: the forward alone, on the same parameter buffers */
  int64_t eval_runs;             /* its runs so far (what its collectives moved: rt_trainer_comm_eval) */
  /* pipeline parallelism (pt->fwd): each chunk's two halves (pt->chunk), run by the schedule */
  int n_chunks;                  /* v: chunks (virtual stages) of this rank */
  rt_program **fwd_prog, **bwd_prog; /* n_chunks each */
  /* the saved values (what a chunk's bwd reads of its fwd) of every (micro-batch, chunk) holding,
   * K v of them, at offsets of one arena placed over the schedule (pipeline_setup) */
  rt_buffer *held_arena;         /* held_reserved bytes of device memory (NULL: nothing saved) */
  size_t held_reserved;          /* the arena's bytes: what the schedule holds at once, at most */
  rt_tensor *held;               /* views into the arena: holding h's saved values from held[held0[h]] */
  int *held0;                    /* K v + 1 */
  int *op_hold;                  /* per op of the schedule: the holding its fwd fills and its bwd reads */
  rt_tensor **bwd_in;            /* bwd's input bindings: step_in, then a holding's saved values */
  int n_ops;                     /* the schedule of one step: op k is (micro-batch, chunk) (op_mb[k], op_chunk[k]) */
  int *op_mb, *op_chunk;
  bool *op_bwd;
  int in_flight, in_flight_peak; /* (micro-batch, chunk) pairs whose activations are kept: now, the most */
  size_t in_flight_bytes, in_flight_bytes_peak; /* their saved values' bytes: now, the most */
  size_t *chunk_saved_bytes;     /* per chunk: one holding's saved values' bytes */
  int np, ns, K;
  rt_tensor **params, **states;  /* np, ns: device tensors, rebound after every update */
  rt_tensor **pool;              /* np + ns: the buffers behind them (owned) */
  rt_tensor **data;              /* n_data: the data inputs (device) */
  rt_tensor **data_host;         /* n_data: where the source writes (== data on a host-memory device) */
  bool *data_pinned;             /* n_data: data_host[i] is the device's page-locked memory (rt_pinned_tensor_new),
                                    uploaded asynchronously; written again only after rt_host_wait */
  rt_tensor **data_whole;        /* n_data (sharded): the whole batch the source writes; data_host takes a block */
  const ir_mesh *mesh;           /* the programs' mesh */
  bool sharded;                  /* more than one rank */
  int coord[IR_NUM_AXES];        /* this rank's coordinates (sharded) */
  rt_tensor **acc;               /* np (K > 1): the gradient sums */
  rt_tensor *loss_sum, *correct_sum, *lr, *step_no;
  rt_tensor *dropout_key; /* i64[]: the step's dropout key, set per micro-batch (NULL without dropout) */
  rt_tensor **step_in, **update_in; /* the programs' input bindings */
  rt_tensor **new_place;         /* np + ns: scratch of the rebinding */
  bool *taken;                   /* np + ns: scratch of the rebinding */
  int64_t step;
  rt_tensor *loss_scale;          /* f32 scalar (dynamic loss scaling only) */
  double scale;                   /* its value */
  int64_t good_steps;             /* steps since the scale last changed */
  bool scale_stale;               /* the device's copy is older than scale */
  bool lost;            /* a failed update consumed the parameters: no more steps or saves */
  bool nonfinite;       /* an update made a parameter Inf or NaN: no more steps or saves */
};

/* A host tensor with the contents of device tensor x: x itself on a
 * host-memory device, else a downloaded copy (rt_tr_host_view_free). */
rt_tensor *rt_tr_host_view(const rt_trainer *t, rt_tensor *x, char *err, size_t errlen);
void rt_tr_host_view_free(const rt_trainer *t, rt_tensor *h);
/* The parameters (host views h[0..np)) are all finite: 0, or -1 with
 * "'NAME': K of N elements are Inf or NaN" (the first such parameter). */
int rt_tr_check_params_finite(const rt_trainer *t, rt_tensor *const *h, char *err, size_t errlen);
/* "opt/<state input name>" of state i (malloc'd). */
char *rt_tr_state_name(const rt_trainer *t, int i);
/* The step's copies of the parameters in the compute dtype (pass_training
 * copy_input / copy_output: the update's outputs, which the step reads)
 * made from the parameters as they are, for a step no update has run
 * before: at the start and after loading. The rounding is the cast's. */
int rt_tr_make_copies(rt_trainer *t, char *err, size_t errlen);

#endif
