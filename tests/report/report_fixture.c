// SPDX-License-Identifier: MIT
// Writes reports of the fixed workloads (one device each: seedfrag, mixed, misses) for the Python
// tests and for the documentation:
//   report_fixture json OUTDIR   OUTDIR/report.json, plus OUTDIR/stats.txt: "device key value"
//                                lines made from cci_alloc_stats by code of its own, so the test
//                                checks the JSON printer's key names and values independently
//   report_fixture html FILE     the HTML report
//   report_fixture text          the text report on stdout
//   report_fixture rank FILE R   the JSON report of rank R of a job, one device (R) running
//                                workload R mod 3, so the ranks of a job peak differently
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workloads.h"

#define NDEV 3

static void dump_stat(FILE *f, int dev, const char *name, const char *pool, const cci_stat *s)
{
    const char *fields[] = {"current", "peak", "allocated", "freed"};
    const int64_t v[] = {s->current, s->peak, s->allocated, s->freed};
    for (int i = 0; i < 4; i++) {
        if (pool)
            fprintf(f, "%d %s.%s.%s %lld\n", dev, name, pool, fields[i], (long long)v[i]);
        else
            fprintf(f, "%d %s.%s %lld\n", dev, name, fields[i], (long long)v[i]);
    }
}

static void dump_pools(FILE *f, int dev, const char *name, const cci_stat *s)
{
    dump_stat(f, dev, name, "all", &s[CCI_POOL_ALL]);
    dump_stat(f, dev, name, "small_pool", &s[CCI_POOL_SMALL]);
    dump_stat(f, dev, name, "large_pool", &s[CCI_POOL_LARGE]);
}

static int dump_stats(const char *path, cci_allocator *const *a)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    for (int d = 0; d < NDEV; d++) {
        cci_stats st;
        cci_alloc_stats(a[d], &st);
        dump_pools(f, d, "allocation", st.allocation);
        dump_pools(f, d, "segment", st.segment);
        dump_pools(f, d, "active", st.active);
        dump_pools(f, d, "inactive_split", st.inactive_split);
        dump_pools(f, d, "allocated_bytes", st.allocated_bytes);
        dump_pools(f, d, "reserved_bytes", st.reserved_bytes);
        dump_pools(f, d, "active_bytes", st.active_bytes);
        dump_pools(f, d, "inactive_split_bytes", st.inactive_split_bytes);
        dump_pools(f, d, "requested_bytes", st.requested_bytes);
        dump_stat(f, d, "oversize_allocations", NULL, &st.oversize_allocations);
        dump_stat(f, d, "oversize_segments", NULL, &st.oversize_segments);
        fprintf(f, "%d num_alloc_retries %llu\n", d, (unsigned long long)st.num_alloc_retries);
        fprintf(f, "%d num_ooms %llu\n", d, (unsigned long long)st.num_ooms);
        fprintf(f, "%d num_sync_all_streams %llu\n", d, (unsigned long long)st.num_sync_all_streams);
        fprintf(f, "%d num_device_alloc %llu\n", d, (unsigned long long)st.num_device_alloc);
        fprintf(f, "%d num_device_free %llu\n", d, (unsigned long long)st.num_device_free);
        fprintf(f, "%d max_split_size %lld\n", d,
                st.max_split_size == UINT64_MAX ? -1LL : (long long)st.max_split_size);
        fprintf(f, "%d largest_free_block %llu\n", d, (unsigned long long)st.largest_free_block);
    }
    return fclose(f);
}

// One rank of a job, as torchrun runs it: one device, the report's rank set as the preload sets it.
static int write_rank(const char *path, const char *rank_arg)
{
    char *end;
    long rank = strtol(rank_arg, &end, 10);
    if (*end || rank < 0 || rank > 4095) {
        fprintf(stderr, "report_fixture: bad rank '%s'\n", rank_arg);
        return 2;
    }
    workload w;
    if (workload_run(workload_names[rank % NDEV], (int)rank, &w) != 0)
        return 1;
    cci_report_snapshot s;
    int rc = cci_report_snapshot_take(&s, &w.a, &w.tl, 1);
    if (rc == 0) {
        workload_fix_process(&s);
        s.rank = (int)rank;
        s.pid = 4242 + rank;
        FILE *f = fopen(path, "w");
        rc = !f || cci_report_write(fileno(f), CCI_REPORT_JSON, &s) != 0;
        if (f)
            fclose(f);
        cci_report_snapshot_free(&s);
    }
    workload_free(&w);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: report_fixture json OUTDIR | html FILE | text | rank FILE R\n");
        return 2;
    }
    if (strcmp(argv[1], "rank") == 0)
        return argc == 4 ? write_rank(argv[2], argv[3]) : 2;
    workload w[NDEV];
    cci_allocator *a[NDEV];
    cci_report_timeline *tl[NDEV];
    for (int d = 0; d < NDEV; d++) {
        if (workload_run(workload_names[d], d, &w[d]) != 0)
            return 1;
        a[d] = w[d].a;
        tl[d] = w[d].tl;
    }
    cci_report_snapshot s;
    if (cci_report_snapshot_take(&s, a, tl, NDEV) != 0)
        return 1;
    workload_fix_process(&s);
    int rc = 0;
    char path[4096];
    if (strcmp(argv[1], "json") == 0 && argc == 3) {
        // Quotes, a backslash, a control character and non-ASCII bytes: the JSON must stay valid.
        snprintf(s.program, sizeof s.program, "./tr\"ai\\n\n\t\x01 \xc3\xa9");
        snprintf(path, sizeof path, "%s/stats.txt", argv[2]);
        rc |= dump_stats(path, a) != 0;
        snprintf(path, sizeof path, "%s/report.json", argv[2]);
        FILE *f = fopen(path, "w");
        rc |= !f || cci_report_write(fileno(f), CCI_REPORT_JSON, &s) != 0;
        if (f)
            fclose(f);
    } else if (strcmp(argv[1], "html") == 0 && argc == 3) {
        FILE *f = fopen(argv[2], "w");
        rc |= !f || cci_report_write(fileno(f), CCI_REPORT_HTML, &s) != 0;
        if (f)
            fclose(f);
    } else if (strcmp(argv[1], "text") == 0) {
        fflush(stdout);
        rc |= cci_report_write(1, CCI_REPORT_TEXT, &s) != 0;
    } else {
        fprintf(stderr, "report_fixture: bad arguments\n");
        rc = 2;
    }
    cci_report_snapshot_free(&s);
    for (int d = 0; d < NDEV; d++)
        workload_free(&w[d]);
    return rc;
}
