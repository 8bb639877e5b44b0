// SPDX-License-Identifier: MIT
// Who holds the memory, and leak or cache: the call-site tables (CCI_STACKS) and the split of
// what is left at exit into memory the program still holds and memory the allocator caches, in
// text, JSON and HTML. The tables are plain data in the snapshot; the preload fills them.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_holders.h"

#define TEXT_HOLDERS 10     ///< call sites a text or HTML table shows
#define JSON_HOLDERS 50     ///< call sites the JSON keeps (the rest are summed in "other")
#define LIVE_BLOCKS 5       ///< largest live blocks listed when stacks are off

void cci_report_holders_free(cci_report_holders *h)
{
    free(h->list);
    free(h->strings);
    memset(h, 0, sizeof *h);
}

const char *cci__block_site_frame(const cci_report_device *d, uintptr_t addr)
{
    size_t lo = 0, hi = d->nblock_sites;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->block_sites[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == d->nblock_sites || d->block_sites[lo].addr != addr)
        return NULL;
    size_t k = d->block_sites[lo].holder;
    if (k >= d->holders_now.n || d->holders_now.list[k].nframes == 0)
        return NULL;
    return d->holders_now.list[k].frames[0];
}

// What is left when the report is taken: held by the program, cached, or waiting on a stream.
typedef struct leftover {
    uint64_t held, held_blocks, cached, cached_blocks, waiting, waiting_blocks;
} leftover;

static leftover leftover_of(const cci_layout *l)
{
    leftover o = {0};
    for (size_t i = 0; i < l->nsegments; i++) {
        for (size_t j = 0; j < l->segments[i].nblocks; j++) {
            const cci_block_desc *b = &l->segments[i].blocks[j];
            if (b->state == 1) {
                o.held += b->size;
                o.held_blocks++;
            } else if (b->state == 2) {
                o.waiting += b->size;
                o.waiting_blocks++;
            } else if (b->state == 0) {
                o.cached += b->size;
                o.cached_blocks++;
            }
        }
    }
    return o;
}

// The largest live blocks of the layout, for reports without call sites.
static size_t largest_live(const cci_layout *l, const cci_block_desc **out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < l->nsegments; i++) {
        for (size_t j = 0; j < l->segments[i].nblocks; j++) {
            const cci_block_desc *b = &l->segments[i].blocks[j];
            if (b->state != 1)
                continue;
            size_t pos = n;
            while (pos > 0 && out[pos - 1]->size < b->size)
                pos--;
            if (pos >= max)
                continue;
            size_t end = n < max ? n : max - 1;
            memmove(&out[pos + 1], &out[pos], (end - pos) * sizeof *out);
            out[pos] = b;
            if (n < max)
                n++;
        }
    }
    return n;
}

static void age_text(char *buf, size_t len, const cci_report_holder *h)
{
    if (h->oldest_age_s >= 0)
        snprintf(buf, len, "oldest is allocation #%llu, %.1f s old", (unsigned long long)h->first_seq,
                 h->oldest_age_s);
    else
        snprintf(buf, len, "oldest is allocation #%llu", (unsigned long long)h->first_seq);
}

// ---- text -----------------------------------------------------------------------------------

void cci__holders_list_text(cci_sb *b, const cci_report_holders *h, size_t top, const char *indent, int ages)
{
    size_t n = h->n < top ? h->n : top;
    uint64_t shown = 0;
    for (size_t i = 0; i < n; i++) {
        const cci_report_holder *x = &h->list[i];
        char hb[16], age[96];
        shown += x->bytes;
        cci__sb_printf(b, "%s%2zu. %s in %llu block%s", indent, i + 1, cci__human((int64_t)x->bytes, hb, sizeof hb),
                       (unsigned long long)x->blocks, x->blocks == 1 ? "" : "s");
        if (ages) {
            age_text(age, sizeof age, x);
            cci__sb_printf(b, ", %s", age);
        }
        cci__sb_putc(b, '\n', 1);
        for (size_t f = 0; f < x->nframes; f++)
            cci__sb_printf(b, "%s      at %s\n", indent, x->frames[f]);
        if (x->nframes == 0)
            cci__sb_printf(b, "%s      (no frame recorded)\n", indent);
    }
    if (h->n > n) {
        char hb[16];
        cci__sb_printf(b, "%s    ... %zu more call site%s holding %s\n", indent, h->n - n, h->n - n == 1 ? "" : "s",
                       cci__human((int64_t)(h->bytes > shown ? h->bytes - shown : 0), hb, sizeof hb));
    }
}

void cci__holders_text(cci_sb *b, const cci_report_device *d)
{
    if (!d->stacks)
        return;
    const cci_report_holders *p = &d->holders_peak;
    char h1[16], h2[16];
    if (p->valid) {
        cci__sb_printf(b, "\nTop holders at peak reserved (%s reserved, %s requested by live blocks), device %d:\n",
                       cci__human((int64_t)p->reserved, h1, sizeof h1), cci__human((int64_t)p->bytes, h2, sizeof h2),
                       d->device);
        cci__holders_list_text(b, p, TEXT_HOLDERS, "  ", 0);
    } else {
        cci__sb_printf(b, "\nTop holders at peak reserved, device %d: none recorded\n", d->device);
    }
    if (d->dropped)
        cci__sb_printf(b, "  (%llu allocation%s without a call site: host memory ran short)\n",
                       (unsigned long long)d->dropped, d->dropped == 1 ? "" : "s");
}

void cci__leaks_text(cci_sb *b, const cci_report_device *d)
{
    leftover o = leftover_of(&d->now);
    char h[3][16];
    cci__sb_printf(b, d->live ? "\nIn use or cache, device %d (at the time of the dump):\n"
                                "  in use by the program (not freed yet) %8s in %llu block%s\n"
                              : "\nLeak or cache, device %d (at exit):\n"
                                "  held by the program (never freed)   %10s in %llu block%s\n"
                   "  cached by the allocator (free)      %10s in %llu block%s: reusable, not a leak\n"
                   "  freed, waiting for a stream         %10s in %llu block%s\n",
                   d->device, cci__human((int64_t)o.held, h[0], sizeof h[0]), (unsigned long long)o.held_blocks,
                   o.held_blocks == 1 ? "" : "s", cci__human((int64_t)o.cached, h[1], sizeof h[1]),
                   (unsigned long long)o.cached_blocks, o.cached_blocks == 1 ? "" : "s",
                   cci__human((int64_t)o.waiting, h[2], sizeof h[2]), (unsigned long long)o.waiting_blocks,
                   o.waiting_blocks == 1 ? "" : "s");
    if (!o.held_blocks)
        return;
    if (d->stacks) {
        cci__sb_printf(b, "%s by the program, by call site (%llu allocations recorded):\n",
                       d->live ? "In use" : "Held", (unsigned long long)d->allocations);
        cci__holders_list_text(b, &d->holders_now, TEXT_HOLDERS, "  ", 1);
        return;
    }
    const cci_block_desc *big[LIVE_BLOCKS];
    size_t n = largest_live(&d->now, big, LIVE_BLOCKS);
    cci__sb_printf(b, "Largest blocks %s by the program (set CCI_STACKS=8 for their call sites and ages):\n",
                   d->live ? "in use" : "held");
    for (size_t i = 0; i < n; i++)
        cci__sb_printf(b, "  %2zu. %#llx  %10s, %s requested\n", i + 1, (unsigned long long)big[i]->addr,
                       cci__human((int64_t)big[i]->size, h[0], sizeof h[0]),
                       cci__human((int64_t)big[i]->requested, h[1], sizeof h[1]));
}

// ---- JSON -----------------------------------------------------------------------------------

static void holders_json(cci_sb *b, const cci_report_holders *h, int ages)
{
    if (!h->valid) {
        cci__sb_puts(b, "null");
        return;
    }
    size_t n = h->n < JSON_HOLDERS ? h->n : JSON_HOLDERS;
    uint64_t shown = 0, shown_blocks = 0;
    cci__sb_printf(b, "{\"reserved\": %llu, \"bytes\": %llu, \"blocks\": %llu, \"sites\": [",
                   (unsigned long long)h->reserved, (unsigned long long)h->bytes, (unsigned long long)h->blocks);
    for (size_t i = 0; i < n; i++) {
        const cci_report_holder *x = &h->list[i];
        shown += x->bytes;
        shown_blocks += x->blocks;
        cci__sb_printf(b, "%s\n        {\"bytes\": %llu, \"blocks\": %llu, \"first_seq\": %llu", i ? "," : "",
                       (unsigned long long)x->bytes, (unsigned long long)x->blocks, (unsigned long long)x->first_seq);
        if (ages && x->oldest_age_s >= 0)
            cci__sb_printf(b, ", \"oldest_age_ms\": %llu", (unsigned long long)(x->oldest_age_s * 1000.0 + 0.5));
        cci__sb_puts(b, ", \"frames\": [");
        for (size_t f = 0; f < x->nframes; f++) {
            cci__sb_puts(b, f ? ", " : "");
            cci__sb_json_str(b, x->frames[f]);
        }
        cci__sb_puts(b, "]}");
    }
    cci__sb_printf(b, "%s], \"other\": {\"sites\": %zu, \"bytes\": %llu, \"blocks\": %llu}}", n ? "\n      " : "",
                   h->n - n, (unsigned long long)(h->bytes - (shown < h->bytes ? shown : h->bytes)),
                   (unsigned long long)(h->blocks - (shown_blocks < h->blocks ? shown_blocks : h->blocks)));
}

void cci__holders_json(cci_sb *b, const cci_report_device *d)
{
    leftover o = leftover_of(&d->now);
    cci__sb_printf(b, "    \"holders\": {\"stacks\": %d, \"allocations\": %llu, \"dropped\": %llu, \"at_peak\": ",
                   d->stacks, (unsigned long long)d->allocations, (unsigned long long)d->dropped);
    holders_json(b, &d->holders_peak, 0);
    cci__sb_puts(b, "},\n");
    cci__sb_printf(b, "    \"leaks\": {\"held_bytes\": %llu, \"held_blocks\": %llu, \"cached_bytes\": %llu, "
                   "\"cached_blocks\": %llu, \"waiting_bytes\": %llu, \"waiting_blocks\": %llu, \"by_site\": ",
                   (unsigned long long)o.held, (unsigned long long)o.held_blocks, (unsigned long long)o.cached,
                   (unsigned long long)o.cached_blocks, (unsigned long long)o.waiting,
                   (unsigned long long)o.waiting_blocks);
    holders_json(b, &d->holders_now, 1);
    cci__sb_puts(b, "},\n");
}

// ---- HTML -----------------------------------------------------------------------------------

static void holders_html(cci_sb *b, const cci_report_holders *h, const char *id, int device, int ages)
{
    size_t n = h->n < TEXT_HOLDERS ? h->n : TEXT_HOLDERS;
    cci__sb_printf(b, "<table class=\"holders\" id=\"%s-%d\"><thead><tr><th>#</th><th>Bytes (requested)</th>"
                   "<th>Blocks</th>%s<th class=\"l\">Call site (innermost first)</th></tr></thead><tbody>\n",
                   id, device, ages ? "<th>Oldest</th>" : "");
    for (size_t i = 0; i < n; i++) {
        const cci_report_holder *x = &h->list[i];
        char hb[16];
        cci__sb_printf(b, "<tr><td>%zu</td><td>%s</td><td>%llu</td>", i + 1,
                       cci__human((int64_t)x->bytes, hb, sizeof hb), (unsigned long long)x->blocks);
        if (ages) {
            char age[96];
            age_text(age, sizeof age, x);
            cci__sb_printf(b, "<td>%s</td>", age);
        }
        cci__sb_puts(b, "<td class=\"l\"><code class=\"frames\">");
        for (size_t f = 0; f < x->nframes; f++) {
            if (f)
                cci__sb_puts(b, "<br>");
            cci__sb_html(b, x->frames[f]);
        }
        cci__sb_puts(b, x->nframes ? "</code></td></tr>\n" : "(no frame recorded)</code></td></tr>\n");
    }
    cci__sb_puts(b, "</tbody></table>\n");
    if (h->n > n)
        cci__sb_printf(b, "<p class=\"proc\">The %zu largest of %zu call sites.</p>\n", n, h->n);
}

void cci__holders_html(cci_sb *b, const cci_report_device *d)
{
    leftover o = leftover_of(&d->now);
    char h[3][16];
    cci__sb_printf(b, d->live ? "<h3>In use or cache (at the time of the dump)</h3>\n<table class=\"leaks\" "
                                "id=\"leaks-%d\"><tbody>\n<tr><td class=\"l\">In use by the program (not freed "
                                "yet)</td><td>%s</td><td>%llu blocks</td></tr>\n"
                              : "<h3>Leak or cache (at exit)</h3>\n<table class=\"leaks\" id=\"leaks-%d\"><tbody>\n"
                                "<tr><td class=\"l\">Still allocated by the program</td><td>%s</td><td>%llu "
                                "blocks</td></tr>\n"
                   "<tr><td class=\"l\">Cached by the allocator (free, reusable: not a leak)</td><td>%s</td>"
                   "<td>%llu blocks</td></tr>\n<tr><td class=\"l\">Freed, waiting for a stream</td><td>%s</td>"
                   "<td>%llu blocks</td></tr>\n</tbody></table>\n",
                   d->device, cci__human((int64_t)o.held, h[0], sizeof h[0]), (unsigned long long)o.held_blocks,
                   cci__human((int64_t)o.cached, h[1], sizeof h[1]), (unsigned long long)o.cached_blocks,
                   cci__human((int64_t)o.waiting, h[2], sizeof h[2]), (unsigned long long)o.waiting_blocks);
    if (!d->stacks) {
        cci__sb_printf(b, "<p class=\"proc\" id=\"holders-off-%d\">Call sites were not recorded: run with "
                       "<code>CCI_STACKS=8</code> to see who holds the memory.</p>\n", d->device);
        return;
    }
    if (o.held_blocks) {
        cci__sb_puts(b, d->live ? "<h4>In use, by call site</h4>\n" : "<h4>Still allocated, by call site</h4>\n");
        holders_html(b, &d->holders_now, "leaks-by-site", d->device, 1);
    }
    cci__sb_puts(b, "<h3>Top holders at peak reserved</h3>\n");
    if (d->holders_peak.valid) {
        char r[16];
        cci__sb_printf(b, "<p class=\"proc\">%s reserved at the peak.</p>\n",
                       cci__human((int64_t)d->holders_peak.reserved, r, sizeof r));
        holders_html(b, &d->holders_peak, "holders-peak", d->device, 0);
    } else {
        cci__sb_printf(b, "<p class=\"proc\" id=\"holders-peak-%d\">None recorded.</p>\n", d->device);
    }
}
