/* analysis/program.c — the training program's vocabulary by name: the
 * pipeline schedules (analysis.h says what each runs; plan/plan_sim.c
 * simulates them, runtime/train.c runs them) and the optimizers
 * (passes/optimizer.c builds their updates; state files record them). */
#include <string.h>

#include "analysis.h"

static const char *const sched_names[PASS_SCHED_COUNT] = {"gpipe", "1f1b", "interleaved"};

const char *pass_schedule_name(pass_schedule s) { return (unsigned)s < PASS_SCHED_COUNT ? sched_names[s] : "?"; }

int pass_schedule_from_name(const char *name) {
  for (int i = 0; name && i < PASS_SCHED_COUNT; i++)
    if (strcmp(name, sched_names[i]) == 0) return i;
  return -1;
}

static const char *const optimizer_names[PASS_OPT_COUNT] = {"sgd", "momentum", "adam", "adamw"};

const char *pass_optimizer_name(pass_optimizer_kind kind) {
  return (unsigned)kind < PASS_OPT_COUNT ? optimizer_names[kind] : "?";
}

int pass_optimizer_from_name(const char *name) {
  for (int i = 0; i < PASS_OPT_COUNT; i++)
    if (name && strcmp(name, optimizer_names[i]) == 0) return i;
  return -1;
}
