/* tests/unit/check.h — the tiny assertion kit every unit test uses.
 * CHECK(cond) records a failure with file:line and goes on; CHECK_NEAR states
 * its tolerance; check_done() prints "N passed, M failed" and returns the
 * exit status for main. */
#ifndef TGC_CHECK_H
#define TGC_CHECK_H
#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_pass_count, check_fail_count;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (cond) check_pass_count++;                                                \
    else { check_fail_count++; fprintf(stderr, "%s:%d: CHECK failed: %s\n",      \
                                       __FILE__, __LINE__, #cond); }             \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                       \
  do {                                                                           \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);              \
    if (check_a_ == check_b_) check_pass_count++;                                \
    else { check_fail_count++; fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", \
                                       __FILE__, __LINE__, #a, #b, check_a_, check_b_); } \
  } while (0)

#define CHECK_STR(a, b)                                                          \
  do {                                                                           \
    const char *check_a_ = (a), *check_b_ = (b);                                 \
    if (check_a_ && check_b_ && strcmp(check_a_, check_b_) == 0) check_pass_count++; \
    else { check_fail_count++; fprintf(stderr, "%s:%d: %s == %s failed:\n  got:  %s\n  want: %s\n", \
                                       __FILE__, __LINE__, #a, #b, check_a_ ? check_a_ : "(null)", \
                                       check_b_ ? check_b_ : "(null)"); }        \
  } while (0)

/* |a - b| <= tol * max(1, |b|) */
#define CHECK_NEAR(a, b, tol)                                                    \
  do {                                                                           \
    double check_a_ = (a), check_b_ = (b);                                       \
    double check_s_ = fabs(check_b_) > 1 ? fabs(check_b_) : 1;                   \
    if (fabs(check_a_ - check_b_) <= (tol) * check_s_) check_pass_count++;       \
    else { check_fail_count++; fprintf(stderr, "%s:%d: %s ~= %s failed: %.17g vs %.17g (tol %g)\n", \
                                       __FILE__, __LINE__, #a, #b, check_a_, check_b_, (double)(tol)); } \
  } while (0)

static inline int check_done(void) {
  printf("%d passed, %d failed\n", check_pass_count, check_fail_count);
  return check_fail_count ? 1 : 0;
}
#endif
