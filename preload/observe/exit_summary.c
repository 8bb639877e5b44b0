// SPDX-License-Identifier: MIT
// One summary line per device when the process ends (called by the exit sequence, lifecycle.c).
//
// CUDA is already torn down when library destructors run (driver calls return "deinitialized"),
// so this reads host-side statistics only and never frees a segment: the driver reclaims device
// memory with the process. `_exit` skips it, which is fine for a summary.
#include "allocator.h"
#include "fence.h"
#include "log.h"
#include "report.h"
#include "reporting.h"
#include "state.h"
#include "stats_list.h"
#include "vmm.h"

static void summary_line(int d, const cci_stats *s, void *arg)
{
    (void)arg;
    const int A = CCI_POOL_ALL;
    char peak_res[32], peak_alloc[32], live[32];
    cci_log(CCI_LOG_INFO, "device %d: peak reserved %s, peak allocated %s, %lld allocations "
            "served by %llu device allocations; at exit %lld blocks (%s) still allocated",
            d, cci_report_bytes(s->reserved_bytes[A].peak, peak_res, sizeof peak_res),
            cci_report_bytes(s->allocated_bytes[A].peak, peak_alloc, sizeof peak_alloc),
            (long long)s->allocation[A].allocated, (unsigned long long)s->num_device_alloc,
            (long long)s->allocation[A].current,
            cci_report_bytes(s->allocated_bytes[A].current, live, sizeof live));
}

void cci_pl_exit_summary(void)
{
    cci_state_each_stats(summary_line, NULL);
}

static void add_costs(int device, const cci_stats *s, void *arg)
{
    (void)device;
    cci_stats *all = arg;
#define ADD(field, scope)                                                                          \
    all->field = (scope) == CCI_COST_DEVICE ? all->field + s->field                                \
                 : s->field > all->field    ? s->field                                             \
                                            : all->field;
    CCI_STAT_COSTS(ADD)
#undef ADD
}

void cci_pl_exit_costs(void)
{
    if (cci_log_get_level() < CCI_LOG_INFO)
        return;
    // The lines are printed from the statistics: a figure of the device's own summed over the
    // devices, one counted for the whole process taken once (every device reports it; the largest
    // copy is the latest).
    cci_stats all = {.size = sizeof all, .version = CCI_STATS_VERSION};
    cci_state_each_stats(add_costs, &all);
    cci_cuda_fence_log_costs(&all);
    cci_cuda_vmm_log_costs(&all);
}
