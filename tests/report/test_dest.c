// SPDX-License-Identifier: MIT
// Report destinations and formats (%p/%r/%h naming, the process rank, extensions, an explicit
// format), the dump path end to end, the OOM message's single write, the timeline's bounded
// buffer, and dumps taken while other threads allocate.
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "path_template.h"
#include "report.h"

static unsigned passed, failed;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define MiB ((size_t)1 << 20)

static char tmpdir[256];

static void test_names(void)
{
    char out[256];
    cci_path_vars v = {.pid = 123, .rank = 4, .host = "node7"};
    CHECK(cci_path_expand("r-%p-%r-%h-%%-%x.json", &v, out, sizeof out) == 0 &&
              strcmp(out, "r-123-4-node7-%-%x.json") == 0, "got '%s'", out);
    v = (cci_path_vars){.pid = 1, .rank = 0, .host = "h"};
    CHECK(cci_path_expand("trailing%", &v, out, sizeof out) == 0 && strcmp(out, "trailing%") == 0,
          "got '%s'", out);
    char small[8];
    v.pid = 123456789;
    CHECK(cci_path_expand("abc-%p", &v, small, sizeof small) == -1 && strlen(small) == sizeof small - 1,
          "overflow: '%s'", small);
    v = (cci_path_vars){.pid = 5, .rank = -1, .host = NULL};
    CHECK(cci_path_expand("t-%r-%h", &v, out, sizeof out) == 0 && strcmp(out, "t-0-unknown") == 0,
          "no rank is 0, no host 'unknown': got '%s'", out);
    CHECK(cci_path_expand("", &v, out, sizeof out) == -1, "an empty name is refused");

    // The rank comes from whoever read the environment (the preload's settings; RANK/LOCAL_RANK
    // precedence is tested in tests/preload/test_settings.c): the library reads none itself.
    cci_report_set_rank(-1);
    CHECK(cci_report_rank() == 0, "no rank");
    cci_report_set_rank(3);
    CHECK(cci_report_rank() == 3, "set rank");
    cci_report_set_rank(-1);

    CHECK(cci_report_format_for_path("a.json") == CCI_REPORT_JSON, "json");
    CHECK(cci_report_format_for_path("a.HTML") == CCI_REPORT_HTML, "HTML");
    CHECK(cci_report_format_for_path("/x/a.htm") == CCI_REPORT_HTML, "htm");
    CHECK(cci_report_format_for_path("a.txt") == CCI_REPORT_TEXT, "txt");
    CHECK(cci_report_format_for_path("a.log") == CCI_REPORT_TEXT, "log");
    CHECK(cci_report_format_for_path("d.json/report") == CCI_REPORT_TEXT, "a directory's extension");
    cci_report_format f;
    CHECK(cci_report_format_parse("JSON", &f) == 0 && f == CCI_REPORT_JSON, "parse JSON");
    CHECK(cci_report_format_parse("xml", &f) == -1, "parse xml");
}

static void test_open(void)
{
    char pattern[512], path[512], want[512];
    cci_report_format fmt;
    cci_report_set_rank(7);
    snprintf(pattern, sizeof pattern, "%s/rep-%%p-%%r.json", tmpdir);
    snprintf(want, sizeof want, "%s/rep-%ld-7.json", tmpdir, (long)getpid());
    int fd = cci_report_open_destination(pattern, NULL, &fmt, path, sizeof path);
    CHECK(fd > 2 && fmt == CCI_REPORT_JSON && strcmp(path, want) == 0, "fd %d fmt %d path '%s'", fd, fmt, path);
    cci_report_close_destination(fd);
    CHECK(access(want, F_OK) == 0, "%s not created", want);
    fd = cci_report_open_destination(pattern, "html", &fmt, path, sizeof path);
    CHECK(fd > 2 && fmt == CCI_REPORT_HTML, "explicit format wins over the extension");
    cci_report_close_destination(fd);
    fd = cci_report_open_destination(pattern, "yaml", &fmt, path, sizeof path);
    CHECK(fd == -1, "an unknown format is an error");
    fd = cci_report_open_destination(NULL, NULL, &fmt, path, sizeof path);
    CHECK(fd == 2 && fmt == CCI_REPORT_TEXT && path[0] == '\0', "no pattern: stderr, text");
    fd = cci_report_open_destination("-", "json", &fmt, path, sizeof path);
    CHECK(fd == 2 && fmt == CCI_REPORT_JSON, "'-': stderr, format still selectable");
    cci_report_set_rank(-1);
}

static int starts_with_file(const char *path, const char *prefix)
{
    char buf[64] = {0};
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n >= strlen(prefix) && memcmp(buf, prefix, strlen(prefix)) == 0;
}

static void test_dump(void)
{
    cci_config cfg;
    cci_config_default(&cfg);
    cci_sim_device *sim = cci_sim_create((size_t)1 << 30);
    cci_allocator *a = cci_allocator_create(0, &cfg, cci_sim_backend(sim));
    cci_report_timeline *tl = cci_report_timeline_create(0, CCI_TIMELINE_CLOCK_MONOTONIC);
    CHECK(cci_report_timeline_attach(tl, a) == 0, "attach");
    char pattern[512], path[512];
    snprintf(pattern, sizeof pattern, "%s/idle-%%p.txt", tmpdir);
    snprintf(path, sizeof path, "%s/idle-%ld.txt", tmpdir, (long)getpid());
    CHECK(cci_report_dump(&a, &tl, 1, pattern, NULL, 0) == 1, "idle: nothing to report");
    CHECK(access(path, F_OK) != 0, "idle: no file");
    CHECK(cci_report_dump(&a, &tl, 1, pattern, NULL, 1) == 0 && starts_with_file(path, "libccinterpose report"),
          "forced text dump");

    uintptr_t p;
    CHECK(cci_malloc(a, 5 * MiB, 0, &p) == CCI_OK, "alloc");
    static const struct { const char *name, *format, *prefix; } cases[] = {
        {"r.json", NULL, "{"}, {"r.html", NULL, "<!DOCTYPE html>"}, {"r.txt", NULL, "libccinterpose report"},
        {"r.out", "json", "{"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", tmpdir, cases[i].name);
        CHECK(cci_report_dump(&a, &tl, 1, path, cases[i].format, 0) == 0 && starts_with_file(path, cases[i].prefix),
              "%s", cases[i].name);
    }

    // The OOM message: one block, prefixed once, naming the request.
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    CHECK(cci_report_oom(fds[1], a, tl, 3 * ((size_t)1 << 30), -1) == 0, "oom write");
    close(fds[1]);
    char buf[8192];
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    buf[n > 0 ? n : 0] = '\0';
    CHECK(strncmp(buf, "ccinterpose[", 12) == 0 && strstr(buf, "CUDA out of memory. Tried to allocate 3.0 GiB.") &&
              strstr(buf, "total capacity of 1.0 GiB") && buf[strlen(buf) - 1] == '\n',
          "oom text: %s", buf);
    char *second = strstr(buf + 1, "ccinterpose[");
    CHECK(second == NULL, "the prefix appears once");

    cci_free(a, p, 0, CCI_FREE_NOW);
    cci_allocator_destroy(a, 1);
    cci_report_timeline_destroy(tl);
    cci_sim_destroy(sim);
}

// A small buffer must merge samples without ever losing a peak or the current state.
static void test_timeline(void)
{
    cci_config cfg;
    cci_config_default(&cfg);
    cfg.compact_segments = 0;  // ordinary segments: compact mode's page moves are not sampled alike
    cci_sim_device *sim = cci_sim_create((size_t)64 << 30);
    cci_allocator *a = cci_allocator_create(1, &cfg, cci_sim_backend(sim));
    cci_report_timeline *tl = cci_report_timeline_create(8, CCI_TIMELINE_CLOCK_EVENTS);
    cci_report_timeline_attach(tl, a);
    uint64_t x = 88172645463325252ull;
    uintptr_t live[64];
    size_t nlive = 0;
    for (int i = 0; i < 5000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (nlive == 64 || (nlive && x % 3 == 0)) {
            size_t k = (size_t)(x >> 8) % nlive;
            cci_free(a, live[k], 0, CCI_FREE_NOW);
            live[k] = live[--nlive];
        } else if (cci_malloc(a, (size_t)(x >> 20) % (64 * MiB) + 1, 0, &live[nlive]) == CCI_OK) {
            nlive++;
        }
        if (i == 2500)
            cci_alloc_empty_cache(a);
    }
    cci_report_snapshot s;
    CHECK(cci_report_snapshot_take(&s, &a, &tl, 1) == 0, "snapshot");
    const cci_report_device *d = &s.devices[0];
    CHECK(d->nsamples >= 4 && d->nsamples <= 9, "%zu samples", d->nsamples);
    uint64_t amax = 0, rmax = 0;
    int ordered = 1;
    for (size_t i = 0; i < d->nsamples; i++) {
        amax = d->samples[i].allocated_max > amax ? d->samples[i].allocated_max : amax;
        rmax = d->samples[i].reserved_max > rmax ? d->samples[i].reserved_max : rmax;
        ordered &= i == 0 || d->samples[i].t >= d->samples[i - 1].t;
    }
    CHECK(ordered, "samples out of order");
    CHECK(amax == (uint64_t)d->stats.allocated_bytes[CCI_POOL_ALL].peak, "allocated peak %llu vs %lld",
          (unsigned long long)amax, (long long)d->stats.allocated_bytes[CCI_POOL_ALL].peak);
    CHECK(rmax == (uint64_t)d->stats.reserved_bytes[CCI_POOL_ALL].peak, "reserved peak %llu vs %lld",
          (unsigned long long)rmax, (long long)d->stats.reserved_bytes[CCI_POOL_ALL].peak);
    const cci_timeline_sample *last = &d->samples[d->nsamples - 1];
    CHECK(last->allocated == (uint64_t)d->stats.allocated_bytes[CCI_POOL_ALL].current &&
              last->reserved == (uint64_t)d->stats.reserved_bytes[CCI_POOL_ALL].current, "last sample is now");
    CHECK(cci_report_has_activity(&s), "activity");
    cci_report_snapshot_free(&s);
    while (nlive)
        cci_free(a, live[--nlive], 0, CCI_FREE_NOW);
    cci_allocator_destroy(a, 1);
    cci_report_timeline_destroy(tl);
    cci_sim_destroy(sim);
}

typedef struct worker {
    cci_allocator *a;
    unsigned seed;
} worker;

static void *churn(void *arg)
{
    worker *w = arg;
    uintptr_t live[32];
    size_t n = 0;
    uint64_t x = w->seed * 2654435761u + 1;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (n == 32 || (n && x % 2)) {
            size_t k = (size_t)(x >> 9) % n;
            cci_free(w->a, live[k], (x >> 3) % 4 ? 0 : 1 + w->seed, CCI_FREE_NOW);
            live[k] = live[--n];
        } else if (cci_malloc(w->a, (size_t)(x >> 24) % (24 * MiB) + 1, 0, &live[n]) == CCI_OK) {
            n++;
        }
    }
    while (n)
        cci_free(w->a, live[--n], 0, CCI_FREE_NOW);
    return NULL;
}

// Reports taken while four threads allocate: the snapshot path takes the locks it needs and the
// structure stays consistent (run under -Db_sanitize=thread too).
static void test_concurrent(void)
{
    cci_config cfg;
    cci_config_default(&cfg);
    cci_sim_device *sim = cci_sim_create((size_t)64 << 30);
    cci_allocator *a = cci_allocator_create(0, &cfg, cci_sim_backend(sim));
    cci_allocator_track_peak(a, 1);
    cci_report_timeline *tl = cci_report_timeline_create(64, CCI_TIMELINE_CLOCK_MONOTONIC);
    cci_report_timeline_attach(tl, a);
    pthread_t th[4];
    worker w[4];
    for (unsigned i = 0; i < 4; i++) {
        w[i] = (worker){a, i + 1};
        pthread_create(&th[i], NULL, churn, &w[i]);
    }
    static const char *const formats[] = {"text", "json", "html"};
    int ok = 1;
    for (int i = 0; i < 60; i++)
        ok &= cci_report_dump(&a, &tl, 1, "/dev/null", formats[i % 3], 1) == 0;
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(ok, "a dump failed during the workload");
    char msg[256];
    CHECK(cci_allocator_check(a, msg, sizeof msg) == 0, "%s", msg);
    cci_allocator_destroy(a, 1);
    cci_report_timeline_destroy(tl);
    cci_sim_destroy(sim);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cci-report-test-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_names();
    test_open();
    test_dump();
    test_timeline();
    test_concurrent();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    printf("%u passed, %u failed\n", passed, failed);
    return failed ? 1 : 0;
}
