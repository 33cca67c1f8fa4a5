/* ir/clock.c — the one clock (ir_clock.h). */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "ir_clock.h"

static double seconds(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double ir_clock_s(void) { return seconds(CLOCK_MONOTONIC); }
double ir_cpu_clock_s(void) { return seconds(CLOCK_PROCESS_CPUTIME_ID); }
