// SPDX-License-Identifier: MIT
// Stands for a libccinterpose older than the module: the opt-in API of include/ccinterpose.h
// with a version-1 cci_stats (up to device_capacity), so the test can see that the module leaves
// out the fields such a library never filled instead of reporting them as 0.
#define CCI_BUILDING_PRELOAD 1  // plain declarations, as the library itself gets them
#include "ccinterpose.h"

#include <stddef.h>
#include <string.h>

#define OLDER_SIZE offsetof(cci_stats, num_fence_records)

__attribute__((visibility("default"))) int cci_is_active(void)
{
    return 1;
}

__attribute__((visibility("default"))) int cci_get_stats(int device, cci_stats *out)
{
    if (device != 0 || !out || out->size < OLDER_SIZE)
        return -1;
    memset(out, 0, OLDER_SIZE);
    out->size = OLDER_SIZE;
    out->version = 1;
    out->allocated_bytes[CCI_POOL_ALL].current = 12345;
    out->device_capacity = 1 << 20;
    return 0;
}

__attribute__((visibility("default"))) int cci_empty_cache(int device)
{
    return device == 0 ? 0 : -1;
}

__attribute__((visibility("default"))) const char *cci_config_string(void)
{
    return "";
}

__attribute__((visibility("default"))) int cci_dump_report(const char *path)
{
    (void)path;
    return -1;
}
