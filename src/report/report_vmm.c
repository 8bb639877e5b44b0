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
static int has_vmm(const cci_report_device *d)
{
    return d->frag_peak.vmm_segments || d->frag_now.vmm_segments || (d->vmm_pool_known && d->vmm_pool_pages);
}

static const char *plural(uint64_t n) { return n == 1 ? "" : "s"; }

// ---- text ----------------------------------------------------------------------------------

void cci__vmm_text(cci_sb *b, const cci_report_device *d)
{
    if (!has_vmm(d))
        return;
    const cci_report_frag *f[2] = {&d->frag_peak, &d->frag_now};
    static const char *const when[2] = {"at peak reserved", "at exit"};
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
        cci__sb_printf(b, "  %-17s %llu page%s pooled (%s): released, kept to be mapped again, not in reserved\n",
                       "page pool now", (unsigned long long)d->vmm_pool_pages, plural(d->vmm_pool_pages),
                       cci__human((int64_t)d->vmm_pool_bytes, h, sizeof h));
    }
}

// ---- JSON ----------------------------------------------------------------------------------

/// `"vmm": {"at_peak": ..., "at_exit": ..., "pooled_pages": N, "pooled_bytes": N}` with a
/// trailing ",\n    " (a layout not recorded, or a pool the backend does not count, is null).
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
        cci__sb_printf(b, ", \"pooled_pages\": %llu, \"pooled_bytes\": %llu", (unsigned long long)d->vmm_pool_pages,
                       (unsigned long long)d->vmm_pool_bytes);
    else
        cci__sb_puts(b, ", \"pooled_pages\": null, \"pooled_bytes\": null");
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
                   "<th>At exit</th></tr></thead><tbody>\n", d->device);
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
                       "page%s pooled (%s): released, kept to be mapped again, not counted in reserved.</p>\n",
                       d->device, (unsigned long long)d->vmm_pool_pages, plural(d->vmm_pool_pages),
                       cci__human((int64_t)d->vmm_pool_bytes, h, sizeof h));
    }
}
