// SPDX-License-Identifier: MIT
// The opt-in API of include/ccinterpose.h, as the preload answers it.
#include "ccinterpose.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "allocator.h"
#include "export.h"
#include "host_cache.h"
#include "program_vmm.h"
#include "real.h"
#include "reporting.h"
#include "state.h"
#include "outside.h"

// A device the program could use, whether or not it has allocated there yet.
static int device_exists(int device)
{
    int n = 0;
    return device >= 0 && device < CCI_PL_MAX_DEVICES &&
           cci_real_rt()->cudaGetDeviceCount(&n) == cudaSuccess && device < n;
}

CCI_EXPORT int cci_is_active(void)
{
    return cci_state_active();
}

CCI_EXPORT int cci_get_stats(int device, cci_stats *out)
{
    if (!out || out->size < 2 * sizeof(uint32_t) || !cci_state_active())
        return -1;
    cci_allocator *a = cci_state_allocator_peek(device);
    if (!a && !device_exists(device))
        return -1;
    cci_stats s = {.size = sizeof s, .version = CCI_STATS_VERSION};
    cci_outside_refresh(device);
    if (a)
        cci_alloc_stats(a, &s);
    else  // no pools yet, but CUDA may have handed out managed memory on the device
        cci_outside_stats(NULL, device, &s);
    cci_host_cache_stats(&s);  // process-wide, on every device
    cci_pvmm_stats(device, &s);
    // A caller built against an older (smaller) or newer (larger) struct gets what both know.
    size_t n = out->size < sizeof s ? out->size : sizeof s;
    memset(out, 0, out->size);
    memcpy(out, &s, n);
    out->size = (uint32_t)n;
    out->version = CCI_STATS_VERSION;
    return 0;
}

CCI_EXPORT int cci_empty_cache(int device)
{
    if (!cci_state_active())
        return -1;
    cci_allocator *a = cci_state_allocator_peek(device);
    if (a)
        cci_alloc_empty_cache(a);
    cci_host_cache_empty();  // pinned host memory belongs to no device: any device's call empties it
    cci_pvmm_empty(device);
    return a || device_exists(device) ? 0 : -1;
}

CCI_EXPORT const char *cci_config_string(void)
{
    return cci_state_config_string();
}

CCI_EXPORT int cci_dump_report(const char *path)
{
    if (!cci_state_active())
        return -1;
    return cci_pl_report_dump(path ? path : "-");  // "-": stderr, as the header promises for NULL
}
