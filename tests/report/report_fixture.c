// SPDX-License-Identifier: MIT
// Writes reports of the fixed workloads (one device each: seedfrag, mixed, misses) for the Python
// tests and for the documentation:
//   report_fixture json OUTDIR   OUTDIR/report.json, plus OUTDIR/stats.txt: "device key value"
//                                lines made from cci_alloc_stats by code of its own, so the test
//                                checks the JSON printer's key names and values independently
//   report_fixture html FILE     the HTML report
//   report_fixture html-measured FILE
//                                the HTML report with device 0's measured what-ifs and call sites
//                                filled by measured_fill below (what the preload adds at exit),
//                                so the browser test can look for known rows and frames
//   report_fixture text          the text report on stdout
//   report_fixture rank FILE R   the JSON report of rank R of a job, one device (R) running
//                                workload R mod 3, so the ranks of a job peak differently
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats_list.h"
#include "workloads.h"

#define NDEV 3
#define MIB ((uint64_t)1 << 20)

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
        // The driver calls' costs (the test names the keys it expects itself).
#define COST(field, scope) fprintf(f, "%d %s %llu\n", d, #field, (unsigned long long)st.field);
        CCI_STAT_COSTS(COST)
#undef COST
    }
    return fclose(f);
}

// Measured what-ifs for device 0, as the preload's replay would leave them: the current setting
// and three others, ranked (fewest OOMs, then lowest peak). The printer computes the percentages
// against the current row (72 vs 96 MiB: -25.0; 80: -16.7; 104: +8.3), which the test checks.
static int measured_whatif(cci_report_whatif *w)
{
    static const struct { const char *conf; uint64_t peak_mib, device_allocs; } rows[] = {
        {"expandable_segments:True", 72, 9},
        {"max_split_size_mb:64", 80, 14},
        {"garbage_collection_threshold:0.8", 104, 21},
    };
    memset(w, 0, sizeof *w);
    w->rows = calloc(sizeof rows / sizeof rows[0], sizeof *w->rows);
    if (!w->rows)
        return -1;
    w->measured = 1;
    w->events = 1234;
    w->history_cap = 1000000;
    w->seconds = 0.25;
    w->bound_seconds = 5;
    w->planned = w->replayed = 1 + sizeof rows / sizeof rows[0];
    w->current = (cci_report_whatif_row){.conf = "", .peak_reserved = 96 * MIB, .peak_allocated = 64 * MIB,
                                         .num_device_alloc = 17, .calls = {.device_allocs = 17}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cci_report_whatif_row *r = &w->rows[w->nrows++];
        snprintf(r->conf, sizeof r->conf, "%s", rows[i].conf);
        r->peak_reserved = rows[i].peak_mib * MIB;
        r->peak_allocated = 64 * MIB;
        r->num_device_alloc = rows[i].device_allocs;
        r->calls.device_allocs = rows[i].device_allocs;
        r->calls.vmm_mode = strstr(rows[i].conf, "expandable") ? 1 : 0;
        r->calls.maps = r->calls.vmm_mode ? rows[i].device_allocs : 0;
    }
    return 0;
}

// Two call sites with frames, innermost first as the preload records them. The second frame of
// the first site holds markup characters: the HTML must escape them, not render them.
static const char *const site_frames[][3] = {
    {"model.py:17 in make_buffer", "train.py:42 in <lambda>", "cci_fixture_alloc+0x1c (libfixture.so+0x1234)"},
    {"data.py:7 in load_batch", "train.py:30 in step", NULL},
};
#define NSITES 2

// One holders table: site k holds bytes[k] in blocks[k]. The frame text lives in one buffer
// (`strings`) as the snapshot expects, so snapshot_free releases it.
static int fill_holders(cci_report_holders *h, const uint64_t *bytes, const uint64_t *blocks, uint64_t reserved)
{
    size_t len = 0;
    for (int k = 0; k < NSITES; k++)
        for (int f = 0; f < 3 && site_frames[k][f]; f++)
            len += strlen(site_frames[k][f]) + 1;
    memset(h, 0, sizeof *h);
    h->list = calloc(NSITES, sizeof *h->list);
    h->strings = malloc(len);
    if (!h->list || !h->strings)
        return -1;
    char *p = h->strings;
    for (int k = 0; k < NSITES; k++) {
        cci_report_holder *x = &h->list[h->n++];
        x->bytes = bytes[k];
        x->blocks = blocks[k];
        x->first_seq = 3 + 5 * (uint64_t)k;
        x->oldest_age_s = 1.5 - k;
        for (int f = 0; f < 3 && site_frames[k][f]; f++) {
            size_t n = strlen(site_frames[k][f]) + 1;
            memcpy(p, site_frames[k][f], n);
            x->frames[x->nframes++] = p;
            p += n;
        }
        h->bytes += bytes[k];
        h->blocks += blocks[k];
    }
    h->valid = 1;
    h->reserved = reserved;
    return 0;
}

// Call sites for device 0: both tables, and every live block at exit attributed to a site (the
// first live block to site 0, the others to site 1) so the segment map's hover titles name it.
static int measured_holders(cci_report_device *d)
{
    static const uint64_t peak_bytes[NSITES] = {48 * MIB, 8 * MIB}, peak_blocks[NSITES] = {3, 2};
    uint64_t now_bytes[NSITES] = {0, 0}, now_blocks[NSITES] = {0, 0};
    size_t live = 0;
    for (size_t i = 0; i < d->now.nsegments; i++)
        for (size_t j = 0; j < d->now.segments[i].nblocks; j++)
            live += d->now.segments[i].blocks[j].state == 1;
    d->block_sites = calloc(live ? live : 1, sizeof *d->block_sites);
    if (!d->block_sites)
        return -1;
    for (size_t i = 0; i < d->now.nsegments; i++) {
        for (size_t j = 0; j < d->now.segments[i].nblocks; j++) {
            const cci_block_desc *b = &d->now.segments[i].blocks[j];
            if (b->state != 1)
                continue;
            size_t site = d->nblock_sites ? 1 : 0;
            d->block_sites[d->nblock_sites++] = (cci_report_block_site){(uintptr_t)b->addr, site};
            now_bytes[site] += b->requested;
            now_blocks[site]++;
        }
    }
    // The lookup is a binary search by address: keep the list sorted (insertion sort, few blocks).
    for (size_t i = 1; i < d->nblock_sites; i++)
        for (size_t k = i; k > 0 && d->block_sites[k - 1].addr > d->block_sites[k].addr; k--) {
            cci_report_block_site t = d->block_sites[k];
            d->block_sites[k] = d->block_sites[k - 1];
            d->block_sites[k - 1] = t;
        }
    d->stacks = 8;
    d->allocations = 20;
    if (fill_holders(&d->holders_peak, peak_bytes, peak_blocks, 96 * MIB) != 0 ||
        fill_holders(&d->holders_now, now_bytes, now_blocks, 0) != 0)
        return -1;
    // The tables are largest first: swap the two sites (and the blocks' indices) when the many
    // later blocks of site 1 outweigh the first one.
    if (now_bytes[1] > now_bytes[0]) {
        cci_report_holder t = d->holders_now.list[0];
        d->holders_now.list[0] = d->holders_now.list[1];
        d->holders_now.list[1] = t;
        for (size_t i = 0; i < d->nblock_sites; i++)
            d->block_sites[i].holder = 1 - d->block_sites[i].holder;
    }
    return 0;
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
        fprintf(stderr, "usage: report_fixture json OUTDIR | html FILE | html-measured FILE | text | rank FILE R\n");
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
    } else if ((strcmp(argv[1], "html") == 0 || strcmp(argv[1], "html-measured") == 0) && argc == 3) {
        if (strcmp(argv[1], "html-measured") == 0) {
            if (measured_whatif(&s.devices[0].whatif) != 0 || measured_holders(&s.devices[0]) != 0) {
                fprintf(stderr, "report_fixture: out of host memory\n");
                rc = 1;
            }
            cci_report_derive(&s); // the advice may now rest on the what-ifs, as at exit
        }
        FILE *f = rc ? NULL : fopen(argv[2], "w");
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
