// SPDX-License-Identifier: MIT
// The out-of-memory message: what PyTorch users expect to read when an allocation finally fails
// (request, capacity, free, allocated, reserved but unallocated), plus the largest free block and
// the advice. Written as one block with one write(2) so that other threads and ranks cannot cut
// into it, and before the program has a chance to die.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report_holders.h"
#include "report_impl.h"

#define OOM_BUF 8192
#define WRAP 100

typedef struct out {
    char *buf;
    size_t cap, len;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...)
{
    if (o->len + 1 >= o->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n < o->cap - o->len ? (size_t)n : o->cap - o->len - 1;
}

// The advice paragraphs wrapped under a four-space indent; words are never split.
static void put_wrapped(out *o, const char *prefix, const char *text)
{
    put(o, "%s", prefix);
    size_t col = strlen(prefix);
    int first_word = 1;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        const char *w = p;
        while (*p && *p != ' ')
            p++;
        int len = (int)(p - w);
        if (!len)
            break;
        if (!first_word && col + 1 + (size_t)len > WRAP) {
            put(o, "\n    ");
            col = 4;
        } else if (!first_word) {
            put(o, " ");
            col++;
        }
        put(o, "%.*s", len, w);
        col += (size_t)len;
        first_word = 0;
    }
    put(o, "\n");
}

// cci__human takes a signed count (it also prints differences), so a size of 2^63 or more, such as
// a request computed from a negative number, would read as negative there.
static const char *size_text(uint64_t v, char *buf, size_t buflen)
{
    if (v <= (uint64_t)INT64_MAX)
        return cci__human((int64_t)v, buf, buflen);
    snprintf(buf, buflen, "%.1f EiB", (double)v / 1152921504606846976.0);  // 2^60
    return buf;
}

static void format_oom(out *o, cci_allocator *a, cci_report_timeline *tl, size_t requested, long long device_free,
                       const cci_report_oom_extra *extra)
{
    char h1[16], h2[16], h3[16], h4[16];
    cci_report_device *d = calloc(1, sizeof *d);
    int have_layout = d && cci__device_take(d, a, tl) == 0;
    cci_stats st;
    if (have_layout)
        st = d->stats;
    else
        cci_alloc_stats(a, &st);
    int dev = cci_allocator_device(a);
    uint64_t reserved = (uint64_t)st.reserved_bytes[CCI_POOL_ALL].current;
    uint64_t allocated = (uint64_t)st.allocated_bytes[CCI_POOL_ALL].current;
    uint64_t unalloc = reserved > allocated ? reserved - allocated : 0;

    put(o, "CUDA out of memory. Tried to allocate %s. ", size_text(requested, h1, sizeof h1));
    if (st.device_capacity) {
        int estimate = device_free < 0;
        uint64_t free_b = !estimate ? (uint64_t)device_free
                          : st.device_capacity > reserved ? st.device_capacity - reserved : 0;
        put(o, "Device %d has a total capacity of %s of which %s is free%s. ", dev,
            size_text(st.device_capacity, h2, sizeof h2), size_text(free_b, h3, sizeof h3),
            estimate ? " (capacity minus our reservations; other users not counted)" : "");
    } else {
        put(o, "Device %d has an unknown total capacity. ", dev);
    }
    put(o, "Of the allocated memory %s is allocated by libccinterpose, and %s is reserved but unallocated.\n",
        size_text(allocated, h2, sizeof h2), size_text(unalloc, h3, sizeof h3));
    put(o, "  Largest free block: %s. On this device so far: %llu OOM(s), %llu cudaMalloc retries.\n",
        size_text(st.largest_free_block, h4, sizeof h4), (unsigned long long)st.num_ooms,
        (unsigned long long)st.num_alloc_retries);
    // ---- the fragmentation figure (largest free block vs all cached free bytes) ----
    if (have_layout) {
        cci__frag_compute(&d->now, &d->frag_now);
        char f1[16], f2[16];
        put(o, "  Fragmentation: the largest free block is %s of %s cached free in %llu block(s) "
            "(ratio %.2f = 1 - largest / free).\n",
            size_text(d->frag_now.largest_free, f1, sizeof f1),
            size_text(d->frag_now.cached_free, f2, sizeof f2), (unsigned long long)d->frag_now.free_blocks,
            d->frag_now.ratio);
    }
    // ---- end ----
    if (have_layout)
        put(o, "  Configuration: %s\n", d->config);
    // A request larger than the whole device is a wrong size, not a full device: no setting helps,
    // and the retry it caused says nothing about how close to the limit the program runs.
    int impossible = st.device_capacity && requested > st.device_capacity;
    if (impossible) {
        put_wrapped(o, "  * ",
                    "The request alone is larger than the device's total capacity: no cache setting or "
                    "smaller batch can make room for it. Check how the program computes this size (a "
                    "negative or uninitialised value converted to an unsigned size reads like this).");
    } else if (unalloc >= requested && st.largest_free_block < requested) {
        // The cure named depends on the mode in effect: never advise what already runs.
        int vmm = have_layout ? d->vmm_calls.mode : -1;
        put_wrapped(o, "  * ",
                    vmm > 0 ? "The reserved but unallocated memory would hold the request, but no free block is "
                              "large enough, even on the virtual-memory segments in effect: free pages sit between "
                              "live blocks. The last line says what a replay of this run measured under the other "
                              "settings."
                    : vmm == 0
                        ? "The reserved but unallocated memory would hold the request, but no free block is large "
                          "enough: the cache is fragmented, on ordinary segments. Segments on the virtual-memory "
                          "API grow instead of splitting: compact segments (the default where the device offers "
                          "that API; drop compact_segments:False) or PyTorch's expandable_segments:True; the "
                          "last line says what a replay of this run measured."
                        : "The reserved but unallocated memory would hold the request, but no free block is large "
                          "enough: the cache is fragmented. Segments on the virtual-memory API (compact segments, "
                          "the default where the device offers that API, or expandable_segments:True) grow "
                          "instead of splitting; the last line says what a replay of this run measured.");
    } else if (unalloc < requested) {
        put_wrapped(o, "  * ",
                    "Even an empty cache would not make room: the program needs more memory than is left on "
                    "the device (smaller batches, or fewer live tensors at the peak).");
    }
    if (have_layout) {
        cci__frag_compute(&d->now, &d->frag_now);
        cci__frag_compute(d->have_peak ? &d->peak : NULL, &d->frag_peak);
        cci__advice_compute(d);
        for (size_t k = 0; k < d->nadvice; k++) {
            // Those two restate the failure itself, which the lines above already say.
            if (strcmp(d->advice[k].rule, "oom") == 0 || strcmp(d->advice[k].rule, "healthy") == 0)
                continue;
            if (impossible && strcmp(d->advice[k].rule, "retries") == 0)
                continue;
            put_wrapped(o, "  * ", d->advice[k].text);
        }
    }
    // ---- the caller's measurements (top holders: hook for the call-site report) ----
    if (extra && extra->holders && *extra->holders)
        put(o, "%s", extra->holders);
    if (extra && extra->whatif && *extra->whatif)
        put_wrapped(o, "  => ", extra->whatif);
    // ---- end ----
    if (d) {
        cci__device_free(d);
        free(d);
    }
}

size_t cci_report_oom_format(char *buf, size_t buflen, cci_allocator *a, cci_report_timeline *tl, size_t requested,
                             long long device_free)
{
    return cci_report_oom_format_ex(buf, buflen, a, tl, requested, device_free, NULL);
}

size_t cci_report_oom_format_ex(char *buf, size_t buflen, cci_allocator *a, cci_report_timeline *tl,
                                size_t requested, long long device_free, const cci_report_oom_extra *extra)
{
    if (!buflen)
        return 0;
    out o = {buf, buflen, 0};
    buf[0] = '\0';
    format_oom(&o, a, tl, requested, device_free, extra);
    return o.len;
}

int cci_report_oom(int fd, cci_allocator *a, cci_report_timeline *tl, size_t requested, long long device_free)
{
    return cci_report_oom_ex(fd, a, tl, requested, device_free, NULL);
}

int cci_report_oom_ex(int fd, cci_allocator *a, cci_report_timeline *tl, size_t requested, long long device_free,
                      const cci_report_oom_extra *extra)
{
    char buf[OOM_BUF];
    out o = {buf, sizeof buf, 0};
    buf[0] = '\0';
    put(&o, "ccinterpose[%ld]: error: ", (long)getpid());
    format_oom(&o, a, tl, requested, device_free, extra);
    return cci_report_write_all(fd, buf, o.len);
}

// The top holders under the OOM block. A hook of its own, so the OOM formatter above can call it
// too; the preload writes it right after that block when call sites are on (CCI_STACKS).
int cci_report_oom_holders(const cci_report_holders *h, int device, size_t top, char **out, size_t *len)
{
    cci_sb b = {0};
    char hb[16];
    cci__sb_printf(&b, "  top holders of device %d (%s requested by live blocks, %zu call site%s):\n", device,
                   cci__human((int64_t)h->bytes, hb, sizeof hb), h->n, h->n == 1 ? "" : "s");
    cci__holders_list_text(&b, h, top, "  ", 0);
    return cci__sb_finish(&b, out, len);
}
