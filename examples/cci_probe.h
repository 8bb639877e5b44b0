// SPDX-License-Identifier: MIT
// Optional: asks libccinterpose, when it is preloaded, how many of this program's allocations it
// served. Looked up at run time so the programs run unchanged without it; a static-cudart build
// shows "loaded, served 0" because its calls never reach the preload's symbols.
#ifndef CCI_PROBE_H
#define CCI_PROBE_H

#include <dlfcn.h>
#include <stdio.h>

#include "ccinterpose.h"

static inline void cci_probe_print(int device)
{
    int (*get_stats)(int, cci_stats *);
    // POSIX's sanctioned way to turn dlsym's object pointer into a function pointer.
    *(void **)(&get_stats) = dlsym(RTLD_DEFAULT, "cci_get_stats");
    if (!get_stats) {
        printf("ccinterpose: not loaded\n");
        return;
    }
    cci_stats s = {.size = sizeof s, .version = CCI_STATS_VERSION};
    if (get_stats(device, &s) != 0) {
        printf("ccinterpose: loaded, inactive (disabled, or no device)\n");
        return;
    }
    printf("ccinterpose: loaded, served %lld allocations, %llu device allocations, "
           "peak reserved %.1f MiB\n",
           (long long)s.allocation[CCI_POOL_ALL].allocated, (unsigned long long)s.num_device_alloc,
           (double)s.reserved_bytes[CCI_POOL_ALL].peak / 1048576.0);
}

#endif
