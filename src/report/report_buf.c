// SPDX-License-Identifier: MIT
// The pieces every printer shares: the output buffer, the byte humaniser, the statistics table,
// and rendering/writing a whole report.
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report_impl.h"
#include "stats_list.h"

// ---- buffer --------------------------------------------------------------------------------

static int sb_reserve(cci_sb *b, size_t extra)
{
    if (b->failed)
        return -1;
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *n = realloc(b->buf, cap);
    if (!n) {
        b->failed = 1;
        return -1;
    }
    b->buf = n;
    b->cap = cap;
    return 0;
}

void cci__sb_vprintf(cci_sb *b, const char *fmt, va_list ap)
{
    char small[256];
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n >= 0 && sb_reserve(b, (size_t)n) == 0) {
        if ((size_t)n < sizeof small)
            memcpy(b->buf + b->len, small, (size_t)n + 1);
        else
            vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
}

void cci__sb_printf(cci_sb *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cci__sb_vprintf(b, fmt, ap);
    va_end(ap);
}

void cci__sb_puts(cci_sb *b, const char *s)
{
    size_t n = strlen(s);
    if (sb_reserve(b, n) != 0)
        return;
    memcpy(b->buf + b->len, s, n + 1);
    b->len += n;
}

void cci__sb_putc(cci_sb *b, char c, size_t n)
{
    if (sb_reserve(b, n) != 0)
        return;
    memset(b->buf + b->len, c, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

// Length of the well-formed UTF-8 sequence at p (overlongs and surrogates rejected), or 0.
static size_t utf8_len(const unsigned char *p)
{
    unsigned c = p[0];
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (n == 0)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0) || (c == 0xf0 && p[1] < 0x90) ||
        (c == 0xf4 && p[1] >= 0x90))
        return 0;
    return n;
}

void cci__sb_json_str(cci_sb *b, const char *s)
{
    cci__sb_putc(b, '"', 1);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n;
        if (*p == '"' || *p == '\\') {
            cci__sb_printf(b, "\\%c", *p++);
        } else if (*p == '\n') {
            cci__sb_puts(b, "\\n");
            p++;
        } else if (*p < 0x20 || *p == 0x7f) {
            cci__sb_printf(b, "\\u%04x", *p++);
        } else if (*p < 0x80) {
            cci__sb_putc(b, (char)*p++, 1);
        } else if ((n = utf8_len(p)) != 0) {
            cci__sb_printf(b, "%.*s", (int)n, (const char *)p);
            p += n;
        } else {
            // Program and host names are bytes, not promised UTF-8; JSON must be. Read as Latin-1.
            cci__sb_printf(b, "\\u%04x", *p++);
        }
    }
    cci__sb_putc(b, '"', 1);
}

void cci__sb_html(cci_sb *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': cci__sb_puts(b, "&lt;"); break;
        case '>': cci__sb_puts(b, "&gt;"); break;
        case '&': cci__sb_puts(b, "&amp;"); break;
        case '"': cci__sb_puts(b, "&quot;"); break;
        default: cci__sb_putc(b, *s, 1);
        }
    }
}

int cci__sb_finish(cci_sb *b, char **out, size_t *len)
{
    if (b->failed || sb_reserve(b, 0) != 0) {
        free(b->buf);
        *b = (cci_sb){0};
        return -1;
    }
    b->buf[b->len] = '\0';
    *out = b->buf;
    *len = b->len;
    *b = (cci_sb){0};
    return 0;
}

// ---- units ---------------------------------------------------------------------------------

const char *cci__human(int64_t bytes, char *buf, size_t buflen)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    const char *sign = bytes < 0 ? "-" : "";
    uint64_t v = bytes < 0 ? (uint64_t)0 - (uint64_t)bytes : (uint64_t)bytes;
    if (v < 1024) {
        snprintf(buf, buflen, "%s%llu B", sign, (unsigned long long)v);
        return buf;
    }
    unsigned u = 0;
    double d = (double)v;
    // Promote on the rounded value, so 1023.96 KiB reads "1.0 MiB", not "1024.0 KiB".
    while (u + 1 < sizeof units / sizeof units[0] && d >= 1024.0 - 0.05)
        d /= 1024.0, u++;
    snprintf(buf, buflen, "%s%.1f %s", sign, d, units[u]);
    return buf;
}

// ---- the statistics table --------------------------------------------------------------------

// Derived from the core's one list of statistics (stats_list.h), in its order.
#define ROW(key, label, per_pool, bytes) {#key, label, offsetof(cci_stats, key), per_pool, bytes},

const cci_stat_row cci__stat_rows[] = {CCI_STAT_FAMILIES(ROW)};
#undef ROW
const size_t cci__stat_nrows = sizeof cci__stat_rows / sizeof cci__stat_rows[0];
const char *const cci__pool_keys[CCI_POOL_KINDS] = {"all", "small_pool", "large_pool"};

#define FIG(key, label, kind) {#key, label, offsetof(cci_report_frag, key), kind}

const cci_frag_row cci__frag_rows[] = {
    FIG(reserved, "Reserved", CCI_FIG_BYTES),
    FIG(allocated, "Allocated", CCI_FIG_BYTES),
    FIG(requested, "Requested (before rounding)", CCI_FIG_BYTES),
    FIG(pending, "Freed, waiting for a stream", CCI_FIG_BYTES),
    FIG(cached_free, "Cached free (reusable)", CCI_FIG_BYTES),
    FIG(inactive_split, "Inactive split (free inside split segments)", CCI_FIG_BYTES),
    FIG(largest_free, "Largest free block", CCI_FIG_BYTES),
    FIG(oversize_free, "Free in blocks >= max_split_size", CCI_FIG_BYTES),
    FIG(free_blocks, "Free blocks", CCI_FIG_COUNT),
    FIG(ratio, "Fragmentation ratio (1 - largest / free)", CCI_FIG_RATIO),
    FIG(segments, "Segments", CCI_FIG_COUNT),
    FIG(small_segments, "  of them small-pool segments", CCI_FIG_COUNT),
    FIG(blocks, "Blocks", CCI_FIG_COUNT),
};
const size_t cci__frag_nrows = sizeof cci__frag_rows / sizeof cci__frag_rows[0];

const char *cci__frag_value(const cci_report_frag *f, const cci_frag_row *r, char *buf, size_t buflen)
{
    const char *p = (const char *)f + r->offset;
    if (!f->valid) {
        snprintf(buf, buflen, "-");
    } else if (r->kind == CCI_FIG_RATIO) {
        // Integer arithmetic: a host program's LC_NUMERIC must not turn the point into a comma.
        double v = *(const double *)p;
        unsigned c = (unsigned)((v < 0 ? 0 : v > 1 ? 1 : v) * 100.0 + 0.5);
        snprintf(buf, buflen, "%u.%02u", c / 100, c % 100);
    } else if (r->kind == CCI_FIG_COUNT) {
        snprintf(buf, buflen, "%llu", (unsigned long long)*(const uint64_t *)p);
    } else {
        cci__human((int64_t) * (const uint64_t *)p, buf, buflen);
    }
    return buf;
}

// ---- render and write ------------------------------------------------------------------------

int cci_report_render(cci_report_format fmt, const cci_report_snapshot *s, char **out, size_t *len)
{
    cci_sb b = {0};
    switch (fmt) {
    case CCI_REPORT_JSON: cci__report_json(&b, s); break;
    case CCI_REPORT_HTML: cci__report_html(&b, s); break;
    default: cci__report_text(&b, s); break;
    }
    return cci__sb_finish(&b, out, len);
}

int cci_report_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

int cci_report_write(int fd, cci_report_format fmt, const cci_report_snapshot *s)
{
    char *buf;
    size_t len;
    if (cci_report_render(fmt, s, &buf, &len) != 0)
        return -1;
    int rc = cci_report_write_all(fd, buf, len);
    free(buf);
    return rc;
}

const char *cci_report_bytes(int64_t bytes, char *buf, size_t buflen) { return cci__human(bytes, buf, buflen); }
