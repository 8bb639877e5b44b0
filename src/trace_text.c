// SPDX-License-Identifier: MIT
// Reader of the text trace that scripts/snapshot2trace.py writes.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

static const struct {
    const char *name;
    cci_trace_action action;
} actions[] = {
    {"alloc", CCI_TA_ALLOC},
    {"free_requested", CCI_TA_FREE_REQUESTED},
    {"free_completed", CCI_TA_FREE_COMPLETED},
    {"segment_alloc", CCI_TA_SEGMENT_ALLOC},
    {"segment_free", CCI_TA_SEGMENT_FREE},
    {"oom", CCI_TA_OOM},
};

static int parse_u64(char **p, int base, uint64_t *out)
{
    char *end;
    errno = 0;
    if (**p < '0' || **p > '9')
        return -1;
    unsigned long long v = strtoull(*p, &end, base);
    if (errno || end == *p)
        return -1;
    *out = v;
    *p = end;
    return 0;
}

static int parse_line(char *s, cci_trace_event *e)
{
    char *sp = strchr(s, ' ');
    if (!sp)
        return -1;
    size_t len = (size_t)(sp - s);
    int found = 0;
    for (size_t i = 0; i < sizeof actions / sizeof actions[0]; i++)
        if (strlen(actions[i].name) == len && !memcmp(actions[i].name, s, len)) {
            e->action = (uint8_t)actions[i].action;
            found = 1;
        }
    if (!found)
        return -1;
    char *p = sp + 1;
    uint64_t dev;
    if (strncmp(p, "0x", 2) != 0)
        return -1;
    p += 2;
    if (parse_u64(&p, 16, &e->addr) || *p++ != ' ' || parse_u64(&p, 10, &e->size) || *p++ != ' ' ||
        parse_u64(&p, 10, &e->stream) || *p++ != ' ' || parse_u64(&p, 10, &dev) || (*p && *p != '\n'))
        return -1;
    if (dev > 1024)
        return -1;
    e->device = (uint32_t)dev;
    return 0;
}

int cci_trace_read_text(const char *path, cci_trace *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char line[512];
    size_t lineno = 0;
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (lineno == 1 && strcmp(line, "# cci-text-trace 1\n") != 0) {
            snprintf(err, errlen, "%s: not a cci text trace (first line must be '# cci-text-trace 1')", path);
            rc = -1;
            break;
        }
        if (line[0] == '#')
            continue;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, errlen, "%s:%zu: line too long", path, lineno);
            rc = -1;
            break;
        }
        if (t->n == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 4096;
            cci_trace_event *n = realloc(t->ev, cap * sizeof *n);
            if (!n) {
                snprintf(err, errlen, "%s: out of memory after %zu events", path, t->n);
                rc = -1;
                break;
            }
            t->ev = n;
            t->cap = cap;
        }
        if (parse_line(line, &t->ev[t->n]) != 0) {
            line[strcspn(line, "\n")] = 0;
            snprintf(err, errlen, "%s:%zu: malformed event '%.60s' (expected: ACTION 0xADDR SIZE STREAM DEVICE)",
                     path, lineno, line);
            rc = -1;
            break;
        }
        t->n++;
    }
    if (!rc && lineno == 0) {
        snprintf(err, errlen, "%s: empty file, not a cci text trace", path);
        rc = -1;
    }
    if (!rc && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = -1;
    }
    fclose(f);
    if (rc)
        cci_trace_free(t);
    return rc;
}

void cci_trace_free(cci_trace *t)
{
    free(t->ev);
    memset(t, 0, sizeof *t);
}
