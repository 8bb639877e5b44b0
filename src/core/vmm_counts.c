// SPDX-License-Identifier: MIT
// The VMM call counts (vmm_counts.h): a copy taken under the allocator's lock, and the driver
// time they stand for on an H100.
#include <string.h>

#include "expandable.h"
#include "tcache.h"

// Microseconds per call, H100 80 GB, driver 580.159.04, CUDA 13.0, 2 MiB pages, one thread, an
// idle device (../shared/reference/vmm-and-streams-facts.md, the middle of each measured range).
// cuMemUnmap over a run of pages: 21-23 us for one page, 60-67 us for 128, hence a part per
// extra page. cuMemSetAccess over 128 separately mapped pages costs 28-43 us: one call's worth.
#define US_CREATE 13.0
#define US_MAP 1.7
#define US_SET_ACCESS 30.5
#define US_UNMAP 22.0
#define US_UNMAP_EXTRA_PAGE ((63.5 - 22.0) / 127.0)
#define US_RELEASE 14.5

int cci_alloc_vmm_counts(cci_allocator *a, cci_vmm_counts *out)
{
    memset(out, 0, sizeof *out);
    cci__lock(a);
    const cci_exp *e = a->exp;
    if (e) {
        *out = e->n;
        out->mode = e->mode;
        out->pool_pages = e->pool_n;
        out->pool_bytes = (uint64_t)e->pool_n * e->granularity;
        out->retiring_bytes = e->retiring_bytes;
        if (e->mode == CCI_EXP_COMPACT) {
            out->slack = cci__exp_compact_slack(a);
            out->churn_slack = e->churn_slack;
            // Pages whose old mapping waits for its fence are kept beyond the bound (expandable.c).
            out->pool_limit = out->slack + (uint64_t)e->pool_waiting * e->granularity;
        }
    }
    cci__unlock(a);
    return e ? 0 : -1;
}

double cci_vmm_estimated_us(const cci_vmm_counts *c)
{
    uint64_t extra_pages = c->unmapped_pages > c->unmaps ? c->unmapped_pages - c->unmaps : 0;
    return US_CREATE * (double)c->page_creates + US_MAP * (double)c->maps + US_SET_ACCESS * (double)c->set_access +
           US_UNMAP * (double)c->unmaps + US_UNMAP_EXTRA_PAGE * (double)extra_pages +
           US_RELEASE * (double)c->page_releases;
}
