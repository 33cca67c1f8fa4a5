/* ir/ir_die.h — internal errors that say why (STYLE.md 7): IR_DIE prints
 * one line, "tgc: internal error at FILE:LINE: MESSAGE", on stderr and
 * aborts (a core dump, or the sanitizer's stack, where those are on).
 * Every layer may include it. A user's mistake is never an internal error:
 * those are diagnostics (ir_error) and exit status 1. */
#ifndef TGC_IR_DIE_H
#define TGC_IR_DIE_H

_Noreturn void ir_die_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define IR_DIE(...) ir_die_at(__FILE__, __LINE__, __VA_ARGS__)

#endif
