// SPDX-License-Identifier: MIT
// The one snapshot every report is printed from: per device the statistics, the layout now and
// at peak reserved, the timeline, the configuration; then the figures and advice derived from them.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "report_impl.h"

void cci__frag_compute(const cci_layout *l, cci_report_frag *f)
{
    memset(f, 0, sizeof *f);
    if (!l)
        return;
    f->valid = 1;
    for (size_t i = 0; i < l->nsegments; i++) {
        const cci_segment_desc *sd = &l->segments[i];
        // An expandable segment's size is its address range; its unmapped runs (state 3) hold no
        // memory, so reserved counts the rest, as the statistics do.
        uint64_t unmapped = 0, holes = 0, mapped_blocks = 0;
        for (size_t j = 0; j < sd->nblocks; j++)
            if (sd->blocks[j].state == CCI_REPORT_BLOCK_UNMAPPED) {
                unmapped += sd->blocks[j].size;
                holes++;
            }
        mapped_blocks = sd->nblocks - holes;
        if (holes) {
            f->vmm_segments++;
            f->address_space += sd->size;
            f->mapped += sd->size - unmapped;
            f->unmapped += unmapped;
            f->unmapped_holes += holes;
        }
        f->reserved += sd->size - unmapped;
        f->segments++;
        f->small_segments += sd->small_pool ? 1 : 0;
        int split = mapped_blocks > 1;
        for (size_t j = 0; j < sd->nblocks; j++) {
            const cci_block_desc *b = &sd->blocks[j];
            if (b->state == CCI_REPORT_BLOCK_UNMAPPED)
                continue;  // address space, not a block of memory: neither free nor used
            f->blocks++;
            if (b->state == 1) {
                f->allocated += b->size;
                f->requested += b->requested;
            } else if (b->state == 2) {
                f->pending += b->size;
            } else {
                f->cached_free += b->size;
                f->free_blocks++;
                if (split)
                    f->inactive_split += b->size;
                if (b->size > f->largest_free)
                    f->largest_free = b->size;
                if (b->size >= l->stats.max_split_size)
                    f->oversize_free += b->size;
                unsigned k = b->size ? 63u - (unsigned)__builtin_clzll((unsigned long long)b->size) : 0;
                f->hist_count[k]++;
                f->hist_bytes[k] += b->size;
            }
        }
    }
    f->ratio = f->cached_free ? 1.0 - (double)f->largest_free / (double)f->cached_free : 0.0;
}

size_t cci__largest_segments(const cci_layout *l, size_t *idx, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < l->nsegments; i++) {
        // Insertion into a short sorted list: max is a handful, nsegments may be thousands.
        size_t pos = n;
        while (pos > 0 && l->segments[idx[pos - 1]].size < l->segments[i].size)
            pos--;
        if (pos >= max)
            continue;
        size_t end = n < max ? n : max - 1;
        memmove(&idx[pos + 1], &idx[pos], (end - pos) * sizeof *idx);
        idx[pos] = i;
        if (n < max)
            n++;
    }
    return n;
}

void cci_report_derive(cci_report_snapshot *s)
{
    for (int i = 0; i < s->ndevices; i++) {
        cci_report_device *d = &s->devices[i];
        cci__frag_compute(&d->now, &d->frag_now);
        cci__frag_compute(d->have_peak ? &d->peak : NULL, &d->frag_peak);
        cci__advice_compute(d);
    }
}

int cci_report_has_activity(const cci_report_snapshot *s)
{
    for (int i = 0; i < s->ndevices; i++)
        if (s->devices[i].stats.num_device_alloc > 0)
            return 1;
    return (s->has_pinned && s->pinned.pinned_host_allocs > 0) ||
           (s->has_program_vmm && s->program_vmm.program_vmm_creates > 0);
}

static void process_info(cci_report_snapshot *s)
{
    s->pid = (long)getpid();
    s->rank = cci_report_rank();
    snprintf(s->program, sizeof s->program, "%s", program_invocation_name);
    if (gethostname(s->host, sizeof s->host) != 0)
        snprintf(s->host, sizeof s->host, "unknown");
    s->host[sizeof s->host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(s->time_utc, sizeof s->time_utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int cci__device_take(cci_report_device *d, cci_allocator *a, cci_report_timeline *tl)
{
    d->device = cci_allocator_device(a);
    if (cci_layout_take(a, &d->now) != 0)
        return -1;
    d->stats = d->now.stats;
    d->have_peak = cci_layout_take_peak(a, &d->peak) == 0;
    const cci_config *cfg = cci_allocator_config(a);
    cci_config_format(cfg, d->config, sizeof d->config);
    d->expandable_requested = cfg->expandable_segments;
    cci_alloc_vmm_counts(a, &d->vmm_calls);  // mode 0 (all zero) on ordinary segments
    if (cci_allocator_simulated(a))
        snprintf(d->device_kind, sizeof d->device_kind, "simulated device (address ranges with no memory behind them)");
    if (tl) {
        if (cci__timeline_copy(tl, &d->samples, &d->nsamples, &d->clock, &d->misses) != 0)
            return -1;
        d->have_timeline = 1;
    }
    return 0;
}

void cci__device_free(cci_report_device *d)
{
    cci__advice_clear(d);
    free(d->whatif.rows);
    d->whatif.rows = NULL;
    d->whatif.nrows = 0;
    cci_layout_free(&d->now);
    if (d->have_peak)
        cci_layout_free(&d->peak);
    free(d->samples);
    d->samples = NULL;
    d->nsamples = 0;
    cci_report_holders_free(&d->holders_peak);
    cci_report_holders_free(&d->holders_now);
    free(d->block_sites);
    d->block_sites = NULL;
    d->nblock_sites = 0;
}

int cci_report_snapshot_take(cci_report_snapshot *s, cci_allocator *const *allocs,
                             cci_report_timeline *const *tls, int n)
{
    memset(s, 0, sizeof *s);
    process_info(s);
    s->devices = calloc(n > 0 ? (size_t)n : 1, sizeof *s->devices);
    if (!s->devices)
        return -1;
    for (int i = 0; i < n; i++) {
        if (!allocs[i])
            continue;
        // Devices are counted as they succeed, so snapshot_free never sees a half-taken one twice.
        cci_report_device *d = &s->devices[s->ndevices++];
        if (cci__device_take(d, allocs[i], tls ? tls[i] : NULL) != 0) {
            cci_report_snapshot_free(s);
            return -1;
        }
    }
    cci_report_derive(s);
    return 0;
}

void cci_report_snapshot_free(cci_report_snapshot *s)
{
    for (int i = 0; s->devices && i < s->ndevices; i++)
        cci__device_free(&s->devices[i]);
    free(s->devices);
    memset(s, 0, sizeof *s);
}
