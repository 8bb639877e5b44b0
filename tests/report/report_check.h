// SPDX-License-Identifier: MIT
// The report tests' check: a failed condition prints its place and message and is counted;
// main ends with `return failures ? 1 : 0`.
#ifndef CCI_REPORT_CHECK_H
#define CCI_REPORT_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                  \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                  \
            failures++;                                                                           \
        }                                                                                         \
    } while (0)

#endif
