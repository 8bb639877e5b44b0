// SPDX-License-Identifier: MIT
// A plain-text summary for cci_dump_report, until the report module takes this place.
#include "report_hook.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "allocator.h"
#include "state.h"

const char *cci_pl_fmt_bytes(char *buf, size_t len, uint64_t bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_device(int fd, int device, const cci_stats *s)
{
    char b[6][32], line[1024];
    const int A = CCI_POOL_ALL;
    int n = snprintf(line, sizeof line,
        "device %d\n"
        "  allocated   %12s now, %12s peak, %lld blocks now\n"
        "  reserved    %12s now, %12s peak, %lld segments now\n"
        "  cached free %12s (largest block %s)\n"
        "  device allocations %llu, device frees %llu, synchronisations %llu, "
        "retries %llu, out-of-memory %llu\n",
        device,
        cci_pl_fmt_bytes(b[0], 32, (uint64_t)s->allocated_bytes[A].current),
        cci_pl_fmt_bytes(b[1], 32, (uint64_t)s->allocated_bytes[A].peak),
        (long long)s->allocation[A].current,
        cci_pl_fmt_bytes(b[2], 32, (uint64_t)s->reserved_bytes[A].current),
        cci_pl_fmt_bytes(b[3], 32, (uint64_t)s->reserved_bytes[A].peak),
        (long long)s->segment[A].current,
        cci_pl_fmt_bytes(b[4], 32, (uint64_t)(s->reserved_bytes[A].current -
                                              s->active_bytes[A].current)),
        cci_pl_fmt_bytes(b[5], 32, s->largest_free_block),
        (unsigned long long)s->num_device_alloc, (unsigned long long)s->num_device_free,
        (unsigned long long)s->num_sync_all_streams, (unsigned long long)s->num_alloc_retries,
        (unsigned long long)s->num_ooms);
    if (n < 0)
        return -1;
    return write_all(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

int cci_preload_write_report(int fd)
{
    char head[1200];
    int n = snprintf(head, sizeof head, "libccinterpose report (pid %ld)\nconfiguration: %s\n",
                     (long)getpid(), cci_state_config_string());
    if (n < 0 || write_all(fd, head, (size_t)n < sizeof head ? (size_t)n : sizeof head - 1))
        return -1;
    for (int d = 0, end = cci_state_device_bound(); d < end; d++) {
        cci_allocator *a = cci_state_allocator_peek(d);
        if (!a)
            continue;
        cci_stats s = {.size = sizeof s, .version = CCI_STATS_VERSION};
        cci_alloc_stats(a, &s);
        if (write_device(fd, d, &s))
            return -1;
    }
    return 0;
}
