// SPDX-License-Identifier: MIT
// Our cuGetProcAddress, and the table that says which wrapper stands for which driver function.
//
// Every cudart copy, static ones included, finds the driver with one dlsym(libcuda,
// "cuGetProcAddress_v2") — answered with ours by dlsym_hook.c — and then ~440 lookups by base
// name ("cuMemAlloc"). The driver chooses the variant (cuMemAlloc_v2; cuMemAllocAsync_ptsz under
// the per-thread flag; nothing for a version it does not have) and we never second-guess it: the
// real resolver answers first, with the caller's flags, version and status pointer untouched, and
// only a successful answer that is the address of a function we wrap is replaced. An address we
// do not know (another ABI, a function we do not wrap) passes unchanged.
#include "resolver.h"

#include <stddef.h>
#include <string.h>

#include "hooks_driver.h"
#include "levels.h"
#include "log.h"

typedef struct substitution {
    const char *name;
    void *wrapper;
    size_t real;     // offset of the real function in cci_real_driver
    int observer;    // only observes (streams, peer access): handed out whatever the levels
} substitution;

// The stream and peer-access wrappers (CCI_REAL_DRIVER_WRAPPED_STREAMS) change nothing the
// program sees; they keep the stream registry whose rule protects the runtime level's frees too,
// so they are handed out even when intercept_level leaves the driver level off.
#define CCI_X(name, need, params, args) {#name, (void *)name, offsetof(cci_real_driver, name), 0},
#define CCI_X_OBSERVER(name, need, params, args) \
    {#name, (void *)name, offsetof(cci_real_driver, name), 1},
static const substitution table[] = {
#undef CCI_REAL_DRIVER_WRAPPED_STREAMS
#define CCI_REAL_DRIVER_WRAPPED_STREAMS(X) CCI_REAL_DRIVER_WRAPPED_STREAMS_LIST(CCI_X_OBSERVER)
    CCI_REAL_DRIVER_WRAPPED(CCI_X)
};
#undef CCI_X
#undef CCI_X_OBSERVER
#undef CCI_REAL_DRIVER_WRAPPED_STREAMS
#define CCI_REAL_DRIVER_WRAPPED_STREAMS(X) CCI_REAL_DRIVER_WRAPPED_STREAMS_LIST(X)
#define NSUBST (sizeof table / sizeof table[0])

static void *real_of(const cci_real_driver *t, const substitution *s)
{
    void *p;
    memcpy(&p, (const char *)t + s->real, sizeof p);
    return p;
}

int cci_drv_is_ours(const void *p)
{
    for (size_t i = 0; i < NSUBST; i++)
        if (table[i].wrapper == p)
            return 1;
    return 0;
}

void *cci_drv_substitute(const char *name, void *real)
{
    if (!real || cci_drv_is_ours(real))
        return real;
    int driver_level = (cci_pl_levels() & CCI_LEVEL_DRIVER) != 0;
    // The first driver library seen is ours to wrap; `real` leads to it when nothing has yet.
    const cci_real_driver *t = cci_real_drv_from(real);
    for (size_t i = 0; i < NSUBST; i++) {
        if (!driver_level && !table[i].observer)
            continue;
        if ((!name || strcmp(name, table[i].name) == 0) && real_of(t, &table[i]) == real)
            return table[i].wrapper;
    }
    return real;
}

// strcmp without libc: this runs on every dlsym of the process (see CCI_NO_SANITIZE).
CCI_NO_SANITIZE static int same(const char *a, const char *b)
{
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

CCI_NO_SANITIZE int cci_drv_is_wrapped_name(const char *name)
{
    // Every wrapped name starts "cu" and a capital letter out of these; cudnn*, cublas*, curl_*
    // and the rest of the process's lookups stop at the third character.
    if (name[0] != 'c' || name[1] != 'u')
        return 0;
    char third = name[2];
    if (third != 'C' && third != 'D' && third != 'G' && third != 'I' && third != 'M' &&
        third != 'S')
        return 0;
#define CCI_X(name_, need, params, args) \
    if (same(name, #name_))              \
        return 1;
    CCI_REAL_DRIVER_WRAPPED(CCI_X)
#undef CCI_X
    return 0;
}

// "cuMemAlloc" names cuMemAlloc_v2, "cuMemAllocAsync" names cuMemAllocAsync_ptsz.
static int is_base_of_wrapped(const char *symbol)
{
    size_t n = strlen(symbol);
    for (size_t i = 0; i < NSUBST; i++) {
        const char *rest = table[i].name + n;
        if (strncmp(table[i].name, symbol, n) == 0 &&
            (!*rest || !strcmp(rest, "_v2") || !strcmp(rest, "_ptsz")))
            return 1;
    }
    return 0;
}

static CUresult answer(CUresult rc, const char *symbol, void **pfn)
{
    if (rc != CUDA_SUCCESS || !pfn || !*pfn)
        return rc;  // errors, "not found" and "version not sufficient" pass as they are
    void *got = *pfn;
    *pfn = cci_drv_substitute(NULL, got);
    // Diagnosable on a real driver: a function we wrap answered by an address that is not its
    // export (an older ABI, or a driver that hands out internal entry points) stays uncaught.
    if (*pfn == got && cci_log_get_level() >= CCI_LOG_DEBUG && symbol &&
        (cci_pl_levels() & CCI_LEVEL_DRIVER) && !cci_drv_is_ours(got) && is_base_of_wrapped(symbol))
        cci_log(CCI_LOG_DEBUG, "cuGetProcAddress(\"%s\") answered %p, not an export we wrap; "
                "passed through unchanged", symbol, got);
    return rc;
}

// Called from any thread, any number of times, before or after our state exists: everything it
// needs (cci_real_drv, cci_pl_levels) is lock-free and starts no CUDA, so cudart's own
// initialisation may call it concurrently and our initialisation never re-enters it.
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    const cci_real_driver *t = cci_real_drv();
    if (!t->cuGetProcAddress_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    return answer(t->cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, status), symbol, pfn);
}

// The CUDA 11.3 ABI, without the status argument: what cudart 11.3–11.8 asks for when it looks
// up "cuGetProcAddress" itself with such a version.
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags)
{
    const cci_real_driver *t = cci_real_drv();
    if (t->cuGetProcAddress)
        return answer(t->cuGetProcAddress(symbol, pfn, cuda_version, flags), symbol, pfn);
    if (t->cuGetProcAddress_v2)
        return answer(t->cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, NULL), symbol, pfn);
    return CUDA_ERROR_NOT_INITIALIZED;
}
