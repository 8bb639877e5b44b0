// SPDX-License-Identifier: MIT
// A user's program as the installed files see it: built by check_install.py with nothing but
// `pkg-config --cflags ccinterpose` (and the fake CUDA runtime), never linked with the preload.
// It makes a cached pair of allocations, then asks the opt-in API what it saw.
//
//   api_probe inactive     the API must answer "not active" (run without the preload)
//   api_probe active       the preload must be active and must have served the second
//                          allocation from its cache
//   api_probe exit N       as `active`, then exit with status N
//   api_probe signal       as `active`, then die of SIGTERM
// Every run prints LD_PRELOAD and the configuration string, for the driver to check.
#include <ccinterpose.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda_runtime.h"

#define CHECK(cond, what)                                                                           \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            printf("FAIL: %s\n", what);                                                             \
            return 1;                                                                               \
        }                                                                                           \
        printf("ok: %s\n", what);                                                                   \
    } while (0)

static int expect_inactive(void)
{
    // Through a pointer as well: the header's names must stay usable as function values.
    int (*is_active)(void) = cci_is_active;
    cci_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    CHECK(is_active() == 0, "cci_is_active() is 0 without the preload");
    CHECK(cci_get_stats(0, &s) == -1, "cci_get_stats() is -1 without the preload");
    CHECK(cci_empty_cache(0) == -1, "cci_empty_cache() is -1 without the preload");
    CHECK(strcmp(cci_config_string(), "") == 0, "cci_config_string() is \"\" without the preload");
    CHECK(cci_dump_report(NULL) == -1, "cci_dump_report() is -1 without the preload");
    return 0;
}

static int expect_active(void)
{
    cci_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    CHECK(cci_is_active() == 1, "cci_is_active() is 1 under the preload");
    CHECK(cci_get_stats(0, &s) == 0, "cci_get_stats(0) succeeds under the preload");
    printf("allocations %lld, device allocations %llu\n", (long long)s.allocation[CCI_POOL_ALL].allocated,
           (unsigned long long)s.num_device_alloc);
    CHECK(s.version == CCI_STATS_VERSION && s.size == sizeof s, "the statistics carry our size and version");
    CHECK(s.allocation[CCI_POOL_ALL].allocated == 2 && s.num_device_alloc == 1,
          "two allocations of 1 MiB were served by one device allocation (cached)");
    CHECK(cci_empty_cache(0) == 0, "cci_empty_cache(0) succeeds under the preload");
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "inactive";
    const char *preload = getenv("LD_PRELOAD");
    printf("LD_PRELOAD=%s\n", preload ? preload : "");
    void *p = NULL;
    for (int i = 0; i < 2; i++) {
        if (cudaMalloc(&p, (size_t)1 << 20) != cudaSuccess || cudaFree(p) != cudaSuccess) {
            printf("FAIL: cudaMalloc/cudaFree\n");
            return 1;
        }
    }
    printf("config=%s\n", cci_config_string());
    fflush(stdout);
    if (strcmp(mode, "inactive") == 0)
        return expect_inactive();
    int rc = expect_active();
    fflush(stdout);
    if (rc != 0)
        return rc;
    if (strcmp(mode, "exit") == 0 && argc > 2)
        return (int)strtol(argv[2], NULL, 10);
    if (strcmp(mode, "signal") == 0) {
        raise(SIGTERM);
        printf("FAIL: still alive after SIGTERM\n");
        return 1;
    }
    return 0;
}
