// SPDX-License-Identifier: MIT
// Request and segment sizes, by PyTorch's native-allocator rules (see README "Configuration").
#include "allocator.h"

#define MIN_BLOCK ((size_t)512)
#define SMALL_LIMIT ((size_t)1 << 20)       // requests up to 1 MiB use the small pool
#define SMALL_SEGMENT ((size_t)2 << 20)
#define MIN_LARGE_ALLOC ((size_t)10 << 20)
#define LARGE_ROUND ((size_t)2 << 20)
#define FIRST_INTERVAL_END ((size_t)2 << 20)  // roundup_divisions[0] covers the sizes below 2^21

static unsigned log2_floor(size_t v) { return 63u - (unsigned)__builtin_clzll((unsigned long long)v); }
static int is_pow2(size_t v) { return v && !(v & (v - 1)); }

// The divisions of size's interval: [0, 2 MiB), then one per power of two (the last open-ended).
static unsigned divisions_for(const cci_config *c, size_t size)
{
    // Every size under 2 MiB is in the first interval: no logarithm for them (every cached small
    // allocation rounds here: it is on the cached pair's path, commit b9216df).
    if (size < FIRST_INTERVAL_END)
        return c->roundup_divisions[0];
    unsigned idx = log2_floor(size) - 20;  // 1 for [2 MiB, 4 MiB), ...
    if (idx >= CCI_ROUNDUP_INTERVALS)
        idx = CCI_ROUNDUP_INTERVALS - 1;
    return c->roundup_divisions[idx];
}

// Rounds up to the next of `divisions` equal steps of size's power-of-two interval.
static size_t next_division(size_t size, unsigned divisions)
{
    if (is_pow2(size))
        return size;
    size_t floor2 = (size_t)1 << log2_floor(size);
    size_t step = floor2 >> log2_floor(divisions);
    if (step == 0)
        return floor2 << 1;
    size_t down = size & ~(step - 1);
    return down == size ? size : down + step;
}

size_t cci_round_size(const cci_config *c, size_t size)
{
    if (size < MIN_BLOCK)
        return MIN_BLOCK;
    unsigned div = divisions_for(c, size);
    if (div > 1 && size > MIN_BLOCK * div)
        return next_division(size, div);
    if (size > SIZE_MAX - MIN_BLOCK)
        return SIZE_MAX & ~(MIN_BLOCK - 1);
    return (size + MIN_BLOCK - 1) & ~(MIN_BLOCK - 1);
}

size_t cci_segment_size(const cci_config *c, size_t rounded)
{
    if (rounded <= SMALL_LIMIT)
        return SMALL_SEGMENT;
    // large_segment_size_mb may be set below a request it covers: the segment then holds the
    // request alone, rounded as a large one would be, never less than asked for.
    if (rounded < MIN_LARGE_ALLOC && rounded <= c->large_segment_size)
        return c->large_segment_size;
    if (rounded > SIZE_MAX - LARGE_ROUND)
        return SIZE_MAX & ~(LARGE_ROUND - 1);
    return (rounded + LARGE_ROUND - 1) & ~(LARGE_ROUND - 1);
}

int cci_is_small(size_t rounded) { return rounded <= SMALL_LIMIT; }
