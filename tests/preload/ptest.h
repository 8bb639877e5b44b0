// SPDX-License-Identifier: MIT
// Shared helpers of the preload tests: checks that print what they verified, access to the
// preload's opt-in API and to the real (fake) runtime behind it, byte patterns, stderr capture.
#ifndef CCI_PTEST_H
#define CCI_PTEST_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ccinterpose.h"
#include "fake_cuda_runtime.h"

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (cond) {                                                                          \
            printf("ok: ");                                                                  \
            printf(__VA_ARGS__);                                                             \
            printf("\n");                                                                    \
        } else {                                                                             \
            printf("FAIL %s:%d (%s): ", __FILE__, __LINE__, #cond);                          \
            printf(__VA_ARGS__);                                                             \
            printf("\n");                                                                    \
            fflush(stdout);                                                                  \
            exit(1);                                                                         \
        }                                                                                    \
        fflush(stdout);                                                                      \
    } while (0)

// A call that must succeed; not worth an "ok" line of its own.
#define CUDA_OK(call)                                                                        \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            printf("FAIL %s:%d: %s returned %d\n", __FILE__, __LINE__, #call, (int)e_);     \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

// The driver-API twin of CUDA_OK, for tests that include fake_cuda_driver.h before this header.
#ifdef FAKE_CUDA_DRIVER_H
#define CU_OK(call)                                                                          \
    do {                                                                                     \
        CUresult r_ = (call);                                                                \
        if (r_ != CUDA_SUCCESS) {                                                            \
            printf("FAIL %s:%d: %s returned %d\n", __FILE__, __LINE__, #call, (int)r_);     \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
#endif

// A stream of the program's, created with `flags` (cudaStreamNonBlocking...); must succeed.
static inline cudaStream_t ptest_stream(unsigned flags)
{
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, flags));
    return s;
}

// n idle non-blocking streams, as PyTorch's stream pool.
static inline void ptest_make_pool(cudaStream_t *pool, int n)
{
    for (int i = 0; i < n; i++)
        pool[i] = ptest_stream(cudaStreamNonBlocking);
}

// Whether this run asked for context fences (CCI_CONTEXT_FENCES unset or not "0", as the layer
// reads it); where the driver lacks them the layer still falls back, which the test must expect.
static inline int ptest_context_fences(void)
{
    const char *v = getenv("CCI_CONTEXT_FENCES");
    return !(v && !strcmp(v, "0"));
}

static inline void ptest_sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

#ifdef FAKE_CUDA_DRIVER_H
// The fake's event and stream call counters (fake_cuda_driver.h) as they stand now.
static inline struct fakecu_event_calls ptest_event_calls(void)
{
    struct fakecu_event_calls c;
    fakecu_get_event_calls(&c);
    return c;
}
#endif

// The preload's opt-in API, looked up at run time: the tests do not link libccinterpose, they
// run under LD_PRELOAD like any application.
typedef struct ptest_api {
    int (*is_active)(void);
    int (*get_stats)(int, cci_stats *);
    int (*empty_cache)(int);
    const char *(*config_string)(void);
    int (*dump_report)(const char *);
} ptest_api;

static inline void *ptest_sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p) {
        printf("FAIL: symbol %s not found\n", name);
        exit(1);
    }
    return p;
}

#define PTEST_FN(dst, h, name) memcpy(&(dst), &(void *){ptest_sym((h), (name))}, sizeof(void *))

static inline ptest_api ptest_get_api(void)
{
    ptest_api a;
    PTEST_FN(a.is_active, RTLD_DEFAULT, "cci_is_active");
    PTEST_FN(a.get_stats, RTLD_DEFAULT, "cci_get_stats");
    PTEST_FN(a.empty_cache, RTLD_DEFAULT, "cci_empty_cache");
    PTEST_FN(a.config_string, RTLD_DEFAULT, "cci_config_string");
    PTEST_FN(a.dump_report, RTLD_DEFAULT, "cci_dump_report");
    return a;
}

static inline cci_stats ptest_stats(const ptest_api *api, int device)
{
    cci_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    if (api->get_stats(device, &s) != 0) {
        printf("FAIL: cci_get_stats(%d) failed\n", device);
        exit(1);
    }
    return s;
}

// The fake libcudart's own entry point, bypassing the preload.
static inline void *ptest_real(const char *name)
{
    void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        printf("FAIL: libcudart.so.13 not loaded\n");
        exit(1);
    }
    return ptest_sym(h, name);
}

// The fake driver's own entry point, bypassing the preload's driver level as well: the fake
// libcudart (like every real cudart) reaches the driver through lookups that the preload answers
// with its wrappers, so ptest_real's functions are intercepted there. Only glibc's own dlsym,
// found with dlvsym (a versioned lookup skips the preload's unversioned dlsym), sees the driver's
// functions as they are.
static inline void *ptest_real_driver(const char *name)
{
    void *(*glibc_dlsym)(void *, const char *) = NULL;
    void *sym = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    if (!sym)
        sym = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!sym || !h) {
        printf("FAIL: glibc's dlsym or libcuda.so.1 not found\n");
        exit(1);
    }
    memcpy(&glibc_dlsym, &sym, sizeof sym);
    void *p = glibc_dlsym(h, name);
    if (!p) {
        printf("FAIL: symbol %s not found in libcuda.so.1\n", name);
        exit(1);
    }
    return p;
}

// ---- patterns: every 8-byte word of a block depends on the block's seed and its offset ----
static inline uint64_t ptest_word(uint64_t seed, size_t i)
{
    uint64_t x = seed + 0x9e3779b97f4a7c15ull * (i + 1);
    x ^= x >> 31;
    return x * 0xbf58476d1ce4e5b9ull;
}

static inline void ptest_fill(void *p, size_t n, uint64_t seed)
{
    uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        w[i] = ptest_word(seed, i);
    memset((char *)p + n / 8 * 8, (int)(seed & 0xff), n % 8);
}

// 1 when the pattern is intact.
static inline int ptest_verify(const void *p, size_t n, uint64_t seed)
{
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i] != ptest_word(seed, i))
            return 0;
    for (size_t i = n / 8 * 8; i < n; i++)
        if (((const unsigned char *)p)[i] != (seed & 0xff))
            return 0;
    return 1;
}

static inline int ptest_all_bytes(const void *p, size_t n, unsigned char byte)
{
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != byte)
            return 0;
    return 1;
}

// ---- stderr capture: what the preload says during a call ---------------------------------
typedef struct ptest_capture {
    int saved;
    FILE *f;
} ptest_capture;

static inline ptest_capture ptest_stderr_begin(void)
{
    ptest_capture c;
    fflush(stderr);
    c.f = tmpfile();
    c.saved = dup(2);
    if (!c.f || c.saved < 0 || dup2(fileno(c.f), 2) < 0) {
        printf("FAIL: cannot capture stderr\n");
        exit(1);
    }
    return c;
}

// Restores stderr, echoes what was captured to it, and returns the number of lines that
// contain `needle` (NULL: all lines); the text goes to buf when non-NULL.
static inline int ptest_stderr_end(ptest_capture *c, const char *needle, char *buf, size_t len)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    rewind(c->f);
    char line[2048];
    int count = 0;
    size_t used = 0;
    if (buf && len)
        buf[0] = 0;
    while (fgets(line, sizeof line, c->f)) {
        fputs(line, stderr);
        if (!needle || strstr(line, needle))
            count++;
        if (buf && used + strlen(line) < len) {
            strcpy(buf + used, line);
            used += strlen(line);
        }
    }
    fclose(c->f);
    return count;
}

// Test size knob: CCI_TEST_SCALE=2 doubles the iterations.
static inline long ptest_scale(long base)
{
    const char *s = getenv("CCI_TEST_SCALE");
    double f = s ? atof(s) : 1.0;
    return f > 0 ? (long)(base * f) : base;
}

#endif
