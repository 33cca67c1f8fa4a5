/* tests/tools/npy_cmp.c — compares two folders of .npy files (what
 * `tgc run --out-dir` writes): every A/NAME.npy has a B/NAME.npy of the same
 * dtype and shape whose elements agree within a relative tolerance (0: bit
 * for bit), relative to max(|a|, |b|, 1e-3) as tests/tools/state_cmp.c
 * (an element near 0, a logit of a small model, carries the absolute
 * rounding of a sum of larger terms added in another order). Prints each file's worst difference and, on failure,
 * its first mismatches; exit 0 when they agree, 1 when not, 2 on a bad
 * file or folder.
 *   npy_cmp A_DIR B_DIR [TOL]        (used by tests/scripts/run_equal.sh) */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_io.h"

static int compare(const char *a_dir, const char *b_dir, const char *name, double tol) {
  char pa[4096], pb[4096], err[1024];
  snprintf(pa, sizeof pa, "%s/%s", a_dir, name);
  snprintf(pb, sizeof pb, "%s/%s", b_dir, name);
  rt_tensor *x = rt_npy_read(pa, err, sizeof err), *y = x ? rt_npy_read(pb, err, sizeof err) : NULL;
  if (!x || !y) {
    fprintf(stderr, "npy_cmp: %s\n", err);
    rt_tensor_free(x);
    return 2;
  }
  int bad = 0;
  if (!ir_type_equal(&x->type, &y->type)) {
    fprintf(stderr, "npy_cmp: %s: the types differ\n", name);
    bad = 1;
  } else {
    int64_t n = ir_type_numel(&x->type), shown = 0, at = -1;
    double worst = 0;
    for (int64_t k = 0; k < n; k++) {
      double u = rt_tensor_get(x, k), v = rt_tensor_get(y, k), s = fmax(fmax(fabs(u), fabs(v)), 1e-3);
      double r = u == v ? 0 : (isnan(u) || isnan(v)) ? INFINITY : fabs(u - v) / s;
      if (r > worst) worst = r, at = k;
      if (r > tol && shown++ < 5) printf("  %s[%lld]: %.17g against %.17g (relative %.3g)\n", name, (long long)k, u, v, r);
    }
    printf("%s: %lld elements within %.3g relative (tolerance %g%s)\n", name, (long long)n, worst, tol,
           at >= 0 ? "" : "; bit for bit");
    bad = worst > tol;
  }
  rt_tensor_free(x);
  rt_tensor_free(y);
  return bad;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: npy_cmp A_DIR B_DIR [TOL]\n");
    return 2;
  }
  double tol = argc > 3 ? atof(argv[3]) : 0;
  DIR *dir = opendir(argv[1]);
  if (!dir) {
    fprintf(stderr, "npy_cmp: %s: cannot open the folder\n", argv[1]);
    return 2;
  }
  int rc = 0, files = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".npy") != 0) continue;
    int r = compare(argv[1], argv[2], e->d_name, tol);
    rc = r > rc ? r : rc;
    files++;
  }
  closedir(dir);
  if (files == 0) {
    fprintf(stderr, "npy_cmp: %s holds no .npy file\n", argv[1]);
    return 2;
  }
  return rc;
}
