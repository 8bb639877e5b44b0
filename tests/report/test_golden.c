// SPDX-License-Identifier: MIT
// Golden-file test of the text report and the OOM message: each fixed workload's output must match
// tests/report/golden/<workload>.txt byte for byte. CCI_REPORT_REGEN=1 rewrites the goldens
// instead (then read the diff before committing it). On a mismatch the actual output is left in
// the current directory as <name>.actual.txt.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workloads.h"

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

static int run_one(const char *dir, const char *name)
{
    workload w;
    if (workload_run(name, 0, &w) != 0) {
        workload_free(&w);
        return 1;
    }
    int failed = 0;
    if (w.oom_request) {
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
    for (int i = 2; i < argc; i++)
        failed |= run_one(argv[1], argv[i]);
    return failed;
}
