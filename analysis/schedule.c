/* analysis/schedule.c — the pipeline schedules by name (analysis.h says
 * what each runs; plan/plan_sim.c simulates them, runtime/train.c runs them). */
#include <string.h>

#include "analysis.h"

static const char *const sched_names[PASS_SCHED_COUNT] = {"gpipe", "1f1b", "interleaved"};

const char *pass_schedule_name(pass_schedule s) { return (unsigned)s < PASS_SCHED_COUNT ? sched_names[s] : "?"; }

int pass_schedule_from_name(const char *name) {
  for (int i = 0; name && i < PASS_SCHED_COUNT; i++)
    if (strcmp(name, sched_names[i]) == 0) return i;
  return -1;
}
