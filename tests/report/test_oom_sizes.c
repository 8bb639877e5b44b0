// SPDX-License-Identifier: MIT
// The out-of-memory message for requests no device can hold: sizes of 2^63
// bytes and more print as positive sizes, and the message calls the request impossible instead
// of saying the program "runs close to the device limit".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

static unsigned failed;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

// Asks the allocator for `size` (which fails) and formats the message the preload would print.
static void oom_text(cci_allocator *a, cci_report_timeline *tl, size_t size, char *buf, size_t buflen)
{
    uintptr_t p;
    CHECK(cci_malloc(a, size, 0, &p) == CCI_EOOM, "a %zu-byte request must fail", size);
    cci_report_oom_format(buf, buflen, a, tl, size, -1);
}

int main(void)
{
    cci_config cfg;
    cci_config_default(&cfg);
    cci_sim_device *sim = cci_sim_create((size_t)1 << 30);
    cci_allocator *a = cci_allocator_create(0, &cfg, cci_sim_backend(sim));
    cci_report_timeline *tl = cci_report_timeline_create(0, CCI_TIMELINE_CLOCK_MONOTONIC);
    CHECK(cci_report_timeline_attach(tl, a) == 0, "attach");
    char buf[8192];

    // (size_t)-1: what cudaMalloc(&p, n) receives when n was computed as -1.
    oom_text(a, tl, SIZE_MAX, buf, sizeof buf);
    CHECK(strstr(buf, "Tried to allocate 16.0 EiB.") != NULL, "SIZE_MAX: %s", buf);
    CHECK(strstr(buf, "-1 B") == NULL && strstr(buf, "-16.0") == NULL, "no negative size: %s", buf);
    CHECK(strstr(buf, "larger than the device's total capacity") != NULL, "called impossible: %s", buf);
    CHECK(strstr(buf, "close to the device limit") == NULL, "no 'close to the limit': %s", buf);

    // 2^63 exactly: the first value a signed formatter would print as "-8.0 EiB".
    oom_text(a, tl, (size_t)1 << 63, buf, sizeof buf);
    CHECK(strstr(buf, "Tried to allocate 8.0 EiB.") != NULL && strstr(buf, "-8.0") == NULL, "2^63: %s", buf);

    // A request just over the capacity is impossible too; one under it is not.
    oom_text(a, tl, ((size_t)1 << 30) + 4096, buf, sizeof buf);
    CHECK(strstr(buf, "larger than the device's total capacity") != NULL, "capacity + 4 KiB: %s", buf);
    uintptr_t hold;
    CHECK(cci_malloc(a, (size_t)700 << 20, 0, &hold) == CCI_OK, "hold 700 MiB");
    oom_text(a, tl, (size_t)512 << 20, buf, sizeof buf);
    CHECK(strstr(buf, "Tried to allocate 512.0 MiB.") != NULL &&
              strstr(buf, "larger than the device's total capacity") == NULL &&
              strstr(buf, "Even an empty cache would not make room") != NULL,
          "a possible request: %s", buf);
    cci_free(a, hold, 0, CCI_FREE_NOW);

    cci_allocator_destroy(a, 1);
    cci_report_timeline_destroy(tl);
    cci_sim_destroy(sim);
    if (failed)
        fprintf(stderr, "%u check(s) failed\n", failed);
    return failed ? 1 : 0;
}
