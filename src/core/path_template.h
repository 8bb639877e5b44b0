// SPDX-License-Identifier: MIT
// File names made from a template, for every output the layer writes (reports, traces), so that
// each process and each rank of a torchrun job gets its own file.
#ifndef CCI_PATH_TEMPLATE_H
#define CCI_PATH_TEMPLATE_H

#include <stddef.h>

/// What the placeholders stand for.
typedef struct cci_path_vars {
    long pid;          ///< %p
    int rank;          ///< %r; a negative rank is written as 0 (a job without ranks)
    const char *host;  ///< %h; NULL is written as "unknown"
} cci_path_vars;

/// Expands `pattern` into `out` (`outlen` bytes, NUL-terminated): %p, %r, %h, and %% for a
/// percent sign. Any other character, a % before any other character included, and a trailing %,
/// is copied as it is: a literal % is a legal character in a file name, and refusing it would turn
/// a harmless name into a lost report. 0; or -1 when the result is empty or does not fit (`out`
/// then holds the truncated prefix, never used as a file name by the callers).
int cci_path_expand(const char *pattern, const cci_path_vars *vars, char *out, size_t outlen);

/// The vars of this process: its pid, the given rank and the host name.
/// `host` is a caller buffer of `hostlen` bytes that receives the name.
cci_path_vars cci_path_vars_here(int rank, char *host, size_t hostlen);

#endif
