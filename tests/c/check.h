/* check.h — the smallest test harness that will do: each test file is one
 * program; CHECK and CHECK_EQ_U64 count, print file:line on a failure and
 * keep going; main() ends with `return check_summary("name");`, which is
 * non-zero when anything failed. */
#ifndef VP_CHECK_H
#define VP_CHECK_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

/* The only mutable global of a test program: checks run and failed. */
static struct {
    unsigned run, failed;
} check_count;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        check_count.run++;                                                           \
        if (!(cond)) {                                                               \
            check_count.failed++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                       \
    do {                                                                                         \
        uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);                             \
        check_count.run++;                                                                       \
        if (check_a_ != check_b_) {                                                              \
            check_count.failed++;                                                                \
            fprintf(stderr, "%s:%d: %s == %s failed: %" PRIu64 " != %" PRIu64 "\n", __FILE__,    \
                    __LINE__, #a, #b, check_a_, check_b_);                                       \
        }                                                                                        \
    } while (0)

static inline int check_summary(const char *name) {
    printf("%s: %u checks, %u failed\n", name, check_count.run, check_count.failed);
    return check_count.failed != 0;
}

#endif
