/* tests/unit/test_cuda_capture.h — the rules of stream capture, checked
 * through a CUDA entry-point table: cuda-emu's (test_cuda_graph.c) and the
 * stub of libcuda's (tests/cuda_stub/test_cuda_stub.c), which must both
 * refuse what a GPU refuses, with its error codes:
 *   - capture on the legacy stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
 *   - a capture records and runs nothing; a graph launch replays exactly
 *     what was recorded (a memset and a device copy), every launch again;
 *   - planted violations during a capture: cuStreamSynchronize of the
 *     capturing stream, cuCtxSynchronize and cuMemAlloc (UNSUPPORTED), a
 *     synchronous copy on the legacy stream (STREAM_CAPTURE_IMPLICIT); each
 *     invalidates the capture (cuStreamIsCapturing says so) and
 *     cuStreamEndCapture returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and
 *     no graph; what was recorded before the violation never runs.
 * The device's context must be current. */
#ifndef TGC_TEST_CUDA_CAPTURE_H
#define TGC_TEST_CUDA_CAPTURE_H

#include <string.h>

#include "check.h"
#include "codegen.h"

/* Whether the 256 bytes at p read lo for [0, split) and hi after. */
static inline bool capture_bytes_are(const cg_cuda_api *api, cg_cu_deviceptr p, int split, unsigned char lo,
                                     unsigned char hi) {
  unsigned char h[256];
  if (api->cuMemcpyDtoH(h, p, sizeof h) != CG_CUDA_SUCCESS) return false;
  for (int i = 0; i < 256; i++)
    if (h[i] != (i < split ? lo : hi)) return false;
  return true;
}

/* Begins a capture on s, makes one recorded call, then the violation
 * (which must return want); the capture is then invalidated. */
#define CAPTURE_VIOLATION(api, s, a, want, violation)                                                        \
  do {                                                                                                      \
    cg_cu_graph bad_graph = (cg_cu_graph)0x1;                                                               \
    cg_cu_stream_capture_status st = 0;                                                                     \
    CHECK_EQ_INT((api)->cuStreamBeginCapture(s, CG_CU_STREAM_CAPTURE_MODE_GLOBAL), CG_CUDA_SUCCESS);        \
    CHECK_EQ_INT((api)->cuMemsetD8Async(a, 9, 256, s), CG_CUDA_SUCCESS);                                    \
    CHECK_EQ_INT((int)(violation), want);                                                                   \
    CHECK_EQ_INT((api)->cuStreamIsCapturing(s, &st), CG_CUDA_SUCCESS);                                      \
    CHECK_EQ_INT(st, CG_CU_STREAM_CAPTURE_STATUS_INVALIDATED);                                              \
    CHECK_EQ_INT((api)->cuStreamEndCapture(s, &bad_graph), CG_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);       \
    CHECK(bad_graph == NULL);                                                                               \
  } while (0)

static inline void check_capture_rules(const cg_cuda_api *api, const char *who) {
  cg_cu_stream s = NULL;
  cg_cu_deviceptr a = 0, b = 0, spare = 0;
  unsigned char host[256];
  memset(host, 5, sizeof host);
  CHECK_EQ_INT(api->cuStreamCreate(&s, CG_CU_STREAM_DEFAULT), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuMemAlloc(&a, 256), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuMemAlloc(&b, 256), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuStreamBeginCapture(NULL, CG_CU_STREAM_CAPTURE_MODE_GLOBAL), CG_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);

  /* recorded, not run; replayed at each launch */
  CHECK_EQ_INT(api->cuMemsetD8(a, 1, 256), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuMemsetD8(b, 2, 256), CG_CUDA_SUCCESS);
  cg_cu_stream_capture_status st = 7;
  CHECK_EQ_INT(api->cuStreamIsCapturing(s, &st), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(st, CG_CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK_EQ_INT(api->cuStreamBeginCapture(s, CG_CU_STREAM_CAPTURE_MODE_GLOBAL), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuStreamIsCapturing(s, &st), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(st, CG_CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK_EQ_INT(api->cuMemsetD8Async(a, 7, 256, s), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuMemcpyDtoDAsync(b, a, 128, s), CG_CUDA_SUCCESS);
  cg_cu_graph g = NULL;
  cg_cu_graph_exec e = NULL;
  CHECK_EQ_INT(api->cuStreamEndCapture(s, &g), CG_CUDA_SUCCESS);
  CHECK(g != NULL);
  CHECK(capture_bytes_are(api, a, 256, 1, 1) && capture_bytes_are(api, b, 256, 2, 2)); /* nothing ran */
  CHECK_EQ_INT(api->cuGraphInstantiate(&e, g, 0), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuGraphLaunch(e, s), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuStreamSynchronize(s), CG_CUDA_SUCCESS);
  CHECK(capture_bytes_are(api, a, 256, 7, 7) && capture_bytes_are(api, b, 128, 7, 2));
  CHECK_EQ_INT(api->cuMemsetD8(a, 3, 256), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuMemsetD8(b, 4, 256), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuGraphLaunch(e, s), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuStreamSynchronize(s), CG_CUDA_SUCCESS);
  CHECK(capture_bytes_are(api, a, 256, 7, 7) && capture_bytes_are(api, b, 128, 7, 4));

  /* planted violations: each invalidates its capture, whose memset never runs */
  CAPTURE_VIOLATION(api, s, a, CG_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, api->cuStreamSynchronize(s));
  CAPTURE_VIOLATION(api, s, a, CG_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, api->cuCtxSynchronize());
  CAPTURE_VIOLATION(api, s, a, CG_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, api->cuMemAlloc(&spare, 256));
  CAPTURE_VIOLATION(api, s, a, CG_CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, api->cuMemcpyHtoD(b, host, sizeof host));
  CHECK(spare == 0);
  CHECK(capture_bytes_are(api, a, 256, 7, 7) && capture_bytes_are(api, b, 128, 7, 4));
  printf("capture rules on %s: legacy-stream capture refused, a graph launch replays its memset and copy, 4 planted "
         "violations (stream and context sync, cuMemAlloc, a legacy-stream copy) refused and invalidating\n", who);

  CHECK_EQ_INT(api->cuGraphExecDestroy(e), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuGraphDestroy(g), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuGraphDestroy(g), CG_CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(api->cuStreamDestroy(s), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuMemFree(a), CG_CUDA_SUCCESS);
  CHECK_EQ_INT(api->cuMemFree(b), CG_CUDA_SUCCESS);
}

#endif
