// SPDX-License-Identifier: MIT
// The virtual-memory figures of expandable (VMM) segments in each form of the report: address
// space reserved vs memory mapped, the unmapped holes, and the pages the backend keeps in its
// pool. The holes come from the layouts (cci__frag_compute); the pool from the backend, through
// cci_report_fill_vmm_pool. One function per form, so the three forms stay in step.
#include <stdio.h>

#include "report_impl.h"

void cci_report_fill_vmm_pool(cci_report_snapshot *s, cci_backend be)
{
    const cci_backend_vmm_ops *vmm = be.ops && (be.ops->caps & CCI_CAP_VMM) ? be.ops->vmm : NULL;
    if (!vmm || !vmm->pooled)
        return;
    for (int i = 0; i < s->ndevices; i++) {
        cci_report_device *d = &s->devices[i];
        size_t pages = 0, bytes = 0;
        if (vmm->pooled(be.ctx, d->device, &pages, &bytes) != CCI_OK)
            continue;
        d->vmm_pool_known = 1;
        d->vmm_pool_pages = pages;
        d->vmm_pool_bytes = bytes;
    }
}

// Printed only when the layouts hold VMM segments or the pool holds pages, so reports of
// ordinary segments read as before.
// Pages that exist without a mapping, kept to be mapped again: the backend's pool (released
// pages) plus the allocator's own (compact mode's reclaimed pages). Device memory that reserved
// (= mapped) leaves out either way.
static uint64_t pooled_pages(const cci_report_device *d) { return d->vmm_pool_pages + d->vmm_calls.pool_pages; }
static uint64_t pooled_bytes(const cci_report_device *d) { return d->vmm_pool_bytes + d->vmm_calls.pool_bytes; }

static int has_vmm(const cci_report_device *d)
{
    return d->frag_peak.vmm_segments || d->frag_now.vmm_segments || (d->vmm_pool_known && pooled_pages(d)) ||
           d->vmm_calls.va_reserves;
}

static const char *plural(uint64_t n);

// The calls on the VMM group: what the mode cost in driver time (text form).
static void calls_text(cci_sb *b, const cci_vmm_counts *c)
{
    if (!c->mode)
        return;
    cci__sb_printf(b, "  %-17s %llu page creates, %llu maps, %llu set-access, %llu unmaps (%llu pages), "
                   "%llu releases\n", "VMM calls", (unsigned long long)c->page_creates,
                   (unsigned long long)c->maps, (unsigned long long)c->set_access, (unsigned long long)c->unmaps,
                   (unsigned long long)c->unmapped_pages, (unsigned long long)c->page_releases);
    cci__sb_printf(b, "  %-17s %llu page%s mapped again from the allocator's pool, %llu reclaim%s, %llu device "
                   "sync%s before unmapping; about %.1f ms of driver time (H100 costs per call)\n", "VMM reuse",
                   (unsigned long long)c->pool_hits, plural(c->pool_hits), (unsigned long long)c->reclaims,
                   plural(c->reclaims), (unsigned long long)c->syncs, c->syncs == 1 ? "" : "s",
                   cci_vmm_estimated_us(c) / 1000.0);
    // Compact mode moves pages without a device sync: the old addresses stay mapped until a fence
    // says no queued work can touch them. Shown so that mapped memory above reserved is explained.
    if (c->deferred_unmaps || c->stream_waits || c->retiring_bytes) {
        char h[16];
        cci__sb_printf(b, "  %-17s %llu reclaim%s moved pages at once and unmapped the old addresses after a "
                       "fence, %llu fence wait%s for another stream's pages; %s of old mappings still waiting "
                       "(mapped, not in reserved)\n", "VMM retirements", (unsigned long long)c->deferred_unmaps,
                       plural(c->deferred_unmaps), (unsigned long long)c->stream_waits, plural(c->stream_waits),
                       cci__human((int64_t)c->retiring_bytes, h, sizeof h));
    }
}

static const char *plural(uint64_t n) { return n == 1 ? "" : "s"; }

// ---- text ----------------------------------------------------------------------------------

void cci__vmm_text(cci_sb *b, const cci_report_device *d)
{
    if (!has_vmm(d))
        return;
    const cci_report_frag *f[2] = {&d->frag_peak, &d->frag_now};
    const char *const when[2] = {"at peak reserved", cci__when(d)};
    cci__sb_printf(b, "\nExpandable segments, device %d (address space reserved vs memory mapped):\n", d->device);
    for (int i = 0; i < 2; i++) {
        if (!f[i]->valid)
            continue;
        char h1[16], h2[16], h3[16];
        cci__sb_printf(b, "  %-17s %llu segment%s, %s of address space, %s mapped, %s unmapped in %llu hole%s\n",
                       when[i], (unsigned long long)f[i]->vmm_segments, plural(f[i]->vmm_segments),
                       cci__human((int64_t)f[i]->address_space, h1, sizeof h1),
                       cci__human((int64_t)f[i]->mapped, h2, sizeof h2), cci__human((int64_t)f[i]->unmapped, h3, sizeof h3),
                       (unsigned long long)f[i]->unmapped_holes, plural(f[i]->unmapped_holes));
    }
    if (d->vmm_pool_known) {
        char h[16];
        cci__sb_printf(b, "  %-17s %llu page%s pooled (%s): unmapped, kept to be mapped again, not in reserved\n",
                       "page pool now", (unsigned long long)pooled_pages(d), plural(pooled_pages(d)),
                       cci__human((int64_t)pooled_bytes(d), h, sizeof h));
    }
    calls_text(b, &d->vmm_calls);
}

// ---- JSON ----------------------------------------------------------------------------------

/// `"vmm": {"at_peak": ..., "at_exit": ..., "pooled_pages": N, "pooled_bytes": N, "calls": {...}}`
/// with a trailing ",\n    " (a layout not recorded, a pool the backend does not count, or calls
/// of an allocator on ordinary segments, is null).
void cci__vmm_json(cci_sb *b, const cci_report_device *d)
{
    cci__sb_puts(b, "\"vmm\": {");
    const cci_report_frag *f[2] = {&d->frag_peak, &d->frag_now};
    static const char *const when[2] = {"at_peak", "at_exit"};
    for (int i = 0; i < 2; i++) {
        cci__sb_printf(b, "%s\"%s\": ", i ? ", " : "", when[i]);
        if (!f[i]->valid) {
            cci__sb_puts(b, "null");
            continue;
        }
        cci__sb_printf(b, "{\"segments\": %llu, \"address_space_bytes\": %llu, \"mapped_bytes\": %llu, "
                       "\"unmapped_bytes\": %llu, \"unmapped_holes\": %llu}",
                       (unsigned long long)f[i]->vmm_segments, (unsigned long long)f[i]->address_space,
                       (unsigned long long)f[i]->mapped, (unsigned long long)f[i]->unmapped,
                       (unsigned long long)f[i]->unmapped_holes);
    }
    if (d->vmm_pool_known)
        cci__sb_printf(b, ", \"pooled_pages\": %llu, \"pooled_bytes\": %llu", (unsigned long long)pooled_pages(d),
                       (unsigned long long)pooled_bytes(d));
    else
        cci__sb_puts(b, ", \"pooled_pages\": null, \"pooled_bytes\": null");
    const cci_vmm_counts *c = &d->vmm_calls;
    if (c->mode)
        cci__sb_printf(b, ", \"calls\": {\"page_creates\": %llu, \"maps\": %llu, \"set_access\": %llu, "
                       "\"unmaps\": %llu, \"unmapped_pages\": %llu, \"page_releases\": %llu, \"pool_hits\": %llu, "
                       "\"va_reserves\": %llu, \"va_frees\": %llu, \"reclaims\": %llu, \"syncs\": %llu, "
                       "\"pool_pages\": %llu, \"pool_bytes_peak\": %llu, \"deferred_unmaps\": %llu, "
                       "\"stream_waits\": %llu, \"retiring_bytes\": %llu, \"estimated_api_us\": %.1f}",
                       (unsigned long long)c->page_creates, (unsigned long long)c->maps,
                       (unsigned long long)c->set_access, (unsigned long long)c->unmaps,
                       (unsigned long long)c->unmapped_pages, (unsigned long long)c->page_releases,
                       (unsigned long long)c->pool_hits, (unsigned long long)c->va_reserves,
                       (unsigned long long)c->va_frees, (unsigned long long)c->reclaims,
                       (unsigned long long)c->syncs, (unsigned long long)c->pool_pages,
                       (unsigned long long)c->pool_bytes_peak, (unsigned long long)c->deferred_unmaps,
                       (unsigned long long)c->stream_waits, (unsigned long long)c->retiring_bytes,
                       cci_vmm_estimated_us(c));
    else
        cci__sb_puts(b, ", \"calls\": null");
    cci__sb_puts(b, "},\n    ");
}

// ---- HTML ----------------------------------------------------------------------------------

void cci__vmm_html(cci_sb *b, const cci_report_device *d)
{
    if (!has_vmm(d))
        return;
    const cci_report_frag *f[2] = {&d->frag_peak, &d->frag_now};
    cci__sb_printf(b, "<h3>Expandable segments: address space reserved vs memory mapped</h3>\n"
                   "<table class=\"vmm\" id=\"vmm-%d\"><thead><tr><th class=\"l\">Figure</th><th>At peak reserved</th>"
                   "<th>%s</th></tr></thead><tbody>\n", d->device, cci__When(d));
    static const char *const names[5] = {"VMM segments", "Address space reserved", "Memory mapped",
                                         "Unmapped (address space only)", "Unmapped holes"};
    for (int r = 0; r < 5; r++) {
        cci__sb_printf(b, "<tr><th class=\"l\">%s</th>", names[r]);
        for (int i = 0; i < 2; i++) {
            char h[16] = "-";
            const cci_report_frag *x = f[i];
            if (x->valid && (r == 0 || r == 4))
                snprintf(h, sizeof h, "%llu", (unsigned long long)(r == 0 ? x->vmm_segments : x->unmapped_holes));
            else if (x->valid)
                cci__human((int64_t)(r == 1 ? x->address_space : r == 2 ? x->mapped : x->unmapped), h, sizeof h);
            cci__sb_printf(b, "<td>%s</td>", h);
        }
        cci__sb_puts(b, "</tr>\n");
    }
    cci__sb_puts(b, "</tbody></table>\n");
    if (d->vmm_pool_known) {
        char h[16];
        cci__sb_printf(b, "<p class=\"proc\" id=\"vmm-pool-%d\">Page pool now: <span class=\"pooled-pages\">%llu</span> "
                       "page%s pooled (%s): unmapped, kept to be mapped again, not counted in reserved.</p>\n",
                       d->device, (unsigned long long)pooled_pages(d), plural(pooled_pages(d)),
                       cci__human((int64_t)pooled_bytes(d), h, sizeof h));
    }
    const cci_vmm_counts *c = &d->vmm_calls;
    if (c->mode)
        cci__sb_printf(b, "<p class=\"proc\" id=\"vmm-calls-%d\">VMM calls: %llu page creates, %llu maps, %llu "
                       "set-access, %llu unmaps (%llu pages), %llu releases; %llu pages mapped again from the "
                       "allocator's pool; about <span class=\"vmm-api-ms\">%.1f</span> ms of driver time (H100 costs "
                       "per call); %llu reclaims unmapped the old addresses after a fence, %llu fence waits for "
                       "another stream's pages.</p>\n",
                       d->device, (unsigned long long)c->page_creates, (unsigned long long)c->maps,
                       (unsigned long long)c->set_access, (unsigned long long)c->unmaps,
                       (unsigned long long)c->unmapped_pages, (unsigned long long)c->page_releases,
                       (unsigned long long)c->pool_hits, cci_vmm_estimated_us(c) / 1000.0,
                       (unsigned long long)c->deferred_unmaps, (unsigned long long)c->stream_waits);
}
