/* tools/tool.h — shared between the files of the tgc command (not a layer:
 * the command may use every layer). */
#ifndef TGC_TOOL_H
#define TGC_TOOL_H

#include "frontend.h"
#include "ir.h"
#include "plan.h"
#include "rt_train.h"

#define TOOL_MAX_FILE_BYTES (64u << 20) /* model files larger than this are refused */

/* Options common to every subcommand that compiles a model. */
typedef struct {
  const char *file;
  fe_options fe;
  fe_define defines[64];
  const char *after;       /* --after / --dump-after: pass name or "all" */
  int format;              /* 0 text, 1 dot, 2 json */
  bool verify_each, time_passes;
  bool verbose;            /* -v: the passes' notes on what they left undone (pass_options.verbose) */
  const char *checkpoint;  /* --checkpoint POLICY */
  bool pass_disabled[PASS_COUNT]; /* --disable-pass NAME (repeatable); --no-fuse: every fuse-* pass */
  ir_mesh mesh;            /* --mesh AXES (mesh_set: given) */
  bool mesh_set;
  int stage;               /* --stage S: the pipeline stage shown (stage_set: given) */
  bool stage_set;
  bool mesh_auto;          /* --mesh auto: tgc train asks the planner (tool_plan_auto_mesh) */
  int zero;                /* --zero N (zero_set: given) */
  bool zero_set;
  double bucket_bytes;     /* --bucket-mb M: the gradient buckets' size in bytes (0: the default, 25 MiB) */
  bool tp_megatron;        /* --tp-layout megatron (else search, the default; tp_layout_set: --tp-layout given) */
  bool tp_layout_set;
} tool_compile_opts;

/* A --checkpoint policy in the checkpoint pass's names (none, block,
 * selective, sqrt, budget=BYTES; "full" is "block"): the canonical name (v
 * itself but for full), or NULL when v is none of them. */
const char *tool_checkpoint_name(const char *v);

/* Loads FILE (.tg through the frontend, .ir through the reader), verifies it.
 * *text_out keeps the source alive for diagnostics (free after the graph). */
ir_graph *tool_load(const tool_compile_opts *o, ir_diag *d, char **text_out);
/* --tp-layout search as tgc plan and tgc train share it: the graph the
 * search chooses layouts on (the model's training graph at micro-batch 2 —
 * -D B=2 — without recompute, in dtype dt (-1: the model's own), with at most 3 layers:
 * fe_options.max_layers; the passes after the shard pass not run), NULL for
 * an .ir file or after reporting; the number of layers of a graph (its
 * nodes' largest layer + 1); and the layouts for model's mesh (tp, sp):
 * *out NULL when there is nothing to search (--tp-layout megatron, tp = 1,
 * an .ir file: the shard pass searches the graph itself), 0 or -1 after
 * reporting. report: NULL, or where the search prints each class's layout. */
ir_graph *tool_tp_search_graph(const tool_compile_opts *o, int dt, ir_diag *d);
/* g made the training graph tgc plan profiles and the search costs: the
 * checkpoint policy given (NULL: none), dtype dt (-1: the model's own), the
 * passes after the shard pass (and fuse-lm-head) not run. 0, or -1 after
 * reporting. */
int tool_shard_view_graph(const tool_compile_opts *o, ir_graph *g, const char *checkpoint, int dt, ir_diag *d);
int tool_graph_layers(const ir_graph *g);
int tool_tp_layouts(const tool_compile_opts *o, const ir_graph *model, int dt, FILE *report,
                    pass_tp_layouts **out, ir_diag *d);
/* The diagnostics of a subcommand, on stderr. Under a launcher (mpirun) every
 * rank reads the same flags and model, so their errors would be printed once
 * per rank, interleaved: on every rank but 0 it stays quiet (errors counted,
 * exit status 1, nothing printed) until tool_load succeeds; what can differ
 * between ranks after that (data, communication) is printed by the rank
 * that meets it. */
ir_diag *tool_diag_new(void);
/* Whether path names textual IR (.ir), not a .tg model. */
bool tool_is_ir_file(const char *path);
/* The configs of o->file evaluated with o's --config and -D (fe_configs);
 * NULL for an .ir file and for a file that does not read or parse, which
 * tool_load reports. fe_config_set_free. */
fe_config_set *tool_configs(const tool_compile_opts *o);
/* Appends -D name=value to o (both live as long as o): 0, or -1 after
 * reporting that there are too many. */
int tool_add_define(tool_compile_opts *o, const char *name, const char *value, ir_diag *d);
/* A flag that sets config constant cname (--batch sets B, --seq T) from
 * value v, as a -D of o: v a positive integer, cname a constant of the
 * chosen config of cs (cs NULL: not known; tool_load will tell), not also
 * given with -D. 0, or -1 after reporting. */
int tool_set_constant(tool_compile_opts *o, const fe_config_set *cs, const char *flag, const char *cname,
                      const char *v, ir_diag *d);
/* Decimal integer text, all of it, in [lo, hi]. */
bool tool_parse_int(const char *v, int64_t lo, int64_t hi, int64_t *out);
/* Runs the default pipeline (minus disabled passes) with o's dump/verify/time settings. */
/* --after memplan: nothing is dumped during the pipeline; after it the IR
 * and its memory plan are; --after all dumps the plan after the last pass. */
int tool_run_passes(ir_graph *g, const tool_compile_opts *o, ir_diag *d, FILE *dump_out);
/* memplan_dump.c: the memory plan of g (pass_memplan, no donation) in format 0 text
 * (pass_plan_print), 1 dot (the graph), 2 json ({"plan": ...}, with
 * "graph" first when with_ir); with_ir: the IR first ("# IR after memplan"). */
int tool_print_plan(FILE *out, const ir_graph *g, int format, bool with_ir, ir_diag *d);

/* Parses one common option at argv[*i] (advancing *i past its value).
 * Returns 1 if consumed, 0 if not a common option, -1 on error (reported). */
int tool_parse_common(tool_compile_opts *o, int argc, char **argv, int *i, ir_diag *d);
/* "tgc: error: ..." and exit status 1 semantics are in the callers. */
/* The end of a subcommand's flag loop: an unknown flag is an error, the
 * first plain argument is FILE, a second one an error. 0, or 1 after reporting. */
int tool_positional(const char *cmd, const char *a, tool_compile_opts *o, ir_diag *d);
/* 0 unless --mesh asks for more than one rank, which cmd (run, grad,
 * gradcheck) does not do: then reports it and returns 1. */
int tool_single_device(const char *cmd, const tool_compile_opts *o, ir_diag *d);
/* 0 if FILE was given, else reports "CMD: missing FILE" and returns 1. */
int tool_need_file(const char *cmd, const tool_compile_opts *o, ir_diag *d);
int tool_cmd_run(int argc, char **argv);
int tool_cmd_grad(int argc, char **argv);      /* cmd_grad.c */
int tool_cmd_gradcheck(int argc, char **argv); /* cmd_grad.c */
int tool_cmd_train(int argc, char **argv);     /* cmd_train.c */
int tool_cmd_eval(int argc, char **argv);      /* cmd_train.c */
int tool_cmd_stats(int argc, char **argv);     /* cmd_stats.c */
int tool_cmd_plan(int argc, char **argv);      /* cmd_plan.c */
/* cmd_plan.c: `tgc train --mesh auto` on `ranks` ranks: the planner's
 * fastest plan the trainer runs, into o->mesh, o->zero and *schedule
 * (print: one line "mesh auto: ..." on stdout). 0, or -1 after reporting. */
/* cluster: a built-in node kind (NULL: cpu-host) or cluster_file: the
 * device each rank is and the links between them (--cluster,
 * --cluster-file of tgc train --mesh auto); the job's ranks are its size. */
int tool_plan_auto_mesh(tool_compile_opts *o, const char *cluster, const char *cluster_file, int ranks,
                        int micro_batches, ir_dtype dt, int optimizer, bool print,
                        int *schedule, ir_diag *d);
int tool_cmd_compile(int argc, char **argv);   /* cmd_compile.c */
int tool_cmd_tokenize(int argc, char **argv);  /* cmd_tokenize.c */
int tool_cmd_export_weights(int argc, char **argv); /* cmd_weights.c */
int tool_cmd_generate(int argc, char **argv);  /* cmd_generate.c */

/* ---- bind.c: inputs, parameters and printing for commands that run a model ---- */
#include <jansson.h>
typedef struct {
  const char *name, *spec; /* --input NAME=SPEC */
} tool_input_spec;
/* "--flag VALUE" or "--flag=VALUE" at argv[*i]: true if it is that flag
 * (advancing *i past a separate value); *val is NULL when the value is missing. */
bool tool_flag(const char *flag, int argc, char **argv, int *i, const char **val);
/* --input NAME=SPEC (appended to specs, which has room for argc entries) and
 * --seed N: 1 consumed, 0 not one of them, -1 error (reported). */
int tool_parse_input_flag(int argc, char **argv, int *i, tool_input_spec *specs, int *n_specs, uint64_t *seed,
                          ir_diag *d);
/* Every spec names an input of g, once; -1 after reporting. */
int tool_check_input_specs(const ir_graph *g, const tool_input_spec *specs, int n_specs, ir_diag *d);
/* One input from SPEC (a number, a list, @file.npy, random or NULL = random). */
rt_tensor *tool_bind_input(const ir_graph *g, const ir_value *in, const char *spec, uint64_t seed, ir_diag *d);
/* All inputs (from specs, else random with a note unless quiet) and params
 * (initialized from seed) into inputs[]/params[]; -1 after reporting
 * (what was allocated is left there for the caller to free). */
/* --weights PATH and --map MAP (docs/weights.md): the parameters read from
 * a safetensors file or an HF-style folder through a name map. */
typedef struct {
  const char *path, *map;
  const char *model; /* the model FILE: an HF folder's default map is beside it, maps/hf_<model_type>.map */
} tool_weights;
/* --weights / --map at argv[*i]: 1 consumed, 0 not one of them, -1 error (reported). */
int tool_parse_weights_flag(int argc, char **argv, int *i, tool_weights *w, ir_diag *d);
extern const char *const tool_weights_help;
/* --text TEXT [--tokenizer F] of tgc run: TEXT's ids (F, else DIR/tokenizer.json
 * of --weights DIR) as the input `tokens` [1, n], the config's T set to n,
 * and `types` 0 and `mask` 1 when the model has those inputs. */
typedef struct {
  const char *text, *tokenizer;
  char *ids;   /* "id,id,..." (malloc'd) */
  char n[24];  /* the count, the value of -D T */
} tool_text;
/* --text / --tokenizer at argv[*i]: 1 consumed, 0 not one of them, -1 error (reported). */
int tool_parse_text_flag(int argc, char **argv, int *i, tool_text *t, ir_diag *d);
/* Before loading: tokenizes and sets T (0, or -1 after reporting). */
int tool_text_prepare(tool_text *t, const tool_weights *w, tool_compile_opts *o, ir_diag *d);
/* After loading: appends the inputs' specs (room for 3 more). */
void tool_text_specs(const tool_text *t, const ir_graph *g, tool_input_spec *specs, int *n_specs);
/* Replaces params[] of g by w's tensors (nothing when w->path is NULL); -1 after reporting. */
int tool_bind_weights(const ir_graph *g, const tool_weights *w, rt_tensor **params, ir_diag *d);
/* The tensors one run of g binds: one slot per input, param and output. */
typedef struct {
  rt_tensor **inputs, **params, **outputs;
} tool_slots;
void tool_alloc_slots(const ir_graph *g, tool_slots *s);
void tool_free_slots(const ir_graph *g, tool_slots *s); /* frees the tensors in them too */
/* Where a command runs the model: --backend NAME (NULL: cpu), --device N. */
typedef struct {
  const rt_backend *backend;
  rt_device_options device;
} tool_backend;
/* Runs g on tb's backend (tb NULL: cpu); a runtime error is reported through d (-1). */
int tool_execute(const tool_backend *tb, const ir_graph *g, rt_tensor *const *inputs, rt_tensor *const *params,
                 rt_tensor **outputs, rt_stats *stats, ir_diag *d);
/* --backend NAME, --device N or --racecheck at argv[*i]: 1 consumed, 0 not one of them,
 * -1 an unknown backend or a bad number (reported). */
int tool_parse_backend(int argc, char **argv, int *i, tool_backend *tb, ir_diag *d);
extern const char *const tool_backend_help;
int tool_bind_all(const ir_graph *g, const tool_input_spec *specs, int n_specs, uint64_t seed, bool quiet,
                  rt_tensor **inputs, rt_tensor **params, ir_diag *d);
/* ---- plan_file.c: plan files (tgc plan --save-plan, tgc train --plan) ---- */
#define TOOL_PLAN_FORMAT "tgc-plan"
#define TOOL_PLAN_VERSION 1
/* What train reads of a plan file (strings live in root). */
typedef struct {
  json_t *root;
  const char *path;                      /* the plan file */
  const char *model_path, *model_hash;   /* the model file it was made for, FNV-1a 64 of its bytes in hex */
  const char *config;                    /* the config's name */
  const char *defines[64];               /* its -D overrides, "NAME=VALUE" */
  int n_defines;
  int64_t ranks, global_batch, seq, layers;
  int dp, tp, pp, zero, micro_batch, micro_batches;
  bool sp;
  int schedule;                          /* pass_schedule */
  int virtual_stages;                    /* model chunks per pipeline rank (interleaved; else 1) */
  int *boundaries, n_boundaries;         /* the first layer of each virtual stage after the first */
  const char *checkpoint;                /* the checkpoint pass's policy name */
  bool tp_search;                        /* "tp_layout": "search" (else "megatron"; absent: megatron) */
} tool_plan;
/* Reads and checks a plan file: 0, or -1 after reporting (one line naming it). */
int tool_plan_read(const char *path, tool_plan *p, ir_diag *d);
void tool_plan_free(tool_plan *p);
/* Whether p's stage boundaries are the shard pass's even split (layer l on stage l pp / L). */
bool tool_plan_even_split(const tool_plan *p);
/* FNV-1a 64 of n bytes (the model file's identity in a plan). */
uint64_t tool_fnv1a64(const void *data, size_t n);

/* ---- run_mesh.c: tgc run on a mesh of MPI ranks ---- */
/* One sharded run: every rank opens the communicator, binds the mesh and
 * runs its block of the graph (its pipeline stage's, with pp); the values
 * are bound on the unsharded graph (`whole`, compiled as on one device:
 * the same inputs and parameters) and each rank takes its blocks; the
 * outputs come back whole on rank 0, which alone prints. */
typedef struct {
  struct rt_comm *comm;          /* NULL: not a sharded run */
  int coord[IR_NUM_AXES];        /* this rank's place in the mesh */
  bool quiet;                    /* not rank 0: prints nothing (stdout is /dev/null) */
  ir_diag *diag;                 /* not rank 0: where the compile's errors go (every rank has them) */
  FILE *null;
  const tool_backend *backend;
  ir_diag *d;
  ir_graph *whole;               /* tool_mesh_run_compile_whole */
  const char *command;           /* in: "run" (NULL) or "generate", for messages */
  char *whole_text;
} tool_mesh_run;
/* --mesh of more than one rank: the communicator (-1 after reporting: a
 * run without a launcher, a rank count that is not the mesh's, --stage, a
 * backend other than the cpu); sets o's pipeline stage to this rank's. */
int tool_mesh_run_open(tool_mesh_run *mr, tool_compile_opts *o, const tool_backend *tb, ir_diag *d);
/* The graph compiled as on one device (no mesh, no dumps) into mr->whole. */
int tool_mesh_run_compile_whole(tool_mesh_run *mr, const tool_compile_opts *o);
/* Runs the sharded g on this rank from the whole inputs and parameters
 * (mr->whole's); outputs[i] (mr->whole's outputs) are filled on rank 0
 * (and on every rank without pp). -1 after reporting through d. */
int tool_mesh_run_execute(tool_mesh_run *mr, const ir_graph *g, rt_tensor *const *inputs, rt_tensor *const *params,
                          rt_tensor **outputs, rt_stats *stats, ir_diag *d);
/* local[i] (new host tensors, the caller frees): this rank's block of the
 * parameter of mr->whole (whole: its tensors) that g's parameter i is. */
int tool_mesh_run_params(tool_mesh_run *mr, const ir_graph *g, rt_tensor *const *whole, rt_tensor **local,
                         ir_diag *d);
void tool_mesh_run_close(tool_mesh_run *mr);

/* ---- profile.c ---- */
/* The per-op table of p (filled by `runs` graph runs) under a title line. */
void tool_print_profile(FILE *f, const rt_profile *p, const char *title, int64_t runs);

/* The memory check (bind.c): refuses, before anything is allocated, a graph
 * (run, grad, gradcheck) or a training program (train) whose memory plans
 * need more than this machine (this rank's share of it) has. */
int tool_check_memory(const ir_graph *g, ir_diag *d);
int tool_check_training_memory(const pass_training *pt, ir_diag *d);
/* "name = v  (dtype)" for scalars, nested lists up to 256 elements, else a summary. */
void tool_print_tensor(FILE *out, const char *name, const rt_tensor *t);
/* A number for scalars, else {"dtype", "shape", "data" | "summary"} (as `tgc run --json`). */
json_t *tool_tensor_json(const rt_tensor *t);

#endif
