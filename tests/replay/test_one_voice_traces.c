// SPDX-License-Identifier: MIT
// One voice on the shared PyTorch traces: the exit report's decision path (the preload's: the
// sweep's measurement with the run's setting as baseline, the what-if rows, the advice derived
// from them) and `ccreplay --sweep`'s recommendation name the same configuration. The traces
// are not in CI: exit 77 (skip) where the folder is missing.
//
// usage: test_one_voice_traces DIR
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "report.h"
#include "sweep.h"

static const char *const traces[] = {"encoder.pickle.xz", "resnet.pickle.xz", "seedfrag.pickle.xz"};

// The configuration the exit report's first advice recommends ("" = the defaults or kept), or
// NULL when it names none.
static char *exit_report_choice(const cci_trace *t, char *out, size_t len)
{
    cci_config def;
    cci_config_default(&def);
    cci_sweep_plan plan = {.jobs = 2, .baseline = &def, .baseline_conf = ""};
    cci_sweep_outcome o;
    char err[256];
    if (cci_sweep_measure(t, &plan, &o, err, sizeof err) != 0) {
        fprintf(stderr, "measure: %s\n", err);
        return NULL;
    }
    cci_report_snapshot s = {.ndevices = 1, .devices = calloc(1, sizeof(cci_report_device))};
    cci_report_device *d = s.devices;
    d->stats.num_device_alloc = 1;  // some activity: otherwise the only advice is "idle"
    // The run's duration, as the preload's timeline would give it.
    d->clock = CCI_TIMELINE_CLOCK_MONOTONIC;
    d->samples = calloc(2, sizeof *d->samples);
    d->nsamples = 2;
    d->samples[1].t = t->duration_us;
    cci_report_whatif *w = &d->whatif;
    w->rows = calloc(o.n, sizeof *w->rows);
    w->measured = 1;
    w->replayed = w->planned = o.n;
    for (size_t i = 0; i < o.n; i++) {
        if (o.rows[i].is_baseline)
            cci_sweep_whatif_row(&w->current, &o.rows[i]);
        else
            cci_sweep_whatif_row(&w->rows[w->nrows++], &o.rows[i]);
    }
    cci_sweep_outcome_free(&o);
    cci_report_derive(&s);
    char *res = NULL;
    for (size_t k = 0; k < d->nadvice && !res; k++) {
        const char *text = d->advice[k].text, *p;
        if (strcmp(d->advice[k].rule, "what_if") != 0 || !text)
            continue;
        if ((p = strstr(text, "recommended: CCI_ALLOC_CONF='")) != NULL) {
            p += strlen("recommended: CCI_ALLOC_CONF='");
            snprintf(out, len, "%.*s", (int)strcspn(p, "'"), p);
            res = out;
        } else if (strstr(text, "recommended: keep") || strstr(text, "recommended: the defaults")) {
            snprintf(out, len, "%s", "");
            res = out;
        }
    }
    cci_report_snapshot_free(&s);
    return res;
}

static char *sweep_choice(const cci_trace *t, const char *name, char *out, size_t len)
{
    char *buf = NULL, err[256];
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f || cci_sweep(t, name, 0, 2, 1, f, err, sizeof err) != 0) {
        fprintf(stderr, "sweep: %s\n", f ? err : "no memstream");
        if (f)
            fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    const char *p = strstr(buf, "\"recommended\": {\"conf\": \"");
    char *res = NULL;
    if (p) {
        p += strlen("\"recommended\": {\"conf\": \"");
        snprintf(out, len, "%.*s", (int)strcspn(p, "\""), p);
        res = out;
    }
    free(buf);
    return res;
}

int main(int argc, char **argv)
{
    struct stat st;
    if (argc < 2 || stat(argv[1], &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("no shared traces: skipped\n");
        return 77;
    }
    int failures = 0;
    for (size_t i = 0; i < sizeof traces / sizeof traces[0]; i++) {
        char path[4096], err[512], a[256], b[256];
        snprintf(path, sizeof path, "%s/%s", argv[1], traces[i]);
        cci_trace t;
        if (cci_trace_load(path, &t, err, sizeof err) != 0) {
            printf("FAIL %s\n", err);
            failures++;
            continue;
        }
        const char *x = exit_report_choice(&t, a, sizeof a), *y = sweep_choice(&t, path, b, sizeof b);
        int same = x && y && !strcmp(x, y);
        printf("%s %s: exit report '%s', ccreplay --sweep '%s' (trace of %.1f s)\n", same ? "ok" : "FAIL", traces[i],
               x ? x : "(none)", y ? y : "(none)", (double)t.duration_us / 1e6);
        failures += !same;
        cci_trace_free(&t);
    }
    return failures ? 1 : 0;
}
