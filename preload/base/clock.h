// SPDX-License-Identifier: MIT
// The preload's one clock for what it measures about itself (fence and VMM call costs, call-site
// ages): monotonic nanoseconds.
#ifndef CCI_PL_CLOCK_H
#define CCI_PL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t cci_pl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
