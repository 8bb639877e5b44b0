// SPDX-License-Identifier: MIT
// The live map's rare parts (live_map.h): growing the table, and dropping it.
#include "live_map.h"

#include <stdlib.h>

int cci__live_grow(cci_live_map *m)
{
    size_t cap = 64;
    while ((m->count + 1) * 4 > cap)
        cap *= 2;
    cci_block **t = calloc(cap, sizeof *t);
    if (!t)
        return -1;
    for (size_t i = 0; i < m->cap; i++) {
        cci_block *b = m->slot[i];
        if (!b)
            continue;
        size_t j = cci_live_home(b->addr, cap);
        while (t[j])
            j = (j + 1) & (cap - 1);
        t[j] = b;
    }
    free(m->slot);
    m->slot = t;
    m->cap = cap;
    return 0;
}

void cci_live_clear(cci_live_map *m)
{
    free(m->slot);
    *m = (cci_live_map){0};
}
