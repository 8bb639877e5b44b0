// SPDX-License-Identifier: MIT
// One message path: every line is `ccinterpose[PID]: SEVERITY: text`, formatted on the stack and
// written with a single write(2) so that ranks and threads never interleave mid-line and no
// malloc happens (we may be called from a signal handler or while the host's heap is unhappy).
#ifndef CCI_LOG_H
#define CCI_LOG_H

#include <stdarg.h>

typedef enum cci_log_level { CCI_LOG_ERROR, CCI_LOG_WARNING, CCI_LOG_INFO, CCI_LOG_DEBUG } cci_log_level;

/// Verbosity threshold (default CCI_LOG_WARNING); the preload sets it from CCI_LOG.
void cci_log_set_level(cci_log_level lvl);
cci_log_level cci_log_get_level(void);
/// Messages of a level above the threshold are dropped. Warnings are capped (CCI_LOG_MAX_WARNINGS)
/// so a program that double-frees in a loop does not drown its own output.
void cci_log(cci_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cci_vlog(cci_log_level lvl, const char *fmt, va_list ap);
/// Output file descriptor (default 2).
void cci_log_set_fd(int fd);

#define CCI_LOG_MAX_WARNINGS 100

#endif
