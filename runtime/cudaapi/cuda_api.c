/* runtime/cudaapi/cuda_api.c — the checks every CUDA call goes through, and the
 * names and strings of status codes from tgc's own tables.
 *
 * A check turns a failed status into one line: the call, the status name
 * and its string (from the library when the table has it loaded, from
 * cuda_results.def / cuda_consts.def otherwise), the caller's context and
 * the emulator's detail. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_api.h"

typedef struct {
  const char *name;
  unsigned value;
  const char *string;
} named_code;

static const named_code cu_results[] = {
#define CG_CU_RESULT(name, value, string) {#name, value, string},
#include "cuda_results.def"
#undef CG_CU_RESULT
};

static const named_code consts[] = {
#define CG_CUDA_CONST(name, value) {#name, value, NULL},
#include "cuda_consts.def"
#undef CG_CUDA_CONST
};

/* cuBLAS's own wording of its statuses (cublasGetStatusString). */
static const named_code cublas_strings[] = {
    {"CUBLAS_STATUS_SUCCESS", 0, "success"},
    {"CUBLAS_STATUS_NOT_INITIALIZED", 1, "the library was not initialized"},
    {"CUBLAS_STATUS_ALLOC_FAILED", 3, "the resource allocation failed"},
    {"CUBLAS_STATUS_INVALID_VALUE", 7, "an invalid numeric value was used as an argument"},
    {"CUBLAS_STATUS_ARCH_MISMATCH", 8, "an absent device architectural feature is required"},
    {"CUBLAS_STATUS_MAPPING_ERROR", 11, "an access to GPU memory space failed"},
    {"CUBLAS_STATUS_EXECUTION_FAILED", 13, "the GPU program failed to execute"},
    {"CUBLAS_STATUS_INTERNAL_ERROR", 14, "an internal operation failed"},
    {"CUBLAS_STATUS_NOT_SUPPORTED", 15, "the functionality requested is not supported"},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The row of table with this value, or NULL. */
static const named_code *find(const named_code *table, size_t n, unsigned value) {
  for (size_t i = 0; i < n; i++)
    if (table[i].value == value) return &table[i];
  return NULL;
}

const char *cg_cu_result_name(cg_cu_result r) {
  const named_code *c = find(cu_results, COUNT(cu_results), r);
  return c ? c->name : NULL;
}

const char *cg_cu_result_string(cg_cu_result r) {
  const named_code *c = find(cu_results, COUNT(cu_results), r);
  return c ? c->string : NULL;
}

/* The constant named PREFIX... with this value. */
static const char *const_name(const char *prefix, unsigned value) {
  size_t n = strlen(prefix);
  for (size_t i = 0; i < COUNT(consts); i++)
    if (consts[i].value == value && strncmp(consts[i].name, prefix, n) == 0) return consts[i].name;
  return NULL;
}

const char *cg_nvrtc_result_name(cg_nvrtc_result r) { return const_name("NVRTC_", r); }

/* What each NVRTC status means (nvrtcGetErrorString gives only the name). */
static const named_code nvrtc_strings[] = {
    {"NVRTC_SUCCESS", 0, "success"},
    {"NVRTC_ERROR_OUT_OF_MEMORY", 1, "out of memory"},
    {"NVRTC_ERROR_PROGRAM_CREATION_FAILURE", 2, "the program could not be created"},
    {"NVRTC_ERROR_INVALID_INPUT", 3, "invalid input"},
    {"NVRTC_ERROR_INVALID_PROGRAM", 4, "invalid program handle"},
    {"NVRTC_ERROR_INVALID_OPTION", 5, "invalid compile option"},
    {"NVRTC_ERROR_COMPILATION", 6, "compilation failed"},
    {"NVRTC_ERROR_BUILTIN_OPERATION_FAILURE", 7, "a builtin operation failed"},
    {"NVRTC_ERROR_INTERNAL_ERROR", 11, "internal error"},
};

static const char *nvrtc_string(cg_nvrtc_result r) {
  const named_code *c = find(nvrtc_strings, COUNT(nvrtc_strings), r);
  return c ? c->string : NULL;
}

const char *cg_cublas_status_name(cg_cublas_status s) { return const_name("CUBLAS_STATUS_", s); }

const char *cg_cublas_status_string(cg_cublas_status s) {
  const named_code *c = find(cublas_strings, COUNT(cublas_strings), s);
  return c ? c->string : NULL;
}

void cg_errf(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

void cg_cuda_version_text(int version, char *buf, size_t len) {
  snprintf(buf, len, "CUDA %d.%d", version / 1000, version % 1000 / 10);
}

/* "CALL: NAME (STRING) [CONTEXT]: DETAIL" */
static int fail(const cg_cuda_api *api, const char *call, const char *name, unsigned code, const char *string,
                const char *context, char *err, size_t errlen) {
  char codebuf[32];
  if (!name) {
    snprintf(codebuf, sizeof codebuf, "error %u", code);
    name = codebuf;
  }
  const char *detail = api && api->emu_detail ? api->emu_detail() : NULL;
  snprintf(err, errlen, "%s: %s (%s)%s%s%s%s%s", call, name, string ? string : "no description",
           context && *context ? " [" : "", context && *context ? context : "", context && *context ? "]" : "",
           detail && *detail ? ": " : "", detail && *detail ? detail : "");
  return -1;
}

int cg_cu_check(const cg_cuda_api *api, cg_cu_result r, const char *call, const char *context, char *err,
                size_t errlen) {
  if (r == CG_CUDA_SUCCESS) return 0;
  const char *name = NULL, *string = NULL;
  /* The driver knows codes newer than this table; ask it first. */
  if (api && api->cuGetErrorName && api->cuGetErrorName(r, &name) != CG_CUDA_SUCCESS) name = NULL;
  if (api && api->cuGetErrorString && api->cuGetErrorString(r, &string) != CG_CUDA_SUCCESS) string = NULL;
  if (!name) name = cg_cu_result_name(r);
  if (!string) string = cg_cu_result_string(r);
  return fail(api, call, name, r, string, context, err, errlen);
}

int cg_nvrtc_check(const cg_cuda_api *api, cg_nvrtc_result r, const char *call, const char *context, char *err,
                   size_t errlen) {
  if (r == CG_NVRTC_SUCCESS) return 0;
  /* nvrtcGetErrorString answers with the enum's name */
  const char *name = api && api->nvrtcGetErrorString ? api->nvrtcGetErrorString(r) : NULL;
  if (!name) name = cg_nvrtc_result_name(r);
  return fail(api, call, name, r, nvrtc_string(r), context, err, errlen);
}

int cg_cublas_check(const cg_cuda_api *api, cg_cublas_status r, const char *call, const char *context, char *err,
                    size_t errlen) {
  if (r == CG_CUBLAS_STATUS_SUCCESS) return 0;
  const char *name = api && api->cublasLtGetStatusName ? api->cublasLtGetStatusName(r) : NULL;
  const char *string = api && api->cublasLtGetStatusString ? api->cublasLtGetStatusString(r) : NULL;
  if (!name) name = cg_cublas_status_name(r);
  if (!string) string = cg_cublas_status_string(r);
  return fail(api, call, name, r, string, context, err, errlen);
}
