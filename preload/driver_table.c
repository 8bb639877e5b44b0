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

// A handle on the driver library, pinned (RTLD_NODELETE): the table must never dangle.
static void *driver_handle(const void *hint)
{
    void *h = NULL;
    Dl_info di;
    if (hint && !in_this_library(hint) && dladdr(hint, &di) && di.dli_fname)
        h = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (!h) {
        // The driver in the global scope under another name. Searched from here, RTLD_NEXT finds
        // the first definition after libccinterpose, never our own export.
        void *sym = cci_real_dlsym(RTLD_NEXT, "cuGetProcAddress_v2");
        if (sym && dladdr(sym, &di) && di.dli_fname)
            h = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    }
    if (!h)
        (void)dlerror();  // our failed probes are not the program's error to read
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

int cci_drv_is_wrapped_name(const char *name)
{
    // Every wrapped name starts "cu" and a capital letter out of these; cudnn*, cublas*, curl_*
    // and the rest of the process's lookups stop at the third character.
    if (name[0] != 'c' || name[1] != 'u' || name[2] == '\0' || !strchr("CDGIM", name[2]))
        return 0;
#define CCI_X(name_, params, args) \
    if (strcmp(name, #name_) == 0) \
        return 1;
    CCI_DRV_WRAPPED(CCI_X)
#undef CCI_X
    return 0;
}
