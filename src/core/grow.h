// SPDX-License-Identifier: MIT
// The core's growing arrays: one doubling rule for all of them (segments, the free set's streams,
// the event queue, the page pool, the simulated device's tables).
#ifndef CCI_GROW_H
#define CCI_GROW_H

#include <stdlib.h>

/// Room for element `n` of `arr` (elements of `elem` bytes, `*cap` of them allocated): `arr`
/// itself while n < *cap, else `arr` reallocated to twice *cap (`first` elements the first time)
/// with *cap raised. NULL when the host is out of memory: `arr` and *cap then stay as they were.
static inline void *cci_grow(void *arr, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap)
        return arr;
    size_t c = *cap ? *cap * 2 : first;
    void *p = realloc(arr, c * elem);
    if (p)
        *cap = c;
    return p;
}

#endif
