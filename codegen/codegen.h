/* codegen/codegen.h — the codegen layer's public header: lowering a
 * planned graph to a program of CUDA C kernels, cuBLASLt calls and copies;
 * compiling CUDA C through the entry-point table's NVRTC (real or
 * emulated), the disk cache of compiled code, and the prelude every
 * generated kernel includes. May include ir/ and passes/, never runtime/.
 *
 *   lower.c    a graph + its memory plan -> a cg_program (the driver,
 *              the per-op emitter table, the source buffer)
 *   emit_*.c   the emitters: elementwise and layout maps, reductions and
 *              row ops, model ops and attention, matrix products
 *   sha256.c   SHA-256: cache keys and entry checksums
 *   cache.c    the disk cache ($TGC_CACHE_DIR, default ~/.cache/tgc)
 *   nvrtc.c    compile a source for an arch; ptxas info per kernel
 *   parts.c    a program split into translation units compiled by a pool of threads
 *   cuda_api.c the checks every CUDA call goes through (cuda_api.h)
 *   prelude/   tgc_cuda.h (device side), tgc_ops.h (the ops' scalar
 *              meaning), tgc_kernels.h and tgc_attention.h (kernel bodies),
 *              emu.h + emu_abi.h (the CPU side)
 */
#ifndef TGC_CODEGEN_H
#define TGC_CODEGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"
#include "ir.h"
#include "analysis.h"

/* ===================================================================== */
/* lower.c — a planned graph to a program                                 */
/* ===================================================================== */
/* A program is what a backend runs for a graph: per step of the memory
 * plan (pass_plan), a list of actions — kernel launches, cuBLASLt matrix
 * products, device copies and memsets — over the addresses the plan gives
 * the step's operands and results (the executor hands them to the backend
 * at each step, so nothing here depends on where the arena is). The
 * kernels are one CUDA C source (cg_program.source): each kernel named
 * after the IR value it computes, with the IR line and `// from FILE:LINE`
 * above it, sizes as constants. View steps (reshape) have no actions.
 *
 * Kernels take pointers only: the node's operands, its results, and the
 * program's workspace when they ask for it (scratch for two-pass
 * reductions; cg_program.workspace_bytes, allocated by the backend once).
 * Kernels of ops the plan may compute in place (IR_OPF_INPLACE) read every
 * element of their operands before writing that element of their results.
 * Every op of ir/ops.def lowers except GRAD (expanded by autodiff first). */
typedef enum { CG_REF_IN, CG_REF_OUT, CG_REF_WORKSPACE } cg_ref_kind;
/* An address: operand / result `index` of the step's node (or, back > 0,
 * of the node `back` steps earlier: a deferred step's, see cg_step), or the
 * workspace; plus bytes. */
typedef struct {
  cg_ref_kind kind;
  int index;
  size_t offset;
  int back;
} cg_ref;

typedef enum {
  CG_EPI_NONE,       /* D = A B */
  CG_EPI_BIAS,       /* D = A B + bias[n] */
  CG_EPI_RELU_BIAS,  /* relu(A B + bias) */
  CG_EPI_GELU_BIAS,  /* gelu(A B + bias) (tanh form) */
  CG_EPI_DGELU,      /* (A B) * gelu'(aux), aux [m, n] with ldc */
  CG_EPI_BGRAD_B,    /* D = A B, and bias[n] = sum over k of B[k, n] written (a bias gradient: cuBLASLt's
                      * BGRADA, B being its A); `bias` is then a result */
} cg_epilogue;
const char *cg_epilogue_name(cg_epilogue e); /* "none" "bias" "relu+bias" "gelu+bias" "dgelu" "bgrad" */

/* One matrix product in row-major terms (the backend turns it into
 * cuBLASLt's column-major one): C[m, n] = op(A)[m, k] op(B)[k, n] for
 * `batch` batches, op = transpose when trans_*; ld* are the row-major
 * leading dimensions of the stored matrices; strides are elements between
 * batches (0: the same matrix for every batch). */
typedef struct {
  ir_dtype dtype;             /* of A, B, C (and bias, aux) */
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  int64_t batch;
  int64_t stride_a, stride_b, stride_c;
  cg_ref a, b, c;
  cg_epilogue epilogue;
  cg_ref bias, aux;
  bool accumulate;            /* C += the product (beta = 1) instead of C = (linear_cross_entropy's dw over chunks) */
  int fallback_kernel;        /* with an epilogue: the kernel that applies it after a plain product, for a
                               * cuBLASLt that has no algorithm with the epilogue (-1: none needed) */
  unsigned fallback_grid;     /* its blocks (of its kernel's block size) */
} cg_gemm;

typedef enum { CG_ACT_KERNEL, CG_ACT_GEMM, CG_ACT_COPY, CG_ACT_MEMSET } cg_action_kind;
typedef struct {
  cg_action_kind kind;
  int kernel;                 /* KERNEL: index in kernels */
  unsigned grid[3], block;    /* KERNEL: launch shape (block: threads, x only) */
  unsigned smem_dynamic;      /* KERNEL: dynamic shared memory bytes */
  cg_gemm gemm;               /* GEMM */
  cg_ref dst, src;            /* COPY (dst, src), MEMSET (dst: zeros) */
  size_t bytes;               /* COPY, MEMSET */
} cg_action;

typedef struct {
  char name[160];             /* the kernel's symbol */
  int node;                   /* index in g->nodes */
  int first_arg, n_args;      /* its parameters: cg_program.args[first_arg ..] */
  unsigned block;             /* threads per block (its __launch_bounds__) */
} cg_kernel;

/* A step's actions. A deferred step runs nothing itself: a later step's
 * launch computes it together with others (a multi-tensor launch of the
 * same fused expression over several tensors: the optimizer's update of
 * every parameter); the backend keeps the addresses the executor hands it
 * at the deferred step for that launch. */
typedef struct {
  int first_action, n_actions;
  bool deferred;
  /* Bytes of device memory the program moves for this step's node: every
   * operand and result of the node that some action (this step's or, for a
   * deferred step, the later launch's) reads or writes, once, at its full
   * size; a result no node reads is not stored and not counted; an emitter
   * whose kernel reads less than a whole operand says how much
   * (embedding: the gathered rows); and each result of an IR_OPF_ZEROED
   * node once more, live or not: the executor zero-fills it before the
   * step. Not counted: the workspace (partial sums, a few KiB). View steps
   * move 0. pass_node_cost's bytes
   * are the same figure computed from the graph (test_cost_lowering). An
   * emitter whose actions read an operand more than once (linear_cross_entropy's
   * products per chunk) gives the sum over its actions (cg_step_moves). */
  double bytes;
} cg_step;

/* The source as pieces a compile may split it on (cg_program_parts): a
 * chunk is the text one step (or one multi-tensor group) wrote, from the
 * end of the previous chunk (or of the header) to `end`, and the kernels
 * it defines, first_kernel .. first_kernel + n_kernels - 1. Steps that
 * define no kernel close no chunk: their text (if any) goes with the next
 * chunk, and text after the last chunk goes with it. No chunk refers to
 * another's text, so any run of chunks after the header is a complete
 * translation unit. */
typedef struct {
  size_t end;
  int first_kernel, n_kernels;
} cg_chunk;

typedef struct cg_program {
  char *source;               /* CUDA C of every kernel; includes the prelude */
  size_t source_len;
  size_t header_len;          /* source[0, header_len): the comment lines and the prelude includes */
  cg_chunk *chunks;           /* in source order; their kernels ascend and cover every kernel */
  int n_chunks;
  cg_kernel *kernels;
  int n_kernels;
  cg_ref *args;
  int n_args;
  cg_action *actions;
  int n_actions;
  cg_step *steps;             /* one per plan step */
  int n_steps;
  size_t workspace_bytes;
  int n_gemms, n_copies, n_memsets, n_launches;
} cg_program;

typedef struct {
  const char *title;          /* the source's first comment line, e.g. "examples/gpt.tg, training step" */
} cg_lower_options;

/* Lowers g (verified, GRAD-free) under plan (pass_memplan of g). NULL with
 * "file:line:col: cannot lower %v (op): ..." in err when some node's shape
 * or attribute is outside what the emitters handle. */
cg_program *cg_lower(const ir_graph *g, const pass_plan *plan, const cg_lower_options *o, char *err, size_t errlen);
void cg_program_free(cg_program *p);
/* Whether op has an emitter (every op but GRAD; tests loop over ops.def). */
bool cg_op_lowers(ir_op op);
/* The C identifier a value's kernels are named after: "k_" and the name
 * with non-identifier characters as '_' (%d_x.3 -> k_d_x_3), into buf. */
void cg_kernel_base_name(const ir_value *v, char *buf, size_t len);

/* ===================================================================== */
/* sha256.c                                                               */
/* ===================================================================== */
typedef struct {
  uint8_t bytes[32];
} cg_hash;

typedef struct {
  uint32_t h[8];
  uint64_t bytes;
  uint8_t buf[64];
  size_t fill;
} cg_sha256;

void cg_sha256_init(cg_sha256 *s);
void cg_sha256_update(cg_sha256 *s, const void *data, size_t n);
void cg_sha256_final(cg_sha256 *s, cg_hash *out);
/* A length-prefixed field: the concatenation of fields is unambiguous. */
void cg_sha256_field(cg_sha256 *s, const void *data, size_t n);
void cg_hash_hex(const cg_hash *h, char out[65]);

/* ===================================================================== */
/* cache.c — compiled code on disk                                        */
/* ===================================================================== */
/* One file per entry, DIR/cuda/<64 hex digits of the key>.tgcc, holding
 * tagged blobs (image, PTX, log) and a SHA-256 of the whole file. Writes go
 * to a unique temporary name in the same directory and are renamed into
 * place, so readers see an old entry, a new one, or none. An entry that
 * fails any check (magic, version, key, sizes, checksum) is removed,
 * counted as corrupt and treated as a miss: it is recompiled, never
 * trusted. */
typedef struct cg_cache cg_cache;

typedef struct {
  int64_t compiles;     /* sources compiled (cg_nvrtc_compile) */
  int64_t hits;         /* entries found and verified */
  int64_t misses;       /* lookups that found no (usable) entry */
  int64_t corrupt;      /* entries rejected and removed */
  int64_t stores;       /* entries written */
  int64_t store_failures; /* entries that could not be written (compiling still succeeds) */
} cg_cache_stats;

typedef struct {
  uint32_t tag;         /* what the blob is (the caller's numbering) */
  const void *data;
  size_t size;
} cg_blob;

/* dir NULL: $TGC_CACHE_DIR if set, else $HOME/.cache/tgc. Creates the
 * directories. NULL with a message in err when it cannot. */
cg_cache *cg_cache_open(const char *dir, char *err, size_t errlen);
void cg_cache_free(cg_cache *c);
const char *cg_cache_dir(const cg_cache *c);
cg_cache_stats *cg_cache_stats_of(cg_cache *c); /* read it when no compile is running */
void cg_cache_count_compile(cg_cache *c);       /* stats.compiles++, from any thread */
/* The entry file of key (whether or not it exists). */
void cg_cache_entry_path(const cg_cache *c, const cg_hash *key, char *buf, size_t len);
/* A hit returns the number of blobs (<= max) pointing into *storage, which
 * the caller frees; a miss returns 0. */
int cg_cache_get(cg_cache *c, const cg_hash *key, cg_blob *blobs, int max, void **storage);
/* Writes the entry; 0 or -1 with err (the stats count either). */
int cg_cache_put(cg_cache *c, const cg_hash *key, const cg_blob *blobs, int n, char *err, size_t errlen);

/* ===================================================================== */
/* nvrtc.c — CUDA C to a loadable image                                   */
/* ===================================================================== */
/* What ptxas says about one kernel (-1: not reported; the emulator reports
 * shared memory only). */
typedef struct {
  char name[128];
  char arch[16];
  int registers;
  int barriers;
  long long smem_bytes;         /* static shared memory */
  long long stack_bytes;        /* stack frame */
  long long spill_store_bytes;
  long long spill_load_bytes;
} cg_kernel_info;

typedef struct {
  const char *name;       /* the file name messages show, e.g. "model.cu" */
  const char *source;     /* CUDA C; includes "tgc_cuda.h" */
  const char *arch;       /* "sm_80", "sm_90", ... */
  const char *const *options;  /* extra NVRTC options (e.g. "-DTILE=64"), or NULL */
  int noptions;
} cg_cuda_source;

typedef struct {
  void *image;            /* cubin, or the emulator's module: cuModuleLoadData's argument */
  size_t image_size;
  char *ptx;              /* PTX text ("" from the emulator) */
  size_t ptx_size;
  char *log;              /* the compiler's log (ptxas info lines) */
  cg_kernel_info *kernels;
  int nkernels;
  bool cached;            /* came from the disk cache */
  cg_hash key;
} cg_cuda_binary;

/* Compiles src through api's NVRTC (real or emulated) with the options tgc
 * always passes (--gpu-architecture, --ptxas-options=-v, -std=c++17,
 * -lineinfo) and the prelude as in-memory headers; looks the result up in
 * cache first when cache is not NULL (keyed by source, prelude, arch,
 * options, NVRTC version and api->build_id) and stores it after. A failed
 * compile is a code generator bug: the source and log are written to
 * DIR/failed/ (DIR = the cache's, else $TMPDIR or /tmp) and err names the
 * first error and both paths. */
int cg_nvrtc_compile(const cg_cuda_api *api, cg_cache *cache, const cg_cuda_source *src, cg_cuda_binary *out,
                     char *err, size_t errlen);
void cg_cuda_binary_free(cg_cuda_binary *b);
/* Parses ptxas -v output (as NVRTC returns it in the log) into one entry
 * per "Compiling entry function" (malloc'd array, caller frees). Returns
 * the number of kernels. */
int cg_ptxas_info_parse(const char *log, cg_kernel_info **kernels);
/* The info of the kernel named name, or NULL. */
const cg_kernel_info *cg_cuda_binary_kernel(const cg_cuda_binary *b, const char *name);

/* ===================================================================== */
/* parts.c — a program as several translation units, compiled concurrently */
/* ===================================================================== */
/* A part: the program's header and a run of its chunks, defining kernels
 * first_kernel .. first_kernel + n_kernels - 1 (load it as its own module
 * and look those kernels up in it). */
typedef struct {
  char name[192];         /* "gpt_step.p3.cu"; the program's name when it is one part */
  char *source;
  size_t len;
  int first_kernel, n_kernels;
} cg_part;

#define CG_PART_KERNELS 16                /* kernels per part (a part ends at the chunk that reaches it) */
#define CG_PART_KERNEL_BYTES 1024         /* a chunk counts as one kernel per this many bytes of its text, if more */
#define CG_DEFAULT_COMPILE_THREADS_CAP 16 /* threads without TGC_COMPILE_THREADS: the online CPUs, at most this */
#define CG_MAX_COMPILE_THREADS 256

/* Splits p (named `name`, e.g. "gpt_step.cu") into parts of about
 * kernels_per_part kernels (a chunk counting as one kernel per
 * CG_PART_KERNEL_BYTES of its text when that is more), cut at chunk
 * boundaries: the same program
 * gives the same parts. A program of at most kernels_per_part kernels is
 * one part whose source is p->source. Returns the number of parts (0 for a
 * program without kernels) with *parts malloc'd (cg_parts_free), or -1 out
 * of memory. */
int cg_program_parts(const cg_program *p, const char *name, int kernels_per_part, cg_part **parts);
void cg_parts_free(cg_part *parts, int n);
/* Threads to compile with: $TGC_COMPILE_THREADS (1 .. CG_MAX_COMPILE_THREADS)
 * if set, else the online CPUs capped at CG_DEFAULT_COMPILE_THREADS_CAP; -1
 * with a message naming the variable when it is not such a number. */
int cg_compile_threads(char *err, size_t errlen);
/* Compiles parts[0..n) for arch with cg_nvrtc_compile (each cached under
 * its own key) on `threads` threads, into bins[0..n). 0, or -1 with the
 * first failing part's error (every bin freed). */
int cg_nvrtc_compile_parts(const cg_cuda_api *api, cg_cache *cache, const char *arch, const cg_part *parts, int n,
                           int threads, cg_cuda_binary *bins, char *err, size_t errlen);

/* ===================================================================== */
/* prelude/ — compiled into the binary (prelude.c, generated)             */
/* ===================================================================== */
typedef struct {
  const char *name;       /* "tgc_cuda.h", "emu.h", "emu_abi.h" */
  const char *text;
} cg_prelude_file;

extern const cg_prelude_file cg_prelude_files[];
extern const int cg_prelude_count;

#endif
