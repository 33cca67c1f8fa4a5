/* tools/profile.c — prints an rt_profile (runtime/cpu/cpu.c fills it when a
 * command is given --profile): where the kernel time of the graph runs went,
 * by op, largest first. The rows add up to the total: kernels (and
 * collectives), the program's fill actions (zero-filling results, with
 * their count and bytes), and the executor's own bookkeeping (the rest). */
#include <stdio.h>
#include <stdlib.h>

#include "tool.h"

static const rt_profile *sort_prof;
static int by_time_desc(const void *a, const void *b) {
  double x = sort_prof->seconds[*(const int *)a], y = sort_prof->seconds[*(const int *)b];
  return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}

void tool_print_profile(FILE *f, const rt_profile *p, const char *title, int64_t runs) {
  int ops[IR_NUM_OPS], n = 0;
  double kernels = 0;
  for (int op = 0; op < IR_NUM_OPS; op++)
    if (p->calls[op]) {
      ops[n++] = op;
      kernels += p->seconds[op];
    }
  sort_prof = p;
  qsort(ops, (size_t)n, sizeof *ops, by_time_desc);
  double total = p->total_seconds > 0 ? p->total_seconds : 1e-300;
  double per = runs > 0 ? 1e3 / (double)runs : 0;
  fprintf(f, "profile: %s, %lld run%s, %.3f s (%.1f ms per run)\n", title, (long long)runs, runs == 1 ? "" : "s",
          p->total_seconds, p->total_seconds * per);
  fprintf(f, "  %-22s %8s %12s %12s %6s\n", "op", "calls", "seconds", "ms/run", "%");
  for (int i = 0; i < n; i++) {
    int op = ops[i];
    fprintf(f, "  %-22s %8lld %12.4f %12.2f %6.1f\n", ir_op_name((ir_op)op), (long long)p->calls[op], p->seconds[op],
            p->seconds[op] * per, 100 * p->seconds[op] / total);
  }
  double rest = p->total_seconds - kernels - p->fill_seconds;
  fprintf(f, "  %-22s %8lld %12.4f %12.2f %6.1f  %.0f bytes per run\n", "(zero-filling results)", (long long)p->fills,
          p->fill_seconds, p->fill_seconds * per, 100 * p->fill_seconds / total,
          runs > 0 ? p->fill_bytes / (double)runs : 0.0);
  fprintf(f, "  %-22s %8s %12.4f %12.2f %6.1f\n", "(executor)", "", rest, rest * per, 100 * rest / total);
}
