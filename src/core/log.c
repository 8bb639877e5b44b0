// SPDX-License-Identifier: MIT
#include "log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static _Atomic int log_level = CCI_LOG_WARNING;
static _Atomic int log_fd = 2;
static _Atomic unsigned warnings_written;

void cci_log_set_level(cci_log_level lvl) { atomic_store(&log_level, (int)lvl); }
cci_log_level cci_log_get_level(void) { return (cci_log_level)atomic_load(&log_level); }
void cci_log_set_fd(int fd) { atomic_store(&log_fd, fd); }

static const char *const level_names[] = {"error", "warning", "info", "debug"};

void cci_vlog(cci_log_level lvl, const char *fmt, va_list ap)
{
    if ((int)lvl > atomic_load(&log_level))
        return;
    if (lvl == CCI_LOG_WARNING) {
        unsigned n = atomic_fetch_add(&warnings_written, 1);
        if (n > CCI_LOG_MAX_WARNINGS)
            return;
        if (n == CCI_LOG_MAX_WARNINGS)
            fmt = "further warnings suppressed";
    }
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "ccinterpose[%ld]: %s: ", (long)getpid(), level_names[lvl]);
    if (n < 0)
        return;
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    ssize_t w = write(atomic_load(&log_fd), buf, len);
    (void)w;
}

void cci_log(cci_log_level lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cci_vlog(lvl, fmt, ap);
    va_end(ap);
}
