/* ir/ir_clock.h — the project's one clock (every layer may include ir/):
 * wall time on the monotonic clock and the process's CPU time, in seconds
 * from an arbitrary origin (differences only). */
#ifndef TGC_IR_CLOCK_H
#define TGC_IR_CLOCK_H

double ir_clock_s(void);     /* CLOCK_MONOTONIC */
double ir_cpu_clock_s(void); /* CLOCK_PROCESS_CPUTIME_ID: every thread of the process */

#endif
