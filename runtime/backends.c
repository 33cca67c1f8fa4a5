/* runtime/backends.c — the backends a `--backend NAME` can name. A new
 * backend is one row here (and its rt_backend struct). */
#include <string.h>

#include "runtime.h"

static const rt_backend *const backends[] = {
    &rt_cpu_backend,
    &rt_cuda_backend,
    &rt_cuda_emu_backend,
};
enum { N_BACKENDS = sizeof backends / sizeof backends[0] };

const rt_backend *rt_backend_lookup(const char *name) {
  for (int i = 0; name && i < N_BACKENDS; i++)
    if (strcmp(backends[i]->name, name) == 0) return backends[i];
  return NULL;
}

int rt_backend_count(void) { return N_BACKENDS; }
const rt_backend *rt_backend_at(int i) { return i >= 0 && i < N_BACKENDS ? backends[i] : NULL; }
