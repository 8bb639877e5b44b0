// SPDX-License-Identifier: MIT
// Reader of the text trace that scripts/snapshot2trace.py writes (docs/text-trace-format.md).
//
// It parses from memory rather than with stdio so that the same code serves plain and
// compressed files, and so that a final line without its newline (a file cut short) can be told
// apart from a complete one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

static const struct {
    const char *name;
    size_t len;
    cci_event_kind action;
} actions[] = {
    {"alloc", 5, CCI_EV_ALLOC},
    {"free_requested", 14, CCI_EV_FREE_REQUESTED},
    {"free_completed", 14, CCI_EV_FREE_COMPLETED},
    {"segment_alloc", 13, CCI_EV_SEGMENT_ALLOC},
    {"segment_free", 12, CCI_EV_SEGMENT_FREE},
    {"oom", 3, CCI_EV_OOM},
    {"segment_map", 11, CCI_EV_SEGMENT_MAP},
    {"segment_unmap", 13, CCI_EV_SEGMENT_UNMAP},
};

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

// Reads one unsigned number in base 10 or 16 from [*p, end); refuses overflow and empty digits.
static int parse_num(const char **p, const char *end, unsigned base, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    while (s < end) {
        int d = base == 16 ? hexval(*s) : (*s >= '0' && *s <= '9' ? *s - '0' : -1);
        if (d < 0)
            break;
        if (v > (UINT64_MAX - (uint64_t)d) / base)
            return -1;
        v = v * base + (uint64_t)d;
        s++;
    }
    if (s == *p)
        return -1;
    *out = v;
    *p = s;
    return 0;
}

static int parse_event(const char *s, const char *end, cci_trace_event *e)
{
    const char *sp = memchr(s, ' ', (size_t)(end - s));
    if (!sp)
        return -1;
    size_t len = (size_t)(sp - s);
    int found = 0;
    for (size_t i = 0; i < sizeof actions / sizeof actions[0] && !found; i++)
        if (actions[i].len == len && !memcmp(actions[i].name, s, len)) {
            e->action = (uint8_t)actions[i].action;
            found = 1;
        }
    if (!found)
        return -1;
    const char *p = sp + 1;
    uint64_t dev;
    if (end - p < 2 || p[0] != '0' || p[1] != 'x')
        return -1;
    p += 2;
    if (parse_num(&p, end, 16, &e->addr) || p == end || *p++ != ' ' ||
        parse_num(&p, end, 10, &e->size) || p == end || *p++ != ' ' ||
        parse_num(&p, end, 10, &e->stream) || p == end || *p++ != ' ' ||
        parse_num(&p, end, 10, &dev) || p != end)
        return -1;
    if (dev > 1024)
        return -1;
    e->device = (uint32_t)dev;
    return 0;
}

int cci_trace_push(cci_trace *t, const cci_trace_event *e)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        cci_trace_event *n = realloc(t->ev, cap * sizeof *n);
        if (!n)
            return -1;
        t->ev = n;
        t->cap = cap;
    }
    t->ev[t->n++] = *e;
    return 0;
}

#define FORMAT_LINE "# cci-text-trace 1"

int cci_trace_parse_text(const char *buf, size_t len, const char *name, cci_trace *t, char *err,
                         size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->format = "text";
    const char *p = buf, *end = buf + len;
    size_t lineno = 0;
    if (len == 0) {
        snprintf(err, errlen, "%s: empty file, not a cci text trace", name);
        return -1;
    }
    while (p < end) {
        lineno++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {
            snprintf(err, errlen, "%s:%zu: truncated: the last line has no newline (file cut short?)",
                     name, lineno);
            goto fail;
        }
        size_t n = (size_t)(nl - p);
        if (lineno == 1 && (n != sizeof FORMAT_LINE - 1 || memcmp(p, FORMAT_LINE, n) != 0)) {
            snprintf(err, errlen, "%s: not a cci text trace (first line must be '%s')", name, FORMAT_LINE);
            goto fail;
        }
        if (n > 0 && p[0] != '#') {
            cci_trace_event e = {0};
            if (parse_event(p, nl, &e) != 0) {
                char shown[61];
                size_t k = n < sizeof shown - 1 ? n : sizeof shown - 1;
                for (size_t i = 0; i < k; i++)  // the message stays one printable line
                    shown[i] = p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '?';
                shown[k] = 0;
                snprintf(err, errlen,
                         "%s:%zu: malformed event '%s' (expected: ACTION 0xADDR SIZE STREAM DEVICE)", name,
                         lineno, shown);
                goto fail;
            }
            if (e.action == CCI_EV_OOM)
                t->recorded_ooms++;
            if (cci_trace_push(t, &e) != 0) {
                snprintf(err, errlen, "%s: out of memory after %zu events", name, t->n);
                goto fail;
            }
        }
        p = nl + 1;
    }
    return 0;
fail:
    cci_trace_free(t);
    return -1;
}

void cci_trace_free(cci_trace *t)
{
    free(t->ev);
    free(t->config);
    memset(t, 0, sizeof *t);
}
