// SPDX-License-Identifier: MIT
// Where a report goes and in which form: %p/%r/%h file names (the core's path_template.h) so that
// every rank of a torchrun job gets its own file, the format from the extension or an explicit name, and the whole dump path.
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"
#include "path_template.h"
#include "report_impl.h"

int cci_report_format_parse(const char *name, cci_report_format *out)
{
    static const struct { const char *name; cci_report_format fmt; } names[] = {
        {"text", CCI_REPORT_TEXT}, {"txt", CCI_REPORT_TEXT}, {"json", CCI_REPORT_JSON},
        {"html", CCI_REPORT_HTML}, {"htm", CCI_REPORT_HTML},
    };
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++) {
        if (strcasecmp(name, names[i].name) == 0) {
            *out = names[i].fmt;
            return 0;
        }
    }
    return -1;
}

cci_report_format cci_report_format_for_path(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash : path, '.');
    cci_report_format f;
    // Only json and html select a format: "report.txt" and "report.log" are both text.
    if (dot && cci_report_format_parse(dot + 1, &f) == 0)
        return f;
    return CCI_REPORT_TEXT;
}

// The process's rank, given once by whoever read the environment (the preload's settings): the
// report library reads no environment of its own. Set before any report is written; a plain
// int read by dumps on other threads, which only ever see 0 or the final value.
static _Atomic int process_rank;

void cci_report_set_rank(int rank)
{
    atomic_store(&process_rank, rank < 0 ? 0 : rank);
}

int cci_report_rank(void)
{
    return atomic_load(&process_rank);
}

int cci_report_open_destination(const char *pattern, const char *format, cci_report_format *fmt, char *path,
                                size_t pathlen)
{
    if (pathlen)
        path[0] = '\0';
    int to_stderr = !pattern || !*pattern || strcmp(pattern, "-") == 0;
    if (!to_stderr) {
        char host[128];
        cci_path_vars vars = cci_path_vars_here(cci_report_rank(), host, sizeof host);
        if (cci_path_expand(pattern, &vars, path, pathlen) != 0) {
            cci_log(CCI_LOG_ERROR, "CCI_REPORT: the file name made from '%s' is too long", pattern);
            return -1;
        }
    }
    if (format && *format) {
        if (cci_report_format_parse(format, fmt) != 0) {
            cci_log(CCI_LOG_ERROR, "CCI_REPORT_FORMAT: '%s' is not a report format: expected text, json or html",
                    format);
            return -1;
        }
    } else {
        *fmt = to_stderr ? CCI_REPORT_TEXT : cci_report_format_for_path(path);
    }
    if (to_stderr)
        return 2;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        cci_log(CCI_LOG_ERROR, "CCI_REPORT: cannot write the report to '%s': %s", path, strerror(errno));
    return fd;
}

void cci_report_close_destination(int fd)
{
    if (fd > 2)
        close(fd);
}

int cci_report_dump(cci_allocator *const *allocs, cci_report_timeline *const *tls, int n, const char *pattern,
                    const char *format, int force)
{
    cci_report_snapshot s;
    if (cci_report_snapshot_take(&s, allocs, tls, n) != 0) {
        cci_log(CCI_LOG_ERROR, "report: out of host memory while taking the snapshot");
        return -1;
    }
    return cci_report_dump_snapshot(&s, pattern, format, force, NULL, NULL);
}

void cci_report_set_device_kind(cci_report_snapshot *s, const char *what)
{
    for (int i = 0; i < s->ndevices; i++)
        snprintf(s->devices[i].device_kind, sizeof s->devices[i].device_kind, "%s", what ? what : "");
}

int cci_report_dump_snapshot(cci_report_snapshot *snap, const char *pattern, const char *format, int force,
                             cci_report_measure_fn measure, void *ud)
{
    cci_report_snapshot s = *snap;
    memset(snap, 0, sizeof *snap);
    if (!force && !cci_report_has_activity(&s)) {
        cci_report_snapshot_free(&s);
        return 1;
    }
    for (int i = 0; i < s.ndevices; i++)
        s.devices[i].live = force;
    if (measure) {
        measure(&s, ud);
    }
    cci_report_derive(&s);  // the advice again: measured figures, and the live labels
    cci_report_format fmt = CCI_REPORT_TEXT;
    char path[4096];
    int fd = cci_report_open_destination(pattern, format, &fmt, path, sizeof path);
    char *buf = NULL;
    size_t len = 0;
    int rc = fd < 0 ? -1 : cci_report_render(fmt, &s, &buf, &len);
    cci_report_snapshot_free(&s);
    if (rc == 0 && cci_report_write_all(fd, buf, len) != 0) {
        cci_log(CCI_LOG_ERROR, "report: writing to '%s' failed: %s", *path ? path : "stderr", strerror(errno));
        rc = -1;
    } else if (rc != 0 && fd >= 0) {
        cci_log(CCI_LOG_ERROR, "report: out of host memory while printing");
    }
    free(buf);
    if (fd >= 0)
        cci_report_close_destination(fd);
    return rc;
}
