// SPDX-License-Identifier: MIT
// The real driver functions, found once in the driver library itself.
//
// Why no lock: the table may be wanted inside a library constructor (dlsym from a constructor
// that holds the loader lock), while another thread fills it and needs that very lock for its
// dladdr/dlopen. So one thread publishes the shared copy and any thread that finds it half-built
// fills a private copy of its own instead of waiting.
#include "driver_table.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "real.h"

enum { EMPTY, FILLING, READY };
static cci_drv_table shared_table;
static _Atomic int shared_state;
static _Thread_local cci_drv_table own_table;  // a thread that lost the race to fill shared_table
static const cci_drv_table no_driver;         // every entry NULL

// Where this library lives, so an address of ours is never taken for the driver's.
static int in_this_library(const void *p)
{
    Dl_info self, other;
    return dladdr((const void *)cci_drv_get, &self) && dladdr(p, &other) &&
           self.dli_fbase == other.dli_fbase;
}

// The object that defines `sym`, if it looks like a CUDA driver (it exports cuInit and the
// resolver: a library that merely defines one of our names, e.g. a shim, is not the driver).
static void *driver_like(const void *sym)
{
    Dl_info di;
    if (!sym || in_this_library(sym) || !dladdr(sym, &di) || !di.dli_fname)
        return NULL;
    void *h = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (h && (!cci_real_dlsym(h, "cuInit") || !cci_real_dlsym(h, "cuGetProcAddress_v2")))
        h = NULL;  // pinned by NODELETE, which is harmless for a loaded library
    return h;
}

// A handle on the driver library, pinned (RTLD_NODELETE): the table must never dangle. The
// libcuda.so.1 the process loaded (every cudart loads that soname) comes first; then the object
// that `hint` lives in; then whatever defines the resolver after us in the global scope (searched
// from here, RTLD_NEXT never finds our own export).
static void *driver_handle(const void *hint)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (!h)
        h = driver_like(hint);
    if (!h)
        h = driver_like(cci_real_dlsym(RTLD_NEXT, "cuGetProcAddress_v2"));
    (void)dlerror();  // our probes' failures are not the program's errors to read
    return h;
}

static void fill(cci_drv_table *t, void *h)
{
#define CCI_X(name, params, args)                                                            \
    {                                                                                        \
        void *sym = cci_real_dlsym(h, #name);                                                \
        memcpy(&t->name, &sym, sizeof sym);                                                  \
    }
    CCI_DRV_WRAPPED(CCI_X)
    CCI_DRV_HELPERS(CCI_X)
#undef CCI_X
    (void)dlerror();  // the names an old driver lacks
}

const cci_drv_table *cci_drv_get(const void *hint)
{
    if (__builtin_expect(atomic_load_explicit(&shared_state, memory_order_acquire) == READY, 1))
        return &shared_table;
    void *h = driver_handle(hint);
    if (!h)
        return &no_driver;  // not loaded yet: ask again next time
    int expected = EMPTY;
    if (atomic_compare_exchange_strong(&shared_state, &expected, FILLING)) {
        fill(&shared_table, h);
        atomic_store_explicit(&shared_state, READY, memory_order_release);
        return &shared_table;
    }
    if (expected == READY)
        return &shared_table;
    fill(&own_table, h);
    return &own_table;
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
    if (third != 'C' && third != 'D' && third != 'G' && third != 'I' && third != 'M')
        return 0;
#define CCI_X(name_, params, args) \
    if (same(name, #name_))        \
        return 1;
    CCI_DRV_WRAPPED(CCI_X)
#undef CCI_X
    return 0;
}
