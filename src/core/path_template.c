// SPDX-License-Identifier: MIT
#include "path_template.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cci_path_expand(const char *pattern, const cci_path_vars *vars, char *out, size_t outlen)
{
    if (outlen == 0)
        return -1;
    size_t o = 0;
    int overflow = 0;
    for (const char *p = pattern ? pattern : ""; *p && !overflow; p++) {
        char piece[32];
        const char *add = piece;
        if (p[0] == '%' && p[1] == 'p')
            snprintf(piece, sizeof piece, "%ld", vars->pid), p++;
        else if (p[0] == '%' && p[1] == 'r')
            snprintf(piece, sizeof piece, "%d", vars->rank < 0 ? 0 : vars->rank), p++;
        else if (p[0] == '%' && p[1] == 'h')
            add = vars->host ? vars->host : "unknown", p++;
        else if (p[0] == '%' && p[1] == '%')
            add = "%", p++;
        else
            piece[0] = *p, piece[1] = '\0';
        size_t n = strlen(add);
        if (o + n >= outlen) {
            n = outlen - 1 - o;
            overflow = 1;
        }
        memcpy(out + o, add, n);
        o += n;
    }
    out[o] = '\0';
    return overflow || o == 0 ? -1 : 0;
}

cci_path_vars cci_path_vars_here(int rank, char *host, size_t hostlen)
{
    if (hostlen) {
        if (gethostname(host, hostlen) != 0)
            snprintf(host, hostlen, "unknown");
        host[hostlen - 1] = '\0';
    }
    return (cci_path_vars){.pid = (long)getpid(), .rank = rank, .host = hostlen ? host : NULL};
}
