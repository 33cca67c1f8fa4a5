/* runtime/cuda_emu/capture.c — stream capture and CUDA graphs, shared by
 * the emulator (driver.c, memory.c, blaslt_rules.c) and the test suite's
 * stub of libcuda (tests/cuda_stub/stub.c).
 *
 * A stream in capture (cuStreamBeginCapture) runs nothing: each call the
 * filler makes on it (a launch, a copy, a memset, a product) is recorded as
 * a node, a replay function and a flat copy of what the call passed (the
 * kernel's parameter values, the descriptors' contents: what a GPU bakes
 * into the graph at capture). cuStreamEndCapture returns the nodes as a
 * graph; cuGraphInstantiate copies them into an executable graph;
 * cuGraphLaunch replays them in order on the launch's stream, each through
 * the filler's own entry, so every check a direct call makes is made again.
 *
 * The rules a GPU enforces in the default (global) capture mode:
 *   - capture cannot start on the NULL / legacy stream, nor on a stream
 *     that is already capturing (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
 *     CUDA_ERROR_ILLEGAL_STATE);
 *   - synchronizing a capturing stream (cuStreamSynchronize, cuCtxSynchronize)
 *     fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates
 *     the capture; so does cuMemAlloc / cuMemFree while any capture runs;
 *   - work on the legacy stream (a synchronous copy or memset, an
 *     asynchronous call on stream 0) while a blocking stream captures
 *     fails with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates it;
 *   - cuStreamEndCapture of an invalidated capture returns
 *     CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph.
 * The caller holds whatever lock its filler needs: the emulator and the
 * stub serialize their entries on one host thread per context. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

enum { MAX_CAPTURES = 16 };

typedef struct {
  emu_replay_fn replay;
  void *payload;
  size_t bytes;
} emu_node;

struct CUgraph_st {
  emu_node *nodes;
  int n, cap;
};

struct CUgraphExec_st {
  struct CUgraph_st g;
};

typedef struct {
  cg_cu_stream stream;
  bool blocking;      /* created without CU_STREAM_NON_BLOCKING: the legacy stream waits for it */
  bool invalidated;
  char why[256];      /* what invalidated it */
  struct CUgraph_st *graph;
} capture;
static capture caps[MAX_CAPTURES];
static int n_caps;
static rt_emu_capture_counters counters;

rt_emu_capture_counters rt_emu_capture_counters_get(void) { return counters; }

enum { MAX_GRAPHS = 4096 };
static bool live_add(const void *h);

static int find(cg_cu_stream s) {
  for (int i = 0; i < n_caps; i++)
    if (caps[i].stream == s) return i;
  return -1;
}

static bool is_legacy(cg_cu_stream s) { return !s || s == (cg_cu_stream)0x1; }

static void graph_free_nodes(struct CUgraph_st *g) {
  for (int i = 0; i < g->n; i++) free(g->nodes[i].payload);
  free(g->nodes);
  g->nodes = NULL;
  g->n = g->cap = 0;
}

static void drop(int i) {
  if (caps[i].graph) graph_free_nodes(caps[i].graph);
  free(caps[i].graph);
  caps[i] = caps[--n_caps];
}

bool rt_emu_capturing(cg_cu_stream s) { return !is_legacy(s) && find(s) >= 0; }

static void invalidate(int i, const char *call) {
  if (caps[i].invalidated) return;
  caps[i].invalidated = true;
  snprintf(caps[i].why, sizeof caps[i].why, "%s during the capture", call);
}

cg_cu_result rt_emu_capture_node(cg_cu_stream s, emu_replay_fn replay, const void *payload, size_t bytes) {
  int i = find(s);
  if (i < 0) return CG_CUDA_ERROR_ILLEGAL_STATE;
  if (caps[i].invalidated) {
    rt_emu_set_detail("the capture of this stream was invalidated (%s)", caps[i].why);
    return CG_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  struct CUgraph_st *g = caps[i].graph;
  void *copy = malloc(bytes ? bytes : 1);
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 64;
    emu_node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
    if (n) g->nodes = n, g->cap = cap;
  }
  if (!copy || g->n == g->cap) {
    free(copy);
    rt_emu_set_detail("out of host memory recording a node");
    return CG_CUDA_ERROR_OUT_OF_MEMORY;
  }
  memcpy(copy, payload, bytes);
  g->nodes[g->n++] = (emu_node){replay, copy, bytes};
  counters.nodes_recorded++;
  return CG_CUDA_SUCCESS;
}

typedef struct {
  const emu_copy_entries *e;
  emu_recorded_kind kind;
  uint64_t dst, src;
  size_t bytes;
  unsigned char value;
} recorded_copy;

static cg_cu_result replay_copy(const void *payload, cg_cu_stream s) {
  const recorded_copy *c = payload;
  switch (c->kind) {
  case EMU_REC_HTOD: return c->e->htod(c->dst, (const void *)(uintptr_t)c->src, c->bytes, s);
  case EMU_REC_DTOH: return c->e->dtoh((void *)(uintptr_t)c->dst, c->src, c->bytes, s);
  case EMU_REC_DTOD: return c->e->dtod(c->dst, c->src, c->bytes, s);
  case EMU_REC_MEMSET: return c->e->memset(c->dst, c->value, c->bytes, s);
  }
  return CG_CUDA_ERROR_INVALID_VALUE;
}

cg_cu_result rt_emu_capture_copy(cg_cu_stream s, const emu_copy_entries *e, emu_recorded_kind kind, uint64_t dst,
                                 uint64_t src, size_t bytes, unsigned char value) {
  recorded_copy c = {e, kind, dst, src, bytes, value};
  return rt_emu_capture_node(s, replay_copy, &c, sizeof c);
}

cg_cu_result rt_emu_capture_forbid(const char *call, cg_cu_stream s) {
  cg_cu_result r = CG_CUDA_SUCCESS;
  for (int i = 0; i < n_caps; i++)
    if (!s || caps[i].stream == s) {
      invalidate(i, call);
      r = CG_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  if (r != CG_CUDA_SUCCESS) rt_emu_set_detail("%s: not permitted while a stream is capturing (the capture is invalidated)", call);
  return r;
}

cg_cu_result rt_emu_capture_legacy(const char *call, cg_cu_stream s) {
  if (!is_legacy(s)) return CG_CUDA_SUCCESS;
  cg_cu_result r = CG_CUDA_SUCCESS;
  for (int i = 0; i < n_caps; i++)
    if (caps[i].blocking) {
      invalidate(i, call);
      r = CG_CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
  if (r != CG_CUDA_SUCCESS)
    rt_emu_set_detail("%s: work on the legacy stream while a blocking stream is capturing (the capture is invalidated)",
                      call);
  return r;
}

cg_cu_result rt_emu_capture_begin(cg_cu_stream s, bool blocking, cg_cu_stream_capture_mode mode) {
  if (is_legacy(s) || s == (cg_cu_stream)0x2) {
    rt_emu_set_detail("cuStreamBeginCapture: capture may not be initiated on the NULL / legacy stream");
    return CG_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (mode > CG_CU_STREAM_CAPTURE_MODE_RELAXED) {
    rt_emu_set_detail("cuStreamBeginCapture: capture mode %u", mode);
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  if (find(s) >= 0) {
    rt_emu_set_detail("cuStreamBeginCapture: the stream is already capturing");
    return CG_CUDA_ERROR_ILLEGAL_STATE;
  }
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (n_caps == MAX_CAPTURES || !g) {
    free(g);
    rt_emu_set_detail("cuStreamBeginCapture: more than %d captures at once", MAX_CAPTURES);
    return CG_CUDA_ERROR_OUT_OF_MEMORY;
  }
  caps[n_caps++] = (capture){.stream = s, .blocking = blocking, .graph = g};
  counters.captures++;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_capture_end(cg_cu_stream s, cg_cu_graph *graph) {
  int i = find(s);
  if (!graph) {
    rt_emu_set_detail("cuStreamEndCapture: phGraph is NULL");
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  *graph = NULL;
  if (is_legacy(s) || i < 0) {
    rt_emu_set_detail("cuStreamEndCapture: the stream is not capturing");
    return CG_CUDA_ERROR_ILLEGAL_STATE;
  }
  if (caps[i].invalidated) {
    rt_emu_set_detail("cuStreamEndCapture: the capture was invalidated (%s)", caps[i].why);
    drop(i);
    counters.invalidated++;
    return CG_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  struct CUgraph_st *g = caps[i].graph;
  caps[i].graph = NULL;
  drop(i);
  if (!live_add(g)) {
    graph_free_nodes(g);
    free(g);
    rt_emu_set_detail("cuStreamEndCapture: more than %d graphs", MAX_GRAPHS);
    return CG_CUDA_ERROR_OUT_OF_MEMORY;
  }
  *graph = g;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_capture_status(cg_cu_stream s, cg_cu_stream_capture_status *status) {
  if (!status) return CG_CUDA_ERROR_INVALID_VALUE;
  int i = is_legacy(s) ? -1 : find(s);
  *status = i < 0 ? CG_CU_STREAM_CAPTURE_STATUS_NONE
                  : caps[i].invalidated ? CG_CU_STREAM_CAPTURE_STATUS_INVALIDATED : CG_CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CG_CUDA_SUCCESS;
}

/* ---- graphs and executable graphs: a handle is looked up before it is used ---- */

static const void *live[MAX_GRAPHS]; /* graphs and executable graphs not destroyed */
static int n_live;

static bool live_add(const void *h) {
  if (n_live == MAX_GRAPHS) return false;
  live[n_live++] = h;
  return true;
}
static bool live_remove(const void *h) {
  for (int i = 0; i < n_live; i++)
    if (live[i] == h) {
      live[i] = live[--n_live];
      return true;
    }
  return false;
}
static bool is_live(const void *h) {
  for (int i = 0; i < n_live; i++)
    if (live[i] == h) return true;
  return false;
}

/* Destroys handle h (a graph or an executable graph: its nodes are g's). */
static cg_cu_result destroy(const void *h, struct CUgraph_st *g, const char *call, const char *what) {
  rt_emu_set_detail("%s", "");
  if (!h || !live_remove(h)) {
    rt_emu_set_detail("%s: not %s", call, what);
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  graph_free_nodes(g);
  free((void *)h);
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuGraphDestroy(cg_cu_graph g) { return destroy(g, g, "cuGraphDestroy", "a graph"); }

cg_cu_result rt_emu_graph_instantiate(cg_cu_graph_exec *exec, cg_cu_graph g, unsigned long long flags) {
  if (!exec || !g || !is_live(g)) {
    rt_emu_set_detail("cuGraphInstantiate: %s", !exec ? "phGraphExec is NULL" : "not a graph");
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  *exec = NULL;
  if (flags) {
    rt_emu_set_detail("cuGraphInstantiate: flags 0x%llx are not emulated", flags);
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  struct CUgraphExec_st *e = calloc(1, sizeof *e);
  emu_node *nodes = g->n ? calloc((size_t)g->n, sizeof *nodes) : NULL;
  bool ok = e && (nodes || !g->n);
  for (int i = 0; ok && i < g->n; i++) {
    nodes[i] = g->nodes[i];
    if (!(nodes[i].payload = malloc(g->nodes[i].bytes ? g->nodes[i].bytes : 1))) ok = false;
    else memcpy(nodes[i].payload, g->nodes[i].payload, g->nodes[i].bytes), e->g.n = i + 1;
  }
  if (e) e->g.nodes = nodes, e->g.cap = g->n;
  if (!ok || !live_add(e)) {
    if (e) graph_free_nodes(&e->g);
    else free(nodes);
    free(e);
    rt_emu_set_detail("cuGraphInstantiate: out of host memory");
    return CG_CUDA_ERROR_OUT_OF_MEMORY;
  }
  counters.instantiated++;
  *exec = e;
  return CG_CUDA_SUCCESS;
}

cg_cu_result rt_emu_cuGraphExecDestroy(cg_cu_graph_exec e) {
  return destroy(e, e ? &e->g : NULL, "cuGraphExecDestroy", "an executable graph");
}

cg_cu_result rt_emu_graph_launch(cg_cu_graph_exec e, cg_cu_stream s) {
  if (!e || !is_live(e)) {
    rt_emu_set_detail("cuGraphLaunch: not an executable graph");
    return CG_CUDA_ERROR_INVALID_VALUE;
  }
  if (rt_emu_capturing(s)) {
    rt_emu_set_detail("cuGraphLaunch: a graph launched into a capture (child graphs) is not emulated");
    return CG_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  counters.launches++;
  for (int i = 0; i < e->g.n; i++) {
    cg_cu_result r = e->g.nodes[i].replay(e->g.nodes[i].payload, s);
    if (r != CG_CUDA_SUCCESS) return r;
    counters.nodes_replayed++;
  }
  return CG_CUDA_SUCCESS;
}

void rt_emu_capture_reset(void) {
  while (n_caps) drop(n_caps - 1);
}
