/* tests/tools/state_cmp.c — compares two plain tgc training states
 * (safetensors): every tensor of A is in B with the same type, and their
 * elements agree within a relative tolerance (0: bit for bit): TOL for the
 * parameters, 10 TOL for the optimizer state ("opt/..."), a running sum of
 * gradients whose near-zero entries (embedding rows of tokens a batch
 * rarely holds) carry the absolute rounding of the sums, larger relative to
 * them. Relative to max(|a|, |b|, 1e-3). Prints the worst differences; exit
 * 0 when they agree, 1 when not, 2 on a bad file.
 *   state_cmp A B [TOL]          (used by tests/scripts/shard_*.sh) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_io.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: state_cmp A B [TOL]\n");
    return 2;
  }
  double tol = argc > 3 ? atof(argv[3]) : 0;
  char err[1024];
  rt_safetensors *a = rt_safetensors_read(argv[1], err, sizeof err), *b = a ? rt_safetensors_read(argv[2], err, sizeof err) : NULL;
  if (!a || !b) {
    fprintf(stderr, "state_cmp: %s\n", err);
    return 2;
  }
  int bad = rt_safetensors_count(a) != rt_safetensors_count(b);
  double worst[2] = {0, 0};
  const char *worst_name[2] = {"", ""};
  for (int i = 0; i < rt_safetensors_count(a); i++) {
    const char *name = rt_safetensors_name(a, i);
    const rt_tensor *x = rt_safetensors_tensor(a, i), *y = rt_safetensors_find(b, name);
    if (!y || !ir_type_equal(&x->type, &y->type)) {
      fprintf(stderr, "state_cmp: tensor '%s' %s in %s\n", name, y ? "has another type" : "is missing", argv[2]);
      bad = 1;
      continue;
    }
    if (tol == 0 && memcmp(x->data, y->data, x->nbytes) != 0) {
      fprintf(stderr, "state_cmp: tensor '%s' differs (bit for bit)\n", name);
      bad = 1;
    }
    int64_t n = ir_type_numel(&x->type);
    int st = strncmp(name, "opt/", 4) == 0;
    for (int64_t k = 0; k < n; k++) {
      double u = rt_tensor_get(x, k), v = rt_tensor_get(y, k), d = fabs(u - v), s = fmax(fabs(u), fabs(v));
      double r = d == 0 ? 0 : d / (s > 1e-3 ? s : 1e-3); /* relative, absolute near 0 */
      if (r > worst[st]) worst[st] = r, worst_name[st] = name;
    }
  }
  printf("%d tensors: parameters within %.3g ('%s'; tolerance %g), optimizer state within %.3g ('%s'; tolerance %g)\n",
         rt_safetensors_count(a), worst[0], worst_name[0], tol, worst[1], worst_name[1], 10 * tol);
  if (worst[0] > tol || worst[1] > 10 * tol) bad = 1;
  rt_safetensors_free(a);
  rt_safetensors_free(b);
  return bad;
}
