/* ir/ir.h — the tgc intermediate representation: the floor every other layer
 * stands on. It knows no backend and no surface syntax.
 *
 * A Graph is SSA over tensors: values (typed, shaped, named) and nodes
 * (an op from ops.def, operands, results, attributes) in topological order.
 * Programs are straight-line. Graph inputs and parameters are values with no
 * defining node; everything else is the result of exactly one node.
 * All memory of a graph lives in its arena and is freed by ir_graph_free.
 *
 * Sections (one per file of ir/):
 *   arena.c   — bump allocator
 *   dtype.c   — dtype names/sizes, bf16/f16 conversion, scalar op semantics
 *   diag.c    — diagnostics: file:line:col: error: msg, source line, caret
 *   graph.c   — graph construction, names, use replacement, dead-node removal
 *   expr.c    — sub-languages inside attributes (fused expressions, einsum), parsed once
 *   infer.c   — shape/dtype inference per op (the rules sema and the verifier share)
 *   verify.c  — ir_verify
 *   print.c   — textual IR printer
 *   read.c    — textual IR reader (parse(print(g)) prints byte-identically)
 *   dot.c     — Graphviz export
 *   json.c    — JSON export (jansson)
 */
#ifndef TGC_IR_H
#define TGC_IR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define IR_MAX_RANK 8
/* Largest element count of one tensor the compiler accepts (2^48): larger
 * products are reported as overflow by shape checks, never allocated. */
#define IR_MAX_ELEMENTS (INT64_C(1) << 48)

/* ===================================================================== */
/* arena.c                                                                */
/* ===================================================================== */
typedef struct ir_arena ir_arena;
ir_arena *ir_arena_new(void);
void *ir_arena_alloc(ir_arena *a, size_t size);              /* zeroed, 16-aligned */
char *ir_arena_strdup(ir_arena *a, const char *s);
char *ir_arena_strndup(ir_arena *a, const char *s, size_t n);
void ir_arena_free(ir_arena *a);

/* ===================================================================== */
/* dtype.c                                                                */
/* ===================================================================== */
typedef enum {
#define DTYPE(id, name, bytes, is_float) IR_DT_##id,
#include "dtypes.def"
#undef DTYPE
  IR_NUM_DTYPES
} ir_dtype;

const char *ir_dtype_name(ir_dtype t);
int ir_dtype_from_name(const char *name);   /* -1 if unknown */
size_t ir_dtype_size(ir_dtype t);
bool ir_dtype_is_float(ir_dtype t);

/* Conversions, round to nearest even; NaN stays NaN. */
uint16_t ir_f32_to_bf16(float x);
float ir_bf16_to_f32(uint16_t x);
uint16_t ir_f32_to_f16(float x);
float ir_f16_to_f32(uint16_t x);
/* Round a double to the value the dtype can hold (what storing it does):
 * f32/bf16/f16 round, integers truncate toward zero (saturating), bool -> 0/1. */
double ir_round_to_dtype(ir_dtype t, double x);

/* ===================================================================== */
/* ops (ops.def)                                                          */
/* ===================================================================== */
typedef enum {
#define OP(id, name, nin, nout, kind, flags, flops, scalar) IR_OP_##id,
#include "ops.def"
#undef OP
  IR_NUM_OPS
} ir_op;

typedef enum { IR_OPK_NULLARY, IR_OPK_UNARY, IR_OPK_BINARY, IR_OPK_OTHER } ir_op_kind;

/* The facts column of ops.def (see there for their meaning). */
enum {
  IR_OPF_FLOAT = 1 << 0,   /* elementwise operands: floating-point only */
  IR_OPF_NUMERIC = 1 << 1, /* elementwise operands: any dtype but bool */
  IR_OPF_BOOL = 1 << 2,    /* elementwise operands: bool only */
  IR_OPF_CMP = 1 << 3,     /* a comparison: operands of one dtype, bool result */
  IR_OPF_LANG = 1 << 4,    /* a .tg builtin function of the op's name */
  IR_OPF_CHEAP = 1 << 5,   /* cheap to recompute per element of a larger result */
  IR_OPF_INPLACE = 1 << 6, /* a result may take over a same-typed dead operand's buffer */
  IR_OPF_VIEW = 1 << 7,    /* the result is the operand's bytes */
  IR_OPF_ZEROED = 1 << 8,  /* results start zero-filled (kernels accumulate) */
  IR_OPF_COMM = 1 << 9,    /* communicates over a mesh axis: the executor hands it to the comm layer */
  IR_OPF_EFFECT = 1 << 10, /* matters beyond its results (send/recv): never removed as dead, never reordered */
};

/* The scalar meaning of an elementwise op, in double (ir/scalar.h). */
typedef double (*ir_scalar_fn)(double a, double b);

const char *ir_op_name(ir_op op);
int ir_op_from_name(const char *name);      /* -1 if unknown */
int ir_op_num_inputs(ir_op op);             /* -1 = variadic */
int ir_op_num_outputs(ir_op op);            /* -1 = variadic */
ir_op_kind ir_op_kind_of(ir_op op);
unsigned ir_op_flags(ir_op op);             /* IR_OPF_* */
static inline bool ir_op_has(ir_op op, unsigned flag) { return (ir_op_flags(op) & flag) != 0; }
/* FLOPs per element of the (first) result when a constant, else -1 (a
 * formula in analysis/cost.c). */
int ir_op_flops_per_element(ir_op op);
bool ir_op_is_elementwise(ir_op op);        /* UNARY, BINARY or WHERE */
bool ir_op_is_comparison(ir_op op);         /* IR_OPF_CMP: result is bool */

/* Scalar semantics of elementwise ops, in double: the one definition that
 * constant folding and every reference kernel use (results are then rounded
 * with ir_round_to_dtype to the result dtype). CAST is the identity here. */
double ir_eval_unary(ir_op op, double x);
double ir_eval_binary(ir_op op, double a, double b);

/* ===================================================================== */
/* source locations and diagnostics (diag.c)                              */
/* ===================================================================== */
typedef struct {
  const char *file; /* path as the user gave it; NULL = unknown */
  int line;         /* 1-based; 0 = unknown */
  int col;          /* 1-based; 0 = unknown */
} ir_loc;

typedef struct ir_diag ir_diag;
ir_diag *ir_diag_new(FILE *out);            /* out: usually stderr */
void ir_diag_free(ir_diag *d);
/* Registers source text (not copied; must outlive d) so messages can quote
 * the offending line. */
void ir_diag_add_source(ir_diag *d, const char *path, const char *text, size_t len);
/* "file:line:col: error: msg", then the source line and a caret. */
void ir_error(ir_diag *d, ir_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void ir_verror(ir_diag *d, ir_loc loc, const char *fmt, va_list ap);
void ir_note(ir_diag *d, ir_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An error with no location ("tgc: error: msg"). */
void ir_error_plain(ir_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ir_diag_errors(const ir_diag *d);
/* After this many errors further ones are counted but not printed (default 20). */
void ir_diag_set_max_errors(ir_diag *d, int n);
/* Quiet: errors and notes are counted but not printed (under mpirun, the
 * ranks but one while they read the same input and would print the same). */
void ir_diag_set_quiet(ir_diag *d, bool quiet);

/* Opens path read-only, never blocking on a FIFO or a device (it is opened
 * O_NONBLOCK, and blocking is restored only once fstat says it is a regular
 * file). Returns the fd; -1 with errno set when it cannot be opened; -2
 * when it is not a regular file (closed again). Every reader of user files
 * opens them through this. */
int ir_open_regular(const char *path);
/* Reads a whole regular file into a malloc'd, NUL-terminated buffer.
 * Directories, devices, unreadable and over-large (> max_bytes) files are
 * reported through d ("tgc: error: PATH: ..."), returning NULL. */
char *ir_read_file(const char *path, size_t max_bytes, size_t *len, ir_diag *d);

/* ===================================================================== */
/* graph.c                                                                */
/* ===================================================================== */
/* The hash of n bytes for the name tables (graph, reader, verifier, sema
 * scopes): FNV-1a, then a finalizer, since the tables index by the low bits
 * and FNV-1a's low bits depend only on the low bits of the bytes. */
uint64_t ir_hash_bytes(const char *s, size_t n);

typedef struct {
  ir_dtype dtype;
  int rank;
  int64_t dims[IR_MAX_RANK];
} ir_type;

int64_t ir_type_numel(const ir_type *t);
bool ir_type_equal(const ir_type *a, const ir_type *b);
/* "f32[2, 3]" into buf; returns buf. */
char *ir_type_str(const ir_type *t, char *buf, size_t n);

typedef enum {
  IR_ROLE_INPUT,     /* a graph input fed at run time */
  IR_ROLE_PARAM,     /* a trainable parameter */
  IR_ROLE_CONST,     /* a compile-time constant */
  IR_ROLE_ACT,       /* an activation (default for node results) */
  IR_ROLE_GRAD,      /* a gradient */
  IR_ROLE_OPT_STATE, /* optimizer state */
  IR_ROLE_RECOMPUTE, /* a forward value recomputed for the backward pass (checkpoint pass) */
  IR_NUM_ROLES
} ir_role;
const char *ir_role_name(ir_role r);        /* "input" "param" "const" "act" "grad" "opt_state" "recompute" */
int ir_role_from_name(const char *name);

/* ===================================================================== */
/* mesh.c                                                                 */
/* ===================================================================== */
/* The device mesh a graph runs on: three named axes, outermost first
 * (pipeline, data, tensor), each of size >= 1; a rank's coordinates are the
 * row-major digits of its rank, so a tensor-parallel group is consecutive
 * ranks (Megatron-LM's layout). sp: sequence parallelism on the tp axis.
 * stage: after the shard pass cut the graph into pipeline stages, the
 * stage this graph is (-1: not cut). All sizes 1 = one device. */
typedef enum {
#define IR_MESH_AXIS(id, name, word) IR_AXIS_##id,
#include "mesh_axes.def"
#undef IR_MESH_AXIS
  IR_NUM_AXES
} ir_axis;
typedef struct {
  int size[IR_NUM_AXES];
  bool sp;
  int stage;
} ir_mesh;
const char *ir_axis_name(ir_axis a);               /* "pp" "dp" "tp"; "?" out of range */
const char *ir_axis_word(ir_axis a);               /* "pipeline" "data" "tensor" (the planner's) */
/* For text only (readers of --mesh, specs, .ir files): -1 if none. Built
 * graphs hold the index (ir_attr_mesh_axis), never the name. */
int ir_axis_from_name(const char *name, size_t n);
ir_mesh ir_mesh_single(void);                      /* every size 1, no sp, stage -1 */
int64_t ir_mesh_ranks(const ir_mesh *m);           /* the product of the sizes */
bool ir_mesh_is_single(const ir_mesh *m);          /* one rank, no sp, no stage */
/* Parses "dp=2,tp=2,pp=2" (any order; "sp" as an item turns on sequence
 * parallelism and needs tp; sizes 1..4096). 0, or -1 and a message. */
int ir_mesh_parse(const char *text, ir_mesh *m, char *err, size_t errlen);
/* "dp=2, tp=2 sp" (axes of size > 1, outermost first; "one device" when none). */
char *ir_mesh_str(const ir_mesh *m, char *buf, size_t n);

/* The kinds of collective communication (collectives.def): the comm
 * layer's rt_coll_kind and the planner's pass_coll_kind. */
typedef enum {
#define IR_COLL(id, name, op, label, ring) IR_COLL_##id,
#include "collectives.def"
#undef IR_COLL
  IR_NUM_COLLS
} ir_coll;
const char *ir_coll_name(ir_coll k);  /* "all_reduce" ... "recv"; "?" out of range */
const char *ir_coll_label(ir_coll k); /* "all-reduce" ... "send/recv" (the planner's) */
ir_op ir_coll_op(ir_coll k);          /* the op that runs it (IR_NUM_OPS out of range) */
int ir_coll_of_op(ir_op op);          /* the kind an op runs; -1: none (mesh_slice, compute) */
/* Bytes one rank sends per operand byte over a ring of n ranks (0 when n <= 1). */
double ir_coll_ring_factor(ir_coll k, int64_t n);
/* Ops that name a mesh axis in attribute "axis" (every COMM op, and
 * mesh_slice): the attribute holds the axis index (IR_ATTR_MESH_AXIS). */
static inline bool ir_op_on_mesh_axis(ir_op op) { return ir_op_has(op, IR_OPF_COMM) || op == IR_OP_MESH_SLICE; }

/* How a value is laid out over the mesh. split[d]: the mesh axes (a bit
 * mask, bit a = axis a) that divide dim d, nested in mesh order (dims split
 * over dp and tp hold block dp_coord * tp + tp_coord). partial: the axes
 * over which the value is a partial sum (every rank of such a group holds a
 * summand). An axis splits at most one dim and is never both split and
 * partial. After the shard pass, a value's type is what one rank holds (a
 * split dim is the global size / the product of its axes' sizes); before,
 * specs are constraints on the whole value. Zero = replicated. */
typedef struct {
  uint8_t split[IR_MAX_RANK];
  uint8_t partial;
  /* pieces[d] = k > 1: dim d (within the block of its outer axes) is k
   * equal parts (q, k and v side by side; a [B, T] flattened with T split)
   * and each part is split over the innermost axis splitting d: a rank holds
   * its block of every part, in part order (Megatron-LM's layout of a fused
   * projection). */
  uint8_t pieces[IR_MAX_RANK];
  /* pad[d] > 0: dim d does not divide by its blocks, so the whole dim is
   * padded at its end by pad[d] elements to a multiple of them (Megatron-LM's
   * padded vocabulary: a rank holds (size + pad) / blocks elements, the last
   * ranks' trailing ones padding: zeros no result depends on). The whole
   * value has size elements there (ir_shard_global_type); a rank's elements
   * whose global index is >= size are padding. */
  int32_t pad[IR_MAX_RANK];
} ir_shard;
bool ir_shard_is_replicated(const ir_shard *s);
/* The parts of dim d (1 when not in parts). */
static inline int ir_shard_pieces(const ir_shard *s, int d) { return s->pieces[d] > 1 ? s->pieces[d] : 1; }
bool ir_shard_equal(const ir_shard *a, const ir_shard *b, int rank);
/* How many blocks the layout cuts dim d into (the product of the sizes of the axes splitting it). */
int64_t ir_shard_blocks(const ir_shard *s, const ir_mesh *m, int d);
/* The whole value's type from what one rank holds (local) and its layout
 * (less the padding). */
ir_type ir_shard_global_type(const ir_type *local, const ir_shard *s, const ir_mesh *m);
/* Where element l (0 <= l < local_size) of dim d of the rank at coord
 * (coordinates by ir_axis) sits in the whole value: its block is the
 * row-major index of the rank's coordinates on the axes splitting d
 * (outermost first); a dim in parts holds that block of every part. */
int64_t ir_shard_global_index(const ir_shard *s, const ir_mesh *m, const int *coord, int d, int64_t local_size,
                              int64_t l);
/* Parses a sharding constraint's spec (shard_hint's {spec}): `rank`
 * comma-separated entries, each "-" (replicated) or the one axis (dp or tp)
 * that splits that dim; an axis at most once. 0, or -1 and a message. */
int ir_shard_spec_parse(const char *text, int rank, ir_shard *out, char *err, size_t errlen);
/* "[dp, -, (dp, tp), tp:3, tp pad 1] partial(tp)": what the printer writes after "shard". */
char *ir_shard_str(const ir_shard *s, int rank, char *buf, size_t n);

typedef enum { IR_INIT_NONE, IR_INIT_ZEROS, IR_INIT_ONES, IR_INIT_NORMAL, IR_INIT_UNIFORM } ir_init_kind;
typedef struct {
  ir_init_kind kind;
  double a; /* normal: std (mean 0); uniform: low */
  double b; /* uniform: high */
} ir_init;

typedef struct ir_node ir_node;
typedef struct ir_value {
  int id;              /* index in graph->values (dense after ir_graph_compact) */
  const char *name;    /* unique within the graph, printed as %name */
  ir_type type;
  ir_role role;
  ir_shard shard;
  ir_loc loc;
  ir_node *def;        /* defining node; NULL for inputs and params */
  int def_result;      /* index among def's results */
  ir_init init;        /* params only */
} ir_value;

/* MESH_AXIS: a mesh axis index in i (an ir_axis), printed and read as its
 * name ({axis = "tp"}); the "axis" of the ops on a mesh axis. */
typedef enum { IR_ATTR_INT, IR_ATTR_FLOAT, IR_ATTR_INTS, IR_ATTR_STR, IR_ATTR_DTYPE, IR_ATTR_MESH_AXIS } ir_attr_kind;
typedef struct ir_expr ir_expr;
typedef struct ir_einsum ir_einsum;
typedef struct {
  const char *key;
  ir_attr_kind kind;
  int64_t i;            /* INT, DTYPE (an ir_dtype), MESH_AXIS (an ir_axis) */
  double f;             /* FLOAT */
  int n;                /* INTS: count */
  const int64_t *ints;  /* INTS */
  const char *s;        /* STR (for expr and eq: the printed form of the structure) */
  /* STR attributes holding a sub-language (expr.c): the structure parsed
   * from s when the node was built or read; NULL for every other attribute,
   * and when s does not parse (ir_infer then reports why). */
  const ir_expr *expr;      /* fused / fused_matmul "expr" */
  const ir_einsum *einsum;  /* einsum "eq" */
} ir_attr;

/* Attribute constructors for builders (ints/s are copied into the graph
 * arena by ir_graph_add_node, so stack storage is fine). */
ir_attr ir_attr_int(const char *key, int64_t v);
ir_attr ir_attr_float(const char *key, double v);
ir_attr ir_attr_ints(const char *key, const int64_t *v, int n);
ir_attr ir_attr_str(const char *key, const char *s);
ir_attr ir_attr_dtype(const char *key, ir_dtype t);
ir_attr ir_attr_mesh_axis(const char *key, ir_axis a);
/* A fused expression given as its structure and its text (ir_expr_print). */
ir_attr ir_attr_expr(const char *key, const ir_expr *e, const char *text);

struct ir_node {
  int id;            /* index in graph->nodes (dense after ir_graph_compact) */
  ir_op op;
  int n_in;
  ir_value **in;
  int n_out;
  ir_value **out;
  int n_attrs;
  ir_attr *attrs;    /* in insertion order; printed in that order */
  ir_loc loc;        /* the .tg line this node came from (kept by every pass) */
  int layer;         /* layer index from `repeat`, -1 if none */
  bool dead;         /* marked for removal by ir_graph_compact */
};

/* Attribute lookup: NULL / default when absent. */
const ir_attr *ir_node_attr(const ir_node *n, const char *key);
/* Whether n's result r may take over the buffer of operand i when nothing
 * reads that operand after n: true for the ops whose kernels read each
 * element of a same-typed operand before writing the same element of the
 * result (unary, binary, where, fused — every result of a multi-result
 * fused; i's type equal to r's), and for reshape (the bytes are the
 * result's, unchanged). The CPU executor (runtime/cpu/cpu.c) reuses buffers by
 * this rule, giving each result the first operand not already taken, and
 * the memory prediction (analysis/memplan.c) replays it: one definition. */
bool ir_node_may_reuse(const ir_node *n, int r, int i);
/* A fused node's {nonfinite} count (its last result, i64[]) or 0, and the
 * results its expression computes (n_out without that count). */
bool ir_fused_counts(const ir_node *n);
int ir_fused_results(const ir_node *n);
int64_t ir_node_attr_int(const ir_node *n, const char *key, int64_t dflt);
double ir_node_attr_float(const ir_node *n, const char *key, double dflt);
/* The mesh axis of an op on one (ir_op_on_mesh_axis): its "axis"
 * attribute's index; -1 when n has none. */
int ir_node_mesh_axis(const ir_node *n);
/* n is a transpose whose perm swaps exactly the last two axes
 * ([0, 1, ..., r-3, r-1, r-2], rank r >= 2): what matmul's transpose_a /
 * transpose_b read for free. */
bool ir_transpose_swaps_last2(const ir_node *n);

typedef struct {
  const char *name;  /* output name as the user sees it */
  ir_value *value;
} ir_output;

typedef struct ir_graph {
  ir_arena *arena;
  const char *name;         /* entry function name */
  const char *source_file;  /* the .tg it came from (NULL if unknown) */
  ir_value **values;  int n_values, cap_values;
  ir_node **nodes;    int n_nodes, cap_nodes;     /* topological order */
  ir_value **inputs;  int n_inputs, cap_inputs;
  ir_value **params;  int n_params, cap_params;
  ir_output *outputs; int n_outputs, cap_outputs;
  ir_mesh mesh;                                   /* ir_mesh_single() unless set */
  struct ir_name_set *names;                      /* private to graph.c */
} ir_graph;

ir_graph *ir_graph_new(const char *name, const char *source_file);
void ir_graph_free(ir_graph *g);

/* Returns hint if unused, else hint.1, hint.2, ...; NULL hint gives "0", "1", ...
 * The result is in the graph arena and reserved. */
const char *ir_graph_unique_name(ir_graph *g, const char *hint);
/* Finds a value by exact name; NULL if none. */
ir_value *ir_graph_find_value(const ir_graph *g, const char *name);
/* The index of the graph input / output named name; -1 if none. */
int ir_graph_input_index(const ir_graph *g, const char *name);
int ir_graph_output_index(const ir_graph *g, const char *name);

ir_value *ir_graph_add_input(ir_graph *g, const char *name, ir_type type, ir_loc loc);
ir_value *ir_graph_add_param(ir_graph *g, const char *name, ir_type type, ir_init init, ir_loc loc);
void ir_graph_add_output(ir_graph *g, const char *name, ir_value *v);

/* Appends a node with results of the given types (names from hints, which
 * may be NULL). Attributes are copied. Does no checking: use ir_infer first
 * (or ir_graph_build). */
ir_node *ir_graph_add_node(ir_graph *g, ir_op op, ir_value *const *in, int n_in,
                           const ir_type *out_types, int n_out, const ir_attr *attrs,
                           int n_attrs, const char *const *out_names, ir_loc loc);
/* Infers the result types with ir_infer and appends the node. On a type
 * error returns NULL and writes the message to err (nothing is added).
 * For NULLARY ops out_type gives the result type; otherwise it is ignored. */
ir_node *ir_graph_build(ir_graph *g, ir_op op, ir_value *const *in, int n_in,
                        const ir_attr *attrs, int n_attrs, const ir_type *out_type,
                        const char *name_hint, ir_loc loc, char *err, size_t errlen);
/* Convenience: single-result ir_graph_build that aborts on a type error
 * (for passes, whose inputs were already verified). */
ir_value *ir_graph_build1(ir_graph *g, ir_op op, ir_value *const *in, int n_in,
                          const ir_attr *attrs, int n_attrs, const char *name_hint, ir_loc loc);

/* Every use of old (node operands, graph outputs) now uses new. O(nodes):
 * a pass that replaces many values uses ir_replace_uses_many once. */
void ir_replace_all_uses(ir_graph *g, ir_value *old_v, ir_value *new_v);
/* Every use of olds[i] now uses news[i], for all i, in one walk over the
 * nodes and outputs (olds must be values of g; a new value may itself be
 * an old one: the replacements are followed to the end). */
void ir_replace_uses_many(ir_graph *g, ir_value *const *olds, ir_value *const *news, int n);
/* Number of uses of v as a node operand or graph output. O(nodes). */
int ir_count_uses(const ir_graph *g, const ir_value *v);
/* The same for every value at once: a malloc'd array (the caller frees)
 * indexed by value id, of *bound entries (the largest id + 1); uses by dead
 * nodes are not counted. NULL when out of memory. */
int *ir_use_counts(const ir_graph *g, int *bound);
/* Whether v is one of g's outputs. */
bool ir_graph_is_output(const ir_graph *g, const ir_value *v);
/* The largest id a value of g carries (a declared value or a node result,
 * dead nodes included) + 1: the size of a table indexed by value id. */
int ir_graph_id_bound(const ir_graph *g);
/* The live nodes reading v, each once, in program order, at most max into
 * out; -1 when there are more. */
int ir_graph_readers(const ir_graph *g, const ir_value *v, ir_node **out, int max);
/* Drops nodes marked dead and values no longer defined or declared;
 * renumbers ids densely. */
void ir_graph_compact(ir_graph *g);
/* Moves the last `count` nodes (appended by a pass) to just before position
 * pos, keeping their order: lets a pass build new nodes and then place them. */
void ir_graph_move_tail(ir_graph *g, int count, int pos);
/* Puts node n in the place of node dead (marked dead, removed at the next
 * ir_graph_compact), which takes n's place: O(1) where ir_graph_move_tail
 * shifts every later node, for a pass that replaces a node by a new one at
 * its position. Both must be nodes of g with ids equal to their index. */
void ir_graph_take_place(ir_graph *g, ir_node *n, ir_node *dead);

/* ===================================================================== */
/* expr.c — sub-languages inside attributes, parsed once                  */
/* ===================================================================== */
/* A fused expression (see expr.c for the grammar) as a postfix list of
 * instructions: every instruction after its arguments; results[r] is the
 * instruction that computes result r (one per ';'-separated expression). */
enum { IR_FUSED_MAX_RESULTS = 8 };
typedef enum {
  IR_EXPR_OPERAND, /* $index: operand `index` of the node */
  IR_EXPR_RESULT,  /* #index: result `index` of the same node (an earlier one) */
  IR_EXPR_CONST,   /* a literal `value` of `dtype` (as written: rounding is the consumer's) */
  IR_EXPR_OP,      /* elementwise `op` of arg[0..arity); cast converts to `dtype`;
                    * dropout: arg (x, key, g) with `value` p and `index` its stream */
} ir_expr_kind;
typedef struct {
  ir_expr_kind kind;
  ir_op op;
  ir_dtype dtype;
  int index;
  int arg[3];      /* instruction indices (smaller than this one's); -1 past the arity */
  double value;
} ir_expr_inst;
struct ir_expr {
  int n_ins, n_results;
  const ir_expr_inst *ins;
  const int *results;
};
/* Parses text (several ';'-separated results when multi); NULL with a
 * one-line message in err ("bad expr at offset 7: expected ')'", ...).
 * The result is malloc'd: ir_expr_free. */
ir_expr *ir_expr_parse(const char *text, bool multi, char *err, size_t errlen);
/* The number of arguments of an IR_EXPR_OP instruction (cast 1, dropout 3). */
int ir_expr_arity(const ir_expr_inst *in);
void ir_expr_free(ir_expr *e);
/* A copy in arena a (NULL: malloc'd). */
ir_expr *ir_expr_copy(const ir_expr *e, ir_arena *a);
/* The text ir_expr_parse reads back (malloc'd; NULL if out of memory). */
char *ir_expr_print(const ir_expr *e);
/* Building an expression instruction by instruction (passes). */
typedef struct ir_expr_builder ir_expr_builder;
ir_expr_builder *ir_expr_builder_new(void);
void ir_expr_builder_free(ir_expr_builder *b);
/* Appends an instruction (its args must be earlier ones); its index, -1 out of memory. */
int ir_expr_add(ir_expr_builder *b, ir_expr_inst in);
int ir_expr_add_result(ir_expr_builder *b, int root);
/* Appends all of e: operand $i becomes $operand_map[i] (or #0 when
 * operand_map[i] < 0), #k becomes #(k + result_base); e's results become
 * further results. 0, or -1 out of memory. */
int ir_expr_append(ir_expr_builder *b, const ir_expr *e, const int *operand_map, int result_base);
/* Result r stops being a result: the instructions that read it as #r read
 * its root instruction directly (a shared subexpression, printed %N when
 * read twice), later results move down by one. 0, or -1 (out of memory, no
 * such result, or #r read before its root; the builder is unchanged then
 * unless out of memory). */
int ir_expr_builder_unresult(ir_expr_builder *b, int r);
/* The expression built (malloc'd), NULL if empty or out of memory. */
ir_expr *ir_expr_builder_finish(ir_expr_builder *b);

/* An einsum equation "ij,jk->ik": input term t has the labels
 * labels[start[t] .. start[t + 1]), the output out[0 .. out_len); labels
 * are 0..51 for a-z, A-Z. Syntax only: that the terms fit the operands is
 * ir_infer's. */
struct ir_einsum {
  int n_terms;
  const int *start;
  const int8_t *labels;
  int out_len;
  const int8_t *out;
};
ir_einsum *ir_einsum_parse(const char *eq, char *err, size_t errlen); /* NULL + message; ir_einsum_free */
void ir_einsum_free(ir_einsum *e);
ir_einsum *ir_einsum_copy(const ir_einsum *e, ir_arena *a);
int ir_einsum_label(char letter);  /* -1 if not a letter */
char ir_einsum_letter(int label);
/* For ir_graph_add_node: gives attribute a of an op its structure in arena
 * (a copy of a->expr / a->einsum when set, else parsed from a->s). */
void ir_attr_parse(ir_op op, ir_attr *a, ir_arena *arena);

/* ===================================================================== */
/* infer.c                                                                */
/* ===================================================================== */
/* Computes result types of op on operand types in[0..n_in). For NULLARY ops
 * out[0] must hold the wanted type on entry and is validated. *n_out is set
 * to the result count. Returns 0, or -1 with a one-line message in err such
 * as "shape mismatch in matmul: f32[2, 3] @ f32[4, 5]: inner dimensions 3 and 4 differ".
 * For SPLIT, out must have room for one type per entry of `sizes`; for
 * FUSED (one result per ';'-separated expression), IR_FUSED_MAX_RESULTS.
 * Optional attributes: keepdims (0), slice step (1), matmul / fused_matmul
 * transpose_a and transpose_b (0); all others are required;
 * unknown attribute keys are ignored (passes may annotate nodes). */
int ir_infer(ir_op op, const ir_type *in, int n_in, const ir_attr *attrs, int n_attrs,
             ir_type *out, int *n_out, char *err, size_t errlen);
/* Numpy broadcast of two shapes; -1 with a message if incompatible. */
int ir_broadcast_shapes(const ir_type *a, const ir_type *b, ir_type *out, char *err, size_t errlen);

/* ===================================================================== */
/* verify.c                                                               */
/* ===================================================================== */
/* Checks def-before-use, arity, attribute presence, dtypes, re-inferred
 * shapes, unique names, output validity and sharding consistency. Reports
 * each problem through d at the node's location ("verifier: ..."); returns
 * the number of problems (0 = valid). */
int ir_verify(const ir_graph *g, ir_diag *d);
/* Where to report instead of each node's, value's and output's own loc
 * (arrays indexed by node id, value id and output index; a NULL array means
 * the own locs): the .ir reader passes the positions in the .ir text, so a
 * verifier error in a .ir file points at its line there. Graphs built by
 * passes have no text and use ir_verify. */
typedef struct {
  const ir_loc *nodes, *values, *outputs;
} ir_verify_locs;
int ir_verify_at(const ir_graph *g, const ir_verify_locs *at, ir_diag *d);

/* ===================================================================== */
/* print.c / read.c / dot.c / json.c                                      */
/* ===================================================================== */
void ir_print(FILE *out, const ir_graph *g);
/* malloc'd NUL-terminated text of ir_print. */
char *ir_print_to_string(const ir_graph *g);
/* Parses the textual IR. Errors are "path:line:col: error: ..." through d;
 * returns NULL if there was any. The result is verified by the caller. */
ir_graph *ir_parse(const char *path, const char *text, size_t len, ir_diag *d);
/* ir_parse, then ir_verify_at with the positions of the .ir text: every
 * error, the verifier's included, reads "path:line:col: error: ...".
 * Returns a verified graph or NULL. */
ir_graph *ir_read(const char *path, const char *text, size_t len, ir_diag *d);
void ir_print_dot(FILE *out, const ir_graph *g);
void ir_print_json(FILE *out, const ir_graph *g);

#endif /* TGC_IR_H */
