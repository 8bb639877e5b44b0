// SPDX-License-Identifier: MIT
// The fake CUDA's own tests: count failed checks, print each with its location, go on.
#ifndef FAKE_CHECK_H
#define FAKE_CHECK_H

#include <stdio.h>

static int g_failures;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
            g_failures++;                                                                \
        }                                                                                \
    } while (0)

#define CHECK_EQ(a, b)                                                                   \
    do {                                                                                 \
        long long a_ = (long long)(a), b_ = (long long)(b);                              \
        if (a_ != b_) {                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", __FILE__,  \
                    __LINE__, #a, #b, a_, b_);                                           \
            g_failures++;                                                                \
        }                                                                                \
    } while (0)

#endif
