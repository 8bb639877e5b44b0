// SPDX-License-Identifier: MIT
// Golden-file test of the text report and the OOM message: each fixed workload's output must match
// tests/report/golden/<workload>.txt byte for byte. CCI_REPORT_REGEN=1 rewrites the goldens
// instead (then read the diff before committing it). On a mismatch the actual output is left in
// the current directory as <name>.actual.txt.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workloads.h"

#define CCI_MIB_T ((uint64_t)1 << 20)

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

static int spill(const char *path, const char *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len) {
        if (f)
            fclose(f);
        return -1;
    }
    return fclose(f);
}

static int compare(const char *dir, const char *name, const char *actual, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.txt", dir, name);
    const char *regen = getenv("CCI_REPORT_REGEN");
    if (regen && strcmp(regen, "1") == 0) {
        if (spill(path, actual, len) != 0) {
            fprintf(stderr, "%s: cannot write\n", path);
            return 1;
        }
        printf("%s: regenerated\n", path);
        return 0;
    }
    size_t glen = 0;
    char *golden = slurp(path, &glen);
    if (golden && glen == len && memcmp(golden, actual, len) == 0) {
        printf("%s: matches\n", name);
        free(golden);
        return 0;
    }
    char apath[4200];
    snprintf(apath, sizeof apath, "%s.actual.txt", name);
    spill(apath, actual, len);
    if (!golden) {
        fprintf(stderr, "%s: missing golden file (run with CCI_REPORT_REGEN=1)\n", path);
        return 1;
    }
    size_t line = 1, i = 0;
    while (i < len && i < glen && golden[i] == actual[i])
        line += actual[i++] == '\n';
    fprintf(stderr, "%s: differs from %s at line %zu; actual output in %s\n", name, path, line, apath);
    free(golden);
    return 1;
}

// Call sites as the preload would fill them (CCI_STACKS=8), with fixed frames and ages: the live
// blocks of the exit layout alternate between two sites, the peak table holds the same two.
static int fill_holders(cci_report_device *d)
{
    static const char *const frames[2][3] = {
        {"train.py:41 in forward", "build_weights+0x1c (model.so+0x1a2c)", "main+0x3e (trainer+0x1130)"},
        {"train.py:57 in step", "make_scratch+0x9 (model.so+0x1b04)", "main+0x52 (trainer+0x1144)"}};
    cci_report_holders *h[2] = {&d->holders_now, &d->holders_peak};
    for (int t = 0; t < 2; t++) {
        h[t]->list = calloc(2, sizeof *h[t]->list);
        if (!h[t]->list)
            return -1;
        h[t]->valid = 1;
        h[t]->n = 2;
        for (int k = 0; k < 2; k++) {
            cci_report_holder *x = &h[t]->list[k];
            x->nframes = 3;
            memcpy(x->frames, frames[k], sizeof frames[k]);
            x->first_seq = (uint64_t)(k * 40 + 3);
            x->oldest_age_s = t == 0 ? 12.5 - k : -1;
        }
    }
    size_t i = 0;
    for (size_t s = 0; s < d->now.nsegments; s++)
        for (size_t j = 0; j < d->now.segments[s].nblocks; j++) {
            const cci_block_desc *b = &d->now.segments[s].blocks[j];
            if (b->state != 1)
                continue;
            cci_report_holder *x = &d->holders_now.list[i++ % 2];
            x->bytes += b->requested;
            x->blocks++;
            d->holders_now.bytes += b->requested;
            d->holders_now.blocks++;
        }
    if (d->holders_now.list[1].bytes > d->holders_now.list[0].bytes) {  // largest first, as the preload sorts
        cci_report_holder tmp = d->holders_now.list[0];
        d->holders_now.list[0] = d->holders_now.list[1];
        d->holders_now.list[1] = tmp;
    }
    d->holders_peak.list[0].bytes = 300 * CCI_MIB_T;
    d->holders_peak.list[0].blocks = 6;
    d->holders_peak.list[1].bytes = 100 * CCI_MIB_T;
    d->holders_peak.list[1].blocks = 20;
    d->holders_peak.bytes = 400 * CCI_MIB_T;
    d->holders_peak.blocks = 26;
    d->holders_peak.reserved = d->frag_peak.reserved;
    d->stacks = 8;
    d->allocations = 180;
    return 0;
}

static int run_one(const char *dir, const char *name)
{
    workload w;
    if (workload_run(strcmp(name, "mixed-holders") == 0 ? "mixed" : name, 0, &w) != 0) {
        workload_free(&w);
        return 1;
    }
    int failed = 0;
    if (w.oom_request && strcmp(name, "mixed-holders") != 0) {
        char buf[8192];
        size_t n = cci_report_oom_format(buf, sizeof buf, w.a, w.tl, w.oom_request, -1);
        char oname[256];
        snprintf(oname, sizeof oname, "%s-oom", name);
        failed |= compare(dir, oname, buf, n);
    }
    cci_report_snapshot s;
    cci_report_timeline *tls[1] = {w.tl};
    if (cci_report_snapshot_take(&s, &w.a, tls, 1) != 0) {
        fprintf(stderr, "%s: snapshot failed\n", name);
        workload_free(&w);
        return 1;
    }
    workload_fix_process(&s);
    int with_holders = strcmp(name, "mixed-holders") == 0;
    if (with_holders && fill_holders(&s.devices[0]) != 0)
        failed = 1;
    if (with_holders) {
        // The OOM block's holder lines, through the hook the OOM formatter and the preload use.
        char *oom;
        size_t olen;
        if (cci_report_oom_holders(&s.devices[0].holders_now, 0, 5, &oom, &olen) != 0) {
            failed = 1;
        } else {
            failed |= compare(dir, "mixed-holders-oom", oom, olen);
            free(oom);
        }
    }
    char *text;
    size_t len;
    if (cci_report_render(CCI_REPORT_TEXT, &s, &text, &len) != 0) {
        failed = 1;
    } else {
        failed |= compare(dir, name, text, len);
        free(text);
    }
    cci_report_snapshot_free(&s);
    workload_free(&w);
    return failed;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_golden GOLDEN_DIR [WORKLOAD...]\n");
        return 2;
    }
    int failed = 0;
    if (argc == 2)
        for (const char *const *n = workload_names; *n; n++)
            failed |= run_one(argv[1], *n);
    if (argc == 2)
        failed |= run_one(argv[1], "mixed-holders");
    for (int i = 2; i < argc; i++)
        failed |= run_one(argv[1], argv[i]);
    return failed;
}
