// SPDX-License-Identifier: MIT
// Tiny assertion helpers shared by the core tests: count checks, report the first failures with
// their location, and end with the "N passed, N failed" line the CI reads.
#ifndef CCI_TESTUTIL_H
#define CCI_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned t_passed, t_failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            t_passed++;                                                                            \
        } else {                                                                                   \
            t_failed++;                                                                            \
            if (t_failed <= 20) {                                                                  \
                fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);           \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fputc('\n', stderr);                                                               \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_U(a, b, what)                                                                     \
    CHECK((unsigned long long)(a) == (unsigned long long)(b), "%s: got %llu, expected %llu", what, \
          (unsigned long long)(a), (unsigned long long)(b))

// A deterministic xorshift generator for the randomized tests: seed rng_state, then call rnd().
static uint64_t rng_state;
static inline uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static inline int t_finish(void)
{
    printf("%u passed, %u failed\n", t_passed, t_failed);
    return t_failed ? 1 : 0;
}

static inline long t_scale(void)
{
    const char *s = getenv("CCI_TEST_SCALE");
    long v = s ? strtol(s, NULL, 10) : 1;
    return v > 0 ? v : 1;
}

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

#endif
